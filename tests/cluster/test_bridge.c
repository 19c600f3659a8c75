/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_bridge.c - replication between real procregd daemons on one
 * machine: each node has its own directory (table, socket), its own
 * loopback port and the same cookie. Checks behaviour, not timing: every
 * wait is a bounded poll.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>

#include "cluster.h"
#include "internal.h"
#include "bridge_proto.h"

#define NODES_MAX 5
#define WAIT_MS 10000

struct cluster {
	const char *resolver;       /* --resolver for every node started, or NULL */
	const char *const *extra;   /* more arguments for every node started, or NULL */
	char *base;
	char cookie[512];
	struct th_node n[NODES_MAX];
};

static int setup(void **state)
{
	struct cluster *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	c->base = th_nodes_make(c->n, NODES_MAX, "node", c->cookie, sizeof(c->cookie),
				"a-test-cookie-0123456789");
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct cluster *c = *state;
	/* Every daemon still running stops cleanly (under the sanitizers: no
	 * error, no leak). */
	int bad = th_nodes_stop(c->n, NODES_MAX);

	th_rmrf(c->base);
	free(c->base);
	free(c);
	return bad;
}

/* Start node I with COOKIE, peering with the nodes in PEERS (-1 ends). */
static int start_node_env(struct cluster *c, int i, const char *cookie, const int *peers,
			  const char *const *env)
{
	char peer_args[NODES_MAX][32];
	const char *args[32];
	int k = 0;

	if (c->resolver) {
		args[k++] = "--resolver";
		args[k++] = c->resolver;
	}
	for (int e = 0; c->extra && c->extra[e]; e++)
		args[k++] = c->extra[e];
	for (int p = 0; peers && peers[p] >= 0; p++) {
		snprintf(peer_args[p], sizeof(peer_args[p]), "%s", c->n[peers[p]].listen);
		args[k++] = "--peer";
		args[k++] = peer_args[p];
	}
	args[k] = NULL;
	return th_node_start(&c->n[i], cookie, args, env);
}

static int start_node_cookie(struct cluster *c, int i, const char *cookie, const int *peers)
{
	return start_node_env(c, i, cookie, peers, NULL);
}

static void start_node(struct cluster *c, int i, const int *peers)
{
	assert_int_equal(start_node_cookie(c, i, c->cookie, peers), 0);
}

/* The usual three: b and c know a; a learns of them; they learn of each
 * other from a. */
static void start_three(struct cluster *c)
{
	start_node(c, 0, NULL);
	start_node(c, 1, (const int[]){ 0, -1 });
	start_node(c, 2, (const int[]){ 0, -1 });
}

#define expect_name(reg, name, pid, remote) th_expect_name(reg, name, pid, remote, WAIT_MS)
#define expect_members(reg, group, want) th_expect_members(reg, group, want, WAIT_MS)
#define expect_meta(reg, name, meta, len) th_expect_meta(reg, name, meta, len, WAIT_MS)
/* A child that registers NAME (with META) on a node and holds it until
 * killed. */
#define spawn_holder_meta(dir, name, meta) th_spawn_holder(dir, name, meta)
#define spawn_holder(dir, name) th_spawn_holder(dir, name, "held")

/* ---- tests -------------------------------------------------------------- */

static void test_visible_everywhere(void **state)
{
	struct cluster *c = *state;

	start_three(c);
	th_scenario_visible(c->n, WAIT_MS);
	th_scenario_unregister_leave(c->n, WAIT_MS);
}

static void test_death_propagates(void **state)
{
	struct cluster *c = *state;

	start_three(c);
	th_scenario_death(c->n, WAIT_MS);
}

static void test_killed_node_entries_vanish(void **state)
{
	struct cluster *c = *state;

	start_three(c);
	th_scenario_node_killed(c->n, WAIT_MS);
}

static void test_late_joiner(void **state)
{
	struct cluster *c = *state;

	start_three(c);
	assert_int_equal(procreg_register(c->n[0].reg, "from-a", NULL, 0), 0);
	assert_int_equal(procreg_register(c->n[1].reg, "from-b", NULL, 0), 0);
	assert_int_equal(procreg_register(c->n[2].reg, "from-c", NULL, 0), 0);
	assert_int_equal(procreg_join(c->n[2].reg, "g", NULL, 0), 0);
	expect_name(c->n[0].reg, "from-c", getpid(), true);

	/* Enough on a for its snapshot to take several frames. */
	th_register_bulk(c->n[0].reg, "bulk-", 3000, "0123456789abcdef0123456789abcdef");

	/* d knows only c; it hears of a and b from c. */
	start_node(c, 3, (const int[]){ 2, -1 });
	expect_name(c->n[3].reg, "bulk-0", getpid(), true);
	expect_name(c->n[3].reg, "bulk-2999", getpid(), true);
	th_expect_names(c->n[3].reg, 3003, WAIT_MS);
	expect_name(c->n[3].reg, "from-a", getpid(), true);
	expect_name(c->n[3].reg, "from-b", getpid(), true);
	expect_name(c->n[3].reg, "from-c", getpid(), true);
	expect_members(c->n[3].reg, "g", 1);
	/* And the others hear of d's names. */
	assert_int_equal(procreg_register(c->n[3].reg, "from-d", NULL, 0), 0);
	for (int i = 0; i < 3; i++)
		expect_name(c->n[i].reg, "from-d", getpid(), true);
}

/* --bridge-flush-bytes N: a batch of 20,000 registrations reaches the
 * other node whole and in order, whether its changes go out at the end of
 * the batch (0) or as soon as each is queued (1). */
static void flush_bytes_round(struct cluster *c, const char *bytes)
{
	PROCREG_OPTS(procreg_stats, st);
	char name[32];

	c->extra = (const char *const[]){ "--bridge-flush-bytes", bytes, NULL };
	start_node(c, 0, NULL);
	start_node(c, 1, (const int[]){ 0, -1 });
	assert_int_equal(procreg_register(c->n[1].reg, "ready", NULL, 0), 0);
	expect_name(c->n[0].reg, "ready", getpid(), true);
	th_register_bulk(c->n[0].reg, "flush-", 20000, "m");
	expect_name(c->n[1].reg, "flush-19999", getpid(), true);
	procreg_stats(c->n[1].reg, &st);
	assert_int_equal(st.names, 20001);
	for (int i = 0; i < 20000; i += 997) {
		snprintf(name, sizeof(name), "flush-%d", i);
		expect_name(c->n[1].reg, name, getpid(), true);
	}
	c->extra = NULL;
}

static void test_flush_bytes_zero(void **state)
{
	struct cluster *c = *state;
	struct th_daemon d = { 0 };

	flush_bytes_round(c, "0");
	/* Without --node it means nothing: refused. */
	assert_int_not_equal(th_daemon_start(&d, c->n[2].dir,
					     (const char *const[]){ "--bridge-flush-bytes", "0", NULL },
					     NULL), 0);
}

static void test_flush_bytes_one(void **state)
{
	flush_bytes_round(*state, "1");
}

struct logprobe {
	const char *path, *needle, *path2;
};

static int probe_log(void *arg)
{
	struct logprobe *l = arg;

	return th_log_has(l->path, l->needle) || (l->path2 && th_log_has(l->path2, l->needle));
}

static void test_wrong_cookie_refused(void **state)
{
	struct cluster *c = *state;
	char bad[600];
	struct logprobe lp;

	start_three(c);
	assert_int_equal(procreg_register(c->n[0].reg, "secret-name", NULL, 0), 0);
	snprintf(bad, sizeof(bad), "%s/bad-cookie", c->base);
	th_write_file(bad, "another-cookie-9876543210\n", 0600);
	assert_int_equal(start_node_cookie(c, 3, bad, (const int[]){ 0, -1 }), 0);
	assert_int_equal(procreg_register(c->n[3].reg, "intruder", NULL, 0), 0);

	/* Refused and logged on both sides: the node dialed checks the
	 * dialer's proof and says why it drops the connection. */
	lp = (struct logprobe){ c->n[0].d.log, "authentication failed (another cookie", NULL };
	assert_true(th_until(probe_log, &lp, WAIT_MS));
	lp = (struct logprobe){ c->n[3].d.log,
				"refused by the other side (version 3): authentication failed", NULL };
	assert_true(th_until(probe_log, &lp, WAIT_MS));
	/* Nothing crossed, either way. */
	th_msleep(300);
	assert_int_equal(procreg_lookup(c->n[3].reg, "secret-name", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }),
			 -ENOENT);
	for (int i = 0; i < 3; i++)
		assert_int_equal(procreg_lookup(c->n[i].reg, "intruder",
						&(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }), -ENOENT);
}

static void test_cookie_file_mode(void **state)
{
	struct cluster *c = *state;
	char loose[600];

	snprintf(loose, sizeof(loose), "%s/loose-cookie", c->base);
	th_write_file(loose, "a-test-cookie-0123456789\n", 0644);
	assert_int_not_equal(start_node_cookie(c, 0, loose, NULL), 0);
	assert_true(th_log_has(c->n[0].d.log, "must be 0600"));
}

/* Two nodes register NAME while apart (a first, with META_A, then b, with
 * META_B); c, which knows both, brings them together. Every node must end
 * up with the same owner: b's if B_WINS, else a's; and the loser's node
 * reports the conflict in its change feed. */
static void conflict_round(struct cluster *c, const char *name, const char *meta_a,
			   const char *meta_b, bool b_wins)
{
	pid_t first, second, winner, loser;
	int loser_node = b_wins ? 0 : 1;
	uint64_t cursor;
	PROCREG_OPTS(procreg_event, ev);
	bool conflict = false;

	start_node(c, 0, NULL);
	start_node(c, 1, NULL);  /* not yet connected to a */
	first = spawn_holder_meta(c->n[0].dir, name, meta_a);
	th_msleep(5);
	second = spawn_holder_meta(c->n[1].dir, name, meta_b);
	winner = b_wins ? second : first;
	loser = b_wins ? first : second;
	cursor = procreg_feed_head(c->n[loser_node].reg);

	/* c knows both: a and b learn of each other through it. */
	start_node(c, 2, (const int[]){ 0, 1, -1 });
	for (int i = 0; i < 3; i++)
		expect_name(c->n[i].reg, name, winner, i != (b_wins ? 1 : 0));
	th_feed_settle(c->n[loser_node].reg);
	while (procreg_next_event(c->n[loser_node].reg, &cursor, &ev, 0) == 0)
		if (ev.type == PROCREG_EV_CONFLICT && ev.pid == loser)
			conflict = true;
	assert_true(conflict);
	kill(first, SIGKILL);
	kill(second, SIGKILL);
	th_wait(first);
	th_wait(second);
}

/* What the loser of "job" learned through the library (written to a pipe
 * by the child that held it). */
struct lost_report {
	int first;                  /* procreg_lost() once the fd was readable */
	int second;                 /* procreg_lost() again: nothing more */
	int polled;                 /* poll() on procreg_lost_fd() */
	struct procreg_lost l;
};

/* The child: register "job" on the table of DIR, say so on OUT, then wait
 * on procreg_lost_fd() for the notice and report it. */
static int loser_child(const char *dir, int out)
{
	procreg_t *r = th_open(dir);
	struct lost_report rep = { 0 };
	struct pollfd p;
	char ok = 'r';

	if (!r || procreg_register(r, "job", "loser", 5) != 0)
		return 10;
	if (write(out, &ok, 1) != 1)
		return 11;
	p = (struct pollfd){ .fd = procreg_lost_fd(r), .events = POLLIN };
	rep.polled = poll(&p, 1, 60000);
	rep.l.sz = sizeof(rep.l);
	rep.first = procreg_lost(r, &rep.l, 0);
	{
		PROCREG_OPTS(procreg_lost, more);

		rep.second = procreg_lost(r, &more, 0);
	}
	if (write(out, &rep, sizeof(rep)) != sizeof(rep))
		return 12;
	for (;;)
		pause();
}

static pid_t spawn_loser(const char *dir, int *rd)
{
	int p[2];
	pid_t pid;
	char ok;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		_exit(loser_child(dir, p[1]));
	}
	close(p[1]);
	assert_int_equal(read(p[0], &ok, 1), 1);
	*rd = p[0];
	return pid;
}

/* Two nodes that could not see each other both gave "job" away, a's the
 * earlier. Once they meet, the process that held it on b is told, through
 * the library, on its own connection: the name, the winner's node and pid.
 * Both daemons log the decision, each its side. */
static void test_conflict_loser_told(void **state)
{
	struct cluster *c = *state;
	struct lost_report rep;
	pid_t winner, loser;
	char line[256];
	int rd;

	start_node(c, 0, NULL);
	start_node(c, 1, NULL);
	winner = spawn_holder(c->n[0].dir, "job");
	th_msleep(5);
	loser = spawn_loser(c->n[1].dir, &rd);
	start_node(c, 2, (const int[]){ 0, 1, -1 });
	for (int i = 0; i < 3; i++)
		expect_name(c->n[i].reg, "job", winner, i != 0);
	assert_int_equal(read(rd, &rep, sizeof(rep)), (ssize_t)sizeof(rep));
	close(rd);
	assert_int_equal(rep.polled, 1);
	assert_int_equal(rep.first, 0);
	assert_int_equal(rep.l.reason, PROCREG_LOST_CONFLICT);
	assert_string_equal(rep.l.name, "job");
	assert_string_equal(rep.l.node, "nodea");
	assert_int_equal(rep.l.winner_pid, winner);
	assert_true(rep.l.time_ns > 0);
	assert_int_equal(rep.second, -ETIMEDOUT);
	/* Both sides logged it (b after it told the loser: waited for). */
	snprintf(line, sizeof(line), "bridge: name 'job': node nodea's registration (pid %d), the "
		 "earlier, wins: local pid %d loses it", (int)winner, (int)loser);
	th_expect_log(c->n[1].d.log, line, WAIT_MS);
	snprintf(line, sizeof(line), "name 'job': pid %d told it lost it to node nodea's pid %d",
		 (int)loser, (int)winner);
	th_expect_log(c->n[1].d.log, line, WAIT_MS);
	snprintf(line, sizeof(line), "bridge: name 'job': node nodeb's registration (pid %d) loses "
		 "to ours (pid %d), the earlier: kept", (int)loser, (int)winner);
	th_expect_log(c->n[0].d.log, line, WAIT_MS);
	/* The loser runs on, told; not signalled (it asked for no signal). */
	assert_int_equal(kill(loser, 0), 0);
	kill(winner, SIGKILL);
	kill(loser, SIGKILL);
	th_wait(winner);
	th_wait(loser);
}

/* b comes up with two peers at once: c, which holds nothing, and a,
 * which holds "job", registered before b's. A node whose snapshot is
 * still to be written (the second to come up in one turn) is not read
 * until it is: had b applied a's snapshot first, its losing
 * registration would be gone from the snapshot it then sent, and a
 * would never hear of the conflict. Both sides log it, and the loser is
 * told, whichever node b brings up first. */
static void test_conflict_in_burst(void **state)
{
	struct cluster *c = *state;
	char line[256];
	pid_t winner, loser;
	int rd;

	start_node(c, 0, NULL);
	start_node(c, 2, NULL);
	winner = spawn_holder(c->n[0].dir, "job");
	th_msleep(5);
	start_node(c, 1, (const int[]){ 2, 0, -1 });
	loser = spawn_loser(c->n[1].dir, &rd);
	for (int i = 0; i < 3; i++)
		expect_name(c->n[i].reg, "job", winner, i != 0);
	snprintf(line, sizeof(line), "bridge: name 'job': node nodeb's registration (pid %d) loses "
		 "to ours (pid %d), the earlier: kept", (int)loser, (int)winner);
	th_expect_log(c->n[0].d.log, line, WAIT_MS);
	snprintf(line, sizeof(line), "name 'job': pid %d told it lost it to node nodea's pid %d",
		 (int)loser, (int)winner);
	th_expect_log(c->n[1].d.log, line, WAIT_MS);
	close(rd);
	kill(winner, SIGKILL);
	kill(loser, SIGKILL);
	th_wait(winner);
	th_wait(loser);
}

/* procreg run NAME -- CMD on b, while a gave NAME away earlier: once they
 * meet, CMD gets SIGTERM from b's daemon (procreg run's default), or, with
 * --on-lost none, runs on. */
static pid_t run_cli(const char *dir, const char *name, const char *on_lost)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);

		/* Not the test's output: a failed assert would leave this
		 * process holding it, and ctest waiting for it. */
		if (null >= 0) {
			dup2(null, 1);
			dup2(null, 2);
		}
		if (on_lost)
			execl(PROCREG_CLI_PATH, "procreg", "--dir", dir, "run", name, "--on-lost",
			      on_lost, "--", "sleep", "600", (char *)NULL);
		else
			execl(PROCREG_CLI_PATH, "procreg", "--dir", dir, "run", name, "--", "sleep",
			      "600", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* The "Uid:" (real) or "CapEff:" (hex) of PID's status, as a number; -1
 * if it cannot be read. */
static long long proc_status(pid_t pid, const char *field)
{
	char path[64], line[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, strlen(field))) {
			v = strtoll(line + strlen(field), NULL, strcmp(field, "Uid:") ? 16 : 10);
			break;
		}
	fclose(f);
	return v;
}

/* With daemons run as a system user (ctest's test_bridge_sysuser): b's
 * daemon signals the loser, a process of root's (this test's), with
 * CAP_KILL alone, as procregd@.service runs it. */
static void test_run_loser_signalled(void **state)
{
	struct cluster *c = *state;
	pid_t winner1, winner2, termed, spared;
	int st = 0;
	char line[256];

	start_node(c, 0, NULL);
	start_node(c, 1, NULL);
	if (th_daemon_user()) {
		assert_int_equal(proc_status(c->n[1].d.pid, "Uid:"), th_daemon_user()->uid);
		assert_int_equal(proc_status(c->n[1].d.pid, "CapEff:"), 1ll << CAP_KILL);
		assert_int_equal(getuid(), 0);
	}
	winner1 = spawn_holder(c->n[0].dir, "svc-default");
	winner2 = spawn_holder(c->n[0].dir, "svc-spared");
	th_msleep(5);
	termed = run_cli(c->n[1].dir, "svc-default", NULL);
	spared = run_cli(c->n[1].dir, "svc-spared", "none");
	expect_name(c->n[1].reg, "svc-default", termed, false);
	expect_name(c->n[1].reg, "svc-spared", spared, false);
	start_node(c, 2, (const int[]){ 0, 1, -1 });
	expect_name(c->n[1].reg, "svc-default", winner1, true);
	expect_name(c->n[1].reg, "svc-spared", winner2, true);
	assert_int_equal(waitpid(termed, &st, 0), termed);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGTERM);
	/* The daemon logs after it signals. */
	snprintf(line, sizeof(line), "name 'svc-default': pid %d told it lost it to node nodea's "
		 "pid %d, sent SIGTERM", (int)termed, (int)winner1);
	th_expect_log(c->n[1].d.log, line, WAIT_MS);
	snprintf(line, sizeof(line), "name 'svc-spared': pid %d told it lost it to node nodea's pid "
		 "%d\n", (int)spared, (int)winner2);
	th_expect_log(c->n[1].d.log, line, WAIT_MS);
	assert_int_equal(waitpid(spared, &st, WNOHANG), 0);
	kill(spared, SIGKILL);
	th_wait(spared);
	kill(winner1, SIGKILL);
	kill(winner2, SIGKILL);
	th_wait(winner1);
	th_wait(winner2);
}

/* The signal outlives a restart of b's daemon, a crash (SIGKILL) or a stop
 * (SIGTERM): it is in the owners journal. Before, it lived in the
 * daemon's memory only, and the command that lost its name ran on. A
 * command that let go of its name and took another without --on-lost is
 * not signalled (its signal cleared, and journaled so). */
static void run_loser_restart(void **state, bool crash)
{
	struct cluster *c = *state;
	pid_t winner, termed, spared, winner2;
	char line[256];

	start_node(c, 0, NULL);
	start_node(c, 1, NULL);
	winner = spawn_holder(c->n[0].dir, "svc-restart");
	winner2 = spawn_holder(c->n[0].dir, "svc-cleared");
	th_msleep(5);
	termed = run_cli(c->n[1].dir, "svc-restart", NULL);
	expect_name(c->n[1].reg, "svc-restart", termed, false);
	/* Spared: its signal set, then cleared when it held nothing; its
	 * name since, taken with none, is lost without one. */
	spared = th_spawn_holder(c->n[1].dir, "svc-spared-first", "x");
	expect_name(c->n[1].reg, "svc-spared-first", spared, false);
	{
		PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_PIDFD, .lost_signal = SIGTERM,
			     .pidfd = (int)syscall(SYS_pidfd_open, spared, 0));

		assert_true(o.pidfd >= 0);
		assert_int_equal(procreg_register_opts(c->n[1].reg, "svc-spared-tmp", NULL, 0, &o), 0);
		assert_int_equal(procreg_unregister(c->n[1].reg, "svc-spared-tmp"), 0);
		assert_int_equal(procreg_unregister(c->n[1].reg, "svc-spared-first"), 0);
		assert_int_equal(procreg_register_pidfd(c->n[1].reg, o.pidfd, "svc-cleared", NULL, 0),
				 0);
		close(o.pidfd);
	}
	if (crash) {
		th_daemon_kill(&c->n[1].d);
	} else {
		assert_int_equal(th_daemon_stop(&c->n[1].d), 0);
	}
	procreg_close(c->n[1].reg);
	c->n[1].reg = NULL;
	start_node(c, 1, NULL);
	expect_name(c->n[1].reg, "svc-restart", termed, false);
	th_expect_log(c->n[1].d.log, "1 processes' signals on a name lost kept", WAIT_MS);
	start_node(c, 2, (const int[]){ 0, 1, -1 });
	expect_name(c->n[1].reg, "svc-restart", winner, true);
	expect_name(c->n[1].reg, "svc-cleared", winner2, true);
	/* 128 + SIGTERM; -1 if it ran on (then killed). */
	assert_int_equal(th_wait_ms(termed, WAIT_MS), 128 + SIGTERM);
	snprintf(line, sizeof(line), "name 'svc-restart': pid %d told it lost it to node nodea's "
		 "pid %d, sent SIGTERM", (int)termed, (int)winner);
	th_expect_log(c->n[1].d.log, line, WAIT_MS);
	snprintf(line, sizeof(line), "name 'svc-cleared': pid %d told it lost it to node nodea's "
		 "pid %d\n", (int)spared, (int)winner2);
	th_expect_log(c->n[1].d.log, line, WAIT_MS);
	assert_int_equal(kill(spared, 0), 0);
	kill(spared, SIGKILL);
	kill(winner, SIGKILL);
	kill(winner2, SIGKILL);
	th_wait(spared);
	th_wait(winner);
	th_wait(winner2);
}

static void test_run_loser_signalled_after_crash(void **state)
{
	run_loser_restart(state, true);
}

static void test_run_loser_signalled_after_stop(void **state)
{
	run_loser_restart(state, false);
}

/* b restarted while a local process waited in line for a name node a
 * holds: the name is not handed to it at start (a's snapshot brings it
 * back), and nothing tells it it lost what it never held, nor signals
 * it. When a's holder goes, the name is the waiter's. Before, recovery
 * passed the name on at once; then a's snapshot won it back, and the
 * waiter, asking for SIGTERM on a loss, was killed. */
static void test_waiter_kept_across_restart(void **state)
{
	struct cluster *c = *state;
	static const char *const fast[] = { "--node-timeout-ms", "1000", NULL };
	PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_QUEUE | PROCREG_PIDFD,
		     .lost_signal = SIGTERM);
	pid_t holder, waiter;

	c->extra = fast;
	start_node(c, 0, NULL);
	start_node(c, 1, (const int[]){ 0, -1 });
	holder = spawn_holder(c->n[0].dir, "svc-q");
	expect_name(c->n[1].reg, "svc-q", holder, true);
	waiter = th_spawn_holder(c->n[1].dir, "waiter-own", "x");
	o.pidfd = (int)syscall(SYS_pidfd_open, waiter, 0);
	assert_true(o.pidfd >= 0);
	assert_int_equal(procreg_register_opts(c->n[1].reg, "svc-q", NULL, 0, &o), -EINPROGRESS);
	close(o.pidfd);
	th_daemon_kill(&c->n[1].d);
	procreg_close(c->n[1].reg);
	c->n[1].reg = NULL;
	start_node(c, 1, (const int[]){ 0, -1 });
	expect_name(c->n[1].reg, "svc-q", holder, true);
	/* Past the grace after which lines of names still missing are
	 * passed on: 2 x 1 s + 2 s. */
	th_msleep(4500);
	assert_int_equal(kill(waiter, 0), 0);
	expect_name(c->n[1].reg, "svc-q", holder, true);
	kill(holder, SIGKILL);
	th_wait(holder);
	expect_name(c->n[1].reg, "svc-q", waiter, false);
	assert_int_equal(th_log_count(c->n[1].d.log, "told it lost it"), 0);
	kill(waiter, SIGKILL);
	th_wait(waiter);
}

/* The earlier registration wins, and the loser's daemon removes its own. */
static void test_conflict_earlier_wins(void **state)
{
	conflict_round(*state, "contested", "held", "held", false);
}

/* What became of the stopped node PID, for a failure's message: still
 * there (its state), or ended and how, left for the teardown to reap. */
static void say_what_became(pid_t pid)
{
	siginfo_t si = { 0 };
	char path[64], line[256];
	FILE *f;

	if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) {
		print_message("node a (pid %d): ended, %s %d\n", (int)pid,
			      si.si_code == CLD_EXITED ? "exit status" : "signal", si.si_status);
		return;
	}
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "r")))
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "State:", 6))
			print_message("node a (pid %d): %s", (int)pid, line);
	fclose(f);
}

/* A node that stops answering (SIGSTOP: its sockets stay open) is found
 * silent by heartbeats and its entries go; when it answers again it
 * reconnects, resyncs, and they come back. */
static void test_silent_node(void **state)
{
	struct cluster *c = *state;
	struct logprobe lp;

	start_three(c);
	assert_int_equal(procreg_register(c->n[0].reg, "quiet", NULL, 0), 0);
	expect_name(c->n[1].reg, "quiet", getpid(), true);
	expect_name(c->n[2].reg, "quiet", getpid(), true);
	assert_int_equal(kill(c->n[0].d.pid, SIGSTOP), 0);
	expect_name(c->n[1].reg, "quiet", 0, false);
	expect_name(c->n[2].reg, "quiet", 0, false);
	lp = (struct logprobe){ c->n[1].d.log, "down (silent)", NULL };
	if (!th_until(probe_log, &lp, WAIT_MS)) {
		/* b dropped a's names for some other reason: say which, and
		 * what became of a (seen once: b read a reset from it while it
		 * was stopped), and what c saw. */
		th_daemon_dump_log(&c->n[1].d);
		th_daemon_dump_log(&c->n[2].d);
		say_what_became(c->n[0].d.pid);
		kill(c->n[0].d.pid, SIGCONT);
		fail_msg("node b: nodea's names gone, but not for its silence (b's log above)");
	}
	assert_int_equal(kill(c->n[0].d.pid, SIGCONT), 0);
	expect_name(c->n[1].reg, "quiet", getpid(), true);
	expect_name(c->n[2].reg, "quiet", getpid(), true);
	/* And changes flow again. */
	assert_int_equal(procreg_unregister(c->n[0].reg, "quiet"), 0);
	expect_name(c->n[1].reg, "quiet", 0, false);
	expect_name(c->n[2].reg, "quiet", 0, false);
}

/* Propagation figures, printed, not asserted: one name registered on a
 * until a lookup on b finds it (median and max of 200), and 2,000 names
 * registered back to back on a until the last is on b and c. */
static void test_propagation_figures(void **state)
{
	struct cluster *c = *state;

	start_three(c);
	assert_int_equal(procreg_register(c->n[0].reg, "warmup", NULL, 0), 0);
	expect_name(c->n[1].reg, "warmup", getpid(), true);
	th_propagation_figures(c->n[0].reg, c->n[1].reg, c->n[2].reg, "");
}

/* Whatever arrives on the bridge port before authentication, the daemon
 * drops the connection and goes on serving; nothing reaches the table. */
static void test_hostile_peer(void **state)
{
	struct cluster *c = *state;
	uint64_t s = 42;
	uint8_t buf[4096];
	struct logprobe lp;
	int fd;

	start_node(c, 0, NULL);
	start_node(c, 1, (const int[]){ 0, -1 });
	assert_int_equal(procreg_register(c->n[1].reg, "still-here", NULL, 0), 0);
	expect_name(c->n[0].reg, "still-here", getpid(), true);

	/* Garbage. */
	fd = th_dial(c->n[0].listen);
	for (size_t i = 0; i < sizeof(buf); i++) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		buf[i] = (uint8_t)s;
	}
	(void)!write(fd, buf, sizeof(buf));
	lp = (struct logprobe){ c->n[0].d.log, "malformed frame", NULL };
	assert_true(th_until(probe_log, &lp, WAIT_MS));
	close(fd);

	/* A frame header announcing 60 KiB before authentication. */
	fd = th_dial(c->n[0].listen);
	memset(buf, 'x', sizeof(buf));
	buf[0] = 0x00, buf[1] = 0xf0, buf[2] = 0, buf[3] = 0; /* len 61440, little-endian */
	buf[4] = 1;                                             /* HELLO */
	buf[5] = PR_BP_VERSION;
	buf[6] = buf[7] = 0;
	(void)!write(fd, buf, sizeof(buf));
	lp = (struct logprobe){ c->n[0].d.log, "oversized handshake", NULL };
	assert_true(th_until(probe_log, &lp, WAIT_MS));
	close(fd);

	/* Changes before authentication: refused. */
	fd = th_dial(c->n[0].listen);
	{
		size_t pos = 0;
		struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 1,
					 .name = "forged", .name_len = 6 };

		assert_int_equal(procreg__bp_put_change(buf, sizeof(buf), &pos, 1, 1, "evil", &e), 0);
		(void)!write(fd, buf, pos);
	}
	th_msleep(200);
	close(fd);
	assert_int_equal(procreg_lookup(c->n[0].reg, "forged", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }),
			 -ENOENT);

	/* Still replicating. */
	assert_int_equal(procreg_unregister(c->n[1].reg, "still-here"), 0);
	expect_name(c->n[0].reg, "still-here", 0, false);
	assert_true(kill(c->n[0].d.pid, 0) == 0);
}

/* A transport from a shared object: loaded and used instead of the mesh;
 * one claiming too small an interface, or none at all, is refused. */
static void test_backend_from_shared_object(void **state)
{
	struct cluster *c = *state;
	struct th_node *n = &c->n[0];
	const char *args[] = { "--node", "solo", "--cookie-file", c->cookie, "--bridge-backend",
			       BRIDGE_BACKEND_NULL, NULL };
	char out[4096];

	assert_int_equal(th_daemon_start(&n->d, n->dir, args, NULL), 0);
	n->reg = th_open(n->dir);
	assert_non_null(n->reg);
	assert_int_equal(procreg_register(n->reg, "local-only", NULL, 0), 0);
	assert_int_equal(th_cli(n->dir, out, sizeof(out), (const char *const[]){ "nodes", NULL }), 0);
	assert_non_null(strstr(out, "solo"));
	procreg_close(n->reg);
	n->reg = NULL;
	assert_int_equal(th_daemon_stop(&n->d), 0);
	assert_true(th_log_has(n->d.log, "backend null"));
	assert_true(th_log_has(n->d.log, "null backend: close after 1 frames"));

	args[5] = BRIDGE_BACKEND_NULL_SMALL;
	assert_int_not_equal(th_daemon_start(&n->d, n->dir, args, NULL), 0);
	assert_true(th_log_has(n->d.log, "interface size"));
	args[5] = "/nonexistent/backend.so";
	assert_int_not_equal(th_daemon_start(&n->d, n->dir, args, NULL), 0);
	assert_true(th_log_has(n->d.log, "--bridge-backend /nonexistent/backend.so"));
}

/* Registration stamps follow causality, not clocks: b's clock is 30 s
 * behind, yet a name b registers after it saw a's registration of it go is
 * stamped after a's. */
static void test_stamps_follow_causality(void **state)
{
	struct cluster *c = *state;
	TH_ENTRY(ea);
	TH_ENTRY(eb);
	pid_t holder;

	start_node(c, 0, NULL);
	assert_int_equal(start_node_env(c, 1, c->cookie, (const int[]){ 0, -1 },
					(const char *const[]){ "PROCREG_TEST_CLOCK_SKEW_NS=-30000000000",
							       NULL }), 0);
	holder = spawn_holder(c->n[0].dir, "baton");
	expect_name(c->n[1].reg, "baton", holder, true);
	assert_int_equal(procreg_lookup(c->n[0].reg, "baton", &ea), 0);
	kill(holder, SIGKILL);
	th_wait(holder);
	expect_name(c->n[1].reg, "baton", 0, false);
	assert_int_equal(procreg_register(c->n[1].reg, "baton", NULL, 0), 0);
	assert_int_equal(procreg_lookup(c->n[1].reg, "baton", &eb), 0);
	assert_true(eb.registered_ns > ea.registered_ns);
	expect_name(c->n[0].reg, "baton", getpid(), true);
}

/* With a resolver loaded on every node, its rule decides: the later
 * registration, marked "primary", keeps the name on all three. */
static void test_custom_resolver(void **state)
{
	struct cluster *c = *state;

	c->resolver = RESOLVER_PRIMARY;
	conflict_round(c, "leader", "standby", "primary", true);

	/* A resolver that cannot be loaded: the daemon refuses to start. */
	c->resolver = "/nonexistent/resolver.so";
	assert_int_not_equal(start_node_cookie(c, 3, c->cookie, NULL), 0);
	assert_true(th_log_has(c->n[3].d.log, "--resolver /nonexistent/resolver.so"));
}

/* A hand-made node "fake" speaking the protocol over a socket. */
struct fake {
	struct th_peer p;
	uint64_t seq;
};

static void fake_send(struct fake *k, const uint8_t *buf, size_t len)
{
	th_peer_send(&k->p, buf, len);
}

static void fake_change_inc(struct fake *k, uint64_t inc, uint64_t seq, const char *name)
{
	uint8_t buf[512];

	fake_send(k, buf, th_fake_change(buf, sizeof(buf), inc, seq, name));
}

static void fake_change(struct fake *k, uint64_t seq, const char *name)
{
	fake_change_inc(k, 7, seq, name);
}

/* Connect to node N as "fake", incarnation INC: handshake, and the
 * daemon's snapshot read. */
static void fake_connect(struct fake *k, const struct th_node *n, uint64_t inc)
{
	struct pr_bp_frame f;

	memset(k, 0, sizeof(*k));
	assert_int_equal(th_peer_connect(&k->p, n->listen, "fake", inc, "a-test-cookie-0123456789"),
			 0);
	do
		th_peer_expect(&k->p, PR_BP_SNAP, &f);
	while (!(f.flags & PR_BP_SNAP_LAST));
}

static void fake_close(struct fake *k)
{
	th_peer_close(&k->p);
}

/* The fake node's snapshot, as of change 0: NAMES (NULL-terminated),
 * each stamped STAMP. */
static void fake_snapshot(struct fake *k, uint64_t inc, uint64_t stamp, const char *const *names)
{
	uint8_t buf[4096];

	fake_send(k, buf, th_fake_snap(buf, sizeof(buf), inc, 0, stamp, names, true));
}

/* One part of the fake node's snapshot, as of change 0: NAME, and the
 * last part if LAST. */
static void fake_snap_part(struct fake *k, uint64_t inc, uint32_t part, const char *name, bool last)
{
	uint8_t buf[1024];
	size_t len = th_fake_snap(buf, sizeof(buf), inc, part, procreg__now_ns(),
				  (const char *const[]){ name, NULL }, last);

	fake_send(k, buf, len);
}

static void fake_heartbeat(struct fake *k, uint64_t inc, uint64_t seq)
{
	uint8_t buf[64];
	size_t pos = 0;

	assert_int_equal(procreg__bp_put_heartbeat(buf, sizeof(buf), &pos, inc, seq), 0);
	fake_send(k, buf, pos);
}

/* The daemon refused the fake's frame (log line NEEDLE) and dropped the
 * connection: NAME, which came in an earlier part of the snapshot, goes
 * once the grace for a reconnect is over. */
static void expect_refused(struct cluster *c, struct fake *k, const char *needle, const char *name)
{
	struct logprobe lp = { c->n[0].d.log, needle, NULL };

	if (!th_until(probe_log, &lp, WAIT_MS))
		fail_msg("no '%s' in the log", needle);
	expect_name(c->n[0].reg, name, 0, false);
	fake_close(k);
}

/* The fake keeps up, as a node that is up does: a heartbeat (INC, as of
 * change SEQ) every 100 ms, until the daemon logs NEEDLE once more than
 * it had. Sent without a check: the daemon may drop the connection
 * before the last one goes. */
static void heartbeats_until(struct cluster *c, struct fake *k, uint64_t inc, uint64_t seq,
			     const char *needle)
{
	static uint8_t rec[64 + PR_BS_OVERHEAD];
	int before = th_log_count(c->n[0].d.log, needle);

	for (int i = 0; i < WAIT_MS / 100 && th_log_count(c->n[0].d.log, needle) == before; i++) {
		uint8_t buf[64];
		size_t pos = 0;

		assert_int_equal(procreg__bp_put_heartbeat(buf, sizeof(buf), &pos, inc, seq), 0);
		assert_int_equal(procreg__bs_seal(k->p.bs, buf, pos, rec), 0);
		(void)!send(k->p.fd, rec, pos + PR_BS_OVERHEAD, MSG_NOSIGNAL);
		th_msleep(100);
	}
	if (th_log_count(c->n[0].d.log, needle) == before)
		fail_msg("no '%s' in the log", needle);
}

/* Snapshot parts are applied in order only, as changes are, whatever
 * order they come in: one that comes early waits for those before it. A
 * part missing (lost on the way: the parts after it held, or the last
 * one, the heartbeats after it counting nothing) for a while, or a part 0
 * again in the middle of a snapshot, is refused, the connection drops,
 * and what the parts so far brought goes with the node. */
static void test_snapshot_parts(void **state)
{
	struct cluster *c = *state;
	static struct fake k;
	
	start_node(c, 0, NULL);

	/* Part 1 lost: part 2 is held, never applied, and the node is
	 * refused while its heartbeats come. */
	fake_connect(&k, &c->n[0], 7);
	fake_snap_part(&k, 7, 0, "part-zero", false);
	expect_name(c->n[0].reg, "part-zero", 99, true);
	fake_snap_part(&k, 7, 2, "part-two", true);
	heartbeats_until(c, &k, 7, 0, "node fake: snapshot incomplete, part 1 missing");
	expect_refused(c, &k, "node fake: snapshot incomplete, part 1 missing", "part-zero");
	assert_int_equal(procreg_lookup(c->n[0].reg, "part-two", NULL), -ENOENT);

	/* Part 0 again, in the middle of a snapshot. */
	fake_connect(&k, &c->n[0], 8);
	fake_snap_part(&k, 8, 0, "again-zero", false);
	expect_name(c->n[0].reg, "again-zero", 99, true);
	fake_snap_part(&k, 8, 0, "again-zero-2", true);
	expect_refused(c, &k, "node fake: snapshot part 0 out of order (expected 1)", "again-zero");
	assert_int_equal(procreg_lookup(c->n[0].reg, "again-zero-2", NULL), -ENOENT);

	/* The last part lost: the heartbeats after it. */
	fake_connect(&k, &c->n[0], 9);
	fake_snap_part(&k, 9, 0, "no-last", false);
	expect_name(c->n[0].reg, "no-last", 99, true);
	heartbeats_until(c, &k, 9, 0, "node fake: snapshot incomplete, part 1 missing");
	expect_refused(c, &k, "node fake: snapshot incomplete, part 1 missing", "no-last");

	/* Out of order: part 2 (the last), a change, part 0, a heartbeat,
	 * then part 1. Nothing is applied before part 0; then the rest in
	 * order, the change after the whole snapshot. */
	fake_connect(&k, &c->n[0], 10);
	fake_snap_part(&k, 10, 2, "whole-2", true);
	fake_change_inc(&k, 10, 1, "whole-change");
	fake_snap_part(&k, 10, 0, "whole-0", false);
	expect_name(c->n[0].reg, "whole-0", 99, true);
	assert_int_equal(procreg_lookup(c->n[0].reg, "whole-2", NULL), -ENOENT);
	assert_int_equal(procreg_lookup(c->n[0].reg, "whole-change", NULL), -ENOENT);
	fake_heartbeat(&k, 10, 1);
	fake_snap_part(&k, 10, 1, "whole-1", false);
	expect_name(c->n[0].reg, "whole-change", 99, true);
	expect_name(c->n[0].reg, "whole-1", 99, true);
	expect_name(c->n[0].reg, "whole-2", 99, true);
	fake_change_inc(&k, 10, 2, "whole-change-2");
	expect_name(c->n[0].reg, "whole-change-2", 99, true);
	/* No refusal but the three above. */
	assert_int_equal(th_log_count(c->n[0].d.log, ": resyncing"), 3);
	fake_close(&k);
}

/* Changes carry (origin, incarnation, sequence number): one already
 * applied is ignored; one that comes early waits for those before it;
 * one after a gap that is not filled drops the connection, and with it
 * (once the grace for a reconnect is over) the node's entries, until a
 * fresh sync. */
static void test_sequence_numbers(void **state)
{
	struct cluster *c = *state;
	static struct fake k;

	start_node(c, 0, NULL);
	fake_connect(&k, &c->n[0], 7);
	/* Our snapshot, as of change 0, then changes 1 and 2 with 1 again
	 * between them. */
	fake_snapshot(&k, 7, procreg__now_ns(), (const char *const[]){ "fake-x", NULL });
	expect_name(c->n[0].reg, "fake-x", 99, true);
	fake_change(&k, 1, "fake-y");
	fake_change(&k, 1, "fake-dup");
	fake_change(&k, 2, "fake-z");
	expect_name(c->n[0].reg, "fake-z", 99, true);
	expect_name(c->n[0].reg, "fake-y", 99, true);
	assert_int_equal(procreg_lookup(c->n[0].reg, "fake-dup", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }),
			 -ENOENT);

	/* 4 before 3: held, then both, in order. */
	fake_change(&k, 4, "fake-4");
	fake_change(&k, 4, "fake-4-again");
	fake_change(&k, 3, "fake-3");
	expect_name(c->n[0].reg, "fake-4", 99, true);
	expect_name(c->n[0].reg, "fake-3", 99, true);
	assert_int_equal(procreg_lookup(c->n[0].reg, "fake-4-again", NULL), -ENOENT);

	/* A gap: 6 after 4, 5 never comes. */
	fake_change(&k, 6, "fake-gap");
	heartbeats_until(c, &k, 7, 6, "node fake: change 5 missing");
	expect_name(c->n[0].reg, "fake-x", 0, false);
	expect_name(c->n[0].reg, "fake-z", 0, false);
	assert_int_equal(procreg_lookup(c->n[0].reg, "fake-gap", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }),
			 -ENOENT);
	assert_int_equal(th_log_count(c->n[0].d.log, ": resyncing"), 1);
	fake_close(&k);
}

/* A node whose TCP connection drops and comes back, same incarnation,
 * within the grace (made long here: no delay can matter): its names stay
 * in the table throughout, and its new snapshot replaces them by
 * difference. Back as another incarnation, the old names go at once. */
static void test_reconnect_same_incarnation(void **state)
{
	struct cluster *c = *state;
	static struct fake k;
		const char *const env[] = { "PROCREG_TEST_LINGER_MS=600000", NULL };
	uint64_t stamp = procreg__now_ns(), cursor;
	PROCREG_OPTS(procreg_event, ev);
	struct logprobe lp;
	int gone = 0, other = 0;

	assert_int_equal(start_node_env(c, 0, c->cookie, NULL, env), 0);
	fake_connect(&k, &c->n[0], 7);
	fake_snapshot(&k, 7, stamp, (const char *const[]){ "fake-x", "fake-y", NULL });
	expect_name(c->n[0].reg, "fake-x", 99, true);
	expect_name(c->n[0].reg, "fake-y", 99, true);
	cursor = procreg_feed_head(c->n[0].reg);

	fake_close(&k);
	lp = (struct logprobe){ c->n[0].d.log, "bridge: node fake: down", NULL };
	assert_true(th_until(probe_log, &lp, WAIT_MS));
	assert_int_equal(procreg_lookup(c->n[0].reg, "fake-x", NULL), 0);

	/* Back, and fake-y went meanwhile. */
	fake_connect(&k, &c->n[0], 7);
	fake_snapshot(&k, 7, stamp, (const char *const[]){ "fake-x", NULL });
	expect_name(c->n[0].reg, "fake-y", 0, false);
	assert_int_equal(procreg_lookup(c->n[0].reg, "fake-x", NULL), 0);
	th_feed_settle(c->n[0].reg);
	while (procreg_next_event(c->n[0].reg, &cursor, &ev, 0) == 0) {
		if (ev.type == PROCREG_EV_UNREGISTERED && !strcmp(ev.name, "fake-y"))
			gone++;
		else
			other++;
	}
	assert_int_equal(gone, 1);
	assert_int_equal(other, 0); /* no node-down, nothing for fake-x */
	fake_close(&k);
	assert_true(th_until(probe_log, &lp, WAIT_MS));

	/* A restart: another incarnation. What the old one held goes. */
	fake_connect(&k, &c->n[0], 8);
	expect_name(c->n[0].reg, "fake-x", 0, false);
	gone += th_feed_count(c->n[0].reg, &cursor, PROCREG_EV_NODE_DOWN, "fake-x");
	assert_int_equal(gone, 2);
	fake_close(&k);
}

/* procreg nodes, and the node's name in procreg get and stats. */
static void test_cli_nodes(void **state)
{
	struct cluster *c = *state;
	struct th_cliprobe p = { 0 };
	char out[4096], want[3][256];

	start_three(c);
	p.dir = c->n[0].dir;
	p.args = (const char *const[]){ "nodes", "--json", NULL };
	p.needles[0] = "\"node\":\"nodea\"";
	p.needles[1] = "\"name\":\"nodeb\"";
	p.needles[2] = "\"name\":\"nodec\"";
	if (!th_until(th_probe_cli, &p, WAIT_MS))
		fail_msg("procreg nodes --json: %s", p.out);
	p.args = (const char *const[]){ "nodes", NULL };
	p.needles[0] = "nodea";
	p.needles[1] = "nodeb";
	p.needles[2] = "nodec";
	assert_true(th_probe_cli(&p));

	assert_int_equal(procreg_register(c->n[1].reg, "on-b", NULL, 0), 0);
	expect_name(c->n[0].reg, "on-b", getpid(), true);
	assert_int_equal(th_cli(c->n[0].dir, out, sizeof(out), (const char *const[]){ "get", "on-b", NULL }), 0);
	assert_non_null(strstr(out, "(nodeb)"));
	assert_int_equal(th_cli(c->n[1].dir, out, sizeof(out), (const char *const[]){ "get", "on-b", NULL }), 0);
	assert_non_null(strstr(out, "node  0 (nodeb, local)"));
	/* A table holding remote entries is sound to procreg check. */
	assert_int_equal(procreg_join(c->n[2].reg, "mixed", NULL, 0), 0);
	assert_int_equal(procreg_join(c->n[0].reg, "mixed", NULL, 0), 0);
	expect_members(c->n[0].reg, "mixed", 2);
	if (th_cli(c->n[0].dir, out, sizeof(out), (const char *const[]){ "check", NULL }) != 0)
		fail_msg("procreg check: %s", out);
	p.dir = c->n[1].dir;
	p.args = (const char *const[]){ "stats", NULL };
	p.needles[0] = "bridge_node        nodeb";
	p.needles[1] = "bridge_nodes_up    2";
	p.needles[2] = "bridge_changes_out 1";
	if (!th_until(th_probe_cli, &p, WAIT_MS))
		fail_msg("procreg stats: %s", p.out);
	p.args = (const char *const[]){ "stats", "--format", "prometheus", NULL };
	p.needles[0] = "procreg_bridge_nodes_up{scope=\"default\",node=\"nodeb\"} 2";
	p.needles[1] = "procreg_bridge_changes_out_total{scope=\"default\",node=\"nodeb\"} 1";
	p.needles[2] = "# TYPE procreg_bridge_conflicts_total counter";
	if (!th_until(th_probe_cli, &p, WAIT_MS))
		fail_msg("procreg stats --format prometheus: %s", p.out);
	/* Each node it is connected to, a series of its own: a, its --peer,
	 * by the address it was given; c, which a told it of, by the
	 * address c advertises (its --listen). */
	snprintf(want[0], sizeof(want[0]), "\nprocreg_bridge_peer_up{scope=\"default\","
		 "node=\"nodeb\",peer=\"nodea\",addr=\"%s\"} 1\n", c->n[0].listen);
	snprintf(want[1], sizeof(want[1]), "\nprocreg_bridge_peer_up{scope=\"default\","
		 "node=\"nodeb\",peer=\"nodec\",addr=\"%s\"} 1\n", c->n[2].listen);
	snprintf(want[2], sizeof(want[2]), "\nprocreg_bridge_peer_up_since_seconds{scope="
		 "\"default\",node=\"nodeb\",peer=\"nodea\",addr=\"%s\"} 1", c->n[0].listen);
	for (int i = 0; i < 3; i++)
		p.needles[i] = want[i];
	if (!th_until(th_probe_cli, &p, WAIT_MS))
		fail_msg("procreg stats --format prometheus: %s", p.out);

	/* A daemon without --node does not replicate: exit 1. */
	th_daemon_kill(&c->n[0].d);
	procreg_close(c->n[0].reg);
	c->n[0].reg = NULL;
	unlink(strcat(strcpy(out, c->n[0].dir), "/procreg.default.nodes"));
	assert_int_equal(th_daemon_start(&c->n[0].d, c->n[0].dir, NULL, NULL), 0);
	assert_int_equal(th_cli(c->n[0].dir, out, sizeof(out), (const char *const[]){ "nodes", NULL }), 1);
}

/* procreg_bridge_peer_up of node a for its --peer ADDR, the node there
 * known as NODE ("" before any), is UP: within WAIT_MS, or the test
 * fails. */
static void expect_peer_up(struct cluster *c, const char *node, const char *addr, int up)
{
	struct th_cliprobe p = { .dir = c->n[0].dir,
				 .args = (const char *const[]){ "stats", "--format", "prometheus",
								NULL } };
	char want[256];

	snprintf(want, sizeof(want), "\nprocreg_bridge_peer_up{scope=\"default\",node=\"nodea\","
		 "peer=\"%s\",addr=\"%s\"} %d\n", node, addr, up);
	p.needles[0] = want;
	if (!th_until(th_probe_cli, &p, WAIT_MS))
		fail_msg("procreg stats --format prometheus: no '%s':\n%s", want + 1, p.out);
}

/* Every --peer has its procreg_bridge_peer_up series whether connected or
 * not, so that an operator can alert on it: 0 for a peer that is not
 * listening (never reached: no node name yet), 1 once it is up, 0 again
 * when it goes down, by the name it had. */
static void test_peer_series_when_down(void **state)
{
	struct cluster *c = *state;
	struct th_node *b = &c->n[1];

	snprintf(b->listen, sizeof(b->listen), "127.0.0.1:%d", th_free_port());
	start_node(c, 0, (const int[]){ 1, -1 });
	expect_peer_up(c, "", b->listen, 0);
	/* b where a's --peer points. */
	assert_int_equal(th_daemon_start(&b->d, b->dir,
					 (const char *const[]){ "--node", b->name, "--cookie-file",
								c->cookie, "--listen", b->listen,
								NULL }, NULL), 0);
	expect_peer_up(c, "nodeb", b->listen, 1);
	assert_int_equal(th_daemon_stop(&b->d), 0);
	expect_peer_up(c, "nodeb", b->listen, 0);
}

/* Levels: at the default level a daemon's log carries another node
 * coming up and going down (notice), and not the routine steps of a
 * session (debug), which --verbose adds. */
static void test_log_levels(void **state)
{
	struct cluster *c = *state;
	const char *a_log = c->n[0].d.log;

	start_node(c, 0, NULL);
	c->extra = (const char *const[]){ "--verbose", NULL };
	start_node(c, 1, (const int[]){ 0, -1 });
	c->extra = NULL;
	/* b's change comes after its snapshot: a has applied both. */
	assert_int_equal(procreg_register(c->n[1].reg, "on-b", NULL, 0), 0);
	expect_name(c->n[0].reg, "on-b", getpid(), true);
	th_expect_log(c->n[1].d.log, "debug: bridge: node nodea: snapshot applied", WAIT_MS);
	th_expect_log(a_log, "notice: bridge: node nodeb: up (", WAIT_MS);
	procreg_close(c->n[1].reg);
	c->n[1].reg = NULL;
	assert_int_equal(th_daemon_stop(&c->n[1].d), 0);
	th_expect_log(a_log, "bridge: node nodeb: down (", WAIT_MS);
	th_expect_log(a_log, "notice: bridge: node nodeb: 1 entries removed", WAIT_MS);
	if (th_log_count(a_log, "snapshot applied") || th_log_count(a_log, "debug: ")) {
		char *log = th_read_file(a_log, true);

		fail_msg("debug lines in the log of a daemon without --verbose:\n%s", log);
	}
}

/* A --peer list shared by every node names each node itself too: a node
 * that dials itself is refused by itself, says so once, and does not dial
 * that address again. */
static void test_peer_is_self(void **state)
{
	struct cluster *c = *state;
	struct th_node *n = &c->n[0];
	char listen[32];
	int err = -1;

	for (int attempt = 0; attempt < 5 && err; attempt++) {
		snprintf(listen, sizeof(listen), "127.0.0.1:%d", th_free_port());
		err = th_daemon_start(&n->d, n->dir,
				      (const char *const[]){ "--node", n->name, "--cookie-file",
							     c->cookie, "--listen", listen, "--peer",
							     listen, NULL }, NULL);
	}
	assert_int_equal(err, 0);
	th_expect_log(n->d.log, "dropped (it is this node)", WAIT_MS);
	th_expect_log(n->d.log, "it has this node's name", WAIT_MS);
	/* Dials back off to 2 s at most: in 3 s a second try would show. */
	th_msleep(3000);
	assert_int_equal(th_log_count(n->d.log, "dropped (it is this node)"), 1);
}

/* ---- peers given by host name ------------------------------------------ */

/* "localhost:PORT" for node I's listening port. */
static void name_addr(const struct cluster *c, int i, char *out, size_t cap)
{
	snprintf(out, cap, "localhost%s", strrchr(c->n[i].listen, ':'));
}

struct fileprobe {
	const char *path;
	const char *needle;     /* NULL: the file exists */
};

static int probe_file(void *arg)
{
	struct fileprobe *f = arg;

	return f->needle ? th_log_has(f->path, f->needle) : access(f->path, F_OK) == 0;
}

static void expect_file(const char *path, const char *needle, int ms)
{
	struct fileprobe f = { path, needle };

	if (!th_until(probe_file, &f, ms))
		fail_msg("%s: expected %s%s%s", path, needle ? "'" : "", needle ? needle : "to exist",
			 needle ? "' in it" : "");
}

/* A peer given as localhost:PORT: resolved off the event loop, dialed
 * when the answer comes (whichever of ::1 and 127.0.0.1 it lists first:
 * the node listens on the second only, maybe). */
static void test_peer_by_name(void **state)
{
	struct cluster *c = *state;
	char peer[64];

	start_node(c, 0, NULL);
	name_addr(c, 0, peer, sizeof(peer));
	c->extra = (const char *const[]){ "--peer", peer, NULL };
	start_node(c, 1, NULL);
	c->extra = NULL;
	assert_int_equal(procreg_register(c->n[0].reg, "on-a", NULL, 0), 0);
	expect_name(c->n[1].reg, "on-a", getpid(), true);
	assert_int_equal(procreg_register(c->n[1].reg, "on-b", NULL, 0), 0);
	expect_name(c->n[0].reg, "on-b", getpid(), true);
	assert_true(th_log_has(c->n[1].d.log, "bridge: node nodea: up"));
	assert_false(th_log_has(c->n[1].d.log, "cannot resolve"));
}

/* A peer whose name does not resolve: logged, retried, and meanwhile the
 * node serves and replicates with the others. */
static void test_peer_unresolvable(void **state)
{
	struct cluster *c = *state;

	c->extra = (const char *const[]){ "--peer", "nonexistent.invalid:1", NULL };
	start_node(c, 0, NULL);
	c->extra = NULL;
	start_node(c, 1, (const int[]){ 0, -1 });
	/* Generous: without a DNS server, the answer can take a while. */
	expect_file(c->n[0].d.log, "bridge: peer nonexistent.invalid:1: cannot resolve", 60000);
	assert_int_equal(procreg_register(c->n[0].reg, "on-a", NULL, 0), 0);
	expect_name(c->n[1].reg, "on-a", getpid(), true);
	assert_int_equal(procreg_register(c->n[1].reg, "on-b", NULL, 0), 0);
	expect_name(c->n[0].reg, "on-b", getpid(), true);
	assert_int_equal(procreg_sync(c->n[0].reg), 0);
}

/* A look-up that never returns (getaddrinfo_stall.so, preloaded, plays a
 * DNS server that does not answer): while it hangs, the node replicates,
 * takes registrations, and at SIGTERM stops cleanly, exit 0 (teardown). */
static void test_peer_resolution_hangs(void **state)
{
	struct cluster *c = *state;
	char mark[600], preload[600], mark_env[640], asan[1024];
	const char *asan_opts = getenv("ASAN_OPTIONS");

	snprintf(mark, sizeof(mark), "%s/stalled", c->base);
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", GETADDRINFO_STALL);
	snprintf(mark_env, sizeof(mark_env), "PROCREG_TEST_STALL_MARK=%s", mark);
	/* Under AddressSanitizer, its runtime must come first; the shim
	 * preloaded ahead of it is harmless. */
	snprintf(asan, sizeof(asan), "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
		 asan_opts ? asan_opts : "", asan_opts && asan_opts[0] ? ":" : "");
	c->extra = (const char *const[]){ "--peer", "peer.stall.test:1", NULL };
	c->n[0].may_hang = true;
	assert_int_equal(start_node_env(c, 0, c->cookie, NULL,
					(const char *const[]){ preload, mark_env, asan, NULL }), 0);
	c->extra = NULL;
	expect_file(mark, NULL, WAIT_MS);
	/* The look-up is under way, for good. Node b dials a: a accepts,
	 * takes b's snapshot and changes, sends its own. */
	start_node(c, 1, (const int[]){ 0, -1 });
	assert_int_equal(procreg_register(c->n[1].reg, "on-b", NULL, 0), 0);
	expect_name(c->n[0].reg, "on-b", getpid(), true);
	assert_int_equal(procreg_register(c->n[0].reg, "on-a", NULL, 0), 0);
	expect_name(c->n[1].reg, "on-a", getpid(), true);
	assert_int_equal(procreg_sync(c->n[0].reg), 0);
	assert_false(th_log_has(c->n[0].d.log, "cannot resolve"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_visible_everywhere, setup, teardown),
		cmocka_unit_test_setup_teardown(test_death_propagates, setup, teardown),
		cmocka_unit_test_setup_teardown(test_killed_node_entries_vanish, setup, teardown),
		cmocka_unit_test_setup_teardown(test_late_joiner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_cookie_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cookie_file_mode, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conflict_earlier_wins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conflict_loser_told, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conflict_in_burst, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_loser_signalled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_loser_signalled_after_crash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_loser_signalled_after_stop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_waiter_kept_across_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_custom_resolver, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cli_nodes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_series_when_down, setup, teardown),
		cmocka_unit_test_setup_teardown(test_log_levels, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_is_self, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_by_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_unresolvable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_resolution_hangs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_silent_node, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_peer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sequence_numbers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_parts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reconnect_same_incarnation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stamps_follow_causality, setup, teardown),
		cmocka_unit_test_setup_teardown(test_backend_from_shared_object, setup, teardown),
		cmocka_unit_test_setup_teardown(test_propagation_figures, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flush_bytes_zero, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flush_bytes_one, setup, teardown),
	};
	/* TEST_FILTER=test_run_loser_signalled (a glob) runs those tests. */
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
