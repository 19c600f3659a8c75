/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * daemon.h - procregd's private state, shared by its files:
 *   main.c     options, start-up, the epoll loop, shutdown
 *   server.c   the listening socket, clients, requests (protocol, who may ask)
 *   registry.c every change to names and memberships, side effects in order
 *   procs.c    registered processes: pidfds, death, re-verification
 *   owners.c   standby owners and leases, and their journal
 *   readers.c  reader processes' pages, which grace periods wait for
 *   bridge.c   replication to and from other nodes (mesh.c, nats.c: transports)
 *
 * One thread. Every table write happens on it, in the order requests and
 * deaths arrive; that order is the serialisation point that makes
 * register-if-absent atomic without a lock.
 *
 * The life of a batch (one epoll_wait's worth of events, main.c: run):
 *  1. The batch opens (procreg__w_batch_begin): from here, what the table
 *     retires stays whole until step 6.
 *  2. Deaths first, all of them (procs.c: proc_died): each dead process
 *     leaves every line and goes on the dying list; its entries leave a
 *     slice a pass (step 4).
 *  3. Then requests (server.c), remote frames (bridge.c) and the timer
 *     (owners.c: leases; reclamation of earlier batches), each through
 *     registry.c, which publishes each change with one store, journals
 *     leases and places in line around it (registry.h says in which
 *     order), appends the feed event and notes local changes for the
 *     other nodes. A request's reply is sent once its packet is handled:
 *     what it acknowledges is already in the table.
 *  4. A slice of the deaths under way (procs_dying_work -> registry_died):
 *     entries unpublished, a DIED event each, then their names passed to
 *     whoever is next in line. Processes and readers freed during the
 *     batch are freed for good (procs_reap, readers_reap): no event of
 *     this batch can name them.
 *  5. The batch goes out: the bridge sends its changes and gives claims
 *     that lost a conflict another chance (bridge_flush); owners who lost
 *     a name to another node are told and signalled (procs_tell_lost);
 *     followers of the feed are woken once.
 *  6. The batch closes (procreg__w_batch_end): what it retired joins the
 *     memory waiting for a grace period, which the timer starts within a
 *     tick; only after that grace period is it reused.
 */
#ifndef PROCREGD_H
#define PROCREGD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "clock.h"
#include "internal.h"
#include "proto.h"
#include "procreg/backend.h"
#include "registry.h"

/* A message any client can provoke at will is logged once a second at
 * most (clock.h); the next one says how many WHAT went unlogged meanwhile. */
void log_limited(struct pr_ratelimit *rl, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The counts held back whose second is up and that no line said: from
 * the daemon's tick, so that the count of a last burst is said too. */
void log_limited_flush(void);

/* What an epoll event refers to: the first member of each watched object. */
enum ev_kind { EV_LISTEN, EV_SIGNAL, EV_TIMER, EV_CLIENT, EV_PROC, EV_PROCS, EV_BRIDGE, EV_READER,
	       EV_WATCHDOG, EV_CLOSER };

struct ev {
	enum ev_kind kind;
};

/* A process that holds names. */
struct proc {
	struct ev ev;
	pid_t pid;
	uint64_t start;           /* start time, ticks since boot */
	uint64_t ino;             /* pidfs inode, 0 without pidfs */
	uid_t uid;
	int pidfd;                /* in the epoll set: readable when it exits */
	struct pr_vec names;      /* record offsets of its names and memberships */
	uint32_t waiting;         /* places it holds in owner queues (owners.c) */
	struct waiter *places;    /* those places, listed (owners.c) */
	int lost_signal;          /* sent to it when it loses a name to another node, 0: none */
	bool lost_journaled;      /* a signal of its is in the owners journal, its clearing owed */
	/* Exited, its entries leaving a slice at a time (procs.c: deaths):
	 * on the dying list, oldest first, its pidfd closed. */
	bool dying;
	uint64_t died_seq;        /* d->deaths_begun when it began */
	uint64_t died_n;          /* its entries taken out so far */
	uint64_t died_wake_ns;    /* the wake-up that saw it, for procregd:death */
	struct dying_uid *dying_in; /* its uid's deaths under way */
	struct proc *dying_prev, *dying_next;
	bool gone;                /* freed in all but memory: see procs_reap() */
	struct proc *next_gone;
	/* Holding nothing, kept watched for its next name (procs.c's idle
	 * list, oldest first): not counted among the processes. */
	bool idle;
	struct proc *idle_prev, *idle_next;
};

/* Identity of a peer, from SO_PEERCRED plus a pidfd. */
struct ident {
	pid_t pid;
	uid_t uid;
	uint64_t start;
	uint64_t ino;
	int pidfd;                /* -1 until known */
};

struct out_packet {
	struct out_packet *next;
	size_t len;
	uint8_t data[];
};

struct client {
	struct ev ev;
	int fd;
	bool hello_done;
	bool subscribed;          /* feed notifications on this connection: */
	struct client *sub_next, *sub_prev; /* on d->subscribers */
	/* A notification found its socket full: none is sent until it is
	 * writable again (EPOLLOUT), then one if any was skipped (owed). */
	bool feed_full, feed_owed;
	bool follows;             /* said FOLLOW: counted in d->w.feed_followers */
	bool notices;             /* it takes notices (names lost) between replies */
	bool peer_pidfd;          /* identity from SO_PEERPIDFD, not from HELLO */
	bool peer_gone;           /* it closed, or asked for quiet (PR_F_QUIET): handle
				   * what it sent, reply to nobody */
	bool parked;              /* out of the epoll set while its uid's passed
				   * files wait to be closed (closer.c), or its
				   * uid is paced (server.c) */
	bool nofiles;             /* the kernel refuses it files, and it has shown
				   * it knows (ARM): packets taken, not peeked */
	uint64_t arm;             /* the ARM awaited (PR_HELLO_NOFILES), or 0 */
	uint64_t accept_ticks;    /* when accepted, in /proc start-time ticks */
	/* Its SYNC's reply waits, parked, until its uid's deaths up to this
	 * one (d->deaths_begun's count) are out; 0: none waits. Then it is
	 * on d->held. */
	uint64_t sync_seq;
	struct client *held_next;
	struct ident id;
	struct out_packet *pending, **pending_tail; /* replies the socket would not take */
	size_t pending_bytes;
	struct client *next, *prev;
};

/* A name a local process lost to another node: told at the end of the
 * batch (its connections, its signal), once the table shows the winner. */
struct lost_notice {
	struct lost_notice *next;
	pid_t pid;                /* the loser */
	uint64_t start, ino;      /* which process: ident_is() */
	int pidfd;                /* a dup of its pidfd, to signal it: -1 if no signal */
	int sig;
	pid_t winner;
	char name[PROCREG_NAME_MAX + 1];
	char node[64];            /* the winner's */
	uint64_t time_ns;
};

struct daemon_opts {
	const char *scope, *dir, *socket;
	uint64_t max_size;
	uint32_t max_readers;          /* reader processes; the registry's size at creation */
	uint32_t max_readers_per_uid;
	uint32_t max_reader_pages;     /* pages mapped: at most half of vm.max_map_count */
	bool max_reader_pages_set;     /* else that half */
	uint32_t max_reader_pages_per_uid;
	uint32_t reader_timeout_ms;    /* a grace period held up this long stops waiting */
	uint32_t max_names_per_proc;
	uint32_t max_clients;
	uint32_t max_names_per_uid;    /* names + memberships of one uid's processes */
	uint32_t max_clients_per_uid;  /* connections of one uid */
	uint32_t max_procs_per_uid;    /* processes of one uid watched (procs.c) */
	bool max_procs_per_uid_set;    /* else procs_limits() sets it */
	uint32_t max_places;           /* places in owner queues, all uids (owners.c) */
	uint32_t max_places_per_uid;   /* those of one uid */
	uint32_t max_leases;           /* leases of names and memberships, all uids */
	uint32_t max_leases_per_uid;   /* those of one uid, with its places that ask for one */
	uint32_t max_feed_rate_per_uid; /* feed events a second of one uid (server.c); 0: no limit */
	bool max_feed_rate_per_uid_set; /* else 8 rings' worth */
	const char *subuid_file;       /* --subuid-file; NULL: /etc/subuid (subuid.c) */
	/* Held back for root and the daemon's own uid (uid_privileged): */
	uint32_t reserved_clients;     /* the last connections */
	bool reserved_clients_set;     /* else 1/32 of max_clients */
	uint64_t reserved_size;        /* the last arena bytes */
	bool reserved_size_set;        /* else 1/32 of the table */
	/* Held back from other nodes' entries, before the reserve: */
	uint64_t local_size;           /* arena bytes for this host's names */
	bool local_size_set;           /* else 1/8 of the table */
	bool foreground;
	const char *log_file;          /* --log-file: messages go there */
	int verbose;
	int listen_fd;            /* passed by systemd (LISTEN_FDS), else -1 */
	/* The bridge (bridge.c): all NULL/0 without --node. */
	const char *node, *listen, *cookie_file;
	const char *advertise;        /* --advertise: what HELLO says instead of listen */
	const char *bridge_backend;   /* a shared object; NULL: the TCP mesh */
	const char *bridge;           /* --bridge NAME: procreg-bridge-NAME.so, or "tcp" */
	char **bridge_opts;           /* "KEY=VALUE" for the backend (allocated) */
	size_t nbridge_opts;
	uint32_t bridge_heartbeat_ms, bridge_timeout_ms;  /* 0: the backend's defaults */
	const char *resolver;         /* a shared object with a conflict rule (resolver.h) */
	uint32_t bridge_flush_bytes;  /* --bridge-flush-bytes (backend.h: flush_bytes) */
	bool bridge_flush_bytes_set;  /* given: it needs --node like the rest */
	uint64_t max_mesh_queue;      /* --max-mesh-queue (backend.h: queue_max) */
	bool max_mesh_queue_set;
	const char **peers;
	size_t npeers;
};

struct daemon {
	struct daemon_opts o;
	struct pr_paths paths;
	struct pr_writer w;
	char socket_path[PR_SOCKET_PATH_MAX];
	int epfd;
	/* The pidfds of processes holding names, in an epoll set of their
	 * own, itself in epfd (procs_ev): the deaths a SYNC must show are
	 * there alone, found with one wait however many clients have
	 * requests queued (procs_drain_deaths). */
	int procs_epfd;
	struct ev listen_ev, signal_ev, timer_ev, procs_ev;
	/* The service manager's notifications (notify.c): -1 without. */
	int notify_fd, watchdog_fd;
	struct sockaddr_un notify_sa;
	socklen_t notify_len;
	struct ev watchdog_ev;
	struct pr_ratelimit notify_rl;
	int lfd, sigfd, timerfd;
	/* Held open to be given up when accept() finds no fd left: the
	 * connection is then taken and closed, not left to wake us forever
	 * (see server_accept). -1 if it could not be had back. */
	int spare_fd;
	bool stop;
	bool no_peerpidfd;        /* PROCREG_NO_PEERPIDFD: test the 6.1 path */
	bool no_passrights;       /* the kernel cannot refuse files (before 6.16), or
				   * PROCREG_NO_PASSRIGHTS: test that path */
	bool accept_paused;       /* lfd out of the epoll set: out of fds, no spare */
	bool socket_inherited;    /* lfd came from LISTEN_FDS: not ours to unlink */
	uid_t uid;                /* ours: privileged like root (uid_privileged) */
	bool fs_full_logged;      /* the table's filesystem full, as last logged */

	struct pr_u64map procs;   /* pid -> struct proc * */
	/* The entry of procs proc_get() found last (NULL: none): a client's
	 * requests come in runs for one process. Cleared when it is freed. */
	struct proc *last_proc;
	/* Record offset / PR_RECORD_MIN -> its place in its owner's names
	 * (procs.c): owned_cap elements, or NULL. */
	uint32_t *owned;
	size_t owned_cap;
	struct client *clients;
	uint32_t nclients;
	struct client *subscribers;   /* the connections that said SUBSCRIBE */
	/* Notifications' pacing (server.c): uid + 2 -> when what its
	 * subscribers were sent is paid for; when the first owed for want
	 * of it may go (CLOCK_MONOTONIC; UINT64_MAX: none). */
	struct pr_u64map notify_due;
	uint64_t notify_resume_ns;
	struct proc *gone;        /* procs to free once the current batch is done */
	/* Deaths under way (procs.c), by uid; how many began, ever;
	 * whether a slice may go on now (then the loop does not sleep), and
	 * else when the first paced one may (CLOCK_MONOTONIC; UINT64_MAX:
	 * none). */
	struct dying_uid *dying;
	uint64_t deaths_begun;
	bool dying_ready;
	uint64_t dying_resume_ns;
	struct client *held;      /* clients whose SYNC's reply waits for deaths */
	struct proc *idle_first, *idle_last; /* idle procs, oldest first (procs.c) */
	uint32_t nidle;
	/* Per-uid quotas (uid 0 is not limited): uid + 2 -> count. */
	struct pr_u64map uid_names;   /* names, memberships and places in line held */
	struct pr_u64map uid_procs;   /* processes watched, idle ones not counted */
	/* Processes of unprivileged uids watched, idle ones not counted, and
	 * the most there may be (procs_limits). */
	uint64_t nprocs_unpriv, procs_room;
	bool procs_hit;           /* the last attach refused for one of those */
	struct pr_u64map uid_clients; /* connections */
	struct pr_u64map uid_readers; /* reader processes */
	struct pr_u64map uid_rpages;  /* their reader pages */
	struct pr_u64map uid_closing; /* passed files waiting for the closer (closer.c) */
	uint32_t nparked;         /* clients parked for it, or for the feed's pacing */
	/* Connections that may have files queued (not nofiles), and since
	 * when there have been any (CLOCK_MONOTONIC ns): while they stay,
	 * the closing processes' spawner runs (closer.c). */
	uint32_t files_open;
	uint64_t files_open_since;
	/* The feed's pacing (server.c: feed_paced): uid + 2 -> when the
	 * events charged to it are paid for, at feed_rate a second
	 * (CLOCK_MONOTONIC ns); a uid is not read from while that is more
	 * than feed_burst_ns ahead. */
	struct pr_u64map feed_due;
	uint32_t feed_rate;       /* 0: no pacing */
	uint64_t feed_burst_ns;
	uint64_t feed_apart;      /* events charged apart from a packet's sender (all
				   * along): deaths to the dead, leases due to their
				   * holders (server_feed_charge) */
	uint64_t feed_resume_ns;  /* the first paced uid's turn again; UINT64_MAX: none */
	bool synced;              /* deaths drained for a SYNC of this packet */
	int refused;              /* frames of this packet answered with an error */
	uint64_t sync_hold;       /* ... and its reply to wait for this death (procs_sync) */
	struct ev closer_ev;
	/* Refusals, each kind logged on its own (log_limited): */
	struct pr_ratelimit refused_log;       /* connections: --max-clients, no fd */
	struct pr_ratelimit paused_log;        /* accepting paused: no fd */
	struct pr_ratelimit refused_uid_log;   /* connections: --max-clients-per-uid */
	struct pr_ratelimit refused_res_log;   /* connections: --reserved-clients */
	struct pr_ratelimit dropped_log;       /* connections closed for what they sent */
	struct pr_ratelimit denied_quota_log;  /* names: a quota */
	struct pr_ratelimit denied_procs_log;  /* names: their process one too many for its uid */
	struct pr_ratelimit denied_room_log;   /* names: their process one too many for all uids */
	struct pr_ratelimit denied_res_log;    /* names: --reserved-size */
	struct pr_ratelimit denied_place_log;  /* names: hashed to pile up (procreg__w_place_ok) */
	struct pr_ratelimit paced_log;         /* uids paced: --max-feed-rate-per-uid */
	struct owners *owners;    /* queues, leases, their journal (owners.c) */

	/* readers.c */
	struct pr_u64map readers; /* pid -> struct reader * */
	struct pr_u64map page_inos; /* inode + 2 of each page in d->w.readers -> its dev */
	bool page_inos_partial;     /* a page is missing from it: pages are scanned */
	struct reader *reader_list, *readers_gone;
	uint32_t nreaders, nreaders_stalled;
	/* Reader pages mapped at most (each is a mapping of its own): set
	 * at start from --max-reader-pages and vm.max_map_count. */
	uint32_t rpages_max;
	struct pr_ratelimit readers_log;  /* reader pages refused */
	struct pr_ratelimit stalls_log;   /* readers no longer waited for */
	/* Owner uid (subuid_owner()) + 2 -> when the daemon last stopped
	 * waiting for one of its readers (readers.c: suspect()). */
	struct pr_u64map stall_uids;
	uint64_t readers_refresh_ns;

	uint64_t wake_ns;         /* last epoll wake-up, while procregd:death is traced */
	uint64_t clients_ns;      /* the last batch with a client's event in it (CLOCK_MONOTONIC) */
	uint64_t timer_due_ns;    /* CLOCK_MONOTONIC when the timer fires next */
	uint8_t *in, *out;        /* one packet each */
	struct bridge *bridge;    /* NULL without --node */
	uint64_t bridge_tick_ns;
	struct lost_notice *lost, **lost_tail; /* to tell at the end of the batch */
};

/* The record at arena offset OFF of the table the daemon writes. */
static inline const struct pr_record *rec(const struct daemon *d, uint64_t off)
{
	return (const struct pr_record *)(d->w.map.base + off);
}

/* log.c. Levels are syslog(3)'s: LOG_ERR (the daemon cannot start, or
 * stops; what was to be kept is lost), LOG_WARNING (a request or peer
 * refused, a limit hit, data of another node's or of a client's not
 * taken), LOG_NOTICE (another node up, down, or back; a state that
 * clears), LOG_INFO (log_msg: start, stop, recovery), LOG_DEBUG
 * (--verbose only: every connection, death, routine step of a session). */
#include <stdarg.h>
#include <syslog.h>
/* Where messages go from now on: FILE (--log-file), else stderr (the
 * journal's, if JOURNAL_STREAM says so). 0, or a negative errno after
 * saying why on stderr. */
int log_open(const char *file);
/* After detaching: stderr is let go (to /dev/null), and messages not
 * going to a --log-file go to syslog. */
void log_detached(void);
void log_at(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_vat(int prio, const char *fmt, va_list ap);
void log_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define log_err(...) log_at(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_at(LOG_WARNING, __VA_ARGS__)
#define log_notice(...) log_at(LOG_NOTICE, __VA_ARGS__)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)
/* Drop messages less urgent than LEVEL (LOG_INFO unless --verbose). */
void log_set_level(int level);
#define LOGV(d, ...) do { if ((d)->o.verbose) log_at(LOG_DEBUG, __VA_ARGS__); } while (0)

/* notify.c: sd_notify(3)'s protocol, without libsystemd. notify_init()
 * reads $NOTIFY_SOCKET and $WATCHDOG_USEC (and arms the watchdog timer
 * in the event loop); without them every call does nothing. */
int notify_init(struct daemon *d);
void notify_send(struct daemon *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void notify_watchdog(struct daemon *d);
void notify_close(struct daemon *d);

/* The most fds one sendmsg can pass (the kernel's SCM_MAX_FD). A control
 * buffer has room for all of them, so that every fd a packet brings is
 * seen, and closed unless a request keeps it: a buffer too small for them
 * would still have the kernel install those that fit. */
#define PASSED_FDS_MAX 253
/* Every fd the kernel installed for MSG, in any number of SCM_RIGHTS
 * messages, into FDS (PASSED_FDS_MAX at most): how many. */
int passed_fds(struct msghdr *msg, int *fds);

/* closer.c: the last close of files clients passed, and of client
 * connections, off this thread, in processes of their own, a uid at a
 * time each. */
/* A uid with this many files and connections waiting to be closed is not
 * read from: what its packets can make the daemon hold is bounded. */
#define CLOSER_PER_UID 1024
/* Closing processes at most, the last kept for privileged uids: as many
 * uids at once can each hold one in a close that never ends. */
#define CLOSER_PROCS_MAX 64
/* Before the table is mapped (the closing processes must not hold the
 * mapping), and before any thread is started. */
int closer_start(struct daemon *d);
/* Close FD, which a process of UID passed: now if that cannot wait (a
 * memfd, a pidfd, or no memory to queue it), else in a closing process,
 * after UID's closes queued before it. */
void closer_put(struct daemon *d, int fd, uid_t uid);
/* Once every listening socket is open (none inherited counts): they are
 * shut down if the daemon dies without closing them, for the next one. */
void closer_listeners(const struct daemon *d);
/* The closing processes reported: account for what they closed. */
void closer_event(struct daemon *d);
/* From the timer: closing processes that ended, spares ended. */
void closer_tick(struct daemon *d);
/* At exit, after the connections are closed: closes still queued get a
 * spawner to share the table, or the exit would close their files. */
void closer_stop(struct daemon *d);
/* Whether UID has too many waiting (never for a privileged uid). */
bool closer_over(const struct daemon *d, uid_t uid);
/* Close a client connection of UID: shut down here, drained of its
 * queued files and closed in a closing process, as closer_put(). */
void closer_sock_close(struct daemon *d, int fd, uid_t uid);

/* epoll helpers (main.c) */
int ev_add(struct daemon *d, int fd, uint32_t events, struct ev *ev);
int ev_mod(struct daemon *d, int fd, uint32_t events, struct ev *ev);

/* server.c */
/* The listening socket the service manager passed (sd_listen_fds(3)
 * protocol: LISTEN_PID names us, LISTEN_FDS counts fds from 3): the fd,
 * -1 if none was passed, or a negative errno with the reason logged. Call
 * before detaching (the pid must still be ours). */
int server_inherited_fd(void);
/* Whether the kernel can refuse a connection's files (SO_PASSRIGHTS,
 * Linux 6.16). */
bool server_passrights(void);
int server_listen(struct daemon *d);
void server_accept(struct daemon *d);
/* The listening socket back in the epoll set if server_accept() took it
 * out for want of fds. */
void server_accept_resume(struct daemon *d);
/* C's events of this wake-up; ALONE: no other client is in them (then it
 * may be read on: server_client_event says when). */
void server_client_event(struct daemon *d, struct client *c, uint32_t events, bool alone);
void server_close_all(struct daemon *d);
/* Take back into the epoll set the parked clients whose uid is no longer
 * over CLOSER_PER_UID nor paced; d->feed_resume_ns says when the next of
 * those still paced is due. */
void server_unpark(struct daemon *d);
/* The clients whose SYNC waits for deaths (d->held): those whose deaths
 * are out (ALL: every one, stopping) answered, and taken back. */
void server_release_held(struct daemon *d, bool all);
/* At start, once the table is open: the feed's pacing from
 * --max-feed-rate-per-uid and the ring's size. */
void server_feed_pacing(struct daemon *d);
/* The feed events since head H0 were UID's doing (a death's): charged to
 * it, not to the client whose request drained it. */
void server_feed_charge(struct daemon *d, uid_t uid, uint64_t h0);
/* When UID's events are paid for enough to make more (CLOCK_MONOTONIC
 * ns), or 0: now. */
uint64_t server_feed_paced(struct daemon *d, uid_t uid);
/* After a batch that published events: tell the subscribed connections. */
void server_notify_feed(struct daemon *d);
/* From the timer, at d->notify_resume_ns: the notifications owed for
 * want of their uid's budget. */
void server_notify_owed(struct daemon *d);
/* Send N to every connection of its loser that takes notices. */
void server_notice_lost(struct daemon *d, const struct lost_notice *n);

/* owners.c: standby owners and leases; its state is its own (struct owners). */
struct owners;
/* At start, before anything else of owners.c: its state, empty. */
int owners_new(struct daemon *d);
/* P asks to wait in line for RQ's name (taken): 0, -EDQUOT (a per-uid
 * limit, --max-leases-per-uid included if it asks for a lease), -ENOSPC. */
int owners_enqueue(struct daemon *d, struct proc *p, const struct ident *id,
		   const struct reg_request *rq);
/* P died or left: it leaves every line. */
void owners_proc_gone(struct daemon *d, struct proc *p);
/* P's signal on a name lost (procreg run --on-lost) is SIG (0: left as
 * it is), journaled (in memory only if the journal has no room). */
void owners_signal_set(struct daemon *d, struct proc *p, int sig);
/* P's signal cleared: it holds nothing, or it DIED. */
void owners_signal_clear(struct daemon *d, struct proc *p, bool died);
/* Bytes written to the journal since the start: what a request cost in
 * them, charged to its uid (server.c). */
uint64_t owners_journaled(const struct daemon *d);
/* Room in the journal for one more place in line or lease: 0, or -ENOSPC
 * (the request must then be refused before it changes anything). */
int owners_room(struct daemon *d);
/* Whether ID may set RQ's lease: 0, -EDQUOT (--max-leases-per-uid reached
 * and RQ's lease not its uid's already; the caller logs it), or -ENOSPC
 * (--max-leases reached and RQ's lease not set already, or no room in the
 * journal; logged). */
int owners_lease_room(struct daemon *d, const struct ident *id, const struct reg_request *rq);
/* Set (LEASE_MS > 0) or drop the lease of a name, owned by a process of
 * UID's (ignored when dropped). */
int owners_lease_set(struct daemon *d, const char *name, size_t len, uid_t uid,
		     uint32_t lease_ms, bool mark);
/* The leases UID holds, and its places in line that ask for one. */
uint64_t owners_uid_leases(const struct daemon *d, uid_t uid);
/* Whether a name has a lease or a queue: removing it needs
 * owners_name_gone(). */
bool owners_interested(const struct daemon *d, const char *name, size_t len);
/* Set (LEASE_MS > 0) or drop the lease of the local membership R. */
int owners_member_lease_set(struct daemon *d, const struct pr_record *r, uint32_t lease_ms);
/* A name was removed: drop its lease, pass it to the next in line. */
void owners_name_gone(struct daemon *d, const char *name, size_t len);
int owners_refresh(struct daemon *d, const struct client *c, const struct pr_frame *f);
/* Expire due leases; nanoseconds until the next deadline (UINT64_MAX: none). */
uint64_t owners_tick(struct daemon *d);
/* CLOCK_MONOTONIC of the nearest lease deadline; UINT64_MAX: none. */
uint64_t owners_next_deadline(const struct daemon *d);
void owners_free_all(struct daemon *d);
/* At start, after procs_recover() (ATTACHED: the table was there before):
 * queues and leases back from the owners journal, or a fresh journal. */
int owners_recover(struct daemon *d, bool attached);
/* At start, from procs_recover(): another node held NAME, and its entry
 * was dropped for the bridge to resync (owners_recover() does not pass
 * its line on yet). */
void owners_remote_dropped(struct daemon *d, const char *name, size_t len);

/* readers.c */
struct reader;
/* A reader page FD from the process ID (READERS): 0, or -EPERM (not a
 * sealed page), -EUSERS (a quota), -EEXIST (we have it). */
int readers_add(struct daemon *d, const struct ident *id, int fd);
/* Its process exited: its pages are no longer waited for. */
void readers_gone(struct daemon *d, struct reader *r);
/* From the timer: stop waiting for readers that hold a grace period up
 * too long; now and then, refresh the table's reader registry. */
void readers_tick(struct daemon *d);
void readers_refresh(struct daemon *d);
/* Free the readers released during the batch just handled. */
void readers_reap(struct daemon *d);
void readers_free_all(struct daemon *d);
/* At start: the table's registry emptied (we hold no page yet), and
 * the page budget set. */
void readers_start(struct daemon *d);

/* bridge.c: replication to and from other nodes (--node). */
/* The built-in transport, the TCP full mesh (mesh.c). */
extern const struct pr_bridge_backend pr_mesh_backend;

int bridge_start(struct daemon *d);
void bridge_event(struct daemon *d);
/* End of a batch of work: send what it changed. */
void bridge_flush(struct daemon *d);
void bridge_tick(struct daemon *d);
/* When the bridge has work to go on with (CLOCK_MONOTONIC; UINT64_MAX:
 * none): a part of the walk that removes nodes' entries, or what other
 * nodes sent, held back while the daemon's clients have their turn; at
 * bridge_flush(). */
uint64_t bridge_due(struct daemon *d);
void bridge_stop(struct daemon *d);
/* A name or membership (record OFF) was published (DEL false) or removed
 * (DEL true): a local one goes to the other nodes; a name removed gives
 * the claims kept aside for it another chance. A record removed stays
 * whole until its batch ends, so OFF may already be unpublished. */
void bridge_local_change(struct daemon *d, int del, uint64_t off);
/* A registration stamp: the hybrid logical clock's next (hlc.h). */
uint64_t bridge_stamp(struct daemon *d);
/* Record OFF, if another node's that a removal decided but not made yet
 * takes (a node restarted, or resynced without it): removed now, with
 * that removal's event, its name passed on. Whether it was. A local
 * request that meets such a record takes it for gone, as it is. */
bool bridge_take_pending(struct daemon *d, uint64_t off);
static inline void bridge_note(struct daemon *d, int del, uint64_t off)
{
	if (d->bridge)
		bridge_local_change(d, del, off);
}

/* procs.c */
/* Per-uid counters: the count for UID, and a change of it. */
/* Per-uid counts, kept under the owner of a subordinate uid's range. */
uint64_t uid_count(const struct pr_u64map *m, uid_t uid);
void uid_adjust(struct pr_u64map *m, uid_t uid, int64_t delta);
/* subuid.c: the uid whose per-uid limits UID's use counts in: the owner
 * of a subordinate range that holds it, else UID itself. subuid_load()
 * reads the ranges, once, before the first client; with --subuid-file,
 * a file that cannot be read is an error. */
uid_t subuid_owner(uid_t uid);
/* For a log line on UID's count: "" or which owner it counts with. */
const char *subuid_note(uid_t uid, char *buf, size_t size);
int subuid_load(const struct daemon *d);
/* Root and the daemon's own uid: no per-uid quota, and the reserves
 * (--reserved-clients, --reserved-size) are theirs. */
static inline bool uid_privileged(const struct daemon *d, uid_t uid)
{
	return uid == 0 || uid == d->uid;
}
/* Whether a process of P's uid may hold one more name, membership or
 * place in an owner queue. */
bool uid_may_add(const struct daemon *d, const struct proc *p);
struct proc *proc_get(struct daemon *d, pid_t pid);
/* Whether ID is the process an entry made with START and INO (its pidfs
 * inode, 0 if unknown) stands for. The start time alone, in clock ticks,
 * is shared by a process and one given its pid within the same tick. */
bool ident_is(const struct ident *id, uint64_t start, uint64_t ino);
/* Find or create the entry for the process IDENT names; takes a dup of its
 * pidfd. A stale entry for a previous process with the same pid is
 * processed as a death first; -ESRCH if IDENT's process is the one gone.
 * A new entry (or an idle one taken back) past the limits on processes:
 * -EDQUOT (--max-procs-per-uid), -ENOSPC (procs_room), d->procs_hit set. */
int proc_attach(struct daemon *d, const struct ident *id, struct proc **out);
/* At start: the live process PID started at START (pidfs inode INO, 0 if
 * unknown) as a proc, or -ESRCH if that process is gone. Never refused
 * for the limits on processes. */
int proc_verify(struct daemon *d, pid_t pid, uint64_t start, uint64_t ino, struct proc **out);
/* Room for the record at OFF in the owned records' array: made with every
 * local record (registry.c's new_record), so that proc_replace_name(),
 * which comes after the record is published, cannot fail. */
int proc_owned_room(struct daemon *d, uint64_t off);
/* At start, once the open files limit is raised and --max-readers known:
 * how many processes unprivileged uids may have watched, together
 * (d->procs_room) and, unless given, each (--max-procs-per-uid). */
void procs_limits(struct daemon *d);
/* At start, once the table is open: the owned records' array reserved
 * whole, where that costs no commit charge, so that no registration
 * needs a new mapping for it. */
void procs_start(struct daemon *d);
int proc_add_name(struct daemon *d, struct proc *p, uint64_t off);
/* NEW_OFF's room was made (proc_owned_room). */
void proc_replace_name(struct daemon *d, uint64_t old_off, uint64_t new_off);
/* Forget OFF in its owner's list (the table is registry.c's); returns
 * the owner, NULL if none. */
struct proc *proc_forget_name(struct daemon *d, uint64_t off);
/* Forget the last N names of P's list, in its uid's count too; their
 * memory is kept (registry_died reads it after). */
void proc_forget_last(struct daemon *d, struct proc *p, size_t n);
/* An entry that holds no names nor places goes idle (procs.c). */
void proc_release_if_empty(struct daemon *d, struct proc *p);
/* Its pidfd fired: its death begins (every name it held leaves, a slice
 * a pass: procs_dying_work). */
void proc_died(struct daemon *d, struct proc *p);
/* Once a pass of the loop: a slice of the deaths under way. */
void procs_dying_work(struct daemon *d);
/* At the last pass, stopping: every death under way, to the end. */
void procs_dying_finish(struct daemon *d);
/* For a SYNC of UID's: every pidfd readable now read; the count of deaths
 * begun its reply is to wait for (procs_sync_waits), or 0: none. */
uint64_t procs_sync(struct daemon *d, uid_t uid);
/* Whether a SYNC of UID's made at death count SEQ still waits: a death
 * up to SEQ under way that is UID's own (its subuid owner's), or of a
 * uid not held back by its pace. */
bool procs_sync_waits(struct daemon *d, uid_t uid, uint64_t seq);
/* The local name record OFF loses to NODE's registration by WINNER: its
 * owner is to be told at the end of the batch (procs_tell_lost). Call
 * before the record is removed. */
void proc_lost_name(struct daemon *d, uint64_t off, const char *node, pid_t winner);
/* End of a batch: tell the owners what they lost (notices, signals). */
void procs_tell_lost(struct daemon *d);
/* The time of a wake-up, for procregd:death: 0 unless it is traced. */
uint64_t procs_wake_clock(void);
/* Handle every pidfd that is already readable (for SYNC). */
void procs_drain_deaths(struct daemon *d);
/* After attaching to an existing table: keep the names of live owners,
 * remove the rest. */
int procs_recover(struct daemon *d);
void procs_free_all(struct daemon *d);
/* Free the procs released during the batch just handled. */
void procs_reap(struct daemon *d);

#endif /* PROCREGD_H */
