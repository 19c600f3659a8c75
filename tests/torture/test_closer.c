/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_closer.c - a passed file whose close never ends (a FUSE file whose
 * server does not answer FLUSH) held by one unprivileged uid: the daemon
 * goes on closing every other uid's files and connections, serving them,
 * and exits on SIGTERM, for a new daemon to serve the scope.
 *
 * Needs root (to mount FUSE, as fusermount3 or a user namespace lets any
 * user mount their own) and /dev/fuse: the tests fail without them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "cluster.h"
#include "internal.h"
#include "proto.h"

#define WAIT_MS 60000
/* Connections of another uid that end while the attacker's close waits:
 * more than the daemon lets a uid have waiting to be closed. */
#define VICTIM_CYCLES (CLOSER_PER_UID_TEST + 100)
#define CLOSER_PER_UID_TEST 1024

/* ---- a FUSE server that does not answer FLUSH ---------------------------
 *
 * In a thread of the test, mounted by root with allow_other (standing in
 * for a user's own mount). It answers everything but a FLUSH from any
 * process other than the attacker's, until let go: the attacker can close
 * its own copy (when killed), nobody else can.
 */
struct fuse_srv {
	int fd;
	atomic_int holder;        /* the attacker's pid */
	atomic_int held;          /* FLUSHes left unanswered */
	atomic_bool answer_all;
	atomic_bool stop;         /* fuse_stop(): the thread returns */
	pthread_mutex_t mu;       /* over unique[] and answer_all's change */
	uint64_t unique[64];
	char mnt[300];
	pthread_t t;
	bool mounted, running;
};

static pid_t tgid_of(pid_t tid)
{
	char path[64], line[128];
	FILE *f;
	pid_t tg = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Tgid: %d", &tg) == 1)
			break;
	fclose(f);
	return tg;
}

static void fuse_reply(int fd, uint64_t unique, int error, const void *body, size_t len)
{
	struct fuse_out_header h = { .len = (uint32_t)(sizeof(h) + len), .error = error, .unique = unique };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)body, len } };

	(void)writev(fd, iov, body ? 2 : 1);
}

static void fill_attr(struct fuse_attr *a, uint64_t ino)
{
	memset(a, 0, sizeof(*a));
	a->ino = ino;
	a->mode = ino == 1 ? (S_IFDIR | 0755) : (S_IFREG | 0666);
	a->nlink = 1;
	a->blksize = 4096;
}

static void *fuse_main_loop(void *arg)
{
	struct fuse_srv *s = arg;
	static uint8_t buf[1 << 18];

	for (;;) {
		struct pollfd p = { s->fd, POLLIN, 0 };
		struct fuse_in_header *h = (struct fuse_in_header *)buf;
		ssize_t n;

		/* Woken now and then to see whether to stop: the thread is
		 * not cancelled (AddressSanitizer takes a cancelled thread's
		 * stack for one used after its scope). */
		if (atomic_load(&s->stop))
			return NULL;
		if (poll(&p, 1, 100) == 0)
			continue;
		n = read(s->fd, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < (ssize_t)sizeof(*h))
			return NULL;
		switch (h->opcode) {
		case FUSE_INIT: {
			struct fuse_init_in *in = (void *)(h + 1);
			struct fuse_init_out o = { .major = FUSE_KERNEL_VERSION,
						   .minor = FUSE_KERNEL_MINOR_VERSION,
						   .max_readahead = in->max_readahead, .max_background = 16,
						   .congestion_threshold = 12, .max_write = 4096,
						   .time_gran = 1 };

			fuse_reply(s->fd, h->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_LOOKUP: {
			struct fuse_entry_out o = { .nodeid = 2, .generation = 1, .entry_valid = 3600,
						    .attr_valid = 3600 };

			fill_attr(&o.attr, 2);
			fuse_reply(s->fd, h->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_GETATTR: {
			struct fuse_attr_out o = { .attr_valid = 3600 };

			fill_attr(&o.attr, h->nodeid);
			fuse_reply(s->fd, h->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_OPEN: {
			struct fuse_open_out o = { .fh = 1 };

			fuse_reply(s->fd, h->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_FLUSH: {
			bool hold;

			pthread_mutex_lock(&s->mu);
			hold = !atomic_load(&s->answer_all) &&
			       tgid_of((pid_t)h->pid) != atomic_load(&s->holder) &&
			       atomic_load(&s->held) < 64;
			if (hold) {
				s->unique[atomic_load(&s->held)] = h->unique;
				atomic_fetch_add(&s->held, 1);
			}
			pthread_mutex_unlock(&s->mu);
			if (!hold)
				fuse_reply(s->fd, h->unique, 0, NULL, 0);
			break;
		}
		case FUSE_RELEASE:
			fuse_reply(s->fd, h->unique, 0, NULL, 0);
			break;
		case FUSE_FORGET:
		case FUSE_BATCH_FORGET:
		case FUSE_INTERRUPT:
			break;
		default:
			fuse_reply(s->fd, h->unique, -ENOSYS, NULL, 0);
			break;
		}
	}
}

/* Mounted at DIR/mnt, served. Fails the test where FUSE cannot be had:
 * this machine and CI have it. */
static void fuse_start(struct fuse_srv *s, const char *dir)
{
	char opts[256];

	if (geteuid() != 0)
		fail_msg("test_closer needs root (to mount FUSE)");
	if (access("/dev/fuse", R_OK | W_OK) < 0)
		fail_msg("test_closer needs /dev/fuse: %s", strerror(errno));
	snprintf(s->mnt, sizeof(s->mnt), "%s/mnt", dir);
	pthread_mutex_init(&s->mu, NULL);
	assert_int_equal(mkdir(s->mnt, 0755), 0);
	s->fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (s->fd < 0)
		fail_msg("/dev/fuse: %s", strerror(errno));
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", s->fd);
	if (mount("procreg-test", s->mnt, "fuse", MS_NOSUID | MS_NODEV, opts) < 0)
		fail_msg("mount fuse on %s: %s", s->mnt, strerror(errno));
	s->mounted = true;
	assert_int_equal(pthread_create(&s->t, NULL, fuse_main_loop, s), 0);
	s->running = true;
}

/* The FLUSHes held are answered, and every one from now on. */
static void fuse_let_go(struct fuse_srv *s)
{
	uint64_t unique[64];
	int n;

	pthread_mutex_lock(&s->mu);
	atomic_store(&s->answer_all, true);
	n = atomic_load(&s->held);
	memcpy(unique, s->unique, sizeof(unique));
	pthread_mutex_unlock(&s->mu);
	for (int k = 0; k < n; k++)
		fuse_reply(s->fd, unique[k], 0, NULL, 0);
}

/* After fuse_let_go(). */
static void fuse_stop(struct fuse_srv *s)
{
	if (s->mounted)
		umount2(s->mnt, MNT_DETACH);
	if (s->running) {
		atomic_store(&s->stop, true);
		pthread_join(s->t, NULL);
	}
	close(s->fd);
	rmdir(s->mnt);
}

/* ---- the attacker and the victim ---------------------------------------- */

struct attack {
	const struct th_user *u;
	const char *dir, *file;
	int ready;                /* a pipe's write end: a byte once passed */
};

/* As the attacker: the FUSE file opened, passed with a SYNC (which takes
 * no fd: the daemon closes the connection, and must close the file), and
 * kept open here until killed. */
static int pass_fuse_file(void *arg)
{
	const struct attack *a = arg;
	uint8_t pkt[64];
	size_t len = 0;
	int file, s;

	th_become(a->u);
	file = open(a->file, O_RDWR | O_CLOEXEC);
	if (file < 0)
		return 10;
	s = th_raw_try_connect(a->dir);
	if (s < 0 || th_raw_try_hello(s) < 0)
		return 11;
	procreg__proto_put(pkt, &len, PR_OP_SYNC, 0, 1, 0, NULL, 0, NULL, 0);
	if (th_send_fd(s, pkt, len, file) != (ssize_t)len)
		return 12;
	pause();
	return 0;
}

/* The attacker forked, its pid told to the server (its own FLUSHes are
 * answered); back once the daemon's close of its file waits. */
static pid_t attack_start(struct fuse_srv *fs, struct attack *a)
{
	pid_t kid = th_fork(pass_fuse_file, a);

	atomic_store(&fs->holder, kid);
	for (int i = 0; i < WAIT_MS / 100 && !atomic_load(&fs->held); i++)
		th_msleep(100);
	if (!atomic_load(&fs->held)) {
		kill(kid, SIGKILL);
		fail_msg("the daemon did not close the attacker's FUSE file in %d s (attacker exit %d)",
			 WAIT_MS / 1000, th_wait(kid));
	}
	return kid;
}

/* A handle that gives up after 20 s: a daemon that does not answer must
 * fail the test, not hang it. */
static procreg_t *impatient(const char *dir)
{
	PROCREG_OPTS(procreg_opts, o);

	o.dir = dir;
	o.timeout_ms = 20000;
	return procreg_open(&o);
}

struct victim {
	const struct th_user *u;
	const char *dir;
	int *served;              /* shared: connections served */
};

/* As another unprivileged user: connect, HELLO, hang up, as every
 * procreg_open() and CLI run does, VICTIM_CYCLES times, each HELLO
 * answered within 20 s; then a handle that registers, looks up and
 * removes a name. 0 if all was served. */
static int victim_main(void *arg)
{
	const struct victim *v = arg;
	procreg_t *reg;

	th_become(v->u);
	for (int i = 0; i < VICTIM_CYCLES; i++) {
		struct timeval tv = { 20, 0 };
		int s = th_raw_try_connect(v->dir);

		if (s < 0)
			return 20;
		setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (th_raw_try_hello(s) < 0)
			return 21;
		close(s);
		(*v->served)++;
	}
	reg = impatient(v->dir);
	if (!reg)
		return 22;
	if (procreg_register(reg, "victim.name", "m", 1) != 0 ||
	    procreg_lookup(reg, "victim.name", NULL) != 0 ||
	    procreg_unregister(reg, "victim.name") != 0)
		return 23;
	procreg_close(reg);
	return 0;
}


struct logwait {
	const char *log, *needle;
};

static int log_has(void *arg)
{
	const struct logwait *w = arg;

	return th_log_has(w->log, w->needle);
}

static int setup(void **state)
{
	return th_fx_start(state, NULL, NULL);
}

static int teardown(void **state)
{
	return th_fx_stop(state);
}

/*
 * One uid passes a FUSE file whose FLUSH is never answered, keeping its
 * own copy: the daemon's close of it waits for ever. Another uid's
 * connections end meanwhile, more of them than a uid may have waiting to
 * be closed: each is closed (its HELLO answered, none parked), and its
 * requests are served; so are root's. The close that waits is logged.
 * Once the attacker lets go, the daemon holds no more fds than before.
 */
static void test_held_close_one_uid(void **state)
{
	struct th_fx *f = *state;
	struct fuse_srv fs = { .fd = -1 };
	struct th_user attacker_user, victim_user;
	struct attack a = { &attacker_user, f->dir, NULL, -1 };
	int *served = th_shared(sizeof(int));
	struct victim v = { &victim_user, f->dir, served };
	struct th_fdcount c;
	char file[320], line[128];
	struct logwait slow;
	pid_t attacker, kid;
	int rc;

	th_user_new(&attacker_user);
	th_user_new(&victim_user);
	/* Warm, and holding our reader page, before the daemon's fds are
	 * counted. */
	assert_int_equal(procreg_register(f->reg, "warm", "m", 1), 0);
	assert_int_equal(procreg_lookup(f->reg, "warm", NULL), 0);
	assert_int_equal(procreg_unregister(f->reg, "warm"), 0);
	assert_int_equal(th_reader_held(f->reg, getpid()), 0);
	c = (struct th_fdcount){ f->d.pid, th_count_fds(f->d.pid) };
	fuse_start(&fs, f->dir);
	snprintf(file, sizeof(file), "%s/f", fs.mnt);
	a.file = file;
	attacker = attack_start(&fs, &a);
	printf("attacker uid %u: the daemon's close of its FUSE file waits on FLUSH\n",
	       (unsigned)attacker_user.uid);
	kid = th_fork(victim_main, &v);
	rc = th_wait(kid);
	printf("victim uid %u: %d connections served (exit %d), the attacker's close still waiting: %s\n",
	       (unsigned)victim_user.uid, *served, rc,
	       atomic_load(&fs.held) && !atomic_load(&fs.answer_all) ? "yes" : "no");
	/* Root, too. */
	assert_int_equal(procreg_register(f->reg, "root.name", "m", 1), 0);
	assert_int_equal(procreg_unregister(f->reg, "root.name"), 0);
	/* The close that waits is told, with the uid that passed the file. */
	snprintf(line, sizeof(line), "uid %u: a file it passed has taken", (unsigned)attacker_user.uid);
	slow.log = f->d.log;
	slow.needle = line;
	if (!th_until(log_has, &slow, WAIT_MS))
		rc = rc ? rc : -2;
	fuse_let_go(&fs);
	th_kill_wait(&attacker);
	if (rc == -2)
		th_daemon_dump_log(&f->d);
	if (rc == 0 && !th_until(th_fds_back, &c, WAIT_MS)) {
		th_list_fds(f->d.pid);
		rc = -1;
		printf("the daemon holds %ld fds, %ld before\n", th_count_fds(f->d.pid), c.want);
	}
	fuse_stop(&fs);
	munmap(served, sizeof(int));
	th_user_del(&victim_user);
	th_user_del(&attacker_user);
	assert_int_equal(rc, 0);
}

/* A new uid's (U, A's user) FUSE file passed to the daemon and its close
 * held (FILE, CAP bytes, filled in): the attacker's pid. The fixture's
 * handle is closed: a test then ends the daemon under it. */
static pid_t held_close(struct th_fx *f, struct fuse_srv *fs, struct attack *a,
			struct th_user *u, char *file, size_t cap)
{
	pid_t attacker;

	th_user_new(u);
	fuse_start(fs, f->dir);
	snprintf(file, cap, "%s/f", fs->mnt);
	a->file = file;
	attacker = attack_start(fs, a);
	procreg_close(f->reg);
	f->reg = NULL;
	return attacker;
}

/* A name registered, found and removed through REG: each step's result
 * in ERRS[0..3). */
static void serve_one(procreg_t *reg, int *errs)
{
	errs[0] = procreg_register(reg, "new.name", "m", 1);
	errs[1] = procreg_lookup(reg, "new.name", NULL);
	errs[2] = procreg_unregister(reg, "new.name");
}

/* What a new daemon did: RC its start's, ERRS serve_one's. */
static const char *verdict(int rc, const int *errs)
{
	return rc ? "does not start" : errs[0] || errs[1] || errs[2] ? "does not serve" : "serves";
}

/*
 * SIGTERM while the daemon's close of a uid's FUSE file waits for ever:
 * the daemon exits all the same, and a new daemon serves the scope (the
 * old one's lock is gone with it), while that close still waits.
 */
static void test_held_close_sigterm(void **state)
{
	struct th_fx *f = *state;
	struct fuse_srv fs = { .fd = -1 };
	struct th_user attacker_user;
	struct attack a = { &attacker_user, f->dir, NULL, -1 };
	struct th_daemon d2 = { 0 };
	char file[320];
	pid_t attacker;
	procreg_t *reg = NULL;
	int gone, rc, errs[3] = { -1, -1, -1 };

	attacker = held_close(f, &fs, &a, &attacker_user, file, sizeof(file));
	kill(f->d.pid, SIGTERM);
	gone = th_until(th_exited, &f->d.pid, WAIT_MS);
	printf("SIGTERM to the daemon whose close of uid %u's file waits: %s\n",
	       (unsigned)attacker_user.uid, gone ? "exited" : "did not exit");
	rc = gone ? th_daemon_start(&d2, f->dir, NULL, NULL) : -1;
	if (rc == 0 && (reg = impatient(f->dir))) {
		serve_one(reg, errs);
		procreg_close(reg);
	}
	printf("a new daemon for the scope, the close still waiting (%s): %s\n",
	       atomic_load(&fs.answer_all) ? "no" : "yes",
	       verdict(rc, errs));
	if (rc && gone)
		th_daemon_dump_log(&d2);
	fuse_let_go(&fs);
	th_kill_wait(&attacker);
	if (!gone)
		th_wait(f->d.pid);
	f->d.pid = 0;
	if (rc == 0)
		assert_int_equal(th_daemon_stop_dump(&d2), 0);
	fuse_stop(&fs);
	th_user_del(&attacker_user);
	assert_true(gone);
	assert_int_equal(rc, 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(errs[i], 0);
}

/*
 * SIGKILL (a crash) while the daemon's close of a uid's FUSE file waits:
 * no teardown closes the daemon's files, yet a new daemon serves the
 * scope at once (the lock ends with the daemon's mapping of the table,
 * not with the descriptors the held close still shares), and a handle
 * that was connected to the old one is served by the new one.
 */
static void test_held_close_sigkill(void **state)
{
	struct th_fx *f = *state;
	struct fuse_srv fs = { .fd = -1 };
	struct th_user attacker_user;
	struct attack a = { &attacker_user, f->dir, NULL, -1 };
	struct th_daemon d2 = { 0 };
	char file[320];
	pid_t attacker;
	procreg_t *reg = NULL;
	int rc, errs[3] = { -1, -1, -1 };

	attacker = held_close(f, &fs, &a, &attacker_user, file, sizeof(file));
	/* A handle connected to the daemon that dies: it carries on with
	 * the next one. */
	reg = impatient(f->dir);
	assert_non_null(reg);
	assert_int_equal(procreg_sync(reg), 0);
	th_daemon_kill(&f->d);
	rc = th_daemon_start(&d2, f->dir, NULL, NULL);
	if (rc == 0) {
		serve_one(reg, errs);
	}
	procreg_close(reg);
	printf("SIGKILL to the daemon whose close of uid %u's file waits; a new daemon, the close still waiting (%s): %s\n",
	       (unsigned)attacker_user.uid, atomic_load(&fs.answer_all) ? "no" : "yes",
	       verdict(rc, errs));
	if (rc)
		th_daemon_dump_log(&d2);
	fuse_let_go(&fs);
	th_kill_wait(&attacker);
	if (rc == 0)
		assert_int_equal(th_daemon_stop_dump(&d2), 0);
	fuse_stop(&fs);
	th_user_del(&attacker_user);
	assert_int_equal(rc, 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(errs[i], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_held_close_one_uid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_close_sigterm, setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_close_sigkill, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
