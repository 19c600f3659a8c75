/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ident.c - process identity, paths, clocks.
 *
 * A pid alone names nobody for long: pids are reused. procreg names a
 * process by (pid, start time) within one boot, and, where the kernel has
 * pidfs (6.9 and later), also by the inode of its pidfd, which is never
 * reused within a boot.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#ifndef PIDFS_MAGIC
#define PIDFS_MAGIC 0x50494446
#endif

/* PIDFD_GET_INFO (Linux 6.13), its first version, for headers without
 * it: the kernel fills what the size it is given holds. */
struct pr_pidfd_info {
	uint64_t mask;
	uint64_t cgroupid;
	uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
	uint32_t spare;
};
#define PR_PIDFD_GET_INFO _IOWR(0xFF, 11, struct pr_pidfd_info)
#define PR_PIDFD_INFO_PID 1ull

/* PROCREG_NO_PIDFS: act as a kernel without pidfs (before 6.9), so that
 * the fallbacks can be tested on new kernels. */
static bool pidfs_disabled(void)
{
	static int disabled = -1;

	if (disabled < 0)
		disabled = secure_getenv("PROCREG_NO_PIDFS") != NULL;
	return disabled;
}

static int read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return (int)n;
}

int procreg__proc_start_time(pid_t pid, uint64_t *ticks)
{
	char path[64], buf[1024], *p;
	int n, field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	n = read_small(path, buf, sizeof(buf));
	if (n < 0)
		return n == -ENOENT ? -ESRCH : n;
	/* The command name (field 2) may hold spaces and parentheses: count
	 * fields from the last ')'. */
	p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	for (field = 2; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	if (field != 22)
		return -EIO;
	*ticks = strtoull(p, NULL, 10);
	return 0;
}

int procreg__proc_uid(pid_t pid, uid_t *uid)
{
	char path[64], buf[4096], *p;
	unsigned long r, e;
	int n;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	n = read_small(path, buf, sizeof(buf));
	if (n < 0)
		return n == -ENOENT ? -ESRCH : n;
	p = strstr(buf, "\nUid:");
	if (!p || sscanf(p + 5, "%lu %lu", &r, &e) != 2)
		return -EIO;
	*uid = (uid_t)e;
	return 0;
}

bool procreg__is_pidfd(int fd)
{
	return syscall(SYS_pidfd_send_signal, fd, 0, NULL, 0) == 0 || errno == ESRCH ||
	       errno == EPERM;
}

int procreg__pidfd_pid(int pidfd, pid_t *pid)
{
	char path[64], buf[1024], *p;
	int n;

	/* Asked first, because the fdinfo read below reaches the file's own
	 * operations: an epoll file's takes its mutex, which the process
	 * that made it can hold as long as it likes (an epoll_wait() whose
	 * copy-out faults on memory it handles itself). The daemon calls
	 * this on files its clients pass it. */
	if (!procreg__is_pidfd(pidfd))
		return -EBADF;
	/* A thread's pidfd (PIDFD_THREAD, O_EXCL among its flags) names a
	 * thread: its Pid is the thread's id, and it reports that thread's
	 * exit. Names belong to processes. */
	if (fcntl(pidfd, F_GETFL) & O_EXCL)
		return -EBADF;
	/* One ioctl where pidfs answers it (6.13): procregd asks this of
	 * every client that connects, and the fdinfo read below is an open,
	 * a read and a close of a /proc path. */
	if (!pidfs_disabled()) {
		struct pr_pidfd_info info = { .mask = PR_PIDFD_INFO_PID };

		if (ioctl(pidfd, PR_PIDFD_GET_INFO, &info) == 0) {
			/* 0: outside our pid namespace, as fdinfo says. */
			if (!(info.mask & PR_PIDFD_INFO_PID) || info.pid == 0 ||
			    info.pid > INT_MAX)
				return -ESRCH;
			*pid = (pid_t)info.pid;
			return 0;
		}
		if (errno == ESRCH)
			return -ESRCH;
		/* ENOTTY or EINVAL: a kernel before it. */
	}
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	n = read_small(path, buf, sizeof(buf));
	if (n < 0)
		return n;
	p = strstr(buf, "\nPid:");
	if (!p)
		return -EBADF; /* not a pidfd */
	n = atoi(p + 5);
	if (n <= 0)
		return -ESRCH; /* exited (-1) or outside our pid namespace (0) */
	*pid = n;
	return 0;
}

int procreg__pidfd_exited(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	return poll(&p, 1, 0) != 0;
}

uint64_t procreg__pidfs_ino(int pidfd)
{
	struct statfs sfs;
	struct stat st;

	/* Before pidfs every pidfd shared one anonymous inode: only a pidfs
	 * inode identifies a process. */
	if (pidfs_disabled() || fstatfs(pidfd, &sfs) < 0 || sfs.f_type != PIDFS_MAGIC ||
	    fstat(pidfd, &st) < 0)
		return 0;
	return (uint64_t)st.st_ino;
}

int procreg__pidfd_identity(int pidfd, pid_t *pid, uint64_t *start, uint64_t *ino)
{
	int err = procreg__pidfd_pid(pidfd, pid);

	if (err < 0)
		return err;
	err = procreg__proc_start_time(*pid, start);
	if (err < 0)
		return err;
	/* The start time came from /proc/PID, which may name a new process if
	 * ours exited meanwhile. Ours still lives, so it did not. */
	if (procreg__pidfd_exited(pidfd))
		return -ESRCH;
	*ino = procreg__pidfs_ino(pidfd);
	return 0;
}

int procreg__pidfd_open(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

int procreg__boot_id(uint8_t id[16])
{
	char buf[64];
	int n = read_small("/proc/sys/kernel/random/boot_id", buf, sizeof(buf)), k = 0;

	memset(id, 0, 16);
	if (n < 0)
		return n;
	for (char *p = buf; *p && k < 32; p++) {
		if (!isxdigit((unsigned char)*p))
			continue;
		int v = isdigit((unsigned char)*p) ? *p - '0' : (tolower(*p) - 'a' + 10);
		id[k / 2] |= (uint8_t)(v << ((k & 1) ? 0 : 4));
		k++;
	}
	return k == 32 ? 0 : -EIO;
}

uint64_t procreg__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t procreg__mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- paths ------------------------------------------------------------ */

static int valid_scope(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64 || !strcmp(s, ".") || !strcmp(s, ".."))
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("_.-", *s))
			return 0;
	return 1;
}

static const char *env_or(const char *v, const char *env, const char *def)
{
	const char *e;

	if (v && *v)
		return v;
	e = env ? secure_getenv(env) : NULL;
	return e && *e ? e : def;
}

int procreg__default_socket(char *out, size_t len, const char *scope,
			    const char *dir_override)
{
	const char *dir = dir_override;
	int n;

	if (!dir || !*dir)
		dir = secure_getenv("PROCREG_DIR");
	if (!dir || !*dir)
		dir = secure_getenv("XDG_RUNTIME_DIR");
	if (!dir || !*dir)
		dir = "/run/procreg";
	n = snprintf(out, len, "%s/procreg.%s.sock", dir, scope);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int procreg__paths(struct pr_paths *p, const char *scope, const char *dir,
		   const char *socket)
{
	const char *sc = env_or(scope, "PROCREG_SCOPE", "default");
	const char *d = env_or(dir, "PROCREG_DIR", "/dev/shm");
	const char *so = env_or(socket, "PROCREG_SOCKET", "");
	int n;

	memset(p, 0, sizeof(*p));
	if (!valid_scope(sc))
		return -EINVAL;
	snprintf(p->scope, sizeof(p->scope), "%s", sc);
	n = snprintf(p->dir, sizeof(p->dir), "%s", d);
	if (n < 0 || (size_t)n >= sizeof(p->dir))
		return -ENAMETOOLONG;
	n = snprintf(p->table, sizeof(p->table), "%s/procreg.%s", d, sc);
	if (n < 0 || (size_t)n >= sizeof(p->table))
		return -ENAMETOOLONG;
	n = snprintf(p->socket, sizeof(p->socket), "%s", so);
	if (n < 0 || (size_t)n >= sizeof(p->socket))
		return -ENAMETOOLONG;
	return 0;
}
