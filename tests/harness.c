/* SPDX-License-Identifier: BSD-2-Clause */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <ftw.h>
#include <grp.h>
#include <pwd.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"
#include "proto.h"

char *th_mkdtemp(void)
{
	char *t = strdup("/tmp/procreg-test.XXXXXX");

	assert_non_null(t);
	assert_non_null(mkdtemp(t));
	return t;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(path);
}

void th_entry_copy(struct procreg_entry *dst, const struct procreg_entry *src)
{
	void *meta = dst->meta;
	size_t room = dst->meta_size;

	*dst = *src;
	dst->meta = meta;
	dst->meta_size = room;
	if (meta)
		memcpy(meta, src->meta, src->meta_len < room ? src->meta_len : room);
}

void th_entry_scribble(struct procreg_entry *e, int byte)
{
	size_t from = offsetof(struct procreg_entry, meta_len);

	memset((unsigned char *)e + from, byte, sizeof(*e) - from);
	if (e->meta)
		memset(e->meta, byte, e->meta_size);
}

void th_rmrf(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void th_msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

void th_feed_settle(procreg_t *reg)
{
	assert_int_equal(procreg_sync(reg), 0);
}

void th_next_pid(pid_t pid)
{
	char buf[32];
	int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
	int n = snprintf(buf, sizeof(buf), "%d", (int)pid - 1);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, (size_t)n), n);
	close(fd);
}

int th_until(int (*fn)(void *), void *arg, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (fn(arg))
			return 1;
		th_msleep(1);
	}
	return fn(arg);
}

procreg_t *th_open(const char *dir)
{
	return th_open_scope(dir, "default");
}

procreg_t *th_open_scope(const char *dir, const char *scope)
{
	PROCREG_OPTS(procreg_opts, o, .dir = dir, .scope = scope);

	return procreg_open(&o);
}

void th_writer_open(struct pr_writer *w, const char *dir, const char *scope, uint64_t max_size)
{
	struct pr_paths p;
	struct pr_writer_opts o = { .max_size = max_size, .readers = 64, .mode = 0600 };
	const char *why = NULL;
	int err;

	assert_int_equal(procreg__paths(&p, scope, dir, NULL), 0);
	err = procreg__writer_open(w, &p, &o, &why);
	if (err)
		print_error("writer_open(%s): %s (%s)\n", dir, strerror(-err), why ? why : "");
	assert_int_equal(err, 0);
}

int th_daemon_start(struct th_daemon *d, const char *dir, const char *const *args,
		    const char *const *env)
{
	char log[300];

	snprintf(log, sizeof(log), "%s/procregd.log", dir);
	return th_daemon_start_log(d, dir, log, args, env);
}

int th_daemon_start_log(struct th_daemon *d, const char *dir, const char *log,
			const char *const *args, const char *const *env)
{
	return th_daemon_start_scope(d, dir, NULL, log, args, env);
}

int th_daemon_start_scope(struct th_daemon *d, const char *dir, const char *scope,
			  const char *log, const char *const *args, const char *const *env)
{
	const struct th_user *du;
	const char *argv[64];
	int n = 0;
	pid_t parent;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "%s", dir);
	snprintf(d->scope, sizeof(d->scope), "%s", scope ? scope : "default");
	snprintf(d->log, sizeof(d->log), "%s", log);
	argv[n++] = PROCREGD_PATH;
	argv[n++] = "--foreground";
	argv[n++] = "--dir";
	argv[n++] = dir;
	if (scope) {
		argv[n++] = "--scope";
		argv[n++] = scope;
	}
	for (int i = 0; args && args[i] && n < 62; i++)
		argv[n++] = args[i];
	argv[n] = NULL;

	du = th_daemon_user();
	if (du)
		th_daemon_user_dir(dir, du);
	parent = getpid();
	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		if (fd >= 0)
			dup2(fd, 2);
		unsetenv("PROCREG_DIR");
		unsetenv("PROCREG_SCOPE");
		unsetenv("PROCREG_SOCKET");
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		if (du)
			th_become_kill(du);
		/* The daemon dies with the test process: one that dies first
		 * (a crash, a sanitizer's report) would leave it running, and
		 * holding the test's output open, which ctest then waits on
		 * until its timeout. Set after the change of user, which
		 * clears it. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(127);
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	for (int i = 0; i < 10000; i++) {
		procreg_t *r = th_open_scope(dir, d->scope);
		int status;

		if (r) {
			PROCREG_OPTS(procreg_stats, st);

			procreg_stats(r, &st);
			procreg_close(r);
			if (st.daemon_pid == d->pid)
				return 0;
		}
		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			d->pid = 0;
			return -ECHILD;
		}
		th_msleep(1);
	}
	return -ETIMEDOUT;
}

int th_daemon_stop(struct th_daemon *d)
{
	int st;

	if (!d->pid)
		return -1;
	kill(d->pid, SIGTERM);
	st = th_wait(d->pid);
	d->pid = 0;
	return st;
}

void th_daemon_kill(struct th_daemon *d)
{
	if (!d->pid)
		return;
	kill(d->pid, SIGKILL);
	th_wait(d->pid);
	d->pid = 0;
}

void th_dump_log(const char *path)
{
	char buf[4096];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stderr);
	fclose(f);
}

void th_daemon_dump_log(const struct th_daemon *d)
{
	th_dump_log(d->log);
}

int th_daemon_stop_dump(struct th_daemon *d)
{
	int st;

	if (!d->pid)
		return 0;
	st = th_daemon_stop(d);
	if (st)
		th_daemon_dump_log(d);
	return st;
}

pid_t th_fork(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(fn(arg));
	return pid;
}

static int exit_status(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int th_wait(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return exit_status(st);
}

int th_wait_ms(pid_t pid, int ms)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int st;

		if (waitpid(pid, &st, WNOHANG) == pid)
			return exit_status(st);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= ms)
			break;
		th_msleep(1);
	}
	kill(pid, SIGKILL);
	th_wait(pid);
	return -1;
}

long th_blocked_in(pid_t pid)
{
	char path[64], buf[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return buf[0] >= '0' && buf[0] <= '9' ? strtol(buf, NULL, 10) : -1;
}

void th_kill_wait(pid_t *pid)
{
	if (*pid > 0) {
		kill(*pid, SIGKILL);
		th_wait(*pid);
	}
	*pid = 0;
}

void th_cli_argv(const char **argv, size_t cap, const char *dir, const char *const *args)
{
	size_t n = 0;

	argv[n++] = PROCREG_CLI_PATH;
	if (dir) {
		argv[n++] = "--dir";
		argv[n++] = dir;
	}
	for (int i = 0; args[i] && n < cap - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
}

int th_cli(const char *dir, char *out, size_t outlen, const char *const *args)
{
	const char *argv[64];
	int p[2];
	pid_t pid;
	size_t got = 0;

	th_cli_argv(argv, 64, dir, args);
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		unsetenv("PROCREG_DIR");
		unsetenv("PROCREG_SCOPE");
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		char buf[4096];
		ssize_t k = read(p[0], buf, sizeof(buf));

		if (k <= 0)
			break;
		if (out && got + 1 < outlen) {
			size_t take = (size_t)k < outlen - 1 - got ? (size_t)k : outlen - 1 - got;

			memcpy(out + got, buf, take);
			got += take;
		}
	}
	close(p[0]);
	if (out && outlen)
		out[got] = 0;
	return th_wait(pid);
}

void th_drain(int fd, char *buf, size_t cap, size_t *got, int *open_)
{
	char tmp[4096];
	ssize_t k = read(fd, tmp, sizeof(tmp));

	if (k < 0 && errno == EINTR)
		return;
	if (k <= 0) {
		*open_ = 0;
		return;
	}
	if (*got + 1 < cap) {
		size_t take = (size_t)k < cap - 1 - *got ? (size_t)k : cap - 1 - *got;

		memcpy(buf + *got, tmp, take);
		*got += take;
	}
}

void th_apply_env(const char *const *env)
{
	for (int i = 0; env && env[i]; i++) {
		if (strchr(env[i], '='))
			putenv((char *)env[i]);
		else
			unsetenv(env[i]);
	}
}

void th_copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC), out;
	char buf[65536];
	ssize_t n;

	assert_true(in >= 0);
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(n, 0);
	close(in);
	close(out);
}

void th_copy_table(const char *dir, const char *sub, char *table, size_t len)
{
	char d[512], from[512];

	snprintf(d, sizeof(d), "%s/%s", dir, sub);
	assert_int_equal(mkdir(d, 0700), 0);
	snprintf(from, sizeof(from), "%s/procreg.default", dir);
	snprintf(table, len, "%s/procreg.default", d);
	th_copy_file(from, table);
}

void th_poke_u64(const char *path, uint64_t off, uint64_t v)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &v, sizeof(v), (off_t)off), (ssize_t)sizeof(v));
	close(fd);
}

static int run_as(char *out, size_t outcap, char *err, size_t errcap, int limit_ms,
		  const char *const *env, const char *const *argv, const struct th_user *as);

int th_run(struct th_out *o, const char *const *env, const char *const *argv)
{
	return th_run_into(o->out, sizeof(o->out), o->err, sizeof(o->err), 60000, env, argv);
}

int th_run_daemon(struct th_out *o, const char *const *env, const char *const *argv)
{
	const struct th_user *du = th_daemon_user();

	for (int i = 0; du && argv[i]; i++)
		if (!strcmp(argv[i], "--dir") && argv[i + 1])
			th_daemon_user_dir(argv[i + 1], du);
	return th_run_as(o, du, env, argv);
}

int th_run_as(struct th_out *o, const struct th_user *as, const char *const *env,
	      const char *const *argv)
{
	return run_as(o->out, sizeof(o->out), o->err, sizeof(o->err), 60000, env, argv, as);
}

int th_run_into(char *out, size_t outcap, char *err, size_t errcap, int limit_ms,
		const char *const *env, const char *const *argv)
{
	return run_as(out, outcap, err, errcap, limit_ms, env, argv, NULL);
}

/* th_run_into, as AS (th_become_kill) unless it is NULL. */
static int run_as(char *out, size_t outcap, char *err, size_t errcap, int limit_ms,
		  const char *const *env, const char *const *argv, const struct th_user *as)
{
	int po[2], pe[2], oo = 1, eo = 1;
	size_t go = 0, ge = 0;
	pid_t pid;

	assert_int_equal(pipe2(po, O_CLOEXEC), 0);
	assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(po[1], 1);
		dup2(pe[1], 2);
		unsetenv("PROCREG_DIR");
		unsetenv("PROCREG_SCOPE");
		unsetenv("PROCREG_SOCKET");
		th_apply_env(env);
		if (as)
			th_become_kill(as);
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	for (int waited = 0; oo || eo;) {
		struct pollfd p[2] = { { oo ? po[0] : -1, POLLIN, 0 }, { eo ? pe[0] : -1, POLLIN, 0 } };
		int k = poll(p, 2, 100);

		if (k < 0) {
			assert_int_equal(errno, EINTR);
			continue;
		}
		if (k == 0 && (waited += 100) >= limit_ms) {
			kill(pid, SIGKILL);
			th_wait(pid);
			close(po[0]);
			close(pe[0]);
			fail_msg("%s did not finish", argv[0]);
		}
		if (p[0].revents)
			th_drain(po[0], out, outcap, &go, &oo);
		if (p[1].revents)
			th_drain(pe[0], err, errcap, &ge, &eo);
	}
	close(po[0]);
	close(pe[0]);
	out[go] = 0;
	err[ge] = 0;
	return th_wait(pid);
}

int th_fx_start(void **state, const char *const *args, const char *const *env)
{
	struct th_fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->dir = th_mkdtemp();
	chmod(f->dir, 0755);
	if (th_daemon_start(&f->d, f->dir, args, env) != 0) {
		th_daemon_dump_log(&f->d);
		fail_msg("procregd did not start");
	}
	f->reg = th_open(f->dir);
	assert_non_null(f->reg);
	*state = f;
	return 0;
}

int th_fx_stop(void **state)
{
	struct th_fx *f = *state;

	if (f->reg)
		procreg_close(f->reg);
	if (f->d.pid)
		assert_int_equal(th_daemon_stop(&f->d), 0);
	th_rmrf(f->dir);
	free(f->dir);
	free(f);
	return 0;
}

uint64_t th_xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

uint8_t *th_exact(const uint8_t *buf, size_t len)
{
	uint8_t *c = malloc(len ? len : 1);

	assert_non_null(c);
	memcpy(c, buf, len);
	return c;
}

int th_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port;

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

void th_write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

/* The log at PATH, its first 1 MiB, NUL-terminated, in a static buffer
 * (the tests read logs from one thread): enough for any test's daemon. */
static const char *log_read(const char *path)
{
	static char buf[1 << 20];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return NULL;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return buf;
}

int th_log_has(const char *path, const char *needle)
{
	const char *buf = log_read(path);

	return buf && strstr(buf, needle) != NULL;
}

int th_log_count(const char *path, const char *needle)
{
	const char *buf = log_read(path);
	int n = 0;

	for (const char *s = buf; s && (s = strstr(s, needle)); s++)
		n++;
	return n;
}

uint64_t th_log_held(const char *path, const char *what)
{
	const char *buf = log_read(path);
	char needle[128];
	uint64_t sum = 0;

	snprintf(needle, sizeof(needle), " more %s", what);
	for (const char *s = buf; s && (s = strstr(s, needle)); s++) {
		const char *d = s;

		while (d > buf && d[-1] >= '0' && d[-1] <= '9')
			d--;
		if (d > buf && d[-1] == '(')
			sum += strtoull(d, NULL, 10);
	}
	return sum;
}

int th_raw_try_connect(const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/procreg.default.sock", dir);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

int th_raw_connect(const char *dir)
{
	int fd = th_raw_try_connect(dir);

	assert_true(fd >= 0);
	return fd;
}

ssize_t th_send_fd(int s, const void *buf, size_t len, int fd)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u = { 0 };
	struct iovec iov = { (void *)buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			      .msg_controllen = sizeof(u.b) };

	u.h.cmsg_level = SOL_SOCKET;
	u.h.cmsg_type = SCM_RIGHTS;
	u.h.cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(&u.h), &fd, sizeof(int));
	return sendmsg(s, &msg, MSG_NOSIGNAL);
}

int th_raw_try_hello_flags(int fd, uint32_t flags, uint64_t *arm)
{
	uint8_t buf[256];
	size_t pos = 0;
	struct pr_frame f;
	/* The kernel here may not have SO_PEERPIDFD: pass our pidfd. */
	int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	ssize_t n;

	procreg__proto_put_hello_flags(buf, &pos, PR_OP_HELLO, 1, 0, flags);
	n = th_send_fd(fd, buf, pos, pidfd);
	close(pidfd);
	if (n != (ssize_t)pos)
		return -1;
	n = recv(fd, buf, sizeof(buf), 0);
	pos = 0;
	if (n <= 0 || procreg__proto_next(buf, (size_t)n, &pos, &f) != 1 ||
	    f.h.op != (PR_OP_HELLO | PR_OP_REPLY) || f.h.status != 0)
		return -1;
	if (arm)
		*arm = f.arm;
	return 0;
}

int th_raw_try_arm(int fd, uint64_t arm)
{
	uint8_t pkt[PR_FRAME_HDR + sizeof(arm)];
	size_t pos = 0;

	procreg__proto_put(pkt, &pos, PR_OP_ARM, 0, 0, 0, &arm, sizeof(arm), NULL, 0);
	return send(fd, pkt, pos, MSG_NOSIGNAL) == (ssize_t)pos ? 0 : -1;
}

int th_raw_try_hello(int fd)
{
	return th_raw_try_hello_flags(fd, 0, NULL);
}

void th_raw_hello(int fd)
{
	assert_int_equal(th_raw_try_hello(fd), 0);
}

/* ---- unprivileged users ------------------------------------------------ */

#define TH_USERS_MAX 16
static struct th_user th_users[TH_USERS_MAX];
static int th_nusers;
static pid_t th_users_owner;

static int th_run_quiet(const char *const *argv)
{
	pid_t pid = fork();

	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		if (null >= 0) {
			dup2(null, 1);
			dup2(null, 2);
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid < 0 ? -1 : th_wait(pid);
}

static void th_users_cleanup(void)
{
	/* Only the process that made them: not a forked child exiting. */
	if (getpid() != th_users_owner)
		return;
	for (int i = 0; i < th_nusers; i++)
		if (th_users[i].name[0])
			th_user_del(&th_users[i]);
}

/* Accounts of earlier runs whose test process is gone. */
static void th_users_sweep(void)
{
	struct passwd *pw;
	char stale[64][32];
	int n = 0;

	setpwent();
	while ((pw = getpwent()) && n < 64) {
		int pid;

		if (sscanf(pw->pw_name, "prt-%d-", &pid) == 1 && kill(pid, 0) < 0 && errno == ESRCH)
			snprintf(stale[n++], sizeof(stale[0]), "%s", pw->pw_name);
	}
	endpwent();
	for (int i = 0; i < n; i++) {
		const char *argv[] = { "/usr/sbin/userdel", stale[i], NULL };

		th_run_quiet(argv);
	}
}

void th_user_new(struct th_user *u)
{
	static int seq;
	struct passwd *pw;

	if (geteuid() != 0)
		fail_msg("th_user_new: creating a user needs root (CI runs as root)");
	if (access("/usr/sbin/useradd", X_OK) < 0)
		fail_msg("th_user_new: /usr/sbin/useradd is missing (Debian's passwd package)");
	if (!th_users_owner) {
		th_users_owner = getpid();
		th_users_sweep();
		atexit(th_users_cleanup);
	}
	memset(u, 0, sizeof(*u));
	snprintf(u->name, sizeof(u->name), "prt-%d-%d", (int)getpid(), seq++);
	{
		const char *argv[] = { "/usr/sbin/useradd", "--system", "--no-create-home",
				       "--user-group", "--shell", "/usr/sbin/nologin", u->name, NULL };
		int st = th_run_quiet(argv);

		if (st != 0)
			fail_msg("useradd %s: exit status %d", u->name, st);
	}
	pw = getpwnam(u->name);
	if (!pw || pw->pw_uid == 0)
		fail_msg("useradd %s: no such account afterwards", u->name);
	u->uid = pw->pw_uid;
	u->gid = pw->pw_gid;
	if (th_nusers < TH_USERS_MAX)
		th_users[th_nusers++] = *u;
}

void th_user_del(struct th_user *u)
{
	const char *argv[] = { "/usr/sbin/userdel", u->name, NULL };

	if (!u->name[0])
		return;
	th_run_quiet(argv);
	for (int i = 0; i < th_nusers; i++)
		if (!strcmp(th_users[i].name, u->name))
			th_users[i].name[0] = 0;
	u->name[0] = 0;
}

/* Our effective capability set (CapEff of /proc/self/status), or ~0 if it
 * cannot be read. */
static uint64_t th_cap_eff(void)
{
	char line[256];
	unsigned long long v = ~0ull;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return v;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* Become U for good; with KILL, keep CAP_KILL (ambient and bounding)
 * and nothing else, else no capability at all. */
static void th_become_as(const struct th_user *u, bool kill)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct c[2];

	/* procregd@.service's bounding set, while still root (dropping
	 * takes CAP_SETPCAP): CAP_KILL alone, up to the last the kernel
	 * knows. */
	for (int cap = 0; kill && prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
		if (cap != CAP_KILL && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
			_exit(99);
	if ((kill && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0) || setgroups(0, NULL) < 0 ||
	    setresgid(u->gid, u->gid, u->gid) < 0 || setresuid(u->uid, u->uid, u->uid) < 0)
		_exit(99);
	/* Kept in the permitted set through the uid change; made effective,
	 * inheritable and ambient, so that what it execs has it too. */
	memset(c, 0, sizeof(c));
	c[0].effective = c[0].permitted = c[0].inheritable = 1u << CAP_KILL;
	if (kill && (syscall(SYS_capset, &h, c) < 0 ||
		     prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_KILL, 0, 0) < 0 ||
		     prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) < 0))
		_exit(99);
	/* Without KEEPCAPS a uid change from root drops every capability:
	 * check rather than trust it, and that there is no way back. */
	if (geteuid() != u->uid || getuid() != u->uid || setuid(0) == 0 ||
	    th_cap_eff() != (kill ? 1ull << CAP_KILL : 0))
		_exit(99);
	/* setuid cleared it; tests read our /proc files. */
	prctl(PR_SET_DUMPABLE, 1);
}

void th_become(const struct th_user *u)
{
	th_become_as(u, false);
}

void th_become_kill(const struct th_user *u)
{
	th_become_as(u, true);
}

const struct th_user *th_daemon_user(void)
{
	static struct th_user u;
	const char *mode = getenv("PROCREG_TEST_SYSUSER");

	if (!mode || !*mode || !strcmp(mode, "0"))
		return NULL;
	if (!u.name[0]) {
		th_user_new(&u);
		/* Inherited by every client this process starts, and read by
		 * its own procreg_open() from now on. */
		if (setenv("PROCREG_DAEMON_USER", u.name, 1) < 0)
			fail_msg("setenv PROCREG_DAEMON_USER: %s", strerror(errno));
	}
	return &u;
}

void th_daemon_user_dir(const char *dir, const struct th_user *u)
{
	struct stat st;

	/* A shared sticky directory (/dev/shm's kind) stays as it is. */
	if (stat(dir, &st) < 0 || st.st_uid != 0 || (st.st_mode & S_ISVTX))
		return;
	if (chown(dir, u->uid, u->gid) < 0)
		fail_msg("chown %s to %s: %s", dir, u->name, strerror(errno));
}

void th_daemon_own(const char *path)
{
	const struct th_user *du = th_daemon_user();

	if (du && lchown(path, du->uid, du->gid) < 0)
		fail_msg("chown %s to %s: %s", path, du->name, strerror(errno));
}

uid_t th_daemon_uid(void)
{
	const struct th_user *du = th_daemon_user();

	return du ? du->uid : geteuid();
}

int th_reader_pages(procreg_t *reg, pid_t pid, unsigned pages)
{
	const struct pr_table_hdr *h = reg->map.hdr;
	const struct pr_reader_info *v =
		(const struct pr_reader_info *)(reg->map.base + h->readers_off);

	for (int t = 0; t < 20000; t++) {
		for (uint32_t i = 0; i < h->readers_cap; i++)
			if (CMM_LOAD_SHARED(v[i].pid) == (uint32_t)pid &&
			    (!pages || CMM_LOAD_SHARED(v[i].pages) == pages))
				return 0;
		th_msleep(1);
	}
	return -ETIMEDOUT;
}

int th_reader_held(procreg_t *reg, pid_t pid)
{
	return th_reader_pages(reg, pid, 0);
}

void *th_shared(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	memset(p, 0, len);
	return p;
}

void th_held_init(struct th_held *h)
{
	memset(h, 0, sizeof(*h));
	assert_int_equal(pipe2(h->ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(h->hold, O_CLOEXEC), 0);
}

pid_t th_held_start(struct th_held *h, int (*fn)(void *arg, int phase), void *arg)
{
	pid_t pid;

	assert_true(h->n < TH_HELD_MAX);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c = 1;
		int st;

		/* The parent's ends: held here, the hold pipe would never
		 * reach its end, and a failure would never read as one. */
		close(h->ready[0]);
		close(h->hold[1]);
		st = fn(arg, 0);
		if (st)
			_exit(st);
		if (write(h->ready[1], &c, 1) != 1)
			_exit(97);
		if (read(h->hold[0], &c, 1) != 0)
			_exit(98);
		_exit(fn(arg, 1));
	}
	h->pid[h->n++] = pid;
	return pid;
}

void th_held_ready(struct th_held *h, int ms)
{
	for (; h->ready_seen < h->n; h->ready_seen++) {
		struct pollfd p = { h->ready[0], POLLIN, 0 };
		char c;

		if (poll(&p, 1, ms) != 1 || read(h->ready[0], &c, 1) != 1) {
			th_held_kill(h);
			fail_msg("a held process failed before it was ready");
		}
	}
}

int th_held_release(struct th_held *h)
{
	int first = 0;

	close(h->hold[1]);
	close(h->hold[0]);
	close(h->ready[0]);
	close(h->ready[1]);
	for (int i = 0; i < h->n; i++) {
		int st = th_wait(h->pid[i]);

		if (st && !first)
			first = st;
		h->pid[i] = 0;
	}
	h->n = 0;
	return first;
}

void th_held_kill(struct th_held *h)
{
	for (int i = 0; i < h->n; i++)
		th_kill_wait(&h->pid[i]);
}

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

int th_reader_page(procreg_t *r)
{
	int fd = -1;

	procreg_lookup(r, "th.reader.page", NULL);
	return procreg__rcu_page_fds(&r->rcu, &fd, 1) == 1 ? fd : -1;
}

size_t th_adopt_page(struct pr_writer *w, pid_t pid, int fdnum)
{
	int pidfd = procreg__pidfd_open(pid), fd;
	struct pr_rpage_ref ref;
	const char *why = NULL;

	assert_true(pidfd >= 0 && fdnum >= 0);
	fd = (int)syscall(SYS_pidfd_getfd, pidfd, fdnum, 0);
	close(pidfd);
	assert_true(fd >= 0);
	if (procreg__rpage_map(fd, &ref, &why))
		fail_msg("page refused: %s", why ? why : "?");
	close(fd);
	ref.owner = (void *)(uintptr_t)pid;
	assert_int_equal(procreg__w_reader_add(w, &ref), 0);
	return w->readers.n - 1;
}

static int reader_is(const struct procreg_reader *r, void *pid)
{
	return r->pid == *(pid_t *)pid;
}

int th_reader_listed(void *wait)
{
	struct th_reader_wait *w = wait;

	return procreg_readers(w->reg, reader_is, &w->pid) == 1;
}

int th_exited(void *pid)
{
	int st;

	return waitpid(*(pid_t *)pid, &st, WNOHANG) == *(pid_t *)pid;
}

int th_stopped(void *pid)
{
	char path[64], buf[512], *p;
	FILE *fp;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)*(pid_t *)pid);
	fp = fopen(path, "r");
	if (!fp)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = 0;
	/* After the command name, which may hold spaces and parentheses. */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'T';
}

char *th_read_file(const char *path, bool must)
{
	FILE *fp = fopen(path, "re"), *m;
	char *buf = NULL;
	size_t len = 0;
	int c;

	if (!fp) {
		if (must)
			fail_msg("%s: %s", path, strerror(errno));
		buf = strdup("");
		assert_non_null(buf);
		return buf;
	}
	m = open_memstream(&buf, &len);
	assert_non_null(m);
	while ((c = getc(fp)) != EOF)
		putc(c, m);
	fclose(fp);
	assert_int_equal(fclose(m), 0);
	return buf;
}

void th_expect_in(const char *hay, const char *needle)
{
	if (!strstr(hay, needle))
		fail_msg("expected '%s' in:\n%s", needle, hay);
}
