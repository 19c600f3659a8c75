/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cluster.h - what the bridge tests share: nodes (a procregd each, in its
 * own directory under one base, with one cookie), bridged daemons on a
 * free loopback port, and bounded waits for what replication must show
 * on a handle (a name, a group's members, a line in a log, CLI output).
 *
 * Every wait polls until its deadline: the tests check behaviour, never
 * timing.
 */
#ifndef PROCREG_TEST_CLUSTER_H
#define PROCREG_TEST_CLUSTER_H

#include <stdbool.h>

#include "harness.h"
#include "bridge_sec.h"

struct th_node {
	char name[16];
	char dir[512];
	char listen[32];           /* its --listen address, when bridged over TCP */
	struct th_daemon d;
	procreg_t *reg;
	bool may_hang;             /* stopped with a deadline: a regression could wedge it */
};

/* A fresh base directory (returned; free it after th_rmrf()), the cookie
 * file BASE/cookie (its path in COOKIE, capacity CAP) holding TEXT and a
 * newline, mode 0600, and COUNT nodes named PREFIXa, PREFIXb, ... each
 * with its directory BASE/PREFIXa, ... (mode 0755). */
char *th_nodes_make(struct th_node *n, int count, const char *prefix, char *cookie, size_t cap,
		    const char *text);
/* Close every handle and stop every daemon still running: 0 if each
 * exited 0 (under the sanitizers: no error, no leak), else -1, with the
 * log of each that did not. */
int th_nodes_stop(struct th_node *n, int count);

/* procregd in DIR with --listen 127.0.0.1:PORT (a free port; the address
 * in LISTEN, 32 bytes) then ARGS, with ENV, as th_daemon_start(). *PORT_OUT
 * (may be NULL) has the port before the daemon starts. A port taken
 * between th_free_port() and the daemon's bind: another, up to 5 times. */
int th_daemon_start_listen(struct th_daemon *d, const char *dir, char *listen,
			   volatile int *port_out, const char *const *args,
			   const char *const *env);
/* Node N bridged over TCP: --node NAME --cookie-file COOKIE on a free
 * port (in N->listen), then ARGS (NULL-terminated, may be NULL), with ENV;
 * 0 once it serves and N->reg is open. */
int th_node_start(struct th_node *n, const char *cookie, const char *const *args,
		  const char *const *env);

/* The fixture of a test against one bridged daemon: a fresh directory
 * (mode 0755) holding the cookie file DIR/cookie and the table of a
 * daemon --node NODE on a free port (in LISTEN), and a handle. */
struct th_bridged_fx {
	char *dir;
	char listen[32];
	struct th_daemon d;
	procreg_t *reg;
};

/* cmocka setup and teardown: *STATE is the struct th_bridged_fx, its
 * cookie COOKIE (a newline added). The teardown stops the daemon, which
 * must exit 0. */
int th_bridged_fx_start(void **state, const char *node, const char *cookie);
int th_bridged_fx_stop(void **state);

/* Whether, within MS ms, NAME is on REG owned by PID (and from another
 * node if REMOTE), or, PID 0, gone. */
bool th_name_within(procreg_t *reg, const char *name, pid_t pid, bool remote, int ms);
/* The same, or the test fails. */
void th_expect_name(procreg_t *reg, const char *name, pid_t pid, bool remote, int ms);
/* Fail the test unless, within MS ms, GROUP on REG has WANT members. */
void th_expect_members(procreg_t *reg, const char *group, int want, int ms);
/* Fail the test unless, within MS ms, NAME on REG has the metadata
 * META[0..LEN). */
void th_expect_meta(procreg_t *reg, const char *name, const void *meta, size_t len, int ms);
/* Fail the test unless, within MS ms, REG holds WANT names. */
void th_expect_names(procreg_t *reg, uint64_t want, int ms);
/* Register PREFIX0 .. PREFIX<COUNT-1>, each with META, on REG in one
 * batch: each must succeed. */
void th_register_bulk(procreg_t *reg, const char *prefix, int count, const char *meta);
/* How many events of TYPE for NAME REG's change feed has from *CURSOR on
 * (which moves past them all). */
int th_feed_count(procreg_t *reg, uint64_t *cursor, int type, const char *name);
/* Fail the test unless, within MS ms, the log at PATH has NEEDLE. */
void th_expect_log(const char *path, const char *needle, int ms);

/* A child that opens the table of DIR and runs HOLD(R, ARG): a byte > 0
 * to report, or -CODE to exit with CODE; having reported, it holds what
 * it took until killed. Returns its pid once it reported, the byte in
 * *ST, or 0 in *ST if it exited first (10: no handle; 12: no report). */
pid_t th_spawn_holding(const char *dir, int (*hold)(procreg_t *r, void *arg), void *arg,
		       char *st);
/* A child that registers NAME with META on the daemon of DIR and holds it
 * until killed; returns once it is registered. */
pid_t th_spawn_holder(const char *dir, const char *name, const char *meta);

/* For th_until(): the CLI on DIR with ARGS exits 0 and its output (in
 * OUT) has every one of NEEDLES (up to 4, NULL-ended). */
struct th_cliprobe {
	const char *dir;
	const char *const *args;
	const char *needles[4];
	char out[8192];
};
int th_probe_cli(void *arg);

/* Propagation figures, printed (prefixed by LABEL), not asserted: one
 * name registered on A until a lookup on B finds it (median, p90 and max
 * of 200), and 2,000 names registered back to back on A until the last is
 * on B and C. Names lat* and bulk*: A must have none yet. */
void th_propagation_figures(procreg_t *a, procreg_t *b, procreg_t *c, const char *label);

/* Frames from a hand-made node "fake" (its entries owned by pid 99), into
 * BUF (capacity CAP): their length. A change, number SEQ of incarnation
 * INC: NAME registered now. */
size_t th_fake_change(uint8_t *buf, size_t cap, uint64_t inc, uint64_t seq, const char *name);
/* The same from node ORIGIN. */
size_t th_fake_change_from(uint8_t *buf, size_t cap, uint64_t inc, uint64_t seq,
			   const char *origin, const char *name);
/* Part PART of its snapshot as of change 0, the last if LAST: NAMES
 * (NULL-terminated), each registered at STAMP. */
size_t th_fake_snap(uint8_t *buf, size_t cap, uint64_t inc, uint32_t part, uint64_t stamp,
		    const char *const *names, bool last);

/* A hand-made node speaking the mesh's protocol over a blocking socket:
 * the handshake of bridge_sec.h, then frames in encrypted records. Big:
 * make it static. */
struct th_peer {
	int fd;
	struct pr_bs *bs;
	uint8_t in[2 * PR_BS_REC_MAX];  /* from the socket */
	size_t in_len;
	uint8_t pt[PR_BP_FRAME_MAX + PR_BS_PT_MAX]; /* opened, not yet read as frames */
	size_t pt_len;
	uint8_t frame[PR_BP_FRAME_MAX]; /* the frame th_peer_expect() returned */
	uint8_t held[PR_BS_HELLO_MAX + 64]; /* th_peer_connect_held()'s AUTH */
	size_t held_len;
};

/* The loopback port of "host:port" LISTEN, connected to (the test fails
 * if it cannot be): the fd. */
int th_dial(const char *listen);
/* Dial LISTEN and go through the handshake as node NAME (incarnation INC)
 * with the cookie COOKIE (its text, no newline): 0 once the daemon proved
 * itself, else the handshake's error (-EACCES: a wrong proof; -ECONNRESET:
 * the daemon closed the connection, a REFUSE in P->frame if it sent one). */
int th_peer_connect(struct th_peer *p, const char *listen, const char *name, uint64_t inc,
		    const char *cookie);
/* th_peer_connect() in steps, for many nodes to come up at once: the
 * handshake until our AUTH is made, kept (0, or the handshake's error);
 * that AUTH sent; then the rest of the handshake (as th_peer_connect()). */
int th_peer_connect_held(struct th_peer *p, const char *listen, const char *name, uint64_t inc,
			 const char *cookie);
void th_peer_release(struct th_peer *p);
int th_peer_finish(struct th_peer *p);
/* Frames BUF[0..len) to the daemon, sealed in as many records as it takes. */
void th_peer_send(struct th_peer *p, const uint8_t *buf, size_t len);
/* The next frame of TYPE from the daemon (others are skipped), in *F
 * (pointing into P->frame until the next call). */
void th_peer_expect(struct th_peer *p, uint8_t type, struct pr_bp_frame *f);
/* The next frame from the daemon, of any type (*F as th_peer_expect()
 * makes it): 0, or -ECONNRESET at the connection's end. */
int th_peer_next(struct th_peer *p, struct pr_bp_frame *f);
/* Close the connection and free the channel. */
void th_peer_close(struct th_peer *p);

/* The figure of KEY (in kB) in /proc/PID/status; -1 if it has none. */
long th_status_kb(pid_t pid, const char *key);
/* How many fds process PID has open. */
long th_count_fds(pid_t pid);
/* For th_until: whether th_count_fds(PID) is back to WANT or below (a
 * struct th_fdcount *): a daemon closes a connection's descriptor a
 * moment after it ends, in its closing processes. */
struct th_fdcount {
	pid_t pid;
	long want;
};
int th_fds_back(void *count);
/* Print PID's open fds and what they are (on failure, to see which). */
void th_list_fds(pid_t pid);
/* The same as text (malloc'd; NULL if out of memory). */
char *th_fds_text(pid_t pid);

/* Scenarios the bridge's tests run over every transport, on three started
 * nodes N[0..2], waiting up to MS for each change to show:
 *  visible          a name and its metadata, registered on node 0, and a
 *                   group with members on nodes 1 and 2, seen on all three;
 *                   a remote name can be neither taken nor removed here
 *  unregister_leave after visible: unregister on 0, leave on 1, everywhere
 *  death            a process holding a name on node 2 dies: gone everywhere
 *  node_killed      node 0 SIGKILLed while its process holds a name and it
 *                   is in a group: both leave nodes 1 and 2, NODE_DOWN
 *                   events in the feed */
void th_scenario_visible(struct th_node *n, int ms);
void th_scenario_unregister_leave(struct th_node *n, int ms);
void th_scenario_death(struct th_node *n, int ms);
void th_scenario_node_killed(struct th_node *n, int ms);

#endif
