/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_stress.c - readers and writers at once, in separate processes,
 * against a real procregd.
 *
 *  - The test process registers NSTABLE "stable" names, each with metadata
 *    that checksums the name, and holds them throughout.
 *  - NREADERS reader processes look up random stable names (each must be
 *    found, whole and owned by the test process), random churn names (when
 *    found, the record must be whole: the right name, metadata that
 *    checksums it, the churner's pid), and now and then walk the whole
 *    table with procreg_foreach (every entry whole, every stable name seen
 *    exactly once).
 *  - NCHURNERS writer processes push NCHURN registrations of new names
 *    through procreg_batch, NPASSES times over, in waves: register a
 *    wave, replace half of it with new metadata, unregister it all. The
 *    index grows, records are retired and freed, memory is reused, while
 *    the readers read.
 *
 * Processes share nothing but the registry and a small shared-memory
 * block of counters (each process writes only its own). Readers stop when
 * their stop pipe closes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "layout.h"

#include "harness.h"
#include "internal.h"

#define NSTABLE 500
#define NREADERS 4
#define NCHURNERS 2
#define NCHURN 100000                      /* names registered and removed, per pass */
#define NPASSES 8                          /* the churners go over their names this often */
#define PER_CHURNER (NCHURN / NCHURNERS)
#define WAVE 5000
#define READER_ROUND 256                   /* lookups of each kind between stop checks */
#define FOREACH_EVERY 8                    /* rounds */

_Static_assert(PER_CHURNER % WAVE == 0, "whole waves");

/* ---- shared counters -------------------------------------------------- */

struct reader_stats {
	uint64_t lookups;
	uint64_t stable_found;
	uint64_t churn_found;
	uint64_t churn_absent;
	uint64_t walks;
	uint64_t walk_entries;
	int ready;                 /* one whole walk done */
	int failed;
	char why[256];
};

struct churner_stats {
	pid_t pid;
	uint64_t wave_base;        /* the names of the wave in flight start here */
	uint64_t registered;
	uint64_t replaced;
	uint64_t unregistered;
	uint64_t record_bytes;     /* arena bytes of every record we caused */
	int failed;
	char why[256];
};

struct shared {
	pid_t stable_owner;
	struct reader_stats r[NREADERS];
	struct churner_stats c[NCHURNERS];
};

/* ---- names and their metadata ----------------------------------------- */

static uint32_t fnv1a(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

static void stable_name(char *buf, size_t len, unsigned i)
{
	snprintf(buf, len, "stable/%04u", i);
}

static void churn_name(char *buf, size_t len, unsigned w, unsigned i)
{
	snprintf(buf, len, "churn/%u/%06u", w, i);
}

/*
 * "<name>:<fnv1a(name) in 8 hex>:<version>:" then a padding whose length
 * and bytes follow from the hash and the version, so that records of
 * different sizes come and go. Returns the length.
 */
#define META_BUF 200

static size_t make_meta(char *meta, const char *name, unsigned v)
{
	uint32_t h = fnv1a(name);
	int n = snprintf(meta, META_BUF, "%s:%08x:%u:", name, h, v);
	size_t pad = (h >> 8) % 61 + v * 13;

	for (size_t i = 0; i < pad && (size_t)n + i < META_BUF; i++)
		meta[n + i] = (char)('a' + (h + i + v) % 26);
	return (size_t)n + pad;
}

/* What a record for NAME with META_LEN bytes of metadata takes in the
 * table (layout.h's PR_RECORD_SIZE: a 48-byte header, name, NUL, meta). */
static uint64_t record_bytes(const char *name, size_t meta_len)
{
	return PR_RECORD_SIZE(strlen(name), meta_len);
}

/* 0 if E is a whole record for NAME (any NAME if NULL), with metadata of
 * version 0 or 1; else a reason. */
static const char *check_entry(const struct procreg_entry *e, const char *name)
{
	char want[META_BUF];

	if (name && strcmp(e->name, name))
		return "entry for another name";
	for (unsigned v = 0; v < 2; v++) {
		size_t n = make_meta(want, e->name, v);

		if (e->meta_len == n && !memcmp(e->meta, want, n))
			return NULL;
	}
	return "metadata does not checksum the name (torn record?)";
}

/* ---- readers ---------------------------------------------------------- */

struct reader_arg {
	const char *dir;
	struct shared *sh;
	int id;
	int stop_fd;               /* readable (EOF) when the test wants us to stop */
	int stop_wr;               /* the pipe's other end, which we must not hold */
};

struct walk {
	struct shared *sh;
	unsigned seen[NSTABLE];
	uint64_t entries;
	const char *why;
	char bad[PROCREG_NAME_MAX + 1];
};

static int walk_cb(const struct procreg_entry *e, void *arg)
{
	struct walk *w = arg;
	const char *why = check_entry(e, NULL);
	unsigned i, cw, ci;
	char tail;

	w->entries++;
	if (!why) {
		if (sscanf(e->name, "stable/%4u%c", &i, &tail) == 1 && i < NSTABLE) {
			w->seen[i]++;
			if (e->pid != w->sh->stable_owner)
				why = "stable name with another owner";
		} else if (sscanf(e->name, "churn/%u/%6u%c", &cw, &ci, &tail) == 2 &&
			   cw < NCHURNERS && ci < PER_CHURNER) {
			if (e->pid != w->sh->c[cw].pid)
				why = "churn name with another owner";
		} else {
			why = "a name nobody registered";
		}
	}
	if (why) {
		w->why = why;
		snprintf(w->bad, sizeof(w->bad), "%s", e->name);
		return 1;
	}
	return 0;
}

static int reader_fail(struct reader_stats *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int reader_fail(struct reader_stats *st, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(st->why, sizeof(st->why), fmt, ap);
	va_end(ap);
	__atomic_store_n(&st->failed, 1, __ATOMIC_RELEASE);
	return 1;
}

static int reader(void *p)
{
	struct reader_arg *a = p;
	struct shared *sh = a->sh;
	struct reader_stats *st = &sh->r[a->id];
	PROCREG_OPTS(procreg_opts, o, .dir = a->dir, .scope = "default");
	procreg_t *r = procreg_open(&o);
	TH_ENTRY(e);
	struct walk *w = malloc(sizeof(*w));
	uint64_t rnd = 0x9e3779b97f4a7c15ull ^ ((uint64_t)getpid() << 20) ^ (uint64_t)a->id;
	char name[64];

	close(a->stop_wr);
	if (!r || !w)
		return reader_fail(st, "procreg_open: %s", strerror(errno));
	for (uint64_t round = 0;; round++) {
		struct pollfd pf = { .fd = a->stop_fd, .events = POLLIN };

		for (int k = 0; k < READER_ROUND; k++) {
			unsigned i = (unsigned)(th_xorshift(&rnd) % NSTABLE), cw, ci;
			const char *why;
			int rc;

			stable_name(name, sizeof(name), i);
			rc = procreg_lookup(r, name, &e);
			if (rc)
				return reader_fail(st, "lookup %s: %s", name, procreg_strerror(rc));
			if ((why = check_entry(&e, name)))
				return reader_fail(st, "lookup %s: %s", name, why);
			if (e.pid != sh->stable_owner)
				return reader_fail(st, "lookup %s: owner %d, want %d", name,
						   (int)e.pid, (int)sh->stable_owner);
			st->stable_found++;

			/* Half the time a name of a wave in flight, which is
			 * likely registered; else any churn name. */
			cw = (unsigned)(th_xorshift(&rnd) % NCHURNERS);
			if (th_xorshift(&rnd) & 1)
				ci = (unsigned)(__atomic_load_n(&sh->c[cw].wave_base, __ATOMIC_RELAXED) +
						th_xorshift(&rnd) % WAVE);
			else
				ci = (unsigned)(th_xorshift(&rnd) % PER_CHURNER);
			churn_name(name, sizeof(name), cw, ci % PER_CHURNER);
			rc = procreg_lookup(r, name, &e);
			if (rc == 0) {
				if ((why = check_entry(&e, name)))
					return reader_fail(st, "lookup %s: %s", name, why);
				if (e.pid != __atomic_load_n(&sh->c[cw].pid, __ATOMIC_RELAXED))
					return reader_fail(st, "lookup %s: owner %d, not the churner",
							   name, (int)e.pid);
				__atomic_store_n(&st->churn_found, st->churn_found + 1,
						 __ATOMIC_RELAXED);
			} else if (rc == -ENOENT) {
				st->churn_absent++;
			} else {
				return reader_fail(st, "lookup %s: %s", name, procreg_strerror(rc));
			}
			__atomic_store_n(&st->lookups, st->lookups + 2, __ATOMIC_RELAXED);
		}
		if (round % FOREACH_EVERY == 0) {
			int rc;

			memset(w, 0, sizeof(*w));
			w->sh = sh;
			rc = procreg_foreach(r, walk_cb, w);
			if (rc == 1)
				return reader_fail(st, "foreach: %s: %s", w->bad, w->why);
			if (rc)
				return reader_fail(st, "foreach: %s", procreg_strerror(rc));
			for (unsigned i = 0; i < NSTABLE; i++)
				if (w->seen[i] != 1)
					return reader_fail(st, "foreach: stable/%04u seen %u times",
							   i, w->seen[i]);
			st->walks++;
			st->walk_entries += w->entries;
			__atomic_store_n(&st->ready, 1, __ATOMIC_RELEASE);
		}
		if (poll(&pf, 1, 0) != 0)
			break;
	}
	free(w);
	procreg_close(r);
	return 0;
}

/* ---- churners --------------------------------------------------------- */

struct churner_arg {
	const char *dir;
	struct shared *sh;
	int id;
};

static int churner_fail(struct churner_stats *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int churner_fail(struct churner_stats *st, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(st->why, sizeof(st->why), fmt, ap);
	va_end(ap);
	st->failed = 1;
	return 1;
}

struct wave {
	char name[WAVE][32];
	char meta[WAVE][META_BUF];
	struct procreg_op ops[WAVE];
};

static int every_reader_saw_churn(void *p)
{
	struct shared *sh = p;

	for (int i = 0; i < NREADERS; i++)
		if (!__atomic_load_n(&sh->r[i].churn_found, __ATOMIC_RELAXED) &&
		    !__atomic_load_n(&sh->r[i].failed, __ATOMIC_ACQUIRE))
			return 0;
	return 1;
}

static int churner(void *p)
{
	struct churner_arg *a = p;
	struct churner_stats *st = &a->sh->c[a->id];
	PROCREG_OPTS(procreg_opts, o, .dir = a->dir, .scope = "default");
	procreg_t *r = procreg_open(&o);
	struct wave *wv = malloc(sizeof(*wv));
	TH_ENTRY(e);
	int rc;

	if (!r || !wv)
		return churner_fail(st, "procreg_open: %s", strerror(errno));
	for (unsigned k = 0; k < NPASSES * (PER_CHURNER / WAVE); k++) {
		unsigned pass = k / (PER_CHURNER / WAVE), base = k % (PER_CHURNER / WAVE) * WAVE;
		size_t n = 0;

		__atomic_store_n(&st->wave_base, base, __ATOMIC_RELAXED);
		/* Register the wave. */
		for (unsigned i = 0; i < WAVE; i++) {
			churn_name(wv->name[i], sizeof(wv->name[i]), (unsigned)a->id, base + i);
			wv->ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op),
				.kind = PROCREG_OP_REGISTER, .name = wv->name[i], .meta = wv->meta[i],
				.meta_len = make_meta(wv->meta[i], wv->name[i], 0),
			};
		}
		rc = procreg_batch(r, wv->ops, WAVE);
		if (rc)
			return churner_fail(st, "batch register: %s", procreg_strerror(rc));
		for (unsigned i = 0; i < WAVE; i++)
			if (wv->ops[i].result)
				return churner_fail(st, "register %s: %s", wv->name[i],
						    procreg_strerror(wv->ops[i].result));
		st->registered += WAVE;
		for (unsigned i = 0; i < WAVE; i++)
			st->record_bytes += record_bytes(wv->name[i], wv->ops[i].meta_len);

		/* Acknowledged means published: every name is there. */
		for (unsigned i = 0; i < WAVE; i++) {
			rc = procreg_lookup(r, wv->name[i], &e);
			if (rc || e.meta_len != wv->ops[i].meta_len ||
			    memcmp(e.meta, wv->meta[i], e.meta_len) || e.pid != getpid())
				return churner_fail(st, "%s not found as registered: %s",
						    wv->name[i], rc ? procreg_strerror(rc) : "other entry");
		}

		/* Replace every other name's metadata: the old records are
		 * retired while readers may hold them. */
		for (unsigned i = 0; i < WAVE; i += 2) {
			wv->ops[n] = (struct procreg_op){ .sz = sizeof(struct procreg_op),
				.kind = PROCREG_OP_REGISTER, .name = wv->name[i], .meta = wv->meta[i],
				.meta_len = make_meta(wv->meta[i], wv->name[i], 1),
			};
			n++;
		}
		rc = procreg_batch(r, wv->ops, n);
		if (rc)
			return churner_fail(st, "batch replace: %s", procreg_strerror(rc));
		for (size_t i = 0; i < n; i++)
			if (wv->ops[i].result)
				return churner_fail(st, "replace %s: %s", wv->ops[i].name,
						    procreg_strerror(wv->ops[i].result));
		st->replaced += n;
		for (size_t i = 0; i < n; i++)
			st->record_bytes += record_bytes(wv->ops[i].name, wv->ops[i].meta_len);
		for (size_t i = 0; i < n; i += 61) {
			rc = procreg_lookup(r, wv->ops[i].name, &e);
			if (rc || e.meta_len != wv->ops[i].meta_len ||
			    memcmp(e.meta, wv->ops[i].meta, e.meta_len))
				return churner_fail(st, "%s: replaced metadata not found: %s",
						    wv->ops[i].name, rc ? procreg_strerror(rc) : "old entry");
		}

		/* The first wave stays until every reader has found a churn
		 * name at least once (polling; a failed reader counts as done),
		 * so that the torn-record check is known to have run. */
		if (pass == 0 && base == 0 &&
		    !th_until(every_reader_saw_churn, a->sh, 60000))
			return churner_fail(st, "readers found no churn name in 60 s");

		/* And remove it all. */
		for (unsigned i = 0; i < WAVE; i++)
			wv->ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_UNREGISTER,
							  .name = wv->name[i] };
		rc = procreg_batch(r, wv->ops, WAVE);
		if (rc)
			return churner_fail(st, "batch unregister: %s", procreg_strerror(rc));
		for (unsigned i = 0; i < WAVE; i++)
			if (wv->ops[i].result)
				return churner_fail(st, "unregister %s: %s", wv->name[i],
						    procreg_strerror(wv->ops[i].result));
		st->unregistered += WAVE;
		for (unsigned i = 0; i < WAVE; i += 97) {
			rc = procreg_lookup(r, wv->name[i], &e);
			if (rc != -ENOENT)
				return churner_fail(st, "%s still found after unregistering: %s",
						    wv->name[i], procreg_strerror(rc));
		}
	}
	free(wv);
	procreg_close(r);
	return 0;
}

/* ---- the test --------------------------------------------------------- */

struct fx {
	char *dir;
	struct th_daemon d;
	struct shared *sh;
	pid_t readers[NREADERS];
	pid_t churners[NCHURNERS];
	int stop[2];
	procreg_t *r;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->stop[0] = f->stop[1] = -1;
	f->dir = th_mkdtemp();
	f->sh = mmap(NULL, sizeof(*f->sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		     -1, 0);
	assert_true(f->sh != MAP_FAILED);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	for (int i = 0; i < NCHURNERS; i++)
		th_kill_wait(&f->churners[i]);
	for (int i = 0; i < NREADERS; i++)
		th_kill_wait(&f->readers[i]);
	if (f->stop[0] >= 0)
		close(f->stop[0]);
	if (f->stop[1] >= 0)
		close(f->stop[1]);
	if (f->r)
		procreg_close(f->r);
	if (f->d.pid) {
		/* The test did not get to stop it: show why it may have failed. */
		th_daemon_dump_log(&f->d);
		th_daemon_kill(&f->d);
	}
	munmap(f->sh, sizeof(*f->sh));
	th_rmrf(f->dir);
	free(f->dir);
	free(f);
	return 0;
}

static int readers_ready(void *p)
{
	struct fx *f = p;

	for (int i = 0; i < NREADERS; i++) {
		int st;

		if (__atomic_load_n(&f->sh->r[i].failed, __ATOMIC_ACQUIRE))
			return 1; /* reported below */
		if (waitpid(f->readers[i], &st, WNOHANG) == f->readers[i]) {
			f->readers[i] = 0;
			return 1;
		}
		if (!__atomic_load_n(&f->sh->r[i].ready, __ATOMIC_ACQUIRE))
			return 0;
	}
	return 1;
}

static void register_stable(struct fx *f)
{
	static char names[NSTABLE][32], metas[NSTABLE][META_BUF];
	static struct procreg_op ops[NSTABLE];

	for (unsigned i = 0; i < NSTABLE; i++) {
		stable_name(names[i], sizeof(names[i]), i);
		ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_REGISTER, .name = names[i],
					      .meta = metas[i],
					      .meta_len = make_meta(metas[i], names[i], 0) };
	}
	assert_int_equal(procreg_batch(f->r, ops, NSTABLE), 0);
	for (unsigned i = 0; i < NSTABLE; i++)
		assert_int_equal(ops[i].result, 0);
}

/* After the storm, the table holds the stable names and nothing else. */
static void check_final_table(struct fx *f)
{
	struct walk *w = calloc(1, sizeof(*w));
	TH_ENTRY(e);
	char name[64];

	assert_non_null(w);
	w->sh = f->sh;
	assert_int_equal(procreg_foreach(f->r, walk_cb, w), 0);
	assert_int_equal(w->entries, NSTABLE);
	for (unsigned i = 0; i < NSTABLE; i++) {
		assert_int_equal(w->seen[i], 1);
		stable_name(name, sizeof(name), i);
		assert_int_equal(procreg_lookup(f->r, name, &e), 0);
		assert_null(check_entry(&e, name));
	}
	free(w);
}

/* Whether the arena holds exactly the stable names' records and the
 * index: everything the churn retired has been freed. */
/* Every reader and churner process has exited and the daemon dropped its
 * pages (it learns of each exit through a pidfd); ours remain. */
static int only_our_reader(void *p)
{
	struct fx *f = p;
	PROCREG_OPTS(procreg_stats, st);

	return procreg_stats(f->r, &st) == 0 && st.reader_slots_used == 1 &&
	       th_reader_held(f->r, getpid()) == 0;
}

static int arena_settled(void *p)
{
	struct fx *f = p;
	PROCREG_OPTS(procreg_stats, st);
	uint64_t stable = 0;
	char name[64], meta[META_BUF];

	for (unsigned i = 0; i < NSTABLE; i++) {
		stable_name(name, sizeof(name), i);
		stable += record_bytes(name, make_meta(meta, name, 0));
	}
	if (procreg_stats(f->r, &st))
		return 0;
	/* The name index, the group index (empty, at its first size), the
	 * change feed's ring (8192 events in a table of the default size)
	 * and the reader registry (4096 entries by default). */
	return st.arena_used == stable + sizeof(struct pr_index) +
				st.index_capacity * sizeof(struct pr_slot) +
				sizeof(struct pr_index) + 256 * sizeof(struct pr_slot) +
				8192 * sizeof(struct pr_event) +
				4096 * sizeof(struct pr_reader_info);
}

static void test_stress(void **state)
{
	struct fx *f = *state;
	struct reader_arg ra[NREADERS];
	struct churner_arg ca[NCHURNERS];
	PROCREG_OPTS(procreg_stats, before);
	PROCREG_OPTS(procreg_stats, after);
	uint64_t lookups = 0, found = 0, walks = 0, churn_bytes = 0, replaced = 0;
	int failed = 0;

	assert_int_equal(th_daemon_start(&f->d, f->dir,
					 (const char *[]){ "--max-names-per-proc", "200000", NULL },
					 NULL), 0);
	f->r = th_open(f->dir);
	assert_non_null(f->r);
	f->sh->stable_owner = getpid();
	register_stable(f);

	/* Readers first: they are reading before the churn starts. */
	assert_int_equal(pipe2(f->stop, O_CLOEXEC), 0);
	for (int i = 0; i < NREADERS; i++) {
		ra[i] = (struct reader_arg){ .dir = f->dir, .sh = f->sh, .id = i,
					     .stop_fd = f->stop[0], .stop_wr = f->stop[1] };
		f->readers[i] = th_fork(reader, &ra[i]);
		assert_true(f->readers[i] > 0);
	}
	/* Polling for a condition, not timing: each reader has walked the
	 * table once (or failed, which is reported below). */
	assert_true(th_until(readers_ready, f, 60000));
	assert_int_equal(procreg_stats(f->r, &before), 0);
	assert_int_equal(before.names, NSTABLE);

	for (int i = 0; i < NCHURNERS; i++) {
		ca[i] = (struct churner_arg){ .dir = f->dir, .sh = f->sh, .id = i };
		f->churners[i] = fork();
		assert_true(f->churners[i] >= 0);
		if (f->churners[i] == 0) {
			close(f->stop[1]);
			f->sh->c[i].pid = getpid();
			_exit(churner(&ca[i]));
		}
	}
	for (int i = 0; i < NCHURNERS; i++) {
		int st = th_wait(f->churners[i]);

		f->churners[i] = 0;
		if (st || f->sh->c[i].failed)
			fprintf(stderr, "churner %d: exit %d: %s\n", i, st, f->sh->c[i].why);
		assert_int_equal(st, 0);
		assert_int_equal(f->sh->c[i].registered, (uint64_t)PER_CHURNER * NPASSES);
		assert_int_equal(f->sh->c[i].unregistered, (uint64_t)PER_CHURNER * NPASSES);
		churn_bytes += f->sh->c[i].record_bytes;
		replaced += f->sh->c[i].replaced;
	}

	/* Stop the readers: they see EOF on the pipe. */
	close(f->stop[1]);
	f->stop[1] = -1;
	for (int i = 0; i < NREADERS; i++) {
		struct reader_stats *st = &f->sh->r[i];
		int status = f->readers[i] ? th_wait(f->readers[i]) : -1;

		f->readers[i] = 0;
		fprintf(stderr,
			"reader %d: exit %d, %llu lookups (%llu stable, %llu churn found, "
			"%llu churn absent), %llu walks (%llu entries)%s%s\n",
			i, status, (unsigned long long)st->lookups,
			(unsigned long long)st->stable_found, (unsigned long long)st->churn_found,
			(unsigned long long)st->churn_absent, (unsigned long long)st->walks,
			(unsigned long long)st->walk_entries, st->failed ? ": FAILED: " : "",
			st->failed ? st->why : "");
		if (status || st->failed || !st->lookups || !st->walks || !st->churn_found)
			failed++;
		lookups += st->lookups;
		found += st->churn_found;
		walks += st->walks;
	}
	assert_int_equal(failed, 0);
	assert_true(lookups > 0 && found > 0 && walks > 0);

	/* The churn is gone, the stable names remain, and memory was
	 * reclaimed along the way. */
	assert_int_equal(procreg_sync(f->r), 0);
	assert_int_equal(procreg_stats(f->r, &after), 0);
	fprintf(stderr,
		"stats: names %llu, registrations %llu, unregistrations %llu, grace periods "
		"%llu (%llu before churn), index %llu, arena used %llu, top %llu\n",
		(unsigned long long)after.names, (unsigned long long)after.registrations,
		(unsigned long long)after.unregistrations, (unsigned long long)after.grace_periods,
		(unsigned long long)before.grace_periods, (unsigned long long)after.index_capacity,
		(unsigned long long)after.arena_used, (unsigned long long)after.arena_top);
	assert_int_equal(after.names, NSTABLE);
	assert_int_equal(after.processes, 1);
	assert_int_equal(after.registrations, before.registrations +
			 (uint64_t)NCHURN * NPASSES + replaced);
	assert_int_equal(after.unregistrations, before.unregistrations +
			 (uint64_t)NCHURN * NPASSES);
	assert_true(after.grace_periods > 0);
	assert_true(after.grace_periods > before.grace_periods);
	/* Freed records were reused: the arena never came near holding every
	 * record the churn made. */
	assert_true(after.arena_top < churn_bytes / 2);
	assert_int_equal(procreg_lookup(f->r, "our page", NULL), -ENOENT);
	if (!th_until(only_our_reader, f, 10000)) {
		procreg_stats(f->r, &after);
		th_daemon_dump_log(&f->d);
		fail_msg("reader processes the daemon holds: %llu, ours held: %d (announced %llu, gen %llu, pages %u, pages_pid %d, pid %d)",
			 (unsigned long long)after.reader_slots_used,
			 th_reader_held(f->r, getpid()), (unsigned long long)f->r->rcu.announced,
			 (unsigned long long)f->r->map.hdr->daemon_gen, f->r->rcu.npages,
			 (int)f->r->rcu.pages_pid, (int)getpid());
	}
	/* And with nobody writing, the daemon's timer finishes reclaiming:
	 * what is in use is the stable names and the index (polling). */
	assert_true(th_until(arena_settled, f, 10000));
	check_final_table(f);

	procreg_close(f->r);
	f->r = NULL;
	assert_int_equal(th_daemon_stop(&f->d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stress, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
