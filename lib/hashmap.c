/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * hashmap.c - a private open-addressing map from u64 to u64, for the
 * daemon's own indexes (never in shared memory). Keys 0 and 1 are reserved
 * (empty and deleted).
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
	n.keys = calloc(cap, sizeof(*n.keys));
	n.vals = malloc(cap * sizeof(*n.vals));
	if (!n.keys || !n.vals) {
		free(n.keys);
		free(n.vals);
		return -ENOMEM;
	}
	n.cap = cap;
	for (size_t i = 0; i < m->cap; i++) {
		size_t p;

		if (m->keys[i] <= K_DEL)
			continue;
		for (p = slot_of(&n, m->keys[i]); n.keys[p] != K_EMPTY; p = (p + 1) & (cap - 1))
			;
		n.keys[p] = m->keys[i];
		n.vals[p] = m->vals[i];
		n.used++;
	}
	free(m->keys);
	free(m->vals);
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
		if (m->keys[p] == key)
			return p;
		if (m->keys[p] == K_EMPTY)
			return SIZE_MAX;
	}
	return SIZE_MAX;
}

int procreg__u64map_put(struct pr_u64map *m, uint64_t key, uint64_t val)
{
	size_t p = find(m, key);

	if (key <= K_DEL)
		return -EINVAL;
	if (p != SIZE_MAX) {
		m->vals[p] = val;
		return 0;
	}
	if ((m->used + m->tombs + 1) * 4 > m->cap * 3) {
		int err = grow(m);

		if (err)
			return err;
		m->tombs = 0;
	}
	for (p = slot_of(m, key); m->keys[p] > K_DEL; p = (p + 1) & (m->cap - 1))
		;
	if (m->keys[p] == K_DEL)
		m->tombs--;
	m->keys[p] = key;
	m->vals[p] = val;
	m->used++;
	return 0;
}

int procreg__u64map_get(const struct pr_u64map *m, uint64_t key, uint64_t *val)
{
	size_t p = find(m, key);

	if (p == SIZE_MAX)
		return -ENOENT;
	*val = m->vals[p];
	return 0;
}

int procreg__u64map_del(struct pr_u64map *m, uint64_t key)
{
	size_t p = find(m, key);

	if (p == SIZE_MAX)
		return -ENOENT;
	m->keys[p] = K_DEL;
	m->used--;
	m->tombs++;
	return 0;
}

void procreg__u64map_free(struct pr_u64map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}
