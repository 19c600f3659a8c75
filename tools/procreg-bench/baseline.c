/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * baseline.c - the in-process tables procreg's lookups are measured
 * against, doing the same work:
 *
 *  - oa: an open-addressing hash table in private memory, the ceiling. It
 *    is procreg's own design without what sharing costs: linear probing
 *    over 64-bit slot words (32-bit hash tag, record offset), home slot from
 *    the hash's top bits, records of the same layout packed in one arena,
 *    the same capacity as procreg's index (so the same load factor), no
 *    read-side section and no bounds checks.
 *  - lfht: liburcu's cds_lfht (RCU lock-free resizable hash table), memb
 *    flavor with inlined read-side lock (_LGPL_SOURCE), one malloc'd node
 *    per name, as a liburcu user would build it.
 *
 * Both hash names with procreg's function (bench_hash) and copy a hit out
 * into a struct procreg_entry byte for byte as procreg_lookup does
 * (procreg__record_to_entry): the same fields, the name and its NUL, the
 * metadata. Lookups are out-of-line calls, as procreg_lookup is a call
 * into the shared library.
 *
 * Tables are built before the reader processes fork, so the readers share
 * them copy-on-write and never write them.
 *
 * This file, alone of the bench, includes a private header of the library
 * (lib/layout.h, on its include path only: CMakeLists.txt): not to reach
 * into a table, which the bench reads through <procreg.h> like any user,
 * but to build its baselines from procreg's own record layout, slot words
 * and name hash, so that they differ from procreg only in what sharing
 * costs.
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

/* The record fields procreg stores and copies out. */
struct fields {
	uint64_t hash;
	uint16_t name_len;
	uint16_t meta_len;
	uint8_t kind;
	uint8_t flags;
	uint16_t node;
	uint32_t pid;
	uint32_t uid;
	uint64_t start_time;
	uint64_t registered_ns;
	uint64_t aux;
};

struct oa_rec {
	struct fields f;
	char data[];                /* name, NUL, meta */
};

_Static_assert(sizeof(struct oa_rec) == sizeof(struct pr_record), "same record header");

static void fill(struct fields *f, const char *name, size_t meta_len, pid_t pid)
{
	f->hash = bench_hash(name, strlen(name));
	f->start_time = 12345;
	f->aux = 0;
	f->registered_ns = (uint64_t)time(NULL) * 1000000000ull;
	f->pid = (uint32_t)pid;
	f->uid = (uint32_t)getuid();
	f->node = 0;
	f->name_len = (uint16_t)strlen(name);
	f->meta_len = (uint16_t)meta_len;
}

/* procreg__record_to_entry, for our records. */
static inline void to_entry(const struct fields *f, const char *data, struct procreg_entry *e)
{
	e->pid = (pid_t)f->pid;
	e->node = f->node;
	e->flags = f->flags;
	e->start_time = f->start_time;
	e->registered_ns = f->registered_ns;
	e->uid = f->uid;
	e->meta_len = f->meta_len;
	memcpy(e->name, data, f->name_len);
	e->name[f->name_len] = 0;
	if (e->meta)
		memcpy(e->meta, data + f->name_len + 1,
		       f->meta_len < e->meta_size ? f->meta_len : e->meta_size);
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

/* ---- open addressing ---------------------------------------------------- */

struct oa_table {
	uint64_t *slot;
	uint64_t mask;
	uint32_t shift;
	uint8_t *arena;             /* records, 16-byte aligned; offset 0 unused */
	size_t arena_size, arena_map, slot_bytes;
};

struct oa_table *oa_build(const struct qname *names, uint64_t n, uint64_t capacity, pid_t pid)
{
	struct oa_table *t = calloc(1, sizeof(*t));
	size_t off = PR_ALIGN;
	char meta[64];

	if (!t)
		return NULL;
	while (capacity < 2 * n || capacity < 16)
		capacity *= 2;
	t->mask = capacity - 1;
	t->shift = 64 - (uint32_t)__builtin_ctzll(capacity);
	t->slot_bytes = capacity * 8;
	t->arena_map = PR_ALIGN + n * PR_RECORD_SIZE(15, 40);
	t->slot = mmap(NULL, t->slot_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	t->arena = mmap(NULL, t->arena_map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t->slot == MAP_FAILED || t->arena == MAP_FAILED) {
		free(t);
		return NULL;
	}
	for (uint64_t i = 0; i < n; i++) {
		struct oa_rec *r = (struct oa_rec *)(t->arena + off);
		size_t ml = meta_of(meta, sizeof(meta), i);
		uint64_t p;

		fill(&r->f, names[i].s, ml, pid);
		memcpy(r->data, names[i].s, r->f.name_len + 1);
		memcpy(r->data + r->f.name_len + 1, meta, ml);
		for (p = r->f.hash >> t->shift; t->slot[p]; p = (p + 1) & t->mask)
			;
		t->slot[p] = pr_slot_word(r->f.hash, off);
		off += PR_RECORD_SIZE(r->f.name_len, ml);
	}
	t->arena_size = off;
	return t;
}

__attribute__((noinline)) int oa_lookup(struct oa_table *t, const char *name,
					struct procreg_entry *out)
{
	size_t len;
	uint64_t h, p;
	uint32_t tag;
	int err = check_name(name, &len);

	if (err)
		return err;
	h = bench_hash(name, len);
	tag = (uint32_t)(h >> 32);
	for (p = h >> t->shift;; p = (p + 1) & t->mask) {
		uint64_t w = t->slot[p];
		const struct oa_rec *r;

		if (w == 0)
			return -ENOENT;
		if (pr_slot_tag(w) != tag)
			continue;
		r = (const struct oa_rec *)(t->arena + pr_slot_off(w));
		if (r->f.hash == h && r->f.name_len == len && !memcmp(r->data, name, len)) {
			if (out)
				to_entry(&r->f, r->data, out);
			return 0;
		}
	}
}

size_t oa_bytes(const struct oa_table *t)
{
	return t->slot_bytes + t->arena_size;
}

void oa_free(struct oa_table *t)
{
	if (!t)
		return;
	munmap(t->slot, t->slot_bytes);
	munmap(t->arena, t->arena_map);
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

	return n->f.name_len == key->len && !memcmp(n->data, key->name, key->len);
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
		cds_lfht_add(t->ht, node->f.hash, &node->node);
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

		to_entry(&n->f, n->data, out);
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
