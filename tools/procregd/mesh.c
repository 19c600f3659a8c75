/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * mesh.c - the built-in bridge backend: a TCP full mesh.
 *
 * Every node listens (--listen) and dials the peers it is given (--peer)
 * and the ones its peers tell it about (PEERS), so every pair of nodes
 * ends up with one connection. All sockets are non-blocking and live in an
 * epoll set of the backend's own, whose fd the daemon polls; the only
 * thread is the resolver's (below), for host names.
 *
 * A connection: the handshake of bridge_sec.h (the dialer's HELLO, the
 * acceptor's once the dialer's is acceptable, the dialer's AUTH, the
 * acceptor's once the dialer's checked out), in which both prove they hold
 * the cookie without sending it, for this connection and these two names
 * only, and agree on keys. A wrong proof, another protocol version, or a
 * frame out of place ends it, logged, with a REFUSE to the other side
 * saying why. Then the replication layer gets node_up and sends its
 * snapshot, then its changes: frames, queued in clear, sealed into
 * encrypted records (at most 64 KiB each) as the socket takes them, and
 * opened on the other side before they are decoded. A record that fails
 * its tag (altered, injected, replayed, dropped, reordered), or a frame
 * that does not decode, drops the connection: the next one starts with a
 * fresh snapshot.
 *
 * Two nodes that dial each other at once end up with two connections: the
 * one dialed by the node with the smaller name stays, on both sides.
 *
 * Memory. What a connection holds for its peer counts against one budget
 * for all connections together (--max-mesh-queue): the frames queued for
 * it, and its record buffers past their idle size. Those hold a record
 * coming in until it is whole (up to IN_CAP), what the records opened so
 * far say until a frame ends (PT_CAP), and the record going out (WIRE_CAP):
 * about 320 KiB in all, which a node with the cookie can fill on every
 * connection it opens, a record and a frame it never finishes, and keep
 * filled for as long as it likes. Counted, but only when in use: they grow
 * when a record needs them and go back to 1 KiB each once idle for a tick
 * (or at once when the room is needed), so that the connections of a mesh
 * that is quiet cost the budget nothing and only those moving big records
 * (a snapshot) hold it, a while. Counting them at their full size from the
 * handshake on would have a budget of 1 MiB take three nodes; growing them
 * on demand without counting would bound nothing. When the room runs
 * out, the node holding the most is dropped, one that reads nothing or
 * leaves a record unfinished for a second first (room()).
 *
 * Heartbeats go out when a connection has been idle for heartbeat_ms; a
 * peer heard nothing from for timeout_ms is dropped (node down). Dropped
 * peers are dialed again with backoff.
 *
 * Names. A peer's address may be a host name, and looking one up may wait
 * on a DNS server for seconds, or for ever: never on the daemon's thread,
 * where it would stall every registration on the host. A numeric address
 * is used as it is; a name goes to a small resolver thread, started at the
 * first name. There are two, one for the names of --peer and one for the
 * names other nodes tell of, each taking its names in turn: a node with
 * the cookie can tell of any number of names whose DNS server never
 * answers, and those must not hold up the look-ups of the peers this node
 * was given, which it needs to get back into the mesh. They answer
 * through an eventfd in the mesh's epoll set, and the dial proceeds then.
 * The answer's addresses are tried in turn, one per dial, and the name is
 * looked up again once they are all tried, or after a connection made
 * with one of them ends. A name that does not resolve is retried with the
 * dial's backoff.
 *
 * Addresses told of. Any node with the cookie can name addresses in
 * PEERS, and this node then dials them: a way to make every node connect
 * out to any host and port. So such a target is dropped after
 * LEARNED_TRIES dials that fail, its address is remembered for
 * FORGET_NS (FORGOTTEN_MAX addresses at most, the oldest forgotten
 * first) and not taken again meanwhile, and at most LEARNED_DIALS_TICK of
 * those dials go out a tick, the targets taking turns. A --peer is dialed
 * whenever due, outside that budget.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "accept.h"
#include "bridge_proto.h"
#include "byteorder.h"
#include "procreg/backend.h"
#include "bridge_sec.h"
#include "clock.h"
#include "internal.h"
#include "thread.h"

#define TICK_MS 100
#define HANDSHAKE_MS 5000
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 2000
#define OUT_MAX (64u << 20)         /* a peer this far behind is dropped */
/* The queues and record buffers of every connection together
 * (--max-mesh-queue): without it, a node with the cookie could come up
 * under a thousand names, read nothing, and have this one hold a snapshot
 * and OUT_MAX for each, or send a record it never finishes on each and
 * have this one hold IN_CAP and PT_CAP for each (181 MiB for 900
 * connections, whatever the budget, before they were counted). */
#define QUEUE_MAX_DEFAULT (4 * (size_t)OUT_MAX)
/* A queue that has sent nothing for this long is stalled: its peer does
 * not read; a record or frame begun and not added to for this long is
 * unfinished. Those are dropped first when the budget is used up. */
#define STALL_MS 1000
/* A connection's record buffers: at their idle size in the handshake and
 * whenever idle (1 KiB: HELLO, AUTH, REFUSE are a few hundred bytes, and
 * so are a heartbeat's and most changes' records); grown to the full size
 * for bigger records, counted against --max-mesh-queue while they are. */
#define IN_CAP_HANDSHAKE 1024u
#define WIRE_HANDSHAKE 1024u
#define PT_IDLE 1024u
#define IN_CAP (2 * PR_BS_REC_MAX)   /* a record and the start of the next */
#define PT_CAP (PR_BP_FRAME_MAX + PR_BS_PT_MAX) /* a frame's start and a record */
#define WIRE_CAP (PR_BS_REC_MAX + WIRE_HANDSHAKE)
#define TARGETS_MAX 1024
/* A target another node told of (PEERS) is dropped after this many dials
 * in a row that did not authenticate, about 25 s of tries: its slot goes to
 * the next one told of. Otherwise any node with the cookie could fill
 * every slot for good with addresses where nothing answers, so that the
 * nodes told of later are never dialed, and have this one dial them all
 * for as long as it runs. A --peer is tried for ever. */
#define LEARNED_TRIES 16
/* A target told of and dropped after its tries is not taken again when a
 * PEERS names it within FORGET_NS: else re-sending the same PEERS would
 * have it dialed LEARNED_TRIES times more each time. The most remembered:
 * FORGOTTEN_MAX (16 bytes each, and as much again in the index), the
 * oldest forgotten first. A node that really was down for a while and
 * comes back dials in (it learns of this node from its peers), or is told
 * of again once the time is up. */
#define FORGOTTEN_MAX 4096
#define FORGET_NS (10 * 60 * 1000000000ull)
/* Dials of targets told of, a tick at most (100 a second): a node with
 * the cookie can fill the 1,024 slots with addresses that never
 * authenticate, and each of them is dialed LEARNED_TRIES times in about
 * 25 s, 650 connections a second to wherever it chose. The targets take
 * turns: those past the budget wait for the next tick. Enough for a mesh
 * of a hundred nodes to close within a second or two. */
#define LEARNED_DIALS_TICK 10
#define CONNS_MAX 1024              /* connections, handshakes included */
/* Accepted connections not yet authenticated: anyone who can reach the
 * port can open them, and each costs an fd until HANDSHAKE_MS is up, so
 * they are capped well below what the daemon's clients need. */
#define HANDSHAKES_MAX 64
#define ADDRS_MAX 8                 /* of one name's answer, tried in turn */
#define RESOLVE_LOG_NS (60 * 1000000000ull) /* a name that keeps failing: a line a minute */
#define UNAUTH_LINES 10               /* a second, about connections never authenticated */

enum conn_state { C_CONNECTING, C_HANDSHAKE, C_UP };
enum obj_kind { O_LISTEN, O_TIMER, O_CONN, O_RESOLVED, O_SNAP };

struct obj {
	enum obj_kind kind;
};

struct target;
struct mesh;

struct conn {
	struct obj o;
	struct mesh *m;
	int fd;
	enum conn_state state;
	bool outbound;
	bool dead;
	bool authed;                  /* its handshake done: a node with the cookie */
	struct target *target;        /* outbound: what we dialed */
	char remote[PR_BP_ADDR_MAX + 1]; /* the address dialed or accepted from, for the log */
	struct sockaddr_storage dialed;   /* outbound: the address dialed */
	socklen_t dialed_len;
	char peer[PR_BP_NODE_MAX + 1];
	char peer_addr[PR_BP_ADDR_MAX + 1];
	uint64_t peer_inc;
	struct pr_bs *bs;             /* the handshake, then the records */
	uint8_t *in;                  /* bytes from the socket */
	size_t in_len, in_cap;        /* small until the peer is authenticated */
	uint8_t *pt;                  /* what the records opened so far say */
	size_t pt_len, pt_cap;
	uint8_t *out;                 /* frames for the peer, not sealed yet */
	size_t out_len, out_off, out_cap;
	uint8_t *wire;                /* bytes for the socket: handshake frames, a record */
	size_t wire_len, wire_off, wire_cap;
	/* What in, pt and wire hold past their idle size: counted in
	 * mesh.bufs, against --max-mesh-queue. */
	size_t bufs;
	/* Its records being read (conn_consume()): in and pt are pointed
	 * into further up the stack, not to be moved or freed. */
	bool consuming;
	/* Up, its snapshot being written (serve_snapshot()): sent its parts
	 * and every change since the one it is as of, but no heartbeat until
	 * its last part, only keep_alive()'s empty PEERS; and not read. */
	void *snap;
	uint64_t snap_turn;           /* when it was last served a part (mesh.snap_turns) */
	bool snap_started;            /* a part of it written: no newcomer any more (room()) */
	size_t snap_bytes;            /* its parts' size: allowed on top of OUT_MAX */
	bool want_out;
	bool overflow;                /* broadcast() could not queue: drop at flush */
	/* Dropped for the room it took (room()): its buffers are given back
	 * at once (bufs_drop()), the connection ends at the next flush or
	 * dispatch (node_down writes the table, so not from broadcast()). */
	bool evicted;
	uint64_t pending_ns;          /* when its queue last went from empty to not */
	size_t queued_since_send;     /* by broadcast(), since its last send (flush_bytes) */
	uint64_t started_ns, last_rx_ns, last_tx_ns;
	uint64_t bytes_in, bytes_out;
	struct conn *next;
};

struct target {
	char addr[PR_BP_ADDR_MAX + 1];
	char node[PR_BP_NODE_MAX + 1];    /* learned on connect */
	/* The node last authenticated at this address, whichever side
	 * dialed and whichever connection stayed: what procreg stats names
	 * the peer by. */
	char seen[PR_BP_NODE_MAX + 1];
	struct conn *conn;
	uint64_t next_try_ns;
	uint32_t backoff_ms;
	uint32_t tries;                   /* failed tries (dial or look-up) since one authenticated */
	/* A host name's latest answer: the addresses not tried yet are
	 * addrs[next_addr..naddrs). */
	bool resolving;                   /* asked the resolver, no answer yet */
	struct sockaddr_storage addrs[ADDRS_MAX];
	socklen_t addr_lens[ADDRS_MAX];
	unsigned naddrs, next_addr;
	uint64_t resolve_fails, resolve_logged_ns;
};

/* The resolver's queues, a thread each: --peer's names, and the names
 * other nodes told of. */
enum { RQ_PEER, RQ_LEARNED, RQ_N };

/* One look-up: the daemon's thread fills in the question, a resolver
 * thread the answer; on a list under the resolver's mutex in between, and
 * owned by the one thread that took it off. */
struct lookup {
	struct lookup *next;
	size_t target;                    /* index in mesh.targets, which never moves */
	char addr[PR_BP_ADDR_MAX + 1];
	int gai_err;                      /* getaddrinfo()'s, 0: naddrs addresses */
	int sys_err;                      /* errno, for EAI_SYSTEM */
	struct sockaddr_storage addrs[ADDRS_MAX];
	socklen_t addr_lens[ADDRS_MAX];
	unsigned naddrs;
};

/* Shared by the daemon's thread and the resolver threads, under mu. A
 * thread is detached and never waited for: one stuck in a DNS query must
 * not hold up the daemon's exit. So the last of them all to let go of the
 * struct frees it (refs), and a thread writes efd only under mu while
 * !stop: the mesh closes efd after setting stop. Thread Q takes from
 * todo[Q] only; started (the daemon's thread's alone) says which run. */
struct resolver {
	pthread_mutex_t mu;
	pthread_cond_t cv[RQ_N];
	struct lookup *todo[RQ_N], **todo_tail[RQ_N];
	struct lookup *done;
	bool stop;
	int refs;
	int efd;
	bool started[RQ_N];
};

/* A target told of, dropped after its tries (FORGOTTEN_MAX of them, a
 * ring): the keyed hash of its address, and when. */
struct forgotten {
	uint64_t key;
	uint64_t when_ns;
};

struct mesh {
	struct pr_bridge_config c;
	struct pr_bridge_up up;
	char node[PR_BP_NODE_MAX + 1];
	char listen_addr[PR_BP_ADDR_MAX + 1];   /* what HELLO says: --advertise, else --listen */
	uint8_t *cookie;
	size_t cookie_len;
	int epfd, lfd, tfd;
	int spare;                    /* given up to take a connection when out of fds */
	struct pr_ratelimit refused_log;
	/* Bytes of buffer the connections' queues hold (their out_cap, all
	 * together), those their record buffers hold past their idle size
	 * (conn.bufs, all together), and the most both may: --max-mesh-queue. */
	size_t queued, bufs, queue_max;
	struct pr_ratelimit evict_log;
	/* Lines about accepted connections that never authenticated: anyone
	 * who reaches the port causes them (unauth_pass()). */
	uint64_t unauth_since_ns;     /* this second's start */
	unsigned unauth_lines;        /* lines logged in it */
	uint64_t unauth_held;         /* lines held back since the last said so */
	struct obj listen_o, timer_o;
	/* Snapshots being written (conn.snap), and a timer set to when the
	 * next part may go (serve_snapshot()), so that the daemon dispatches
	 * then. */
	size_t snapping;
	uint64_t snap_turns;          /* parts served so far: conn.snap_turn */
	int snap_tfd;
	struct obj snap_o;
	size_t rr;                    /* where the next dispatch starts in its events */
	struct conn *conns;
	size_t nconns;
	struct target *targets;
	size_t ntargets;
	size_t nconfigured;               /* targets[0..nconfigured) came from --peer */
	size_t ntargets_dropped;          /* slots in targets[] emptied, to reuse */
	/* A PEERS frame names up to PR_BP_PEERS_MAX nodes, each looked up
	 * among as many targets and connections: by these indexes, not by
	 * a scan of all, or one frame would cost a million comparisons. */
	struct pr_str_index target_index;    /* address -> index in targets */
	struct pr_str_index up_index;        /* node -> its connection, C_UP */
	uint32_t learned_tries;           /* LEARNED_TRIES, or PROCREG_TEST_LEARNED_TRIES */
	struct pr_ratelimit forgot_log;
	/* Targets told of and dropped (FORGET_NS): a ring, allocated at the
	 * first, the next to reuse at forgot_next; the index is address ->
	 * place in the ring. */
	struct forgotten *forgot;
	size_t forgot_next;
	struct pr_str_index forgot_index;
	struct pr_ratelimit retold_log;   /* a PEERS named one of them */
	/* The learned target (an offset past nconfigured) whose turn is
	 * next when LEARNED_DIALS_TICK runs out in a tick. */
	size_t learned_turn;
	struct pr_ratelimit budget_log;
	struct resolver *res;         /* NULL until the first host name */
	struct obj res_o;
};

static uint64_t now_ns(void)
{
	return procreg__mono_ns();
}

/* "host:port" (the host maybe in brackets) -> HOST, *PORT pointing into HP. */
static int split_addr(const char *hp, char host[PR_BP_ADDR_MAX + 1], const char **port)
{
	const char *colon = strrchr(hp, ':');
	size_t hl;

	if (!colon || !colon[1] || (hl = (size_t)(colon - hp)) > PR_BP_ADDR_MAX)
		return -EINVAL;
	memcpy(host, hp, hl);
	host[hl] = 0;
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = 0;
	}
	*port = colon + 1;
	return 0;
}

/* "host:port" -> up to MAX addresses, in getaddrinfo()'s order: 0, or
 * getaddrinfo()'s error (EAI_NONAME for a name when FLAGS has
 * AI_NUMERICHOST). May block on DNS without AI_NUMERICHOST. */
static int lookup_addr(const char *hp, int flags, struct sockaddr_storage *ss, socklen_t *lens,
		       unsigned max, unsigned *n)
{
	char host[PR_BP_ADDR_MAX + 1];
	const char *port;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = flags }, *ai, *a;
	int r;

	*n = 0;
	if (split_addr(hp, host, &port) < 0)
		return EAI_NONAME;
	r = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
	if (r != 0)
		return r;
	for (a = ai; a && *n < max; a = a->ai_next) {
		if (a->ai_addrlen > sizeof(*ss))
			continue;
		memcpy(&ss[*n], a->ai_addr, a->ai_addrlen);
		lens[(*n)++] = a->ai_addrlen;
	}
	freeaddrinfo(ai);
	return *n ? 0 : EAI_NONAME;
}

/* ---- output ----------------------------------------------------------- */

static size_t conn_live(const struct conn *c)
{
	return c->out_len - c->out_off;
}

/* What C holds against --max-mesh-queue, for room() to compare: what its
 * queue has not sent, and its record buffers past their idle size. */
static size_t conn_weight(const struct conn *c)
{
	return conn_live(c) + c->bufs;
}

/* What all connections hold against --max-mesh-queue. */
static size_t held(const struct mesh *m)
{
	return m->queued + m->bufs;
}

/* Whether C's queue (or the record sealed from it) has sent nothing for
 * STALL_MS while it held bytes. */
static bool conn_stalled(const struct conn *c, uint64_t now)
{
	uint64_t since = c->last_tx_ns > c->pending_ns ? c->last_tx_ns : c->pending_ns;

	/* Not while its snapshot is being written: its node may be writing
	 * this one's the while, not reading until it is done, as this node
	 * does not read it (conn_consume()). */
	if (c->snap)
		return false;
	return (conn_live(c) || c->wire_off < c->wire_len) &&
	       now - since >= (uint64_t)STALL_MS * 1000000ull;
}

/* Whether C's peer began a record or a frame, in buffers grown for it,
 * and has sent nothing more for STALL_MS. Not one whose snapshot is being
 * written: this node does not read it meanwhile. */
static bool conn_unfinished(const struct conn *c, uint64_t now)
{
	return c->bufs && (c->in_len || c->pt_len) && !c->snap &&
	       now - c->last_rx_ns >= (uint64_t)STALL_MS * 1000000ull;
}

static void queue_free(struct mesh *m, struct conn *c)
{
	m->queued -= c->out_cap;
	free(c->out);
	c->out = NULL;
	c->out_cap = c->out_len = c->out_off = 0;
}

static void evicted_held(struct mesh *m, uint64_t held)
{
	if (held)
		pr_bridge_log(&m->up, LOG_WARNING, "bridge: (%llu more nodes dropped for "
			      "--max-mesh-queue in the last second)", (unsigned long long)held);
}

/* Record buffer *P of C (*CAP bytes, IDLE its idle size) made CAP_NEW
 * bytes, what it holds kept, and counted past IDLE: 0, or -ENOMEM. */
static int buf_resize(struct mesh *m, struct conn *c, uint8_t **p, size_t *cap, size_t idle,
		      size_t cap_new)
{
	uint8_t *n = realloc(*p, cap_new);

	if (!n)
		return -ENOMEM;
	*p = n;
	m->bufs -= *cap - idle;
	c->bufs -= *cap - idle;
	m->bufs += cap_new - idle;
	c->bufs += cap_new - idle;
	*cap = cap_new;
	return 0;
}

/* C's record buffers back to their idle size, each that holds no more
 * than that: IN_PT in and pt (not while they are read: conn.consuming),
 * WIRE wire (once sent). */
static void bufs_give_back(struct mesh *m, struct conn *c, bool in_pt, bool wire)
{
	if (c->dead || c->evicted || !c->bufs)
		return;
	if (in_pt && !c->consuming && c->in_cap > IN_CAP_HANDSHAKE && c->in_len <= IN_CAP_HANDSHAKE)
		(void)buf_resize(m, c, &c->in, &c->in_cap, IN_CAP_HANDSHAKE, IN_CAP_HANDSHAKE);
	if (in_pt && !c->consuming && c->pt_cap > PT_IDLE && c->pt_len <= PT_IDLE)
		(void)buf_resize(m, c, &c->pt, &c->pt_cap, PT_IDLE, PT_IDLE);
	if (wire && c->wire_cap > WIRE_HANDSHAKE && c->wire_off == c->wire_len) {
		c->wire_off = c->wire_len = 0;
		(void)buf_resize(m, c, &c->wire, &c->wire_cap, WIRE_HANDSHAKE, WIRE_HANDSHAKE);
	}
}

/* C dropped or ended: its record buffers off the budget and freed, but
 * for in and pt while they are read (conn.consuming): those are freed
 * once that is over (conn_consume(), reap()), not counted meanwhile (one
 * connection's at most: records are read one connection at a time). */
static void bufs_drop(struct mesh *m, struct conn *c)
{
	m->bufs -= c->bufs;
	c->bufs = 0;
	free(c->wire);
	c->wire = NULL;
	c->wire_cap = c->wire_len = c->wire_off = 0;
	if (c->consuming)
		return;
	free(c->in);
	c->in = NULL;
	c->in_cap = c->in_len = 0;
	free(c->pt);
	c->pt = NULL;
	c->pt_cap = c->pt_len = 0;
}

/* Drop C for the room it takes: its buffers now, the connection at the
 * next flush or dispatch (kill_evicted()). Said once a second at most: a
 * node with the cookie may cause it for a thousand connections. SNAP:
 * for want of room for its snapshot. */
static void evict(struct mesh *m, struct conn *c, bool snap)
{
	uint64_t now = now_ns(), held_back;
	const char *why = conn_stalled(c, now) ? ", not reading"
			  : conn_unfinished(c, now) ? ", a record unfinished"
			  : snap ? ", no room for its snapshot" : "";

	if (pr_ratelimit_pass(&m->evict_log, now, &held_back)) {
		evicted_held(m, held_back);
		pr_bridge_log(&m->up, LOG_WARNING, "bridge: node %s: dropped: the connections to "
			      "other nodes hold %zu bytes of queues and record buffers, "
			      "--max-mesh-queue %zu, and this node's go first (%zu bytes queued, "
			      "%zu of buffers%s)", c->peer, held(m), m->queue_max, conn_live(c),
			      c->bufs, why);
	}
	queue_free(m, c);
	bufs_drop(m, c);
	c->evicted = true;
}

/* Whether C may take EXTRA more bytes of buffer, for its queue or its
 * records, within --max-mesh-queue; WEIGHT: what it holds once it has
 * (conn_weight()); SNAP: the bytes are its snapshot's first part. Room is made by
 * giving back what is not in use (the buffers of empty queues, record
 * buffers idle, and those of connections ended, not yet reaped), then by
 * dropping the connection that holds the most: among those stalled
 * (their peers read nothing) or with a record unfinished (their peers
 * send nothing more of it) first, else C if it is a newcomer queuing its
 * snapshot (a node that does read keeps its place against any number of
 * new connections), else any. C is dropped if it is that one (false).
 * C alone (nothing held for anyone else) takes what it needs: one
 * connection's bound (OUT_MAX) may be over the budget. */
static bool room(struct mesh *m, struct conn *c, size_t extra, size_t weight, bool snap)
{
	uint64_t now = now_ns();

	if (held(m) + extra <= m->queue_max)
		return true;
	for (struct conn *o = m->conns; o; o = o->next) {
		if (o == c)
			continue;
		if (o->out_cap && (o->dead || !conn_live(o)))
			queue_free(m, o);
		if (o->dead && o->bufs)
			bufs_drop(m, o);
		bufs_give_back(m, o, true, true);
	}
	while (held(m) + extra > m->queue_max) {
		struct conn *v = c;
		size_t v_weight = weight;
		int v_rank = conn_stalled(c, now) || conn_unfinished(c, now) ? 2 : snap ? 1 : 0;
		bool others = false;

		for (struct conn *o = m->conns; o; o = o->next) {
			size_t w = conn_weight(o);
			int rank;

			if (o == c || o->dead || o->evicted || !w)
				continue;
			others = true;
			rank = conn_stalled(o, now) || conn_unfinished(o, now) ? 2 : 0;
			if (rank > v_rank || (rank == v_rank && w > v_weight)) {
				v = o;
				v_weight = w;
				v_rank = rank;
			}
		}
		if (!others)
			return true;
		evict(m, v, v == c && snap);
		if (v == c)
			return false;
	}
	return true;
}

/* Record buffer *P of C grown to CAP_NEW, within --max-mesh-queue
 * (room()): 0, -ENOBUFS if C was dropped for the room (conn.evicted),
 * or -ENOMEM. */
static int buf_grow(struct mesh *m, struct conn *c, uint8_t **p, size_t *cap, size_t idle,
		    size_t cap_new)
{
	size_t extra = cap_new - *cap;

	if (c->evicted)
		return -ENOBUFS;
	if (!room(m, c, extra, conn_weight(c) + extra, false))
		return -ENOBUFS;
	return buf_resize(m, c, p, cap, idle, cap_new);
}

/* Queue LEN bytes of frames for C, to be sealed as the socket takes them.
 * Its snapshot's parts (SNAP) are queued whatever their size, however big
 * the table; what comes beside them is bounded by OUT_MAX. All queues
 * together are bounded by --max-mesh-queue, with their record buffers
 * (room()). */
static int conn_queue_b(struct conn *c, const uint8_t *data, size_t len, bool snap)
{
	struct mesh *m = c->m;

	if (c->dead || c->evicted)
		return -EPIPE;
	if (!snap && conn_live(c) + len > OUT_MAX + c->snap_bytes)
		return -ENOBUFS;
	if (snap)
		c->snap_bytes += len;
	if (c->out_off == c->out_len) {
		c->out_off = c->out_len = 0;
		c->pending_ns = now_ns();
	}
	if (c->out_len + len > c->out_cap) {
		size_t live = conn_live(c), cap = c->out_cap ? c->out_cap : 65536;
		uint8_t *n;

		if (c->out_off) {
			memmove(c->out, c->out + c->out_off, live);
			c->out_off = 0;
			c->out_len = live;
		}
		while (cap < live + len)
			cap *= 2;
		if (cap != c->out_cap) {
			if (!room(m, c, cap - c->out_cap, conn_weight(c) + len,
				  snap && !c->snap_started))
				return -ENOBUFS;
			n = realloc(c->out, cap);
			if (!n)
				return -ENOMEM;
			m->queued += cap - c->out_cap;
			c->out = n;
			c->out_cap = cap;
		}
	}
	memcpy(c->out + c->out_len, data, len);
	c->out_len += len;
	return 0;
}

static int conn_queue(struct conn *c, const uint8_t *data, size_t len)
{
	return conn_queue_b(c, data, len, false);
}

/* A handshake frame (HELLO, AUTH, REFUSE), in clear: straight to the
 * wire, ahead of any record. */
static void conn_queue_clear(struct conn *c, const uint8_t *data, size_t len)
{
	if (c->dead || c->wire_cap - c->wire_len < len)
		return; /* a handshake frame never fills WIRE_HANDSHAKE */
	memcpy(c->wire + c->wire_len, data, len);
	c->wire_len += len;
}

static void conn_kill(struct mesh *m, struct conn *c, const char *why);

/* Send what the socket takes now, without blocking, sealing the queued
 * frames into records as the wire empties (one record ahead at most: a
 * big snapshot is not encrypted twice over in memory): 0, or a negative
 * errno for a connection that is broken (EAGAIN is not). */
static int conn_send_some(struct conn *c)
{
	if (c->evicted)
		return 0; /* its buffers are gone; it ends soon */
	for (;;) {
		ssize_t n;

		if (c->wire_off == c->wire_len) {
			size_t len = conn_live(c);
			int err;

			c->wire_off = c->wire_len = 0;
			if (c->state != C_UP || !len)
				return 0;
			if (len > PR_BS_PT_MAX)
				len = PR_BS_PT_MAX;
			/* A record bigger than the idle buffer takes the
			 * full one (given back at a tick once sent). */
			if (len + PR_BS_OVERHEAD > c->wire_cap &&
			    (err = buf_grow(c->m, c, &c->wire, &c->wire_cap, WIRE_HANDSHAKE,
					    WIRE_CAP)) < 0)
				return c->evicted ? 0 : err;
			if ((err = procreg__bs_seal(c->bs, c->out + c->out_off, len, c->wire)) < 0)
				return err;
			c->out_off += len;
			c->wire_len = len + PR_BS_OVERHEAD;
		}
		n = send(c->fd, c->wire + c->wire_off, c->wire_len - c->wire_off,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		c->wire_off += (size_t)n;
		c->bytes_out += (uint64_t)n;
		c->last_tx_ns = now_ns();
		c->queued_since_send = 0;
	}
}

static bool conn_pending(const struct conn *c)
{
	return c->wire_off < c->wire_len || (c->state == C_UP && c->out_off < c->out_len);
}

/* What C's fd is polled for: its input, unless its snapshot is being
 * written (level-triggered, an input left unread would wake the daemon
 * again and again); output, while some waits. */
static void conn_events(struct mesh *m, struct conn *c)
{
	struct epoll_event e = { .events = (c->snap ? 0 : EPOLLIN) | (c->want_out ? EPOLLOUT : 0),
				 .data.ptr = &c->o };

	epoll_ctl(m->epfd, EPOLL_CTL_MOD, c->fd, &e);
}

static void conn_flush(struct mesh *m, struct conn *c)
{
	bool want;
	int err;

	if (c->dead)
		return;
	if ((err = conn_send_some(c)) < 0) {
		conn_kill(m, c, strerror(-err));
		return;
	}
	if (c->out_off == c->out_len && c->out_cap > (1u << 20))
		queue_free(m, c); /* a snapshot went out: its buffer back */
	want = conn_pending(c);
	if (want != c->want_out && c->state != C_CONNECTING) {
		c->want_out = want;
		conn_events(m, c);
	}
}

/* ---- connections ------------------------------------------------------ */

static bool up_as(const struct conn *c, const char *node)
{
	return !c->dead && c->state == C_UP && !strcmp(c->peer, node);
}

static struct conn *up_conn(struct mesh *m, const char *node)
{
	uint64_t v;

	if (procreg__sidx_get(&m->up_index, node, strlen(node), &v) == 0 &&
	    up_as((struct conn *)(uintptr_t)v, node))
		return (struct conn *)(uintptr_t)v;
	if (!m->up_index.partial)
		return NULL;
	for (struct conn *c = m->conns; c; c = c->next)
		if (up_as(c, node))
			return c;
	return NULL;
}

/* The next dial of T no sooner than its backoff, which doubles. */
static void backoff(struct target *t)
{
	t->tries++;
	t->next_try_ns = now_ns() + (uint64_t)t->backoff_ms * 1000000ull;
	t->backoff_ms = t->backoff_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : t->backoff_ms * 2;
}

/* A new second for the lines about unauthenticated connections (at
 * NOW, if the last one is over): how many were held back in it, said. */
static void unauth_second(struct mesh *m, uint64_t now)
{
	if (now - m->unauth_since_ns < 1000000000ull)
		return;
	if (m->unauth_held)
		pr_bridge_log(&m->up, LOG_WARNING,
			      "bridge: (%llu more lines about unauthenticated connections held back)",
			      (unsigned long long)m->unauth_held);
	m->unauth_since_ns = now;
	m->unauth_lines = 0;
	m->unauth_held = 0;
}

/* Whether a line at LEVEL about connection C may go to the log. One
 * about a connection accepted here that never authenticated (garbage, a
 * wrong cookie, a handshake never finished) is anyone's to cause, a line
 * per connection: UNAUTH_LINES of those a second at most, then a line
 * (once the second is over) that says how many were held back. Debug
 * lines (asked for) and lines about our own dials (the dial schedule
 * bounds them) are not limited. */
static bool unauth_pass(struct mesh *m, const struct conn *c, int level)
{
	if (c->outbound || c->state == C_UP || c->authed || level >= LOG_DEBUG)
		return true;
	unauth_second(m, now_ns());
	if (m->unauth_lines < UNAUTH_LINES) {
		m->unauth_lines++;
		return true;
	}
	m->unauth_held++;
	return false;
}

/* End connection C, saying WHY (NULL: quietly) at LEVEL: LOG_WARNING
 * for a fault (conn_kill()), LOG_NOTICE for a node that goes down in the
 * ordinary way (closed, silent, replaced), LOG_DEBUG for a connection
 * that never came up and was closed from the other side (one of two
 * dials that crossed, a retry). */
static void conn_kill_at(struct mesh *m, struct conn *c, int level, const char *why)
{
	if (c->dead)
		return;
	c->dead = true;
	if (c->snap) {
		m->up.snapshot_end(m->up.ctx, c->snap);
		c->snap = NULL;
		m->snapping--;
	}
	if (c->state == C_UP)
		procreg__sidx_del(&m->up_index, c->peer, strlen(c->peer), (uint64_t)(uintptr_t)c);
	epoll_ctl(m->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	if (c->state == C_UP) {
		/* WHY NULL: said already (evict()). */
		if (why)
			pr_bridge_log(&m->up, level, "bridge: node %s: down (%s)", c->peer, why);
		m->up.node_down(m->up.ctx, c->peer);
	} else if (why && unauth_pass(m, c, level)) {
		pr_bridge_log(&m->up, level, "bridge: connection %s %s%s%s%s: dropped (%s)",
			      c->outbound ? "to" : "from", c->remote, c->peer[0] ? " (node " : "",
			      c->peer, c->peer[0] ? ")" : "", why);
	}
	if (c->target) {
		c->target->conn = NULL;
		backoff(c->target);
		c->target = NULL;
	}
}

static void conn_kill(struct mesh *m, struct conn *c, const char *why)
{
	conn_kill_at(m, c, LOG_WARNING, why);
}

/* Free the connections killed during a dispatch: nothing refers to them
 * once it is over. */
static void reap(struct mesh *m)
{
	struct conn **cp = &m->conns;

	while (*cp) {
		struct conn *c = *cp;

		if (c->dead) {
			*cp = c->next;
			m->nconns--;
			m->queued -= c->out_cap;
			m->bufs -= c->bufs;
			procreg__bs_free(c->bs);
			free(c->in);
			free(c->pt);
			free(c->out);
			free(c->wire);
			free(c);
		} else {
			cp = &c->next;
		}
	}
}

static struct conn *conn_new(struct mesh *m, int fd, bool outbound, const char *remote)
{
	struct conn *c = calloc(1, sizeof(*c));
	struct pr_bs_config bc = { .cookie = m->cookie, .cookie_len = m->cookie_len,
				   .node = m->node, .incarnation = m->c.incarnation,
				   .addr = m->listen_addr, .dialer = outbound };

	if (!c)
		return NULL;
	c->in_cap = IN_CAP_HANDSHAKE;
	c->in = malloc(c->in_cap);
	c->wire_cap = WIRE_HANDSHAKE;
	c->wire = malloc(c->wire_cap);
	if (!c->in || !c->wire || procreg__bs_new(&c->bs, &bc) < 0) {
		free(c->in);
		free(c->wire);
		free(c);
		return NULL;
	}
	snprintf(c->remote, sizeof(c->remote), "%s", remote);
	c->o.kind = O_CONN;
	c->m = m;
	c->fd = fd;
	c->outbound = outbound;
	c->state = outbound ? C_CONNECTING : C_HANDSHAKE;
	c->started_ns = c->last_rx_ns = c->last_tx_ns = now_ns();
	c->next = m->conns;
	m->conns = c;
	m->nconns++;
	return c;
}

/* The dialer's first frame. The acceptor waits for it before it says
 * anything. */
static void send_hello(struct mesh *m, struct conn *c)
{
	uint8_t buf[PR_BS_HELLO_MAX];
	size_t pos = 0;
	int err = procreg__bs_hello(c->bs, buf, sizeof(buf), &pos);

	if (err < 0) {
		conn_kill(m, c, strerror(-err));
		return;
	}
	conn_queue_clear(c, buf, pos);
	conn_flush(m, c);
}

/* ---- names: the resolver thread ---------------------------------------- */

static void resolver_free(struct resolver *r)
{
	for (int q = 0; q < RQ_N; q++)
		pthread_cond_destroy(&r->cv[q]);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

static void lookups_free(struct lookup *l)
{
	while (l) {
		struct lookup *next = l->next;

		free(l);
		l = next;
	}
}

/* A resolver thread, for queue Q: one look-up at a time, in the order
 * asked. A name whose DNS server does not answer delays the names asked
 * after it in its queue, never the other queue's, never the daemon. */
static void resolver_run(struct resolver *r, int q)
{
	bool last;

	pthread_mutex_lock(&r->mu);
	for (;;) {
		struct lookup *l;
		uint64_t one = 1;

		while (!r->todo[q] && !r->stop)
			pthread_cond_wait(&r->cv[q], &r->mu);
		if (r->stop)
			break;
		l = r->todo[q];
		r->todo[q] = l->next;
		if (!r->todo[q])
			r->todo_tail[q] = &r->todo[q];
		pthread_mutex_unlock(&r->mu);
		l->gai_err = lookup_addr(l->addr, 0, l->addrs, l->addr_lens, ADDRS_MAX, &l->naddrs);
		if (l->gai_err == EAI_SYSTEM)
			l->sys_err = errno;
		pthread_mutex_lock(&r->mu);
		if (r->stop) {
			free(l);
			break;
		}
		l->next = r->done;
		r->done = l;
		(void)!write(r->efd, &one, sizeof(one));
	}
	last = --r->refs == 0;
	pthread_mutex_unlock(&r->mu);
	if (last)
		resolver_free(r);
}

static void *resolver_peer_main(void *arg)
{
	resolver_run(arg, RQ_PEER);
	return NULL;
}

static void *resolver_learned_main(void *arg)
{
	resolver_run(arg, RQ_LEARNED);
	return NULL;
}

/* The shared struct and its eventfd, no thread yet (resolver_thread()). */
static int resolver_start(struct mesh *m)
{
	struct resolver *r = calloc(1, sizeof(*r));
	struct epoll_event e = { .events = EPOLLIN, .data.ptr = &m->res_o };
	int err;

	if (!r)
		return -ENOMEM;
	pthread_mutex_init(&r->mu, NULL);
	for (int q = 0; q < RQ_N; q++) {
		pthread_cond_init(&r->cv[q], NULL);
		r->todo_tail[q] = &r->todo[q];
	}
	r->refs = 1;    /* the mesh's; each thread adds its own */
	r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	m->res_o.kind = O_RESOLVED;
	if (r->efd < 0 || epoll_ctl(m->epfd, EPOLL_CTL_ADD, r->efd, &e) < 0) {
		err = -errno;
		if (r->efd >= 0)
			close(r->efd);
		resolver_free(r);
		return err;
	}
	m->res = r;
	return 0;
}

/* Queue Q's thread, started at its first name. The mesh holds its
 * reference meanwhile: the struct stays. */
static int resolver_thread(struct resolver *r, int q)
{
	int err;

	pthread_mutex_lock(&r->mu);
	r->refs++;
	pthread_mutex_unlock(&r->mu);
	err = pr_thread_start(q == RQ_PEER ? resolver_peer_main : resolver_learned_main, r);
	if (err) {
		pthread_mutex_lock(&r->mu);
		r->refs--;
		pthread_mutex_unlock(&r->mu);
		return err;
	}
	r->started[q] = true;
	return 0;
}

/* At close: look-ups not started are dropped, and one under way is left
 * to finish on its own (getaddrinfo() cannot be interrupted); its thread
 * then frees what is left. */
static void resolver_stop(struct mesh *m)
{
	struct resolver *r = m->res;
	struct lookup *todo[RQ_N], *done;
	bool last;
	int efd;

	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = true;
	for (int q = 0; q < RQ_N; q++) {
		todo[q] = r->todo[q];
		r->todo[q] = NULL;
		r->todo_tail[q] = &r->todo[q];
		pthread_cond_signal(&r->cv[q]);
	}
	done = r->done;
	r->done = NULL;
	efd = r->efd;
	r->efd = -1;
	last = --r->refs == 0;
	pthread_mutex_unlock(&r->mu);
	epoll_ctl(m->epfd, EPOLL_CTL_DEL, efd, NULL);
	close(efd);
	for (int q = 0; q < RQ_N; q++)
		lookups_free(todo[q]);
	lookups_free(done);
	if (last)
		resolver_free(r);
	m->res = NULL;
}

/* T's name to look up, on --peer's queue or on the one of names told of. */
static int resolver_ask(struct mesh *m, struct target *t)
{
	size_t i = (size_t)(t - m->targets);
	int q = i < m->nconfigured ? RQ_PEER : RQ_LEARNED, err;
	struct resolver *r;
	struct lookup *l;

	if (!m->res && (err = resolver_start(m)) < 0)
		return err;
	r = m->res;
	if (!r->started[q] && (err = resolver_thread(r, q)) < 0)
		return err;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->target = i;
	snprintf(l->addr, sizeof(l->addr), "%s", t->addr);
	pthread_mutex_lock(&r->mu);
	*r->todo_tail[q] = l;
	r->todo_tail[q] = &l->next;
	pthread_cond_signal(&r->cv[q]);
	pthread_mutex_unlock(&r->mu);
	t->resolving = true;
	return 0;
}

/* ---- dialing ------------------------------------------------------------ */

static bool want_dial(struct mesh *m, const struct target *t)
{
	return t->addr[0] && !t->conn && !t->resolving && strcmp(t->node, m->node) &&
	       !(t->node[0] && up_conn(m, t->node));
}

static void resolve_failed(struct mesh *m, struct target *t, const char *why)
{
	uint64_t now = now_ns();

	t->resolve_fails++;
	/* Retried every RETRY_MAX_MS at most, for as long as it fails: the
	 * log says so once a minute, with a count. */
	if (!t->resolve_logged_ns || now - t->resolve_logged_ns >= RESOLVE_LOG_NS) {
		pr_bridge_log(&m->up, LOG_WARNING,
			      "bridge: peer %s: cannot resolve: %s (%llu failed so far); retrying",
			      t->addr, why, (unsigned long long)t->resolve_fails);
		t->resolve_logged_ns = now;
	}
	backoff(t);
}

static void dial_addr(struct mesh *m, struct target *t, const struct sockaddr_storage *ss,
		      socklen_t len)
{
	struct conn *c;
	struct epoll_event e = { .events = EPOLLOUT };
	int fd, one = 1;

	fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (const struct sockaddr *)ss, len) < 0 && errno != EINPROGRESS) {
		close(fd);
		return;
	}
	c = conn_new(m, fd, true, t->addr);
	if (!c) {
		close(fd);
		return;
	}
	c->target = t;
	memcpy(&c->dialed, ss, len);
	c->dialed_len = len;
	t->conn = c;
	e.data.ptr = &c->o;
	if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, fd, &e) < 0)
		conn_kill(m, c, "epoll");
}

/* The next address of T's latest answer; a numeric address at once; a
 * host name's answer, all tried, asked for again (answered in
 * on_resolved()). */
static void dial(struct mesh *m, struct target *t)
{
	char host[PR_BP_ADDR_MAX + 1];
	const char *port;
	struct sockaddr_storage ss;
	socklen_t len;
	unsigned n;
	int r;

	t->next_try_ns = now_ns() + (uint64_t)t->backoff_ms * 1000000ull;
	if (split_addr(t->addr, host, &port) < 0) {
		resolve_failed(m, t, "not HOST:PORT");
		return;
	}
	if (t->next_addr < t->naddrs) {
		unsigned i = t->next_addr++;

		dial_addr(m, t, &t->addrs[i], t->addr_lens[i]);
		return;
	}
	r = lookup_addr(t->addr, AI_NUMERICHOST, &ss, &len, 1, &n);
	if (r == 0) {
		dial_addr(m, t, &ss, len);
	} else if (r != EAI_NONAME) {
		resolve_failed(m, t, gai_strerror(r));
	} else if ((r = resolver_ask(m, t)) < 0) {
		resolve_failed(m, t, strerror(-r));
	}
}

static void on_resolved(struct mesh *m)
{
	struct lookup *l;
	uint64_t x;

	(void)!read(m->res->efd, &x, sizeof(x));
	pthread_mutex_lock(&m->res->mu);
	l = m->res->done;
	m->res->done = NULL;
	pthread_mutex_unlock(&m->res->mu);
	while (l) {
		struct lookup *next = l->next;
		struct target *t = &m->targets[l->target];

		t->resolving = false;
		if (l->gai_err) {
			resolve_failed(m, t, l->gai_err == EAI_SYSTEM ? strerror(l->sys_err)
								    : gai_strerror(l->gai_err));
		} else {
			memcpy(t->addrs, l->addrs, sizeof(t->addrs));
			memcpy(t->addr_lens, l->addr_lens, sizeof(t->addr_lens));
			t->naddrs = l->naddrs;
			t->next_addr = 0;
			if (t->resolve_fails)
				pr_bridge_log(&m->up, LOG_NOTICE, "bridge: peer %s: resolved", t->addr);
			t->resolve_fails = 0;
			t->resolve_logged_ns = 0;
			if (want_dial(m, t))
				dial(m, t);
		}
		free(l);
		l = next;
	}
}

static bool target_is(const struct target *t, const char *addr, size_t len)
{
	return strlen(t->addr) == len && !memcmp(t->addr, addr, len);
}

static struct target *target_find(struct mesh *m, const char *addr, size_t len)
{
	uint64_t v;

	if (procreg__sidx_get(&m->target_index, addr, len, &v) == 0 && target_is(&m->targets[v], addr, len))
		return &m->targets[v];
	if (!m->target_index.partial)
		return NULL;
	for (size_t i = 0; i < m->ntargets; i++)
		if (target_is(&m->targets[i], addr, len))
			return &m->targets[i];
	return NULL;
}

/* ---- targets told of, dropped and remembered (FORGET_NS) --------------- */

/* ADDR[0..LEN) dropped now, after its tries: remembered in the ring, in
 * place of the oldest when it is full. Out of memory, not remembered:
 * a PEERS that names it again has it dialed again, as before. */
static void forget(struct mesh *m, const char *addr, size_t len)
{
	uint64_t key = procreg__sidx_key(&m->forgot_index, addr, len), at;
	struct forgotten *f;

	if (!m->forgot && !(m->forgot = calloc(FORGOTTEN_MAX, sizeof(*m->forgot))))
		return;
	if (procreg__u64map_get(&m->forgot_index.map, key, &at) == 0 && m->forgot[at].key == key) {
		m->forgot[at].when_ns = now_ns();
		return;
	}
	at = m->forgot_next;
	m->forgot_next = (m->forgot_next + 1) % FORGOTTEN_MAX;
	f = &m->forgot[at];
	if (f->key) {
		uint64_t old;

		if (procreg__u64map_get(&m->forgot_index.map, f->key, &old) == 0 && old == at)
			procreg__u64map_del(&m->forgot_index.map, f->key);
		f->key = 0;
	}
	if (procreg__u64map_put(&m->forgot_index.map, key, at) < 0)
		return;
	f->key = key;
	f->when_ns = now_ns();
}

/* Whether ADDR[0..LEN) was dropped less than FORGET_NS ago: *AGO_NS, how
 * long. By its keyed hash alone: another address of the same hash (not
 * to be found without the secret seed) would wait out the time too. */
static bool forgotten(struct mesh *m, const char *addr, size_t len, uint64_t *ago_ns)
{
	uint64_t key, at;

	if (!m->forgot)
		return false;
	key = procreg__sidx_key(&m->forgot_index, addr, len);
	if (procreg__u64map_get(&m->forgot_index.map, key, &at) < 0 || m->forgot[at].key != key)
		return false;
	*ago_ns = now_ns() - m->forgot[at].when_ns;
	return *ago_ns < FORGET_NS;
}

/* T emptied: its slot free for another. */
static void target_drop(struct mesh *m, struct target *t)
{
	procreg__sidx_del(&m->target_index, t->addr, strlen(t->addr), (uint64_t)(t - m->targets));
	memset(t, 0, sizeof(*t));
	m->ntargets_dropped++;
}

static struct target *target_add(struct mesh *m, const char *addr, size_t len)
{
	struct target *t;

	if (len == 0 || len > PR_BP_ADDR_MAX)
		return NULL;
	if ((t = target_find(m, addr, len)))
		return t;
	/* A slot a dropped target left (never one of --peer's), else a new
	 * one. */
	t = NULL;
	for (size_t i = m->nconfigured; m->ntargets_dropped && i < m->ntargets && !t; i++)
		if (!m->targets[i].addr[0]) {
			t = &m->targets[i];
			m->ntargets_dropped--;
		}
	if (!t && m->ntargets < TARGETS_MAX)
		t = &m->targets[m->ntargets++];
	if (!t)
		return NULL;
	memset(t, 0, sizeof(*t));
	memcpy(t->addr, addr, len);
	t->backoff_ms = RETRY_MIN_MS;
	procreg__sidx_put(&m->target_index, addr, len, (uint64_t)(t - m->targets));
	return t;
}

static int snap_send(void *sctx, const uint8_t *frame, size_t len)
{
	return conn_queue_b(sctx, frame, len, true);
}

static void send_peers(struct mesh *m, struct conn *to)
{
	uint8_t *buf = malloc(PR_BP_FRAME_MAX);
	size_t pos = 0, start;

	if (!buf)
		return;
	procreg__bp_begin(buf, PR_BP_FRAME_MAX, &pos, PR_BP_PEERS, 0, 0, 0, &start);
	for (struct conn *c = m->conns; c; c = c->next)
		if (c != to && !c->dead && c->state == C_UP && c->peer_addr[0] &&
		    procreg__bp_add_peer(buf, PR_BP_FRAME_MAX, &pos, start, c->peer, c->peer_addr) < 0)
			break;
	procreg__bp_end(buf, pos, start, 0);
	conn_queue(to, buf, pos);
	free(buf);
}

/* The connection that stays when two join the same pair of nodes: the
 * one dialed by the node whose name sorts first. */
static bool keeper(const struct mesh *m, const struct conn *c)
{
	const char *dialer = c->outbound ? m->node : c->peer;
	const char *other = c->outbound ? c->peer : m->node;

	return strcmp(dialer, other) < 0;
}

static void established(struct mesh *m, struct conn *c)
{
	struct conn *old = up_conn(m, c->peer);

	c->authed = true;
	if (c->target) {
		snprintf(c->target->seen, sizeof(c->target->seen), "%s", c->peer);
		/* A node with the cookie is there: whichever connection stays. */
		c->target->tries = 0;
	}
	if (old) {
		if (keeper(m, old) && !keeper(m, c) && old->peer_inc == c->peer_inc) {
			conn_kill(m, c, NULL);
			return;
		}
		conn_kill_at(m, old, LOG_NOTICE, "replaced by a newer connection");
	}
	/* Records from now on, into buffers at their idle size: they grow
	 * when a record needs them (conn_read(), read_records(),
	 * conn_send_some()). */
	if (!(c->pt = malloc(PT_IDLE))) {
		conn_kill(m, c, "out of memory");
		return;
	}
	c->pt_cap = PT_IDLE;
	if (m->up.node_up(m->up.ctx, c->peer, c->peer_inc, c->peer_addr) < 0) {
		conn_kill(m, c, "refused by the replication layer");
		return;
	}
	c->state = C_UP;
	procreg__sidx_put(&m->up_index, c->peer, strlen(c->peer), (uint64_t)(uintptr_t)c);
	if (c->target) {
		snprintf(c->target->node, sizeof(c->target->node), "%s", c->peer);
		c->target->backoff_ms = RETRY_MIN_MS;
		/* Once this connection ends, the name is looked up afresh. */
		c->target->naddrs = c->target->next_addr = 0;
	}
	pr_bridge_log(&m->up, LOG_NOTICE, "bridge: node %s: up (incarnation %llx, %s %s)", c->peer,
		      (unsigned long long)c->peer_inc, c->outbound ? "dialed" : "accepted from",
		      c->remote);
	/* Its snapshot, as of now, in parts from the end of this dispatch
	 * on (serve_snapshot()). The handshake's last word goes out with
	 * conn_consume()'s flush. */
	if (!(c->snap = m->up.snapshot_begin(m->up.ctx))) {
		conn_kill(m, c, "out of memory");
		return;
	}
	m->snapping++;
	/* Last in turn: after those under way. */
	c->snap_turn = m->snap_turns;
	conn_events(m, c);
	/* And tell the others about it, so the mesh closes whoever dialed
	 * whom. */
	if (c->peer_addr[0]) {
		uint8_t buf[256];
		size_t pos = 0, start;

		procreg__bp_begin(buf, sizeof(buf), &pos, PR_BP_PEERS, 0, 0, 0, &start);
		if (procreg__bp_add_peer(buf, sizeof(buf), &pos, start, c->peer, c->peer_addr) == 0) {
			procreg__bp_end(buf, pos, start, 0);
			for (struct conn *o = m->conns; o; o = o->next)
				if (o != c && !o->dead && o->state == C_UP && !o->snap)
					conn_queue(o, buf, pos);
		}
	}
}

/* End C in the handshake: tell the other side why (REFUSE, in clear, as
 * far as the socket takes it at once), and log WHY. */
static void refuse(struct mesh *m, struct conn *c, uint8_t reason, const char *text,
		   const char *why)
{
	uint8_t buf[PR_BP_HDR + 2 + PR_BP_TEXT_MAX];
	size_t pos = 0;

	if (procreg__bp_put_refuse(buf, sizeof(buf), &pos, reason, text) == 0) {
		conn_queue_clear(c, buf, pos);
		(void)conn_send_some(c);
	}
	/* A node that dialed itself (a --peer list every node shares) is
	 * configuration, said once; anything else refused is a fault. */
	conn_kill_at(m, c, reason == PR_BP_REFUSE_NAME ? LOG_INFO : LOG_WARNING, why);
}

static const char *refuse_reason(uint8_t reason)
{
	switch (reason) {
	case PR_BP_REFUSE_VERSION:
		return "another protocol version";
	case PR_BP_REFUSE_AUTH:
		return "authentication failed";
	case PR_BP_REFUSE_NAME:
		return "it has this node's name";
	case PR_BP_REFUSE_PROTO:
		return "protocol error";
	case PR_BP_REFUSE_TIMEOUT:
		return "handshake timed out";
	default:
		return "reason unknown";
	}
}

/* Whether outbound connection C went to this very node: the address it
 * dialed is the socket's own local address (the kernel answers a local
 * destination from itself) with the port this node listens on. What the
 * other end says (a REFUSE "it has this node's name", a HELLO with this
 * node's name) is unauthenticated and proves nothing: anyone at the
 * address dialed, or on the path, can say it, and a target taken for
 * this node is never dialed again. */
static bool dialed_self(const struct mesh *m, const struct conn *c)
{
	struct sockaddr_storage ls, loc;
	socklen_t ll = sizeof(ls), lcl = sizeof(loc);
	const struct sockaddr_storage *d = &c->dialed;
	in_port_t port;

	if (!c->dialed_len || m->lfd < 0 || getsockname(m->lfd, (struct sockaddr *)&ls, &ll) < 0 ||
	    getsockname(c->fd, (struct sockaddr *)&loc, &lcl) < 0 || loc.ss_family != d->ss_family)
		return false;
	port = ls.ss_family == AF_INET ? ((struct sockaddr_in *)&ls)->sin_port
				       : ((struct sockaddr_in6 *)&ls)->sin6_port;
	if (d->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)d, *l = (const void *)&loc;

		return a->sin_addr.s_addr == l->sin_addr.s_addr && a->sin_port == port;
	}
	if (d->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)d, *l = (const void *)&loc;

		return !memcmp(&a->sin6_addr, &l->sin6_addr, sizeof(a->sin6_addr)) &&
		       a->sin6_port == port;
	}
	return false;
}

/* A frame of the handshake, RAW[0..f->len) in clear. */
static void on_handshake(struct mesh *m, struct conn *c, const uint8_t *raw,
			 const struct pr_bp_frame *f)
{
	uint8_t out[PR_BS_HELLO_MAX + 64];
	size_t pos = 0;
	char why[PR_BP_TEXT_MAX + 96];
	const struct pr_bs_peer *p;
	int r;

	if (f->type == PR_BP_REFUSE) {
		/* Unauthenticated: anyone on the path could have sent it. It
		 * only ever ends a connection not yet up, and is logged. */
		snprintf(why, sizeof(why), "refused by the other side (version %u): %s: %.*s",
			 f->version, refuse_reason(f->reason), (int)f->text_len, f->text);
		/* We dialed ourselves (a --peer list shared by every node): not
		 * again. */
		if (f->reason == PR_BP_REFUSE_NAME && c->target && dialed_self(m, c))
			snprintf(c->target->node, sizeof(c->target->node), "%s", m->node);
		conn_kill_at(m, c, f->reason == PR_BP_REFUSE_NAME ? LOG_INFO : LOG_WARNING, why);
		return;
	}
	r = procreg__bs_handshake(c->bs, raw, f, out, sizeof(out), &pos);
	p = procreg__bs_peer(c->bs);
	if (p->name[0] && !c->peer[0]) {
		snprintf(c->peer, sizeof(c->peer), "%s", p->name);
		snprintf(c->peer_addr, sizeof(c->peer_addr), "%s", p->addr);
		c->peer_inc = p->incarnation;
	}
	if (pos)
		conn_queue_clear(c, out, pos);
	switch (r) {
	case PR_BS_MORE:
		conn_flush(m, c);
		return;
	case PR_BS_UP:
		established(m, c);
		return;
	case -ELOOP:
		if (c->target && dialed_self(m, c))
			snprintf(c->target->node, sizeof(c->target->node), "%s", m->node);
		refuse(m, c, PR_BP_REFUSE_NAME, "a node with this name is at the other end",
		       "it is this node");
		return;
	case -EACCES:
		if (unauth_pass(m, c, LOG_WARNING))
			pr_bridge_log(&m->up, LOG_WARNING, "bridge: connection %s %s (node %s): "
				      "authentication failed (another cookie, or a proof made for "
				      "another connection)", c->outbound ? "to" : "from", c->remote,
				      c->peer);
		refuse(m, c, PR_BP_REFUSE_AUTH, "authentication failed", NULL);
		return;
	case -EPROTO:
		snprintf(why, sizeof(why), "frame type %u out of place in the handshake", f->type);
		refuse(m, c, PR_BP_REFUSE_PROTO, why, why);
		return;
	default:
		conn_kill(m, c, strerror(-r));
		return;
	}
}

/* A frame from an authenticated peer (it came in a record). */
static int on_frame(struct mesh *m, struct conn *c, const struct pr_bp_frame *f)
{
	if (f->type == PR_BP_PEERS) {
		size_t ip = 0;
		struct pr_bp_peer p;

		while (procreg__bp_peer(f, &ip, &p)) {
			char name[PR_BP_NODE_MAX + 1];
			struct target *t;
			uint64_t ago, held;

			memcpy(name, p.name, p.name_len);
			name[p.name_len] = 0;
			if (!strcmp(name, m->node) || up_conn(m, name) || !p.addr_len)
				continue;
			/* Dropped after its tries a while ago (never a --peer):
			 * told of again, it gets no new ones. A line a second:
			 * a node may tell of a thousand, again and again. */
			if (forgotten(m, p.addr, p.addr_len, &ago)) {
				if (pr_ratelimit_pass(&m->retold_log, now_ns(), &held))
					pr_bridge_log(&m->up, LOG_NOTICE,
						      "bridge: peer %.*s (told of by node %s): dropped "
						      "%llu s ago, not dialed again for %llu s more (and "
						      "%llu more such since the last such line)",
						      (int)p.addr_len, p.addr, c->peer,
						      (unsigned long long)(ago / 1000000000ull),
						      (unsigned long long)((FORGET_NS - ago) / 1000000000ull),
						      (unsigned long long)held);
				continue;
			}
			t = target_add(m, p.addr, p.addr_len);
			if (t && !t->conn)
				t->next_try_ns = 0; /* dial at the next tick */
		}
		return 0;
	}
	if (f->type == PR_BP_HEARTBEAT || f->type == PR_BP_SNAP || f->type == PR_BP_CHANGE)
		return m->up.deliver(m->up.ctx, c->peer, f);
	return -EPROTO;
}

/* Another protocol version at the other end: say so on both sides (the
 * other side reads our REFUSE if it is version 3 or later). */
static void other_version(struct mesh *m, struct conn *c, const struct pr_bp_frame *f)
{
	char text[96];

	snprintf(text, sizeof(text), "this node speaks bridge protocol version %u, not %u",
		 PR_BP_VERSION, f->version);
	if (unauth_pass(m, c, LOG_WARNING))
		pr_bridge_log(&m->up, LOG_WARNING, "bridge: connection %s %s: the other side speaks "
			      "bridge protocol version %u, this node version %u: refused (run one "
			      "version on every node)", c->outbound ? "to" : "from", c->remote,
			      f->version, PR_BP_VERSION);
	refuse(m, c, PR_BP_REFUSE_VERSION, text, NULL);
}

/* The handshake's frames in C->in, as long as it lasts: the bytes used. */
static size_t read_handshake(struct mesh *m, struct conn *c)
{
	size_t pos = 0;

	while (!c->dead && c->state == C_HANDSHAKE) {
		struct pr_bp_frame f;
		size_t start = pos;
		int r = procreg__bp_next(c->in, c->in_len, &pos, &f);

		if (r == 0)
			break;
		if (r == -EPROTONOSUPPORT)
			other_version(m, c, &f);
		else if (r < 0)
			conn_kill(m, c, "malformed frame");
		else
			on_handshake(m, c, c->in + start, &f);
	}
	return pos;
}

/* Room in C->pt for what the record at IN[0..LEN) says, once it is whole
 * (bigger than the idle buffer: the full one, given back at a tick once
 * idle): 0, or -ENOBUFS (C dropped for the room) or -ENOMEM. What is left
 * in pt is the start of a frame, shorter than PR_BP_FRAME_MAX: PT_CAP
 * always has room for a record past it. */
static int pt_room(struct mesh *m, struct conn *c, const uint8_t *in, size_t len)
{
	size_t rl;

	if (len < PR_BS_REC_HDR)
		return 0;
	rl = pr_get32(in);
	if (rl > len || rl <= PR_BS_OVERHEAD || rl > PR_BS_REC_MAX ||
	    c->pt_len + rl - PR_BS_OVERHEAD <= c->pt_cap)
		return 0; /* not whole yet, refused by procreg__bs_open(), or fits */
	return buf_grow(m, c, &c->pt, &c->pt_cap, PT_IDLE, PT_CAP);
}

/* The records in C->in: opened, and the frames in them handled. The bytes
 * used. */
static size_t read_records(struct mesh *m, struct conn *c, size_t pos)
{
	while (!c->dead && !c->evicted) {
		struct pr_bp_frame f;
		size_t used = 0, pt_len = 0, fp = 0;
		int r = pt_room(m, c, c->in + pos, c->in_len - pos);

		if (r == -ENOMEM)
			conn_kill(m, c, "out of memory");
		if (r < 0)
			break;
		r = procreg__bs_open(c->bs, c->in + pos, c->in_len - pos, &used, c->pt + c->pt_len,
				     &pt_len);
		if (r == 0)
			break;
		if (r < 0) {
			conn_kill(m, c, r == -EACCES ? "a record failed authentication (altered, "
						       "injected, replayed or out of order)"
						     : "malformed record");
			break;
		}
		pos += used;
		c->pt_len += pt_len;
		while (!c->dead && !c->evicted &&
		       (r = procreg__bp_next(c->pt, c->pt_len, &fp, &f)) == 1) {
			int err = on_frame(m, c, &f);

			if (err < 0)
				conn_kill(m, c, strerror(-err));
		}
		if (c->dead || c->evicted)
			break;
		if (r < 0) {
			conn_kill(m, c, "malformed frame");
			break;
		}
		/* What is left is the start of a frame the next record ends. */
		memmove(c->pt, c->pt + fp, c->pt_len - fp);
		c->pt_len -= fp;
	}
	return pos;
}

/* What C->in holds, handled: the handshake's frames, and the records
 * that may follow the last of them in the same read; not a node's
 * records while its snapshot is being written (conn.snap): they could
 * change what it says (a conflict the snapshot's writer loses, and the
 * other side then never hears of). */
static void conn_consume(struct mesh *m, struct conn *c)
{
	size_t pos = 0;

	if (c->evicted)
		return;
	c->consuming = true;
	if (c->state == C_HANDSHAKE)
		pos = read_handshake(m, c);
	if (!c->dead && c->state == C_UP && !c->snap)
		pos = read_records(m, c, pos);
	c->consuming = false;
	if (c->evicted)
		bufs_drop(m, c); /* what it kept while read */
	if (c->dead || c->evicted)
		return;
	memmove(c->in, c->in + pos, c->in_len - pos);
	c->in_len -= pos;
	conn_flush(m, c);
}

static void conn_read(struct mesh *m, struct conn *c)
{
	/* A bounded amount per wake-up: one busy peer does not starve the
	 * rest of the daemon; and none once the dispatch's time for input
	 * is over (backend.h: input_over()): what is left in the socket
	 * wakes the daemon again (level-triggered). What was read is all
	 * handled, a read's worth (two records at most) past that time at
	 * most: input stopped in the middle of a read would hold its
	 * connection's record buffers at their full size while it waits,
	 * against --max-mesh-queue, and under a sanitizer's slowness nodes
	 * that behave were dropped for the room. A node whose snapshot is
	 * being written is not read (conn_consume(), conn_events()). */
	for (int round = 0; round < 16 && !c->dead && !c->evicted && !c->snap; round++) {
		ssize_t n;

		if (pr_bridge_input_over(&m->up))
			return;
		if (c->in_len == c->in_cap && (c->state != C_UP || c->in_cap >= IN_CAP)) {
			/* Only before authentication: a frame bigger than any
			 * handshake frame. (Once up, whole records leave the
			 * buffer every round, and it holds two.) */
			conn_kill(m, c, "oversized handshake");
			return;
		}
		if (c->in_len == c->in_cap) {
			/* Up, the idle buffer full: a record bigger than it, or
			 * many; the full one until idle for a tick. */
			int err = buf_grow(m, c, &c->in, &c->in_cap, IN_CAP_HANDSHAKE, IN_CAP);

			if (err == -ENOMEM)
				conn_kill(m, c, "out of memory");
			if (err < 0)
				return;
		}
		n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				conn_kill(m, c, strerror(errno));
			return;
		}
		if (n == 0) {
			conn_kill_at(m, c, c->state == C_UP ? LOG_NOTICE : LOG_DEBUG, "closed by peer");
			return;
		}
		c->in_len += (size_t)n;
		c->bytes_in += (uint64_t)n;
		c->last_rx_ns = now_ns();
		conn_consume(m, c);
	}
}

static void conn_event(struct mesh *m, struct conn *c, uint32_t ev)
{
	if (c->dead)
		return;
	if (c->state == C_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = &c->o };

		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
			conn_kill(m, c, NULL); /* not listening (yet): retry quietly */
			return;
		}
		epoll_ctl(m->epfd, EPOLL_CTL_MOD, c->fd, &e);
		c->want_out = false;
		c->state = C_HANDSHAKE;
		send_hello(m, c);
		return;
	}
	/* Reset or hung up while its snapshot is being written, when it is
	 * not read: ended now (polled for it or not, level-triggered, the
	 * event would come back at every turn until a send failed). */
	if (c->snap && (ev & (EPOLLHUP | EPOLLERR))) {
		conn_kill_at(m, c, LOG_NOTICE, "connection reset");
		return;
	}
	if (ev & EPOLLOUT)
		conn_flush(m, c);
	if (!c->dead && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)))
		conn_read(m, c);
}

/* A refused connection, logged once a second at most: whoever floods
 * the port does not flood the log. */
static void refused_held(struct mesh *m, uint64_t held)
{
	if (held)
		pr_bridge_log(&m->up, LOG_WARNING,
			      "bridge: (%llu more connections refused in the last second)",
			      (unsigned long long)held);
}

static void log_refused(struct mesh *m, const char *why)
{
	uint64_t held;

	if (!pr_ratelimit_pass(&m->refused_log, now_ns(), &held))
		return;
	refused_held(m, held);
	pr_bridge_log(&m->up, LOG_WARNING, "bridge: connection refused: %s", why);
}

static size_t handshakes(const struct mesh *m)
{
	size_t n = 0;

	for (const struct conn *c = m->conns; c; c = c->next)
		if (!c->dead && !c->outbound && c->state != C_UP)
			n++;
	return n;
}

/* "host:port" of a socket address, for the log. */
static void addr_str(const struct sockaddr_storage *ss, socklen_t len, char *out, size_t cap)
{
	char host[NI_MAXHOST], port[NI_MAXSERV];

	if (getnameinfo((const struct sockaddr *)ss, len, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV) != 0)
		snprintf(out, cap, "?");
	else if (ss->ss_family == AF_INET6)
		snprintf(out, cap, "[%.64s]:%.8s", host, port);
	else
		snprintf(out, cap, "%.64s:%.8s", host, port);
}

static void do_accept(struct mesh *m)
{
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int one = 1, fd = pr_accept(m->lfd, (struct sockaddr *)&ss, &sl,
					    SOCK_NONBLOCK | SOCK_CLOEXEC, &m->spare, NULL, NULL);
		struct epoll_event e = { .events = EPOLLIN };
		char remote[PR_BP_ADDR_MAX + 1];
		struct conn *c;

		if (fd == PR_ACCEPT_SHED) {
			log_refused(m, "out of file descriptors");
			continue;
		}
		if (fd < 0)
			return;
		if (m->nconns >= CONNS_MAX) {
			log_refused(m, "too many connections open");
			close(fd);
			continue;
		}
		if (handshakes(m) >= HANDSHAKES_MAX) {
			log_refused(m, "too many handshakes under way");
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		addr_str(&ss, sl, remote, sizeof(remote));
		c = conn_new(m, fd, false, remote);
		if (!c) {
			close(fd);
			continue;
		}
		e.data.ptr = &c->o;
		/* Nothing to say until the dialer's HELLO. */
		if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, fd, &e) < 0)
			conn_kill(m, c, "epoll");
	}
}

/* The targets told of, at a tick: those out of tries dropped (and
 * remembered: forget()), and LEARNED_DIALS_TICK of those due dialed, in
 * turn from where the last tick's budget ran out. */
static void learned_tick(struct mesh *m, uint64_t now)
{
	size_t n = m->ntargets - m->nconfigured, budget = LEARNED_DIALS_TICK, waiting = 0;

	for (size_t k = 0; k < n; k++) {
		size_t at = (m->learned_turn + k) % n;
		struct target *t = &m->targets[m->nconfigured + at];
		uint64_t held;

		if (t->addr[0] && t->tries >= m->learned_tries && !t->conn && !t->resolving) {
			/* Not while a look-up runs: its answer names the slot.
			 * A line a second: a node may tell of a thousand. */
			if (pr_ratelimit_pass(&m->forgot_log, now, &held))
				pr_bridge_log(&m->up, LOG_NOTICE,
					      "bridge: peer %s (told of by another node): %u dials "
					      "failed, dropped, not dialed again for %llu s (and %llu "
					      "more since the last such line)", t->addr, t->tries,
					      (unsigned long long)(FORGET_NS / 1000000000ull),
					      (unsigned long long)held);
			forget(m, t->addr, strlen(t->addr));
			target_drop(m, t);
			continue;
		}
		if (now < t->next_try_ns || !want_dial(m, t))
			continue;
		if (!budget) {
			waiting++;
			continue;
		}
		if (--budget == 0)
			m->learned_turn = (at + 1) % n;
		dial(m, t);
	}
	/* A line a second while some wait their turn: a node with the
	 * cookie can keep it so. */
	if (waiting && pr_ratelimit_pass(&m->budget_log, now, NULL))
		pr_bridge_log(&m->up, LOG_NOTICE,
			      "bridge: %zu peers told of by other nodes wait to be dialed: %d such "
			      "dials a tick (%d ms) at most", waiting, LEARNED_DIALS_TICK, TICK_MS);
}

static void tick(struct mesh *m)
{
	uint64_t now = now_ns(), hb = (uint64_t)m->c.heartbeat_ms * 1000000ull,
		 to = (uint64_t)m->c.timeout_ms * 1000000ull;
	uint64_t x, held;

	if (read(m->tfd, &x, sizeof(x)) < 0 && errno != EAGAIN)
		return;
	/* Lines held back in a second that is over: said now. */
	if (m->unauth_held)
		unauth_second(m, now);
	if (pr_ratelimit_due(&m->evict_log, now, &held))
		evicted_held(m, held);
	if (pr_ratelimit_due(&m->refused_log, now, &held))
		refused_held(m, held);
	for (struct conn *c = m->conns; c; c = c->next) {
		if (c->dead)
			continue;
		if (c->state != C_UP) {
			if (now - c->started_ns <= (uint64_t)HANDSHAKE_MS * 1000000ull)
				continue;
			if (c->state == C_CONNECTING)
				conn_kill(m, c, NULL);
			else
				refuse(m, c, PR_BP_REFUSE_TIMEOUT, "handshake not finished in time",
				       "handshake timed out");
			continue;
		}
		if (now - c->last_rx_ns > to && !c->snap) {
			conn_kill_at(m, c, LOG_NOTICE, "silent");
			continue;
		}
		/* Record buffers not used since the last tick: back to their
		 * idle size, off the budget. */
		bufs_give_back(m, c, now - c->last_rx_ns >= (uint64_t)TICK_MS * 1000000ull,
			       now - c->last_tx_ns >= (uint64_t)TICK_MS * 1000000ull);
		if (now - c->last_tx_ns >= hb && !c->snap) {
			uint8_t buf[32];
			size_t pos = 0;

			procreg__bp_put_heartbeat(buf, sizeof(buf), &pos, m->c.incarnation,
						  m->up.seq(m->up.ctx));
			conn_queue(c, buf, pos);
			conn_flush(m, c);
		}
	}
	for (size_t i = 0; i < m->nconfigured; i++)
		if (now >= m->targets[i].next_try_ns && want_dial(m, &m->targets[i]))
			dial(m, &m->targets[i]);
	learned_tick(m, now);
}

/* The connections evict() dropped, ended (quietly: it said why). */
static void kill_evicted(struct mesh *m)
{
	for (struct conn *c = m->conns; c; c = c->next)
		if (!c->dead && c->evicted)
			conn_kill_at(m, c, LOG_NOTICE, NULL);
}

/* ---- the backend interface -------------------------------------------- */

/*
 * A node waiting for its snapshot hears from us all the same: its side
 * drops a node it has heard nothing from for its timeout, and a burst of
 * nodes coming up at once (a partition healing) can keep the last of
 * them waiting longer than that, each then dropped and dialing again
 * into the next burst. A heartbeat would not do: it counts our changes,
 * which the snapshot must bring first. An empty PEERS says nothing to
 * the replication layer; the other side's mesh takes it for a sign of
 * life.
 */
static void keep_alive(struct mesh *m, struct conn *c)
{
	uint8_t buf[PR_BP_HDR + 2];
	size_t pos = 0, start;

	if (procreg__bp_begin(buf, sizeof(buf), &pos, PR_BP_PEERS, 0, 0, 0, &start) < 0)
		return;
	procreg__bp_end(buf, pos, start, 0);
	conn_queue(c, buf, pos);
	conn_flush(m, c);
}

/*
 * Snapshots go out a part at a time (backend.h's snapshot_more()), the
 * daemon serving its clients in between: one part when the replication
 * layer says the next may go (snapshot_wait(); snap_tfd wakes the daemon
 * then), to the connection served longest ago. So a burst of nodes
 * coming up at once (a partition healing) have theirs written in turn,
 * and however many connections a node with the cookie opens, each
 * asking for the table, parts take half the daemon's time at most:
 * written whole, one each held every local request for as long (0.3 s at
 * 10^6 names), back to back.
 */
static void snap_done(struct mesh *m, struct conn *c)
{
	m->up.snapshot_end(m->up.ctx, c->snap);
	c->snap = NULL;
	m->snapping--;
	send_peers(m, c);
	/* Not read while it was written: not silent; and what came
	 * meanwhile is read now. */
	c->last_rx_ns = now_ns();
	conn_events(m, c);
	if (c->in_len)
		conn_consume(m, c);
}

static void serve_snapshot(struct mesh *m)
{
	uint64_t now, wait, hb = (uint64_t)m->c.heartbeat_ms * 1000000ull;
	struct conn *next = NULL;
	int more;

	if (!m->snapping)
		return;
	now = now_ns();
	for (struct conn *c = m->conns; c; c = c->next) {
		if (!c->snap || c->dead || c->evicted)
			continue;
		if (now - c->last_tx_ns >= hb && !conn_live(c))
			keep_alive(m, c);
		/* Its send failed: killed, its snapshot ended. */
		if (!c->snap)
			continue;
		if (!next || c->snap_turn < next->snap_turn)
			next = c;
	}
	if (!next)
		return;
	if ((wait = m->up.snapshot_wait(m->up.ctx))) {
		pr_bridge_timer_in(m->snap_tfd, wait);
		return;
	}
	next->snap_turn = ++m->snap_turns;
	more = m->up.snapshot_more(m->up.ctx, next->snap, snap_send, next);
	next->snap_started = true;
	if (more < 0)
		conn_kill(m, next, next->evicted ? NULL : "snapshot");
	else if (!more)
		snap_done(m, next);
	conn_flush(m, next);
	if (m->snapping)
		pr_bridge_timer_in(m->snap_tfd, m->up.snapshot_wait(m->up.ctx));
}

static void mesh_dispatch(void *b)
{
	struct mesh *m = b;
	struct epoll_event evs[64];
	int n = epoll_wait(m->epfd, evs, 64, 0);
	/* Events in turn from a place that moves on every dispatch: when the
	 * time for input runs out before the last, the same ones come
	 * first again (level-triggered), and the rest would wait for good. */
	size_t first = n > 0 ? m->rr++ % (size_t)n : 0;

	for (int k = 0; k < n; k++) {
		struct obj *o = evs[(first + (size_t)k) % (size_t)n].data.ptr;
		uint32_t events = evs[(first + (size_t)k) % (size_t)n].events;

		switch (o->kind) {
		case O_LISTEN:
			do_accept(m);
			break;
		case O_TIMER:
			tick(m);
			break;
		case O_CONN:
			conn_event(m, (struct conn *)o, events);
			break;
		case O_RESOLVED:
			on_resolved(m);
			break;
		case O_SNAP: {
			uint64_t x;

			(void)!read(m->snap_tfd, &x, sizeof(x));
			break;
		}
		}
	}
	serve_snapshot(m);
	kill_evicted(m);
	reap(m);
}

static int mesh_broadcast(void *b, const uint8_t *frame, size_t len)
{
	struct mesh *m = b;

	/* Called from the middle of table writes: a peer too far behind is
	 * dropped at the next flush, not here (its node_down writes too).
	 * Every flush_bytes queued, a big batch's changes go out while the
	 * rest is still being applied, so the peers apply them meanwhile
	 * instead of waiting for the end of the batch; counted from the last
	 * try, so that a peer whose socket is full costs one failed send per
	 * flush_bytes, not one per change. */
	for (struct conn *c = m->conns; c; c = c->next) {
		if (c->dead || c->state != C_UP || c->overflow || c->evicted)
			continue;
		if (conn_queue(c, frame, len) < 0) {
			c->overflow = true;
		} else if (m->c.flush_bytes && (c->queued_since_send += len) >= m->c.flush_bytes) {
			/* An error is left for the next conn_flush(), which
			 * may drop the node (broadcast() may not). */
			c->queued_since_send = 0;
			(void)conn_send_some(c);
		}
	}
	return 0;
}

static void mesh_flush(void *b)
{
	struct mesh *m = b;

	kill_evicted(m);
	for (struct conn *c = m->conns; c; c = c->next) {
		if (!c->dead && c->overflow)
			conn_kill(m, c, "too far behind");
		else if (!c->dead && c->out_off < c->out_len && c->state != C_CONNECTING)
			conn_flush(m, c);
	}
	reap(m);
}

static void mesh_nodes(void *b, void (*cb)(void *arg, const struct pr_bridge_node_info *n),
		       void *arg)
{
	struct mesh *m = b;

	for (struct conn *c = m->conns; c; c = c->next) {
		struct pr_bridge_node_info ni = { c->peer, c->peer_addr, c->peer_inc, c->bytes_in,
						  c->bytes_out };

		if (!c->dead && c->state == C_UP)
			cb(arg, &ni);
	}
}

/* The peers of --peer: the first targets, in order (PEERS adds the
 * others after them). */
static void mesh_peers(void *b, void (*cb)(void *arg, const struct pr_bridge_peer_info *p),
		       void *arg)
{
	struct mesh *m = b;

	for (size_t i = 0; i < m->nconfigured; i++) {
		const struct target *t = &m->targets[i];
		struct pr_bridge_peer_info pi = { t->addr, t->seen, false };

		if (!strcmp(t->node, m->node))
			continue; /* ourselves, in a --peer list every node shares */
		pi.up = (t->conn && !t->conn->dead && t->conn->state == C_UP) ||
			(t->seen[0] && up_conn(m, t->seen));
		cb(arg, &pi);
	}
}

static int mesh_fd(void *b)
{
	return ((struct mesh *)b)->epfd;
}

static void mesh_close(void *b)
{
	struct mesh *m = b;

	if (!m)
		return;
	resolver_stop(m);
	for (struct conn *c = m->conns; c; c = c->next) {
		if (c->snap) {
			m->up.snapshot_end(m->up.ctx, c->snap);
			c->snap = NULL;
		}
		if (!c->dead) {
			c->dead = true;
			close(c->fd);
		}
	}
	reap(m);
	if (m->lfd >= 0)
		close(m->lfd);
	if (m->spare >= 0)
		close(m->spare);
	if (m->tfd >= 0)
		close(m->tfd);
	if (m->snap_tfd >= 0)
		close(m->snap_tfd);
	if (m->epfd >= 0)
		close(m->epfd);
	if (m->cookie) {
		OPENSSL_cleanse(m->cookie, m->cookie_len);
		free(m->cookie);
	}
	free(m->targets);
	free(m->forgot);
	procreg__sidx_free(&m->forgot_index);
	procreg__sidx_free(&m->target_index);
	procreg__sidx_free(&m->up_index);
	free(m);
}

static int mesh_listen(struct mesh *m, const char *addr)
{
	struct sockaddr_storage ss;
	socklen_t len;
	unsigned n;
	int one = 1, err;

	/* Once, at start, before the daemon serves: a host name may block
	 * here, harmlessly. */
	if (lookup_addr(addr, AI_PASSIVE, &ss, &len, 1, &n) != 0)
		return -EINVAL;
	m->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (m->lfd < 0)
		return -errno;
	setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(m->lfd, (struct sockaddr *)&ss, len) < 0 || listen(m->lfd, 128) < 0) {
		err = -errno;
		pr_bridge_log(&m->up, LOG_ERR, "bridge: cannot listen on %s: %s", addr,
			      strerror(errno));
		return err;
	}
	m->listen_o.kind = O_LISTEN;
	{
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = &m->listen_o };

		if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->lfd, &e) < 0)
			return -errno;
	}
	return 0;
}

static void *mesh_open(const struct pr_bridge_config *cfg, const struct pr_bridge_up *up, int *err)
{
	struct mesh *m = calloc(1, sizeof(*m));
	struct itimerspec its = { { 0, TICK_MS * 1000000L }, { 0, TICK_MS * 1000000L } };
	struct epoll_event e = { .events = EPOLLIN };

	*err = -ENOMEM;
	if (!m)
		return NULL;
	m->lfd = m->tfd = m->spare = m->snap_tfd = -1;
	pr_bridge_config_take(&m->c, cfg);
	pr_bridge_up_take(&m->up, up);
	/* The mesh takes no --bridge-opt: one given is a mistake to say. */
	if ((*err = pr_bridge_opts_check(&m->c, &m->up, "tcp-mesh", NULL)) < 0) {
		free(m);
		return NULL;
	}
	snprintf(m->node, sizeof(m->node), "%s", cfg->node);
	if (m->c.advertise)
		snprintf(m->listen_addr, sizeof(m->listen_addr), "%s", m->c.advertise);
	else
		snprintf(m->listen_addr, sizeof(m->listen_addr), "%s", cfg->listen ? cfg->listen : "");
	m->cookie = malloc(cfg->cookie_len);
	m->targets = calloc(TARGETS_MAX, sizeof(*m->targets));
	procreg__sidx_init(&m->target_index);
	procreg__sidx_init(&m->up_index);
	procreg__sidx_init(&m->forgot_index);
	m->queue_max = m->c.queue_max ? (size_t)m->c.queue_max : QUEUE_MAX_DEFAULT;
	m->learned_tries = getenv("PROCREG_TEST_LEARNED_TRIES")
				   ? (uint32_t)strtoul(getenv("PROCREG_TEST_LEARNED_TRIES"), NULL, 10)
				   : 0;
	if (m->learned_tries < 1)
		m->learned_tries = LEARNED_TRIES;
	m->epfd = epoll_create1(EPOLL_CLOEXEC);
	m->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (!m->cookie || !m->targets || m->epfd < 0 || m->tfd < 0)
		goto fail;
	memcpy(m->cookie, cfg->cookie, cfg->cookie_len);
	m->cookie_len = cfg->cookie_len;
	m->timer_o.kind = O_TIMER;
	e.data.ptr = &m->timer_o;
	if (timerfd_settime(m->tfd, 0, &its, NULL) < 0 ||
	    epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->tfd, &e) < 0)
		goto fail;
	m->snap_tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	m->snap_o.kind = O_SNAP;
	e.data.ptr = &m->snap_o;
	if (m->snap_tfd < 0 || epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->snap_tfd, &e) < 0)
		goto fail;
	if (cfg->listen && (*err = mesh_listen(m, cfg->listen)) < 0)
		goto fail_err;
	if (cfg->listen)
		m->spare = pr_accept_spare();
	for (size_t i = 0; i < cfg->npeers; i++)
		if (!target_add(m, cfg->peers[i], strlen(cfg->peers[i]))) {
			*err = -EINVAL;
			goto fail_err;
		}
	m->nconfigured = m->ntargets; /* a repeated --peer is one */
	*err = 0;
	return m;
fail:
	*err = -errno ? -errno : -ENOMEM;
fail_err:
	mesh_close(m);
	return NULL;
}

const struct pr_bridge_backend pr_mesh_backend = {
	.sz = sizeof(struct pr_bridge_backend),
	.name = "tcp-mesh",
	.open = mesh_open,
	.fd = mesh_fd,
	.dispatch = mesh_dispatch,
	.broadcast = mesh_broadcast,
	.flush = mesh_flush,
	.nodes = mesh_nodes,
	.close = mesh_close,
	.peers = mesh_peers,
};
