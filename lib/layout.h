/*
 * layout.h - every structure procreg keeps in shared memory.
 *
 * Two files per scope, both in the table directory (/dev/shm by default):
 *
 *   procreg.<scope>          the table. procregd maps it read-write and is
 *                            the only process that ever writes it; every
 *                            other process maps it PROT_READ.
 *   procreg.<scope>.readers  the reader slots and the grace-period counter.
 *                            Each reader thread writes its own slot; the
 *                            daemon writes the counter and clears the slots
 *                            of dead readers.
 *
 * THE TABLE. A header page, then an arena. The arena holds records (a
 * name, a group, or one process's membership of a group), index blocks (an
 * open-addressing hash index of 64-bit slot words) and groups' root blocks.
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
 * A slot word is (tag << 32 | offset / 16): the tag is the top half of the
 * name's hash, so a probe rejects most non-matching slots without touching
 * the record, and an index rebuild finds each name's new home (the top bits
 * of its hash) without reading the record either. 0 is an empty slot (ends a probe), 1 a tombstone (a removed
 * name: the probe goes on). Slot words only ever go empty -> record,
 * record -> record, record -> tombstone and tombstone -> record, so a name
 * that stays registered is found by every probe, whatever else changes.
 *
 * The index grows (and sheds tombstones) by being rebuilt: the daemon
 * builds a new index block holding the same slot words, publishes its
 * offset in the header with one release store, and retires the old block.
 * Records do not move, so a rebuild copies 8 bytes per name. Readers that
 * loaded the old index finish their probe in it; it is still whole.
 *
 * A reader trusts nothing here: every offset it follows is checked against
 * the mapping before use, and every probe is bounded by the index capacity.
 *
 * THE READER FILE. A header holding the grace-period counter, then one
 * cache line per reader slot. See rcu.c for the protocol.
 */
#ifndef PROCREG_LAYOUT_H
#define PROCREG_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "procreg.h"

#define PR_TABLE_MAGIC   0x31474552434f5250ull /* "PROCREG1", little-endian */
#define PR_READERS_MAGIC 0x31444552434f5250ull /* "PROCRED1" */
#define PR_LAYOUT_VERSION 1u

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
	uint8_t pad0[32];

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
	uint64_t slot[];
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
	uint64_t hash;
	uint16_t name_len;          /* without the NUL */
	uint16_t meta_len;
	uint8_t kind;               /* enum pr_kind */
	uint8_t flags;              /* PROCREG_ENTRY_* */
	uint16_t node;              /* 0: this host */
	uint32_t pid;
	uint32_t uid;
	uint64_t start_time;        /* owner's start time, clock ticks since boot */
	uint64_t registered_ns;     /* CLOCK_REALTIME */
	uint64_t aux;               /* NAME, MEMBER: the owner's pidfs inode (0 where
				     * the kernel has none); GROUP: its root block */
	char data[];                /* name, NUL, meta */
};

/* 48 bytes: a short name shares the header's cache line, and a lookup of
 * one with short metadata touches two lines of record at most. */
#define PR_RECORD_SIZE(nlen, mlen) \
	(((sizeof(struct pr_record) + (nlen) + 1 + (mlen)) + PR_ALIGN - 1) & ~(size_t)(PR_ALIGN - 1))

/* The reader file header. gp is the grace-period counter: written by the
 * daemon only, read by every reader on lock. It starts at 1 and only grows
 * (64 bits: it never wraps). */
struct pr_readers_hdr {
	uint64_t magic;
	uint32_t layout_version;
	uint32_t nslots;
	uint64_t size_desc;
	uint32_t feed_waiters;      /* followers asleep on feed_futex: they count themselves */
	uint8_t pad0[PR_CACHELINE - 28];
	uint64_t gp;                /* alone on its cache line: readers load it on every lock */
	uint64_t writer_flags;      /* PR_WRITER_*: daemon-written, read with gp */
	uint8_t pad1[PR_CACHELINE - 16];
};

/* The daemon issues membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) before
 * every grace-period scan: registered readers may order their slot store
 * with a compiler barrier. */
#define PR_WRITER_MEMBARRIER 1ull

/*
 * One reader slot, one cache line, so that readers never share a line.
 *
 *  owner   (pid << 32 | tid), 0 when free. A reader thread claims a free
 *          slot with compare-and-swap and stores 0 when it exits; the daemon
 *          stores 0 when it finds the owner dead.
 *  ctr     0 outside a read-side critical section; inside one, the value of
 *          gp the reader loaded on entry. Written by the owner only (and
 *          cleared by the daemon for a dead owner).
 *  start   owner process start time (ticks since boot): with pid, the
 *          owner's identity, since pids are reused.
 *  lookups lookups done by this thread: a counter in the reader's own line,
 *          so counting costs no shared write.
 */
struct pr_reader_slot {
	uint64_t owner;
	uint64_t ctr;
	uint64_t start;
	uint64_t lookups;
	uint8_t pad[PR_CACHELINE - 32];
};

#define PR_READERS_FILE_SIZE(n) (sizeof(struct pr_readers_hdr) + (size_t)(n) * sizeof(struct pr_reader_slot))

/* Folds the sizes that must agree between builds sharing a file. */
#define PR_SIZE_DESC                                                       \
	(((uint64_t)sizeof(struct pr_table_hdr) << 48) |                   \
	 ((uint64_t)sizeof(struct pr_record) << 40) |                      \
	 ((uint64_t)sizeof(struct pr_index) << 32) |                       \
	 ((uint64_t)sizeof(struct pr_readers_hdr) << 16) |                 \
	 ((uint64_t)sizeof(struct pr_reader_slot) << 8) | sizeof(void *))

_Static_assert(sizeof(struct pr_table_hdr) <= PR_HDR_SIZE, "header fits its page");
_Static_assert(offsetof(struct pr_table_hdr, names) % PR_CACHELINE == 0,
	       "daemon-written fields start a cache line");
_Static_assert(sizeof(struct pr_record) == 48, "record header size is part of the layout");
_Static_assert(offsetof(struct pr_record, data) == 48, "record data offset");
_Static_assert(sizeof(struct pr_root) == 2 * PR_CACHELINE, "root: index_off, then counts, a line each");
_Static_assert(sizeof(struct pr_event) == 320, "an event is five cache lines");
_Static_assert(sizeof(struct pr_index) == 16, "index header");
_Static_assert(sizeof(struct pr_readers_hdr) == 2 * PR_CACHELINE, "readers header");
_Static_assert(offsetof(struct pr_readers_hdr, gp) == PR_CACHELINE, "gp on its own line");
_Static_assert(sizeof(struct pr_reader_slot) == PR_CACHELINE, "one slot, one line");

/* Slot word helpers. */
static inline uint64_t pr_slot_word(uint64_t hash, uint64_t off)
{
	return (hash & 0xffffffff00000000ull) | (off / PR_ALIGN);
}

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

static inline uint64_t pr_hash(const char *s, size_t n, uint64_t seed)
{
	uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ull);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v;
		__builtin_memcpy(&v, s + i, 8);
		h = (h ^ v) * 0x9fb21c651e98df25ull;
		h ^= h >> 29;
	}
	if (i < n) {
		uint64_t v = 0;
		for (size_t k = 0; i + k < n; k++)
			v |= (uint64_t)(unsigned char)s[i + k] << (8 * k);
		h = (h ^ v) * 0x9fb21c651e98df25ull;
	}
	return pr_mix(h);
}

/* A membership's key in its group's member index: the member's identity. */
static inline uint64_t pr_member_hash(uint32_t pid, uint64_t start, uint32_t node, uint64_t seed)
{
	return pr_mix(pr_mix(seed ^ ((uint64_t)pid << 32 | node)) ^ start);
}

#endif /* PROCREG_LAYOUT_H */
