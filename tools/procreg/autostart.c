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
 * standard streams go to /dev/null, so that it holds none of ours.
 *
 * Two commands racing to start a daemon for one scope are safe: the
 * scope's lock lets one daemon in, the other exits, and both commands
 * then find the winner serving.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

static bool serving(const struct cli *c)
{
	PROCREG_OPTS(procreg_opts, o, .scope = c->scope, .dir = c->dir);
	PROCREG_OPTS(procreg_stats, s);
	procreg_t *reg = procreg_open(&o);

	if (!reg)
		return false;
	procreg_stats(reg, &s);
	procreg_close(reg);
	return s.daemon_pid != 0; /* checked against its start time */
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
	path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
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

static bool disabled(const struct cli *c)
{
	const char *e = getenv("PROCREG_NO_AUTOSTART");

	return c->no_autostart || (e && *e && strcmp(e, "0"));
}

int autostart(const struct cli *c, const char *what)
{
	char daemon[PATH_MAX];
	const char *argv[8];
	int n = 0, st;
	pid_t pid;

	if (disabled(c) || serving(c))
		return 0;
	if (find_daemon(daemon, sizeof(daemon)) < 0) {
		fprintf(stderr, "%s: %s: no procregd serves scope '%s', and none was found to "
			"start (next to procreg, in PATH or in sbin)\n", prog, what, scope_name(c));
		return EXIT_ERR;
	}
	argv[n++] = daemon;
	if (c->scope) {
		argv[n++] = "--scope";
		argv[n++] = c->scope;
	}
	if (c->dir) {
		argv[n++] = "--dir";
		argv[n++] = c->dir;
	}
	argv[n] = NULL;
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "%s: %s: cannot start procregd: %s\n", prog, what, strerror(errno));
		return EXIT_ERR;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
			if (null > 2)
				close(null);
		}
		execv(daemon, (char **)argv);
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			st = -1;
			break;
		}
	/* Serving: ours, or another command's that won the race. */
	if (serving(c))
		return 0;
	fprintf(stderr, "%s: %s: started %s for scope '%s', but it did not serve (exit status "
		"%d); run '%s --foreground%s%s%s%s' to see why\n", prog, what, daemon, scope_name(c),
		st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1, daemon,
		c->scope ? " --scope " : "", c->scope ? c->scope : "", c->dir ? " --dir " : "",
		c->dir ? c->dir : "");
	return EXIT_ERR;
}
