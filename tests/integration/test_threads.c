/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_threads.c - one handle, many threads: lookups, walks, counters,
 * the feed, registrations, joins and removals all at once, while another
 * process churns the table so that the daemon rebuilds indexes and
 * reclaims memory under the readers.
 *
 * Run under ThreadSanitizer by CI (-DPROCREG_TSAN=ON): the handle's
 * shared state (reader slots, the connection, the request buffers) must
 * be race-free between threads.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "harness.h"

#define THREADS 8
#define ITERS 3000

struct targ {
	procreg_t *reg;
	int id;
	int failures;
	char why[128];
};

static int count_cb(const struct procreg_entry *e, void *arg)
{
	(void)e;
	(*(unsigned *)arg)++;
	return 0;
}

static int group_cb(const struct procreg_group *g, void *arg)
{
	(void)g;
	(*(unsigned *)arg)++;
	return 0;
}

static void *thread_main(void *p)
{
	struct targ *t = p;
	char name[64], other[64], group[32];
	TH_ENTRY(e);
	PROCREG_OPTS(procreg_stats, st);
	PROCREG_OPTS(procreg_event, ev);
	uint64_t cursor = procreg_feed_head(t->reg), members, local;

	snprintf(group, sizeof(group), "tgroup.%d", t->id % 3);
	for (int i = 0; i < ITERS && !t->failures; i++) {
		unsigned n = 0;

		snprintf(name, sizeof(name), "thr.%d.%d", t->id, i % 50);
		snprintf(other, sizeof(other), "thr.%d.%d", (t->id + 1) % THREADS, i % 50);
		if (procreg_register(t->reg, name, &i, sizeof(i)) != 0) {
			snprintf(t->why, sizeof(t->why), "register %s", name);
			t->failures++;
			break;
		}
		if (procreg_lookup(t->reg, name, &e) != 0 || e.pid != getpid() ||
		    e.meta_len != sizeof(i) || memcmp(e.meta, &i, sizeof(i))) {
			snprintf(t->why, sizeof(t->why), "lookup own %s", name);
			t->failures++;
			break;
		}
		procreg_lookup(t->reg, other, NULL);
		procreg_lookup(t->reg, "churn.7", NULL);
		if (i % 10 == 0)
			procreg_foreach(t->reg, count_cb, &n);
		if (i % 7 == 0) {
			if (procreg_join(t->reg, group, &i, sizeof(i)) != 0) {
				snprintf(t->why, sizeof(t->why), "join %s", group);
				t->failures++;
				break;
			}
			procreg_members(t->reg, group, count_cb, &n);
			procreg_group_count(t->reg, group, &members, &local);
			procreg_groups(t->reg, group_cb, &n);
		}
		if (i % 3 == 0 && procreg_unregister(t->reg, name) != 0) {
			snprintf(t->why, sizeof(t->why), "unregister %s", name);
			t->failures++;
			break;
		}
		procreg_stats(t->reg, &st);
		while (procreg_next_event(t->reg, &cursor, &ev, 0) == 0)
			;
	}
	return NULL;
}

/* Another process: churn, so that indexes grow and records are retired
 * and reclaimed while the threads read. */
static int churn_main(void *arg)
{
	procreg_t *r;
	char name[64];

	/* It churns until killed: should the test end on a failure before
	 * it kills it, it goes with the test process rather than keep
	 * ctest waiting on the output it shares. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() == 1)
		return 71;
	r = th_open(arg);
	if (!r)
		return 70;
	for (unsigned i = 0;; i++) {
		snprintf(name, sizeof(name), "churn.%u", i % 2000);
		procreg_register(r, name, NULL, 0);
		if (i % 2 == 0) {
			snprintf(name, sizeof(name), "churn.%u", (i * 7) % 2000);
			procreg_unregister(r, name);
		}
	}
}

static void test_threads(void **state)
{
	struct th_fx *f = *state;
	pthread_t th[THREADS];
	struct targ a[THREADS];
	pid_t churn = th_fork(churn_main, f->dir);

	assert_true(churn > 0);
	for (int i = 0; i < THREADS; i++) {
		a[i] = (struct targ){ .reg = f->reg, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, thread_main, &a[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	kill(churn, SIGKILL);
	th_wait(churn);
	for (int i = 0; i < THREADS; i++)
		if (a[i].failures)
			fail_msg("thread %d: %s", i, a[i].why);
	assert_int_equal(procreg_sync(f->reg), 0);
}

/*
 * More reading threads than a reader page holds, all starting at once on a
 * fresh handle: they claim slots, one makes the second page, and each
 * page is handed to the daemon by whichever thread sees it first, while
 * the others read on (and, with churn, reads are checked against reuse).
 */
#define MANY 80

struct many_arg {
	procreg_t *reg;
	pthread_barrier_t *go;
	int failures;
};

static void *many_main(void *p)
{
	struct many_arg *a = p;

	pthread_barrier_wait(a->go);
	for (int i = 0; i < 2000; i++) {
		int err = procreg_lookup(a->reg, i % 2 ? "many.there" : "many.absent", NULL);

		a->failures += err != (i % 2 ? 0 : -ENOENT);
	}
	pthread_barrier_wait(a->go); /* every slot held at once */
	return NULL;
}

static void test_many_threads(void **state)
{
	struct th_fx *f = *state;
	procreg_t *reg = th_open(f->dir);
	pthread_barrier_t go;
	pthread_t th[MANY];
	struct many_arg a[MANY];
	pid_t churn = th_fork(churn_main, f->dir);

	assert_non_null(reg);
	assert_true(churn > 0);
	assert_int_equal(procreg_register(reg, "many.there", NULL, 0), 0);
	assert_int_equal(pthread_barrier_init(&go, NULL, MANY), 0);
	for (int i = 0; i < MANY; i++) {
		a[i] = (struct many_arg){ .reg = reg, .go = &go };
		assert_int_equal(pthread_create(&th[i], NULL, many_main, &a[i]), 0);
	}
	for (int i = 0; i < MANY; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	pthread_barrier_destroy(&go);
	kill(churn, SIGKILL);
	th_wait(churn);
	for (int i = 0; i < MANY; i++)
		assert_int_equal(a[i].failures, 0);
	/* Both pages of ours reached the daemon. */
	assert_int_equal(th_reader_pages(reg, getpid(), 2), 0);
	procreg_close(reg);
}

/*
 * fork() while other threads are in the middle of requests and of
 * claiming reader slots: the child's handle must work at once. A child
 * whose copy of the handle's locks is held by a thread that does not
 * exist in it would wait for ever on its first request or first read;
 * each child gets FORK_WAIT_S to register, look itself up and exit.
 */
#define FORKS 400
#define FORK_WAIT_S 20

struct fork_arg {
	procreg_t *reg;
	int id;
	int stop;
	int failures;
};

static void *one_read(void *p)
{
	procreg_lookup(p, "fork.absent", NULL);
	return NULL;
}

static void *fork_busy(void *p)
{
	struct fork_arg *a = p;
	char name[64];

	for (unsigned i = 0; !__atomic_load_n(&a->stop, __ATOMIC_RELAXED); i++) {
		pthread_t t;

		/* Thread 0 keeps the handle's requests going (io held);
		 * the others start threads whose first read claims a reader
		 * slot and whose exit gives it back (the reader lock held). */
		if (a->id == 0) {
			snprintf(name, sizeof(name), "fork.busy.%u", i % 20);
			a->failures += procreg_register(a->reg, name, NULL, 0) != 0;
			a->failures += procreg_unregister(a->reg, name) != 0;
		} else if (pthread_create(&t, NULL, one_read, a->reg) == 0) {
			pthread_join(t, NULL);
		}
	}
	return NULL;
}

static int fork_child(procreg_t *reg)
{
	char name[64];
	TH_ENTRY(e);

	snprintf(name, sizeof(name), "fork.child.%d", (int)getpid());
	if (procreg_register(reg, name, NULL, 0) != 0)
		return 3;
	if (procreg_lookup(reg, name, &e) != 0 || e.pid != getpid())
		return 4;
	return 0;
}

static void test_fork_busy(void **state)
{
	struct th_fx *f = *state;
	pthread_t th[3];
	struct fork_arg a[3];
	int hung = 0, bad = 0, last = 0;

	for (int i = 0; i < 3; i++) {
		a[i] = (struct fork_arg){ .reg = f->reg, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, fork_busy, &a[i]), 0);
	}
	for (int k = 0; k < FORKS && !hung; k++) {
		pid_t pid;
		int st;

		usleep(200 + (unsigned)(k % 7) * 150);
		pid = fork();
		if (pid == 0)
			_exit(fork_child(f->reg));
		assert_true(pid > 0);
		st = th_wait_ms(pid, FORK_WAIT_S * 1000);
		hung += st < 0;
		if (st > 0) {
			bad++;
			last = st;
		}
	}
	for (int i = 0; i < 3; i++) {
		__atomic_store_n(&a[i].stop, 1, __ATOMIC_RELAXED);
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(a[i].failures, 0);
	}
	if (hung)
		fail_msg("a child of fork() did not finish its first request in %d s", FORK_WAIT_S);
	if (bad)
		fail_msg("%d children of fork() failed, the last with status %d", bad, last);
}

static int setup(void **state)
{
	return th_fx_start(state, NULL, NULL);
}

static int teardown(void **state)
{
	return th_fx_stop(state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_threads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fork_busy, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
