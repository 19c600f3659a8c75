/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * register.c - procreg-bench register
 *
 * Registrations through procregd, synchronous (procreg_register, one
 * round trip each, then procreg_unregister) and pipelined (procreg_batch),
 * from 1 and N client processes, beside a bare unix-socket round trip
 * measured in the same run and the same arrangement.
 *
 * THE BASELINE. An echo server shaped like procregd's loop minus the
 * table (echo.c), answering each request with a 16-byte reply frame. The
 * client sends a packet of the size of a REGISTER frame for our names
 * (header, name, metadata) and blocks in recv for the reply, as
 * procreg_register does. So
 * ratio_vs_socket_rtt is what the daemon's work (and the library's
 * encoding) costs on top of the transport they must use anyway.
 *
 * ARRANGEMENTS. Waking a process on another CPU costs far more than on
 * the same one, so server (procregd or the echo server) and client are
 * pinned, and each arrangement is measured for both: "same-cpu" (client
 * and server on the first CPU), "cross-cpu" (client on the first, server
 * on the second), and N clients on CPUs round-robin with the server on
 * the last CPU. A figure is the median of --rounds measurements.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bench.h"

#define MAX_CLIENTS 256
#define WARM_OPS 200

enum mode { M_ECHO, M_SYNC, M_BATCH, NMODES };

struct client_res {
	int ready;                 /* 1 ready, -1 failed */
	int err;
	uint64_t t0, t1, t2;       /* start, registrations done, removals done */
	uint64_t ok1, ok2;         /* ops that succeeded in each part */
	uint64_t d0, d1;           /* pipelined: procregd's CPU time at t0 and t1 */
};

/* A line each: clients never share one. */
_Static_assert(sizeof(struct client_res) == 64, "a client's results fill one cache line");

struct rctl {
	int go;
	uint8_t pad[60];
	struct client_res c[MAX_CLIENTS];
};

static struct rctl *C;
static procreg_t *prefill_reg;
static char echo_path[100];
static enum mode cur_mode;
static uint64_t cur_ops;
static size_t req_size;
static pid_t daemon_pid;

/* ---- the echo baseline (echo.c) ---------------------------------------- */

static int echo_rtt(int fd, uint8_t *req, uint32_t id)
{
	uint8_t reply[64];

	memcpy(req + 8, &id, 4);
	if (send(fd, req, req_size, MSG_NOSIGNAL) != (ssize_t)req_size)
		return -1;
	return recv(fd, reply, sizeof(reply), 0) == 16 ? 0 : -1;
}

/* ---- a client ------------------------------------------------------------ */

static void wait_go(void)
{
	while (!__atomic_load_n(&C->go, __ATOMIC_ACQUIRE))
		futex_wait(&C->go, 0);
}

static int client_main(void *arg)
{
	int id = (int)(intptr_t)arg;
	struct client_res *r = &C->c[id];
	char prefix[8], meta[64];
	size_t ml = meta_of(meta, sizeof(meta), 0);
	procreg_t *reg = NULL;
	uint64_t n = cur_ops;

	snprintf(prefix, sizeof(prefix), "r%d", id);
	if (cur_mode == M_ECHO) {
		uint8_t req[128] = { 2, 0 };
		int fd = echo_connect(echo_path);

		if (fd < 0)
			goto fail;
		req[4] = (uint8_t)req_size;
		for (int i = 0; i < WARM_OPS; i++)
			if (echo_rtt(fd, req, (uint32_t)i) < 0)
				goto fail;
		__atomic_store_n(&r->ready, 1, __ATOMIC_RELEASE);
		wait_go();
		r->t0 = pr_mono_ns();
		for (uint64_t i = 0; i < n; i++)
			r->ok1 += echo_rtt(fd, req, (uint32_t)i) == 0;
		r->t1 = r->t2 = pr_mono_ns();
		r->ok2 = r->ok1;
		close(fd);
		return 0;
	}

	reg = bench_open(BENCH_SCOPE);
	if (!reg || procreg_sync(reg) < 0)
		goto fail;
	/* Warm the connection and the daemon's paths. */
	for (int i = 0; i < WARM_OPS; i++) {
		struct qname q;

		name_of(&q, "warm", (uint64_t)id * WARM_OPS + (uint64_t)i);
		if (procreg_register(reg, q.s, meta, ml) || procreg_unregister(reg, q.s))
			goto fail;
	}
	if (cur_mode == M_SYNC) {
		struct prepared p;

		/* Names and metadata formatted before the clock starts. */
		if (prepare(&p, prefix, 0, (size_t)n) < 0)
			goto fail;
		__atomic_store_n(&r->ready, 1, __ATOMIC_RELEASE);
		wait_go();
		r->t0 = pr_mono_ns();
		for (uint64_t i = 0; i < n; i++)
			r->ok1 += procreg_register(reg, p.names[i].s, p.metas[i], p.meta_lens[i]) == 0;
		r->t1 = pr_mono_ns();
		for (uint64_t i = 0; i < n; i++)
			r->ok2 += procreg_unregister(reg, p.names[i].s) == 0;
		r->t2 = pr_mono_ns();
		prepared_free(&p);
	} else {
		struct prepared p;
		struct procreg_op *ops;

		if (prepare(&p, prefix, 0, (size_t)n) < 0)
			goto fail;
		ops = p.ops;
		for (uint64_t i = 0; i < n; i++) {
			ops[i].kind = PROCREG_OP_REGISTER;
			ops[i].meta_len = p.meta_lens[i];
		}
		__atomic_store_n(&r->ready, 1, __ATOMIC_RELEASE);
		wait_go();
		r->d0 = proc_cpu_ns(daemon_pid);
		r->t0 = pr_mono_ns();
		if (procreg_batch(reg, ops, n) < 0)
			goto fail;
		r->t1 = pr_mono_ns();
		r->d1 = proc_cpu_ns(daemon_pid);
		for (uint64_t i = 0; i < n; i++) {
			r->ok1 += ops[i].result == 0;
			ops[i].kind = PROCREG_OP_UNREGISTER;
			ops[i].meta_len = 0;
		}
		{
			/* The loop above is not timed. */
			uint64_t t = pr_mono_ns();

			if (procreg_batch(reg, ops, n) < 0)
				goto fail;
			r->t2 = r->t1 + (pr_mono_ns() - t);
		}
		for (uint64_t i = 0; i < n; i++)
			r->ok2 += ops[i].result == 0;
		prepared_free(&p);
	}
	procreg_close(reg);
	return 0;
fail:
	r->err = errno ? errno : EIO;
	__atomic_store_n(&r->ready, -1, __ATOMIC_RELEASE);
	return 1;
}

/* ---- one measurement ------------------------------------------------------ */

struct rfig {
	double rate1, rate2;       /* registrations/s (or round trips/s), removals/s */
	double daemon_ns;          /* pipelined: procregd's CPU time a registration */
	uint64_t ok1, ok2;
};

static int measure(enum mode m, int nclients, const int *ccpu, uint64_t ops, struct rfig *f)
{
	pid_t pids[MAX_CLIENTS];
	uint64_t t0 = UINT64_MAX, t1 = 0, t1min = UINT64_MAX, t2 = 0, d0 = UINT64_MAX, d1 = 0;
	int err = 0;

	memset(C, 0, sizeof(*C));
	memset(f, 0, sizeof(*f));
	cur_mode = m;
	cur_ops = ops;
	for (int i = 0; i < nclients; i++)
		pids[i] = spawn(client_main, (void *)(intptr_t)i, ccpu[i]);
	for (int i = 0; i < nclients; i++) {
		int v = 0;

		if (pids[i] < 0) {
			err = -1;
			continue;
		}
		for (int k = 0; k < 300000 && !(v = __atomic_load_n(&C->c[i].ready, __ATOMIC_ACQUIRE)); k++)
			usleep(100);
		if (v <= 0) {
			fprintf(stderr, "procreg-bench: client %d failed: %s\n", i, strerror(C->c[i].err));
			err = -1;
		}
	}
	if (!err)
		sleep_ms(5);
	__atomic_store_n(&C->go, 1, __ATOMIC_RELEASE);
	futex_wake_all(&C->go);
	for (int i = 0; i < nclients; i++)
		if (pids[i] > 0 && reap(pids[i]) != 0)
			err = -1;
	if (err)
		return -1;
	for (int i = 0; i < nclients; i++) {
		struct client_res *r = &C->c[i];

		if (r->t0 < t0)
			t0 = r->t0;
		if (r->t1 > t1)
			t1 = r->t1;
		if (r->t1 < t1min)
			t1min = r->t1;
		if (r->t2 > t2)
			t2 = r->t2;
		if (r->d0 < d0)
			d0 = r->d0;
		if (r->d1 > d1)
			d1 = r->d1;
		f->ok1 += r->ok1;
		f->ok2 += r->ok2;
	}
	/* All clients together: ops over the span from the first start to the
	 * last finish; removals from the first client's start of them. */
	f->rate1 = (double)(ops * (uint64_t)nclients) * 1e9 / (double)(t1 - t0);
	f->rate2 = t2 > t1min ? (double)(ops * (uint64_t)nclients) * 1e9 / (double)(t2 - t1min) : 0;
	/* The daemon's CPU time over the same span: what a registration
	 * costs it, with no idle time and no client in the figure. */
	if (m == M_BATCH && d0 && d1 > d0)
		f->daemon_ns = (double)(d1 - d0) / (double)(ops * (uint64_t)nclients);
	return 0;
}

/* ---- the subcommand ---------------------------------------------------------- */

struct arrangement {
	const char *name;
	int nclients;
	int ccpu[MAX_CLIENTS];
	int scpu;
	double r[NMODES][2][64];
	double dns[64];            /* pipelined: procregd's CPU ns a registration */
	uint64_t ok[NMODES][2];
	double med[NMODES][2];
	double med_dns;
};

/* The arrangements in AR: one client on the server's CPU, one on
 * another, NCLIENTS spread over the CPUs. How many. */
static int arrangements(struct arrangement *ar, int nclients)
{
	int nar = 0;

	memset(ar, 0, 3 * sizeof(*ar));
	ar[nar].name = "same-cpu";
	ar[nar].nclients = 1;
	ar[nar].ccpu[0] = cpus[0];
	ar[nar++].scpu = cpus[0];
	if (ncpus > 1) {
		ar[nar].name = "cross-cpu";
		ar[nar].nclients = 1;
		ar[nar].ccpu[0] = cpus[0];
		ar[nar++].scpu = cpus[1];
	}
	if (nclients > 1) {
		ar[nar].name = "N clients";
		ar[nar].nclients = nclients;
		for (int i = 0; i < nclients; i++)
			ar[nar].ccpu[i] = cpus[i % ncpus];
		ar[nar++].scpu = cpus[ncpus - 1];
	}
	return nar;
}

/* Every mode, --rounds times, for arrangement A, with procregd (DAEMON)
 * and the echo server (ECHO) on its server CPU: the medians in A. */
static int measure_arrangement(struct arrangement *A, pid_t daemon, pid_t echo,
			       uint64_t sync_ops, uint64_t batch_ops)
{
	pin(daemon, A->scpu);
	pin(echo, A->scpu);
	for (int round = 0; round < bo.rounds; round++) {
		for (int k = 0; k < NMODES; k++) {
			enum mode m = (enum mode)((k + round) % NMODES);
			struct rfig f;

			if (measure(m, A->nclients, A->ccpu, m == M_BATCH ? batch_ops : sync_ops,
				    &f) < 0)
				return -1;
			A->r[m][0][round] = f.rate1;
			A->r[m][1][round] = f.rate2;
			if (m == M_BATCH)
				A->dns[round] = f.daemon_ns;
			A->ok[m][0] += f.ok1;
			A->ok[m][1] += f.ok2;
		}
	}
	for (int m = 0; m < NMODES; m++)
		for (int p = 0; p < 2; p++)
			A->med[m][p] = median(A->r[m][p], bo.rounds);
	A->med_dns = median(A->dns, bo.rounds);
	return 0;
}

/* Arrangement A's row of the report, its JSON object and its targets. */
static void report_arrangement(const struct arrangement *A, uint64_t sync_ops, uint64_t batch_ops)
{
	char cc[64] = "";
	size_t o = 0;
	double ratio = A->med[M_SYNC][0] / A->med[M_ECHO][0];
	char what[160];

	for (int i = 0; i < A->nclients && o < 56; i++)
		o += (size_t)snprintf(cc + o, sizeof(cc) - o, "%s%d", i ? "," : "", A->ccpu[i]);
	hprintf("%-10s %-8d %-7s %-7d %12s %12s %10.2fx %12s %12s %12s %9.0f ns\n", A->name,
		A->nclients, cc, A->scpu, fmt_rate(A->med[M_ECHO][0]),
		fmt_rate(A->med[M_SYNC][0]), ratio, fmt_rate(A->med[M_SYNC][1]),
		fmt_rate(A->med[M_BATCH][0]), fmt_rate(A->med[M_BATCH][1]), A->med_dns);
	j_obj(NULL);
	j_str("arrangement", A->name);
	j_int("clients", (uint64_t)A->nclients);
	j_str("client_cpus", cc);
	j_str("server_cpu", cpu_label(A->scpu));
	j_num("socket_rtt_per_s", A->med[M_ECHO][0]);
	j_num("socket_rtt_us", 1e6 / A->med[M_ECHO][0] * A->nclients);
	j_num("sync_reg_per_s", A->med[M_SYNC][0]);
	j_num("sync_reg_us", 1e6 / A->med[M_SYNC][0] * A->nclients);
	j_num("sync_unreg_per_s", A->med[M_SYNC][1]);
	j_num("ratio_vs_socket_rtt", ratio);
	j_num("pipelined_reg_per_s", A->med[M_BATCH][0]);
	j_num("pipelined_unreg_per_s", A->med[M_BATCH][1]);
	j_num("pipelined_daemon_cpu_ns", A->med_dns);
	j_int("round_trips", A->ok[M_ECHO][0]);
	j_int("sync_registered", A->ok[M_SYNC][0]);
	j_int("sync_unregistered", A->ok[M_SYNC][1]);
	j_int("pipelined_registered", A->ok[M_BATCH][0]);
	j_int("pipelined_unregistered", A->ok[M_BATCH][1]);
	j_int("expected_sync", sync_ops * (uint64_t)A->nclients * (uint64_t)bo.rounds);
	j_int("expected_pipelined", batch_ops * (uint64_t)A->nclients * (uint64_t)bo.rounds);
	j_end();
	/* The targets: a synchronous registration within 0.9x of a same-CPU
	 * socket round trip (the other arrangements are reported beside);
	 * pipelined, 3 M/s into an empty table and 2.5 M/s into one of a
	 * million names (--prefill). */
	if (!strcmp(A->name, "same-cpu")) {
		snprintf(what, sizeof(what), "sync registration, %s (%d client%s): vs socket RTT",
			 A->name, A->nclients, A->nclients == 1 ? "" : "s");
		target(what, ratio, ">=", 0.9, "x");
	}
	snprintf(what, sizeof(what), "pipelined registration, %s (%d client%s)%s%s", A->name,
		 A->nclients, A->nclients == 1 ? "" : "s", bo.prefill ? ", table of " : "",
		 bo.prefill ? fmt_count(bo.prefill) : "");
	target(what, A->med[M_BATCH][0] / 1e6, ">=", bo.prefill >= 1000000 ? 2.5 : 3.0, " M/s");
}

int cmd_register(void)
{
	struct arrangement ar[3];
	struct daemon_proc d;
	char maxn[32], maxc[32];
	const char *args[] = { "--max-names-per-proc", maxn, "--max-clients", maxc, NULL };
	uint64_t sync_ops = bo.sync_ops ? bo.sync_ops : (bo.quick ? 300 : 10000);
	uint64_t batch_ops = bo.batch_ops ? bo.batch_ops : (bo.quick ? 5000 : 200000);
	int nclients = bo.clients ? bo.clients : ncpus, nar, rc = 2;
	uint64_t t_start = pr_mono_ns();
	pid_t echo = -1;

	if (nclients > MAX_CLIENTS)
		nclients = MAX_CLIENTS;
	nar = arrangements(ar, nclients);
	{
		char name_s[16], meta[64];
		struct qname q;

		name_of(&q, "r0", 0);
		snprintf(name_s, sizeof(name_s), "%s", q.s);
		req_size = echo_frame_size(strlen(name_s), meta_of(meta, sizeof(meta), 0));
	}
	snprintf(maxn, sizeof(maxn), "%llu",
		 (unsigned long long)(batch_ops + sync_ops + bo.prefill + 1024));
	snprintf(maxc, sizeof(maxc), "%d", nclients + 64);
	snprintf(echo_path, sizeof(echo_path), "%s/echo.sock", env_dir());
	C = shared_alloc(sizeof(*C));
	if (daemon_start(&d, BENCH_SCOPE, args) < 0)
		return 2;
	daemon_pid = d.pid;
	if ((echo = echo_start(echo_path)) < 0)
		goto out;
	if (bo.prefill) {
		/* The table the registrations go into: --prefill names held by
		 * this process for the whole run. */
		uint64_t t0 = pr_mono_ns();

		prefill_reg = bench_open(BENCH_SCOPE);
		if (!prefill_reg ||
		    register_range(prefill_reg, "pf", 0, bo.prefill, false) != (int64_t)bo.prefill) {
			fprintf(stderr, "procreg-bench: cannot register the %llu names of --prefill\n",
				(unsigned long long)bo.prefill);
			goto out;
		}
		hprintf("table prefilled with %s names in %.0f ms\n", fmt_count(bo.prefill),
			(double)(pr_mono_ns() - t0) / 1e6);
	}

	hprintf("procreg-bench register: %d CPUs (%s); %s synchronous and %s pipelined "
		"registrations per client; %d round%s (median)\n", ncpus,
		ncpus > 1 ? "client/server pinned per arrangement" : "one CPU",
		fmt_count(sync_ops), fmt_count(batch_ops), bo.rounds, bo.rounds == 1 ? "" : "s");
	hprintf("baseline: unix SOCK_SEQPACKET round trip of a %zu-byte request and a 16-byte "
		"reply through an epoll echo server shaped like procregd's loop\n", req_size);
	for (int a = 0; a < nar; a++)
		if (measure_arrangement(&ar[a], d.pid, echo, sync_ops, batch_ops) < 0)
			goto out;

	hprintf("\n%-10s %-8s %-7s %-7s %12s %12s %11s %12s %12s %12s %12s\n", "", "clients",
		"client", "server", "socket RTT", "sync reg", "sync reg", "sync unreg",
		"pipelined", "pipelined", "procregd CPU");
	hprintf("%-10s %-8s %-7s %-7s %12s %12s %11s %12s %12s %12s %12s\n", "arrangement", "",
		"cpus", "cpu", "round trips", "/s", "vs RTT", "/s", "reg/s", "unreg/s", "a pipelined reg");
	j_str("subcommand", "register");
	j_int("ncpus", (uint64_t)ncpus);
	j_int("sync_ops_per_client", sync_ops);
	j_int("batch_ops_per_client", batch_ops);
	j_int("rounds", (uint64_t)bo.rounds);
	j_int("prefill", bo.prefill);
	j_int("request_bytes", req_size);
	j_arr("runs");
	for (int a = 0; a < nar; a++)
		report_arrangement(&ar[a], sync_ops, batch_ops);
	j_end();
	targets_report();
	hprintf("\ntotal %.1f s\n", (double)(pr_mono_ns() - t_start) / 1e9);
	j_num("seconds", (double)(pr_mono_ns() - t_start) / 1e9);
	rc = 0;
out:
	if (prefill_reg)
		procreg_close(prefill_reg);
	if (echo > 0) {
		kill_child(echo);
		reap(echo);
	}
	daemon_stop(&d);
	shared_free(C, sizeof(*C));
	return rc;
}
