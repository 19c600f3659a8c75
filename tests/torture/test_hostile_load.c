/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_hostile_load.c - an unprivileged local user against what the
 * daemon itself has to give: its file descriptors, and its time.
 *
 * Each attacker is an account the test makes (th_user_new), acting in a
 * forked child that became it (th_become); root is the victim, and so are
 * the other users.
 *
 * Needs root (CI runs as root): it fails otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "proto.h"

#define USERS 5
#define WAIT_MS 60000

/* The daemon's descriptors: an open files limit of FDS, and the uses it
 * keeps free of other uids' processes (procs.c: procs_limits): two a
 * connection, one a reader, 512 more. */
#define FDS 1024
#define CLIENTS 99
#define READERS 16
#define ROOM (FDS - 2 * CLIENTS - READERS - 512) /* 298 */
#define PER_UID (ROOM / 4)                        /* 74, the default */

struct fx {
	char *dir;
	struct th_daemon d;
	struct th_user u[USERS];
	int nusers;
	struct th_held h;
	pid_t kid; /* a child that waits to be killed: by teardown too */
};

static int start(void **state, const char *const *args)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (geteuid() != 0)
		fail_msg("test_hostile_load needs root, to make its attackers (CI runs as root)");
	assert_non_null(f);
	f->dir = th_mkdtemp();
	/* The users' processes connect to the socket there. */
	assert_int_equal(chmod(f->dir, 0755), 0);
	if (th_daemon_start(&f->d, f->dir, args, NULL)) {
		th_daemon_dump_log(&f->d);
		fail_msg("procregd did not start");
	}
	th_held_init(&f->h);
	*state = f;
	return 0;
}

static int setup(void **state)
{
	static const char *const args[] = { "--max-clients", "99", "--max-readers", "16", NULL };

	return start(state, args);
}

/* The feed paced at 50 events a second a uid: half a ring (4,096
 * events) is 82 s of allowance. LAPSED leases made are 60 s of it, and as
 * many more due 120 s, so that a test's own slowness (under 38 s) cannot
 * decide on which side of it the uid is. */
#define LAPSED 3000

static const char *const slow_feed_args[] = { "--max-clients", "99", "--max-readers", "16",
					       "--max-feed-rate-per-uid", "50", NULL };

static int setup_slow_feed(void **state)
{
	return start(state, slow_feed_args);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int st;

	th_held_kill(&f->h);
	if (f->kid > 0) {
		kill(f->kid, SIGKILL);
		th_wait(f->kid);
	}
	st = th_daemon_stop_dump(&f->d);
	for (int i = 0; i < f->nusers; i++)
		th_user_del(&f->u[i]);
	th_rmrf(f->dir);
	free(f->dir);
	free(f);
	assert_int_equal(st, 0);
	return 0;
}

static struct th_user *user(struct fx *f)
{
	assert_true(f->nusers < USERS);
	th_user_new(&f->u[f->nusers]);
	return &f->u[f->nusers++];
}

/* In a child: until the test has set *GO to STEP at least. */
static void await_go(const int *go, int step)
{
	while (__atomic_load_n(go, __ATOMIC_ACQUIRE) < step)
		usleep(1000);
}

/* Until *V is at least AT_LEAST (a child said so), WAIT_MS at most. */
static void wait_for(const int *v, int at_least)
{
	for (int i = 0; __atomic_load_n(v, __ATOMIC_ACQUIRE) < at_least; i++) {
		if (i > WAIT_MS / 10)
			fail_msg("waited %d ms", WAIT_MS);
		usleep(10000);
	}
}

/* ---- processes, each holding a name ------------------------------------ */

/* What a leader, as U (root if NULL), does: forks KIDS processes that
 * wait, and registers a name for each by its pidfd; it tells how each
 * went. */
struct leader {
	const char *dir;
	const struct th_user *u;
	const char *prefix;
	int kids;
	/* Results, in memory shared with the test: */
	int ok, edquot, enospc, other, first_other;
	int self_full;  /* its own name while its uid is full */
	int self_idle;  /* ... once one of its processes gave its name back */
	int idle_back;  /* that process's name again */
	bool no_close;  /* released, it exits without procreg_close() (which
			 * may talk to a daemon that is stopped) */
};

static pid_t kid_pids[1024];
static int nkid_pids;
static procreg_t *leader_reg;

static int lead(void *arg, int phase)
{
	struct leader *a = arg;
	char name[64];

	if (phase) {
		/* Its processes go with it, reaped. */
		for (int i = 0; i < nkid_pids; i++)
			kill(kid_pids[i], SIGKILL);
		for (int i = 0; i < nkid_pids; i++)
			waitpid(kid_pids[i], NULL, 0);
		if (!a->no_close)
			procreg_close(leader_reg);
		return 0;
	}
	if (a->u)
		th_become(a->u);
	leader_reg = th_open(a->dir);
	if (!leader_reg)
		return 1;
	for (int i = 0; i < a->kids && i < 1024; i++) {
		pid_t pid = fork();
		int fd, err;

		if (pid < 0)
			return 2;
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			for (;;)
				pause();
		}
		kid_pids[nkid_pids++] = pid;
		fd = (int)syscall(SYS_pidfd_open, pid, 0);
		if (fd < 0)
			return 3;
		snprintf(name, sizeof(name), "%s.%d", a->prefix, i);
		err = procreg_register_pidfd(leader_reg, fd, name, NULL, 0);
		close(fd);
		if (err == 0)
			a->ok++;
		else if (err == -EDQUOT)
			a->edquot++;
		else if (err == -ENOSPC)
			a->enospc++;
		else if (!a->other++)
			a->first_other = err;
	}
	/* The leader itself is one process more. */
	snprintf(name, sizeof(name), "%s.self", a->prefix);
	a->self_full = procreg_register(leader_reg, name, NULL, 0);
	/* Its first process holds nothing once its name is given back: it
	 * is no longer counted, and the leader is, in its stead. */
	snprintf(name, sizeof(name), "%s.0", a->prefix);
	if (a->ok && procreg_unregister(leader_reg, name) == 0) {
		int fd = (int)syscall(SYS_pidfd_open, kid_pids[0], 0);

		snprintf(name, sizeof(name), "%s.self", a->prefix);
		a->self_idle = procreg_register(leader_reg, name, NULL, 0);
		snprintf(name, sizeof(name), "%s.0", a->prefix);
		a->idle_back = procreg_register_pidfd(leader_reg, fd, name, NULL, 0);
		close(fd);
	}
	return 0;
}

static struct leader *leader_new(struct fx *f, const struct th_user *u, const char *prefix,
				 int kids)
{
	struct leader *a = th_shared(sizeof(*a));

	*a = (struct leader){ .dir = f->dir, .u = u, .prefix = prefix, .kids = kids };
	th_held_start(&f->h, lead, a);
	th_held_ready(&f->h, WAIT_MS);
	printf("%s: %d registered, %d EDQUOT, %d ENOSPC, %d other (first %d)\n", prefix, a->ok,
	       a->edquot, a->enospc, a->other, a->first_other);
	return a;
}

/*
 * Before: a user forking 20,500 processes that each took a name by pidfd
 * had a daemon whose open files limit was 20,000 hold 19,999 descriptors,
 * and every new connection, root's too, was reset until those processes
 * died. Now one uid's processes are capped (--max-procs-per-uid, by
 * default a quarter of what unprivileged uids may have together), with
 * EDQUOT; another user, and root, are not held up.
 */
static void test_procs_per_uid(void **state)
{
	struct fx *f = *state;
	struct th_user *a = user(f), *b = user(f);
	struct leader *la, *lb, *la2;
	char want[128];
	procreg_t *root;

	/* A's processes up to its cap; past it, each refused. */
	la = leader_new(f, a, "a", PER_UID + 6);
	assert_int_equal(la->other, 0);
	assert_int_equal(la->ok, PER_UID);
	assert_int_equal(la->edquot, 6);
	assert_int_equal(la->self_full, -EDQUOT);
	/* A process that gave its name back is not counted: the leader
	 * gets in; and then that one is refused its name again. */
	assert_int_equal(la->self_idle, 0);
	assert_int_equal(la->idle_back, -EDQUOT);
	assert_true(th_log_has(f->d.log, "name refused (EDQUOT): each process holding names costs"));

	/* B's cap is its own. */
	lb = leader_new(f, b, "b", PER_UID + 6);
	assert_int_equal(lb->other, 0);
	assert_int_equal(lb->ok, PER_UID);
	assert_int_equal(lb->edquot, 6);

	/* Root connects and registers, for itself and for processes of
	 * its own (not counted). */
	root = th_open(f->dir);
	assert_non_null(root);
	assert_int_equal(procreg_register(root, "root.name", NULL, 0), 0);
	{
		struct leader *lr = leader_new(f, NULL, "root", 20);

		assert_int_equal(lr->ok, 20);
		assert_int_equal(lr->self_full, 0);
	}

	/* Gone with their processes, A's are room again (the deaths seen:
	 * a SYNC). */
	assert_int_equal(th_held_release(&f->h), 0);
	assert_int_equal(procreg_sync(root), 0);
	procreg_close(root);
	th_held_init(&f->h);
	la2 = leader_new(f, a, "a2", 5);
	assert_int_equal(la2->ok, 5);
	assert_int_equal(la2->other + la2->edquot + la2->enospc, 0);
	assert_int_equal(th_held_release(&f->h), 0);
	/* The limits, as the start said them. */
	snprintf(want, sizeof(want), "processes holding names: %d a uid, %d of all but root's",
		 PER_UID, ROOM);
	assert_true(th_log_has(f->d.log, want));
	munmap(la, sizeof(*la));
	munmap(lb, sizeof(*lb));
	munmap(la2, sizeof(*la2));
}

/* As U, a process with a connection of its own (said HELLO): told to,
 * it sends a registration of its own name "a.late", says it has (SENT),
 * and then what the daemon answered (STATUS). */
struct late {
	const char *dir;
	const struct th_user *u;
	/* In memory shared with the test: */
	int ready, go, sent, done, status;
};

static int late_main(void *p)
{
	struct late *a = p;
	static uint8_t pkt[256];
	struct pr_frame fr;
	size_t pos = 0, at = 0;
	ssize_t n;
	int fd;

	th_become(a->u);
	fd = th_raw_try_connect(a->dir);
	if (fd < 0 || th_raw_try_hello(fd) < 0)
		return 70;
	__atomic_store_n(&a->ready, 1, __ATOMIC_RELEASE);
	await_go(&a->go, 1);
	procreg__proto_put_name(pkt, &pos, PR_OP_REGISTER, 0, 9, "a.late", 6, NULL, 0);
	if (send(fd, pkt, pos, MSG_NOSIGNAL) != (ssize_t)pos)
		return 71;
	__atomic_store_n(&a->sent, 1, __ATOMIC_RELEASE);
	n = recv(fd, pkt, sizeof(pkt), 0);
	if (n <= 0 || procreg__proto_next(pkt, (size_t)n, &at, &fr) != 1)
		return 72;
	a->status = fr.h.status;
	__atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
	pause();
	return 0;
}

/*
 * A process whose death is under way holds no descriptor of the daemon's
 * (its pidfd is closed as the death begins), and is no longer counted
 * among its uid's processes, though its names may take a while to leave
 * (a slice at a time, at its uid's pace). Before, it was counted until
 * its last name was out: a user whose processes, as many as it may have,
 * died together had its next process refused (EDQUOT) meanwhile. Shown
 * by order: with the daemon stopped, the user's processes die and another
 * of its processes asks for a name, so that the deaths begin in the same
 * turn of the loop that handles the request, before any of their names
 * left.
 */
static void test_dying_not_counted(void **state)
{
	struct fx *f = *state;
	struct th_user *a = user(f);
	struct late *l = th_shared(sizeof(*l));
	struct leader *la;
	pid_t kid;

	*l = (struct late){ .dir = f->dir, .u = a };
	kid = th_fork(late_main, l);
	wait_for(&l->ready, 1);
	/* Its pipes anew, which that child does not hold open: the leader
	 * is released by their end. */
	assert_int_equal(th_held_release(&f->h), 0);
	th_held_init(&f->h);
	la = leader_new(f, a, "a", PER_UID);
	assert_int_equal(la->ok, PER_UID);
	assert_int_equal(la->self_full, -EDQUOT);
	la->no_close = true;

	assert_int_equal(kill(f->d.pid, SIGSTOP), 0);
	if (!th_until(th_stopped, &f->d.pid, WAIT_MS))
		fail_msg("procregd did not stop");
	assert_int_equal(th_held_release(&f->h), 0); /* its processes killed, reaped */
	th_held_init(&f->h);
	__atomic_store_n(&l->go, 1, __ATOMIC_RELEASE);
	wait_for(&l->sent, 1);
	assert_int_equal(kill(f->d.pid, SIGCONT), 0);
	wait_for(&l->done, 1);
	printf("a registration of the user's, once its %d processes died: %d\n", PER_UID,
	       l->status);
	assert_int_equal(l->status, 0);
	kill(kid, SIGKILL);
	th_wait(kid);
	munmap(la, sizeof(*la));
}

/*
 * Many users, each within its cap, together: they stop (ENOSPC) short of
 * the descriptors connections need, and root still connects and
 * registers. Before, the fifth user here took the daemon out of
 * descriptors, and root's connection was reset.
 */
static void test_procs_all_uids(void **state)
{
	struct fx *f = *state;
	struct leader *l[USERS];
	procreg_t *root;
	int got = 0;

	for (int i = 0; i < USERS - 1; i++) {
		char prefix[8];

		snprintf(prefix, sizeof(prefix), "u%d", i);
		l[i] = leader_new(f, user(f), strdup(prefix), PER_UID);
		assert_int_equal(l[i]->ok, PER_UID);
		got += l[i]->ok;
	}
	/* The last: as many processes as the daemon has descriptors. */
	l[USERS - 1] = leader_new(f, user(f), "last", FDS);
	assert_int_equal(l[USERS - 1]->other, 0);
	assert_int_equal(l[USERS - 1]->ok, ROOM - got);
	assert_int_equal(l[USERS - 1]->enospc, FDS - (ROOM - got));
	assert_true(th_log_has(f->d.log, "name refused (ENOSPC): each process holding names costs"));

	/* Root: a new connection, names, processes of its own. */
	root = th_open(f->dir);
	assert_non_null(root);
	assert_int_equal(procreg_register(root, "root.name", NULL, 0), 0);
	assert_int_equal(procreg_sync(root), 0);
	procreg_close(root);
	assert_int_equal(th_held_release(&f->h), 0);
	for (int i = 0; i < USERS; i++) {
		if (i < USERS - 1)
			free((char *)l[i]->prefix);
		munmap(l[i], sizeof(*l[i]));
	}
}

/* ---- feed subscribers that never read --------------------------------- */

struct feed_arg {
	const char *dir;
	const struct th_user *u;
};

/* Bytes waiting in FD (a SOCK_SEQPACKET socket: all its packets). */
static int queued(int fd)
{
	int n = -1;

	return ioctl(fd, FIONREAD, &n) < 0 ? -1 : n;
}

/* One name registered and removed through R (two events); then a SYNC
 * on another connection, BARRIER, so that the batches of both are over,
 * and their notifications sent (the daemon sends them at the end of a
 * batch, and reads another connection's request in a later one). */
static int pair(procreg_t *r, procreg_t *barrier)
{
	if (procreg_register(r, "feed.x", NULL, 0) != 0 || procreg_unregister(r, "feed.x") != 0)
		return -1;
	return procreg_sync(barrier);
}

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

#define FEED_FAIL(...) do { fprintf(stderr, __VA_ARGS__); return 1; } while (0)

/* As the attacker: a feed fd never read, filled; then what the daemon
 * sends it once it has a little room, and once it has read. */
static int feed_main(void *p)
{
	const struct feed_arg *a = p;
	PROCREG_OPTS(procreg_event, ev);
	procreg_t *r, *barrier;
	int fd, full, now, pairs = 0, events = 0;
	uint64_t cur;
	char b[64];

	th_become(a->u);
	r = th_open(a->dir);
	barrier = th_open(a->dir);
	if (!r || !barrier)
		FEED_FAIL("no handle\n");
	fd = procreg_feed_fd(r);
	if (fd < 0)
		FEED_FAIL("procreg_feed_fd: %d\n", fd);
	cur = procreg_feed_head(r);
	/* Until a pair's notifications find no room. */
	for (full = queued(fd);; full = now) {
		if (pair(r, barrier) != 0)
			FEED_FAIL("pair %d failed\n", pairs);
		pairs++;
		now = queued(fd);
		if (now == full)
			break;
		if (pairs > 100000)
			FEED_FAIL("the socket never filled: %d bytes\n", now);
	}
	fprintf(stderr, "full after %d pairs: %d notifications\n", pairs, full / (int)PR_FRAME_HDR);
	/* A little room, but not writable (a quarter of its buffer). A send
	 * would fit now: the daemon does not make it. */
	if (recv(fd, b, sizeof(b), MSG_DONTWAIT) != PR_FRAME_HDR)
		FEED_FAIL("recv\n");
	for (int i = 0; i < 3; i++, pairs++)
		if (pair(r, barrier) != 0)
			FEED_FAIL("pair failed\n");
	now = queued(fd);
	fprintf(stderr, "after one read and 3 pairs: %d notifications\n", now / (int)PR_FRAME_HDR);
	if (now != full - (int)PR_FRAME_HDR)
		FEED_FAIL("the daemon sent to a socket it found full: %d bytes, %d before\n", now,
			  full - (int)PR_FRAME_HDR);
	/* Read, its socket has room again: the notification skipped is
	 * sent, one (it must be, or what was published after the reader's
	 * last look could go unseen). It may come while the rest are read. */
	for (int left = now / (int)PR_FRAME_HDR + 1; left > 0; left--)
		if ((recv(fd, b, sizeof(b), MSG_DONTWAIT) != PR_FRAME_HDR &&
		     (!readable(fd, WAIT_MS) || recv(fd, b, sizeof(b), MSG_DONTWAIT) != PR_FRAME_HDR)))
			FEED_FAIL("no notification once read (%d to come)\n", left);
	if (recv(fd, b, sizeof(b), MSG_DONTWAIT) >= 0)
		FEED_FAIL("a notification more\n");
	/* Every event is in the feed, by cursor: none is lost for the
	 * notifications not sent. */
	while (procreg_next_event(r, &cur, &ev, 0) == 0) {
		int want = events % 2 ? PROCREG_EV_UNREGISTERED : PROCREG_EV_REGISTERED;

		if (ev.type != want || strcmp(ev.name, "feed.x"))
			FEED_FAIL("event %d: type %d name %s\n", events, ev.type, ev.name);
		events++;
	}
	if (events != 2 * pairs)
		FEED_FAIL("%d events for %d pairs\n", events, pairs);
	/* And the next events are told as ever. */
	if (procreg_register(r, "feed.after", NULL, 0) != 0 || !readable(fd, WAIT_MS))
		FEED_FAIL("no notification for a new event\n");
	if (procreg_next_event(r, &cur, &ev, 0) != 0 || strcmp(ev.name, "feed.after"))
		FEED_FAIL("the new event\n");
	close(fd);
	procreg_close(barrier);
	procreg_close(r);
	return 0;
}

/*
 * Before: every batch with events sent a notification to every
 * subscriber, its socket full or not; 127 subscribers of one user that
 * never read took another user's synchronous registrations and removals
 * from 23.6k pairs a second to 2.6-4.6k. Now a subscriber whose socket
 * was found full is sent nothing until it has read (its socket writable
 * again), then one notification. What is seen: with a little room made
 * in a full socket, events published leave it as it was (a send would
 * have fit, and was not made); once read, the skipped notification comes,
 * and every event is in the feed.
 */
static void test_feed_unread(void **state)
{
	struct fx *f = *state;
	struct feed_arg a = { f->dir, user(f) };

	assert_int_equal(th_wait(th_fork(feed_main, &a)), 0);
}

/* ---- the feed flooded ------------------------------------------------- */

#define FLOOD_OPS 4000
#define VICTIMS 20
/* Laps a root follower may take while a user floods the feed: one uid
 * can no longer turn the ring over faster than 8 times a second, which a
 * follower on a busy machine keeps up with but for a stall or two. */
#define FOLLOW_LAPS_MAX 2

struct flood {
	const char *dir;
	const struct th_user *u;
	/* In memory shared with the test: */
	int stop, rounds, failed, first_err;
};

/* As the attacker: batches of FLOOD_OPS registrations, then of as many
 * removals, until told to stop; every request's result counted. */
static int flood_main(void *p)
{
	struct flood *a = p;
	static struct procreg_op ops[FLOOD_OPS];
	static char names[FLOOD_OPS][32];
	procreg_t *r;

	th_become(a->u);
	r = th_open(a->dir);
	if (!r)
		return 1;
	for (int i = 0; i < FLOOD_OPS; i++)
		snprintf(names[i], sizeof(names[i]), "flood.%d", i);
	while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
		for (int k = 0; k < 2; k++) {
			int err;

			for (int i = 0; i < FLOOD_OPS; i++)
				ops[i] = (struct procreg_op){
					.sz = sizeof(struct procreg_op), .name = names[i],
					.kind = k ? PROCREG_OP_UNREGISTER : PROCREG_OP_REGISTER };
			err = procreg_batch(r, ops, FLOOD_OPS);
			for (int i = 0; i < FLOOD_OPS; i++) {
				int e = err < 0 ? err : ops[i].result;

				if (e && !a->failed++)
					a->first_err = e;
			}
		}
		__atomic_add_fetch(&a->rounds, 1, __ATOMIC_RELEASE);
	}
	procreg_close(r);
	return 0;
}

/* As root: the feed followed from where it is when READY is set; STEP
 * is given each event read, or a lap (ERR -EOVERFLOW, EV NULL), and says
 * when to stop (true). */
struct follower {
	const char *dir;
	bool (*step)(struct follower *a, procreg_t *r, int err, const struct procreg_event *ev);
	pid_t pid;              /* for the step: whose events it counts */
	/* In memory shared with the test: */
	int ready, laps, seen, events;
};

static int follow_main(void *p)
{
	struct follower *a = p;
	PROCREG_OPTS(procreg_event, ev);
	procreg_t *r = th_open(a->dir);
	uint64_t cur;
	int err;

	if (!r)
		return 1;
	cur = procreg_feed_head(r);
	__atomic_store_n(&a->ready, 1, __ATOMIC_RELEASE);
	for (;;) {
		err = procreg_next_event(r, &cur, &ev, WAIT_MS);
		if (err == -EOVERFLOW)
			a->laps++;
		else if (err) {
			fprintf(stderr, "procreg_next_event: %d\n", err);
			return 2;
		} else {
			a->events++;
		}
		if (a->step(a, r, err, err ? NULL : &ev))
			break;
	}
	procreg_close(r);
	return 0;
}

/* Until "victim.end" is seen, or found in the table when the follower,
 * lapped, looks there (as a follower must: procreg_next_event's
 * -EOVERFLOW). SEEN counts root's registrations seen as events. */
static bool victims_step(struct follower *a, procreg_t *r, int err, const struct procreg_event *ev)
{
	if (err)
		return procreg_lookup(r, "victim.end", NULL) == 0;
	if (ev->type != PROCREG_EV_REGISTERED || strncmp(ev->name, "victim.", 7))
		return false;
	if (!strcmp(ev->name, "victim.end"))
		return true;
	a->seen++;
	return false;
}

/*
 * Before: the feed is one ring of 8,192 events for everyone, and one
 * user looping batches of 4,000 registrations and 4,000 removals turned
 * it over every 2 ms or so: a root follower was lapped 1,000s of times
 * and saw few of the names root registered meanwhile. Now a uid's events
 * are paced (--max-feed-rate-per-uid, 65,536 a second by default): its
 * requests wait, none fails, and the follower sees root's registrations,
 * lapped twice at most.
 */
static void test_feed_flooded(void **state)
{
	struct fx *f = *state;
	struct flood *fl = th_shared(sizeof(*fl));
	struct follower *fo = th_shared(sizeof(*fo));
	procreg_t *r = th_open(f->dir);
	char name[32];
	pid_t flooder, follower;
	int st;

	assert_non_null(r);

	*fl = (struct flood){ .dir = f->dir, .u = user(f) };
	*fo = (struct follower){ .dir = f->dir, .step = victims_step };
	follower = th_fork(follow_main, fo);
	wait_for(&fo->ready, 1);
	flooder = th_fork(flood_main, fl);
	/* Past its first batches, which half a ring's allowance may take
	 * at once. */
	wait_for(&fl->rounds, 2);
	for (int i = 0; i < VICTIMS; i++) {
		snprintf(name, sizeof(name), "victim.%d", i);
		assert_int_equal(procreg_register(r, name, NULL, 0), 0);
		usleep(50000);
	}
	assert_int_equal(procreg_register(r, "victim.end", NULL, 0), 0);
	st = th_wait_ms(follower, WAIT_MS);
	__atomic_store_n(&fl->stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(th_wait_ms(flooder, WAIT_MS), 0);
	procreg_close(r);
	printf("follower: %d laps, %d of %d registrations of root's seen, %d events read; "
	       "flooder: %d rounds of %d events, %d requests failed (first %d)\n",
	       fo->laps, fo->seen, VICTIMS, fo->events, fl->rounds, 2 * FLOOD_OPS, fl->failed,
	       fl->first_err);
	assert_int_equal(st, 0);
	/* Paced, not refused. */
	assert_int_equal(fl->failed, 0);
	assert_true(fl->rounds >= 2);
	assert_true(fo->laps <= FOLLOW_LAPS_MAX);
	if (!fo->laps)
		assert_int_equal(fo->seen, VICTIMS);
	assert_true(th_log_has(f->d.log, "--max-feed-rate-per-uid"));
}

/* What a user who lets leases lapse does, as U: registers LAPSED names
 * leased for 200 ms in one batch, says how it went, and holds on (its
 * death would be charged to it too, and is not what is tested); then,
 * told to, registers one name more. */
struct lapser {
	const char *dir;
	const struct th_user *u;
	int done, failed, go, probed;
};

static int lapse_main(void *arg)
{
	struct lapser *l = arg;
	struct procreg_op *ops = calloc(LAPSED, sizeof(*ops));
	char (*names)[24] = calloc(LAPSED, sizeof(*names));
	procreg_t *r;

	th_become(l->u);
	r = th_open(l->dir);
	if (!r || !ops || !names)
		return 70;
	for (int i = 0; i < LAPSED; i++) {
		snprintf(names[i], sizeof(names[i]), "lapse.%d", i);
		ops[i] = (struct procreg_op){ .sz = sizeof(ops[i]), .kind = PROCREG_OP_REGISTER,
					      .name = names[i], .lease_ms = 200 };
	}
	if (procreg_batch(r, ops, LAPSED) != 0)
		l->failed = LAPSED;
	for (int i = 0; i < LAPSED; i++)
		l->failed += ops[i].result != 0;
	__atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
	await_go(&l->go, 1);
	l->probed = procreg_register(r, "lapse.probe", NULL, 0) == 0 ? 1 : -1;
	pause();
	return 0;
}

/*
 * Before: a uid's deaths were charged to its pace but its leases coming
 * due were not, so a user who let leases lapse made events at twice its
 * pace (paid for when made, free when due). Now they are charged: its
 * 3,000 registrations leave it within its allowance, their 3,000 expiries
 * put it past it, and its next request waits its turn (logged).
 */
static void test_lapsed_leases_paced(void **state)
{
	struct fx *f = *state;
	struct lapser *l = th_shared(sizeof(*l));
	procreg_t *r = th_open(f->dir);

	assert_non_null(r);
	*l = (struct lapser){ .dir = f->dir, .u = user(f) };
	f->kid = th_fork(lapse_main, l);
	wait_for(&l->done, 1);
	assert_int_equal(l->failed, 0);
	/* The registrations alone are within its allowance. */
	assert_int_equal(th_log_count(f->d.log, "--max-feed-rate-per-uid"), 0);
	/* Every lease due, and charged: its names are gone. */
	for (int i = 0, left = LAPSED; left; i++) {
		char name[24];

		if (i > WAIT_MS / 10)
			fail_msg("%d of %d leased names still there after %d ms", left, LAPSED,
				 WAIT_MS);
		usleep(10000);
		left = 0;
		for (int k = 0; k < LAPSED; k++) {
			snprintf(name, sizeof(name), "lapse.%d", k);
			left += procreg_lookup(r, name, NULL) == 0;
		}
	}
	__atomic_store_n(&l->go, 1, __ATOMIC_RELEASE);
	for (int i = 0; !th_log_count(f->d.log, "--max-feed-rate-per-uid"); i++) {
		if (i > WAIT_MS / 10)
			fail_msg("the uid whose %d leases lapsed was not paced (its probe: %d)",
				 LAPSED, __atomic_load_n(&l->probed, __ATOMIC_ACQUIRE));
		usleep(10000);
	}
	/* Waiting, not refused. */
	assert_int_equal(__atomic_load_n(&l->probed, __ATOMIC_ACQUIRE), 0);
	kill(f->kid, SIGKILL);
	th_wait(f->kid);
	f->kid = 0;
	procreg_close(r);
}

/* ---- places in line asked for again --------------------------------------- */

#define REASK_NAMES 16
#define REASK_ROUNDS 200

struct reasker {
	const char *dir;
	const struct th_user *u;
	/* In memory shared with the test: the step it is through (1 asked,
	 * 2 asked again the same, 3 asked again with new metadata), the step
	 * it may go on to, and requests answered other than EINPROGRESS. */
	int step, go, wrong, last;
};

static int reask_step(procreg_t *r, struct reasker *a, int rounds, bool vary)
{
	static uint8_t meta[PROCREG_META_MAX];
	PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_QUEUE);

	for (int round = 0; round < rounds; round++)
		for (int k = 0; k < REASK_NAMES; k++) {
			char name[PROCREG_NAME_MAX + 1];
			int err;

			snprintf(name, sizeof(name), "reask.%d.%0200d", k, 0);
			meta[0] = vary ? (uint8_t)(round + 1) : 0;
			err = procreg_register_opts(r, name, meta, sizeof(meta), &o);
			if (err != -EINPROGRESS) {
				a->wrong++;
				a->last = err;
			}
		}
	return 0;
}

/* As the attacker: a place in line for each of REASK_NAMES names (root's),
 * then REASK_ROUNDS times each asked for again, the same, then with new
 * metadata each time, a step at a time as the test says. */
static int reask_main(void *p)
{
	struct reasker *a = p;
	procreg_t *r;

	th_become(a->u);
	r = th_open(a->dir);
	if (!r)
		return 70;
	for (int step = 1; step <= 3; step++) {
		await_go(&a->go, step);
		reask_step(r, a, step == 1 ? 1 : REASK_ROUNDS, step == 3);
		__atomic_store_n(&a->step, step, __ATOMIC_RELEASE);
	}
	pause();
	return 0;
}

/*
 * Before: a place in line asked for again was written to the owners
 * journal each time (a record of up to 1.3 KiB), whether or not anything
 * changed, and those writes were paid for by nothing: one user's process
 * asking in a loop had the journal written at 100 MB a second and
 * rewritten whole twice a second, and root's register+unregister pairs
 * fell from 25,000 a second to 2,700. Now a place asked for again the
 * same writes nothing (the journal does not grow at all over 3,200 such
 * asks), and what a request writes to the journal is paid for in its
 * uid's pace, an event for each 128 bytes: 3,200 asks with new metadata
 * (4 MB) put the user past its allowance, and it waits its turn (logged),
 * its requests answered all the same.
 */
static void test_reasks_paced(void **state)
{
	struct fx *f = *state;
	struct reasker *a = th_shared(sizeof(*a));
	procreg_t *r = th_open(f->dir);
	char journal[600];
	struct stat st1, st2;

	assert_non_null(r);
	snprintf(journal, sizeof(journal), "%s/procreg.default.owners", f->dir);
	for (int k = 0; k < REASK_NAMES; k++) {
		char name[PROCREG_NAME_MAX + 1];

		snprintf(name, sizeof(name), "reask.%d.%0200d", k, 0);
		assert_int_equal(procreg_register(r, name, NULL, 0), 0);
	}
	*a = (struct reasker){ .dir = f->dir, .u = user(f) };
	f->kid = th_fork(reask_main, a);
	__atomic_store_n(&a->go, 1, __ATOMIC_RELEASE);
	wait_for(&a->step, 1);
	assert_int_equal(procreg_sync(r), 0);
	assert_int_equal(stat(journal, &st1), 0);
	__atomic_store_n(&a->go, 2, __ATOMIC_RELEASE);
	wait_for(&a->step, 2);
	assert_int_equal(procreg_sync(r), 0);
	assert_int_equal(stat(journal, &st2), 0);
	if (st2.st_size != st1.st_size)
		fail_msg("%d places asked for again unchanged grew the owners journal from %lld to "
			 "%lld bytes", REASK_NAMES * REASK_ROUNDS, (long long)st1.st_size,
			 (long long)st2.st_size);
	assert_int_equal(th_log_count(f->d.log, "--max-feed-rate-per-uid"), 0);
	__atomic_store_n(&a->go, 3, __ATOMIC_RELEASE);
	wait_for(&a->step, 3);
	if (!th_log_count(f->d.log, "--max-feed-rate-per-uid"))
		fail_msg("%d places asked for again with new metadata (%d KiB of journal) did not "
			 "pace the user", REASK_NAMES * REASK_ROUNDS,
			 REASK_NAMES * REASK_ROUNDS * (PROCREG_META_MAX + 256) / 1024);
	/* Waiting, not refused. */
	if (a->wrong)
		fail_msg("%d asks answered other than EINPROGRESS (the last: %s)", a->wrong,
			 strerror(-a->last));
	kill(f->kid, SIGKILL);
	th_wait(f->kid);
	f->kid = 0;
	procreg_close(r);
}

/* ---- requests refused, in batches ---------------------------------------- */

#define REFUSE_BATCH 1000

struct refuser {
	const char *dir;
	const struct th_user *u;
	/* In memory shared with the test: batches answered, the batches it
	 * may send in all, requests answered other than EEXIST. */
	int done, go, wrong, last;
};

/* As the attacker: batches of REFUSE_BATCH registrations of root's names,
 * each refused (EEXIST), as many as the test allows. */
static int refuse_main(void *p)
{
	struct refuser *a = p;
	static struct procreg_op ops[REFUSE_BATCH];
	static char names[REFUSE_BATCH][32];
	procreg_t *r;

	th_become(a->u);
	r = th_open(a->dir);
	if (!r)
		return 70;
	for (int i = 0; i < REFUSE_BATCH; i++)
		snprintf(names[i], sizeof(names[i]), "refused.%d", i);
	for (;;) {
		int err;

		await_go(&a->go, a->done + 1);
		for (int i = 0; i < REFUSE_BATCH; i++)
			ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op),
						      .kind = PROCREG_OP_REGISTER, .name = names[i] };
		err = procreg_batch(r, ops, REFUSE_BATCH);
		for (int i = 0; i < REFUSE_BATCH; i++) {
			int e = err < 0 ? err : ops[i].result;

			if (e != -EEXIST) {
				a->wrong++;
				a->last = e;
			}
		}
		__atomic_add_fetch(&a->done, 1, __ATOMIC_RELEASE);
	}
	return 0;
}

/*
 * Before: a request that made no event was paid for by nothing, and a
 * packet of a thousand is read whole, one a turn from each connection: one
 * user's processes looping batches of refused requests had root's single
 * requests wait behind a thousand of theirs each, root's register and
 * unregister pairs down from 10.5-13.7k a second to 0.9-1.0k with 8 of them.
 * Now each refused request counts as an event in its uid's pace (here 50
 * a second, half a ring, 4,096, at once): 3,000 pass unpaced, and the
 * sixth batch of 1,000 waits (logged) while root is served. No request is
 * answered otherwise than it would be.
 */
static void test_refusals_paced(void **state)
{
	struct fx *f = *state;
	struct refuser *a = th_shared(sizeof(*a));
	procreg_t *r = th_open(f->dir);

	assert_non_null(r);
	for (int i = 0; i < REFUSE_BATCH; i++) {
		char name[32];

		snprintf(name, sizeof(name), "refused.%d", i);
		assert_int_equal(procreg_register(r, name, NULL, 0), 0);
	}
	*a = (struct refuser){ .dir = f->dir, .u = user(f) };
	f->kid = th_fork(refuse_main, a);
	__atomic_store_n(&a->go, 3, __ATOMIC_RELEASE);
	wait_for(&a->done, 3);
	assert_int_equal(procreg_sync(r), 0);
	assert_int_equal(th_log_count(f->d.log, "--max-feed-rate-per-uid"), 0);
	__atomic_store_n(&a->go, 6, __ATOMIC_RELEASE);
	for (int i = 0; !th_log_count(f->d.log, "--max-feed-rate-per-uid"); i++) {
		if (i > WAIT_MS / 10)
			fail_msg("%d refused requests (%d batches answered) did not pace the user",
				 __atomic_load_n(&a->done, __ATOMIC_ACQUIRE) * REFUSE_BATCH,
				 __atomic_load_n(&a->done, __ATOMIC_ACQUIRE));
		usleep(10000);
	}
	/* Parked at its sixth batch, which waits for its allowance (18 s
	 * more): root's requests are served meanwhile. */
	assert_int_equal(procreg_register(r, "root.served", NULL, 0), 0);
	assert_int_equal(procreg_unregister(r, "root.served"), 0);
	assert_int_equal(__atomic_load_n(&a->done, __ATOMIC_ACQUIRE), 5);
	if (a->wrong)
		fail_msg("%d requests answered other than EEXIST (the last: %s)", a->wrong,
			 strerror(-a->last));
	kill(f->kid, SIGKILL);
	th_wait(f->kid);
	f->kid = 0;
	procreg_close(r);
}

/* ---- the arena left in pieces ------------------------------------------- */

/* A table of 16 MiB, so that one user fills it. */
static const char *const small_table_args[] = { "--max-clients", "99", "--max-readers", "16",
						"--max-size", "16M", NULL };

static int setup_small_table(void **state)
{
	return start(state, small_table_args);
}

#define FRAG_BATCH 256
#define FRAG_VICTIM_NAMES 40000

struct frag_arg {
	const char *dir;
	const struct th_user *u;
	bool victim;
	/* In memory shared with the test: names registered, and how the
	 * first refusal ended it (0: none); done once it stopped. */
	int registered, refused, done;
};

/* As the attacker: names with the most metadata there is, until the table
 * refuses more (then held until killed); as the victim: FRAG_VICTIM_NAMES
 * names with none, until one is refused. In batches, each checked. */
static int frag_main(void *p)
{
	struct frag_arg *a = p;
	static struct procreg_op ops[FRAG_BATCH];
	static char names[FRAG_BATCH][40];
	static uint8_t meta[PROCREG_META_MAX];
	procreg_t *r;

	th_become(a->u);
	r = th_open(a->dir);
	if (!r)
		return 70;
	while (!a->refused && (!a->victim || a->registered < FRAG_VICTIM_NAMES)) {
		for (int i = 0; i < FRAG_BATCH; i++) {
			snprintf(names[i], sizeof(names[i]), "%s.%d", a->victim ? "victim" : "frag",
				 a->registered + i);
			ops[i] = (struct procreg_op){ .sz = sizeof(ops[i]), .kind = PROCREG_OP_REGISTER,
						      .name = names[i], .meta = a->victim ? NULL : meta,
						      .meta_len = a->victim ? 0 : sizeof(meta) };
		}
		if (procreg_batch(r, ops, FRAG_BATCH) != 0)
			return 71;
		for (int i = 0; i < FRAG_BATCH && !a->refused; i++) {
			if (ops[i].result)
				a->refused = -ops[i].result;
			else
				a->registered++;
		}
	}
	__atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
	pause();
	return 0;
}

/*
 * Before: free blocks were never merged. One user filled the table with
 * names of 1 KiB of metadata and let them go (its process killed): the
 * arena was all free, but in blocks of 1.3 KiB, and another user's names
 * were refused once their index outgrew those (after 24,576, with 14% of
 * the arena in use), until procregd restarted. Now the free lists are made
 * again from the free map when nothing else has room, neighbours merged:
 * the other user's 40,000 names all go in.
 */
static void test_arena_pieces_merged(void **state)
{
	struct fx *f = *state;
	struct frag_arg *a = th_shared(sizeof(*a)), *v = th_shared(sizeof(*v));
	procreg_t *r = th_open(f->dir);
	PROCREG_OPTS(procreg_stats, st);
	pid_t victim;

	assert_non_null(r);
	*a = (struct frag_arg){ .dir = f->dir, .u = user(f) };
	f->kid = th_fork(frag_main, a);
	wait_for(&a->done, 1);
	if (a->refused != ENOSPC)
		fail_msg("the attacker's names: %d, then %s, not a full table", a->registered,
			 strerror(a->refused));
	kill(f->kid, SIGKILL);
	th_wait(f->kid);
	f->kid = 0;
	for (int i = 0;; i++) {
		assert_int_equal(procreg_sync(r), 0);
		assert_int_equal(procreg_stats(r, &st), 0);
		if (st.names == 0)
			break;
		if (i > WAIT_MS / 10)
			fail_msg("the attacker's names still there: %llu", (unsigned long long)st.names);
		usleep(10000);
	}
	*v = (struct frag_arg){ .dir = f->dir, .u = user(f), .victim = true };
	victim = th_fork(frag_main, v);
	wait_for(&v->done, 1);
	kill(victim, SIGKILL);
	th_wait(victim);
	print_message("arena: the attacker's %d names of 1 KiB gone, the victim's: %d registered%s%s\n",
		      a->registered, v->registered, v->refused ? ", then " : "",
		      v->refused ? strerror(v->refused) : "");
	if (v->refused || v->registered < FRAG_VICTIM_NAMES)
		fail_msg("another user's names refused after %d of %d: %s", v->registered,
			 FRAG_VICTIM_NAMES, strerror(v->refused));
	procreg_close(r);
}

/* ---- groups inflated by members come and gone --------------------------- */

#define INFLATE_GROUPS 40
#define INFLATE_KIDS 60

struct inflater {
	const char *dir;
	const struct th_user *u;
	/* In memory shared with the test: the step it is through (1 joined
	 * alone, 2 its children joined too, 3 its children killed), the step
	 * it may go on to, and what failed (0: nothing). */
	int step, go, failed;
};

/* As the attacker: it joins INFLATE_GROUPS groups; then INFLATE_KIDS
 * children of its own join each of them too (by pidfd); then they are
 * killed, and it holds its own memberships until killed. */
static int inflate_main(void *p)
{
	struct inflater *a = p;
	static struct procreg_op ops[INFLATE_GROUPS];
	static char groups[INFLATE_GROUPS][32];
	pid_t kids[INFLATE_KIDS];
	procreg_t *r;

	th_become(a->u);
	r = th_open(a->dir);
	if (!r)
		return 70;
	for (int g = 0; g < INFLATE_GROUPS; g++)
		snprintf(groups[g], sizeof(groups[g]), "inflate.%d", g);
	for (int step = 1; step <= 3; step++) {
		await_go(&a->go, step);
		for (int k = 0; step == 3 && k < INFLATE_KIDS; k++) {
			kill(kids[k], SIGKILL);
			waitpid(kids[k], NULL, 0);
		}
		for (int k = 0; step < 3 && k < (step == 1 ? 1 : INFLATE_KIDS); k++) {
			int fd = -1;

			if (step == 2) {
				if ((kids[k] = fork()) == 0) {
					pause();
					_exit(0);
				}
				if (kids[k] < 0 || (fd = (int)syscall(SYS_pidfd_open, kids[k], 0)) < 0)
					a->failed = 1;
			}
			for (int g = 0; g < INFLATE_GROUPS; g++)
				ops[g] = (struct procreg_op){ .sz = sizeof(ops[g]), .kind = PROCREG_OP_JOIN,
							      .name = groups[g],
							      .flags = fd >= 0 ? PROCREG_PIDFD : 0,
							      .pidfd = fd };
			if (procreg_batch(r, ops, INFLATE_GROUPS) != 0)
				a->failed = 2;
			for (int g = 0; g < INFLATE_GROUPS; g++)
				if (ops[g].result)
					a->failed = -ops[g].result;
			if (fd >= 0)
				close(fd);
		}
		__atomic_store_n(&a->step, step, __ATOMIC_RELEASE);
	}
	pause();
	return 0;
}

static uint64_t arena_used(procreg_t *r)
{
	PROCREG_OPTS(procreg_stats, st);

	assert_int_equal(procreg_sync(r), 0);
	assert_int_equal(procreg_stats(r, &st), 0);
	return st.arena_used;
}

/*
 * Before: a group's member index only grew. A user whose short-lived
 * processes joined groups (any group: anyone may join) left each of them
 * the index of the most members it ever had, for the one member it kept:
 * a review measured 131 KB of table for a membership held, charged to no
 * one. Now an index fewer than an eighth full is made smaller as members
 * leave: once the children are gone, the table is back to what it held
 * before they joined (within 16 KiB), where the indexes they grew held
 * 70 KiB more.
 */
static void test_groups_deflate(void **state)
{
	struct fx *f = *state;
	struct inflater *a = th_shared(sizeof(*a));
	procreg_t *r = th_open(f->dir);
	PROCREG_OPTS(procreg_stats, st);
	uint64_t before, peak, now = 0;

	assert_non_null(r);
	*a = (struct inflater){ .dir = f->dir, .u = user(f) };
	f->kid = th_fork(inflate_main, a);
	__atomic_store_n(&a->go, 1, __ATOMIC_RELEASE);
	wait_for(&a->step, 1);
	before = arena_used(r);
	__atomic_store_n(&a->go, 2, __ATOMIC_RELEASE);
	wait_for(&a->step, 2);
	if (a->failed)
		fail_msg("the attacker's joins failed: %d", a->failed);
	peak = arena_used(r);
	__atomic_store_n(&a->go, 3, __ATOMIC_RELEASE);
	wait_for(&a->step, 3);
	for (int i = 0;; i++) {
		assert_int_equal(procreg_sync(r), 0);
		assert_int_equal(procreg_stats(r, &st), 0);
		now = st.arena_used;
		if (st.memberships == INFLATE_GROUPS && now <= before + 16 * 1024)
			break;
		if (i > 1000)
			fail_msg("%llu memberships left, %llu bytes of the arena used: %llu before the "
				 "children joined, %llu with them", (unsigned long long)st.memberships,
				 (unsigned long long)now, (unsigned long long)before,
				 (unsigned long long)peak);
		usleep(10000);
	}
	print_message("groups: arena used %llu bytes before, %llu with the children, %llu after\n",
		      (unsigned long long)before, (unsigned long long)peak, (unsigned long long)now);
	kill(f->kid, SIGKILL);
	th_wait(f->kid);
	f->kid = 0;
	procreg_close(r);
}

/* ---- feed subscribers that read --------------------------------------- */

#define NOTIFY_SUBS 60
#define NOTIFY_PAIRS 2000
/* procregd's pace for one uid's notifications (server.c). */
#define NOTIFY_RATE 16384
#define NOTIFY_BURST 256

struct subs_arg {
	const char *dir;
	const struct th_user *u;
	/* In memory shared with the test: */
	int ready, stop, drained, last, done, fds, got;
	long count;
};

/* How many packets FD has now, each read. */
static long drain_count(int fd)
{
	uint8_t b[64];
	long n = 0;

	while (recv(fd, b, sizeof(b), MSG_DONTWAIT) > 0)
		n++;
	return n;
}

/* As the attacker: NOTIFY_SUBS feed fds, every notification read as it
 * comes and counted until told to stop; then, told a last change was
 * made, how many of them hear of it within WAIT_MS. */
static int subs_main(void *p)
{
	struct subs_arg *a = p;
	struct pollfd pf[NOTIFY_SUBS];
	procreg_t *r;
	int heard = 0;

	th_become(a->u);
	r = th_open(a->dir);
	if (!r)
		return 70;
	for (int i = 0; i < NOTIFY_SUBS; i++) {
		pf[i].fd = procreg_feed_fd(r);
		pf[i].events = POLLIN;
		if (pf[i].fd < 0)
			return 71;
	}
	a->fds = NOTIFY_SUBS;
	__atomic_store_n(&a->ready, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
		if (poll(pf, NOTIFY_SUBS, 10) <= 0)
			continue;
		for (int i = 0; i < NOTIFY_SUBS; i++)
			if (pf[i].revents & POLLIN)
				a->count += drain_count(pf[i].fd);
	}
	for (int i = 0; i < NOTIFY_SUBS; i++)
		a->count += drain_count(pf[i].fd);
	__atomic_store_n(&a->drained, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&a->last, __ATOMIC_ACQUIRE))
		usleep(1000);
	for (int t = 0; heard < NOTIFY_SUBS && t < WAIT_MS / 10; t++) {
		if (poll(pf, NOTIFY_SUBS, 10) <= 0)
			continue;
		for (int i = 0; i < NOTIFY_SUBS; i++)
			if (pf[i].fd >= 0 && (pf[i].revents & POLLIN)) {
				heard++;
				pf[i].fd = -pf[i].fd - 1; /* heard: poll skips it */
			}
	}
	a->got = heard;
	__atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
	pause();
	return 0;
}

static double mono_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/*
 * Before: a subscriber was sent a notification every batch that changed
 * the feed, and a batch is one request when they come one at a time: one
 * user's 60 subscribers that read were sent 60 for each of root's
 * registrations and removals, and 120 of them halved root's rate. Now a
 * uid's notifications are paced (16,384 a second for all its
 * subscribers): the user is sent no more than that pace allows over the
 * whole test, however long it took, and every subscriber still hears of
 * the last change (those owed are sent when their turn comes).
 */
static void test_notify_paced(void **state)
{
	struct fx *f = *state;
	struct subs_arg *a = th_shared(sizeof(*a));
	procreg_t *r = th_open(f->dir);
	double t0, t1;
	long most;
	pid_t kid;

	assert_non_null(r);
	*a = (struct subs_arg){ .dir = f->dir, .u = user(f) };
	t0 = mono_s();
	kid = th_fork(subs_main, a);
	wait_for(&a->ready, 1);
	for (int i = 0; i < NOTIFY_PAIRS; i++) {
		assert_int_equal(procreg_register(r, "notify.x", NULL, 0), 0);
		assert_int_equal(procreg_unregister(r, "notify.x"), 0);
	}
	__atomic_store_n(&a->stop, 1, __ATOMIC_RELEASE);
	wait_for(&a->drained, 1);
	t1 = mono_s();
	assert_int_equal(procreg_register(r, "notify.last", NULL, 0), 0);
	__atomic_store_n(&a->last, 1, __ATOMIC_RELEASE);
	wait_for(&a->done, 1);
	kill(kid, SIGKILL);
	th_wait(kid);
	most = NOTIFY_BURST + (long)(NOTIFY_RATE * (t1 - t0)) + 1;
	printf("%d subscribers of one user's were sent %ld notifications in %.3f s (at most %ld "
	       "allowed) for %d changes of root's; %d of them heard of the last\n",
	       a->fds, a->count, t1 - t0, most, 2 * NOTIFY_PAIRS, a->got);
	assert_true(a->count <= most);
	assert_int_equal(a->got, NOTIFY_SUBS);
	procreg_close(r);
}

/* ---- deaths --------------------------------------------------------- */

/* The feed paced at 16,384 events a second a uid: a follower has half a
 * second to read before one uid laps it, time a busy machine gives. */
static int setup_paced_deaths(void **state)
{
	static const char *const args[] = { "--max-clients", "99", "--max-readers", "16",
					    "--max-feed-rate-per-uid", "16384", NULL };

	return start(state, args);
}

/* What a process that dies holding many names does, as U: registers
 * NAMES names PREFIX.0, PREFIX.1... in batches, says how it went (READY
 * 1, or -1), and waits to be killed. */
struct doomed {
	const char *dir;
	const struct th_user *u;
	const char *prefix;
	int names;
	int ready;
};

static int doomed_main(void *arg)
{
	struct doomed *a = arg;
	static struct procreg_op ops[4000];
	static char names[4000][32];
	procreg_t *r;

	th_become(a->u);
	r = th_open(a->dir);
	if (!r)
		return 70;
	for (int i = 0; i < a->names; i += 4000) {
		int m = a->names - i < 4000 ? a->names - i : 4000;

		for (int j = 0; j < m; j++) {
			snprintf(names[j], sizeof(names[j]), "%s.%d", a->prefix, i + j);
			ops[j] = (struct procreg_op){ .sz = sizeof(ops[j]), .name = names[j],
						      .kind = PROCREG_OP_REGISTER };
		}
		if (procreg_batch(r, ops, (size_t)m) < 0)
			break;
		for (int j = 0; j < m; j++)
			if (ops[j].result) {
				__atomic_store_n(&a->ready, -1, __ATOMIC_RELEASE);
				pause();
			}
	}
	__atomic_store_n(&a->ready, 1, __ATOMIC_RELEASE);
	for (;;)
		pause();
}

static pid_t doomed_start(struct fx *f, struct doomed *a)
{
	pid_t pid = th_fork(doomed_main, a);

	for (int i = 0; !__atomic_load_n(&a->ready, __ATOMIC_ACQUIRE); i++) {
		if (i > WAIT_MS / 10)
			fail_msg("the doomed process did not register its %d names", a->names);
		usleep(10000);
	}
	assert_int_equal(a->ready, 1);
	f->kid = pid;
	return pid;
}

static void doomed_kill(struct fx *f)
{
	kill(f->kid, SIGKILL);
	assert_int_equal(th_wait(f->kid), 128 + SIGKILL);
	f->kid = 0;
}

#define PACED_NAMES 16384

/* Until DIED events for PACED_NAMES entries of process A->pid were read
 * (SEEN), or it was lapped. */
static bool deaths_step(struct follower *a, procreg_t *r, int err, const struct procreg_event *ev)
{
	(void)r;
	if (err)
		return true;
	a->seen += ev->type == PROCREG_EV_DIED && ev->pid == a->pid;
	return a->seen == PACED_NAMES;
}

/* As U, another process of the dead one's user: told to, it asks for a
 * sync, then counts the dead one's names it still finds (LEFT). */
struct syncer {
	const char *dir;
	const struct th_user *u;
	const char *prefix;
	int names;
	/* In memory shared with the test: */
	int ready, go, left, err;
};

static int syncer_main(void *p)
{
	struct syncer *a = p;
	procreg_t *r;
	char name[32];

	th_become(a->u);
	r = th_open(a->dir);
	if (!r)
		return 70;
	__atomic_store_n(&a->ready, 1, __ATOMIC_RELEASE);
	await_go(&a->go, 1);
	a->err = procreg_sync(r);
	for (int i = 0; i < a->names; i++) {
		snprintf(name, sizeof(name), "%s.%d", a->prefix, i);
		a->left += procreg_lookup(r, name, NULL) == 0;
	}
	procreg_close(r);
	return 0;
}

/*
 * Before: a process's names left in one pass when it died, a DIED event
 * each, charged to its uid only after: one process of a user's holding
 * 16,384 names put all their events in the feed at once, twice its ring,
 * and a root follower that had kept up was lapped (-EOVERFLOW). Now a
 * death's events are paced like the uid's requests: the follower reads
 * every one of them. The dead one's user, syncing, still finds every
 * name gone when its sync returns: its SYNC waits for its own deaths.
 */
static void test_death_paced(void **state)
{
	struct fx *f = *state;
	const struct th_user *u = user(f);
	struct doomed *a = th_shared(sizeof(*a));
	struct follower *fo = th_shared(sizeof(*fo));
	struct syncer *sy = th_shared(sizeof(*sy));
	pid_t follower, syncer;

	*a = (struct doomed){ .dir = f->dir, .u = u, .prefix = "dp", .names = PACED_NAMES };
	*sy = (struct syncer){ .dir = f->dir, .u = u, .prefix = "dp", .names = PACED_NAMES };
	*fo = (struct follower){ .dir = f->dir, .step = deaths_step };
	fo->pid = doomed_start(f, a);
	follower = th_fork(follow_main, fo);
	wait_for(&fo->ready, 1);
	syncer = th_fork(syncer_main, sy);
	wait_for(&sy->ready, 1);
	doomed_kill(f);
	__atomic_store_n(&sy->go, 1, __ATOMIC_RELEASE);
	assert_int_equal(th_wait_ms(syncer, WAIT_MS), 0);
	assert_int_equal(th_wait_ms(follower, WAIT_MS), 0);
	printf("follower: %d DIED events of the %d names read, %d events in all, lapped %d "
	       "times; the user's sync left %d of them\n",
	       fo->seen, PACED_NAMES, fo->events, fo->laps, sy->left);
	assert_int_equal(fo->laps, 0);
	assert_int_equal(fo->seen, PACED_NAMES);
	assert_int_equal(sy->err, 0);
	assert_int_equal(sy->left, 0);
}

#define SLOW_NAMES 4000

/*
 * A user's death paced far behind (the feed paced at 50 events a second:
 * its 4,000 names take over a minute to leave) holds up nobody else's
 * sync: root's returns at once, and finds the dead process's names
 * still there, leaving. Were root's sync to wait for them, it would
 * time out (20 s).
 */
static void test_death_paced_not_waited(void **state)
{
	struct fx *f = *state;
	struct doomed *a = th_shared(sizeof(*a));
	PROCREG_OPTS(procreg_opts, o, .dir = f->dir, .timeout_ms = 20000);
	procreg_t *r = procreg_open(&o);
	char name[32];
	int left = 0;

	assert_non_null(r);
	*a = (struct doomed){ .dir = f->dir, .u = user(f), .prefix = "dw", .names = SLOW_NAMES };
	doomed_start(f, a);
	doomed_kill(f);
	assert_int_equal(procreg_sync(r), 0);
	for (int i = 0; i < SLOW_NAMES; i++) {
		snprintf(name, sizeof(name), "dw.%d", i);
		left += procreg_lookup(r, name, NULL) == 0;
	}
	printf("root's sync returned with %d of the dead process's %d names left\n", left,
	       SLOW_NAMES);
	assert_true(left > 0);
	/* Root is served meanwhile. */
	assert_int_equal(procreg_register(r, "dw.root", NULL, 0), 0);
	/* A daemon told to stop finishes the deaths under way first: the
	 * table it leaves holds none of the dead process's names. */
	assert_int_equal(th_daemon_stop(&f->d), 0);
	assert_true(th_log_has(f->d.log, "1 death under way finished"));
	left = 0;
	for (int i = 0; i < SLOW_NAMES; i++) {
		snprintf(name, sizeof(name), "dw.%d", i);
		left += procreg_lookup(r, name, NULL) == 0;
	}
	assert_int_equal(left, 0);
	assert_int_equal(procreg_lookup(r, "dw.root", NULL), 0);
	procreg_close(r);
}

/*
 * The daemon killed (SIGKILL) while a death is under way, paced far
 * behind: the next daemon finds the dead process's names in the table it
 * re-attaches to, and removes them, as for any owner that died while no
 * daemon ran.
 */
static void test_death_daemon_killed(void **state)
{
	struct fx *f = *state;
	struct doomed *a = th_shared(sizeof(*a));
	procreg_t *r = th_open(f->dir);
	char name[32];
	int left = 0;

	assert_non_null(r);
	*a = (struct doomed){ .dir = f->dir, .u = user(f), .prefix = "dk", .names = SLOW_NAMES };
	doomed_start(f, a);
	doomed_kill(f);
	assert_int_equal(procreg_sync(r), 0);
	assert_int_equal(procreg_lookup(r, "dk.0", NULL), 0); /* still leaving */
	procreg_close(r);
	th_daemon_kill(&f->d);
	if (th_daemon_start(&f->d, f->dir, slow_feed_args, NULL)) {
		th_daemon_dump_log(&f->d);
		fail_msg("procregd did not start again");
	}
	r = th_open(f->dir);
	assert_non_null(r);
	for (int i = 0; i < SLOW_NAMES; i++) {
		snprintf(name, sizeof(name), "dk.%d", i);
		left += procreg_lookup(r, name, NULL) == 0;
	}
	assert_int_equal(left, 0);
	procreg_close(r);
}

/* As root, in a process the test may kill before it is told to go: told
 * to, it registers "reborn" and says how that went; then waits. */
struct reborn {
	const char *dir;
	int go, done, status;
};

static int reborn_main(void *arg)
{
	struct reborn *a = arg;
	procreg_t *r;

	await_go(&a->go, 1);
	r = th_open(a->dir);
	a->status = r ? procreg_register(r, "reborn", NULL, 0) : -EIO;
	__atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
	for (;;)
		pause();
	return 0;
}

/*
 * A process's pid given to another while its death is still under way
 * (paced far behind here, as in test_death_paced_not_waited): the new
 * process registers, and must get its name, with none of the dead one's
 * names left beside it under the same pid.
 */
static void test_death_pid_reused(void **state)
{
	struct fx *f = *state;
	struct doomed *a = th_shared(sizeof(*a));
	struct reborn *b = th_shared(sizeof(*b));
	PROCREG_OPTS(procreg_entry, e);
	procreg_t *r = th_open(f->dir);
	pid_t dead, kid = 0;
	char name[32];
	int left = 0;

	assert_non_null(r);
	*a = (struct doomed){ .dir = f->dir, .u = user(f), .prefix = "dx", .names = SLOW_NAMES };
	*b = (struct reborn){ .dir = f->dir };
	dead = doomed_start(f, a);
	doomed_kill(f);
	assert_int_equal(procreg_sync(r), 0);
	assert_int_equal(procreg_lookup(r, "dx.0", NULL), 0); /* still leaving */
	for (int tries = 0; tries < 100 && kid != dead; tries++) {
		if (kid) {
			kill(kid, SIGKILL);
			th_wait(kid);
		}
		th_next_pid(dead);
		kid = th_fork(reborn_main, b);
	}
	assert_int_equal(kid, dead);
	f->kid = kid;
	__atomic_store_n(&b->go, 1, __ATOMIC_RELEASE);
	wait_for(&b->done, 1);
	assert_int_equal(b->status, 0);
	assert_int_equal(procreg_lookup(r, "reborn", &e), 0);
	assert_int_equal(e.pid, dead);
	for (int i = 0; i < SLOW_NAMES; i++) {
		snprintf(name, sizeof(name), "dx.%d", i);
		left += procreg_lookup(r, name, NULL) == 0;
	}
	assert_int_equal(left, 0);
	/* And the new process's own death takes its name. */
	kill(kid, SIGKILL);
	th_wait(kid);
	f->kid = 0;
	assert_int_equal(procreg_sync(r), 0);
	assert_int_equal(procreg_lookup(r, "reborn", NULL), -ENOENT);
	procreg_close(r);
}

#define SLICED_NAMES 4096

/*
 * Before: a dead process's names left in one pass of the daemon's loop,
 * and every other request waited for it (42-65 ms behind 262,144 entries
 * of one user's). Now they leave a slice at a time, with other requests
 * served in between. Shown by order, not by time: with the daemon
 * stopped, a user's process holding 4,096 names is killed and root sends
 * a registration, so that both wait for the same turn of its loop; in the
 * feed, root's registration must come before the last of the dead
 * process's DIED events (before, it came after all of them).
 */
static void test_death_sliced(void **state)
{
	struct fx *f = *state;
	struct doomed *a = th_shared(sizeof(*a));
	static uint8_t pkt[256], rep[256];
	PROCREG_OPTS(procreg_event, ev);
	procreg_t *r = th_open(f->dir);
	uint64_t cur;
	size_t pos = 0;
	int fd, died = 0, before = -1;
	pid_t dead;
	struct pr_frame fr;

	assert_non_null(r);
	*a = (struct doomed){ .dir = f->dir, .u = user(f), .prefix = "ds",
			      .names = SLICED_NAMES };
	dead = doomed_start(f, a);
	fd = th_raw_connect(f->dir);
	th_raw_hello(fd);
	procreg__proto_put_name(pkt, &pos, PR_OP_REGISTER, 0, 7, "ds.bystander", 12, NULL, 0);
	cur = procreg_feed_head(r);

	assert_int_equal(kill(f->d.pid, SIGSTOP), 0);
	if (!th_until(th_stopped, &f->d.pid, WAIT_MS))
		fail_msg("procregd did not stop");
	doomed_kill(f);
	assert_int_equal(send(fd, pkt, pos, MSG_NOSIGNAL), (ssize_t)pos);
	assert_int_equal(kill(f->d.pid, SIGCONT), 0);

	/* The registration's reply: it succeeded. */
	{
		ssize_t n = recv(fd, rep, sizeof(rep), 0);
		size_t p = 0;

		assert_true(n > 0);
		assert_int_equal(procreg__proto_next(rep, (size_t)n, &p, &fr), 1);
		assert_int_equal(fr.h.status, 0);
	}
	/* The feed from before: every event the death and the registration
	 * made, in the order the daemon made them (4,097 of a ring of 8,192:
	 * none lost). */
	while (died < SLICED_NAMES || before < 0) {
		int err = procreg_next_event(r, &cur, &ev, WAIT_MS);

		if (err)
			fail_msg("procreg_next_event: %d after %d DIED events", err, died);
		if (ev.type == PROCREG_EV_DIED && ev.pid == dead)
			died++;
		else if (ev.type == PROCREG_EV_REGISTERED && !strcmp(ev.name, "ds.bystander"))
			before = died;
	}
	printf("root's registration came after %d of the dead process's %d DIED events\n", before,
	       SLICED_NAMES);
	assert_true(before < SLICED_NAMES);
	close(fd);
	procreg_close(r);
}

int main(void)
{
	/* The daemons run with an open files limit of FDS, which the limits
	 * on processes follow from: they take it from us. For good: a hard
	 * limit lowered may not be raised again without CAP_SYS_RESOURCE,
	 * which a container may not give. */
	struct rlimit low = { FDS, FDS };
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_procs_per_uid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_procs_all_uids, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dying_not_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_feed_unread, setup, teardown),
		cmocka_unit_test_setup_teardown(test_feed_flooded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lapsed_leases_paced, setup_slow_feed, teardown),
		cmocka_unit_test_setup_teardown(test_reasks_paced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals_paced, setup_slow_feed, teardown),
		cmocka_unit_test_setup_teardown(test_arena_pieces_merged, setup_small_table, teardown),
		cmocka_unit_test_setup_teardown(test_groups_deflate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_paced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_death_paced, setup_paced_deaths, teardown),
		cmocka_unit_test_setup_teardown(test_death_paced_not_waited, setup_slow_feed,
						teardown),
		cmocka_unit_test_setup_teardown(test_death_pid_reused, setup_slow_feed, teardown),
		cmocka_unit_test_setup_teardown(test_death_daemon_killed, setup_slow_feed, teardown),
		cmocka_unit_test_setup_teardown(test_death_sliced, setup, teardown),
	};

	if (setrlimit(RLIMIT_NOFILE, &low) < 0) {
		perror("setrlimit RLIMIT_NOFILE");
		return 1;
	}
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));

	return cmocka_run_group_tests(tests, NULL, NULL);
}
