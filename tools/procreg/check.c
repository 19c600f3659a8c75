/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * check.c - procreg check: verify a scope's table without writing it.
 *
 * The verification itself is the library's (procreg_check(): every index
 * walked inside one read-side section, counters compared, owners checked
 * for life); this file reports it, in text or JSON. Problems quote names
 * as they are registered: they are printed escaped (output.h), in the text
 * and the JSON report alike.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "maps.h"
#include "output.h"

struct report {
	char **v;
	size_t n;
	size_t dropped;             /* problems that could not be kept */
};

static int keep_problem(const char *problem, void *arg)
{
	struct report *r = arg;
	char *e = NULL, **v;
	size_t len = 0;
	FILE *f = open_memstream(&e, &len);

	if (!f) {
		r->dropped++;
		return 0;
	}
	procreg__text(f, problem, strlen(problem));
	fclose(f);
	v = realloc(r->v, (r->n + 1) * sizeof(*v));
	if (!v) {
		free(e);
		r->dropped++;
		return 0;
	}
	r->v = v;
	r->v[r->n++] = e;
	return 0;
}

int cmd_check(struct cli *c, int argc, char **argv)
{
	PROCREG_OPTS(procreg_check, k);
	struct report r = { 0 };
	PROCREG_OPTS(procreg_stats, st);
	uint64_t rss, huge;
	const char *table;
	procreg_t *reg;
	bool bad, mapped;
	int err;

	if (argc != 0)
		die_usage("check: unexpected argument", argv[0]);
	reg = open_or_die(c);
	table = procreg_table_path(reg);
	err = procreg_check(reg, &k, keep_problem, &r);
	if (err == -EAGAIN) {
		fprintf(stderr, "%s: check: the table changed during each of its walks; try again "
			"when it is quieter\n", prog);
		procreg_close(reg);
		return EXIT_ERR;
	}
	if (err && err != -EUCLEAN) {
		fprintf(stderr, "%s: check: %s\n", prog, procreg_strerror(err));
		procreg_close(reg);
		return EXIT_ERR;
	}
	/* Problems not shown: past the library's limit, or not kept here. */
	r.dropped = (size_t)k.problems - r.n;
	bad = k.problems != 0;
	procreg_stats(reg, &st);
	/* What the walk brought into this process's mapping: every index
	 * and record of the table. Not said if smaps cannot tell. */
	mapped = pr_mapping_pages(table, &rss, &huge) == 0;
	if (c->json) {
		printf("{\"ok\":%s,\"table\":", bad ? "false" : "true");
		procreg__json_str(stdout, table, strlen(table));
		printf(",\"names\":%llu,\"groups\":%llu,\"memberships\":%llu,\"tombstones\":%llu,"
		       "\"processes\":%llu,\"daemon_pid\":%d,",
		       (unsigned long long)k.names, (unsigned long long)k.groups,
		       (unsigned long long)k.memberships, (unsigned long long)k.tombstones,
		       (unsigned long long)k.processes, (int)st.daemon_pid);
		if (mapped)
			printf("\"read_kib\":%llu,\"huge_kib\":%llu,", (unsigned long long)rss,
			       (unsigned long long)huge);
		printf("\"problems\":[");
		for (size_t i = 0; i < r.n; i++) {
			if (i)
				putchar(',');
			procreg__json_str(stdout, r.v[i], strlen(r.v[i]));
		}
		printf("],\"problems_not_shown\":%zu}\n", r.dropped);
	} else {
		for (size_t i = 0; i < r.n; i++)
			printf("%s: %s\n", table, r.v[i]);
		if (r.dropped)
			printf("%s: ... and %zu more problems\n", table, r.dropped);
		printf("%s: %s: %llu names, %llu groups, %llu memberships, %llu tombstones checked%s\n",
		       table, bad ? "DAMAGED" : "ok", (unsigned long long)k.names,
		       (unsigned long long)k.groups, (unsigned long long)k.memberships,
		       (unsigned long long)k.tombstones, bad ? "" : "; counters agree, owners alive");
		if (mapped)
			printf("%s: read %.1f MiB of it, %.1f MiB through huge pages\n", table,
			       (double)rss / 1024, (double)huge / 1024);
	}
	for (size_t i = 0; i < r.n; i++)
		free(r.v[i]);
	free(r.v);
	procreg_close(reg);
	return bad ? EXIT_NO : 0;
}
