/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * procregd - the registry daemon: the one writer of a scope's table.
 *
 * Start-up: take the scope's lock (flock on the table file), create the
 * table or re-attach to the one a previous daemon left (re-verifying every
 * owner), listen, then loop on epoll: clients' requests, registered
 * processes' pidfds, a timer for reclamation and reader checks, and a
 * signalfd for SIGTERM/SIGINT, which end the loop cleanly. The table stays
 * in place when the daemon stops: names belong to processes, and a new
 * daemon carries on with them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "daemon.h"
#include "proto.h"
#include "bridge_proto.h"
#include "procreg/version.h"
#include "output.h"
#include "procreg/backend.h"
#include "nats_opts.h"
#include "nodes_file.h"

#define RECLAIM_TICK_NS (2 * 1000000ull)    /* while memory waits for a grace period */
#define IDLE_TICK_NS (1000 * 1000000ull)    /* reader checks when nothing else is due */
#define RECLAIM_BYTES (1u << 20)            /* retired bytes that start a grace period at once */
/* A node's changes sent mid-batch every this many bytes queued, so that a big
 * batch reaches the other nodes while it is still being applied. Measured
 * with procreg-bench stress --nodes 3 (README, "Performance"): a small
 * gain in names/s visible everywhere, no cost in delay. */
#define BRIDGE_FLUSH_BYTES (64u << 10)

/* A number's macro as a string, for --help. */
#define STR_(x) #x
#define STR(x) STR_(x)

/*
 * The limits that held lines back since their last line went out: the
 * count of a burst is said with the next line of its kind, and without
 * one (the burst was the last) log_limited_flush() says it once the
 * second is up. Else "4,450 entries refused" would read as one. A limit
 * that finds the list full says its count with its next line, as before.
 * Daemon thread only, as is every log_limited().
 */
#define UNSAID_MAX 32
static struct unsaid {
	struct pr_ratelimit *rl;
	const char *what;
} unsaid[UNSAID_MAX];
static size_t nunsaid;

static void unsaid_add(struct pr_ratelimit *rl, const char *what)
{
	for (size_t i = 0; i < nunsaid; i++)
		if (unsaid[i].rl == rl)
			return;
	if (nunsaid < UNSAID_MAX)
		unsaid[nunsaid++] = (struct unsaid){ rl, what };
}

static void said_held(uint64_t held, const char *what)
{
	if (held)
		log_warn("(%llu more %s in the last second)", (unsigned long long)held, what);
}

void log_limited(struct pr_ratelimit *rl, const char *what, const char *fmt, ...)
{
	uint64_t held;
	char buf[1024];
	va_list ap;

	if (!pr_ratelimit_pass(rl, procreg__mono_ns(), &held)) {
		unsaid_add(rl, what);
		return;
	}
	said_held(held, what);
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	log_warn("%s", buf);
}

void log_limited_flush(void)
{
	uint64_t now = procreg__mono_ns();
	size_t k = 0;

	for (size_t i = 0; i < nunsaid; i++) {
		uint64_t held;

		if (pr_ratelimit_due(unsaid[i].rl, now, &held))
			said_held(held, unsaid[i].what);
		else if (unsaid[i].rl->held)
			unsaid[k++] = unsaid[i]; /* its second is not up yet */
	}
	nunsaid = k;
}

int ev_add(struct daemon *d, int fd, uint32_t events, struct ev *ev)
{
	struct epoll_event e = { .events = events, .data.ptr = ev };

	return epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &e) < 0 ? -errno : 0;
}

int ev_mod(struct daemon *d, int fd, uint32_t events, struct ev *ev)
{
	struct epoll_event e = { .events = events, .data.ptr = ev };

	return epoll_ctl(d->epfd, EPOLL_CTL_MOD, fd, &e) < 0 ? -errno : 0;
}

/*
 * The command line: one entry per option in opt_table, from which
 * getopt_long's array, the parse and --help all come, so that an option
 * is described in one place.
 */
enum opt_kind {
	OPT_TEXT,       /* no option: HELP printed as it stands (a heading) */
	OPT_FLAG,       /* the bool at OFF set */
	OPT_COUNT,      /* the int at OFF counted up */
	/* The kinds that take an argument, from OPT_STR to OPT_NATS: */
	OPT_STR,        /* the const char * at OFF: the argument itself */
	OPT_NUM,        /* the uint32_t or uint64_t at OFF, MIN..MAX */
	OPT_PEER,       /* HOST:PORT added to peers */
	OPT_BRIDGE_OPT, /* KEY=VALUE added to bridge_opts */
	OPT_NATS,       /* VALUE added to bridge_opts as KEY=VALUE */
	OPT_HELP,
	OPT_VERSION,
};

struct opt {
	const char *name;      /* the long name; NULL for OPT_TEXT */
	char shortc;           /* the short one, or 0 */
	enum opt_kind kind;
	const char *arg;       /* the argument's name in --help */
	size_t off, size;      /* the destination in struct daemon_opts */
	size_t set;            /* a bool there made true when given; 0: none
				* (offset 0 is scope, never such a bool) */
	uint64_t unit, min, max, def;  /* OPT_NUM: pr_parse_u64's unit, range, default */
	const char *want;      /* OPT_NUM: what the error asks for */
	const char *key;       /* OPT_NATS: the backend's option (nats_opts.h) */
	const char *help;      /* NULL: described by an OPT_TEXT entry */
};

#define OPT_AT(m) .off = offsetof(struct daemon_opts, m), .size = sizeof(((struct daemon_opts *)0)->m)
#define OPT_SET(m) .set = offsetof(struct daemon_opts, m)
#define STR_OPT(n, c, m, a) .name = n, .shortc = c, .kind = OPT_STR, .arg = a, OPT_AT(m)
/* A number of MIN..MAX, its default DEF; UNIT as pr_parse_u64 takes it. */
#define NUM_OPT(n, m, a, u, lo, hi, d, w) \
	.name = n, .kind = OPT_NUM, .arg = a, OPT_AT(m), .unit = u, .min = lo, .max = hi, .def = d, .want = w
/* A count from 1 to UINT32_MAX. */
#define COUNT_OPT(n, m, d) NUM_OPT(n, m, "N", 0, 1, UINT32_MAX, d, "a positive number")
/* --nats-KEY VALUE is --bridge-opt KEY=VALUE (and picks --bridge nats):
 * an alias for each of the backend's options (nats_opts.h). */
#define NATS_ALIAS(id, k) { .name = "nats-" k, .kind = OPT_NATS, .key = k },

static const struct opt opt_table[] = {
	{ STR_OPT("scope", 's', scope, "NAME"),
	  .help = "scope (default: $PROCREG_SCOPE or \"default\")" },
	{ STR_OPT("dir", 'd', dir, "DIR"),
	  .help = "table directory (default: $PROCREG_DIR or /dev/shm)" },
	{ STR_OPT("socket", 'S', socket, "PATH"),
	  .help = "socket (default: $PROCREG_DIR, $XDG_RUNTIME_DIR\n"
		  "or /run/procreg, + /procreg.SCOPE.sock)" },
	{ .name = "foreground", .shortc = 'f', .kind = OPT_FLAG, OPT_AT(foreground),
	  .help = "stay in the foreground (default: detach once ready)" },
	{ STR_OPT("log-file", 0, log_file, "PATH"),
	  .help = "messages to PATH (default: stderr in the\n"
		  "foreground, with <N> levels for the journal under\n"
		  "systemd; syslog once detached)" },
	{ NUM_OPT("max-size", max_size, "BYTES", 1024, 2u << 20, PR_MAX_FILE_SIZE, 1ull << 30,
		  "2M..64G"),
	  .help = "table file size, fixed when it is created; sparse\n"
		  "(default 1G; suffixes K M G)" },
	{ NUM_OPT("max-readers", max_readers, "N", 0, 1, 1u << 20, 4096, "1..1048576"),
	  .help = "reader processes whose pages grace periods wait\n"
		  "for; the table's reader registry is made this\n"
		  "big (default 4096; an eighth is kept for root\n"
		  "and procregd's own user)" },
	{ COUNT_OPT("max-readers-per-uid", max_readers_per_uid, 256),
	  .help = "reader processes of one uid (default 256;\n"
		  "root: no limit)" },
	{ NUM_OPT("max-reader-pages", max_reader_pages, "N", 0, 1, UINT32_MAX, 0,
		  "a positive number"),
	  OPT_SET(max_reader_pages_set),
	  .help = "reader pages mapped, one mapping each (default\n"
		  "and most: half of vm.max_map_count, read at\n"
		  "start; an eighth is kept for root and\n"
		  "procregd's own user)" },
	{ COUNT_OPT("max-reader-pages-per-uid", max_reader_pages_per_uid, 1024),
	  .help = "reader pages of one uid's processes (default\n"
		  "1024; root and procregd's own uid: no limit)" },
	{ NUM_OPT("reader-timeout-ms", reader_timeout_ms, "N", 0, 1, 3600000, 1000, "1..3600000"),
	  .help = "a reader that holds a grace period up this long\n"
		  "is no longer waited for (default 1000)" },
	{ COUNT_OPT("max-names-per-proc", max_names_per_proc, 65536),
	  .help = "names one process may hold (default 65536)" },
	{ COUNT_OPT("max-clients", max_clients, 1024),
	  .help = "connected clients (default 1024)" },
	{ COUNT_OPT("max-names-per-uid", max_names_per_uid, 262144),
	  .help = "names, memberships and places in owner queues\n"
		  "the processes of one uid may hold together\n"
		  "(default 262144; root and procregd's own uid:\n"
		  "no limit)" },
	{ COUNT_OPT("max-clients-per-uid", max_clients_per_uid, 128),
	  .help = "connections of one uid (default 128; root and\n"
		  "procregd's own uid: no limit)" },
	{ COUNT_OPT("max-procs-per-uid", max_procs_per_uid, 0),
	  OPT_SET(max_procs_per_uid_set),
	  .help = "processes of one uid holding names, memberships\n"
		  "or places, each watched through a descriptor\n"
		  "(default: a quarter of what all uids but root and\n"
		  "procregd's own may have together: the open files\n"
		  "limit less 2 a --max-clients, 1 a --max-readers\n"
		  "and 512; root and procregd's own uid: no limit)" },
	{ COUNT_OPT("max-places", max_places, 32768),
	  .help = "places in owner queues (PROCREG_QUEUE), all uids\n"
		  "together (default 32768; the last 1/32 kept for\n"
		  "root and procregd's own uid)" },
	{ COUNT_OPT("max-places-per-uid", max_places_per_uid, 1024),
	  .help = "places in owner queues of one uid (default 1024;\n"
		  "root and procregd's own uid: no limit)" },
	{ COUNT_OPT("max-leases", max_leases, 262144),
	  .help = "leases of names and memberships, and places in\n"
		  "line asking for one, all uids together (default\n"
		  "262144; the last 1/32 kept for root and procregd's\n"
		  "own uid)" },
	{ COUNT_OPT("max-leases-per-uid", max_leases_per_uid, 16384),
	  .help = "leases of one uid, with its places in owner\n"
		  "queues that ask for one (default 16384; root and\n"
		  "procregd's own uid: no limit)" },
	{ NUM_OPT("max-feed-rate-per-uid", max_feed_rate_per_uid, "N", 0, 0, UINT32_MAX, 0,
		  "a number"),
	  OPT_SET(max_feed_rate_per_uid_set),
	  .help = "change feed events a second the requests of one\n"
		  "uid may make (a refused request one at least,\n"
		  "another a quarter), on average, past half a ring\n"
		  "at once; over it, its requests wait (default 8\n"
		  "rings a second: 65536 with a ring of 8192; 0: no\n"
		  "limit; root and procregd's own uid: no limit)" },
	{ STR_OPT("subuid-file", 0, subuid_file, "PATH"),
	  .help = "subordinate uid ranges: their uids count in their\n"
		  "owner's per-uid limits (default /etc/subuid;\n"
		  "\"\": none; read at start)" },
	{ NUM_OPT("reserved-clients", reserved_clients, "N", 0, 0, UINT32_MAX, 0, "a number"),
	  OPT_SET(reserved_clients_set),
	  .help = "the last N of --max-clients are for root and\n"
		  "procregd's own uid (default 1/32 of it: 32)" },
	{ NUM_OPT("reserved-size", reserved_size, "BYTES", 1024, 0, UINT64_MAX, 0,
		  "a size in bytes (suffixes K M G)"),
	  OPT_SET(reserved_size_set),
	  .help = "the last BYTES of the table are for names of\n"
		  "root's and procregd's uid: others, and other\n"
		  "nodes' entries, get ENOSPC first (default 1/32\n"
		  "of the table; suffixes K M G)" },
	{ NUM_OPT("local-size", local_size, "BYTES", 1024, 0, UINT64_MAX, 0,
		  "a size in bytes (suffixes K M G)"),
	  OPT_SET(local_size_set),
	  .help = "BYTES of the table before --reserved-size are for\n"
		  "this host's own names: other nodes' entries,\n"
		  "all together, are not replicated into them\n"
		  "(default 1/8 of the table; 0: none; suffixes\n"
		  "K M G)" },
	{ .name = "verbose", .shortc = 'v', .kind = OPT_COUNT, OPT_AT(verbose),
	  .help = "log every connection, death, and registration\n"
		  "refused for a name held" },
	{ .kind = OPT_TEXT, .help = "\nReplication (the bridge; all off without --node):\n" },
	{ STR_OPT("node", 0, node, "NAME"),
	  .help = "this node's name, 1..63 of [A-Za-z0-9_.@-]" },
	{ STR_OPT("listen", 0, listen, "HOST:PORT"),
	  .help = "accept other nodes here" },
	{ STR_OPT("advertise", 0, advertise, "HOST:PORT"),
	  .help = "the address other nodes are told to dial for this\n"
		  "one (default: --listen), behind a proxy or NAT" },
	{ .name = "peer", .kind = OPT_PEER, .arg = "HOST:PORT",
	  .help = "a node to connect to (repeat; peers tell each\n"
		  "other about the rest)" },
	{ STR_OPT("cookie-file", 0, cookie_file, "PATH"),
	  .help = "the shared secret, mode 0600 (required with --node)" },
	{ STR_OPT("bridge", 0, bridge, "NAME"),
	  .help = "the transport: tcp (the built-in mesh, default) or\n"
		  "a backend procreg-bridge-NAME.so found beside\n"
		  "procregd or in LIBDIR/procreg (nats)" },
	{ STR_OPT("bridge-backend", 0, bridge_backend, "PATH"),
	  .help = "a transport from a shared object instead of the\n"
		  "built-in TCP mesh (see backend.h)" },
	{ .name = "bridge-opt", .kind = OPT_BRIDGE_OPT, .arg = "KEY=VALUE",
	  .help = "an option for the backend (repeat)" },
	{ COUNT_OPT("heartbeat-ms", bridge_heartbeat_ms, 0),
	  .help = "a heartbeat when idle this long (default " STR(PR_BRIDGE_HEARTBEAT_MS) ")" },
	{ COUNT_OPT("node-timeout-ms", bridge_timeout_ms, 0),
	  .help = "a node silent this long is down (default " STR(PR_BRIDGE_TIMEOUT_MS) ")" },
	{ .kind = OPT_TEXT,
	  .help = "  --bridge nats takes --bridge-opt KEY=VALUE for each of the following, or\n"
		  "  --nats-KEY VALUE (which also picks --bridge nats):\n"
		  "      --nats-url URL[,URL...]  --bridge nats: the server(s), tried in turn\n"
		  "                            (default " PR_NATS_URL_DEFAULT "; tls://: TLS)\n"
		  "      --nats-user USER, --nats-password PASS, --nats-token TOKEN,\n"
		  "      --nats-creds FILE, --nats-nkey PUBKEY --nats-nkey-seed FILE\n"
		  "                            --bridge nats: authentication to the server\n"
		  "      --nats-subject PREFIX --bridge nats: subjects (default "
		  PR_NATS_SUBJECT_PREFIX ".SCOPE)\n"
		  "      --nats-tls-ca FILE    --bridge nats: TLS, servers' certificates checked\n"
		  "                            against FILE (default: the system's CAs)\n"
		  "      --nats-tls-cert FILE --nats-tls-key FILE\n"
		  "                            --bridge nats: TLS with this client certificate\n"
		  "      --nats-tls-hostname NAME  --bridge nats: TLS, the name servers'\n"
		  "                            certificates must carry (default: the first\n"
		  "                            URL's host, unless it is an address)\n" },
	PR_NATS_OPTS(NATS_ALIAS)
	{ STR_OPT("resolver", 0, resolver, "PATH"),
	  .help = "name conflicts between nodes decided by the\n"
		  "shared object's procreg_resolve_v1 (resolver.h)" },
	{ NUM_OPT("bridge-flush-bytes", bridge_flush_bytes, "N", 1024, 0, 64u << 20,
		  BRIDGE_FLUSH_BYTES, "0..64M"),
	  OPT_SET(bridge_flush_bytes_set),
	  .help = "send a node's changes mid-batch every N bytes\n"
		  "queued for it (default 64K; 0: only at the end\n"
		  "of each batch of work)" },
	{ NUM_OPT("max-mesh-queue", max_mesh_queue, "BYTES", 1024, 1u << 20, 1ull << 36,
		  256ull << 20, "1M..64G"),
	  OPT_SET(max_mesh_queue_set),
	  .help = "the TCP mesh: bytes queued for other nodes and\n"
		  "in their records' buffers, all together; past it\n"
		  "the node holding the most is dropped, one that\n"
		  "reads nothing or leaves a record unfinished first\n"
		  "(default 256M; suffixes K M G)" },
	{ .name = "help", .shortc = 'h', .kind = OPT_HELP, .help = "this help" },
	{ .name = "version", .shortc = 'V', .kind = OPT_VERSION, .help = "print the version" },
};
#undef NATS_ALIAS

#define NOPTS (sizeof(opt_table) / sizeof(opt_table[0]))
#define HELP_COL 28  /* where --help's descriptions start */

/* One option's lines of --help: its names, then HELP, a line at a time. */
static void opt_help(FILE *f, const struct opt *p)
{
	char left[64];
	int n;

	if (p->kind == OPT_TEXT)
		fputs(p->help, f);
	if (p->kind == OPT_TEXT || !p->help)
		return;
	if (p->shortc)
		n = snprintf(left, sizeof(left), "  -%c, --%s", p->shortc, p->name);
	else
		n = snprintf(left, sizeof(left), "      --%s", p->name);
	if (p->arg)
		n += snprintf(left + n, sizeof(left) - (size_t)n, " %s", p->arg);
	/* Names too long for the column keep two spaces before the text. */
	fprintf(f, "%-*s", n < HELP_COL ? HELP_COL : n + 2, left);
	for (const char *s = p->help;;) {
		const char *nl = strchr(s, '\n');

		fprintf(f, "%.*s\n", nl ? (int)(nl - s) : (int)strlen(s), s);
		if (!nl)
			break;
		s = nl + 1;
		fprintf(f, "%*s", HELP_COL, "");
	}
}

static void usage(FILE *f)
{
	fputs("Usage: procregd [OPTIONS]\n"
	      "The procreg daemon: the single writer of a scope's registry table.\n"
	      "\n", f);
	for (size_t i = 0; i < NOPTS; i++)
		opt_help(f, &opt_table[i]);
	fputs("\n"
	      "Socket activation: a listening socket passed by systemd (LISTEN_FDS,\n"
	      "LISTEN_PID) is used instead of binding one; see procregd@.socket.\n"
	      "\n"
	      "Files: DIR/procreg.SCOPE (the table, mode 0644) and DIR/procreg.SCOPE.owners\n"
	      "(queues and leases, mode 0600); each must be procregd's user's own, and DIR\n"
	      "must be sticky if others may write it. SIGTERM or SIGINT stops the daemon\n"
	      "cleanly; the table stays, and the next daemon re-attaches to it.\n", f);
}

/* V into P's field: a uint32_t or a uint64_t (the range keeps it in). */
static void opt_store(struct daemon_opts *o, const struct opt *p, uint64_t v)
{
	char *at = (char *)o + p->off;

	if (p->size == sizeof(uint32_t))
		*(uint32_t *)at = (uint32_t)v;
	else
		*(uint64_t *)at = v;
}

/* --peer, --bridge-opt and --nats-KEY: the repeated ones. */
static int opt_add(struct daemon_opts *o, const struct opt *p, const char *arg)
{
	char **np, *kv = NULL;

	if (p->kind == OPT_PEER) {
		const char **pp = realloc(o->peers, (o->npeers + 1) * sizeof(*pp));

		bool word = true;

		/* One word of printable ASCII, as the nodes file carries it. */
		for (const char *c = arg; *c; c++)
			word &= *c > ' ' && *c <= '~';
		if (!pp || strlen(arg) > PR_BP_ADDR_MAX || !strchr(arg, ':') || !word) {
			fprintf(stderr, "procregd: --peer %s: want HOST:PORT\n", arg);
			return -1;
		}
		o->peers = pp;
		o->peers[o->npeers++] = arg;
		return 0;
	}
	np = realloc(o->bridge_opts, (o->nbridge_opts + 1) * sizeof(*np));
	if (np)
		o->bridge_opts = np;
	if (p->kind == OPT_BRIDGE_OPT) {
		if (!strchr(arg, '=') || arg[0] == '=') {
			fprintf(stderr, "procregd: --bridge-opt %s: want KEY=VALUE\n", arg);
			return -1;
		}
		kv = strdup(arg);
	} else {
		if (!o->bridge && !o->bridge_backend)
			o->bridge = "nats";
		if (asprintf(&kv, "%s=%s", p->key, arg) < 0)
			kv = NULL;
	}
	if (!np || !kv) {
		free(kv);
		fprintf(stderr, "procregd: out of memory\n");
		return -1;
	}
	o->bridge_opts[o->nbridge_opts++] = kv;
	return 0;
}

/* One option given, its argument ARG (NULL if it takes none). */
static int opt_apply(struct daemon_opts *o, const struct opt *p, char *arg)
{
	char *at = (char *)o + p->off;
	uint64_t v;

	switch (p->kind) {
	case OPT_TEXT: break;
	case OPT_FLAG: *(bool *)at = true; break;
	case OPT_COUNT: (*(int *)at)++; break;
	case OPT_STR: *(const char **)at = arg; break;
	case OPT_NUM:
		if (pr_parse_u64(arg, p->unit, &v) < 0 || v < p->min || v > p->max) {
			fprintf(stderr, "procregd: --%s %s: want %s\n", p->name, arg, p->want);
			return -1;
		}
		opt_store(o, p, v);
		break;
	case OPT_PEER:
	case OPT_BRIDGE_OPT:
	case OPT_NATS:
		return opt_add(o, p, arg);
	case OPT_HELP: usage(stdout); exit(0);
	case OPT_VERSION: printf("procregd %s\n", PROCREG_VERSION_STRING); exit(0);
	}
	if (p->set)
		*(bool *)((char *)o + p->set) = true;
	return 0;
}

/* getopt_long's arrays from opt_table: each option's val is 256 + its
 * index there, the short ones' their letter. */
static void opt_getopt(struct option *lo, char *shorts)
{
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *p = &opt_table[i];
		bool has_arg = p->kind >= OPT_STR && p->kind <= OPT_NATS;

		if (!p->name)
			continue;
		*lo++ = (struct option){ p->name, has_arg ? required_argument : no_argument, NULL,
					 256 + (int)i };
		if (p->shortc) {
			*shorts++ = p->shortc;
			if (has_arg)
				*shorts++ = ':';
		}
	}
	*lo = (struct option){ 0 };
	*shorts = '\0';
}

/* What getopt_long returned as its entry; NULL: an error it reported. */
static const struct opt *opt_find(int c)
{
	if (c >= 256 && c < 256 + (int)NOPTS)
		return &opt_table[c - 256];
	for (size_t i = 0; c != '?' && i < NOPTS; i++)
		if (opt_table[i].shortc == c)
			return &opt_table[i];
	return NULL;
}

/* What no single option can check: defaults that hang on others, and
 * options that need or exclude each other. */
static int check_opts(struct daemon_opts *o)
{
	if (!o->reserved_clients_set)
		o->reserved_clients = o->max_clients / 32;
	if (o->reserved_clients >= o->max_clients) {
		fprintf(stderr, "procregd: --reserved-clients %u: want fewer than --max-clients (%u)\n",
			o->reserved_clients, o->max_clients);
		return -1;
	}
	if (!o->node && (o->listen || o->advertise || o->npeers || o->cookie_file ||
			 o->bridge_backend || o->resolver || o->bridge || o->nbridge_opts ||
			 o->bridge_flush_bytes_set || o->max_mesh_queue_set)) {
		fprintf(stderr, "procregd: --listen, --advertise, --peer, --cookie-file, --bridge, --bridge-backend, the backend's options, --resolver, --bridge-flush-bytes and --max-mesh-queue need --node\n");
		return -1;
	}
	if (o->max_mesh_queue_set && (o->bridge_backend || (o->bridge && strcmp(o->bridge, "tcp")))) {
		fprintf(stderr, "procregd: --max-mesh-queue is the TCP mesh's (--bridge tcp)\n");
		return -1;
	}
	if (o->bridge && o->bridge_backend) {
		fprintf(stderr, "procregd: --bridge and --bridge-backend: one or the other\n");
		return -1;
	}
	if (o->listen && (strlen(o->listen) > PR_BP_ADDR_MAX || !strchr(o->listen, ':'))) {
		fprintf(stderr, "procregd: --listen %s: want HOST:PORT\n", o->listen);
		return -1;
	}
	if (o->advertise && (strlen(o->advertise) > PR_BP_ADDR_MAX || !strchr(o->advertise, ':') ||
			     strpbrk(o->advertise, " \t\n"))) {
		fprintf(stderr, "procregd: --advertise %s: want HOST:PORT\n", o->advertise);
		return -1;
	}
	return 0;
}

static int parse_opts(struct daemon_opts *o, int argc, char **argv)
{
	static struct option lo[NOPTS + 1];
	static char shorts[2 * NOPTS + 1];
	const struct opt *p;
	int c;

	opt_getopt(lo, shorts);
	for (size_t i = 0; i < NOPTS; i++)
		if (opt_table[i].kind == OPT_NUM)
			opt_store(o, &opt_table[i], opt_table[i].def);
	while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		p = opt_find(c);
		if (!p) {
			usage(stderr);
			return -1;
		}
		if (opt_apply(o, p, optarg) < 0)
			return -1;
	}
	if (optind < argc) {
		fprintf(stderr, "procregd: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	return check_opts(o);
}

static int mkdir_p(const char *path, mode_t mode)
{
	char buf[PR_PATH_MAX];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* The table's directory must exist. Made here, a mistyped --dir would put
 * a table of up to --max-size on whatever filesystem holds that path (the
 * root's, say) rather than the tmpfs meant. 0, or a negative errno after
 * saying why. */
static int table_dir_check(const char *dir)
{
	struct stat st;

	if (stat(dir, &st) < 0) {
		int err = -errno;

		log_err("table directory %s: %s (procregd does not create it)", dir,
			strerror(-err));
		return err;
	}
	if (!S_ISDIR(st.st_mode)) {
		log_err("table directory %s: not a directory", dir);
		return -ENOTDIR;
	}
	return 0;
}

/* LEN bytes at OFF of the header of TABLE, a file the writer would not
 * take: for the message that says why. False if they cannot be read. */
static bool table_field(const char *table, size_t off, void *out, size_t len)
{
	int fd = open(table, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	bool ok = fd >= 0 && pread(fd, out, len, (off_t)off) == (ssize_t)len;

	if (fd >= 0)
		close(fd);
	return ok;
}

/* The pid of the daemon that holds the scope's lock, as its table says
 * (0: not published yet). Read from the file, which is not mapped when
 * the lock is refused. */
static uint32_t serving_pid(const char *table)
{
	uint32_t pid;

	return table_field(table, offsetof(struct pr_table_hdr, daemon_pid), &pid, sizeof(pid))
		       ? pid
		       : 0;
}

/* A table another build wrote, or something else: it holds names this
 * build cannot read, let alone carry over, and is never overwritten
 * (processes may still be using it, through the build that wrote it). */
static void refuse_foreign_table(const char *table, const char *why)
{
	uint64_t magic = 0;
	uint32_t version = 0;
	char which[64] = "";

	if (table_field(table, offsetof(struct pr_table_hdr, magic), &magic, sizeof(magic)) &&
	    magic == PR_TABLE_MAGIC &&
	    table_field(table, offsetof(struct pr_table_hdr, layout_version), &version,
			sizeof(version)) &&
	    version != PR_LAYOUT_VERSION)
		snprintf(which, sizeof(which), " (its layout %u, this build's %u)", version,
			 PR_LAYOUT_VERSION);
	log_err("%s: %s%s; this build cannot read it or carry its names over: stop what uses "
		"it, move it away and start procregd again", table, why, which);
}

/* A start that failed leaves nothing it made behind: a table it created,
 * with the journal of owners and the nodes file beside it; never one it
 * re-attached to, which holds the names of live processes. Under the
 * scope's lock, so no other daemon uses these files. */
static void undo_start(struct daemon *d)
{
	static const char *const suffix[] = { "", ".owners", PR_NODES_SUFFIX };
	char path[PR_PATH_MAX + 16];

	if (!d->w.map.hdr || d->w.attached)
		return;
	for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", d->paths.table, suffix[i]);
		unlink(path);
	}
}

static void arm_timer(struct daemon *d, uint64_t ns)
{
	struct itimerspec its = { .it_value = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) } };

	timerfd_settime(d->timerfd, 0, &its, NULL);
	d->timer_due_ns = procreg__mono_ns() + ns;
}

/* The timer set for DUE (CLOCK_MONOTONIC; UINT64_MAX: none), if it would
 * fire later. */
static void arm_by(struct daemon *d, uint64_t due)
{
	uint64_t now;

	if (due == UINT64_MAX || due >= d->timer_due_ns)
		return;
	now = procreg__mono_ns();
	arm_timer(d, due > now ? due - now : 1);
}

static void tick(struct daemon *d)
{
	uint64_t now = procreg__mono_ns(), lease_ns = owners_tick(d), next;
	int pending = procreg__w_reclaim(&d->w);

	/* Uids paced for the feed whose turn has come; notifications owed
	 * (those still owed set the timer below: arm_by). */
	if (d->feed_resume_ns <= now)
		server_unpark(d);
	if (d->feed_resume_ns != UINT64_MAX && d->feed_resume_ns - now < lease_ns)
		lease_ns = d->feed_resume_ns - now;
	if (d->notify_resume_ns <= now)
		server_notify_owed(d);

	/* Readers that hold a grace period up too long; the registry. */
	readers_tick(d);
	closer_tick(d);
	log_limited_flush();
	/* An fd may have been freed other than by the closer (a process's
	 * pidfd on its death): accepting, if paused for want of one, is
	 * tried again. */
	server_accept_resume(d);
	pending = d->w.gp_target != 0 || d->w.retired.n != 0;
	if (d->bridge && now - d->bridge_tick_ns > IDLE_TICK_NS / 4) {
		bridge_tick(d);
		d->bridge_tick_ns = now;
	}
	next = pending ? RECLAIM_TICK_NS : IDLE_TICK_NS;
	if (d->bridge && next > IDLE_TICK_NS / 4)
		next = IDLE_TICK_NS / 4;
	arm_timer(d, lease_ns < next ? (lease_ns ? lease_ns : 1) : next);
	if (d->w.feed_pending)
		server_notify_feed(d);
	/* Notifications that just went over their uid's budget: owed. */
	arm_by(d, d->notify_resume_ns);
	procreg__w_feed_wake(&d->w);
}

/* Every client, bridge connection and process holding names costs an fd:
 * take what the hard limit allows. The soft limit is often 1024, for
 * select(), which procregd does not use. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			log_warn("cannot raise the open files limit: %s", strerror(errno));
	}
}

/* The scope's lock (flock) belongs to the table's open file, which our
 * descriptor and our mapping both hold. Our descriptors are shared with
 * the closing processes (closer.c), one of which may outlive us, held in
 * a close, with them: our I/O goes through another open of the file, so
 * that the lock is held by the mapping alone and ends with this process,
 * however it ends (SIGKILL too), letting the next daemon serve. Where
 * /proc cannot reopen it, the descriptor is kept (and a close held then
 * keeps the lock after a crash, not after SIGTERM, which closes it). */
static void lock_by_mapping(struct daemon *d)
{
	char path[64];
	int io;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", d->w.table_fd);
	io = open(path, O_RDWR | O_CLOEXEC);
	if (io < 0) {
		log_warn("%s: cannot reopen it (%s): a crash may leave its lock held while a passed file's close waits",
			 d->paths.table, strerror(errno));
		return;
	}
	close(d->w.table_fd);
	d->w.table_fd = io;
}

static uint32_t w_owner_of(uint32_t uid)
{
	return (uint32_t)subuid_owner((uid_t)uid);
}

/* The local share (--local-size), once the table's size is known: like
 * the reserve, a threshold, not a part of the file. Other nodes' entries
 * keep at least a quarter of the table, or there would be no point in
 * replicating: they leave the room kept for the name index too, a
 * quarter at most (lib/writer.c), so the share and the reserve may have
 * half. */
static int local_share_set(struct daemon *d)
{
	uint64_t size = d->w.map.size;

	d->w.local_share = d->o.local_size_set ? d->o.local_size : size / 8;
	if (d->w.local_share > size / 2) {
		log_err("%s: --local-size %llu: want at most half the table (%llu bytes)",
			d->paths.table, (unsigned long long)d->w.local_share,
			(unsigned long long)(size / 2));
		return -EINVAL;
	}
	if (d->w.local_share + d->w.reserve > size / 2) {
		log_err("%s: --local-size %llu with --reserved-size %llu: want at most half the "
			"table together (%llu bytes), so that other nodes' entries have a quarter "
			"beside the room kept for the name index",
			d->paths.table, (unsigned long long)d->w.local_share,
			(unsigned long long)d->w.reserve, (unsigned long long)(size / 2));
		return -EINVAL;
	}
	return 0;
}

static int setup(struct daemon *d)
{
	struct pr_writer_opts wo = { .max_size = d->o.max_size, .readers = d->o.max_readers,
				     .mode = 0644 };
	const char *why = "";
	sigset_t mask;
	char sockdir[PR_PATH_MAX];
	int err;

	d->lfd = d->sigfd = d->timerfd = d->epfd = d->procs_epfd = d->spare_fd = -1;
	d->notify_fd = d->watchdog_fd = -1;
	d->uid = geteuid();
	/* Before anything is counted: the closings, the owners journal's
	 * places, the first client. */
	err = subuid_load(d);
	if (err) {
		log_err("--subuid-file %s: not read, not started", d->o.subuid_file);
		return err;
	}
	d->no_peerpidfd = getenv("PROCREG_NO_PEERPIDFD") != NULL;
	d->no_passrights = getenv("PROCREG_NO_PASSRIGHTS") != NULL || !server_passrights();
	err = procreg__paths(&d->paths, d->o.scope, d->o.dir, d->o.socket);
	if (err) {
		log_err("scope or directory: %s", strerror(-err));
		return err;
	}
	if (d->paths.socket[0])
		snprintf(d->socket_path, sizeof(d->socket_path), "%s", d->paths.socket);
	else if ((err = procreg__default_socket(d->socket_path, sizeof(d->socket_path),
						 d->paths.scope, d->o.dir)) < 0) {
		log_err("socket path too long");
		return err;
	}
	/* Clients find the socket by the path the table records, from
	 * wherever they run: a relative one (--dir . or --socket x.sock)
	 * reached it only from this directory. */
	if (d->socket_path[0] != '/') {
		char cwd[PATH_MAX];
		int n;

		if (!getcwd(cwd, sizeof(cwd))) {
			err = -errno;
			log_err("socket %s: the working directory: %s", d->socket_path, strerror(-err));
			return err;
		}
		n = snprintf(sockdir, sizeof(sockdir), "%s/%s", cwd, d->socket_path);
		if (n < 0 || (size_t)n >= sizeof(d->socket_path)) {
			log_err("socket path too long");
			return -ENAMETOOLONG;
		}
		memcpy(d->socket_path, sockdir, (size_t)n + 1);
	}
	err = table_dir_check(d->paths.dir);
	if (err)
		return err;
	snprintf(sockdir, sizeof(sockdir), "%s", d->socket_path);
	if (!err && strrchr(sockdir, '/') && strrchr(sockdir, '/') != sockdir) {
		*strrchr(sockdir, '/') = 0;
		err = mkdir_p(sockdir, 0755);
	}
	if (err) {
		log_err("cannot create directories for %s, %s: %s", d->paths.dir, d->socket_path,
			strerror(-err));
		return err;
	}
	d->in = malloc(PR_PACKET_MAX);
	d->out = malloc(PR_PACKET_MAX);
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	d->procs_epfd = epoll_create1(EPOLL_CLOEXEC);
	d->procs_ev.kind = EV_PROCS;
	if (!d->in || !d->out || d->epfd < 0 || d->procs_epfd < 0 ||
	    ev_add(d, d->procs_epfd, EPOLLIN, &d->procs_ev) < 0)
		return -ENOMEM;
	/* Before the first client: what clients pass is closed there. And
	 * before the table is mapped: the closing processes share our
	 * descriptors, not our memory, so none holds the mapping, which
	 * alone holds the scope's lock (lock_by_mapping() below). */
	err = closer_start(d);
	if (err) {
		log_err("the closing processes: %s", strerror(-err));
		return err;
	}

	err = procreg__writer_open(&d->w, &d->paths, &wo, &why);
	if (err) {
		if (err == -EBUSY && serving_pid(d->paths.table))
			log_err("%s: %s (pid %u)", d->paths.table, why, serving_pid(d->paths.table));
		else if (err == -EBUSY)
			log_err("%s: %s (starting: its pid is not in the table yet)",
				d->paths.table, why);
		else if (err == -EPROTO)
			refuse_foreign_table(d->paths.table, why);
		else
			log_err("%s: %s%s%s", d->paths.table, why ? why : "", why ? ": " : "",
				strerror(-err));
		return err;
	}
	lock_by_mapping(d);
	/* The reserve is this daemon's to choose, whatever the table's
	 * size: it is a threshold, not a part of the file. */
	d->w.reserve = d->o.reserved_size_set ? d->o.reserved_size : d->w.map.size / 32;
	/* Runs of slots are counted against the uid whose limits a uid's
	 * names count against (procreg__w_place_ok()). */
	d->w.owner_of = w_owner_of;
	if (d->w.reserve > d->w.map.size / 2) {
		log_err("%s: --reserved-size %llu: want at most half the table (%llu bytes)",
			d->paths.table, (unsigned long long)d->w.reserve,
			(unsigned long long)(d->w.map.size / 2));
		return -EINVAL;
	}
	err = local_share_set(d);
	if (err)
		return err;
	if (d->w.attached) {
		err = procreg__w_recover(&d->w);
		if (err == -ENOSPC) {
			log_err("%s: cannot allocate the table's pages: %s (the filesystem of %s is full)",
				d->paths.table, strerror(-err), d->paths.dir);
			return err;
		}
		if (err) {
			log_err("%s: cannot recover the table: %s; move it away to start afresh",
				d->paths.table, strerror(-err));
			return err;
		}
	}
	procs_start(d);
	server_feed_pacing(d);
	err = owners_new(d);
	if (err)
		return err;
	/* Recovery removes the names of the dead and passes them on: one
	 * batch (see daemon.h). */
	procreg__w_batch_begin(&d->w);
	err = d->w.attached ? procs_recover(d) : 0;
	if (!err)
		err = owners_recover(d, d->w.attached);
	procreg__w_batch_end(&d->w);
	if (err)
		return err;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	d->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	d->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (d->sigfd < 0 || d->timerfd < 0)
		return -errno;
	d->signal_ev.kind = EV_SIGNAL;
	d->timer_ev.kind = EV_TIMER;
	if ((err = ev_add(d, d->sigfd, EPOLLIN, &d->signal_ev)) < 0 ||
	    (err = ev_add(d, d->timerfd, EPOLLIN, &d->timer_ev)) < 0)
		return err;
	raise_fd_limit();
	err = notify_init(d);
	if (err) {
		log_err("NOTIFY_SOCKET: %s", strerror(-err));
		return err;
	}
	err = server_listen(d);
	if (err) {
		if (err == -EADDRINUSE)
			log_err("%s: a live socket is bound there (systemd's procregd@%s.socket, "
				"or another daemon's): not replaced; start procregd@%s.service, or "
				"give --socket", d->socket_path, d->paths.scope, d->paths.scope);
		else if (err == -EACCES)
			log_err("%s: a socket this user (uid %u) may not connect to is bound there "
				"(another user's, live or not): not replaced; remove it as its "
				"owner, or give --socket", d->socket_path, (unsigned)geteuid());
		else
			log_err("%s: cannot listen: %s", d->socket_path, strerror(-err));
		return err;
	}
	if (d->o.node && (err = bridge_start(d)) < 0)
		return err;
	/* Ours, the bridge's port among them: shut down should we die
	 * leaving them to a closing process (closer.c). */
	closer_listeners(d);

	readers_start(d);
	if (d->o.max_readers > d->w.map.hdr->readers_cap) {
		log_warn("--max-readers %u: the table's reader registry has %u entries, fixed "
			"when it was made: %u it is", d->o.max_readers, d->w.map.hdr->readers_cap,
			d->w.map.hdr->readers_cap);
		d->o.max_readers = d->w.map.hdr->readers_cap;
	}
	procs_limits(d);
	/* Tell clients where we are, then that we are, then (after the pid,
	 * which a reader checks once it sees it) that readers should hand
	 * their pages over. */
	memcpy(d->w.map.hdr->socket_path, d->socket_path, sizeof(d->socket_path));
	CMM_STORE_SHARED(d->w.map.hdr->daemon_start_ticks, 0);
	procreg__proc_start_time(getpid(), &d->w.map.hdr->daemon_start_ticks);
	CMM_STORE_SHARED(d->w.map.hdr->daemon_started_ns, procreg__now_ns());
	PR_STORE_REL(&d->w.map.hdr->daemon_pid, (uint32_t)getpid());
	PR_STORE_REL(&d->w.map.hdr->daemon_gen, d->w.map.hdr->daemon_gen + 1);
	/* Followers asleep on the feed told the daemon before us, or none:
	 * woken, they tell us (feed.c). After the listen: one whose connect
	 * was refused read the futex word before this. */
	d->w.feed_force = true;
	procreg__w_feed_wake(&d->w);
	arm_timer(d, RECLAIM_TICK_NS);
	log_msg("serving scope '%s': table %s, socket %s, up to %u reader processes and "
		"%u reader pages, processes holding names: %u a uid, %llu of all but root's%s",
		d->paths.scope, d->paths.table, d->socket_path, d->o.max_readers, d->rpages_max,
		d->o.max_procs_per_uid, (unsigned long long)d->procs_room,
		d->w.membarrier ? "" : " (no membarrier: readers use full barriers)");
	return 0;
}

/* A full filesystem, logged when it starts failing the writer and when
 * space is found again; not at every request it fails meanwhile. */
static void note_space(struct daemon *d)
{
	if (d->w.fs_full == d->fs_full_logged)
		return;
	d->fs_full_logged = d->w.fs_full;
	if (d->w.fs_full)
		log_warn("%s: the filesystem of %s is full: writes that need more of the table fail with ENOSPC until space is freed",
			d->paths.table, d->paths.dir);
	else
		log_msg("%s: space is back: the table grows again", d->paths.table);
}

static void run(struct daemon *d)
{
	struct epoll_event evs[64];

	while (!d->stop) {
		/* Deaths under way that may go on: a look, not a sleep. */
		int n = epoll_wait(d->epfd, evs, 64, d->dying_ready ? 0 : -1), clients;

		d->wake_ns = procs_wake_clock();

		if (n < 0) {
			if (errno == EINTR)
				continue;
			log_err("epoll_wait: %s", strerror(errno));
			break;
		}
		procreg__w_batch_begin(&d->w);
		/* Deaths first, all of them: then no request handled below
		 * can free a proc that is still to come in this batch (SYNC
		 * handles pending deaths, a reused pid retires a stale entry),
		 * and a storm of deaths costs a few waits per batch, not one
		 * per hung-up client between them. Their entries leave after
		 * the batch's events, a slice at a time (procs.c: deaths). */
		clients = 0;
		for (int i = 0; i < n; i++) {
			struct ev *e = evs[i].data.ptr;

			clients += e->kind == EV_CLIENT;
			if (e->kind == EV_PROCS) {
				procs_drain_deaths(d);
				evs[i].data.ptr = NULL;
			}
		}
		/* For the bridge: its work waits its turn only while clients
		 * have some (bridge.c, bg_wait()). */
		if (clients)
			d->clients_ns = procreg__mono_ns();
		for (int i = 0; i < n; i++) {
			struct ev *e = evs[i].data.ptr;

			if (!e)
				continue;
			switch (e->kind) {
			case EV_LISTEN:
				server_accept(d);
				break;
			case EV_SIGNAL: {
				struct signalfd_siginfo si;

				if (read(d->sigfd, &si, sizeof(si)) == sizeof(si)) {
					log_msg("%s: shutting down", strsignal((int)si.ssi_signo));
					d->stop = true;
				}
				break;
			}
			case EV_TIMER: {
				uint64_t x;

				if (read(d->timerfd, &x, sizeof(x)) < 0 && errno != EAGAIN)
					break;
				tick(d);
				break;
			}
			case EV_CLIENT:
				/* May free this client; no other object. */
				server_client_event(d, (struct client *)e, evs[i].events, clients == 1);
				break;
			case EV_BRIDGE:
				bridge_event(d);
				break;
			case EV_PROC:   /* in procs_epfd: procs_drain_deaths() */
			case EV_PROCS:  /* drained above */
				break;
			case EV_READER:
				readers_gone(d, (struct reader *)e);
				break;
			case EV_WATCHDOG:
				notify_watchdog(d);
				break;
			case EV_CLOSER:
				closer_event(d);
				break;
			}
			if (d->w.retired_bytes > RECLAIM_BYTES)
				procreg__w_reclaim(&d->w);
		}
		/* Stopping: the deaths under way finished first, so that the
		 * table is left as the processes are. */
		if (d->stop)
			procs_dying_finish(d);
		else
			procs_dying_work(d);
		/* A lease set by this batch may be due before the timer, and
		 * so may a uid paced by it, or a death paced. */
		{
			uint64_t due = owners_next_deadline(d);

			if (d->feed_resume_ns < due)
				due = d->feed_resume_ns;
			if (d->dying_resume_ns < due)
				due = d->dying_resume_ns;
			arm_by(d, due);
		}
		procs_reap(d);
		readers_reap(d);
		note_space(d);
		/* This batch's changes to the other nodes, in one write each. */
		if (d->bridge) {
			bridge_flush(d);
			arm_by(d, bridge_due(d));
		}
		/* Names lost this batch: their owners told, now that the table
		 * shows who has them. */
		if (d->lost)
			procs_tell_lost(d);
		/* One wake-up for the followers of the feed per batch; the
		 * notifications over their uid's budget owed, for the timer. */
		if (d->w.feed_pending)
			server_notify_feed(d);
		arm_by(d, d->notify_resume_ns);
		procreg__w_feed_wake(&d->w);
		/* The batch is out: what it retired may now be reclaimed. */
		procreg__w_batch_end(&d->w);
		/* Memory was retired: start its grace period within a tick, not
		 * at once. One membarrier then covers every write of the tick,
		 * instead of one per event batch under a write storm. */
		if (d->w.retired.n && !d->w.gp_target &&
		    d->timer_due_ns > procreg__mono_ns() + RECLAIM_TICK_NS)
			arm_timer(d, RECLAIM_TICK_NS);
	}
}

static void teardown(struct daemon *d)
{
	bridge_stop(d);
	server_close_all(d);
	closer_stop(d);
	owners_free_all(d);
	readers_free_all(d);
	if (d->w.map.hdr)
		PR_STORE_REL(&d->w.map.hdr->daemon_pid, 0);
	procs_free_all(d);
	procreg__writer_close(&d->w);
	if (d->sigfd >= 0)
		close(d->sigfd);
	if (d->timerfd >= 0)
		close(d->timerfd);
	if (d->epfd >= 0)
		close(d->epfd);
	if (d->procs_epfd >= 0)
		close(d->procs_epfd);
	free(d->in);
	free(d->out);
	free(d->o.peers);
	for (size_t i = 0; i < d->o.nbridge_opts; i++)
		free(d->o.bridge_opts[i]);
	free(d->o.bridge_opts);
}

/* Detach: the parent returns once the child is serving (or failed), so
 * "procregd && procreg ls" works. */
static int daemonize(int *notify_fd)
{
	int p[2];
	pid_t pid;
	char status = 1;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		close(p[1]);
		if (read(p[0], &status, 1) != 1)
			status = 1;
		_exit(status);
	}
	close(p[0]);
	setsid();
	*notify_fd = p[1];
	return 0;
}

int main(int argc, char **argv)
{
	static struct daemon d;
	int notify = -1, err;

	if (parse_opts(&d.o, argc, argv) < 0 || log_open(d.o.log_file) < 0)
		return 2;
	log_set_level(d.o.verbose ? LOG_DEBUG : LOG_INFO);
	/* Before detaching: LISTEN_PID names this pid, not our child's. */
	d.o.listen_fd = server_inherited_fd();
	if (d.o.listen_fd < -1)
		return 1;
	if (!d.o.foreground && daemonize(&notify) < 0) {
		perror("procregd: fork");
		return 1;
	}
	err = setup(&d);
	if (notify >= 0) {
		char status = err ? 1 : 0;
		int devnull = open("/dev/null", O_RDWR);

		if (write(notify, &status, 1) < 0)
			err = err ? err : -errno;
		close(notify);
		if (devnull >= 0) {
			dup2(devnull, 0);
			dup2(devnull, 1);
			close(devnull);
		}
		/* Whoever started us may be gone, and a pipe of theirs (the
		 * CLI's autostart reads one till it closes) must close. */
		if (!err)
			log_detached();
	}
	if (!err) {
		/* After the detach: MAINPID is the pid that serves. */
		notify_send(&d, "READY=1\nSTATUS=serving scope '%s'\nMAINPID=%d", d.paths.scope,
			    (int)getpid());
		run(&d);
		notify_send(&d, "STOPPING=1\nSTATUS=stopping");
	} else {
		undo_start(&d);
	}
	notify_close(&d);
	teardown(&d);
	if (!err)
		log_msg("stopped");
	return err ? 1 : 0;
}
