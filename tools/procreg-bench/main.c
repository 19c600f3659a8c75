/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * procreg-bench - measures procreg beside baselines run on the same
 * machine in the same run, and checks the targets of DESIGN.md.
 *
 *   procreg-bench lookup [--under-write-load]   lookups vs in-process tables
 *   procreg-bench register                      registrations vs a socket round trip
 *   procreg-bench stress                        the registry stress test
 *   procreg-bench stress --nodes K              replication between K daemons
 *   procreg-bench memory                        table bytes per name
 *   procreg-bench probes                        lookups with USDT probes vs without
 *
 * Each prints a human table and, with --json, one JSON object on stdout
 * (the table then goes to stderr). Each starts its own procregd in a
 * private temporary directory and removes it at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "bench.h"

struct bench_opts bo;

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: procreg-bench COMMAND [OPTIONS]\n"
		"Measures procreg beside baselines run in the same run; prints a table, or\n"
		"with --json one JSON object (the table then goes to stderr).\n"
		"\n"
		"Commands:\n"
		"  lookup      lookups from 1..N reader processes (one at a time and\n"
		"              procreg_lookup_many) vs in-process tables: the key inline in\n"
		"              a one-line slot, procreg's own design in private memory\n"
		"              (the faster of the two is the headline), liburcu's cds_lfht\n"
		"  register    registrations/s through procregd, synchronous and pipelined,\n"
		"              vs a bare unix-socket round trip\n"
		"  stress      N names over P processes: register, unregister, re-register,\n"
		"              kill every process, time until every name is gone\n"
		"  stress --nodes K  (or: cluster, K = 3) K procregd replicating on loopback:\n"
		"              register-to-visible delay vs a TCP round trip; names/s visible\n"
		"              on every node vs one unbridged daemon\n"
		"  memory      table bytes per name at 10^4..10^6 names\n"
		"  probes      lookups with the USDT probes compiled in (not attached) vs a\n"
		"              build without them, side by side in one process\n"
		"\n"
		"Options:\n"
		"  --json                one JSON object on stdout\n"
		"  --quick               small sizes and short runs (for the test suite)\n"
		"  --procregd PATH       the daemon (default: next to procreg-bench, or ../sbin)\n"
		"  --tmpdir DIR          where to make the private directory (default /dev/shm)\n"
		"  --rounds N            measurements per figure, median kept (default 5;\n"
		"                        stress: 7 sequences and 7 death rounds;\n"
		"                        cluster: 3)\n"
		"  --duration MS         timed window of one lookup measurement (default 300)\n"
		"lookup:\n"
		"  --names N[,N...]      table sizes (default 10000,1000000)\n"
		"  --readers N           reader processes, besides 1 (default: the CPUs)\n"
		"  --miss-rate R         share of lookups of absent names, 0..1 or N%% (default 0)\n"
		"  --under-write-load    also measure while a writer churns registrations\n"
		"  --fixed N             N untimed lookups of each, for valgrind --tool=callgrind\n"
		"  --presence            test for presence only (no entry copied out)\n"
		"register:\n"
		"  --clients N           client processes, besides 1 (default: the CPUs)\n"
		"  --sync-ops N          synchronous registrations per client (default 10000)\n"
		"  --batch-ops N         pipelined registrations per client (default 200000)\n"
		"  --prefill N           register into a table already holding N names\n"
		"stress:\n"
		"  --names N             names (default 100000)\n"
		"  --procs P             processes the names are spread over (default 1000)\n"
		"  --pipelined           each process registers with one procreg_batch\n"
		"stress --nodes K, cluster:\n"
		"  --nodes K             bridged daemons, 2..12 (cluster: default 3)\n"
		"  --names N             names of a throughput run (default 100000; at most\n"
		"                        20000 for synchronous writers); delay samples: N, at\n"
		"                        most 1000\n"
		"  --rounds N            throughput runs, median kept (default 3)\n"
		"  --daemon-arg ARG      appended to every node's procregd command line\n"
		"                        (repeat), e.g. --daemon-arg=--bridge-backend=X.so\n"
		"  --no-mesh             no --listen/--peer: the backend finds its peers\n"
		"probes:\n"
		"  --names N             table size (default 10000)\n"
		"  --rounds N            alternating rounds per build (default 7)\n"
		"  --fixed N             N untimed lookups per build, for valgrind --tool=callgrind\n"
		"  --noprobes-lib PATH   the build without probes (default: beside procreg-bench)\n"
		"memory:\n"
		"  --names N[,N...]      sizes, growing (default 10000,100000,1000000)\n"
		"\n"
		"Nothing outside the private directory is touched: not the default scope,\n"
		"not /dev/shm/procreg.*. SIGINT stops the bench and removes what it made.\n"
		"The last line says how much of the time the CPUs had work the hypervisor\n"
		"took (steal, /proc/stat; JSON: host_steal_share).\n");
}

/* A count: "10k" is 10000 (args.h). */
static int parse_u64(const char *s, uint64_t *out)
{
	return pr_parse_u64(s, 1000, out);
}

static void bad(const char *opt, const char *arg)
{
	fprintf(stderr, "procreg-bench: %s %s: invalid value\nTry 'procreg-bench --help'.\n", opt,
		arg);
	exit(2);
}

enum {
	O_JSON = 256, O_QUICK, O_PROCREGD, O_TMPDIR, O_ROUNDS, O_DURATION, O_NAMES,
	O_READERS, O_MISS, O_LOAD, O_PRESENCE, O_CLIENTS, O_SYNC, O_BATCH, O_PREFILL, O_PROCS, O_PIPE, O_NODES,
	O_FIXED, O_NOPROBES, O_DAEMON_ARG, O_NO_MESH,
};

/* --rounds and --duration as given, 0: the command's default. */
static int opt_rounds, opt_duration;

/* The options that take one number: where it goes (an int or a
 * uint64_t) and the values it may take. */
static const struct num_opt {
	int id;
	const char *name;
	int *i;
	uint64_t *u;
	uint64_t min, max;
} num_opts[] = {
	{ O_ROUNDS, "--rounds", &opt_rounds, NULL, 1, 64 },
	{ O_DURATION, "--duration", &opt_duration, NULL, 1, 600000 },
	{ O_READERS, "--readers", &bo.readers, NULL, 1, 256 },
	{ O_CLIENTS, "--clients", &bo.clients, NULL, 1, 256 },
	{ O_PROCS, "--procs", &bo.procs, NULL, 1, 60000 },
	{ O_NODES, "--nodes", &bo.nodes, NULL, 1, 12 },
	{ O_SYNC, "--sync-ops", NULL, &bo.sync_ops, 1, UINT64_MAX },
	{ O_BATCH, "--batch-ops", NULL, &bo.batch_ops, 1, 10000000 },
	{ O_PREFILL, "--prefill", NULL, &bo.prefill, 1, 100000000 },
	{ O_FIXED, "--fixed", NULL, &bo.fixed, 1, UINT64_MAX },
};

/* Option ID's number, if it takes one: false if it does not. */
static bool num_opt(int id, const char *arg)
{
	for (size_t k = 0; k < sizeof(num_opts) / sizeof(num_opts[0]); k++) {
		const struct num_opt *n = &num_opts[k];
		uint64_t v;

		if (n->id != id)
			continue;
		if (parse_u64(arg, &v) < 0 || v < n->min || v > n->max)
			bad(n->name, arg);
		if (n->i)
			*n->i = (int)v;
		else
			*n->u = v;
		return true;
	}
	return false;
}

/* --names N[,N...]: up to 8 table sizes. */
static void names_opt(const char *arg)
{
	char *s = strdup(arg), *tok, *save = NULL;

	bo.nnames = 0;
	for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (bo.nnames == 8 || parse_u64(tok, &bo.names_list[bo.nnames]) < 0 ||
		    bo.names_list[bo.nnames] == 0 || bo.names_list[bo.nnames] > 100000000)
			bad("--names", arg);
		bo.nnames++;
	}
	free(s);
	if (!bo.nnames)
		bad("--names", arg);
}

/* --miss-rate R: a fraction, or a percentage ("5%"). */
static void miss_rate_opt(const char *arg)
{
	char *end;
	double v = strtod(arg, &end);

	if (*end == '%') {
		v /= 100;
		end++;
	}
	if (end == arg || *end || v < 0 || v > 1)
		bad("--miss-rate", arg);
	bo.miss_rate = v;
}

/* The command's defaults, and the options that go with it only. */
static void settle_cmd(void)
{
	/* Lookup and register figures are medians with their range: five
	 * rounds give a range worth reading; the cluster runs are long. */
	bo.rounds = opt_rounds ? opt_rounds
			       : bo.quick ? 1
			       : (!strcmp(bo.cmd, "lookup") || !strcmp(bo.cmd, "register")) ? 5
			       : !strcmp(bo.cmd, "stress") ? 7 : 3;
	bo.duration_ms = opt_duration ? opt_duration : (bo.quick ? 30 : 300);
	if ((bo.under_write_load || bo.presence) && strcmp(bo.cmd, "lookup")) {
		fprintf(stderr, "procreg-bench: --%s goes with lookup\n",
			bo.presence ? "presence" : "under-write-load");
		exit(2);
	}
	if (!strcmp(bo.cmd, "cluster") && !bo.nodes)
		bo.nodes = 3;
	if (!strcmp(bo.cmd, "stress") && bo.nodes > 1)
		bo.cmd = "cluster";
	if (!strcmp(bo.cmd, "cluster") && bo.nodes < 2)
		bad("--nodes", "1 (cluster wants 2..12)");
	if ((bo.ndaemon_args || bo.no_mesh) && strcmp(bo.cmd, "cluster")) {
		fprintf(stderr, "procreg-bench: --daemon-arg and --no-mesh go with stress --nodes K\n");
		exit(2);
	}
	if ((!strcmp(bo.cmd, "stress") || !strcmp(bo.cmd, "cluster")) && bo.nnames) {
		if (bo.nnames != 1)
			bad("--names", "(stress takes one number)");
		bo.stress_names = bo.names_list[0];
	}
}

static void parse(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, O_JSON },
		{ "quick", no_argument, NULL, O_QUICK },
		{ "procregd", required_argument, NULL, O_PROCREGD },
		{ "tmpdir", required_argument, NULL, O_TMPDIR },
		{ "rounds", required_argument, NULL, O_ROUNDS },
		{ "duration", required_argument, NULL, O_DURATION },
		{ "names", required_argument, NULL, O_NAMES },
		{ "readers", required_argument, NULL, O_READERS },
		{ "miss-rate", required_argument, NULL, O_MISS },
		{ "under-write-load", no_argument, NULL, O_LOAD },
		{ "presence", no_argument, NULL, O_PRESENCE },
		{ "clients", required_argument, NULL, O_CLIENTS },
		{ "sync-ops", required_argument, NULL, O_SYNC },
		{ "batch-ops", required_argument, NULL, O_BATCH },
		{ "prefill", required_argument, NULL, O_PREFILL },
		{ "procs", required_argument, NULL, O_PROCS },
		{ "pipelined", no_argument, NULL, O_PIPE },
		{ "nodes", required_argument, NULL, O_NODES },
		{ "fixed", required_argument, NULL, O_FIXED },
		{ "noprobes-lib", required_argument, NULL, O_NOPROBES },
		{ "daemon-arg", required_argument, NULL, O_DAEMON_ARG },
		{ "no-mesh", no_argument, NULL, O_NO_MESH },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (num_opt(c, optarg))
			continue;
		switch (c) {
		case O_JSON: bo.json = true; break;
		case O_QUICK: bo.quick = true; break;
		case O_PROCREGD: bo.procregd = optarg; break;
		case O_TMPDIR: bo.tmpdir = optarg; break;
		case O_NAMES: names_opt(optarg); break;
		case O_MISS: miss_rate_opt(optarg); break;
		case O_LOAD: bo.under_write_load = true; break;
		case O_PRESENCE: bo.presence = true; break;
		case O_PIPE: bo.pipelined = true; break;
		case O_NOPROBES: bo.noprobes_lib = optarg; break;
		case O_DAEMON_ARG:
			if (bo.ndaemon_args == 32)
				bad("--daemon-arg", "(32 at most)");
			bo.daemon_args[bo.ndaemon_args++] = optarg;
			break;
		case O_NO_MESH: bo.no_mesh = true; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		exit(2);
	}
	bo.cmd = argv[optind];
	settle_cmd();
}

/*
 * The machine's CPU time since boot, from /proc/stat's first line, in
 * ticks: what its CPUs had work for, whether they ran it (*wanted), and
 * the part of that the hypervisor gave to others (*steal). False if the
 * line cannot be read.
 */
static bool cpu_time(uint64_t *wanted, uint64_t *steal)
{
	unsigned long long v[8];
	FILE *f = fopen("/proc/stat", "re");
	int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
			   &v[3], &v[4], &v[5], &v[6], &v[7])
		  : 0;

	if (f)
		fclose(f);
	if (n != 8)
		return false;
	/* All but idle and iowait: user, nice, system, irq, softirq, steal. */
	*wanted = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
	*steal = v[7];
	return true;
}

#define STEAL_TICKS_MIN 50 /* half a CPU-second at USER_HZ 100: within 2% */

/*
 * Where the machine is a guest, its CPUs can be taken away while they
 * have work (steal): a step that ran while the host took a third of that
 * time ran on two thirds of the machine, on both sides of a ratio, and an
 * absolute rate from it is low. Said once, for the whole run: the
 * counters tick every 10 ms, too coarse for one step.
 */
static void report_steal(uint64_t wanted0, uint64_t steal0)
{
	uint64_t wanted, steal;
	double share;

	/* Fewer than STEAL_TICKS_MIN ticks (a --quick run can be that
	 * short): a share of them would be a guess. */
	if (!cpu_time(&wanted, &steal) || wanted < wanted0 + STEAL_TICKS_MIN || steal < steal0) {
		hprintf("host: the run was too short to tell the hypervisor's share of the CPUs\n");
		j_num("host_steal_share", NAN);
		return;
	}
	share = (double)(steal - steal0) / (double)(wanted - wanted0);
	hprintf("host: the hypervisor took %.1f%% of the time this machine's CPUs had work "
		"(steal, /proc/stat)%s\n",
		100 * share, share >= 0.05 ? "; rates from this run are lower than the machine's own" : "");
	j_num("host_steal_share", share);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(void);
	} cmds[] = {
		{ "lookup", cmd_lookup },
		{ "register", cmd_register },
		{ "stress", cmd_stress },
		{ "cluster", cmd_cluster },
		{ "memory", cmd_memory },
		{ "probes", cmd_probes },
	};
	int (*fn)(void) = NULL;
	uint64_t wanted0 = 0, steal0 = 0;
	bool have_cpu;
	int rc;

	parse(argc, argv);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(bo.cmd, cmds[i].name))
			fn = cmds[i].fn;
	if (!fn) {
		fprintf(stderr, "procreg-bench: unknown command '%s'\nTry 'procreg-bench --help'.\n",
			bo.cmd);
		return 2;
	}
	if (env_init() < 0)
		return 2;
	j_obj(NULL);
	j_str("version", procreg_version());
	j_bool("quick", bo.quick);
	have_cpu = cpu_time(&wanted0, &steal0);
	rc = fn();
	if (rc == 0 && have_cpu)
		report_steal(wanted0, steal0);
	j_bool("ok", rc == 0);
	j_end();
	if (rc == 0)
		j_print();
	env_cleanup();
	return rc;
}
