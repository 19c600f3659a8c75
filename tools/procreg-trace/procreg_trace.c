/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * procreg-trace - eBPF tracing of procreg's hot paths through its USDT
 * probes (lib/probes.h): latency histograms, the hottest names, and a live
 * stream of registry events.
 *
 *   procreg-trace lat     [-p PID] [--interval S] [--duration S]
 *   procreg-trace top     [-p PID] [--interval S] [--duration S] [--rows N]
 *   procreg-trace events  [-p PID] [--duration S] [--json]
 *   procreg-trace bridge  [--changes] [--interval S] [--duration S] [--json]
 *
 * The shape is libbpf-bootstrap's: procreg_trace.bpf.c is the kernel
 * side, procreg_trace.h the records both sides share, and this file opens
 * the skeleton, sets its rodata, loads it, attaches the handlers a
 * subcommand needs, and polls until SIGINT, SIGTERM or --duration.
 *
 * Library probes are attached in the objects of one process (-p PID:
 * every object it maps that carries procreg probes, libprocreg.so or a
 * program linked with the static library), for every process that maps
 * --lib PATH, or by default for every process, in the objects the
 * registry's users run, counting only the calls to the registry's table
 * ("Without -p or --lib" below). procregd's probes are attached in the
 * daemon that serves the scope.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "clock.h"
#include "output.h"
#include "procreg.h"
#include "procreg/version.h"
#include "procreg_trace.h"
#include "procreg_trace.skel.h"

/* The BPF side cannot include <procreg.h>: its buffers are sized here. */
_Static_assert(PT_NAME_MAX == PROCREG_NAME_MAX + 1, "a name and its NUL");
_Static_assert(PT_NODE_MAX == PROCREG_NODE_NAME_MAX + 1, "a node's name and its NUL");

#define MAX_LINKS 512
#define MAX_OBJECTS 64

enum cmd { CMD_LAT, CMD_TOP, CMD_EVENTS, CMD_BRIDGE };
static const char *const cmd_names[] = { "lat", "top", "events", "bridge" }; /* by enum cmd */

static struct {
	enum cmd cmd;
	pid_t pid;                 /* 0: every process that maps the library */
	double interval;           /* seconds */
	double duration;           /* seconds, 0: until a signal */
	bool json;
	bool verbose;
	bool changes;              /* bridge: a line per change out and entry applied */
	int rows;
	const char *scope, *dir;
	const char *libs[MAX_OBJECTS];
	int nlibs;
} opt = { .interval = 1.0, .rows = 10 };

static volatile sig_atomic_t exiting;
static bool quiet_libbpf;          /* while trying objects that may lack our probes */

static void on_signal(int sig)
{
	(void)sig;
	exiting = 1;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG && !opt.verbose)
		return 0;
	if (quiet_libbpf && !opt.verbose)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: procreg-trace COMMAND [OPTIONS]\n"
		"Traces procreg's USDT probes with eBPF (needs root, or CAP_BPF and CAP_PERFMON).\n"
		"\n"
		"Commands:\n"
		"  lat       log2 latency histograms: lookup, request (client round trip),\n"
		"            serve (procregd's time on a request), grace period, death to removal\n"
		"  top       the names looked up most (by hash, resolved from the table), misses,\n"
		"            lookups per process\n"
		"  events    registrations, deaths with their names and time to removal,\n"
		"            conflicts, grace periods, index growth\n"
		"  bridge    replication (procregd --node): nodes up and down, conflicts between\n"
		"            nodes as they happen; every interval, changes out, frames in,\n"
		"            entries applied, and a histogram of the time to apply a frame\n"
		"\n"
		"Options:\n"
		"  -p, --pid PID       trace one process (default: every process's calls\n"
		"                      to the registry, however short-lived);\n"
		"                      procregd is traced either way\n"
		"  -i, --interval S    seconds between reports of lat and top (default 1)\n"
		"  -d, --duration S    stop after S seconds (default: at SIGINT or SIGTERM)\n"
		"  -n, --rows N        top: names and processes shown (default 10)\n"
		"      --json          events, bridge: one JSON object per line\n"
		"      --changes       bridge: also a line per change sent and entry applied\n"
		"      --lib PATH      without -p: trace every process that maps PATH\n"
		"                      (repeatable), whatever registry it uses\n"
		"      --scope NAME    the registry's scope (default $PROCREG_SCOPE or 'default')\n"
		"      --dir DIR       its directory (default $PROCREG_DIR)\n"
		"  -v, --verbose       libbpf's messages\n"
		"  -V, --version       print the version\n"
		"\n"
		"See procreg-trace(8) and README.md (\"Tracing\") for the probes.\n");
}

static double parse_secs(const char *name, const char *s)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || v < 0 || v > 86400 * 365) {
		fprintf(stderr, "procreg-trace: %s %s: expected seconds\n", name, s);
		exit(2);
	}
	return v;
}

static void parse(int argc, char **argv)
{
	enum { O_JSON = 256, O_LIB, O_SCOPE, O_DIR, O_CHANGES };
	static const struct option lo[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "interval", required_argument, NULL, 'i' },
		{ "duration", required_argument, NULL, 'd' },
		{ "rows", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, O_JSON },
		{ "changes", no_argument, NULL, O_CHANGES },
		{ "lib", required_argument, NULL, O_LIB },
		{ "scope", required_argument, NULL, O_SCOPE },
		{ "dir", required_argument, NULL, O_DIR },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	const char *cmd;
	char *end;
	size_t i;
	int c;

	while ((c = getopt_long(argc, argv, "p:i:d:n:vhV", lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			opt.pid = (pid_t)strtol(optarg, &end, 10);
			if (*end || opt.pid <= 0) {
				fprintf(stderr, "procreg-trace: -p %s: expected a pid\n", optarg);
				exit(2);
			}
			break;
		case 'i':
			/* 0 would report without pause, and spin. */
			opt.interval = parse_secs("--interval", optarg);
			if (opt.interval < 0.01) {
				fprintf(stderr, "procreg-trace: --interval %s: want at least 0.01 "
					"seconds\n", optarg);
				exit(2);
			}
			break;
		case 'd': opt.duration = parse_secs("--duration", optarg); break;
		case 'n':
			opt.rows = atoi(optarg);
			if (opt.rows <= 0)
				opt.rows = 10;
			break;
		case O_JSON: opt.json = true; break;
		case O_CHANGES: opt.changes = true; break;
		case O_LIB:
			if (opt.nlibs == MAX_OBJECTS) {
				fprintf(stderr, "procreg-trace: too many --lib\n");
				exit(2);
			}
			/* Said now, not as a failure to attach later. */
			{
				struct stat st;

				if (stat(optarg, &st) < 0 || !S_ISREG(st.st_mode)) {
					fprintf(stderr, "procreg-trace: --lib %s: %s\n", optarg,
						stat(optarg, &st) < 0 ? strerror(errno)
								      : "not a regular file");
					exit(2);
				}
			}
			opt.libs[opt.nlibs++] = optarg;
			break;
		case O_SCOPE: opt.scope = optarg; break;
		case O_DIR: opt.dir = optarg; break;
		case 'v': opt.verbose = true; break;
		case 'h': usage(stdout); exit(0);
		case 'V': printf("procreg-trace %s\n", PROCREG_VERSION_STRING); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		exit(2);
	}
	cmd = argv[optind];
	for (i = 0; i < sizeof(cmd_names) / sizeof(cmd_names[0]); i++)
		if (!strcmp(cmd, cmd_names[i]))
			break;
	if (i == sizeof(cmd_names) / sizeof(cmd_names[0])) {
		fprintf(stderr, "procreg-trace: unknown command '%s'\nTry 'procreg-trace --help'.\n", cmd);
		exit(2);
	}
	opt.cmd = (enum cmd)i;
	if (opt.json && opt.cmd != CMD_EVENTS && opt.cmd != CMD_BRIDGE) {
		fprintf(stderr, "procreg-trace: --json goes with events and bridge\n");
		exit(2);
	}
	if (opt.changes && opt.cmd != CMD_BRIDGE) {
		fprintf(stderr, "procreg-trace: --changes goes with bridge\n");
		exit(2);
	}
}

static double now_s(void)
{
	return (double)pr_mono_ns() / 1e9;
}

/* "HH:MM:SS.mmm", wall clock. */
static const char *stamp(bool ms)
{
	static char buf[32];
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
	if (ms)
		snprintf(buf + 8, sizeof(buf) - 8, ".%03ld", ts.tv_nsec / 1000000);
	return buf;
}

/* ---- attaching -------------------------------------------------------- */

/* Which handler goes on which probe, for which command. */
struct probe {
	unsigned int cmds;             /* 1 << enum cmd */
	bool daemon;                   /* in procregd, else in the library */
	const char *provider, *name;
	size_t prog;                   /* offset of the program in skel->progs */
};

#define P(c, d, prov, nm, fn) { c, d, prov, nm, offsetof(struct procreg_trace, progs.fn) }
#define LAT (1u << CMD_LAT)
#define TOP (1u << CMD_TOP)
#define EVS (1u << CMD_EVENTS)
#define BRG (1u << CMD_BRIDGE)
static const struct probe probes[] = {
	P(TOP, false, "procreg", "lookup", on_lookup),
	P(LAT, false, "procreg", "lookup_latency", on_lookup_latency),
	P(LAT, false, "procreg", "request_done", on_request_done),
	P(LAT, true, "procregd", "reply", on_reply),
	P(LAT, true, "procregd", "grace_period", on_grace_period_hist),
	P(LAT, true, "procregd", "death", on_death_hist),
	P(EVS, true, "procregd", "grace_period", on_grace_period),
	P(EVS, true, "procregd", "death", on_death),
	P(EVS, true, "procregd", "change", on_change),
	P(EVS, true, "procregd", "conflict", on_conflict),
	P(EVS, true, "procregd", "grow", on_grow),
	P(BRG, true, "procregd", "bridge_out", on_bridge_out),
	P(BRG, true, "procregd", "bridge_in", on_bridge_in),
	P(BRG, true, "procregd", "bridge_apply", on_bridge_apply),
	P(BRG, true, "procregd", "bridge_node", on_bridge_node),
	P(BRG, true, "procregd", "bridge_conflict", on_bridge_conflict),
};
#undef P

static struct bpf_link *links[MAX_LINKS];
static int nlinks;

static struct bpf_program *prog_of(struct procreg_trace *skel, const struct probe *p)
{
	return *(struct bpf_program **)((char *)skel + p->prog);
}

/* Attach every handler of this command for DAEMON's side in PATH, for
 * PID (-1: all). Returns how many attached; *last_err gets the last
 * failure. */
static int attach_object(struct procreg_trace *skel, bool daemon, pid_t pid, const char *path,
			 int *last_err)
{
	int n = 0;

	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		const struct probe *p = &probes[i];
		struct bpf_link *l;

		if (!(p->cmds & (1u << opt.cmd)) || p->daemon != daemon || nlinks == MAX_LINKS)
			continue;
		l = bpf_program__attach_usdt(prog_of(skel, p), pid, path, p->provider, p->name, NULL);
		if (!l) {
			*last_err = -errno;
			if (opt.verbose)
				fprintf(stderr, "procreg-trace: %s: %s:%s: %s\n", path, p->provider,
					p->name, strerror(errno));
			continue;
		}
		links[nlinks++] = l;
		n++;
	}
	return n;
}

static bool wants(bool daemon)
{
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++)
		if ((probes[i].cmds & (1u << opt.cmd)) && probes[i].daemon == daemon)
			return true;
	return false;
}

/* The distinct executable file mappings of PID (self for 0), or only
 * those whose name contains MATCH. *HAS_TABLE (if not NULL): whether PID
 * maps the file TABLE (its real path) as well. */
static int mapped_objects(pid_t pid, const char *match, char objs[][PATH_MAX], int max,
			  const char *table, bool *has_table)
{
	char path[64], line[PATH_MAX + 256];
	size_t tlen = table ? strlen(table) : 0;
	FILE *f;
	int n = 0;

	if (has_table)
		*has_table = false;
	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/maps");
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char perms[8], *file = strchr(line, '/');
		size_t l = strcspn(line, "\n");
		bool seen = false;

		line[l] = 0;
		if (has_table && tlen && l > tlen && line[l - tlen - 1] == ' ' &&
		    !strcmp(line + l - tlen, table))
			*has_table = true;
		if (n == max || sscanf(line, "%*s %7s", perms) != 1 || !strchr(perms, 'x') || !file)
			continue;
		if (strstr(file, " (deleted)") || (match && !strstr(file, match)))
			continue;
		for (int i = 0; i < n && !seen; i++)
			seen = !strcmp(objs[i], file);
		if (!seen)
			snprintf(objs[n++], PATH_MAX, "%s", file);
	}
	fclose(f);
	return n;
}

static char objs[MAX_OBJECTS][PATH_MAX];

/*
 * Without -p or --lib: the registry's users, however briefly they live.
 * A uprobe on a file for no pid in particular fires in every process
 * that maps the file, from the moment it maps it, so the library's
 * probes are attached that way in every object a user of the registry
 * may run them from: libprocreg.so as this program resolves it, at
 * once, and each object that carries the probes in a process found with
 * the table in its mappings (a program linked with the static library,
 * a binding's module), looked for when tracing starts and every second
 * after. Every process that maps those objects fires the probes then,
 * another registry's users too: the library's probes carry the device
 * and inode of the table the call went to, and the BPF side counts only
 * this registry's (one_registry, reg_dev, reg_ino). A process that comes
 * and goes between two looks is counted all the same if its probes are
 * in an object already attached (libprocreg.so, or a program a user of
 * the registry was seen running); only a program linked statically and
 * never seen running with the table mapped is missed until it is.
 */
#define MAX_EXAMINED 1024

static procreg_t *reg;

static pid_t traced_daemon;
static char table_real[PATH_MAX];
static struct stat table_st;        /* the table file the BPF side counts */
static int nusers;                  /* processes found with the table mapped */
static int nattached;               /* objects whose probes are attached for everyone */
/* Objects looked at already, by file: each is attached once (twice
 * would count each event twice), and one without probes is not tried
 * again every second. */
static struct {
	dev_t dev;
	ino_t ino;
} examined[MAX_EXAMINED];
static int nexamined;
static bool links_full_said;

static bool scoped(void)
{
	return !opt.pid && !opt.nlibs;
}

/* Point the BPF side at the registry's table file, again if it was made
 * anew since. */
static void follow_table(struct procreg_trace *skel)
{
	struct stat st;

	if (stat(procreg_table_path(reg), &st) < 0 ||
	    (st.st_dev == table_st.st_dev && st.st_ino == table_st.st_ino))
		return;
	if (!realpath(procreg_table_path(reg), table_real))
		table_real[0] = 0;
	table_st = st;
	skel->bss->reg_dev = (uint64_t)st.st_dev;
	skel->bss->reg_ino = (uint64_t)st.st_ino;
}

/* Attach the library's probes in PATH for every process, unless PATH was
 * looked at before: how many probes. */
static int attach_everywhere(struct procreg_trace *skel, const char *path)
{
	struct stat st;
	int n, err = 0;

	if (stat(path, &st) < 0)
		return 0;
	for (int i = 0; i < nexamined; i++)
		if (examined[i].dev == st.st_dev && examined[i].ino == st.st_ino)
			return 0;
	if (nexamined == MAX_EXAMINED || nlinks == MAX_LINKS) {
		if (!links_full_said)
			fprintf(stderr, "procreg-trace: tracing as many programs as it can: "
					"later ones are not traced\n");
		links_full_said = true;
		return 0;
	}
	examined[nexamined].dev = st.st_dev;
	examined[nexamined++].ino = st.st_ino;
	quiet_libbpf = true;
	n = attach_object(skel, false, -1, path, &err);
	quiet_libbpf = false;
	nattached += n > 0;
	return n;
}

/* Look for the registry's users, and attach in the objects they map
 * that are new: how many probes. */
static int scan_registry(struct procreg_trace *skel)
{
	struct dirent *de;
	DIR *d;
	int n = 0;

	follow_table(skel);
	if (!table_real[0])
		return 0;
	d = opendir("/proc");
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		bool has_table;
		int nobj;

		/* Not ourselves (libprocreg.so is attached already), not
		 * procregd (attach_daemon()). */
		if (*end || pid <= 0 || pid == getpid() || pid == traced_daemon)
			continue;
		nobj = mapped_objects((pid_t)pid, NULL, objs, MAX_OBJECTS, table_real, &has_table);
		if (nobj <= 0 || !has_table)
			continue;
		nusers++;
		for (int i = 0; i < nobj; i++)
			n += attach_everywhere(skel, objs[i]);
	}
	closedir(d);
	return n;
}

/* The first look: libprocreg.so as this program maps it, then the
 * registry's users. */
static int attach_registry(struct procreg_trace *skel)
{
	int n = 0, nobj;

	follow_table(skel); /* before the first probe can fire */
	nobj = mapped_objects(0, "libprocreg", objs, MAX_OBJECTS, NULL, NULL);
	for (int i = 0; i < nobj; i++)
		n += attach_everywhere(skel, objs[i]);
	return n + scan_registry(skel);
}

/* Library probes: in -p PID's objects, in the --lib objects for
 * everyone, or in the registry's processes. */
static int attach_library(struct procreg_trace *skel)
{
	int n = 0, nobj, err = -ENOENT;

	if (opt.pid) {
		nobj = mapped_objects(opt.pid, NULL, objs, MAX_OBJECTS, NULL, NULL);
		if (nobj < 0) {
			fprintf(stderr, "procreg-trace: pid %d: %s\n", (int)opt.pid, strerror(-nobj));
			return nobj;
		}
		quiet_libbpf = true;
		for (int i = 0; i < nobj; i++)
			n += attach_object(skel, false, opt.pid, objs[i], &err);
		quiet_libbpf = false;
		if (!n) {
			fprintf(stderr,
				"procreg-trace: pid %d: no object it maps carries procreg probes "
				"(a libprocreg built with PROCREG_USDT=ON): %s\n",
				(int)opt.pid, strerror(-err));
			return err;
		}
		return n;
	}
	if (scoped())
		return attach_registry(skel);
	nobj = opt.nlibs;
	for (int i = 0; i < nobj; i++)
		snprintf(objs[i], PATH_MAX, "%s", opt.libs[i]);
	for (int i = 0; i < nobj; i++) {
		int k = attach_object(skel, false, -1, objs[i], &err);

		if (!k) {
			fprintf(stderr, "procreg-trace: %s: cannot attach to its probes: %s\n",
				objs[i], strerror(-err));
			return err;
		}
		n += k;
	}
	return n;
}

static int attach_daemon(struct procreg_trace *skel, pid_t dpid)
{
	char link[64], exe[PATH_MAX];
	ssize_t len;
	int err = 0, n;

	if (!dpid) {
		fprintf(stderr, "procreg-trace: procregd is not running for this scope: "
				"its probes are not traced\n");
		return 0;
	}
	snprintf(link, sizeof(link), "/proc/%d/exe", (int)dpid);
	len = readlink(link, exe, sizeof(exe) - 1);
	if (len < 0) {
		fprintf(stderr, "procreg-trace: procregd pid %d: %s: %s\n", (int)dpid, link,
			strerror(errno));
		return -errno;
	}
	exe[len] = 0;
	n = attach_object(skel, true, dpid, exe, &err);
	if (!n) {
		fprintf(stderr, "procreg-trace: procregd pid %d (%s): cannot attach to its probes: %s\n",
			(int)dpid, exe, strerror(-err));
		return err ? err : -ENOENT;
	}
	return n;
}

/* ---- lat -------------------------------------------------------------- */

static int ncpus;

/* Sum and clear row KEY of a per-CPU map of u64. */
static uint64_t take_u64(int fd, uint32_t key, uint64_t *vals, bool clear)
{
	uint64_t sum = 0;

	if (bpf_map_lookup_elem(fd, &key, vals))
		return 0;
	for (int c = 0; c < ncpus; c++)
		sum += vals[c];
	if (clear && sum) {
		memset(vals, 0, sizeof(uint64_t) * (size_t)ncpus);
		bpf_map_update_elem(fd, &key, vals, BPF_ANY);
	}
	return sum;
}

static void print_bar(uint64_t v, uint64_t max)
{
	int w = max ? (int)(v * 40 / max) : 0;

	printf("|");
	for (int i = 0; i < 40; i++)
		putchar(i < w ? '*' : ' ');
	printf("|\n");
}

/* Histogram row H of the "hists" map, read and cleared: its lines, or
 * "no samples". In JSON (bridge --json): "key":{"samples":N,"log2_ns":
 * [[lo,count],...]}. */
static void print_hist(int fd, int h, const char *title, uint64_t *vals, bool json)
{
	uint64_t slot[PT_SLOTS], max = 0, total = 0;
	int lo = PT_SLOTS, hi = -1;

	for (int s = 0; s < PT_SLOTS; s++) {
		slot[s] = take_u64(fd, (uint32_t)(h * PT_SLOTS + s), vals, true);
		total += slot[s];
		if (slot[s]) {
			max = slot[s] > max ? slot[s] : max;
			lo = s < lo ? s : lo;
			hi = s;
		}
	}
	if (json) {
		printf("\"%s\":{\"samples\":%llu,\"log2_ns\":[", title, (unsigned long long)total);
		for (int s = lo; s <= hi; s++)
			printf("%s[%llu,%llu]", s == lo ? "" : ",", s ? 1ull << s : 0,
			       (unsigned long long)slot[s]);
		printf("]}");
		return;
	}
	if (!total) {
		printf("%s: no samples\n\n", title);
		return;
	}
	printf("%s: %llu samples\n", title, (unsigned long long)total);
	printf("%24s : %-10s distribution\n", "ns", "count");
	for (int s = lo; s <= hi; s++) {
		unsigned long long a = s ? 1ull << s : 0, b = (1ull << (s + 1)) - 1;

		printf("%10llu -> %-10llu : %-10llu ", a, b, (unsigned long long)slot[s]);
		print_bar(slot[s], max);
	}
	printf("\n");
}

static void print_lat(struct procreg_trace *skel)
{
	static const char *titles[PT_H_N] = {
		[PT_H_LOOKUP] = "lookup",
		[PT_H_REQUEST] = "request (client round trip)",
		[PT_H_SERVE] = "serve (procregd, request to reply)",
		[PT_H_GRACE] = "grace period",
		[PT_H_DEATH] = "death to removal",
	};
	int fd = bpf_map__fd(skel->maps.hists);
	uint64_t *vals = calloc((size_t)ncpus, sizeof(uint64_t));

	if (!vals)
		return;
	printf("%s\n", stamp(false));
	for (int h = 0; h < PT_H_N; h++)
		if (titles[h])
			print_hist(fd, h, titles[h], vals, false);
	fflush(stdout);
	free(vals);
}

/* ---- bridge ----------------------------------------------------------- */

static uint64_t last_bridge[PT_C_N];

/* The interval's counts of the bridge probes and its histogram of the
 * time to apply a frame from another node. */
static void print_bridge(struct procreg_trace *skel, double secs)
{
	int cfd = bpf_map__fd(skel->maps.counters), hfd = bpf_map__fd(skel->maps.hists);
	uint64_t *vals = calloc((size_t)ncpus, sizeof(uint64_t)), d[PT_C_N] = { 0 };

	if (!vals)
		return;
	for (int c = PT_C_BRIDGE_OUT; c <= PT_C_BRIDGE_APPLY; c++) {
		uint64_t v = take_u64(cfd, (uint32_t)c, vals, false);

		d[c] = v - last_bridge[c];
		last_bridge[c] = v;
	}
	if (opt.json) {
		printf("{\"time\":\"%s\",\"event\":\"interval\",\"seconds\":%.3f,"
		       "\"changes_out\":%llu,\"frames_in\":%llu,\"refused\":%llu,\"applied\":%llu,",
		       stamp(true), secs, (unsigned long long)d[PT_C_BRIDGE_OUT],
		       (unsigned long long)d[PT_C_BRIDGE_IN], (unsigned long long)d[PT_C_BRIDGE_REFUSED],
		       (unsigned long long)d[PT_C_BRIDGE_APPLY]);
		print_hist(hfd, PT_H_BRIDGE_IN, "frame_in", vals, true);
		printf("}\n");
	} else {
		printf("%s  changes out %llu (%.0f/s), frames in %llu (%llu refused), entries applied "
		       "%llu (%.0f/s)\n", stamp(false), (unsigned long long)d[PT_C_BRIDGE_OUT],
		       secs > 0 ? (double)d[PT_C_BRIDGE_OUT] / secs : 0.0,
		       (unsigned long long)d[PT_C_BRIDGE_IN], (unsigned long long)d[PT_C_BRIDGE_REFUSED],
		       (unsigned long long)d[PT_C_BRIDGE_APPLY],
		       secs > 0 ? (double)d[PT_C_BRIDGE_APPLY] / secs : 0.0);
		print_hist(hfd, PT_H_BRIDGE_IN, "frame in (received to applied)", vals, false);
	}
	fflush(stdout);
	free(vals);
}

/* The record's name and node names: bytes from the traced process, bounded
 * by the record whatever it says. */
static size_t name_len(const struct pt_event *e)
{
	return strnlen(e->name, e->name_len < PT_NAME_MAX ? e->name_len : PT_NAME_MAX - 1);
}

static size_t node_len(const char *node)
{
	return strnlen(node, PT_NODE_MAX - 1);
}

/* S[0..N) for a line of text, escaped (output.h). The last four results
 * stay valid. */
/* PID's command name (/proc/PID/comm) into BUF; "" once it has exited. */
static void proc_comm(pid_t pid, char *buf, size_t len)
{
	char path[64];
	FILE *f;

	buf[0] = 0;
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return;
	if (fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = 0;
	fclose(f);
}

static const char *txt(const char *s, size_t n)
{
	static char buf[4][PROCREG_TEXT_NAME_BUF];
	static unsigned k;

	return procreg__text_cut(buf[k++ % 4], sizeof(buf[0]), s, n, PT_NAME_MAX);
}

/* ---- top -------------------------------------------------------------- */

struct row {
	uint64_t key;
	struct pt_count c;
	char name[PT_NAME_MAX];
	bool absent;               /* name: as a lookup asked for it, not in the table */
};

/* Sum every entry of a per-CPU map of struct pt_count into ROWS, and
 * delete it (each report covers its interval). */
static int take_counts(int fd, size_t keysz, struct row **rows)
{
	struct pt_count *vals = calloc((size_t)ncpus, sizeof(*vals));
	uint64_t key = 0, next = 0;
	void *prev = NULL;
	int n = 0, cap = 0;

	*rows = NULL;
	if (!vals)
		return 0;
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		struct row *r;

		key = next;
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, vals))
			continue;
		if (n == cap) {
			struct row *t = realloc(*rows, sizeof(*t) * (size_t)(cap = cap ? cap * 2 : 64));

			if (!t)
				break;
			*rows = t;
		}
		r = &(*rows)[n++];
		memset(r, 0, sizeof(*r));
		r->key = keysz == 4 ? (uint32_t)key : key;
		for (int c = 0; c < ncpus; c++) {
			r->c.lookups += vals[c].lookups;
			r->c.misses += vals[c].misses;
		}
	}
	for (int i = 0; i < n; i++) {
		uint64_t k = (*rows)[i].key;
		uint32_t k32 = (uint32_t)k;

		bpf_map_delete_elem(fd, keysz == 4 ? (void *)&k32 : (void *)&k);
	}
	free(vals);
	return n;
}

static int by_lookups(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	return x->c.lookups < y->c.lookups ? 1 : x->c.lookups > y->c.lookups ? -1 : 0;
}

/* Name hashes to names: every name in the table, hashed by the library
 * as the procreg:lookup probe reports it. */

struct resolve {
	struct row *rows;
	int n;
};

static int resolve_one(const struct procreg_entry *e, void *arg)
{
	struct resolve *r = arg;
	uint64_t h;

	if (procreg_name_hash(reg, e->name, &h) < 0)
		return 0;
	for (int i = 0; i < r->n; i++)
		if (r->rows[i].key == h && !r->rows[i].name[0])
			snprintf(r->rows[i].name, sizeof(r->rows[i].name), "%s", e->name);
	return 0;
}

static uint64_t last_lookups, last_misses;

static void totals(struct procreg_trace *skel, uint64_t *lookups, uint64_t *misses)
{
	int fd = bpf_map__fd(skel->maps.counters);
	uint64_t *vals = calloc((size_t)ncpus, sizeof(uint64_t));

	*lookups = *misses = 0;
	if (!vals)
		return;
	*lookups = take_u64(fd, PT_C_LOOKUPS, vals, false);
	*misses = take_u64(fd, PT_C_MISSES, vals, false);
	free(vals);
}

static void print_top(struct procreg_trace *skel, double secs)
{
	struct row *rows;
	uint64_t lookups, misses;
	int n;

	totals(skel, &lookups, &misses);
	printf("%s  lookups %llu (%.0f/s), misses %llu\n", stamp(false),
	       (unsigned long long)(lookups - last_lookups),
	       secs > 0 ? (double)(lookups - last_lookups) / secs : 0.0,
	       (unsigned long long)(misses - last_misses));
	last_lookups = lookups;
	last_misses = misses;

	n = take_counts(bpf_map__fd(skel->maps.names), 8, &rows);
	qsort(rows, (size_t)n, sizeof(*rows), by_lookups);
	if (n > opt.rows)
		n = opt.rows;
	if (n) {
		struct resolve r = { rows, n };

		procreg_foreach(reg, resolve_one, &r);
		for (int i = 0; i < n; i++) {
			struct pt_name seen;

			if (!rows[i].name[0] &&
			    !bpf_map_lookup_elem(bpf_map__fd(skel->maps.seen), &rows[i].key, &seen)) {
				snprintf(rows[i].name, sizeof(rows[i].name), "%.*s",
					 (int)sizeof(rows[i].name) - 1, seen.s);
				rows[i].absent = true;
			}
		}
		printf("%12s %12s  %s\n", "LOOKUPS", "MISSES", "NAME");
		for (int i = 0; i < n; i++) {
			if (rows[i].name[0])
				printf("%12llu %12llu  %s%s\n", (unsigned long long)rows[i].c.lookups,
				       (unsigned long long)rows[i].c.misses,
				       txt(rows[i].name, strlen(rows[i].name)),
				       rows[i].absent ? " (not in the table)" : "");
			else
				printf("%12llu %12llu  (not in the table: hash %016llx)\n",
				       (unsigned long long)rows[i].c.lookups,
				       (unsigned long long)rows[i].c.misses,
				       (unsigned long long)rows[i].key);
		}
	}
	free(rows);

	n = take_counts(bpf_map__fd(skel->maps.procs), 4, &rows);
	qsort(rows, (size_t)n, sizeof(*rows), by_lookups);
	if (n > opt.rows)
		n = opt.rows;
	if (n) {
		printf("%12s %12s %12s %14s  %s\n", "PID", "LOOKUPS", "MISSES", "LOOKUPS/S", "COMM");
		for (int i = 0; i < n; i++) {
			char comm[64];

			proc_comm((pid_t)rows[i].key, comm, sizeof(comm));
			printf("%12llu %12llu %12llu %14.0f  %s\n", (unsigned long long)rows[i].key,
			       (unsigned long long)rows[i].c.lookups,
			       (unsigned long long)rows[i].c.misses,
			       secs > 0 ? (double)rows[i].c.lookups / secs : 0.0,
			       comm[0] ? txt(comm, strlen(comm)) : "?");
		}
	}
	free(rows);
	printf("\n");
	fflush(stdout);
}

/* ---- events ----------------------------------------------------------- */

static const char *change_name(uint64_t type)
{
	static const char *names[] = {
		[PROCREG_EV_REGISTERED] = "registered",   [PROCREG_EV_UNREGISTERED] = "unregistered",
		[PROCREG_EV_UPDATED] = "updated",         [PROCREG_EV_JOINED] = "joined",
		[PROCREG_EV_LEFT] = "left",               [PROCREG_EV_DIED] = "died",
		[PROCREG_EV_TRANSFERRED] = "transferred", [PROCREG_EV_REPLACED] = "replaced",
		[PROCREG_EV_EXPIRED] = "expired",         [PROCREG_EV_REFRESHED] = "refreshed",
		[PROCREG_EV_NODE_DOWN] = "node-down",     [PROCREG_EV_CONFLICT] = "conflict",
	};

	return type < sizeof(names) / sizeof(names[0]) && names[type] ? names[type] : "change";
}

static const char *kind_name(uint32_t kind)
{
	return kind == PT_KIND_NAME ? "name" : kind == PT_KIND_GROUP ? "group" : "member of";
}

static const char *index_name(uint32_t kind)
{
	return kind == 0 ? "names" : kind == 1 ? "groups" : "members";
}

static const char *op_name(uint64_t op)
{
	return op == 1 ? "put" : op == 2 ? "del" : "?";
}

/* An event as one JSON object (--json), T its wall-clock time. */
static void event_json(const struct pt_event *e, const char *t)
{
	printf("{\"time\":\"%s\",\"ts_ns\":%llu,", t, (unsigned long long)e->ts_ns);
	switch (e->type) {
	case PT_EV_CHANGE:
		printf("\"event\":\"%s\",\"pid\":%u,\"kind\":\"%s\",", change_name(e->a),
		       e->pid, e->kind == PT_KIND_NAME ? "name" : "group");
		procreg__json_field(stdout, "name", e->name, name_len(e));
		printf(",\"seq\":%llu", (unsigned long long)e->b);
		break;
	case PT_EV_DEATH:
		printf("\"event\":\"removed\",\"pid\":%u,\"entries\":%llu,\"removal_ns\":%llu",
		       e->pid, (unsigned long long)e->a, (unsigned long long)e->b);
		break;
	case PT_EV_CONFLICT:
		printf("\"event\":\"conflict\",\"pid\":%u,", e->pid);
		procreg__json_field(stdout, "name", e->name, name_len(e));
		printf(",\"holder\":%llu", (unsigned long long)e->a);
		break;
	case PT_EV_GRACE:
		printf("\"event\":\"grace_period\",\"gp\":%llu,\"ns\":%llu,\"slots_waited\":%llu",
		       (unsigned long long)e->c, (unsigned long long)e->a,
		       (unsigned long long)e->b);
		break;
	case PT_EV_GROW:
		printf("\"event\":\"grow\",\"index\":\"%s\",\"from\":%llu,\"to\":%llu,\"live\":%llu",
		       index_name(e->kind), (unsigned long long)e->a, (unsigned long long)e->b,
		       (unsigned long long)e->c);
		break;
	case PT_EV_BRIDGE_OUT:
		printf("\"event\":\"out\",\"op\":\"%s\",\"kind\":\"%s\",",
		       op_name(e->a), e->kind == PT_KIND_NAME ? "name" : "member");
		procreg__json_field(stdout, "name", e->name, name_len(e));
		printf(",\"seq\":%llu,\"bytes\":%llu", (unsigned long long)e->b,
		       (unsigned long long)e->c);
		break;
	case PT_EV_BRIDGE_APPLY:
		printf("\"event\":\"apply\",");
		procreg__json_field(stdout, "node", e->node, node_len(e->node));
		printf(",\"op\":\"%s\",\"kind\":\"%s\",", op_name(e->a),
		       e->kind == PT_KIND_NAME ? "name" : "member");
		procreg__json_field(stdout, "name", e->name, name_len(e));
		printf(",\"result\":%lld", (long long)e->b);
		break;
	case PT_EV_BRIDGE_NODE:
		printf("\"event\":\"%s\",",
		       e->a == 1 ? "node-up" : e->a == 2 ? "node-lost" : "node-down");
		procreg__json_field(stdout, "node", e->node, node_len(e->node));
		printf(",\"incarnation\":\"%016llx\",\"removed\":%llu",
		       (unsigned long long)e->b, (unsigned long long)e->c);
		break;
	case PT_EV_BRIDGE_CONFLICT:
		printf("\"event\":\"node-conflict\",");
		procreg__json_field(stdout, "name", e->name, name_len(e));
		putchar(',');
		procreg__json_field(stdout, "winner", e->node, node_len(e->node));
		putchar(',');
		procreg__json_field(stdout, "loser", e->peer, node_len(e->peer));
		printf(",\"local_pid\":%llu,\"local_lost\":%s", (unsigned long long)e->a,
		       e->b ? "true" : "false");
		break;
	default:
		printf("\"event\":\"unknown\"");
	}
	printf("}\n");
}

/* An event as one line of text, T its wall-clock time; NAME, NODE, PEER
 * its strings in the escaped form. */
static void event_text(const struct pt_event *e, const char *t, const char *name,
		       const char *node, const char *peer)
{
	switch (e->type) {
	case PT_EV_CHANGE:
		printf("%s %-13s pid %-7u %s %s\n", t, change_name(e->a), e->pid,
		       kind_name(e->kind), name);
		break;
	case PT_EV_DEATH:
		printf("%s %-13s pid %-7u %llu entr%s removed %.1f us after its pidfd woke\n", t,
		       "removed", e->pid, (unsigned long long)e->a, e->a == 1 ? "y" : "ies",
		       (double)e->b / 1e3);
		break;
	case PT_EV_CONFLICT:
		printf("%s %-13s pid %-7u name %s is held by pid %llu\n", t, "conflict", e->pid,
		       name, (unsigned long long)e->a);
		break;
	case PT_EV_GRACE:
		printf("%s %-13s gp %llu: %.1f us, %llu reader slot%s waited on\n", t,
		       "grace-period", (unsigned long long)e->c, (double)e->a / 1e3,
		       (unsigned long long)e->b, e->b == 1 ? "" : "s");
		break;
	case PT_EV_GROW:
		printf("%s %-13s %s index %llu -> %llu slots (%llu live)\n", t, "grow",
		       index_name(e->kind), (unsigned long long)e->a, (unsigned long long)e->b,
		       (unsigned long long)e->c);
		break;
	case PT_EV_BRIDGE_OUT:
		printf("%s %-13s seq %llu %s %s %s (%llu bytes)\n", t, "out",
		       (unsigned long long)e->b, op_name(e->a),
		       e->kind == PT_KIND_NAME ? "name" : "member of", name,
		       (unsigned long long)e->c);
		break;
	case PT_EV_BRIDGE_APPLY:
		printf("%s %-13s from %s %s %s %s%s\n", t, "apply", node, op_name(e->a),
		       e->kind == PT_KIND_NAME ? "name" : "member of", name,
		       (int64_t)e->b < 0 ? " (failed)" : "");
		break;
	case PT_EV_BRIDGE_NODE:
		if (e->a == 1)
			printf("%s %-13s node %s (incarnation %016llx)\n", t, "node-up", node,
			       (unsigned long long)e->b);
		else if (e->a == 2)
			printf("%s %-13s node %s: entries kept while it may come back\n", t,
			       "node-lost", node);
		else
			printf("%s %-13s node %s: %llu entries removed\n", t, "node-down", node,
			       (unsigned long long)e->c);
		break;
	case PT_EV_BRIDGE_CONFLICT:
		printf("%s %-13s name %s: node %s's registration wins over node %s's%s\n", t,
		       "node-conflict", name, node, peer,
		       e->b ? " (the local owner loses it)" : "");
		break;
	}
}

static int on_event(void *ctx, void *data, size_t size)
{
	const struct pt_event *e = data;
	const char *t = stamp(true);

	(void)ctx;
	if (size < sizeof(*e))
		return 0;
	if (opt.json)
		event_json(e, t);
	else
		event_text(e, t, txt(e->name, name_len(e)), txt(e->node, node_len(e->node)),
			   txt(e->peer, node_len(e->peer)));
	fflush(stdout);
	return 0;
}

/* ---- main ------------------------------------------------------------- */

/* The registry; the CPU count. */
static int open_registry(void)
{
	PROCREG_OPTS(procreg_opts, ro);
	int err;

	ro.scope = opt.scope;
	ro.dir = opt.dir;
	reg = procreg_open(&ro);
	if (!reg) {
		err = -errno;
		fprintf(stderr, "procreg-trace: cannot open the registry: %s\n", procreg_strerror(err));
		return err;
	}
	ncpus = libbpf_num_possible_cpus();
	if (ncpus <= 0) {
		err = ncpus ? ncpus : -EINVAL;
		fprintf(stderr, "procreg-trace: cannot count the CPUs: %s\n", strerror(-err));
		return err;
	}
	return 0;
}

/* Open the BPF object, configure it for the command, load it. */
static int load_bpf(struct procreg_trace **skelp)
{
	struct procreg_trace *skel;
	int err;

	*skelp = skel = procreg_trace__open();
	if (!skel) {
		err = -errno;
		fprintf(stderr, "procreg-trace: cannot open the BPF object: %s\n", strerror(-err));
		return err;
	}
	skel->rodata->top_names = opt.cmd == CMD_TOP;
	skel->rodata->top_procs = opt.cmd == CMD_TOP;
	skel->rodata->bridge_changes = opt.changes;
	skel->rodata->one_registry = scoped();
	err = procreg_trace__load(skel);
	if (err)
		fprintf(stderr,
			"procreg-trace: cannot load the BPF programs: %s\n"
			"procreg-trace needs root (or CAP_BPF and CAP_PERFMON), and a kernel with BPF,\n"
			"the BPF ring buffer (5.8+) and uprobes.\n",
			strerror(-err));
	return err;
}

/* Attach to the library's users and to procregd, as the command wants,
 * and say what is traced. */
static int attach_all(struct procreg_trace *skel)
{
	PROCREG_OPTS(procreg_stats, st);
	int nlib = 0, nd = 0;

	procreg_stats(reg, &st);
	traced_daemon = st.daemon_pid;
	if (wants(false) && (nlib = attach_library(skel)) < 0)
		return nlib;
	if (wants(true) && (nd = attach_daemon(skel, st.daemon_pid)) < 0)
		return nd;
	if (wants(false) && scoped())
		fprintf(stderr, "procreg-trace: tracing %d probe%s (library: in %d object%s, for "
				"every process that maps one, the registry's calls only; %d process%s "
				"of the registry now, looked for every second; procregd: %s, pid %d); "
				"Ctrl-C to stop\n",
			nlib + nd, nlib + nd == 1 ? "" : "s", nattached, nattached == 1 ? "" : "s",
			nusers, nusers == 1 ? "" : "es", nd ? "yes" : "no", (int)st.daemon_pid);
	else
		fprintf(stderr, "procreg-trace: tracing %d probe%s (library: %s; procregd: %s, "
				"pid %d); Ctrl-C to stop\n",
			nlib + nd, nlib + nd == 1 ? "" : "s",
			!nlib ? "none" : opt.pid ? "one process" : "every process that maps --lib",
			nd ? "yes" : "no", (int)st.daemon_pid);
	return 0;
}

/* The report of lat, bridge or top on the last SECS. */
static void report(struct procreg_trace *skel, double secs)
{
	if (opt.cmd == CMD_LAT)
		print_lat(skel);
	else if (opt.cmd == CMD_BRIDGE)
		print_bridge(skel, secs);
	else if (opt.cmd == CMD_TOP)
		print_top(skel, secs);
}

/* Poll the ring buffer (events, bridge) and report every interval until
 * a signal or --duration. *LAST: when the last report was made. */
static int trace_loop(struct ring_buffer *rb, struct procreg_trace *skel, double *last)
{
	double start = now_s(), next = start + opt.interval, next_scan = start + 1;
	int err;

	*last = start;
	while (!exiting) {
		double now = now_s(), until = next;
		int ms;

		if (opt.duration && start + opt.duration < until)
			until = start + opt.duration;
		ms = until > now ? (int)((until - now) * 1000) + 1 : 0;
		if (ms > 100)
			ms = 100;
		if (rb) {
			err = ring_buffer__poll(rb, ms);
			if (err == -EINTR)
				break;
			if (err < 0) {
				fprintf(stderr, "procreg-trace: ring buffer: %s\n", strerror(-err));
				return err;
			}
		} else {
			poll(NULL, 0, ms);
		}
		now = now_s();
		if (opt.duration && now >= start + opt.duration)
			break;
		if (wants(false) && scoped() && now >= next_scan) {
			scan_registry(skel);
			next_scan = now + 1;
		}
		if (now >= next && opt.cmd != CMD_EVENTS) {
			report(skel, now - *last);
			*last = now;
			next += opt.interval;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct procreg_trace *skel = NULL;
	struct ring_buffer *rb = NULL;
	struct sigaction sa = { .sa_handler = on_signal };
	double last = 0;
	int err;

	parse(argc, argv);
	libbpf_set_print(libbpf_print);

	if ((err = open_registry()) < 0 || (err = load_bpf(&skel)) < 0)
		goto cleanup;
	if (opt.cmd == CMD_EVENTS || opt.cmd == CMD_BRIDGE) {
		rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_event, NULL, NULL);
		if (!rb) {
			err = -errno;
			fprintf(stderr, "procreg-trace: cannot open the ring buffer: %s\n", strerror(-err));
			goto cleanup;
		}
	}
	/* Before attach_all() says it traces: a signal from then on ends
	 * the trace with its last report. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if ((err = attach_all(skel)) < 0 || (err = trace_loop(rb, skel, &last)) < 0)
		goto cleanup;

	/* What happened since the last report. */
	if (rb)
		ring_buffer__consume(rb);
	report(skel, now_s() - last);
	if (opt.cmd == CMD_TOP) {
		uint64_t lookups, misses;

		totals(skel, &lookups, &misses);
		printf("total: lookups %llu, misses %llu\n", (unsigned long long)lookups,
		       (unsigned long long)misses);
		fflush(stdout);
	}

cleanup:
	ring_buffer__free(rb);
	for (int i = 0; i < nlinks; i++)
		bpf_link__destroy(links[i]);
	procreg_trace__destroy(skel);
	procreg_close(reg);
	return err ? 2 : 0;
}
