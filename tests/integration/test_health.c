/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_health.c - a daemon that runs but does not answer (SIGSTOP): the
 * table still names its pid, but procreg_ping() and procreg ping say it
 * is not answering, and every call that waits on it gives up after the
 * handle's .timeout_ms with -ETIMEDOUT (procreg's --timeout: exit 2 and a
 * message that says so); procreg stats reports its health and the
 * Prometheus procreg_daemon_up is 0. Once it runs again, the same handle
 * talks to it again. And without a daemon: -ECONNREFUSED.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define fx th_fx

static int setup(void **state)
{
	return th_fx_start(state, NULL, NULL);
}

static int teardown(void **state)
{
	struct fx *f = *state;

	/* A test that failed with the daemon stopped: it must run to stop. */
	if (f->d.pid)
		kill(f->d.pid, SIGCONT);
	return th_fx_stop(state);
}

static procreg_t *open_timeout(const char *dir, int timeout_ms)
{
	PROCREG_OPTS(procreg_opts, o, .dir = dir, .timeout_ms = timeout_ms);
	procreg_t *reg = procreg_open(&o);

	assert_non_null(reg);
	return reg;
}

/* The CLI with --dir DIR and ARGS; its stdout and stderr in O. */
static int cli(struct th_out *o, const char *dir, const char *const *args)
{
	const char *argv[32];

	th_cli_argv(argv, 32, dir, args);
	return th_run(o, NULL, argv);
}

static void test_stopped_daemon(void **state)
{
	struct fx *f = *state;
	struct th_out *o = calloc(1, sizeof(*o));
	PROCREG_OPTS(procreg_stats, s);
	PROCREG_OPTS(procreg_op, op, .kind = PROCREG_OP_REGISTER, .name = "h.batch");
	procreg_t *reg = open_timeout(f->dir, 200);
	char want[128];

	assert_non_null(o);
	assert_int_equal(procreg_ping(reg, -1), 0);
	assert_int_equal(procreg_register(reg, "h.one", "x", 1), 0);
	assert_int_equal(cli(o, f->dir, (const char *const[]){ "ping", NULL }), 0);
	snprintf(want, sizeof(want), "procregd pid %d answered", (int)f->d.pid);
	th_expect_in(o->out, want);

	assert_int_equal(kill(f->d.pid, SIGSTOP), 0);
	assert_true(th_until(th_stopped, &f->d.pid, 10000));

	/* The table still says a daemon runs; a round trip says otherwise. */
	assert_int_equal(procreg_stats(reg, &s), 0);
	assert_int_equal(s.daemon_pid, f->d.pid);
	assert_int_equal(procreg_ping(reg, 200), -ETIMEDOUT);
	/* On the handle's connection, then on new ones (each timed-out call
	 * drops it): waiting for the reply, and for the HELLO's. */
	assert_int_equal(procreg_register(reg, "h.two", "x", 1), -ETIMEDOUT);
	assert_int_equal(procreg_unregister(reg, "h.one"), -ETIMEDOUT);
	assert_int_equal(procreg_sync(reg), -ETIMEDOUT);
	assert_int_equal(procreg_batch(reg, &op, 1), -ETIMEDOUT);
	/* Reads never wait for the daemon. */
	{
		TH_ENTRY(e);

		assert_int_equal(procreg_lookup(reg, "h.one", &e), 0);
	}

	assert_int_equal(cli(o, f->dir, (const char *const[]){ "ping", "--timeout", "0.2", NULL }), 1);
	snprintf(want, sizeof(want), "procregd pid %d did not answer within 0.2s", (int)f->d.pid);
	th_expect_in(o->err, want);
	assert_int_equal(cli(o, f->dir, (const char *const[]){ "ping", "--json", "--timeout", "0.2",
							       NULL }), 1);
	th_expect_in(o->out, "\"answered\":false,\"health\":\"not answering\"");
	assert_int_equal(cli(o, f->dir, (const char *const[]){ "unregister", "h.one", "--timeout",
							       "0.2", NULL }), 2);
	th_expect_in(o->err, "unregister h.one: procregd did not answer within 0.2s");
	assert_int_equal(cli(o, f->dir, (const char *const[]){ "stats", "--timeout", "0.2", NULL }),
			 0);
	th_expect_in(o->out, "\ndaemon_health      not answering (no reply within 0.2s)\n");
	assert_int_equal(cli(o, f->dir, (const char *const[]){ "stats", "--format", "prometheus",
							       "--timeout", "0.2", NULL }), 0);
	th_expect_in(o->out, "\nprocreg_daemon_up{scope=\"default\"} 0\n");
	assert_int_equal(cli(o, f->dir, (const char *const[]){ "stats", "--json", "--timeout",
							       "0.2", NULL }), 0);
	th_expect_in(o->out, "\"daemon_health\":\"not answering\"");

	/* Running again: the same handle reconnects and is answered. */
	assert_int_equal(kill(f->d.pid, SIGCONT), 0);
	assert_int_equal(procreg_ping(reg, -1), 0);
	assert_int_equal(procreg_register(reg, "h.three", "x", 1), 0);
	assert_int_equal(procreg_sync(reg), 0);
	assert_int_equal(cli(o, f->dir, (const char *const[]){ "stats", NULL }), 0);
	th_expect_in(o->out, "\ndaemon_health      answering\n");
	assert_int_equal(cli(o, f->dir, (const char *const[]){ "stats", "--format", "prometheus",
							       NULL }), 0);
	th_expect_in(o->out, "\nprocreg_daemon_up{scope=\"default\"} 1\n");
	procreg_close(reg);
	free(o);
}

static void test_no_daemon(void **state)
{
	struct fx *f = *state;
	struct th_out *o = calloc(1, sizeof(*o));
	procreg_t *reg = open_timeout(f->dir, 200);

	assert_non_null(o);
	assert_int_equal(procreg_ping(reg, 0), -EINVAL);
	assert_int_equal(procreg_ping(reg, -2), -EINVAL);
	assert_int_equal(th_daemon_stop(&f->d), 0);
	assert_int_equal(procreg_ping(reg, 200), -ECONNREFUSED);
	assert_int_equal(procreg_register(reg, "h.none", "x", 1), -ECONNREFUSED);
	assert_int_equal(cli(o, f->dir, (const char *const[]){ "ping", NULL }), 1);
	th_expect_in(o->err, "procreg: ping: scope default: procregd is not running for this scope");
	assert_int_equal(cli(o, f->dir, (const char *const[]){ "stats", NULL }), 0);
	th_expect_in(o->out, "\ndaemon_health      not running\n");
	assert_int_equal(cli(o, f->dir, (const char *const[]){ "ping", "--timeout", "0", NULL }), 2);
	th_expect_in(o->err, "ping: --timeout 0: want seconds, at least 0.001");
	procreg_close(reg);
	free(o);
}

/* A program built against the 0.1 header, whose procreg_opts ends at
 * .trust_uid: its handle has no timeout, and opens as before. */
static void test_old_opts(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_opts, o, .dir = f->dir);
	procreg_t *reg;

	o.sz = offsetof(struct procreg_opts, timeout_ms);
	reg = procreg_open(&o);
	assert_non_null(reg);
	assert_int_equal(procreg_ping(reg, -1), 0);
	assert_int_equal(procreg_register(reg, "h.old", "x", 1), 0);
	procreg_close(reg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stopped_daemon, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_daemon, setup, teardown),
		cmocka_unit_test_setup_teardown(test_old_opts, setup, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
