/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * table.c - the reader side of the shared table: mapping, lookup,
 * iteration, counters.
 *
 * Everything here runs in any process, on a PROT_READ mapping, inside a
 * read-side critical section (rcu.c). It trusts nothing it reads: an
 * offset is checked against the mapping before it is followed, a probe
 * never runs longer than the index is wide, and a record's lengths are
 * checked against the limits and the mapping before a byte is copied. A
 * damaged or hostile file can make a lookup miss; it cannot make it crash
 * or spin.
 *
 * A stale read is safe: whatever a reader reached stays whole until it
 * leaves its critical section, because the daemon frees retired memory only
 * after a grace period (invariant 2 in DESIGN.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "probes.h"

PR_PROBE_DEFINE(procreg, lookup);
PR_PROBE_DEFINE(procreg, lookup_latency);
PR_PROBE_DEFINE(procreg, read_held);
PR_PROBE_DEFINE(procreg, walk);

/* What a read-side section held for: procreg:read_held's first argument. */
enum { HELD_LOOKUP, HELD_NAMES, HELD_MEMBERS, HELD_GROUPS };

/* ---- headers and mappings -------------------------------------------- */

int procreg__check_table_hdr(const struct pr_table_hdr *h, size_t file_size,
			     const char **why)
{
	const char *w = NULL;

	if (file_size < PR_HDR_SIZE)
		w = "file too small for a table header";
	else if (PR_LOAD_ACQ(&h->magic) != PR_TABLE_MAGIC)
		w = "not a procreg table (bad magic, or still being created)";
	else if (h->layout_version != PR_LAYOUT_VERSION)
		w = "table layout version differs from this build's";
	else if (h->size_desc != PR_SIZE_DESC)
		w = "table was written by a build with other structure sizes";
	else if (h->file_size != file_size || h->hdr_size != PR_HDR_SIZE ||
		 h->arena_off < PR_HDR_SIZE || h->arena_off >= file_size)
		w = "table header sizes do not match the file";
	if (w && why)
		*why = w;
	return w ? -EPROTO : 0;
}

/* Longer than any user name a system accepts (useradd's limit is 32):
 * a longer one is not looked up at all. */
#define PR_USER_NAME_MAX 256
/* The most a passwd entry may take before the lookup is given up. */
#define PR_PWBUF_MAX (1u << 20)

/* Whether OWNER is the system user procregd runs as: $PROCREG_DAEMON_USER
 * (the caller's own environment, ignored in a set-user-ID program; empty:
 * no such user), else the build's PROCREG_DAEMON_USER_DEFAULT. A user that
 * does not exist, a failed lookup (NSS down, out of memory) or a name that
 * resolves to root trusts no one more. */
static bool is_daemon_user(uid_t owner)
{
	const char *name = secure_getenv("PROCREG_DAEMON_USER");
	char small[1024], *buf = small, *big = NULL;
	struct passwd pw, *res = NULL;
	size_t len = sizeof(small);
	bool yes;
	int err;

	if (!name)
		name = PROCREG_DAEMON_USER_DEFAULT;
	if (!*name || strnlen(name, PR_USER_NAME_MAX + 1) > PR_USER_NAME_MAX)
		return false;
	while ((err = getpwnam_r(name, &pw, buf, len, &res)) == ERANGE && len < PR_PWBUF_MAX) {
		len *= 4;
		free(big);
		big = buf = malloc(len);
		if (!buf) {
			err = ENOMEM;
			break;
		}
	}
	yes = !err && res && res->pw_uid == owner && owner != 0 && owner != (uid_t)-1;
	free(big);
	return yes;
}

bool procreg__trusted_owner(uid_t owner, uid_t trust)
{
	if (owner == 0 || owner == geteuid() || (trust != 0 && owner == trust))
		return true;
	/* The slow path, only for an owner none of those: at open, never on
	 * a lookup. */
	return is_daemon_user(owner);
}

/* Open PATH for reading if it is a table this process may trust: a
 * regular file (not through a symbolic link), owned by a user
 * procreg__trusted_owner() names, and writable by its owner only. Anyone
 * else's file in a shared directory could say anything. */
static int open_trusted(const char *path, uid_t trust, struct stat *st, const char **why)
{
	/* O_NONBLOCK: a FIFO planted at the path would otherwise hold the
	 * open until someone writes to it; it is refused below instead. */
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		if (errno != ELOOP)
			return -errno;
		*why = "the table's path is a symbolic link: refused";
		return -EPERM;
	}
	if (fstat(fd, st) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	if (!S_ISREG(st->st_mode)) {
		*why = "the table's path is not a regular file";
		close(fd);
		return -EPROTO;
	}
	if (!procreg__trusted_owner(st->st_uid, trust)) {
		*why = "the table belongs to a user this process does not trust (only root's, "
		       "its own, the daemon's system user's (" PROCREG_DAEMON_USER_DEFAULT
		       ", or $PROCREG_DAEMON_USER), or .trust_uid's / $PROCREG_TRUST_UID's)";
		close(fd);
		return -EPERM;
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		*why = "the table is writable by others than its owner";
		close(fd);
		return -EPERM;
	}
	return fd;
}

int procreg__map_file(int fd, off_t size, int prot, void **base)
{
	void *p;

	if (size <= 0 || (uint64_t)size > PR_MAX_FILE_SIZE)
		return -EPROTO;
	p = mmap(NULL, (size_t)size, prot, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	/* Huge pages where the filesystem allows them (a tmpfs mounted with
	 * huge=advise, within_size or always; /dev/shm is not, by default):
	 * at a million names the index and the records miss the TLB on
	 * nearly every lookup with 4 KiB pages. Advice only: where it is
	 * not allowed nothing changes, so its failure is no error. */
	(void)madvise(p, (size_t)size, MADV_HUGEPAGE);
	*base = p;
	return 0;
}

int procreg__map_reader(struct pr_map *m, const struct pr_paths *p, uid_t trust,
			const char **why)
{
	const char *w = NULL;
	struct stat st;
	void *t = NULL;
	int fd, err;

	memset(m, 0, sizeof(*m));
	fd = open_trusted(p->table, trust, &st, &w);
	if (fd < 0) {
		if (why)
			*why = w;
		return fd;
	}
	/* PROT_READ: a client cannot write the table, whatever it does. The
	 * daemon allocates every page of it that it writes before writing
	 * it, and no one else may change the file: reading it cannot fault. */
	err = procreg__map_file(fd, st.st_size, PROT_READ, &t);
	close(fd);
	if (err == -EPROTO && why)
		*why = "table file has an impossible size";
	if (err < 0)
		return err;
	err = procreg__check_table_hdr(t, (size_t)st.st_size, why);
	if (err < 0) {
		munmap(t, (size_t)st.st_size);
		return err;
	}
	m->base = t;
	pr_map_sized(m, (size_t)st.st_size);
	m->hdr = t;
	m->owner = st.st_uid;
	m->dev = (uint64_t)st.st_dev;
	m->ino = (uint64_t)st.st_ino;
	return 0;
}

void procreg__unmap(struct pr_map *m)
{
	if (m->base)
		munmap(m->base, m->size);
	memset(m, 0, sizeof(*m));
}

/* ---- records ---------------------------------------------------------- */

const struct pr_record *procreg__record_at(const struct pr_map *m, uint64_t w)
{
	uint64_t off = pr_slot_off(w);
	const struct pr_record *r = pr_at(m, off, sizeof(*r));

	if (!r || r->name_len == 0 || r->name_len > PROCREG_NAME_MAX ||
	    r->meta_len > PROCREG_META_MAX ||
	    !pr_at(m, off, PR_RECORD_SIZE(r->name_len, r->meta_len)))
		return NULL;
	return r;
}

uint64_t procreg__record_size(const struct pr_record *r)
{
	return PR_RECORD_SIZE(r->name_len, r->meta_len);
}

/* Fill E from R, whose lengths NL and ML were read once and checked (the
 * copy goes by them, never by a second read that could differ). */
static inline void fill_entry(const struct pr_record *r, uint16_t nl, uint16_t ml,
			      struct procreg_entry *e)
{
	e->pid = (pid_t)r->pid;
	e->node = r->node;
	e->flags = r->flags & PR_REC_FLAGS;
	e->start_time = r->start_time;
	e->registered_ns = r->registered_ns;
	e->uid = r->uid;
	e->meta_len = ml;
	pr_copy(e->name, r->data, nl);
	e->name[nl] = 0;
	/* As much as the caller made room for; .meta_len says if it was cut. */
	if (e->meta)
		pr_copy(e->meta, r->data + nl + 1, ml < e->meta_size ? ml : e->meta_size);
}

/* Copy a record out. Its lengths are read once and checked again here:
 * a record is immutable, but a reader does not trust the file (memory
 * reused under a reader the daemon did not wait for is caught only by
 * the validation after the copy), and copying by lengths read twice
 * could overflow E. */
int procreg__record_to_entry(const struct pr_map *m, const struct pr_record *r,
			     struct procreg_entry *e)
{
	uint16_t nl = CMM_LOAD_SHARED(r->name_len), ml = CMM_LOAD_SHARED(r->meta_len);

	if (nl > PROCREG_NAME_MAX || ml > PROCREG_META_MAX ||
	    !pr_at(m, (uint64_t)((const uint8_t *)r - m->base), PR_RECORD_SIZE(nl, ml)))
		return -1;
	fill_entry(r, nl, ml, e);
	return 0;
}

/* The current index of ROOT, checked whole, into V: its capacity and
 * shift are read once, so every later use is of checked values. Acquire:
 * the index's contents were written before its offset was published. */
int procreg__index(const struct pr_map *m, const struct pr_root *root, struct pr_ixv *v)
{
	uint64_t off = PR_LOAD_ACQ(&root->index_off), cap, seen = PR_LOAD_RELAXED(&m->ix_seen);
	const struct pr_index *ix;
	uint32_t lg = (uint32_t)(seen & 63);

	/* The index last found whole (ix_seen) lies where it lay then: its
	 * offset was checked against the mapping, whose size never changes,
	 * and only the capacity is read again, since a block retired and
	 * reused may hold another index at the same offset. The shift is not
	 * read at all but follows from it. Unset, ix_seen is 0, which no
	 * index offset is (a table saying 0 has its header read as an index,
	 * and the magic is no power of two: the checks below turn it down). */
	if (caa_likely(seen >> 6 == off)) {
		ix = (const struct pr_index *)(m->base + off);
		cap = CMM_LOAD_SHARED(ix->capacity);
		if (caa_likely(cap == 1ull << lg))
			goto whole;
	}
	/* Every arena block is PR_ALIGN-aligned: an offset that is not
	 * cannot be an index, and reading it as one would be a misaligned
	 * access. */
	ix = off % PR_ALIGN ? NULL : pr_at(m, off, sizeof(*ix));
	v->slot = NULL;
	if (!ix)
		return -1;
	cap = CMM_LOAD_SHARED(ix->capacity);
	if (cap < 2 || (cap & (cap - 1)) || cap > m->size / sizeof(struct pr_slot) ||
	    !pr_at(m, off, sizeof(*ix) + cap * sizeof(struct pr_slot)))
		return -1;
	lg = (uint32_t)__builtin_ctzll(cap);
	/* The name index only, the one lookups read: remembering every
	 * index checked would have threads walking groups and threads
	 * looking names up overwrite it in turn, a store to the line that
	 * holds the mapping's base, which every lookup reads. */
	if (root == &m->hdr->names)
		PR_STORE_RELAXED(&((struct pr_map *)m)->ix_seen, off << 6 | lg);
whole:
	v->slot = ix->slot;
	v->cap = cap;
	v->shift = 64 - lg;
	return 0;
}

/* A group's root block, checked: it holds the member index. */
const struct pr_root *procreg__group_root(const struct pr_map *m, const struct pr_record *g)
{
	if (g->kind != PR_KIND_GROUP || g->aux % PR_ALIGN)
		return NULL;
	return pr_at(m, g->aux, sizeof(struct pr_root));
}

/* The name length of R, reached by slot word W: read once and bounded by
 * the mapping, since a block reused under a reader the daemon stopped
 * waiting for may hold another length at a second read. -1 if the name
 * does not fit. */
static int record_name_len(const struct pr_map *m, uint64_t w, const struct pr_record *r)
{
	uint16_t nl = CMM_LOAD_SHARED(r->name_len);

	return nl <= PROCREG_NAME_MAX && pr_at(m, pr_slot_off(w), PR_RECORD_SIZE(nl, 0)) ? nl : -1;
}

/* Whether R, reached by slot word W, is K's. TRUSTED: the writer's own
 * table, whose records recovery checked and only it wrote since: no
 * bound to check. */
static inline int key_matches(const struct pr_map *m, uint64_t w, const struct pr_record *r,
			      const struct pr_key *k, bool trusted)
{
	if (r->kind != k->kind)
		return 0;
	if (k->kind == PR_KIND_MEMBER)
		return r->pid == k->pid && r->start_time == k->start && r->node == k->node;
	if (trusted)
		return r->name_len == k->len && pr_bytes_eq(k->name, r->data, k->len);
	return record_name_len(m, w, r) == (int)k->len && pr_bytes_eq(k->name, r->data, k->len);
}

/* procreg__probe, for a reader (every record checked before it is read)
 * or, TRUSTED, for the writer. */
static inline __attribute__((always_inline)) const struct pr_record *
probe(const struct pr_map *m, const struct pr_ixv *ix, const struct pr_key *k, uint64_t *pos,
      bool trusted)
{
	uint64_t mask = ix->cap - 1, p = k->hash >> ix->shift, first_tomb = UINT64_MAX;

	for (uint64_t n = 0; n <= mask; n++, p = (p + 1) & mask) {
		uint64_t w = PR_LOAD_ACQ(&ix->slot[p].word);
		const struct pr_record *r;

		if (w == PR_SLOT_EMPTY) {
			if (pos)
				*pos = first_tomb != UINT64_MAX ? first_tomb : p;
			return NULL;
		}
		if (w == PR_SLOT_TOMB) {
			if (first_tomb == UINT64_MAX)
				first_tomb = p;
			continue;
		}
		/* The record is compared whatever the slot holds: this
		 * probe serves the writer and the reader's slower paths. */
		if (!pr_slot_is(w, CMM_LOAD_SHARED(ix->slot[p].key), k->skey))
			continue;
		r = trusted ? (const struct pr_record *)(m->base + pr_slot_off(w))
			    : procreg__record_at(m, w);
		if (r && key_matches(m, w, r, k, trusted)) {
			if (pos)
				*pos = p;
			return r;
		}
	}
	if (pos)
		*pos = first_tomb;
	return NULL;
}

/*
 * Probe for K. Returns its record, or NULL. *pos gets the record's slot
 * or, when absent, the slot an insertion should take (the first tombstone
 * on the way, else the empty slot that ended the probe; UINT64_MAX if the
 * index is full, which the writer never lets happen).
 */
const struct pr_record *procreg__probe(const struct pr_map *m, const struct pr_ixv *ix,
				       const struct pr_key *k, uint64_t *pos)
{
	return probe(m, ix, k, pos, false);
}

const struct pr_record *procreg__probe_trusted(const struct pr_map *m, const struct pr_ixv *ix,
					       const struct pr_key *k, uint64_t *pos)
{
	return probe(m, ix, k, pos, true);
}

const struct pr_record *procreg__find(const struct pr_map *m, const struct pr_root *root,
				      const struct pr_key *k)
{
	struct pr_ixv ix;

	return procreg__index(m, root, &ix) ? NULL : procreg__probe(m, &ix, k, NULL);
}

/*
 * The reader's probe for a name, and the copy-out, in one pass over the
 * record: procreg__probe serves the writer too (the slot an insertion
 * should take), which a lookup does not need, and a record found there
 * and then copied out was checked twice. Here a record's lengths are
 * read once, checked once against the mapping, and used for both the
 * compare and the copy.
 *
 * A short name's presence test ends at its slot, which holds the name
 * (lib/layout.h): the word, loaded again after the key, must not have
 * changed, or the key may be another name's, written while this probe
 * read it; the slot is then read again (each time counted against the
 * probe's bound, the index's capacity). A lookup that copies the entry out
 * needs no second load: it compares the name in the record, which is
 * immutable. SLOT_ONLY (a presence test of a short name) is a constant
 * where this is inlined: each kind of lookup gets a loop of its own.
 */
static inline __attribute__((always_inline)) const struct pr_record *
probe_name(const struct pr_map *m, const struct pr_ixv *ix, const char *name, size_t len,
	   uint64_t hash, struct pr_skey sk, struct procreg_entry *out, const bool slot_only)
{
	uint64_t mask = ix->cap - 1, p = hash >> ix->shift;

	for (uint64_t n = 0; n <= mask; n++, p = (p + 1) & mask) {
		uint64_t w = PR_LOAD_ACQ(&ix->slot[p].word), off;
		const struct pr_record *r;
		uint16_t nl, ml;
		bool room;

		/* Empty, or a tombstone, whose top half is 0 as the slot of
		 * a name of 8 bytes has too, with a key its last name may
		 * have left. */
		if (caa_unlikely(w <= PR_SLOT_TOMB)) {
			if (w == PR_SLOT_EMPTY)
				return NULL;
			continue;
		}
		if (!pr_slot_is(w, PR_LOAD_ACQ(&ix->slot[p].key), sk))
			continue;
		off = pr_slot_off(w);
		if (slot_only) {
			if (caa_likely(PR_LOAD_RELAXED(&ix->slot[p].word) == w))
				return (const struct pr_record *)(m->base + off);
			p = (p - 1) & mask;
			continue;
		}
		/* Nearly every record lies where a record of any size fits
		 * (pr_map.rec_room): one compare bounds it, since a name of
		 * LEN bytes and metadata within the limit are checked below.
		 * The rest, in the last bytes of the file, are checked by
		 * their lengths. */
		room = off - PR_HDR_SIZE < m->rec_room;
		if (!room && !pr_at(m, off, sizeof(*r)))
			continue;
		r = (const struct pr_record *)(m->base + off);
		nl = CMM_LOAD_SHARED(r->name_len);
		ml = CMM_LOAD_SHARED(r->meta_len);
		/* Past the compare of NL with LEN, LEN serves: the caller's,
		 * in a register, where NL would have the metadata's address
		 * and the compare's last word wait on the record's line. */
		if (r->kind != PR_KIND_NAME || nl != len || ml > PROCREG_META_MAX ||
		    (!room && !pr_at(m, off, PR_RECORD_SIZE(len, ml))) ||
		    !pr_bytes_eq(name, r->data, len))
			continue;
		if (out)
			fill_entry(r, (uint16_t)len, ml, out);
		return r;
	}
	return NULL;
}

/* ---- public reader API ------------------------------------------------ */

/* What a traced lookup measures; the untraced one passes NULL and the
 * compiler drops every use. */
struct lookup_trace {
	bool held;                /* procreg:read_held is traced */
	uint64_t locked_ns, unlocked_ns;
};

/* One pass under the read lock: the record found, or NULL; *STALE
 * whether the reads must be done again (pr_read_valid). */
static inline __attribute__((always_inline)) const struct pr_record *
lookup_once(procreg_t *reg, struct pr_reader_slot *s, const char *name, size_t len, uint64_t hash,
	    struct pr_skey sk, struct procreg_entry *out, struct lookup_trace *t, int *stale)
{
	const struct pr_map *m = &reg->map;
	const struct pr_record *r;
	struct pr_ixv ix;
	uint64_t gp = pr_read_lock(m, s);

	if (t && t->held)
		t->locked_ns = procreg__mono_ns();
	r = procreg__index(m, &m->hdr->names, &ix) ? NULL
	    : !out && sk.key ? probe_name(m, &ix, name, len, hash, sk, NULL, true)
			     : probe_name(m, &ix, name, len, hash, sk, out, false);
	*stale = pr_read_valid(m, gp);
	if (t && t->held)
		t->unlocked_ns = procreg__mono_ns();
	pr_read_unlock(s);
	if (caa_unlikely(*stale))
		uatomic_inc(&reg->rcu.stale);
	return r;
}

/* The passes after a stale one, out of the way of the first: the loop's
 * count and state cost the hit path registers it spilled. */
static __attribute__((noinline, cold)) int lookup_again(procreg_t *reg, struct pr_reader_slot *s,
						       const char *name, size_t len,
						       uint64_t hash, struct pr_skey sk,
						       struct procreg_entry *out,
						       struct lookup_trace *t)
{
	const struct pr_record *r;
	int stale, tries = 1;

	do
		r = lookup_once(reg, s, name, len, hash, sk, out, t, &stale);
	while (stale && ++tries < PR_READ_TRIES);
	if (stale)
		return -ESTALE;
	return r ? 0 : -ENOENT;
}

static inline __attribute__((always_inline)) int lookup(procreg_t *reg, const char *name,
							 size_t len, uint64_t hash,
							 struct pr_skey sk,
							 struct procreg_entry *out,
							 struct lookup_trace *t)
{
	struct pr_reader_slot *s = procreg__rcu_slot(&reg->rcu);
	const struct pr_record *r;
	int stale, err;

	if (caa_unlikely(!s))
		return -ENOMEM;
	procreg__announce_if_new(reg);
	r = lookup_once(reg, s, name, len, hash, sk, out, t, &stale);
	if (caa_unlikely(stale))
		err = lookup_again(reg, s, name, len, hash, sk, out, t);
	else
		err = r ? 0 : -ENOENT;
	/* Our own cache line: no other process writes it. */
	CMM_STORE_SHARED(s->lookups, s->lookups + 1);
	return err;
}

/* The lookup while a tracer is attached to one of its probes: out of the
 * way of the untraced one, which pays only for the test that sends it
 * here. */
static __attribute__((noinline, cold)) int lookup_traced(procreg_t *reg, const char *name,
							 size_t len, uint64_t hash,
							 struct pr_skey sk,
							 struct procreg_entry *out)
{
	struct lookup_trace t = { .held = PR_PROBE_ENABLED(procreg, read_held) };
	uint64_t t0 = PR_TRACE_CLOCK(procreg, lookup_latency);
	int err = lookup(reg, name, len, hash, sk, out, &t);
	uint64_t ns = t0 ? procreg__mono_ns() - t0 : 0;

	PR_TRACE(procreg, lookup, hash, name, len, err, reg->map.dev, reg->map.ino);
	PR_TRACE(procreg, lookup_latency, hash, ns, err, reg->map.dev, reg->map.ino);
	if (t.held && err != -ENOMEM)
		PR_PROBE(procreg, read_held, HELD_LOOKUP, t.unlocked_ns - t.locked_ns, reg->map.dev,
			 reg->map.ino);
	return err;
}

/*
 * Start the load of K's home slot, in the index last found whole
 * (ix_seen), before anything else a lookup does. A lookup in a table too
 * big for the caches waits on two dependent misses, the home slot and
 * then the record; a program looking names up one after another has the
 * next lookup's slot miss overlap this one's record miss only if the
 * processor reaches that load while the miss is pending, within its
 * window of instructions in flight (a few hundred). Issued here, the
 * slot's load begins a few dozen instructions into the lookup instead of
 * after the reader slot, the read lock and the index checks. A hint
 * only: ix_seen may be stale or unset and the address then anything,
 * which a prefetch does not fault on; the probe reads the slot again,
 * checked, under the read lock.
 */
static inline void prefetch_home(const struct pr_map *m, uint64_t hash)
{
	uint64_t seen = PR_LOAD_RELAXED(&m->ix_seen);
	uint32_t lg = (uint32_t)(seen & 63);
	uintptr_t at = (uintptr_t)m->base + (uintptr_t)(seen >> 6) +
		       sizeof(struct pr_index) +
		       (uintptr_t)((hash >> (63 - lg) >> 1) * sizeof(struct pr_slot));

	__builtin_prefetch((const void *)at);
}

/* Flattened: the probe, index and copy helpers are inlined here whether
 * or not the traced copy above also uses them, so a build with probes
 * and one without compile this path the same (GCC otherwise declines to
 * inline them twice, and the probes would seem to cost a few calls). The
 * noinline traced copy stays out of line. */
/* What lets procreg_lookup() fill any checked caller's struct in place. */
_Static_assert(PR_SZ_MIN(procreg_entry, name) == sizeof(struct procreg_entry),
	       "the least .sz of procreg_entry is the whole 0.1 struct");

PROCREG_API __attribute__((flatten)) int procreg_lookup(procreg_t *reg, const char *name,
							 struct procreg_entry *out)
{
	uint64_t hash, first, rest;
	struct pr_skey sk;
	size_t len;
	int err = procreg__check_name(name, &len);

	if (err < 0)
		return err;
	hash = pr_hash_words(name, len, reg->map.hdr->hash_seed, &first, &rest);
	prefetch_home(&reg->map, hash);
	sk = pr_skey_words(len, first, rest, hash);
	/* A caller built against another header is checked; then it too is
	 * filled in place: every caller has all of 0.1's members (the least
	 * .sz is the whole 0.1 struct), and a lookup writes no others. */
	if (caa_unlikely(out && out->sz != sizeof(*out)) &&
	    (err = PR_SIZED(out, procreg_entry, name)))
		return err;
	if (PR_PROBE_ENABLED(procreg, lookup) | PR_PROBE_ENABLED(procreg, lookup_latency) |
	    PR_PROBE_ENABLED(procreg, read_held))
		return lookup_traced(reg, name, len, hash, sk, out);
	return lookup(reg, name, len, hash, sk, out, NULL);
}

/*
 * Bulk lookups. One at a time, a lookup in a large table waits on two
 * dependent cache misses (the index slot, then the record), and the
 * next lookup's misses cannot start until it is done. Here PR_BULK names
 * are taken together, in stages: hash them all and prefetch their home
 * slots; then read each home slot and prefetch the record it points to;
 * then probe each, as procreg_lookup does, the lines it needs in cache or
 * on their way. The misses of a group overlap instead of adding up, as
 * in DPDK's rte_hash_lookup_bulk. The prefetches are hints only: the
 * probe that follows is the whole check, so a slot that changed between
 * the stages costs a miss, never a wrong answer.
 */
#define PR_BULK 16

static inline struct procreg_entry *nth_entry(struct procreg_entry *out, size_t stride, size_t i)
{
	return out ? (struct procreg_entry *)((char *)out + i * stride) : NULL;
}

/* Names [BASE, BASE + N) under one read-side section: the found ones'
 * count. */
static int lookup_group(procreg_t *reg, struct pr_reader_slot *s, const char *const *names,
			size_t base, size_t n, struct procreg_entry *out, size_t stride, int *res)
{
	const struct pr_map *m = &reg->map;
	struct pr_key k[PR_BULK];
	bool valid[PR_BULK];        /* a name that could be registered: looked up */
	const struct pr_record *r;
	struct pr_ixv ix;
	int stale, tries = 0, found;

	for (size_t i = 0; i < n; i++) {
		size_t len;

		res[base + i] = procreg__check_name(names[base + i], &len);
		valid[i] = res[base + i] == 0;
		if (valid[i])
			pr_key_name(&k[i], PR_KIND_NAME, names[base + i], len, m->hdr->hash_seed);
	}
	do {
		uint64_t gp = pr_read_lock(m, s);

		found = 0;
		if (procreg__index(m, &m->hdr->names, &ix) == 0) {
			for (size_t i = 0; i < n; i++)
				if (valid[i])
					__builtin_prefetch(&ix.slot[k[i].hash >> ix.shift]);
			for (size_t i = 0; i < n; i++) {
				const struct pr_slot *sl;
				uint64_t w;

				/* A short name's presence test needs no record. */
				if (!valid[i] || (!out && k[i].skey.key))
					continue;
				sl = &ix.slot[k[i].hash >> ix.shift];
				w = CMM_LOAD_SHARED(sl->word);
				if (pr_slot_live(w) && pr_slot_is(w, CMM_LOAD_SHARED(sl->key), k[i].skey) &&
				    pr_slot_off(w) < m->size)
					__builtin_prefetch(m->base + pr_slot_off(w));
			}
		}
		for (size_t i = 0; i < n; i++) {
			if (!valid[i])
				continue;
			r = !ix.slot ? NULL
			    : !out && k[i].skey.key
				? probe_name(m, &ix, k[i].name, k[i].len, k[i].hash, k[i].skey, NULL, true)
				: probe_name(m, &ix, k[i].name, k[i].len, k[i].hash, k[i].skey,
					     nth_entry(out, stride, base + i), false);
			res[base + i] = r ? 0 : -ENOENT;
			found += r != NULL;
		}
		stale = pr_read_valid(m, gp);
		pr_read_unlock(s);
		if (caa_unlikely(stale))
			uatomic_inc(&reg->rcu.stale);
	} while (caa_unlikely(stale) && ++tries < PR_READ_TRIES);
	if (caa_unlikely(stale)) {
		for (size_t i = 0; i < n; i++)
			if (valid[i])
				res[base + i] = -ESTALE;
		return 0;
	}
	return found;
}

PROCREG_API int procreg_lookup_many(procreg_t *reg, const char *const *names, size_t n,
				    struct procreg_entry *out, int *res)
{
	struct pr_reader_slot *s;
	size_t stride = 0;
	int found = 0, err;

	if (!reg || (n && (!names || !res)) || n > INT_MAX)
		return -EINVAL;
	if (out && n) {
		/* As procreg_batch: the entries are .sz bytes apart, every
		 * one of the same .sz, checked before any is written. */
		if (out->sz != sizeof(*out) && (err = PR_SIZED(out, procreg_entry, name)))
			return err;
		stride = out->sz;
		for (size_t i = 1; i < n; i++)
			if (nth_entry(out, stride, i)->sz != stride)
				return -EINVAL;
	}
	/* Traced, every name goes through procreg_lookup's probes, so a
	 * tracer sees each as it would one at a time. */
	if (PR_PROBE_ENABLED(procreg, lookup) | PR_PROBE_ENABLED(procreg, lookup_latency) |
	    PR_PROBE_ENABLED(procreg, read_held)) {
		for (size_t i = 0; i < n; i++) {
			res[i] = procreg_lookup(reg, names[i], nth_entry(out, stride, i));
			found += res[i] == 0;
		}
		return found;
	}
	s = procreg__rcu_slot(&reg->rcu);
	if (caa_unlikely(!s))
		return -ENOMEM;
	procreg__announce_if_new(reg);
	for (size_t base = 0; base < n; base += PR_BULK)
		found += lookup_group(reg, s, names, base, n - base < PR_BULK ? n - base : PR_BULK,
				      out, stride, res);
	CMM_STORE_SHARED(s->lookups, s->lookups + n);
	return found;
}

/*
 * Iteration, in chunks, outside any long critical section.
 *
 * HOW IT WORKS. A name's home slot is the top bits of its hash, so home
 * order is hash order in an index of any capacity. With linear probing an
 * entry sits at or after its home and never past an empty slot, so when a
 * scan that started at home(lo) stops at an empty slot e, it has seen every
 * entry whose hash lies in [lo, e << shift): exactly those it keeps. The
 * next chunk resumes at lo = e << shift, a point in hash space, in whatever
 * index is current by then (the daemon may have rebuilt it at another
 * capacity). Every hash value belongs to exactly one chunk, so a name that
 * exists throughout is reported exactly once. The last chunk also scans
 * the run that wraps from the end of the index to its start.
 */
#define FOREACH_CHUNK 64

/* What a walk reports, and where each chunk finds its index. */
struct walk {
	/* Inside the critical section: the root to scan, or NULL if there is
	 * none (any more), which ends the walk. */
	const struct pr_root *(*root)(const struct pr_map *m, const void *arg);
	const void *arg;
	int kind;                  /* HELD_NAMES, HELD_MEMBERS or HELD_GROUPS */
	size_t elem;               /* bytes of one reported element */
	/* 0, or -1 for a record that is not whole (not reported). */
	int (*copy)(const struct pr_map *m, const struct pr_record *r, void *dst);
};

struct chunk {
	uint64_t lo;       /* next hash value to report */
	bool done;
	size_t n, cap;
	uint8_t *buf;      /* cap elements */
};

/* Keep the entry at position P if its hash is ours and it sits where the
 * scan expects it: at or after its home in the forward scan, before it
 * (wrapped around the end) in the wrap scan. Returns -1 when the buffer is
 * full. */
static int take(const struct pr_map *m, const struct pr_ixv *ix, uint64_t p,
		bool wrapped, const struct walk *wk, struct chunk *c)
{
	uint64_t w = PR_LOAD_ACQ(&ix->slot[p].word), h;
	const struct pr_record *r;
	int nl;

	if (!pr_slot_live(w))
		return 0;
	r = procreg__record_at(m, w);
	if (!r || (nl = record_name_len(m, w, r)) < 0)
		return 0;
	h = pr_record_hash(r, (size_t)nl, m->hdr->hash_seed);
	if (h < c->lo || ((h >> ix->shift) > p) != wrapped)
		return 0;
	if (c->n == c->cap)
		return -1;
	if (wk->copy(m, r, c->buf + c->n * wk->elem) == 0)
		c->n++;
	return 0;
}

/* Inside a read-side critical section. Returns -1 if the buffer must grow
 * (a cluster longer than it), 0 otherwise. */
static int fill_chunk(const struct pr_map *m, const struct walk *wk, struct chunk *c)
{
	const struct pr_root *root = wk->root(m, wk->arg);
	struct pr_ixv ix;
	uint64_t p, p0;

	c->n = 0;
	if (!root || procreg__index(m, root, &ix)) {
		c->done = true;
		return 0;
	}
	p0 = c->lo >> ix.shift;
	for (p = p0; p < ix.cap; p++) {
		if (PR_LOAD_ACQ(&ix.slot[p].word) == PR_SLOT_EMPTY) {
			if (c->n >= c->cap / 2) {
				c->lo = p << ix.shift;
				return 0;
			}
			continue;
		}
		if (take(m, &ix, p, false, wk, c) < 0)
			return -1;
	}
	/* Reached the end: the run that wraps to the start is ours too. It
	 * may reach p0 and beyond (always, when p0 is 0): the forward scan
	 * skipped its wrapped entries there, so follow it to its end. */
	for (p = 0; p < ix.cap && PR_LOAD_ACQ(&ix.slot[p].word) != PR_SLOT_EMPTY; p++)
		if (take(m, &ix, p, true, wk, c) < 0)
			return -1;
	c->done = true;
	return 0;
}

typedef int (*walk_cb)(const void *elem, void *arg);

static int walk(procreg_t *reg, const struct walk *wk, walk_cb cb, void *arg)
{
	struct pr_reader_slot *s = procreg__rcu_slot(&reg->rcu);
	struct chunk c = { .cap = FOREACH_CHUNK };
	uint64_t t0 = PR_TRACE_CLOCK(procreg, walk), entries = 0, chunks = 0, held = 0;
	int ret = 0, full, stale, tries = 0;

	if (!s)
		return -ENOMEM;
	procreg__announce_if_new(reg);
	c.buf = malloc(c.cap * wk->elem);
	if (!c.buf)
		return -ENOMEM;
	while (!c.done && !ret) {
		bool timed = PR_PROBE_ENABLED(procreg, read_held);
		uint64_t lo = c.lo, gp;

		gp = pr_read_lock(&reg->map, s);
		if (timed)
			held = procreg__mono_ns();
		full = fill_chunk(&reg->map, wk, &c);
		stale = pr_read_valid(&reg->map, gp);
		if (timed)
			held = procreg__mono_ns() - held;
		pr_read_unlock(s);
		if (timed)
			PR_PROBE(procreg, read_held, wk->kind, held, reg->map.dev, reg->map.ino);
		chunks++;
		if (stale) {
			/* Memory under the chunk was reused: do it again from
			 * where it started. Nothing of it was reported. */
			uatomic_inc(&reg->rcu.stale);
			if (++tries >= PR_READ_TRIES) {
				ret = -ESTALE;
				break;
			}
			c.lo = lo;
			c.done = false;
			continue;
		}
		tries = 0;
		if (full) {
			/* Grow outside the critical section and redo the chunk:
			 * nothing of it was reported and lo has not moved. */
			uint8_t *b = realloc(c.buf, 2 * c.cap * wk->elem);

			if (!b) {
				ret = -ENOMEM;
				break;
			}
			c.buf = b;
			c.cap *= 2;
			continue;
		}
		/* Callbacks run outside the critical section: they may take
		 * as long as they like, and call us back. */
		for (size_t i = 0; i < c.n && !ret; i++)
			ret = cb(c.buf + i * wk->elem, arg);
		entries += c.n;
	}
	free(c.buf);
	PR_TRACE(procreg, walk, wk->kind, entries, chunks, t0 ? procreg__mono_ns() - t0 : 0, ret,
		 reg->map.dev, reg->map.ino);
	return ret;
}

static const struct pr_root *names_root(const struct pr_map *m, const void *arg)
{
	(void)arg;
	return &m->hdr->names;
}

static const struct pr_root *groups_root(const struct pr_map *m, const void *arg)
{
	(void)arg;
	return &m->hdr->groups;
}

/* An entry as a walk reports it: with room for its metadata, which .meta
 * points to. The chunk holding these may move when it grows, but it is
 * then filled again before any callback sees it. */
struct walk_entry {
	struct procreg_entry e;
	unsigned char meta[PROCREG_META_MAX];
};

static int copy_entry(const struct pr_map *m, const struct pr_record *r, void *dst)
{
	struct walk_entry *w = dst;

	w->e = (struct procreg_entry){ .sz = sizeof(w->e), .meta = w->meta,
				       .meta_size = sizeof(w->meta) };
	return procreg__record_to_entry(m, r, &w->e);
}

PROCREG_API int procreg_foreach(procreg_t *reg, procreg_entry_cb cb, void *arg)
{
	const struct walk wk = { names_root, NULL, HELD_NAMES, sizeof(struct walk_entry), copy_entry };

	return walk(reg, &wk, (walk_cb)cb, arg);
}

/* ---- groups ----------------------------------------------------------- */

/* Inside a read-side critical section: a group's root, or NULL. */
static const struct pr_root *find_group(const struct pr_map *m, const struct pr_key *k)
{
	const struct pr_record *g = procreg__find(m, &m->hdr->groups, k);

	return g ? procreg__group_root(m, g) : NULL;
}

static const struct pr_root *member_root(const struct pr_map *m, const void *arg)
{
	return find_group(m, arg);
}

static int group_key(procreg_t *reg, const char *group, struct pr_key *k)
{
	size_t len;
	int err = procreg__check_name(group, &len);

	if (!err)
		pr_key_name(k, PR_KIND_GROUP, group, len, reg->map.hdr->hash_seed);
	return err;
}

/* Members are walked like names, chunk by chunk, finding the group afresh
 * for each chunk: its member index may have been rebuilt meanwhile. */
PROCREG_API int procreg_members(procreg_t *reg, const char *group, procreg_entry_cb cb,
				void *arg)
{
	struct pr_key k;
	const struct walk wk = { member_root, &k, HELD_MEMBERS, sizeof(struct walk_entry), copy_entry };
	int err = group_key(reg, group, &k);

	return err ? err : walk(reg, &wk, (walk_cb)cb, arg);
}

static int copy_group(const struct pr_map *m, const struct pr_record *r, void *dst)
{
	struct procreg_group *g = dst;
	const struct pr_root *root = procreg__group_root(m, r);
	uint16_t nl = CMM_LOAD_SHARED(r->name_len);

	if (nl > PROCREG_NAME_MAX ||
	    !pr_at(m, (uint64_t)((const uint8_t *)r - m->base), PR_RECORD_SIZE(nl, 0)))
		return -1;
	g->sz = sizeof(*g);
	memcpy(g->name, r->data, nl);
	g->name[nl] = 0;
	g->members = root ? CMM_LOAD_SHARED(root->live) : 0;
	g->local_members = root ? CMM_LOAD_SHARED(root->local) : 0;
	return 0;
}

PROCREG_API int procreg_groups(procreg_t *reg, procreg_group_cb cb, void *arg)
{
	const struct walk wk = { groups_root, NULL, HELD_GROUPS, sizeof(struct procreg_group), copy_group };

	return walk(reg, &wk, (walk_cb)cb, arg);
}

PROCREG_API int procreg_group_count(procreg_t *reg, const char *group, uint64_t *members,
				    uint64_t *local_members)
{
	struct pr_reader_slot *s;
	const struct pr_root *root;
	struct pr_key k;
	uint64_t n, l, gp;
	int err = group_key(reg, group, &k), stale, tries = 0;

	if (err)
		return err;
	s = procreg__rcu_slot(&reg->rcu);
	if (!s)
		return -ENOMEM;
	procreg__announce_if_new(reg);
	do {
		n = l = 0;
		gp = pr_read_lock(&reg->map, s);
		root = find_group(&reg->map, &k);
		if (root) {
			n = CMM_LOAD_SHARED(root->live);
			l = CMM_LOAD_SHARED(root->local);
		}
		stale = pr_read_valid(&reg->map, gp);
		pr_read_unlock(s);
	} while (stale && ++tries < PR_READ_TRIES);
	if (stale)
		return -ESTALE;
	if (members)
		*members = n;
	if (local_members)
		*local_members = l;
	return 0;
}

PROCREG_API int procreg_stats(procreg_t *reg, struct procreg_stats *out)
{
	const struct pr_table_hdr *h = reg->map.hdr;
	struct procreg_stats stats = { .sz = sizeof(stats) }, *st = &stats;
	struct pr_ixv ix;
	struct pr_reader_slot *s;
	int err = PR_SIZED(out, procreg_stats, daemon_started_ns);

	if (err)
		return err;
	s = procreg__rcu_slot(&reg->rcu);
	st->names = CMM_LOAD_SHARED(h->names.live);
	st->groups = CMM_LOAD_SHARED(h->groups.live);
	st->memberships = CMM_LOAD_SHARED(h->memberships);
	st->joins = CMM_LOAD_SHARED(h->joins);
	st->leaves = CMM_LOAD_SHARED(h->leaves);
	st->processes = CMM_LOAD_SHARED(h->processes);
	st->arena_size = h->file_size - h->arena_off;
	st->arena_used = CMM_LOAD_SHARED(h->arena_used);
	st->arena_top = CMM_LOAD_SHARED(h->arena_top) - h->arena_off;
	st->grace_periods = CMM_LOAD_SHARED(h->grace_periods);
	st->registrations = CMM_LOAD_SHARED(h->registrations);
	st->unregistrations = CMM_LOAD_SHARED(h->unregistrations);
	st->deaths = CMM_LOAD_SHARED(h->deaths);
	st->daemon_pid = (pid_t)PR_LOAD_ACQ(&h->daemon_pid);
	if (st->daemon_pid) {
		/* A daemon killed with SIGKILL cannot clear its pid: trust the
		 * header only while that pid is still the process it wrote. */
		uint64_t t;

		if (procreg__proc_start_time(st->daemon_pid, &t) < 0 ||
		    t != CMM_LOAD_SHARED(h->daemon_start_ticks))
			st->daemon_pid = 0;
	}
	st->daemon_started_ns = CMM_LOAD_SHARED(h->daemon_started_ns);
	st->reader_slots = h->readers_cap;
	st->reader_slots_used = CMM_LOAD_SHARED(h->readers_live);
	if (s) {
		uint64_t gp;
		int stale, tries = 0;

		do {
			gp = pr_read_lock(&reg->map, s);
			st->index_capacity = procreg__index(&reg->map, &h->names, &ix) ? 0 : ix.cap;
			stale = pr_read_valid(&reg->map, gp);
			pr_read_unlock(s);
		} while (stale && ++tries < PR_READ_TRIES);
		if (stale)
			st->index_capacity = 0;
	}
	procreg__sized_out(out, st, sizeof(*st));
	return 0;
}
