/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * procreg/backend.h - the boundary between procregd's replication logic (bridge.c)
 * and the transport that carries it between nodes (a backend).
 *
 * A backend carries this node's frames out and other nodes' frames in,
 * reports nodes up and down, and asks the replication layer for a snapshot
 * when a node comes up. It knows nothing of the table. It fits the
 * daemon's event loop: one pollable fd, non-blocking calls, no threads of
 * its own required. The built-in backend is the TCP full mesh (mesh.c);
 * another may come from a shared object exporting
 * procreg_bridge_backend_v1 (a struct pr_bridge_backend): given by path
 * (--bridge-backend), or by name (--bridge NAME loads
 * procreg-bridge-NAME.so from beside procregd or the library directory;
 * nats.c is one).
 *
 * Both structs start with their size: a caller fills sz with the size it
 * was built with, and a callee reads only the members that size covers, so
 * members may be added at the end without breaking either side.
 *
 * Frames are the replication protocol's: the replication layer builds
 * SNAP and CHANGE frames and HEARTBEATs (heartbeat()); a backend carries
 * them as opaque bytes. Each starts with its length, a little-endian u32
 * that counts the whole frame (PR_BRIDGE_FRAME_MAX at most), which is all
 * a backend over a byte stream needs to cut them apart. What comes in goes
 * to deliver_bytes(), which checks it. The backends built into procregd
 * (the mesh, nats.c) link its codec and hand over frames they decoded
 * themselves (deliver(), with the codec's struct pr_bp_frame, opaque
 * here); the mesh's own HELLO, AUTH and PEERS frames never reach the
 * replication layer. Keeping frames from strangers on the way is the
 * backend's business: the mesh authenticates and encrypts every frame,
 * nats.c MACs its messages and leaves the encryption to TLS to the
 * server. The cookie comes in the config for that; the replication layer
 * never sees a key.
 *
 * Installed as <procreg/backend.h>: it needs no other header of procreg's,
 * and a backend needs no library of procreg's.
 */
#ifndef PROCREG_BACKEND_H
#define PROCREG_BACKEND_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <sys/timerfd.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PR_BRIDGE_BACKEND_SYMBOL "procreg_bridge_backend_v1"

#define PR_BRIDGE_FRAME_MAX 65536u  /* bytes in one frame, header included */
#define PR_BRIDGE_NODE_MAX 63u      /* a node name: 1..63 of [A-Za-z0-9_.@-] */

/* A frame decoded by procregd's codec, for the built-in backends. */
struct pr_bp_frame;

/* Defaults of the config's timings (procregd's --heartbeat-ms and
 * --node-timeout-ms), for every backend: a heartbeat twice a second, and
 * six missed make a node down. */
#define PR_BRIDGE_HEARTBEAT_MS 500
#define PR_BRIDGE_TIMEOUT_MS 3000

/* What the replication layer offers the backend: upcalls. */
struct pr_bridge_up {
	size_t sz;
	void *ctx;
	/* NODE authenticated (incarnation INC, listening at ADDR): 0 to take
	 * it, negative to refuse (the backend drops the connection). */
	int (*node_up)(void *ctx, const char *node, uint64_t inc, const char *addr);
	/* NODE is gone (connection lost, silent, refused a frame). */
	void (*node_down)(void *ctx, const char *node);
	/* A HEARTBEAT, SNAP or CHANGE frame from NODE, in whatever order
	 * the transport brought it: the replication layer puts a node's
	 * frames back in order (holding what comes early, within a bound)
	 * and notices what was lost, so a backend only delivers. Negative:
	 * a protocol error, a frame lost for good, too much held; the
	 * backend drops the connection, and the next one starts with a
	 * fresh snapshot. */
	int (*deliver)(void *ctx, const char *node, const struct pr_bp_frame *f);
	/* Write this node's snapshot for a node that came up: SEND once per
	 * frame, in order, before any change sent after this call. */
	int (*snapshot)(void *ctx, int (*send)(void *sctx, const uint8_t *frame, size_t len),
			void *sctx);
	/* This node's newest change sequence number (for heartbeats). */
	uint64_t (*seq)(void *ctx);
	void (*log)(const char *fmt, ...)
#ifdef __GNUC__
		__attribute__((format(printf, 1, 2)))
#endif
		;
	/* Added later: a backend checks sz before calling them. */
	/* A frame from NODE as it came, FRAME[0..len): one whole frame,
	 * checked here (a malformed one, or one of a kind a backend must not
	 * carry, is refused with a negative errno), then taken as deliver()
	 * takes it. */
	int (*deliver_bytes)(void *ctx, const char *node, const uint8_t *frame, size_t len);
	/* This node's HEARTBEAT into BUF (room for CAP bytes): its length, or
	 * a negative errno. Send one to every node that is up when nothing
	 * else went to it for heartbeat_ms, so that a lost last change is
	 * noticed. */
	int (*heartbeat)(void *ctx, uint8_t *buf, size_t cap);
	/* Log at LEVEL, syslog(3)'s: LOG_DEBUG for what an operator sees
	 * only with --verbose (each connection's coming and going, retries),
	 * LOG_NOTICE for a node's state (up, down), LOG_WARNING for a node
	 * refused or data not carried, LOG_ERR for a backend that cannot go
	 * on. log() above is LOG_INFO. Call it through pr_bridge_log(). */
	void (*vlog)(int level, const char *fmt, va_list ap);
	/* This node's snapshot a part at a time, for a node that came up:
	 * what snapshot() writes at once, which in a big table holds the
	 * daemon's every local request for as long (0.3 s at 10^6 names).
	 * snapshot_begin() fixes the change it is as of, and returns it (NULL:
	 * out of memory); every change broadcast() carries from then on must
	 * reach that node too, in any order with the parts (the replication
	 * layer holds them until the snapshot is whole). Each snapshot_more()
	 * sends its next part, SEND once per frame, in order, for a bounded
	 * amount of work: 1 while more remain, 0 once the last is sent, or a
	 * negative errno (drop the node). Not before snapshot_wait() says 0:
	 * it gives the nanoseconds to wait (CLOCK_MONOTONIC) before the next
	 * part of any snapshot, so that parts take at most half the daemon's
	 * time; a backend wakes the daemon then (a timer on its fd).
	 * snapshot_end() frees one, done or not. */
	void *(*snapshot_begin)(void *ctx);
	int (*snapshot_more)(void *ctx, void *snap,
			     int (*send)(void *sctx, const uint8_t *frame, size_t len), void *sctx);
	void (*snapshot_end)(void *ctx, void *snap);
	uint64_t (*snapshot_wait)(void *ctx);
	/* Whether this dispatch has had its time for what comes in (frames,
	 * handshakes): then the backend stops taking more (leaving it in
	 * its sockets or queues) and sees to it that its fd is readable
	 * again for the rest. While the daemon has local clients with
	 * requests, it dispatches again once it has served them for as long
	 * as the dispatch took, so that nodes sending as fast as they can
	 * take half its time at most. Call it through
	 * pr_bridge_input_over(). */
	bool (*input_over)(void *ctx);
};

/* Whether UP says this dispatch's time for input is over (false from a
 * daemon without input_over). */
static inline bool pr_bridge_input_over(const struct pr_bridge_up *up)
{
	return up->sz >= offsetof(struct pr_bridge_up, input_over) + sizeof(up->input_over) &&
	       up->input_over && up->input_over(up->ctx);
}

/* Whether UP has the upcalls that write a snapshot in parts. */
static inline bool pr_bridge_up_parts(const struct pr_bridge_up *up)
{
	return up->sz >= offsetof(struct pr_bridge_up, snapshot_wait) + sizeof(up->snapshot_wait) &&
	       up->snapshot_begin && up->snapshot_more && up->snapshot_end && up->snapshot_wait;
}

/* Timer TFD (a timerfd) set to go off once, NS nanoseconds from now. */
static inline void pr_bridge_timer_in(int tfd, uint64_t ns)
{
	struct itimerspec its;

	memset(&its, 0, sizeof(its));
	ns = ns ? ns : 1;
	its.it_value.tv_sec = (time_t)(ns / 1000000000u);
	its.it_value.tv_nsec = (long)(ns % 1000000000u);
	(void)timerfd_settime(tfd, 0, &its, NULL);
}

struct pr_bridge_config {
	size_t sz;
	const char *node;           /* this node's name */
	uint64_t incarnation;       /* fresh per daemon start */
	const char *listen;         /* "host:port", may be NULL */
	const char *const *peers;   /* "host:port", npeers of them */
	size_t npeers;
	const uint8_t *cookie;
	size_t cookie_len;
	uint32_t heartbeat_ms;      /* send one when idle this long; 0: PR_BRIDGE_HEARTBEAT_MS */
	uint32_t timeout_ms;        /* a peer silent this long is down; 0: PR_BRIDGE_TIMEOUT_MS */
	/* Added later: a backend checks sz before reading them. */
	/* Every this many bytes broadcast() queues for a node, send what
	 * the node's connection takes at once, mid-batch, rather than wait
	 * for flush(); 0: at flush() only. */
	uint32_t flush_bytes;
	const char *scope;          /* the registry's scope */
	/* Backend-specific "KEY=VALUE" (--bridge-opt), nopts of them: a
	 * backend refuses a KEY it does not know (pr_bridge_opts_check). */
	const char *const *opts;
	size_t nopts;
	/* "host:port" other nodes should dial to reach this one, when not
	 * listen (behind address translation, a proxy); NULL: listen. */
	const char *advertise;
	/* Bytes the backend may hold queued for other nodes, all of them
	 * together, past which it drops the node furthest behind; 0: its
	 * default (the TCP mesh: 256 MiB, its connections' record buffers
	 * counted too). */
	uint64_t queue_max;
};

/* One node as the backend sees it, for procreg nodes. */
struct pr_bridge_node_info {
	const char *name;
	const char *addr;
	uint64_t incarnation;
	uint64_t bytes_in, bytes_out;
};

/* One peer the config named (peers[]), for procreg stats: it has a
 * series whether or not it is connected. */
struct pr_bridge_peer_info {
	const char *addr;           /* as the config gave it */
	const char *node;           /* the node last authenticated there, "" before any */
	bool up;                    /* a connection to it is up now */
};
struct pr_bridge_backend {
	size_t sz;
	const char *name;
	/* Start: bind, start dialing. NULL with *err set on failure. C and
	 * UP (and the cookie) are valid during the call only: copy what is
	 * kept. */
	void *(*open)(const struct pr_bridge_config *c, const struct pr_bridge_up *up, int *err);
	/* The fd the daemon polls (EPOLLIN). */
	int (*fd)(void *b);
	/* The fd was readable: do what is ready, without blocking. */
	void (*dispatch)(void *b);
	/* Carry one of this node's frames to every node that is up. */
	int (*broadcast)(void *b, const uint8_t *frame, size_t len);
	/* End of a batch of work: push out what broadcast() queued. */
	void (*flush)(void *b);
	/* Call CB for every node that is up. */
	void (*nodes)(void *b, void (*cb)(void *arg, const struct pr_bridge_node_info *n), void *arg);
	void (*close)(void *b);
	/* Added later: the daemon checks sz before calling them. */
	/* Call CB for every peer the config named, connected or not, once
	 * each, in the config's order; a peer found to be this node itself
	 * is left out. NULL: the backend has no peers of that kind (its
	 * nodes find each other some other way). */
	void (*peers)(void *b, void (*cb)(void *arg, const struct pr_bridge_peer_info *p),
		      void *arg);
};

/* The members a backend must fill: everything up to close. */
#define PR_BRIDGE_BACKEND_MIN_SZ \
	(offsetof(struct pr_bridge_backend, close) + sizeof(void (*)(void *)))

/* ---- for backends: what every open() does with what it is given ---- */

/* C, as this header's struct: members past C's sz zeroed (a caller built
 * with an older header), timings left 0 set to their defaults. */
static inline void pr_bridge_config_take(struct pr_bridge_config *dst,
					 const struct pr_bridge_config *c)
{
	memset(dst, 0, sizeof(*dst));
	memcpy(dst, c, c->sz < sizeof(*dst) ? c->sz : sizeof(*dst));
	if (!dst->heartbeat_ms)
		dst->heartbeat_ms = PR_BRIDGE_HEARTBEAT_MS;
	if (!dst->timeout_ms)
		dst->timeout_ms = PR_BRIDGE_TIMEOUT_MS;
}

static inline void pr_bridge_up_take(struct pr_bridge_up *dst, const struct pr_bridge_up *up)
{
	memset(dst, 0, sizeof(*dst));
	memcpy(dst, up, up->sz < sizeof(*dst) ? up->sz : sizeof(*dst));
}

/* Log through UP at LEVEL (LOG_*): with vlog() where the daemon offers
 * it, else with log(), at the daemon's LOG_INFO. */
static inline void pr_bridge_log(const struct pr_bridge_up *up, int level, const char *fmt, ...)
#ifdef __GNUC__
	__attribute__((format(printf, 3, 4)))
#endif
	;
static inline void pr_bridge_log(const struct pr_bridge_up *up, int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (up->sz > offsetof(struct pr_bridge_up, vlog) && up->vlog) {
		up->vlog(level, fmt, ap);
	} else if (up->log) {
		char buf[1024];

		vsnprintf(buf, sizeof(buf), fmt, ap);
		up->log("%s", buf);
	}
	va_end(ap);
}

/* Whether OPT ("KEY=VALUE") is for KEY. */
static inline bool pr_bridge_opt_is(const char *opt, const char *key)
{
	size_t kl = strlen(key);

	return !strncmp(opt, key, kl) && opt[kl] == '=';
}

/* The value of option KEY in C (the last one given wins), or NULL. */
static inline const char *pr_bridge_opt(const struct pr_bridge_config *c, const char *key)
{
	const char *v = NULL;

	for (size_t i = 0; i < c->nopts; i++)
		if (pr_bridge_opt_is(c->opts[i], key))
			v = c->opts[i] + strlen(key) + 1;
	return v;
}

/* Every option of C's is one of KNOWN (NULL-terminated; NULL itself: a
 * backend that takes none): 0, or -EINVAL with a line in the log that
 * names the key it does not know, and not its value (a misspelt
 * "pasword=..." must not put a secret in the log). */
static inline int pr_bridge_opts_check(const struct pr_bridge_config *c,
				       const struct pr_bridge_up *up, const char *backend,
				       const char *const *known)
{
	for (size_t i = 0; i < c->nopts; i++) {
		const char *o = c->opts[i];
		size_t kl = strcspn(o, "=");
		bool ok = false;
		char want[512];
		size_t wl = 0;

		for (size_t k = 0; known && known[k]; k++)
			ok |= pr_bridge_opt_is(o, known[k]);
		if (ok)
			continue;
		want[0] = 0;
		for (size_t k = 0; known && known[k] && wl < sizeof(want); k++)
			wl += (size_t)snprintf(want + wl, sizeof(want) - wl, "%s%s", k ? ", " : "",
					       known[k]);
		up->log("bridge: %s: unknown option '%.*s' (--bridge-opt %.*s=...): %s%s", backend,
			(int)kl, o, (int)kl, o, known && known[0] ? "want one of " : "it takes none",
			want);
		return -EINVAL;
	}
	return 0;
}

#ifdef __cplusplus
}
#endif
#endif /* PROCREG_BACKEND_H */
