/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * hashmap.c - private open-addressing maps for the daemon's own indexes
 * (never in shared memory): u64 -> u64, and u32 -> u32 in half the
 * memory, for the map of owned records, which holds an entry a name (at
 * 10^6 names, 16-byte entries were 34 bytes a name of the daemon's
 * memory). Key 0 is reserved (empty); the u64 map refuses 1 as well, its
 * callers' keys being offset by 2.
 *
 * Linear probing with deletion by backward shift (Knuth's Algorithm R):
 * a removal moves the entries after it back into the hole, so the map
 * never holds a tombstone. With tombstones, the daemon's map of owned
 * records, churned by registrations and removals of many names, filled up
 * with them between rebuilds, and a registration's search for a key that
 * is not there (every new name) walked long runs of them: a quarter of a
 * pipelined registration's time went there.
 *
 * Both maps are one code, instantiated by MAP_DEFINE for each entry type.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define K_EMPTY 0

#define MAP_DEFINE(pfx, map_t, key_t, val_t, KEY_MIN, HINT)                                         \
	static size_t pfx##_slot(const map_t *m, key_t key)                                   \
	{                                                                                     \
		return (size_t)(pr_mix(key) & (m->cap - 1));                                  \
	}                                                                                     \
                                                                                              \
	/* Out of line: inlined, it had every put save six registers. */                      \
	static __attribute__((noinline)) int pfx##_grow(map_t *m)                             \
	{                                                                                     \
		size_t cap = m->cap ? m->cap : 64;                                            \
		map_t n = { 0 };                                                              \
                                                                                              \
		while ((m->used + 1) * 2 > cap)                                               \
			cap *= 2;                                                             \
		n.kv = calloc(cap, sizeof(*n.kv));                                            \
		if (!n.kv)                                                                    \
			return -ENOMEM;                                                       \
		n.cap = cap;                                                                  \
		for (size_t i = 0; i < m->cap; i++) {                                         \
			size_t p;                                                             \
                                                                                              \
			if (m->kv[i].key < (KEY_MIN))                                         \
				continue;                                                     \
			for (p = pfx##_slot(&n, m->kv[i].key); n.kv[p].key != K_EMPTY;        \
			     p = (p + 1) & (cap - 1))                                         \
				;                                                             \
			n.kv[p] = m->kv[i];                                                   \
			n.used++;                                                             \
		}                                                                             \
		free(m->kv);                                                                  \
		*m = n;                                                                       \
		return 0;                                                                     \
	}                                                                                     \
                                                                                              \
	/* The reserved keys are the slot markers: compared as keys they would                \
	 * "find" an empty slot. */                                                           \
	static size_t pfx##_find(const map_t *m, key_t key)                                   \
	{                                                                                     \
		if (!m->cap || key < (KEY_MIN))                                               \
			return SIZE_MAX;                                                      \
		if (HINT && m->kv[m->hint].key == key)                                        \
			return m->hint;                                                       \
		for (size_t p = pfx##_slot(m, key), n = 0; n < m->cap;                        \
		     n++, p = (p + 1) & (m->cap - 1)) {                                       \
			if (m->kv[p].key == key)                                              \
				return p;                                                     \
			if (m->kv[p].key == K_EMPTY)                                          \
				return SIZE_MAX;                                              \
		}                                                                             \
		return SIZE_MAX;                                                              \
	}                                                                                     \
                                                                                              \
	int procreg__##pfx##_put(map_t *m, key_t key, val_t val)                              \
	{                                                                                     \
		size_t p;                                                                     \
                                                                                              \
		if (key < (KEY_MIN))                                                          \
			return -EINVAL;                                                       \
		if ((m->used + 1) * 4 > m->cap * 3) {                                         \
			int err = pfx##_grow(m);                                              \
                                                                                              \
			if (err)                                                              \
				return err;                                                   \
		}                                                                             \
		for (p = pfx##_slot(m, key); m->kv[p].key != K_EMPTY; p = (p + 1) & (m->cap - 1)) { \
			if (m->kv[p].key == key) {                                            \
				m->kv[p].val = val;                                           \
				return 0;                                                     \
			}                                                                     \
		}                                                                             \
		m->kv[p].key = key;                                                           \
		m->kv[p].val = val;                                                           \
		m->used++;                                                                    \
		if (HINT)                                                                     \
			m->hint = p;                                                          \
		return 0;                                                                     \
	}                                                                                     \
                                                                                              \
	int procreg__##pfx##_get(const map_t *m, key_t key, val_t *val)                       \
	{                                                                                     \
		size_t p = pfx##_find(m, key);                                                \
                                                                                              \
		if (p == SIZE_MAX)                                                            \
			return -ENOENT;                                                       \
		*val = m->kv[p].val;                                                          \
		return 0;                                                                     \
	}                                                                                     \
                                                                                              \
	val_t *procreg__##pfx##_ref(map_t *m, key_t key)                                      \
	{                                                                                     \
		size_t p = pfx##_find(m, key);                                                \
                                                                                              \
		if (p == SIZE_MAX)                                                            \
			return NULL;                                                          \
		if (HINT)                                                                     \
			m->hint = p;                                                          \
		return &m->kv[p].val;                                                         \
	}                                                                                     \
                                                                                              \
	/* Close the hole: an entry further along the run moves back into it if               \
	 * its home is not between the hole and where it sits (it would                       \
	 * otherwise be cut off from its home by the empty slot); the run ends                \
	 * at an empty slot. */                                                               \
	static void pfx##_remove_at(map_t *m, size_t hole)                                    \
	{                                                                                     \
		size_t mask = m->cap - 1;                                                     \
                                                                                              \
		for (size_t j = (hole + 1) & mask; m->kv[j].key != K_EMPTY; j = (j + 1) & mask) { \
			size_t home = pfx##_slot(m, m->kv[j].key);                            \
                                                                                              \
			if (((j - home) & mask) >= ((j - hole) & mask)) {                     \
				m->kv[hole] = m->kv[j];                                       \
				hole = j;                                                     \
			}                                                                     \
		}                                                                             \
		m->kv[hole].key = K_EMPTY;                                                    \
		m->used--;                                                                    \
	}                                                                                     \
                                                                                              \
	int procreg__##pfx##_take(map_t *m, key_t key, val_t *val)                            \
	{                                                                                     \
		size_t p = pfx##_find(m, key);                                                \
                                                                                              \
		if (p == SIZE_MAX)                                                            \
			return -ENOENT;                                                       \
		*val = m->kv[p].val;                                                          \
		pfx##_remove_at(m, p);                                                        \
		return 0;                                                                     \
	}                                                                                     \
                                                                                              \
	int procreg__##pfx##_del(map_t *m, key_t key)                                         \
	{                                                                                     \
		val_t val;                                                                    \
                                                                                              \
		return procreg__##pfx##_take(m, key, &val);                                   \
	}                                                                                     \
                                                                                              \
	void procreg__##pfx##_free(map_t *m)                                                  \
	{                                                                                     \
		free(m->kv);                                                                  \
		memset(m, 0, sizeof(*m));                                                     \
	}

/* The u64 maps are small and asked for one key many times in a row (a
 * uid's counts, on every registration and removal): a find tries the
 * slot the last ref or put took first. A guess only, checked by its key:
 * entries move, and the slot may hold another key or none. The owned
 * map is asked for another key every time: no hint. */
MAP_DEFINE(u64map, struct pr_u64map, uint64_t, uint64_t, 2, 1)
MAP_DEFINE(u32map, struct pr_u32map, uint32_t, uint32_t, 1, 0)
