/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_bridge_hostile.c - what a hostile party on the network can make of
 * procregd's replication: one real daemon, and an attacker speaking the
 * protocol to it by hand.
 *
 *  - Whoever answers at a --peer address (before the real node is there,
 *    or on the path) with an unauthenticated REFUSE "it has this node's
 *    name", or a HELLO carrying the dialer's own name, must not make the
 *    node take that address for itself and stop dialing it.
 *  - A node with the cookie that sends its changes out of order, or claims
 *    names the table holds already, must not hold the daemon's thread:
 *    each costs a bounded amount of work (bridge.c's held frames and
 *    shadows), and local clients are answered meanwhile.
 *  - A node with the cookie that comes up under many names and reads
 *    nothing must not make the daemon queue a snapshot for each without
 *    bound: the queues stay within --max-mesh-queue, and a node that does
 *    read still joins.
 *  - Many nodes coming up at once (a partition healing) have their
 *    snapshots written in turn, a part at a time, local requests
 *    answered in between; and each is whole.
 *  - Many nodes going at once (a partition, or a node with the cookie
 *    that came up under many names and drops them all) leave the table
 *    in one walk of it, not one walk each; and that walk is made a part
 *    at a time, local requests answered in between.
 *  - A node with the cookie that tells of addresses (PEERS) must not make
 *    the daemon dial out without bound: host names whose look-ups hang do
 *    not hold up the look-up of a --peer's name, an address dropped after
 *    its tries is not dialed again when told of again, and the dials to
 *    addresses told of keep within a budget.
 *  - A node with the cookie that sends more entries than the table holds
 *    has each one it cannot replicate refused, but logged no more than
 *    once a second, with a count said even after the last burst; and
 *    it cannot take the part of the table kept for root (--reserved-size),
 *    nor the part before it kept for this host's users (--local-size):
 *    they still register.
 *  - Many nodes back at once within their grace (a partition healing, or
 *    a node with the cookie that comes back under many names), restarted
 *    or resyncing, lose what they no longer hold in one walk of the table
 *    a tick, not one walk each; what they sent since stays, and a local
 *    process may take a name the walk is to remove before it is made.
 *  - A node with the cookie that comes up under many names and on each
 *    begins a record it never finishes must not make the daemon hold the
 *    buffers for them all: they stay within --max-mesh-queue too, and a
 *    node that behaves still joins; while a few hundred nodes that behave,
 *    each sending big records, stay up under a budget far smaller than
 *    their buffers at their full size together.
 *  - Nodes with the cookie that send changes as fast as they can must not
 *    hold the daemon's thread: what comes in is taken a slice at a time,
 *    local requests answered in between; and a walk of the table under
 *    way takes its turns with theirs, not all of them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "internal.h"
#include "bridge_proto.h"
#include "byteorder.h"

#define NODES 3
#define WAIT_MS 10000
/* A local client that waits longer for a reply than this gets -ETIMEDOUT:
 * the daemon's thread was held. Generous, for sanitizer builds. */
#define ANSWER_MS 20000
#define COOKIE "a-hostile-cookie-0123456789"

struct cluster {
	char *base;
	char cookie[512];
	struct th_node n[NODES];
};

static int setup(void **state)
{
	struct cluster *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	c->base = th_nodes_make(c->n, NODES, "node", c->cookie, sizeof(c->cookie), COOKIE);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct cluster *c = *state;
	int bad = th_nodes_stop(c->n, NODES);

	th_rmrf(c->base);
	free(c->base);
	free(c);
	return bad;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- 1: one unauthenticated frame stops dials for good ------------------ */

/* Whatever answers at a --peer address once with an unauthenticated
 * REFUSE "it has this node's name" (or a HELLO with the dialer's own node
 * name) makes the node treat that address as itself: it is never dialed
 * again, though the real node comes up there later. */
enum answer { ANSWER_CLOSE, ANSWER_REFUSE, ANSWER_HELLO };

static void refuse_name_then_real_node(void **state, enum answer how)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0], *b = &c->n[1];
	int port = th_free_port(), lfd, fd, one = 1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons((uint16_t)port) };
	char peer[32], listen_b[32];
	uint8_t buf[1024];
	size_t pos = 0;
	struct pollfd pfd;
	uint64_t t0;
	bool seen = false;

	snprintf(peer, sizeof(peer), "127.0.0.1:%d", port);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);

	/* Node a, told to dial PEER. */
	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){ "--peer", peer, NULL },
				       NULL), 0);
	pfd = (struct pollfd){ .fd = lfd, .events = POLLIN };
	assert_int_equal(poll(&pfd, 1, WAIT_MS), 1);
	fd = accept(lfd, NULL, NULL);
	assert_true(fd >= 0);
	(void)!read(fd, buf, sizeof(buf)); /* a's HELLO */
	if (how == ANSWER_HELLO) {
		uint8_t nonce[PR_BP_NONCE] = { 1 }, key[PR_BP_KEY] = { 9 };

		assert_int_equal(procreg__bp_put_hello(buf, sizeof(buf), &pos, 1, nonce, key,
						       a->name, ""), 0);
	} else if (how == ANSWER_REFUSE) {
		assert_int_equal(procreg__bp_put_refuse(buf, sizeof(buf), &pos, PR_BP_REFUSE_NAME,
							"x"), 0);
	}
	assert_int_equal(write(fd, buf, pos), (ssize_t)pos);
	if (how != ANSWER_CLOSE)
		th_expect_log(a->d.log, how == ANSWER_HELLO ? "dropped (it is this node)"
							    : "it has this node's name", WAIT_MS);
	close(fd);
	close(lfd);

	/* The real node b comes up at PEER (it dials nobody: one --peer is
	 * enough, the README says). */
	snprintf(listen_b, sizeof(listen_b), "%s", peer);
	assert_int_equal(th_daemon_start(&b->d, b->dir,
					 (const char *const[]){ "--node", b->name, "--cookie-file",
								c->cookie, "--listen", listen_b,
								NULL }, NULL), 0);
	b->reg = th_open(b->dir);
	assert_non_null(b->reg);
	assert_int_equal(procreg_register(b->reg, "on-b", NULL, 0), 0);

	/* a's dials back off to 2 s at most: within 10 s it should be there. */
	t0 = mono_ms();
	while (mono_ms() - t0 < WAIT_MS && !seen) {
		struct procreg_entry e = { .sz = sizeof(e) };

		seen = procreg_lookup(a->reg, "on-b", &e) == 0;
		th_msleep(100);
	}
	if (!seen)
		fail_msg("node a never dialed %s again after one unauthenticated %s there "
			 "(log of a: %s)", peer, how == ANSWER_HELLO ? "HELLO with its own name"
				: how == ANSWER_REFUSE ? "REFUSE(name)" : "close", a->d.log);
}

/* Control: the same, the first answer a plain close: a dials again. */
static void test_close_then_real_node(void **state)
{
	refuse_name_then_real_node(state, ANSWER_CLOSE);
}

static void test_refuse_name_stops_dialing(void **state)
{
	refuse_name_then_real_node(state, ANSWER_REFUSE);
}

static void test_hello_own_name_stops_dialing(void **state)
{
	refuse_name_then_real_node(state, ANSWER_HELLO);
}

/* ---- 2: held changes, a quadratic walk on the daemon's thread ---------- */

struct sender {
	struct th_peer *p;
	uint8_t *buf;
	size_t len;
	int done;                  /* atomic: the sender thread sets it */
};

/* Like th_peer_send(), but the daemon may drop the connection midway
 * (a fixed daemon refuses the node): then the rest is not sent. */
static void *send_main(void *arg)
{
	static uint8_t rec[PR_BS_REC_MAX];
	struct sender *s = arg;
	const uint8_t *b = s->buf;
	size_t len = s->len;

	while (len) {
		size_t n = len > PR_BS_PT_MAX ? PR_BS_PT_MAX : len, off = 0;

		if (procreg__bs_seal(s->p->bs, b, n, rec) < 0)
			break;
		while (off < n + PR_BS_OVERHEAD) {
			ssize_t w = send(s->p->fd, rec + off, n + PR_BS_OVERHEAD - off, MSG_NOSIGNAL);

			if (w <= 0)
				goto out;
			off += (size_t)w;
		}
		b += n;
		len -= n;
	}
out:
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static bool sent(struct sender *s)
{
	return __atomic_load_n(&s->done, __ATOMIC_ACQUIRE);
}

static size_t change(uint8_t *buf, size_t cap, uint64_t seq, const char *name)
{
	size_t pos = 0;
	struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 99,
				 .registered_ns = procreg__now_ns(), .name = name,
				 .name_len = strlen(name) };

	assert_int_equal(procreg__bp_put_change(buf, cap, &pos, 7, seq, "fake", &e), 0);
	return pos;
}

/* While the attack's frames arrive, and for a second after, a local
 * client registers and removes a name again and again, on a handle that
 * gives up after TIMEOUT_MS: every request must be answered. */
static void answered_while(const char *dir, struct sender *s, int timeout_ms)
{
	PROCREG_OPTS(procreg_opts, o, .dir = dir, .timeout_ms = timeout_ms);
	procreg_t *reg = procreg_open(&o);
	pthread_t t;
	int after = 0, err;

	assert_non_null(reg);
	assert_int_equal(pthread_create(&t, NULL, send_main, s), 0);
	while (!sent(s) || after++ < 50) {
		err = procreg_register(reg, "probe", NULL, 0);
		if (!err)
			err = procreg_unregister(reg, "probe");
		if (err) {
			pthread_join(t, NULL);
			fail_msg("a local request failed while a node's frames came in: %s "
				 "(-ETIMEDOUT: not answered in %d ms)", procreg_strerror(err),
				 timeout_ms);
		}
		th_msleep(sent(s) ? 20 : 5);
	}
	pthread_join(t, NULL);
	procreg_close(reg);
}

/* Node "fake" (authenticated) sends an empty snapshot, then HELD changes:
 * in order, or each above the last but below one sent far ahead, so that
 * all are held until the missing ones come (they never do), with one in
 * order every 500 so that the node is never late. Each held frame used
 * to be placed by a walk from the head of everything held, on the
 * daemon's thread: at 60,000 a local request waited 9 to 15 s, and the
 * wait grows with their number. */
static size_t changes(uint8_t **out, size_t held, bool in_order)
{
	size_t cap = 128 + held * 80 + (held / 500 + 2) * 80, pos = 0, start;
	uint8_t *buf = malloc(cap);
	uint64_t next = 1;
	const uint64_t far = 1ull << 40;

	assert_non_null(buf);
	assert_int_equal(procreg__bp_begin(buf, cap, &pos, PR_BP_SNAP, 7, 0, 0, &start), 0);
	procreg__bp_end(buf, pos, start, PR_BP_SNAP_LAST);
	if (!in_order)
		pos += change(buf + pos, cap - pos, far, "h");
	for (size_t i = 0; i < held; i++) {
		if (i % 500 == 0)
			pos += change(buf + pos, cap - pos, next++, "x");
		pos += change(buf + pos, cap - pos, in_order ? next++ : (far >> 1) + i, "h");
	}
	*out = buf;
	return pos;
}

#define HELD 180000

static void held_changes(void **state, bool in_order)
{
	struct cluster *c = *state;
	static struct th_peer p;
	struct sender s = { .p = &p };

	assert_int_equal(th_node_start(&c->n[0], c->cookie, NULL, NULL), 0);
	assert_int_equal(th_peer_connect(&p, c->n[0].listen, "fake", 7, COOKIE), 0);
	s.len = changes(&s.buf, HELD, in_order);
	answered_while(c->n[0].dir, &s, ANSWER_MS);
	if (in_order) {
		struct procreg_entry e = { .sz = sizeof(e) };

		/* All applied, and the node never refused: the last change is
		 * there. */
		for (int i = 0; i < WAIT_MS / 100 && procreg_lookup(c->n[0].reg, "h", &e); i++)
			th_msleep(100);
		assert_int_equal(procreg_lookup(c->n[0].reg, "h", &e), 0);
		assert_int_equal(e.pid, 99);
	}
	assert_int_equal(th_log_count(c->n[0].d.log, "resyncing"), 0);
	th_peer_close(&p);
	free(s.buf);
}

static void test_changes_in_order(void **state)
{
	held_changes(state, true);
}

static void test_changes_held(void **state)
{
	held_changes(state, false);
}

/* A change that comes further out of order than a transport reorders
 * (below 100 held ones) is refused, and the node resyncs: placing it
 * would cost a walk of what is held. */
static void test_change_far_out_of_order(void **state)
{
	struct cluster *c = *state;
	static struct th_peer p;
	uint8_t *buf, one[256];
	size_t len = changes(&buf, 100, false);

	assert_int_equal(th_node_start(&c->n[0], c->cookie, NULL, NULL), 0);
	assert_int_equal(th_peer_connect(&p, c->n[0].listen, "fake", 7, COOKIE), 0);
	th_peer_send(&p, buf, len);
	th_peer_send(&p, one, change(one, sizeof(one), 1ull << 38, "h"));
	th_expect_log(c->n[0].d.log, "out of order: resyncing", WAIT_MS);
	th_peer_close(&p);
	free(buf);
}

/* A node refused again and again, as fast as it reconnects: the first
 * refusals are each logged, then a line a second, with a count of those
 * held back. Before, each was a line (a node with the cookie, over NATS,
 * made 1,400-2,400 a second). */
#define REFUSALS 40

static void test_refusals_log_limited(void **state)
{
	struct cluster *c = *state;
	static struct th_peer p;
	uint8_t buf[512];
	struct pr_bp_frame f;
	uint64_t t0 = procreg__mono_ns();
	int lines;

	assert_int_equal(th_node_start(&c->n[0], c->cookie, NULL, NULL), 0);
	for (int i = 0; i < REFUSALS; i++) {
		assert_int_equal(th_peer_connect(&p, c->n[0].listen, "fake", 7, COOKIE), 0);
		/* Part 0 of a snapshot twice: refused at once. */
		for (int k = 0; k < 2; k++)
			th_peer_send(&p, buf,
				     th_fake_snap(buf, sizeof(buf), 7, 0, procreg__now_ns(),
						  (const char *const[]){ "x", NULL }, false));
		while (th_peer_next(&p, &f) == 0)
			;
		th_peer_close(&p);
	}
	th_expect_log(c->n[0].d.log, "more refusals of nodes in the last second", WAIT_MS);
	lines = th_log_count(c->n[0].d.log, "out of order (expected 1): resyncing");
	/* Ten in a row, then one a second (and one more for a second begun). */
	if (lines < 10 || lines > 10 + (int)((procreg__mono_ns() - t0) / 1000000000ull) + 1)
		fail_msg("%d refusals in %llu ms logged in %d lines", REFUSALS,
			 (unsigned long long)((procreg__mono_ns() - t0) / 1000000), lines);
}

/* Node "fake"'s snapshot claiming N names PREFIX0.. stamped STAMP, in as
 * many parts as it takes, into a buffer (returned, length in *LEN). */
static uint8_t *claim_snapshot(const char *prefix, int n, size_t meta_len, uint64_t stamp,
			       size_t *len)
{
	static const char meta[PROCREG_META_MAX];
	size_t cap = (size_t)n * (64 + meta_len) + 65536, pos = 0, start;
	uint8_t *buf = malloc(cap);
	uint32_t part = 0;

	assert_non_null(buf);
	assert_int_equal(procreg__bp_begin(buf, cap, &pos, PR_BP_SNAP, 7, 0, part, &start), 0);
	for (int i = 0; i < n; i++) {
		char name[64];
		struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 99,
					 .registered_ns = stamp, .name = name, .meta = meta,
					 .meta_len = meta_len };

		snprintf(name, sizeof(name), "%s%d", prefix, i);
		e.name_len = strlen(name);
		if (procreg__bp_add_entry(buf, cap, &pos, start, &e) == -ENOBUFS) {
			procreg__bp_end(buf, pos, start, 0);
			assert_int_equal(procreg__bp_begin(buf, cap, &pos, PR_BP_SNAP, 7, 0, ++part,
							   &start), 0);
			assert_int_equal(procreg__bp_add_entry(buf, cap, &pos, start, &e), 0);
		}
	}
	procreg__bp_end(buf, pos, start, PR_BP_SNAP_LAST);
	*len = pos;
	return buf;
}

/* A node claims CLAIMS names the table holds already, each stamped later
 * than the table's: every claim loses and is set aside (a shadow), to be
 * promoted if the name's entry goes. Each shadow set aside used to scan
 * every other one; at this many, the daemon's thread was held for
 * seconds at a time (measured: a local request waited 2.0 s at 30,000
 * claims, and the wait grows with their number). Then the first names go
 * here, and the node's claims to them must take their place. */
#define CLAIMS 200000
#define SHADOW_ANSWER_MS 10000

static void test_claims_set_aside(void **state)
{
	struct cluster *c = *state;
	static struct th_peer p;
	struct sender s = { .p = &p };

	assert_int_equal(th_node_start(&c->n[0], c->cookie,
				       (const char *const[]){ "--max-names-per-proc", "250000", NULL },
				       NULL), 0);
	th_register_bulk(c->n[0].reg, "s", CLAIMS, "");
	assert_int_equal(th_peer_connect(&p, c->n[0].listen, "fake", 7, COOKIE), 0);
	s.buf = claim_snapshot("s", CLAIMS, 0, procreg__now_ns() + 1000000000ull, &s.len);
	answered_while(c->n[0].dir, &s, SHADOW_ANSWER_MS);
	/* The snapshot is in: a later change of the node's says so. */
	{
		uint8_t buf[256];

		th_peer_send(&p, buf, change(buf, sizeof(buf), 1, "fake-done"));
	}
	for (int i = 0; i < WAIT_MS / 100 && procreg_lookup(c->n[0].reg, "fake-done", NULL); i++)
		th_msleep(100);
	assert_int_equal(procreg_lookup(c->n[0].reg, "fake-done", NULL), 0);
	/* Each loss said once a second at most, with a count. */
	assert_true(th_log_count(c->n[0].d.log, "loses to ours") < 100);
	for (int i = 0; i < 100; i++) {
		char name[32];
		struct procreg_entry e = { .sz = sizeof(e) };

		snprintf(name, sizeof(name), "s%d", i * (CLAIMS / 100));
		assert_int_equal(procreg_lookup(c->n[0].reg, name, &e), 0);
		assert_int_equal(e.pid, getpid());
		assert_int_equal(procreg_unregister(c->n[0].reg, name), 0);
	}
	for (int i = 0; i < 100; i++) {
		char name[32];
		struct procreg_entry e = { .sz = sizeof(e) };
		int tries = 0;

		snprintf(name, sizeof(name), "s%d", i * (CLAIMS / 100));
		while (procreg_lookup(c->n[0].reg, name, &e) && tries++ < WAIT_MS / 100)
			th_msleep(100);
		assert_int_equal(procreg_lookup(c->n[0].reg, name, &e), 0);
		assert_int_equal(e.pid, 99);
		assert_int_not_equal(e.node, 0);
	}
	th_peer_close(&p);
	free(s.buf);
}

/* Claims set aside are bounded (64 MiB for all nodes): a node claiming
 * more keeps only what fits, says so, and costs no more memory. */
#define BIG_CLAIMS 70000

static void test_claims_bounded(void **state)
{
	struct cluster *c = *state;
	static struct th_peer p;
	struct sender s = { .p = &p };
	uint8_t buf[256];

	assert_int_equal(th_node_start(&c->n[0], c->cookie,
				       (const char *const[]){ "--max-names-per-proc", "250000", NULL },
				       NULL), 0);
	th_register_bulk(c->n[0].reg, "s", BIG_CLAIMS, "");
	assert_int_equal(th_peer_connect(&p, c->n[0].listen, "fake", 7, COOKIE), 0);
	s.buf = claim_snapshot("s", BIG_CLAIMS, 1000, procreg__now_ns() + 1000000000ull, &s.len);
	answered_while(c->n[0].dir, &s, ANSWER_MS);
	th_peer_send(&p, buf, change(buf, sizeof(buf), 1, "fake-done"));
	for (int i = 0; i < WAIT_MS / 100 && procreg_lookup(c->n[0].reg, "fake-done", NULL); i++)
		th_msleep(100);
	assert_int_equal(procreg_lookup(c->n[0].reg, "fake-done", NULL), 0);
	th_expect_log(c->n[0].d.log, "not kept: the claims set aside take 64 MiB", WAIT_MS);
	/* Said once a second, not once a claim. */
	assert_true(th_log_count(c->n[0].d.log, "not kept") < 100);
	assert_true(th_log_count(c->n[0].d.log, "loses to ours") < 100);
	th_peer_close(&p);
	free(s.buf);
}

/* Claims to one name are bounded too (16): nodes with the cookie, each
 * claiming a name held here, each stamped later, had every frame about
 * the name walk all their claims (with 1,000 of them, each such frame cost
 * 23-34 times as much). Those past the bound are not kept, and said so;
 * the name still goes to a claim kept when its holder lets it go. */
#define NAME_CLAIMERS 24

static void test_claims_per_name_bounded(void **state)
{
	struct cluster *c = *state;
	static struct th_peer p[NAME_CLAIMERS];
	struct procreg_entry e = { .sz = sizeof(e) };
	uint8_t buf[512];

	assert_int_equal(th_node_start(&c->n[0], c->cookie, NULL, NULL), 0);
	assert_int_equal(procreg_register(c->n[0].reg, "victim", NULL, 0), 0);
	for (int i = 0; i < NAME_CLAIMERS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "claimer%d", i);
		assert_int_equal(th_peer_connect(&p[i], c->n[0].listen, name, 7, COOKIE), 0);
		th_peer_send(&p[i], buf, th_fake_snap(buf, sizeof(buf), 7, 0,
						      procreg__now_ns() + 1000000000ull,
						      (const char *const[]){ "victim", NULL }, true));
	}
	th_expect_log(c->n[0].d.log, "not kept: 16 claims to it set aside already", WAIT_MS);
	assert_int_equal(procreg_lookup(c->n[0].reg, "victim", &e), 0);
	assert_int_equal(e.pid, getpid());
	assert_int_equal(procreg_unregister(c->n[0].reg, "victim"), 0);
	for (int i = 0; i < WAIT_MS / 100 && procreg_lookup(c->n[0].reg, "victim", &e); i++)
		th_msleep(100);
	assert_int_equal(procreg_lookup(c->n[0].reg, "victim", &e), 0);
	assert_int_equal(e.pid, 99);
	assert_int_not_equal(e.node, 0);
	for (int i = 0; i < NAME_CLAIMERS; i++)
		th_peer_close(&p[i]);
}

/* A node with the cookie tells of a thousand addresses where nothing
 * answers (every slot for targets), then of a real node, b. The dead ones
 * are dropped after their tries (1 here, 16 by default): the slots they
 * held go to what is told of later, and b is dialed, in its turn: ten
 * dials a tick go to addresses told of, so up to a thousand may come
 * before it (about 10 s). */
static void test_told_of_dead_peers(void **state)
{
	struct cluster *c = *state;
	static struct th_peer p;
	struct th_node *a = &c->n[0], *b = &c->n[1];
	static uint8_t buf[PR_BP_FRAME_MAX];
	size_t pos = 0, start;
	int dead = th_free_port();
	bool seen = false;

	assert_int_equal(th_node_start(a, c->cookie, NULL,
				       (const char *const[]){ "PROCREG_TEST_LEARNED_TRIES=1", NULL }),
			 0);
	assert_int_equal(th_peer_connect(&p, a->listen, "fake", 7, COOKIE), 0);
	assert_int_equal(procreg__bp_begin(buf, sizeof(buf), &pos, PR_BP_PEERS, 0, 0, 0, &start), 0);
	for (unsigned i = 0; i < PR_BP_PEERS_MAX; i++) {
		char name[32], addr[48];

		/* One port where nothing listens, a thousand loopback hosts. */
		snprintf(name, sizeof(name), "ghost%u", i);
		snprintf(addr, sizeof(addr), "127.0.%u.%u:%d", 1 + i / 250, 1 + i % 250, dead);
		assert_int_equal(procreg__bp_add_peer(buf, sizeof(buf), &pos, start, name, addr), 0);
	}
	procreg__bp_end(buf, pos, start, 0);
	th_peer_send(&p, buf, pos);
	th_expect_log(a->d.log, "dials failed, dropped", WAIT_MS);

	/* The real node b, dialing nobody; a hears of it from "fake". */
	assert_int_equal(th_node_start(b, c->cookie, NULL, NULL), 0);
	assert_int_equal(procreg_register(b->reg, "on-b", NULL, 0), 0);
	pos = 0;
	assert_int_equal(procreg__bp_begin(buf, sizeof(buf), &pos, PR_BP_PEERS, 0, 0, 0, &start), 0);
	assert_int_equal(procreg__bp_add_peer(buf, sizeof(buf), &pos, start, b->name, b->listen), 0);
	procreg__bp_end(buf, pos, start, 0);
	for (int i = 0; i < 3 * WAIT_MS / 500 && !seen; i++) {
		th_peer_send(&p, buf, pos);
		for (int k = 0; k < 5 && !seen; k++) {
			seen = procreg_lookup(a->reg, "on-b", NULL) == 0;
			th_msleep(100);
		}
	}
	if (!seen)
		fail_msg("node a never dialed b, told of after a thousand dead peers (log: %s)",
			 a->d.log);
	th_peer_close(&p);
}

/* ---- 3: connections that never read ------------------------------------ */

/* A node with the cookie comes up as LEECHES nodes, one connection each,
 * and reads nothing: each is queued the table's snapshot (SNAP_NAMES
 * names with 1000 bytes of metadata: about 8 MiB), and used to keep it,
 * all of them (measured before the bound: the daemon's anonymous memory
 * grew by 192 MiB). Now the queues hold 16 MiB at most
 * (--max-mesh-queue 16M): a newcomer's snapshot that does not fit is
 * refused, unless a queue that has sent nothing for a second can make
 * room, and it is dropped (measured: about 16 MiB more). Then a real node
 * joins and replicates both ways, LATE_LEECHES more coming as it joins
 * (it may be refused until they are stalled, and joins on a retry) and
 * as many once it is up (they do not drop it: it reads), and a local
 * client is answered. */
#define LEECHES 24
#define LATE_LEECHES 4
#define SNAP_NAMES 8000
#define LEECH_BUDGET "16M"
/* The daemon's anonymous memory may grow by this much: the budget (the
 * connections' record buffers in it), their own and the allocator's slack. */
#define LEECH_GROWTH_KB (48 * 1024)

/* Once the thread runs, it alone sends on leeches 0..n-1, and the main
 * thread connects only leeches past n, then hands them over by raising n
 * (a release store; the thread's load of it, an acquire). */
struct leeches {
	struct th_peer *p;
	bool open[LEECHES + 2 * LATE_LEECHES];
	int n;                    /* of them the thread keeps alive */
	pthread_t t;
	int stop;                 /* atomic */
};

static int leeches_n(struct leeches *l)
{
	return __atomic_load_n(&l->n, __ATOMIC_ACQUIRE);
}

static void leeches_hand_over(struct leeches *l, int n)
{
	__atomic_store_n(&l->n, n, __ATOMIC_RELEASE);
}

/* FRAME (a small one) to leech I sealed and sent; false once the daemon
 * closed it. */
static bool leech_send(struct leeches *l, int i, const uint8_t *frame, size_t len)
{
	uint8_t rec[1024];
	struct th_peer *p = &l->p[i];
	size_t off = 0;

	assert_true(len + PR_BS_OVERHEAD <= sizeof(rec));
	if (!l->open[i])
		return false;
	if (procreg__bs_seal(p->bs, frame, len, rec) < 0)
		return l->open[i] = false;
	while (off < len + PR_BS_OVERHEAD) {
		ssize_t w = send(p->fd, rec + off, len + PR_BS_OVERHEAD - off, MSG_NOSIGNAL);

		if (w <= 0)
			return l->open[i] = false;
		off += (size_t)w;
	}
	return true;
}

static void leech_heartbeats(struct leeches *l)
{
	for (int i = 0, n = leeches_n(l); i < n; i++) {
		uint8_t buf[64];
		size_t pos = 0;

		assert_int_equal(procreg__bp_put_heartbeat(buf, sizeof(buf), &pos, 7, 0), 0);
		leech_send(l, i, buf, pos);
	}
}

/* Heartbeats, so that the daemon does not drop them as silent: they are
 * alive, they only read nothing. */
static void *leech_main(void *arg)
{
	struct leeches *l = arg;

	while (!__atomic_load_n(&l->stop, __ATOMIC_RELAXED)) {
		leech_heartbeats(l);
		th_msleep(200);
	}
	return NULL;
}

/* Leech I up as node "leechI" (its empty snapshot sent): whether the
 * daemon let it (it is refused as its handshake ends when its snapshot
 * does not fit). */
static bool leech_connect(struct leeches *l, int i, const char *listen)
{
	char name[32];
	uint8_t buf[256];
	size_t len;

	snprintf(name, sizeof(name), "leech%d", i);
	if (th_peer_connect(&l->p[i], listen, name, 7, COOKIE) != 0)
		return false;
	l->open[i] = true;
	/* An empty snapshot: a node in good standing. */
	len = th_fake_snap(buf, sizeof(buf), 7, 0, procreg__now_ns(), (const char *[]){ NULL }, true);
	leech_send(l, i, buf, len);
	return true;
}

static int add_bytes_out(const struct procreg_node *n, void *arg)
{
	*(uint64_t *)arg += n->bytes_out;
	return 0;
}

/* The daemon calls a queue stalled when it has sent nothing on it for a
 * second (mesh.c, STALL_MS); the nodes file it rewrites every quarter of
 * a second counts what it sent. Quiet this long, every queue it holds is
 * stalled, however long the leeches' socket buffers took to fill (in a
 * sanitizer's build, on a slow machine, most of a second after their
 * snapshots were queued). */
#define LEECHES_QUIET_MS 1600

/* Until the daemon at REG has sent nothing to any node for
 * LEECHES_QUIET_MS, the leeches heartbeating meanwhile (or they would be
 * dropped as silent). */
static void leeches_stalled(struct leeches *l, procreg_t *reg)
{
	uint64_t last = UINT64_MAX, t0 = mono_ms(), since = t0;

	for (;;) {
		uint64_t out = 0;

		assert_int_equal(procreg_bridge(reg, NULL, add_bytes_out, &out), 0);
		if (out != last) {
			last = out;
			since = mono_ms();
		} else if (mono_ms() - since >= LEECHES_QUIET_MS) {
			return;
		}
		if (mono_ms() - t0 > 3 * WAIT_MS)
			fail_msg("the daemon still sends to the leeches after %d ms (%llu bytes)",
				 3 * WAIT_MS, (unsigned long long)out);
		leech_heartbeats(l);
		th_msleep(100);
	}
}

static int count_leech(const struct procreg_node *n, void *arg)
{
	if (!strncmp(n->name, "leech", 5))
		++*(int *)arg;
	return 0;
}

/* A real node (b) joins a while hostile nodes keep coming, MORE(ARG, 0)
 * before it is up and MORE(ARG, 1) once it is: it replicates both ways,
 * is never dropped once up, and a local client of a is answered. */
static void real_node_joins(struct cluster *c, void (*more)(void *arg, int round), void *arg)
{
	struct th_node *a = &c->n[0], *b = &c->n[1];

	assert_int_equal(th_node_start(b, c->cookie, (const char *const[]){ "--peer", a->listen,
									      NULL }, NULL), 0);
	more(arg, 0);
	assert_int_equal(procreg_register(b->reg, "on-b", NULL, 0), 0);
	assert_int_equal(procreg_register(a->reg, "on-a", NULL, 0), 0);
	th_expect_name(a->reg, "on-b", getpid(), true, WAIT_MS);
	th_expect_name(b->reg, "on-a", getpid(), true, WAIT_MS);
	/* More once it is up: it stays, and replicates on. */
	more(arg, 1);
	assert_int_equal(procreg_register(b->reg, "on-b-2", NULL, 0), 0);
	assert_int_equal(procreg_register(a->reg, "on-a-2", NULL, 0), 0);
	th_expect_name(a->reg, "on-b-2", getpid(), true, WAIT_MS);
	th_expect_name(b->reg, "on-a-2", getpid(), true, WAIT_MS);
	if (th_log_count(b->d.log, "node nodea: down")) {
		char *t = th_read_file(b->d.log, false);

		fail_msg("the real node's connection was dropped once up; its log:\n%.3000s", t);
	}
	{
		PROCREG_OPTS(procreg_opts, o, .dir = a->dir, .timeout_ms = ANSWER_MS);
		procreg_t *reg = procreg_open(&o);

		assert_non_null(reg);
		assert_int_equal(procreg_register(reg, "probe", NULL, 0), 0);
		assert_int_equal(procreg_unregister(reg, "probe"), 0);
		procreg_close(reg);
	}
}

struct leech_more {
	struct leeches *l;
	const char *listen;
};

/* LATE_LEECHES more leeches, before the real node is up (ROUND 0) or
 * after (1), kept alive by the thread; after, a while for them to hold
 * on before the node's next names. */
static void more_leeches(void *arg, int round)
{
	struct leech_more *lm = arg;
	int from = LEECHES + round * LATE_LEECHES;

	for (int i = from; i < from + LATE_LEECHES; i++)
		leech_connect(lm->l, i, lm->listen);
	leeches_hand_over(lm->l, from + LATE_LEECHES);
	if (round)
		th_msleep(1500);
}

/* The leeches the daemon at REG has up, as its nodes file says. */
static int leeches_up(procreg_t *reg)
{
	int n = 0;

	assert_int_equal(procreg_bridge(reg, NULL, count_leech, &n), 0);
	return n;
}

static long anon_kb(pid_t pid)
{
	return th_status_kb(pid, "RssAnon");
}

static void test_leeches_bounded(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0], *b = &c->n[1];
	struct leeches l = { 0 };
	struct leech_more lm;
	static char meta[1001];
	long base, peak = 0, now;
	int up = 0;

	memset(meta, 'm', sizeof(meta) - 1);
	l.p = calloc(LEECHES + 2 * LATE_LEECHES, sizeof(*l.p));
	l.n = LEECHES;
	assert_non_null(l.p);
	assert_int_equal(th_node_start(a, c->cookie,
				       (const char *const[]){ "--max-mesh-queue", LEECH_BUDGET, NULL },
				       NULL), 0);
	th_register_bulk(a->reg, "q", SNAP_NAMES, meta);
	base = anon_kb(a->d.pid);

	for (int i = 0; i < LEECHES; i++) {
		/* Some come once the first are stalled: one holding a queue
		 * that has sent nothing for a second is dropped for a
		 * newcomer, one that has not is not. */
		if (i % 8 == 7)
			leeches_stalled(&l, a->reg);
		leech_connect(&l, i, a->listen);
		now = anon_kb(a->d.pid);
		peak = now > peak ? now : peak;
	}
	assert_int_equal(pthread_create(&l.t, NULL, leech_main, &l), 0);
	for (int i = 0; i < 10; i++) {
		th_msleep(100);
		now = anon_kb(a->d.pid);
		peak = now > peak ? now : peak;
	}
	/* Those that came while the queues were full were refused their
	 * snapshot (written a turn after their handshake): not all are
	 * up. */
	up = leeches_up(a->reg);
	assert_true(up > 0);
	print_message("leeches: %d up; the daemon's anonymous memory %ld kB before, %ld kB at "
		      "most after (budget %s)\n", up, base, peak, LEECH_BUDGET);
	if (TH_SANITIZED)
		print_message("leeches: RssAnon " TH_RSS_UNBOUNDED "\n");
	else if (peak - base > LEECH_GROWTH_KB)
		fail_msg("%d connections that read nothing grew the daemon's anonymous memory by "
			 "%ld kB (at most %d kB: --max-mesh-queue %s and slack)", LEECHES,
			 peak - base, LEECH_GROWTH_KB, LEECH_BUDGET);
	/* Refused, dropped for newcomers, and said so, with a count. */
	assert_true(up < LEECHES);
	th_expect_log(a->d.log, "not reading)", WAIT_MS);
	th_expect_log(a->d.log, "dropped for --max-mesh-queue", WAIT_MS);

	/* A real node joins while they hold on, and replicates both ways;
	 * more come meanwhile (l.n: the thread keeps them alive too once
	 * they are all there). */
	lm = (struct leech_more){ &l, a->listen };
	real_node_joins(c, more_leeches, &lm);
	th_expect_name(b->reg, "q0", getpid(), true, WAIT_MS);
	now = anon_kb(a->d.pid);
	peak = now > peak ? now : peak;
	print_message("leeches: after the real node joined, %ld kB at most\n", peak);
	if (!TH_SANITIZED && peak - base > LEECH_GROWTH_KB)
		fail_msg("the daemon's anonymous memory grew by %ld kB (at most %d kB)", peak - base,
			 LEECH_GROWTH_KB);
	__atomic_store_n(&l.stop, 1, __ATOMIC_RELAXED);
	pthread_join(l.t, NULL);
	for (int i = 0; i < LEECHES + 2 * LATE_LEECHES; i++)
		if (l.p[i].bs)
			th_peer_close(&l.p[i]);
	free(l.p);
}

/* ---- 4: a burst of nodes, their snapshots in turn ----------------------- */

#define BURST_PEERS 24
#define BURST_NAMES 100000
#define BURST_NAMES_MAX 100001 /* and one more meanwhile */
#define STR_(x) #x
#define STR(x) STR_(x)

/* One node of the burst, on a thread of its own: its handshake finished,
 * then its frames read until its snapshot's last part. When its first
 * and last parts came, as the burst's count of such events so far. */
struct burster {
	struct th_peer p;
	int *events;
	int first, last;
	uint32_t parts;
	uint64_t seq, entries;
	int err;
	char why[128];
};

static void *burster_main(void *arg)
{
	struct burster *b = arg;
	struct pr_bp_frame f;

	b->err = th_peer_finish(&b->p);
	while (!b->err && !b->last) {
		struct pr_bp_entry e;
		size_t ip = 0;

		b->err = th_peer_next(&b->p, &f);
		if (b->err || f.type != PR_BP_SNAP)
			continue;
		if (!b->parts) {
			b->first = __atomic_add_fetch(b->events, 1, __ATOMIC_RELAXED);
			b->seq = f.seq;
		}
		if (f.part != b->parts || f.seq != b->seq) {
			snprintf(b->why, sizeof(b->why), "part %u (as of %llu) where %u (as of %llu) was due",
				 f.part, (unsigned long long)f.seq, b->parts, (unsigned long long)b->seq);
			b->err = -EPROTO;
			break;
		}
		b->parts++;
		while (procreg__bp_snap_entry(&f, &ip, &e))
			b->entries++;
		if (f.flags & PR_BP_SNAP_LAST)
			b->last = __atomic_add_fetch(b->events, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* BURST_PEERS nodes finish their handshakes at once with a daemon that
 * holds BURST_NAMES names. Their snapshots are written a part at a time,
 * in turn: each node has its first part before any has its last, and
 * local requests are answered in between (written whole, one a dispatch,
 * the last node waited for 23 snapshots' time, and every local request
 * for one each). Each snapshot is whole: parts in order, all as of the
 * same change, every name in them once. */
static void test_burst_in_turn(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	static struct burster bs[BURST_PEERS];
	pthread_t t[BURST_PEERS];
	int events = 0, first_max = 0, last_min = INT32_MAX;

	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){
					       "--max-names-per-proc", STR(BURST_NAMES_MAX), NULL }, NULL), 0);
	th_register_bulk(a->reg, "burst", BURST_NAMES, "");
	for (int i = 0; i < BURST_PEERS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "burst%d", i);
		assert_int_equal(th_peer_connect_held(&bs[i].p, a->listen, name, 7, COOKIE), 0);
		bs[i].events = &events;
	}
	for (int i = 0; i < BURST_PEERS; i++)
		th_peer_release(&bs[i].p);
	for (int i = 0; i < BURST_PEERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, burster_main, &bs[i]), 0);
	/* Answered meanwhile. */
	assert_int_equal(procreg_register(a->reg, "meanwhile", NULL, 0), 0);
	for (int i = 0; i < BURST_PEERS; i++) {
		pthread_join(t[i], NULL);
		if (bs[i].err)
			fail_msg("node burst%d: its snapshot: %s%s%s (log: %s)", i,
				 strerror(-bs[i].err), bs[i].why[0] ? ": " : "", bs[i].why, a->d.log);
		if (bs[i].entries != BURST_NAMES && bs[i].entries != BURST_NAMES + 1)
			fail_msg("node burst%d: a snapshot of %llu entries, %d names held", i,
				 (unsigned long long)bs[i].entries, BURST_NAMES);
		first_max = bs[i].first > first_max ? bs[i].first : first_max;
		last_min = bs[i].last < last_min ? bs[i].last : last_min;
	}
	print_message("burst: %d nodes, snapshots of %u parts; the last first part came %s the "
		      "first last part\n", BURST_PEERS, bs[0].parts,
		      first_max < last_min ? "before" : "after");
	if (first_max > last_min)
		fail_msg("a node had its whole snapshot before another had any of its own");
	for (int i = 0; i < BURST_PEERS; i++)
		th_peer_close(&bs[i].p);
}

/* ---- 5: many nodes gone at once, one walk ------------------------------ */

#define GONE_PEERS 64
#define GONE_NAMES 2        /* each gone node's */
#define GONE_LOCAL 2000

/* GONE_PEERS nodes, each holding GONE_NAMES names, drop their connections
 * at once: their grace runs out in the same tick (or two, if the closes
 * straddle one), and their entries must go in one walk of the table per
 * tick. Each used to cost a walk of its own on the daemon's thread: with
 * 900 of them over 200,000 names, 13 s in which no local request was
 * answered and the nodes still up were not heard. The walks are counted
 * from the daemon's verbose log, not timed. Another node that stays up
 * keeps its name, and the local ones stay. */
static void test_gone_at_once(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	struct th_peer *p = calloc(GONE_PEERS + 1, sizeof(*p));
	uint8_t buf[4096];
	char names[GONE_PEERS][GONE_NAMES][32];
	int walks;

	assert_non_null(p);
	/* Nobody dropped as silent meanwhile (the hand-made nodes send no
	 * heartbeats, and a sanitizer build takes its time to bring them up):
	 * they all go when their connections close. */
	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){
					       "-v", "--node-timeout-ms", "600000", NULL }, NULL), 0);
	th_register_bulk(a->reg, "local", GONE_LOCAL, "");
	for (int i = 0; i <= GONE_PEERS; i++) {
		const char *list[GONE_NAMES + 1] = { NULL };
		char node[32];

		if (i < GONE_PEERS)
			snprintf(node, sizeof(node), "gone%d", i);
		else
			snprintf(node, sizeof(node), "stays");
		assert_int_equal(th_peer_connect(&p[i], a->listen, node, 7, COOKIE), 0);
		if (i < GONE_PEERS) {
			for (int k = 0; k < GONE_NAMES; k++) {
				snprintf(names[i][k], sizeof(names[i][k]), "gone%d-%d", i, k);
				list[k] = names[i][k];
			}
		} else {
			list[0] = "stays-name";
		}
		th_peer_send(&p[i], buf, th_fake_snap(buf, sizeof(buf), 7, 0, procreg__now_ns(),
							list, true));
	}
	th_expect_names(a->reg, GONE_LOCAL + GONE_PEERS * GONE_NAMES + 1, WAIT_MS);
	assert_int_equal(th_log_count(a->d.log, "removal walk"), 0);
	for (int i = 0; i < GONE_PEERS; i++)
		th_peer_close(&p[i]);
	for (int i = 0; i < WAIT_MS / 100 &&
			th_log_count(a->d.log, "entries removed") < GONE_PEERS; i++)
		th_msleep(100);
	assert_int_equal(th_log_count(a->d.log, "entries removed"), GONE_PEERS);
	th_expect_names(a->reg, GONE_LOCAL + 1, WAIT_MS);
	for (int i = 0; i < GONE_PEERS; i++)
		for (int k = 0; k < GONE_NAMES; k++)
			assert_int_equal(procreg_lookup(a->reg, names[i][k], NULL), -ENOENT);
	assert_int_equal(procreg_lookup(a->reg, "stays-name", NULL), 0);
	assert_int_equal(procreg_lookup(a->reg, "local0", NULL), 0);
	walks = th_log_count(a->d.log, "removal walk");
	print_message("gone at once: %d nodes, %d removal walk%s\n", GONE_PEERS, walks,
		      walks == 1 ? "" : "s");
	/* One a tick that found some gone: the closes may be seen across a
	 * tick or two on a loaded machine, never across one a node. */
	if (walks < 1 || walks > GONE_PEERS / 8)
		fail_msg("%d nodes gone at once took %d walks of the table (log: %s)", GONE_PEERS,
			 walks, a->d.log);
	th_peer_close(&p[GONE_PEERS]);
	free(p);
}

/* ---- 6: what PEERS makes a node dial ------------------------------------- */

/* Addresses for peers_frame(): item I's, with PORT. */
typedef void addr_fn(char *out, size_t cap, int i, int port);

/* A host name under stall.test: its look-up never ends. */
static void stall_addr(char *out, size_t cap, int i, int port)
{
	snprintf(out, cap, "ghost%d.stall.test:%d", i, port);
}

static void loopback_addr(char *out, size_t cap, int i, int port)
{
	(void)i;
	snprintf(out, cap, "127.0.0.1:%d", port);
}

/* A loopback address of its own for each item (127.0.x.y). */
static void spread_addr(char *out, size_t cap, int i, int port)
{
	snprintf(out, cap, "127.0.%d.%d:%d", 1 + i / 250, 1 + i % 250, port);
}

/* The PEERS frame of a hand-made node telling of N nodes, ghost0.., at
 * the addresses ADDR makes: its length. */
static size_t peers_frame(uint8_t *buf, size_t cap, int n, addr_fn *addr, int port)
{
	size_t pos = 0, start;

	assert_int_equal(procreg__bp_begin(buf, cap, &pos, PR_BP_PEERS, 0, 0, 0, &start), 0);
	for (int i = 0; i < n; i++) {
		char name[32], a[64];

		snprintf(name, sizeof(name), "ghost%d", i);
		addr(a, sizeof(a), i, port);
		assert_int_equal(procreg__bp_add_peer(buf, cap, &pos, start, name, a), 0);
	}
	procreg__bp_end(buf, pos, start, 0);
	return pos;
}

static int probe_exists(void *path)
{
	return access(path, F_OK) == 0;
}

/* A listener the test holds on ADDR (network order) and PORT, for the
 * daemon to dial: its fd. */
static int hold_listener(uint32_t addr, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = addr,
				  .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 4096), 0);
	return fd;
}

/* The connections made to LFD for MS ms, each accepted and closed at once
 * (a dial that does not authenticate): how many. */
static int accept_for(int lfd, int ms)
{
	uint64_t end = mono_ms() + (uint64_t)ms;
	int n = 0;

	for (uint64_t now = mono_ms(); now < end; now = mono_ms()) {
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };
		int fd;

		if (poll(&pfd, 1, (int)(end - now)) <= 0)
			continue;
		while ((fd = accept(lfd, NULL, NULL)) >= 0) {
			close(fd);
			n++;
		}
	}
	return n;
}

/* Host names told of (PEERS) whose look-ups never end (a DNS server that
 * does not answer, getaddrinfo_stall.so) must not hold up the look-up of
 * a --peer given by name: node a dials b at localhost:PORT, b restarts
 * after a node with the cookie told a of STALL_NAMES such names and left,
 * and a must look localhost up again to reach b. It used to queue behind
 * the names told of, on the one resolver thread, for good (with a DNS
 * server that times out, 10 s each: seen 59 s for 6 names). */
#define STALL_NAMES 4

static void test_told_of_names_stall(void **state)
{
	struct cluster *c = *state;
	static struct th_peer p;
	static uint8_t buf[PR_BP_FRAME_MAX];
	struct th_node *a = &c->n[0], *b = &c->n[1];
	char mark[600], preload[600], mark_env[640], asan[1024], peer[64], listen_b[32];
	const char *asan_opts = getenv("ASAN_OPTIONS");
	int port = th_free_port();
	const char *const b_args[] = { "--node", b->name, "--cookie-file", c->cookie, "--listen",
				       listen_b, NULL };
	size_t len;

	snprintf(listen_b, sizeof(listen_b), "127.0.0.1:%d", port);
	snprintf(peer, sizeof(peer), "localhost:%d", port);
	snprintf(mark, sizeof(mark), "%s/stalled", c->base);
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", GETADDRINFO_STALL);
	snprintf(mark_env, sizeof(mark_env), "PROCREG_TEST_STALL_MARK=%s", mark);
	/* Under AddressSanitizer, its runtime must come first; the shim
	 * preloaded ahead of it is harmless. */
	snprintf(asan, sizeof(asan), "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
		 asan_opts ? asan_opts : "", asan_opts && asan_opts[0] ? ":" : "");

	assert_int_equal(th_daemon_start(&b->d, b->dir, b_args, NULL), 0);
	a->may_hang = true;
	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){ "--peer", peer, NULL },
				       (const char *const[]){ preload, mark_env, asan, NULL }), 0);
	b->reg = th_open(b->dir);
	assert_non_null(b->reg);
	assert_int_equal(procreg_register(b->reg, "on-b", NULL, 0), 0);
	th_expect_name(a->reg, "on-b", getpid(), true, WAIT_MS);

	/* a's connection to b is up: once it ends, localhost is looked up
	 * afresh. A node with the cookie tells of the names, and goes. */
	assert_int_equal(th_peer_connect(&p, a->listen, "fake", 7, COOKIE), 0);
	len = peers_frame(buf, sizeof(buf), STALL_NAMES, stall_addr, 1);
	th_peer_send(&p, buf, len);
	if (!th_until(probe_exists, mark, WAIT_MS))
		fail_msg("no look-up of a name told of began (log of a: %s)", a->d.log);
	th_peer_close(&p);

	/* b restarts on the same port, with a name a has not seen. */
	procreg_close(b->reg);
	b->reg = NULL;
	assert_int_equal(th_daemon_stop(&b->d), 0);
	assert_int_equal(th_daemon_start(&b->d, b->dir, b_args, NULL), 0);
	b->reg = th_open(b->dir);
	assert_non_null(b->reg);
	assert_int_equal(procreg_register(b->reg, "on-b-again", NULL, 0), 0);
	if (!th_name_within(a->reg, "on-b-again", getpid(), true, 3 * WAIT_MS))
		fail_msg("node a never reached its --peer %s again: its look-up waits behind "
			 "names told of that never resolve (log of a: %s)", peer, a->d.log);
	assert_false(th_log_has(a->d.log, "cannot resolve"));
}

/* An address told of is dialed LEARNED_TRIES times (2 here) and dropped;
 * told of again and again (REPEATS PEERS frames, 300 ms apart), it is not
 * dialed again. It used to get its tries afresh each time: a node with the
 * cookie could keep every node connecting to any host and port (seen: 16
 * connections to each of 10 listeners in 30 s, each carrying a HELLO). */
#define RETOLD_TRIES 2
#define REPEATS 10

static void test_told_of_again_not_redialed(void **state)
{
	struct cluster *c = *state;
	static struct th_peer p;
	static uint8_t buf[PR_BP_FRAME_MAX];
	struct th_node *a = &c->n[0];
	int port = th_free_port(), lfd = hold_listener(htonl(INADDR_LOOPBACK), port), first = 0,
	    again = 0;
	size_t len;
	char tries_env[64];

	snprintf(tries_env, sizeof(tries_env), "PROCREG_TEST_LEARNED_TRIES=%d", RETOLD_TRIES);
	assert_int_equal(th_node_start(a, c->cookie, NULL, (const char *const[]){ tries_env, NULL }),
			 0);
	assert_int_equal(th_peer_connect(&p, a->listen, "fake", 7, COOKIE), 0);
	len = peers_frame(buf, sizeof(buf), 1, loopback_addr, port);
	th_peer_send(&p, buf, len);
	for (int i = 0; i < WAIT_MS / 100 && !th_log_has(a->d.log, "dials failed, dropped"); i++)
		first += accept_for(lfd, 100);
	th_expect_log(a->d.log, "dials failed, dropped", 1);
	first += accept_for(lfd, 300);
	assert_int_equal(first, RETOLD_TRIES);

	for (int i = 0; i < REPEATS; i++) {
		th_peer_send(&p, buf, len);
		again += accept_for(lfd, 300);
	}
	if (again)
		fail_msg("an address dropped after its %d dials was dialed %d times more, told of "
			 "again %d times (log of a: %s)", RETOLD_TRIES, again, REPEATS, a->d.log);
	th_expect_log(a->d.log, "not dialed again for", WAIT_MS);
	/* Said once a second at most, not once a frame. */
	assert_true(th_log_count(a->d.log, "not dialed again for") <= 1 + REPEATS * 3 / 10 + 1);
	th_peer_close(&p);
	close(lfd);
}

/* A thousand addresses told of at once, all of them this test's listener
 * (127.0.x.y: all loopback): the daemon dials at most BUDGET_TICK of them
 * a 100 ms tick (mesh.c's LEARNED_DIALS_TICK). Counted over WINDOW_MS of
 * the test's clock: a slow daemon dials fewer, never more. It used to dial
 * every one at the next tick, then each again as its backoff ran out (650
 * connections a second to wherever a node with the cookie chose). */
#define BUDGET_TICK 10
#define TOLD_OF 1000
#define WINDOW_MS 1000

static void test_told_of_dials_budgeted(void **state)
{
	struct cluster *c = *state;
	static struct th_peer p;
	static uint8_t buf[PR_BP_FRAME_MAX];
	struct th_node *a = &c->n[0];
	int port = th_free_port(), lfd = hold_listener(htonl(INADDR_ANY), port), n;
	uint64_t t0, ms;
	size_t len;

	assert_int_equal(th_node_start(a, c->cookie, NULL, NULL), 0);
	assert_int_equal(th_peer_connect(&p, a->listen, "fake", 7, COOKIE), 0);
	len = peers_frame(buf, sizeof(buf), TOLD_OF, spread_addr, port);
	t0 = mono_ms();
	th_peer_send(&p, buf, len);
	n = accept_for(lfd, WINDOW_MS);
	ms = mono_ms() - t0;
	/* A tick may fall at each end of the window. */
	if ((uint64_t)n > BUDGET_TICK * (ms / 100 + 2))
		fail_msg("%d dials to addresses told of in %llu ms: more than %d a tick (log of a: "
			 "%s)", n, (unsigned long long)ms, BUDGET_TICK, a->d.log);
	assert_true(n > 0);
	th_expect_log(a->d.log, "wait to be dialed", WAIT_MS);
	th_peer_close(&p);
	close(lfd);
}

/* ---- 7: a node's entries into a full table ----------------------------- */

#define FILL 8000                 /* names of 1,000 bytes: twice what 4 MiB hold */
#define FILL_SMALL 100000         /* names without metadata: more than 4 MiB can index */

static int fake_changes(const struct procreg_node *n, void *arg)
{
	if (!strcmp(n->name, "fake"))
		*(uint64_t *)arg = n->changes_in;
	return 0;
}

/* Until node a has applied (or refused) change SEQ of node "fake". */
static void wait_change(struct th_node *a, uint64_t seq)
{
	uint64_t in = 0;

	for (int i = 0; i < WAIT_MS / 10 && in < seq; i++) {
		if (i)
			th_msleep(10);
		in = 0;
		assert_int_equal(procreg_bridge(a->reg, NULL, fake_changes, &in), 0);
	}
	if (in < seq)
		fail_msg("node fake's change %llu not applied in %d ms (log: %s)",
			 (unsigned long long)seq, WAIT_MS, a->d.log);
}

/* Node a, with a 4 MiB table (and LOCAL_SIZE for --local-size, if not
 * NULL), and node "fake" (P), with the cookie, whose snapshot claims N
 * names with META_LEN bytes of metadata each, then its change 1: once
 * that is applied, the snapshot is, as far as the table had room. */
static void fill_with(struct cluster *c, struct th_peer *p, const char *local_size, int n,
		      size_t meta_len)
{
	struct th_node *a = &c->n[0];
	uint8_t one[256], *buf;
	size_t len;

	assert_int_equal(th_node_start(a, c->cookie,
				       (const char *const[]){ "--max-size", "4M",
							      local_size ? "--local-size" : NULL,
							      local_size, NULL },
				       NULL), 0);
	assert_int_equal(th_peer_connect(p, a->listen, "fake", 7, COOKIE), 0);
	buf = claim_snapshot("f", n, meta_len, procreg__now_ns(), &len);
	th_peer_send(p, buf, len);
	free(buf);
	th_peer_send(p, one, change(one, sizeof(one), 1, "fill-done"));
	wait_change(a, 1);
}

static uint64_t names_of(procreg_t *reg)
{
	PROCREG_OPTS(procreg_stats, st);

	assert_int_equal(procreg_stats(reg, &st), 0);
	return st.names;
}

/* FILL names of 1,000 bytes: what stops them is the arena. */
static void fill_from_node(struct cluster *c, struct th_peer *p, const char *local_size)
{
	fill_with(c, p, local_size, FILL, 1000);
}

/* Each entry a full table refused used to be a line in the log: a node
 * with the cookie sending 200,000 changes grew it by 72 MB in 3 s. Now
 * a line a second at most, and, once the second is up, one that says
 * how many were not logged, even when no refusal follows to carry it
 * (that count used to wait for the next refusal, and after the last
 * burst it was never said). Every refusal is in the log: as a line, or
 * in a count. */
static void test_full_table_log_limited(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	static struct th_peer p;
	uint64_t names, refused, held;
	int lines;

	fill_from_node(c, &p, NULL);
	names = names_of(a->reg);
	refused = FILL + 1 - names;
	/* The count is said a second after the last line at the latest. */
	th_expect_log(a->d.log, "more entries not replicated in the last second", WAIT_MS);
	/* Lines about an entry, not the count lines. */
	lines = th_log_count(a->d.log, "not replicated") -
		th_log_count(a->d.log, "more entries not replicated");
	held = th_log_held(a->d.log, "entries not replicated");
	print_message("%d names sent into a 4 MiB table, %llu refused: %d line%s about them, "
		      "%llu more counted\n", FILL + 1, (unsigned long long)refused, lines,
		      lines == 1 ? "" : "s", (unsigned long long)held);
	if (lines < 1 || lines > FILL / 40)
		fail_msg("%d log lines for %d names sent into a full table (log: %s)", lines, FILL,
			 a->d.log);
	if ((uint64_t)lines + held != refused)
		fail_msg("%llu entries refused, the log says %d lines and %llu more (log: %s)",
			 (unsigned long long)refused, lines, (unsigned long long)held, a->d.log);
	th_peer_close(&p);
}

/* As user U (a child), on the daemon of DIR: with NAMES 0, register a
 * name with 1,000 bytes of metadata, 0 if refused with ENOSPC; else
 * register NAMES such names and join a group, 0 if all went in. */
struct user_reg {
	const char *dir;
	struct th_user *u;
	int names;
};

static int user_register_main(void *p)
{
	static const char meta[1000];
	const struct user_reg *a = p;
	procreg_t *reg;
	int err = 0;

	th_become(a->u);
	reg = th_open(a->dir);
	if (!reg)
		return 1;
	if (!a->names) {
		err = procreg_register(reg, "user-after", meta, sizeof(meta));
		procreg_close(reg);
		if (err != -ENOSPC) {
			fprintf(stderr, "user-after: %s, want ENOSPC\n", procreg_strerror(err));
			return 2;
		}
		return 0;
	}
	for (int i = 0; i < a->names && !err; i++) {
		char name[32];

		snprintf(name, sizeof(name), "user-after%d", i);
		err = procreg_register(reg, name, meta, sizeof(meta));
		if (err)
			fprintf(stderr, "user's %s: %s\n", name, procreg_strerror(err));
	}
	if (!err && (err = procreg_join(reg, "user-group", meta, sizeof(meta))))
		fprintf(stderr, "user's join: %s\n", procreg_strerror(err));
	procreg_close(reg);
	return err ? 2 : 0;
}

/* UR as a user made for it, who reaches the socket through the base (the
 * cookie in it stays 0600): its child must succeed. */
static void user_registers(struct cluster *c, struct user_reg *ur)
{
	assert_int_equal(chmod(c->base, 0755), 0);
	th_user_new(ur->u);
	assert_int_equal(th_wait(th_fork(user_register_main, ur)), 0);
	th_user_del(ur->u);
}

/* Another node's entries took the reserve kept for this host's root as
 * any other space: a node with the cookie whose snapshot held more than
 * the table (4 MiB, 5,000 names of 1 KiB) left it all but full, and root
 * could register nothing here. Now they stop where other uids' names
 * do: root still registers and joins, an unprivileged user does not
 * (with no local share, --local-size 0: the user meets the reserve at
 * once). */
static void test_full_table_root_registers(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	static struct th_peer p;
	static const char meta[500];
	struct th_user u;
	struct user_reg ur = { a->dir, &u, 0 };

	fill_from_node(c, &p, "0");
	assert_true(th_log_count(a->d.log, "not replicated") >= 1);
	for (int i = 0; i < 16; i++) {
		char name[32];
		int err;

		snprintf(name, sizeof(name), "root-after%d", i);
		err = procreg_register(a->reg, name, meta, sizeof(meta));
		if (err)
			fail_msg("root's %s: %s, after a node filled the table (log: %s)", name,
				 procreg_strerror(err), a->d.log);
	}
	assert_int_equal(procreg_join(a->reg, "root-group", meta, sizeof(meta)), 0);
	user_registers(c, &ur);
	th_peer_close(&p);
}

/* Other nodes' entries could take all of the table but root's reserve:
 * a node with the cookie whose snapshot held more than the table left
 * every unprivileged user here with ENOSPC for each name, a host's
 * service denied from the network. Now they stop short of the local
 * share (--local-size, 1/8 of the table by default) as well, logged:
 * a user registers 64 names of 1 KiB and joins a group. */
static void test_full_table_users_register(void **state)
{
	PROCREG_OPTS(procreg_stats, st);
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	static struct th_peer p;
	struct th_user u;
	struct user_reg ur = { a->dir, &u, 64 };
	uint64_t kept = (4u << 20) / 8 + (4u << 20) / 32;

	fill_from_node(c, &p, NULL);
	assert_int_equal(procreg_stats(a->reg, &st), 0);
	print_message("%d names of 1 KiB sent into a 4 MiB table: %llu in, %llu of %llu bytes "
		      "used\n", FILL, (unsigned long long)st.names,
		      (unsigned long long)st.arena_used, (unsigned long long)st.arena_size);
	if (st.arena_size - st.arena_used < kept)
		fail_msg("a node's entries left %llu bytes free, want the %llu kept for this "
			 "host (log: %s)", (unsigned long long)(st.arena_size - st.arena_used),
			 (unsigned long long)kept, a->d.log);
	th_expect_log(a->d.log, "kept for this host's users (--local-size)", WAIT_MS);
	user_registers(c, &ur);
	th_peer_close(&p);
}

/* Names without metadata: what stops them is the index. A node's names
 * filled it to 5/8 of its slots (40,960 of 65,536), past which doubling
 * it needs more of the arena than there is: the local share of bytes
 * alone left users no slot to take. Now a node's entries grow it, or
 * stop, at half its slots, and the eighth above is this host's. And a
 * growth of theirs must leave the room kept for the index at its new
 * size: about one run in fifty grew it to 65,536 slots (as the old
 * indexes were reclaimed sooner or later), and the user's join after its
 * names was refused ENOSPC (test_table's
 * test_remote_growth_leaves_local_share has both orders). */
static void test_full_index_users_register(void **state)
{
	PROCREG_OPTS(procreg_stats, st);
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	static struct th_peer p;
	struct th_user u;
	struct user_reg ur = { a->dir, &u, 64 };

	fill_with(c, &p, NULL, FILL_SMALL, 0);
	assert_int_equal(procreg_stats(a->reg, &st), 0);
	print_message("%d names without metadata sent into a 4 MiB table: %llu in, %llu of %llu "
		      "bytes used, %llu slots\n", FILL_SMALL, (unsigned long long)st.names,
		      (unsigned long long)st.arena_used, (unsigned long long)st.arena_size,
		      (unsigned long long)st.index_capacity);
	assert_true(th_log_count(a->d.log, "not replicated") >= 1);
	if (st.names * 2 > st.index_capacity)
		fail_msg("a node's names took %llu of %llu slots, want half at most (log: %s)",
			 (unsigned long long)st.names, (unsigned long long)st.index_capacity,
			 a->d.log);
	user_registers(c, &ur);
	th_peer_close(&p);
}

/* ---- 8: many nodes back at once, one walk ------------------------------ */

#define BACK_PEERS 64
#define BACK_NAMES 3        /* each node's, backI-0 .. backI-2 */
#define BACK_LOCAL 2000

/* Node "backI"'s name WHAT ("0", "1", "2", "new"...) into BUF. */
static const char *back_name(char *buf, size_t cap, int i, const char *what)
{
	snprintf(buf, cap, "back%d-%s", i, what);
	return buf;
}

/* Change SEQ of node NODE, incarnation INC: NAME registered at STAMP. */
static size_t node_change(uint8_t *buf, size_t cap, const char *node, uint64_t inc,
			  uint64_t seq, const char *name, uint64_t stamp)
{
	size_t pos = 0;
	struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 99,
				 .registered_ns = stamp, .name = name, .name_len = strlen(name) };

	assert_int_equal(procreg__bp_put_change(buf, cap, &pos, inc, seq, node, &e), 0);
	return pos;
}

/* Node a, its grace for a node that went long (no tick can end it), with
 * BACK_LOCAL names of its own; node "stays" up with "stays-name"; and
 * BACK_PEERS nodes (P), incarnation 7, each with BACK_NAMES names stamped
 * STAMP, whose connections then closed: a has seen each go, and keeps
 * their names within their grace. */
static void back_setup(struct cluster *c, struct th_peer *p, struct th_peer *stays,
		       uint64_t stamp)
{
	struct th_node *a = &c->n[0];
	uint8_t buf[4096];

	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){
					       "-v", "--node-timeout-ms", "600000", NULL },
				       (const char *const[]){ "PROCREG_TEST_LINGER_MS=600000",
							      NULL }), 0);
	th_register_bulk(a->reg, "local", BACK_LOCAL, "");
	for (int i = 0; i < BACK_PEERS; i++) {
		char node[32], names[BACK_NAMES][32];
		const char *list[BACK_NAMES + 1] = { NULL };

		snprintf(node, sizeof(node), "back%d", i);
		for (int k = 0; k < BACK_NAMES; k++) {
			char what[8];

			snprintf(what, sizeof(what), "%d", k);
			list[k] = back_name(names[k], sizeof(names[k]), i, what);
		}
		assert_int_equal(th_peer_connect(&p[i], a->listen, node, 7, COOKIE), 0);
		th_peer_send(&p[i], buf, th_fake_snap(buf, sizeof(buf), 7, 0, stamp, list, true));
	}
	assert_int_equal(th_peer_connect(stays, a->listen, "stays", 7, COOKIE), 0);
	th_peer_send(stays, buf, th_fake_snap(buf, sizeof(buf), 7, 0, stamp,
					      (const char *const[]){ "stays-name", NULL }, true));
	th_expect_names(a->reg, BACK_LOCAL + BACK_PEERS * BACK_NAMES + 1, WAIT_MS);
	for (int i = 0; i < BACK_PEERS; i++)
		th_peer_close(&p[i]);
	/* Closed by peer, or reset (the daemon's snapshot unread). */
	for (int i = 0; i < WAIT_MS / 100 && th_log_count(a->d.log, ": down (") < BACK_PEERS; i++)
		th_msleep(100);
	assert_int_equal(th_log_count(a->d.log, ": down ("), BACK_PEERS);
	th_expect_names(a->reg, BACK_LOCAL + BACK_PEERS * BACK_NAMES + 1, WAIT_MS);
	assert_int_equal(th_log_count(a->d.log, "removal walk"), 0);
}

/* Node a stopped (SIGSTOP) while RUN(ARG) sends what the nodes send, then
 * let go: the daemon finds it all at once, as from many nodes together,
 * a dispatch taking up to 64 connections. */
static void while_stopped(struct th_node *a, void (*run)(void *arg), void *arg)
{
	assert_int_equal(kill(a->d.pid, SIGSTOP), 0);
	assert_true(th_until(th_stopped, &a->d.pid, WAIT_MS));
	run(arg);
	assert_int_equal(kill(a->d.pid, SIGCONT), 0);
}

/* The events of the feed of REG after *CURSOR for node backI's names:
 * in SEEN[i][k], the types in order (up to 3, 0 after the last), for
 * name K of WHATS. */
static void back_events(procreg_t *reg, uint64_t *cursor, const char *const *whats, int nwhats,
			int seen[BACK_PEERS][4][3])
{
	PROCREG_OPTS(procreg_event, ev);

	memset(seen, 0, sizeof(int) * BACK_PEERS * 4 * 3);
	th_feed_settle(reg);
	while (procreg_next_event(reg, cursor, &ev, 0) == 0) {
		int i, len = 0;

		if (sscanf(ev.name, "back%d-%n", &i, &len) != 1 || !len || i < 0 ||
		    i >= BACK_PEERS)
			continue;
		for (int k = 0; k < nwhats; k++)
			if (!strcmp(ev.name + len, whats[k])) {
				int j = 0;

				while (j < 3 && seen[i][k][j])
					j++;
				assert_true(j < 3);
				seen[i][k][j] = ev.type;
			}
	}
}

/* Fail unless name K of node I had the events WANT (0-ended) and no other. */
static void expect_events(int seen[BACK_PEERS][4][3], int i, int k, const char *what,
			  const int *want)
{
	for (int j = 0; j < 3; j++)
		if (seen[i][k][j] != want[j])
			fail_msg("back%d-%s: event %d is of type %d, not %d", i, what, j,
				 seen[i][k][j], want[j]);
}

/* The walks of the table node a made (none before the nodes came back):
 * one a dispatch that saw nodes back (64 connections a dispatch: one or
 * two, or a few on a loaded machine), never one a node. */
static void expect_few_walks(struct th_node *a, const char *what)
{
	int walks = th_log_count(a->d.log, "removal walk");

	print_message("%s: %d nodes, %d removal walk%s\n", what, BACK_PEERS, walks,
		      walks == 1 ? "" : "s");
	if (walks < 1 || walks > BACK_PEERS / 8)
		fail_msg("%d nodes %s took %d walks of the table (log: %s)", BACK_PEERS, what,
			 walks, a->d.log);
}

static void release_all(void *arg)
{
	struct th_peer *p = arg;

	for (int i = 0; i < BACK_PEERS; i++)
		th_peer_release(&p[i]);
}

/* BACK_PEERS nodes, each holding BACK_NAMES names, come back within their
 * grace at once as another incarnation (restarted): what the old one held
 * goes, with a NODE_DOWN event each, in one walk for all of them; each
 * used to cost a walk of its own on the daemon's thread. The new one's
 * snapshot then holds backI-0 again (NODE_DOWN, then REGISTERED: never
 * kept as the old one's) and backI-new. */
static void test_restarted_at_once(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	struct th_peer *p = calloc(BACK_PEERS, sizeof(*p));
	static struct th_peer stays;
	static const char *const whats[] = { "0", "1", "2", "new" };
	static int seen[BACK_PEERS][4][3];
	uint64_t cursor, stamp = procreg__now_ns();
	uint8_t buf[4096];

	assert_non_null(p);
	back_setup(c, p, &stays, stamp);
	cursor = procreg_feed_head(a->reg);
	for (int i = 0; i < BACK_PEERS; i++) {
		char node[32];

		snprintf(node, sizeof(node), "back%d", i);
		assert_int_equal(th_peer_connect_held(&p[i], a->listen, node, 8, COOKIE), 0);
	}
	while_stopped(a, release_all, p);
	for (int i = 0; i < BACK_PEERS; i++) {
		char n0[32], nn[32];

		assert_int_equal(th_peer_finish(&p[i]), 0);
		th_peer_send(&p[i], buf, th_fake_snap(buf, sizeof(buf), 8, 0, procreg__now_ns(),
						      (const char *const[]){
							      back_name(n0, sizeof(n0), i, "0"),
							      back_name(nn, sizeof(nn), i, "new"), NULL },
						      true));
	}
	th_expect_names(a->reg, BACK_LOCAL + BACK_PEERS * 2 + 1, WAIT_MS);
	for (int i = 0; i < WAIT_MS / 100 &&
			th_log_count(a->d.log, "entries removed") < BACK_PEERS; i++)
		th_msleep(100);
	assert_int_equal(th_log_count(a->d.log, "entries removed"), BACK_PEERS);
	for (int i = 0; i < BACK_PEERS; i++) {
		char name[32];

		assert_int_equal(procreg_lookup(a->reg, back_name(name, sizeof(name), i, "0"), NULL), 0);
		assert_int_equal(procreg_lookup(a->reg, back_name(name, sizeof(name), i, "1"), NULL),
				 -ENOENT);
		assert_int_equal(procreg_lookup(a->reg, back_name(name, sizeof(name), i, "2"), NULL),
				 -ENOENT);
		assert_int_equal(procreg_lookup(a->reg, back_name(name, sizeof(name), i, "new"), NULL),
				 0);
	}
	assert_int_equal(procreg_lookup(a->reg, "stays-name", NULL), 0);
	assert_int_equal(procreg_lookup(a->reg, "local0", NULL), 0);
	back_events(a->reg, &cursor, whats, 4, seen);
	for (int i = 0; i < BACK_PEERS; i++) {
		expect_events(seen, i, 0, "0",
			      (const int[]){ PROCREG_EV_NODE_DOWN, PROCREG_EV_REGISTERED, 0 });
		expect_events(seen, i, 1, "1", (const int[]){ PROCREG_EV_NODE_DOWN, 0, 0 });
		expect_events(seen, i, 2, "2", (const int[]){ PROCREG_EV_NODE_DOWN, 0, 0 });
		expect_events(seen, i, 3, "new", (const int[]){ PROCREG_EV_REGISTERED, 0, 0 });
	}
	expect_few_walks(a, "restarted at once");
	for (int i = 0; i < BACK_PEERS; i++)
		th_peer_close(&p[i]);
	th_peer_close(&stays);
	free(p);
}

struct resync_send {
	struct th_peer *p;
	uint64_t stamp;
};

/* Each node's snapshot confirms backI-0 only, and in the same write come
 * its changes 1 and 2: backI-late, new, and backI-2 again. */
static void send_resyncs(void *arg)
{
	struct resync_send *r = arg;
	uint8_t buf[4096];

	for (int i = 0; i < BACK_PEERS; i++) {
		char node[32], n0[32], n2[32], nl[32];
		size_t len;

		snprintf(node, sizeof(node), "back%d", i);
		len = th_fake_snap(buf, sizeof(buf), 7, 0, r->stamp,
				   (const char *const[]){ back_name(n0, sizeof(n0), i, "0"), NULL },
				   true);
		len += node_change(buf + len, sizeof(buf) - len, node, 7, 1,
				   back_name(nl, sizeof(nl), i, "late"), procreg__now_ns());
		len += node_change(buf + len, sizeof(buf) - len, node, 7, 2,
				   back_name(n2, sizeof(n2), i, "2"), procreg__now_ns());
		th_peer_send(&r->p[i], buf, len);
	}
}

/* BACK_PEERS nodes, each holding BACK_NAMES names, come back within their
 * grace as the same incarnation, and their snapshots reach the daemon at
 * once: each confirms backI-0 only, so backI-1 and backI-2 go
 * (UNREGISTERED), in one walk for all of them; each used to cost a walk
 * of its own. What a node sends after its snapshot, in the same dispatch
 * as the walk but before it, stays: backI-late, and backI-2, registered
 * again (UNREGISTERED, then REGISTERED). backI-0, unchanged, has no
 * event. */
static void test_resynced_at_once(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	struct th_peer *p = calloc(BACK_PEERS, sizeof(*p));
	static struct th_peer stays;
	static const char *const whats[] = { "0", "1", "2", "late" };
	static int seen[BACK_PEERS][4][3];
	struct resync_send r = { .p = p, .stamp = procreg__now_ns() };
	uint64_t cursor;

	assert_non_null(p);
	back_setup(c, p, &stays, r.stamp);
	cursor = procreg_feed_head(a->reg);
	for (int i = 0; i < BACK_PEERS; i++) {
		char node[32];

		snprintf(node, sizeof(node), "back%d", i);
		assert_int_equal(th_peer_connect(&p[i], a->listen, node, 7, COOKIE), 0);
	}
	while_stopped(a, send_resyncs, &r);
	for (int i = 0; i < WAIT_MS / 100 &&
			th_log_count(a->d.log, ": resynced, ") < BACK_PEERS; i++)
		th_msleep(100);
	assert_int_equal(th_log_count(a->d.log, ": resynced, 2 entries gone meanwhile"),
			 BACK_PEERS);
	th_expect_names(a->reg, BACK_LOCAL + BACK_PEERS * 3 + 1, WAIT_MS);
	for (int i = 0; i < BACK_PEERS; i++) {
		char name[32];

		assert_int_equal(procreg_lookup(a->reg, back_name(name, sizeof(name), i, "0"), NULL), 0);
		assert_int_equal(procreg_lookup(a->reg, back_name(name, sizeof(name), i, "1"), NULL),
				 -ENOENT);
		assert_int_equal(procreg_lookup(a->reg, back_name(name, sizeof(name), i, "2"), NULL), 0);
		assert_int_equal(procreg_lookup(a->reg, back_name(name, sizeof(name), i, "late"), NULL),
				 0);
	}
	assert_int_equal(procreg_lookup(a->reg, "stays-name", NULL), 0);
	assert_int_equal(procreg_lookup(a->reg, "local0", NULL), 0);
	back_events(a->reg, &cursor, whats, 4, seen);
	for (int i = 0; i < BACK_PEERS; i++) {
		expect_events(seen, i, 0, "0", (const int[]){ 0, 0, 0 });
		expect_events(seen, i, 1, "1", (const int[]){ PROCREG_EV_UNREGISTERED, 0, 0 });
		expect_events(seen, i, 2, "2",
			      (const int[]){ PROCREG_EV_UNREGISTERED, PROCREG_EV_REGISTERED, 0 });
		expect_events(seen, i, 3, "late", (const int[]){ PROCREG_EV_REGISTERED, 0, 0 });
	}
	expect_few_walks(a, "resynced at once");
	for (int i = 0; i < BACK_PEERS; i++)
		th_peer_close(&p[i]);
	th_peer_close(&stays);
	free(p);
}

/* ---- the removals' walk in parts ------------------------------------- */

#define BIG_NAMES 200000
#define BIG_FRAME 1000      /* names a snapshot part */
#define BIG_SAMPLE 256

struct big_watch {
	const char *dir;
	int spread;             /* pairs answered while the walk was under way */
	int pairs;
};

/* How many of the sample of node big's names the table holds. */
static int big_present(procreg_t *reg)
{
	char name[32];
	int n = 0;

	for (int i = 0; i < BIG_SAMPLE; i++) {
		snprintf(name, sizeof(name), "big%d", i * (BIG_NAMES / BIG_SAMPLE));
		n += procreg_lookup(reg, name, NULL) == 0;
	}
	return n;
}

/* Node "big" with the cookie up at A, holding BIG_NAMES names. */
static void big_node_up(struct th_node *a, struct th_peer *p)
{
	static uint8_t buf[PR_BP_FRAME_MAX];
	static char names[BIG_FRAME][32];
	const char *list[BIG_FRAME + 1];

	assert_int_equal(th_peer_connect(p, a->listen, "big", 7, COOKIE), 0);
	for (int part = 0; part < BIG_NAMES / BIG_FRAME; part++) {
		for (int k = 0; k < BIG_FRAME; k++) {
			snprintf(names[k], sizeof(names[k]), "big%d", part * BIG_FRAME + k);
			list[k] = names[k];
		}
		list[BIG_FRAME] = NULL;
		th_peer_send(p, buf, th_fake_snap(buf, sizeof(buf), 7, (uint32_t)part,
						  procreg__now_ns(), list,
						  part + 1 == BIG_NAMES / BIG_FRAME));
	}
	th_expect_names(a->reg, BIG_NAMES, 3 * WAIT_MS);
}

#define RESET_PEERS 40

/* Nodes with the cookie come up at a daemon whose table holds another
 * node's 200,000 names and none of its own, and reset their connections
 * while their snapshots (a part at a time, most of them empty) are being
 * written: each is dropped, and the daemon goes on. A send that found the
 * connection reset used to leave it served a part after its snapshot was
 * freed: the daemon died (SIGSEGV). */
static void test_reset_mid_snapshot(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	static struct th_peer ps[RESET_PEERS];
	struct th_peer p;

	assert_int_equal(th_node_start(a, c->cookie, NULL, NULL), 0);
	big_node_up(a, &p);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < RESET_PEERS; i++) {
			char name[32];

			snprintf(name, sizeof(name), "reset%d", i);
			assert_int_equal(th_peer_connect(&ps[i], a->listen, name, 7 + (uint64_t)round,
							 COOKIE), 0);
		}
		/* A heartbeat's time: keep-alives due to some of them. */
		th_msleep(600);
		for (int i = 0; i < RESET_PEERS; i++) {
			struct linger now = { 1, 0 };

			assert_int_equal(setsockopt(ps[i].fd, SOL_SOCKET, SO_LINGER, &now,
						    sizeof(now)), 0);
			th_peer_close(&ps[i]);
		}
		th_msleep(600);
		assert_int_equal(kill(a->d.pid, 0), 0);
		assert_int_equal(procreg_register(a->reg, "still", NULL, 0), 0);
		assert_int_equal(procreg_unregister(a->reg, "still"), 0);
	}
	assert_int_equal(procreg_lookup(a->reg, "big0", NULL), 0);
	th_peer_close(&p);
}

/* Register and unregister a name again and again until node big's names
 * are all gone, counting the pairs both begun and answered while some
 * of the sample were gone and some not: answered mid-walk. */
static void *big_watch_main(void *arg)
{
	struct big_watch *w = arg;
	procreg_t *reg = th_open(w->dir);
	uint64_t end = mono_ms() + 3 * WAIT_MS;
	int before, after;

	assert_non_null(reg);
	do {
		before = big_present(reg);
		assert_int_equal(procreg_register(reg, "watch", NULL, 0), 0);
		assert_int_equal(procreg_unregister(reg, "watch"), 0);
		after = big_present(reg);
		w->pairs++;
		if (before > 0 && before < BIG_SAMPLE && after > 0 && after < BIG_SAMPLE)
			w->spread++;
	} while (after && mono_ms() < end);
	procreg_close(reg);
	return NULL;
}

/* Node "big" with the cookie holds BIG_NAMES names and goes: its grace
 * over, the walk that removes them is made in parts, local requests
 * answered in between: some register+unregister pairs begin and end
 * while some of its names are gone and others not. Whole, the walk held
 * every request until it was over (none did). */
static void test_gone_in_parts(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	struct big_watch w = { .dir = a->dir };
	struct th_peer p;
	pthread_t t;

	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){ "-v", NULL }, NULL), 0);
	big_node_up(a, &p);
	assert_int_equal(pthread_create(&t, NULL, big_watch_main, &w), 0);
	th_peer_close(&p);
	pthread_join(t, NULL);
	th_expect_names(a->reg, 0, WAIT_MS);
	th_expect_log(a->d.log, "node big: 200000 entries removed", WAIT_MS);
	print_message("gone in parts: %d of %d pairs answered while the walk was under way\n",
		      w.spread, w.pairs);
	if (!w.spread)
		fail_msg("no request was answered while node big's %d names were being removed "
			 "(%d pairs)", BIG_NAMES, w.pairs);
}

/* Node "rst" with the cookie holds rst-x, restarts (another incarnation)
 * without it, and a local process registers rst-x before the removal of
 * what the old incarnation held is made (the walk waits for a tick; here,
 * PROCREG_TEST_SWEEP_MS, for good). The old entry, seen by readers until
 * then, is taken for gone: the name is the local process's, the old one
 * left with NODE_DOWN first. It used to be refused, -EEXIST, until the
 * walk. */
static void test_restarted_name_free(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	struct th_peer p;
	uint8_t buf[4096];
	uint64_t cursor;

	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){ "-v", NULL },
				       (const char *const[]){ "PROCREG_TEST_SWEEP_MS=600000", NULL }),
			 0);
	assert_int_equal(th_peer_connect(&p, a->listen, "rst", 7, COOKIE), 0);
	th_peer_send(&p, buf, th_fake_snap(buf, sizeof(buf), 7, 0, procreg__now_ns(),
					   (const char *const[]){ "rst-x", NULL }, true));
	th_expect_names(a->reg, 1, WAIT_MS);
	th_peer_close(&p);
	cursor = procreg_feed_head(a->reg);
	assert_int_equal(th_peer_connect(&p, a->listen, "rst", 8, COOKIE), 0);
	th_peer_send(&p, buf, th_fake_snap(buf, sizeof(buf), 8, 0, procreg__now_ns(),
					   (const char *const[]){ "rst-new", NULL }, true));
	th_expect_names(a->reg, 2, WAIT_MS);
	/* Not removed yet: readers still see it. */
	assert_int_equal(procreg_lookup(a->reg, "rst-x", NULL), 0);
	assert_int_equal(th_log_count(a->d.log, "removal walk"), 0);
	assert_int_equal(procreg_register(a->reg, "rst-x", NULL, 0), 0);
	th_expect_name(a->reg, "rst-x", getpid(), false, WAIT_MS);
	assert_int_equal(th_feed_count(a->reg, &cursor, PROCREG_EV_NODE_DOWN, "rst-x"), 1);
	cursor = procreg_feed_head(a->reg) - 1;
	{
		PROCREG_OPTS(procreg_event, ev);

		assert_int_equal(procreg_next_event(a->reg, &cursor, &ev, 0), 0);
		assert_int_equal(ev.type, PROCREG_EV_REGISTERED);
		assert_string_equal(ev.name, "rst-x");
	}
	th_peer_close(&p);
}

/* ---- 9: records left unfinished ---------------------------------------- */

/* A node with the cookie comes up as HOARDERS nodes, one connection each,
 * and on each sends the start of a frame as big as frames may be (all but
 * its last byte, in one record) and all but the last byte of another
 * record: the daemon holds both, waiting for the rest, which never comes.
 * Every connection's record buffers (about 320 KiB) were outside
 * --max-mesh-queue: all of them stayed up, holding what they sent
 * (measured before the bound: the daemon's anonymous memory grew by 20
 * MiB for 96 of them, 181 MiB for 900, with --max-mesh-queue 1M). Now the
 * buffers count against it: a connection is dropped for the room another
 * needs, one whose record has been unfinished for a second first, and
 * each holds 128 KiB of its peer's bytes at least, so at most
 * HOARD_BUDGET_KB / HOARD_HELD_KB of them stay up, and one more alone.
 * Then a real node joins and replicates both ways, more coming as it
 * joins and once it is up (it stays: it finishes its records), and a
 * local client is answered. */
#define HOARDERS 96
#define LATE_HOARDERS 8
#define HOARD_BUDGET "1M"
#define HOARD_BUDGET_KB 1024
/* What a hoarder makes the daemon hold at least: a frame's first
 * PR_BS_PT_MAX - 1 bytes, and a record's first PR_BS_REC_MAX - 1. */
#define HOARD_HELD_KB 128
/* The daemon's anonymous memory may grow by this much: the budget, each
 * connection's own (its struct, its channel, small buffers) and the
 * allocator's slack. */
#define HOARD_GROWTH_KB (HOARD_BUDGET_KB + 6 * 1024)

static int count_prefix(const struct procreg_node *n, void *arg)
{
	const char *prefix = ((const char **)arg)[0];

	if (!strncmp(n->name, prefix, strlen(prefix)))
		++*(int *)((const char **)arg)[1];
	return 0;
}

/* The nodes whose names start with PREFIX that the daemon at REG has up,
 * as its nodes file says. */
static int nodes_up(procreg_t *reg, const char *prefix)
{
	int n = 0;
	const void *arg[2] = { prefix, &n };

	assert_int_equal(procreg_bridge(reg, NULL, count_prefix, arg), 0);
	return n;
}

/* Until at most MAX nodes named PREFIX... are up on REG: how many are. */
static int nodes_up_within(procreg_t *reg, const char *prefix, int max, int ms)
{
	int n = nodes_up(reg, prefix);

	for (int i = 0; i < ms / 100 && n > max; i++) {
		th_msleep(100);
		n = nodes_up(reg, prefix);
	}
	return n;
}

/* BUF[0..LEN) to P's socket, as far as the daemon takes it: whether all. */
static bool send_all(struct th_peer *p, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t w = send(p->fd, buf, len, MSG_NOSIGNAL);

		if (w <= 0)
			return false;
		buf += w;
		len -= (size_t)w;
	}
	return true;
}

/* Node hoardI up (an empty snapshot sent: a node in good standing), then
 * its unfinished frame and record sent, in one write: whether the daemon
 * took them all. */
static bool hoard(struct th_peer *p, int i, const char *listen)
{
	static uint8_t frame[PR_BS_PT_MAX], rec[2 * PR_BS_REC_MAX];
	uint8_t buf[256];
	char name[32];
	size_t len;

	snprintf(name, sizeof(name), "hoard%d", i);
	assert_int_equal(th_peer_connect(p, listen, name, 7, COOKIE), 0);
	len = th_fake_snap(buf, sizeof(buf), 7, 0, procreg__now_ns(), (const char *[]){ NULL }, true);
	th_peer_send(p, buf, len);
	/* A CHANGE of PR_BP_FRAME_MAX bytes, its last missing; then a
	 * record whose last byte is missing. */
	pr_put32(frame, PR_BP_FRAME_MAX);
	frame[4] = PR_BP_CHANGE;
	frame[5] = PR_BP_VERSION;
	assert_int_equal(procreg__bs_seal(p->bs, frame, PR_BS_PT_MAX - 1, rec), 0);
	assert_int_equal(procreg__bs_seal(p->bs, frame, PR_BS_PT_MAX, rec + PR_BS_REC_MAX - 1), 0);
	return send_all(p, rec, 2 * PR_BS_REC_MAX - 2);
}

struct hoard_more {
	struct th_peer *p;
	const char *listen;
};

/* LATE_HOARDERS more hoarders, before the real node is up (ROUND 0) or
 * after (1). */
static void more_hoarders(void *arg, int round)
{
	struct hoard_more *hm = arg;
	int from = HOARDERS + (round + 1) * LATE_HOARDERS;

	for (int i = from; i < from + LATE_HOARDERS; i++)
		hoard(&hm->p[i], i, hm->listen);
}

static void test_unfinished_records_bounded(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	struct th_peer *p = calloc(HOARDERS + 3 * LATE_HOARDERS, sizeof(*p));
	struct hoard_more hm;
	const int most = HOARD_BUDGET_KB / HOARD_HELD_KB + 1;
	long base, now, peak = 0;
	int up;

	assert_non_null(p);
	/* Nobody dropped as silent (the hoarders send nothing more): only
	 * for the room they take. */
	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){
					       "--max-mesh-queue", HOARD_BUDGET, "--node-timeout-ms",
					       "600000", NULL }, NULL), 0);
	base = anon_kb(a->d.pid);
	for (int i = 0; i < HOARDERS; i++) {
		hoard(&p[i], i, a->listen);
		now = anon_kb(a->d.pid);
		peak = now > peak ? now : peak;
	}
	up = nodes_up_within(a->reg, "hoard", most, WAIT_MS);
	now = anon_kb(a->d.pid);
	peak = now > peak ? now : peak;
	print_message("unfinished records: %d of %d nodes up; the daemon's anonymous memory %ld "
		      "kB before, %ld kB at most after (budget %s)\n", up, HOARDERS, base, peak,
		      HOARD_BUDGET);
	if (up > most)
		fail_msg("%d nodes holding unfinished records are up (at most %d: --max-mesh-queue "
			 "%s, %d KiB each; log: %s)", up, most, HOARD_BUDGET, HOARD_HELD_KB,
			 a->d.log);
	if (TH_SANITIZED)
		print_message("unfinished records: RssAnon " TH_RSS_UNBOUNDED "\n");
	else if (peak - base > HOARD_GROWTH_KB)
		fail_msg("%d connections holding unfinished records grew the daemon's anonymous "
			 "memory by %ld kB (at most %d kB: --max-mesh-queue %s and slack)", HOARDERS,
			 peak - base, HOARD_GROWTH_KB, HOARD_BUDGET);
	/* Those up have sent nothing more for a second (in a while): the
	 * room a newcomer needs is theirs first, and the log says why. */
	for (int i = HOARDERS; i < HOARDERS + LATE_HOARDERS &&
			       !th_log_has(a->d.log, "a record unfinished)"); i++) {
		th_msleep(500);
		hoard(&p[i], i, a->listen);
	}
	th_expect_log(a->d.log, "a record unfinished)", WAIT_MS);

	/* A real node joins, and replicates both ways, more coming as it
	 * does. */
	hm = (struct hoard_more){ p, a->listen };
	real_node_joins(c, more_hoarders, &hm);
	up = nodes_up_within(a->reg, "hoard", most, WAIT_MS);
	now = anon_kb(a->d.pid);
	peak = now > peak ? now : peak;
	print_message("unfinished records: after the real node joined, %d of %d up, %ld kB at "
		      "most\n", up, HOARDERS + 3 * LATE_HOARDERS, peak);
	if (up > most)
		fail_msg("%d nodes holding unfinished records are up (at most %d)", up, most);
	if (!TH_SANITIZED && peak - base > HOARD_GROWTH_KB)
		fail_msg("the daemon's anonymous memory grew by %ld kB (at most %d kB)", peak - base,
			 HOARD_GROWTH_KB);
	for (int i = 0; i < HOARDERS + 3 * LATE_HOARDERS; i++)
		if (p[i].bs)
			th_peer_close(&p[i]);
	free(p);
}

/* And a mesh that behaves is not held to a budget for buffers it does not
 * use: MANY_NODES nodes come up, each sending a record as big as records
 * may be (heartbeats, a snapshot's worth), which takes its connection's
 * buffers at their full size (about 256 KiB in, a hundred times the
 * budget for them all) while it is read. They go back once it is read
 * (when idle for a tick, or at once when another needs the room), and
 * every node stays up, none dropped. */
#define MANY_NODES 256
#define MANY_BUDGET "4M"

static void test_many_nodes_small_budget(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	struct th_peer *p = calloc(MANY_NODES, sizeof(*p));
	static uint8_t beats[PR_BS_PT_MAX];
	uint8_t buf[256];
	size_t len = 0, one = 0;
	int up;

	assert_non_null(p);
	assert_int_equal(procreg__bp_put_heartbeat(buf, sizeof(buf), &one, 7, 0), 0);
	while (len + one <= sizeof(beats)) {
		memcpy(beats + len, buf, one);
		len += one;
	}
	/* Nobody dropped as silent (they send nothing more, and a sanitizer
	 * build takes its time to bring them all up). */
	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){
					       "--max-mesh-queue", MANY_BUDGET, "--node-timeout-ms",
					       "600000", NULL }, NULL), 0);
	for (int i = 0; i < MANY_NODES; i++) {
		char name[32];
		size_t n;

		snprintf(name, sizeof(name), "many%d", i);
		assert_int_equal(th_peer_connect(&p[i], a->listen, name, 7, COOKIE), 0);
		n = th_fake_snap(buf, sizeof(buf), 7, 0, procreg__now_ns(), (const char *[]){ NULL },
				 true);
		th_peer_send(&p[i], buf, n);
		th_peer_send(&p[i], beats, len);
	}
	up = nodes_up(a->reg, "many");
	for (int i = 0; i < WAIT_MS / 100 && up < MANY_NODES; i++) {
		th_msleep(100);
		up = nodes_up(a->reg, "many");
	}
	print_message("many nodes: %d of %d up (budget %s)\n", up, MANY_NODES, MANY_BUDGET);
	if (up < MANY_NODES || th_log_count(a->d.log, "--max-mesh-queue"))
		fail_msg("%d of %d nodes that behave up, %d dropped for --max-mesh-queue %s (log: "
			 "%s)", up, MANY_NODES, th_log_count(a->d.log, "--max-mesh-queue"),
			 MANY_BUDGET, a->d.log);
	for (int i = 0; i < MANY_NODES; i++)
		th_peer_close(&p[i]);
	free(p);
}

/* ---- 10: frames from the last of many nodes ----------------------------- */

/* A node with the cookie makes NAMED_NODES nodes known, one handshake and a
 * close each (every one is allowed: its slot is kept for its grace and
 * given to another only when the daemon needs it), under names of the
 * longest kind that differ only in their last characters, then comes up
 * as one more (the last slot) and sends FLOOD_FRAMES heartbeats. Every
 * frame in is looked up by its node's name: that was a comparison with
 * every node known, and the flood was not through after 10 s (the test
 * took 35 s; by hand, a local request waited 4.4-5.9 s behind such a
 * flood). By the index it takes
 * 150-250 ms (800 ms under ASan); the change sent after it must be in the
 * table before WAIT_MS is over. */
#define NAMED_NODES 4095
#define FLOOD_FRAMES (2u << 20)
#define LONG_PREFIX "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"

static void test_frames_of_the_last_node(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	static struct th_peer p;
	static uint8_t beats[PR_BS_PT_MAX];
	uint8_t buf[512];
	size_t len = 0, one = 0, n;
	uint64_t t0, took;
	char name[PR_BP_NODE_MAX + 1];

	_Static_assert(sizeof(LONG_PREFIX) - 1 + 5 == PR_BP_NODE_MAX, "names of the longest kind");
	assert_int_equal(procreg__bp_put_heartbeat(buf, sizeof(buf), &one, 7, 0), 0);
	while (len + one <= sizeof(beats)) {
		memcpy(beats + len, buf, one);
		len += one;
	}
	assert_int_equal(th_node_start(a, c->cookie, NULL, NULL), 0);
	for (int i = 0; i < NAMED_NODES; i++) {
		snprintf(name, sizeof(name), LONG_PREFIX "%05d", i);
		assert_int_equal(th_peer_connect(&p, a->listen, name, 7, COOKIE), 0);
		th_peer_close(&p);
	}
	/* "fake": th_fake_change()'s node. */
	assert_int_equal(th_peer_connect(&p, a->listen, "fake", 7, COOKIE), 0);
	n = th_fake_snap(buf, sizeof(buf), 7, 0, procreg__now_ns(), (const char *[]){ NULL }, true);
	th_peer_send(&p, buf, n);
	t0 = mono_ms();
	for (size_t sent = 0; sent < FLOOD_FRAMES; sent += len / one)
		th_peer_send(&p, beats, len);
	th_peer_send(&p, buf, th_fake_change(buf, sizeof(buf), 7, 1, "after-the-flood"));
	if (!th_name_within(a->reg, "after-the-flood", 99, true, WAIT_MS)) {
		th_daemon_dump_log(&a->d);
		fail_msg("%u heartbeats from the last of %d nodes known: not through after %llu ms",
			 FLOOD_FRAMES, NAMED_NODES + 1, (unsigned long long)(mono_ms() - t0));
	}
	took = mono_ms() - t0;
	print_message("frames of the last node: %u heartbeats from the last of %d nodes, through "
		      "in %llu ms\n", FLOOD_FRAMES, NAMED_NODES + 1, (unsigned long long)took);
	if (took > WAIT_MS)
		fail_msg("%u heartbeats from the last of %d nodes known took %llu ms", FLOOD_FRAMES,
			 NAMED_NODES + 1, (unsigned long long)took);
	th_peer_close(&p);
}

/* ---- 11: changes as fast as a node can send them ----------------------- */

#define FLOODERS 8
#define FLOOD_CHANGES 25000 /* each flooder's, each a name of its own */

/* From a thread: frames BUF[0..LEN) sealed in one record and written to
 * P's socket: 0, or an errno (th_peer_send() asserts, which a thread may
 * not). */
static int send_record(struct th_peer *p, const uint8_t *buf, size_t len)
{
	static __thread uint8_t rec[PR_BS_REC_MAX];

	if (procreg__bs_seal(p->bs, buf, len, rec) < 0 ||
	    write(p->fd, rec, len + PR_BS_OVERHEAD) != (ssize_t)(len + PR_BS_OVERHEAD))
		return errno ? errno : EIO;
	return 0;
}

/* One of the nodes flooding, on a thread of its own: its changes, each a
 * new name, sealed a record at a time and written as fast as the socket
 * takes them. */
struct flooder {
	struct th_peer p;
	char name[32];
	int err;
};

static void *flooder_main(void *arg)
{
	struct flooder *f = arg;
	static __thread uint8_t buf[PR_BS_PT_MAX];
	uint64_t seq = 1;
	char name[64];

	while (seq <= FLOOD_CHANGES && !f->err) {
		size_t len = 0;

		while (seq <= FLOOD_CHANGES && len + 256 < sizeof(buf)) {
			snprintf(name, sizeof(name), "%s-%llu", f->name, (unsigned long long)seq);
			len += th_fake_change_from(buf + len, sizeof(buf) - len, 7, seq++, f->name, name);
		}
		f->err = send_record(&f->p, buf, len);
	}
	return NULL;
}

/* FLOODERS nodes with the cookie send FLOOD_CHANGES changes each, as fast
 * as they can, and a local client registers and unregisters a name
 * meanwhile. What comes in is taken a slice at a time, the client served
 * in between (backend.h: input_over()), so pairs are answered all along
 * while the changes are applied. Each connection's reads used to be
 * bounded (16 reads of 128 KiB), not a dispatch's: over 8 connections, a
 * dispatch applied several hundred thousand changes, and a client got 4
 * pairs a second, each waiting up to 340 ms. Counted, not timed: the pairs
 * begun and answered while some of the changes were in the table and
 * others not yet. */
static void test_flood_in_slices(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	static struct flooder fl[FLOODERS];
	pthread_t t[FLOODERS];
	uint8_t buf[4096];
	uint64_t total = (uint64_t)FLOODERS * FLOOD_CHANGES, during = 0, pairs = 0;
	PROCREG_OPTS(procreg_stats, st);

	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){
					       "--node-timeout-ms", "600000", NULL }, NULL), 0);
	for (int i = 0; i < FLOODERS; i++) {
		snprintf(fl[i].name, sizeof(fl[i].name), "flood%d", i);
		assert_int_equal(th_peer_connect(&fl[i].p, a->listen, fl[i].name, 7, COOKIE), 0);
		th_peer_send(&fl[i].p, buf, th_fake_snap(buf, sizeof(buf), 7, 0, procreg__now_ns(),
							(const char *const[]){ NULL }, true));
	}
	for (int i = 0; i < FLOODERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, flooder_main, &fl[i]), 0);
	do {
		uint64_t before;

		assert_int_equal(procreg_stats(a->reg, &st), 0);
		before = st.names;
		assert_int_equal(procreg_register(a->reg, "meanwhile", NULL, 0), 0);
		assert_int_equal(procreg_unregister(a->reg, "meanwhile"), 0);
		pairs++;
		assert_int_equal(procreg_stats(a->reg, &st), 0);
		during += before > 0 && st.names < total;
	} while (st.names < total);
	for (int i = 0; i < FLOODERS; i++) {
		pthread_join(t[i], NULL);
		if (fl[i].err)
			fail_msg("node flood%d: sending: %s", i, strerror(fl[i].err));
	}
	print_message("flood: %llu changes from %d nodes; %llu of %llu local pairs answered "
		      "while they were being applied\n", (unsigned long long)total, FLOODERS,
		      (unsigned long long)during, (unsigned long long)pairs);
	if (during < 100)
		fail_msg("%llu pairs answered while %llu changes were applied (want 100 at least)",
			 (unsigned long long)during, (unsigned long long)total);
	for (int i = 0; i < FLOODERS; i++)
		th_peer_close(&fl[i].p);
}

/* ---- 12: changes flooding in while a walk is under way ------------------ */

/* A node with the cookie putting one name again and again, its metadata
 * the change's number, until told to stop. */
struct counter_flood {
	struct th_peer p;
	int stop, err;
};

static void *counter_flood_main(void *arg)
{
	struct counter_flood *f = arg;
	static __thread uint8_t buf[PR_BS_PT_MAX];
	uint64_t seq = 1;

	while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED) && !f->err) {
		size_t len = 0;

		while (len + 256 < sizeof(buf)) {
			struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 99,
						 .registered_ns = procreg__now_ns(), .name = "counted",
						 .name_len = 7, .meta = &seq, .meta_len = sizeof(seq) };

			assert_int_equal(procreg__bp_put_change(buf, sizeof(buf), &len, 7, seq,
								"counter", &e), 0);
			seq++;
		}
		f->err = send_record(&f->p, buf, len);
	}
	return NULL;
}

/* The number of the last change of node counter's the table shows. */
static uint64_t counted(procreg_t *reg)
{
	TH_ENTRY(e);
	uint64_t seq = 0;

	if (procreg_lookup(reg, "counted", &e) == 0 && e.meta_len == sizeof(seq))
		memcpy(&seq, e.meta, sizeof(seq));
	return seq;
}

/* Node big goes, and its 200,000 names are removed by a walk in parts
 * while node counter sends changes as fast as it can: the turns of the
 * walk's parts and of what comes in alternate, so counter's changes are
 * applied all along the walk. The walk used to take every turn once what
 * came in had to wait: nothing was read from any node until it was over
 * (213 ms in a debug build; at 10^6 names, nodes could be dropped as
 * silent). Counted, not timed: the looks at the table, while some of
 * big's names were gone and others not, that found more of counter's
 * changes than the look before. */
static void test_walk_and_flood_alternate(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	static struct counter_flood f;
	struct th_peer p;
	uint8_t buf[4096];
	pthread_t t;
	uint64_t last = 0, looks = 0, moved = 0;
	int present;

	assert_int_equal(th_node_start(a, c->cookie, NULL, NULL), 0);
	big_node_up(a, &p);
	assert_int_equal(th_peer_connect(&f.p, a->listen, "counter", 7, COOKIE), 0);
	th_peer_send(&f.p, buf, th_fake_snap(buf, sizeof(buf), 7, 0, procreg__now_ns(),
					    (const char *const[]){ NULL }, true));
	assert_int_equal(pthread_create(&t, NULL, counter_flood_main, &f), 0);
	for (int i = 0; !counted(a->reg); i++) {
		if (i > WAIT_MS)
			fail_msg("none of node counter's changes in the table");
		th_msleep(1);
	}
	th_peer_close(&p);
	do {
		uint64_t now;

		present = big_present(a->reg);
		now = counted(a->reg);
		if (present > 0 && present < BIG_SAMPLE) {
			looks++;
			moved += now > last;
		}
		last = now;
	} while (present);
	__atomic_store_n(&f.stop, 1, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	print_message("walk and flood: %llu of %llu looks during the walk found more of the "
		      "flood applied\n", (unsigned long long)moved, (unsigned long long)looks);
	if (f.err)
		fail_msg("node counter: sending: %s", strerror(f.err));
	if (moved < 10)
		fail_msg("%llu of %llu looks during the walk found more changes applied (want 10 "
			 "at least)", (unsigned long long)moved, (unsigned long long)looks);
	th_peer_close(&f.p);
}

/* ---- 13: one node's held frames do not keep another's out -------------- */

/* Changes of ORIGIN's numbered from *SEQ to LAST at most, each a name with
 * 1 KiB of metadata, into BUF (CAP bytes): their length. */
static size_t big_changes(uint8_t *buf, size_t cap, const char *origin, uint64_t *seq,
			  uint64_t last)
{
	static const uint8_t meta[1024];
	size_t len = 0;
	char name[64];

	while (*seq <= last && len + 1400 < cap) {
		struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 99,
					 .registered_ns = procreg__now_ns(), .name = name,
					 .meta = meta, .meta_len = sizeof(meta) };

		snprintf(name, sizeof(name), "%s-%llu", origin, (unsigned long long)*seq);
		e.name_len = strlen(name);
		assert_int_equal(procreg__bp_put_change(buf, cap, &len, 7, (*seq)++, origin, &e), 0);
	}
	return len;
}

struct bytes_of {
	const char *name;
	uint64_t bytes;
};

static int bytes_of_cb(const struct procreg_node *n, void *arg)
{
	struct bytes_of *b = arg;

	if (!strcmp(n->name, b->name))
		b->bytes = n->bytes_in;
	return 0;
}

/* Wait until node a has read WANT bytes from node NAME. */
static void await_bytes_in(procreg_t *reg, const char *name, uint64_t want)
{
	struct bytes_of b = { name, 0 };

	for (int i = 0; i < WAIT_MS / 10; i++) {
		b.bytes = 0;
		if (procreg_bridge(reg, NULL, bytes_of_cb, &b) == 0 && b.bytes >= want)
			return;
		th_msleep(10);
	}
	fail_msg("node a read %llu bytes of node %s's, not %llu", (unsigned long long)b.bytes, name,
		 (unsigned long long)want);
}

#define HOG_CHANGES 50000  /* about 57 MB held: under the 64 MiB of all nodes */
#define FAIR_CHANGES 12000 /* about 14 MB more */

/* Node hog sends changes and never the snapshot they follow: all held,
 * about 57 MB of the 64 MiB held for every node together. Then node fair
 * sends its changes before its snapshot, as NATS may deliver them: they
 * must be held too, and applied once the snapshot comes. Before, fair's
 * first frame past the budget was refused, and it resynced, again and
 * again (1,400 to 2,400 times a second over NATS), while hog kept its
 * frames; now what hog holds, the most, is dropped, and hog resyncs. */
static void test_held_budget_shared(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	static struct th_peer hog, fair;
	static uint8_t buf[PR_BS_PT_MAX];
	uint64_t seq = 1, sent = 0;
	char last[64];

	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){
					       "--node-timeout-ms", "600000", NULL },
				       (const char *const[]){ "PROCREG_TEST_LATE_MS=600000", NULL }),
			 0);
	assert_int_equal(th_peer_connect(&hog, a->listen, "hog", 7, COOKIE), 0);
	while (seq <= HOG_CHANGES) {
		size_t len = big_changes(buf, sizeof(buf), "hog", &seq, HOG_CHANGES);

		th_peer_send(&hog, buf, len);
		sent += len;
	}
	await_bytes_in(a->reg, "hog", sent);

	assert_int_equal(th_peer_connect(&fair, a->listen, "fair", 7, COOKIE), 0);
	for (seq = 1; seq <= FAIR_CHANGES;)
		th_peer_send(&fair, buf, big_changes(buf, sizeof(buf), "fair", &seq, FAIR_CHANGES));
	th_peer_send(&fair, buf, th_fake_snap(buf, sizeof(buf), 7, 0, procreg__now_ns(),
					      (const char *const[]){ NULL }, true));
	snprintf(last, sizeof(last), "fair-%d", FAIR_CHANGES);
	th_expect_name(a->reg, last, 99, true, WAIT_MS);
	th_expect_name(a->reg, "fair-1", 99, true, WAIT_MS);
	th_expect_log(a->d.log, "dropped, for node fair's: it resyncs", WAIT_MS);
	assert_int_equal(procreg_lookup(a->reg, "hog-1", NULL), -ENOENT);
	th_peer_close(&hog);
	th_peer_close(&fair);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_close_then_real_node, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refuse_name_stops_dialing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hello_own_name_stops_dialing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_changes_in_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_changes_held, setup, teardown),
		cmocka_unit_test_setup_teardown(test_change_far_out_of_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals_log_limited, setup, teardown),
		cmocka_unit_test_setup_teardown(test_claims_set_aside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_claims_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_claims_per_name_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_told_of_dead_peers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_leeches_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_burst_in_turn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gone_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_told_of_names_stall, setup, teardown),
		cmocka_unit_test_setup_teardown(test_told_of_again_not_redialed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_told_of_dials_budgeted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_table_log_limited, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_table_root_registers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_table_users_register, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_index_users_register, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restarted_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resynced_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restarted_name_free, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gone_in_parts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reset_mid_snapshot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unfinished_records_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_nodes_small_budget, setup, teardown),
		cmocka_unit_test_setup_teardown(test_frames_of_the_last_node, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flood_in_slices, setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_budget_shared, setup, teardown),
		cmocka_unit_test_setup_teardown(test_walk_and_flood_alternate, setup, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
