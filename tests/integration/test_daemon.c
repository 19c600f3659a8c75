/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_daemon.c - process-level tests against a real procregd: writes,
 * deaths, permissions, limits, hostile input, crash and restart.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "harness.h"
#include "internal.h"
#include "proto.h"

#define fx th_fx

static int setup(void **state)
{
	return th_fx_start(state, NULL, NULL);
}

static int teardown(void **state)
{
	return th_fx_stop(state);
}

/* A child that registers names, reports over a pipe, and waits to die. */
struct holder {
	const char *dir;
	const char *prefix;
	int count;
	int ready_fd, hold_fd;
};

/* A child's last steps: say it is ready, then block until the parent
 * closes the pipe or kills it. */
static int ready_then_hold(int ready_fd, int hold_fd)
{
	char c = 0;

	if (write(ready_fd, &c, 1) != 1)
		return 12;
	if (read(hold_fd, &c, 1) < 0)
		return 13;
	return 0;
}

static int holder_main(void *arg)
{
	struct holder *h = arg;
	procreg_t *r = th_open(h->dir);
	char name[64];
	int err;

	if (!r)
		return 10;
	for (int i = 0; i < h->count; i++) {
		snprintf(name, sizeof(name), "%s%d", h->prefix, i);
		if (procreg_register(r, name, name, strlen(name)) != 0)
			return 11;
	}
	if ((err = ready_then_hold(h->ready_fd, h->hold_fd)))
		return err;
	procreg_close(r);
	return 0;
}

/* Fork FN(ARG), whose *READY_FD (a byte when it is ready) and *HOLD_FD
 * (its end of the pipe that holds it; ours, to write or close, in
 * *HOLD_W) are set first; return once it is ready. It dies with us: each
 * child holds its siblings' pipes too, and a test that fails before it
 * kills them must not leave them waiting. */
static pid_t spawn_ready(int (*fn)(void *), void *arg, int *ready_fd, int *hold_fd, int *hold_w)
{
	int ready[2], hold[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(hold, O_CLOEXEC), 0);
	*ready_fd = ready[1];
	*hold_fd = hold[0];
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(ready[0]);
		close(hold[1]);
		_exit(fn(arg));
	}
	close(ready[1]);
	close(hold[0]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	*hold_w = hold[1];
	return pid;
}

/* SIGKILL the N children KIDS, reap them, and close their pipes HOLDS. */
static void kill_holders(const pid_t *kids, const int *holds, int n)
{
	for (int i = 0; i < n; i++)
		kill(kids[i], SIGKILL);
	for (int i = 0; i < n; i++) {
		assert_int_equal(th_wait(kids[i]), 128 + SIGKILL);
		close(holds[i]);
	}
}

static pid_t spawn_holder(const char *dir, const char *prefix, int count, int *hold_w)
{
	struct holder h = { dir, prefix, count, -1, -1 };

	return spawn_ready(holder_main, &h, &h.ready_fd, &h.hold_fd, hold_w);
}

/* ---- basic writes ----------------------------------------------------- */

static void test_register_lookup_unregister(void **state)
{
	struct fx *f = *state;
	TH_ENTRY(e);
	PROCREG_OPTS(procreg_stats, st);

	assert_int_equal(procreg_register(f->reg, "payments", "unix:/run/p.sock", 16), 0);
	assert_int_equal(procreg_lookup(f->reg, "payments", &e), 0);
	assert_int_equal(e.pid, getpid());
	assert_int_equal(e.node, 0);
	assert_int_equal(e.uid, getuid());
	assert_string_equal(e.name, "payments");
	assert_int_equal(e.meta_len, 16);
	assert_memory_equal(e.meta, "unix:/run/p.sock", 16);
	assert_true(e.registered_ns > 0);

	/* Registering a name we hold replaces its metadata. */
	assert_int_equal(procreg_register(f->reg, "payments", "v2", 2), 0);
	assert_int_equal(procreg_lookup(f->reg, "payments", &e), 0);
	assert_int_equal(e.meta_len, 2);
	assert_memory_equal(e.meta, "v2", 2);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 1);
	assert_int_equal(st.processes, 1);

	assert_int_equal(procreg_unregister(f->reg, "payments"), 0);
	assert_int_equal(procreg_lookup(f->reg, "payments", &e), -ENOENT);
	assert_int_equal(procreg_unregister(f->reg, "payments"), -ENOENT);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.processes, 0);
	assert_int_equal(st.registrations, 2);
	assert_int_equal(st.unregistrations, 1);
	assert_int_equal(st.daemon_pid, f->d.pid);
}

static void test_duplicate_refused(void **state)
{
	struct fx *f = *state;
	TH_ENTRY(e);
	int hold;
	pid_t child = spawn_holder(f->dir, "dup", 1, &hold);

	assert_int_equal(procreg_register(f->reg, "dup0", NULL, 0), -EEXIST);
	assert_int_equal(procreg_lookup(f->reg, "dup0", &e), 0);
	assert_int_equal(e.pid, child);
	close(hold);
	assert_int_equal(th_wait(child), 0);
	/* It exited without unregistering: the name goes with it. */
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "dup0", &e), -ENOENT);
	assert_int_equal(procreg_register(f->reg, "dup0", NULL, 0), 0);
}

static void test_batch(void **state)
{
	struct fx *f = *state;
	enum { N = 5000 };
	static struct procreg_op ops[N + 3];
	static char names[N][32];
	PROCREG_OPTS(procreg_stats, st);

	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "batch.%d", i);
		ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_REGISTER, .name = names[i], .meta = names[i], .meta_len = strlen(names[i]), .result = 99 };
	}
	/* Bad ops get their own errors; the rest go through. */
	ops[N] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_REGISTER, .name = "", .meta = NULL, .meta_len = 0, .result = 99 };
	ops[N + 1] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_UNREGISTER, .name = "batch.none", .meta = NULL, .meta_len = 0, .result = 99 };
	ops[N + 2] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = 42, .name = "x", .meta = NULL, .meta_len = 0, .result = 99 };
	assert_int_equal(procreg_batch(f->reg, ops, N + 3), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(ops[i].result, 0);
	assert_int_equal(ops[N].result, -EINVAL);
	assert_int_equal(ops[N + 1].result, -ENOENT);
	assert_int_equal(ops[N + 2].result, -EINVAL);
	for (int i = 0; i < N; i += 97) {
		TH_ENTRY(e);

		assert_int_equal(procreg_lookup(f->reg, names[i], &e), 0);
		assert_memory_equal(e.meta, names[i], strlen(names[i]));
	}
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, N);
	for (int i = 0; i < N; i++)
		ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_UNREGISTER, .name = names[i], .meta = NULL, .meta_len = 0, .result = 99 };
	assert_int_equal(procreg_batch(f->reg, ops, N), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(ops[i].result, 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
}

/* ---- deaths ----------------------------------------------------------- */

static void test_death_removes_names(void **state)
{
	struct fx *f = *state;
	enum { P = 10, NAMES = 5 };
	pid_t kids[P];
	int holds[P];
	char prefix[P][16], name[P * 16 + 16];
	PROCREG_OPTS(procreg_stats, st);

	for (int i = 0; i < P; i++) {
		snprintf(prefix[i], sizeof(prefix[i]), "k%d.", i);
		kids[i] = spawn_holder(f->dir, prefix[i], NAMES, &holds[i]);
	}
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, P * NAMES);
	assert_int_equal(st.processes, P);
	kill_holders(kids, holds, P);
	/* Every death before the call is processed when it returns. */
	assert_int_equal(procreg_sync(f->reg), 0);
	for (int i = 0; i < P; i++) {
		for (int k = 0; k < NAMES; k++) {
			snprintf(name, sizeof(name), "%s%d", prefix[i], k);
			assert_int_equal(procreg_lookup(f->reg, name, NULL), -ENOENT);
		}
	}
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.processes, 0);
	assert_int_equal(st.deaths, P);
}

/*
 * Idle entries (procs.c): a process whose last name goes stays watched,
 * so that its next name costs no new watch. It is then no process of the
 * table's count; a name taken again brings it back, and its death is
 * seen through the same watch; dying idle, it takes nothing with it; and
 * however many processes give their names back, the daemon keeps at most
 * 256 such watches.
 */
struct giver {
	const char *dir;
	int i;
	bool again;               /* take a second name after giving the first back */
	int ready_fd, hold_fd;
	const struct th_user *as; /* NULL: root */
};

static int giver_main(void *arg)
{
	struct giver *ch = arg;
	procreg_t *r;
	char name[32];

	if (ch->as)
		th_become(ch->as);
	r = th_open(ch->dir);
	if (!r)
		return 10;
	snprintf(name, sizeof(name), "idle.%d", ch->i);
	if (procreg_register(r, name, NULL, 0) != 0 || procreg_unregister(r, name) != 0)
		return 11;
	snprintf(name, sizeof(name), "idle.%d.again", ch->i);
	if (ch->again && procreg_register(r, name, NULL, 0) != 0)
		return 12;
	/* Without a connection: the daemon holds nothing of ours but the
	 * watch. */
	if (!ch->again)
		procreg_close(r);
	return ready_then_hold(ch->ready_fd, ch->hold_fd);
}

static pid_t spawn_giver(const char *dir, int i, bool again, const struct th_user *as, int *hold_w)
{
	struct giver ch = { dir, i, again, -1, -1, as };

	return spawn_ready(giver_main, &ch, &ch.ready_fd, &ch.hold_fd, hold_w);
}

/* Connected, then on the word from HOLD: one name. Exit 0, or 20 + the
 * registration's errno. */
static int late_main(void *arg)
{
	struct giver *ch = arg;
	procreg_t *r = th_open(ch->dir);
	char c = 0;
	int err;

	if (!r || procreg_sync(r) < 0)
		return 10;
	if (write(ch->ready_fd, &c, 1) != 1 || read(ch->hold_fd, &c, 1) != 1)
		return 11;
	err = procreg_register(r, "idle.late", NULL, 0);
	return err ? 20 - err : 0;
}

/* The lowest descriptor number PID has free (above 2). */
static long lowest_free_fd(pid_t pid)
{
	char path[64];

	for (long fd = 3;; fd++) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%ld", (int)pid, fd);
		if (access(path, F_OK) < 0)
			return fd;
	}
}

static void test_idle_owners(void **state)
{
	struct fx *f = *state;
	enum { P = 300, KEPT = 256 };
	static pid_t kids[P];
	static int holds[P];
	struct th_fdcount c = { f->d.pid, 0 };
	PROCREG_OPTS(procreg_stats, st);
	struct th_user u;
	TH_ENTRY(e);
	uint64_t deaths;
	long base;
	pid_t kid;
	int hold;

	/* Idle, then a name again: counted, and its death removes it. */
	assert_int_equal(procreg_sync(f->reg), 0);
	kid = spawn_giver(f->dir, 0, true, NULL, &hold);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.processes, 1);
	assert_int_equal(st.names, 1);
	assert_int_equal(procreg_lookup(f->reg, "idle.0.again", &e), 0);
	assert_int_equal(e.pid, kid);
	deaths = st.deaths;
	kill(kid, SIGKILL);
	assert_int_equal(th_wait(kid), 128 + SIGKILL);
	close(hold);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "idle.0.again", NULL), -ENOENT);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.processes, 0);
	assert_int_equal(st.deaths, deaths + 1);

	/* Idle ones: not counted; dying, they remove nothing, and their
	 * watches go with them. At most KEPT are kept, whoever makes them:
	 * here another uid, unprivileged, making as many as it can. */
	th_user_new(&u);
	base = th_count_fds(f->d.pid);
	for (int i = 0; i < P; i++)
		kids[i] = spawn_giver(f->dir, i + 1, false, &u, &holds[i]);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.processes, 0);
	assert_int_equal(st.names, 0);
	c.want = base + KEPT;
	if (!th_until(th_fds_back, &c, 10000)) {
		th_list_fds(f->d.pid);
		fail_msg("the daemon holds %ld fds with %d idle processes, %ld before", th_count_fds(f->d.pid), P, base);
	}
	/* Out of descriptors, a name is worth more than an idle watch: a
	 * connected process registers with the daemon allowed no new fd.
	 * The test lowers the daemon's limit: its own (root) daemon's, not
	 * the system user's, whose credentials changed. */
	if (th_daemon_user()) {
		printf("idle owners: the daemon out of fds is the root run's case\n");
	} else {
		struct giver late = { f->dir, 0, false, -1, -1, NULL };
		struct rlimit old, low;
		int go, status;

		kid = spawn_ready(late_main, &late, &late.ready_fd, &late.hold_fd, &go);
		assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, NULL, &old), 0);
		low = (struct rlimit){ (rlim_t)lowest_free_fd(f->d.pid), old.rlim_max };
		assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, &low, NULL), 0);
		assert_int_equal(write(go, "g", 1), 1);
		status = th_wait(kid);
		assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, &old, NULL), 0);
		close(go);
		if (status)
			fail_msg("registering with the daemon out of fds: exit %d (20 + errno)", status);
		assert_int_equal(procreg_sync(f->reg), 0);
		assert_int_equal(procreg_lookup(f->reg, "idle.late", NULL), -ENOENT);
		deaths++; /* it died holding the name */
	}
	kill_holders(kids, holds, P);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.processes, 0);
	assert_int_equal(st.deaths, deaths + 1);
	c.want = base;
	if (!th_until(th_fds_back, &c, 10000)) {
		th_list_fds(f->d.pid);
		fail_msg("the daemon holds %ld fds once the idle processes died, %ld before", th_count_fds(f->d.pid), base);
	}
	th_user_del(&u);
}

static int exec_child(void *arg)
{
	/* A registered process that execs keeps its names: same pid, same
	 * process. */
	procreg_t *r = th_open(arg);

	if (!r || procreg_register(r, "execd", "before", 6) != 0)
		return 20;
	procreg_close(r);
	execl("/bin/sleep", "sleep", "30", (char *)NULL);
	return 21;
}

static int has_name(void *arg)
{
	void **a = arg;

	return procreg_lookup(a[0], a[1], NULL) == 0;
}

static void test_names_survive_exec(void **state)
{
	struct fx *f = *state;
	pid_t kid = th_fork(exec_child, f->dir);
	void *args[2] = { f->reg, "execd" };
	TH_ENTRY(e);
	char comm[64] = "";
	char path[64];
	int fd;

	assert_true(th_until(has_name, args, 10000));
	/* Wait for the exec to have happened, then check the name is still
	 * there and still that pid's. */
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)kid);
	for (int i = 0; i < 10000 && strncmp(comm, "sleep", 5); i++) {
		fd = open(path, O_RDONLY);
		if (fd >= 0) {
			ssize_t n = read(fd, comm, sizeof(comm) - 1);
			comm[n > 0 ? n : 0] = 0;
			close(fd);
		}
		th_msleep(1);
	}
	assert_string_equal(comm, "sleep\n");
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "execd", &e), 0);
	assert_int_equal(e.pid, kid);
	kill(kid, SIGKILL);
	th_wait(kid);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "execd", NULL), -ENOENT);
}

/* ---- register another process ----------------------------------------- */

struct parked_thread {
	int pipe[2];
	pid_t tid;
};

static void *park_thread(void *arg)
{
	struct parked_thread *t = arg;
	char b;

	__atomic_store_n(&t->tid, gettid(), __ATOMIC_RELEASE);
	(void)read(t->pipe[0], &b, 1);
	return NULL;
}

static int thread_started(void *arg)
{
	return __atomic_load_n(&((struct parked_thread *)arg)->tid, __ATOMIC_ACQUIRE) != 0;
}

/* A pidfd of one of our threads (PIDFD_THREAD, kernels from 6.9) names a
 * thread, not a process: refused. */
static void thread_pidfd_refused(procreg_t *reg)
{
	struct parked_thread t = { .tid = 0 };
	pthread_t th;
	int fd;

	assert_int_equal(pipe2(t.pipe, O_CLOEXEC), 0);
	assert_int_equal(pthread_create(&th, NULL, park_thread, &t), 0);
	assert_true(th_until(thread_started, &t, 10000));
	fd = (int)syscall(SYS_pidfd_open, t.tid, O_EXCL /* PIDFD_THREAD */);
	if (fd >= 0)
		assert_int_equal(procreg_register_pidfd(reg, fd, "thread", NULL, 0), -EBADF);
	else
		printf("no thread pidfds on this kernel (pidfd_open: %s)\n", strerror(errno));
	assert_int_equal(write(t.pipe[1], "", 1), 1);
	pthread_join(th, NULL);
	if (fd >= 0)
		close(fd);
	close(t.pipe[0]);
	close(t.pipe[1]);
}

static void test_register_pidfd(void **state)
{
	struct fx *f = *state;
	TH_ENTRY(e);
	pid_t kid = fork();
	int pidfd;

	if (kid == 0) {
		/* Gone with the test process, should a failure skip the
		 * kill below. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		pause();
		_exit(0);
	}
	pidfd = (int)syscall(SYS_pidfd_open, kid, 0);
	assert_true(pidfd >= 0);
	assert_int_equal(procreg_register_pidfd(f->reg, pidfd, "worker", "w", 1), 0);
	assert_int_equal(procreg_lookup(f->reg, "worker", &e), 0);
	assert_int_equal(e.pid, kid);
	assert_int_equal(procreg_register_pidfd(f->reg, -1, "x", NULL, 0), -EBADF);
	/* A descriptor that is not a pidfd. */
	assert_int_equal(procreg_register_pidfd(f->reg, 0, "x", NULL, 0), -EBADF);
	thread_pidfd_refused(f->reg);
	kill(kid, SIGKILL);
	th_wait(kid);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "worker", NULL), -ENOENT);
	/* An exited process cannot be registered. */
	assert_int_equal(procreg_register_pidfd(f->reg, pidfd, "worker", NULL, 0), -ESRCH);
	close(pidfd);
}

struct other_uid {
	const char *dir;
	pid_t victim;
	struct th_user u;
};

static int as_nobody(void *arg)
{
	struct other_uid *o = arg;
	procreg_t *r;
	TH_ENTRY(e);
	int pidfd;

	th_become(&o->u);
	if (getuid() != o->u.uid)
		return 30;
	r = th_open(o->dir);
	if (!r)
		return 31;
	/* Reading is open to everyone. */
	if (procreg_lookup(r, "rootname", &e) != 0 || e.uid != 0)
		return 32;
	/* Another uid's name: neither removed nor taken. */
	if (procreg_unregister(r, "rootname") != -EPERM)
		return 33;
	if (procreg_register(r, "rootname", NULL, 0) != -EEXIST)
		return 34;
	/* Another uid's process: not registrable, even with its pidfd. */
	pidfd = (int)syscall(SYS_pidfd_open, o->victim, 0);
	if (pidfd < 0)
		return 35;
	if (procreg_register_pidfd(r, pidfd, "stolen", NULL, 0) != -EPERM)
		return 36;
	/* Its own name works. */
	if (procreg_register(r, "nobodys", NULL, 0) != 0)
		return 37;
	procreg_close(r);
	return 0;
}

static void test_other_uid_refused(void **state)
{
	struct fx *f = *state;
	struct other_uid o = { f->dir, 0, { 0 } };
	TH_ENTRY(e);
	int hold;

	th_user_new(&o.u);
	assert_int_equal(procreg_register(f->reg, "rootname", NULL, 0), 0);
	o.victim = spawn_holder(f->dir, "victim", 1, &hold);
	assert_int_equal(th_wait(th_fork(as_nobody, &o)), 0);
	assert_int_equal(procreg_lookup(f->reg, "rootname", &e), 0);
	assert_int_equal(e.pid, getpid());
	assert_int_equal(procreg_lookup(f->reg, "stolen", NULL), -ENOENT);
	/* Root may remove anyone's name. */
	assert_int_equal(procreg_unregister(f->reg, "victim0"), 0);
	close(hold);
	th_wait(o.victim);
	th_user_del(&o.u);
}

/* ---- limits ----------------------------------------------------------- */

static void test_name_and_meta_limits(void **state)
{
	struct fx *f = *state;
	char name[PROCREG_NAME_MAX + 2];
	static unsigned char meta[PROCREG_META_MAX + 1];
	TH_ENTRY(e);

	memset(name, 'n', sizeof(name));
	name[PROCREG_NAME_MAX] = 0;
	assert_int_equal(procreg_register(f->reg, name, meta, PROCREG_META_MAX), 0);
	assert_int_equal(procreg_lookup(f->reg, name, &e), 0);
	assert_int_equal(e.meta_len, PROCREG_META_MAX);
	name[PROCREG_NAME_MAX] = 'n';
	name[PROCREG_NAME_MAX + 1] = 0;
	assert_int_equal(procreg_register(f->reg, name, NULL, 0), -ENAMETOOLONG);
	assert_int_equal(procreg_lookup(f->reg, name, NULL), -ENAMETOOLONG);
	assert_int_equal(procreg_register(f->reg, "m", meta, PROCREG_META_MAX + 1), -EMSGSIZE);
	assert_int_equal(procreg_register(f->reg, "", NULL, 0), -EINVAL);
	assert_int_equal(procreg_register(f->reg, NULL, NULL, 0), -EINVAL);
	assert_int_equal(procreg_register(f->reg, "m", NULL, 3), -EINVAL);
	assert_int_equal(procreg_lookup(f->reg, "", NULL), -EINVAL);
}

static int setup_small(void **state)
{
	static const char *const args[] = { "--max-names-per-proc", "10", "--max-clients", "3",
					    "--max-size", "2M", NULL };
	return th_fx_start(state, args, NULL);
}

static int setup_few_readers(void **state)
{
	static const char *const args[] = { "--max-readers", "3", NULL };
	return th_fx_start(state, args, NULL);
}

static void test_names_per_process(void **state)
{
	struct fx *f = *state;
	char name[32];

	for (int i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), "q%d", i);
		assert_int_equal(procreg_register(f->reg, name, NULL, 0), 0);
	}
	assert_int_equal(procreg_register(f->reg, "q10", NULL, 0), -EDQUOT);
	/* Replacing one we hold is not a new name. */
	assert_int_equal(procreg_register(f->reg, "q3", "x", 1), 0);
	assert_int_equal(procreg_unregister(f->reg, "q0"), 0);
	assert_int_equal(procreg_register(f->reg, "q10", NULL, 0), 0);
}

/*
 * The daemon keeps each process's names in a list, and where each record
 * sits in its owner's list: an unregistration swaps the list's last name
 * into the hole, a metadata update puts the new record in the old one's
 * place. Two processes churn their names side by side (their records
 * interleave in the table), then the per-process limit, each unregistration
 * and each death must still agree with the names they hold: a list that
 * lost track of a record would keep counting it against the limit, and
 * at the death would leave it behind or take another's.
 */
enum { CHURN_LIMIT = 200, CHURN_FIRST = 198, CHURN_DROPPED = 100 };
static const char *const churn_args[] = { "--max-names-per-proc", "200", NULL };
/* What fits once half the first names and one membership are gone. */
#define CHURN_MORE (CHURN_LIMIT - (CHURN_FIRST - CHURN_DROPPED) - 1)

struct churner {
	const char *dir;
	char prefix;
	int ready_fd, go_fd;    /* a byte out when a phase is done; one in to go on */
};

/* The first names' order of removal: a permutation of 0..CHURN_FIRST-1. */
static int churn_victim(int i)
{
	return (i * 5 + 3) % CHURN_FIRST;
}

static bool churn_dropped(int k)
{
	for (int i = 0; i < CHURN_DROPPED; i++)
		if (churn_victim(i) == k)
			return true;
	return false;
}

static int churn_reg(procreg_t *r, char prefix, const char *kind, int k, const char *meta)
{
	char name[32];

	snprintf(name, sizeof(name), "%c.%s%d", prefix, kind, k);
	return procreg_register(r, name, meta, strlen(meta));
}

/* N names of KIND registered, then the limit: 0, or -1. */
static int churn_fill(procreg_t *r, char prefix, const char *kind, int n, const char *meta)
{
	for (int k = 0; k < n; k++)
		if (churn_reg(r, prefix, kind, k, meta) != 0)
			return -1;
	return churn_reg(r, prefix, "x", 0, meta) == -EDQUOT ? 0 : -1;
}

static int churner_main(void *arg)
{
	struct churner *c = arg;
	procreg_t *r = th_open(c->dir);
	char name[32], group[16], b = 0;
	int k;

	if (!r)
		return 10;
	snprintf(group, sizeof(group), "g.%c", c->prefix);
	/* 198 names and two memberships: the limit. */
	for (k = 0; k < CHURN_FIRST; k++)
		if (churn_reg(r, c->prefix, "n", k, "v1") != 0)
			return 11;
	if (procreg_join(r, group, NULL, 0) != 0 || procreg_join(r, "g.both", NULL, 0) != 0)
		return 12;
	if (churn_reg(r, c->prefix, "x", 0, "v1") != -EDQUOT)
		return 13;
	/* Half of them go, in an order that moves names all over the list;
	 * the rest get new metadata (a new record in the old one's place). */
	for (int i = 0; i < CHURN_DROPPED; i++) {
		snprintf(name, sizeof(name), "%c.n%d", c->prefix, churn_victim(i));
		if (procreg_unregister(r, name) != 0)
			return 14;
	}
	for (k = 0; k < CHURN_FIRST; k++)
		if (!churn_dropped(k) && churn_reg(r, c->prefix, "n", k, "v2") != 0)
			return 15;
	if (procreg_leave(r, group) != 0)
		return 16;
	/* 98 names and one membership: exactly 101 more fit. */
	if (churn_fill(r, c->prefix, "m", CHURN_MORE, "v1") != 0)
		return 17;
	if (write(c->ready_fd, &b, 1) != 1 || read(c->go_fd, &b, 1) != 1)
		return 18;
	/* Everything goes, one by one, in yet another order: then the whole
	 * limit fits again. */
	for (k = CHURN_FIRST - 1; k >= 0; k--) {
		snprintf(name, sizeof(name), "%c.n%d", c->prefix, k);
		if (procreg_unregister(r, name) != (churn_dropped(k) ? -ENOENT : 0))
			return 19;
	}
	for (k = 0; k < CHURN_MORE; k++) {
		snprintf(name, sizeof(name), "%c.m%d", c->prefix, k);
		if (procreg_unregister(r, name) != 0)
			return 20;
	}
	if (procreg_leave(r, "g.both") != 0)
		return 21;
	if (churn_fill(r, c->prefix, "z", CHURN_LIMIT, "v3") != 0)
		return 22;
	if (write(c->ready_fd, &b, 1) != 1 || read(c->go_fd, &b, 1) != 1)
		return 23;
	procreg_close(r);
	return 0;
}

/* Whether NAME is registered, to a process with metadata META. */
static bool churn_has(procreg_t *reg, char prefix, const char *kind, int k, const char *meta)
{
	PROCREG_OPTS(procreg_entry, e);
	char name[32], got[8] = "";

	snprintf(name, sizeof(name), "%c.%s%d", prefix, kind, k);
	e.meta = got;
	e.meta_size = sizeof(got) - 1;
	if (procreg_lookup(reg, name, &e) != 0)
		return false;
	return e.meta_len == strlen(meta) && memcmp(got, meta, e.meta_len) == 0;
}

static void check_churned(procreg_t *reg, char prefix)
{
	for (int k = 0; k < CHURN_FIRST; k++) {
		if (churn_dropped(k))
			assert_false(churn_has(reg, prefix, "n", k, "v1") ||
				     churn_has(reg, prefix, "n", k, "v2"));
		else
			assert_true(churn_has(reg, prefix, "n", k, "v2"));
	}
	for (int k = 0; k < CHURN_MORE; k++)
		assert_true(churn_has(reg, prefix, "m", k, "v1"));
}

/* The churners, for the teardown to kill if an assertion ends the test
 * while they wait for it. */
static pid_t churn_kid[2];

static void test_churn_then_death(void **state)
{
	struct fx *f = *state;
	struct churner c[2] = { { f->dir, 'a', -1, -1 }, { f->dir, 'b', -1, -1 } };
	int ready[2][2], go[2][2];
	pid_t *kid = churn_kid;
	PROCREG_OPTS(procreg_stats, st);
	char b = 0;

	/* Each child's pipes made just before it, its ends closed here right
	 * after: a child's "ready" pipe has no writer but that child, and a
	 * child that fails shows as end of file, not as a hang. */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pipe2(ready[i], O_CLOEXEC), 0);
		assert_int_equal(pipe2(go[i], O_CLOEXEC), 0);
		c[i].ready_fd = ready[i][1];
		c[i].go_fd = go[i][0];
		kid[i] = th_fork(churner_main, &c[i]);
		close(ready[i][1]);
		close(go[i][0]);
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(read(ready[i][0], &b, 1), 1);
	check_churned(f->reg, 'a');
	check_churned(f->reg, 'b');
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 2 * (CHURN_LIMIT - 1));

	/* A new daemon rebuilds every list from the table: what follows
	 * holds for its lists as for the ones it replaces. */
	th_daemon_kill(&f->d);
	assert_int_equal(th_daemon_start(&f->d, f->dir, churn_args, NULL), 0);
	check_churned(f->reg, 'a');
	check_churned(f->reg, 'b');

	/* a dies: every name of its goes, and nothing of b's. */
	kill(kid[0], SIGKILL);
	assert_int_equal(th_wait(kid[0]), 128 + SIGKILL);
	kid[0] = 0;
	assert_int_equal(procreg_sync(f->reg), 0);
	for (int k = 0; k < CHURN_FIRST; k++)
		assert_false(churn_has(f->reg, 'a', "n", k, "v2"));
	for (int k = 0; k < CHURN_MORE; k++)
		assert_false(churn_has(f->reg, 'a', "m", k, "v1"));
	check_churned(f->reg, 'b');
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, CHURN_LIMIT - 1);
	assert_int_equal(st.processes, 1);

	/* b empties its list and fills it to the limit again. */
	assert_int_equal(write(go[1][1], &b, 1), 1);
	assert_int_equal(read(ready[1][0], &b, 1), 1);
	for (int k = 0; k < CHURN_LIMIT; k++)
		assert_true(churn_has(f->reg, 'b', "z", k, "v3"));
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, CHURN_LIMIT);
	assert_int_equal(write(go[1][1], &b, 1), 1);
	assert_int_equal(th_wait(kid[1]), 0);
	kid[1] = 0;
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.processes, 0);
	for (int i = 0; i < 2; i++) {
		close(go[i][1]);
		close(ready[i][0]);
	}
}

static int setup_churn(void **state)
{
	return th_fx_start(state, churn_args, NULL);
}

static int teardown_churn(void **state)
{
	for (int i = 0; i < 2; i++) {
		if (churn_kid[i] > 0) {
			kill(churn_kid[i], SIGKILL);
			th_wait(churn_kid[i]);
		}
		churn_kid[i] = 0;
	}
	return teardown(state);
}

/* ---- per-uid quotas ---------------------------------------------------- */

static int setup_uid_quota(void **state)
{
	static const char *const args[] = { "--max-names-per-uid", "20",
					    "--max-clients-per-uid", "2", NULL };
	return th_fx_start(state, args, NULL);
}

struct quota_kid {
	const char *dir;
	int ready_fd;   /* A writes a byte when it holds its quota */
	int hold_fd;    /* and waits for EOF here */
};

/* As uid 65534, with a second process of the same uid: 20 names and
 * memberships between them and two connections, then nothing more. */
static int quota_hog(void *arg)
{
	struct quota_kid *k = arg;
	int gready[2], ghold[2], err;
	procreg_t *r, *r3;
	char name[32], c = 0;
	pid_t g;

	if (setgid(65534) < 0 || setuid(65534) < 0)
		return 40;
	r = th_open(k->dir);
	if (!r)
		return 41;
	for (int i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), "hog.a%d", i);
		if (procreg_register(r, name, NULL, 0) != 0)
			return 42;
	}
	if (pipe2(gready, O_CLOEXEC) < 0 || pipe2(ghold, O_CLOEXEC) < 0)
		return 43;
	g = fork();
	if (g == 0) {
		procreg_t *rg = th_open(k->dir);

		close(ghold[1]);
		for (int i = 0; i < 10; i++) {
			snprintf(name, sizeof(name), "hog.b%d", i);
			if (!rg || procreg_register(rg, name, NULL, 0) != 0)
				_exit(1);
		}
		if (write(gready[1], &c, 1) != 1 || read(ghold[0], &c, 1) < 0)
			_exit(2);
		_exit(0);
	}
	close(ghold[0]);
	close(gready[1]);
	if (read(gready[0], &c, 1) != 1)
		return 44;
	/* The uid holds 20 between two processes: a 21st, by either, fails. */
	if (procreg_register(r, "hog.a10", NULL, 0) != -EDQUOT)
		return 45;
	if (procreg_join(r, "hog.group", NULL, 0) != -EDQUOT)
		return 46;
	/* Replacing one it holds is not a new name. */
	if (procreg_register(r, "hog.a3", "x", 1) != 0)
		return 47;
	/* A third connection of the uid is refused. */
	r3 = th_open(k->dir);
	if (!r3)
		return 48;
	err = procreg_register(r3, "hog.c0", NULL, 0);
	if (err == 0 || err == -EDQUOT)
		return 49;
	procreg_close(r3);
	if (write(k->ready_fd, &c, 1) != 1 || read(k->hold_fd, &c, 1) < 0)
		return 50;
	/* The other process exits: its ten go, and room comes back. */
	close(ghold[1]);
	if (th_wait(g) != 0)
		return 51;
	if (procreg_sync(r) != 0 || procreg_register(r, "hog.a10", NULL, 0) != 0)
		return 52;
	procreg_close(r);
	return 0;
}

/* Another unprivileged uid, while 65534 holds its whole quota. */
static int quota_other(void *arg)
{
	const char *dir = arg;
	procreg_t *r, *r2;
	char name[32];

	if (setgid(65533) < 0 || setuid(65533) < 0)
		return 60;
	r = th_open(dir);
	r2 = th_open(dir);
	if (!r || !r2)
		return 61;
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "other.%d", i);
		if (procreg_register(i % 2 ? r : r2, name, NULL, 0) != 0)
			return 62;
	}
	if (procreg_register(r, "other.20", NULL, 0) != -EDQUOT)
		return 63;
	procreg_close(r);
	procreg_close(r2);
	return 0;
}

static void test_uid_quotas(void **state)
{
	struct fx *f = *state;
	int ready[2], hold[2];
	struct quota_kid k;
	char log[8192] = "", c;
	pid_t hog, other;
	FILE *lf;
	size_t n;

	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(hold, O_CLOEXEC), 0);
	k = (struct quota_kid){ f->dir, ready[1], hold[0] };
	hog = fork();
	assert_true(hog >= 0);
	if (hog == 0) {
		close(ready[0]);
		close(hold[1]);
		_exit(quota_hog(&k));
	}
	close(ready[1]);
	close(hold[0]);
	if (read(ready[0], &c, 1) != 1) {
		th_daemon_dump_log(&f->d);
		fail_msg("quota hog: status %d", th_wait(hog));
	}
	/* 65534 is at both quotas: another uid is not held back by it... */
	other = th_fork(quota_other, f->dir);
	assert_int_equal(th_wait(other), 0);
	/* ...nor is root, which has no quota. */
	for (int i = 0; i < 30; i++) {
		char name[32];

		snprintf(name, sizeof(name), "root.%d", i);
		assert_int_equal(procreg_register(f->reg, name, NULL, 0), 0);
	}
	close(hold[1]);
	assert_int_equal(th_wait(hog), 0);
	close(ready[0]);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "hog.a3", NULL), -ENOENT);
	lf = fopen(f->d.log, "r");
	assert_non_null(lf);
	n = fread(log, 1, sizeof(log) - 1, lf);
	log[n] = 0;
	fclose(lf);
	assert_non_null(strstr(log, "client refused: uid 65534 has 2 connections (--max-clients-per-uid)"));
}

static pid_t keeper(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		pause();
		_exit(0);
	}
	assert_true(pid > 0);
	return pid;
}

static void test_table_full(void **state)
{
	struct fx *f = *state;
	static unsigned char meta[PROCREG_META_MAX];
	static pid_t keepers[4096];
	PROCREG_OPTS(procreg_stats, st);
	int nk = 0, pidfd = -1, full = 0;

	/* 2 MiB of table, 1 KiB of metadata a name, ten names a process
	 * (--max-names-per-proc): long-lived children own the names. */
	for (int i = 0; i < 40000 && !full; i++) {
		char name[32];
		int err;

		if (i % 10 == 0) {
			if (pidfd >= 0)
				close(pidfd);
			assert_true(nk < 4096);
			keepers[nk] = keeper();
			pidfd = (int)syscall(SYS_pidfd_open, keepers[nk++], 0);
			assert_true(pidfd >= 0);
		}
		snprintf(name, sizeof(name), "fill.%d", i);
		err = procreg_register_pidfd(f->reg, pidfd, name, meta, sizeof(meta));
		if (err == -ENOSPC)
			full = 1;
		else
			assert_int_equal(err, 0);
	}
	close(pidfd);
	assert_true(full);
	procreg_stats(f->reg, &st);
	assert_true(st.names > 1000);
	assert_true(st.arena_top <= st.arena_size);
	/* Full is a refusal, not damage: reads and removals still work. */
	assert_int_equal(procreg_lookup(f->reg, "fill.0", NULL), 0);
	assert_int_equal(procreg_unregister(f->reg, "fill.0"), 0);
	for (int i = 0; i < nk; i++)
		kill(keepers[i], SIGKILL);
	for (int i = 0; i < nk; i++)
		th_wait(keepers[i]);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	/* The space came back: a big name fits again. */
	assert_int_equal(procreg_register(f->reg, "again", meta, sizeof(meta)), 0);
}

static void test_max_clients(void **state)
{
	struct fx *f = *state;
	procreg_t *r[3];

	/* f->reg has not connected yet: three more handles, three clients. */
	for (int i = 0; i < 3; i++) {
		r[i] = th_open(f->dir);
		assert_non_null(r[i]);
		assert_int_equal(procreg_sync(r[i]), 0);
	}
	assert_int_not_equal(procreg_sync(f->reg), 0);
	procreg_close(r[0]);
	/* A slot frees when a client leaves. */
	for (int i = 0; i < 1000 && procreg_sync(f->reg) != 0; i++)
		th_msleep(1);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_close(r[1]);
	procreg_close(r[2]);
}

/* A reader process: a lookup (its page goes to the daemon), its own
 * name registered and found; held; then it reads on. */
struct reader_kid {
	const char *dir;
	int n;
};

static int reader_kid(void *p, int phase)
{
	static procreg_t *r;
	struct reader_kid *a = p;
	char name[32];

	snprintf(name, sizeof(name), "reader%d", a->n);
	if (phase == 0) {
		r = th_open(a->dir);
		if (!r)
			return 10;
		if (procreg_lookup(r, name, NULL) != -ENOENT)
			return 11;
		if (procreg_register(r, name, NULL, 0) != 0)
			return 12;
		return procreg_lookup(r, name, NULL) == 0 ? 0 : 13;
	}
	/* Whether or not the daemon waits for it, it reads right. */
	for (int i = 0; i < 1000; i++)
		if (procreg_lookup(r, name, NULL) != 0 || procreg_lookup(r, "nobody", NULL) != -ENOENT)
			return 16;
	procreg_close(r);
	return 0;
}

struct readers_seen {
	procreg_t *reg;
	uint64_t live, refused;
};

static int readers_at_least(void *p)
{
	struct readers_seen *s = p;
	const struct pr_table_hdr *h = s->reg->map.hdr;

	return CMM_LOAD_SHARED(h->readers_live) >= s->live &&
	       CMM_LOAD_SHARED(h->readers_refused) >= s->refused;
}

/* --max-readers 3: five reader processes and this one. The daemon holds
 * the pages of three and refuses the rest, logged; every process reads
 * right all the same, and nothing fails for want of a slot. */
static void test_readers_past_limit(void **state)
{
	struct fx *f = *state;
	struct reader_kid a = { .dir = f->dir };
	struct readers_seen seen = { f->reg, 3, 3 };
	struct th_held h;

	assert_int_equal(procreg_lookup(f->reg, "anything", NULL), -ENOENT);
	th_held_init(&h);
	for (int i = 0; i < 5; i++) {
		a.n = i;
		th_held_start(&h, reader_kid, &a);
	}
	th_held_ready(&h, 20000);
	if (!th_until(readers_at_least, &seen, 20000)) {
		th_daemon_dump_log(&f->d);
		th_held_kill(&h);
		fail_msg("readers_live %u, refused %llu", f->reg->map.hdr->readers_live,
			 (unsigned long long)f->reg->map.hdr->readers_refused);
	}
	assert_int_equal(f->reg->map.hdr->readers_live, 3);
	assert_true(th_log_has(f->d.log, "refused: --max-readers reader processes; its lookups "
				     "stay correct, unprotected"));
	assert_int_equal(th_held_release(&h), 0);
}

/* ---- hostile input ---------------------------------------------------- */

/* Send a packet; return the status of the first reply frame, or 1 if the
 * daemon closed the connection instead. */
static int raw_exchange(int fd, const void *pkt, size_t len)
{
	static uint8_t buf[PR_PACKET_MAX];
	struct pr_frame f;
	size_t pos = 0;
	ssize_t n;

	if (send(fd, pkt, len, MSG_NOSIGNAL) < 0)
		return 1;
	n = recv(fd, buf, sizeof(buf), 0);
	if (n <= 0)
		return 1;
	assert_int_equal(procreg__proto_next(buf, (size_t)n, &pos, &f), 1);
	return f.h.status;
}

static void test_malformed_messages(void **state)
{
	struct fx *f = *state;
	static uint8_t pkt[PR_PACKET_MAX + 4096];
	struct pr_frame_hdr h;
	size_t pos;
	int fd;

	assert_int_equal(procreg_register(f->reg, "bystander", "b", 1), 0);

	/* Three bytes: cannot be framed, the connection closes. */
	fd = th_raw_connect(f->dir);
	assert_int_equal(raw_exchange(fd, "abc", 3), 1);
	close(fd);

	/* A request before HELLO. */
	fd = th_raw_connect(f->dir);
	pos = 0;
	procreg__proto_put(pkt, &pos, PR_OP_SYNC, 0, 7, 0, NULL, 0, NULL, 0);
	assert_int_equal(raw_exchange(fd, pkt, pos), -EPROTO);
	close(fd);

	/* A HELLO of another protocol version. */
	fd = th_raw_connect(f->dir);
	{
		uint32_t body[2] = { 99, 0 };

		pos = 0;
		procreg__proto_put(pkt, &pos, PR_OP_HELLO, 0, 1, 0, body, sizeof(body), NULL, 0);
		assert_int_equal(raw_exchange(fd, pkt, pos), -EPROTONOSUPPORT);
	}
	close(fd);

	fd = th_raw_connect(f->dir);
	th_raw_hello(fd);
	/* Unknown op: an error reply, the connection lives. */
	pos = 0;
	procreg__proto_put(pkt, &pos, 0x777, 0, 8, 0, NULL, 0, NULL, 0);
	assert_int_equal(raw_exchange(fd, pkt, pos), -EBADMSG);
	/* A name longer than its frame. */
	h = (struct pr_frame_hdr){ PR_OP_REGISTER, 0, 24, 9, 0 };
	memcpy(pkt, &h, sizeof(h));
	memcpy(pkt + 16, "\xff\x00\x00\x00\x00\x00\x00\x00", 8);
	assert_int_equal(raw_exchange(fd, pkt, 24), -EBADMSG);
	/* A name with a NUL inside; an empty name; a name past the limit. */
	pos = 0;
	procreg__proto_put_name(pkt, &pos, PR_OP_REGISTER, 0, 10, "a\0b", 3, NULL, 0);
	assert_int_equal(raw_exchange(fd, pkt, pos), -EINVAL);
	pos = 0;
	procreg__proto_put_name(pkt, &pos, PR_OP_REGISTER, 0, 11, "", 0, NULL, 0);
	assert_int_equal(raw_exchange(fd, pkt, pos), -EINVAL);
	{
		char big[300];
		struct { uint16_t nl, ml; uint32_t r; } nb = { 300, 0, 0 };

		memset(big, 'x', sizeof(big));
		pos = 0;
		procreg__proto_put(pkt, &pos, PR_OP_REGISTER, 0, 12, 0, &nb, sizeof(nb), big, 300);
		assert_int_equal(raw_exchange(fd, pkt, pos), -ENAMETOOLONG);
	}
	/* A pidfd-flagged register without a pidfd. */
	pos = 0;
	procreg__proto_put_name(pkt, &pos, PR_OP_REGISTER, PR_F_PIDFD, 13, "pf", 2, NULL, 0);
	assert_int_equal(raw_exchange(fd, pkt, pos), -EBADF);
	/* A reply frame sent as a request. */
	pos = 0;
	procreg__proto_put(pkt, &pos, PR_OP_SYNC | PR_OP_REPLY, 0, 14, 0, NULL, 0, NULL, 0);
	assert_int_equal(raw_exchange(fd, pkt, pos), -EBADMSG);
	/* A second HELLO. */
	pos = 0;
	procreg__proto_put_hello(pkt, &pos, PR_OP_HELLO, 15, 0);
	assert_int_equal(raw_exchange(fd, pkt, pos), -EBADMSG);
	/* A packet full of HELLOs without a body, then a REGISTER: a reply
	 * to every frame, the REGISTER's last (a HELLO's reply is longer
	 * than a bodyless HELLO; the replies to a full packet of them did
	 * not fit, and the last were dropped). */
	{
		static uint8_t in[PR_PACKET_MAX];
		struct pr_frame rf;
		size_t n = 0, rpos = 0, hellos = 0;
		uint32_t last = 0;
		ssize_t got;
		int r;

		pos = 0;
		for (; pos + 2 * PR_FRAME_HDR + 64 <= PR_PACKET_MAX; hellos++)
			procreg__proto_put(pkt, &pos, PR_OP_HELLO, 0, 100, 0, NULL, 0, NULL, 0);
		procreg__proto_put_name(pkt, &pos, PR_OP_REGISTER, 0, 101, "after.hellos", 12, NULL, 0);
		assert_int_equal(send(fd, pkt, pos, MSG_NOSIGNAL), (ssize_t)pos);
		got = recv(fd, in, sizeof(in), 0);
		assert_true(got > 0);
		/* The HELLOs' replies carry their status alone, as their
		 * requests had no body: framed, not a well-formed HELLO. */
		while ((r = procreg__proto_next(in, (size_t)got, &rpos, &rf)) == 1 || r == -EPROTO) {
			n++;
			last = rf.h.id;
			if (rf.h.id == 101)
				assert_int_equal(rf.h.status, 0);
			else
				assert_int_equal(rf.h.status, -EBADMSG);
		}
		assert_int_equal(n, hellos + 1);
		assert_int_equal(last, 101);
		assert_int_equal(procreg_lookup(f->reg, "after.hellos", NULL), 0);
	}
	/* A frame length past the packet: unframeable, closed. */
	h = (struct pr_frame_hdr){ PR_OP_SYNC, 0, 4096, 16, 0 };
	memcpy(pkt, &h, sizeof(h));
	assert_int_equal(raw_exchange(fd, pkt, 16), 1);
	close(fd);

	/* An oversized packet: closed. */
	fd = th_raw_connect(f->dir);
	th_raw_hello(fd);
	memset(pkt, 0, sizeof(pkt));
	assert_int_equal(raw_exchange(fd, pkt, sizeof(pkt)), 1);
	close(fd);

	/* Random garbage from several connections. */
	srand(1234);
	for (int round = 0; round < 200; round++) {
		size_t len = 16 + (size_t)(rand() % 512);

		fd = th_raw_connect(f->dir);
		if (round % 2)
			th_raw_hello(fd);
		for (size_t i = 0; i < len; i++)
			pkt[i] = (uint8_t)rand();
		if (round % 3 == 0) {
			/* A plausible header on random bytes. */
			h = (struct pr_frame_hdr){ (uint16_t)(1 + rand() % 5), (uint16_t)rand(),
						   (uint32_t)(len & ~7u), 1, 0 };
			memcpy(pkt, &h, sizeof(h));
		}
		raw_exchange(fd, pkt, len);
		close(fd);
	}

	/* Nobody else noticed. */
	assert_int_equal(kill(f->d.pid, 0), 0);
	assert_int_equal(procreg_lookup(f->reg, "bystander", NULL), 0);
	assert_int_equal(procreg_register(f->reg, "after", NULL, 0), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
}

/* ---- crash and restart ------------------------------------------------ */

struct acker {
	const char *dir;
	int ack_fd;      /* writes the index of each acknowledged batch */
	int hold_fd;
};

static int ack_main(void *arg)
{
	struct acker *a = arg;
	procreg_t *r = th_open(a->dir);
	static struct procreg_op ops[200];
	static char names[200][32];
	char c;

	if (!r)
		return 50;
	for (int b = 0;; b++) {
		int err;

		for (int i = 0; i < 200; i++) {
			snprintf(names[i], sizeof(names[i]), "ack.%d.%d", b, i);
			ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_REGISTER, .name = names[i], .meta = names[i], .meta_len = strlen(names[i]), .result = 0 };
		}
		err = procreg_batch(r, ops, 200);
		/* Report every op the daemon acknowledged, batch cut or not. */
		for (int i = 0; i < 200; i++) {
			if (ops[i].result == 0) {
				int v[2] = { b, i };

				if (write(a->ack_fd, v, sizeof(v)) != sizeof(v))
					return 51;
			}
		}
		if (err)
			break;
	}
	close(a->ack_fd);
	if (read(a->hold_fd, &c, 1) < 0)
		return 52;
	return 0;
}

static void test_daemon_crash_restart(void **state)
{
	struct fx *f = *state;
	int ack[2], hold[2], v[2], acked = 0, maxb = 0;
	struct acker a;
	pid_t kid;
	char name[64];
	static int got[4096][200 / 8 + 1];
	PROCREG_OPTS(procreg_stats, st);

	memset(got, 0, sizeof(got));
	assert_int_equal(pipe2(ack, O_CLOEXEC), 0);
	assert_int_equal(pipe2(hold, O_CLOEXEC), 0);
	a = (struct acker){ f->dir, ack[1], hold[0] };
	kid = fork();
	if (kid == 0) {
		close(ack[0]);
		close(hold[1]);
		_exit(ack_main(&a));
	}
	close(ack[1]);
	close(hold[0]);
	/* Let some batches through, then kill the daemon mid-stream. */
	while (acked < 3000 && read(ack[0], v, sizeof(v)) == sizeof(v)) {
		got[v[0] % 4096][v[1] / 8] |= 1 << (v[1] % 8);
		acked++;
		maxb = v[0] > maxb ? v[0] : maxb;
	}
	th_daemon_kill(&f->d);
	while (read(ack[0], v, sizeof(v)) == sizeof(v)) {
		got[v[0] % 4096][v[1] / 8] |= 1 << (v[1] % 8);
		acked++;
		maxb = v[0] > maxb ? v[0] : maxb;
	}
	close(ack[0]);
	assert_true(acked >= 3000);
	assert_true(maxb < 4096);

	/* No daemon: reads go on, and every acknowledged name is there. */
	for (int b = 0; b <= maxb; b++)
		for (int i = 0; i < 200; i++)
			if (got[b][i / 8] & (1 << (i % 8))) {
				snprintf(name, sizeof(name), "ack.%d.%d", b, i);
				assert_int_equal(procreg_lookup(f->reg, name, NULL), 0);
			}

	/* Restart: the owner lives, so its names stay. */
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
	for (int b = 0; b <= maxb; b++)
		for (int i = 0; i < 200; i++)
			if (got[b][i / 8] & (1 << (i % 8))) {
				snprintf(name, sizeof(name), "ack.%d.%d", b, i);
				assert_int_equal(procreg_lookup(f->reg, name, NULL), 0);
			}
	procreg_stats(f->reg, &st);
	assert_int_equal(st.processes, 1);
	assert_true(st.names >= (uint64_t)acked);
	/* The restarted daemon watches the owner again. */
	kill(kid, SIGKILL);
	th_wait(kid);
	close(hold[1]);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.processes, 0);
}

static void test_dead_while_down(void **state)
{
	struct fx *f = *state;
	int hold_dead, hold_live;
	pid_t dead = spawn_holder(f->dir, "dead.", 20, &hold_dead);
	pid_t live = spawn_holder(f->dir, "live.", 20, &hold_live);
	PROCREG_OPTS(procreg_stats, st);

	th_daemon_kill(&f->d);
	kill(dead, SIGKILL);
	th_wait(dead);
	close(hold_dead);
	/* Frozen: the dead process's names are still there to readers. */
	assert_int_equal(procreg_lookup(f->reg, "dead.0", NULL), 0);
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
	assert_int_equal(procreg_lookup(f->reg, "dead.0", NULL), -ENOENT);
	assert_int_equal(procreg_lookup(f->reg, "dead.19", NULL), -ENOENT);
	assert_int_equal(procreg_lookup(f->reg, "live.0", NULL), 0);
	assert_int_equal(procreg_lookup(f->reg, "live.19", NULL), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 20);
	assert_int_equal(st.processes, 1);
	/* And the space the dead names held is reused, not leaked. */
	close(hold_live);
	th_wait(live);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
}

struct waiter {
	const char *dir;
	int go, connected;         /* pipe ends: read "go", write "connected" */
};

/* A child that sends a batch of registrations and waits for the answers:
 * it says "connected" once its HELLO is answered, and sends on "go". */
static int batch_waiter(void *arg)
{
	struct waiter *w = arg;
	procreg_t *r = th_open(w->dir);
	struct procreg_op ops[50];
	char names[50][16], c = 0;

	if (!r || procreg_sync(r) != 0 || write(w->connected, &c, 1) != 1 ||
	    read(w->go, &c, 1) != 1)
		return 30;
	for (int i = 0; i < 50; i++) {
		snprintf(names[i], sizeof(names[i]), "queued.%d", i);
		ops[i] = (struct procreg_op){ .sz = sizeof(ops[i]), .kind = PROCREG_OP_REGISTER,
					      .name = names[i] };
	}
	return procreg_batch(r, ops, 50) == 0 ? 0 : 31;
}

/* A process that dies with its registrations still queued on its
 * connection: the daemon takes them (it has no reason to ask first
 * whether their sender lives), and its death, seen at once, takes them
 * back. No name stays, and the process counts as one death. */
static void test_dead_with_requests_queued(void **state)
{
	struct fx *f = *state;
	int to_kid[2], from_kid[2];
	struct waiter w;
	PROCREG_OPTS(procreg_stats, st);
	pid_t kid;
	char c = 0;
	int i;

	assert_int_equal(pipe2(to_kid, O_CLOEXEC), 0);
	assert_int_equal(pipe2(from_kid, O_CLOEXEC), 0);
	w = (struct waiter){ f->dir, to_kid[0], from_kid[1] };
	kid = th_fork(batch_waiter, &w);
	assert_int_equal(read(from_kid[0], &c, 1), 1);
	/* The daemon stopped: the batch waits on its connection, unread. */
	assert_int_equal(kill(f->d.pid, SIGSTOP), 0);
	assert_int_equal(write(to_kid[1], &c, 1), 1);
	for (i = 0; i < 10000 && th_blocked_in(kid) != SYS_recvfrom; i++)
		usleep(1000);
	assert_int_equal(th_blocked_in(kid), SYS_recvfrom);
	kill(kid, SIGKILL);
	assert_int_equal(th_wait(kid), 128 + SIGKILL);
	assert_int_equal(kill(f->d.pid, SIGCONT), 0);
	/* The batch and the death may be handled in one wake-up or two,
	 * either before or after this connection's SYNC. */
	for (i = 0; i < 10000; i++) {
		assert_int_equal(procreg_sync(f->reg), 0);
		procreg_stats(f->reg, &st);
		if (st.deaths == 1)
			break;
		usleep(1000);
	}
	assert_int_equal(st.deaths, 1);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.processes, 0);
	assert_int_equal(procreg_lookup(f->reg, "queued.0", NULL), -ENOENT);
	assert_int_equal(procreg_lookup(f->reg, "queued.49", NULL), -ENOENT);
	for (i = 0; i < 2; i++) {
		close(to_kid[i]);
		close(from_kid[i]);
	}
}

static void test_sigterm_clean(void **state)
{
	struct fx *f = *state;
	char sock[512];
	PROCREG_OPTS(procreg_stats, st);

	assert_int_equal(procreg_register(f->reg, "stays", NULL, 0), 0);
	snprintf(sock, sizeof(sock), "%s/procreg.default.sock", f->dir);
	assert_int_equal(access(sock, F_OK), 0);
	assert_int_equal(th_daemon_stop(&f->d), 0);
	assert_int_not_equal(access(sock, F_OK), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.daemon_pid, 0);
	/* The table stays readable, names and all. */
	assert_int_equal(procreg_lookup(f->reg, "stays", NULL), 0);
	assert_int_equal(procreg_register(f->reg, "x", NULL, 0), -ECONNREFUSED);
	/* A second daemon for the same scope is refused while one runs. */
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
	{
		struct th_daemon d2;

		assert_int_not_equal(th_daemon_start(&d2, f->dir, NULL, NULL), 0);
	}
	assert_int_equal(procreg_lookup(f->reg, "stays", NULL), 0);
}

/* ---- the 6.1 paths ---------------------------------------------------- */

static int setup_fallback(void **state)
{
	static const char *const env[] = { "PROCREG_NO_PEERPIDFD=1", "PROCREG_NO_PIDFS=1", NULL };
	return th_fx_start(state, NULL, env);
}

static void test_fallback_identity(void **state)
{
	/* Without SO_PEERPIDFD and pidfs, the daemon identifies clients by
	 * the pidfd they pass, checked against SO_PEERCRED. */
	test_register_lookup_unregister(state);
	test_death_removes_names(state);
	test_dead_while_down(state);
}

/* ---- a reader killed inside its critical section ---------------------- */

static int hold_read_lock(void *arg)
{
	int *fds = arg;
	procreg_t *r = th_open(getenv("TH_DIR"));
	struct pr_reader_slot *s;
	char c = 1;

	if (!r)
		return 60;
	s = procreg__rcu_slot(&r->rcu);
	if (!s)
		return 61;
	pr_read_lock(&r->map, s);
	if (write(fds[1], &c, 1) != 1)
		return 62;
	pause(); /* killed here, inside the critical section */
	return 63;
}

struct reclaimed {
	procreg_t *reg;
	uint64_t gp0, used0;
};

static int memory_came_back(void *arg)
{
	struct reclaimed *r = arg;
	PROCREG_OPTS(procreg_stats, st);

	procreg_stats(r->reg, &st);
	return st.grace_periods > r->gp0 && st.arena_used < r->used0;
}

static void test_killed_reader_does_not_stop_reclamation(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_stats, st);
	struct reclaimed rc = { f->reg, 0, 0 };
	int fds[2];
	char name[32], c;
	pid_t kid;

	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		assert_int_equal(procreg_register(f->reg, name, name, strlen(name)), 0);
	}
	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	setenv("TH_DIR", f->dir, 1);
	kid = th_fork(hold_read_lock, fds);
	assert_int_equal(read(fds[0], &c, 1), 1);
	/* Killed inside, and left a zombie: nobody waits for it yet. */
	kill(kid, SIGKILL);
	procreg_stats(f->reg, &st);
	rc.gp0 = st.grace_periods;
	rc.used0 = st.arena_used;
	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		assert_int_equal(procreg_unregister(f->reg, name), 0);
	}
	/* The daemon finds the dead reader, clears its slot, and the grace
	 * period that frees the hundred records completes. */
	assert_true(th_until(memory_came_back, &rc, 30000));
	assert_int_equal(th_wait(kid), 128 + SIGKILL);
	close(fds[0]);
	close(fds[1]);
	unsetenv("TH_DIR");
}

/* ---- files refused (PR_HELLO_NOFILES, proto.h) ---------------------------- */

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83
#endif

static void send_arm(int fd, uint64_t arm)
{
	assert_int_equal(th_raw_try_arm(fd, arm), 0);
}

/* NAME registered for the process of PIDFD, passed: what sendmsg() says
 * (0, or -errno). */
static int register_with_fd(int s, int pidfd, const char *name)
{
	uint8_t pkt[128];
	size_t pos = 0;

	procreg__proto_put_name(pkt, &pos, PR_OP_REGISTER, PR_F_PIDFD, 2, name, strlen(name),
				NULL, 0);
	return th_send_fd(s, pkt, pos, pidfd) == (ssize_t)pos ? 0 : -errno;
}

static bool kernel_refuses_files(void)
{
	int sv[2], off = 0;
	bool ok;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return false;
	ok = setsockopt(sv[0], SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof(off)) == 0;
	close(sv[0]);
	close(sv[1]);
	return ok;
}

/*
 * A client that will pass no file says so in its HELLO: the kernel then
 * refuses its files (the daemon takes its packets in one call, not two),
 * and a wrong ARM ends its connection. FILES lets files pass again, for a
 * registration by pidfd; the library asks for it before one, in a call of
 * its own or in a batch.
 */
static void test_files_refused(void **state)
{
	struct fx *f = *state;
	static uint8_t pkt[256];
	uint64_t arm = 0, arm2 = 0;
	int fd, fd2, pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	size_t pos;
	TH_ENTRY(e);

	if (!kernel_refuses_files()) {
		printf("SKIPPED: this kernel lacks SO_PASSRIGHTS (Linux 6.16): files pass as ever\n");
		skip();
	}
	assert_true(pidfd >= 0);
	/* Refused from the reply on; a request before the ARM is served. */
	fd = th_raw_connect(f->dir);
	assert_int_equal(th_raw_try_hello_flags(fd, PR_HELLO_NOFILES, &arm), 0);
	assert_true(arm != 0);
	assert_int_equal(register_with_fd(fd, pidfd, "nofiles.refused"), -EPERM);
	pos = 0;
	procreg__proto_put(pkt, &pos, PR_OP_SYNC, 0, 3, 0, NULL, 0, NULL, 0);
	assert_int_equal(raw_exchange(fd, pkt, pos), 0);
	/* A wrong ARM: closed, unanswered. */
	send_arm(fd, arm + 1);
	assert_true(recv(fd, pkt, sizeof(pkt), 0) <= 0);
	close(fd);

	/* The right one: requests served as ever. */
	fd2 = th_raw_connect(f->dir);
	assert_int_equal(th_raw_try_hello_flags(fd2, PR_HELLO_NOFILES, &arm2), 0);
	assert_true(arm2 != 0 && arm2 != arm);
	send_arm(fd2, arm2);
	pos = 0;
	procreg__proto_put_name(pkt, &pos, PR_OP_REGISTER, 0, 4, "nofiles.raw", 11, "m", 1);
	assert_int_equal(raw_exchange(fd2, pkt, pos), 0);
	assert_int_equal(procreg_lookup(f->reg, "nofiles.raw", &e), 0);
	assert_int_equal(e.pid, getpid());
	assert_int_equal(register_with_fd(fd2, pidfd, "nofiles.refused"), -EPERM);
	/* A packet bigger than any the daemon takes, on a connection it
	 * reads with plain recv() since the ARM: closed, unanswered, though
	 * its first PR_PACKET_MAX bytes are whole requests that a packet
	 * cut to that size would have had answered. */
	{
		static uint8_t big[PR_PACKET_MAX + 4 * PR_FRAME_HDR];
		int fd3 = th_raw_connect(f->dir);
		uint64_t arm3 = 0;

		assert_int_equal(th_raw_try_hello_flags(fd3, PR_HELLO_NOFILES, &arm3), 0);
		send_arm(fd3, arm3);
		pos = 0;
		procreg__proto_put(big, &pos, PR_OP_SYNC, 0, 6, 0, NULL, 0, NULL, 0);
		assert_int_equal(pos, PR_FRAME_HDR);
		for (size_t at = pos; at < sizeof(big); at += PR_FRAME_HDR)
			memcpy(big + at, big, PR_FRAME_HDR);
		assert_int_equal(send(fd3, big, sizeof(big), MSG_NOSIGNAL), (ssize_t)sizeof(big));
		assert_true(recv(fd3, pkt, sizeof(pkt), 0) <= 0);
		close(fd3);
	}
	/* FILES: a registration by pidfd goes through. */
	pos = 0;
	procreg__proto_put(pkt, &pos, PR_OP_FILES, 0, 5, 0, NULL, 0, NULL, 0);
	assert_int_equal(raw_exchange(fd2, pkt, pos), 0);
	assert_int_equal(register_with_fd(fd2, pidfd, "nofiles.pidfd"), 0);
	assert_true(recv(fd2, pkt, sizeof(pkt), 0) > 0);
	assert_int_equal(procreg_lookup(f->reg, "nofiles.pidfd", NULL), 0);
	close(fd2);

	/* A file sent before the daemon read the HELLO (it is stopped
	 * meanwhile) passes: the kernel refused nothing yet, and the packet
	 * is taken as one that may carry a file. */
	fd = th_raw_connect(f->dir);
	kill(f->d.pid, SIGSTOP);
	pos = 0;
	procreg__proto_put_hello_flags(pkt, &pos, PR_OP_HELLO, 1, 0, PR_HELLO_NOFILES);
	assert_int_equal(send(fd, pkt, pos, MSG_NOSIGNAL), (ssize_t)pos);
	assert_int_equal(register_with_fd(fd, pidfd, "nofiles.early"), 0);
	kill(f->d.pid, SIGCONT);
	assert_true(recv(fd, pkt, sizeof(pkt), 0) > 0); /* HELLO */
	assert_true(recv(fd, pkt, sizeof(pkt), 0) > 0); /* REGISTER */
	pos = 0;
	{
		struct pr_frame rf;

		assert_int_equal(procreg__proto_next(pkt, sizeof(struct pr_frame_hdr), &pos, &rf), 1);
		assert_int_equal(rf.h.status, 0);
	}
	assert_int_equal(procreg_lookup(f->reg, "nofiles.early", &e), 0);
	assert_int_equal(e.pid, getpid());
	close(fd);

	/* The library: a connection made for plain requests, then one by
	 * pidfd; then a batch whose pidfd comes after plain ones, on a
	 * connection made anew. */
	assert_int_equal(procreg_register(f->reg, "nofiles.lib", NULL, 0), 0);
	assert_int_equal(procreg_register_pidfd(f->reg, pidfd, "nofiles.lib.pidfd", NULL, 0), 0);
	{
		procreg_t *reg = th_open(f->dir);
		struct procreg_op ops[40];

		assert_non_null(reg);
		for (int i = 0; i < 40; i++) {
			static char names[40][32];

			snprintf(names[i], sizeof(names[i]), "nofiles.batch.%d", i);
			ops[i] = (struct procreg_op){ .sz = sizeof(ops[i]),
						      .kind = PROCREG_OP_REGISTER, .name = names[i],
						      .pidfd = -1 };
			if (i == 30) {
				ops[i].flags = PROCREG_PIDFD;
				ops[i].pidfd = pidfd;
			}
		}
		assert_int_equal(procreg_register(reg, "nofiles.first", NULL, 0), 0);
		assert_int_equal(procreg_batch(reg, ops, 40), 0);
		for (int i = 0; i < 40; i++)
			assert_int_equal(ops[i].result, 0);
		assert_int_equal(procreg_lookup(f->reg, "nofiles.batch.30", NULL), 0);
		procreg_close(reg);
	}
	close(pidfd);
}

/* The daemon's closing processes (closer.c), zombies too: its children
 * (its spawners, a child named as the daemon until it names itself), and
 * theirs. A zombie spawner is one whose descriptors the daemon has not
 * closed yet. */
static int helpers_of(pid_t daemon)
{
	DIR *dir = opendir("/proc");
	struct dirent *e;
	pid_t spawners[8];
	int n = 0, ns = 0;

	assert_non_null(dir);
	for (int pass = 0; pass < 2; pass++) {
		rewinddir(dir);
		while ((e = readdir(dir))) {
			char path[300], buf[512], state = 0;
			int ppid = 0;
			FILE *fp;

			if (e->d_name[0] < '1' || e->d_name[0] > '9')
				continue;
			snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
			if (!(fp = fopen(path, "re")))
				continue;
			/* The name may hold anything: the fields after its
			 * last parenthesis. */
			if (fgets(buf, sizeof(buf), fp) && strrchr(buf, ')') &&
			    sscanf(strrchr(buf, ')') + 1, " %c %d", &state, &ppid) == 2) {
				if (pass == 0 && ppid == daemon) {
					if (ns < 8)
						spawners[ns++] = atoi(e->d_name);
					n++;
				}
				for (int i = 0; pass == 1 && i < ns; i++)
					n += ppid == spawners[i];
			}
			fclose(fp);
		}
	}
	closedir(dir);
	return n;
}

/* For th_until: whether the daemon's closing processes are down to their
 * number at rest: none, or the spawner kept where the kernel cannot refuse
 * files (closer.c: spawner_kept). */
struct rest {
	pid_t daemon;
	int n;
};

static int at_rest(void *arg)
{
	const struct rest *r = arg;

	return helpers_of(r->daemon) == r->n;
}

static int some_helpers(void *daemon)
{
	return helpers_of(*(pid_t *)daemon) > 0;
}

/* For th_until: whether the daemon's descriptors are back to BACK's count,
 * counting in SEEN the closing processes found running meanwhile. */
struct quiet {
	struct th_fdcount *back;
	int seen;
};

static int fds_back_seen(void *arg)
{
	struct quiet *q = arg;

	q->seen += helpers_of(q->back->pid);
	return th_fds_back(q->back);
}

/* Whether socket FD's peer has closed its end. */
static int peer_closed(void *fd)
{
	char c;

	return recv(*(int *)fd, &c, 1, MSG_DONTWAIT) == 0;
}

/*
 * Closing processes run only while closes need them: none once the one
 * made at start has checked that one can be made; none for the
 * connections of the library's clients where the kernel refuses their
 * files past their first request (REFUSED: Linux 6.16), else made for
 * their ends and gone some seconds after; and for a file passed and not
 * kept, made to close it, gone after, made again for the next. Each
 * time, the daemon's descriptors are back to what they were (a spawner
 * that ended left its pidfd of the daemon in the table it shared). While
 * they run, the daemon's table of descriptors is shared, and each of
 * its system calls on one takes a reference to its file: they ran for
 * the daemon's whole life, and a synchronous request's round trip took
 * about 4% longer.
 */
static void closers_only_when_needed(struct fx *f, bool refused)
{
	struct th_fdcount back = { f->d.pid, 0 };
	struct rest rest = { f->d.pid, refused ? 0 : 1 };
	static uint8_t pkt[64];
	procreg_t *reg;
	int seen = 0;

	/* Without the refusal, a client of the library may pass files at
	 * any time: a spawner runs while one is connected (below). */
	if (!refused) {
		procreg_close(f->reg);
		f->reg = NULL;
	}
	if (!th_until(at_rest, &rest, 10000))
		fail_msg("%d closing processes (or their spawner) run after start, want %d",
			 helpers_of(f->d.pid), rest.n);
	/* Past the next tick, which closes the daemon's descriptors of a
	 * closing process that ended after its spawner (the one made at
	 * start, a check). */
	th_msleep(1500);
	back.want = th_count_fds(f->d.pid);
	for (int i = 0; i < 20; i++) {
		reg = th_open(f->dir);
		assert_non_null(reg);
		assert_int_equal(procreg_sync(reg), 0);
		procreg_close(reg);
		seen += helpers_of(f->d.pid);
	}
	if (refused) {
		/* Every connection's end taken (its descriptor closed), and
		 * no closing process made meanwhile (one would have run for
		 * seconds, its descriptors holding the count up). */
		struct quiet q = { &back, 0 };

		assert_true(th_until(fds_back_seen, &q, 10000));
		if (seen + q.seen)
			fail_msg("closing processes ran for the connections of library clients");
	} else if (!th_until(at_rest, &rest, 10000)) {
		fail_msg("%d closing processes still run, 10 s after the connections ended",
			 helpers_of(f->d.pid));
	}
	assert_true(th_until(th_fds_back, &back, 10000));
	for (int round = 0; round < 2; round++) {
		int fd = th_raw_connect(f->dir), sv[2];
		size_t pos = 0;

		th_raw_hello(fd);
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		/* A socket, with a request that takes no file: closed, and
		 * not on the serving thread (a socket's close may linger). */
		procreg__proto_put(pkt, &pos, PR_OP_SYNC, 0, 9, 0, NULL, 0, NULL, 0);
		assert_int_equal(th_send_fd(fd, pkt, pos, sv[1]), (ssize_t)pos);
		close(sv[1]);
		if (!th_until(peer_closed, &sv[0], 10000))
			fail_msg("round %d: the passed socket was not closed", round);
		close(fd);
		close(sv[0]);
		if (!th_until(at_rest, &rest, 10000))
			fail_msg("round %d: %d closing processes still run, 10 s after their last "
				 "close", round, helpers_of(f->d.pid));
		if (!th_until(th_fds_back, &back, 10000))
			fail_msg("round %d: the daemon holds %ld descriptors, %ld before", round,
				 th_count_fds(f->d.pid), back.want);
	}
	/* A connection that may pass files at any time (its HELLO did not
	 * say it would not), held open: a spawner runs for it, within two
	 * ticks (its queued files' last close must not fall to a crashed
	 * daemon's exit: closer.c), and ends after it. */
	if (refused) {
		int fd = th_raw_connect(f->dir);

		th_raw_hello(fd);
		if (!th_until(some_helpers, &f->d.pid, 10000))
			fail_msg("no spawner runs for a connection that may pass files");
		close(fd);
		if (!th_until(at_rest, &rest, 10000))
			fail_msg("%d closing processes still run, 10 s after the last connection "
				 "that could pass files ended", helpers_of(f->d.pid));
	}
	reg = th_open(f->dir);
	assert_non_null(reg);
	assert_int_equal(procreg_register(reg, "after.closes", NULL, 0), 0);
	assert_int_equal(procreg_lookup(reg, "after.closes", NULL), 0);
	procreg_close(reg);
}

static void test_closing_processes_only_when_needed(void **state)
{
	if (!kernel_refuses_files()) {
		printf("SKIPPED: this kernel lacks SO_PASSRIGHTS (Linux 6.16): "
		       "test_closing_processes_without_refusal covers it\n");
		skip();
	}
	closers_only_when_needed(*state, true);
}

/* The same where the kernel cannot refuse files (PROCREG_NO_PASSRIGHTS,
 * as before Linux 6.16): every connection ends in a closing process, and
 * the spawner made at start, small, stays throughout (a copy of the
 * daemon would be made for nearly every client otherwise, and hold its
 * memory copy-on-write). */
static void test_closing_processes_without_refusal(void **state)
{
	closers_only_when_needed(*state, false);
}

static int setup_no_passrights(void **state)
{
	static const char *const env[] = { "PROCREG_NO_PASSRIGHTS=1", NULL };
	return th_fx_start(state, NULL, env);
}

/* A daemon whose kernel cannot refuse files (before 6.16): HELLO's arm is
 * 0, files pass, an ARM is a protocol error; the library's calls work as
 * on any other. */
static void test_files_not_refused(void **state)
{
	struct fx *f = *state;
	uint64_t arm = 1;
	uint8_t pkt[64];
	int fd, pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);

	test_register_lookup_unregister(state);
	test_register_pidfd(state);
	test_batch(state);
	fd = th_raw_connect(f->dir);
	assert_int_equal(th_raw_try_hello_flags(fd, PR_HELLO_NOFILES, &arm), 0);
	assert_int_equal(arm, 0);
	assert_int_equal(register_with_fd(fd, pidfd, "passed.anyway"), 0);
	assert_true(recv(fd, pkt, sizeof(pkt), 0) > 0);
	assert_int_equal(procreg_lookup(f->reg, "passed.anyway", NULL), 0);
	send_arm(fd, 42);
	assert_true(recv(fd, pkt, sizeof(pkt), 0) <= 0);
	close(fd);
	close(pidfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_register_lookup_unregister, setup, teardown),
		cmocka_unit_test_setup_teardown(test_closing_processes_only_when_needed, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_duplicate_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_death_removes_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idle_owners, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names_survive_exec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_register_pidfd, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_uid_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_name_and_meta_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names_per_process, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_churn_then_death, setup_churn, teardown_churn),
		cmocka_unit_test_setup_teardown(test_uid_quotas, setup_uid_quota, teardown),
		cmocka_unit_test_setup_teardown(test_table_full, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_max_clients, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_readers_past_limit, setup_few_readers, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_messages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_daemon_crash_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_while_down, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_with_requests_queued, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sigterm_clean, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fallback_identity, setup_fallback, teardown),
		cmocka_unit_test_setup_teardown(test_files_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_files_not_refused, setup_no_passrights, teardown),
		cmocka_unit_test_setup_teardown(test_closing_processes_without_refusal,
						setup_no_passrights, teardown),
		cmocka_unit_test_setup_teardown(test_killed_reader_does_not_stop_reclamation, setup,
						teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
