/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_hlc.c - the hybrid logical clock of replication stamps (lib/hlc.h).
 */
#include <errno.h>
#include <stdint.h>

#include "harness.h"
#include "hlc.h"

#define S 1000000000ull

static void test_follows_wall_clock(void **state)
{
	struct pr_hlc h = { 0 };

	(void)state;
	assert_int_equal(pr_hlc_now(&h, 100 * S), 100 * S);
	assert_int_equal(pr_hlc_now(&h, 101 * S), 101 * S);
}

static void test_monotonic_when_clock_steps_back(void **state)
{
	struct pr_hlc h = { 0 };
	uint64_t a = pr_hlc_now(&h, 100 * S), b = pr_hlc_now(&h, 90 * S), c = pr_hlc_now(&h, 90 * S);

	(void)state;
	assert_true(a < b && b < c);
	assert_true(c - a < 10); /* the logical part, not the wall clock */
}

/* What b stamps after hearing from a is after a's stamp, though b's clock
 * is 5 s behind. */
static void test_causality_across_skew(void **state)
{
	struct pr_hlc a = { 0 }, b = { 0 };
	uint64_t ta = pr_hlc_now(&a, 100 * S), tb;

	(void)state;
	assert_int_equal(pr_hlc_observe(&b, ta, 95 * S, 60 * S), 0);
	tb = pr_hlc_now(&b, 95 * S);
	assert_true(tb > ta);
	/* Once b's wall clock passes, it stamps by wall clock again. */
	assert_int_equal(pr_hlc_now(&b, 200 * S), 200 * S);
}

static void test_far_future_not_observed(void **state)
{
	struct pr_hlc h = { 0 };

	(void)state;
	pr_hlc_now(&h, 100 * S);
	assert_int_equal(pr_hlc_observe(&h, 1000 * S, 100 * S, 60 * S), -ERANGE);
	assert_true(pr_hlc_now(&h, 100 * S) < 101 * S);
	/* Behind us: nothing changes. */
	assert_int_equal(pr_hlc_observe(&h, 50 * S, 100 * S, 60 * S), 0);
	assert_true(pr_hlc_now(&h, 100 * S) < 101 * S);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_follows_wall_clock),
		cmocka_unit_test(test_monotonic_when_clock_steps_back),
		cmocka_unit_test(test_causality_across_skew),
		cmocka_unit_test(test_far_future_not_observed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
