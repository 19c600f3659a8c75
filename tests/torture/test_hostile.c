/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_hostile.c - an unprivileged local user against a root daemon and
 * root readers and writers: what the files and the reader pages let it
 * do, and what they do not.
 *
 * Each attacker is an account the test makes (th_user_new), acting in a
 * forked child that became it (th_become). The victims are root: a daemon
 * serving a directory as open as /dev/shm (mode 1777), a writer churning
 * metadata so that memory is retired and reused all the time, and readers
 * that check every answer: a hit must be the name asked for, with the
 * metadata that name was given (the metadata names its name and a version,
 * under a checksum), so that a read of reused memory shows.
 *
 * Needs root (CI runs as root): it fails otherwise.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "harness.h"
#include "internal.h"
#include "proto.h"

#define NAMES 64
#define WAIT_MS 30000

/* ---- what every process shares ----------------------------------------- */

struct shared {
	volatile int stop;
	uint64_t lookups, hits, wrong, writes, write_errors;
	char why[256];
};

struct fx {
	char *dir;
	struct th_daemon d;
	procreg_t *reg;
	struct shared *sh;
	struct th_user u[4];
	int nusers;
	pid_t kids[64];
	int nkids;
	pid_t victims[2];
};

static procreg_t *open_dir(const char *dir)
{
	PROCREG_OPTS(procreg_opts, o, .dir = dir, .scope = "default");

	return procreg_open(&o);
}

/* A directory as open as /dev/shm: anyone may create files, only their
 * owner (or root) may remove them. */
static char *shared_dir(void)
{
	char *d = th_mkdtemp();

	assert_int_equal(chmod(d, 01777), 0);
	return d;
}

static int start(void **state, const char *const *args)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (geteuid() != 0)
		fail_msg("test_hostile needs root, to make its attackers (CI runs as root)");
	assert_non_null(f);
	f->dir = shared_dir();
	f->sh = th_shared(sizeof(*f->sh));
	if (args) {
		if (th_daemon_start(&f->d, f->dir, args, NULL) != 0) {
			th_daemon_dump_log(&f->d);
			fail_msg("procregd did not start");
		}
		f->reg = open_dir(f->dir);
		assert_non_null(f->reg);
	}
	*state = f;
	return 0;
}

static int setup(void **state)
{
	static const char *const args[] = { "--reader-timeout-ms", "500", NULL };

	return start(state, args);
}

static int setup_quota(void **state)
{
	static const char *const args[] = { "--max-readers", "16", "--max-readers-per-uid", "4",
					    NULL };

	return start(state, args);
}

/* A page budget small enough to fill: 32 pages, 4 of them kept for root,
 * 8 a uid. */
static int setup_pages(void **state)
{
	static const char *const args[] = { "--max-reader-pages", "32",
					    "--max-reader-pages-per-uid", "8", NULL };

	return start(state, args);
}

/* A table small enough to fill: 4 MiB, 256 KiB of it kept for root. */
static int setup_small(void **state)
{
	static const char *const args[] = { "--max-size", "4M", "--reserved-size", "256K", NULL };

	return start(state, args);
}

static int setup_bare(void **state)
{
	return start(state, NULL);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int st = 0;

	f->sh->stop = 1;
	for (int i = 0; i < f->nkids; i++)
		th_kill_wait(&f->kids[i]);
	if (f->reg)
		procreg_close(f->reg);
	if (f->d.pid)
		st = th_daemon_stop_dump(&f->d);
	for (int i = 0; i < f->nusers; i++)
		th_user_del(&f->u[i]);
	th_rmrf(f->dir);
	free(f->dir);
	munmap(f->sh, sizeof(*f->sh));
	free(f);
	assert_int_equal(st, 0);
	return 0;
}

static struct th_user *user(struct fx *f)
{
	assert_true(f->nusers < 4);
	th_user_new(&f->u[f->nusers]);
	return &f->u[f->nusers++];
}

static pid_t kid(struct fx *f, int (*fn)(void *), void *arg)
{
	pid_t pid = th_fork(fn, arg);

	assert_true(pid > 0);
	assert_true(f->nkids < 64);
	f->kids[f->nkids++] = pid;
	return pid;
}

/* Wait for a kid of ours (it leaves the list): its status. */
static int kid_wait(struct fx *f, pid_t pid)
{
	for (int i = 0; i < f->nkids; i++)
		if (f->kids[i] == pid)
			f->kids[i] = f->kids[--f->nkids];
	return th_wait(pid);
}

/* ---- names whose metadata says what they are --------------------------- */

static uint32_t sum(const char *s, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h;
}

static void name_of(char *out, size_t cap, int i)
{
	snprintf(out, cap, "victim.%03d", i);
}

/* "NAME|VERSION|SUM(NAME|VERSION)|padding": a record of another name, or
 * a mixture of two records, does not pass meta_ok(). Some versions carry
 * long padding, so that records of several sizes are retired and reused. */
static size_t meta_of(const char *name, uint64_t version, char *out, size_t cap)
{
	int n = snprintf(out, cap, "%s|%llu|", name, (unsigned long long)version);
	size_t pad = (version % 3) * 100;

	n += snprintf(out + n, cap - (size_t)n, "%08x|", sum(out, (size_t)n));
	for (size_t i = 0; i < pad && (size_t)n + 1 < cap; i++)
		out[n++] = (char)('a' + (version + i) % 26);
	return (size_t)n;
}

static bool meta_ok(const struct procreg_entry *e, const char *name)
{
	char buf[PROCREG_META_MAX + 1], *bar, *bar2;
	unsigned long long v;
	unsigned int s;

	if (strcmp(e->name, name) || e->meta_len == 0 || e->meta_len > PROCREG_META_MAX)
		return false;
	memcpy(buf, e->meta, e->meta_len);
	buf[e->meta_len] = 0;
	bar = strchr(buf, '|');
	if (!bar || (size_t)(bar - buf) != strlen(name) || memcmp(buf, name, strlen(name)))
		return false;
	if (sscanf(bar + 1, "%llu|%8x|", &v, &s) != 2)
		return false;
	bar2 = strchr(bar + 1, '|');
	if (!bar2)
		return false;
	if (s != sum(buf, (size_t)(bar2 - buf + 1)))
		return false;
	(void)v;
	return true;
}

/* ---- the victims -------------------------------------------------------- */

struct victim_arg {
	const char *dir;
	struct shared *sh;
};

/* Root's writer: every name re-registered with new metadata, over and
 * over, in batches; each update retires the old record. */
static int churn_main(void *p)
{
	struct victim_arg *a = p;
	procreg_t *r = open_dir(a->dir);
	static char names[NAMES][32], metas[NAMES][PROCREG_META_MAX];
	struct procreg_op ops[NAMES];
	uint64_t version = 1;

	if (!r)
		return 10;
	for (int i = 0; i < NAMES; i++)
		name_of(names[i], sizeof(names[i]), i);
	while (!a->sh->stop) {
		for (int i = 0; i < NAMES; i++) {
			size_t ml = meta_of(names[i], version, metas[i], sizeof(metas[i]));

			ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_REGISTER, .name = names[i],
						      .meta = metas[i], .meta_len = ml };
		}
		if (procreg_batch(r, ops, NAMES) != 0)
			__atomic_add_fetch(&a->sh->write_errors, 1, __ATOMIC_RELAXED);
		for (int i = 0; i < NAMES; i++)
			if (ops[i].result != 0)
				__atomic_add_fetch(&a->sh->write_errors, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&a->sh->writes, NAMES, __ATOMIC_RELAXED);
		version++;
	}
	procreg_close(r);
	return 0;
}

/* Check one lookup of name I through R. */
static void check_one(procreg_t *r, struct shared *sh, int i, uint64_t *lookups)
{
	TH_ENTRY(e);
	char name[32];
	int rc;

	name_of(name, sizeof(name), i);
	rc = procreg_lookup(r, name, &e);
	(*lookups)++;
	if (rc == -ENOENT)
		return;
	if (rc != 0 || !meta_ok(&e, name)) {
		if (!sh->wrong)
			snprintf(sh->why, sizeof(sh->why), "lookup %s: %d, got '%.40s' meta '%.*s'",
				 name, rc, e.name, (int)(e.meta_len > 60 ? 60 : e.meta_len),
				 (const char *)e.meta);
		__atomic_add_fetch(&sh->wrong, 1, __ATOMIC_RELAXED);
		return;
	}
	__atomic_add_fetch(&sh->hits, 1, __ATOMIC_RELAXED);
}

/* Root's reader: looks every name up and checks every answer. */
static int reader_main(void *p)
{
	struct victim_arg *a = p;
	procreg_t *r = open_dir(a->dir);
	uint64_t n = 0;

	if (!r)
		return 10;
	for (int i = 0; !a->sh->stop; i = (i + 1) % NAMES) {
		check_one(r, a->sh, i, &n);
		if (!(n & 1023))
			__atomic_add_fetch(&a->sh->lookups, 1024, __ATOMIC_RELAXED);
	}
	procreg_close(r);
	return 0;
}

/* The victims' writer and reader, running until sh->stop. */
static void victims_start(struct fx *f, struct victim_arg *a)
{
	a->dir = f->dir;
	a->sh = f->sh;
	f->victims[0] = kid(f, churn_main, a);
	f->victims[1] = kid(f, reader_main, a);
}

/* Stop the victims (the attackers live on) and check what they saw. */
static void victims_check(struct fx *f, uint64_t min_lookups)
{
	f->sh->stop = 1;
	for (int i = 0; i < 2; i++)
		if (f->victims[i])
			assert_int_equal(kid_wait(f, f->victims[i]), 0);
	print_message("victims: %llu lookups (%llu hits), %llu writes; %llu wrong answers, "
		      "%llu failed writes\n", (unsigned long long)f->sh->lookups,
		      (unsigned long long)f->sh->hits, (unsigned long long)f->sh->writes,
		      (unsigned long long)f->sh->wrong, (unsigned long long)f->sh->write_errors);
	if (f->sh->wrong)
		fail_msg("a wrong answer: %s", f->sh->why);
	/* The honest reader, in and out of short read-side sections all the
	 * time, was never taken for one that stalls. */
	if (f->victims[1]) {
		char key[64];

		snprintf(key, sizeof(key), "reader pid %d ", (int)f->victims[1]);
		if (th_log_has(f->d.log, key)) {
			th_daemon_dump_log(&f->d);
			fail_msg("an honest reader was set aside");
		}
	}
	assert_int_equal(f->sh->write_errors, 0);
	assert_true(f->sh->lookups >= min_lookups);
	assert_true(f->sh->hits > 0);
	assert_true(f->sh->writes > 0);
}

static int grace_periods_past(void *p)
{
	struct fx *f = p;

	return f->reg->map.hdr->grace_periods > 50;
}

/* ---- attackers ---------------------------------------------------------- */

struct attack_arg {
	const char *dir;
	const struct th_user *u;
	int ready;                  /* write end: a byte once set up */
	int mode;                   /* what to do with its own page */
};

enum { PIN, SCRIBBLE };

/* As the attacker: open the scope, read once (the page goes to the
 * daemon), then abuse the only memory it may write, its own page. */
static int attacker_main(void *p)
{
	struct attack_arg *a = p;
	struct pr_reader_slot *s;
	struct pr_rpage_hdr *h;
	procreg_t *r;
	uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	char c = 1;

	th_become(a->u);
	r = open_dir(a->dir);
	if (!r)
		return 20;
	if (procreg_lookup(r, "victim.000", NULL) < -ENOENT)
		return 21;
	s = procreg__rcu_slot(&r->rcu);
	h = (struct pr_rpage_hdr *)((uintptr_t)s & ~(uintptr_t)(PR_RPAGE_SIZE - 1));
	if (a->mode == PIN)
		/* Inside a critical section for good, at the oldest counter
		 * there is: every grace period would wait for it. */
		CMM_STORE_SHARED(s->ctr, 1);
	if (write(a->ready, &c, 1) != 1)
		return 22;
	for (;;) {
		if (a->mode == SCRIBBLE) {
			/* Anything, anywhere in its page: slots, counters, the
			 * high-water mark, the closed flag. */
			uint64_t *w = (uint64_t *)h;

			for (size_t i = 0; i < PR_RPAGE_SIZE / 8; i++)
				w[i] = th_xorshift(&x);
			CMM_STORE_SHARED(h->hw, (uint32_t)th_xorshift(&x));
		} else {
			pause();
		}
	}
	return 0;
}

static pid_t attacker(struct fx *f, const struct th_user *u, int mode)
{
	struct attack_arg a = { .dir = f->dir, .u = u, .mode = mode };
	int p[2];
	char c;
	pid_t pid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	a.ready = p[1];
	pid = kid(f, attacker_main, &a);
	close(p[1]);
	{
		ssize_t n;

		while ((n = read(p[0], &c, 1)) < 0 && errno == EINTR)
			;
		if (n != 1)
			fail_msg("the attacker failed to set up: read %zd (%s), status %d", n,
				 strerror(errno), kid_wait(f, pid));
	}
	close(p[0]);
	return pid;
}

/* ---- a pinned slot ---------------------------------------------------- */

struct stalled {
	struct fx *f;
	pid_t pid;
};

static int stalled_in_registry(void *p)
{
	struct stalled *s = p;
	const struct pr_table_hdr *h = s->f->reg->map.hdr;
	const struct pr_reader_info *v =
		(const struct pr_reader_info *)(s->f->reg->map.base + h->readers_off);

	for (uint32_t i = 0; i < h->readers_cap; i++)
		if (CMM_LOAD_SHARED(v[i].pid) == (uint32_t)s->pid &&
		    (CMM_LOAD_SHARED(v[i].flags) & PR_READER_STALLED))
			return 1;
	return 0;
}

/*
 * An attacker holds a read-side section open for good (a pinned slot),
 * while root churns. Before: every grace period, every user's writes
 * held back until the table filled (-ENOSPC for root too). Now the daemon
 * stops waiting for it after --reader-timeout-ms, names it, and reclaims;
 * root's writes and reads go on, right.
 */
static void test_pinned_slot(void **state)
{
	struct fx *f = *state;
	struct th_user *u = user(f);
	struct victim_arg va;
	struct stalled st;
	pid_t bad;
	uint64_t gps;
	char key[160];
	struct th_out *o = calloc(1, sizeof(*o));

	assert_non_null(o);
	bad = attacker(f, u, PIN);
	victims_start(f, &va);
	st = (struct stalled){ f, bad };
	if (!th_until(stalled_in_registry, &st, WAIT_MS)) {
		th_daemon_dump_log(&f->d);
		fail_msg("the pinning reader was never set aside");
	}
	gps = f->reg->map.hdr->grace_periods;
	/* Grace periods go on (the churn retires memory all the time). */
	{
		uint64_t want = gps + 20;

		for (int i = 0; i < WAIT_MS && f->reg->map.hdr->grace_periods < want; i++)
			th_msleep(1);
		assert_true(f->reg->map.hdr->grace_periods >= want);
	}
	victims_check(f, 1000);
	/* Named in the log, in procreg readers and in procreg stats. */
	snprintf(key, sizeof(key), "reader pid %d (uid %u) has held a grace period up for ",
		 (int)bad, (unsigned)u->uid);
	assert_true(th_log_has(f->d.log, key));
	{
		const char *argv[] = { PROCREG_CLI_PATH, "--dir", f->dir, "readers", NULL };

		assert_int_equal(th_run(o, NULL, argv), 0);
		snprintf(key, sizeof(key), "%8d %8u ", (int)bad, (unsigned)u->uid);
		assert_non_null(strstr(o->out, key));
		assert_non_null(strstr(strstr(o->out, key), " yes "));
	}
	{
		const char *argv[] = { PROCREG_CLI_PATH, "--dir", f->dir, "stats", NULL };

		assert_int_equal(th_run(o, NULL, argv), 0);
		/* The last one set aside is the attacker, unless a victim
		 * reader was also kept from running inside a lookup for the
		 * whole timeout, on a loaded machine. */
		snprintf(key, sizeof(key), "(last: pid %d, uid %u, ", (int)bad, (unsigned)u->uid);
		if (!strstr(o->out, key) &&
		    !(strstr(o->out, "(last: pid ") && th_log_has(f->d.log, "reader pid ")))
			fail_msg("stats does not name the stalled reader:\n%s", o->out);
	}
	/* The table did not fill: memory retired during the pin was reused. */
	assert_true(f->reg->map.hdr->arena_used < 8u << 20);
	free(o);
}

struct log_wait {
	const char *path, *needle;
};

static int log_says(void *p)
{
	const struct log_wait *w = p;

	return th_log_has(w->path, w->needle);
}

/*
 * One pinning process after another, each starting once the last was
 * set aside: each used to get the whole --reader-timeout-ms, so a user
 * could hold every grace period up for as long as it liked while its own
 * churn retired memory that nothing freed, and other users' names were
 * refused for a full table. Now a uid whose reader was given up on does
 * not get the timeout for its next ones: the second pinner is set aside
 * at once (the log says so), and the honest readers never.
 */
static void test_pinned_relay(void **state)
{
	struct fx *f = *state;
	struct th_user *u = user(f);
	struct victim_arg va;
	struct stalled st;
	struct log_wait lw;
	char key[160];
	pid_t bad;

	victims_start(f, &va);
	bad = attacker(f, u, PIN);
	st = (struct stalled){ f, bad };
	if (!th_until(stalled_in_registry, &st, WAIT_MS))
		fail_msg("the first pinning reader was never set aside");
	/* A second later: its line is not held back by the first one's. */
	th_msleep(1100);
	bad = attacker(f, u, PIN);
	st = (struct stalled){ f, bad };
	if (!th_until(stalled_in_registry, &st, WAIT_MS))
		fail_msg("the second pinning reader was never set aside");
	snprintf(key, sizeof(key), "reader pid %d (uid %u) has held a grace period up for ",
		 (int)bad, (unsigned)u->uid);
	lw = (struct log_wait){ f->d.log, key };
	if (!th_until(log_says, &lw, WAIT_MS)) {
		th_daemon_dump_log(&f->d);
		fail_msg("no line about the second pinner");
	}
	if (!th_log_has(f->d.log, "not for a uid whose reader was given up on within")) {
		th_daemon_dump_log(&f->d);
		fail_msg("the second pinner had the whole timeout");
	}
	victims_check(f, 1000);
}

/* Garbage all over the attacker's own page, again and again, while root
 * churns: the daemon reads only what it bounded itself, so nothing it
 * does with the page goes wrong for anyone else. */
static void test_scribbled_own_page(void **state)
{
	struct fx *f = *state;
	struct th_user *u = user(f);
	struct victim_arg va;

	attacker(f, u, SCRIBBLE);
	victims_start(f, &va);
	assert_true(th_until(grace_periods_past, f, WAIT_MS));
	th_msleep(1000);
	/* The daemon still serves: a write and a lookup of root's. */
	assert_int_equal(procreg_register(f->reg, "still.here", "1", 1), 0);
	assert_int_equal(procreg_lookup(f->reg, "still.here", NULL), 0);
	victims_check(f, 1000);
}

/* ---- a reader that clears its own slot -------------------------------- */

/* Shared by the process's threads: its words are accessed atomically
 * (the slot's pointer handed over with release and acquire). */
struct tamper {
	procreg_t *r;
	struct shared *sh;
	struct pr_reader_slot *slot;
	uint64_t lookups;
};

static bool tamper_stopped(const struct tamper *t)
{
	return __atomic_load_n(&t->sh->stop, __ATOMIC_RELAXED);
}

static void *tamper_reader(void *p)
{
	struct tamper *t = p;
	uint64_t n = 0;

	__atomic_store_n(&t->slot, procreg__rcu_slot(&t->r->rcu), __ATOMIC_RELEASE);
	for (int i = 0; !tamper_stopped(t); i = (i + 1) % NAMES) {
		check_one(t->r, t->sh, i, &n);
		__atomic_store_n(&t->lookups, n, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* Its other thread stores 0 in the reader's slot as fast as it can: the
 * daemon then frees memory under reads it does not know of. Those stores
 * race the library's own to the slot, by design: the attack is the race,
 * which the daemon and the reader have to survive. Left out of a
 * ThreadSanitizer build's view, which would report it and stop. */
__attribute__((no_sanitize_thread)) static void *tamper_clear(void *p)
{
	struct tamper *t = p;
	struct pr_reader_slot *s;

	while (!(s = __atomic_load_n(&t->slot, __ATOMIC_ACQUIRE)))
		;
	while (!tamper_stopped(t))
		CMM_STORE_SHARED(s->ctr, 0);
	return NULL;
}

/* The floor of lookups the self-clearing reader makes, for the attack to
 * have had its chances beside the reads caught on reused memory; a
 * sanitizer's build does a tenth as many in the minute it has (under
 * ThreadSanitizer, with the CPUs busy, 1.3 million were seen). */
#define OWN_SLOT_LOOKUPS (TH_SANITIZED ? 200000 : 2000000)

static int tamper_main(void *p)
{
	struct victim_arg *a = p;
	struct tamper t = { .r = open_dir(a->dir), .sh = a->sh };
	pthread_t r, c;
	uint64_t stale = 0;

	if (!t.r)
		return 10;
	pthread_create(&r, NULL, tamper_reader, &t);
	pthread_create(&c, NULL, tamper_clear, &t);
	/* Until reads were caught on reused memory (and redone), with a
	 * floor of lookups, or a minute. */
	for (int i = 0; i < 60000; i++) {
		stale = __atomic_load_n(&t.r->rcu.stale, __ATOMIC_RELAXED);
		if (stale >= 20 && __atomic_load_n(&t.lookups, __ATOMIC_RELAXED) >= OWN_SLOT_LOOKUPS)
			break;
		th_msleep(1);
	}
	__atomic_store_n(&a->sh->stop, 1, __ATOMIC_RELAXED);
	pthread_join(r, NULL);
	pthread_join(c, NULL);
	a->sh->lookups = t.lookups;
	a->sh->writes += 0;
	fprintf(stderr, "self-cleared slot: %llu lookups, %llu of them caught on reused memory "
		"and redone\n", (unsigned long long)t.lookups, (unsigned long long)stale);
	procreg_close(t.r);
	return stale >= 20 ? 0 : 11;
}

/* Never a wrong answer, even for a reader whose own slot lies: reads
 * under which memory was reused are caught and done again. Without that
 * check, such a reader returned entries of other names, or torn
 * metadata. */
static void test_own_slot_cleared(void **state)
{
	struct fx *f = *state;
	struct victim_arg va = { f->dir, f->sh };
	pid_t t;

	f->victims[0] = kid(f, churn_main, &va);
	t = kid(f, tamper_main, &va);
	assert_int_equal(kid_wait(f, t), 0);
	victims_check(f, OWN_SLOT_LOOKUPS);
}

/* ---- every reader slot ------------------------------------------------ */

struct hog_arg {
	const char *dir;
	const struct th_user *u;   /* NULL: root */
};

/* A reader process that holds its page at the daemon until let go,
 * reading right all along. */
static int hog_main(void *p, int phase)
{
	static procreg_t *r;
	struct hog_arg *a = p;

	if (phase == 0) {
		if (a->u)
			th_become(a->u);
		r = open_dir(a->dir);
		return r && procreg_lookup(r, "root.name", NULL) == 0 ? 0 : 10;
	}
	for (int i = 0; i < 100; i++)
		if (procreg_lookup(r, "root.name", NULL) != 0)
			return 13;
	procreg_close(r);
	return 0;
}

/* Registry entries of UID. */
static int registered_of(struct fx *f, uid_t uid)
{
	const struct pr_table_hdr *h = f->reg->map.hdr;
	const struct pr_reader_info *v =
		(const struct pr_reader_info *)(f->reg->map.base + h->readers_off);
	int n = 0;

	for (uint32_t i = 0; i < h->readers_cap; i++)
		n += CMM_LOAD_SHARED(v[i].pid) && CMM_LOAD_SHARED(v[i].uid) == uid;
	return n;
}

struct entry_want {
	struct fx *f;
	uint32_t live;
};

static int live_at_least(void *p)
{
	struct entry_want *w = p;

	return CMM_LOAD_SHARED(w->f->reg->map.hdr->readers_live) >= w->live;
}

static bool registered(struct fx *f, pid_t pid)
{
	const struct pr_table_hdr *h = f->reg->map.hdr;
	const struct pr_reader_info *v =
		(const struct pr_reader_info *)(f->reg->map.base + h->readers_off);

	for (uint32_t i = 0; i < h->readers_cap; i++)
		if (CMM_LOAD_SHARED(v[i].pid) == (uint32_t)pid)
			return true;
	return false;
}

/*
 * Four users try to take every reader slot: five reader processes each,
 * against --max-readers 16 and --max-readers-per-uid 4. Each gets four at
 * most, and together they leave two (an eighth) to root, whose readers
 * still get in. Every process reads right, refused or not.
 */
static void test_take_every_slot(void **state)
{
	struct fx *f = *state;
	struct hog_arg a = { .dir = f->dir };
	struct entry_want w = { f, 14 };
	pid_t rootkid;
	struct th_held h;

	assert_int_equal(procreg_register(f->reg, "root.name", NULL, 0), 0);
	th_held_init(&h);
	for (int k = 0; k < 4; k++) {
		a.u = user(f);
		for (int i = 0; i < 5; i++)
			th_held_start(&h, hog_main, &a);
	}
	th_held_ready(&h, WAIT_MS);
	if (!th_until(live_at_least, &w, WAIT_MS)) {
		th_held_kill(&h);
		fail_msg("readers_live %u", f->reg->map.hdr->readers_live);
	}
	/* Theirs: 14 at most, whatever they do. */
	th_msleep(200);
	assert_int_equal(f->reg->map.hdr->readers_live, 14);
	assert_true(f->reg->map.hdr->readers_refused >= 6);
	/* Four a user at most, by the registry; refusals logged (one line a
	 * second at most, with a count of those not shown). */
	for (int k = 0; k < 4; k++)
		assert_true(registered_of(f, f->u[k].uid) <= 4);
	assert_true(th_log_has(f->d.log, ") refused: "));
	/* Root's: this process and one more get in. */
	assert_int_equal(procreg_lookup(f->reg, "root.name", NULL), 0);
	a.u = NULL;
	rootkid = th_held_start(&h, hog_main, &a);
	th_held_ready(&h, WAIT_MS);
	w.live = 16;
	if (!th_until(live_at_least, &w, WAIT_MS)) {
		th_held_kill(&h);
		fail_msg("root's readers were kept out: readers_live %u",
			 f->reg->map.hdr->readers_live);
	}
	assert_true(registered(f, getpid()));
	assert_true(registered(f, rootkid));
	assert_int_equal(th_held_release(&h), 0);
}

/* ---- reader pages: a mapping each in the daemon ------------------------ */

#define PAGE_HANDLES 12

struct pages_arg {
	const char *dir;
	const struct th_user *u;   /* NULL: root */
	int handles;
};

/* A reader process with HANDLES handles, each of which makes a page of
 * its own at its first read and hands it over: whether or not the daemon
 * takes it, every read through every handle is right, and every handle
 * registers. */
static int pages_main(void *p, int phase)
{
	static procreg_t *r[PAGE_HANDLES];
	struct pages_arg *a = p;
	char name[64];

	if (phase == 0) {
		if (a->u)
			th_become(a->u);
		for (int i = 0; i < a->handles; i++) {
			r[i] = open_dir(a->dir);
			if (!r[i] || procreg_lookup(r[i], "root.name", NULL) != 0)
				return 10;
		}
		return 0;
	}
	for (int i = 0; i < a->handles; i++) {
		snprintf(name, sizeof(name), "pages.%d.%d", (int)getpid(), i);
		if (procreg_register(r[i], name, NULL, 0) != 0)
			return 11;
	}
	for (int k = 0; k < 100; k++) {
		for (int i = 0; i < a->handles; i++) {
			snprintf(name, sizeof(name), "pages.%d.%d", (int)getpid(),
				 (i + k) % a->handles);
			if (procreg_lookup(r[i], "root.name", NULL) != 0 ||
			    procreg_lookup(r[i], name, NULL) != 0 ||
			    procreg_lookup(r[i], "nobody", NULL) != -ENOENT)
				return 12;
		}
	}
	for (int i = 0; i < a->handles; i++)
		procreg_close(r[i]);
	return 0;
}

/* Pages the daemon holds for processes of UID (-1: of every uid but
 * root), by the table's reader registry. */
static unsigned pages_of(struct fx *f, long uid)
{
	const struct pr_table_hdr *h = f->reg->map.hdr;
	const struct pr_reader_info *v =
		(const struct pr_reader_info *)(f->reg->map.base + h->readers_off);
	unsigned n = 0;

	for (uint32_t i = 0; i < h->readers_cap; i++) {
		uint32_t u = CMM_LOAD_SHARED(v[i].uid);

		if (CMM_LOAD_SHARED(v[i].pid) && (uid < 0 ? u != 0 : u == (uint32_t)uid))
			n += CMM_LOAD_SHARED(v[i].pages);
	}
	return n;
}

/* Pages PID has at the daemon (0: none, or no entry). */
static unsigned pages_of_pid(struct fx *f, pid_t pid)
{
	const struct pr_table_hdr *h = f->reg->map.hdr;
	const struct pr_reader_info *v =
		(const struct pr_reader_info *)(f->reg->map.base + h->readers_off);

	for (uint32_t i = 0; i < h->readers_cap; i++)
		if (CMM_LOAD_SHARED(v[i].pid) == (uint32_t)pid)
			return CMM_LOAD_SHARED(v[i].pages);
	return 0;
}

struct pages_want {
	struct fx *f;
	long uid;
	unsigned pages;
	uint64_t refused;
};

static int pages_at_least(void *p)
{
	struct pages_want *w = p;

	return pages_of(w->f, w->uid) >= w->pages &&
	       CMM_LOAD_SHARED(w->f->reg->map.hdr->readers_refused) >= w->refused;
}

static long maps_of(pid_t pid)
{
	char path[64], line[512];
	long n = 0;
	FILE *fp;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	fp = fopen(path, "re");
	assert_non_null(fp);
	while (fgets(line, sizeof(line), fp))
		n++;
	fclose(fp);
	return n;
}

/* A reader page as rcu.c's page_new() makes it: its fd, or -1 (no
 * cmocka check: a kid calls it too). */
static int make_page(void)
{
	int fd = memfd_create("procreg-reader", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	struct pr_rpage_hdr *h;

	if (fd < 0)
		return -1;
	if (ftruncate(fd, PR_RPAGE_SIZE) < 0 || fallocate(fd, 0, 0, PR_RPAGE_SIZE) < 0)
		goto fail;
	h = mmap(NULL, PR_RPAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		goto fail;
	h->layout_version = PR_LAYOUT_VERSION;
	h->nslots = PR_RPAGE_SLOTS;
	h->size_desc = PR_SIZE_DESC;
	h->magic = PR_RPAGE_MAGIC;
	munmap(h, PR_RPAGE_SIZE);
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0)
		goto fail;
	return fd;
fail:
	close(fd);
	return -1;
}

static int raw_page(void)
{
	int fd = make_page();

	assert_true(fd >= 0);
	return fd;
}

/* One READERS passing the page FD on the raw connection S: the status,
 * or PAGE_NOT_SENT (no cmocka check: a kid calls it too). */
#define PAGE_NOT_SENT 1000
static int send_page_fd(int s, int fd)
{
	uint8_t pkt[64], in[256];
	size_t len = 0, pos = 0;
	struct pr_frame fr;
	ssize_t n;

	procreg__proto_put(pkt, &len, PR_OP_READERS, 0, 7, 0, NULL, 0, NULL, 0);
	if (th_send_fd(s, pkt, len, fd) != (ssize_t)len)
		return PAGE_NOT_SENT;
	n = recv(s, in, sizeof(in), 0);
	if (n <= 0 || procreg__proto_next(in, (size_t)n, &pos, &fr) != 1)
		return PAGE_NOT_SENT;
	return fr.h.status;
}

/* One READERS with a new page, on the raw connection S: the status. */
static int raw_send_page(int s)
{
	int fd = raw_page(), st = send_page_fd(s, fd);

	close(fd);
	assert_int_not_equal(st, PAGE_NOT_SENT);
	return st;
}

/* What a kid acting as U is given: the table's directory, and a pipe's
 * write end to report on. */
struct user_arg {
	const char *dir;
	const struct th_user *u;
	int ready_fd;
};

/* As U: a page sent four times (taken once, then EEXIST), then another
 * page twice; a byte on READY_FD, and held until killed. */

static int page_again_main(void *p)
{
	const struct user_arg *a = p;
	int s, fd, fd2;
	char c = 0;

	th_become(a->u);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() == 1)
		return 10;
	s = th_raw_try_connect(a->dir);
	if (s < 0 || th_raw_try_hello(s) != 0)
		return 11;
	fd = make_page();
	fd2 = make_page();
	if (fd < 0 || fd2 < 0)
		return 12;
	if (send_page_fd(s, fd) != 0)
		return 13;
	for (int i = 0; i < 3; i++)
		if (send_page_fd(s, fd) != -EEXIST)
			return 14;
	if (send_page_fd(s, fd2) != 0)
		return 15;
	if (send_page_fd(s, fd2) != -EEXIST)
		return 16;
	if (write(a->ready_fd, &c, 1) != 1)
		return 17;
	for (;;)
		pause();
}

static int pages_are(void *p)
{
	struct pages_want *w = p;

	return pages_of(w->f, w->uid) == w->pages;
}

/*
 * A page sent again is kept once, whoever sends it and however often
 * (each is a probe of the daemon's set of pages, not a pass over all of
 * them). The pages of a process that died are dropped from that set
 * too: the next process of the uid, sending the same way, gets the same
 * answers, and its two pages held.
 */
static void test_page_sent_again(void **state)
{
	struct fx *f = *state;
	struct th_user *u = user(f);
	struct user_arg a = { .dir = f->dir, .u = u };
	struct pages_want w = { .f = f, .uid = (long)u->uid, .pages = 2 };
	int ready[2];
	char c;

	for (int round = 0; round < 2; round++) {
		pid_t pid;

		assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
		a.ready_fd = ready[1];
		pid = kid(f, page_again_main, &a);
		close(ready[1]);
		if (read(ready[0], &c, 1) != 1)
			fail_msg("round %d: the sender failed: status %d", round, kid_wait(f, pid));
		close(ready[0]);
		w.pages = 2;
		if (!th_until(pages_are, &w, WAIT_MS))
			fail_msg("round %d: %u pages of the uid held, not 2", round,
				 pages_of(f, (long)u->uid));
		kill(pid, SIGKILL);
		assert_int_equal(kid_wait(f, pid), 128 + SIGKILL);
		w.pages = 0;
		if (!th_until(pages_are, &w, WAIT_MS))
			fail_msg("round %d: %u pages of the uid held after its death", round,
				 pages_of(f, (long)u->uid));
	}
}

/* ---- an arena left in pieces of one size ------------------------------- */

#define FRAG_SIZES 4
#define FRAG_VICTIM_NAMES 2000

/* As U: names with metadata of FRAG_SIZES sizes near 1 KiB (a size class
 * each) until the daemon refuses one; their number on READY_FD; then held
 * until killed. */
static int frag_attacker(void *p)
{
	const struct user_arg *a = p;
	static char meta[1024];
	procreg_t *r;
	char name[32];
	int n = 0, err;

	th_become(a->u);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() == 1)
		return 10;
	r = open_dir(a->dir);
	if (!r)
		return 11;
	memset(meta, 'f', sizeof(meta));
	do {
		snprintf(name, sizeof(name), "frag.%d", n);
		err = procreg_register(r, name, meta, 1000 - 16 * (size_t)(n % FRAG_SIZES));
	} while (!err && ++n < 1000000);
	if (write(a->ready_fd, &n, sizeof(n)) != sizeof(n))
		return 12;
	for (;;)
		pause();
}

/* As U: FRAG_VICTIM_NAMES names with 8 bytes of metadata; the exit
 * status says how many were refused (at most 250). */
static int frag_victim(void *p)
{
	const struct user_arg *a = p;
	procreg_t *r;
	char name[32];
	int refused = 0;

	th_become(a->u);
	r = open_dir(a->dir);
	if (!r)
		return 251;
	for (int i = 0; i < FRAG_VICTIM_NAMES; i++) {
		snprintf(name, sizeof(name), "small.%d", i);
		if (procreg_register(r, name, "8 bytes!", 8) != 0)
			refused++;
	}
	procreg_close(r);
	return refused > 250 ? 250 : refused;
}

static uint64_t frag_deaths0;

/* For th_until: the attacker's death is out (it leaves at its uid's feed
 * pace, not at once), and the arena is mostly free. */
static int arena_mostly_free(void *p)
{
	const struct pr_table_hdr *h = ((struct fx *)p)->reg->map.hdr;

	return PR_LOAD_ACQ(&h->deaths) > frag_deaths0 &&
	       PR_LOAD_ACQ(&h->arena_used) < (PR_LOAD_ACQ(&h->arena_top) - h->arena_off) / 4;
}

/*
 * One user fills the table with names of a few sizes (all its metadata
 * near 1 KiB), and its process is killed: the arena is free again, in
 * blocks of those sizes. Another user's names, of another size, must
 * find room there, not be refused for a table full of free memory.
 */
static void test_fragmented_arena(void **state)
{
	struct fx *f = *state;
	struct user_arg att = { .dir = f->dir, .u = user(f) };
	struct user_arg vic = { .dir = f->dir, .u = user(f) };
	int done[2], n = 0;
	pid_t pid;

	assert_int_equal(pipe2(done, O_CLOEXEC), 0);
	att.ready_fd = done[1];
	pid = kid(f, frag_attacker, &att);
	close(done[1]);
	if (read(done[0], &n, sizeof(n)) != sizeof(n))
		fail_msg("the attacker failed: status %d", kid_wait(f, pid));
	close(done[0]);
	/* 4 MiB less root's 256 KiB, at about 1 KiB a name. */
	assert_true(n > 2000);
	assert_true(n < 4000);
	frag_deaths0 = PR_LOAD_ACQ(&f->reg->map.hdr->deaths);
	kill(pid, SIGKILL);
	assert_int_equal(kid_wait(f, pid), 128 + SIGKILL);
	if (!th_until(arena_mostly_free, f, WAIT_MS))
		fail_msg("the attacker's %d names were not freed", n);
	assert_int_equal(procreg_lookup(f->reg, "frag.0", NULL), -ENOENT);

	/* Its names go with it: its exit status counts the refused. */
	assert_int_equal(kid_wait(f, kid(f, frag_victim, &vic)), 0);
}

/* ---- a connection that outlives its process --------------------------- */

/* What the attacker tells the test: the pid of the process that made its
 * connection (gone once it is set), then what the daemon answered on
 * that connection. */
struct reuse_sh {
	volatile pid_t gone_pid;
	volatile int go;
	volatile int reg_status, unreg_status, page_status, done;
};

struct reuse_arg {
	const char *dir;
	const struct th_user *u;
	struct reuse_sh *sh;
	char name[32];
	char other[32];             /* the attacker: the victim's name */
};

/* The connection's maker: says HELLO, hands the socket to its parent
 * over S, exits. */
static int reuse_maker(int s, const char *dir)
{
	int fd = th_raw_try_connect(dir);

	if (fd < 0 || th_raw_try_hello(fd) != 0)
		return 1;
	return th_send_fd(s, "c", 1, fd) == 1 ? 0 : 2;
}

static int recv_one_fd(int s)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	char c;
	struct iovec iov = { &c, 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			      .msg_controllen = sizeof(u.b) };
	struct cmsghdr *cm;
	int fd;

	if (recvmsg(s, &msg, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	cm = CMSG_FIRSTHDR(&msg);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
	return fd;
}

/* One request on the raw connection S: its status, or PAGE_NOT_SENT. */
static int raw_request(int s, const uint8_t *pkt, size_t len)
{
	uint8_t in[256];
	size_t pos = 0;
	struct pr_frame fr;
	ssize_t n;

	if (send(s, pkt, len, MSG_NOSIGNAL) != (ssize_t)len)
		return PAGE_NOT_SENT;
	n = recv(s, in, sizeof(in), 0);
	if (n <= 0 || procreg__proto_next(in, (size_t)n, &pos, &fr) != 1)
		return PAGE_NOT_SENT;
	return fr.h.status;
}

/* As U: a connection made by a child that then exits, kept; once the
 * test says go (by then another process has the child's pid), a REGISTER
 * of NAME, an UNREGISTER of OTHER and a reader page on it, their
 * statuses into the shared memory. */
static int reuse_attacker(void *p)
{
	const struct reuse_arg *a = p;
	uint8_t pkt[256];
	size_t len = 0;
	int sp[2], conn, page;
	pid_t maker;

	th_become(a->u);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() == 1)
		return 10;
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp) < 0)
		return 11;
	maker = fork();
	if (maker == 0)
		_exit(reuse_maker(sp[1], a->dir));
	conn = recv_one_fd(sp[0]);
	if (conn < 0 || th_wait(maker) != 0)
		return 12;
	a->sh->gone_pid = maker;
	while (!a->sh->go)
		usleep(1000);
	procreg__proto_put_name(pkt, &len, PR_OP_REGISTER, 0, 5, a->name, strlen(a->name), "m", 1);
	a->sh->reg_status = raw_request(conn, pkt, len);
	len = 0;
	procreg__proto_put_name(pkt, &len, PR_OP_UNREGISTER, 0, 6, a->other, strlen(a->other),
				NULL, 0);
	a->sh->unreg_status = raw_request(conn, pkt, len);
	page = make_page();
	if (page < 0)
		return 15;
	a->sh->page_status = send_page_fd(conn, page);
	a->sh->done = 1;
	for (;;)
		pause();
}

/* As U: NAME registered, a reader page handed over; then held. */
static int reuse_victim(void *p)
{
	const struct reuse_arg *a = p;
	procreg_t *r;

	th_become(a->u);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() == 1)
		return 10;
	r = open_dir(a->dir);
	if (!r || procreg_register(r, a->name, "v", 1) != 0)
		return 11;
	if (procreg_lookup(r, a->name, NULL) != 0)
		return 12;
	for (;;)
		pause();
}

static int shared_done(void *p)
{
	return ((struct reuse_sh *)p)->done;
}

/*
 * A connection's identity is that of the process that said HELLO on it.
 * That process may exit and leave the socket to another (a child it
 * passed it to), and its pid may then go to a process of another user.
 * Requests on the old connection must not be taken for the successor's:
 * the victim's names and reader pages stay, the attacker's registration,
 * removal of the victim's name and page are refused. Twice: the victim started within the dead
 * process's clock tick (the same start time, as /proc tells it), and
 * well after it.
 */
static void test_pid_reused(void **state)
{
	struct fx *f = *state;
	struct th_user *au = user(f), *vu = user(f);

	for (int round = 0; round < 2; round++) {
		struct reuse_sh *sh = th_shared(sizeof(*sh));
		struct reuse_arg att = { .dir = f->dir, .u = au, .sh = sh };
		struct reuse_arg vic = { .dir = f->dir, .u = vu, .sh = sh };
		PROCREG_OPTS(procreg_entry, e);
		pid_t victim = 0;

		snprintf(att.name, sizeof(att.name), "reuse.attack%d", round);
		snprintf(vic.name, sizeof(vic.name), "reuse.victim%d", round);
		memcpy(att.other, vic.name, sizeof(att.other));
		kid(f, reuse_attacker, &att);
		for (int i = 0; i < WAIT_MS && !sh->gone_pid; i++)
			usleep(1000);
		if (!sh->gone_pid)
			fail_msg("round %d: the attacker's connection was not made", round);
		if (round == 1)
			usleep(50 * 1000);
		/* The next pid the kernel hands out is the one after
		 * ns_last_pid (another fork on the host may take it first:
		 * then again). */
		for (int tries = 0; tries < 100 && victim != sh->gone_pid; tries++) {
			if (victim) {
				kill(victim, SIGKILL);
				kid_wait(f, victim);
			}
			th_next_pid(sh->gone_pid);
			victim = kid(f, reuse_victim, &vic);
		}
		assert_int_equal(victim, sh->gone_pid);
		assert_int_equal(th_reader_pages(f->reg, victim, 1), 0);
		assert_int_equal(procreg_lookup(f->reg, vic.name, &e), 0);
		assert_int_equal(e.pid, victim);

		sh->go = 1;
		if (!th_until(shared_done, sh, WAIT_MS))
			fail_msg("round %d: the attacker did not finish", round);
		assert_int_equal(sh->reg_status, -ESRCH);
		assert_int_equal(sh->unreg_status, -EPERM);
		assert_int_not_equal(sh->page_status, 0);
		assert_int_not_equal(sh->page_status, PAGE_NOT_SENT);
		/* The daemon has answered both: what it did to the victim is
		 * done. */
		assert_int_equal(procreg_lookup(f->reg, vic.name, &e), 0);
		assert_int_equal(e.pid, victim);
		assert_int_equal(procreg_lookup(f->reg, att.name, NULL), -ENOENT);
		assert_int_equal(pages_of_pid(f, victim), 1);
		munmap(sh, sizeof(*sh));
	}
}

/*
 * Each reader page is a mapping of the daemon's, and a process may have
 * only vm.max_map_count of them: past that every mmap and mremap of the
 * daemon's fails, root's registrations' too. So pages are budgeted
 * (--max-reader-pages 32 here, --max-reader-pages-per-uid 8): four users
 * with a process of twelve handles each, a page each, get eight pages a
 * uid at most and leave four to root, whose pages get in to the last of
 * the budget; the next is refused. Every process reads and registers
 * right, its pages taken or not, and root's registrations all succeed.
 */
static void test_take_every_page(void **state)
{
	struct fx *f = *state;
	struct pages_arg a = { .dir = f->dir, .handles = PAGE_HANDLES };
	struct pages_want w = { .f = f, .uid = -1, .pages = 27, .refused = 4 * PAGE_HANDLES - 27 };
	static struct procreg_op ops[2048];
	static char names[2048][32];
	long maps0, maps1;
	uint64_t refused;
	procreg_t *extra;
	pid_t rootkid;
	struct th_held h;
	int s;

	/* The line that ends the daemon's start, written after it answers
	 * (th_daemon_start returns then): waited for, not looked for once. */
	th_expect_log(f->d.log, "and 32 reader pages", 10000);
	assert_int_equal(procreg_register(f->reg, "root.name", NULL, 0), 0);
	assert_int_equal(procreg_lookup(f->reg, "root.name", NULL), 0);
	assert_int_equal(th_reader_pages(f->reg, getpid(), 1), 0);
	maps0 = maps_of(f->d.pid);

	/* Theirs: 32 - 32/8 = 28 pages with root's one, 8 a uid. */
	th_held_init(&h);
	for (int k = 0; k < 4; k++) {
		a.u = user(f);
		th_held_start(&h, pages_main, &a);
	}
	th_held_ready(&h, WAIT_MS);
	if (!th_until(pages_at_least, &w, WAIT_MS)) {
		th_held_kill(&h);
		th_daemon_dump_log(&f->d);
		fail_msg("pages of other uids %u, refused %llu", pages_of(f, -1),
			 (unsigned long long)f->reg->map.hdr->readers_refused);
	}
	th_msleep(200);
	assert_int_equal(pages_of(f, -1), 27);
	for (int k = 0; k < 4; k++)
		assert_true(pages_of(f, f->u[k].uid) <= 8);
	/* Logged, one line a second at most. */
	assert_true(th_log_has(f->d.log, "refused: its uid has --max-reader-pages-per-uid pages") ||
		    th_log_has(f->d.log, "refused: the reader pages of other users fill all but "
				   "the eighth of --max-reader-pages kept for root"));

	/* Root's: four more get in, to the budget's last. */
	a.u = NULL;
	a.handles = 4;
	rootkid = th_held_start(&h, pages_main, &a);
	th_held_ready(&h, WAIT_MS);
	if (th_reader_pages(f->reg, rootkid, 4) != 0) {
		th_held_kill(&h);
		th_daemon_dump_log(&f->d);
		fail_msg("root's pages were kept out: %u of 4", pages_of_pid(f, rootkid));
	}
	assert_int_equal(pages_of(f, 0), 5);

	/* The budget is spent: root's next page is refused (a raw one, for
	 * the status; then a handle's), and the handle works all the same. */
	refused = f->reg->map.hdr->readers_refused;
	s = th_raw_connect(f->dir);
	th_raw_hello(s);
	assert_int_equal(raw_send_page(s), -EUSERS);
	extra = open_dir(f->dir);
	assert_non_null(extra);
	assert_int_equal(procreg_lookup(extra, "root.name", NULL), 0);
	w.uid = 0;
	w.pages = 5;
	w.refused = refused + 2;
	assert_true(th_until(pages_at_least, &w, WAIT_MS));
	assert_int_equal(pages_of_pid(f, getpid()), 1);
	assert_int_equal(procreg_register(extra, "root.extra", NULL, 0), 0);
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(procreg_lookup(extra, "root.name", NULL), 0);
		assert_int_equal(procreg_lookup(extra, "root.extra", NULL), 0);
		assert_int_equal(procreg_lookup(extra, "nobody", NULL), -ENOENT);
	}

	/* The daemon's mappings grew by the budget at most; root's
	 * registrations, pipelined, all succeed, and so do updates that
	 * retire memory for grace periods to wait on. */
	maps1 = maps_of(f->d.pid);
	printf("daemon mappings %ld -> %ld\n", maps0, maps1);
	assert_true(maps1 - maps0 <= 31 + 16);
	for (int round = 0; round < 2; round++) {
		for (int j = 0; j < 2048; j++) {
			snprintf(names[j], sizeof(names[j]), "root.%d", j);
			ops[j] = (struct procreg_op){ .sz = sizeof(ops[j]),
						     .kind = PROCREG_OP_REGISTER, .name = names[j],
						     .meta = round ? "updated" : NULL,
						     .meta_len = round ? 7 : 0 };
		}
		assert_int_equal(procreg_batch(f->reg, ops, 2048), 0);
		for (int j = 0; j < 2048; j++)
			assert_int_equal(ops[j].result, 0);
	}
	assert_int_equal(th_held_release(&h), 0);
	procreg_close(extra);

	/* Pages of processes gone are given back: root's raw page gets in. */
	for (int t = 0; t < 2000 && pages_of(f, -1) + pages_of(f, 0) > 1; t++)
		th_msleep(10);
	assert_int_equal(raw_send_page(s), 0);
	close(s);
}

static long max_map_count(void)
{
	char *t = th_read_file("/proc/sys/vm/max_map_count", true);
	long v = strtol(t, NULL, 10);

	free(t);
	return v;
}

/* The page budget is half of vm.max_map_count, read at start: asked for
 * more, the daemon says so and keeps to that half. */
static void test_page_budget_default(void **state)
{
	struct fx *f = *state;
	static const char *const args[] = { "--max-reader-pages", "4000000000", NULL };
	long mmc = max_map_count();
	char want[160];

	assert_int_equal(th_daemon_start(&f->d, f->dir, args, NULL), 0);
	snprintf(want, sizeof(want), "--max-reader-pages 4000000000: each page is a mapping, and "
		 "vm.max_map_count is %ld: %ld (half of it) it is", mmc, mmc / 2);
	assert_true(th_log_has(f->d.log, want));
	snprintf(want, sizeof(want), "up to 4096 reader processes and %ld reader pages", mmc / 2);
	th_expect_log(f->d.log, want, 10000);
}

/* ---- the files -------------------------------------------------------- */

struct files_arg {
	const char *dir;
	const struct th_user *u;
};

/* As the attacker: every file of the scope's directory, each tried every
 * way that would hurt another user. Returns the number of ways that
 * worked (0 expected), with what worked on stdout. */
static int files_main(void *p)
{
	struct files_arg *a = p;
	struct dirent *de;
	DIR *d;
	int worked = 0, files = 0;

	th_become(a->u);
	d = opendir(a->dir);
	if (!d)
		return 100;
	while ((de = readdir(d))) {
		char path[512], to[600];
		struct stat st;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", a->dir, de->d_name);
		if (lstat(path, &st) < 0)
			continue;
		files++;
		if (S_ISSOCK(st.st_mode))
			continue; /* 0666 on purpose: anyone may register itself */
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd >= 0) {
			printf("opened %s for writing\n", de->d_name);
			worked++;
			close(fd);
		}
		if (truncate(path, 0) == 0) {
			printf("truncated %s\n", de->d_name);
			worked++;
		}
		if (chmod(path, 0600) == 0) {
			printf("changed the mode of %s\n", de->d_name);
			worked++;
		}
		snprintf(to, sizeof(to), "%s/%s.moved", a->dir, de->d_name);
		if (rename(path, to) == 0) {
			printf("renamed %s\n", de->d_name);
			worked++;
		}
		if (unlink(path) == 0) {
			printf("removed %s\n", de->d_name);
			worked++;
		}
	}
	closedir(d);
	return files >= 2 ? worked : 101;
}

/*
 * Before: the reader file was mode 0666: truncated, every reader and the
 * daemon died of SIGBUS; scribbled, another user's lookups returned other
 * names. Now the scope's directory holds the table (0644) and the owners
 * journal (0600), both the daemon's, and the socket; nothing another user
 * may write, truncate, move or remove, and no reader slot of anyone else's.
 */
static void test_files_locked_down(void **state)
{
	struct fx *f = *state;
	struct files_arg a = { f->dir, user(f) };
	struct victim_arg va;
	char path[512];
	struct stat st;

	/* Queues and leases make the owners journal exist. */
	{
		PROCREG_OPTS(procreg_register_opts, ro, .lease_ms = 60000);

		assert_int_equal(procreg_register_opts(f->reg, "leased", NULL, 0, &ro), 0);
	}
	snprintf(path, sizeof(path), "%s/procreg.default.owners", f->dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	snprintf(path, sizeof(path), "%s/procreg.default", f->dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	snprintf(path, sizeof(path), "%s/procreg.default.readers", f->dir);
	assert_int_equal(stat(path, &st), -1);

	victims_start(f, &va);
	assert_true(th_until(grace_periods_past, f, WAIT_MS));
	assert_int_equal(th_wait(th_fork(files_main, &a)), 0);
	victims_check(f, 1000);
	assert_int_equal(procreg_lookup(f->reg, "leased", NULL), 0);
}

/* ---- names computed to collide ----------------------------------------- */

/*
 * The hash's seed is in the table, for readers to hash with: anyone can
 * compute names that hash alike. pr_hash absorbs a 16-byte name a word at
 * a time, the state a bijection of (state ^ word): for any first word, the
 * second word that brings the state to a chosen one is that state ^ the
 * first word's; so every first word gives a name with the same hash. Such
 * names, inserted, pile up in one probe run where each probe compares a
 * record at every one. An unprivileged user's are refused past a few
 * (-ENOSPC); root's are not.
 */
#define COLLIDE 200

/* The table of F's daemon, mapped read-only: its header (*SIZE bytes). */
static const struct pr_table_hdr *table_map(struct fx *f, size_t *size)
{
	char path[512];
	struct stat st;
	void *map;
	int fd;

	snprintf(path, sizeof(path), "%s/procreg.default", f->dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(map != MAP_FAILED);
	*size = (size_t)st.st_size;
	return map;
}

static uint64_t absorb(uint64_t h, uint64_t v)
{
	h = (h ^ v) * 0x9fb21c651e98df25ull;
	return h ^ (h >> 29);
}

/* N 16-byte names of one hash under SEED into NAMES (17 bytes each). */
static void colliding_names(uint64_t seed, char (*names)[17], int n)
{
	uint64_t h0 = seed ^ (16 * 0x9e3779b97f4a7c15ull), w0 = 0x6161616161616161ull,
		 w1 = 0x6262626262626262ull, target = absorb(h0, w0) ^ w1, x = 1;

	for (int i = 0; i < n;) {
		uint64_t a = w0 + x++ * 0x0101010101ull, b;
		bool ok = true;

		b = target ^ absorb(h0, a);
		for (int k = 0; k < 8; k++)
			ok = ok && ((a >> (8 * k)) & 0xff) && ((b >> (8 * k)) & 0xff);
		if (!ok)
			continue;
		memcpy(names[i], &a, 8);
		memcpy(names[i] + 8, &b, 8);
		names[i][16] = 0;
		/* That is the table's own hash: if pr_hash changes, this test
		 * must learn the new one. */
		assert_int_equal(pr_hash(names[i], 16, seed), pr_hash(names[0], 16, seed));
		i++;
	}
}

struct collide_arg {
	const char *dir;
	const struct th_user *u;
	char (*names)[17];
};

/* As the attacker: register the names, one request each. Exit status:
 * how many were taken (capped at 250), 251 for another error. */
static int collide_main(void *arg)
{
	const struct collide_arg *a = arg;
	procreg_t *reg;
	int taken = 0;

	th_become(a->u);
	reg = open_dir(a->dir);
	if (!reg)
		return 251;
	for (int i = 0; i < COLLIDE; i++) {
		int err = procreg_register(reg, a->names[i], NULL, 0);

		if (err == 0)
			taken++;
		else if (err != -ENOSPC)
			return 251;
	}
	return taken > 250 ? 250 : taken;
}

static void test_colliding_names(void **state)
{
	struct fx *f = *state;
	static char names[COLLIDE + 2][17];
	struct collide_arg a = { f->dir, user(f), names };
	const struct pr_table_hdr *h;
	size_t size;
	int taken;

	h = table_map(f, &size);
	colliding_names(h->hash_seed, names, COLLIDE + 2);
	munmap((void *)h, size);

	taken = th_wait(th_fork(collide_main, &a));
	assert_int_not_equal(taken, 251);
	/* A few, and no more: the rest were refused. */
	assert_true(taken >= 1);
	assert_true(taken <= 16);
	assert_true(th_log_has(f->d.log, "names computed to collide"));
	/* Root's are not refused (the attacker's left with it), and are
	 * found. */
	for (int i = 0; i < 20; i++)
		assert_int_equal(procreg_register(f->reg, names[COLLIDE - i], NULL, 0), 0);
	for (int i = 0; i < 20; i++)
		assert_int_equal(procreg_lookup(f->reg, names[COLLIDE - i], NULL), 0);
	assert_int_equal(procreg_lookup(f->reg, names[COLLIDE + 1], NULL), -ENOENT);
}

/* ---- names in a row ---------------------------------------------------- */

/*
 * A name's home slot is the top bits of its hash, which anyone can compute
 * (the seed is in the table): an attacker keeps one name for each of a
 * row of home slots. Each sits at its home, passing the tests above, and
 * together they make one run of occupied slots that every probe starting
 * in it walks to its end. Root's names hold the index at 16,384 slots, 43%
 * full, so that it does not grow under the row of 2,048. The attacker may
 * not make a run longer than PR_PLACE_RUN_MAX (512): some of its names are
 * refused, and no run is longer than that.
 */
#define ROW 2048
#define ROW_PREFILL 7000
#define ROW_RUN_MAX 512

struct row_arg {
	const char *dir;
	const struct th_user *u;
	char (*names)[24];
	int n;
	int ready_fd;               /* what it was refused */
};

/* As U: the names in one batch; on READY_FD how many were refused
 * (-ENOSPC), or -1 for another error; then held until killed. */
static int row_attacker(void *p)
{
	const struct row_arg *a = p;
	struct procreg_op *ops = calloc((size_t)a->n, sizeof(*ops));
	procreg_t *r;
	int refused = 0;

	th_become(a->u);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() == 1 || !ops)
		return 10;
	r = open_dir(a->dir);
	if (!r)
		return 11;
	for (int i = 0; i < a->n; i++)
		ops[i] = (struct procreg_op){ .sz = sizeof(ops[i]), .kind = PROCREG_OP_REGISTER,
					      .name = a->names[i] };
	if (procreg_batch(r, ops, (size_t)a->n) != 0)
		refused = -1;
	for (int i = 0; i < a->n && refused >= 0; i++)
		refused = ops[i].result == -ENOSPC ? refused + 1 : ops[i].result ? -1 : refused;
	if (write(a->ready_fd, &refused, sizeof(refused)) != sizeof(refused))
		return 12;
	for (;;)
		pause();
}

static const struct pr_index *names_index(const struct pr_table_hdr *h)
{
	return (const struct pr_index *)((const uint8_t *)h + h->names.index_off);
}

/* N names PREFIX<hex> homed in [FROM, FROM + N) of H's names index, one
 * a slot, into NAMES. */
static void names_homed(const struct pr_table_hdr *h, const char *prefix, uint64_t from, int n,
			char (*names)[24])
{
	const struct pr_index *ix = names_index(h);
	bool *have = calloc((size_t)n, sizeof(bool));
	int got = 0;

	assert_non_null(have);
	for (uint64_t x = 0; got < n; x++) {
		struct pr_key k;
		char name[24];
		uint64_t home;

		snprintf(name, sizeof(name), "%s%llx", prefix, (unsigned long long)x);
		pr_key_name(&k, PR_KIND_NAME, name, strlen(name), h->hash_seed);
		home = k.hash >> ix->shift;
		if (home < from || home >= from + (uint64_t)n || have[home - from])
			continue;
		have[home - from] = true;
		memcpy(names[got++], name, sizeof(name));
	}
	free(have);
}

/* The longest run of occupied slots (tombstones too: probes walk them). */
static uint64_t longest_run(const struct pr_index *ix)
{
	uint64_t best = 0, run = 0, start = 0;

	/* From an empty slot, so that a run across the end is one. */
	while (start < ix->capacity && ix->slot[start].word != PR_SLOT_EMPTY)
		start++;
	for (uint64_t i = 1; i <= ix->capacity; i++) {
		run = ix->slot[(start + i) % ix->capacity].word == PR_SLOT_EMPTY ? 0 : run + 1;
		best = run > best ? run : best;
	}
	return best;
}

static void test_names_in_a_row(void **state)
{
	struct fx *f = *state;
	static char row[ROW][24];
	struct row_arg att = { .dir = f->dir, .u = user(f), .names = row, .n = ROW };
	const struct pr_table_hdr *h;
	uint64_t cap, run;
	int done[2], refused = -2;
	size_t size;
	pid_t pid;

	th_register_bulk(f->reg, "root.", ROW_PREFILL, "");
	h = table_map(f, &size);
	cap = names_index(h)->capacity;
	assert_int_equal(cap, 16384);
	names_homed(h, "row.", cap / 4, ROW, row);
	munmap((void *)h, size);

	assert_int_equal(pipe2(done, O_CLOEXEC), 0);
	att.ready_fd = done[1];
	pid = kid(f, row_attacker, &att);
	close(done[1]);
	if (read(done[0], &refused, sizeof(refused)) != sizeof(refused) || refused < 0)
		fail_msg("the attacker failed: status %d", kid_wait(f, pid));
	close(done[0]);
	h = table_map(f, &size);
	assert_int_equal(names_index(h)->capacity, cap);
	run = longest_run(names_index(h));
	munmap((void *)h, size);
	print_message("names in a row: %d of %d refused; the longest run %llu slots\n", refused,
		      ROW, (unsigned long long)run);
	if (run > ROW_RUN_MAX)
		fail_msg("one user's names made a run of %llu slots (at most %d)",
			 (unsigned long long)run, ROW_RUN_MAX);
	assert_true(refused >= 1);
	assert_true(th_log_has(f->d.log, "names computed to collide"));
	/* Root's names are all there. */
	for (int i = 0; i < ROW_PREFILL; i += 97) {
		char name[24];

		snprintf(name, sizeof(name), "root.%d", i);
		assert_int_equal(procreg_lookup(f->reg, name, NULL), 0);
	}
	kill(pid, SIGKILL);
	assert_int_equal(kid_wait(f, pid), 128 + SIGKILL);
}

/* ---- a squatted socket ------------------------------------------------ */

struct sock_squat_arg {
	const char *dir;
	struct th_user *u;
	int ready;                  /* write end: one byte once listening */
};

/* Another user's listener at the scope's socket path, where a service
 * manager's would be: 0 if every client that came hung up at once, 1 if
 * one stayed to talk or wait, 2 if none came, 3 on a setup failure. */
static int sock_squat_main(void *p)
{
	struct sock_squat_arg *a = p;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd, c, came = 0;

	th_become(a->u);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/procreg.default.sock", a->dir);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 8) < 0)
		return 3;
	if (write(a->ready, "r", 1) != 1)
		return 3;
	for (;;) {
		struct pollfd pl = { .fd = lfd, .events = POLLIN };
		char buf[256];

		if (poll(&pl, 1, came ? 2000 : 20000) <= 0)
			return came ? 0 : 2;
		c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			return 3;
		came++;
		/* A client that trusted us would say HELLO, or stay and wait
		 * for the table it expects us to make. */
		pl = (struct pollfd){ .fd = c, .events = POLLIN };
		if (poll(&pl, 1, 5000) <= 0 || recv(c, buf, sizeof(buf), MSG_DONTWAIT) != 0)
			return 1;
		close(c);
	}
}

/*
 * A client that finds no table dials the scope's socket path, where a
 * service manager would hold the socket and start procregd on the first
 * connection. Another user may have bound that path first (in a shared
 * directory): the client must hang up on a listener that is not root's,
 * its own or trusted, and fail at once, not talk to it or wait on it.
 */
static void test_squatted_socket(void **state)
{
	struct fx *f = *state;
	struct th_user *u = user(f);
	PROCREG_OPTS(procreg_opts, o, .dir = f->dir, .scope = "default", .timeout_ms = 60000);
	int pfd[2];
	char b;
	pid_t pid;
	procreg_t *r;

	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	{
		struct sock_squat_arg a = { f->dir, u, pfd[1] };

		pid = th_fork(sock_squat_main, &a);
	}
	assert_true(pid > 0);
	close(pfd[1]);
	assert_int_equal(read(pfd[0], &b, 1), 1);
	close(pfd[0]);
	r = procreg_open(&o);
	assert_null(r);
	assert_int_equal(th_wait(pid), 0);
}

/* ---- a squatted scope ------------------------------------------------- */

struct squat_arg {
	const char *dir;
	const struct th_user *u;
};

/* As the attacker: run procregd for the scope once and stop it, leaving
 * its table behind, with a name of its own that claims to be root's
 * payments service. */
static int squat_main(void *p)
{
	struct squat_arg *a = p;
	struct th_daemon d;
	procreg_t *r;

	th_become(a->u);
	if (th_daemon_start(&d, a->dir, NULL, NULL) != 0)
		return 10;
	r = open_dir(a->dir);
	if (!r || procreg_register(r, "payments", "unix:/tmp/evil.sock", 19) != 0)
		return 11;
	procreg_close(r);
	return th_daemon_stop(&d) == 0 ? 0 : 12;
}

static int count_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* root's procregd on DIR: its exit status, its log in O. */
static int root_daemon_fails(struct fx *f, struct th_out *o)
{
	const char *argv[] = { PROCREGD_PATH, "--foreground", "--dir", f->dir, NULL };

	return th_run(o, NULL, argv);
}

/*
 * Before: a scope whose files another user made first was served by root's
 * daemon from that user's table, which that user could then rewrite. Now
 * root's daemon refuses to start on a table, a journal or a symbolic link
 * that is not its own, with a message and an exit status (not a spin, and
 * no temporary file left); root's clients refuse to read another user's
 * table.
 */
static void test_squatted_scope(void **state)
{
	struct fx *f = *state;
	struct th_user *u = user(f);
	struct squat_arg a = { f->dir, u };
	struct th_out *o = calloc(1, sizeof(*o));
	char table[512], journal[512], rootfile[512];
	struct stat st;
	procreg_t *r;
	int files;

	assert_non_null(o);
	snprintf(table, sizeof(table), "%s/procreg.default", f->dir);
	snprintf(journal, sizeof(journal), "%s/procreg.default.owners", f->dir);

	/* A whole scope made by the attacker's own procregd. */
	assert_int_equal(th_wait(th_fork(squat_main, &a)), 0);
	assert_int_equal(stat(table, &st), 0);
	assert_int_equal(st.st_uid, u->uid);
	files = count_files(f->dir);
	assert_int_equal(root_daemon_fails(f, o), 1);
	assert_non_null(strstr(o->err, "owned by another user: refused"));
	assert_int_equal(count_files(f->dir), files);
	/* Root's clients do not read it. */
	errno = 0;
	r = open_dir(f->dir);
	assert_null(r);
	assert_int_equal(errno, EPERM);
	{
		const char *argv[] = { PROCREG_CLI_PATH, "--dir", f->dir, "get", "payments", NULL };

		assert_int_equal(th_run(o, NULL, argv), 2);
		assert_non_null(strstr(o->err, "is not one this user trusts"));
		assert_null(strstr(o->out, "evil"));
	}
	/* ...unless told to trust that user. */
	{
		PROCREG_OPTS(procreg_opts, to, .dir = f->dir, .scope = "default", .trust_uid = u->uid);
		TH_ENTRY(e);

		r = procreg_open(&to);
		assert_non_null(r);
		assert_int_equal(procreg_lookup(r, "payments", &e), 0);
		assert_int_equal(e.uid, u->uid);
		procreg_close(r);
	}

	/* A dangling symbolic link where the table goes. */
	assert_int_equal(unlink(table), 0);
	unlink(journal);
	assert_int_equal(symlink("/nonexistent/procreg", table), 0);
	assert_int_equal(lchown(table, u->uid, u->gid), 0);
	files = count_files(f->dir);
	assert_int_equal(root_daemon_fails(f, o), 1);
	assert_non_null(strstr(o->err, "is a symbolic link: refused"));
	assert_int_equal(count_files(f->dir), files);

	/* A link to a file of root's: not followed, not touched. */
	snprintf(rootfile, sizeof(rootfile), "%s.rootfile", f->dir);
	th_write_file(rootfile, "root's own\n", 0600);
	assert_int_equal(unlink(table), 0);
	assert_int_equal(symlink(rootfile, table), 0);
	assert_int_equal(root_daemon_fails(f, o), 1);
	assert_non_null(strstr(o->err, "is a symbolic link: refused"));
	assert_int_equal(stat(rootfile, &st), 0);
	assert_int_equal(st.st_size, 11);
	assert_int_equal(st.st_mode & 0777, 0600);
	unlink(rootfile);
	assert_int_equal(unlink(table), 0);

	/* A FIFO where the table goes: refused at once, never an open that
	 * waits for a writer who does not come. */
	assert_int_equal(mkfifo(table, 0644), 0);
	assert_int_equal(chown(table, u->uid, u->gid), 0);
	errno = 0;
	r = open_dir(f->dir);
	assert_null(r);
	assert_int_equal(errno, EPROTO);
	assert_int_equal(unlink(table), 0);

	/* Root's own scope; its journal gone (as when a rewrite fails), and
	 * one of the attacker's in its place, which would replay leases and
	 * places in line into root's registry: not read, and replaced. */
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
	r = open_dir(f->dir);
	assert_non_null(r);
	assert_int_equal(procreg_register(r, "payments", "unix:/run/payments.sock", 23), 0);
	procreg_close(r);
	assert_int_equal(th_daemon_stop(&f->d), 0);
	assert_int_equal(unlink(journal), 0);
	th_write_file(journal, "forged", 0644);
	assert_int_equal(chown(journal, u->uid, u->gid), 0);
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
	assert_true(th_log_has(f->d.log, "owned by another user: refused (remove it, as root or as "
				     "its owner, or use another --dir or --scope): not read"));
	assert_int_equal(stat(journal, &st), 0);
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	free(o);
}

/* ---- a setuid program ------------------------------------------------- */

/*
 * A program that runs setuid or setgid (or with file capabilities) and
 * uses the library runs with an environment its caller chose: with the
 * PROCREG_* variables read as usual, the caller could point it at a
 * table of its own and have it trusted (PROCREG_TRUST_UID). The library
 * reads them with secure_getenv(), which gives such a program none. A
 * setuid-root copy of the CLI, run by the attacker with its scope's
 * directory and its uid in the environment, must not answer from the
 * attacker's table; the same copy without the setuid bit, run the same
 * way, does (the control: the attack is real).
 */
static void test_setuid_ignores_env(void **state)
{
	struct fx *f = *state;
	struct th_user *u = user(f);
	struct squat_arg a = { f->dir, u };
	struct th_out *o = calloc(1, sizeof(*o));
	char cli[512], dir_env[600], trust_env[64];
	const char *argv[] = { cli, "get", "payments", NULL };
	/* LeakSanitizer cannot look at a setuid process (sanitized builds). */
	const char *env[] = { dir_env, trust_env, "ASAN_OPTIONS=detect_leaks=0", NULL };
	struct statvfs vfs;
	int st;

	assert_non_null(o);
	assert_int_equal(th_wait(th_fork(squat_main, &a)), 0);
	snprintf(cli, sizeof(cli), "%s/procreg-setuid", f->dir);
	snprintf(dir_env, sizeof(dir_env), "PROCREG_DIR=%s", f->dir);
	snprintf(trust_env, sizeof(trust_env), "PROCREG_TRUST_UID=%u", (unsigned)u->uid);
	assert_int_equal(statvfs(f->dir, &vfs), 0);
	if (vfs.f_flag & ST_NOSUID)
		fail_msg("%s is on a file system mounted nosuid: no setuid program runs there",
			 f->dir);
	th_copy_file(PROCREG_CLI_PATH, cli);

	assert_int_equal(chmod(cli, 0755), 0);
	assert_int_equal(th_run_as(o, u, env, argv), 0);
	assert_non_null(strstr(o->out, "evil"));

	assert_int_equal(chmod(cli, 04755), 0);
	st = th_run_as(o, u, env, argv);
	if (strstr(o->out, "evil"))
		fail_msg("the setuid program answered from the attacker's table: %s", o->out);
	/* No table at the default place (2), or one without the name (1). */
	if (st != 1 && st != 2)
		fail_msg("the setuid program: exit status %d: %s", st, o->err);
	/* Nor does its message name the caller's directory. */
	assert_null(strstr(o->err, f->dir));

	/* Nor does it start a daemon (run, with none serving): it would run
	 * with the privilege its caller lacks, found where its caller says
	 * (PATH, or beside the copy, where the caller may put one). */
	{
		char fake[600], marker[600], script[1400];
		const char *run[] = { cli, "run", "x", "--", "true", NULL };
		struct stat sb;

		snprintf(fake, sizeof(fake), "%s/procregd", f->dir);
		snprintf(marker, sizeof(marker), "%s/started-as-root", f->dir);
		snprintf(script, sizeof(script), "#!/bin/sh\ntouch %s\nexit 1\n", marker);
		th_write_file(fake, script, 0755);
		st = th_run_as(o, u, env, run);
		if (stat(marker, &sb) == 0)
			fail_msg("the setuid program started a daemon found beside it");
		assert_int_equal(st, 2);
		assert_int_equal(unlink(fake), 0);
	}
	assert_int_equal(unlink(cli), 0);
	free(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_files_locked_down, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pinned_slot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pinned_relay, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scribbled_own_page, setup, teardown),
		cmocka_unit_test_setup_teardown(test_own_slot_cleared, setup, teardown),
		cmocka_unit_test_setup_teardown(test_take_every_slot, setup_quota, teardown),
		cmocka_unit_test_setup_teardown(test_take_every_page, setup_pages, teardown),
		cmocka_unit_test_setup_teardown(test_page_budget_default, setup_bare, teardown),
		cmocka_unit_test_setup_teardown(test_page_sent_again, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pid_reused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fragmented_arena, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_colliding_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names_in_a_row, setup, teardown),
		cmocka_unit_test_setup_teardown(test_squatted_scope, setup_bare, teardown),
		cmocka_unit_test_setup_teardown(test_squatted_socket, setup_bare, teardown),
		cmocka_unit_test_setup_teardown(test_setuid_ignores_env, setup_bare, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
