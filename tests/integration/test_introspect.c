/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_introspect.c - the introspection API (lib/introspect.c) against a
 * real daemon: the header's figures, the name hash, the reader registry
 * and its check, the table check on a whole table and on damaged copies,
 * and the replication status file. Every output struct's .sz is checked:
 * zero or too short is -EINVAL, and nothing past the caller's .sz is
 * written.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"

#define A(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define WAIT_MS 20000

static int setup(void **state)
{
	return th_fx_start(state, A("--max-size", "4M"), NULL);
}

static void reg_name(procreg_t *reg, const char *name)
{
	int err = procreg_register(reg, name, "m", 1);

	if (err)
		fail_msg("register %s: %s", name, procreg_strerror(err));
}

/* A struct of the size a newer header would give it: the caller's .sz
 * covers TAIL bytes past what this library knows. The struct itself is
 * filled with 0xa5, which the library must overwrite; the tail is zero
 * (PROCREG_OPTS), as the library must leave it. */
#define TAIL 32
#define NEWER(type, name)                                                     \
	union {                                                               \
		struct type s;                                                \
		unsigned char b[sizeof(struct type) + TAIL];                 \
	} name;                                                               \
	memset(&name, 0xa5, sizeof(struct type));                             \
	memset(name.b + sizeof(struct type), 0, TAIL);                        \
	name.s.sz = sizeof(name)

static void tail_untouched(const void *p, size_t known)
{
	const unsigned char *b = p;

	for (size_t i = known; i < known + TAIL; i++)
		if (b[i] != 0)
			fail_msg("byte %zu past the library's struct (%zu bytes) was written", i, known);
}

/* ---- sizes ------------------------------------------------------------ */

static void test_sz_refused(void **state)
{
	struct th_fx *f = *state;
	struct procreg_table_info ti = { .sz = 0 };
	struct procreg_reader_check rc = { .sz = 0 };
	struct procreg_check ck = { .sz = 0 };
	struct procreg_bridge b = { .sz = 0 };

	assert_int_equal(procreg_table_info(f->reg, &ti), -EINVAL);
	assert_int_equal(procreg_reader_check(f->reg, &rc), -EINVAL);
	assert_int_equal(procreg_check(f->reg, &ck, NULL, NULL), -EINVAL);
	assert_int_equal(procreg_bridge(f->reg, &b, NULL, NULL), -EINVAL);
	/* Too short: a caller's struct that ends before the first version's. */
	ti.sz = sizeof(ti) - 1;
	assert_int_equal(procreg_table_info(f->reg, &ti), -EINVAL);
	rc.sz = offsetof(struct procreg_reader_check, stalls);
	assert_int_equal(procreg_reader_check(f->reg, &rc), -EINVAL);
	ck.sz = offsetof(struct procreg_check, problems);
	assert_int_equal(procreg_check(f->reg, &ck, NULL, NULL), -EINVAL);
	b.sz = sizeof(b) / 2;
	assert_int_equal(procreg_bridge(f->reg, &b, NULL, NULL), -EINVAL);
	/* Nothing was filled in. */
	assert_int_equal(ti.layout_version, 0);
	assert_int_equal(rc.max_readers, 0);
	assert_int_equal(ck.names, 0);
	/* Missing arguments. */
	assert_int_equal(procreg_table_info(f->reg, NULL), -EINVAL);
	assert_int_equal(procreg_name_hash(f->reg, "x", NULL), -EINVAL);
	assert_int_equal(procreg_readers(f->reg, NULL, NULL), -EINVAL);
	assert_int_equal(procreg_node_name(f->reg, 0, NULL, 10), -EINVAL);
}

static void test_sz_newer_caller(void **state)
{
	struct th_fx *f = *state;
	NEWER(procreg_table_info, ti);
	NEWER(procreg_reader_check, rc);
	NEWER(procreg_check, ck);

	reg_name(f->reg, "n.one");
	assert_int_equal(procreg_table_info(f->reg, &ti.s), 0);
	assert_int_equal(ti.s.sz, sizeof(ti));
	assert_int_equal(ti.s.layout_version, PR_LAYOUT_VERSION);
	tail_untouched(&ti, sizeof(ti.s));
	assert_true(procreg_reader_check(f->reg, &rc.s) >= 0);
	assert_int_equal(rc.s.max_readers, 4096);
	tail_untouched(&rc, sizeof(rc.s));
	assert_int_equal(procreg_check(f->reg, &ck.s, NULL, NULL), 0);
	assert_int_equal(ck.s.names, 1);
	assert_int_equal(ck.s.tombstones, f->reg->map.hdr->names.tombs);
	tail_untouched(&ck, sizeof(ck.s));

	/* A newer caller asking for a member this library does not know of
	 * (a non-zero byte past its struct) is told so, not ignored. */
	ti.b[sizeof(ti.s) + 3] = 1;
	assert_int_equal(procreg_table_info(f->reg, &ti.s), -EOPNOTSUPP);
	rc.b[sizeof(rc.s)] = 1;
	assert_int_equal(procreg_reader_check(f->reg, &rc.s), -EOPNOTSUPP);
}

/* ---- the header and the hash ------------------------------------------ */

static void test_table_info(void **state)
{
	struct th_fx *f = *state;
	const struct pr_table_hdr *h = f->reg->map.hdr;
	PROCREG_OPTS(procreg_table_info, ti);
	PROCREG_OPTS(procreg_stats, st);

	reg_name(f->reg, "t.one");
	reg_name(f->reg, "t.two");
	assert_int_equal(procreg_unregister(f->reg, "t.two"), 0);
	assert_int_equal(procreg_join(f->reg, "t.group", "", 0), 0);
	assert_int_equal(procreg_table_info(f->reg, &ti), 0);
	assert_int_equal(procreg_stats(f->reg, &st), 0);
	assert_int_equal(ti.layout_version, PR_LAYOUT_VERSION);
	assert_int_equal(ti.name_max, PROCREG_NAME_MAX);
	assert_int_equal(ti.meta_max, PROCREG_META_MAX);
	assert_int_equal(ti.file_size, 4u << 20);
	assert_int_equal(ti.file_size, h->file_size);
	assert_int_equal(ti.created_ns, h->created_ns);
	assert_int_equal(ti.max_readers, st.reader_slots);
	assert_int_equal(ti.name_capacity, st.index_capacity);
	assert_true(ti.group_capacity >= 1);
	assert_int_equal(ti.feed_capacity, h->feed_cap);
	/* A removal leaves a tombstone only where a probe must go on past it. */
	assert_int_equal(ti.name_tombstones, h->names.tombs);
	assert_true(ti.generation >= 4);
	assert_true(ti.gp >= 1);
	assert_true(ti.freed_gp <= ti.gp);
}

static void test_name_hash(void **state)
{
	struct th_fx *f = *state;
	uint64_t hash = 0, other = 0;
	char long_name[PROCREG_NAME_MAX + 2];

	assert_int_equal(procreg_name_hash(f->reg, "payments", &hash), 0);
	assert_int_equal(hash, pr_hash("payments", 8, f->reg->map.hdr->hash_seed));
	assert_int_equal(procreg_name_hash(f->reg, "payment", &other), 0);
	assert_int_not_equal(hash, other);
	assert_int_equal(procreg_name_hash(f->reg, "", &hash), -EINVAL);
	assert_int_equal(procreg_name_hash(f->reg, NULL, &hash), -EINVAL);
	memset(long_name, 'x', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = 0;
	assert_int_equal(procreg_name_hash(f->reg, long_name, &hash), -ENAMETOOLONG);
}

/* ---- readers ---------------------------------------------------------- */

/* A reader process: opens the scope, reads LOOKUPS times, is held
 * (with HOLD, inside a read-side section: what a debugger or SIGSTOP does
 * to a lookup half-way). */
struct reader_arg {
	const char *dir;
	int lookups;
	bool hold;
};

static int reader_main(void *p, int phase)
{
	struct reader_arg *a = p;
	procreg_t *reg;

	if (phase)
		return 0;
	reg = th_open(a->dir);
	if (!reg)
		return 3;
	for (int i = 0; i < a->lookups; i++)
		procreg_lookup(reg, "r.name", NULL);
	if (a->hold) {
		struct pr_reader_slot *s = procreg__rcu_slot(&reg->rcu);

		if (!s)
			return 4;
		pr_read_lock(&reg->map, s);
	}
	return 0;
}

struct find_reader {
	pid_t pid;
	int seen;
	struct procreg_reader r;
};

static int find_reader(const struct procreg_reader *r, void *arg)
{
	struct find_reader *w = arg;

	assert_int_equal(r->sz, sizeof(*r));
	if (r->pid == w->pid) {
		w->seen++;
		w->r = *r;
	}
	return 0;
}

struct want_reader {
	procreg_t *reg;
	pid_t pid;
	uint64_t lookups;
	uint32_t flags;
	struct procreg_reader r;
};

static int reader_shows(void *p)
{
	struct want_reader *w = p;
	struct find_reader fr = { .pid = w->pid };

	assert_int_equal(procreg_readers(w->reg, find_reader, &fr), 0);
	w->r = fr.r;
	return fr.seen == 1 && fr.r.lookups == w->lookups && fr.r.flags == w->flags;
}

/* Start a reader process (A) held by HELD, and wait until the registry
 * shows it with A's lookups: its pid, and W filled. */
static void start_reader(struct th_fx *f, struct th_held *held, struct reader_arg *a,
			 struct want_reader *w)
{
	reg_name(f->reg, "r.name");
	th_held_init(held);
	w->reg = f->reg;
	w->lookups = (uint64_t)a->lookups;
	w->flags = 0;
	w->pid = th_held_start(held, reader_main, a);
	assert_true(w->pid > 0);
	th_held_ready(held, WAIT_MS);
	/* The daemon sums each reader's slots about once a second. */
	if (!th_until(reader_shows, w, WAIT_MS))
		fail_msg("reader %d never showed %d lookups", (int)w->pid, a->lookups);
}

static int stop_at_first(const struct procreg_reader *r, void *arg)
{
	(*(int *)arg)++;
	(void)r;
	return 42;
}

static void test_readers(void **state)
{
	struct th_fx *f = *state;
	PROCREG_OPTS(procreg_reader_check, rc);
	struct reader_arg a = { f->dir, 300, false };
	struct want_reader w;
	struct th_held held;
	int calls = 0;

	start_reader(f, &held, &a, &w);
	assert_int_equal(w.r.uid, getuid());
	assert_int_equal(w.r.threads, 1);
	assert_int_equal(w.r.in_section, 0);
	assert_int_equal(w.r.pages, 1);
	assert_int_equal(w.r.flags, 0);
	assert_true(w.r.start_time > 0);
	assert_true(w.r.registered_ns > 0);
	assert_int_equal(w.r.stalled_ns, 0);

	/* All well: the check counts it (and this process, a reader too). */
	assert_int_equal(procreg_reader_check(f->reg, &rc), 0);
	assert_int_equal(rc.max_readers, 4096);
	assert_true(rc.readers >= 1);
	assert_int_equal(rc.stalled, 0);
	assert_int_equal(rc.gone, 0);
	assert_true(rc.threads >= 1);
	assert_int_equal(rc.stalls, 0);
	assert_int_equal(rc.last_stall_pid, 0);

	/* A callback's non-zero value ends the walk and is returned. */
	assert_int_equal(procreg_readers(f->reg, stop_at_first, &calls), 42);
	assert_int_equal(calls, 1);

	/* With no daemon to drop it, a reader that exits stays in the
	 * registry: the check finds it gone. */
	th_daemon_kill(&f->d);
	th_held_kill(&held);
	w.flags = PROCREG_READER_GONE;
	assert_true(reader_shows(&w));
	assert_int_equal(procreg_reader_check(f->reg, &rc), 1);
	assert_int_equal(rc.gone, 1);
	assert_int_equal(rc.stalled, 0);
}

/* A reader that holds a grace period up is given up on: stalled. */
static void test_readers_stalled(void **state)
{
	struct th_fx *f = *state;
	PROCREG_OPTS(procreg_reader_check, rc);
	struct reader_arg a = { f->dir, 5, true };
	struct want_reader w;
	struct th_held held;

	start_reader(f, &held, &a, &w);
	assert_int_equal(w.r.in_section, 1);
	/* Retire memory so that the daemon starts a grace period, which the
	 * reader holds up until the daemon stops waiting for it
	 * (--reader-timeout-ms, by default a second). */
	reg_name(f->reg, "r.gone");
	assert_int_equal(procreg_unregister(f->reg, "r.gone"), 0);
	w.flags = PROCREG_READER_STALLED;
	if (!th_until(reader_shows, &w, WAIT_MS))
		fail_msg("reader %d never showed stalled", (int)w.pid);
	assert_true(w.r.stalled_ns > 0);
	assert_int_equal(procreg_reader_check(f->reg, &rc), 1);
	assert_int_equal(rc.stalled, 1);
	assert_int_equal(rc.gone, 0);
	assert_int_equal(rc.stalls, 1);
	assert_int_equal(rc.last_stall_pid, w.pid);
	assert_int_equal(rc.last_stall_uid, getuid());
	assert_true(rc.last_stall_ns > 0);
	assert_true(rc.in_section >= 1);
	/* Stalled and gone: unwell once. */
	th_daemon_kill(&f->d);
	th_held_kill(&held);
	w.flags = PROCREG_READER_STALLED | PROCREG_READER_GONE;
	assert_true(reader_shows(&w));
	assert_int_equal(procreg_reader_check(f->reg, &rc), 1);
	assert_int_equal(rc.gone, 1);
}

/* ---- the table check -------------------------------------------------- */

struct problems {
	int n;
	char first[512];
	int stop;           /* return this from the callback */
};

static int on_problem(const char *problem, void *arg)
{
	struct problems *p = arg;

	if (p->n++ == 0)
		snprintf(p->first, sizeof(p->first), "%s", problem);
	return p->stop;
}

static void test_check_whole(void **state)
{
	struct th_fx *f = *state;
	PROCREG_OPTS(procreg_check, ck);
	struct problems p = { 0 };

	for (int i = 0; i < 6; i++) {
		char name[16];

		snprintf(name, sizeof(name), "c.n%d", i);
		reg_name(f->reg, name);
	}
	assert_int_equal(procreg_unregister(f->reg, "c.n2"), 0);
	assert_int_equal(procreg_join(f->reg, "c.g1", "a", 1), 0);
	assert_int_equal(procreg_join(f->reg, "c.g2", "b", 1), 0);
	assert_int_equal(procreg_check(f->reg, &ck, on_problem, &p), 0);
	assert_int_equal(p.n, 0);
	assert_int_equal(ck.names, 5);
	assert_int_equal(ck.groups, 2);
	assert_int_equal(ck.memberships, 2);
	assert_int_equal(ck.tombstones, f->reg->map.hdr->names.tombs + f->reg->map.hdr->groups.tombs);
	assert_int_equal(ck.processes, 1);
	assert_int_equal(ck.problems, 0);
	/* No callback: the same verdict. */
	assert_int_equal(procreg_check(f->reg, &ck, NULL, NULL), 0);
}

static void test_check_damaged(void **state)
{
	struct th_fx *f = *state;
	PROCREG_OPTS(procreg_check, ck);
	struct problems p = { 0 };
	char table[600], d[600];
	procreg_t *copy;

	for (int i = 0; i < 7; i++) {
		char name[16];

		snprintf(name, sizeof(name), "d.n%d", i);
		reg_name(f->reg, name);
	}
	/* A counter that disagrees with the index, in a copy of the table
	 * (a reader cannot write the live one). */
	th_copy_table(f->dir, "copy", table, sizeof(table));
	th_poke_u64(table, offsetof(struct pr_table_hdr, names.live), 9);
	snprintf(d, sizeof(d), "%s/copy", f->dir);
	copy = th_open(d);
	assert_non_null(copy);
	assert_int_equal(procreg_check(copy, &ck, on_problem, &p), -EUCLEAN);
	assert_int_equal(ck.names, 7);
	assert_int_equal(ck.problems, 1);
	assert_int_equal(p.n, 1);
	assert_string_equal(p.first, "name index: counter says 9 live entries, the walk found 7");

	/* A callback's non-zero value stops the report and is returned. */
	memset(&p, 0, sizeof(p));
	p.stop = 7;
	th_poke_u64(table, offsetof(struct pr_table_hdr, memberships), 3);
	assert_int_equal(procreg_check(copy, &ck, on_problem, &p), 7);
	assert_int_equal(p.n, 1);
	assert_int_equal(ck.problems, 2);

	/* An index offset that leads nowhere. */
	memset(&p, 0, sizeof(p));
	th_poke_u64(table, offsetof(struct pr_table_hdr, names.index_off), 1ull << 40);
	assert_int_equal(procreg_check(copy, &ck, on_problem, &p), -EUCLEAN);
	assert_int_equal(ck.names, 0);
	assert_true(ck.problems >= 2);
	assert_non_null(strstr(p.first, "name index: offset 1099511627776 is not a whole index block"));
	procreg_close(copy);

	/* A short name's slot whose key is another's (one bit off). */
	{
		const struct pr_map *m = &f->reg->map;
		const struct pr_index *ix =
			(const struct pr_index *)(m->base + m->hdr->names.index_off);
		uint64_t p0 = 0;
		char want[128];

		while (p0 < ix->capacity && !pr_slot_live(ix->slot[p0].word))
			p0++;
		assert_true(p0 < ix->capacity);
		assert_int_not_equal(ix->slot[p0].key, 0);
		th_copy_table(f->dir, "copy2", table, sizeof(table));
		th_poke_u64(table, (uint64_t)((const uint8_t *)&ix->slot[p0].key - m->base),
			    ix->slot[p0].key ^ 0x100);
		snprintf(d, sizeof(d), "%s/copy2", f->dir);
		copy = th_open(d);
		assert_non_null(copy);
		memset(&p, 0, sizeof(p));
		assert_int_equal(procreg_check(copy, &ck, on_problem, &p), -EUCLEAN);
		snprintf(want, sizeof(want), "(slot %llu): the slot does not hold its key",
			 (unsigned long long)p0);
		assert_non_null(strstr(p.first, want));
		assert_int_equal(ck.problems, 3); /* and the live and local counts it leaves short */
		procreg_close(copy);
	}
}

static int count_problem(const char *problem, void *arg)
{
	(void)problem;
	(*(int *)arg)++;
	return 0;
}

/* More problems than are shown: every one counted, the first
 * PROCREG_CHECK_PROBLEMS_MAX handed over. */
static void test_check_many_problems(void **state)
{
	struct th_fx *f = *state;
	PROCREG_OPTS(procreg_check, ck);
	char table[600], d[600];
	procreg_t *copy;
	int shown = 0;

	/* Longer than PR_INLINE_MAX: their slots hold their hashes' tags,
	 * not the names. */
	for (int i = 0; i < 150; i++) {
		char name[32];

		snprintf(name, sizeof(name), "m.not.inline.%d", i);
		assert_true(strlen(name) > PR_INLINE_MAX);
		reg_name(f->reg, name);
	}
	/* Another seed: no name's hash matches its slot any more. */
	th_copy_table(f->dir, "copy", table, sizeof(table));
	th_poke_u64(table, offsetof(struct pr_table_hdr, hash_seed),
		    f->reg->map.hdr->hash_seed ^ 1);
	snprintf(d, sizeof(d), "%s/copy", f->dir);
	copy = th_open(d);
	assert_non_null(copy);
	assert_int_equal(procreg_check(copy, &ck, count_problem, &shown), -EUCLEAN);
	assert_int_equal(shown, PROCREG_CHECK_PROBLEMS_MAX);
	/* 150 hashes, and the counters of live and local names. */
	assert_int_equal(ck.problems, 152);
	assert_int_equal(ck.names, 0);
	procreg_close(copy);
}

/* ---- replication ------------------------------------------------------ */

struct nodes_seen {
	int n;
	struct procreg_node v[4];
};

static int add_node(const struct procreg_node *n, void *arg)
{
	struct nodes_seen *s = arg;

	if (s->n < 4)
		s->v[s->n] = *n;
	s->n++;
	return 0;
}

static void test_bridge(void **state)
{
	struct th_fx *f = *state;
	PROCREG_OPTS(procreg_bridge, b);
	struct nodes_seen s = { 0 };
	char path[600], name[64];

	/* A daemon without --node publishes nothing. */
	assert_int_equal(procreg_bridge(f->reg, &b, add_node, &s), -ENOENT);
	assert_int_equal(procreg_node_name(f->reg, 0, name, sizeof(name)), -ENOENT);

	/* What procregd --node writes (nodes_file.h), here written by hand. */
	snprintf(path, sizeof(path), "%s/procreg.default.nodes", f->dir);
	th_write_file(path,
		      "procreg-nodes 1\n"
		      "self alpha 00000000000000ff 12\n"
		      "stats 1 2 3 4 5\n"
		      "node 1 beta 10.0.0.2:7000 0000000000000abc 100 6 7 8\n"
		      "something a later daemon adds\n"
		      "node 2 gamma - 0000000000000001 200 0 0 0\n"
		      "down 3 delta 10.0.0.4:7000 0000000000000002\n",
		      0644);
	assert_int_equal(procreg_bridge(f->reg, &b, add_node, &s), 0);
	assert_string_equal(b.node, "alpha");
	assert_int_equal(b.incarnation, 0xff);
	assert_int_equal(b.seq, 12);
	assert_int_equal(b.changes_out, 1);
	assert_int_equal(b.changes_in, 2);
	assert_int_equal(b.conflicts, 3);
	assert_int_equal(b.nodes_down, 4);
	assert_int_equal(b.resyncs, 5);
	assert_int_equal(b.nodes, 2);
	assert_int_equal(s.n, 2);
	assert_int_equal(s.v[0].sz, sizeof(struct procreg_node)); /* the library's */
	assert_int_equal(s.v[0].id, 1);
	assert_string_equal(s.v[0].name, "beta");
	assert_string_equal(s.v[0].addr, "10.0.0.2:7000");
	assert_int_equal(s.v[0].incarnation, 0xabc);
	assert_int_equal(s.v[0].up_since_ns, 100);
	assert_int_equal(s.v[0].changes_in, 6);
	assert_int_equal(s.v[0].bytes_in, 7);
	assert_int_equal(s.v[0].bytes_out, 8);
	assert_string_equal(s.v[1].name, "gamma");
	assert_string_equal(s.v[1].addr, "");
	/* The summary alone, and the nodes alone. */
	assert_int_equal(procreg_bridge(f->reg, &b, NULL, NULL), 0);
	s.n = 0;
	assert_int_equal(procreg_bridge(f->reg, NULL, add_node, &s), 0);
	assert_int_equal(s.n, 2);

	/* Names by id. */
	assert_int_equal(procreg_node_name(f->reg, 0, name, sizeof(name)), 0);
	assert_string_equal(name, "alpha");
	assert_int_equal(procreg_node_name(f->reg, 2, name, sizeof(name)), 0);
	assert_string_equal(name, "gamma");
	/* A node down whose entries linger is not up, but its id still
	 * names it. */
	assert_int_equal(procreg_node_name(f->reg, 3, name, sizeof(name)), 0);
	assert_string_equal(name, "delta");
	assert_int_equal(procreg_node_name(f->reg, 4, name, sizeof(name)), -ENOENT);
	assert_int_equal(procreg_node_name(f->reg, 1, name, 4), -ERANGE);

	/* Not a file of this format; a file others may write. */
	th_write_file(path, "procreg-nodes 2\nself alpha 00000000000000ff 12\n", 0644);
	assert_int_equal(procreg_bridge(f->reg, &b, NULL, NULL), -EPROTO);
	th_write_file(path, "procreg-nodes 1\nself alpha 00000000000000ff 12\n", 0666);
	assert_int_equal(procreg_bridge(f->reg, &b, NULL, NULL), -EPERM);
	th_write_file(path, "procreg-nodes 1\nself alpha 00000000000000ff 12\n", 0664);
	assert_int_equal(procreg_bridge(f->reg, &b, NULL, NULL), -EPERM);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_sz_refused, setup, th_fx_stop),
		cmocka_unit_test_setup_teardown(test_sz_newer_caller, setup, th_fx_stop),
		cmocka_unit_test_setup_teardown(test_table_info, setup, th_fx_stop),
		cmocka_unit_test_setup_teardown(test_name_hash, setup, th_fx_stop),
		cmocka_unit_test_setup_teardown(test_readers, setup, th_fx_stop),
		cmocka_unit_test_setup_teardown(test_readers_stalled, setup, th_fx_stop),
		cmocka_unit_test_setup_teardown(test_check_whole, setup, th_fx_stop),
		cmocka_unit_test_setup_teardown(test_check_damaged, setup, th_fx_stop),
		cmocka_unit_test_setup_teardown(test_check_many_problems, setup, th_fx_stop),
		cmocka_unit_test_setup_teardown(test_bridge, setup, th_fx_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
