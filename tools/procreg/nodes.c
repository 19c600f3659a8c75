/*
 * nodes.c - procreg nodes, and the node names and bridge counters that get
 * and stats show: read from DIR/procreg.SCOPE.nodes, which procregd --node
 * rewrites (atomically) when a node comes or goes and once a tick. No file:
 * the daemon does not replicate.
 *
 *   procreg-nodes 1
 *   self NAME INCARNATION SEQ
 *   stats CHANGES_OUT CHANGES_IN CONFLICTS NODES_DOWN REFUSED
 *   node ID NAME ADDR INCARNATION UP_SINCE_NS CHANGES_IN BYTES_IN BYTES_OUT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "output.h"

#define NODES_MAX 4096

static int parse(procreg_t *reg, struct nodes_info *ni)
{
	char path[4200], line[512];
	FILE *f;
	int ok = 0;

	memset(ni, 0, sizeof(*ni));
	snprintf(path, sizeof(path), "%s.nodes", procreg_table_path(reg));
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		struct node_info n = { 0 };

		if (!strncmp(line, "procreg-nodes 1", 15)) {
			ok = 1;
		} else if (sscanf(line, "self %63s %16s %llu", ni->self, ni->incarnation,
				  &ni->seq) == 3) {
		} else if (sscanf(line, "stats %llu %llu %llu %llu %llu", &ni->changes_out,
				  &ni->changes_in, &ni->conflicts, &ni->nodes_down,
				  &ni->refused) == 5) {
		} else if (sscanf(line, "node %u %63s %127s %16s %llu %llu %llu %llu", &n.id, n.name,
				  n.addr, n.incarnation, &n.up_since_ns, &n.changes_in, &n.bytes_in,
				  &n.bytes_out) == 8) {
			struct node_info *v;

			if (ni->n >= NODES_MAX)
				continue;
			v = realloc(ni->v, (ni->n + 1) * sizeof(*v));
			if (!v)
				break;
			ni->v = v;
			ni->v[ni->n++] = n;
		}
	}
	fclose(f);
	return ok ? 0 : -EPROTO;
}

int nodes_read(procreg_t *reg, struct nodes_info *ni)
{
	int err = parse(reg, ni);

	if (err) {
		free(ni->v);
		memset(ni, 0, sizeof(*ni));
	}
	return err;
}

void nodes_free(struct nodes_info *ni)
{
	free(ni->v);
	ni->v = NULL;
}

const char *nodes_name(const struct nodes_info *ni, uint32_t id)
{
	if (id == 0)
		return ni->self[0] ? ni->self : NULL;
	for (size_t i = 0; i < ni->n; i++)
		if (ni->v[i].id == id)
			return ni->v[i].name;
	return NULL;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct node_info *)a)->name, ((const struct node_info *)b)->name);
}

int cmd_nodes(struct cli *c, int argc, char **argv)
{
	procreg_t *reg;
	struct nodes_info ni;
	struct timespec ts;
	double now;
	int err;

	if (argc != 0)
		die_usage("nodes: unexpected argument", argv[0]);
	reg = open_or_die(c);
	err = nodes_read(reg, &ni);
	if (err) {
		if (c->json)
			printf("{\"node\":null,\"nodes\":[]}\n");
		else
			fprintf(stderr, "%s: nodes: the daemon of scope '%s' does not replicate "
					"(procregd --node)\n", prog, scope_name(c));
		procreg_close(reg);
		return EXIT_NO;
	}
	if (ni.n)
		qsort(ni.v, ni.n, sizeof(*ni.v), by_name);
	clock_gettime(CLOCK_REALTIME, &ts);
	now = (double)ts.tv_sec + ts.tv_nsec / 1e9;
	if (c->json) {
		putchar('{');
		procreg__json_field(stdout, "node", ni.self, strlen(ni.self));
		printf(",\"incarnation\":\"%s\",\"seq\":%llu,\"nodes\":[", ni.incarnation, ni.seq);
		for (size_t i = 0; i < ni.n; i++) {
			const struct node_info *n = &ni.v[i];

			printf("%s{\"id\":%u,", i ? "," : "", n->id);
			procreg__json_field(stdout, "name", n->name, strlen(n->name));
			putchar(',');
			procreg__json_field(stdout, "addr", n->addr, strlen(n->addr));
			printf(",\"incarnation\":\"%s\",\"up_s\":%.3f,\"changes_in\":%llu,"
			       "\"bytes_in\":%llu,\"bytes_out\":%llu}",
			       n->incarnation, now - (double)n->up_since_ns / 1e9, n->changes_in,
			       n->bytes_in, n->bytes_out);
		}
		printf("]}\n");
	} else {
		printf("%-5s %-20s %-24s %-8s %10s\n", "ID", "NODE", "ADDRESS", "UP", "CHANGES");
		/* Names and addresses come from the daemon's file: escaped all
		 * the same, as everything a tool prints that it did not write. */
		printf("%-5s ", "0");
		procreg__text_pad(stdout, ni.self, strlen(ni.self), 20);
		printf(" %-24s %-8s %10llu (this node)\n", "-", "-", ni.seq);
		for (size_t i = 0; i < ni.n; i++) {
			const struct node_info *n = &ni.v[i];
			char up[32];

			snprintf(up, sizeof(up), "%.0fs", now - (double)n->up_since_ns / 1e9);
			printf("%-5u ", n->id);
			procreg__text_pad(stdout, n->name, strlen(n->name), 20);
			putchar(' ');
			procreg__text_pad(stdout, n->addr, strlen(n->addr), 24);
			printf(" %-8s %10llu\n", up, n->changes_in);
		}
	}
	nodes_free(&ni);
	procreg_close(reg);
	return 0;
}
