/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * rcu.c - read-copy-update across processes.
 *
 * liburcu's flavors keep their reader registry in process memory, where the
 * daemon cannot see readers of other processes. This file keeps the same
 * design with the registry spread over memory the daemon is handed:
 *
 *  - Each reader thread claims a slot (one cache line) on its first read
 *    and releases it at thread exit; a forked child claims its own.
 *  - Read lock stores the current grace-period counter gp (in the table)
 *    in the slot; read unlock stores 0. Like liburcu's memb flavor, the
 *    reader orders those stores with compiler barriers only: the daemon
 *    issues membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) before it scans,
 *    which runs a full barrier on every CPU executing a registered reader.
 *    A process whose membarrier registration fails uses full barriers
 *    itself (liburcu's mb flavor), so mixing the two is safe.
 *  - A grace period (writer only) is: gp += 1 (the target), membarrier,
 *    then poll until every slot is 0 or holds a value >= target. A reader
 *    that holds an older value entered before the target was published and
 *    may hold a reference to retired memory; one that holds 0 or a newer
 *    value cannot: if its store was not visible when we scanned, the
 *    membarrier put a full barrier between it and its reads of the table,
 *    and those reads start after our unpublishing stores.
 *  - The counter is 64 bits (as in DPDK's rte_rcu_qsbr), so there is no
 *    phase bit and no wraparound to reason about.
 *  - Polling never waits: the daemon checks again on its next tick. That
 *    is how "the writer never waits for a reader" holds.
 *
 * WHO MAPS WHAT, AND WHO CAN WRITE IT. The slots are the only memory a
 * reader writes, so where they live decides what a hostile local user can
 * do to others. They live in reader pages: each reading process (each
 * handle of it) creates its own page in a memfd, writes its header, and
 * seals it against shrinking, growing, new writable mappings and hole
 * punching (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE), keeping
 * the one writable mapping it made before sealing. It then hands the page
 * to the daemon over the socket (SCM_RIGHTS); the daemon checks the seals,
 * the size and that no byte is a hole, and maps it PROT_READ. So:
 *
 *  - Only the page's own process (and whoever may ptrace it, who can hurt
 *    it anyway) can write its slots: no user can clear, pin or scribble
 *    another process's slot, whatever its uid.
 *  - Nobody can truncate or punch a page the daemon maps, so the daemon
 *    never takes a SIGBUS from one; the table, which readers map, belongs
 *    to the daemon's user and is written only by the daemon.
 *  - The grace-period counter lives in the table, written by the daemon
 *    only: no reader can move it.
 *  - A process can lie only in its own pages: pin a slot (hold grace
 *    periods up), or clear one while a thread of its own reads. Pinning is
 *    bounded: a reader that holds a grace period up longer than the
 *    daemon's --reader-timeout-ms is no longer waited for, and is named in
 *    the log, in procreg readers and in procreg stats. Memory retired since
 *    is reused while that reader may still read it, and clearing one's own
 *    slot has the same effect; both are made harmless by the next point.
 *  - Every read is validated (pr_read_valid): the daemon stores freed_gp,
 *    the newest grace period whose memory it handed back to the allocator,
 *    before it reuses any of it. A reader that entered at gp = g and sees
 *    freed_gp > g after its copy may have read reused memory, and redoes
 *    the read; one that sees freed_gp <= g read only bytes that were
 *    published and not yet reused. So a lookup returns an entry that was
 *    published for that name during the call, or a miss: never a mixture,
 *    whatever any process does to any slot. Honest readers whose pages the
 *    daemon holds never retry, since it waits for them.
 *
 * A reader's pages reach the daemon without the lookup waiting for it:
 * procreg__announce() (client.c) sends them on a connection of its own,
 * non-blocking, and closes it; the daemon dedupes by the memfd's inode and
 * keeps the pages until their process exits. A handle opened while no
 * daemon runs reads like any other: it has nothing to be protected from
 * (nothing is freed while no daemon runs), and it announces its pages when
 * it sees a daemon start (daemon_gen, on the counter's cache line, so the
 * check costs no extra miss). A lookup never fails for want of a slot:
 * a thread that cannot have one reads unprotected, validated all the same.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* What a page must carry before the daemon maps it: no shrink (no SIGBUS
 * past a new end), no grow (its size is checked once), no new writable
 * mapping, write(2) or hole punching (no byte the daemon reads can turn
 * into a hole, which a fault would have to allocate). */
#define PAGE_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE)

int procreg__rcu_use_membarrier;

/* Our pid, refreshed in the child after fork(): a slot or connection made
 * by the parent is never used by the child. Read without a syscall. */
pid_t procreg__pid;
static uint64_t self_start;
static uint64_t rcu_ids;          /* the last handle id given out */

__thread struct pr_tls_slot procreg__tls_slot PR_TLS_IE;
static pthread_once_t once = PTHREAD_ONCE_INIT;

struct pr_rcu_thread {
	struct pr_rcu_thread *next;
	struct pr_rcu *rcu;
	struct pr_reader_slot *slot;
	pid_t pid;
	/* Where a thread with no slot of its own publishes its counter: no
	 * daemon scans it, so such a thread is unprotected, and its reads
	 * are kept correct by validation alone. */
	struct pr_reader_slot spare;
};

/* One of this process's pages. */
struct pr_rpage {
	struct pr_rpage *next;
	int fd;
	struct pr_rpage_hdr *hdr;     /* our writable mapping */
};

static int membarrier(int cmd, unsigned int flags)
{
	return (int)syscall(__NR_membarrier, cmd, flags, 0);
}

static void register_membarrier(void)
{
	int q = membarrier(MEMBARRIER_CMD_QUERY, 0);

	procreg__rcu_use_membarrier =
		q >= 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
		!secure_getenv("PROCREG_NO_MEMBARRIER") &&
		membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0) == 0;
}

static void refresh_self(void)
{
	procreg__pid = getpid();
	if (procreg__proc_start_time(procreg__pid, &self_start) < 0)
		self_start = 0;
	register_membarrier();
}

static void atfork_child(void)
{
	refresh_self();
	/* The forking thread's, now the child's only thread: the slot it
	 * names is the parent's. */
	memset(&procreg__tls_slot, 0, sizeof(procreg__tls_slot));
}

static void init_once(void)
{
	refresh_self();
	pthread_atfork(NULL, NULL, atfork_child);
}

pid_t procreg__self_pid(void)
{
	pthread_once(&once, init_once);
	return procreg__pid;
}

static struct pr_reader_slot *page_slots(const struct pr_rpage_hdr *h)
{
	return (struct pr_reader_slot *)(h + 1);
}

static void release_slot(struct pr_reader_slot *s)
{
	CMM_STORE_SHARED(s->ctr, 0);
	PR_STORE_REL(&s->owner, 0);
}

/* Thread exit: give the slot back, if this process claimed it. */
static void thread_exit(void *p)
{
	struct pr_rcu_thread *t = p, **pp;
	struct pr_rcu *r = t->rcu;

	if (t->pid == procreg__pid && t->slot && t->slot != &t->spare)
		release_slot(t->slot);
	/* A key destructor of someone else's that runs after ours and reads
	 * must not find the slot just given back. */
	if (procreg__tls_slot.slot == t->slot)
		memset(&procreg__tls_slot, 0, sizeof(procreg__tls_slot));
	pthread_mutex_lock(&r->lock);
	for (pp = &r->threads; *pp; pp = &(*pp)->next) {
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	}
	pthread_mutex_unlock(&r->lock);
	free(t);
}

int procreg__rcu_init(struct pr_rcu *r, struct pr_map *m)
{
	int err;

	pthread_once(&once, init_once);
	memset(r, 0, sizeof(*r));
	r->map = m;
	r->id = uatomic_add_return(&rcu_ids, 1);
	r->pages_pid = procreg__pid;
	err = pthread_key_create(&r->key, thread_exit);
	if (err)
		return -err;
	pthread_mutex_init(&r->lock, NULL);
	return 0;
}

void procreg__rcu_fork_lock(struct pr_rcu *r)
{
	pthread_mutex_lock(&r->lock);
}

void procreg__rcu_fork_unlock(struct pr_rcu *r)
{
	pthread_mutex_unlock(&r->lock);
}

/* Unmap and close every page: ours (the daemon keeps its mapping of each
 * until we exit or it sees the page closed), or, in a child after fork,
 * our copies of the parent's, which the parent keeps using. */
static void drop_pages(struct pr_rcu *r, bool ours)
{
	struct pr_rpage *p, *n;

	for (p = r->pages; p; p = n) {
		n = p->next;
		if (ours)
			PR_STORE_REL(&p->hdr->closed, 1);
		munmap(p->hdr, PR_RPAGE_SIZE);
		close(p->fd);
		free(p);
	}
	r->pages = NULL;
	r->npages = 0;
}

void procreg__rcu_fini(struct pr_rcu *r)
{
	struct pr_rcu_thread *t, *n;

	pthread_key_delete(r->key);
	for (t = r->threads; t; t = n) {
		n = t->next;
		if (t->pid == procreg__pid && t->slot && t->slot != &t->spare)
			release_slot(t->slot);
		free(t);
	}
	r->threads = NULL;
	drop_pages(r, r->pages_pid == procreg__pid);
	pthread_mutex_destroy(&r->lock);
}

/* A new page of our own: backed, headed and sealed, so that the daemon
 * can map it and no one can take its memory from under that mapping. */
static struct pr_rpage *page_new(void)
{
	struct pr_rpage *p = calloc(1, sizeof(*p));
	struct pr_rpage_hdr *h;
	int fd = -1;

	if (!p)
		return NULL;
	fd = memfd_create("procreg-reader", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	/* fallocate: a page that cannot be backed is an error here, not a
	 * SIGBUS at the first slot store. */
	if (fd < 0 || ftruncate(fd, PR_RPAGE_SIZE) < 0 || fallocate(fd, 0, 0, PR_RPAGE_SIZE) < 0)
		goto fail;
	h = mmap(NULL, PR_RPAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		goto fail;
	h->layout_version = PR_LAYOUT_VERSION;
	h->nslots = PR_RPAGE_SLOTS;
	h->size_desc = PR_SIZE_DESC;
	PR_STORE_REL(&h->magic, PR_RPAGE_MAGIC);
	if (fcntl(fd, F_ADD_SEALS, PAGE_SEALS | F_SEAL_SEAL) < 0) {
		munmap(h, PR_RPAGE_SIZE);
		goto fail;
	}
	p->fd = fd;
	p->hdr = h;
	return p;
fail:
	if (fd >= 0)
		close(fd);
	free(p);
	return NULL;
}

/* A free slot of page H for thread TID, or NULL. */
static struct pr_reader_slot *claim_in(struct pr_rpage_hdr *h, uint64_t tid)
{
	struct pr_reader_slot *s = page_slots(h);

	/* Lowest free slot first, so that the daemon's scan, which stops at
	 * hw, stays short. */
	for (uint32_t i = 0; i < PR_RPAGE_SLOTS; i++) {
		uint32_t hw;

		if (PR_LOAD_RELAXED(&s[i].owner) != 0 || !PR_CAS(&s[i].owner, 0, tid))
			continue;
		CMM_STORE_SHARED(s[i].ctr, 0);
		CMM_STORE_SHARED(s[i].lookups, 0);
		/* Raise hw before the slot's first counter store: a full
		 * barrier (the cmpxchg), so the daemon that sees the counter
		 * scans this far. */
		while ((hw = PR_LOAD_RELAXED(&h->hw)) < i + 1)
			if (PR_CAS(&h->hw, hw, i + 1))
				break;
		return &s[i];
	}
	return NULL;
}

/* A slot for the calling thread in one of our pages, making a page if
 * every slot is taken; NULL if none can be had. Under r->lock. */
static struct pr_reader_slot *claim(struct pr_rcu *r)
{
	uint64_t tid = (uint32_t)syscall(SYS_gettid);
	struct pr_reader_slot *s;
	struct pr_rpage *p;

	if (r->pages_pid != procreg__pid) {
		/* A child of fork(): the pages are the parent's. */
		drop_pages(r, false);
		r->pages_pid = procreg__pid;
		PR_STORE_REL(&r->announced, 0);
	}
	for (p = r->pages; p; p = p->next)
		if ((s = claim_in(p->hdr, tid)))
			return s;
	if (r->npages >= PR_RPAGES_MAX || !(p = page_new()))
		return NULL;
	p->next = r->pages;
	r->pages = p;
	r->npages++;
	/* A page the daemon does not have: announce again at the next read
	 * (the daemon ignores the ones it has). */
	PR_STORE_REL(&r->announced, 0);
	return claim_in(p->hdr, tid);
}

/* The slot the next read of this thread through R takes without a
 * lookup of the thread's key. */
static struct pr_reader_slot *remember(struct pr_rcu *r, struct pr_reader_slot *s)
{
	procreg__tls_slot.slot = s;
	procreg__tls_slot.rcu_id = r->id;
	return s;
}

struct pr_reader_slot *procreg__rcu_slot_slow(struct pr_rcu *r)
{
	struct pr_rcu_thread *t = pthread_getspecific(r->key);

	if (caa_likely(t && t->pid == procreg__pid))
		return remember(r, t->slot);
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			return NULL;
		t->rcu = r;
		pthread_mutex_lock(&r->lock);
		t->next = r->threads;
		r->threads = t;
		pthread_mutex_unlock(&r->lock);
		pthread_setspecific(r->key, t);
	}
	/* New thread, or the child of a fork holding its parent's record. */
	t->pid = procreg__pid;
	pthread_mutex_lock(&r->lock);
	t->slot = claim(r);
	pthread_mutex_unlock(&r->lock);
	if (!t->slot)
		t->slot = &t->spare;
	return remember(r, t->slot);
}

int procreg__rcu_page_fds(struct pr_rcu *r, int *fds, int max)
{
	int n = 0;

	pthread_mutex_lock(&r->lock);
	if (r->pages_pid == procreg__pid)
		for (struct pr_rpage *p = r->pages; p && n < max; p = p->next)
			fds[n++] = p->fd;
	pthread_mutex_unlock(&r->lock);
	return n;
}

/* ---- writer side ------------------------------------------------------ */

int procreg__membarrier_expedited(void)
{
	int q = membarrier(MEMBARRIER_CMD_QUERY, 0);

	/* Asked, and tried: a sandbox may answer the query yet refuse the
	 * call. */
	return q >= 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
	       !secure_getenv("PROCREG_NO_MEMBARRIER") &&
	       membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0) == 0;
}

uint64_t procreg__gp_start(struct pr_map *m, uint64_t *gp, bool use_membarrier)
{
	uint64_t target = *gp + 1;

	/* Order the unpublishing stores that retired memory before the new
	 * counter value, then make every reader's slot store visible. */
	cmm_smp_mb();
	CMM_STORE_SHARED(m->hdr->gp, target);
	if (use_membarrier && membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0) < 0)
		return 0; /* readers rely on it: no grace period without it */
	cmm_smp_mb();
	*gp = target;
	return target;
}

void procreg__gp_freed(struct pr_map *m, uint64_t target)
{
	/* Before any block the grace period covered is handed out again: a
	 * reader that read a reused byte then sees the new value (it loads
	 * freed_gp after its reads, behind a read barrier). */
	CMM_STORE_SHARED(m->hdr->freed_gp, target);
	cmm_smp_mb();
}

/* Slot I of page P holds TARGET up? */
static bool holds(const struct pr_reader_slot *s, uint64_t target)
{
	uint64_t c = CMM_LOAD_SHARED(s->ctr);

	return c != 0 && c < target;
}

/* The slots of P worth scanning: up to its claimed high-water mark, which
 * its writer may lie about, so bounded by what we checked at map time. */
static uint32_t scan_len(const struct pr_rpage_ref *p)
{
	uint32_t hw = CMM_LOAD_SHARED(p->hdr->hw);

	return hw < PR_RPAGE_SLOTS ? hw : PR_RPAGE_SLOTS;
}

int procreg__gp_poll(const struct pr_rpages *rp, uint64_t target, size_t *blocker)
{
	return procreg__gp_poll_from(rp, target, 0, blocker);
}

int procreg__gp_poll_from(const struct pr_rpages *rp, uint64_t target, size_t from,
			  size_t *blocker)
{
	for (size_t i = from; i < rp->n; i++) {
		const struct pr_rpage_ref *p = &rp->v[i];
		const struct pr_reader_slot *s = (const struct pr_reader_slot *)(p->hdr + 1);
		uint32_t n;

		if (p->ignored)
			continue;
		n = scan_len(p);
		for (uint32_t j = 0; j < n; j++) {
			if (holds(&s[j], target)) {
				if (blocker)
					*blocker = i;
				return 0;
			}
		}
	}
	/* Our later frees must not be reordered before the scan. */
	cmm_smp_mb();
	return 1;
}

uint32_t procreg__gp_waiting(const struct pr_rpages *rp, uint64_t target)
{
	uint32_t n = 0;

	for (size_t i = 0; i < rp->n; i++) {
		const struct pr_rpage_ref *p = &rp->v[i];
		const struct pr_reader_slot *s = (const struct pr_reader_slot *)(p->hdr + 1);
		uint32_t len = scan_len(p);

		for (uint32_t j = 0; !p->ignored && j < len; j++)
			n += holds(&s[j], target);
	}
	return n;
}

void procreg__rpage_count(const struct pr_rpage_ref *p, uint32_t *slots, uint32_t *active,
			  uint64_t *lookups)
{
	const struct pr_reader_slot *s = (const struct pr_reader_slot *)(p->hdr + 1);
	uint32_t n = scan_len(p);

	for (uint32_t j = 0; j < n; j++) {
		if (!CMM_LOAD_SHARED(s[j].owner))
			continue;
		(*slots)++;
		*active += CMM_LOAD_SHARED(s[j].ctr) != 0;
		*lookups += CMM_LOAD_SHARED(s[j].lookups);
	}
}

int procreg__rpage_check(int fd, struct pr_rpage_ref *ref, const char **why)
{
	struct stat st;
	int seals;

	memset(ref, 0, sizeof(*ref));
	/* The seals first: only a memfd (or another shmem file) has them,
	 * and asking does not reach the file's own operations. fstat() of
	 * any file a client passes could wait: on a FUSE mount, on its
	 * server. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & PAGE_SEALS) != PAGE_SEALS) {
		*why = "reader page not sealed against shrinking, growing and writes";
		return -EPERM;
	}
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_size != PR_RPAGE_SIZE) {
		*why = "not a reader page (a file of one page)";
		return -EBADF;
	}
	/* Sealed, a hole stays a hole: reading one would need a page the
	 * kernel might not find. The header's store made the only page
	 * real. */
	if (lseek(fd, 0, SEEK_HOLE) != PR_RPAGE_SIZE) {
		*why = "reader page not backed";
		return -EPERM;
	}
	ref->dev = st.st_dev;
	ref->ino = st.st_ino;
	return 0;
}

int procreg__rpage_map_checked(int fd, struct pr_rpage_ref *ref, const char **why)
{
	const struct pr_rpage_hdr *h;
	void *p = mmap(NULL, PR_RPAGE_SIZE, PROT_READ, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	h = p;
	if (PR_LOAD_ACQ(&h->magic) != PR_RPAGE_MAGIC || h->layout_version != PR_LAYOUT_VERSION ||
	    h->size_desc != PR_SIZE_DESC) {
		munmap(p, PR_RPAGE_SIZE);
		*why = "reader page of another layout";
		return -EPROTO;
	}
	ref->hdr = h;
	return 0;
}

int procreg__rpage_map(int fd, struct pr_rpage_ref *ref, const char **why)
{
	int err = procreg__rpage_check(fd, ref, why);

	return err ? err : procreg__rpage_map_checked(fd, ref, why);
}

void procreg__rpage_unmap(struct pr_rpage_ref *ref)
{
	if (ref->hdr)
		munmap((void *)ref->hdr, PR_RPAGE_SIZE);
	ref->hdr = NULL;
}
