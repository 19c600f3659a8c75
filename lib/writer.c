/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * writer.c - the writer side of the shared table: creation and attachment,
 * mutation, the arena allocator, deferred reclamation and recovery.
 *
 * Writer only: procregd is the one process that links this in and calls
 * it, from one thread. Readers never wait for anything here, and nothing
 * here waits for a reader: memory a reader may still hold is retired to a
 * batch and freed when a grace period, polled from the daemon's loop, has
 * passed (procreg__w_reclaim).
 *
 * Every change follows one rule (invariant 2): write the new bytes where no
 * reader can see them, then make them reachable with one release store,
 * then retire what became unreachable. A crash at any point leaves the
 * file consistent: a block that was filled but not published is
 * unreachable, and recovery returns everything unreachable to the
 * allocator (after a grace period, since readers of the crashed daemon's
 * retired blocks may still be inside their critical sections).
 *
 * The allocator's state is private and rebuilt on attach by walking the
 * reachable blocks: what lies between them below arena_top is free. Small
 * blocks come from exact-size free lists (16-byte classes up to 4 KiB),
 * larger ones (index blocks) first-fit from a list. When neither these,
 * fresh arena nor a reclaim have room, a block of a larger class is split
 * (alloc_split()). Free blocks are not merged as they are freed (a
 * lookup of their neighbours on every free would cost the write path);
 * a bitmap of the free bytes is kept instead, and when nothing else has
 * room the lists are made again from it, neighbours merged (coalesce()).
 *
 * The file is sparse, and a store through the mapping to a page the
 * filesystem cannot back (a full tmpfs) is a SIGBUS, not an error. So no
 * page is written before it is allocated: the arena grows only into pages
 * allocated first (back_pages), a chunk ahead of its top, and a full
 * filesystem is -ENOSPC for the request that needed the space.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "probes.h"

#define NCLASS 256                     /* 16 .. 4096 bytes */
#define CLASS_MAX (NCLASS * PR_ALIGN)
#define INDEX_MIN 256
#define INDEX_MAX (1ull << 32)         /* the tag must hold a home: shift >= 32 */

/* ---- vectors ---------------------------------------------------------- */

/* V with room for two more at least (doubled, or 64 to start with): the
 * rare path, kept out of the pushes. */
static __attribute__((noinline)) int vec_grow(struct pr_vec *v)
{
	size_t cap = v->cap ? v->cap * 2 : 64;
	uint64_t *n = realloc(v->v, cap * sizeof(*n));

	if (!n)
		return -ENOMEM;
	v->v = n;
	v->cap = cap;
	return 0;
}

int procreg__vec_push(struct pr_vec *v, uint64_t x)
{
	if (v->n == v->cap && vec_grow(v))
		return -ENOMEM;
	v->v[v->n++] = x;
	return 0;
}

void procreg__vec_free(struct pr_vec *v)
{
	free(v->v);
	memset(v, 0, sizeof(*v));
}

/* Append the pair (A, B), both or neither: a vector of pairs never holds
 * half of one. One check for room, where two pushes made two calls. */
static int push_pair(struct pr_vec *v, uint64_t a, uint64_t b)
{
	if (v->cap - v->n < 2 && vec_grow(v))
		return -ENOMEM;
	v->v[v->n] = a;
	v->v[v->n + 1] = b;
	v->n += 2;
	return 0;
}

/* ---- allocator -------------------------------------------------------- */

PR_PROBE_DEFINE(procregd, publish);
PR_PROBE_DEFINE(procregd, retire);
PR_PROBE_DEFINE(procregd, grace_period);
PR_PROBE_DEFINE(procregd, reclaim);
PR_PROBE_DEFINE(procregd, grow);

static struct pr_table_hdr *H(struct pr_writer *w)
{
	return w->map.hdr;
}

/* The free map's bits for [OFF, OFF + SIZE) set (FREE) or cleared: a bit
 * for each PR_ALIGN bytes of the file, set while they are in a free block
 * (in a list or not: coalesce() finds them either way). */
static void freemap_mark(struct pr_writer *w, uint64_t off, uint64_t size, bool free)
{
	uint64_t a = off / PR_ALIGN, b = (off + size) / PR_ALIGN;

	if (!w->freemap)
		return;
	while (a < b) {
		uint64_t bit = a % 64, n = 64 - bit < b - a ? 64 - bit : b - a;
		uint64_t mask = (n == 64 ? ~0ull : (1ull << n) - 1) << bit;

		if (free)
			w->freemap[a / 64] |= mask;
		else
			w->freemap[a / 64] &= ~mask;
		a += n;
	}
}

/* Block [OFF, OFF + SIZE), free already in the map, onto its list. */
static int list_push(struct pr_writer *w, uint64_t off, uint64_t size)
{
	if (size <= CLASS_MAX)
		return procreg__vec_push(&w->classes[size / PR_ALIGN - 1], off);
	if (size > w->large_max)
		w->large_max = size;
	return push_pair(&w->large, off, size);
}

static int free_block(struct pr_writer *w, uint64_t off, uint64_t size)
{
	freemap_mark(w, off, size, true);
	w->freed_since += size;
	/* Out of private memory: the block is in no list, but in the free
	 * map, and the next coalesce() puts it back. */
	return list_push(w, off, size);
}

/* Taken from a free block: [OFF, OFF + SIZE) in use. */
static void taken(struct pr_writer *w, uint64_t off, uint64_t size)
{
	freemap_mark(w, off, size, false);
}

/* The free lists made again from the free map: each run of free bytes
 * below arena_top one block, neighbours merged. Blocks of one size freed
 * stay that size otherwise: a user whose processes held records of sizes
 * it chose, round after round, left the arena in small blocks of sizes
 * nobody asked for, and every index rebuild and group of every other
 * user found the table full with 1% of it in use, until a restart. A scan
 * of the map (a word for every KiB of the arena) and a push for every
 * run: 3.2 ms for a table of 1 GiB left in 491,000 runs. Made only when
 * nothing else has room, and only once 1/64 of the arena (and the size
 * asked for) has been freed since the last (alloc_block()): 16 MiB freed
 * a scan in that table (the pushes grow with how many runs the whole
 * arena is in, not with what was freed). */
static void coalesce(struct pr_writer *w)
{
	uint64_t hi = H(w)->arena_top / PR_ALIGN, i = H(w)->arena_off / PR_ALIGN;

	for (int k = 0; k < NCLASS; k++)
		w->classes[k].n = 0;
	w->large.n = 0;
	w->large_max = 0;
	w->freed_since = 0;
	while (i < hi) {
		uint64_t word = i / 64, x = w->freemap[word] & (~0ull << (i % 64)), start, end;

		while (!x && ++word * 64 < hi)
			x = w->freemap[word];
		if (!x)
			break;
		start = word * 64 + (uint64_t)__builtin_ctzll(x);
		if (start >= hi)
			break;
		x = ~w->freemap[word] & (~0ull << (start % 64));
		while (!x && ++word * 64 < hi)
			x = ~w->freemap[word];
		end = x ? word * 64 + (uint64_t)__builtin_ctzll(x) : hi;
		end = end < hi ? end : hi;
		/* Out of memory: left out of the lists, not lost (see
		 * free_block()). */
		(void)list_push(w, start * PR_ALIGN, (end - start) * PR_ALIGN);
		i = end;
	}
}

/* First fit from the list of large free blocks: the front of the first
 * that holds SIZE. What is left of it stays in its place on the list, or
 * goes to its class when it is that small.
 *
 * A request bigger than every block is refused without a look: after a
 * coalesce() the list may hold a run for every gap between records a
 * user keeps, and an index rebuild that fits none of them was tried
 * again by every insert while the index stayed due. Each walked the whole
 * list: one uid's refused inserts, 19,000 a second from 8 processes,
 * held root's requests up to 2.7 s (a 1 GiB table in 60,000 runs). So
 * large_max bounds the blocks' sizes: raised by a push, made exact by a
 * walk that finds none big enough (it has seen them all), left as it is
 * when a block is taken or cut (a bound still). */
static int alloc_large(struct pr_writer *w, uint64_t size, uint64_t *off)
{
	uint64_t most = 0;

	if (size > w->large_max)
		return -ENOSPC;
	for (size_t i = 0; i < w->large.n; i += 2) {
		uint64_t o = w->large.v[i], s = w->large.v[i + 1];

		w->large_looked++;
		if (s < size) {
			most = s > most ? s : most;
			continue;
		}
		if (s - size > CLASS_MAX) {
			w->large.v[i] = o + size;
			w->large.v[i + 1] = s - size;
		} else {
			w->large.v[i] = w->large.v[w->large.n - 2];
			w->large.v[i + 1] = w->large.v[w->large.n - 1];
			w->large.n -= 2;
			if (s > size)
				list_push(w, o + size, s - size);
		}
		taken(w, o, size);
		*off = o;
		return 0;
	}
	w->large_max = most;
	return -ENOSPC;
}

static int allocate_pages(int fd, uint64_t from, uint64_t to)
{
	int err;

	do
		err = posix_fallocate(fd, (off_t)from, (off_t)(to - from));
	while (err == EINTR);
	return -err;
}

/*
 * Have the table file's pages allocated up to END (at least): a chunk
 * ahead, or, when the filesystem has not that much left, just the pages
 * END needs; -ENOSPC when it has not those either. Nothing here ever
 * punches a hole, so what was allocated stays, and w->backed only grows.
 */
static int back_pages(struct pr_writer *w, uint64_t end)
{
	uint64_t page, need, ahead;
	int err;

	/* Nearly every call: what is asked for is backed already. */
	if (end <= w->backed)
		return 0;
	page = (uint64_t)sysconf(_SC_PAGESIZE);
	need = (end + page - 1) / page * page;
	ahead = (end + PR_BACK_CHUNK - 1) / PR_BACK_CHUNK * PR_BACK_CHUNK;
	/* Never past the end: that would lengthen the file. */
	need = need < w->map.size ? need : w->map.size;
	ahead = ahead < w->map.size ? ahead : w->map.size;
	err = allocate_pages(w->table_fd, w->backed, ahead);
	if (err == -ENOSPC && ahead > need) {
		ahead = need;
		err = allocate_pages(w->table_fd, w->backed, ahead);
	}
	if (err) {
		w->fs_full |= err == -ENOSPC;
		return err;
	}
	w->fs_full = false;
	/* Map the new pages into our view now, in one call, rather than a
	 * fault each at first touch: the writer fills every byte of them
	 * sooner or later, and a fault is a trap per 4 KiB page (several
	 * microseconds where the kernel runs virtualised) on the path of
	 * the registration that happens to touch it. The pages are allocated
	 * already, so this costs no memory, only our page-table entries.
	 * Advice: a kernel without MADV_POPULATE_WRITE (before 5.14) faults
	 * them in at first touch as before. */
	(void)madvise(w->map.base + w->backed, (size_t)(ahead - w->backed), MADV_POPULATE_WRITE);
	w->backed = ahead;
	return 0;
}

static uint64_t index_room(struct pr_writer *w);
static uint64_t index_room_at(struct pr_writer *w, uint64_t cap);

/* The arena bytes the request under way must leave free: the reserve
 * for a request marked no_reserve; for one marked remote, the local
 * share too and the room kept for the name index (index_room()). That
 * room is this host's as much as the share: with other nodes' entries
 * taking all the arena but the reserve and the share, the room (a
 * quarter of a small table) left a user of this host a fraction of its
 * share, or none, as an unprivileged user's requests may not take it. */
static uint64_t kept_from(struct pr_writer *w)
{
	return (w->no_reserve ? w->reserve : 0) +
	       (w->remote ? w->local_share + index_room(w) : 0);
}

/* Whether SIZE more bytes of the arena leave KEPT free, counting what is
 * retired as in use (it is, until its grace period). */
static bool leaves_free(struct pr_writer *w, uint64_t size, uint64_t kept)
{
	uint64_t cap = w->map.size - H(w)->arena_off;

	if (!kept || (kept < cap && H(w)->arena_used + size <= cap - kept))
		return true;
	w->reserve_hit = true;
	return false;
}

/* Whether the request under way may take SIZE more bytes of the arena:
 * it must leave what is kept from it free. */
static bool reserve_allows(struct pr_writer *w, uint64_t size)
{
	return leaves_free(w, size, kept_from(w));
}

static bool index_spare_needed(struct pr_writer *w);
static uint64_t names_index_bytes(struct pr_writer *w);

/* A block of SIZE bytes at *OFF; INDEX: for the name index, which may
 * take index_room(). */
static int alloc_in(struct pr_writer *w, uint64_t size, uint64_t *off, bool index)
{
	struct pr_vec *c;
	uint64_t top = H(w)->arena_top, end = w->map.size, kept = kept_from(w);
	/* Root's and the daemon's own uid's requests may take the room, as
	 * they may the reserve: the last of the table is theirs. A user's
	 * may for the index, not for records; what other nodes' leave is in
	 * KEPT. */
	uint64_t room = index || !w->no_reserve || w->remote ? 0 : index_room(w);
	int err;

	size = (size + PR_ALIGN - 1) & ~(uint64_t)(PR_ALIGN - 1);
	if (!reserve_allows(w, size))
		return -ENOSPC;
	if (index && w->spare_size >= size) {
		*off = w->spare_off;
		if (w->spare_size > size)
			free_block(w, w->spare_off + size, w->spare_size - size);
		w->spare_off = w->spare_size = 0;
		goto got;
	}
	/* The last bytes of the file stay fresh for the requests they are
	 * kept for (privileged ones, and local ones before those): a free
	 * block of their size may be lacking, a fresh one never is. */
	if (kept)
		end = kept < end - top ? end - kept : top;
	if (room)
		end = room < end - top ? end - room : top;
	for (int round = 0;; round++) {
		if (size <= CLASS_MAX) {
			c = &w->classes[size / PR_ALIGN - 1];
			if (c->n) {
				*off = c->v[--c->n];
				taken(w, *off, size);
				goto got;
			}
		}
		/* Then large free blocks, before fresh arena is touched:
		 * otherwise every rebuild would push arena_top, and the file's
		 * pages, on until the arena ran out. Records too: the large
		 * blocks are old indexes, which only a bigger index would fit
		 * otherwise (at 10^6 names, 16 MiB of them, 17 bytes a name of
		 * the file, lay idle below the top while new records pushed it
		 * on). */
		if (!alloc_large(w, size, off))
			goto got;
		if (round)
			break;
		err = -ENOSPC;
		if (size <= end - top) {
			err = back_pages(w, top + size);
			if (!err) {
				*off = top;
				CMM_STORE_SHARED(H(w)->arena_top, top + size);
				goto got;
			}
		}
		/* Neither lists nor fresh arena: the lists made again, free
		 * neighbours merged, if enough was freed since they last
		 * were for that to find what was not there then. */
		if (!w->freemap || w->freed_since < size ||
		    w->freed_since < (top - H(w)->arena_off) / 64)
			break;
		coalesce(w);
	}
	if (size > end - top && size <= w->map.size - top)
		w->reserve_hit = true; /* what is kept had room for it */
	return err;
got:
	CMM_STORE_SHARED(H(w)->arena_used, H(w)->arena_used + size);
	return 0;
}

static int alloc_block(struct pr_writer *w, uint64_t size, uint64_t *off)
{
	return alloc_in(w, size, off, false);
}

/*
 * The last resort of a small block, once alloc_block() and a reclaim
 * have failed: the front of a free block of a larger class, its rest to
 * its own class. Without it, memory freed in one set of sizes (a user's
 * names of 1 KiB metadata, all gone with its process) served no other
 * size again, and the next user's small records found the arena full
 * with most of it free. The block taken is the smallest that leaves a
 * rest a record fits in; one that leaves less (lost until a restart's
 * recovery) only if there is no other.
 */
static int alloc_split(struct pr_writer *w, uint64_t size, uint64_t *off)
{
	uint64_t k, take = NCLASS;
	struct pr_vec *c;

	size = (size + PR_ALIGN - 1) & ~(uint64_t)(PR_ALIGN - 1);
	if (size > CLASS_MAX || !reserve_allows(w, size))
		return -ENOSPC;
	/* classes[k] holds blocks of (k + 1) * PR_ALIGN bytes: from the
	 * first larger than SIZE on, the first whose rest a record fits,
	 * else the first at all. */
	for (k = size / PR_ALIGN; k < NCLASS; k++) {
		if (!w->classes[k].n)
			continue;
		if (take == NCLASS)
			take = k;
		if ((k + 1) * PR_ALIGN - size >= PR_RECORD_MIN) {
			take = k;
			break;
		}
	}
	if (take == NCLASS)
		return -ENOSPC;
	c = &w->classes[take];
	*off = c->v[--c->n];
	taken(w, *off, size);
	list_push(w, *off + size, (take + 1) * PR_ALIGN - size);
	CMM_STORE_SHARED(H(w)->arena_used, H(w)->arena_used + size);
	return 0;
}

static void release_block(struct pr_writer *w, uint64_t off, uint64_t size)
{
	size = (size + PR_ALIGN - 1) & ~(uint64_t)(PR_ALIGN - 1);
	CMM_STORE_SHARED(H(w)->arena_used, H(w)->arena_used - size);
	if (off && off == w->names_retired) {
		w->names_retired = 0;
		/* As big as the index now: the block of an index that grew
		 * since would serve no rebuild of it, nor would the spare
		 * kept for the smaller one. */
		if (w->spare_size && w->spare_size < names_index_bytes(w)) {
			free_block(w, w->spare_off, w->spare_size);
			w->spare_off = w->spare_size = 0;
		}
		if (size >= names_index_bytes(w) && index_spare_needed(w)) {
			/* The name index's old block, out of its grace
			 * period: the spare (index_room()), kept from the free
			 * lists and the free map, so that neither records nor
			 * coalesce() cut it up. The spare before goes to the
			 * lists. */
			if (w->spare_size)
				free_block(w, w->spare_off, w->spare_size);
			w->spare_off = off;
			w->spare_size = size;
			return;
		}
	}
	free_block(w, off, size);
}

/* ---- reclamation ------------------------------------------------------ */


/*
 * Retire epochs. The daemon works in batches (one wake-up of its loop)
 * and publishes a batch's changes together at its end; within one, it
 * reads records it has just retired (to say in an event or to other
 * nodes what left, to pass a name on). An allocation that finds the arena
 * full reclaims on the spot, and a grace period with no reader inside
 * ends at once: so what the batch under way retired goes to a list of
 * its own, handed over to reclamation only at procreg__w_batch_end.
 * Reclaiming under pressure frees what earlier batches retired, never
 * what this one did.
 */
static void retire(struct pr_writer *w, uint64_t off, uint64_t size)
{
	struct pr_vec *v = w->in_batch ? &w->current : &w->retired;

	if (push_pair(v, off, size))
		return; /* leaks until recovery; never frees early */
	if (w->in_batch)
		w->current_bytes += size;
	else
		w->retired_bytes += size;
	PR_TRACE(procregd, retire, off, size);
}

void procreg__w_batch_begin(struct pr_writer *w)
{
	w->in_batch = true;
}

void procreg__w_batch_end(struct pr_writer *w)
{
	w->in_batch = false;
	if (!w->current.n)
		return;
	if (!w->retired.n) {
		struct pr_vec t = w->retired;

		w->retired = w->current;
		w->current = t;
	} else {
		for (size_t i = 0; i + 1 < w->current.n; i += 2)
			if (push_pair(&w->retired, w->current.v[i], w->current.v[i + 1]))
				break; /* the rest leaks until recovery */
		w->current.n = 0;
	}
	w->retired_bytes += w->current_bytes;
	w->current_bytes = 0;
}

static void free_batch(struct pr_writer *w, struct pr_vec *b)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i + 1 < b->n; i += 2) {
		release_block(w, b->v[i], b->v[i + 1]);
		bytes += b->v[i + 1];
	}
	PR_TRACE(procregd, reclaim, bytes, b->n / 2);
	b->n = 0;
}

/* The grace period in flight has passed: free what it covered. */
static void gp_done(struct pr_writer *w)
{
	procreg__gp_freed(&w->map, w->gp_target);
	free_batch(w, &w->waiting);
	PR_TRACE(procregd, grace_period, w->gp_target, procreg__mono_ns() - w->gp_started_ns,
		 w->gp_waited);
	w->gp_target = 0;
	CMM_STORE_SHARED(H(w)->grace_periods, H(w)->grace_periods + 1);
}

int procreg__w_reclaim(struct pr_writer *w)
{
	if (w->gp_target && procreg__gp_poll(&w->readers, w->gp_target, NULL))
		gp_done(w);
	if (!w->gp_target && w->retired.n) {
		struct pr_vec t = w->waiting;

		w->waiting = w->retired;
		w->retired = t;
		w->retired_bytes = 0;
		w->gp_target = procreg__gp_start(&w->map, &w->gp, w->membarrier);
		if (!w->gp_target) {
			/* Put the batch back; the caller's timer retries. */
			t = w->waiting;
			w->waiting = w->retired;
			w->retired = t;
			return 1;
		}
		w->gp_started_ns = procreg__mono_ns();
		w->gp_waited = PR_PROBE_ENABLED(procregd, grace_period)
				       ? procreg__gp_waiting(&w->readers, w->gp_target) : 0;
		/* Most of the time no reader is inside: finish at once. */
		if (procreg__gp_poll(&w->readers, w->gp_target, NULL))
			gp_done(w);
	}
	return w->gp_target != 0 || w->retired.n != 0;
}

/* ---- indexes ---------------------------------------------------------- */

#define MEMBER_INDEX_MIN 16
#define SHRINK_RETRY_NS (100 * 1000000ull) /* shrink_members() refused: none for this long */

static struct pr_index *index_at(struct pr_writer *w, const struct pr_root *root)
{
	return (struct pr_index *)(w->map.base + root->index_off);
}

static uint64_t index_bytes(uint64_t cap)
{
	return sizeof(struct pr_index) + cap * sizeof(struct pr_slot);
}

#define ROOM_SHARE 4

/*
 * Fresh arena kept at the end for the name index's rebuilds, one at its
 * size and two at twice its size (a growth and its spare): the requests of
 * uids other than root and the daemon's own, and other nodes' entries, are
 * refused it. A rebuild needs one block of the index's size, and the free
 * blocks between records a user keeps may all be smaller: names with
 * metadata of sizes it chose, most let go, each fifth kept, left runs of a
 * few KiB between them, and with 80% of the arena free the index fitted in
 * none. Every insert of every user was refused then, the index being due,
 * until a restart. So the index can be rebuilt at its size from here, grow,
 * and be rebuilt at its new size. A rebuild at its size (to clear
 * tombstones, as churn makes it due again and again) takes the spare first,
 * the block of the index before it if that was as big (release_block()),
 * kept once the arena is tight: the first at its size makes the spare for
 * those after it, and a growth in a table that tight takes a spare of the
 * new size with it, or does not happen. Not guaranteed: a second growth in
 * a table that tight, until what is freed merges into room; nor in a table
 * so small that the room would pass 1/ROOM_SHARE of it (an index of 10^5
 * names in 4 MiB: the room would be more than the table, the local share
 * and this host's users' names with it).
 *
 * Groups' member indexes are not given room: a user's groups are many, and
 * their rebuilds, of one group's members, are as any record's (a member
 * index that finds no room stays as it is, or its group takes no more).
 */
uint64_t procreg__w_index_room(struct pr_writer *w)
{
	return index_room(w);
}

static uint64_t index_room(struct pr_writer *w)
{
	const struct pr_root *names = &H(w)->names;

	return names->index_off ? index_room_at(w, index_at(w, names)->capacity) : 0;
}

/* index_room() for a name index of CAP slots. */
static uint64_t index_room_at(struct pr_writer *w, uint64_t cap)
{
	uint64_t room, most;

	room = index_bytes(cap) + 2 * index_bytes(2 * cap < INDEX_MAX ? 2 * cap : INDEX_MAX);
	most = (w->map.size - H(w)->arena_off) / ROOM_SHARE;
	return room < most ? room : most;
}

/* The name index's size in the arena. */
static uint64_t names_index_bytes(struct pr_writer *w)
{
	return index_bytes(index_at(w, &H(w)->names)->capacity);
}

/* Whether the name index's old block is to be kept as the spare: only
 * when the fresh arena left at the end, past what is kept for root and
 * local requests, could not hold both index_room() and a rebuild at the
 * index's size. Otherwise records take it (an old index left idle below
 * the top: 16 MiB at 10^6 names). */
static bool index_spare_needed(struct pr_writer *w)
{
	uint64_t left = w->map.size - H(w)->arena_top;
	uint64_t want = w->reserve + w->local_share + index_room(w) + names_index_bytes(w);

	return left < want;
}

/* Build an unpublished index of CAP slots holding every live slot word of
 * OLD (NULL for an empty one); NAMES: the name index's, which may take
 * index_room(). */
static int build_index(struct pr_writer *w, const struct pr_index *old, uint64_t cap,
		       bool names, uint64_t *off_out)
{
	uint32_t shift = 64 - (uint32_t)__builtin_ctzll(cap);
	struct pr_index *nx;
	uint64_t off;
	int err = alloc_in(w, index_bytes(cap), &off, names);

	if (err)
		return err;
	nx = (struct pr_index *)(w->map.base + off);
	nx->capacity = cap;
	nx->shift = shift;
	nx->pad = 0;
	memset(nx->slot, 0, cap * sizeof(struct pr_slot));
	for (uint64_t i = 0; old && i < old->capacity; i++) {
		struct pr_slot sl = old->slot[i];
		uint64_t p;

		if (!pr_slot_live(sl.word))
			continue;
		/* Home from the slot alone: no record read. */
		p = pr_slot_hash_hi(sl.word, sl.key, H(w)->hash_seed) >> (shift - 32);
		while (nx->slot[p].word != PR_SLOT_EMPTY)
			p = (p + 1) & (cap - 1);
		nx->slot[p] = sl;
	}
	*off_out = off;
	return 0;
}

/* Whether other nodes' entries may grow the name index to CAP slots: the
 * new index must leave what kept_from() keeps from them with the room at
 * its new size, which the growth makes bigger. Checked against the bytes
 * in use, not the fresh end: otherwise it went through or not by when the
 * old indexes had been reclaimed (records put in their blocks keep the
 * top of the arena low), and with the room at the new size a user of
 * this host was left no space (4 MiB: 65,536 slots, a room of 1 MiB). */
static bool remote_growth_allowed(struct pr_writer *w, uint64_t cap)
{
	return leaves_free(w, index_bytes(cap),
			   w->reserve + w->local_share + index_room_at(w, cap));
}

/* Publish a new index of ROOT holding every live slot word of the current
 * one, and retire the old. */
static int rebuild(struct pr_writer *w, struct pr_root *root, uint64_t cap)
{
	struct pr_index *old = index_at(w, root);
	uint64_t old_off = root->index_off, old_cap = old->capacity, off, spare = 0;
	bool names = root == &H(w)->names;
	int err;

	if (names && cap > old_cap && w->remote && !remote_growth_allowed(w, cap))
		return -ENOSPC;
	/* The name index growing in a table that tight: the spare for its
	 * rebuilds at the new size is taken with it, or it does not grow
	 * (it is rebuilt at its size, in the spare it has, as long as that
	 * is enough). The block it leaves is too small to be that spare. */
	if (names && cap > old_cap && index_spare_needed(w)) {
		uint64_t need = (index_bytes(cap) + PR_ALIGN - 1) & ~(uint64_t)(PR_ALIGN - 1);
		uint64_t kept = kept_from(w), top = H(w)->arena_top;
		uint64_t fresh = w->map.size - top > kept ? w->map.size - top - kept : 0;

		/* Both or neither: a block taken fresh and given back goes
		 * to the lists, and the end of the arena would be the
		 * shorter for a growth that did not happen. */
		if (fresh < 2 * need && !(w->large_max >= need && fresh >= need) &&
		    w->large_max < 2 * need)
			return -ENOSPC;
		err = alloc_in(w, need, &spare, true);
		if (err)
			return err;
	}
	err = build_index(w, old, cap, names, &off);
	if (err) {
		if (spare)
			release_block(w, spare, index_bytes(cap));
		return err;
	}
	if (spare) {
		if (w->spare_size)
			free_block(w, w->spare_off, w->spare_size);
		w->spare_off = spare;
		w->spare_size = (index_bytes(cap) + PR_ALIGN - 1) & ~(uint64_t)(PR_ALIGN - 1);
		CMM_STORE_SHARED(H(w)->arena_used, H(w)->arena_used - w->spare_size);
	}
	/* Release: the new block's contents before its offset. */
	PR_STORE_REL(&root->index_off, off);
	CMM_STORE_SHARED(root->tombs, 0);
	CMM_STORE_SHARED(H(w)->rehashes, H(w)->rehashes + 1);
	PR_TRACE(procregd, grow, names ? 0 : root == &H(w)->groups ? 1 : 2, old_cap, cap,
		 root->live);
	if (names)
		w->names_retired = old_off;
	retire(w, old_off, index_bytes(old_cap));
	return 0;
}

/* The eighths of an index's slots the request under way may fill before
 * it grows the index: 3/4, counting tombstones, which lengthen probes
 * too; an eighth less for a request kept from the reserve, and another
 * for one kept from the local share. The eighths above take the inserts
 * they are kept for without the rebuild that the arena, nearly full,
 * might have no room for. */
static uint64_t load_eighths(const struct pr_writer *w)
{
	return 6 - (w->no_reserve && w->reserve) - (w->remote && w->local_share);
}

int procreg__w_reserve(struct pr_writer *w, struct pr_root *root)
{
	uint64_t cap = index_at(w, root)->capacity, want = cap;
	int err;

	if ((root->live + root->tombs + 1) * 8 <= cap * load_eighths(w))
		return 0;
	while ((root->live + 1) * 2 > want)
		want *= 2;
	if (want > INDEX_MAX)
		return -ENOSPC;
	err = rebuild(w, root, want);
	if (err == -ENOSPC) {
		procreg__w_reclaim(w);
		err = rebuild(w, root, want);
	}
	return err;
}

uint64_t procreg__w_find(struct pr_writer *w, const struct pr_root *root,
			 const struct pr_key *k, uint64_t *pos)
{
	const struct pr_index *ix = index_at(w, root);
	struct pr_ixv v = { ix->slot, ix->capacity, ix->shift };
	const struct pr_record *r = procreg__probe_trusted(&w->map, &v, k, pos);

	return r ? (uint64_t)((const uint8_t *)r - w->map.base) : 0;
}

/*
 * Names are anyone's to choose, and the hash's seed is in the table for
 * every reader to read: a user can compute names that share a home slot
 * and a tag, or the whole hash (pr_hash absorbs a word by xor: for any
 * two first words, a second word makes the states equal). Inserted, they
 * pile up in one probe run, and every probe that reaches it, readers'
 * and the daemon's, compares a record at each of them: a thousand such
 * names cost a lookup a thousand cache misses, and each insert of the
 * next one walks them all. A random name lands within a few slots of its
 * home, and shares its 32-bit tag with no live entry on the way but by a
 * chance of one in billions, so a request marked no_reserve (a uid not
 * privileged) is refused an insert that lands further than
 * PR_PLACE_DIST_MAX from its home, or passes PR_PLACE_TAGS_MAX live
 * entries with its tag. Privileged uids are not: the last of the table is
 * theirs whatever others did to it.
 *
 * Nor may names line up. A home slot is the top bits of the hash, so a
 * user who hashes candidates (procreg_name_hash() is public, and the seed
 * readable) can keep one name for each of a range of home slots: each sits
 * at its home, and together they fill one run of occupied slots, which
 * every probe that starts in it walks to its end. 200,000 such names made
 * lookups of absent names 100 times slower, held the daemon 3.7 s on one
 * packet of removals, and pushed 39% of another user's new names past
 * PR_PLACE_DIST_MAX. So an insert into an empty slot (a tombstone taken
 * grows no run) that would leave a run longer than PR_PLACE_RUN_MAX is
 * refused to a uid that holds one in PR_PLACE_RUN_SHARE of the
 * PR_PLACE_RUN_LOOK slots nearest to it in the run, tombstones counted
 * as its own: the one who built it. Another uid's name that lands there
 * goes in; it may join two such runs into one, so this bounds what one
 * uid makes, not every run: only a hash nobody could compute would, and
 * every reader holds the seed. Runs that long do not come by chance: at
 * the highest load the index keeps (3/4), the usual estimate for linear
 * probing puts a run past 512 slots at about e^-19 a slot.
 */
#define PR_PLACE_DIST_MAX 1024
#define PR_PLACE_TAGS_MAX 8
#define PR_PLACE_RUN_MAX (PR_PLACE_DIST_MAX / 2)
#define PR_PLACE_RUN_SHARE 8
/* Slots looked at for their owner, nearest first: a bound on the work
 * of an insert at the end of a long run, and enough to tell the uid that
 * built it, which holds nearly all of them. */
#define PR_PLACE_RUN_LOOK 256

static uint32_t owner_of(const struct pr_writer *w, uint32_t uid)
{
	return w->owner_of ? w->owner_of(uid) : uid;
}

/* Whether slot word WD counts against the uid ME in run_ok(): its own
 * entry, or a tombstone (nobody's: a run of them is made by inserting
 * and removing, and a probe walks it all the same). */
static bool run_counts(const struct pr_writer *w, uint64_t wd, uint32_t me)
{
	const struct pr_record *r;

	if (!pr_slot_live(wd))
		return true;
	r = (const struct pr_record *)(w->map.base + pr_slot_off(wd));
	return r->node == 0 && owner_of(w, r->uid) == me;
}

/* The slots from POS on, by STEP (1, or the index's mask: back one),
 * until an empty one or until *LOOKED reaches PR_PLACE_RUN_LOOK: how many
 * count against ME. */
static unsigned run_against(const struct pr_writer *w, const struct pr_index *ix, uint64_t pos,
			    uint64_t step, uint32_t me, unsigned *looked)
{
	uint64_t mask = ix->capacity - 1, wd;
	unsigned against = 0;

	for (uint64_t p = (pos + step) & mask;
	     *looked < PR_PLACE_RUN_LOOK && (wd = ix->slot[p].word) != PR_SLOT_EMPTY;
	     p = (p + step) & mask, ++*looked)
		against += run_counts(w, wd, me);
	return against;
}

/* Whether the request's uid may grow the run of occupied slots around the
 * empty slot POS (procreg__w_place_ok()). */
static bool run_ok(const struct pr_writer *w, const struct pr_index *ix, uint64_t pos)
{
	uint64_t mask = ix->capacity - 1, back = 0, fwd = 0;
	unsigned looked = 0, against;
	uint32_t me;

	if (ix->slot[pos].word != PR_SLOT_EMPTY || w->req_uid == PR_NO_UID)
		return true;
	while (back + fwd < PR_PLACE_RUN_MAX && ix->slot[(pos - back - 1) & mask].word)
		back++;
	while (back + fwd < PR_PLACE_RUN_MAX && ix->slot[(pos + fwd + 1) & mask].word)
		fwd++;
	if (back + fwd < PR_PLACE_RUN_MAX)
		return true;
	/* The slots nearest POS, those before it first (the run its probe
	 * came through): the run is longer than PR_PLACE_RUN_LOOK. */
	me = owner_of(w, w->req_uid);
	against = run_against(w, ix, pos, mask, me, &looked);
	against += run_against(w, ix, pos, 1, me, &looked);
	return against * PR_PLACE_RUN_SHARE < PR_PLACE_RUN_LOOK;
}

int procreg__w_place_ok(struct pr_writer *w, const struct pr_root *root, const struct pr_key *k,
			uint64_t pos)
{
	const struct pr_index *ix = index_at(w, root);
	uint64_t mask = ix->capacity - 1, p = k->hash >> ix->shift;
	unsigned same = 0;

	if (!w->no_reserve)
		return 0;
	if (((pos - p) & mask) > PR_PLACE_DIST_MAX || !run_ok(w, ix, pos))
		goto refused;
	/* A short name's slot holds the name: no other matches it, and a
	 * probe for it reads no record on the way. */
	for (; !k->skey.key && p != pos; p = (p + 1) & mask) {
		uint64_t wd = ix->slot[p].word;

		if (pr_slot_live(wd) && pr_slot_is(wd, ix->slot[p].key, k->skey) &&
		    ++same > PR_PLACE_TAGS_MAX)
			goto refused;
	}
	return 0;
refused:
	w->place_hit = true;
	return -ENOSPC;
}

void procreg__w_prefetch_hash(struct pr_writer *w, uint64_t hash)
{
	const struct pr_index *ix = index_at(w, &w->map.hdr->names);

	__builtin_prefetch(&ix->slot[hash >> ix->shift], 1, 3);
}

int procreg__w_new_record(struct pr_writer *w, const struct pr_record *tmpl,
			  const char *name, const void *meta, uint64_t *off)
{
	uint64_t size = PR_RECORD_SIZE(tmpl->name_len, tmpl->meta_len);
	struct pr_record *r;
	int err = alloc_block(w, size, off);

	if (err == -ENOSPC) {
		procreg__w_reclaim(w);
		err = alloc_block(w, size, off);
	}
	if (err == -ENOSPC)
		err = alloc_split(w, size, off);
	if (err)
		return err;
	r = (struct pr_record *)(w->map.base + *off);
	/* Padding too: a record's bytes are all defined, so a table file
	 * never carries stale memory out of the daemon. The padding is
	 * less than PR_ALIGN bytes at the end, and every record is longer
	 * than 16 bytes: zero its last 16 first, then write the rest over
	 * them (no call for a handful of bytes). */
	_Static_assert(PR_ALIGN <= 16 && sizeof(*r) >= 16, "a record's padding lies in its last 16 bytes");
	memset((uint8_t *)r + size - 16, 0, 16);
	*r = *tmpl;
	pr_copy(r->data, name, tmpl->name_len);
	r->data[tmpl->name_len] = 0;
	pr_copy(r->data + tmpl->name_len + 1, meta, tmpl->meta_len);
	return 0;
}

void procreg__w_discard(struct pr_writer *w, uint64_t off)
{
	const struct pr_record *r = (const struct pr_record *)(w->map.base + off);

	/* Never published: no reader can hold it. */
	release_block(w, off, procreg__record_size(r));
}

static void bump_generation(struct pr_writer *w)
{
	CMM_STORE_SHARED(H(w)->generation, H(w)->generation + 1);
}

static const struct pr_record *rec_at(struct pr_writer *w, uint64_t off)
{
	return (const struct pr_record *)(w->map.base + off);
}

/* Publish OFF, whose slot holds SK beside the offset, at ROOT's slot POS. */
static void publish(struct pr_writer *w, struct pr_root *root, uint64_t pos, uint64_t off,
		    struct pr_skey sk)
{
	struct pr_index *ix = index_at(w, root);
	const struct pr_record *r = rec_at(w, off);
	uint64_t old = ix->slot[pos].word;

	/* The key first: a live word may be read with it (a slot taken over
	 * from another name is not live, and a name's own slot gets its
	 * own key again). The key's store is a release too: a reader that
	 * sees the new key must also see the tombstone or empty word stored
	 * when the slot's last name left, or it could pair that name's word
	 * with this key and find a name never registered (x86 keeps stores
	 * in order anyway; ARM64 does not). The word's release: the key and
	 * the record's bytes before the word that reaches them. */
	PR_STORE_REL(&ix->slot[pos].key, sk.key);
	PR_STORE_REL(&ix->slot[pos].word, pr_slot_word(sk, off));
	PR_TRACE(procregd, publish, r->kind, (const char *)r->data, r->name_len, r->pid, off);
	w->node_refs[r->node]++;
	if (pr_slot_live(old)) {
		const struct pr_record *o = rec_at(w, pr_slot_off(old));

		w->node_refs[o->node]--;
		retire(w, pr_slot_off(old), procreg__record_size(o));
	} else {
		if (old == PR_SLOT_TOMB)
			CMM_STORE_SHARED(root->tombs, root->tombs - 1);
		CMM_STORE_SHARED(root->live, root->live + 1);
		if (r->node == 0)
			CMM_STORE_SHARED(root->local, root->local + 1);
		if (r->kind == PR_KIND_MEMBER)
			CMM_STORE_SHARED(H(w)->memberships, H(w)->memberships + 1);
	}
	bump_generation(w);
}

void procreg__w_publish(struct pr_writer *w, struct pr_root *root, uint64_t pos, uint64_t off)
{
	const struct pr_record *r = rec_at(w, off);

	publish(w, root, pos, off,
		pr_record_skey(r, r->name_len, pr_record_hash(r, r->name_len, H(w)->hash_seed)));
}

void procreg__w_publish_key(struct pr_writer *w, struct pr_root *root, uint64_t pos, uint64_t off,
			    const struct pr_key *k)
{
	publish(w, root, pos, off, k->skey);
}

void procreg__w_remove(struct pr_writer *w, struct pr_root *root, uint64_t pos)
{
	struct pr_index *ix = index_at(w, root);
	uint64_t mask = ix->capacity - 1, old = ix->slot[pos].word;
	const struct pr_record *o = rec_at(w, pr_slot_off(old));

	if (!pr_slot_live(old))
		return;
	/*
	 * A slot followed by an empty one lies on no probe path to a live
	 * entry (no entry sits past an empty slot from its home), so it may
	 * become empty itself, and so may the tombstones before it. Readers
	 * mid-probe see either value and reach the same answer.
	 */
	if (ix->slot[(pos + 1) & mask].word == PR_SLOT_EMPTY) {
		PR_STORE_REL(&ix->slot[pos].word, PR_SLOT_EMPTY);
		for (uint64_t p = (pos - 1) & mask; ix->slot[p].word == PR_SLOT_TOMB;
		     p = (p - 1) & mask) {
			CMM_STORE_SHARED(ix->slot[p].word, PR_SLOT_EMPTY);
			CMM_STORE_SHARED(root->tombs, root->tombs - 1);
		}
	} else {
		PR_STORE_REL(&ix->slot[pos].word, PR_SLOT_TOMB);
		CMM_STORE_SHARED(root->tombs, root->tombs + 1);
	}
	CMM_STORE_SHARED(root->live, root->live - 1);
	w->node_refs[o->node]--;
	if (o->node == 0)
		CMM_STORE_SHARED(root->local, root->local - 1);
	if (o->kind == PR_KIND_MEMBER)
		CMM_STORE_SHARED(H(w)->memberships, H(w)->memberships - 1);
	retire(w, pr_slot_off(old), procreg__record_size(o));
	bump_generation(w);
}

/* ---- groups ----------------------------------------------------------- */

static struct pr_root *group_root_at(struct pr_writer *w, uint64_t group_off)
{
	return (struct pr_root *)(w->map.base + rec_at(w, group_off)->aux);
}

int procreg__w_group(struct pr_writer *w, const char *name, size_t len, bool create,
		     struct pr_root **root)
{
	struct pr_record t = { 0 };
	struct pr_key k;
	struct pr_root *gr;
	uint64_t pos, off, root_off, ioff;
	int err;

	pr_key_name(&k, PR_KIND_GROUP, name, len, H(w)->hash_seed);
	off = procreg__w_find(w, &H(w)->groups, &k, &pos);
	if (off) {
		*root = group_root_at(w, off);
		return 0;
	}
	if (!create)
		return -ENOENT;
	err = procreg__w_reserve(w, &H(w)->groups);
	if (err)
		return err;
	procreg__w_find(w, &H(w)->groups, &k, &pos); /* the reserve may move it */
	err = procreg__w_place_ok(w, &H(w)->groups, &k, pos);
	if (err)
		return err;
	/* Root block and member index first, then the record that reaches
	 * them, then the slot word that reaches the record. */
	err = alloc_block(w, sizeof(*gr), &root_off);
	if (err == -ENOSPC)
		err = alloc_split(w, sizeof(*gr), &root_off);
	if (err)
		return err;
	err = build_index(w, NULL, MEMBER_INDEX_MIN, false, &ioff);
	if (err) {
		release_block(w, root_off, sizeof(*gr));
		return err;
	}
	gr = (struct pr_root *)(w->map.base + root_off);
	memset(gr, 0, sizeof(*gr));
	gr->index_off = ioff;
	t.registered_ns = procreg__w_now(w);
	t.aux = root_off;
	t.uid = w->req_uid == PR_NO_UID ? 0 : w->req_uid;
	t.kind = PR_KIND_GROUP;
	t.name_len = (uint16_t)len;
	err = procreg__w_new_record(w, &t, name, NULL, &off);
	if (err) {
		release_block(w, ioff, index_bytes(MEMBER_INDEX_MIN));
		release_block(w, root_off, sizeof(*gr));
		return err;
	}
	procreg__w_publish(w, &H(w)->groups, pos, off);
	*root = gr;
	return 0;
}

/*
 * A group's member index made smaller once fewer than an eighth of its
 * slots hold a member: a quarter do then. Indexes only grew before, and
 * a group kept the index of the most members it ever had: a user's
 * thousands of short-lived processes, each joining groups anyone may
 * join, left each of those groups 131 KB of table for one member, every
 * lookup of its members scanning them, and charged to no one. A rebuild
 * costs the slots of the index it replaces, so many members left since
 * the last that it costs a constant for each. Only within a batch: the
 * index replaced is retired to it, and a walk of the members under way
 * (a callback that removes what it is given) reads on in it safely.
 */
static void shrink_members(struct pr_writer *w, struct pr_root *gr)
{
	uint64_t cap = index_at(w, gr)->capacity, want = MEMBER_INDEX_MIN;
	bool no_reserve = w->no_reserve, remote = w->remote, hit = w->reserve_hit;

	if (!w->in_batch || cap <= MEMBER_INDEX_MIN || gr->live * 8 >= cap ||
	    procreg__mono_ns() < w->shrink_again_ns)
		return;
	while (want < gr->live * 4)
		want *= 2;
	/* A rebuild nobody asked for: under the strictest limits, whoever's
	 * leave or death made it (never what is kept for root or for this
	 * host's users: a user's leaves would otherwise take it, for good);
	 * refused, the old index stays as it was, and none is tried again
	 * for a while (a refused one may have looked through every large
	 * free block). */
	w->no_reserve = w->remote = true;
	if (rebuild(w, gr, want) < 0)
		w->shrink_again_ns = procreg__mono_ns() + SHRINK_RETRY_NS;
	w->no_reserve = no_reserve;
	w->remote = remote;
	w->reserve_hit = hit;
}

/* Remove a group left empty: its record from the group index, then its
 * root and member index, all freed after a grace period; one left sparse
 * keeps its place, its index made smaller. */
void procreg__w_drop_group_if_empty(struct pr_writer *w, const char *name, size_t len)
{
	struct pr_key k;
	struct pr_root *gr;
	uint64_t pos, off;

	pr_key_name(&k, PR_KIND_GROUP, name, len, H(w)->hash_seed);
	off = procreg__w_find(w, &H(w)->groups, &k, &pos);
	if (!off)
		return;
	gr = group_root_at(w, off);
	if (gr->live) {
		shrink_members(w, gr);
		return;
	}
	retire(w, gr->index_off, index_bytes(index_at(w, gr)->capacity));
	retire(w, rec_at(w, off)->aux, sizeof(*gr));
	procreg__w_remove(w, &H(w)->groups, pos);
}

/* Take the published entry R out of ROOT's slot POS, which holds it. */
static void unpublish_slot(struct pr_writer *w, const struct pr_record *r, struct pr_root *root,
			   uint64_t pos)
{
	procreg__w_remove(w, root, pos);
	/* Retired, not freed: its bytes still name the group. */
	if (r->kind == PR_KIND_MEMBER)
		procreg__w_drop_group_if_empty(w, r->data, r->name_len);
}

int procreg__w_unpublish(struct pr_writer *w, uint64_t off)
{
	const struct pr_record *r = rec_at(w, off);
	struct pr_root *root = &H(w)->names;
	struct pr_key k;
	uint64_t pos;

	if (r->kind == PR_KIND_MEMBER) {
		if (procreg__w_group(w, r->data, r->name_len, false, &root) < 0)
			return -ENOENT;
		pr_key_member(&k, r->pid, r->start_time, r->node, H(w)->hash_seed);
	} else {
		pr_key_name(&k, r->kind, r->data, r->name_len, H(w)->hash_seed);
		if (r->kind == PR_KIND_GROUP)
			root = &H(w)->groups;
	}
	if (procreg__w_find(w, root, &k, &pos) != off)
		return -ENOENT;
	unpublish_slot(w, r, root, pos);
	return 0;
}

int procreg__w_unpublish_at(struct pr_writer *w, uint64_t off, struct pr_root *root, uint64_t pos)
{
	const struct pr_index *ix = index_at(w, root);
	uint64_t wd = pos < ix->capacity ? ix->slot[pos].word : PR_SLOT_EMPTY;

	/* The slot word is the proof: a live word holding OFF is OFF's one
	 * slot in this index, whatever happened since the probe. */
	if (!pr_slot_live(wd) || pr_slot_off(wd) != off)
		return procreg__w_unpublish(w, off);
	unpublish_slot(w, rec_at(w, off), root, pos);
	return 0;
}

/* ---- walking ---------------------------------------------------------- */

static int walk_index(struct pr_writer *w, const struct pr_root *root, pr_walk_cb cb,
		      void *arg)
{
	struct pr_index *ix = index_at(w, root);
	int ret = 0;

	for (uint64_t p = 0; p < ix->capacity && !ret; p++) {
		uint64_t wd = ix->slot[p].word;

		if (pr_slot_live(wd))
			ret = cb(pr_slot_off(wd), rec_at(w, pr_slot_off(wd)), arg);
	}
	return ret;
}

struct walk_groups {
	struct pr_writer *w;
	pr_walk_cb cb;
	void *arg;
};

static int walk_group(uint64_t off, const struct pr_record *g, void *arg)
{
	struct walk_groups *wg = arg;

	(void)g;
	return walk_index(wg->w, group_root_at(wg->w, off), wg->cb, wg->arg);
}

int procreg__w_walk(struct pr_writer *w, pr_walk_cb cb, void *arg)
{
	struct walk_groups wg = { w, cb, arg };

	/* A callback may unpublish what it is given, and so drop a group:
	 * its index and root stay whole (retired, not freed) until the next
	 * grace period, which cannot end before we return. */
	return walk_index(w, &H(w)->names, cb, arg) ?: walk_index(w, &H(w)->groups, walk_group, &wg);
}

/*
 * The walk in parts. A whole walk on the daemon's only thread costs the
 * whole table, every request waiting the while (a snapshot of 10^6 names
 * for a node that came up: 0.3 s). In parts, with the table written in
 * between, it resumes where it stopped in whatever the index became: it
 * works as iteration does (table.c), by hash. Home order is hash order at
 * any capacity, and an entry sits at or after its home, never past an
 * empty slot, so a scan from home(lo) that stops at an empty slot e has
 * seen every entry whose hash is in [lo, e << shift), and the next part
 * starts at that point in hash space. An entry there throughout is seen
 * once; one added or removed meanwhile, once or not at all. Hashes come
 * from the slot word (as build_index() takes them), whose tag holds the
 * top 32 bits: enough, as shift >= 32 (INDEX_MAX) keeps every boundary a
 * multiple of 2^32.
 *
 * Groups: a chunk of the group index is taken by name, then each of its
 * groups' members in parts, the group found again by name for each (it
 * may have gone, or had its member index rebuilt).
 */
enum { WC_NAMES, WC_GROUPS, WC_DONE };

struct pr_wgroup {
	uint16_t len;
	char name[];
};

/* The entry in slot P of IX, to CB if its hash is from LO on and it sits
 * where a scan finds it: at or after its home in the forward scan, before
 * it (the run wrapped from the end) in the WRAPPED one. 0, or CB's. */
static int walk_slot(struct pr_writer *w, const struct pr_index *ix, uint64_t p, uint64_t lo,
		     bool wrapped, pr_walk_cb cb, void *arg)
{
	struct pr_slot sl = ix->slot[p];
	uint64_t h;

	if (!pr_slot_live(sl.word))
		return 0;
	h = (uint64_t)pr_slot_hash_hi(sl.word, sl.key, H(w)->hash_seed) << 32;
	if (h < lo || ((h >> ix->shift) > p) != wrapped)
		return 0;
	return cb(pr_slot_off(sl.word), rec_at(w, pr_slot_off(sl.word)), arg);
}

/* One chunk of IX from hash *LO: every live entry from *LO to the first
 * empty slot at least BUDGET slots on, to CB; *LO moved there. 1 once the
 * end is passed (and the run that wraps from it to the start seen), 0
 * if more remain, or CB's result when not 0 (negative). Slots looked at:
 * *SPENT. */
static int walk_chunk(struct pr_writer *w, const struct pr_index *ix, uint64_t *lo,
		      uint64_t budget, pr_walk_cb cb, void *arg, uint64_t *spent)
{
	uint64_t p0 = *lo >> ix->shift, p, lim = budget ? budget : 1;
	int ret;

	for (p = p0; p < ix->capacity; p++) {
		if (ix->slot[p].word == PR_SLOT_EMPTY) {
			if (p - p0 >= lim) {
				*spent += p - p0;
				*lo = p << ix->shift;
				return 0;
			}
			continue;
		}
		if ((ret = walk_slot(w, ix, p, *lo, false, cb, arg)))
			return ret;
	}
	*spent += p - p0;
	/* The run that wraps to the start: its entries whose home is before
	 * the end, skipped by the forward scan if it started at 0. */
	for (p = 0; p < ix->capacity && ix->slot[p].word != PR_SLOT_EMPTY; p++)
		if ((ret = walk_slot(w, ix, p, *lo, true, cb, arg)))
			return ret;
	*spent += p;
	return 1;
}

/* A group of the chunk at hand, kept by name. */
static int take_group(uint64_t off, const struct pr_record *g, void *arg)
{
	struct pr_wcursor *c = arg;
	struct pr_wgroup *e;

	(void)off;
	if (c->ngroups == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 16;
		struct pr_wgroup **v = realloc(c->groups, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->groups = v;
		c->cap = cap;
	}
	if (!(e = malloc(sizeof(*e) + g->name_len)))
		return -ENOMEM;
	e->len = g->name_len;
	memcpy(e->name, g->data, g->name_len);
	c->groups[c->ngroups++] = e;
	return 0;
}

static void drop_groups(struct pr_wcursor *c)
{
	for (size_t i = c->at; i < c->ngroups; i++)
		free(c->groups[i]);
	c->ngroups = c->at = 0;
	c->mlo = 0;
}

int procreg__w_walk_some(struct pr_writer *w, struct pr_wcursor *c, uint64_t budget,
			 pr_walk_cb cb, void *arg)
{
	uint64_t spent = 0;
	int r;

	while (c->phase != WC_DONE && spent < budget) {
		if (c->phase == WC_NAMES) {
			r = walk_chunk(w, index_at(w, &H(w)->names), &c->lo, budget - spent, cb, arg,
				       &spent);
			if (r < 0)
				return r;
			if (r == 1) {
				c->phase = WC_GROUPS;
				c->lo = 0;
			}
		} else if (c->at < c->ngroups) {
			struct pr_wgroup *g = c->groups[c->at];
			struct pr_root *root;

			r = procreg__w_group(w, g->name, g->len, false, &root) ? 1
			    : walk_chunk(w, index_at(w, root), &c->mlo, budget - spent, cb, arg, &spent);
			if (r < 0)
				return r;
			if (r == 1) {
				free(g);
				c->at++;
				c->mlo = 0;
			}
		} else if (c->groups_end) {
			drop_groups(c);
			c->phase = WC_DONE;
		} else {
			drop_groups(c);
			r = walk_chunk(w, index_at(w, &H(w)->groups), &c->lo, budget - spent,
				       take_group, c, &spent);
			if (r < 0)
				return r;
			c->groups_end = r == 1;
		}
	}
	return c->phase != WC_DONE;
}

void procreg__w_cursor_free(struct pr_wcursor *c)
{
	drop_groups(c);
	free(c->groups);
	memset(c, 0, sizeof(*c));
}

/* ---- files ------------------------------------------------------------ */

static int init_table(struct pr_writer *w, int fd, uint64_t size, uint32_t readers)
{
	struct pr_table_hdr *h;
	uint64_t off;
	int err;

	if (ftruncate(fd, (off_t)size) < 0)
		return -errno;
	err = procreg__map_file(fd, (off_t)size, PROT_READ | PROT_WRITE, (void **)&h);
	if (err)
		return err;
	w->map.base = (uint8_t *)h;
	pr_map_sized(&w->map, size);
	w->map.hdr = h;
	w->table_fd = fd;
	/* The header page before it is written; the feed's ring and the
	 * first indexes come from alloc_block, which allocates pages too. On
	 * a full filesystem, creation fails here with -ENOSPC. */
	err = back_pages(w, PR_HDR_SIZE);
	if (err)
		return err;
	h->layout_version = PR_LAYOUT_VERSION;
	h->hdr_size = PR_HDR_SIZE;
	h->size_desc = PR_SIZE_DESC;
	h->file_size = size;
	h->arena_off = PR_HDR_SIZE;
	h->arena_top = PR_HDR_SIZE;
	h->created_ns = procreg__now_ns();
	h->name_max = PROCREG_NAME_MAX;
	h->meta_max = PROCREG_META_MAX;
	if (getrandom(&h->hash_seed, sizeof(h->hash_seed), 0) != sizeof(h->hash_seed))
		h->hash_seed = procreg__now_ns() ^ ((uint64_t)getpid() << 32);
	procreg__boot_id(h->boot_id);
	/* The feed's ring: up to 8192 events, fewer in a small table. */
	h->feed_cap = 8192;
	while (h->feed_cap > 16 && h->feed_cap * sizeof(struct pr_event) * 64 > size)
		h->feed_cap /= 2;
	err = alloc_block(w, h->feed_cap * sizeof(struct pr_event), &h->feed_off);
	if (err)
		return err;
	/* The reader registry: zeroed entries are free ones. */
	h->readers_cap = readers;
	err = alloc_block(w, (uint64_t)readers * sizeof(struct pr_reader_info), &h->readers_off);
	if (err)
		return err;
	memset(w->map.base + h->readers_off, 0, (size_t)readers * sizeof(struct pr_reader_info));
	h->gp = 1;
	err = build_index(w, NULL, INDEX_MIN, true, &off);
	if (err)
		return err;
	h->names.index_off = off;
	err = build_index(w, NULL, INDEX_MIN, true, &off);
	if (err)
		return err;
	h->groups.index_off = off;
	/* Release: a reader that sees the magic sees a whole header. */
	PR_STORE_REL(&h->magic, PR_TABLE_MAGIC);
	return 0;
}

/* Create PATH's content in a temporary file (O_EXCL, a name no one can
 * guess), then give it its name without replacing anything, so no reader
 * ever opens a half-made file and nothing planted at PATH is followed.
 * Returns the open fd, locked, or -EEXIST if PATH exists by then. */
static int create_table(struct pr_writer *w, const char *path, int mode, uint64_t size,
			uint32_t readers)
{
	char tmp[PR_PATH_MAX + 16];
	int fd, err;

	snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		err = -errno;
		goto fail;
	}
	err = fchmod(fd, (mode_t)mode) < 0 ? -errno : 0;
	if (!err)
		err = init_table(w, fd, size, readers);
	if (err)
		goto fail;
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) < 0) {
		err = -errno;
		goto fail;
	}
	return fd;
fail:
	if (w->map.base) {
		munmap(w->map.base, w->map.size);
		w->map.base = NULL;
		w->map.hdr = NULL;
		w->table_fd = -1;
		w->backed = 0;
	}
	unlink(tmp);
	close(fd);
	return err;
}

static int map_rw(int fd, void **base, size_t *size)
{
	struct stat st;
	int err;

	if (fstat(fd, &st) < 0)
		return -errno;
	err = procreg__map_file(fd, st.st_size, PROT_READ | PROT_WRITE, base);
	if (!err)
		*size = (size_t)st.st_size;
	return err;
}

/* procreg__owned_file_check() on ST, the file's status. */
static int owned_stat_check(const struct stat *st, const char **why)
{
	if (!S_ISREG(st->st_mode)) {
		*why = "not a regular file: refused";
		return -EPERM;
	}
	/* Root's, to a daemon that is not root: most likely left by a
	 * procregd that ran as root, before its service ran it as a system
	 * user. Not taken over: a file of root's in a shared directory is
	 * not a system user's to take, and only root could give it. */
	if (st->st_uid == 0 && geteuid() != 0) {
		*why = "owned by root (left by a procregd that ran as root?): refused (remove it "
		       "as root, and its names with it, or use another --dir or --scope)";
		return -EPERM;
	}
	if (st->st_uid != geteuid()) {
		*why = "owned by another user: refused (remove it, as root or as its owner, "
		       "or use another --dir or --scope)";
		return -EPERM;
	}
	/* We create it with one name: a file with more is one someone linked
	 * here (or ours linked elsewhere), not the table of this scope. */
	if (st->st_nlink != 1) {
		*why = "has other hard links: refused";
		return -EPERM;
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		*why = "writable by other users: refused";
		return -EPERM;
	}
	return 0;
}

int procreg__owned_file_check(int fd, const char **why)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	return owned_stat_check(&st, why);
}

int procreg__dir_check(const char *dir, const char **why)
{
	struct stat st;

	if (stat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode)) {
		*why = "not a directory";
		return -ENOTDIR;
	}
	/* Others may create files here only where the sticky bit stops them
	 * from renaming or removing ours (as in /dev/shm and /tmp). */
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		*why = "the directory belongs to another user, who could replace anything in it: "
		       "refused";
		return -EPERM;
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
		*why = "the directory is writable by other users and not sticky: anyone could "
		       "replace the files in it: refused";
		return -EPERM;
	}
	return 0;
}

int procreg__writer_open(struct pr_writer *w, const struct pr_paths *p,
			 const struct pr_writer_opts *o, const char **why)
{
	void *base = NULL;
	size_t size = 0;
	int fd, err;

	memset(w, 0, sizeof(*w));
	w->paths = *p;
	w->table_fd = -1;
	w->req_uid = PR_NO_UID;
	w->classes = calloc(NCLASS, sizeof(*w->classes));
	w->node_refs = calloc(UINT16_MAX + 1, sizeof(*w->node_refs));
	if (!w->classes || !w->node_refs)
		return -ENOMEM;
	if (o->max_size < PR_HDR_SIZE + (1u << 20) || o->max_size > PR_MAX_FILE_SIZE ||
	    o->readers == 0 || o->readers > (1u << 20)) {
		*why = "limits out of range";
		return -EINVAL;
	}
	err = procreg__dir_check(p->dir, why);
	if (err)
		return err;
	for (;;) {
		/* O_NOFOLLOW: a symbolic link planted here (dangling, or to a
		 * file of ours elsewhere) is refused, never followed. */
		fd = open(p->table, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0) {
			err = procreg__owned_file_check(fd, why);
			if (!err && flock(fd, LOCK_EX | LOCK_NB) < 0) {
				err = errno == EWOULDBLOCK ? -EBUSY : -errno;
				*why = "another procregd serves this scope";
			}
			if (!err)
				err = map_rw(fd, &base, &size);
			if (!err)
				err = procreg__check_table_hdr(base, size, why);
			if (err) {
				close(fd);
				return err;
			}
			w->map.base = base;
			pr_map_sized(&w->map, size);
			w->map.hdr = base;
			w->attached = true;
			break;
		}
		if (errno == ELOOP) {
			*why = "is a symbolic link: refused (remove it)";
			return -ELOOP;
		}
		/* Another user's file we may not write (a table a procregd
		 * that ran as root left): say whose. */
		if (errno == EACCES) {
			struct stat st;

			if (lstat(p->table, &st) == 0 && owned_stat_check(&st, why) < 0)
				return -EPERM;
			return -EACCES;
		}
		if (errno != ENOENT)
			return -errno;
		fd = create_table(w, p->table, o->mode, o->max_size, o->readers);
		if (fd >= 0)
			break;
		if (fd != -EEXIST) {
			*why = "cannot create the table file";
			return fd;
		}
	}
	w->table_fd = fd;
	w->map.owner = geteuid();
	/* From here on the counter is ours; the shared copy is only written.
	 * (A daemon without membarrier taking over from one with it leaves
	 * readers already inside a critical section ordered by compiler
	 * barriers only, for the length of that section: both daemons run
	 * on one kernel, so only a sandbox differing between them gets
	 * here.) */
	w->gp = CMM_LOAD_SHARED(w->map.hdr->gp);
	/* A grace period is freed only once it has been started: a freed
	 * one past the counter is damage, and would have every read redone
	 * until it gives up. */
	if (CMM_LOAD_SHARED(w->map.hdr->freed_gp) > w->gp) {
		w->gp = w->map.hdr->freed_gp;
		CMM_STORE_SHARED(w->map.hdr->gp, w->gp);
	}
	w->membarrier = procreg__membarrier_expedited();
	CMM_STORE_SHARED(w->map.hdr->writer_flags, w->membarrier ? PR_WRITER_MEMBARRIER : 0);
	cmm_smp_mb();
	/* A bit for each PR_ALIGN bytes of the file (1/128 of it, touched
	 * only where the arena is used). Without it (no memory) blocks are
	 * never merged, as before there was one. */
	w->freemap = calloc(w->map.size / (PR_ALIGN * 64) + 1, sizeof(*w->freemap));
	return 0;
}

void procreg__writer_close(struct pr_writer *w)
{
	if (w->map.base)
		munmap(w->map.base, w->map.size);
	if (w->table_fd >= 0)
		close(w->table_fd);
	for (size_t i = 0; i < w->readers.n; i++)
		procreg__rpage_unmap(&w->readers.v[i]);
	free(w->readers.v);
	if (w->classes)
		for (int i = 0; i < NCLASS; i++)
			procreg__vec_free(&w->classes[i]);
	free(w->classes);
	free(w->node_refs);
	free(w->freemap);
	procreg__vec_free(&w->large);
	procreg__vec_free(&w->retired);
	procreg__vec_free(&w->current);
	procreg__vec_free(&w->waiting);
	memset(w, 0, sizeof(*w));
	w->table_fd = -1;
}

int procreg__w_reader_add(struct pr_writer *w, const struct pr_rpage_ref *ref)
{
	struct pr_rpages *rp = &w->readers;

	if (rp->n == rp->cap) {
		size_t cap = rp->cap ? rp->cap * 2 : 64;
		struct pr_rpage_ref *v = realloc(rp->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		rp->v = v;
		rp->cap = cap;
	}
	rp->v[rp->n++] = *ref;
	return 0;
}

void procreg__w_reader_drop(struct pr_writer *w, size_t i)
{
	struct pr_rpages *rp = &w->readers;

	/* A grace period in flight may wait for it no longer: the process
	 * is gone, or said it is done with the page. */
	procreg__rpage_unmap(&rp->v[i]);
	rp->v[i] = rp->v[--rp->n];
}

/* ---- recovery --------------------------------------------------------- */

static int cmp_u64pair(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The index block at IOFF, if it is whole and inside the arena: its
 * capacity, else 0. Aligned like every arena block, or it is no index
 * (and reading it as one would be a misaligned access); bounded without
 * overflow, and only then turned into a pointer. */
static uint64_t sound_index(struct pr_writer *w, uint64_t ioff)
{
	struct pr_table_hdr *h = H(w);
	const struct pr_index *ix;
	uint64_t cap;

	if (ioff % PR_ALIGN || ioff < h->arena_off || ioff > h->arena_top - sizeof(*ix))
		return 0;
	ix = (const struct pr_index *)(w->map.base + ioff);
	cap = ix->capacity;
	if (cap < 2 || (cap & (cap - 1)) || cap > INDEX_MAX ||
	    cap > (h->arena_top - ioff - sizeof(*ix)) / sizeof(struct pr_slot) ||
	    ix->shift != 64 - (uint32_t)__builtin_ctzll(cap))
		return 0;
	return cap;
}

/* A record a crashed writer left reachable is whole (it was published
 * only once written); check it anyway, since the file may have been
 * damaged by something else. */
static int record_sound(struct pr_writer *w, const struct pr_slot *sl, uint8_t kind)
{
	uint64_t wd = sl->word;
	const struct pr_record *r = procreg__record_at(&w->map, wd);
	struct pr_skey sk;

	if (!r || r->kind != kind || pr_slot_off(wd) < H(w)->arena_off ||
	    pr_slot_off(wd) + procreg__record_size(r) > H(w)->arena_top ||
	    memchr(r->data, 0, r->name_len) || r->data[r->name_len] != 0)
		return 0;
	sk = pr_record_skey(r, r->name_len, pr_record_hash(r, r->name_len, H(w)->hash_seed));
	if (!pr_slot_is(wd, sl->key, sk))
		return 0;
	if (kind == PR_KIND_GROUP)
		return r->aux % PR_ALIGN == 0 && r->aux >= H(w)->arena_off &&
		       r->aux <= H(w)->arena_top - sizeof(struct pr_root);
	return 1;
}


/* Recount ROOT's index and collect every block it reaches into BLOCKS; a
 * slot whose record is unsound (or a group whose members' index is)
 * becomes a tombstone. -EUCLEAN if the index itself is unusable. */
static int recover_root(struct pr_writer *w, struct pr_root *root, uint8_t kind,
			struct pr_vec *blocks, uint64_t *members)
{
	uint64_t cap = sound_index(w, root->index_off), live = 0, tombs = 0, local = 0;
	struct pr_index *ix;
	int err;

	if (!cap)
		return -EUCLEAN;
	ix = index_at(w, root);
	err = push_pair(blocks, root->index_off, index_bytes(cap));
	for (uint64_t p = 0; p < cap && !err; p++) {
		uint64_t wd = ix->slot[p].word;
		const struct pr_record *r = rec_at(w, pr_slot_off(wd));
		size_t mark = blocks->n;

		if (wd == PR_SLOT_TOMB)
			tombs++;
		if (!pr_slot_live(wd))
			continue;
		if (!record_sound(w, &ix->slot[p], kind)) {
			PR_STORE_REL(&ix->slot[p].word, PR_SLOT_TOMB);
			tombs++;
			continue;
		}
		if (kind == PR_KIND_GROUP) {
			struct pr_root *gr = group_root_at(w, pr_slot_off(wd));
			uint64_t n = 0;

			err = recover_root(w, gr, PR_KIND_MEMBER, blocks, &n);
			if (err == -EUCLEAN || (!err && n == 0)) {
				/* Unusable or empty: the group goes. */
				blocks->n = mark;
				PR_STORE_REL(&ix->slot[p].word, PR_SLOT_TOMB);
				tombs++;
				err = 0;
				continue;
			}
			*members += n;
			err = err ?: push_pair(blocks, r->aux, sizeof(struct pr_root));
		}
		live++;
		local += r->node == 0;
		w->node_refs[r->node]++;
		err = err ?: push_pair(blocks, pr_slot_off(wd), procreg__record_size(r));
	}
	CMM_STORE_SHARED(root->live, live);
	CMM_STORE_SHARED(root->tombs, tombs);
	CMM_STORE_SHARED(root->local, local);
	if (kind == PR_KIND_MEMBER && members)
		*members = live;
	return err;
}

int procreg__w_recover(struct pr_writer *w)
{
	struct pr_table_hdr *h = H(w);
	struct pr_vec blocks = { 0 };
	uint64_t end, memberships = 0;
	int err;

	if (h->arena_top < h->arena_off || h->arena_top > w->map.size)
		return -EUCLEAN;
	/* How far the file is allocated: everything below the top was
	 * (written, or allocated ahead, by the daemon before us), and
	 * allocating it again costs nothing where it is. A table whose
	 * writer left holes there gets them filled now, or -ENOSPC: never a
	 * SIGBUS later, at the first store into one. */
	w->backed = 0;
	err = back_pages(w, h->arena_top);
	if (err)
		return err;
	if (!h->feed_cap || (h->feed_cap & (h->feed_cap - 1)) || h->feed_off % PR_ALIGN ||
	    h->feed_off < h->arena_off || h->feed_off > h->arena_top ||
	    h->feed_cap > (h->arena_top - h->feed_off) / sizeof(struct pr_event))
		return -EUCLEAN;
	if (h->readers_off % PR_ALIGN || h->readers_off < h->arena_off ||
	    h->readers_off > h->arena_top ||
	    h->readers_cap > (h->arena_top - h->readers_off) / sizeof(struct pr_reader_info))
		return -EUCLEAN;
	err = push_pair(&blocks, h->feed_off, h->feed_cap * sizeof(struct pr_event));
	if (!err && h->readers_cap)
		err = push_pair(&blocks, h->readers_off,
				 (uint64_t)h->readers_cap * sizeof(struct pr_reader_info));
	if (!err)
		err = recover_root(w, &h->names, PR_KIND_NAME, &blocks, NULL);
	if (!err)
		err = recover_root(w, &h->groups, PR_KIND_GROUP, &blocks, &memberships);
	if (err)
		goto out;
	qsort(blocks.v, blocks.n / 2, 2 * sizeof(uint64_t), cmp_u64pair);

	/* The gaps are free, but a reader of the old daemon may still be
	 * inside a block that daemon retired: they wait for a grace period
	 * like anything retired. Overlapping blocks would mean damage the
	 * checks above missed; such a block is left alone. */
	w->retired.n = 0;
	end = h->arena_off;
	h->arena_used = 0;
	for (size_t i = 0; i < blocks.n; i += 2) {
		uint64_t o = blocks.v[i], s = (blocks.v[i + 1] + PR_ALIGN - 1) & ~(uint64_t)(PR_ALIGN - 1);

		if (o > end) {
			retire(w, end, o - end);
			h->arena_used += o - end; /* released when the batch frees */
		}
		if (o + s > end)
			end = o + s;
		h->arena_used += s;
	}
	if (h->arena_top > end) {
		retire(w, end, h->arena_top - end);
		h->arena_used += h->arena_top - end;
	}
	CMM_STORE_SHARED(h->memberships, memberships);
	procreg__w_reclaim(w);
out:
	procreg__vec_free(&blocks);
	return err;
}
