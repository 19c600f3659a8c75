/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_rcu.c - the cross-process RCU (lib/rcu.c), with real processes.
 *
 * The test process is the writer: it creates a scope's table with the
 * writer API, takes readers' pages as procregd does (here with
 * pidfd_getfd() instead of a socket, then the same checks and mapping),
 * starts grace periods and polls them. Readers are forked children that
 * open the scope with procreg_open() and hold a read-side critical section
 * open on command, through the internal API (pr_read_lock/pr_read_unlock
 * on their slot).
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
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"

#define SCOPE "t"
#define REGISTRY 64

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

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
	struct pr_writer_opts o = { .max_size = 64 << 20, .readers = REGISTRY, .mode = 0644 };
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

static uint64_t self_tid(void)
{
	return (uint32_t)syscall(SYS_gettid);
}

/* Where a slot sits in its page: its index, and the page's header (pages
 * are page-aligned mappings). */
static uint32_t slot_index(const struct pr_reader_slot *s)
{
	return (uint32_t)(((uintptr_t)s & (PR_RPAGE_SIZE - 1)) / sizeof(*s)) - 1;
}

static const struct pr_rpage_hdr *page_of(const struct pr_reader_slot *s)
{
	return (const struct pr_rpage_hdr *)((uintptr_t)s & ~(uintptr_t)(PR_RPAGE_SIZE - 1));
}

/* The fd of the page a handle's slots are in (its newest). */
static int page_fd(procreg_t *r)
{
	int fd = -1;

	return procreg__rcu_page_fds(&r->rcu, &fd, 1) == 1 ? fd : -1;
}

static size_t adopt(struct fx *f, pid_t pid, int fdnum)
{
	return th_adopt_page(&f->w, pid, fdnum);
}

/* Slot I of the writer's page P, as the writer sees it. */
static const struct pr_reader_slot *wslot(struct fx *f, size_t p, uint32_t i)
{
	return (const struct pr_reader_slot *)(f->w.readers.v[p].hdr + 1) + i;
}

/* ---- the reader child ------------------------------------------------- */

/*
 * Opens the scope, claims its slot and reports
 *   'S' slot index in its page, the page's fd, procreg__rcu_use_membarrier
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
	if (!s || page_fd(r) < 0)
		return 11;
	if (send_msg(out, 'S', slot_index(s), page_fd(r), procreg__rcu_use_membarrier) < 0)
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

/* A reader child whose page the writer holds: *page gets its index among
 * the writer's pages, *slot the child's slot in it. */
static struct kid *reader_start(struct fx *f, size_t *page, uint32_t *slot, int64_t *membarrier)
{
	struct kid *k = kid_start(f, reader_child, NULL);
	struct msg m = reply(k, 'S');

	assert_true(m.a >= 0 && m.a < (int64_t)PR_RPAGE_SLOTS);
	*slot = (uint32_t)m.a;
	*page = adopt(f, k->pid, (int)m.b);
	/* The owner word names the child's thread (its main thread: the
	 * pid), as the writer sees it through its own mapping. */
	assert_int_equal(CMM_LOAD_SHARED(wslot(f, *page, *slot)->owner), (uint64_t)k->pid);
	assert_true(CMM_LOAD_SHARED(f->w.readers.v[*page].hdr->hw) > *slot);
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
static void check_gp_waits_for_reader(struct fx *f, bool writer_mb, struct kid *a, size_t pa,
				      uint32_t sa, struct kid *b, size_t pb)
{
	struct pr_map *m = &f->w.map;
	struct pr_rpages *rp = &f->w.readers;
	uint64_t before = CMM_LOAD_SHARED(m->hdr->gp), target, ctr;
	size_t blocker = SIZE_MAX;

	/* Nobody inside: a grace period ends at once. */
	target = procreg__gp_start(m, &f->w.gp, writer_mb);
	assert_int_equal(target, before + 1);
	assert_int_equal(procreg__gp_poll(rp, target, &blocker), 1);

	/* A is inside, holding the counter it loaded. */
	ctr = reader_lock(a);
	assert_int_equal(ctr, target);
	assert_int_equal(CMM_LOAD_SHARED(wslot(f, pa, sa)->ctr), target);

	target = procreg__gp_start(m, &f->w.gp, writer_mb);
	assert_int_equal(target, ctr + 1);
	assert_int_equal(procreg__gp_poll(rp, target, &blocker), 0);
	assert_int_equal(blocker, pa);
	assert_int_equal(procreg__gp_waiting(rp, target), 1);
	/* Polling again changes nothing: A has not moved. */
	assert_int_equal(procreg__gp_poll(rp, target, &blocker), 0);
	assert_int_equal(blocker, pa);

	/* B enters after the grace period started: it loads the new counter
	 * and does not hold it up. A still does. */
	ctr = reader_lock(b);
	assert_int_equal(ctr, target);
	blocker = SIZE_MAX;
	assert_int_equal(procreg__gp_poll(rp, target, &blocker), 0);
	assert_int_equal(blocker, pa);

	/* A leaves: the grace period is over, although B is still inside. */
	reader_unlock(a);
	assert_int_equal(procreg__gp_poll(rp, target, &blocker), 1);

	/* The next grace period waits for B, which entered before it. */
	target = procreg__gp_start(m, &f->w.gp, writer_mb);
	blocker = SIZE_MAX;
	assert_int_equal(procreg__gp_poll(rp, target, &blocker), 0);
	assert_int_equal(blocker, pb);
	/* A page the writer ignores (its process stalled) holds nothing up. */
	rp->v[pb].ignored = true;
	assert_int_equal(procreg__gp_poll(rp, target, &blocker), 1);
	rp->v[pb].ignored = false;
	reader_unlock(b);
	assert_int_equal(procreg__gp_poll(rp, target, &blocker), 1);
}

static void test_gp_waits_for_reader(void **state)
{
	struct fx *f = *state;
	size_t pa, pb;
	uint32_t sa, sb;
	int64_t mb_a, mb_b;
	struct kid *a = reader_start(f, &pa, &sa, &mb_a);
	struct kid *b = reader_start(f, &pb, &sb, &mb_b);

	/* One page each: processes never share one. */
	assert_int_not_equal(pa, pb);
	assert_true(f->w.readers.v[pa].ino != f->w.readers.v[pb].ino);
	/* Without PROCREG_NO_MEMBARRIER, readers take the membarrier path
	 * wherever the kernel has it. */
	if (!getenv("PROCREG_NO_MEMBARRIER")) {
		assert_int_equal(mb_a, procreg__membarrier_expedited());
		assert_int_equal(mb_b, procreg__membarrier_expedited());
	}

	check_gp_waits_for_reader(f, f->w.membarrier, a, pa, sa, b, pb);
	assert_int_equal(kid_finish(a), 0);
	assert_int_equal(kid_finish(b), 0);
}

/* ---- (b) what the writer accepts as a page ---------------------------- */

/* A memfd of LEN bytes, WRITE: its first byte written, with SEALS. */
static int make_memfd(size_t len, bool write, int seals, uint64_t magic)
{
	int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	struct pr_rpage_hdr *h;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	if (write) {
		h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		assert_true(h != MAP_FAILED);
		h->magic = magic;
		h->layout_version = PR_LAYOUT_VERSION;
		h->size_desc = PR_SIZE_DESC;
		h->nslots = PR_RPAGE_SLOTS;
		munmap(h, len);
	}
	if (seals)
		assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

static int try_page(int fd)
{
	struct pr_rpage_ref ref;
	const char *why = NULL;
	int err = procreg__rpage_map(fd, &ref, &why);

	if (!err)
		procreg__rpage_unmap(&ref);
	else
		assert_non_null(why);
	close(fd);
	return err;
}

static void test_page_checks(void **state)
{
	struct fx *f = *state;
	const int all = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
	char path[512];
	int p[2], fd;

	(void)f;
	/* The real thing. */
	assert_int_equal(try_page(make_memfd(PR_RPAGE_SIZE, true, all, PR_RPAGE_MAGIC)), 0);
	/* Not sealed: its owner could shrink it under our mapping (SIGBUS),
	 * or punch a hole in it. */
	assert_int_equal(try_page(make_memfd(PR_RPAGE_SIZE, true, 0, PR_RPAGE_MAGIC)), -EPERM);
	assert_int_equal(try_page(make_memfd(PR_RPAGE_SIZE, true, F_SEAL_SHRINK | F_SEAL_GROW,
					     PR_RPAGE_MAGIC)), -EPERM);
	assert_int_equal(try_page(make_memfd(PR_RPAGE_SIZE, true, F_SEAL_GROW | F_SEAL_FUTURE_WRITE,
					     PR_RPAGE_MAGIC)), -EPERM);
	/* Sealed, but a hole: no page behind it. */
	assert_int_equal(try_page(make_memfd(PR_RPAGE_SIZE, false, all, 0)), -EPERM);
	/* Another size. */
	assert_int_equal(try_page(make_memfd(2 * PR_RPAGE_SIZE, true, all, PR_RPAGE_MAGIC)), -EBADF);
	assert_int_equal(try_page(make_memfd(0, false, all, 0)), -EBADF);
	/* Sealed and whole, but not a page of this layout. */
	assert_int_equal(try_page(make_memfd(PR_RPAGE_SIZE, true, all, 0x1234)), -EPROTO);
	/* Not a memfd at all: a file, a pipe. Neither can be sealed, which
	 * is asked first: asking does not reach the file's own operations,
	 * where fstat() of a file on a FUSE mount would wait on its server. */
	snprintf(path, sizeof(path), "%s/notapage", f->dir);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, PR_RPAGE_SIZE), 0);
	assert_int_equal(try_page(fd), -EPERM);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	close(p[1]);
	assert_int_equal(try_page(p[0]), -EPERM);
}

/* The library's own pages pass, and cannot be undone by their maker:
 * nothing it may do shrinks, punches or remaps them writable. */
static void test_page_sealed(void **state)
{
	struct fx *f = *state;
	procreg_t *r = open_reader(f->dir);
	struct pr_reader_slot *s;
	void *w;
	int fd;

	assert_non_null(r);
	s = procreg__rcu_slot(&r->rcu);
	assert_non_null(s);
	fd = page_fd(r);
	assert_true(fd >= 0);
	assert_int_equal(try_page(dup(fd)), 0);
	assert_int_equal(ftruncate(fd, 0), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, PR_RPAGE_SIZE),
			 -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(madvise((void *)page_of(s), PR_RPAGE_SIZE, MADV_REMOVE), -1);
	w = mmap(NULL, PR_RPAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(w == MAP_FAILED);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, 0), -1); /* F_SEAL_SEAL */
	procreg_close(r);
}

/* ---- (c) slot claim and release --------------------------------------- */

#define NTHREADS 4

struct idle_thread {
	procreg_t *r;
	pthread_barrier_t *bar;
	const struct pr_reader_slot *slot;
	pid_t tid;
};

static void *idle_thread_fn(void *arg)
{
	struct idle_thread *t = arg;

	t->slot = procreg__rcu_slot(&t->r->rcu);
	t->tid = (pid_t)syscall(SYS_gettid);
	pthread_barrier_wait(t->bar);   /* slot claimed */
	pthread_barrier_wait(t->bar);   /* main has looked */
	return NULL;
}

/* A read-only view of the page behind FD that outlives the handle's. */
static const struct pr_rpage_hdr *view(int fd)
{
	void *p = mmap(NULL, PR_RPAGE_SIZE, PROT_READ, MAP_SHARED, fd, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

static void test_slot_per_thread(void **state)
{
	struct fx *f = *state;
	procreg_t *r = open_reader(f->dir);
	const struct pr_reader_slot *s0, *vs;
	const struct pr_rpage_hdr *v;
	pthread_barrier_t bar;
	struct idle_thread it[NTHREADS];
	pthread_t th[NTHREADS];

	assert_non_null(r);
	s0 = procreg__rcu_slot(&r->rcu);
	assert_non_null(s0);
	assert_int_equal(CMM_LOAD_SHARED(s0->owner), self_tid());
	assert_ptr_equal(procreg__rcu_slot(&r->rcu), s0); /* claimed once */
	v = view(page_fd(r));
	vs = (const struct pr_reader_slot *)(v + 1);
	assert_int_equal(v->magic, PR_RPAGE_MAGIC);
	assert_int_equal(v->nslots, PR_RPAGE_SLOTS);
	assert_int_equal(v->hw, slot_index(s0) + 1);

	assert_int_equal(pthread_barrier_init(&bar, NULL, NTHREADS + 1), 0);
	for (int i = 0; i < NTHREADS; i++) {
		it[i] = (struct idle_thread){ .r = r, .bar = &bar };
		assert_int_equal(pthread_create(&th[i], NULL, idle_thread_fn, &it[i]), 0);
	}
	pthread_barrier_wait(&bar);
	/* Every thread has a slot of its own in the same page, named by its
	 * tid, below the high-water mark the writer scans to. */
	for (int i = 0; i < NTHREADS; i++) {
		assert_ptr_equal(page_of(it[i].slot), page_of(s0));
		assert_ptr_not_equal(it[i].slot, s0);
		assert_int_equal(CMM_LOAD_SHARED(vs[slot_index(it[i].slot)].owner), (uint64_t)it[i].tid);
		assert_true(CMM_LOAD_SHARED(v->hw) > slot_index(it[i].slot));
		for (int j = 0; j < i; j++)
			assert_ptr_not_equal(it[i].slot, it[j].slot);
	}
	pthread_barrier_wait(&bar);
	/* A thread gives its slot back when it exits. */
	for (int i = 0; i < NTHREADS; i++) {
		uint32_t k = slot_index(it[i].slot);

		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(CMM_LOAD_SHARED(vs[k].owner), 0);
		assert_int_equal(CMM_LOAD_SHARED(vs[k].ctr), 0);
	}
	pthread_barrier_destroy(&bar);
	assert_int_equal(CMM_LOAD_SHARED(s0->owner), self_tid());

	/* Two handles on one scope: a page each. */
	{
		procreg_t *r2 = open_reader(f->dir);
		const struct pr_reader_slot *s2;

		assert_non_null(r2);
		s2 = procreg__rcu_slot(&r2->rcu);
		assert_non_null(s2);
		assert_ptr_not_equal(page_of(s2), page_of(s0));
		procreg_close(r2);
		assert_int_equal(CMM_LOAD_SHARED(s0->owner), self_tid());
	}

	/* procreg_close gives back the handle's slots, and marks its page
	 * closed: the daemon drops it. */
	assert_int_equal(CMM_LOAD_SHARED(v->closed), 0);
	procreg_close(r);
	assert_int_equal(CMM_LOAD_SHARED(vs[0].owner), 0);
	assert_int_equal(CMM_LOAD_SHARED(v->closed), 1);
	munmap((void *)v, PR_RPAGE_SIZE);
}

/* More threads than a page holds: a second page, made as needed. */
#define MANY ((int)PR_RPAGE_SLOTS + 5)

/* Two handles read by one thread, turn about: each read takes its own
 * handle's slot (the thread keeps the last one in a thread-local cache,
 * which a read through the other handle must not reuse), and a handle
 * closed and another opened never inherit the cache. */
static void test_slot_two_handles(void **state)
{
	struct fx *f = *state;
	procreg_t *a = open_reader(f->dir), *b = open_reader(f->dir), *c;
	const struct pr_reader_slot *sa, *sb;

	assert_non_null(a);
	assert_non_null(b);
	sa = procreg__rcu_slot(&a->rcu);
	sb = procreg__rcu_slot(&b->rcu);
	assert_ptr_not_equal(sa, sb);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(procreg_lookup(a, "no-such-name", NULL), -ENOENT);
		assert_int_equal(procreg_lookup(b, "no-such-name", NULL), -ENOENT);
		assert_int_equal(procreg_lookup(b, "no-such-name", NULL), -ENOENT);
	}
	assert_int_equal(CMM_LOAD_SHARED(sa->lookups), 10);
	assert_int_equal(CMM_LOAD_SHARED(sb->lookups), 20);
	assert_ptr_equal(procreg__rcu_slot(&a->rcu), sa);
	assert_ptr_equal(procreg__rcu_slot(&b->rcu), sb);
	/* B closed, C opened: C's first read claims a slot of its own. */
	procreg_close(b);
	c = open_reader(f->dir);
	assert_non_null(c);
	assert_int_equal(procreg_lookup(c, "no-such-name", NULL), -ENOENT);
	assert_int_equal(CMM_LOAD_SHARED(procreg__rcu_slot(&c->rcu)->lookups), 1);
	assert_int_equal(CMM_LOAD_SHARED(procreg__rcu_slot(&c->rcu)->owner), self_tid());
	assert_int_equal(procreg_lookup(a, "no-such-name", NULL), -ENOENT);
	assert_int_equal(CMM_LOAD_SHARED(sa->lookups), 11);
	procreg_close(c);
	procreg_close(a);
}

static void test_second_page(void **state)
{
	struct fx *f = *state;
	procreg_t *r = open_reader(f->dir);
	pthread_barrier_t bar;
	struct idle_thread it[MANY];
	pthread_t th[MANY];
	int fds[4], n;
	size_t pages = 0;

	assert_non_null(r);
	assert_int_equal(pthread_barrier_init(&bar, NULL, MANY + 1), 0);
	for (int i = 0; i < MANY; i++) {
		it[i] = (struct idle_thread){ .r = r, .bar = &bar };
		assert_int_equal(pthread_create(&th[i], NULL, idle_thread_fn, &it[i]), 0);
	}
	pthread_barrier_wait(&bar);
	n = procreg__rcu_page_fds(&r->rcu, fds, 4);
	assert_int_equal(n, 2);
	for (int i = 0; i < MANY; i++)
		for (int j = 0; j < i; j++)
			assert_ptr_not_equal(it[i].slot, it[j].slot);
	/* Both are pages the writer takes. */
	for (int i = 0; i < n; i++)
		pages = adopt(f, getpid(), fds[i]) + 1;
	assert_int_equal(pages, 2);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < MANY; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	pthread_barrier_destroy(&bar);
	procreg_close(r);
}

/*
 * The child of a fork, with the parent's handle: reports the slot it gets
 * ('S': its index, the page's fd and inode), then on 'C' closes the handle
 * and reports 'c'.
 */
struct fork_arg {
	procreg_t *r;
	bool use;     /* read through the handle before closing it */
};

static uint64_t ino_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) < 0 ? 0 : st.st_ino;
}

static int fork_child(struct fx *f, void *arg, int in, int out)
{
	struct fork_arg *a = arg;
	const struct pr_reader_slot *s = NULL;
	TH_ENTRY(e);

	(void)f;
	if (a->use) {
		s = procreg__rcu_slot(&a->r->rcu);
		if (!s)
			return 10;
		/* A lookup works with the inherited handle, through our slot. */
		if (procreg_lookup(a->r, "no-such-name", &e) != -ENOENT)
			return 11;
	}
	if (send_msg(out, 'S', s ? (int64_t)slot_index(s) : -1, s ? page_fd(a->r) : -1,
		     s ? (int64_t)ino_of(page_fd(a->r)) : 0) < 0)
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
	procreg_t *r = open_reader(f->dir);
	const struct pr_reader_slot *s0;
	const struct pr_rpage_hdr *mine;
	struct fork_arg fa;
	struct kid *k;
	struct msg msg;
	size_t p;

	assert_non_null(r);
	s0 = procreg__rcu_slot(&r->rcu);
	assert_non_null(s0);
	mine = view(page_fd(r));

	/* A child that reads claims a slot in a page of its own. */
	fa = (struct fork_arg){ .r = r, .use = true };
	k = kid_start(f, fork_child, &fa);
	msg = reply(k, 'S');
	assert_true(msg.a >= 0);
	assert_true(msg.c != 0 && (uint64_t)msg.c != ino_of(page_fd(r)));
	p = adopt(f, k->pid, (int)msg.b);
	assert_int_equal(CMM_LOAD_SHARED(wslot(f, p, (uint32_t)msg.a)->owner), (uint64_t)k->pid);
	assert_int_equal(CMM_LOAD_SHARED(s0->owner), self_tid());
	/* Its close gives back its slot and closes its page, not ours. */
	cmd(k, 'C');
	reply(k, 'c');
	assert_int_equal(CMM_LOAD_SHARED(wslot(f, p, (uint32_t)msg.a)->owner), 0);
	assert_int_equal(CMM_LOAD_SHARED(f->w.readers.v[p].hdr->closed), 1);
	assert_int_equal(CMM_LOAD_SHARED(s0->owner), self_tid());
	assert_int_equal(CMM_LOAD_SHARED(mine->closed), 0);
	assert_int_equal(kid_finish(k), 0);

	/* A child that never read closes the inherited handle: our page is
	 * still ours, open. */
	fa.use = false;
	k = kid_start(f, fork_child, &fa);
	msg = reply(k, 'S');
	assert_int_equal(msg.a, -1);
	cmd(k, 'C');
	reply(k, 'c');
	assert_int_equal(kid_finish(k), 0);
	assert_int_equal(CMM_LOAD_SHARED(s0->owner), self_tid());
	assert_int_equal(CMM_LOAD_SHARED(mine->closed), 0);
	assert_ptr_equal(procreg__rcu_slot(&r->rcu), s0);

	procreg_close(r);
	assert_int_equal(CMM_LOAD_SHARED(mine->closed), 1);
	munmap((void *)mine, PR_RPAGE_SIZE);
}

/* ---- (d) retired memory is not reused under a reader ------------------ */

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
 *   'F' reply 'f': record offset, record size, the page's fd
 *   'V' reply 'v': 1 if the record's bytes are unchanged, plus what a fresh
 *       lookup through a second handle finds for the name (0 / -ENOENT)
 *       and for "f00000"
 *   'K' reply 'k': pr_read_valid() for the section held since 'F'
 *   'U' leave the critical section, reply 'u'
 */
static int hold_child(struct fx *f, void *arg, int in, int out)
{
	const char *name = arg;
	procreg_t *r = open_reader(f->dir), *r2 = open_reader(f->dir);
	struct pr_reader_slot *s;
	const struct pr_record *rec = NULL;
	unsigned char copy[512];
	uint64_t size = 0, gp = 0;
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

			gp = pr_read_lock(&r->map, s);
			rec = procreg__find_name(&r->map, name, len);
			if (!rec)
				return 12;
			size = procreg__record_size(rec);
			if (size > sizeof(copy))
				return 13;
			memcpy(copy, rec, size);
			if (send_msg(out, 'f', (const uint8_t *)rec - r->map.base, (int64_t)size,
				     page_fd(r)) < 0)
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
		case 'K':
			if (send_msg(out, 'k', pr_read_valid(&r->map, gp),
				     rec && memcmp(rec, copy, size) == 0, 0) < 0)
				return 16;
			break;
		case 'U':
			pr_read_unlock(s);
			rec = NULL;
			if (send_msg(out, 'u', 0, 0, 0) < 0)
				return 17;
			break;
		default:
			return 18;
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
	adopt(f, k->pid, (int)m.c);

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
	/* And its read stands: nothing it might have read was reused. */
	cmd(k, 'K');
	assert_int_equal(reply(k, 'k').a, 0);

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

/*
 * A reader the writer does not wait for (its page never handed over, as
 * when its slot was cleared, its process stalled past the timeout, or the
 * daemon refused the page): the memory under it is freed and reused, and
 * its read says so. Before the reuse, the same read stood.
 */
static void test_unprotected_read_caught(void **state)
{
	struct fx *f = *state;
	struct pr_writer *w = &f->w;
	const char *victim = "victim";
	char name[32];
	struct kid *k;
	struct msg m;
	uint64_t voff, pos, freed;
	bool reused = false;

	voff = w_insert(w, victim);
	while (procreg__w_reclaim(w))
		;
	k = kid_start(f, hold_child, (void *)victim);
	cmd(k, 'F');
	assert_int_equal((uint64_t)reply(k, 'f').a, voff);
	cmd(k, 'K');
	m = reply(k, 'k');
	assert_int_equal(m.a, 0);
	assert_int_equal(m.b, 1);

	freed = CMM_LOAD_SHARED(w->map.hdr->freed_gp);
	assert_int_equal(procreg__w_find_name(w, victim, strlen(victim), &pos), voff);
	procreg__w_remove(w, &w->map.hdr->names, pos);
	while (procreg__w_reclaim(w))
		; /* nobody to wait for */
	assert_true(CMM_LOAD_SHARED(w->map.hdr->freed_gp) > freed);
	for (int i = 0; i < FILLERS && !reused; i++) {
		snprintf(name, sizeof(name), "h%05d", i);
		reused = w_insert(w, name) == voff;
	}
	assert_true(reused);
	/* The bytes it holds changed under it, and it knows. */
	cmd(k, 'K');
	m = reply(k, 'k');
	assert_int_equal(m.a, -1);
	assert_int_equal(m.b, 0);
	cmd(k, 'U');
	reply(k, 'u');
	assert_int_equal(kid_finish(k), 0);
}

/* ---- (e) readers without membarrier ----------------------------------- */

static void test_gp_fallback_barriers(void **state)
{
	struct fx *f = *state;
	size_t pa, pb;
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
	a = reader_start(f, &pa, &sa, &mb_a);
	b = reader_start(f, &pb, &sb, &mb_b);
	unsetenv("PROCREG_NO_MEMBARRIER");
	assert_int_equal(mb_a, 0);
	assert_int_equal(mb_b, 0);

	/* The writer as procregd runs it (membarrier where the kernel has
	 * it), and without membarrier at all. */
	check_gp_waits_for_reader(f, f->w.membarrier, a, pa, sa, b, pb);
	check_gp_waits_for_reader(f, false, a, pa, sa, b, pb);
	assert_int_equal(kid_finish(a), 0);
	assert_int_equal(kid_finish(b), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_gp_waits_for_reader, setup, teardown),
		cmocka_unit_test_setup_teardown(test_page_checks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_page_sealed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slot_per_thread, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slot_two_handles, setup, teardown),
		cmocka_unit_test_setup_teardown(test_second_page, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slot_after_fork, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retired_not_reused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unprotected_read_caught, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gp_fallback_barriers, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
