/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_crash.c - procregd SIGKILLed at random points of a write storm,
 * many times over, and restarted each time.
 *
 * Worker processes register names and join groups as fast as the daemon
 * answers, and report every acknowledged write over a pipe. Each round the
 * test lets the storm run for a random while, kills a worker or not, kills
 * the daemon, maybe kills another worker while no daemon runs, and starts
 * the daemon again. Then, with the workers stopped (SIGSTOP) so the table
 * is quiet:
 *  - `procreg check` passes on the table;
 *  - every acknowledged name and membership of a live worker is there,
 *    owned by it;
 *  - after procreg_sync, nothing of a dead worker is left.
 * A dead worker is replaced at the start of the next round.
 *
 * PROCREG_CRASH_ROUNDS and PROCREG_CRASH_SEED override the defaults (the
 * seed is printed, so a failure can be replayed).
 *
 * test_reader_kills: reader processes SIGKILLed inside read-side critical
 * sections (some certainly, holding one open; some at random points of a
 * lookup loop) while the table churns through many times its own size:
 * reclamation must go on (no -ENOSPC), and dead readers' pages are dropped.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"

#define WORKERS 4
#define MAX_GEN 1024          /* workers ever started */
#define NAMES_PER_WORKER 400  /* a worker's names cycle through this many */
#define GROUPS 8

enum { ACK_NAME = 1, ACK_JOIN = 2 };

struct ack {
	uint32_t gen;         /* the worker's number */
	uint32_t kind;
	uint32_t seq;         /* name number, or group number */
};

struct worker {
	pid_t pid;            /* 0 once dead and reaped */
	uint8_t names[NAMES_PER_WORKER / 8];
	uint8_t groups;
};

static struct worker w[MAX_GEN];
static int ngen;
static uint64_t nacks;
static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

static int worker_main(const char *dir, uint32_t gen, int ack_fd)
{
	procreg_t *r = th_open(dir);
	char name[64];

	if (!r)
		return 60;
	for (uint32_t i = 0;; i++) {
		struct ack a = { gen, ACK_NAME, i % NAMES_PER_WORKER };
		int err;

		if (i % 5 == 4) {
			a.kind = ACK_JOIN;
			a.seq = i % GROUPS;
			snprintf(name, sizeof(name), "grp.%u", a.seq);
			err = procreg_join(r, name, &gen, sizeof(gen));
		} else {
			snprintf(name, sizeof(name), "w%u.%u", gen, a.seq);
			err = procreg_register(r, name, &i, sizeof(i));
		}
		if (err == 0) {
			if (write(ack_fd, &a, sizeof(a)) != sizeof(a))
				return 61;
		} else {
			/* The daemon is down or restarting: try again soon. */
			th_msleep(1);
		}
	}
}

static void spawn(const char *dir, int ack_w)
{
	pid_t pid;

	assert_true(ngen < MAX_GEN);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(worker_main(dir, (uint32_t)ngen, ack_w));
	memset(&w[ngen], 0, sizeof(w[ngen]));
	w[ngen++].pid = pid;
}

static int kill_one(void)
{
	int live[MAX_GEN], n = 0, k;

	for (int i = 0; i < ngen; i++)
		if (w[i].pid)
			live[n++] = i;
	if (!n)
		return 0;
	k = live[rnd((uint32_t)n)];
	kill(w[k].pid, SIGKILL);
	th_wait(w[k].pid);
	w[k].pid = 0;
	return 1;
}

static void drain(int ack_r)
{
	struct ack a;

	while (read(ack_r, &a, sizeof(a)) == sizeof(a)) {
		assert_true(a.gen < (uint32_t)ngen);
		nacks++;
		if (a.kind == ACK_NAME)
			w[a.gen].names[a.seq / 8] |= (uint8_t)(1 << (a.seq % 8));
		else
			w[a.gen].groups |= (uint8_t)(1 << a.seq);
	}
}

static void signal_all(int sig)
{
	for (int i = 0; i < ngen; i++)
		if (w[i].pid)
			kill(w[i].pid, sig);
}

/* Every entry must belong to a live worker. */
static int name_owner_live(const struct procreg_entry *e, void *arg)
{
	unsigned gen;

	(void)arg;
	if (sscanf(e->name, "w%u.", &gen) != 1 || gen >= (unsigned)ngen) {
		print_error("unexpected name %s\n", e->name);
		return 1;
	}
	if (!w[gen].pid || w[gen].pid != e->pid) {
		print_error("name %s of dead worker %u (pid %d) survived\n", e->name, gen,
			    (int)e->pid);
		return 1;
	}
	return 0;
}

static int member_owner_live(const struct procreg_entry *e, void *arg)
{
	(void)arg;
	for (int i = 0; i < ngen; i++)
		if (w[i].pid && w[i].pid == e->pid)
			return 0;
	print_error("membership of %s by dead pid %d survived\n", e->name, (int)e->pid);
	return 1;
}

struct member_find {
	pid_t pid;
	int found;
};

static int member_is(const struct procreg_entry *e, void *arg)
{
	struct member_find *m = arg;

	if (e->pid == m->pid)
		m->found = 1;
	return 0;
}

static void test_crash_storm(void **state)
{
	struct th_fx *f = *state;
	const char *env_rounds = getenv("PROCREG_CRASH_ROUNDS"), *env_seed = getenv("PROCREG_CRASH_SEED");
	int rounds = env_rounds ? atoi(env_rounds) : 100, survived = 0, deaths = 0;
	uint64_t acked_checked = 0;
	int ack[2];
	char name[64];
	struct timespec t0, t1;

	rng = env_seed ? strtoull(env_seed, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20;
	if (!rng)
		rng = 1;
	print_message("crash storm: %d rounds, seed %llu\n", rounds, (unsigned long long)rng);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(pipe2(ack, O_CLOEXEC), 0);
	assert_int_equal(fcntl(ack[0], F_SETFL, O_NONBLOCK), 0);
	fcntl(ack[0], F_SETPIPE_SZ, 1 << 20); /* room for a burst of acks */
	ngen = 0;
	nacks = 0;

	for (int round = 0; round < rounds; round++) {
		const char *const check[] = { "check", NULL };
		int live = 0, st;

		for (int i = 0; i < ngen; i++)
			live += w[i].pid != 0;
		while (live++ < WORKERS)
			spawn(f->dir, ack[1]);

		/* The storm runs; maybe a death while the daemon is up. */
		th_msleep(20 + (int)rnd(150));
		drain(ack[0]);
		if (rnd(2))
			deaths += kill_one();
		th_msleep((int)rnd(20));
		th_daemon_kill(&f->d);
		/* Maybe a death while no daemon runs. */
		if (rnd(2))
			deaths += kill_one();
		th_msleep((int)rnd(30));
		if (th_daemon_start(&f->d, f->dir, NULL, NULL) != 0) {
			th_daemon_dump_log(&f->d);
			fail_msg("round %d: the daemon did not restart", round);
		}

		/* Quiesce: stop the workers, let the daemon finish with what
		 * they sent, collect their acknowledgements. */
		signal_all(SIGSTOP);
		assert_int_equal(procreg_sync(f->reg), 0);
		assert_int_equal(procreg_sync(f->reg), 0);
		drain(ack[0]);

		st = th_cli(f->dir, NULL, 0, check);
		if (st != 0) {
			th_daemon_dump_log(&f->d);
			fail_msg("round %d: procreg check exited %d", round, st);
		}
		for (int g = 0; g < ngen; g++) {
			if (!w[g].pid)
				continue;
			for (int i = 0; i < NAMES_PER_WORKER; i++) {
				TH_ENTRY(e);

				if (!(w[g].names[i / 8] & (1 << (i % 8))))
					continue;
				snprintf(name, sizeof(name), "w%d.%d", g, i);
				if (procreg_lookup(f->reg, name, &e) != 0 || e.pid != w[g].pid)
					fail_msg("round %d: acknowledged %s of live worker lost", round,
						 name);
				acked_checked++;
			}
			for (int i = 0; i < GROUPS; i++) {
				struct member_find m = { w[g].pid, 0 };

				if (!(w[g].groups & (1 << i)))
					continue;
				snprintf(name, sizeof(name), "grp.%d", i);
				procreg_members(f->reg, name, member_is, &m);
				if (!m.found)
					fail_msg("round %d: acknowledged join of %s by live worker lost",
						 round, name);
				acked_checked++;
			}
		}
		assert_int_equal(procreg_foreach(f->reg, name_owner_live, NULL), 0);
		for (int i = 0; i < GROUPS; i++) {
			snprintf(name, sizeof(name), "grp.%d", i);
			assert_int_equal(procreg_members(f->reg, name, member_owner_live, NULL), 0);
		}
		signal_all(SIGCONT);
		survived++;
	}

	signal_all(SIGKILL);
	for (int i = 0; i < ngen; i++)
		if (w[i].pid) {
			th_wait(w[i].pid);
			w[i].pid = 0;
		}
	close(ack[0]);
	close(ack[1]);
	assert_int_equal(procreg_sync(f->reg), 0);
	{
		PROCREG_OPTS(procreg_stats, s);

		procreg_stats(f->reg, &s);
		assert_int_equal(s.names, 0);
		assert_int_equal(s.processes, 0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	print_message("crash storm: %d rounds survived, %d workers started, %d killed, "
		      "%llu writes acknowledged, %llu checks of them, %.1f s\n",
		      survived, ngen, deaths, (unsigned long long)nacks,
		      (unsigned long long)acked_checked,
		      (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
}

/* ---- readers killed inside critical sections -------------------------- */

#define READERS 6
#define CHURN_NAMES 50

struct reader_arg {
	const char *dir;
	int ready_fd;
	int hold;             /* 1: lock once and wait to be killed */
};

static int count_entry(const struct procreg_entry *e, void *arg)
{
	(void)e;
	(*(unsigned *)arg)++;
	return 0;
}

static int reader_main(void *p)
{
	struct reader_arg *a = p;
	procreg_t *r = th_open(a->dir);
	char c = 1, name[32];

	if (!r)
		return 70;
	if (a->hold) {
		struct pr_reader_slot *s;

		/* A lookup first: its page goes to the daemon, which then
		 * waits for it, as for any reader. */
		procreg_lookup(r, "none", NULL);
		s = procreg__rcu_slot(&r->rcu);
		if (!s)
			return 71;
		pr_read_lock(&r->map, s);
		if (write(a->ready_fd, &c, 1) != 1)
			return 72;
		pause(); /* killed here, inside the critical section */
		return 73;
	}
	if (write(a->ready_fd, &c, 1) != 1)
		return 72;
	for (unsigned i = 0;; i++) {
		unsigned n = 0;

		snprintf(name, sizeof(name), "churn.%u", i % CHURN_NAMES);
		procreg_lookup(r, name, NULL);
		if (i % 64 == 0)
			procreg_foreach(r, count_entry, &n);
	}
}

static int setup_small_table(void **state)
{
	static const char *const args[] = { "--max-size", "16M", NULL };
	return th_fx_start(state, args, NULL);
}

static void test_reader_kills(void **state)
{
	struct th_fx *f = *state;
	const char *env_rounds = getenv("PROCREG_CRASH_ROUNDS");
	int rounds = env_rounds ? atoi(env_rounds) : 40, ready[2], killed = 0, held = 0;
	static unsigned char meta[PROCREG_META_MAX];
	pid_t readers[READERS] = { 0 };
	PROCREG_OPTS(procreg_stats, st);
	uint64_t max_used = 0, slots0, writes = 0;
	char name[32], c;

	if (!rng)
		rng = (uint64_t)time(NULL) | 1;
	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(procreg_lookup(f->reg, "none", NULL), -ENOENT); /* our page */
	assert_int_equal(th_reader_held(f->reg, getpid()), 0);
	procreg_stats(f->reg, &st);
	slots0 = st.reader_slots_used;
	for (int round = 0; round < rounds; round++) {
		for (int i = 0; i < READERS; i++) {
			struct reader_arg a = { f->dir, ready[1], i < READERS / 2 };

			if (readers[i])
				continue;
			readers[i] = th_fork(reader_main, &a);
			assert_true(readers[i] > 0);
			assert_int_equal(read(ready[0], &c, 1), 1);
		}
		/* Churn: every update retires a record of about 1 KiB. */
		for (int i = 0; i < 1000; i++) {
			int err;

			snprintf(name, sizeof(name), "churn.%d", i % CHURN_NAMES);
			meta[0] = (unsigned char)i;
			err = procreg_register(f->reg, name, meta, sizeof(meta));
			if (err) {
				procreg_stats(f->reg, &st);
				fail_msg("round %d: churn: %d (arena used %llu of %llu)", round, err,
					 (unsigned long long)st.arena_used,
					 (unsigned long long)st.arena_size);
			}
			writes++;
			if (i % 100 == 99) {
				procreg_stats(f->reg, &st);
				if (st.arena_used > max_used)
					max_used = st.arena_used;
			}
		}
		/* Every holding reader dies inside its critical section, and
		 * one looping reader wherever it stands. A holding reader that
		 * lived on would hold back reclamation for good, by design. */
		for (int i = 0; i < READERS / 2; i++) {
			kill(readers[i], SIGKILL);
			assert_int_equal(th_wait(readers[i]), 128 + SIGKILL);
			readers[i] = 0;
			killed++;
			held++;
		}
		{
			int i = READERS / 2 + (int)rnd(READERS - READERS / 2);

			kill(readers[i], SIGKILL);
			assert_int_equal(th_wait(readers[i]), 128 + SIGKILL);
			readers[i] = 0;
			killed++;
		}
		/* The daemon finds dead readers on its own schedule (at least
		 * once a second); the bound below is about what it reclaims
		 * once it has, not about how soon it looks: wait for it. */
		for (int t = 0; t < 200; t++) {
			int alive = 0;

			for (int i = 0; i < READERS; i++)
				alive += readers[i] != 0;
			procreg_stats(f->reg, &st);
			if (st.reader_slots_used <= slots0 + (uint64_t)alive)
				break;
			th_msleep(50);
		}
	}
	for (int i = 0; i < READERS; i++) {
		if (!readers[i])
			continue;
		kill(readers[i], SIGKILL);
		th_wait(readers[i]);
		killed++;
	}
	/* Every dead reader's pages are dropped (the daemon watches each
	 * reader process through a pidfd). */
	for (int t = 0; t < 100; t++) {
		procreg_stats(f->reg, &st);
		if (st.reader_slots_used == slots0)
			break;
		th_msleep(50);
	}
	assert_int_equal(st.reader_slots_used, slots0);
	print_message("reader kills: %d rounds, %d readers killed (%d inside a held critical "
		      "section), %llu updates of ~1 KiB through a %llu-byte arena, peak arena "
		      "in use %llu bytes\n",
		      rounds, killed, held, (unsigned long long)writes, (unsigned long long)st.arena_size,
		      (unsigned long long)max_used);
	/* Many times the arena went through it, and never more than half of
	 * it was in use at once: memory retired while dead readers held it
	 * came back. */
	assert_true(writes * PROCREG_META_MAX > 2 * st.arena_size);
	assert_true(max_used < st.arena_size / 2);
	close(ready[0]);
	close(ready[1]);
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
		cmocka_unit_test_setup_teardown(test_crash_storm, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reader_kills, setup_small_table, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
