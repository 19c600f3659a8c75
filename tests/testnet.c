/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * testnet.c - the test transport's switch (testnet.h): a poll loop in a
 * thread of the test process, relaying frames between the daemons
 * attached to its unix socket.
 *
 * Everything in struct testnet is guarded by its mutex: the switch's
 * thread holds it except while in poll(); the test's thread takes it to
 * change links and faults, then wakes the loop through the eventfd.
 *
 * Frames on a link wait in a queue until due (delay, jitter), in order
 * unless a reordering swaps one with the frame queued before it. Loss
 * takes any frame: a lost CHANGE shows as a gap or a heartbeat ahead of
 * what arrived, a lost SNAP part as the next part out of order or a
 * heartbeat before the snapshot's last part.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "testnet.h"
#include "bridge_proto.h"
#include "testnet_wire.h"

#define TN_NODES 8
#define TN_PENDING 8
#define RESET_RETRY_MS 20    /* a refused pair comes back after this, like a redial */
#define REORDER_HOLD_MS 2    /* frames must wait a little for one to overtake another */
#define POLL_MAX_MS 50

struct msg {
	struct msg *next;
	uint32_t epoch;
	uint64_t due_ns;
	size_t len;
	uint8_t data[];
};

struct tnode {
	char name[PR_BRIDGE_NODE_MAX + 1];  /* "" for a free slot */
	int fd;                          /* -1: not attached */
	uint64_t inc;
	struct msg *out, *out_tail;      /* to the daemon, not yet written */
};

struct link {
	bool cut;
	bool own_faults;
	struct tn_faults f;
	uint32_t snap_drops;             /* SNAP frames of part snap_drop_part still to drop */
	uint32_t snap_drop_part;
	struct msg *head;                /* held frames, due in order */
};

struct pair {
	bool up;
	uint32_t epoch;                  /* the current one while up, else the last */
	uint64_t retry_ns;
};

struct testnet {
	pthread_mutex_t mu;
	pthread_t thread;
	bool stopping;
	int lfd, efd;
	int pending[TN_PENDING];         /* accepted, no HELLO yet */
	char path[256];
	uint64_t rng;
	struct tn_faults all;
	struct tnode n[TN_NODES];
	struct link l[TN_NODES][TN_NODES];
	struct pair p[TN_NODES][TN_NODES]; /* [i][j], i < j */
	struct tn_stats st;
	uint8_t *buf;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(struct testnet *t)
{
	t->rng ^= t->rng << 13;
	t->rng ^= t->rng >> 7;
	t->rng ^= t->rng << 17;
	return t->rng;
}

static int node_idx(struct testnet *t, const char *name, bool create)
{
	for (int i = 0; i < TN_NODES; i++)
		if (t->n[i].name[0] && !strcmp(t->n[i].name, name))
			return i;
	if (!create)
		return -1;
	for (int i = 0; i < TN_NODES; i++)
		if (!t->n[i].name[0]) {
			snprintf(t->n[i].name, sizeof(t->n[i].name), "%s", name);
			t->n[i].fd = -1;
			return i;
		}
	return -1;
}

static struct pair *pair_of(struct testnet *t, int i, int j)
{
	return i < j ? &t->p[i][j] : &t->p[j][i];
}

static void free_list(struct msg *m)
{
	while (m) {
		struct msg *next = m->next;

		free(m);
		m = next;
	}
}

/* Queue a message for node I's daemon. */
static void to_node(struct testnet *t, int i, uint8_t type, int about, uint32_t epoch,
		    const uint8_t *frame, size_t len)
{
	struct tnode *n = &t->n[i];
	struct msg *m;
	struct tn_hdr h = { .type = type, .epoch = epoch, .inc = t->n[about].inc };

	if (n->fd < 0 || !(m = malloc(sizeof(*m) + sizeof(h) + len)))
		return;
	snprintf(h.name, sizeof(h.name), "%s", t->n[about].name);
	m->next = NULL;
	m->len = sizeof(h) + len;
	memcpy(m->data, &h, sizeof(h));
	if (len)
		memcpy(m->data + sizeof(h), frame, len);
	if (n->out_tail)
		n->out_tail->next = m;
	else
		n->out = m;
	n->out_tail = m;
}

static void pair_down(struct testnet *t, int i, int j)
{
	struct pair *p = pair_of(t, i, j);

	if (!p->up)
		return;
	p->up = false;
	to_node(t, i, TN_DOWN, j, p->epoch, NULL, 0);
	to_node(t, j, TN_DOWN, i, p->epoch, NULL, 0);
}

/* Bring pairs up and down as links, attachments and retry times say. */
static void update_pairs(struct testnet *t, uint64_t now)
{
	for (int i = 0; i < TN_NODES; i++)
		for (int j = i + 1; j < TN_NODES; j++) {
			struct pair *p = &t->p[i][j];
			bool want = t->n[i].fd >= 0 && t->n[j].fd >= 0 && !t->l[i][j].cut &&
				    !t->l[j][i].cut && now >= p->retry_ns;

			if (want && !p->up) {
				p->up = true;
				p->epoch++;
				t->st.ups++;
				to_node(t, i, TN_UP, j, p->epoch, NULL, 0);
				to_node(t, j, TN_UP, i, p->epoch, NULL, 0);
			} else if (!want && p->up) {
				pair_down(t, i, j);
			}
		}
}

static const struct tn_faults *faults(const struct testnet *t, int i, int j)
{
	return t->l[i][j].own_faults ? &t->l[i][j].f : &t->all;
}

/* Whether FRAME is a SNAP frame of part PART (TN_SNAP_LAST: the last). */
static bool snap_part_is(const uint8_t *frame, size_t len, uint32_t part)
{
	struct pr_bp_frame f;
	size_t pos = 0;

	if (procreg__bp_next(frame, len, &pos, &f) != 1 || f.type != PR_BP_SNAP)
		return false;
	return part == TN_SNAP_LAST ? (f.flags & PR_BP_SNAP_LAST) != 0 : f.part == part;
}

/* A frame from node I for node J, sent in EPOCH. */
static void on_send(struct testnet *t, int i, int j, uint32_t epoch, const uint8_t *frame,
		    size_t len, uint64_t now)
{
	struct pair *p = pair_of(t, i, j);
	struct link *l = &t->l[i][j];
	const struct tn_faults *f = faults(t, i, j);
	uint64_t hold_ms = f->delay_ms;
	struct msg *m, **pp, *prev = NULL;

	if (!p->up || p->epoch != epoch) {
		t->st.stale++;
		return;
	}
	if (f->loss_pm && rnd(t) % 1000 < f->loss_pm) {
		t->st.dropped++;
		return;
	}
	if (l->snap_drops && snap_part_is(frame, len, l->snap_drop_part)) {
		l->snap_drops--;
		t->st.snap_dropped++;
		return;
	}
	if (f->jitter_ms)
		hold_ms += rnd(t) % (f->jitter_ms + 1);
	if (f->reorder_pm && hold_ms < REORDER_HOLD_MS)
		hold_ms = REORDER_HOLD_MS;
	if (!(m = malloc(sizeof(*m) + len)))
		return;
	m->next = NULL;
	m->epoch = epoch;
	m->len = len;
	m->due_ns = now + hold_ms * 1000000ull;
	memcpy(m->data, frame, len);
	for (pp = &l->head; *pp; pp = &(*pp)->next)
		prev = *pp;
	/* In order: never due before the frame ahead of it. */
	if (prev && prev->due_ns > m->due_ns)
		m->due_ns = prev->due_ns;
	if (prev && f->reorder_pm && rnd(t) % 1000 < f->reorder_pm) {
		struct msg **before = &l->head;

		while (*before != prev)
			before = &(*before)->next;
		m->due_ns = prev->due_ns;
		m->next = prev;
		*before = m;
		t->st.reordered++;
		return;
	}
	*pp = m;
}

static void deliver_due(struct testnet *t, uint64_t now, uint64_t *next_due)
{
	for (int i = 0; i < TN_NODES; i++)
		for (int j = 0; j < TN_NODES; j++) {
			struct link *l = &t->l[i][j];

			while (l->head && l->head->due_ns <= now) {
				struct msg *m = l->head;
				struct pair *p = pair_of(t, i, j);

				l->head = m->next;
				if (p->up && p->epoch == m->epoch) {
					to_node(t, j, TN_FRAME, i, m->epoch, m->data, m->len);
					t->st.frames++;
				} else {
					t->st.stale++;
				}
				free(m);
			}
			if (l->head && l->head->due_ns < *next_due)
				*next_due = l->head->due_ns;
		}
}

static void detach(struct testnet *t, int i)
{
	struct tnode *n = &t->n[i];

	if (n->fd < 0)
		return;
	close(n->fd);
	n->fd = -1;
	free_list(n->out);
	n->out = n->out_tail = NULL;
	for (int j = 0; j < TN_NODES; j++)
		if (j != i)
			pair_down(t, i, j);
}

static void flush_node(struct testnet *t, int i)
{
	struct tnode *n = &t->n[i];

	while (n->out) {
		struct msg *m = n->out;

		if (send(n->fd, m->data, m->len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			detach(t, i);
			return;
		}
		n->out = m->next;
		if (!n->out)
			n->out_tail = NULL;
		free(m);
	}
}

static void on_hello(struct testnet *t, int slot)
{
	int fd = t->pending[slot];
	ssize_t got = recv(fd, t->buf, TN_MSG_MAX, MSG_DONTWAIT);
	struct tn_hdr *h = (struct tn_hdr *)t->buf;
	int i;

	if (got < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	t->pending[slot] = -1;
	if (got < (ssize_t)sizeof(*h) || h->type != TN_HELLO) {
		close(fd);
		return;
	}
	h->name[PR_BRIDGE_NODE_MAX] = 0;
	i = node_idx(t, h->name, true);
	if (i < 0) {
		close(fd);
		return;
	}
	/* A restarted daemon: its old attachment is over. */
	detach(t, i);
	t->n[i].fd = fd;
	t->n[i].inc = h->inc;
}

static void on_readable(struct testnet *t, int i, uint64_t now)
{
	for (int r = 0; r < 256 && t->n[i].fd >= 0; r++) {
		ssize_t got = recv(t->n[i].fd, t->buf, TN_MSG_MAX, MSG_DONTWAIT);
		struct tn_hdr *h = (struct tn_hdr *)t->buf;
		int j;

		if (got < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (got < (ssize_t)sizeof(*h)) {
			detach(t, i);
			return;
		}
		h->name[PR_BRIDGE_NODE_MAX] = 0;
		j = node_idx(t, h->name, false);
		if (j < 0 || j == i)
			continue;
		if (h->type == TN_SEND) {
			on_send(t, i, j, h->epoch, t->buf + sizeof(*h), (size_t)got - sizeof(*h), now);
		} else if (h->type == TN_RESET) {
			struct pair *p = pair_of(t, i, j);

			if (p->up && p->epoch == h->epoch) {
				pair_down(t, i, j);
				p->retry_ns = now + RESET_RETRY_MS * 1000000ull;
				t->st.resets++;
			}
		}
	}
}

static void *loop(void *arg)
{
	struct testnet *t = arg;
	struct pollfd pfd[2 + TN_PENDING + TN_NODES];
	int who[2 + TN_PENDING + TN_NODES];

	pthread_mutex_lock(&t->mu);
	while (!t->stopping) {
		uint64_t now = now_ns(), next = now + POLL_MAX_MS * 1000000ull;
		int np = 0, timeout;

		update_pairs(t, now);
		deliver_due(t, now, &next);
		for (int i = 0; i < TN_NODES; i++) {
			struct pair *p;

			if (t->n[i].fd >= 0 && t->n[i].out)
				flush_node(t, i);
			for (int j = i + 1; j < TN_NODES; j++) {
				p = &t->p[i][j];
				if (!p->up && p->retry_ns > now && p->retry_ns < next)
					next = p->retry_ns;
			}
		}
		pfd[np] = (struct pollfd){ t->lfd, POLLIN, 0 };
		who[np++] = -1;
		pfd[np] = (struct pollfd){ t->efd, POLLIN, 0 };
		who[np++] = -2;
		for (int s = 0; s < TN_PENDING; s++)
			if (t->pending[s] >= 0) {
				pfd[np] = (struct pollfd){ t->pending[s], POLLIN, 0 };
				who[np++] = -10 - s;
			}
		for (int i = 0; i < TN_NODES; i++)
			if (t->n[i].fd >= 0) {
				pfd[np] = (struct pollfd){ t->n[i].fd,
							   (short)(POLLIN | (t->n[i].out ? POLLOUT : 0)), 0 };
				who[np++] = i;
			}
		timeout = (int)((next - now + 999999) / 1000000);
		pthread_mutex_unlock(&t->mu);
		np = poll(pfd, (nfds_t)np, timeout) < 0 ? 0 : np;
		pthread_mutex_lock(&t->mu);
		now = now_ns();
		for (int k = 0; k < np; k++) {
			if (!pfd[k].revents)
				continue;
			if (who[k] == -1) {
				int fd = accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC);

				for (int s = 0; fd >= 0 && s < TN_PENDING; s++)
					if (t->pending[s] < 0) {
						t->pending[s] = fd;
						fd = -1;
					}
				if (fd >= 0)
					close(fd);
			} else if (who[k] == -2) {
				uint64_t x;

				if (read(t->efd, &x, sizeof(x)) < 0)
					continue;
			} else if (who[k] <= -10) {
				on_hello(t, -10 - who[k]);
			} else if (t->n[who[k]].fd == pfd[k].fd) {
				if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR))
					on_readable(t, who[k], now);
				if (t->n[who[k]].fd >= 0 && (pfd[k].revents & POLLOUT))
					flush_node(t, who[k]);
			}
		}
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

static void wake(struct testnet *t)
{
	uint64_t one = 1;

	if (write(t->efd, &one, sizeof(one)) < 0)
		return; /* the counter is saturated: the loop is awake anyway */
}

struct testnet *tn_start(const char *dir, uint64_t seed)
{
	struct testnet *t = calloc(1, sizeof(*t));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (!t || !(t->buf = malloc(TN_MSG_MAX)))
		goto fail;
	t->lfd = t->efd = -1;
	pthread_mutex_init(&t->mu, NULL);
	t->rng = seed ? seed : 1;
	for (int s = 0; s < TN_PENDING; s++)
		t->pending[s] = -1;
	for (int i = 0; i < TN_NODES; i++)
		t->n[i].fd = -1;
	snprintf(t->path, sizeof(t->path), "%s/testnet.sock", dir);
	if (strlen(t->path) >= sizeof(sa.sun_path))
		goto fail;
	memcpy(sa.sun_path, t->path, strlen(t->path) + 1);
	t->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	t->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (t->lfd < 0 || t->efd < 0 || bind(t->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(t->lfd, 16) < 0 || pthread_create(&t->thread, NULL, loop, t) != 0)
		goto fail;
	return t;
fail:
	if (t) {
		if (t->lfd >= 0)
			close(t->lfd);
		if (t->efd >= 0)
			close(t->efd);
		free(t->buf);
		free(t);
	}
	return NULL;
}

void tn_stop(struct testnet *t)
{
	pthread_mutex_lock(&t->mu);
	t->stopping = true;
	wake(t);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->thread, NULL);
	for (int i = 0; i < TN_NODES; i++) {
		detach(t, i);
		for (int j = 0; j < TN_NODES; j++)
			free_list(t->l[i][j].head);
	}
	for (int s = 0; s < TN_PENDING; s++)
		if (t->pending[s] >= 0)
			close(t->pending[s]);
	close(t->lfd);
	close(t->efd);
	unlink(t->path);
	pthread_mutex_destroy(&t->mu);
	free(t->buf);
	free(t);
}

const char *tn_path(const struct testnet *t)
{
	return t->path;
}

void tn_link(struct testnet *t, const char *a, const char *b, bool connected)
{
	int i, j;

	pthread_mutex_lock(&t->mu);
	i = node_idx(t, a, true);
	j = node_idx(t, b, true);
	if (i >= 0 && j >= 0) {
		t->l[i][j].cut = !connected;
		update_pairs(t, now_ns());
	}
	wake(t);
	pthread_mutex_unlock(&t->mu);
}

void tn_pair(struct testnet *t, const char *a, const char *b, bool connected)
{
	tn_link(t, a, b, connected);
	tn_link(t, b, a, connected);
}

void tn_faults(struct testnet *t, const char *a, const char *b, const struct tn_faults *f)
{
	pthread_mutex_lock(&t->mu);
	if (!a || !b) {
		t->all = *f;
		for (int i = 0; i < TN_NODES; i++)
			for (int j = 0; j < TN_NODES; j++)
				t->l[i][j].own_faults = false;
	} else {
		int i = node_idx(t, a, true), j = node_idx(t, b, true);

		if (i >= 0 && j >= 0) {
			t->l[i][j].f = *f;
			t->l[i][j].own_faults = true;
		}
	}
	wake(t);
	pthread_mutex_unlock(&t->mu);
}

void tn_drop_snap(struct testnet *t, const char *a, const char *b, uint32_t part, uint32_t count)
{
	int i, j;

	pthread_mutex_lock(&t->mu);
	i = node_idx(t, a, true);
	j = node_idx(t, b, true);
	if (i >= 0 && j >= 0) {
		t->l[i][j].snap_drops = count;
		t->l[i][j].snap_drop_part = part;
	}
	pthread_mutex_unlock(&t->mu);
}

bool tn_is_up(struct testnet *t, const char *a, const char *b)
{
	bool up = false;
	int i, j;

	pthread_mutex_lock(&t->mu);
	i = node_idx(t, a, false);
	j = node_idx(t, b, false);
	if (i >= 0 && j >= 0 && i != j)
		up = pair_of(t, i, j)->up;
	pthread_mutex_unlock(&t->mu);
	return up;
}

bool tn_attached(struct testnet *t, const char *a)
{
	bool r;
	int i;

	pthread_mutex_lock(&t->mu);
	i = node_idx(t, a, false);
	r = i >= 0 && t->n[i].fd >= 0;
	pthread_mutex_unlock(&t->mu);
	return r;
}

void tn_get_stats(struct testnet *t, struct tn_stats *s)
{
	pthread_mutex_lock(&t->mu);
	*s = t->st;
	pthread_mutex_unlock(&t->mu);
}
