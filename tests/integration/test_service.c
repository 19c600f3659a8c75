/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_service.c - procregd as a host's service: where its messages go
 * (levels for the journal, a log file when detached, never the stream it
 * was started from once detached), what the CLI's autostart does when
 * the daemon fails (its reason passed through) or when the runtime
 * directory cannot be used (a socket beside the table), and a live
 * socket at the daemon's path (a service manager's) never replaced.
 * And systemd's two protocols, each through a stand-in for it: socket
 * activation (a process that holds the socket and becomes procregd,
 * LISTEN_FDS, on the first connection), with no table yet and with a
 * table but no daemon; readiness and the watchdog (a NOTIFY_SOCKET the
 * test reads).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

#define A(...) ((const char *const[]){ __VA_ARGS__, NULL })

struct fx {
	char *dir;
	struct th_out *o;
	pid_t adopted;          /* a detached daemon, reparented to us */
	char shm_scope[64];     /* a scope of /dev/shm to clean up, or "" */
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->o = calloc(1, sizeof(*f->o));
	assert_non_null(f->o);
	f->dir = th_mkdtemp();
	/* Detached daemons are reparented to us, to be reaped. */
	assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int st = 0;

	if (f->adopted) {
		kill(f->adopted, SIGTERM);
		st = th_wait(f->adopted);
	}
	if (f->shm_scope[0]) {
		static const char *const sfx[] = { "", ".owners", ".sock" };

		for (size_t i = 0; i < 3; i++) {
			char path[128];

			snprintf(path, sizeof(path), "/dev/shm/procreg.%s%s", f->shm_scope, sfx[i]);
			unlink(path);
		}
	}
	th_rmrf(f->dir);
	free(f->dir);
	free(f->o);
	free(f);
	assert_int_equal(st, 0);
	return 0;
}

/* The daemon pid the table of SCOPE in DIR names (0: none). */
static pid_t daemon_of(const char *dir, const char *scope)
{
	PROCREG_OPTS(procreg_stats, s);
	procreg_t *reg = th_open_scope(dir, scope);

	if (!reg)
		return 0;
	procreg_stats(reg, &s);
	procreg_close(reg);
	return s.daemon_pid;
}

/* ---- logging ---------------------------------------------------------- */

/* Under systemd, stderr is the journal's stream, which JOURNAL_STREAM
 * names by device and inode: each line then carries its level, <N>. */
static void test_journal_levels(void **state)
{
	struct fx *f = *state;
	struct th_daemon d = { 0 }, d2 = { 0 };
	char log[600], env[128], *text;
	struct stat st;
	int fd;

	snprintf(log, sizeof(log), "%s/journal", f->dir);
	fd = open(log, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	close(fd);
	snprintf(env, sizeof(env), "JOURNAL_STREAM=%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	assert_int_equal(th_daemon_start_log(&d, f->dir, log, NULL, A(env)), 0);
	/* An error: a second daemon for the scope, its stderr the same. */
	assert_int_not_equal(th_daemon_start_log(&d2, f->dir, log, NULL, A(env)), 0);
	assert_int_equal(th_daemon_stop(&d), 0);
	text = th_read_file(log, false);
	th_expect_in(text, "<6>serving scope 'default': table ");
	th_expect_in(text, "\n<3>");
	th_expect_in(text, "another procregd serves this scope (pid ");
	th_expect_in(text, "\n<6>stopped\n");
	/* Nothing else: no time, no pid, no level word (the journal's). */
	for (const char *p = text; *p; p = strchr(p, '\n') + 1)
		if (p[0] != '<' || p[2] != '>')
			fail_msg("a line without its level:\n%s", text);
	free(text);

	/* Not the journal's stream (another file): plain lines, with the
	 * date and the level's word. */
	snprintf(log, sizeof(log), "%s/plain", f->dir);
	assert_int_equal(th_daemon_start_log(&d, f->dir, log, NULL, A(env)), 0);
	assert_int_not_equal(th_daemon_start_log(&d2, f->dir, log, NULL, NULL), 0);
	assert_int_equal(th_daemon_stop(&d), 0);
	text = th_read_file(log, false);
	assert_true(text[0] == '2' && text[4] == '-' && text[7] == '-' && text[10] == ' ');
	th_expect_in(text, "]: serving scope 'default'");
	th_expect_in(text, "]: error: ");
	assert_null(strstr(text, "<6>"));
	free(text);
}

/* Detached, procregd lets go of the stream it was started with (th_run
 * reads it to its end: a daemon that kept it would never let it end),
 * and logs to --log-file. */
static void test_detached_log_file(void **state)
{
	struct fx *f = *state;
	char log[600], *text;

	snprintf(log, sizeof(log), "%s/procregd.log", f->dir);
	assert_int_equal(th_run_daemon(f->o, NULL,
				       A(PROCREGD_PATH, "--dir", f->dir, "--log-file", log)),
			 0);
	assert_string_equal(f->o->err, "");
	f->adopted = daemon_of(f->dir, NULL);
	assert_true(f->adopted > 0);
	assert_int_equal(kill(f->adopted, SIGTERM), 0);
	assert_int_equal(th_wait(f->adopted), 0);
	f->adopted = 0;
	text = th_read_file(log, false);
	th_expect_in(text, "]: serving scope 'default'");
	th_expect_in(text, "]: stopped\n");
	free(text);

	/* A log file that cannot be opened: said on stderr, exit 2. */
	assert_int_equal(th_run_daemon(f->o, NULL, A(PROCREGD_PATH, "--foreground", "--dir", f->dir,
					      "--log-file", "/nonexistent/procregd.log")), 2);
	th_expect_in(f->o->err, "procregd: --log-file /nonexistent/procregd.log: No such file or "
			     "directory\n");
}

/* Started with a relative --dir, procregd records where its socket is as
 * a full path: clients find it from anywhere, not just from the
 * directory procregd was started in (they found none before). */
static void test_relative_dir(void **state)
{
	struct fx *f = *state;
	char cwd[PATH_MAX];
	procreg_t *reg;
	int st;

	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(f->dir), 0);
	st = th_run_daemon(f->o, NULL, A(PROCREGD_PATH, "--dir", "."));
	assert_int_equal(chdir(cwd), 0);
	if (st != 0)
		fail_msg("procregd --dir .: %s", f->o->err);
	f->adopted = daemon_of(f->dir, NULL);
	assert_true(f->adopted > 0);
	reg = th_open(f->dir);
	assert_non_null(reg);
	assert_int_equal(procreg_socket_path(reg)[0], '/');
	assert_int_equal(procreg_ping(reg, -1), 0);
	procreg_close(reg);
}

/* ---- autostart -------------------------------------------------------- */

static void test_autostart_says_why(void **state)
{
	struct fx *f = *state;
	char missing[600], want[700];

	snprintf(missing, sizeof(missing), "%s/missing", f->dir);
	{
		const char *argv[16];

		th_cli_argv(argv, 16, missing, A("run", "as.x", "--", "true"));
		assert_int_equal(th_run(f->o, A("PROCREG_NO_AUTOSTART"), argv), 2);
	}
	th_expect_in(f->o->err, "but it did not serve (exit status 1); it said:\n");
	snprintf(want, sizeof(want), "]: error: table directory %s: No such file or directory "
		 "(procregd does not create it)\n", missing);
	th_expect_in(f->o->err, want);
}

/* No usable runtime directory (XDG_RUNTIME_DIR not a directory here; for
 * a user, /run/procreg is root's): the socket goes beside the table. */
static void test_autostart_fallback_socket(void **state)
{
	struct fx *f = *state;
	char rt[600], env[700], want[128];
	const char *argv[16];
	procreg_t *reg;

	snprintf(f->shm_scope, sizeof(f->shm_scope), "svc-fallback-%d", (int)getpid());
	snprintf(rt, sizeof(rt), "%s/not-a-dir", f->dir);
	th_write_file(rt, "", 0600);
	snprintf(env, sizeof(env), "XDG_RUNTIME_DIR=%s", rt);
	th_cli_argv(argv, 16, NULL, A("--scope", f->shm_scope, "run", "fb.x", "--", "true"));
	if (th_run(f->o, A("PROCREG_NO_AUTOSTART", env), argv) != 0)
		fail_msg("procreg run: %s", f->o->err);
	f->adopted = daemon_of("/dev/shm", f->shm_scope);
	assert_true(f->adopted > 0);
	reg = th_open_scope("/dev/shm", f->shm_scope);
	assert_non_null(reg);
	snprintf(want, sizeof(want), "/dev/shm/procreg.%s.sock", f->shm_scope);
	assert_string_equal(procreg_socket_path(reg), want);
	assert_int_equal(procreg_ping(reg, -1), 0);
	procreg_close(reg);
}

/*
 * The daemon the CLI starts outlives the command, so it must hold
 * nothing of the command's. It used to keep the command's descriptors (a
 * lock a script took stayed held until the daemon stopped), its working
 * directory (a mount kept busy) and its NOTIFY_SOCKET (the daemon told
 * the command's service manager it was ready, and that it was the main
 * process). Run from the table's directory with "--dir .": the daemon's
 * table is that directory all the same.
 */
static void test_autostart_takes_nothing(void **state)
{
	struct fx *f = *state;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char lock[600], env[700], path[64], target[PATH_MAX], cwd[PATH_MAX], buf[256];
	const char *argv[16];
	procreg_t *reg;
	ssize_t n;
	int lfd, nfd, st;
	DIR *d;
	struct dirent *de;

	snprintf(lock, sizeof(lock), "%s/job.lock", f->dir);
	/* Not close-on-exec: the command inherits it, as a script's would. */
	lfd = open(lock, O_RDWR | O_CREAT, 0600);
	assert_true(lfd >= 0);
	assert_int_equal(flock(lfd, LOCK_EX), 0);
	nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(nfd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify", f->dir);
	assert_int_equal(bind(nfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	snprintf(env, sizeof(env), "NOTIFY_SOCKET=%s", sa.sun_path);

	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(f->dir), 0);
	th_cli_argv(argv, 16, ".", A("run", "held.x", "--", "true"));
	st = th_run(f->o, A("PROCREG_NO_AUTOSTART", env), argv);
	assert_int_equal(chdir(cwd), 0);
	if (st != 0)
		fail_msg("procreg run: %s", f->o->err);
	close(lfd);
	f->adopted = daemon_of(f->dir, NULL);
	assert_true(f->adopted > 0);
	/* Served: anything it was to say at start, it has said. */
	reg = th_open(f->dir);
	assert_non_null(reg);
	assert_int_equal(procreg_ping(reg, -1), 0);
	procreg_close(reg);

	lfd = open(lock, O_RDWR | O_CLOEXEC);
	assert_true(lfd >= 0);
	if (flock(lfd, LOCK_EX | LOCK_NB) < 0)
		fail_msg("the lock the command held is still held (by procregd?): %s",
			 strerror(errno));
	close(lfd);
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)f->adopted);
	d = opendir(path);
	assert_non_null(d);
	while ((de = readdir(d))) {
		char fd_path[320];

		snprintf(fd_path, sizeof(fd_path), "%s/%s", path, de->d_name);
		n = readlink(fd_path, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = 0;
			if (!strcmp(target, lock))
				fail_msg("procregd holds the command's descriptor of %s", lock);
		}
	}
	closedir(d);
	snprintf(path, sizeof(path), "/proc/%d/cwd", (int)f->adopted);
	n = readlink(path, target, sizeof(target) - 1);
	assert_true(n > 0);
	target[n] = 0;
	assert_string_equal(target, "/");
	n = recv(nfd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
	if (n >= 0) {
		buf[n] = 0;
		fail_msg("procregd notified the command's service manager: %s", buf);
	}
	assert_int_equal(errno, EAGAIN);
	close(nfd);
}

/* ---- the socket ------------------------------------------------------- */

/* A socket that accepts connections at the daemon's path is someone's
 * (a service manager's): procregd refuses to start rather than replace
 * it, and what it made goes. */
static void test_live_socket_kept(void **state)
{
	struct fx *f = *state;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, c;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/procreg.default.sock", f->dir);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 16), 0);
	/* A daemon as a system user may not connect to root's socket
	 * (0755 here): live or not, it is not replaced either. */
	if (th_daemon_user()) {
		assert_int_equal(chmod(sa.sun_path, 0755), 0);
		assert_int_equal(th_run_daemon(f->o, NULL, A(PROCREGD_PATH, "--foreground", "--dir",
							     f->dir)), 1);
		th_expect_in(f->o->err, "procreg.default.sock: a socket this user (uid ");
		th_expect_in(f->o->err, ") may not connect to is bound there");
	}
	/* Open to every user, as procregd@.socket's is (SocketMode=0666). */
	assert_int_equal(chmod(sa.sun_path, 0666), 0);
	assert_int_equal(th_run_daemon(f->o, NULL, A(PROCREGD_PATH, "--foreground", "--dir", f->dir)),
			 1);
	th_expect_in(f->o->err, "procreg.default.sock: a live socket is bound there");
	assert_int_equal(stat(sa.sun_path, &st), 0);
	c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(c);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/procreg.default", f->dir);
	assert_int_equal(stat(sa.sun_path, &st), -1);
	close(fd);

	/* Once nobody listens there, it is a dead daemon's: replaced. */
	assert_int_equal(th_run_daemon(f->o, NULL, A(PROCREGD_PATH, "--dir", f->dir)), 0);
	f->adopted = daemon_of(f->dir, NULL);
	assert_true(f->adopted > 0);
}


/* ---- socket activation ------------------------------------------------ */

/* systemd's procregd@.socket, in small: a child that waits for the first
 * connection on LFD, then becomes procregd with LFD as fd 3, LISTEN_FDS=1
 * and LISTEN_PID its own pid. */
static pid_t stand_in(const char *dir, int lfd)
{
	const struct th_user *du = th_daemon_user();
	pid_t pid;

	if (du)
		th_daemon_user_dir(dir, du);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		char log[600], buf[32];
		int fd;

		while (poll(&p, 1, -1) < 0)
			;
		snprintf(log, sizeof(log), "%s/procregd.log", dir);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		/* dup2() onto itself would leave FD_CLOEXEC set. */
		if (lfd == 3)
			fcntl(3, F_SETFD, 0);
		else
			dup2(lfd, 3);
		snprintf(buf, sizeof(buf), "%d", (int)getpid());
		setenv("LISTEN_PID", buf, 1);
		setenv("LISTEN_FDS", "1", 1);
		unsetenv("PROCREG_DIR");
		unsetenv("PROCREG_SCOPE");
		if (du)
			th_become_kill(du);
		execl(PROCREGD_PATH, "procregd", "--foreground", "--dir", dir, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void stop_adopted(struct fx *f)
{
	assert_int_equal(kill(f->adopted, SIGTERM), 0);
	assert_int_equal(th_wait(f->adopted), 0);
	f->adopted = 0;
}

static void test_socket_activation(void **state)
{
	struct fx *f = *state;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	PROCREG_OPTS(procreg_opts, o, .dir = f->dir, .timeout_ms = 20000);
	PROCREG_OPTS(procreg_stats, s);
	struct stat before, after;
	procreg_t *reg;
	int lfd;

	/* The default path for --dir DIR, held as systemd holds
	 * /run/procreg/procreg.SCOPE.sock. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/procreg.default.sock", f->dir);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 64), 0);
	assert_int_equal(stat(sa.sun_path, &before), 0);

	/* A fresh boot: no table. Opening the registry connects, which
	 * starts the daemon; the open waits for its table. */
	f->adopted = stand_in(f->dir, lfd);
	reg = procreg_open(&o);
	if (!reg) {
		char log[600], *text;

		snprintf(log, sizeof(log), "%s/procregd.log", f->dir);
		text = th_read_file(log, false);
		fail_msg("procreg_open: %s; procregd's log:\n%s", strerror(errno), text);
	}
	assert_int_equal(procreg_register(reg, "act.a", "x", 1), 0);
	assert_int_equal(procreg_stats(reg, &s), 0);
	assert_int_equal(s.daemon_pid, f->adopted);

	/* A table, but its daemon stopped: the next request connects to the
	 * socket the table names, which starts another. */
	stop_adopted(f);
	assert_int_equal(procreg_stats(reg, &s), 0);
	assert_int_equal(s.daemon_pid, 0);
	f->adopted = stand_in(f->dir, lfd);
	assert_int_equal(procreg_register(reg, "act.b", "x", 1), 0);
	assert_int_equal(procreg_stats(reg, &s), 0);
	assert_int_equal(s.daemon_pid, f->adopted);
	procreg_close(reg);

	/* The CLI's autostart uses the socket rather than start a daemon of
	 * its own (which would take the socket's path away). */
	stop_adopted(f);
	f->adopted = stand_in(f->dir, lfd);
	{
		const char *argv[16];

		th_cli_argv(argv, 16, f->dir, A("run", "act.c", "--", "true"));
		if (th_run(f->o, A("PROCREG_NO_AUTOSTART"), argv) != 0)
			fail_msg("procreg run: %s", f->o->err);
	}
	assert_int_equal(daemon_of(f->dir, NULL), f->adopted);
	assert_int_equal(stat(sa.sun_path, &after), 0);
	assert_true(after.st_ino == before.st_ino);
	close(lfd);
}

/* ---- readiness and the watchdog --------------------------------------- */

/* The next notification on FD into BUF; fails the test after 20 s. */
static void next_note(int fd, char *buf, size_t len)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (poll(&p, 1, 20000) != 1)
		fail_msg("no notification");
	n = recv(fd, buf, len - 1, 0);
	assert_true(n > 0);
	buf[n] = 0;
}

/* Notifications until one holds WANT. */
static void note_until(int fd, const char *want, char *buf, size_t len)
{
	do
		next_note(fd, buf, len);
	while (!strstr(buf, want));
}

static void test_notify_watchdog(void **state)
{
	struct fx *f = *state;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct th_daemon d = { 0 };
	char env[700], buf[512], want[64];
	int fd, pid;
	procreg_t *reg;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify", f->dir);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	/* As systemd's is to the services it runs: theirs to send to. */
	th_daemon_own(sa.sun_path);
	snprintf(env, sizeof(env), "NOTIFY_SOCKET=%s", sa.sun_path);
	assert_int_equal(th_daemon_start(&d, f->dir, NULL, A(env, "WATCHDOG_USEC=100000")), 0);
	pid = d.pid;

	/* READY once it serves, from the pid that serves. */
	note_until(fd, "READY=1", buf, sizeof(buf));
	snprintf(want, sizeof(want), "MAINPID=%d", pid);
	th_expect_in(buf, want);
	reg = th_open(f->dir);
	assert_non_null(reg);
	assert_int_equal(procreg_ping(reg, -1), 0);
	procreg_close(reg);

	/* The watchdog, from the event loop: silent while it is stopped,
	 * back when it runs. */
	note_until(fd, "WATCHDOG=1", buf, sizeof(buf));
	note_until(fd, "WATCHDOG=1", buf, sizeof(buf));
	assert_int_equal(kill(pid, SIGSTOP), 0);
	assert_true(th_until(th_stopped, &pid, 10000));
	while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
	{
		struct pollfd p = { .fd = fd, .events = POLLIN };

		/* Ten watchdog periods: a running daemon would have sent. */
		assert_int_equal(poll(&p, 1, 500), 0);
	}
	assert_int_equal(kill(pid, SIGCONT), 0);
	note_until(fd, "WATCHDOG=1", buf, sizeof(buf));

	assert_int_equal(th_daemon_stop(&d), 0);
	note_until(fd, "STOPPING=1", buf, sizeof(buf));
	close(fd);

	/* An abstract socket ('@'), and no watchdog unless asked for. */
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "procreg-test-notify-%d", (int)getpid());
	assert_int_equal(bind(fd, (struct sockaddr *)&sa,
			      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
					  strlen(sa.sun_path + 1))), 0);
	snprintf(env, sizeof(env), "NOTIFY_SOCKET=@%s", sa.sun_path + 1);
	assert_int_equal(th_daemon_start(&d, f->dir, NULL, A(env)), 0);
	note_until(fd, "READY=1", buf, sizeof(buf));
	assert_int_equal(th_daemon_stop(&d), 0);
	next_note(fd, buf, sizeof(buf));
	th_expect_in(buf, "STOPPING=1");
	close(fd);
}

/* ---- as a user of its own --------------------------------------------- */

struct unpriv {
	const char *dir;
	struct th_user daemon_user, client_user;
};

/* As CLIENT_USER: what the daemon's uid does not change. The exit status
 * says which check failed (0: none). */
static int unpriv_client(void *arg)
{
	struct unpriv *u = arg;
	PROCREG_OPTS(procreg_opts, o, .dir = u->dir, .trust_uid = u->daemon_user.uid);
	PROCREG_OPTS(procreg_opts, untrusting, .dir = u->dir);
	TH_ENTRY(e);
	procreg_t *reg;

	th_become(&u->client_user);
	/* A table of another user's is refused unless trusted. */
	if (procreg_open(&untrusting) || errno != EPERM)
		return 10;
	reg = procreg_open(&o);
	if (!reg)
		return 11;
	if (procreg_register(reg, "up.u1", "x", 1) || procreg_register(reg, "up.u2", "x", 1))
		return 12;
	/* --max-names-per-uid 2, counted by the client's own uid. */
	if (procreg_register(reg, "up.u3", "x", 1) != -EDQUOT)
		return 13;
	if (procreg_lookup(reg, "up.u1", &e) || e.uid != u->client_user.uid || e.pid != getpid())
		return 14;
	procreg_close(reg);
	return 0;
}

/* Start procregd --foreground --dir DIR ARGS... as U (with CAP_KILL, as
 * procregd@.service runs it, if KILL) into f->adopted, and wait until it
 * serves: a handle of root's on its table (trusted by .trust_uid, not by
 * the environment, which may name the test's own daemon user). */
static procreg_t *start_as(struct fx *f, const struct th_user *u, bool kill, const char *dir,
			   const char *const *args)
{
	PROCREG_OPTS(procreg_opts, o, .dir = dir, .trust_uid = u->uid);
	const char *argv[16] = { PROCREGD_PATH, "--foreground", "--dir", dir };
	char log[600];
	procreg_t *reg = NULL;

	for (int i = 0, n = 4; args && args[i] && n < 15; i++)
		argv[n++] = args[i];
	snprintf(log, sizeof(log), "%s/procregd.log", f->dir);
	f->adopted = fork();
	assert_true(f->adopted >= 0);
	if (f->adopted == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		if (fd >= 0)
			dup2(fd, 2);
		if (kill)
			th_become_kill(u);
		else
			th_become(u);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 2000 && !reg; i++) {
		PROCREG_OPTS(procreg_stats, s);

		reg = procreg_open(&o);
		if (reg && (procreg_stats(reg, &s) || s.daemon_pid != f->adopted)) {
			procreg_close(reg);
			reg = NULL;
		}
		if (!reg)
			usleep(10000);
	}
	if (!reg) {
		char *text = th_read_file(log, false);

		fail_msg("procregd as %s did not serve:\n%s", u->name, text);
	}
	return reg;
}

/* A directory DIR/SUB for a daemon of U's. */
static void user_dir(const struct fx *f, const char *sub, const struct th_user *u, char *dir,
		     size_t len)
{
	assert_int_equal(chmod(f->dir, 0755), 0);
	snprintf(dir, len, "%s/%s", f->dir, sub);
	assert_int_equal(mkdir(dir, 0755), 0);
	assert_int_equal(chown(dir, u->uid, u->gid), 0);
}

/* procregd as an unprivileged user of its own: peer credentials, pidfds
 * of other users' processes and per-uid quotas work as under root, and
 * without a capability. Clients that trust its user by uid (.trust_uid)
 * map its table; test_system_user has them trust it as the daemon's. */
static void test_unprivileged_daemon(void **state)
{
	struct fx *f = *state;
	struct unpriv u = { 0 };
	char sub[600];
	TH_ENTRY(e);
	procreg_t *reg;
	pid_t child;

	th_user_new(&u.daemon_user);
	th_user_new(&u.client_user);
	user_dir(f, "unpriv", &u.daemon_user, sub, sizeof(sub));
	u.dir = sub;
	reg = start_as(f, &u.daemon_user, false, sub, A("--max-names-per-uid", "2"));

	/* Root's requests: its uid from the peer's credentials, no quota. */
	for (int i = 0; i < 3; i++) {
		char name[32];

		snprintf(name, sizeof(name), "up.root%d", i);
		assert_int_equal(procreg_register(reg, name, "x", 1), 0);
	}
	assert_int_equal(procreg_lookup(reg, "up.root0", &e), 0);
	assert_int_equal(e.uid, 0);
	assert_int_equal(e.pid, getpid());

	/* Another user's process: its names go with it (the daemon's pidfd
	 * of a process not its own). */
	child = th_fork(unpriv_client, &u);
	assert_int_equal(th_wait(child), 0);
	assert_int_equal(procreg_sync(reg), 0);
	assert_int_equal(procreg_lookup(reg, "up.u1", &e), -ENOENT);
	assert_int_equal(procreg_lookup(reg, "up.u2", &e), -ENOENT);
	procreg_close(reg);

	stop_adopted(f);
	th_user_del(&u.client_user);
	th_user_del(&u.daemon_user);
}

/* ---- as the system user of procregd@.service ---------------------------- */

struct sysuser {
	char dir[500], other_dir[520];  /* the daemon's table; a table of OTHER's */
	struct th_user daemon_user, client_user, other_user;
};

/* procreg_open() of DIR with PROCREG_DAEMON_USER set to NAME (NULL:
 * unset): 0 if it maps the table, else errno. */
static int open_naming(const char *dir, const char *name)
{
	PROCREG_OPTS(procreg_opts, o, .dir = dir);
	procreg_t *reg;

	if (name)
		setenv("PROCREG_DAEMON_USER", name, 1);
	else
		unsetenv("PROCREG_DAEMON_USER");
	reg = procreg_open(&o);
	if (!reg)
		return errno;
	procreg_close(reg);
	return 0;
}

/* As CLIENT_USER, with no PROCREG_TRUST_UID: which tables it maps, by
 * what PROCREG_DAEMON_USER says. The exit status says which check failed
 * (0: none). */
static int sysuser_client(void *arg)
{
	struct sysuser *s = arg;
	PROCREG_OPTS(procreg_opts, o, .dir = s->dir);
	char longname[400];
	TH_ENTRY(e);
	procreg_t *reg;

	th_become(&s->client_user);
	unsetenv("PROCREG_TRUST_UID");
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	/* Names that trust no one more: none, the build's (not this user),
	 * root, ourselves, a user that does not exist, a name longer than
	 * any, another unprivileged user. */
	if (open_naming(s->dir, "") != EPERM || open_naming(s->dir, NULL) != EPERM)
		return 10;
	if (open_naming(s->dir, "root") != EPERM || open_naming(s->dir, "0") != EPERM)
		return 11;
	if (open_naming(s->dir, s->client_user.name) != EPERM)
		return 12;
	if (open_naming(s->dir, "prt-no-such-user") != EPERM || open_naming(s->dir, longname) != EPERM)
		return 13;
	if (open_naming(s->dir, s->other_user.name) != EPERM)
		return 14;
	/* A table of another unprivileged user's stays refused while the
	 * daemon's user is named; naming its owner instead maps it (so the
	 * owner alone made the difference). */
	if (open_naming(s->other_dir, s->daemon_user.name) != EPERM)
		return 15;
	if (open_naming(s->other_dir, s->other_user.name) != 0)
		return 16;
	/* The daemon's user named: its table maps, and its daemon serves. */
	if (open_naming(s->dir, s->daemon_user.name) != 0)
		return 17;
	reg = procreg_open(&o);
	if (!reg)
		return 18;
	if (procreg_register(reg, "su.client", "x", 1) || procreg_lookup(reg, "su.client", &e) ||
	    e.uid != s->client_user.uid || e.pid != getpid())
		return 19;
	procreg_close(reg);
	return 0;
}

/* procregd as procregd@.service runs it: a system user with CAP_KILL. A
 * client of a third user's maps its table because PROCREG_DAEMON_USER
 * names that user, and for no other name; a table of some other
 * unprivileged user's is still refused; and a table of root's left where
 * the daemon would make its own is refused, with the reason. */
static void test_system_user(void **state)
{
	struct fx *f = *state;
	struct sysuser *s = calloc(1, sizeof(*s));
	char table[700], root_dir[520];
	struct th_out *o = f->o;
	procreg_t *reg;

	assert_non_null(s);
	th_user_new(&s->daemon_user);
	th_user_new(&s->client_user);
	th_user_new(&s->other_user);
	user_dir(f, "sys", &s->daemon_user, s->dir, sizeof(s->dir));
	reg = start_as(f, &s->daemon_user, true, s->dir, NULL);

	/* Some other user's table: a copy of the daemon's, given to OTHER. */
	th_copy_table(s->dir, "other", table, sizeof(table));
	snprintf(s->other_dir, sizeof(s->other_dir), "%s/other", s->dir);
	assert_int_equal(chmod(s->other_dir, 0755), 0);
	assert_int_equal(chown(table, s->other_user.uid, s->other_user.gid), 0);
	assert_int_equal(chmod(table, 0644), 0);

	assert_int_equal(th_wait(th_fork(sysuser_client, s)), 0);
	assert_int_equal(procreg_sync(reg), 0);
	procreg_close(reg);
	stop_adopted(f);

	/* A table a procregd run as root left: the system user's daemon
	 * refuses it, saying whose it is and what to do. */
	snprintf(root_dir, sizeof(root_dir), "%s/rootleft", s->dir);
	assert_int_equal(mkdir(root_dir, 0755), 0);
	snprintf(table, sizeof(table), "%s/procreg.default", root_dir);
	{
		char from[700];
		struct stat st;

		snprintf(from, sizeof(from), "%s/procreg.default", s->dir);
		th_copy_file(from, table);
		assert_int_equal(chown(root_dir, s->daemon_user.uid, s->daemon_user.gid), 0);
		assert_int_equal(th_run_as(o, &s->daemon_user, NULL,
					   A(PROCREGD_PATH, "--foreground", "--dir", root_dir)), 1);
		th_expect_in(o->err, "procreg.default: owned by root (left by a procregd that ran as "
			     "root?): refused (remove it as root");
		/* Left as it was. */
		assert_int_equal(stat(table, &st), 0);
		assert_int_equal(st.st_uid, 0);
	}
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_journal_levels, setup, teardown),
		cmocka_unit_test_setup_teardown(test_detached_log_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_relative_dir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_autostart_says_why, setup, teardown),
		cmocka_unit_test_setup_teardown(test_autostart_fallback_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_autostart_takes_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_socket_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_socket_activation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_watchdog, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unprivileged_daemon, setup, teardown),
		cmocka_unit_test_setup_teardown(test_system_user, setup, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
