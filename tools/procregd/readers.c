/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * readers.c - the reader processes whose pages grace periods wait for.
 *
 * A reading process hands its reader pages over (READERS, one sealed memfd
 * a packet: lib/rcu.c says why they are memfds). Each process that did has
 * one entry here, with its pidfd in the epoll set: when it exits, its pages
 * are unmapped and grace periods stop waiting for them. A page its process
 * marks closed (its handle was closed) is dropped at the next refresh.
 *
 * A reader can only hurt itself. One that holds a grace period up for
 * longer than --reader-timeout-ms (stopped in a debugger, or pinning a
 * slot on purpose) is no longer waited for, for as long as it lives: the
 * daemon logs it once, marks it in the table's reader registry (procreg
 * readers) and counts it in the header (procreg stats). Its lookups stay
 * correct (they check for reuse: rcu.c); they may have to retry.
 *
 * A uid whose reader was given up on has lost the benefit of the doubt:
 * for SUSPECT_NS after, each of its readers that holds a grace period up
 * for SUSPECT_HOLD_NS is given up on, not after the whole timeout. Else a
 * user could start one process after another, each pinning a slot once
 * the last was given up on, and hold every grace period up for as long as
 * it liked, while its own churn retired memory that nothing freed
 * meanwhile: the table filled, and other users' names were refused (a 96
 * MiB table, one user churning 4,000 names at 5-7 M events/s: 120 of 275
 * of another user's registrations refused; with holds cut to a sixteenth
 * of the timeout still 8 of 280, the relay's next process pinning at
 * once; with this, none). What the relay holds up is then what a few
 * milliseconds of churn retire. A reader of that uid caught inside a
 * lookup is only the worse for it: not waited for, its lookups check for
 * reuse.
 *
 * Fair shares: at most --max-readers-per-uid reader processes a uid, and
 * other uids together leave an eighth of --max-readers to root and to the
 * daemon's own user. A refused page leaves its process reading
 * unprotected, never wrong.
 *
 * Pages are budgeted too, not only processes: each page is a mapping of
 * its own (pages of different memfds never merge), and a process may
 * have vm.max_map_count of them (65530 by default), past which every
 * mmap and moving mremap of the daemon's fails: the table's, malloc's,
 * root's registrations'. So at most --max-reader-pages pages are mapped,
 * half of vm.max_map_count as read at start (or fewer, if asked): the
 * other half is for the daemon's own mappings. Other uids together leave
 * an eighth of it to root and the daemon's user, and a uid has at most
 * --max-reader-pages-per-uid (root and the daemon's user: no limit but
 * the budget). 4096 processes with 64 pages each would be 262144
 * mappings; legitimate readers have one page for each 63 reading threads
 * of each handle, so the budget is generous for them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "daemon.h"

struct reader {
	struct ev ev;             /* EV_READER: its pidfd, readable at exit */
	pid_t pid;
	uid_t uid;
	uint64_t start, ino;      /* which process: ident_is() */
	int pidfd;
	uint32_t info;            /* its entry in the table's registry */
	uint32_t pages;
	uint64_t registered_ns;
	/* Summed over its pages by readers_refresh(). */
	uint32_t slots, active;
	uint64_t lookups;
	bool stalled;             /* no longer waited for */
	bool gone;
	struct reader *next, *prev;
	struct reader *next_gone;
};

#define REFRESH_NS 1000000000ull
/* A page refused for want of room first drops the pages marked closed
 * (readers_refresh, a pass over every page), but not more often than
 * this: a client that keeps sending pages over its limit must not have
 * the daemon scan all pages for each. */
#define REFRESH_FORCED_NS 100000000ull
#define DEFAULT_MAX_MAP_COUNT 65530
#define SUSPECT_NS (60 * 1000000000ull)
#define SUSPECT_HOLD_NS 2000000ull  /* a tick while memory waits (main.c) */

static struct pr_reader_info *info_at(struct daemon *d, uint32_t i)
{
	struct pr_table_hdr *h = d->w.map.hdr;

	return (struct pr_reader_info *)(d->w.map.base + h->readers_off) + i;
}

/* Rewrite entry I under its seq: odd while the fields change, so that a
 * reader of the registry (procreg readers) sees one version or retries. */
static void info_begin(struct pr_reader_info *e)
{
	CMM_STORE_SHARED(e->seq, e->seq + 1);
	cmm_smp_wmb();
}

static void info_end(struct pr_reader_info *e)
{
	cmm_smp_wmb();
	CMM_STORE_SHARED(e->seq, e->seq + 1);
}

static void info_write(struct daemon *d, struct reader *r)
{
	struct pr_reader_info *e = info_at(d, r->info);

	info_begin(e);
	e->pid = (uint32_t)r->pid;
	e->uid = r->uid;
	e->start = r->start;
	e->pages = (uint16_t)r->pages;
	e->flags = r->stalled ? PR_READER_STALLED : 0;
	e->registered_ns = r->registered_ns;
	info_end(e);
}

static void count_live(struct daemon *d)
{
	struct pr_table_hdr *h = d->w.map.hdr;

	CMM_STORE_SHARED(h->readers_live, d->nreaders);
	CMM_STORE_SHARED(h->readers_stalled, d->nreaders_stalled);
}

static void log_refused(struct daemon *d, const struct ident *id, const char *why)
{
	struct pr_table_hdr *h = d->w.map.hdr;

	CMM_STORE_SHARED(h->readers_refused, h->readers_refused + 1);
	log_limited(&d->readers_log, "reader pages refused",
		    "reader page of pid %d (uid %u) refused: %s; its lookups stay correct, "
		    "unprotected", (int)id->pid, (unsigned)id->uid, why);
}

/* The entry for the process ID names, if there is one. */
static struct reader *reader_of(struct daemon *d, const struct ident *id)
{
	uint64_t v;
	struct reader *r;

	if (procreg__u64map_get(&d->readers, (uint64_t)id->pid + 2, &v) < 0)
		return NULL;
	r = (struct reader *)(uintptr_t)v;
	return ident_is(id, r->start, r->ino) ? r : NULL;
}

/* Why one more page of ID's may not be mapped, or NULL if it may. */
static const char *page_refusal(struct daemon *d, const struct ident *id)
{
	const struct reader *r = reader_of(d, id);
	size_t n = d->w.readers.n;

	if (r && r->pages >= PR_RPAGES_MAX)
		return "the process has 64 pages (4032 reading threads) already";
	if (!uid_privileged(d, id->uid)) {
		if (uid_count(&d->uid_rpages, id->uid) >= d->o.max_reader_pages_per_uid)
			return "its uid has --max-reader-pages-per-uid pages";
		if (n >= d->rpages_max - d->rpages_max / 8)
			return "the reader pages of other users fill all but the eighth of "
			       "--max-reader-pages kept for root and procregd's user";
	}
	if (n >= d->rpages_max)
		return "--max-reader-pages pages (each a mapping, half of vm.max_map_count "
		       "at most)";
	return NULL;
}

/* The entry for the process ID names, made if need be: NULL and *why when
 * a quota or memory says no. */
static struct reader *reader_for(struct daemon *d, const struct ident *id, const char **why)
{
	struct pr_table_hdr *h = d->w.map.hdr;
	struct reader *r;
	uint64_t v;

	if (procreg__u64map_get(&d->readers, (uint64_t)id->pid + 2, &v) == 0) {
		r = (struct reader *)(uintptr_t)v;
		if (ident_is(id, r->start, r->ino))
			return r;
		/* As in proc_attach: the asker may be the one gone (its
		 * connection passed on), the entry a live process. */
		if (!procreg__pidfd_exited(r->pidfd)) {
			*why = "its process has exited (a connection passed on to another)";
			return NULL;
		}
		/* The pid's previous process exited unseen so far. */
		readers_gone(d, r);
	}
	if (!uid_privileged(d, id->uid)) {
		if (uid_count(&d->uid_readers, id->uid) >= d->o.max_readers_per_uid) {
			*why = "its uid has --max-readers-per-uid reader processes";
			return NULL;
		}
		if (d->nreaders >= d->o.max_readers - d->o.max_readers / 8) {
			*why = "the reader processes of other users fill all but the eighth of "
			       "--max-readers kept for root and procregd's user";
			return NULL;
		}
	}
	if (d->nreaders >= d->o.max_readers || d->nreaders >= h->readers_cap) {
		*why = "--max-readers reader processes";
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		*why = "out of memory";
		return NULL;
	}
	r->ev.kind = EV_READER;
	r->pid = id->pid;
	r->uid = id->uid;
	r->start = id->start;
	r->ino = id->ino;
	r->pidfd = fcntl(id->pidfd, F_DUPFD_CLOEXEC, 3);
	if (r->pidfd < 0 || ev_add(d, r->pidfd, EPOLLIN, &r->ev) < 0 ||
	    procreg__u64map_put(&d->readers, (uint64_t)id->pid + 2, (uint64_t)(uintptr_t)r) < 0) {
		if (r->pidfd >= 0)
			close(r->pidfd);
		free(r);
		*why = "out of file descriptors or memory";
		return NULL;
	}
	/* A free registry entry: there are readers_cap, and at most that
	 * many readers. */
	for (r->info = 0; r->info < h->readers_cap && info_at(d, r->info)->pid; r->info++)
		;
	r->registered_ns = procreg__now_ns();
	r->next = d->reader_list;
	if (r->next)
		r->next->prev = r;
	d->reader_list = r;
	d->nreaders++;
	uid_adjust(&d->uid_readers, r->uid, 1);
	count_live(d);
	return r;
}

/* The key of REF's page in d->page_inos: its inode + 2 (0 and 1 are
 * the map's own), 0 for an inode that has none. */
static uint64_t page_key(const struct pr_rpage_ref *ref)
{
	return ref->ino <= UINT64_MAX - 2 ? ref->ino + 2 : 0;
}

/*
 * Whether we hold the page REF maps already: a page sent again is kept
 * once. A probe of d->page_inos, not a pass over every reader's pages
 * (up to half of vm.max_map_count of them, a megabyte and more to read):
 * a client may send the same page as often as it likes. Every page is
 * in the map, unless one could not be put there (an inode without a
 * key, another page's inode on another device, no memory): then from
 * that one on, the pages are scanned, as right and slower. Memfds are all
 * of one filesystem, whose inode numbers are unique among the living.
 */
static bool page_held(const struct daemon *d, const struct pr_rpage_ref *ref)
{
	uint64_t key = page_key(ref), dev;

	/* Not partial: a page without a key would have made it so. */
	if (!d->page_inos_partial)
		return key && procreg__u64map_get(&d->page_inos, key, &dev) == 0 && dev == ref->dev;
	for (size_t i = 0; i < d->w.readers.n; i++)
		if (d->w.readers.v[i].dev == ref->dev && d->w.readers.v[i].ino == ref->ino)
			return true;
	return false;
}

/* REF, just added to the pages held, into d->page_inos. */
static void page_note(struct daemon *d, const struct pr_rpage_ref *ref)
{
	uint64_t key = page_key(ref), dev;

	if (d->page_inos_partial)
		return;
	if (!key || procreg__u64map_get(&d->page_inos, key, &dev) == 0 ||
	    procreg__u64map_put(&d->page_inos, key, ref->dev) < 0) {
		d->page_inos_partial = true;
		procreg__u64map_free(&d->page_inos);
	}
}

int readers_add(struct daemon *d, const struct ident *id, int fd)
{
	struct pr_rpage_ref ref;
	const char *why = NULL;
	struct reader *r;
	int err;

	if (fd < 0)
		return -EBADF;
	err = procreg__rpage_check(fd, &ref, &why);
	if (!err && page_held(d, &ref)) {
		LOGV(d, "reader pid %d uid %u: a page we hold already", (int)id->pid,
		     (unsigned)id->uid);
		return -EEXIST; /* announced again: we have it */
	}
	if (!err)
		err = procreg__rpage_map_checked(fd, &ref, &why);
	if (err) {
		log_refused(d, id, why ? why : strerror(-err));
		return err;
	}
	/* The page budget before the process's entry: a process none of
	 * whose pages is taken takes no entry either. */
	why = page_refusal(d, id);
	if (why && procreg__mono_ns() - d->readers_refresh_ns > REFRESH_FORCED_NS) {
		readers_refresh(d); /* pages closed make room */
		why = page_refusal(d, id);
	}
	r = why ? NULL : reader_for(d, id, &why);
	if (!r) {
		procreg__rpage_unmap(&ref);
		log_refused(d, id, why);
		return -EUSERS;
	}
	ref.owner = r;
	ref.ignored = r->stalled;
	err = procreg__w_reader_add(&d->w, &ref);
	if (err) {
		procreg__rpage_unmap(&ref);
		return err;
	}
	page_note(d, &ref);
	r->pages++;
	uid_adjust(&d->uid_rpages, r->uid, 1);
	info_write(d, r);
	LOGV(d, "reader pid %d uid %u: page %u handed over", (int)r->pid, (unsigned)r->uid,
	     r->pages);
	return 0;
}

/* Drop page I (the last one moves to its place). */
static void drop_page(struct daemon *d, size_t i)
{
	struct reader *r = d->w.readers.v[i].owner;

	if (!d->page_inos_partial)
		procreg__u64map_del(&d->page_inos, page_key(&d->w.readers.v[i]));
	procreg__w_reader_drop(&d->w, i);
	r->pages--;
	uid_adjust(&d->uid_rpages, r->uid, -1);
}

/* Drop every page of R. */
static void drop_pages(struct daemon *d, struct reader *r)
{
	for (size_t i = 0; i < d->w.readers.n;) {
		if (d->w.readers.v[i].owner == r) {
			drop_page(d, i);
			continue; /* the last one moved here */
		}
		i++;
	}
}

void readers_gone(struct daemon *d, struct reader *r)
{
	struct pr_reader_info *e;

	if (r->gone)
		return;
	drop_pages(d, r);
	procreg__u64map_del(&d->readers, (uint64_t)r->pid + 2);
	epoll_ctl(d->epfd, EPOLL_CTL_DEL, r->pidfd, NULL);
	close(r->pidfd);
	e = info_at(d, r->info);
	info_begin(e);
	memset((uint8_t *)e + sizeof(e->seq), 0, sizeof(*e) - sizeof(e->seq));
	info_end(e);
	if (r->prev)
		r->prev->next = r->next;
	else
		d->reader_list = r->next;
	if (r->next)
		r->next->prev = r->prev;
	d->nreaders--;
	if (r->stalled)
		d->nreaders_stalled--;
	uid_adjust(&d->uid_readers, r->uid, -1);
	count_live(d);
	/* Freed after the batch: its pidfd's event may be in it still. */
	r->gone = true;
	r->next_gone = d->readers_gone;
	d->readers_gone = r;
	/* A grace period waiting for it may be over. */
	procreg__w_reclaim(&d->w);
}

void readers_reap(struct daemon *d)
{
	while (d->readers_gone) {
		struct reader *r = d->readers_gone;

		d->readers_gone = r->next_gone;
		free(r);
	}
}

/* R held the grace period in flight past the timeout: stop waiting for
 * it, for good, and say so where an administrator looks. */
static void stall(struct daemon *d, struct reader *r, uint64_t held_ns)
{
	struct pr_table_hdr *h = d->w.map.hdr;
	struct pr_reader_info *e = info_at(d, r->info);
	uint64_t now = procreg__now_ns();

	r->stalled = true;
	d->nreaders_stalled++;
	for (size_t i = 0; i < d->w.readers.n; i++)
		if (d->w.readers.v[i].owner == r)
			d->w.readers.v[i].ignored = true;
	info_begin(e);
	e->flags |= PR_READER_STALLED;
	e->stalled_ns = now;
	info_end(e);
	CMM_STORE_SHARED(h->reader_stalls, h->reader_stalls + 1);
	CMM_STORE_SHARED(h->last_stall_pid, (uint32_t)r->pid);
	CMM_STORE_SHARED(h->last_stall_uid, r->uid);
	CMM_STORE_SHARED(h->last_stall_ns, now);
	count_live(d);
	(void)procreg__u64map_put(&d->stall_uids, (uint64_t)subuid_owner(r->uid) + 2,
				  procreg__mono_ns());
	/* One a process: a user can start as many as it likes. */
	log_limited(&d->stalls_log, "readers no longer waited for",
		    "reader pid %d (uid %u) has held a grace period up for %llu ms "
		    "(--reader-timeout-ms %u%s): no longer waited for; its lookups check for "
		    "reused memory instead", (int)r->pid, (unsigned)r->uid,
		    (unsigned long long)(held_ns / 1000000), d->o.reader_timeout_ms,
		    held_ns / 1000000 < d->o.reader_timeout_ms ? ", not for a uid whose reader "
		    "was given up on within a minute" : "");
}

/* Whether R's uid had a reader given up on within SUSPECT_NS of NOW. */
static bool suspect(struct daemon *d, const struct reader *r, uint64_t now)
{
	uint64_t at;

	return procreg__u64map_get(&d->stall_uids, (uint64_t)subuid_owner(r->uid) + 2, &at) == 0 &&
	       now - at < SUSPECT_NS;
}

/* How long the grace period in flight has waited, at NOW. */
static uint64_t gp_age(const struct pr_writer *w, uint64_t now)
{
	return w->gp_target && now > w->gp_started_ns ? now - w->gp_started_ns : 0;
}

void readers_tick(struct daemon *d)
{
	struct pr_writer *w = &d->w;
	uint64_t now = procreg__mono_ns();
	size_t b;

	/* Stop waiting for every reader still holding the grace period in
	 * flight once it has waited the timeout. (A grace period started
	 * by the reclaim below is younger than NOW: not judged yet.) */
	while (gp_age(w, now) > d->o.reader_timeout_ms * 1000000ull &&
	       !procreg__gp_poll(&w->readers, w->gp_target, &b)) {
		stall(d, w->readers.v[b].owner, gp_age(w, now));
		procreg__w_reclaim(w);
	}
	/* The readers of suspect uids holding it up, sooner: each page that
	 * holds it is looked at, not only the first. */
	for (b = 0; gp_age(w, now) >= SUSPECT_HOLD_NS &&
		    !procreg__gp_poll_from(&w->readers, w->gp_target, b, &b);) {
		if (suspect(d, w->readers.v[b].owner, now)) {
			stall(d, w->readers.v[b].owner, gp_age(w, now));
			procreg__w_reclaim(w);
			b = 0; /* a new grace period, or the same one: from the start */
		} else {
			b++;
		}
	}
	if (now - d->readers_refresh_ns > REFRESH_NS)
		readers_refresh(d);
}

void readers_refresh(struct daemon *d)
{
	struct pr_rpages *rp = &d->w.readers;
	uint64_t now = procreg__now_ns();
	struct reader *r;

	d->readers_refresh_ns = procreg__mono_ns();
	for (r = d->reader_list; r; r = r->next)
		r->slots = r->active = 0, r->lookups = 0;
	/* One pass over the pages: drop the closed ones, count the rest. */
	for (size_t i = 0; i < rp->n;) {
		r = rp->v[i].owner;
		if (CMM_LOAD_SHARED(rp->v[i].hdr->closed)) {
			drop_page(d, i);
			continue;
		}
		procreg__rpage_count(&rp->v[i], &r->slots, &r->active, &r->lookups);
		i++;
	}
	for (r = d->reader_list; r; r = r->next) {
		struct pr_reader_info *e = info_at(d, r->info);

		info_begin(e);
		e->pages = (uint16_t)r->pages;
		e->slots = r->slots;
		e->active = r->active;
		e->lookups = r->lookups;
		e->refreshed_ns = now;
		info_end(e);
	}
	procreg__w_reclaim(&d->w);
}

/* vm.max_map_count: how many mappings the kernel lets a process have. */
static long max_map_count(void)
{
	char buf[32] = "";
	long v = -1;
	int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, buf, sizeof(buf) - 1) > 0)
			v = strtol(buf, NULL, 10);
		close(fd);
	}
	return v > 0 ? v : -1;
}

void readers_start(struct daemon *d)
{
	struct pr_table_hdr *h = d->w.map.hdr;
	long mmc = max_map_count();
	uint32_t most;

	if (mmc < 0) {
		log_warn("cannot read /proc/sys/vm/max_map_count: taking the default, %d",
			 DEFAULT_MAX_MAP_COUNT);
		mmc = DEFAULT_MAX_MAP_COUNT;
	}
	most = mmc / 2 > UINT32_MAX ? UINT32_MAX : (uint32_t)(mmc / 2);
	if (most < 1)
		most = 1;
	d->rpages_max = most;
	if (d->o.max_reader_pages_set) {
		if (d->o.max_reader_pages > most)
			log_warn("--max-reader-pages %u: each page is a mapping, and "
				 "vm.max_map_count is %ld: %u (half of it) it is",
				 d->o.max_reader_pages, mmc, most);
		else
			d->rpages_max = d->o.max_reader_pages;
	}

	/* A daemon killed without a word left its registry behind; this one
	 * holds no page yet. */
	for (uint32_t i = 0; i < h->readers_cap; i++) {
		struct pr_reader_info *e = info_at(d, i);

		if (!e->pid)
			continue;
		info_begin(e);
		memset((uint8_t *)e + sizeof(e->seq), 0, sizeof(*e) - sizeof(e->seq));
		info_end(e);
	}
	count_live(d);
}

void readers_free_all(struct daemon *d)
{
	while (d->reader_list)
		readers_gone(d, d->reader_list);
	readers_reap(d);
	procreg__u64map_free(&d->readers);
	procreg__u64map_free(&d->page_inos);
	procreg__u64map_free(&d->stall_uids);
	procreg__u64map_free(&d->uid_readers);
	procreg__u64map_free(&d->uid_rpages);
}
