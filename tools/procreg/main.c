/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * procreg - the command-line interface.
 *
 * Reading commands (get, ls, members, groups, stats, top, readers, check)
 * read the shared table directly and work while the daemon is down;
 * writing commands (run, join, unregister) go through procregd, and run
 * and join start one if none serves the scope. Exit status: 0 success, 1
 * "no" (name not found, name taken, check found damage), 2 error (bad
 * usage, no table, daemon unreachable, permission).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "procreg.h"
#include "procreg/version.h"
#include "cli.h"
#include "output.h"

const char *prog = "procreg";

void die_usage(const char *msg, const char *arg)
{
	fprintf(stderr, "%s: %s%s%s\nTry 'procreg --help'.\n", prog, msg, arg ? " " : "",
		arg ? cli_name(arg) : "");
	exit(EXIT_ERR);
}

const char *scope_name(const struct cli *c)
{
	return c->scope ? c->scope : (secure_getenv("PROCREG_SCOPE") ?: "default");
}

procreg_t *open_or_die(const struct cli *c)
{
	PROCREG_OPTS(procreg_opts, o, .scope = c->scope, .dir = c->dir,
		     .timeout_ms = c->timeout_ms);
	procreg_t *reg = procreg_open(&o);

	if (!reg) {
		int e = errno;

		if (e == ENOENT)
			fprintf(stderr, "%s: no registry for scope '%s' in %s: is procregd running?\n",
				prog, cli_name(scope_name(c)),
				cli_name(c->dir ? c->dir : (secure_getenv("PROCREG_DIR") ?: "/dev/shm")));
		else if (e == EPERM)
			fprintf(stderr, "%s: the registry of scope '%s' in %s is not one this user "
				"trusts: it belongs to a user other than root, you or procregd's "
				"system user (" PROCREG_DAEMON_USER_DEFAULT "), is writable by "
				"others, or is a symbolic link (see PROCREG_DAEMON_USER and "
				"PROCREG_TRUST_UID in procreg(1))\n",
				prog, cli_name(scope_name(c)),
				cli_name(c->dir ? c->dir : (secure_getenv("PROCREG_DIR") ?: "/dev/shm")));
		else
			fprintf(stderr, "%s: cannot open the registry: %s\n", prog,
				procreg_strerror(-e));
		exit(EXIT_ERR);
	}
	return reg;
}

const char *daemon_strerror(const struct cli *c, int err)
{
	static char buf[160];

	if (err != -ETIMEDOUT)
		return procreg_strerror(err);
	snprintf(buf, sizeof(buf), "procregd did not answer within %.1fs (stopped or hung? "
		 "'procreg ping' checks; --timeout waits longer)", c->timeout_ms / 1000.0);
	return buf;
}

/* ---- output ----------------------------------------------------------- */

const char *cli_name(const char *s)
{
	static char buf[4][PROCREG_TEXT_NAME_BUF];
	static unsigned k;
	char *b = buf[k++ % 4];

	return procreg__text_cut(b, sizeof(buf[0]), s, strlen(s), PROCREG_NAME_MAX);
}

/* W, or NAME's width as printed (escaped) if that is more. */
static int widen(int w, const char *name)
{
	size_t n = procreg__text_width(name, strlen(name));

	return n > (size_t)w ? (int)(n < 1000 ? n : 1000) : w;
}

static double age_s(const struct procreg_entry *e)
{
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_REALTIME, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	return now > e->registered_ns ? (double)(now - e->registered_ns) / 1e9 : 0.0;
}

static void fmt_age(char *buf, size_t len, double s)
{
	if (s < 60)
		snprintf(buf, len, "%.1fs", s);
	else if (s < 3600)
		snprintf(buf, len, "%dm%02ds", (int)s / 60, (int)s % 60);
	else if (s < 86400)
		snprintf(buf, len, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
	else
		snprintf(buf, len, "%dd%02dh", (int)(s / 86400), ((int)s % 86400) / 3600);
}

static void flags_json(uint32_t f)
{
	printf(",\"flags\":[%s%s%s]", f & PROCREG_ENTRY_REPLACEABLE ? "\"replaceable\"" : "",
	       f & PROCREG_ENTRY_LEASED ? (f & PROCREG_ENTRY_REPLACEABLE ? ",\"leased\"" : "\"leased\"") : "",
	       f & PROCREG_ENTRY_UNHEALTHY ? (f & (PROCREG_ENTRY_REPLACEABLE | PROCREG_ENTRY_LEASED)
						      ? ",\"unhealthy\"" : "\"unhealthy\"") : "");
}

static void entry_json(const struct procreg_entry *e)
{
	putchar('{');
	procreg__json_field(stdout, "name", e->name, strlen(e->name));
	printf(",\"pid\":%d,\"node\":%u,\"uid\":%u,\"start_time\":%llu,\"registered_ns\":%llu,"
	       "\"age_s\":%.3f,",
	       (int)e->pid, e->node, e->uid, (unsigned long long)e->start_time,
	       (unsigned long long)e->registered_ns, age_s(e));
	procreg__json_field(stdout, "meta", e->meta, e->meta_len);
	flags_json(e->flags);
	putchar('}');
}

static void member_json(const struct procreg_entry *e)
{
	putchar('{');
	procreg__json_field(stdout, "group", e->name, strlen(e->name));
	printf(",\"pid\":%d,\"node\":%u,\"uid\":%u,\"start_time\":%llu,\"joined_ns\":%llu,"
	       "\"age_s\":%.3f,",
	       (int)e->pid, e->node, e->uid, (unsigned long long)e->start_time,
	       (unsigned long long)e->registered_ns, age_s(e));
	procreg__json_field(stdout, "meta", e->meta, e->meta_len);
	putchar('}');
}

/* N entries as one JSON array, each written by ONE, and a newline. */
static void json_array(const struct procreg_entry *v, size_t n,
		       void (*one)(const struct procreg_entry *e))
{
	putchar('[');
	for (size_t i = 0; i < n; i++) {
		if (i)
			putchar(',');
		one(&v[i]);
	}
	printf("]\n");
}

static int by_pid(const void *a, const void *b)
{
	const struct procreg_entry *x = a, *y = b;

	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/* ---- commands --------------------------------------------------------- */

static int cmd_get(struct cli *c, int argc, char **argv)
{
	unsigned char meta[PROCREG_META_MAX];
	PROCREG_OPTS(procreg_entry, e, .meta = meta, .meta_size = sizeof(meta));
	char node[PROCREG_NODE_NAME_MAX + 1];
	bool have_node;
	procreg_t *reg;
	char age[32];
	int err;

	if (argc != 1)
		die_usage("get: expected one NAME", NULL);
	reg = open_or_die(c);
	err = procreg_lookup(reg, argv[0], &e);
	have_node = !err && procreg_node_name(reg, e.node, node, sizeof(node)) == 0;
	procreg_close(reg);
	if (err == -ENOENT) {
		if (!c->json)
			fprintf(stderr, "%s: %s: not registered\n", prog, cli_name(argv[0]));
		else
			printf("null\n");
		return EXIT_NO;
	}
	if (err) {
		fprintf(stderr, "%s: get %s: %s\n", prog, cli_name(argv[0]), procreg_strerror(err));
		return EXIT_ERR;
	}
	if (c->json) {
		entry_json(&e);
		putchar('\n');
		return 0;
	}
	fmt_age(age, sizeof(age), age_s(&e));
	{
		const char *nn = have_node ? node : NULL;

		fputs("name  ", stdout);
		procreg__text(stdout, e.name, strlen(e.name));
		printf("\npid   %d\nnode  %u (%s%s%s)\nuid   %u\nage   %s\nmeta  ", (int)e.pid,
		       e.node, nn ? cli_name(nn) : e.node ? "remote" : "local",
		       nn && !e.node ? ", " : "", nn && !e.node ? "local" : "", e.uid, age);
	}
	procreg__text(stdout, e.meta, e.meta_len);
	putchar('\n');
	if (e.flags)
		printf("flags%s%s%s\n", e.flags & PROCREG_ENTRY_REPLACEABLE ? " replaceable" : "",
		       e.flags & PROCREG_ENTRY_LEASED ? " leased" : "",
		       e.flags & PROCREG_ENTRY_UNHEALTHY ? " unhealthy" : "");
	return 0;
}

/* A growing array of whatever a walk reports, for sorting before output. */
struct collected {
	void *v;
	size_t n, cap, elem;
};

static int push(struct collected *c, const void *x)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		void *v = realloc(c->v, cap * c->elem);

		if (!v)
			return -ENOMEM;
		c->v = v;
		c->cap = cap;
	}
	memcpy((char *)c->v + c->n++ * c->elem, x, c->elem);
	return 0;
}

/* An entry kept past its callback: its metadata, which the library lends
 * for the callback only, copied to memory of its own (free_entries). */
static int collect(const struct procreg_entry *e, void *arg)
{
	struct collected *all = arg;
	struct procreg_entry *kept;
	void *meta = malloc(e->meta_len ? e->meta_len : 1);

	if (!meta || push(all, e)) {
		free(meta);
		return -ENOMEM;
	}
	kept = (struct procreg_entry *)all->v + all->n - 1;
	memcpy(meta, e->meta, e->meta_len);
	kept->meta = meta;
	kept->meta_size = e->meta_len;
	return 0;
}

static void free_entries(struct collected *all)
{
	for (size_t i = 0; i < all->n; i++)
		free(((struct procreg_entry *)all->v)[i].meta);
	free(all->v);
}

static int collect_group(const struct procreg_group *g, void *arg)
{
	return push(arg, g);
}

/* Open the registry, walk what WHAT lists (GROUP's members for
 * "members") into ALL, close it, sort with CMP. 0, or -1 after saying
 * why. */
static int gather(struct cli *c, const char *what, const char *group, struct collected *all,
		  int (*cmp)(const void *, const void *))
{
	procreg_t *reg = open_or_die(c);
	int err;

	if (!strcmp(what, "groups"))
		err = procreg_groups(reg, collect_group, all);
	else if (group)
		err = procreg_members(reg, group, collect, all);
	else
		err = procreg_foreach(reg, collect, all);
	procreg_close(reg);
	if (err) {
		fprintf(stderr, "%s: %s%s%s: %s\n", prog, what, group ? " " : "",
			group ? cli_name(group) : "", procreg_strerror(err));
		if (strcmp(what, "groups"))
			free_entries(all);
		else
			free(all->v);
		return -1;
	}
	if (all->n)
		qsort(all->v, all->n, all->elem, cmp);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct procreg_entry *)a)->name,
		      ((const struct procreg_entry *)b)->name);
}

static int cmd_ls(struct cli *c, int argc, char **argv)
{
	struct collected all = { .elem = sizeof(struct procreg_entry) };
	struct procreg_entry *v;
	int w = 4;

	(void)argv;
	if (argc != 0)
		die_usage("ls: unexpected argument", argv[0]);
	if (gather(c, "ls", NULL, &all, by_name))
		return EXIT_ERR;
	v = all.v;
	if (c->json) {
		json_array(v, all.n, entry_json);
	} else {
		for (size_t i = 0; i < all.n; i++)
			w = widen(w, v[i].name);
		if (w > 40)
			w = 40;
		if (isatty(1))
			printf("%-*s %8s %5s %8s  %s\n", w, "NAME", "PID", "NODE", "AGE", "META");
		for (size_t i = 0; i < all.n; i++) {
			char age[32];

			fmt_age(age, sizeof(age), age_s(&v[i]));
			procreg__text_pad(stdout, v[i].name, strlen(v[i].name), w);
			printf(" %8d %5u %8s  ", (int)v[i].pid, v[i].node, age);
			procreg__text(stdout, v[i].meta, v[i].meta_len);
			putchar('\n');
		}
	}
	free_entries(&all);
	return 0;
}

/* unregister and refresh: one NAME, one request, the same exit statuses
 * (1: not registered). EINVAL_WHY explains -EINVAL, if it has a meaning
 * of its own for WHAT. */
static int name_cmd(struct cli *c, const char *what, int argc, char **argv,
		    int (*fn)(procreg_t *, const char *), const char *einval_why)
{
	procreg_t *reg;
	int err;

	if (argc != 1) {
		fprintf(stderr, "%s: %s: expected one NAME\nTry 'procreg --help'.\n", prog, what);
		exit(EXIT_ERR);
	}
	reg = open_or_die(c);
	err = fn(reg, argv[0]);
	procreg_close(reg);
	if (err == -ENOENT) {
		fprintf(stderr, "%s: %s: not registered\n", prog, cli_name(argv[0]));
		return EXIT_NO;
	}
	if (err) {
		fprintf(stderr, "%s: %s %s: %s\n", prog, what, cli_name(argv[0]),
			err == -EINVAL && einval_why ? einval_why : daemon_strerror(c, err));
		return EXIT_ERR;
	}
	return 0;
}

static int cmd_unregister(struct cli *c, int argc, char **argv)
{
	return name_cmd(c, "unregister", argc, argv, procreg_unregister, NULL);
}

/* What procreg_ping() said, in one word (stats). */
static const char *health_word(int err)
{
	return !err ? "answering" : err == -ETIMEDOUT ? "not answering"
		    : err == -ECONNREFUSED ? "not running" : "unreachable";
}

static int cmd_ping(struct cli *c, int argc, char **argv)
{
	PROCREG_OPTS(procreg_stats, s);
	procreg_t *reg;
	int err;

	if (argc != 0)
		die_usage("ping: unexpected argument", argv[0]);
	reg = open_or_die(c);
	err = procreg_ping(reg, c->timeout_ms);
	procreg_stats(reg, &s);
	procreg_close(reg);
	if (c->json) {
		printf("{\"scope\":\"%s\",\"daemon_pid\":%d,\"answered\":%s,\"health\":\"%s\"}\n",
		       scope_name(c), (int)s.daemon_pid, err ? "false" : "true",
		       health_word(err));
	} else if (!err) {
		printf("procregd pid %d answered (scope %s)\n", (int)s.daemon_pid,
		       cli_name(scope_name(c)));
	} else if (err == -ETIMEDOUT) {
		fprintf(stderr, "%s: ping: procregd pid %d did not answer within %.1fs (stopped or "
			"hung?)\n", prog, (int)s.daemon_pid, c->timeout_ms / 1000.0);
	} else {
		fprintf(stderr, "%s: ping: scope %s: %s\n", prog, cli_name(scope_name(c)),
			procreg_strerror(err));
	}
	return err == -ETIMEDOUT || err == -ECONNREFUSED ? EXIT_NO : err ? EXIT_ERR : 0;
}

static int cmd_stats(struct cli *c, int argc, char **argv)
{
	PROCREG_OPTS(procreg_stats, s);
	PROCREG_OPTS(procreg_reader_check, rs);
	PROCREG_OPTS(procreg_bridge, b);
	bool bridged;
	struct timespec now;
	uint64_t now_ns;
	procreg_t *reg;
	double up = 0;
	int health;

	if (argc != 0)
		die_usage("stats: unexpected argument", argv[0]);
	if (c->format && !strcmp(c->format, "json"))
		c->json = 1;
	else if (c->format && strcmp(c->format, "text") && strcmp(c->format, "prometheus"))
		die_usage("stats: --format: want text, json or prometheus, not", c->format);
	reg = open_or_die(c);
	if (c->format && !strcmp(c->format, "prometheus")) {
		stats_prometheus(reg, c);
		procreg_close(reg);
		return 0;
	}
	procreg_stats(reg, &s);
	procreg_reader_check(reg, &rs);
	/* The table says a daemon started; a round trip says it works. */
	health = s.daemon_pid ? procreg_ping(reg, c->timeout_ms) : -ECONNREFUSED;
	/* Bridge counters, when the daemon replicates. */
	bridged = procreg_bridge(reg, &b, NULL, NULL) == 0;
	clock_gettime(CLOCK_REALTIME, &now);
	now_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
	if (s.daemon_pid)
		up = (double)now.tv_sec + now.tv_nsec / 1e9 - (double)s.daemon_started_ns / 1e9;
#define STAT_FIELDS(X)                                  \
	X(names) X(groups) X(memberships) X(processes)    \
	X(arena_size) X(arena_used)                       \
	X(arena_top) X(index_capacity) X(grace_periods)    \
	X(registrations) X(unregistrations) X(joins)      \
	X(leaves) X(deaths)                               \
	X(reader_slots) X(reader_slots_used)
	if (c->json) {
		printf("{");
#define J(f) printf("\"" #f "\":%llu,", (unsigned long long)s.f);
		STAT_FIELDS(J)
		printf("\"readers_stalled\":%u,\"reader_stalls\":%llu,\"readers_refused\":%llu,"
		       "\"last_stall\":{\"pid\":%u,\"uid\":%u,\"time_ns\":%llu},",
		       rs.stalled, (unsigned long long)rs.stalls, (unsigned long long)rs.refused,
		       (unsigned)rs.last_stall_pid, rs.last_stall_uid,
		       (unsigned long long)rs.last_stall_ns);
		printf("\"daemon_pid\":%d,\"daemon_uptime_s\":%.3f,\"daemon_health\":\"%s\","
		       "\"table\":", (int)s.daemon_pid, up, health_word(health));
		procreg__json_str(stdout, procreg_table_path(reg), strlen(procreg_table_path(reg)));
		if (bridged) {
			printf(",\"bridge\":{");
			procreg__json_field(stdout, "node", b.node, strlen(b.node));
			printf(",\"nodes_up\":%u,\"changes_out\":%llu,\"changes_in\":%llu,"
			       "\"conflicts\":%llu,\"nodes_down\":%llu,\"resyncs\":%llu}",
			       b.nodes, (unsigned long long)b.changes_out,
			       (unsigned long long)b.changes_in, (unsigned long long)b.conflicts,
			       (unsigned long long)b.nodes_down, (unsigned long long)b.resyncs);
		}
		printf("}\n");
	} else {
#define T(f) printf("%-18s %llu\n", #f, (unsigned long long)s.f);
		STAT_FIELDS(T)
		printf("%-18s %u\n%-18s %llu", "readers_stalled", rs.stalled, "reader_stalls",
		       (unsigned long long)rs.stalls);
		if (rs.stalls)
			printf(" (last: pid %u, uid %u, %.1fs ago)", (unsigned)rs.last_stall_pid,
			       rs.last_stall_uid,
			       rs.last_stall_ns && now_ns > rs.last_stall_ns
				       ? (double)(now_ns - rs.last_stall_ns) / 1e9 : 0.0);
		printf("\n%-18s %llu\n", "readers_refused", (unsigned long long)rs.refused);
		if (s.daemon_pid)
			printf("%-18s %d (up %.1fs)\n", "daemon_pid", (int)s.daemon_pid, up);
		else
			printf("%-18s not running\n", "daemon_pid");
		if (health == -ETIMEDOUT)
			printf("%-18s not answering (no reply within %.1fs)\n", "daemon_health",
			       c->timeout_ms / 1000.0);
		else
			printf("%-18s %s\n", "daemon_health", health_word(health));
		printf("%-18s %s\n", "table", procreg_table_path(reg));
	}
	if (!c->json && bridged)
		printf("%-18s %s\n%-18s %u\n%-18s %llu\n%-18s %llu\n%-18s %llu\n"
		       "%-18s %llu\n%-18s %llu\n", "bridge_node", cli_name(b.node), "bridge_nodes_up",
		       b.nodes, "bridge_changes_out", (unsigned long long)b.changes_out,
		       "bridge_changes_in", (unsigned long long)b.changes_in, "bridge_conflicts",
		       (unsigned long long)b.conflicts, "bridge_nodes_down",
		       (unsigned long long)b.nodes_down, "bridge_resyncs",
		       (unsigned long long)b.resyncs);
	procreg_close(reg);
	return 0;
}

/* Undo what claim() did, up to name N and group G. */
static void unclaim(procreg_t *reg, char **names, int n, const struct cli *c, int g)
{
	for (int k = 0; k < n; k++)
		procreg_unregister(reg, names[k]);
	for (int k = 0; k < g; k++)
		procreg_leave(reg, c->groups[k]);
}

/* --on-lost: a signal by name (TERM, SIGTERM) or number, or "none" (0);
 * -1 if it is neither. */
static int signal_arg(const char *s)
{
	char *end;
	long n;

	if (!strcmp(s, "none"))
		return 0;
	if (!strncmp(s, "SIG", 3))
		s += 3;
	for (int sig = 1; sig < NSIG; sig++) {
		const char *abbrev = sigabbrev_np(sig);

		if (abbrev && !strcmp(abbrev, s))
			return sig;
	}
	n = strtol(s, &end, 10);
	return end != s && !*end && n > 0 && n < NSIG ? (int)n : -1;
}

/* Register the names and join the groups, all or nothing; with --queue,
 * wait in line for names that are taken. */
static int claim(procreg_t *reg, const char *what, char **names, int n, const struct cli *c)
{
	PROCREG_OPTS(procreg_register_opts, ro, .flags = c->reg_flags);
	const char *m = c->meta ? c->meta : "";
	size_t mlen = c->meta ? c->meta_len : 0;
	int err;

	ro.lost_signal = c->lost_signal;
	if (c->ttl) {
		char *end;
		double s = strtod(c->ttl, &end);

		if (end == c->ttl || *end || s <= 0 || s > 4e6) {
			fprintf(stderr, "%s: %s: --ttl %s: want seconds > 0\n", prog, what,
				cli_name(c->ttl));
			return EXIT_ERR;
		}
		ro.lease_ms = (uint32_t)(s * 1000 + 0.5) ?: 1;
	}
	for (int i = 0; i < n; i++) {
		err = procreg_register_opts(reg, names[i], m, mlen, &ro);
		if (err == -EINPROGRESS) {
			fprintf(stderr, "%s: %s: '%s' is taken: waiting in line for it\n", prog, what,
				cli_name(names[i]));
			err = procreg_wait_owner(reg, names[i], -1);
		}
		if (!err)
			continue;
		{
			PROCREG_OPTS(procreg_entry, e);
			char node[PROCREG_NODE_NAME_MAX + 1], where[PROCREG_NODE_NAME_MAX * 4 + 32];

			if (err == -EEXIST && procreg_lookup(reg, names[i], &e) == 0) {
				/* A pid means something on its own node only. */
				if (e.node == 0)
					snprintf(where, sizeof(where), "this node");
				else if (procreg_node_name(reg, e.node, node, sizeof(node)) == 0)
					snprintf(where, sizeof(where), "node '%s'", cli_name(node));
				else
					snprintf(where, sizeof(where), "node %u", e.node);
				fprintf(stderr, "%s: %s: name '%s' is held by pid %d on %s\n", prog,
					what, cli_name(names[i]), (int)e.pid, where);
			} else {
				fprintf(stderr, "%s: %s: register '%s': %s\n", prog, what,
					cli_name(names[i]), daemon_strerror(c, err));
			}
		}
		unclaim(reg, names, i, c, 0);
		return err == -EEXIST ? EXIT_NO : EXIT_ERR;
	}
	for (int g = 0; g < c->ngroups; g++) {
		err = procreg_join(reg, c->groups[g], m, mlen);
		if (!err)
			continue;
		fprintf(stderr, "%s: %s: join '%s': %s\n", prog, what, cli_name(c->groups[g]),
			daemon_strerror(c, err));
		unclaim(reg, names, n, c, g);
		return EXIT_ERR;
	}
	return 0;
}

/* run and join: claim the N names (groups) of ARGV, then exec the command
 * after "--" (c->cmd). */
static int claim_and_exec(struct cli *c, const char *what, int n, char **argv, bool groups)
{
	procreg_t *reg;
	int err;

	if (n == 0) {
		fprintf(stderr, "%s: %s: expected %s -- CMD\nTry 'procreg --help'.\n", prog, what,
			groups ? "GROUP [GROUP...]" : "NAME [NAME...]");
		return EXIT_ERR;
	}
	if (!c->cmd || !c->cmd[0]) {
		fprintf(stderr, "%s: %s: expected -- CMD after the %s\nTry 'procreg --help'.\n",
			prog, what, groups ? "groups" : "names");
		return EXIT_ERR;
	}
	if (groups) {
		/* join's words are groups: claim them as groups, no names. */
		if (n > MAX_GROUPS - c->ngroups) {
			fprintf(stderr, "%s: %s: at most %d groups\n", prog, what, MAX_GROUPS);
			return EXIT_ERR;
		}
		for (int i = 0; i < n; i++)
			c->groups[c->ngroups++] = argv[i];
	}
	/* A process that lost its name to another node's earlier
	 * registration would go on as if it held it: by default procregd
	 * asks it to stop, as Erlang's global kills the loser of a clash. */
	c->lost_signal = signal_arg(c->on_lost ? c->on_lost : "TERM");
	if (c->lost_signal < 0) {
		fprintf(stderr, "%s: %s: --on-lost %s: want a signal (TERM, KILL, USR1, 15...) or "
			"none\n", prog, what, c->on_lost);
		return EXIT_ERR;
	}
	if ((err = autostart(c, what)))
		return err;
	reg = open_or_die(c);
	err = claim(reg, what, argv, groups ? 0 : n, c);
	/* Close first: the handle's reader slot must not outlive it in a
	 * process that goes on as CMD. */
	procreg_close(reg);
	if (err)
		return err;
	execvp(c->cmd[0], c->cmd);
	err = errno;
	fprintf(stderr, "%s: %s: %s: %s\n", prog, what, cli_name(c->cmd[0]), strerror(err));
	{
		/* Take the names back now: left to our exit, they could still
		 * be held when the caller retries, before procregd saw it. */
		PROCREG_OPTS(procreg_opts, o, .scope = c->scope, .dir = c->dir);

		if ((reg = procreg_open(&o))) {
			unclaim(reg, argv, groups ? 0 : n, c, c->ngroups);
			procreg_close(reg);
		}
	}
	/* As env(1) and nohup(1): 127 not found, 126 found but not runnable. */
	return err == ENOENT ? 127 : 126;
}

static int cmd_refresh(struct cli *c, int argc, char **argv)
{
	return name_cmd(c, "refresh", argc, argv, procreg_refresh, "it has no lease");
}

static int cmd_run(struct cli *c, int argc, char **argv)
{
	return claim_and_exec(c, "run", argc, argv, false);
}

static int cmd_join(struct cli *c, int argc, char **argv)
{
	return claim_and_exec(c, "join", argc, argv, true);
}

static int cmd_members(struct cli *c, int argc, char **argv)
{
	struct collected all = { .elem = sizeof(struct procreg_entry) };
	struct procreg_entry *v;

	if (argc != 1)
		die_usage("members: expected one GROUP", NULL);
	if (gather(c, "members", argv[0], &all, by_pid))
		return EXIT_ERR;
	v = all.v;
	if (c->json) {
		json_array(v, all.n, member_json);
	} else {
		if (isatty(1))
			printf("%8s %5s %8s  %s\n", "PID", "NODE", "AGE", "META");
		for (size_t i = 0; i < all.n; i++) {
			char age[32];

			fmt_age(age, sizeof(age), age_s(&v[i]));
			printf("%8d %5u %8s  ", (int)v[i].pid, v[i].node, age);
			procreg__text(stdout, v[i].meta, v[i].meta_len);
			putchar('\n');
		}
	}
	free_entries(&all);
	/* "[]" for a script, and exit 1 as documented, like get's "null". */
	return all.n ? 0 : EXIT_NO;
}

static int group_by_name(const void *a, const void *b)
{
	return strcmp(((const struct procreg_group *)a)->name,
		      ((const struct procreg_group *)b)->name);
}

static int cmd_groups(struct cli *c, int argc, char **argv)
{
	struct collected all = { .elem = sizeof(struct procreg_group) };
	struct procreg_group *v;
	int w = 5;

	if (argc != 0)
		die_usage("groups: unexpected argument", argv[0]);
	if (gather(c, "groups", NULL, &all, group_by_name))
		return EXIT_ERR;
	v = all.v;
	if (c->json) {
		putchar('[');
		for (size_t i = 0; i < all.n; i++) {
			printf("%s{", i ? "," : "");
			procreg__json_field(stdout, "name", v[i].name, strlen(v[i].name));
			printf(",\"members\":%llu,\"local_members\":%llu}",
			       (unsigned long long)v[i].members,
			       (unsigned long long)v[i].local_members);
		}
		printf("]\n");
	} else {
		for (size_t i = 0; i < all.n; i++)
			w = widen(w, v[i].name);
		if (w > 40)
			w = 40;
		if (isatty(1))
			printf("%-*s %8s %8s\n", w, "GROUP", "MEMBERS", "LOCAL");
		for (size_t i = 0; i < all.n; i++) {
			procreg__text_pad(stdout, v[i].name, strlen(v[i].name), w);
			printf(" %8llu %8llu\n", (unsigned long long)v[i].members,
			       (unsigned long long)v[i].local_members);
		}
	}
	free(all.v);
	return 0;
}

static const char *event_name(int type)
{
	switch (type) {
	case PROCREG_EV_REGISTERED: return "registered";
	case PROCREG_EV_UNREGISTERED: return "unregistered";
	case PROCREG_EV_UPDATED: return "updated";
	case PROCREG_EV_JOINED: return "joined";
	case PROCREG_EV_LEFT: return "left";
	case PROCREG_EV_DIED: return "died";
	case PROCREG_EV_TRANSFERRED: return "transferred";
	case PROCREG_EV_REPLACED: return "replaced";
	case PROCREG_EV_EXPIRED: return "expired";
	case PROCREG_EV_REFRESHED: return "refreshed";
	case PROCREG_EV_NODE_DOWN: return "node-down";
	case PROCREG_EV_CONFLICT: return "conflict";
	default: return "unknown";
	}
}

static volatile sig_atomic_t interrupted;

/* The longest one wait for an event lasts. A signal ends the wait it
 * lands in (no SA_RESTART), but one that lands after the loop's check and
 * before the wait begins would leave the watch waiting for the next event,
 * maybe for ever: the check comes round again at least this often. */
#define WATCH_TICK_MS 200

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static int cmd_watch(struct cli *c, int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART: the wait returns */
	PROCREG_OPTS(procreg_event, ev);
	const char *pattern = argc ? argv[0] : NULL;
	procreg_t *reg;
	uint64_t cursor;
	int err = 0;

	if (argc > 1)
		die_usage("watch: expected at most one PATTERN", NULL);
	reg = open_or_die(c);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	cursor = procreg_feed_head(reg);
	while (!interrupted) {
		err = procreg_next_event(reg, &cursor, &ev, WATCH_TICK_MS);
		if (err == -EINTR)
			break;
		if (err == -ETIMEDOUT) {
			err = 0;
			continue;
		}
		if (err == -EOVERFLOW) {
			/* Said on both streams: a script reading JSON sees it. */
			fprintf(stderr, "%s: watch: lapped: events up to %llu were overwritten before "
				"they were read; re-read the table\n", prog, (unsigned long long)cursor);
			if (c->json)
				printf("{\"lapped\":true,\"resume_seq\":%llu}\n",
				       (unsigned long long)cursor + 1);
			fflush(stdout);
			continue;
		}
		if (err) {
			fprintf(stderr, "%s: watch: %s\n", prog, procreg_strerror(err));
			break;
		}
		if (pattern && fnmatch(pattern, ev.name, 0))
			continue;
		if (c->json) {
			printf("{\"seq\":%llu,\"time_ns\":%llu,\"event\":\"%s\",",
			       (unsigned long long)ev.seq, (unsigned long long)ev.time_ns,
			       event_name(ev.type));
			procreg__json_field(stdout, ev.is_group ? "group" : "name", ev.name,
					    strlen(ev.name));
			printf(",\"pid\":%d,\"node\":%u,\"uid\":%u}\n", (int)ev.pid, ev.node, ev.uid);
		} else {
			time_t t = (time_t)(ev.time_ns / 1000000000ull);
			struct tm tm;

			localtime_r(&t, &tm);
			printf("%llu %02d:%02d:%02d.%03d %-12s %s", (unsigned long long)ev.seq,
			       tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ev.time_ns / 1000000 % 1000),
			       event_name(ev.type), ev.is_group ? "group " : "");
			procreg__text(stdout, ev.name, strlen(ev.name));
			printf(" pid %d node %u\n", (int)ev.pid, ev.node);
		}
		fflush(stdout);
	}
	procreg_close(reg);
	return err && err != -EINTR ? EXIT_ERR : 0;
}

static int parse_number(const char *s, const char *what, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	if (errno || end == s || *end || *out < 0 || *out > 1e9) {
		fprintf(stderr, "%s: wait: %s %s: want a non-negative number\n", prog, what,
			cli_name(s));
		return -1;
	}
	return 0;
}

static int cmd_wait(struct cli *c, int argc, char **argv)
{
	double timeout_s = 0, n = 1;
	uint64_t timeout_ms, count;
	procreg_t *reg;
	int err;

	if ((c->timeout && parse_number(c->timeout, "--timeout", &timeout_s) < 0) ||
	    (c->count && parse_number(c->count, "--count", &n) < 0))
		return EXIT_ERR;
	timeout_ms = (uint64_t)(timeout_s * 1000);
	count = (uint64_t)n;
	if (c->ngroups > 1 || (c->ngroups == 1) == (argc == 1) || argc > 1)
		die_usage("wait: expected NAME, or --group GROUP [--count N]", NULL);
	if (c->count && !c->ngroups)
		die_usage("wait: --count goes with --group", NULL);
	if (timeout_ms > INT32_MAX)
		timeout_ms = INT32_MAX;
	reg = open_or_die(c);
	if (c->ngroups)
		err = procreg_wait_group(reg, c->groups[0], count, c->timeout ? (int)timeout_ms : -1);
	else
		err = procreg_wait(reg, argv[0], c->timeout ? (int)timeout_ms : -1);
	procreg_close(reg);
	if (err == -ETIMEDOUT)
		return EXIT_NO;
	if (err) {
		fprintf(stderr, "%s: wait: %s\n", prog, procreg_strerror(err));
		return EXIT_ERR;
	}
	return 0;
}

/* --escaped: decode S in place, a NAME, GROUP or PATTERN (WHAT), which
 * cannot hold NUL; or with LEN, metadata, which can. 0, or EXIT_ERR after
 * saying why. */
static int unescape_arg(char *s, const char *what, size_t *len)
{
	size_t n, bad;

	if (procreg__unescape(s, &n, &bad) < 0) {
		fprintf(stderr, "%s: --escaped: %s: bad escape at byte %zu (want \\\\, \\n, \\t, \\r "
			"or \\xHH)\n", prog, what, bad);
		return EXIT_ERR;
	}
	if (len)
		*len = n;
	else if (n != strlen(s)) {
		fprintf(stderr, "%s: --escaped: %s: holds a NUL byte (\\x00)\n", prog, what);
		return EXIT_ERR;
	}
	return 0;
}

/* With --escaped, the operands (K of them, called WHAT), --group and
 * --meta are decoded. 0 or EXIT_ERR. */
static int unescape_args(struct cli *c, const char *what, int k, char **args)
{
	int err = 0;

	for (int i = 0; i < k && !err; i++)
		err = unescape_arg(args[i], what, NULL);
	for (int g = 0; g < c->ngroups && !err; g++)
		err = unescape_arg(c->groups[g], "GROUP", NULL);
	if (c->meta && !err)
		err = unescape_arg(c->meta, "--meta", &c->meta_len);
	return err;
}

static void usage(FILE *f);

static int cmd_help(struct cli *c, int argc, char **argv)
{
	(void)c, (void)argc, (void)argv;
	usage(stdout);
	return 0;
}

static int cmd_version(struct cli *c, int argc, char **argv)
{
	(void)c, (void)argc, (void)argv;
	printf("procreg %s\n", PROCREG_VERSION_STRING);
	return 0;
}

/* The commands: what runs each, and its lines of --help, in the order
 * --help lists them. */
static const struct command {
	const char *name;
	int (*run)(struct cli *c, int argc, char **argv);
	const char *operand;        /* what --escaped calls its operands */
	bool claims;                /* run, join: "-- CMD" follows the names */
	const char *help;
} commands[] = {
	{ "run", cmd_run, "NAME", true,
	  "  run NAME [NAME...] [--meta STR] [--group G]... [--queue] [--replace]\n"
	  "      [--replaceable] [--ttl SECONDS [--lease-mark]] [--on-lost SIGNAL|none]\n"
	  "      [--no-autostart] -- CMD [ARGS]\n"
	  "                      register this process under the names (and join the\n"
	  "                      groups), then exec CMD (same pid: they live exactly\n"
	  "                      as long as CMD). --queue: if a name is taken, wait\n"
	  "                      in line for it; --replace: take over a replaceable\n"
	  "                      owner; --ttl: a lease CMD keeps with 'refresh';\n"
	  "                      --on-lost: the signal CMD gets if it loses a name to\n"
	  "                      another node's earlier registration (default TERM)\n" },
	{ "refresh", cmd_refresh, "NAME", false,
	  "  refresh NAME        renew NAME's lease (its owner's uid, or root)\n" },
	{ "join", cmd_join, "GROUP", true,
	  "  join GROUP [GROUP...] [--meta STR] [--no-autostart] -- CMD [ARGS]\n"
	  "                      join the groups, then exec CMD. run and join start\n"
	  "                      procregd for the scope if none serves it, unless\n"
	  "                      --no-autostart or PROCREG_NO_AUTOSTART=1\n" },
	{ "members", cmd_members, "GROUP", false,
	  "  members GROUP [--json]\n"
	  "                      list a group's members; exit 1 if it has none\n" },
	{ "groups", cmd_groups, "NAME", false,
	  "  groups [--json]     list every group with its member counts\n" },
	{ "watch", cmd_watch, "PATTERN", false,
	  "  watch [--json] [PATTERN]\n"
	  "                      follow the change feed (names matching the shell\n"
	  "                      PATTERN), one line or JSON object per event, until\n"
	  "                      interrupted\n" },
	{ "wait", cmd_wait, "NAME", false,
	  "  wait NAME [--timeout SECONDS]\n"
	  "  wait --group GROUP [--count N] [--timeout SECONDS]\n"
	  "                      return once NAME is registered (GROUP has N members,\n"
	  "                      default 1); exit 1 on timeout\n" },
	{ "get", cmd_get, "NAME", false,
	  "  get NAME [--json]   show a name's owner; exit 1 if not registered\n" },
	{ "ls", cmd_ls, "NAME", false,
	  "  ls [--json]         list every name\n" },
	{ "unregister", cmd_unregister, "NAME", false,
	  "  unregister NAME     remove a name (its owner, its owner's uid, or root)\n" },
	{ "ping", cmd_ping, "NAME", false,
	  "  ping [--json]       a round trip to procregd: exit 0 if it answered within\n"
	  "                      --timeout (default 1 s), 1 if it did not or none runs\n" },
	{ "stats", cmd_stats, "NAME", false,
	  "  stats [--json] [--format text|json|prometheus]\n"
	  "                      table and daemon counters; prometheus: the text\n"
	  "                      exposition format (node_exporter textfile collector)\n" },
	{ "top", cmd_top, "NAME", false,
	  "  top [--once] [--json] [--interval SECONDS]\n"
	  "                      live counters and rates: names, groups, processes,\n"
	  "                      registrations/s, deaths/s, grace periods/s, arena\n"
	  "                      use, lookups/s of each reader process; --once: one\n"
	  "                      frame; --json: one object per tick\n" },
	{ "readers", cmd_readers, "NAME", false,
	  "  readers [--json]    every reader process procregd waits for: pid, uid,\n"
	  "                      command, reading threads, threads inside a read-side\n"
	  "                      section, lookups; flags those it stopped waiting for\n"
	  "                      (stalled: they held a grace period up too long)\n" },
	{ "check", cmd_check, "NAME", false,
	  "  check [--json]      verify the table read-only: indexes walkable, offsets\n"
	  "                      inside the arena, counters equal to a full walk,\n"
	  "                      owners alive; exit 1 with a report on damage\n" },
	{ "nodes", cmd_nodes, "NAME", false,
	  "  nodes [--json]      the nodes the daemon replicates with (procregd --node)\n" },
	{ "help", cmd_help, "NAME", false,
	  "  help                this help\n" },
	{ "version", cmd_version, "NAME", false,
	  "  version             print the version\n" },
};

static const struct command *command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

static void usage(FILE *f)
{
	fputs("Usage: procreg [--scope NAME] [--dir DIR] COMMAND [ARGS]\n"
	      "\n"
	      "Commands:\n", f);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fputs(commands[i].help, f);
	fputs("\n"
	      "Options, before or after the command word (a command refuses one that\n"
	      "does not apply to it):\n"
	      "  -s, --scope NAME    scope (default: $PROCREG_SCOPE or \"default\")\n"
	      "  -d, --dir DIR       table directory (default: $PROCREG_DIR or /dev/shm)\n"
	      "  -j, --json          JSON output\n"
	      "  -t, --timeout SECONDS\n"
	      "                      how long to wait for each answer of procregd (run,\n"
	      "                      join, refresh, unregister: default 10 s; ping, stats:\n"
	      "                      1 s); wait: how long to wait in all\n"
	      "  -e, --escaped       NAME, GROUP, PATTERN, --group and --meta are in the\n"
	      "                      escaped form that text output uses: \\\\, \\n, \\t, \\r\n"
	      "                      and \\xHH stand for the bytes they escape\n"
	      "  -h, --help          help\n"
	      "  --                  ends the options: a NAME beginning with '-' goes after\n"
	      "                      it (run and join: -- NAME... -- CMD [ARGS])\n"
	      "\n"
	      "Text output escapes control bytes, backslashes and bytes that are not UTF-8\n"
	      "in names, groups and metadata (see procreg(1), OUTPUT); JSON output adds\n"
	      "\"name_base64\" (\"meta_base64\", ...) where the bytes are not UTF-8.\n"
	      "\n"
	      "Exit status: 0 success, 1 not found, name taken, timed out or damage found\n"
	      "(check), 2 error; run and join: 126 or 127 when CMD cannot be run.\n", f);
}

/*
 * The options: one table, each with the commands it applies to, as
 * --help and procreg(1) list them. Options may come before or after the
 * command word and mean the same either way; one given to a command it
 * does not apply to is refused, not ignored.
 */
enum {
	O_SCOPE, O_DIR, O_JSON, O_ESCAPED, O_META, O_GROUP, O_QUEUE, O_REPLACE, O_REPLACEABLE,
	O_LEASE_MARK, O_TTL, O_ON_LOST, O_TIMEOUT, O_COUNT, O_ONCE, O_INTERVAL, O_FORMAT,
	O_NO_AUTOSTART, O_HELP, O_VERSION,
};

static const struct option_def {
	const char *name;  /* --NAME */
	char shrt;         /* -C, or 0 */
	bool arg;          /* takes a value: "--name V", "--name=V", "-C V" */
	int id;
	const char *cmds;  /* the commands it applies to; NULL: every one */
} options[] = {
	{ "scope", 's', true, O_SCOPE, NULL },
	{ "dir", 'd', true, O_DIR, NULL },
	{ "json", 'j', false, O_JSON, "get ls members groups watch stats top readers check nodes ping" },
	{ "escaped", 'e', false, O_ESCAPED, "run join refresh members watch wait get unregister" },
	{ "meta", 'm', true, O_META, "run join" },
	{ "group", 'g', true, O_GROUP, "run wait" },
	{ "queue", 0, false, O_QUEUE, "run" },
	{ "replace", 0, false, O_REPLACE, "run" },
	{ "replaceable", 0, false, O_REPLACEABLE, "run" },
	{ "lease-mark", 0, false, O_LEASE_MARK, "run" },
	{ "ttl", 0, true, O_TTL, "run" },
	{ "on-lost", 0, true, O_ON_LOST, "run" },
	{ "timeout", 't', true, O_TIMEOUT, "run join refresh unregister wait ping stats" },
	{ "count", 'n', true, O_COUNT, "wait" },
	{ "once", 0, false, O_ONCE, "top" },
	{ "interval", 'i', true, O_INTERVAL, "top" },
	{ "format", 'f', true, O_FORMAT, "stats" },
	{ "no-autostart", 0, false, O_NO_AUTOSTART, "run join" },
	{ "help", 'h', false, O_HELP, NULL },
	{ "version", 'V', false, O_VERSION, NULL },
};

/* The option at argv[*i], its value in *VALUE (*i moves past a value
 * given as the next word); NULL if the table has no such option. */
static const struct option_def *find_option(int argc, char **argv, int *i, char **value)
{
	const char *a = argv[*i];

	for (size_t k = 0; k < sizeof(options) / sizeof(options[0]); k++) {
		const struct option_def *o = &options[k];
		size_t n = strlen(o->name);

		if (a[1] == '-') {
			if (strncmp(a + 2, o->name, n) || (a[2 + n] && a[2 + n] != '='))
				continue;
			if (a[2 + n] == '=') {
				if (!o->arg)
					die_usage("option takes no argument:", a);
				*value = (char *)a + 3 + n;
				return o;
			}
		} else if (!o->shrt || a[1] != o->shrt || a[2]) {
			continue;
		}
		if (o->arg) {
			if (*i + 1 >= argc)
				die_usage("option requires an argument:", a);
			*value = argv[++*i];
		}
		return o;
	}
	return NULL;
}

static bool applies(const struct option_def *o, const char *cmd)
{
	size_t n = strlen(cmd);

	if (!o->cmds)
		return true;
	for (const char *p = o->cmds; (p = strstr(p, cmd)); p += n)
		if ((p == o->cmds || p[-1] == ' ') && (!p[n] || p[n] == ' '))
			return true;
	return false;
}

static void set_option(struct cli *c, const struct option_def *o, char *v)
{
	switch (o->id) {
	case O_SCOPE: c->scope = v; break;
	case O_DIR: c->dir = v; break;
	case O_JSON: c->json = 1; break;
	case O_ESCAPED: c->escaped = true; break;
	case O_META: c->meta = v; break;
	case O_GROUP:
		if (c->ngroups == MAX_GROUPS)
			die_usage("too many --group options; at most", "64");
		c->groups[c->ngroups++] = v;
		break;
	case O_QUEUE: c->reg_flags |= PROCREG_QUEUE; break;
	case O_REPLACE: c->reg_flags |= PROCREG_REPLACE; break;
	case O_REPLACEABLE: c->reg_flags |= PROCREG_REPLACEABLE; break;
	case O_LEASE_MARK: c->reg_flags |= PROCREG_LEASE_MARK; break;
	case O_TTL: c->ttl = v; break;
	case O_ON_LOST: c->on_lost = v; break;
	case O_TIMEOUT: c->timeout = v; break;
	case O_COUNT: c->count = v; break;
	case O_ONCE: c->once = true; break;
	case O_INTERVAL: c->interval = v; break;
	case O_FORMAT: c->format = v; break;
	case O_NO_AUTOSTART: c->no_autostart = true; break;
	}
}

/* "--" at argv[*i], after the command word: every word after it is an
 * operand (a name may begin with '-'); run and join (CLAIMS) take the
 * words after it as CMD, or, when no name came before it and a second
 * "--" follows, the words between as names. */
static void end_of_options(struct cli *c, bool claims, int argc, char **argv, int *i,
			   char **args, int *k)
{
	int next = *i + 1;

	while (claims && *k == 0 && next < argc && strcmp(argv[next], "--"))
		next++;
	if (claims && *k == 0 && next < argc) {
		/* "-- NAME... -- CMD" */
		while (++*i < next)
			args[(*k)++] = argv[*i];
	}
	if (claims)
		c->cmd = &argv[*i + 1];
	else
		while (++*i < argc)
			args[(*k)++] = argv[*i];
	*i = argc;
}

/* The library's timeout for command NAME: --timeout (but for wait, whose
 * own limit it is), else the command's default. 0, or -1 after saying
 * why. */
static int daemon_timeout(struct cli *c, const char *name)
{
	bool quick = !strcmp(name, "ping") || !strcmp(name, "stats");
	char *end;
	double s;

	c->timeout_ms = quick ? 1000 : 10000;
	if (!c->timeout || !strcmp(name, "wait"))
		return 0;
	errno = 0;
	s = strtod(c->timeout, &end);
	if (errno || end == c->timeout || *end || !(s >= 0.001) || s > 2e6) {
		fprintf(stderr, "%s: %s: --timeout %s: want seconds, at least 0.001\n", prog, name,
			cli_name(c->timeout));
		return -1;
	}
	c->timeout_ms = (int)(s * 1000 + 0.5);
	return 0;
}

int main(int argc, char **argv)
{
	const struct option_def **seen;
	struct cli c = { 0 };
	const struct command *cmd = NULL;
	const char *word = NULL;
	char **args;
	int k = 0, nseen = 0, st = EXIT_ERR;

	args = calloc((size_t)argc + 1, sizeof(char *));
	seen = calloc((size_t)argc + 1, sizeof(*seen));
	if (!args || !seen)
		return EXIT_ERR;
	for (int i = 1; i < argc; i++) {
		const struct option_def *o;
		char *a = argv[i], *v = NULL;

		if (!strcmp(a, "--") && word) {
			end_of_options(&c, cmd && cmd->claims, argc, argv, &i, args, &k);
			break;
		}
		if (!strcmp(a, "--")) {
			/* Before the command word: the word follows. */
			if (i + 1 < argc)
				cmd = command(word = argv[++i]);
			continue;
		}
		if (a[0] != '-' || !a[1]) {
			if (!word)
				cmd = command(word = a);
			else
				args[k++] = a;
			continue;
		}
		o = find_option(argc, argv, &i, &v);
		if (!o)
			die_usage("unknown option", a);
		if (o->id == O_HELP) {
			usage(stdout);
			st = 0;
			goto out;
		}
		if (o->id == O_VERSION) {
			printf("procreg %s\n", procreg_version());
			st = 0;
			goto out;
		}
		set_option(&c, o, v);
		seen[nseen++] = o;
	}
	if (!word) {
		usage(stderr);
		goto out;
	}
	/* An unknown command is told after the options are read, so that a
	 * bad option is the error named when both are wrong. */
	if (!cmd)
		die_usage("unknown command", word);
	for (int j = 0; j < nseen; j++)
		if (!applies(seen[j], cmd->name)) {
			fprintf(stderr, "%s: %s: --%s does not apply to %s\nTry 'procreg --help'.\n",
				prog, cmd->name, seen[j]->name, cmd->name);
			goto out;
		}
	if (c.meta)
		c.meta_len = strlen(c.meta);
	if (c.escaped && unescape_args(&c, cmd->operand, k, args))
		st = EXIT_ERR;
	else if (daemon_timeout(&c, cmd->name) < 0)
		st = EXIT_ERR;
	else
		st = cmd->run(&c, k, args);
out:
	free(seen);
	free(args);
	return st;
}
