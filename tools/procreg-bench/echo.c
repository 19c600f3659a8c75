/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * echo.c - the unix-socket echo server that procreg-bench measures procreg
 * beside: the transport procreg's clients must use anyway, with none of
 * the daemon's work.
 *
 * Shaped like procregd's loop minus the table: one process, one epoll
 * set, level-triggered; per readable client it reads packets with
 * recv(MSG_DONTWAIT) and answers each, reading on (at most 16) only after
 * a packet of one frame from the one client ready, as procregd does
 * (server_client_event says why). A packet is a run of equal frames, as a
 * client of procregd would send (a REGISTER's header, name and metadata);
 * the first frame's header gives their length, and the answer is one
 * 16-byte reply frame for each, as procregd answers. register.c sends one
 * frame a packet and blocks for the reply, as procreg_register does;
 * stress.c sends a process's frames as procreg_batch does (echo_batch).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bench.h"

#define ECHO_PACKET_MAX 65536   /* procreg's packet limit (lib/proto.h) */
#define ECHO_REPLY 16           /* a reply frame: a header, no body */
#define ECHO_WINDOW 4           /* packets in flight, as procreg_batch */

struct echo_arg {
	int ready;                 /* 1 ready, -1 failed */
	char path[108];
};

/* Answers the packet REQ: how many frames it held. */
static size_t echo_answer(int fd, const uint8_t *req, size_t got, uint8_t *out)
{
	uint32_t flen;
	size_t k;

	memcpy(&flen, req + 4, 4);
	k = flen >= ECHO_REPLY && flen <= got ? got / flen : 1;
	/* Each reply frame: the request's header, op | REPLY, length 16,
	 * status 0. Only the first frame's header is copied: the answer's
	 * size, not its content, is what the client waits for. */
	memset(out, 0, k * ECHO_REPLY);
	memcpy(out, req, ECHO_REPLY);
	out[1] |= 0x80;
	memset(out + 4, 0, 4);
	out[4] = ECHO_REPLY;
	memset(out + 12, 0, 4);
	send(fd, out, k * ECHO_REPLY, MSG_DONTWAIT | MSG_NOSIGNAL);
	return k;
}

static int echo_main(void *arg)
{
	struct echo_arg *a = arg;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct epoll_event ev, evs[64];
	uint8_t *buf = malloc(ECHO_PACKET_MAX), *out = malloc(ECHO_PACKET_MAX);
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct rlimit rl;

	/* A descriptor for each client: stress's thousand processes and
	 * more, past the usual soft limit of 1024. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", a->path);
	if (!buf || !out || lfd < 0 || ep < 0 ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4096) < 0) {
		__atomic_store_n(&a->ready, -1, __ATOMIC_RELEASE);
		return 1;
	}
	ev.events = EPOLLIN;
	ev.data.fd = lfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	__atomic_store_n(&a->ready, 1, __ATOMIC_RELEASE);
	for (;;) {
		int n = epoll_wait(ep, evs, 64, -1), ready = 0;

		for (int i = 0; i < n; i++)
			ready += evs[i].data.fd != lfd;

		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;

			if (fd == lfd) {
				int c;

				while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
					ev.events = EPOLLIN;
					ev.data.fd = c;
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
				}
				continue;
			}
			for (int k = 0; k < (ready > 1 ? 1 : 16); k++) {
				ssize_t got = recv(fd, buf, ECHO_PACKET_MAX, MSG_DONTWAIT);

				if (got < 0)
					break;
				if (got < ECHO_REPLY) {
					epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
					close(fd);
					break;
				}
				if (echo_answer(fd, buf, (size_t)got, out) > 1)
					break;
			}
		}
	}
	return 0;
}

size_t echo_frame_size(size_t name_len, size_t meta_len)
{
	/* ALIGN8(frame header + name body header + name + metadata), as the
	 * protocol frames a REGISTER (lib/proto.c). */
	return (ECHO_REPLY + 8 + name_len + meta_len + 7) & ~(size_t)7;
}

pid_t echo_start(const char *path)
{
	struct echo_arg *a = shared_alloc(sizeof(*a));
	pid_t echo;
	int ready = 0;

	if (!a)
		return -1;
	snprintf(a->path, sizeof(a->path), "%s", path);
	echo = spawn(echo_main, a, -1);
	for (int k = 0; echo > 0 && k < 100000 && !(ready = __atomic_load_n(&a->ready, __ATOMIC_ACQUIRE));
	     k++)
		usleep(100);
	shared_free(a, sizeof(*a));
	if (echo < 0 || ready <= 0) {
		fprintf(stderr, "procreg-bench: the echo server did not start\n");
		if (echo > 0) {
			kill_child(echo);
			reap(echo);
		}
		return -1;
	}
	return echo;
}

int echo_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Wait for one answer: how many reply frames it held, or -1. */
static ssize_t echo_collect(int fd, uint8_t *buf)
{
	ssize_t got = recv(fd, buf, ECHO_PACKET_MAX, 0);

	return got > 0 && got % ECHO_REPLY == 0 ? got / ECHO_REPLY : -1;
}

int echo_batch(int fd, size_t frame, uint64_t n, bool pipelined)
{
	size_t per = pipelined ? ECHO_PACKET_MAX / frame : 1, inflight = 0;
	uint8_t *req = calloc(1, per * frame), reply[ECHO_PACKET_MAX];
	uint64_t sent = 0, answered = 0;
	uint32_t flen = (uint32_t)frame;
	ssize_t got;
	int rc = -1;

	if (!req || frame < ECHO_REPLY || frame > ECHO_PACKET_MAX)
		goto out;
	req[0] = 2;
	memcpy(req + 4, &flen, 4);
	/* Up to ECHO_WINDOW packets in flight, as procreg_batch keeps them;
	 * one at a time (a round trip each) when not pipelined. */
	while (answered < n) {
		if (sent < n && inflight < (pipelined ? ECHO_WINDOW : 1)) {
			size_t k = n - sent < per ? (size_t)(n - sent) : per;

			if (send(fd, req, k * frame, MSG_NOSIGNAL) != (ssize_t)(k * frame))
				goto out;
			sent += k;
			inflight++;
			continue;
		}
		got = echo_collect(fd, reply);
		if (got < 0)
			goto out;
		answered += (uint64_t)got;
		inflight--;
	}
	rc = 0;
out:
	free(req);
	return rc;
}
