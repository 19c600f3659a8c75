/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_groups.c - groups: a group index beside the name index, and one
 * member index per group.
 *
 * The first half drives the writer API (lib/writer.c) directly, the way
 * procregd's do_join and do_leave drive it, with no daemon: a member's key
 * is its identity (pid, start time, node), so one test process can make
 * up as many members as it likes (pid = i + 1000, start = i + 7). It
 * checks what joining and leaving cost, as work done (index rebuilds,
 * slots built, arena bytes), never as time; what readers in other
 * processes see while the writer churns; and recovery after a crash.
 *
 * The second half runs a real procregd and real processes: joins, leaves,
 * deaths, permissions, limits, batches, a storm of random operations,
 * and a daemon killed and restarted.
 *
 * Forked children never call cmocka asserts (a failed assert would unwind
 * into the child's copy of the test runner); they report through their
 * exit status and pipes, and the parent asserts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"

#define SCOPE "g"
#define MB (1ull << 20)
#define WAIT_MS 120000 /* bound of every wait on a child: a hang fails, it never paces */

/* ---- helpers shared by both halves ------------------------------------ */

/* In a forked child: a crash must kill it. cmocka's handlers, inherited
 * through fork(), would catch the signal and carry on running the rest of
 * the test suite in the child. */
static void child_signals(void)
{
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS, SIGABRT };

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
}

/* In a forked child: close every inherited descriptor but KEEP (-1
 * terminated), so that the pipes of other children are held only by the
 * parent and a child sees end-of-file exactly when the parent closes. */
static void close_other_fds(const int *keep)
{
	for (int fd = 3; fd < 4096; fd++) {
		bool k = false;

		for (int i = 0; keep[i] >= 0; i++)
			k = k || keep[i] == fd;
		if (!k)
			close(fd);
	}
}

/* Read one byte from FD within WAIT_MS: 1, or 0 at end of file (the child
 * exited), -1 on time-out. */
static int read_byte(int fd, char *c)
{
	struct pollfd p = { fd, POLLIN, 0 };
	int k;

	do
		k = poll(&p, 1, WAIT_MS);
	while (k < 0 && errno == EINTR);
	if (k <= 0)
		return -1;
	return read(fd, c, 1) == 1 ? 1 : 0;
}

/* Read exactly LEN bytes within WAIT_MS each. */
static bool read_all(int fd, void *buf, size_t len)
{
	uint8_t *b = buf;

	for (size_t got = 0; got < len;) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t n;

		if (poll(&p, 1, WAIT_MS) <= 0)
			return false;
		n = read(fd, b + got, len - got);
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return true;
}

/* Collected entries, each with its metadata in META (PROCREG_META_MAX
 * bytes an entry). */
struct elist {
	struct procreg_entry *v;
	unsigned char *meta;
	size_t n, cap;
};

static int collect(const struct procreg_entry *e, void *arg)
{
	struct elist *l = arg;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct procreg_entry *v = realloc(l->v, cap * sizeof(*v));
		unsigned char *m = v ? realloc(l->meta, cap * PROCREG_META_MAX) : NULL;

		if (v)
			l->v = v;
		if (!m)
			return -ENOMEM;
		l->meta = m;
		l->cap = cap;
		for (size_t i = 0; i < l->n; i++)
			l->v[i].meta = l->meta + i * PROCREG_META_MAX;
	}
	l->v[l->n] = (struct procreg_entry){ .sz = sizeof(*e),
					     .meta = l->meta + l->n * PROCREG_META_MAX,
					     .meta_size = PROCREG_META_MAX };
	th_entry_copy(&l->v[l->n++], e);
	return 0;
}

static void elist_free(struct elist *l)
{
	free(l->v);
	free(l->meta);
}

static void members_of(procreg_t *r, const char *group, struct elist *l)
{
	l->n = 0;
	assert_int_equal(procreg_members(r, group, collect, l), 0);
}

/* The one member of L with PID, or NULL; fails if there are several. */
static const struct procreg_entry *member_pid(const struct elist *l, pid_t pid)
{
	const struct procreg_entry *m = NULL;

	for (size_t i = 0; i < l->n; i++) {
		if (l->v[i].pid != pid)
			continue;
		if (m)
			fail_msg("pid %d is a member twice", (int)pid);
		m = &l->v[i];
	}
	return m;
}

struct glist {
	struct procreg_group *v;
	size_t n, cap;
};

static int collect_group(const struct procreg_group *g, void *arg)
{
	struct glist *l = arg;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct procreg_group *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = *g;
	return 0;
}

static void groups_of(procreg_t *r, struct glist *l)
{
	l->n = 0;
	assert_int_equal(procreg_groups(r, collect_group, l), 0);
}

static const struct procreg_group *group_in(const struct glist *l, const char *name)
{
	const struct procreg_group *g = NULL;

	for (size_t i = 0; i < l->n; i++) {
		if (strcmp(l->v[i].name, name))
			continue;
		if (g)
			fail_msg("group %s listed twice", name);
		g = &l->v[i];
	}
	return g;
}

static int count_cb(const struct procreg_entry *e, void *arg)
{
	(void)e;
	++*(uint64_t *)arg;
	return 0;
}

static uint64_t walk_count(procreg_t *r, const char *group)
{
	uint64_t n = 0;

	assert_int_equal(procreg_members(r, group, count_cb, &n), 0);
	return n;
}

static void expect_count(procreg_t *r, const char *group, uint64_t members, uint64_t local)
{
	uint64_t m = 99, l = 99;

	assert_int_equal(procreg_group_count(r, group, &m, &l), 0);
	assert_int_equal(m, members);
	assert_int_equal(l, local);
	assert_int_equal(walk_count(r, group), members);
}

/* ==== the writer API, no daemon ======================================== */

/* Membership metadata is a function of the member's identity and a
 * version: "<pid>:<start>:v<ver>|" and a pad whose length and bytes depend
 * on all three, so record sizes vary and a stale or foreign record cannot
 * pass for the right one. */
static size_t member_meta(uint32_t pid, uint64_t start, unsigned ver, uint8_t *out)
{
	int n = snprintf((char *)out, PROCREG_META_MAX, "%u:%llu:v%u|", pid,
			 (unsigned long long)start, ver);
	size_t pad = (size_t)((pid * 7u + ver * 13u) % 40u);

	for (size_t j = 0; j < pad; j++)
		out[(size_t)n + j] = (uint8_t)(j * 37 + ver + pid);
	return (size_t)n + pad;
}

static uint32_t uid_of(uint32_t pid)
{
	return pid % 5000u;
}

/* Whether E is a whole membership of GROUP for its identity, at version
 * WANT_VER (any if < 0). */
static bool member_ok(const struct procreg_entry *e, const char *group, long want_ver)
{
	uint8_t m[PROCREG_META_MAX];
	unsigned pid = 0, ver = 0;
	unsigned long long start = 0;
	size_t ml;

	if (strcmp(e->name, group) || e->pid <= 0 || e->uid != uid_of((uint32_t)e->pid))
		return false;
	if (e->meta_len < 6 || e->meta_len > 200)
		return false;
	memcpy(m, e->meta, e->meta_len);
	m[e->meta_len] = 0;
	if (sscanf((const char *)m, "%u:%llu:v%u|", &pid, &start, &ver) != 3 ||
	    pid != (unsigned)e->pid || start != e->start_time)
		return false;
	if (want_ver >= 0 && ver != (unsigned long)want_ver)
		return false;
	ml = member_meta(pid, start, ver, m);
	return ml == e->meta_len && !memcmp(m, e->meta, ml);
}

#define w_open_at(w, dir, max_size) th_writer_open(w, dir, SCOPE, max_size)
#define r_open(dir) th_open_scope(dir, SCOPE)

/*
 * Join GROUP for the identity (pid, start, node) as procregd's do_join
 * does: find the group or create it, reserve room in its member index
 * (which may rebuild it), find the member's slot, fill a new record in
 * private and publish it with one store (retiring the old one on a
 * re-join). A failure after the group was made drops it again if empty.
 * Returns 0 for a new member, 1 for a replace, or a negative errno.
 */
static int w_join_raw(struct pr_writer *w, const char *group, uint32_t pid, uint64_t start,
		      uint32_t node, const void *meta, size_t meta_len)
{
	struct pr_record t = { 0 };
	struct pr_root *root;
	struct pr_key k;
	size_t len = strlen(group);
	uint64_t pos = UINT64_MAX, old = 0, off;
	int err = procreg__w_group(w, group, len, false, &root);

	if (err == -ENOENT)
		err = procreg__w_group(w, group, len, true, &root);
	if (err)
		return err;
	pr_key_member(&k, pid, start, node, w->map.hdr->hash_seed);
	err = procreg__w_reserve(w, root);
	if (!err) {
		old = procreg__w_find(w, root, &k, &pos);
		if (pos == UINT64_MAX)
			err = -EOVERFLOW; /* the index is full: reserve failed its job */
	}
	if (!err) {
		t.kind = PR_KIND_MEMBER;
		t.start_time = start;
		t.registered_ns = procreg__now_ns();
		t.pid = pid;
		t.uid = uid_of(pid);
		t.node = node;
		t.name_len = (uint16_t)len;
		t.meta_len = (uint16_t)meta_len;
		err = procreg__w_new_record(w, &t, group, meta, &off);
	}
	if (err) {
		procreg__w_drop_group_if_empty(w, group, len);
		return err;
	}
	procreg__w_publish(w, root, pos, off);
	CMM_STORE_SHARED(w->map.hdr->joins, w->map.hdr->joins + 1);
	return old ? 1 : 0;
}

static int w_join(struct pr_writer *w, const char *group, uint32_t pid, uint64_t start,
		  uint32_t node, unsigned ver)
{
	uint8_t meta[PROCREG_META_MAX];
	size_t ml = member_meta(pid, start, ver, meta);

	return w_join_raw(w, group, pid, start, node, meta, ml);
}

/* The member record of (pid, start, node) in GROUP: its offset, or 0. */
static uint64_t w_member(struct pr_writer *w, const char *group, uint32_t pid, uint64_t start,
			 uint32_t node, uint64_t *pos)
{
	struct pr_root *root;
	struct pr_key k;
	uint64_t p;

	if (procreg__w_group(w, group, strlen(group), false, &root) < 0)
		return 0;
	pr_key_member(&k, pid, start, node, w->map.hdr->hash_seed);
	return procreg__w_find(w, root, &k, pos ? pos : &p);
}

/* Leave GROUP as do_leave does: find the membership, then remove it the
 * way registry.c removes a membership (procreg__w_unpublish, which drops the group
 * with its last member). */
static int w_leave(struct pr_writer *w, const char *group, uint32_t pid, uint64_t start,
		   uint32_t node)
{
	uint64_t off = w_member(w, group, pid, start, node, NULL);
	int err;

	if (!off)
		return -ENOENT;
	err = procreg__w_unpublish(w, off);
	if (!err)
		CMM_STORE_SHARED(w->map.hdr->leaves, w->map.hdr->leaves + 1);
	return err;
}

/* Register a name, as do_register does (only to show that a name and a
 * group may share a name). */
static int w_register(struct pr_writer *w, const char *name, uint32_t pid, uint64_t start)
{
	struct pr_record t = { .kind = PR_KIND_NAME };
	size_t len = strlen(name);
	uint64_t pos, old, off;
	int err = procreg__w_reserve(w, &w->map.hdr->names);

	if (err)
		return err;
	old = procreg__w_find_name(w, name, len, &pos);
	t.start_time = start;
	t.registered_ns = procreg__now_ns();
	t.pid = pid;
	t.uid = uid_of(pid);
	t.name_len = (uint16_t)len;
	t.meta_len = 4;
	err = procreg__w_new_record(w, &t, name, "name", &off);
	if (err)
		return err;
	procreg__w_publish(w, &w->map.hdr->names, pos, off);
	return old ? 1 : 0;
}

/* Run reclamation to the end. Only for when no reader is inside a
 * critical section: then it finishes at once. */
static void drain(struct pr_writer *w)
{
	for (int i = 0; i < 16 && procreg__w_reclaim(w); i++)
		;
	assert_int_equal(procreg__w_reclaim(w), 0);
	assert_int_equal(w->retired.n, 0);
	assert_int_equal(w->waiting.n, 0);
}

static uint64_t ix_bytes(uint64_t cap)
{
	return sizeof(struct pr_index) + cap * sizeof(struct pr_slot);
}

static uint64_t rounded(uint64_t n)
{
	return (n + PR_ALIGN - 1) & ~(uint64_t)(PR_ALIGN - 1);
}

static const struct pr_index *ix_at(const struct pr_writer *w, const struct pr_root *root)
{
	return (const struct pr_index *)(w->map.base + root->index_off);
}

static const struct pr_root *w_group_root(struct pr_writer *w, const char *group)
{
	struct pr_root *root;

	return procreg__w_group(w, group, strlen(group), false, &root) ? NULL : root;
}

/* Everything reachable from the header, counted by walking it: what
 * arena_used must say once nothing waits for a grace period, and what the
 * counters must say at any time. */
struct reach {
	uint64_t bytes, names, groups, members, local_members;
};

static struct reach w_reach(struct pr_writer *w)
{
	const struct pr_table_hdr *h = w->map.hdr;
	const struct pr_index *nx = ix_at(w, &h->names), *gx = ix_at(w, &h->groups);
	struct reach s = { 0 };

	/* The name and group indexes, the change feed's ring and the reader
	 * registry. */
	s.bytes = ix_bytes(nx->capacity) + ix_bytes(gx->capacity) +
		  h->feed_cap * sizeof(struct pr_event) + h->readers_cap * sizeof(struct pr_reader_info);
	for (uint64_t p = 0; p < nx->capacity; p++) {
		if (!pr_slot_live(nx->slot[p].word))
			continue;
		s.names++;
		s.bytes += procreg__record_size((const struct pr_record *)(w->map.base +
									 pr_slot_off(nx->slot[p].word)));
	}
	for (uint64_t p = 0; p < gx->capacity; p++) {
		const struct pr_record *g;
		const struct pr_root *gr;
		const struct pr_index *mx;
		uint64_t live = 0, local = 0;

		if (!pr_slot_live(gx->slot[p].word))
			continue;
		g = (const struct pr_record *)(w->map.base + pr_slot_off(gx->slot[p].word));
		assert_int_equal(g->kind, PR_KIND_GROUP);
		gr = (const struct pr_root *)(w->map.base + g->aux);
		mx = ix_at(w, gr);
		s.groups++;
		s.bytes += procreg__record_size(g) + rounded(sizeof(*gr)) + ix_bytes(mx->capacity);
		for (uint64_t q = 0; q < mx->capacity; q++) {
			const struct pr_record *m;

			if (!pr_slot_live(mx->slot[q].word))
				continue;
			m = (const struct pr_record *)(w->map.base + pr_slot_off(mx->slot[q].word));
			assert_int_equal(m->kind, PR_KIND_MEMBER);
			assert_int_equal(m->name_len, g->name_len);
			assert_memory_equal(m->data, g->data, g->name_len);
			live++;
			local += m->node == 0;
			s.bytes += procreg__record_size(m);
		}
		/* A group exists while it has members; its counts are exact. */
		assert_true(live > 0);
		assert_int_equal(gr->live, live);
		assert_int_equal(gr->local, local);
		s.members += live;
		s.local_members += local;
	}
	return s;
}

/* The header's counts agree with a walk of the table and with what the
 * reader API reports. */
static void check_counts(struct pr_writer *w, procreg_t *r)
{
	struct reach s = w_reach(w);
	PROCREG_OPTS(procreg_stats, st);
	struct glist gl = { 0 };
	uint64_t sum = 0;

	assert_int_equal(w->map.hdr->names.live, s.names);
	assert_int_equal(w->map.hdr->groups.live, s.groups);
	assert_int_equal(w->map.hdr->memberships, s.members);
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, s.names);
	assert_int_equal(st.groups, s.groups);
	assert_int_equal(st.memberships, s.members);
	groups_of(r, &gl);
	assert_int_equal(gl.n, s.groups);
	for (size_t i = 0; i < gl.n; i++) {
		expect_count(r, gl.v[i].name, gl.v[i].members, gl.v[i].local_members);
		sum += gl.v[i].members;
	}
	assert_int_equal(sum, s.members);
	free(gl.v);
}

/* ---- join, leave, members --------------------------------------------- */

static void test_w_join_leave_members(void **state)
{
	char *dir = th_mkdtemp();
	struct pr_writer w;
	struct elist l = { 0 };
	struct glist gl = { 0 };
	PROCREG_OPTS(procreg_stats, st);
	uint64_t used0;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 16 * MB);
	r = r_open(dir);
	assert_non_null(r);
	drain(&w);
	used0 = w.map.hdr->arena_used;

	/* Nothing yet: a group that does not exist has no members. */
	expect_count(r, "web", 0, 0);
	groups_of(r, &gl);
	assert_int_equal(gl.n, 0);
	assert_int_equal(w_leave(&w, "web", 1000, 7, 0), -ENOENT);

	/* Three members of "web", one of them on another node; two of "db". */
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(w_join(&w, "web", 1000 + i, 7 + i, i == 2 ? 5 : 0, 1), 0);
	assert_int_equal(w_join(&w, "db", 1000, 7, 0, 1), 0);
	assert_int_equal(w_join(&w, "db", 1003, 10, 0, 1), 0);
	/* The same pid and start on another node is another member. */
	assert_int_equal(w_join(&w, "db", 1000, 7, 1, 1), 0);
	expect_count(r, "web", 3, 2);
	expect_count(r, "db", 3, 2);
	check_counts(&w, r);

	members_of(r, "web", &l);
	assert_int_equal(l.n, 3);
	for (uint32_t i = 0; i < 3; i++) {
		const struct procreg_entry *e = member_pid(&l, (pid_t)(1000 + i));

		assert_non_null(e);
		assert_true(member_ok(e, "web", 1));
		assert_int_equal(e->start_time, 7 + i);
		assert_int_equal(e->node, i == 2 ? 5 : 0);
		assert_true(e->registered_ns > 0);
	}

	/* Joining again replaces the metadata: still one member, and the
	 * old record waits for a grace period, then is freed. */
	assert_int_equal(w_join(&w, "web", 1001, 8, 0, 2), 1);
	expect_count(r, "web", 3, 2);
	members_of(r, "web", &l);
	assert_true(member_ok(member_pid(&l, 1001), "web", 2));
	assert_true(member_ok(member_pid(&l, 1000), "web", 1));
	assert_true(w.retired.n > 0);
	/* Metadata may be empty, or as large as the limit. */
	{
		static uint8_t big[PROCREG_META_MAX];

		memset(big, 'b', sizeof(big));
		assert_int_equal(w_join_raw(&w, "meta", 1, 2, 0, NULL, 0), 0);
		assert_int_equal(w_join_raw(&w, "meta", 3, 4, 0, big, sizeof(big)), 0);
		members_of(r, "meta", &l);
		assert_int_equal(l.n, 2);
		assert_int_equal(member_pid(&l, 1)->meta_len, 0);
		assert_int_equal(member_pid(&l, 3)->meta_len, PROCREG_META_MAX);
		assert_memory_equal(member_pid(&l, 3)->meta, big, sizeof(big));
	}

	/* A group and a name may share a name, and do not disturb each other. */
	assert_int_equal(w_register(&w, "web", 4242, 1), 0);
	assert_int_equal(procreg_lookup(r, "web", NULL), 0);
	expect_count(r, "web", 3, 2);
	assert_int_equal(procreg_lookup(r, "db", NULL), -ENOENT);

	groups_of(r, &gl);
	assert_int_equal(gl.n, 3);
	assert_int_equal(group_in(&gl, "web")->members, 3);
	assert_int_equal(group_in(&gl, "web")->local_members, 2);
	assert_int_equal(group_in(&gl, "db")->members, 3);
	assert_int_equal(group_in(&gl, "meta")->members, 2);
	check_counts(&w, r);
	procreg_stats(r, &st);
	assert_int_equal(st.groups, 3);
	assert_int_equal(st.memberships, 8);
	assert_int_equal(st.names, 1);
	assert_int_equal(st.joins, 9);

	/* Leaving: only the identity that joined; the wrong start or node is
	 * another process. */
	assert_int_equal(w_leave(&w, "web", 1001, 9, 0), -ENOENT);
	assert_int_equal(w_leave(&w, "web", 1002, 9, 0), -ENOENT);
	assert_int_equal(w_leave(&w, "web", 1001, 8, 0), 0);
	assert_int_equal(w_leave(&w, "web", 1001, 8, 0), -ENOENT);
	expect_count(r, "web", 2, 1);
	members_of(r, "web", &l);
	assert_null(member_pid(&l, 1001));

	/* The last member out takes the group with it, and only that group. */
	assert_int_equal(w_leave(&w, "web", 1000, 7, 0), 0);
	assert_int_equal(w_leave(&w, "web", 1002, 9, 5), 0);
	expect_count(r, "web", 0, 0);
	assert_null(w_group_root(&w, "web"));
	groups_of(r, &gl);
	assert_int_equal(gl.n, 2);
	assert_null(group_in(&gl, "web"));
	assert_int_equal(procreg_lookup(r, "web", NULL), 0); /* the name stays */
	check_counts(&w, r);

	/* A group emptied by removing its members' records (a death). */
	assert_int_equal(procreg__w_unpublish(&w, w_member(&w, "db", 1000, 7, 1, NULL)), 0);
	assert_int_equal(procreg__w_unpublish(&w, w_member(&w, "db", 1000, 7, 0, NULL)), 0);
	expect_count(r, "db", 1, 1);
	assert_int_equal(procreg__w_unpublish(&w, w_member(&w, "db", 1003, 10, 0, NULL)), 0);
	assert_null(w_group_root(&w, "db"));
	assert_int_equal(w_leave(&w, "meta", 1, 2, 0), 0);
	assert_int_equal(w_leave(&w, "meta", 3, 4, 0), 0);
	procreg_stats(r, &st);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.memberships, 0);
	assert_int_equal(st.leaves, 5);
	check_counts(&w, r);

	/* Everything the groups took comes back. */
	{
		uint64_t pos, off = procreg__w_find_name(&w, "web", 3, &pos);

		assert_true(off != 0);
		procreg__w_remove(&w, &w.map.hdr->names, pos);
	}
	drain(&w);
	assert_int_equal(w.map.hdr->arena_used, used0);
	assert_int_equal(w.map.hdr->arena_used, w_reach(&w).bytes);

	elist_free(&l);
	free(gl.v);
	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- a big group: the cost of joining and leaving --------------------- */

#define BIG 50000
#define BIG_MID 10000
#define BIG_META 12 /* fixed: every member record has one size */

static void big_meta(uint32_t i, char *out)
{
	snprintf(out, BIG_META + 1, "big-%08u", i);
}

struct big_walk {
	unsigned *count;
	uint64_t total, bad;
};

static int big_cb(const struct procreg_entry *e, void *arg)
{
	struct big_walk *b = arg;
	char m[BIG_META + 1];
	uint32_t i = (uint32_t)e->pid - 1000;

	b->total++;
	big_meta(i, m);
	if (e->pid < 1000 || i >= BIG || e->start_time != i + 7 || strcmp(e->name, "big") ||
	    e->meta_len != BIG_META || memcmp(e->meta, m, BIG_META))
		b->bad++;
	else
		b->count[i]++;
	return 0;
}

/* Every member in [lo, hi) seen exactly once, nothing else. */
static void expect_big_members(procreg_t *r, uint32_t lo, uint32_t hi, uint32_t step_out)
{
	struct big_walk b = { calloc(BIG, sizeof(unsigned)), 0, 0 };
	uint64_t want = 0;

	assert_non_null(b.count);
	assert_int_equal(procreg_members(r, "big", big_cb, &b), 0);
	assert_int_equal(b.bad, 0);
	for (uint32_t i = 0; i < BIG; i++) {
		unsigned exp = i >= lo && i < hi && !(step_out && i % step_out == 0);

		if (b.count[i] != exp)
			fail_msg("member %u seen %u times, expected %u", i, b.count[i], exp);
		want += exp;
	}
	assert_int_equal(b.total, want);
	free(b.count);
}

/* The member index's mean probe length (1 + distance from home), summed
 * over its live slots: the work one lookup or removal does. */
static double mean_probe(const struct pr_writer *w, const struct pr_root *root)
{
	const struct pr_index *ix = ix_at(w, root);
	uint64_t n = 0, dist = 0;

	for (uint64_t p = 0; p < ix->capacity; p++) {
		uint64_t wd = ix->slot[p].word, home;

		if (!pr_slot_live(wd))
			continue;
		home = pr_slot_hash_hi(wd, ix->slot[p].key, w->map.hdr->hash_seed) >> (ix->shift - 32);
		dist += (p - home) & (ix->capacity - 1);
		n++;
	}
	return n ? 1.0 + (double)dist / (double)n : 0;
}

static void test_w_big_group(void **state)
{
	char *dir = th_mkdtemp();
	struct pr_writer w;
	const uint64_t rec = PR_RECORD_SIZE(3, BIG_META);
	uint64_t used0, rh0, rh_mid = 0, rh_built, last_off = 0, caps_built = 0, copied = 0;
	uint64_t rebuilds_seen = 0, cap_mid = 0, group_bytes;
	double per_member_mid = 0, per_member_end;
	char m[BIG_META + 1];
	PROCREG_OPTS(procreg_stats, st);
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 64 * MB);
	r = r_open(dir);
	assert_non_null(r);
	drain(&w);
	used0 = w.map.hdr->arena_used;
	rh0 = w.map.hdr->rehashes;
	/* What a group costs besides its members: its record and root. */
	group_bytes = PR_RECORD_SIZE(3, 0) + rounded(sizeof(struct pr_root));

	for (uint32_t i = 0; i < BIG; i++) {
		const struct pr_root *root;
		uint64_t live_before = i;

		big_meta(i, m);
		assert_int_equal(w_join_raw(&w, "big", 1000 + i, i + 7, 0, m, BIG_META), 0);
		root = w_group_root(&w, "big");
		assert_non_null(root);
		/* A new member index block is a rebuild (the first is the
		 * group's own, built empty when it was made). */
		if (root->index_off != last_off) {
			if (last_off) {
				rebuilds_seen++;
				caps_built += ix_at(&w, root)->capacity;
				copied += live_before;
			}
			last_off = root->index_off;
		}
		/* Reclaim as a daemon does: freed index blocks are reused. */
		if (i % 1024 == 0)
			procreg__w_reclaim(&w);
		if (i + 1 == BIG_MID) {
			drain(&w);
			rh_mid = w.map.hdr->rehashes - rh0;
			cap_mid = ix_at(&w, root)->capacity;
			/* Record bytes are exactly one record a member; the rest
			 * is the index, a few slots a member. */
			assert_int_equal(w.map.hdr->arena_used - used0 - group_bytes - ix_bytes(cap_mid),
					 (uint64_t)BIG_MID * rec);
			per_member_mid = (double)(w.map.hdr->arena_used - used0) / BIG_MID;
			assert_true(mean_probe(&w, root) <= 4.0);
		}
	}
	drain(&w);
	rh_built = w.map.hdr->rehashes - rh0;
	{
		const struct pr_root *root = w_group_root(&w, "big");
		uint64_t cap = ix_at(&w, root)->capacity;

		per_member_end = (double)(w.map.hdr->arena_used - used0) / BIG;
		print_message("%u members: %llu rebuilds (%llu at %u), index %llu slots (%llu at %u), "
			      "%llu slots built, %llu slot words copied; %.1f arena bytes a member "
			      "(%.1f at %u), mean probe %.2f\n",
			      BIG, (unsigned long long)rh_built, (unsigned long long)rh_mid, BIG_MID,
			      (unsigned long long)cap, (unsigned long long)cap_mid, BIG_MID,
			      (unsigned long long)caps_built, (unsigned long long)copied,
			      per_member_end, per_member_mid, BIG_MID, mean_probe(&w, root));
		/* Every rebuild was of this group's member index... */
		assert_int_equal(rebuilds_seen, rh_built);
		/* ...and there were logarithmically many: the index doubles. */
		assert_true(rh_built <= 64 - (uint64_t)__builtin_clzll(BIG) + 2);
		assert_true(rh_built - rh_mid <= 4); /* 5x the members, log2(5) + 2 */
		/* All the indexes ever built hold a few slots a member, and
		 * the rebuilds copied a couple of slot words a member: joins
		 * cost O(1) amortised. */
		assert_true(caps_built <= 8ull * BIG);
		assert_true(copied <= 2ull * BIG);
		assert_true(cap <= 4ull * BIG);
		assert_true(mean_probe(&w, root) <= 4.0);
		/* Space: one record a member, exactly, and an index of a few
		 * slots a member. */
		assert_int_equal(w.map.hdr->arena_used - used0 - group_bytes - ix_bytes(cap),
				 (uint64_t)BIG * rec);
		assert_true(per_member_end <= (double)rec + 4.0 * sizeof(struct pr_slot));
		assert_true(per_member_mid <= (double)rec + 4.0 * sizeof(struct pr_slot));
		assert_true(per_member_end >= (double)rec && per_member_mid >= (double)rec);
	}

	/* The counts agree with a walk, and the walk sees each once. */
	expect_count(r, "big", BIG, BIG);
	procreg_stats(r, &st);
	assert_int_equal(st.groups, 1);
	assert_int_equal(st.memberships, BIG);
	assert_int_equal(st.joins, BIG);
	expect_big_members(r, 0, BIG, 0);
	check_counts(&w, r);

	/* Tear down, in an order unrelated to the index's, the multiples of
	 * 7 first: leaving never rebuilds. */
	for (uint32_t i = 0; i < BIG; i += 7)
		assert_int_equal(w_leave(&w, "big", 1000 + i, i + 7, 0), 0);
	drain(&w);
	expect_big_members(r, 0, BIG, 7);
	expect_count(r, "big", BIG - (BIG + 6) / 7, BIG - (BIG + 6) / 7);
	for (uint32_t k = 0; k < BIG; k++) {
		uint32_t i = (uint32_t)(((uint64_t)k * 7919u) % BIG);

		if (i % 7 == 0)
			continue;
		assert_int_equal(w_leave(&w, "big", 1000 + i, i + 7, 0), 0);
		if (k % 1024 == 0)
			procreg__w_reclaim(&w);
	}
	assert_true(w.map.hdr->rehashes - rh0 == rh_built);

	/* The group is gone, and with it every byte it took. */
	assert_null(w_group_root(&w, "big"));
	assert_int_equal(w.map.hdr->groups.live, 0);
	assert_int_equal(w.map.hdr->memberships, 0);
	expect_count(r, "big", 0, 0);
	procreg_stats(r, &st);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.memberships, 0);
	assert_int_equal(st.leaves, BIG);
	drain(&w);
	assert_int_equal(w.map.hdr->arena_used, used0);

	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- readers in other processes while the writer churns --------------- */

#define WSTABLE 1000
#define WCHURN 60000
#define WPHASE 1500
#define WHOT 16
#define WKIDS 2
#define CHURN_PID 2000000u

struct walker {
	const char *dir;
	int idx;
	int report_fd;   /* one byte when ready, then one per whole pass */
	int stop_fd;     /* readable (end of file) once the parent is done */
};

struct wseen {
	unsigned count[WSTABLE];
	uint64_t total, bad;
};

static int wseen_cb(const struct procreg_entry *e, void *arg)
{
	struct wseen *s = arg;
	uint32_t pid = (uint32_t)e->pid;

	s->total++;
	if (pid >= 1000 && pid < 1000 + WSTABLE) {
		/* A stable member: always version 3. */
		if (!member_ok(e, "walk", 3) || e->start_time != pid - 1000 + 7 || e->node != 0)
			s->bad++;
		else
			s->count[pid - 1000]++;
	} else if (pid < CHURN_PID || !member_ok(e, "walk", 1) || e->start_time != pid - CHURN_PID + 7) {
		s->bad++;
	}
	return 0;
}

static bool stop_requested(int fd)
{
	struct pollfd p = { fd, POLLIN, 0 };

	return poll(&p, 1, 0) > 0;
}

static int walker_main(void *arg)
{
	struct walker *a = arg;
	struct wseen *s = malloc(sizeof(*s));
	procreg_t *r;
	char c = 'r';
	int ret = 0, page;

	child_signals();
	r = r_open(a->dir);
	if (!r || !s)
		return 2;
	/* Our page, for the writer to take as procregd would, with the
	 * byte that says we have started. */
	page = th_reader_page(r);
	if (write(a->report_fd, &c, 1) != 1 || write(a->report_fd, &page, sizeof(page)) != sizeof(page))
		return 3;
	for (;;) {
		/* Decided before the pass: every pass that starts before the
		 * parent stops is a whole pass overlapping its writes. */
		bool last = stop_requested(a->stop_fd);
		int rc;

		memset(s, 0, sizeof(*s));
		rc = procreg_members(r, "walk", wseen_cb, s);
		if (rc) {
			fprintf(stderr, "walker %d: procreg_members: %d\n", a->idx, rc);
			ret = 4;
		}
		if (s->bad) {
			fprintf(stderr, "walker %d: %llu inconsistent members\n", a->idx,
				(unsigned long long)s->bad);
			ret = 5;
		}
		for (unsigned i = 0; i < WSTABLE; i++) {
			if (s->count[i] != 1) {
				fprintf(stderr, "walker %d: stable member %u seen %u times\n", a->idx,
					i, s->count[i]);
				ret = 6;
			}
		}
		c = 'p';
		if (write(a->report_fd, &c, 1) != 1)
			ret = ret ? ret : 7;
		if (last || ret)
			break;
	}
	free(s);
	procreg_close(r);
	return ret;
}

struct wkid {
	pid_t pid;
	int report;      /* read end */
	uint64_t passes;
};

/* Wait until kid K completes one more pass than it had when called:
 * drain what it already reported, then wait for the next byte. */
static void wait_pass(struct wkid *k)
{
	char c;
	ssize_t n;
	int rc;

	fcntl(k->report, F_SETFL, O_NONBLOCK);
	while ((n = read(k->report, &c, 1)) == 1)
		k->passes++;
	if (n == 0)
		fail_msg("walker %d exited: status %d", (int)k->pid, th_wait(k->pid));
	rc = read_byte(k->report, &c);
	if (rc != 1)
		fail_msg("walker %d: %s (status %d)", (int)k->pid, rc ? "hung" : "exited",
			 rc ? (kill(k->pid, SIGKILL), th_wait(k->pid)) : th_wait(k->pid));
	k->passes++;
}

static void test_w_members_while_writing(void **state)
{
	char *dir = th_mkdtemp();
	struct pr_writer w;
	struct walker args[WKIDS];
	struct wkid k[WKIDS];
	int stop[2], page;
	uint64_t cap0, rh0, restable = 0;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 128 * MB);
	for (uint32_t i = 0; i < WSTABLE; i++)
		assert_int_equal(w_join(&w, "walk", 1000 + i, i + 7, 0, 3), 0);
	drain(&w);
	cap0 = ix_at(&w, w_group_root(&w, "walk"))->capacity;
	rh0 = w.map.hdr->rehashes;

	assert_int_equal(pipe2(stop, O_CLOEXEC), 0);
	for (int i = 0; i < WKIDS; i++) {
		int rep[2];
		char c;

		assert_int_equal(pipe2(rep, O_CLOEXEC), 0);
		args[i] = (struct walker){ dir, i, rep[1], stop[0] };
		k[i].pid = fork();
		assert_true(k[i].pid >= 0);
		if (k[i].pid == 0) {
			int keep[] = { rep[1], stop[0], -1 };

			close_other_fds(keep);
			_exit(walker_main(&args[i]));
		}
		close(rep[1]);
		k[i].report = rep[0];
		k[i].passes = 0;
		if (read_byte(k[i].report, &c) != 1 || !read_all(k[i].report, &page, sizeof(page)))
			fail_msg("walker %d did not start: status %d", i, th_wait(k[i].pid));
		/* As procregd would: the writer waits for its slots. */
		th_adopt_page(&w, k[i].pid, page);
	}

	/* Churn other members of the same group: add them, remove most of
	 * them a while later (tombstones, rebuilds at one capacity and at
	 * growing ones), re-join stable members with the same metadata (their
	 * old records retired under the readers, their memory reused), and
	 * reclaim eagerly. Every phase, wait for each reader to finish
	 * another whole pass, so that walks overlap every stage. */
	for (uint32_t i = 0; i < WCHURN; i++) {
		assert_int_equal(w_join(&w, "walk", CHURN_PID + i, i + 7, 0, 1), 0);
		if (i >= 1000 && i % 4 != 0)
			assert_int_equal(w_leave(&w, "walk", CHURN_PID + i - 1000, i - 1000 + 7, 0), 0);
		if (i % 50 == 0) {
			uint32_t s = (uint32_t)(restable++ % WSTABLE);

			assert_int_equal(w_join(&w, "walk", 1000 + s, s + 7, 0, 3), 1);
		}
		assert_int_equal(w_join(&w, "walk", 1000 + i % WHOT, i % WHOT + 7, 0, 3), 1);
		procreg__w_reclaim(&w);
		if (i % WPHASE == WPHASE - 1)
			for (int j = 0; j < WKIDS; j++)
				wait_pass(&k[j]);
	}
	close(stop[1]);
	for (int i = 0; i < WKIDS; i++) {
		char c;

		fcntl(k[i].report, F_SETFL, 0);
		while (read_byte(k[i].report, &c) == 1)
			k[i].passes++;
		close(k[i].report);
	}
	close(stop[0]);
	for (int i = 0; i < WKIDS; i++)
		assert_int_equal(th_wait(k[i].pid), 0);
	for (int i = 0; i < WKIDS; i++)
		assert_true(k[i].passes >= WCHURN / WPHASE);

	/* The member index grew through several rebuilds while they walked. */
	print_message("member index %llu -> %llu slots, %llu rebuilds while walking\n",
		      (unsigned long long)cap0,
		      (unsigned long long)ix_at(&w, w_group_root(&w, "walk"))->capacity,
		      (unsigned long long)(w.map.hdr->rehashes - rh0));
	assert_true(ix_at(&w, w_group_root(&w, "walk"))->capacity >= 8 * cap0);
	assert_true(w.map.hdr->rehashes - rh0 >= 4);

	/* What is left is exactly what should be. */
	r = r_open(dir);
	assert_non_null(r);
	{
		uint64_t want = WSTABLE;

		for (uint32_t i = 0; i < WCHURN; i++)
			want += i >= WCHURN - 1000 || i % 4 == 0;
		expect_count(r, "walk", want, want);
	}
	drain(&w);
	check_counts(&w, r);
	assert_int_equal(w.map.hdr->arena_used, w_reach(&w).bytes);
	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- recovery --------------------------------------------------------- */

static void expect_group_members(procreg_t *r, const char *group, uint32_t lo, uint32_t hi,
				 unsigned ver_lo, uint32_t split, unsigned ver_hi)
{
	struct elist l = { 0 };

	members_of(r, group, &l);
	assert_int_equal(l.n, hi - lo);
	for (uint32_t i = lo; i < hi; i++) {
		const struct procreg_entry *e = member_pid(&l, (pid_t)(1000 + i));

		if (!e)
			fail_msg("%s: member %u missing", group, i);
		assert_true(member_ok(e, group, i < split ? ver_lo : ver_hi));
		assert_int_equal(e->start_time, i + 7);
	}
	elist_free(&l);
}

static void test_w_recovery(void **state)
{
	char *dir = th_mkdtemp();
	struct pr_writer w;
	struct pr_record t = { .kind = PR_KIND_MEMBER };
	PROCREG_OPTS(procreg_stats, st);
	struct glist gl = { 0 };
	uint64_t off, joins, leaves;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 32 * MB);
	/* alpha: 300 members; beta: 50, the first 25 re-joined with new
	 * metadata; gamma: 30 that all leave; mixed: 10 local, 5 remote. */
	for (uint32_t i = 0; i < 300; i++)
		assert_int_equal(w_join(&w, "alpha", 1000 + i, i + 7, 0, 1), 0);
	for (uint32_t i = 0; i < 50; i++)
		assert_int_equal(w_join(&w, "beta", 1000 + i, i + 7, 0, 1), 0);
	for (uint32_t i = 0; i < 30; i++)
		assert_int_equal(w_join(&w, "gamma", 1000 + i, i + 7, 0, 1), 0);
	for (uint32_t i = 0; i < 15; i++)
		assert_int_equal(w_join(&w, "mixed", 1000 + i, i + 7, i >= 10 ? 3 : 0, 1), 0);
	assert_int_equal(w_register(&w, "alpha", 1000, 7), 0);
	drain(&w);
	for (uint32_t i = 0; i < 25; i++)
		assert_int_equal(w_join(&w, "beta", 1000 + i, i + 7, 0, 2), 1);
	for (uint32_t i = 0; i < 30; i++)
		assert_int_equal(w_leave(&w, "gamma", 1000 + i, i + 7, 0), 0);
	for (uint32_t i = 200; i < 300; i++)
		assert_int_equal(w_leave(&w, "alpha", 1000 + i, i + 7, 0), 0);
	/* A crash between a group's last member going and the group going:
	 * "delta" is left published with no members. */
	assert_int_equal(w_join(&w, "delta", 5000, 1, 0, 1), 0);
	{
		uint64_t pos;
		struct pr_root *root;

		assert_int_equal(procreg__w_group(&w, "delta", 5, false, &root), 0);
		assert_true(w_member(&w, "delta", 5000, 1, 0, &pos) != 0);
		procreg__w_remove(&w, root, pos);
		assert_int_equal(root->live, 0);
		assert_non_null(w_group_root(&w, "delta"));
	}
	/* A membership the crash cut short: filled, never published. */
	t.pid = 7777;
	t.start_time = 1;
	t.name_len = 5;
	t.meta_len = 3;
	assert_int_equal(procreg__w_new_record(&w, &t, "alpha", "boo", &off), 0);
	/* And retired blocks never reclaimed: the crash came first. */
	assert_true(w.retired.n > 0);
	joins = w.map.hdr->joins;
	leaves = w.map.hdr->leaves;

	/* A reader mapped before the crash reads on through it. */
	r = r_open(dir);
	assert_non_null(r);
	procreg__writer_close(&w);
	expect_count(r, "alpha", 200, 200);

	w_open_at(&w, dir, 32 * MB);
	assert_true(w.attached);
	assert_int_equal(procreg__w_recover(&w), 0);
	/* The empty group is gone; the others, their members and counts are
	 * intact. */
	assert_int_equal(w.map.hdr->groups.live, 3);
	assert_int_equal(w.map.hdr->memberships, 200 + 50 + 15);
	assert_int_equal(w.map.hdr->joins, joins);
	assert_int_equal(w.map.hdr->leaves, leaves);
	assert_null(w_group_root(&w, "delta"));
	assert_null(w_group_root(&w, "gamma"));
	expect_count(r, "alpha", 200, 200);
	expect_count(r, "beta", 50, 50);
	expect_count(r, "mixed", 15, 10);
	expect_count(r, "gamma", 0, 0);
	expect_count(r, "delta", 0, 0);
	expect_group_members(r, "alpha", 0, 200, 1, 0, 1);
	expect_group_members(r, "beta", 0, 50, 2, 25, 1);
	expect_group_members(r, "mixed", 0, 15, 1, 0, 1);
	assert_int_equal(procreg_lookup(r, "alpha", NULL), 0);
	groups_of(r, &gl);
	assert_int_equal(gl.n, 3);
	assert_non_null(group_in(&gl, "alpha"));
	assert_non_null(group_in(&gl, "beta"));
	assert_int_equal(group_in(&gl, "mixed")->local_members, 10);
	procreg_stats(r, &st);
	assert_int_equal(st.groups, 3);
	assert_int_equal(st.memberships, 265);
	assert_int_equal(st.names, 1);
	check_counts(&w, r);
	/* Once a grace period passed, everything unreachable (old records
	 * and indexes, the ghost, the empty group) is free again. */
	drain(&w);
	assert_int_equal(w.map.hdr->arena_used, w_reach(&w).bytes);

	/* The writer carries on: alpha grows through rebuilds, beta empties
	 * and goes, a new group comes. */
	for (uint32_t i = 300; i < 2000; i++)
		assert_int_equal(w_join(&w, "alpha", 1000 + i, i + 7, 0, 1), 0);
	for (uint32_t i = 0; i < 50; i++)
		assert_int_equal(w_leave(&w, "beta", 1000 + i, i + 7, 0), 0);
	assert_int_equal(w_join(&w, "epsilon", 9000, 9, 0, 1), 0);
	check_counts(&w, r);
	assert_int_equal(walk_count(r, "alpha"), 1900);

	/* A second crash straight after, nothing drained. */
	procreg__writer_close(&w);
	w_open_at(&w, dir, 32 * MB);
	assert_int_equal(procreg__w_recover(&w), 0);
	assert_int_equal(w.map.hdr->groups.live, 3);
	assert_int_equal(w.map.hdr->memberships, 1900 + 15 + 1);
	expect_count(r, "beta", 0, 0);
	expect_count(r, "epsilon", 1, 1);
	{
		struct elist l = { 0 };

		members_of(r, "alpha", &l);
		assert_int_equal(l.n, 1900);
		for (size_t i = 0; i < l.n; i++) {
			uint32_t k = (uint32_t)l.v[i].pid - 1000;

			assert_true(member_ok(&l.v[i], "alpha", 1));
			assert_true(k < 200 || (k >= 300 && k < 2000));
		}
		elist_free(&l);
	}
	check_counts(&w, r);
	drain(&w);
	assert_int_equal(w.map.hdr->arena_used, w_reach(&w).bytes);

	free(gl.v);
	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ==== a real daemon ==================================================== */

struct fx {
	char *dir;
	struct th_daemon d;
	procreg_t *reg;
};

static int start_with(void **state, const char *const *args)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->dir = th_mkdtemp();
	chmod(f->dir, 0755); /* the unprivileged-user test reaches it too */
	if (th_daemon_start(&f->d, f->dir, args, NULL) != 0) {
		th_daemon_dump_log(&f->d);
		fail_msg("procregd did not start");
	}
	f->reg = th_open(f->dir);
	assert_non_null(f->reg);
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return start_with(state, NULL);
}

static int setup_quota(void **state)
{
	static const char *const args[] = { "--max-names-per-proc", "10", NULL };

	return start_with(state, args);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int st;

	if (f->reg)
		procreg_close(f->reg);
	st = th_daemon_stop_dump(&f->d);
	th_rmrf(f->dir);
	free(f->dir);
	free(f);
	/* A clean exit: SIGTERM handled, and no sanitizer report. */
	assert_int_equal(st, 0);
	return 0;
}

static void join_ok(procreg_t *r, const char *group, const char *meta)
{
	int err = procreg_join(r, group, meta, strlen(meta));

	if (err)
		fail_msg("join %s: %s", group, procreg_strerror(err));
}

/* A child that registers names and joins groups, reports over a pipe,
 * and holds them until the parent closes its pipe or kills it. */
struct actor {
	const char *dir;
	const char *names[8];    /* NULL-terminated */
	const char *groups[8];
	const char *meta;
	int ready_fd, hold_fd;
};

static int actor_main(void *arg)
{
	struct actor *a = arg;
	procreg_t *r = th_open(a->dir);
	const char *m = a->meta ? a->meta : "";
	char c = 0;

	child_signals();
	if (!r)
		return 10;
	for (int i = 0; a->names[i]; i++)
		if (procreg_register(r, a->names[i], m, strlen(m)) != 0)
			return 11;
	for (int i = 0; a->groups[i]; i++)
		if (procreg_join(r, a->groups[i], m, strlen(m)) != 0)
			return 12;
	if (write(a->ready_fd, &c, 1) != 1)
		return 13;
	if (read(a->hold_fd, &c, 1) < 0)
		return 14;
	procreg_close(r);
	return 0;
}

static pid_t spawn_actor(struct actor *a, int *hold_w)
{
	int ready[2], hold[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(hold, O_CLOEXEC), 0);
	a->ready_fd = ready[1];
	a->hold_fd = hold[0];
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int keep[] = { ready[1], hold[0], -1 };

		close_other_fds(keep);
		_exit(actor_main(a));
	}
	close(ready[1]);
	close(hold[0]);
	if (read_byte(ready[0], &c) != 1)
		fail_msg("actor exited with status %d", th_wait(pid));
	close(ready[0]);
	*hold_w = hold[1];
	return pid;
}

/* ---- join, leave, members --------------------------------------------- */

static void test_join_leave_members(void **state)
{
	struct fx *f = *state;
	struct elist l = { 0 };
	struct glist gl = { 0 };
	PROCREG_OPTS(procreg_stats, st);
	struct actor a = { .dir = f->dir, .groups = { "workers" }, .meta = "child" };
	uint64_t start;
	int hold;
	pid_t kid;

	assert_int_equal(procreg__proc_start_time(getpid(), &start), 0);
	assert_int_equal(procreg_join(f->reg, "workers", "unix:/run/w.sock", 16), 0);
	members_of(f->reg, "workers", &l);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.v[0].name, "workers");
	assert_int_equal(l.v[0].pid, getpid());
	assert_int_equal(l.v[0].start_time, start);
	assert_int_equal(l.v[0].uid, getuid());
	assert_int_equal(l.v[0].node, 0);
	assert_true(l.v[0].registered_ns > 0);
	assert_int_equal(l.v[0].meta_len, 16);
	assert_memory_equal(l.v[0].meta, "unix:/run/w.sock", 16);
	expect_count(f->reg, "workers", 1, 1);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 1);
	assert_int_equal(st.memberships, 1);
	assert_int_equal(st.joins, 1);
	assert_int_equal(st.processes, 1);
	assert_int_equal(st.names, 0);

	/* Joining again replaces the membership's metadata. */
	assert_int_equal(procreg_join(f->reg, "workers", "v2", 2), 0);
	members_of(f->reg, "workers", &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.v[0].meta_len, 2);
	assert_memory_equal(l.v[0].meta, "v2", 2);
	assert_int_equal(procreg_join(f->reg, "workers", NULL, 0), 0);
	members_of(f->reg, "workers", &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.v[0].meta_len, 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.memberships, 1);
	assert_int_equal(st.groups, 1);
	assert_int_equal(st.joins, 3);

	/* A name and a group may share a name. */
	assert_int_equal(procreg_register(f->reg, "workers", "name", 4), 0);
	assert_int_equal(procreg_unregister(f->reg, "workers"), 0);
	expect_count(f->reg, "workers", 1, 1);

	/* Another process joins too; it cannot make us leave. */
	kid = spawn_actor(&a, &hold);
	members_of(f->reg, "workers", &l);
	assert_int_equal(l.n, 2);
	assert_non_null(member_pid(&l, getpid()));
	assert_int_equal(member_pid(&l, kid)->meta_len, 5);
	assert_memory_equal(member_pid(&l, kid)->meta, "child", 5);
	groups_of(f->reg, &gl);
	assert_int_equal(gl.n, 1);
	assert_string_equal(gl.v[0].name, "workers");
	assert_int_equal(gl.v[0].members, 2);
	assert_int_equal(gl.v[0].local_members, 2);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.processes, 2);

	/* Leaving: ours goes, theirs stays; a second leave is -ENOENT, as is
	 * leaving a group we never joined or that does not exist. */
	assert_int_equal(procreg_leave(f->reg, "workers"), 0);
	assert_int_equal(procreg_leave(f->reg, "workers"), -ENOENT);
	assert_int_equal(procreg_leave(f->reg, "nosuch"), -ENOENT);
	members_of(f->reg, "workers", &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.v[0].pid, kid);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.leaves, 1);
	assert_int_equal(st.memberships, 1);
	assert_int_equal(st.processes, 1);

	/* It leaves when it exits, and the group goes with it. */
	close(hold);
	assert_int_equal(th_wait(kid), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	expect_count(f->reg, "workers", 0, 0);
	groups_of(f->reg, &gl);
	assert_int_equal(gl.n, 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.memberships, 0);
	assert_int_equal(st.processes, 0);
	assert_int_equal(st.leaves, 1);
	assert_int_equal(st.deaths, 1);
	elist_free(&l);
	free(gl.v);
}

static void test_last_leave_drops_group(void **state)
{
	struct fx *f = *state;
	struct glist gl = { 0 };
	PROCREG_OPTS(procreg_stats, st);
	procreg_t *h[3];
	pid_t kids[2];
	int holds[2];
	struct actor a[2] = {
		{ .dir = f->dir, .groups = { "team", "solo.0" } },
		{ .dir = f->dir, .groups = { "team", "solo.1" } },
	};

	for (int i = 0; i < 2; i++)
		kids[i] = spawn_actor(&a[i], &holds[i]);
	join_ok(f->reg, "team", "me");
	join_ok(f->reg, "other", "");
	groups_of(f->reg, &gl);
	assert_int_equal(gl.n, 4);
	assert_int_equal(group_in(&gl, "team")->members, 3);
	assert_int_equal(group_in(&gl, "team")->local_members, 3);
	assert_int_equal(group_in(&gl, "solo.0")->members, 1);
	assert_int_equal(group_in(&gl, "other")->members, 1);

	/* Members leave one by one; the group lasts until the last. */
	assert_int_equal(procreg_leave(f->reg, "team"), 0);
	expect_count(f->reg, "team", 2, 2);
	close(holds[0]);
	assert_int_equal(th_wait(kids[0]), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	expect_count(f->reg, "team", 1, 1);
	groups_of(f->reg, &gl);
	assert_int_equal(gl.n, 3);
	assert_null(group_in(&gl, "solo.0"));
	assert_int_equal(group_in(&gl, "team")->members, 1);
	close(holds[1]);
	assert_int_equal(th_wait(kids[1]), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	groups_of(f->reg, &gl);
	assert_int_equal(gl.n, 1);
	assert_string_equal(gl.v[0].name, "other");
	assert_int_equal(procreg_leave(f->reg, "other"), 0);
	groups_of(f->reg, &gl);
	assert_int_equal(gl.n, 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.memberships, 0);
	expect_count(f->reg, "team", 0, 0);
	expect_count(f->reg, "other", 0, 0);

	/* A group comes back with its next member, and goes again. Several
	 * handles of one process are one member. */
	for (int i = 0; i < 3; i++) {
		h[i] = th_open(f->dir);
		assert_non_null(h[i]);
		join_ok(h[i], "again", "x");
	}
	expect_count(f->reg, "again", 1, 1);
	assert_int_equal(procreg_leave(h[2], "again"), 0);
	assert_int_equal(procreg_leave(h[0], "again"), -ENOENT);
	for (int i = 0; i < 3; i++)
		procreg_close(h[i]);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.joins, 9);
	assert_int_equal(st.leaves, 3);
	free(gl.v);
}

/* ---- deaths ----------------------------------------------------------- */

/* A child that writes without pause (its own name and group, on and
 * off) until the parent closes its pipe: noise the daemon must not serve
 * in the middle of processing a death. */
static int noise_main(const char *dir, int ready_fd, int stop_fd)
{
	procreg_t *r = th_open(dir);
	char c = 0;

	child_signals();
	if (!r)
		return 10;
	for (uint64_t i = 0;; i++) {
		if (procreg_register(r, "noise", "n", 1) || procreg_join(r, "noise.g", "n", 1) ||
		    procreg_unregister(r, "noise") || procreg_leave(r, "noise.g"))
			return 11;
		if (i == 0 && write(ready_fd, &c, 1) != 1)
			return 12;
		if (stop_requested(stop_fd))
			break;
	}
	procreg_close(r);
	return 0;
}

static pid_t spawn_noise(const char *dir, int *stop_w)
{
	int ready[2], stop[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(stop, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int keep[] = { ready[1], stop[0], -1 };

		close_other_fds(keep);
		_exit(noise_main(dir, ready[1], stop[0]));
	}
	close(ready[1]);
	close(stop[0]);
	if (read_byte(ready[0], &c) != 1)
		fail_msg("noise child: status %d", th_wait(pid));
	close(ready[0]);
	*stop_w = stop[1];
	return pid;
}

static void test_death_removes_memberships(void **state)
{
	struct fx *f = *state;
	struct actor a = { .dir = f->dir,
			   .names = { "d.n0", "d.n1", "d.n2" },
			   .groups = { "d.g0", "d.g1", "d.g2", "d.g3", "shared" },
			   .meta = "doomed" };
	PROCREG_OPTS(procreg_stats, st);
	struct glist gl = { 0 };
	struct elist l = { 0 };
	uint64_t cursor;
	int hold, noise_stop;
	pid_t kid, noise;

	join_ok(f->reg, "shared", "survivor");
	kid = spawn_actor(&a, &hold);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 3);
	assert_int_equal(st.groups, 5);
	assert_int_equal(st.memberships, 6);
	assert_int_equal(st.processes, 2);
	members_of(f->reg, "d.g3", &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.v[0].pid, kid);

	/* Killed while another client writes all the time. */
	noise = spawn_noise(f->dir, &noise_stop);
	cursor = procreg_feed_head(f->reg);
	kill(kid, SIGKILL);
	assert_int_equal(th_wait(kid), 128 + SIGKILL);
	close(hold);
	/* Every death before the call is processed when it returns: names
	 * and memberships alike. */
	assert_int_equal(procreg_sync(f->reg), 0);
	close(noise_stop);
	assert_int_equal(th_wait(noise), 0);
	/* In one step: its eight removals are eight consecutive events of
	 * the feed, with none of the noise's between them. */
	{
		PROCREG_OPTS(procreg_event, ev);
		uint64_t first = 0, last = 0, died = 0, died_groups = 0;
		int rc;

		while ((rc = procreg_next_event(f->reg, &cursor, &ev, 0)) == 0) {
			if (ev.pid != kid)
				continue;
			assert_int_equal(ev.type, PROCREG_EV_DIED);
			if (!died++)
				first = ev.seq;
			last = ev.seq;
			died_groups += ev.is_group != 0;
		}
		assert_int_equal(rc, -ETIMEDOUT);
		assert_int_equal(died, 8);
		assert_int_equal(died_groups, 5);
		assert_int_equal(last - first, 7);
	}
	assert_int_equal(procreg_lookup(f->reg, "noise", NULL), -ENOENT);
	for (int i = 0; i < 3; i++)
		assert_int_equal(procreg_lookup(f->reg, a.names[i], NULL), -ENOENT);
	for (int i = 0; i < 4; i++)
		expect_count(f->reg, a.groups[i], 0, 0);
	members_of(f->reg, "shared", &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.v[0].pid, getpid());
	assert_memory_equal(l.v[0].meta, "survivor", 8);
	groups_of(f->reg, &gl);
	assert_int_equal(gl.n, 1);
	assert_string_equal(gl.v[0].name, "shared");
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.groups, 1);
	assert_int_equal(st.memberships, 1);
	assert_int_equal(st.processes, 1);
	assert_int_equal(st.deaths, 1); /* not leaves: its events were all DIED */

	/* A process holding memberships only is watched too. */
	{
		struct actor b = { .dir = f->dir, .groups = { "only.g" } };

		kid = spawn_actor(&b, &hold);
		kill(kid, SIGKILL);
		th_wait(kid);
		close(hold);
		assert_int_equal(procreg_sync(f->reg), 0);
		expect_count(f->reg, "only.g", 0, 0);
		procreg_stats(f->reg, &st);
		assert_int_equal(st.deaths, 2);
		assert_int_equal(st.groups, 1);
		assert_int_equal(st.processes, 1);
	}
	free(gl.v);
	elist_free(&l);
}

/* ---- another process's memberships ------------------------------------ */

static pid_t pauser(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		int keep[] = { -1 };

		close_other_fds(keep);
		pause();
		_exit(0);
	}
	assert_true(pid > 0);
	return pid;
}

static void test_join_pidfd(void **state)
{
	struct fx *f = *state;
	struct elist l = { 0 };
	PROCREG_OPTS(procreg_stats, st);
	uint64_t start;
	pid_t kid = pauser();
	int pidfd = (int)syscall(SYS_pidfd_open, kid, 0);

	assert_true(pidfd >= 0);
	assert_int_equal(procreg_join_pidfd(f->reg, pidfd, "pool", "w1", 2), 0);
	assert_int_equal(procreg_join_pidfd(f->reg, pidfd, "pool2", "", 0), 0);
	members_of(f->reg, "pool", &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.v[0].pid, kid);
	assert_int_equal(l.v[0].uid, getuid());
	assert_int_equal(procreg__proc_start_time(kid, &start), 0);
	assert_int_equal(l.v[0].start_time, start);
	assert_memory_equal(l.v[0].meta, "w1", 2);
	/* Joining for it again replaces its metadata. */
	assert_int_equal(procreg_join_pidfd(f->reg, pidfd, "pool", "w2", 2), 0);
	members_of(f->reg, "pool", &l);
	assert_int_equal(l.n, 1);
	assert_memory_equal(l.v[0].meta, "w2", 2);
	/* Ourselves too: another member. */
	join_ok(f->reg, "pool", "me");
	expect_count(f->reg, "pool", 2, 2);
	/* Leave is for the caller's own membership. */
	assert_int_equal(procreg_leave(f->reg, "pool2"), -ENOENT);
	assert_int_equal(procreg_leave(f->reg, "pool"), 0);
	members_of(f->reg, "pool", &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.v[0].pid, kid);

	assert_int_equal(procreg_join_pidfd(f->reg, -1, "x", NULL, 0), -EBADF);
	assert_int_equal(procreg_join_pidfd(f->reg, 0, "x", NULL, 0), -EBADF);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.processes, 1);

	/* Its memberships go with it; an exited process cannot join. */
	kill(kid, SIGKILL);
	th_wait(kid);
	assert_int_equal(procreg_sync(f->reg), 0);
	expect_count(f->reg, "pool", 0, 0);
	expect_count(f->reg, "pool2", 0, 0);
	assert_int_equal(procreg_join_pidfd(f->reg, pidfd, "pool", NULL, 0), -ESRCH);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.deaths, 1);
	close(pidfd);
	elist_free(&l);
}

struct nobody {
	const char *dir;
	pid_t victim;
	int ready_fd, hold_fd;
};

static int nobody_main(void *arg)
{
	struct nobody *o = arg;
	struct elist l = { 0 };
	procreg_t *r;
	int pidfd;
	char c = 0;

	child_signals();
	if (setgid(65534) < 0 || setuid(65534) < 0)
		return 30;
	r = th_open(o->dir);
	if (!r)
		return 31;
	/* Another uid's process: it cannot be made to join, pidfd or not. */
	pidfd = (int)syscall(SYS_pidfd_open, o->victim, 0);
	if (pidfd < 0)
		return 32;
	if (procreg_join_pidfd(r, pidfd, "stolen", "x", 1) != -EPERM)
		return 33;
	if (procreg_join_pidfd(r, pidfd, "shared", "x", 1) != -EPERM)
		return 34;
	close(pidfd);
	/* Nor can its memberships be removed: leave is for our own. */
	if (procreg_leave(r, "shared") != -ENOENT)
		return 35;
	/* Reading is open to everyone. */
	if (procreg_members(r, "shared", collect, &l) != 0 || l.n != 1 || l.v[0].uid != 0)
		return 36;
	/* Our own process: joins, by itself or through its own pidfd. */
	if (procreg_join(r, "shared", "nobody", 6) != 0)
		return 37;
	pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (pidfd < 0 || procreg_join_pidfd(r, pidfd, "mine", "n", 1) != 0)
		return 38;
	close(pidfd);
	elist_free(&l);
	if (write(o->ready_fd, &c, 1) != 1)
		return 39;
	if (read(o->hold_fd, &c, 1) < 0)
		return 40;
	procreg_close(r);
	return 0;
}

static void test_join_pidfd_other_uid(void **state)
{
	struct fx *f = *state;
	struct nobody o = { f->dir, 0, -1, -1 };
	struct elist l = { 0 };
	int ready[2], hold[2];
	pid_t kid;
	char c;

	if (geteuid() != 0)
		fail_msg("this test needs root (CI runs as root)");
	join_ok(f->reg, "shared", "root");
	o.victim = pauser();
	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(hold, O_CLOEXEC), 0);
	o.ready_fd = ready[1];
	o.hold_fd = hold[0];
	kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		int keep[] = { ready[1], hold[0], -1 };

		close_other_fds(keep);
		_exit(nobody_main(&o));
	}
	close(ready[1]);
	close(hold[0]);
	if (read_byte(ready[0], &c) != 1)
		fail_msg("the uid 65534 child failed: status %d", th_wait(kid));
	close(ready[0]);

	expect_count(f->reg, "stolen", 0, 0);
	members_of(f->reg, "shared", &l);
	assert_int_equal(l.n, 2);
	assert_int_equal(member_pid(&l, getpid())->uid, 0);
	assert_int_equal(member_pid(&l, kid)->uid, 65534);
	assert_memory_equal(member_pid(&l, kid)->meta, "nobody", 6);
	expect_count(f->reg, "mine", 1, 1);
	members_of(f->reg, "mine", &l);
	assert_int_equal(l.v[0].pid, kid);
	assert_int_equal(l.v[0].uid, 65534);

	close(hold[1]);
	assert_int_equal(th_wait(kid), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	members_of(f->reg, "shared", &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.v[0].pid, getpid());
	expect_count(f->reg, "mine", 0, 0);
	kill(o.victim, SIGKILL);
	th_wait(o.victim);
	elist_free(&l);
}

/* ---- batches ---------------------------------------------------------- */

static void test_batch_join_leave(void **state)
{
	struct fx *f = *state;
	enum { N = 2000 };
	static struct procreg_op ops[N + 6];
	static char names[N][32];
	static unsigned char big[PROCREG_META_MAX + 1];
	PROCREG_OPTS(procreg_stats, st);
	struct elist l = { 0 };

	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "bg.%d", i);
		ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_JOIN, .name = names[i], .meta = names[i], .meta_len = strlen(names[i]), .result = 99 };
	}
	/* Bad ops get their own errors; the rest go through. */
	ops[N] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_JOIN, .name = "", .meta = NULL, .meta_len = 0, .result = 99 };
	ops[N + 1] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_JOIN, .name = "bg.big", .meta = big, .meta_len = sizeof(big), .result = 99 };
	ops[N + 2] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_LEAVE, .name = "bg.none", .meta = NULL, .meta_len = 0, .result = 99 };
	/* A join, a re-join and a name of the same name, in one batch. */
	ops[N + 3] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_JOIN, .name = "bg.x", .meta = "1", .meta_len = 1, .result = 99 };
	ops[N + 4] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_JOIN, .name = "bg.x", .meta = "22", .meta_len = 2, .result = 99 };
	ops[N + 5] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_REGISTER, .name = "bg.x", .meta = "n", .meta_len = 1, .result = 99 };
	assert_int_equal(procreg_batch(f->reg, ops, N + 6), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(ops[i].result, 0);
	assert_int_equal(ops[N].result, -EINVAL);
	assert_int_equal(ops[N + 1].result, -EMSGSIZE);
	assert_int_equal(ops[N + 2].result, -ENOENT);
	assert_int_equal(ops[N + 3].result, 0);
	assert_int_equal(ops[N + 4].result, 0);
	assert_int_equal(ops[N + 5].result, 0);
	for (int i = 0; i < N; i += 97) {
		members_of(f->reg, names[i], &l);
		assert_int_equal(l.n, 1);
		assert_int_equal(l.v[0].pid, getpid());
		assert_int_equal(l.v[0].meta_len, strlen(names[i]));
		assert_memory_equal(l.v[0].meta, names[i], strlen(names[i]));
	}
	members_of(f->reg, "bg.x", &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.v[0].meta_len, 2);
	assert_int_equal(procreg_lookup(f->reg, "bg.x", NULL), 0);
	expect_count(f->reg, "bg.big", 0, 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, N + 1);
	assert_int_equal(st.memberships, N + 1);
	assert_int_equal(st.joins, N + 2);
	assert_int_equal(st.names, 1);

	for (int i = 0; i < N; i++)
		ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_LEAVE, .name = names[i], .meta = NULL, .meta_len = 0, .result = 99 };
	ops[N] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_LEAVE, .name = "bg.x", .meta = NULL, .meta_len = 0, .result = 99 };
	ops[N + 1] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_LEAVE, .name = "bg.x", .meta = NULL, .meta_len = 0, .result = 99 };
	ops[N + 2] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_UNREGISTER, .name = "bg.x", .meta = NULL, .meta_len = 0, .result = 99 };
	assert_int_equal(procreg_batch(f->reg, ops, N + 3), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(ops[i].result, 0);
	assert_int_equal(ops[N].result, 0);
	assert_int_equal(ops[N + 1].result, -ENOENT);
	assert_int_equal(ops[N + 2].result, 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.memberships, 0);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.leaves, N + 1);
	assert_int_equal(st.processes, 0);
	elist_free(&l);
}

/* ---- limits ----------------------------------------------------------- */

static void test_group_limits(void **state)
{
	struct fx *f = *state;
	char name[PROCREG_NAME_MAX + 2];
	static unsigned char meta[PROCREG_META_MAX + 1];
	PROCREG_OPTS(procreg_stats, st);
	struct elist l = { 0 };
	uint64_t n;

	memset(meta, 'm', sizeof(meta));
	memset(name, 'g', sizeof(name));
	name[PROCREG_NAME_MAX] = 0;
	/* The longest group name, with the largest metadata. */
	assert_int_equal(procreg_join(f->reg, name, meta, PROCREG_META_MAX), 0);
	members_of(f->reg, name, &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(strlen(l.v[0].name), PROCREG_NAME_MAX);
	assert_int_equal(l.v[0].meta_len, PROCREG_META_MAX);
	/* One byte more of either is refused. */
	name[PROCREG_NAME_MAX] = 'g';
	name[PROCREG_NAME_MAX + 1] = 0;
	assert_int_equal(procreg_join(f->reg, name, NULL, 0), -ENAMETOOLONG);
	assert_int_equal(procreg_leave(f->reg, name), -ENAMETOOLONG);
	assert_int_equal(procreg_members(f->reg, name, count_cb, &n), -ENAMETOOLONG);
	assert_int_equal(procreg_group_count(f->reg, name, &n, NULL), -ENAMETOOLONG);
	assert_int_equal(procreg_join(f->reg, "m", meta, PROCREG_META_MAX + 1), -EMSGSIZE);
	assert_int_equal(procreg_join(f->reg, "", NULL, 0), -EINVAL);
	assert_int_equal(procreg_join(f->reg, NULL, NULL, 0), -EINVAL);
	assert_int_equal(procreg_join(f->reg, "m", NULL, 3), -EINVAL);
	assert_int_equal(procreg_leave(f->reg, ""), -EINVAL);
	assert_int_equal(procreg_members(f->reg, "", count_cb, &n), -EINVAL);
	/* None of them made a group. */
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 1);
	assert_int_equal(st.memberships, 1);
	assert_int_equal(st.joins, 1);
	elist_free(&l);
}

static void test_quota_counts_memberships(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_stats, st);
	struct glist gl = { 0 };
	struct actor a = { .dir = f->dir, .groups = { "q.theirs" } };
	char name[32];
	int hold;
	pid_t kid;

	/* --max-names-per-proc 10: six names and four memberships. */
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "q.n%d", i);
		assert_int_equal(procreg_register(f->reg, name, NULL, 0), 0);
	}
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "q.g%d", i);
		join_ok(f->reg, name, "");
	}
	kid = spawn_actor(&a, &hold);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 5);

	/* Full: no new name, no new group, no membership of an existing one. */
	assert_int_equal(procreg_join(f->reg, "q.g4", NULL, 0), -EDQUOT);
	assert_int_equal(procreg_join(f->reg, "q.theirs", NULL, 0), -EDQUOT);
	assert_int_equal(procreg_register(f->reg, "q.n6", NULL, 0), -EDQUOT);
	/* The refused join made no group, and left theirs as it was. */
	expect_count(f->reg, "q.g4", 0, 0);
	expect_count(f->reg, "q.theirs", 1, 1);
	groups_of(f->reg, &gl);
	assert_int_equal(gl.n, 5);
	assert_null(group_in(&gl, "q.g4"));
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 5);
	assert_int_equal(st.memberships, 5);
	assert_int_equal(st.joins, 5);
	/* Re-joining a group we are in is not a new entry. */
	assert_int_equal(procreg_join(f->reg, "q.g2", "new", 3), 0);
	/* Leaving makes room, for a membership or for a name. */
	assert_int_equal(procreg_leave(f->reg, "q.g0"), 0);
	join_ok(f->reg, "q.theirs", "mine");
	expect_count(f->reg, "q.theirs", 2, 2);
	assert_int_equal(procreg_register(f->reg, "q.n6", NULL, 0), -EDQUOT);
	assert_int_equal(procreg_leave(f->reg, "q.g1"), 0);
	assert_int_equal(procreg_register(f->reg, "q.n6", NULL, 0), 0);
	assert_int_equal(procreg_join(f->reg, "q.g4", NULL, 0), -EDQUOT);
	assert_int_equal(procreg_unregister(f->reg, "q.n0"), 0);
	join_ok(f->reg, "q.g4", "");
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 6);
	assert_int_equal(st.memberships, 5); /* four of ours, one of theirs */
	close(hold);
	assert_int_equal(th_wait(kid), 0);
	free(gl.v);
}

/* ---- a storm of random operations ------------------------------------- */

#define SKIDS 6
#define SOPS 2000
#define SNAMES 16
#define SGROUPS 8

struct storm_report {
	uint32_t names, groups; /* bit k: holds name k, is in group k */
};

struct storm {
	const char *dir;
	int idx;
	int report_fd, hold_fd;
};

static void storm_name(char *buf, size_t len, unsigned k)
{
	snprintf(buf, len, "s.n%u", k);
}

static void storm_group(char *buf, size_t len, unsigned k)
{
	snprintf(buf, len, "s.g%u", k);
}

/* Check one op's result against what this child knows it holds, and
 * update that. Names are unregistered only by their holder, so a child's
 * own bookkeeping is exact. Returns 0, or a code for the exit status. */
static int storm_result(struct storm_report *h, int kind, unsigned k, int rc)
{
	uint32_t bit = 1u << k;

	switch (kind) {
	case PROCREG_OP_REGISTER:
		if (rc == 0)
			h->names |= bit;
		else if (rc != -EEXIST || (h->names & bit)) {
			fprintf(stderr, "storm: register of s.n%u: %s\n", k, procreg_strerror(rc));
			return 20;
		}
		return 0;
	case PROCREG_OP_UNREGISTER:
		if (rc != 0 || !(h->names & bit)) {
			fprintf(stderr, "storm: unregister of s.n%u, held: %s\n", k, procreg_strerror(rc));
			return 21;
		}
		h->names &= ~bit;
		return 0;
	case PROCREG_OP_JOIN:
		if (rc != 0)
			return 22;
		h->groups |= bit;
		return 0;
	case PROCREG_OP_LEAVE:
		if (rc != ((h->groups & bit) ? 0 : -ENOENT))
			return 23;
		h->groups &= ~bit;
		return 0;
	}
	return 24;
}

/* Pick an op. A name is unregistered only if it is in CAN_UNREG, which
 * holds only names this child holds: another's would be removed too (same
 * uid), and spoil the bookkeeping. */
static int storm_pick(uint32_t can_unreg, uint64_t *seed, unsigned *k)
{
	unsigned r = (unsigned)(th_xorshift(seed) % 10);

	*k = (unsigned)(th_xorshift(seed) % SNAMES);
	if (r < 3 || (r < 5 && !can_unreg))
		return PROCREG_OP_REGISTER;
	if (r < 5) {
		while (!(can_unreg & (1u << *k)))
			*k = (*k + 1) % SNAMES;
		return PROCREG_OP_UNREGISTER;
	}
	*k %= SGROUPS;
	return r < 8 ? PROCREG_OP_JOIN : PROCREG_OP_LEAVE;
}

static int storm_main(void *arg)
{
	struct storm *s = arg;
	struct storm_report h = { 0 };
	uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(s->idx + 1);
	procreg_t *r = th_open(s->dir);
	char meta[32], c = 'm';
	bool halfway = false;

	child_signals();
	if (!r)
		return 10;
	snprintf(meta, sizeof(meta), "kid%d", s->idx);
	for (int i = 0; i < SOPS;) {
		if (i >= SOPS / 2 && !halfway) {
			if (write(s->report_fd, &c, 1) != 1)
				return 11;
			halfway = true;
		}
		if (th_xorshift(&seed) % 8 == 0) {
			/* A batch of four. It unregisters only names held
			 * before it and not named earlier in it: whether a
			 * register in it succeeds is known only after. */
			struct procreg_op ops[4];
			char nm[4][32];
			unsigned ks[4];
			uint32_t can = h.names;
			int rc;

			for (int j = 0; j < 4; j++) {
				int kind = storm_pick(can, &seed, &ks[j]);

				if (kind == PROCREG_OP_JOIN || kind == PROCREG_OP_LEAVE) {
					storm_group(nm[j], sizeof(nm[j]), ks[j]);
				} else {
					storm_name(nm[j], sizeof(nm[j]), ks[j]);
					can &= ~(1u << ks[j]);
				}
				ops[j] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = kind, .name = nm[j], .meta = meta, .meta_len = strlen(meta), .result = 99 };
			}
			if (procreg_batch(r, ops, 4) != 0)
				return 12;
			for (int j = 0; j < 4; j++)
				if ((rc = storm_result(&h, ops[j].kind, ks[j], ops[j].result)))
					return rc;
			i += 4;
			continue;
		}
		{
			unsigned k;
			int kind = storm_pick(h.names, &seed, &k), rc;
			char nm[32];

			if (kind == PROCREG_OP_JOIN || kind == PROCREG_OP_LEAVE)
				storm_group(nm, sizeof(nm), k);
			else
				storm_name(nm, sizeof(nm), k);
			switch (kind) {
			case PROCREG_OP_REGISTER:
				rc = procreg_register(r, nm, meta, strlen(meta));
				break;
			case PROCREG_OP_UNREGISTER:
				rc = procreg_unregister(r, nm);
				break;
			case PROCREG_OP_JOIN:
				rc = procreg_join(r, nm, meta, strlen(meta));
				break;
			default:
				rc = procreg_leave(r, nm);
				break;
			}
			if ((rc = storm_result(&h, kind, k, rc)))
				return rc;
			i++;
		}
	}
	if (write(s->report_fd, &h, sizeof(h)) != sizeof(h))
		return 13;
	if (read(s->hold_fd, &c, 1) < 0)
		return 14;
	procreg_close(r);
	return 0;
}

struct pid_set {
	pid_t v[SKIDS + 1];
	int n;
};

static int note_pid(const struct procreg_entry *e, void *arg)
{
	struct pid_set *s = arg;

	for (int i = 0; i < s->n; i++)
		if (s->v[i] == e->pid)
			return 0;
	if (s->n == SKIDS + 1)
		return -E2BIG;
	s->v[s->n++] = e->pid;
	return 0;
}

/* The counters agree with full walks; and, when KIDS is given, the
 * table holds exactly what the surviving children say they hold. */
static void storm_check(procreg_t *r, const pid_t *kids, const struct storm_report *rep,
			const bool *alive)
{
	PROCREG_OPTS(procreg_stats, st);
	struct glist gl = { 0 };
	struct elist l = { 0 };
	struct pid_set procs = { .n = 0 };
	uint64_t names = 0, members = 0;
	char nm[32];

	assert_int_equal(procreg_foreach(r, count_cb, &names), 0);
	assert_int_equal(procreg_foreach(r, note_pid, &procs), 0);
	groups_of(r, &gl);
	for (size_t i = 0; i < gl.n; i++) {
		uint64_t m = 0, loc = 0;

		members_of(r, gl.v[i].name, &l);
		assert_int_equal(procreg_group_count(r, gl.v[i].name, &m, &loc), 0);
		assert_int_equal(m, l.n);
		assert_int_equal(loc, l.n);
		assert_int_equal(gl.v[i].members, l.n);
		assert_int_equal(gl.v[i].local_members, l.n);
		assert_true(l.n > 0);
		for (size_t j = 0; j < l.n; j++)
			assert_int_equal(note_pid(&l.v[j], &procs), 0);
		members += l.n;
	}
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, names);
	assert_int_equal(st.groups, gl.n);
	assert_int_equal(st.memberships, members);
	assert_int_equal(st.processes, (uint64_t)procs.n);

	if (kids) {
		uint64_t want_names = 0, want_members = 0, want_groups = 0;

		for (unsigned k = 0; k < SNAMES; k++) {
			TH_ENTRY(e);
			int owner = -1;

			for (int c = 0; c < SKIDS; c++) {
				if (!alive[c] || !(rep[c].names & (1u << k)))
					continue;
				assert_int_equal(owner, -1); /* one holder at most */
				owner = c;
			}
			storm_name(nm, sizeof(nm), k);
			if (owner < 0) {
				assert_int_equal(procreg_lookup(r, nm, &e), -ENOENT);
				continue;
			}
			assert_int_equal(procreg_lookup(r, nm, &e), 0);
			assert_int_equal(e.pid, kids[owner]);
			want_names++;
		}
		for (unsigned k = 0; k < SGROUPS; k++) {
			uint64_t want = 0;

			storm_group(nm, sizeof(nm), k);
			members_of(r, nm, &l);
			for (int c = 0; c < SKIDS; c++) {
				const struct procreg_entry *e = member_pid(&l, kids[c]);
				bool in = alive[c] && (rep[c].groups & (1u << k));

				if (in != (e != NULL))
					fail_msg("child %d %s %s", c, in ? "missing from" : "still in", nm);
				want += in;
			}
			assert_int_equal(l.n, want);
			want_members += want;
			want_groups += want > 0;
			assert_true((group_in(&gl, nm) != NULL) == (want > 0));
		}
		assert_int_equal(names, want_names);
		assert_int_equal(members, want_members);
		assert_int_equal(gl.n, want_groups);
	}
	free(gl.v);
	elist_free(&l);
}

static void test_storm_counts(void **state)
{
	struct fx *f = *state;
	static const bool killed[SKIDS] = { true, false, false, true, false, false };
	struct storm args[SKIDS];
	struct storm_report rep[SKIDS];
	bool alive[SKIDS];
	pid_t kids[SKIDS];
	int report[SKIDS], hold[SKIDS];
	PROCREG_OPTS(procreg_stats, st);

	for (int i = 0; i < SKIDS; i++) {
		int rp[2], hp[2];

		assert_int_equal(pipe2(rp, O_CLOEXEC), 0);
		assert_int_equal(pipe2(hp, O_CLOEXEC), 0);
		args[i] = (struct storm){ f->dir, i, rp[1], hp[0] };
		kids[i] = fork();
		assert_true(kids[i] >= 0);
		if (kids[i] == 0) {
			int keep[] = { rp[1], hp[0], -1 };

			close_other_fds(keep);
			_exit(storm_main(&args[i]));
		}
		close(rp[1]);
		close(hp[0]);
		report[i] = rp[0];
		hold[i] = hp[1];
	}
	/* Halfway through, two of them are killed, mid-request or not. */
	for (int i = 0; i < SKIDS; i++) {
		char c;

		if (read_byte(report[i], &c) != 1)
			fail_msg("storm child %d: status %d", i, th_wait(kids[i]));
		if (killed[i]) {
			kill(kids[i], SIGKILL);
			assert_int_equal(th_wait(kids[i]), 128 + SIGKILL);
		}
		alive[i] = !killed[i];
	}
	for (int i = 0; i < SKIDS; i++) {
		memset(&rep[i], 0, sizeof(rep[i]));
		if (alive[i] && !read_all(report[i], &rep[i], sizeof(rep[i])))
			fail_msg("storm child %d: status %d", i, th_wait(kids[i]));
		close(report[i]);
	}
	assert_int_equal(procreg_sync(f->reg), 0);
	storm_check(f->reg, kids, rep, alive);
	procreg_stats(f->reg, &st);
	print_message("after the storm: %llu names, %llu groups, %llu memberships, %llu processes; "
		      "%llu joins, %llu leaves, %llu deaths\n",
		      (unsigned long long)st.names, (unsigned long long)st.groups,
		      (unsigned long long)st.memberships, (unsigned long long)st.processes,
		      (unsigned long long)st.joins, (unsigned long long)st.leaves,
		      (unsigned long long)st.deaths);
	assert_true(st.joins > 0 && st.leaves > 0);

	/* The others exit: everything goes. */
	for (int i = 0; i < SKIDS; i++) {
		close(hold[i]);
		if (alive[i])
			assert_int_equal(th_wait(kids[i]), 0);
	}
	assert_int_equal(procreg_sync(f->reg), 0);
	storm_check(f->reg, NULL, NULL, NULL);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.memberships, 0);
	assert_int_equal(st.processes, 0);
}

/* ---- a daemon killed and restarted ------------------------------------ */

static void test_daemon_restart_members(void **state)
{
	struct fx *f = *state;
	struct actor dead = { .dir = f->dir, .names = { "r.dead" },
			      .groups = { "mixed", "onlydead" }, .meta = "dead" };
	struct actor live = { .dir = f->dir, .groups = { "mixed", "onlylive" }, .meta = "live" };
	PROCREG_OPTS(procreg_stats, st);
	struct glist gl = { 0 };
	struct elist l = { 0 };
	int hold_dead, hold_live;
	pid_t pd, pl;
	uint64_t joins;

	join_ok(f->reg, "keep", "k");
	join_ok(f->reg, "mixed", "parent");
	pd = spawn_actor(&dead, &hold_dead);
	pl = spawn_actor(&live, &hold_live);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 4);
	assert_int_equal(st.memberships, 6);
	joins = st.joins;

	th_daemon_kill(&f->d);
	kill(pd, SIGKILL);
	assert_int_equal(th_wait(pd), 128 + SIGKILL);
	close(hold_dead);
	/* No daemon: the table stands as it was, dead member and all. */
	expect_count(f->reg, "onlydead", 1, 1);
	expect_count(f->reg, "mixed", 3, 3);

	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
	/* Live members kept, with their metadata; the dead one's dropped,
	 * and its group with it. */
	expect_count(f->reg, "onlydead", 0, 0);
	assert_int_equal(procreg_lookup(f->reg, "r.dead", NULL), -ENOENT);
	members_of(f->reg, "mixed", &l);
	assert_int_equal(l.n, 2);
	assert_memory_equal(member_pid(&l, getpid())->meta, "parent", 6);
	assert_memory_equal(member_pid(&l, pl)->meta, "live", 4);
	assert_null(member_pid(&l, pd));
	expect_count(f->reg, "onlylive", 1, 1);
	expect_count(f->reg, "keep", 1, 1);
	groups_of(f->reg, &gl);
	assert_int_equal(gl.n, 3);
	assert_null(group_in(&gl, "onlydead"));
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 3);
	assert_int_equal(st.memberships, 4);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.processes, 2);
	assert_int_equal(st.joins, joins);

	/* The new daemon watches the survivors, and serves leaves and joins
	 * of memberships made before it. */
	kill(pl, SIGKILL);
	th_wait(pl);
	close(hold_live);
	assert_int_equal(procreg_sync(f->reg), 0);
	expect_count(f->reg, "onlylive", 0, 0);
	expect_count(f->reg, "mixed", 1, 1);
	assert_int_equal(procreg_join(f->reg, "mixed", "again", 5), 0);
	members_of(f->reg, "mixed", &l);
	assert_int_equal(l.n, 1);
	assert_memory_equal(l.v[0].meta, "again", 5);
	assert_int_equal(procreg_leave(f->reg, "mixed"), 0);
	assert_int_equal(procreg_leave(f->reg, "keep"), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.groups, 0);
	assert_int_equal(st.memberships, 0);
	assert_int_equal(st.processes, 0);
	free(gl.v);
	elist_free(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_w_join_leave_members),
		cmocka_unit_test(test_w_big_group),
		cmocka_unit_test(test_w_members_while_writing),
		cmocka_unit_test(test_w_recovery),
		cmocka_unit_test_setup_teardown(test_join_leave_members, setup, teardown),
		cmocka_unit_test_setup_teardown(test_last_leave_drops_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_death_removes_memberships, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_pidfd, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_pidfd_other_uid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_join_leave, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_quota_counts_memberships, setup_quota, teardown),
		cmocka_unit_test_setup_teardown(test_storm_counts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_daemon_restart_members, setup, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
