/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_bridge_net.c - the TCP mesh on a hostile network, on loopback:
 *  - an off-path host that can reach two nodes' ports, relaying one
 *    node's handshake to the other to pass for it;
 *  - a proxy on the path between two nodes that alters a frame, or
 *    injects one, in mid-stream;
 *  - a proxy that only listens, and greps what it saw for the names and
 *    metadata the nodes replicate;
 *  - a node of an older protocol version, either way.
 * Checks behaviour, not timing: every wait is a bounded poll.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster.h"
#include "internal.h"
#include "bridge_proto.h"

#define COOKIE "a-net-cookie-0123456789"
#define WAIT_MS 10000
#define NODES 2

struct proxy;

struct cluster {
	char *base;
	char cookie[512];
	struct th_node n[NODES];
	struct proxy *px;           /* running, stopped by the teardown */
};

static void px_stop(struct proxy *p);

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
	int bad;

	/* A test that failed half-way leaves its proxy running. */
	if (c->px)
		px_stop(c->px);
	bad = th_nodes_stop(c->n, NODES);
	th_rmrf(c->base);
	free(c->base);
	free(c);
	return bad;
}

static void start_node(struct cluster *c, int i, const char *const *args)
{
	assert_int_equal(th_node_start(&c->n[i], c->cookie, args, NULL), 0);
}

static int probe_log(void *arg)
{
	const char **l = arg;

	return th_log_has(l[0], l[1]);
}

static void expect_log(const char *path, const char *needle)
{
	const char *l[2] = { path, needle };

	if (!th_until(probe_log, (void *)l, WAIT_MS))
		fail_msg("no '%s' in %s", needle, path);
}

/* ---- a proxy ------------------------------------------------------------- */

/*
 * A TCP proxy on a thread of the test: it accepts on its own port and
 * connects each connection to TARGET. It keeps every byte it carries, both
 * ways, for the passive test (so it is big: make it static). Toward the dialer (from the node behind it)
 * it cuts the stream into units by their leading u32 length, which frames
 * and records alike start with, and on command does one thing to the next
 * unit of at least BIG bytes (a change with its metadata, not a
 * heartbeat): flip its last byte, or put a frame of its own before it.
 */
enum px_act { PX_PASS, PX_ALTER, PX_INJECT };

#define PX_BIG 100
#define PX_CAP (8u << 20)

struct px_dir {
	uint8_t buf[2 * PR_BS_REC_MAX + 64];
	size_t len;
};

struct proxy {
	int lfd, port, target;
	pthread_t th;
	/* Shared with the proxy's thread: atomic accesses only. */
	int stop;
	int act;                      /* enum px_act, back to PX_PASS once done */
	int done;                     /* acts done */
	int accepted;                 /* connections taken */
	pthread_mutex_t mu;
	uint8_t seen[PX_CAP];         /* every byte carried, both ways */
	size_t seen_len;
};

static void px_keep(struct proxy *p, const uint8_t *b, size_t n)
{
	pthread_mutex_lock(&p->mu);
	if (p->seen_len + n <= PX_CAP) {
		memcpy(p->seen + p->seen_len, b, n);
		p->seen_len += n;
	}
	pthread_mutex_unlock(&p->mu);
}

static int px_send(int fd, const uint8_t *b, size_t n)
{
	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static uint32_t le32(const uint8_t *b)
{
	return b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* The frame the proxy puts in: node a's change registering a name of its
 * choice, with the next sequence number if the unit it goes before is a
 * change it can read (it could, in clear). */
static size_t px_forgery(const uint8_t *unit, size_t len, uint8_t *out, size_t cap)
{
	struct pr_bp_frame f;
	size_t pos = 0, n = 0;
	uint64_t inc = 1, seq = 1;
	struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 4242,
				 .registered_ns = procreg__now_ns(), .name = "injected-forgery",
				 .name_len = 16 };

	if (procreg__bp_next(unit, len, &pos, &f) == 1 && f.type == PR_BP_CHANGE) {
		inc = f.incarnation;
		seq = f.seq;
	}
	if (procreg__bp_put_change(out, cap, &n, inc, seq, "nodea", &e) < 0)
		return 0;
	return n;
}

/* Units from the node behind, to the dialer: whole ones pass, acted on. */
static int px_units(struct proxy *p, struct px_dir *d, int to)
{
	size_t pos = 0;

	while (d->len - pos >= 4) {
		uint32_t ul = le32(d->buf + pos);
		uint8_t *u = d->buf + pos;

		if (ul < 4 || ul > sizeof(d->buf) / 2) {
			/* Not a unit: pass the rest as it is. */
			if (px_send(to, u, d->len - pos) < 0)
				return -1;
			pos = d->len;
			break;
		}
		if (d->len - pos < ul)
			break;
		int act = __atomic_load_n(&p->act, __ATOMIC_ACQUIRE);

		if (act != PX_PASS && ul >= PX_BIG) {
			if (act == PX_ALTER) {
				u[ul - 1] ^= 0x01;
			} else {
				uint8_t forged[512];
				size_t fl = px_forgery(u, ul, forged, sizeof(forged));

				if (fl && px_send(to, forged, fl) < 0)
					return -1;
			}
			__atomic_store_n(&p->act, PX_PASS, __ATOMIC_RELEASE);
			__atomic_fetch_add(&p->done, 1, __ATOMIC_SEQ_CST);
		}
		if (px_send(to, u, ul) < 0)
			return -1;
		pos += ul;
	}
	memmove(d->buf, d->buf + pos, d->len - pos);
	d->len -= pos;
	return 0;
}

/* One connection, both ways, until either side ends it. */
static void px_pair(struct proxy *p, int a)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	static struct px_dir back;
	int b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_port = htons((uint16_t)p->target);
	back.len = 0;
	if (b < 0 || connect(b, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(a);
		if (b >= 0)
			close(b);
		return;
	}
	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd f[2] = { { a, POLLIN, 0 }, { b, POLLIN, 0 } };
		uint8_t buf[65536];
		ssize_t n;

		if (poll(f, 2, 50) <= 0)
			continue;
		if (f[0].revents) {
			n = recv(a, buf, sizeof(buf), 0);
			if (n <= 0)
				break;
			px_keep(p, buf, (size_t)n);
			if (px_send(b, buf, (size_t)n) < 0)
				break;
		}
		if (f[1].revents) {
			n = recv(b, back.buf + back.len, sizeof(back.buf) - back.len, 0);
			if (n <= 0)
				break;
			px_keep(p, back.buf + back.len, (size_t)n);
			back.len += (size_t)n;
			if (px_units(p, &back, a) < 0)
				break;
		}
	}
	close(a);
	close(b);
}

static void *px_main(void *arg)
{
	struct proxy *p = arg;

	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd f = { p->lfd, POLLIN, 0 };
		int a;

		if (poll(&f, 1, 50) <= 0)
			continue;
		a = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (a < 0)
			continue;
		__atomic_fetch_add(&p->accepted, 1, __ATOMIC_SEQ_CST);
		px_pair(p, a); /* one at a time: the dialer reconnects after */
	}
	return NULL;
}

static void px_start(struct proxy *p)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int one = 1;

	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(p->lfd >= 0);
	setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(p->lfd, 8), 0);
	assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&sa, &sl), 0);
	p->port = ntohs(sa.sin_port);
}

static void px_run(struct cluster *c, struct proxy *p, const char *target)
{
	p->target = atoi(strchr(target, ':') + 1);
	assert_int_equal(pthread_create(&p->th, NULL, px_main, p), 0);
	c->px = p;
}

/* Stop the thread; what it saw stays readable. */
static void px_stop(struct proxy *p)
{
	__atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
	pthread_join(p->th, NULL);
	close(p->lfd);
	pthread_mutex_destroy(&p->mu);
}

static void px_done(struct cluster *c)
{
	px_stop(c->px);
	c->px = NULL;
}

/* Node a, and node b dialing it through proxy P (b advertises nothing a
 * could dial around the proxy: a never dials, with two nodes). */
static void start_through(struct cluster *c, struct proxy *p)
{
	char peer[32];

	px_start(p);
	start_node(c, 0, NULL);
	px_run(c, p, c->n[0].listen);
	snprintf(peer, sizeof(peer), "127.0.0.1:%d", p->port);
	start_node(c, 1, (const char *const[]){ "--peer", peer, NULL });
}

/* ---- replicas ------------------------------------------------------------ */

struct listing {
	char *v[256];
	int n;
};

static int list_cb(const struct procreg_entry *e, void *arg)
{
	struct listing *l = arg;

	if (l->n < 256 && asprintf(&l->v[l->n], "%s pid %d meta %.*s", e->name, (int)e->pid,
				   (int)e->meta_len, (const char *)e->meta) > 0)
		l->n++;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list_free(struct listing *l)
{
	for (int i = 0; i < l->n; i++)
		free(l->v[i]);
	l->n = 0;
}

/* Whether the two tables hold the same names, owners and metadata (each
 * its own and the other's). */
static int probe_same(void *arg)
{
	struct cluster *c = arg;
	struct listing a = { .n = 0 }, b = { .n = 0 };
	int same;

	procreg_foreach(c->n[0].reg, list_cb, &a);
	procreg_foreach(c->n[1].reg, list_cb, &b);
	qsort(a.v, (size_t)a.n, sizeof(a.v[0]), cmp_str);
	qsort(b.v, (size_t)b.n, sizeof(b.v[0]), cmp_str);
	same = a.n == b.n;
	for (int i = 0; same && i < a.n; i++)
		same = !strcmp(a.v[i], b.v[i]);
	list_free(&a);
	list_free(&b);
	return same;
}

static void expect_same(struct cluster *c)
{
	if (!th_until(probe_same, c, WAIT_MS))
		fail_msg("the replicas differ");
}

/* META: 120 bytes of metadata, enough to make a change a big unit. */
static void meta120(char *meta, const char *tag)
{
	snprintf(meta, 121, "%s-%0*d", tag, (int)(119 - strlen(tag)), 7);
}

/* ---- tests --------------------------------------------------------------- */

/*
 * The relay that bridge protocol 2 allowed: a host without the cookie connects to node a and
 * to node c (here nodeb), gets c to speak by passing for a, shows a c's HELLO (c's
 * nonce, c's key) as if it were c, and hands whatever a answers to c as
 * a's. Neither node proves anything to it: a waits for a proof before it
 * gives one, and c never takes the forger for a. c keeps its real
 * connection to a and a's names, sends the forger none of its own, and
 * nothing the forger sends lands in a table.
 */
static void test_relay_refused(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0], *cn = &c->n[1];
	static uint8_t from_c[65536], from_a[4096];
	uint8_t buf[1024], key[PR_BP_KEY];
	size_t nc = 0, na = 0, pos = 0, hello_c = 0, hello_a = 0;
	struct pr_bp_frame f;
	struct pr_bs *fake;
	struct pr_bs_config bc = { .cookie = (const uint8_t *)"not-the-cookie", .cookie_len = 14,
				   .node = "nodea", .incarnation = 1, .addr = "", .dialer = true };
	int fa, fc;

	start_node(c, 0, NULL);
	start_node(c, 1, (const char *const[]){ "--peer", a->listen, NULL });
	assert_int_equal(procreg_register(a->reg, "a.marker", NULL, 0), 0);
	assert_int_equal(procreg_register(cn->reg, "c.critical", NULL, 0), 0);
	th_expect_name(cn->reg, "a.marker", getpid(), true, WAIT_MS);
	th_expect_name(a->reg, "c.critical", getpid(), true, WAIT_MS);

	/* To c, as "nodea": a HELLO like a's (its key is the forger's). */
	fc = th_dial(cn->listen);
	assert_int_equal(procreg__bs_new(&fake, &bc), 0);
	assert_int_equal(procreg__bs_hello(fake, buf, sizeof(buf), &pos), 0);
	assert_int_equal(write(fc, buf, pos), (ssize_t)pos);
	while (!hello_c) {
		ssize_t n = read(fc, from_c + nc, sizeof(from_c) - nc);
		size_t p = 0;

		assert_true(n > 0);
		nc += (size_t)n;
		if (procreg__bp_next(from_c, nc, &p, &f) == 1 && f.type == PR_BP_HELLO)
			hello_c = p;
	}
	assert_int_equal(f.name_len, 5);
	assert_memory_equal(f.name, "nodeb", 5);
	/* To a, as c: c's very HELLO, c's nonce and key in it. */
	fa = th_dial(a->listen);
	assert_int_equal(write(fa, from_c, hello_c), (ssize_t)hello_c);
	memcpy(key, f.key, sizeof(key));
	/* a answers with its HELLO, and then waits: no proof of its own
	 * until it has one from the dialer. */
	for (;;) {
		struct pollfd p = { fa, POLLIN, 0 };
		ssize_t n;

		if (poll(&p, 1, 1000) != 1)
			break;
		n = read(fa, from_a + na, sizeof(from_a) - na);
		if (n <= 0)
			break;
		na += (size_t)n;
	}
	pos = 0;
	assert_int_equal(procreg__bp_next(from_a, na, &pos, &f), 1);
	assert_int_equal(f.type, PR_BP_HELLO);
	hello_a = pos;
	assert_int_equal(na, hello_a); /* nothing after its HELLO */
	/* Relay what a said past its HELLO (nothing) to c, with the only
	 * proof the forger can make. */
	pos = 0;
	if (na > hello_a) {
		assert_int_equal(send(fc, from_a + hello_a, na - hello_a, MSG_NOSIGNAL),
				 (ssize_t)(na - hello_a));
	} else {
		uint8_t proof[PR_BP_MAC];

		memcpy(proof, key, sizeof(proof)); /* anything: c's own key */
		assert_int_equal(procreg__bp_put_auth(buf, sizeof(buf), &pos, proof), 0);
		assert_int_equal(send(fc, buf, pos, MSG_NOSIGNAL), (ssize_t)pos);
	}
	/* And, as a's node would, a forged change. */
	pos = 0;
	assert_int_equal(procreg__bp_put_change(buf, sizeof(buf), &pos, 1, 1, "nodea",
						&(struct pr_bp_entry){ .op = PR_BP_PUT,
								       .kind = PR_KIND_NAME,
								       .pid = 77, .name = "forged",
								       .name_len = 6 }), 0);
	(void)!send(fc, buf, pos, MSG_NOSIGNAL);
	/* c refuses, and sends the forger nothing but a REFUSE: no proof,
	 * no snapshot. */
	for (;;) {
		ssize_t n = read(fc, from_c + nc, sizeof(from_c) - nc);

		if (n <= 0)
			break;
		nc += (size_t)n;
	}
	pos = hello_c;
	while (pos < nc) {
		assert_int_equal(procreg__bp_next(from_c, nc, &pos, &f), 1);
		assert_int_equal(f.type, PR_BP_REFUSE);
		assert_int_equal(f.reason, PR_BP_REFUSE_AUTH);
	}
	assert_null(memmem(from_c, nc, "c.critical", 10));
	expect_log(cn->d.log, "authentication failed");
	close(fa);
	close(fc);
	procreg__bs_free(fake);

	/* Nothing forged on c; its connection to a was never replaced; a's
	 * name and c's own stay, everywhere. */
	th_msleep(200);
	assert_int_equal(procreg_lookup(cn->reg, "forged", NULL), -ENOENT);
	assert_int_equal(th_log_count(cn->d.log, "bridge: node nodea: up"), 1);
	assert_int_equal(th_log_count(a->d.log, "bridge: node nodeb: up"), 1);
	assert_false(th_log_has(cn->d.log, "replaced by a newer connection"));
	assert_false(th_log_has(a->d.log, "replaced by a newer connection"));
	assert_false(th_log_has(cn->d.log, "node nodea: down"));
	th_expect_name(cn->reg, "a.marker", getpid(), true, WAIT_MS);
	th_expect_name(a->reg, "c.critical", getpid(), true, WAIT_MS);
	/* Still replicating. */
	assert_int_equal(procreg_register(a->reg, "a.after", NULL, 0), 0);
	th_expect_name(cn->reg, "a.after", getpid(), true, WAIT_MS);
}

/* Through proxy P between a and b (both up), node a registers NAME with
 * 120 bytes of metadata while the proxy does ACT to the change on its way
 * to b: b drops the connection, and once it is back through the proxy and
 * resynced, both tables hold the same, NAME's metadata as a wrote it. */
static void proxy_round(struct cluster *c, struct proxy *p, enum px_act act, const char *name)
{
	char meta[128];

	start_through(c, p);
	assert_int_equal(procreg_register(c->n[0].reg, "before", "x", 1), 0);
	assert_int_equal(procreg_register(c->n[1].reg, "on-b", "y", 1), 0);
	expect_same(c);
	__atomic_store_n(&p->act, (int)act, __ATOMIC_RELEASE);
	meta120(meta, name);
	assert_int_equal(procreg_register(c->n[0].reg, name, meta, strlen(meta)), 0);
	expect_log(c->n[1].d.log, "bridge: node nodea: down (a record failed authentication");
	assert_int_equal(__atomic_load_n(&p->done, __ATOMIC_SEQ_CST), 1);
	th_expect_meta(c->n[1].reg, name, meta, strlen(meta), WAIT_MS);
	expect_same(c);
	/* b came back through the proxy */
	assert_true(__atomic_load_n(&p->accepted, __ATOMIC_SEQ_CST) >= 2);
	px_done(c);
}

/* The proxy flips the last byte of a change from a. */
static void test_proxy_alters_frame(void **state)
{
	static struct proxy p;

	proxy_round(*state, &p, PX_ALTER, "altered-on-the-way");
}

/* The proxy puts a change of its own in front of a real one (with its
 * sequence number, had it been able to read it): nothing of it in either
 * table. */
static void test_proxy_injects_frame(void **state)
{
	struct cluster *c = *state;
	static struct proxy p;

	proxy_round(c, &p, PX_INJECT, "the-real-change");
	assert_int_equal(procreg_lookup(c->n[1].reg, "injected-forgery", NULL), -ENOENT);
	assert_int_equal(procreg_lookup(c->n[0].reg, "injected-forgery", NULL), -ENOENT);
}

/* A proxy that only listens sees no name and no metadata in clear, from
 * either side, snapshots and changes alike. */
static void test_passive_relay_sees_nothing(void **state)
{
	struct cluster *c = *state;
	static struct proxy p;
	static const char *const marks[] = { "SECRETNAMEMARK", "SECRETMETAMARK", "SECRETGROUPMARK" };

	px_start(&p);
	start_node(c, 0, NULL);
	/* Before b connects: a's snapshot carries these. */
	assert_int_equal(procreg_register(c->n[0].reg, "snap.SECRETNAMEMARK.a", "SECRETMETAMARK-a",
					  16), 0);
	px_run(c, &p, c->n[0].listen);
	{
		char peer[32];

		snprintf(peer, sizeof(peer), "127.0.0.1:%d", p.port);
		start_node(c, 1, (const char *const[]){ "--peer", peer, NULL });
	}
	/* After: changes both ways. */
	assert_int_equal(procreg_register(c->n[0].reg, "chg.SECRETNAMEMARK.a", "SECRETMETAMARK-c",
					  16), 0);
	assert_int_equal(procreg_register(c->n[1].reg, "chg.SECRETNAMEMARK.b", "SECRETMETAMARK-d",
					  16), 0);
	assert_int_equal(procreg_join(c->n[1].reg, "SECRETGROUPMARK", "SECRETMETAMARK-g", 16), 0);
	th_expect_name(c->n[1].reg, "snap.SECRETNAMEMARK.a", getpid(), true, WAIT_MS);
	th_expect_name(c->n[1].reg, "chg.SECRETNAMEMARK.a", getpid(), true, WAIT_MS);
	th_expect_name(c->n[0].reg, "chg.SECRETNAMEMARK.b", getpid(), true, WAIT_MS);
	th_expect_members(c->n[0].reg, "SECRETGROUPMARK", 1, WAIT_MS);
	expect_same(c);
	px_done(c);
	/* It did carry the replication (a snapshot each way at least). */
	assert_true(p.seen_len > 200);
	for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
		if (memmem(p.seen, p.seen_len, marks[i], strlen(marks[i])))
			fail_msg("'%s' crossed the wire in clear", marks[i]);
}

/* A version 2 HELLO, as a node of the previous release sends it: nonce,
 * no key. */
static size_t v2_hello(uint8_t *buf, const char *name)
{
	size_t nl = strlen(name), len = 8 + 8 + PR_BP_NONCE + 1 + nl + 1;

	memset(buf, 0, len);
	buf[0] = (uint8_t)len;
	buf[4] = PR_BP_HELLO;
	buf[5] = 2;
	buf[8] = 1; /* incarnation */
	buf[16 + PR_BP_NONCE] = (uint8_t)nl;
	memcpy(buf + 17 + PR_BP_NONCE, name, nl);
	return len;
}

static void *old_listener(void *arg)
{
	int *l = arg, fd;
	uint8_t buf[256];
	size_t n = v2_hello(buf, "oldnode");

	fd = accept4(l[0], NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0) {
		/* A version 2 node speaks first. */
		(void)!write(fd, buf, n);
		l[1] = (int)read(fd, buf, sizeof(buf)); /* the new node's HELLO */
		close(fd);
	}
	return NULL;
}

/* A node of version 2 dialing in is told, and both sides can read why
 * in their logs (an old node logs the frame it cannot decode); a version 2
 * node dialed gets the same. */
static void test_old_version_refused(void **state)
{
	struct cluster *c = *state;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	uint8_t buf[512];
	struct pr_bp_frame f;
	size_t got = 0, pos = 0, n;
	int fd, l[2] = { -1, 0 };
	pthread_t th;
	char peer[32];

	start_node(c, 0, NULL);
	/* It dials in. */
	fd = th_dial(c->n[0].listen);
	n = v2_hello(buf, "oldnode");
	assert_int_equal(write(fd, buf, n), (ssize_t)n);
	for (;;) {
		ssize_t r = read(fd, buf + got, sizeof(buf) - got);

		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	assert_int_equal(procreg__bp_next(buf, got, &pos, &f), 1);
	assert_int_equal(f.type, PR_BP_REFUSE);
	assert_int_equal(f.reason, PR_BP_REFUSE_VERSION);
	assert_int_equal(f.version, PR_BP_VERSION);
	expect_log(c->n[0].d.log, "the other side speaks bridge protocol version 2, this node "
				  "version 3: refused");

	/* It is dialed. */
	l[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(l[0], (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(l[0], 4), 0);
	assert_int_equal(getsockname(l[0], (struct sockaddr *)&sa, &sl), 0);
	assert_int_equal(pthread_create(&th, NULL, old_listener, l), 0);
	snprintf(peer, sizeof(peer), "127.0.0.1:%d", ntohs(sa.sin_port));
	start_node(c, 1, (const char *const[]){ "--peer", peer, NULL });
	pthread_join(th, NULL);
	close(l[0]);
	assert_true(l[1] > 0);
	expect_log(c->n[1].d.log, "the other side speaks bridge protocol version 2, this node "
				  "version 3: refused");
	assert_int_equal(procreg_lookup(c->n[1].reg, "anything", NULL), -ENOENT);
}

/* Connections that each send a frame of garbage and go: a line each in
 * the log would let anyone who reaches the port fill it. A few lines a
 * second at most, and one that says how many were held back. */
static void test_unauthenticated_log_limited(void **state)
{
	struct cluster *c = *state;
	int n = 1000, lines;

	start_node(c, 0, NULL);
	for (int i = 0; i < n; i++) {
		int fd = th_dial(c->n[0].listen);
		char buf[8] = { 8, 0, 0, 0, 99, 3, 0, 0 };

		assert_true(fd >= 0);
		assert_int_equal(write(fd, buf, sizeof(buf)), 8);
		/* The daemon's close: no limit on connections applies. */
		(void)!read(fd, buf, sizeof(buf));
		close(fd);
	}
	lines = th_log_count(c->n[0].d.log, "malformed frame");
	print_message("%d garbage connections: %d log lines\n", n, lines);
	/* Ten lines a second: the test takes a few seconds at most. */
	if (lines > n / 10)
		fail_msg("%d log lines for %d unauthenticated connections", lines, n);
	expect_log(c->n[0].d.log, "malformed frame");
	expect_log(c->n[0].d.log, "more lines about unauthenticated connections held back");
}

/* Node FAKE (a node with the cookie, made by hand) comes up on node a
 * with the snapshot holding NAME; true if a shows NAME as FAKE's within
 * MS. */
static bool fake_node_up(struct cluster *c, struct th_peer *p, const char *fake,
			 const char *name, int ms)
{
	uint8_t buf[512], rec[512 + PR_BS_OVERHEAD];
	size_t len;

	/* A daemon that refuses the node may close before the handshake's
	 * end: not up. */
	if (th_peer_connect(p, c->n[0].listen, fake, 7, COOKIE))
		return false;
	len = th_fake_snap(buf, sizeof(buf), 7, 0, procreg__now_ns(),
			   (const char *const[]){ name, NULL }, true);
	assert_int_equal(procreg__bs_seal(p->bs, buf, len, rec), 0);
	/* Not checked: a daemon that refused the node has closed. */
	(void)!send(p->fd, rec, len + PR_BS_OVERHEAD, MSG_NOSIGNAL);
	return th_name_within(c->n[0].reg, name, 99, true, ms);
}

/* The node NAME in node a's table: its node's name, per a's nodes. A
 * failure names NAME, the step that failed and the caller's LINE. */
static void expect_node_of_at(struct cluster *c, const char *name, const char *node, int line)
{
	struct procreg_entry e = { .sz = sizeof(e) };
	char got[64] = "";
	int err;

	err = procreg_lookup(c->n[0].reg, name, &e);
	if (err)
		fail_msg("line %d: '%s' (node %s's): lookup: %s", line, name, node, strerror(-err));
	err = procreg_node_name(c->n[0].reg, e.node, got, sizeof(got));
	if (err)
		fail_msg("line %d: '%s' (node %s's): node id %u: procreg_node_name: %s", line, name,
			 node, (unsigned)e.node, strerror(-err));
	if (strcmp(got, node))
		fail_msg("line %d: '%s': node id %u is node %s, not %s", line, name,
			 (unsigned)e.node, got, node);
}
#define expect_node_of(c, name, node) expect_node_of_at(c, name, node, __LINE__)

/* Node ids are given back: a node gone (its grace over, its entries
 * removed) leaves its id to the next new node, so that a node with the
 * cookie coming up under name after name cannot use them all up and shut
 * out every node after it. Ids of nodes up (or within their grace) are
 * not taken. Node a's table of nodes made 2 long (PROCREG_TEST_NODES_MAX). */
static void test_node_ids_reused(void **state)
{
	struct cluster *c = *state;
	static struct th_peer keeper, ghost, extra;
	const char *const env[] = { "PROCREG_TEST_NODES_MAX=2", "PROCREG_TEST_LINGER_MS=100", NULL };
	char name[32], fake[32], line[96];

	assert_int_equal(th_node_start(&c->n[0], c->cookie,
				       (const char *const[]){ "--node-timeout-ms", "60000", NULL },
				       env), 0);
	/* Id 1: the keeper, up all along. */
	assert_true(fake_node_up(c, &keeper, "keeper", "kept", WAIT_MS));
	/* Id 2, for one node after another. */
	for (int i = 0; i < 4; i++) {
		snprintf(fake, sizeof(fake), "ghost%d", i);
		snprintf(name, sizeof(name), "ghost%d-name", i);
		if (!fake_node_up(c, &ghost, fake, name, WAIT_MS))
			fail_msg("node %s (the %s new node, a node gone before it) was not taken", fake,
				 i == 0 ? "2nd" : i == 1 ? "3rd" : "next");
		expect_node_of(c, name, fake);
		if (i == 3)
			break;
		th_peer_close(&ghost);
		snprintf(line, sizeof(line), "bridge: node %s: 1 entries removed", fake);
		expect_log(c->n[0].d.log, line);
		th_expect_name(c->n[0].reg, name, 0, true, WAIT_MS);
	}
	/* Both ids are nodes' that are up: a third is refused, and neither
	 * loses anything. */
	assert_false(fake_node_up(c, &extra, "extra", "extra-name", 1000));
	expect_log(c->n[0].d.log, "bridge: node extra refused");
	th_peer_close(&extra);
	expect_node_of(c, "kept", "keeper");
	expect_node_of(c, "ghost3-name", "ghost3");
	/* The last ghost gone, a real node b comes up in its place. */
	th_peer_close(&ghost);
	expect_log(c->n[0].d.log, "bridge: node ghost3: 1 entries removed");
	start_node(c, 1, (const char *const[]){ "--peer", c->n[0].listen, NULL });
	assert_int_equal(procreg_register(c->n[1].reg, "on-b", NULL, 0), 0);
	th_expect_name(c->n[0].reg, "on-b", getpid(), true, WAIT_MS);
	expect_node_of(c, "on-b", "nodeb");
	expect_node_of(c, "kept", "keeper");
	th_peer_close(&keeper);
}

/* A node that goes down keeps its entries a while (the linger, for it to
 * come back without a blink): all that while, the id in them still names
 * it (procreg_node_name()), though it is no longer among the nodes up. */
static void test_down_node_named(void **state)
{
	struct cluster *c = *state;
	static struct th_peer leaver;
	const char *const env[] = { "PROCREG_TEST_LINGER_MS=1500", NULL };
	struct procreg_entry e = { .sz = sizeof(e) };
	PROCREG_OPTS(procreg_bridge, b);
	char got[64];
	int checks = 0;

	assert_int_equal(th_node_start(&c->n[0], c->cookie,
				       (const char *const[]){ "--node-timeout-ms", "60000", NULL },
				       env), 0);
	assert_true(fake_node_up(c, &leaver, "leaver", "left-name", WAIT_MS));
	expect_node_of(c, "left-name", "leaver");
	th_peer_close(&leaver);
	expect_log(c->n[0].d.log, "bridge: node leaver: down");
	/* From its going down until its entries are removed. */
	while (procreg_lookup(c->n[0].reg, "left-name", &e) == 0) {
		int err = procreg_node_name(c->n[0].reg, e.node, got, sizeof(got));

		if (err && procreg_lookup(c->n[0].reg, "left-name", NULL) == -ENOENT)
			break; /* removed between the two */
		if (err)
			fail_msg("'left-name' lingers, node id %u: procreg_node_name: %s (check %d)",
				 (unsigned)e.node, strerror(-err), checks);
		assert_string_equal(got, "leaver");
		checks++;
		usleep(2000);
	}
	expect_log(c->n[0].d.log, "bridge: node leaver: 1 entries removed");
	/* It was looked at while it lingered; it was not counted up. */
	assert_true(checks > 0);
	assert_int_equal(procreg_bridge(c->n[0].reg, &b, NULL, NULL), 0);
	assert_int_equal(b.nodes, 0);
	th_expect_name(c->n[0].reg, "left-name", 0, true, WAIT_MS);
	/* Gone, it leaves the nodes file (just after its entries). */
	for (int i = 0; i < WAIT_MS && procreg_node_name(c->n[0].reg, e.node, got, sizeof(got)) == 0;
	     i++)
		usleep(1000);
	assert_int_equal(procreg_node_name(c->n[0].reg, e.node, got, sizeof(got)), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_relay_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_proxy_alters_frame, setup, teardown),
		cmocka_unit_test_setup_teardown(test_proxy_injects_frame, setup, teardown),
		cmocka_unit_test_setup_teardown(test_passive_relay_sees_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_old_version_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unauthenticated_log_limited, setup, teardown),
		cmocka_unit_test_setup_teardown(test_node_ids_reused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_down_node_named, setup, teardown),
	};

	/* TEST_FILTER=test_old_version_refused (a glob) runs one test. */
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
