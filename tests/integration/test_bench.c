/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_bench.c - procreg-bench in quick mode: every subcommand runs once,
 * prints one well-formed JSON object, did the work it measures (counts,
 * not speed), and leaves nothing behind: no file in the directory it was
 * given (--tmpdir), no process. Also stopped by SIGINT mid-run.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* ---- a JSON checker: well-formedness, by recursive descent ------------- */

static const char *ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

static const char *value(const char *p, int depth);
static const char *container(const char *p, int depth, char close, bool keys);

static const char *string(const char *p)
{
	if (*p++ != '"')
		return NULL;
	while (*p && *p != '"') {
		if ((unsigned char)*p < 0x20)
			return NULL;
		if (*p == '\\') {
			p++;
			if (*p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (!isxdigit((unsigned char)p[i]))
						return NULL;
				p += 4;
			} else if (!strchr("\"\\/bfnrt", *p) || !*p) {
				return NULL;
			}
		}
		p++;
	}
	return *p == '"' ? p + 1 : NULL;
}

static const char *number(const char *p)
{
	const char *s = p;

	if (*p == '-')
		p++;
	if (!isdigit((unsigned char)*p))
		return NULL;
	if (*p == '0')
		p++;
	else
		while (isdigit((unsigned char)*p))
			p++;
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return NULL;
		while (isdigit((unsigned char)*p))
			p++;
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!isdigit((unsigned char)*p))
			return NULL;
		while (isdigit((unsigned char)*p))
			p++;
	}
	return p > s ? p : NULL;
}

static const char *container(const char *p, int depth, char close, bool keys)
{
	p = ws(p + 1);
	if (*p == close)
		return p + 1;
	for (;;) {
		if (keys) {
			p = string(ws(p));
			if (!p)
				return NULL;
			p = ws(p);
			if (*p++ != ':')
				return NULL;
		}
		p = value(p, depth + 1);
		if (!p)
			return NULL;
		p = ws(p);
		if (*p == close)
			return p + 1;
		if (*p++ != ',')
			return NULL;
	}
}

static const char *value(const char *p, int depth)
{
	if (depth > 32)
		return NULL;
	p = ws(p);
	switch (*p) {
	case '{': return container(p, depth, '}', true);
	case '[': return container(p, depth, ']', false);
	case '"': return string(p);
	case 't': return strncmp(p, "true", 4) ? NULL : p + 4;
	case 'f': return strncmp(p, "false", 5) ? NULL : p + 5;
	case 'n': return strncmp(p, "null", 4) ? NULL : p + 4;
	default: return number(p);
	}
}

/* One JSON object and nothing else. */
static bool well_formed(const char *s)
{
	const char *e;

	if (*ws(s) != '{')
		return false;
	e = value(s, 0);
	return e && !*ws(e);
}

/* The number after the first "KEY": at or after FROM; -1 if absent. */
static double num_after(const char *from, const char *key)
{
	char pat[128];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(from, pat);
	return p ? strtod(p + strlen(pat), NULL) : -1;
}

static double num(const char *json, const char *key)
{
	return num_after(json, key);
}

/* Every figure KEYS names (up to a NULL) is in JSON and above zero; a
 * failure names the figure. */
static void all_positive(const char *json, const char *const *keys)
{
	for (; *keys; keys++) {
		double v = num(json, *keys);

		if (!(v > 0))
			fail_msg("%s is %g, not above zero", *keys, v);
	}
}

static bool has(const char *json, const char *key)
{
	char pat[128];

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	return strstr(json, pat) != NULL;
}

/* ---- running the bench -------------------------------------------------- */

struct run {
	char *dir;                 /* --tmpdir */
	char *out;                 /* its stdout */
	int status;                /* exit status, or 128 + signal */
};

/* Run procreg-bench ARGS... --tmpdir DIR --quick --json; if SIGINT_MS > 0,
 * send SIGINT after that long. */
static void bench(struct run *r, int sigint_ms, const char *const *args)
{
	const char *argv[32];
	size_t len = 0, cap = 1 << 16;
	int n = 0, p[2];
	pid_t pid;

	r->dir = th_mkdtemp();
	r->out = malloc(cap);
	assert_non_null(r->out);
	argv[n++] = PROCREG_BENCH_PATH;
	for (int i = 0; args[i]; i++)
		argv[n++] = args[i];
	argv[n++] = "--quick";
	argv[n++] = "--json";
	argv[n++] = "--tmpdir";
	argv[n++] = r->dir;
	argv[n] = NULL;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 1);
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	close(p[1]);
	if (sigint_ms > 0) {
		th_msleep(sigint_ms);
		kill(pid, SIGINT);
	}
	for (;;) {
		ssize_t k;

		if (len + 4096 > cap) {
			cap *= 2;
			r->out = realloc(r->out, cap);
			assert_non_null(r->out);
		}
		k = read(p[0], r->out + len, cap - len - 1);
		if (k <= 0)
			break;
		len += (size_t)k;
	}
	r->out[len] = 0;
	close(p[0]);
	r->status = th_wait(pid);
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

/* Processes whose command line names DIR: the bench's children and its
 * procregd (--dir DIR/procreg-bench.XXXXXX). */
static int processes_using(const char *dir, pid_t *one)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d))) {
		char path[300], buf[8192];
		ssize_t k;
		int fd;

		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		k = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (k <= 0)
			continue;
		for (ssize_t i = 0; i < k; i++)
			if (!buf[i])
				buf[i] = ' ';
		buf[k] = 0;
		if (strstr(buf, dir) && n++ == 0)
			*one = (pid_t)atoi(e->d_name);
	}
	if (d)
		closedir(d);
	return n;
}

/* Nothing left: no file in the directory, no process. The bench's
 * children die with it through PR_SET_PDEATHSIG, which the kernel delivers
 * as the bench exits but which a loaded machine may take a while to act
 * on: each one left is waited for through a pidfd, until it exits. The
 * minute is only there so that a child that never dies fails the test
 * rather than hanging it. */
static void check_clean(struct run *r)
{
	pid_t pid = 0;

	assert_int_equal(count_entries(r->dir), 0);
	while (processes_using(r->dir, &pid) > 0) {
		int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		struct pollfd p = { .fd = pidfd, .events = POLLIN };

		if (pidfd < 0 && errno == ESRCH)
			continue; /* gone since it was seen */
		if (pidfd < 0)
			fail_msg("pidfd_open(%d): %s", (int)pid, strerror(errno));
		if (poll(&p, 1, 60000) != 1)
			fail_msg("pid %d still runs with %s a minute after the bench exited", (int)pid,
				 r->dir);
		close(pidfd);
	}
	th_rmrf(r->dir);
	free(r->dir);
	free(r->out);
}

static void check_ok(struct run *r)
{
	if (r->status != 0 || !well_formed(r->out))
		fprintf(stderr, "status %d, output:\n%s\n", r->status, r->out);
	assert_int_equal(r->status, 0);
	assert_true(well_formed(r->out));
	assert_non_null(strstr(r->out, "\"ok\":true"));
	/* Every run says how much of the CPUs' time the host took: a share,
	 * from /proc/stat, or null where no tick passed in the run. */
	if (!strstr(r->out, "\"host_steal_share\":null")) {
		double steal = num(r->out, "host_steal_share");

		if (!(steal >= 0 && steal <= 1))
			fail_msg("host_steal_share is %g, not a share", steal);
	}
}

/* ---- the subcommands ------------------------------------------------------ */

static void test_lookup(void **state)
{
	struct run r;
	const char *p;

	(void)state;
	bench(&r, 0, (const char *const[]){ "lookup", NULL });
	check_ok(&r);
	assert_true(has(r.out, "procreg_ns"));
	assert_true(has(r.out, "procreg_bulk_ns"));
	assert_true(has(r.out, "inline_ns"));
	assert_true(has(r.out, "oa_ns"));
	assert_true(has(r.out, "lfht_ns"));
	assert_true(has(r.out, "time_vs_inline"));
	assert_true(has(r.out, "time_vs_strongest"));
	assert_true(has(r.out, "bulk_rate_vs_strongest"));
	if (num(r.out, "ncpus") > 1) {
		assert_true(has(r.out, "scaling"));
		assert_true(has(r.out, "inline_scaling"));
		assert_true(has(r.out, "scaling_vs_inline"));
	}
	/* The headline baseline of each row is the faster of inline and oa,
	 * and its ratio is that baseline's. */
	for (p = strstr(r.out, "\"least_cpu_share\":"); p;
	     p = strstr(p + 1, "\"least_cpu_share\":")) {
		const char *st = strstr(p, "\"strongest\":\"");
		double il_ns = num_after(p, "inline_ns"), oa_ns = num_after(p, "oa_ns");
		double vs_il = num_after(strstr(p, "\"time_vs_inline\":"), "median");
		double vs_oa = num_after(strstr(p, "\"time_vs_oa\":"), "median");
		double vs_st = num_after(strstr(p, "\"time_vs_strongest\":"), "median");
		bool oa = st && !strncmp(st + strlen("\"strongest\":\""), "oa\"", 3);

		assert_non_null(st);
		assert_true(il_ns > 0 && oa_ns > 0 && vs_st > 0);
		assert_true(oa ? oa_ns < il_ns : il_ns <= oa_ns);
		assert_true(vs_st == (oa ? vs_oa : vs_il));
	}
	/* Both table sizes, and in each run every implementation did lookups
	 * and found every name (no misses were asked for). */
	assert_true(num(r.out, "names") == 1000);
	assert_non_null(strstr(r.out, "\"names\":10000"));
	/* What of the table a reader maps, and how much of it in huge pages:
	 * the bench's test of every name brought its index in. */
	assert_true(num(r.out, "table_resident_kib") > 0);
	assert_true(num(r.out, "table_huge_kib") <= num(r.out, "table_resident_kib"));
	for (p = strstr(r.out, "\"lookups\":{"); p; p = strstr(p + 1, "\"lookups\":{")) {
		const char *f = strstr(p, "\"found\":{");
		const char *impls[] = { "procreg", "procreg_bulk", "inline", "oa", "lfht" };

		assert_non_null(f);
		for (int i = 0; i < 5; i++) {
			double l = num_after(p, impls[i]), fo = num_after(f, impls[i]);

			assert_true(l > 0); /* work was done; how much depends on the machine */
			assert_true(fo == l);
		}
	}
	check_clean(&r);
}

static void test_lookup_misses(void **state)
{
	struct run r;
	double l, f;

	(void)state;
	bench(&r, 0, (const char *const[]){ "lookup", "--names", "5000", "--readers", "1",
					     "--miss-rate", "50%", NULL });
	check_ok(&r);
	l = num_after(strstr(r.out, "\"lookups\":{"), "procreg");
	f = num_after(strstr(r.out, "\"found\":{"), "procreg");
	assert_true(l > 0); /* work was done; how much depends on the machine */
	assert_true(f > 0.4 * l && f < 0.6 * l);
	check_clean(&r);

	/* Presence only: the same share found, by every implementation. */
	bench(&r, 0, (const char *const[]){ "lookup", "--names", "5000", "--readers", "1",
					     "--miss-rate", "50%", "--presence", NULL });
	check_ok(&r);
	assert_non_null(strstr(r.out, "\"presence\":true"));
	for (int i = 0; i < 5; i++) {
		const char *impls[] = { "procreg", "procreg_bulk", "inline", "oa", "lfht" };

		l = num_after(strstr(r.out, "\"lookups\":{"), impls[i]);
		f = num_after(strstr(r.out, "\"found\":{"), impls[i]);
		assert_true(l > 0);
		assert_true(f > 0.4 * l && f < 0.6 * l);
	}
	check_clean(&r);
}

static void test_lookup_under_write_load(void **state)
{
	struct run r;

	(void)state;
	bench(&r, 0, (const char *const[]){ "lookup", "--under-write-load", NULL });
	check_ok(&r);
	assert_non_null(strstr(r.out, "\"under_write_load\":true"));
	assert_true(has(r.out, "ratio_vs_idle"));
	assert_true(has(r.out, "idle_procreg_ns"));
	assert_true(num(r.out, "writer_ops_per_s") > 0);
	assert_true(num_after(strstr(r.out, "\"lookups\":{"), "procreg") > 0);
	check_clean(&r);
}

static void test_register(void **state)
{
	struct run r;
	const char *p;
	int runs = 0;

	(void)state;
	bench(&r, 0, (const char *const[]){ "register", NULL });
	check_ok(&r);
	for (p = strstr(r.out, "\"arrangement\":"); p; p = strstr(p + 1, "\"arrangement\":")) {
		double es = num_after(p, "expected_sync"), ep = num_after(p, "expected_pipelined");

		assert_true(es > 0 && ep > 0);
		assert_true(num_after(p, "round_trips") == es);
		assert_true(num_after(p, "sync_registered") == es);
		assert_true(num_after(p, "sync_unregistered") == es);
		assert_true(num_after(p, "pipelined_registered") == ep);
		assert_true(num_after(p, "pipelined_unregistered") == ep);
		assert_true(num_after(p, "ratio_vs_socket_rtt") > 0);
		/* procregd's CPU time a pipelined registration, from its CPU
		 * clock around the registrations. */
		assert_true(num_after(p, "pipelined_daemon_cpu_ns") > 0);
		runs++;
	}
	assert_true(runs >= 1);
	check_clean(&r);
}

/* One stress run (ARGS after "stress"), every step checked. */
static void stress_run(const char *const *args)
{
	struct run r;
	double names;

	bench(&r, 0, args);
	check_ok(&r);
	names = num(r.out, "names");
	assert_true(names > 0);
	assert_true(num(r.out, "procs") > 1);
	assert_true(num(r.out, "visible_after_register") == names);
	assert_true(num(r.out, "visible_after_reregister") == names);
	assert_non_null(strstr(r.out, "\"all_gone\":true"));
	all_positive(r.out, (const char *const[]){ "reg_per_s", "unreg_per_s", "rereg_per_s", NULL });
	assert_true(num(r.out, "kill_to_all_gone_ms") >= 0);
	/* Registration beside its floor, an echo server answering the same
	 * processes' requests, measured before steps 2 and 6. */
	all_positive(r.out, (const char *const[]){ "floor_per_s", "floor2_per_s", "reg_vs_floor",
						   "rereg_vs_floor", NULL });
	/* A floor under the many-process target (2 M/s, pipelined) is said
	 * to be: the miss is the machine's then. */
	assert_int_equal(strstr(r.out, "\"target_over_floor\":true") != NULL,
			 strstr(r.out, "\"pipelined\":true") && num(r.out, "floor_per_s") < 2e6);
	/* Where the time went: the processes' CPU time, and the server's
	 * (procregd's, the echo server's) read from its CPU clock. */
	all_positive(r.out, (const char *const[]){ "cpu_ms_procs_register", "cpu_ms_server_register",
						   "cpu_ms_server_floor", "cpu_ms_server_reregister",
						   NULL });
	/* The deaths beside their floor: both timed, from either end of the
	 * kill loop. */
	{
		const char *d = strstr(r.out, "\"deaths\":{");

		assert_non_null(d);
		assert_true(num_after(d, "rounds") >= 1);
		assert_true(num_after(d, "floor_first_kill_ms") > 0);
		assert_true(num_after(d, "procreg_first_kill_ms") > 0);
		assert_true(num_after(d, "floor_first_kill_ms") >= num_after(d, "floor_last_kill_ms"));
		assert_true(num_after(d, "ratio_first_kill") > 0);
	}
	check_clean(&r);
}

static void test_stress(void **state)
{
	(void)state;
	stress_run((const char *const[]){ "stress", NULL });
	stress_run((const char *const[]){ "stress", "--pipelined", NULL });
}

/* stress --nodes 3: three bridged daemons; every name reached every
 * node, every figure and baseline is there, and no daemon outlives the
 * bench. */
static void test_stress_nodes(void **state)
{
	struct run r;
	double names;

	(void)state;
	bench(&r, 0, (const char *const[]){ "stress", "--nodes", "3", NULL });
	check_ok(&r);
	assert_true(num(r.out, "nodes") == 3);
	names = num(r.out, "names");
	assert_true(names > 0);
	assert_true(num(r.out, "not_visible") == 0);
	assert_true(num(r.out, "delay_samples") > 0);
	assert_true(has(r.out, "delay_us_n2"));
	assert_true(has(r.out, "delay_us_nK"));
	assert_true(num_after(strstr(r.out, "\"delay_us_n2\""), "median") > 0);
	assert_true(num_after(strstr(r.out, "\"tcp_rtt_us\""), "median") > 0);
	assert_true(num_after(strstr(r.out, "\"solo_sync_register_us\""), "median") > 0);
	all_positive(r.out, (const char *const[]){ "delay_to_tcp_rtt", "one_writer_per_s",
						   "solo_one_writer_per_s", "one_writer_ratio",
						   "all_writers_per_s", "all_writers_ratio",
						   "one_writer_sync_per_s", "all_writers_sync_per_s",
						   "solo_all_writers_sync_per_s", NULL });
	check_clean(&r);
}

/* A daemon that cannot start (an option it refuses, through --daemon-arg):
 * the bench fails with status 2 and stops the daemons it did start. Then
 * SIGINT in the middle of a cluster run: nothing left either. */
static void test_stress_nodes_failures(void **state)
{
	struct run r;

	(void)state;
	bench(&r, 0, (const char *const[]){ "cluster", "--daemon-arg", "--no-such-option", NULL });
	assert_int_equal(r.status, 2);
	check_clean(&r);
	bench(&r, 300, (const char *const[]){ "stress", "--nodes", "4", "--names", "2000000",
					       NULL });
	assert_int_equal(r.status, 128 + SIGINT);
	check_clean(&r);
}

static void test_memory(void **state)
{
	struct run r;
	const char *p;
	int sizes = 0;

	(void)state;
	bench(&r, 0, (const char *const[]){ "memory", NULL });
	check_ok(&r);
	for (p = strstr(r.out, "{\"names\":"); p; p = strstr(p + 1, "{\"names\":")) {
		double n = num_after(p, "names");

		assert_true(num_after(p, "table_names") == n);
		assert_true(num_after(p, "file_bytes") > 0);
		assert_true(num_after(p, "arena_used_per_name") > 0);
		sizes++;
	}
	assert_int_equal(sizes, 2);
	check_clean(&r);
}

/* probes: both builds looked up every name; the ratio is printed, not
 * judged here (timing belongs to the bench, not the suite). */
static void test_probes(void **state)
{
	struct run r;

	(void)state;
	bench(&r, 0, (const char *const[]){ "probes", NULL });
	check_ok(&r);
	all_positive(r.out, (const char *const[]){ "ns_probes", "ns_noprobes", "ratio", NULL });
	check_clean(&r);
}

/* SIGINT in the middle of a measurement: the bench stops, by the signal,
 * and leaves nothing behind. */
static void test_sigint(void **state)
{
	struct run r;

	(void)state;
	bench(&r, 400, (const char *const[]){ "lookup", "--duration", "3000", NULL });
	assert_int_equal(r.status, 128 + SIGINT);
	check_clean(&r);
}

static void test_usage(void **state)
{
	struct run r;

	(void)state;
	bench(&r, 0, (const char *const[]){ "no-such-command", NULL });
	assert_int_equal(r.status, 2);
	check_clean(&r);
	bench(&r, 0, (const char *const[]){ "cluster", "--nodes", "1", NULL });
	assert_int_equal(r.status, 2);
	check_clean(&r);
	bench(&r, 0, (const char *const[]){ "stress", "--nodes", "13", NULL });
	assert_int_equal(r.status, 2);
	check_clean(&r);
	bench(&r, 0, (const char *const[]){ "lookup", "--no-mesh", NULL });
	assert_int_equal(r.status, 2);
	check_clean(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lookup),
		cmocka_unit_test(test_lookup_misses),
		cmocka_unit_test(test_lookup_under_write_load),
		cmocka_unit_test(test_register),
		cmocka_unit_test(test_stress),
		cmocka_unit_test(test_stress_nodes),
		cmocka_unit_test(test_stress_nodes_failures),
		cmocka_unit_test(test_memory),
		cmocka_unit_test(test_probes),
		cmocka_unit_test(test_sigint),
		cmocka_unit_test(test_usage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
