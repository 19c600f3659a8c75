/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * hashmap.c - private open-addressing maps, u64 -> u64, for the daemon's
 * own indexes (never in shared memory): processes by pid, counts by uid,
 * the records a peer has confirmed by offset.
 *
 * Linear probing with deletion by backward shift (Knuth's Algorithm R):
 * a removal moves the entries after it back into the hole, so the map
 * never holds a tombstone. With tombstones, a map churned by insertions
 * and removals of many keys fills up with them between rebuilds, and a
 * search for a key that is not there walks long runs of them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define K_EMPTY 0

/* Keys 0 and 1 are refused: 0 marks an empty slot, and callers' keys are
 * offset by 2. */
#define KEY_MIN 2

static size_t map_slot(const struct pr_u64map *m, uint64_t key)
{
	return (size_t)(pr_mix(key) & (m->cap - 1));
}

/* Out of line: inlined, it had every put save six registers. */
static __attribute__((noinline)) int map_grow(struct pr_u64map *m)
{
	size_t cap = m->cap ? m->cap : 64;
	struct pr_u64map n = { 0 };

	while ((m->used + 1) * 2 > cap)
		cap *= 2;
	n.kv = calloc(cap, sizeof(*n.kv));
	if (!n.kv)
		return -ENOMEM;
	n.cap = cap;
	for (size_t i = 0; i < m->cap; i++) {
		size_t p;

		if (m->kv[i].key < KEY_MIN)
			continue;
		for (p = map_slot(&n, m->kv[i].key); n.kv[p].key != K_EMPTY;
		     p = (p + 1) & (cap - 1))
			;
		n.kv[p] = m->kv[i];
		n.used++;
	}
	free(m->kv);
	*m = n;
	return 0;
}

/* The reserved keys are the slot markers: compared as keys they would
 * "find" an empty slot. The maps are small and asked for one key many
 * times in a row (a uid's counts, on every registration and removal): a
 * find tries the slot the last ref or put took first. A guess only,
 * checked by its key: entries move, and the slot may hold another key or
 * none. */
static size_t map_find(const struct pr_u64map *m, uint64_t key)
{
	if (!m->cap || key < KEY_MIN)
		return SIZE_MAX;
	if (m->kv[m->hint].key == key)
		return m->hint;
	for (size_t p = map_slot(m, key), n = 0; n < m->cap;
	     n++, p = (p + 1) & (m->cap - 1)) {
		if (m->kv[p].key == key)
			return p;
		if (m->kv[p].key == K_EMPTY)
			return SIZE_MAX;
	}
	return SIZE_MAX;
}

int procreg__u64map_put(struct pr_u64map *m, uint64_t key, uint64_t val)
{
	size_t p;

	if (key < KEY_MIN)
		return -EINVAL;
	if ((m->used + 1) * 4 > m->cap * 3) {
		int err = map_grow(m);

		if (err)
			return err;
	}
	for (p = map_slot(m, key); m->kv[p].key != K_EMPTY; p = (p + 1) & (m->cap - 1)) {
		if (m->kv[p].key == key) {
			m->kv[p].val = val;
			return 0;
		}
	}
	m->kv[p].key = key;
	m->kv[p].val = val;
	m->used++;
	m->hint = p;
	return 0;
}

int procreg__u64map_get(const struct pr_u64map *m, uint64_t key, uint64_t *val)
{
	size_t p = map_find(m, key);

	if (p == SIZE_MAX)
		return -ENOENT;
	*val = m->kv[p].val;
	return 0;
}

uint64_t *procreg__u64map_ref(struct pr_u64map *m, uint64_t key)
{
	size_t p = map_find(m, key);

	if (p == SIZE_MAX)
		return NULL;
	m->hint = p;
	return &m->kv[p].val;
}

/* Close the hole: an entry further along the run moves back into it if
 * its home is not between the hole and where it sits (it would
 * otherwise be cut off from its home by the empty slot); the run ends
 * at an empty slot. */
static void map_remove_at(struct pr_u64map *m, size_t hole)
{
	size_t mask = m->cap - 1;

	for (size_t j = (hole + 1) & mask; m->kv[j].key != K_EMPTY; j = (j + 1) & mask) {
		size_t home = map_slot(m, m->kv[j].key);

		if (((j - home) & mask) >= ((j - hole) & mask)) {
			m->kv[hole] = m->kv[j];
			hole = j;
		}
	}
	m->kv[hole].key = K_EMPTY;
	m->used--;
}

int procreg__u64map_take(struct pr_u64map *m, uint64_t key, uint64_t *val)
{
	size_t p = map_find(m, key);

	if (p == SIZE_MAX)
		return -ENOENT;
	*val = m->kv[p].val;
	map_remove_at(m, p);
	return 0;
}

int procreg__u64map_del(struct pr_u64map *m, uint64_t key)
{
	uint64_t val;

	return procreg__u64map_take(m, key, &val);
}

void procreg__u64map_free(struct pr_u64map *m)
{
	free(m->kv);
	memset(m, 0, sizeof(*m));
}
