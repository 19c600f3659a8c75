/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * log.c - where procregd's messages go, and at what level.
 *
 *  - In the foreground, stderr. When stderr is the journal's stream
 *    (systemd sets JOURNAL_STREAM to its device and inode), each line is
 *    "<N>message", the level as sd-daemon(3) prefixes it: the journal
 *    keeps the level and adds the time and pid itself. Elsewhere,
 *    "YYYY-MM-DD HH:MM:SS.mmm procregd[PID]: LEVEL: message".
 *  - With --log-file PATH, that file, in the second form.
 *  - Detached without --log-file: syslog(3), facility daemon. A daemon
 *    that detached never writes to the terminal (or the pipe) it was
 *    started from: log_detached() lets stderr go.
 *
 * Messages quote names, group names and node names, which any local user
 * (or another node) chooses: the whole message is written in the escaped
 * form (tools/common/output.h), so that it stays one line of printable
 * text on an administrator's terminal or in the journal, whatever they
 * hold, and the bytes can still be read back from it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "output.h"

static enum { TO_STDERR, TO_JOURNAL, TO_FILE, TO_SYSLOG } target = TO_STDERR;
static int log_fd = 2;
/* Messages above this level (less urgent) are dropped: LOG_DEBUG with
 * --verbose, LOG_INFO otherwise. */
static int max_level = LOG_INFO;

void log_set_level(int level)
{
	max_level = level;
}

/* Whether FD is the stream JOURNAL_STREAM ("DEV:INO") names. */
static bool is_journal(int fd)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(fd, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

int log_open(const char *file)
{
	if (file) {
		/* O_NOFOLLOW: a link planted at the path is not followed to a
		 * file of ours to append to. */
		int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);

		if (fd < 0) {
			int err = -errno;

			fprintf(stderr, "procregd: --log-file %s: %s\n", file, strerror(-err));
			return err;
		}
		log_fd = fd;
		target = TO_FILE;
	} else if (is_journal(2)) {
		target = TO_JOURNAL;
	}
	return 0;
}

void log_detached(void)
{
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

	if (target == TO_STDERR || target == TO_JOURNAL) {
		openlog("procregd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
		target = TO_SYSLOG;
	}
	if (null >= 0) {
		dup2(null, 2);
		close(null);
	}
}

static const char *level_word(int prio)
{
	switch (prio) {
	case LOG_ERR: return "error: ";
	case LOG_WARNING: return "warning: ";
	case LOG_NOTICE: return "notice: ";
	case LOG_DEBUG: return "debug: ";
	default: return "";
	}
}

void log_vat(int prio, const char *fmt, va_list ap)
{
	char buf[2048], line[4 * sizeof(buf)];
	const char *cut;
	struct timespec ts;
	struct tm tm;
	int n, saved = errno;

	if (prio > max_level)
		return;
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	if (n < 0)
		n = 0;
	procreg__text_cut(line, sizeof(line), buf, strnlen(buf, sizeof(buf)), SIZE_MAX);
	cut = (size_t)n >= sizeof(buf) ? "...[cut]" : "";
	switch (target) {
	case TO_SYSLOG:
		syslog(prio, "%s%s", line, cut);
		break;
	case TO_JOURNAL:
		dprintf(2, "<%d>%s%s\n", prio, line, cut);
		break;
	default:
		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		dprintf(log_fd, "%04d-%02d-%02d %02d:%02d:%02d.%03ld procregd[%d]: %s%s%s\n",
			tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(), level_word(prio), line, cut);
	}
	errno = saved;
}

void log_at(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vat(prio, fmt, ap);
	va_end(ap);
}

void log_msg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vat(LOG_INFO, fmt, ap);
	va_end(ap);
}
