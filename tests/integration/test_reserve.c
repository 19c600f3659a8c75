/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_reserve.c - fair shares with headroom: several unprivileged uids
 * fill every per-uid quota they have, connections and names, until the
 * daemon-wide limits are reached; root still connects, registers and
 * looks up, from what is kept for it (--reserved-clients, --reserved-size),
 * and the daemon says who was refused.
 *
 * Needs root: the tenants are accounts the test creates (th_user_new).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define TENANTS 4
#define MAX_CLIENTS 16
#define PER_UID_CLIENTS 4
#define RESERVED_CLIENTS 4
#define PER_UID_NAMES 600

static const char *const daemon_args[] = {
	"--max-clients", "16", "--max-clients-per-uid", "4", "--reserved-clients", "4",
	"--max-size", "2M", "--reserved-size", "128K", "--max-names-per-uid", "600", NULL,
};

static int setup(void **state)
{
	return th_fx_start(state, daemon_args, NULL);
}

static int teardown(void **state)
{
	return th_fx_stop(state);
}

/* A process of its own uid, driven over pipes: 'n' registers names with
 * 1 KiB of metadata until refused, 'c' opens connections until refused,
 * 'q' ends it (its names and connections go with it). */
struct tenant {
	struct th_user u;
	const char *dir;
	pid_t pid;
	int cmd[2], res[2];
};

struct result {
	int count;      /* names registered, connections accepted */
	int err;        /* what ended it */
};

static int tenant_main(void *arg)
{
	static char meta[PROCREG_META_MAX];
	struct tenant *t = arg;
	int conns[32], nconns = 0;
	procreg_t *r;
	char c;

	close(t->cmd[1]);
	close(t->res[0]);
	th_become(&t->u);
	r = th_open(t->dir);
	if (!r)
		return 10;
	memset(meta, 'm', sizeof(meta));
	while (read(t->cmd[0], &c, 1) == 1 && c != 'q') {
		struct result res = { 0, 0 };

		if (c == 'n') {
			for (;;) {
				char name[32];

				snprintf(name, sizeof(name), "t%u.%d", (unsigned)getuid(), res.count);
				res.err = procreg_register(r, name, meta, sizeof(meta));
				if (res.err || ++res.count > 10000)
					break;
			}
		} else if (c == 'c') {
			while (nconns < 32) {
				int fd = th_raw_try_connect(t->dir);

				if (fd < 0 || th_raw_try_hello(fd) < 0) {
					res.err = -ECONNREFUSED;
					if (fd >= 0)
						close(fd);
					break;
				}
				conns[nconns++] = fd;
				res.count++;
			}
		}
		if (write(t->res[1], &res, sizeof(res)) != sizeof(res))
			return 11;
	}
	while (nconns)
		close(conns[--nconns]);
	procreg_close(r);
	return 0;
}

static struct result ask(struct tenant *t, char c)
{
	struct result res;

	assert_int_equal(write(t->cmd[1], &c, 1), 1);
	if (read(t->res[0], &res, sizeof(res)) != sizeof(res))
		fail_msg("tenant %s: no answer (status %d)", t->u.name, th_wait(t->pid));
	return res;
}

/* Root's half: a connection of its own, names with 1 KiB of metadata, and
 * lookups of them; all must work. */
static void root_serves(const char *dir, int names)
{
	static char meta[PROCREG_META_MAX];
	procreg_t *r = th_open(dir);

	assert_non_null(r);
	memset(meta, 'r', sizeof(meta));
	for (int i = 0; i < names; i++) {
		char name[32];

		snprintf(name, sizeof(name), "root.%d", i);
		assert_int_equal(procreg_register(r, name, meta, sizeof(meta)), 0);
	}
	for (int i = 0; i < names; i++) {
		char name[32];
		TH_ENTRY(e);

		snprintf(name, sizeof(name), "root.%d", i);
		assert_int_equal(procreg_lookup(r, name, &e), 0);
		assert_int_equal(e.pid, getpid());
	}
	assert_int_equal(procreg_sync(r), 0);
	procreg_close(r);
}

static void test_quotas_leave_root_room(void **state)
{
	struct th_fx *f = *state;
	struct tenant t[TENANTS];
	struct result names[TENANTS], conns[TENANTS];
	int root_fds[MAX_CLIENTS], nroot = 0, unpriv = 0;
	char want[160];

	/* Root's handle holds one connection from here on. */
	assert_int_equal(procreg_sync(f->reg), 0);
	for (int i = 0; i < TENANTS; i++) {
		th_user_new(&t[i].u);
		t[i].dir = f->dir;
		assert_int_equal(pipe(t[i].cmd), 0);
		assert_int_equal(pipe(t[i].res), 0);
		t[i].pid = th_fork(tenant_main, &t[i]);
		close(t[i].cmd[0]);
		close(t[i].res[1]);
	}

	/* Names, one tenant after the other: the first two reach their
	 * uid's quota; the table then fills, but for the reserve, and the
	 * others are told it is full. */
	for (int i = 0; i < TENANTS; i++) {
		names[i] = ask(&t[i], 'n');
		printf("tenant %d (uid %u): %d names, then %s\n", i, (unsigned)t[i].u.uid,
		       names[i].count, strerror(-names[i].err));
	}
	assert_int_equal(names[0].count, PER_UID_NAMES);
	assert_int_equal(names[0].err, -EDQUOT);
	assert_int_equal(names[1].count, PER_UID_NAMES);
	assert_int_equal(names[1].err, -EDQUOT);
	assert_true(names[2].count < PER_UID_NAMES);
	assert_int_equal(names[2].err, -ENOSPC);
	assert_int_equal(names[3].err, -ENOSPC);
	/* Root registers from the reserve (128 KiB: room for 100 such). */
	root_serves(f->dir, 50);

	/* Connections: each tenant holds one (its handle) and opens more
	 * until refused; past MAX_CLIENTS - RESERVED_CLIENTS in all, root's
	 * included, no other uid gets one. */
	for (int i = 0; i < TENANTS; i++) {
		conns[i] = ask(&t[i], 'c');
		unpriv += 1 + conns[i].count;
		printf("tenant %d: %d more connections, then refused\n", i, conns[i].count);
	}
	assert_int_equal(conns[0].count, PER_UID_CLIENTS - 1);
	assert_int_equal(conns[1].count, PER_UID_CLIENTS - 1);
	assert_int_equal(1 + unpriv, MAX_CLIENTS - RESERVED_CLIENTS);
	/* Root has the reserve: all of it, and no more than the limit. */
	while (nroot < MAX_CLIENTS) {
		int fd = th_raw_try_connect(f->dir);

		if (fd < 0 || th_raw_try_hello(fd) < 0) {
			if (fd >= 0)
				close(fd);
			break;
		}
		root_fds[nroot++] = fd;
	}
	assert_int_equal(nroot, RESERVED_CLIENTS);
	/* The handle's connection still serves, with names from the reserve. */
	assert_int_equal(procreg_register(f->reg, "root.after", "x", 1), 0);
	assert_int_equal(procreg_lookup(f->reg, "root.after", NULL), 0);
	assert_int_equal(procreg_lookup(f->reg, "root.49", NULL), 0);
	for (int i = 0; i < nroot; i++)
		close(root_fds[i]);

	/* Who was refused, and for what: the first of each kind is logged
	 * (a client may retry at once, so the rest are counted). */
	snprintf(want, sizeof(want), "uid %u: name refused (EDQUOT)", (unsigned)t[0].u.uid);
	assert_true(th_log_has(f->d.log, want));
	snprintf(want, sizeof(want), "uid %u: name refused (ENOSPC): the table is full but for",
		 (unsigned)t[2].u.uid);
	assert_true(th_log_has(f->d.log, want));
	snprintf(want, sizeof(want), "client refused: uid %u has %d connections (--max-clients-per-uid)",
		 (unsigned)t[0].u.uid, PER_UID_CLIENTS);
	assert_true(th_log_has(f->d.log, want));
	snprintf(want, sizeof(want), "kept for root and uid %u (--reserved-clients)",
		 (unsigned)th_daemon_uid());
	assert_true(th_log_has(f->d.log, want));
	assert_true(th_log_has(f->d.log, "client refused: 16 clients connected (--max-clients 16)"));

	for (int i = 0; i < TENANTS; i++) {
		char q = 'q';

		assert_int_equal(write(t[i].cmd[1], &q, 1), 1);
		assert_int_equal(th_wait(t[i].pid), 0);
		close(t[i].cmd[1]);
		close(t[i].res[0]);
		th_user_del(&t[i].u);
	}
	/* Their names went with them: the table has room for all again. */
	assert_int_equal(procreg_sync(f->reg), 0);
	root_serves(f->dir, 200);
}

/* The reserves' options (and the local share's, --local-size), checked
 * before anything starts. */
static void test_options_checked(void **state)
{
	static const struct {
		const char *a, *b, *say;
		int status;
		const char *c, *d; /* another option, if any */
	} bad[] = {
		{ "--reserved-clients", "1024", "want fewer than --max-clients (1024)", 2 },
		{ "--reserved-clients", "x", "--reserved-clients x: want a number", 2 },
		{ "--reserved-size", "1Q", "--reserved-size 1Q: want a size", 2 },
		{ "--reserved-size", "2M", "want at most half the table (1048576 bytes)", 1 },
		{ "--local-size", "1Q", "--local-size 1Q: want a size", 2 },
		{ "--local-size", "1025K",
		  "--local-size 1049600: want at most half the table (1048576 bytes)", 1 },
		{ "--local-size", "1M", "at most half the table together", 1, "--reserved-size",
		  "1K" },
		{ "--local-size", "512K", "at most half the table together", 1, "--reserved-size",
		  "513K" },
	};
	char *dir = th_mkdtemp();

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *argv[] = { PROCREGD_PATH, "--foreground", "--dir", dir, "--max-size", "2M",
				       bad[i].a, bad[i].b, bad[i].c, bad[i].d, NULL };
		struct th_out o;

		assert_int_equal(th_run(&o, NULL, argv), bad[i].status);
		if (!strstr(o.err, bad[i].say))
			fail_msg("%s %s: said \"%s\"", bad[i].a, bad[i].b, o.err);
	}
	th_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_options_checked),
		cmocka_unit_test_setup_teardown(test_quotas_leave_root_room, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
