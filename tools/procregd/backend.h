/*
 * backend.h - the boundary between procregd's replication logic (bridge.c)
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
 * Frames are the replication protocol's (lib/bridge_proto.h): the
 * replication layer builds SNAP and CHANGE frames, the backend owns HELLO,
 * AUTH, PEERS and HEARTBEAT, and hands every frame it receives to deliver()
 * already checked by procreg__bp_next(). Keeping them from strangers on
 * the way is the backend's business: the mesh authenticates and encrypts
 * every frame (bridge_sec.h), nats.c MACs its messages and leaves the
 * encryption to TLS to the server. The cookie comes in the config for
 * that; the replication layer never sees a key.
 */
#ifndef PROCREGD_BACKEND_H
#define PROCREGD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "bridge_proto.h"

#define PR_BRIDGE_BACKEND_SYMBOL "procreg_bridge_backend_v1"

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
	void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
};

struct pr_bridge_config {
	size_t sz;
	const char *node;           /* this node's name */
	uint64_t incarnation;       /* fresh per daemon start */
	const char *listen;         /* "host:port", may be NULL */
	const char *const *peers;   /* "host:port", npeers of them */
	size_t npeers;
	const uint8_t *cookie;
	size_t cookie_len;
	uint32_t heartbeat_ms;      /* send one when idle this long */
	uint32_t timeout_ms;        /* a peer silent this long is down */
	/* Added later: a backend checks sz before reading them. */
	/* Every this many bytes broadcast() queues for a node, send what
	 * the node's connection takes at once, mid-batch, rather than wait
	 * for flush(); 0: at flush() only. */
	uint32_t flush_bytes;
	const char *scope;          /* the registry's scope */
	const char *const *opts;    /* backend-specific "KEY=VALUE", nopts of them */
	size_t nopts;
	/* "host:port" other nodes should dial to reach this one, when not
	 * listen (behind address translation, a proxy); NULL: listen. */
	const char *advertise;
};

/* One node as the backend sees it, for procreg nodes. */
struct pr_bridge_node_info {
	const char *name;
	const char *addr;
	uint64_t incarnation;
	uint64_t bytes_in, bytes_out;
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
};

/* The members a backend must fill: everything up to close. */
#define PR_BRIDGE_BACKEND_MIN_SZ \
	(offsetof(struct pr_bridge_backend, close) + sizeof(void (*)(void *)))

extern const struct pr_bridge_backend pr_mesh_backend;

#endif /* PROCREGD_BACKEND_H */
