/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_output.c - safe output: names, groups and metadata chosen by an
 * unprivileged user, read back by root through every output.
 *
 * The writer itself first (tools/common/output.c): its exact forms, and
 * for random bytes, text that is safe and decodes to the bytes, JSON that
 * a strict reader (tjson.c, written apart from the writer) accepts and
 * that gives the bytes back.
 *
 * Then the attack: a user the test creates registers names holding escape
 * sequences, newlines, C1 controls, bidirectional overrides and bytes that
 * are not UTF-8 (with metadata and group names alike, and a command name
 * of the same kind), against a root daemon; root then runs procreg ls,
 * get, members, groups, watch, readers and top, plain and --json, and
 * reads the daemon's log of refused registrations of those names. Every
 * text output must be safe for a terminal, every JSON document strict
 * UTF-8 JSON, and each must give the exact bytes back: the escaped form
 * through --escaped, the JSON through its strings and *_base64 fields.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "output.h"
#include "hostile.h"

#define A(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* ---- the writer --------------------------------------------------------- */

/* What WRITE writes for S[0..N), in memory (free() it); *LEN its length. */
static char *written(void (*write)(FILE *, const void *, size_t), const void *s, size_t n,
		     size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	assert_non_null(f);
	write(f, s, n);
	assert_int_equal(fclose(f), 0);
	return buf;
}

static char *text_of(const void *s, size_t n, size_t *len)
{
	return written(procreg__text, s, n, len);
}

static void name_field(FILE *f, const void *s, size_t n)
{
	procreg__json_field(f, "name", s, n);
}

/* WRITE must write exactly WANT for IN[0..N). */
static void expect_form(void (*write)(FILE *, const void *, size_t), const char *in, size_t n,
			const char *want)
{
	size_t len;
	char *got = written(write, in, n, &len);

	if (len != strlen(want) || memcmp(got, want, len))
		fail_msg("%zu bytes: got \"%s\", want \"%s\"", n, got, want);
	free(got);
}

/* The documented form (output.h), byte for byte. */
static void test_text_forms(void **state)
{
	(void)state;
#define T(in, want) expect_form(procreg__text, in, sizeof(in) - 1, want)
	T("plain.name-1_x@y", "plain.name-1_x@y");
	T("a b", "a b");                              /* spaces as they are */
	T("back\\slash", "back\\\\slash");
	T("nl\ncr\rtab\t", "nl\\ncr\\rtab\\t");
	T("\x1b[2J\x07\x00z", "\\x1b[2J\\x07\\x00z");
	T("del\x7f", "del\\x7f");
	T("caf\xc3\xa9 \xf0\x9f\x90\x8d", "caf\xc3\xa9 \xf0\x9f\x90\x8d");
	T("c1\xc2\x9b", "c1\\xc2\\x9b");                /* U+009B, CSI */
	T("c1\xc2\xa0", "c1\xc2\xa0");                  /* U+00A0 prints */
	T("raw\x9b", "raw\\x9b");                      /* a lone continuation byte */
	T("\xff\xfe", "\\xff\\xfe");
	T("cut\xe2\x82", "cut\\xe2\\x82");             /* truncated sequence */
	T("\xe2\x82" "A", "\\xe2\\x82A");
	T("ov\xc0\xaf", "ov\\xc0\\xaf");               /* overlong '/' */
	T("ov\xe0\x80\xaf", "ov\\xe0\\x80\\xaf");
	T("ov\xf0\x80\x80\xaf", "ov\\xf0\\x80\\x80\\xaf");
	T("sur\xed\xa0\x80", "sur\\xed\\xa0\\x80");    /* U+D800 */
	T("big\xf4\x90\x80\x80", "big\\xf4\\x90\\x80\\x80"); /* above U+10FFFF */
	T("bidi\xe2\x80\xae", "bidi\\xe2\\x80\\xae");  /* U+202E */
	T("iso\xe2\x81\xa6", "iso\\xe2\\x81\\xa6");    /* U+2066 */
	T("lrm\xe2\x80\x8e", "lrm\\xe2\\x80\\x8e");    /* U+200E */
	T("alm\xd8\x9c", "alm\\xd8\\x9c");             /* U+061C */
	T("ls\xe2\x80\xa8ps\xe2\x80\xa9", "ls\\xe2\\x80\\xa8ps\\xe2\\x80\\xa9");
	T("euro\xe2\x82\xac", "euro\xe2\x82\xac");
#undef T
	assert_int_equal(procreg__text_width("caf\xc3\xa9", 5), 4);
	assert_int_equal(procreg__text_width("\x1b", 1), 4);
	assert_int_equal(procreg__text_width("\\", 1), 2);
}

static void test_json_forms(void **state)
{
	(void)state;
#define J(in, want) expect_form(name_field, in, sizeof(in) - 1, want)
	J("plain", "\"name\":\"plain\"");
	J("q\"b\\", "\"name\":\"q\\\"b\\\\\"");
	J("\n\t\r\b\f\x01\x1b\x7f", "\"name\":\"\\n\\t\\r\\b\\f\\u0001\\u001b\\u007f\"");
	J("caf\xc3\xa9", "\"name\":\"caf\xc3\xa9\"");
	J("c1\xc2\x9b", "\"name\":\"c1\\u009b\"");          /* valid: lossless as \u */
	J("bidi\xe2\x80\xae", "\"name\":\"bidi\\u202e\"");
	/* The byte 0xff and the character U+00FF can be told apart. */
	J("\xc3\xbf", "\"name\":\"\xc3\xbf\"");
	J("\xff", "\"name\":\"\\ufffd\",\"name_base64\":\"/w==\"");
	J("ab\xed\xa0\x80", "\"name\":\"ab\\ufffd\\ufffd\\ufffd\",\"name_base64\":\"YWLtoIA=\"");
	J("\0", "\"name\":\"\\u0000\"");
	J("", "\"name\":\"\"");
#undef J
}

/* Bytes likely to matter, more often than chance would pick them. */
static unsigned char pick(uint64_t *seed)
{
	static const unsigned char hot[] = { 0x00, 0x07, 0x09, 0x0a, 0x0d, 0x1b, 0x5c, 0x7f, 0x80,
					     0x9b, 0xbf, 0xc0, 0xc2, 0xc3, 0xd8, 0xe0, 0xe2, 0xed,
					     0xef, 0xf0, 0xf4, 0xf5, 0xff, 'x', '"', 0x80, 0xa0,
					     0x81, 0xae, 0xa8, 0x9c };
	uint64_t r = th_xorshift(seed);

	return r & 1 ? hot[(r >> 8) % sizeof(hot)] : (unsigned char)(r >> 16);
}

/* For random byte strings: safe text that decodes back, strict JSON that
 * gives them back, one unit at a time or whole. */
static void test_random_round_trips(void **state)
{
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	unsigned char in[96];
	char err[256], out[256];

	(void)state;
	for (int iter = 0; iter < 20000; iter++) {
		size_t n = th_xorshift(&seed) % sizeof(in), len, at, got;
		char *txt, *json = NULL;
		struct tj *doc;
		FILE *f;

		for (size_t i = 0; i < n; i++)
			in[i] = pick(&seed);
		/* Text: safe, no line feed at all, and reversible. */
		txt = text_of(in, n, &len);
		if (tj_safe_text(txt, len, &at) < 0 || memchr(txt, '\n', len))
			fail_msg("iteration %d: escaped form not safe at byte %zu", iter, at);
		{
			/* The width is what a terminal shows: its code points. */
			size_t cps = 0;

			for (size_t i = 0; i < len; i++)
				cps += ((unsigned char)txt[i] & 0xc0) != 0x80;
			assert_int_equal(procreg__text_width(in, n), cps);
		}
		txt = realloc(txt, len + 1);
		assert_non_null(txt);
		txt[len] = 0;
		assert_int_equal(procreg__unescape(txt, &got, NULL), 0);
		assert_int_equal(got, n);
		assert_memory_equal(txt, in, n);
		free(txt);
		/* JSON. */
		f = open_memstream(&json, &len);
		assert_non_null(f);
		fputc('{', f);
		procreg__json_field(f, "name", in, n);
		fputc('}', f);
		assert_int_equal(fclose(f), 0);
		doc = tj_parse(json, len, err, sizeof(err));
		if (!doc)
			fail_msg("iteration %d: %s: %s", iter, err, json);
		if (tj_bytes(doc, "name", out, sizeof(out), &got, err, sizeof(err)) < 0)
			fail_msg("iteration %d: %s: %s", iter, err, json);
		assert_int_equal(got, n);
		assert_memory_equal(out, in, n);
		assert_int_equal(tj_get(doc, "name_base64") != NULL, !procreg__utf8_valid(in, n));
		tj_free(doc);
		free(json);
	}
}

static void test_cut_and_unescape(void **state)
{
	char big[10000], buf[PROCREG_TEXT_NAME_BUF], ctl[PROCREG_NAME_MAX], s[32];
	size_t len, bad;

	(void)state;
	memset(big, 'a', sizeof(big));
	procreg__text_cut(buf, sizeof(buf), big, sizeof(big), PROCREG_NAME_MAX);
	assert_int_equal(strlen(buf), PROCREG_NAME_MAX + strlen("...[10000 bytes, cut]"));
	assert_string_equal(buf + PROCREG_NAME_MAX, "...[10000 bytes, cut]");
	/* Any valid name is shown whole, even escaped to four times its size. */
	memset(ctl, 0x1b, sizeof(ctl));
	procreg__text_cut(buf, sizeof(buf), ctl, sizeof(ctl), PROCREG_NAME_MAX);
	assert_int_equal(strlen(buf), 4 * PROCREG_NAME_MAX);
	/* A buffer too small: cut at a unit, never inside an escape. */
	procreg__text_cut(s, sizeof(s), ctl, 20, PROCREG_NAME_MAX);
	assert_string_equal(s, "\\x1b\\x1b\\x1b...[20 bytes, cut]");

	snprintf(s, sizeof(s), "A\\x41\\\\\\n\\t\\r\\xfF");
	assert_int_equal(procreg__unescape(s, &len, NULL), 0);
	assert_int_equal(len, 7);
	assert_memory_equal(s, "AA\\\n\t\r\xff", 7);
	for (int i = 0; i < 4; i++) {
		static const char *const badv[] = { "ab\\q", "ab\\x4", "ab\\xg1", "ab\\" };

		snprintf(s, sizeof(s), "%s", badv[i]);
		assert_int_equal(procreg__unescape(s, &len, &bad), -EINVAL);
		assert_int_equal(bad, 2);
	}
}

/* ---- the attack ------------------------------------------------------- */

static const char comm[] = "cm\x1b[2J\xff";      /* the holder's command name */

struct attack {
	struct th_fx *f;
	struct th_user u;
	pid_t holder;
	int go[2], ready[2];
	const char *prefix;         /* the watch child's names: PREFIX + hostile */
};

/* As the user: hold every hostile name and group, with the metadata, under
 * a hostile command name, until the test is done. */
static int holder_main(void *arg)
{
	struct attack *a = arg;
	procreg_t *reg;
	char c;

	close(a->go[1]);
	close(a->ready[0]);
	th_become(&a->u);
	if (prctl(PR_SET_NAME, comm) < 0)
		return 10;
	reg = th_open(a->f->dir);
	if (!reg)
		return 11;
	if (th_hostile_claim(reg, "", 1) != 0)
		return 12;
	/* A lookup, so that its reader slot is claimed and counted. */
	if (procreg_lookup(reg, th_hostile_names[0], NULL) != 0 || write(a->ready[1], "r", 1) != 1)
		return 14;
	if (read(a->go[0], &c, 1) < 0)
		return 15;
	procreg_close(reg);
	return 0;
}

/* As the user: try to take the names the holder has (refused, logged). */
static int thief_main(void *arg)
{
	struct attack *a = arg;
	procreg_t *reg;

	th_become(&a->u);
	reg = th_open(a->f->dir);
	if (!reg)
		return 20;
	for (size_t i = 0; i < TH_NHOSTILE; i++)
		if (procreg_register(reg, th_hostile_names[i], NULL, 0) != -EEXIST)
			return 21;
	procreg_close(reg);
	return 0;
}

/* As the user: register PREFIX+name for each, join each group, and exit. */
static int churn_main(void *arg)
{
	struct attack *a = arg;
	procreg_t *reg;

	th_become(&a->u);
	reg = th_open(a->f->dir);
	if (!reg)
		return 30;
	if (th_hostile_claim(reg, a->prefix, 1) != 0)
		return 31;
	procreg_close(reg);
	return 0;
}

static int setup(void **state)
{
	struct attack *a = calloc(1, sizeof(*a));
	static const char *const args[] = { "-v", NULL };
	char c;

	assert_non_null(a);
	th_fx_start(state, args, NULL);
	a->f = *state;
	*state = a;
	th_user_new(&a->u);
	assert_int_equal(pipe2(a->go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(a->ready, O_CLOEXEC), 0);
	a->holder = th_fork(holder_main, a);
	/* Only the holder keeps these ends: its exit is an end of file. */
	close(a->ready[1]);
	close(a->go[0]);
	if (read(a->ready[0], &c, 1) != 1)
		fail_msg("the unprivileged holder did not register its names: exit status %d",
			 th_wait(a->holder));
	/* Its reader pages reach the daemon after its lookup, unawaited:
	 * readers and top list it once they have. */
	if (!th_until(th_reader_listed, &(struct th_reader_wait){ a->f->reg, a->holder }, 20000))
		fail_msg("the holder, pid %d, is not among the readers", (int)a->holder);
	return 0;
}

static int teardown(void **state)
{
	struct attack *a = *state;
	int st;

	close(a->go[1]);
	st = th_wait(a->holder);
	close(a->ready[0]);
	th_user_del(&a->u);
	*state = a->f;
	th_fx_stop(state);
	free(a);
	assert_int_equal(st, 0);
	return 0;
}

/* A command's whole output, with its length (NUL bytes would count). */
struct run {
	int st;
	char *out, *err;
	size_t outlen, errlen;
};

static char *fd_all(int fd, size_t *len)
{
	struct stat sb;
	char *buf;

	assert_int_equal(fstat(fd, &sb), 0);
	*len = (size_t)sb.st_size;
	buf = malloc(*len + 1);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, *len, 0), (ssize_t)*len);
	buf[*len] = 0;
	return buf;
}

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

/* Start ARGV (ARGV[0] a path), its output in memory files *OUT, *ERR. */
static pid_t start(const char *const *argv, int *out, int *err)
{
	pid_t pid;

	*out = memfd_create("out", MFD_CLOEXEC);
	*err = memfd_create("err", MFD_CLOEXEC);
	assert_true(*out >= 0 && *err >= 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(*out, 1);
		dup2(*err, 2);
		unsetenv("PROCREG_DIR");
		unsetenv("PROCREG_SCOPE");
		unsetenv("PROCREG_SOCKET");
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static void finish(struct run *r, pid_t pid, int out, int err)
{
	r->st = th_wait_ms(pid, 60000);
	if (r->st < 0)
		fail_msg("a command did not finish in 60 s");
	r->out = fd_all(out, &r->outlen);
	r->err = fd_all(err, &r->errlen);
	close(out);
	close(err);
}

/* procreg --dir DIR ARGS... */
static void cli(struct attack *a, struct run *r, const char *const *args)
{
	const char *argv[16] = { PROCREG_CLI_PATH, "--dir", a->f->dir };
	int n = 3, out, err;

	for (int i = 0; args[i]; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	pid_t pid;

	run_free(r);
	pid = start(argv, &out, &err);
	finish(r, pid, out, err);
}

/* Text fit for a terminal, on both streams. */
static void expect_safe_run(const char *what, const struct run *r)
{
	char w[128];

	snprintf(w, sizeof(w), "%s: stdout", what);
	th_expect_safe(w, r->out, r->outlen);
	snprintf(w, sizeof(w), "%s: stderr", what);
	th_expect_safe(w, r->err, r->errlen);
}

/* ls: one line per name, each name and its metadata decoding to what the
 * user registered; --json the same through its fields. */
static void test_ls(void **state)
{
	struct attack *a = *state;
	struct run r = { 0 };
	int seen[TH_NHOSTILE] = { 0 };
	char buf[4096];
	struct tj *doc;

	cli(a, &r, A("ls"));
	assert_int_equal(r.st, 0);
	expect_safe_run("ls", &r);
	for (char *l = r.out, *e; (e = strchr(l, '\n')); l = e + 1) {
		char *sp = memchr(l, ' ', (size_t)(e - l)), *last = memrchr(l, ' ', (size_t)(e - l));
		size_t n;
		int k;

		assert_non_null(sp);
		k = th_find(th_hostile_names, TH_NHOSTILE, buf, th_decode(l, (size_t)(sp - l), buf, sizeof(buf)));
		if (k < 0)
			fail_msg("ls: a line whose name is not one registered: %.*s", (int)(e - l), l);
		seen[k]++;
		n = th_decode(last + 1, (size_t)(e - last - 1), buf, sizeof(buf));
		assert_int_equal(n, th_hostile_meta_len);
		assert_memory_equal(buf, th_hostile_meta, th_hostile_meta_len);
	}
	for (size_t i = 0; i < TH_NHOSTILE; i++)
		assert_int_equal(seen[i], 1);

	cli(a, &r, A("ls", "--json"));
	assert_int_equal(r.st, 0);
	expect_safe_run("ls --json", &r);
	doc = th_expect_json("ls --json", r.out, r.outlen);
	assert_int_equal(doc->type, TJ_ARR);
	assert_int_equal(doc->n, TH_NHOSTILE);
	memset(seen, 0, sizeof(seen));
	for (size_t i = 0; i < doc->n; i++) {
		char err[256];
		size_t n;
		int k;

		if (tj_bytes(&doc->v[i], "name", buf, sizeof(buf), &n, err, sizeof(err)) < 0)
			fail_msg("ls --json: %s", err);
		k = th_find(th_hostile_names, TH_NHOSTILE, buf, n);
		assert_true(k >= 0);
		seen[k]++;
		if (tj_bytes(&doc->v[i], "meta", buf, sizeof(buf), &n, err, sizeof(err)) < 0)
			fail_msg("ls --json: %s", err);
		assert_int_equal(n, th_hostile_meta_len);
		assert_memory_equal(buf, th_hostile_meta, th_hostile_meta_len);
	}
	for (size_t i = 0; i < TH_NHOSTILE; i++)
		assert_int_equal(seen[i], 1);
	tj_free(doc);
	run_free(&r);
}

/* The escaped form of B[0..N), NUL-terminated, in BUF. */
static const char *escaped(const char *b, size_t n, char *buf, size_t cap)
{
	procreg__text_cut(buf, cap, b, n, SIZE_MAX);
	return buf;
}

/* get: by the escaped form (what ls printed), and by the raw bytes after
 * "--"; each finds the same entry, and prints it safely. */
static void test_get(void **state)
{
	struct attack *a = *state;
	struct run r = { 0 };
	char esc[PROCREG_TEXT_NAME_BUF], buf[4096], err[256];

	for (size_t i = 0; i < TH_NHOSTILE; i++) {
		const char *name = th_hostile_names[i], *p, *q;
		struct tj *doc;
		size_t n;

		escaped(name, strlen(name), esc, sizeof(esc));
		cli(a, &r, A("get", "--escaped", "--", esc));
		if (r.st != 0)
			fail_msg("get --escaped -- %s: exit %d: %s", esc, r.st, r.err);
		expect_safe_run("get", &r);
		/* "name  X" and "meta  M" lines: X, M decode to the bytes. */
		p = r.out;
		assert_true(!strncmp(p, "name  ", 6));
		q = strchr(p, '\n');
		n = th_decode(p + 6, (size_t)(q - p - 6), buf, sizeof(buf));
		assert_int_equal(n, strlen(name));
		assert_memory_equal(buf, name, n);
		p = strstr(r.out, "\nmeta  ");
		assert_non_null(p);
		p += 7;
		q = strchr(p, '\n');
		n = th_decode(p, (size_t)(q - p), buf, sizeof(buf));
		assert_int_equal(n, th_hostile_meta_len);
		assert_memory_equal(buf, th_hostile_meta, th_hostile_meta_len);

		cli(a, &r, A("get", "-e", "--json", "--", esc));
		if (r.st != 0)
			fail_msg("get -e --json -- %s: exit %d: %s", esc, r.st, r.err);
		expect_safe_run("get --json", &r);
		doc = th_expect_json("get --json", r.out, r.outlen);
		if (tj_bytes(doc, "name", buf, sizeof(buf), &n, err, sizeof(err)) < 0)
			fail_msg("get --json: %s", err);
		assert_int_equal(n, strlen(name));
		assert_memory_equal(buf, name, n);
		tj_free(doc);

		/* The raw bytes, after "--": the same entry. */
		cli(a, &r, A("get", "--", name));
		if (r.st != 0)
			fail_msg("get -- %s: exit %d: %s", esc, r.st, r.err);
		assert_true(!strncmp(r.out, "name  ", 6) && !strncmp(r.out + 6, esc, strlen(esc)));
	}

	/* A name beginning with '-' is an option unless it follows "--". */
	cli(a, &r, A("get", "-dash"));
	assert_int_equal(r.st, 2);
	assert_string_equal(r.err, "procreg: unknown option -dash\nTry 'procreg --help'.\n");
	cli(a, &r, A("get", "--", "-dash"));
	assert_int_equal(r.st, 0);
	assert_true(!strncmp(r.out, "name  -dash\n", 12));
	cli(a, &r, A("--", "get", "--json", "--", "-dash"));
	assert_int_equal(r.st, 0);
	assert_true(!strncmp(r.out, "{\"name\":\"-dash\",", 16));

	/* Not registered: the message quotes the name escaped. */
	cli(a, &r, A("get", "-e", "absent\\x1b[2J\\n"));
	assert_int_equal(r.st, 1);
	expect_safe_run("get (absent)", &r);
	assert_string_equal(r.err, "procreg: absent\\x1b[2J\\n: not registered\n");
	cli(a, &r, A("get", "-e", "bad\\q"));
	assert_int_equal(r.st, 2);
	assert_string_equal(r.err, "procreg: --escaped: NAME: bad escape at byte 3 (want \\\\, "
				   "\\n, \\t, \\r or \\xHH)\n");
	cli(a, &r, A("get", "-e", "nul\\x00"));
	assert_int_equal(r.st, 2);
	assert_string_equal(r.err, "procreg: --escaped: NAME: holds a NUL byte (\\x00)\n");
	{
		/* 10,000 bytes of escape sequences: the message is cut, and says so. */
		static char big[10001];

		for (size_t i = 0; i < 10000; i++)
			big[i] = i % 2 ? '\x1b' : '\n';
		cli(a, &r, A("get", "--", big));
		assert_int_equal(r.st, 2);
		expect_safe_run("get (10,000 bytes)", &r);
		assert_true(r.errlen < 1200);
		assert_non_null(strstr(r.err, "...[10000 bytes, cut]: name longer than 255 bytes"));
	}
	run_free(&r);
}

/* members and groups, plain and --json. */
static void test_groups(void **state)
{
	struct attack *a = *state;
	struct run r = { 0 };
	char esc[PROCREG_TEXT_NAME_BUF], buf[4096], err[256];
	int seen[TH_NHOSTILE_GROUPS] = { 0 };
	struct tj *doc;

	for (size_t i = 0; i < TH_NHOSTILE_GROUPS; i++) {
		const char *p, *q;
		size_t n;

		escaped(th_hostile_groups[i], strlen(th_hostile_groups[i]), esc, sizeof(esc));
		cli(a, &r, A("members", "-e", esc));
		if (r.st != 0)
			fail_msg("members -e %s: exit %d: %s", esc, r.st, r.err);
		expect_safe_run("members", &r);
		p = strrchr(r.out, ' ');
		q = strchr(p, '\n');
		n = th_decode(p + 1, (size_t)(q - p - 1), buf, sizeof(buf));
		assert_int_equal(n, th_hostile_meta_len);
		assert_memory_equal(buf, th_hostile_meta, th_hostile_meta_len);

		cli(a, &r, A("members", "-e", esc, "--json"));
		assert_int_equal(r.st, 0);
		expect_safe_run("members --json", &r);
		doc = th_expect_json("members --json", r.out, r.outlen);
		assert_int_equal(doc->n, 1);
		if (tj_bytes(&doc->v[0], "group", buf, sizeof(buf), &n, err, sizeof(err)) < 0 ||
		    th_find(th_hostile_groups, TH_NHOSTILE_GROUPS, buf, n) != (int)i)
			fail_msg("members --json: group %s: %s", esc, err);
		if (tj_bytes(&doc->v[0], "meta", buf, sizeof(buf), &n, err, sizeof(err)) < 0)
			fail_msg("members --json: %s", err);
		assert_int_equal(n, th_hostile_meta_len);
		assert_memory_equal(buf, th_hostile_meta, th_hostile_meta_len);
		tj_free(doc);
	}

	cli(a, &r, A("groups"));
	assert_int_equal(r.st, 0);
	expect_safe_run("groups", &r);
	for (char *l = r.out, *e; (e = strchr(l, '\n')); l = e + 1) {
		char *sp = memchr(l, ' ', (size_t)(e - l));
		int k = th_find(th_hostile_groups, TH_NHOSTILE_GROUPS, buf, th_decode(l, (size_t)(sp - l), buf, sizeof(buf)));

		assert_true(k >= 0);
		seen[k]++;
	}
	for (size_t i = 0; i < TH_NHOSTILE_GROUPS; i++)
		assert_int_equal(seen[i], 1);

	cli(a, &r, A("groups", "--json"));
	assert_int_equal(r.st, 0);
	expect_safe_run("groups --json", &r);
	doc = th_expect_json("groups --json", r.out, r.outlen);
	assert_int_equal(doc->n, TH_NHOSTILE_GROUPS);
	memset(seen, 0, sizeof(seen));
	for (size_t i = 0; i < doc->n; i++) {
		size_t n;
		int k;

		if (tj_bytes(&doc->v[i], "name", buf, sizeof(buf), &n, err, sizeof(err)) < 0)
			fail_msg("groups --json: %s", err);
		k = th_find(th_hostile_groups, TH_NHOSTILE_GROUPS, buf, n);
		assert_true(k >= 0);
		seen[k]++;
	}
	for (size_t i = 0; i < TH_NHOSTILE_GROUPS; i++)
		assert_int_equal(seen[i], 1);
	tj_free(doc);
	run_free(&r);
}

/* readers and top show the holder's command name, which it chose. */
static void test_readers_and_top(void **state)
{
	struct attack *a = *state;
	struct run r = { 0 };
	char esc[64], pid[32], buf[256], err[256];
	bool found = false;
	struct tj *doc;

	escaped(comm, strlen(comm), esc, sizeof(esc));
	snprintf(pid, sizeof(pid), "%d", (int)a->holder);
	cli(a, &r, A("readers"));
	assert_int_equal(r.st, 0);
	expect_safe_run("readers", &r);
	assert_non_null(strstr(r.out, esc));
	cli(a, &r, A("readers", "--json"));
	assert_int_equal(r.st, 0);
	expect_safe_run("readers --json", &r);
	doc = th_expect_json("readers --json", r.out, r.outlen);
	{
		const struct tj *v = tj_get(doc, "readers");

		assert_non_null(v);
		for (size_t i = 0; i < v->n; i++) {
			const struct tj *p = tj_get(&v->v[i], "pid");
			size_t n;

			if (!p || p->num != (double)a->holder)
				continue;
			if (tj_bytes(&v->v[i], "comm", buf, sizeof(buf), &n, err, sizeof(err)) < 0)
				fail_msg("readers --json: %s", err);
			assert_int_equal(n, strlen(comm));
			assert_memory_equal(buf, comm, n);
			found = true;
		}
	}
	assert_true(found);
	tj_free(doc);

	cli(a, &r, A("top", "--once", "--interval", "0.05"));
	assert_int_equal(r.st, 0);
	expect_safe_run("top", &r);
	assert_non_null(strstr(r.out, esc));
	cli(a, &r, A("top", "--once", "--json", "--interval", "0.05"));
	assert_int_equal(r.st, 0);
	expect_safe_run("top --json", &r);
	tj_free(th_expect_json("top --json", r.out, r.outlen));
	run_free(&r);
}

/* Wait until memory file FD holds NEEDLE (the output of a running
 * command), 20 s at most. */
static void wait_output(int fd, const char *needle)
{
	for (int ms = 0; ms < 20000; ms += 10) {
		size_t len;
		char *s = fd_all(fd, &len);
		bool has = memmem(s, len, needle, strlen(needle)) != NULL;

		free(s);
		if (has)
			return;
		th_msleep(10);
	}
	fail_msg("\"%s\" never came out", needle);
}

/* watch, plain and --json, while the user registers names, joins groups
 * and exits. */
static void test_watch(void **state)
{
	struct attack *a = *state;
	const char *argv[2][8] = {
		{ PROCREG_CLI_PATH, "--dir", a->f->dir, "watch", NULL },
		{ PROCREG_CLI_PATH, "--dir", a->f->dir, "watch", "--json", NULL },
	};
	struct run r[2] = { 0 };
	int out[2], err[2], seen[TH_NHOSTILE] = { 0 }, gseen[TH_NHOSTILE_GROUPS] = { 0 };
	pid_t w[2];
	char buf[4096], e[256];

	a->prefix = "w.";
	for (int k = 0; k < 2; k++)
		w[k] = start(argv[k], &out[k], &err[k]);
	/* Each watcher follows from the head it read at its start: a name
	 * registered until both report it proves they are following. */
	for (int i = 0;; i++) {
		char name[32];
		size_t l0, l1;
		char *s0, *s1;
		bool both;

		snprintf(name, sizeof(name), "sync.%d", i);
		assert_int_equal(procreg_register(a->f->reg, name, NULL, 0), 0);
		th_msleep(50);
		s0 = fd_all(out[0], &l0);
		s1 = fd_all(out[1], &l1);
		both = memmem(s0, l0, "sync.", 5) && memmem(s1, l1, "sync.", 5);
		free(s0);
		free(s1);
		if (both)
			break;
		if (i == 400)
			fail_msg("procreg watch never reported a registration");
	}
	assert_int_equal(th_wait(th_fork(churn_main, a)), 0);
	assert_int_equal(procreg_register(a->f->reg, "sync.end", NULL, 0), 0);
	for (int k = 0; k < 2; k++) {
		wait_output(out[k], "sync.end");
		kill(w[k], SIGINT);
		finish(&r[k], w[k], out[k], err[k]);
		assert_int_equal(r[k].st, 0);
		expect_safe_run(k ? "watch --json" : "watch", &r[k]);
	}
	/* Plain: "SEQ TIME registered NAME pid P node N". */
	for (char *l = r[0].out, *end; (end = strchr(l, '\n')); l = end + 1) {
		char *p = strstr(l, " registered   ");
		char *q;
		int k;

		if (!p || p > end)
			continue;
		p += strlen(" registered   ");
		q = strstr(p, " pid ");
		if (strncmp(p, "w.", 2))
			continue;
		k = th_find(th_hostile_names, TH_NHOSTILE, buf, th_decode(p + 2, (size_t)(q - p - 2), buf, sizeof(buf)));
		if (k < 0)
			fail_msg("watch: a name not registered: %.*s", (int)(end - l), l);
		seen[k]++;
	}
	for (size_t i = 0; i < TH_NHOSTILE; i++)
		assert_int_equal(seen[i], 1);
	/* JSON: one document a line. */
	memset(seen, 0, sizeof(seen));
	for (char *l = r[1].out, *end; (end = strchr(l, '\n')); l = end + 1) {
		struct tj *doc = th_expect_json("watch --json", l, (size_t)(end - l));
		const struct tj *ev = tj_get(doc, "event");
		size_t n;
		int k;

		assert_non_null(ev);
		if (tj_get(doc, "group")) {
			if (tj_bytes(doc, "group", buf, sizeof(buf), &n, e, sizeof(e)) < 0)
				fail_msg("watch --json: %s", e);
			if (!strcmp(ev->s, "joined") && (k = th_find(th_hostile_groups, TH_NHOSTILE_GROUPS, buf, n)) >= 0)
				gseen[k]++;
		} else if (tj_bytes(doc, "name", buf, sizeof(buf), &n, e, sizeof(e)) < 0) {
			fail_msg("watch --json: %s", e);
		} else if (!strcmp(ev->s, "registered") && n > 2 && !memcmp(buf, "w.", 2) &&
			   (k = th_find(th_hostile_names, TH_NHOSTILE, buf + 2, n - 2)) >= 0) {
			seen[k]++;
		}
		tj_free(doc);
	}
	for (size_t i = 0; i < TH_NHOSTILE; i++)
		assert_int_equal(seen[i], 1);
	for (size_t i = 0; i < TH_NHOSTILE_GROUPS; i++)
		assert_int_equal(gseen[i], 1);
	run_free(&r[0]);
	run_free(&r[1]);
}

/* The daemon's log (-v) of the registrations it refused: one line each,
 * safe, naming the name in the escaped form. */
static void test_daemon_log(void **state)
{
	struct attack *a = *state;
	pid_t thief = th_fork(thief_main, a);
	char needle[64], buf[4096], *log;
	int seen[TH_NHOSTILE] = { 0 };
	size_t len, at;
	FILE *f;

	assert_int_equal(th_wait(thief), 0);
	snprintf(needle, sizeof(needle), "': refused to pid %d: held by pid %d", (int)thief,
		 (int)a->holder);
	/* The log is written before the reply: it is all there. */
	f = fopen(a->f->d.log, "re");
	assert_non_null(f);
	{
		int fd = fileno(f);

		log = fd_all(fd, &len);
	}
	fclose(f);
	if (tj_safe_text(log, len, &at) < 0)
		fail_msg("procregd's log: unsafe byte 0x%02x at %zu:\n%s", (unsigned char)log[at], at,
			 log);
	for (char *l = log, *end; (end = strchr(l, '\n')); l = end + 1) {
		/* --verbose's lines: the debug level. */
		char *p = memmem(l, (size_t)(end - l), "]: debug: name '", 16), *q;
		int k;

		q = memmem(l, (size_t)(end - l), needle, strlen(needle));
		if (!p || !q)
			continue;
		p += 16;
		k = th_find(th_hostile_names, TH_NHOSTILE, buf, th_decode(p, (size_t)(q - p), buf, sizeof(buf)));
		if (k < 0)
			fail_msg("procregd's log: a name not registered: %.*s", (int)(end - l), l);
		seen[k]++;
	}
	for (size_t i = 0; i < TH_NHOSTILE; i++)
		if (seen[i] != 1)
			fail_msg("procregd's log: refusal of name %zu logged %d times:\n%s", i, seen[i],
				 log);
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text_forms),
		cmocka_unit_test(test_json_forms),
		cmocka_unit_test(test_random_round_trips),
		cmocka_unit_test(test_cut_and_unescape),
		cmocka_unit_test_setup_teardown(test_ls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_get, setup, teardown),
		cmocka_unit_test_setup_teardown(test_groups, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readers_and_top, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_daemon_log, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
