/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * internal.h - what the library's files, procregd and the tests share
 * beyond the public header. Nothing here is API: every symbol carries the
 * procreg__ prefix (a static archive cannot hide it) and none is exported
 * from the shared library.
 */
#ifndef PROCREG_INTERNAL_H
#define PROCREG_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <urcu/arch.h>
#include <urcu/compiler.h>
#include <urcu/system.h>
#include <urcu/uatomic.h>

#include "procreg.h"
#include "layout.h"

#define PR_LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define PR_STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
/* A word other threads of this process store to atomically (a reader
 * slot's owner): a relaxed atomic load, not CMM_LOAD_SHARED's volatile
 * one, which C11 (and ThreadSanitizer) count as a data race. */
#define PR_LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define PR_STORE_RELAXED(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
/* Compare-and-swap, a full barrier, true if *P was OLD and is now NEW.
 * Rather than liburcu's uatomic_cmpxchg() where threads of this process
 * hand memory over through the word: that one is inline assembly, which
 * ThreadSanitizer does not see, so it sees no order between a reader
 * slot's last user and its next either. */
#define PR_CAS(p, old, new)                                                         \
	({                                                                          \
		__typeof__(*(p)) pr_cas_old_ = (old);                               \
		__atomic_compare_exchange_n((p), &pr_cas_old_, (new), false,        \
					    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);    \
	})

/* ---- sized structs (client.c) ------------------------------------------ */

/*
 * The one check of every struct that crosses the ABI, in or out (its
 * first member is size_t sz, set by the caller; procreg.h, "Sized
 * structs"): 0; -EINVAL for an .sz below MIN, the struct's size in the
 * first release (members are only ever appended, so every caller has at
 * least those); -EOPNOTSUPP for an .sz beyond KNOWN (this library's
 * sizeof) with a byte past KNOWN that is not zero: a newer caller asks for
 * something this library cannot do, which it must not quietly ignore.
 */
int procreg__sized(const void *s, size_t min, size_t known);
/* The most a caller's .sz may be (-E2BIG past it; a NULL S is -EINVAL):
 * every struct of the API is far below it, and a bound keeps a garbage
 * .sz from walking the check, or procreg_batch()'s stride, off the end. */
#define PR_SIZED_MAX 4096
/* The bytes up to the end of MEMBER, the least a caller's .sz may be: the
 * struct's last member as 0.1 had it. */
#define PR_SZ_MIN(type, member) (offsetof(struct type, member) + sizeof(((struct type *)0)->member))
#define PR_SIZED(p, type, last) procreg__sized((p), PR_SZ_MIN(type, last), sizeof(struct type))
/* A checked caller's struct S into the library's DST (KNOWN bytes): the
 * members past the caller's .sz are zero, unset. */
void procreg__sized_in(void *dst, size_t known, const void *s);
/* Options S, checked (procreg__sized) and taken into DST; NULL S: DST
 * holds the defaults (all zero), its .sz ours. */
int procreg__opts_take(void *dst, size_t known, const void *s, size_t min);
#define PR_OPTS_TAKE(dst, s, type, last) \
	procreg__opts_take((dst), sizeof(struct type), (s), PR_SZ_MIN(type, last))
/* The library's filled SRC (KNOWN bytes) out to a checked caller's DST,
 * no further than DST's .sz, which stays. */
void procreg__sized_out(void *dst, const void *src, size_t known);

/* ---- paths ------------------------------------------------------------ */

#define PR_PATH_MAX 4096

struct pr_paths {
	char scope[128];
	char dir[PR_PATH_MAX];
	char table[PR_PATH_MAX];
	char socket[PR_SOCKET_PATH_MAX]; /* empty: take it from the table */
};

/* Scope, directory and socket from the arguments, else the environment
 * (PROCREG_SCOPE, PROCREG_DIR, PROCREG_SOCKET), else the defaults. A scope
 * is 1..64 of [A-Za-z0-9_.-] and not "." or "..": -EINVAL otherwise. */
int procreg__paths(struct pr_paths *p, const char *scope, const char *dir,
		   const char *socket);

/* The daemon's default socket path for a scope: $PROCREG_DIR if set, else
 * $XDG_RUNTIME_DIR, else /run/procreg. */
int procreg__default_socket(char *out, size_t len, const char *scope,
			    const char *dir_override);

/* ---- process identity ------------------------------------------------- */

/* Start time of PID in clock ticks since boot (field 22 of
 * /proc/PID/stat). -ESRCH if there is no such process. */
int procreg__proc_start_time(pid_t pid, uint64_t *ticks);
/* Effective uid of PID. */
int procreg__proc_uid(pid_t pid, uid_t *uid);
/* Whether FD is a pidfd, told without reaching the file's own operations:
 * pidfd_send_signal() with no signal answers EBADF for other files (a
 * /proc/PID directory passes too, and has no Pid in its fdinfo). */
bool procreg__is_pidfd(int fd);
/* The pid a pidfd refers to (PIDFD_GET_INFO, else its fdinfo); -EBADF if
 * FD is no pidfd or a thread's, -ESRCH once it has exited. */
int procreg__pidfd_pid(int pidfd, pid_t *pid);
/* 1 if the process behind PIDFD has exited, 0 if it lives. */
int procreg__pidfd_exited(int pidfd);
/* The pidfs inode of a pidfd: unique for the life of the boot. 0 where the
 * kernel has no pidfs (before 6.9), or when PROCREG_NO_PIDFS is set (so the
 * fallback can be tested on new kernels). */
uint64_t procreg__pidfs_ino(int pidfd);
/* The identity of the process behind PIDFD, read race-free: the start time
 * is read after the pidfd is known to refer to PID, and trusted only if the
 * pidfd has not exited since. */
int procreg__pidfd_identity(int pidfd, pid_t *pid, uint64_t *start, uint64_t *ino);
int procreg__boot_id(uint8_t id[16]);
uint64_t procreg__now_ns(void);       /* CLOCK_REALTIME */
uint64_t procreg__mono_ns(void);      /* CLOCK_MONOTONIC */
int procreg__pidfd_open(pid_t pid);

/* ---- mappings --------------------------------------------------------- */

struct pr_map {
	uint8_t *base;
	size_t size;
	struct pr_table_hdr *hdr;
	uid_t owner;              /* the table file's owner: the daemon's uid */
	/* The table file's st_dev and st_ino: which registry this is, as the
	 * library's probes report it (a tracer pointed at one registry keeps
	 * the events of that registry's users, whatever program fires them). */
	uint64_t dev, ino;
	/* The name index as last found whole by procreg__index: its offset
	 * and log2 of its capacity, off << 6 | log2 (an offset is below
	 * 2^36). An index whose offset and capacity match it is not checked
	 * again: a lookup pays two compares for a check that was a dozen.
	 * Any thread of the process may store it (relaxed: one word,
	 * consistent alone). */
	uint64_t ix_seen;
	/* A record at an offset OFF with OFF - PR_HDR_SIZE below it lies
	 * whole in the mapping whatever its lengths within the limits: a
	 * lookup bounds a record with one compare (0 when the file is too
	 * small for any such offset). Set with the size (pr_map_sized). */
	uint64_t rec_room;
};

/* The largest record a table can hold. */
#define PR_RECORD_MAX PR_RECORD_SIZE(PROCREG_NAME_MAX, PROCREG_META_MAX)

/* Set M's size, and what follows from it. */
static inline void pr_map_sized(struct pr_map *m, size_t size)
{
	m->size = size;
	m->rec_room = size > PR_HDR_SIZE + PR_RECORD_MAX ? size - PR_HDR_SIZE - PR_RECORD_MAX : 0;
}

/* Validate a table header against this build: -EPROTO with the reason in
 * *why when it is not a table this build can read. */
int procreg__check_table_hdr(const struct pr_table_hdr *h, size_t file_size,
			     const char **why);

/* Whether a client trusts a table, or a socket's listener, of OWNER:
 * root, itself (its effective uid), TRUST (.trust_uid or
 * $PROCREG_TRUST_UID; 0: none), or the system user procregd runs as
 * ($PROCREG_DAEMON_USER, else PROCREG_DAEMON_USER_DEFAULT), looked up in
 * the user database only when OWNER is none of the others. At open and
 * on activation, never on a lookup. */
bool procreg__trusted_owner(uid_t owner, uid_t trust);

/* Map a scope's table read-only, if its owner is one this process trusts
 * (procreg__trusted_owner(); TRUST_UID 0: none). -EPERM with the reason
 * in *why otherwise. */
int procreg__map_reader(struct pr_map *m, const struct pr_paths *p, uid_t trust_uid,
			const char **why);
void procreg__unmap(struct pr_map *m);
/* Map the whole of table file FD, whose fstat() gave SIZE, shared with
 * PROT. -EPROTO: a size no table can have. */
int procreg__map_file(int fd, off_t size, int prot, void **base);

/* Bounds-checked access to a block of LEN bytes at OFF: NULL when any of it
 * falls outside the arena. */
static inline const void *pr_at(const struct pr_map *m, uint64_t off, uint64_t len)
{
	if (off < PR_HDR_SIZE || off > m->size || len > m->size - off)
		return NULL;
	return m->base + off;
}

/* ---- cross-process RCU (rcu.c) --------------------------------------- */

struct pr_rcu_thread;
struct pr_rpage;

/* Reader pages a process makes for one handle: 63 threads each. */
#define PR_RPAGES_MAX 64

/* The per-handle reader state: which slot each thread of this process
 * claimed, in which of this process's pages. */
struct pr_rcu {
	struct pr_map *map;
	pthread_key_t key;
	pthread_mutex_t lock;         /* guards threads and pages */
	struct pr_rcu_thread *threads;
	struct pr_rpage *pages;       /* this process's, newest first */
	pid_t pages_pid;              /* the process that made them */
	uint32_t npages;
	/* The daemon_gen the pages were last announced to (0: never, or a
	 * page was added since). Atomic: any reading thread may announce. */
	uint64_t announced;
	uint64_t announce_after;      /* CLOCK_MONOTONIC: not before, after a failure */
	/* Reads done again because memory under them was reused (see
	 * pr_read_valid): rare, counted for tests and for procreg_stats
	 * callers who wonder. */
	uint64_t stale;
	uint64_t id;                  /* this handle's, never given twice in a process */
};

/* The calling thread's slot of the handle it read through last: what
 * makes finding a thread's slot two TLS loads instead of a call to
 * pthread_getspecific (36 instructions, a third of a lookup's own work).
 * Initial-exec: a fixed offset from the thread pointer, no
 * __tls_get_addr; the library is never loaded in a way that forbids it
 * (dlopen of a library with a few bytes of static TLS is served from
 * glibc's surplus). Written by its thread only, and cleared in the
 * child of a fork (its one thread is the one that forked), so a child
 * never takes its parent's slot. */
struct pr_tls_slot {
	uint64_t rcu_id;
	struct pr_reader_slot *slot;
};
#define PR_TLS_IE __attribute__((tls_model("initial-exec")))
extern __thread struct pr_tls_slot procreg__tls_slot PR_TLS_IE;
extern pid_t procreg__pid;        /* getpid(), refreshed after fork */

int procreg__rcu_init(struct pr_rcu *r, struct pr_map *m);
void procreg__rcu_fini(struct pr_rcu *r);
/* fork(): the reader lock is taken before and released after in both
 * processes, so that the child never inherits it held (client.c). */
void procreg__rcu_fork_lock(struct pr_rcu *r);
void procreg__rcu_fork_unlock(struct pr_rcu *r);
/* The calling thread's slot, claiming one on first use. Never NULL but
 * for want of memory: a thread that cannot have a slot the daemon sees
 * gets a private one, and reads unprotected (see pr_read_valid). */
struct pr_reader_slot *procreg__rcu_slot_slow(struct pr_rcu *r);
static inline struct pr_reader_slot *procreg__rcu_slot(struct pr_rcu *r)
{
	if (caa_likely(procreg__tls_slot.rcu_id == r->id))
		return procreg__tls_slot.slot;
	return procreg__rcu_slot_slow(r);
}
/* The fds of this process's pages (up to MAX): what to hand the daemon. */
int procreg__rcu_page_fds(struct pr_rcu *r, int *fds, int max);

extern int procreg__rcu_use_membarrier;

/* Enter a read-side critical section: publish the grace-period counter in
 * our slot, and return it for pr_read_valid(). The store must be visible
 * before our reads of the table. When both we are registered for
 * membarrier and the daemon says it issues one before every scan
 * (writer_flags, on the same cache line as gp, so this costs no extra
 * miss), the daemon's membarrier supplies that full barrier and ours is a
 * compiler barrier; otherwise we pay for it ourselves. */
static inline uint64_t pr_read_lock(const struct pr_map *m, struct pr_reader_slot *s)
{
	const struct pr_table_hdr *h = m->hdr; /* once: the acquire makes it a reload */
	uint64_t gp = PR_LOAD_ACQ(&h->gp);
	uint64_t wf = CMM_LOAD_SHARED(h->writer_flags);

	CMM_STORE_SHARED(s->ctr, gp);
	if (caa_likely(procreg__rcu_use_membarrier && (wf & PR_WRITER_MEMBARRIER)))
		cmm_barrier();
	else
		cmm_smp_mb();
	return gp;
}

/* Inside the section, after the reads it protects: 0 if they stand, -1 if
 * memory retired since GP (what pr_read_lock returned) may have been
 * reused under them (the daemon did not wait for this reader: its slot
 * was cleared, pinned past the timeout, or never announced), and the
 * reads must be done again. */
static inline int pr_read_valid(const struct pr_map *m, uint64_t gp)
{
	cmm_smp_rmb(); /* the reads before the look at freed_gp */
	return caa_likely(CMM_LOAD_SHARED(m->hdr->freed_gp) <= gp) ? 0 : -1;
}

/* How many times a read is done again before it gives up with -ESTALE.
 * Honest, a read is redone only when a grace period it was not waited for
 * ended under it, a matter of nanoseconds in milliseconds: a run of these
 * means a table whose counters are damaged (freed_gp past gp), which must
 * not make a reader spin. */
#define PR_READ_TRIES 64

/* Leave it: a release store, so that every read of the table is ordered
 * before the 0 the daemon may see (a plain store on x86-64, stlr on
 * arm64; a compiler barrier alone would let arm64 show the 0 first). */
static inline void pr_read_unlock(struct pr_reader_slot *s)
{
	PR_STORE_REL(&s->ctr, 0);
}

/* Writer side. The reader pages the daemon holds: a flat array, scanned
 * by every grace-period poll. */
struct pr_rpage_ref {
	const struct pr_rpage_hdr *hdr;   /* PROT_READ mapping */
	uint64_t dev, ino;                /* its memfd: a page sent twice is kept once */
	void *owner;                      /* the daemon's record of its process */
	bool ignored;                     /* its process stalled: not waited for */
};

struct pr_rpages {
	struct pr_rpage_ref *v;
	size_t n, cap;
};

/* Check that FD is a reader page no one can take from under a mapping
 * (sealed, one whole page) and map it PROT_READ into *REF. -EPERM,
 * -EBADF or -EPROTO with the reason in *why. */
int procreg__rpage_map(int fd, struct pr_rpage_ref *ref, const char **why);
/* The same in two steps: the checks, noting the file (REF's dev and ino,
 * nothing mapped: a page sent again can be known before a mapping, an
 * mmap and a munmap, each a TLB shootdown where the process has run on
 * several CPUs), then the mapping and its header's check. */
int procreg__rpage_check(int fd, struct pr_rpage_ref *ref, const char **why);
int procreg__rpage_map_checked(int fd, struct pr_rpage_ref *ref, const char **why);
void procreg__rpage_unmap(struct pr_rpage_ref *ref);
/* Claimed slots, those inside a section, and their lookups (added). */
void procreg__rpage_count(const struct pr_rpage_ref *p, uint32_t *slots, uint32_t *active,
			  uint64_t *lookups);

/* Start a grace period: returns the target every reader must reach (or
 * leave its critical section) before memory retired earlier may be
 * reused, or 0 if it could not be started (membarrier failed: try again
 * later). Issues the membarrier that makes readers' slot stores visible.
 * GP is the writer's own copy of the counter. */
uint64_t procreg__gp_start(struct pr_map *m, uint64_t *gp, bool use_membarrier);
/* Whether the kernel has MEMBARRIER_CMD_GLOBAL_EXPEDITED (the writer asks;
 * readers register in procreg__rcu_init). */
int procreg__membarrier_expedited(void);
/* 1 once every slot of every page not ignored is quiescent or past
 * TARGET; else 0 and *blocker is the index of a page holding it. Never
 * waits. */
int procreg__gp_poll(const struct pr_rpages *rp, uint64_t target, size_t *blocker);
/* As procreg__gp_poll, looking at the pages from FROM on only. */
int procreg__gp_poll_from(const struct pr_rpages *rp, uint64_t target, size_t from,
			  size_t *blocker);
/* How many slots hold TARGET up. */
uint32_t procreg__gp_waiting(const struct pr_rpages *rp, uint64_t target);
/* The grace period TARGET has passed and its memory is about to be
 * reused: tell readers (freed_gp), before any reuse. */
void procreg__gp_freed(struct pr_map *m, uint64_t target);

/* ---- reading the table (table.c) ------------------------------------- */

/*
 * strnlen(NAME, PROCREG_NAME_MAX + 1), inline, sixteen bytes a compare:
 * the call to libc's cost a lookup a tenth of its instructions (the PLT,
 * a vector routine's set-up for a dozen bytes, the registers a call makes
 * its caller save), and a name of up to 16 bytes, nearly every one, is
 * here one load, compare and bit scan. The loads are aligned, and an
 * aligned 16-byte load never spans two pages: the first may hold bytes
 * before NAME and the last bytes past its NUL, but on pages that hold
 * bytes of NAME, so none can fault; those bytes are shifted off or never
 * looked at. A sanitizer would rightly see them as outside the caller's
 * object: under one, and where SSE2 is not the baseline, libc's strnlen.
 */
#if !defined(__SSE2__) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PR_NAME_LEN_LIBC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
	__has_feature(memory_sanitizer)
#define PR_NAME_LEN_LIBC 1
#endif
#endif
#ifndef PR_NAME_LEN_LIBC
#include <emmintrin.h>
#endif

static inline size_t pr_name_len(const char *name)
{
#if defined(PR_NAME_LEN_LIBC)
	return strnlen(name, PROCREG_NAME_MAX + 1);
#else
	size_t skip = (uintptr_t)name & 15, at;
	const __m128i *p = (const __m128i *)(const void *)(name - skip);
	unsigned zeros = (unsigned)_mm_movemask_epi8(
		_mm_cmpeq_epi8(_mm_load_si128(p), _mm_setzero_si128())) >> skip;

	if (zeros)
		return (size_t)__builtin_ctz(zeros);
	for (at = 16 - skip; at <= PROCREG_NAME_MAX; at += 16) {
		zeros = (unsigned)_mm_movemask_epi8(
			_mm_cmpeq_epi8(_mm_load_si128(++p), _mm_setzero_si128()));
		if (zeros) {
			size_t n = at + (size_t)__builtin_ctz(zeros);

			return n <= PROCREG_NAME_MAX ? n : PROCREG_NAME_MAX + 1;
		}
	}
	return PROCREG_NAME_MAX + 1;
#endif
}

/* A name argument: 0 and its length, or -EINVAL (NULL, empty) or
 * -ENAMETOOLONG. */
static inline int procreg__check_name(const char *name, size_t *len)
{
	size_t n;

	if (!name)
		return -EINVAL;
	n = pr_name_len(name);
	if (n == 0)
		return -EINVAL;
	if (n > PROCREG_NAME_MAX)
		return -ENAMETOOLONG;
	*len = n;
	return 0;
}

/* What a probe looks for: a name or group by name, a member by identity. */
struct pr_key {
	uint8_t kind;               /* enum pr_kind */
	const char *name;           /* NAME, GROUP */
	size_t len;
	uint32_t pid;               /* MEMBER */
	uint64_t start;
	uint16_t node;
	uint64_t hash;
	struct pr_skey skey;        /* what its slot holds beside the offset */
};

static inline void pr_key_name(struct pr_key *k, uint8_t kind, const char *name, size_t len,
			       uint64_t seed)
{
	uint64_t first, rest;

	k->kind = kind;
	k->name = name;
	k->len = len;
	k->pid = 0;
	k->start = 0;
	k->node = 0;
	k->hash = pr_hash_words(name, len, seed, &first, &rest);
	k->skey = pr_skey_words(len, first, rest, k->hash);
}

static inline void pr_key_member(struct pr_key *k, uint32_t pid, uint64_t start, uint16_t node,
				 uint64_t seed)
{
	k->kind = PR_KIND_MEMBER;
	k->name = NULL;
	k->len = 0;
	k->pid = pid;
	k->start = start;
	k->node = node;
	k->hash = pr_member_hash(pid, start, node, seed);
	k->skey = pr_skey_hashed(k->hash);
}

/* A record's full hash, from its key (records do not keep it): the NL
 * bytes of its name (NL read once and bounded by the caller), or a
 * membership's identity. The slot of a long name or a membership keeps
 * its top half as the tag. */
static inline uint64_t pr_record_hash(const struct pr_record *r, size_t nl, uint64_t seed)
{
	return r->kind == PR_KIND_MEMBER ? pr_member_hash(r->pid, r->start_time, r->node, seed)
					 : pr_hash(r->data, nl, seed);
}

/* What R's slot holds beside its offset, R's name being NL bytes and its
 * hash HASH. */
static inline struct pr_skey pr_record_skey(const struct pr_record *r, size_t nl, uint64_t hash)
{
	return r->kind == PR_KIND_MEMBER ? pr_skey_hashed(hash) : pr_skey_name(r->data, nl, hash);
}

/* A checked view of an index: its capacity and shift as read once. */
struct pr_ixv {
	const struct pr_slot *slot;
	uint64_t cap;
	uint32_t shift;
};

/* Inside a read-side critical section (or in the writer). The current
 * index of ROOT, checked; -1 if it is damaged. */
int procreg__index(const struct pr_map *m, const struct pr_root *root, struct pr_ixv *v);
const struct pr_record *procreg__probe(const struct pr_map *m, const struct pr_ixv *ix,
				       const struct pr_key *k, uint64_t *pos);
/* The same for the writer, in its own table: a slot word leads to a whole
 * record (recovery checked every record it reaches, and only the writer
 * wrote any since, as the rest of writer.c assumes), so no record is
 * checked against the mapping before it is compared. */
const struct pr_record *procreg__probe_trusted(const struct pr_map *m, const struct pr_ixv *ix,
					       const struct pr_key *k, uint64_t *pos);
const struct pr_record *procreg__find(const struct pr_map *m, const struct pr_root *root,
				      const struct pr_key *k);
static inline const struct pr_record *procreg__find_name(const struct pr_map *m,
							const char *name, size_t len)
{
	struct pr_key k;

	pr_key_name(&k, PR_KIND_NAME, name, len, m->hdr->hash_seed);
	return procreg__find(m, &m->hdr->names, &k);
}
/* A group record's root block (its member index), checked. */
const struct pr_root *procreg__group_root(const struct pr_map *m, const struct pr_record *g);
/* Validate a record found through a slot word: NULL if it is not whole. */
const struct pr_record *procreg__record_at(const struct pr_map *m, uint64_t w);
/* 0, or -1 if the record is not whole (a damaged or hostile file). */
int procreg__record_to_entry(const struct pr_map *m, const struct pr_record *r,
			     struct procreg_entry *e);

/* ---- small private hash map: u64 -> u64 (hashmap.c) ------------------ */

/* A key and its value side by side: a lookup in a map too big for the
 * caches misses once, not once in a key array and again in a value
 * array. */
struct pr_u64kv {
	uint64_t key;     /* 0 = empty; 1 refused; callers' keys are >= 2 */
	uint64_t val;
};

struct pr_u64map {
	struct pr_u64kv *kv;
	size_t cap, used;
	size_t hint;            /* the slot a ref or put took last: a guess (hashmap.c) */
};

int procreg__u64map_put(struct pr_u64map *m, uint64_t key, uint64_t val);
int procreg__u64map_get(const struct pr_u64map *m, uint64_t key, uint64_t *val);
/* KEY's value in place, or NULL: valid until the next put or del. */
uint64_t *procreg__u64map_ref(struct pr_u64map *m, uint64_t key);
int procreg__u64map_del(struct pr_u64map *m, uint64_t key);
/* Remove KEY, its value into *VAL: one probe where get and del take two. */
int procreg__u64map_take(struct pr_u64map *m, uint64_t key, uint64_t *val);
void procreg__u64map_free(struct pr_u64map *m);

/* ---- strings to values (strindex.c): procregd only -------------------- */

/* Strings to values, by a keyed 64-bit hash of each: a lookup gives the
 * value its key was put with, which the caller checks against the string
 * it asked for. Two strings of one key (not expected of a secret seed)
 * leave the index partial: callers then scan what it indexes on a miss.
 * Written and read by one thread. */
struct pr_str_index {
	struct pr_u64map map;
	uint64_t seed;
	bool partial;
};

/* Empty, with a fresh secret seed. */
void procreg__sidx_init(struct pr_str_index *x);
/* S's key in the index's map (>= 2): for a caller that keeps keys of its
 * own. */
uint64_t procreg__sidx_key(const struct pr_str_index *x, const char *s, size_t n);
/* 0 and *V, or -ENOENT. */
int procreg__sidx_get(const struct pr_str_index *x, const char *s, size_t n, uint64_t *v);
/* S -> V; the index partial if S's key is taken or there is no memory. */
void procreg__sidx_put(struct pr_str_index *x, const char *s, size_t n, uint64_t v);
/* S's entry gone, if it is V's. */
void procreg__sidx_del(struct pr_str_index *x, const char *s, size_t n, uint64_t v);
void procreg__sidx_free(struct pr_str_index *x);

/* ---- the writer (writer.c): procregd only ----------------------------- */

struct pr_writer_opts {
	uint64_t max_size;     /* file size, fixed at creation */
	uint32_t readers;      /* reader registry entries, fixed at creation */
	int mode;              /* table file mode */
};

struct pr_vec {
	uint64_t *v;
	size_t n, cap;
};

/* The writer allocates the table file's pages this far ahead of the arena's
 * top at a time (writer.c: back_pages). */
#define PR_BACK_CHUNK (256u << 10)

struct pr_writer {
	struct pr_map map;
	struct pr_paths paths;
	int table_fd;
	bool attached;                /* true: the table existed; recover it */
	bool membarrier;              /* we issue global expedited membarriers */
	uint64_t gp;                  /* the grace-period counter: ours, copied out */
	bool feed_pending;            /* events published since the last wake */
	/* Connections that said a thread of theirs may sleep on the feed's
	 * futex (FOLLOW), and a wake owed whatever their number: a follower
	 * whose connection the daemon ended, or any after a daemon start,
	 * must look again (feed.c). The caller keeps both. */
	uint32_t feed_followers;
	bool feed_force;
	/* The change feed's ring, checked once: its place and size are
	 * fixed at creation, and this writer alone changes the file. */
	struct pr_event *feed;
	uint64_t feed_cap;


	/* Allocator: private, rebuilt from the table on attach. */
	struct pr_vec *classes;       /* free offsets, one vector per 16-byte class */
	struct pr_vec large;          /* free (off, size) pairs above the classes */
	uint64_t large_max;           /* no pair on it is bigger (an upper bound) */
	uint64_t large_looked;        /* pairs alloc_large() has looked at, ever */
	uint64_t spare_off, spare_size; /* the name index's last block, kept for its next */
	uint64_t names_retired;       /* the name index's block retired, not yet free */
	uint64_t *freemap;            /* a bit a PR_ALIGN bytes of the file: free (coalesce()) */
	uint64_t freed_since;         /* bytes freed since the lists were last made from it */
	uint64_t shrink_again_ns;     /* no member index made smaller before (CLOCK_MONOTONIC) */
	uint64_t backed;              /* the file's pages are allocated up to here */
	bool fs_full;                 /* the last allocation of pages found no space */
	/* RESERVE arena bytes, and the last eighth of every index's slots,
	 * are kept from the requests the caller marks no_reserve (the
	 * daemon: those of uids other than root and its own). LOCAL_SHARE
	 * bytes more, and the eighth of every index's slots before those,
	 * are kept from the requests it marks remote as well (another
	 * node's entries): the room this host's own users have left,
	 * whatever other nodes send. */
	uint64_t reserve;
	uint64_t local_share;
	bool no_reserve;              /* the request under way may not use the reserve */
	bool remote;                  /* nor the local share (with no_reserve) */
	bool reserve_hit;             /* a request was refused for what is kept from it
				       * (the caller clears it) */
	bool place_hit;               /* one was refused by procreg__w_place_ok (the caller
				       * clears it, as it does reserve_hit) */
	/* The uid of the request under way, which procreg__w_place_ok
	 * counts entries of, and a new group's record keeps; PR_NO_UID when
	 * no local uid asks (a replicated entry). OWNER_OF maps a uid to the
	 * one its limits count against (NULL: itself). */
	uint32_t req_uid;
	uint32_t (*owner_of)(uint32_t uid);

	/* Deferred reclamation: pairs (off, size). */
	struct pr_vec retired;        /* waiting for the next grace period */
	uint64_t retired_bytes;
	/* Retired by the batch under way (procreg__w_batch_begin): not
	 * given to a grace period, so never freed, before the batch ends,
	 * however full the arena. The writer may still read it until then:
	 * an event, a hand-over or a note to other nodes about an entry it
	 * has just removed. */
	bool in_batch;
	struct pr_vec current;
	uint64_t current_bytes;
	struct pr_vec waiting;        /* waiting for gp_target */
	uint64_t gp_target;           /* 0: no grace period in flight */
	uint64_t gp_started_ns;
	uint32_t gp_waited;           /* slots it waits for, while procregd:grace_period is traced */

	struct pr_rpages readers;     /* the reader pages grace periods wait for */

	/* Records published in any index, by their node field (65,536
	 * counters, 512 KiB of which only the pages of ids in use are
	 * touched): kept by publish and remove, and recounted by recovery,
	 * so that the daemon knows a node id no record refers to without
	 * walking the table (the bridge gives a gone node's id to a new one
	 * only then). */
	uint64_t *node_refs;

	/* CLOCK_REALTIME as read once for the packet of requests under way
	 * (procreg__w_clock_hold), at its first stamp; 0 before it, and
	 * outside a packet. Its registrations and events share one stamp,
	 * which keeps the feed's times in order, instead of reading the
	 * clock for each. */
	bool clock_held;
	uint64_t clock_ns;
};

/* Now for a stamp the writer puts in the table: the packet's clock, if
 * one is held. */
static inline uint64_t procreg__w_now(struct pr_writer *w)
{
	if (!w->clock_held)
		return procreg__now_ns();
	if (!w->clock_ns)
		w->clock_ns = procreg__now_ns();
	return w->clock_ns;
}

/* From here on, one clock read for every stamp (HOLD), until called
 * with !HOLD: around one packet of requests. */
static inline void procreg__w_clock_hold(struct pr_writer *w, bool hold)
{
	w->clock_held = hold;
	w->clock_ns = 0;
}

/* How many published records name node id NODE. */
static inline uint64_t procreg__w_node_refs(const struct pr_writer *w, uint16_t node)
{
	return w->node_refs[node];
}

/* Create the scope's table, or attach to an existing one (then
 * w->attached is true and the caller must recover). Takes the scope's
 * lock: -EBUSY if another daemon holds it. A file that is not ours, or a
 * symbolic link, is refused (-EPERM, -ELOOP) with the reason in *why. */
int procreg__writer_open(struct pr_writer *w, const struct pr_paths *p,
			 const struct pr_writer_opts *o, const char **why);
void procreg__writer_close(struct pr_writer *w);
/* Whether DIR may hold a daemon's files: ours or root's, and sticky if
 * others may write it. */
int procreg__dir_check(const char *dir, const char **why);
/* Whether the open FD is a file of ours: regular, our uid, one link, not
 * writable by others. -EPERM with the reason in *why. */
int procreg__owned_file_check(int fd, const char **why);
/* Reader pages grace periods wait for: add one (mapped by
 * procreg__rpage_map), or drop the I-th (unmapped). */
int procreg__w_reader_add(struct pr_writer *w, const struct pr_rpage_ref *ref);
void procreg__w_reader_drop(struct pr_writer *w, size_t i);

/* Bring the home slot of a name of hash HASH in the name index into
 * cache, for a find to come: a hint, no change to anything. */
void procreg__w_prefetch_hash(struct pr_writer *w, uint64_t hash);
/* Find K in ROOT: its record offset (0 if absent) and slot position (or
 * where to insert it). */
uint64_t procreg__w_find(struct pr_writer *w, const struct pr_root *root,
			 const struct pr_key *k, uint64_t *pos);
#define PR_NO_UID UINT32_MAX
/* Whether a request marked no_reserve may insert K at POS of ROOT (as
 * procreg__w_find gave it): 0, or -ENOSPC where it would make probes long
 * (writer.c). Any other request may. */
int procreg__w_place_ok(struct pr_writer *w, const struct pr_root *root, const struct pr_key *k,
			uint64_t pos);
/* Fresh arena kept at the end for the name index's rebuilds (bytes):
 * what records are refused (writer.c: index_room()). */
uint64_t procreg__w_index_room(struct pr_writer *w);
/* Make room for one more entry in ROOT; call before procreg__w_find when
 * inserting (it may rebuild the index, which moves slot positions). */
int procreg__w_reserve(struct pr_writer *w, struct pr_root *root);
/* Allocate and fill an unpublished record. */
int procreg__w_new_record(struct pr_writer *w, const struct pr_record *tmpl,
			  const char *name, const void *meta, uint64_t *off);
/* Publish OFF at POS of ROOT (empty, tombstone or live slot; a live one's
 * record is retired). */
void procreg__w_publish(struct pr_writer *w, struct pr_root *root, uint64_t pos, uint64_t off);
/* The same, for the record of key K, found at POS by procreg__w_find with
 * K: the slot is filled from K (its hash and slot key), not from reading
 * and hashing the record again. */
void procreg__w_publish_key(struct pr_writer *w, struct pr_root *root, uint64_t pos, uint64_t off,
			    const struct pr_key *k);
/* Remove the entry at POS of ROOT and retire its record. */
void procreg__w_remove(struct pr_writer *w, struct pr_root *root, uint64_t pos);
/* Give back an unpublished record (a request that failed after allocation). */
void procreg__w_discard(struct pr_writer *w, uint64_t off);
/* The root of a group's member index; with CREATE, the group is created
 * (published, empty) if it does not exist. -ENOENT without CREATE. */
int procreg__w_group(struct pr_writer *w, const char *name, size_t len, bool create,
		     struct pr_root **root);
/* Remove group NAME if it has no members left. */
void procreg__w_drop_group_if_empty(struct pr_writer *w, const char *name, size_t len);
/* Remove the published record at OFF from its index: a name, or a
 * membership (and its group, once empty). -ENOENT if it is not there. */
int procreg__w_unpublish(struct pr_writer *w, uint64_t off);
/* The same for OFF, which a probe of ROOT found at slot POS: no second
 * hash and probe when the slot still holds it (else looked up). */
int procreg__w_unpublish_at(struct pr_writer *w, uint64_t off, struct pr_root *root, uint64_t pos);
/* Run reclamation: start a grace period if memory is retired, free what a
 * finished one covered. Returns 1 while work remains (call again soon).
 * Memory retired by the batch under way is not touched. */
int procreg__w_reclaim(struct pr_writer *w);
/* A batch of changes: what it retires stays as it was until
 * procreg__w_batch_end (then it waits for a grace period like the rest),
 * even when an allocation in the batch must reclaim. Outside a batch,
 * retired memory is reclaimable at once. */
void procreg__w_batch_begin(struct pr_writer *w);
void procreg__w_batch_end(struct pr_writer *w);
/* Rebuild the allocator and the counts from the table after attach; run
 * once. */
int procreg__w_recover(struct pr_writer *w);
uint64_t procreg__record_size(const struct pr_record *r);

/* Append an event about R to the change feed (feed.c). */
void procreg__w_emit(struct pr_writer *w, uint32_t type, const struct pr_record *r);
/* The same, stamped TIME_NS (CLOCK_REALTIME) that the caller has just
 * read: a registration's own stamp, saving a second clock read. */
void procreg__w_emit_at(struct pr_writer *w, uint32_t type, const struct pr_record *r,
			uint64_t time_ns);
/* Wake followers if events were emitted since the last call: once per
 * batch of work. */
void procreg__w_feed_wake(struct pr_writer *w);

/* Conveniences for the name index. */
static inline uint64_t procreg__w_find_name(struct pr_writer *w, const char *name, size_t len,
					    uint64_t *pos)
{
	struct pr_key k;

	pr_key_name(&k, PR_KIND_NAME, name, len, w->map.hdr->hash_seed);
	return procreg__w_find(w, &w->map.hdr->names, &k, pos);
}

/* Walk every name and every membership: CB gets the record's offset. It
 * may unpublish that record. */
typedef int (*pr_walk_cb)(uint64_t off, const struct pr_record *r, void *arg);
int procreg__w_walk(struct pr_writer *w, pr_walk_cb cb, void *arg);

/* The same walk a part at a time, the table written in between
 * (procreg__w_walk_some()). Zeroed to start; freed with
 * procreg__w_cursor_free(). */
struct pr_wcursor {
	uint64_t lo;                /* names, then groups: the next hash to visit */
	uint64_t mlo;               /* the members of groups[at]: the next hash */
	int phase;
	bool groups_end;            /* the last chunk of groups is in groups[] */
	struct pr_wgroup **groups;  /* a chunk of groups, by name */
	size_t ngroups, at, cap;
};

/* About BUDGET more slots of the walk C: 1 while more remain, 0 once it
 * is over, -ENOMEM, or what CB returned when not 0, a negative errno (C
 * is then of no further use). CB may unpublish the record it is given,
 * as procreg__w_walk()'s may; nothing may be published until the call
 * returns. */
int procreg__w_walk_some(struct pr_writer *w, struct pr_wcursor *c, uint64_t budget,
			 pr_walk_cb cb, void *arg);
void procreg__w_cursor_free(struct pr_wcursor *c);

int procreg__vec_push(struct pr_vec *v, uint64_t x);
void procreg__vec_free(struct pr_vec *v);

/* V, an array of N elements of SZ bytes with room for *CAP, with X
 * stored at N: the array (moved, perhaps), or NULL for want of memory
 * (V untouched). (introspect.c) */
void *procreg__grow_append(void *v, size_t n, size_t *cap, const void *x, size_t sz);

/* ---- the handle (client.c) ------------------------------------------ */

struct procreg {
	struct pr_paths paths;
	struct pr_map map;
	struct pr_rcu rcu;
	pthread_mutex_t io;       /* one request stream at a time */
	int fd;                   /* -1 until the first call that needs it */
	pid_t fd_pid;             /* the process that made fd: a forked child reconnects */
	uint64_t fd_gen;          /* the table's daemon_gen when fd was made: a daemon
				   * started since (a pid may come again) means a new fd */
	bool fd_files;            /* fd may pass files (else FILES first: proto.h) */
	bool fd_follows;          /* FOLLOW was answered on fd (feed.c) */
	uint32_t next_id;
	int timeout_ms;           /* procreg_opts' .timeout_ms: 0, no limit */
	char socket[PR_SOCKET_PATH_MAX];
	/* Where a daemon would bind with no socket given: the path to dial
	 * when none has published one (socket activation). */
	char default_socket[PR_SOCKET_PATH_MAX];
	uint8_t *out, *in;        /* PR_PACKET_MAX bytes each */
	/* Notices of names lost, read from fd between replies and not yet
	 * taken by procreg_lost(): oldest first. Under io. */
	struct pr_lost_note *lost, **lost_tail;
	/* Every open handle of the process, for fork() (client.c), and
	 * whether fork() holds io. */
	struct procreg *fork_next, **fork_prev;
	bool fork_io;
};

pid_t procreg__self_pid(void);

/* Make sure the daemon serving the table counts this handle's connection
 * among the feed's followers, before a thread sleeps on the futex
 * (client.c, feed.c): 0, or a negative errno when it could not be told. */
int procreg__follow(procreg_t *reg);

/* Hand this process's reader pages to the daemon now serving the table
 * (client.c), without waiting for it. */
void procreg__announce(procreg_t *reg) __attribute__((cold, noinline));

/* On every read path: a daemon that started since our pages were last
 * announced, or a page it has not seen, gets them. daemon_gen shares gp's
 * cache line, which the read lock loads anyway. */
static inline void procreg__announce_if_new(procreg_t *reg)
{
	if (caa_unlikely(CMM_LOAD_SHARED(reg->map.hdr->daemon_gen) !=
			 PR_LOAD_RELAXED(&reg->rcu.announced)))
		procreg__announce(reg);
}

#endif /* PROCREG_INTERNAL_H */
