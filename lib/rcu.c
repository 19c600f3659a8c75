/*
 * rcu.c - read-copy-update across processes.
 *
 * liburcu's flavors keep their reader registry in process memory, where the
 * daemon cannot see readers of other processes. This file keeps the same
 * design with the registry in a shared file (procreg.<scope>.readers):
 *
 *  - Each reader thread claims a slot (one cache line) on its first read
 *    and releases it at thread exit; a forked child claims its own.
 *  - Read lock stores the current grace-period counter gp in the slot;
 *    read unlock stores 0. Like liburcu's memb flavor, the reader orders
 *    those stores with compiler barriers only: the daemon issues
 *    membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) before it scans, which
 *    runs a full barrier on every CPU executing a registered reader. A
 *    process whose membarrier registration fails uses full barriers itself
 *    (liburcu's mb flavor), so mixing the two is safe.
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
 *  - A slot records its owner's pid, tid and start time, as LMDB's reader
 *    table does; the daemon clears the slots of dead owners, so a reader
 *    SIGKILLed inside its critical section holds up reclamation only until
 *    the next reap.
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
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

int procreg__rcu_use_membarrier;

/* Our pid, refreshed in the child after fork(): a slot or connection made
 * by the parent is never used by the child. Read without a syscall. */
static pid_t self_pid;
static uint64_t self_start;
static pthread_once_t once = PTHREAD_ONCE_INIT;

struct pr_rcu_thread {
	struct pr_rcu_thread *next;
	struct pr_rcu *rcu;
	struct pr_reader_slot *slot;
	pid_t pid;
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
		!getenv("PROCREG_NO_MEMBARRIER") &&
		membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0) == 0;
}

static void refresh_self(void)
{
	self_pid = getpid();
	if (procreg__proc_start_time(self_pid, &self_start) < 0)
		self_start = 0;
	register_membarrier();
}

static void atfork_child(void)
{
	refresh_self();
}

static void init_once(void)
{
	refresh_self();
	pthread_atfork(NULL, NULL, atfork_child);
}

pid_t procreg__self_pid(void);
pid_t procreg__self_pid(void)
{
	pthread_once(&once, init_once);
	return self_pid;
}

static void release_slot(struct pr_reader_slot *s)
{
	CMM_STORE_SHARED(s->ctr, 0);
	/* A free slot holds no start time: the next owner stores its own
	 * only after its claim, and until then the daemon must not judge it
	 * by ours (another process's start time would make it look dead). */
	CMM_STORE_SHARED(s->start, 0);
	PR_STORE_REL(&s->owner, 0);
}

/* Thread exit: give the slot back, if this process claimed it. */
static void thread_exit(void *p)
{
	struct pr_rcu_thread *t = p, **pp;
	struct pr_rcu *r = t->rcu;

	if (t->pid == self_pid && t->slot)
		release_slot(t->slot);
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
	err = pthread_key_create(&r->key, thread_exit);
	if (err)
		return -err;
	pthread_mutex_init(&r->lock, NULL);
	return 0;
}

void procreg__rcu_fini(struct pr_rcu *r)
{
	struct pr_rcu_thread *t, *n;

	pthread_key_delete(r->key);
	for (t = r->threads; t; t = n) {
		n = t->next;
		if (t->pid == self_pid && t->slot)
			release_slot(t->slot);
		free(t);
	}
	r->threads = NULL;
	pthread_mutex_destroy(&r->lock);
}

static struct pr_reader_slot *claim(struct pr_map *m)
{
	uint64_t owner = (uint64_t)self_pid << 32 | (uint32_t)syscall(SYS_gettid);

	/* Lowest free slot first, so that live slots cluster at the front
	 * and the daemon's scan stays short. */
	for (uint32_t i = 0; i < m->nslots; i++) {
		struct pr_reader_slot *s = &m->slots[i];

		if (PR_LOAD_RELAXED(&s->owner) != 0)
			continue;
		if (uatomic_cmpxchg(&s->owner, 0, owner) != 0)
			continue;
		CMM_STORE_SHARED(s->ctr, 0);
		CMM_STORE_SHARED(s->lookups, 0);
		CMM_STORE_SHARED(s->start, self_start);
		return s;
	}
	return NULL;
}

struct pr_reader_slot *procreg__rcu_slot(struct pr_rcu *r)
{
	struct pr_rcu_thread *t = pthread_getspecific(r->key);

	if (caa_likely(t && t->pid == self_pid))
		return t->slot;
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
	t->pid = self_pid;
	t->slot = claim(r->map);
	return t->slot;
}

/* ---- writer side ------------------------------------------------------ */

int procreg__membarrier_expedited(void)
{
	int q = membarrier(MEMBARRIER_CMD_QUERY, 0);

	/* Asked, and tried: a sandbox may answer the query yet refuse the
	 * call. */
	return q >= 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
	       !getenv("PROCREG_NO_MEMBARRIER") &&
	       membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0) == 0;
}

uint64_t procreg__gp_start(struct pr_map *m, uint64_t *gp, bool use_membarrier)
{
	uint64_t target = *gp + 1;

	/* Order the unpublishing stores that retired memory before the new
	 * counter value, then make every reader's slot store visible. */
	cmm_smp_mb();
	CMM_STORE_SHARED(m->rhdr->gp, target);
	if (use_membarrier && membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0) < 0)
		return 0; /* readers rely on it: no grace period without it */
	cmm_smp_mb();
	*gp = target;
	return target;
}

int procreg__gp_poll(const struct pr_map *m, uint64_t target, uint32_t *blocker)
{
	for (uint32_t i = 0; i < m->nslots; i++) {
		uint64_t c = CMM_LOAD_SHARED(m->slots[i].ctr);

		if (c != 0 && c < target) {
			if (blocker)
				*blocker = i;
			return 0;
		}
	}
	/* Our later frees must not be reordered before the scan. */
	cmm_smp_mb();
	return 1;
}

/* 1 only on proof that the thread has exited and awaits reaping (state Z
 * or X in its stat file); 0 if it runs, or if we cannot tell. */
static int thread_zombie(pid_t pid, pid_t tid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* The state follows the command name, which may hold ')'. */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

int procreg__reader_alive(uint64_t owner, uint64_t start)
{
	pid_t pid = (pid_t)(owner >> 32), tid = (pid_t)(owner & 0xffffffff);
	uint64_t now;

	if (pid <= 0)
		return 0;
	if (syscall(SYS_tgkill, pid, tid, 0) < 0 && errno == ESRCH)
		return 0;
	/* The pid may have been reused by a process that happens to have a
	 * thread with the same tid: the start time tells them apart. */
	if (start && (procreg__proc_start_time(pid, &now) < 0 || now != start))
		return 0;
	/* tgkill finds a zombie too: a reader killed inside its critical
	 * section stays one until its parent waits for it, which may be
	 * never. A zombie has no memory and runs nothing: it reads no more. */
	if (thread_zombie(pid, tid))
		return 0;
	return 1;
}

/* An owner word no claim can match (claims swap from 0) and no live
 * thread has: a slot being cleared. */
#define REAPING (1ull << 63)

int procreg__readers_reap(struct pr_map *m, pr_log_fn log)
{
	int n = 0;

	for (uint32_t i = 0; i < m->nslots; i++) {
		struct pr_reader_slot *s = &m->slots[i];
		/* Acquire: a start time read after a new owner's claim is 0
		 * (see release_slot) or the new owner's own, never the
		 * previous owner's. */
		uint64_t owner = PR_LOAD_ACQ(&s->owner);
		uint64_t start = CMM_LOAD_SHARED(s->start);

		if (!owner || (owner & REAPING) || procreg__reader_alive(owner, start))
			continue;
		/* Take the slot from the dead owner before touching it: had
		 * the owner released it meanwhile and a new thread claimed
		 * it, clearing ctr now would hide a live reader. */
		if (uatomic_cmpxchg(&s->owner, owner, owner | REAPING) != owner)
			continue;
		CMM_STORE_SHARED(s->ctr, 0);
		CMM_STORE_SHARED(s->start, 0);
		PR_STORE_REL(&s->owner, 0);
		n++;
		if (log)
			log("slot %u: pid %d tid %d: owner dead, cleared", i,
			    (int)(owner >> 32), (int)(owner & 0xffffffff));
	}
	return n;
}
