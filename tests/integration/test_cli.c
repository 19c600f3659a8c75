/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_cli.c - process-level tests of the procreg command-line interface
 * against a real procregd: exit statuses, and the exact text and JSON it
 * prints (every field, except the ages and uptimes, which are checked for
 * their format only).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "layout.h"

/* A NULL-terminated argument or environment list. */
#define A(...) ((const char *const[]){ __VA_ARGS__, NULL })

#define WAIT_MS 20000 /* bound of every poll loop */
#define CLI_MS 60000  /* bound of one CLI command */
#define MAX_KIDS 8

struct res {
	int st;
	char out[65536];
	char err[8192];
};

struct fx {
	char *dir;
	struct th_daemon d;
	struct th_daemon other; /* a second daemon, scope "other" */
	procreg_t *reg;
	pid_t kids[MAX_KIDS];   /* "procreg run" children still alive */
	int nkids;
	struct res *r, *r2;     /* CLI results (freed even when a test fails) */
};

static int setup_bare(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->r = calloc(1, sizeof(*f->r));
	f->r2 = calloc(1, sizeof(*f->r2));
	assert_non_null(f->r);
	assert_non_null(f->r2);
	f->dir = th_mkdtemp();
	*state = f;
	return 0;
}

static int setup(void **state)
{
	struct fx *f;

	setup_bare(state);
	f = *state;
	if (th_daemon_start(&f->d, f->dir, NULL, NULL) != 0) {
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
	int st_other = 0, st = 0;

	for (int i = 0; i < f->nkids; i++) {
		kill(f->kids[i], SIGKILL);
		th_wait(f->kids[i]);
	}
	if (f->reg)
		procreg_close(f->reg);
	if (f->other.pid)
		st_other = th_daemon_stop(&f->other);
	if (f->d.pid)
		st = th_daemon_stop(&f->d);
	if (st || st_other) {
		th_daemon_dump_log(&f->d);
		th_daemon_dump_log(&f->other);
	}
	th_rmrf(f->dir);
	free(f->dir);
	free(f->r);
	free(f->r2);
	free(f);
	/* A clean exit: SIGTERM handled, and no sanitizer report. */
	assert_int_equal(st_other, 0);
	assert_int_equal(st, 0);
	return 0;
}

/* ---- running the CLI -------------------------------------------------- */

static struct res *last_res;

/*
 * Like th_cli, but captures stderr too and takes extra environment ENV
 * ("K=V", NULL-terminated, may be NULL). DIR NULL: no --dir option.
 */
static int cli_env(struct res *r, const char *dir, const char *const *env,
		   const char *const *args)
{
	const char *argv[64];

	th_cli_argv(argv, 64, dir, args);
	r->st = th_run_into(r->out, sizeof(r->out), r->err, sizeof(r->err), CLI_MS, env, argv);
	last_res = r;
	return r->st;
}

/* An exit status, with the CLI's stderr when it is not the one expected. */
#define expect_st(st, want)                                                        \
	do {                                                                       \
		int st_ = (st);                                                    \
		if (st_ != (want))                                                 \
			fail_msg("procreg exited %d, expected %d; stderr:\n%s", st_, \
				 (int)(want), last_res->err);                     \
	} while (0)

static int cli(struct res *r, const char *dir, const char *const *args)
{
	return cli_env(r, dir, NULL, args);
}

/* Start "procreg --dir DIR ARGS..." without waiting for it (for "run"). */
static pid_t spawn_cli(struct fx *f, const char *const *args)
{
	const char *argv[64];
	pid_t pid;

	assert_true(f->nkids < MAX_KIDS);
	th_cli_argv(argv, 64, f->dir, args);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		if (null >= 0)
			dup2(null, 1);
		unsetenv("PROCREG_DIR");
		unsetenv("PROCREG_SCOPE");
		unsetenv("PROCREG_SOCKET");
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	f->kids[f->nkids++] = pid;
	return pid;
}

static void forget_kid(struct fx *f, pid_t pid)
{
	for (int i = 0; i < f->nkids; i++)
		if (f->kids[i] == pid) {
			f->kids[i] = f->kids[--f->nkids];
			return;
		}
}

/* SIGKILL a "run" child and reap it. */
static void kill_kid(struct fx *f, pid_t pid)
{
	forget_kid(f, pid);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(th_wait(pid), 128 + SIGKILL);
}

/* Wait until NAME is registered to PID in REG; fail if PID exits first. */
static void wait_owned(struct fx *f, procreg_t *reg, const char *name, pid_t pid)
{
	TH_ENTRY(e);
	int st;

	for (int i = 0; i < WAIT_MS; i++) {
		if (procreg_lookup(reg, name, &e) == 0 && e.pid == pid)
			return;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			forget_kid(f, pid);
			fail_msg("procreg run exited (status 0x%x) before registering %s", st, name);
		}
		th_msleep(1);
	}
	fail_msg("%s was not registered to pid %d", name, (int)pid);
}

/* Read a small file whole; 0 if it does not exist yet. */
static int slurp(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, buf, cap - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return 1;
}

/* Wait until /proc/PID/comm reads COMM (the exec has happened). */
static void wait_comm(pid_t pid, const char *comm)
{
	char path[64], buf[64], want[64];

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	snprintf(want, sizeof(want), "%s\n", comm);
	for (int i = 0; i < WAIT_MS; i++) {
		if (slurp(path, buf, sizeof(buf)) && !strcmp(buf, want))
			return;
		th_msleep(1);
	}
	slurp(path, buf, sizeof(buf));
	fail_msg("/proc/%d/comm is '%s', expected '%s'", (int)pid, buf, comm);
}

/* Wait until PATH holds a complete line; return its contents. */
static void wait_line(const char *path, char *buf, size_t cap)
{
	for (int i = 0; i < WAIT_MS; i++) {
		if (slurp(path, buf, cap) && strchr(buf, '\n'))
			return;
		th_msleep(1);
	}
	fail_msg("%s never got a line", path);
}

/* Start procregd for SCOPE in DIR, its log DIR/procregd.SCOPE.log. */
static void start_scope(struct th_daemon *d, const char *dir, const char *scope)
{
	char log[300];

	snprintf(log, sizeof(log), "%s/procregd.%s.log", dir, scope);
	if (th_daemon_start_scope(d, dir, scope, log, NULL, NULL) != 0) {
		th_daemon_dump_log(d);
		fail_msg("procregd --scope %s did not start", scope);
	}
}

/* ---- checking output -------------------------------------------------- */

/* S must start with PREFIX: return what follows. */
static const char *expect_prefix(const char *s, const char *prefix)
{
	size_t n = strlen(prefix);

	if (strncmp(s, prefix, n))
		fail_msg("output differs:\nexpected: %s\n     got: %s", prefix, s);
	return s + n;
}

/* A non-negative decimal with exactly FRAC digits after the point. */
static const char *expect_decimal(const char *s, int frac)
{
	const char *p = s;

	while (*p >= '0' && *p <= '9')
		p++;
	if (p == s || *p != '.')
		fail_msg("expected a decimal number at: %s", s);
	for (int i = 0; i < frac; i++)
		if (*++p < '0' || *p > '9')
			fail_msg("expected %d decimals at: %s", frac, s);
	return p + 1;
}

/* An age as the human output prints it: 1.5s, 2m03s, 4h05m, 6d07h. */
static const char *expect_age(const char *s)
{
	const char *p = s;

	while ((*p >= '0' && *p <= '9') || *p == '.' || *p == 's' || *p == 'm' || *p == 'h' ||
	       *p == 'd')
		p++;
	if (p == s || (p[-1] != 's' && p[-1] != 'm' && p[-1] != 'h'))
		fail_msg("expected an age at: %s", s);
	return p;
}

/* The start of the JSON object procreg prints for E, up to its "age_s"
 * value; KEY names E's name ("name", "group") and TIME_KEY its time
 * ("registered_ns", "joined_ns"). Returns what follows the age. */
static const char *expect_json_head(const char *s, const struct procreg_entry *e,
				    const char *key, const char *time_key)
{
	char buf[2048];

	snprintf(buf, sizeof(buf),
		 "{\"%s\":\"%s\",\"pid\":%d,\"node\":0,\"uid\":%u,\"start_time\":%llu,"
		 "\"%s\":%llu,\"age_s\":",
		 key, e->name, (int)e->pid, e->uid, (unsigned long long)e->start_time, time_key,
		 (unsigned long long)e->registered_ns);
	s = expect_prefix(s, buf);
	return expect_decimal(s, 3);
}

/* The AGE column (%8s) and the metadata that end a line of ls or
 * members; return the next line. */
static const char *expect_age_meta(const char *s, const char *meta_text)
{
	const char *age = s;
	char buf[2048];

	while (*s == ' ')
		s++;
	s = expect_age(s);
	assert_true(s - age >= 8); /* %8s */
	assert_true(s - age == 8 || age[0] != ' ');
	snprintf(buf, sizeof(buf), "  %s\n", meta_text);
	return expect_prefix(s, buf);
}

/* The JSON object procreg prints for E, with META_JSON its encoded
 * metadata; return what follows it. */
static const char *expect_entry_json(const char *s, const struct procreg_entry *e,
				     const char *meta_json)
{
	char buf[2048];

	s = expect_json_head(s, e, "name", "registered_ns");
	/* Entries made here carry no flags (no lease, not replaceable). */
	snprintf(buf, sizeof(buf), ",\"meta\":\"%s\",\"flags\":[]}", meta_json);
	return expect_prefix(s, buf);
}

/* The human output of "get" for E, with META_TEXT its printed metadata. */
static void expect_get_text(const char *s, const struct procreg_entry *e, const char *meta_text)
{
	char buf[2048];

	snprintf(buf, sizeof(buf), "name  %s\npid   %d\nnode  0 (local)\nuid   %u\nage   ", e->name,
		 (int)e->pid, e->uid);
	s = expect_prefix(s, buf);
	s = expect_age(s);
	snprintf(buf, sizeof(buf), "\nmeta  %s\n", meta_text);
	s = expect_prefix(s, buf);
	assert_string_equal(s, "");
}

/* One line of "ls" for E in a name column W wide; return the next line. */
static const char *expect_ls_line(const char *s, const struct procreg_entry *e, int w,
				  const char *meta_text)
{
	char buf[2048];

	snprintf(buf, sizeof(buf), "%-*s %8d %5u ", w, e->name, (int)e->pid, 0u);
	return expect_age_meta(expect_prefix(s, buf), meta_text);
}

static void lookup_ok(procreg_t *reg, const char *name, struct procreg_entry *e)
{
	int err = procreg_lookup(reg, name, e);

	if (err)
		fail_msg("lookup %s: %s", name, procreg_strerror(err));
}

static void reg_name(procreg_t *reg, const char *name, const char *meta)
{
	assert_int_equal(procreg_register(reg, name, meta, strlen(meta)), 0);
}

static void no_table_msg(char *buf, size_t len, const char *dir, const char *scope)
{
	snprintf(buf, len, "procreg: no registry for scope '%s' in %s: is procregd running?\n",
		 scope, dir);
}

/* ---- run -------------------------------------------------------------- */

static void test_run_registers_and_execs(void **state)
{
	struct fx *f = *state;
	TH_ENTRY(e1);
	TH_ENTRY(e2);
	PROCREG_OPTS(procreg_stats, st);
	struct res *r = f->r;
	char pidfile[512], script[600], buf[64];
	pid_t pid;

	snprintf(pidfile, sizeof(pidfile), "%s/pid", f->dir);
	snprintf(script, sizeof(script), "echo $$ > %s; exec sleep 30", pidfile);
	pid = spawn_cli(f, A("run", "svc.a", "svc.b", "--meta", "unix:/run/a.sock", "--", "sh", "-c",
			     script));
	wait_owned(f, f->reg, "svc.a", pid);
	wait_owned(f, f->reg, "svc.b", pid);

	/* The command runs as the very process the names belong to. */
	wait_line(pidfile, buf, sizeof(buf));
	assert_int_equal(atoi(buf), pid);
	wait_comm(pid, "sleep");

	lookup_ok(f->reg, "svc.a", &e1);
	lookup_ok(f->reg, "svc.b", &e2);
	assert_int_equal(e1.uid, getuid());
	assert_int_equal(e1.node, 0);
	assert_int_equal(e1.meta_len, strlen("unix:/run/a.sock"));
	assert_memory_equal(e1.meta, "unix:/run/a.sock", e1.meta_len);
	assert_int_equal(e2.meta_len, e1.meta_len);
	assert_int_equal(e1.start_time, e2.start_time);

	expect_st(cli(r, f->dir, A("get", "svc.a")), 0);
	expect_get_text(r->out, &e1, "unix:/run/a.sock");
	assert_string_equal(r->err, "");

	/* The names go with the process. */
	kill_kid(f, pid);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "svc.a", NULL), -ENOENT);
	assert_int_equal(procreg_lookup(f->reg, "svc.b", NULL), -ENOENT);
	expect_st(cli(r, f->dir, A("get", "svc.a")), 1);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "procreg: svc.a: not registered\n");
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.processes, 0);
	assert_int_equal(st.registrations, 2);
	assert_int_equal(st.deaths, 1);
}

static void test_run_option_forms(void **state)
{
	struct fx *f = *state;
	TH_ENTRY(e);
	char argfile[256], script[1400], buf[256];
	pid_t pid;

	/* Plain command, --meta before the command word, PATH lookup. */
	pid = spawn_cli(f, A("--meta", "m0", "run", "solo", "--", "sleep", "30"));
	wait_owned(f, f->reg, "solo", pid);
	wait_comm(pid, "sleep");
	lookup_ok(f->reg, "solo", &e);
	assert_int_equal(e.meta_len, 2);
	assert_memory_equal(e.meta, "m0", 2);
	kill_kid(f, pid);

	/* Everything after "--" belongs to the command, options included;
	 * without --meta the metadata is empty. */
	snprintf(argfile, sizeof(argfile), "%s/args", f->dir);
	snprintf(script, sizeof(script), "printf '%%s|' \"$@\" > %s.tmp; echo >> %s.tmp; "
		 "mv %s.tmp %s; exec sleep 30", argfile, argfile, argfile, argfile);
	pid = spawn_cli(f, A("run", "opts", "--", "sh", "-c", script, "sh", "--json", "-m", "x",
			     "--", "--help"));
	wait_owned(f, f->reg, "opts", pid);
	wait_line(argfile, buf, sizeof(buf));
	assert_string_equal(buf, "--json|-m|x|--|--help|\n");
	wait_comm(pid, "sleep");
	lookup_ok(f->reg, "opts", &e);
	assert_int_equal(e.meta_len, 0);
	kill_kid(f, pid);

	/* "--meta=STR" after the command word. */
	pid = spawn_cli(f, A("run", "eq", "--meta=a=b", "--", "sleep", "30"));
	wait_owned(f, f->reg, "eq", pid);
	lookup_ok(f->reg, "eq", &e);
	assert_int_equal(e.meta_len, 3);
	assert_memory_equal(e.meta, "a=b", 3);
	kill_kid(f, pid);
}

static void test_run_name_taken(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	TH_ENTRY(e);
	PROCREG_OPTS(procreg_stats, st);
	char msg[256], ran[512], script[600];
	pid_t holder;

	snprintf(ran, sizeof(ran), "%s/ran", f->dir);
	snprintf(script, sizeof(script), "touch %s", ran);
	holder = spawn_cli(f, A("run", "held", "--meta", "h", "--", "sleep", "30"));
	wait_owned(f, f->reg, "held", holder);
	snprintf(msg, sizeof(msg), "procreg: run: name 'held' is held by pid %d on this node\n", (int)holder);

	/* The free name first: it is registered, then taken back. */
	expect_st(cli(r, f->dir, A("run", "free", "held", "--", "sh", "-c", script)), 1);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, msg);
	assert_int_equal(access(ran, F_OK), -1);
	assert_int_equal(procreg_lookup(f->reg, "free", NULL), -ENOENT);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.registrations, 2);
	assert_int_equal(st.unregistrations, 1); /* "free", by run itself */
	assert_int_equal(st.deaths, 0);          /* nothing left to its exit */
	assert_int_equal(st.names, 1);

	/* The taken name first: nothing is registered at all. */
	expect_st(cli(r, f->dir, A("run", "held", "free", "--", "sh", "-c", script)), 1);
	assert_string_equal(r->err, msg);
	assert_int_equal(access(ran, F_OK), -1);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.registrations, 2);
	assert_int_equal(st.names, 1);
	assert_int_equal(st.deaths, 0);

	/* The holder is untouched. */
	lookup_ok(f->reg, "held", &e);
	assert_int_equal(e.pid, holder);
	assert_memory_equal(e.meta, "h", 1);

	/* Also when the holder is the test process (another owner, same uid). */
	reg_name(f->reg, "mine", "");
	expect_st(cli(r, f->dir, A("run", "mine", "--", "true")), 1);
	snprintf(msg, sizeof(msg), "procreg: run: name 'mine' is held by pid %d on this node\n", (int)getpid());
	assert_string_equal(r->err, msg);
	kill_kid(f, holder);
}

static void test_run_bad_names(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	PROCREG_OPTS(procreg_stats, st);
	char longname[300], bigmeta[PROCREG_META_MAX + 2], ran[512], script[600], msg[700];

	snprintf(ran, sizeof(ran), "%s/ran", f->dir);
	snprintf(script, sizeof(script), "touch %s", ran);
	memset(longname, 'n', 256);
	longname[256] = 0;
	memset(bigmeta, 'm', PROCREG_META_MAX + 1);
	bigmeta[PROCREG_META_MAX + 1] = 0;

	/* An error after a good name: exit 2, the good name taken back. */
	expect_st(cli(r, f->dir, A("run", "good", longname, "--", "sh", "-c", script)), 2);
	/* Echoed no longer than a valid name, and said to be cut. */
	snprintf(msg, sizeof(msg), "procreg: run: register '%.255s...[256 bytes, cut]': %s\n", longname,
		 procreg_strerror(-ENAMETOOLONG));
	assert_string_equal(r->err, msg);
	assert_int_equal(access(ran, F_OK), -1);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "good", NULL), -ENOENT);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.registrations, 1);
	assert_int_equal(st.unregistrations, 1);
	assert_int_equal(st.deaths, 0);

	expect_st(cli(r, f->dir, A("run", "good", "--meta", bigmeta, "--", "sh", "-c", script)),
			 2);
	snprintf(msg, sizeof(msg), "procreg: run: register 'good': %s\n",
		 procreg_strerror(-EMSGSIZE));
	assert_string_equal(r->err, msg);
	assert_int_equal(access(ran, F_OK), -1);

	/* Metadata of exactly the limit is fine. */
	bigmeta[PROCREG_META_MAX] = 0;
	expect_st(cli(r, f->dir, A("run", "good", "--meta", bigmeta, "--", "sh", "-c", script)),
			 0);
	assert_int_equal(access(ran, F_OK), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "good", NULL), -ENOENT);
}

static void test_run_command_not_found(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	PROCREG_OPTS(procreg_stats, st);

	expect_st(cli(r, f->dir, A("run", "ghost", "g2", "--", "/nonexistent/cmd", "arg")),
			 127);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "procreg: run: /nonexistent/cmd: No such file or directory\n");
	/* run took its names back before exiting: they are gone already,
	 * and free for an immediate retry. */
	assert_int_equal(procreg_lookup(f->reg, "ghost", NULL), -ENOENT);
	assert_int_equal(procreg_lookup(f->reg, "g2", NULL), -ENOENT);
	expect_st(cli(r, f->dir, A("run", "ghost", "--", "procreg-no-such-command")), 127);
	assert_string_equal(r->err,
			    "procreg: run: procreg-no-such-command: No such file or directory\n");
	assert_int_equal(procreg_lookup(f->reg, "ghost", NULL), -ENOENT);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.registrations, 3);
	assert_int_equal(st.unregistrations, 3);
	assert_int_equal(st.deaths, 0);
}

static void test_run_usage(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	PROCREG_OPTS(procreg_stats, st);
	static const char *const no_cmd =
		"procreg: run: expected -- CMD after the names\nTry 'procreg --help'.\n";
	static const char *const no_names =
		"procreg: run: expected NAME [NAME...] -- CMD\nTry 'procreg --help'.\n";

	expect_st(cli(r, f->dir, A("run", "a", "b")), 2); /* no -- */
	assert_string_equal(r->err, no_cmd);
	assert_string_equal(r->out, "");
	expect_st(cli(r, f->dir, A("run", "a", "sleep", "1")), 2);
	assert_string_equal(r->err, no_cmd);
	expect_st(cli(r, f->dir, A("run", "a", "--")), 2); /* -- but no CMD */
	assert_string_equal(r->err, no_cmd);
	expect_st(cli(r, f->dir, A("run", "--", "true")), 2); /* no names */
	assert_string_equal(r->err, no_names);
	expect_st(cli(r, f->dir, A("run")), 2);
	assert_string_equal(r->err, no_names);
	expect_st(cli(r, f->dir, A("run", "a", "--meta")), 2);
	assert_string_equal(r->err,
			    "procreg: option requires an argument: --meta\nTry 'procreg --help'.\n");
	procreg_stats(f->reg, &st);
	assert_int_equal(st.registrations, 0);
	assert_int_equal(st.names, 0);
}

/* ---- get -------------------------------------------------------------- */

static void test_get(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	TH_ENTRY(e);
	char name255[256], name256[257], msg[700];

	reg_name(f->reg, "db", "tcp:10.0.0.1:5432");
	lookup_ok(f->reg, "db", &e);
	assert_int_equal(e.pid, getpid());

	expect_st(cli(r, f->dir, A("get", "db")), 0);
	expect_get_text(r->out, &e, "tcp:10.0.0.1:5432");
	assert_string_equal(r->err, "");

	expect_st(cli(r, f->dir, A("get", "db", "--json")), 0);
	assert_string_equal(expect_entry_json(r->out, &e, "tcp:10.0.0.1:5432"), "\n");
	assert_string_equal(r->err, "");

	/* Not registered. */
	expect_st(cli(r, f->dir, A("get", "nope")), 1);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "procreg: nope: not registered\n");
	expect_st(cli(r, f->dir, A("get", "nope", "--json")), 1);
	assert_string_equal(r->out, "null\n");
	assert_string_equal(r->err, "");

	/* 255 bytes is a name that may exist; 256 never can. */
	memset(name255, 'x', 255);
	name255[255] = 0;
	memset(name256, 'x', 256);
	name256[256] = 0;
	expect_st(cli(r, f->dir, A("get", name255)), 1);
	reg_name(f->reg, name255, "long");
	lookup_ok(f->reg, name255, &e);
	expect_st(cli(r, f->dir, A("get", name255, "--json")), 0);
	assert_string_equal(expect_entry_json(r->out, &e, "long"), "\n");
	expect_st(cli(r, f->dir, A("get", name256)), 2);
	assert_string_equal(r->out, "");
	snprintf(msg, sizeof(msg), "procreg: get %.255s...[256 bytes, cut]: %s\n", name256,
		 procreg_strerror(-ENAMETOOLONG));
	assert_string_equal(r->err, msg);
	expect_st(cli(r, f->dir, A("get", name256, "--json")), 2);
	assert_string_equal(r->out, "");

	/* Usage. */
	expect_st(cli(r, f->dir, A("get")), 2);
	assert_string_equal(r->err, "procreg: get: expected one NAME\nTry 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("get", "db", "db")), 2);
	assert_string_equal(r->out, "");
}

static void test_get_escaping(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	TH_ENTRY(e);
	/* quote, backslash, newline, tab, NUL, control, UTF-8 'é', a byte
	 * that is not UTF-8, a truncated UTF-8 sequence, DEL, a surrogate. */
	static const char meta[] = "q\"b\\n\nt\t\0\x01" "\xc3\xa9" "\xff" "\xe2\x82" "\x7f"
				   "\xed\xa0\x80" "z";
	/* JSON: each byte that is not UTF-8 is U+FFFD in "meta", and the
	 * exact bytes follow in "meta_base64". */
	static const char json[] = "q\\\"b\\\\n\\nt\\t\\u0000\\u0001\xc3\xa9\\ufffd\\ufffd\\ufffd"
				   "\\u007f\\ufffd\\ufffd\\ufffdz\",\"meta_base64\":\"cSJiXG4KdAkAAcOp/+KCf+2ggHo=";
	/* Text: UTF-8 as it is, the rest escaped, a backslash doubled. */
	static const char text[] = "q\"b\\\\n\\nt\\t\\x00\\x01\xc3\xa9\\xff\\xe2\\x82\\x7f"
				   "\\xed\\xa0\\x80z";

	assert_int_equal(procreg_register(f->reg, "odd", meta, sizeof(meta) - 1), 0);
	/* Names are UTF-8 text too; a 4-byte sequence passes as it is. */
	assert_int_equal(procreg_register(f->reg, "caf\xc3\xa9.\xf0\x9f\x90\x8d", "", 0), 0);
	lookup_ok(f->reg, "odd", &e);
	assert_int_equal(e.meta_len, sizeof(meta) - 1);

	expect_st(cli(r, f->dir, A("get", "odd", "--json")), 0);
	assert_string_equal(expect_entry_json(r->out, &e, json), "\n");
	expect_st(cli(r, f->dir, A("get", "odd")), 0);
	expect_get_text(r->out, &e, text);

	lookup_ok(f->reg, "caf\xc3\xa9.\xf0\x9f\x90\x8d", &e);
	expect_st(cli(r, f->dir, A("get", "caf\xc3\xa9.\xf0\x9f\x90\x8d", "--json")), 0);
	assert_string_equal(expect_entry_json(r->out, &e, ""), "\n");
}

/* ---- ls --------------------------------------------------------------- */

static void test_ls(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	/* Registered out of order; listed by strcmp order. */
	static const char *const order[] = { "Beta", "alpha", "alpha.2", "mid", "r.one", "zeta" };
	static const char *const metas[] = { "upper case sorts first", "first", "a2", "", "child",
					     "z" };
	struct procreg_entry e[6];
	PROCREG_OPTS(procreg_entry, wide);
	char n50[51];
	const char *s;
	pid_t pid;

	expect_st(cli(r, f->dir, A("ls")), 0);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "");
	expect_st(cli(r, f->dir, A("ls", "--json")), 0);
	assert_string_equal(r->out, "[]\n");

	reg_name(f->reg, "zeta", "z");
	reg_name(f->reg, "alpha", "first");
	reg_name(f->reg, "mid", "");
	reg_name(f->reg, "Beta", "upper case sorts first");
	reg_name(f->reg, "alpha.2", "a2");
	pid = spawn_cli(f, A("run", "r.one", "--meta", "child", "--", "sleep", "30"));
	wait_owned(f, f->reg, "r.one", pid);
	for (int i = 0; i < 6; i++) {
		e[i] = (struct procreg_entry){ .sz = sizeof(e[i]) };
		lookup_ok(f->reg, order[i], &e[i]);
	}

	expect_st(cli(r, f->dir, A("ls")), 0);
	s = r->out;
	for (int i = 0; i < 6; i++)
		s = expect_ls_line(s, &e[i], 7, metas[i]);
	assert_string_equal(s, "");
	assert_int_equal(e[4].pid, pid);

	expect_st(cli(r, f->dir, A("ls", "--json")), 0);
	s = expect_prefix(r->out, "[");
	for (int i = 0; i < 6; i++) {
		if (i)
			s = expect_prefix(s, ",");
		s = expect_entry_json(s, &e[i], metas[i]);
	}
	assert_string_equal(s, "]\n");

	/* The name column is as wide as the longest name, up to 40; a
	 * longer name is printed whole. */
	memset(n50, 'w', 50);
	n50[50] = 0;
	reg_name(f->reg, n50, "wide");
	lookup_ok(f->reg, n50, &wide);
	expect_st(cli(r, f->dir, A("ls")), 0);
	s = r->out;
	for (int i = 0; i < 5; i++)
		s = expect_ls_line(s, &e[i], 40, metas[i]);
	s = expect_ls_line(s, &wide, 40, "wide");
	s = expect_ls_line(s, &e[5], 40, metas[5]);
	assert_string_equal(s, "");

	expect_st(cli(r, f->dir, A("ls", "extra")), 2);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "procreg: ls: unexpected argument extra\nTry 'procreg --help'.\n");
	kill_kid(f, pid);
}

/* ---- unregister ------------------------------------------------------- */

static void test_unregister(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	PROCREG_OPTS(procreg_stats, st);
	TH_ENTRY(e);
	char n256[257];
	pid_t pid;

	reg_name(f->reg, "gone", "");
	reg_name(f->reg, "kept", "");
	expect_st(cli(r, f->dir, A("unregister", "gone")), 0);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "");
	/* A write has returned: no sync needed to see it. */
	assert_int_equal(procreg_lookup(f->reg, "gone", NULL), -ENOENT);
	assert_int_equal(procreg_lookup(f->reg, "kept", NULL), 0);

	expect_st(cli(r, f->dir, A("unregister", "gone")), 1);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "procreg: gone: not registered\n");
	expect_st(cli(r, f->dir, A("unregister", "never")), 1);

	/* Another process's name (same uid): one goes, the others stay. */
	pid = spawn_cli(f, A("run", "c.1", "c.2", "--", "sleep", "30"));
	wait_owned(f, f->reg, "c.2", pid);
	expect_st(cli(r, f->dir, A("unregister", "c.1")), 0);
	assert_int_equal(procreg_lookup(f->reg, "c.1", NULL), -ENOENT);
	lookup_ok(f->reg, "c.2", &e);
	assert_int_equal(e.pid, pid);
	kill_kid(f, pid);

	memset(n256, 'u', 256);
	n256[256] = 0;
	expect_st(cli(r, f->dir, A("unregister", n256)), 2);
	expect_st(cli(r, f->dir, A("unregister")), 2);
	assert_string_equal(r->err,
			    "procreg: unregister: expected one NAME\nTry 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("unregister", "kept", "kept")), 2);
	assert_int_equal(procreg_lookup(f->reg, "kept", NULL), 0);

	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.unregistrations, 2);
	assert_int_equal(st.names, 1);
}

/* ---- stats ------------------------------------------------------------ */

/* Run "stats [--json]" while the table holds still; S gets what the
 * library read just before (and, identically, just after). */
static void stats_steady(struct fx *f, struct res *r, int json, struct procreg_stats *s)
{
	PROCREG_OPTS(procreg_stats, after);

	for (int i = 0; i < 100; i++) {
		procreg_stats(f->reg, s);
		if (json)
			expect_st(cli(r, f->dir, A("stats", "--json")), 0);
		else
			expect_st(cli(r, f->dir, A("stats")), 0);
		procreg_stats(f->reg, &after);
		if (!memcmp(s, &after, sizeof(after)))
			return;
	}
	fail_msg("the table never held still");
}

static void expect_stats(struct fx *f, int json, pid_t daemon)
{
	struct res *r = f->r2;
	PROCREG_OPTS(procreg_stats, s);
	char buf[2048];
	const char *p;

	stats_steady(f, r, json, &s);
	assert_string_equal(r->err, "");
	/* The CLI reads with a reader slot of its own, which it never hands
	 * to the daemon: reader_slots_used counts processes whose pages the
	 * daemon holds. */
#define STAT_LIST(X)                                                                      \
	X(names, s.names) X(groups, s.groups) X(memberships, s.memberships)                \
	X(processes, s.processes) X(arena_size, s.arena_size)                              \
	X(arena_used, s.arena_used) X(arena_top, s.arena_top)                              \
	X(index_capacity, s.index_capacity) X(grace_periods, s.grace_periods)              \
	X(registrations, s.registrations) X(unregistrations, s.unregistrations)            \
	X(joins, s.joins) X(leaves, s.leaves)                                              \
	X(deaths, s.deaths) X(reader_slots, s.reader_slots)                                \
	X(reader_slots_used, s.reader_slots_used)
	p = r->out;
	if (json) {
		p = expect_prefix(p, "{");
#define J(k, v)                                                                   \
	snprintf(buf, sizeof(buf), "\"%s\":%llu,", #k, (unsigned long long)(v)); \
	p = expect_prefix(p, buf);
		STAT_LIST(J)
		p = expect_prefix(p, "\"readers_stalled\":0,\"reader_stalls\":0,\"readers_refused\":0,"
				     "\"last_stall\":{\"pid\":0,\"uid\":0,\"time_ns\":0},");
		snprintf(buf, sizeof(buf), "\"daemon_pid\":%d,\"daemon_uptime_s\":", (int)daemon);
		p = expect_prefix(p, buf);
		if (daemon)
			p = expect_decimal(p, 3);
		else
			p = expect_prefix(p, "0.000");
		/* A round trip's answer, not the table's pid. */
		p = expect_prefix(p, daemon ? ",\"daemon_health\":\"answering\""
					    : ",\"daemon_health\":\"not running\"");
		snprintf(buf, sizeof(buf), ",\"table\":\"%s/procreg.default\"}\n", f->dir);
		p = expect_prefix(p, buf);
	} else {
#define T(k, v)                                                                    \
	snprintf(buf, sizeof(buf), "%-18s %llu\n", #k, (unsigned long long)(v)); \
	p = expect_prefix(p, buf);
		STAT_LIST(T)
		p = expect_prefix(p, "readers_stalled    0\nreader_stalls      0\nreaders_refused    0\n");
		if (daemon) {
			snprintf(buf, sizeof(buf), "daemon_pid         %d (up ", (int)daemon);
			p = expect_prefix(p, buf);
			p = expect_decimal(p, 1);
			p = expect_prefix(p, "s)\n");
		} else {
			p = expect_prefix(p, "daemon_pid         not running\n");
		}
		p = expect_prefix(p, daemon ? "daemon_health      answering\n"
					    : "daemon_health      not running\n");
		snprintf(buf, sizeof(buf), "table              %s/procreg.default\n", f->dir);
		p = expect_prefix(p, buf);
	}
	assert_string_equal(p, "");
}

static void test_stats(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	PROCREG_OPTS(procreg_stats, s);
	pid_t pid;

	expect_stats(f, 0, f->d.pid);
	expect_stats(f, 1, f->d.pid);

	reg_name(f->reg, "s.one", "1");
	reg_name(f->reg, "s.two", "2");
	reg_name(f->reg, "s.three", "3");
	pid = spawn_cli(f, A("run", "r.a", "r.b", "--", "sleep", "30"));
	wait_owned(f, f->reg, "r.a", pid);
	wait_owned(f, f->reg, "r.b", pid);
	expect_st(cli(r, f->dir, A("unregister", "s.two")), 0);
	procreg_stats(f->reg, &s);
	assert_int_equal(s.names, 4);
	assert_int_equal(s.processes, 2);
	assert_int_equal(s.registrations, 5);
	assert_int_equal(s.unregistrations, 1);
	assert_int_equal(s.deaths, 0);
	expect_stats(f, 0, f->d.pid);
	expect_stats(f, 1, f->d.pid);

	kill_kid(f, pid);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &s);
	assert_int_equal(s.names, 2);
	assert_int_equal(s.processes, 1);
	assert_int_equal(s.registrations, 5);
	assert_int_equal(s.unregistrations, 1);
	assert_int_equal(s.deaths, 1);
	assert_int_equal(s.daemon_pid, f->d.pid);
	expect_stats(f, 0, f->d.pid);
	expect_stats(f, 1, f->d.pid);

	expect_st(cli(r, f->dir, A("stats", "x")), 2);
	assert_string_equal(r->out, "");
}

/* ---- scopes and options ----------------------------------------------- */

static void test_scope(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	PROCREG_OPTS(procreg_opts, o, .dir = f->dir, .scope = "other");
	TH_ENTRY(ed);
	TH_ENTRY(eo);
	procreg_t *other;
	char env_dir[600], msg[700];
	const char *s;
	pid_t pid;

	start_scope(&f->other, f->dir, "other");
	other = procreg_open(&o);
	assert_non_null(other);
	reg_name(f->reg, "only.default", "d");
	reg_name(other, "only.other", "o");
	lookup_ok(f->reg, "only.default", &ed);
	lookup_ok(other, "only.other", &eo);

	/* The default scope sees only its own. */
	expect_st(cli(r, f->dir, A("ls", "--json")), 0);
	s = expect_prefix(r->out, "[");
	assert_string_equal(expect_entry_json(s, &ed, "d"), "]\n");
	expect_st(cli(r, f->dir, A("get", "only.other")), 1);

	/* Every way to name the other scope. */
	{
		const char *const *ways[] = {
			A("--scope", "other", "ls", "--json"), A("-s", "other", "ls", "--json"),
			A("--scope=other", "ls", "--json"),    A("ls", "--json", "--scope", "other"),
			A("ls", "--scope=other", "--json"),    A("ls", "-s", "other", "-j"),
		};

		for (size_t i = 0; i < sizeof(ways) / sizeof(ways[0]); i++) {
			expect_st(cli(r, f->dir, ways[i]), 0);
			s = expect_prefix(r->out, "[");
			assert_string_equal(expect_entry_json(s, &eo, "o"), "]\n");
		}
	}
	expect_st(cli_env(r, f->dir, A("PROCREG_SCOPE=other"), A("ls", "--json")), 0);
	s = expect_prefix(r->out, "[");
	assert_string_equal(expect_entry_json(s, &eo, "o"), "]\n");
	/* --scope beats $PROCREG_SCOPE. */
	expect_st(cli_env(r, f->dir, A("PROCREG_SCOPE=other"),
				 A("--scope", "default", "get", "only.default", "--json")),
			 0);
	assert_string_equal(expect_entry_json(r->out, &ed, "d"), "\n");
	/* $PROCREG_DIR in place of --dir. */
	snprintf(env_dir, sizeof(env_dir), "PROCREG_DIR=%s", f->dir);
	expect_st(cli_env(r, NULL, A(env_dir, "PROCREG_SCOPE=other"),
				 A("get", "only.other", "--json")),
			 0);
	assert_string_equal(expect_entry_json(r->out, &eo, "o"), "\n");

	expect_st(cli(r, f->dir, A("--scope", "other", "get", "only.default")), 1);
	expect_st(cli(r, f->dir, A("--scope", "other", "stats", "--json")), 0);
	snprintf(msg, sizeof(msg), "\"daemon_pid\":%d,", (int)f->other.pid);
	assert_non_null(strstr(r->out, msg));
	snprintf(msg, sizeof(msg), "\"table\":\"%s/procreg.other\"}\n", f->dir);
	assert_non_null(strstr(r->out, msg));
	assert_non_null(strstr(r->out, "\"names\":1,"));

	/* Writes go to the chosen scope's daemon. */
	pid = spawn_cli(f, A("--scope", "other", "run", "o.run", "--", "sleep", "30"));
	wait_owned(f, other, "o.run", pid);
	assert_int_equal(procreg_lookup(f->reg, "o.run", NULL), -ENOENT);
	expect_st(cli(r, f->dir, A("unregister", "o.run")), 1);
	expect_st(cli(r, f->dir, A("unregister", "o.run", "--scope", "other")), 0);
	assert_int_equal(procreg_lookup(other, "o.run", NULL), -ENOENT);
	kill_kid(f, pid);

	/* A scope with no daemon ever. */
	expect_st(cli(r, f->dir, A("--scope", "nosuch", "ls")), 2);
	assert_string_equal(r->out, "");
	no_table_msg(msg, sizeof(msg), f->dir, "nosuch");
	assert_string_equal(r->err, msg);
	expect_st(cli_env(r, f->dir, A("PROCREG_SCOPE=nosuch"), A("ls")), 2);
	assert_string_equal(r->err, msg);
	procreg_close(other);
}

static void test_help_and_usage(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	static const char *const cmds[] = { "\n  run NAME", "\n  get NAME", "\n  ls ",
					    "\n  unregister NAME", "\n  stats ", "\n  help ",
					    "\n  version " };
	char *help;
	TH_ENTRY(e);
	char ver[128];

	expect_st(cli(r, f->dir, A("--help")), 0);
	assert_string_equal(r->err, "");
	help = strdup(r->out);
	assert_non_null(help);
	assert_non_null(strstr(help, "Usage: procreg "));
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strstr(help, cmds[i]))
			fail_msg("--help does not list '%s':\n%s", cmds[i] + 3, help);
	{
		const char *const *same[] = { A("help"), A("-h"), A("ls", "--help"), A("get", "-h") };

		for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
			expect_st(cli(r, f->dir, same[i]), 0);
			assert_string_equal(r->out, help);
			assert_string_equal(r->err, "");
		}
	}

	/* Unknown command or option; no command at all. */
	expect_st(cli(r, f->dir, A("frob")), 2);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "procreg: unknown command frob\nTry 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("ls", "--frob")), 2);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "procreg: unknown option --frob\nTry 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("get", "-x", "db")), 2);
	assert_string_equal(r->err, "procreg: unknown option -x\nTry 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("--frob", "ls")), 2);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "procreg: unknown option --frob\nTry 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("ls", "--json=yes")), 2);
	assert_string_equal(r->err,
			    "procreg: option takes no argument: --json=yes\nTry 'procreg --help'.\n");

	/* An option given to a command it does not apply to is refused, before
	 * the command word or after it. */
	expect_st(cli(r, f->dir, A("get", "--queue", "--ttl", "3", "db")), 2);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err,
			    "procreg: get: --queue does not apply to get\nTry 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("--once", "ls")), 2);
	assert_string_equal(r->err, "procreg: ls: --once does not apply to ls\nTry 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("unregister", "--meta", "m", "db")), 2);
	assert_string_equal(r->err, "procreg: unregister: --meta does not apply to unregister\n"
			    "Try 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("ls", "--dir")), 2);
	assert_string_equal(r->err,
			    "procreg: option requires an argument: --dir\nTry 'procreg --help'.\n");
	expect_st(cli(r, NULL, A(NULL)), 2);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, help);

	/* Options before or after the command word mean the same. */
	reg_name(f->reg, "db", "m");
	lookup_ok(f->reg, "db", &e);
	{
		const char *const *ways[] = { A("get", "db", "--json"), A("get", "--json", "db"),
					      A("--json", "get", "db"), A("-j", "get", "db"),
					      A("get", "db", "-j") };

		for (size_t i = 0; i < sizeof(ways) / sizeof(ways[0]); i++) {
			expect_st(cli(r, f->dir, ways[i]), 0);
			assert_string_equal(expect_entry_json(r->out, &e, "m"), "\n");
		}
	}
	/* Any command's options before its word, as procreg(1) allows. */
	expect_st(cli(r, f->dir, A("--no-autostart", "--timeout", "5", "run", "pre.opts", "--",
				   "true")), 0);
	assert_string_equal(r->err, "");
	/* --dir after the command word. */
	expect_st(cli(r, NULL, A("get", "db", "--dir", f->dir, "--json")), 0);
	assert_string_equal(expect_entry_json(r->out, &e, "m"), "\n");
	expect_st(cli(r, NULL, A("get", "db", "--dir=/nonexistent")), 2);

	snprintf(ver, sizeof(ver), "procreg %s\n", procreg_version());
	expect_st(cli(r, f->dir, A("version")), 0);
	assert_string_equal(r->out, ver);
	expect_st(cli(r, f->dir, A("--version")), 0);
	assert_string_equal(r->out, ver);
	free(help);
}

/* ---- without a daemon ------------------------------------------------- */

static void test_no_table(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	char msg[700], ran[512], script[600];
	const char *const *cmds[] = {
		A("get", "x"), A("get", "x", "--json"), A("ls"), A("ls", "--json"),
		A("stats"),    A("stats", "--json"),    A("unregister", "x"),
	};

	no_table_msg(msg, sizeof(msg), f->dir, "default");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		expect_st(cli(r, f->dir, cmds[i]), 2);
		assert_string_equal(r->out, "");
		assert_string_equal(r->err, msg);
	}
	snprintf(ran, sizeof(ran), "%s/ran", f->dir);
	snprintf(script, sizeof(script), "touch %s", ran);
	expect_st(cli(r, f->dir, A("run", "x", "--", "sh", "-c", script)), 2);
	assert_string_equal(r->err, msg);
	assert_int_equal(access(ran, F_OK), -1);
	/* Looking did not create anything. */
	assert_int_equal(rmdir(f->dir), 0);
	assert_int_equal(mkdir(f->dir, 0700), 0);
}

/* Every file of DIR whose name starts with "procreg.": their names, each
 * followed by a space, into OUT. */
static void procreg_files(const char *dir, char *out, size_t len)
{
	struct dirent *de;
	DIR *d = opendir(dir);

	assert_non_null(d);
	out[0] = 0;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, "procreg.", 8)) {
			strncat(out, de->d_name, len - strlen(out) - 2);
			strcat(out, " ");
		}
	closedir(d);
}

/* procregd's refusals to start: each says why, and leaves nothing it
 * made behind. */
static void test_daemon_refuses(void **state)
{
	struct fx *f = *state;
	struct th_out *o = calloc(1, sizeof(*o));
	char path[600], want[700], files[1024];
	struct stat st;

	assert_non_null(o);
	/* A directory that does not exist is not made (a typo would put
	 * the table on the root filesystem). */
	snprintf(path, sizeof(path), "%s/missing", f->dir);
	assert_int_equal(th_run_daemon(o, NULL, A(PROCREGD_PATH, "--foreground", "--dir", path)), 1);
	snprintf(want, sizeof(want), "table directory %s: No such file or directory (procregd "
		 "does not create it)\n", path);
	if (!strstr(o->err, want))
		fail_msg("expected '%s' in:\n%s", want, o->err);
	assert_int_equal(stat(path, &st), -1);

	/* Another daemon serves the scope: it is named by its pid. */
	assert_int_equal(th_run_daemon(o, NULL, A(PROCREGD_PATH, "--foreground", "--dir", f->dir)), 1);
	snprintf(want, sizeof(want), "another procregd serves this scope (pid %d)\n",
		 (int)f->d.pid);
	if (!strstr(o->err, want))
		fail_msg("expected '%s' in:\n%s", want, o->err);

	/* A start that fails after making its table takes it away again
	 * (and a table it re-attached to stays). */
	snprintf(path, sizeof(path), "%s/fresh", f->dir);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(th_run_daemon(o, NULL, A(PROCREGD_PATH, "--foreground", "--dir", path,
						  "--reserved-size", "999999999999")), 1);
	if (!strstr(o->err, "--reserved-size 999999999999: want at most half the table"))
		fail_msg("unexpected:\n%s", o->err);
	procreg_files(path, files, sizeof(files));
	assert_string_equal(files, "");
	assert_int_equal(th_daemon_stop(&f->d), 0);
	procreg_files(f->dir, files, sizeof(files));
	assert_int_equal(th_run_daemon(o, NULL, A(PROCREGD_PATH, "--foreground", "--dir", f->dir,
						  "--reserved-size", "999999999999")), 1);
	procreg_files(f->dir, want, sizeof(want));
	assert_string_equal(want, files);
	assert_non_null(strstr(files, "procreg.default "));

	/* A table of another layout (an older build's, left by its daemon):
	 * refused, saying what to do, and left as it is. */
	{
		uint32_t v = PR_LAYOUT_VERSION - 1, back = 0;
		char expect[1024];
		int fd;

		snprintf(path, sizeof(path), "%s/procreg.default", f->dir);
		fd = open(path, O_RDWR | O_CLOEXEC);
		assert_true(fd >= 0);
		assert_int_equal(pwrite(fd, &v, sizeof(v), offsetof(struct pr_table_hdr,
								      layout_version)),
				 sizeof(v));
		assert_int_equal(th_run_daemon(o, NULL, A(PROCREGD_PATH, "--foreground", "--dir",
							  f->dir)), 1);
		snprintf(expect, sizeof(expect), "%s: table layout version differs from this build's "
			 "(its layout %u, this build's %u); this build cannot read it or carry its "
			 "names over: stop what uses it, move it away and start procregd again\n",
			 path, PR_LAYOUT_VERSION - 1, PR_LAYOUT_VERSION);
		if (!strstr(o->err, expect))
			fail_msg("expected '%s' in:\n%s", expect, o->err);
		assert_int_equal(pread(fd, &back, sizeof(back), offsetof(struct pr_table_hdr,
									  layout_version)),
				 sizeof(back));
		assert_int_equal(back, v);
		close(fd);
		procreg_files(f->dir, want, sizeof(want));
		assert_string_equal(want, files);
	}
	free(o);
}

static void test_daemon_stopped(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	TH_ENTRY(e);
	char ran[512], script[600];
	const char *s;

	reg_name(f->reg, "kept", "still here");
	lookup_ok(f->reg, "kept", &e);
	assert_int_equal(th_daemon_stop(&f->d), 0);

	/* Reads need no daemon. */
	expect_st(cli(r, f->dir, A("get", "kept", "--json")), 0);
	assert_string_equal(expect_entry_json(r->out, &e, "still here"), "\n");
	expect_st(cli(r, f->dir, A("get", "kept")), 0);
	expect_get_text(r->out, &e, "still here");
	expect_st(cli(r, f->dir, A("get", "other")), 1);
	expect_st(cli(r, f->dir, A("ls")), 0);
	s = expect_ls_line(r->out, &e, 4, "still here");
	assert_string_equal(s, "");
	expect_st(cli(r, f->dir, A("ls", "--json")), 0);
	s = expect_prefix(r->out, "[");
	assert_string_equal(expect_entry_json(s, &e, "still here"), "]\n");
	expect_stats(f, 0, 0);
	expect_stats(f, 1, 0);

	/* Writes do. */
	snprintf(ran, sizeof(ran), "%s/ran", f->dir);
	snprintf(script, sizeof(script), "touch %s", ran);
	expect_st(cli(r, f->dir, A("run", "x", "--", "sh", "-c", script)), 2);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "procreg: run: register 'x': procregd is not running for this scope\n");
	assert_int_equal(access(ran, F_OK), -1);
	expect_st(cli(r, f->dir, A("unregister", "kept")), 2);
	assert_string_equal(r->err,
			    "procreg: unregister kept: procregd is not running for this scope\n");
	assert_int_equal(procreg_lookup(f->reg, "kept", NULL), 0);
}

/* ---- groups: join, run --group, members, groups ----------------------- */

struct member_find {
	pid_t pid;
	struct procreg_entry *out;
	int found;
};

static int member_find_cb(const struct procreg_entry *e, void *arg)
{
	struct member_find *m = arg;

	if (e->pid == m->pid) {
		m->found++;
		if (m->out)
			th_entry_copy(m->out, e);
	}
	return 0;
}

static int count_entries(const struct procreg_entry *e, void *arg)
{
	(void)e;
	++*(uint64_t *)arg;
	return 0;
}

/* Whether PID is a member of GROUP (E, if not NULL, gets its entry). */
static int is_member(procreg_t *reg, const char *group, pid_t pid, struct procreg_entry *e)
{
	struct member_find m = { pid, e, 0 };

	assert_int_equal(procreg_members(reg, group, member_find_cb, &m), 0);
	assert_true(m.found <= 1);
	return m.found;
}

/* Wait until PID is a member of GROUP; fail if PID exits first. */
static void wait_member(struct fx *f, const char *group, pid_t pid)
{
	int st;

	for (int i = 0; i < WAIT_MS; i++) {
		if (is_member(f->reg, group, pid, NULL))
			return;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			forget_kid(f, pid);
			fail_msg("procreg exited (status 0x%x) before joining %s", st, group);
		}
		th_msleep(1);
	}
	fail_msg("pid %d never joined %s", (int)pid, group);
}

struct member_list {
	struct procreg_entry v[8];
	unsigned char meta[8][PROCREG_META_MAX];
	size_t n;
};

static int member_list_cb(const struct procreg_entry *e, void *arg)
{
	struct member_list *l = arg;

	if (l->n == 8)
		return -E2BIG;
	l->v[l->n] = (struct procreg_entry){ .sz = sizeof(l->v[0]), .meta = l->meta[l->n],
					     .meta_size = sizeof(l->meta[0]) };
	th_entry_copy(&l->v[l->n++], e);
	return 0;
}

static int by_pid_asc(const void *a, const void *b)
{
	const struct procreg_entry *x = a, *y = b;

	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/* GROUP's members as the library sees them, in the CLI's order (pid). */
static void members_sorted(procreg_t *reg, const char *group, struct member_list *l)
{
	l->n = 0;
	assert_int_equal(procreg_members(reg, group, member_list_cb, l), 0);
	qsort(l->v, l->n, sizeof(l->v[0]), by_pid_asc);
}

/* The JSON object "members --json" prints for E; return what follows. */
static const char *expect_member_json(const char *s, const struct procreg_entry *e,
				      const char *meta_json)
{
	char buf[2048];

	s = expect_json_head(s, e, "group", "joined_ns");
	snprintf(buf, sizeof(buf), ",\"meta\":\"%s\"}", meta_json);
	return expect_prefix(s, buf);
}

/* One line of "members" for E; return the next line. */
static const char *expect_member_line(const char *s, const struct procreg_entry *e,
				      const char *meta_text)
{
	char buf[2048];

	snprintf(buf, sizeof(buf), "%8d %5u ", (int)e->pid, 0u);
	return expect_age_meta(expect_prefix(s, buf), meta_text);
}

/* One line of "groups" in a name column W wide; return the next line. */
static const char *expect_group_line(const char *s, const char *name, int w, unsigned members,
				     unsigned local)
{
	char buf[512];

	snprintf(buf, sizeof(buf), "%-*s %8u %8u\n", w, name, members, local);
	return expect_prefix(s, buf);
}

static const char *expect_group_json(const char *s, const char *name, unsigned members,
				     unsigned local)
{
	char buf[512];

	snprintf(buf, sizeof(buf), "{\"name\":\"%s\",\"members\":%u,\"local_members\":%u}", name,
		 members, local);
	return expect_prefix(s, buf);
}

static void join_ok(procreg_t *reg, const char *group, const char *meta)
{
	int err = procreg_join(reg, group, meta, strlen(meta));

	if (err)
		fail_msg("join %s: %s", group, procreg_strerror(err));
}

static void test_join_execs(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	TH_ENTRY(e1);
	TH_ENTRY(e2);
	PROCREG_OPTS(procreg_stats, st);
	uint64_t names = 0;
	pid_t pid;

	pid = spawn_cli(f, A("join", "G1", "G2", "--meta", "m", "--", "sleep", "30"));
	wait_member(f, "G1", pid);
	wait_member(f, "G2", pid);
	/* The command runs as the very process that joined. */
	wait_comm(pid, "sleep");
	assert_int_equal(is_member(f->reg, "G1", pid, &e1), 1);
	assert_int_equal(is_member(f->reg, "G2", pid, &e2), 1);
	assert_string_equal(e1.name, "G1");
	assert_string_equal(e2.name, "G2");
	assert_int_equal(e1.meta_len, 1);
	assert_memory_equal(e1.meta, "m", 1);
	assert_int_equal(e2.meta_len, 1);
	assert_int_equal(e1.uid, getuid());
	assert_int_equal(e1.node, 0);
	assert_int_equal(e1.start_time, e2.start_time);
	/* Groups only: join registers no name. */
	assert_int_equal(procreg_foreach(f->reg, count_entries, &names), 0);
	assert_int_equal(names, 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 2);
	assert_int_equal(st.memberships, 2);
	assert_int_equal(st.joins, 2);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.processes, 1);

	expect_st(cli(r, f->dir, A("members", "G1")), 0);
	assert_string_equal(expect_member_line(r->out, &e1, "m"), "");
	assert_string_equal(r->err, "");

	/* The memberships go with the process, and the groups with them. */
	kill_kid(f, pid);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(is_member(f->reg, "G1", pid, NULL), 0);
	assert_int_equal(is_member(f->reg, "G2", pid, NULL), 0);
	expect_st(cli(r, f->dir, A("members", "G1")), 1);
	assert_string_equal(r->out, "");
	expect_st(cli(r, f->dir, A("groups")), 0);
	assert_string_equal(r->out, "");
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.memberships, 0);
	assert_int_equal(st.processes, 0);
	assert_int_equal(st.leaves, 0);
	assert_int_equal(st.deaths, 1);
}

static void test_join_usage_and_failures(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	PROCREG_OPTS(procreg_stats, st);
	char longname[300], ran[512], script[600], msg[800];

	expect_st(cli(r, f->dir, A("join")), 2);
	assert_string_equal(r->err, "procreg: join: expected GROUP [GROUP...] -- CMD\n"
				    "Try 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("join", "--", "true")), 2);
	assert_string_equal(r->err, "procreg: join: expected GROUP [GROUP...] -- CMD\n"
				    "Try 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("join", "g")), 2);
	assert_string_equal(r->err, "procreg: join: expected -- CMD after the groups\n"
				    "Try 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("join", "g", "--")), 2);
	assert_string_equal(r->out, "");

	/* A bad group after a good one: exit 2, nothing run, the good one
	 * left again. */
	snprintf(ran, sizeof(ran), "%s/ran", f->dir);
	snprintf(script, sizeof(script), "touch %s", ran);
	memset(longname, 'g', 256);
	longname[256] = 0;
	expect_st(cli(r, f->dir, A("join", "good", longname, "--", "sh", "-c", script)), 2);
	snprintf(msg, sizeof(msg), "procreg: join: join '%.255s...[256 bytes, cut]': %s\n", longname,
		 procreg_strerror(-ENAMETOOLONG));
	assert_string_equal(r->err, msg);
	assert_int_equal(access(ran, F_OK), -1);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.joins, 1);
	assert_int_equal(st.leaves, 1);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.deaths, 0);

	/* A command that cannot be run: 127, and the groups left before
	 * exiting, not at the exit. */
	expect_st(cli(r, f->dir, A("join", "j1", "j2", "--", "/nonexistent/cmd")), 127);
	assert_string_equal(r->err, "procreg: join: /nonexistent/cmd: No such file or directory\n");
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.memberships, 0);
	assert_int_equal(st.joins, 3);
	assert_int_equal(st.leaves, 3);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.deaths, 0);

	/* Metadata over the limit. */
	{
		static char big[PROCREG_META_MAX + 2];

		memset(big, 'm', PROCREG_META_MAX + 1);
		expect_st(cli(r, f->dir, A("join", "g", "--meta", big, "--", "sh", "-c", script)), 2);
		snprintf(msg, sizeof(msg), "procreg: join: join 'g': %s\n",
			 procreg_strerror(-EMSGSIZE));
		assert_string_equal(r->err, msg);
		assert_int_equal(access(ran, F_OK), -1);
	}
}

static void test_run_group(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	TH_ENTRY(e);
	TH_ENTRY(m1);
	TH_ENTRY(m2);
	PROCREG_OPTS(procreg_stats, st);
	char longname[300], ran[512], script[600], msg[800];
	pid_t pid;

	pid = spawn_cli(f, A("run", "svc", "--group", "G", "--meta", "x", "--group=H", "--", "sleep",
			     "30"));
	wait_owned(f, f->reg, "svc", pid);
	wait_member(f, "G", pid);
	wait_member(f, "H", pid);
	wait_comm(pid, "sleep");
	lookup_ok(f->reg, "svc", &e);
	assert_int_equal(is_member(f->reg, "G", pid, &m1), 1);
	assert_int_equal(is_member(f->reg, "H", pid, &m2), 1);
	/* One --meta for the name and every membership. */
	assert_int_equal(e.meta_len, 1);
	assert_memory_equal(e.meta, "x", 1);
	assert_int_equal(m1.meta_len, 1);
	assert_memory_equal(m1.meta, "x", 1);
	assert_int_equal(m2.meta_len, 1);
	assert_int_equal(m1.start_time, e.start_time);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 1);
	assert_int_equal(st.groups, 2);
	assert_int_equal(st.memberships, 2);
	assert_int_equal(st.registrations, 1);
	assert_int_equal(st.joins, 2);
	assert_int_equal(st.processes, 1);

	expect_st(cli(r, f->dir, A("members", "H", "--json")), 0);
	assert_string_equal(expect_member_json(expect_prefix(r->out, "["), &m2, "x"), "]\n");

	/* Name and memberships go together. */
	kill_kid(f, pid);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "svc", NULL), -ENOENT);
	assert_int_equal(is_member(f->reg, "G", pid, NULL), 0);
	assert_int_equal(is_member(f->reg, "H", pid, NULL), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.memberships, 0);
	assert_int_equal(st.deaths, 1);

	/* A group that cannot be joined: the name and the groups joined
	 * before it are taken back, and nothing runs. */
	snprintf(ran, sizeof(ran), "%s/ran", f->dir);
	snprintf(script, sizeof(script), "touch %s", ran);
	memset(longname, 'h', 256);
	longname[256] = 0;
	expect_st(cli(r, f->dir, A("run", "good", "--group", "okg", "--group", longname, "--", "sh",
				   "-c", script)),
		  2);
	snprintf(msg, sizeof(msg), "procreg: run: join '%.255s...[256 bytes, cut]': %s\n", longname,
		 procreg_strerror(-ENAMETOOLONG));
	assert_string_equal(r->err, msg);
	assert_int_equal(access(ran, F_OK), -1);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "good", NULL), -ENOENT);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.registrations, 2);
	assert_int_equal(st.unregistrations, 1);
	assert_int_equal(st.joins, 3);
	assert_int_equal(st.leaves, 1);
	assert_int_equal(st.deaths, 1);

	/* A taken name: no group is joined at all. */
	reg_name(f->reg, "taken", "");
	expect_st(cli(r, f->dir, A("run", "taken", "--group", "never", "--", "sh", "-c", script)),
		  1);
	assert_int_equal(access(ran, F_OK), -1);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.joins, 3);
	assert_int_equal(st.groups, 0);
}

static void test_members(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	struct member_list l;
	char n256[257], msg[700];
	const char *s;
	pid_t p1, p2;

	/* Empty: nothing printed, exit 1; JSON prints an empty list. */
	expect_st(cli(r, f->dir, A("members", "team")), 1);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "");
	expect_st(cli(r, f->dir, A("members", "team", "--json")), 1);
	assert_string_equal(r->out, "[]\n");
	assert_string_equal(r->err, "");

	join_ok(f->reg, "team", "tab\there \"q\"");
	p1 = spawn_cli(f, A("join", "team", "other", "--meta", "c1", "--", "sleep", "30"));
	p2 = spawn_cli(f, A("join", "team", "--", "sleep", "30"));
	wait_member(f, "team", p1);
	wait_member(f, "team", p2);
	members_sorted(f->reg, "team", &l);
	assert_int_equal(l.n, 3);

	expect_st(cli(r, f->dir, A("members", "team")), 0);
	assert_string_equal(r->err, "");
	s = r->out;
	for (size_t i = 0; i < l.n; i++)
		s = expect_member_line(s, &l.v[i],
				       l.v[i].pid == getpid() ? "tab\\there \"q\""
				       : l.v[i].pid == p1     ? "c1"
							      : "");
	assert_string_equal(s, "");

	expect_st(cli(r, f->dir, A("members", "--json", "team")), 0);
	s = expect_prefix(r->out, "[");
	for (size_t i = 0; i < l.n; i++) {
		if (i)
			s = expect_prefix(s, ",");
		s = expect_member_json(s, &l.v[i],
				       l.v[i].pid == getpid() ? "tab\\there \\\"q\\\""
				       : l.v[i].pid == p1     ? "c1"
							      : "");
	}
	assert_string_equal(s, "]\n");

	/* Only that group's members. */
	members_sorted(f->reg, "other", &l);
	assert_int_equal(l.n, 1);
	expect_st(cli(r, f->dir, A("members", "other", "-j")), 0);
	assert_string_equal(expect_member_json(expect_prefix(r->out, "["), &l.v[0], "c1"), "]\n");

	/* Members leave: the list follows. */
	assert_int_equal(procreg_leave(f->reg, "team"), 0);
	kill_kid(f, p1);
	assert_int_equal(procreg_sync(f->reg), 0);
	members_sorted(f->reg, "team", &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.v[0].pid, p2);
	expect_st(cli(r, f->dir, A("members", "team")), 0);
	assert_string_equal(expect_member_line(r->out, &l.v[0], ""), "");
	expect_st(cli(r, f->dir, A("members", "other")), 1);
	assert_string_equal(r->out, "");
	kill_kid(f, p2);
	assert_int_equal(procreg_sync(f->reg), 0);
	expect_st(cli(r, f->dir, A("members", "team", "--json")), 1);
	assert_string_equal(r->out, "[]\n");

	/* Usage and bad names. */
	expect_st(cli(r, f->dir, A("members")), 2);
	assert_string_equal(r->err, "procreg: members: expected one GROUP\nTry 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("members", "a", "b")), 2);
	assert_string_equal(r->out, "");
	memset(n256, 'x', 256);
	n256[256] = 0;
	expect_st(cli(r, f->dir, A("members", n256)), 2);
	assert_string_equal(r->out, "");
	snprintf(msg, sizeof(msg), "procreg: members %.255s...[256 bytes, cut]: %s\n", n256,
		 procreg_strerror(-ENAMETOOLONG));
	assert_string_equal(r->err, msg);
}

static void test_groups_list(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	char n50[51];
	const char *s;
	pid_t pid;

	expect_st(cli(r, f->dir, A("groups")), 0);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "");
	expect_st(cli(r, f->dir, A("groups", "--json")), 0);
	assert_string_equal(r->out, "[]\n");

	/* Joined out of order; listed by strcmp order. A name is no group. */
	join_ok(f->reg, "zeta", "");
	join_ok(f->reg, "alpha", "");
	join_ok(f->reg, "Beta.group", "");
	reg_name(f->reg, "notagroup", "");
	pid = spawn_cli(f, A("join", "alpha", "Beta.group", "--", "sleep", "30"));
	wait_member(f, "alpha", pid);
	wait_member(f, "Beta.group", pid);

	expect_st(cli(r, f->dir, A("groups")), 0);
	assert_string_equal(r->err, "");
	s = expect_group_line(r->out, "Beta.group", 10, 2, 2);
	s = expect_group_line(s, "alpha", 10, 2, 2);
	s = expect_group_line(s, "zeta", 10, 1, 1);
	assert_string_equal(s, "");
	expect_st(cli(r, f->dir, A("groups", "--json")), 0);
	s = expect_prefix(r->out, "[");
	s = expect_group_json(s, "Beta.group", 2, 2);
	s = expect_prefix(s, ",");
	s = expect_group_json(s, "alpha", 2, 2);
	s = expect_prefix(s, ",");
	s = expect_group_json(s, "zeta", 1, 1);
	assert_string_equal(s, "]\n");

	/* The name column is at least 5 wide ("GROUP"), at most 40; a longer
	 * name is printed whole. */
	assert_int_equal(procreg_leave(f->reg, "Beta.group"), 0);
	kill_kid(f, pid);
	assert_int_equal(procreg_sync(f->reg), 0);
	expect_st(cli(r, f->dir, A("groups")), 0);
	s = expect_group_line(r->out, "alpha", 5, 1, 1);
	s = expect_group_line(s, "zeta", 5, 1, 1);
	assert_string_equal(s, "");
	memset(n50, 'w', 50);
	n50[50] = 0;
	join_ok(f->reg, n50, "");
	expect_st(cli(r, f->dir, A("groups")), 0);
	s = expect_group_line(r->out, "alpha", 40, 1, 1);
	s = expect_group_line(s, n50, 40, 1, 1);
	s = expect_group_line(s, "zeta", 40, 1, 1);
	assert_string_equal(s, "");

	expect_st(cli(r, f->dir, A("groups", "x")), 2);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "procreg: groups: unexpected argument x\nTry 'procreg --help'.\n");
}

static void test_stats_groups(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	PROCREG_OPTS(procreg_stats, s);
	pid_t pid;

	join_ok(f->reg, "sg.1", "a");
	join_ok(f->reg, "sg.2", "b");
	join_ok(f->reg, "sg.1", "a2"); /* a re-join counts as a join */
	pid = spawn_cli(f, A("join", "sg.2", "sg.3", "--", "sleep", "30"));
	wait_member(f, "sg.2", pid);
	wait_member(f, "sg.3", pid);
	assert_int_equal(procreg_leave(f->reg, "sg.1"), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &s);
	assert_int_equal(s.groups, 2);
	assert_int_equal(s.memberships, 3);
	assert_int_equal(s.joins, 5);
	assert_int_equal(s.leaves, 1);
	assert_int_equal(s.processes, 2);
	expect_stats(f, 0, f->d.pid);
	assert_non_null(strstr(f->r2->out, "\ngroups             2\nmemberships        3\n"));
	assert_non_null(strstr(f->r2->out, "\njoins              5\nleaves             1\n"));
	expect_stats(f, 1, f->d.pid);
	assert_non_null(strstr(f->r2->out, "\"groups\":2,\"memberships\":3,"));
	assert_non_null(strstr(f->r2->out, "\"joins\":5,\"leaves\":1,"));

	kill_kid(f, pid);
	assert_int_equal(procreg_sync(f->reg), 0);
	procreg_stats(f->reg, &s);
	assert_int_equal(s.groups, 1);
	assert_int_equal(s.memberships, 1);
	assert_int_equal(s.leaves, 1); /* a death is not a leave */
	assert_int_equal(s.deaths, 1);
	expect_stats(f, 0, f->d.pid);
	expect_stats(f, 1, f->d.pid);
	expect_st(cli(r, f->dir, A("stats")), 0);
}

static void test_groups_without_daemon(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	struct member_list l;
	char ran[512], script[600], msg[700];

	join_ok(f->reg, "kept", "still");
	members_sorted(f->reg, "kept", &l);
	assert_int_equal(th_daemon_stop(&f->d), 0);

	/* Reading needs no daemon. */
	expect_st(cli(r, f->dir, A("members", "kept", "--json")), 0);
	assert_string_equal(expect_member_json(expect_prefix(r->out, "["), &l.v[0], "still"), "]\n");
	expect_st(cli(r, f->dir, A("groups")), 0);
	assert_string_equal(expect_group_line(r->out, "kept", 5, 1, 1), "");

	/* Joining does. */
	snprintf(ran, sizeof(ran), "%s/ran", f->dir);
	snprintf(script, sizeof(script), "touch %s", ran);
	expect_st(cli(r, f->dir, A("join", "g", "--", "sh", "-c", script)), 2);
	assert_string_equal(r->out, "");
	assert_string_equal(r->err, "procreg: join: join 'g': procregd is not running for this scope\n");
	assert_int_equal(access(ran, F_OK), -1);

	/* No table at all. */
	{
		char *empty = th_mkdtemp();

		no_table_msg(msg, sizeof(msg), empty, "default");
		expect_st(cli(r, empty, A("members", "g")), 2);
		assert_string_equal(r->err, msg);
		expect_st(cli(r, empty, A("groups", "--json")), 2);
		assert_string_equal(r->out, "");
		assert_string_equal(r->err, msg);
		expect_st(cli(r, empty, A("join", "g", "--", "sh", "-c", script)), 2);
		assert_string_equal(r->err, msg);
		assert_int_equal(access(ran, F_OK), -1);
		th_rmrf(empty);
		free(empty);
	}
}

static void test_help_lists_groups(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	static const char *const cmds[] = { "\n  join GROUP", "\n  members GROUP", "\n  groups ",
					    "--group G" };

	expect_st(cli(r, f->dir, A("--help")), 0);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strstr(r->out, cmds[i]))
			fail_msg("--help does not list '%s':\n%s", cmds[i], r->out);
}

/* ---- names that begin with '-', names given escaped ------------------ */

/* Every command that takes a name reaches one that begins with '-' after
 * "--"; run and join take theirs between two "--". */
static void test_dash_names(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	TH_ENTRY(e);
	pid_t pid, member;

	pid = spawn_cli(f, A("run", "--meta", "m", "--ttl", "60", "--", "-svc", "--x", "--",
			     "sleep", "30"));
	wait_owned(f, f->reg, "-svc", pid);
	wait_owned(f, f->reg, "--x", pid);
	expect_st(cli(r, f->dir, A("get", "-svc")), 2);
	assert_string_equal(r->err, "procreg: unknown option -svc\nTry 'procreg --help'.\n");
	expect_st(cli(r, f->dir, A("get", "--", "-svc")), 0);
	assert_true(!strncmp(r->out, "name  -svc\npid   ", 17));
	expect_st(cli(r, f->dir, A("get", "--json", "--", "--x")), 0);
	assert_true(!strncmp(r->out, "{\"name\":\"--x\",", 14));
	expect_st(cli(r, f->dir, A("wait", "--timeout", "5", "--", "-svc")), 0);
	expect_st(cli(r, f->dir, A("refresh", "--", "-svc")), 0);
	expect_st(cli(r, f->dir, A("unregister", "--", "--x")), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "--x", NULL), -ENOENT);
	expect_st(cli(r, f->dir, A("get", "--", "--x")), 1);
	assert_string_equal(r->err, "procreg: --x: not registered\n");

	member = spawn_cli(f, A("join", "--", "-crew", "--", "sleep", "30"));
	wait_member(f, "-crew", member);
	expect_st(cli(r, f->dir, A("members", "--json", "--", "-crew")), 0);
	assert_true(!strncmp(r->out, "[{\"group\":\"-crew\",", 18));
	expect_st(cli(r, f->dir, A("wait", "--group", "-crew", "--timeout", "5")), 0);
	kill_kid(f, member);
	kill_kid(f, pid);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "-svc", &e), -ENOENT);
}

/* --escaped: run, join, get, unregister take names, groups and metadata
 * in the form text output prints; metadata may hold NUL. */
static void test_escaped_args(void **state)
{
	struct fx *f = *state;
	struct res *r = f->r;
	TH_ENTRY(e);
	pid_t pid;

	pid = spawn_cli(f, A("run", "--escaped", "a\\x1b[2J\\nb", "--group", "g\\xff",
			     "--meta", "m\\x00\\\\\\t", "--", "sleep", "30"));
	wait_owned(f, f->reg, "a\x1b[2J\nb", pid);
	lookup_ok(f->reg, "a\x1b[2J\nb", &e);
	assert_int_equal(e.meta_len, 4);
	assert_memory_equal(e.meta, "m\0\\\t", 4);
	wait_member(f, "g\xff", pid);
	expect_st(cli(r, f->dir, A("get", "a\x1b[2J\nb")), 0);
	assert_true(!strncmp(r->out, "name  a\\x1b[2J\\nb\n", 18));
	assert_non_null(strstr(r->out, "\nmeta  m\\x00\\\\\\t\n"));
	expect_st(cli(r, f->dir, A("members", "-e", "g\\xff")), 0);
	expect_st(cli(r, f->dir, A("-e", "unregister", "a\\x1b[2J\\nb")), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "a\x1b[2J\nb", NULL), -ENOENT);
	/* A NUL is no part of a name. */
	expect_st(cli(r, f->dir, A("get", "-e", "a\\x00b")), 2);
	assert_string_equal(r->err, "procreg: --escaped: NAME: holds a NUL byte (\\x00)\n");
	expect_st(cli(r, f->dir, A("join", "-e", "g\\q", "--", "true")), 2);
	assert_string_equal(r->err, "procreg: --escaped: GROUP: bad escape at byte 1 (want \\\\, "
				    "\\n, \\t, \\r or \\xHH)\n");
	kill_kid(f, pid);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_run_registers_and_execs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_option_forms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_name_taken, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_bad_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_command_not_found, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_usage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_get, setup, teardown),
		cmocka_unit_test_setup_teardown(test_get_escaping, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unregister, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scope, setup, teardown),
		cmocka_unit_test_setup_teardown(test_help_and_usage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_table, setup_bare, teardown),
		cmocka_unit_test_setup_teardown(test_daemon_stopped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_daemon_refuses, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_execs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_usage_and_failures, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_members, setup, teardown),
		cmocka_unit_test_setup_teardown(test_groups_list, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stats_groups, setup, teardown),
		cmocka_unit_test_setup_teardown(test_groups_without_daemon, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dash_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escaped_args, setup, teardown),
		cmocka_unit_test_setup_teardown(test_help_lists_groups, setup, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
