/*
 * test_flood.c - peers that push and do not pull: a local client that
 * floods requests and never reads a reply, and connections to the bridge
 * port that stop in the middle of a frame. The daemon must go on serving
 * everyone else, hold a bounded amount of memory for them, and give their
 * fds back once they are gone.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "cluster.h"
#include "internal.h"
#include "proto.h"
#include "bridge_proto.h"

#define WAIT_MS 60000

struct fdcount {
	pid_t pid;
	long want;
};

static int fds_back(void *arg)
{
	struct fdcount *c = arg;

	return th_count_fds(c->pid) == c->want;
}

/* Whether the daemon serves: a registration, a lookup and a sync. */
static void serves(procreg_t *reg, const char *name)
{
	assert_int_equal(procreg_register(reg, name, "m", 1), 0);
	assert_int_equal(procreg_lookup(reg, name, NULL), 0);
	assert_int_equal(procreg_sync(reg), 0);
	assert_int_equal(procreg_unregister(reg, name), 0);
}

/* ---- a local client that never reads ---------------------------------- */

static int setup(void **state)
{
	return th_fx_start(state, NULL, NULL);
}

static int teardown(void **state)
{
	return th_fx_stop(state);
}

static int raw_client(const char *dir)
{
	int fd = th_raw_connect(dir);

	th_raw_hello(fd);
	return fd;
}

/* Packets of requests as fast as the socket takes them, never a reply
 * read. The daemon stops reading from it while its replies wait (so what
 * it holds for it is one packet's replies, and the connection's socket
 * buffers), and serves the others meanwhile. */
static void test_client_never_reads(void **state)
{
	struct th_fx *f = *state;
	static uint8_t pkt[PR_PACKET_MAX];
	struct fdcount c = { f->d.pid, 0 };
	long rss0, rss1, sent = 0;
	size_t pos = 0;
	int fd;

	serves(f->reg, "warm");
	c.want = th_count_fds(f->d.pid);
	rss0 = th_status_kb(f->d.pid, "RssAnon");
	fd = raw_client(f->dir);
	/* A full packet of SYNCs: one 16-byte reply each. */
	while (pos + PR_FRAME_HDR <= sizeof(pkt))
		procreg__proto_put(pkt, &pos, PR_OP_SYNC, 0, (uint32_t)pos, 0, NULL, 0, NULL, 0);
	for (;;) {
		ssize_t n = send(fd, pkt, pos, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0) {
			assert_int_equal(errno, EAGAIN);
			break;
		}
		sent++;
		assert_true(sent < 1000000);
	}
	/* Stuck: the daemon does not read it, and serves another client. */
	for (int i = 0; i < 20; i++) {
		char name[32];

		snprintf(name, sizeof(name), "bystander.%d", i);
		serves(f->reg, name);
	}
	rss1 = th_status_kb(f->d.pid, "RssAnon");
	printf("flood: %ld packets of %zu requests sent unread; daemon RssAnon %ld -> %ld kB\n", sent,
	       pos / PR_FRAME_HDR, rss0, rss1);
	/* What waits for it is bounded by the packets it got in, not by what
	 * it sent: a few packets' worth (64 KiB each), nowhere near 8 MiB. */
	assert_true(rss1 - rss0 < 8 * 1024);
	close(fd);
	serves(f->reg, "after");
	assert_true(th_until(fds_back, &c, WAIT_MS));
}

/* ---- the bridge port: frames begun and never finished ------------------ */

static int setup_node(void **state)
{
	return th_bridged_fx_start(state, "a", "a-flood-cookie-0123456789");
}

static int teardown_node(void **state)
{
	return th_bridged_fx_stop(state);
}

#define STALLED 200

/* Many connections to the bridge port that send the start of a HELLO and
 * stop: the daemon keeps serving its clients while they hang, drops each
 * at the handshake deadline (HANDSHAKE_MS in mesh.c) with a REFUSE that
 * says so, and has its fds back after. */
static void test_bridge_half_frames(void **state)
{
	struct th_bridged_fx *f = *state;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	static const uint8_t partial[] = { 0x40, 0, 0, 0, PR_BP_HELLO };
	struct fdcount c = { f->d.pid, 0 };
	int fds[STALLED], closed = 0, refused = 0;
	bool told[STALLED] = { false };

	serves(f->reg, "warm");
	c.want = th_count_fds(f->d.pid);
	sa.sin_port = htons((uint16_t)atoi(strchr(f->listen, ':') + 1));
	for (int i = 0; i < STALLED; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(fds[i] >= 0);
		assert_int_equal(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
		assert_int_equal(write(fds[i], partial, sizeof(partial)), (ssize_t)sizeof(partial));
	}
	for (int i = 0; i < 20; i++) {
		char name[32];

		snprintf(name, sizeof(name), "bystander.%d", i);
		serves(f->reg, name);
	}
	/* Each is dropped: its read sees the daemon's REFUSE, then the end;
	 * or only the end, if it was never taken into a handshake. */
	for (uint64_t t0 = procreg__mono_ns(); closed < STALLED;) {
		struct pollfd p[STALLED];
		int np = 0;

		for (int i = 0; i < STALLED; i++)
			if (fds[i] >= 0)
				p[np++] = (struct pollfd){ fds[i], POLLIN, 0 };
		assert_true(poll(p, (nfds_t)np, 1000) >= 0);
		for (int k = 0; k < np; k++) {
			uint8_t buf[4096];
			int i = 0;

			if (!p[k].revents)
				continue;
			while (fds[i] != p[k].fd)
				i++;
			if (read(p[k].fd, buf, sizeof(buf)) > 0) {
				told[i] = buf[4] == PR_BP_REFUSE && buf[8] == PR_BP_REFUSE_TIMEOUT;
				continue;
			}
			refused += !told[i];
			fds[i] = -1;
			close(p[k].fd);
			closed++;
		}
		if (procreg__mono_ns() - t0 > WAIT_MS * 1000000ull)
			fail_msg("%d of %d half-written connections still open", STALLED - closed, STALLED);
	}
	assert_true(th_until(fds_back, &c, WAIT_MS));
	serves(f->reg, "after");
	/* Some were taken into a handshake and timed out; the rest, past
	 * the cap on handshakes, were closed at once, without a word. */
	printf("flood: %d half-written bridge connections: %d refused at once, %d timed out\n",
	       STALLED, refused, STALLED - refused);
	assert_true(refused > 0 && refused < STALLED);
	assert_true(th_log_has(f->d.log, "handshake timed out"));
	assert_true(th_log_has(f->d.log, "connection refused: too many handshakes under way"));
}

static int unix_connect(const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/procreg.default.sock", dir);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Whether FD's connection was closed by the daemon. */
static int hung_up(int fd, int ms)
{
	struct pollfd p = { fd, POLLIN, 0 };
	char b[64];

	return poll(&p, 1, ms) == 1 && recv(fd, b, sizeof(b), MSG_DONTWAIT) == 0;
}

#define HOLDERS 64
#define TCP_HOLDERS 16

/* The daemon out of file descriptors (its limit lowered under it): a
 * connection it cannot take, local or to the bridge, is closed at once
 * (logged once a second at most), not left queued to wake the loop
 * forever; and once fds are free again, it serves. */
static void test_out_of_fds(void **state)
{
	struct th_bridged_fx *f = *state;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct fdcount c = { f->d.pid, 0 };
	struct rlimit old, low;
	int holders[HOLDERS], n = 0, tcp[TCP_HOLDERS], ntcp, refused = 0;

	serves(f->reg, "warm");
	c.want = th_count_fds(f->d.pid);
	assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, NULL, &old), 0);
	low = (struct rlimit){ (rlim_t)c.want + 8, old.rlim_max };
	assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, &low, NULL), 0);

	/* Local connections, until one is refused: each accepted one holds
	 * an fd, with no deadline. */
	while (n < HOLDERS && !refused) {
		holders[n] = unix_connect(f->dir);
		refused = hung_up(holders[n++], 100);
	}
	for (int i = 0; i < n && !refused; i++)
		refused = hung_up(holders[i], WAIT_MS / HOLDERS);
	assert_true(refused);
	/* The bridge port too. The daemon's fds come and go (a client's
	 * pidfd is held only while it is looked at), so one may be free
	 * now: connections are held, as the local ones were, until one is
	 * refused for want of an fd. */
	sa.sin_port = htons((uint16_t)atoi(strchr(f->listen, ':') + 1));
	for (ntcp = 0; ntcp < TCP_HOLDERS; ) {
		tcp[ntcp] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_int_equal(connect(tcp[ntcp], (struct sockaddr *)&sa, sizeof(sa)), 0);
		if (hung_up(tcp[ntcp++], 200) &&
		    th_log_has(f->d.log, "bridge: connection refused: out of file descriptors"))
			break;
	}
	for (int i = 0; i < ntcp; i++)
		close(tcp[i]);
	if (!th_log_has(f->d.log, "client refused: out of file descriptors") ||
	    !th_log_has(f->d.log, "bridge: connection refused: out of file descriptors")) {
		th_daemon_dump_log(&f->d);
		fail_msg("a refusal for want of fds is not in the daemon's log");
	}

	for (int i = 0; i < n; i++)
		close(holders[i]);
	assert_int_equal(prlimit(f->d.pid, RLIMIT_NOFILE, &old, NULL), 0);
	assert_true(th_until(fds_back, &c, WAIT_MS));
	serves(f->reg, "after");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_client_never_reads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bridge_half_frames, setup_node, teardown_node),
		cmocka_unit_test_setup_teardown(test_out_of_fds, setup_node, teardown_node),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
