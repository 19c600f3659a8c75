/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * lookup.c - procreg-bench lookup [--under-write-load]
 *
 * Lookups of registered names (and, with --miss-rate, of absent ones) from
 * 1..N reader processes, over tables of each --names size, beside three
 * in-process tables holding the same names (baseline.c): "inline" (the
 * key and the entry in a one-line slot); "oa", procreg's own design in
 * private memory (the same work as procreg, without what sharing costs);
 * liburcu's cds_lfht. The headline ratio is taken against the faster of
 * inline and oa in each figure, the strongest measured, whichever it is
 * on the machine at hand: inline's hit reads one line, entry and all;
 * oa's short name's presence test reads one 16-byte slot, four to a line
 * where inline has one, and its copy-out reads the slot and a record.
 * And procreg_lookup_many(), BULK names a call, beside them: a bulk
 * lookup should beat the strongest's one-at-a-time rate in a table too
 * big for the caches. --presence looks up with out == NULL.
 *
 * HOW A FIGURE IS MEASURED. For one implementation and one reader count,
 * the parent forks the readers, each pinned to its CPU. A reader opens
 * what it reads (procreg: its own handle; lfht: its RCU registration),
 * looks every name up once (warming caches and page tables; every name
 * must be found), says it is ready, and goes on looking up until the
 * parent opens the timed window; it then counts lookups until the window
 * closes, checking the shared phase word every 256 lookups, and times
 * itself: the CPU time it had in the window (CLOCK_THREAD_CPUTIME_ID), so
 * that the figure is what a lookup costs, not how much of the window
 * other work on the machine (a kernel thread waking on the reader's CPU)
 * left it; the share of the window it had is reported beside, and a
 * lookup involves no other process (the daemon is idle, and checked to
 * be, before the first figure). Queries come from one shuffled buffer of fixed-width names, the
 * same for every implementation, each reader starting at its own offset;
 * every result is consumed (found count and a checksum of the entry
 * copied out). A figure is the median of --rounds measurements; the order
 * of the implementations rotates from round to round.
 *
 * Reported per reader count: ns of CPU time per lookup (per reader) of each, the least share of
 * its window a reader ran, and
 * procreg's time as a multiple of each baseline's. A ratio is taken per
 * round, between figures measured back to back, and the median of the
 * rounds' ratios is reported with their range (min-max): on a shared,
 * noisy machine a ratio of neighbours holds better than either figure.
 * "paired" is procreg and inline again, in one reader taking turns of
 * 4,096 lookups, each turn timed: the ratio of the two comes out of one
 * window instead of two taken apart.
 * The scaling from 1 to N readers of each implementation is reported too,
 * per round: on a machine whose cores are not equal, procreg's scaling
 * means something only beside the in-process table's (scaling_vs_inline),
 * and the target asks it of every round, not of the median.
 *
 * --under-write-load: each figure is measured idle and again while a
 * writer process churns registrations through procreg_batch as fast as
 * the daemon takes them. The writer and the daemon share the last CPU; the
 * readers get the others (1..ncpus-1 readers), so the figure shows what
 * the writes cost the readers through memory, not through CPU time. The
 * in-process tables are measured under the same load as a control: they
 * share nothing with procreg but the machine.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"
#include "maps.h"

/* IMPL_PAIR: procreg and inline in one reader, taking turns (PAIR_TURN). */
enum impl { IMPL_PROCREG, IMPL_BULK, IMPL_INLINE, IMPL_OA, IMPL_LFHT, IMPL_PAIR, NIMPL };

static const char *const impl_key[NIMPL] = { "procreg", "procreg_bulk", "inline", "oa", "lfht",
					     "paired" };

#define BULK 32                    /* names a procreg_lookup_many() call */

#define MAX_READERS 256
#define BLOCK 256
#define PAIR_TURN 16               /* blocks of one implementation a turn */

enum { PH_WARM, PH_RUN, PH_STOP };

struct reader_res {
	int ready;                 /* 1 ready, -1 failed */
	int err;
	uint64_t count, found, sink;
	uint64_t ns;               /* the reader's CPU time in the window */
	uint64_t wall_ns;          /* the window's length, as the reader saw it */
	uint64_t count2, ns2;      /* IMPL_PAIR: inline's (count, ns: procreg's) */
	uint8_t pad[128 - 64];
};

struct ctl {
	int phase;
	uint8_t pad0[60];
	struct reader_res r[MAX_READERS];
	int writer_ready;          /* 1 ready, -1 failed */
	int writer_err;
	uint64_t writer_ops, writer_ns;
};

/* What the readers inherit through fork. */
static struct {
	struct ctl *ctl;
	const struct qname *names;
	uint64_t n;
	const struct qname *queries;
	uint64_t qmask;
	struct il_table *il;
	struct oa_table *oa;
	struct lfht_table *lfht;
	enum impl impl;
	int nreaders;
} L;

/* One reader's loop for one implementation: the same code for each. The
 * warm-up pass copies every entry out (every name must be found); the
 * timed loop passes EO, NULL with --presence. */
#define READER_LOOP(CALL)                                                       \
	do {                                                                    \
		for (uint64_t i = 0; i < L.n; i++)                              \
			if (CALL(L.names[i].s, e) != 0)                          \
				missing++;                                      \
		if (missing) {                                                  \
			res->err = ENOENT;                                      \
			__atomic_store_n(&res->ready, -1, __ATOMIC_RELEASE);     \
			return 1;                                               \
		}                                                               \
		__atomic_store_n(&res->ready, 1, __ATOMIC_RELEASE);              \
		while (__atomic_load_n(&L.ctl->phase, __ATOMIC_ACQUIRE) == PH_WARM) \
			for (int k = 0; k < BLOCK; k++)                         \
				sink += CALL(L.queries[pos++ & L.qmask].s, eo) == 0; \
		/* At least one block, even for a reader the scheduler kept   \
		 * off the CPU for the whole run: a figure, not a failure. */   \
		t0 = pr_mono_ns();                                                  \
		c0 = cpu_ns();                                                  \
		do {                                                            \
			for (int k = 0; k < BLOCK; k++) {                       \
				if (CALL(L.queries[pos++ & L.qmask].s, eo) == 0) { \
					found++;                                \
					sink += eo ? (uint64_t)eo->pid + em->meta[0] + \
						eo->name[eo->meta_len & 7] : 1; \
				}                                               \
			}                                                       \
			count += BLOCK;                                         \
		} while (__atomic_load_n(&L.ctl->phase, __ATOMIC_ACQUIRE) == PH_RUN); \
		c1 = cpu_ns();                                                  \
		t1 = pr_mono_ns();                                                  \
	} while (0)

static procreg_t *reader_reg;

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define CALL_PROCREG(q, e) procreg_lookup(reader_reg, (q), (e))
#define CALL_INLINE(q, e) il_lookup(L.il, (q), (e))
#define CALL_OA(q, e) oa_lookup(L.oa, (q), (e))
#define CALL_LFHT(q, e) lfht_lookup(L.lfht, (q), (e))

/* The bulk reader: the same queries, BULK a call, each entry with its own
 * room for metadata as a caller of procreg_lookup_many would give. */
struct bulk_state {
	struct procreg_entry e[BULK];
	unsigned char meta[BULK][PROCREG_META_MAX];
	const char *np[BULK];
	int rs[BULK];
};

static uint64_t bulk_call(struct bulk_state *b, uint64_t *pos, bool presence, uint64_t *sink)
{
	uint64_t found = 0;

	for (int j = 0; j < BULK; j++)
		b->np[j] = L.queries[(*pos)++ & L.qmask].s;
	procreg_lookup_many(reader_reg, b->np, BULK, presence ? NULL : b->e, b->rs);
	for (int j = 0; j < BULK; j++) {
		if (b->rs[j] == 0) {
			found++;
			*sink += presence ? 1 : (uint64_t)b->e[j].pid + b->meta[j][0];
		}
	}
	return found;
}

static int bulk_reader(struct reader_res *res, uint64_t pos)
{
	struct bulk_state *b = calloc(1, sizeof(*b));
	uint64_t count = 0, found = 0, sink = 0, t0, t1, c0, c1;

	if (!b)
		return -1;
	for (int j = 0; j < BULK; j++)
		b->e[j] = (struct procreg_entry){ .sz = sizeof(b->e[j]), .meta = b->meta[j],
						  .meta_size = sizeof(b->meta[j]) };
	for (uint64_t i = 0; i < L.n; i += BULK) {
		int n = L.n - i < BULK ? (int)(L.n - i) : BULK;

		for (int j = 0; j < n; j++)
			b->np[j] = L.names[i + (uint64_t)j].s;
		if (procreg_lookup_many(reader_reg, b->np, (size_t)n, b->e, b->rs) != n) {
			free(b);
			errno = ENOENT;
			return -1;
		}
	}
	__atomic_store_n(&res->ready, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&L.ctl->phase, __ATOMIC_ACQUIRE) == PH_WARM)
		bulk_call(b, &pos, bo.presence, &sink);
	t0 = pr_mono_ns();
	c0 = cpu_ns();
	do {
		for (int k = 0; k < BLOCK / BULK; k++)
			found += bulk_call(b, &pos, bo.presence, &sink);
		count += BLOCK;
	} while (__atomic_load_n(&L.ctl->phase, __ATOMIC_ACQUIRE) == PH_RUN);
	c1 = cpu_ns();
	t1 = pr_mono_ns();
	res->count = count;
	res->found = found;
	res->ns = c1 - c0;
	res->wall_ns = t1 - t0;
	res->sink = sink;
	free(b);
	return 0;
}

/* IMPL_PAIR: procreg_lookup and the inline table in turns of PAIR_TURN
 * blocks, each turn timed by the CPU clock, the same queries for both.
 * Figures taken seconds apart on this kind of machine differ by more
 * than the ratio the scaling target asks about (the host's other tenants
 * move a DRAM-bound lookup's time by a third within a minute); taken in
 * alternating turns of a millisecond, both see the same machine, and
 * their ratio keeps only what tells them apart. */
static int pair_reader(struct reader_res *res, uint64_t pos, struct procreg_entry *e,
		       struct procreg_entry *eo, const unsigned char *meta)
{
	uint64_t count[2] = { 0, 0 }, ns[2] = { 0, 0 }, found = 0, sink = 0, pp = pos, pi = pos;
	uint64_t t0, t1, c0, c1;

	for (uint64_t i = 0; i < L.n; i++)
		if (CALL_PROCREG(L.names[i].s, e) != 0 || CALL_INLINE(L.names[i].s, e) != 0) {
			res->err = ENOENT;
			__atomic_store_n(&res->ready, -1, __ATOMIC_RELEASE);
			return -1;
		}
	__atomic_store_n(&res->ready, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&L.ctl->phase, __ATOMIC_ACQUIRE) == PH_WARM)
		for (int k = 0; k < BLOCK; k++)
			sink += CALL_PROCREG(L.queries[pp++ & L.qmask].s, eo) +
				CALL_INLINE(L.queries[pi++ & L.qmask].s, eo);
	t0 = pr_mono_ns();
	c0 = cpu_ns();
	do {
		for (int who = 0; who < 2; who++) {
			for (int b = 0; b < PAIR_TURN * BLOCK; b++) {
				int r = who ? CALL_INLINE(L.queries[pi++ & L.qmask].s, eo)
					    : CALL_PROCREG(L.queries[pp++ & L.qmask].s, eo);

				if (r == 0) {
					found += !who;
					sink += eo ? (uint64_t)eo->pid + meta[0] +
							     eo->name[eo->meta_len & 7]
						   : 1;
				}
			}
			c1 = cpu_ns();
			count[who] += PAIR_TURN * BLOCK;
			ns[who] += c1 - c0;
			c0 = c1;
		}
	} while (__atomic_load_n(&L.ctl->phase, __ATOMIC_ACQUIRE) == PH_RUN);
	t1 = pr_mono_ns();
	res->count = count[0];
	res->ns = ns[0];
	res->count2 = count[1];
	res->ns2 = ns[1];
	res->found = found;
	res->wall_ns = t1 - t0;
	res->sink = sink;
	return 0;
}

static int reader_main(void *arg)
{
	int id = (int)(intptr_t)arg;
	struct reader_res *res = &L.ctl->r[id];
	/* The entry and room for any metadata, as a caller that wants it
	 * would have (every implementation copies it there). */
	struct {
		struct procreg_entry e;
		unsigned char meta[PROCREG_META_MAX];
	} *em = calloc(1, sizeof(*em));
	struct procreg_entry *e = em ? &em->e : NULL, *eo = bo.presence ? NULL : e;
	uint64_t pos = (L.qmask + 1) / (uint64_t)L.nreaders * (uint64_t)id;
	uint64_t count = 0, found = 0, sink = 0, missing = 0, t0 = 0, t1 = 0, c0 = 0, c1 = 0;

	if (!e)
		goto fail;
	*e = (struct procreg_entry){ .sz = sizeof(*e), .meta = em->meta, .meta_size = sizeof(em->meta) };
	switch (L.impl) {
	case IMPL_PROCREG:
		reader_reg = bench_open(BENCH_SCOPE);
		if (!reader_reg)
			goto fail;
		READER_LOOP(CALL_PROCREG);
		break;
	case IMPL_BULK:
		reader_reg = bench_open(BENCH_SCOPE);
		if (!reader_reg || bulk_reader(res, pos) < 0)
			goto fail;
		return 0;
	case IMPL_INLINE:
		READER_LOOP(CALL_INLINE);
		break;
	case IMPL_OA:
		READER_LOOP(CALL_OA);
		break;
	case IMPL_LFHT:
		lfht_reader_init();
		READER_LOOP(CALL_LFHT);
		break;
	case IMPL_PAIR:
		reader_reg = bench_open(BENCH_SCOPE);
		if (!reader_reg)
			goto fail;
		return pair_reader(res, pos, e, eo, em->meta) < 0;
	default:
		break;
	}
	res->count = count;
	res->found = found;
	res->ns = c1 - c0;
	res->wall_ns = t1 - t0;
	res->sink = sink;
	return 0;
fail:
	res->err = errno;
	__atomic_store_n(&res->ready, -1, __ATOMIC_RELEASE);
	return 1;
}

/* ---- the write load ----------------------------------------------------- */

#define CHURN_WAVE 1000
#define CHURN_WAVES 64

static int writer_main(void *arg)
{
	procreg_t *reg = bench_open(BENCH_SCOPE);
	struct procreg_op *ops = calloc(CHURN_WAVE, sizeof(*ops));
	struct qname *nm = calloc(CHURN_WAVE, sizeof(*nm));
	char meta[64];
	size_t ml = meta_of(meta, sizeof(meta), 0);
	uint64_t ops_run = 0, t0 = 0, wave = 0;
	int ph;

	(void)arg;
	if (!reg || !ops || !nm) {
		L.ctl->writer_err = errno;
		__atomic_store_n(&L.ctl->writer_ready, -1, __ATOMIC_RELEASE);
		return 1;
	}
	/* Register a wave of new names, then remove it: every op is a
	 * publish or a tombstone, records are retired and reused, and the
	 * index is rebuilt as tombstones pile up. */
	while ((ph = __atomic_load_n(&L.ctl->phase, __ATOMIC_ACQUIRE)) != PH_STOP) {
		uint64_t ws = pr_mono_ns();
		int err;

		for (int pass = 0; pass < 2; pass++) {
			for (int j = 0; j < CHURN_WAVE; j++) {
				name_of(&nm[j], "churn", (wave % CHURN_WAVES) * CHURN_WAVE + (uint64_t)j);
				ops[j].sz = sizeof(ops[j]);
				ops[j].kind = pass ? PROCREG_OP_UNREGISTER : PROCREG_OP_REGISTER;
				ops[j].name = nm[j].s;
				ops[j].meta = meta;
				ops[j].meta_len = pass ? 0 : ml;
			}
			err = procreg_batch(reg, ops, CHURN_WAVE);
			if (err || ops[0].result) {
				L.ctl->writer_err = err ? -err : -ops[0].result;
				__atomic_store_n(&L.ctl->writer_ready, -1, __ATOMIC_RELEASE);
				return 1;
			}
		}
		wave++;
		__atomic_store_n(&L.ctl->writer_ready, 1, __ATOMIC_RELEASE);
		/* A wave counts if it overlapped the window: one wave may take
		 * longer than the whole window on a loaded machine. */
		if (ph == PH_RUN || __atomic_load_n(&L.ctl->phase, __ATOMIC_ACQUIRE) != PH_WARM) {
			if (!t0)
				t0 = ws;
			ops_run += 2 * CHURN_WAVE;
			L.ctl->writer_ops = ops_run;
			L.ctl->writer_ns = pr_mono_ns() - t0;
		}
	}
	procreg_close(reg);
	return 0;
}

/* ---- one measurement ------------------------------------------------------ */

struct figure {
	double rate;               /* lookups/s, all readers */
	double ns;                 /* CPU ns per lookup, per reader (mean) */
	uint64_t lookups, found;
	double writer_rate;        /* under load: writer ops/s */
	double gp_rate;            /* grace periods/s the daemon ran in the window */
	double ipi_rate;           /* function-call IPIs/s on the first reader's CPU */
	double cpu_share;          /* the least share of the window a reader ran */
	double rate2;              /* IMPL_PAIR: inline's lookups/s (rate: procreg's) */
};

static procreg_t *parent_reg;      /* the parent's handle, for the counters */

/* Function-call interrupts (the IPIs membarrier sends) taken by CPU so far,
 * from /proc/interrupts; 0 where it cannot be read. */
static uint64_t ipis_on(int cpu)
{
	FILE *f = fopen("/proc/interrupts", "r");
	char line[8192];
	uint64_t v = 0;
	int col = -1;

	if (!f)
		return 0;
	if (fgets(line, sizeof(line), f)) {
		char *tok, *save = NULL;
		int i = 0;

		for (tok = strtok_r(line, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save), i++)
			if (!strncmp(tok, "CPU", 3) && atoi(tok + 3) == cpu)
				col = i;
	}
	while (col >= 0 && fgets(line, sizeof(line), f)) {
		char *tok, *save = NULL;
		int i = 0;

		tok = strtok_r(line, " \t\n", &save);
		if (!tok || strcmp(tok, "CAL:"))
			continue;
		for (tok = strtok_r(NULL, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save), i++)
			if (i == col)
				v = strtoull(tok, NULL, 10);
		break;
	}
	fclose(f);
	return v;
}

static int wait_ready(int *flag, pid_t pid)
{
	for (int i = 0; i < 600000; i++) {
		int v = __atomic_load_n(flag, __ATOMIC_ACQUIRE);

		if (v)
			return v > 0 ? 0 : -1;
		if (i > 1000)
			usleep(100);
	}
	(void)pid;
	return -1;
}

static int measure(enum impl impl, int nreaders, const int *rcpu, bool load, int wcpu,
		   struct figure *f)
{
	pid_t pids[MAX_READERS], wpid = 0;
	uint64_t sink = 0;
	int err = 0;

	memset(L.ctl, 0, sizeof(*L.ctl));
	memset(f, 0, sizeof(*f));
	L.impl = impl;
	L.nreaders = nreaders;
	if (load) {
		wpid = spawn(writer_main, NULL, wcpu);
		if (wpid < 0 || wait_ready(&L.ctl->writer_ready, wpid) < 0) {
			fprintf(stderr, "procreg-bench: the writer failed: %s\n",
				strerror(L.ctl->writer_err));
			if (wpid > 0)
				reap(wpid);
			return -1;
		}
	}
	for (int r = 0; r < nreaders; r++)
		pids[r] = spawn(reader_main, (void *)(intptr_t)r, rcpu[r]);
	for (int r = 0; r < nreaders; r++) {
		if (pids[r] < 0 || wait_ready(&L.ctl->r[r].ready, pids[r]) < 0) {
			fprintf(stderr, "procreg-bench: %s reader %d failed: %s\n", impl_key[impl], r,
				strerror(L.ctl->r[r].err));
			err = -1;
		}
	}
	if (!err) {
		PROCREG_OPTS(procreg_stats, s0);
		PROCREG_OPTS(procreg_stats, s1);
		uint64_t i0, t0;

		sleep_ms(10);
		procreg_stats(parent_reg, &s0);
		i0 = ipis_on(rcpu[0]);
		t0 = pr_mono_ns();
		__atomic_store_n(&L.ctl->phase, PH_RUN, __ATOMIC_RELEASE);
		sleep_ms(bo.duration_ms);
		procreg_stats(parent_reg, &s1);
		f->ipi_rate = (double)(ipis_on(rcpu[0]) - i0) * 1e9 / (double)(pr_mono_ns() - t0);
		f->gp_rate = (double)(s1.grace_periods - s0.grace_periods) * 1e9 / (double)(pr_mono_ns() - t0);
	}
	__atomic_store_n(&L.ctl->phase, PH_STOP, __ATOMIC_RELEASE);
	for (int r = 0; r < nreaders; r++) {
		if (pids[r] > 0 && reap(pids[r]) != 0)
			err = -1;
	}
	if (wpid > 0 && reap(wpid) != 0)
		err = -1;
	if (err)
		return -1;
	for (int r = 0; r < nreaders; r++) {
		struct reader_res *res = &L.ctl->r[r];

		if (!res->count || !res->ns || !res->wall_ns)
			return -1;
		if (r == 0 || (double)(res->ns + res->ns2) / (double)res->wall_ns < f->cpu_share)
			f->cpu_share = (double)(res->ns + res->ns2) / (double)res->wall_ns;
		if (res->ns2)
			f->rate2 += (double)res->count2 * 1e9 / (double)res->ns2;
		f->rate += (double)res->count * 1e9 / (double)res->ns;
		f->ns += (double)res->ns / (double)res->count / nreaders;
		f->lookups += res->count;
		f->found += res->found;
		sink += res->sink;
	}
	if (load && L.ctl->writer_ns)
		f->writer_rate = (double)L.ctl->writer_ops * 1e9 / (double)L.ctl->writer_ns;
	/* Consumed: the checksum goes nowhere, but the compiler cannot know. */
	__asm__ volatile("" : : "r"(sink));
	return 0;
}

/* ---- one table size -------------------------------------------------------- */

struct cell {                      /* one implementation, one reader count, idle or loaded */
	double rate[64], ns[64], wrate[64], gp[64], ipi[64], share[64];
	double rate2[64];          /* IMPL_PAIR: inline's rate beside procreg's */
	uint64_t lookups, found;
	double med_rate, med_ns, med_wrate, med_gp, med_ipi;
};

static void finish(struct cell *c, int rounds)
{
	c->med_rate = median(c->rate, rounds);
	c->med_ns = median(c->ns, rounds);
	c->med_wrate = median(c->wrate, rounds);
	c->med_gp = median(c->gp, rounds);
	c->med_ipi = median(c->ipi, rounds);
}

static const char *cpus_of(const int *cpu, int n)
{
	static char buf[4][256];
	static int k;
	char *b = buf[k++ % 4];
	size_t o = 0;

	b[0] = 0;
	for (int i = 0; i < n && o < 240; i++)
		o += (size_t)snprintf(b + o, 256 - o, "%s%d", i ? "," : "", cpu[i]);
	return b;
}

/* NAMES: N names "svc..."; QUERIES: QN lookups of them, of which a
 * share (--miss-rate) ask for names that are not there, drawn from SEED. */
static void make_names(struct qname *names, uint64_t n, struct qname *queries, uint64_t qn,
		       uint64_t seed)
{
	for (uint64_t i = 0; i < n; i++)
		name_of(&names[i], "svc", i);
	for (uint64_t i = 0; i < qn; i++) {
		uint64_t r = rng_next(&seed);

		if ((double)(r >> 11) / 9007199254740992.0 < bo.miss_rate)
			name_of(&queries[i], "miss", rng_next(&seed) % n);
		else
			queries[i] = names[rng_next(&seed) % n];
	}
}

/* The CPUs of NR readers, in RCPU. */
static void reader_cpus(int nr, int *rcpu)
{
	/* Under load the last CPU is the writer's and the daemon's. */
	int avail = bo.under_write_load && ncpus > 1 ? ncpus - 1 : ncpus;

	for (int r = 0; r < nr; r++)
		rcpu[r] = cpus[r % avail];
}

/* Each reader count of RCOUNTS (NRC of them), each implementation,
 * idle and (--under-write-load) loaded, --rounds times: the medians in
 * CELLS. The writer and the daemon on WCPU.
 *
 * Within a round, one implementation's figures at every reader count are
 * taken back to back before the next implementation's: a scaling is the
 * ratio of an implementation's N-reader figure to its 1-reader one, and
 * on this kind of machine the speed of a CPU drifts over seconds (a
 * vCPU's share of its host, kernel threads that wake in bursts). With
 * every 1-reader round measured first and every N-reader round after, a
 * round's scaling compared figures taken seconds apart, and a burst in
 * one of procreg's two windows but in neither of inline's (or the
 * reverse) showed as a slow round of one and not the other. */
static int measure_all(struct cell (*cells)[2][NIMPL], const int *rcounts, int nrc, int wcpu)
{
	for (int round = 0; round < bo.rounds; round++) {
		for (int k = 0; k < NIMPL; k++) {
			enum impl im = (enum impl)((k + round) % NIMPL);

			for (int c = 0; c < nrc; c++) {
				int nr = rcounts[c], rcpu[MAX_READERS];

				reader_cpus(nr, rcpu);
				for (int ld = 0; ld < (bo.under_write_load ? 2 : 1); ld++) {
					struct figure f;
					struct cell *cl = &cells[c][ld][im];

					if (measure(im, nr, rcpu, ld, wcpu, &f) < 0)
						return -1;
					cl->rate[round] = f.rate;
					cl->ns[round] = f.ns;
					cl->wrate[round] = f.writer_rate;
					cl->gp[round] = f.gp_rate;
					cl->ipi[round] = f.ipi_rate;
					cl->share[round] = f.cpu_share;
					cl->rate2[round] = f.rate2;
					cl->lookups += f.lookups;
					cl->found += f.found;
				}
			}
		}
	}
	for (int c = 0; c < nrc; c++)
		for (int ld = 0; ld < 2; ld++)
			for (int k = 0; k < NIMPL; k++)
				finish(&cells[c][ld][k], bo.rounds);
	return 0;
}

/* Per-round ratios A[r] / B[r] of N rounds: their median and range. */
struct spread {
	double med, lo, hi;
};

/* The median and range of V[0..N). */
static struct spread spread_of(double *v, int n)
{
	struct spread sp = { 0, 1e300, 0 };

	for (int r = 0; r < n; r++) {
		sp.lo = v[r] < sp.lo ? v[r] : sp.lo;
		sp.hi = v[r] > sp.hi ? v[r] : sp.hi;
	}
	sp.med = median(v, n);
	return sp;
}

static struct spread ratios(const double *a, const double *b, int n)
{
	double v[64];

	for (int r = 0; r < n; r++)
		v[r] = b[r] > 0 ? a[r] / b[r] : 0;
	return spread_of(v, n);
}

static void j_spread(const char *key, struct spread sp)
{
	j_obj(key);
	j_num("median", sp.med);
	j_num("min", sp.lo);
	j_num("max", sp.hi);
	j_end();
}

static const char *fmt_spread(struct spread sp)
{
	/* Up to eight in one printf. */
	static char buf[8][48];
	static int k;
	char *b = buf[k++ % 8];

	snprintf(b, 48, "%.2fx (%.2f-%.2f)", sp.med, sp.lo, sp.hi);
	return b;
}

/* One row of the report (and its JSON object): NR readers over N names,
 * IDLE and LD the cells without and with the writer's load. */
static void report_run(uint64_t n, int nr, struct cell *idle, struct cell *ld, int wcpu)
{
	struct cell *use = bo.under_write_load ? ld : idle;
	struct spread vs_il = ratios(use[IMPL_PROCREG].ns, use[IMPL_INLINE].ns, bo.rounds);
	struct spread vs_oa = ratios(use[IMPL_PROCREG].ns, use[IMPL_OA].ns, bo.rounds);
	struct spread vs_lf = ratios(use[IMPL_PROCREG].ns, use[IMPL_LFHT].ns, bo.rounds);
	/* The strongest baseline of this figure, by median time: the
	 * headline ratio's, and the one a bulk lookup's rate is held to. */
	int best = use[IMPL_OA].med_ns < use[IMPL_INLINE].med_ns ? IMPL_OA : IMPL_INLINE;
	struct spread vs_best = best == IMPL_OA ? vs_oa : vs_il;
	struct spread bulk = ratios(use[IMPL_BULK].rate, use[best].rate, bo.rounds);
	int rcpu[MAX_READERS];
	char what[160];
	double share = 1;

	/* The least share of its window any reader of any figure ran. */
	for (int k = 0; k < NIMPL; k++)
		for (int r = 0; r < bo.rounds; r++)
			share = use[k].share[r] < share ? use[k].share[r] : share;
	reader_cpus(nr, rcpu);
	j_obj(NULL);
	j_int("readers", (uint64_t)nr);
	j_str("cpus", cpus_of(rcpu, nr));
	j_num("least_cpu_share", share);
	for (int k = 0; k < NIMPL; k++) {
		char key[64];

		snprintf(key, sizeof(key), "%s_ns", impl_key[k]);
		j_num(key, use[k].med_ns);
		snprintf(key, sizeof(key), "%s_lookups_per_s", impl_key[k]);
		j_num(key, use[k].med_rate);
	}
	j_spread("time_vs_inline", vs_il);
	j_spread("time_vs_oa", vs_oa);
	j_spread("time_vs_lfht", vs_lf);
	j_str("strongest", impl_key[best]);
	j_spread("time_vs_strongest", vs_best);
	j_spread("bulk_rate_vs_strongest", bulk);
	j_spread("paired_time_vs_inline", ratios(use[IMPL_PAIR].rate2, use[IMPL_PAIR].rate, bo.rounds));
	j_obj("lookups");
	for (int k = 0; k < NIMPL; k++)
		j_int(impl_key[k], use[k].lookups + (bo.under_write_load ? idle[k].lookups : 0));
	j_end();
	j_obj("found");
	for (int k = 0; k < NIMPL; k++)
		j_int(impl_key[k], use[k].found + (bo.under_write_load ? idle[k].found : 0));
	j_end();
	if (!bo.under_write_load) {
		hprintf("%-8d %-5s %8.1f %8.1f %8.1f %8.1f %8.1f  %-20s %-20s %-20s %5.1f%%\n", nr,
			cpus_of(rcpu, nr), idle[IMPL_PROCREG].med_ns, idle[IMPL_BULK].med_ns,
			idle[IMPL_INLINE].med_ns, idle[IMPL_OA].med_ns, idle[IMPL_LFHT].med_ns,
			fmt_spread(vs_il), fmt_spread(vs_oa), fmt_spread(bulk), share * 100);
	} else {
		double pr = ld[IMPL_PROCREG].med_rate / idle[IMPL_PROCREG].med_rate;
		double ir = ld[IMPL_INLINE].med_rate / idle[IMPL_INLINE].med_rate;

		j_str("writer_cpu", cpu_label(wcpu));
		j_num("idle_procreg_ns", idle[IMPL_PROCREG].med_ns);
		j_num("idle_inline_ns", idle[IMPL_INLINE].med_ns);
		j_num("ratio_vs_idle", pr);
		j_num("inline_ratio_vs_idle", ir);
		j_num("writer_ops_per_s", ld[IMPL_PROCREG].med_wrate);
		j_num("grace_periods_per_s", ld[IMPL_PROCREG].med_gp);
		j_num("idle_grace_periods_per_s", idle[IMPL_PROCREG].med_gp);
		j_num("reader_cpu_ipis_per_s", ld[IMPL_PROCREG].med_ipi);
		j_num("idle_reader_cpu_ipis_per_s", idle[IMPL_PROCREG].med_ipi);
		j_num("inline_reader_cpu_ipis_per_s", ld[IMPL_INLINE].med_ipi);
		hprintf("%-8d %-6s %-6s %10.1f %10.1f %8.2fx %10.1f %10.1f %8.2fx  %-20s %11s\n",
			nr, cpus_of(rcpu, nr), cpu_label(wcpu), idle[IMPL_PROCREG].med_ns,
			ld[IMPL_PROCREG].med_ns, pr, idle[IMPL_INLINE].med_ns,
			ld[IMPL_INLINE].med_ns, ir, fmt_spread(vs_il),
			fmt_rate(ld[IMPL_PROCREG].med_wrate));
		hprintf("%-8s during procreg's loaded window: %.0f grace periods/s, %.0f IPIs/s "
			"on reader CPU %d (idle: %.0f, %.0f; inline loaded: %.0f IPIs/s)\n", "",
			ld[IMPL_PROCREG].med_gp, ld[IMPL_PROCREG].med_ipi, rcpu[0],
			idle[IMPL_PROCREG].med_gp, idle[IMPL_PROCREG].med_ipi,
			ld[IMPL_INLINE].med_ipi);
		snprintf(what, sizeof(what), "lookup under write load, %s names, %d reader%s: vs idle",
			 fmt_count(n), nr, nr == 1 ? "" : "s");
		target(what, pr, ">=", 0.9, "x");
	}
	/* The targets: procreg's time within 1.5x the strongest in-process
	 * table's (1.3x for a presence test); at a million names and more, a
	 * bulk lookup at least as fast as its one at a time. */
	snprintf(what, sizeof(what), "lookup%s%s, %s names, %d reader%s: x %s's time",
		 bo.presence ? " (presence)" : "", bo.under_write_load ? " (loaded)" : "",
		 fmt_count(n), nr, nr == 1 ? "" : "s", impl_key[best]);
	target(what, vs_best.med, "<=", bo.presence ? 1.3 : 1.5, "x");
	if (n >= 1000000 && !bo.under_write_load) {
		snprintf(what, sizeof(what), "bulk lookup%s, %s names, %d reader%s: x %s's rate",
			 bo.presence ? " (presence)" : "", fmt_count(n), nr, nr == 1 ? "" : "s",
			 impl_key[best]);
		target(what, bulk.med, ">=", 1.0, "x");
	}
	j_end();
}

/* From the fewest readers to the most (RCOUNTS, NRC of them, NRC > 1):
 * how each implementation scales, round by round. */
static void report_scaling(uint64_t n, struct cell (*cells)[2][NIMPL], const int *rcounts,
			   int nrc)
{
	int last = nrc - 1;
	struct cell *a = cells[0][bo.under_write_load], *b = cells[last][bo.under_write_load];
	struct spread sc[NIMPL], svi;
	double per[NIMPL][64];
	char what[160];

	for (int k = 0; k < NIMPL; k++) {
		sc[k] = ratios(b[k].rate, a[k].rate, bo.rounds);
		for (int r = 0; r < bo.rounds; r++)
			per[k][r] = a[k].rate[r] > 0 ? b[k].rate[r] / a[k].rate[r] : 0;
	}
	svi = ratios(per[IMPL_PROCREG], per[IMPL_INLINE], bo.rounds);
	/* Paired: procreg's rate over inline's, each reader count's taken in
	 * one window of turns, and the scaling of that ratio. */
	for (int r = 0; r < bo.rounds; r++) {
		double pa = a[IMPL_PAIR].rate2[r] > 0 ? a[IMPL_PAIR].rate[r] / a[IMPL_PAIR].rate2[r] : 0;
		double pb = b[IMPL_PAIR].rate2[r] > 0 ? b[IMPL_PAIR].rate[r] / b[IMPL_PAIR].rate2[r] : 0;

		per[IMPL_PAIR][r] = pa > 0 ? pb / pa : 0;
	}
	sc[IMPL_PAIR] = spread_of(per[IMPL_PAIR], bo.rounds);
	j_spread("scaling", sc[IMPL_PROCREG]);
	j_spread("inline_scaling", sc[IMPL_INLINE]);
	j_spread("oa_scaling", sc[IMPL_OA]);
	j_spread("lfht_scaling", sc[IMPL_LFHT]);
	j_spread("scaling_vs_inline", svi);
	j_spread("paired_scaling_vs_inline", sc[IMPL_PAIR]);
	hprintf("scaling 1 -> %d readers: procreg %s, inline %s, lfht %s; procreg's / inline's: %s;\n"
		"  paired (procreg and inline taking turns in each reader): procreg's / inline's %s\n",
		rcounts[last], fmt_spread(sc[IMPL_PROCREG]), fmt_spread(sc[IMPL_INLINE]),
		fmt_spread(sc[IMPL_LFHT]), fmt_spread(svi), fmt_spread(sc[IMPL_PAIR]));
	/* In every round, not the median: a run that slows down is what the
	 * target is there to catch. Of the paired figures: the separate ones
	 * are taken seconds apart and carry the machine's drift. */
	snprintf(what, sizeof(what), "lookup scaling 1->%d, %s names: vs inline's (paired), worst round",
		 rcounts[last], fmt_count(n));
	target(what, sc[IMPL_PAIR].lo, ">=", 0.9, "x");
}

/*
 * How much of the table a reader maps in huge pages: none from /dev/shm as
 * most systems mount it, most of it from a tmpfs mounted huge=within_size
 * or always (--tmpdir). This process tests the presence of every name,
 * which for the bench's names (all short) reads the index and no record,
 * and its mapping of the table is then read off /proc/self/smaps; the
 * readers, forked later, fault the same pages the same way. Said beside
 * the figures because they may depend on it.
 */
static struct {
	bool known;
	uint64_t rss_kib, huge_kib;
} TP;

static void table_pages(procreg_t *reg, const struct qname *names, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		(void)procreg_lookup(reg, names[i].s, NULL);
	TP.known = pr_mapping_pages(procreg_table_path(reg), &TP.rss_kib, &TP.huge_kib) == 0;
	if (TP.known)
		hprintf("a presence test of every name: %.1f MiB of the table resident in this "
			"reader, %.1f MiB of it in huge pages\n", (double)TP.rss_kib / 1024,
			(double)TP.huge_kib / 1024);
}

/* The report of one table size: a header, a row per reader count, the
 * scaling. */
static void report(uint64_t n, uint64_t index_capacity, struct cell (*cells)[2][NIMPL],
		   const int *rcounts, int nrc, int wcpu)
{
	j_obj(NULL);
	j_int("names", n);
	j_int("index_capacity", index_capacity);
	if (TP.known) {
		j_int("table_resident_kib", TP.rss_kib);
		j_int("table_huge_kib", TP.huge_kib);
	}
	j_str("daemon_cpu", cpu_label(wcpu));
	if (!bo.under_write_load) {
		hprintf("%-8s %-5s %8s %8s %8s %8s %8s  %-20s %-20s %-20s %6s\n", "readers", "cpus",
			"procreg", "bulk", "inline", "oa", "lfht", "procreg time",
			"procreg time", "bulk rate", "on CPU");
		hprintf("%-8s %-5s %8s %8s %8s %8s %8s  %-20s %-20s %-20s %6s\n", "", "", "ns", "ns",
			"ns", "ns", "ns", "x inline (range)", "x oa (range)", "x strongest",
			"least");
	} else {
		hprintf("%-8s %-6s %-6s %10s %10s %9s %10s %10s %9s  %-20s %11s\n", "readers",
			"cpus", "writer", "procreg", "procreg", "procreg", "inline", "inline",
			"inline", "procreg time", "writes/s");
		hprintf("%-8s %-6s %-6s %10s %10s %9s %10s %10s %9s  %-20s %11s\n", "", "", "cpu",
			"idle ns", "loaded ns", "vs idle", "idle ns", "loaded ns", "vs idle",
			"x inline", "(loaded)");
	}
	j_arr("runs");
	for (int c = 0; c < nrc; c++)
		report_run(n, rcounts[c], cells[c][0], cells[c][1], wcpu);
	j_end();
	if (nrc > 1)
		report_scaling(n, cells, rcounts, nrc);
	j_end();
}

/* --fixed N: N untimed lookups of each implementation in this process,
 * for an instruction count under valgrind --tool=callgrind (the check
 * that a noisy machine cannot spoil): callgrind_annotate --inclusive=yes
 * then gives the instructions of fixed_procreg, fixed_inline, ... */
#define FIXED_LOOP(CALL)                                                        \
	do {                                                                    \
		uint64_t bad = 0;                                               \
		for (uint64_t i = 0; i < bo.fixed; i++)                         \
			bad += CALL(L.queries[i & L.qmask].s, eo) != 0;          \
		return bad;                                                     \
	} while (0)

#ifdef __clang__
#define SEPARATE __attribute__((noinline))
#else
#define SEPARATE __attribute__((noipa))
#endif

static SEPARATE uint64_t fixed_procreg(struct procreg_entry *eo)
{
	FIXED_LOOP(CALL_PROCREG);
}

static SEPARATE uint64_t fixed_inline(struct procreg_entry *eo)
{
	FIXED_LOOP(CALL_INLINE);
}

static SEPARATE uint64_t fixed_oa(struct procreg_entry *eo)
{
	FIXED_LOOP(CALL_OA);
}

static SEPARATE uint64_t fixed_bulk(struct bulk_state *b)
{
	uint64_t pos = 0, sink = 0, found = 0;

	while (pos < bo.fixed)
		found += bulk_call(b, &pos, bo.presence, &sink);
	return pos - found;
}

static int run_fixed(void)
{
	struct {
		struct procreg_entry e;
		unsigned char meta[PROCREG_META_MAX];
	} *em = calloc(1, sizeof(*em));
	struct bulk_state *b = calloc(1, sizeof(*b));
	struct procreg_entry *eo;
	uint64_t missed;

	if (!em || !b)
		return -1;
	em->e = (struct procreg_entry){ .sz = sizeof(em->e), .meta = em->meta,
					.meta_size = sizeof(em->meta) };
	for (int j = 0; j < BULK; j++)
		b->e[j] = (struct procreg_entry){ .sz = sizeof(b->e[j]), .meta = b->meta[j],
						  .meta_size = sizeof(b->meta[j]) };
	eo = bo.presence ? NULL : &em->e;
	reader_reg = bench_open(BENCH_SCOPE);
	if (!reader_reg)
		return -1;
	missed = fixed_procreg(eo) + fixed_inline(eo) + fixed_oa(eo) + fixed_bulk(b);
	hprintf("%llu lookups with each of procreg, procreg_lookup_many, inline and oa; %llu "
		"missed\n", (unsigned long long)bo.fixed, (unsigned long long)missed);
	j_int("fixed", bo.fixed);
	j_int("missed", missed);
	procreg_close(reader_reg);
	reader_reg = NULL;
	free(em);
	free(b);
	return 0;
}

/* lookup over a table of N names: procreg against the in-process
 * baselines, for each reader count of RCOUNTS (NRC of them). */
static int run_size(uint64_t n, const int *rcounts, int nrc)
{
	struct daemon_proc d;
	char maxn[32];
	const char *args[] = { "--max-names-per-proc", maxn, NULL };
	struct qname *names = NULL, *queries = NULL;
	uint64_t qn = bo.quick ? (1u << 16) : (1u << 20), seed = 42 + n;
	size_t names_sz = n * sizeof(*names), q_sz;
	PROCREG_OPTS(procreg_stats, st);
	procreg_t *reg = NULL;
	int64_t got;
	int wcpu = cpus[ncpus - 1], rc = -1;
	struct cell (*cells)[2][NIMPL] = calloc((size_t)nrc, sizeof(*cells));

	if (!cells)
		return -1;
	q_sz = qn * sizeof(*queries);
	names = mmap(NULL, names_sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	queries = mmap(NULL, q_sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (names == MAP_FAILED || queries == MAP_FAILED)
		goto out_nomap;
	make_names(names, n, queries, qn, seed);

	/* procreg: our own daemon, the names held by this process. */
	snprintf(maxn, sizeof(maxn), "%llu", (unsigned long long)(n + 1024));
	if (daemon_start(&d, BENCH_SCOPE, args) < 0)
		goto out;
	pin(d.pid, wcpu);
	reg = bench_open(BENCH_SCOPE);
	if (!reg) {
		fprintf(stderr, "procreg-bench: open: %s\n", strerror(errno));
		goto out_daemon;
	}
	parent_reg = reg;
	{
		uint64_t t0 = pr_mono_ns();

		got = register_range(reg, "svc", 0, n, false);
		if (got != (int64_t)n) {
			fprintf(stderr, "procreg-bench: registered %lld of %llu names: %s\n",
				(long long)got, (unsigned long long)n,
				got < 0 ? procreg_strerror((int)got) : "refused");
			goto out_daemon;
		}
		procreg_stats(reg, &st);
		hprintf("\n%s names: table built in %.0f ms (index %s slots, %.0f%% full)",
			fmt_count(n), (double)(pr_mono_ns() - t0) / 1e6, fmt_count(st.index_capacity),
			100.0 * (double)n / (double)st.index_capacity);
		/* The daemon may still be at work on the build (grace
		 * periods, retired index blocks): a reader sharing its CPU
		 * would be measured against it. Wait until it is idle. */
		{
			double idle = wait_idle(d.pid, 10000);

			if (idle < 0)
				hprintf("; the daemon did not go idle in 10 s\n");
			else
				hprintf("; daemon idle after %.0f ms\n", idle);
		}
		table_pages(reg, names, n);
	}

	L.ctl = shared_alloc(sizeof(struct ctl));
	L.names = names;
	L.n = n;
	L.queries = queries;
	L.qmask = qn - 1;
	L.il = il_build(names, n, st.index_capacity, getpid());
	L.oa = oa_build(names, n, st.index_capacity, getpid());
	L.lfht = lfht_build(names, n, getpid());
	if (!L.il || !L.oa || !L.lfht) {
		fprintf(stderr, "procreg-bench: cannot build the in-process tables\n");
		goto out_daemon;
	}

	if (bo.fixed) {
		rc = run_fixed();
		goto out_daemon;
	}
	if (measure_all(cells, rcounts, nrc, wcpu) < 0)
		goto out_daemon;

	report(n, st.index_capacity, cells, rcounts, nrc, wcpu);
	rc = 0;

out_daemon:
	if (reg)
		procreg_close(reg);
	daemon_stop(&d);
out:
	il_free(L.il);
	oa_free(L.oa);
	lfht_free(L.lfht);
	L.il = NULL;
	L.oa = NULL;
	L.lfht = NULL;
	if (L.ctl)
		shared_free(L.ctl, sizeof(struct ctl));
	L.ctl = NULL;
out_nomap:
	if (names != MAP_FAILED && names)
		munmap(names, names_sz);
	if (queries != MAP_FAILED && queries)
		munmap(queries, q_sz);
	free(cells);
	return rc;
}

int cmd_lookup(void)
{
	int rcounts[4], nrc = 0, maxr;
	uint64_t t0 = pr_mono_ns();

	if (bo.under_write_load) {
		/* The last CPU carries the writer and the daemon. */
		maxr = bo.readers ? bo.readers : (ncpus > 1 ? ncpus - 1 : 1);
	} else {
		maxr = bo.readers ? bo.readers : ncpus;
	}
	if (maxr > MAX_READERS)
		maxr = MAX_READERS;
	rcounts[nrc++] = 1;
	if (maxr > 1)
		rcounts[nrc++] = maxr;
	if (!bo.nnames) {
		if (bo.quick) {
			bo.names_list[0] = 1000;
			bo.names_list[1] = 10000;
		} else {
			bo.names_list[0] = 10000;
			bo.names_list[1] = 1000000;
		}
		bo.nnames = 2;
	}
	hprintf("procreg-bench lookup%s%s: %d CPUs (%s), miss rate %.0f%%, %d round%s of %d ms per "
		"figure (median; ratios: median of the rounds' and their range)\n",
		bo.under_write_load ? " --under-write-load" : "", bo.presence ? " --presence" : "",
		ncpus, cpus_of(cpus, ncpus), bo.miss_rate * 100, bo.rounds,
		bo.rounds == 1 ? "" : "s", bo.duration_ms);
	hprintf("procreg: procreg_lookup(%s); bulk: procreg_lookup_many(), %d names a call\n",
		bo.presence ? "NULL" : "&entry", BULK);
	hprintf("baselines, in private memory, same names, same capacity, same hash and copy-out:\n"
		"  inline = open addressing, the key and the entry's fields in a 64-byte slot\n"
		"  oa     = procreg's design (16-byte slots, records in an arena): the same work\n"
		"  lfht   = liburcu cds_lfht (memb)\n"
		"the headline ratio is against the faster of inline and oa in each figure "
		"(the strongest)\n");
	if (bo.under_write_load)
		hprintf("load: a writer process registers and unregisters waves of %d names "
			"through procreg_batch, on the daemon's CPU\n", CHURN_WAVE);
	j_str("subcommand", bo.under_write_load ? "lookup --under-write-load" : "lookup");
	j_bool("under_write_load", bo.under_write_load);
	j_bool("presence", bo.presence);
	j_int("bulk", BULK);
	j_int("ncpus", (uint64_t)ncpus);
	j_num("miss_rate", bo.miss_rate);
	j_int("rounds", (uint64_t)bo.rounds);
	j_int("duration_ms", (uint64_t)bo.duration_ms);
	j_arr("tables");
	for (int i = 0; i < bo.nnames; i++) {
		if (run_size(bo.names_list[i], rcounts, nrc) < 0) {
			j_end();
			return 2;
		}
	}
	j_end();
	targets_report();
	hprintf("\ntotal %.1f s\n", (double)(pr_mono_ns() - t0) / 1e9);
	j_num("seconds", (double)(pr_mono_ns() - t0) / 1e9);
	return 0;
}
