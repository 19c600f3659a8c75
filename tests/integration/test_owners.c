/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_owners.c - standby owners (queues), replacement and leases,
 * against a real daemon.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define fx th_fx

static int setup(void **state)
{
	return th_fx_start(state, NULL, NULL);
}

static int teardown(void **state)
{
	return th_fx_stop(state);
}

/*
 * A child that registers NAME with FLAGS and reports the result over a
 * pipe ('0' owned, 'q' queued, 'x' failed), then, if queued, waits until
 * it owns the name and reports 'o'. It lives until killed.
 */
struct contender {
	pid_t pid;
	int report;       /* read end */
};

static struct contender contend(const char *dir, const char *name, unsigned flags,
				uint32_t lease_ms)
{
	struct contender c;
	int p[2];

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	c.pid = fork();
	assert_true(c.pid >= 0);
	if (c.pid == 0) {
		PROCREG_OPTS(procreg_register_opts, o, .flags = flags, .lease_ms = lease_ms);
		procreg_t *r = th_open(dir);
		char meta[32];
		int err;

		close(p[0]);
		snprintf(meta, sizeof(meta), "pid %d", (int)getpid());
		err = r ? procreg_register_opts(r, name, meta, strlen(meta), &o) : -EIO;
		(void)!write(p[1], err == 0 ? "0" : err == -EINPROGRESS ? "q" : "x", 1);
		if (err == -EINPROGRESS && procreg_wait_owner(r, name, -1) == 0)
			(void)!write(p[1], "o", 1);
		for (;;)
			pause();
	}
	close(p[1]);
	c.report = p[0];
	return c;
}

/* The child's next report; a child that has nothing to say within 30 s
 * fails the test rather than hanging it. */
static char report(const struct contender *c)
{
	struct pollfd p = { .fd = c->report, .events = POLLIN };
	char x = 0;

	assert_int_equal(poll(&p, 1, 30000), 1);
	assert_int_equal(read(c->report, &x, 1), 1);
	return x;
}

static void bury(struct contender *c)
{
	kill(c->pid, SIGKILL);
	assert_int_equal(th_wait(c->pid), 128 + SIGKILL);
	close(c->report);
}

static pid_t owner_of(procreg_t *reg, const char *name)
{
	TH_ENTRY(e);

	return procreg_lookup(reg, name, &e) == 0 ? e.pid : 0;
}

static void test_queue_order_on_death(void **state)
{
	struct fx *f = *state;
	struct contender owner = contend(f->dir, "leader", 0, 0), s[3];
	PROCREG_OPTS(procreg_stats, st);

	assert_int_equal(report(&owner), '0');
	/* Three standbys, in a known order: each is queued before the next
	 * asks. */
	for (int i = 0; i < 3; i++) {
		s[i] = contend(f->dir, "leader", PROCREG_QUEUE, 0);
		assert_int_equal(report(&s[i]), 'q');
	}
	assert_int_equal(owner_of(f->reg, "leader"), owner.pid);

	/* The owner dies: once the daemon has seen the death (sync), the
	 * first in line already owns the name; nothing else had to happen. */
	bury(&owner);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(owner_of(f->reg, "leader"), s[0].pid);
	assert_int_equal(report(&s[0]), 'o');

	/* The second in line dies while waiting: it is skipped. */
	bury(&s[1]);
	bury(&s[0]);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(owner_of(f->reg, "leader"), s[2].pid);
	assert_int_equal(report(&s[2]), 'o');
	{
		TH_ENTRY(e);

		assert_int_equal(procreg_lookup(f->reg, "leader", &e), 0);
		assert_int_equal(e.meta_len, (uint32_t)snprintf(NULL, 0, "pid %d", (int)s[2].pid));
	}
	bury(&s[2]);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "leader", NULL), -ENOENT);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.processes, 0);
}

static void test_queue_on_unregister_and_events(void **state)
{
	struct fx *f = *state;
	uint64_t cur = procreg_feed_head(f->reg);
	PROCREG_OPTS(procreg_event, ev);
	struct contender s;

	assert_int_equal(procreg_register(f->reg, "svc", NULL, 0), 0);
	s = contend(f->dir, "svc", PROCREG_QUEUE, 0);
	assert_int_equal(report(&s), 'q');
	/* Letting go hands the name over, as dying does. */
	assert_int_equal(procreg_unregister(f->reg, "svc"), 0);
	assert_int_equal(owner_of(f->reg, "svc"), s.pid);
	assert_int_equal(report(&s), 'o');
	assert_int_equal(procreg_next_event(f->reg, &cur, &ev, 0), 0);
	assert_int_equal(ev.type, PROCREG_EV_REGISTERED);
	assert_int_equal(procreg_next_event(f->reg, &cur, &ev, 0), 0);
	assert_int_equal(ev.type, PROCREG_EV_UNREGISTERED);
	assert_int_equal(procreg_next_event(f->reg, &cur, &ev, 0), 0);
	assert_int_equal(ev.type, PROCREG_EV_TRANSFERRED);
	assert_int_equal(ev.pid, s.pid);
	assert_string_equal(ev.name, "svc");
	/* Queueing for a free name simply registers it. */
	{
		PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_QUEUE);

		assert_int_equal(procreg_register_opts(f->reg, "free", NULL, 0, &o), 0);
		assert_int_equal(owner_of(f->reg, "free"), getpid());
	}
	bury(&s);
}

static void test_replace(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_register_opts, rep, .flags = PROCREG_REPLACE);
	struct contender soft = contend(f->dir, "soft", PROCREG_REPLACEABLE, 0);
	struct contender hard = contend(f->dir, "hard", 0, 0);
	TH_ENTRY(e);
	PROCREG_OPTS(procreg_stats, st);

	assert_int_equal(report(&soft), '0');
	assert_int_equal(report(&hard), '0');
	assert_int_equal(procreg_lookup(f->reg, "soft", &e), 0);
	assert_true(e.flags & PROCREG_ENTRY_REPLACEABLE);
	/* Not replaceable: refused even when asked to replace. */
	assert_int_equal(procreg_register_opts(f->reg, "hard", NULL, 0, &rep), -EEXIST);
	/* Replaceable, and asked: ours now. */
	assert_int_equal(procreg_register_opts(f->reg, "soft", "new", 3, &rep), 0);
	assert_int_equal(procreg_lookup(f->reg, "soft", &e), 0);
	assert_int_equal(e.pid, getpid());
	assert_int_equal(e.flags & PROCREG_ENTRY_REPLACEABLE, 0);
	/* Without asking, a replaceable name is just taken. */
	assert_int_equal(procreg_register(f->reg, "hard", NULL, 0), -EEXIST);
	/* The old owner's death no longer touches the name it lost; its
	 * process entry went with its last name. */
	bury(&soft);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(owner_of(f->reg, "soft"), getpid());
	procreg_stats(f->reg, &st);
	assert_int_equal(st.processes, 2); /* us and "hard" */
	bury(&hard);
}

static void test_options_checked(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_register_opts, bad, .flags = 0x100);
	PROCREG_OPTS(procreg_register_opts, mark, .flags = PROCREG_LEASE_MARK);
	struct procreg_register_opts tiny = { .sz = 1 };

	assert_int_equal(procreg_register_opts(f->reg, "x", NULL, 0, &bad), -EINVAL);
	assert_int_equal(procreg_register_opts(f->reg, "x", NULL, 0, &mark), -EINVAL);
	assert_int_equal(procreg_register_opts(f->reg, "x", NULL, 0, &tiny), -EINVAL);
	/* NULL options: a plain registration. */
	assert_int_equal(procreg_register_opts(f->reg, "x", NULL, 0, NULL), 0);
	assert_int_equal(procreg_refresh(f->reg, "x"), -EINVAL); /* no lease */
	assert_int_equal(procreg_refresh(f->reg, "nope"), -ENOENT);
	assert_int_equal(procreg_wait_owner(f->reg, "x", 0), 0);
}

/* A child that queues for NAME with a kilobyte of metadata, reports 'q',
 * and lives until killed. */
static pid_t big_waiter(const char *dir, const char *name, int *report_fd)
{
	int p[2];
	pid_t pid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	if (pid == 0) {
		PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_QUEUE);
		static char meta[PROCREG_META_MAX];
		procreg_t *r = th_open(dir);

		memset(meta, 'm', sizeof(meta));
		(void)!write(p[1], r && procreg_register_opts(r, name, meta, sizeof(meta), &o) ==
						-EINPROGRESS ? "q" : "x", 1);
		for (;;)
			pause();
	}
	close(p[1]);
	*report_fd = p[0];
	return pid;
}

static int setup_small(void **state)
{
	static const char *const args[] = { "--max-size", "2M", NULL };

	return th_fx_start(state, args, NULL);
}

/*
 * The owner and the one waiting for its names die together, in a table
 * too full for the hand-over: the hand-over fails and releases the
 * waiter while its own death is still to be handled in the same batch.
 * The allocation reclaims, but only what earlier batches retired: the
 * dying owner's records, retired in this batch, stay whole while the
 * daemon still reads them. The daemon must survive it (under ASan, any
 * use of freed memory aborts it), and leave nothing of either behind.
 */
static void test_handover_in_full_table(void **state)
{
	struct fx *f = *state;
	struct contender owner = contend(f->dir, "full.a", 0, 0);
	static char meta[PROCREG_META_MAX];
	PROCREG_OPTS(procreg_stats, st);
	int rep[2], i, err = 0;
	pid_t w[2];
	char c, name[32];

	assert_int_equal(report(&owner), '0');
	for (i = 0; i < 2; i++) {
		w[i] = big_waiter(f->dir, "full.a", &rep[i]);
		assert_int_equal(read(rep[i], &c, 1), 1);
		assert_int_equal(c, 'q');
	}
	/* Fill what is left with our own names. */
	memset(meta, 'f', sizeof(meta));
	for (i = 0; i < 100000 && !err; i++) {
		snprintf(name, sizeof(name), "fill.%d", i);
		err = procreg_register(f->reg, name, meta, sizeof(meta));
	}
	assert_int_equal(err, -ENOSPC);
	kill(owner.pid, SIGKILL);
	kill(w[0], SIGKILL);
	kill(w[1], SIGKILL);
	assert_int_equal(th_wait(owner.pid), 128 + SIGKILL);
	assert_int_equal(th_wait(w[0]), 128 + SIGKILL);
	assert_int_equal(th_wait(w[1]), 128 + SIGKILL);
	close(owner.report);
	close(rep[0]);
	close(rep[1]);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(kill(f->d.pid, 0), 0);
	assert_int_equal(procreg_lookup(f->reg, "full.a", NULL), -ENOENT);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.processes, 1); /* only us */
	assert_int_equal(st.names, (uint64_t)i - 1);
}

/* ---- leases ----------------------------------------------------------- */

/* The next event of TYPE about NAME, waiting up to 30 s. */
static struct procreg_event await(procreg_t *reg, uint64_t *cur, int type, const char *name)
{
	PROCREG_OPTS(procreg_event, ev);

	for (;;) {
		int err = procreg_next_event(reg, cur, &ev, 30000);

		assert_int_equal(err, 0);
		if (ev.type == type && !strcmp(ev.name, name))
			return ev;
	}
}

static void test_lease_expires(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_register_opts, o, .lease_ms = 50);
	uint64_t cur = procreg_feed_head(f->reg);
	PROCREG_OPTS(procreg_event, ev);
	TH_ENTRY(e);

	/* We live, but do not refresh: the name goes. */
	assert_int_equal(procreg_register_opts(f->reg, "hung", NULL, 0, &o), 0);
	assert_int_equal(procreg_lookup(f->reg, "hung", &e), 0);
	assert_true(e.flags & PROCREG_ENTRY_LEASED);
	ev = await(f->reg, &cur, PROCREG_EV_EXPIRED, "hung");
	assert_int_equal(ev.pid, getpid());
	assert_int_equal(procreg_lookup(f->reg, "hung", NULL), -ENOENT);
	assert_int_equal(kill(getpid(), 0), 0);
	/* Re-registering without a lease keeps it for good. */
	assert_int_equal(procreg_register(f->reg, "hung", NULL, 0), 0);
	assert_int_equal(procreg_lookup(f->reg, "hung", &e), 0);
	assert_int_equal(e.flags & PROCREG_ENTRY_LEASED, 0);
}

/* SIGKILL the daemon and start another on the same table. */
static void restart(struct fx *f)
{
	th_daemon_kill(&f->d);
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
}

static void test_lease_survives_restart(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_register_opts, o, .lease_ms = 1500);
	PROCREG_OPTS(procreg_register_opts, om, .lease_ms = 1500, .flags = PROCREG_LEASE_MARK);
	TH_ENTRY(e);
	uint64_t cur;

	/* Acknowledged leases, then the daemon dies before any expires: the
	 * next one still knows they are leases (the table alone does not say
	 * for how long), and lets them run out. */
	assert_int_equal(procreg_register_opts(f->reg, "hung", NULL, 0, &o), 0);
	assert_int_equal(procreg_register_opts(f->reg, "marked", NULL, 0, &om), 0);
	assert_int_equal(procreg_register_opts(f->reg, "dropped", NULL, 0, &o), 0);
	/* A lease given up by re-registering without one stays given up. */
	assert_int_equal(procreg_register(f->reg, "dropped", NULL, 0), 0);
	restart(f);
	cur = procreg_feed_head(f->reg);
	await(f->reg, &cur, PROCREG_EV_EXPIRED, "hung");
	assert_int_equal(procreg_lookup(f->reg, "hung", NULL), -ENOENT);
	await(f->reg, &cur, PROCREG_EV_EXPIRED, "marked");
	assert_int_equal(procreg_lookup(f->reg, "marked", &e), 0);
	assert_true(e.flags & PROCREG_ENTRY_UNHEALTHY);
	assert_int_equal(procreg_lookup(f->reg, "dropped", &e), 0);
	assert_int_equal(e.flags & PROCREG_ENTRY_LEASED, 0);

	/* An expired mark is still one after another restart, and a refresh
	 * still clears it. */
	restart(f);
	assert_int_equal(procreg_lookup(f->reg, "marked", &e), 0);
	assert_true(e.flags & PROCREG_ENTRY_UNHEALTHY);
	assert_int_equal(procreg_refresh(f->reg, "marked"), 0);
	assert_int_equal(procreg_lookup(f->reg, "marked", &e), 0);
	assert_int_equal(e.flags & PROCREG_ENTRY_UNHEALTHY, 0);
}

static void test_queue_survives_restart(void **state)
{
	struct fx *f = *state;
	struct contender owner = contend(f->dir, "leader", 0, 0), s[3];

	assert_int_equal(report(&owner), '0');
	for (int i = 0; i < 3; i++) {
		s[i] = contend(f->dir, "leader", PROCREG_QUEUE, 0);
		assert_int_equal(report(&s[i]), 'q');
	}
	/* The second in line leaves before the crash: it must not come back. */
	bury(&s[1]);
	assert_int_equal(procreg_sync(f->reg), 0);
	restart(f);

	/* The owner dies under the new daemon: the line is as it was. */
	bury(&owner);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(owner_of(f->reg, "leader"), s[0].pid);
	assert_int_equal(report(&s[0]), 'o');

	/* The owner dies while no daemon runs: the next one hands the name
	 * on as it starts. */
	th_daemon_kill(&f->d);
	bury(&s[0]);
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(owner_of(f->reg, "leader"), s[2].pid);
	assert_int_equal(report(&s[2]), 'o');
	bury(&s[2]);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_lookup(f->reg, "leader", NULL), -ENOENT);
}

/* Whatever is found where the owners journal goes, a restart starts and
 * leaves a whole journal there: one cut short is replayed up to the cut,
 * anything else (garbage, a FIFO, a symlink, a directory) is replaced, or
 * set aside with the journal off, and logged. */
static void test_damaged_journal(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_register_opts, o, .lease_ms = 600000);
	static const char *const kinds[] = { "cut", "garbage", "fifo", "symlink", "directory" };
	char path[400], other[400];
	struct stat st;

	snprintf(path, sizeof(path), "%s/procreg.default.owners", f->dir);
	snprintf(other, sizeof(other), "%s/elsewhere", f->dir);
	th_write_file(other, "not to be touched\n", 0600);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		const char *k = kinds[i];
		char name[32];

		snprintf(name, sizeof(name), "leased.%zu", i);
		assert_int_equal(procreg_register_opts(f->reg, name, NULL, 0, &o), 0);
		th_daemon_kill(&f->d);
		if (!strcmp(k, "cut")) {
			int fd = open(path, O_WRONLY | O_APPEND);

			assert_true(fd >= 0);
			assert_int_equal(write(fd, "\x30\0\0\0garbage", 11), 11);
			close(fd);
		} else {
			assert_int_equal(unlink(path), 0);
			/* The daemon's own file, damaged: not a stranger's. */
			if (!strcmp(k, "garbage")) {
				th_write_file(path, "this is no journal, and never was one\n", 0600);
				th_daemon_own(path);
			}
			else if (!strcmp(k, "fifo"))
				assert_int_equal(mkfifo(path, 0600), 0);
			else if (!strcmp(k, "symlink"))
				assert_int_equal(symlink(other, path), 0);
			else
				assert_int_equal(mkdir(path, 0700), 0);
		}
		if (th_daemon_start(&f->d, f->dir, NULL, NULL) != 0) {
			th_daemon_dump_log(&f->d);
			fail_msg("journal %s: procregd did not start", k);
		}
		/* It serves, leases included. */
		assert_int_equal(procreg_register_opts(f->reg, "after", NULL, 0, &o), 0);
		assert_int_equal(procreg_refresh(f->reg, "after"), 0);
		assert_int_equal(procreg_unregister(f->reg, "after"), 0);
		/* The lease journaled before the cut is kept. */
		if (!strcmp(k, "cut"))
			assert_int_equal(procreg_refresh(f->reg, name), 0);
		if (!strcmp(k, "directory")) {
			assert_true(th_log_has(f->d.log, "queues and leases will not survive a restart"));
			assert_int_equal(lstat(path, &st), 0);
			assert_true(S_ISDIR(st.st_mode));
			assert_int_equal(rmdir(path), 0);
			/* The next start makes one. */
			restart(f);
		}
		assert_int_equal(lstat(path, &st), 0);
		assert_true(S_ISREG(st.st_mode));
	}
	assert_true(th_log_has(f->d.log, "cut short"));
	assert_true(th_log_has(f->d.log, "not a journal"));
	{
		char buf[64] = { 0 };
		int fd = open(other, O_RDONLY);

		assert_true(fd >= 0);
		assert_true(read(fd, buf, sizeof(buf) - 1) > 0);
		close(fd);
		assert_string_equal(buf, "not to be touched\n");
	}
}

static void test_lease_refreshed(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_register_opts, o, .lease_ms = 3000);
	uint64_t cur;
	PROCREG_OPTS(procreg_event, ev);

	assert_int_equal(procreg_register_opts(f->reg, "alive", NULL, 0, &o), 0);
	cur = procreg_feed_head(f->reg);
	/* Refreshing every 100 ms of a 3 s lease, ten times (a margin for a
	 * loaded machine): still there, and no EXPIRED event meanwhile. */
	for (int i = 0; i < 10; i++) {
		th_msleep(100);
		assert_int_equal(procreg_refresh(f->reg, "alive"), 0);
		assert_int_equal(procreg_lookup(f->reg, "alive", NULL), 0);
	}
	while (procreg_next_event(f->reg, &cur, &ev, 0) == 0)
		assert_int_not_equal(ev.type, PROCREG_EV_EXPIRED);
}

static void test_lease_mark_unhealthy(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_LEASE_MARK, .lease_ms = 50);
	PROCREG_OPTS(procreg_stats, st);
	uint64_t cur = procreg_feed_head(f->reg);
	TH_ENTRY(e);

	/* A name before it: the marked one is not the first in its owner's
	 * list. */
	assert_int_equal(procreg_register(f->reg, "well", NULL, 0), 0);
	assert_int_equal(procreg_register_opts(f->reg, "sick", "m", 1, &o), 0);
	await(f->reg, &cur, PROCREG_EV_EXPIRED, "sick");
	/* Kept, marked. */
	assert_int_equal(procreg_lookup(f->reg, "sick", &e), 0);
	assert_true(e.flags & PROCREG_ENTRY_UNHEALTHY);
	assert_int_equal(e.meta_len, 1);
	assert_int_equal(procreg_refresh(f->reg, "sick"), 0);
	await(f->reg, &cur, PROCREG_EV_REFRESHED, "sick");
	assert_int_equal(procreg_lookup(f->reg, "sick", &e), 0);
	assert_int_equal(e.flags & PROCREG_ENTRY_UNHEALTHY, 0);
	assert_true(e.flags & PROCREG_ENTRY_LEASED);
	/* Each mark put a new record in the old one's place, in the owner's
	 * list too: once it lets the name go, the owner holds nothing. */
	assert_int_equal(procreg_unregister(f->reg, "sick"), 0);
	assert_int_equal(procreg_unregister(f->reg, "well"), 0);
	procreg_stats(f->reg, &st);
	assert_int_equal(st.names, 0);
	assert_int_equal(st.processes, 0);
}

static void test_lease_hands_over(void **state)
{
	struct fx *f = *state;
	struct contender hung = contend(f->dir, "job", 0, 100), s;

	assert_int_equal(report(&hung), '0');
	s = contend(f->dir, "job", PROCREG_QUEUE, 0);
	assert_int_equal(report(&s), 'q');
	/* The owner never refreshes: the standby gets the name, though the
	 * owner still runs. */
	assert_int_equal(report(&s), 'o');
	assert_int_equal(owner_of(f->reg, "job"), s.pid);
	assert_int_equal(kill(hung.pid, 0), 0);
	bury(&hung);
	bury(&s);
}

static void test_refresh_permissions(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_register_opts, o, .lease_ms = 600000);
	pid_t kid;

	if (geteuid() != 0)
		fail_msg("this test needs root (CI runs as root)");
	assert_int_equal(procreg_register_opts(f->reg, "mine", NULL, 0, &o), 0);
	kid = fork();
	if (kid == 0) {
		procreg_t *r;

		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(1);
		r = th_open(f->dir);
		_exit(r && procreg_refresh(r, "mine") == -EPERM ? 0 : 2);
	}
	assert_int_equal(th_wait(kid), 0);
	/* Another process of the owner's uid may. */
	kid = fork();
	if (kid == 0) {
		procreg_t *r = th_open(f->dir);

		_exit(r && procreg_refresh(r, "mine") == 0 ? 0 : 3);
	}
	assert_int_equal(th_wait(kid), 0);
}

/* ---- the CLI ---------------------------------------------------------- */

static void test_cli_queue_and_ttl(void **state)
{
	struct fx *f = *state;
	const char *const refresh_none[] = { "refresh", "absent", NULL };
	char path[512], buf[64] = "";
	struct contender owner = contend(f->dir, "cli.lead", 0, 0);
	pid_t standby, leased;
	int fd;

	assert_int_equal(report(&owner), '0');
	/* procreg run NAME --queue -- CMD: waits in line, then execs CMD. */
	snprintf(path, sizeof(path), "%s/ran", f->dir);
	standby = fork();
	if (standby == 0) {
		char cmd[600];

		snprintf(cmd, sizeof(cmd), "echo $$ > %s; exec sleep 30", path);
		/* Gone with the test if it fails before it kills us. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(PROCREG_CLI_PATH, "procreg", "--dir", f->dir, "run", "cli.lead", "--queue", "--",
		      "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	/* In line (it has not run CMD), until the owner goes. */
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_not_equal(access(path, F_OK), 0);
	bury(&owner);
	for (int i = 0; i < 30000 && owner_of(f->reg, "cli.lead") != standby; i++)
		th_msleep(1);
	assert_int_equal(owner_of(f->reg, "cli.lead"), standby);
	for (int i = 0; i < 30000 && access(path, F_OK) != 0; i++)
		th_msleep(1);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	for (int i = 0; i < 30000 && read(fd, buf, sizeof(buf) - 1) <= 0; i++) {
		th_msleep(1);
		lseek(fd, 0, SEEK_SET);
	}
	close(fd);
	assert_int_equal(atoi(buf), standby); /* the same process: exec */
	kill(standby, SIGKILL);
	th_wait(standby);

	/* procreg run NAME --ttl: the name goes unless refreshed; procreg
	 * refresh keeps it. */
	leased = fork();
	if (leased == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(PROCREG_CLI_PATH, "procreg", "--dir", f->dir, "run", "cli.lease", "--ttl", "3",
		      "--", "sleep", "30", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 30000 && owner_of(f->reg, "cli.lease") != leased; i++)
		th_msleep(1);
	{
		const char *const refresh[] = { "refresh", "cli.lease", NULL };

		for (int i = 0; i < 5; i++) {
			assert_int_equal(th_cli(f->dir, NULL, 0, refresh), 0);
			th_msleep(100);
		}
		assert_int_equal(owner_of(f->reg, "cli.lease"), leased);
	}
	for (int i = 0; i < 30000 && owner_of(f->reg, "cli.lease"); i++)
		th_msleep(1);
	assert_int_equal(owner_of(f->reg, "cli.lease"), 0);
	assert_int_equal(kill(leased, 0), 0); /* it lives; its name expired */
	kill(leased, SIGKILL);
	th_wait(leased);
	assert_int_equal(th_cli(f->dir, NULL, 0, refresh_none), 1);
}

/* ---- leases on memberships ------------------------------------------- */

/* The flags of this process's membership of GROUP, or -1 if it has none. */
static int member_flags_cb(const struct procreg_entry *e, void *arg)
{
	if (e->pid != getpid())
		return 0;
	*(int *)arg = e->flags;
	return 1;
}

static int member_flags(procreg_t *reg, const char *group)
{
	int flags = -1;

	assert_true(procreg_members(reg, group, member_flags_cb, &flags) >= 0);
	return flags;
}

static void test_member_lease_expires(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_join_opts, o, .lease_ms = 50);
	uint64_t cur = procreg_feed_head(f->reg);
	PROCREG_OPTS(procreg_event, ev);

	/* We live, but do not refresh: the membership ends, as a leave. */
	assert_int_equal(procreg_join_opts(f->reg, "workers", "w", 1, &o), 0);
	assert_true(member_flags(f->reg, "workers") & PROCREG_ENTRY_LEASED);
	ev = await(f->reg, &cur, PROCREG_EV_LEFT, "workers");
	assert_int_equal(ev.pid, getpid());
	assert_int_equal(member_flags(f->reg, "workers"), -1);
	assert_int_equal(kill(getpid(), 0), 0);
	assert_int_equal(procreg_leave(f->reg, "workers"), -ENOENT);
	/* Joining again without a lease keeps it for good. */
	assert_int_equal(procreg_join(f->reg, "workers", NULL, 0), 0);
	assert_int_equal(member_flags(f->reg, "workers"), 0);
	/* And a membership leased, then joined again without one, is not
	 * leased any more. */
	assert_int_equal(procreg_join_opts(f->reg, "workers2", NULL, 0, &o), 0);
	assert_int_equal(procreg_join(f->reg, "workers2", NULL, 0), 0);
	assert_int_equal(member_flags(f->reg, "workers2"), 0);
	assert_int_equal(procreg_refresh(f->reg, "workers2"), -ENOENT);
}

static void test_member_lease_refreshed(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_join_opts, o, .lease_ms = 3000);
	PROCREG_OPTS(procreg_register_opts, ro, .lease_ms = 3000);
	uint64_t cur;
	PROCREG_OPTS(procreg_event, ev);

	/* A name and a group of the same spelling, both leased: one refresh
	 * renews both. */
	assert_int_equal(procreg_join_opts(f->reg, "crew", NULL, 0, &o), 0);
	assert_int_equal(procreg_register_opts(f->reg, "crew", NULL, 0, &ro), 0);
	assert_int_equal(procreg_join_opts(f->reg, "crew.only", NULL, 0, &o), 0);
	cur = procreg_feed_head(f->reg);
	/* Refreshing every 100 ms of a 3 s lease, ten times (a margin for a
	 * loaded machine): still there, and no LEFT or EXPIRED event. */
	for (int i = 0; i < 10; i++) {
		th_msleep(100);
		assert_int_equal(procreg_refresh(f->reg, "crew"), 0);
		/* No name "crew.only": the membership alone is renewed. */
		assert_int_equal(procreg_refresh(f->reg, "crew.only"), 0);
		assert_true(member_flags(f->reg, "crew") & PROCREG_ENTRY_LEASED);
		assert_true(member_flags(f->reg, "crew.only") & PROCREG_ENTRY_LEASED);
		assert_int_equal(procreg_lookup(f->reg, "crew", NULL), 0);
	}
	while (procreg_next_event(f->reg, &cur, &ev, 0) == 0) {
		assert_int_not_equal(ev.type, PROCREG_EV_LEFT);
		assert_int_not_equal(ev.type, PROCREG_EV_EXPIRED);
	}
	/* Left, its lease goes with it: nothing to refresh. */
	assert_int_equal(procreg_leave(f->reg, "crew.only"), 0);
	assert_int_equal(procreg_refresh(f->reg, "crew.only"), -ENOENT);
}

static void test_member_lease_survives_restart(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_join_opts, o, .lease_ms = 1500);
	uint64_t cur;

	/* Acknowledged, then the daemon dies before the lease runs out: the
	 * next one knows the membership is leased, and lets it run out. */
	assert_int_equal(procreg_join_opts(f->reg, "pool", NULL, 0, &o), 0);
	assert_int_equal(procreg_join_opts(f->reg, "pool.dropped", NULL, 0, &o), 0);
	/* A lease given up by joining again without one stays given up. */
	assert_int_equal(procreg_join(f->reg, "pool.dropped", NULL, 0), 0);
	restart(f);
	assert_true(member_flags(f->reg, "pool") & PROCREG_ENTRY_LEASED);
	/* Still refreshable after the restart. */
	assert_int_equal(procreg_refresh(f->reg, "pool"), 0);
	cur = procreg_feed_head(f->reg);
	await(f->reg, &cur, PROCREG_EV_LEFT, "pool");
	assert_int_equal(member_flags(f->reg, "pool"), -1);
	assert_int_equal(member_flags(f->reg, "pool.dropped"), 0);
	/* Gone for good: another restart does not bring it back. */
	restart(f);
	assert_int_equal(member_flags(f->reg, "pool"), -1);
	assert_int_equal(procreg_refresh(f->reg, "pool"), -ENOENT);
}

/* A batch's JOIN takes a lease as procreg_join_opts() does. */
static void test_member_lease_batch(void **state)
{
	struct fx *f = *state;
	const size_t o = sizeof(struct procreg_op);
	struct procreg_op ops[3] = {
		{ .sz = o, .kind = PROCREG_OP_JOIN, .name = "batch.leased", .lease_ms = 50 },
		{ .sz = o, .kind = PROCREG_OP_JOIN, .name = "batch.kept" },
		/* A LEAVE still takes no lease. */
		{ .sz = o, .kind = PROCREG_OP_LEAVE, .name = "batch.kept", .lease_ms = 50 },
	};
	uint64_t cur = procreg_feed_head(f->reg);
	struct procreg_event ev;

	for (int i = 0; i < 3; i++)
		ops[i].result = 99;
	assert_int_equal(procreg_batch(f->reg, ops, 3), 0);
	assert_int_equal(ops[0].result, 0);
	assert_int_equal(ops[1].result, 0);
	assert_int_equal(ops[2].result, -EINVAL);
	ev = await(f->reg, &cur, PROCREG_EV_LEFT, "batch.leased");
	assert_int_equal(ev.pid, getpid());
	assert_int_equal(member_flags(f->reg, "batch.leased"), -1);
	assert_int_equal(member_flags(f->reg, "batch.kept"), 0);
}

/* A member that dies takes its membership's lease with it: the journal
 * forgets it (a restart finds nothing to expire). */
static void test_member_lease_dies(void **state)
{
	struct fx *f = *state;
	pid_t kid = fork();
	uint64_t n;

	assert_true(kid >= 0);
	if (kid == 0) {
		PROCREG_OPTS(procreg_join_opts, o, .lease_ms = 600000);
		procreg_t *r = th_open(f->dir);

		_exit(r && procreg_join_opts(r, "mortal", NULL, 0, &o) == 0 ? 0 : 1);
	}
	assert_int_equal(th_wait(kid), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_group_count(f->reg, "mortal", &n, NULL), 0);
	assert_int_equal(n, 0);
	restart(f);
	assert_false(th_log_has(f->d.log, "dropped (owner or name gone)"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_queue_order_on_death, setup, teardown),
		cmocka_unit_test_setup_teardown(test_queue_on_unregister_and_events, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_options_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_handover_in_full_table, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_lease_expires, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lease_refreshed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lease_mark_unhealthy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lease_hands_over, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refresh_permissions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cli_queue_and_ttl, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lease_survives_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_queue_survives_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_damaged_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_member_lease_expires, setup, teardown),
		cmocka_unit_test_setup_teardown(test_member_lease_refreshed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_member_lease_survives_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_member_lease_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_member_lease_dies, setup, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
