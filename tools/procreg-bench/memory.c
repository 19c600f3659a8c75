/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * memory.c - procreg-bench memory: bytes of table per name.
 *
 * One procregd, names registered by this process through procreg_batch up
 * to each size in turn (10^4, 10^5, 10^6 by default), and at each size:
 *
 *   arena_used   bytes in live records and the index (procreg_stats)
 *   arena_top    the arena's high-water mark (procreg_stats)
 *   file         the table file's allocated blocks (st_blocks * 512): the
 *                memory the table really takes, header page included
 *
 *   daemon       procregd's anonymous memory (smaps_rollup): its own
 *                maps of owners, pidfds and queues
 *
 * each divided by the number of names, beside the payload (name and
 * metadata bytes) and the in-process open-addressing table holding the
 * same names at the same capacity (baseline.c): slots plus packed records.
 * The target: file and daemon together at most 100 bytes a name beyond
 * the payload, at a million names and more.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

/* PID's anonymous memory in bytes, from /proc/PID/smaps_rollup; 0 if it
 * cannot be read. */
static uint64_t anon_bytes(pid_t pid)
{
	char path[64], line[256];
	uint64_t kb = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Anonymous: %llu kB", (unsigned long long *)&kb) == 1)
			break;
	fclose(f);
	return kb * 1024;
}

int cmd_memory(void)
{
	static const uint64_t def[] = { 10000, 100000, 1000000 };
	static const uint64_t def_quick[] = { 1000, 10000 };
	struct daemon_proc d;
	char maxn[32], path[PATH_MAX], meta[64];
	const char *args[] = { "--max-names-per-proc", maxn, NULL };
	uint64_t have = 0, max = 0, t_start = pr_mono_ns();
	procreg_t *reg = NULL;
	int rc = 2;

	if (!bo.nnames) {
		const uint64_t *src = bo.quick ? def_quick : def;

		bo.nnames = bo.quick ? 2 : 3;
		memcpy(bo.names_list, src, (size_t)bo.nnames * sizeof(*src));
	}
	for (int i = 0; i < bo.nnames; i++)
		if (bo.names_list[i] > max)
			max = bo.names_list[i];
	snprintf(maxn, sizeof(maxn), "%llu", (unsigned long long)(max + 1024));
	if (daemon_start(&d, BENCH_SCOPE, args) < 0)
		return 2;
	reg = bench_open(BENCH_SCOPE);
	if (!reg)
		goto out;
	snprintf(path, sizeof(path), "%s", procreg_table_path(reg));
	{
		struct qname q;

		name_of(&q, "svc", 0);
		hprintf("procreg-bench memory: names like \"%s\" (%zu bytes) with %zu bytes of "
			"metadata; table in %s\n", q.s, strlen(q.s), meta_of(meta, sizeof(meta), 0),
			env_dir());
	}
	hprintf("\n%12s %11s %11s %11s %9s %12s %11s %11s %11s %9s\n", "names", "arena_used",
		"arena_top", "file", "daemon", "index", "in-process", "payload", "overhead", "file");
	hprintf("%12s %11s %11s %11s %9s %12s %11s %11s %11s %9s\n", "", "B/name", "B/name",
		"B/name", "B/name", "slots", "B/name", "B/name", "B/name", "MiB");
	j_str("subcommand", "memory");
	j_arr("sizes");
	for (int i = 0; i < bo.nnames; i++) {
		uint64_t n = bo.names_list[i];
		PROCREG_OPTS(procreg_stats, st);
		struct stat sb;
		struct qname *names;
		struct oa_table *oa;
		int64_t got;
		double payload = 0, overhead;
		uint64_t anon;

		if (n < have) {
			fprintf(stderr, "procreg-bench: memory: --names must grow\n");
			goto out;
		}
		got = register_range(reg, "svc", have, n - have, false);
		if (got != (int64_t)(n - have)) {
			fprintf(stderr, "procreg-bench: registered %lld of %llu names\n",
				(long long)got, (unsigned long long)(n - have));
			goto out;
		}
		have = n;
		if (procreg_stats(reg, &st) < 0 || stat(path, &sb) < 0)
			goto out;
		names = calloc(n, sizeof(*names));
		if (!names)
			goto out;
		for (uint64_t k = 0; k < n; k++) {
			name_of(&names[k], "svc", k);
			payload += (double)strlen(names[k].s) + (double)meta_of(meta, sizeof(meta), k);
		}
		oa = oa_build(names, n, st.index_capacity, getpid());
		free(names);
		if (!oa)
			goto out;
		anon = anon_bytes(d.pid);
		overhead = ((double)sb.st_blocks * 512 + (double)anon - payload) / (double)n;
		hprintf("%12s %11.1f %11.1f %11.1f %9.1f %12s %11.1f %11.1f %11.1f %9.1f\n",
			fmt_count(n), (double)st.arena_used / (double)n,
			(double)st.arena_top / (double)n, (double)sb.st_blocks * 512 / (double)n,
			(double)anon / (double)n, fmt_count(st.index_capacity),
			(double)oa_bytes(oa) / (double)n, payload / (double)n, overhead,
			(double)sb.st_blocks * 512 / 1048576.0);
		j_obj(NULL);
		j_int("names", n);
		j_int("table_names", st.names);
		j_int("arena_used", st.arena_used);
		j_int("arena_top", st.arena_top);
		j_int("file_bytes", (uint64_t)sb.st_blocks * 512);
		j_int("index_capacity", st.index_capacity);
		j_num("arena_used_per_name", (double)st.arena_used / (double)n);
		j_num("arena_top_per_name", (double)st.arena_top / (double)n);
		j_num("file_bytes_per_name", (double)sb.st_blocks * 512 / (double)n);
		j_num("inprocess_bytes_per_name", (double)oa_bytes(oa) / (double)n);
		j_num("payload_bytes_per_name", payload / (double)n);
		j_int("daemon_anon_bytes", anon);
		j_num("overhead_bytes_per_name", overhead);
		j_end();
		if (n >= 1000000) {
			char what[160];

			snprintf(what, sizeof(what),
				 "memory beyond name and metadata, %s names (table + daemon)",
				 fmt_count(n));
			target(what, overhead, "<=", 100, " B/name");
		}
		oa_free(oa);
	}
	j_end();
	targets_report();
	hprintf("\ntotal %.1f s\n", (double)(pr_mono_ns() - t_start) / 1e9);
	j_num("seconds", (double)(pr_mono_ns() - t_start) / 1e9);
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "procreg-bench: memory: %s\n", strerror(errno));
	if (reg)
		procreg_close(reg);
	daemon_stop(&d);
	return rc;
}
