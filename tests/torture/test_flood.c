/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_flood.c - peers that push and do not pull: a local client that
 * floods requests and never reads a reply, connections to the bridge port
 * that stop in the middle of a frame, and an unprivileged user passing
 * file descriptors in every shape and feeding the socket random and
 * mutated frames. The daemon must go on serving everyone else, hold a
 * bounded amount of memory for them, and give their fds back once they
 * are gone.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "internal.h"
#include "proto.h"
#include "bridge_proto.h"

#define WAIT_MS 60000


/* Whether the daemon serves: a registration, a lookup and a sync. */
static void serves(procreg_t *reg, const char *name)
{
	assert_int_equal(procreg_register(reg, name, "m", 1), 0);
	assert_int_equal(procreg_lookup(reg, name, NULL), 0);
	assert_int_equal(procreg_sync(reg), 0);
	assert_int_equal(procreg_unregister(reg, name), 0);
}

/* ---- a local client that never reads ---------------------------------- */

static int setup(void **state)
{
	return th_fx_start(state, NULL, NULL);
}

static int teardown(void **state)
{
	return th_fx_stop(state);
}

static int raw_client(const char *dir)
{
	int fd = th_raw_connect(dir);

	th_raw_hello(fd);
	return fd;
}

/* Packets of requests as fast as the socket takes them, never a reply
 * read. The daemon stops reading from it while its replies wait (so what
 * it holds for it is one packet's replies, and the connection's socket
 * buffers), and serves the others meanwhile. */
static void test_client_never_reads(void **state)
{
	struct th_fx *f = *state;
	static uint8_t pkt[PR_PACKET_MAX];
	struct th_fdcount c = { f->d.pid, 0 };
	long rss0, rss1, sent = 0;
	size_t pos = 0;
	int fd;

	serves(f->reg, "warm");
	/* Our reader page costs the daemon a pidfd for as long as we live. */
	assert_int_equal(th_reader_held(f->reg, getpid()), 0);
	c.want = th_count_fds(f->d.pid);
	rss0 = th_status_kb(f->d.pid, "RssAnon");
	fd = raw_client(f->dir);
	/* A full packet of SYNCs: one 16-byte reply each. */
	while (pos + PR_FRAME_HDR <= sizeof(pkt))
		procreg__proto_put(pkt, &pos, PR_OP_SYNC, 0, (uint32_t)pos, 0, NULL, 0, NULL, 0);
	for (;;) {
		ssize_t n = send(fd, pkt, pos, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0) {
			assert_int_equal(errno, EAGAIN);
			break;
		}
		sent++;
		assert_true(sent < 1000000);
	}
	/* Stuck: the daemon does not read it, and serves another client. */
	for (int i = 0; i < 20; i++) {
		char name[32];

		snprintf(name, sizeof(name), "bystander.%d", i);
		serves(f->reg, name);
	}
	rss1 = th_status_kb(f->d.pid, "RssAnon");
	printf("flood: %ld packets of %zu requests sent unread; daemon RssAnon %ld -> %ld kB\n", sent,
	       pos / PR_FRAME_HDR, rss0, rss1);
	/* What waits for it is bounded by the packets it got in, not by what
	 * it sent: a few packets' worth (64 KiB each), nowhere near 8 MiB. */
	assert_true(rss1 - rss0 < 8 * 1024);
	close(fd);
	serves(f->reg, "after");
	assert_true(th_until(th_fds_back, &c, WAIT_MS));
}

/* ---- the bridge port: frames begun and never finished ------------------ */

static int setup_node(void **state)
{
	return th_bridged_fx_start(state, "a", "a-flood-cookie-0123456789");
}

static int teardown_node(void **state)
{
	return th_bridged_fx_stop(state);
}

#define STALLED 200

/* Many connections to the bridge port that send the start of a HELLO and
 * stop: the daemon keeps serving its clients while they hang, drops each
 * at the handshake deadline (HANDSHAKE_MS in mesh.c) with a REFUSE that
 * says so, and has its fds back after. */
static void test_bridge_half_frames(void **state)
{
	struct th_bridged_fx *f = *state;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	static const uint8_t partial[] = { 0x40, 0, 0, 0, PR_BP_HELLO };
	struct th_fdcount c = { f->d.pid, 0 };
	int fds[STALLED], closed = 0, refused = 0;
	bool told[STALLED] = { false };

	serves(f->reg, "warm");
	/* Our reader page costs the daemon a pidfd for as long as we live. */
	assert_int_equal(th_reader_held(f->reg, getpid()), 0);
	c.want = th_count_fds(f->d.pid);
	sa.sin_port = htons((uint16_t)atoi(strchr(f->listen, ':') + 1));
	for (int i = 0; i < STALLED; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(fds[i] >= 0);
		assert_int_equal(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
		assert_int_equal(write(fds[i], partial, sizeof(partial)), (ssize_t)sizeof(partial));
	}
	for (int i = 0; i < 20; i++) {
		char name[32];

		snprintf(name, sizeof(name), "bystander.%d", i);
		serves(f->reg, name);
	}
	/* Each is dropped: its read sees the daemon's REFUSE, then the end;
	 * or only the end, if it was never taken into a handshake. */
	for (uint64_t t0 = procreg__mono_ns(); closed < STALLED;) {
		struct pollfd p[STALLED];
		int np = 0;

		for (int i = 0; i < STALLED; i++)
			if (fds[i] >= 0)
				p[np++] = (struct pollfd){ fds[i], POLLIN, 0 };
		assert_true(poll(p, (nfds_t)np, 1000) >= 0);
		for (int k = 0; k < np; k++) {
			uint8_t buf[4096];
			int i = 0;

			if (!p[k].revents)
				continue;
			while (fds[i] != p[k].fd)
				i++;
			if (read(p[k].fd, buf, sizeof(buf)) > 0) {
				told[i] = buf[4] == PR_BP_REFUSE && buf[8] == PR_BP_REFUSE_TIMEOUT;
				continue;
			}
			refused += !told[i];
			fds[i] = -1;
			close(p[k].fd);
			closed++;
		}
		if (procreg__mono_ns() - t0 > WAIT_MS * 1000000ull)
			fail_msg("%d of %d half-written connections still open", STALLED - closed, STALLED);
	}
	assert_true(th_until(th_fds_back, &c, WAIT_MS));
	serves(f->reg, "after");
	/* Some were taken into a handshake and timed out; the rest, past
	 * the cap on handshakes, were closed at once, without a word. */
	printf("flood: %d half-written bridge connections: %d refused at once, %d timed out\n",
	       STALLED, refused, STALLED - refused);
	assert_true(refused > 0 && refused < STALLED);
	assert_true(th_log_has(f->d.log, "handshake timed out"));
	assert_true(th_log_has(f->d.log, "connection refused: too many handshakes under way"));
}

/* Whether FD's connection was closed by the daemon. */
static int hung_up(int fd, int ms)
{
	struct pollfd p = { fd, POLLIN, 0 };
	char b[64];

	return poll(&p, 1, ms) == 1 && recv(fd, b, sizeof(b), MSG_DONTWAIT) == 0;
}

#define HOLDERS 64
#define TCP_HOLDERS 16

/* The daemon PID's fd limit lowered to WANT + 8 (*OLD gets the one it
 * had), and connections made to it and held, into HOLDERS, until one is
 * refused: each accepted one holds an fd, with no deadline. Returns how
 * many are held. */
static int exhaust_fds(pid_t pid, const char *dir, long want, struct rlimit *old, int *holders)
{
	struct rlimit low;
	int n = 0, refused = 0;

	assert_int_equal(prlimit(pid, RLIMIT_NOFILE, NULL, old), 0);
	low = (struct rlimit){ (rlim_t)want + 8, old->rlim_max };
	assert_int_equal(prlimit(pid, RLIMIT_NOFILE, &low, NULL), 0);
	while (n < HOLDERS && !refused) {
		holders[n] = th_raw_connect(dir);
		refused = hung_up(holders[n++], 100);
	}
	for (int i = 0; i < n && !refused; i++)
		refused = hung_up(holders[i], WAIT_MS / HOLDERS);
	assert_true(refused);
	return n;
}

/* The daemon out of file descriptors (its limit lowered under it): a
 * connection it cannot take, local or to the bridge, is closed at once
 * (logged once a second at most), not left queued to wake the loop
 * forever; and once fds are free again, it serves. */
static void test_out_of_fds(void **state)
{
	struct th_bridged_fx *f = *state;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct th_fdcount c = { f->d.pid, 0 };
	struct rlimit old;
	int holders[HOLDERS], n, tcp[TCP_HOLDERS], ntcp;

	serves(f->reg, "warm");
	/* Our reader page costs the daemon a pidfd for as long as we live. */
	assert_int_equal(th_reader_held(f->reg, getpid()), 0);
	c.want = th_count_fds(f->d.pid);
	n = exhaust_fds(f->d.pid, f->dir, c.want, &old, holders);
	/* The bridge port too. The daemon's fds come and go (a client's
	 * pidfd is held only while it is looked at), so one may be free
	 * now: connections are held, as the local ones were, until one is
	 * refused for want of an fd. */
	sa.sin_port = htons((uint16_t)atoi(strchr(f->listen, ':') + 1));
	for (ntcp = 0; ntcp < TCP_HOLDERS; ) {
		tcp[ntcp] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_int_equal(connect(tcp[ntcp], (struct sockaddr *)&sa, sizeof(sa)), 0);
		if (hung_up(tcp[ntcp++], 200) &&
		    th_log_has(f->d.log, "bridge: connection refused: out of file descriptors"))
			break;
	}
	for (int i = 0; i < ntcp; i++)
		close(tcp[i]);
	if (!th_log_has(f->d.log, "client refused: out of file descriptors") ||
	    !th_log_has(f->d.log, "bridge: connection refused: out of file descriptors")) {
		th_daemon_dump_log(&f->d);
		fail_msg("a refusal for want of fds is not in the daemon's log");
	}

	for (int i = 0; i < n; i++)
		close(holders[i]);
	assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, &old, NULL), 0);
	assert_true(th_until(th_fds_back, &c, WAIT_MS));
	serves(f->reg, "after");
}

/* ---- an unprivileged user passing fds --------------------------------- */

/* The attacks below run in children of their own uid, where cmocka's
 * asserts cannot reach the test: a child exits with a status saying what
 * went wrong (0: as expected). */

static int self_pidfd(void)
{
	return (int)syscall(SYS_pidfd_open, getpid(), 0);
}

/* Send PKT with the NFDS fds of FDS split over NMSG SCM_RIGHTS messages,
 * after an SCM_CREDENTIALS message if CREDS: the result of sendmsg. */
static ssize_t send_fds(int sock, const void *pkt, size_t len, const int *fds, int nfds, int nmsg,
			bool creds, int flags)
{
	static union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(struct ucred)) + 4 * CMSG_SPACE(253 * sizeof(int))];
	} u;
	struct iovec iov = { (void *)pkt, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			      .msg_controllen = sizeof(u.b) };
	struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
	size_t used = 0;

	memset(&u, 0, sizeof(u));
	if (creds) {
		struct ucred c = { getpid(), getuid(), getgid() };

		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_CREDENTIALS;
		h->cmsg_len = CMSG_LEN(sizeof(c));
		memcpy(CMSG_DATA(h), &c, sizeof(c));
		used += CMSG_SPACE(sizeof(c));
		h = CMSG_NXTHDR(&msg, h);
	}
	for (int m = 0, done = 0; m < nmsg && nfds; m++) {
		int k = (nfds - done) / (nmsg - m);

		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN((size_t)k * sizeof(int));
		memcpy(CMSG_DATA(h), fds + done, (size_t)k * sizeof(int));
		used += CMSG_SPACE((size_t)k * sizeof(int));
		done += k;
		h = CMSG_NXTHDR(&msg, h);
	}
	msg.msg_controllen = used;
	if (!used)
		msg.msg_control = NULL;
	return sendmsg(sock, &msg, MSG_NOSIGNAL | flags);
}

/* The reply statuses to what was sent, into ST (up to MAX): how many, or
 * -1 if the daemon closed the connection without one. */
static int replies(int fd, int32_t *st, int max)
{
	static uint8_t buf[PR_PACKET_MAX];
	struct pollfd p = { fd, POLLIN, 0 };
	struct pr_frame f;
	size_t pos = 0;
	ssize_t n;
	int k = 0;

	if (poll(&p, 1, WAIT_MS) != 1)
		return -2;
	n = recv(fd, buf, sizeof(buf), 0);
	if (n <= 0)
		return -1;
	while (k < max && procreg__proto_next(buf, (size_t)n, &pos, &f) == 1)
		st[k++] = f.h.status;
	return k;
}

enum { CLOSED = 1 };

/*
 * One way of passing fds. Each is sent REPEAT times, on a connection of
 * its own, by a process of an unprivileged uid; the daemon's fd count must
 * be back where it was once the process is gone. What the daemon does
 * with the packet is checked too: a packet that brings more fds than its
 * frames take (one at most: HELLO, or a REGISTER or JOIN naming its owner
 * by pidfd) closes the connection unanswered (lib/proto.h); one with the
 * fd a frame takes is answered.
 */
struct fd_shape {
	const char *what;
	bool hello;          /* HELLO first, as a client does */
	int nfds;            /* fds passed */
	int nmsg;            /* in this many SCM_RIGHTS messages */
	bool creds;          /* after an SCM_CREDENTIALS message */
	int kind;            /* the packet: see shape_packet() */
	int expect;          /* CLOSED, or the first reply's status */
};

enum { P_SYNC, P_REGISTER_PIDFD, P_HELLO, P_BIG, P_EMPTY, P_UNFRAMEABLE, P_TWO_PIDFD,
       P_REGISTER_OTHER, P_JOIN_PIDFD };

static const struct fd_shape fd_shapes[] = {
	{ "two fds in one message, on a SYNC", true, 2, 1, false, P_SYNC, CLOSED },
	{ "two fds on a REGISTER by pidfd", true, 2, 1, false, P_REGISTER_PIDFD, CLOSED },
	{ "one fd in each of two messages", true, 2, 2, false, P_REGISTER_PIDFD, CLOSED },
	{ "253 fds in three messages", true, 253, 3, false, P_SYNC, CLOSED },
	{ "an fd on a packet over 64 KiB", true, 1, 1, false, P_BIG, CLOSED },
	{ "an fd on a frame that takes none", true, 1, 1, false, P_SYNC, CLOSED },
	{ "an fd before HELLO", false, 1, 1, false, P_SYNC, CLOSED },
	{ "two fds on HELLO", false, 2, 1, false, P_HELLO, CLOSED },
	{ "an fd on an empty packet", true, 1, 1, false, P_EMPTY, CLOSED },
	{ "an fd on an unframeable packet", true, 1, 1, false, P_UNFRAMEABLE, CLOSED },
	{ "credentials and two fds", true, 2, 1, true, P_REGISTER_PIDFD, CLOSED },
	{ "credentials and a pidfd on REGISTER", true, 1, 1, true, P_REGISTER_PIDFD, 0 },
	{ "a pidfd on JOIN", true, 1, 1, false, P_JOIN_PIDFD, 0 },
	{ "a pidfd for two REGISTERs in one packet", true, 1, 1, false, P_TWO_PIDFD, 0 },
	{ "a second HELLO with an fd", true, 1, 1, false, P_HELLO, -EBADMSG },
	{ "another uid's pidfd on REGISTER", true, 1, 1, false, P_REGISTER_OTHER, -EPERM },
	{ "a file that is no pidfd on REGISTER", true, 1, 1, false, P_REGISTER_OTHER, -EBADF },
};

#define REPEAT 20

static size_t shape_packet(const struct fd_shape *sh, int i, uint8_t *pkt)
{
	char name[32];
	size_t pos = 0;

	snprintf(name, sizeof(name), "fd.%d.%d", getpid(), i);
	switch (sh->kind) {
	case P_SYNC:
		procreg__proto_put(pkt, &pos, PR_OP_SYNC, 0, 2, 0, NULL, 0, NULL, 0);
		break;
	case P_REGISTER_PIDFD:
	case P_REGISTER_OTHER:
		procreg__proto_put_name(pkt, &pos, PR_OP_REGISTER, PR_F_PIDFD, 2, name, strlen(name),
					"m", 1);
		break;
	case P_JOIN_PIDFD:
		procreg__proto_put_name(pkt, &pos, PR_OP_JOIN, PR_F_PIDFD, 2, "fd.group", 8, "m", 1);
		break;
	case P_TWO_PIDFD:
		procreg__proto_put_name(pkt, &pos, PR_OP_REGISTER, PR_F_PIDFD, 2, name, strlen(name),
					"m", 1);
		procreg__proto_put_name(pkt, &pos, PR_OP_REGISTER, PR_F_PIDFD, 3, "fd.second", 9,
					NULL, 0);
		break;
	case P_HELLO:
		procreg__proto_put_hello(pkt, &pos, PR_OP_HELLO, 2, 0);
		break;
	case P_BIG:
		memset(pkt, 0, PR_PACKET_MAX + 64);
		pos = PR_PACKET_MAX + 64;
		break;
	case P_EMPTY:
		break;
	case P_UNFRAMEABLE:
		memcpy(pkt, "abc", 3);
		pos = 3;
		break;
	}
	return pos;
}

static const struct fd_shape *run_shape;

static int pass_fds(void *arg)
{
	static uint8_t pkt[PR_PACKET_MAX + 64];
	const struct fd_shape *sh = run_shape;
	const struct th_user *u = arg;

	th_become(u);
	for (int i = 0; i < REPEAT; i++) {
		int fd = th_raw_try_connect(getenv("FLOOD_DIR")), fds[253], n;
		int32_t st[2];
		size_t len;

		if (fd < 0)
			return 10;
		if (sh->hello && th_raw_try_hello(fd) < 0)
			return 11;
		for (int k = 0; k < sh->nfds; k++)
			fds[k] = -1;
		if (sh->kind == P_REGISTER_OTHER && sh->expect == -EPERM)
			fds[0] = (int)syscall(SYS_pidfd_open, 1, 0); /* init: root's */
		else if (sh->kind == P_REGISTER_OTHER)
			fds[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		else
			fds[0] = self_pidfd();
		for (int k = 1; k < sh->nfds; k++)
			fds[k] = k == 1 ? open("/dev/null", O_RDONLY | O_CLOEXEC) : fds[1];
		if (fds[0] < 0 || (sh->nfds > 1 && fds[1] < 0))
			return 12;
		len = shape_packet(sh, i, pkt);
		if (send_fds(fd, pkt, len, fds, sh->nfds, sh->nmsg, sh->creds, 0) != (ssize_t)len)
			return 13;
		close(fds[0]);
		if (sh->nfds > 1)
			close(fds[1]);
		n = replies(fd, st, 2);
		if (n == -2)
			return 14; /* neither answered nor closed */
		if (sh->expect == CLOSED && n != -1)
			return 15;
		if (sh->expect != CLOSED && (n < 1 || st[0] != sh->expect))
			return 16;
		/* A second REGISTER by the same pidfd in one packet is refused. */
		if (sh->kind == P_TWO_PIDFD && (n != 2 || st[1] != -EBADMSG))
			return 17;
		close(fd);
	}
	return 0;
}

/* Every shape of passing fds that the daemon refuses, or takes, leaves
 * its fd count where it was, from an unprivileged uid. */
static void test_passed_fds(void **state)
{
	struct th_fx *f = *state;
	struct th_fdcount c = { f->d.pid, 0 };
	struct th_user u;

	th_user_new(&u);
	setenv("FLOOD_DIR", f->dir, 1);
	serves(f->reg, "warm");
	/* Our reader page costs the daemon a pidfd for as long as we live. */
	assert_int_equal(th_reader_held(f->reg, getpid()), 0);
	c.want = th_count_fds(f->d.pid);
	for (size_t i = 0; i < sizeof(fd_shapes) / sizeof(fd_shapes[0]); i++) {
		int st;

		run_shape = &fd_shapes[i];
		st = th_wait(th_fork(pass_fds, &u));
		if (st != 0) {
			th_daemon_dump_log(&f->d);
			fail_msg("%s: the attacker exited %d", fd_shapes[i].what, st);
		}
		if (!th_until(th_fds_back, &c, WAIT_MS)) {
			th_list_fds(f->d.pid);
			fail_msg("%s, %d times: the daemon holds %ld fds, %ld before", fd_shapes[i].what,
				 REPEAT, th_count_fds(f->d.pid), c.want);
		}
		printf("passed fds: %s, %d times: fds back to %ld\n", fd_shapes[i].what, REPEAT, c.want);
	}
	assert_int_equal(kill(f->d.pid, 0), 0);
	serves(f->reg, "after");
	assert_true(th_log_has(f->d.log, "file descriptors passed with a packet that takes"));
	th_user_del(&u);
}

/* ---- an unprivileged user passing files whose close waits --------------- */

/* A TCP socket whose last close waits: data queued that its peer never
 * takes, and SO_LINGER for an hour. *PEER gets the accepted end, which
 * must stay open (closed, it would end the wait). -1 on failure. */
static int lingering_socket(int *peer)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct linger hour = { 1, 3600 };
	socklen_t al = sizeof(a);
	int small = 4096, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), fd;
	static char junk[65536];

	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) < 0 ||
	    bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &al) < 0)
		return -1;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) < 0 ||
	    connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -1;
	*peer = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	close(lfd);
	if (*peer < 0)
		return -1;
	/* Until neither end has room: the peer never reads. */
	while (send(fd, junk, sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
		;
	if (errno != EAGAIN && errno != EWOULDBLOCK)
		return -1;
	return setsockopt(fd, SOL_SOCKET, SO_LINGER, &hour, sizeof(hour)) < 0 ? -1 : fd;
}

static void *close_main(void *arg)
{
	close((int)(intptr_t)arg);
	return NULL;
}

/*
 * Let go of lingering socket S, which a packet just sent holds too: the
 * last reference is meant to be the daemon's. But the daemon may take the
 * packet and let go of its own before this runs (a wake-up can run it
 * first: a run on a fresh clone saw it), and this close is then the last and waits the hour:
 * on a thread of its own, so that the attacker goes on to what it
 * checks. The test is of the daemon; in that case its part was easy.
 */
static void let_go(int s)
{
	pthread_t t;

	if (pthread_create(&t, NULL, close_main, (void *)(intptr_t)s) == 0)
		pthread_detach(t);
	else
		close(s);
}

/* How a lingering socket reaches the daemon: each leaves it holding the
 * last reference, on a path of its own. */
enum { LG_REFUSED, LG_NOT_PIDFD, LG_HANGUP, LG_AT_ACCEPT, LG_BEHIND_EMPTY, LG_NWAYS };

static const char *const lg_what[LG_NWAYS] = {
	"on a SYNC, which takes no fd (the connection is closed)",
	"as the pidfd of a REGISTER (refused: not a pidfd)",
	"with a packet sent just before hanging up",
	"queued on a connection refused at accept (the uid's quota is full)",
	"queued there behind two empty packets (an empty packet reads as the end)",
};

/* The daemon of test_lingering_files lets a uid hold this many
 * connections. */
#define LG_CONNS 2

struct lg_arg {
	const struct th_user *u;
	int ready;                 /* a pipe's write end: one byte once all are sent */
	int go, done;              /* test_ctrunc_lingering's second step: pipe ends */
};

/* Connections until one takes PKT (LEN bytes) with fd S (after two empty
 * packets, if EMPTIES) before the daemon refuses it: the packets are then
 * queued on a connection the daemon closes. -1 if none did in many
 * tries. */
static int queue_at_accept(const uint8_t *pkt, size_t len, int s, bool empties)
{
	for (int i = 0; i < 1000; i++) {
		int fd = th_raw_try_connect(getenv("FLOOD_DIR"));
		ssize_t n = fd < 0 ? -1 : 0;

		for (int k = 0; empties && k < 2 && n == 0; k++)
			n = send(fd, "", 0, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n == 0)
			n = send_fds(fd, pkt, len, &s, 1, 1, false, MSG_DONTWAIT);
		if (fd >= 0)
			close(fd);
		if (n == (ssize_t)len)
			return 0;
	}
	return -1;
}

/* A connection and its HELLO, tried again while the daemon refuses it:
 * the uid's quota is LG_CONNS, and a connection closed a moment ago may
 * not be counted out yet. -1 if none was had. */
static int lg_connect(void)
{
	for (int i = 0; i < 500; i++) {
		int fd = th_raw_try_connect(getenv("FLOOD_DIR"));

		if (fd >= 0 && th_raw_try_hello(fd) == 0)
			return fd;
		if (fd >= 0)
			close(fd);
		usleep(10000);
	}
	return -1;
}

static int pass_lingering(void *arg)
{
	static uint8_t pkt[256];
	const struct lg_arg *a = arg;
	int peers[LG_NWAYS], held[LG_CONNS];

	th_become(a->u);
	for (int w = 0; w < LG_NWAYS; w++) {
		int fd = -1, s = lingering_socket(&peers[w]);
		size_t len = 0;

		if (s < 0)
			return 30 + w;
		if (w == LG_NOT_PIDFD)
			procreg__proto_put_name(pkt, &len, PR_OP_REGISTER, PR_F_PIDFD, 2, "lg.name", 7,
						"m", 1);
		else
			procreg__proto_put(pkt, &len, PR_OP_SYNC, 0, 2, 0, NULL, 0, NULL, 0);
		if (w == LG_AT_ACCEPT || w == LG_BEHIND_EMPTY) {
			/* The uid's quota taken, by connections that stay. */
			for (int k = 0; w == LG_AT_ACCEPT && k < LG_CONNS; k++)
				if ((held[k] = lg_connect()) < 0)
					return 40 + w;
			if (queue_at_accept(pkt, len, s, w == LG_BEHIND_EMPTY) < 0)
				return 50 + w;
			let_go(s);
			continue;
		}
		fd = lg_connect();
		if (fd < 0)
			return 40 + w;
		if (send_fds(fd, pkt, len, &s, 1, 1, false, 0) != (ssize_t)len)
			return 60 + w;
		let_go(s);
		if (w == LG_NOT_PIDFD) {
			int32_t st[1];

			if (replies(fd, st, 1) != 1 || st[0] != -EBADF)
				return 70 + w;
		}
		close(fd);
	}
	if (write(a->ready, "", 1) != 1)
		return 80;
	/* The peers stay open, the sockets' data unsent, until we are
	 * killed. */
	pause();
	return 0;
}

static int setup_lingering(void **state)
{
	static const char *const args[] = { "--max-clients-per-uid", "2", NULL };

	_Static_assert(LG_CONNS == 2, "the daemon's --max-clients-per-uid");
	return th_fx_start(state, args, NULL);
}

/* A handle that gives up after 20 s: a daemon that waited on a close
 * would answer no one, and a test must not wait with it. */
static procreg_t *impatient_handle(const char *dir)
{
	PROCREG_OPTS(procreg_opts, o);
	procreg_t *reg;

	o.dir = dir;
	o.timeout_ms = 20000;
	reg = procreg_open(&o);
	assert_non_null(reg);
	return reg;
}

/* FN(A) forked as the attacker, back once it has written its ready byte
 * to A->ready. On any failure the attacker goes first: its end of each
 * TCP connection closed, a daemon waiting on a close is let go, and the
 * teardown does not wait an hour. */
static pid_t attack(struct th_fx *f, int (*fn)(void *), struct lg_arg *a)
{
	int ready[2];
	struct pollfd p;
	pid_t kid;
	char b;

	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	a->ready = ready[1];
	kid = th_fork(fn, a);
	close(ready[1]);
	p = (struct pollfd){ ready[0], POLLIN, 0 };
	if (poll(&p, 1, WAIT_MS) != 1 || read(ready[0], &b, 1) != 1) {
		int st;

		kill(kid, SIGKILL);
		st = th_wait(kid);
		th_daemon_dump_log(&f->d);
		fail_msg("the attacker was not ready in %d s (it exited %d; %d: killed, stuck waiting on the daemon)",
			 WAIT_MS / 1000, st, 128 + SIGKILL);
	}
	close(ready[0]);
	return kid;
}

/* A name registered, looked up and removed through REG: the three
 * results into ERRS. */
static void try_serving(procreg_t *reg, const char *name, int errs[3])
{
	errs[0] = procreg_register(reg, name, "m", 1);
	errs[1] = procreg_lookup(reg, name, NULL);
	errs[2] = procreg_unregister(reg, name);
}

/* The start of an attack: the attacker's user made, the daemon warm and
 * holding our reader page, an impatient handle connected; the daemon's
 * fd count then into *C. The handle. */
static procreg_t *attack_begin(struct th_fx *f, struct th_user *u, struct th_fdcount *c)
{
	procreg_t *reg;

	th_user_new(u);
	setenv("FLOOD_DIR", f->dir, 1);
	serves(f->reg, "warm");
	assert_int_equal(th_reader_held(f->reg, getpid()), 0);
	reg = impatient_handle(f->dir);
	assert_int_equal(procreg_sync(reg), 0);
	*c = (struct th_fdcount){ f->d.pid, th_count_fds(f->d.pid) };
	return reg;
}

/* The end, the attacker gone: REG was served (ERRS, try_serving), the
 * daemon's fds are back where they were once REG is closed, and it
 * serves. */
static void attack_end(struct th_fx *f, struct th_user *u, procreg_t *reg, const int errs[3],
		       struct th_fdcount *c)
{
	for (int i = 0; i < 3; i++)
		assert_int_equal(errs[i], 0);
	procreg_close(reg);
	if (!th_until(th_fds_back, c, WAIT_MS)) {
		th_list_fds(f->d.pid);
		fail_msg("the daemon holds %ld fds, %ld before", th_count_fds(f->d.pid), c->want);
	}
	assert_int_equal(kill(f->d.pid, 0), 0);
	serves(f->reg, "after");
	th_user_del(u);
}

/*
 * An unprivileged user passes the daemon TCP sockets whose last close
 * waits an hour (unsent data, SO_LINGER), in each way that leaves the
 * daemon the last reference. The daemon still serves another client at
 * once, and, once the sockets are closed, holds no more fds than before.
 */
static void test_lingering_files(void **state)
{
	struct th_fx *f = *state;
	struct th_fdcount c;
	struct th_user u;
	struct lg_arg a;
	int errs[3];
	procreg_t *reg = attack_begin(f, &u, &c);
	pid_t kid;

	a = (struct lg_arg){ .u = &u };
	kid = attack(f, pass_lingering, &a);
	for (int w = 0; w < LG_NWAYS; w++)
		printf("passed a socket whose close waits an hour: %s\n", lg_what[w]);
	/* Another client, served while the sockets still wait. */
	try_serving(reg, "lg.after", errs);
	th_kill_wait(&kid);
	attack_end(f, &u, reg, errs, &c);
}

/* Whether FD's connection ended within MS ms with nothing to read: the
 * end (the daemon shut it down) or a reset (it closed it with packets
 * unread). */
static bool ended(int fd, int ms)
{
	struct pollfd p = { fd, POLLIN, 0 };
	char b[64];
	ssize_t n;

	if (poll(&p, 1, ms) != 1)
		return false;
	n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* As the unprivileged user, to a daemon out of fds: a socket whose close
 * waits an hour, passed with a HELLO (PKT, LEN) on a new connection and
 * closed here at once, tried again on another connection while the
 * daemon sheds them before the packet is in (closing a socket not
 * passed would wait the hour here). The connection, or -1 if none took
 * the packet in many tries. The sockets' peers go to PEERS[*NP], which
 * must stay open. */
#define PEERS_MAX 256

static int pass_lingering_hello(const uint8_t *pkt, size_t len, int *peers, int *np)
{
	static int s = -1;

	for (int i = 0; i < 100; i++) {
		int fd = th_raw_try_connect(getenv("FLOOD_DIR"));

		if (s < 0 && (*np >= PEERS_MAX || (s = lingering_socket(&peers[(*np)++])) < 0))
			return -1;
		if (fd < 0) {
			usleep(10000);
			continue;
		}
		if (send_fds(fd, pkt, len, &s, 1, 1, false, MSG_DONTWAIT) == (ssize_t)len) {
			let_go(s);
			s = -1;
			return fd;
		}
		close(fd);
	}
	return -1;
}

/* As the unprivileged user: such sockets passed until a connection is
 * shed at accept (it ends with no reply; one the daemon took instead
 * would have been answered). */
static int shed_lingering(void *arg)
{
	const struct lg_arg *a = arg;
	int peers[PEERS_MAX], np = 0;
	uint8_t pkt[64];
	size_t len = 0;

	th_become(a->u);
	procreg__proto_put_hello(pkt, &len, PR_OP_HELLO, 1, 0);
	for (int i = 0; i < 100; i++) {
		int fd = pass_lingering_hello(pkt, len, peers, &np);
		bool shed;

		if (fd < 0)
			return 20;
		shed = ended(fd, WAIT_MS);
		close(fd);
		if (!shed)
			continue;
		if (write(a->ready, "", 1) != 1)
			return 22;
		/* The peers stay open, the data unsent, until we are killed. */
		pause();
		return 0;
	}
	return 21;
}

/*
 * The daemon out of fds sheds a connection at accept (pr_accept): an
 * unprivileged user has queued a packet on it carrying a socket whose
 * last close waits an hour. Once fds are free again, another client is
 * served at once, while that socket still waits.
 */
static void test_shed_lingering(void **state)
{
	struct th_fx *f = *state;
	struct th_fdcount c;
	struct th_user u;
	struct rlimit old;
	struct lg_arg a;
	int holders[HOLDERS], n, errs[3];
	procreg_t *reg = attack_begin(f, &u, &c);
	pid_t kid;

	n = exhaust_fds(f->d.pid, f->dir, c.want, &old, holders);
	a = (struct lg_arg){ .u = &u };
	kid = attack(f, shed_lingering, &a);
	printf("passed a socket whose close waits an hour on a connection shed at accept\n");
	for (int i = 0; i < n; i++)
		close(holders[i]);
	assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, &old, NULL), 0);
	try_serving(reg, "shed.after", errs);
	th_kill_wait(&kid);
	assert_true(th_log_has(f->d.log, "client refused: out of file descriptors"));
	attack_end(f, &u, reg, errs, &c);
}

/* As the unprivileged user: BACKLOG_CONNS connections to a daemon out
 * of fds, each with such a socket queued on it (pass_lingering_hello);
 * the first may be shed, the rest wait in the listening socket's
 * backlog. */
#define BACKLOG_CONNS 4

static int queue_lingering(void *arg)
{
	const struct lg_arg *a = arg;
	int peers[PEERS_MAX], np = 0, conns[BACKLOG_CONNS];
	uint8_t pkt[64];
	size_t len = 0;

	th_become(a->u);
	procreg__proto_put_hello(pkt, &len, PR_OP_HELLO, 1, 0);
	for (int i = 0; i < BACKLOG_CONNS; i++)
		if ((conns[i] = pass_lingering_hello(pkt, len, peers, &np)) < 0)
			return 20;
	if (write(a->ready, "", 1) != 1)
		return 22;
	pause();
	return 0;
}

/*
 * SIGTERM while connections not yet accepted hold packets carrying
 * sockets whose close waits an hour (the daemon out of fds, so that they
 * stay in the backlog): procregd exits at once all the same.
 */
static void test_shutdown_lingering(void **state)
{
	struct th_fx *f = *state;
	struct th_user u;
	struct rlimit old;
	struct lg_arg a;
	int holders[HOLDERS], n;
	pid_t kid;
	bool gone;

	th_user_new(&u);
	setenv("FLOOD_DIR", f->dir, 1);
	serves(f->reg, "warm");
	n = exhaust_fds(f->d.pid, f->dir, th_count_fds(f->d.pid), &old, holders);
	a = (struct lg_arg){ .u = &u };
	kid = attack(f, queue_lingering, &a);
	kill(f->d.pid, SIGTERM);
	gone = th_until(th_exited, &f->d.pid, 20000);
	/* Its peers closed, the attacker's sockets close at once: a daemon
	 * still waiting on one is let go. */
	th_kill_wait(&kid);
	if (!gone)
		th_wait(f->d.pid);
	f->d.pid = 0;
	for (int i = 0; i < n; i++)
		close(holders[i]);
	if (!gone) {
		th_daemon_dump_log(&f->d);
		fail_msg("procregd did not exit within 20 s of SIGTERM");
	}
	printf("SIGTERM with %d sockets whose close waits an hour queued on unaccepted connections: exited at once\n",
	       BACKLOG_CONNS);
	th_user_del(&u);
}

/* As the unprivileged user: a connection, HELLO said; once told to go,
 * a REGISTER by "pidfd" with a socket whose close waits an hour, closed
 * here at once; then it waits for the daemon to end the connection. */
static int ctrunc_lingering(void *arg)
{
	const struct lg_arg *a = arg;
	uint8_t pkt[256];
	size_t len = 0;
	int fd, s, peer;
	char b;

	th_become(a->u);
	fd = th_raw_try_connect(getenv("FLOOD_DIR"));
	if (fd < 0 || th_raw_try_hello(fd) < 0)
		return 20;
	s = lingering_socket(&peer);
	if (s < 0)
		return 21;
	if (write(a->ready, "", 1) != 1 || read(a->go, &b, 1) != 1)
		return 22;
	procreg__proto_put_name(pkt, &len, PR_OP_REGISTER, PR_F_PIDFD, 2, "ct.name", 7, "m", 1);
	if (send_fds(fd, pkt, len, &s, 1, 1, false, 0) != (ssize_t)len)
		return 23;
	let_go(s);
	if (!ended(fd, WAIT_MS))
		return 24;
	if (write(a->done, "", 1) != 1)
		return 25;
	/* The peer stays open, the data unsent, until we are killed. */
	pause();
	return 0;
}

/* The end of a test_ctrunc_*: once the attacker KID says (on DONE) that
 * the daemon ended its connection, the daemon's fd limit back to OLD and
 * another client served (ERRS); then the verdict, WHAT said. */
static void ctrunc_end(struct th_fx *f, struct th_user *u, procreg_t *reg, struct th_fdcount *c,
		       pid_t kid, int done, const struct rlimit *old, const char *what)
{
	struct pollfd p = { done, POLLIN, 0 };
	int errs[3] = { -1, -1, -1 };
	bool ended_ok;
	char b;

	ended_ok = poll(&p, 1, WAIT_MS) == 1 && read(done, &b, 1) == 1;
	assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, old, NULL), 0);
	if (ended_ok)
		try_serving(reg, "ct.after", errs);
	close(done);
	if (!ended_ok) {
		/* Its exit status says which step it did not get past (20-27;
		 * 137: still waiting, killed). */
		int st;

		kill(kid, SIGKILL);
		st = th_wait(kid);
		th_daemon_dump_log(&f->d);
		fail_msg("the daemon did not end the connection in %d s (the attacker exited %d)",
			 WAIT_MS / 1000, st);
	}
	th_kill_wait(&kid);
	printf("%s\n", what);
	attack_end(f, u, reg, errs, c);
}

/*
 * A client already connected passes a socket whose close waits an hour
 * while the daemon has no fd to receive it into (its limit lowered to
 * 0 under it): the kernel drops what it cannot install, and that drop
 * must not be the file's last reference on the serving thread. The
 * daemon ends that connection, and once it has fds again serves another
 * client at once, the socket still waiting.
 */
static void test_ctrunc_lingering(void **state)
{
	struct th_fx *f = *state;
	struct th_fdcount c;
	struct th_user u;
	struct rlimit old, none;
	struct lg_arg a;
	int go[2], done[2];
	procreg_t *reg = attack_begin(f, &u, &c);
	pid_t kid;

	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(done, O_CLOEXEC), 0);
	a = (struct lg_arg){ .u = &u, .go = go[0], .done = done[1] };
	kid = attack(f, ctrunc_lingering, &a);
	close(go[0]);
	close(done[1]);
	assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, NULL, &old), 0);
	none = (struct rlimit){ 0, old.rlim_max };
	assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, &none, NULL), 0);
	assert_int_equal(write(go[1], "", 1), 1);
	close(go[1]);
	ctrunc_end(f, &u, reg, &c, kid, done[0], &old,
		   "passed a socket whose close waits an hour to a daemon with no fd to take it");
}

/* As the unprivileged user: a connection; once told to go (the daemon
 * stopped), a HELLO that says no file will follow (PR_HELLO_NOFILES) and,
 * before the daemon can read it, a REGISTER by "pidfd" with LG_EARLY
 * sockets whose close waits an hour, closed here at once; then the
 * HELLO's reply, and the end of the connection. */
#define LG_EARLY 16

static int early_lingering(void *arg)
{
	const struct lg_arg *a = arg;
	int socks[LG_EARLY], peers[LG_EARLY], fd;
	uint8_t pkt[256];
	size_t len = 0;
	char b;

	th_become(a->u);
	fd = th_raw_try_connect(getenv("FLOOD_DIR"));
	if (fd < 0)
		return 20;
	for (int i = 0; i < LG_EARLY; i++)
		if ((socks[i] = lingering_socket(&peers[i])) < 0)
			return 21;
	if (write(a->ready, "", 1) != 1 || read(a->go, &b, 1) != 1)
		return 22;
	procreg__proto_put_hello_flags(pkt, &len, PR_OP_HELLO, 1, 0, PR_HELLO_NOFILES);
	if (send(fd, pkt, len, MSG_NOSIGNAL) != (ssize_t)len)
		return 23;
	len = 0;
	procreg__proto_put_name(pkt, &len, PR_OP_REGISTER, PR_F_PIDFD, 2, "early.name", 10, "m", 1);
	if (send_fds(fd, pkt, len, socks, LG_EARLY, 1, false, 0) != (ssize_t)len)
		return 24;
	for (int i = 0; i < LG_EARLY; i++)
		let_go(socks[i]);
	if (write(a->ready, "", 1) != 1)
		return 25;
	if (recv(fd, pkt, sizeof(pkt), 0) <= 0 || !ended(fd, WAIT_MS))
		return 26;
	if (write(a->done, "", 1) != 1)
		return 27;
	pause();
	return 0;
}

/*
 * The same as test_ctrunc_lingering, through the window a client that
 * says it will pass no file has before the kernel refuses its files: a
 * packet it sent before the daemon read its HELLO carries sockets whose
 * close waits, and reaches a daemon with fds for only a few of them (its
 * limit lowered while it is stopped). Such a packet must still be peeked
 * first, not taken in one call: the kernel would drop what it cannot
 * install, the last references, on the serving thread. The daemon ends
 * the connection, and serves another client at once.
 */
static void test_ctrunc_before_arm(void **state)
{
	struct th_fx *f = *state;
	struct th_fdcount c;
	struct th_user u;
	struct rlimit old, low;
	struct lg_arg a;
	int ready[2], go[2], done[2];
	struct pollfd p;
	procreg_t *reg = attack_begin(f, &u, &c);
	pid_t kid;
	char b;

	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(done, O_CLOEXEC), 0);
	a = (struct lg_arg){ .u = &u, .ready = ready[1], .go = go[0], .done = done[1] };
	kid = th_fork(early_lingering, &a);
	assert_true(kid > 0);
	close(ready[1]);
	close(go[0]);
	close(done[1]);
	p = (struct pollfd){ ready[0], POLLIN, 0 };
	assert_true(poll(&p, 1, WAIT_MS) == 1 && read(ready[0], &b, 1) == 1);
	/* Stopped, the daemon reads nothing until both packets are queued;
	 * then it may have fds for its accept, the peer's pidfd, the HELLO's
	 * reads of /proc and two more: not for LG_EARLY. */
	assert_int_equal(kill(f->d.pid, SIGSTOP), 0);
	assert_int_equal(write(go[1], "", 1), 1);
	/* Both sent (else the attacker's exit status will say where it
	 * stopped). */
	if (poll(&p, 1, WAIT_MS) != 1 || read(ready[0], &b, 1) != 1)
		printf("the attacker did not say it sent both packets\n");
	assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, NULL, &old), 0);
	low = (struct rlimit){ (rlim_t)th_count_fds(f->d.pid) + 5, old.rlim_max };
	assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, &low, NULL), 0);
	assert_int_equal(kill(f->d.pid, SIGCONT), 0);
	close(ready[0]);
	close(go[1]);
	ctrunc_end(f, &u, reg, &c, kid, done[0], &old,
		   "passed sockets whose close waits an hour, before the HELLO that refuses files "
		   "was read, to a daemon with fds for few");
}

/* As the unprivileged user: ARMs the daemon never asked for. Each on a
 * connection of its own must end it unanswered: a wrong word after a
 * HELLO that asked for files to be refused; the right word sent twice;
 * an ARM after a HELLO that asked for nothing; an ARM before any HELLO.
 * And the right ARM, then a packet longer than any the daemon takes
 * (read with recv() from then on), of whole requests to its end. */
static int arm_games(void *arg)
{
	static uint8_t big[PR_PACKET_MAX + 4 * PR_FRAME_HDR];
	const struct lg_arg *a = arg;
	uint64_t arm;
	size_t pos = 0;
	int fd;

	procreg__proto_put(big, &pos, PR_OP_SYNC, 0, 1, 0, NULL, 0, NULL, 0);
	for (; pos < sizeof(big); pos += PR_FRAME_HDR)
		memcpy(big + pos, big, PR_FRAME_HDR);
	th_become(a->u);
	for (int k = 0; k < 5; k++) {
		bool nofiles = k < 2 || k == 4;

		fd = th_raw_try_connect(getenv("FLOOD_DIR"));
		arm = 0;
		if (fd < 0 || (k != 3 && th_raw_try_hello_flags(fd, nofiles ? PR_HELLO_NOFILES : 0,
							      &arm) < 0))
			return 20 + k;
		if (nofiles && !arm)
			return 30 + k; /* this kernel refuses files: checked first */
		arm = k == 0 ? arm + 1 : arm;
		if (th_raw_try_arm(fd, arm) < 0 || (k == 1 && th_raw_try_arm(fd, arm) < 0) ||
		    (k == 4 && send(fd, big, sizeof(big), MSG_NOSIGNAL) != (ssize_t)sizeof(big)))
			return 40 + k;
		if (!ended(fd, WAIT_MS))
			return 50 + k;
		close(fd);
	}
	if (write(a->ready, "", 1) != 1)
		return 60;
	pause();
	return 0;
}

/* Another uid's ARMs that do not fit its HELLOs, and its oversized packet
 * after a right one: each connection ends, and the daemon goes on
 * serving, its fds where they were. */
static void test_arm_games(void **state)
{
	struct th_fx *f = *state;
	struct th_fdcount c;
	struct th_user u;
	struct lg_arg a;
	int errs[3] = { -1, -1, -1 };
	procreg_t *reg;
	pid_t kid;
	int sv[2], off = 0;

	/* The daemon arms only where the kernel refuses files. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	if (setsockopt(sv[0], SOL_SOCKET, 83 /* SO_PASSRIGHTS */, &off, sizeof(off)) < 0) {
		close(sv[0]);
		close(sv[1]);
		printf("SKIPPED: this kernel lacks SO_PASSRIGHTS (Linux 6.16)\n");
		skip();
	}
	close(sv[0]);
	close(sv[1]);
	reg = attack_begin(f, &u, &c);
	a = (struct lg_arg){ .u = &u };
	kid = attack(f, arm_games, &a);
	th_kill_wait(&kid);
	try_serving(reg, "arm.after", errs);
	printf("ARMs with a wrong word, twice, after a plain HELLO and before any, and a packet too "
	       "big after a right one: each connection ended\n");
	attack_end(f, &u, reg, errs, &c);
}

/* ---- an unprivileged user passing an epoll file whose lock is held ----- */

/*
 * Reading /proc/self/fdinfo of an epoll file takes the epoll's mutex, and
 * the process that made the epoll can hold that as long as it likes: an
 * epoll_wait() holds it while it copies events out, and a copy that
 * faults on memory a userfaultfd handles waits for that handler. Here the
 * test, as root, makes such an epoll and leaves the fault unanswered (an
 * unprivileged user needs vm.unprivileged_userfaultfd or /dev/userfaultfd
 * for that; any other way of holding the mutex would do as well); the
 * unprivileged attacker inherits it and passes it where the daemon wants
 * a pidfd.
 */
struct held_epoll {
	int uffd, epfd, evfd;
	void *page;
	pthread_t waiter;
};

static void *held_wait(void *arg)
{
	struct held_epoll *h = arg;

	/* Returns once the fault on h->page is answered. */
	(void)epoll_wait(h->epfd, h->page, 1, -1);
	return NULL;
}

/* The epoll made and its mutex held: 0, or -1 with errno set. */
static int held_epoll_start(struct held_epoll *h)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register r = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	struct epoll_event ev = { .events = EPOLLIN };
	int err;

	h->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (h->uffd < 0 || ioctl(h->uffd, UFFDIO_API, &api) < 0)
		return -1;
	h->page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (h->page == MAP_FAILED)
		return -1;
	r.range.start = (unsigned long)h->page;
	r.range.len = 4096;
	h->epfd = epoll_create1(EPOLL_CLOEXEC);
	h->evfd = (int)syscall(SYS_eventfd2, 1, O_CLOEXEC); /* readable: an event to copy out */
	if (ioctl(h->uffd, UFFDIO_REGISTER, &r) < 0 || h->epfd < 0 || h->evfd < 0 ||
	    epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->evfd, &ev) < 0)
		return -1;
	err = pthread_create(&h->waiter, NULL, held_wait, h);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

/* Whether the waiter is in its fault, holding the mutex: a pending
 * fault message on the userfaultfd says so. */
static int held_epoll_faulted(void *arg)
{
	struct held_epoll *h = arg;
	struct pollfd p = { h->uffd, POLLIN, 0 };

	return poll(&p, 1, 0) == 1;
}

/* The fault answered (closing the userfaultfd lets it complete), the
 * mutex let go, the waiter joined. */
static void held_epoll_stop(struct held_epoll *h)
{
	close(h->uffd);
	pthread_join(h->waiter, NULL);
	close(h->epfd);
	close(h->evfd);
	munmap(h->page, 4096);
}

struct he_arg {
	const struct th_user *u;
	int epfd;
};

/* As the unprivileged user: the held epoll passed as the pidfd of a
 * HELLO (the daemon takes the client's identity from it where it has no
 * SO_PEERPIDFD, as set up for this test), then as the pidfd of a
 * REGISTER on a connection that said HELLO properly. Each is refused. */
/* PKT (LEN bytes) sent on FD with PASS attached, one reply read: 0 if
 * its status is WANT; 1 if the send failed, 2 if no reply came (the
 * daemon held up), 3 if the status was another. */
static int pass_expect(int fd, const uint8_t *pkt, size_t len, int pass, int32_t want)
{
	int32_t st[1];

	if (send_fds(fd, pkt, len, &pass, 1, 1, false, 0) != (ssize_t)len)
		return 1;
	if (replies(fd, st, 1) != 1)
		return 2;
	return st[0] == want ? 0 : 3;
}

static int pass_held_epoll(void *arg)
{
	const struct he_arg *a = arg;
	uint8_t pkt[256];
	size_t len = 0;
	int fd, r;

	th_become(a->u);
	fd = th_raw_try_connect(getenv("FLOOD_DIR"));
	if (fd < 0)
		return 20;
	procreg__proto_put_hello(pkt, &len, PR_OP_HELLO, 1, 0);
	if ((r = pass_expect(fd, pkt, len, a->epfd, -EPERM)))
		return 20 + r;
	close(fd);
	fd = th_raw_try_connect(getenv("FLOOD_DIR"));
	if (fd < 0 || th_raw_try_hello(fd) < 0)
		return 30;
	len = 0;
	procreg__proto_put_name(pkt, &len, PR_OP_REGISTER, PR_F_PIDFD, 2, "he.name", 7, "m", 1);
	if ((r = pass_expect(fd, pkt, len, a->epfd, -EBADF)))
		return 30 + r;
	close(fd);
	return 0;
}

static int setup_no_peerpidfd(void **state)
{
	static const char *const env[] = { "PROCREG_NO_PEERPIDFD=1", NULL };

	return th_fx_start(state, NULL, env);
}

static void test_held_epoll(void **state)
{
	struct th_fx *f = *state;
	struct held_epoll h;
	struct he_arg a;
	struct th_user u;
	int st;

	if (held_epoll_start(&h) < 0)
		fail_msg("cannot hold an epoll's mutex (userfaultfd, as root): %s", strerror(errno));
	if (!th_until(held_epoll_faulted, &h, WAIT_MS)) {
		held_epoll_stop(&h);
		fail_msg("the epoll_wait() never faulted on its userfaultfd page");
	}
	th_user_new(&u);
	setenv("FLOOD_DIR", f->dir, 1);
	serves(f->reg, "warm");
	a = (struct he_arg){ &u, h.epfd };
	/* A daemon that read the epoll's fdinfo waits in the kernel until
	 * the mutex is let go: the attacker then gets no reply (replies()
	 * gives up after WAIT_MS), and the test lets the mutex go before
	 * failing, so the daemon can be stopped. */
	st = th_wait(th_fork(pass_held_epoll, &a));
	if (st == 0)
		serves(f->reg, "during");
	held_epoll_stop(&h);
	if (st != 0) {
		th_daemon_dump_log(&f->d);
		fail_msg("the attacker exited %d (22 or 32: no reply, the daemon held up)", st);
	}
	printf("an epoll whose mutex was held, passed as a HELLO's and a REGISTER's pidfd: both refused\n");
	assert_int_equal(kill(f->d.pid, 0), 0);
	serves(f->reg, "after");
	th_user_del(&u);
}

/* ---- an unprivileged user feeding the socket garbage -------------------- */

#define ATTACKERS 4
#define CONNS 8
#define KEPT 1000

/* What the attackers did, counted in shared memory. */
struct fuzz_counts {
	uint64_t connects, refused, packets, fds;
};

struct fuzz {
	const struct th_user *u;
	const char *dir;
	uint64_t seed;
	uint64_t until_ns;
	struct fuzz_counts *n;
};

/* Fds an attacker passes at random: its pidfd, files, pipe ends, an
 * eventfd, a socket. */
static int fuzz_fds[6];

static int fuzz_pick_fds(uint64_t *rs, int *fds)
{
	uint64_t r = th_xorshift(rs);
	int n = r % 8 < 5 ? 0 : r % 8 < 7 ? 1 : 1 + (int)((r >> 8) % 5);

	for (int k = 0; k < n; k++)
		fds[k] = fuzz_fds[th_xorshift(rs) % 6];
	return n;
}

/* A packet of 1 to 8 frames, each valid or nearly (random op, flags,
 * names, metadata, lease), then perhaps mutated: bytes flipped, a length
 * rewritten, cut short. */
static size_t fuzz_packet(uint64_t *rs, uint8_t *pkt)
{
	static const uint16_t ops[] = { PR_OP_HELLO, PR_OP_REGISTER, PR_OP_UNREGISTER, PR_OP_SYNC,
					PR_OP_JOIN, PR_OP_LEAVE, PR_OP_REFRESH, PR_OP_SUBSCRIBE,
					PR_OP_NOTIFY, PR_OP_REGISTER | PR_OP_REPLY, 0, 0x7fff };
	static uint8_t meta[PROCREG_META_MAX + 8];
	size_t pos = 0, n = 1 + th_xorshift(rs) % 8;
	uint64_t r = th_xorshift(rs);

	if (r % 16 == 0) {
		/* Nothing but noise, of any length up to past the limit. */
		size_t len = r % 4 == 0 ? th_xorshift(rs) % (PR_PACKET_MAX + 512)
					: th_xorshift(rs) % 512;

		for (size_t i = 0; i < len; i++)
			pkt[i] = (uint8_t)th_xorshift(rs);
		return len;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t a = th_xorshift(rs), b = th_xorshift(rs);
		uint16_t op = ops[a % (sizeof(ops) / sizeof(ops[0]))];
		uint16_t flags = (uint16_t)(b % 4 == 0 ? b >> 16 : (b >> 16) & 0x1f);
		char name[48];
		size_t nlen = (size_t)snprintf(name, sizeof(name), "fz.%llu", (unsigned long long)(a >> 40) % 64);
		size_t mlen = b % 8 == 0 ? (b >> 24) % (PROCREG_META_MAX + 1) : (b >> 24) % 16;
		int err;

		for (size_t k = 0; k < mlen; k++)
			meta[k] = (uint8_t)(a >> (k % 8));
		if (op == PR_OP_HELLO)
			err = procreg__proto_put_hello(pkt, &pos, op, (uint32_t)a, 0);
		else if (op == PR_OP_SYNC || op == PR_OP_SUBSCRIBE || op == PR_OP_NOTIFY || op == 0)
			err = procreg__proto_put(pkt, &pos, op, flags, (uint32_t)a, 0, NULL, 0, NULL, 0);
		else
			err = procreg__proto_put_name_arg(pkt, &pos, op, flags, (uint32_t)a, name, nlen,
							  meta, op == PR_OP_REGISTER || op == PR_OP_JOIN ? mlen : 0,
							  a % 4 == 0 ? (uint32_t)(b % 3000) : 0);
		if (err)
			break;
	}
	r = th_xorshift(rs);
	switch (r % 8) {
	case 0: /* bytes flipped */
		for (int k = 0; k < 1 + (int)((r >> 8) % 8) && pos; k++)
			pkt[th_xorshift(rs) % pos] ^= (uint8_t)(1u << (th_xorshift(rs) % 8));
		break;
	case 1: { /* the first frame's length rewritten */
		uint32_t len = (uint32_t)(th_xorshift(rs) % 128) * 8;

		memcpy(pkt + 4, &len, sizeof(len));
		break;
	}
	case 2: /* cut short: the rest never comes */
		pos = pos ? th_xorshift(rs) % pos : 0;
		break;
	default:
		break;
	}
	return pos;
}

static int fuzz_child(void *arg)
{
	static uint8_t pkt[PR_PACKET_MAX + 512], in[PR_PACKET_MAX];
	const struct fuzz *z = arg;
	uint64_t rs = z->seed;
	int conns[CONNS], pfd[2];

	th_become(z->u);
	fuzz_fds[0] = self_pidfd();
	fuzz_fds[1] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (pipe2(pfd, O_CLOEXEC) < 0 || fuzz_fds[0] < 0 || fuzz_fds[1] < 0)
		return 20;
	fuzz_fds[2] = pfd[0];
	fuzz_fds[3] = pfd[1];
	fuzz_fds[4] = (int)syscall(SYS_eventfd2, 0, O_CLOEXEC);
	fuzz_fds[5] = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	for (int i = 0; i < CONNS; i++)
		conns[i] = -1;
	while (procreg__mono_ns() < z->until_ns) {
		int i = (int)(th_xorshift(&rs) % CONNS), fds[8], nfds;
		uint64_t r = th_xorshift(&rs);
		size_t len;

		if (conns[i] < 0) {
			conns[i] = th_raw_try_connect(z->dir);
			if (conns[i] < 0) {
				__atomic_fetch_add(&z->n->refused, 1, __ATOMIC_RELAXED);
				continue;
			}
			__atomic_fetch_add(&z->n->connects, 1, __ATOMIC_RELAXED);
			/* Mostly a HELLO first, as a client does; some skip it,
			 * some send two. */
			if (r % 4) {
				len = 0;
				procreg__proto_put_hello(pkt, &len, PR_OP_HELLO, 1, 0);
				if (r % 16 == 1)
					procreg__proto_put_hello(pkt, &len, PR_OP_HELLO, 2, 0);
				nfds = r % 8 == 2 ? fuzz_pick_fds(&rs, fds) : 1;
				if (r % 8 != 2)
					fds[0] = fuzz_fds[0];
				send_fds(conns[i], pkt, len, fds, nfds, 1, false, MSG_DONTWAIT);
			}
			continue;
		}
		len = fuzz_packet(&rs, pkt);
		nfds = fuzz_pick_fds(&rs, fds);
		if (send_fds(conns[i], pkt, len, fds, nfds, 1 + (nfds > 2 && r % 2), r % 32 == 0,
			     MSG_DONTWAIT) >= 0) {
			__atomic_fetch_add(&z->n->packets, 1, __ATOMIC_RELAXED);
			__atomic_fetch_add(&z->n->fds, (uint64_t)nfds, __ATOMIC_RELAXED);
		}
		/* Replies read now and then, or never. */
		if (r % 4 == 0)
			while (recv(conns[i], in, sizeof(in), MSG_DONTWAIT) > 0)
				;
		if ((r >> 8) % 16 == 0) {
			close(conns[i]);
			conns[i] = -1;
		}
	}
	return 0;
}

static int fuzz_seconds(void)
{
	const char *s = getenv("PROCREG_FUZZ_SECONDS");

	return s && atoi(s) > 0 ? atoi(s) : 10;
}

/*
 * ATTACKERS processes of an unprivileged uid feed the daemon's socket
 * random and mutated packets, with fds attached at random, for a fixed
 * time (PROCREG_FUZZ_SECONDS, 10 by default; PROCREG_FUZZ_SEED repeats a
 * run), while root registers, looks up and removes names: every one of
 * root's requests succeeds, the daemon lives, and once the attackers are
 * gone its fd count is back where it was and its memory bounded.
 */
static void test_random_frames(void **state)
{
	struct th_fx *f = *state;
	struct th_fdcount c = { f->d.pid, 0 };
	struct fuzz z[ATTACKERS];
	pid_t kids[ATTACKERS];
	struct th_user u;
	PROCREG_OPTS(procreg_stats, st);
	uint64_t seed = getenv("PROCREG_FUZZ_SEED") ? strtoull(getenv("PROCREG_FUZZ_SEED"), NULL, 0)
						     : procreg__now_ns() | 1;
	struct fuzz_counts *cnt = mmap(NULL, sizeof(*cnt), PROT_READ | PROT_WRITE,
				       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	long rss0, rss1;
	int alive = ATTACKERS, ops = 0, n = 0;

	assert_true(cnt != MAP_FAILED);
	th_user_new(&u);
	printf("fuzz: seed %llu (PROCREG_FUZZ_SEED), %d s, %d attackers\n", (unsigned long long)seed,
	       fuzz_seconds(), ATTACKERS);
	serves(f->reg, "warm");
	assert_int_equal(th_reader_held(f->reg, getpid()), 0);
	c.want = th_count_fds(f->d.pid);
	rss0 = th_status_kb(f->d.pid, "RssAnon");
	for (int i = 0; i < ATTACKERS; i++) {
		z[i] = (struct fuzz){ &u, f->dir, seed + (uint64_t)i * 0x9e3779b97f4a7c15ull,
				      procreg__mono_ns() + (uint64_t)fuzz_seconds() * 1000000000ull, cnt };
		kids[i] = th_fork(fuzz_child, &z[i]);
	}
	/* Root, meanwhile: every request must succeed. It keeps the even
	 * names of its last 2 * KEPT (a longer run would reach its own
	 * --max-names-per-proc), and looks one of them up each time. */
	while (alive) {
		char name[32], other[32];

		snprintf(name, sizeof(name), "victim.%d", n);
		snprintf(other, sizeof(other), "victim.%d", (n > KEPT ? n - KEPT : 0) & ~1);
		assert_int_equal(procreg_register(f->reg, name, "payload", 7), 0);
		assert_int_equal(procreg_lookup(f->reg, name, NULL), 0);
		assert_int_equal(procreg_lookup(f->reg, other, NULL), 0);
		if (n % 2 == 0 && n >= 2 * KEPT)
			snprintf(name, sizeof(name), "victim.%d", n - 2 * KEPT);
		if (n % 2 || n >= 2 * KEPT)
			assert_int_equal(procreg_unregister(f->reg, name), 0);
		assert_int_equal(procreg_sync(f->reg), 0);
		ops += 4 + (n % 2 || n >= 2 * KEPT);
		n++;
		for (int i = 0; i < ATTACKERS; i++) {
			int status;

			if (kids[i] > 0 && waitpid(kids[i], &status, WNOHANG) == kids[i]) {
				if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
					fail_msg("attacker %d: status %#x", i, status);
				kids[i] = 0;
				alive--;
			}
		}
	}
	assert_int_equal(kill(f->d.pid, 0), 0);
	for (int i = n - 2 * KEPT > 0 ? (n - 2 * KEPT) & ~1 : 0; i < n; i += 2) {
		char name[32];

		if (i <= n - 1 - 2 * KEPT)
			continue; /* removed on the way */
		snprintf(name, sizeof(name), "victim.%d", i);
		assert_int_equal(procreg_lookup(f->reg, name, NULL), 0);
		assert_int_equal(procreg_unregister(f->reg, name), 0);
	}
	assert_int_equal(procreg_sync(f->reg), 0);
	if (!th_until(th_fds_back, &c, WAIT_MS)) {
		th_list_fds(f->d.pid);
		fail_msg("the daemon holds %ld fds, %ld before the attack", th_count_fds(f->d.pid), c.want);
	}
	/* Nothing of the attackers' is left: their names went with them. */
	assert_int_equal(procreg_stats(f->reg, &st), 0);
	assert_int_equal(st.names, 0);
	rss1 = th_status_kb(f->d.pid, "RssAnon");
	printf("fuzz: attackers made %llu connections (%llu refused), sent %llu packets with %llu fds; %llu of their registrations and joins succeeded\n",
	       (unsigned long long)cnt->connects, (unsigned long long)cnt->refused,
	       (unsigned long long)cnt->packets, (unsigned long long)cnt->fds,
	       (unsigned long long)(st.registrations + st.joins - (uint64_t)n - 1));
	printf("fuzz: root made %d requests, all answered 0; daemon fds %ld -> %ld, RssAnon %ld -> %ld kB\n",
	       ops, c.want, th_count_fds(f->d.pid), rss0, rss1);
	/* What the daemon holds for a client is one packet of replies at
	 * most (64 KiB), and there were ATTACKERS * CONNS of them at once. */
	if (TH_SANITIZED)
		printf("fuzz: RssAnon " TH_RSS_UNBOUNDED "\n");
	else
		assert_true(rss1 - rss0 < 8 * 1024);
	serves(f->reg, "after");
	th_user_del(&u);
	munmap(cnt, sizeof(*cnt));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_client_never_reads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bridge_half_frames, setup_node, teardown_node),
		cmocka_unit_test_setup_teardown(test_out_of_fds, setup_node, teardown_node),
		cmocka_unit_test_setup_teardown(test_passed_fds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lingering_files, setup_lingering, teardown),
		cmocka_unit_test_setup_teardown(test_held_epoll, setup_no_peerpidfd, teardown),
		cmocka_unit_test_setup_teardown(test_shed_lingering, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shutdown_lingering, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ctrunc_lingering, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ctrunc_before_arm, setup, teardown),
		cmocka_unit_test_setup_teardown(test_arm_games, setup, teardown),
		cmocka_unit_test_setup_teardown(test_random_frames, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
