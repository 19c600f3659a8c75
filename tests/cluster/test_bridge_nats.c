/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_bridge_nats.c - replication over NATS (procregd --bridge nats)
 * between real daemons and a real nats-server on loopback, with user and
 * password (a token and an NKey in tests of their own, with a wrong
 * credential refused). The bridge's scenarios (propagation, death, a
 * killed node, a late joiner, conflicts, a lost snapshot part) plus what
 * is NATS's own: a publisher on the server without the cookie, a replayed
 * message, a server restart, and a daemon cut off from the server (a
 * proxy in between, closed and reopened); TLS with a CA, server and client
 * certificates the test makes (with the openssl command); a list of
 * servers, the first dead, and two servers in a cluster with a failover
 * from one to the other. Checks behaviour, not timing: every wait is a
 * bounded poll.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "internal.h"
#include "bridge_envelope.h"
#include "bridge_proto.h"

#include <nats/nats.h>
#include <openssl/evp.h>

#define NODES_MAX 4
#define WAIT_MS 15000
#define NATS_USER "procreg"
#define NATS_PASS "s3cret-nats-pass"
#define NATS_TOKEN "a-nats-token-0123456789"
#define COOKIE "a-test-cookie-0123456789"

struct cluster {
	char *base;
	char cookie[512];
	char nats_log[600];
	int nats_port;
	pid_t nats_pid;
	int proxy_port;             /* 0: no proxy */
	pid_t proxy_pid;
	int proxy_ctl;
	const char *node_timeout_ms;  /* --node-timeout-ms; NULL: 1000 */
	/* How the server authenticates clients (nats-server arguments) and
	 * how the daemons prove who they are (procregd arguments); NULL: user
	 * and password, both. */
	const char *const *server_auth;
	const char *const *daemon_auth;
	const char *url;            /* --nats-url of nodes started; NULL: the server's */
	pid_t extra_pid;            /* a second server, in a cluster with the first */
	struct th_node n[NODES_MAX];
};

static int dial(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

#define expect_log(path, needle) th_expect_log(path, needle, WAIT_MS)

/* ---- nats-server -------------------------------------------------------- */

static int port_open(void *arg)
{
	int fd = dial(*(int *)arg);

	if (fd < 0)
		return 0;
	close(fd);
	return 1;
}

/* nats-server on loopback at PORT with ARGS, its output to LOG: *PID once
 * it accepts connections (0), or 0 in *PID (-1). */
static int server_spawn(const char *log, int port, const char *const *args, pid_t *pid)
{
	char ps[16];
	int st;

	if (access(NATS_SERVER_PATH, X_OK) != 0)
		fail_msg("nats-server not found at '%s': apt-get install nats-server", NATS_SERVER_PATH);
	snprintf(ps, sizeof(ps), "%d", port);
	*pid = fork();
	assert_true(*pid >= 0);
	if (*pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		const char *argv[32] = { "nats-server", "-a", "127.0.0.1", "-p", ps };
		int n = 5;

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		/* A test that dies does not leave a server behind. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int i = 0; args[i] && n < 31; i++)
			argv[n++] = args[i];
		argv[n] = NULL;
		execv(NATS_SERVER_PATH, (char **)argv);
		_exit(127);
	}
	for (int i = 0; i < WAIT_MS; i += 10) {
		if (port_open(&port))
			return 0;
		if (waitpid(*pid, &st, WNOHANG) == *pid) {
			*pid = 0;
			return -1;
		}
		th_msleep(10);
	}
	return -1;
}

/* The cluster's server on loopback at c->nats_port, with a user and
 * password unless c->server_auth says otherwise; 0 once it accepts
 * connections. */
static int nats_start(struct cluster *c)
{
	static const char *const user_pass[] = { "--user", NATS_USER, "--pass", NATS_PASS, NULL };

	return server_spawn(c->nats_log, c->nats_port, c->server_auth ? c->server_auth : user_pass,
			    &c->nats_pid);
}

static void nats_kill(struct cluster *c)
{
	if (!c->nats_pid)
		return;
	kill(c->nats_pid, SIGKILL);
	waitpid(c->nats_pid, NULL, 0);
	c->nats_pid = 0;
}

/* ---- a proxy between one daemon and the server, to cut it off ---------- */

/* The child: forward every connection accepted on LFD to the server; on
 * 'c' from CTL close them all and refuse new ones, on 'h' accept again;
 * answer each command once it is done. Exits when CTL closes. */
static void proxy_run(int lfd, int ctl, int target)
{
	struct pair {
		int a, b;
	} p[32];
	int np = 0;
	bool cut = false;
	char buf[65536];

	for (;;) {
		struct pollfd pf[2 + 64];
		int n = 0;

		pf[n++] = (struct pollfd){ .fd = ctl, .events = POLLIN };
		pf[n++] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (int i = 0; i < np; i++) {
			pf[n++] = (struct pollfd){ .fd = p[i].a, .events = POLLIN };
			pf[n++] = (struct pollfd){ .fd = p[i].b, .events = POLLIN };
		}
		if (poll(pf, (nfds_t)n, -1) < 0)
			continue;
		if (pf[0].revents) {
			char cmd;

			if (read(ctl, &cmd, 1) != 1)
				_exit(0);
			if (cmd == 'c') {
				for (int i = 0; i < np; i++) {
					close(p[i].a);
					close(p[i].b);
				}
				np = 0;
				cut = true;
			} else {
				cut = false;
			}
			(void)!write(ctl, &cmd, 1);
			continue;
		}
		for (int i = 0; i < np; i++) {
			for (int side = 0; side < 2; side++) {
				short rev = pf[2 + 2 * i + side].revents;
				int from = side ? p[i].b : p[i].a, to = side ? p[i].a : p[i].b;
				ssize_t r;

				if (!rev)
					continue;
				r = read(from, buf, sizeof(buf));
				if (r <= 0 || write(to, buf, (size_t)r) != r) {
					close(p[i].a);
					close(p[i].b);
					p[i] = p[--np];
					goto next_poll; /* pf no longer matches p */
				}
			}
		}
		/* Last: a pair added here has no entry in this round's pf. */
		if (pf[1].revents) {
			int a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), b;

			if (a >= 0) {
				if (cut || np == 32 || (b = dial(target)) < 0)
					close(a);
				else
					p[np++] = (struct pair){ a, b };
			}
		}
next_poll:;
	}
}

static void proxy_start(struct cluster *c)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), sv[2];

	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 16), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	c->proxy_port = ntohs(sa.sin_port);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	c->proxy_pid = fork();
	assert_true(c->proxy_pid >= 0);
	if (c->proxy_pid == 0) {
		close(sv[0]);
		proxy_run(lfd, sv[1], c->nats_port);
	}
	close(lfd);
	close(sv[1]);
	c->proxy_ctl = sv[0];
}

static void proxy_cmd(struct cluster *c, char cmd)
{
	char ack;

	assert_int_equal(write(c->proxy_ctl, &cmd, 1), 1);
	assert_int_equal(read(c->proxy_ctl, &ack, 1), 1);
	assert_int_equal(ack, cmd);
}

/* ---- the cluster -------------------------------------------------------- */

static int setup(void **state)
{
	struct cluster *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	c->base = th_nodes_make(c->n, NODES_MAX, "node", c->cookie, sizeof(c->cookie), COOKIE);
	snprintf(c->nats_log, sizeof(c->nats_log), "%s/nats-server.log", c->base);
	/* The third node's name has a '.', a separator in NATS subjects. */
	snprintf(c->n[2].name, sizeof(c->n[2].name), "node.c");
	for (int attempt = 0; attempt < 5; attempt++) {
		c->nats_port = th_free_port();
		if (nats_start(c) == 0)
			break;
	}
	if (!c->nats_pid)
		fail_msg("nats-server did not start; its log: %s", c->nats_log);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct cluster *c = *state;
	/* Every daemon still running stops cleanly (under the sanitizers: no
	 * error, no leak). */
	int bad = th_nodes_stop(c->n, NODES_MAX);

	if (c->proxy_pid) {
		close(c->proxy_ctl);
		waitpid(c->proxy_pid, NULL, 0);
	}
	nats_kill(c);
	if (c->extra_pid) {
		kill(c->extra_pid, SIGKILL);
		waitpid(c->extra_pid, NULL, 0);
	}
	th_rmrf(c->base);
	free(c->base);
	free(c);
	return bad;
}

/* Start node I on the server (through the proxy if VIA_PROXY), with
 * COOKIE and short heartbeats; its log shown if it does not start and
 * DUMP. */
static int start_node_dump(struct cluster *c, int i, const char *cookie, bool via_proxy, bool dump)
{
	static const char *const user_pass[] = { "--nats-user", NATS_USER, "--nats-password",
						  NATS_PASS, NULL };
	const char *const *auth = c->daemon_auth ? c->daemon_auth : user_pass;
	struct th_node *n = &c->n[i];
	char url[256];
	const char *args[32] = { "--node", n->name, "--cookie-file", cookie, "--bridge", "nats",
				 "--nats-url", url, "--heartbeat-ms", "100", "--node-timeout-ms",
				 c->node_timeout_ms ? c->node_timeout_ms : "1000" };
	int k = 12;

	for (int a = 0; auth[a] && k < 31; a++)
		args[k++] = auth[a];
	args[k] = NULL;
	if (c->url)
		snprintf(url, sizeof(url), "%s", c->url);
	else
		snprintf(url, sizeof(url), "nats://127.0.0.1:%d",
			 via_proxy ? c->proxy_port : c->nats_port);
	if (th_daemon_start(&n->d, n->dir, args, NULL) != 0) {
		if (dump)
			th_daemon_dump_log(&n->d);
		return -1;
	}
	n->reg = th_open(n->dir);
	return n->reg ? 0 : -1;
}

static int start_node_cookie(struct cluster *c, int i, const char *cookie, bool via_proxy)
{
	return start_node_dump(c, i, cookie, via_proxy, true);
}

static void start_node(struct cluster *c, int i)
{
	assert_int_equal(start_node_cookie(c, i, c->cookie, false), 0);
}

static void start_three(struct cluster *c)
{
	for (int i = 0; i < 3; i++)
		start_node(c, i);
}

#define expect_name(reg, name, pid, remote) th_expect_name(reg, name, pid, remote, WAIT_MS)
#define expect_members(reg, group, want) th_expect_members(reg, group, want, WAIT_MS)
#define expect_meta(reg, name, meta, len) th_expect_meta(reg, name, meta, len, WAIT_MS)
/* A child that registers NAME on a node and holds it until killed. */
#define spawn_holder(dir, name) th_spawn_holder(dir, name, "held")

/* ---- tests -------------------------------------------------------------- */

static void test_visible_everywhere(void **state)
{
	struct cluster *c = *state;

	start_three(c);
	th_scenario_visible(c->n, WAIT_MS);

	/* procreg nodes on a: the two others, over NATS. */
	{
		struct th_cliprobe p = { .dir = c->n[0].dir,
				      .args = (const char *const[]){ "nodes", NULL },
				      .needles = { "nodeb", "node.c", "nats" } };

		if (!th_until(th_probe_cli, &p, WAIT_MS))
			fail_msg("procreg nodes: %s", p.out);
	}

	th_scenario_unregister_leave(c->n, WAIT_MS);
}

static void test_death_propagates(void **state)
{
	struct cluster *c = *state;

	start_three(c);
	th_scenario_death(c->n, WAIT_MS);
}

/* No connection between the nodes to see drop: the heartbeats stop, and
 * after the timeout the node's entries go, with NODE_DOWN events. */
static void test_killed_node_entries_vanish(void **state)
{
	struct cluster *c = *state;

	start_three(c);
	th_scenario_node_killed(c->n, WAIT_MS);
	expect_log(c->n[1].d.log, "bridge: node nodea: down (silent)");
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

	start_node(c, 3);
	th_expect_names(c->n[3].reg, 3003, WAIT_MS);
	expect_name(c->n[3].reg, "bulk-2999", getpid(), true);
	expect_name(c->n[3].reg, "from-b", getpid(), true);
	expect_members(c->n[3].reg, "g", 1);
	assert_int_equal(procreg_register(c->n[3].reg, "from-d", NULL, 0), 0);
	for (int i = 0; i < 3; i++)
		expect_name(c->n[i].reg, "from-d", getpid(), true);
}

/* Two registrations of one name while a node is cut off from the server
 * (a before c); healed, every node keeps a's, by the rule, and c's
 * change feed says its own lost. */
static void test_split_heal(void **state)
{
	struct cluster *c = *state;
	pid_t first, second;
	uint64_t cursor;
	PROCREG_OPTS(procreg_event, ev);
	bool conflict = false;

	proxy_start(c);
	start_node(c, 0);
	start_node(c, 1);
	assert_int_equal(start_node_cookie(c, 2, c->cookie, true), 0);
	assert_int_equal(procreg_register(c->n[2].reg, "on-c", NULL, 0), 0);
	assert_int_equal(procreg_register(c->n[0].reg, "on-a", NULL, 0), 0);
	expect_name(c->n[0].reg, "on-c", getpid(), true);
	expect_name(c->n[2].reg, "on-a", getpid(), true);

	proxy_cmd(c, 'c');
	/* Each side sees the other go. */
	expect_name(c->n[0].reg, "on-c", 0, false);
	expect_name(c->n[1].reg, "on-c", 0, false);
	expect_name(c->n[2].reg, "on-a", 0, false);
	first = spawn_holder(c->n[0].dir, "contested");
	th_msleep(5);
	second = spawn_holder(c->n[2].dir, "contested");
	assert_int_equal(procreg_register(c->n[2].reg, "during-split", NULL, 0), 0);
	cursor = procreg_feed_head(c->n[2].reg);

	proxy_cmd(c, 'h');
	for (int i = 0; i < 3; i++)
		expect_name(c->n[i].reg, "contested", first, i != 0);
	expect_name(c->n[0].reg, "during-split", getpid(), true);
	expect_name(c->n[1].reg, "on-c", getpid(), true);
	expect_name(c->n[2].reg, "on-a", getpid(), true);
	th_feed_settle(c->n[2].reg);
	while (procreg_next_event(c->n[2].reg, &cursor, &ev, 0) == 0)
		if (ev.type == PROCREG_EV_CONFLICT && ev.pid == second)
			conflict = true;
	assert_true(conflict);
	kill(first, SIGKILL);
	kill(second, SIGKILL);
	th_wait(first);
	th_wait(second);
	for (int i = 0; i < 3; i++)
		expect_name(c->n[i].reg, "contested", 0, false);
}

/* The server goes (SIGKILL) and comes back on the same port: every node
 * reconnects and resyncs, and what changed meanwhile is what remains. */
static void test_server_restart(void **state)
{
	struct cluster *c = *state;
	int err = -1;

	start_three(c);
	assert_int_equal(procreg_register(c->n[0].reg, "keep-a", NULL, 0), 0);
	assert_int_equal(procreg_register(c->n[1].reg, "stale-b", NULL, 0), 0);
	expect_name(c->n[2].reg, "keep-a", getpid(), true);
	expect_name(c->n[2].reg, "stale-b", getpid(), true);
	expect_name(c->n[0].reg, "stale-b", getpid(), true);

	nats_kill(c);
	/* Without the server, no other node is known. */
	expect_name(c->n[0].reg, "stale-b", 0, false);
	expect_name(c->n[2].reg, "keep-a", 0, false);
	expect_log(c->n[0].d.log, "lost the server");
	assert_int_equal(procreg_unregister(c->n[1].reg, "stale-b"), 0);
	assert_int_equal(procreg_register(c->n[1].reg, "marker-b", NULL, 0), 0);
	assert_int_equal(procreg_register(c->n[2].reg, "new-c", NULL, 0), 0);

	for (int attempt = 0; attempt < 20 && err; attempt++) {
		err = nats_start(c);
		if (err)
			th_msleep(250); /* the port not yet free */
	}
	assert_int_equal(err, 0);
	for (int i = 0; i < 3; i++) {
		if (i != 0)
			expect_name(c->n[i].reg, "keep-a", getpid(), true);
		if (i != 1)
			expect_name(c->n[i].reg, "marker-b", getpid(), true);
		if (i != 2)
			expect_name(c->n[i].reg, "new-c", getpid(), true);
	}
	/* b's snapshot (which brought marker-b) has no stale-b. */
	for (int i = 0; i < 3; i++)
		assert_int_equal(procreg_lookup(c->n[i].reg, "stale-b", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }),
				 -ENOENT);
	/* And changes flow again. */
	assert_int_equal(procreg_unregister(c->n[0].reg, "keep-a"), 0);
	expect_name(c->n[1].reg, "keep-a", 0, false);
	expect_name(c->n[2].reg, "keep-a", 0, false);
}

/* An envelope as procreg-bridge-nats.so builds it, MAC keyed with KEY,
 * into OUT (CAP bytes). */
static size_t envelope_t(uint8_t *out, size_t cap, const char *subj, uint8_t type,
			 uint64_t req, const char *sender, uint64_t inc, uint64_t ctr, const uint8_t *frame,
			 size_t flen, const char *key)
{
	struct pr_env e = { .type = type, .sender = sender, .sender_len = strlen(sender),
			    .incarnation = inc, .counter = ctr, .req = req, .body = frame,
			    .body_len = flen };
	struct pr_env_key *k = NULL;
	size_t len = 0;

	assert_int_equal(procreg__env_key_new((const uint8_t *)key, strlen(key), &k), 0);
	assert_int_equal(procreg__env_seal(k, subj, &e, out, cap, &len), 0);
	procreg__env_key_free(k);
	return len;
}

static size_t envelope(uint8_t *out, size_t cap, const char *subj, const char *sender,
		       uint64_t inc, uint64_t ctr, const uint8_t *frame, size_t flen, const char *key)
{
	return envelope_t(out, cap, subj, PR_ENV_STREAM, 0, sender, inc, ctr, frame, flen, key);
}

static natsConnection *test_client(struct cluster *c, bool with_password)
{
	natsConnection *nc = NULL;
	char url[128];

	snprintf(url, sizeof(url), "nats://%s127.0.0.1:%d",
		 with_password ? NATS_USER ":" NATS_PASS "@" : "", c->nats_port);
	if (natsConnection_ConnectTo(&nc, url) != NATS_OK)
		return NULL;
	return nc;
}

/* The cookie's role: a client on the server without it (a forged
 * message, a daemon with another cookie) is dropped and logged, nothing
 * applied; a message of a real node published again is a replay, also
 * dropped. And without the server's password there is no client at all. */
static void test_forged_and_replayed_ignored(void **state)
{
	struct cluster *c = *state;
	static uint8_t env[PR_BP_FRAME_MAX + 256], captured[2][4096];
	size_t caplen[2], ncap = 0, pos = 0, n;
	uint8_t frame[512];
	struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 1,
				 .registered_ns = 1, .name = "forged", .name_len = 6 };
	natsConnection *nc;
	natsSubscription *sub = NULL;
	natsMsg *msg = NULL;
	char bad[600];
	int ups;

	start_node(c, 0);
	start_node(c, 1);
	assert_int_equal(procreg_register(c->n[0].reg, "real", NULL, 0), 0);
	expect_name(c->n[1].reg, "real", getpid(), true);

	/* No password: the server itself says no. */
	assert_null(test_client(c, false));
	nc = test_client(c, true);
	assert_non_null(nc);

	/* A change claiming to be node a's, with a MAC under another key. */
	assert_int_equal(procreg__bp_put_change(frame, sizeof(frame), &pos, 7, 1, "nodea", &e), 0);
	n = envelope(env, sizeof(env), "procreg.default.node.nodea", "nodea", 7, 1u << 30, frame, pos,
		     "not-the-cookie");
	assert_int_equal(natsConnection_Publish(nc, "procreg.default.node.nodea", env, (int)n),
			 NATS_OK);
	assert_int_equal(natsConnection_Flush(nc), NATS_OK);
	expect_log(c->n[1].d.log, "authentication failed");
	/* Garbage, too. */
	assert_int_equal(natsConnection_PublishString(nc, "procreg.default.node.nodea", "junk"),
			 NATS_OK);
	assert_int_equal(natsConnection_Flush(nc), NATS_OK);

	/* A daemon with another cookie: nothing crosses either way. */
	snprintf(bad, sizeof(bad), "%s/bad-cookie", c->base);
	th_write_file(bad, "another-cookie-9876543210\n", 0600);
	assert_int_equal(start_node_cookie(c, 3, bad, false), 0);
	assert_int_equal(procreg_register(c->n[3].reg, "intruder", NULL, 0), 0);
	expect_log(c->n[3].d.log, "authentication failed");

	/* Replay: capture node a's messages while it registers and drops a
	 * name, then publish them again. */
	assert_int_equal(natsConnection_SubscribeSync(&sub, nc, "procreg.default.node.nodea"),
			 NATS_OK);
	assert_int_equal(natsConnection_Flush(nc), NATS_OK);
	assert_int_equal(procreg_register(c->n[0].reg, "replayed", NULL, 0), 0);
	expect_name(c->n[1].reg, "replayed", getpid(), true);
	assert_int_equal(procreg_unregister(c->n[0].reg, "replayed"), 0);
	expect_name(c->n[1].reg, "replayed", 0, false);
	/* Heartbeats keep coming: until the two changes are in. */
	for (int seen = 0; ncap < 2 && seen < 1000 &&
			   natsSubscription_NextMsg(&msg, sub, WAIT_MS) == NATS_OK; seen++) {
		if (natsMsg_GetDataLength(msg) <= (int)sizeof(captured[0]) &&
		    memmem(natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg), "replayed", 8)) {
			caplen[ncap] = (size_t)natsMsg_GetDataLength(msg);
			memcpy(captured[ncap], natsMsg_GetData(msg), caplen[ncap]);
			ncap++;
		}
		natsMsg_Destroy(msg);
	}
	assert_true(ncap >= 2); /* the PUT and the DEL */
	assert_int_equal(natsConnection_Publish(nc, "procreg.default.node.nodea", captured[0],
						(int)caplen[0]), NATS_OK);
	assert_int_equal(natsConnection_Flush(nc), NATS_OK);
	expect_log(c->n[1].d.log, "dropped: replayed");

	/* Nothing applied, anywhere, and node a is still up on b. */
	th_msleep(300);
	for (int i = 0; i < 4; i++) {
		if (i == 2)
			continue; /* not started */
		assert_int_equal(procreg_lookup(c->n[i].reg, "forged", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }),
				 -ENOENT);
		assert_int_equal(procreg_lookup(c->n[i].reg, "replayed", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }),
				 -ENOENT);
	}
	assert_int_equal(procreg_lookup(c->n[3].reg, "real", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }), -ENOENT);
	for (int i = 0; i < 2; i++)
		assert_int_equal(procreg_lookup(c->n[i].reg, "intruder", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }),
				 -ENOENT);
	assert_int_equal(procreg_register(c->n[0].reg, "still-flowing", NULL, 0), 0);
	expect_name(c->n[1].reg, "still-flowing", getpid(), true);

	/* a restarts; its old incarnation's message, replayed, does not
	 * pass for a restart: a stays up, its names stay. */
	procreg_close(c->n[0].reg);
	c->n[0].reg = NULL;
	assert_int_equal(th_daemon_stop(&c->n[0].d), 0);
	start_node(c, 0);
	assert_int_equal(procreg_register(c->n[0].reg, "a-new", NULL, 0), 0);
	expect_name(c->n[1].reg, "a-new", getpid(), true);
	ups = th_log_count(c->n[1].d.log, "node nodea: up");
	assert_int_equal(natsConnection_Publish(nc, "procreg.default.node.nodea", captured[1],
						(int)caplen[1]), NATS_OK);
	assert_int_equal(natsConnection_Flush(nc), NATS_OK);
	expect_log(c->n[1].d.log, "dropped: replayed (an older incarnation)");
	th_msleep(300);
	expect_name(c->n[1].reg, "a-new", getpid(), true);
	assert_int_equal(th_log_count(c->n[1].d.log, "node nodea: up"), ups);
	natsSubscription_Destroy(sub);
	natsConnection_Destroy(nc);
}

/* A hand-made node on the server, with the cookie: "fake", or NAME. */
struct fake {
	natsConnection *nc;
	natsSubscription *req;      /* requests for its snapshot */
	uint64_t ctr;
	char name[64];
	char stream[128];           /* the subject it publishes its stream on */
	uint8_t env[4096];
};

/* The next envelope of K's on SUBJ into K->env: its length. */
static size_t fake_envelope(struct fake *k, const char *subj, uint8_t type, uint64_t req,
			    const uint8_t *frame, size_t flen)
{
	return envelope_t(k->env, sizeof(k->env), subj, type, req, k->name, 7, ++k->ctr, frame,
			  flen, COOKIE);
}

static void fake_publish(struct fake *k, const char *subj, uint8_t type, uint64_t req,
			 const uint8_t *frame, size_t flen)
{
	size_t n = fake_envelope(k, subj, type, req, frame, flen);

	assert_int_equal(natsConnection_Publish(k->nc, subj, k->env, (int)n), NATS_OK);
	assert_int_equal(natsConnection_Flush(k->nc), NATS_OK);
}

static void fake_change(struct fake *k, uint64_t seq, const char *name)
{
	uint8_t buf[512];
	size_t len = th_fake_change_from(buf, sizeof(buf), 7, seq, k->name, name);

	fake_publish(k, k->stream, PR_ENV_STREAM, 0, buf, len);
}

/* A request for the fake's snapshot, from node a, within MS: its id in
 * *REQ. */
static bool fake_request_within(struct fake *k, int ms, uint64_t *req)
{
	natsMsg *msg = NULL;
	struct pr_env_key *key = NULL;
	struct pr_env e;

	if (natsSubscription_NextMsg(&msg, k->req, ms) != NATS_OK)
		return false;
	assert_int_equal(procreg__env_key_new((const uint8_t *)COOKIE, strlen(COOKIE), &key), 0);
	assert_int_equal(procreg__env_open(key, natsMsg_GetSubject(msg),
					   (const uint8_t *)natsMsg_GetData(msg),
					   (size_t)natsMsg_GetDataLength(msg), &e), 0);
	procreg__env_key_free(key);
	assert_int_equal(e.type, PR_ENV_SNAPREQ);
	assert_int_equal(e.sender_len, 5);
	assert_memory_equal(e.sender, "nodea", 5);
	*req = e.req;
	natsMsg_Destroy(msg);
	return true;
}

/* The next request for the fake's snapshot, from node a: its id. */
static uint64_t fake_request(struct fake *k)
{
	uint64_t req = 0;

	assert_true(fake_request_within(k, WAIT_MS, &req));
	return req;
}

static void fake_heartbeat(struct fake *k, uint64_t seq)
{
	uint8_t buf[64];
	size_t pos = 0;

	assert_int_equal(procreg__bp_put_heartbeat(buf, sizeof(buf), &pos, 7, seq), 0);
	fake_publish(k, k->stream, PR_ENV_STREAM, 0, buf, pos);
}

/* The fake keeps up, as a node that is up does: a heartbeat (as of change
 * SEQ) every 100 ms, until node a asks for its snapshot again: the new
 * request's id. */
static uint64_t fake_heartbeats_until_request(struct fake *k, uint64_t seq)
{
	uint64_t req = 0;

	for (int i = 0; i < WAIT_MS / 100; i++) {
		fake_heartbeat(k, seq);
		if (fake_request_within(k, 100, &req))
			return req;
	}
	fail_msg("node a asked for no fresh snapshot");
	return 0;
}

/* Node a started (with a long timeout: the fake sends one heartbeat, it
 * must not go silent meanwhile), and the fake K on the server, subscribed
 * to its snapshot requests: its heartbeat (as of change 0) brings it up
 * on a, which asks for its snapshot. The request's id. */
static uint64_t fake_join(struct cluster *c, struct fake *k, const char *name)
{
	char subj[128];

	memset(k, 0, sizeof(*k));
	snprintf(k->name, sizeof(k->name), "%s", name);
	snprintf(k->stream, sizeof(k->stream), "procreg.default.node.%s", name);
	snprintf(subj, sizeof(subj), "procreg.default.snap.%s", name);
	k->nc = test_client(c, true);
	assert_non_null(k->nc);
	assert_int_equal(natsConnection_SubscribeSync(&k->req, k->nc, subj), NATS_OK);
	assert_int_equal(natsConnection_Flush(k->nc), NATS_OK);
	fake_heartbeat(k, 0);
	return fake_request(k);
}

static uint64_t fake_up(struct cluster *c, struct fake *k)
{
	c->node_timeout_ms = "60000";
	start_node(c, 0);
	return fake_join(c, k, "fake");
}

/* Part PART of the fake's snapshot (as of change 0, in answer to request
 * REQ): NAME, and the last part if LAST. */
static void fake_snap_part(struct fake *k, uint64_t req, uint32_t part, const char *name, bool last)
{
	uint8_t buf[1024];
	size_t len = th_fake_snap(buf, sizeof(buf), 7, part, procreg__now_ns(),
				  (const char *const[]){ name, NULL }, last);

	fake_publish(k, "procreg.default.inbox.nodea", PR_ENV_SNAP, req, buf, len);
}

/* A node with the cookie refused again and again (part 0 of its snapshot
 * sent twice): each refusal takes it down and up again. The first of
 * those lines are each said, then one a second; once the second is up,
 * a line says how many were held back. Before, three lines a refusal
 * (1,400-2,400 refusals a second were seen). */
#define FLAPS 40

static void test_flaps_log_limited(void **state)
{
	struct cluster *c = *state;
	static struct fake k;
	uint64_t req = fake_up(c, &k), t0 = procreg__mono_ns();
	int down, up, refused;

	for (int i = 0; i < FLAPS; i++) {
		fake_snap_part(&k, req, 0, "flap", false);
		fake_snap_part(&k, req, 0, "flap", false);
		req = fake_request(&k);
	}
	expect_log(c->n[0].d.log, "more nodes down or up in the last second");
	down = th_log_count(c->n[0].d.log, "bridge: node fake: down (");
	up = th_log_count(c->n[0].d.log, "bridge: node fake: up (");
	refused = th_log_count(c->n[0].d.log, "out of order (expected 1): resyncing");
	/* 16 in a row (the first up among them), then one a second (and
	 * one more for a second begun); 80 before. */
	if (down + up < 16 || down + up > 16 + (int)((procreg__mono_ns() - t0) / 1000000000ull) + 1 ||
	    refused > 10 + (int)((procreg__mono_ns() - t0) / 1000000000ull) + 1)
		fail_msg("%d refusals in %llu ms logged in %d lines, and %d lines down or up",
			 FLAPS, (unsigned long long)((procreg__mono_ns() - t0) / 1000000),
			 refused, down + up);
}

/* Over NATS as over the mesh: a change that arrives before the snapshot
 * it follows waits for it; one already applied is ignored; one after a
 * gap that stays open makes the node down, its entries gone, and a fresh
 * snapshot is asked for. */
static void test_snapshot_order_and_gaps(void **state)
{
	struct cluster *c = *state;
	static struct fake k;
	uint64_t req;

	req = fake_up(c, &k);
	expect_log(c->n[0].d.log, "node fake: up");

	/* Change 1 overtakes the snapshot (as of 0): held, then applied
	 * after it. */
	fake_change(&k, 1, "fake-early");
	th_msleep(100);
	assert_int_equal(procreg_lookup(c->n[0].reg, "fake-early", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }),
			 -ENOENT);
	fake_snap_part(&k, req, 0, "fake-x", true);
	expect_name(c->n[0].reg, "fake-x", 99, true);
	expect_name(c->n[0].reg, "fake-early", 99, true);

	/* 1 again: applied already, ignored; 2 follows. */
	fake_change(&k, 1, "fake-dup");
	fake_change(&k, 2, "fake-z");
	expect_name(c->n[0].reg, "fake-z", 99, true);
	assert_int_equal(procreg_lookup(c->n[0].reg, "fake-dup", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }),
			 -ENOENT);

	/* A gap: 4 after 2, 3 never comes. The heartbeats that count 4
	 * make it missing; a fresh snapshot is asked for, under a new id. */
	fake_change(&k, 4, "fake-gap");
	assert_true(fake_heartbeats_until_request(&k, 4) != req);
	expect_log(c->n[0].d.log, "node fake: change 3 missing");
	expect_name(c->n[0].reg, "fake-x", 0, false);
	expect_name(c->n[0].reg, "fake-z", 0, false);
	assert_int_equal(procreg_lookup(c->n[0].reg, "fake-gap", &(struct procreg_entry){ .sz = sizeof(struct procreg_entry) }),
			 -ENOENT);
	assert_false(th_log_has(c->n[0].d.log, "node fake: down (silent)"));
	natsSubscription_Destroy(k.req);
	natsConnection_Destroy(k.nc);
}

/* A snapshot part lost on the way (NATS core delivers at most once): the
 * parts after it wait for it; while the node's heartbeats come and it
 * does not, the node resyncs (a fresh request), and the answer, whole
 * this time, is applied. (A lost last part, or a snapshot that never
 * comes, is missing in the same way.) */
static void test_snapshot_part_lost(void **state)
{
	struct cluster *c = *state;
	static struct fake k;
	uint64_t req, req2;

	req = fake_up(c, &k);

	/* Part 1 lost: part 2 is held, never applied; while the fake's
	 * heartbeats come, part 1 is missing, and the node resyncs. */
	fake_snap_part(&k, req, 0, "lost-0", false);
	expect_name(c->n[0].reg, "lost-0", 99, true);
	fake_snap_part(&k, req, 2, "lost-2", true);
	req2 = fake_heartbeats_until_request(&k, 0);
	assert_true(req2 != req);
	expect_log(c->n[0].d.log, "node fake: snapshot incomplete, part 1 missing");
	expect_log(c->n[0].d.log, "node fake: down (refused a frame)");
	assert_int_equal(procreg_lookup(c->n[0].reg, "lost-2", NULL), -ENOENT);

	/* Whole: three parts in order. What the earlier parts alone brought
	 * and the whole one does not have goes (a resync by difference). */
	fake_snap_part(&k, req2, 0, "whole-0", false);
	fake_snap_part(&k, req2, 1, "whole-1", false);
	fake_snap_part(&k, req2, 2, "whole-2", true);
	expect_name(c->n[0].reg, "whole-0", 99, true);
	expect_name(c->n[0].reg, "whole-1", 99, true);
	expect_name(c->n[0].reg, "whole-2", 99, true);
	expect_name(c->n[0].reg, "lost-0", 0, false);
	fake_change(&k, 1, "after-whole");
	expect_name(c->n[0].reg, "after-whole", 99, true);
	natsSubscription_Destroy(k.req);
	natsConnection_Destroy(k.nc);
}

/* A backend option it does not know, or a backend that is not there:
 * procregd refuses to start, and says why, naming the key (and not its
 * value: a misspelt key may hold a secret). The TCP mesh takes none. */
static void test_bad_options(void **state)
{
	struct cluster *c = *state;
	struct th_node *n = &c->n[0];
	const char *args[] = { "--node", "x", "--cookie-file", c->cookie, "--bridge", "nats",
			       "--bridge-opt", "colour=blue", NULL };

	assert_int_not_equal(th_daemon_start(&n->d, n->dir, args, NULL), 0);
	assert_true(th_log_has(n->d.log, "bridge: nats: unknown option 'colour'"));
	assert_true(th_log_has(n->d.log, "want one of url, user, password"));
	/* Refused before the client library started: nothing of it to wait for. */
	assert_false(th_log_has(n->d.log, "did not stop"));
	args[7] = "pasword=s3cret-value";
	assert_int_not_equal(th_daemon_start(&n->d, n->dir, args, NULL), 0);
	assert_true(th_log_has(n->d.log, "unknown option 'pasword'"));
	assert_false(th_log_has(n->d.log, "s3cret-value"));
	/* The alias and the option are one: --nats-user without a password
	 * is refused as user=... alone is. */
	args[6] = "--nats-user";
	args[7] = "someone";
	assert_int_not_equal(th_daemon_start(&n->d, n->dir, args, NULL), 0);
	assert_true(th_log_has(n->d.log, "user and password go together"));
	args[4] = "--bridge";
	args[5] = "tcp";
	args[6] = "--bridge-opt";
	args[7] = "url=nats://127.0.0.1:1";
	assert_int_not_equal(th_daemon_start(&n->d, n->dir, args, NULL), 0);
	assert_true(th_log_has(n->d.log, "bridge: tcp-mesh: unknown option 'url'"));
	assert_true(th_log_has(n->d.log, "it takes none"));
	args[5] = "nosuch";
	args[6] = NULL;
	assert_int_not_equal(th_daemon_start(&n->d, n->dir, args, NULL), 0);
	assert_true(th_log_has(n->d.log, "no procreg-bridge-nosuch.so"));
}

/* A server reached in clear, not on loopback: whoever is on the path can
 * read what is replicated and have the daemon allocate a message of any
 * size (the NATS client allocates it whole before procregd sees it), so
 * procregd says so at start. 192.0.2.1 (TEST-NET-1) answers nobody: the
 * daemon starts and keeps trying. On loopback, or with TLS, no word. */
static void test_plain_warned(void **state)
{
	struct cluster *c = *state;
	struct th_node *n = &c->n[0];
	const char *args[] = { "--node", "x", "--cookie-file", c->cookie, "--bridge", "nats",
			       "--nats-url", "nats://127.0.0.1:1,nats://192.0.2.1:4222", NULL };

	assert_int_equal(th_daemon_start(&n->d, n->dir, args, NULL), 0);
	assert_int_equal(th_daemon_stop(&n->d), 0);
	assert_true(th_log_has(n->d.log, "nats://192.0.2.1:4222 without TLS"));
	assert_false(th_log_has(n->d.log, "nats://127.0.0.1:1 without TLS"));
}

/* Propagation figures, printed, not asserted, the same shape as
 * test_bridge's: one name registered on a until a lookup on b finds it
 * (200 of them), and 2,000 names registered back to back on a until the
 * last is on b and c. */
static void test_propagation_figures(void **state)
{
	struct cluster *c = *state;

	start_three(c);
	assert_int_equal(procreg_register(c->n[0].reg, "warmup", NULL, 0), 0);
	expect_name(c->n[1].reg, "warmup", getpid(), true);
	expect_name(c->n[2].reg, "warmup", getpid(), true);
	th_propagation_figures(c->n[0].reg, c->n[1].reg, c->n[2].reg, "nats: ");
}

/* ---- ways into the server ----------------------------------------------- */

/* The server again, on a new port, authenticating with SERVER_AUTH (its
 * arguments); daemons started from now on prove themselves with
 * DAEMON_AUTH (procregd's). */
static void nats_restart_auth(struct cluster *c, const char *const *server_auth,
			      const char *const *daemon_auth)
{
	nats_kill(c);
	c->server_auth = server_auth;
	c->daemon_auth = daemon_auth;
	for (int attempt = 0; attempt < 5 && !c->nats_pid; attempt++) {
		c->nats_port = th_free_port();
		if (nats_start(c) != 0)
			nats_kill(c);
	}
	if (!c->nats_pid)
		fail_msg("nats-server did not start; its log: %s", c->nats_log);
}

/* Nodes a and b, with the credentials the server wants, replicate. */
static void expect_joined(struct cluster *c)
{
	start_node(c, 0);
	start_node(c, 1);
	assert_int_equal(procreg_register(c->n[0].reg, "admitted", NULL, 0), 0);
	expect_name(c->n[1].reg, "admitted", getpid(), true);
}

/* Node I, with the credentials AUTH the server refuses: procregd does not
 * start, and its log gives the reason, WHY. */
static void expect_refused_why(struct cluster *c, int i, const char *const *auth, const char *why)
{
	const char *const *keep = c->daemon_auth;

	c->daemon_auth = auth;
	assert_int_not_equal(start_node_dump(c, i, c->cookie, false, false), 0);
	c->daemon_auth = keep;
	if (!th_log_has(c->n[i].d.log, why)) {
		th_daemon_dump_log(&c->n[i].d);
		fail_msg("%s: refused without the reason ('%s')", c->n[i].name, why);
	}
}

static void expect_refused(struct cluster *c, int i, const char *const *auth)
{
	expect_refused_why(c, i, auth, "Authorization Violation");
}

/* Nodes a and b still replicate, both ways. */
static void expect_still_replicating(struct cluster *c)
{
	assert_int_equal(procreg_register(c->n[1].reg, "after-refusals", NULL, 0), 0);
	expect_name(c->n[0].reg, "after-refusals", getpid(), true);
	assert_true(th_log_count(c->nats_log, "uthorization") + th_log_count(c->nats_log, "uthentication") >= 1);
}

/* nats-server --auth TOKEN: daemons with --nats-token TOKEN join; one
 * with another token, or with a user and password, is refused. */
static void test_token_auth(void **state)
{
	struct cluster *c = *state;
	static const char *const server[] = { "--auth", NATS_TOKEN, NULL };
	static const char *const good[] = { "--nats-token", NATS_TOKEN, NULL };
	static const char *const wrong[] = { "--nats-token", "not-the-token", NULL };
	static const char *const user_pass[] = { "--nats-user", NATS_USER, "--nats-password",
						  NATS_PASS, NULL };

	nats_restart_auth(c, server, good);
	expect_joined(c);
	expect_refused(c, 2, wrong);
	expect_refused(c, 3, user_pass);
	expect_still_replicating(c);
}

/* An NKey: the encoding of a 32-byte ed25519 key (the seed, or the public
 * key) with its type prefix and a CRC-16/XMODEM, little-endian, in base32
 * without padding. nats-server and nats.c decode it; the nk tool that
 * makes them is not packaged, so the test makes its own. */
static uint16_t crc16_xmodem(const uint8_t *p, size_t n)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < n; i++) {
		crc ^= (uint16_t)(p[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = crc & 0x8000 ? (uint16_t)(crc << 1 ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

static void base32(const uint8_t *p, size_t n, char *out)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
	uint32_t acc = 0;
	int bits = 0;

	for (size_t i = 0; i < n; i++) {
		acc = acc << 8 | p[i];
		for (bits += 8; bits >= 5; bits -= 5)
			*out++ = abc[(acc >> (bits - 5)) & 31];
	}
	if (bits)
		*out++ = abc[(acc << (5 - bits)) & 31];
	*out = 0;
}

#define NKEY_PREFIX_SEED (18 << 3)   /* 'S' */
#define NKEY_PREFIX_USER (20 << 3)   /* 'U' */

struct nkey {
	char seed[64];              /* "SU..." */
	char pub[64];               /* "U..." */
	EVP_PKEY *k;
};

static void nkey_make(struct nkey *nk)
{
	uint8_t raw[40], priv[32], pub[32];
	size_t len = 32;
	uint16_t crc;

	nk->k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	assert_non_null(nk->k);
	assert_int_equal(EVP_PKEY_get_raw_private_key(nk->k, priv, &len), 1);
	assert_int_equal(len, 32);
	assert_int_equal(EVP_PKEY_get_raw_public_key(nk->k, pub, &len), 1);
	assert_int_equal(len, 32);
	/* The seed's two prefixes share its first two bytes, 5 bits each. */
	raw[0] = NKEY_PREFIX_SEED | NKEY_PREFIX_USER >> 5;
	raw[1] = (NKEY_PREFIX_USER & 31) << 3;
	memcpy(raw + 2, priv, 32);
	crc = crc16_xmodem(raw, 34);
	raw[34] = (uint8_t)crc;
	raw[35] = (uint8_t)(crc >> 8);
	base32(raw, 36, nk->seed);
	raw[0] = NKEY_PREFIX_USER;
	memcpy(raw + 1, pub, 32);
	crc = crc16_xmodem(raw, 33);
	raw[33] = (uint8_t)crc;
	raw[34] = (uint8_t)(crc >> 8);
	base32(raw, 35, nk->pub);
}

/* The seed is what libnats takes it for: nats_Sign() with it signs what
 * the public key verifies. */
static void nkey_check(const struct nkey *nk)
{
	static const char nonce[] = "a-server-nonce";
	unsigned char *sig = NULL;
	int siglen = 0;
	EVP_MD_CTX *md = EVP_MD_CTX_new();

	assert_int_equal(nats_Open(-1), NATS_OK); /* nats_Sign needs the library up */
	assert_int_equal(nats_Sign(nk->seed, nonce, &sig, &siglen), NATS_OK);
	assert_int_equal(siglen, 64);
	assert_non_null(md);
	assert_int_equal(EVP_DigestVerifyInit(md, NULL, NULL, NULL, nk->k), 1);
	assert_int_equal(EVP_DigestVerify(md, sig, (size_t)siglen, (const unsigned char *)nonce,
					  strlen(nonce)), 1);
	EVP_MD_CTX_free(md);
	free(sig);
}

/* A server whose one user is an NKey: a daemon with --nats-nkey and its
 * seed file joins; one with another key pair, or with the right public
 * key and another key's seed, is refused. */
static void test_nkey_auth(void **state)
{
	struct cluster *c = *state;
	static struct nkey good, other;
	static char conf[600], seed[600], other_seed[600], conf_text[256];
	static const char *server[3], *daemon[5], *wrong_pair[5], *wrong_seed[5];

	nkey_make(&good);
	nkey_make(&other);
	nkey_check(&good);
	nkey_check(&other);
	assert_string_not_equal(good.pub, other.pub);
	snprintf(conf, sizeof(conf), "%s/nats-nkey.conf", c->base);
	snprintf(conf_text, sizeof(conf_text), "authorization {\n  users = [ { nkey: \"%s\" } ]\n}\n",
		 good.pub);
	th_write_file(conf, conf_text, 0600);
	snprintf(seed, sizeof(seed), "%s/good.nk", c->base);
	th_write_file(seed, good.seed, 0600);
	snprintf(other_seed, sizeof(other_seed), "%s/other.nk", c->base);
	th_write_file(other_seed, other.seed, 0600);
	server[0] = "-c";
	server[1] = conf;
	daemon[0] = wrong_pair[0] = wrong_seed[0] = "--nats-nkey";
	daemon[1] = wrong_seed[1] = good.pub;
	wrong_pair[1] = other.pub;
	daemon[2] = wrong_pair[2] = wrong_seed[2] = "--nats-nkey-seed";
	daemon[3] = seed;
	wrong_pair[3] = wrong_seed[3] = other_seed;

	nats_restart_auth(c, server, daemon);
	expect_joined(c);
	expect_refused(c, 2, wrong_pair);
	expect_refused(c, 3, wrong_seed);
	expect_still_replicating(c);
	EVP_PKEY_free(good.k);
	EVP_PKEY_free(other.k);
}

/* ---- TLS, and several servers ------------------------------------------- */

/* openssl ARGS... (NULL-terminated): it must succeed. */
static void openssl(const char *const *args)
{
	static struct th_out o;
	const char *argv[32] = { OPENSSL_PATH };
	int n = 1;

	if (access(OPENSSL_PATH, X_OK) != 0)
		fail_msg("openssl not found at '%s': apt-get install openssl", OPENSSL_PATH);
	for (int i = 0; args[i] && n < 31; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	if (th_run(&o, NULL, argv) != 0)
		fail_msg("openssl %s: %s", args[0], o.err);
}

/* In DIR: a CA (NAME-ca.pem, .key), and a certificate it signs, NAME.pem
 * and NAME.key, for CN with the subjectAltName SAN (NULL: none). */
static void make_cert(const char *dir, const char *ca, const char *name, const char *cn,
		      const char *san)
{
	char key[600], csr[600], pem[600], cakey[600], capem[600], ext[600], subj[128], line[256];

	snprintf(key, sizeof(key), "%s/%s.key", dir, name);
	snprintf(csr, sizeof(csr), "%s/%s.csr", dir, name);
	snprintf(pem, sizeof(pem), "%s/%s.pem", dir, name);
	snprintf(cakey, sizeof(cakey), "%s/%s.key", dir, ca);
	snprintf(capem, sizeof(capem), "%s/%s.pem", dir, ca);
	snprintf(ext, sizeof(ext), "%s/%s.ext", dir, name);
	snprintf(subj, sizeof(subj), "/CN=%s", cn);
	openssl((const char *const[]){ "req", "-newkey", "ec", "-pkeyopt",
				       "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out",
				       csr, "-subj", subj, NULL });
	snprintf(line, sizeof(line), "%s%s\n", san ? "subjectAltName=" : "basicConstraints=CA:FALSE",
		 san ? san : "");
	th_write_file(ext, line, 0600);
	openssl((const char *const[]){ "x509", "-req", "-in", csr, "-CA", capem, "-CAkey", cakey,
				       "-CAcreateserial", "-out", pem, "-days", "2", "-extfile",
				       ext, NULL });
}

static void make_ca(const char *dir, const char *ca)
{
	char key[600], pem[600], subj[128];

	snprintf(key, sizeof(key), "%s/%s.key", dir, ca);
	snprintf(pem, sizeof(pem), "%s/%s.pem", dir, ca);
	snprintf(subj, sizeof(subj), "/CN=procreg test %s", ca);
	openssl((const char *const[]){ "req", "-x509", "-newkey", "ec", "-pkeyopt",
				       "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out",
				       pem, "-days", "2", "-subj", subj, NULL });
}

/* A server with TLS only, which wants a client certificate from the test's
 * CA: nodes with the CA, a client certificate and tls://localhost join
 * and replicate (the server's name checked against its certificate); a
 * node without a client certificate, one that trusts another CA, one
 * that expects another name, are each refused at start with the reason. */
static void test_tls(void **state)
{
	struct cluster *c = *state;
	static char ca[600], srv_cert[600], srv_key[600], cl_cert[600], cl_key[600], other_ca[600];
	static char url[128], connected[160];
	static const char *server[16], *daemon[16], *no_cert[8], *wrong_ca[12], *wrong_name[16];

	make_ca(c->base, "ca");
	make_ca(c->base, "other-ca");
	make_cert(c->base, "ca", "server", "localhost", "DNS:localhost,IP:127.0.0.1");
	make_cert(c->base, "ca", "client", "procreg node", NULL);
	snprintf(ca, sizeof(ca), "%s/ca.pem", c->base);
	snprintf(other_ca, sizeof(other_ca), "%s/other-ca.pem", c->base);
	snprintf(srv_cert, sizeof(srv_cert), "%s/server.pem", c->base);
	snprintf(srv_key, sizeof(srv_key), "%s/server.key", c->base);
	snprintf(cl_cert, sizeof(cl_cert), "%s/client.pem", c->base);
	snprintf(cl_key, sizeof(cl_key), "%s/client.key", c->base);
	memcpy(server, (const char *[]){ "--user", NATS_USER, "--pass", NATS_PASS, "--tlsverify",
					 "--tlscert", srv_cert, "--tlskey", srv_key, "--tlscacert",
					 ca, NULL }, 12 * sizeof(char *));
	memcpy(daemon, (const char *[]){ "--nats-user", NATS_USER, "--nats-password", NATS_PASS,
					 "--nats-tls-ca", ca, "--nats-tls-cert", cl_cert,
					 "--nats-tls-key", cl_key, NULL }, 11 * sizeof(char *));
	memcpy(no_cert, (const char *[]){ "--nats-user", NATS_USER, "--nats-password", NATS_PASS,
					  "--nats-tls-ca", ca, NULL }, 7 * sizeof(char *));
	memcpy(wrong_ca, daemon, 11 * sizeof(char *));
	wrong_ca[5] = other_ca;
	memcpy(wrong_name, daemon, 10 * sizeof(char *));
	wrong_name[10] = "--nats-tls-hostname";
	wrong_name[11] = "nats.example";
	wrong_name[12] = NULL;

	nats_restart_auth(c, server, daemon);
	snprintf(url, sizeof(url), "tls://localhost:%d", c->nats_port);
	c->url = url;
	expect_joined(c);
	snprintf(connected, sizeof(connected), "bridge: nats: connected to %s", url);
	expect_log(c->n[0].d.log, connected);
	expect_log(c->n[0].d.log, "TLS, server certificates checked against");
	expect_refused_why(c, 2, no_cert, "wants a client certificate");
	expect_refused_why(c, 3, wrong_ca, "unable to get local issuer certificate");
	expect_refused_why(c, 3, wrong_name, "hostname mismatch");
	assert_true(th_log_has(c->nats_log, "TLS handshake error"));
	/* a and b still replicate, both ways. */
	assert_int_equal(procreg_register(c->n[1].reg, "after-refusals", NULL, 0), 0);
	expect_name(c->n[0].reg, "after-refusals", getpid(), true);
}

/* Which of PORTS[0..2) node N's log says it connected to last: its index,
 * or -1. */
static int connected_to(const struct th_node *n, const int *ports)
{
	static char buf[1 << 20];
	int fd = open(n->d.log, O_RDONLY | O_CLOEXEC), which = -1;
	ssize_t len = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	const char *p = buf, *needle = "bridge: nats: connected to nats://127.0.0.1:";

	if (fd >= 0)
		close(fd);
	if (len <= 0)
		return -1;
	buf[len] = 0;
	while ((p = strstr(p, needle))) {
		int port = atoi(p + strlen(needle));

		which = port == ports[0] ? 0 : port == ports[1] ? 1 : which;
		p++;
	}
	return which;
}

struct on_probe {
	const struct th_node *n;
	const int *ports;
	int want;
};

static int probe_on(void *arg)
{
	struct on_probe *p = arg;

	return connected_to(p->n, p->ports) == p->want;
}

/* --nats-url with a list. The first server dead: the node connects to the
 * second, and says which. Two servers in a cluster, both alive: a node
 * given both connects to one; that one killed, it fails over to the
 * other, says so, and goes on replicating with the nodes there. */
static void test_url_list(void **state)
{
	struct cluster *c = *state;
	static char cl1[64], cl2[64], route[64], url_a[128], url_b[64], url_c[128], log2[600];
	static const char *s1[16], *s2[16];
	int ports[2], dead = th_free_port(), on;
	struct on_probe op;

	snprintf(cl1, sizeof(cl1), "nats://127.0.0.1:%d", th_free_port());
	snprintf(cl2, sizeof(cl2), "nats://127.0.0.1:%d", th_free_port());
	snprintf(route, sizeof(route), "%s", cl1);
	memcpy(s1, (const char *[]){ "--user", NATS_USER, "--pass", NATS_PASS, "--cluster", cl1,
				     "--cluster_name", "procreg-test", NULL }, 9 * sizeof(char *));
	memcpy(s2, (const char *[]){ "--user", NATS_USER, "--pass", NATS_PASS, "--cluster", cl2,
				     "--cluster_name", "procreg-test", "--routes", route, NULL },
	       11 * sizeof(char *));
	nats_restart_auth(c, s1, NULL);
	ports[0] = c->nats_port;
	snprintf(log2, sizeof(log2), "%s/nats-server-2.log", c->base);
	for (int attempt = 0; attempt < 5 && !c->extra_pid; attempt++) {
		ports[1] = th_free_port();
		if (server_spawn(log2, ports[1], s2, &c->extra_pid) != 0 && c->extra_pid) {
			kill(c->extra_pid, SIGKILL);
			waitpid(c->extra_pid, NULL, 0);
			c->extra_pid = 0;
		}
	}
	assert_true(c->extra_pid > 0);

	/* a: the first server dead, the second the cluster's first. */
	snprintf(url_a, sizeof(url_a), "nats://127.0.0.1:%d,nats://127.0.0.1:%d", dead, ports[0]);
	c->url = url_a;
	start_node(c, 0);
	op = (struct on_probe){ &c->n[0], ports, 0 };
	if (!th_until(probe_on, &op, WAIT_MS))
		fail_msg("node a did not say it connected to the live server");
	/* b: the other server only; the route carries a's changes to it. */
	snprintf(url_b, sizeof(url_b), "nats://127.0.0.1:%d", ports[1]);
	c->url = url_b;
	start_node(c, 1);
	assert_int_equal(procreg_register(c->n[0].reg, "via-list", NULL, 0), 0);
	expect_name(c->n[1].reg, "via-list", getpid(), true);

	/* c: both servers, both alive. */
	snprintf(url_c, sizeof(url_c), "nats://127.0.0.1:%d, nats://%s:%s@127.0.0.1:%d", ports[0],
		 NATS_USER, NATS_PASS, ports[1]);
	c->url = url_c;
	start_node(c, 2);
	assert_int_equal(procreg_register(c->n[2].reg, "from-c", NULL, 0), 0);
	expect_name(c->n[0].reg, "from-c", getpid(), true);
	expect_name(c->n[1].reg, "from-c", getpid(), true);
	on = connected_to(&c->n[2], ports);
	assert_true(on == 0 || on == 1);
	/* The log never shows the password a URL carries. */
	assert_false(th_log_has(c->n[2].d.log, NATS_PASS));

	/* Its server goes: it fails over to the other and says which. */
	if (on == 0) {
		nats_kill(c);
	} else {
		kill(c->extra_pid, SIGKILL);
		waitpid(c->extra_pid, NULL, 0);
		c->extra_pid = 0;
	}
	op = (struct on_probe){ &c->n[2], ports, !on };
	if (!th_until(probe_on, &op, WAIT_MS))
		fail_msg("node c did not fail over to the other server, or did not say so");
	assert_int_equal(procreg_register(c->n[2].reg, "after-failover", NULL, 0), 0);
	/* The node on the server that is left sees it: b if that is the
	 * second, a if the first. */
	expect_name(c->n[on == 0 ? 1 : 0].reg, "after-failover", getpid(), true);
}

/* A node with the cookie asks node a for its snapshot over and over,
 * each request with a fresh counter (no replay): a builds the whole
 * table on its thread for a snapshot, so it serves a sender's newest
 * request only, one per tick at most, not one snapshot per request. The
 * newest is answered (a resync still gets its snapshot). */
static void test_snapreq_flood_coalesced(void **state)
{
	struct cluster *c = *state;
	static struct fake k;
	natsSubscription *inbox = NULL;
	struct pr_env_key *key = NULL;
	const int reqs = 400;
	const uint64_t first = 1000, newest = first + reqs - 1;
	uint64_t last = 0;
	int answered = 0;
	bool got_newest = false;

	(void)fake_up(c, &k);
	th_register_bulk(c->n[0].reg, "s", 2000, "0123456789abcdef");
	assert_int_equal(natsConnection_SubscribeSync(&inbox, k.nc, "procreg.default.inbox.fake"),
			 NATS_OK);
	assert_int_equal(natsConnection_Flush(k.nc), NATS_OK);
	for (int i = 0; i < reqs; i++) {
		size_t n = envelope_t(k.env, sizeof(k.env), "procreg.default.snap.nodea",
				      PR_ENV_SNAPREQ, first + (uint64_t)i, k.name, 7, ++k.ctr, NULL,
				      0, COOKIE);

		assert_int_equal(natsConnection_Publish(k.nc, "procreg.default.snap.nodea", k.env,
							(int)n), NATS_OK);
	}
	assert_int_equal(natsConnection_Flush(k.nc), NATS_OK);
	/* The answers (each a snapshot in one part or more, tagged with the
	 * request's id), until the newest is answered and nothing more
	 * comes. */
	assert_int_equal(procreg__env_key_new((const uint8_t *)COOKIE, strlen(COOKIE), &key), 0);
	for (;;) {
		natsMsg *msg = NULL;
		struct pr_env e;

		if (natsSubscription_NextMsg(&msg, inbox, got_newest ? 1000 : WAIT_MS) != NATS_OK)
			break;
		assert_int_equal(procreg__env_open(key, natsMsg_GetSubject(msg),
						   (const uint8_t *)natsMsg_GetData(msg),
						   (size_t)natsMsg_GetDataLength(msg), &e), 0);
		assert_int_equal(e.type, PR_ENV_SNAP);
		assert_true(e.req >= first && e.req <= newest);
		if (e.req != last)
			answered++;
		last = e.req;
		got_newest |= e.req == newest;
		natsMsg_Destroy(msg);
	}
	procreg__env_key_free(key);
	natsSubscription_Destroy(inbox);
	print_message("%d snapshot requests: %d answered\n", reqs, answered);
	if (!got_newest)
		fail_msg("the newest snapshot request was not answered");
	if (answered > reqs / 4)
		fail_msg("%d snapshots sent for %d requests from one node", answered, reqs);
	expect_log(c->n[0].d.log, "node fake: snapshot request coalesced");
	/* And node a serves its clients. */
	assert_int_equal(procreg_register(c->n[0].reg, "after-flood", NULL, 0), 0);
	natsSubscription_Destroy(k.req);
	natsConnection_Destroy(k.nc);
}

/* Node a keeps track of two other nodes here (PROCREG_TEST_PEERS_MAX):
 * nodes with the cookie under throwaway names, each heard from once and
 * then silent, do not shut out the nodes that come after them: one
 * silent longer than a node may be makes room for node b, a real one. */
static void test_peers_reused(void **state)
{
	struct cluster *c = *state;
	natsConnection *nc;
	uint8_t env[512];

	setenv("PROCREG_TEST_PEERS_MAX", "2", 1);
	start_node(c, 0);
	unsetenv("PROCREG_TEST_PEERS_MAX");
	nc = test_client(c, true);
	assert_non_null(nc);
	for (int i = 0; i < 2; i++) {
		char name[16], subj[64];
		uint8_t hb[64];
		size_t pos = 0, n;

		snprintf(name, sizeof(name), "ghost%d", i);
		snprintf(subj, sizeof(subj), "procreg.default.node.%s", name);
		assert_int_equal(procreg__bp_put_heartbeat(hb, sizeof(hb), &pos, 7, 0), 0);
		n = envelope(env, sizeof(env), subj, name, 7, 1, hb, pos, COOKIE);
		assert_int_equal(natsConnection_Publish(nc, subj, env, (int)n), NATS_OK);
	}
	assert_int_equal(natsConnection_Flush(nc), NATS_OK);
	expect_log(c->n[0].d.log, "node ghost0: up");
	expect_log(c->n[0].d.log, "node ghost1: up");
	expect_log(c->n[0].d.log, "node ghost0: down (silent)");
	expect_log(c->n[0].d.log, "node ghost1: down (silent)");
	start_node(c, 1);
	assert_int_equal(procreg_register(c->n[1].reg, "on-b", NULL, 0), 0);
	expect_name(c->n[0].reg, "on-b", getpid(), true);
	assert_int_equal(procreg_register(c->n[0].reg, "on-a", NULL, 0), 0);
	expect_name(c->n[1].reg, "on-a", getpid(), true);
	natsConnection_Destroy(nc);
}

/* K, up and synced on node a, sends FLOOD_MSGS heartbeats, each a
 * message of its own, in chunks of FLOOD_CHUNK, each chunk followed by a
 * change registering TAG.<chunk> that node a must show before the next
 * chunk goes: node a's NATS client never holds more than a chunk, well
 * under what it keeps for a slow consumer (65,536 messages), however
 * busy the machine. The ms until the last change shows. */
#define FLOOD_MSGS 500000
#define FLOOD_CHUNK 10000

static uint64_t fake_flood(struct cluster *c, struct fake *k, const char *tag)
{
	uint64_t t0 = procreg__mono_ns() / 1000000;
	char name[64];
	uint8_t hb[64];

	for (int j = 0; j < FLOOD_MSGS / FLOOD_CHUNK; j++) {
		size_t pos = 0;

		assert_int_equal(procreg__bp_put_heartbeat(hb, sizeof(hb), &pos, 7, (uint64_t)j), 0);
		for (int i = 0; i < FLOOD_CHUNK; i++) {
			size_t n = fake_envelope(k, k->stream, PR_ENV_STREAM, 0, hb, pos);

			assert_int_equal(natsConnection_Publish(k->nc, k->stream, k->env, (int)n),
					 NATS_OK);
		}
		snprintf(name, sizeof(name), "%s.%d", tag, j);
		fake_change(k, (uint64_t)j + 1, name);
		if (!th_name_within(c->n[0].reg, name, 99, true, WAIT_MS)) {
			th_daemon_dump_log(&c->n[0].d);
			fail_msg("%d messages from node %s, then %s: not through after %llu ms",
				 FLOOD_CHUNK, k->name, name,
				 (unsigned long long)(procreg__mono_ns() / 1000000 - t0));
		}
	}
	return procreg__mono_ns() / 1000000 - t0;
}

/*
 * Every message is looked up by its sender's name. That was a comparison
 * with every peer known: a node with the cookie that made thousands known
 * under names of the longest kind, differing only in their last
 * characters, and then sent from the last of them, cost node a a scan of
 * them all for each message. By the
 * index it is a hash and a probe, whatever the number known: a flood from
 * the last of 4,096 peers must go through node a in about the time the
 * same flood from a peer known alone took (at most 3 times that and 2 s:
 * room for a busy machine; before, 500,000 messages took 5.7 times as
 * long, 11.5 s against 2.0, and 250,000 5.3 times; now 0.94-0.96
 * times, under TSan 1.11, under ASan 0.68).
 */
#define PEERS_KNOWN 4094
#define LONG_PREFIX "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"

static void test_messages_of_the_last_peer(void **state)
{
	struct cluster *c = *state;
	static struct fake alone, last;
	natsConnection *nc;
	uint8_t hb[64];
	char name[64];
	size_t pos = 0;
	uint64_t req, t_alone, t_last;

	c->node_timeout_ms = "60000";
	start_node(c, 0);
	snprintf(name, sizeof(name), LONG_PREFIX "%04d", 0);
	req = fake_join(c, &alone, name);
	fake_snap_part(&alone, req, 0, "alone-before", true);
	expect_name(c->n[0].reg, "alone-before", 99, true);
	t_alone = fake_flood(c, &alone, "alone");

	nc = test_client(c, true);
	assert_non_null(nc);
	assert_int_equal(procreg__bp_put_heartbeat(hb, sizeof(hb), &pos, 7, 0), 0);
	for (int i = 1; i <= PEERS_KNOWN; i++) {
		uint8_t env[512];
		char subj[128];
		size_t n;

		snprintf(name, sizeof(name), LONG_PREFIX "%04d", i);
		snprintf(subj, sizeof(subj), "procreg.default.node.%s", name);
		n = envelope(env, sizeof(env), subj, name, 7, 1, hb, pos, COOKIE);
		assert_int_equal(natsConnection_Publish(nc, subj, env, (int)n), NATS_OK);
	}
	assert_int_equal(natsConnection_Flush(nc), NATS_OK);
	/* Every one of them up (their lines are rate-limited). */
	for (int i = 0;; i++) {
		PROCREG_OPTS(procreg_bridge, b);

		assert_int_equal(procreg_bridge(c->n[0].reg, &b, NULL, NULL), 0);
		if (b.nodes >= PEERS_KNOWN + 1)
			break;
		if (i > WAIT_MS / 10)
			fail_msg("%u nodes up of %d", b.nodes, PEERS_KNOWN + 1);
		th_msleep(10);
	}
	snprintf(name, sizeof(name), LONG_PREFIX "%04d", PEERS_KNOWN + 1);
	req = fake_join(c, &last, name);
	fake_snap_part(&last, req, 0, "last-before", true);
	expect_name(c->n[0].reg, "last-before", 99, true);
	t_last = fake_flood(c, &last, "last");

	print_message("%d messages: from a peer known alone through in %llu ms, from the last of "
		      "%d in %llu ms\n", FLOOD_MSGS, (unsigned long long)t_alone, PEERS_KNOWN + 2,
		      (unsigned long long)t_last);
	if (t_last > 3 * t_alone + 2000)
		fail_msg("messages from the last of %d peers took %llu ms, from one known alone %llu",
			 PEERS_KNOWN + 2, (unsigned long long)t_last, (unsigned long long)t_alone);
	natsSubscription_Destroy(alone.req);
	natsConnection_Destroy(alone.nc);
	natsSubscription_Destroy(last.req);
	natsConnection_Destroy(last.nc);
	natsConnection_Destroy(nc);
}

/*
 * Someone on the server without the cookie, sending as fast as it can
 * for 3 s from FLOODERS connections: messages carrying 60,000 bytes of
 * headers (procreg sends none) and envelopes whose MAC fails. Both are
 * dropped on the library's thread, never queued for the daemon's: node
 * a's memory stays near where it was, node b stays up on a with its name
 * there, and a's log says why each kind was dropped. Before, the queue
 * counted a message by its data alone (32 bytes for 60 KiB of headers):
 * a grew by about 85 MB a second, past 1.4 GB, and with every message
 * lost by a slow consumer every node went down and up on a, b's names
 * gone meanwhile.
 */
#define FLOODERS 2
#define FLOOD_MS 3000

struct forger {
	struct cluster *c;
	int stop;
	uint64_t sent;
	natsStatus err;
};

/* The headers' value: filled before the forgers start. */
static char forged_pad[60000];

static void *forger_main(void *arg)
{
	struct forger *f = arg;
	const char *subj = "procreg.default.node.evil";
	uint8_t env[512], frame[64];
	size_t pos = 0, n;
	natsConnection *nc = test_client(f->c, true);

	if (!nc) {
		f->err = NATS_CONNECTION_CLOSED;
		return NULL;
	}
	procreg__bp_put_heartbeat(frame, sizeof(frame), &pos, 7, 1);
	n = envelope(env, sizeof(env), subj, "evil", 7, 1, frame, pos, "not-the-cookie");
	while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED) && f->err == NATS_OK) {
		natsMsg *m = NULL;

		f->err = natsMsg_Create(&m, subj, NULL, NULL, 0);
		if (f->err == NATS_OK)
			f->err = natsMsgHeader_Set(m, "X-Pad", forged_pad);
		if (f->err == NATS_OK)
			f->err = natsConnection_PublishMsg(nc, m);
		natsMsg_Destroy(m);
		if (f->err == NATS_OK)
			f->err = natsConnection_Publish(nc, subj, env, (int)n);
		f->sent += 2;
	}
	if (f->err == NATS_OK)
		f->err = natsConnection_Flush(nc);
	natsConnection_Destroy(nc);
	return NULL;
}

/* Node a's own clients keep its thread busy meanwhile, as they may:
 * what comes from NATS then waits its turn (the bridge's input is taken
 * between their requests), in the queue. */
struct busy {
	const char *dir;
	int stop, err;
};

static void *busy_main(void *arg)
{
	struct busy *b = arg;
	procreg_t *reg = th_open(b->dir);
	static struct procreg_op ops[500];
	static char names[500][32];

	if (!reg) {
		b->err = EIO;
		return NULL;
	}
	for (int i = 0; i < 500; i++) {
		snprintf(names[i], sizeof(names[i]), "busy.%d", i);
		ops[i] = (struct procreg_op){ .sz = sizeof(ops[i]), .name = names[i] };
	}
	for (int round = 0; !__atomic_load_n(&b->stop, __ATOMIC_RELAXED) && !b->err; round++) {
		for (int i = 0; i < 500; i++)
			ops[i].kind = round % 2 ? PROCREG_OP_UNREGISTER : PROCREG_OP_REGISTER;
		b->err = -procreg_batch(reg, ops, 500);
	}
	procreg_close(reg);
	return NULL;
}

static void test_forged_flood_kept_out(void **state)
{
	struct cluster *c = *state;
	struct forger fg[FLOODERS];
	struct busy busy = { 0 };
	pthread_t t[FLOODERS], bt;
	uint64_t sent = 0;
	char down[128];
	long hwm0, hwm1;

	c->node_timeout_ms = "20000";
	start_node(c, 0);
	start_node(c, 1);
	assert_int_equal(procreg_register(c->n[1].reg, "honest", NULL, 0), 0);
	expect_name(c->n[0].reg, "honest", getpid(), true);
	hwm0 = th_status_kb(c->n[0].d.pid, "VmHWM");
	assert_true(hwm0 > 0);

	memset(forged_pad, 'x', sizeof(forged_pad) - 1);
	busy.dir = c->n[0].dir;
	assert_int_equal(pthread_create(&bt, NULL, busy_main, &busy), 0);
	for (int i = 0; i < FLOODERS; i++) {
		fg[i] = (struct forger){ .c = c, .err = NATS_OK };
		assert_int_equal(pthread_create(&t[i], NULL, forger_main, &fg[i]), 0);
	}
	th_msleep(FLOOD_MS);
	for (int i = 0; i < FLOODERS; i++)
		__atomic_store_n(&fg[i].stop, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&busy.stop, 1, __ATOMIC_RELAXED);
	pthread_join(bt, NULL);
	if (busy.err)
		fail_msg("node a's client: %s", strerror(busy.err));
	for (int i = 0; i < FLOODERS; i++) {
		pthread_join(t[i], NULL);
		if (fg[i].err != NATS_OK)
			fail_msg("forger %d: %s", i, natsStatus_GetText(fg[i].err));
		sent += fg[i].sent;
	}
	expect_log(c->n[0].d.log, "dropped: it carries headers (procreg sends none)");
	expect_log(c->n[0].d.log, "dropped: authentication failed");

	/* Node b's changes still come through, and it never went down. */
	assert_int_equal(procreg_register(c->n[1].reg, "after", NULL, 0), 0);
	expect_name(c->n[0].reg, "after", getpid(), true);
	expect_name(c->n[0].reg, "honest", getpid(), true);
	snprintf(down, sizeof(down), "bridge: node %s: down", c->n[1].name);
	assert_false(th_log_has(c->n[0].d.log, down));
	hwm1 = th_status_kb(c->n[0].d.pid, "VmHWM");
	print_message("node a's peak memory: %ld KiB before, %ld KiB after %llu forged messages "
		      "(half of them with 60 KB of headers) in %d ms\n", hwm0, hwm1,
		      (unsigned long long)sent, FLOOD_MS);
#ifndef __SANITIZE_ADDRESS__
	if (hwm1 - hwm0 > 64 * 1024)
		fail_msg("node a's peak memory grew by %ld KiB", hwm1 - hwm0);
#else
	/* AddressSanitizer keeps what is freed (256 MiB of quarantine): the
	 * daemon's peak is no measure in such a build. */
	print_message("(peak memory not checked: AddressSanitizer build)\n");
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_visible_everywhere, setup, teardown),
		cmocka_unit_test_setup_teardown(test_death_propagates, setup, teardown),
		cmocka_unit_test_setup_teardown(test_killed_node_entries_vanish, setup, teardown),
		cmocka_unit_test_setup_teardown(test_late_joiner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_split_heal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_server_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forged_and_replayed_ignored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forged_flood_kept_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_order_and_gaps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flaps_log_limited, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_part_lost, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapreq_flood_coalesced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peers_reused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_messages_of_the_last_peer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_plain_warned, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_options, setup, teardown),
		cmocka_unit_test_setup_teardown(test_token_auth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nkey_auth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_url_list, setup, teardown),
		cmocka_unit_test_setup_teardown(test_propagation_figures, setup, teardown),
	};
	int r;

	/* TEST_FILTER=test_split_heal (a glob) runs one test. */
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	r = cmocka_run_group_tests(tests, NULL, NULL);

	nats_Close();
	return r;
}
