/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_readme.c - the README's C example, built from the README itself,
 * runs against a real daemon and does what the README says.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static void test_readme_example(void **state)
{
	struct th_daemon d;
	char *dir = th_mkdtemp(), out[512] = "", expect[128];
	PROCREG_OPTS(procreg_stats, st);
	procreg_t *reg;
	int p[2], status;
	pid_t pid;
	ssize_t n;

	(void)state;
	assert_int_equal(th_daemon_start(&d, dir, NULL, NULL), 0);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		setenv("PROCREG_DIR", dir, 1);
		unsetenv("PROCREG_SCOPE");
		execl(README_EXAMPLE_PATH, "readme_example", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	n = read(p[0], out, sizeof(out) - 1);
	out[n > 0 ? n : 0] = 0;
	close(p[0]);
	status = th_wait(pid);
	assert_int_equal(status, 0);
	snprintf(expect, sizeof(expect), "example.payments: pid %d at unix:/run/payments.sock\n",
		 (int)pid);
	assert_string_equal(out, expect);
	/* It registered and unregistered through the daemon. */
	reg = th_open(dir);
	assert_non_null(reg);
	procreg_stats(reg, &st);
	assert_int_equal(st.registrations, 1);
	assert_int_equal(st.unregistrations, 1);
	assert_int_equal(st.names, 0);
	procreg_close(reg);
	assert_int_equal(th_daemon_stop(&d), 0);
	th_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_readme_example),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
