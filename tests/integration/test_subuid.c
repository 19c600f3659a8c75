/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_subuid.c - subordinate uids count in their owner's quotas.
 *
 * A user that newuidmap lets run processes as the uids of its subordinate
 * ranges (/etc/subuid) must not hold a per-uid quota for each of them:
 * procregd counts their use with the range's owner (--subuid-file). The
 * attackers are processes of a user the test creates and of uids of its
 * ranges (the test, as root, takes those uids as newuidmap would give
 * them); a file another user could write is not believed.
 *
 * Needs root (CI runs as root).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define A(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define QUOTA 4

struct fx {
	char *dir;
	char path[512];         /* the subuid file */
	struct th_user owner;   /* owns the ranges */
	uid_t sub;              /* the first subordinate uid */
	pid_t kids[16];         /* holders, killed at the end */
	int nkids;
	struct th_daemon d;
	struct th_out o;
};

/* Subordinate uids of a test of our own: no other test run shares them. */
static uid_t sub_base(void)
{
	return 2000000000u + (uid_t)(getpid() % 100000) * 32u;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	char text[1024];

	assert_non_null(f);
	f->dir = th_mkdtemp();
	assert_int_equal(chmod(f->dir, 0755), 0);
	th_user_new(&f->owner);
	f->sub = sub_base();
	snprintf(f->path, sizeof(f->path), "%s/subuid", f->dir);
	/* The owner's ranges by name and by uid (its first uid in hex, as
	 * shadow reads numbers); a comment; a line that does not parse;
	 * root's range, and one of uid 65534's over it (both ignored, and
	 * logged for the overlap: their uids count as their own); and one
	 * of the owner's first subordinate uid (ignored, logged). */
	snprintf(text, sizeof(text),
		 "# subordinate uids\n"
		 "%s:%u:2\n"
		 "%u:0x%x:1\n"
		 "not a range\n"
		 "root:%u:5\n"
		 "65534:%u:4\n"
		 "%u:%u:2\n",
		 f->owner.name, (unsigned)f->sub, (unsigned)f->owner.uid, (unsigned)f->sub + 2,
		 (unsigned)f->sub + 10, (unsigned)f->sub + 12, (unsigned)f->sub,
		 (unsigned)f->sub + 20);
	write_file(f->path, text, 0644);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	for (int i = 0; i < f->nkids; i++)
		th_kill_wait(&f->kids[i]);
	if (f->d.pid)
		assert_int_equal(th_daemon_stop_dump(&f->d), 0);
	th_user_del(&f->owner);
	th_rmrf(f->dir);
	free(f->dir);
	free(f);
	return 0;
}

/* A process that registers names and holds them until it is killed. */
struct holder {
	const char *dir;
	const struct th_user *user;   /* become this user, or */
	uid_t uid;                    /* this uid */
	const char *prefix;
	int n;                        /* names to try */
	int report_fd;
	uint32_t lease_ms;            /* each with this lease (0: none) */
};

struct report {
	int ok;                       /* names registered */
	int err;                      /* the first refusal, or 0 */
};

static int hold(void *arg)
{
	const struct holder *h = arg;
	struct report rep = { 0, 0 };
	procreg_t *r;
	char name[64];

	if (h->user) {
		th_become(h->user);
	} else if (setgroups(0, NULL) < 0 || setgid(h->uid) < 0 || setuid(h->uid) < 0 ||
		   getuid() != h->uid) {
		return 99;
	}
	/* Gone with the test, whatever becomes of it (after the change of
	 * uid, which clears it). */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() == 1)
		return 96;
	r = th_open(h->dir);
	if (!r)
		return 98;
	for (int i = 0; i < h->n; i++) {
		PROCREG_OPTS(procreg_register_opts, o, .lease_ms = h->lease_ms);
		int err;

		snprintf(name, sizeof(name), "%s.%d", h->prefix, i);
		err = procreg_register_opts(r, name, NULL, 0, &o);
		if (err) {
			rep.err = err;
			break;
		}
		rep.ok++;
	}
	if (write(h->report_fd, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
		return 97;
	for (;;)
		pause();
}

/* Start a holder as USER (or UID) trying N names; its report in *REP.
 * It is killed at the end of the test (*PID 0 after th_kill_wait). */
static pid_t *start_leaser(struct fx *f, const struct th_user *user, uid_t uid,
			   const char *prefix, int n, uint32_t lease_ms, struct report *rep)
{
	struct holder h = { f->dir, user, uid, prefix, n, -1, lease_ms };
	int rp[2];
	pid_t *pid;

	assert_true(f->nkids < 16);
	pid = &f->kids[f->nkids++];
	assert_int_equal(pipe2(rp, O_CLOEXEC), 0);
	h.report_fd = rp[1];
	*pid = th_fork(hold, &h);
	close(rp[1]);
	if (read(rp[0], rep, sizeof(*rep)) != (ssize_t)sizeof(*rep))
		fail_msg("holder %s failed: status %d", prefix, th_wait(*pid));
	close(rp[0]);
	return pid;
}

static pid_t *start_holder(struct fx *f, const struct th_user *user, uid_t uid,
			   const char *prefix, int n, struct report *rep)
{
	return start_leaser(f, user, uid, prefix, n, 0, rep);
}

/* Wait (10 s at most) until NAME is no longer registered. */
static void wait_gone(procreg_t *r, const char *name)
{
	for (int i = 0; i < 10000; i++) {
		if (procreg_lookup(r, name, NULL) == -ENOENT)
			return;
		usleep(1000);
	}
	fail_msg("%s still registered 10 s after its holder exited", name);
}

static void expect(const struct report *rep, int ok, int err, const char *who)
{
	if (rep->ok != ok || rep->err != err)
		fail_msg("%s: %d names, then %d (%s); want %d, then %d", who, rep->ok, rep->err,
			 rep->err ? strerror(-rep->err) : "none", ok, err);
}

/* The owner and its subordinate uids hold one quota between them; uids
 * outside its ranges keep theirs, and what goes is given back. */
static void start(struct fx *f, const char *const *args)
{
	if (th_daemon_start(&f->d, f->dir, args, NULL) != 0) {
		th_daemon_dump_log(&f->d);
		fail_msg("procregd did not start");
	}
}

static void test_subuid_shares_owner_quota(void **state)
{
	struct fx *f = *state;
	struct report rep;
	procreg_t *r;
	char q[16];
	char *log;

	snprintf(q, sizeof(q), "%d", QUOTA);
	start(f, A("--max-names-per-uid", q, "--subuid-file", f->path));
	start_holder(f, &f->owner, 0, "own", 2, &rep);
	expect(&rep, 2, 0, "the owner");
	start_holder(f, NULL, f->sub, "sub0", 1, &rep);
	expect(&rep, 1, 0, "its first subordinate uid (range by name)");
	start_holder(f, NULL, f->sub + 2, "sub2", 1, &rep);
	expect(&rep, 1, 0, "its third (range by uid)");
	/* The quota is the owner's and full: no subordinate uid, nor the
	 * owner, has one of its own. */
	start_holder(f, NULL, f->sub + 1, "sub1", 1, &rep);
	expect(&rep, 0, -EDQUOT, "its second subordinate uid");
	start_holder(f, &f->owner, 0, "own2", 1, &rep);
	expect(&rep, 0, -EDQUOT, "the owner, again");
	/* Root's range and 65534's over it were left out: their uids count
	 * as their own, not as 65534's, which holds its whole quota. */
	start_holder(f, NULL, 65534, "nobody", QUOTA, &rep);
	expect(&rep, QUOTA, 0, "uid 65534");
	start_holder(f, NULL, f->sub + 13, "sub13", QUOTA, &rep);
	expect(&rep, QUOTA, 0, "a uid of 65534's range, over root's");
	start_holder(f, NULL, f->sub + 11, "sub11", QUOTA, &rep);
	expect(&rep, QUOTA, 0, "a uid of root's range");
	start_holder(f, NULL, f->sub + 20, "sub20", QUOTA, &rep);
	expect(&rep, QUOTA, 0, "a uid of a subordinate uid's range");

	/* The refusal names the owner; the lines ignored were logged. */
	log = th_read_file(f->d.log, true);
	th_expect_in(log, "(the uid holds 4, with those of uid");
	th_expect_in(log, "its range's owner (subordinate uids)");
	th_expect_in(log, ":4: not OWNER:FIRST:COUNT");
	th_expect_in(log, ":5: the range");
	th_expect_in(log, ":6: the range");
	th_expect_in(log, "overlaps another");
	th_expect_in(log, ":7: the range");
	th_expect_in(log, "itself in a range of uid");
	th_expect_in(log, "subordinate uids: 2 ranges of");
	free(log);

	/* What the holders had is given back to the owner's quota when
	 * they die. */
	for (int i = 0; i < f->nkids; i++)
		th_kill_wait(&f->kids[i]);
	r = th_open(f->dir);
	assert_non_null(r);
	wait_gone(r, "own.0");
	wait_gone(r, "own.1");
	wait_gone(r, "sub0.0");
	wait_gone(r, "sub2.0");
	procreg_close(r);
	start_holder(f, NULL, f->sub + 1, "again", QUOTA + 1, &rep);
	expect(&rep, QUOTA, -EDQUOT, "a subordinate uid after the others went");
}

/* Connections too: the owner's and its subordinate uids' together. */
static void test_subuid_shares_owner_connections(void **state)
{
	struct fx *f = *state;
	struct report rep;
	char *log;

	start(f, A("--max-clients-per-uid", "2", "--subuid-file", f->path));
	start_holder(f, &f->owner, 0, "own", 1, &rep);
	expect(&rep, 1, 0, "the owner");
	start_holder(f, NULL, f->sub + 1, "sub1", 1, &rep);
	expect(&rep, 1, 0, "its second subordinate uid");
	/* Two connections: the third uid of the owner's has none. */
	start_holder(f, NULL, f->sub + 2, "sub2", 1, &rep);
	if (rep.ok != 0 || rep.err == 0)
		fail_msg("its third subordinate uid: %d names (%d); want a refused connection",
			 rep.ok, rep.err);
	/* A uid of no range has its own. */
	start_holder(f, NULL, f->sub + 5, "sub5", 1, &rep);
	expect(&rep, 1, 0, "a uid of no range");
	log = th_read_file(f->d.log, true);
	th_expect_in(log, "has 2 connections, with those of uid");
	free(log);
}

/* Leases too (--max-leases-per-uid): the owner's and its subordinate
 * uids' together. */
static void test_subuid_shares_owner_leases(void **state)
{
	struct fx *f = *state;
	struct report rep;
	char q[16];
	char *log;

	snprintf(q, sizeof(q), "%d", QUOTA);
	start(f, A("--max-leases-per-uid", q, "--subuid-file", f->path));
	start_leaser(f, &f->owner, 0, "own", 2, 60000, &rep);
	expect(&rep, 2, 0, "the owner");
	start_leaser(f, NULL, f->sub, "sub0", QUOTA, 60000, &rep);
	expect(&rep, QUOTA - 2, -EDQUOT, "its first subordinate uid");
	start_leaser(f, NULL, f->sub + 1, "sub1", 1, 60000, &rep);
	expect(&rep, 0, -EDQUOT, "its second subordinate uid");
	/* Without a lease: no lease quota to hold. */
	start_leaser(f, NULL, f->sub + 1, "sub1n", 1, 0, &rep);
	expect(&rep, 1, 0, "its second subordinate uid, no lease");
	/* A uid of no range has its own. */
	start_leaser(f, NULL, f->sub + 5, "sub5", QUOTA, 60000, &rep);
	expect(&rep, QUOTA, 0, "a uid of no range");
	log = th_read_file(f->d.log, true);
	th_expect_in(log, "its range's owner (subordinate uids), and 4 leases)");
	free(log);
}

/* A file someone else could write is not read: it would let them charge
 * their use to another user's quota. */
static void test_subuid_file_trusted_only(void **state)
{
	struct fx *f = *state;
	char missing[600];

	/* Another user's. */
	assert_int_equal(chown(f->path, f->owner.uid, f->owner.gid), 0);
	assert_int_equal(th_run_daemon(&f->o, NULL, A(PROCREGD_PATH, "--foreground", "--dir", f->dir,
						     "--subuid-file", f->path)),
			 1);
	th_expect_in(f->o.err, "only a file of root's or uid");
	th_expect_in(f->o.err, "not read, not started");
	/* Root's, but others may write it. */
	assert_int_equal(chown(f->path, 0, 0), 0);
	assert_int_equal(chmod(f->path, 0664), 0);
	assert_int_equal(th_run_daemon(&f->o, NULL, A(PROCREGD_PATH, "--foreground", "--dir", f->dir,
						     "--subuid-file", f->path)),
			 1);
	th_expect_in(f->o.err, "mode 0664");
	/* Named and missing. */
	snprintf(missing, sizeof(missing), "%s/none", f->dir);
	assert_int_equal(th_run_daemon(&f->o, NULL, A(PROCREGD_PATH, "--foreground", "--dir", f->dir,
						     "--subuid-file", missing)),
			 1);
	th_expect_in(f->o.err, "No such file or directory");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_subuid_shares_owner_quota, setup, teardown),
		cmocka_unit_test_setup_teardown(test_subuid_shares_owner_connections, setup, teardown),
		cmocka_unit_test_setup_teardown(test_subuid_shares_owner_leases, setup, teardown),
		cmocka_unit_test_setup_teardown(test_subuid_file_trusted_only, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
