/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * procreg.h - the public interface of libprocreg, a process registry for
 * one Linux host.
 *
 * Services register names for themselves ("payments" -> this process, with
 * metadata "unix:/run/payments.sock") and look each other up. Names live
 * exactly as long as the process that owns them: procregd, the one daemon
 * per scope, watches every owner through a pidfd and removes its names the
 * moment it exits.
 *
 * Reads and writes take different roads:
 *
 *  - procreg_lookup() and procreg_foreach() read the shared table directly
 *    (a read-only mapping of <dir>/procreg.<scope>) under cross-process RCU.
 *    They make no system call, take no lock, never wait for the daemon and
 *    keep working while the daemon is down. They copy results out, so
 *    nothing the caller holds points into shared memory.
 *
 *  - procreg_register(), procreg_unregister(), procreg_batch() and
 *    procreg_sync() talk to procregd over a unix socket. A call returns
 *    only once the daemon has published the change, so a lookup made after
 *    it returns sees it.
 *
 * Conventions. Every function that can fail returns a negative errno value
 * (and NULL + errno for procreg_open()); procreg_strerror() turns one into
 * a message. Handles are opaque.
 *
 * Sized structs. Every struct that crosses this interface, in or out,
 * starts with size_t sz: the size of the struct as the caller was
 * compiled, so that structs can grow at the end without breaking a
 * program built against an older header, nor one built against a newer
 * header that runs on an older library. Declare them with PROCREG_OPTS(),
 * which sets .sz and zeroes the rest. Every function checks .sz the same
 * way:
 *   - NULL options mean the defaults (where the function says so);
 *   - an .sz of 0, or below the struct's size in the first release
 *     (0.1), is refused: -EINVAL (procreg_open(): NULL, errno EINVAL);
 *   - an .sz beyond what this library knows is accepted only if every
 *     byte past what it knows is zero: a non-zero one asks for something
 *     it cannot do, and is refused with -EOPNOTSUPP rather than ignored;
 *     an .sz over 4096 is refused with -E2BIG (no struct comes near it:
 *     it is an .sz never set);
 *   - fields past a smaller .sz (a program built against an older header)
 *     are taken as unset, and a struct the library fills is filled only
 *     up to the caller's .sz.
 * A struct the library hands to a callback (procreg_foreach() and the
 * like) has the library's .sz: a member added in a later version is there
 * only if .sz covers it (offsetof(member) + sizeof(member) <= .sz).
 * The size travels in the struct rather than as an extra argument so that
 * one rule serves a struct passed alone, an array of them (procreg_batch(),
 * whose elements are .sz bytes apart) and one given to a callback.
 *
 * Threads. A procreg_t may be shared by any number of threads. Lookups run
 * in parallel without contention; calls that talk to the daemon serialise
 * on the handle's connection. Each thread that reads claims one reader slot
 * on its first read and gives it back when it exits: slots live in memory
 * of the reading process's own (a sealed memfd, 63 threads a page), which
 * it hands to procregd so that reclamation waits for its readers. A child
 * created by fork() may keep using the handle: it makes its own pages and
 * opens its own connection on first use, whatever the parent's other
 * threads were doing with the handle when it forked (a request the parent
 * had in flight stays the parent's; notices of names the parent lost are
 * not the child's). fork() waits, at most, for another thread to finish
 * claiming or giving back a reader slot; never for the daemon.
 *
 * Trust. procreg_open() maps a table only if it belongs to root, to the
 * calling user (its effective uid), to the system user procregd@.service
 * runs procregd as ("procreg", the build's PROCREG_DAEMON_USER; the
 * caller's own $PROCREG_DAEMON_USER names another, empty: none; ignored in
 * a set-user-ID program), or to the user named by .trust_uid or
 * $PROCREG_TRUST_UID, and is writable by its owner alone; it talks only to
 * a daemon of the table's owner (or root's: a socket systemd holds). That
 * user is looked up (getpwnam_r) only when a table's owner is none of the
 * others, at open: a user that does not exist, or a failed lookup, trusts
 * no one more. Anything else fails with EPERM: in a shared directory such
 * as /dev/shm, any user could have made the file.
 *
 * Limits (each enforced, with the error named):
 *   name            1..PROCREG_NAME_MAX bytes, no NUL       -ENAMETOOLONG / -EINVAL
 *   metadata        0..PROCREG_META_MAX bytes, any bytes    -EMSGSIZE
 *   names and memberships per process
 *                   procregd --max-names-per-proc (65536)   -EDQUOT
 *   table size      procregd --max-size (1 GiB, sparse)     -ENOSPC
 *   clients         procregd --max-clients (1024)           connection closed
 */
#ifndef PROCREG_H
#define PROCREG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "procreg/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PROCREG_BUILDING) && defined(__GNUC__)
#define PROCREG_API __attribute__((visibility("default")))
#else
#define PROCREG_API
#endif

#define PROCREG_NAME_MAX 255
#define PROCREG_META_MAX 1024

/* The version of the library loaded at run time ("0.1.0"); the headers'
 * own is PROCREG_VERSION_STRING (procreg/version.h). */
PROCREG_API const char *procreg_version(void);

typedef struct procreg procreg_t;

/* Declare a sized struct (options, or a struct to be filled) with its size
 * set and every other member zero unless given:
 *   PROCREG_OPTS(procreg_opts, o, .scope = "test");
 *   PROCREG_OPTS(procreg_entry, e);
 */
#define PROCREG_OPTS(TYPE, NAME, ...) \
	struct TYPE NAME = { .sz = sizeof(struct TYPE), __VA_ARGS__ }

struct procreg_opts {
	size_t sz;          /* sizeof(struct procreg_opts) */
	const char *scope;  /* NULL: $PROCREG_SCOPE, else "default" */
	const char *dir;    /* NULL: $PROCREG_DIR, else "/dev/shm" */
	const char *socket; /* NULL: the path the daemon published in the table */
	uint32_t trust_uid; /* also trust a table of this user (0: none but
			     * root's, our own and the daemon's system
			     * user's); else $PROCREG_TRUST_UID */
	/* Since 0.2. How long a call that talks to procregd waits for each
	 * thing it waits on (the connection, room to send, the reply), in
	 * ms; 0: no limit. A call that runs out fails with -ETIMEDOUT and
	 * drops the handle's connection (the next call makes a new one): a
	 * request already sent may still take effect, when the daemon gets
	 * to it. Reads never wait for the daemon, and the calls that wait
	 * for an event (procreg_wait(), procreg_lost(), ...) keep their own
	 * timeouts. */
	int timeout_ms;
};

/*
 * Map the table of a scope and prepare to talk to its daemon (the
 * connection itself is made on the first call that needs it). NULL opts
 * means defaults. Fails with NULL and errno: EINVAL (.sz unset or too
 * small), EOPNOTSUPP (options this library does not know), ENOENT (no table: procregd has
 * never run for this scope), EPROTO (the file is not a procreg table of
 * this layout version), EPERM (the table belongs to a user this process
 * does not trust, is writable by others, or its path is a symbolic link:
 * see "Trust" above), EACCES, ENOMEM.
 */
PROCREG_API procreg_t *procreg_open(const struct procreg_opts *opts);

/* Release the mapping, the connection and this handle's reader slots. No
 * other thread may be using the handle. Names stay registered: they belong
 * to the process, not to the handle. */
PROCREG_API void procreg_close(procreg_t *reg);

/* Register NAME for the calling process. -EEXIST if another process holds
 * it; registering a name you already hold replaces its metadata. The same
 * as procreg_register_opts() with NULL options. */
PROCREG_API int procreg_register(procreg_t *reg, const char *name,
				 const void *meta, size_t meta_len);

/*
 * Register NAME with options: standby ownership and leases.
 *
 *  PROCREG_QUEUE        if NAME is taken, wait in line: the call returns
 *                       -EINPROGRESS, and when the owner dies or lets go,
 *                       the next live process in line owns the name at once
 *                       (event PROCREG_EV_TRANSFERRED). procreg_wait_owner()
 *                       waits for that moment.
 *  PROCREG_REPLACEABLE  a later PROCREG_REPLACE registration may take NAME
 *                       over (event PROCREG_EV_REPLACED).
 *  PROCREG_REPLACE      if NAME is held as replaceable, take it over.
 *  PROCREG_PIDFD        NAME is for the process .pidfd refers to (from
 *                       pidfd_open(2)), not the caller: the caller must
 *                       have that process's uid, or be root (-EPERM).
 *  .lease_ms            a lease: unless procreg_refresh() renews it within
 *                       that time, NAME is released even though the owner
 *                       lives (event PROCREG_EV_EXPIRED), or, with
 *                       PROCREG_LEASE_MARK, kept and marked unhealthy until
 *                       the next refresh.
 *  .lost_signal         a signal (SIGTERM, say) procregd sends the owner if
 *                       it loses a name to another node's registration
 *                       (see procreg_lost()): for the process, any name it
 *                       holds, from this registration on; 0: none. -EINVAL
 *                       for a number that is no signal.
 */
#define PROCREG_PIDFD 0x1
#define PROCREG_QUEUE 0x2
#define PROCREG_REPLACE 0x4
#define PROCREG_REPLACEABLE 0x8
#define PROCREG_LEASE_MARK 0x10

struct procreg_register_opts {
	size_t sz;                 /* sizeof(struct procreg_register_opts) */
	unsigned int flags;        /* PROCREG_QUEUE | PROCREG_REPLACE | ... */
	uint32_t lease_ms;         /* 0: no lease */
	int lost_signal;           /* 0: none */
	int pidfd;                 /* with PROCREG_PIDFD: the owner */
};

/* NULL opts: as procreg_register(). */
PROCREG_API int procreg_register_opts(procreg_t *reg, const char *name, const void *meta,
				      size_t meta_len,
				      const struct procreg_register_opts *opts);

/* Renew NAME's lease (its owner's uid, or root): -ENOENT if not
 * registered, -EINVAL if it has no lease. A name marked unhealthy is
 * healthy again. NAME is also taken as a group: the calling process's
 * leased membership of it, if it has one, is renewed too (and then the
 * call succeeds though no name NAME exists). A membership joined with
 * PROCREG_PIDFD for another process is renewed by that process only. */
PROCREG_API int procreg_refresh(procreg_t *reg, const char *name);

/* Return 0 once the calling process owns NAME (after PROCREG_QUEUE), or
 * -ETIMEDOUT after TIMEOUT_MS (-1: no limit). Follows the change feed. */
PROCREG_API int procreg_wait_owner(procreg_t *reg, const char *name, int timeout_ms);

/* Register NAME for the process PIDFD refers to (from pidfd_open(2)). The
 * caller must have that process's uid, or be root: -EPERM otherwise;
 * -EBADF for a file that is no process's pidfd (a thread's included).
 * Shorthand for procreg_register_opts() with PROCREG_PIDFD. */
PROCREG_API int procreg_register_pidfd(procreg_t *reg, int pidfd,
				       const char *name, const void *meta,
				       size_t meta_len);

/* Remove NAME. Only its owner, a process of the owner's uid, or root may:
 * -EPERM otherwise; -ENOENT if it is not registered. */
PROCREG_API int procreg_unregister(procreg_t *reg, const char *name);

/*
 * One registered name (or membership), copied out of the table. The
 * metadata goes to a buffer of the caller's: .meta and .meta_size say
 * where and how much room (NULL, 0: metadata not wanted), and .meta_len
 * says how long it is, which may be more than .meta_size (then only
 * .meta_size bytes were copied: ask again with room for .meta_len). So a
 * lookup allocates nothing, and the metadata limit is the table's, not
 * this struct's. In a struct given to a callback, .meta points to the
 * library's copy, valid until the callback returns.
 */
#define PROCREG_ENTRY_REPLACEABLE 0x1  /* a PROCREG_REPLACE registration may take it */
#define PROCREG_ENTRY_LEASED 0x2       /* registered with a lease (ttl) */
#define PROCREG_ENTRY_UNHEALTHY 0x4    /* its lease expired and was not refreshed */

struct procreg_entry {
	size_t sz;                 /* sizeof(struct procreg_entry): set it (PROCREG_OPTS) */
	void *meta;                /* in: where the metadata goes; NULL: nowhere */
	size_t meta_size;          /* in: bytes of room at .meta */
	size_t meta_len;           /* out: the metadata's length (more than .meta_size: cut) */
	pid_t pid;                 /* owner's pid (on its node) */
	uint32_t node;             /* 0: this host */
	uint32_t flags;            /* PROCREG_ENTRY_* */
	uint32_t uid;              /* owner's uid */
	uint64_t start_time;       /* owner's start time, clock ticks since boot */
	uint64_t registered_ns;    /* CLOCK_REALTIME of the registration */
	char name[PROCREG_NAME_MAX + 1];
};

/*
 * Look NAME up. 0 and *out filled, -ENOENT if absent, -ENAMETOOLONG or
 * -EINVAL for a name that could never be registered, -ENOMEM if this
 * thread's first read found no memory for its reader state, -ESTALE if the
 * table changed under each of many tries (only a damaged table does that). No system call
 * (but a thread's first read, and the first after a daemon starts, which
 * hand the daemon this process's reader pages without waiting for it), no
 * lock; safe from any thread.
 * OUT may be NULL to test for presence only; else its .sz is checked
 * (-EINVAL, -EOPNOTSUPP: see "Sized structs").
 *
 * A name whose owner has just died may still be found until the daemon has
 * processed the death (normally within microseconds; for a user whose
 * processes' names leave faster than its feed pace allows, at that pace);
 * procreg_sync() makes every death that happened before it visible (see
 * there).
 */
PROCREG_API int procreg_lookup(procreg_t *reg, const char *name,
			       struct procreg_entry *out);

/*
 * Look N names up in one call: NAMES[i] into OUT[i], and RES[i] gets what
 * procreg_lookup() would have returned for it (0, -ENOENT, -EINVAL,
 * -ENAMETOOLONG, -ESTALE). Returns how many were found, or a negative
 * errno for the call as a whole: -EINVAL (NULL NAMES or RES with N > 0, N
 * over INT_MAX, or an entry whose .sz differs from the first's),
 * -EOPNOTSUPP or -E2BIG (the first entry's .sz: see "Sized structs"),
 * -ENOMEM (as procreg_lookup()); then no RES[i] is written.
 * OUT may be NULL (presence only); else its entries are OUT[0].sz bytes
 * apart, every one with that .sz. Each name is looked up as by
 * procreg_lookup(), a few at a time: their memory accesses overlap, so in
 * a table too big for the caches a name costs much less than a lookup of
 * its own. No system call, no lock.
 */
PROCREG_API int procreg_lookup_many(procreg_t *reg, const char *const *names, size_t n,
				    struct procreg_entry *out, int *res);

/*
 * Call CB for every name, with a copy of its entry, until CB returns
 * non-zero (which procreg_foreach then returns). A name that exists for the
 * whole walk is seen exactly once; names added or removed meanwhile may or
 * may not be. CB runs outside the read-side critical section.
 */
typedef int (*procreg_entry_cb)(const struct procreg_entry *e, void *arg);
PROCREG_API int procreg_foreach(procreg_t *reg, procreg_entry_cb cb, void *arg);

/*
 * Pipelined writes: send N operations without waiting for each reply.
 * Each op's .result gets 0 or a negative errno, as the single call would
 * return. The call itself returns 0 once every op is answered, or a
 * negative errno if the connection failed (ops not yet answered then hold
 * -ECANCELED).
 *
 * The ops are .sz bytes apart, and every op must have the same .sz as the
 * first: else the call returns -EINVAL (or -EOPNOTSUPP, for a tail this
 * library does not know) before sending anything, and no .result is
 * written. An op takes the options of the single calls: a REGISTER those
 * of procreg_register_opts(), a JOIN those of procreg_join_opts(); an
 * UNREGISTER or a LEAVE none (.flags, .lease_ms, .lost_signal must be 0:
 * -EINVAL in .result). An op with PROCREG_PIDFD travels alone in its
 * packet (the pidfd goes with it), so a batch of them pipelines less.
 */
enum procreg_op_kind {
	PROCREG_OP_REGISTER = 1,
	PROCREG_OP_UNREGISTER = 2,
	PROCREG_OP_JOIN = 3,        /* .name is the group */
	PROCREG_OP_LEAVE = 4,
};

struct procreg_op {
	size_t sz;                 /* sizeof(struct procreg_op): set it (PROCREG_OPTS) */
	int kind;                  /* enum procreg_op_kind */
	const char *name;
	const void *meta;          /* REGISTER, JOIN */
	size_t meta_len;
	unsigned int flags;        /* PROCREG_PIDFD, and for REGISTER PROCREG_QUEUE ... */
	uint32_t lease_ms;         /* REGISTER, JOIN: 0, no lease */
	int lost_signal;           /* REGISTER: 0, none */
	int pidfd;                 /* with PROCREG_PIDFD: the owner */
	int result;                /* out */
};

PROCREG_API int procreg_batch(procreg_t *reg, struct procreg_op *ops, size_t n);

/*
 * Groups. A process joins any number of groups, each membership with its
 * own metadata; a group exists while it has members and may hold very many
 * (join and leave cost O(1), amortised). A process leaves every group when
 * it exits, in the same step that removes its names. Group names follow
 * the rules of names; a group and a name may share a name.
 */

/* Join GROUP (joining again replaces the membership's metadata). The same
 * as procreg_join_opts() with NULL options. */
PROCREG_API int procreg_join(procreg_t *reg, const char *group, const void *meta,
			     size_t meta_len);

/*
 * Join with options:
 *  PROCREG_PIDFD   the member is the process .pidfd refers to, under the
 *                  rules of procreg_register_opts().
 * A membership has no owner to queue behind or replace: every other flag
 * is -EINVAL. It may have a lease:
 *  .lease_ms       unless renewed within that time, the membership ends
 *                  (a PROCREG_EV_LEFT event, as for procreg_leave), though
 *                  the member lives. procreg_refresh(reg, group), called
 *                  by the member process itself, renews it; joining again
 *                  sets a new lease (or, with 0, none).
 */
struct procreg_join_opts {
	size_t sz;                 /* sizeof(struct procreg_join_opts) */
	unsigned int flags;        /* PROCREG_PIDFD */
	int pidfd;                 /* with PROCREG_PIDFD: the member */
	uint32_t lease_ms;         /* 0: no lease */
};

/* NULL opts: as procreg_join(). */
PROCREG_API int procreg_join_opts(procreg_t *reg, const char *group, const void *meta,
				  size_t meta_len, const struct procreg_join_opts *opts);
/* Join for the process PIDFD refers to, under the rules of
 * procreg_register_pidfd(): shorthand for procreg_join_opts() with
 * PROCREG_PIDFD. */
PROCREG_API int procreg_join_pidfd(procreg_t *reg, int pidfd, const char *group,
				   const void *meta, size_t meta_len);
/* Leave GROUP: -ENOENT if not a member. */
PROCREG_API int procreg_leave(procreg_t *reg, const char *group);

/*
 * Call CB for every member of GROUP, with a copy of its membership (.name
 * is the group, .meta the membership's metadata), until CB returns
 * non-zero, which is returned. Lock-free, no system call; a member that
 * stays for the whole walk is seen exactly once. A group with no members
 * calls CB never and returns 0.
 */
PROCREG_API int procreg_members(procreg_t *reg, const char *group, procreg_entry_cb cb,
				void *arg);

/* Members of GROUP, and those of them on this host: O(1), from counters. */
PROCREG_API int procreg_group_count(procreg_t *reg, const char *group, uint64_t *members,
				    uint64_t *local_members);

/* One group, as procreg_groups() gives it to its callback (.sz: the
 * library's). */
struct procreg_group {
	size_t sz;                 /* sizeof(struct procreg_group) */
	char name[PROCREG_NAME_MAX + 1];
	uint64_t members;
	uint64_t local_members;
};

typedef int (*procreg_group_cb)(const struct procreg_group *g, void *arg);
/* Call CB for every group, as procreg_foreach() does for names. */
PROCREG_API int procreg_groups(procreg_t *reg, procreg_group_cb cb, void *arg);

/*
 * The change feed. Every change gets a sequence number and goes into a ring
 * in the shared table: any process may follow it without talking to the
 * daemon, and the daemon never waits for a follower. A follower that falls
 * more than the ring's size behind is told so (-EOVERFLOW) and should
 * re-read the table (procreg_foreach) before going on.
 */
enum procreg_event_type {
	PROCREG_EV_REGISTERED = 1,  /* .name registered by .pid */
	PROCREG_EV_UNREGISTERED,    /* .name removed by request */
	PROCREG_EV_UPDATED,         /* .name's metadata replaced by its owner */
	PROCREG_EV_JOINED,          /* .pid joined group .name (or replaced its metadata) */
	PROCREG_EV_LEFT,            /* .pid left group .name */
	PROCREG_EV_DIED,            /* .pid exited: it held .name (a name, or a group if .is_group) */
	PROCREG_EV_TRANSFERRED,     /* .name passed to .pid, next in line */
	PROCREG_EV_REPLACED,        /* .name taken over by .pid (PROCREG_REPLACE) */
	PROCREG_EV_EXPIRED,         /* .name's lease expired: released, or marked unhealthy */
	PROCREG_EV_REFRESHED,       /* .name's lease renewed after it had expired */
	PROCREG_EV_NODE_DOWN,       /* .node went down: its .name left the table with it */
	PROCREG_EV_CONFLICT,        /* .name was registered earlier on another node: .pid lost it */
};

struct procreg_event {
	size_t sz;                  /* sizeof(struct procreg_event): set it (PROCREG_OPTS) */
	uint64_t seq;               /* 1, 2, 3... in the order of the writes */
	uint64_t time_ns;           /* CLOCK_REALTIME */
	int type;                   /* enum procreg_event_type */
	int is_group;               /* .name is a group */
	pid_t pid;
	uint32_t node;
	uint32_t uid;
	uint64_t start_time;
	char name[PROCREG_NAME_MAX + 1];
};

/* The sequence number of the newest event (0 before any): start following
 * from here to see only what happens next. */
PROCREG_API uint64_t procreg_feed_head(procreg_t *reg);

/*
 * The event after *CURSOR: 0, *EV filled (up to its .sz) and *CURSOR
 * advanced to its sequence number. Blocks up to TIMEOUT_MS milliseconds for one (0: do not
 * block; -1: no limit) on a futex in the table, without polling; before
 * it first sleeps, the handle tells procregd it follows (a round trip on
 * its connection, made if need be), so that the daemon wakes the futex
 * only while someone may sleep on it (one it cannot reach but that runs
 * is asked again every 100 ms):
 * -ETIMEDOUT when none came. -EOVERFLOW when the events after *CURSOR were
 * overwritten before being read: *CURSOR then moves to just before the
 * oldest event still in the ring. -EINTR if a signal interrupted the wait.
 */
PROCREG_API int procreg_next_event(procreg_t *reg, uint64_t *cursor, struct procreg_event *ev,
				   int timeout_ms);

/*
 * A file descriptor for poll(2) and epoll loops: it turns readable after
 * the daemon publishes events. Then call procreg_feed_fd_clear() and read
 * events with procreg_next_event(..., 0) until -ETIMEDOUT: clearing first
 * means an event published meanwhile leaves it readable, so none is
 * missed; it may also turn readable for events already read (the daemon
 * tells after publishing them), which then finds none. A user's fds (not
 * root's) are told 16,384 times a second at most, all of them together:
 * under a storm of changes each hears a little later, and of more events
 * at once. The fd is a
 * connection to procregd of its own; close(2) it when done. Returns the fd or
 * a negative errno (-ECONNREFUSED without a daemon).
 */
PROCREG_API int procreg_feed_fd(procreg_t *reg);
/* Drain a procreg_feed_fd(): 0, or -ECONNRESET if the daemon went away
 * (make a new one once it is back). */
PROCREG_API int procreg_feed_fd_clear(int fd);

/* Return 0 as soon as NAME is registered (at once if it is), or
 * -ETIMEDOUT after TIMEOUT_MS (-1: no limit). Follows the change feed: no
 * polling, no busy loop. */
PROCREG_API int procreg_wait(procreg_t *reg, const char *name, int timeout_ms);
/* The same for "GROUP has at least COUNT members". */
PROCREG_API int procreg_wait_group(procreg_t *reg, const char *group, uint64_t count,
				   int timeout_ms);

/*
 * Names lost. With replication (procregd --node), two nodes cut off from
 * each other may each register a name; once they meet again the earlier
 * registration keeps it everywhere, and the later one's owner loses it
 * while it runs. procregd then tells the owner on each of its connections
 * to the daemon: a handle reads what came on its own connection (made by
 * its first call that talks to the daemon, or by procreg_lost_fd()). The
 * change feed records it too (PROCREG_EV_CONFLICT), for anyone;
 * procreg_register_opts' .lost_signal has the daemon signal the owner.
 */
#define PROCREG_LOST_CONFLICT 1    /* another node's earlier registration won */

struct procreg_lost {
	size_t sz;                 /* sizeof(struct procreg_lost): set it (PROCREG_OPTS) */
	int reason;                /* PROCREG_LOST_*; a later library may add others */
	pid_t winner_pid;          /* the winning owner's pid, on its node */
	uint64_t time_ns;          /* CLOCK_REALTIME when the daemon decided */
	char name[PROCREG_NAME_MAX + 1];
	char node[64];             /* the winning registration's node */
};

/*
 * The next name this process lost, as its owner: 0 and *OUT filled (the
 * members its .sz covers); -ETIMEDOUT if none came within TIMEOUT_MS (0:
 * do not wait; -1: no limit); -EINVAL, -EOPNOTSUPP for a bad .sz (see
 * "Sized structs"); -ECONNREFUSED
 * without a daemon; -ECONNRESET if the connection broke (notices not yet
 * read on it are gone; the change feed has them); -EINTR if a signal
 * interrupted the wait.
 */
PROCREG_API int procreg_lost(procreg_t *reg, struct procreg_lost *out, int timeout_ms);

/* The handle's connection to procregd, for poll(2) and epoll: readable
 * when a notice may be waiting (then call procreg_lost(reg, &l, 0) until
 * -ETIMEDOUT). It belongs to the handle: do not read, write or close it.
 * After -ECONNRESET it is another: ask again. The fd, or a negative errno
 * (-ECONNREFUSED without a daemon). */
PROCREG_API int procreg_lost_fd(procreg_t *reg);

/* Since 0.2. A round trip to procregd on a connection of its own: 0 if it
 * answered within TIMEOUT_MS (-1: no limit), -ETIMEDOUT if not (it runs,
 * but is stopped, hung or overloaded), -ECONNREFUSED if none serves the
 * scope, -EINVAL for a TIMEOUT_MS of 0 or below -1. The table's record of
 * a daemon says only that one started and did not stop cleanly; this says
 * it works. */
PROCREG_API int procreg_ping(procreg_t *reg, int timeout_ms);

/* Return once the daemon has processed every request and every process
 * death that happened before the call. One exception: the names of a dead
 * process of another user (not root, not procregd's) whose events go past
 * that user's feed pace (procregd's --max-feed-rate-per-uid) leave at that
 * pace, and the call does not wait for them: one user's deaths do not
 * hold up another's calls. Those of the caller's own user it waits for. */
PROCREG_API int procreg_sync(procreg_t *reg);

/* Counters, read from the table header without asking the daemon: *OUT
 * filled up to its .sz. */
struct procreg_stats {
	size_t sz;                  /* sizeof(struct procreg_stats): set it (PROCREG_OPTS) */
	uint64_t names;
	uint64_t groups;
	uint64_t memberships;       /* over all groups */
	uint64_t joins;             /* since the table was created */
	uint64_t leaves;
	uint64_t processes;         /* processes holding at least one name */
	uint64_t arena_size;        /* bytes the table may grow to */
	uint64_t arena_used;        /* bytes in live records and the index */
	uint64_t arena_top;         /* high-water mark of the arena */
	uint64_t index_capacity;    /* slots in the hash index */
	uint64_t grace_periods;
	uint64_t registrations;     /* since the table was created */
	uint64_t unregistrations;
	uint64_t deaths;            /* owner processes whose exit removed names */
	uint64_t reader_slots;      /* reader processes procregd can hold pages of (--max-readers) */
	uint64_t reader_slots_used; /* reader processes whose pages it holds */
	pid_t daemon_pid;           /* 0: no daemon running (stopped or killed) */
	uint64_t daemon_started_ns; /* CLOCK_REALTIME */
};

PROCREG_API int procreg_stats(procreg_t *reg, struct procreg_stats *out);

/* The table's and the socket's paths, for messages. */
PROCREG_API const char *procreg_table_path(const procreg_t *reg);
PROCREG_API const char *procreg_socket_path(const procreg_t *reg);

/* A message for a negative errno returned by this library. */
PROCREG_API const char *procreg_strerror(int err);

/* ==== Introspection =====================================================
 *
 * What operators' tools read: the table's header, its reader registry, a
 * verification of the whole table, and the names of the other nodes when
 * the daemon replicates. procreg(1)'s check, readers, top, stats and
 * nodes, procreg-trace and procreg-bench are built on these calls alone.
 * None talks to the daemon or writes shared memory, so each works while
 * the daemon is down (showing what it last wrote) and never slows it.
 *
 * The structs here are sized structs (see "Sized structs" above): an
 * output the caller passes is declared with PROCREG_OPTS() and filled up
 * to its .sz; one handed to a callback has the library's .sz.
 *
 * Lists (readers, nodes) come through a callback, as procreg_foreach()'s
 * names do, rather than in a caller-sized array: their number changes from
 * one moment to the next, which an array would meet with a count, an
 * allocation and a retry. A callback that returns non-zero stops the
 * walk, and the call returns that value.
 */

/* The table as a whole, from its header (daemon-written counters are each
 * the value before or after one change). */
struct procreg_table_info {
	size_t sz;                 /* sizeof(struct procreg_table_info): set it (PROCREG_OPTS) */
	uint32_t layout_version;   /* of the shared-memory layout, not of the library */
	uint32_t name_max;         /* PROCREG_NAME_MAX of the build that made it */
	uint32_t meta_max;
	uint32_t max_readers;      /* reader processes procregd can hold pages of */
	uint64_t file_size;        /* bytes: the table file, all of it mapped */
	uint64_t created_ns;       /* CLOCK_REALTIME */
	uint64_t name_capacity;    /* slots in the name index (0: damaged) */
	uint64_t group_capacity;   /* slots in the group index (0: damaged) */
	uint64_t feed_capacity;    /* events the change feed's ring holds */
	uint64_t name_tombstones;  /* removed names' slots not yet reused */
	uint64_t rehashes;         /* index rebuilds since the table was made */
	uint64_t generation;       /* bumped by every change the daemon publishes */
	uint64_t gp;               /* the grace-period counter */
	uint64_t freed_gp;         /* memory retired before this grace period is reused */
};

/* 0 and *OUT filled; -EINVAL for a bad .sz. */
PROCREG_API int procreg_table_info(procreg_t *reg, struct procreg_table_info *out);

/*
 * The hash procreg files NAME under in this table (it is keyed by the
 * table's random seed): the value the procreg:lookup probe reports, so
 * that a tracer can turn hashes back into names. 0 and *HASH set;
 * -EINVAL or -ENAMETOOLONG for a name that could never be registered.
 */
PROCREG_API int procreg_name_hash(procreg_t *reg, const char *name, uint64_t *hash);

/*
 * Reader processes: those whose reader pages procregd holds (it waits for
 * their read-side sections before reusing memory). The daemon sums each
 * one's slots about once a second, so counts lag by up to that much.
 */
#define PROCREG_READER_STALLED 0x1  /* held a grace period up too long: no longer waited for */
#define PROCREG_READER_GONE 0x2     /* its process has exited: the daemon drops it once it notices */

struct procreg_reader {
	size_t sz;                 /* the library's sizeof(struct procreg_reader) */
	pid_t pid;
	uint32_t uid;
	uint64_t start_time;       /* the process's, clock ticks since boot */
	uint32_t flags;            /* PROCREG_READER_* */
	uint32_t pages;            /* reader pages it handed the daemon */
	uint32_t threads;          /* slots it holds: its reading threads */
	uint32_t in_section;       /* of them, inside a read-side section */
	uint64_t lookups;          /* its threads' lookups */
	uint64_t stalled_ns;       /* CLOCK_REALTIME it was found stalling; 0: never */
	uint64_t registered_ns;    /* CLOCK_REALTIME its first page came */
	uint64_t refreshed_ns;     /* CLOCK_REALTIME of the counts */
};

typedef int (*procreg_reader_cb)(const struct procreg_reader *r, void *arg);

/* Call CB for every reader process, in no particular order. Each is a
 * consistent copy of the daemon's record; PROCREG_READER_GONE is found by
 * the call, from /proc. 0 once every reader is seen, CB's non-zero value,
 * or -EINVAL. */
PROCREG_API int procreg_readers(procreg_t *reg, procreg_reader_cb cb, void *arg);

/* The health of the reader registry (what LMDB's mdb_reader_check looks
 * for): readers the daemon gave up waiting for, readers whose process is
 * gone, and the daemon's counts of readers stalled and refused. */
struct procreg_reader_check {
	size_t sz;                 /* sizeof(struct procreg_reader_check): set it (PROCREG_OPTS) */
	uint32_t max_readers;      /* procregd --max-readers */
	uint32_t readers;          /* reader processes in the registry */
	uint32_t stalled;          /* of them, no longer waited for (the daemon's count) */
	uint32_t gone;             /* of them, whose process has exited */
	uint32_t threads;          /* reading threads, all readers */
	uint32_t in_section;       /* of them, inside a read-side section */
	uint64_t stalls;           /* readers ever found holding a grace period too long */
	uint64_t refused;          /* reader pages refused: quota, or not a sealed page */
	pid_t last_stall_pid;      /* the last reader found stalling (0: none yet) */
	uint32_t last_stall_uid;
	uint64_t last_stall_ns;    /* CLOCK_REALTIME */
};

/* *OUT filled; returns how many readers are unwell (stalled or gone:
 * 0 when all are well), or -EINVAL. */
PROCREG_API int procreg_reader_check(procreg_t *reg, struct procreg_reader_check *out);

/*
 * Verify the table without writing it: for the name index, the group
 * index and every group's member index, that the index block is whole and
 * inside the arena, that every live slot leads to a whole record of the
 * index's kind whose hash matches its key and that a probe for its key
 * finds; that the daemon's counters equal what the walk counted; and that
 * every local owner is alive. The walk runs inside one read-side section
 * while the daemon writes (it holds reclamation back as long as it
 * takes); a walk that a change raced is done again.
 *
 * CB (may be NULL) gets each problem found, as one line of text (names in
 * it are raw bytes, as registered: escape them for a terminal), up to
 * PROCREG_CHECK_PROBLEMS_MAX of them; .problems counts them all.
 * Returns 0 if the table is whole, -EUCLEAN if problems were found (*OUT
 * filled either way), CB's non-zero value, -EAGAIN if the table changed
 * during each of many walks (try again when it is quieter), -ENOMEM,
 * -EINVAL.
 */
#define PROCREG_CHECK_PROBLEMS_MAX 100

struct procreg_check {
	size_t sz;                 /* sizeof(struct procreg_check): set it (PROCREG_OPTS) */
	uint64_t names;            /* live entries the walk found */
	uint64_t groups;
	uint64_t memberships;
	uint64_t tombstones;
	uint64_t processes;        /* distinct local owners */
	uint64_t problems;         /* problems found, shown to CB or not */
};

typedef int (*procreg_problem_cb)(const char *problem, void *arg);
PROCREG_API int procreg_check(procreg_t *reg, struct procreg_check *out, procreg_problem_cb cb,
			      void *arg);

/*
 * Replication (procregd --node): this node and the other nodes it is
 * connected to, as the daemon last published them (when a node comes or
 * goes, and about once a second). Entries of other nodes carry a node id
 * (struct procreg_entry .node); these calls name it.
 */
#define PROCREG_NODE_NAME_MAX 63    /* [A-Za-z0-9_.@-] */
#define PROCREG_NODE_ADDR_MAX 127   /* "host:port" */

struct procreg_bridge {
	size_t sz;                 /* sizeof(struct procreg_bridge): set it (PROCREG_OPTS) */
	char node[PROCREG_NODE_NAME_MAX + 1]; /* this node's name */
	uint64_t incarnation;      /* random per daemon start */
	uint64_t seq;              /* local changes numbered so far */
	uint64_t changes_out;      /* local changes sent to the other nodes */
	uint64_t changes_in;       /* changes applied from other nodes */
	uint64_t conflicts;        /* names claimed on two nodes, resolved */
	uint64_t nodes_down;       /* nodes that went down */
	uint64_t resyncs;          /* connections dropped for a gap or a protocol error */
	uint32_t nodes;            /* other nodes up */
};

struct procreg_node {
	size_t sz;                 /* the library's sizeof(struct procreg_node) */
	uint32_t id;               /* struct procreg_entry .node */
	char name[PROCREG_NODE_NAME_MAX + 1];
	char addr[PROCREG_NODE_ADDR_MAX + 1]; /* "" if unknown */
	uint64_t incarnation;
	uint64_t up_since_ns;      /* CLOCK_REALTIME */
	uint64_t changes_in;       /* changes applied from it */
	uint64_t bytes_in;
	uint64_t bytes_out;
};

typedef int (*procreg_node_cb)(const struct procreg_node *n, void *arg);

/* *OUT filled (OUT may be NULL), and CB (may be NULL) called for every
 * other node up: one consistent picture. 0, CB's non-zero value, -ENOENT
 * if the daemon does not replicate, -EPROTO if its file is not one this
 * library reads, -EPERM if that file is not the daemon's, -EINVAL,
 * -EOPNOTSUPP. */
PROCREG_API int procreg_bridge(procreg_t *reg, struct procreg_bridge *out, procreg_node_cb cb,
			       void *arg);

/* A peer the daemon was told to connect to (procregd --peer), connected
 * or not: what an operator alerts on when one is down, or never came up. */
struct procreg_peer {
	size_t sz;                 /* the library's sizeof(struct procreg_peer) */
	char addr[PROCREG_NODE_ADDR_MAX + 1]; /* "host:port", as given to --peer */
	char node[PROCREG_NODE_NAME_MAX + 1]; /* the node last authenticated there, "" before any */
	int up;                    /* 1 while a connection to it is up, else 0 */
};

typedef int (*procreg_peer_cb)(const struct procreg_peer *p, void *arg);

/* CB for every --peer of the daemon, up or not, in the order given (one
 * that turned out to be this node itself is left out), as the daemon
 * last published them: 0, CB's non-zero value, -ENOENT if the daemon
 * does not replicate, -EPROTO, -EPERM, -EINVAL as procreg_bridge(). A
 * backend whose nodes find each other without addresses (NATS) has no
 * such peers: CB is not called. */
PROCREG_API int procreg_bridge_peers(procreg_t *reg, procreg_peer_cb cb, void *arg);

/* The name of node ID (0: this node) into BUF: 0, -ENOENT for an id not
 * known (or no replication), -ERANGE if LEN is too small. A node is known
 * while it is up, and after it goes down for as long as the table holds
 * its entries (about a second, for it to come back). */
PROCREG_API int procreg_node_name(procreg_t *reg, uint32_t id, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* PROCREG_H */
