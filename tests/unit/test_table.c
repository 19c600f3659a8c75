/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_table.c - the shared table without a daemon: the writer API
 * (lib/writer.c) driven directly, the way procregd's do_register and
 * do_unregister drive it, and the reader side (lib/table.c) through the
 * public API, in this process and in forked children reading while the
 * writer grows and churns the table.
 *
 * Every name's owner fields and metadata are a function of the name (and
 * a version for the metadata), so any reader, in any process, can check
 * that what it copied out is whole and belongs to the name it asked for:
 * a record freed too early and reused would show up as a mismatch.
 *
 * Forked children never call cmocka asserts (a failed assert would unwind
 * into the child's copy of the test runner); they report through their
 * exit status and a shared page, and the parent asserts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"

#define SCOPE "t"
#define MB (1ull << 20)

/* ---- helpers ---------------------------------------------------------- */

static uint64_t fnv(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	while (*s) {
		h ^= (uint8_t)*s++;
		h *= 1099511628211ull;
	}
	return h;
}

struct owner {
	uint32_t pid, uid, node;
	uint64_t start;
};

static void owner_of(const char *name, struct owner *o)
{
	uint64_t h = fnv(name);

	o->pid = 100 + (uint32_t)(h % 4000000);
	o->uid = (uint32_t)((h >> 24) % 65000);
	o->node = (uint32_t)((h >> 48) % 3);
	o->start = h >> 8;
}

/* "<name>|v<ver>|" then a pad whose length and bytes depend on both, so
 * record sizes vary and a stale or foreign record cannot pass. */
static size_t meta_for(const char *name, unsigned ver, uint8_t *out)
{
	int n = snprintf((char *)out, PROCREG_META_MAX, "%s|v%u|", name, ver);
	size_t pad = (size_t)((fnv(name) + ver * 13u) % 48);

	for (size_t j = 0; j < pad; j++)
		out[(size_t)n + j] = (uint8_t)(j * 37 + ver);
	return (size_t)n + pad;
}

/* Whether E is a whole, consistent entry for WANT (any name if NULL) at
 * version WANT_VER (any if < 0). */
static bool entry_ok(const struct procreg_entry *e, const char *want, long want_ver)
{
	uint8_t m[PROCREG_META_MAX];
	const uint8_t *em = e->meta;
	struct owner o;
	size_t nl = strnlen(e->name, sizeof(e->name)), p, ml;
	unsigned ver = 0;

	if (nl == 0 || nl > PROCREG_NAME_MAX || (want && strcmp(e->name, want)))
		return false;
	owner_of(e->name, &o);
	if ((uint32_t)e->pid != o.pid || e->uid != o.uid || e->node != o.node ||
	    e->start_time != o.start)
		return false;
	if (e->meta_len < nl + 4 || e->meta_len > PROCREG_META_MAX ||
	    memcmp(em, e->name, nl) || memcmp(em + nl, "|v", 2))
		return false;
	for (p = nl + 2; p < e->meta_len && em[p] >= '0' && em[p] <= '9'; p++)
		ver = ver * 10 + (unsigned)(em[p] - '0');
	if (want_ver >= 0 && ver != (unsigned long)want_ver)
		return false;
	ml = meta_for(e->name, ver, m);
	return ml == e->meta_len && !memcmp(m, e->meta, ml);
}

#define w_open_at(w, dir, max_size) th_writer_open(w, dir, SCOPE, max_size)
#define r_open(dir) th_open_scope(dir, SCOPE)

/* Register NAME as procregd's do_register does: reserve room (which may
 * rebuild the index), find the name's slot, fill a new record in private,
 * publish it with one store (retiring the old record on a replace).
 * Returns 0 for a new name, 1 for a replace, or a negative errno. */
static int put_raw(struct pr_writer *w, const char *name, uint32_t pid, uint64_t start,
		   uint32_t uid, uint32_t node, const void *meta, size_t meta_len)
{
	struct pr_record t = { .kind = PR_KIND_NAME };
	size_t len = strlen(name);
	uint64_t pos, old, off;
	int err = procreg__w_reserve(w, &w->map.hdr->names);

	if (err)
		return err;
	old = procreg__w_find_name(w, name, len, &pos);
	if (pos == UINT64_MAX)
		return -EOVERFLOW; /* the index is full: reserve failed its job */
	t.start_time = start;
	t.registered_ns = procreg__now_ns();
	t.pid = pid;
	t.uid = uid;
	t.node = node;
	t.name_len = (uint16_t)len;
	t.meta_len = (uint16_t)meta_len;
	err = procreg__w_new_record(w, &t, name, meta, &off);
	if (err)
		return err;
	procreg__w_publish(w, &w->map.hdr->names, pos, off);
	CMM_STORE_SHARED(w->map.hdr->registrations, w->map.hdr->registrations + 1);
	return old ? 1 : 0;
}

static int put(struct pr_writer *w, const char *name, unsigned ver)
{
	uint8_t meta[PROCREG_META_MAX];
	size_t ml = meta_for(name, ver, meta);
	struct owner o;

	owner_of(name, &o);
	return put_raw(w, name, o.pid, o.start, o.uid, o.node, meta, ml);
}

/* Remove NAME as do_unregister does. */
static int del(struct pr_writer *w, const char *name)
{
	size_t len = strlen(name);
	uint64_t pos, off;

	off = procreg__w_find_name(w, name, len, &pos);
	if (!off)
		return -ENOENT;
	procreg__w_remove(w, &w->map.hdr->names, pos);
	CMM_STORE_SHARED(w->map.hdr->unregistrations, w->map.hdr->unregistrations + 1);
	return 0;
}

/* Whether NAME's slot is followed by a non-empty one: removing it then
 * leaves a tombstone (removing a name followed by an empty slot empties
 * its slot instead, and the tombstones before it). */
static bool leaves_tomb(struct pr_writer *w, const char *name)
{
	size_t len = strlen(name);
	uint64_t pos;
	const struct pr_index *ix = (const struct pr_index *)(w->map.base + w->map.hdr->names.index_off);

	if (!procreg__w_find_name(w, name, len, &pos))
		return false;
	return ix->slot[(pos + 1) & (ix->capacity - 1)].word != PR_SLOT_EMPTY;
}

/* Run reclamation to the end. Only for when no reader can be inside a
 * critical section (no other process reads): then it finishes at once. */
static void drain(struct pr_writer *w)
{
	for (int i = 0; i < 16 && procreg__w_reclaim(w); i++)
		;
	assert_int_equal(procreg__w_reclaim(w), 0);
	assert_int_equal(w->retired.n, 0);
	assert_int_equal(w->waiting.n, 0);
}

static uint64_t index_bytes(uint64_t cap)
{
	return sizeof(struct pr_index) + cap * sizeof(struct pr_slot);
}

static const struct pr_index *index_at_test(const struct pr_writer *w, const struct pr_root *root)
{
	return (const struct pr_index *)(w->map.base + root->index_off);
}

static const struct pr_index *w_index(const struct pr_writer *w)
{
	return (const struct pr_index *)(w->map.base + w->map.hdr->names.index_off);
}

struct walk_sum {
	uint64_t n, bytes, displaced;
	uint64_t shift;
};

static int walk_sum_cb(uint64_t off, const struct pr_record *r, void *arg)
{
	struct walk_sum *s = arg;

	(void)off;
	s->n++;
	s->bytes += procreg__record_size(r);
	return 0;
}

/* Bytes the table's reachable blocks take: what arena_used must say once
 * nothing is waiting for a grace period. */
static struct walk_sum w_sum(struct pr_writer *w)
{
	struct walk_sum s = { .shift = w_index(w)->shift };

	const struct pr_index *ix = w_index(w);

	assert_int_equal(procreg__w_walk(w, walk_sum_cb, &s), 0);
	/* The group index is reachable too, even when empty. */
	s.bytes += index_bytes(ix->capacity) + index_bytes(
		((const struct pr_index *)(w->map.base + w->map.hdr->groups.index_off))->capacity);
	/* And the change feed's ring and the reader registry. */
	s.bytes += w->map.hdr->feed_cap * sizeof(struct pr_event) +
		   w->map.hdr->readers_cap * sizeof(struct pr_reader_info);
	for (uint64_t p = 0; p < ix->capacity; p++)
		if (pr_slot_live(ix->slot[p].word) &&
		    (pr_slot_hash_hi(ix->slot[p].word, ix->slot[p].key, w->map.hdr->hash_seed) >>
		     (s.shift - 32)) != p)
			s.displaced++;
	return s;
}

static void name_of(char *buf, size_t len, const char *prefix, unsigned i)
{
	snprintf(buf, len, "%s-%06u", prefix, i);
}

static void *read_whole(const char *path, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint8_t *b;
	size_t got = 0;

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	b = malloc((size_t)st.st_size);
	assert_non_null(b);
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, b + got, (size_t)st.st_size - got);

		assert_true(n > 0);
		got += (size_t)n;
	}
	close(fd);
	*len = got;
	return b;
}

static uint64_t mono_ms(void)
{
	return procreg__mono_ns() / 1000000;
}

/* ---- shared state between the parent and forked readers --------------- */

#define MAXKIDS 4

struct shared {
	int done;
	int started;
	int page_fd[MAXKIDS];      /* each reader's page, for the writer to take */
	uint64_t passes[MAXKIDS];
	uint64_t lookups[MAXKIDS];
	char why[MAXKIDS][200];
};

static struct shared *shared_new(void)
{
	return th_shared(sizeof(struct shared));
}

struct kid {
	pid_t pid;
	int status;     /* -1 while running */
};

/* Wait until child I has completed TARGET passes. Returns false if it
 * exited first (its status is kept). The deadline only turns a hung
 * child into a failure instead of a hung test; progress never depends on
 * how fast anything runs. */
static bool wait_passes(struct shared *sh, struct kid *k, int i, uint64_t target)
{
	uint64_t t0 = mono_ms();

	while (__atomic_load_n(&sh->passes[i], __ATOMIC_ACQUIRE) < target) {
		int st;

		if (k[i].status >= 0)
			return false;
		if (waitpid(k[i].pid, &st, WNOHANG) == k[i].pid) {
			k[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			return false;
		}
		if (mono_ms() - t0 > 120000)
			return false;
		sched_yield();
	}
	return true;
}

static void finish_kids(struct shared *sh, struct kid *k, int n)
{
	__atomic_store_n(&sh->done, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < n; i++) {
		if (k[i].status < 0)
			k[i].status = th_wait(k[i].pid);
		if (k[i].status != 0)
			print_error("reader %d: status %d: %s\n", i, k[i].status, sh->why[i]);
	}
	for (int i = 0; i < n; i++)
		assert_int_equal(k[i].status, 0);
}

/* In a forked child: a crash must kill it. cmocka's handlers, inherited
 * through fork(), would catch the signal and carry on running the rest of
 * the test suite in the child. */
static void child_signals(void)
{
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS, SIGABRT };

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
}

static void kid_fail(struct shared *sh, int i, const char *fmt, const char *name, int rc)
{
	if (!sh->why[i][0])
		snprintf(sh->why[i], sizeof(sh->why[i]), fmt, name, rc);
}

/* ---- basic operations ------------------------------------------------- */

/* The name hash, the name compare and the copy-out read words, not
 * bytes. They must give what the byte loops they replaced gave (the hash
 * is what every table's index is built by) for every length and
 * alignment, and never read past the caller's bytes: each string here
 * ends at the last byte before a PROT_NONE page. */
static uint64_t hash_bytewise(const char *s, size_t n, uint64_t seed)
{
	uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ull);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v = 0;

		for (int k = 0; k < 8; k++)
			v |= (uint64_t)(unsigned char)s[i + k] << (8 * k);
		h = (h ^ v) * 0x9fb21c651e98df25ull;
		h ^= h >> 29;
	}
	if (i < n) {
		uint64_t v = 0;

		for (size_t k = 0; i + k < n; k++)
			v |= (uint64_t)(unsigned char)s[i + k] << (8 * k);
		h = (h ^ v) * 0x9fb21c651e98df25ull;
	}
	return pr_mix(h);
}

static void test_word_helpers(void **state)
{
	long pg = sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	char other[PROCREG_NAME_MAX + 16], dst[PROCREG_NAME_MAX + 32];
	uint64_t seed = 0x0123456789abcdefull;

	(void)state;
	assert_ptr_not_equal(m, MAP_FAILED);
	assert_int_equal(mprotect(m + pg, (size_t)pg, PROT_NONE), 0);
	for (size_t n = 0; n <= PROCREG_NAME_MAX; n++) {
		char *s = m + pg - n; /* ends at the guard page */

		for (size_t i = 0; i < n; i++)
			s[i] = (char)(0x80 + (i * 37 + n) % 101);
		assert_true(pr_hash(s, n, seed) == hash_bytewise(s, n, seed));
		memcpy(other, s, n);
		assert_true(pr_bytes_eq(s, other, n));
		for (size_t i = 0; i < n; i++) {
			other[i] ^= 1;
			assert_false(pr_bytes_eq(s, other, n));
			other[i] ^= 1;
		}
		memset(dst, 0x5a, sizeof(dst));
		pr_copy(dst + 8, s, n);
		assert_memory_equal(dst + 8, s, n);
		/* Not a byte outside the N copied. */
		for (size_t i = 0; i < 8; i++)
			assert_int_equal(dst[i], 0x5a);
		for (size_t i = 8 + n; i < sizeof(dst); i++)
			assert_int_equal(dst[i], 0x5a);
	}
	munmap(m, 2 * (size_t)pg);
}

static void test_insert_lookup(void **state)
{
	char *dir = th_mkdtemp();
	struct pr_writer w;
	TH_ENTRY(e);
	PROCREG_OPTS(procreg_stats, st);
	char longname[PROCREG_NAME_MAX + 2];
	uint8_t bigmeta[PROCREG_META_MAX];
	uint64_t t0, t1;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 4 * MB);
	assert_false(w.attached);
	r = r_open(dir);
	assert_non_null(r);
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.index_capacity, 256);
	assert_int_equal(st.daemon_pid, 0);
	assert_int_equal(procreg_lookup(r, "payments", &e), -ENOENT);

	t0 = procreg__now_ns();
	assert_int_equal(put_raw(&w, "payments", 4242, 123456789, 1000, 0,
				 "unix:/run/payments.sock", 23), 0);
	t1 = procreg__now_ns();
	th_entry_scribble(&e, 0xa5);
	assert_int_equal(procreg_lookup(r, "payments", &e), 0);
	assert_int_equal(e.pid, 4242);
	assert_int_equal(e.start_time, 123456789);
	assert_int_equal(e.uid, 1000);
	assert_int_equal(e.node, 0);
	assert_true(e.registered_ns >= t0 && e.registered_ns <= t1);
	assert_string_equal(e.name, "payments");
	assert_int_equal(e.meta_len, 23);
	assert_memory_equal(e.meta, "unix:/run/payments.sock", 23);
	assert_int_equal(procreg_lookup(r, "payments", NULL), 0);

	/* The longest name, the largest binary metadata, a remote node. */
	memset(longname, 'L', PROCREG_NAME_MAX);
	longname[PROCREG_NAME_MAX] = 0;
	for (size_t i = 0; i < sizeof(bigmeta); i++)
		bigmeta[i] = (uint8_t)(i * 131 + 7); /* has NUL bytes */
	assert_int_equal(put_raw(&w, longname, 7, 8, 9, 3, bigmeta, sizeof(bigmeta)), 0);
	/* No metadata at all. */
	assert_int_equal(put_raw(&w, "bare", 11, 12, 13, 0, NULL, 0), 0);

	th_entry_scribble(&e, 0x5a);
	assert_int_equal(procreg_lookup(r, longname, &e), 0);
	assert_int_equal(e.pid, 7);
	assert_int_equal(e.start_time, 8);
	assert_int_equal(e.uid, 9);
	assert_int_equal(e.node, 3);
	assert_string_equal(e.name, longname);
	assert_int_equal(e.meta_len, PROCREG_META_MAX);
	assert_memory_equal(e.meta, bigmeta, sizeof(bigmeta));
	th_entry_scribble(&e, 0x5a);
	assert_int_equal(procreg_lookup(r, "bare", &e), 0);
	assert_int_equal(e.pid, 11);
	assert_int_equal(e.meta_len, 0);
	assert_string_equal(e.name, "bare");

	/* Names that could never be registered, and near misses. */
	assert_int_equal(procreg_lookup(r, "", &e), -EINVAL);
	assert_int_equal(procreg_lookup(r, NULL, &e), -EINVAL);
	longname[PROCREG_NAME_MAX] = 'L';
	longname[PROCREG_NAME_MAX + 1] = 0;
	assert_int_equal(procreg_lookup(r, longname, &e), -ENAMETOOLONG);
	longname[PROCREG_NAME_MAX - 1] = 0;
	assert_int_equal(procreg_lookup(r, longname, &e), -ENOENT);
	assert_int_equal(procreg_lookup(r, "payment", &e), -ENOENT);
	assert_int_equal(procreg_lookup(r, "paymentsX", &e), -ENOENT);
	assert_int_equal(procreg_lookup(r, "Payments", &e), -ENOENT);

	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, 3);
	assert_int_equal(st.registrations, 3);
	assert_true(st.arena_used >= index_bytes(256) + 3 * sizeof(struct pr_record));
	assert_true(st.arena_top >= st.arena_used);
	assert_int_equal(st.arena_size, 4 * MB - PR_HDR_SIZE);
	/* The registry's size; no daemon holds a page of ours. */
	assert_int_equal(st.reader_slots, 64);
	assert_int_equal(st.reader_slots_used, 0);
	assert_int_equal(st.arena_used, w_sum(&w).bytes);

	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

static void test_replace(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	TH_ENTRY(e);
	PROCREG_OPTS(procreg_stats, st);
	uint64_t used0, top = 0;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 4 * MB);
	r = r_open(dir);
	assert_non_null(r);
	for (unsigned i = 0; i < 10; i++) {
		name_of(name, sizeof(name), "other", i);
		assert_int_equal(put(&w, name, 1), 0);
	}
	assert_int_equal(put(&w, "svc", 1), 0);
	drain(&w);
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, 11);
	used0 = st.arena_used;

	/* Same name, new metadata: a new record, the old one retired. */
	assert_int_equal(put(&w, "svc", 2), 1);
	assert_int_equal(procreg_lookup(r, "svc", &e), 0);
	assert_true(entry_ok(&e, "svc", 2));
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, 11);
	assert_int_equal(w.map.hdr->names.live, 11);
	/* Until a grace period passes the old record is still allocated. */
	assert_int_equal(w.retired.n, 2);
	drain(&w);
	assert_int_equal(w.map.hdr->arena_used, w_sum(&w).bytes);
	{
		uint8_t m[PROCREG_META_MAX];
		size_t m1 = meta_for("svc", 1, m), m2 = meta_for("svc", 2, m);

		assert_int_equal(w.map.hdr->arena_used,
				 used0 - PR_RECORD_SIZE(3, m1) + PR_RECORD_SIZE(3, m2));
	}

	/* Replace over and over: the old records come back to the
	 * allocator, so the arena stops growing. */
	for (unsigned v = 3; v < 40; v++) {
		char meta[32];

		snprintf(meta, sizeof(meta), "fixed-size-meta-%03u", v);
		assert_int_equal(put_raw(&w, "svc", 1, 2, 3, 0, meta, 20), 1);
		drain(&w);
		if (v == 4)
			top = w.map.hdr->arena_top;
		assert_int_equal(procreg_lookup(r, "svc", &e), 0);
		assert_int_equal(e.meta_len, 20);
		assert_memory_equal(e.meta, meta, 20);
	}
	assert_int_equal(w.map.hdr->arena_top, top);
	assert_int_equal(put(&w, "svc", 39), 1);
	assert_int_equal(procreg_lookup(r, "svc", &e), 0);
	assert_true(entry_ok(&e, "svc", 39));
	for (unsigned i = 0; i < 10; i++) {
		name_of(name, sizeof(name), "other", i);
		assert_int_equal(procreg_lookup(r, name, &e), 0);
		assert_true(entry_ok(&e, name, 1));
	}
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, 11);
	assert_int_equal(st.registrations, 11 + 39);

	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

static int count_cb(const struct procreg_entry *e, void *arg)
{
	(void)e;
	(*(uint64_t *)arg)++;
	return 0;
}

static void test_delete(void **state)
{
	char *dir = th_mkdtemp();
	struct pr_writer w;
	TH_ENTRY(e);
	PROCREG_OPTS(procreg_stats, st);
	uint64_t n = 0;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 4 * MB);
	r = r_open(dir);
	assert_non_null(r);
	assert_int_equal(put(&w, "a", 1), 0);
	assert_int_equal(put(&w, "b", 1), 0);
	assert_int_equal(put(&w, "c", 1), 0);
	assert_int_equal(del(&w, "b"), 0);
	assert_int_equal(procreg_lookup(r, "b", &e), -ENOENT);
	assert_int_equal(procreg_lookup(r, "a", &e), 0);
	assert_true(entry_ok(&e, "a", 1));
	assert_int_equal(procreg_lookup(r, "c", &e), 0);
	assert_true(entry_ok(&e, "c", 1));
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, 2);
	assert_int_equal(st.unregistrations, 1);
	assert_int_equal(del(&w, "b"), -ENOENT);
	assert_int_equal(del(&w, "never"), -ENOENT);
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, 2);

	/* Back again, with new content. */
	assert_int_equal(put(&w, "b", 5), 0);
	assert_int_equal(procreg_lookup(r, "b", &e), 0);
	assert_true(entry_ok(&e, "b", 5));
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, 3);

	/* All gone: nothing is found, the walk is empty, and once the grace
	 * period passed only the index is allocated. */
	assert_int_equal(del(&w, "a"), 0);
	assert_int_equal(del(&w, "b"), 0);
	assert_int_equal(del(&w, "c"), 0);
	assert_int_equal(procreg_foreach(r, count_cb, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(procreg_lookup(r, "a", &e), -ENOENT);
	assert_int_equal(procreg_lookup(r, "c", &e), -ENOENT);
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, 0);
	assert_int_equal(w.map.hdr->names.live, 0);
	drain(&w);
	assert_int_equal(w.map.hdr->arena_used, w_sum(&w).bytes);

	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- growth and churn ------------------------------------------------- */

#define MANY 20000

static void test_many_names(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	TH_ENTRY(e);
	PROCREG_OPTS(procreg_stats, st);
	uint64_t cap0, rehash0, last_cap;
	unsigned cap_changes = 0;
	struct walk_sum s;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 64 * MB);
	r = r_open(dir);
	assert_non_null(r);
	assert_int_equal(procreg_stats(r, &st), 0);
	cap0 = last_cap = st.index_capacity;
	rehash0 = w.map.hdr->rehashes;
	for (unsigned i = 0; i < MANY; i++) {
		name_of(name, sizeof(name), "n", i);
		assert_int_equal(put(&w, name, 1), 0);
		if (w_index(&w)->capacity != last_cap) {
			assert_true(w_index(&w)->capacity > last_cap);
			last_cap = w_index(&w)->capacity;
			cap_changes++;
			/* Names from before the rebuild are in the new index. */
			for (unsigned j = 0; j <= i; j += 1 + i / 64) {
				name_of(name, sizeof(name), "n", j);
				assert_int_equal(procreg_lookup(r, name, NULL), 0);
			}
		}
		if (i % 64 == 0)
			procreg__w_reclaim(&w);
	}
	drain(&w);
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, MANY);
	assert_true(st.index_capacity > cap0);
	assert_true(st.index_capacity * 3 >= (uint64_t)MANY * 4);
	assert_true(cap_changes >= 5);
	assert_true(w.map.hdr->rehashes - rehash0 >= cap_changes);

	for (unsigned i = 0; i < MANY; i++) {
		name_of(name, sizeof(name), "n", i);
		th_entry_scribble(&e, 0);
		assert_int_equal(procreg_lookup(r, name, &e), 0);
		assert_true(entry_ok(&e, name, 1));
	}
	for (unsigned i = MANY; i < 2 * MANY; i++) {
		name_of(name, sizeof(name), "n", i);
		assert_int_equal(procreg_lookup(r, name, &e), -ENOENT);
		name_of(name, sizeof(name), "m", i - MANY);
		assert_int_equal(procreg_lookup(r, name, &e), -ENOENT);
	}
	assert_int_equal(procreg_lookup(r, "n-00000", &e), -ENOENT);
	assert_int_equal(procreg_lookup(r, "n-0000000", &e), -ENOENT);

	/* The probes did collide: many names sit past their home slot. */
	s = w_sum(&w);
	assert_int_equal(s.n, MANY);
	assert_true(s.displaced > 100);
	assert_int_equal(w.map.hdr->arena_used, s.bytes);

	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

#define UNIVERSE 40000
#define CHURN_LIVE 3800

struct model_walk {
	const unsigned *ver;
	unsigned *seen;
	uint64_t total, bad;
};

static int model_cb(const struct procreg_entry *e, void *arg)
{
	struct model_walk *m = arg;
	unsigned i;

	m->total++;
	if (sscanf(e->name, "c-%u", &i) != 1 || i >= UNIVERSE || !m->ver[i] ||
	    !entry_ok(e, NULL, (long)m->ver[i])) {
		m->bad++;
		return 0;
	}
	m->seen[i]++;
	return 0;
}

/* The same through procreg_lookup_many, in calls of an odd size (groups
 * of the bulk lookup split across calls), with entries and presence only. */
#define BULK_CALL 37

static void check_model_bulk(procreg_t *r, const unsigned *ver)
{
	static char names[BULK_CALL][64];
	static unsigned char metas[BULK_CALL][PROCREG_META_MAX];
	static struct procreg_entry es[BULK_CALL];
	const char *np[BULK_CALL];
	int res[BULK_CALL];

	for (unsigned base = 0; base < UNIVERSE; base += BULK_CALL) {
		unsigned n = UNIVERSE - base < BULK_CALL ? UNIVERSE - base : BULK_CALL;
		int want = 0;

		for (unsigned i = 0; i < n; i++) {
			name_of(names[i], sizeof(names[i]), "c", base + i);
			np[i] = names[i];
			es[i] = (struct procreg_entry){ .sz = sizeof(es[i]), .meta = metas[i],
							.meta_size = sizeof(metas[i]) };
			want += ver[base + i] != 0;
		}
		assert_int_equal(procreg_lookup_many(r, np, n, es, res), want);
		for (unsigned i = 0; i < n; i++) {
			assert_int_equal(res[i], ver[base + i] ? 0 : -ENOENT);
			if (ver[base + i])
				assert_true(entry_ok(&es[i], names[i], (long)ver[base + i]));
		}
		assert_int_equal(procreg_lookup_many(r, np, n, NULL, res), want);
		for (unsigned i = 0; i < n; i++)
			assert_int_equal(res[i], ver[base + i] ? 0 : -ENOENT);
	}
}

static void check_model(procreg_t *r, const unsigned *ver, uint64_t live)
{
	TH_ENTRY(e);
	PROCREG_OPTS(procreg_stats, st);
	char name[64];

	for (unsigned k = 0; k < UNIVERSE; k++) {
		name_of(name, sizeof(name), "c", k);
		if (ver[k]) {
			assert_int_equal(procreg_lookup(r, name, &e), 0);
			assert_true(entry_ok(&e, name, (long)ver[k]));
		} else {
			assert_int_equal(procreg_lookup(r, name, NULL), -ENOENT);
		}
	}
	check_model_bulk(r, ver);
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, live);
}

/* Delete-heavy churn over a large universe of names: about CHURN_LIVE
 * names live at any time, new names keep coming, and removals favour
 * names that leave a tombstone (a name followed by an empty slot empties
 * its slot instead), so tombstones pile up, the index is rebuilt at the
 * same capacity to shed them, and every answer stays right throughout. */
static void test_churn(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	unsigned *ver = calloc(UNIVERSE, sizeof(*ver));
	unsigned *ids = calloc(UNIVERSE, sizeof(*ids)), *at = calloc(UNIVERSE, sizeof(*at));
	uint64_t seed = 0x51ed2701, live = 0, max_tombs = 0, max_cap = 0;
	uint64_t last_rehashes, last_cap, same_cap = 0, deletes = 0;
	struct model_walk mw = { 0 };
	procreg_t *r;

	(void)state;
	assert_non_null(ver);
	assert_non_null(ids);
	assert_non_null(at);
	w_open_at(&w, dir, 64 * MB);
	r = r_open(dir);
	assert_non_null(r);
	last_rehashes = w.map.hdr->rehashes;
	last_cap = w_index(&w)->capacity;
	for (unsigned round = 1; round <= 120000; round++) {
		uint64_t x = th_xorshift(&seed);
		unsigned coin = (unsigned)(x % 100), i;

		if (live == 0 || (live < CHURN_LIVE && coin < 60)) {
			do
				i = (unsigned)(th_xorshift(&seed) % UNIVERSE);
			while (ver[i]);
			name_of(name, sizeof(name), "c", i);
			assert_int_equal(put(&w, name, round), 0);
			ver[i] = round;
			at[i] = (unsigned)live;
			ids[live++] = i;
		} else if (coin < 85) {
			/* A removal: look a little for one that leaves a
			 * tombstone, else take what we have. */
			for (int tries = 0; tries < 8; tries++) {
				i = ids[th_xorshift(&seed) % live];
				name_of(name, sizeof(name), "c", i);
				if (leaves_tomb(&w, name))
					break;
			}
			assert_int_equal(del(&w, name), 0);
			ver[i] = 0;
			ids[at[i]] = ids[--live];
			at[ids[at[i]]] = at[i];
			deletes++;
		} else {
			i = ids[th_xorshift(&seed) % live];
			name_of(name, sizeof(name), "c", i);
			assert_int_equal(put(&w, name, round), 1);
			ver[i] = round;
		}
		if (w.map.hdr->rehashes != last_rehashes) {
			if (w_index(&w)->capacity == last_cap)
				same_cap++;
			last_rehashes = w.map.hdr->rehashes;
			last_cap = w_index(&w)->capacity;
		}
		if (w.map.hdr->names.tombs > max_tombs)
			max_tombs = w.map.hdr->names.tombs;
		if (w_index(&w)->capacity > max_cap)
			max_cap = w_index(&w)->capacity;
		assert_int_equal(w.map.hdr->names.live, live);
		if (round % 97 == 0)
			procreg__w_reclaim(&w);
		if (round % 30000 == 0)
			check_model(r, ver, live);
	}
	print_message("churn: %llu deletes, max tombstones %llu, %llu rebuilds at the same capacity, "
		      "capacity %llu, live %llu\n",
		      (unsigned long long)deletes, (unsigned long long)max_tombs,
		      (unsigned long long)same_cap, (unsigned long long)max_cap,
		      (unsigned long long)live);
	/* Tombstones accumulated and were shed by rebuilds that did not
	 * have to grow the index to do it. */
	assert_true(max_tombs > 1000);
	assert_true(same_cap >= 3);
	assert_true(max_cap <= 8192);

	/* The walk sees exactly the model. */
	check_model(r, ver, live);
	mw.ver = ver;
	mw.seen = calloc(UNIVERSE, sizeof(*mw.seen));
	assert_non_null(mw.seen);
	assert_int_equal(procreg_foreach(r, model_cb, &mw), 0);
	assert_int_equal(mw.bad, 0);
	assert_int_equal(mw.total, live);
	for (unsigned k = 0; k < UNIVERSE; k++)
		assert_int_equal(mw.seen[k], ver[k] ? 1 : 0);

	drain(&w);
	assert_int_equal(w.map.hdr->arena_used, w_sum(&w).bytes);
	assert_int_equal(w.map.hdr->names.live, live);

	free(mw.seen);
	free(ver);
	free(ids);
	free(at);
	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- readers in other processes while the writer grows the table ------ */

#define STABLE 2000
#define GROW 100000
#define HOT 16      /* stable names the writer republishes on every step */

struct reader_arg {
	const char *dir;
	struct shared *sh;
	int idx;
	long stable_ver;
};

/* One pass of lookup_reader through procreg_lookup_many: the same names
 * (stable ones, half of them hot, and churning ones), BULK_CALL a call. */
static int bulk_pass(procreg_t *r, struct shared *sh, struct reader_arg *a, uint64_t *seed,
		     uint64_t *lookups)
{
	static char names[BULK_CALL][64];
	static unsigned char metas[BULK_CALL][PROCREG_META_MAX];
	static struct procreg_entry es[BULK_CALL];
	const char *np[BULK_CALL];
	bool stable[BULK_CALL];
	int res[BULK_CALL], ret = 0, n = 0;

	for (unsigned i = 0; i < 3 * STABLE; i++) {
		if (i % 3 == 2)
			name_of(names[n], sizeof(names[n]), "grow",
				(unsigned)(th_xorshift(seed) % GROW));
		else
			name_of(names[n], sizeof(names[n]), "stable",
				i & 1 ? (i / 3) % HOT : i / 3);
		stable[n] = i % 3 != 2;
		np[n] = names[n];
		es[n] = (struct procreg_entry){ .sz = sizeof(es[n]), .meta = metas[n],
						.meta_size = sizeof(metas[n]) };
		if (++n < BULK_CALL && i + 1 < 3 * STABLE)
			continue;
		if (procreg_lookup_many(r, np, (size_t)n, es, res) < 0) {
			kid_fail(sh, a->idx, "lookup_many %s: %d", "", -1);
			return 1;
		}
		*lookups += (uint64_t)n;
		for (int j = 0; j < n; j++) {
			if (stable[j] && res[j] != 0) {
				kid_fail(sh, a->idx, "stable %.60s missing: %d", names[j], res[j]);
				ret = 1;
			} else if (res[j] == 0 &&
				   !entry_ok(&es[j], names[j], stable[j] ? a->stable_ver : 1)) {
				kid_fail(sh, a->idx, "bulk %.60s: wrong entry %d", names[j], 0);
				ret = 1;
			} else if (res[j] != 0 && res[j] != -ENOENT) {
				kid_fail(sh, a->idx, "bulk %.60s: %d", names[j], res[j]);
				ret = 1;
			}
		}
		n = 0;
	}
	return ret;
}

static int lookup_reader(void *p)
{
	struct reader_arg *a = p;
	struct shared *sh = a->sh;
	TH_ENTRY(e);
	char name[64];
	uint64_t seed = 0x1234 + (uint64_t)a->idx, lookups = 0;
	procreg_t *r;
	int ret = 0;

	child_signals();
	r = r_open(a->dir);
	if (!r) {
		kid_fail(sh, a->idx, "open: %s %d", "", errno);
		return 2;
	}
	sh->page_fd[a->idx] = th_reader_page(r);
	__atomic_add_fetch(&sh->started, 1, __ATOMIC_ACQ_REL);
	for (;;) {
		/* Decide before the pass: every pass that starts while the
		 * writer runs is a whole pass that overlapped it. */
		int last = __atomic_load_n(&sh->done, __ATOMIC_ACQUIRE);

		if (a->idx & 1) {
			/* Odd readers look up through procreg_lookup_many. */
			ret |= bulk_pass(r, sh, a, &seed, &lookups);
			goto pass_done;
		}
		for (unsigned i = 0; i < 2 * STABLE; i++) {
			int rc;

			/* Every other lookup is of one of the hot few. */
			name_of(name, sizeof(name), "stable", i & 1 ? (i / 2) % HOT : i / 2);
			rc = procreg_lookup(r, name, &e);
			lookups++;
			if (rc != 0) {
				kid_fail(sh, a->idx, "stable %s missing: %d", name, rc);
				ret = 1;
			} else if (!entry_ok(&e, name, a->stable_ver)) {
				kid_fail(sh, a->idx, "stable %s: wrong entry %d", name, 0);
				ret = 1;
			}
			if (i & 1)
				continue;
			/* A name that comes and goes: either answer, but a
			 * found entry is whole and its own. */
			name_of(name, sizeof(name), "grow", (unsigned)(th_xorshift(&seed) % GROW));
			rc = procreg_lookup(r, name, &e);
			lookups++;
			if (rc == 0 && !entry_ok(&e, name, 1)) {
				kid_fail(sh, a->idx, "churn %s: wrong entry %d", name, 0);
				ret = 1;
			} else if (rc != 0 && rc != -ENOENT) {
				kid_fail(sh, a->idx, "churn %s: %d", name, rc);
				ret = 1;
			}
		}
pass_done:
		__atomic_add_fetch(&sh->passes[a->idx], 1, __ATOMIC_ACQ_REL);
		if (last || ret)
			break;
	}
	sh->lookups[a->idx] = lookups;
	procreg_close(r);
	return ret;
}

/* The writer's side of the concurrent tests: insert N "grow" names,
 * remove most of them some time later (tombstones, rebuilds), publish
 * every stable name again with the same content now and then (so records
 * readers are reading get retired and their memory reused), and reclaim
 * regularly. Every PHASE operations, wait until every reader has done
 * another whole pass, so the readers really overlap every stage. */
static void churn_writer(struct pr_writer *w, unsigned n, unsigned phase, unsigned stable,
			 unsigned stable_ver, struct shared *sh, struct kid *k, int nkids)
{
	char name[64];
	unsigned restable = 0;

	for (unsigned i = 0; i < n; i++) {
		name_of(name, sizeof(name), "grow", i);
		assert_int_equal(put(w, name, 1), 0);
		if (i >= 1000 && i % 4 != 0) {
			name_of(name, sizeof(name), "grow", i - 1000);
			assert_int_equal(del(w, name), 0);
		}
		if (i % 50 == 0) {
			name_of(name, sizeof(name), "stable", restable++ % stable);
			assert_int_equal(put(w, name, stable_ver), 1);
		}
		/* The hot few, on every step. */
		name_of(name, sizeof(name), "stable", i % HOT);
		assert_int_equal(put(w, name, stable_ver), 1);
		/* Reclaim as eagerly as a daemon under load would: freed
		 * records are reused by the very next inserts, so a grace
		 * period that ended too early would hand a reader bytes that
		 * are being rewritten. */
		procreg__w_reclaim(w);
		if (i % phase == phase - 1) {
			for (int j = 0; j < nkids; j++) {
				uint64_t now = __atomic_load_n(&sh->passes[j], __ATOMIC_ACQUIRE);

				if (!wait_passes(sh, k, j, now + 1)) {
					finish_kids(sh, k, nkids);
					fail_msg("reader %d stopped", j);
				}
			}
		}
	}
}

static void start_kids(struct pr_writer *w, struct shared *sh, struct kid *k, int n,
		       int (*fn)(void *), struct reader_arg *args)
{
	uint64_t t0 = mono_ms();

	for (int i = 0; i < n; i++) {
		k[i].status = -1;
		k[i].pid = th_fork(fn, &args[i]);
		assert_true(k[i].pid > 0);
	}
	while (__atomic_load_n(&sh->started, __ATOMIC_ACQUIRE) < n) {
		for (int i = 0; i < n; i++) {
			int st;

			if (k[i].status < 0 && waitpid(k[i].pid, &st, WNOHANG) == k[i].pid)
				k[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			if (k[i].status >= 0) {
				finish_kids(sh, k, n);
				fail_msg("reader %d exited early", i);
			}
		}
		assert_true(mono_ms() - t0 < 120000);
		sched_yield();
	}
	/* As procregd would: the writer waits for the readers' slots. */
	for (int i = 0; i < n; i++)
		th_adopt_page(w, k[i].pid, sh->page_fd[i]);
}

static void test_grow_while_reading(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	struct shared *sh = shared_new();
	struct reader_arg args[MAXKIDS];
	struct kid k[MAXKIDS];
	TH_ENTRY(e);
	uint64_t cap0, rehash0;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 128 * MB);
	for (unsigned i = 0; i < STABLE; i++) {
		name_of(name, sizeof(name), "stable", i);
		assert_int_equal(put(&w, name, 7), 0);
	}
	drain(&w);
	cap0 = w_index(&w)->capacity;
	rehash0 = w.map.hdr->rehashes;

	for (int i = 0; i < MAXKIDS; i++)
		args[i] = (struct reader_arg){ .dir = dir, .sh = sh, .idx = i, .stable_ver = 7 };
	start_kids(&w, sh, k, MAXKIDS, lookup_reader, args);
	churn_writer(&w, GROW, GROW / 10, STABLE, 7, sh, k, MAXKIDS);
	finish_kids(sh, k, MAXKIDS);
	for (int i = 0; i < MAXKIDS; i++)
		assert_true(sh->passes[i] >= 10);

	/* The table grew through several rebuilds while they read. */
	assert_true(w_index(&w)->capacity >= 8 * cap0);
	assert_true(w.map.hdr->rehashes - rehash0 >= 4);
	drain(&w);
	assert_int_equal(w.map.hdr->arena_used, w_sum(&w).bytes);
	r = r_open(dir);
	assert_non_null(r);
	for (unsigned i = 0; i < GROW; i++) {
		int want = i >= GROW - 1000 || i % 4 == 0 ? 0 : -ENOENT;

		name_of(name, sizeof(name), "grow", i);
		assert_int_equal(procreg_lookup(r, name, &e), want);
	}
	procreg_close(r);
	munmap(sh, sizeof(*sh));
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- iteration -------------------------------------------------------- */

struct seen {
	const char *prefix;
	unsigned n;
	unsigned *count;
	uint64_t total, bad, stop_after;
	int stop_ret;
};

static int seen_cb(const struct procreg_entry *e, void *arg)
{
	struct seen *s = arg;
	size_t pl = strlen(s->prefix);
	unsigned i;

	s->total++;
	if (!entry_ok(e, NULL, -1))
		s->bad++;
	else if (!strncmp(e->name, s->prefix, pl) && e->name[pl] == '-' &&
		 sscanf(e->name + pl + 1, "%u", &i) == 1 && i < s->n)
		s->count[i]++;
	if (s->stop_after && s->total == s->stop_after)
		return s->stop_ret;
	return 0;
}

static void expect_each_once(procreg_t *r, const char *prefix, unsigned n, uint64_t total)
{
	struct seen s = { .prefix = prefix, .n = n };

	s.count = calloc(n ? n : 1, sizeof(*s.count));
	assert_non_null(s.count);
	assert_int_equal(procreg_foreach(r, seen_cb, &s), 0);
	assert_int_equal(s.bad, 0);
	for (unsigned i = 0; i < n; i++) {
		if (s.count[i] != 1)
			print_error("%s-%06u seen %u times\n", prefix, i, s.count[i]);
		assert_int_equal(s.count[i], 1);
	}
	assert_int_equal(s.total, total);
	free(s.count);
}

/* Names whose home slot in an index of CAP slots is HOME, for this
 * table's hash seed: to build clusters on purpose. */
static unsigned names_with_home(struct pr_writer *w, uint64_t cap, uint64_t home,
				const char *prefix, unsigned want, unsigned *found)
{
	uint32_t shift = 64 - (uint32_t)__builtin_ctzll(cap);
	unsigned n = 0;
	char name[64];

	for (unsigned c = 0; n < want && c < 10000000; c++) {
		name_of(name, sizeof(name), prefix, c);
		if (pr_hash(name, strlen(name), w->map.hdr->hash_seed) >> shift == home)
			found[n++] = c;
	}
	return n;
}

static void test_foreach_quiet(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	struct seen s = { .prefix = "x" };
	unsigned wrap[100], cl[100];
	struct walk_sum ws;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 64 * MB);
	r = r_open(dir);
	assert_non_null(r);
	/* Empty. */
	expect_each_once(r, "none", 0, 0);

	/* A run that wraps from the last slot to the first: 100 names whose
	 * home is slot 200 of the 256-slot index fill 200..255 and 0..43,
	 * a cluster longer than one iteration chunk. */
	assert_int_equal(w_index(&w)->capacity, 256);
	assert_int_equal(names_with_home(&w, 256, 200, "wrap", 100, wrap), 100);
	for (unsigned i = 0; i < 100; i++) {
		name_of(name, sizeof(name), "wrap", wrap[i]);
		assert_int_equal(put(&w, name, 1), 0);
	}
	assert_int_equal(w_index(&w)->capacity, 256); /* 100 < 192: no rebuild */
	ws = w_sum(&w);
	assert_int_equal(ws.n, 100);
	assert_int_equal(ws.displaced, 99);
	assert_true(pr_slot_live(w_index(&w)->slot[0].word));   /* it did wrap */
	assert_true(pr_slot_live(w_index(&w)->slot[43].word));
	assert_false(pr_slot_live(w_index(&w)->slot[44].word));
	/* Each exactly once. */
	{
		struct seen s2 = { .prefix = "wrap", .n = wrap[99] + 1 };

		s2.count = calloc(s2.n, sizeof(*s2.count));
		assert_non_null(s2.count);
		assert_int_equal(procreg_foreach(r, seen_cb, &s2), 0);
		assert_int_equal(s2.bad, 0);
		assert_int_equal(s2.total, 100);
		for (unsigned i = 0; i < 100; i++)
			assert_int_equal(s2.count[wrap[i]], 1);
		free(s2.count);
	}
	for (unsigned i = 0; i < 100; i++) {
		name_of(name, sizeof(name), "wrap", wrap[i]);
		assert_int_equal(procreg_lookup(r, name, NULL), 0);
	}
	/* Remove them one by one: the walk follows. */
	for (unsigned i = 0; i < 100; i++) {
		uint64_t n = 0;

		assert_int_equal(procreg_foreach(r, count_cb, &n), 0);
		assert_int_equal(n, 100 - i);
		name_of(name, sizeof(name), "wrap", wrap[i]);
		assert_int_equal(del(&w, name), 0);
	}
	drain(&w);

	/* A small cluster at the very end, wrapping by one slot. */
	assert_int_equal(names_with_home(&w, 256, 255, "end", 3, cl), 3);
	for (unsigned i = 0; i < 3; i++) {
		uint64_t n = 0;

		name_of(name, sizeof(name), "end", cl[i]);
		assert_int_equal(put(&w, name, 1), 0);
		assert_int_equal(procreg_foreach(r, count_cb, &n), 0);
		assert_int_equal(n, i + 1);
	}
	for (unsigned i = 0; i < 3; i++) {
		name_of(name, sizeof(name), "end", cl[i]);
		assert_int_equal(del(&w, name), 0);
	}

	/* Many names: every one exactly once, and nothing else. */
	for (unsigned i = 0; i < 5000; i++) {
		name_of(name, sizeof(name), "x", i);
		assert_int_equal(put(&w, name, 1), 0);
		if (i == 0 || i == 40 || i == 190 || i == 1000) {
			drain(&w);
			expect_each_once(r, "x", i + 1, i + 1);
		}
	}
	drain(&w);
	expect_each_once(r, "x", 5000, 5000);

	/* A callback's non-zero return stops the walk and is returned. */
	s.n = 5000;
	s.count = calloc(5000, sizeof(*s.count));
	assert_non_null(s.count);
	s.stop_after = 10;
	s.stop_ret = 7;
	assert_int_equal(procreg_foreach(r, seen_cb, &s), 7);
	assert_int_equal(s.total, 10);
	s.total = 0;
	s.stop_after = 150; /* past the first chunk */
	s.stop_ret = -42;
	assert_int_equal(procreg_foreach(r, seen_cb, &s), -42);
	assert_int_equal(s.total, 150);
	free(s.count);

	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

#define ISTABLE 1000

static int walk_reader(void *p)
{
	struct reader_arg *a = p;
	struct shared *sh = a->sh;
	struct seen s = { .prefix = "stable", .n = ISTABLE };
	procreg_t *r;
	int ret = 0;

	child_signals();
	r = r_open(a->dir);
	if (!r) {
		kid_fail(sh, a->idx, "open: %s %d", "", errno);
		return 2;
	}
	s.count = calloc(ISTABLE, sizeof(*s.count));
	if (!s.count)
		return 3;
	sh->page_fd[a->idx] = th_reader_page(r);
	__atomic_add_fetch(&sh->started, 1, __ATOMIC_ACQ_REL);
	for (;;) {
		int last = __atomic_load_n(&sh->done, __ATOMIC_ACQUIRE), rc;

		memset(s.count, 0, ISTABLE * sizeof(*s.count));
		s.total = s.bad = 0;
		rc = procreg_foreach(r, seen_cb, &s);
		if (rc) {
			kid_fail(sh, a->idx, "foreach%s: %d", "", rc);
			ret = 1;
		}
		if (s.bad) {
			kid_fail(sh, a->idx, "foreach%s: %d inconsistent entries", "", (int)s.bad);
			ret = 1;
		}
		for (unsigned i = 0; i < ISTABLE; i++) {
			if (s.count[i] != 1) {
				char nm[64];

				name_of(nm, sizeof(nm), "stable", i);
				kid_fail(sh, a->idx, "%s seen %d times", nm, (int)s.count[i]);
				ret = 1;
			}
		}
		__atomic_add_fetch(&sh->passes[a->idx], 1, __ATOMIC_ACQ_REL);
		if (last || ret)
			break;
	}
	free(s.count);
	procreg_close(r);
	return ret;
}

static void test_foreach_while_writing(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	struct shared *sh = shared_new();
	struct reader_arg args[2];
	struct kid k[2];
	uint64_t cap0, rehash0;

	(void)state;
	w_open_at(&w, dir, 128 * MB);
	for (unsigned i = 0; i < ISTABLE; i++) {
		name_of(name, sizeof(name), "stable", i);
		assert_int_equal(put(&w, name, 3), 0);
	}
	drain(&w);
	cap0 = w_index(&w)->capacity;
	rehash0 = w.map.hdr->rehashes;
	for (int i = 0; i < 2; i++)
		args[i] = (struct reader_arg){ .dir = dir, .sh = sh, .idx = i, .stable_ver = 3 };
	start_kids(&w, sh, k, 2, walk_reader, args);
	/* Phases short enough that walks overlap every rebuild. */
	churn_writer(&w, 60000, 1500, ISTABLE, 3, sh, k, 2);
	finish_kids(sh, k, 2);
	for (int i = 0; i < 2; i++)
		assert_true(sh->passes[i] >= 40);
	assert_true(w_index(&w)->capacity >= 8 * cap0);
	assert_true(w.map.hdr->rehashes - rehash0 >= 4);

	munmap(sh, sizeof(*sh));
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- recovery --------------------------------------------------------- */

static void test_recovery(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	struct pr_record t = { .kind = PR_KIND_NAME };
	TH_ENTRY(e);
	PROCREG_OPTS(procreg_stats, st);
	uint64_t off, top_before, tops[40], rehash_at_warm = 0;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 32 * MB);
	for (unsigned i = 0; i < 3000; i++) {
		name_of(name, sizeof(name), "rec", i);
		assert_int_equal(put(&w, name, 1), 0);
	}
	drain(&w);
	for (unsigned i = 0; i < 500; i++) {
		name_of(name, sizeof(name), "rec", i);
		assert_int_equal(put(&w, name, 2), 1);
	}
	for (unsigned i = 500; i < 1000; i++) {
		name_of(name, sizeof(name), "rec", i);
		assert_int_equal(del(&w, name), 0);
	}
	/* A request the crash cut short: a record filled, never published. */
	t.name_len = 5;
	t.meta_len = 3;
	assert_int_equal(procreg__w_new_record(&w, &t, "ghost", "boo", &off), 0);
	/* And retired blocks never reclaimed: the crash came first. */
	assert_true(w.retired.n > 0);
	top_before = w.map.hdr->arena_top;

	/* A reader mapped before the crash keeps reading after it. */
	r = r_open(dir);
	assert_non_null(r);
	procreg__writer_close(&w);
	name_of(name, sizeof(name), "rec", 2999);
	assert_int_equal(procreg_lookup(r, name, &e), 0);
	assert_true(entry_ok(&e, name, 1));

	w_open_at(&w, dir, 32 * MB);
	assert_true(w.attached);
	assert_int_equal(procreg__w_recover(&w), 0);
	assert_int_equal(w.map.hdr->names.live, 2500);
	assert_int_equal(w.map.hdr->names.live, 2500);
	assert_int_equal(w.map.hdr->registrations, 3500);
	assert_int_equal(w.map.hdr->unregistrations, 500);
	assert_int_equal(w.map.hdr->arena_top, top_before);
	for (unsigned i = 0; i < 3000; i++) {
		name_of(name, sizeof(name), "rec", i);
		if (i >= 500 && i < 1000) {
			assert_int_equal(procreg_lookup(r, name, &e), -ENOENT);
		} else {
			assert_int_equal(procreg_lookup(r, name, &e), 0);
			assert_true(entry_ok(&e, name, i < 500 ? 2 : 1));
		}
	}
	assert_int_equal(procreg_lookup(r, "ghost", &e), -ENOENT);
	/* Once the grace period passed, everything unreachable (old
	 * records, old indexes, the ghost) is free again. */
	drain(&w);
	assert_int_equal(w.map.hdr->arena_used, w_sum(&w).bytes);
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, 2500);

	/* The writer carries on. */
	for (unsigned i = 0; i < 100; i++) {
		name_of(name, sizeof(name), "new", i);
		assert_int_equal(put(&w, name, 1), 0);
		assert_int_equal(procreg_lookup(r, name, &e), 0);
		assert_true(entry_ok(&e, name, 1));
	}
	name_of(name, sizeof(name), "rec", 0);
	assert_int_equal(put(&w, name, 3), 1);
	name_of(name, sizeof(name), "rec", 1000);
	assert_int_equal(del(&w, name), 0);
	name_of(name, sizeof(name), "rec", 500);
	assert_int_equal(put(&w, name, 4), 0);
	assert_int_equal(w.map.hdr->names.live, 2600);

	/* Steady churn after the recovery, as a daemon sees it: 1400 extra
	 * names come and go, a new one registered for each one removed, all
	 * their records of one size; removals favour names that leave a
	 * tombstone, so the index keeps being rebuilt at one capacity. Freed
	 * space is reused, records and index blocks alike, so after a
	 * warm-up the arena's high-water mark stays put. */
	{
		enum { W = 1400, U = 8000, CYCLES = 40, WARM = 9 };
		unsigned *ids = calloc(W, sizeof(*ids)), next = 0, n = 0;
		bool *present = calloc(U, sizeof(*present));
		uint64_t seed = 77, cap_at_warm = 0;
		char meta[32];

		assert_non_null(ids);
		assert_non_null(present);
		for (unsigned c = 0; c < CYCLES; c++) {
			for (unsigned step = 0; step < 1000; step++) {
				unsigned start, pick, id;

				while (n < W) {
					while (present[next % U])
						next++;
					id = next++ % U;
					name_of(name, sizeof(name), "cyc", id);
					snprintf(meta, sizeof(meta), "cyc-meta-%06u", id);
					assert_int_equal(put_raw(&w, name, 1, 2, 3, 0, meta, 16), 0);
					present[id] = true;
					ids[n++] = id;
				}
				start = pick = (unsigned)(th_xorshift(&seed) % n);
				for (unsigned t = 0; t < n; t++) {
					unsigned k = (start + t) % n;

					name_of(name, sizeof(name), "cyc", ids[k]);
					if (leaves_tomb(&w, name)) {
						pick = k;
						break;
					}
				}
				name_of(name, sizeof(name), "cyc", ids[pick]);
				assert_int_equal(del(&w, name), 0);
				present[ids[pick]] = false;
				ids[pick] = ids[--n];
				if (step % 64 == 0)
					procreg__w_reclaim(&w);
			}
			drain(&w);
			tops[c] = w.map.hdr->arena_top;
			if (c == WARM) {
				rehash_at_warm = w.map.hdr->rehashes;
				cap_at_warm = w_index(&w)->capacity;
			}
		}
		print_message("after recovery: %llu rebuilds at capacity %llu; arena_top %llu, %llu after warm-up, %llu at the end\n",
			      (unsigned long long)(w.map.hdr->rehashes - rehash_at_warm),
			      (unsigned long long)w_index(&w)->capacity, (unsigned long long)tops[0],
			      (unsigned long long)tops[WARM], (unsigned long long)tops[CYCLES - 1]);
		/* The churn did rebuild the index, at one capacity, several
		 * times... */
		assert_int_equal(w_index(&w)->capacity, cap_at_warm);
		assert_true(w.map.hdr->rehashes - rehash_at_warm >= 3);
		/* ...and each rebuild reused a freed index block: no growth
		 * beyond what one rebuild in flight may take. */
		assert_true(tops[CYCLES - 1] - tops[WARM] <= index_bytes(w_index(&w)->capacity));
		for (unsigned k = 0; k < n; k++) {
			name_of(name, sizeof(name), "cyc", ids[k]);
			assert_int_equal(del(&w, name), 0);
		}
		drain(&w);
		free(ids);
		free(present);
	}
	assert_int_equal(w.map.hdr->arena_used, w_sum(&w).bytes);
	assert_int_equal(w.map.hdr->names.live, 2600);
	for (unsigned i = 1; i < 3000; i++) {
		name_of(name, sizeof(name), "rec", i);
		if (i > 500 && i <= 1000) {
			assert_int_equal(procreg_lookup(r, name, &e), -ENOENT);
		} else {
			assert_int_equal(procreg_lookup(r, name, &e), 0);
			assert_true(entry_ok(&e, name, i < 500 ? 2 : i == 500 ? 4 : 1));
		}
	}

	/* A second crash and recovery, straight after the first. */
	procreg__writer_close(&w);
	w_open_at(&w, dir, 32 * MB);
	assert_true(w.attached);
	assert_int_equal(procreg__w_recover(&w), 0);
	assert_int_equal(w.map.hdr->names.live, 2600);
	drain(&w);
	assert_int_equal(w.map.hdr->arena_used, w_sum(&w).bytes);

	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- damaged and foreign files ---------------------------------------- */

#define DNAMES 3000

struct damage_arg {
	const char *src_table;
	const char *dir2;
	struct shared *sh;
};

static void put_file(const char *path, const void *b, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t done = 0;

	if (fd < 0)
		_exit(20);
	while (done < len) {
		ssize_t n = write(fd, (const uint8_t *)b + done, len - done);

		if (n <= 0)
			_exit(21);
		done += (size_t)n;
	}
	close(fd);
}

struct dwalk {
	uint64_t n;
};

static int dwalk_cb(const struct procreg_entry *e, void *arg)
{
	struct dwalk *d = arg;

	/* A copied-out entry is always a C string of legal length. */
	if (strnlen(e->name, sizeof(e->name)) > PROCREG_NAME_MAX || e->meta_len > PROCREG_META_MAX)
		return -1000;
	d->n++;
	return 0;
}

/* In a child: damage copies of a valid table in many ways and read them.
 * Misses and errors are allowed; crashes and hangs are not. Where only
 * some records are damaged, every other name must still be found. */
static int damage_child(void *p)
{
	struct damage_arg *a = p;
	struct shared *sh = a->sh;
	size_t tlen;
	uint8_t *orig;
	char tpath[PR_PATH_MAX], name[64];
	uint64_t seed = 0xbadc0ffee0ddf00dull;
	struct pr_paths pp;

	child_signals();
	alarm(240); /* a hang becomes a failure, not a stuck test */
	{
		int fd = open(a->src_table, O_RDONLY);
		struct stat st;

		if (fd < 0 || fstat(fd, &st))
			return 10;
		tlen = (size_t)st.st_size;
		orig = malloc(tlen);
		if (!orig || pread(fd, orig, tlen, 0) != (ssize_t)tlen)
			return 11;
		close(fd);
	}
	if (procreg__paths(&pp, SCOPE, a->dir2, NULL))
		return 14;
	snprintf(tpath, sizeof(tpath), "%s", pp.table);

	for (int it = 0; it < 360; it++) {
		int mode = it % 6;
		uint8_t *base;
		struct pr_table_hdr *h;
		struct pr_index *ix;
		uint64_t cap, ioff;
		bool damaged_rec[DNAMES] = { false };
		unsigned moved_rec = ~0u;
		procreg_t *r;
		TH_ENTRY(e);
		PROCREG_OPTS(procreg_stats, st);
		struct dwalk dw = { 0 };
		int fd, rc;

		put_file(tpath, orig, tlen);
		fd = open(tpath, O_RDWR);
		if (fd < 0)
			return 15;
		base = mmap(NULL, tlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (base == MAP_FAILED)
			return 16;
		h = (struct pr_table_hdr *)base;
		ioff = h->names.index_off;
		ix = (struct pr_index *)(base + ioff);
		cap = ix->capacity;

		if (mode == 0 || mode == 5) {
			/* Slot words: random, pointing anywhere in (or past) the
			 * file, pointing at the wrong place with a right tag,
			 * empty, tombstone; and keys: random, or a short
			 * name's with a bit flipped (another name's, maybe). */
			int n = 1 + (int)(th_xorshift(&seed) % 200);

			for (int k = 0; k < n; k++) {
				uint64_t s = th_xorshift(&seed) % cap, x = th_xorshift(&seed);
				uint64_t wd = ix->slot[s].word;

				if ((x >> 40) % 3 == 0)
					ix->slot[s].key = (x >> 42) & 1 ? th_xorshift(&seed)
									: ix->slot[s].key ^ 1ull << (x >> 50) % 64;

				switch (x % 6) {
				case 0: wd = th_xorshift(&seed); break;
				case 1: wd = (wd & ~0xffffffffull) | ((th_xorshift(&seed) % (tlen / 16 + 64))); break;
				case 2: wd = (wd & ~0xffffffffull) | ((tlen / 16) - 1 - (x >> 8) % 4); break;
				case 3: wd = wd + 1 + (x >> 8) % 5; break;
				case 4: wd = (x >> 8) & 1; break;
				default: wd = (wd & ~0xffffffffull) | ((x >> 8) % (PR_HDR_SIZE / 16)); break;
				}
				ix->slot[s].word = wd;
			}
		}
		if (mode == 1 || mode == 5) {
			/* Record lengths. */
			int n = 1 + (int)(th_xorshift(&seed) % 300);

			for (int k = 0; k < n; k++) {
				unsigned i = (unsigned)(th_xorshift(&seed) % DNAMES);
				uint64_t hh, x = th_xorshift(&seed);
				struct pr_record *rec = NULL;

				name_of(name, sizeof(name), "d", i);
				hh = pr_hash(name, strlen(name), h->hash_seed);
				{
					struct pr_map m = { .base = base, .size = tlen, .hdr = h };

					(void)hh;
					rec = (struct pr_record *)procreg__find_name(&m, name, strlen(name));
				}
				if (!rec)
					continue;
				damaged_rec[i] = true;
				switch (x % 5) {
				case 0: rec->name_len = (uint16_t)(x >> 8); break;
				case 1: rec->meta_len = (uint16_t)(x >> 8); break;
				case 2: rec->name_len = 0; break;
				case 3: rec->meta_len = PROCREG_META_MAX; rec->name_len = PROCREG_NAME_MAX; break;
				default: rec->name_len = (uint16_t)(x >> 8); rec->meta_len = (uint16_t)(x >> 24); break;
				}
			}
		}
		if (mode == 1 && (it / 6) % 2) {
			/* The same record moved to the last bytes of the file,
			 * its slot pointed there: still found, whole. Lookups
			 * bound most records with one compare that a record
			 * this near the end fails; it is then checked by its
			 * lengths, and must not be lost to that. */
			unsigned i = 2 + (unsigned)(th_xorshift(&seed) % (DNAMES / 10 - 1)) * 10;
			uint64_t pos, fo;
			struct pr_map m = { .base = base, .size = tlen, .hdr = h };
			const struct pr_record *rec;
			struct pr_key key;
			size_t nl;

			name_of(name, sizeof(name), "d", i);
			nl = strlen(name);
			pr_key_name(&key, PR_KIND_NAME, name, nl, h->hash_seed);
			struct pr_ixv iv = { ix->slot, ix->capacity, ix->shift };

			rec = procreg__probe(&m, &iv, &key, &pos);
			if (rec && !damaged_rec[i]) {
				fo = tlen - procreg__record_size(rec);
				memmove(base + fo, rec, procreg__record_size(rec));
				ix->slot[pos].word = pr_slot_word(key.skey, fo);
				moved_rec = i;
			}
		} else if (mode == 1) {
			/* A record whose lengths run past the end of the file,
			 * reachable from a real name's slot: copying it out
			 * unchecked would read beyond the mapping. */
			unsigned i = 1 + (unsigned)(th_xorshift(&seed) % (DNAMES / 10 - 1)) * 10;
			uint64_t pos, fo = tlen - 96;
			struct pr_map m = { .base = base, .size = tlen, .hdr = h };
			struct pr_record *fake = (struct pr_record *)(base + fo);
			size_t nl;

			name_of(name, sizeof(name), "d", i);
			nl = strlen(name);
			struct pr_key key;

			pr_key_name(&key, PR_KIND_NAME, name, nl, h->hash_seed);
			struct pr_ixv iv = { ix->slot, ix->capacity, ix->shift };

			if (procreg__probe(&m, &iv, &key, &pos)) {
				memset(fake, 0, 96);
				fake->kind = PR_KIND_NAME;
				fake->name_len = (uint16_t)nl;
				fake->meta_len = PROCREG_META_MAX;
				memcpy(fake->data, name, nl);
				ix->slot[pos].word = pr_slot_word(key.skey, fo);
				damaged_rec[i] = true;
			}
		}
		if (mode == 2 || mode == 5) {
			/* The root of every lookup. */
			uint64_t x = th_xorshift(&seed);

			switch (x % 8) {
			case 0: h->names.index_off = th_xorshift(&seed); break;
			case 1: h->names.index_off = (x >> 8) % tlen; break;             /* misaligned too */
			case 2: h->names.index_off = tlen - 8; break;
			case 3: h->names.index_off = tlen; break;
			case 4: h->names.index_off = 0; break;
			case 5: h->names.index_off = ioff + 1 + (x >> 8) % 15; break;
			case 6: h->names.index_off = PR_HDR_SIZE + 16 * ((x >> 8) % ((tlen - PR_HDR_SIZE) / 16)); break;
			default: h->names.index_off = ioff + 8; break;
			}
		}
		if (mode == 3 || mode == 5) {
			/* The index block's own header. */
			uint64_t x = th_xorshift(&seed);

			switch (x % 6) {
			case 0: ix->capacity = th_xorshift(&seed); break;
			case 1: ix->capacity = cap * 2; ix->shift--; break;       /* consistent, too big */
			case 2: ix->capacity = 1ull << 40; ix->shift = 24; break;
			case 3: ix->shift = (uint32_t)(x >> 8); break;
			case 4: ix->capacity = cap / 2; ix->shift++; break;       /* consistent, smaller */
			default: ix->capacity = 0; break;
			}
		}
		if (mode == 4 || mode == 5) {
			/* Bytes anywhere in the arena. */
			int n = 1 + (int)(th_xorshift(&seed) % 2000);

			for (int k = 0; k < n; k++) {
				uint64_t o = PR_HDR_SIZE + th_xorshift(&seed) % (tlen - PR_HDR_SIZE);

				base[o] = (uint8_t)th_xorshift(&seed);
			}
		}
		munmap(base, tlen);

		r = r_open(a->dir2);
		if (!r) {
			kid_fail(sh, 0, "open damaged copy%s: errno %d", "", errno);
			return 1;
		}
		for (unsigned i = 0; i < DNAMES + 200; i++) {
			name_of(name, sizeof(name), "d", i);
			th_entry_scribble(&e, 0);
			rc = procreg_lookup(r, name, &e);
			if (rc != 0 && rc != -ENOENT) {
				kid_fail(sh, 0, "lookup %s: %d", name, rc);
				return 1;
			}
			/* A hit is the name asked for, whatever else happened. */
			if (rc == 0 && (strcmp(e.name, name) || e.meta_len > PROCREG_META_MAX)) {
				kid_fail(sh, 0, "lookup %s: foreign entry %d", name, mode);
				return 1;
			}
			if (mode == 1 && i < DNAMES && (i % 10) && !damaged_rec[i] &&
			    (rc != 0 || !entry_ok(&e, name, 1))) {
				kid_fail(sh, 0, "undamaged %s lost: %d", name, rc);
				return 1;
			}
			if (i == moved_rec && (rc != 0 || !entry_ok(&e, name, 1))) {
				kid_fail(sh, 0, "%s moved to the file's end lost: %d", name, rc);
				return 1;
			}
			sh->lookups[rc == 0 ? 0 : 1]++;
			if (i >= DNAMES && rc == 0) {
				kid_fail(sh, 0, "absent %s found %d", name, rc);
				return 1;
			}
			/* A presence test reads the slot alone for these names
			 * (8 bytes). Where slots were not damaged (modes 1 to
			 * 3), a name whose bytes the file never held is not
			 * found; where only records were (mode 1), every
			 * registered name is, damaged record or not, and no
			 * removed one, though its key stays in a tombstone. */
			rc = procreg_lookup(r, name, NULL);
			if ((rc != 0 && rc != -ENOENT) ||
			    (mode >= 1 && mode <= 3 && i >= DNAMES && rc == 0) ||
			    (mode == 1 && i < DNAMES && (rc == 0) != (i % 10 != 0))) {
				char what[sizeof(name) + 16];

				snprintf(what, sizeof(what), "%s, mode %d", name, mode);
				kid_fail(sh, 0, "presence of %s: %d", what, rc);
				return 1;
			}
		}
		rc = procreg_foreach(r, dwalk_cb, &dw);
		if (rc != 0 || dw.n > 4 * (tlen / 8)) {
			kid_fail(sh, 0, "foreach: %s%d", "", rc);
			return 1;
		}
		if (procreg_stats(r, &st) != 0) {
			kid_fail(sh, 0, "stats%s %d", "", 0);
			return 1;
		}
		procreg_close(r);

		/* The writer attaching to the damaged copy must not crash
		 * either: recovery refuses it or makes it usable. */
		if ((it / 6) % 2 == 0) { /* every mode, every other round */
			struct pr_writer w;
			struct pr_writer_opts o = { .max_size = tlen, .readers = 64, .mode = 0600 };
			const char *why = NULL;

			rc = procreg__writer_open(&w, &pp, &o, &why);
			if (rc) {
				kid_fail(sh, 0, "writer_open on damaged copy: %s %d", why ? why : "", rc);
				return 1;
			}
			rc = procreg__w_recover(&w);
			sh->lookups[rc == 0 ? 2 : 3]++;
			if (rc != 0 && rc != -EUCLEAN) {
				kid_fail(sh, 0, "recover: %s%d", "", rc);
				return 1;
			}
			if (rc == 0) {
				uint8_t meta[PROCREG_META_MAX];
				size_t ml = meta_for("after-damage", 1, meta);
				struct owner ow;

				owner_of("after-damage", &ow);
				rc = put_raw(&w, "after-damage", ow.pid, ow.start, ow.uid, ow.node, meta, ml);
				if (rc < 0 && rc != -ENOSPC) {
					kid_fail(sh, 0, "insert after recovery: %s%d", "", rc);
					return 1;
				}
				if (rc >= 0) {
					r = r_open(a->dir2);
					if (!r || procreg_lookup(r, "after-damage", &e) != 0 ||
					    !entry_ok(&e, "after-damage", 1)) {
						kid_fail(sh, 0, "insert after recovery%s not found %d", "", mode);
						return 1;
					}
					procreg_close(r);
				}
			}
			procreg__writer_close(&w);
		}
		sh->passes[0]++;
	}
	free(orig);
	return 0;
}

static void test_damaged_table(void **state)
{
	char *dir = th_mkdtemp(), *dir2 = th_mkdtemp(), name[64];
	struct pr_writer w;
	struct shared *sh = shared_new();
	struct damage_arg a;
	pid_t pid;
	int st;

	(void)state;
	w_open_at(&w, dir, 2 * MB);
	for (unsigned i = 0; i < DNAMES; i++) {
		name_of(name, sizeof(name), "d", i);
		assert_int_equal(put(&w, name, 1), 0);
	}
	/* Tombstones and retired blocks in the file, too. */
	for (unsigned i = 0; i < DNAMES; i += 10) {
		name_of(name, sizeof(name), "d", i);
		assert_int_equal(del(&w, name), 0);
	}
	drain(&w);
	procreg__writer_close(&w);

	a.src_table = NULL;
	{
		struct pr_paths p;

		assert_int_equal(procreg__paths(&p, SCOPE, dir, NULL), 0);
		a.src_table = strdup(p.table);
	}
	a.dir2 = dir2;
	a.sh = sh;
	pid = th_fork(damage_child, &a);
	assert_true(pid > 0);
	st = th_wait(pid);
	if (st)
		print_error("damage child: status %d after %llu rounds: %s\n", st,
			    (unsigned long long)sh->passes[0], sh->why[0]);
	assert_int_equal(st, 0);
	assert_int_equal(sh->passes[0], 360);
	print_message("damaged copies: %llu hits, %llu misses; recovery %llu done, %llu refused\n",
		      (unsigned long long)sh->lookups[0], (unsigned long long)sh->lookups[1],
		      (unsigned long long)sh->lookups[2], (unsigned long long)sh->lookups[3]);
	/* Damage was done (misses) and much survived it (hits); recovery
	 * both refused some copies and repaired others. */
	assert_true(sh->lookups[0] > 0 && sh->lookups[1] > 0);
	assert_true(sh->lookups[2] > 0 && sh->lookups[3] > 0);

	free((void *)a.src_table);
	munmap(sh, sizeof(*sh));
	th_rmrf(dir);
	th_rmrf(dir2);
	free(dir);
	free(dir2);
}

/* Open DIR2's copy, expecting failure with ERR (errno). */
static void expect_open_fails(const char *dir, int err)
{
	procreg_t *r;

	errno = 0;
	r = r_open(dir);
	if (r)
		procreg_close(r);
	assert_null(r);
	assert_int_equal(errno, err);
}

static void patch(const char *path, size_t off, const void *b, size_t len)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, b, len, (off_t)off), (ssize_t)len);
	close(fd);
}

static void test_bad_header(void **state)
{
	char *dir = th_mkdtemp(), *dir2 = th_mkdtemp();
	struct pr_writer w;
	struct pr_paths p, p2;
	struct pr_table_hdr h;
	struct pr_writer_opts o = { .max_size = 2 * MB, .readers = 64, .mode = 0600 };
	const char *why;
	size_t len;
	void *orig;
	procreg_t *r;
	uint64_t v;
	uint32_t v32;

	(void)state;
	w_open_at(&w, dir, 2 * MB);
	assert_int_equal(put(&w, "one", 1), 0);
	procreg__writer_close(&w);
	assert_int_equal(procreg__paths(&p, SCOPE, dir, NULL), 0);
	assert_int_equal(procreg__paths(&p2, SCOPE, dir2, NULL), 0);
	orig = read_whole(p.table, &len);
	memcpy(&h, orig, sizeof(h));
	free(orig);

	/* No table at all. */
	expect_open_fails(dir2, ENOENT);

	/* The unmodified copy opens and reads (the copying is sound). */
	th_copy_file(p.table, p2.table);
	r = r_open(dir2);
	assert_non_null(r);
	assert_int_equal(procreg_lookup(r, "one", NULL), 0);
	procreg_close(r);

	/* Bad magic: readers and the writer both refuse it. */
	v = h.magic ^ 0x100;
	patch(p2.table, offsetof(struct pr_table_hdr, magic), &v, 8);
	expect_open_fails(dir2, EPROTO);
	why = NULL;
	assert_int_equal(procreg__writer_open(&w, &p2, &o, &why), -EPROTO);
	assert_non_null(why);
	procreg__writer_close(&w);

	/* Another layout version. */
	th_copy_file(p.table, p2.table);
	v32 = h.layout_version + 1;
	patch(p2.table, offsetof(struct pr_table_hdr, layout_version), &v32, 4);
	expect_open_fails(dir2, EPROTO);

	/* Other structure sizes. */
	th_copy_file(p.table, p2.table);
	v = h.size_desc ^ 1;
	patch(p2.table, offsetof(struct pr_table_hdr, size_desc), &v, 8);
	expect_open_fails(dir2, EPROTO);

	/* A header that disagrees with the file's size. */
	th_copy_file(p.table, p2.table);
	v = h.file_size + 4096;
	patch(p2.table, offsetof(struct pr_table_hdr, file_size), &v, 8);
	expect_open_fails(dir2, EPROTO);
	th_copy_file(p.table, p2.table);
	v = h.file_size;
	patch(p2.table, offsetof(struct pr_table_hdr, arena_off), &v, 8);
	expect_open_fails(dir2, EPROTO);

	/* A file cut short, grown, tiny, empty. */
	th_copy_file(p.table, p2.table);
	assert_int_equal(truncate(p2.table, (off_t)(len - 4096)), 0);
	expect_open_fails(dir2, EPROTO);
	th_copy_file(p.table, p2.table);
	assert_int_equal(truncate(p2.table, (off_t)(len + 4096)), 0);
	expect_open_fails(dir2, EPROTO);
	assert_int_equal(truncate(p2.table, 100), 0);
	expect_open_fails(dir2, EPROTO);
	assert_int_equal(truncate(p2.table, 0), 0);
	expect_open_fails(dir2, EPROTO);

	/* A sound table, but not one to trust: another user's (a user that
	 * is neither root nor us), writable by others, reached through a
	 * symbolic link (dangling, or to the real table). Readers and the
	 * writer refuse each. */
	th_copy_file(p.table, p2.table);
	assert_int_equal(chown(p2.table, 4242, 4242), 0);
	expect_open_fails(dir2, EPERM);
	why = NULL;
	assert_int_equal(procreg__writer_open(&w, &p2, &o, &why), -EPERM);
	assert_non_null(strstr(why, "another user"));
	procreg__writer_close(&w);
	/* ...unless the caller says it trusts that user. */
	{
		PROCREG_OPTS(procreg_opts, to, .dir = dir2, .scope = SCOPE, .trust_uid = 4242);

		r = procreg_open(&to);
		assert_non_null(r);
		assert_int_equal(procreg_lookup(r, "one", NULL), 0);
		procreg_close(r);
		assert_int_equal(setenv("PROCREG_TRUST_UID", "4242", 1), 0);
		r = r_open(dir2);
		unsetenv("PROCREG_TRUST_UID");
		assert_non_null(r);
		procreg_close(r);
	}
	/* ...or it is the daemon's system user, by PROCREG_DAEMON_USER's
	 * name; no other name (none, root, a user that does not exist) makes
	 * another user's table trusted. */
	{
		struct passwd *pw = getpwnam("nobody");
		static const char *const untrusting[] = { "", "root", "prt-no-such-user", "4242" };

		assert_non_null(pw);
		assert_int_equal(chown(p2.table, pw->pw_uid, pw->pw_gid), 0);
		assert_int_equal(setenv("PROCREG_DAEMON_USER", "nobody", 1), 0);
		assert_true(procreg__trusted_owner(pw->pw_uid, 0));
		r = r_open(dir2);
		assert_non_null(r);
		procreg_close(r);
		for (size_t i = 0; i < sizeof(untrusting) / sizeof(untrusting[0]); i++) {
			assert_int_equal(setenv("PROCREG_DAEMON_USER", untrusting[i], 1), 0);
			assert_false(procreg__trusted_owner(pw->pw_uid, 0));
			expect_open_fails(dir2, EPERM);
		}
		/* Root and ourselves, whatever it names. */
		assert_true(procreg__trusted_owner(0, 0));
		assert_true(procreg__trusted_owner(geteuid(), 0));
		unsetenv("PROCREG_DAEMON_USER");
		assert_int_equal(chown(p2.table, 0, 0), 0);
	}
	assert_int_equal(chown(p2.table, 0, 0), 0);
	assert_int_equal(chmod(p2.table, 0666), 0);
	expect_open_fails(dir2, EPERM);
	why = NULL;
	assert_int_equal(procreg__writer_open(&w, &p2, &o, &why), -EPERM);
	procreg__writer_close(&w);
	assert_int_equal(unlink(p2.table), 0);
	assert_int_equal(symlink(p.table, p2.table), 0);
	expect_open_fails(dir2, EPERM);
	why = NULL;
	assert_int_equal(procreg__writer_open(&w, &p2, &o, &why), -ELOOP);
	assert_non_null(strstr(why, "symbolic link"));
	procreg__writer_close(&w);
	assert_int_equal(unlink(p2.table), 0);
	assert_int_equal(symlink("/nonexistent/procreg-table", p2.table), 0);
	why = NULL;
	assert_int_equal(procreg__writer_open(&w, &p2, &o, &why), -ELOOP);
	procreg__writer_close(&w);
	assert_int_equal(unlink(p2.table), 0);

	/* Counters no daemon would write: memory freed by a grace period
	 * past the counter. Every read would be redone for ever: each gives
	 * up instead, and the writer repairs the counter when it attaches. */
	th_copy_file(p.table, p2.table);
	v = 1ull << 40;
	patch(p2.table, offsetof(struct pr_table_hdr, freed_gp), &v, 8);
	r = r_open(dir2);
	assert_non_null(r);
	assert_int_equal(procreg_lookup(r, "one", NULL), -ESTALE);
	assert_int_equal(procreg_foreach(r, count_cb, &(int){ 0 }), -ESTALE);
	why = NULL;
	assert_int_equal(procreg__writer_open(&w, &p2, &o, &why), 0);
	assert_true(w.map.hdr->gp >= 1ull << 40);
	assert_int_equal(procreg_lookup(r, "one", NULL), 0);
	procreg__writer_close(&w);
	procreg_close(r);

	/* And back to sound. */
	th_copy_file(p.table, p2.table);
	r = r_open(dir2);
	assert_non_null(r);
	procreg_close(r);

	th_rmrf(dir);
	th_rmrf(dir2);
	free(dir);
	free(dir2);
}

/* ---- a client cannot write the table ---------------------------------- */

struct ro_arg {
	const char *dir;
	size_t off;
};

static int ro_child(void *p)
{
	struct ro_arg *a = p;
	procreg_t *r;
	volatile uint8_t *b;

	child_signals();
	r = r_open(a->dir);
	if (!r)
		return 2;
	if (procreg_lookup(r, "mine", NULL) != 0)
		return 3;
	/* Nor can it make its mapping writable. */
	if (mprotect(r->map.base, r->map.size, PROT_READ | PROT_WRITE) == 0)
		return 4;
	b = (volatile uint8_t *)r->map.base;
	b[a->off] = (uint8_t)(b[a->off] ^ 0xff);
	return 5; /* the store went through */
}

static void test_readonly_mapping(void **state)
{
	char *dir = th_mkdtemp();
	struct pr_writer w;
	TH_ENTRY(e);
	struct ro_arg a = { .dir = dir };
	size_t offs[3];
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 2 * MB);
	assert_int_equal(put(&w, "mine", 1), 0);
	offs[0] = 0;                                   /* the magic */
	offs[1] = w.map.hdr->names.index_off + 16;           /* a slot word */
	offs[2] = w.map.hdr->arena_top - 16;           /* a record */
	for (int i = 0; i < 3; i++) {
		pid_t pid;

		a.off = offs[i];
		pid = th_fork(ro_child, &a);
		assert_true(pid > 0);
		assert_int_equal(th_wait(pid), 128 + SIGSEGV);
	}
	/* Nothing changed. */
	r = r_open(dir);
	assert_non_null(r);
	assert_int_equal(procreg_lookup(r, "mine", &e), 0);
	assert_true(entry_ok(&e, "mine", 1));
	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* A feed capacity so large that capacity * sizeof(struct pr_event) wraps
 * to 0 passed the ring's bounds check, and reading an event far ahead of
 * the ring's start crashed the reader (seen while writing
 * tests/fuzz/fuzz_table, whose seed feed-cap-wraps reproduces it).
 * The ring is refused now; lookups still work. */
/* ---- retire epochs ---------------------------------------------------- */

#define FILL_META 40

static void fill_record(struct pr_record *t, const char *name)
{
	memset(t, 0, sizeof(*t));
	t->kind = PR_KIND_NAME;
	t->pid = 77;
	t->start_time = 7;
	t->name_len = (uint16_t)strlen(name);
	t->meta_len = FILL_META;
}

/*
 * The daemon removes an entry and reads its record again in the same
 * batch (the event, the note to other nodes, the hand-over to the next
 * in line), while an allocation in between may find the arena full and
 * reclaim. What the batch under way retired must survive that: only what
 * earlier batches retired is freed. The arena is filled with records of
 * one size, so a reclaimed block would be the very next one handed out.
 */
static void test_reclaim_in_batch(void **state)
{
	char *dir = th_mkdtemp(), name[16];
	static const char meta[FILL_META] = "fill";
	uint8_t before[256], before2[256];
	struct pr_writer w;
	struct pr_record t;
	uint64_t x, z, off, pos, size;
	int n = 0, err;

	(void)state;
	w_open_at(&w, dir, 2 * MB);
	/* Names until the table takes no more (an index rebuild may be what
	 * fails first), then unpublished records of the same size until the
	 * arena is full for that size: nothing retired is left to reclaim. */
	for (;; n++) {
		snprintf(name, sizeof(name), "f%05d", n);
		err = put_raw(&w, name, 77, 7, 0, 0, meta, FILL_META);
		if (err == -ENOSPC && (w.retired.n || w.waiting.n)) {
			drain(&w);
			n--;
			continue;
		}
		if (err == -ENOSPC)
			break;
		assert_int_equal(err, 0);
	}
	assert_true(n > 1000);
	fill_record(&t, "g00000");
	while (procreg__w_new_record(&w, &t, "g00000", meta, &off) == 0)
		;
	drain(&w);
	size = PR_RECORD_SIZE(6, FILL_META);
	assert_true(size <= sizeof(before));

	/* Retired in this batch: not reclaimable, the arena is full. */
	procreg__w_batch_begin(&w);
	x = procreg__w_find_name(&w, "f00000", 6, &pos);
	assert_true(x != 0);
	memcpy(before, w.map.base + x, size);
	assert_int_equal(del(&w, "f00000"), 0);
	assert_int_equal(procreg__w_new_record(&w, &t, "g00000", meta, &off), -ENOSPC);
	assert_memory_equal(w.map.base + x, before, size);
	assert_string_equal(((const struct pr_record *)(w.map.base + x))->data, "f00000");
	procreg__w_batch_end(&w);

	/* The next batch retires another and allocates: the block of the
	 * earlier batch is reclaimed and reused, this batch's is not. */
	procreg__w_batch_begin(&w);
	z = procreg__w_find_name(&w, "f00001", 6, &pos);
	assert_true(z != 0);
	memcpy(before2, w.map.base + z, size);
	assert_int_equal(del(&w, "f00001"), 0);
	assert_int_equal(procreg__w_new_record(&w, &t, "g00000", meta, &off), 0);
	assert_true(off == x);
	assert_memory_equal(w.map.base + z, before2, size);
	assert_int_equal(procreg__w_new_record(&w, &t, "g00000", meta, &off), -ENOSPC);
	assert_memory_equal(w.map.base + z, before2, size);
	procreg__w_batch_end(&w);

	/* Once its batch is over, it goes the way of the rest. */
	drain(&w);
	assert_int_equal(procreg__w_new_record(&w, &t, "g00000", meta, &off), 0);
	assert_true(off == z);

	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

static void test_hostile_feed(void **state)
{
	char *dir = th_mkdtemp();
	struct pr_writer w;
	struct pr_paths p;
	PROCREG_OPTS(procreg_event, ev);
	uint64_t v, cursor;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 2 * MB);
	assert_int_equal(put(&w, "one", 1), 0);
	procreg__writer_close(&w);
	assert_int_equal(procreg__paths(&p, SCOPE, dir, NULL), 0);
	v = 1ull << 58;
	patch(p.table, offsetof(struct pr_table_hdr, feed_cap), &v, 8);
	v = 1ull << 40;
	patch(p.table, offsetof(struct pr_table_hdr, feed_head), &v, 8);
	r = r_open(dir);
	assert_non_null(r);
	assert_int_equal(procreg_lookup(r, "one", NULL), 0);
	cursor = procreg_feed_head(r) - 4;
	assert_int_equal(procreg_next_event(r, &cursor, &ev, 0), -EPROTO);
	cursor = 0;
	assert_int_equal(procreg_next_event(r, &cursor, &ev, 0), -EPROTO);
	procreg_close(r);
	th_rmrf(dir);
	free(dir);
}

/* ---- old index blocks hold records --------------------------------- */

/*
 * An index that grows leaves its old block free, and only a bigger index
 * would fit there if records were not carved from it: the file grew by
 * every new record while the old indexes (at 10^6 names, 16 MiB of them)
 * lay idle below the top. New records come from them first.
 */
static void test_records_reuse_old_indexes(void **state)
{
	char *dir = th_mkdtemp(), name[32];
	struct pr_writer w;
	uint64_t old_off[2] = { 0, 0 }, old_cap[2] = { 0, 0 }, top, free_large = 0, pos, off;
	int n = 0, k = 0, placed = 0;

	(void)state;
	w_open_at(&w, dir, 64 * MB);
	/* Names until the index has grown twice past 8192 slots: blocks of
	 * 8192 and 16384 slots retired. */
	while (k < 2) {
		uint64_t ioff = w.map.hdr->names.index_off, cap = w_index(&w)->capacity;

		snprintf(name, sizeof(name), "n%06d", n++);
		assert_int_equal(put(&w, name, 1), 0);
		if (w.map.hdr->names.index_off != ioff && cap >= 8192) {
			old_off[k] = ioff;
			old_cap[k++] = cap;
		}
	}
	drain(&w);
	top = w.map.hdr->arena_top;
	for (size_t i = 1; i < w.large.n; i += 2)
		free_large += w.large.v[i];
	assert_true(free_large >= index_bytes(old_cap[0]) + index_bytes(old_cap[1]));

	/* As many more as those blocks hold (the index does not grow: it
	 * has 32768 slots for 24576 names), but for the last few KiB of
	 * each, which go to the free list of their size. */
	free_large -= w.large.n / 2 * 4096;
	for (uint64_t used = 0; used + 2 * PR_RECORD_SIZE(7, 64) < free_large; n++) {
		snprintf(name, sizeof(name), "n%06d", n);
		assert_int_equal(put(&w, name, 1), 0);
		off = procreg__w_find_name(&w, name, strlen(name), &pos);
		used += procreg__record_size(procreg__record_at(&w.map, w_index(&w)->slot[pos].word));
		for (int i = 0; i < 2; i++)
			placed += off >= old_off[i] && off < old_off[i] + index_bytes(old_cap[i]);
	}
	assert_int_equal(w_index(&w)->capacity, 32768);
	assert_int_equal(w.map.hdr->arena_top, top);
	assert_true(placed > 0);
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "n%06d", i);
		assert_true(procreg__w_find_name(&w, name, strlen(name), &pos) != 0);
	}
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- removal where a probe found the entry ------------------------- */

/*
 * procreg__w_unpublish_at takes the slot a probe found, the daemon's way
 * of removing what it has just looked up without a second probe. The slot
 * is a hint: one that no longer holds the record (a rebuild moved it,
 * another name sits there, or it is out of the index) falls back to the
 * lookup, and the record named goes, never the one at the slot.
 */
/* The inline name scan against libc's strnlen: every length around the
 * limit, every alignment, the name's NUL on the last byte of a page whose
 * next page is unmapped (a load past that word would fault), and bytes
 * before the name and after its NUL that look like a NUL or not. */
static void test_name_len(void **state)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *two = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *end;

	(void)state;
	assert_true(two != MAP_FAILED);
	assert_int_equal(mprotect(two + pg, (size_t)pg, PROT_NONE), 0);
	end = (char *)two + pg; /* the first byte that faults */
	for (int fill = 0; fill < 2; fill++) {
		memset(two, fill ? 'x' : 0, (size_t)pg);
		for (size_t n = 0; n <= PROCREG_NAME_MAX + 3; n++) {
			for (size_t a = 0; a < 8; a++) {
				/* Ends at the page's end, moved back by A. */
				char *name = end - 1 - n - a;
				size_t want = n <= PROCREG_NAME_MAX ? n : PROCREG_NAME_MAX + 1, len = 0;

				memset(name - 8 < (char *)two ? (char *)two : name - 8, fill ? 0 : 'y',
				       name - 8 < (char *)two ? (size_t)(name - (char *)two) : 8);
				memset(name, 'n', n);
				name[n] = 0;
				memset(name + n + 1, fill ? 0 : 'z', a);
				assert_int_equal(pr_name_len(name), want);
				assert_int_equal(strnlen(name, PROCREG_NAME_MAX + 1), want);
				assert_int_equal(procreg__check_name(name, &len),
						 n == 0 ? -EINVAL : n > PROCREG_NAME_MAX ? -ENAMETOOLONG : 0);
				if (n && n <= PROCREG_NAME_MAX)
					assert_int_equal(len, n);
			}
		}
	}
	/* No NUL for a page: the scan stops at the limit. */
	memset(two, 'q', (size_t)pg);
	for (size_t a = 0; a < 8; a++)
		assert_int_equal(pr_name_len((char *)two + a), PROCREG_NAME_MAX + 1);
	assert_int_equal(procreg__check_name(NULL, &(size_t){ 0 }), -EINVAL);
	munmap(two, (size_t)pg * 2);
}

static void test_unpublish_at(void **state)
{
	char *dir = th_mkdtemp(), name[32];
	struct pr_writer w;
	struct pr_root *names;
	uint64_t pos, pos2, off, off2, cap;
	int n;

	(void)state;
	w_open_at(&w, dir, 16 * MB);
	names = &w.map.hdr->names;
	for (n = 0; n < 100; n++) {
		snprintf(name, sizeof(name), "u%04d", n);
		assert_int_equal(put(&w, name, 1), 0);
	}

	/* The slot found: removed there. */
	off = procreg__w_find_name(&w, "u0000", 5, &pos);
	assert_true(off != 0);
	assert_int_equal(procreg__w_unpublish_at(&w, off, names, pos), 0);
	assert_int_equal(procreg__w_find_name(&w, "u0000", 5, &pos), 0);
	assert_int_equal(names->live, 99);

	/* Another name's slot: u0001 goes, u0002 stays. */
	off = procreg__w_find_name(&w, "u0001", 5, &pos);
	off2 = procreg__w_find_name(&w, "u0002", 5, &pos2);
	assert_true(off && off2 && pos != pos2);
	assert_int_equal(procreg__w_unpublish_at(&w, off, names, pos2), 0);
	assert_int_equal(procreg__w_find_name(&w, "u0001", 5, &pos), 0);
	assert_int_equal(procreg__w_find_name(&w, "u0002", 5, &pos2), off2);

	/* Out of the index, and a slot across it. */
	cap = w_index(&w)->capacity;
	assert_int_equal(procreg__w_unpublish_at(&w, off2, names, cap + 5), 0);
	assert_int_equal(procreg__w_find_name(&w, "u0002", 5, &pos2), 0);
	off = procreg__w_find_name(&w, "u0003", 5, &pos);
	assert_true(off != 0);
	assert_int_equal(procreg__w_unpublish_at(&w, off, names, (pos + cap / 2) & (cap - 1)), 0);
	assert_int_equal(procreg__w_find_name(&w, "u0003", 5, &pos), 0);

	/* A position found before the index was rebuilt. */
	off = procreg__w_find_name(&w, "u0099", 5, &pos);
	assert_true(off != 0);
	for (; w_index(&w)->capacity == cap; n++) {
		snprintf(name, sizeof(name), "u%04d", n);
		assert_int_equal(put(&w, name, 1), 0);
	}
	assert_int_equal(procreg__w_unpublish_at(&w, off, names, pos), 0);
	assert_int_equal(procreg__w_find_name(&w, "u0099", 5, &pos), 0);

	/* Not published any more: -ENOENT, nothing else touched. */
	assert_int_equal(procreg__w_unpublish_at(&w, off, names, pos), -ENOENT);
	assert_int_equal(names->live, (uint64_t)n - 5);
	for (int i = 4; i < n; i++) {
		snprintf(name, sizeof(name), "u%04d", i);
		assert_int_equal(procreg__w_find_name(&w, name, strlen(name), &pos) != 0, i != 99);
	}
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* The name of length LEN (1..PR_INLINE_MAX + 1) and number K (< 26^LEN):
 * K in base 26, lowercase, LEN digits. */
static void short_name(char *buf, size_t len, unsigned k)
{
	for (size_t i = 0; i < len; i++, k /= 26)
		buf[len - 1 - i] = (char)('a' + k % 26);
	buf[len] = 0;
}

/* Names of every length up to just past PR_INLINE_MAX: their slots hold
 * the name (or, past it, the hash's tag), a presence test and a lookup
 * find each, and no near miss (a byte changed, one more byte) is found
 * either way. A short name whose removal leaves a tombstone is absent at
 * once: a tombstone's word has a top half of 0, as the slot of a name of
 * 8 bytes has, and keeps that name's key. */
static void test_short_names(void **state)
{
	enum { PER_LEN = 14, LENS = PR_INLINE_MAX + 1 };
	char *dir = th_mkdtemp(), name[32], miss[32];
	struct pr_writer w;
	uint64_t seed, pos;
	unsigned tombs = 0;
	TH_ENTRY(e);
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 4 * MB);
	r = r_open(dir);
	assert_non_null(r);
	seed = w.map.hdr->hash_seed;
	for (size_t len = 1; len <= LENS; len++)
		for (unsigned k = 0; k < PER_LEN; k++) {
			short_name(name, len, k * 7 + 3);
			assert_int_equal(put(&w, name, 1), 0);
		}
	assert_int_equal(w_index(&w)->capacity, 256); /* 182 names: clusters */
	for (size_t len = 1; len <= LENS; len++)
		for (unsigned k = 0; k < PER_LEN; k++) {
			const struct pr_slot *sl;

			short_name(name, len, k * 7 + 3);
			assert_true(procreg__w_find_name(&w, name, len, &pos) != 0);
			sl = &w_index(&w)->slot[pos];
			assert_int_equal(sl->key != 0, len <= PR_INLINE_MAX);
			assert_int_equal(pr_slot_hash_hi(sl->word, sl->key, seed),
					 (uint32_t)(pr_hash(name, len, seed) >> 32));
			assert_int_equal(procreg_lookup(r, name, NULL), 0);
			th_entry_scribble(&e, 0);
			assert_int_equal(procreg_lookup(r, name, &e), 0);
			assert_true(entry_ok(&e, name, 1));
			for (size_t j = 0; j <= len; j++) {
				memcpy(miss, name, len + 1);
				if (j < len) {
					miss[j] ^= 0x20; /* uppercase: no name has it */
				} else {
					miss[len] = 'X';
					miss[len + 1] = 0;
				}
				assert_int_equal(procreg_lookup(r, miss, NULL), -ENOENT);
				assert_int_equal(procreg_lookup(r, miss, &e), -ENOENT);
			}
		}
	for (size_t len = 1; len <= 8; len++)
		for (unsigned k = 0; k < PER_LEN; k++) {
			short_name(name, len, k * 7 + 3);
			tombs += len == 8 && leaves_tomb(&w, name);
			assert_int_equal(del(&w, name), 0);
			assert_int_equal(procreg_lookup(r, name, NULL), -ENOENT);
			assert_int_equal(procreg_lookup(r, name, &e), -ENOENT);
		}
	assert_true(tombs > 0); /* of 8-byte names, whose slots' top half is 0 */
	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/*
 * A presence test reads a slot's word, then its key: two loads, and the
 * daemon may rewrite the slot between them. Here it does, from a signal
 * handler that interrupts the lookups at random points: X (prefix P,
 * suffix A) and Y (Q, B) take turns in one slot, and Z (P, B), whose home
 * is that slot too, is never registered. A probe that took Y's word with
 * X's key would find Z; the second load of the word is what stops it.
 */
#define TORN_TURNS 50000

struct torn {
	struct pr_writer *w;
	char x[PR_INLINE_MAX + 1], y[PR_INLINE_MAX + 1], z[PR_INLINE_MAX + 1];
	volatile sig_atomic_t x_in, toggles, stop;
};

static struct torn *torn_now;

static void torn_toggle(int sig)
{
	struct torn *t = torn_now;

	(void)sig;
	if (t->stop || t->toggles >= TORN_TURNS)
		return;
	/* Out of the reader's way: no lookup here, only the writer, which
	 * allocates nothing from the C heap on the way (see the caller). */
	if (del(t->w, t->x_in ? t->x : t->y) || put(t->w, t->x_in ? t->y : t->x, 1) != 0) {
		t->stop = 2;
		return;
	}
	t->x_in = !t->x_in;
	t->toggles++;
}

static unsigned home_of(const struct pr_writer *w, const char *s)
{
	return (unsigned)(pr_hash(s, strlen(s), w->map.hdr->hash_seed) >> w_index(w)->shift);
}

static void test_torn_slot(void **state)
{
	char *dir = th_mkdtemp();
	struct pr_writer w;
	struct torn t = { .w = &w };
	struct sigaction sa = { .sa_handler = torn_toggle, .sa_flags = SA_RESTART };
	struct sigevent sev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGALRM };
	struct itimerspec its = { .it_interval = { 0, 20000 }, .it_value = { 0, 20000 } };
	uint64_t lookups = 0, found_z = 0, t_end;
	timer_t tm;
	unsigned h = 0;
	procreg_t *r;

	(void)state;
	w_open_at(&w, dir, 32 * MB);
	r = r_open(dir);
	assert_non_null(r);
	/* P and Q, 8 bytes each; B with home(P B) == home(Q B); then A with
	 * home(P A) the same. One in 256 each, the index having 256 slots. */
	for (unsigned b = 0;; b++) {
		snprintf(t.y, sizeof(t.y), "qqqqqqqq%04x", b);
		snprintf(t.z, sizeof(t.z), "pppppppp%04x", b);
		h = home_of(&w, t.y);
		if (home_of(&w, t.z) == h)
			break;
		assert_true(b < 0xffff);
	}
	for (unsigned a = 0;; a++) {
		snprintf(t.x, sizeof(t.x), "pppppppp%04x", a);
		if (strcmp(t.x, t.z) && home_of(&w, t.x) == h)
			break;
		assert_true(a < 0xffff);
	}
	assert_int_equal(put(&w, t.x, 1), 0);
	t.x_in = 1;
	assert_int_equal(procreg_lookup(r, t.x, NULL), 0); /* the reader slot, claimed */
	assert_int_equal(procreg_lookup(r, t.z, NULL), -ENOENT);
	/* A turn retires one record onto a list the writer grows with
	 * realloc, which a signal handler must not call: room for every
	 * turn first (nothing is reclaimed meanwhile). */
	{
		size_t n0 = w.retired.n;

		for (unsigned i = 0; i < 2 * (TORN_TURNS + 8); i++)
			assert_int_equal(procreg__vec_push(&w.retired, 0), 0);
		w.retired.n = n0;
	}

	torn_now = &t;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGALRM, &sa, NULL), 0);
	assert_int_equal(timer_create(CLOCK_MONOTONIC, &sev, &tm), 0);
	assert_int_equal(timer_settime(tm, 0, &its, NULL), 0);
	/* Two seconds, or TORN_TURNS turns: the arena holds them without
	 * reclaiming (each turn retires one record). */
	t_end = procreg__mono_ns() + 2000000000ull;
	while (!t.stop && t.toggles < TORN_TURNS && procreg__mono_ns() < t_end) {
		for (int i = 0; i < 1000; i++) {
			int rc = procreg_lookup(r, t.z, NULL);

			found_z += rc == 0;
			lookups++;
		}
	}
	t.stop = 1;
	timer_delete(tm);
	signal(SIGALRM, SIG_DFL);
	print_message("%llu presence tests of Z over %llu turns of X and Y: Z found %llu times\n",
		      (unsigned long long)lookups, (unsigned long long)t.toggles,
		      (unsigned long long)found_z);
	assert_int_equal(t.stop, 1); /* the writer never failed */
	assert_true(t.toggles > 1000);
	assert_int_equal(found_z, 0);
	procreg_close(r);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* Whether slot POS of IX holds what the record at OFF, its name LEN
 * bytes, hashes to: what a lookup and a rebuild compute. */
static bool slot_holds(const struct pr_writer *w, const struct pr_index *ix, uint64_t pos,
		       uint64_t off, size_t len)
{
	const struct pr_record *r = procreg__record_at(&w->map, ix->slot[pos].word);
	struct pr_skey sk = pr_record_skey(r, len, pr_record_hash(r, len, w->map.hdr->hash_seed));

	return ix->slot[pos].word == pr_slot_word(sk, off) && ix->slot[pos].key == sk.key &&
	       pr_slot_hash_hi(ix->slot[pos].word, ix->slot[pos].key, w->map.hdr->hash_seed) ==
		       (uint32_t)(pr_record_hash(r, len, w->map.hdr->hash_seed) >> 32);
}

/* procreg__w_publish_key fills the slot from the key (its hash, or a
 * short name's bytes), which must be what the record itself gives: what
 * a lookup and a rebuild compute. Names long and short, memberships. */
static void test_publish_key(void **state)
{
	char *dir = th_mkdtemp(), name[32];
	struct pr_writer w;
	struct pr_record t = { .kind = PR_KIND_NAME, .pid = 42, .start_time = 7, .uid = 1000 };
	struct pr_root *names, *group;
	const struct pr_index *ix;
	struct pr_key k;
	uint64_t pos, off, seed;

	(void)state;
	w_open_at(&w, dir, 16 * MB);
	names = &w.map.hdr->names;
	seed = w.map.hdr->hash_seed;
	for (int n = 0; n < 300; n++) {
		size_t len = (size_t)snprintf(name, sizeof(name), "k%.*s%d", n % 20, "xxxxxxxxxxxxxxxxxxxx", n);

		assert_int_equal(procreg__w_reserve(&w, names), 0);
		pr_key_name(&k, PR_KIND_NAME, name, len, seed);
		assert_int_equal(procreg__w_find(&w, names, &k, &pos), 0);
		t.name_len = (uint16_t)len;
		assert_int_equal(procreg__w_new_record(&w, &t, name, NULL, &off), 0);
		procreg__w_publish_key(&w, names, pos, off, &k);
		ix = w_index(&w);
		assert_true(slot_holds(&w, ix, pos, off, len));
		assert_int_equal(ix->slot[pos].key != 0, len <= PR_INLINE_MAX);
	}
	for (int n = 0; n < 300; n++) {
		size_t len = (size_t)snprintf(name, sizeof(name), "k%.*s%d", n % 20, "xxxxxxxxxxxxxxxxxxxx", n);

		assert_true(procreg__w_find_name(&w, name, len, &pos) != 0);
	}
	assert_int_equal(procreg__w_group(&w, "grp", 3, true, &group), 0);
	t.kind = PR_KIND_MEMBER;
	t.name_len = 3;
	pr_key_member(&k, t.pid, t.start_time, 0, seed);
	assert_int_equal(procreg__w_reserve(&w, group), 0);
	assert_int_equal(procreg__w_find(&w, group, &k, &pos), 0);
	assert_int_equal(procreg__w_new_record(&w, &t, "grp", NULL, &off), 0);
	procreg__w_publish_key(&w, group, pos, off, &k);
	assert_int_equal(procreg__w_find(&w, group, &k, &pos), off);
	ix = (const struct pr_index *)(w.map.base + group->index_off);
	assert_true(slot_holds(&w, ix, pos, off, 3));
	assert_int_equal(ix->slot[pos].key, 0);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- the walk in parts ---------------------------------------------- */

#define WP_STABLE 2000
#define WP_CHURN 12000
#define WP_GROUPS 24
#define WP_MEMBERS 40
#define WP_WRAP 4

/* KEYS names PREFIX<n> whose home is slot Q of W's index, into NAMES. */
static void names_at_home(struct pr_writer *w, uint64_t q, const char *prefix, char names[][32],
			  int keys)
{
	const struct pr_index *ix = w_index(w);
	int n = 0;

	for (unsigned i = 0; n < keys; i++) {
		struct pr_key k;
		size_t len = (size_t)snprintf(names[n], 32, "%s%u", prefix, i);

		pr_key_name(&k, PR_KIND_NAME, names[n], len, w->map.hdr->hash_seed);
		if (k.hash >> ix->shift == q)
			n++;
	}
}

/* Membership of PID (of node NODE) in GROUP, as procregd's join makes
 * one. */
static void member_add_of(struct pr_writer *w, const char *group, uint32_t pid, uint16_t node)
{
	struct pr_record t = { .kind = PR_KIND_MEMBER, .pid = pid, .start_time = 7, .node = node };
	struct pr_root *root;
	struct pr_key k;
	uint64_t pos, off;

	assert_int_equal(procreg__w_group(w, group, strlen(group), true, &root), 0);
	assert_int_equal(procreg__w_reserve(w, root), 0);
	pr_key_member(&k, pid, 7, node, w->map.hdr->hash_seed);
	assert_int_equal(procreg__w_find(w, root, &k, &pos), 0);
	t.name_len = (uint16_t)strlen(group);
	assert_int_equal(procreg__w_new_record(w, &t, group, NULL, &off), 0);
	procreg__w_publish_key(w, root, pos, off, &k);
}

static void member_add(struct pr_writer *w, const char *group, uint32_t pid)
{
	member_add_of(w, group, pid, 0);
}

/* The names and memberships there throughout: stable-N, and WP_MEMBERS
 * members of each group gN. */
static void wp_fill(struct pr_writer *w)
{
	char name[64];

	for (unsigned i = 0; i < WP_STABLE; i++) {
		name_of(name, sizeof(name), "stable", i);
		assert_int_equal(put(w, name, 1), 0);
	}
	for (unsigned g = 0; g < WP_GROUPS; g++) {
		snprintf(name, sizeof(name), "g%u", g);
		for (uint32_t p = 0; p < WP_MEMBERS; p++)
			member_add(w, name, p);
	}
}

/* What a walk in parts saw: how many times each name and membership. */
struct wp_seen {
	int stable[WP_STABLE], churn[WP_CHURN], wrap;
	int members[WP_GROUPS][WP_MEMBERS + WP_CHURN];
	int other;
};

static int wp_cb(uint64_t off, const struct pr_record *r, void *arg)
{
	struct wp_seen *s = arg;
	unsigned i;
	char c;

	(void)off;
	if (r->kind == PR_KIND_MEMBER) {
		assert_int_equal(sscanf(r->data, "g%u", &i), 1);
		assert_true(i < WP_GROUPS && r->pid < WP_MEMBERS + WP_CHURN);
		s->members[i][r->pid]++;
	} else if (sscanf(r->data, "stable-%u%c", &i, &c) == 1 && i < WP_STABLE) {
		s->stable[i]++;
	} else if (sscanf(r->data, "churn-%u%c", &i, &c) == 1 && i < WP_CHURN) {
		s->churn[i]++;
	} else if (sscanf(r->data, "wrapcand%u%c", &i, &c) == 1) {
		s->wrap++;
	} else {
		s->other++;
	}
	return 0;
}

/*
 * procreg__w_walk_some(), the walk a snapshot for another node is written
 * by, a part at a time with the table written in between: every name and
 * membership there throughout is seen exactly once, whatever the index
 * became meanwhile (rebuilt at 8 times its capacity and more, members'
 * indexes too), and none twice. First at a capacity that does not
 * change, with a run that wraps from the index's end to its start.
 */
static void test_walk_in_parts(void **state)
{
	char *dir = th_mkdtemp(), name[64], wraps[WP_WRAP][32];
	struct pr_writer w;
	struct wp_seen *s = calloc(1, sizeof(*s));
	struct pr_wcursor c;
	uint64_t cap0, parts = 0, rehash0, rehashes;
	unsigned churned = 0, members = WP_MEMBERS;
	int r;

	(void)state;
	assert_non_null(s);
	w_open_at(&w, dir, 256 * MB);
	wp_fill(&w);
	/* The wrapping run, at the capacity the index has once they are in
	 * (an insert may grow it: then again). */
	for (int tries = 0;; tries++) {
		uint64_t cap = w_index(&w)->capacity, pos;

		assert_true(tries < 8);
		/* Names that belong at the last slot fill it and wrap
		 * around to the start: the run a walk must follow past the
		 * end. */
		names_at_home(&w, cap - 1, "wrapcand", wraps, WP_WRAP);
		for (unsigned i = 0; i < WP_WRAP; i++)
			assert_int_equal(put_raw(&w, wraps[i], 1, 1, 0, 0, NULL, 0), 0);
		assert_true(procreg__w_find_name(&w, wraps[WP_WRAP - 1],
						 strlen(wraps[WP_WRAP - 1]), &pos) != 0);
		if (w_index(&w)->capacity == cap) {
			assert_true(pos < 64); /* wrapped to the start */
			break;
		}
		for (unsigned i = 0; i < WP_WRAP; i++)
			assert_int_equal(del(&w, wraps[i]), 0);
	}
	cap0 = w_index(&w)->capacity;

	/* Quiet: small parts, nothing written between them. */
	memset(&c, 0, sizeof(c));
	while ((r = procreg__w_walk_some(&w, &c, 16, wp_cb, s)) == 1)
		parts++;
	assert_int_equal(r, 0);
	assert_true(parts > 8);
	for (unsigned i = 0; i < WP_STABLE; i++)
		assert_int_equal(s->stable[i], 1);
	for (unsigned g = 0; g < WP_GROUPS; g++)
		for (unsigned p = 0; p < WP_MEMBERS; p++)
			assert_int_equal(s->members[g][p], 1);
	assert_int_equal(s->wrap, WP_WRAP);
	assert_int_equal(s->other, 0);
	procreg__w_cursor_free(&c);

	/* Written between the parts: names come and go (1,000 of them live
	 * at a time, past the first), so that tombstones pile up and the
	 * index is rebuilt again and again under the walk; groups gain
	 * members. */
	memset(s, 0, sizeof(*s));
	memset(&c, 0, sizeof(c));
	parts = 0;
	rehash0 = w.map.hdr->rehashes;
	while ((r = procreg__w_walk_some(&w, &c, 4, wp_cb, s)) == 1) {
		parts++;
		for (int k = 0; k < 24; k++, churned++) {
			name_of(name, sizeof(name), "churn", churned % WP_CHURN);
			if (churned >= WP_CHURN)
				(void)del(&w, name); /* from the last round */
			assert_true(put(&w, name, 1) >= 0);
			if (churned >= 1000) {
				name_of(name, sizeof(name), "churn", (churned - 1000) % WP_CHURN);
				assert_int_equal(del(&w, name), 0);
			}
		}
		if (members < WP_MEMBERS + WP_CHURN && parts % 2 == 0) {
			snprintf(name, sizeof(name), "g%u", (unsigned)(parts / 2) % WP_GROUPS);
			member_add(&w, name, members++);
		}
		if (parts % 64 == 0)
			drain(&w);
	}
	assert_int_equal(r, 0);
	procreg__w_cursor_free(&c);
	rehashes = w.map.hdr->rehashes - rehash0;
	assert_true(rehashes >= 8);
	for (unsigned i = 0; i < WP_STABLE; i++)
		if (s->stable[i] != 1)
			fail_msg("stable%u seen %d times in %llu parts, %llu rebuilds", i,
				 s->stable[i], (unsigned long long)parts,
				 (unsigned long long)rehashes);
	for (unsigned i = 0; i < WP_CHURN; i++)
		assert_true(s->churn[i] <= 1);
	for (unsigned g = 0; g < WP_GROUPS; g++) {
		for (unsigned p = 0; p < WP_MEMBERS; p++)
			assert_int_equal(s->members[g][p], 1);
		for (unsigned p = WP_MEMBERS; p < WP_MEMBERS + WP_CHURN; p++)
			assert_true(s->members[g][p] <= 1);
	}
	print_message("walk in parts: %llu parts, %llu rebuilds, index %llu -> %llu slots\n",
		      (unsigned long long)parts, (unsigned long long)rehashes,
		      (unsigned long long)cap0, (unsigned long long)w_index(&w)->capacity);
	free(s);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

struct ra_seen {
	char (*names)[32];
	int seen[5];
};

static int ra_cb(uint64_t off, const struct pr_record *r, void *arg)
{
	struct ra_seen *s = arg;

	(void)off;
	for (int i = 0; i < 5; i++)
		if (r->name_len == strlen(s->names[i]) && !memcmp(r->data, s->names[i], r->name_len))
			s->seen[i]++;
	return 0;
}

static uint64_t slot_of(struct pr_writer *w, const char *name)
{
	uint64_t pos;

	assert_true(procreg__w_find_name(w, name, strlen(name), &pos) != 0);
	return pos;
}

/* A name a part saw, removed and registered again after it, may land past
 * where the walk stopped: it is not seen again. X0..X3 share home Q and
 * fill Q..Q+3; a part stops at the empty slot Q+4; then X0 goes, Y (home
 * Q too) takes its tombstone, and X0 comes back at Q+4. */
static void test_walk_readded(void **state)
{
	char *dir = th_mkdtemp(), names[5][32];
	struct ra_seen s = { .names = names };
	struct pr_writer w;
	struct pr_wcursor c;
	uint64_t q;
	int r;

	(void)state;
	w_open_at(&w, dir, 16 * MB);
	q = w_index(&w)->capacity / 2;
	names_at_home(&w, q, "ra", names, 5);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(put_raw(&w, names[i], 1, 1, 0, 0, NULL, 0), 0);
		assert_int_equal(slot_of(&w, names[i]), q + (uint64_t)i);
	}
	assert_int_equal(w_index(&w)->slot[q + 4].word, PR_SLOT_EMPTY);
	memset(&c, 0, sizeof(c));
	assert_int_equal(procreg__w_walk_some(&w, &c, q + 4, ra_cb, &s), 1);
	assert_true(c.lo == (q + 4) << w_index(&w)->shift);
	for (int i = 0; i < 4; i++)
		assert_int_equal(s.seen[i], 1);
	assert_int_equal(del(&w, names[0]), 0);
	assert_int_equal(put_raw(&w, names[4], 1, 1, 0, 0, NULL, 0), 0);
	assert_int_equal(slot_of(&w, names[4]), q);
	assert_int_equal(put_raw(&w, names[0], 1, 1, 0, 0, NULL, 0), 0);
	assert_int_equal(slot_of(&w, names[0]), q + 4);
	while ((r = procreg__w_walk_some(&w, &c, 64, ra_cb, &s)) == 1)
		;
	assert_int_equal(r, 0);
	procreg__w_cursor_free(&c);
	assert_int_equal(s.seen[0], 1);
	assert_int_equal(s.seen[4], 0); /* came after the part that passed its hash */
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

struct wu_walk {
	struct pr_writer *w;
	struct wp_seen s;
};

/* Counted, and removed if odd (a name) or in one of the first half of the
 * groups (a membership). */
static int wu_cb(uint64_t off, const struct pr_record *r, void *arg)
{
	struct wu_walk *u = arg;
	unsigned i, g;
	int odd = 0;

	wp_cb(off, r, &u->s);
	if (r->kind == PR_KIND_MEMBER)
		odd = sscanf(r->data, "g%u", &g) == 1 && g < WP_GROUPS / 2;
	else if (sscanf(r->data, "stable-%u", &i) == 1)
		odd = i % 2;
	if (odd)
		assert_int_equal(procreg__w_unpublish(u->w, off), 0);
	return 0;
}

/* The walk in parts may remove what it is given, as the walk that removes
 * a node's entries does: everything there throughout is still seen once,
 * groups left empty go mid-walk, and what it removed is gone at its end. */
static void test_walk_unpublish(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	struct wu_walk *u = calloc(1, sizeof(*u));
	struct pr_wcursor c;
	struct pr_root *root;
	unsigned churned = 0;
	int r;

	(void)state;
	assert_non_null(u);
	u->w = &w;
	w_open_at(&w, dir, 64 * MB);
	wp_fill(&w);
	memset(&c, 0, sizeof(c));
	while ((r = procreg__w_walk_some(&w, &c, 3, wu_cb, u)) == 1)
		for (int k = 0; k < 4; k++, churned++) {
			name_of(name, sizeof(name), "churn", churned % WP_CHURN);
			if (churned >= WP_CHURN)
				(void)del(&w, name);
			assert_true(put(&w, name, 1) >= 0);
		}
	assert_int_equal(r, 0);
	procreg__w_cursor_free(&c);
	for (unsigned i = 0; i < WP_STABLE; i++) {
		name_of(name, sizeof(name), "stable", i);
		assert_int_equal(u->s.stable[i], 1);
		assert_int_equal(procreg__w_find_name(&w, name, strlen(name), &(uint64_t){ 0 }) != 0,
				 i % 2 == 0);
	}
	for (unsigned g = 0; g < WP_GROUPS; g++) {
		for (unsigned p = 0; p < WP_MEMBERS; p++)
			assert_int_equal(u->s.members[g][p], 1);
		snprintf(name, sizeof(name), "g%u", g);
		r = procreg__w_group(&w, name, strlen(name), false, &root);
		if (g < WP_GROUPS / 2) {
			assert_int_equal(r, -ENOENT);
		} else {
			assert_int_equal(r, 0);
			assert_int_equal(root->live, WP_MEMBERS);
		}
	}
	free(u);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- one clock read per packet ------------------------------------- */

/* While the writer holds the clock (around a packet of requests), every
 * stamp is the one read at the first: a registration's and its events'
 * alike, so the feed's times stay in order. Released, each stamp is read
 * afresh; held again, the clock is read again, never earlier. */
static void test_clock_hold(void **state)
{
	char *dir = th_mkdtemp();
	struct pr_writer w;
	struct pr_record t = { .kind = PR_KIND_NAME, .pid = 1, .name_len = 1 };
	const struct pr_event *e;
	uint64_t a, b, c, off;

	(void)state;
	w_open_at(&w, dir, 4 * MB);
	procreg__w_clock_hold(&w, true);
	a = procreg__w_now(&w);
	usleep(2000);
	assert_true(procreg__w_now(&w) == a);
	assert_int_equal(procreg__w_new_record(&w, &t, "x", NULL, &off), 0);
	procreg__w_emit(&w, PROCREG_EV_REGISTERED, (const struct pr_record *)(w.map.base + off));
	e = w.feed + (w.map.hdr->feed_head & (w.feed_cap - 1));
	assert_true(e->time_ns == a);
	procreg__w_clock_hold(&w, false);
	b = procreg__w_now(&w);
	assert_true(b > a);
	usleep(2000);
	assert_true(procreg__w_now(&w) > b);
	procreg__w_clock_hold(&w, true);
	c = procreg__w_now(&w);
	assert_true(c > b);
	procreg__w_emit(&w, PROCREG_EV_UNREGISTERED, (const struct pr_record *)(w.map.base + off));
	e = w.feed + (w.map.hdr->feed_head & (w.feed_cap - 1));
	assert_true(e->time_ns == c);
	procreg__w_clock_hold(&w, false);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- free blocks merged ------------------------------------------------- */

/* Names PREFIX-0, PREFIX-1, ... each with META_LEN bytes of metadata,
 * until the table refuses one (-ENOSPC): how many went in. */
static unsigned fill_table(struct pr_writer *w, const char *prefix, size_t meta_len)
{
	static uint8_t meta[PROCREG_META_MAX];
	char name[64];
	unsigned n = 0;
	int err;

	for (;; n++) {
		name_of(name, sizeof(name), prefix, n);
		err = put_raw(w, name, 7, 1, 1000, 0, meta, meta_len);
		if (err == -ENOSPC)
			return n;
		assert_int_equal(err, 0);
	}
}

/* A table filled with records of 1 KiB of metadata, all removed: the
 * arena is free but in blocks of 1.1 KiB, and an index of the names that
 * come next needs blocks far bigger as it grows. The free lists are made
 * again from the free map, neighbours merged, when nothing else has room
 * (coalesce()): every small name goes in, their index in blocks merged
 * below the top. Before, they were refused once the index outgrew the blocks left
 * below the top (-ENOSPC with 90% of the arena free). */
static void test_free_blocks_merged(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	unsigned filled, small = 0;
	uint64_t top;
	int err;

	(void)state;
	w_open_at(&w, dir, 16 * MB);
	filled = fill_table(&w, "frag", 1000);
	assert_true(filled > 5000);
	for (unsigned i = 0; i < filled; i++) {
		name_of(name, sizeof(name), "frag", i);
		assert_int_equal(del(&w, name), 0);
	}
	drain(&w);
	top = w.map.hdr->arena_top;
	for (; small < 4 * filled; small++) {
		name_of(name, sizeof(name), "small", small);
		err = put_raw(&w, name, 7, 1, 1000, 0, NULL, 0);
		if (err)
			fail_msg("small name %u of %u: %s (index of %llu slots; arena %llu of %llu "
				 "bytes in use)", small, 4 * filled, strerror(-err),
				 (unsigned long long)w_index(&w)->capacity,
				 (unsigned long long)w.map.hdr->arena_used,
				 (unsigned long long)(w.map.hdr->arena_top - w.map.hdr->arena_off));
	}
	/* The index, far bigger than any block freed, lies below the top
	 * the filling left: in blocks merged. */
	assert_true(w_index(&w)->capacity >= 4 * filled);
	assert_true(w.map.hdr->names.index_off + index_bytes(w_index(&w)->capacity) <= top);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* The table filled with names of 1 KiB of metadata, all but every
 * KEEP-th removed and reclaimed: the free arena in runs between them. */
static void pin_every(struct pr_writer *w, unsigned keep)
{
	unsigned filled = fill_table(w, "pin", 1000);
	char name[64];

	assert_true(filled > 5000);
	for (unsigned i = 0; i < filled; i++) {
		name_of(name, sizeof(name), "pin", i);
		if (i % keep)
			assert_int_equal(del(w, name), 0);
	}
	drain(w);
}

/* A table filled with records of 1 KiB of metadata, nine of every ten
 * removed, then small names put until the index, growing, fits nowhere:
 * merged, the free arena is runs of nine records pinned apart by the
 * tenth, and the small names cut into a few of them. Every insert while
 * the index is due tries the rebuild again, and used to walk every run
 * for it (one uid's refused inserts held root's requests up to 2.7 s);
 * now a walk that finds none big enough says how big the biggest is, and
 * the next request bigger than that is refused without one. */
static void test_large_refused_without_walk(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	unsigned small = 0;
	uint64_t looked;
	int err;

	(void)state;
	w_open_at(&w, dir, 16 * MB);
	pin_every(&w, 10);
	do {
		name_of(name, sizeof(name), "small", small++);
		err = put_raw(&w, name, 7, 1, 1000, 0, NULL, 0);
		assert_true(err == 0 || err == -ENOSPC);
	} while (!err);
	assert_true(w.large.n / 2 > 500);
	looked = w.large_looked;
	for (unsigned k = 0; k < 100; k++) {
		name_of(name, sizeof(name), "small", small++);
		assert_int_equal(put_raw(&w, name, 7, 1, 1000, 0, NULL, 0), -ENOSPC);
	}
	if (w.large_looked - looked > 100)
		fail_msg("100 refused inserts looked at %llu free blocks (%zu on the list)",
			 (unsigned long long)(w.large_looked - looked), w.large.n / 2);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* Small name *N (then *N + 1) put, or the test failed. */
static void small_put(struct pr_writer *w, char *name, unsigned *n)
{
	int err;

	name_of(name, 64, "small", (*n)++);
	err = put_raw(w, name, 7, 1, 1000, 0, NULL, 0);
	if (err)
		fail_msg("small name %u: %s (arena %llu of %llu bytes in use; index of %llu slots)",
			 *n - 1, strerror(-err), (unsigned long long)w->map.hdr->arena_used,
			 (unsigned long long)(w->map.hdr->arena_top - w->map.hdr->arena_off),
			 (unsigned long long)w_index(w)->capacity);
}

/* A table filled to its end with records of 1 KiB of metadata, four of
 * every five removed: the free arena is runs of four records, pinned
 * apart by the fifth, and the name index fits none of them. Churn of
 * small names (as many removed as put, a third of the index's slots
 * live) makes the index due again and again, to be rebuilt at its size:
 * every insert must go in, for a dozen rebuilds. Before, the first
 * rebuild found no room, and every insert was refused from then on with
 * 78% of the arena free. The first rebuild takes the room kept at the
 * end for the index (index_room()), and each after it the block of the
 * one before, kept as the spare. */
static void test_index_rebuilt_in_fragments(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	unsigned i, small = 0, gone = 0;
	uint64_t rehashes, cap0;

	(void)state;
	w_open_at(&w, dir, 16 * MB);
	/* As the daemon serves a uid other than root (the room is kept
	 * from those). */
	w.no_reserve = true;
	pin_every(&w, 5);
	cap0 = w_index(&w)->capacity;
	rehashes = w.map.hdr->rehashes;
	while (w.map.hdr->names.live < cap0 / 3)
		small_put(&w, name, &small);
	/* Round after round (the index due again and again), far past the
	 * first few rebuilds: each finds the room, then the spare. */
	for (int round = 0; round < 3000 && w.map.hdr->rehashes - rehashes < 12; round++) {
		for (i = 0; i < 1000; i++)
			small_put(&w, name, &small);
		for (i = 0; i < 1000; i++) {
			name_of(name, sizeof(name), "small", gone++);
			assert_int_equal(del(&w, name), 0);
		}
		drain(&w);
	}
	assert_true(w.map.hdr->rehashes - rehashes >= 12);
	assert_int_equal(w_index(&w)->capacity, cap0);
	assert_true(w.spare_size >= index_bytes(cap0));
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* Another node's names without metadata into a table of 4 MiB with the
 * reserve and the local share procregd keeps (1/32 and 1/8), reclaiming
 * every DRAIN names: they stop at half the name index's slots, as other
 * nodes' entries do, and leave this host the reserve, its share and the
 * room for the index's rebuilds at the index's size (index_room()). Their
 * growth of the index from 32,768 slots to 65,536 went through or not by
 * when the old indexes had been reclaimed, and the room at the new size
 * left users a fraction of their share: 64 names of 1 KiB went in, a join
 * after them was refused ENOSPC. A user of this host then registers 3/4
 * of its share in names of 1 KiB, and joins a group. */
static void remote_fill_then_user(unsigned drain_every)
{
	char *dir = th_mkdtemp(), name[64];
	uint8_t meta[1024] = { 0 };
	struct pr_writer w;
	uint64_t size, kept;
	unsigned n = 0, user;
	int err = 0;

	w_open_at(&w, dir, 4 * MB);
	size = w.map.size - w.map.hdr->arena_off;
	w.reserve = w.map.size / 32;
	w.local_share = w.map.size / 8;
	w.no_reserve = w.remote = true;
	while (n < 100000 && !err) {
		snprintf(name, sizeof(name), "f%u", n++);
		err = put_raw(&w, name, 99, 1, 0, 1, NULL, 0);
		if (n % drain_every == 0)
			drain(&w);
	}
	assert_int_equal(err, -ENOSPC);
	drain(&w);
	kept = w.reserve + w.local_share + procreg__w_index_room(&w);
	print_message("reclaiming every %u: another node's names %llu in, %llu of %llu bytes in "
		      "use, %llu slots; %llu kept\n", drain_every,
		      (unsigned long long)w.map.hdr->names.live,
		      (unsigned long long)w.map.hdr->arena_used, (unsigned long long)size,
		      (unsigned long long)w_index(&w)->capacity, (unsigned long long)kept);
	assert_true(w.map.hdr->names.live * 2 <= w_index(&w)->capacity);
	if (size - w.map.hdr->arena_used < kept)
		fail_msg("another node's names left %llu bytes, want %llu",
			 (unsigned long long)(size - w.map.hdr->arena_used), (unsigned long long)kept);
	w.remote = false;
	user = (unsigned)(w.local_share * 3 / 4 / (sizeof(meta) + 64));
	for (unsigned i = 0; i < user; i++) {
		name_of(name, sizeof(name), "user-name", i);
		err = put_raw(&w, name, 7, 1, 1000, 0, meta, sizeof(meta));
		if (err)
			fail_msg("the user's name %u of %u: %s (%llu of %llu bytes in use, %llu slots)",
				 i, user, strerror(-err), (unsigned long long)w.map.hdr->arena_used,
				 (unsigned long long)size, (unsigned long long)w_index(&w)->capacity);
	}
	member_add(&w, "user-group", 7);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

static void test_remote_growth_leaves_local_share(void **state)
{
	(void)state;
	remote_fill_then_user(100);
	remote_fill_then_user(1000000);
}

/* ---- member indexes made smaller -------------------------------------- */

static int drop_all_but_first(uint64_t off, const struct pr_record *r, void *arg)
{
	struct pr_writer *w = arg;

	if (r->kind == PR_KIND_MEMBER && r->pid != 0)
		assert_int_equal(procreg__w_unpublish(w, off), 0);
	return 0;
}

/* A group that had 3,000 members and keeps one: its member index made
 * smaller as they leave (removed by a walk in parts, as procregd's walks
 * remove, and one at a time), within batches; the members that stay are
 * all found. Indexes only grew before: the group kept 8,192 slots for one
 * member. Outside a batch the index is left as it is. */
static void test_member_index_shrinks(void **state)
{
	char *dir = th_mkdtemp();
	struct pr_writer w;
	struct pr_root *gr;
	struct pr_wcursor cur;
	struct pr_key k;
	uint64_t pos;
	int r;

	(void)state;
	w_open_at(&w, dir, 64 * MB);
	for (uint32_t pid = 0; pid < 3000; pid++) {
		member_add_of(&w, "big", pid, (uint16_t)(pid % 2));
		member_add_of(&w, "other", pid, 0);
	}
	assert_int_equal(procreg__w_group(&w, "big", 3, false, &gr), 0);
	assert_true(index_at_test(&w, gr)->capacity >= 4096);
	/* Outside a batch: left as it is. */
	pr_key_member(&k, 2999, 7, 1, w.map.hdr->hash_seed);
	assert_int_not_equal(procreg__w_find(&w, gr, &k, &pos), 0);
	assert_int_equal(procreg__w_unpublish(&w, procreg__w_find(&w, gr, &k, &pos)), 0);
	assert_true(index_at_test(&w, gr)->capacity >= 4096);
	/* By a walk in parts, in batches. */
	memset(&cur, 0, sizeof(cur));
	do {
		procreg__w_batch_begin(&w);
		r = procreg__w_walk_some(&w, &cur, 64, drop_all_but_first, &w);
		procreg__w_batch_end(&w);
		drain(&w);
	} while (r == 1);
	assert_int_equal(r, 0);
	procreg__w_cursor_free(&cur);
	assert_int_equal(procreg__w_group(&w, "big", 3, false, &gr), 0);
	assert_int_equal(gr->live, 1);
	assert_int_equal(index_at_test(&w, gr)->capacity, 16);
	pr_key_member(&k, 0, 7, 0, w.map.hdr->hash_seed);
	assert_int_not_equal(procreg__w_find(&w, gr, &k, &pos), 0);
	assert_int_equal(procreg__w_group(&w, "other", 5, false, &gr), 0);
	assert_int_equal(gr->live, 1);
	assert_int_equal(index_at_test(&w, gr)->capacity, 16);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* A member index made smaller takes nothing of what is kept for root:
 * the table full for unprivileged requests, a group's members leave (as a
 * leave or a death removes them, with no limit of the request's own),
 * and the index is made smaller only within what unprivileged requests
 * may use (here nothing: it stays as it was); none of the reserve's fresh
 * arena is taken. Without those limits, its rebuilds took 129 KB of it,
 * for good. */
static void test_shrink_keeps_reserve(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	struct pr_root *gr;
	uint64_t top;

	(void)state;
	w_open_at(&w, dir, 8 * MB);
	w.reserve = 1 * MB;
	for (uint32_t pid = 0; pid < 6000; pid++)
		member_add_of(&w, "big", pid, 0);
	assert_int_equal(procreg__w_group(&w, "big", 3, false, &gr), 0);
	assert_true(index_at_test(&w, gr)->capacity >= 8192);
	/* The names' index grown first, so that the table fills by its
	 * arena, the group's old indexes in the lists taken too. */
	for (unsigned i = 0; i < 40000; i++) {
		name_of(name, sizeof(name), "pre", i);
		assert_int_equal(put_raw(&w, name, 7, 1, 1000, 0, NULL, 0), 0);
	}
	for (unsigned i = 0; i < 40000; i++) {
		name_of(name, sizeof(name), "pre", i);
		assert_int_equal(del(&w, name), 0);
	}
	drain(&w);
	w.no_reserve = true;
	fill_table(&w, "fill", 200);
	w.no_reserve = false;
	w.reserve_hit = false;
	top = w.map.hdr->arena_top;
	procreg__w_batch_begin(&w);
	for (uint32_t pid = 1; pid < 6000; pid++) {
		struct pr_key k;
		uint64_t pos;

		pr_key_member(&k, pid, 7, 0, w.map.hdr->hash_seed);
		assert_int_equal(procreg__w_unpublish(&w, procreg__w_find(&w, gr, &k, &pos)), 0);
	}
	procreg__w_batch_end(&w);
	assert_int_equal(w.map.hdr->arena_top, top);
	assert_false(w.reserve_hit);
	assert_true(w.map.hdr->arena_used <= w.map.size - w.map.hdr->arena_off - w.reserve);
	assert_int_equal(gr->live, 1);
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

/* ---- records per node id ------------------------------------------------ */

#define NR_NODES 8

struct nr_count {
	struct pr_writer *w;
	uint64_t n[NR_NODES];
	bool drop_odd;              /* unpublish the memberships of odd pids */
};

static int nr_cb(uint64_t off, const struct pr_record *r, void *arg)
{
	struct nr_count *c = arg;

	assert_true(r->node < NR_NODES);
	if (c->drop_odd && r->kind == PR_KIND_MEMBER && r->pid % 2) {
		assert_int_equal(procreg__w_unpublish(c->w, off), 0);
		return 0;
	}
	c->n[r->node]++;
	return 0;
}

/* The writer's count of each node id's records against WANT, and against
 * a walk of the table. Node 0 is left out: group records are its too,
 * and a walk does not give them (nor does the bridge ask about node 0). */
static void nr_check(struct pr_writer *w, const uint64_t *want, const char *when)
{
	struct nr_count c = { .w = w };

	assert_int_equal(procreg__w_walk(w, nr_cb, &c), 0);
	for (uint16_t n = 1; n < NR_NODES; n++) {
		if (procreg__w_node_refs(w, n) != want[n] || c.n[n] != want[n])
			fail_msg("%s: node %u: counted %llu, walk saw %llu, want %llu", when,
				 (unsigned)n, (unsigned long long)procreg__w_node_refs(w, n),
				 (unsigned long long)c.n[n], (unsigned long long)want[n]);
	}
}

/* The writer counts each node id's published records, so that procregd
 * can give a gone node's id away without walking the table: names and
 * memberships put, replaced by another node's, removed (one by one, and
 * by a walk), and the counts rebuilt by recovery after a crash. */
static void test_node_refs(void **state)
{
	char *dir = th_mkdtemp(), name[64];
	struct pr_writer w;
	struct nr_count drop = { .w = &w, .drop_odd = true };
	struct pr_wcursor cur;
	uint64_t want[NR_NODES] = { 0 };
	int r;

	(void)state;
	w_open_at(&w, dir, 64 * MB);
	for (unsigned i = 0; i < 3000; i++) {
		name_of(name, sizeof(name), "nr", i);
		assert_int_equal(put_raw(&w, name, 100 + i, 1, 1000, 1 + i % 5, NULL, 0), 0);
		want[1 + i % 5]++;
	}
	nr_check(&w, want, "put");
	/* Replaced by node 6's, and node 6's replaced by node 6's again. */
	for (int round = 0; round < 2; round++)
		for (unsigned i = 0; i < 500; i++) {
			name_of(name, sizeof(name), "nr", i);
			assert_int_equal(put_raw(&w, name, 100 + i, 2, 1000, 6, NULL, 0), 1);
			if (round == 0) {
				want[1 + i % 5]--;
				want[6]++;
			}
		}
	for (unsigned i = 500; i < 1000; i++) {
		name_of(name, sizeof(name), "nr", i);
		assert_int_equal(del(&w, name), 0);
		want[1 + i % 5]--;
	}
	nr_check(&w, want, "replaced and removed");
	/* Memberships of nodes 1-3 and 7 in four groups; then those of odd
	 * pids go, by a walk in parts as procregd's removals do. */
	for (unsigned g = 0; g < 4; g++) {
		snprintf(name, sizeof(name), "nrg%u", g);
		for (uint32_t pid = 0; pid < 100; pid++) {
			uint16_t node = g == 3 ? 7 : (uint16_t)(1 + pid % 3);

			member_add_of(&w, name, pid, node);
			want[node]++;
		}
	}
	nr_check(&w, want, "joined");
	memset(&cur, 0, sizeof(cur));
	while ((r = procreg__w_walk_some(&w, &cur, 16, nr_cb, &drop)) == 1)
		;
	assert_int_equal(r, 0);
	procreg__w_cursor_free(&cur);
	for (unsigned g = 0; g < 4; g++)
		for (uint32_t pid = 1; pid < 100; pid += 2)
			want[g == 3 ? 7 : 1 + pid % 3]--;
	nr_check(&w, want, "half left");

	/* A crash: the next writer's counts come from recovery. */
	procreg__writer_close(&w);
	w_open_at(&w, dir, 64 * MB);
	assert_true(w.attached);
	assert_int_equal(procreg__w_recover(&w), 0);
	nr_check(&w, want, "recovered");
	procreg__writer_close(&w);
	th_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_word_helpers),
		cmocka_unit_test(test_insert_lookup),
		cmocka_unit_test(test_replace),
		cmocka_unit_test(test_delete),
		cmocka_unit_test(test_many_names),
		cmocka_unit_test(test_churn),
		cmocka_unit_test(test_grow_while_reading),
		cmocka_unit_test(test_foreach_quiet),
		cmocka_unit_test(test_foreach_while_writing),
		cmocka_unit_test(test_recovery),
		cmocka_unit_test(test_damaged_table),
		cmocka_unit_test(test_bad_header),
		cmocka_unit_test(test_readonly_mapping),
		cmocka_unit_test(test_hostile_feed),
		cmocka_unit_test(test_reclaim_in_batch),
		cmocka_unit_test(test_records_reuse_old_indexes),
		cmocka_unit_test(test_name_len),
		cmocka_unit_test(test_unpublish_at),
		cmocka_unit_test(test_publish_key),
		cmocka_unit_test(test_short_names),
		cmocka_unit_test(test_torn_slot),
		cmocka_unit_test(test_walk_in_parts),
		cmocka_unit_test(test_walk_readded),
		cmocka_unit_test(test_walk_unpublish),
		cmocka_unit_test(test_node_refs),
		cmocka_unit_test(test_free_blocks_merged),
		cmocka_unit_test(test_large_refused_without_walk),
		cmocka_unit_test(test_index_rebuilt_in_fragments),
		cmocka_unit_test(test_remote_growth_leaves_local_share),
		cmocka_unit_test(test_member_index_shrinks),
		cmocka_unit_test(test_shrink_keeps_reserve),
		cmocka_unit_test(test_clock_hold),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
