/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_owners_many.c - queues and leases by the thousand: each still
 * found by its own key (a name's lease, a membership's, a name's queue),
 * restored after a restart, and handed over to the right process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define fx th_fx

static int setup(void **state)
{
	return th_fx_start(state, NULL, NULL);
}

/* Room for one uid's HOG_LONG + HOG_SHORT leases (above the default
 * --max-leases-per-uid). */
static int setup_hog(void **state)
{
	return th_fx_start(state, (const char *const[]){ "--max-leases-per-uid", "65536", NULL },
			   NULL);
}

static int teardown(void **state)
{
	return th_fx_stop(state);
}

static void restart(struct fx *f)
{
	th_daemon_kill(&f->d);
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
}

/* N operations of KIND on names PREFIX.i (FIRST <= i < FIRST + N, every
 * STEP-th), each with LEASE_MS and FLAGS, in batches; each result must
 * be WANT. */
static void batch(procreg_t *reg, int kind, const char *prefix, int first, int n, int step,
		  uint32_t lease_ms, unsigned flags, int want)
{
	enum { CHUNK = 256 };
	static struct procreg_op ops[CHUNK];
	static char names[CHUNK][48];
	int i = first, end = first + n;

	while (i < end) {
		size_t m = 0;

		for (; i < end && m < CHUNK; i += step, m++) {
			snprintf(names[m], sizeof(names[m]), "%s.%d", prefix, i);
			ops[m] = (struct procreg_op){ .sz = sizeof(ops[m]), .kind = kind,
						     .name = names[m], .lease_ms = lease_ms,
						     .flags = flags, .result = 99 };
		}
		assert_int_equal(procreg_batch(reg, ops, m), 0);
		for (size_t j = 0; j < m; j++)
			if (ops[j].result != want)
				fail_msg("%s: %d, want %d", names[j], ops[j].result, want);
	}
}

static int refresh_i(procreg_t *reg, const char *prefix, int i)
{
	char name[48];

	snprintf(name, sizeof(name), "%s.%d", prefix, i);
	return procreg_refresh(reg, name);
}

#define HOUR 3600000
#define NLEASES 4000

/* The refresh of N.I as the leases set below say: a name leased (I
 * even) or a membership leased (I a multiple of 4) is renewed; a name
 * held without a lease is not leased (-EINVAL). */
static void check_refresh(procreg_t *reg, bool names)
{
	for (int i = 0; i < NLEASES; i++) {
		int want = i % 4 == 0 ? 0 : !names ? -ENOENT : i % 2 == 0 ? 0 : -EINVAL;

		if (refresh_i(reg, "n", i) != want)
			fail_msg("refresh n.%d: %d, want %d", i, refresh_i(reg, "n", i), want);
	}
}

/* Thousands of leases of names and of memberships spelled alike: each is
 * its own, before and after a restart, and goes with what it leases. */
static void test_many_leases_by_key(void **state)
{
	struct fx *f = *state;
	TH_ENTRY(e);

	/* Names n.i, every other one leased; memberships of groups n.i, one
	 * in four leased. */
	batch(f->reg, PROCREG_OP_REGISTER, "n", 0, NLEASES, 2, HOUR, 0, 0);
	batch(f->reg, PROCREG_OP_REGISTER, "n", 1, NLEASES - 1, 2, 0, 0, 0);
	batch(f->reg, PROCREG_OP_JOIN, "n", 0, NLEASES, 4, HOUR, 0, 0);
	check_refresh(f->reg, true);
	assert_int_equal(procreg_lookup(f->reg, "n.2", &e), 0);
	assert_true(e.flags & PROCREG_ENTRY_LEASED);
	assert_int_equal(procreg_lookup(f->reg, "n.3", &e), 0);
	assert_false(e.flags & PROCREG_ENTRY_LEASED);

	/* The journal brings every one of them back. */
	restart(f);
	check_refresh(f->reg, true);

	/* Registering again without a lease drops the name's, not the
	 * membership's; with one, it leases a name that had none. */
	batch(f->reg, PROCREG_OP_REGISTER, "n", 0, NLEASES, 2, 0, 0, 0);
	batch(f->reg, PROCREG_OP_REGISTER, "n", 1, NLEASES - 1, 2, HOUR, 0, 0);
	for (int i = 0; i < NLEASES; i++) {
		int want = i % 4 == 0 ? 0 : i % 2 ? 0 : -EINVAL;

		assert_int_equal(refresh_i(f->reg, "n", i), want);
	}
	/* Gone, their leases go too; the memberships' stay. */
	batch(f->reg, PROCREG_OP_UNREGISTER, "n", 0, NLEASES, 1, 0, 0, 0);
	check_refresh(f->reg, false);
	restart(f);
	check_refresh(f->reg, false);
	batch(f->reg, PROCREG_OP_LEAVE, "n", 0, NLEASES, 4, 0, 0, 0);
	for (int i = 0; i < NLEASES; i += 4)
		assert_int_equal(refresh_i(f->reg, "n", i), -ENOENT);
}

/* ---- deadlines ---------------------------------------------------------- */

/* The next event about a name starting with PREFIX, waiting up to 30 s. */
static struct procreg_event next_of(procreg_t *reg, uint64_t *cur, const char *prefix)
{
	PROCREG_OPTS(procreg_event, ev);

	for (;;) {
		assert_int_equal(procreg_next_event(reg, cur, &ev, 30000), 0);
		if (!strncmp(ev.name, prefix, strlen(prefix)))
			return ev;
	}
}

#define NLONG 3000
#define NSHORT 16
#define SHORT_MS(k) (500 + 100 * (uint32_t)(k))

/*
 * Short leases among thousands of long ones, set in a shuffled order,
 * some of them shortened from an hour, some marked: they run out in the
 * order of their deadlines, each once, and no long one does; a marked
 * one refreshed runs out again.
 */
static void test_expiry_order(void **state)
{
	struct fx *f = *state;
	const size_t sz = sizeof(struct procreg_op);
	struct procreg_op ops[NSHORT];
	char names[NSHORT][32];
	int order[NSHORT], seen = 0;
	uint64_t seed = 0x9e3779b97f4a7c15ull, cur;
	TH_ENTRY(e);

	for (int k = 0; k < NSHORT; k++)
		order[k] = k;
	for (int k = NSHORT - 1; k > 0; k--) {
		int j = (int)(th_xorshift(&seed) % (uint64_t)(k + 1)), t = order[k];

		order[k] = order[j];
		order[j] = t;
	}
	/* The long ones, and half the short ones first with an hour too
	 * (their deadlines come closer below); every seventh long one
	 * renewed for two hours, every eleventh let go. */
	batch(f->reg, PROCREG_OP_REGISTER, "long", 0, NLONG, 1, HOUR, 0, 0);
	batch(f->reg, PROCREG_OP_REGISTER, "short", 0, NSHORT, 2, HOUR, 0, 0);
	batch(f->reg, PROCREG_OP_REGISTER, "long", 0, NLONG, 7, 2 * HOUR, 0, 0);
	batch(f->reg, PROCREG_OP_UNREGISTER, "long", 0, NLONG, 11, 0, 0, 0);
	cur = procreg_feed_head(f->reg);
	for (int i = 0; i < NSHORT; i++) {
		int k = order[i];

		snprintf(names[i], sizeof(names[i]), "short.%d", k);
		ops[i] = (struct procreg_op){ .sz = sz, .kind = PROCREG_OP_REGISTER, .name = names[i],
					     .lease_ms = SHORT_MS(k),
					     .flags = k % 3 == 0 ? PROCREG_LEASE_MARK : 0, .result = 99 };
	}
	assert_int_equal(procreg_batch(f->reg, ops, NSHORT), 0);
	for (int i = 0; i < NSHORT; i++)
		assert_int_equal(ops[i].result, 0);
	while (seen < NSHORT) {
		struct procreg_event ev = next_of(f->reg, &cur, "short.");
		char want[32];

		if (ev.type == PROCREG_EV_REGISTERED || ev.type == PROCREG_EV_UPDATED)
			continue;
		snprintf(want, sizeof(want), "short.%d", seen);
		if (ev.type != PROCREG_EV_EXPIRED || strcmp(ev.name, want))
			fail_msg("event %d about %s, want EXPIRED about %s", ev.type, ev.name, want);
		seen++;
	}
	for (int k = 0; k < NSHORT; k++) {
		char name[32];

		snprintf(name, sizeof(name), "short.%d", k);
		if (k % 3) {
			assert_int_equal(procreg_lookup(f->reg, name, NULL), -ENOENT);
			continue;
		}
		assert_int_equal(procreg_lookup(f->reg, name, &e), 0);
		assert_true(e.flags & PROCREG_ENTRY_UNHEALTHY);
	}
	/* Refreshed, a marked lease runs again, and out again. */
	assert_int_equal(procreg_refresh(f->reg, "short.0"), 0);
	assert_int_equal(procreg_lookup(f->reg, "short.0", &e), 0);
	assert_false(e.flags & PROCREG_ENTRY_UNHEALTHY);
	{
		struct procreg_event ev = next_of(f->reg, &cur, "short.0");

		assert_int_equal(ev.type, PROCREG_EV_REFRESHED);
		ev = next_of(f->reg, &cur, "short.0");
		assert_int_equal(ev.type, PROCREG_EV_EXPIRED);
	}
	/* No long one ran out: all there but those let go. */
	for (int i = 0; i < NLONG; i++) {
		char name[32];

		snprintf(name, sizeof(name), "long.%d", i);
		assert_int_equal(procreg_lookup(f->reg, name, NULL), i % 11 ? 0 : -ENOENT);
	}
}

#define NTOGETHER 3000

/* Thousands of leases that run out together (more than one tick takes
 * on): every one of them runs out, once, and nothing else. */
static void test_many_expire_together(void **state)
{
	struct fx *f = *state;
	uint64_t cur = procreg_feed_head(f->reg);
	static bool seen[NTOGETHER];
	int n = 0;

	batch(f->reg, PROCREG_OP_REGISTER, "keep", 0, 100, 1, HOUR, 0, 0);
	batch(f->reg, PROCREG_OP_REGISTER, "t", 0, NTOGETHER, 1, 200, 0, 0);
	while (n < NTOGETHER) {
		struct procreg_event ev = next_of(f->reg, &cur, "t.");
		int i = atoi(ev.name + 2);

		if (ev.type == PROCREG_EV_REGISTERED)
			continue;
		assert_int_equal(ev.type, PROCREG_EV_EXPIRED);
		assert_true(i >= 0 && i < NTOGETHER);
		assert_false(seen[i]);
		seen[i] = true;
		n++;
	}
	for (int i = 0; i < NTOGETHER; i++) {
		char name[32];

		snprintf(name, sizeof(name), "t.%d", i);
		assert_int_equal(procreg_lookup(f->reg, name, NULL), -ENOENT);
	}
	for (int i = 0; i < 100; i++) {
		char name[32];

		snprintf(name, sizeof(name), "keep.%d", i);
		assert_int_equal(procreg_lookup(f->reg, name, NULL), 0);
	}
}

/* ---- another uid's many leases ------------------------------------------- */

/* Within --max-names-per-proc (65536). */
#define HOG_LONG 32000
#define HOG_SHORT 32000
#define HOG_SHORT_MS 3000

struct hog {
	const struct th_user *u;
	const char *dir;
};

/* N names PREFIX.i leased for LEASE_MS, in batches: 0, or 1 (said why). */
static int hog_register(procreg_t *reg, const char *prefix, int n, uint32_t lease_ms)
{
	enum { CHUNK = 512 };
	static struct procreg_op ops[CHUNK];
	static char names[CHUNK][48];

	for (int i = 0; i < n; i += CHUNK) {
		int m = n - i < CHUNK ? n - i : CHUNK;

		for (int j = 0; j < m; j++) {
			snprintf(names[j], sizeof(names[j]), "%s.%d", prefix, i + j);
			ops[j] = (struct procreg_op){ .sz = sizeof(ops[j]), .kind = PROCREG_OP_REGISTER,
						     .name = names[j], .lease_ms = lease_ms };
		}
		if (procreg_batch(reg, ops, (size_t)m) < 0)
			return 1;
		for (int j = 0; j < m; j++) {
			if (ops[j].result) {
				fprintf(stderr, "hog: %s: %s\n", names[j], strerror(-ops[j].result));
				return 1;
			}
		}
	}
	return 0;
}

static int lease_hog(void *arg, int phase)
{
	static procreg_t *reg;
	const struct hog *a = arg;

	if (phase)
		return 0; /* its names go with it */
	th_become(a->u);
	reg = th_open(a->dir);
	if (!reg)
		return 1;
	if (hog_register(reg, "hog.long", HOG_LONG, HOUR) ||
	    hog_register(reg, "hog.short", HOG_SHORT, HOG_SHORT_MS))
		return 2;
	return 0;
}

/*
 * An unprivileged uid holds 64,000 leased names, half of which run out
 * meanwhile: another client's requests are all answered within its
 * timeout. (Before, each registration without a lease and each removal
 * walked every lease, and the expiry of each short lease walked the long
 * ones again: the victim's requests waited seconds.)
 */
static void test_many_leases_other_uid(void **state)
{
	struct fx *f = *state;
	struct th_user u;
	struct hog a = { &u, f->dir };
	PROCREG_OPTS(procreg_opts, vo, .dir = f->dir, .timeout_ms = 20000);
	PROCREG_OPTS(procreg_register_opts, lo, .lease_ms = HOUR);
	procreg_t *victim;
	struct th_held h;
	int rounds = 0;

	if (geteuid() != 0)
		fail_msg("this test needs root, to create a user (CI runs as root)");
	th_user_new(&u);
	victim = procreg_open(&vo);
	assert_non_null(victim);
	th_held_init(&h);
	th_held_start(&h, lease_hog, &a);
	th_held_ready(&h, 120000);
	/* Until the short leases have run out, and a while after. */
	for (int after = 0; after < 200; rounds++) {
		char name[32];

		snprintf(name, sizeof(name), "victim.%d", rounds);
		assert_int_equal(procreg_register(victim, name, "v", 1), 0);
		assert_int_equal(procreg_unregister(victim, name), 0);
		assert_int_equal(procreg_register_opts(victim, "victim.leased", NULL, 0, &lo), 0);
		assert_int_equal(procreg_refresh(victim, "victim.leased"), 0);
		if (procreg_lookup(victim, "hog.short.0", NULL) == -ENOENT &&
		    procreg_lookup(victim, "hog.short.31999", NULL) == -ENOENT)
			after++;
		else
			th_msleep(1);
	}
	assert_true(rounds > 200);
	assert_int_equal(procreg_lookup(victim, "hog.long.0", NULL), 0);
	assert_int_equal(procreg_lookup(victim, "hog.long.31999", NULL), 0);
	assert_int_equal(th_held_release(&h), 0);
	/* Its names leave at its uid's feed pace, which root's sync does
	 * not wait for: they are gone within a second or so. */
	for (int i = 0; procreg_lookup(victim, "hog.long.0", NULL) == 0 ||
			procreg_lookup(victim, "hog.long.31999", NULL) == 0; i++) {
		if (i > 60000)
			fail_msg("the dead hog's leased names still there after 60 s");
		th_msleep(1);
	}
	procreg_close(victim);
	th_user_del(&u);
}

/* ---- queues ------------------------------------------------------------- */

#define NQUEUES 2000

struct waiter_arg {
	const char *dir;
	const char *prefix;
	int first, n;
};

/* In line for N names PREFIX.FIRST.., held while the test looks. */
static int wait_in_line(void *arg, int phase)
{
	static procreg_t *reg;
	const struct waiter_arg *a = arg;

	if (phase)
		return 0;
	reg = th_open(a->dir);
	if (!reg)
		return 1;
	batch(reg, PROCREG_OP_REGISTER, a->prefix, a->first, a->n, 1, 0, PROCREG_QUEUE,
	      -EINPROGRESS);
	return 0;
}

static void owner_is(procreg_t *reg, const char *prefix, int i, pid_t pid)
{
	char name[48];
	TH_ENTRY(e);

	snprintf(name, sizeof(name), "%s.%d", prefix, i);
	assert_int_equal(procreg_sync(reg), 0);
	if (procreg_lookup(reg, name, &e) != 0)
		fail_msg("%s: not registered, want pid %d's", name, (int)pid);
	if (e.pid != pid)
		fail_msg("%s: pid %d's, want pid %d's", name, (int)e.pid, (int)pid);
}

/* Two processes in line for thousands of names each, one line per name:
 * each name, let go, goes to the first in its own line; after a restart,
 * the lines are still there. */
static void test_many_queues(void **state)
{
	struct fx *f = *state;
	struct waiter_arg a = { f->dir, "q", 0, NQUEUES }, b = { f->dir, "q", NQUEUES / 2, NQUEUES };
	struct th_held h;
	pid_t first, second;

	batch(f->reg, PROCREG_OP_REGISTER, "q", 0, 2 * NQUEUES, 1, 0, 0, 0);
	th_held_init(&h);
	first = th_held_start(&h, wait_in_line, &a);
	th_held_ready(&h, 60000);
	second = th_held_start(&h, wait_in_line, &b);
	th_held_ready(&h, 60000);
	restart(f);

	/* Let go in a batch: each name to the first of its line. */
	batch(f->reg, PROCREG_OP_UNREGISTER, "q", 0, 2 * NQUEUES, 1, 0, 0, 0);
	for (int i = 0; i < NQUEUES; i++)
		owner_is(f->reg, "q", i, first);
	for (int i = NQUEUES; i < NQUEUES * 3 / 2; i++)
		owner_is(f->reg, "q", i, second);
	/* The second is still in line where the first was: it gets those
	 * when the first lets them go. */
	for (int i = NQUEUES / 2; i < NQUEUES; i += 97) {
		char name[48];

		snprintf(name, sizeof(name), "q.%d", i);
		assert_int_equal(procreg_unregister(f->reg, name), 0);
		owner_is(f->reg, "q", i, second);
	}
	assert_int_equal(th_held_release(&h), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
}

/* A process in line for names PREFIX.i (FIRST <= i < FIRST + N, every
 * STEP-th), alive until killed: its pid, once it is in every line. */
static pid_t in_line(const char *dir, const char *prefix, int first, int n, int step)
{
	int p[2];
	char c;
	pid_t pid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		procreg_t *reg = th_open(dir);

		close(p[0]);
		if (!reg)
			_exit(1);
		/* Asking twice keeps one place in each line. */
		for (int k = 0; k < 2; k++)
			batch(reg, PROCREG_OP_REGISTER, prefix, first, n, step, 0, PROCREG_QUEUE,
			      -EINPROGRESS);
		(void)!write(p[1], "r", 1);
		for (;;)
			pause();
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

static void kill_wait(procreg_t *reg, pid_t *pid)
{
	th_kill_wait(pid);
	assert_int_equal(procreg_sync(reg), 0);
}

#define NDEATH 1500

/*
 * Three processes in line for the same thousands of names, one line per
 * name: the one in the middle dies (it leaves every line, the others
 * keep their places), the first is handed every name, then dies too: its
 * names go on to the last, and those the last did not wait for to
 * nobody. Then nobody waits for anything. The middle one dies while no
 * daemon runs: the next one, reading the journal back, drops its places
 * and keeps the others' in their order.
 */
static void test_handover_after_death(void **state)
{
	struct fx *f = *state;
	pid_t a, b, c;

	batch(f->reg, PROCREG_OP_REGISTER, "d", 0, NDEATH, 1, 0, 0, 0);
	a = in_line(f->dir, "d", 0, NDEATH, 1);
	b = in_line(f->dir, "d", 0, NDEATH, 1);
	c = in_line(f->dir, "d", 0, NDEATH, 2);
	th_daemon_kill(&f->d);
	th_kill_wait(&b);
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
	batch(f->reg, PROCREG_OP_UNREGISTER, "d", 0, NDEATH, 1, 0, 0, 0);
	for (int i = 0; i < NDEATH; i++)
		owner_is(f->reg, "d", i, a);
	kill_wait(f->reg, &a);
	for (int i = 0; i < NDEATH; i++) {
		char name[48];

		if (i % 2 == 0) {
			owner_is(f->reg, "d", i, c);
			continue;
		}
		snprintf(name, sizeof(name), "d.%d", i);
		assert_int_equal(procreg_lookup(f->reg, name, NULL), -ENOENT);
	}
	kill_wait(f->reg, &c);
	/* No place left anywhere: a name let go goes to nobody. */
	batch(f->reg, PROCREG_OP_REGISTER, "d", 0, NDEATH, 1, 0, 0, 0);
	batch(f->reg, PROCREG_OP_UNREGISTER, "d", 0, NDEATH, 1, 0, 0, 0);
	for (int i = 0; i < NDEATH; i++) {
		char name[48];

		snprintf(name, sizeof(name), "d.%d", i);
		assert_int_equal(procreg_lookup(f->reg, name, NULL), -ENOENT);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_many_leases_by_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_queues, setup, teardown),
		cmocka_unit_test_setup_teardown(test_handover_after_death, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expiry_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_expire_together, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_leases_other_uid, setup_hog, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
