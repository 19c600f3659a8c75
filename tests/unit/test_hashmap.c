/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_hashmap.c - the daemon's private maps (lib/hashmap.c): u64 -> u64.
 *
 * Every test checks the map against a plain model (an array indexed by a
 * key number), so a lost, duplicated or stale entry shows up as a
 * difference, not just as a crash.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "internal.h"

/* Keys that spread badly on purpose (multiples of a power of two, as
 * record offsets are) and keys from a PRNG: both must work. */
static uint64_t key_of(uint64_t i)
{
	return 2 + i * 4096;
}

static void test_put_get_del(void **state)
{
	struct pr_u64map m = { 0 };
	uint64_t v = 0;

	(void)state;
	/* An empty (never allocated) map answers, and does not allocate. */
	assert_int_equal(procreg__u64map_get(&m, 42, &v), -ENOENT);
	assert_int_equal(procreg__u64map_del(&m, 42), -ENOENT);
	assert_int_equal(m.cap, 0);

	assert_int_equal(procreg__u64map_put(&m, 42, 7), 0);
	assert_int_equal(procreg__u64map_put(&m, 2, 0), 0); /* smallest legal key, zero value */
	assert_int_equal(procreg__u64map_put(&m, UINT64_MAX, UINT64_MAX), 0);
	assert_int_equal(m.used, 3);

	assert_int_equal(procreg__u64map_get(&m, 42, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(procreg__u64map_get(&m, 2, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(procreg__u64map_get(&m, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
	v = 99;
	assert_int_equal(procreg__u64map_get(&m, 43, &v), -ENOENT);
	assert_int_equal(v, 99); /* untouched on a miss */

	assert_int_equal(procreg__u64map_del(&m, 42), 0);
	assert_int_equal(procreg__u64map_get(&m, 42, &v), -ENOENT);
	assert_int_equal(procreg__u64map_del(&m, 42), -ENOENT);
	assert_int_equal(m.used, 2);
	/* The others survive the delete. */
	assert_int_equal(procreg__u64map_get(&m, 2, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(procreg__u64map_get(&m, UINT64_MAX, &v), 0);

	/* Reinsert after delete. */
	assert_int_equal(procreg__u64map_put(&m, 42, 8), 0);
	assert_int_equal(procreg__u64map_get(&m, 42, &v), 0);
	assert_int_equal(v, 8);
	assert_int_equal(m.used, 3);

	/* A value changed in place, and none for an absent key. */
	assert_null(procreg__u64map_ref(&m, 43));
	assert_null(procreg__u64map_ref(&m, 1));
	assert_non_null(procreg__u64map_ref(&m, 42));
	*procreg__u64map_ref(&m, 42) = 9;
	assert_int_equal(procreg__u64map_get(&m, 42, &v), 0);
	assert_int_equal(v, 9);
	assert_int_equal(m.used, 3);

	procreg__u64map_free(&m);
	assert_null(m.kv);
	assert_int_equal(m.cap, 0);
	assert_int_equal(m.used, 0);
	/* A freed map is an empty map again. */
	assert_int_equal(procreg__u64map_get(&m, 2, &v), -ENOENT);
	assert_int_equal(procreg__u64map_put(&m, 5, 6), 0);
	assert_int_equal(procreg__u64map_get(&m, 5, &v), 0);
	assert_int_equal(v, 6);
	procreg__u64map_free(&m);
}

static void test_overwrite(void **state)
{
	struct pr_u64map m = { 0 };
	uint64_t v;

	(void)state;
	for (uint64_t i = 0; i < 1000; i++)
		assert_int_equal(procreg__u64map_put(&m, key_of(i), i), 0);
	for (uint64_t i = 0; i < 1000; i++)
		assert_int_equal(procreg__u64map_put(&m, key_of(i), i * 3 + 1), 0);
	/* Overwriting adds nothing. */
	assert_int_equal(m.used, 1000);
	for (uint64_t i = 0; i < 1000; i++) {
		assert_int_equal(procreg__u64map_get(&m, key_of(i), &v), 0);
		assert_true(v == i * 3 + 1);
	}
	/* Overwrite after a delete of a neighbour in the same probe run. */
	assert_int_equal(procreg__u64map_del(&m, key_of(500)), 0);
	assert_int_equal(procreg__u64map_put(&m, key_of(501), 77), 0);
	assert_int_equal(m.used, 999);
	assert_int_equal(procreg__u64map_get(&m, key_of(501), &v), 0);
	assert_int_equal(v, 77);
	procreg__u64map_free(&m);
}

static void test_reserved_keys(void **state)
{
	struct pr_u64map m = { 0 };
	uint64_t v;

	(void)state;
	/* On an empty map. */
	assert_int_equal(procreg__u64map_put(&m, 0, 1), -EINVAL);
	assert_int_equal(procreg__u64map_put(&m, 1, 1), -EINVAL);
	assert_int_equal(m.used, 0);

	/* With content, and after a removal. */
	for (uint64_t i = 0; i < 10; i++)
		assert_int_equal(procreg__u64map_put(&m, key_of(i), i), 0);
	assert_int_equal(procreg__u64map_del(&m, key_of(3)), 0);
	assert_int_equal(m.used, 9);

	assert_int_equal(procreg__u64map_put(&m, 0, 1), -EINVAL);
	assert_int_equal(procreg__u64map_put(&m, 1, 1), -EINVAL);
	/* The reserved keys are the slot markers: looking them up or
	 * deleting them must not find a marker slot and act on it. */
	assert_true(procreg__u64map_get(&m, 0, &v) < 0);
	assert_true(procreg__u64map_get(&m, 1, &v) < 0);
	assert_true(procreg__u64map_del(&m, 0) < 0);
	assert_true(procreg__u64map_del(&m, 1) < 0);
	assert_int_equal(m.used, 9);
	for (uint64_t i = 0; i < 10; i++) {
		int r = procreg__u64map_get(&m, key_of(i), &v);

		if (i == 3) {
			assert_int_equal(r, -ENOENT);
		} else {
			assert_int_equal(r, 0);
			assert_true(v == i);
		}
	}
	procreg__u64map_free(&m);
}

#define BIG 100000

static void test_growth(void **state)
{
	struct pr_u64map m = { 0 };
	uint64_t v, seed = 0x1234567;
	uint64_t *keys = malloc(BIG * sizeof(*keys));
	size_t last_cap = 0, grows = 0;

	(void)state;
	assert_non_null(keys);
	/* Distinct random keys: high bit set on odd i, structured on even,
	 * all >= 2 and distinct (the low bit encodes the parity of i). */
	for (uint64_t i = 0; i < BIG; i++)
		keys[i] = (i & 1) ? ((th_xorshift(&seed) << 20) | (i << 1) | 1) | (1ull << 63)
				  : key_of(i);
	for (uint64_t i = 0; i < BIG; i++) {
		assert_int_equal(procreg__u64map_put(&m, keys[i], i ^ 0x5555), 0);
		if (m.cap != last_cap) {
			grows++;
			last_cap = m.cap;
		}
		/* The load factor bound that keeps probes finite holds. */
		assert_true(m.used * 4 <= m.cap * 3);
	}
	assert_int_equal(m.used, BIG);
	assert_true(m.cap >= BIG);
	assert_true(grows >= 10); /* 64 .. 256K */
	for (uint64_t i = 0; i < BIG; i++) {
		assert_int_equal(procreg__u64map_get(&m, keys[i], &v), 0);
		assert_true(v == (i ^ 0x5555));
	}
	/* Absent keys stay absent. */
	for (uint64_t i = 0; i < BIG; i += 7)
		assert_int_equal(procreg__u64map_get(&m, key_of(i) + 16, &v), -ENOENT);
	free(keys);
	procreg__u64map_free(&m);
}

/* Random operations against a model: present[i] says whether key_of(i)
 * (or its random twin) is in, val[i] what it maps to. Deletes leave
 * tombstones; the map must shed them by rehashing without losing
 * anything, and must not grow without bound while the live count stays
 * small. */
#define UNIVERSE 5000

/* Either map, through one set of calls: the churn below runs on both. */
struct map_ops {
	int (*put)(void *m, uint64_t key, uint64_t val);
	int (*get)(void *m, uint64_t key, uint64_t *val);
	int (*del)(void *m, uint64_t key);
	int (*take)(void *m, uint64_t key, uint64_t *val);
	/* The key in slot I (0: empty), and the map's counts. */
	uint64_t (*slot_key)(void *m, size_t i);
	void (*counts)(void *m, size_t *used, size_t *cap);
	void (*free)(void *m);
	uint64_t val_mask;
};

static int put64(void *m, uint64_t k, uint64_t v) { return procreg__u64map_put(m, k, v); }
static int get64(void *m, uint64_t k, uint64_t *v) { return procreg__u64map_get(m, k, v); }
static int del64(void *m, uint64_t k) { return procreg__u64map_del(m, k); }
static int take64(void *m, uint64_t k, uint64_t *v) { return procreg__u64map_take(m, k, v); }
static uint64_t key64(void *m, size_t i) { return ((struct pr_u64map *)m)->kv[i].key; }
static void counts64(void *m, size_t *used, size_t *cap)
{
	*used = ((struct pr_u64map *)m)->used;
	*cap = ((struct pr_u64map *)m)->cap;
}
static void free64(void *m) { procreg__u64map_free(m); }

static const struct map_ops ops64 = { put64, get64, del64, take64, key64, counts64, free64, UINT64_MAX };

/* The shape a removal by backward shift must keep: no deleted-slot
 * marker anywhere, and every entry reachable from its home slot without
 * crossing an empty one (a probe stops at the first empty slot). */
static void check_runs(const struct map_ops *o, void *m)
{
	size_t live = 0, used, cap;

	o->counts(m, &used, &cap);
	for (size_t i = 0; i < cap; i++) {
		uint64_t k = o->slot_key(m, i);

		assert_true(k != 1);
		if (k == 0)
			continue;
		live++;
		for (size_t p = (size_t)(pr_mix(k) & (cap - 1)); p != i; p = (p + 1) & (cap - 1))
			assert_true(o->slot_key(m, p) != 0);
	}
	assert_int_equal(live, used);
}

static void churn(const struct map_ops *o, void *m)
{
	uint64_t seed = 0xdecafbad, v;
	uint64_t *val = calloc(UNIVERSE, sizeof(*val));
	bool *present = calloc(UNIVERSE, sizeof(*present));
	size_t live = 0, max_cap = 0, used, cap;

	assert_non_null(val);
	assert_non_null(present);
	for (int round = 0; round < 400000; round++) {
		uint64_t r = th_xorshift(&seed);
		uint64_t i = r % UNIVERSE;
		/* Keep the map between roughly a third and two thirds full of
		 * the universe so both inserts and deletes stay frequent. */
		int ins = (r >> 32) % 100 < (live < UNIVERSE / 3 ? 70 : live > 2 * UNIVERSE / 3 ? 30 : 50);

		if (ins) {
			uint64_t nv = (r >> 8) & o->val_mask;

			assert_int_equal(o->put(m, key_of(i), nv), 0);
			if (!present[i])
				live++;
			present[i] = true;
			val[i] = nv;
		} else if ((r >> 40) & 1) {
			int e = o->del(m, key_of(i));

			assert_int_equal(e, present[i] ? 0 : -ENOENT);
			if (present[i])
				live--;
			present[i] = false;
		} else {
			/* Half the removals take the value with the entry. */
			int e = o->take(m, key_of(i), &v);

			assert_int_equal(e, present[i] ? 0 : -ENOENT);
			if (present[i])
				assert_true(v == val[i]);
			if (present[i])
				live--;
			present[i] = false;
		}
		o->counts(m, &used, &cap);
		assert_int_equal(used, live);
		assert_true(used * 4 <= cap * 3);
		if (cap > max_cap)
			max_cap = cap;
		if (round % 5000 == 0) {
			check_runs(o, m);
			for (uint64_t k = 0; k < UNIVERSE; k++) {
				int e = o->get(m, key_of(k), &v);

				assert_int_equal(e, present[k] ? 0 : -ENOENT);
				if (present[k])
					assert_true(v == val[k]);
			}
		}
	}
	for (uint64_t k = 0; k < UNIVERSE; k++) {
		int e = o->get(m, key_of(k), &v);

		assert_int_equal(e, present[k] ? 0 : -ENOENT);
		if (present[k])
			assert_true(v == val[k]);
	}
	/* The map did not grow for ever: at most a few times the universe. */
	assert_true(max_cap <= 4 * 8192);

	/* Delete everything, then everything is absent and reinsertable. */
	for (uint64_t k = 0; k < UNIVERSE; k++)
		if (present[k])
			assert_int_equal(o->del(m, key_of(k)), 0);
	o->counts(m, &used, &cap);
	assert_int_equal(used, 0);
	for (uint64_t k = 0; k < UNIVERSE; k++)
		assert_int_equal(o->get(m, key_of(k), &v), -ENOENT);
	for (uint64_t k = 0; k < UNIVERSE; k++)
		assert_int_equal(o->put(m, key_of(k), k), 0);
	for (uint64_t k = 0; k < UNIVERSE; k++) {
		assert_int_equal(o->get(m, key_of(k), &v), 0);
		assert_true(v == k);
	}
	free(val);
	free(present);
	o->free(m);
}

static void test_churn(void **state)
{
	struct pr_u64map m = { 0 };

	(void)state;
	churn(&ops64, &m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_get_del),
		cmocka_unit_test(test_overwrite),
		cmocka_unit_test(test_reserved_keys),
		cmocka_unit_test(test_growth),
		cmocka_unit_test(test_churn),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
