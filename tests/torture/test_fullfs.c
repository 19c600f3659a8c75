/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_fullfs.c - the table's filesystem runs out of space: a small tmpfs
 * the test mounts, under a daemon whose --max-size is larger than it. The
 * daemon must never die of SIGBUS: the registration that needs the space
 * is refused with ENOSPC (logged once), everything else goes on, a
 * restart on the full filesystem works, and a start on one with no room
 * for a table fails with a message.
 *
 * Needs root (mount), as CI runs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define TMPFS_SIZE "6M"

struct fs {
	char *dir;           /* the test's directory: the log, and the mount point */
	char mnt[300];       /* the tmpfs: the table */
	char log[300];
	struct th_daemon d;
};

static int setup(void **state)
{
	struct fs *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	s->dir = th_mkdtemp();
	snprintf(s->mnt, sizeof(s->mnt), "%s/shm", s->dir);
	snprintf(s->log, sizeof(s->log), "%s/procregd.log", s->dir);
	assert_int_equal(mkdir(s->mnt, 0755), 0);
	if (mount("tmpfs", s->mnt, "tmpfs", MS_NOSUID | MS_NODEV, "size=" TMPFS_SIZE ",mode=0755") < 0)
		fail_msg("mount -t tmpfs %s: %s (the test needs root)", s->mnt, strerror(errno));
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	struct fs *s = *state;

	th_daemon_stop(&s->d);
	if (umount2(s->mnt, MNT_DETACH) < 0)
		printf("umount %s: %s\n", s->mnt, strerror(errno));
	th_rmrf(s->dir);
	free(s->dir);
	free(s);
	return 0;
}

/* A process that owns names: 'f' registers fill.N with 1 KiB of metadata
 * until refused, then tries RETRIES more; 'r' unregisters the first
 * CHURN of them and registers as many new ones; 'l' unregisters FREED
 * more and registers leased names in their room until refused; 'q' ends
 * it. */
#define RETRIES 20
#define CHURN 20
#define FREED 1500
#define LEASE_MS 600000

struct owner {
	const char *dir;
	int cmd[2], res[2];
};

struct result {
	int count;
	int err;
};

static int owner_main(void *arg)
{
	static char meta[PROCREG_META_MAX];
	struct owner *o = arg;
	procreg_t *r = th_open(o->dir);
	char c, name[32];

	close(o->cmd[1]);
	close(o->res[0]);
	if (!r)
		return 10;
	memset(meta, 'f', sizeof(meta));
	while (read(o->cmd[0], &c, 1) == 1 && c != 'q') {
		struct result res = { 0, 0 };

		if (c == 'f') {
			for (;;) {
				snprintf(name, sizeof(name), "fill.%d", res.count);
				res.err = procreg_register(r, name, meta, sizeof(meta));
				if (res.err || ++res.count > 100000)
					break;
			}
			for (int i = 0; i < RETRIES && res.err == -ENOSPC; i++) {
				snprintf(name, sizeof(name), "retry.%d", i);
				if (procreg_register(r, name, meta, sizeof(meta)) != -ENOSPC)
					res.count = -i - 1; /* a retry not refused alike */
			}
		} else if (c == 'r') {
			for (int i = 0; i < CHURN && !res.err; i++) {
				snprintf(name, sizeof(name), "fill.%d", i);
				res.err = procreg_unregister(r, name);
			}
			/* The removed records are freed after a grace period:
			 * the next registration needing room waits for it.
			 * Names as long as those removed ("anew" and "fill"),
			 * so that their records are of the same size. */
			for (int i = 0; i < CHURN && !res.err; i++, res.count++) {
				snprintf(name, sizeof(name), "anew.%d", i);
				res.err = procreg_register(r, name, meta, sizeof(meta));
			}
		}
		if (c == 'l') {
			PROCREG_OPTS(procreg_register_opts, lo, .lease_ms = LEASE_MS);

			for (int i = CHURN; i < CHURN + FREED && !res.err; i++) {
				snprintf(name, sizeof(name), "fill.%d", i);
				res.err = procreg_unregister(r, name);
			}
			while (!res.err && res.count < FREED) {
				snprintf(name, sizeof(name), "lease.%d", res.count);
				res.err = procreg_register_opts(r, name, meta, sizeof(meta), &lo);
				res.count += !res.err;
			}
		}
		if (write(o->res[1], &res, sizeof(res)) != sizeof(res))
			return 11;
	}
	procreg_close(r);
	return 0;
}

static struct result ask(struct owner *o, char c)
{
	struct result res;

	assert_int_equal(write(o->cmd[1], &c, 1), 1);
	assert_int_equal(read(o->res[0], &res, sizeof(res)), sizeof(res));
	return res;
}

static int looks_up(procreg_t *r, const char *prefix, int from, int to)
{
	int found = 0;

	for (int i = from; i < to; i++) {
		char name[32];

		snprintf(name, sizeof(name), "%s.%d", prefix, i);
		found += procreg_lookup(r, name, NULL) == 0;
	}
	return found;
}

static void check_clean(struct fs *s)
{
	char out[4096];
	int st = th_cli(s->mnt, out, sizeof(out), (const char *const[]){ "check", NULL });

	if (st != 0) {
		printf("%s", out);
		fail_msg("procreg check: exit status %d", st);
	}
}

/* Write a file in DIR until the filesystem has no byte left. */
static void fill_up(const char *dir)
{
	static char buf[65536];
	char path[400];
	int fd;

	snprintf(path, sizeof(path), "%s/filler", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	for (size_t chunk = sizeof(buf); chunk;) {
		if (write(fd, buf, chunk) < 0) {
			assert_int_equal(errno, ENOSPC);
			chunk /= 2;
		}
	}
	close(fd);
}

/* procregd on the tmpfs, with a table larger than it; it must start. */
static void start(struct fs *s, const char *when)
{
	static const char *const args[] = { "--max-size", "64M", NULL };

	if (th_daemon_start_log(&s->d, s->mnt, s->log, args, NULL) != 0) {
		th_daemon_dump_log(&s->d);
		fail_msg("procregd did not start on %s %s", s->mnt, when);
	}
}

static void test_full_filesystem(void **state)
{
	struct fs *s = *state;
	struct owner o = { s->mnt, { -1, -1 }, { -1, -1 } };
	struct result fill, churn, lease;
	PROCREG_OPTS(procreg_stats, st);
	struct th_out out;
	procreg_t *r;
	pid_t owner;
	int status;

	start(s, "empty");
	r = th_open(s->mnt);
	assert_non_null(r);
	assert_int_equal(pipe(o.cmd), 0);
	assert_int_equal(pipe(o.res), 0);
	owner = th_fork(owner_main, &o);

	/* Until the filesystem is full: ENOSPC for the owner, again at each
	 * retry, and one line in the log; the daemon serves on. */
	fill = ask(&o, 'f');
	printf("fullfs: %d names of 1 KiB on a %s tmpfs, then %s\n", fill.count, TMPFS_SIZE,
	       strerror(-fill.err));
	if (waitpid(s->d.pid, &status, WNOHANG) == s->d.pid) {
		s->d.pid = 0;
		th_daemon_dump_log(&s->d);
		fail_msg("procregd died: %s", WIFSIGNALED(status) ? strsignal(WTERMSIG(status))
								 : "exited");
	}
	assert_int_equal(fill.err, -ENOSPC);
	assert_true(fill.count > 1000);
	assert_int_equal(looks_up(r, "fill", 0, fill.count), fill.count);
	assert_int_equal(procreg_sync(r), 0);
	if (th_log_count(s->log, "is full: writes that need more of the table fail with ENOSPC") != 1) {
		th_daemon_dump_log(&s->d);
		fail_msg("the full filesystem is not logged once");
	}

	/* Removals, and registrations that fit in the memory they free. */
	churn = ask(&o, 'r');
	assert_int_equal(churn.err, 0);
	assert_int_equal(churn.count, CHURN);
	assert_int_equal(looks_up(r, "fill", 0, CHURN), 0);
	assert_int_equal(looks_up(r, "anew", 0, CHURN), CHURN);
	assert_int_equal(looks_up(r, "fill", CHURN, fill.count), fill.count - CHURN);

	/* Leases are journaled before they are granted: with the table's
	 * room freed but none left on the disk for the journal, a leased
	 * registration is refused, and the ones granted stay leases. */
	lease = ask(&o, 'l');
	printf("fullfs: %d leased names, then %s\n", lease.count, strerror(-lease.err));
	assert_int_equal(lease.err, -ENOSPC);
	assert_true(lease.count > 0 && lease.count < FREED);
	assert_int_equal(looks_up(r, "lease", 0, lease.count + 1), lease.count);
	assert_true(th_log_has(s->log, "owners journal: the filesystem is full"));
	/* A signal on a name lost is journaled too (set, and cleared when
	 * its process holds nothing), but no registration is refused for
	 * want of room for it: once the room is gone, it is kept in memory
	 * only, logged. Before, such pairs were refused ENOSPC after some
	 * hundreds. */
	{
		PROCREG_OPTS(procreg_register_opts, so, .lost_signal = SIGTERM);

		for (int i = 0; i < 4000; i++) {
			assert_int_equal(procreg_register_opts(r, "signalled", NULL, 0, &so), 0);
			assert_int_equal(procreg_unregister(r, "signalled"), 0);
		}
		assert_true(th_log_has(s->log, "signal on a name lost is kept in memory only"));
	}
	procreg_close(r);
	check_clean(s);

	/* A restart on the full filesystem: the journal cannot be rewritten,
	 * so it is kept; the leases are still leases. */
	assert_int_equal(th_daemon_stop(&s->d), 0);
	start(s, "full");
	assert_true(th_log_has(s->log, "kept as it was, and appended to"));
	r = th_open(s->mnt);
	assert_non_null(r);
	assert_int_equal(looks_up(r, "lease", 0, lease.count), lease.count);
	assert_int_equal(looks_up(r, "fill", CHURN + FREED, fill.count), fill.count - CHURN - FREED);
	for (int i = 0; i < lease.count; i += 97) {
		char name[32];

		snprintf(name, sizeof(name), "lease.%d", i);
		assert_int_equal(procreg_refresh(r, name), 0);
	}

	/* The owner's death takes its names, however full the disk. */
	th_kill_wait(&owner);
	assert_int_equal(procreg_sync(r), 0);
	assert_int_equal(looks_up(r, "fill", 0, fill.count), 0);
	assert_int_equal(looks_up(r, "anew", 0, CHURN), 0);
	assert_int_equal(looks_up(r, "lease", 0, lease.count), 0);
	assert_int_equal(procreg_stats(r, &st), 0);
	assert_int_equal(st.names, 0);
	/* And what it held is there for others. */
	{
		static char meta[PROCREG_META_MAX];

		for (int i = 0; i < 1000; i++) {
			char name[32];

			snprintf(name, sizeof(name), "later.%d", i);
			assert_int_equal(procreg_register(r, name, meta, sizeof(meta)), 0);
		}
	}
	procreg_close(r);
	check_clean(s);

	/* A restart on the full filesystem: it starts, and has it all. */
	assert_int_equal(th_daemon_stop(&s->d), 0);
	start(s, "full");
	r = th_open(s->mnt);
	assert_non_null(r);
	assert_int_equal(looks_up(r, "later", 0, 1000), 1000); /* their owner, this test, lives */
	for (int i = 0; i < 1000; i += 2) {
		char name[32];

		snprintf(name, sizeof(name), "later.%d", i);
		assert_int_equal(procreg_unregister(r, name), 0);
	}
	assert_int_equal(procreg_register(r, "after.restart", "x", 1), 0);
	assert_int_equal(looks_up(r, "later", 0, 1000), 500);
	procreg_close(r);
	check_clean(s);

	/* A first start where no table fits: a message and exit status 1. */
	assert_int_equal(th_daemon_stop(&s->d), 0);
	fill_up(s->mnt);
	{
		const char *argv[] = { PROCREGD_PATH, "--foreground", "--dir", s->mnt, "--scope",
				       "another", "--max-size", "64M", NULL };
		int rc = th_run(&out, NULL, argv);

		printf("fullfs: a start on the full tmpfs: exit status %d: %s", rc, out.err);
		assert_int_equal(rc, 1);
		assert_non_null(strstr(out.err, "No space left on device"));
	}
	close(o.cmd[0]);
	close(o.cmd[1]);
	close(o.res[0]);
	close(o.res[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_full_filesystem, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
