/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * feed.c - the change feed: a ring of events in the table, written by the
 * daemon, followed by anyone.
 *
 * Writer (procregd): procreg__w_emit() fills slot s % cap under a
 * seqlock-like protocol (seq = 0, payload, seq = s, feed_head = s), and
 * procreg__w_feed_wake() bumps the futex word once per batch of events
 * and wakes whoever sleeps on it, if anyone may. Followers never
 * write the table and never make the daemon wait: a follower that falls a
 * whole ring behind finds its events overwritten and is told so.
 *
 * Followers sleep on the futex word with FUTEX_WAIT on their read-only
 * shared mapping; the key is the file and offset, so the daemon's wake on
 * its own mapping reaches them. Before the first sleep on a connection to
 * the daemon, a follower says FOLLOW on it (proto.h): the daemon makes the
 * wake's system call only while such a connection is open.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "probes.h"

/* The ring, checked, and its capacity as checked: callers index with
 * *CAPP, never with a second read of the header. The capacity is bounded
 * by the mapping before it is multiplied, so that a hostile one (2^58
 * events of 320 bytes wrap to 0) cannot pass the bounds check. */
static const struct pr_event *ring(const struct pr_map *m, uint64_t *capp)
{
	uint64_t cap = CMM_LOAD_SHARED(m->hdr->feed_cap);

	if (!cap || (cap & (cap - 1)) || cap > m->size / sizeof(struct pr_event) ||
	    m->hdr->feed_off % PR_ALIGN ||
	    !pr_at(m, m->hdr->feed_off, cap * sizeof(struct pr_event)))
		return NULL;
	*capp = cap;
	return (const struct pr_event *)(m->base + m->hdr->feed_off);
}

/* ---- writer ----------------------------------------------------------- */

PR_PROBE_DEFINE(procregd, change);

void procreg__w_emit(struct pr_writer *w, uint32_t type, const struct pr_record *r)
{
	procreg__w_emit_at(w, type, r, procreg__w_now(w));
}

void procreg__w_emit_at(struct pr_writer *w, uint32_t type, const struct pr_record *r,
			uint64_t time_ns)
{
	struct pr_table_hdr *h = w->map.hdr;
	uint64_t s = h->feed_head + 1;
	struct pr_event *e;

	/* Checked on the first event, not on every one (30 of a
	 * registration's instructions). */
	if (!w->feed)
		w->feed = (struct pr_event *)ring(&w->map, &w->feed_cap);
	if (!w->feed)
		return;
	e = w->feed + (s & (w->feed_cap - 1));
	CMM_STORE_SHARED(e->seq, 0);
	cmm_smp_wmb(); /* the slot reads as reused before any byte changes */
	e->time_ns = time_ns;
	e->type = type;
	e->kind = r->kind;
	e->pid = r->pid;
	e->node = r->node;
	e->uid = r->uid;
	e->start_time = r->start_time;
	e->name_len = r->name_len;
	pr_copy(e->name, r->data, r->name_len);
	e->name[r->name_len] = 0;
	PR_STORE_REL(&e->seq, s);
	PR_STORE_REL(&h->feed_head, s);
	w->feed_pending = true;
	PR_TRACE(procregd, change, type, r->pid, r->kind, e->name, r->name_len, s);
}

static long futex(uint32_t *uaddr, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, uaddr, op, val, ts, NULL, 0);
}

void procreg__w_feed_wake(struct pr_writer *w)
{
	struct pr_table_hdr *h = w->map.hdr;

	if (!w->feed_pending && !w->feed_force)
		return;
	w->feed_pending = false;
	/* A follower reads the futex word before it re-reads feed_head and
	 * sleeps only while the word is unchanged: bumped after feed_head,
	 * it either sees the new head or its FUTEX_WAIT returns at once.
	 * The bump is unconditional; the system call is not. One FUTEX_WAKE
	 * costs 0.2-0.25 us when nobody sleeps (this machine: a loop of
	 * them), and a synchronous registration on the daemon's CPU waits
	 * for it, a twentieth of the round trip. So the daemon wakes only
	 * if a connection said FOLLOW: a follower says so before it sleeps
	 * (sleep_on_feed), having read the word, and an event published
	 * before the daemon counted it changed the word since. Who sleeps
	 * cannot be counted in the table: followers map it read-only, and a
	 * count they could write would let one stall the others. */
	cmm_smp_mb(); /* feed_head before the bump, on any CPU */
	uatomic_add(&h->feed_futex, 1);
	if (w->feed_followers || w->feed_force)
		futex(&h->feed_futex, FUTEX_WAKE, INT_MAX, NULL);
	w->feed_force = false;
}

/* ---- followers -------------------------------------------------------- */

PROCREG_API uint64_t procreg_feed_head(procreg_t *reg)
{
	return PR_LOAD_ACQ(&reg->map.hdr->feed_head);
}

static void to_event(const struct pr_event *e, struct procreg_event *ev, size_t nl)
{
	ev->seq = e->seq;
	ev->time_ns = e->time_ns;
	ev->type = (int)e->type;
	ev->is_group = e->kind == PR_KIND_MEMBER || e->kind == PR_KIND_GROUP;
	ev->pid = (pid_t)e->pid;
	ev->node = e->node;
	ev->uid = e->uid;
	ev->start_time = e->start_time;
	memcpy(ev->name, e->name, nl);
	ev->name[nl] = 0;
}

/* Copy event S if it is still in the ring: 0, or -EOVERFLOW. */
static int read_event(const struct pr_event *rg, uint64_t cap, uint64_t s,
		      struct procreg_event *ev)
{
	const struct pr_event *e = &rg[s & (cap - 1)];
	size_t nl;

	if (PR_LOAD_ACQ(&e->seq) != s)
		return -EOVERFLOW;
	nl = CMM_LOAD_SHARED(e->name_len);
	to_event(e, ev, nl > PROCREG_NAME_MAX ? PROCREG_NAME_MAX : nl);
	cmm_smp_rmb(); /* the copy before the second look at seq */
	return CMM_LOAD_SHARED(e->seq) == s ? 0 : -EOVERFLOW;
}

/* How long a follower the daemon could not be told of sleeps at a time. */
#define FOLLOW_RETRY_MS 100

static int sleep_on_feed(procreg_t *reg, uint64_t cursor, const struct timespec *deadline)
{
	struct pr_table_hdr *h = reg->map.hdr;
	struct timespec now, rel, *tp;
	uint32_t v = CMM_LOAD_SHARED(h->feed_futex);
	long r;
	int err;

	tp = NULL;
	if (deadline) {
		struct timespec left;

		clock_gettime(CLOCK_MONOTONIC, &now);
		left.tv_sec = deadline->tv_sec - now.tv_sec;
		left.tv_nsec = deadline->tv_nsec - now.tv_nsec;
		if (left.tv_nsec < 0) {
			left.tv_sec--;
			left.tv_nsec += 1000000000L;
		}
		if (left.tv_sec < 0)
			return -ETIMEDOUT;
		rel = left;
		tp = &rel;
	}
	cmm_smp_mb(); /* the futex word before feed_head */
	/* An event published before we read the word is seen here; one
	 * after changed the word, and FUTEX_WAIT returns at once, or wakes
	 * us, once the daemon counts us among the followers. Told after the
	 * word was read, it has: an event before it did bumped the word
	 * all the same. Where it could not be told: with no daemon (nothing
	 * publishes; the next to start stores its pid, listens, and then
	 * bumps the word and wakes every sleeper), sleep; else (a daemon
	 * that does not answer, refuses us, or died leaving its pid) sleep
	 * FOLLOW_RETRY_MS at most and tell it again. */
	if (PR_LOAD_ACQ(&h->feed_head) > cursor)
		return 0;
	err = procreg__follow(reg);
	if (err && CMM_LOAD_SHARED(h->daemon_pid) != 0 &&
	    (!tp || tp->tv_sec > 0 || tp->tv_nsec > FOLLOW_RETRY_MS * 1000000L)) {
		rel = (struct timespec){ 0, FOLLOW_RETRY_MS * 1000000L };
		tp = &rel;
	}
	r = futex(&h->feed_futex, FUTEX_WAIT, v, tp);
	/* Woken, or the time ran out: the caller looks again, and the
	 * deadline, if any, is checked on the way back in. */
	if (r < 0 && errno == EINTR)
		return -EINTR;
	return 0;
}

static struct timespec *deadline_of(int timeout_ms, struct timespec *ts)
{
	if (timeout_ms < 0)
		return NULL;
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += timeout_ms / 1000;
	ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
	return ts;
}

static int next_event(procreg_t *reg, uint64_t *cursor, struct procreg_event *ev,
		      const struct timespec *deadline, bool block)
{
	const struct pr_map *m = &reg->map;
	uint64_t cap;
	const struct pr_event *rg = ring(m, &cap);
	int err;

	if (!rg)
		return -EPROTO;
	for (;;) {
		uint64_t head = PR_LOAD_ACQ(&m->hdr->feed_head);

		if (head > *cursor) {
			/* Lapped already: the oldest event left is head-cap+1. */
			if (head - *cursor > cap) {
				*cursor = head - cap;
				return -EOVERFLOW;
			}
			err = read_event(rg, cap, *cursor + 1, ev);
			if (err) {
				*cursor = head > cap ? head - cap : *cursor;
				return err;
			}
			*cursor += 1;
			return 0;
		}
		if (!block)
			return -ETIMEDOUT;
		err = sleep_on_feed(reg, *cursor, deadline);
		if (err)
			return err;
	}
}

PROCREG_API int procreg_next_event(procreg_t *reg, uint64_t *cursor, struct procreg_event *out,
				   int timeout_ms)
{
	struct procreg_event ev = { .sz = sizeof(ev) };
	struct timespec ts;
	int err = PR_SIZED(out, procreg_event, name);

	if (err)
		return err;
	err = next_event(reg, cursor, &ev, deadline_of(timeout_ms, &ts), timeout_ms != 0);
	if (!err)
		procreg__sized_out(out, &ev, sizeof(ev));
	return err;
}

/* Wait until DONE(reg, arg) holds, re-checking after every event. The
 * cursor is taken before the first check, so a change between the check
 * and the sleep is an event after the cursor: no wake-up is lost. */
static int wait_until(procreg_t *reg, int (*done)(procreg_t *, const void *), const void *arg,
		      int timeout_ms)
{
	struct timespec ts, *deadline = deadline_of(timeout_ms, &ts);
	struct procreg_event ev = { .sz = sizeof(ev) };
	uint64_t cursor = procreg_feed_head(reg);
	int err;

	for (;;) {
		err = done(reg, arg);
		if (err <= 0)
			return err; /* 0: satisfied; < 0: an error */
		err = next_event(reg, &cursor, &ev, deadline, timeout_ms != 0);
		if (err == -EOVERFLOW)
			continue; /* something changed: look again */
		if (err)
			return err;
	}
}

static int name_present(procreg_t *reg, const void *name)
{
	int err = procreg_lookup(reg, name, NULL);

	return err == -ENOENT ? 1 : err;
}

PROCREG_API int procreg_wait(procreg_t *reg, const char *name, int timeout_ms)
{
	size_t len;
	int err = procreg__check_name(name, &len);

	return err ? err : wait_until(reg, name_present, name, timeout_ms);
}

struct group_want {
	const char *group;
	uint64_t count;
};

static int group_full(procreg_t *reg, const void *arg)
{
	const struct group_want *g = arg;
	uint64_t n;
	int err = procreg_group_count(reg, g->group, &n, NULL);

	return err ? err : n < g->count;
}

static int owned_by_me(procreg_t *reg, const void *name)
{
	PROCREG_OPTS(procreg_entry, e);
	int err = procreg_lookup(reg, name, &e);

	if (err == -ENOENT)
		return 1;
	if (err)
		return err;
	return !(e.node == 0 && e.pid == procreg__self_pid());
}

PROCREG_API int procreg_wait_owner(procreg_t *reg, const char *name, int timeout_ms)
{
	size_t len;
	int err = procreg__check_name(name, &len);

	return err ? err : wait_until(reg, owned_by_me, name, timeout_ms);
}

PROCREG_API int procreg_wait_group(procreg_t *reg, const char *group, uint64_t count,
				   int timeout_ms)
{
	const struct group_want g = { group, count };
	size_t len;
	int err = procreg__check_name(group, &len);

	return err ? err : wait_until(reg, group_full, &g, timeout_ms);
}
