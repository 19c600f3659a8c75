/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_bridge_snap.c - a snapshot for a node that comes up, written in
 * pieces while the table changes.
 *
 *  - Correct under churn: node A holds many names and groups with
 *    members, a child keeps registering, unregistering, joining and
 *    leaving on A while node B comes up and takes A's snapshot; once the
 *    churn stops, B holds what A holds, names, groups and members.
 *  - In pieces: with a big table, the snapshot takes more than one piece
 *    and local clients are answered between two: changes made by a
 *    client while it is written come after it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "internal.h"
#include "bridge_proto.h"

#define COOKIE "a-test-cookie-0123456789"
#define WAIT_MS 30000

struct cluster {
	char *base;
	char cookie[512];
	struct th_node n[2];
};

static int setup(void **state)
{
	struct cluster *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	c->base = th_nodes_make(c->n, 2, "snap", c->cookie, sizeof(c->cookie), COOKIE);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct cluster *c = *state;
	int bad = th_nodes_stop(c->n, 2);

	th_rmrf(c->base);
	free(c->base);
	free(c);
	return bad;
}

static uint64_t mono_ms(void)
{
	return procreg__mono_ns() / 1000000;
}

/* ---- the tables compared ----------------------------------------------- */

struct listing {
	char **v;
	size_t n, cap;
};

static void listing_add(struct listing *l, char *s)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 1024;
		l->v = realloc(l->v, l->cap * sizeof(*l->v));
		assert_non_null(l->v);
	}
	l->v[l->n++] = s;
}

static void listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

static int list_entry(const struct procreg_entry *e, void *arg)
{
	char *s;

	if (asprintf(&s, "%s %d %.*s", e->name, (int)e->pid, (int)e->meta_len,
		     (const char *)e->meta) < 0)
		return -ENOMEM;
	listing_add(arg, s);
	return 0;
}

struct group_walk {
	procreg_t *reg;
	struct listing *l;
};

static int list_member(const struct procreg_entry *e, void *arg)
{
	char *s;

	if (asprintf(&s, "member %s %d", e->name, (int)e->pid) < 0)
		return -ENOMEM;
	listing_add(arg, s);
	return 0;
}

static int list_group(const struct procreg_group *grp, void *arg)
{
	struct group_walk *g = arg;

	return procreg_members(g->reg, grp->name, list_member, g->l);
}

/* Everything REG shows: names (owner, metadata), members of each group;
 * sorted. */
static void table_of(procreg_t *reg, struct listing *l)
{
	struct group_walk g = { reg, l };

	assert_int_equal(procreg_foreach(reg, list_entry, l), 0);
	assert_int_equal(procreg_groups(reg, list_group, &g), 0);
	qsort(l->v, l->n, sizeof(*l->v), cmp_str);
}

/* Whether A and B show the same table; the first difference in WHY. */
static bool same_tables(procreg_t *a, procreg_t *b, char *why, size_t cap)
{
	struct listing la = { 0 }, lb = { 0 };
	bool same;
	size_t i;

	table_of(a, &la);
	table_of(b, &lb);
	for (i = 0; i < la.n && i < lb.n && !strcmp(la.v[i], lb.v[i]); i++)
		;
	same = i == la.n && i == lb.n;
	if (!same)
		snprintf(why, cap, "%zu entries on A, %zu on B; first difference: A '%s', B '%s'",
			 la.n, lb.n, i < la.n ? la.v[i] : "(end)", i < lb.n ? lb.v[i] : "(end)");
	listing_free(&la);
	listing_free(&lb);
	return same;
}

/* ---- 1: correct under churn ---------------------------------------------- */

#define CHURN_NAMES 100000
#define CHURN_GROUPS 300
#define CHURN_ROUNDS 3

/* A member of groups GROUP0.. (ARG: how many), with metadata, held. */
static int join_groups(procreg_t *r, void *arg)
{
	int n = *(int *)arg;
	char g[32];

	for (int i = 0; i < n; i++) {
		snprintf(g, sizeof(g), "grp%d", i);
		if (procreg_join(r, g, "m", 1) != 0)
			return -20;
	}
	return 'x';
}

/* The churn child: until *STOP, names churn0.. come and go (a few with
 * new metadata), and it joins and leaves groups, old and new; then its
 * state holds until it is killed. */
static void churn_main(const char *dir, volatile int *stop, volatile uint64_t *ops)
{
	procreg_t *r = th_open(dir);
	char name[32], meta[32];
	uint64_t i = 0;

	if (!r)
		_exit(10);
	while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
		unsigned k = (unsigned)(i * 7919 % 2000);

		snprintf(name, sizeof(name), "churn%u", k);
		snprintf(meta, sizeof(meta), "v%llu", (unsigned long long)i);
		if (i % 3 == 2)
			(void)procreg_unregister(r, name);
		else
			(void)procreg_register(r, name, meta, strlen(meta));
		snprintf(name, sizeof(name), "%s%u", i % 2 ? "grp" : "cgrp", (unsigned)(i % 400));
		if (i % 5 < 3)
			(void)procreg_join(r, name, NULL, 0);
		else
			(void)procreg_leave(r, name);
		__atomic_store_n(ops, ++i, __ATOMIC_RELEASE);
	}
	for (;;)
		pause();
}

/* The changes A's log says were made while its snapshots for B were
 * written, all together. */
static size_t changes_meanwhile(const char *path, int *snapshots)
{
	static const char line[] = "node snapb: snapshot written in";
	char *log = th_read_file(path, true), *at = log;
	size_t sum = 0, n;

	*snapshots = 0;
	while ((at = strstr(at, line))) {
		if (sscanf(at, "node snapb: snapshot written in %*u pieces, then %zu", &n) == 1)
			sum += n;
		at += sizeof(line) - 1;
		++*snapshots;
	}
	free(log);
	return sum;
}

static void test_snapshot_under_churn(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0], *b = &c->n[1];
	struct { int stop; uint64_t ops; } *sh;
	int groups = CHURN_GROUPS, half = CHURN_GROUPS / 2;
	pid_t member, churner;
	char st, why[512];
	size_t total = 0, meanwhile;
	int snapshots;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){
					       "--verbose", "--max-names-per-proc", "200000", NULL },
				       NULL), 0);
	th_register_bulk(a->reg, "name", CHURN_NAMES, "some metadata");
	assert_int_equal(join_groups(a->reg, &groups), 'x');
	member = th_spawn_holding(a->dir, join_groups, &half, &st);
	assert_int_equal(st, 'x');
	for (int round = 0; round < CHURN_ROUNDS; round++) {
		uint64_t ops0;
		const char *peer[] = { "--verbose", "--peer", a->listen, NULL };

		memset(sh, 0, sizeof(*sh));
		churner = fork();
		assert_true(churner >= 0);
		if (churner == 0)
			churn_main(a->dir, &sh->stop, &sh->ops);
		/* The churn under way, B comes up and takes the snapshot. */
		while (__atomic_load_n(&sh->ops, __ATOMIC_ACQUIRE) < 200)
			usleep(1000);
		ops0 = __atomic_load_n(&sh->ops, __ATOMIC_ACQUIRE);
		assert_int_equal(th_node_start(b, c->cookie, peer, NULL), 0);
		/* Its snapshot written (the round's: B's log goes on from the
		 * last round's). */
		for (uint64_t t0 = mono_ms(); (void)changes_meanwhile(a->d.log, &snapshots),
		     snapshots <= round;) {
			if (mono_ms() - t0 > WAIT_MS)
				fail_msg("round %d: no snapshot for B (log: %s)", round, a->d.log);
			usleep(1000);
		}
		/* And goes on a while after. */
		while (__atomic_load_n(&sh->ops, __ATOMIC_ACQUIRE) < ops0 + 2000)
			usleep(1000);
		__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
		assert_int_equal(procreg_sync(a->reg), 0);
		for (uint64_t t0 = mono_ms(); !same_tables(a->reg, b->reg, why, sizeof(why));) {
			if (mono_ms() - t0 > WAIT_MS)
				fail_msg("round %d: B's table is not A's: %s", round, why);
			usleep(20000);
		}
		meanwhile = changes_meanwhile(a->d.log, &snapshots);
		print_message("round %d: %llu changes on A while B came up, %zu of them while its "
			      "snapshot was written; B holds A's table\n", round,
			      (unsigned long long)sh->ops, meanwhile - total);
		total = meanwhile;
		kill(churner, SIGKILL);
		assert_int_equal(th_wait(churner), 128 + SIGKILL);
		procreg_close(b->reg);
		b->reg = NULL;
		assert_int_equal(th_daemon_stop(&b->d), 0);
	}
	kill(member, SIGKILL);
	th_wait(member);
	munmap(sh, sizeof(*sh));
	/* Or the test tried nothing. */
	if (!total)
		fail_msg("no change was made on A while a snapshot was written");
}

/* ---- 2: in pieces, clients answered between ------------------------------ */

#define PIECES_NAMES 200000

struct asker {
	procreg_t *reg;
	int go, stop;               /* atomic */
	uint64_t asked, max_us;
};

/* Registrations one after another until told to stop; the longest wait. */
static void *asker_main(void *arg)
{
	struct asker *k = arg;
	char name[32];

	while (!__atomic_load_n(&k->go, __ATOMIC_ACQUIRE))
		usleep(100);
	while (!__atomic_load_n(&k->stop, __ATOMIC_ACQUIRE)) {
		uint64_t t0 = procreg__mono_ns(), us;

		snprintf(name, sizeof(name), "during%llu", (unsigned long long)k->asked);
		if (procreg_register(k->reg, name, NULL, 0) != 0)
			break;
		us = (procreg__mono_ns() - t0) / 1000;
		if (us > k->max_us)
			k->max_us = us;
		k->asked++;
	}
	return NULL;
}

static void test_snapshot_in_pieces(void **state)
{
	struct cluster *c = *state;
	struct th_node *a = &c->n[0];
	static struct th_peer p;
	struct asker k = { 0 };
	struct pr_bp_frame f;
	pthread_t t;
	unsigned parts = 0, changes = 0, pieces = 0;
	size_t after = 0;
	char *log, *at;

	assert_int_equal(th_node_start(a, c->cookie, (const char *const[]){
					       "--verbose", "--max-names-per-proc", "400000", NULL },
				       NULL), 0);
	th_register_bulk(a->reg, "name", PIECES_NAMES, "");
	k.reg = th_open(a->dir);
	assert_non_null(k.reg);
	assert_int_equal(pthread_create(&t, NULL, asker_main, &k), 0);
	__atomic_store_n(&k.go, 1, __ATOMIC_RELEASE);
	assert_int_equal(th_peer_connect(&p, a->listen, "fake", 7, COOKIE), 0);
	for (;;) {
		assert_int_equal(th_peer_next(&p, &f), 0);
		if (f.type != PR_BP_SNAP)
			continue;
		parts++;
		if (f.flags & PR_BP_SNAP_LAST)
			break;
	}
	__atomic_store_n(&k.stop, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	print_message("snapshot of %d names: %u parts; %llu registrations meanwhile, the longest "
		      "waited %llu us\n", PIECES_NAMES, parts, (unsigned long long)k.asked,
		      (unsigned long long)k.max_us);
	th_expect_log(a->d.log, "snapshot for node fake:", WAIT_MS);
	th_expect_log(a->d.log, "node fake: snapshot written in", WAIT_MS);
	log = th_read_file(a->d.log, true);
	assert_non_null(log);
	at = strstr(log, "snapshot for node fake:");
	assert_true(sscanf(at, "snapshot for node fake: %*u entries in %u pieces", &pieces) == 1);
	at = strstr(log, "node fake: snapshot written in");
	assert_true(sscanf(at, "node fake: snapshot written in %*u pieces, then %zu changes", &after) ==
		    1);
	/* The changes after it come: a heartbeat counts them. */
	for (;;) {
		assert_int_equal(th_peer_next(&p, &f), 0);
		if (f.type == PR_BP_CHANGE)
			changes++;
		if (f.type == PR_BP_HEARTBEAT && f.seq >= PIECES_NAMES + k.asked)
			break;
	}
	print_message("written in %u pieces, %zu changes made meanwhile after it, %u changes "
		      "read\n", pieces, after, changes);
	if (pieces < 2)
		fail_msg("the snapshot was written in %u piece", pieces);
	if (!after)
		fail_msg("no local change was made while the snapshot was written, in %u pieces "
			 "(%llu registrations asked meanwhile)", pieces, (unsigned long long)k.asked);
	free(log);
	procreg_close(k.reg);
	th_peer_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_snapshot_in_pieces, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_under_churn, setup, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
