/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * autostart.c - run and join start procregd when no daemon serves the
 * scope, as gpg-agent and dbus autolaunch do.
 *
 * The daemon is procregd from next to this binary (a build tree), else
 * ../sbin/procregd (an installed prefix), else the first in PATH, else
 * /usr/local/sbin, /usr/sbin, /sbin. It is started without --foreground,
 * so it returns only once it serves (or has failed), and detaches into a
 * session of its own: it outlives the command that started it. Its
 * stdin and stdout are /dev/null; its stderr is a pipe we read until it
 * closes (procregd lets it go once detached), so that a daemon that
 * fails says why through us.
 *
 * Its socket goes where procregd puts it ($XDG_RUNTIME_DIR, else
 * /run/procreg), unless that directory cannot be used by this user (no
 * XDG_RUNTIME_DIR under cron, su or in a container, and /run/procreg is
 * root's): then beside the table, which clients find in the table.
 *
 * The daemon outlives this command, so it takes nothing of the command's
 * but its options: not the descriptors it holds (a lock a script took
 * would be held until the daemon stops), not its working directory (a
 * mount kept busy; relative paths are made absolute first), not what a
 * service manager gave it (NOTIFY_SOCKET would let the daemon speak for
 * the service, LISTEN_* and WATCHDOG_* are the service's), not its
 * blocked signals.
 *
 * Two commands racing to start a daemon for one scope are safe: the
 * scope's lock lets one daemon in, the other exits, and both commands
 * then find the winner serving.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

/* Served: the table names a daemon, or a round trip reaches one. The
 * second is a socket systemd holds for the scope (procregd@.socket): our
 * connection starts its daemon, and no other may be started beside it. */
static bool serving(const struct cli *c)
{
	PROCREG_OPTS(procreg_opts, o, .scope = c->scope, .dir = c->dir,
		     .timeout_ms = c->timeout_ms);
	PROCREG_OPTS(procreg_stats, s);
	procreg_t *reg = procreg_open(&o);
	bool up;

	if (!reg)
		return false;
	procreg_stats(reg, &s);
	up = s.daemon_pid != 0 || procreg_ping(reg, c->timeout_ms) == 0;
	procreg_close(reg);
	return up; /* daemon_pid: checked against its start time */
}

static bool executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* procregd's path into OUT, or -ENOENT. */
static int find_daemon(char *out, size_t len)
{
	static const char *const sbin[] = { "/usr/local/sbin", "/usr/sbin", "/sbin" };
	char self[PATH_MAX], *slash, *path;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n > 0) {
		self[n] = 0;
		if ((slash = strrchr(self, '/'))) {
			*slash = 0;
			if (snprintf(out, len, "%s/procregd", self) < (int)len && executable(out))
				return 0;
			if (snprintf(out, len, "%s/../sbin/procregd", self) < (int)len &&
			    executable(out))
				return 0;
		}
	}
	path = secure_getenv("PATH") ? strdup(secure_getenv("PATH")) : NULL;
	for (char *save = NULL, *d = path ? strtok_r(path, ":", &save) : NULL; d;
	     d = strtok_r(NULL, ":", &save)) {
		if (snprintf(out, len, "%s/procregd", *d ? d : ".") < (int)len && executable(out)) {
			free(path);
			return 0;
		}
	}
	free(path);
	for (size_t i = 0; i < sizeof(sbin) / sizeof(sbin[0]); i++) {
		snprintf(out, len, "%s/procregd", sbin[i]);
		if (executable(out))
			return 0;
	}
	return -ENOENT;
}

/* Off when asked, and in a procreg that runs setuid or setgid (or with
 * file capabilities): its caller chose the environment, PATH included,
 * and the daemon would run with the privilege the caller lacks. */
static bool disabled(const struct cli *c)
{
	const char *e = secure_getenv("PROCREG_NO_AUTOSTART");

	return c->no_autostart || getauxval(AT_SECURE) || (e && *e && strcmp(e, "0"));
}

/* Whether procregd, as this user, could bind a socket in DIR (making DIR
 * if it is missing, as it does). */
static bool sockdir_usable(const char *dir)
{
	char parent[PATH_MAX], *slash;
	struct stat st;

	if (stat(dir, &st) == 0)
		return S_ISDIR(st.st_mode) && access(dir, W_OK | X_OK) == 0;
	if (errno != ENOENT || snprintf(parent, sizeof(parent), "%s", dir) >= (int)sizeof(parent))
		return false;
	slash = strrchr(parent, '/');
	if (!slash)
		return false;
	if (slash == parent)
		slash[1] = 0;
	else
		*slash = 0;
	return sockdir_usable(parent);
}

/* The socket path procregd is to use instead of its default, into OUT:
 * false if the default will do. */
static bool fallback_socket(const struct cli *c, char *out, size_t len)
{
	const char *rt = secure_getenv("XDG_RUNTIME_DIR"), *dir = secure_getenv("PROCREG_DIR");

	/* --dir and PROCREG_DIR put the socket beside the table already;
	 * PROCREG_SOCKET is the user's own choice. */
	if (c->dir || (dir && *dir) || secure_getenv("PROCREG_SOCKET"))
		return false;
	if (sockdir_usable(rt && *rt ? rt : "/run/procreg"))
		return false;
	return snprintf(out, len, "/dev/shm/procreg.%s.sock", scope_name(c)) < (int)len;
}

/* Read FD till it closes: the first LEN-1 bytes into OUT, NUL-ended. */
static void read_all(int fd, char *out, size_t len)
{
	size_t got = 0;
	char skip[512];
	ssize_t r;

	for (;;) {
		char *to = got < len - 1 ? out + got : skip;
		size_t room = got < len - 1 ? len - 1 - got : sizeof(skip);

		r = read(fd, to, room);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (to != skip)
			got += (size_t)r;
	}
	out[got] = 0;
}

/* PATH made absolute against the working directory, which the daemon
 * leaves: into OUT, and OUT returned; PATH itself if it is absolute
 * already (or NULL). NULL if it cannot be made so. */
static const char *absolute(const char *path, char *out, size_t len)
{
	char cwd[PATH_MAX];

	if (!path || path[0] == '/')
		return path;
	if (!getcwd(cwd, sizeof(cwd)) || snprintf(out, len, "%s/%s", cwd, path) >= (int)len)
		return NULL;
	return out;
}

/* In the child about to exec the daemon: the environment's paths made
 * absolute (false if one cannot be), and what a service manager gave
 * this command taken out. */
static bool daemon_env(void)
{
	static const char *const paths[] = { "PROCREG_DIR", "PROCREG_SOCKET", "XDG_RUNTIME_DIR" };
	static const char *const managers[] = { "NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS",
						"LISTEN_FDNAMES", "WATCHDOG_PID", "WATCHDOG_USEC" };
	bool ok = true;

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		const char *v = secure_getenv(paths[i]), *a;
		char buf[PATH_MAX];

		if (!v || !*v)
			continue;
		a = absolute(v, buf, sizeof(buf));
		if (!a)
			ok = false;
		else if (a != v)
			setenv(paths[i], a, 1);
	}
	for (size_t i = 0; i < sizeof(managers) / sizeof(managers[0]); i++)
		unsetenv(managers[i]);
	return ok;
}

int autostart(const struct cli *c, const char *what)
{
	char daemon[PATH_MAX], sock[PATH_MAX], said[4096], abs_daemon[PATH_MAX], abs_dir[PATH_MAX];
	const char *argv[10], *dir = NULL;
	int n = 0, st, p[2];
	bool anchored;
	pid_t pid;

	if (disabled(c) || serving(c))
		return 0;
	if (find_daemon(daemon, sizeof(daemon)) < 0) {
		fprintf(stderr, "%s: %s: no procregd serves scope '%s', and none was found to "
			"start (next to procreg, in PATH or in sbin)\n", prog, what, scope_name(c));
		return EXIT_ERR;
	}
	/* A path from a relative PATH entry, a relative --dir: made absolute
	 * (the daemon leaves our working directory), or, if one cannot be,
	 * the daemon is left in ours. */
	argv[n++] = absolute(daemon, abs_daemon, sizeof(abs_daemon));
	anchored = argv[0] != NULL;
	if (!argv[0])
		argv[0] = daemon;
	if (c->dir) {
		dir = absolute(c->dir, abs_dir, sizeof(abs_dir));
		anchored &= dir != NULL;
		if (!dir)
			dir = c->dir;
	}
	if (c->scope) {
		argv[n++] = "--scope";
		argv[n++] = c->scope;
	}
	if (dir) {
		argv[n++] = "--dir";
		argv[n++] = dir;
	}
	if (fallback_socket(c, sock, sizeof(sock))) {
		argv[n++] = "--socket";
		argv[n++] = sock;
	}
	argv[n] = NULL;
	if (pipe2(p, O_CLOEXEC) < 0) {
		fprintf(stderr, "%s: %s: cannot start procregd: %s\n", prog, what, strerror(errno));
		return EXIT_ERR;
	}
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "%s: %s: cannot start procregd: %s\n", prog, what, strerror(errno));
		close(p[0]);
		close(p[1]);
		return EXIT_ERR;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		sigset_t none;

		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
		}
		dup2(p[1], 2);
		/* Before Linux 5.9, one at a time. (The CLI runs no thread of
		 * its own: this child may call what allocates.) */
		if (close_range(3, ~0u, 0) < 0) {
			struct rlimit rl;
			int most = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536
					   ? (int)rl.rlim_cur
					   : 65536;

			for (int fd = 3; fd < most; fd++)
				close(fd);
		}
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (daemon_env() && anchored && chdir("/") < 0)
			_exit(127);
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	close(p[1]);
	read_all(p[0], said, sizeof(said));
	close(p[0]);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			st = -1;
			break;
		}
	/* Serving: ours, or another command's that won the race. */
	if (serving(c))
		return 0;
	fprintf(stderr, "%s: %s: started %s for scope '%s', but it did not serve (exit status "
		"%d)%s\n%s", prog, what, daemon, cli_name(scope_name(c)),
		st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1, said[0] ? "; it said:" : "", said);
	return EXIT_ERR;
}
