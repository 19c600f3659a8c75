/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * owners.c - standby owners and leases: the daemon's private bookkeeping
 * for who owns a name next, and until when.
 *
 * Queues. A REGISTER with PR_F_QUEUE for a taken name puts its process in
 * line (one queue per contested name, first come first served). Whenever a
 * name goes — unregistered, its owner dead, its lease expired — the first
 * live process in line gets it at once, in the same turn of the event
 * loop, with a TRANSFERRED event. A process in line is watched through its
 * pidfd like an owner; if it dies first, it leaves the line. Each place
 * is in two lists, its queue's (in order) and its process's (struct proc:
 * places), and found by hash of the two: a death takes the process's own
 * places out of their lines, whatever the number of others.
 *
 * Leases. A registration may carry a lease: unless its owner refreshes it
 * in time, the name is released (or, with PR_F_LEASE_MARK, republished
 * marked unhealthy), though the process lives. Deadlines are kept here, in
 * a binary heap (the nearest first), and checked from the daemon's timer,
 * which is armed for the nearest one: the timer takes due leases off the
 * top of the heap, whatever the number of others.
 * A membership may carry one too: keyed by its group and its member
 * process (pid and start time), it ends the membership when it runs out,
 * as a leave would; only the member process renews it.
 *
 * Both are found by hash: a queue by its name, a lease by its name and,
 * for a membership's, its member (pid and start time). Names are chosen
 * by clients, any uid's, so the hash is keyed with a secret of this
 * daemon's (SipHash): nobody can choose names that share a chain. While
 * both are empty, a registration or a death costs nothing here.
 *
 * The journal. The table keeps the names; only this file knows who is in
 * line and when a lease runs out. So that a daemon restarted after a crash
 * knows it too, every change to a queue or a lease is appended to
 * procreg.<scope>.owners (one write(2)) before the request that made it is
 * answered. At start the file is replayed and checked against the table
 * and the living processes, then rewritten from the result; it is
 * rewritten again whenever it grows past four times that (and 64 KiB), so
 * it stays about as small as the state it holds. A lease survives a
 * restart with a fresh deadline: the daemon cannot know how long it was
 * down, and releasing a name its owner renewed meanwhile would be worse
 * than keeping it one lease longer.
 *
 * Signals. What a process asked to be sent if it loses a name to another
 * node (procreg run --on-lost: struct proc.lost_signal) is kept here too,
 * a record when it is set or changed (J_SIGNAL) and one when it is
 * cleared (the process holds nothing any more), so that a daemon
 * restarted still sends it. A process that died needs no record: its
 * signal is replayed onto a process of the same pid and start time only.
 *
 * Limits. Places in line and leases live in the daemon's memory and in the
 * journal, not in the table: the table's size does not bound them. Each
 * has a limit of its own, all uids together (--max-places, --max-leases),
 * whose last 1/32 is kept for root and the daemon's uid as the last
 * connections are (so many uids together cannot take them all from
 * root), and a limit per uid (--max-places-per-uid, --max-leases-per-uid;
 * places count as names too, under --max-names-per-uid), so that one uid
 * cannot take them all from the others. A place in line that asks for a
 * lease counts as a lease of its uid until its hand-over, which turns it
 * into one: a hand-over is never refused for them, since the place it
 * comes from was counted, and a uid at its limit cannot get leases past
 * it by handing its names to itself.
 *
 * Space. The journal's file is allocated (fallocate, its length kept)
 * ahead of its end, so that an append never finds the filesystem full. A
 * request that would add a place in line or a lease makes sure first that
 * there is room for its record and for the one that will remove it; so
 * the room for removing everything journaled is always there (owed),
 * and removals, which a death or an unregistration makes and which cannot
 * be refused, never run out of it. On a full filesystem the request that
 * adds fails with ENOSPC before it changes anything. A journal that cannot
 * be rewritten (compacted, or at start) for want of space is kept, and
 * appended to, as it was.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "proto.h"

/* ---- keyed hash tables -------------------------------------------------
 *
 * Chained, the chain's links inside the entries (struct hnode first in
 * each). The buckets double when there are more entries than buckets,
 * and halve when there are eight times fewer; a table that cannot grow
 * (no memory) keeps working with longer chains.
 */

struct hnode {
	struct hnode *next;
	uint64_t hash;
};

struct htab {
	struct hnode **b;
	size_t cap, n;            /* buckets (0 or a power of two), entries */
};

#define HT_MIN 64

static void ht_resize(struct htab *t, size_t cap)
{
	struct hnode **b = calloc(cap, sizeof(*b));

	if (!b)
		return;
	for (size_t i = 0; i < t->cap; i++) {
		while (t->b[i]) {
			struct hnode *e = t->b[i];

			t->b[i] = e->next;
			e->next = b[e->hash & (cap - 1)];
			b[e->hash & (cap - 1)] = e;
		}
	}
	free(t->b);
	t->b = b;
	t->cap = cap;
}

/* The first entry of HASH's chain (the caller compares keys). */
static struct hnode *ht_chain(const struct htab *t, uint64_t hash)
{
	return t->cap ? t->b[hash & (t->cap - 1)] : NULL;
}

/* Add E (its hash set): 0, or -ENOMEM if the table has no buckets yet
 * and none can be had. */
static int ht_add(struct htab *t, struct hnode *e)
{
	size_t i;

	if (t->n + 1 > t->cap)
		ht_resize(t, t->cap ? t->cap * 2 : HT_MIN);
	if (!t->cap)
		return -ENOMEM;
	i = e->hash & (t->cap - 1);
	e->next = t->b[i];
	t->b[i] = e;
	t->n++;
	return 0;
}

/* NEW takes OLD's place (same hash): nothing is resized. */
static void ht_replace(struct htab *t, struct hnode *old, struct hnode *new)
{
	struct hnode **pp = &t->b[old->hash & (t->cap - 1)];

	while (*pp != old)
		pp = &(*pp)->next;
	new->hash = old->hash;
	new->next = old->next;
	*pp = new;
}

static void ht_del(struct htab *t, struct hnode *e)
{
	struct hnode **pp = &t->b[e->hash & (t->cap - 1)];

	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	t->n--;
	if (t->cap > HT_MIN && t->n < t->cap / 8)
		ht_resize(t, t->cap / 2);
}

/* Every entry of T, as E (of type TYPE, its hnode first): none may be
 * added or removed meanwhile. */
#define HT_EACH(t, type, e)                                                              \
	for (size_t ht_i_ = 0; ht_i_ < (t)->cap; ht_i_++)                                 \
		for (type *e = (type *)(t)->b[ht_i_]; e; e = (type *)((struct hnode *)e)->next)

/* SipHash-2-4 of the N bytes at P with key K: a secret of this daemon's,
 * so that clients cannot pick names that collide. */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                               \
	do {                                                                   \
		v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);      \
		v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                         \
		v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                         \
		v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);      \
	} while (0)

static uint64_t siphash(const uint64_t k[2], const uint8_t *p, size_t n)
{
	uint64_t v0 = k[0] ^ 0x736f6d6570736575ull, v1 = k[1] ^ 0x646f72616e646f6dull;
	uint64_t v2 = k[0] ^ 0x6c7967656e657261ull, v3 = k[1] ^ 0x7465646279746573ull;
	uint64_t m, b = (uint64_t)n << 56;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		m = 0;
		for (int j = 0; j < 8; j++)
			m |= (uint64_t)p[i + j] << (8 * j);
		v3 ^= m;
		SIPROUND;
		SIPROUND;
		v0 ^= m;
	}
	for (int j = 0; i + (size_t)j < n; j++)
		b |= (uint64_t)p[i + (size_t)j] << (8 * j);
	v3 ^= b;
	SIPROUND;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- queues and leases -------------------------------------------------- */

struct waiter {
	struct hnode h;           /* in owners->waiters, by queue and process */
	struct waiter *next, *prev;   /* in its queue, in order */
	struct waiter *pnext, *pprev; /* among its process's (proc->places) */
	struct queue *q;
	struct proc *p;
	struct ident id;
	uint16_t flags;           /* PROCREG_REPLACE, _REPLACEABLE, _LEASE_MARK */
	uint32_t lease_ms;
	uint16_t meta_len;
	uint8_t meta[];
};

struct queue {
	struct hnode h;           /* in owners->queues, by name */
	struct waiter *head, *tail;
	uint16_t len;
	char name[];              /* len bytes and a NUL */
};

struct lease {
	struct hnode h;           /* in owners->leases, by name, pid and start */
	size_t heap;              /* its place in owners->due; NOT_DUE: none (expired) */
	uint64_t ttl_ns, deadline_ns;
	bool mark;       /* mark unhealthy instead of releasing */
	bool expired;    /* marked: waiting for a refresh */
	int32_t pid;     /* a membership's member (0: the lease of a name) */
	uint64_t start;  /* its start time */
	uid_t uid;       /* the uid it counts for (NO_UID: none yet, replayed) */
	uint16_t len;
	char name[];     /* len bytes and a NUL */
};

/* A lease read back from the journal, which does not say whose it is:
 * recovery gives it its record's uid, or drops it. */
#define NO_UID ((uid_t)-1)

/* The daemon's owners state: only this file reads or writes it. */
struct owners {
	struct htab queues;       /* struct queue */
	struct htab leases;       /* struct lease */
	struct htab waiters;      /* struct waiter */
	/* The leases waiting for their deadline (all but those marked
	 * expired), a binary heap by deadline: room for every lease, so
	 * that putting one back never needs memory. */
	struct lease **due;
	size_t ndue, due_cap;
	uint64_t key[2];          /* the hashes' (secret) */
	struct pr_u64map uid_places; /* uid + 2 -> its places in line */
	struct pr_u64map uid_leases; /* uid + 2 -> its leases, and places in line
				      * that ask for one */
	/* Places in line that ask for a lease, all uids: each is a lease at
	 * its hand-over, which cannot be refused, so each counts as one
	 * against --max-leases from the time it is queued. */
	size_t leased_places;
	struct pr_ratelimit refused_log; /* places and leases refused for a limit */
	/* Hand-overs refused (the process next in line at its own limit):
	 * a user who can fill a line with such processes decides how many. */
	struct pr_ratelimit handover_log;
	struct pr_ratelimit signal_log; /* signals kept in memory only: no room */
	int fd;                   /* the journal, when open */
	bool open;
	uint64_t bytes;           /* its length */
	uint64_t written;         /* bytes written to it since the start, rewrites but for */
	uint64_t base;            /* its length when last rewritten from the live state */
	uint64_t room;            /* its file is allocated up to here (UINT64_MAX: unknown) */
	uint64_t owed;            /* bytes the records removing all it holds would take */
	bool full;                /* no room for it, as last logged */
	/* At start only, from procs_recover() to owners_recover(): the
	 * names of other nodes' entries dropped, by remote_key(). */
	struct pr_u64map remote_dropped;
	/* After a start that dropped other nodes' entries: when the lines
	 * of names still missing are passed on (REMOTE_GRACE_NS). */
	uint64_t recheck_ns;
};

/* A name another node held when the last daemon stopped is not passed to
 * the next in line at start: the other node's snapshot brings it back
 * when the bridge is up again, and a local process given it meanwhile
 * would lose it to the earlier registration (told so, and signalled if
 * it asked to be). Lines of names still missing after the node timeout
 * (3 s unless --node-timeout-ms says), the grace a node down is given
 * to come back (1 s) and as long again are passed on then. */
#define REMOTE_GRACE_NS(d) \
	((uint64_t)((d)->o.bridge_timeout_ms ? (d)->o.bridge_timeout_ms : 3000) * 2000000ull + \
	 2000000000ull)

/* ---- lease deadlines: a binary heap, the nearest at the top ----------- */

#define NOT_DUE SIZE_MAX

static void heap_set(struct owners *o, size_t i, struct lease *l)
{
	o->due[i] = l;
	l->heap = i;
}

static void heap_up(struct owners *o, size_t i)
{
	struct lease *l = o->due[i];

	while (i) {
		size_t up = (i - 1) / 2;

		if (o->due[up]->deadline_ns <= l->deadline_ns)
			break;
		heap_set(o, i, o->due[up]);
		i = up;
	}
	heap_set(o, i, l);
}

static void heap_down(struct owners *o, size_t i)
{
	struct lease *l = o->due[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= o->ndue)
			break;
		if (c + 1 < o->ndue && o->due[c + 1]->deadline_ns < o->due[c]->deadline_ns)
			c++;
		if (l->deadline_ns <= o->due[c]->deadline_ns)
			break;
		heap_set(o, i, o->due[c]);
		i = c;
	}
	heap_set(o, i, l);
}

/* Room in the heap for N leases: 0, or -ENOMEM. */
static int heap_room(struct owners *o, size_t n)
{
	size_t cap = o->due_cap ? o->due_cap : 64;
	struct lease **due;

	if (n <= o->due_cap)
		return 0;
	while (cap < n)
		cap *= 2;
	due = realloc(o->due, cap * sizeof(*due));
	if (!due)
		return -ENOMEM;
	o->due = due;
	o->due_cap = cap;
	return 0;
}

/* L's deadline was set: its place in the heap (it is put there if it
 * was not; heap_room() made room for it when it was made). */
static void heap_fix(struct owners *o, struct lease *l)
{
	if (l->heap == NOT_DUE) {
		heap_set(o, o->ndue++, l);
		heap_up(o, l->heap);
		return;
	}
	heap_up(o, l->heap);
	heap_down(o, l->heap);
}

/* L out of the heap (nothing if it was not there). */
static void heap_del(struct owners *o, struct lease *l)
{
	size_t i = l->heap;

	if (i == NOT_DUE)
		return;
	l->heap = NOT_DUE;
	if (i == --o->ndue)
		return;
	heap_set(o, i, o->due[o->ndue]);
	heap_up(o, i);
	heap_down(o, o->due[i]->heap);
}

static uint64_t queue_hash(const struct owners *o, const char *name, size_t len)
{
	return siphash(o->key, (const uint8_t *)name, len);
}

/* NAME's key in remote_dropped: its queue's hash (0 and 1 are the map's). */
static uint64_t remote_key(const struct owners *o, const char *name, size_t len)
{
	uint64_t h = queue_hash(o, name, len);

	return h < 2 ? h + 2 : h;
}

void owners_remote_dropped(struct daemon *d, const char *name, size_t len)
{
	/* No memory: its line is passed on at once, as before. */
	(void)procreg__u64map_put(&d->owners->remote_dropped, remote_key(d->owners, name, len), 1);
}

static uint64_t waiter_hash(const struct owners *o, const struct queue *q, const struct proc *p)
{
	const void *k[2] = { q, p };

	return siphash(o->key, (const uint8_t *)k, sizeof(k));
}

static uint64_t lease_hash(const struct owners *o, const char *name, size_t len, int32_t pid,
			   uint64_t start)
{
	uint8_t buf[PROCREG_NAME_MAX + sizeof(pid) + sizeof(start)];

	memcpy(buf, name, len);
	memcpy(buf + len, &pid, sizeof(pid));
	memcpy(buf + len + sizeof(pid), &start, sizeof(start));
	return siphash(o->key, buf, len + sizeof(pid) + sizeof(start));
}

int owners_new(struct daemon *d)
{
	d->owners = calloc(1, sizeof(*d->owners));
	if (!d->owners)
		return -ENOMEM;
	d->owners->fd = -1;
	/* The key: secret, else a client could make every name it chooses
	 * land in one chain. Without the kernel's (too early at boot to
	 * block for it), the clock and our pid, which are harder to guess. */
	if (getrandom(d->owners->key, sizeof(d->owners->key), GRND_NONBLOCK) !=
	    (ssize_t)sizeof(d->owners->key)) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		d->owners->key[0] = pr_mix((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30));
		d->owners->key[1] = pr_mix(procreg__mono_ns() ^ (uint64_t)getpid());
	}
	return 0;
}

/* ---- the journal --------------------------------------------------------
 *
 * procreg.<scope>.owners: written and read by procregd only (mode 0600).
 * A header, then records, each whole or cut short by a crash: a record
 * whose length or checksum is wrong ends the replay (it was never answered,
 * since the write comes first).
 */

#define JOURNAL_MAGIC 0x31534e574f525030ull /* "0PROWNS1" */
#define JOURNAL_COMPACT_MIN (64 * 1024)
#define JOURNAL_AHEAD (64 * 1024)       /* allocated past what is needed at a time */

struct jhdr {
	uint64_t magic;
	uint8_t boot_id[16];    /* a journal of another boot is dropped */
};

enum { J_LEASE = 1, J_UNLEASE, J_WAIT, J_UNWAIT, J_UNWAIT_PROC, J_SIGNAL };

struct jrec {
	uint32_t len;           /* the whole record */
	uint32_t sum;           /* FNV-1a of everything after this field */
	uint8_t type;           /* J_* */
	uint8_t mark;           /* J_LEASE: PR_F_LEASE_MARK; J_SIGNAL: the signal, 0: none */
	uint16_t name_len;
	uint16_t flags;         /* J_WAIT: PROCREG_REPLACE, _REPLACEABLE, _LEASE_MARK */
	uint16_t meta_len;
	uint32_t lease_ms;      /* J_LEASE, J_WAIT */
	int32_t pid;            /* J_WAIT, J_UNWAIT, J_UNWAIT_PROC, J_SIGNAL; J_LEASE,
				 * J_UNLEASE of a membership (0: of a name) */
	uint64_t start;
	uint64_t ino;
	/* then name_len bytes of name, meta_len of metadata */
};

#define JREC_MAX (sizeof(struct jrec) + PROCREG_NAME_MAX + PROCREG_META_MAX)
#define SIGNAL_REC_BYTES sizeof(struct jrec) /* J_SIGNAL: no name */

/* Leases handled by one tick at most: the rest, due too, wait for the
 * next, which comes at once, after the requests that came meanwhile
 * (thousands of leases that run out together do not hold them up). */
#define TICK_LEASES_MAX 256

/* A marked lease whose name could not be marked is tried again after this. */
#define LEASE_RETRY_NS (100 * 1000000ull)

static uint32_t fnv1a(const uint8_t *p, size_t n)
{
	uint32_t h = 2166136261u;

	while (n--)
		h = (h ^ *p++) * 16777619u;
	return h;
}

static void journal_path(const struct daemon *d, char *out, size_t len, const char *suffix)
{
	snprintf(out, len, "%s.owners%s", d->paths.table, suffix);
}

/* The bytes of the record that removes a lease or a place in line of a
 * name of NAME_LEN bytes (J_UNLEASE, J_UNWAIT; J_UNWAIT_PROC is smaller). */
static uint64_t removal_cost(size_t name_len)
{
	return sizeof(struct jrec) + name_len;
}

/* A place in line owes its removal, and, since it may become a leased
 * name at a hand-over that cannot wait for room, that lease and its
 * removal too. */
static uint64_t place_cost(size_t name_len)
{
	return 3 * removal_cost(name_len);
}

static size_t jrec_build(uint8_t *buf, uint8_t type, const char *name, size_t name_len,
			 const struct jrec *fields, const uint8_t *meta, size_t meta_len)
{
	struct jrec r = *fields;

	r.type = type;
	r.name_len = (uint16_t)name_len;
	r.meta_len = (uint16_t)meta_len;
	r.len = (uint32_t)(sizeof(r) + name_len + meta_len);
	memcpy(buf, &r, sizeof(r));
	memcpy(buf + sizeof(r), name, name_len);
	if (meta_len)
		memcpy(buf + sizeof(r) + name_len, meta, meta_len);
	r.sum = fnv1a(buf + 8, r.len - 8);
	memcpy(buf + 4, &r.sum, sizeof(r.sum));
	return r.len;
}

static size_t jrec_waiter(uint8_t *buf, const struct queue *q, const struct waiter *w)
{
	struct jrec f = { .flags = w->flags, .lease_ms = w->lease_ms, .pid = w->id.pid,
			  .start = w->id.start, .ino = w->id.ino };

	return jrec_build(buf, J_WAIT, q->name, q->len, &f, w->meta, w->meta_len);
}

static size_t jrec_lease(uint8_t *buf, const struct lease *l)
{
	struct jrec f = { .mark = l->mark, .lease_ms = (uint32_t)(l->ttl_ns / 1000000ull),
			  .pid = l->pid, .start = l->start };

	return jrec_build(buf, J_LEASE, l->name, l->len, &f, NULL, 0);
}

static int journal_rewrite(struct daemon *d);
static void journal_off(struct daemon *d, const char *why);

/* The file allocated from its end to past END, a chunk ahead if the
 * filesystem has it: 0, or -ENOSPC with nothing allocated. */
static int journal_allocate(struct daemon *d, uint64_t end)
{
	uint64_t want[2] = { end + JOURNAL_AHEAD, end };

	for (int i = 0; i < 2; i++) {
		if (fallocate(d->owners->fd, FALLOC_FL_KEEP_SIZE, (off_t)d->owners->bytes,
			      (off_t)(want[i] - d->owners->bytes)) == 0) {
			d->owners->room = want[i];
			return 0;
		}
		if (errno == EOPNOTSUPP) {
			/* No promise to be had: appends may fail as writes do. */
			d->owners->room = UINT64_MAX;
			return 0;
		}
		if (errno != ENOSPC)
			return -errno;
	}
	return -ENOSPC;
}

/* Room in the journal for LEN more bytes beyond what removing all it holds
 * would take: 0, or -ENOSPC (logged once until there is room again). */
static int journal_room(struct daemon *d, uint64_t len)
{
	uint64_t end = d->owners->bytes + d->owners->owed + len;
	int err;

	if (!d->owners->open || end <= d->owners->room)
		return 0;
	err = journal_allocate(d, end);
	if (err == -ENOSPC && !d->owners->full) {
		log_warn("owners journal: the filesystem is full: places in line and leases are refused (ENOSPC) until space is freed");
		d->owners->full = true;
	} else if (!err && d->owners->full) {
		log_notice("owners journal: space is back");
		d->owners->full = false;
	}
	return err;
}

uint64_t owners_journaled(const struct daemon *d)
{
	return d->owners->written;
}

int owners_room(struct daemon *d)
{
	return journal_room(d, JREC_MAX + place_cost(PROCREG_NAME_MAX));
}

/* The processes whose signal is journaled: each with one, alive. Two
 * loops and an if: no break, and no else after its body. */
#define PROC_EACH_SIGNALLED(d, p)                                                        \
	for (size_t i_ = 0; i_ < (d)->procs.cap; i_++)                                   \
		for (struct proc *p = (d)->procs.kv && (d)->procs.kv[i_].key > 1           \
					      ? (struct proc *)(uintptr_t)(d)->procs.kv[i_].val \
					      : NULL;                                            \
		     p; p = NULL)                                                        \
			if (p->lost_signal && !p->dying && !p->gone)

/* What removing all that is journaled would take, counted afresh. */
static uint64_t owed_now(const struct daemon *d)
{
	uint64_t owed = 0;

	PROC_EACH_SIGNALLED(d, p)
		owed += SIGNAL_REC_BYTES;
	HT_EACH(&d->owners->leases, const struct lease, l)
		owed += removal_cost(l->len);
	HT_EACH(&d->owners->queues, const struct queue, q)
		for (const struct waiter *w = q->head; w; w = w->next)
			owed += place_cost(q->len);
	return owed;
}

/* Append one record; a failure is logged, and the state it would have
 * kept is lost at the next restart only. */
static void journal(struct daemon *d, const uint8_t *rec, size_t len)
{
	ssize_t n;

	if (!d->owners->open)
		return;
	n = write(d->owners->fd, rec, len);
	if (n != (ssize_t)len) {
		log_err("owners journal: %s", n < 0 ? strerror(errno) : "short write");
		/* Whatever went in part way is cut off at the next replay; a
		 * rewrite starts a whole file again. Without one, no journal
		 * rather than a stale one: replayed at the next start, it
		 * would bring back places and leases long gone. */
		if (journal_rewrite(d) < 0)
			journal_off(d, "queues and leases will not survive a restart");
		return;
	}
	d->owners->bytes += len;
	d->owners->written += len;
	/* Compaction can wait: the journal as it is stays whole. */
	if (d->owners->bytes > JOURNAL_COMPACT_MIN && d->owners->bytes > 4 * d->owners->base &&
	    journal_rewrite(d) < 0)
		d->owners->base = d->owners->bytes;
}

/* A record that removes (J_UNLEASE, J_UNWAIT, J_UNWAIT_PROC): what it
 * takes was owed. */
static void journal_rec(struct daemon *d, uint8_t type, const char *name, size_t name_len,
			const struct jrec *fields)
{
	uint8_t buf[sizeof(struct jrec) + PROCREG_NAME_MAX];
	size_t len;

	if (!d->owners->open)
		return;
	len = jrec_build(buf, type, name, name_len, fields, NULL, 0);
	d->owners->owed -= len < d->owners->owed ? len : d->owners->owed;
	journal(d, buf, len);
}

/* ---- signals (struct proc.lost_signal) ------------------------------------ */

static size_t jrec_signal(uint8_t *buf, const struct proc *p)
{
	struct jrec f = { .mark = (uint8_t)p->lost_signal, .pid = p->pid, .start = p->start,
			  .ino = p->ino };

	return jrec_build(buf, J_SIGNAL, "", 0, &f, NULL, 0);
}

void owners_signal_set(struct daemon *d, struct proc *p, int sig)
{
	uint8_t buf[SIGNAL_REC_BYTES];

	if (!sig || p->lost_signal == sig)
		return;
	/* Set before the write: a write that fails rewrites the journal
	 * from the live state. */
	p->lost_signal = sig;
	if (!d->owners->open)
		return;
	/* Its record, and (owed) the one that will clear it. The request
	 * is not refused for want of them: the signal is kept, in memory
	 * only, as before there was a journal for it (a restart forgets
	 * it, or brings back the one journaled before). */
	if (journal_room(d, p->lost_journaled ? SIGNAL_REC_BYTES : 2 * SIGNAL_REC_BYTES) < 0) {
		log_limited(&d->owners->signal_log, "signals not journaled",
			    "owners journal: the filesystem is full: pid %d's signal on a name lost is kept in memory only (a restart forgets it)",
			    (int)p->pid);
		return;
	}
	if (!p->lost_journaled)
		d->owners->owed += SIGNAL_REC_BYTES;
	p->lost_journaled = true;
	journal(d, buf, jrec_signal(buf, p));
}

void owners_signal_clear(struct daemon *d, struct proc *p, bool died)
{
	uint8_t buf[SIGNAL_REC_BYTES];

	p->lost_signal = 0;
	if (!p->lost_journaled)
		return;
	p->lost_journaled = false;
	d->owners->owed -= SIGNAL_REC_BYTES < d->owners->owed ? SIGNAL_REC_BYTES : d->owners->owed;
	/* A process that died needs no record: its signal is never
	 * replayed onto another process. */
	if (!died)
		journal(d, buf, jrec_signal(buf, p));
}

static bool same_name(const char *a, size_t alen, const char *b, size_t blen)
{
	return alen == blen && !memcmp(a, b, alen);
}

static struct queue *find_queue(const struct daemon *d, const char *name, size_t len)
{
	uint64_t hash;

	if (!d->owners->queues.n)
		return NULL;
	hash = queue_hash(d->owners, name, len);
	for (struct hnode *e = ht_chain(&d->owners->queues, hash); e; e = e->next) {
		struct queue *q = (struct queue *)e;

		if (e->hash == hash && same_name(q->name, q->len, name, len))
			return q;
	}
	return NULL;
}

/* The lease of name NAME (PID 0), or of PID's membership of group NAME. */
static struct lease *find_lease(const struct daemon *d, const char *name, size_t len, int32_t pid,
				uint64_t start)
{
	uint64_t hash;

	if (!d->owners->leases.n)
		return NULL;
	hash = lease_hash(d->owners, name, len, pid, start);
	for (struct hnode *e = ht_chain(&d->owners->leases, hash); e; e = e->next) {
		struct lease *l = (struct lease *)e;

		if (e->hash == hash && l->pid == pid && l->start == start &&
		    same_name(l->name, l->len, name, len))
			return l;
	}
	return NULL;
}

static void queue_drop(struct daemon *d, struct queue *q)
{
	ht_del(&d->owners->queues, &q->h);
	free(q);
}

bool owners_interested(const struct daemon *d, const char *name, size_t len)
{
	if (!d->owners->queues.n && !d->owners->leases.n)
		return false;
	return find_queue(d, name, len) || find_lease(d, name, len, 0, 0);
}

/* A place in line of UID's that asks for a lease is queued (DELTA 1) or
 * is no longer, or no longer asks (-1): counted as a lease of UID's, and
 * among all leases. */
static void place_leased(struct daemon *d, uid_t uid, int delta)
{
	uid_adjust(&d->owners->uid_leases, uid, delta);
	d->owners->leased_places += (size_t)(ssize_t)delta;
}

/* Leases held, and the places in line that will be: against --max-leases. */
static size_t leases_counted(const struct daemon *d)
{
	return d->owners->leases.n + d->owners->leased_places;
}

/* P takes (DELTA 1) or gives up (-1) a place in a line: it counts as a
 * name of P's uid, as the uid quota says (procs.c: uid_may_add), and, if
 * LEASED (it asks for a lease), as a lease of it. */
static void place_taken(struct daemon *d, struct proc *p, int delta, bool leased)
{
	p->waiting += (uint32_t)delta;
	uid_adjust(&d->uid_names, p->uid, delta);
	uid_adjust(&d->owners->uid_places, p->uid, delta);
	if (leased)
		place_leased(d, p->uid, delta);
}

/* Whether UID may have one more lease of its own (per uid, not all
 * uids together): the privileged have no such limit. */
static bool uid_may_lease(const struct daemon *d, uid_t uid)
{
	return uid_privileged(d, uid) ||
	       uid_count(&d->owners->uid_leases, uid) < d->o.max_leases_per_uid;
}

uint64_t owners_uid_leases(const struct daemon *d, uid_t uid)
{
	return uid_count(&d->owners->uid_leases, uid);
}

/* Whether UID may have one more of something of which there are N, under
 * LIMIT for all uids together: its last 1/32 is for the privileged. */
static bool under_limit(const struct daemon *d, uid_t uid, size_t n, uint32_t limit)
{
	return n < limit - (uid_privileged(d, uid) ? 0 : limit / 32);
}

/* Whether PID of UID may have WHAT, a lease or a place in line that asks
 * for one, under --max-leases: if not, logged. */
static bool leases_room(struct daemon *d, pid_t pid, uid_t uid, const char *what)
{
	if (under_limit(d, uid, leases_counted(d), d->o.max_leases))
		return true;
	log_limited(&d->owners->refused_log, "places in line and leases refused",
		    "client pid %d uid %u: %s refused (ENOSPC): %zu leases held and %zu places in "
		    "line asking for one, --max-leases %u reached%s",
		    (int)pid, (unsigned)uid, what, d->owners->leases.n, d->owners->leased_places,
		    d->o.max_leases,
		    uid_privileged(d, uid) ? "" : " (its last 1/32 kept for root and procregd's uid)");
	return false;
}

int owners_lease_room(struct daemon *d, const struct ident *id, const struct reg_request *rq)
{
	bool name = rq->kind == PR_KIND_NAME;
	const struct lease *l = find_lease(d, rq->name, rq->name_len, name ? 0 : id->pid,
					   name ? 0 : id->start);

	/* A lease set again is no new one; one taken over with its name
	 * (PROCREG_REPLACE) is for the uid that takes it, unless that uid's
	 * count has it already. */
	if ((!l || subuid_owner(l->uid) != subuid_owner(id->uid)) && !uid_may_lease(d, id->uid))
		return -EDQUOT;
	if (!l && !leases_room(d, id->pid, id->uid, "lease"))
		return -ENOSPC;
	return owners_room(d) ? -ENOSPC : 0;
}

/* P's place in line Q, or NULL. */
static struct waiter *find_waiter(const struct daemon *d, const struct queue *q,
				  const struct proc *p)
{
	uint64_t hash;

	if (!q || !d->owners->waiters.n)
		return NULL;
	hash = waiter_hash(d->owners, q, p);
	for (struct hnode *e = ht_chain(&d->owners->waiters, hash); e; e = e->next) {
		struct waiter *w = (struct waiter *)e;

		if (e->hash == hash && w->q == q && w->p == p)
			return w;
	}
	return NULL;
}

/* W out of its line, its process's places and the table (not freed, and
 * its queue kept even if empty). */
static void waiter_unlink(struct daemon *d, struct waiter *w)
{
	struct queue *q = w->q;

	*(w->prev ? &w->prev->next : &q->head) = w->next;
	*(w->next ? &w->next->prev : &q->tail) = w->prev;
	*(w->pprev ? &w->pprev->pnext : &w->p->places) = w->pnext;
	if (w->pnext)
		w->pnext->pprev = w->pprev;
	ht_del(&d->owners->waiters, &w->h);
}

/* NEW takes OLD's place everywhere; OLD is freed. */
static void waiter_replace(struct daemon *d, struct waiter *old, struct waiter *new)
{
	new->q = old->q;
	new->prev = old->prev;
	new->next = old->next;
	new->pprev = old->pprev;
	new->pnext = old->pnext;
	*(new->prev ? &new->prev->next : &new->q->head) = new;
	*(new->next ? &new->next->prev : &new->q->tail) = new;
	*(new->pprev ? &new->pprev->pnext : &new->p->places) = new;
	if (new->pnext)
		new->pnext->pprev = new;
	ht_replace(&d->owners->waiters, &old->h, &new->h);
	free(old);
}

/* W at the end of its line Q, and among its process's places: 0, or
 * -ENOMEM (nothing changed). */
static int waiter_add(struct daemon *d, struct queue *q, struct waiter *w)
{
	w->q = q;
	w->h.hash = waiter_hash(d->owners, q, w->p);
	if (ht_add(&d->owners->waiters, &w->h) < 0)
		return -ENOMEM;
	w->next = NULL;
	w->prev = q->tail;
	*(q->tail ? &q->tail->next : &q->head) = w;
	q->tail = w;
	w->pprev = NULL;
	w->pnext = w->p->places;
	if (w->pnext)
		w->pnext->pprev = w;
	w->p->places = w;
	return 0;
}

int owners_enqueue(struct daemon *d, struct proc *p, const struct ident *id,
		   const struct reg_request *rq)
{
	struct queue *q = find_queue(d, rq->name, rq->name_len);
	/* Asking again keeps one's place, with the newer metadata. */
	struct waiter *old = find_waiter(d, q, p), *w;

	/* Asked again the same: nothing changes, nothing is written (a
	 * process asking in a loop made the journal take 100 MB a second). */
	if (old && old->flags == (uint16_t)(rq->flags & ~(uint32_t)PROCREG_QUEUE) &&
	    old->lease_ms == rq->lease_ms && old->meta_len == rq->meta_len &&
	    !memcmp(old->meta, rq->meta, rq->meta_len))
		return 0;

	/* A new place in line costs the daemon memory like a name does: it
	 * counts against the same limits, per process and per uid (else one
	 * uid could queue for names without bound). */
	if (!old &&
	    (p->names.n + p->waiting >= d->o.max_names_per_proc || !uid_may_add(d, p) ||
	     (!uid_privileged(d, p->uid) &&
	      uid_count(&d->owners->uid_places, p->uid) >= d->o.max_places_per_uid)))
		return -EDQUOT;
	/* One that asks for a lease is counted as one now: its hand-over,
	 * which sets the lease, cannot be refused. */
	if (rq->lease_ms && !(old && old->lease_ms)) {
		if (!uid_may_lease(d, p->uid))
			return -EDQUOT;
		if (!leases_room(d, p->pid, p->uid, "place in line with a lease"))
			return -ENOSPC;
	}
	/* And they all cost the daemon: so many and no more, all uids
	 * together, the last for root. */
	if (!old && !under_limit(d, p->uid, d->owners->waiters.n, d->o.max_places)) {
		log_limited(&d->owners->refused_log, "places in line and leases refused",
			    "pid %d uid %u: place in line refused (ENOSPC): %zu places held, --max-places %u reached%s",
			    (int)p->pid, (unsigned)p->uid, d->owners->waiters.n, d->o.max_places,
			    uid_privileged(d, p->uid) ? "" : " (its last 1/32 kept for root and procregd's uid)");
		return -ENOSPC;
	}
	if (owners_room(d))
		return -ENOSPC;
	if (!q) {
		q = calloc(1, sizeof(*q) + rq->name_len + 1);
		if (!q)
			return -ENOMEM;
		q->len = (uint16_t)rq->name_len;
		memcpy(q->name, rq->name, rq->name_len);
		q->h.hash = queue_hash(d->owners, q->name, q->len);
		if (ht_add(&d->owners->queues, &q->h) < 0) {
			free(q);
			return -ENOMEM;
		}
	}
	w = malloc(sizeof(*w) + rq->meta_len);
	if (!w) {
		if (!q->head)
			queue_drop(d, q);
		return -ENOMEM;
	}
	w->p = p;
	w->id = *id;
	w->id.pidfd = -1; /* the proc holds the pidfd */
	w->flags = (uint16_t)(rq->flags & ~(uint32_t)PROCREG_QUEUE);
	w->lease_ms = rq->lease_ms;
	w->meta_len = (uint16_t)rq->meta_len;
	memcpy(w->meta, rq->meta, rq->meta_len);
	if (old) {
		/* Asked again with a lease, or without one now. */
		if (!old->lease_ms != !w->lease_ms)
			place_leased(d, p->uid, w->lease_ms ? 1 : -1);
		waiter_replace(d, old, w);
	} else {
		if (waiter_add(d, q, w) < 0) {
			free(w);
			if (!q->head)
				queue_drop(d, q);
			return -ENOMEM;
		}
		place_taken(d, p, 1, w->lease_ms);
		d->owners->owed += place_cost(q->len);
	}
	if (d->owners->open) {
		uint8_t buf[JREC_MAX];

		journal(d, buf, jrec_waiter(buf, q, w));
	}
	return 0;
}

void owners_proc_gone(struct daemon *d, struct proc *p)
{
	struct jrec f = { .pid = p->pid, .start = p->start };

	owners_signal_clear(d, p, true);
	if (!p->waiting)
		return;
	/* Its own places only, each out of its line. */
	while (p->places) {
		struct waiter *w = p->places;
		struct queue *q = w->q;

		waiter_unlink(d, w);
		place_taken(d, p, -1, w->lease_ms);
		free(w);
		if (!q->head)
			queue_drop(d, q);
	}
	journal_rec(d, J_UNWAIT_PROC, "", 0, &f);
}

/* L counts for UID from now on (NO_UID: for none). */
static void lease_owner(struct daemon *d, struct lease *l, uid_t uid)
{
	if (l->uid == uid)
		return;
	if (l->uid != NO_UID)
		uid_adjust(&d->owners->uid_leases, l->uid, -1);
	if (uid != NO_UID)
		uid_adjust(&d->owners->uid_leases, uid, 1);
	l->uid = uid;
}

static void lease_drop(struct daemon *d, struct lease *l)
{
	struct jrec f = { .pid = l->pid, .start = l->start };

	/* Journal after the change: a rewrite the append may set off writes
	 * the state as it is now. */
	ht_del(&d->owners->leases, &l->h);
	heap_del(d->owners, l);
	lease_owner(d, l, NO_UID);
	journal_rec(d, J_UNLEASE, l->name, l->len, &f);
	free(l);
}

/* The lease of name NAME (PID 0), or of PID's membership of group NAME,
 * set for UID's process (NO_UID: not known yet), made if new. */
static struct lease *lease_put(struct daemon *d, const char *name, size_t len, int32_t pid,
			       uint64_t start, uid_t uid, uint32_t lease_ms, bool mark)
{
	struct lease *l = find_lease(d, name, len, pid, start);

	if (!l) {
		l = calloc(1, sizeof(*l) + len + 1);
		if (!l)
			return NULL;
		l->pid = pid;
		l->start = start;
		l->uid = NO_UID;
		l->len = (uint16_t)len;
		memcpy(l->name, name, len);
		l->h.hash = lease_hash(d->owners, name, len, pid, start);
		l->heap = NOT_DUE;
		if (heap_room(d->owners, d->owners->leases.n + 1) < 0 ||
		    ht_add(&d->owners->leases, &l->h) < 0) {
			free(l);
			return NULL;
		}
		d->owners->owed += removal_cost(len);
	}
	l->ttl_ns = (uint64_t)lease_ms * 1000000ull;
	l->deadline_ns = procreg__mono_ns() + l->ttl_ns;
	l->mark = mark;
	l->expired = false;
	heap_fix(d->owners, l);
	if (uid != NO_UID)
		lease_owner(d, l, uid);
	return l;
}

/* lease_set() when there is a lease to set or, maybe, to end. */
static __attribute__((noinline)) int lease_change(struct daemon *d, const char *name, size_t len,
						   int32_t pid, uint64_t start, uid_t uid,
						   uint32_t lease_ms, bool mark)
{
	struct lease *l;

	if (!lease_ms) {
		l = find_lease(d, name, len, pid, start);
		if (l)
			lease_drop(d, l);
		return 0;
	}
	l = lease_put(d, name, len, pid, start, uid, lease_ms, mark);
	if (!l)
		return -ENOMEM;
	if (d->owners->open) {
		uint8_t buf[sizeof(struct jrec) + PROCREG_NAME_MAX];

		journal(d, buf, jrec_lease(buf, l));
	}
	return 0;
}

static inline int lease_set(struct daemon *d, const char *name, size_t len, int32_t pid,
			    uint64_t start, uid_t uid, uint32_t lease_ms, bool mark)
{
	if (!lease_ms && !d->owners->leases.n)
		return 0; /* the common case: no lease here, none anywhere */
	return lease_change(d, name, len, pid, start, uid, lease_ms, mark);
}

int owners_lease_set(struct daemon *d, const char *name, size_t len, uid_t uid,
		     uint32_t lease_ms, bool mark)
{
	return lease_set(d, name, len, 0, 0, uid, lease_ms, mark);
}

int owners_member_lease_set(struct daemon *d, const struct pr_record *r, uint32_t lease_ms)
{
	return lease_set(d, r->data, r->name_len, (int32_t)r->pid, r->start_time, r->uid,
			 lease_ms, false);
}

/* owners_name_gone() when a lease or a line may be concerned. */
static __attribute__((noinline)) void name_gone(struct daemon *d, const char *name, size_t len)
{
	struct queue *q;

	owners_lease_set(d, name, len, NO_UID, 0, false);
	q = find_queue(d, name, len);
	while (q && q->head) {
		struct waiter *w = q->head;
		struct reg_request rq = {
			.kind = PR_KIND_NAME, .name = q->name, .name_len = q->len, .meta = w->meta,
			.meta_len = w->meta_len, .flags = w->flags, .lease_ms = w->lease_ms,
		};
		int err;

		waiter_unlink(d, w);
		/* Given back before registry_put() checks the quotas: the place
		 * becomes the name, and its lease, if it asked for one. */
		place_taken(d, w->p, -1, w->lease_ms);
		err = registry_put(d, w->p, &w->id, &rq, true);
		/* Journaled once the name is its: a daemon that dies in
		 * between finds it in line for a name it holds, and recovery
		 * drops that place (never one with neither). */
		journal_rec(d, J_UNWAIT, q->name, q->len,
			    &(struct jrec){ .pid = w->id.pid, .start = w->id.start });
		if (err)
			log_limited(&d->owners->handover_log, "hand-overs refused",
				    "name '%s': next in line, pid %d: %s", q->name, (int)w->p->pid,
				    strerror(-err));
		proc_release_if_empty(d, w->p);
		free(w);
		if (!err)
			break;
	}
	if (q && !q->head)
		queue_drop(d, q);
}

void owners_name_gone(struct daemon *d, const char *name, size_t len)
{
	/* The common case, on every removal: no lease to end, no line to
	 * pass the name on to (and no registers for name_gone to save). */
	if (d->owners->leases.n || d->owners->queues.n)
		name_gone(d, name, len);
}

static uint64_t find_name(struct daemon *d, const char *name, size_t len)
{
	struct pr_key k;
	uint64_t pos;

	pr_key_name(&k, PR_KIND_NAME, name, len, d->w.map.hdr->hash_seed);
	return procreg__w_find(&d->w, &d->w.map.hdr->names, &k, &pos);
}

/* The local membership of process PID (started at START) in group NAME: its
 * offset, 0 if none. */
static uint64_t find_member(struct daemon *d, const char *name, size_t len, int32_t pid,
			    uint64_t start)
{
	struct pr_root *root;
	struct pr_key k;
	uint64_t pos;

	if (procreg__w_group(&d->w, name, len, false, &root) < 0)
		return 0;
	pr_key_member(&k, (uint32_t)pid, start, 0, d->w.map.hdr->hash_seed);
	return procreg__w_find(&d->w, root, &k, &pos);
}

static uint64_t find_leased(struct daemon *d, const struct lease *l)
{
	return l->pid ? find_member(d, l->name, l->len, l->pid, l->start)
		      : find_name(d, l->name, l->len);
}

/* Renew the lease of name NAME for client C. */
static int refresh_name(struct daemon *d, const struct client *c, const struct pr_frame *f)
{
	struct lease *l = find_lease(d, f->name, f->name_len, 0, 0);
	uint64_t off = find_name(d, f->name, f->name_len);
	const struct pr_record *r;

	if (!off)
		return -ENOENT;
	r = rec(d, off);
	if (c->id.uid != 0 && c->id.uid != r->uid)
		return -EPERM;
	if (!l)
		return -EINVAL;
	l->deadline_ns = procreg__mono_ns() + l->ttl_ns;
	if (l->expired) {
		int err = registry_set_flags(d, off, r->flags & (uint8_t)~PROCREG_ENTRY_UNHEALTHY,
					     PROCREG_EV_REFRESHED);

		if (err)
			return err;
		l->expired = false;
	}
	heap_fix(d->owners, l);
	return 0;
}

/* A REFRESH of NAME renews the name's lease and, NAME taken as a group,
 * the lease of the caller's own membership of it: one word for both, as
 * a process renews what it holds by the name it holds it under. */
int owners_refresh(struct daemon *d, const struct client *c, const struct pr_frame *f)
{
	struct lease *ml = find_lease(d, f->name, f->name_len, c->id.pid, c->id.start);
	int err;

	if (ml) {
		ml->deadline_ns = procreg__mono_ns() + ml->ttl_ns;
		heap_fix(d->owners, ml);
	}
	err = refresh_name(d, c, f);
	/* With a membership renewed, a name that is not there, not the
	 * caller's or not leased is no failure. */
	if (ml && (err == -ENOENT || err == -EPERM || err == -EINVAL))
		err = 0;
	return err;
}

/* Lease L, found at OFF, is due (NOW): marked, or its entry let go. */
static void lease_due(struct daemon *d, struct lease *l, uint64_t off, uint64_t now)
{
	struct owners *o = d->owners;

	if (l->mark) {
		const struct pr_record *r = rec(d, off);

		if (registry_set_flags(d, off, r->flags | PROCREG_ENTRY_UNHEALTHY,
				       PROCREG_EV_EXPIRED) == 0) {
			/* Out of the heap until refreshed. */
			l->expired = true;
			heap_del(o, l);
		} else {
			l->deadline_ns = now + LEASE_RETRY_NS; /* tried again in a while */
			heap_fix(o, l);
		}
		return;
	}
	/* Off the heap first: what follows drops the lease, and the caller
	 * goes on whatever it does. */
	heap_del(o, l);
	if (l->pid) {
		LOGV(d, "group '%s': pid %d: lease expired, left", l->name, (int)l->pid);
		/* Leaving drops the lease. */
		registry_remove(d, off, NULL, PROCREG_EV_LEFT);
		return;
	}
	LOGV(d, "name '%s': lease expired, released", l->name);
	/* Releasing drops the lease (and may hand the name on). */
	registry_remove(d, off, NULL, PROCREG_EV_EXPIRED);
}

static void pass_on_missing(struct daemon *d, bool start);

uint64_t owners_tick(struct daemon *d)
{
	struct owners *o = d->owners;
	uint64_t now = procreg__mono_ns(), next;
	unsigned n = 0;

	/* Due leases off the top of the heap, one at a time: what is done
	 * for one may change it (a release drops the lease, a hand-over
	 * may add another). */
	while (o->ndue && o->due[0]->deadline_ns <= now && n++ < TICK_LEASES_MAX) {
		struct lease *l = o->due[0];
		uint64_t off = find_leased(d, l), h0 = d->w.map.hdr->feed_head;
		uid_t uid = l->uid;

		if (!off) {
			/* Gone some other way already. */
			lease_drop(d, l);
			continue;
		}
		lease_due(d, l, off, now);
		/* Its events are the leaseholder's, as a death's are the
		 * dead's (server.c): else leases made to lapse would give a
		 * uid twice its pace, paid for when made and free when due. */
		if (uid != NO_UID)
			server_feed_charge(d, uid, h0);
	}
	if (o->recheck_ns && o->recheck_ns <= now) {
		o->recheck_ns = 0;
		pass_on_missing(d, false);
	}
	next = owners_next_deadline(d);
	return next == UINT64_MAX ? UINT64_MAX : next > now ? next - now : 0;
}

uint64_t owners_next_deadline(const struct daemon *d)
{
	uint64_t due = d->owners->ndue ? d->owners->due[0]->deadline_ns : UINT64_MAX;

	return d->owners->recheck_ns && d->owners->recheck_ns < due ? d->owners->recheck_ns : due;
}

void owners_free_all(struct daemon *d)
{
	if (!d->owners)
		return;
	if (d->owners->open) {
		close(d->owners->fd);
		d->owners->open = false;
	}
	procreg__u64map_free(&d->owners->remote_dropped); /* a start that failed between */
	for (size_t i = 0; i < d->owners->queues.cap; i++) {
		while (d->owners->queues.b[i]) {
			struct queue *q = (struct queue *)d->owners->queues.b[i];

			d->owners->queues.b[i] = q->h.next;
			/* The procs' lists of places are not read again. */
			while (q->head) {
				struct waiter *w = q->head;

				q->head = w->next;
				free(w);
			}
			free(q);
		}
	}
	for (size_t i = 0; i < d->owners->leases.cap; i++) {
		while (d->owners->leases.b[i]) {
			struct hnode *e = d->owners->leases.b[i];

			d->owners->leases.b[i] = e->next;
			free(e);
		}
	}
	free(d->owners->queues.b);
	free(d->owners->leases.b);
	free(d->owners->waiters.b);
	procreg__u64map_free(&d->owners->uid_places);
	procreg__u64map_free(&d->owners->uid_leases);
	free(d->owners->due);
	free(d->owners);
	d->owners = NULL;
}

/* ---- the journal: rewriting and replaying ------------------------------ */

static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A file written through a buffer: a rewrite of tens of thousands of
 * records is a few dozen write(2)s, not one each. Without the buffer's
 * memory, each goes on its own. */
#define WBUF_SIZE (64 * 1024)

struct wbuf {
	int fd;
	uint8_t *b;               /* WBUF_SIZE bytes, or NULL */
	size_t len;
};

static int wbuf_flush(struct wbuf *w)
{
	int err = w->len ? write_all(w->fd, w->b, w->len) : 0;

	w->len = 0;
	return err;
}

static int wbuf_put(struct wbuf *w, const void *p, size_t n)
{
	int err;

	if (!w->b)
		return write_all(w->fd, p, n);
	if (w->len + n > WBUF_SIZE && (err = wbuf_flush(w)) < 0)
		return err;
	memcpy(w->b + w->len, p, n);
	w->len += n;
	return 0;
}

/* No journal: the daemon runs on, its queues and leases would not
 * survive a restart (logged, with WHY). */
static void journal_off(struct daemon *d, const char *why)
{
	char path[PR_PATH_MAX + 16];

	journal_path(d, path, sizeof(path), "");
	log_err("owners journal %s: %s", path, why);
	unlink(path);
	if (d->owners->open) {
		close(d->owners->fd);
		d->owners->open = false;
	}
}

/* The live state as a new journal, swapped in with rename(2): a crash at
 * any point leaves the old file or the new one, whole. On failure
 * (logged) the old one stays as it was: the caller decides whether it
 * still serves. */
static int journal_rewrite(struct daemon *d)
{
	char path[PR_PATH_MAX + 16], tmp[PR_PATH_MAX + 16];
	struct jhdr h = { .magic = JOURNAL_MAGIC };
	uint8_t buf[JREC_MAX];
	uint64_t bytes = sizeof(h);
	struct wbuf wb = { .fd = -1 };
	int fd, err;

	journal_path(d, path, sizeof(path), "");
	journal_path(d, tmp, sizeof(tmp), ".new");
	procreg__boot_id(h.boot_id);
	/* Our own new file, never one someone else left there (the
	 * directory may be shared): removed first, then created afresh. */
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		err = -errno;
		goto fail;
	}
	wb.fd = fd;
	wb.b = malloc(WBUF_SIZE);
	if ((err = wbuf_put(&wb, &h, sizeof(h))) < 0)
		goto fail;
	HT_EACH(&d->owners->leases, const struct lease, l) {
		size_t n = jrec_lease(buf, l);

		if ((err = wbuf_put(&wb, buf, n)) < 0)
			goto fail;
		bytes += n;
	}
	HT_EACH(&d->owners->queues, const struct queue, q) {
		for (const struct waiter *w = q->head; w; w = w->next) {
			size_t n = jrec_waiter(buf, q, w);

			if ((err = wbuf_put(&wb, buf, n)) < 0)
				goto fail;
			bytes += n;
		}
	}
	PROC_EACH_SIGNALLED(d, p) {
		size_t n = jrec_signal(buf, p);

		if ((err = wbuf_put(&wb, buf, n)) < 0)
			goto fail;
		bytes += n;
	}
	if ((err = wbuf_flush(&wb)) < 0)
		goto fail;
	free(wb.b);
	wb.b = NULL;
	if (rename(tmp, path) < 0) {
		err = -errno;
		goto fail;
	}
	if (d->owners->open)
		close(d->owners->fd);
	d->owners->fd = fd;
	d->owners->open = true;
	PROC_EACH_SIGNALLED(d, p)
		p->lost_journaled = true;
	d->owners->bytes = d->owners->base = bytes;
	d->owners->room = bytes;
	d->owners->owed = owed_now(d);
	/* The new file was written, so there was space: room for the
	 * removals, and some ahead, if there still is; else the next
	 * request that adds something asks again. */
	journal_allocate(d, bytes + d->owners->owed);
	return 0;
fail:
	free(wb.b);
	log_warn("owners journal %s: cannot rewrite it: %s", path, strerror(-err));
	if (fd >= 0) {
		close(fd);
		unlink(tmp);
	}
	return err;
}

/*
 * The places in line read back from the journal, their processes not yet
 * checked: in the journal's order, found by hash of name, pid and start
 * time (J_WAIT asked again, J_UNWAIT), and listed by process
 * (J_UNWAIT_PROC): each record costs the same, whatever the number of
 * others.
 */
struct jwait {
	struct hnode h;                /* in jwaits.byname */
	struct jwait *next, *prev;     /* in the journal's order */
	struct jwait *pnext, *pprev;   /* its process's */
	struct jproc *jp;
	struct jrec r;
	char name[PROCREG_NAME_MAX + 1];
	uint8_t meta[];
};

struct jproc {
	struct hnode h;                /* in jwaits.procs, by pid and start */
	int32_t pid;
	uint64_t start;
	struct jwait *waits;
	uint64_t ino;                  /* of its last J_SIGNAL */
	int sig;                       /* that record's signal */
};

struct jwaits {
	struct htab byname, procs;
	struct jwait *head, *tail;
};

static struct jwait *jwait_find(const struct daemon *d, const struct jwaits *js,
				const struct jrec *r, const char *name)
{
	uint64_t hash = lease_hash(d->owners, name, r->name_len, r->pid, r->start);

	for (struct hnode *e = ht_chain(&js->byname, hash); e; e = e->next) {
		struct jwait *w = (struct jwait *)e;

		if (e->hash == hash && w->r.pid == r->pid && w->r.start == r->start &&
		    same_name(w->name, w->r.name_len, name, r->name_len))
			return w;
	}
	return NULL;
}

static struct jproc *jproc_get(const struct daemon *d, struct jwaits *js, int32_t pid,
			       uint64_t start, bool make)
{
	uint64_t hash = lease_hash(d->owners, "", 0, pid, start);
	struct jproc *jp;

	for (struct hnode *e = ht_chain(&js->procs, hash); e; e = e->next) {
		jp = (struct jproc *)e;
		if (e->hash == hash && jp->pid == pid && jp->start == start)
			return jp;
	}
	if (!make || !(jp = calloc(1, sizeof(*jp))))
		return NULL;
	jp->pid = pid;
	jp->start = start;
	jp->h.hash = hash;
	if (ht_add(&js->procs, &jp->h) < 0) {
		free(jp);
		return NULL;
	}
	return jp;
}

/* W out of every list, and freed. */
static void jwait_drop(struct jwaits *js, struct jwait *w)
{
	*(w->prev ? &w->prev->next : &js->head) = w->next;
	*(w->next ? &w->next->prev : &js->tail) = w->prev;
	*(w->pprev ? &w->pprev->pnext : &w->jp->waits) = w->pnext;
	if (w->pnext)
		w->pnext->pprev = w->pprev;
	ht_del(&js->byname, &w->h);
	free(w);
}

static void jwaits_free(struct jwaits *js)
{
	while (js->head)
		jwait_drop(js, js->head);
	for (size_t i = 0; i < js->procs.cap; i++) {
		while (js->procs.b[i]) {
			struct hnode *e = js->procs.b[i];

			js->procs.b[i] = e->next;
			free(e);
		}
	}
	free(js->byname.b);
	free(js->procs.b);
	memset(js, 0, sizeof(*js));
}

static int replay_wait(const struct daemon *d, struct jwaits *js, const struct jrec *r,
		       const char *name, const uint8_t *meta)
{
	struct jwait *old, *w;
	struct jproc *jp;

	if (r->type == J_UNWAIT_PROC) {
		/* All of a process's places. */
		jp = jproc_get(d, js, r->pid, r->start, false);
		while (jp && jp->waits)
			jwait_drop(js, jp->waits);
		return 0;
	}
	old = jwait_find(d, js, r, name);
	if (r->type == J_UNWAIT) {
		if (old)
			jwait_drop(js, old);
		return 0;
	}
	w = calloc(1, sizeof(*w) + r->meta_len);
	if (!w)
		return -ENOMEM;
	w->r = *r;
	memcpy(w->name, name, r->name_len);
	memcpy(w->meta, meta, r->meta_len);
	if (old) {
		/* Asking again kept the place, with the newer metadata. */
		w->jp = old->jp;
		w->prev = old->prev;
		w->next = old->next;
		w->pprev = old->pprev;
		w->pnext = old->pnext;
		*(w->prev ? &w->prev->next : &js->head) = w;
		*(w->next ? &w->next->prev : &js->tail) = w;
		*(w->pprev ? &w->pprev->pnext : &w->jp->waits) = w;
		if (w->pnext)
			w->pnext->pprev = w;
		ht_replace(&js->byname, &old->h, &w->h);
		free(old);
		return 0;
	}
	jp = jproc_get(d, js, r->pid, r->start, true);
	w->h.hash = lease_hash(d->owners, name, r->name_len, r->pid, r->start);
	if (!jp || ht_add(&js->byname, &w->h) < 0) {
		free(w);
		return -ENOMEM;
	}
	w->jp = jp;
	w->prev = js->tail;
	*(js->tail ? &js->tail->next : &js->head) = w;
	js->tail = w;
	w->pnext = jp->waits;
	if (w->pnext)
		w->pnext->pprev = w;
	jp->waits = w;
	return 0;
}

/* Replay the journal into d->owners->leases and *WAITS. Returns the length of its
 * sound part (header and whole records), or 0 if it was not used. */
static size_t replay(struct daemon *d, struct jwaits *waits)
{
	char path[PR_PATH_MAX + 16];
	uint8_t boot[16], *buf = NULL;
	struct jhdr h;
	struct stat st;
	size_t off = 0;
	int fd;

	journal_path(d, path, sizeof(path), "");
	/* Only a journal of ours, and only a regular file (a FIFO would
	 * block the start): in a shared directory anyone could leave a file
	 * (or a symbolic link) by that name, to forge leases and places in
	 * line. Such a file is not read; the rewrite that follows replaces
	 * it. */
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno != ENOENT)
			log_warn("owners journal %s: %s: queues and leases start empty", path,
				 errno == ELOOP ? "a symbolic link, not ours" : strerror(errno));
		return 0;
	}
	{
		const char *why = NULL;

		if (procreg__owned_file_check(fd, &why) < 0) {
			log_warn("owners journal %s: %s: not read, queues and leases start empty",
				 path, why);
			close(fd);
			return 0;
		}
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size < sizeof(h) ||
	    !(buf = malloc((size_t)st.st_size)) ||
	    pread(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
		log_warn("owners journal %s: not a journal, or unreadable: queues and leases start empty",
			 path);
		goto out;
	}
	memcpy(&h, buf, sizeof(h));
	procreg__boot_id(boot);
	if (h.magic != JOURNAL_MAGIC || memcmp(h.boot_id, boot, sizeof(boot))) {
		/* Of another boot: its processes are gone, as expected. */
		log_at(h.magic != JOURNAL_MAGIC ? LOG_WARNING : LOG_INFO, "owners journal %s: %s: not used",
		       path, h.magic != JOURNAL_MAGIC ? "not a journal" : "of another boot");
		off = 0;
		goto out;
	}
	for (off = sizeof(h); off < (size_t)st.st_size;) {
		size_t left = (size_t)st.st_size - off;
		const char *name;
		struct jrec r;

		if (left < sizeof(r))
			break;
		memcpy(&r, buf + off, sizeof(r));
		if (r.len > left || r.name_len > PROCREG_NAME_MAX || r.meta_len > PROCREG_META_MAX ||
		    r.len != sizeof(r) + r.name_len + r.meta_len ||
		    fnv1a(buf + off + 8, r.len - 8) != r.sum)
			break;
		name = (const char *)buf + off + sizeof(r);
		switch (r.type) {
		case J_LEASE:
			if (r.name_len)
				lease_put(d, name, r.name_len, r.pid, r.start, NO_UID, r.lease_ms,
					  r.mark);
			break;
		case J_UNLEASE: {
			struct lease *l = find_lease(d, name, r.name_len, r.pid, r.start);

			if (l)
				lease_drop(d, l);
			break;
		}
		case J_WAIT:
		case J_UNWAIT:
		case J_UNWAIT_PROC:
			if (replay_wait(d, waits, &r, name, (const uint8_t *)name + r.name_len) < 0)
				goto out;
			break;
		case J_SIGNAL: {
			struct jproc *jp = jproc_get(d, waits, r.pid, r.start, true);

			if (!jp)
				goto out;
			if (r.mark >= NSIG)
				goto cut;
			jp->sig = r.mark;
			jp->ino = r.ino;
			break;
		}
		default:
			goto cut;
		}
		off += r.len;
	}
	if (off == (size_t)st.st_size)
		goto out;
cut:
	/* The one write a crash interrupted: it was never answered. */
	log_notice("owners journal %s: cut short at byte %zu of %lld: the rest ignored", path, off,
		   (long long)st.st_size);
out:
	free(buf);
	close(fd);
	return off;
}

/* At start, when the journal cannot be rewritten: append to the one just
 * replayed, cut to its sound part of LEN bytes. Replayed again, it gives
 * back what recovery kept, and what recovery dropped it drops again (the
 * owner or the name is still gone). Shortening a file needs no space. */
static int journal_reuse(struct daemon *d, size_t len)
{
	char path[PR_PATH_MAX + 16];
	int fd;

	journal_path(d, path, sizeof(path), "");
	fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0 || lseek(fd, (off_t)len, SEEK_SET) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	d->owners->fd = fd;
	d->owners->open = true;
	d->owners->bytes = d->owners->base = d->owners->room = len;
	d->owners->owed = owed_now(d);
	/* The room the last daemon allocated past the end is still there
	 * (a sound journal was not shortened): it held what removing
	 * everything would take, and more than we kept. */
	journal_allocate(d, len + d->owners->owed);
	log_notice("owners journal %s: kept as it was, and appended to", path);
	return 0;
}

/* Whether the process W waited as holds the name it waited for. */
static bool holds(struct daemon *d, const struct jwait *w)
{
	uint64_t off = find_name(d, w->name, w->r.name_len);
	const struct pr_record *r = off ? rec(d, off) : NULL;

	return r && r->node == 0 && r->pid == (uint32_t)w->r.pid && r->start_time == w->r.start;
}

/* A lease holds while its name (or membership) is here, ours, and still
 * leased: its record, or NULL. */
static const struct pr_record *lease_holds(struct daemon *d, struct lease *l)
{
	uint64_t off = find_leased(d, l);
	const struct pr_record *r = off ? rec(d, off) : NULL;

	return r && r->node == 0 && (r->flags & PROCREG_ENTRY_LEASED) ? r : NULL;
}

/* The first lease that does not hold, or NULL. */
static struct lease *unheld_lease(struct daemon *d)
{
	HT_EACH(&d->owners->leases, struct lease, l)
		if (!lease_holds(d, l))
			return l;
	return NULL;
}

/* The lines of names not in the table passed on (owners_name_gone changes
 * the list: names first); at START, those of names another node held
 * only once their grace is over. */
static void pass_on_missing(struct daemon *d, bool start)
{
	char (*names)[PROCREG_NAME_MAX + 1] = NULL;
	size_t n = 0, nqueues = d->owners->queues.n;
	uint64_t v;

	if (nqueues)
		names = calloc(nqueues, sizeof(*names));
	if (!names)
		return; /* no memory: passed on when they are next touched */
	HT_EACH(&d->owners->queues, const struct queue, q) {
		if (find_name(d, q->name, q->len))
			continue;
		if (start && procreg__u64map_get(&d->owners->remote_dropped,
						 remote_key(d->owners, q->name, q->len), &v) == 0) {
			d->owners->recheck_ns = procreg__mono_ns() + REMOTE_GRACE_NS(d);
			continue;
		}
		memcpy(names[n], q->name, q->len);
		names[n++][q->len] = 0;
	}
	for (size_t i = 0; i < n; i++)
		owners_name_gone(d, names[i], strlen(names[i]));
	free(names);
}

int owners_recover(struct daemon *d, bool attached)
{
	struct jwaits waits = { 0 };
	uint64_t leases = 0, places = 0, dropped = 0, signals = 0;
	size_t sound = 0, ngone = 0;
	struct lease **gone;

	if (attached)
		sound = replay(d, &waits);
	gone = d->owners->leases.n ? calloc(d->owners->leases.n, sizeof(*gone)) : NULL;
	HT_EACH(&d->owners->leases, struct lease, l) {
		const struct pr_record *r = lease_holds(d, l);

		if (!r) {
			if (gone)
				gone[ngone++] = l;
			continue;
		}
		/* Whose it is, now that its record says. */
		lease_owner(d, l, r->uid);
		l->expired = l->mark && (r->flags & PROCREG_ENTRY_UNHEALTHY);
		if (l->expired)
			heap_del(d->owners, l);
	}
	/* Dropped after the walk: a table that shrinks moves its entries. */
	for (size_t i = 0; i < ngone; i++)
		lease_drop(d, gone[i]);
	/* No memory for the list: one at a time, a walk for each, rather
	 * than keep a lease on a name that is not ours to release. */
	for (struct lease *l; !gone && (l = unheld_lease(d)); ngone++)
		lease_drop(d, l);
	free(gone);
	dropped += ngone;
	leases = d->owners->leases.n;
	/* Processes still alive get their places back, in the same order. */
	while (waits.head) {
		struct jwait *w = waits.head;
		struct proc *p;

		if (holds(d, w)) {
			dropped++; /* handed the name as the last daemon died */
		} else if (proc_verify(d, w->r.pid, w->r.start, w->r.ino, &p) == 0) {
			struct ident id = { .pid = p->pid, .uid = p->uid, .start = p->start,
					    .ino = p->ino, .pidfd = -1 };
			struct reg_request rq = {
				.kind = PR_KIND_NAME, .name = w->name, .name_len = w->r.name_len,
				.meta = w->meta, .meta_len = w->r.meta_len, .flags = w->r.flags,
				.lease_ms = w->r.lease_ms,
			};

			if (owners_enqueue(d, p, &id, &rq) == 0) {
				places++;
			} else {
				proc_release_if_empty(d, p);
				dropped++;
			}
		} else {
			/* Its process is gone: so are all its places. */
			struct jproc *jp = w->jp;

			while (jp->waits) {
				jwait_drop(&waits, jp->waits);
				dropped++;
			}
			continue;
		}
		jwait_drop(&waits, w);
	}
	/* Signals back to the processes that hold names or places again. */
	for (size_t i = 0; i < waits.procs.cap; i++) {
		for (struct hnode *e = waits.procs.b[i]; e; e = e->next) {
			const struct jproc *jp = (const struct jproc *)e;
			struct proc *p = jp->sig ? proc_get(d, jp->pid) : NULL;

			if (p && !p->dying && !p->gone && !p->idle && p->start == jp->start &&
			    (!jp->ino || !p->ino || jp->ino == p->ino)) {
				p->lost_signal = jp->sig;
				p->lost_journaled = true;
				signals++;
			}
		}
	}
	jwaits_free(&waits);
	/* A name whose owner died while no daemon watched goes to the next in
	 * line now; one another node held, later (REMOTE_GRACE_NS). */
	pass_on_missing(d, true);
	procreg__u64map_free(&d->owners->remote_dropped);
	if (leases || places || dropped || signals)
		log_msg("owners journal: %llu leases and %llu places in line kept, %llu dropped (owner or name gone); %llu processes' signals on a name lost kept",
			(unsigned long long)leases, (unsigned long long)places,
			(unsigned long long)dropped, (unsigned long long)signals);
	/* A damaged or foreign journal is replaced by a whole one; one that
	 * cannot be (a full filesystem) is kept if it was sound so far. The
	 * daemon starts either way. */
	if (journal_rewrite(d) < 0 && (!sound || journal_reuse(d, sound) < 0))
		journal_off(d, "none: queues and leases will not survive a restart");
	return 0;
}
