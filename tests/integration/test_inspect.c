/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_inspect.c - process-level tests of the inspection commands (top,
 * readers, check, stats --format prometheus) and of run/join starting a
 * daemon when none serves the scope.
 *
 * Every check is of what the commands print and their exit status: rates
 * are checked for their presence and format, never their value.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"

#define A(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define WAIT_MS 20000

struct fx {
	char *dir;
	struct th_daemon d;
	procreg_t *reg;
	pid_t kids[4];
	int nkids;
	pid_t adopted;          /* an autostarted daemon, reparented to us */
	struct th_out *o;
};

static int setup_bare(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->o = calloc(1, sizeof(*f->o));
	assert_non_null(f->o);
	f->dir = th_mkdtemp();
	*state = f;
	return 0;
}

static int setup(void **state)
{
	struct fx *f;

	setup_bare(state);
	f = *state;
	/* A small table: check copies it. */
	if (th_daemon_start(&f->d, f->dir, A("--max-size", "4M"), NULL) != 0) {
		th_daemon_dump_log(&f->d);
		fail_msg("procregd did not start");
	}
	f->reg = th_open(f->dir);
	assert_non_null(f->reg);
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int st = 0;

	for (int i = 0; i < f->nkids; i++) {
		kill(f->kids[i], SIGKILL);
		th_wait(f->kids[i]);
	}
	if (f->reg)
		procreg_close(f->reg);
	if (f->d.pid)
		st = th_daemon_stop(&f->d);
	if (f->adopted) {
		kill(f->adopted, SIGTERM);
		st = st ?: th_wait(f->adopted);
	}
	th_rmrf(f->dir);
	free(f->dir);
	free(f->o);
	free(f);
	assert_int_equal(st, 0);
	return 0;
}

/* procreg --dir DIR ARGS..., with extra environment ENV. */
static int cli_env(struct fx *f, const char *dir, const char *const *env, const char *const *args)
{
	const char *argv[64];

	th_cli_argv(argv, 64, dir, args);
	return th_run(f->o, env, argv);
}

static int cli(struct fx *f, const char *const *args)
{
	return cli_env(f, f->dir, NULL, args);
}

#define expect_st(f, st, want)                                                         \
	do {                                                                           \
		int st_ = (st);                                                        \
		if (st_ != (want))                                                     \
			fail_msg("procreg exited %d, expected %d; stdout:\n%s\nstderr:\n%s", \
				 st_, (int)(want), (f)->o->out, (f)->o->err);             \
	} while (0)

/* The JSON object in S that contains KEY (e.g. "\"pid\":42,"): a copy of
 * it, from its '{' to its '}' (objects here hold no nested objects). */
static char *object_with(const char *s, const char *key)
{
	const char *k = strstr(s, key), *b, *e;

	if (!k)
		return NULL;
	for (b = k; b > s && *b != '{'; b--)
		;
	e = strchr(k, '}');
	assert_non_null(e);
	return strndup(b, (size_t)(e - b + 1));
}

/* ---- a reader child --------------------------------------------------- */

struct reader_arg {
	const char *dir;
	int lookups;
	bool hold;          /* stay inside a critical section */
	int ready;          /* write end: one byte once done */
};

static int reader_main(void *p)
{
	struct reader_arg *a = p;
	procreg_t *reg = th_open(a->dir);
	char c = 1;

	if (!reg)
		return 3;
	for (int i = 0; i < a->lookups; i++)
		procreg_lookup(reg, "i.name", NULL);
	if (a->hold) {
		/* A lookup stopped half-way: what a debugger or SIGSTOP does. */
		struct pr_reader_slot *s = procreg__rcu_slot(&reg->rcu);

		if (!s)
			return 4;
		pr_read_lock(&reg->map, s);
	}
	if (write(a->ready, &c, 1) != 1)
		return 5;
	pause();
	return 0;
}

static pid_t start_reader(struct fx *f, int lookups, bool hold)
{
	struct reader_arg a = { .dir = f->dir, .lookups = lookups, .hold = hold };
	int p[2];
	char c;
	pid_t pid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	a.ready = p[1];
	pid = th_fork(reader_main, &a);
	assert_true(pid > 0);
	close(p[1]);
	f->kids[f->nkids++] = pid;
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

static void kill_kid(struct fx *f, pid_t pid)
{
	for (int i = 0; i < f->nkids; i++)
		if (f->kids[i] == pid)
			f->kids[i] = f->kids[--f->nkids];
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(th_wait(pid), 128 + SIGKILL);
}

static void reg_name(procreg_t *reg, const char *name)
{
	int err = procreg_register(reg, name, "m", 1);

	if (err)
		fail_msg("register %s: %s", name, procreg_strerror(err));
}

static void wait_entry(struct fx *f, pid_t pid, uint64_t lookups, bool stalled, bool gone);

/* ---- top -------------------------------------------------------------- */

static void test_top_once_json(void **state)
{
	struct fx *f = *state;
	char key[256], *obj;
	pid_t r1;

	reg_name(f->reg, "i.name");
	reg_name(f->reg, "i.other");
	assert_int_equal(procreg_join(f->reg, "i.group", "", 0), 0);
	r1 = start_reader(f, 1000, false);
	/* The daemon sums each reader's slots about once a second. */
	wait_entry(f, r1, 1000, false, false);

	expect_st(f, cli(f, A("top", "--once", "--json", "--interval", "0.05")), 0);
	/* One object, one line. */
	assert_int_equal(f->o->out[0], '{');
	assert_non_null(strchr(f->o->out, '\n'));
	assert_string_equal(strchr(f->o->out, '\n'), "\n");
	th_expect_in(f->o->out, "\"interval_s\":");
	th_expect_in(f->o->out, "\"scope\":\"default\",");
	snprintf(key, sizeof(key), "\"daemon_pid\":%d,", (int)f->d.pid);
	th_expect_in(f->o->out, key);
	th_expect_in(f->o->out, ",\"names\":2,");
	th_expect_in(f->o->out, ",\"groups\":1,");
	th_expect_in(f->o->out, ",\"memberships\":1,");
	th_expect_in(f->o->out, ",\"processes\":1,");
	th_expect_in(f->o->out, ",\"registrations\":2,\"registrations_per_s\":");
	th_expect_in(f->o->out, ",\"deaths\":0,\"deaths_per_s\":");
	th_expect_in(f->o->out, ",\"grace_periods_per_s\":");
	th_expect_in(f->o->out, ",\"arena_used\":");
	th_expect_in(f->o->out, ",\"lookups_per_s\":");
	/* The reader process, with its own lookups counted in its slot. */
	snprintf(key, sizeof(key), "{\"pid\":%d,", (int)r1);
	obj = object_with(f->o->out, key);
	if (!obj)
		fail_msg("reader %d not in top's readers:\n%s", (int)r1, f->o->out);
	th_expect_in(obj, "\"comm\":\"test_inspect\",\"threads\":1,\"lookups\":1000,\"lookups_per_s\":");
	free(obj);

	/* Text: one frame, the same numbers. */
	expect_st(f, cli(f, A("top", "--once", "--interval", "0.05")), 0);
	th_expect_in(f->o->out, "names 2  groups 1  memberships 1  processes 1\n");
	th_expect_in(f->o->out, "registrations/s ");
	th_expect_in(f->o->out, "deaths/s ");
	th_expect_in(f->o->out, "grace periods/s ");
	snprintf(key, sizeof(key), "%8d %7u %14llu ", (int)r1, 1u, 1000ull);
	th_expect_in(f->o->out, key);
	assert_null(strstr(f->o->out, "\033[")); /* piped: no screen control */

	expect_st(f, cli(f, A("top", "--interval", "0")), 2);
	expect_st(f, cli(f, A("top", "x")), 2);
	kill_kid(f, r1);
}

/* ---- readers ---------------------------------------------------------- */

/* The registry entry the daemon wrote for PID, as procreg readers reads
 * it (a copy; pid 0 if there is none). */
static struct pr_reader_info entry_of(struct fx *f, pid_t pid)
{
	const struct pr_table_hdr *h = f->reg->map.hdr;
	const struct pr_reader_info *v =
		(const struct pr_reader_info *)(f->reg->map.base + h->readers_off);
	struct pr_reader_info x = { 0 };

	for (uint32_t i = 0; i < h->readers_cap; i++) {
		uint32_t seq = PR_LOAD_ACQ(&v[i].seq);

		memcpy(&x, &v[i], sizeof(x));
		cmm_smp_rmb();
		if (!(seq & 1) && CMM_LOAD_SHARED(v[i].seq) == seq && x.pid == (uint32_t)pid)
			return x;
	}
	memset(&x, 0, sizeof(x));
	return x;
}

struct want_entry {
	struct fx *f;
	pid_t pid;
	uint64_t lookups;
	bool stalled, gone;
};

static int entry_is(void *p)
{
	struct want_entry *w = p;
	struct pr_reader_info e = entry_of(w->f, w->pid);

	if (w->gone)
		return e.pid == 0;
	return e.pid == (uint32_t)w->pid && e.lookups == w->lookups &&
	       !!(e.flags & PR_READER_STALLED) == w->stalled;
}

static void wait_entry(struct fx *f, pid_t pid, uint64_t lookups, bool stalled, bool gone)
{
	struct want_entry w = { f, pid, lookups, stalled, gone };

	if (!th_until(entry_is, &w, WAIT_MS)) {
		th_daemon_dump_log(&f->d);
		fail_msg("reader %d: registry never showed lookups %llu%s%s", (int)pid,
			 (unsigned long long)lookups, stalled ? ", stalled" : "", gone ? ", gone" : "");
	}
}

static void test_readers(void **state)
{
	struct fx *f = *state;
	char key[256], *obj;
	pid_t idle, held;

	reg_name(f->reg, "i.name");
	expect_st(f, cli(f, A("readers", "--json")), 0);
	assert_string_equal(f->o->out,
			    "{\"max_readers\":4096,\"stalls\":0,\"refused\":0,\"readers\":[]}\n");

	idle = start_reader(f, 500, false);
	held = start_reader(f, 7, true);
	/* The daemon sums each reader's slots about once a second. */
	wait_entry(f, idle, 500, false, false);
	wait_entry(f, held, 7, false, false);
	/* Retire memory so that the daemon starts a grace period: the held
	 * reader holds it up until the daemon stops waiting for it
	 * (--reader-timeout-ms, here the default 1000). */
	reg_name(f->reg, "i.gone");
	assert_int_equal(procreg_unregister(f->reg, "i.gone"), 0);
	wait_entry(f, held, 7, true, false);

	expect_st(f, cli(f, A("readers", "--json")), 0);
	th_expect_in(f->o->out, "{\"max_readers\":4096,\"stalls\":1,\"refused\":0,\"readers\":[");
	snprintf(key, sizeof(key), "{\"pid\":%d,", (int)idle);
	obj = object_with(f->o->out, key);
	assert_non_null(obj);
	th_expect_in(obj, "\"uid\":0,\"comm\":\"test_inspect\",\"threads\":1,"
		       "\"in_critical_section\":0,\"pages\":1,\"lookups\":500,\"stalled\":false,"
		       "\"stalled_ns\":0,");
	free(obj);
	snprintf(key, sizeof(key), "{\"pid\":%d,", (int)held);
	obj = object_with(f->o->out, key);
	assert_non_null(obj);
	th_expect_in(obj, "\"uid\":0,\"comm\":\"test_inspect\",\"threads\":1,"
		       "\"in_critical_section\":1,\"pages\":1,\"lookups\":7,\"stalled\":true,");
	assert_null(strstr(obj, "\"stalled_ns\":0,"));
	free(obj);
	/* Named where an administrator looks: the log, and stats. */
	snprintf(key, sizeof(key), "reader pid %d (uid 0) has held a grace period up for ",
		 (int)held);
	assert_true(th_log_has(f->d.log, key));
	expect_st(f, cli(f, A("stats")), 0);
	snprintf(key, sizeof(key), "reader_stalls      1 (last: pid %d, uid 0, ", (int)held);
	th_expect_in(f->o->out, key);
	th_expect_in(f->o->out, "readers_stalled    1\n");
	expect_st(f, cli(f, A("stats", "--json")), 0);
	snprintf(key, sizeof(key), "\"readers_stalled\":1,\"reader_stalls\":1,"
		 "\"readers_refused\":0,\"last_stall\":{\"pid\":%d,\"uid\":0,", (int)held);
	th_expect_in(f->o->out, key);

	/* Text, piped: no header, one line per reader process. */
	expect_st(f, cli(f, A("readers")), 0);
	snprintf(key, sizeof(key), "%8d %8u %7u %4u %5u %12llu %-7s  test_inspect\n", (int)idle, 0u,
		 1u, 0u, 1u, 500ull, "-");
	th_expect_in(f->o->out, key);
	snprintf(key, sizeof(key), "%8d %8u %7u %4u %5u %12llu %-7s  test_inspect\n", (int)held, 0u,
		 1u, 1u, 1u, 7ull, "yes");
	th_expect_in(f->o->out, key);

	/* A reader that exits is dropped, inside its section or not. */
	kill_kid(f, held);
	wait_entry(f, held, 0, false, true);
	/* A daemon that stops waits for nobody: the registry says so, while
	 * the reader reads on. */
	assert_int_equal(th_daemon_stop(&f->d), 0);
	expect_st(f, cli(f, A("readers", "--json")), 0);
	th_expect_in(f->o->out, "\"readers\":[]}\n");
	expect_st(f, cli(f, A("readers", "x")), 2);
	kill_kid(f, idle);
}

/*
 * A reader that opened its handle while no daemon ran reads all the same
 * (nothing is freed while none runs), and hands its page to the daemon
 * that starts next, at its next read; a daemon killed and started again
 * gets it the same way (the registry is emptied at start: the new daemon
 * holds no page yet).
 */
struct looker_arg {
	const char *dir;
	int cmd, rep;
	int not_ours[2];    /* the parent's ends */
};

static int looker_main(void *p)
{
	struct looker_arg *a = p;
	procreg_t *reg = th_open(a->dir);
	char c;

	close(a->not_ours[0]);
	close(a->not_ours[1]);
	if (!reg)
		return 3;
	/* One lookup per byte read; its result back. */
	while (read(a->cmd, &c, 1) == 1) {
		c = (char)(procreg_lookup(reg, "i.name", NULL) == 0);
		if (write(a->rep, &c, 1) != 1)
			return 4;
	}
	procreg_close(reg);
	return 0;
}

static int look(int cmd, int rep)
{
	char c = 1;

	assert_int_equal(write(cmd, &c, 1), 1);
	assert_int_equal(read(rep, &c, 1), 1);
	return c;
}

static void test_readers_across_restarts(void **state)
{
	struct fx *f = *state;
	struct looker_arg a = { f->dir, -1, -1, { -1, -1 } };
	int cmd[2], rep[2];
	pid_t kid;

	reg_name(f->reg, "i.name");
	assert_int_equal(th_daemon_stop(&f->d), 0);
	assert_int_equal(pipe2(cmd, O_CLOEXEC), 0);
	assert_int_equal(pipe2(rep, O_CLOEXEC), 0);
	a.cmd = cmd[0];
	a.rep = rep[1];
	a.not_ours[0] = cmd[1];
	a.not_ours[1] = rep[0];
	kid = th_fork(looker_main, &a);
	assert_true(kid > 0);
	f->kids[f->nkids++] = kid;
	close(cmd[0]);
	close(rep[1]);
	/* Opened and reading with no daemon: the name is there. */
	assert_int_equal(look(cmd[1], rep[0]), 1);
	assert_int_equal(entry_of(f, kid).pid, 0);

	assert_int_equal(th_daemon_start(&f->d, f->dir, A("--max-size", "4M"), NULL), 0);
	assert_int_equal(look(cmd[1], rep[0]), 1);
	wait_entry(f, kid, 2, false, false);

	/* Killed: nothing cleans the registry up; the next daemon does. */
	th_daemon_kill(&f->d);
	assert_int_equal(th_daemon_start(&f->d, f->dir, A("--max-size", "4M"), NULL), 0);
	assert_int_equal(f->reg->map.hdr->readers_live, 0);
	assert_int_equal(entry_of(f, kid).pid, 0);
	assert_int_equal(look(cmd[1], rep[0]), 1);
	wait_entry(f, kid, 3, false, false);

	close(cmd[1]);
	close(rep[0]);
	for (int i = 0; i < f->nkids; i++)
		if (f->kids[i] == kid)
			f->kids[i] = f->kids[--f->nkids];
	assert_int_equal(th_wait(kid), 0);
}

/* ---- check ------------------------------------------------------------ */

static uint64_t peek(const char *path, uint64_t off)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint64_t v = 0;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &v, sizeof(v), (off_t)off), (ssize_t)sizeof(v));
	close(fd);
	return v;
}

static void test_check(void **state)
{
	struct fx *f = *state;
	char table[600], d1[600], d2[600], msg[800];
	uint64_t ix, cap, p, w = 0;
	char names[8][16];

	for (int i = 0; i < 8; i++) {
		snprintf(names[i], sizeof(names[i]), "c.n%d", i);
		reg_name(f->reg, names[i]);
	}
	assert_int_equal(procreg_unregister(f->reg, "c.n3"), 0);
	assert_int_equal(procreg_join(f->reg, "c.g1", "a", 1), 0);
	assert_int_equal(procreg_join(f->reg, "c.g2", "b", 1), 0);

	/* The live table: healthy. */
	expect_st(f, cli(f, A("check")), 0);
	snprintf(msg, sizeof(msg), "%s/procreg.default: ok: 7 names, 2 groups, 2 memberships, ",
		 f->dir);
	th_expect_in(f->o->out, msg);
	th_expect_in(f->o->out, "; counters agree, owners alive\n");
	/* What the walk read, and how much came through huge pages (which
	 * depends on the filesystem: ext4's page cache, for one, maps a
	 * table's first 2 MiB with one entry). */
	snprintf(msg, sizeof(msg), "%s/procreg.default: read ", f->dir);
	th_expect_in(f->o->out, msg);
	th_expect_in(f->o->out, " MiB through huge pages\n");
	expect_st(f, cli(f, A("check", "--json")), 0);
	th_expect_in(f->o->out, "{\"ok\":true,\"table\":");
	th_expect_in(f->o->out, ",\"names\":7,\"groups\":2,\"memberships\":2,");
	th_expect_in(f->o->out, ",\"processes\":1,");
	th_expect_in(f->o->out, ",\"huge_kib\":");
	assert_non_null(strstr(f->o->out, ",\"read_kib\":"));
	assert_null(strstr(f->o->out, ",\"read_kib\":0,"));
	th_expect_in(f->o->out, "\"problems\":[],\"problems_not_shown\":0}\n");

	/* A copy (no daemon there): healthy too. */
	th_copy_table(f->dir, "copy1", table, sizeof(table));
	snprintf(d1, sizeof(d1), "%s/copy1", f->dir);
	expect_st(f, cli_env(f, d1, NULL, A("check")), 0);
	/* Reached through a symbolic link, with a slash too many: smaps
	 * names the file by the kernel's path, and the line is still said. */
	snprintf(d2, sizeof(d2), "%s/link", f->dir);
	assert_int_equal(symlink(d1, d2), 0);
	strcat(d2, "/");
	expect_st(f, cli_env(f, d2, NULL, A("check")), 0);
	th_expect_in(f->o->out, " MiB through huge pages\n");

	/* Damage 1: a counter that disagrees with the index. */
	th_poke_u64(table, offsetof(struct pr_table_hdr, names.live), 9);
	expect_st(f, cli_env(f, d1, NULL, A("check")), 1);
	th_expect_in(f->o->out, "name index: counter says 9 live entries, the walk found 7\n");
	th_expect_in(f->o->out, ": DAMAGED: 7 names");
	expect_st(f, cli_env(f, d1, NULL, A("check", "--json")), 1);
	th_expect_in(f->o->out, "{\"ok\":false,");
	th_expect_in(f->o->out, "\"problems\":[\"name index: counter says 9 live entries, the walk found 7\"]");

	/* Damage 2: a slot word that points past the arena. */
	th_copy_table(f->dir, "copy2", table, sizeof(table));
	snprintf(d2, sizeof(d2), "%s/copy2", f->dir);
	ix = peek(table, offsetof(struct pr_table_hdr, names.index_off));
	cap = peek(table, ix + offsetof(struct pr_index, capacity));
	for (p = 0; p < cap; p++)
		if (pr_slot_live(w = peek(table, ix + sizeof(struct pr_index) +
						    p * sizeof(struct pr_slot))))
			break;
	assert_true(p < cap);
	th_poke_u64(table, ix + sizeof(struct pr_index) + p * sizeof(struct pr_slot),
		    (w & ~0xffffffffull) |
			    (peek(table, offsetof(struct pr_table_hdr, file_size)) + 4096) / PR_ALIGN);
	expect_st(f, cli_env(f, d2, NULL, A("check")), 1);
	snprintf(msg, sizeof(msg), "name index slot %llu: record offset ", (unsigned long long)p);
	th_expect_in(f->o->out, msg);
	th_expect_in(f->o->out, "outside the arena");
	th_expect_in(f->o->out, "name index: counter says 7 live entries, the walk found 6\n");

	expect_st(f, cli(f, A("check", "x")), 2);
}

/* ---- stats --format prometheus ---------------------------------------- */

/* This process is in the table's reader registry. */
static int reader_known(void *p)
{
	struct fx *f = p;
	PROCREG_OPTS(procreg_entry, e);

	procreg_lookup(f->reg, "p.one", &e);
	return th_reader_listed(&(struct th_reader_wait){ f->reg, getpid() });
}

static void test_prometheus(void **state)
{
	struct fx *f = *state;

	reg_name(f->reg, "p.one");
	expect_st(f, cli(f, A("stats", "--format", "prometheus")), 0);
	th_expect_in(f->o->out, "# HELP procreg_names Names registered.\n# TYPE procreg_names gauge\n"
			     "procreg_names{scope=\"default\"} 1\n");
	th_expect_in(f->o->out, "# TYPE procreg_registrations_total counter\n"
			     "procreg_registrations_total{scope=\"default\"} 1\n");
	th_expect_in(f->o->out, "procreg_daemon_up{scope=\"default\"} 1\n");
	/* Sizes in bytes say so; when the daemon started; each reader
	 * process's lookups (this one's, once the daemon has its pages). */
	th_expect_in(f->o->out, "# TYPE procreg_arena_size_bytes gauge\n"
			     "procreg_arena_size_bytes{scope=\"default\"} ");
	th_expect_in(f->o->out, "\nprocreg_arena_used_bytes{scope=\"default\"} ");
	th_expect_in(f->o->out, "\nprocreg_arena_top_bytes{scope=\"default\"} ");
	assert_null(strstr(f->o->out, "procreg_arena_size{"));
	{
		PROCREG_OPTS(procreg_stats, st);
		char want[160];

		assert_int_equal(procreg_stats(f->reg, &st), 0);
		snprintf(want, sizeof(want), "\nprocreg_daemon_start_time_seconds{scope=\"default\"} "
			 "%.3f\n", (double)st.daemon_started_ns / 1e9);
		th_expect_in(f->o->out, want);
		assert_true(th_until(reader_known, f, WAIT_MS));
		expect_st(f, cli(f, A("stats", "--format", "prometheus")), 0);
		snprintf(want, sizeof(want), "\nprocreg_reader_lookups_total{scope=\"default\","
			 "pid=\"%d\"} ", (int)getpid());
		th_expect_in(f->o->out, want);
	}
	/* Every sample line is NAME{scope="default"[,pid="N"]} VALUE. */
	for (char *l = f->o->out; *l; l = strchr(l, '\n') + 1) {
		char name[128], rest[64];
		double v;
		int pid;

		if (*l == '#')
			continue;
		if (sscanf(l, "procreg_%127[a-z_]{scope=\"default\"} %lf\n", name, &v) != 2 &&
		    (sscanf(l, "procreg_%127[a-z_]{scope=\"default\",pid=\"%d\"} %63s", name, &pid,
			    rest) != 3 || strcmp(name, "reader_lookups_total")))
			fail_msg("not a sample line: %.*s", (int)strcspn(l, "\n"), l);
	}
	expect_st(f, cli(f, A("stats", "--format=json")), 0);
	th_expect_in(f->o->out, "\"names\":1,");
	expect_st(f, cli(f, A("stats", "--format", "xml")), 2);
}

/* ---- autostart -------------------------------------------------------- */

static int named(void *p)
{
	struct fx *f = p;

	if (!f->reg && !(f->reg = th_open(f->dir)))
		return 0;
	return procreg_lookup(f->reg, "auto.x", NULL) == 0;
}

static pid_t spawn_cli(struct fx *f, const char *const *env, const char *const *args)
{
	const char *argv[32];
	pid_t pid;

	th_cli_argv(argv, 32, f->dir, args);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(null, 1);
		dup2(null, 2);
		th_apply_env(env);
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	f->kids[f->nkids++] = pid;
	return pid;
}

static void test_autostart(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_stats, s);
	char table[600];
	pid_t run, daemon;

	/* The daemon detaches from the command that starts it; as a
	 * subreaper, this test inherits it and can reap it. */
	assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	snprintf(table, sizeof(table), "%s/procreg.default", f->dir);

	/* Turned off: no daemon, no table, the old error. */
	expect_st(f, cli_env(f, f->dir, A("PROCREG_NO_AUTOSTART=1"), A("run", "x", "--", "true")), 2);
	th_expect_in(f->o->err, "no registry for scope 'default'");
	expect_st(f, cli_env(f, f->dir, A("PROCREG_NO_AUTOSTART"),
			     A("run", "--no-autostart", "x", "--", "true")), 2);
	assert_int_equal(access(table, F_OK), -1);

	/* run starts one, which outlives it. */
	run = spawn_cli(f, A("PROCREG_NO_AUTOSTART"), A("run", "auto.x", "--", "sleep", "60"));
	assert_true(th_until(named, f, WAIT_MS));
	procreg_stats(f->reg, &s);
	daemon = s.daemon_pid;
	assert_true(daemon > 0);
	assert_int_not_equal(daemon, run);
	f->adopted = daemon;
	kill_kid(f, run);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "auto.x", NULL), -ENOENT);
	assert_int_equal(kill(daemon, 0), 0);
	procreg_stats(f->reg, &s);
	assert_int_equal(s.daemon_pid, daemon);
	assert_int_equal(s.deaths, 1);

	/* A daemon that serves is used, not doubled. */
	expect_st(f, cli_env(f, f->dir, A("PROCREG_NO_AUTOSTART=0"),
			     A("join", "auto.g", "--", "true")), 0);
	procreg_stats(f->reg, &s);
	assert_int_equal(s.daemon_pid, daemon);
	assert_int_equal(s.joins, 1);

	/* Stopped: join starts another. */
	assert_int_equal(kill(daemon, SIGTERM), 0);
	assert_int_equal(th_wait(daemon), 0);
	f->adopted = 0;
	expect_st(f, cli_env(f, f->dir, A("PROCREG_NO_AUTOSTART"),
			     A("join", "auto.g", "--", "true")), 0);
	procreg_stats(f->reg, &s);
	assert_true(s.daemon_pid > 0);
	assert_int_not_equal(s.daemon_pid, daemon);
	f->adopted = s.daemon_pid;
	assert_int_equal(s.joins, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_top_once_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readers_across_restarts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_check, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prometheus, setup, teardown),
		cmocka_unit_test_setup_teardown(test_autostart, setup_bare, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
