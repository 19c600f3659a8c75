/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_owner_limits.c - places in owner queues and leases, which the
 * daemon keeps outside the table, are bounded: per uid (--max-places-per-uid,
 * --max-leases-per-uid, EDQUOT), and for all uids together (--max-places,
 * --max-leases, ENOSPC), the last 1/32 of each kept for root. A place
 * in line that asks for a lease counts as one from the time it is queued.
 * A hand-over refused (the process next in line is at a limit of its
 * own) is logged, but no more than a line a second: any user can make
 * as many as it likes.
 *
 * Needs root: the tenants are accounts the test creates (th_user_new).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* A daemon with ARGS, two users. */
static int setup_args(void **state, const char *const *args)
{
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

static int setup(void **state)
{
	return setup_args(state, (const char *const[]){ "--max-places", "64",
		"--max-places-per-uid", "40", "--max-leases", "64", NULL });
}

#define LEASES_PER_UID 20

static int setup_lease_quota(void **state)
{
	return setup_args(state, (const char *const[]){ "--max-leases", "64",
		"--max-leases-per-uid", "20", NULL });
}

/* One name a process: a process in line that holds one is at its limit. */
static int setup_one_name(void **state)
{
	return setup_args(state, (const char *const[]){ "--max-names-per-proc", "1", NULL });
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

/* One more place for U (another process of it), for name c.I, or with
 * LEASE one more lease, for name one.I: RESULT. */
struct one_more {
	const char *dir;
	const struct th_user *u;
	int i, want;
	bool lease;
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
	err = a->lease ? lease(reg, "one", a->i, HOUR) : queue_for(reg, a->i);
	if (err != a->want) {
		fprintf(stderr, "%s.%d: %s, want %s\n", a->lease ? "one" : "c", a->i,
			strerror(-err), strerror(-a->want));
		return 2;
	}
	procreg_close(reg);
	return 0;
}

/* Root holds c.0 .. c.N-1: names to queue for. */
static void root_names(struct fx *f, int n)
{
	for (int i = 0; i < n; i++) {
		char name[32];

		snprintf(name, sizeof(name), "c.%d", i);
		assert_int_equal(procreg_register(f->fx->reg, name, NULL, 0), 0);
	}
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

	root_names(f, 300);
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

/* ---- leases per uid ----------------------------------------------------- */

static int queue_leased(procreg_t *reg, const char *name, uint32_t lease_ms)
{
	PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_QUEUE, .lease_ms = lease_ms);

	return procreg_register_opts(reg, name, NULL, 0, &o);
}

/* As U: leases up to its own limit, the last a place in line that asks
 * for one; what is refused past it, and what is still allowed. Held
 * until let go; then a lease given back is room for another. */
static int lease_quota(void *arg, int phase)
{
	static procreg_t *reg;
	const struct liner *a = arg;
	PROCREG_OPTS(procreg_join_opts, jo, .lease_ms = HOUR);

	if (phase) {
		if (procreg_unregister(reg, "q.0") != 0 || lease(reg, "q", a->n, HOUR) != 0)
			return 20;
		return lease(reg, "q", a->n + 1, HOUR) == -EDQUOT ? 0 : 21;
	}
	th_become(a->u);
	reg = th_open(a->dir);
	if (!reg)
		return 1;
	for (int i = 0; i < a->n - 1; i++)
		if (lease(reg, "q", i, HOUR) != 0)
			return 2;
	/* The last: a place in line for root's "c.0", with a lease. */
	if (queue_leased(reg, "c.0", HOUR) != -EINPROGRESS)
		return 3;
	/* No new lease: of a name, of a membership, or asked for in line. */
	if (lease(reg, "q", a->n, HOUR) != -EDQUOT)
		return 4;
	if (procreg_join_opts(reg, "g", NULL, 0, &jo) != -EDQUOT)
		return 5;
	if (queue_leased(reg, "c.1", HOUR) != -EDQUOT)
		return 6;
	/* Without one, or one set again, or renewed: yes. */
	if (lease(reg, "q", a->n, 0) != 0 || procreg_join(reg, "g", NULL, 0) != 0 ||
	    queue_leased(reg, "c.1", 0) != -EINPROGRESS)
		return 7;
	if (lease(reg, "q", 0, 2 * HOUR) != 0 || procreg_refresh(reg, "q.1") != 0)
		return 8;
	return 0;
}

/* One unprivileged user used to be able to take every lease the others
 * may have (--max-leases, less what is kept for root: 253,952 by
 * default), names held with lease_ms 0xffffffff: the others' leases
 * were refused. Now a uid has --max-leases-per-uid of them, places in
 * line that ask for one included, and another uid still has its own. */
static void test_leases_per_uid(void **state)
{
	struct fx *f = *state;
	const char *dir = f->fx->dir;
	struct liner a = { dir, &f->u1, 0, LEASES_PER_UID, 0 };
	struct one_more m;
	struct th_held h;
	TH_ENTRY(e);
	pid_t held;

	assert_int_equal(procreg_register(f->fx->reg, "c.0", NULL, 0), 0);
	assert_int_equal(procreg_register(f->fx->reg, "c.1", NULL, 0), 0);
	th_held_init(&h);
	held = th_held_start(&h, lease_quota, &a);
	th_held_ready(&h, 30000);
	/* The limit is the uid's, not its process's. */
	m = (struct one_more){ dir, &f->u1, 0, -EDQUOT, true };
	assert_int_equal(th_wait(th_fork(one_more, &m)), 0);
	/* Another uid has its own; root has no such limit. */
	for (int i = 0; i < LEASES_PER_UID; i++) {
		m = (struct one_more){ dir, &f->u2, i, 0, true };
		assert_int_equal(th_wait(th_fork(one_more, &m)), 0);
	}
	assert_int_equal(lease(f->fx->reg, "root", 0, HOUR), 0);
	/* The place in line becomes a lease: handed "c.0", U1 holds it with
	 * its lease, and has no more room than before. */
	assert_int_equal(procreg_unregister(f->fx->reg, "c.0"), 0);
	assert_int_equal(procreg_sync(f->fx->reg), 0);
	assert_int_equal(procreg_lookup(f->fx->reg, "c.0", &e), 0);
	assert_int_equal(e.pid, held);
	assert_true(e.flags & PROCREG_ENTRY_LEASED);
	m = (struct one_more){ dir, &f->u1, 1, -EDQUOT, true };
	assert_int_equal(th_wait(th_fork(one_more, &m)), 0);
	assert_int_equal(th_held_release(&h), 0);
	assert_true(th_log_has(f->fx->d.log, "--max-leases-per-uid 20 reached"));
}

/* ---- places in line that ask for a lease, against --max-leases -------- */

static int setup_leases(void **state)
{
	return setup_args(state, (const char *const[]){ "--max-leases", "64", NULL });
}

/* As U: places in line with a lease for root's names c.0.., up to the
 * others' share of --max-leases; then the next is refused. Held. */
static int queue_leased_up(void *arg, int phase)
{
	static procreg_t *reg;
	const struct liner *a = arg;
	char name[32];

	if (phase)
		return 0;
	th_become(a->u);
	reg = th_open(a->dir);
	if (!reg)
		return 1;
	for (int i = 0; i <= a->n; i++) {
		int err;

		snprintf(name, sizeof(name), "c.%d", i);
		err = queue_leased(reg, name, HOUR);
		if (err != (i < a->n ? -EINPROGRESS : a->refused)) {
			fprintf(stderr, "place %d with a lease: %s\n", i, strerror(-err));
			return 2;
		}
	}
	/* One without a lease is no lease. */
	return queue_leased(reg, "c.99", 0) == -EINPROGRESS ? 0 : 3;
}

/* A place in line that asks for a lease becomes one at its hand-over,
 * which cannot be refused, but only the per-uid limit counted it: one
 * user could queue for as many names as it liked, each asking for a
 * lease, and their hand-overs took the daemon past --max-leases. Now
 * each counts against --max-leases from the time it is queued. */
static void test_places_count_as_leases(void **state)
{
	struct fx *f = *state;
	const char *dir = f->fx->dir;
	struct liner a = { dir, &f->u1, 0, MAX_LEASES - KEPT, -ENOSPC };
	struct one_more m;
	struct th_held h;
	TH_ENTRY(e);
	pid_t held;

	root_names(f, 100);
	th_held_init(&h);
	held = th_held_start(&h, queue_leased_up, &a);
	th_held_ready(&h, 30000);
	/* The others' share is taken: another uid has no lease. */
	m = (struct one_more){ dir, &f->u2, 0, -ENOSPC, true };
	assert_int_equal(th_wait(th_fork(one_more, &m)), 0);
	/* Root has what is kept for it. */
	for (int i = 0; i < KEPT; i++)
		assert_int_equal(lease(f->fx->reg, "root", i, HOUR), 0);
	assert_int_equal(lease(f->fx->reg, "root", KEPT, HOUR), -ENOSPC);
	/* A hand-over turns a place into a lease: no more room than before. */
	assert_int_equal(procreg_unregister(f->fx->reg, "c.0"), 0);
	assert_int_equal(procreg_sync(f->fx->reg), 0);
	assert_int_equal(procreg_lookup(f->fx->reg, "c.0", &e), 0);
	assert_int_equal(e.pid, held);
	assert_true(e.flags & PROCREG_ENTRY_LEASED);
	assert_int_equal(th_wait(th_fork(one_more, &m)), 0);
	assert_int_equal(th_held_release(&h), 0);
	assert_int_equal(procreg_sync(f->fx->reg), 0);
	/* Gone with their process: room again. */
	m.want = 0;
	assert_int_equal(th_wait(th_fork(one_more, &m)), 0);
	assert_true(th_log_has(f->fx->d.log, "place in line with a lease refused (ENOSPC)"));
}

/* ---- hand-overs refused, logged within bounds -------------------------- */

#define WAITERS 8
#define ROUNDS 100

/* What the holder and the waiters of test_handover_log_limited share. */
struct rounds {
	int round;             /* the holder holds "x" for this round (-1: stop) */
	int ready;             /* waiters in line for it, over all rounds */
};

struct round_arg {
	const char *dir;
	const struct th_user *u;
	struct rounds *sh;
	int i;
};

/* Until *AT is at least WANT (or -1): true, or false after 30 s. */
static bool wait_for(int *at, int want)
{
	for (int ms = 0; ms < 30000; ms++) {
		int v = __atomic_load_n(at, __ATOMIC_ACQUIRE);

		if (v < 0 || v >= want)
			return true;
		th_msleep(1);
	}
	return false;
}

/* A waiter, as U: each round, in line for "x", then at its one name
 * ("w.I"), so that the hand-over it is due is refused (EDQUOT). Its
 * place goes with the refusal: the next round it queues again. */
static int waiter_main(void *p)
{
	const struct round_arg *a = p;
	PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_QUEUE);
	char name[32];
	procreg_t *reg;

	th_become(a->u);
	reg = th_open(a->dir);
	if (!reg)
		return 1;
	snprintf(name, sizeof(name), "w.%d", a->i);
	for (int r = 1; r <= ROUNDS + 1; r++) {
		if (!wait_for(&a->sh->round, r))
			return 2;
		if (__atomic_load_n(&a->sh->round, __ATOMIC_ACQUIRE) < 0)
			break;
		(void)procreg_unregister(reg, name);
		if (procreg_register_opts(reg, "x", NULL, 0, &o) != -EINPROGRESS ||
		    procreg_register(reg, name, NULL, 0) != 0)
			return 3;
		__atomic_add_fetch(&a->sh->ready, 1, __ATOMIC_RELEASE);
	}
	/* Alive until the holder is done: a death would take the place
	 * out of line before its hand-over is tried. */
	if (!wait_for(&a->sh->round, INT_MAX))
		return 4;
	procreg_close(reg);
	return 0;
}

/* The holder, as U: "x" registered, the waiters in line, "x" let go:
 * WAITERS refused hand-overs a round. Before the last round, a pause of
 * more than a second: its first refusal is logged, and says how many
 * were not. */
static int holder_main(void *p)
{
	const struct round_arg *a = p;
	procreg_t *reg;

	th_become(a->u);
	reg = th_open(a->dir);
	if (!reg)
		return 1;
	for (int r = 1; r <= ROUNDS + 1; r++) {
		if (r == ROUNDS + 1)
			th_msleep(1100);
		if (procreg_register(reg, "x", NULL, 0) != 0)
			return 2;
		__atomic_store_n(&a->sh->round, r, __ATOMIC_RELEASE);
		if (!wait_for(&a->sh->ready, r * WAITERS))
			return 3;
		if (procreg_unregister(reg, "x") != 0 || procreg_sync(reg) != 0)
			return 4;
		/* Refused by every one: nobody holds it. */
		if (procreg_lookup(reg, "x", NULL) != -ENOENT)
			return 5;
	}
	__atomic_store_n(&a->sh->round, -1, __ATOMIC_RELEASE);
	procreg_close(reg);
	return 0;
}

/* One user, its processes in line each holding its one name: every time
 * the name goes, each hand-over is refused. That used to be a line each
 * in the log, as many as the user cared to cause. Now a line a second
 * at most, and a count of the rest. */
static void test_handover_log_limited(void **state)
{
	struct fx *f = *state;
	struct rounds *sh = th_shared(sizeof(*sh));
	struct round_arg args[WAITERS + 1];
	pid_t pids[WAITERS + 1];
	int lines, refused = (ROUNDS + 1) * WAITERS;

	for (int i = 0; i <= WAITERS; i++) {
		args[i] = (struct round_arg){ f->fx->dir, &f->u1, sh, i };
		pids[i] = th_fork(i < WAITERS ? waiter_main : holder_main, &args[i]);
		assert_true(pids[i] > 0);
	}
	for (int i = 0; i <= WAITERS; i++)
		assert_int_equal(th_wait(pids[i]), 0);
	munmap(sh, sizeof(*sh));
	assert_int_equal(procreg_sync(f->fx->reg), 0);
	lines = th_log_count(f->fx->d.log, ": next in line, pid ");
	print_message("%d hand-overs refused: %d log lines\n", refused, lines);
	/* A line a second: the test takes seconds, not the minutes it would
	 * take to come near this. */
	if (lines < 1 || lines > refused / 8)
		fail_msg("%d log lines for %d refused hand-overs", lines, refused);
	assert_true(th_log_has(f->fx->d.log, "more hand-overs refused in the last second"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_places_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_leases_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_leases_per_uid, setup_lease_quota, teardown),
		cmocka_unit_test_setup_teardown(test_places_count_as_leases, setup_leases, teardown),
		cmocka_unit_test_setup_teardown(test_handover_log_limited, setup_one_name,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
