/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * baseline.c - the in-process tables procreg's lookups are measured
 * against:
 *
 *  - inline: the in-process table a C programmer would write for a
 *    lookup that copies the entry out. Open addressing over 64-byte
 *    slots, one cache line each, holding the name's full hash, every
 *    field of an entry and the name itself when it fits (16 bytes): a
 *    presence test, or a hit that does not want the metadata, reads one
 *    line. The metadata (and a longer name) sits in an arena the slot
 *    points to. Linear probing, home slot from the hash's top bits, the
 *    same capacity as procreg's index.
 *  - oa: procreg's own design without what sharing costs, for a "same
 *    work" figure beside it: 16-byte slots (a short name's bytes, or a
 *    32-bit hash tag, and the record's offset) over records of procreg's
 *    layout in one arena, the same capacity, no read-side section and no
 *    bounds checks; a presence test of a short name reads the slot only
 *    (four slots to a line and a page, where inline has one). The
 *    headline ratio is taken against whichever of the two measured faster
 *    (lookup.c): on the machine these figures were taken on, oa in every
 *    figure, copy-out lookups included.
 *  - lfht: liburcu's cds_lfht (RCU lock-free resizable hash table), memb
 *    flavor with inlined read-side lock (_LGPL_SOURCE), one malloc'd node
 *    per name, as a liburcu user would build it.
 *
 * All hash names with procreg's function (bench_hash), check a name as
 * procreg_lookup does, and copy a hit out into a struct procreg_entry
 * with the library's own copy (pr_copy: no call, no rep movs; a plain
 * memcpy here would be expanded differently and measure the compiler, not
 * the table). Lookups are out-of-line calls, as procreg_lookup is a call
 * into the shared library.
 *
 * Tables are built before the reader processes fork, so the readers share
 * them copy-on-write and never write them.
 *
 * This file, alone of the bench, includes a private header of the library
 * (lib/layout.h, on its include path only: CMakeLists.txt): not to reach
 * into a table, which the bench reads through <procreg.h> like any user,
 * but to build its baselines from procreg's own hash, copy, record layout
 * and slot words, so that they differ from procreg only in what they say
 * they do.
 */
#define _GNU_SOURCE
#define _LGPL_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <urcu.h>
#include <urcu/rculfhash.h>

#include "bench.h"
#include "layout.h" /* pr_hash: procreg's name hash */

#define HASH_SEED 0x5eed5eed12345678ull

uint64_t bench_hash(const char *s, size_t n)
{
	return pr_hash(s, n, HASH_SEED);
}

/* The record fields procreg stores and copies out, in its order (what a
 * probe compares last, next to the name: lib/layout.h). */
struct fields {
	uint32_t pid;
	uint32_t uid;
	uint64_t start_time;
	uint64_t registered_ns;
	uint64_t aux;
	uint16_t name_len;
	uint16_t meta_len;
	uint8_t kind;
	uint8_t flags;
	uint16_t node;
};

struct oa_rec {
	struct fields f;
	char data[];                /* name, NUL, meta */
};

_Static_assert(sizeof(struct oa_rec) == sizeof(struct pr_record), "same record header");
_Static_assert(offsetof(struct oa_rec, f.name_len) == offsetof(struct pr_record, name_len),
	       "the same fields where procreg has them");

static void fill(struct fields *f, const char *name, size_t meta_len, pid_t pid)
{
	f->start_time = 12345;
	f->aux = 0;
	f->registered_ns = (uint64_t)time(NULL) * 1000000000ull;
	f->pid = (uint32_t)pid;
	f->uid = (uint32_t)getuid();
	f->node = 0;
	f->name_len = (uint16_t)strlen(name);
	f->meta_len = (uint16_t)meta_len;
}

/* procreg__record_to_entry, for our records: the fields F, the name at
 * NAME and the metadata at META. */
static inline void to_entry(const struct fields *f, const char *name, const char *meta,
			    struct procreg_entry *e)
{
	e->pid = (pid_t)f->pid;
	e->node = f->node;
	e->flags = f->flags;
	e->start_time = f->start_time;
	e->registered_ns = f->registered_ns;
	e->uid = f->uid;
	e->meta_len = f->meta_len;
	pr_copy(e->name, name, f->name_len);
	e->name[f->name_len] = 0;
	if (e->meta)
		pr_copy(e->meta, meta, f->meta_len < e->meta_size ? f->meta_len : e->meta_size);
}

static inline int check_name(const char *name, size_t *len)
{
	size_t n = strnlen(name, PROCREG_NAME_MAX + 1);

	if (n == 0)
		return -EINVAL;
	if (n > PROCREG_NAME_MAX)
		return -ENAMETOOLONG;
	*len = n;
	return 0;
}

/* Memory for a baseline's slots or records: private, and in huge pages
 * where the system allows them (transparent huge pages for anonymous
 * memory, on request), as a table built for speed would ask. procreg's
 * table gets them where its filesystem allows (see procreg__map_file):
 * "procreg-bench lookup --tmpdir" on a tmpfs mounted huge=always
 * measures it with them. */
static void *table_mem(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p != MAP_FAILED)
		(void)madvise(p, len, MADV_HUGEPAGE);
	return p;
}

/* A baseline's memory: its slots, and an arena of records after an
 * unused first 16 bytes (offset 0 means none). */
struct tmem {
	void *slot;
	uint8_t *arena;
	size_t slot_bytes, arena_size, arena_map;
};

static int tmem_alloc(struct tmem *m, size_t slot_bytes, size_t arena_bytes)
{
	m->slot_bytes = slot_bytes;
	m->arena_map = PR_ALIGN + arena_bytes;
	m->arena_size = PR_ALIGN;
	m->slot = table_mem(m->slot_bytes);
	m->arena = table_mem(m->arena_map);
	if (m->slot != MAP_FAILED && m->arena != MAP_FAILED)
		return 0;
	if (m->slot != MAP_FAILED)
		munmap(m->slot, m->slot_bytes);
	if (m->arena != MAP_FAILED)
		munmap(m->arena, m->arena_map);
	return -1;
}

static void tmem_free(struct tmem *m)
{
	munmap(m->slot, m->slot_bytes);
	munmap(m->arena, m->arena_map);
}

/* The capacity of a table of N names given procreg's CAPACITY: the same,
 * unless it could not hold them. */
static uint64_t capacity_for(uint64_t n, uint64_t capacity)
{
	while (capacity <= n || capacity < 16)
		capacity *= 2;
	return capacity;
}

/* ---- open addressing ---------------------------------------------------- */

struct oa_table {
	struct tmem m;              /* slots: struct pr_slot; arena: records */
	uint64_t mask;
	uint32_t shift;
};

struct oa_table *oa_build(const struct qname *names, uint64_t n, uint64_t capacity, pid_t pid)
{
	struct oa_table *t = calloc(1, sizeof(*t));
	char meta[64];

	capacity = capacity_for(n, capacity);
	if (!t || tmem_alloc(&t->m, capacity * sizeof(struct pr_slot), n * PR_RECORD_SIZE(15, 40)) < 0) {
		free(t);
		return NULL;
	}
	t->mask = capacity - 1;
	t->shift = 64 - (uint32_t)__builtin_ctzll(capacity);
	for (uint64_t i = 0; i < n; i++) {
		size_t off = t->m.arena_size, ml = meta_of(meta, sizeof(meta), i);
		struct oa_rec *r = (struct oa_rec *)(t->m.arena + off);
		struct pr_slot *slot = t->m.slot;
		struct pr_skey sk;
		uint64_t p, h;

		fill(&r->f, names[i].s, ml, pid);
		memcpy(r->data, names[i].s, r->f.name_len + 1);
		memcpy(r->data + r->f.name_len + 1, meta, ml);
		h = bench_hash(names[i].s, r->f.name_len);
		sk = pr_skey_name(names[i].s, r->f.name_len, h);
		for (p = h >> t->shift; slot[p].word; p = (p + 1) & t->mask)
			;
		slot[p].key = sk.key;
		slot[p].word = pr_slot_word(sk, off);
		t->m.arena_size += PR_RECORD_SIZE(r->f.name_len, ml);
	}
	return t;
}

__attribute__((noinline)) int oa_lookup(struct oa_table *t, const char *name,
					struct procreg_entry *out)
{
	size_t len;
	uint64_t h, p, first, rest;
	struct pr_skey sk;
	int err = check_name(name, &len);

	if (err)
		return err;
	h = pr_hash_words(name, len, HASH_SEED, &first, &rest);
	sk = pr_skey_words(len, first, rest, h);
	for (p = h >> t->shift;; p = (p + 1) & t->mask) {
		const struct pr_slot *sl = (const struct pr_slot *)t->m.slot + p;
		const struct oa_rec *r;

		if (sl->word == 0)
			return -ENOENT;
		if (!pr_slot_is(sl->word, sl->key, sk))
			continue;
		if (!out && sk.key)
			return 0;
		r = (const struct oa_rec *)(t->m.arena + pr_slot_off(sl->word));
		if (r->f.name_len == len && pr_bytes_eq(name, r->data, len)) {
			if (out)
				to_entry(&r->f, r->data, r->data + len + 1, out);
			return 0;
		}
	}
}

size_t oa_bytes(const struct oa_table *t)
{
	return t->m.slot_bytes + t->m.arena_size;
}

void oa_free(struct oa_table *t)
{
	if (!t)
		return;
	tmem_free(&t->m);
	free(t);
}

/* ---- inline: the key in a one-line slot ---------------------------------- */

#define IL_KEY 16

/* The hash (0: an empty slot; a hash of 0 is stored as 1), the record's
 * fields, .aux the arena offset of the name, NUL and metadata; then the
 * name itself when it fits. */
struct il_slot {
	uint64_t hash;
	struct fields f;
	char key[IL_KEY];
};

_Static_assert(sizeof(struct il_slot) == 64, "one slot, one cache line");

struct il_table {
	struct tmem m;              /* slots: struct il_slot; arena: name, NUL, metadata */
	uint64_t mask;
	uint32_t shift;
};

static inline uint64_t il_hash(const char *s, size_t n)
{
	uint64_t h = bench_hash(s, n);

	return h ? h : 1;
}

struct il_table *il_build(const struct qname *names, uint64_t n, uint64_t capacity, pid_t pid)
{
	struct il_table *t = calloc(1, sizeof(*t));
	char meta[64];

	capacity = capacity_for(n, capacity);
	if (!t || tmem_alloc(&t->m, capacity * sizeof(struct il_slot), n * 80) < 0) {
		free(t);
		return NULL;
	}
	t->mask = capacity - 1;
	t->shift = 64 - (uint32_t)__builtin_ctzll(capacity);
	for (uint64_t i = 0; i < n; i++) {
		struct il_slot *slot = t->m.slot, *sl;
		size_t ml = meta_of(meta, sizeof(meta), i), off = t->m.arena_size, nl;
		uint64_t p, h;

		nl = strlen(names[i].s);
		h = il_hash(names[i].s, nl);
		for (p = h >> t->shift; slot[p].hash; p = (p + 1) & t->mask)
			;
		sl = &slot[p];
		fill(&sl->f, names[i].s, ml, pid);
		sl->hash = h;
		sl->f.aux = off;
		if (nl <= IL_KEY)
			memcpy(sl->key, names[i].s, nl);
		memcpy(t->m.arena + off, names[i].s, nl + 1);
		memcpy(t->m.arena + off + nl + 1, meta, ml);
		t->m.arena_size += (nl + 1 + ml + PR_ALIGN - 1) & ~(size_t)(PR_ALIGN - 1);
	}
	return t;
}

__attribute__((noinline)) int il_lookup(struct il_table *t, const char *name,
					struct procreg_entry *out)
{
	const struct il_slot *slot = t->m.slot;
	size_t len;
	uint64_t h, p;
	int err = check_name(name, &len);

	if (err)
		return err;
	h = il_hash(name, len);
	for (p = h >> t->shift;; p = (p + 1) & t->mask) {
		const struct il_slot *sl = &slot[p];
		const char *ext, *key;

		if (sl->hash == 0)
			return -ENOENT;
		if (sl->hash != h || sl->f.name_len != len)
			continue;
		ext = (const char *)t->m.arena + sl->f.aux;
		key = len <= IL_KEY ? sl->key : ext;
		if (!pr_bytes_eq(name, key, len))
			continue;
		if (out)
			to_entry(&sl->f, key, ext + len + 1, out);
		return 0;
	}
}

size_t il_bytes(const struct il_table *t)
{
	return t->m.slot_bytes + t->m.arena_size;
}

void il_free(struct il_table *t)
{
	if (!t)
		return;
	tmem_free(&t->m);
	free(t);
}

/* ---- liburcu cds_lfht ----------------------------------------------------- */

struct lfht_node {
	struct cds_lfht_node node;
	struct fields f;
	char data[];
};

struct lfht_table {
	struct cds_lfht *ht;
};

struct key {
	const char *name;
	size_t len;
};

static int match(struct cds_lfht_node *node, const void *k)
{
	const struct lfht_node *n = caa_container_of(node, struct lfht_node, node);
	const struct key *key = k;

	return n->f.name_len == key->len && pr_bytes_eq(key->name, n->data, key->len);
}

struct lfht_table *lfht_build(const struct qname *names, uint64_t n, pid_t pid)
{
	struct lfht_table *t = calloc(1, sizeof(*t));
	unsigned long buckets = 1;
	char meta[64];

	if (!t)
		return NULL;
	while (buckets < n)
		buckets *= 2;
	/* Sized for N from the start and no auto-resize: no resize worker
	 * thread, so the forked readers see a quiescent table. */
	t->ht = cds_lfht_new(buckets, buckets, 0, 0, NULL);
	if (!t->ht) {
		free(t);
		return NULL;
	}
	rcu_register_thread();
	for (uint64_t i = 0; i < n; i++) {
		size_t ml = meta_of(meta, sizeof(meta), i);
		size_t nl = strlen(names[i].s);
		struct lfht_node *node = malloc(sizeof(*node) + nl + 1 + ml);

		if (!node)
			abort();
		cds_lfht_node_init(&node->node);
		fill(&node->f, names[i].s, ml, pid);
		memcpy(node->data, names[i].s, nl + 1);
		memcpy(node->data + nl + 1, meta, ml);
		rcu_read_lock();
		cds_lfht_add(t->ht, bench_hash(names[i].s, nl), &node->node);
		rcu_read_unlock();
	}
	/* Readers are forked children: each registers itself. The parent's
	 * registration would be copied into them, so it ends here. */
	rcu_unregister_thread();
	return t;
}

void lfht_reader_init(void)
{
	rcu_register_thread();
}

__attribute__((noinline)) int lfht_lookup(struct lfht_table *t, const char *name,
					  struct procreg_entry *out)
{
	struct cds_lfht_iter iter;
	struct cds_lfht_node *node;
	struct key key;
	int err = check_name(name, &key.len);

	if (err)
		return err;
	key.name = name;
	rcu_read_lock();
	cds_lfht_lookup(t->ht, bench_hash(name, key.len), match, &key, &iter);
	node = cds_lfht_iter_get_node(&iter);
	if (node && out) {
		const struct lfht_node *n = caa_container_of(node, struct lfht_node, node);

		to_entry(&n->f, n->data, n->data + n->f.name_len + 1, out);
	}
	rcu_read_unlock();
	return node ? 0 : -ENOENT;
}

void lfht_free(struct lfht_table *t)
{
	struct cds_lfht_iter iter;
	struct lfht_node *n, **all = NULL;
	size_t k = 0, cap = 0;

	if (!t)
		return;
	/* No reader is left (the children are gone): unlink every node, then
	 * free them all. */
	rcu_register_thread();
	rcu_read_lock();
	cds_lfht_for_each_entry(t->ht, &iter, n, node) {
		if (k == cap) {
			cap = cap ? 2 * cap : 1024;
			all = realloc(all, cap * sizeof(*all));
			if (!all)
				abort();
		}
		all[k++] = n;
	}
	for (size_t i = 0; i < k; i++)
		cds_lfht_del(t->ht, &all[i]->node);
	rcu_read_unlock();
	rcu_unregister_thread();
	cds_lfht_destroy(t->ht, NULL);
	for (size_t i = 0; i < k; i++)
		free(all[i]);
	free(all);
	free(t);
}
