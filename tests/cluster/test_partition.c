/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_partition.c - replication through partitions: three real daemons
 * whose frames go through the test switch (testnet.h), which cuts and
 * heals links, delays, reorders and drops frames; and, as root, three
 * daemons in network namespaces over the real TCP mesh.
 *
 * Names and memberships are held by real client processes forked here,
 * so every owner's pid is known with its home node. What is checked is
 * the end state, never timing: every wait is a bounded poll, and a
 * replica is right when every node's whole table (names and groups, with
 * each entry's owning node) is the same and holds no entry of a dead
 * process or of a node that is not running.
 *
 * The run's seed is printed; PROCREG_TESTNET_SEED=N repeats it (the
 * switch's fault decisions and the test's own choices both come from it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "testnet.h"

#define N 3
#define CLIENTS_MAX 1024
#define WAIT_MS 30000
#define DUMP_MAX 65536

struct client {
	pid_t pid;
	int home;
	bool alive;
};

struct part {
	char *base;
	char cookie[512];
	char tnenv[600];
	struct testnet *tn;
	uint64_t seed, rng;
	struct th_node n[N];
	struct client cl[CLIENTS_MAX];
	int ncl;
	char why[1024];            /* the last failed check */
	int netns_tag;             /* the netns test's namespaces and links to remove, or 0 */
	const char *env;           /* one more "K=V" for the daemons, or NULL */
};

static uint64_t rnd(struct part *p)
{
	return th_xorshift(&p->rng);
}

static void netns_cleanup(int tag);

static int setup(void **state)
{
	struct part *p = calloc(1, sizeof(*p));
	const char *s = getenv("PROCREG_TESTNET_SEED");
	struct timespec ts;

	assert_non_null(p);
	clock_gettime(CLOCK_REALTIME, &ts);
	p->seed = s ? strtoull(s, NULL, 10) : ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
						       (uint64_t)getpid();
	if (!p->seed)
		p->seed = 1;
	p->rng = p->seed;
	fprintf(stderr, "test_partition: seed %llu (PROCREG_TESTNET_SEED=%llu repeats it)\n",
		(unsigned long long)p->seed, (unsigned long long)p->seed);
	p->base = th_nodes_make(p->n, N, "node", p->cookie, sizeof(p->cookie),
				"a-partition-cookie-0123456789");
	p->tn = tn_start(p->base, p->seed ^ 0x9e3779b97f4a7c15ull);
	assert_non_null(p->tn);
	snprintf(p->tnenv, sizeof(p->tnenv), "PROCREG_TESTNET=%s", tn_path(p->tn));
	*state = p;
	return 0;
}

static int teardown(void **state)
{
	struct part *p = *state;
	int bad;

	for (int k = 0; k < p->ncl; k++)
		if (p->cl[k].alive) {
			kill(p->cl[k].pid, SIGKILL);
			th_wait(p->cl[k].pid);
		}
	bad = th_nodes_stop(p->n, N);
	if (p->netns_tag)
		netns_cleanup(p->netns_tag);
	if (p->tn)
		tn_stop(p->tn);
	th_rmrf(p->base);
	free(p->base);
	free(p);
	return bad;
}

/* ---- daemons and clients ------------------------------------------------ */

static void start_node(struct part *p, int i)
{
	struct th_node *n = &p->n[i];
	const char *args[] = { "--node", n->name, "--cookie-file", p->cookie, "--bridge-backend",
			       BRIDGE_BACKEND_TESTNET, NULL };
	const char *env[] = { p->tnenv, p->env, NULL };

	if (th_daemon_start(&n->d, n->dir, args, env) != 0) {
		th_daemon_dump_log(&n->d);
		fail_msg("%s: the daemon did not start", n->name);
	}
	n->reg = th_open(n->dir);
	assert_non_null(n->reg);
}

/* SIGKILL node I's daemon: a node that departs without a word. */
static void kill_node(struct part *p, int i)
{
	procreg_close(p->n[i].reg);
	p->n[i].reg = NULL;
	th_daemon_kill(&p->n[i].d);
}

static int all_up(void *arg)
{
	struct part *p = arg;

	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++)
			if (p->n[i].d.pid && p->n[j].d.pid &&
			    !tn_is_up(p->tn, p->n[i].name, p->n[j].name))
				return 0;
	return 1;
}

static void start_all(struct part *p)
{
	for (int i = 0; i < N; i++)
		start_node(p, i);
	assert_true(th_until(all_up, p, WAIT_MS));
}

/* Connect or cut both links between nodes I and J. */
static void link_pair(struct part *p, int i, int j, bool up)
{
	tn_pair(p->tn, p->n[i].name, p->n[j].name, up);
}

static void heal(struct part *p)
{
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++)
			link_pair(p, i, j, true);
}

struct hold {
	const char *name, *group;   /* spawn_client's, either may be NULL */
	const char *prefix;         /* spawn_bulk_client's */
	int count;
};

static int hold_client(procreg_t *r, void *arg)
{
	struct hold *h = arg;
	char st = 'r';

	if (h->name && procreg_register(r, h->name, "held", 4) != 0)
		st = 'x';
	if (h->group && procreg_join(r, h->group, "m", 1) != 0)
		return -11;
	return st;
}

static int hold_bulk(procreg_t *r, void *arg)
{
	static char meta[PROCREG_META_MAX];
	struct hold *h = arg;

	memset(meta, 'm', sizeof(meta));
	for (int i = 0; i < h->count; i++) {
		char name[64];

		snprintf(name, sizeof(name), "%s-%d", h->prefix, i);
		if (procreg_register(r, name, meta, sizeof(meta)) != 0)
			return -11;
	}
	return 'r';
}

/* A client of node HOME running HOLD (WHAT, in a failure's message):
 * its index in p->cl; its report in *ST. */
static int spawn_hold(struct part *p, int home, int (*hold)(procreg_t *, void *), struct hold *h,
		      const char *what, char *st)
{
	pid_t pid;

	assert_true(p->ncl < CLIENTS_MAX);
	pid = th_spawn_holding(p->n[home].dir, hold, h, st);
	if (!*st)
		fail_msg("a %s of %s failed (status %d)", what, p->n[home].name, th_wait(pid));
	p->cl[p->ncl] = (struct client){ pid, home, true };
	return p->ncl++;
}

/* A client of node HOME that registers NAME and joins GROUP (either may
 * be NULL), then holds them until killed. *OK (may be NULL): whether the
 * registration succeeded. */
static int spawn_client(struct part *p, int home, const char *name, const char *group, bool *ok)
{
	struct hold h = { .name = name, .group = group };
	char st;
	int k = spawn_hold(p, home, hold_client, &h, "client", &st);

	if (ok)
		*ok = st == 'r';
	return k;
}

/* A client of node HOME that registers NAME, which must succeed. */
static int spawn_client_ok(struct part *p, int home, const char *name)
{
	bool ok;
	int k = spawn_client(p, home, name, NULL, &ok);

	assert_true(ok);
	return k;
}

/* A client of node HOME holding COUNT names PREFIX-0.., each with the
 * largest metadata: enough of them make a snapshot of several parts. */
static int spawn_bulk_client(struct part *p, int home, const char *prefix, int count)
{
	struct hold h = { .prefix = prefix, .count = count };
	char st;

	return spawn_hold(p, home, hold_bulk, &h, "bulk client", &st);
}

static void kill_client(struct part *p, int k)
{
	kill(p->cl[k].pid, SIGKILL);
	th_wait(p->cl[k].pid);
	p->cl[k].alive = false;
}

static const struct client *client_of(const struct part *p, pid_t pid)
{
	for (int k = 0; k < p->ncl; k++)
		if (p->cl[k].pid == pid)
			return &p->cl[k];
	return NULL;
}

/* ---- what a node holds -------------------------------------------------- */

struct dump {
	struct part *p;
	int self;
	char lines[512][PROCREG_NAME_MAX + 48];
	int n;
	bool bad;
};

static void dump_entry(struct dump *d, char kind, const char *name, const struct procreg_entry *e)
{
	const struct client *c = client_of(d->p, e->pid);

	if (d->n >= 512) {
		d->bad = true;
		return;
	}
	/* The owning node as this replica records it must be the one the
	 * owner registered through; the owner must be alive and its node
	 * running. */
	if (!c || !c->alive || !d->p->n[c->home].d.pid || (e->node == 0) != (c->home == d->self)) {
		snprintf(d->p->why, sizeof(d->p->why),
			 "%s: %c %s pid %d (node field %u): %s", d->p->n[d->self].name, kind, name,
			 (int)e->pid, e->node,
			 !c ? "not a client" : !c->alive ? "a dead process"
			 : !d->p->n[c->home].d.pid ? "of a departed node" : "on the wrong node");
		d->bad = true;
	}
	snprintf(d->lines[d->n++], sizeof(d->lines[0]), "%c %s %d %s", kind, name, (int)e->pid,
		 c ? d->p->n[c->home].name : "?");
}

static int dump_name(const struct procreg_entry *e, void *arg)
{
	dump_entry(arg, 'N', e->name, e);
	return 0;
}

struct gctx {
	struct dump *d;
	const char *group;
};

static int dump_member(const struct procreg_entry *e, void *arg)
{
	struct gctx *g = arg;

	dump_entry(g->d, 'G', g->group, e);
	return 0;
}

static int dump_group(const struct procreg_group *grp, void *arg)
{
	struct gctx g = { arg, grp->name };

	procreg_members(g.d->p->n[g.d->self].reg, grp->name, dump_member, &g);
	return 0;
}

static int cmp_line(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void take_dump(struct part *p, int i, struct dump *d)
{
	d->p = p;
	d->self = i;
	d->n = 0;
	d->bad = false;
	procreg_foreach(p->n[i].reg, dump_name, d);
	procreg_groups(p->n[i].reg, dump_group, d);
	qsort(d->lines, (size_t)d->n, sizeof(d->lines[0]), cmp_line);
}

static struct dump dumps[N];

/* Every running node holds the same entries, all of live owners on
 * running nodes. */
static int consistent(void *arg)
{
	struct part *p = arg;
	int first = -1;

	for (int i = 0; i < N; i++) {
		if (!p->n[i].d.pid)
			continue;
		take_dump(p, i, &dumps[i]);
		if (dumps[i].bad)
			return 0;
		if (first < 0) {
			first = i;
			continue;
		}
		if (dumps[i].n != dumps[first].n) {
			snprintf(p->why, sizeof(p->why), "%s holds %d entries, %s %d", p->n[i].name,
				 dumps[i].n, p->n[first].name, dumps[first].n);
			return 0;
		}
		for (int k = 0; k < dumps[i].n; k++)
			if (strcmp(dumps[i].lines[k], dumps[first].lines[k])) {
				snprintf(p->why, sizeof(p->why), "%s has '%.300s' where %s has '%.300s'",
					 p->n[i].name, dumps[i].lines[k], p->n[first].name,
					 dumps[first].lines[k]);
				return 0;
			}
	}
	return 1;
}

/* Every running node holds only entries of live owners on running nodes
 * (partitioned nodes may differ). */
static int sound(void *arg)
{
	struct part *p = arg;

	for (int i = 0; i < N; i++)
		if (p->n[i].d.pid) {
			take_dump(p, i, &dumps[i]);
			if (dumps[i].bad)
				return 0;
		}
	return 1;
}

static void dump_all(struct part *p)
{
	for (int i = 0; i < N; i++) {
		if (!p->n[i].d.pid)
			continue;
		fprintf(stderr, "--- %s (%d entries)\n", p->n[i].name, dumps[i].n);
		for (int k = 0; k < dumps[i].n; k++)
			fprintf(stderr, "  %s\n", dumps[i].lines[k]);
		th_daemon_dump_log(&p->n[i].d);
	}
}

static void expect_sound(struct part *p, const char *when)
{
	if (th_until(sound, p, WAIT_MS))
		return;
	dump_all(p);
	fail_msg("%s: a stale entry remains (seed %llu): %s", when, (unsigned long long)p->seed,
		 p->why);
}

static void expect_consistent(struct part *p, const char *when)
{
	if (th_until(consistent, p, WAIT_MS))
		return;
	dump_all(p);
	fail_msg("%s: replicas differ (seed %llu): %s", when, (unsigned long long)p->seed, p->why);
}

static void expect_name(struct part *p, int i, const char *name, pid_t pid)
{
	if (!th_name_within(p->n[i].reg, name, pid, false, WAIT_MS))
		fail_msg("%s: '%s': expected %s %d (seed %llu)", p->n[i].name, name,
			 pid ? "owner" : "absent", (int)pid, (unsigned long long)p->seed);
}

/* Whether node I's feed, from *CURSOR on, reports that PID lost NAME to
 * another node. */
static bool saw_conflict(struct part *p, int i, uint64_t cursor, const char *name, pid_t pid)
{
	PROCREG_OPTS(procreg_event, ev);

	th_feed_settle(p->n[i].reg);
	while (procreg_next_event(p->n[i].reg, &cursor, &ev, 0) == 0)
		if (ev.type == PROCREG_EV_CONFLICT && ev.pid == pid && !strcmp(ev.name, name))
			return true;
	return false;
}

/* ---- through the test switch ------------------------------------------- */

/* {a} | {b, c}: the same name on both sides, both orders; on heal the
 * earlier registration wins everywhere and the loser's node says so. */
static void test_split_conflict(void **state)
{
	struct part *p = *state;
	uint64_t feed_a, feed_c;
	int a1, c1, c2, a2;

	start_all(p);
	link_pair(p, 0, 1, false);
	link_pair(p, 0, 2, false);
	feed_a = procreg_feed_head(p->n[0].reg);
	feed_c = procreg_feed_head(p->n[2].reg);

	a1 = spawn_client_ok(p, 0, "first-a");
	th_msleep(20);
	c1 = spawn_client_ok(p, 2, "first-a"); /* c cannot see a's */
	c2 = spawn_client_ok(p, 2, "first-c");
	th_msleep(20);
	a2 = spawn_client_ok(p, 0, "first-c");

	/* Apart: each side has its own. */
	expect_name(p, 1, "first-a", p->cl[c1].pid);
	expect_name(p, 1, "first-c", p->cl[c2].pid);
	expect_name(p, 0, "first-a", p->cl[a1].pid);
	expect_name(p, 0, "first-c", p->cl[a2].pid);

	heal(p);
	for (int i = 0; i < N; i++) {
		expect_name(p, i, "first-a", p->cl[a1].pid);
		expect_name(p, i, "first-c", p->cl[c2].pid);
	}
	expect_consistent(p, "after the heal");
	assert_true(saw_conflict(p, 2, feed_c, "first-a", p->cl[c1].pid));
	assert_true(saw_conflict(p, 0, feed_a, "first-c", p->cl[a2].pid));
	/* The losers are alive but hold nothing: their names went with the
	 * conflict, on their own nodes too. */
	assert_true(p->cl[c1].alive && p->cl[a2].alive);
}

/* a-b and b-c up, a-c cut: each node keeps what it can see. b sees both
 * claims to one name and shows the winner; when the winner goes, b shows
 * the claim that remains, which c never gave up. */
static void test_partial_split(void **state)
{
	struct part *p = *state;
	int ca, cb, cc, both_a, both_c;

	start_all(p);
	link_pair(p, 0, 2, false);
	ca = spawn_client(p, 0, "on-a", "everywhere", NULL);
	cb = spawn_client(p, 1, "on-b", "everywhere", NULL);
	cc = spawn_client(p, 2, "on-c", "everywhere", NULL);
	both_a = spawn_client_ok(p, 0, "both");
	th_msleep(20);
	both_c = spawn_client_ok(p, 2, "both");

	expect_name(p, 0, "on-a", p->cl[ca].pid);
	expect_name(p, 0, "on-b", p->cl[cb].pid);
	expect_name(p, 0, "on-c", 0);
	expect_name(p, 1, "on-a", p->cl[ca].pid);
	expect_name(p, 1, "on-b", p->cl[cb].pid);
	expect_name(p, 1, "on-c", p->cl[cc].pid);
	expect_name(p, 2, "on-a", 0);
	expect_name(p, 2, "on-b", p->cl[cb].pid);
	expect_name(p, 2, "on-c", p->cl[cc].pid);
	expect_name(p, 0, "both", p->cl[both_a].pid);
	expect_name(p, 1, "both", p->cl[both_a].pid);
	expect_name(p, 2, "both", p->cl[both_c].pid);
	for (int i = 0; i < N; i++) {
		uint64_t members = 0;

		for (int t = 0; t < 2000; t++) {
			procreg_group_count(p->n[i].reg, "everywhere", &members, NULL);
			if (members == (i == 1 ? 3u : 2u))
				break;
			th_msleep(5);
		}
		assert_int_equal(members, i == 1 ? 3 : 2);
	}

	/* The winner dies: b falls back on c's claim. */
	kill_client(p, both_a);
	expect_name(p, 0, "both", 0);
	expect_name(p, 1, "both", p->cl[both_c].pid);
	expect_name(p, 2, "both", p->cl[both_c].pid);

	heal(p);
	expect_consistent(p, "after the heal");
	for (int i = 0; i < N; i++)
		expect_name(p, i, "both", p->cl[both_c].pid);
}

/* A daemon killed: the others drop everything its node held, in one
 * step each, with NODE_DOWN events; and take it back when it returns
 * (its clients, still alive, are recovered by the new daemon). */
static void test_node_departs(void **state)
{
	struct part *p = *state;
	PROCREG_OPTS(procreg_event, ev);
	uint64_t feed_a;
	int on_b, downs = 0;

	start_all(p);
	spawn_client(p, 0, "stays-a", "grp", NULL);
	on_b = spawn_client(p, 1, "goes-b", "grp", NULL);
	spawn_client(p, 2, "stays-c", "grp", NULL);
	expect_consistent(p, "all up");
	feed_a = procreg_feed_head(p->n[0].reg);
	kill_node(p, 1);
	expect_sound(p, "after nodeb departed");
	expect_consistent(p, "after nodeb departed");
	expect_name(p, 0, "goes-b", 0);
	expect_name(p, 2, "goes-b", 0);
	th_feed_settle(p->n[0].reg);
	while (procreg_next_event(p->n[0].reg, &feed_a, &ev, 0) == 0)
		if (ev.type == PROCREG_EV_NODE_DOWN && ev.pid == p->cl[on_b].pid)
			downs++;
	assert_int_equal(downs, 2); /* its name and its membership */

	start_node(p, 1);
	assert_true(th_until(all_up, p, WAIT_MS));
	expect_consistent(p, "nodeb back");
	expect_name(p, 0, "goes-b", p->cl[on_b].pid);
}

/* A pair dropped and reconnected, same incarnations: within the grace
 * (made long here, so that no delay of this machine can matter) nothing
 * blinks. b keeps a's entries while cut; on reconnect a's snapshot
 * replaces them by difference: an owner that died meanwhile goes, one
 * registered meanwhile comes, and the one that stayed gets no event. */
static void test_reconnect_no_blink(void **state)
{
	struct part *p = *state;
	PROCREG_OPTS(procreg_event, ev);
	TH_ENTRY(e);
	uint64_t feed_b;
	int steady, doomed, fresh, unregistered = 0, other = 0;

	p->env = "PROCREG_TEST_LINGER_MS=600000";
	start_all(p);
	steady = spawn_client(p, 0, "steady", "steady-group", NULL);
	doomed = spawn_client(p, 0, "doomed", NULL, NULL);
	expect_consistent(p, "all up");
	feed_b = procreg_feed_head(p->n[1].reg);

	link_pair(p, 0, 1, false);
	kill_client(p, doomed);
	fresh = spawn_client(p, 0, "fresh", NULL, NULL);
	expect_name(p, 2, "doomed", 0);
	expect_name(p, 2, "fresh", p->cl[fresh].pid);
	/* Cut, and b still answers for a's names. */
	assert_int_equal(procreg_lookup(p->n[1].reg, "steady", &e), 0);
	assert_int_equal(e.pid, p->cl[steady].pid);

	link_pair(p, 0, 1, true);
	assert_true(th_until(all_up, p, WAIT_MS));
	expect_consistent(p, "after the reconnect");
	th_feed_settle(p->n[1].reg);
	while (procreg_next_event(p->n[1].reg, &feed_b, &ev, 0) == 0) {
		if (ev.type == PROCREG_EV_UNREGISTERED && !strcmp(ev.name, "doomed"))
			unregistered++;
		else if (ev.type == PROCREG_EV_REGISTERED && !strcmp(ev.name, "fresh"))
			continue;
		else
			other++;
	}
	assert_int_equal(unregistered, 1);
	assert_int_equal(other, 0); /* no node-down, nothing for steady */
}

/* The types of the events of node I's feed after *CURSOR for NAME, in
 * order, into TYPES (up to MAX, 0 after the last): their number. */
static int feed_types(struct part *p, int i, uint64_t *cursor, const char *name, int *types,
		      int max)
{
	PROCREG_OPTS(procreg_event, ev);
	uint64_t at = *cursor;
	int n = 0;

	memset(types, 0, sizeof(*types) * (size_t)max);
	th_feed_settle(p->n[i].reg);
	while (procreg_next_event(p->n[i].reg, &at, &ev, 0) == 0)
		if (!strcmp(ev.name, name) && n < max)
			types[n++] = ev.type;
	return n;
}

/* b's daemon killed and started again (another incarnation) within its
 * grace, while a's daemon is stopped: a finds, in one dispatch, b gone,
 * back as another incarnation, and b's new snapshot, before the walk that
 * takes the old incarnation's entries out (at the end of the dispatch).
 * The snapshot holds again what a client that outlived b's daemon holds:
 * that is not the old entry confirmed, but the old one gone (NODE_DOWN)
 * and a new one come (REGISTERED, JOINED), as when the walk came first;
 * the entry of a client that died meanwhile goes. */
static void test_restart_in_grace(void **state)
{
	struct part *p = *state;
	struct tn_stats st;
	uint64_t feed_a, frames;
	int survivor, doomed, types[4];

	p->env = "PROCREG_TEST_LINGER_MS=600000";
	start_node(p, 0);
	start_node(p, 1);
	assert_true(th_until(all_up, p, WAIT_MS));
	survivor = spawn_client(p, 1, "survivor", "survivors", NULL);
	doomed = spawn_client_ok(p, 1, "doomed-b");
	expect_name(p, 0, "survivor", p->cl[survivor].pid);
	expect_name(p, 0, "doomed-b", p->cl[doomed].pid);
	feed_a = procreg_feed_head(p->n[0].reg);

	assert_int_equal(kill(p->n[0].d.pid, SIGSTOP), 0);
	assert_true(th_until(th_stopped, &p->n[0].d.pid, WAIT_MS));
	kill_node(p, 1);
	kill_client(p, doomed);
	tn_get_stats(p->tn, &st);
	frames = st.frames;
	start_node(p, 1);
	/* b's snapshot is in a's socket: the first frame b sends a. */
	for (int i = 0; i < WAIT_MS / 10 && st.frames == frames; i++) {
		th_msleep(10);
		tn_get_stats(p->tn, &st);
	}
	assert_true(st.frames > frames);
	assert_int_equal(kill(p->n[0].d.pid, SIGCONT), 0);

	expect_name(p, 0, "doomed-b", 0);
	expect_name(p, 0, "survivor", p->cl[survivor].pid);
	expect_consistent(p, "b back as another incarnation");
	assert_int_equal(feed_types(p, 0, &feed_a, "doomed-b", types, 4), 1);
	assert_int_equal(types[0], PROCREG_EV_NODE_DOWN);
	assert_int_equal(feed_types(p, 0, &feed_a, "survivor", types, 4), 2);
	assert_int_equal(types[0], PROCREG_EV_NODE_DOWN);
	assert_int_equal(types[1], PROCREG_EV_REGISTERED);
	assert_int_equal(feed_types(p, 0, &feed_a, "survivors", types, 4), 2);
	assert_int_equal(types[0], PROCREG_EV_NODE_DOWN);
	assert_int_equal(types[1], PROCREG_EV_JOINED);
}

/* With faults F on every link, names and memberships come and go on
 * every node (clients started and killed) for up to 400 rounds, until
 * ENOUGH says the faults have shown; then every replica must agree. The
 * switch's figures in *ST. */
static void churn(struct part *p, const struct tn_faults *f,
		  bool (*enough)(const struct tn_stats *st, int round), struct tn_stats *st)
{
	char name[32], group[32];

	tn_faults(p->tn, NULL, NULL, f);
	start_all(p);
	for (int round = 0; round < 400; round++) {
		int k;

		snprintf(name, sizeof(name), "churn%d", (int)(rnd(p) % 12));
		snprintf(group, sizeof(group), "cg%d", (int)(rnd(p) % 3));
		k = spawn_client(p, (int)(rnd(p) % N), rnd(p) % 4 ? name : NULL,
				 rnd(p) % 2 ? group : NULL, NULL);
		if (rnd(p) % 3 == 0) {
			k = (int)(rnd(p) % (uint64_t)p->ncl);
			if (p->cl[k].alive)
				kill_client(p, k);
		}
		th_msleep((int)(rnd(p) % 8));
		tn_get_stats(p->tn, st);
		if (enough(st, round))
			break;
	}
	expect_consistent(p, "with faults");
	tn_get_stats(p->tn, st);
	fprintf(stderr, "churn: %d clients, %llu frames, %llu dropped, %llu reordered, "
		"%llu resyncs\n", p->ncl, (unsigned long long)st->frames,
		(unsigned long long)st->dropped, (unsigned long long)st->reordered,
		(unsigned long long)st->resets);
}

static bool lost_and_reordered(const struct tn_stats *st, int round)
{
	return round >= 150 && st->dropped > 2 && st->reordered > 2 && st->resets > 2;
}

/* Delay, jitter, reordering and loss on every link while names and
 * memberships come and go: an overtaken change waits for its turn, the
 * sequence numbers catch every lost one (the pair resyncs), and the
 * replicas end identical. */
static void test_faults_churn(void **state)
{
	struct part *p = *state;
	struct tn_faults f = { .delay_ms = 1, .jitter_ms = 4, .loss_pm = 30, .reorder_pm = 60 };
	struct tn_stats st;

	churn(p, &f, lost_and_reordered, &st);
	/* The faults happened, and were caught. */
	assert_true(st.dropped > 0);
	assert_true(st.reordered > 0);
	assert_true(st.resets > 0);
}

/* How many times NEEDLE is in the file at PATH (a daemon's log). */
static int count_in_file(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	int n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, needle))
			n++;
	fclose(f);
	return n;
}

/* Reordering alone, heavy, on every link while names and memberships
 * come and go: every frame arrives, some after the one sent after it.
 * What comes early waits for its turn: the replicas end identical with
 * no pair ever refused a frame. */
static bool reordered_enough(const struct tn_stats *st, int round)
{
	return round >= 100 && st->reordered > 20;
}

static void test_reorder_no_resync(void **state)
{
	struct part *p = *state;
	struct tn_faults f = { .delay_ms = 1, .jitter_ms = 4, .reorder_pm = 200 };
	struct tn_stats st;

	churn(p, &f, reordered_enough, &st);
	assert_true(st.reordered > 0);
	assert_int_equal(st.dropped, 0);
	assert_int_equal(st.resets, 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(count_in_file(p->n[i].d.log, ": resyncing"), 0);
}

struct dropprobe {
	struct part *p;
	uint64_t want;
};

static int snap_dropped(void *arg)
{
	struct dropprobe *d = arg;
	struct tn_stats st;

	tn_get_stats(d->p->tn, &st);
	return st.snap_dropped >= d->want;
}

/* A part of a snapshot lost on the way (a transport may lose one, as
 * NATS may): a's snapshot to b, several parts long, loses part PART when
 * the cut between them heals. b notices (the parts after it wait for it,
 * or for the last part the heartbeats after it count a snapshot that is
 * not whole, and it does not come: log line NEEDLE), refuses, and the
 * pair resyncs: the replicas end identical, with the
 * entries the lost part carried, among them names a registered while
 * cut, which only the snapshot brings to b. Unnoticed, those would stay
 * missing on b (and a finished resync would remove a's names the lost
 * part confirmed). */
static void snapshot_part_lost(struct part *p, uint32_t part, const char *needle)
{
	struct dropprobe d = { p, 1 };
	struct tn_stats before, after;
	int late;

	start_all(p);
	spawn_bulk_client(p, 0, "bulk-early", 120);
	expect_consistent(p, "all up");
	link_pair(p, 0, 1, false);
	late = spawn_bulk_client(p, 0, "bulk-late", 120);
	expect_name(p, 2, "bulk-late-119", p->cl[late].pid);
	tn_get_stats(p->tn, &before);
	tn_drop_snap(p->tn, p->n[0].name, p->n[1].name, part, 1);
	link_pair(p, 0, 1, true);
	if (!th_until(snap_dropped, &d, WAIT_MS))
		fail_msg("no snapshot part %u went from a to b", part);
	assert_true(th_until(all_up, p, WAIT_MS));
	expect_consistent(p, "after a lost snapshot part");
	expect_name(p, 1, "bulk-late-0", p->cl[late].pid);
	expect_name(p, 1, "bulk-late-119", p->cl[late].pid);
	tn_get_stats(p->tn, &after);
	assert_int_equal(after.snap_dropped, 1);
	assert_true(after.resets > before.resets);
	assert_true(count_in_file(p->n[1].d.log, needle) >= 1);
	fprintf(stderr, "snapshot part %s lost: %llu pair resets, b logged '%s'\n",
		part == TN_SNAP_LAST ? "last" : "1",
		(unsigned long long)(after.resets - before.resets), needle);
}

static void test_snapshot_middle_part_lost(void **state)
{
	snapshot_part_lost(*state, 1, "node nodea: snapshot incomplete, part 1 missing");
}

static void test_snapshot_last_part_lost(void **state)
{
	snapshot_part_lost(*state, TN_SNAP_LAST, "node nodea: snapshot incomplete, part");
}

/* 100 rounds: a random split (one node apart, one pair cut, one
 * direction cut, everyone apart), registrations and joins on every side,
 * clients killed, a daemon killed every tenth round; then heal, with
 * more registrations racing the resyncs, and check. */
static void random_rounds(struct part *p, const char *what)
{
	struct tn_faults f = { .jitter_ms = 2, .reorder_pm = 10, .loss_pm = 5 };
	char name[32], group[32];
	struct tn_stats st;
	int alive = 0;

	tn_faults(p->tn, NULL, NULL, &f);
	start_all(p);
	for (int round = 0; round < 100; round++) {
		int scheme = (int)(rnd(p) % 8), x = (int)(rnd(p) % N), down = -1;
		int actions = 2 + (int)(rnd(p) % 4);

		for (int i = 0; i < N; i++)
			for (int j = i + 1; j < N; j++) {
				bool up = true;

				if (scheme < 3) /* x apart */
					up = i != x && j != x;
				else if (scheme < 6) /* one link cut: the one not touching x */
					up = i == x || j == x;
				else if (scheme == 6) /* everyone apart */
					up = false;
				link_pair(p, i, j, up);
			}
		if (scheme == 7) /* one direction only: the pair is lost both ways */
			tn_link(p->tn, p->n[x].name, p->n[(x + 1) % N].name, false);
		if (round % 10 == 9) {
			/* A node departs: the others drop all it held. */
			down = (int)(rnd(p) % N);
			kill_node(p, down);
			expect_sound(p, "after a node departed");
		}
		for (int a = 0; a < actions; a++) {
			int home = (int)(rnd(p) % N);

			if (!p->n[home].d.pid)
				continue;
			snprintf(name, sizeof(name), "r%d", (int)(rnd(p) % 10));
			snprintf(group, sizeof(group), "rg%d", (int)(rnd(p) % 3));
			spawn_client(p, home, rnd(p) % 4 ? name : NULL, rnd(p) % 3 ? NULL : group,
				     NULL);
			alive++;
			for (int kills = alive > 20 ? alive - 20 : (int)(rnd(p) % 3 == 0);
			     kills > 0; kills--) {
				int k = (int)(rnd(p) % (uint64_t)p->ncl);

				for (int t = 0; t < p->ncl && !p->cl[k].alive; t++)
					k = (k + 1) % p->ncl;
				if (p->cl[k].alive) {
					kill_client(p, k);
					alive--;
				}
			}
		}
		if (down >= 0)
			start_node(p, down);
		heal(p);
		/* Registrations racing the snapshots of the heal. */
		for (int a = (int)(rnd(p) % 3); a > 0; a--) {
			snprintf(name, sizeof(name), "r%d", (int)(rnd(p) % 10));
			spawn_client(p, (int)(rnd(p) % N), name, NULL, NULL);
			alive++;
		}
		assert_true(th_until(all_up, p, WAIT_MS));
		expect_consistent(p, "after a heal");
	}
	/* And it stays so. */
	th_msleep(300);
	expect_consistent(p, "at the end");
	tn_get_stats(p->tn, &st);
	fprintf(stderr, "%s: 100 rounds, %d clients (%d alive at the end), "
		"%llu pair ups, %llu frames, %llu dropped, %llu reordered, %llu resyncs\n", what,
		p->ncl, alive, (unsigned long long)st.ups, (unsigned long long)st.frames,
		(unsigned long long)st.dropped, (unsigned long long)st.reordered,
		(unsigned long long)st.resets);
}

/* With the default grace, a cut shorter than it resyncs by difference. */
static void test_random_rounds(void **state)
{
	random_rounds(*state, "test_random_rounds");
}

/* With none, every cut removes the other side's entries at once and the
 * heal brings them back whole. */
static void test_random_rounds_no_grace(void **state)
{
	struct part *p = *state;

	p->env = "PROCREG_TEST_LINGER_MS=0";
	random_rounds(p, "test_random_rounds_no_grace");
}

/* ---- real TCP, across network namespaces ------------------------------- */

/* Run a shell command; its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void must(int status, const char *what)
{
	if (status != 0)
		fail_msg("%s: exit status %d (as root, with iproute2: ip netns, veth, bridge)", what,
			 status);
}

/* Interface and namespace names carry TAG: runs side by side do not meet. */
static void netns_cleanup(int tag)
{
	for (int i = 0; i < N; i++)
		sh("ip netns del prt%d%c 2>/dev/null", tag, 'a' + i);
	sh("ip link del prt%db 2>/dev/null", tag);
}

/* A bridge in this namespace, and per node a namespace joined to it by a
 * veth pair: node I is 10.231.(TAG % 250).(I + 1). */
static void netns_build(struct part *p, int tag)
{
	p->netns_tag = tag;
	netns_cleanup(tag);
	must(sh("ip link add prt%db type bridge && ip link set prt%db up", tag, tag), "bridge");
	for (int i = 0; i < N; i++) {
		char x = (char)('a' + i);

		must(sh("ip netns add prt%d%c", tag, x), "ip netns add");
		must(sh("ip link add prt%d%cr type veth peer name prt%d%cn", tag, x, tag, x), "veth");
		must(sh("ip link set prt%d%cn netns prt%d%c", tag, x, tag, x), "veth into netns");
		must(sh("ip link set prt%d%cr master prt%db up", tag, x, tag), "veth on the bridge");
		must(sh("ip -n prt%d%c addr add 10.231.%d.%d/24 dev prt%d%cn && "
			"ip -n prt%d%c link set prt%d%cn up && ip -n prt%d%c link set lo up",
			tag, x, tag % 250, i + 1, tag, x, tag, x, tag, x, tag, x), "addresses");
		snprintf(p->n[i].listen, sizeof(p->n[i].listen), "10.231.%d.%d:7400", tag % 250,
			 i + 1);
	}
}

/* Start node I's daemon inside its namespace with the TCP mesh: the
 * fork in th_daemon_start happens while this thread is in it. */
static void start_node_netns(struct part *p, int i)
{
	struct th_node *n = &p->n[i];
	const char *args[16];
	char nspath[64];
	int k = 0, self, ns, err;

	snprintf(nspath, sizeof(nspath), "/run/netns/prt%d%c", p->netns_tag, 'a' + i);
	self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	ns = open(nspath, O_RDONLY | O_CLOEXEC);
	assert_true(self >= 0 && ns >= 0);
	args[k++] = "--node";
	args[k++] = n->name;
	args[k++] = "--listen";
	args[k++] = n->listen;
	args[k++] = "--cookie-file";
	args[k++] = p->cookie;
	for (int j = 0; j < N; j++)
		if (j != i) {
			args[k++] = "--peer";
			args[k++] = p->n[j].listen;
		}
	args[k] = NULL;
	assert_int_equal(setns(ns, CLONE_NEWNET), 0);
	err = th_daemon_start(&n->d, n->dir, args, NULL);
	assert_int_equal(setns(self, CLONE_NEWNET), 0);
	close(ns);
	close(self);
	if (err) {
		th_daemon_dump_log(&n->d);
		fail_msg("%s: the daemon did not start in its namespace", n->name);
	}
	n->reg = th_open(n->dir);
	assert_non_null(n->reg);
}

/* {a} | {b, c} by taking a's port on the bridge down: TCP sees silence,
 * not a reset, and the mesh's heartbeats find it. The same name on both
 * sides; on heal, the mesh redials and every node agrees on the earlier
 * registration. */
static void test_netns_tcp(void **state)
{
	struct part *p = *state;
	uint64_t feed_c;
	int probe[N], a1, c1;

	if (geteuid() != 0)
		fail_msg("test_netns_tcp needs root (network namespaces, veth pairs)");
	netns_build(p, getpid() % 100000);
	for (int i = 0; i < N; i++)
		start_node_netns(p, i);
	for (int i = 0; i < N; i++) {
		char name[32];

		snprintf(name, sizeof(name), "tcp-%s", p->n[i].name);
		probe[i] = spawn_client(p, i, name, "tcp-group", NULL);
	}
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++) {
			char name[32];

			snprintf(name, sizeof(name), "tcp-%s", p->n[j].name);
			expect_name(p, i, name, p->cl[probe[j]].pid);
		}
	expect_consistent(p, "tcp: all up");

	must(sh("ip link set prt%dar down", p->netns_tag), "cut a");
	expect_name(p, 1, "tcp-nodea", 0);
	expect_name(p, 2, "tcp-nodea", 0);
	expect_name(p, 0, "tcp-nodeb", 0);
	expect_name(p, 0, "tcp-nodec", 0);
	feed_c = procreg_feed_head(p->n[2].reg);
	a1 = spawn_client_ok(p, 0, "tcp-contested");
	th_msleep(20);
	c1 = spawn_client_ok(p, 2, "tcp-contested");
	expect_name(p, 1, "tcp-contested", p->cl[c1].pid);

	must(sh("ip link set prt%dar up", p->netns_tag), "heal a");
	for (int i = 0; i < N; i++)
		expect_name(p, i, "tcp-contested", p->cl[a1].pid);
	expect_consistent(p, "tcp: after the heal");
	assert_true(saw_conflict(p, 2, feed_c, "tcp-contested", p->cl[c1].pid));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_split_conflict, setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_split, setup, teardown),
		cmocka_unit_test_setup_teardown(test_node_departs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reconnect_no_blink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_in_grace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_faults_churn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reorder_no_resync, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_middle_part_lost, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_last_part_lost, setup, teardown),
		cmocka_unit_test_setup_teardown(test_random_rounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_random_rounds_no_grace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_netns_tcp, setup, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
