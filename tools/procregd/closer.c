/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * closer.c - the last close of files other processes hand procregd, done
 * off the daemon's thread.
 *
 * Closing a file's last descriptor runs its release, and some releases
 * wait: a TCP socket with SO_LINGER set and data its peer does not take
 * waits out its linger time (for ever, if it asks), a file on a FUSE mount
 * waits for its server to answer FLUSH. Any local user can pass procregd
 * such a file with a packet (SCM_RIGHTS), and a file procregd refuses is
 * one it holds the last reference to. Closed on the daemon's thread, it
 * would stop every client, death and timer for as long as its sender
 * liked. So:
 *
 *  - a passed file procregd does not keep goes to closer_put(), which
 *    closes at once only what cannot wait (a memfd, a pidfd: all that a
 *    well-behaved client passes) and hands the rest to a thread that does
 *    nothing but close, resetting a socket (SO_LINGER 0) first;
 *  - a client's connection is shut down, then handed to the same thread
 *    (closer_sock_close()), which takes the files off the packets still
 *    queued on it and closes them the same way before closing the socket.
 *    Once shut down, nothing more can be queued on it (the peer's send
 *    checks for that and queues under one lock), but how much is queued
 *    cannot be told without reading it all: an empty packet reads as the
 *    end, as does a pending error, with packets still behind them. So the
 *    thread reads past both, until more reads of nothing than the socket
 *    can hold packets (net.unix.max_dgram_qlen).
 *
 * Bound. The thread can be held up itself (by a file on a FUSE mount
 * whose server does not answer, or by a sender that sets SO_LINGER again
 * between our reset and our close through a descriptor it kept and closes
 * just then); everything waits behind it meanwhile. Each waiting file or
 * connection is charged to the uid it came from, and a uid with
 * CLOSER_PER_UID of them waiting is not read from until they are closed
 * (server.c parks its connections; a uid privileged as the daemon's is
 * charged but never parked). While the thread is held up, connections
 * that end wait for it too, and each keeps its descriptor until then.
 *
 * The queue: a ring of put - told entries, under mu. The daemon's thread
 * appends (put) and, once told through the eventfd, retires what was
 * closed (told); the closing thread takes them in order (closed). The
 * thread never frees or moves the ring; the daemon's thread grows it
 * under mu.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon.h"
#include "thread.h"

struct closing {
	int fd;
	uid_t uid;
	bool sock;                /* a client connection, shut down: drained first */
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct closing *q;        /* cap entries, a power of two */
	size_t cap;
	uint64_t put, closed, told; /* told <= closed <= put */
	int efd;                  /* the thread adds 1 per file closed */
	long qlen;                /* net.unix.max_dgram_qlen: packets a socket can hold */
	bool running;
} cl = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .efd = -1 };

/* A linger of 0: a socket's close resets it and returns. */
static void close_now(int fd)
{
	static const struct linger now = { 1, 0 };

	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
	close(fd);
}

/* The closer thread's buffers for drain(): a vector of DRAIN_MAX reads
 * (a batch is one recvmmsg() call: a connection that ended with nothing
 * queued, as a client's does, costs one call, not one per packet it could
 * hold), each with room for a packet's 253 files. */
#define DRAIN_MAX 1024
struct drain_buf {
	struct mmsghdr mm[DRAIN_MAX];
	struct iovec iov[DRAIN_MAX];
	char byte[DRAIN_MAX];
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(PASSED_FDS_MAX * sizeof(int))];
	} u[DRAIN_MAX];
};

/* Close the files a read brought. Whether there were any. */
static bool close_passed(struct msghdr *msg)
{
	int fds[PASSED_FDS_MAX], n = passed_fds(msg, fds);

	for (int k = 0; k < n; k++)
		close_now(fds[k]);
	return n > 0;
}

/* Every file on the packets queued on shut-down socket FD, closed. An
 * empty packet, the end and a pending error all read as nothing; reads of
 * nothing one more than the socket can hold packets mean it is empty. */
static void drain(struct drain_buf *b, int fd)
{
	long empty = 0;

	while (empty <= cl.qlen + 1) {
		unsigned v = (unsigned)(cl.qlen + 2 - empty < DRAIN_MAX ? cl.qlen + 2 - empty
									 : DRAIN_MAX);
		int n;

		for (unsigned i = 0; i < v; i++) {
			b->iov[i] = (struct iovec){ &b->byte[i], 1 };
			b->mm[i].msg_hdr = (struct msghdr){ .msg_iov = &b->iov[i], .msg_iovlen = 1,
							    .msg_control = b->u[i].b,
							    .msg_controllen = sizeof(b->u[i].b) };
		}
		n = recvmmsg(fd, b->mm, v, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, NULL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EBADF || errno == ENOTSOCK || errno == ENOMEM)
				return;
			empty++; /* a pending error, reported once: read on */
			continue;
		}
		for (int i = 0; i < n; i++)
			empty = close_passed(&b->mm[i].msg_hdr) || b->mm[i].msg_len > 0 ? 0 : empty + 1;
	}
}

static void *closer_main(void *arg)
{
	struct drain_buf *b = arg;

	pthread_mutex_lock(&cl.mu);
	for (;;) {
		struct closing c;
		uint64_t one = 1;

		while (cl.closed == cl.put)
			pthread_cond_wait(&cl.cv, &cl.mu);
		c = cl.q[cl.closed & (cl.cap - 1)];
		pthread_mutex_unlock(&cl.mu);
		if (c.sock)
			drain(b, c.fd);
		close_now(c.fd);
		pthread_mutex_lock(&cl.mu);
		cl.closed++;
		if (write(cl.efd, &one, sizeof(one)) < 0) {
			/* Only at 2^64 - 1 unread: never. */
		}
	}
	return NULL;
}

/* net.unix.max_dgram_qlen, the packets a unix socket's queue holds (one
 * more, in fact): 512 unless set, read once at start. */
static long max_qlen(void)
{
	FILE *f = fopen("/proc/sys/net/unix/max_dgram_qlen", "re");
	long v = 0;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v > 0 && v < (1l << 24) ? v : 512;
}

int closer_start(struct daemon *d)
{
	int err;

	cl.qlen = max_qlen();
	cl.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (cl.efd < 0)
		return -errno;
	d->closer_ev.kind = EV_CLOSER;
	err = ev_add(d, cl.efd, EPOLLIN, &d->closer_ev);
	/* Its buffers live as long as the process: the thread is detached
	 * and never joined (at exit it may be waiting on a file that will not
	 * close, and the exit must not wait for it). */
	if (!err) {
		static struct drain_buf *b;

		b = malloc(sizeof(*b));
		err = b ? pr_thread_start(closer_main, b) : -ENOMEM;
	}
	if (err)
		return err;
	cl.running = true;
	return 0;
}

/* Whether closing FD now cannot wait on anything: a memfd or any other
 * shmem file (the only files F_GET_SEALS answers for), or a pidfd
 * (pidfd_send_signal() with no signal answers EBADF for anything else).
 * Neither question reaches the file's own operations: fstat() of a FUSE
 * file waits on its server, and reading /proc/self/fdinfo of an epoll
 * file takes a lock its owner can hold. */
static bool closes_at_once(int fd)
{
	if (fcntl(fd, F_GET_SEALS) >= 0)
		return true;
	return procreg__is_pidfd(fd);
}

/* Room for one more in the ring, under mu: false if there is none. */
static bool room(void)
{
	size_t cap = cl.cap ? cl.cap * 2 : 64;
	struct closing *q;

	if (cl.put - cl.told < cl.cap)
		return true;
	q = malloc(cap * sizeof(*q));
	if (!q)
		return false;
	for (uint64_t i = cl.told; i < cl.put; i++)
		q[i & (cap - 1)] = cl.q[i & (cl.cap - 1)];
	free(cl.q);
	cl.q = q;
	cl.cap = cap;
	return true;
}

/* FD to the thread, charged to UID: false if it could not be queued. */
static bool queue(struct daemon *d, int fd, uid_t uid, bool sock)
{
	bool queued = false;

	if (!cl.running)
		return false;
	pthread_mutex_lock(&cl.mu);
	if ((queued = room())) {
		cl.q[cl.put & (cl.cap - 1)] = (struct closing){ fd, uid, sock };
		cl.put++;
		pthread_cond_signal(&cl.cv);
	}
	pthread_mutex_unlock(&cl.mu);
	if (queued)
		uid_adjust(&d->uid_closing, uid, 1);
	return queued;
}

void closer_put(struct daemon *d, int fd, uid_t uid)
{
	if (fd < 0)
		return;
	/* Out of memory for the ring, or before the thread runs: closed
	 * here, as it was before there was a thread. */
	if (closes_at_once(fd) || !queue(d, fd, uid, false))
		close(fd);
}

void closer_event(struct daemon *d)
{
	uint64_t n;

	if (read(cl.efd, &n, sizeof(n)) < 0)
		return;
	pthread_mutex_lock(&cl.mu);
	for (; cl.told < cl.closed; cl.told++)
		uid_adjust(&d->uid_closing, cl.q[cl.told & (cl.cap - 1)].uid, -1);
	pthread_mutex_unlock(&cl.mu);
	server_unpark(d);
	server_accept_resume(d);
}

bool closer_over(const struct daemon *d, uid_t uid)
{
	return !uid_privileged(d, uid) && uid_count(&d->uid_closing, uid) >= CLOSER_PER_UID;
}

void closer_sock_close(struct daemon *d, int fd, uid_t uid)
{
	/* Shut down first: the peer's sends fail from here on, so what the
	 * thread drains is all there will be. */
	(void)shutdown(fd, SHUT_RDWR);
	if (!queue(d, fd, uid, true))
		close(fd);
}
