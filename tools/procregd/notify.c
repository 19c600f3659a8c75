/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * notify.c - the service manager's readiness and watchdog protocol, as
 * sd_notify(3) documents it: one datagram of "KEY=VALUE" lines to the
 * unix socket named by $NOTIFY_SOCKET (a leading '@': the abstract
 * namespace). READY=1 once the daemon serves, STOPPING=1 when it stops,
 * and, when $WATCHDOG_USEC asks for them, WATCHDOG=1 at half that period
 * from the event loop itself: a daemon that hangs, or is stopped, goes
 * silent, and systemd (WatchdogSec=) restarts it. No libsystemd for one
 * sendto().
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"

/* $WATCHDOG_USEC, if it is meant for this process ($WATCHDOG_PID, when
 * set, names it): 0 if none. */
static uint64_t watchdog_usec(void)
{
	const char *u = getenv("WATCHDOG_USEC"), *p = getenv("WATCHDOG_PID");
	unsigned long long v;
	char *end;

	if (!u || !*u)
		return 0;
	if (p && *p && strtol(p, NULL, 10) != (long)getpid())
		return 0;
	errno = 0;
	v = strtoull(u, &end, 10);
	return errno || *end ? 0 : v;
}

int notify_init(struct daemon *d)
{
	const char *path = getenv("NOTIFY_SOCKET");
	uint64_t usec = watchdog_usec();
	size_t n;

	d->notify_fd = d->watchdog_fd = -1;
	if (!path || !*path)
		return 0;
	n = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || n >= sizeof(d->notify_sa.sun_path)) {
		log_warn("NOTIFY_SOCKET=%s: not a unix socket path: no notifications", path);
		return 0;
	}
	d->notify_sa.sun_family = AF_UNIX;
	memcpy(d->notify_sa.sun_path, path, n);
	if (path[0] == '@')
		d->notify_sa.sun_path[0] = 0;
	d->notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
				    (path[0] == '@' ? 0 : 1));
	d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (d->notify_fd < 0)
		return -errno;
	if (usec) {
		/* Half the period, as sd_watchdog_enabled(3) advises. */
		uint64_t ns = usec * 1000 / 2;
		struct itimerspec its = {
			.it_value = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) },
			.it_interval = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) },
		};

		d->watchdog_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
		if (d->watchdog_fd < 0)
			return -errno;
		d->watchdog_ev.kind = EV_WATCHDOG;
		if (timerfd_settime(d->watchdog_fd, 0, &its, NULL) < 0)
			return -errno;
		return ev_add(d, d->watchdog_fd, EPOLLIN, &d->watchdog_ev);
	}
	return 0;
}

void notify_send(struct daemon *d, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (d->notify_fd < 0)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* Best effort, never blocking: a manager that does not read loses
	 * a notification, the daemon loses nothing. */
	if (sendto(d->notify_fd, msg, strlen(msg), MSG_DONTWAIT | MSG_NOSIGNAL,
		   (const struct sockaddr *)&d->notify_sa, d->notify_len) < 0)
		log_limited(&d->notify_rl, "failed notifications", "NOTIFY_SOCKET: %s",
			    strerror(errno));
}

void notify_watchdog(struct daemon *d)
{
	uint64_t x;

	if (read(d->watchdog_fd, &x, sizeof(x)) == sizeof(x))
		notify_send(d, "WATCHDOG=1");
}

void notify_close(struct daemon *d)
{
	if (d->watchdog_fd >= 0)
		close(d->watchdog_fd);
	if (d->notify_fd >= 0)
		close(d->notify_fd);
	d->watchdog_fd = d->notify_fd = -1;
}
