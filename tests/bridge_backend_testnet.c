/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bridge_backend_testnet.c - a bridge backend in a shared object that
 * carries frames through the test switch (testnet.c) instead of TCP: the
 * switch, inside the test process, decides which pairs of nodes are
 * connected and what happens to each frame on the way (delay, reordering,
 * loss). Its unix socket is $PROCREG_TESTNET.
 *
 * To the replication layer it looks like the mesh: node_up then a
 * snapshot when the switch connects a pair, node_down when it cuts one or
 * the other daemon goes away, every frame handed to deliver_bytes(), which
 * checks it, and a refused frame drops the pair (the
 * switch reconnects it shortly, and the next epoch starts with a fresh
 * snapshot), as a refused frame drops a TCP connection. Heartbeats go to
 * every up node each heartbeat_ms, so a lost last change is noticed too.
 *
 * Sends block: the switch always reads, and a daemon must not lose a
 * frame to a full socket (that would be loss the switch did not decide).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "procreg/backend.h"
#include "testnet_wire.h"

#define PEERS_MAX 16
#define RECV_ROUNDS 64      /* messages per wake-up: the daemon's other work goes on */

struct peer {
	char name[PR_BRIDGE_NODE_MAX + 1];
	uint64_t inc;
	uint32_t epoch;
	bool up;
	uint64_t bytes_in, bytes_out;
};

struct tnb {
	struct pr_bridge_config c;
	struct pr_bridge_up up;
	char node[PR_BRIDGE_NODE_MAX + 1];
	int sock, tfd, epfd;
	bool eof;
	struct peer peers[PEERS_MAX];
	uint8_t *in;
};

static int tn_send(struct tnb *b, uint8_t type, const char *name, uint32_t epoch,
		   const uint8_t *frame, size_t len)
{
	struct tn_hdr h = { .type = type, .epoch = epoch, .inc = b->c.incarnation };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)frame, len } };
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = frame ? 2 : 1 };

	if (b->eof)
		return -EPIPE;
	snprintf(h.name, sizeof(h.name), "%s", name);
	while (sendmsg(b->sock, &m, MSG_NOSIGNAL) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

static struct peer *peer_get(struct tnb *b, const char *name, bool create)
{
	struct peer *free_slot = NULL;

	for (int i = 0; i < PEERS_MAX; i++) {
		if (b->peers[i].name[0] && !strcmp(b->peers[i].name, name))
			return &b->peers[i];
		if (!b->peers[i].name[0] && !free_slot)
			free_slot = &b->peers[i];
	}
	if (create && free_slot)
		snprintf(free_slot->name, sizeof(free_slot->name), "%s", name);
	return create ? free_slot : NULL;
}

struct snap_ctx {
	struct tnb *b;
	struct peer *p;
};

static int snap_send(void *sctx, const uint8_t *frame, size_t len)
{
	struct snap_ctx *s = sctx;

	s->p->bytes_out += len;
	return tn_send(s->b, TN_SEND, s->p->name, s->p->epoch, frame, len);
}

/* This side drops the pair: the replication layer hears node_down now,
 * the switch is told so that the other side does too. */
static void drop(struct tnb *b, struct peer *p, const char *why)
{
	b->up.log("bridge: node %s: down (%s)", p->name, why);
	p->up = false;
	b->up.node_down(b->up.ctx, p->name);
	tn_send(b, TN_RESET, p->name, p->epoch, NULL, 0);
}

static void on_msg(struct tnb *b, const struct tn_hdr *h, const uint8_t *body, size_t len)
{
	struct peer *p = peer_get(b, h->name, h->type == TN_UP);
	struct snap_ctx s = { b, p };

	if (!p)
		return;
	switch (h->type) {
	case TN_UP:
		if (p->up) {
			p->up = false;
			b->up.node_down(b->up.ctx, p->name);
		}
		p->inc = h->inc;
		p->epoch = h->epoch;
		if (b->up.node_up(b->up.ctx, p->name, p->inc, "testnet") < 0) {
			tn_send(b, TN_RESET, p->name, p->epoch, NULL, 0);
			return;
		}
		p->up = true;
		b->up.log("bridge: node %s: up (incarnation %llx, epoch %u)", p->name,
			  (unsigned long long)p->inc, p->epoch);
		if (b->up.snapshot(b->up.ctx, snap_send, &s) < 0)
			drop(b, p, "snapshot");
		return;
	case TN_DOWN:
		if (p->up && p->epoch == h->epoch) {
			b->up.log("bridge: node %s: down (cut)", p->name);
			p->up = false;
			b->up.node_down(b->up.ctx, p->name);
		}
		return;
	case TN_FRAME:
		if (!p->up || p->epoch != h->epoch)
			return; /* a frame of an epoch that ended */
		p->bytes_in += len;
		if (b->up.deliver_bytes(b->up.ctx, p->name, body, len) < 0)
			drop(b, p, "frame refused");
		return;
	default:
		return;
	}
}

static void heartbeats(struct tnb *b)
{
	uint8_t buf[32];
	size_t pos;
	uint64_t x;
	int n;

	if (read(b->tfd, &x, sizeof(x)) < 0 || (n = b->up.heartbeat(b->up.ctx, buf, sizeof(buf))) < 0)
		return;
	pos = (size_t)n;
	for (int i = 0; i < PEERS_MAX; i++)
		if (b->peers[i].up && tn_send(b, TN_SEND, b->peers[i].name, b->peers[i].epoch, buf,
					      pos) == 0)
			b->peers[i].bytes_out += pos;
}

static void switch_gone(struct tnb *b)
{
	b->eof = true;
	epoll_ctl(b->epfd, EPOLL_CTL_DEL, b->sock, NULL);
	b->up.log("testnet: the switch went away");
	for (int i = 0; i < PEERS_MAX; i++)
		if (b->peers[i].up) {
			b->peers[i].up = false;
			b->up.node_down(b->up.ctx, b->peers[i].name);
		}
}

static void tnb_dispatch(void *p)
{
	struct tnb *b = p;
	struct epoll_event evs[4];
	int n = epoll_wait(b->epfd, evs, 4, 0);

	for (int i = 0; i < n; i++) {
		if (evs[i].data.fd == b->tfd) {
			heartbeats(b);
			continue;
		}
		for (int r = 0; r < RECV_ROUNDS && !b->eof; r++) {
			ssize_t got = recv(b->sock, b->in, TN_MSG_MAX, MSG_DONTWAIT);

			if (got < 0 && (errno == EAGAIN || errno == EINTR))
				break;
			if (got <= 0) {
				switch_gone(b);
				break;
			}
			if ((size_t)got < sizeof(struct tn_hdr))
				continue;
			((struct tn_hdr *)b->in)->name[PR_BRIDGE_NODE_MAX] = 0;
			on_msg(b, (const struct tn_hdr *)b->in, b->in + sizeof(struct tn_hdr),
			       (size_t)got - sizeof(struct tn_hdr));
		}
	}
}

static int tnb_broadcast(void *p, const uint8_t *frame, size_t len)
{
	struct tnb *b = p;

	for (int i = 0; i < PEERS_MAX; i++)
		if (b->peers[i].up &&
		    tn_send(b, TN_SEND, b->peers[i].name, b->peers[i].epoch, frame, len) == 0)
			b->peers[i].bytes_out += len;
	return 0;
}

static void tnb_flush(void *p)
{
	(void)p; /* nothing is queued: every send went out */
}

static void tnb_nodes(void *p, void (*cb)(void *arg, const struct pr_bridge_node_info *n),
		      void *arg)
{
	struct tnb *b = p;

	for (int i = 0; i < PEERS_MAX; i++) {
		struct peer *q = &b->peers[i];
		struct pr_bridge_node_info ni = { q->name, "testnet", q->inc, q->bytes_in,
						  q->bytes_out };

		if (q->up)
			cb(arg, &ni);
	}
}

static int tnb_fd(void *p)
{
	return ((struct tnb *)p)->epfd;
}

static void tnb_close(void *p)
{
	struct tnb *b = p;

	if (b->sock >= 0)
		close(b->sock);
	if (b->tfd >= 0)
		close(b->tfd);
	if (b->epfd >= 0)
		close(b->epfd);
	free(b->in);
	free(b);
}

static void *tnb_open(const struct pr_bridge_config *c, const struct pr_bridge_up *up, int *err)
{
	struct tnb *b = calloc(1, sizeof(*b));
	const char *path = getenv("PROCREG_TESTNET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct epoll_event e = { .events = EPOLLIN };
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };
	int sndbuf = 4 << 20;

	/* It carries frames as bytes: a procregd too old to check them for
	 * it (deliver_bytes) or to make its heartbeats is refused. */
	if (up->sz < offsetof(struct pr_bridge_up, heartbeat) + sizeof(up->heartbeat)) {
		free(b);
		*err = -EOPNOTSUPP;
		return NULL;
	}
	*err = -ENOMEM;
	if (!b)
		return NULL;
	b->sock = b->tfd = b->epfd = -1;
	memcpy(&b->c, c, c->sz < sizeof(b->c) ? c->sz : sizeof(b->c));
	memcpy(&b->up, up, up->sz < sizeof(b->up) ? up->sz : sizeof(b->up));
	snprintf(b->node, sizeof(b->node), "%s", c->node);
	b->c.node = b->node;
	b->c.cookie = NULL;
	b->c.peers = NULL;
	b->c.listen = NULL;
	if (!b->c.heartbeat_ms)
		b->c.heartbeat_ms = 100;
	its.it_value.tv_nsec = its.it_interval.tv_nsec = (long)b->c.heartbeat_ms % 1000 * 1000000L;
	its.it_value.tv_sec = its.it_interval.tv_sec = b->c.heartbeat_ms / 1000;
	if (!path || strlen(path) >= sizeof(sa.sun_path)) {
		up->log("testnet: PROCREG_TESTNET: want the switch's socket path");
		*err = -EINVAL;
		goto fail;
	}
	strcpy(sa.sun_path, path);
	if (!(b->in = malloc(TN_MSG_MAX)) ||
	    (b->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) < 0 ||
	    (b->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0 ||
	    (b->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    setsockopt(b->sock, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0 ||
	    connect(b->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    timerfd_settime(b->tfd, 0, &its, NULL) < 0) {
		*err = -errno;
		up->log("testnet: %s: %s", path, strerror(errno));
		goto fail;
	}
	e.data.fd = b->sock;
	if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->sock, &e) < 0)
		goto fail_errno;
	e.data.fd = b->tfd;
	if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->tfd, &e) < 0)
		goto fail_errno;
	if ((*err = tn_send(b, TN_HELLO, b->node, 0, NULL, 0)) < 0)
		goto fail;
	up->log("testnet: node %s attached to %s", b->node, path);
	*err = 0;
	return b;
fail_errno:
	*err = -errno;
fail:
	tnb_close(b);
	return NULL;
}

__attribute__((visibility("default"))) const struct pr_bridge_backend procreg_bridge_backend_v1 = {
	.sz = sizeof(struct pr_bridge_backend),
	.name = "testnet",
	.open = tnb_open,
	.fd = tnb_fd,
	.dispatch = tnb_dispatch,
	.broadcast = tnb_broadcast,
	.flush = tnb_flush,
	.nodes = tnb_nodes,
	.close = tnb_close,
};
