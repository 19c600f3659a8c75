/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * strindex.c - strings to values by a keyed hash, for the daemon's indexes
 * of names that other hosts choose (node names, addresses): a lookup costs
 * a hash and a probe however many strings are known, where a scan of them
 * all would let a peer that makes thousands known pay a comparison with
 * each for every frame it sends.
 *
 * Only the key (a 64-bit keyed hash of the string) is stored, with its
 * value; the caller keeps the strings and checks the one a value stands
 * for against the one it asked for. Two strings of one key, which a
 * secret seed makes unlikely and no peer can arrange on purpose, leave the
 * index partial: callers then scan what they index on a miss.
 */
#include <stdint.h>
#include <sys/random.h>
#include <time.h>

#include "internal.h"

void procreg__sidx_init(struct pr_str_index *x)
{
	struct timespec ts;

	*x = (struct pr_str_index){ .partial = false };
	/* Secret, so that no peer can choose strings of one key. Without
	 * entropy yet (early boot), the clock and the address: not secret,
	 * but then a collision costs a scan, never a wrong answer. */
	if (getrandom(&x->seed, sizeof(x->seed), GRND_NONBLOCK) == (ssize_t)sizeof(x->seed))
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	x->seed = pr_mix((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)x);
}

uint64_t procreg__sidx_key(const struct pr_str_index *x, const char *s, size_t n)
{
	uint64_t k = pr_hash(s, n, x->seed);

	return k < 2 ? k + 2 : k; /* the map's keys are >= 2 */
}

int procreg__sidx_get(const struct pr_str_index *x, const char *s, size_t n, uint64_t *v)
{
	return procreg__u64map_get(&x->map, procreg__sidx_key(x, s, n), v);
}

void procreg__sidx_put(struct pr_str_index *x, const char *s, size_t n, uint64_t v)
{
	uint64_t key = procreg__sidx_key(x, s, n), old;

	if (procreg__u64map_get(&x->map, key, &old) == 0 || procreg__u64map_put(&x->map, key, v) < 0)
		x->partial = true;
}

void procreg__sidx_del(struct pr_str_index *x, const char *s, size_t n, uint64_t v)
{
	uint64_t key = procreg__sidx_key(x, s, n), old;

	if (procreg__u64map_get(&x->map, key, &old) == 0 && old == v)
		procreg__u64map_del(&x->map, key);
}

void procreg__sidx_free(struct pr_str_index *x)
{
	procreg__u64map_free(&x->map);
}
