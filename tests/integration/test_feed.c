/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_feed.c - the change feed and waiting, against a real daemon.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define fx th_fx

static int setup(void **state)
{
	return th_fx_start(state, NULL, NULL);
}

static int setup_small(void **state)
{
	/* A 2 MiB table has a small ring: easy to lap. */
	static const char *const args[] = { "--max-size", "2M", NULL };
	return th_fx_start(state, args, NULL);
}

static int teardown(void **state)
{
	return th_fx_stop(state);
}

static void expect(procreg_t *reg, uint64_t *cur, int type, const char *name, int is_group)
{
	PROCREG_OPTS(procreg_event, ev);

	assert_int_equal(procreg_next_event(reg, cur, &ev, 0), 0);
	assert_int_equal(ev.seq, *cur);
	assert_int_equal(ev.type, type);
	assert_string_equal(ev.name, name);
	assert_int_equal(ev.is_group, is_group);
	assert_int_equal(ev.pid, getpid());
	assert_true(ev.time_ns > 0);
}

static void test_order_of_writes(void **state)
{
	struct fx *f = *state;
	uint64_t cur = procreg_feed_head(f->reg), first = cur;
	PROCREG_OPTS(procreg_event, ev);

	assert_int_equal(procreg_register(f->reg, "a", NULL, 0), 0);
	assert_int_equal(procreg_join(f->reg, "g", "m", 1), 0);
	assert_int_equal(procreg_register(f->reg, "a", "new", 3), 0);
	assert_int_equal(procreg_register(f->reg, "b", NULL, 0), 0);
	assert_int_equal(procreg_unregister(f->reg, "a"), 0);
	assert_int_equal(procreg_leave(f->reg, "g"), 0);
	/* A refused write is no event. */
	assert_int_equal(procreg_unregister(f->reg, "a"), -ENOENT);

	expect(f->reg, &cur, PROCREG_EV_REGISTERED, "a", 0);
	expect(f->reg, &cur, PROCREG_EV_JOINED, "g", 1);
	expect(f->reg, &cur, PROCREG_EV_UPDATED, "a", 0);
	expect(f->reg, &cur, PROCREG_EV_REGISTERED, "b", 0);
	expect(f->reg, &cur, PROCREG_EV_UNREGISTERED, "a", 0);
	expect(f->reg, &cur, PROCREG_EV_LEFT, "g", 1);
	assert_int_equal(cur, first + 6);
	assert_int_equal(procreg_feed_head(f->reg), first + 6);
	assert_int_equal(procreg_next_event(f->reg, &cur, &ev, 0), -ETIMEDOUT);
	assert_int_equal(cur, first + 6);
}

static int die_holding(void *arg)
{
	procreg_t *r = th_open(arg);

	if (!r || procreg_register(r, "doomed", NULL, 0) || procreg_join(r, "doomed.g", NULL, 0))
		return 1;
	pause();
	return 2;
}

static void test_death_events(void **state)
{
	struct fx *f = *state;
	uint64_t cur = procreg_feed_head(f->reg);
	PROCREG_OPTS(procreg_event, ev);
	pid_t kid = th_fork(die_holding, f->dir);
	int seen_name = 0, seen_group = 0;

	/* Its two writes, then its death: one event per name and group. */
	for (int i = 0; i < 2; i++)
		assert_int_equal(procreg_next_event(f->reg, &cur, &ev, 30000), 0);
	kill(kid, SIGKILL);
	assert_int_equal(th_wait(kid), 128 + SIGKILL);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(procreg_next_event(f->reg, &cur, &ev, 30000), 0);
		assert_int_equal(ev.type, PROCREG_EV_DIED);
		assert_int_equal(ev.pid, kid);
		seen_name += !ev.is_group && !strcmp(ev.name, "doomed");
		seen_group += ev.is_group && !strcmp(ev.name, "doomed.g");
	}
	assert_int_equal(seen_name, 1);
	assert_int_equal(seen_group, 1);
}

static void test_lapped_follower(void **state)
{
	struct fx *f = *state;
	enum { N = 1000 };
	static struct procreg_op ops[N];
	static char names[N][16];
	PROCREG_OPTS(procreg_event, ev);
	uint64_t cur = procreg_feed_head(f->reg), head;
	int err, got = 0;

	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "lap%d", i);
		ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_REGISTER, .name = names[i], .meta = NULL, .meta_len = 0, .result = 0 };
	}
	assert_int_equal(procreg_batch(f->reg, ops, N), 0);
	head = procreg_feed_head(f->reg);
	assert_true(head >= cur + N);
	/* A thousand events into a small ring: the follower is told, and
	 * resumes at the oldest event left. */
	assert_int_equal(procreg_next_event(f->reg, &cur, &ev, 0), -EOVERFLOW);
	assert_true(cur > 0 && cur < head);
	while ((err = procreg_next_event(f->reg, &cur, &ev, 0)) == 0) {
		assert_int_equal(ev.seq, cur);
		assert_int_equal(ev.type, PROCREG_EV_REGISTERED);
		got++;
	}
	assert_int_equal(err, -ETIMEDOUT);
	assert_int_equal(cur, head);
	/* What it read was the newest events, in order, ending with the last. */
	assert_true(got > 0 && got < N);
	assert_string_equal(ev.name, names[N - 1]);
}

/* ---- waiting ---------------------------------------------------------- */

struct waiter {
	const char *dir;
	const char *name;     /* or NULL: the group */
	uint64_t count;
};

static int wait_main(void *arg)
{
	struct waiter *w = arg;
	procreg_t *r = th_open(w->dir);
	int err;

	if (!r)
		return 10;
	err = w->name ? procreg_wait(r, w->name, -1) : procreg_wait_group(r, "pool", w->count, -1);
	procreg_close(r);
	return err == 0 ? 0 : 11;
}

/* The child is asleep (state S), not spinning. */
static int asleep(void *arg)
{
	char path[64], buf[512], *p;
	int fd, n;

	snprintf(path, sizeof(path), "/proc/%d/stat", *(pid_t *)arg);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	n = (int)read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[2] == 'S';
}

static int cpu_ticks(pid_t pid)
{
	char path[64], buf[512], *p;
	unsigned long ut = 0, st = 0;
	int fd, n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	n = (int)read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	p = strrchr(buf, ')');
	/* utime and stime are fields 14 and 15; field 3 follows ") ". */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (int)(ut + st);
}

static void test_wait_wakes_on_register(void **state)
{
	struct fx *f = *state;
	struct waiter w = { f->dir, "late", 0 };
	pid_t kid = th_fork(wait_main, &w);
	int t0;

	/* It blocks in the kernel: asleep, and burning no CPU while we
	 * wait a little (a busy loop would be "R" and gain ticks). */
	assert_true(th_until(asleep, &kid, 10000));
	t0 = cpu_ticks(kid);
	th_msleep(200);
	assert_true(asleep(&kid));
	assert_true(cpu_ticks(kid) - t0 <= 1);
	assert_int_equal(procreg_register(f->reg, "late", NULL, 0), 0);
	assert_int_equal(th_wait(kid), 0);

	/* Present already: returns at once, whatever the timeout. */
	assert_int_equal(procreg_wait(f->reg, "late", 0), 0);
}

static void test_wait_group_count(void **state)
{
	struct fx *f = *state;
	struct waiter w = { f->dir, NULL, 2 };
	pid_t kid = th_fork(wait_main, &w), other;
	int hold[2];

	assert_true(th_until(asleep, &kid, 10000));
	assert_int_equal(procreg_join(f->reg, "pool", NULL, 0), 0);
	/* One member is not two: still waiting. */
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_true(th_until(asleep, &kid, 10000));
	assert_int_equal(waitpid(kid, NULL, WNOHANG), 0);
	assert_int_equal(pipe2(hold, O_CLOEXEC), 0);
	other = fork();
	if (other == 0) {
		procreg_t *r = th_open(f->dir);
		char c;

		close(hold[1]);
		if (!r || procreg_join(r, "pool", NULL, 0))
			_exit(1);
		(void)!read(hold[0], &c, 1);
		_exit(0);
	}
	assert_int_equal(th_wait(kid), 0);
	close(hold[1]);
	assert_int_equal(th_wait(other), 0);
	close(hold[0]);
}

static void test_wait_timeout(void **state)
{
	struct fx *f = *state;
	struct timespec a, b;
	long ms;

	clock_gettime(CLOCK_MONOTONIC, &a);
	assert_int_equal(procreg_wait(f->reg, "never", 300), -ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &b);
	ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
	/* It does not give up early (how late is the scheduler's business). */
	assert_true(ms >= 300);
	assert_int_equal(procreg_wait(f->reg, "never", 0), -ETIMEDOUT);
	assert_int_equal(procreg_wait_group(f->reg, "nogroup", 1, 50), -ETIMEDOUT);
	assert_int_equal(procreg_wait_group(f->reg, "nogroup", 0, 0), 0);
	assert_int_equal(procreg_wait(f->reg, "", 0), -EINVAL);
}

/* ---- the pollable fd -------------------------------------------------- */

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static int register_in_child(void *arg)
{
	procreg_t *r = th_open(arg);

	return r && procreg_register(r, "polled", NULL, 0) == 0 ? 0 : 1;
}

static void test_pollable_fd(void **state)
{
	struct fx *f = *state;
	PROCREG_OPTS(procreg_event, ev);
	uint64_t cur = procreg_feed_head(f->reg);
	int fd = procreg_feed_fd(f->reg), err;

	assert_true(fd >= 0);
	assert_int_equal(procreg_feed_fd_clear(fd), 0);
	assert_false(readable(fd, 0));
	/* Another process registers and exits: the fd turns readable, and
	 * the poll / clear / read-all pattern sees both events, whichever
	 * batches the daemon put them in. */
	assert_int_equal(th_wait(th_fork(register_in_child, f->dir)), 0);
	{
		int seen_reg = 0, seen_died = 0;

		while (!(seen_reg && seen_died)) {
			assert_true(readable(fd, 30000));
			assert_int_equal(procreg_feed_fd_clear(fd), 0);
			while ((err = procreg_next_event(f->reg, &cur, &ev, 0)) == 0) {
				assert_string_equal(ev.name, "polled");
				seen_reg += ev.type == PROCREG_EV_REGISTERED;
				seen_died += ev.type == PROCREG_EV_DIED;
			}
			assert_int_equal(err, -ETIMEDOUT);
		}
		assert_int_equal(seen_reg, 1);
		assert_int_equal(seen_died, 1);
	}
	/* The daemon tells after it publishes, once at the end of each batch
	 * of work that published: the events read may have been told after
	 * they were read, by batches that end after the loop above (one
	 * each, at most). Two round trips let those batches end (the second
	 * is read once the first is answered, in a batch of its own unless
	 * it comes within the moment the daemon looks again); each telling
	 * left finds nothing new. */
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	for (int k = 0; k < 3 && readable(fd, 0); k++) {
		assert_int_equal(procreg_feed_fd_clear(fd), 0);
		assert_int_equal(procreg_next_event(f->reg, &cur, &ev, 0), -ETIMEDOUT);
	}
	assert_false(readable(fd, 0));
	/* The daemon goes: the fd says so. */
	assert_int_equal(th_daemon_stop(&f->d), 0);
	assert_true(readable(fd, 30000));
	assert_int_equal(procreg_feed_fd_clear(fd), -ECONNRESET);
	close(fd);
	assert_int_equal(procreg_feed_fd(f->reg), -ECONNREFUSED);
}

/* ---- the CLI ---------------------------------------------------------- */

static int cli_wait(void *arg)
{
	const char *const args[] = { "wait", "cli.late", "--timeout", "30", NULL };

	return th_cli(arg, NULL, 0, args);
}

static void test_cli_wait_and_watch(void **state)
{
	struct fx *f = *state;
	const char *const timeout[] = { "wait", "absent", "--timeout", "0.2", NULL };
	const char *const gtimeout[] = { "wait", "--group", "none", "--count", "3", "--timeout",
					 "0.1", NULL };
	const char *const bad[] = { "wait", "--count", "2", "x", NULL };
	char out[4096], path[512];
	pid_t waiter, watcher;
	FILE *fp;
	int fd;

	assert_int_equal(th_cli(f->dir, NULL, 0, timeout), 1);
	assert_int_equal(th_cli(f->dir, NULL, 0, gtimeout), 1);
	assert_int_equal(th_cli(f->dir, NULL, 0, bad), 2);

	waiter = th_fork(cli_wait, f->dir);
	/* procreg watch --json, into a file, in the background. */
	snprintf(path, sizeof(path), "%s/watch.out", f->dir);
	watcher = fork();
	if (watcher == 0) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		execl(PROCREG_CLI_PATH, "procreg", "--dir", f->dir, "watch", "--json", "cli.*",
		      (char *)NULL);
		_exit(127);
	}
	assert_true(th_until(asleep, &watcher, 10000));
	assert_true(th_until(asleep, &waiter, 10000));
	assert_int_equal(procreg_register(f->reg, "other", NULL, 0), 0);
	assert_int_equal(procreg_register(f->reg, "cli.late", "x", 1), 0);
	assert_int_equal(th_wait(waiter), 0);
	assert_int_equal(procreg_unregister(f->reg, "cli.late"), 0);
	assert_int_equal(procreg_sync(f->reg), 0);
	/* Let the watcher print both, then stop it the way a user does. */
	for (int i = 0; i < 10000; i++) {
		fp = fopen(path, "r");
		out[0] = 0;
		if (fp) {
			size_t n = fread(out, 1, sizeof(out) - 1, fp);

			out[n] = 0;
			fclose(fp);
		}
		if (strstr(out, "unregistered"))
			break;
		th_msleep(1);
	}
	kill(watcher, SIGINT);
	assert_int_equal(th_wait(watcher), 0);
	/* Only the names matching the pattern, one JSON object a line. */
	assert_null(strstr(out, "\"other\""));
	assert_non_null(strstr(out, "\"event\":\"registered\",\"name\":\"cli.late\""));
	assert_non_null(strstr(out, "\"event\":\"unregistered\",\"name\":\"cli.late\""));
	assert_int_equal(out[strlen(out) - 1], '\n');
	{
		int lines = 0;

		for (char *p = out; *p; p++)
			lines += *p == '\n';
		assert_int_equal(lines, 2);
	}
}

/*
 * The daemon wakes the feed's futex only while a connection has said
 * FOLLOW (feed.c): a follower asleep when the daemon it told dies, or
 * asleep with no daemon at all, must be woken by the next one, or it
 * sleeps through every event from then on.
 */
struct follow_arg {
	const char *dir;
	int ready;                  /* written once the head is taken */
};

/* Follow from the head until "after" is registered (0), or not within a
 * minute (3). */
static int follow_until_after(void *arg)
{
	const struct follow_arg *a = arg;
	procreg_t *r = th_open(a->dir);
	PROCREG_OPTS(procreg_event, ev);
	uint64_t cur;
	int err;

	if (!r)
		return 1;
	cur = procreg_feed_head(r);
	if (write(a->ready, "r", 1) != 1)
		return 2;
	while ((err = procreg_next_event(r, &cur, &ev, 60000)) == 0 || err == -EOVERFLOW)
		if (!err && ev.type == PROCREG_EV_REGISTERED && !strcmp(ev.name, "after"))
			return 0;
	return 3;
}

/* Until PID's (one-threaded) process sleeps in futex(2). */
static void wait_in_futex(pid_t pid)
{
	for (int i = 0; i < 30000; i++) {
		if (th_blocked_in(pid) == SYS_futex)
			return;
		th_msleep(1);
	}
	fail_msg("process %d never slept in futex(2)", (int)pid);
}

static pid_t start_follower(struct fx *f, struct follow_arg *a)
{
	int p[2];
	char c;
	pid_t kid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	a->dir = f->dir;
	a->ready = p[1];
	kid = th_fork(follow_until_after, a);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	close(p[1]);
	wait_in_futex(kid);
	return kid;
}

static void test_follower_across_restart(void **state)
{
	struct fx *f = *state;
	struct follow_arg a;
	pid_t kid = start_follower(f, &a);

	/* It told the daemon before it slept; that one dies, and the next
	 * has no connection that said FOLLOW. */
	th_daemon_kill(&f->d);
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
	assert_int_equal(procreg_register(f->reg, "after", NULL, 0), 0);
	assert_int_equal(th_wait_ms(kid, 30000), 0);
}

static void test_follower_before_daemon(void **state)
{
	struct fx *f = *state;
	struct follow_arg a;
	pid_t kid;

	/* No daemon: its FOLLOW finds no one, and it sleeps. */
	assert_int_equal(th_daemon_stop(&f->d), 0);
	kid = start_follower(f, &a);
	assert_int_equal(th_daemon_start(&f->d, f->dir, NULL, NULL), 0);
	assert_int_equal(procreg_register(f->reg, "after", NULL, 0), 0);
	assert_int_equal(th_wait_ms(kid, 30000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_order_of_writes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_death_events, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lapped_follower, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_wait_wakes_on_register, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_group_count, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cli_wait_and_watch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pollable_fd, setup, teardown),
		cmocka_unit_test_setup_teardown(test_follower_across_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_follower_before_daemon, setup, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
