/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * hashmap.c - a private open-addressing map from u64 to u64, for the
 * daemon's own indexes (never in shared memory). Keys 0 and 1 are reserved
 * (empty, and deleted in maps of an older build: none is ever made now).
 *
 * Linear probing with deletion by backward shift (Knuth's Algorithm R):
 * a removal moves the entries after it back into the hole, so the map
 * never holds a tombstone. With tombstones, the daemon's map of owned
 * records, churned by registrations and removals of many names, filled up
 * with them between rebuilds, and a registration's search for a key that
 * is not there (every new name) walked long runs of them: a quarter of a
 * pipelined registration's time went there.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define K_EMPTY 0
#define K_DEL 1

static size_t slot_of(const struct pr_u64map *m, uint64_t key)
{
	return (size_t)(pr_mix(key) & (m->cap - 1));
}

static int grow(struct pr_u64map *m)
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

		if (m->kv[i].key <= K_DEL)
			continue;
		for (p = slot_of(&n, m->kv[i].key); n.kv[p].key != K_EMPTY; p = (p + 1) & (cap - 1))
			;
		n.kv[p] = m->kv[i];
		n.used++;
	}
	free(m->kv);
	*m = n;
	return 0;
}

static size_t find(const struct pr_u64map *m, uint64_t key)
{
	/* The reserved keys are the slot markers: compared as keys they
	 * would "find" an empty or deleted slot. */
	if (!m->cap || key <= K_DEL)
		return SIZE_MAX;
	for (size_t p = slot_of(m, key), n = 0; n < m->cap; n++, p = (p + 1) & (m->cap - 1)) {
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

	if (key <= K_DEL)
		return -EINVAL;
	if ((m->used + 1) * 4 > m->cap * 3) {
		int err = grow(m);

		if (err)
			return err;
	}
	for (p = slot_of(m, key); m->kv[p].key != K_EMPTY; p = (p + 1) & (m->cap - 1)) {
		if (m->kv[p].key == key) {
			m->kv[p].val = val;
			return 0;
		}
	}
	m->kv[p].key = key;
	m->kv[p].val = val;
	m->used++;
	return 0;
}

int procreg__u64map_get(const struct pr_u64map *m, uint64_t key, uint64_t *val)
{
	size_t p = find(m, key);

	if (p == SIZE_MAX)
		return -ENOENT;
	*val = m->kv[p].val;
	return 0;
}

int procreg__u64map_del(struct pr_u64map *m, uint64_t key)
{
	size_t mask = m->cap - 1, hole = find(m, key);

	if (hole == SIZE_MAX)
		return -ENOENT;
	/* Close the hole: an entry further along the run moves back into it
	 * if its home is not between the hole and where it sits (it would
	 * otherwise be cut off from its home by the empty slot); the run
	 * ends at an empty slot. */
	for (size_t j = (hole + 1) & mask; m->kv[j].key != K_EMPTY; j = (j + 1) & mask) {
		size_t home = slot_of(m, m->kv[j].key);

		if (((j - home) & mask) >= ((j - hole) & mask)) {
			m->kv[hole] = m->kv[j];
			hole = j;
		}
	}
	m->kv[hole].key = K_EMPTY;
	m->used--;
	return 0;
}

void procreg__u64map_free(struct pr_u64map *m)
{
	free(m->kv);
	memset(m, 0, sizeof(*m));
}
