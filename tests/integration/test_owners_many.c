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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_many_leases_by_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_queues, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
