/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bridge.c - replication: other nodes' names and memberships in this
 * node's table, and this node's changes out to them.
 *
 * Each node is the authority for the entries of the processes that run on
 * it. Remote entries sit in the same table as local ones, with the record's
 * node set to a 16-bit id this file hands out (a private map, node name ->
 * id, never reused while the daemon runs), so lookups read them as they
 * read local ones. Only this file decides what they are (registry.c writes
 * them); clients cannot remove them.
 *
 * Out: every local change (registry.c: registrations, removals, deaths,
 * lease marks) is a CHANGE frame with this node's name, incarnation and
 * the next sequence number, broadcast by the backend. A node that comes up gets a snapshot
 * first (SNAP frames, as of a sequence number), then the changes after it.
 *
 * In: a node's snapshot, its parts in order, then its changes in order,
 * whatever order the transport delivers them in: what comes early is held
 * until its turn, within a bound ("in: sequencing"). A change already
 * applied (its sequence number is behind) is ignored; a repeated or stray
 * snapshot part, a frame from another incarnation (a restarted node on a
 * stale connection), something missing for too long (lost on the way)
 * or too much held is refused. A refusal drops the connection: the next
 * one starts with a fresh snapshot. A node that goes down takes every
 * entry it owned with it, in one pass, with a NODE_DOWN event for each in
 * the change feed: not at
 * once, but after a grace (LINGER_NS) in which the same incarnation may
 * come back (nodes whose grace ends in the same tick share the one pass).
 * If it does, its snapshot replaces its entries by difference:
 * what it still has stays in place (no event when unchanged), what it
 * lost in between goes when the snapshot is complete. Its lookups never
 * blink for a dropped connection. If it comes back as another
 * incarnation (restarted), its old entries go, with NODE_DOWN events.
 * Those two removals are made at the next tick, in one pass for all the
 * nodes since the last ("removals decided, made at the next tick"); what
 * meets such an entry before takes it out first.
 *
 * Conflicts: a name owned on two nodes is kept by the earlier registration,
 * ties broken by the smaller node name; every node applies the same rule
 * to the same two entries, so they agree. A node whose local registration
 * loses removes it, tells the others (DEL) and emits a CONFLICT event.
 * Another node's claim that loses here is kept aside (a shadow) until its
 * node withdraws it or goes down: in a partial split its node may never
 * see the winner and keeps its claim, so when the winner goes first, the
 * shadow takes the name, as it does on that node.
 * With --node, registered_ns is a hybrid logical clock stamp (hlc.h): a
 * registration made after its node learned of another is stamped after
 * it, whatever the clocks say.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "bridge_proto.h"
#include "procreg/backend.h"
#include "hlc.h"
#include "procreg/resolver.h"
#include "daemon.h"
#include "probes.h"
#include "nodes_file.h"

/* Node ids (a record's 16-bit node field): this many nodes known at
 * once, up, lingering or gone. A gone node's id (its grace over, its
 * entries removed) is given to a new node once the table and the shadows
 * are seen not to refer to it (node_new()). PROCREG_TEST_NODES_MAX
 * lowers it for tests. */
#define NODES_MAX 4096
#define HLC_MAX_AHEAD_NS (60 * 1000000000ull) /* a peer's stamp further ahead is not taken */
/* A node whose connection went keeps its entries this long: a reconnect
 * (a reset connection, a refused frame, a brief cut) costs no blink,
 * while a node that is gone is gone within about a second more than it
 * takes to notice. PROCREG_TEST_LINGER_MS overrides it for tests. */
#define LINGER_NS (1000 * 1000000ull)
/* Sequencing (see "in: sequencing"): what a transport delivers early is
 * held, for every node together, up to HOLD_MAX_BYTES; a frame that would
 * pass it is refused (the node resyncs, its held frames freed). What is
 * missing may be this late, while nothing moves, before the node is
 * refused: long enough for NATS to bring a snapshot that its stream
 * overtook, short enough that a frame a transport lost costs a couple
 * of seconds. PROCREG_TEST_LATE_MS overrides it for tests. */
#define HOLD_MAX_BYTES (64u << 20)
/* How far from the newest held frame one that comes early may go: what a
 * transport reorders is a frame or two; a node that sends frames further
 * out of order than this is refused, so that holding one costs the
 * daemon's thread a few steps, not a walk of everything held. */
#define HOLD_WALK_MAX 64
/* Refusals said in a row before one a second: a snapshot's parts lost on
 * a bad link make a few, each worth reading; a node that provokes them at
 * will (over NATS, 1,400-2,400 a second were seen, three lines each with
 * the backend's down and up) writes a line a second. */
#define REFUSE_LOG_BURST 9
#define LATE_NS (2000 * 1000000ull)

/* A removal decided for a node, made by the walk of the next tick
 * (sweep_begin()): its records last put or confirmed in a session before
 * SESSION go, with EV (0: UNREGISTERED or LEFT, a resync's end;
 * PROCREG_EV_NODE_DOWN, a restart, or the node gone). */
struct removal {
	uint64_t session;
	uint32_t ev;
	bool gone;                  /* the node's grace ran out while it was down */
};

/* Removals pending for one node: one that comes back several times
 * between two ticks, now as another incarnation, now as the same one with
 * a whole snapshot, adds one each time the kind changes (two alike in a
 * row make one). One more has what is pending made at once, for every
 * node: a node needs that many comebacks between two ticks, half of them
 * with this node's whole snapshot written to it first, to cost a walk. */
#define REMOVALS_MAX 4

/* A frame that came early, held until its turn (sequencing, below). */
struct held {
	struct held *next, *prev;
	uint64_t key;               /* a snapshot part's number, a change's seq */
	size_t len;
	uint8_t frame[];
};

/* Held frames in KEY order; most come in order, so most go at the tail. */
struct hold_list {
	struct held *head, *tail;
	size_t bytes;               /* held, headers included */
};

struct node {
	char name[PR_BP_NODE_MAX + 1];
	char addr[PR_BP_ADDR_MAX + 1];
	bool up;
	bool synced;                /* its snapshot is complete */
	bool hold_dropped;          /* what it held was dropped for another's: resync it */
	uint32_t snap_part;         /* the snapshot part expected next */
	uint64_t snap_seq;          /* what the snapshot is as of (from its part 0) */
	uint64_t incarnation;
	uint64_t next_seq;          /* the change expected next */
	struct hold_list parts;     /* snapshot parts after snap_part */
	struct hold_list changes;   /* changes after next_seq, or before the snapshot is whole */
	bool named;                 /* its first frame since node_up came: the nodes file named it */
	bool hb_seen;               /* a heartbeat came since node_up */
	uint64_t hb_seq;            /* the newest one's seq: the changes it counts */
	uint64_t late_since_ns;     /* something is missing since (CLOCK_MONOTONIC; 0: nothing) */
	uint64_t up_since_ns;
	uint64_t changes_in;
	/* Down, entries kept until linger_until_ns (CLOCK_MONOTONIC; 0: not
	 * lingering). A reconnect that does not finish its snapshot does not
	 * move the deadline: a flapping link cannot keep entries forever. */
	uint64_t linger_until_ns;
	uint64_t session;           /* its node_up count: each connection a session */
	/* Up again, same incarnation, its snapshot not whole yet. */
	bool resync;
	/* While it resyncs or has removals pending: each record it put or
	 * confirmed meanwhile, and the session it did so last in (a record
	 * not in it was not touched since). Its snapshot confirmed what it
	 * touched in this session. */
	struct pr_u64map touched;
	/* Removals decided, not made yet (sweep()), in session order, and
	 * the entries they took so far: a resync's end's, a restart's. */
	struct removal removals[REMOVALS_MAX];
	size_t nremovals;
	size_t sweep_n;             /* of them, the first the walk under way makes */
	uint64_t swept[2];
	uint64_t replaced_inc;      /* the incarnation its last restart replaced */
	/* Gone (down, its grace over, its entries removed): the order it
	 * went in (br->gone_seq), 0 while up or lingering. */
	uint64_t gone_order;
};

/* Claims set aside, for all nodes: what a node may make this one keep by
 * claiming names the table holds (a snapshot may claim them all). A
 * name's claims share a chain of the hash, which every frame about the
 * name walks: so many a name at most. A node with the cookie that came up
 * under 1,000 names, each claiming one name here, made each frame about it
 * cost 23-34 times as much; legitimately, a name is claimed by a few nodes
 * at once, not dozens. And buckets for 64 MiB of claims of short names
 * (some 500,000) to sit a few a chain: 4,096 made chains of 120. */
#define SHADOW_MAX_BYTES (64u << 20)
#define SHADOW_PER_NAME 16
#define SHADOW_BUCKET_BITS 16
#define SHADOW_BUCKETS (1u << SHADOW_BUCKET_BITS)

/* A name whose shadows are marked (shadow_mark). */
struct marked {
	struct marked *next;
	size_t len;
	char name[];
};

/* Another node's claim to a name, beaten here by the table's entry. */
struct shadow {
	struct shadow *next;
	uint16_t id;                /* its node */
	bool recheck;               /* the name's entry went: try it again */
	struct pr_bp_entry e;       /* name and meta point into data */
	char data[];
};

struct bridge {
	struct daemon *d;
	const struct pr_bridge_backend *be;
	void *dl;                   /* a backend's shared object, or NULL */
	void *resolver_dl;
	pr_resolver_fn resolver;    /* --resolver, or NULL */
	void *b;
	struct ev ev;
	char node[PR_BP_NODE_MAX + 1];
	uint64_t incarnation;
	uint64_t seq;               /* this node's newest change */
	struct pr_hlc hlc;          /* registration stamps (hlc.h) */
	int64_t skew_ns;            /* PROCREG_TEST_CLOCK_SKEW_NS: a node whose clock is off */
	struct node *nodes;         /* id = index + 1 */
	size_t nnodes;
	size_t nodes_max;           /* NODES_MAX */
	/* Name -> id. Every frame in is looked up by its node's name: by a
	 * scan of the nodes, a peer that made thousands known (each one a
	 * handshake) had every frame of its own cost a comparison with each:
	 * local requests waited seconds behind a flood of its heartbeats. */
	struct pr_str_index node_index;
	/* Ids of gone nodes that nothing referred to when last looked
	 * (node_new()), the oldest gone last. */
	uint16_t free_ids[NODES_MAX];
	size_t nfree;
	uint64_t gone_seq;          /* nodes gone so far */
	bool sweep_due;             /* some node has removals no walk has begun to make */
	bool sweeping;              /* a walk is under way (sweep_part()) */
	struct registry_removal rm; /* that walk */
	uint64_t ids_checked_at;    /* gone_seq when the free ids were last looked for */
	struct pr_ratelimit full_log;   /* nodes refused: no id free */
	struct pr_ratelimit hold_log;   /* held frames dropped for another node's */
	/* Refusals (refuse()): a node with the cookie, or a link that loses
	 * frames, decides how many; a few in a row are each said. */
	struct pr_ratelimit refuse_log;
	uint64_t linger_ns;
	/* Claims that lost a conflict, hashed by name (SHADOW_BUCKETS
	 * chains, allocated with the first): a node may send as many as
	 * the table has names, and each is found by its name. */
	struct shadow **shadows;
	size_t nshadows;
	size_t shadow_bytes;        /* theirs, with names and metadata: SHADOW_MAX_BYTES */
	/* Names whose entry went, with shadows marked for another try at
	 * the end of the batch. */
	struct marked *marked;
	/* A node decides how many conflicts it starts (a snapshot may claim
	 * every name here): a line a second for each outcome, and a count. */
	struct pr_ratelimit kept_log, lost_log, shadow_log;
	/* A node decides how many entries it sends into a full table too. */
	struct pr_ratelimit full_entry_log;
	uint8_t *buf;               /* one frame */
	/* The bridge's next piece of work (a dispatch of what came in, a
	 * snapshot's part, a part of the removals' walk) not before
	 * (CLOCK_MONOTONIC): after one that took T, none for T, so that
	 * together they take half the daemon's time at most. */
	uint64_t bg_next_ns;
	/* The dispatch under way takes what came in until then (INPUT_SLICE_NS,
	 * up_input_over()). */
	uint64_t in_until_ns;
	bool paused;                /* its fd out of the poll until its turn (bridge_event()) */
	bool walked;                /* the last turn was the removals' walk's */
	/* The removals' walk at a tick, this long after the last at least:
	 * every tick, but PROCREG_TEST_SWEEP_MS for tests. */
	uint64_t sweep_gap_ns, swept_ns;
	uint8_t *hold_buf;          /* one frame, re-encoded to be held */
	size_t held_bytes;          /* every node's held frames: HOLD_MAX_BYTES at most */
	uint64_t late_ns;           /* LATE_NS */
	char nodes_path[PR_PATH_MAX + 16];
	bool nodes_dirty;
	/* counters */
	uint64_t hlc_ahead;         /* stamps too far ahead, not observed */
	uint64_t changes_out, changes_in, conflicts, nodes_down, refused;
};

/* Probes (README.md, "Tracing"; procreg-trace bridge). */
PR_PROBE_DEFINE(procregd, bridge_out);
PR_PROBE_DEFINE(procregd, bridge_in);
PR_PROBE_DEFINE(procregd, bridge_apply);
PR_PROBE_DEFINE(procregd, bridge_node);
PR_PROBE_DEFINE(procregd, bridge_conflict);

static struct node *node_by_name(struct bridge *br, const char *name, uint16_t *id)
{
	uint64_t v;

	if (procreg__sidx_get(&br->node_index, name, strlen(name), &v) == 0 && v >= 1 &&
	    v <= br->nnodes && !strcmp(br->nodes[v - 1].name, name)) {
		*id = (uint16_t)v;
		return &br->nodes[v - 1];
	}
	if (!br->node_index.partial)
		return NULL;
	for (size_t i = 0; i < br->nnodes; i++)
		if (!strcmp(br->nodes[i].name, name)) {
			*id = (uint16_t)(i + 1);
			return &br->nodes[i];
		}
	return NULL;
}

static const char *node_name(const struct bridge *br, uint16_t id)
{
	if (id == 0)
		return br->node;
	return id <= br->nnodes ? br->nodes[id - 1].name : "";
}

/* Node ID put or confirmed the record at OFF (its snapshot's, or a
 * change's): noted while it resyncs or has removals pending, so that they
 * leave the record alone. 0, or -ENOMEM while removals are pending: the
 * record could not be told from a stale one, and the frame is refused
 * (the node resyncs and sends it again). */
static int touch(struct bridge *br, uint16_t id, uint64_t off)
{
	struct node *n = id && id <= br->nnodes ? &br->nodes[id - 1] : NULL;

	if (!n || (!n->resync && !n->nremovals) ||
	    procreg__u64map_put(&n->touched, off, n->session) == 0)
		return 0;
	if (n->nremovals)
		return -ENOMEM;
	n->resync = false; /* out of memory: keep everything until it goes */
	return 0;
}

/* Whether node N put or confirmed the record at OFF in this session. */
static bool this_session(const struct node *n, uint64_t off)
{
	uint64_t v;

	return procreg__u64map_get(&n->touched, off, &v) == 0 && v == n->session;
}

/* Whether node ID is resyncing and its snapshot has not confirmed the
 * record at OFF (yet): a claim it may have dropped while cut off, not one
 * to keep aside; if it still holds it, its snapshot will say so. */
static bool unconfirmed(const struct bridge *br, uint16_t id, uint64_t off)
{
	const struct node *n = id && id <= br->nnodes ? &br->nodes[id - 1] : NULL;

	return n && n->resync && !this_session(n, off);
}

/* Whether a removal pending for node N (sweep()) takes the record at OFF:
 * the first decided in a session after the one the node last touched the
 * record in (one it did not touch since removals were pending predates
 * them all). Its event in *EV. */
static bool swept(const struct node *n, uint64_t off, uint32_t *ev)
{
	uint64_t v = 0;
	size_t i;

	if (!n->nremovals)
		return false;
	(void)procreg__u64map_get(&n->touched, off, &v);
	for (i = 0; i < n->nremovals && n->removals[i].session <= v; i++)
		;
	if (i == n->nremovals)
		return false;
	*ev = n->removals[i].ev;
	return true;
}

/* The record at OFF, if a removal pending for its node takes it: out now,
 * with the event that removal gives it. What a frame finds before the
 * removals are made (later in the same dispatch) is what it would find
 * after them: a restarted node's old entry is not taken for its new one
 * (not kept as unchanged, not UPDATED), nor is one a finished resync did
 * not confirm; another node's claim meets no entry that is going. */
static bool take_swept(struct bridge *br, uint64_t off)
{
	const struct pr_record *r = rec(br->d, off);
	struct node *n;
	uint32_t ev;

	if (!r->node || r->node > br->nnodes)
		return false;
	n = &br->nodes[r->node - 1];
	if (!swept(n, off, &ev))
		return false;
	n->swept[ev == PROCREG_EV_NODE_DOWN]++;
	registry_apply_remove(br->d, off, ev);
	return true;
}

/* Whether record R already says what E says (its owner and content). */
static bool same_entry(const struct pr_record *r, const struct pr_bp_entry *e)
{
	return r->pid == e->pid && r->start_time == e->start_time &&
	       r->registered_ns == e->registered_ns && r->uid == e->uid &&
	       (r->flags & PR_REC_FLAGS) == e->flags && r->meta_len == e->meta_len &&
	       !memcmp(r->data + r->name_len + 1, e->meta, e->meta_len);
}

/* A set of node ids: those the shadows refer to (find_free_ids()), those
 * whose entries go in one walk (nodes_gone()). */
struct ids_used {
	uint8_t bits[NODES_MAX / 8 + 1];
};

static void id_mark(struct ids_used *u, uint16_t id)
{
	if (id <= NODES_MAX)
		u->bits[id / 8] |= (uint8_t)(1u << (id % 8));
}

static bool id_marked(const struct ids_used *u, uint16_t id)
{
	return id <= NODES_MAX && (u->bits[id / 8] & (1u << (id % 8)));
}

/* ---- shadows: claims that lost, kept while their node holds them ---- */

static bool same_name(const struct pr_bp_entry *e, const char *name, size_t len)
{
	return e->name_len == len && !memcmp(e->name, name, len);
}

/* NAME's chain. Keyed by the table's seed, as the table's own index is:
 * names come from other nodes, and a node could otherwise send claims
 * chosen to share one chain, each then walking all the others. */
static struct shadow **bucket(struct bridge *br, const char *name, size_t len)
{
	uint64_t h = pr_hash(name, len, br->d->w.map.hdr->hash_seed);

	return &br->shadows[h >> (64 - SHADOW_BUCKET_BITS)];
}

static size_t shadow_size(const struct pr_bp_entry *e)
{
	return sizeof(struct shadow) + e->name_len + e->meta_len;
}

/* S is out of its chain (and about to be freed or applied). */
static void shadow_unlinked(struct bridge *br, const struct shadow *s)
{
	br->nshadows--;
	br->shadow_bytes -= shadow_size(&s->e);
}

/* Forget node ID's claim to NAME (any, if PID is 0; else only that
 * owner's). */
static void shadow_drop(struct bridge *br, uint16_t id, const char *name, size_t len,
			uint32_t pid, uint64_t start_time)
{
	if (!br->nshadows)
		return;
	for (struct shadow **sp = bucket(br, name, len); *sp;) {
		struct shadow *s = *sp;

		if (s->id == id && same_name(&s->e, name, len) &&
		    (!pid || (s->e.pid == pid && s->e.start_time == start_time))) {
			*sp = s->next;
			shadow_unlinked(br, s);
			free(s);
		} else {
			sp = &s->next;
		}
	}
}

static void shadow_put(struct bridge *br, uint16_t id, const struct pr_bp_entry *e)
{
	struct shadow *s, **b;
	int same = 0;

	shadow_drop(br, id, e->name, e->name_len, 0, 0);
	if (br->nshadows)
		for (s = *bucket(br, e->name, e->name_len); s; s = s->next)
			same += same_name(&s->e, e->name, e->name_len);
	/* Past a bound, or out of memory, the claim is lost here until its
	 * node resyncs: if the name's entry goes, the name stays free (or
	 * goes to one of the claims kept). */
	if (br->shadow_bytes + shadow_size(e) > SHADOW_MAX_BYTES || same >= SHADOW_PER_NAME) {
		if (same >= SHADOW_PER_NAME)
			log_limited(&br->shadow_log, "claims not kept",
				    "bridge: node %s: claim to '%.*s' not kept: %d claims to it "
				    "set aside already", node_name(br, id), (int)e->name_len,
				    e->name, SHADOW_PER_NAME);
		else
			log_limited(&br->shadow_log, "claims not kept",
				    "bridge: node %s: claim to '%.*s' not kept: the claims set "
				    "aside take %u MiB", node_name(br, id), (int)e->name_len,
				    e->name, SHADOW_MAX_BYTES >> 20);
		return;
	}
	if (!br->shadows && !(br->shadows = calloc(SHADOW_BUCKETS, sizeof(*br->shadows))))
		return;
	if (!(s = malloc(shadow_size(e))))
		return;
	s->id = id;
	s->recheck = false;
	s->e = *e;
	memcpy(s->data, e->name, e->name_len);
	memcpy(s->data + e->name_len, e->meta, e->meta_len);
	s->e.name = s->data;
	s->e.meta = s->data + e->name_len;
	b = bucket(br, e->name, e->name_len);
	s->next = *b;
	*b = s;
	br->nshadows++;
	br->shadow_bytes += shadow_size(e);
}

/* NAME's entry left the table: its shadows get another chance at the
 * end of the batch (bridge_flush), once the removal is complete. */
static void shadow_mark(struct bridge *br, const char *name, size_t len)
{
	bool any = false;
	struct marked *m;

	for (struct shadow *s = *bucket(br, name, len); s; s = s->next)
		if (same_name(&s->e, name, len))
			any = s->recheck = true;
	if (!any || !(m = malloc(sizeof(*m) + len)))
		return;
	m->len = len;
	memcpy(m->name, name, len);
	m->next = br->marked;
	br->marked = m;
}

/* Forget every claim of the nodes in IDS: one pass over the shadows for
 * any number of nodes. */
static void shadow_drop_nodes(struct bridge *br, const struct ids_used *ids)
{
	for (size_t i = 0; br->nshadows && i < SHADOW_BUCKETS; i++)
		for (struct shadow **sp = &br->shadows[i]; *sp;) {
			struct shadow *s = *sp;

			if (id_marked(ids, s->id)) {
				*sp = s->next;
				shadow_unlinked(br, s);
				free(s);
			} else {
				sp = &s->next;
			}
		}
}

static void shadow_drop_node(struct bridge *br, uint16_t id)
{
	struct ids_used ids;

	memset(&ids, 0, sizeof(ids));
	id_mark(&ids, id);
	shadow_drop_nodes(br, &ids);
}

static int apply_name(struct bridge *br, uint16_t id, const struct pr_bp_entry *e);

/* Each marked shadow goes through the conflict rule again, as if its
 * node had just sent it: the best claim takes the name, the others stay
 * aside. */
static void shadows_promote(struct bridge *br)
{
	while (br->marked) {
		struct marked *m = br->marked;
		struct shadow **sp, *s = NULL;

		for (sp = br->nshadows ? bucket(br, m->name, m->len) : NULL; sp && *sp;
		     sp = &(*sp)->next)
			if ((*sp)->recheck && same_name(&(*sp)->e, m->name, m->len)) {
				s = *sp;
				*sp = s->next;
				shadow_unlinked(br, s);
				break;
			}
		if (!s) {
			/* None (left) under this name. */
			br->marked = m->next;
			free(m);
			continue;
		}
		if (apply_name(br, s->id, &s->e) < 0)
			log_warn("bridge: node %s: claim to '%.*s' not restored", node_name(br, s->id),
				 (int)s->e.name_len, s->e.name);
		free(s);
	}
}

/* ---- out: this node's changes ----------------------------------------- */

static uint64_t wall_ns(const struct bridge *br)
{
	return procreg__now_ns() + (uint64_t)br->skew_ns;
}

uint64_t bridge_stamp(struct daemon *d)
{
	return pr_hlc_now(&d->bridge->hlc, wall_ns(d->bridge));
}

static void to_entry(const struct pr_record *r, uint8_t op, struct pr_bp_entry *e)
{
	memset(e, 0, sizeof(*e));
	e->op = op;
	e->kind = r->kind;
	e->flags = r->flags & PR_REC_FLAGS;
	e->pid = r->pid;
	e->uid = r->uid;
	e->start_time = r->start_time;
	e->registered_ns = r->registered_ns;
	e->name = r->data;
	e->name_len = r->name_len;
	e->meta = r->data + r->name_len + 1;
	e->meta_len = op == PR_BP_PUT ? r->meta_len : 0;
}

void bridge_local_change(struct daemon *d, int del, uint64_t off)
{
	struct bridge *br = d->bridge;
	const struct pr_record *r = rec(d, off);
	struct pr_bp_entry e;
	size_t pos = 0;

	/* Any node's name that leaves gives the claims kept aside for it
	 * another chance; only local changes go out. */
	if (del && r->kind == PR_KIND_NAME && br->nshadows)
		shadow_mark(br, r->data, r->name_len);
	if (r->node != 0 || (r->kind != PR_KIND_NAME && r->kind != PR_KIND_MEMBER))
		return;
	to_entry(r, del ? PR_BP_DEL : PR_BP_PUT, &e);
	if (procreg__bp_put_change(br->buf, PR_BP_FRAME_MAX, &pos, br->incarnation, br->seq + 1,
				   br->node, &e) < 0)
		return;
	br->seq++;
	br->changes_out++;
	PR_TRACE(procregd, bridge_out, e.op, e.kind, e.name, e.name_len, br->seq, pos);
	br->be->broadcast(br->b, br->buf, pos);
}

/*
 * This node's snapshot, for a node that came up: its own entries, in
 * frames of PR_BP_FRAME_MAX, all as of the change it began at. Written a
 * part at a time (SNAP_SLOTS of the index's slots looked at each), the
 * daemon serving its clients in between: whole, one of 10^6 names held
 * every local request 0.3 s, and a node with the cookie could have one
 * written for each connection it opened, back to back. In parts, the
 * table changes under it: an entry there throughout is in it once (the
 * walk resumes by hash, procreg__w_walk_some()), one added or removed
 * meanwhile may be in it or not, and every change after the one it is as
 * of goes to the node too (backend.h), which holds them until the
 * snapshot is whole and then applies them over it: each is an entry's
 * whole state, so what the node ends with is the table as it is.
 *
 * Parts take half the daemon's time at most, however many snapshots are
 * under way: after one that took T, the next waits T (snapshot_wait()).
 * A node with the cookie that opens connection after connection, each
 * asking for the table, halves what the daemon does for its clients, no
 * more.
 */
#define SNAP_SLOTS 512
/* What other nodes send is taken a slice at a time: a dispatch stops
 * taking it after this long (backend.h: input_over()), and the next waits
 * as long as the dispatch took (bg_next_ns). A node with the cookie
 * sending changes as fast as it could, over 8 connections, held the
 * daemon's thread so that a local register+unregister pair took 340 ms
 * and 4 were answered a second, against 13,000 before. A piece shorter
 * than PAUSE_MIN_NS is let by without the wait: its turn is over before
 * the fd could be taken out of the poll and put back. */
#define INPUT_SLICE_NS (500 * 1000ull)
#define PAUSE_MIN_NS (50 * 1000ull)
/* The waits are for the daemon's clients: with none heard from for this
 * long, the bridge's work goes on back to back (what comes in still a
 * slice at a time, so that a client that comes waits one at most), or a
 * node catching up with another's burst of changes, or writing a
 * snapshot, would sit idle half the time. */
#define CLIENTS_IDLE_NS (5 * 1000000ull)

struct snapshot {
	struct pr_wcursor wc;
	uint64_t seq;               /* what it is as of */
	uint32_t part;              /* the next part's number */
};

struct snap_ctx {
	struct bridge *br;
	struct snapshot *sn;
	int (*send)(void *sctx, const uint8_t *frame, size_t len);
	void *sctx;
	size_t pos, start;
};

static void snap_frame(struct snap_ctx *s)
{
	s->pos = 0;
	procreg__bp_begin(s->br->buf, PR_BP_FRAME_MAX, &s->pos, PR_BP_SNAP, s->br->incarnation,
			  s->sn->seq, s->sn->part, &s->start);
}

static int snap_one(uint64_t off, const struct pr_record *r, void *arg)
{
	struct snap_ctx *s = arg;
	struct bridge *br = s->br;
	struct pr_bp_entry e;
	int err;

	(void)off;
	if (r->node != 0 || (r->kind != PR_KIND_NAME && r->kind != PR_KIND_MEMBER))
		return 0;
	to_entry(r, PR_BP_PUT, &e);
	if (procreg__bp_add_entry(br->buf, PR_BP_FRAME_MAX, &s->pos, s->start, &e) == -ENOBUFS) {
		procreg__bp_end(br->buf, s->pos, s->start, 0);
		if ((err = s->send(s->sctx, br->buf, s->pos)) < 0)
			return err;
		s->sn->part++;
		snap_frame(s);
		procreg__bp_add_entry(br->buf, PR_BP_FRAME_MAX, &s->pos, s->start, &e);
	}
	return 0;
}

/* SN's next BUDGET slots, sent: 1 while more remain, 0 once its last part
 * is sent, or a negative errno. A part is sent even when it holds
 * nothing: the node counts a snapshot whose parts stop coming for
 * LATE_NS as lost, and a table of other nodes' entries has long runs of
 * parts without one of this node's. */
static int snapshot_part(struct bridge *br, struct snapshot *sn, uint64_t budget,
			 int (*send)(void *sctx, const uint8_t *frame, size_t len), void *sctx)
{
	struct snap_ctx s = { .br = br, .sn = sn, .send = send, .sctx = sctx };
	int more, err;

	snap_frame(&s);
	more = procreg__w_walk_some(&br->d->w, &sn->wc, budget, snap_one, &s);
	if (more < 0)
		return more;
	procreg__bp_end(br->buf, s.pos, s.start, more ? 0 : PR_BP_SNAP_LAST);
	if ((err = send(sctx, br->buf, s.pos)) < 0)
		return err;
	sn->part++;
	return more;
}

/* A piece of the bridge's work (a dispatch, a snapshot's part, the
 * removals' walk's) begun at T0 is over: the next waits as long as it
 * took (bg_wait()). */
static void bg_took(struct bridge *br, uint64_t t0)
{
	uint64_t t1 = procreg__mono_ns();

	br->bg_next_ns = t1 + (t1 - t0);
}

static void *up_snapshot_begin(void *ctx)
{
	struct bridge *br = ctx;
	struct snapshot *sn = calloc(1, sizeof(*sn));

	if (sn)
		sn->seq = br->seq;
	return sn;
}

static int up_snapshot_more(void *ctx, void *snap,
			    int (*send)(void *sctx, const uint8_t *frame, size_t len), void *sctx)
{
	struct bridge *br = ctx;
	uint64_t t0 = procreg__mono_ns();
	int more = snapshot_part(br, snap, SNAP_SLOTS, send, sctx);

	bg_took(br, t0);
	return more;
}

/* How long, from NOW, the bridge's next piece of work waits: until
 * bg_next_ns while the daemon's clients have had something for it lately
 * (then the bridge takes half its time at most), no time otherwise. */
static uint64_t bg_wait(const struct bridge *br, uint64_t now)
{
	if (now >= br->bg_next_ns || now - br->d->clients_ns >= CLIENTS_IDLE_NS)
		return 0;
	return br->bg_next_ns - now;
}

static bool up_input_over(void *ctx)
{
	struct bridge *br = ctx;

	return procreg__mono_ns() >= br->in_until_ns;
}

static uint64_t up_snapshot_wait(void *ctx)
{
	return bg_wait(ctx, procreg__mono_ns());
}

static void up_snapshot_end(void *ctx, void *snap)
{
	struct snapshot *sn = snap;

	(void)ctx;
	if (!sn)
		return;
	procreg__w_cursor_free(&sn->wc);
	free(sn);
}

/* Whole, at once: for a backend that does not write it in parts. */
static int up_snapshot(void *ctx, int (*send)(void *sctx, const uint8_t *frame, size_t len),
		       void *sctx)
{
	struct snapshot *sn = up_snapshot_begin(ctx);
	int err;

	if (!sn)
		return -ENOMEM;
	err = snapshot_part(ctx, sn, UINT64_MAX, send, sctx);
	up_snapshot_end(ctx, sn);
	return err;
}

static uint64_t up_seq(void *ctx)
{
	return ((struct bridge *)ctx)->seq;
}

_Static_assert(PR_BRIDGE_FRAME_MAX == PR_BP_FRAME_MAX && PR_BRIDGE_NODE_MAX == PR_BP_NODE_MAX,
	       "backend.h states the codec's limits");

static int up_heartbeat(void *ctx, uint8_t *buf, size_t cap)
{
	struct bridge *br = ctx;
	size_t pos = 0;
	int err = procreg__bp_put_heartbeat(buf, cap, &pos, br->incarnation, br->seq);

	return err ? err : (int)pos;
}

static int up_deliver(void *ctx, const char *name, const struct pr_bp_frame *f);

/* A frame as a backend without the codec received it: checked here as the
 * built-in backends check theirs. Only what a backend may carry to the
 * replication layer passes; the mesh's handshake frames are its own. */
static int up_deliver_bytes(void *ctx, const char *name, const uint8_t *frame, size_t len)
{
	struct pr_bp_frame f;
	size_t pos = 0;

	if (procreg__bp_next(frame, len, &pos, &f) != 1 || pos != len)
		return -EBADMSG;
	if (f.type != PR_BP_HEARTBEAT && f.type != PR_BP_SNAP && f.type != PR_BP_CHANGE)
		return -EPROTO;
	return up_deliver(ctx, name, &f);
}

/* ---- in: other nodes' entries ----------------------------------------- */

static void conflict_entry(struct pr_conflict_entry *c, const char *name, const char *node,
			   uint32_t pid, uint32_t uid, uint64_t stamp, const void *meta,
			   size_t meta_len)
{
	*c = (struct pr_conflict_entry){ .sz = sizeof(*c), .name = name, .node = node, .pid = pid,
					 .uid = uid, .registered_ns = stamp, .meta = meta,
					 .meta_len = meta_len };
}

/* Whether the incoming entry E (from node NE) wins over the record R
 * (owned by node NR): the resolver's answer if it gives one, asked both
 * ways; else the earlier stamp, then the smaller node name. */
static bool wins(const struct bridge *br, const struct pr_bp_entry *e, const char *ne,
		 const struct pr_record *r, const char *nr)
{
	if (br->resolver) {
		char name[PROCREG_NAME_MAX + 1];
		struct pr_conflict_entry a, b;
		int ab, ba;

		memcpy(name, e->name, e->name_len);
		name[e->name_len] = 0;
		conflict_entry(&a, name, ne, e->pid, e->uid, e->registered_ns, e->meta, e->meta_len);
		conflict_entry(&b, name, nr, r->pid, r->uid, r->registered_ns,
			       r->data + r->name_len + 1, r->meta_len);
		ab = br->resolver(&a, &b);
		ba = br->resolver(&b, &a);
		if ((ab < 0 && ba > 0) || (ab > 0 && ba < 0))
			return ab < 0;
	}
	if (e->registered_ns != r->registered_ns)
		return e->registered_ns < r->registered_ns;
	return strcmp(ne, nr) < 0;
}

/* E from node ID, as the registry takes it. */
static void remote_of(uint16_t id, const struct pr_bp_entry *e, struct reg_remote *re)
{
	*re = (struct reg_remote){
		.node = id, .kind = e->kind, .flags = e->flags, .pid = e->pid, .uid = e->uid,
		.start_time = e->start_time, .registered_ns = e->registered_ns, .name = e->name,
		.name_len = e->name_len, .meta = e->meta, .meta_len = e->meta_len,
	};
}

static int apply_name(struct bridge *br, uint16_t id, const struct pr_bp_entry *e)
{
	struct daemon *d = br->d;
	struct reg_remote re;
	uint64_t pos, old, off;
	const char *origin = node_name(br, id);
	int err;

	old = procreg__w_find_name(&d->w, e->name, e->name_len, &pos);
	while (old && take_swept(br, old))
		old = procreg__w_find_name(&d->w, e->name, e->name_len, &pos);
	if (e->op == PR_BP_DEL) {
		const struct pr_record *r = old ? rec(d, old) : NULL;

		/* Only its owner's entry: a DEL from the loser of a conflict
		 * leaves the winner alone (and withdraws the loser's shadow). */
		shadow_drop(br, id, e->name, e->name_len, e->pid, e->start_time);
		if (!r || r->node != id || r->pid != e->pid || r->start_time != e->start_time)
			return 0;
		registry_apply_remove(d, old, PROCREG_EV_UNREGISTERED);
		return 0;
	}
	if (old) {
		const struct pr_record *r = rec(d, old);

		if (r->node == id && same_entry(r, e))
			return touch(br, id, old); /* a resync's snapshot: unchanged */
		if (r->node != id) {
			bool won = wins(br, e, origin, r, node_name(br, r->node));

			PR_TRACE(procregd, bridge_conflict, e->name, e->name_len,
				 won ? origin : node_name(br, r->node), won ? node_name(br, r->node) : origin,
				 r->node == 0 ? r->pid : 0, won && r->node == 0);
			if (!won) {
				br->conflicts++;
				/* Ours stands; its node drops its own when it
				 * sees ours, if it ever does. Where ours is
				 * local, say so: the other node logs its side. */
				if (r->node == 0)
					log_limited(&br->kept_log, "conflicts won here",
						    "bridge: name '%.*s': node %s's registration (pid %u) "
						    "loses to ours (pid %u), the earlier: kept",
						    (int)e->name_len, e->name, origin, e->pid, r->pid);
				shadow_put(br, id, e);
				return 0;
			}
			br->conflicts++;
			if (r->node != 0 && !unconfirmed(br, r->node, old)) {
				struct pr_bp_entry loser;

				to_entry(r, PR_BP_PUT, &loser);
				shadow_put(br, r->node, &loser);
			} else if (r->node == 0) {
				/* Our registration lost: tell its owner (the feed,
				 * and at the end of the batch its connections and
				 * its signal), the other nodes (DEL), then make way. */
				log_limited(&br->lost_log, "conflicts lost here",
					    "bridge: name '%.*s': node %s's registration (pid %u), the "
					    "earlier, wins: local pid %u loses it", (int)e->name_len,
					    e->name, origin, e->pid, r->pid);
				registry_lose(d, old, origin, (pid_t)e->pid); /* sends the DEL */
			}
		}
	}
	remote_of(id, e, &re);
	err = registry_apply(d, &re, &off);
	if (!err) {
		shadow_drop(br, id, e->name, e->name_len, 0, 0);
		err = touch(br, id, off);
	}
	return err;
}

static int apply_member(struct bridge *br, uint16_t id, const struct pr_bp_entry *e)
{
	struct daemon *d = br->d;
	struct reg_remote re;
	struct pr_root *root;
	struct pr_key k;
	uint64_t pos, old = 0, off;
	int err;

	pr_key_member(&k, e->pid, e->start_time, id, d->w.map.hdr->hash_seed);
	if (procreg__w_group(&d->w, e->name, e->name_len, false, &root) == 0)
		old = procreg__w_find(&d->w, root, &k, &pos);
	if (old && take_swept(br, old))
		old = 0;
	if (e->op == PR_BP_DEL) {
		if (old)
			registry_apply_remove(d, old, PROCREG_EV_LEFT);
		return 0;
	}
	if (old && same_entry(rec(d, old), e))
		return touch(br, id, old);
	remote_of(id, e, &re);
	err = registry_apply(d, &re, &off);
	if (!err)
		err = touch(br, id, off);
	return err;
}

static int apply(struct bridge *br, uint16_t id, const struct pr_bp_entry *e)
{
	int err;

	if (e->op == PR_BP_PUT &&
	    pr_hlc_observe(&br->hlc, e->registered_ns, wall_ns(br), HLC_MAX_AHEAD_NS) < 0 &&
	    br->hlc_ahead++ == 0)
		log_warn("bridge: node %s: a registration stamped more than 60 s ahead of our clock "
			 "(clocks out of step?)", node_name(br, id));
	err = e->kind == PR_KIND_NAME ? apply_name(br, id, e) : apply_member(br, id, e);
	PR_TRACE(procregd, bridge_apply, node_name(br, id), e->op, e->kind, e->name, e->name_len, err);
	if (err && err != -ENOSPC)
		return err;
	/* Both reasons share one limit: a line a second says why entries
	 * are not replicated, and how many more were not logged. */
	if (err && br->d->w.reserve_hit)
		log_limited(&br->full_entry_log, "entries not replicated",
			    "bridge: node %s: entry '%.*s' not replicated: the table is full but "
			    "for the %llu bytes kept for this host's users (--local-size) and "
			    "root (--reserved-size), and the %llu kept for the name index",
			    node_name(br, id), (int)e->name_len, e->name,
			    (unsigned long long)(br->d->w.local_share + br->d->w.reserve),
			    (unsigned long long)procreg__w_index_room(&br->d->w));
	else if (err)
		log_limited(&br->full_entry_log, "entries not replicated",
			    "bridge: node %s: table full, entry '%.*s' not replicated",
			    node_name(br, id), (int)e->name_len, e->name);
	return 0;
}

static int deliver(void *ctx, const char *name, const struct pr_bp_frame *f);
static void node_gone(struct bridge *br, uint16_t id);
static void end_resync(struct node *n);
static void finish_resync(struct bridge *br, struct node *n);
static void removal_decide(struct bridge *br, struct node *n, uint32_t ev, uint64_t session,
			   bool gone);
static void write_nodes_file(struct bridge *br);

/* A frame in, timed for the bridge_in probe while it is traced. */
static int up_deliver(void *ctx, const char *name, const struct pr_bp_frame *f)
{
	uint64_t t0 = PR_TRACE_CLOCK(procregd, bridge_in);
	int r = deliver(ctx, name, f);

	PR_TRACE(procregd, bridge_in, name, f->type, f->seq, t0 ? procreg__mono_ns() - t0 : 0, r);
	return r;
}

/* ---- in: sequencing ----------------------------------------------------
 *
 * A node's frames are applied in the protocol's order: its snapshot's
 * parts from 0 up, then its changes from the one after the snapshot's seq
 * on. A transport may deliver them in another order: NATS does not keep
 * order across subjects (the snapshot comes on one, the changes on
 * another), a test transport reorders on purpose, and either may lose a
 * frame. So what comes early is held, re-encoded, until its turn: a part
 * after the one expected next, a change after the one expected next (or
 * any change before the snapshot is whole). What is behind is a repeat: a
 * change already applied (the snapshot covered it) is ignored; a part
 * already applied, held twice, or after the last is refused. The TCP mesh
 * delivers in order: nothing is ever held for it.
 *
 * Something is missing while frames are held, or while a heartbeat counts
 * changes not applied yet (changes travel before the heartbeat that counts
 * them, the whole snapshot before either). A transport that reorders may
 * still deliver it; one that lost it never will. So a node with something
 * missing for LATE_NS, with nothing applied in order meanwhile, is refused
 * at its next frame (heartbeats keep coming from a node that is up), as is
 * a frame that would take what is held past HOLD_MAX_BYTES. A refusal
 * drops the connection; node_down frees what the node held, and the next
 * node_up starts with a fresh snapshot.
 */

static void hold_list_free(struct bridge *br, struct hold_list *l)
{
	while (l->head) {
		struct held *h = l->head;

		l->head = h->next;
		br->held_bytes -= sizeof(*h) + h->len;
		free(h);
	}
	l->tail = NULL;
	l->bytes = 0;
}

static void hold_reset(struct bridge *br, struct node *n)
{
	hold_list_free(br, &n->parts);
	hold_list_free(br, &n->changes);
	n->hb_seen = false;
	n->hb_seq = 0;
	n->late_since_ns = 0;
}

/*
 * Room for NEED bytes more held, for node N: what the node holding the
 * most holds is dropped, if that is not N, and it is resynced at its next
 * frame (hold_dropped). The budget is every node's together: a node with
 * the cookie that held 64 MiB (changes numbered on from a snapshot it
 * never sent) had every other node's next early frame refused, 1,400 to
 * 2,400 times a second, each a resync, and kept a restarted node from
 * ever catching up. False if N holds the most: N is refused.
 */
static bool hold_make_room(struct bridge *br, const struct node *n, size_t need)
{
	while (br->held_bytes + need > HOLD_MAX_BYTES) {
		struct node *most = NULL;
		size_t most_bytes = 0;

		for (size_t i = 0; i < br->nnodes; i++) {
			struct node *o = &br->nodes[i];
			size_t b = o->parts.bytes + o->changes.bytes;

			if (b > most_bytes) {
				most = o;
				most_bytes = b;
			}
		}
		if (!most || most == n)
			return false;
		log_limited(&br->hold_log, "held frames dropped",
			    "bridge: node %s: its %zu bytes of frames held waiting for what is missing "
			    "dropped, for node %s's: it resyncs", most->name, most_bytes, n->name);
		hold_reset(br, most);
		most->hold_dropped = true;
	}
	return true;
}

/* Hold br->hold_buf[0..len) in L, node N's, under KEY: 0; -EEXIST if a
 * frame with that key is held already (it stays); -ENOBUFS past
 * HOLD_MAX_BYTES with N holding the most, or for a frame that could not
 * be re-encoded (LEN 0). What is counted is what is allocated, header
 * included: small changes are mostly header. */
static int hold(struct bridge *br, const struct node *n, struct hold_list *l, uint64_t key,
		size_t len)
{
	struct held *after = l->tail, *h;
	int steps = 0;

	/* Most come in order: after the tail. Else a few steps back from
	 * it, no more (HOLD_WALK_MAX). */
	while (after && after->key > key) {
		if (++steps > HOLD_WALK_MAX)
			return -ERANGE;
		after = after->prev;
	}
	if (after && after->key == key)
		return -EEXIST;
	if (!len || !hold_make_room(br, n, sizeof(*h) + len) || !(h = malloc(sizeof(*h) + len)))
		return -ENOBUFS;
	h->key = key;
	h->len = len;
	memcpy(h->frame, br->hold_buf, len);
	h->prev = after;
	h->next = after ? after->next : l->head;
	if (h->next)
		h->next->prev = h;
	else
		l->tail = h;
	if (after)
		after->next = h;
	else
		l->head = h;
	br->held_bytes += sizeof(*h) + len;
	l->bytes += sizeof(*h) + len;
	return 0;
}

/* The first frame of L, unlinked: the caller frees it. */
static struct held *unhold(struct bridge *br, struct hold_list *l)
{
	struct held *h = l->head;

	l->head = h->next;
	if (l->head)
		l->head->prev = NULL;
	else
		l->tail = NULL;
	br->held_bytes -= sizeof(*h) + h->len;
	l->bytes -= sizeof(*h) + h->len;
	return h;
}

/* F, a snapshot part, re-encoded into br->hold_buf: its length, 0 if it
 * did not fit (it came in a frame no bigger: it always does). */
static size_t encode_part(struct bridge *br, const struct pr_bp_frame *f)
{
	struct pr_bp_entry e;
	size_t pos = 0, start, ip = 0;

	if (procreg__bp_begin(br->hold_buf, PR_BP_FRAME_MAX, &pos, PR_BP_SNAP, f->incarnation,
			      f->seq, f->part, &start) < 0)
		return 0;
	while (procreg__bp_snap_entry(f, &ip, &e))
		if (procreg__bp_add_entry(br->hold_buf, PR_BP_FRAME_MAX, &pos, start, &e) < 0)
			return 0;
	procreg__bp_end(br->hold_buf, pos, start, f->flags);
	return pos;
}

/* F, a change of node NAME's (its origin), re-encoded into br->hold_buf:
 * its length, 0 if it did not fit. */
static size_t encode_change(struct bridge *br, const char *name, const struct pr_bp_frame *f)
{
	size_t pos = 0;

	if (procreg__bp_put_change(br->hold_buf, PR_BP_FRAME_MAX, &pos, f->incarnation, f->seq,
				   name, &f->entry) < 0)
		return 0;
	return pos;
}

/* The frame H holds, decoded again into G: 0, or -EPROTO (never, as it
 * was encoded here; a refusal rather than a guess if it ever is). */
static int held_frame(const struct held *h, struct pr_bp_frame *g)
{
	size_t pos = 0;

	return procreg__bp_next(h->frame, h->len, &pos, g) == 1 ? 0 : -EPROTO;
}

/* Refusals: counted and logged; the backend drops the connection. */
static int refuse(struct bridge *br, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int refuse(struct bridge *br, const char *name, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	br->refused++;
	log_limited(&br->refuse_log, "refusals of nodes", "bridge: node %s: %s: resyncing", name,
		    why);
	return -EPROTO;
}

static int hold_refused(struct bridge *br, const char *name, int err, const char *what,
			uint64_t key)
{
	if (err == -EEXIST)
		return refuse(br, name, "%s %llu repeated", what, (unsigned long long)key);
	if (err == -ERANGE)
		return refuse(br, name, "%s %llu more than %d out of order", what,
			      (unsigned long long)key, HOLD_WALK_MAX);
	return refuse(br, name, "more than %u MiB held waiting for what is missing",
		      HOLD_MAX_BYTES >> 20);
}

static int take_changes(struct bridge *br, struct node *n, uint16_t id);

/* Part F of node N's snapshot, the one expected next: applied. */
static int apply_part(struct bridge *br, struct node *n, uint16_t id, const struct pr_bp_frame *f)
{
	struct pr_bp_entry e;
	size_t ip = 0;

	/* All parts as of the same change: one of another snapshot is a
	 * stray (one connection carries one snapshot: a backend that asks
	 * for another goes through node_down and node_up first). */
	if (f->part > 0 && f->seq != n->snap_seq)
		return refuse(br, n->name, "snapshot part %u of another snapshot (as of %llu, not %llu)",
			      f->part, (unsigned long long)f->seq, (unsigned long long)n->snap_seq);
	n->snap_part++;
	n->snap_seq = f->seq;
	while (procreg__bp_snap_entry(f, &ip, &e))
		if (e.op != PR_BP_PUT || apply(br, id, &e) < 0)
			return refuse(br, n->name, "snapshot part %u: an entry refused", f->part);
	if (f->flags & PR_BP_SNAP_LAST) {
		n->synced = true;
		n->next_seq = f->seq + 1;
		log_debug("bridge: node %s: snapshot applied, %u part%s as of change %llu", n->name,
			  n->snap_part, n->snap_part == 1 ? "" : "s", (unsigned long long)f->seq);
		if (n->linger_until_ns)
			finish_resync(br, n);
	}
	return 0;
}

/* A part of node N's snapshot: applied in its turn, with the parts held
 * after it; held if early; refused if a repeat or a stray. Restarting a
 * snapshot at a part 0 in the middle of one would not be clean: the
 * entries of the parts already applied stay, and unless the node is
 * resyncing by difference nothing would remove those the new snapshot
 * no longer has. */
static int take_part(struct bridge *br, struct node *n, uint16_t id, const struct pr_bp_frame *f)
{
	int err;

	if (n->synced || f->part < n->snap_part)
		return refuse(br, n->name, "snapshot part %u out of order (expected %u)", f->part,
			      n->snap_part);
	if (f->part > n->snap_part) {
		err = hold(br, n, &n->parts, f->part, encode_part(br, f));
		return err ? hold_refused(br, n->name, err, "snapshot part", f->part) : 0;
	}
	err = apply_part(br, n, id, f);
	while (!err && !n->synced && n->parts.head && n->parts.head->key == n->snap_part) {
		struct held *h = unhold(br, &n->parts);
		struct pr_bp_frame g;

		err = held_frame(h, &g) ? refuse(br, n->name, "held snapshot part unreadable")
					: apply_part(br, n, id, &g);
		free(h);
	}
	if (err)
		return err;
	if (n->synced && n->parts.head)
		return refuse(br, n->name, "snapshot part %llu after the last (%u)",
			      (unsigned long long)n->parts.head->key, n->snap_part - 1);
	return n->synced ? take_changes(br, n, id) : 0;
}

/* Change F of node N's, the one expected next: applied. */
static int apply_change(struct bridge *br, struct node *n, uint16_t id,
			const struct pr_bp_frame *f)
{
	if (apply(br, id, &f->entry) < 0)
		return refuse(br, n->name, "change %llu refused", (unsigned long long)f->seq);
	n->next_seq++;
	n->changes_in++;
	br->changes_in++;
	return 0;
}

/* Node N's snapshot is whole: its held changes that are next, in turn
 * (those the snapshot covered are dropped). */
static int take_changes(struct bridge *br, struct node *n, uint16_t id)
{
	int err = 0;

	while (!err && n->changes.head && n->changes.head->key <= n->next_seq) {
		struct held *h = unhold(br, &n->changes);
		struct pr_bp_frame g;

		if (h->key == n->next_seq)
			err = held_frame(h, &g) ? refuse(br, n->name, "held change unreadable")
						: apply_change(br, n, id, &g);
		free(h);
	}
	return err;
}

/* A change of node N's: applied in its turn, with the changes held after
 * it; held if early (or if the snapshot is not whole yet); ignored if
 * applied already (the snapshot covered it: idempotent). */
static int take_change(struct bridge *br, struct node *n, uint16_t id, const struct pr_bp_frame *f)
{
	int err;

	if (f->name_len != strlen(n->name) || memcmp(f->name, n->name, f->name_len))
		return refuse(br, n->name, "a change from another origin");
	if (n->synced && f->seq < n->next_seq)
		return 0;
	if (!n->synced || f->seq > n->next_seq) {
		err = hold(br, n, &n->changes, f->seq, encode_change(br, n->name, f));
		/* The same change twice, both early: the first stands. */
		return err && err != -EEXIST ? hold_refused(br, n->name, err, "change", f->seq) : 0;
	}
	err = apply_change(br, n, id, f);
	return err ? err : take_changes(br, n, id);
}

/* Whether something of node N's is missing (see the top of the section). */
static bool missing(const struct node *n)
{
	if (!n->synced)
		return n->hb_seen || n->parts.head || n->changes.head;
	return n->changes.head || n->hb_seq >= n->next_seq;
}

/* After a frame of node N's: refused if something has been missing for
 * too long with nothing applied in order meanwhile (PROGRESS: this frame
 * moved things on). */
static int check_late(struct bridge *br, struct node *n, bool progress)
{
	uint64_t now = procreg__mono_ns();

	if (!missing(n)) {
		n->late_since_ns = 0;
		return 0;
	}
	if (progress || !n->late_since_ns) {
		n->late_since_ns = now;
		return 0;
	}
	if (now - n->late_since_ns < br->late_ns)
		return 0;
	if (!n->synced)
		return refuse(br, n->name, "snapshot incomplete, part %u missing after %llu ms",
			      n->snap_part, (unsigned long long)((now - n->late_since_ns) / 1000000));
	return refuse(br, n->name, "change %llu missing after %llu ms",
		      (unsigned long long)n->next_seq,
		      (unsigned long long)((now - n->late_since_ns) / 1000000));
}

static int deliver(void *ctx, const char *name, const struct pr_bp_frame *f)
{
	struct bridge *br = ctx;
	uint16_t id;
	struct node *n = node_by_name(br, name, &id);
	uint64_t next_seq, snap_part;
	int err;

	if (!n || !n->up)
		return refuse(br, name, "frame %u from a node that is not up", f->type);
	if (f->incarnation != n->incarnation)
		return refuse(br, name, "frame %u of another incarnation", f->type);
	if (n->hold_dropped)
		return refuse(br, name, "what it held was dropped for another node's");
	/* The nodes file names a node before the table holds an entry of
	 * its: a reader that finds one asks for its node's name there
	 * (procreg_node_name()), and a node id may have been another's.
	 * node_up only marks the file stale (the backend counts the node up
	 * once it returns), and the end of the batch is too late: its
	 * snapshot may come in the same batch. So at its first frame (once:
	 * a file that cannot be written is tried again at the batch's end). */
	if (!n->named) {
		n->named = true;
		if (br->nodes_dirty)
			write_nodes_file(br);
	}
	next_seq = n->next_seq;
	snap_part = n->snap_part;
	switch (f->type) {
	case PR_BP_HEARTBEAT:
		n->hb_seen = true;
		if (f->seq > n->hb_seq)
			n->hb_seq = f->seq;
		err = 0;
		break;
	case PR_BP_SNAP:
		err = take_part(br, n, id, f);
		break;
	case PR_BP_CHANGE:
		err = take_change(br, n, id, f);
		break;
	default:
		return refuse(br, name, "frame %u out of place", f->type);
	}
	if (err)
		return err;
	return check_late(br, n, n->next_seq != next_seq || n->snap_part != snap_part);
}

/* ---- node ids ---------------------------------------------------------- */

static bool node_is_gone(const struct node *n)
{
	return !n->up && !n->linger_until_ns && n->gone_order && !n->nremovals;
}

static int by_gone_order(const void *a, const void *b, void *arg)
{
	const struct bridge *br = arg;
	uint64_t x = br->nodes[*(const uint16_t *)a - 1].gone_order,
		 y = br->nodes[*(const uint16_t *)b - 1].gone_order;

	return x < y ? 1 : x > y ? -1 : 0; /* newest first: the oldest is popped first */
}

/* The ids of gone nodes that no record in the table and no shadow refers
 * to, into br->free_ids: the writer counts the records of each node id as
 * it publishes and removes them, so no walk of the table is needed. Done
 * only when a new node finds every id taken and some node went since the
 * last look, which finds every gone node's id at once. */
static void find_free_ids(struct bridge *br)
{
	struct ids_used used;

	memset(&used, 0, sizeof(used));
	br->nfree = 0;
	br->ids_checked_at = br->gone_seq;
	for (size_t i = 0; br->shadows && i < SHADOW_BUCKETS; i++)
		for (const struct shadow *s = br->shadows[i]; s; s = s->next)
			id_mark(&used, s->id);
	for (size_t i = 0; i < br->nnodes; i++)
		if (node_is_gone(&br->nodes[i]) && !id_marked(&used, (uint16_t)(i + 1)) &&
		    procreg__w_node_refs(&br->d->w, (uint16_t)(i + 1)) == 0)
			br->free_ids[br->nfree++] = (uint16_t)(i + 1);
	qsort_r(br->free_ids, br->nfree, sizeof(br->free_ids[0]), by_gone_order, br);
}

/* A slot for the node NAME, first seen: a fresh id while there are some,
 * then the id of the node gone the longest that nothing refers to; NULL
 * if every id is a node's that is up or lingering. */
static struct node *node_new(struct bridge *br, const char *name, uint16_t *id)
{
	struct node *n = NULL;

	if (br->nnodes < br->nodes_max) {
		*id = (uint16_t)++br->nnodes;
		n = &br->nodes[*id - 1];
	} else {
		if (!br->nfree && br->ids_checked_at != br->gone_seq)
			find_free_ids(br);
		while (br->nfree && !n) {
			*id = br->free_ids[--br->nfree];
			/* Back since (it kept its id), or gone again: then
			 * its entries were removed again. */
			if (node_is_gone(&br->nodes[*id - 1]))
				n = &br->nodes[*id - 1];
		}
		if (!n)
			return NULL;
		log_at(LOG_INFO, "bridge: node id %u: node %s's (gone), now node %s's", (unsigned)*id,
		       n->name, name);
		hold_reset(br, n);
		end_resync(n);
		procreg__sidx_del(&br->node_index, n->name, strlen(n->name), *id);
	}
	memset(n, 0, sizeof(*n));
	snprintf(n->name, sizeof(n->name), "%s", name);
	procreg__sidx_put(&br->node_index, n->name, strlen(n->name), *id);
	return n;
}

static int up_node_up(void *ctx, const char *name, uint64_t inc, const char *addr)
{
	struct bridge *br = ctx;
	uint16_t id;
	struct node *n = node_by_name(br, name, &id);

	if (!n && !(n = node_new(br, name, &id))) {
		log_limited(&br->full_log, "nodes refused",
			    "bridge: node %s refused: %zu nodes known, each up or within its grace",
			    name, br->nnodes);
		return -ENOSPC;
	}
	if (n->up)
		return -EEXIST;
	n->session++;
	if (n->linger_until_ns && n->incarnation != inc) {
		/* Restarted: what the old one held is gone, at the next
		 * tick (sweep()); its claims set aside, now. */
		n->linger_until_ns = 0;
		n->replaced_inc = n->incarnation;
		br->nodes_down++;
		shadow_drop_node(br, id);
		removal_decide(br, n, PROCREG_EV_NODE_DOWN, n->session, false);
	}
	if (n->linger_until_ns) {
		/* Its snapshot says what it holds now, claims lost here
		 * included: the old shadows go. */
		shadow_drop_node(br, id);
		n->resync = true;
	}
	hold_reset(br, n);
	n->hold_dropped = false;
	n->up = true;
	n->named = false;
	n->gone_order = 0;
	n->synced = false;
	n->snap_part = 0;
	n->snap_seq = 0;
	n->incarnation = inc;
	n->next_seq = 0;
	n->up_since_ns = procreg__now_ns();
	snprintf(n->addr, sizeof(n->addr), "%s", addr);
	br->nodes_dirty = true;
	PR_TRACE(procregd, bridge_node, name, 1, inc, (uint64_t)0);
	return 0;
}

/* What it touched is kept while it has removals pending (sweep() frees
 * it). */
static void end_resync(struct node *n)
{
	n->resync = false;
	if (n->nremovals)
		return;
	procreg__u64map_free(&n->touched);
	memset(&n->touched, 0, sizeof(n->touched));
}

/* ---- removals decided, made at the next tick ---------------------------
 *
 * A node back within its grace as another incarnation (restarted) loses
 * what the old one held, with NODE_DOWN events; one back as the same
 * incarnation loses, once its snapshot is whole, what the snapshot did not
 * confirm. Either costs a walk of the table on the daemon's only thread
 * (25 ms at 10^6 names): made where it happens, a node with the cookie
 * that comes back again and again, or under many names, had the daemon
 * walk the table for each, and local requests wait behind every walk. So
 * each is decided where it happens and made at the next tick
 * (bridge_tick(), four a second), in one walk for every removal decided
 * since: two if there were both kinds, whose events differ.
 *
 * Meanwhile the node's frames are applied: a restarted node's new
 * snapshot, the changes after a resync's. The node keeps its id, and what
 * it puts or confirms is noted with its session (touched); a removal takes
 * only what the node did not touch since the session it was decided in.
 * Whatever meets a record a removal will take, a frame (the node's own,
 * or another's claim to its name) or a local registration of its name
 * (bridge_take_pending()), takes it out first, with the removal's event
 * (take_swept()): what it finds is what it would find had the walk been
 * made at once, so a restarted node's old entry goes (NODE_DOWN) before
 * its new one comes (REGISTERED), is never kept as if the new one had
 * confirmed it, and does not keep its name from a local process. Readers
 * see such an entry until the tick, as they see a node's entries through
 * its grace. Keeping the id, rather than giving the new incarnation a
 * fresh one while the old waits for the walk, keeps a node's id what
 * readers and the nodes file know, takes no id (with every id a node's,
 * up or within its grace, a restart would be refused), and keeps a
 * restarted node's membership under its one key, so that the old one
 * leaves before the new one joins.
 */

static void sweep(struct bridge *br);

/* Node N's records that it did not touch since session SESSION began go
 * with EV, at the next tick; GONE: the node with them (its id free once
 * they are out). Decided in the sessions' order. */
static void removal_decide(struct bridge *br, struct node *n, uint32_t ev, uint64_t session,
			   bool gone)
{
	struct removal *last = n->nremovals ? &n->removals[n->nremovals - 1] : NULL;

	br->sweep_due = true;
	/* Two alike in a row: the later takes what the earlier would, with
	 * the same event; not one the walk under way makes, which may have
	 * passed records the later takes. */
	if (last && last->ev == ev && n->nremovals > n->sweep_n) {
		last->session = session;
		last->gone |= gone;
		return;
	}
	if (n->nremovals == REMOVALS_MAX)
		sweep(br);
	if (n->nremovals == REMOVALS_MAX) {
		/* Out of memory for the walk: the last takes this one's
		 * records too, with its own event. */
		last->session = session;
		last->gone |= gone;
		return;
	}
	n->removals[n->nremovals++] = (struct removal){ .session = session, .ev = ev, .gone = gone };
}

/*
 * The walk. Begun at a tick for every removal decided by then
 * (sweep_begin()), made a part of SWEEP_SLOTS index slots at a time
 * between local requests, at most half the daemon's time with the
 * snapshots' parts (bridge_flush(), bg_next_ns): whole, at 10^6 names,
 * each held every local request 25 ms, four times a second for a node
 * with the cookie that kept coming back. A record goes with the first
 * removal pending for its node that takes it, whichever kind; the walk
 * sees every record there throughout once (procreg__w_walk_some()), and
 * one a node puts or confirms meanwhile is noted, so each removal it
 * began with is whole at its end. Those decided meanwhile take what they
 * meet, and wait for the next walk for the rest.
 */
#define SWEEP_SLOTS 4096

static bool sweep_pick(uint64_t off, const struct pr_record *r, void *arg, uint32_t *ev)
{
	struct bridge *br = arg;
	struct node *n;

	if (!r->node || r->node > br->nnodes)
		return false;
	n = &br->nodes[r->node - 1];
	if (!swept(n, off, ev))
		return false;
	n->swept[*ev == PROCREG_EV_NODE_DOWN]++;
	return true;
}

static void sweep_begin(struct bridge *br)
{
	br->sweep_due = false;
	br->sweeping = true;
	memset(&br->rm, 0, sizeof(br->rm));
	for (size_t i = 0; i < br->nnodes; i++)
		br->nodes[i].sweep_n = br->nodes[i].nremovals;
}

/* The walk is over: the removals it began with are made. */
static void sweep_end(struct bridge *br)
{
	br->sweeping = false;
	for (size_t i = 0; i < br->nnodes; i++) {
		struct node *n = &br->nodes[i];
		bool had[2] = { false, false }, gone = false;

		if (!n->sweep_n)
			continue;
		for (size_t j = 0; j < n->sweep_n; j++) {
			had[n->removals[j].ev == PROCREG_EV_NODE_DOWN] = true;
			gone |= n->removals[j].gone;
		}
		if (had[0])
			log_notice("bridge: node %s: resynced, %llu entries gone meanwhile", n->name,
				   (unsigned long long)n->swept[0]);
		if (had[1]) {
			PR_TRACE(procregd, bridge_node, n->name, 0,
				 gone ? n->incarnation : n->replaced_inc, n->swept[1]);
			log_notice("bridge: node %s: %llu entries removed", n->name,
				   (unsigned long long)n->swept[1]);
		}
		n->nremovals -= n->sweep_n;
		memmove(n->removals, n->removals + n->sweep_n, n->nremovals * sizeof(n->removals[0]));
		n->sweep_n = 0;
		n->swept[0] = n->swept[1] = 0;
		if (n->nremovals)
			br->sweep_due = true;
		else if (!n->resync)
			end_resync(n);
		if (!n->up)
			br->nodes_dirty = true; /* its "down" line goes */
		/* Gone, its entries out: its id may go to another
		 * (node_new()), unless it came back since, or went again and
		 * is within its grace. */
		if (gone && !n->up && !n->linger_until_ns && !n->nremovals)
			n->gone_order = ++br->gone_seq;
	}
}

/* BUDGET more slots of the walk under way: 1 while more remain, 0 once it
 * is over, -ENOMEM (begun again at the next tick; what it took stays
 * taken). */
static int sweep_part(struct bridge *br, uint64_t budget)
{
	int more = registry_remove_some(br->d, &br->rm, budget, sweep_pick, br);

	if (!more) {
		sweep_end(br);
	} else if (more < 0) {
		log_warn("bridge: out of memory walking the table for the nodes' removals: again "
			 "at the next tick");
		br->sweeping = false;
		br->sweep_due = true;
		for (size_t i = 0; i < br->nnodes; i++)
			br->nodes[i].sweep_n = 0;
	}
	return more;
}

/* Every removal decided so far made, at once: a node with REMOVALS_MAX
 * pending decided another. */
static void sweep(struct bridge *br)
{
	while (br->sweeping || br->sweep_due) {
		if (!br->sweeping)
			sweep_begin(br);
		if (sweep_part(br, SWEEP_SLOTS) < 0)
			return;
	}
}

/*
 * The nodes in IDS are gone for good (their grace ran out, or, with no
 * grace, their connection went): their entries go, with NODE_DOWN events.
 * Or one is back, but the grace ran out before its snapshot was whole:
 * what the snapshot confirmed so far stays, the rest goes now and comes
 * back as the snapshot brings it (a snapshot that never ends must not
 * keep stale entries for ever; one that ends late may not lose what it
 * sent early).
 *
 * A removal each, made by the walk of the next tick with the others
 * (sweep_begin()): a walk each cost nodes x table on the daemon's only
 * thread, no request served meanwhile (a partition that cuts off hundreds
 * of nodes, or a peer with the cookie that comes up under hundreds of
 * names and drops them all: 900 over 200,000 names held it for 13 s). A
 * gone node's id may go to another (gone_order) only once the walk has
 * taken its entries out. A down node's removal takes what it touched in
 * its last session too; one that is back keeps what it touched in this.
 */
static void nodes_gone(struct bridge *br, const struct ids_used *ids)
{
	struct ids_used drop;           /* gone for good: their shadows go */

	memset(&drop, 0, sizeof(drop));
	for (size_t i = 0; i < br->nnodes; i++) {
		struct node *n = &br->nodes[i];

		if (!id_marked(ids, (uint16_t)(i + 1)))
			continue;
		n->linger_until_ns = 0;
		br->nodes_down++;
		removal_decide(br, n, PROCREG_EV_NODE_DOWN, n->up ? n->session : n->session + 1,
			       !n->up);
		if (!(n->up && n->resync))
			id_mark(&drop, (uint16_t)(i + 1));
		end_resync(n);
	}
	shadow_drop_nodes(br, &drop);
}

static void node_gone(struct bridge *br, uint16_t id)
{
	struct ids_used ids;

	memset(&ids, 0, sizeof(ids));
	id_mark(&ids, id);
	nodes_gone(br, &ids);
}

/* Its snapshot is complete: what it did not confirm, it lost while the
 * connection was down. It goes at the next tick (sweep()); what the node
 * puts or confirms until then stays. */
static void finish_resync(struct bridge *br, struct node *n)
{
	n->linger_until_ns = 0;
	if (!n->resync) {
		/* Out of memory while it resynced: everything is kept. */
		log_notice("bridge: node %s: resynced, 0 entries gone meanwhile", n->name);
		return;
	}
	/* Decided while it still resyncs: a sweep made to find room
	 * (removal_decide()) keeps what a resyncing node touched. */
	removal_decide(br, n, 0, n->session, false);
	end_resync(n);
}

static void up_node_down(void *ctx, const char *name)
{
	struct bridge *br = ctx;
	uint16_t id;
	struct node *n = node_by_name(br, name, &id);

	if (!n || !n->up)
		return;
	n->up = false;
	n->synced = false;
	hold_reset(br, n);
	end_resync(n);
	br->nodes_dirty = true;
	if (!n->linger_until_ns)
		n->linger_until_ns = procreg__mono_ns() + br->linger_ns;
	if (!br->linger_ns)
		node_gone(br, id);
	else
		PR_TRACE(procregd, bridge_node, n->name, 2, n->incarnation, (uint64_t)0);
}

static void log_fwd(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	log_msg("%s", buf);
}

/* ---- the nodes file ----------------------------------------------------- */

struct nf_ctx {
	struct bridge *br;
	FILE *f;
};

static void nf_node(void *arg, const struct pr_bridge_node_info *ni)
{
	struct nf_ctx *c = arg;
	uint16_t id;
	struct node *n = node_by_name(c->br, ni->name, &id);

	if (!n)
		return;
	fprintf(c->f, PR_NODES_NODE_FMT, id, n->name,
		n->addr[0] ? n->addr : PR_NODES_NO_ADDR, (unsigned long long)n->incarnation,
		(unsigned long long)n->up_since_ns, (unsigned long long)n->changes_in,
		(unsigned long long)ni->bytes_in, (unsigned long long)ni->bytes_out);
}

static void nf_peer(void *arg, const struct pr_bridge_peer_info *pi)
{
	struct nf_ctx *c = arg;

	fprintf(c->f, PR_NODES_PEER_FMT, pi->up ? 1 : 0, pi->addr,
		pi->node[0] ? pi->node : PR_NODES_NO_NAME);
}

/* DIR/procreg.SCOPE.nodes (nodes_file.h), replaced atomically: what
 * procreg_bridge() reads for procreg nodes and procreg stats. One "self"
 * line, one "stats" line, one "node" line per node that is up, one "down"
 * line per node down whose entries are still there, one "peer" line per --peer,
 * connected or not (a backend that has them). */
static void write_nodes_file(struct bridge *br)
{
	char tmp[sizeof(br->nodes_path) + 8];
	struct nf_ctx c = { br, NULL };
	int fd;

	snprintf(tmp, sizeof(tmp), "%s.tmp", br->nodes_path);
	/* The directory may be shared and sticky (/dev/shm): never follow or
	 * reuse a file someone else put there. */
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 || !(c.f = fdopen(fd, "w"))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	fprintf(c.f, PR_NODES_MAGIC "\n" PR_NODES_SELF_FMT, br->node,
		(unsigned long long)br->incarnation, (unsigned long long)br->seq);
	fprintf(c.f, PR_NODES_STATS_FMT, (unsigned long long)br->changes_out,
		(unsigned long long)br->changes_in, (unsigned long long)br->conflicts,
		(unsigned long long)br->nodes_down, (unsigned long long)br->refused);
	br->be->nodes(br->b, nf_node, &c);
	for (size_t i = 0; i < br->nnodes; i++) {
		const struct node *n = &br->nodes[i];

		/* Down, its entries still in the table: in its grace, or
		 * waiting for the walk that removes them. */
		if (!n->up && (n->linger_until_ns || n->nremovals))
			fprintf(c.f, PR_NODES_DOWN_FMT, (unsigned)(i + 1), n->name,
				n->addr[0] ? n->addr : PR_NODES_NO_ADDR,
				(unsigned long long)n->incarnation);
	}
	if (br->be->sz > offsetof(struct pr_bridge_backend, peers) && br->be->peers)
		br->be->peers(br->b, nf_peer, &c);
	if (fclose(c.f) == 0)
		rename(tmp, br->nodes_path);
	else
		unlink(tmp);
	br->nodes_dirty = false;
}

/* ---- the daemon's side -------------------------------------------------- */

static int read_cookie(const char *path, uint8_t *buf, size_t cap, size_t *len)
{
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0) {
		log_err("--cookie-file %s: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		log_err("--cookie-file %s: not a regular file", path);
		close(fd);
		return -EINVAL;
	}
	if ((st.st_mode & 077) || st.st_uid != geteuid()) {
		log_err("--cookie-file %s: mode %03o, owner %u: must be 0600 and ours", path,
			(unsigned)(st.st_mode & 0777), (unsigned)st.st_uid);
		close(fd);
		return -EACCES;
	}
	n = read(fd, buf, cap);
	close(fd);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	if (n < 8) {
		log_err("--cookie-file %s: want at least 8 bytes of secret", path);
		return -EINVAL;
	}
	*len = (size_t)n;
	return 0;
}

/* A backend from a shared object: its PR_BRIDGE_BACKEND_SYMBOL, checked. */
static const struct pr_bridge_backend *load_backend(const char *path, void **dl)
{
	const struct pr_bridge_backend *be;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		log_err("--bridge-backend %s: %s", path, dlerror());
		return NULL;
	}
	be = dlsym(h, PR_BRIDGE_BACKEND_SYMBOL);
	if (!be) {
		log_err("--bridge-backend %s: no symbol %s", path, PR_BRIDGE_BACKEND_SYMBOL);
	} else if (be->sz < PR_BRIDGE_BACKEND_MIN_SZ) {
		log_err("--bridge-backend %s: interface size %zu, want at least %zu", path, be->sz,
			(size_t)PR_BRIDGE_BACKEND_MIN_SZ);
	} else if (!be->open || !be->fd || !be->dispatch || !be->broadcast || !be->flush ||
		   !be->nodes || !be->close) {
		log_err("--bridge-backend %s: a required function is missing", path);
	} else {
		*dl = h;
		return be;
	}
	dlclose(h);
	return NULL;
}

/* --bridge NAME: "tcp" is the built-in mesh; anything else is
 * procreg-bridge-NAME.so beside procregd (a build tree), then in the
 * library directory relative to procregd (an installed tree, wherever its
 * prefix), then in the library directory it was configured with. */
static const struct pr_bridge_backend *find_backend(const char *name, void **dl)
{
	char exe[PR_PATH_MAX], path[PR_PATH_MAX + 128];
	const char *dirs[3] = { NULL, NULL, PROCREG_BACKEND_DIR };
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char rel[PR_PATH_MAX + 64];

	if (!strcmp(name, "tcp"))
		return &pr_mesh_backend;
	if (!procreg__bp_valid_node(name, strlen(name)) || strchr(name, '/') || name[0] == '.') {
		log_err("--bridge %s: want a backend's name (or --bridge-backend PATH)", name);
		return NULL;
	}
	if (n > 0) {
		exe[n] = 0;
		*strrchr(exe, '/') = 0;
		dirs[0] = exe;
		snprintf(rel, sizeof(rel), "%s/%s", exe, PROCREG_BACKEND_RELDIR);
		dirs[1] = rel;
	}
	for (int i = 0; i < 3; i++) {
		if (!dirs[i])
			continue;
		snprintf(path, sizeof(path), "%s/procreg-bridge-%s.so", dirs[i], name);
		if (access(path, R_OK) == 0)
			return load_backend(path, dl);
	}
	log_err("--bridge %s: no procreg-bridge-%s.so beside procregd or in %s", name, name,
		PROCREG_BACKEND_DIR);
	return NULL;
}

/* A conflict rule from a shared object (resolver.h). */
static int load_resolver(struct bridge *br, const char *path)
{
	br->resolver_dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!br->resolver_dl) {
		log_err("--resolver %s: %s", path, dlerror());
		return -EINVAL;
	}
	br->resolver = (pr_resolver_fn)(uintptr_t)dlsym(br->resolver_dl, PR_RESOLVER_SYMBOL);
	if (!br->resolver) {
		log_err("--resolver %s: no symbol %s", path, PR_RESOLVER_SYMBOL);
		dlclose(br->resolver_dl);
		br->resolver_dl = NULL;
		return -EINVAL;
	}
	return 0;
}

int bridge_start(struct daemon *d)
{
	struct bridge *br;
	uint8_t cookie[4096];
	size_t cookie_len = 0;
	struct pr_bridge_config cfg = { .sz = sizeof(cfg) };
	struct pr_bridge_up up = {
		.sz = sizeof(up), .node_up = up_node_up, .node_down = up_node_down,
		.deliver = up_deliver, .snapshot = up_snapshot, .seq = up_seq, .log = log_fwd,
		.deliver_bytes = up_deliver_bytes, .heartbeat = up_heartbeat, .vlog = log_vat,
		.snapshot_begin = up_snapshot_begin, .snapshot_more = up_snapshot_more,
		.snapshot_end = up_snapshot_end, .snapshot_wait = up_snapshot_wait,
		.input_over = up_input_over,
	};
	int err;

	/* Before anything else of OpenSSL's: no clean-up at exit. libnats 3.4
	 * (Debian 12's) frees libssl's list of compression methods when it
	 * shuts down after a TLS connection, and OpenSSL 3's own clean-up at
	 * exit then frees it again: procregd crashed on its way out (nats.c
	 * has since dropped that clean-up). The process is ending anyway. */
	OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
	if (!procreg__bp_valid_node(d->o.node, strlen(d->o.node))) {
		log_err("--node %s: want 1..63 of [A-Za-z0-9_.@-]", d->o.node);
		return -EINVAL;
	}
	if (!d->o.cookie_file) {
		log_err("--node needs --cookie-file");
		return -EINVAL;
	}
	err = read_cookie(d->o.cookie_file, cookie, sizeof(cookie), &cookie_len);
	if (err)
		return err;
	br = calloc(1, sizeof(*br));
	if (!br || !(br->nodes = calloc(NODES_MAX, sizeof(*br->nodes))) ||
	    !(br->buf = malloc(PR_BP_FRAME_MAX)) || !(br->hold_buf = malloc(PR_BP_FRAME_MAX))) {
		if (br) {
			free(br->nodes);
			free(br->buf);
		}
		free(br);
		return -ENOMEM;
	}
	br->d = d;
	br->refuse_log.burst = REFUSE_LOG_BURST;
	procreg__sidx_init(&br->node_index);
	br->be = &pr_mesh_backend;
	if ((d->o.resolver && load_resolver(br, d->o.resolver) < 0) ||
	    (d->o.bridge_backend && !(br->be = load_backend(d->o.bridge_backend, &br->dl))) ||
	    (d->o.bridge && !(br->be = find_backend(d->o.bridge, &br->dl)))) {
		if (br->resolver_dl)
			dlclose(br->resolver_dl);
		free(br->nodes);
		free(br->buf);
		free(br->hold_buf);
		free(br);
		return -EINVAL;
	}
	snprintf(br->node, sizeof(br->node), "%s", d->o.node);
	br->nodes_max = NODES_MAX;
	if (getenv("PROCREG_TEST_NODES_MAX")) {
		br->nodes_max = strtoull(getenv("PROCREG_TEST_NODES_MAX"), NULL, 10);
		if (br->nodes_max < 1 || br->nodes_max > NODES_MAX)
			br->nodes_max = NODES_MAX;
	}
	br->linger_ns = LINGER_NS;
	if (getenv("PROCREG_TEST_SWEEP_MS"))
		br->sweep_gap_ns = strtoull(getenv("PROCREG_TEST_SWEEP_MS"), NULL, 10) * 1000000ull;
	if (getenv("PROCREG_TEST_LINGER_MS"))
		br->linger_ns = strtoull(getenv("PROCREG_TEST_LINGER_MS"), NULL, 10) * 1000000ull;
	br->late_ns = LATE_NS;
	if (getenv("PROCREG_TEST_LATE_MS"))
		br->late_ns = strtoull(getenv("PROCREG_TEST_LATE_MS"), NULL, 10) * 1000000ull;
	if (getenv("PROCREG_TEST_CLOCK_SKEW_NS"))
		br->skew_ns = strtoll(getenv("PROCREG_TEST_CLOCK_SKEW_NS"), NULL, 10);
	if (RAND_bytes((uint8_t *)&br->incarnation, sizeof(br->incarnation)) != 1)
		br->incarnation = procreg__now_ns();
	snprintf(br->nodes_path, sizeof(br->nodes_path), "%s" PR_NODES_SUFFIX, d->paths.table);
	up.ctx = br;
	cfg.node = br->node;
	cfg.incarnation = br->incarnation;
	cfg.listen = d->o.listen;
	cfg.advertise = d->o.advertise;
	cfg.peers = d->o.peers;
	cfg.npeers = d->o.npeers;
	cfg.cookie = cookie;
	cfg.cookie_len = cookie_len;
	cfg.flush_bytes = d->o.bridge_flush_bytes;
	cfg.queue_max = d->o.max_mesh_queue;
	cfg.heartbeat_ms = d->o.bridge_heartbeat_ms;
	cfg.timeout_ms = d->o.bridge_timeout_ms;
	cfg.scope = d->paths.scope;
	cfg.opts = (const char *const *)d->o.bridge_opts;
	cfg.nopts = d->o.nbridge_opts;
	d->bridge = br;
	br->b = br->be->open(&cfg, &up, &err);
	memset(cookie, 0, sizeof(cookie));
	if (!br->b) {
		log_err("bridge: %s: %s", br->be->name, strerror(-err));
		bridge_stop(d);
		return err ? err : -EIO;
	}
	br->ev.kind = EV_BRIDGE;
	err = ev_add(d, br->be->fd(br->b), EPOLLIN, &br->ev);
	if (err) {
		bridge_stop(d);
		return err;
	}
	write_nodes_file(br);
	log_msg("bridge: node %s (incarnation %016llx), backend %s, %s%s, %zu peer%s", br->node,
		(unsigned long long)br->incarnation, br->be->name ? br->be->name : "?",
		d->o.listen ? "listening on " : "not listening", d->o.listen ? d->o.listen : "",
		d->o.npeers, d->o.npeers == 1 ? "" : "s");
	return 0;
}

void bridge_event(struct daemon *d)
{
	struct bridge *br = d->bridge;
	uint64_t t0 = procreg__mono_ns();

	/* Not its turn yet: out of the poll until it is (bridge_flush()
	 * puts it back; bridge_due() has the daemon's timer go off then). */
	if (bg_wait(br, t0) > PAUSE_MIN_NS) {
		if (ev_mod(d, br->be->fd(br->b), 0, &br->ev) == 0)
			br->paused = true;
		return;
	}
	br->in_until_ns = t0 + INPUT_SLICE_NS;
	br->walked = false;
	br->be->dispatch(br->b);
	/* A short one leaves the turn as it was (a snapshot's part in it
	 * has set it): under steady traffic, a dispatch in every batch
	 * would otherwise keep the removals' walk from its turn, which
	 * bridge_flush() takes after the dispatches. */
	if (procreg__mono_ns() - t0 >= PAUSE_MIN_NS)
		bg_took(br, t0);
}

bool bridge_take_pending(struct daemon *d, uint64_t off)
{
	return d->bridge && take_swept(d->bridge, off);
}

void bridge_flush(struct daemon *d)
{
	struct bridge *br = d->bridge;
	uint64_t t0;

	/* A part of the removals' walk, in its turn: first, as what it takes
	 * out may give names to claims set aside. Not twice in a row while
	 * what other nodes send waits (paused): the turns alternate, or the
	 * walk would take every one, and the nodes go unread (unheard, and
	 * then dropped as silent) until it is over. */
	if (br->sweeping && !bg_wait(br, t0 = procreg__mono_ns()) && !(br->paused && br->walked)) {
		sweep_part(br, SWEEP_SLOTS);
		bg_took(br, t0);
		br->walked = true;
	}
	shadows_promote(br);
	br->be->flush(br->b);
	if (br->paused && bg_wait(br, procreg__mono_ns()) <= PAUSE_MIN_NS &&
	    ev_mod(d, br->be->fd(br->b), EPOLLIN, &br->ev) == 0)
		br->paused = false;
	if (br->nodes_dirty)
		write_nodes_file(br);
}

void bridge_tick(struct daemon *d)
{
	struct bridge *br = d->bridge;
	uint64_t now = procreg__mono_ns();
	struct ids_used ids;
	bool any = false;

	memset(&ids, 0, sizeof(ids));
	for (size_t i = 0; i < br->nnodes; i++)
		if ((!br->nodes[i].up || !br->nodes[i].synced) && br->nodes[i].linger_until_ns &&
		    now >= br->nodes[i].linger_until_ns) {
			id_mark(&ids, (uint16_t)(i + 1));
			any = true;
		}
	/* Those whose grace ran out since the last tick. */
	if (any)
		nodes_gone(br, &ids);
	/* The removals decided since the last walk began, in one walk, made
	 * in parts from the end of this batch on (bridge_flush()). */
	if (br->sweep_due && !br->sweeping && now - br->swept_ns >= br->sweep_gap_ns) {
		sweep_begin(br);
		br->swept_ns = now;
	}
	write_nodes_file(br);
}

uint64_t bridge_due(struct daemon *d)
{
	struct bridge *br = d->bridge;
	uint64_t now;

	if (!br || (!br->sweeping && !br->paused))
		return UINT64_MAX;
	now = procreg__mono_ns();
	return now + bg_wait(br, now);
}

void bridge_stop(struct daemon *d)
{
	struct bridge *br = d->bridge;

	if (!br)
		return;
	procreg__w_cursor_free(&br->rm.wc);
	d->bridge = NULL;
	if (br->b)
		br->be->close(br->b);
	if (br->dl)
		dlclose(br->dl);
	if (br->resolver_dl)
		dlclose(br->resolver_dl);
	if (br->nodes_path[0])
		unlink(br->nodes_path);
	for (size_t i = 0; i < br->nnodes; i++) {
		hold_reset(br, &br->nodes[i]);
		br->nodes[i].nremovals = 0;
		end_resync(&br->nodes[i]);
	}
	for (size_t i = 0; br->shadows && i < SHADOW_BUCKETS; i++)
		while (br->shadows[i]) {
			struct shadow *s = br->shadows[i];

			br->shadows[i] = s->next;
			free(s);
		}
	free(br->shadows);
	while (br->marked) {
		struct marked *m = br->marked;

		br->marked = m->next;
		free(m);
	}
	free(br->nodes);
	procreg__sidx_free(&br->node_index);
	free(br->buf);
	free(br->hold_buf);
	free(br);
}
