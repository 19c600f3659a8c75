/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_trace.c - procreg-trace against a live procregd and clients doing
 * known work: what it counts and reports must match what was done.
 *
 * Needs root (or CAP_BPF and CAP_PERFMON) and a kernel that loads BPF and
 * uprobes, as CI has. Where the tracer cannot start, the tests fail with
 * its error: they never skip.
 *
 * The workers are forked from this program, which links the static
 * library, so "-p PID" finds the probes in this executable's own mapping.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cluster.h"
#include "hostile.h"

#define HITS 1234
#define MISSES 321

struct fixture {
	char *dir;
	struct th_daemon d;
	procreg_t *reg;
	pid_t tracer;
	char out[512], err[512];     /* the tracer's stdout and stderr files */
	struct th_daemon d2;         /* a second registry's daemon, in dir2 */
	char *dir2;
	pid_t workers[2];            /* workers still running */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->dir = th_mkdtemp();
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
	f->reg = th_open(f->dir);
	assert_non_null(f->reg);
	snprintf(f->out, sizeof(f->out), "%s/trace.out", f->dir);
	snprintf(f->err, sizeof(f->err), "%s/trace.err", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (f->tracer > 0) {
		kill(f->tracer, SIGKILL);
		th_wait(f->tracer);
	}
	for (int i = 0; i < 2; i++)
		if (f->workers[i] > 0)
			th_kill_wait(&f->workers[i]);
	procreg_close(f->reg);
	th_daemon_stop(&f->d);
	if (f->dir2) {
		if (f->d2.pid)
			th_daemon_stop(&f->d2);
		th_rmrf(f->dir2);
		free(f->dir2);
	}
	th_rmrf(f->dir);
	free(f->dir);
	free(f);
	return 0;
}

/* The whole of a file, NUL-terminated (the caller frees it); its length
 * in *N, if N is not NULL (a NUL byte in it would count). */
static char *slurp_n(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "re");
	char *buf = NULL;
	size_t len = 0;

	if (fp) {
		FILE *m = open_memstream(&buf, &len);
		int c;

		while ((c = fgetc(fp)) != EOF)
			fputc(c, m);
		fclose(m);
		fclose(fp);
	}
	if (n)
		*n = buf ? len : 0;
	return buf ? buf : strdup("");
}

static char *slurp(const char *path)
{
	return slurp_n(path, NULL);
}

/* Start procreg-trace ARGS... with --dir, its output in the fixture's
 * files, and wait until it says it is tracing. Fails the test with its
 * error if it exits first or takes more than 20 s. */
static void tracer_start(struct fixture *f, const char *const *args)
{
	const char *argv[32];
	int n = 0;

	argv[n++] = PROCREG_TRACE_PATH;
	for (int i = 0; args[i]; i++)
		argv[n++] = args[i];
	argv[n++] = "--dir";
	argv[n++] = f->dir;
	argv[n] = NULL;
	f->tracer = fork();
	assert_true(f->tracer >= 0);
	if (f->tracer == 0) {
		int o = open(f->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int e = open(f->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(127);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 2000; i++) {
		char *err = slurp(f->err);
		int ready = strstr(err, "tracing") != NULL, status;

		if (ready) {
			free(err);
			return;
		}
		if (waitpid(f->tracer, &status, WNOHANG) == f->tracer) {
			f->tracer = 0;
			fail_msg("procreg-trace could not start (BPF must load here, as root):\n%s", err);
		}
		free(err);
		th_msleep(10);
	}
	fail_msg("procreg-trace did not start tracing within 20 s");
}

/* SIGINT, then its exit status must be 0; returns its stdout. */
static char *tracer_stop(struct fixture *f)
{
	int st;

	assert_int_equal(kill(f->tracer, SIGINT), 0);
	st = th_wait(f->tracer);
	f->tracer = 0;
	if (st != 0) {
		char *err = slurp(f->err);

		fail_msg("procreg-trace exited with %d after SIGINT:\n%s", st, err);
	}
	return slurp(f->out);
}

/* ---- a worker that does known work when told to ---------------------- */

struct worker {
	const char *dir;
	int go[2], done[2];
	bool work_register;          /* also register, join, and unregister */
};

static void wait_byte(int fd)
{
	char c;

	while (read(fd, &c, 1) < 0 && errno == EINTR)
		;
}

static int worker_main(void *arg)
{
	struct worker *w = arg;
	TH_ENTRY(e);
	procreg_t *reg = th_open(w->dir);
	int bad = 0;

	if (!reg)
		return 1;
	wait_byte(w->go[0]);
	if (w->work_register) {
		bad |= procreg_register(reg, "trace.worker", "m", 1) != 0;
		bad |= procreg_join(reg, "trace.crew", NULL, 0) != 0;
		bad |= procreg_unregister(reg, "trace.worker") != 0;
	}
	for (int i = 0; i < HITS; i++)
		bad |= procreg_lookup(reg, i % 2 ? "trace.a" : "trace.b", &e) != 0;
	for (int i = 0; i < MISSES; i++)
		bad |= procreg_lookup(reg, "trace.absent", &e) != -ENOENT;
	procreg_close(reg);
	if (write(w->done[1], "x", 1) != 1)
		bad = 1;
	pause(); /* until the test kills it */
	return bad;
}

static pid_t worker_start(struct fixture *f, struct worker *w)
{
	w->dir = f->dir;
	assert_int_equal(pipe(w->go), 0);
	assert_int_equal(pipe(w->done), 0);
	return th_fork(worker_main, w);
}

/* The same worker in a process of its own image (this program again,
 * TRACE_WORKER_DIR set): a fork would share the test's mappings, the
 * test's registry's table among them. */
static pid_t worker_exec(struct fixture *f, struct worker *w)
{
	pid_t pid;

	w->dir = f->dir;
	assert_int_equal(pipe(w->go), 0);
	assert_int_equal(pipe(w->done), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(w->go[0], 0);
		dup2(w->done[1], 1);
		setenv("TRACE_WORKER_DIR", f->dir, 1);
		execl("/proc/self/exe", "test_trace", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void worker_run(struct worker *w)
{
	assert_int_equal(write(w->go[1], "x", 1), 1);
	wait_byte(w->done[0]);
}

static void worker_end(struct worker *w, pid_t pid)
{
	kill(pid, SIGKILL);
	th_wait(pid);
	close(w->go[0]);
	close(w->go[1]);
	close(w->done[0]);
	close(w->done[1]);
}

static void register_names(struct fixture *f)
{
	assert_int_equal(procreg_register(f->reg, "trace.a", "a", 1), 0);
	assert_int_equal(procreg_register(f->reg, "trace.b", "b", 1), 0);
}

/* ---- tests ------------------------------------------------------------ */

/* top counts exactly the worker's lookups and misses, and names the names. */
static void test_top_counts_lookups_and_misses(void **state)
{
	struct fixture *f = *state;
	struct worker w = { 0 };
	unsigned long long lookups = 0, misses = 0;
	char pid[16], *out, *t;
	pid_t child;

	register_names(f);
	child = worker_start(f, &w);
	snprintf(pid, sizeof(pid), "%d", (int)child);
	tracer_start(f, (const char *const[]){ "top", "-p", pid, "--interval", "600", NULL });
	worker_run(&w);
	out = tracer_stop(f);
	worker_end(&w, child);

	t = strstr(out, "total: ");
	if (!t || sscanf(t, "total: lookups %llu, misses %llu", &lookups, &misses) != 2)
		fail_msg("no totals in procreg-trace top's output:\n%s", out);
	assert_int_equal(lookups, HITS + MISSES);
	assert_int_equal(misses, MISSES);
	/* Resolved from the table, and the miss by the name it was asked as. */
	if (!strstr(out, " trace.a\n") || !strstr(out, " trace.b\n") ||
	    !strstr(out, " trace.absent (not in the table)\n"))
		fail_msg("names missing from procreg-trace top's output:\n%s", out);
	assert_non_null(strstr(out, pid));
	/* The process's row names its command (the worker: a fork of ours). */
	if (!strstr(out, "  COMM\n") || !strstr(out, "  test_trace\n"))
		fail_msg("no COMM column in procreg-trace top's output:\n%s", out);
	free(out);
}


/* Another registry (f->d2, in f->dir2, returned) holding the same names
 * as register_names() registers; no handle of this process left open on
 * it. */
static char *second_registry(struct fixture *f)
{
	procreg_t *r2;

	f->dir2 = th_mkdtemp();
	assert_int_equal(th_daemon_start(&f->d2, f->dir2, NULL, NULL), 0);
	r2 = th_open(f->dir2);
	assert_non_null(r2);
	assert_int_equal(procreg_register(r2, "trace.a", "a", 1), 0);
	assert_int_equal(procreg_register(r2, "trace.b", "b", 1), 0);
	procreg_close(r2);
	return f->dir2;
}

/* PID's mappings hold the table of DIR. */
struct mapping {
	pid_t pid;
	const char *dir;
};

static int maps_table_of(void *arg)
{
	struct mapping *m = arg;
	char path[64], want[600], *maps;
	int found;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)m->pid);
	snprintf(want, sizeof(want), "%s/procreg.default\n", m->dir);
	maps = slurp(path);
	found = strstr(maps, want) != NULL;
	free(maps);
	return found;
}

/* Without -p, top traces the processes of the registry it is pointed
 * at, and not those of another registry, which load the same library. */
static void test_top_scoped_to_registry(void **state)
{
	struct fixture *f = *state;
	struct worker w = { 0 }, other = { 0 };
	unsigned long long lookups = 0, misses = 0;
	/* Registry B's handle is closed before the other worker starts: it
	 * must map B's table only once it runs as itself, after its exec. */
	char *dir2 = second_registry(f), pid[16], opid[32], *out, *t;
	struct fixture f2 = { .dir = dir2 };
	pid_t child, ochild;

	register_names(f);
	child = f->workers[0] = worker_start(f, &w);
	ochild = f->workers[1] = worker_exec(&f2, &other);
	assert_true(th_until(maps_table_of, &(struct mapping){ child, f->dir }, 20000));
	assert_true(th_until(maps_table_of, &(struct mapping){ ochild, dir2 }, 20000));
	assert_false(maps_table_of(&(struct mapping){ ochild, f->dir }));
	tracer_start(f, (const char *const[]){ "top", "--interval", "600", NULL });
	worker_run(&w);
	worker_run(&other);
	out = tracer_stop(f);
	worker_end(&w, child);
	worker_end(&other, ochild);
	f->workers[0] = f->workers[1] = 0;

	t = strstr(out, "total: ");
	if (!t || sscanf(t, "total: lookups %llu, misses %llu", &lookups, &misses) != 2)
		fail_msg("no totals in procreg-trace top's output:\n%s", out);
	/* The worker of this registry only. */
	assert_int_equal(lookups, HITS + MISSES);
	assert_int_equal(misses, MISSES);
	snprintf(pid, sizeof(pid), "%12d ", (int)child);
	snprintf(opid, sizeof(opid), "%12d ", (int)ochild);
	if (!strstr(out, pid) || strstr(out, opid))
		fail_msg("procreg-trace top without -p: pid %d wanted, pid %d not:\n%s", (int)child,
			 (int)ochild, out);
	free(out);
	assert_int_equal(th_daemon_stop(&f->d2), 0);
}

/* A client that lives only to look up: opens DIR's registry, HITS
 * lookups that hit and MISSES that miss, closes it, exits. */
static int short_client(void *arg)
{
	const char *dir = arg;
	TH_ENTRY(e);
	procreg_t *reg = th_open(dir);
	int bad = 0;

	if (!reg)
		return 1;
	for (int i = 0; i < HITS; i++)
		bad |= procreg_lookup(reg, i % 2 ? "trace.a" : "trace.b", &e) != 0;
	for (int i = 0; i < MISSES; i++)
		bad |= procreg_lookup(reg, "trace.absent", &e) != -ENOENT;
	procreg_close(reg);
	return bad;
}

/* Without -p, the lookups of clients that start and exit while
 * procreg-trace runs (between two of its looks for the registry's
 * processes) are counted, every one: a fork of this program, which
 * carries the probes itself (the static library), and a run of the
 * procreg command (libprocreg.so). The same clients of another registry
 * on this host, during the same run, are not counted: this program's
 * forks still map this registry's table (the fixture's handle), so only
 * the table each lookup went to tells them apart. */
static void test_top_counts_short_lived_clients(void **state)
{
	struct fixture *f = *state;
	unsigned long long lookups = 0, misses = 0;
	char *dir2 = second_registry(f), *out, *t;
	char got[256];

	register_names(f);
	tracer_start(f, (const char *const[]){ "top", "--interval", "600", NULL });
	for (int round = 0; round < 2; round++) {
		assert_int_equal(th_wait(th_fork(short_client, f->dir)), 0);
		assert_int_equal(th_wait(th_fork(short_client, dir2)), 0);
		assert_int_equal(th_cli(dir2, got, sizeof(got),
					(const char *const[]){ "get", "trace.a", NULL }), 0);
	}
	assert_int_equal(th_cli(f->dir, got, sizeof(got),
				(const char *const[]){ "get", "trace.b", NULL }), 0);
	assert_int_equal(th_cli(f->dir, got, sizeof(got),
				(const char *const[]){ "get", "trace.absent", NULL }), 1);
	out = tracer_stop(f);

	t = strstr(out, "total: ");
	if (!t || sscanf(t, "total: lookups %llu, misses %llu", &lookups, &misses) != 2)
		fail_msg("no totals in procreg-trace top's output:\n%s", out);
	/* Two forks and two commands of this registry: one lookup each for
	 * the commands, one of them a miss. */
	if (lookups != 2 * (HITS + MISSES) + 2 || misses != 2 * MISSES + 1)
		fail_msg("procreg-trace top without -p: %llu lookups, %llu misses; wanted %d, %d:\n%s",
			 lookups, misses, 2 * (HITS + MISSES) + 2, 2 * MISSES + 1, out);
	free(out);
	assert_int_equal(th_daemon_stop(&f->d2), 0);
}

/* Options refused before anything is loaded, and --version. */
static void test_options(void **state)
{
	struct th_out *o = calloc(1, sizeof(*o));
	char want[64];

	(void)state;
	assert_non_null(o);
	assert_int_equal(th_run(o, NULL, (const char *const[]){ PROCREG_TRACE_PATH, "--version",
								 NULL }), 0);
	snprintf(want, sizeof(want), "procreg-trace %s\n", procreg_version());
	assert_string_equal(o->out, want);
	assert_int_equal(th_run(o, NULL, (const char *const[]){ PROCREG_TRACE_PATH, "lat",
								 "--interval", "0", NULL }), 2);
	assert_string_equal(o->err, "procreg-trace: --interval 0: want at least 0.01 seconds\n");
	assert_int_equal(th_run(o, NULL, (const char *const[]){ PROCREG_TRACE_PATH, "lat", "--lib",
								 "/nonexistent/libprocreg.so", NULL }),
			 2);
	assert_string_equal(o->err, "procreg-trace: --lib /nonexistent/libprocreg.so: No such file "
				    "or directory\n");
	free(o);
}

/* A line of OUT that holds every one of the NULL-terminated WORDS (its
 * newline included, so that a word may end with one). */
static bool has_line(const char *out, const char *const *words)
{
	for (const char *l = out; *l;) {
		const char *e = strchr(l, '\n');
		size_t n = e ? (size_t)(e - l) + 1 : strlen(l);
		char *line = strndup(l, n);
		bool all = true;

		for (int i = 0; words[i] && all; i++)
			all = strstr(line, words[i]) != NULL;
		free(line);
		if (all)
			return true;
		l += n;
	}
	return false;
}

struct victim {
	const char *dir;
	int ready[2];
};

static int victim_main(void *arg)
{
	struct victim *v = arg;
	procreg_t *reg = th_open(v->dir);

	if (!reg || procreg_register(reg, "trace.victim", NULL, 0) ||
	    procreg_register(reg, "trace.victim.2", NULL, 0) ||
	    procreg_join(reg, "trace.crew", NULL, 0))
		return 1;
	if (write(v->ready[1], "x", 1) != 1)
		return 1;
	pause();
	return 0;
}

/* A killed process shows up with each of its names, then its removal. */
static void run_events_kill(struct fixture *f, bool json)
{
	struct victim v = { .dir = f->dir };
	TH_ENTRY(e);
	char pid[32], *out;
	pid_t child;

	tracer_start(f, json ? (const char *const[]){ "events", "--json", NULL }
			     : (const char *const[]){ "events", NULL });
	assert_int_equal(pipe(v.ready), 0);
	child = th_fork(victim_main, &v);
	wait_byte(v.ready[0]);
	kill(child, SIGKILL);
	assert_int_equal(th_wait(child), 128 + SIGKILL);
	/* SYNC returns after the daemon has handled every death before it. */
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "trace.victim", &e), -ENOENT);
	out = tracer_stop(f);
	close(v.ready[0]);
	close(v.ready[1]);

	if (json) {
		snprintf(pid, sizeof(pid), "\"pid\":%d,", (int)child);
		if (!has_line(out, (const char *const[]){ "\"event\":\"registered\"", pid, "\"name\":\"trace.victim\"", NULL }) ||
		    !has_line(out, (const char *const[]){ "\"event\":\"died\"", pid, "\"kind\":\"name\"", "\"name\":\"trace.victim\"", NULL }) ||
		    !has_line(out, (const char *const[]){ "\"event\":\"died\"", pid, "\"name\":\"trace.victim.2\"", NULL }) ||
		    !has_line(out, (const char *const[]){ "\"event\":\"died\"", pid, "\"kind\":\"group\"", "\"name\":\"trace.crew\"", NULL }) ||
		    !has_line(out, (const char *const[]){ "\"event\":\"removed\"", pid, "\"entries\":3,", NULL }))
			fail_msg("the killed process (%s) is not in procreg-trace events --json:\n%s", pid,
				 out);
	} else {
		snprintf(pid, sizeof(pid), "pid %-7d ", (int)child);
		if (!has_line(out, (const char *const[]){ "registered", pid, "name trace.victim", NULL }) ||
		    !has_line(out, (const char *const[]){ "died", pid, "name trace.victim\n", NULL }) ||
		    !has_line(out, (const char *const[]){ "died", pid, "name trace.victim.2", NULL }) ||
		    !has_line(out, (const char *const[]){ "died", pid, "member of trace.crew", NULL }) ||
		    !has_line(out, (const char *const[]){ "removed", pid, "3 entries removed", "us after", NULL }))
			fail_msg("the killed process (%s) is not in procreg-trace events:\n%s", pid, out);
	}
	free(out);
}

static void test_events_show_a_killed_process(void **state)
{
	run_events_kill(*state, false);
}

static void test_events_json(void **state)
{
	run_events_kill(*state, true);
}

/* The "N samples" figure of histogram TITLE in lat's output; -1 if it
 * has none. */
static long long samples(const char *out, const char *title)
{
	char key[128];
	const char *p;
	long long n;

	snprintf(key, sizeof(key), "\n%s: ", title);
	p = strstr(out, key);
	if (!p || sscanf(p + strlen(key), "%lld samples", &n) != 1)
		return -1;
	return n;
}

/* lat prints non-empty histograms: one sample per lookup, per request. */
static void test_lat_histograms(void **state)
{
	struct fixture *f = *state;
	struct worker w = { .work_register = true };
	char pid[16], *out;
	pid_t child;

	register_names(f);
	child = worker_start(f, &w);
	snprintf(pid, sizeof(pid), "%d", (int)child);
	tracer_start(f, (const char *const[]){ "lat", "-p", pid, "--interval", "600", NULL });
	worker_run(&w);
	out = tracer_stop(f);
	worker_end(&w, child);

	if (samples(out, "lookup") != HITS + MISSES ||
	    samples(out, "request (client round trip)") != 3 ||
	    samples(out, "serve (procregd, request to reply)") < 3)
		fail_msg("procreg-trace lat: unexpected histograms:\n%s", out);
	/* A histogram's rows: "lo -> hi : count |***|". */
	assert_non_null(strstr(out, " -> "));
	assert_non_null(strstr(out, "|****"));
	free(out);
}

/* --duration ends a run with status 0; a pid that does not exist is a
 * clear error, status 2. */
static void test_duration_and_errors(void **state)
{
	struct fixture *f = *state;
	int st;
	pid_t p;

	tracer_start(f, (const char *const[]){ "events", "--duration", "0.2", NULL });
	st = th_wait(f->tracer);
	f->tracer = 0;
	assert_int_equal(st, 0);
	p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		int devnull = open("/dev/null", O_WRONLY);

		dup2(devnull, 1);
		dup2(devnull, 2);
		execl(PROCREG_TRACE_PATH, PROCREG_TRACE_PATH, "top", "-p", "999999999", "--dir",
		      f->dir, (char *)NULL);
		_exit(127);
	}
	assert_int_equal(th_wait(p), 2);
}

/* ---- names an unprivileged user chose -------------------------------- */

struct hostile {
	const char *dir;
	struct th_user u;
	int go[2], done[2];
};

/* As the user: register every hostile name, join every hostile group,
 * and exit (the daemon removes them: died events). */
static int hostile_register(void *arg)
{
	struct hostile *h = arg;
	procreg_t *reg;

	th_become(&h->u);
	if (!(reg = th_open(h->dir)))
		return 1;
	if (th_hostile_claim(reg, "", 1) != 0)
		return 2;
	procreg_close(reg);
	return 0;
}

/* events, plain or --json, while the user registers hostile names: safe
 * output, each name given back exactly. */
static void run_events_hostile(struct fixture *f, bool json)
{
	struct hostile h = { .dir = f->dir };
	int seen[TH_NHOSTILE] = { 0 }, gseen[TH_NHOSTILE_GROUPS] = { 0 };
	char buf[1024], err[256], *out;
	size_t len;

	th_user_new(&h.u);
	assert_int_equal(chmod(f->dir, 0755), 0); /* the user's way to the socket */
	tracer_start(f, json ? (const char *const[]){ "events", "--json", NULL }
			     : (const char *const[]){ "events", NULL });
	assert_int_equal(th_wait(th_fork(hostile_register, &h)), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	free(tracer_stop(f));
	out = slurp_n(f->out, &len);
	th_expect_safe(json ? "procreg-trace events --json" : "procreg-trace events", out, len);
	for (char *l = out, *end; (end = strchr(l, '\n')); l = end + 1) {
		*end = 0;
		if (json) {
			struct tj *doc = th_expect_json("procreg-trace events --json", l,
							(size_t)(end - l));
			const struct tj *ev = tj_get(doc, "event");
			size_t n;
			int k;

			if (ev && tj_get(doc, "name") &&
			    tj_bytes(doc, "name", buf, sizeof(buf), &n, err, sizeof(err)) < 0)
				fail_msg("procreg-trace events --json: %s: %s", err, l);
			if (ev && !strcmp(ev->s, "registered") &&
			    (k = th_find(th_hostile_names, TH_NHOSTILE, buf, n)) >= 0)
				seen[k]++;
			if (ev && !strcmp(ev->s, "joined") &&
			    (k = th_find(th_hostile_groups, TH_NHOSTILE_GROUPS, buf, n)) >= 0)
				gseen[k]++;
			tj_free(doc);
		} else {
			/* "TIME registered    pid P       name NAME",
			 * "TIME joined        pid P       member of GROUP" */
			char *p = strstr(l, " registered "), *q = strstr(l, " joined ");
			char *nm = p ? strstr(p, " name ") : NULL, *gr = q ? strstr(q, " member of ") : NULL;
			int k;

			if (nm && (k = th_find(th_hostile_names, TH_NHOSTILE, buf,
					       th_decode(nm + 6, strlen(nm + 6), buf, sizeof(buf)))) >= 0)
				seen[k]++;
			if (gr && (k = th_find(th_hostile_groups, TH_NHOSTILE_GROUPS, buf,
					       th_decode(gr + 11, strlen(gr + 11), buf, sizeof(buf)))) >= 0)
				gseen[k]++;
		}
	}
	for (size_t i = 0; i < TH_NHOSTILE; i++)
		if (seen[i] != 1)
			fail_msg("hostile name %zu registered: reported %d times", i, seen[i]);
	for (size_t i = 0; i < TH_NHOSTILE_GROUPS; i++)
		if (gseen[i] != 1)
			fail_msg("hostile group %zu joined: reported %d times", i, gseen[i]);
	free(out);
	th_user_del(&h.u);
}

static void test_events_hostile_names(void **state)
{
	run_events_hostile(*state, false);
}

static void test_events_json_hostile_names(void **state)
{
	run_events_hostile(*state, true);
}

#define HOSTILE_HITS 3
#define HOSTILE_MISSES 2

/* As the user: hold every hostile name; when told, look each up, and each
 * with "x." before it (not registered). */
static int hostile_lookups(void *arg)
{
	struct hostile *h = arg;
	char name[PROCREG_NAME_MAX + 1];
	procreg_t *reg;
	int bad = 0;

	th_become(&h->u);
	if (!(reg = th_open(h->dir)) || th_hostile_claim(reg, "", 0) != 0)
		return 1;
	wait_byte(h->go[0]);
	for (size_t i = 0; i < TH_NHOSTILE; i++) {
		snprintf(name, sizeof(name), "x.%s", th_hostile_names[i]);
		for (int k = 0; k < HOSTILE_HITS; k++)
			bad |= procreg_lookup(reg, th_hostile_names[i], NULL) != 0;
		for (int k = 0; k < HOSTILE_MISSES; k++)
			bad |= procreg_lookup(reg, name, NULL) != -ENOENT;
	}
	if (write(h->done[1], "x", 1) != 1)
		bad = 1;
	pause(); /* until the test kills it */
	procreg_close(reg);
	return bad;
}

/* top names the names looked up, those in the table and those not: safe
 * output, each name given back exactly. */
static void test_top_hostile_names(void **state)
{
	struct fixture *f = *state;
	struct hostile h = { .dir = f->dir };
	int seen[TH_NHOSTILE] = { 0 }, missed[TH_NHOSTILE] = { 0 };
	char pid[16], buf[1024], *out;
	pid_t child;
	size_t len;

	th_user_new(&h.u);
	assert_int_equal(chmod(f->dir, 0755), 0);
	assert_int_equal(pipe(h.go), 0);
	assert_int_equal(pipe(h.done), 0);
	child = th_fork(hostile_lookups, &h);
	snprintf(pid, sizeof(pid), "%d", (int)child);
	tracer_start(f, (const char *const[]){ "top", "-p", pid, "--interval", "600", "--rows",
					       "100", NULL });
	assert_int_equal(write(h.go[1], "x", 1), 1);
	wait_byte(h.done[0]);
	free(tracer_stop(f));
	kill(child, SIGKILL);
	th_wait(child);
	out = slurp_n(f->out, &len);
	th_expect_safe("procreg-trace top", out, len);
	/* "%12llu %12llu  NAME[ (not in the table)]" */
	for (char *l = out, *end; (end = strchr(l, '\n')); l = end + 1) {
		unsigned long long lookups, misses;
		char *name = l + 27, *tail;
		size_t n;
		int k;

		*end = 0;
		/* Rows of names only (the rows of processes have digits there). */
		if (end - l <= 27 || sscanf(l, "%llu %llu", &lookups, &misses) != 2 ||
		    l[25] != ' ' || l[26] != ' ' || name[0] == ' ' ||
		    !strncmp(name, "(not in the table: hash", 23))
			continue;
		tail = strstr(name, " (not in the table)");
		n = th_decode(name, tail ? (size_t)(tail - name) : strlen(name), buf, sizeof(buf));
		if (tail && n > 2 && !memcmp(buf, "x.", 2) &&
		    (k = th_find(th_hostile_names, TH_NHOSTILE, buf + 2, n - 2)) >= 0) {
			assert_int_equal(lookups, HOSTILE_MISSES);
			missed[k]++;
		} else if (!tail && (k = th_find(th_hostile_names, TH_NHOSTILE, buf, n)) >= 0) {
			assert_int_equal(lookups, HOSTILE_HITS);
			seen[k]++;
		}
	}
	for (size_t i = 0; i < TH_NHOSTILE; i++)
		if (seen[i] != 1 || missed[i] != 1)
			fail_msg("procreg-trace top: hostile name %zu: %d rows, %d rows of misses:\n%s",
				 i, seen[i], missed[i], out);
	free(out);
	close(h.go[0]);
	close(h.go[1]);
	close(h.done[0]);
	close(h.done[1]);
	th_user_del(&h.u);
}

/* ---- the bridge: three nodes, a traced ----------------------------------- */

/* Nodes b and c; a is the fixture's daemon, in its directory. */
static struct th_daemon node_b, node_c;
static char cookie[600], listen_a[32], listen_b[32], listen_c[32];

/* procregd --node NODE --listen (a free port, in LISTEN) [--peer PEERS...]
 * in DIR. */
static void start_node(struct th_daemon *d, const char *dir, const char *node, char *listen,
		       const char *const *peers)
{
	const char *args[16] = { "--node", node, "--cookie-file", cookie };
	int k = 4, err;

	for (int i = 0; peers && peers[i]; i++) {
		args[k++] = "--peer";
		args[k++] = peers[i];
	}
	args[k] = NULL;
	err = th_daemon_start_listen(d, dir, listen, NULL, args, NULL);
	if (err)
		th_daemon_dump_log(d);
	assert_int_equal(err, 0);
}

static int setup_bridge(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->dir = th_mkdtemp();
	snprintf(cookie, sizeof(cookie), "%s/cookie", f->dir);
	th_write_file(cookie, "trace-test-cookie\n", 0600);
	start_node(&f->d, f->dir, "a", listen_a, NULL);
	f->reg = th_open(f->dir);
	assert_non_null(f->reg);
	snprintf(f->out, sizeof(f->out), "%s/trace.out", f->dir);
	snprintf(f->err, sizeof(f->err), "%s/trace.err", f->dir);
	*state = f;
	return 0;
}

static int teardown_bridge(void **state)
{
	if (node_b.pid)
		th_daemon_stop(&node_b);
	if (node_c.pid)
		th_daemon_stop(&node_c);
	memset(&node_b, 0, sizeof(node_b));
	memset(&node_c, 0, sizeof(node_c));
	return teardown(state);
}

struct seen {
	procreg_t *reg;
	const char *name;
	bool remote;                 /* present, owned by another node; else absent */
};

static int seen_there(void *arg)
{
	struct seen *s = arg;
	TH_ENTRY(e);
	int r = procreg_lookup(s->reg, s->name, &e);

	return s->remote ? r == 0 && e.node != 0 : r == -ENOENT;
}

static void wait_name(procreg_t *reg, const char *name, bool remote)
{
	struct seen s = { reg, name, remote };

	if (!th_until(seen_there, &s, 10000))
		fail_msg("'%s' never %s", name, remote ? "arrived from another node" : "went away");
}

/* Whether the tracer's output (written a line at a time) shows c's entries
 * removed. */
static int c_down_shown(void *arg)
{
	char *out = slurp(arg);
	int r = has_line(out, (const char *const[]){ "node-down", "node c: ", "entries removed",
						     NULL });

	free(out);
	return r;
}

/* procreg-trace bridge on node a: nodes b and c come up (through c, which
 * knows both), b's earlier registration of "contested" beats a's, a change
 * goes out from a, one from b is applied on a, c goes down. Every probe
 * fires and shows in the output. */
static void test_bridge_probes(void **state)
{
	struct fixture *f = *state;
	char dir_b[600], dir_c[600], *out;
	procreg_t *reg_b, *reg_c;

	snprintf(dir_b, sizeof(dir_b), "%s/b", f->dir);
	snprintf(dir_c, sizeof(dir_c), "%s/c", f->dir);
	assert_int_equal(mkdir(dir_b, 0755), 0);
	assert_int_equal(mkdir(dir_c, 0755), 0);
	start_node(&node_b, dir_b, "b", listen_b, NULL);
	reg_b = th_open(dir_b);
	assert_non_null(reg_b);
	/* b first: the earlier registration wins when they meet. */
	assert_int_equal(procreg_register(reg_b, "contested", NULL, 0), 0);
	th_msleep(5);
	assert_int_equal(procreg_register(f->reg, "contested", NULL, 0), 0);

	tracer_start(f, (const char *const[]){ "bridge", "--changes", "--interval", "600", NULL });
	start_node(&node_c, dir_c, "c", listen_c, (const char *const[]){ listen_a, listen_b, NULL });
	reg_c = th_open(dir_c);
	assert_non_null(reg_c);
	wait_name(f->reg, "contested", true);
	assert_int_equal(procreg_register(f->reg, "trace.out", NULL, 0), 0);
	wait_name(reg_b, "trace.out", true);
	assert_int_equal(procreg_register(reg_b, "trace.in", NULL, 0), 0);
	wait_name(f->reg, "trace.in", true);
	assert_int_equal(procreg_register(reg_c, "trace.c", NULL, 0), 0);
	wait_name(f->reg, "trace.c", true);
	procreg_close(reg_c);
	assert_int_equal(th_daemon_stop(&node_c), 0);
	wait_name(f->reg, "trace.c", false);
	/* The daemon fires bridge_node after it has taken c's entries out of
	 * the table, so a reader can see them gone before the event is in the
	 * ring buffer: stopping the tracer then would lose it. */
	th_until(c_down_shown, f->out, 10000);
	out = tracer_stop(f);
	procreg_close(reg_b);

	if (!has_line(out, (const char *const[]){ "node-up", "node b (incarnation ", NULL }) ||
	    !has_line(out, (const char *const[]){ "node-up", "node c (incarnation ", NULL }) ||
	    !has_line(out, (const char *const[]){ "node-conflict", "name contested: node b's "
			"registration wins over node a's (the local owner loses it)", NULL }) ||
	    !has_line(out, (const char *const[]){ "out", "put name trace.out (", NULL }) ||
	    !has_line(out, (const char *const[]){ "out", "del name contested (", NULL }) ||
	    !has_line(out, (const char *const[]){ "apply", "from b put name trace.in", NULL }) ||
	    !has_line(out, (const char *const[]){ "apply", "from c put name trace.c", NULL }) ||
	    !has_line(out, (const char *const[]){ "node-down", "node c: ", "entries removed", NULL }) ||
	    !has_line(out, (const char *const[]){ "changes out ", "frames in ", "entries applied ",
			NULL }) ||
	    samples(out, "frame in (received to applied)") <= 0)
		fail_msg("procreg-trace bridge: a bridge probe is missing from its output:\n%s", out);
	free(out);
}

int main(void)
{
	/* worker_exec()'s worker: its registry's lookups, told by fds 0, 1. */
	if (getenv("TRACE_WORKER_DIR")) {
		struct worker w = { .dir = getenv("TRACE_WORKER_DIR"), .go = { 0, -1 },
				    .done = { -1, 1 } };

		return worker_main(&w);
	}

	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_top_counts_lookups_and_misses, setup, teardown),
		cmocka_unit_test_setup_teardown(test_options, setup, teardown),
		cmocka_unit_test_setup_teardown(test_top_scoped_to_registry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_top_counts_short_lived_clients, setup, teardown),
		cmocka_unit_test_setup_teardown(test_events_show_a_killed_process, setup, teardown),
		cmocka_unit_test_setup_teardown(test_events_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lat_histograms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_duration_and_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_events_hostile_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_events_json_hostile_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_top_hostile_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bridge_probes, setup_bridge, teardown_bridge),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
