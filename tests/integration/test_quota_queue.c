/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_quota_queue.c - places in owner queues (PROCREG_QUEUE) count
 * against the per-uid quota (--max-names-per-uid), like names and
 * memberships: one uid cannot queue for names without bound.
 *
 * Needs root, to act as uid 65534 (CI runs as root).
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

#define QUOTA 5

static int setup(void **state)
{
	static const char *const args[] = { "--max-names-per-uid", "5", NULL };

	return th_fx_start(state, args, NULL);
}

static int teardown(void **state)
{
	return th_fx_stop(state);
}

static int queue_for(procreg_t *r, const char *name)
{
	PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_QUEUE);

	return procreg_register_opts(r, name, "w", 1, &o);
}

struct kid {
	const char *dir;
	int step_fd;    /* the kid writes a byte at each step */
	int go_fd;      /* and reads one to go on */
};

/* Another process of uid 65534, while the first holds the whole quota. */
static int second(void *arg)
{
	procreg_t *r = th_open(arg);

	if (!r)
		return 30;
	if (queue_for(r, "q.8") != -EDQUOT)
		return 31;
	if (procreg_register(r, "free.1", NULL, 0) != -EDQUOT)
		return 32;
	procreg_close(r);
	return 0;
}

static int step(const struct kid *k)
{
	char c = 0;

	return write(k->step_fd, &c, 1) == 1 && read(k->go_fd, &c, 1) == 1 ? 0 : -1;
}

/* As uid 65534: QUOTA places in line, and then nothing more. */
static int waiter(void *arg)
{
	const struct kid *k = arg;
	char name[16];
	procreg_t *r;
	pid_t g;

	if (setgid(65534) < 0 || setuid(65534) < 0)
		return 10;
	r = th_open(k->dir);
	if (!r)
		return 11;
	for (int i = 0; i < QUOTA; i++) {
		snprintf(name, sizeof(name), "q.%d", i);
		if (queue_for(r, name) != -EINPROGRESS)
			return 12;
	}
	/* Five places: no sixth, no name, no membership... */
	if (queue_for(r, "q.5") != -EDQUOT)
		return 13;
	if (procreg_register(r, "free.0", NULL, 0) != -EDQUOT)
		return 14;
	if (procreg_join(r, "free.group", NULL, 0) != -EDQUOT)
		return 15;
	/* ...nor for another process of the uid. */
	g = th_fork(second, (void *)k->dir);
	if (th_wait(g) != 0)
		return 16;
	/* Asking again keeps one's place: not a new one. */
	if (queue_for(r, "q.0") != -EINPROGRESS)
		return 17;
	/* The parent lets q.0 go: the place becomes the name, within the
	 * quota it already counted against. */
	if (step(k) < 0)
		return 18;
	if (procreg_wait_owner(r, "q.0", 10000) != 0)
		return 19;
	if (queue_for(r, "q.5") != -EDQUOT)
		return 20;
	/* Letting the name go gives one back. */
	if (procreg_unregister(r, "q.0") != 0 || queue_for(r, "q.5") != -EINPROGRESS)
		return 21;
	if (queue_for(r, "q.6") != -EDQUOT)
		return 22;
	/* Held until the parent kills us. */
	if (step(k) < 0)
		return 23;
	return 24;
}

/* After the waiter's death, its places are given back: another process
 * of the uid has its whole quota. */
static int after(void *arg)
{
	procreg_t *r;
	char name[16];

	if (setgid(65534) < 0 || setuid(65534) < 0)
		return 40;
	r = th_open(arg);
	if (!r)
		return 41;
	for (int i = 0; i < QUOTA; i++) {
		snprintf(name, sizeof(name), "after.%d", i);
		if (procreg_register(r, name, NULL, 0) != 0)
			return 42;
	}
	if (procreg_register(r, "after.5", NULL, 0) != -EDQUOT)
		return 43;
	procreg_close(r);
	return 0;
}

static void wait_step(int fd, pid_t kid)
{
	char c;

	if (read(fd, &c, 1) != 1)
		fail_msg("the uid 65534 waiter failed: status %d", th_wait(kid));
}

static void test_queue_places_count(void **state)
{
	struct th_fx *f = *state;
	int step_p[2], go_p[2];
	TH_ENTRY(e);
	struct kid k;
	char name[16], c = 0;
	pid_t kid;

	if (geteuid() != 0)
		fail_msg("this test needs root, to act as uid 65534 (CI runs as root)");
	/* Root holds the names (root has no quota). */
	for (int i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), "q.%d", i);
		assert_int_equal(procreg_register(f->reg, name, NULL, 0), 0);
	}
	assert_int_equal(pipe2(step_p, O_CLOEXEC), 0);
	assert_int_equal(pipe2(go_p, O_CLOEXEC), 0);
	k = (struct kid){ f->dir, step_p[1], go_p[0] };
	kid = th_fork(waiter, &k);
	close(step_p[1]);
	close(go_p[0]);

	wait_step(step_p[0], kid);
	assert_int_equal(procreg_unregister(f->reg, "q.0"), 0);
	assert_int_equal(write(go_p[1], &c, 1), 1);

	wait_step(step_p[0], kid);
	assert_int_equal(procreg_lookup(f->reg, "q.0", NULL), -ENOENT);
	/* Dying gives every place back. */
	assert_int_equal(kill(kid, SIGKILL), 0);
	assert_int_equal(th_wait(kid), 128 + SIGKILL);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(th_wait(th_fork(after, f->dir)), 0);
	/* And no place survived it: q.1 goes to nobody. */
	assert_int_equal(procreg_unregister(f->reg, "q.1"), 0);
	assert_int_equal(procreg_lookup(f->reg, "q.1", &e), -ENOENT);
	close(step_p[0]);
	close(go_p[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_queue_places_count, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
