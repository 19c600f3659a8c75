/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * nodes.c - procreg nodes, and the node names and bridge counters that get
 * and stats show: what procregd --node last published, read through
 * procreg_bridge(). Nothing published: the daemon does not replicate.
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

/* V, an array of N elements of SZ bytes, grown by one holding X: the
 * new array, or NULL (V untouched) for want of memory. */
static void *append(void *v, size_t n, const void *x, size_t sz)
{
	char *nv = realloc(v, (n + 1) * sz);

	if (nv)
		memcpy(nv + n * sz, x, sz);
	return nv;
}

static int add_node(const struct procreg_node *pn, void *arg)
{
	struct nodes_info *ni = arg;
	struct node_info n;
	void *v;

	memset(&n, 0, sizeof(n));
	n.id = pn->id;
	snprintf(n.name, sizeof(n.name), "%s", pn->name);
	snprintf(n.addr, sizeof(n.addr), "%s", pn->addr[0] ? pn->addr : "-");
	snprintf(n.incarnation, sizeof(n.incarnation), "%016llx",
		 (unsigned long long)pn->incarnation);
	n.up_since_ns = pn->up_since_ns;
	n.changes_in = pn->changes_in;
	n.bytes_in = pn->bytes_in;
	n.bytes_out = pn->bytes_out;
	if (ni->n >= NODES_MAX)
		return 0;
	if (!(v = append(ni->v, ni->n, &n, sizeof(n))))
		return -ENOMEM;
	ni->v = v;
	ni->n++;
	return 0;
}

static int add_peer(const struct procreg_peer *p, void *arg)
{
	struct nodes_info *ni = arg;
	void *v;

	if (ni->npeers >= NODES_MAX)
		return 0;
	if (!(v = append(ni->peers, ni->npeers, p, sizeof(*p))))
		return -ENOMEM;
	ni->peers = v;
	ni->npeers++;
	return 0;
}

int nodes_read(procreg_t *reg, struct nodes_info *ni)
{
	PROCREG_OPTS(procreg_bridge, b);
	int err;

	memset(ni, 0, sizeof(*ni));
	err = procreg_bridge(reg, &b, add_node, ni);
	if (!err)
		err = procreg_bridge_peers(reg, add_peer, ni);
	if (err) {
		free(ni->v);
		free(ni->peers);
		memset(ni, 0, sizeof(*ni));
		return err;
	}
	snprintf(ni->self, sizeof(ni->self), "%s", b.node);
	snprintf(ni->incarnation, sizeof(ni->incarnation), "%016llx",
		 (unsigned long long)b.incarnation);
	ni->seq = b.seq;
	ni->changes_out = b.changes_out;
	ni->changes_in = b.changes_in;
	ni->conflicts = b.conflicts;
	ni->nodes_down = b.nodes_down;
	ni->refused = b.resyncs;
	return 0;
}

void nodes_free(struct nodes_info *ni)
{
	free(ni->v);
	ni->v = NULL;
	free(ni->peers);
	ni->peers = NULL;
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
