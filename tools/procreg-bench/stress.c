/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * stress.c - procreg-bench stress: the reference stress test of process
 * registries, for Linux processes.
 *
 * --names N names spread over --procs P processes (N/P each, the
 * remainder to the first ones), in nine steps:
 *
 *   1 launch the P processes (fork; each opens the registry and connects
 *     to procregd, and to the echo server of the floor)
 *   2 every process registers its names, all at once (procreg_register,
 *     one call per name; --pipelined: one procreg_batch per process)
 *   3 wait until the table shows every name
 *   4 every process unregisters its names
 *   5 wait until every name is gone
 *   6 every process registers its names again
 *   7 wait until every name is visible
 *   8 SIGKILL all P processes
 *   9 time from the last kill until every name is gone
 *
 * Steps 1-9 are one sequence; the bench runs --rounds of them (default
 * 7), each with fresh processes, and reports every step's median time and
 * its range. A registration figure needs rounds as much as any other, and
 * a first registration happens once in a process's life: one sequence
 * measured it once, and two runs of it differed by a third.
 *
 * Registration beside its floor: before steps 2 and 6 the same processes,
 * released the same way, send as many requests of the same size, the same
 * way (a round trip each, or --pipelined packets as procreg_batch packs
 * them), to an echo server shaped like procregd's loop that answers each
 * with a reply frame and does nothing else (echo.c). What the machine
 * charges for a thousand processes waking, sending and being woken by
 * one server, the registry cannot undercut; the ratio to it is what
 * procreg's own work costs on top. The floor's path is run once untimed
 * first: a fresh process pays for the first run of any path (its page
 * tables filled a fault at a time, its symbols bound), and the floor is
 * to be the best the transport does, so it runs warm; procreg's first
 * registration (step 2) is its processes' first call, and pays it.
 *
 * Then deaths beside their floor, --rounds times as well: P fresh
 * processes of the same shape as the registering ones (registry open,
 * connection made) but holding no names, watched by bare pidfds in this
 * process (one epoll set), are all killed and timed until every pidfd has
 * reported; then P processes holding the N names (one procreg_batch each)
 * are killed and timed until the table shows no name. Both from the first
 * kill and from the last: the kill loop itself takes a while, and a
 * figure from the last kill alone rewards a slow loop. The target is the
 * median of the rounds' ratios, procreg over the floor, from the first
 * kill.
 *
 * A step that processes do ends when the last of them has its last reply;
 * a waiting step polls the table's names counter (procreg_stats, every
 * 50 us), never procreg_sync: it measures when readers see the change,
 * not when the daemon says it is done. Steps 3 and 7 also check every name
 * with a lookup (not timed). Processes wait for each step on a futex in
 * shared memory, so a step starts for all of them at once.
 *
 * --nodes K (K > 1) is another benchmark, of replication between K
 * daemons: cluster.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* The target for pipelined registration from many processes, in M/s. */
#define STRESS_TARGET_MPS 2.0

enum { ST_LAUNCH, ST_WARM, ST_FLOOR, ST_REG, ST_UNREG, ST_FLOOR2, ST_REREG, ST_PARK, NPHASE };

static bool is_floor(int ph)
{
	return ph == ST_WARM || ph == ST_FLOOR || ph == ST_FLOOR2;
}

struct sctl {
	int phase;                 /* futex: the step the processes are to do */
	int ready;                 /* processes launched and connected */
	int done[NPHASE];          /* processes through each step (futex words) */
	int failed[NPHASE];        /* of which some op failed */
	uint64_t minflt[NPHASE];   /* page faults the processes took in each step */
	uint64_t cpu_ns[NPHASE];   /* CPU time the processes took in each step */
	int first_err;
};

static struct sctl *S;
static uint64_t S_names;
static int S_procs;
static char S_echo[108];
static pid_t S_daemon_pid, S_echo_pid;

static void range_of(int i, uint64_t *first, uint64_t *n)
{
	uint64_t per = S_names / (uint64_t)S_procs, extra = S_names % (uint64_t)S_procs;

	*first = per * (uint64_t)i + ((uint64_t)i < extra ? (uint64_t)i : extra);
	*n = per + ((uint64_t)i < extra);
}

static void step_done(int ph, int failed, int err)
{
	if (failed) {
		__atomic_fetch_add(&S->failed[ph], 1, __ATOMIC_RELAXED);
		__atomic_compare_exchange_n(&S->first_err, &(int){ 0 }, err, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	}
	if (__atomic_add_fetch(&S->done[ph], 1, __ATOMIC_ACQ_REL) == S_procs)
		futex_wake_all(&S->done[ph]);
}

/* A process's names were formatted before the steps (prepare): a step
 * times procreg, not snprintf. */
static int do_names(procreg_t *reg, struct prepared *p, bool unreg, int *err)
{
	int bad = 0;

	if (bo.pipelined) {
		int64_t k = prepared_batch(reg, p, unreg);

		if (k != (int64_t)p->n) {
			*err = k < 0 ? (int)-k : EEXIST;
			bad = 1;
		}
		return bad;
	}
	for (size_t j = 0; j < p->n; j++) {
		int r = unreg ? procreg_unregister(reg, p->names[j].s)
			      : procreg_register(reg, p->names[j].s, p->metas[j], p->meta_lens[j]);

		if (r) {
			*err = -r;
			bad = 1;
		}
	}
	return bad;
}

static uint64_t rusage_ns(const struct rusage *ru)
{
	return (uint64_t)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000000000ull +
	       (uint64_t)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1000ull;
}

static int proc_main(void *arg)
{
	int id = (int)(intptr_t)arg, err = 0;
	uint64_t first, n;
	procreg_t *reg = bench_open(BENCH_SCOPE);
	int efd = echo_connect(S_echo);
	struct prepared p;
	struct rusage ru0, ru1;
	size_t frame = 0;

	range_of(id, &first, &n);
	if (!reg || efd < 0 || procreg_sync(reg) < 0 || prepare(&p, "s", first, (size_t)n) < 0) {
		step_done(ST_LAUNCH, 1, errno ? errno : EIO);
		return 1;
	}
	/* The floor's request: the size of this process's first REGISTER
	 * frame. */
	if (n)
		frame = echo_frame_size(strlen(p.names[0].s), p.meta_lens[0]);
	step_done(ST_LAUNCH, 0, 0);
	for (int ph = ST_WARM; ph <= ST_REREG; ph++) {
		int cur, bad;

		while ((cur = __atomic_load_n(&S->phase, __ATOMIC_ACQUIRE)) < ph)
			futex_wait(&S->phase, cur);
		getrusage(RUSAGE_SELF, &ru0);
		if (is_floor(ph)) {
			bad = n && echo_batch(efd, frame, n, bo.pipelined) < 0;
			err = bad ? EIO : 0;
		} else {
			bad = do_names(reg, &p, ph == ST_UNREG, &err);
		}
		getrusage(RUSAGE_SELF, &ru1);
		__atomic_fetch_add(&S->minflt[ph], (uint64_t)(ru1.ru_minflt - ru0.ru_minflt),
				   __ATOMIC_RELAXED);
		__atomic_fetch_add(&S->cpu_ns[ph], rusage_ns(&ru1) - rusage_ns(&ru0),
				   __ATOMIC_RELAXED);
		step_done(ph, bad, err);
	}
	/* Hold the names until we are killed. */
	for (;;)
		pause();
	return 0;
}

/* Wait until every process is through step PH: 0, or -1 if one of them
 * died first. */
static int wait_step(int ph, const pid_t *pids)
{
	int v;

	while ((v = __atomic_load_n(&S->done[ph], __ATOMIC_ACQUIRE)) < S_procs) {
		futex_wait_ms(&S->done[ph], v, 200);
		if (__atomic_load_n(&S->done[ph], __ATOMIC_ACQUIRE) == v) {
			/* Nothing moved for a while: anyone dead? */
			for (int i = 0; i < S_procs; i++) {
				siginfo_t si = { 0 };

				if (waitid(P_PID, (id_t)pids[i], &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
				    si.si_pid == pids[i])
					return -1;
			}
		}
	}
	return 0;
}

static uint64_t names_now(procreg_t *reg)
{
	PROCREG_OPTS(procreg_stats, st);

	procreg_stats(reg, &st);
	return st.names;
}

/* Poll the names counter until it reads WANT: the time that took, in ns. */
static uint64_t wait_names(procreg_t *reg, uint64_t want, uint64_t timeout_ns)
{
	uint64_t t0 = pr_mono_ns(), t;

	while (names_now(reg) != want) {
		t = pr_mono_ns();
		if (t - t0 > timeout_ns)
			return UINT64_MAX;
		usleep(50);
	}
	return pr_mono_ns() - t0;
}

static uint64_t count_visible(procreg_t *reg)
{
	uint64_t found = 0;

	for (uint64_t i = 0; i < S_names; i++) {
		struct qname q;

		name_of(&q, "s", i);
		found += procreg_lookup(reg, q.s, NULL) == 0;
	}
	return found;
}

/* The rows of the steps' table: steps 1-9 of one sequence. */
enum { R_LAUNCH, R_REG, R_REG_WAIT, R_UNREG, R_UNREG_WAIT, R_REREG, R_REREG_WAIT, R_KILL, R_GONE,
       NROWS };

static const struct rowdef {
	const char *what;           /* a format: %s is the count of procs or names */
	const char *unit;           /* of its rate; NULL: the row has none */
	const char *key_rate, *key_ms;
} rowdef[NROWS] = {
	[R_LAUNCH] = { "launch %s processes", "procs/s", NULL, "launch_ms" },
	[R_REG] = { "register %s names", "names/s", "reg_per_s", "reg_ms" },
	[R_REG_WAIT] = { "wait until all visible", NULL, NULL, "wait_visible_ms" },
	[R_UNREG] = { "unregister %s names", "names/s", "unreg_per_s", "unreg_ms" },
	[R_UNREG_WAIT] = { "wait until all gone", NULL, NULL, "wait_gone_ms" },
	[R_REREG] = { "re-register %s names", "names/s", "rereg_per_s", "rereg_ms" },
	[R_REREG_WAIT] = { "wait until all visible", NULL, NULL, "wait_revisible_ms" },
	[R_KILL] = { "kill %s processes (SIGKILL)", NULL, NULL, "kill_ms" },
	[R_GONE] = { "every name gone, after the last kill", NULL, NULL, "kill_to_all_gone_ms" },
};

/* One sequence of steps 1-9, with fresh processes, and what it measured.
 * A first registration happens once in a process's life, so each round
 * of the figure is a sequence of its own; a single one swings by a third
 * either way on this kind of machine. */
struct seq {
	double ms[NROWS];
	double floor[2];            /* the floor's requests/s before steps 2 and 6 */
	uint64_t visible[2];        /* names lookups found after steps 3 and 7 */
	uint64_t cpu_ns[NPHASE];    /* CPU time of the processes in each step */
	uint64_t server_ns[NPHASE]; /* of the server (procregd or the echo server) */
	uint64_t minflt[NPHASE];    /* page faults of the processes */
};

/* Release every process into step PH and wait until all are through it
 * (*T0 and *T1: when it started and ended; Q->server_ns[PH] the server's
 * CPU time in it): 0, or -1 (said on stderr) if one died or failed to
 * VERB. */
static int release(int ph, const pid_t *pids, const char *verb, struct seq *q, uint64_t *t0,
		   uint64_t *t1)
{
	pid_t server = is_floor(ph) ? S_echo_pid : S_daemon_pid;
	uint64_t c0 = proc_cpu_ns(server);

	*t0 = pr_mono_ns();
	__atomic_store_n(&S->phase, ph, __ATOMIC_RELEASE);
	futex_wake_all(&S->phase);
	if (wait_step(ph, pids) < 0)
		return -1;
	*t1 = pr_mono_ns();
	q->server_ns[ph] = proc_cpu_ns(server) - c0;
	if (S->failed[ph]) {
		fprintf(stderr, "procreg-bench: %d processes failed to %s: %s\n", S->failed[ph],
			verb, strerror(S->first_err));
		return -1;
	}
	return 0;
}

/* Step PH (register, unregister, re-register) in every process, then
 * the wait until the table shows it, into Q; after a (re-)registration,
 * how many names lookups find. */
static int run_phase(int ph, const pid_t *pids, procreg_t *reg, struct seq *q)
{
	static const char *const verb[] = { [ST_REG] = "register", [ST_UNREG] = "unregister",
					    [ST_REREG] = "re-register" };
	static const int row[] = { [ST_REG] = R_REG, [ST_UNREG] = R_UNREG, [ST_REREG] = R_REREG };
	uint64_t want = ph == ST_UNREG ? 0 : S_names, t0, t1, w;

	if (release(ph, pids, verb[ph], q, &t0, &t1) < 0)
		return -1;
	q->ms[row[ph]] = (double)(t1 - t0) / 1e6;
	w = wait_names(reg, want, 10000000000ull);
	if (w == UINT64_MAX) {
		fprintf(stderr, "procreg-bench: the table shows %llu names, not %llu\n",
			(unsigned long long)names_now(reg), (unsigned long long)want);
		return -1;
	}
	q->ms[row[ph] + 1] = (double)w / 1e6;
	if (ph != ST_UNREG)
		q->visible[ph == ST_REREG] = count_visible(reg);
	return 0;
}

/* Steps 1-9 once, into Q: 0, or -1 (said on stderr). The processes are
 * reaped, and PIDS[0] left 0, unless it fails. */
static int sequence(procreg_t *reg, pid_t *pids, struct seq *q)
{
	uint64_t t0, t1, w;

	memset(S, 0, sizeof(*S));
	/* 1 launch */
	t0 = pr_mono_ns();
	for (int i = 0; i < S_procs; i++) {
		pids[i] = spawn(proc_main, (void *)(intptr_t)i, -1);
		if (pids[i] < 0) {
			fprintf(stderr, "procreg-bench: fork: %s\n", strerror((int)-pids[i]));
			return -1;
		}
	}
	if (wait_step(ST_LAUNCH, pids) < 0 || S->failed[ST_LAUNCH])
		return -1;
	t1 = pr_mono_ns();
	q->ms[R_LAUNCH] = (double)(t1 - t0) / 1e6;

	for (int ph = ST_WARM; ph <= ST_REREG; ph++) {
		if (!is_floor(ph)) {
			if (run_phase(ph, pids, reg, q) < 0)
				return -1;
			continue;
		}
		if (release(ph, pids, "send to the echo server", q, &t0, &t1) < 0)
			return -1;
		if (ph != ST_WARM)
			q->floor[ph == ST_FLOOR2] = (double)S_names * 1e9 / (double)(t1 - t0);
	}
	memcpy(q->cpu_ns, S->cpu_ns, sizeof(q->cpu_ns));
	memcpy(q->minflt, S->minflt, sizeof(q->minflt));

	/* 8 kill, 9 gone */
	t0 = pr_mono_ns();
	for (int i = 0; i < S_procs; i++)
		kill_child(pids[i]);
	t1 = pr_mono_ns();
	w = wait_names(reg, 0, 60000000000ull);
	q->ms[R_KILL] = (double)(t1 - t0) / 1e6;
	q->ms[R_GONE] = w != UINT64_MAX ? (double)w / 1e6 : -1;
	for (int i = 0; i < S_procs; i++)
		reap(pids[i]);
	pids[0] = 0;
	if (w == UINT64_MAX) {
		fprintf(stderr, "procreg-bench: names left after the kill: %llu\n",
			(unsigned long long)names_now(reg));
		return -1;
	}
	return 0;
}

/* The median over N sequences of what GET picks out of each, and its
 * range. */
struct spread {
	double med, lo, hi;
};

static struct spread spread_of(const struct seq *q, int n, double (*get)(const struct seq *, int),
			       int arg)
{
	double v[64];
	struct spread s = { 0, 1e300, -1e300 };

	n = n > 64 ? 64 : n;
	for (int i = 0; i < n; i++) {
		v[i] = get(&q[i], arg);
		s.lo = v[i] < s.lo ? v[i] : s.lo;
		s.hi = v[i] > s.hi ? v[i] : s.hi;
	}
	s.med = median(v, n);
	return s;
}

static double get_ms(const struct seq *q, int row)
{
	return q->ms[row];
}

static double get_floor(const struct seq *q, int i)
{
	return q->floor[i];
}

/* Registration's rate over the floor's before it, in one sequence. */
static double get_vs_floor(const struct seq *q, int i)
{
	return (double)S_names * 1e3 / q->ms[i ? R_REREG : R_REG] / q->floor[i];
}

static double get_cpu(const struct seq *q, int ph)
{
	return q->cpu_ns[ph] / 1e6;
}

static double get_server(const struct seq *q, int ph)
{
	return q->server_ns[ph] / 1e6;
}

static double get_faults(const struct seq *q, int ph)
{
	return (double)q->minflt[ph] / S_procs;
}

/* The steps' table over N sequences (medians, and their range where
 * there are several), the JSON and the target. */
static void report_seqs(const struct seq *q, int n)
{
	struct spread reg[2] = { spread_of(q, n, get_vs_floor, 0), spread_of(q, n, get_vs_floor, 1) };
	struct spread fl[2] = { spread_of(q, n, get_floor, 0), spread_of(q, n, get_floor, 1) };
	static const int cpu_ph[] = { ST_FLOOR, ST_REG, ST_UNREG, ST_FLOOR2, ST_REREG };
	static const char *const cpu_what[] = { "floor", "register", "unregister", "floor",
						"re-register" };
	uint64_t visible[2] = { UINT64_MAX, UINT64_MAX };
	double rate[NROWS];
	bool over = bo.pipelined && fl[0].med < STRESS_TARGET_MPS * 1e6;

	for (int i = 0; i < n; i++)
		for (int k = 0; k < 2; k++)
			visible[k] = q[i].visible[k] < visible[k] ? q[i].visible[k] : visible[k];
	hprintf("\n%-4s %-44s %12s %14s", "step", "", "time", "rate");
	if (n > 1)
		hprintf("          time: median of %d sequences (range)", n);
	hprintf("\n");
	for (int r = 0; r < NROWS; r++) {
		struct spread s = spread_of(q, n, get_ms, r);
		char what[96], rs[48] = "";

		snprintf(what, sizeof(what), rowdef[r].what,
			 fmt_count(r == R_LAUNCH || r == R_KILL ? (uint64_t)S_procs : S_names));
		rate[r] = rowdef[r].unit && s.med > 0 ?
				  (r == R_LAUNCH ? S_procs : (double)S_names) * 1e3 / s.med : 0;
		if (rate[r] > 0)
			snprintf(rs, sizeof(rs), "%s %s", fmt_count((uint64_t)(rate[r] + 0.5)),
				 rowdef[r].unit);
		hprintf("%-4d %-44s %9.1f ms %22s", r + 1, what, s.med, rs);
		if (n > 1)
			hprintf("  (%.1f-%.1f)", s.lo, s.hi);
		hprintf("\n");
		if (rowdef[r].key_rate)
			j_num(rowdef[r].key_rate, rate[r]);
		j_num(rowdef[r].key_ms, s.med);
	}
	hprintf("lookups after steps 3 and 7 found %s and %s of %s names%s\n",
		fmt_count(visible[0]), fmt_count(visible[1]), fmt_count(S_names),
		n > 1 ? " (the fewest of any sequence)" : "");
	hprintf("\nregistration beside its floor: the same processes send as many requests of the "
		"same size, %s, to an echo server that only answers; ratios: the median of the "
		"sequences' own, and their range\n",
		bo.pipelined ? "packed as procreg_batch packs them" : "a round trip each");
	hprintf("  before step 2: %s requests/s; register %s names/s, %.2fx the floor's rate "
		"(%.2f-%.2f)\n", fmt_count((uint64_t)(fl[0].med + 0.5)),
		fmt_count((uint64_t)(rate[R_REG] + 0.5)), reg[0].med, reg[0].lo, reg[0].hi);
	hprintf("  before step 6: %s requests/s; re-register %s names/s, %.2fx (%.2f-%.2f)\n",
		fmt_count((uint64_t)(fl[1].med + 0.5)), fmt_count((uint64_t)(rate[R_REREG] + 0.5)),
		reg[1].med, reg[1].lo, reg[1].hi);
	/* The floor is what the machine charges before any registry work:
	 * a target above it cannot be met here, by procreg or anything
	 * that answers each process. Said, so that a miss is read as the
	 * machine's when it is. */
	if (over)
		hprintf("  the floor itself is under the %g M/s target (%.3g M/s): out of this "
			"machine's reach\n", STRESS_TARGET_MPS, fl[0].med / 1e6);
	hprintf("  page faults a process took: floor's first run %.1f, then %.1f; register %.1f, "
		"unregister %.1f, re-register %.1f\n",
		spread_of(q, n, get_faults, ST_WARM).med, spread_of(q, n, get_faults, ST_FLOOR).med,
		spread_of(q, n, get_faults, ST_REG).med, spread_of(q, n, get_faults, ST_UNREG).med,
		spread_of(q, n, get_faults, ST_REREG).med);
	/* Where the time went: a step's wall time against what the
	 * processes and the server spent on CPU in it (two CPUs: up to twice
	 * the wall time between them). */
	hprintf("  CPU time, processes + server:");
	for (size_t i = 0; i < sizeof(cpu_ph) / sizeof(*cpu_ph); i++)
		hprintf("%s %s %.1f + %.1f%s", i ? "," : "", cpu_what[i],
			spread_of(q, n, get_cpu, cpu_ph[i]).med,
			spread_of(q, n, get_server, cpu_ph[i]).med, i ? "" : " ms");
	hprintf("\n");

	j_str("subcommand", "stress");
	j_int("names", S_names);
	j_int("procs", (uint64_t)S_procs);
	j_int("nodes", 1);
	j_int("ncpus", (uint64_t)ncpus);
	j_bool("pipelined", bo.pipelined);
	j_int("sequences", (uint64_t)n);
	j_num("floor_per_s", fl[0].med);
	j_num("floor2_per_s", fl[1].med);
	j_bool("target_over_floor", over);
	j_num("reg_vs_floor", reg[0].med);
	j_num("reg_vs_floor_min", reg[0].lo);
	j_num("reg_vs_floor_max", reg[0].hi);
	j_num("rereg_vs_floor", reg[1].med);
	j_num("cpu_ms_procs_floor", spread_of(q, n, get_cpu, ST_FLOOR).med);
	j_num("cpu_ms_server_floor", spread_of(q, n, get_server, ST_FLOOR).med);
	j_num("cpu_ms_procs_register", spread_of(q, n, get_cpu, ST_REG).med);
	j_num("cpu_ms_server_register", spread_of(q, n, get_server, ST_REG).med);
	j_num("cpu_ms_procs_reregister", spread_of(q, n, get_cpu, ST_REREG).med);
	j_num("cpu_ms_server_reregister", spread_of(q, n, get_server, ST_REREG).med);
	j_num("faults_per_proc_register", spread_of(q, n, get_faults, ST_REG).med);
	j_num("faults_per_proc_reregister", spread_of(q, n, get_faults, ST_REREG).med);
	j_int("visible_after_register", visible[0]);
	j_int("visible_after_reregister", visible[1]);
	j_bool("all_gone", true);
	/* Pipelined, the rate from many processes at once: 2 M/s is the
	 * target (one procreg_register per name is a round trip each and
	 * has its own target, in procreg-bench register). */
	if (bo.pipelined) {
		char what[160];

		snprintf(what, sizeof(what), "pipelined registration from %s processes",
			 fmt_count((uint64_t)S_procs));
		target(what, rate[R_REG] / 1e6, ">=", STRESS_TARGET_MPS, " M/s");
	}
}

/* ---- deaths beside their floor ------------------------------------------ */

struct dctl {
	int ready;                 /* futex: processes ready to be killed */
	int failed;
	int err;
};

static struct dctl *D;

static void death_ready(int failed, int err)
{
	if (failed) {
		__atomic_fetch_add(&D->failed, 1, __ATOMIC_RELAXED);
		D->err = err;
	}
	__atomic_add_fetch(&D->ready, 1, __ATOMIC_ACQ_REL);
	futex_wake_all(&D->ready);
}

/* A process of the floor: the shape of a registering one, no names. */
static int shape_main(void *arg)
{
	procreg_t *reg = bench_open(BENCH_SCOPE);

	(void)arg;
	death_ready(!reg || procreg_sync(reg) < 0, errno);
	for (;;)
		pause();
	return 0;
}

/* A process that holds its share of the names until it is killed. */
static int holder_main(void *arg)
{
	int id = (int)(intptr_t)arg;
	uint64_t first, n;
	procreg_t *reg = bench_open(BENCH_SCOPE);
	int64_t k;

	range_of(id, &first, &n);
	k = reg ? register_range(reg, "d", first, n, false) : -errno;
	death_ready(k != (int64_t)n, k < 0 ? (int)-k : EEXIST);
	for (;;)
		pause();
	return 0;
}

/* Launch S_procs processes running FN, each ready: 0, or -1. */
static int launch(int (*fn)(void *), pid_t *pids)
{
	int v;

	D->ready = D->failed = 0;
	for (int i = 0; i < S_procs; i++) {
		pids[i] = spawn(fn, (void *)(intptr_t)i, -1);
		if (pids[i] < 0) {
			fprintf(stderr, "procreg-bench: fork: %s\n", strerror((int)-pids[i]));
			for (int j = 0; j < i; j++) {
				kill_child(pids[j]);
				reap(pids[j]);
			}
			return -1;
		}
	}
	while ((v = __atomic_load_n(&D->ready, __ATOMIC_ACQUIRE)) < S_procs)
		futex_wait_ms(&D->ready, v, 200);
	if (D->failed) {
		fprintf(stderr, "procreg-bench: %d processes failed: %s\n", D->failed,
			strerror(D->err));
		for (int i = 0; i < S_procs; i++)
			kill_child(pids[i]);
		for (int i = 0; i < S_procs; i++)
			reap(pids[i]);
		return -1;
	}
	return 0;
}

/* Kill every process of PIDS: *FIRST and *LAST the times of the first and
 * last kill. */
static void kill_all(const pid_t *pids, uint64_t *first, uint64_t *last)
{
	*first = pr_mono_ns();
	for (int i = 0; i < S_procs; i++)
		kill(pids[i], SIGKILL);
	*last = pr_mono_ns();
}

/* One round of the floor: the time until every pidfd reported, from the
 * first kill (*FROM_FIRST) and the last (*FROM_LAST), in ns. */
static int floor_round(pid_t *pids, double *from_first, double *from_last)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), *fds = calloc((size_t)S_procs, sizeof(int)), got = 0;
	uint64_t t_first, t_last, t_end;
	int rc = -1;

	if (ep < 0 || !fds || launch(shape_main, pids) < 0)
		goto out;
	for (int i = 0; i < S_procs; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };

		fds[i] = (int)syscall(SYS_pidfd_open, pids[i], 0);
		if (fds[i] < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
			fprintf(stderr, "procreg-bench: pidfd: %s\n", strerror(errno));
			for (int j = 0; j < S_procs; j++)
				kill_child(pids[j]);
			goto reap;
		}
	}
	kill_all(pids, &t_first, &t_last);
	while (got < S_procs) {
		struct epoll_event evs[256];
		int n = epoll_wait(ep, evs, 256, 10000);

		if (n <= 0) {
			fprintf(stderr, "procreg-bench: pidfds: %d of %d reported\n", got, S_procs);
			goto reap;
		}
		for (int k = 0; k < n; k++)
			epoll_ctl(ep, EPOLL_CTL_DEL, fds[evs[k].data.u32], NULL);
		got += n;
	}
	t_end = pr_mono_ns();
	*from_first = (double)(t_end - t_first);
	*from_last = (double)(t_end - t_last);
	rc = 0;
reap:
	for (int i = 0; i < S_procs; i++)
		reap(pids[i]);
out:
	for (int i = 0; fds && i < S_procs; i++)
		if (fds[i] > 0)
			close(fds[i]);
	free(fds);
	if (ep >= 0)
		close(ep);
	return rc;
}

/* One round of procreg: the time until the table shows no name. */
static int procreg_round(procreg_t *reg, pid_t *pids, double *from_first, double *from_last)
{
	uint64_t t_first, t_last, w;

	if (launch(holder_main, pids) < 0)
		return -1;
	if (wait_names(reg, S_names, 60000000000ull) == UINT64_MAX) {
		fprintf(stderr, "procreg-bench: the table shows %llu names, not %llu\n",
			(unsigned long long)names_now(reg), (unsigned long long)S_names);
		for (int i = 0; i < S_procs; i++)
			kill_child(pids[i]);
		for (int i = 0; i < S_procs; i++)
			reap(pids[i]);
		return -1;
	}
	kill_all(pids, &t_first, &t_last);
	w = wait_names(reg, 0, 60000000000ull);
	for (int i = 0; i < S_procs; i++)
		reap(pids[i]);
	if (w == UINT64_MAX) {
		fprintf(stderr, "procreg-bench: names left after the kill: %llu\n",
			(unsigned long long)names_now(reg));
		return -1;
	}
	w += t_last; /* the poll started at the last kill */
	*from_first = (double)(w - t_first);
	*from_last = (double)(w - t_last);
	return 0;
}

/* The death rounds; every process they start is reaped before they
 * return, and PIDS[0] is left 0 so that nothing is reaped twice. */
static int deaths(procreg_t *reg, pid_t *pids)
{
	double ff[64], fl[64], pf[64], pl[64], rf[64], rl[64];
	int rounds = bo.rounds > 64 ? 64 : bo.rounds;
	double lo = 1e300, hi = 0, med;
	char what[160];

	D = shared_alloc(sizeof(*D));
	for (int r = 0; r < rounds; r++) {
		int err = floor_round(pids, &ff[r], &fl[r]);

		if (!err)
			err = procreg_round(reg, pids, &pf[r], &pl[r]);
		pids[0] = 0;
		if (err) {
			shared_free(D, sizeof(*D));
			return -1;
		}
		rf[r] = pf[r] / ff[r];
		rl[r] = pl[r] / fl[r];
		lo = rf[r] < lo ? rf[r] : lo;
		hi = rf[r] > hi ? rf[r] : hi;
		hprintf("  round %d: floor %.1f ms (%.1f after the last kill), procreg %.1f ms "
			"(%.1f after the last kill): %.2fx\n", r + 1, ff[r] / 1e6, fl[r] / 1e6,
			pf[r] / 1e6, pl[r] / 1e6, rf[r]);
	}
	med = median(rf, rounds);
	hprintf("deaths, %s names over %s processes, %d rounds (median): floor %.1f ms, procreg "
		"%.1f ms from the first kill; %.1f and %.1f ms from the last; procreg / floor "
		"%.2fx (%.2f-%.2f) from the first kill, %.2fx from the last\n",
		fmt_count(S_names), fmt_count((uint64_t)S_procs), rounds, median(ff, rounds) / 1e6,
		median(pf, rounds) / 1e6, median(fl, rounds) / 1e6, median(pl, rounds) / 1e6, med,
		lo, hi, median(rl, rounds));
	j_obj("deaths");
	j_int("rounds", (uint64_t)rounds);
	j_num("floor_first_kill_ms", median(ff, rounds) / 1e6);
	j_num("floor_last_kill_ms", median(fl, rounds) / 1e6);
	j_num("procreg_first_kill_ms", median(pf, rounds) / 1e6);
	j_num("procreg_last_kill_ms", median(pl, rounds) / 1e6);
	j_num("ratio_first_kill", med);
	j_num("ratio_first_kill_min", lo);
	j_num("ratio_first_kill_max", hi);
	j_num("ratio_last_kill", median(rl, rounds));
	j_end();
	snprintf(what, sizeof(what), "%s names of %s killed processes gone: x the pidfd floor",
		 fmt_count(S_names), fmt_count((uint64_t)S_procs));
	target(what, med, "<=", 1.2, "x");
	shared_free(D, sizeof(*D));
	return 0;
}

int cmd_stress(void)
{
	struct daemon_proc d;
	char maxc[32];
	const char *args[] = { "--max-clients", maxc, NULL };
	uint64_t t_start = pr_mono_ns();
	int nseq = bo.rounds > 64 ? 64 : bo.rounds;
	struct seq *seqs = calloc((size_t)nseq, sizeof(*seqs));
	pid_t *pids;
	procreg_t *reg = NULL;
	pid_t echo = -1;
	int rc = 2;

	S_names = bo.stress_names ? bo.stress_names : (bo.quick ? 2000 : 100000);
	S_procs = bo.procs ? bo.procs : (bo.quick ? 20 : 1000);
	if ((uint64_t)S_procs > S_names)
		S_procs = (int)S_names;
	pids = calloc((size_t)S_procs, sizeof(*pids));
	S = shared_alloc(sizeof(*S));
	snprintf(maxc, sizeof(maxc), "%d", S_procs + 64);
	if (!pids || !seqs || daemon_start(&d, BENCH_SCOPE, args) < 0) {
		free(seqs);
		return 2;
	}
	snprintf(S_echo, sizeof(S_echo), "%s/echo.sock", env_dir());
	reg = bench_open(BENCH_SCOPE);
	if (!reg || (echo = echo_start(S_echo)) < 0)
		goto out;
	S_daemon_pid = d.pid;
	S_echo_pid = echo;
	hprintf("procreg-bench stress: %s names over %s processes (%s each), %s, 1 node, "
		"%d CPUs, processes and daemon unpinned\n", fmt_count(S_names),
		fmt_count((uint64_t)S_procs), fmt_count(S_names / (uint64_t)S_procs),
		bo.pipelined ? "procreg_batch per process" : "one procreg_register per name",
		ncpus);

	for (int r = 0; r < nseq; r++)
		if (sequence(reg, pids, &seqs[r]) < 0)
			goto failed;
	report_seqs(seqs, nseq);
	hprintf("\ndeaths beside their floor: %s processes of the same shape, no names, "
		"watched by bare pidfds, then %s processes holding the names\n",
		fmt_count((uint64_t)S_procs), fmt_count((uint64_t)S_procs));
	if (deaths(reg, pids) < 0)
		goto failed;
	targets_report();
	hprintf("\ntotal %.1f s\n", (double)(pr_mono_ns() - t_start) / 1e9);
	j_num("seconds", (double)(pr_mono_ns() - t_start) / 1e9);
	rc = 0;
	goto out;
failed:
	fprintf(stderr, "procreg-bench: stress failed\n");
	daemon_dump_log(&d);
out:
	if (pids[0]) {
		for (int i = 0; i < S_procs && pids[i] > 0; i++)
			kill_child(pids[i]);
		for (int i = 0; i < S_procs && pids[i] > 0; i++)
			reap(pids[i]);
	}
	if (echo > 0) {
		kill_child(echo);
		reap(echo);
	}
	if (reg)
		procreg_close(reg);
	daemon_stop(&d);
	shared_free(S, sizeof(*S));
	free(pids);
	free(seqs);
	return rc;
}
