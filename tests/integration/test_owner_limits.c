/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_owner_limits.c - places in owner queues and leases, which the
 * daemon keeps outside the table, are bounded: per uid for places
 * (--max-places-per-uid, EDQUOT), and for all uids together (--max-places,
 * --max-leases, ENOSPC), the last 1/32 of each kept for root.
 *
 * Needs root: the tenants are accounts the test creates (th_user_new).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define MAX_PLACES 64
#define PLACES_PER_UID 40
#define MAX_LEASES 64
#define KEPT (64 / 32)         /* for root, of each */
#define HOUR 3600000

struct fx {
	struct th_fx *fx;
	struct th_user u1, u2;
};

static int setup(void **state)
{
	static const char *const args[] = { "--max-places", "64", "--max-places-per-uid", "40",
					    "--max-leases", "64", NULL };
	struct fx *f = calloc(1, sizeof(*f));
	void *inner = NULL;

	if (geteuid() != 0)
		fail_msg("this test needs root, to create users (CI runs as root)");
	if (th_fx_start(&inner, args, NULL))
		return -1;
	f->fx = inner;
	th_user_new(&f->u1);
	th_user_new(&f->u2);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	void *inner = f->fx;

	th_user_del(&f->u1);
	th_user_del(&f->u2);
	free(f);
	return th_fx_stop(&inner);
}

static int queue_for(procreg_t *reg, int i)
{
	PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_QUEUE);
	char name[32];

	snprintf(name, sizeof(name), "c.%d", i);
	return procreg_register_opts(reg, name, "w", 1, &o);
}

static int lease(procreg_t *reg, const char *prefix, int i, uint32_t lease_ms)
{
	PROCREG_OPTS(procreg_register_opts, o, .lease_ms = lease_ms);
	char name[32];

	snprintf(name, sizeof(name), "%s.%d", prefix, i);
	return procreg_register_opts(reg, name, NULL, 0, &o);
}

/* What a process in line does (queues for names c.FIRST.. as USER, or as
 * root if USER is NULL), then holds until let go. */
struct liner {
	const char *dir;
	const struct th_user *u;
	int first, n;          /* these are granted places... */
	int refused;           /* ...and the next is refused with this */
};

static int line_up(void *arg, int phase)
{
	static procreg_t *reg;
	const struct liner *a = arg;

	if (phase)
		return 0;
	if (a->u)
		th_become(a->u);
	reg = th_open(a->dir);
	if (!reg)
		return 1;
	for (int i = a->first; i < a->first + a->n; i++)
		if (queue_for(reg, i) != -EINPROGRESS)
			return 2;
	if (queue_for(reg, a->first + a->n) != a->refused)
		return 3;
	/* Asking again keeps a place: no new one. */
	if (queue_for(reg, a->first) != -EINPROGRESS)
		return 4;
	return 0;
}

/* One more place for U (another process of it), for name c.I: RESULT. */
struct one_more {
	const char *dir;
	const struct th_user *u;
	int i, want;
};

static int one_more(void *arg)
{
	const struct one_more *a = arg;
	procreg_t *reg;
	int err;

	th_become(a->u);
	reg = th_open(a->dir);
	if (!reg)
		return 1;
	err = queue_for(reg, a->i);
	if (err != a->want) {
		fprintf(stderr, "c.%d: %s, want %s\n", a->i, strerror(-err), strerror(-a->want));
		return 2;
	}
	procreg_close(reg);
	return 0;
}

static void test_places_bounded(void **state)
{
	struct fx *f = *state;
	const char *dir = f->fx->dir;
	/* U1 up to its own limit; U2 up to the others' share of the total. */
	struct liner l1 = { dir, &f->u1, 0, PLACES_PER_UID, -EDQUOT };
	struct liner l2 = { dir, &f->u2, 100, MAX_PLACES - KEPT - PLACES_PER_UID, -ENOSPC };
	/* Then root, into what is kept for it, once a place has gone. */
	struct liner lr = { dir, NULL, 200, KEPT + 1, -ENOSPC };
	struct one_more m;
	struct th_held h;
	TH_ENTRY(e);
	pid_t first;

	for (int i = 0; i < 300; i++) {
		char name[32];

		snprintf(name, sizeof(name), "c.%d", i);
		assert_int_equal(procreg_register(f->fx->reg, name, NULL, 0), 0);
	}
	th_held_init(&h);
	first = th_held_start(&h, line_up, &l1);
	th_held_ready(&h, 30000);
	th_held_start(&h, line_up, &l2);
	th_held_ready(&h, 30000);
	/* Another process of U1: the limit is the uid's. Of U2: the
	 * total's. */
	m = (struct one_more){ dir, &f->u1, 250, -EDQUOT };
	assert_int_equal(th_wait(th_fork(one_more, &m)), 0);
	m = (struct one_more){ dir, &f->u2, 250, -ENOSPC };
	assert_int_equal(th_wait(th_fork(one_more, &m)), 0);
	/* A place handed its name is given back: one more for the others
	 * (while that process lives). */
	assert_int_equal(procreg_unregister(f->fx->reg, "c.0"), 0);
	assert_int_equal(procreg_sync(f->fx->reg), 0);
	assert_int_equal(procreg_lookup(f->fx->reg, "c.0", &e), 0);
	assert_int_equal(e.pid, first);
	m = (struct one_more){ dir, &f->u2, 251, -EINPROGRESS };
	assert_int_equal(th_wait(th_fork(one_more, &m)), 0);
	assert_int_equal(procreg_sync(f->fx->reg), 0);
	/* Root takes the rest, the part kept for it included. */
	th_held_start(&h, line_up, &lr);
	th_held_ready(&h, 30000);
	assert_int_equal(th_held_release(&h), 0);
	/* All gone with their processes: room again. */
	assert_int_equal(procreg_sync(f->fx->reg), 0);
	m = (struct one_more){ dir, &f->u2, 253, -EINPROGRESS };
	assert_int_equal(th_wait(th_fork(one_more, &m)), 0);
	assert_true(th_log_count(f->fx->d.log, "place in line refused (ENOSPC)") >= 1);
}

/* As U: leases up to the others' share of --max-leases, and what is
 * still allowed past it. Held until let go. */
static int lease_up(void *arg, int phase)
{
	static procreg_t *reg;
	const struct liner *a = arg;
	PROCREG_OPTS(procreg_join_opts, jo, .lease_ms = HOUR);

	if (phase)
		return 0;
	th_become(a->u);
	reg = th_open(a->dir);
	if (!reg)
		return 1;
	for (int i = 0; i < a->n; i++)
		if (lease(reg, "l", i, HOUR) != 0)
			return 2;
	/* No new lease, of a name or of a membership... */
	if (lease(reg, "l", a->n, HOUR) != -ENOSPC)
		return 3;
	if (procreg_join_opts(reg, "g", NULL, 0, &jo) != -ENOSPC)
		return 4;
	/* ...but the same name without one, a lease set again, a renewal. */
	if (lease(reg, "l", a->n, 0) != 0 || procreg_join(reg, "g", NULL, 0) != 0)
		return 5;
	if (lease(reg, "l", 0, 2 * HOUR) != 0 || procreg_refresh(reg, "l.1") != 0)
		return 6;
	/* A lease let go is room for another. */
	if (procreg_unregister(reg, "l.0") != 0 || lease(reg, "l", a->n + 1, HOUR) != 0)
		return 7;
	if (lease(reg, "l", a->n + 2, HOUR) != -ENOSPC)
		return 8;
	return 0;
}

static void test_leases_bounded(void **state)
{
	struct fx *f = *state;
	struct liner a = { f->fx->dir, &f->u1, 0, MAX_LEASES - KEPT, 0 };
	struct th_held h;

	th_held_init(&h);
	th_held_start(&h, lease_up, &a);
	th_held_ready(&h, 30000);
	/* Root has what was kept, and no more. */
	for (int i = 0; i < KEPT; i++)
		assert_int_equal(lease(f->fx->reg, "root", i, HOUR), 0);
	assert_int_equal(lease(f->fx->reg, "root", KEPT, HOUR), -ENOSPC);
	assert_int_equal(lease(f->fx->reg, "root", 0, HOUR), 0);
	assert_int_equal(th_held_release(&h), 0);
	assert_int_equal(procreg_sync(f->fx->reg), 0);
	/* U1's leases went with its names. */
	assert_int_equal(lease(f->fx->reg, "root", KEPT, HOUR), 0);
	assert_true(th_log_count(f->fx->d.log, "lease refused (ENOSPC)") >= 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_places_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_leases_bounded, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
