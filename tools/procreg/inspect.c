/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * inspect.c - procreg top, procreg readers, procreg stats --format
 * prometheus.
 *
 * Everything here is read from the scope's table through the library's
 * introspection calls (procreg_stats, procreg_readers,
 * procreg_reader_check): the header's counters and its reader registry.
 * Nothing goes to the daemon, so these commands work while it is down
 * (showing what it last wrote) and never slow it.
 *
 * Lookups are counted by each reader thread in its own slot, in memory of
 * its own process: the lookup path makes no shared write to be counted. The daemon, which maps every reader page, sums each process's
 * slots into the registry about once a second; top differentiates between
 * two samples. A slot released between samples takes its count with it,
 * so a process's rate is clamped at 0 rather than going negative.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cli.h"
#include "output.h"

/* ---- the reader registry ---------------------------------------------- */

static void read_small(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "re");
	size_t n = 0;

	buf[0] = 0;
	if (!f)
		return;
	n = fread(buf, 1, cap - 1, f);
	fclose(f);
	buf[n] = 0;
}

/* The reader's command name (comm), "" once its process is gone (the
 * library checks its pid against its start time: PROCREG_READER_GONE). */
static void proc_comm(const struct procreg_reader *r, char *out, size_t cap)
{
	char path[64];

	out[0] = 0;
	if (r->flags & PROCREG_READER_GONE)
		return;
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)r->pid);
	read_small(path, out, cap);
	out[strcspn(out, "\n")] = 0;
}

struct readers {
	struct procreg_reader *v;
	size_t n, cap;
	bool nomem;
};

static int add_reader(const struct procreg_reader *r, void *arg)
{
	struct readers *rs = arg;

	if (rs->n == rs->cap) {
		size_t cap = rs->cap ? 2 * rs->cap : 16;
		struct procreg_reader *v = realloc(rs->v, cap * sizeof(*v));

		if (!v) {
			rs->nomem = true;
			return 1;
		}
		rs->v = v;
		rs->cap = cap;
	}
	rs->v[rs->n++] = *r;
	return 0;
}

static int reader_by_pid(const void *a, const void *b)
{
	const struct procreg_reader *x = a, *y = b;

	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/* The registry, sorted by pid, in *V (free it): its length, or -1. */
static ssize_t registry(procreg_t *reg, struct procreg_reader **v)
{
	struct readers rs = { 0 };

	if (procreg_readers(reg, add_reader, &rs) != 0 || rs.nomem) {
		free(rs.v);
		*v = NULL;
		return -1;
	}
	if (rs.n)
		qsort(rs.v, rs.n, sizeof(*rs.v), reader_by_pid);
	*v = rs.v;
	return (ssize_t)rs.n;
}

int cmd_readers(struct cli *c, int argc, char **argv)
{
	PROCREG_OPTS(procreg_reader_check, rc);
	struct procreg_reader *v;
	procreg_t *reg;
	ssize_t n;

	if (argc != 0)
		die_usage("readers: unexpected argument", argv[0]);
	reg = open_or_die(c);
	n = registry(reg, &v);
	if (n < 0 || procreg_reader_check(reg, &rc) < 0) {
		fprintf(stderr, "%s: readers: out of memory\n", prog);
		free(v);
		procreg_close(reg);
		return EXIT_ERR;
	}
	if (!c->json && isatty(1))
		printf("%8s %8s %7s %4s %5s %12s %-7s  %s\n", "PID", "UID", "THREADS", "IN",
		       "PAGES", "LOOKUPS", "STALLED", "COMMAND");
	if (c->json)
		printf("{\"max_readers\":%u,\"stalls\":%llu,\"refused\":%llu,\"readers\":[",
		       rc.max_readers, (unsigned long long)rc.stalls, (unsigned long long)rc.refused);
	for (ssize_t i = 0; i < n; i++) {
		bool stalled = v[i].flags & PROCREG_READER_STALLED;
		char comm[64];

		proc_comm(&v[i], comm, sizeof(comm));
		if (c->json) {
			printf("%s{\"pid\":%d,\"uid\":%u,", i ? "," : "", (int)v[i].pid, v[i].uid);
			procreg__json_field(stdout, "comm", comm, strlen(comm));
			printf(",\"threads\":%u,\"in_critical_section\":%u,\"pages\":%u,"
			       "\"lookups\":%llu,\"stalled\":%s,\"stalled_ns\":%llu,"
			       "\"registered_ns\":%llu,\"refreshed_ns\":%llu}",
			       v[i].threads, v[i].in_section, v[i].pages, (unsigned long long)v[i].lookups,
			       stalled ? "true" : "false", (unsigned long long)v[i].stalled_ns,
			       (unsigned long long)v[i].registered_ns,
			       (unsigned long long)v[i].refreshed_ns);
		} else {
			/* A command name is its owner's to choose: escaped. */
			printf("%8d %8u %7u %4u %5u %12llu %-7s  ", (int)v[i].pid, v[i].uid, v[i].threads,
			       v[i].in_section, v[i].pages, (unsigned long long)v[i].lookups,
			       stalled ? "yes" : "-");
			procreg__text(stdout, comm[0] ? comm : "?", comm[0] ? strlen(comm) : 1);
			putchar('\n');
		}
	}
	if (c->json)
		printf("]}\n");
	free(v);
	procreg_close(reg);
	return 0;
}

/* ---- stats --format prometheus ---------------------------------------- */

static void bridge_prometheus(procreg_t *reg, const char *scope);
static int reader_lookups(const struct procreg_reader *r, void *arg);

void stats_prometheus(procreg_t *reg, const struct cli *c)
{
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} f[] = {
#define G(n, h) { #n, "gauge", h, offsetof(struct procreg_stats, n) }
/* Sizes carry their unit in the name, as Prometheus names them. */
#define GB(n, h) { #n "_bytes", "gauge", h, offsetof(struct procreg_stats, n) }
#define C(n, h) { #n "_total", "counter", h, offsetof(struct procreg_stats, n) }
		G(names, "Names registered."),
		G(groups, "Groups with at least one member."),
		G(memberships, "Group memberships, over all groups."),
		G(processes, "Processes holding at least one name or membership."),
		GB(arena_size, "Bytes the table's arena may grow to."),
		GB(arena_used, "Bytes of the arena in live blocks."),
		GB(arena_top, "High-water mark of the arena, in bytes."),
		G(index_capacity, "Slots in the name index."),
		G(reader_slots, "Reader processes procregd can wait for (--max-readers)."),
		G(reader_slots_used, "Reader processes whose pages procregd holds."),
		C(registrations, "Names registered since the table was created."),
		C(unregistrations, "Names removed by request since the table was created."),
		C(joins, "Group joins since the table was created."),
		C(leaves, "Group leaves since the table was created."),
		C(deaths, "Owner processes whose exit removed names."),
		C(grace_periods, "RCU grace periods completed by the daemon."),
#undef G
#undef GB
#undef C
	};
	PROCREG_OPTS(procreg_stats, s);
	const char *scope = scope_name(c);

	procreg_stats(reg, &s);
	/* Scopes are [A-Za-z0-9_.-]: a label value that needs no escaping. */
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		printf("# HELP procreg_%s %s\n# TYPE procreg_%s %s\nprocreg_%s{scope=\"%s\"} %llu\n",
		       f[i].name, f[i].help, f[i].name, f[i].type, f[i].name, scope,
		       (unsigned long long)*(const uint64_t *)((const char *)&s + f[i].off));
	/* Up means it answered (procreg ping), not that the table names a
	 * pid: a stopped or hung daemon is down for whoever depends on it. */
	printf("# HELP procreg_daemon_up Whether procregd answered a round trip (procreg ping).\n"
	       "# TYPE procreg_daemon_up gauge\nprocreg_daemon_up{scope=\"%s\"} %d\n",
	       scope, procreg_ping(reg, c->timeout_ms) == 0 ? 1 : 0);
	printf("# HELP procreg_daemon_start_time_seconds When procregd started, in seconds since "
	       "the epoch (0: none runs).\n"
	       "# TYPE procreg_daemon_start_time_seconds gauge\n"
	       "procreg_daemon_start_time_seconds{scope=\"%s\"} %.3f\n", scope,
	       s.daemon_pid ? (double)s.daemon_started_ns / 1e9 : 0.0);
	/* Each reader process counts its own lookups: a series per process
	 * (a pid's counter starts again with a new process, as a counter of
	 * a restarted job does). */
	printf("# HELP procreg_reader_lookups_total Lookups by a reader process, as procregd last "
	       "summed them.\n# TYPE procreg_reader_lookups_total counter\n");
	procreg_readers(reg, reader_lookups, (void *)scope);
	bridge_prometheus(reg, scope);
}

static int reader_lookups(const struct procreg_reader *r, void *arg)
{
	if (!(r->flags & PROCREG_READER_GONE))
		printf("procreg_reader_lookups_total{scope=\"%s\",pid=\"%d\"} %llu\n",
		       (const char *)arg, (int)r->pid, (unsigned long long)r->lookups);
	return 0;
}

/* The --peer through which node NAME is connected, or NULL. */
static const struct procreg_peer *configured_peer(const struct nodes_info *ni, const char *name)
{
	for (size_t i = 0; i < ni->npeers; i++)
		if (ni->peers[i].up && !strcmp(ni->peers[i].node, name))
			return &ni->peers[i];
	return NULL;
}

/* The addr label of node N: its --peer as given, else the address it
 * advertises ("" if none). */
static const char *node_addr(const struct nodes_info *ni, const struct node_info *n)
{
	const struct procreg_peer *p = configured_peer(ni, n->name);

	return p ? p->addr : strcmp(n->addr, "-") ? n->addr : "";
}

/* METRIC{scope,node,peer,addr} and its value (FMT). Node names are
 * [A-Za-z0-9_.@-]; an address is printable ASCII, whose backslashes and
 * double quotes a label value escapes. */
static void peer_series(const char *metric, const char *scope, const char *self,
			const char *peer, const char *addr, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
static void peer_series(const char *metric, const char *scope, const char *self,
			const char *peer, const char *addr, const char *fmt, ...)
{
	va_list ap;

	printf("%s{scope=\"%s\",node=\"%s\",peer=\"%s\",addr=\"", metric, scope, self, peer);
	for (const char *c = addr; *c; c++)
		printf(*c == '\\' || *c == '"' ? "\\%c" : "%c", *c);
	printf("\"} ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
}

/* The bridge's counters, when the daemon replicates (procregd --node).
 * Node names are [A-Za-z0-9_.@-]: label values that need no escaping. */
static void bridge_prometheus(procreg_t *reg, const char *scope)
{
	struct nodes_info ni;

	if (nodes_read(reg, &ni) != 0)
		return;
	const struct {
		const char *name, *type, *help;
		unsigned long long v;
	} f[] = {
		{ "bridge_nodes_up", "gauge", "Other nodes connected.", ni.n },
		{ "bridge_changes_out_total", "counter", "Local changes sent to the other nodes.",
		  ni.changes_out },
		{ "bridge_changes_in_total", "counter", "Changes applied from other nodes.",
		  ni.changes_in },
		{ "bridge_conflicts_total", "counter", "Names claimed on two nodes, resolved.",
		  ni.conflicts },
		{ "bridge_nodes_down_total", "counter", "Nodes that went down.", ni.nodes_down },
		{ "bridge_resyncs_total", "counter",
		  "Connections dropped for a gap or a protocol error (then resynced).", ni.refused },
	};

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		printf("# HELP procreg_%s %s\n# TYPE procreg_%s %s\nprocreg_%s{scope=\"%s\",node=\"%s\"} %llu\n",
		       f[i].name, f[i].help, f[i].name, f[i].type, f[i].name, scope, ni.self, f[i].v);
	/* One series per peer: every --peer, connected or not, so that an
	 * operator can alert on a 0 (a peer down, or never reached), then
	 * every other node connected (it dialed in, or a peer told of it).
	 * Labels: peer, the node's name ("" for a --peer never reached);
	 * addr, the --peer as given, else the address the node advertises. */
	printf("# HELP procreg_bridge_peer_up Whether another node is connected: every --peer, "
	       "and every other node connected.\n"
	       "# TYPE procreg_bridge_peer_up gauge\n");
	for (size_t i = 0; i < ni.npeers; i++)
		peer_series("procreg_bridge_peer_up", scope, ni.self, ni.peers[i].node,
			    ni.peers[i].addr, "%d\n", ni.peers[i].up ? 1 : 0);
	for (size_t i = 0; i < ni.n; i++)
		if (!configured_peer(&ni, ni.v[i].name))
			peer_series("procreg_bridge_peer_up", scope, ni.self, ni.v[i].name,
				    node_addr(&ni, &ni.v[i]), "1\n");
	printf("# HELP procreg_bridge_peer_up_since_seconds When the connection to another node "
	       "came up, in seconds since the epoch.\n"
	       "# TYPE procreg_bridge_peer_up_since_seconds gauge\n");
	for (size_t i = 0; i < ni.n; i++)
		peer_series("procreg_bridge_peer_up_since_seconds", scope, ni.self, ni.v[i].name,
			    node_addr(&ni, &ni.v[i]), "%.3f\n", (double)ni.v[i].up_since_ns / 1e9);
	nodes_free(&ni);
}

/* ---- top -------------------------------------------------------------- */

/* One reader process in a sample: its slots summed. */
struct reader_proc {
	pid_t pid;
	uint64_t start;
	unsigned threads;           /* slots it holds: its reading threads */
	uint64_t lookups;
	double rate;
	char comm[64];
};

struct sample {
	uint64_t t_ns;              /* CLOCK_MONOTONIC */
	struct procreg_stats st;
	struct reader_proc *procs;
	size_t n;
};

static int take_sample(procreg_t *reg, struct sample *s)
{
	struct procreg_reader *v;
	ssize_t n;

	s->st = (struct procreg_stats){ .sz = sizeof(s->st) };
	procreg_stats(reg, &s->st);
	s->t_ns = pr_mono_ns();
	s->n = 0;
	n = registry(reg, &v);
	s->procs = n < 0 ? NULL : calloc(n ? (size_t)n : 1, sizeof(*s->procs));
	if (!s->procs) {
		free(v);
		return -ENOMEM;
	}
	for (ssize_t i = 0; i < n; i++) {
		struct reader_proc *p = &s->procs[s->n++];

		p->pid = v[i].pid;
		p->start = v[i].start_time;
		p->threads = v[i].threads;
		p->lookups = v[i].lookups;
		proc_comm(&v[i], p->comm, sizeof(p->comm));
	}
	free(v);
	return 0;
}

static double per_s(uint64_t now, uint64_t before, double dt)
{
	return now > before && dt > 0 ? (double)(now - before) / dt : 0.0;
}

static int by_rate(const void *a, const void *b)
{
	const struct reader_proc *x = a, *y = b;

	if (x->rate != y->rate)
		return x->rate > y->rate ? -1 : 1;
	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/* The rates of CUR against PREV: per-process lookups/s, sorted. */
static double reader_rates(struct sample *cur, const struct sample *prev, double dt)
{
	double total = 0;

	for (size_t i = 0; i < cur->n; i++) {
		struct reader_proc *p = &cur->procs[i];
		uint64_t before = 0;

		for (size_t k = 0; k < prev->n; k++)
			if (prev->procs[k].pid == p->pid && prev->procs[k].start == p->start)
				before = prev->procs[k].lookups;
		p->rate = per_s(p->lookups, before, dt);
		total += p->rate;
	}
	qsort(cur->procs, cur->n, sizeof(*cur->procs), by_rate);
	return total;
}

#define TOP_RATES(X) X(registrations) X(unregistrations) X(joins) X(leaves) X(deaths) X(grace_periods)
#define TOP_GAUGES(X)                                                                   \
	X(names) X(groups) X(memberships) X(processes) X(arena_size) X(arena_used)       \
	X(arena_top) X(reader_slots) X(reader_slots_used)

static void frame_json(const struct cli *c, const struct sample *cur, const struct sample *prev,
		       double dt, double lookups)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	printf("{\"time_ns\":%llu,\"interval_s\":%.3f,\"scope\":",
	       (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec, dt);
	procreg__json_str(stdout, scope_name(c), strlen(scope_name(c)));
	printf(",\"daemon_pid\":%d", (int)cur->st.daemon_pid);
#define J(f) printf(",\"" #f "\":%llu", (unsigned long long)cur->st.f);
	TOP_GAUGES(J)
#undef J
#define J(f) printf(",\"" #f "\":%llu,\"" #f "_per_s\":%.3f", (unsigned long long)cur->st.f, \
		    per_s(cur->st.f, prev->st.f, dt));
	TOP_RATES(J)
#undef J
	printf(",\"lookups_per_s\":%.3f,\"readers\":[", lookups);
	for (size_t i = 0; i < cur->n; i++) {
		const struct reader_proc *p = &cur->procs[i];

		printf("%s{\"pid\":%d,", i ? "," : "", (int)p->pid);
		procreg__json_field(stdout, "comm", p->comm, strlen(p->comm));
		printf(",\"threads\":%u,\"lookups\":%llu,\"lookups_per_s\":%.3f}", p->threads,
		       (unsigned long long)p->lookups, p->rate);
	}
	printf("]}\n");
}

static void frame_text(const struct cli *c, const struct sample *cur, const struct sample *prev,
		       double dt, double lookups, bool tty)
{
	const struct procreg_stats *s = &cur->st, *p = &prev->st;
	double mib = 1024.0 * 1024.0;

	if (tty)
		fputs("\033[H\033[2J", stdout); /* home, clear: a refreshing screen */
	printf("scope %s  daemon %s%.0d  interval %.1fs\n", scope_name(c),
	       s->daemon_pid ? "pid " : "not running", (int)s->daemon_pid, dt);
	printf("names %llu  groups %llu  memberships %llu  processes %llu\n",
	       (unsigned long long)s->names, (unsigned long long)s->groups,
	       (unsigned long long)s->memberships, (unsigned long long)s->processes);
	printf("registrations/s %.1f  unregistrations/s %.1f  joins/s %.1f  leaves/s %.1f\n",
	       per_s(s->registrations, p->registrations, dt),
	       per_s(s->unregistrations, p->unregistrations, dt), per_s(s->joins, p->joins, dt),
	       per_s(s->leaves, p->leaves, dt));
	printf("deaths/s %.1f  grace periods/s %.1f  lookups/s %.0f\n",
	       per_s(s->deaths, p->deaths, dt), per_s(s->grace_periods, p->grace_periods, dt),
	       lookups);
	printf("arena %.1f MiB used of %.1f MiB (%.1f%%), high-water %.1f MiB; reader processes %llu of %llu\n",
	       (double)s->arena_used / mib, (double)s->arena_size / mib,
	       s->arena_size ? 100.0 * (double)s->arena_used / (double)s->arena_size : 0.0,
	       (double)s->arena_top / mib, (unsigned long long)s->reader_slots_used,
	       (unsigned long long)s->reader_slots);
	if (tty)
		printf("\n%8s %7s %14s %12s  %s\n", "PID", "THREADS", "LOOKUPS", "LOOKUPS/S",
		       "COMMAND");
	for (size_t i = 0; i < cur->n; i++) {
		printf("%8d %7u %14llu %12.0f  ", (int)cur->procs[i].pid, cur->procs[i].threads,
		       (unsigned long long)cur->procs[i].lookups, cur->procs[i].rate);
		procreg__text(stdout, cur->procs[i].comm, strlen(cur->procs[i].comm));
		putchar('\n');
	}
}

int cmd_top(struct cli *c, int argc, char **argv)
{
	struct sample prev = { 0 }, cur = { 0 };
	sigset_t stop;
	double interval = 1.0;
	procreg_t *reg;
	bool tty = isatty(1);
	int err = 0;

	if (argc != 0)
		die_usage("top: unexpected argument", argv[0]);
	if (c->interval) {
		char *end;

		interval = strtod(c->interval, &end);
		if (end == c->interval || *end || !(interval >= 0.01 && interval <= 3600))
			die_usage("top: --interval: want seconds from 0.01 to 3600, not", c->interval);
	}
	reg = open_or_die(c);
	if (take_sample(reg, &prev) < 0) {
		fprintf(stderr, "%s: top: out of memory\n", prog);
		procreg_close(reg);
		return EXIT_ERR;
	}
	/* SIGINT and SIGTERM blocked, and taken as the wait between frames:
	 * one that comes while a frame is drawn ends the next wait at once.
	 * With a handler and a flag, one landing between the flag's check and
	 * the sleep was not seen until the sleep ended (up to --interval). */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &stop, NULL);
	for (;;) {
		struct timespec ts = { (time_t)interval,
				       (long)((interval - (double)(time_t)interval) * 1e9) };
		double dt, lookups;

		/* Rates need two samples: even --once waits one interval. */
		if (sigtimedwait(&stop, NULL, &ts) > 0)
			break;
		if (take_sample(reg, &cur) < 0) {
			fprintf(stderr, "%s: top: out of memory\n", prog);
			err = EXIT_ERR;
			break;
		}
		dt = (double)(cur.t_ns - prev.t_ns) / 1e9;
		lookups = reader_rates(&cur, &prev, dt);
		if (c->json)
			frame_json(c, &cur, &prev, dt, lookups);
		else
			frame_text(c, &cur, &prev, dt, lookups, tty);
		fflush(stdout);
		free(prev.procs);
		prev = cur;
		cur.procs = NULL;
		if (c->once)
			break;
		if (!c->json && !tty)
			putchar('\n'); /* frames apart in a pipe */
	}
	free(prev.procs);
	free(cur.procs);
	procreg_close(reg);
	return err;
}
