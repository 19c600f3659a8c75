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
 *    nothing but close;
 *  - a client's connection is shut down and emptied before it is closed
 *    (closer_sock_close()): the packets still queued on it hold files
 *    too, and closing the socket would release them on this thread.
 *
 * Bound. The thread can be held up itself, by one such file; files then
 * wait behind it. Each waiting file is charged to the uid that passed it,
 * and a uid with CLOSER_PER_UID of them waiting is not read from until
 * they are closed (server.c parks its connections; a uid privileged as
 * the daemon's is not charged). What one uid can make the daemon hold is
 * then its connections' worth: a packet brings 253 files at most.
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
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct closing *q;        /* cap entries, a power of two */
	size_t cap;
	uint64_t put, closed, told; /* told <= closed <= put */
	int efd;                  /* the thread adds 1 per file closed */
	bool running;
} cl = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .efd = -1 };

static void *closer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&cl.mu);
	for (;;) {
		/* A linger of 0: a socket's close resets it and returns. Its
		 * sender may set another linger through a descriptor it kept,
		 * but then ours is not the last close, or it is, and only
		 * this thread waits. */
		static const struct linger now = { 1, 0 };
		uint64_t one = 1;
		int fd;

		while (cl.closed == cl.put)
			pthread_cond_wait(&cl.cv, &cl.mu);
		fd = cl.q[cl.closed & (cl.cap - 1)].fd;
		pthread_mutex_unlock(&cl.mu);
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
		close(fd);
		pthread_mutex_lock(&cl.mu);
		cl.closed++;
		if (write(cl.efd, &one, sizeof(one)) < 0) {
			/* Only at 2^64 - 1 unread: never. */
		}
	}
	return NULL;
}

int closer_start(struct daemon *d)
{
	int err;

	cl.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (cl.efd < 0)
		return -errno;
	d->closer_ev.kind = EV_CLOSER;
	err = ev_add(d, cl.efd, EPOLLIN, &d->closer_ev);
	/* Detached and never joined: at exit it may be waiting on a file
	 * that will not close, and the exit must not wait for it. */
	if (!err)
		err = pr_thread_start(closer_main, NULL);
	if (err)
		return err;
	cl.running = true;
	return 0;
}

/* Whether closing FD now cannot wait on anything: a memfd or any other
 * shmem file (the only files F_GET_SEALS answers for), or a pidfd. Asked
 * without touching the file's own operations: fstat() of a FUSE file
 * would wait on its server. */
static bool closes_at_once(int fd)
{
	pid_t pid;
	int err;

	if (fcntl(fd, F_GET_SEALS) >= 0)
		return true;
	err = procreg__pidfd_pid(fd, &pid);
	return err == 0 || err == -ESRCH;
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

void closer_put(struct daemon *d, int fd, uid_t uid)
{
	bool queued = false;

	if (fd < 0)
		return;
	if (cl.running && !closes_at_once(fd)) {
		pthread_mutex_lock(&cl.mu);
		if ((queued = room())) {
			cl.q[cl.put & (cl.cap - 1)] = (struct closing){ fd, uid };
			cl.put++;
			pthread_cond_signal(&cl.cv);
		}
		pthread_mutex_unlock(&cl.mu);
	}
	if (queued)
		uid_adjust(&d->uid_closing, uid, 1);
	else
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
}

bool closer_over(const struct daemon *d, uid_t uid)
{
	return !uid_privileged(d, uid) && uid_count(&d->uid_closing, uid) >= CLOSER_PER_UID;
}

/* Every file queued on socket FD's packets, handed to closer_put() as
 * UID's, until none is left. */
static void drain(struct daemon *d, int fd, uid_t uid)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(253 * sizeof(int))];
	} u;
	char byte;

	for (;;) {
		struct iovec iov = { &byte, 1 };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
				      .msg_control = u.b, .msg_controllen = sizeof(u.b) };
		ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (n < 0 && errno == EINTR)
			continue;
		for (struct cmsghdr *h = n >= 0 ? CMSG_FIRSTHDR(&msg) : NULL; h;
		     h = CMSG_NXTHDR(&msg, h)) {
			if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS ||
			    h->cmsg_len < CMSG_LEN(0))
				continue;
			for (size_t k = 0; k < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
				int pfd;

				memcpy(&pfd, CMSG_DATA(h) + k * sizeof(int), sizeof(pfd));
				closer_put(d, pfd, uid);
			}
		}
		if (n <= 0)
			return;
	}
}

void closer_sock_close(struct daemon *d, int fd, uid_t uid)
{
	/* Shut down first: the peer's sends fail from here on (the check
	 * and the queueing are one step under the socket's lock), so once
	 * drained, the queue stays empty and the close releases nothing of
	 * the peer's. */
	if (shutdown(fd, SHUT_RDWR) == 0)
		drain(d, fd, uid);
	close(fd);
}
