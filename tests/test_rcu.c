/*
 * test_rcu.c - the cross-process RCU (lib/rcu.c), with real processes.
 *
 * The test process is the writer: it creates a scope's table and reader
 * file with the writer API, starts grace periods and polls them, as
 * procregd does. Readers are forked children that open the scope with
 * procreg_open() and hold a read-side critical section open on command,
 * through the internal API (pr_read_lock/pr_read_unlock on their slot).
 *
 * Parent and children are sequenced by pipes only: a child answers each
 * command once it has done it, so when the parent reads the answer, the
 * child's stores are visible. Nothing here sleeps to let something happen.
 *
 * Children never call cmocka asserts (a failed assert would longjmp inside
 * the child's copy of the runner): they report values, and the parent
 * checks them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"

#define SCOPE "t"
#define NSLOTS 64

/* ---- fixture ---------------------------------------------------------- */

#define MAX_KIDS 16

struct kid {
	pid_t pid;
	int cmd;      /* parent -> child */
	int rep;      /* child -> parent */
};

struct fx {
	char *dir;
	struct pr_paths paths;
	struct pr_writer w;
	struct kid kids[MAX_KIDS];
	int nkids;
};

static int setup(void **state)
{
	struct pr_writer_opts o = { .max_size = 64 << 20, .readers = NSLOTS, .mode = 0644 };
	struct fx *f = calloc(1, sizeof(*f));
	const char *why = NULL;

	assert_non_null(f);
	f->dir = th_mkdtemp();
	assert_int_equal(procreg__paths(&f->paths, SCOPE, f->dir, NULL), 0);
	assert_int_equal(procreg__writer_open(&f->w, &f->paths, &o, &why), 0);
	assert_false(f->w.attached);
	/* Make sure this process has run the library's once-init (and so
	 * registered its fork handler) before any test forks. */
	procreg__self_pid();
	*state = f;
	return 0;
}

/* Every child still around is killed and waited for, whatever the test
 * did: a failed assert must not leave readers behind. */
static int teardown(void **state)
{
	struct fx *f = *state;

	for (int i = 0; i < f->nkids; i++) {
		struct kid *k = &f->kids[i];

		if (k->cmd >= 0)
			close(k->cmd);
		if (k->rep >= 0)
			close(k->rep);
		if (k->pid > 0) {
			kill(k->pid, SIGKILL);
			th_wait(k->pid);
		}
	}
	procreg__writer_close(&f->w);
	th_rmrf(f->dir);
	free(f->dir);
	free(f);
	return 0;
}

/* ---- messages --------------------------------------------------------- */

struct msg {
	char tag;
	int64_t a, b, c;
};

static int xwrite(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t k = write(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int xread(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t k = read(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int send_msg(int fd, char tag, int64_t a, int64_t b, int64_t c)
{
	struct msg m = { .tag = tag, .a = a, .b = b, .c = c };

	return xwrite(fd, &m, sizeof(m));
}

/* A child's side: the next command, or 0 when the parent is gone. */
static char next_cmd(int fd)
{
	char c;

	return xread(fd, &c, 1) < 0 ? 0 : c;
}

/* The parent's side. */
static void cmd(struct kid *k, char c)
{
	assert_int_equal(xwrite(k->cmd, &c, 1), 0);
}

static struct msg reply(struct kid *k, char want)
{
	struct msg m;

	assert_int_equal(xread(k->rep, &m, sizeof(m)), 0);
	if (m.tag != want)
		fail_msg("child %d: got '%c' (%lld %lld %lld), want '%c'", (int)k->pid, m.tag,
			 (long long)m.a, (long long)m.b, (long long)m.c, want);
	return m;
}

typedef int (*kid_fn)(struct fx *f, void *arg, int cmd, int rep);

static struct kid *kid_start(struct fx *f, kid_fn fn, void *arg)
{
	int c[2], r[2];
	struct kid *k;

	assert_true(f->nkids < MAX_KIDS);
	assert_int_equal(pipe2(c, O_CLOEXEC), 0);
	assert_int_equal(pipe2(r, O_CLOEXEC), 0);
	k = &f->kids[f->nkids++];
	k->pid = fork();
	assert_true(k->pid >= 0);
	if (k->pid == 0) {
		close(c[1]);
		close(r[0]);
		/* The other children's pipe ends are not ours to hold. */
		for (int i = 0; i < f->nkids - 1; i++) {
			close(f->kids[i].cmd);
			close(f->kids[i].rep);
		}
		_exit(fn(f, arg, c[0], r[1]));
	}
	close(c[0]);
	close(r[1]);
	k->cmd = c[1];
	k->rep = r[0];
	return k;
}

/* Close the child's command pipe (it exits on EOF) and wait: its status. */
static int kid_finish(struct kid *k)
{
	int st;

	close(k->cmd);
	k->cmd = -1;
	st = th_wait(k->pid);
	k->pid = 0;
	close(k->rep);
	k->rep = -1;
	return st;
}

static procreg_t *open_reader(const char *dir)
{
	PROCREG_OPTS(procreg_opts, o, .dir = dir, .scope = SCOPE);

	return procreg_open(&o);
}

static uint64_t self_owner(void)
{
	return (uint64_t)getpid() << 32 | (uint32_t)syscall(SYS_gettid);
}

/* ---- the reader child ------------------------------------------------- */

/*
 * Opens the scope, claims its slot and reports
 *   'S' slot index, owner word, procreg__rcu_use_membarrier
 * then obeys:
 *   'L' enter a critical section, reply 'l' with the slot's ctr
 *   'U' leave it, reply 'u' with the slot's ctr
 * and exits 0 when the command pipe closes. Exit codes > 0 say what failed.
 */
static int reader_child(struct fx *f, void *arg, int in, int out)
{
	procreg_t *r;
	struct pr_reader_slot *s;
	char c;

	(void)arg;
	r = open_reader(f->dir);
	if (!r)
		return 10;
	s = procreg__rcu_slot(&r->rcu);
	if (!s)
		return 11;
	if (send_msg(out, 'S', s - r->map.slots, (int64_t)CMM_LOAD_SHARED(s->owner),
		     procreg__rcu_use_membarrier) < 0)
		return 12;
	while ((c = next_cmd(in)) != 0) {
		switch (c) {
		case 'L':
			pr_read_lock(&r->map, s);
			if (send_msg(out, 'l', (int64_t)CMM_LOAD_SHARED(s->ctr), 0, 0) < 0)
				return 13;
			break;
		case 'U':
			pr_read_unlock(s);
			if (send_msg(out, 'u', (int64_t)CMM_LOAD_SHARED(s->ctr), 0, 0) < 0)
				return 14;
			break;
		default:
			return 15;
		}
	}
	procreg_close(r);
	return 0;
}

/* Start a reader child; *slot gets its slot index. */
static struct kid *reader_start(struct fx *f, uint32_t *slot, int64_t *membarrier)
{
	struct kid *k = kid_start(f, reader_child, NULL);
	struct msg m = reply(k, 'S');

	assert_true(m.a >= 0 && m.a < NSLOTS);
	/* The owner word names the child process. */
	assert_int_equal((pid_t)((uint64_t)m.b >> 32), k->pid);
	*slot = (uint32_t)m.a;
	if (membarrier)
		*membarrier = m.c;
	return k;
}

static uint64_t reader_lock(struct kid *k)
{
	cmd(k, 'L');
	return (uint64_t)reply(k, 'l').a;
}

static void reader_unlock(struct kid *k)
{
	cmd(k, 'U');
	assert_int_equal(reply(k, 'u').a, 0);
}

/* ---- (a) a grace period waits for the readers inside ------------------ */

/*
 * The body of (a), shared with the fallback test (f). WRITER_MB chooses
 * whether the writer issues membarrier when it starts the grace period.
 */
static void check_gp_waits_for_reader(struct fx *f, bool writer_mb, struct kid *a,
				      uint32_t sa, struct kid *b, uint32_t sb)
{
	struct pr_map *m = &f->w.map;
	uint64_t before = CMM_LOAD_SHARED(m->rhdr->gp), target, ctr;
	uint32_t blocker = UINT32_MAX;

	/* Nobody inside: a grace period ends at once. */
	target = procreg__gp_start(m, &f->w.gp, writer_mb);
	assert_int_equal(target, before + 1);
	assert_int_equal(procreg__gp_poll(m, target, &blocker), 1);

	/* A is inside, holding the counter it loaded. */
	ctr = reader_lock(a);
	assert_int_equal(ctr, target);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[sa].ctr), target);

	target = procreg__gp_start(m, &f->w.gp, writer_mb);
	assert_int_equal(target, ctr + 1);
	assert_int_equal(procreg__gp_poll(m, target, &blocker), 0);
	assert_int_equal(blocker, sa);
	/* Polling again changes nothing: A has not moved. */
	assert_int_equal(procreg__gp_poll(m, target, &blocker), 0);
	assert_int_equal(blocker, sa);

	/* B enters after the grace period started: it loads the new counter
	 * and does not hold it up. A still does. */
	ctr = reader_lock(b);
	assert_int_equal(ctr, target);
	blocker = UINT32_MAX;
	assert_int_equal(procreg__gp_poll(m, target, &blocker), 0);
	assert_int_equal(blocker, sa);

	/* A leaves: the grace period is over, although B is still inside. */
	reader_unlock(a);
	assert_int_equal(procreg__gp_poll(m, target, &blocker), 1);

	/* The next grace period waits for B, which entered before it. */
	target = procreg__gp_start(m, &f->w.gp, writer_mb);
	blocker = UINT32_MAX;
	assert_int_equal(procreg__gp_poll(m, target, &blocker), 0);
	assert_int_equal(blocker, sb);
	reader_unlock(b);
	assert_int_equal(procreg__gp_poll(m, target, &blocker), 1);
}

static void test_gp_waits_for_reader(void **state)
{
	struct fx *f = *state;
	uint32_t sa, sb;
	int64_t mb_a, mb_b;
	struct kid *a = reader_start(f, &sa, &mb_a);
	struct kid *b = reader_start(f, &sb, &mb_b);

	assert_int_not_equal(sa, sb);
	/* Without PROCREG_NO_MEMBARRIER, readers take the membarrier path
	 * wherever the kernel has it. */
	if (!getenv("PROCREG_NO_MEMBARRIER")) {
		assert_int_equal(mb_a, procreg__membarrier_expedited());
		assert_int_equal(mb_b, procreg__membarrier_expedited());
	}

	check_gp_waits_for_reader(f, f->w.membarrier, a, sa, b, sb);
	assert_int_equal(kid_finish(a), 0);
	assert_int_equal(kid_finish(b), 0);
}

/* ---- (b) a reader killed inside its critical section ------------------ */

/* Wait until PID has exited, but leave it a zombie (not reaped). */
static void wait_zombie(pid_t pid)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0)
		assert_int_equal(errno, EINTR);
	assert_int_equal(si.si_pid, pid);
	assert_int_equal(si.si_code, CLD_KILLED);
}

/*
 * Kill a reader inside its critical section. The grace period stays
 * blocked (the slot still holds the old counter) until a reap clears the
 * slot. ZOMBIE: leave the child unreaped while the reap runs, as a child
 * of a parent that does not wait for it would be: it is dead all the same,
 * and must not hold up reclamation forever.
 */
static void check_killed_reader(struct fx *f, bool zombie)
{
	struct pr_map *m = &f->w.map;
	uint32_t s, blocker = UINT32_MAX;
	struct kid *k = reader_start(f, &s, NULL);
	uint64_t owner = CMM_LOAD_SHARED(m->slots[s].owner), target;
	pid_t pid = k->pid;

	reader_lock(k);
	target = procreg__gp_start(m, &f->w.gp, f->w.membarrier);
	assert_int_equal(procreg__gp_poll(m, target, &blocker), 0);
	assert_int_equal(blocker, s);

	/* Alive: a reap leaves it alone, and the grace period waits. */
	assert_int_equal(procreg__readers_reap(m, NULL), 0);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[s].owner), owner);
	assert_int_equal(procreg__gp_poll(m, target, NULL), 0);

	kill(pid, SIGKILL);
	if (zombie) {
		wait_zombie(pid);
	} else {
		assert_int_equal(th_wait(pid), 128 + SIGKILL);
		k->pid = 0;
	}
	/* Dead, but nobody has looked yet: its slot still blocks. */
	assert_int_equal(CMM_LOAD_SHARED(m->slots[s].owner), owner);
	assert_int_equal(procreg__gp_poll(m, target, &blocker), 0);
	assert_int_equal(blocker, s);

	assert_int_equal(procreg__readers_reap(m, NULL), 1);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[s].owner), 0);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[s].ctr), 0);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[s].start), 0);
	assert_int_equal(procreg__gp_poll(m, target, NULL), 1);
	/* Nothing more to clear. */
	assert_int_equal(procreg__readers_reap(m, NULL), 0);

	if (zombie) {
		assert_int_equal(th_wait(pid), 128 + SIGKILL);
		k->pid = 0;
	}
}

static void test_killed_reader_reaped(void **state)
{
	check_killed_reader(*state, false);
}

static void test_killed_reader_zombie_reaped(void **state)
{
	check_killed_reader(*state, true);
}

/* The writer's own loop sees the same: reclamation waits for the killed
 * reader and finishes once the reap has cleared its slot. */
static void test_killed_reader_reclaim(void **state)
{
	struct fx *f = *state;
	struct pr_map *m = &f->w.map;
	uint32_t s;
	struct kid *k = reader_start(f, &s, NULL);
	struct pr_record t = { .kind = PR_KIND_NAME };
	uint64_t h, pos, off, gps;
	char name[32] = "doomed";

	/* Insert and remove one name, so that memory is retired. */
	h = pr_hash(name, strlen(name), m->hdr->hash_seed);
	t.hash = h;
	t.pid = (uint32_t)getpid();
	t.name_len = (uint16_t)strlen(name);
	assert_int_equal(procreg__w_reserve(&f->w, &f->w.map.hdr->names), 0);
	assert_int_equal(procreg__w_find_name(&f->w, name, t.name_len, &pos), 0);
	assert_int_equal(procreg__w_new_record(&f->w, &t, name, NULL, &off), 0);
	procreg__w_publish(&f->w, &f->w.map.hdr->names, pos, off);
	while (procreg__w_reclaim(&f->w))
		; /* nothing is retired yet; nobody is inside */

	reader_lock(k);
	assert_int_equal(procreg__w_find_name(&f->w, name, t.name_len, &pos), off);
	procreg__w_remove(&f->w, &f->w.map.hdr->names, pos);
	gps = m->hdr->grace_periods;
	assert_int_equal(procreg__w_reclaim(&f->w), 1);
	assert_int_equal(procreg__w_reclaim(&f->w), 1);
	assert_int_equal(m->hdr->grace_periods, gps);

	kill(k->pid, SIGKILL);
	assert_int_equal(th_wait(k->pid), 128 + SIGKILL);
	k->pid = 0;
	assert_int_equal(procreg__w_reclaim(&f->w), 1);
	assert_int_equal(procreg__readers_reap(m, NULL), 1);
	assert_int_equal(procreg__w_reclaim(&f->w), 0);
	assert_int_equal(m->hdr->grace_periods, gps + 1);
}

/* ---- (c) a live reader is never reaped -------------------------------- */

struct idle_thread {
	procreg_t *r;
	pthread_barrier_t *bar;
	uint32_t slot;
	uint64_t owner;
	pid_t tid;
};

static void *idle_thread_fn(void *arg)
{
	struct idle_thread *t = arg;
	struct pr_reader_slot *s = procreg__rcu_slot(&t->r->rcu);

	t->tid = (pid_t)syscall(SYS_gettid);
	if (s) {
		t->slot = (uint32_t)(s - t->r->map.slots);
		t->owner = CMM_LOAD_SHARED(s->owner);
	} else {
		t->slot = UINT32_MAX;
	}
	pthread_barrier_wait(t->bar);   /* slot claimed */
	pthread_barrier_wait(t->bar);   /* main has looked */
	return NULL;
}

/* A free slot of the reader file, claimed directly for a crafted owner. */
static struct pr_reader_slot *craft_slot(struct pr_map *m, uint64_t owner, uint64_t start)
{
	for (uint32_t i = 0; i < m->nslots; i++) {
		struct pr_reader_slot *s = &m->slots[i];

		if (uatomic_cmpxchg(&s->owner, 0, owner) == 0) {
			CMM_STORE_SHARED(s->start, start);
			CMM_STORE_SHARED(s->ctr, 0);
			return s;
		}
	}
	fail_msg("no free slot");
	return NULL;
}

static void test_live_reader_not_reaped(void **state)
{
	struct fx *f = *state;
	struct pr_map *m = &f->w.map;
	uint32_t s1, s2;
	struct kid *k1 = reader_start(f, &s1, NULL);
	struct kid *k2 = reader_start(f, &s2, NULL);
	uint64_t o1 = CMM_LOAD_SHARED(m->slots[s1].owner);
	uint64_t o2 = CMM_LOAD_SHARED(m->slots[s2].owner);
	procreg_t *r = open_reader(f->dir);
	pthread_barrier_t bar;
	struct idle_thread it = { .r = r, .bar = &bar };
	struct pr_reader_slot *mine;
	pthread_t th;
	uint64_t start, target;

	assert_non_null(r);
	/* A child inside a critical section, an idle child, our main thread
	 * and a second thread of ours: all alive. */
	reader_lock(k1);
	mine = procreg__rcu_slot(&r->rcu);
	assert_non_null(mine);
	assert_int_equal(pthread_barrier_init(&bar, NULL, 2), 0);
	assert_int_equal(pthread_create(&th, NULL, idle_thread_fn, &it), 0);
	pthread_barrier_wait(&bar);
	assert_true(it.slot < NSLOTS);

	for (int i = 0; i < 3; i++)
		assert_int_equal(procreg__readers_reap(m, NULL), 0);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[s1].owner), o1);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[s2].owner), o2);
	assert_int_equal(CMM_LOAD_SHARED(mine->owner), self_owner());
	assert_int_equal(CMM_LOAD_SHARED(m->slots[it.slot].owner), it.owner);
	/* The reader inside still holds the grace period. */
	target = procreg__gp_start(m, &f->w.gp, f->w.membarrier);
	assert_int_equal(procreg__gp_poll(m, target, NULL), 0);
	assert_int_equal(procreg__readers_reap(m, NULL), 0);
	assert_int_equal(procreg__gp_poll(m, target, NULL), 0);

	/* A slot whose start time is not known yet (a claim in progress)
	 * belongs to a live thread: kept. */
	{
		struct pr_reader_slot *c = craft_slot(m, self_owner(), 0);

		assert_int_equal(procreg__readers_reap(m, NULL), 0);
		assert_int_equal(CMM_LOAD_SHARED(c->owner), self_owner());
		PR_STORE_REL(&c->owner, 0);
	}

	/* Identity is (pid, tid, start time): a slot naming a thread of ours
	 * that has exited, and one naming our pid with another process's
	 * start time (a reused pid), are dead owners. */
	assert_int_equal(procreg__proc_start_time(getpid(), &start), 0);
	{
		struct pr_reader_slot *gone, *reused;

		pthread_barrier_wait(&bar);
		assert_int_equal(pthread_join(th, NULL), 0);
		/* The thread gave its slot back when it exited. */
		assert_int_equal(CMM_LOAD_SHARED(m->slots[it.slot].owner), 0);

		gone = craft_slot(m, (uint64_t)getpid() << 32 | (uint32_t)it.tid, start);
		reused = craft_slot(m, self_owner(), start + 1);
		assert_int_equal(procreg__readers_reap(m, NULL), 2);
		assert_int_equal(CMM_LOAD_SHARED(gone->owner), 0);
		assert_int_equal(CMM_LOAD_SHARED(reused->owner), 0);
	}
	/* Still nobody alive was touched. */
	assert_int_equal(CMM_LOAD_SHARED(m->slots[s1].owner), o1);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[s2].owner), o2);
	assert_int_equal(CMM_LOAD_SHARED(mine->owner), self_owner());

	reader_unlock(k1);
	assert_int_equal(procreg__gp_poll(m, target, NULL), 1);
	pthread_barrier_destroy(&bar);
	procreg_close(r);
	assert_int_equal(kid_finish(k1), 0);
	assert_int_equal(kid_finish(k2), 0);
}

/* ---- (d) slot claim and release --------------------------------------- */

#define NTHREADS 4

static void test_slot_per_thread(void **state)
{
	struct fx *f = *state;
	struct pr_map *m = &f->w.map;
	procreg_t *r = open_reader(f->dir);
	struct pr_reader_slot *s0;
	pthread_barrier_t bar;
	struct idle_thread it[NTHREADS];
	pthread_t th[NTHREADS];
	uint32_t i0;

	assert_non_null(r);
	s0 = procreg__rcu_slot(&r->rcu);
	assert_non_null(s0);
	i0 = (uint32_t)(s0 - r->map.slots);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[i0].owner), self_owner());
	assert_ptr_equal(procreg__rcu_slot(&r->rcu), s0); /* claimed once */

	assert_int_equal(pthread_barrier_init(&bar, NULL, NTHREADS + 1), 0);
	for (int i = 0; i < NTHREADS; i++) {
		it[i] = (struct idle_thread){ .r = r, .bar = &bar };
		assert_int_equal(pthread_create(&th[i], NULL, idle_thread_fn, &it[i]), 0);
	}
	pthread_barrier_wait(&bar);
	/* Every thread has a slot of its own, named by our pid and its tid. */
	for (int i = 0; i < NTHREADS; i++) {
		assert_true(it[i].slot < NSLOTS);
		assert_int_not_equal(it[i].slot, i0);
		assert_int_equal(it[i].owner, (uint64_t)getpid() << 32 | (uint32_t)it[i].tid);
		assert_int_equal(CMM_LOAD_SHARED(m->slots[it[i].slot].owner), it[i].owner);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(it[i].slot, it[j].slot);
	}
	pthread_barrier_wait(&bar);
	/* A thread gives its slot back when it exits. A free slot keeps no
	 * start time: the next owner, in the moment between its claim and
	 * storing its own, must not be judged by this process's (with
	 * another start time it would look like a reused pid, and a reap
	 * would clear a live reader's slot). */
	for (int i = 0; i < NTHREADS; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(CMM_LOAD_SHARED(m->slots[it[i].slot].owner), 0);
		assert_int_equal(CMM_LOAD_SHARED(m->slots[it[i].slot].start), 0);
	}
	pthread_barrier_destroy(&bar);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[i0].owner), self_owner());

	/* Two handles on one scope: one slot each, released separately. */
	{
		procreg_t *r2 = open_reader(f->dir);
		struct pr_reader_slot *s2;
		uint32_t i2;

		assert_non_null(r2);
		s2 = procreg__rcu_slot(&r2->rcu);
		assert_non_null(s2);
		i2 = (uint32_t)(s2 - r2->map.slots);
		assert_int_not_equal(i2, i0);
		assert_int_equal(CMM_LOAD_SHARED(m->slots[i2].owner), self_owner());
		procreg_close(r2);
		assert_int_equal(CMM_LOAD_SHARED(m->slots[i2].owner), 0);
		assert_int_equal(CMM_LOAD_SHARED(m->slots[i0].owner), self_owner());
	}

	/* procreg_close gives back the handle's slots. */
	procreg_close(r);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[i0].owner), 0);
}

/*
 * The child of a fork, with the parent's handle: reports the slot it gets
 * ('S': index, owner word, and the owner of the parent's slot as it sees
 * it), then on 'C' closes the handle and reports 'c'.
 */
struct fork_arg {
	procreg_t *r;
	uint32_t parent_slot;
	bool use;     /* read through the handle before closing it */
};

static int fork_child(struct fx *f, void *arg, int in, int out)
{
	struct fork_arg *a = arg;
	struct pr_reader_slot *s = NULL;
	struct procreg_entry e;

	(void)f;
	if (a->use) {
		s = procreg__rcu_slot(&a->r->rcu);
		if (!s)
			return 10;
		/* A lookup works with the inherited handle, through our slot. */
		if (procreg_lookup(a->r, "no-such-name", &e) != -ENOENT)
			return 11;
	}
	if (send_msg(out, 'S', s ? s - a->r->map.slots : -1,
		     s ? (int64_t)CMM_LOAD_SHARED(s->owner) : 0,
		     (int64_t)CMM_LOAD_SHARED(a->r->map.slots[a->parent_slot].owner)) < 0)
		return 12;
	if (next_cmd(in) != 'C')
		return 13;
	procreg_close(a->r);
	if (send_msg(out, 'c', 0, 0, 0) < 0)
		return 14;
	return next_cmd(in) == 0 ? 0 : 15;
}

static void test_slot_after_fork(void **state)
{
	struct fx *f = *state;
	struct pr_map *m = &f->w.map;
	procreg_t *r = open_reader(f->dir);
	struct pr_reader_slot *s0;
	struct fork_arg fa;
	struct kid *k;
	struct msg msg;
	uint32_t i0, ic;

	assert_non_null(r);
	s0 = procreg__rcu_slot(&r->rcu);
	assert_non_null(s0);
	i0 = (uint32_t)(s0 - r->map.slots);

	/* A child that reads claims a slot of its own, in its own name. */
	fa = (struct fork_arg){ .r = r, .parent_slot = i0, .use = true };
	k = kid_start(f, fork_child, &fa);
	msg = reply(k, 'S');
	assert_true(msg.a >= 0 && msg.a < NSLOTS);
	ic = (uint32_t)msg.a;
	assert_int_not_equal(ic, i0);
	assert_int_equal((pid_t)((uint64_t)msg.b >> 32), k->pid);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[ic].owner), (uint64_t)msg.b);
	assert_int_equal((uint64_t)msg.c, self_owner());
	assert_int_equal(CMM_LOAD_SHARED(m->slots[i0].owner), self_owner());
	/* Its close gives back its slot, not ours. */
	cmd(k, 'C');
	reply(k, 'c');
	assert_int_equal(CMM_LOAD_SHARED(m->slots[ic].owner), 0);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[i0].owner), self_owner());
	assert_int_equal(kid_finish(k), 0);

	/* A child that never read closes the inherited handle: our slot is
	 * still ours. */
	fa.use = false;
	k = kid_start(f, fork_child, &fa);
	msg = reply(k, 'S');
	assert_int_equal(msg.a, -1);
	cmd(k, 'C');
	reply(k, 'c');
	assert_int_equal(kid_finish(k), 0);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[i0].owner), self_owner());
	assert_ptr_equal(procreg__rcu_slot(&r->rcu), s0);

	/* And after a child that read, exited without closing, was reaped:
	 * still ours. */
	fa.use = true;
	k = kid_start(f, fork_child, &fa);
	msg = reply(k, 'S');
	ic = (uint32_t)msg.a;
	kill(k->pid, SIGKILL);
	assert_int_equal(th_wait(k->pid), 128 + SIGKILL);
	k->pid = 0;
	assert_int_equal(CMM_LOAD_SHARED(m->slots[ic].owner), (uint64_t)msg.b);
	assert_int_equal(procreg__readers_reap(m, NULL), 1);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[ic].owner), 0);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[i0].owner), self_owner());

	procreg_close(r);
	assert_int_equal(CMM_LOAD_SHARED(m->slots[i0].owner), 0);
}

/* ---- (e) retired memory is not reused under a reader ------------------ */

#define META_LEN 40
#define FILLERS 2000

static void make_meta(const char *name, char *meta)
{
	for (int i = 0; i < META_LEN; i++)
		meta[i] = name[i % strlen(name)] ^ (char)i;
}

static uint64_t w_insert(struct pr_writer *w, const char *name)
{
	struct pr_record t = { .kind = PR_KIND_NAME };
	char meta[META_LEN];
	uint64_t pos, off;

	make_meta(name, meta);
	t.name_len = (uint16_t)strlen(name);
	t.meta_len = META_LEN;
	t.hash = pr_hash(name, t.name_len, w->map.hdr->hash_seed);
	t.pid = (uint32_t)getpid();
	t.start_time = 12345;
	t.registered_ns = procreg__now_ns();
	assert_int_equal(procreg__w_reserve(w, &w->map.hdr->names), 0);
	assert_int_equal(procreg__w_find_name(w, name, t.name_len, &pos), 0);
	assert_int_equal(procreg__w_new_record(w, &t, name, meta, &off), 0);
	procreg__w_publish(w, &w->map.hdr->names, pos, off);
	return off;
}

/*
 * Looks NAME up inside a critical section it keeps open, and keeps the
 * record pointer and a copy of its bytes:
 *   'F' reply 'f': record offset, record size
 *   'V' reply 'v': 1 if the record's bytes are unchanged, plus what a fresh
 *       lookup through a second handle finds for the name (0 / -ENOENT)
 *       and for "f00000"
 *   'U' leave the critical section, reply 'u'
 */
static int hold_child(struct fx *f, void *arg, int in, int out)
{
	const char *name = arg;
	procreg_t *r = open_reader(f->dir), *r2 = open_reader(f->dir);
	struct pr_reader_slot *s;
	const struct pr_record *rec = NULL;
	unsigned char copy[512];
	uint64_t size = 0;
	char c;

	if (!r || !r2)
		return 10;
	s = procreg__rcu_slot(&r->rcu);
	if (!s)
		return 11;
	while ((c = next_cmd(in)) != 0) {
		switch (c) {
		case 'F': {
			size_t len = strlen(name);

			pr_read_lock(&r->map, s);
			rec = procreg__find_name(&r->map, name, len);
			if (!rec)
				return 12;
			size = procreg__record_size(rec);
			if (size > sizeof(copy))
				return 13;
			memcpy(copy, rec, size);
			if (send_msg(out, 'f', (const uint8_t *)rec - r->map.base, (int64_t)size, 0) < 0)
				return 14;
			break;
		}
		case 'V':
			/* The other handle has its own slot: our section stays open. */
			if (!rec || send_msg(out, 'v', memcmp(rec, copy, size) == 0,
					     procreg_lookup(r2, name, NULL),
					     procreg_lookup(r2, "f00000", NULL)) < 0)
				return 15;
			break;
		case 'U':
			pr_read_unlock(s);
			rec = NULL;
			if (send_msg(out, 'u', 0, 0, 0) < 0)
				return 16;
			break;
		default:
			return 17;
		}
	}
	procreg_close(r2);
	procreg_close(r);
	return 0;
}

static void test_retired_not_reused(void **state)
{
	struct fx *f = *state;
	struct pr_writer *w = &f->w;
	const char *victim = "victim";
	char name[32];
	struct kid *k;
	struct msg m;
	uint64_t voff, vsize, pos, gps;
	bool reused = false;

	voff = w_insert(w, victim);
	while (procreg__w_reclaim(w))
		;
	k = kid_start(f, hold_child, (void *)victim);
	cmd(k, 'F');
	m = reply(k, 'f');
	assert_int_equal((uint64_t)m.a, voff);
	vsize = (uint64_t)m.b;

	/* Unpublish and retire it, then insert many names of the same record
	 * size: the allocator hands out a freed block of that size first, so
	 * any of them would land on the victim had it been freed. */
	assert_int_equal(procreg__w_find_name(w, victim, strlen(victim), &pos), voff);
	procreg__w_remove(w, &w->map.hdr->names, pos);
	gps = w->map.hdr->grace_periods;
	assert_int_equal(procreg__w_reclaim(w), 1);
	for (int i = 0; i < FILLERS; i++) {
		uint64_t off;

		snprintf(name, sizeof(name), "f%05d", i);
		assert_int_equal(strlen(name), strlen(victim));
		off = w_insert(w, name);
		assert_int_equal(PR_RECORD_SIZE(strlen(name), META_LEN), vsize);
		assert_true(off + vsize <= voff || off >= voff + vsize);
		/* Reclamation keeps running (index rebuilds retire more), and
		 * keeps waiting. */
		if (i % 100 == 0)
			assert_int_equal(procreg__w_reclaim(w), 1);
	}
	assert_int_equal(w->map.hdr->grace_periods, gps);

	cmd(k, 'V');
	m = reply(k, 'v');
	assert_int_equal(m.a, 1);           /* the bytes it holds are whole */
	assert_int_equal(m.b, -ENOENT);     /* while the name is gone for new lookups */
	assert_int_equal(m.c, 0);

	/* Once the reader leaves, the grace period ends, the memory is freed
	 * and the next same-size record reuses it: the check above could
	 * have failed. */
	cmd(k, 'U');
	reply(k, 'u');
	while (procreg__w_reclaim(w))
		;
	assert_true(w->map.hdr->grace_periods > gps);
	for (int i = 0; i < FILLERS && !reused; i++) {
		snprintf(name, sizeof(name), "g%05d", i);
		reused = w_insert(w, name) == voff;
	}
	assert_true(reused);
	assert_int_equal(kid_finish(k), 0);
}

/* ---- (f) readers without membarrier ----------------------------------- */

static void test_gp_fallback_barriers(void **state)
{
	struct fx *f = *state;
	uint32_t sa, sb;
	int64_t mb_a, mb_b;
	struct kid *a, *b;

	/*
	 * The library reads PROCREG_NO_MEMBARRIER when it initialises, and
	 * again in a fork child (this process initialised in setup), so it
	 * must be in the child's environment at fork. Set it around the
	 * fork; the child's procreg_open then runs on full barriers.
	 */
	assert_int_equal(setenv("PROCREG_NO_MEMBARRIER", "1", 1), 0);
	a = reader_start(f, &sa, &mb_a);
	b = reader_start(f, &sb, &mb_b);
	unsetenv("PROCREG_NO_MEMBARRIER");
	assert_int_equal(mb_a, 0);
	assert_int_equal(mb_b, 0);

	/* The writer as procregd runs it (membarrier where the kernel has
	 * it), and without membarrier at all. */
	check_gp_waits_for_reader(f, f->w.membarrier, a, sa, b, sb);
	check_gp_waits_for_reader(f, false, a, sa, b, sb);
	assert_int_equal(kid_finish(a), 0);
	assert_int_equal(kid_finish(b), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_gp_waits_for_reader, setup, teardown),
		cmocka_unit_test_setup_teardown(test_killed_reader_reaped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_killed_reader_zombie_reaped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_killed_reader_reclaim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_reader_not_reaped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slot_per_thread, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slot_after_fork, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retired_not_reused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gp_fallback_barriers, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
