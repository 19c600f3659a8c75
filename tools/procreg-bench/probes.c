/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * probes.c - procreg-bench probes: what the USDT probes cost a lookup when
 * no tracer is attached.
 *
 * Two builds of the library side by side in one process: libprocreg.so as
 * linked (probes compiled in, PROCREG_USDT=ON) and libprocreg_noprobes.so
 * (the same sources with PROCREG_USDT off), loaded with dlopen; it is
 * linked -Bsymbolic, so its calls stay inside it. Each has its own handle
 * on the same table. Rounds alternate between them on one pinned CPU, the
 * same queries in the same order; the median time per lookup of each is
 * kept and the figure is their ratio.
 *
 * --fixed N does N lookups with each build and no timing, for an
 * instruction count under valgrind --tool=callgrind (the noisy-machine
 * check): callgrind_annotate --inclusive=yes then gives the instructions
 * of fixed_with_probes and fixed_without_probes, N lookups each.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef procreg_t *(*open_fn)(const struct procreg_opts *);
typedef int (*lookup_fn)(procreg_t *, const char *, struct procreg_entry *);
typedef void (*close_fn)(procreg_t *);

struct build {
	const char *label;
	procreg_t *reg;
	lookup_fn lookup;
	double ns[64];          /* one per round */
};

/* Time lookups of QUERIES (cycled) for about MS milliseconds: ns each. */
static double timed(struct build *b, const struct qname *q, uint64_t qmask, int ms,
		    uint64_t *sink)
{
	unsigned char meta[PROCREG_META_MAX];
	PROCREG_OPTS(procreg_entry, e, .meta = meta, .meta_size = sizeof(meta));
	uint64_t t0 = pr_mono_ns(), end = t0 + (uint64_t)ms * 1000000, n = 0, t1;

	do {
		for (int k = 0; k < 1024; k++, n++)
			if (b->lookup(b->reg, q[n & qmask].s, &e) == 0)
				*sink += (uint64_t)e.pid;
		t1 = pr_mono_ns();
	} while (t1 < end);
	return (double)(t1 - t0) / (double)n;
}

static inline int fixed(struct build *b, const struct qname *q, uint64_t qmask, uint64_t n)
{
	unsigned char meta[PROCREG_META_MAX];
	PROCREG_OPTS(procreg_entry, e, .meta = meta, .meta_size = sizeof(meta));
	int bad = 0;

	for (uint64_t i = 0; i < n; i++)
		bad |= b->lookup(b->reg, q[i & qmask].s, &e) != 0;
	return bad;
}

/* One function per build, so that callgrind_annotate --inclusive=yes
 * gives each build's instructions on a line of its own (noipa: GCC would
 * merge the two identical bodies). */
#ifdef __clang__
#define SEPARATE __attribute__((noinline))
#else
#define SEPARATE __attribute__((noipa))
#endif
static SEPARATE int fixed_with_probes(struct build *b, const struct qname *q, uint64_t qmask,
				      uint64_t n)
{
	return fixed(b, q, qmask, n);
}

static SEPARATE int fixed_without_probes(struct build *b, const struct qname *q, uint64_t qmask,
					 uint64_t n)
{
	return fixed(b, q, qmask, n);
}

int cmd_probes(void)
{
	const uint64_t n = bo.nnames ? bo.names_list[0] : (bo.quick ? 1000 : 10000);
	const uint64_t qn = 1u << 16;
	char deflib[PATH_MAX];
	const char *lib = bo.noprobes_lib ? bo.noprobes_lib : deflib;
	struct build b[2] = { { .label = "probes compiled in, not attached" },
			      { .label = "probes compiled out" } };
	struct daemon_proc d;
	char maxn[32];
	const char *args[] = { "--max-names-per-proc", maxn, NULL };
	struct qname *names = NULL;
	uint64_t seed = 7, sink = 0;
	void *h = NULL;
	open_fn o2;
	close_fn c2;
	int rc = 2, rounds = bo.rounds < 3 ? (bo.quick ? 2 : 7) : bo.rounds;

	if (rounds > 64)
		rounds = 64;
	/* Beside procreg-bench, in the build tree as installed. */
	snprintf(deflib, sizeof(deflib), "%s/libprocreg_noprobes.so", bench_self_dir());
	h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "procreg-bench: %s\n", dlerror());
		return 2;
	}
	o2 = (open_fn)dlsym(h, "procreg_open");
	b[1].lookup = (lookup_fn)dlsym(h, "procreg_lookup");
	c2 = (close_fn)dlsym(h, "procreg_close");
	if (!o2 || !b[1].lookup || !c2) {
		fprintf(stderr, "procreg-bench: %s: not a libprocreg\n", lib);
		goto out_dl;
	}
	b[0].lookup = procreg_lookup;

	snprintf(maxn, sizeof(maxn), "%llu", (unsigned long long)(n + 1024));
	if (daemon_start(&d, BENCH_SCOPE, args) < 0)
		goto out_dl;
	b[0].reg = bench_open(BENCH_SCOPE);
	{
		PROCREG_OPTS(procreg_opts, ro, .dir = env_dir(), .scope = BENCH_SCOPE);

		b[1].reg = o2(&ro);
	}
	names = calloc(qn, sizeof(*names));
	if (!b[0].reg || !b[1].reg || !names) {
		fprintf(stderr, "procreg-bench: open: %s\n", strerror(errno));
		goto out;
	}
	if (register_range(b[0].reg, "svc", 0, n, false) != (int64_t)n) {
		fprintf(stderr, "procreg-bench: cannot register %llu names\n", (unsigned long long)n);
		goto out;
	}
	for (uint64_t i = 0; i < qn; i++)
		name_of(&names[i], "svc", rng_next(&seed) % n);
	pin(0, cpus[0]);

	if (bo.fixed) {
		if (fixed_with_probes(&b[0], names, qn - 1, bo.fixed) ||
		    fixed_without_probes(&b[1], names, qn - 1, bo.fixed)) {
			fprintf(stderr, "procreg-bench: a lookup failed\n");
			goto out;
		}
		hprintf("procreg-bench probes: %llu lookups with each build (for callgrind)\n",
			(unsigned long long)bo.fixed);
		j_int("fixed", bo.fixed);
		rc = 0;
		goto out;
	}

	/* Warm both, then alternate which goes first. */
	timed(&b[0], names, qn - 1, 20, &sink);
	timed(&b[1], names, qn - 1, 20, &sink);
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < 2; k++) {
			struct build *x = &b[(k + r) & 1];

			x->ns[r] = timed(x, names, qn - 1, bo.duration_ms, &sink);
		}
	{
		double with = median(b[0].ns, rounds), without = median(b[1].ns, rounds);
		double ratio = with / without;

		hprintf("procreg-bench probes: %s names, %d rounds of %d ms, CPU %d, lookups of "
			"existing names\n", fmt_count(n), rounds, bo.duration_ms, cpus[0]);
		hprintf("  %-34s %7.2f ns/lookup\n", b[0].label, with);
		hprintf("  %-34s %7.2f ns/lookup   (%s)\n", b[1].label, without, lib);
		hprintf("  ratio (compiled in / compiled out): %.4f, %+.2f%%\n", ratio,
			(ratio - 1) * 100);
		j_int("names", n);
		j_int("rounds", (uint64_t)rounds);
		j_num("ns_probes", with);
		j_num("ns_noprobes", without);
		j_num("ratio", ratio);
		j_int("sink", sink & 1);
		target("lookup with probes compiled in, not attached / compiled out", ratio, "<=",
		       1.02, "x");
		targets_report();
	}
	rc = 0;
out:
	free(names);
	if (b[1].reg)
		c2(b[1].reg);
	procreg_close(b[0].reg);
	daemon_stop(&d);
out_dl:
	dlclose(h);
	return rc;
}
