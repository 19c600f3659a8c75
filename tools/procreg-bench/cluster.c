/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cluster.c - procreg-bench stress --nodes K (or procreg-bench cluster):
 * replication between K procregd on loopback, beside baselines run in the
 * same run.
 *
 * The K daemons get scopes n1..nK in the private directory, one cookie
 * file, free loopback ports and a full mesh (n2..nK name n1 as --peer; the
 * mesh tells them of each other). --no-mesh leaves out --listen and
 * --peer, for a backend that finds its peers itself (--daemon-arg
 * --bridge-backend ...). The mesh counts as formed when every node's table
 * shows a name registered on every node.
 *
 *   delay       a synchronous procreg_register on n1, then a spin on
 *               procreg_lookup in n2's (and nK's) table until the name is
 *               there: register-to-visible, per name, over the samples.
 *               Baselines: a bare TCP loopback round trip (64 bytes, both
 *               ends TCP_NODELAY) and a synchronous registration on an
 *               unbridged daemon.
 *   throughput  N names through procreg_batch by one writer on n1, then by
 *               K writers at once (one on each node, N/K each): from the start
 *               until the last name of every writer is visible on every
 *               node (changes from one node apply in order, so its last
 *               name stands for all of them; every name is then checked
 *               with a lookup, untimed). Baseline: the same writers, the
 *               same poll, on one unbridged daemon. Median of --rounds.
 *
 * The poller sleeps 100 us between polls of the throughput phases: it
 * shares the CPUs with the daemons and must not starve them. The delay
 * spin yields the CPU at every miss for the same reason.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

#define CLUSTER_NODES_MAX 12      /* env.c tracks 16 daemons: K, the baseline, spare */
#define WAIT_NS (60 * 1000000000ull)
#define POLL_US 100
#define QUOTA "1000000000"

struct wctl {
	int go;                       /* futex: the writers start */
	int ready;                    /* writers connected */
	int done;                     /* writers through their batch */
	int failed;
	int64_t registered[CLUSTER_NODES_MAX];
};

static struct wctl *W;

struct writer_arg {
	const char *scope;
	char prefix[8];
	uint64_t first, n;
	int idx;
	bool sync;                    /* one procreg_register per name, not procreg_batch */
};

static struct writer_arg wargs[CLUSTER_NODES_MAX];

/* A writer process: connect, wait for go, register its range with
 * procreg_batch, then hold the names until it is killed (its death takes
 * them away, everywhere). */
static int writer_main(void *arg)
{
	struct writer_arg *a = arg;
	procreg_t *reg = bench_open(a->scope);
	int64_t k;

	if (!reg || procreg_sync(reg) < 0) {
		__atomic_fetch_add(&W->failed, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&W->ready, 1, __ATOMIC_RELEASE);
		return 1;
	}
	__atomic_fetch_add(&W->ready, 1, __ATOMIC_RELEASE);
	futex_wake_all(&W->ready);
	while (!__atomic_load_n(&W->go, __ATOMIC_ACQUIRE))
		futex_wait(&W->go, 0);
	if (a->sync) {
		k = 0;
		for (uint64_t i = a->first; i < a->first + a->n; i++) {
			struct qname q;
			char meta[64];

			name_of(&q, a->prefix, i);
			k += procreg_register(reg, q.s, meta, meta_of(meta, sizeof(meta), i)) == 0;
		}
	} else {
		k = register_range(reg, a->prefix, a->first, a->n, false);
	}
	W->registered[a->idx] = k;
	if (k != (int64_t)a->n)
		__atomic_fetch_add(&W->failed, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&W->done, 1, __ATOMIC_RELEASE);
	for (;;)
		pause();
	return 0;
}

/* ---- the nodes ----------------------------------------------------------- */

struct cnode {
	char name[16];              /* node name and scope */
	char listen[32];
	struct daemon_proc d;
	procreg_t *reg;
};

static struct cnode N[CLUSTER_NODES_MAX];
static int K;
static struct daemon_proc solo;
static procreg_t *solo_reg;

static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static int write_cookie(char *path, size_t len)
{
	uint64_t s = pr_mono_ns() ^ (uint64_t)getpid();
	char text[80];
	int fd;

	snprintf(path, len, "%s/cookie", env_dir());
	snprintf(text, sizeof(text), "bench-%016llx%016llx\n", (unsigned long long)rng_next(&s),
		 (unsigned long long)rng_next(&s));
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		fprintf(stderr, "procreg-bench: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* Whether the log of procregd SCOPE says it could not bind its port. */
static bool port_taken(const char *scope)
{
	char path[1280], buf[8192];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/procregd.%s.log", env_dir(), scope);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return strstr(buf, "cannot listen") != NULL;
}

/* Start node I. A port taken between free_port() and the daemon's bind:
 * another port, a few times. */
static int start_node(int i, const char *cookie)
{
	struct cnode *n = &N[i];
	const char *args[64];
	int err = -1;

	snprintf(n->name, sizeof(n->name), "n%d", i + 1);
	for (int attempt = 0; attempt < 5 && err; attempt++) {
		int k = 0, port = free_port();

		if (port < 0)
			return -1;
		snprintf(n->listen, sizeof(n->listen), "127.0.0.1:%d", port);
		args[k++] = "--node";
		args[k++] = n->name;
		args[k++] = "--cookie-file";
		args[k++] = cookie;
		/* One writer holds every name of a throughput run. */
		args[k++] = "--max-names-per-proc";
		args[k++] = QUOTA;
		args[k++] = "--max-names-per-uid";
		args[k++] = QUOTA;
		if (!bo.no_mesh) {
			args[k++] = "--listen";
			args[k++] = n->listen;
			if (i > 0) {
				args[k++] = "--peer";
				args[k++] = N[0].listen;
			}
		}
		for (int j = 0; j < bo.ndaemon_args && k < 60; j++)
			args[k++] = bo.daemon_args[j];
		args[k] = NULL;
		err = daemon_start(&n->d, n->name, args);
		if (err && (bo.no_mesh || !port_taken(n->name)))
			break;
	}
	if (err)
		return err;
	n->reg = bench_open(n->name);
	return n->reg ? 0 : -1;
}

static bool has_name(procreg_t *reg, const char *name)
{
	return procreg_lookup(reg, name, NULL) == 0;
}

/* Every node shows a name registered on every node: the mesh is formed. */
static int wait_mesh(void)
{
	uint64_t t0 = pr_mono_ns();

	for (int i = 0; i < K; i++) {
		struct qname q;
		int r;

		name_of(&q, "ready", (uint64_t)i);
		if ((r = procreg_register(N[i].reg, q.s, NULL, 0)) < 0) {
			fprintf(stderr, "procreg-bench: register on %s: %s\n", N[i].name,
				procreg_strerror(r));
			return -1;
		}
	}
	for (;;) {
		int seen = 0;

		for (int i = 0; i < K; i++)
			for (int j = 0; j < K; j++) {
				struct qname q;

				name_of(&q, "ready", (uint64_t)j);
				seen += has_name(N[i].reg, q.s);
			}
		if (seen == K * K)
			return 0;
		if (pr_mono_ns() - t0 > WAIT_NS) {
			fprintf(stderr, "procreg-bench: the nodes did not see each other's names "
				"within %llu s (%d of %d)\n", WAIT_NS / 1000000000ull, seen, K * K);
			return -1;
		}
		sleep_ms(1);
	}
}

/* ---- delay ---------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct dist {
	double med, p90, p99, max;    /* us */
};

static struct dist dist_of(uint64_t *v, uint64_t n)
{
	struct dist d = { 0 };

	if (!n)
		return d;
	qsort(v, n, sizeof(*v), cmp_u64);
	d.med = (double)v[n / 2] / 1e3;
	d.p90 = (double)v[n * 90 / 100] / 1e3;
	d.p99 = (double)v[n * 99 / 100] / 1e3;
	d.max = (double)v[n - 1] / 1e3;
	return d;
}

/* Register-to-visible on n2 and nK: per name, the time from the call to
 * the first lookup that finds it there. */
static int measure_delay(uint64_t samples, uint64_t *to2, uint64_t *toK)
{
	for (uint64_t i = 0; i < samples; i++) {
		struct qname q;
		uint64_t t0, t2 = 0, tK = 0;
		int r;

		name_of(&q, "lat", i);
		t0 = pr_mono_ns();
		if ((r = procreg_register(N[0].reg, q.s, NULL, 0)) < 0) {
			fprintf(stderr, "procreg-bench: register on n1: %s\n", procreg_strerror(r));
			return -1;
		}
		while (!t2 || !tK) {
			if (!t2 && has_name(N[1].reg, q.s))
				t2 = pr_mono_ns();
			if (!tK && has_name(N[K - 1].reg, q.s))
				tK = pr_mono_ns();
			if (!t2 || !tK) {
				if (pr_mono_ns() - t0 > WAIT_NS) {
					fprintf(stderr, "procreg-bench: %s never reached %s\n", q.s,
						t2 ? N[K - 1].name : N[1].name);
					return -1;
				}
				sched_yield();
			}
		}
		to2[i] = t2 - t0;
		toK[i] = tK - t0;
	}
	return 0;
}

/* The synchronous registration alone, on the unbridged daemon. */
static int measure_solo_sync(uint64_t samples, uint64_t *v)
{
	for (uint64_t i = 0; i < samples; i++) {
		struct qname q;
		uint64_t t0;
		int r;

		name_of(&q, "lat", i);
		t0 = pr_mono_ns();
		if ((r = procreg_register(solo_reg, q.s, NULL, 0)) < 0) {
			fprintf(stderr, "procreg-bench: register: %s\n", procreg_strerror(r));
			return -1;
		}
		v[i] = pr_mono_ns() - t0;
	}
	return 0;
}

static int tcp_echo_main(void *arg)
{
	int *port = arg, one = 1, c;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char buf[64];

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0) {
		__atomic_store_n(port, -1, __ATOMIC_RELEASE);
		futex_wake_all(port);
		return 1;
	}
	__atomic_store_n(port, ntohs(sa.sin_port), __ATOMIC_RELEASE);
	futex_wake_all(port);
	c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (c < 0)
		return 1;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (;;) {
		size_t got = 0;

		while (got < sizeof(buf)) {
			ssize_t k = recv(c, buf + got, sizeof(buf) - got, 0);

			if (k <= 0)
				return 0;
			got += (size_t)k;
		}
		if (send(c, buf, sizeof(buf), MSG_NOSIGNAL) != (ssize_t)sizeof(buf))
			return 0;
	}
}

/* A bare TCP loopback round trip: the least a change can cost between two
 * daemons is half of it. */
static int measure_tcp_rtt(uint64_t samples, uint64_t *v)
{
	int *port = shared_alloc(sizeof(int)), one = 1, fd = -1, rc = -1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char buf[64] = { 0 };
	pid_t pid = spawn(tcp_echo_main, port, -1);

	if (pid < 0)
		goto out;
	while (__atomic_load_n(port, __ATOMIC_ACQUIRE) == 0)
		futex_wait_ms(port, 0, 100);
	if (*port < 0)
		goto out;
	sa.sin_port = htons((uint16_t)*port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (uint64_t i = 0; i < samples; i++) {
		uint64_t t0 = pr_mono_ns();
		size_t got = 0;

		if (send(fd, buf, sizeof(buf), MSG_NOSIGNAL) != (ssize_t)sizeof(buf))
			goto out;
		while (got < sizeof(buf)) {
			ssize_t k = recv(fd, buf + got, sizeof(buf) - got, 0);

			if (k <= 0)
				goto out;
			got += (size_t)k;
		}
		v[i] = pr_mono_ns() - t0;
	}
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "procreg-bench: TCP loopback baseline: %s\n", strerror(errno));
	if (fd >= 0)
		close(fd);
	if (pid > 0) {
		kill_child(pid);
		reap(pid);
	}
	shared_free(port, sizeof(int));
	return rc;
}

/* ---- throughput ---------------------------------------------------------- */

static uint64_t names_in(procreg_t *reg)
{
	PROCREG_OPTS(procreg_stats, st);

	procreg_stats(reg, &st);
	return st.names;
}

/* NW writers, writer w on scope SCOPES[w], names PREFIX.first.. : from go
 * until the last name of every writer is visible in every table of READERS.
 * Then every name is looked up in every table (untimed): *VISIBLE is the
 * fewest any table showed. Returns names/s, or a negative number. */
static double measure_writers(const char *const *scopes, int nw, procreg_t *const *readers,
			      int nr, const char *prefix, uint64_t total, bool sync, uint64_t *visible)
{
	pid_t pids[CLUSTER_NODES_MAX];
	uint64_t base[CLUSTER_NODES_MAX], t0, t = 0;
	struct qname last[CLUSTER_NODES_MAX];
	double rate = -1;
	int started = 0;

	memset(W, 0, sizeof(*W));
	for (int r = 0; r < nr; r++)
		base[r] = names_in(readers[r]);
	for (int w = 0; w < nw; w++) {
		struct writer_arg *a = &wargs[w];
		uint64_t per = total / (uint64_t)nw;

		a->scope = scopes[w];
		snprintf(a->prefix, sizeof(a->prefix), "%s", prefix);
		a->first = per * (uint64_t)w;
		a->n = w == nw - 1 ? total - a->first : per;
		a->idx = w;
		a->sync = sync;
		name_of(&last[w], prefix, a->first + a->n - 1);
		pids[w] = spawn(writer_main, a, -1);
		if (pids[w] < 0)
			goto out;
		started++;
	}
	for (int v; (v = __atomic_load_n(&W->ready, __ATOMIC_ACQUIRE)) < nw;)
		futex_wait_ms(&W->ready, v, 100);
	if (W->failed) {
		fprintf(stderr, "procreg-bench: a writer could not connect\n");
		goto out;
	}
	t0 = pr_mono_ns();
	__atomic_store_n(&W->go, 1, __ATOMIC_RELEASE);
	futex_wake_all(&W->go);
	for (;;) {
		int seen = 0;

		for (int r = 0; r < nr; r++)
			for (int w = 0; w < nw; w++)
				seen += has_name(readers[r], last[w].s);
		t = pr_mono_ns();
		if (seen == nr * nw)
			break;
		if (t - t0 > WAIT_NS || __atomic_load_n(&W->failed, __ATOMIC_ACQUIRE)) {
			fprintf(stderr, "procreg-bench: %s names not visible everywhere (%d of %d "
				"last names seen; %d writers failed)\n", prefix, seen, nr * nw,
				W->failed);
			goto out;
		}
		usleep(POLL_US);
	}
	rate = (double)total * 1e9 / (double)(t - t0);
	while (__atomic_load_n(&W->done, __ATOMIC_ACQUIRE) < nw)
		sleep_ms(1);
	*visible = UINT64_MAX;
	for (int r = 0; r < nr; r++) {
		uint64_t found = 0;

		for (int w = 0; w < nw; w++)
			for (uint64_t i = wargs[w].first; i < wargs[w].first + wargs[w].n; i++) {
				struct qname q;

				name_of(&q, prefix, i);
				found += has_name(readers[r], q.s);
			}
		if (found < *visible)
			*visible = found;
	}
out:
	/* The writers' deaths take their names away on every node: wait for
	 * that, so that every measurement starts from the same tables. */
	for (int w = 0; w < started; w++)
		kill_child(pids[w]);
	for (int w = 0; w < started; w++)
		reap(pids[w]);
	for (int r = 0; r < nr; r++) {
		uint64_t tw = pr_mono_ns();

		while (names_in(readers[r]) > base[r] && pr_mono_ns() - tw < WAIT_NS)
			sleep_ms(1);
	}
	return rate;
}

/* ---- the subcommand -------------------------------------------------------- */

/* The throughput runs: who writes, and how. */
static const struct shape {
	const char *key;
	const char *prefix;
	bool all;                     /* a writer on each node, else one on n1 */
	bool sync;                    /* one procreg_register a name */
} shapes[] = {
	{ "one_writer", "o", false, false },
	{ "all_writers", "a", true, false },
	{ "one_writer_sync", "p", false, true },
	{ "all_writers_sync", "b", true, true },
};
#define NSHAPES ((int)(sizeof(shapes) / sizeof(shapes[0])))

static void dist_row(const char *what, const struct dist *d)
{
	hprintf("  %-46s %9.1f %9.1f %9.1f %9.1f\n", what, d->med, d->p90, d->p99, d->max);
}

static void j_dist(const char *key, const struct dist *d)
{
	j_obj(key);
	j_num("median", d->med);
	j_num("p90", d->p90);
	j_num("p99", d->p99);
	j_num("max", d->max);
	j_end();
}

int cmd_cluster(void)
{
	uint64_t names = bo.stress_names ? bo.stress_names : (bo.quick ? 2000 : 100000);
	uint64_t samples = names < (bo.quick ? 200u : 1000u) ? names : (bo.quick ? 200 : 1000);
	uint64_t *to2 = calloc(samples, sizeof(uint64_t)), *toK = calloc(samples, sizeof(uint64_t));
	uint64_t *rtt = calloc(samples, sizeof(uint64_t)), *sync1 = calloc(samples, sizeof(uint64_t));
	uint64_t names_sync = names < (bo.quick ? 2000u : 20000u) ? names : (bo.quick ? 2000 : 20000);
	uint64_t t_start = pr_mono_ns(), t0, vis_short = 0;
	double rate[NSHAPES][64], solo_rate[NSHAPES][64], med[NSHAPES], solo_med[NSHAPES], mesh_ms;
	struct dist d2, dK, drtt, dsync;
	char cookie[512], label[96];
	const char *node_scopes[CLUSTER_NODES_MAX], *solo_scopes[CLUSTER_NODES_MAX];
	procreg_t *readers[CLUSTER_NODES_MAX];
	int rc = 2;

	K = bo.nodes ? bo.nodes : 3;
	if (K < 2 || K > CLUSTER_NODES_MAX) {
		fprintf(stderr, "procreg-bench: --nodes %d: want 2..%d\n", K, CLUSTER_NODES_MAX);
		return 2;
	}
	W = shared_alloc(sizeof(*W));
	if (!to2 || !toK || !rtt || !sync1 || write_cookie(cookie, sizeof(cookie)) < 0)
		goto out;
	if (daemon_start(&solo, "solo", (const char *const[]){ "--max-names-per-proc", QUOTA,
				  "--max-names-per-uid", QUOTA, NULL }) < 0 ||
	    !(solo_reg = bench_open("solo")))
		goto out;
	t0 = pr_mono_ns();
	for (int i = 0; i < K; i++)
		if (start_node(i, cookie) < 0) {
			fprintf(stderr, "procreg-bench: cannot start node %d\n", i + 1);
			goto failed;
		}
	if (wait_mesh() < 0)
		goto failed;
	mesh_ms = (double)(pr_mono_ns() - t0) / 1e6;
	hprintf("procreg-bench stress --nodes %d: %d procregd on loopback (%s), %s names, %s delay "
		"samples, %d rounds, %d CPUs, unpinned\n", K, K,
		bo.no_mesh ? "no --listen/--peer" : "TCP full mesh", fmt_count(names),
		fmt_count(samples), bo.rounds, ncpus);
	hprintf("daemons started and every node seeing every other after %.1f ms\n", mesh_ms);

	/* Delay and its baselines, side by side. */
	if (measure_tcp_rtt(samples, rtt) < 0 || measure_solo_sync(samples, sync1) < 0 ||
	    measure_delay(samples, to2, toK) < 0)
		goto failed;
	d2 = dist_of(to2, samples);
	dK = dist_of(toK, samples);
	drtt = dist_of(rtt, samples);
	dsync = dist_of(sync1, samples);
	hprintf("\nregister-to-visible: synchronous procreg_register on n1, then a lookup spin\n");
	hprintf("  %-46s %9s %9s %9s %9s\n", "(us)", "median", "p90", "p99", "max");
	dist_row("n1 -> n2", &d2);
	if (K > 2) {
		snprintf(label, sizeof(label), "n1 -> n%d", K);
		dist_row(label, &dK);
	}
	dist_row("baseline: TCP loopback round trip, 64 bytes", &drtt);
	dist_row("baseline: sync register, unbridged daemon", &dsync);
	hprintf("  median n1 -> n2 / TCP round trip: %.2fx; / unbridged sync register: %.2fx\n",
		d2.med / drtt.med, d2.med / dsync.med);

	/* Throughput: cluster and unbridged daemon alternate, round by round. */
	for (int i = 0; i < K; i++) {
		node_scopes[i] = N[i].name;
		solo_scopes[i] = "solo";
		readers[i] = N[i].reg;
	}
	for (int r = 0; r < bo.rounds; r++) {
		for (int k = 0; k < NSHAPES; k++) {
			const struct shape *sh = &shapes[k];
			int nw = sh->all ? K : 1;
			uint64_t n = sh->sync ? names_sync : names, v;

			solo_rate[k][r] = measure_writers(solo_scopes, nw, &solo_reg, 1, "s", n, sh->sync, &v);
			rate[k][r] = measure_writers(node_scopes, nw, readers, K, sh->prefix, n, sh->sync, &v);
			if (solo_rate[k][r] < 0 || rate[k][r] < 0)
				goto failed;
			if (v < n)
				vis_short += n - v;
		}
	}
	hprintf("\nthroughput: names registered until visible on every node (median of %d)\n",
		bo.rounds);
	hprintf("  %-32s %12s %22s %8s\n", "writers, calls: names", "cluster", "one unbridged daemon", "ratio");
	for (int k = 0; k < NSHAPES; k++) {
		const struct shape *sh = &shapes[k];

		snprintf(label, sizeof(label), "%s, %s: %s", sh->all ? "1 on each node" : "1 on n1",
			 sh->sync ? "register" : "batch", fmt_count(sh->sync ? names_sync : names));
		med[k] = median(rate[k], bo.rounds);
		solo_med[k] = median(solo_rate[k], bo.rounds);
		hprintf("  %-32s %12s %22s %7.2fx\n", label, fmt_rate(med[k]), fmt_rate(solo_med[k]),
			med[k] / solo_med[k]);
	}
	hprintf("  (batch: procreg_batch; register: one procreg_register a name; unbridged: the\n"
		"  same writers on one daemon, the same poll of its table)\n");
	hprintf("names not found by lookup on some node after a run: %s\n", fmt_count(vis_short));

	j_str("subcommand", "stress");
	j_int("nodes", (uint64_t)K);
	j_bool("mesh", !bo.no_mesh);
	j_int("names", names);
	j_int("delay_samples", samples);
	j_int("rounds", (uint64_t)bo.rounds);
	j_int("ncpus", (uint64_t)ncpus);
	j_num("mesh_formed_ms", mesh_ms);
	j_dist("delay_us_n2", &d2);
	j_dist("delay_us_nK", &dK);
	j_dist("tcp_rtt_us", &drtt);
	j_dist("solo_sync_register_us", &dsync);
	j_num("delay_to_tcp_rtt", d2.med / drtt.med);
	j_num("delay_to_solo_sync", d2.med / dsync.med);
	for (int k = 0; k < NSHAPES; k++) {
		char key[64];

		snprintf(key, sizeof(key), "%s_per_s", shapes[k].key);
		j_num(key, med[k]);
		snprintf(key, sizeof(key), "solo_%s_per_s", shapes[k].key);
		j_num(key, solo_med[k]);
		snprintf(key, sizeof(key), "%s_ratio", shapes[k].key);
		j_num(key, med[k] / solo_med[k]);
	}
	j_int("names_sync", names_sync);
	j_int("not_visible", vis_short);
	hprintf("\ntotal %.1f s\n", (double)(pr_mono_ns() - t_start) / 1e9);
	j_num("seconds", (double)(pr_mono_ns() - t_start) / 1e9);
	rc = 0;
	goto out;
failed:
	fprintf(stderr, "procreg-bench: stress --nodes %d failed\n", K);
	for (int i = 0; i < K; i++)
		if (N[i].d.pid)
			daemon_dump_log(&N[i].d);
out:
	for (int i = 0; i < K; i++) {
		if (N[i].reg)
			procreg_close(N[i].reg);
		N[i].reg = NULL;
		daemon_stop(&N[i].d);
	}
	if (solo_reg)
		procreg_close(solo_reg);
	daemon_stop(&solo);
	shared_free(W, sizeof(*W));
	free(to2);
	free(toK);
	free(rtt);
	free(sync1);
	return rc;
}
