/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bench.h - what procreg-bench's files share.
 *
 *   main.c      options, subcommand dispatch, usage
 *   env.c       the private directory, procregd processes, child
 *               processes, CPU pinning, clean-up (also on SIGINT)
 *   out.c       the human table and the JSON object
 *   baseline.c  the in-process tables procreg is measured against: an
 *               open-addressing hash table and liburcu's cds_lfht
 *   lookup.c    procreg-bench lookup [--under-write-load]
 *   register.c  procreg-bench register
 *   echo.c      the unix-socket echo server, the baseline of register and stress
 *   stress.c    procreg-bench stress
 *   cluster.c   procreg-bench stress --nodes K: replication between daemons
 *   memory.c    procreg-bench memory
 *   probes.c    procreg-bench probes: USDT probes' cost, not attached
 *
 * Every figure is measured beside a baseline in the same run and reported
 * as a ratio to it: absolute times drift on a shared machine, ratios much
 * less. The bench never uses the default scope or directory: it starts its
 * own procregd in a private temporary directory and removes both at exit,
 * also on SIGINT, SIGTERM and SIGHUP.
 */
#ifndef PROCREG_BENCH_H
#define PROCREG_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "clock.h"
#include "procreg.h"

#define BENCH_MAX_CPUS 1024
#define BENCH_SCOPE "bench"

/* ---- options ---------------------------------------------------------- */

struct bench_opts {
	const char *cmd;
	bool json;
	bool quick;
	const char *procregd;        /* --procregd, else found next to us */
	const char *tmpdir;          /* --tmpdir: base of the private directory */
	/* lookup */
	bool under_write_load;
	bool presence;               /* lookups with out == NULL */
	double miss_rate;            /* 0..1 */
	int readers;                 /* 0: 1 and the number of CPUs */
	uint64_t names_list[8];      /* --names for lookup and memory: table sizes */
	int nnames;
	int rounds;                  /* measurements per figure; the median is kept */
	int duration_ms;             /* timed window of one measurement */
	/* register */
	int clients;                 /* 0: 1 and the number of CPUs */
	uint64_t sync_ops;           /* synchronous registrations per client */
	uint64_t batch_ops;          /* pipelined registrations per client */
	uint64_t prefill;            /* names in the table before registering */
	/* stress */
	uint64_t stress_names;
	int procs;
	bool pipelined;              /* stress: procreg_batch per process, not one call per name */
	int nodes;                   /* --nodes K: K bridged daemons (cluster.c) */
	const char *daemon_args[32]; /* --daemon-arg: appended to every node's command line */
	int ndaemon_args;
	bool no_mesh;                /* --no-mesh: no --listen/--peer (a backend finds peers) */
	/* probes */
	uint64_t fixed;              /* --fixed N: N untimed lookups per build (callgrind) */
	const char *noprobes_lib;    /* --noprobes-lib PATH */
};

extern struct bench_opts bo;

/* ---- time, CPUs, shared memory (env.c) -------------------------------- */

void sleep_ms(double ms);

/* The CPUs we may run on (our affinity mask), in order. */
extern int ncpus;
extern int cpus[BENCH_MAX_CPUS];
/* Pin PID (0: ourselves) to one CPU, or to every allowed CPU with cpu < 0. */
int pin(pid_t pid, int cpu);
/* "0", "0,1", "any": for reports. */
const char *cpu_label(int cpu);

/* Anonymous memory shared with the children we fork. */
void *shared_alloc(size_t size);
void shared_free(void *p, size_t size);

/* Futex wait/wake on a word in shared memory (not process-private). */
void futex_wait(int *addr, int val);
void futex_wait_ms(int *addr, int val, int ms);
void futex_wake_all(int *addr);

/* ---- the private directory and the processes we start (env.c) --------- */

/* Create the private directory and install the clean-up handlers. */
int env_init(void);
const char *env_dir(void);
/* The directory of the procreg-bench executable. */
const char *bench_self_dir(void);
/* Remove everything we started or created. Safe to call twice. */
void env_cleanup(void);

/* Fork a tracked child that runs FN(ARG) and _exits with its value. The
 * child dies with us (PR_SET_PDEATHSIG) and is killed by env_cleanup.
 * CPU >= 0 pins it. Returns the pid or a negative errno. */
pid_t spawn(int (*fn)(void *), void *arg, int cpu);
/* Wait for a tracked child: its exit status, or 128 + signal. */
int reap(pid_t pid);
/* SIGKILL a tracked child (it stays tracked until reaped). */
void kill_child(pid_t pid);

struct daemon_proc {
	pid_t pid;
	char scope[32];
};

/* Start procregd --foreground --dir DIR --scope SCOPE [ARGS] and wait until
 * it serves. ARGS is NULL-terminated (may be NULL). */
int daemon_start(struct daemon_proc *d, const char *scope, const char *const *args);
/* Print its stderr (on failure). */
void daemon_dump_log(const struct daemon_proc *d);
/* Stop it (SIGTERM, wait) and remove its scope's files. */
void daemon_stop(struct daemon_proc *d);
/* PID's CPU time so far, every thread's, in ns, read once it sleeps
 * (20 ms at most); 0 if unknown. */
uint64_t proc_cpu_ns(pid_t pid);
/* Wait until process PID has used no CPU time for a while (at most
 * MAX_MS): the ms that took, or -1 if it never went quiet. */
double wait_idle(pid_t pid, int max_ms);
/* Open a handle on a scope in the private directory. */
procreg_t *bench_open(const char *scope);

/* ---- names ------------------------------------------------------------ */

/* Fixed-width name buffers: every bench name fits in 16 bytes with its NUL. */
struct qname {
	char s[16];
};

void name_of(struct qname *q, const char *prefix, uint64_t i);
/* The metadata stored with name I: "unix:/run/svc.%08llu.sock". */
size_t meta_of(char *buf, size_t len, uint64_t i);

/* Register names PREFIX.0 .. PREFIX.N-1 (with meta_of) through
 * procreg_batch, in chunks. Returns how many were registered, or a negative
 * errno. */
int64_t register_range(procreg_t *reg, const char *prefix, uint64_t first, uint64_t n,
		       bool unregister);

/* The names PREFIX.FIRST .. and their metadata, formatted before a timed
 * step, and the batch of requests for them: a step that formatted them
 * itself would measure snprintf, which takes more instructions than a
 * pipelined registration does. */
struct prepared {
	struct procreg_op *ops;
	struct qname *names;
	char (*metas)[40];
	size_t *meta_lens;
	size_t n;
};

int prepare(struct prepared *p, const char *prefix, uint64_t first, size_t n);
/* Register (or remove) them all in one procreg_batch: how many were, or a
 * negative errno. */
int64_t prepared_batch(procreg_t *reg, struct prepared *p, bool unregister);
void prepared_free(struct prepared *p);

uint64_t rng_next(uint64_t *s);

/* ---- the unix-socket echo server (echo.c) ---------------------------- */

/* The size of the REGISTER frame for a name and metadata of these
 * lengths: what the echo baselines send for one. */
size_t echo_frame_size(size_t name_len, size_t meta_len);
/* Start it listening at PATH: its pid, or -1 (said on stderr). */
pid_t echo_start(const char *path);
/* A connection to it: the fd, or -1. */
int echo_connect(const char *path);
/* N requests of FRAME bytes each, as procreg_batch sends them
 * (PIPELINED: packets of as many as fit, four in flight) or as
 * procreg_register does (one a packet, waiting for each answer); 0 once
 * every one is answered, -1 on an error. */
int echo_batch(int fd, size_t frame, uint64_t n, bool pipelined);

/* ---- output (out.c) --------------------------------------------------- */

/* The human table goes to stdout, or to stderr under --json, where stdout
 * carries the JSON object alone. */
FILE *human(void);
void hprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A JSON object built as the bench runs, printed once at the end. */
void j_obj(const char *key);     /* key NULL inside an array or at the top */
void j_arr(const char *key);
void j_end(void);                /* closes the innermost object or array */
void j_num(const char *key, double v);
void j_int(const char *key, uint64_t v);
void j_str(const char *key, const char *s);
void j_bool(const char *key, bool v);
void j_print(void);

/* Targets: recorded as they are evaluated, printed as a list at the end. */
void target(const char *what, double value, const char *cmp, double goal, const char *unit);
void targets_report(void);

/* Figures. */
const char *fmt_rate(double per_s);      /* "1.23 M/s" (static buffers, rotating) */
const char *fmt_count(uint64_t n);       /* "1,000,000" */
double median(double *v, int n);

/* ---- in-process baselines (baseline.c) -------------------------------- */

struct il_table;    /* the key inline in a one-line slot: the ceiling */
struct oa_table;    /* procreg's design in private memory */
struct lfht_table;  /* liburcu cds_lfht */

struct il_table *il_build(const struct qname *names, uint64_t n, uint64_t capacity, pid_t pid);
int il_lookup(struct il_table *t, const char *name, struct procreg_entry *out);
size_t il_bytes(const struct il_table *t);
void il_free(struct il_table *t);
struct oa_table *oa_build(const struct qname *names, uint64_t n, uint64_t capacity, pid_t pid);
int oa_lookup(struct oa_table *t, const char *name, struct procreg_entry *out);
size_t oa_bytes(const struct oa_table *t);
void oa_free(struct oa_table *t);

struct lfht_table *lfht_build(const struct qname *names, uint64_t n, pid_t pid);
/* Call in each child that reads, before the first lookup. */
void lfht_reader_init(void);
int lfht_lookup(struct lfht_table *t, const char *name, struct procreg_entry *out);
void lfht_free(struct lfht_table *t);

/* The name hash, the same function procreg uses (lib/layout.h), so that
 * the baselines differ from procreg only in the table. */
uint64_t bench_hash(const char *s, size_t n);

/* ---- subcommands ------------------------------------------------------ */

int cmd_lookup(void);
int cmd_register(void);
int cmd_stress(void);
int cmd_cluster(void);
int cmd_memory(void);
int cmd_probes(void);

#endif
