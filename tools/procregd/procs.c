/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * procs.c - the processes that hold names, and their deaths.
 *
 * Each process that holds at least one name has one entry here and one
 * pidfd in the epoll set, and keeps them a while once it holds none (idle
 * entries, below). The pidfd turns readable when the process exits;
 * the daemon then removes every name it held, one slot store each, a
 * slice at a time with other work in between (deaths, below). A pid is
 * never trusted alone: an entry is
 * (pid, start time[, pidfs inode]) and a request from a process with a
 * known pid but another start time means the old one died unseen.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon.h"
#include "probes.h"

PR_PROBE_DEFINE(procregd, death);

uint64_t procs_wake_clock(void)
{
	return PR_TRACE_CLOCK(procregd, death);
}

/* P starts (DELTA 1) or stops (-1) being counted: in the table's
 * processes, its uid's and, for an unprivileged uid, all such uids'. Idle
 * entries are not counted (below). */
static void count_procs(struct daemon *d, const struct proc *p, int delta)
{
	struct pr_table_hdr *h = d->w.map.hdr;

	CMM_STORE_SHARED(h->processes, h->processes + (uint64_t)(int64_t)delta);
	uid_adjust(&d->uid_procs, p->uid, delta);
	if (!uid_privileged(d, p->uid))
		d->nprocs_unpriv += (uint64_t)(int64_t)delta;
}

struct proc *proc_get(struct daemon *d, pid_t pid)
{
	uint64_t v;

	if (d->last_proc && d->last_proc->pid == pid)
		return d->last_proc;
	/* Keys 0 and 1 are reserved by the map; pids start at 1. */
	if (procreg__u64map_get(&d->procs, (uint64_t)pid + 2, &v) < 0)
		return NULL;
	d->last_proc = (struct proc *)(uintptr_t)v;
	return d->last_proc;
}

/*
 * Idle entries. A process whose last name goes is often about to take
 * another (a lock's name taken and given back, a service re-registering):
 * freed at once, its next registration dup'ed its pidfd and added it to
 * the epoll set again, and the removal before had taken it out and closed
 * it, four system calls. One client on the daemon's CPU registering and
 * removing one name in turn took procregd 4.58-4.76 us of CPU a request,
 * 3.96-4.26 with a name of its own held throughout (three alternating
 * runs of 100,000 requests, /proc/PID/schedstat); idle entries made it
 * 3.20-3.97. So an entry that holds nothing stays, watched, on a list of
 * at most PROCS_IDLE_MAX, the oldest freed to make room: a bound on the
 * pidfds kept for processes holding nothing, whoever makes them. An
 * idle entry is not counted in the table's processes; its process's
 * death frees it and removes nothing; its next name takes it back as it
 * was made, the signal for a lost name unset.
 */
#define PROCS_IDLE_MAX 256

/*
 * Descriptors. Each process watched holds one of the daemon's (its
 * pidfd), and a process holding one name is all it takes: one uid
 * forking 20,500 children and registering each by pidfd took a daemon
 * whose open files limit was 20,000 to 19,999 descriptors, and from then
 * on every new connection, root's too, was reset. So the processes of
 * one uid (its subordinate uids with it) are capped, --max-procs-per-uid,
 * -EDQUOT past it; and those of all uids but root's and procregd's own
 * together, -ENOSPC past that, leaving free the descriptors that the
 * other bounded uses take at most: two a connection (its socket, its
 * pidfd), one a reader process, the idle entries, and FDS_OTHER for the
 * daemon's own files, the bridge's connections and passed files on
 * their way to the closer. Root's processes are not capped: they take
 * what is left.
 *
 * Idle entries count in neither: they are PROCS_IDLE_MAX at most,
 * whoever makes them, and counted among the descriptors kept free. One
 * that takes a name again is counted again, and refused like a new
 * process if its uid has no room.
 *
 * Processes re-attached at start (procs_recover, owners_recover) are
 * not refused: they held their names when the daemon before us stopped,
 * and the limits may be lower now. They count, and their uid is refused
 * new ones until it is under.
 */
#define FDS_OTHER 256

void procs_limits(struct daemon *d)
{
	struct rlimit rl;
	uint64_t fds = 1u << 20, kept;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		fds = rl.rlim_cur;
	kept = 2 * (uint64_t)d->o.max_clients + d->o.max_readers + PROCS_IDLE_MAX + FDS_OTHER;
	d->procs_room = fds > kept ? fds - kept : 0;
	if (d->procs_room < fds / 4) {
		/* Without a bound, one uid could take them all; this one
		 * leaves room for at least some connections. */
		d->procs_room = fds / 4;
		log_warn("open files limit %llu: low for --max-clients %u and --max-readers %u (%llu "
			 "descriptors); processes of users other than root may hold %llu",
			 (unsigned long long)fds, d->o.max_clients, d->o.max_readers,
			 (unsigned long long)kept, (unsigned long long)d->procs_room);
	}
	if (!d->o.max_procs_per_uid_set)
		d->o.max_procs_per_uid = d->procs_room / 4 ? (uint32_t)(d->procs_room / 4) : 1;
}

/* Whether one more process of UID may be watched: 0, -EDQUOT, -ENOSPC. */
static int room_for(struct daemon *d, uid_t uid)
{
	int err = 0;

	if (uid_privileged(d, uid))
		return 0;
	if (uid_count(&d->uid_procs, uid) >= d->o.max_procs_per_uid)
		err = -EDQUOT;
	else if (d->nprocs_unpriv >= d->procs_room)
		err = -ENOSPC;
	d->procs_hit = err != 0;
	return err;
}

static void idle_unlink(struct daemon *d, struct proc *p)
{
	*(p->idle_prev ? &p->idle_prev->idle_next : &d->idle_first) = p->idle_next;
	*(p->idle_next ? &p->idle_next->idle_prev : &d->idle_last) = p->idle_prev;
	p->idle_prev = p->idle_next = NULL;
	p->idle = false;
	d->nidle--;
}

static void proc_free(struct daemon *d, struct proc *p)
{
	/* Never twice, now that entries are freed for room (idle ones) as
	 * well as for deaths: the gone list would loop. */
	if (p->gone)
		return;
	if (d->last_proc == p)
		d->last_proc = NULL;
	if (p->idle)
		idle_unlink(d, p);
	else if (!p->dying) /* a dying one was, as its death began */
		count_procs(d, p, -1);
	procreg__u64map_del(&d->procs, (uint64_t)p->pid + 2);
	if (p->pidfd >= 0) {
		epoll_ctl(d->procs_epfd, EPOLL_CTL_DEL, p->pidfd, NULL);
		close(p->pidfd);
		p->pidfd = -1;
	}
	procreg__vec_free(&p->names);
	/* Not freed yet: its pidfd's event may still be in the batch the
	 * loop is working through (a death, a failed hand-over, a stale pid
	 * can each free another proc). procs_reap() frees it after the
	 * batch; until then it is marked gone. */
	p->gone = true;
	p->next_gone = d->gone;
	d->gone = p;
}

void procs_reap(struct daemon *d)
{
	while (d->gone) {
		struct proc *p = d->gone;

		d->gone = p->next_gone;
		free(p);
	}
}

bool ident_is(const struct ident *id, uint64_t start, uint64_t ino)
{
	if (start != id->start)
		return false;
	return !ino || !id->ino || ino == id->ino;
}

static void death_finish(struct daemon *d, struct proc *p);

/* proc_attach(); CAPPED: refused past the limits on processes. */
static int attach(struct daemon *d, const struct ident *id, bool capped, struct proc **out)
{
	struct proc *p = proc_get(d, id->pid);
	int err;

	/* Set only if this attach is refused for a limit on processes: for
	 * the log line (server.c: note_refused). */
	d->procs_hit = false;
	if (p && p->dying) {
		/* Its death is under way: the asker is that dead process (a
		 * request it sent before it died), or a new one given its pid,
		 * for whom the old entry must be gone first. That is a pid
		 * come round again within a death's removal, rare; finished
		 * at once, it costs a pass of one process's entries at most. */
		if (ident_is(id, p->start, p->ino))
			return -ESRCH;
		death_finish(d, p);
		p = NULL;
	}
	if (p && !ident_is(id, p->start, p->ino)) {
		/* Two processes for one pid: one of them has exited. Usually
		 * the entry's, whose pidfd we have not read yet; but a
		 * connection outlives its process when its socket is passed
		 * on, and then the asker is the dead one and the entry a live
		 * process given the pid since: it keeps its names. */
		if (!procreg__pidfd_exited(p->pidfd))
			return -ESRCH;
		proc_died(d, p);
		if (p->dying && !p->gone) /* not finished already (no memory) */
			death_finish(d, p);
		p = NULL;
	}
	if (p) {
		if (p->idle) {
			if (capped && (err = room_for(d, p->uid)) < 0)
				return err; /* it stays idle */
			idle_unlink(d, p);
			count_procs(d, p, 1);
		}
		*out = p;
		return 0;
	}
	if (capped && (err = room_for(d, id->uid)) < 0)
		return err;
	/* A process already gone (it died with requests queued) is attached
	 * like any other: its pidfd is readable as it joins the set, and
	 * the next wake-up takes back what it was given. Asking the pidfd
	 * first (a poll) spared that work for the rare dead process at the
	 * cost of a system call on every process's first registration. */
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->ev.kind = EV_PROC;
	p->pid = id->pid;
	p->start = id->start;
	p->ino = id->ino;
	p->uid = id->uid;
	p->pidfd = fcntl(id->pidfd, F_DUPFD_CLOEXEC, 3);
	/* Out of descriptors: an idle entry's is worth less than a name. */
	while (p->pidfd < 0 && (errno == EMFILE || errno == ENFILE) && d->idle_first) {
		proc_free(d, d->idle_first);
		p->pidfd = fcntl(id->pidfd, F_DUPFD_CLOEXEC, 3);
	}
	if (p->pidfd < 0) {
		err = -errno;
		free(p);
		return err;
	}
	err = procreg__u64map_put(&d->procs, (uint64_t)p->pid + 2, (uint64_t)(uintptr_t)p);
	if (!err) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &p->ev };

		err = epoll_ctl(d->procs_epfd, EPOLL_CTL_ADD, p->pidfd, &ev) < 0 ? -errno : 0;
	}
	if (err) {
		procreg__u64map_del(&d->procs, (uint64_t)p->pid + 2);
		close(p->pidfd);
		free(p);
		return err;
	}
	count_procs(d, p, 1);
	*out = p;
	return 0;
}

int proc_attach(struct daemon *d, const struct ident *id, struct proc **out)
{
	return attach(d, id, true, out);
}

uint64_t uid_count(const struct pr_u64map *m, uid_t uid)
{
	uint64_t v = 0;

	return procreg__u64map_get(m, (uint64_t)subuid_owner(uid) + 2, &v) < 0 ? 0 : v;
}

void uid_adjust(struct pr_u64map *m, uid_t uid, int64_t delta)
{
	/* In place: one probe of the map on every registration and removal,
	 * not a get and then a put. */
	uint64_t key = (uint64_t)subuid_owner(uid) + 2;
	uint64_t *ref = procreg__u64map_ref(m, key);
	uint64_t v = (ref ? *ref : 0) + (uint64_t)delta;

	/* A failed put (no memory) loses count: the quota errs generous. */
	if ((int64_t)v <= 0) {
		if (ref)
			procreg__u64map_del(m, key);
	} else if (ref) {
		*ref = v;
	} else {
		procreg__u64map_put(m, key, v);
	}
}

bool uid_may_add(const struct daemon *d, const struct proc *p)
{
	return uid_privileged(d, p->uid) || uid_count(&d->uid_names, p->uid) < d->o.max_names_per_uid;
}

/*
 * Where each owned record is in its owner's list of names: one u32 per
 * PR_RECORD_MIN bytes of table, the record at OFF's at OFF / PR_RECORD_MIN.
 * No two records share an element: records never overlap and none is
 * shorter than PR_RECORD_MIN, so two of them start at least that far apart.
 * An element is believed only where the list it names holds OFF at that
 * place: a removed record's element is left as it was, and read back it
 * names a place that holds something else (or nothing).
 *
 * Not a hash map from offset to place: that took a cache miss at a
 * random line for each new name and each removal, where records are
 * allocated in address order and so are their elements here. Into a table
 * of 10^6 names, procregd's CPU time a pipelined registration went from
 * 397-583 ns to 240-370, and the daemon's memory from 25.7 to 15.4 bytes
 * a name (procreg-bench register --prefill 1000000; memory).
 *
 * Private anonymous memory; only the pages of elements ever written are
 * backed: 4 bytes for each PR_RECORD_MIN bytes of records, at most. It is
 * reserved whole at start (procs_start: a 1 GiB table's takes 85 MiB of
 * address space, a 64 GiB one's 5.3 GiB), with MAP_NORESERVE, so that a
 * registration never needs a new mapping, which fails once the daemon
 * has vm.max_map_count of them. Where the system charges even that
 * against its commit limit (vm.overcommit_memory 2), or the reservation
 * fails, it is grown by mremap instead (page tables move; nothing is
 * copied).
 */
static uint32_t *owned_at(struct daemon *d, uint64_t off)
{
	uint64_t i = off / PR_RECORD_MIN;

	return i < d->owned_cap ? &d->owned[i] : NULL;
}

int proc_owned_room(struct daemon *d, uint64_t off)
{
	/* No record starts past the table's end: the array never needs to
	 * be longer, and doubling stops there (it is all charged against
	 * the commit limit where the system keeps one). */
	size_t need = (size_t)(off / PR_RECORD_MIN) + 1, cap, bytes;
	size_t most = (size_t)(d->w.map.size / PR_RECORD_MIN) + 1;
	void *p;

	if (need <= d->owned_cap)
		return 0;
	if (need > most)
		return -EINVAL;
	cap = d->owned_cap ? d->owned_cap : (size_t)sysconf(_SC_PAGESIZE) / sizeof(uint32_t);
	while (cap < need)
		cap *= 2;
	if (cap > most)
		cap = most;
	bytes = cap * sizeof(uint32_t);
	if (d->owned)
		p = mremap(d->owned, d->owned_cap * sizeof(uint32_t), bytes, MREMAP_MAYMOVE);
	else
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	d->owned = p;
	d->owned_cap = cap;
	return 0;
}

/* vm.overcommit_memory is 2: every private writable mapping is charged
 * whole, MAP_NORESERVE or not. */
static bool strict_overcommit(void)
{
	char c = 0;
	int fd = open("/proc/sys/vm/overcommit_memory", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return true; /* unknown: charge nothing up front */
	if (read(fd, &c, 1) != 1)
		c = '2';
	close(fd);
	return c == '2';
}

void procs_start(struct daemon *d)
{
	size_t cap = (size_t)(d->w.map.size / PR_RECORD_MIN) + 1;
	void *p;

	d->dying_resume_ns = UINT64_MAX;
	if (d->owned || strict_overcommit())
		return;
	p = mmap(NULL, cap * sizeof(uint32_t), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return; /* grown as needed */
	d->owned = p;
	d->owned_cap = cap;
}

static void owned_free(struct daemon *d)
{
	if (d->owned)
		munmap(d->owned, d->owned_cap * sizeof(uint32_t));
	d->owned = NULL;
	d->owned_cap = 0;
}

int proc_add_name(struct daemon *d, struct proc *p, uint64_t off)
{
	int err = proc_owned_room(d, off);

	if (!err)
		err = procreg__vec_push(&p->names, off);
	if (err)
		return err;
	*owned_at(d, off) = (uint32_t)(p->names.n - 1);
	uid_adjust(&d->uid_names, p->uid, 1);
	return 0;
}

/* OFF's owner, and OFF's place in its list (*IDX); NULL if no process
 * holds OFF. */
static struct proc *owner_of(struct daemon *d, uint64_t off, uint32_t *idx)
{
	struct proc *p = proc_get(d, (pid_t)rec(d, off)->pid);
	const uint32_t *at = owned_at(d, off);

	if (!p || !at || *at >= p->names.n || p->names.v[*at] != off)
		return NULL;
	*idx = *at;
	return p;
}

void proc_replace_name(struct daemon *d, uint64_t old_off, uint64_t new_off)
{
	uint32_t idx;
	struct proc *p = owner_of(d, old_off, &idx);

	if (!p)
		return;
	p->names.v[idx] = new_off;
	*owned_at(d, new_off) = idx;
}

/* Forget OFF in its owner's list: swap the last name into its place. */
static struct proc *unlink_name(struct daemon *d, uint64_t off)
{
	uint32_t idx;
	struct proc *p = owner_of(d, off, &idx);
	uint64_t last;

	if (!p)
		return NULL;
	last = p->names.v[--p->names.n];
	if (idx < p->names.n) {
		p->names.v[idx] = last;
		*owned_at(d, last) = idx;
	}
	uid_adjust(&d->uid_names, p->uid, -1);
	return p;
}

struct proc *proc_forget_name(struct daemon *d, uint64_t off)
{
	return unlink_name(d, off);
}

void proc_forget_last(struct daemon *d, struct proc *p, size_t n)
{
	uid_adjust(&d->uid_names, p->uid, -(int64_t)n);
	p->names.n -= n;
}

void proc_release_if_empty(struct daemon *d, struct proc *p)
{
	/* A dying entry is freed when its death is out (procs_dying_work). */
	if (!p || p->names.n || p->waiting || p->idle || p->gone || p->dying)
		return;
	if (d->nidle >= PROCS_IDLE_MAX)
		proc_free(d, d->idle_first);
	owners_signal_clear(d, p, false);
	p->idle = true;
	p->idle_prev = d->idle_last;
	*(d->idle_last ? &d->idle_last->idle_next : &d->idle_first) = p;
	d->idle_last = p;
	d->nidle++;
	count_procs(d, p, -1);
}

/*
 * Deaths, a slice at a time. A process may hold 65,536 names and
 * memberships (--max-names-per-proc), and a uid four such processes
 * (--max-names-per-uid): taken out in one pass when they died together,
 * every other user's request waited 42-65 ms for the pass (a register and
 * unregister pair behind the deaths of 262,144 entries, leased ones
 * costing a journal write each), and the pass put every DIED event in the
 * feed at once, turning its ring (8,192 events) over 32 times before any
 * follower could read: a follower that had kept up lost 55,572 of a
 * single process's 65,536 events. Sliced and paced, the same pair waited
 * 2.6-4.1 ms at most, as it did with no deaths (2.7-4.3), and behind
 * root's such deaths, not paced, 2.1-3.7 ms (Release builds, three runs
 * each).
 *
 * So a death begins at once: its process leaves every line, its pidfd is
 * closed, and it is put last on its uid's dying list. Its entries go
 * DEATH_SLICE a pass of the event loop at most, taken from the end of its
 * list, with the requests, frames and timers of the pass in between;
 * the loop does not sleep while any can go on. And the events of an
 * unprivileged uid's deaths are paced like those of its requests
 * (server.c: the feed's pacing): when its uid has made more than it has
 * paid for, a dying process waits for its turn, the timer's. A uid that
 * made none for a while still has half a ring at once, so a few thousand
 * names of a crashed service leave within the pass that saw it die; the
 * rest leave at --max-feed-rate-per-uid a second, as fast as that uid
 * could have made them.
 *
 * A dying entry stays in d->procs under its pid, so that what removes one
 * of its entries meanwhile (a lease run out, a conflict lost, a name
 * replaced) finds its place in its list (owner_of). A new process given
 * the pid has the old one's removal finished first (attach). A SYNC
 * waits for deaths under way (procs_sync).
 */
#define DEATH_SLICE 512

/* The deaths under way of one uid's processes (subuid.c: its owner's,
 * whose pace they share), oldest first; on d->dying while it has any.
 * A pass looks at each such uid, not at each dying process: one user's
 * many processes dying together, paced, cost a pass one look. */
struct dying_uid {
	uid_t owner;
	struct proc *first, *last;
	struct dying_uid *next;
};

static struct dying_uid *dying_of(const struct daemon *d, uid_t owner)
{
	struct dying_uid *u = d->dying;

	while (u && u->owner != owner)
		u = u->next;
	return u;
}

static void dying_unlink(struct daemon *d, struct proc *p)
{
	struct dying_uid *u = p->dying_in, **at;

	if (!u)
		return;
	*(p->dying_prev ? &p->dying_prev->dying_next : &u->first) = p->dying_next;
	*(p->dying_next ? &p->dying_next->dying_prev : &u->last) = p->dying_prev;
	p->dying_prev = p->dying_next = NULL;
	p->dying_in = NULL;
	if (u->first)
		return;
	for (at = &d->dying; *at != u; at = &(*at)->next)
		;
	*at = u->next;
	free(u);
}

/* Up to MOST of dying P's entries out, its uid charged for their events:
 * how many went. */
static size_t death_slice(struct daemon *d, struct proc *p, size_t most)
{
	uint64_t h0 = d->w.map.hdr->feed_head;
	size_t n = registry_died(d, p, most);

	server_feed_charge(d, p->uid, h0);
	p->died_n += n;
	return n;
}

/* Its entries all out: counted, traced, freed. */
static void death_end(struct daemon *d, struct proc *p)
{
	dying_unlink(d, p);
	if (p->died_n)
		registry_death_counted(d);
	PR_TRACE(procregd, death, p->pid, p->died_n,
		 p->died_wake_ns ? procreg__mono_ns() - p->died_wake_ns : 0);
	LOGV(d, "pid %d: exited, %llu name%s and membership%s removed", (int)p->pid,
	     (unsigned long long)p->died_n, p->died_n == 1 ? "" : "s", p->died_n == 1 ? "" : "s");
	proc_free(d, p);
}

/* Every entry of dying P out now, whatever its uid's pace. */
static void death_finish(struct daemon *d, struct proc *p)
{
	while (death_slice(d, p, SIZE_MAX))
		;
	death_end(d, p);
}

void proc_died(struct daemon *d, struct proc *p)
{
	uid_t owner = subuid_owner(p->uid);
	struct dying_uid *u;

	if (p->gone || p->dying)
		return;
	if (p->idle) {
		proc_free(d, p); /* it held nothing */
		return;
	}
	p->dying = true;
	/* No longer a process watched: its descriptor goes now, and the
	 * limits on processes count descriptors (procs_limits). */
	count_procs(d, p, -1);
	p->died_seq = ++d->deaths_begun;
	p->died_wake_ns = d->wake_ns;
	/* Read: it would be readable at every wait from now on. */
	epoll_ctl(d->procs_epfd, EPOLL_CTL_DEL, p->pidfd, NULL);
	close(p->pidfd);
	p->pidfd = -1;
	if (d->last_proc == p)
		d->last_proc = NULL;
	/* Out of every line before any of its names is passed on. */
	owners_proc_gone(d, p);
	u = dying_of(d, owner);
	if (!u && (u = calloc(1, sizeof(*u)))) {
		u->owner = owner;
		u->next = d->dying;
		d->dying = u;
	}
	if (!u) {
		/* No memory to keep it for later: in one pass, as a death
		 * was before slices. */
		death_finish(d, p);
		return;
	}
	p->dying_in = u;
	p->dying_prev = u->last;
	*(u->last ? &u->last->dying_next : &u->first) = p;
	u->last = p;
	d->dying_ready = true;
}

/* U's deaths, from its oldest, within *LEFT entries, as long as its pace
 * allows; then the loop's timer is set for its turn (d->dying_resume_ns).
 * U is freed with its last death. */
static void dying_uid_work(struct daemon *d, struct dying_uid *u, size_t *left)
{
	while (*left) {
		struct proc *p = u->first;
		bool last = p == u->last;

		if (p->names.n) {
			uint64_t until = server_feed_paced(d, p->uid);

			if (until) {
				if (until < d->dying_resume_ns)
					d->dying_resume_ns = until;
				return;
			}
			*left -= death_slice(d, p, *left);
		}
		if (!p->names.n) {
			death_end(d, p);
			if (last)
				return;
		}
	}
}

void procs_dying_work(struct daemon *d)
{
	size_t left = DEATH_SLICE;

	d->dying_ready = false;
	d->dying_resume_ns = UINT64_MAX;
	for (struct dying_uid *u = d->dying, *next; u && left; u = next) {
		next = u->next;
		dying_uid_work(d, u, &left);
	}
	if (!left && d->dying) {
		d->dying_ready = true;
		/* The next pass starts with the next uid: one user's deaths
		 * do not keep another's waiting for all of theirs. */
		if (d->dying->next) {
			struct dying_uid *u = d->dying, *t = u;

			while (t->next)
				t = t->next;
			d->dying = u->next;
			u->next = NULL;
			t->next = u;
		}
	}
	/* Clients whose SYNC waits: a death ended, or a uid's pace now
	 * holds its deaths back, which they do not wait for. */
	if (d->held)
		server_release_held(d, false);
}

void procs_dying_finish(struct daemon *d)
{
	uint64_t n = 0;

	for (; d->dying; n++)
		death_finish(d, d->dying->first);
	if (n)
		log_msg("%llu death%s under way finished", (unsigned long long)n, n == 1 ? "" : "s");
	d->dying_ready = false;
	d->dying_resume_ns = UINT64_MAX;
	/* Their SYNCs answered before the connections close. */
	server_release_held(d, true);
}

/*
 * A SYNC waits for the deaths before it, slice by slice with everyone
 * else's requests, not for them to be finished at once: that would be
 * the single pass again, at any client's asking. It does not wait for
 * another uid's deaths while that uid's pace holds them back: one user
 * could otherwise hold another's SYNC for as long as its names take to
 * leave at its pace (seconds: 262,144 at 65,536 a second).
 */
bool procs_sync_waits(struct daemon *d, uid_t uid, uint64_t seq)
{
	uid_t owner = subuid_owner(uid);

	for (const struct dying_uid *u = d->dying; u; u = u->next)
		if (u->first->died_seq <= seq &&
		    (u->owner == owner || !server_feed_paced(d, u->first->uid)))
			return true;
	return false;
}

uint64_t procs_sync(struct daemon *d, uid_t uid)
{
	procs_drain_deaths(d);
	return procs_sync_waits(d, uid, d->deaths_begun) ? d->deaths_begun : 0;
}

void procs_drain_deaths(struct daemon *d)
{
	struct epoll_event evs[64];
	/* Only pidfds are in the set: a dead process's leaves it as its
	 * death begins (proc_died), so the waits end when every pidfd
	 * readable now has been seen. The bound is for a pidfd that would
	 * stay. */
	uint32_t rounds = (uint32_t)d->procs.used / 64 + 2;
	int n;

	do {
		n = epoll_wait(d->procs_epfd, evs, 64, 0);
		d->wake_ns = procs_wake_clock();
		for (int i = 0; i < n; i++)
			proc_died(d, (struct proc *)evs[i].data.ptr);
	} while (n == 64 && --rounds);
}

/* ---- recovery --------------------------------------------------------- */

#define DEAD ((struct proc *)1)

struct recover_ctx {
	struct daemon *d;
	struct pr_u64map seen;    /* pid -> struct proc *, or DEAD */
	bool other_boot;
	uint64_t kept, dropped;
};

int proc_verify(struct daemon *d, pid_t pid, uint64_t start, uint64_t ino, struct proc **out)
{
	struct ident id = { .pid = pid, .pidfd = -1 };
	pid_t got;
	uid_t uid;
	int err = -ESRCH;

	id.pidfd = procreg__pidfd_open(id.pid);
	if (id.pidfd < 0)
		return -ESRCH;
	if (procreg__pidfd_identity(id.pidfd, &got, &id.start, &id.ino) == 0 &&
	    id.start == start && (!ino || !id.ino || id.ino == ino) &&
	    procreg__proc_uid(got, &uid) == 0) {
		id.uid = uid;
		err = attach(d, &id, false, out);
	}
	close(id.pidfd);
	return err;
}

static struct proc *verify(struct recover_ctx *c, const struct pr_record *r)
{
	struct proc *p;

	if (c->other_boot || proc_verify(c->d, (pid_t)r->pid, r->start_time, r->aux, &p) < 0)
		return DEAD;
	return p;
}

static int recover_one(uint64_t off, const struct pr_record *r, void *arg)
{
	struct recover_ctx *c = arg;
	uint64_t v;
	struct proc *p;

	if (r->node != 0) {
		/* Remote entries belong to the bridge, which resyncs them.
		 * Their names are noted for owners_recover(): one that a
		 * local process waits for is not its to take yet. */
		if (r->kind == PR_KIND_NAME)
			owners_remote_dropped(c->d, r->data, r->name_len);
		procreg__w_unpublish(&c->d->w, off);
		c->dropped++;
		return 0;
	}
	if (procreg__u64map_get(&c->seen, (uint64_t)r->pid + 2, &v) == 0) {
		p = (struct proc *)(uintptr_t)v;
		if (p != DEAD && p->start != r->start_time)
			p = DEAD; /* an older process with the same pid */
	} else {
		p = verify(c, r);
		procreg__u64map_put(&c->seen, (uint64_t)r->pid + 2, (uint64_t)(uintptr_t)p);
	}
	if (p == DEAD || proc_add_name(c->d, p, off) < 0) {
		procreg__w_unpublish(&c->d->w, off);
		procreg__w_emit(&c->d->w, PROCREG_EV_DIED, r);
		c->dropped++;
	} else {
		c->kept++;
	}
	return 0;
}

int procs_recover(struct daemon *d)
{
	struct recover_ctx c = { .d = d };
	uint8_t boot[16];
	int err;

	procreg__boot_id(boot);
	c.other_boot = memcmp(boot, d->w.map.hdr->boot_id, 16) != 0;
	if (c.other_boot) {
		log_msg("table %s: written in another boot: dropping its names", d->paths.table);
		memcpy(d->w.map.hdr->boot_id, boot, 16);
	}
	CMM_STORE_SHARED(d->w.map.hdr->processes, 0);
	err = procreg__w_walk(&d->w, recover_one, &c);
	procreg__u64map_free(&c.seen);
	log_msg("table %s: re-attached: %llu names and memberships kept, %llu of dead owners removed",
		d->paths.table, (unsigned long long)c.kept, (unsigned long long)c.dropped);
	return err;
}

/* ---- names lost to another node ------------------------------------------ */

void proc_lost_name(struct daemon *d, uint64_t off, const char *node, pid_t winner)
{
	const struct pr_record *r = rec(d, off);
	struct lost_notice *n = calloc(1, sizeof(*n));
	uint32_t idx;
	struct proc *p = owner_of(d, off, &idx);

	if (!n) {
		log_warn("name '%.*s': out of memory: its owner pid %u is not told it lost it",
			(int)r->name_len, r->data, r->pid);
		return;
	}
	n->pid = (pid_t)r->pid;
	n->start = r->start_time;
	n->ino = r->aux;
	n->pidfd = -1;
	n->winner = winner;
	n->time_ns = procreg__now_ns();
	memcpy(n->name, r->data, r->name_len);
	snprintf(n->node, sizeof(n->node), "%s", node);
	/* The proc may be gone by the end of the batch (this was its last
	 * name): the signal goes through a pidfd of our own. */
	if (p && p->lost_signal && p->pidfd >= 0) {
		n->pidfd = fcntl(p->pidfd, F_DUPFD_CLOEXEC, 3);
		n->sig = p->lost_signal;
	}
	if (!d->lost_tail)
		d->lost_tail = &d->lost;
	*d->lost_tail = n;
	d->lost_tail = &n->next;
}

void procs_tell_lost(struct daemon *d)
{
	while (d->lost) {
		struct lost_notice *n = d->lost;
		char what[96] = "";

		d->lost = n->next;
		server_notice_lost(d, n);
		if (n->pidfd >= 0) {
			if (syscall(SYS_pidfd_send_signal, n->pidfd, n->sig, NULL, 0) == 0)
				snprintf(what, sizeof(what), ", sent SIG%s", sigabbrev_np(n->sig) ?: "?");
			else
				snprintf(what, sizeof(what), ", signal %d not sent: %s", n->sig,
					 strerror(errno));
			close(n->pidfd);
		}
		log_msg("name '%s': pid %d told it lost it to node %s's pid %d%s", n->name,
			(int)n->pid, n->node, (int)n->winner, what);
		free(n);
	}
	d->lost_tail = &d->lost;
}

void procs_free_all(struct daemon *d)
{
	for (size_t i = 0; i < d->procs.cap; i++) {
		if (d->procs.kv && d->procs.kv[i].key > 1) {
			struct proc *p = (struct proc *)(uintptr_t)d->procs.kv[i].val;

			if (p->pidfd >= 0)
				close(p->pidfd);
			procreg__vec_free(&p->names);
			free(p);
		}
	}
	procreg__u64map_free(&d->procs);
	while (d->dying) {
		struct dying_uid *u = d->dying;

		d->dying = u->next;
		free(u);
	}
	d->last_proc = NULL;
	d->idle_first = d->idle_last = NULL;
	d->nidle = 0;
	owned_free(d);
	procs_reap(d);
	procreg__u64map_free(&d->uid_names);
	procreg__u64map_free(&d->uid_procs);
	d->nprocs_unpriv = 0;
	procreg__u64map_free(&d->uid_clients);
	procreg__u64map_free(&d->uid_closing);
	while (d->lost) {
		struct lost_notice *n = d->lost;

		d->lost = n->next;
		if (n->pidfd >= 0)
			close(n->pidfd);
		free(n);
	}
}
