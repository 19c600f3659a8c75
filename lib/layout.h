/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * layout.h - every structure procreg keeps in shared memory.
 *
 * One file per scope, in the table directory (/dev/shm by default):
 *
 *   procreg.<scope>          the table. procregd maps it read-write and is
 *                            the only process that ever writes it; every
 *                            other process maps it PROT_READ. It holds the
 *                            grace-period counter too.
 *
 * and one or more reader pages per reading process, in memory of that
 * process's own (a sealed memfd, never a file in a shared directory): its
 * threads' reader slots. The reader writes them; procregd, which the
 * reader hands each page to, maps them PROT_READ. See rcu.c.
 *
 * THE TABLE. A header page, then an arena. The arena holds records (a
 * name, a group, or one process's membership of a group), index blocks (an
 * open-addressing hash index of 16-byte slots) and groups' root blocks.
 * There are three kinds of index: one for names and one for groups, rooted
 * in the header, and one per group for its members, rooted in the group's
 * root block; they all work as described here. Nothing holds a
 * pointer: a link is a byte offset from the start of the file, so every
 * process may map the file wherever it likes.
 *
 * Records are immutable once published: the daemon fills a record in
 * private, then makes it reachable with one release store of a slot word.
 * Replacing a name's metadata writes a new record and swaps the slot word;
 * removing it stores a tombstone. Either way the old record is retired and
 * freed only after a grace period, so a reader that found it a moment ago
 * reads whole, unchanging bytes.
 *
 * A slot is 16 bytes, four to a cache line: a word (tag << 32 | offset /
 * 16) and a key. 0 is an empty slot (ends a probe), 1 a tombstone (a
 * removed name: the probe goes on). Slot words only ever go empty ->
 * record, record -> record, record -> tombstone and tombstone -> record,
 * so a name that stays registered is found by every probe, whatever else
 * changes. What the rest of a live slot holds depends on the name:
 *
 *  - a name (or group) of at most PR_INLINE_MAX bytes is in the slot
 *    itself: its first 8 bytes in key and the rest in the word's top
 *    half, zero-padded (a name shorter than 8 bytes: all of it in key,
 *    its first 4 bytes in the top half; pr_skey_words). Names hold no
 *    NUL, so key is not 0 and no two names fill a slot alike: a presence
 *    test compares the slot and is done, one cache line rather than the
 *    slot's and the record's.
 *  - a longer name, and every membership, has key 0 and the top half of
 *    its hash as the tag: a probe rejects most slots that are not its
 *    own without touching the record, and reads the record to be sure.
 *
 * The daemon stores the key, then the word, each with release (the key's
 * orders it after the word that emptied the slot before). A presence test
 * loads the word with acquire, then the key, then the word again, and
 * takes the pair only if the word did not change in between (an offset
 * cannot come back to a slot while a reader might hold it: the record it
 * named is freed a grace period after it left); a lookup that copies the
 * entry out compares the name in the record instead. An index rebuild
 * finds each entry's new home (the top bits of its hash) from the slot
 * alone, from the tag or by hashing the 12 bytes.
 *
 * The index grows (and sheds tombstones) by being rebuilt: the daemon
 * builds a new index block holding the same slots, publishes its
 * offset in the header with one release store, and retires the old block.
 * Records do not move, so a rebuild copies 16 bytes per name. Readers that
 * loaded the old index finish their probe in it; it is still whole.
 *
 * A reader trusts nothing here: every offset it follows is checked against
 * the mapping before use, and every probe is bounded by the index capacity.
 *
 * READER PAGES. A header, then one cache line per reader slot. See rcu.c
 * for the protocol.
 */
#ifndef PROCREG_LAYOUT_H
#define PROCREG_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "procreg.h"

#define PR_TABLE_MAGIC   0x31474552434f5250ull /* "PROCREG1", little-endian */
#define PR_RPAGE_MAGIC 0x32444552434f5250ull /* "PROCRED2" */
#define PR_LAYOUT_VERSION 5u

#define PR_CACHELINE 64
#define PR_ALIGN 16u              /* every arena block is 16-byte aligned */
#define PR_HDR_SIZE 4096u         /* the header page; the arena follows */

#define PR_SLOT_EMPTY 0ull
#define PR_SLOT_TOMB 1ull

/* Offsets are stored in 16-byte units in 32 bits: 64 GiB of arena. */
#define PR_MAX_FILE_SIZE (1ull << 36)

#define PR_SOCKET_PATH_MAX 108

/* An index and what it holds: the name index and the group index (in the
 * header), and each group's member index (in a block of its own, which the
 * group's record points to). Written by the daemon alone. index_off is
 * stored with release and loaded with acquire: the index block's contents
 * were written before. The counts are plain loads for readers: a count
 * read while the daemon writes is the value before or after one change. */
struct pr_root {
	uint64_t index_off;         /* the current index block */
	/* index_off alone on its line: every lookup reads it, and the
	 * counts below change with every write. Sharing a line, each write
	 * would cost readers a cache miss (measured: lookups under a write
	 * storm fell to 0.77x of idle with them together). */
	uint64_t pad0[7];
	uint64_t live;              /* live entries: the O(1) count */
	uint64_t tombs;             /* tombstones (writer bookkeeping) */
	uint64_t local;             /* live entries of this node (node 0) */
	uint64_t pad1[5];
};

/* The table header. The immutable part is written once, before the magic
 * is published; the rest is written by the daemon alone and read by anyone
 * with plain (possibly torn-across-fields) loads: counters are advisory,
 * except index_off, which is the root of every lookup and is stored with
 * release and loaded with acquire. */
struct pr_table_hdr {
	/* Immutable after creation. */
	uint64_t magic;             /* stored last, with release */
	uint32_t layout_version;
	uint32_t hdr_size;
	uint64_t size_desc;         /* PR_SIZE_DESC of the creating build */
	uint64_t file_size;         /* the file's length: the mapping size */
	uint64_t arena_off;         /* first arena byte */
	uint64_t hash_seed;         /* random per table: names cannot be chosen to collide */
	uint64_t created_ns;
	uint8_t boot_id[16];        /* the boot the local entries belong to */
	uint32_t name_max;
	uint32_t meta_max;
	uint64_t feed_off;          /* the change feed's ring of events */
	uint64_t feed_cap;          /* events in the ring, a power of two */
	uint64_t readers_off;       /* the reader registry: readers_cap struct pr_reader_info */
	uint32_t readers_cap;
	uint8_t pad0[20];

	/* Daemon-written, one field per concern. */
	struct pr_root names;       /* the name index */
	struct pr_root groups;      /* the group index */
	uint64_t arena_top;         /* bump pointer: arena bytes ever handed out end here */
	uint64_t arena_used;        /* bytes in live blocks */
	uint64_t memberships;       /* group memberships, all groups */
	uint64_t processes;
	uint64_t grace_periods;
	uint64_t registrations;
	uint64_t unregistrations;
	uint64_t joins;
	uint64_t leaves;
	uint64_t deaths;
	uint64_t rehashes;
	uint64_t generation;        /* bumped by every publish */
	uint32_t daemon_pid;        /* 0 while no daemon runs */
	uint32_t pad1;
	uint64_t daemon_start_ticks;
	uint64_t daemon_started_ns;
	char socket_path[PR_SOCKET_PATH_MAX]; /* written before daemon_pid */
	uint32_t pad2;
	/* The change feed: the number of the newest whole event (release/
	 * acquire), and a futex word the daemon bumps after publishing a
	 * batch of events, which followers sleep on. */
	uint64_t feed_head __attribute__((aligned(PR_CACHELINE)));
	uint32_t feed_futex;
	uint32_t pad3;

	/*
	 * Grace periods (rcu.c). Every read lock loads gp, writer_flags and
	 * daemon_gen, every unlock freed_gp: one line, alone, written once
	 * per grace period and once per daemon start.
	 *  gp          the grace-period counter. Starts at 1, only grows (64
	 *              bits: never wraps). Stored with release.
	 *  writer_flags PR_WRITER_*.
	 *  freed_gp    the newest grace period whose retired memory has been
	 *              handed back to the allocator: a block retired after a
	 *              reader loaded gp = g may have been reused once
	 *              freed_gp > g. Stored before any such block is reused.
	 *  daemon_gen  bumped by each daemon start, after daemon_pid: a
	 *              reader whose pages the current daemon has not been
	 *              given sends them (rcu.c).
	 */
	uint64_t gp __attribute__((aligned(PR_CACHELINE)));
	uint64_t writer_flags;
	uint64_t freed_gp;
	uint64_t daemon_gen;
	uint8_t pad4[PR_CACHELINE - 32];

	/* The reader registry's summary (daemon-written, advisory). */
	uint32_t readers_live;      /* reader processes registered */
	uint32_t readers_stalled;   /* of them, no longer waited for */
	uint64_t reader_stalls;     /* readers ever found holding a grace period too long */
	uint64_t readers_refused;   /* pages refused: quota, or not a sealed page */
	uint32_t last_stall_pid;    /* the last one found, for procreg stats */
	uint32_t last_stall_uid;
	uint64_t last_stall_ns;     /* CLOCK_REALTIME */
	uint8_t pad5[PR_CACHELINE - 40];
};

/*
 * One event of the change feed: a fixed-size slot of a ring. The daemon
 * writes event s into slot s % feed_cap: seq = 0, then the payload, then
 * seq = s (release), then feed_head = s (release). A follower reading
 * event s checks seq == s (acquire) before copying and again after: if
 * either differs, the daemon has lapped it and reused the slot. No lock;
 * the daemon never waits for a follower.
 */
struct pr_event {
	uint64_t seq;
	uint64_t time_ns;           /* CLOCK_REALTIME */
	uint64_t start_time;        /* the process's */
	uint32_t type;              /* enum procreg_event_type */
	uint32_t pid;
	uint32_t node;
	uint32_t uid;
	uint16_t name_len;
	uint8_t kind;               /* enum pr_kind of what it names */
	uint8_t pad[5];
	char name[PROCREG_NAME_MAX + 1];
	uint8_t pad2[16];
};

/* An index slot (see the top of this file). The daemon writes both
 * fields: key first, then word, each with release. */
struct pr_slot {
	uint64_t word;              /* tag or name bytes 8-11 << 32 | offset / 16 */
	uint64_t key;               /* a short name's first 8 bytes; 0: hashed */
};

/* The longest name kept whole in its slot. */
#define PR_INLINE_MAX 12

/* An index block: capacity is a power of two, and a name's home slot is
 * the top bits of its hash (hash >> shift). Top bits rather than low bits
 * keep home order equal to hash order whatever the capacity, which is what
 * lets an iteration resume in a rebuilt index (see table.c). capacity and
 * shift are immutable once published; slot words change as described
 * above. */
struct pr_index {
	uint64_t capacity;
	uint32_t shift;             /* 64 - log2(capacity) */
	uint32_t pad;
	struct pr_slot slot[];
};

/*
 * A record. Immutable once published. Three kinds share the layout:
 *
 *  NAME    a registered name: data = name, NUL, metadata; in the name index,
 *          hashed by name.
 *  GROUP   a group: data = group name, NUL; aux = offset of the group's
 *          struct pr_root (its member index and counts); in the group
 *          index, hashed by name. Exists while the group has members.
 *  MEMBER  a membership: data = group name, NUL, membership metadata; in
 *          its group's member index, hashed by (pid, start time, node).
 */
enum pr_kind { PR_KIND_NAME = 1, PR_KIND_GROUP = 2, PR_KIND_MEMBER = 3 };

/* Record flags: the PROCREG_ENTRY_* values of procreg.h. */
#define PR_REC_FLAGS (PROCREG_ENTRY_REPLACEABLE | PROCREG_ENTRY_LEASED | PROCREG_ENTRY_UNHEALTHY)

struct pr_record {
	uint32_t pid;
	uint32_t uid;
	uint64_t start_time;        /* owner's start time, clock ticks since boot */
	uint64_t registered_ns;     /* CLOCK_REALTIME */
	uint64_t aux;               /* NAME, MEMBER: the owner's pidfs inode (0 where
				     * the kernel has none); GROUP: its root block */
	/* What a probe compares, last, next to the name it compares. */
	uint16_t name_len;          /* without the NUL */
	uint16_t meta_len;
	uint8_t kind;               /* enum pr_kind */
	uint8_t flags;              /* PROCREG_ENTRY_* */
	uint16_t node;              /* 0: this host */
	char data[];                /* name, NUL, meta */
};

/* 40 bytes: a short name shares the header's cache line, and a lookup of
 * one with short metadata touches two lines of record at most. A probe
 * that only compares (a presence test, a slot whose tag matched another
 * name's) reads the lengths and kind and then the name: 9 bytes and the
 * name, one line unless they straddle one. Records start on 16-byte
 * steps, and with the lengths first and the name after 40 bytes, the
 * common 80-byte record (a 12-byte name, 27 of metadata) had them over
 * two lines three times in four; with them together, once in four. No hash:
 * the slot holds its top half or the name itself, and the writer, an
 * iteration or a check that wants all of it computes it from the key
 * (pr_record_hash); keeping it cost 8 bytes a name, 16 where it crossed a
 * 16-byte step. */
#define PR_RECORD_SIZE(nlen, mlen) \
	(((sizeof(struct pr_record) + (nlen) + 1 + (mlen)) + PR_ALIGN - 1) & ~(size_t)(PR_ALIGN - 1))
/* The smallest record: two records start at least this far apart. */
#define PR_RECORD_MIN PR_RECORD_SIZE(0, 0)

/* The daemon issues membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) before
 * every grace-period scan: registered readers may order their slot store
 * with a compiler barrier. */
#define PR_WRITER_MEMBARRIER 1ull

/*
 * A reader page: one page of a reading process's own memory (a memfd it
 * seals against shrinking, growing, new writable mappings and hole
 * punching), written by that process's threads only, mapped PROT_READ by
 * procregd. Nothing in it is trusted by anyone but its writer: the daemon
 * reads ctr values and bounds every loop by numbers it checked itself.
 *
 *  magic .. size_desc   written once, before the page is sealed.
 *  hw      slots ever claimed end here: the daemon scans no further. A
 *          page that lies about it hides its own slots only.
 *  closed  set when its process closes the handle that made it: the daemon
 *          drops the page. A page that lies about it loses its own
 *          protection only.
 */
struct pr_rpage_hdr {
	uint64_t magic;
	uint32_t layout_version;
	uint32_t nslots;
	uint64_t size_desc;
	uint32_t hw;
	uint32_t closed;
	uint8_t pad[PR_CACHELINE - 32];
};

/*
 * One reader slot, one cache line, so that readers never share a line.
 *
 *  owner   the claiming thread's tid, 0 when free. Threads of the page's
 *          process claim a free slot with compare-and-swap and store 0
 *          when they exit.
 *  ctr     0 outside a read-side critical section; inside one, the value
 *          of gp the reader loaded on entry.
 *  lookups lookups done by this thread: a counter in the reader's own
 *          line, so counting costs no shared write.
 */
struct pr_reader_slot {
	uint64_t owner;
	uint64_t ctr;
	uint64_t lookups;
	uint8_t pad[PR_CACHELINE - 24];
};

#define PR_RPAGE_SIZE 4096u
#define PR_RPAGE_SLOTS ((PR_RPAGE_SIZE - sizeof(struct pr_rpage_hdr)) / sizeof(struct pr_reader_slot))

/*
 * The reader registry in the table: one entry per reader process whose
 * pages procregd holds, for procreg readers and procreg top. Written by
 * the daemon only, under seq (odd while an entry is rewritten); the
 * counters are refreshed from the pages about once a second.
 */
#define PR_READER_STALLED 0x1       /* found holding a grace period: no longer waited for */

struct pr_reader_info {
	uint32_t seq;
	uint32_t pid;               /* 0: a free entry */
	uint32_t uid;
	uint16_t pages;
	uint16_t flags;             /* PR_READER_* */
	uint64_t start;             /* the process's start time, ticks since boot */
	uint64_t lookups;           /* the sum of its slots' counters */
	uint32_t slots;             /* claimed slots: its reading threads */
	uint32_t active;            /* of them, inside a read-side section */
	uint64_t stalled_ns;        /* CLOCK_REALTIME it was found stalling; 0: never */
	uint64_t registered_ns;     /* CLOCK_REALTIME its first page came */
	uint64_t refreshed_ns;      /* CLOCK_REALTIME of the counters */
};

/* Folds the sizes that must agree between builds sharing a file. */
#define PR_SIZE_DESC                                                       \
	(((uint64_t)sizeof(struct pr_table_hdr) << 48) |                   \
	 ((uint64_t)sizeof(struct pr_record) << 40) |                      \
	 ((uint64_t)sizeof(struct pr_index) << 32) |                       \
	 ((uint64_t)sizeof(struct pr_rpage_hdr) << 16) |                   \
	 ((uint64_t)sizeof(struct pr_reader_slot) << 8) | sizeof(void *))

_Static_assert(sizeof(struct pr_table_hdr) <= PR_HDR_SIZE, "header fits its page");
_Static_assert(offsetof(struct pr_table_hdr, names) % PR_CACHELINE == 0,
	       "daemon-written fields start a cache line");
_Static_assert(sizeof(struct pr_record) == 40, "record header size is part of the layout");
_Static_assert(offsetof(struct pr_record, data) == 40, "record data offset");
_Static_assert(offsetof(struct pr_record, name_len) == 32, "what a probe compares sits next to the name");
_Static_assert(sizeof(struct pr_root) == 2 * PR_CACHELINE, "root: index_off, then counts, a line each");
_Static_assert(sizeof(struct pr_event) == 320, "an event is five cache lines");
_Static_assert(sizeof(struct pr_index) == 16, "index header");
_Static_assert(sizeof(struct pr_slot) == 16, "four slots to a line");
_Static_assert(offsetof(struct pr_table_hdr, gp) % PR_CACHELINE == 0, "gp starts a line");
_Static_assert(offsetof(struct pr_table_hdr, readers_live) ==
		       offsetof(struct pr_table_hdr, gp) + PR_CACHELINE, "gp's line is its own");
_Static_assert(sizeof(struct pr_rpage_hdr) == PR_CACHELINE, "reader page header");
_Static_assert(sizeof(struct pr_reader_slot) == PR_CACHELINE, "one slot, one line");
_Static_assert(PR_RPAGE_SLOTS == 63, "slots of a reader page");
_Static_assert(sizeof(struct pr_reader_info) == PR_CACHELINE, "a registry entry, one line");

/* Slot word helpers. */
static inline uint32_t pr_slot_tag(uint64_t w)
{
	return (uint32_t)(w >> 32);
}

static inline uint64_t pr_slot_off(uint64_t w)
{
	return (w & 0xffffffffull) * PR_ALIGN;
}

/* Records never sit in the header page, so a live word is never 0 or 1. */
static inline int pr_slot_live(uint64_t w)
{
	return w > PR_SLOT_TOMB;
}

/*
 * The name hash. Keyed by the table's random seed, so that names cannot be
 * chosen offline to pile up in one probe sequence. Eight bytes per
 * multiply; names are short.
 */
static inline uint64_t pr_mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* The N (1..7) bytes at S as a little-endian number, read without going
 * past S + N (the caller's string may end at the end of a page): at most
 * three loads, no loop. */
static inline uint64_t pr_load_short(const char *s, size_t n)
{
	uint64_t v = 0;
	uint32_t w4;
	uint16_t w2;
	size_t i = 0;

	if (n & 4) {
		__builtin_memcpy(&w4, s, 4);
		v = w4;
		i = 4;
	}
	if (n & 2) {
		__builtin_memcpy(&w2, s + i, 2);
		v |= (uint64_t)w2 << (8 * i);
		i += 2;
	}
	if (n & 1)
		v |= (uint64_t)(unsigned char)s[i] << (8 * i);
	return v;
}

/* The last R (1..7) bytes of the N (>= 8) at S, as pr_load_short would
 * read them: one load of the last eight, shifted. */
static inline uint64_t pr_load_tail(const char *s, size_t n, size_t r)
{
	uint64_t v;

	__builtin_memcpy(&v, s + n - 8, 8);
	return v >> (8 * (8 - r));
}

/* The bytes past the last whole word of the N at S, little-endian and
 * zero-extended (0 if none), without a byte loop: 59 of a lookup's
 * instructions once went to one. */
static inline uint64_t pr_load_rest(const char *s, size_t n)
{
	size_t r = n & 7;

	return !r ? 0 : n >= 8 ? pr_load_tail(s, n, r) : pr_load_short(s, n);
}

/* pr_hash, handing back two of the words it read, which are what a short
 * name's index slot keeps (pr_skey_words): FIRST, the first 8 bytes (0 if
 * N < 8), and REST (pr_load_rest). */
static inline uint64_t pr_hash_words(const char *s, size_t n, uint64_t seed, uint64_t *first,
				     uint64_t *rest)
{
	uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ull);
	size_t i = 0;

	*first = 0;
	if (n >= 8)
		__builtin_memcpy(first, s, 8);
	for (; i + 8 <= n; i += 8) {
		uint64_t v;
		__builtin_memcpy(&v, s + i, 8);
		h = (h ^ v) * 0x9fb21c651e98df25ull;
		h ^= h >> 29;
	}
	*rest = pr_load_rest(s, n);
	if (n & 7)
		h = (h ^ *rest) * 0x9fb21c651e98df25ull;
	return pr_mix(h);
}

static inline uint64_t pr_hash(const char *s, size_t n, uint64_t seed)
{
	uint64_t first, rest;

	return pr_hash_words(s, n, seed, &first, &rest);
}

/* N bytes at A and B equal? Word at a time with the loads of pr_hash:
 * no call into libc on a lookup's hit path, and no byte read past either
 * end (A may be a caller's string at the end of a page). */
static inline int pr_bytes_eq(const char *a, const char *b, size_t n)
{
	size_t i = 0, r = n & 7;

	for (; i + 8 <= n; i += 8) {
		uint64_t x, y;
		__builtin_memcpy(&x, a + i, 8);
		__builtin_memcpy(&y, b + i, 8);
		if (x != y)
			return 0;
	}
	if (!r)
		return 1;
	if (n >= 8)
		return pr_load_tail(a, n, r) == pr_load_tail(b, n, r);
	return pr_load_short(a, n) == pr_load_short(b, n);
}

/* Copy N bytes, no call and no rep movs: GCC expands a memcpy whose
 * length it can bound as rep movsq, which costs more than the whole probe
 * for the short names and metadata a lookup copies out (measured: 38 ns a
 * lookup instead of 24), and a call to libc's goes through the PLT.
 * Overlapping loads, as a small memcpy does; the same code serves the
 * in-process baselines of procreg-bench, so that they copy as we do. */
static inline void pr_copy(void *d, const void *s, size_t n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;
	uint64_t a, b;

	if (n > 32) {
		for (size_t i = 0; i + 16 < n; i += 16) {
			__builtin_memcpy(&a, sp + i, 8);
			__builtin_memcpy(&b, sp + i + 8, 8);
			__builtin_memcpy(dp + i, &a, 8);
			__builtin_memcpy(dp + i + 8, &b, 8);
		}
		__builtin_memcpy(&a, sp + n - 16, 8);
		__builtin_memcpy(&b, sp + n - 8, 8);
		__builtin_memcpy(dp + n - 16, &a, 8);
		__builtin_memcpy(dp + n - 8, &b, 8);
	} else if (n > 16) {
		/* Most metadata (a socket path, an address): two overlapping
		 * 16-byte copies, no loop. */
		uint64_t c, e;

		__builtin_memcpy(&a, sp, 8);
		__builtin_memcpy(&b, sp + 8, 8);
		__builtin_memcpy(&c, sp + n - 16, 8);
		__builtin_memcpy(&e, sp + n - 8, 8);
		__builtin_memcpy(dp, &a, 8);
		__builtin_memcpy(dp + 8, &b, 8);
		__builtin_memcpy(dp + n - 16, &c, 8);
		__builtin_memcpy(dp + n - 8, &e, 8);
	} else if (n >= 8) {
		__builtin_memcpy(&a, sp, 8);
		__builtin_memcpy(&b, sp + n - 8, 8);
		__builtin_memcpy(dp, &a, 8);
		__builtin_memcpy(dp + n - 8, &b, 8);
	} else if (n >= 4) {
		uint32_t x, y;

		__builtin_memcpy(&x, sp, 4);
		__builtin_memcpy(&y, sp + n - 4, 4);
		__builtin_memcpy(dp, &x, 4);
		__builtin_memcpy(dp + n - 4, &y, 4);
	} else if (n) {
		dp[0] = sp[0];
		dp[n / 2] = sp[n / 2];
		dp[n - 1] = sp[n - 1];
	}
}

/* A membership's key in its group's member index: the member's identity. */
static inline uint64_t pr_member_hash(uint32_t pid, uint64_t start, uint32_t node, uint64_t seed)
{
	return pr_mix(pr_mix(seed ^ ((uint64_t)pid << 32 | node)) ^ start);
}

/*
 * What a live slot holds beside its offset (see the top of this file):
 * a short name's bytes, or key 0 and the top half of its hash.
 */
struct pr_skey {
	uint64_t key;
	uint32_t hi;
};

/* A name of N bytes hashing to HASH, FIRST and REST as pr_hash_words
 * gives them. Where N is at most PR_INLINE_MAX: of 8 bytes or more, the
 * first 8 and the rest (up to 4, zero-padded); of fewer, the name
 * (zero-padded) and its first 4 bytes again, which is what the words
 * give with the fewest instructions. A name holds no NUL, so the key of
 * one is never 0, and its eighth byte says which it is. */
static inline struct pr_skey pr_skey_words(size_t n, uint64_t first, uint64_t rest, uint64_t hash)
{
	struct pr_skey k = { 0, (uint32_t)(hash >> 32) };

	if (n - 1 < PR_INLINE_MAX) {
		k.key = n >= 8 ? first : rest;
		k.hi = (uint32_t)rest;
	}
	return k;
}

/* The same from the N bytes at S (nothing read past S + N). */
static inline struct pr_skey pr_skey_name(const char *s, size_t n, uint64_t hash)
{
	uint64_t first = 0;

	if (n >= 8)
		__builtin_memcpy(&first, s, 8);
	return pr_skey_words(n, first, pr_load_rest(s, n), hash);
}

/* A membership's, or any key kept by its hash alone. */
static inline struct pr_skey pr_skey_hashed(uint64_t hash)
{
	struct pr_skey k = { 0, (uint32_t)(hash >> 32) };

	return k;
}

static inline uint64_t pr_slot_word(struct pr_skey k, uint64_t off)
{
	return (uint64_t)k.hi << 32 | off / PR_ALIGN;
}

/* Whether live slot word W and key KEY hold K. */
static inline int pr_slot_is(uint64_t w, uint64_t key, struct pr_skey k)
{
	return pr_slot_tag(w) == k.hi && key == k.key;
}

/* The top half of the hash of the entry in a live slot (word W, key KEY):
 * its tag, or a short name's hash, from its bytes. What an index rebuild
 * places it by. */
static inline uint32_t pr_slot_hash_hi(uint64_t w, uint64_t key, uint64_t seed)
{
	uint32_t hi = pr_slot_tag(w);
	char b[16];
	size_t n;

	if (!key)
		return hi;
	__builtin_memcpy(b, &key, 8);
	__builtin_memcpy(b + 8, &hi, 4);
	if (!(key >> 56))
		n = 8 - (size_t)__builtin_clzll(key) / 8;
	else
		n = hi ? 12 - (size_t)__builtin_clz(hi) / 8 : 8;
	return (uint32_t)(pr_hash(b, n, seed) >> 32);
}

#endif /* PROCREG_LAYOUT_H */
