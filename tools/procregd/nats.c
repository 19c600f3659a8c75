/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * nats.c - a bridge backend over NATS (procreg-bridge-nats.so, loaded by
 * procregd --bridge nats). The nodes do not connect to each other: each
 * one connects to a NATS server (or cluster), which handles discovery,
 * fan-out, reconnection and authentication (user/password, token, NKey,
 * credentials files: whatever nats.c supports, passed through). A server
 * that refuses the credentials at start stops procregd with its reason.
 *
 * Servers: one URL or several, comma-separated; nats.c tries them in a
 * random order and fails over between them, and the log names the one it
 * is connected to each time it connects. TLS (every server, once a URL
 * says tls:// or a tls-* option is given): server certificates checked
 * against tls-ca (default: the system's bundle) and, unless the first
 * URL's host is an address, against that host name (tls-hostname: another
 * name); tls-cert and tls-key: a client certificate, for a server that
 * asks for one. Without TLS, the names, metadata, pids and uids the nodes
 * replicate cross the network in clear: the MAC below keeps them from
 * being forged or replayed, not from being read.
 *
 * Subjects, under a prefix (default procreg.SCOPE; '.' in a scope or node
 * name becomes '~', which neither may contain, so the mapping is one to
 * one):
 *   PREFIX.node.NODE    NODE's stream: its CHANGE and HEARTBEAT frames, in
 *                       the order it sends them; everyone subscribes to
 *                       PREFIX.node.*
 *   PREFIX.snap.NODE    requests for NODE's snapshot
 *   PREFIX.inbox.NODE   snapshots for NODE, in answer to its requests
 *
 * Every message is an envelope (bridge_envelope.h) around frames of the replication
 * protocol (bridge_proto.h): one SNAP frame, or the stream's frames of one
 * batch of the daemon's work (a CHANGE each, then a HEARTBEAT if one was
 * due: a heartbeat never overtakes the changes it counts), with an HMAC-SHA256 keyed with the
 * cluster cookie over the subject, the sender's name and incarnation, a
 * per-sender counter and the frame. NATS authentication keeps strangers
 * off the server; the MAC keeps anyone on it who lacks the cookie from
 * injecting or replaying anything: a message that fails it is dropped and
 * logged, and nothing in it is read further.
 *
 * Liveness: every node sends a HEARTBEAT (its incarnation, its newest
 * change) on its stream every heartbeat_ms. The first heartbeat of a
 * (node, incarnation) brings the node up: node_up, then a snapshot
 * request. A node heard nothing from for timeout_ms is down, as is one
 * that shows up with another incarnation (it restarted: down, then up
 * again). When this node loses the server, every other node is down for
 * it (it can no longer tell); once reconnected, their heartbeats bring
 * them up again with fresh snapshots, so nothing stale stays.
 *
 * Ordering, a snapshot against concurrent changes. NATS keeps the order
 * of one publisher's messages on one subject to one subscriber, but not
 * across subjects: a snapshot (on our inbox) and the sender's changes (on
 * its stream) may overtake each other. The replication layer (bridge.c)
 * puts a node's frames back in order, whatever order they come in, and
 * notices what is lost (backend.h); this file only delivers, from
 * node_up on. Frames of X seen before node_up are not delivered: they
 * were published before X received our request (we sent it after seeing
 * them), so their sequence numbers are at most S, the one X's snapshot is
 * as of (X builds it on its only thread, between two changes, and
 * everything it sent earlier has a sequence number <= S). Snapshot parts
 * answering an older request than the one we wait on are not delivered
 * either (the request's id tells them apart). A frame the replication
 * layer refuses (a change or a snapshot part lost by NATS: a server
 * restart, a slow consumer; a snapshot that never comes) makes X down and
 * up again here: a fresh snapshot.
 *
 * Threads: nats.c calls its handlers on threads of its own. They only
 * append to a queue under a mutex and poke an eventfd; everything else,
 * every upcall included, runs on the daemon's thread in dispatch().
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <nats/nats.h>
#include <openssl/rand.h>

#include "bridge_envelope.h"
#include "bridge_proto.h"
#include "clock.h"
#include "internal.h" /* the index of peers' names (strindex.c) */
#include "nats_opts.h"
#include "procreg/backend.h"


#define SUBJECT_MAX 384
#define PEERS_MAX 4096 /* nodes heard from, then one long silent makes room (peer_evict()) */
#define EVICT_BATCH 64
#define EVICT_SCAN_GAP_NS 100000000ull /* 100 ms */
#define QUEUE_MAX_BYTES (256u << 20) /* the daemon this far behind: drop (sequencing resyncs) */
#define MSG_OVERHEAD 256             /* a queued message's memory besides its data and subject */
#define TRIM_AFTER_BYTES (16u << 20) /* a backlog this big, drained: memory given back */
#define ITEMS_PER_DISPATCH 4096      /* the daemon's clients get a turn in between */
#define SERVERS_MAX 64
/* Lines of nodes down or up said in a row before one a second: a cluster
 * of a dozen coming up, or losing the server, is each said. */
#define FLAP_LOG_BURST 15

enum item_kind { I_MSG, I_CONNECTED, I_DISCONNECTED, I_CLOSED, I_LOST };

/* One thing nats.c told us. Written by nats.c's threads, read by the
 * daemon's, handed over under the queue's mutex. A message comes opened:
 * its envelope checked (the MAC) on the library's thread, E pointing into
 * its data. */
struct item {
	struct item *next;
	enum item_kind kind;
	natsMsg *msg;
	struct pr_env e;
	size_t bytes;
};

/* Why a message was dropped before anything in it was used. Counted by
 * nats.c's threads too (a forged message goes no further than the
 * callback), and logged by the daemon's, a line a second at most for
 * each (drops_report()). */
enum drop_why {
	D_NOT_ENV, D_MALFORMED, D_AUTH, D_TYPE, D_NOMEM, D_HEADERS, D_SELF, D_SUBJECT,
	D_REPLAY, D_REPLAY_OLD, D_NWHY
};

static const char *const drop_text[D_NWHY] = {
	[D_NOT_ENV] = "not an envelope",
	[D_MALFORMED] = "malformed envelope",
	[D_AUTH] = "authentication failed (wrong cookie, or forged)",
	[D_TYPE] = "unknown type",
	[D_NOMEM] = "envelope not checked (out of memory)",
	[D_HEADERS] = "it carries headers (procreg sends none)",
	[D_SELF] = "from another node with this node's name",
	[D_SUBJECT] = "on the wrong subject",
	[D_REPLAY] = "replayed",
	[D_REPLAY_OLD] = "replayed (an older incarnation)",
};

/* Another node, as the daemon's thread sees it. */
struct peer {
	char name[PR_BP_NODE_MAX + 1];
	uint64_t inc;
	bool up;                    /* node_up taken */
	uint64_t req;               /* the snapshot request we wait on, 0: none */
	uint64_t last_rx_ns;
	uint64_t ctr[PR_ENV_TYPES];      /* newest counter seen per type: no replays */
	uint64_t ctr_max;           /* newest counter seen, any incarnation */
	uint64_t bytes_in;
	/* Its request for our snapshot (serve_snapshot()). */
	bool snap_pending;          /* one not served yet */
	uint64_t snap_req;          /* its id: the newest (an older one is moot) */
	uint64_t snap_served_ns;    /* when it was last sent one (0: never) */
};

struct nb {
	struct pr_bridge_config c;
	struct pr_bridge_up up;
	char node[PR_BP_NODE_MAX + 1];
	char prefix[SUBJECT_MAX / 2];
	char url[1024];             /* the servers, comma-separated */
	char first_host[256];       /* the first one's host, for TLS */
	char my_stream[SUBJECT_MAX];
	struct pr_env_key *key;     /* the cookie's, for every envelope */
	int epfd, efd, tfd;
	int stfd;                   /* a snapshot's next part is due (serve_snapshot()) */
	natsOptions *opts;
	natsConnection *nc;
	natsSubscription *subs[3];
	/* Shared with nats.c's threads, under mu. */
	pthread_mutex_t mu;
	struct item *qhead, **qtail;
	size_t qbytes;
	size_t qpeak;               /* the most queued since memory was last given back */
	bool qlost;
	bool closing;               /* nb_close() under way: nothing more is queued */
	uint64_t dropped[D_NWHY];   /* messages dropped, by why */
	char drop_subj[D_NWHY][SUBJECT_MAX]; /* the last one's subject */
	/* The daemon's thread only. */
	bool connected;
	bool announce;              /* the next heartbeat asks others for theirs */
	bool hb_soon;
	uint64_t counter, next_req;
	uint64_t last_hb_ns;
	uint64_t drops_logged[D_NWHY];
	struct pr_ratelimit drop_log[D_NWHY];
	struct pr_ratelimit lost_log;
	uint64_t publish_errors;
	struct pr_ratelimit pub_err_log;
	struct peer *peers;
	size_t npeers;
	size_t peers_max;           /* PEERS_MAX; PROCREG_TEST_PEERS_MAX for tests */
	struct pr_str_index peer_idx; /* a peer's name -> its place in peers */
	/* Places of peers that may make room for another (peer_evict()),
	 * the oldest last, from a look at them all made at evict_scan_ns. */
	uint32_t evict[EVICT_BATCH];
	size_t nevict;
	uint64_t evict_scan_ns;
	uint8_t *out;               /* one envelope */
	uint8_t *batch;             /* stream frames not yet published */
	size_t batch_len;
	uint64_t bytes_out;
	uint64_t serving_req;       /* while a snapshot goes out */
	char serving_to[SUBJECT_MAX];
	void *serving;              /* that snapshot, written a part a dispatch */
	char serving_name[PR_BP_NODE_MAX + 1];
	/* Snapshot requests waiting (serve_snapshot()). */
	size_t snap_waiting;        /* peers with one */
	size_t snap_next;           /* where the next look for one starts */
	uint64_t snap_gap_ns;       /* one sender is sent a snapshot this often at most */
	uint64_t snapreq_coalesced;
	struct pr_ratelimit snapreq_log;
	/* Nodes down and up: a refusal resyncs one (resync()), and a node
	 * with the cookie decides how often; a few in a row are each said. */
	struct pr_ratelimit flap_log;
};

/* NAME as one subject token: '.' (allowed in node and scope names,
 * a separator in subjects) becomes '~' (allowed in neither). */
static void token(char *out, size_t cap, const char *name)
{
	size_t i;

	for (i = 0; name[i] && i + 1 < cap; i++)
		out[i] = name[i] == '.' ? '~' : name[i];
	out[i] = 0;
}

static void subject(const struct nb *m, char *out, const char *kind, const char *node)
{
	char t[PR_BP_NODE_MAX + 1];

	token(t, sizeof(t), node);
	snprintf(out, SUBJECT_MAX, "%s.%s.%s", m->prefix, kind, t);
}

/* ---- out ---------------------------------------------------------------- */

static int publish(struct nb *m, const char *subj, uint8_t type, uint8_t flags, uint64_t req,
		   const uint8_t *frame, size_t len)
{
	struct pr_env e = { .type = type, .flags = flags, .sender = m->node,
			    .sender_len = strlen(m->node), .incarnation = m->c.incarnation,
			    .counter = m->counter + 1, .req = req, .body = frame, .body_len = len };
	size_t pos = 0;
	natsStatus s;

	if (!m->nc || procreg__env_seal(m->key, subj, &e, m->out, PR_ENV_MAX, &pos) < 0)
		return -EINVAL;
	m->counter++;
	s = natsConnection_Publish(m->nc, subj, m->out, (int)pos);
	if (s != NATS_OK) {
		/* Buffered while reconnecting, up to a bound: past it the
		 * change is lost, and the others see the gap and resync. A
		 * long outage fails every publish: a line a second at most. */
		m->publish_errors++;
		if (pr_ratelimit_pass(&m->pub_err_log, pr_mono_ns(), NULL))
			pr_bridge_log(&m->up, LOG_WARNING,
				      "bridge: nats: publish on %s: %s (%llu failed so far)", subj,
				      natsStatus_GetText(s), (unsigned long long)m->publish_errors);
		return -EIO;
	}
	m->bytes_out += pos;
	return 0;
}

/* Publish the stream frames batched so far, in one message: a NATS
 * message costs the same whatever it carries, up to a point, so a batch
 * of the daemon's work goes out as one (measured with procreg-bench stress
 * --nodes 3 over one nats-server: 831 k names/s visible everywhere from one
 * batching writer, against 116 k/s with one message a change). */
static int stream_flush(struct nb *m, uint8_t flags)
{
	int err;

	if (!m->batch_len)
		return 0;
	err = publish(m, m->my_stream, PR_ENV_STREAM, flags, 0, m->batch, m->batch_len);
	m->batch_len = 0;
	return err;
}

static void stream_add(struct nb *m, const uint8_t *frame, size_t len)
{
	if (m->batch_len + len > PR_BP_FRAME_MAX)
		stream_flush(m, 0);
	memcpy(m->batch + m->batch_len, frame, len);
	m->batch_len += len;
}

static void heartbeat(struct nb *m)
{
	uint8_t buf[32];
	size_t pos = 0;

	procreg__bp_put_heartbeat(buf, sizeof(buf), &pos, m->c.incarnation, m->up.seq(m->up.ctx));
	/* After the changes it counts, in the same message. */
	stream_add(m, buf, pos);
	if (stream_flush(m, m->announce ? PR_ENV_ANNOUNCE : 0) == 0)
		m->announce = false;
	m->last_hb_ns = pr_mono_ns();
	m->hb_soon = false;
}

static int snap_send(void *sctx, const uint8_t *frame, size_t len)
{
	struct nb *m = sctx;

	return publish(m, m->serving_to, PR_ENV_SNAP, 0, m->serving_req, frame, len);
}

/* ---- peers -------------------------------------------------------------- */

/*
 * Peers are found by name for every message: a look at each peer known,
 * 4,096 at most, with a name of up to 63 bytes each, let a node with the
 * cookie that made thousands known pay a comparison with every one for
 * each message it sent (the mesh measured seconds of a local client's
 * wait behind such a flood: bridge.c). So a peer's place is found by an
 * index of names, a hash and a probe; and once every place is taken, a
 * new name looks for a peer to replace among EVICT_BATCH candidates
 * found by one look at them all, made EVICT_SCAN_GAP_NS apart at most:
 * names that keep coming while none may go cost a look at a list of 64,
 * not at 4,096 peers, each.
 */
static bool evictable(const struct peer *p, uint64_t now, uint64_t to)
{
	return !p->up && !p->snap_pending && now - p->last_rx_ns > to;
}

/* The EVICT_BATCH peers silent the longest of those that may go, into
 * m->evict, the newest first and the oldest last. */
static void evict_scan(struct nb *m, uint64_t now, uint64_t to)
{
	uint32_t *e = m->evict;
	size_t n = 0;

	for (size_t i = 0; i < m->npeers; i++) {
		uint64_t rx = m->peers[i].last_rx_ns;
		size_t k = 0;

		if (!evictable(&m->peers[i], now, to))
			continue;
		if (n == EVICT_BATCH) {
			if (rx >= m->peers[e[0]].last_rx_ns)
				continue; /* newer than every one kept */
			memmove(&e[0], &e[1], --n * sizeof(e[0])); /* the newest goes */
		}
		while (k < n && m->peers[e[k]].last_rx_ns >= rx)
			k++;
		memmove(&e[k + 1], &e[k], (n - k) * sizeof(e[0]));
		e[k] = (uint32_t)i;
		n++;
	}
	m->nevict = n;
	m->evict_scan_ns = now;
}

/* The place of a node heard from before, not up and silent for longer
 * than a node may be (of those silent the longest), for another: NULL
 * if there is none. What it forgets is the counters that kept the node's
 * old messages from being replayed: one replayed now can at most bring
 * up a node that then times out (see replayed()). */
static struct peer *peer_evict(struct nb *m)
{
	uint64_t now = pr_mono_ns(), to = (uint64_t)m->c.timeout_ms * 1000000ull;

	for (int scanned = 0;; scanned++) {
		while (m->nevict) {
			struct peer *p = &m->peers[m->evict[--m->nevict]];

			/* It may have been heard from since the look. */
			if (evictable(p, now, to))
				return p;
		}
		if (scanned || now - m->evict_scan_ns < EVICT_SCAN_GAP_NS)
			return NULL;
		evict_scan(m, now, to);
	}
}

static struct peer *peer_get(struct nb *m, const char *name)
{
	size_t len = strlen(name);
	struct peer *p;
	uint64_t v;

	if (procreg__sidx_get(&m->peer_idx, name, len, &v) == 0 && v < m->npeers &&
	    !strcmp(m->peers[v].name, name))
		return &m->peers[v];
	/* Two names of one key (or no memory): what is not indexed is
	 * found as before the index. */
	if (m->peer_idx.partial)
		for (size_t i = 0; i < m->npeers; i++)
			if (!strcmp(m->peers[i].name, name))
				return &m->peers[i];
	if (m->npeers < m->peers_max)
		p = &m->peers[m->npeers++];
	else if ((p = peer_evict(m)))
		procreg__sidx_del(&m->peer_idx, p->name, strlen(p->name), (uint64_t)(p - m->peers));
	else
		return NULL;
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	procreg__sidx_put(&m->peer_idx, name, len, (uint64_t)(p - m->peers));
	return p;
}

/* Whether a line of a node down or up goes out, with the count of those
 * held back before it said first. */
static bool flap_log_pass(struct nb *m)
{
	uint64_t held = 0;

	if (!pr_ratelimit_pass(&m->flap_log, pr_mono_ns(), &held))
		return false;
	if (held)
		pr_bridge_log(&m->up, LOG_NOTICE,
			      "bridge: nats: (%llu more nodes down or up in the last second)",
			      (unsigned long long)held);
	return true;
}

static void peer_down(struct nb *m, struct peer *p, const char *why)
{
	p->req = 0;
	if (!p->up)
		return;
	p->up = false;
	if (flap_log_pass(m))
		pr_bridge_log(&m->up, LOG_NOTICE, "bridge: node %s: down (%s)", p->name, why);
	m->up.node_down(m->up.ctx, p->name);
}

static void request_snapshot(struct nb *m, struct peer *p)
{
	char subj[SUBJECT_MAX];

	p->req = ++m->next_req;
	subject(m, subj, "snap", p->name);
	publish(m, subj, PR_ENV_SNAPREQ, 0, p->req, NULL, 0);
}

static void peer_up(struct nb *m, struct peer *p)
{
	if (m->up.node_up(m->up.ctx, p->name, p->inc, "nats") < 0) {
		pr_bridge_log(&m->up, LOG_WARNING,
			      "bridge: node %s: refused by the replication layer", p->name);
		return;
	}
	p->up = true;
	if (flap_log_pass(m))
		pr_bridge_log(&m->up, LOG_NOTICE,
			      "bridge: node %s: up (incarnation %llx, over NATS)", p->name,
			      (unsigned long long)p->inc);
	request_snapshot(m, p);
	/* It learns of us from our heartbeat: no need to wait a period. */
	m->hb_soon = true;
}

static void resync(struct nb *m, struct peer *p, const char *why)
{
	peer_down(m, p, why);
	if (m->connected)
		peer_up(m, p);
}

/* ---- in ----------------------------------------------------------------- */

/* A message on SUBJ dropped, for WHY: counted. Any thread. */
static void drop_count(struct nb *m, const char *subj, enum drop_why why)
{
	pthread_mutex_lock(&m->mu);
	m->dropped[why]++;
	snprintf(m->drop_subj[why], sizeof(m->drop_subj[why]), "%s", subj);
	pthread_mutex_unlock(&m->mu);
}

/* What was dropped since it was last said, for each reason (or WHY
 * alone, unless it is D_NWHY): a line a second at most for each, with
 * counts. Someone on the server without the cookie may send as fast as
 * it can, for one reason or taking turns between two: a limiter each,
 * never reset by another's. The daemon's thread. */
static void drops_report(struct nb *m, enum drop_why only)
{
	uint64_t now = pr_mono_ns();

	for (int i = 0; i < D_NWHY; i++) {
		char subj[SUBJECT_MAX];
		uint64_t n;

		if (only != D_NWHY && i != (int)only)
			continue;
		pthread_mutex_lock(&m->mu);
		n = m->dropped[i];
		memcpy(subj, m->drop_subj[i], sizeof(subj));
		pthread_mutex_unlock(&m->mu);
		if (n == m->drops_logged[i] || !pr_ratelimit_pass(&m->drop_log[i], now, NULL))
			continue;
		pr_bridge_log(&m->up, LOG_WARNING,
			      "bridge: nats: message on %s dropped: %s (%llu so far, %llu since the "
			      "last line)", subj, drop_text[i], (unsigned long long)n,
			      (unsigned long long)(n - m->drops_logged[i]));
		m->drops_logged[i] = n;
	}
}

/* The daemon's thread: a message dropped for WHY, and said. */
static void forged(struct nb *m, const char *subj, enum drop_why why)
{
	drop_count(m, subj, why);
	drops_report(m, why);
}

/* Why procreg__env_open() refused an envelope. */
static enum drop_why refusal(int err)
{
	switch (err) {
	case -ENOMSG: return D_NOT_ENV;
	case -EBADMSG: return D_MALFORMED;
	case -EACCES: return D_AUTH;
	case -EPROTONOSUPPORT: return D_TYPE;
	default: return D_NOMEM;
	}
}

/* Whether E, authenticated, is from where its sender may speak: not from
 * a node with our name (NoEcho keeps our own messages away), and on the
 * subject its type travels on (the subject is under the MAC too). */
static enum drop_why misplaced(const struct nb *m, const char *subj, const char *sender,
			       const struct pr_env *e)
{
	char want[SUBJECT_MAX];

	if (!strcmp(sender, m->node))
		return D_SELF;
	if (e->type == PR_ENV_STREAM)
		subject(m, want, "node", sender);
	else
		subject(m, want, e->type == PR_ENV_SNAPREQ ? "snap" : "inbox", m->node);
	return strcmp(subj, want) ? D_SUBJECT : D_NWHY;
}

/* Whether E is newer than anything P sent before (else a replay, and
 * why), taking a new incarnation of P's in: a restart, or a replay of an
 * older one's message. A restarted node's counter starts above anything
 * its earlier incarnations sent. While the node is up, that tells them
 * apart; once it is down, a replay can at most bring up a node that
 * sends nothing and times out (a snapshot answers only a request of
 * ours, by its id). */
static enum drop_why replayed(struct nb *m, struct peer *p, const struct pr_env *e)
{
	if (e->incarnation != p->inc) {
		if (p->up && e->counter <= p->ctr_max)
			return D_REPLAY_OLD;
		if (p->up)
			peer_down(m, p, "restarted");
		memset(p->ctr, 0, sizeof(p->ctr));
		p->inc = e->incarnation;
		p->req = 0;
	}
	if (e->counter <= p->ctr[e->type])
		return D_REPLAY;
	p->ctr[e->type] = e->counter;
	if (e->counter > p->ctr_max)
		p->ctr_max = e->counter;
	return D_NWHY;
}

/* The message on SUBJ, its envelope E opened (the MAC checked, on the
 * library's thread): its sender's peer, or NULL (dropped and logged:
 * nothing in it is read further). */
static struct peer *admit(struct nb *m, const char *subj, const struct pr_env *e)
{
	char sender[PR_BP_NODE_MAX + 1];
	enum drop_why why;
	struct peer *p;

	memcpy(sender, e->sender, e->sender_len);
	sender[e->sender_len] = 0;
	if ((why = misplaced(m, subj, sender, e)) != D_NWHY) {
		forged(m, subj, why);
		return NULL;
	}
	if (!(p = peer_get(m, sender)))
		return NULL;
	if ((why = replayed(m, p, e)) != D_NWHY) {
		forged(m, subj, why);
		return NULL;
	}
	p->last_rx_ns = pr_mono_ns();
	p->bytes_in += procreg__env_size(e);
	if (e->flags & PR_ENV_ANNOUNCE)
		m->hb_soon = true;
	return p;
}

/* Whether BODY is nothing but frames of P's stream (its incarnation's
 * CHANGE and HEARTBEAT frames), all of it checked before any is used;
 * *HB: one of them is a heartbeat. */
static bool stream_valid(const struct pr_env *e, bool *hb)
{
	struct pr_bp_frame f;
	size_t pos = 0;
	int r;

	*hb = false;
	while ((r = procreg__bp_next(e->body, e->body_len, &pos, &f)) == 1) {
		if ((f.type != PR_BP_HEARTBEAT && f.type != PR_BP_CHANGE) ||
		    f.incarnation != e->incarnation)
			return false;
		*hb |= f.type == PR_BP_HEARTBEAT;
	}
	return r == 0 && pos == e->body_len;
}

/* A batch of P's stream: every frame to the replication layer, which
 * puts them in order with the snapshot (see the top). */
static void on_stream(struct nb *m, struct peer *p, const struct pr_env *e)
{
	struct pr_bp_frame f;
	size_t pos = 0;
	bool hb;

	if (!stream_valid(e, &hb)) {
		resync(m, p, "malformed frame");
		return;
	}
	if (!p->up) {
		/* Sent before the node heard our request: the snapshot
		 * has every change in it (see the top). */
		if (hb && m->connected)
			peer_up(m, p);
		return;
	}
	while (pos < e->body_len) {
		procreg__bp_next(e->body, e->body_len, &pos, &f);
		if (m->up.deliver(m->up.ctx, p->name, &f) < 0) {
			resync(m, p, "refused a frame");
			return;
		}
	}
}

/* SENDER asks for our snapshot: it will go to its inbox, tagged with
 * the request's id (serve_snapshot()). A snapshot is the whole table,
 * built and published on the daemon's thread: a node with the cookie
 * that sends requests as fast as it can must not have one built for
 * each. So a sender has one request waiting at most, its newest (the
 * answer to an older one it would ignore), and serve_snapshot() writes
 * one snapshot at a time, a part a dispatch, to one sender once a tick
 * at most. */
static void on_snapreq(struct nb *m, struct peer *sender, const struct pr_env *e)
{
	if (sender->snap_pending) {
		m->snapreq_coalesced++;
		if (pr_ratelimit_pass(&m->snapreq_log, pr_mono_ns(), NULL))
			pr_bridge_log(&m->up, LOG_NOTICE,
				      "bridge: node %s: snapshot request coalesced with one not "
				      "served yet (%llu so far)", sender->name,
				      (unsigned long long)m->snapreq_coalesced);
	} else {
		sender->snap_pending = true;
		m->snap_waiting++;
	}
	sender->snap_req = e->req;
}

/* The next part of the snapshot going out: whether more remain. */
static bool serve_part(struct nb *m)
{
	int more = m->up.snapshot_more(m->up.ctx, m->serving, snap_send, m);

	if (more > 0)
		return true;
	if (more < 0)
		pr_bridge_log(&m->up, LOG_WARNING, "bridge: node %s: snapshot not sent: %s",
			      m->serving_name, strerror(-more));
	m->up.snapshot_end(m->up.ctx, m->serving);
	m->serving = NULL;
	return false;
}

/* The next waiting snapshot request taken, if any is due (its sender not
 * sent one in the last snap_gap_ns), the senders in turn: begun (serving),
 * or, for a daemon that writes none in parts, sent whole. Whether one was
 * taken. */
static bool next_request(struct nb *m)
{
	uint64_t now = pr_mono_ns();

	for (size_t k = 0; k < m->npeers; k++) {
		size_t i = (m->snap_next + k) % m->npeers;
		struct peer *p = &m->peers[i];

		if (!p->snap_pending || (p->snap_served_ns && now - p->snap_served_ns < m->snap_gap_ns))
			continue;
		p->snap_pending = false;
		p->snap_served_ns = now;
		m->snap_waiting--;
		m->snap_next = i + 1;
		subject(m, m->serving_to, "inbox", p->name);
		m->serving_req = p->snap_req;
		snprintf(m->serving_name, sizeof(m->serving_name), "%s", p->name);
		if (!pr_bridge_up_parts(&m->up)) {
			if (m->up.snapshot(m->up.ctx, snap_send, m) < 0)
				pr_bridge_log(&m->up, LOG_WARNING,
					      "bridge: node %s: snapshot not sent", p->name);
		} else if (!(m->serving = m->up.snapshot_begin(m->up.ctx))) {
			pr_bridge_log(&m->up, LOG_WARNING,
				      "bridge: node %s: snapshot not sent: out of memory", p->name);
		}
		return true;
	}
	return false;
}

/* A part of the snapshot going out, or of the next waiting request's,
 * when the replication layer says one may go (snapshot_wait(): stfd goes
 * off then), so that the daemon's clients are served in between however
 * big the table, and however many nodes ask: whether to come back at
 * once (requests wait that a dispatch may take). */
static bool serve_snapshot(struct nb *m)
{
	uint64_t wait;

	if (!m->serving) {
		if (!m->snap_waiting || !next_request(m))
			return false;
		if (!m->serving)
			return m->snap_waiting > 0;
	}
	if ((wait = m->up.snapshot_wait(m->up.ctx))) {
		pr_bridge_timer_in(m->stfd, wait);
		return false;
	}
	if (serve_part(m)) {
		pr_bridge_timer_in(m->stfd, m->up.snapshot_wait(m->up.ctx));
		return false;
	}
	return m->snap_waiting > 0;
}

/* A part of P's snapshot, answering request E->req. */
static void on_snap(struct nb *m, struct peer *p, const struct pr_env *e)
{
	struct pr_bp_frame f;
	size_t pos = 0;

	if (!p->up || !p->req || e->req != p->req)
		return; /* an answer to an older request */
	if (procreg__bp_next(e->body, e->body_len, &pos, &f) != 1 || pos != e->body_len ||
	    f.type != PR_BP_SNAP || f.incarnation != e->incarnation) {
		resync(m, p, "malformed snapshot");
		return;
	}
	if (m->up.deliver(m->up.ctx, p->name, &f) < 0)
		resync(m, p, "refused its snapshot");
}

static void on_message(struct nb *m, const char *subj, const struct pr_env *e)
{
	struct peer *p = admit(m, subj, e);

	if (!p)
		return;
	switch (e->type) {
	case PR_ENV_STREAM: on_stream(m, p, e); break;
	case PR_ENV_SNAPREQ: on_snapreq(m, p, e); break;
	case PR_ENV_SNAP: on_snap(m, p, e); break;
	}
}

static void all_down(struct nb *m, const char *why)
{
	for (size_t i = 0; i < m->npeers; i++)
		peer_down(m, &m->peers[i], why);
}

static void tick(struct nb *m)
{
	uint64_t now = pr_mono_ns(), hb = (uint64_t)m->c.heartbeat_ms * 1000000ull,
		 to = (uint64_t)m->c.timeout_ms * 1000000ull;

	uint64_t held;

	/* What nats.c's threads dropped (forged messages go no further). */
	drops_report(m, D_NWHY);
	/* The count of a last burst of nodes down and up, once its second
	 * is up: else it waits for a next line that may never come. */
	if (pr_ratelimit_due(&m->flap_log, now, &held))
		pr_bridge_log(&m->up, LOG_NOTICE,
			      "bridge: nats: (%llu more nodes down or up in the last second)",
			      (unsigned long long)held);
	if (!m->connected)
		return;
	if (now - m->last_hb_ns >= hb || (m->hb_soon && now - m->last_hb_ns >= hb / 4))
		heartbeat(m);
	for (size_t i = 0; i < m->npeers; i++) {
		struct peer *p = &m->peers[i];

		if (p->up && now - p->last_rx_ns > to)
			peer_down(m, p, "silent");
	}
}

/* ---- nats.c's threads: hand over, nothing more ------------------------ */

/* KIND to the daemon's thread; for a message, MSG and its envelope E,
 * opened. Its memory counted: its data, its subject, and what the
 * library and we keep besides (a message counted by its data alone cost
 * 65 KiB for 32 bytes counted, in headers). */
static void enqueue(struct nb *m, enum item_kind kind, natsMsg *msg, const struct pr_env *e)
{
	struct item *it = malloc(sizeof(*it));
	uint64_t one = 1;
	size_t bytes = sizeof(*it);

	if (msg)
		bytes += (size_t)natsMsg_GetDataLength(msg) + strlen(natsMsg_GetSubject(msg)) +
			 MSG_OVERHEAD;
	pthread_mutex_lock(&m->mu);
	if (m->closing) {
		/* Freed here, on the library's thread, while it still runs:
		 * nb_close() must not hold messages past nats_CloseAndWait(). */
		pthread_mutex_unlock(&m->mu);
		free(it);
		if (msg)
			natsMsg_Destroy(msg);
		return;
	}
	if (!it || (msg && m->qbytes + bytes > QUEUE_MAX_BYTES)) {
		/* The daemon is far behind: dropped. What a node lost shows
		 * as a gap in its stream, and it resyncs (check_late()). */
		m->qlost = true;
		free(it);
		if (msg)
			natsMsg_Destroy(msg);
	} else {
		*it = (struct item){ .kind = kind, .msg = msg, .bytes = bytes };
		if (e)
			it->e = *e;
		*m->qtail = it;
		m->qtail = &it->next;
		m->qbytes += bytes;
		if (m->qbytes > m->qpeak)
			m->qpeak = m->qbytes;
	}
	pthread_mutex_unlock(&m->mu);
	(void)!write(m->efd, &one, sizeof(one));
}

/* A message: opened here, on the library's thread, and dropped here if
 * it fails: someone on the server without the cookie, sending as fast as
 * it can, used to fill the daemon's queue (over 1.4 GB, with headers its
 * count left out) and its log. The key is only read, by any thread. */
static void cb_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
	struct nb *m = closure;
	const char *subj = natsMsg_GetSubject(msg), **keys = NULL;
	struct pr_env e;
	int n = 0, err;

	(void)nc;
	(void)sub;
	if (natsMsgHeader_Keys(msg, &keys, &n) != NATS_NOT_FOUND) {
		free((void *)keys);
		drop_count(m, subj, D_HEADERS);
		natsMsg_Destroy(msg);
		return;
	}
	err = procreg__env_open(m->key, subj, (const uint8_t *)natsMsg_GetData(msg),
				(size_t)natsMsg_GetDataLength(msg), &e);
	if (err) {
		drop_count(m, subj, refusal(err));
		natsMsg_Destroy(msg);
		return;
	}
	enqueue(m, I_MSG, msg, &e);
}

static void cb_connected(natsConnection *nc, void *closure)
{
	(void)nc;
	enqueue(closure, I_CONNECTED, NULL, NULL);
}

static void cb_disconnected(natsConnection *nc, void *closure)
{
	(void)nc;
	enqueue(closure, I_DISCONNECTED, NULL, NULL);
}

static void cb_closed(natsConnection *nc, void *closure)
{
	(void)nc;
	enqueue(closure, I_CLOSED, NULL, NULL);
}

static void cb_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *closure)
{
	(void)nc;
	(void)sub;
	if (err == NATS_SLOW_CONSUMER)
		enqueue(closure, I_LOST, NULL, NULL);
}

/* ---- the backend interface ---------------------------------------------- */

/* The connection's last error, as the server or nats.c put it
 * ("Authorization Violation" for refused credentials). */
static const char *conn_error(struct nb *m)
{
	const char *txt = NULL;

	if (!m->nc || natsConnection_GetLastError(m->nc, &txt) == NATS_OK || !txt || !*txt)
		return "no error reported";
	return txt;
}

static const char *without_userinfo(const char *url, char *out, size_t cap);

/* Messages lost, by nats.c (a slow consumer) or by us (the queue full):
 * whose, nobody knows. Said, a line a second at most; nothing resynced
 * here. A node whose frame was lost finds a gap in its stream, its next
 * frames held until the missing one is late, and is resynced then
 * (bridge.c: check_late()); a heartbeat each heartbeat_ms shows a gap
 * even when nothing else follows it. Every node resynced on each loss,
 * as before, let anyone able to publish on the server, cookie or not,
 * take every node down and up again thousands of times a second, their
 * names on this host gone meanwhile. */
static void messages_lost(struct nb *m, const char *why)
{
	uint64_t held = 0;

	if (pr_ratelimit_pass(&m->lost_log, pr_mono_ns(), &held))
		pr_bridge_log(&m->up, LOG_WARNING,
			      "bridge: nats: messages lost (%s; %llu more times since the last "
			      "line): the nodes whose changes were lost resync", why,
			      (unsigned long long)held);
}

static void nb_dispatch(void *b)
{
	struct nb *m = b;
	uint64_t x;
	bool lost, trim;

	(void)!read(m->efd, &x, sizeof(x));
	(void)!read(m->stfd, &x, sizeof(x));
	if (read(m->tfd, &x, sizeof(x)) == sizeof(x))
		tick(m);
	/* A bounded number of items, and no more once the dispatch's time
	 * for input is over (a message may hold 900 changes): the daemon's
	 * clients get their turn in between. */
	for (int n = 0; n < ITEMS_PER_DISPATCH && !pr_bridge_input_over(&m->up); n++) {
		struct item *it;

		pthread_mutex_lock(&m->mu);
		it = m->qhead;
		if (it) {
			m->qhead = it->next;
			if (!m->qhead)
				m->qtail = &m->qhead;
			m->qbytes -= it->bytes;
		}
		lost = m->qlost;
		m->qlost = false;
		trim = !it && m->qpeak > TRIM_AFTER_BYTES;
		if (trim)
			m->qpeak = 0;
		pthread_mutex_unlock(&m->mu);
		if (lost)
			messages_lost(m, "this node fell behind");
		if (trim) {
			/* Messages are freed on this thread, allocated on the
			 * library's: a backlog's memory stayed with its arena
			 * (270-330 MB after a flood). */
			malloc_trim(0);
		}
		if (!it) {
			/* Nothing more queued: a snapshot, and another
			 * dispatch soon if more wait. */
			if (serve_snapshot(m)) {
				x = 1;
				(void)!write(m->efd, &x, sizeof(x));
			}
			return;
		}
		switch (it->kind) {
		case I_MSG:
			on_message(m, natsMsg_GetSubject(it->msg), &it->e);
			natsMsg_Destroy(it->msg);
			break;
		case I_CONNECTED:
			if (!m->connected) {
				char url[512], shown[512];

				/* The server this connection reached: after a
				 * failover, not the one before. */
				if (!m->nc || natsConnection_GetConnectedUrl(m->nc, url, sizeof(url)) !=
						      NATS_OK || !url[0])
					snprintf(url, sizeof(url), "?");
				pr_bridge_log(&m->up, LOG_NOTICE, "bridge: nats: connected to %s",
					      without_userinfo(url, shown, sizeof(shown)));
			}
			m->connected = true;
			m->announce = true;
			heartbeat(m);
			break;
		case I_CLOSED:
			/* For good, whatever the reconnect settings: nats.c
			 * gives up on some failures (credentials refused
			 * while it retried a first connect, for one). Say so,
			 * or the node runs alone without a word. */
			pr_bridge_log(&m->up, LOG_ERR,
				      "bridge: nats: connection closed for good: %s",
				      conn_error(m));
			/* fall through */
		case I_DISCONNECTED:
			if (m->connected)
				pr_bridge_log(&m->up, LOG_WARNING,
					      "bridge: nats: %s the server: every other node is down "
					      "until it is back",
					      it->kind == I_CLOSED ? "closed" : "lost");
			m->connected = false;
			all_down(m, "no NATS server");
			break;
		case I_LOST:
			messages_lost(m, "slow consumer");
			break;
		}
		free(it);
	}
	/* More left: come back after the daemon's other work. */
	serve_snapshot(m);
	x = 1;
	(void)!write(m->efd, &x, sizeof(x));
}

static int nb_broadcast(void *b, const uint8_t *frame, size_t len)
{
	struct nb *m = b;

	/* Published even while disconnected: nats.c keeps it for the
	 * reconnection, and the nodes that did not see us go get it in
	 * order; past its buffer, the gap makes them resync. */
	if (len > PR_BP_FRAME_MAX)
		return -EINVAL;
	stream_add(m, frame, len);
	return 0;
}

static void nb_flush(void *b)
{
	/* The batch as one message; nats.c's own thread writes it out. */
	stream_flush(b, 0);
}

static void nb_nodes(void *b, void (*cb)(void *arg, const struct pr_bridge_node_info *n), void *arg)
{
	struct nb *m = b;

	for (size_t i = 0; i < m->npeers; i++) {
		const struct peer *p = &m->peers[i];
		/* Out: everything we published; every node gets our stream. */
		struct pr_bridge_node_info ni = { p->name, "nats", p->inc, p->bytes_in, m->bytes_out };

		if (p->up)
			cb(arg, &ni);
	}
}

static int nb_fd(void *b)
{
	return ((struct nb *)b)->epfd;
}

static void drain_queue(struct nb *m)
{
	pthread_mutex_lock(&m->mu);
	while (m->qhead) {
		struct item *it = m->qhead;

		m->qhead = it->next;
		if (it->msg)
			natsMsg_Destroy(it->msg);
		free(it);
	}
	m->qtail = &m->qhead;
	m->qbytes = 0;
	pthread_mutex_unlock(&m->mu);
}

static void nb_close(void *b)
{
	struct nb *m = b;
	natsStatus st;

	if (!m)
		return;
	/* The connection closes first, and takes its subscriptions with it,
	 * without an UNSUB each. Sent just before it, they would be flushed
	 * by the close, from this thread, while nats.c's reader reads: over
	 * TLS, nats.c 3.4 lets two threads use one OpenSSL session at once
	 * (fixed in later releases), and the close is where they met. */
	if (m->serving)
		m->up.snapshot_end(m->up.ctx, m->serving);
	if (m->nc)
		natsConnection_Close(m->nc);
	for (int i = 0; i < 3; i++)
		if (m->subs[i])
			natsSubscription_Destroy(m->subs[i]);
	if (m->nc)
		natsConnection_Destroy(m->nc);
	if (m->opts)
		natsOptions_Destroy(m->opts);
	/* Messages are the library's to free, so they go before it shuts
	 * down: after nats_CloseAndWait() destroying one crashes. A
	 * callback still running from here on frees its own (closing). */
	pthread_mutex_lock(&m->mu);
	m->closing = true;
	pthread_mutex_unlock(&m->mu);
	drain_queue(m);
	/* Every nats.c thread gone before procregd unloads us. One still
	 * running after the wait could yet call into this object with M:
	 * then both stay, the object pinned against dlclose() and M not
	 * freed (the daemon is on its way out), the key with it: a callback
	 * still running opens envelopes with it (cb_msg). */
	st = nats_CloseAndWait(5000);
	/* NATS_NOT_INITIALIZED: open() failed before the library started. */
	if (st != NATS_OK && st != NATS_NOT_INITIALIZED) {
		Dl_info di;

		if (m->up.log)
			m->up.log("bridge: nats: the client library's threads did not stop within 5 s: "
				  "left running");
		if (dladdr((void *)nb_close, &di) && di.dli_fname)
			dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
		return;
	}
	if (m->efd >= 0)
		close(m->efd);
	if (m->stfd >= 0)
		close(m->stfd);
	if (m->tfd >= 0)
		close(m->tfd);
	if (m->epfd >= 0)
		close(m->epfd);
	procreg__env_key_free(m->key);
	pthread_mutex_destroy(&m->mu);
	free(m->peers);
	procreg__sidx_free(&m->peer_idx);
	free(m->out);
	free(m->batch);
	free(m);
}

static const char *opt(const struct pr_bridge_config *c, enum pr_nats_opt o)
{
	static const char *const keys[] = PR_NATS_OPT_KEYS;

	return pr_bridge_opt(c, keys[o]);
}

/* Keys it knows only (nats_opts.h), and those that go together, together. */
static int check_opts(const struct nb *m, const struct pr_bridge_config *c)
{
	static const char *const keys[] = PR_NATS_OPT_KEYS;
	static const enum pr_nats_opt pairs[][2] = {
		{ NOPT_NKEY, NOPT_NKEY_SEED },
		{ NOPT_USER, NOPT_PASSWORD },
		{ NOPT_TLS_CERT, NOPT_TLS_KEY },
	};
	int err = pr_bridge_opts_check(c, &m->up, "nats", keys);

	for (size_t i = 0; !err && i < sizeof(pairs) / sizeof(pairs[0]); i++)
		if (!opt(c, pairs[i][0]) != !opt(c, pairs[i][1])) {
			m->up.log("bridge: nats: %s and %s go together", keys[pairs[i][0]],
				  keys[pairs[i][1]]);
			err = -EINVAL;
		}
	return err;
}

/* URL as the log may show it: the user and password taken out
 * ("nats://u:p@h:4222" -> "nats://h:4222"). */
static const char *without_userinfo(const char *url, char *out, size_t cap)
{
	const char *host = strstr(url, "://"), *at;

	host = host ? host + 3 : url;
	at = strchr(host, '@');
	if (!at)
		snprintf(out, cap, "%s", url);
	else
		snprintf(out, cap, "%.*s%s", (int)(host - url), url, at + 1);
	return out;
}

/* The list in m->url, for the log: each URL without its user info. */
static const char *urls_shown(const struct nb *m, char *out, size_t cap)
{
	char one[sizeof(m->url)], shown[sizeof(m->url)];
	const char *p = m->url;
	size_t len = 0;

	out[0] = 0;
	while (*p && len + 1 < cap) {
		size_t n = strcspn(p, ",");

		snprintf(one, sizeof(one), "%.*s", (int)n, p);
		len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? "," : "",
					without_userinfo(one, shown, sizeof(shown)));
		p += n + (p[n] == ',');
	}
	return out;
}

/* "scheme://[user[:pass]@]host[:port]": HOST (brackets off), 0 or
 * -EINVAL. */
static int url_host(const char *url, char *host, size_t cap)
{
	const char *h = strstr(url, "://"), *at, *end;

	h = h ? h + 3 : url;
	at = strchr(h, '@');
	if (at)
		h = at + 1;
	if (*h == '[') {
		end = strchr(h, ']');
		h++;
	} else {
		end = h + strcspn(h, ":/");
	}
	if (!end || end == h || (size_t)(end - h) >= cap)
		return -EINVAL;
	memcpy(host, h, (size_t)(end - h));
	host[end - h] = 0;
	return 0;
}

/* Whether HOST is this machine's loopback, where nobody sits on the path. */
static bool loopback(const char *host)
{
	return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1");
}

/*
 * A server reached without TLS, other than on loopback: said at start.
 * Whoever is on the path can read what the nodes replicate (the MAC keeps
 * it from being forged, not from being read), and can make this daemon
 * allocate without bound: the NATS client takes a message's size from the
 * server and allocates the whole message before procregd sees it (one
 * MSG line claiming 1.5 GB took the daemon to 1.34 GB). A server that is
 * verified (TLS) is trusted with that, as it is with delivery itself.
 */
static void plain_warn(struct nb *m, const char *url)
{
	char host[256];

	if (url_host(url, host, sizeof(host)) == 0 && loopback(host))
		return;
	pr_bridge_log(&m->up, LOG_WARNING,
		      "bridge: nats: %s without TLS: whoever is on the path can read what the "
		      "nodes replicate, and make this daemon allocate what it likes (the NATS "
		      "client allocates each message whole, at the size the server gives); "
		      "use tls:// or --nats-tls-ca", url);
}

/* The servers of m->url, comma-separated, to nats.c; TLS where a URL or
 * an option asks for it. nats.c 3.4 takes a single URL in SetURL (a list
 * there parses as one URL with a port it cannot read, and the daemon
 * waited for a server for ever): a list goes to SetServers. */
static natsStatus set_servers(struct nb *m, const struct pr_bridge_config *c, bool *tls)
{
	char *copy = strdup(m->url), *save = NULL, *tok;
	const char *servers[SERVERS_MAX];
	int n = 0;
	natsStatus s = NATS_OK;

	*tls = opt(c, NOPT_TLS_CA) || opt(c, NOPT_TLS_CERT) || opt(c, NOPT_TLS_HOSTNAME);
	if (!copy)
		return NATS_NO_MEMORY;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		if (!*tok)
			continue;
		if (n == SERVERS_MAX) {
			m->up.log("bridge: nats: url: more than %d servers", SERVERS_MAX);
			s = NATS_INVALID_ARG;
			break;
		}
		*tls |= !strncmp(tok, "tls://", 6);
		servers[n++] = tok;
	}
	if (s == NATS_OK && !n) {
		m->up.log("bridge: nats: url: no server in '%s'", m->url);
		s = NATS_INVALID_ARG;
	}
	if (s == NATS_OK)
		s = natsOptions_SetServers(m->opts, servers, n);
	if (s == NATS_OK && n)
		url_host(servers[0], m->first_host, sizeof(m->first_host));
	for (int i = 0; s == NATS_OK && !*tls && i < n; i++)
		plain_warn(m, servers[i]);
	free(copy);
	return s;
}

/* Whether this nats.c shares one OpenSSL session between its reader
 * thread and its writers without a lock, as releases before 3.11 do
 * (Debian 12 ships 3.4.1): ThreadSanitizer reports it, tests/tsan.supp
 * says why it is not ours. */
static bool tls_racy(void)
{
	int major = 0, minor = 0;

	return sscanf(nats_GetVersion(), "%d.%d", &major, &minor) == 2 &&
	       (major < 3 || (major == 3 && minor < 11));
}

/* TLS to every server: the CA, the name checked, a client certificate. */
static natsStatus set_tls(struct nb *m, const struct pr_bridge_config *c)
{
	const char *ca = opt(c, NOPT_TLS_CA) ? opt(c, NOPT_TLS_CA) : PR_NATS_TLS_CA_DEFAULT;
	const char *name = opt(c, NOPT_TLS_HOSTNAME);
	uint8_t addr[16];
	natsStatus s;

	if (access(ca, R_OK) != 0) {
		m->up.log("bridge: nats: TLS: CA file %s: %s%s", ca, strerror(errno),
			  opt(c, NOPT_TLS_CA) ? "" : " (give one with --nats-tls-ca)");
		return NATS_INVALID_ARG;
	}
	s = natsOptions_SetSecure(m->opts, true);
	if (s == NATS_OK)
		s = natsOptions_LoadCATrustedCertificates(m->opts, ca);
	if (s == NATS_OK && opt(c, NOPT_TLS_CERT))
		s = natsOptions_LoadCertificatesChain(m->opts, opt(c, NOPT_TLS_CERT),
						      opt(c, NOPT_TLS_KEY));
	/* nats.c checks the certificate's name only when told which: the
	 * first URL's host, unless it is an address (the certificate's
	 * chain to the CA is still checked). */
	if (!name && m->first_host[0] && inet_pton(AF_INET, m->first_host, addr) != 1 &&
	    inet_pton(AF_INET6, m->first_host, addr) != 1)
		name = m->first_host;
	if (s == NATS_OK && name)
		s = natsOptions_SetExpectedHostname(m->opts, name);
	if (s == NATS_OK)
		m->up.log("bridge: nats: TLS, server certificates checked against %s%s%s%s", ca,
			  name ? " and the name " : "", name ? name : "",
			  opt(c, NOPT_TLS_CERT) ? ", with a client certificate" : "");
	if (s == NATS_OK && tls_racy())
		m->up.log("bridge: nats: warning: nats.c %s reads and writes a TLS session from two "
			  "threads without a lock (fixed in nats.c 3.11): use a later one where you "
			  "can", nats_GetVersion());
	return s;
}

static int nats_setup(struct nb *m, const struct pr_bridge_config *c)
{
	int64_t ping = c->timeout_ms > 1000 ? c->timeout_ms : 1000;
	natsStatus s;
	const char *kind[3] = { "node", "snap", "inbox" };

	bool tls = false;
	char shown[sizeof(m->url)];

	s = natsOptions_Create(&m->opts);
	if (s == NATS_OK)
		s = set_servers(m, c, &tls);
	if (s == NATS_OK && tls)
		s = set_tls(m, c);
	if (s == NATS_OK && opt(c, NOPT_USER))
		s = natsOptions_SetUserInfo(m->opts, opt(c, NOPT_USER), opt(c, NOPT_PASSWORD));
	if (s == NATS_OK && opt(c, NOPT_TOKEN))
		s = natsOptions_SetToken(m->opts, opt(c, NOPT_TOKEN));
	if (s == NATS_OK && opt(c, NOPT_CREDS))
		s = natsOptions_SetUserCredentialsFromFiles(m->opts, opt(c, NOPT_CREDS), NULL);
	if (s == NATS_OK && opt(c, NOPT_NKEY))
		s = natsOptions_SetNKeyFromSeed(m->opts, opt(c, NOPT_NKEY), opt(c, NOPT_NKEY_SEED));
	if (s == NATS_OK)
		s = natsOptions_SetName(m->opts, m->node);
	if (s == NATS_OK)
		s = natsOptions_SetNoEcho(m->opts, true);
	/* A change out now, not at nats.c's flusher's next round (about a
	 * millisecond): registrations are rare next to their lookups, and
	 * their latency is what other nodes see. */
	if (s == NATS_OK)
		s = natsOptions_SetSendAsap(m->opts, true);
	/* Reconnect for ever: the registry outlives any server restart. */
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(m->opts, -1);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectWait(m->opts, 250);
	if (s == NATS_OK)
		s = natsOptions_SetPingInterval(m->opts, ping);
	if (s == NATS_OK)
		s = natsOptions_SetDisconnectedCB(m->opts, cb_disconnected, m);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectedCB(m->opts, cb_connected, m);
	if (s == NATS_OK)
		s = natsOptions_SetClosedCB(m->opts, cb_closed, m);
	if (s == NATS_OK)
		s = natsOptions_SetErrorHandler(m->opts, cb_error, m);
	if (s != NATS_OK) {
		m->up.log("bridge: nats: options: %s", nats_GetLastError(NULL));
		return -EINVAL;
	}
	/* Once without retrying first: a server that refuses our
	 * credentials says so now ("Authorization Violation"), and procregd
	 * does not start. Retrying, nats.c would close the connection
	 * without a word why, and the node would run alone. Only a server
	 * that is not there yet is worth waiting for. A refusal is asked
	 * again twice before it counts: with an NKey, nats.c 3.4.1 against
	 * nats-server 2.9 is turned down now and then with a valid key (2
	 * connections of 500 with one key, one server, measured), which must
	 * not stop a daemon whose credentials are right. */
	for (int attempt = 0; attempt < 3; attempt++) {
		s = natsConnection_Connect(&m->nc, m->opts);
		if (s == NATS_OK || s == NATS_NO_SERVER)
			break;
	}
	if (s == NATS_NO_SERVER) {
		s = natsOptions_SetRetryOnFailedConnect(m->opts, true, cb_connected, m);
		if (s == NATS_OK)
			s = natsConnection_Connect(&m->nc, m->opts);
	}
	if (s == NATS_OK) {
		enqueue(m, I_CONNECTED, NULL, NULL);
	} else if (s == NATS_NOT_YET_CONNECTED) {
		pr_bridge_log(&m->up, LOG_WARNING,
			      "bridge: nats: no server of %s answers yet: retrying",
			      urls_shown(m, shown, sizeof(shown)));
	} else {
		/* A server that wants a client certificate and gets none
		 * just closes the connection: say what that may mean. */
		pr_bridge_log(&m->up, LOG_ERR,
			      "bridge: nats: %s: %s%s", urls_shown(m, shown, sizeof(shown)),
			      nats_GetLastError(NULL),
			      tls && !opt(c,
			      NOPT_TLS_CERT) ? " (a server that wants a client certificate "
			      "ends the connection so: --nats-tls-cert, "
			      "--nats-tls-key)" : "");
		return -EIO;
	}
	for (int i = 0; i < 3; i++) {
		char subj[SUBJECT_MAX];

		if (i == 0)
			snprintf(subj, sizeof(subj), "%s.node.*", m->prefix);
		else
			subject(m, subj, kind[i], m->node);
		s = natsConnection_Subscribe(&m->subs[i], m->nc, subj, cb_msg, m);
		if (s != NATS_OK) {
			pr_bridge_log(&m->up, LOG_ERR,
				      "bridge: nats: subscribe %s: %s (connection: %s)", subj,
				      nats_GetLastError(NULL), conn_error(m));
			return -EIO;
		}
	}
	return 0;
}

static void *nb_open(const struct pr_bridge_config *cfg, const struct pr_bridge_up *up, int *err)
{
	struct nb *m = calloc(1, sizeof(*m));
	struct epoll_event e = { .events = EPOLLIN };
	struct itimerspec its;
	uint32_t tick_ms;

	*err = -ENOMEM;
	if (!m)
		return NULL;
	m->epfd = m->efd = m->tfd = m->stfd = -1;
	pthread_mutex_init(&m->mu, NULL);
	m->qtail = &m->qhead;
	m->flap_log.burst = FLAP_LOG_BURST;
	pr_bridge_config_take(&m->c, cfg);
	pr_bridge_up_take(&m->up, up);
	snprintf(m->node, sizeof(m->node), "%s", cfg->node);
	if ((*err = check_opts(m, &m->c)) < 0)
		goto fail;
	*err = -ENOMEM;
	snprintf(m->url, sizeof(m->url), "%s",
		 opt(&m->c, NOPT_URL) ? opt(&m->c, NOPT_URL) : PR_NATS_URL_DEFAULT);
	if (opt(&m->c, NOPT_SUBJECT)) {
		snprintf(m->prefix, sizeof(m->prefix), "%s", opt(&m->c, NOPT_SUBJECT));
	} else {
		char t[PR_BP_NODE_MAX + 8];

		token(t, sizeof(t), m->c.scope ? m->c.scope : "default");
		snprintf(m->prefix, sizeof(m->prefix), PR_NATS_SUBJECT_PREFIX ".%s", t);
	}
	subject(m, m->my_stream, "node", m->node);
	m->peers = calloc(PEERS_MAX, sizeof(*m->peers));
	m->peers_max = PEERS_MAX;
	procreg__sidx_init(&m->peer_idx);
	if (getenv("PROCREG_TEST_PEERS_MAX")) {
		m->peers_max = strtoull(getenv("PROCREG_TEST_PEERS_MAX"), NULL, 10);
		if (m->peers_max < 1 || m->peers_max > PEERS_MAX)
			m->peers_max = PEERS_MAX;
	}
	m->out = malloc(PR_ENV_MAX);
	m->batch = malloc(PR_BP_FRAME_MAX);
	m->epfd = epoll_create1(EPOLL_CLOEXEC);
	m->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	m->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	m->stfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (!m->peers || !m->out || !m->batch || m->epfd < 0 || m->efd < 0 || m->tfd < 0 ||
	    m->stfd < 0 ||
	    procreg__env_key_new(cfg->cookie, cfg->cookie_len, &m->key) < 0)
		goto fail;
	/* Heartbeats and timeouts at a quarter of a heartbeat's grain. */
	tick_ms = m->c.heartbeat_ms / 4;
	tick_ms = tick_ms < 10 ? 10 : tick_ms > 250 ? 250 : tick_ms;
	m->snap_gap_ns = (uint64_t)tick_ms * 1000000ull;
	its = (struct itimerspec){ { tick_ms / 1000, (long)(tick_ms % 1000) * 1000000L },
				   { tick_ms / 1000, (long)(tick_ms % 1000) * 1000000L } };
	if (timerfd_settime(m->tfd, 0, &its, NULL) < 0 ||
	    epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->tfd, &e) < 0 ||
	    epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->stfd, &e) < 0 ||
	    epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->efd, &e) < 0)
		goto fail;
	/* Request ids from a random start: an answer to another daemon's
	 * request (an earlier run's, replayed) matches none of ours. */
	if (RAND_bytes((uint8_t *)&m->next_req, sizeof(m->next_req)) != 1)
		m->next_req = pr_mono_ns();
	m->next_req >>= 1;
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		m->counter = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	if ((*err = nats_setup(m, &m->c)) < 0)
		goto fail;
	{
		char shown[sizeof(m->url)];

		m->up.log("bridge: nats: %s, subjects %s.*", urls_shown(m, shown, sizeof(shown)),
			  m->prefix);
	}
	*err = 0;
	return m;
fail:
	nb_close(m);
	return NULL;
}

__attribute__((visibility("default")))
const struct pr_bridge_backend procreg_bridge_backend_v1 = {
	.sz = sizeof(struct pr_bridge_backend),
	.name = "nats",
	.open = nb_open,
	.fd = nb_fd,
	.dispatch = nb_dispatch,
	.broadcast = nb_broadcast,
	.flush = nb_flush,
	.nodes = nb_nodes,
	.close = nb_close,
};
