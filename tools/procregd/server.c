/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * server.c - the listening socket, client connections and requests.
 *
 * Authentication. Every connection's peer is known from SO_PEERCRED (pid,
 * uid at connect time) and, to name the process race-free, a pidfd: from
 * SO_PEERPIDFD where the kernel has it (6.5+), else the one the client
 * passes with its HELLO, accepted only if it refers to the SO_PEERCRED pid.
 * A client registers itself; it registers another process only by passing
 * that process's pidfd, and only if it is root or has that process's uid.
 * It removes a name only if it owns it, has the owner's uid, or is root.
 *
 * A request that is malformed gets an error reply; a packet that cannot be
 * framed closes its connection. Neither touches the table or any other
 * client.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "accept.h"
#include "daemon.h"
#include "probes.h"
#include "proto.h"

PR_PROBE_DEFINE(procregd, request);
PR_PROBE_DEFINE(procregd, reply);

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83
#endif

#define MAX_PENDING_BYTES (4u << 20)

#define SD_LISTEN_FDS_START 3

int server_inherited_fd(void)
{
	const char *pid_s = getenv("LISTEN_PID"), *n_s = getenv("LISTEN_FDS");
	int type = 0, acc = 0, fam = 0;
	socklen_t len = sizeof(int);
	char *end;
	long pid, n;

	if (!pid_s || !n_s)
		return -1;
	pid = strtol(pid_s, &end, 10);
	if (*end || pid != (long)getpid())
		return -1; /* meant for another process (one that exec'd us) */
	n = strtol(n_s, &end, 10);
	/* Not for our children, whatever happens next. */
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (*end || n < 1)
		return -1;
	if (n > 1)
		log_warn("LISTEN_FDS=%ld: using the first socket, closing the others", n);
	for (int fd = SD_LISTEN_FDS_START + 1; fd < SD_LISTEN_FDS_START + n; fd++)
		close(fd);
	if (getsockopt(SD_LISTEN_FDS_START, SOL_SOCKET, SO_DOMAIN, &fam, &len) < 0 ||
	    getsockopt(SD_LISTEN_FDS_START, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
	    getsockopt(SD_LISTEN_FDS_START, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) < 0 ||
	    fam != AF_UNIX || type != SOCK_SEQPACKET || !acc) {
		log_err("LISTEN_FDS: fd %d is not a listening unix SOCK_SEQPACKET socket "
			"(ListenSequentialPacket= in the .socket unit)", SD_LISTEN_FDS_START);
		return -EBADF;
	}
	return SD_LISTEN_FDS_START;
}

/* Take the socket the service manager bound: its path is what clients
 * are told, and it is the manager's to remove. */
static int listen_inherited(struct daemon *d, int fd)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);

	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		return -errno;
	if (len <= offsetof(struct sockaddr_un, sun_path) || !sa.sun_path[0]) {
		log_err("LISTEN_FDS: the socket has no path: clients could not find it");
		return -EINVAL;
	}
	snprintf(d->socket_path, sizeof(d->socket_path), "%.*s",
		 (int)(len - offsetof(struct sockaddr_un, sun_path)), sa.sun_path);
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
		return -errno;
	d->lfd = fd;
	d->socket_inherited = true;
	d->listen_ev.kind = EV_LISTEN;
	return ev_add(d, fd, EPOLLIN, &d->listen_ev);
}

/* Whether a socket at SA may be someone's live socket: 0 if not (it
 * refuses connections, or there is none), -EADDRINUSE if it accepts them,
 * -EACCES if we may not connect to it (another user's socket, closed to
 * ours: live or not, we cannot tell). */
static int live_socket(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), rc;

	if (fd < 0)
		return 0;
	rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	/* EAGAIN: its backlog is full, but it listens. */
	rc = rc == 0 || errno == EAGAIN ? -EADDRINUSE : errno == EACCES ? -EACCES : 0;
	close(fd);
	return rc;
}

/* Whether the table names a daemon before us that is gone (a crash: a
 * daemon that stops clears it), zombie or reaped. */
static bool crashed_before(const struct daemon *d)
{
	uint32_t pid = PR_LOAD_ACQ(&d->w.map.hdr->daemon_pid);
	int fd;
	bool gone;

	if (!pid || pid == (uint32_t)getpid())
		return false;
	fd = procreg__pidfd_open((pid_t)pid);
	if (fd < 0)
		return errno == ESRCH;
	gone = procreg__pidfd_exited(fd);
	close(fd);
	return gone;
}

int server_listen(struct daemon *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, err;

	d->spare_fd = pr_accept_spare();
	if (d->o.listen_fd >= 0)
		return listen_inherited(d, d->o.listen_fd);

	if (strlen(d->socket_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, d->socket_path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* We hold the scope's lock, so a socket file left here that refuses
	 * connections belongs to a daemon that is gone (or is something
	 * planted: unlink removes a symbolic link itself, never what it
	 * points to). One that accepts them is live: systemd's
	 * (procregd@.socket, whose service we are not), or a daemon's of
	 * another scope given the same path. Replacing it would cut its
	 * owner off for good: refused. So is one we may not connect to (a
	 * daemon run as a system user, finding root's socket closed to
	 * it), which may be live all the same. */
	err = live_socket(&sa);
	/* A daemon of this scope that died a moment ago may leave its
	 * socket listening until its closing processes have shut it down
	 * (closer.c): a moment, which we wait for, a second at most. Only
	 * then: each look is a connection queued there, and a live socket
	 * of someone else's must not have its backlog filled by us. */
	for (int i = 0; err == -EADDRINUSE && i < 100 && crashed_before(d); i++) {
		struct timespec ts = { 0, 10 * 1000000 };

		nanosleep(&ts, NULL);
		err = live_socket(&sa);
	}
	if (err) {
		close(fd);
		return err;
	}
	unlink(d->socket_path);
	/* The mode comes from the umask at bind: a chmod by path afterwards
	 * would follow whatever someone put at that path meanwhile. Every
	 * user may connect (0666). */
	{
		mode_t old = umask(0111);
		int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));

		umask(old);
		if (rc < 0 || listen(fd, 512) < 0) {
			int err = -errno;

			close(fd);
			return err;
		}
	}
	d->lfd = fd;
	d->listen_ev.kind = EV_LISTEN;
	return ev_add(d, fd, EPOLLIN, &d->listen_ev);
}

/* One more connection that may have files queued (d->files_open). */
static void files_open_add(struct daemon *d)
{
	if (!d->files_open++)
		d->files_open_since = procreg__mono_ns();
}

/* What C waits for: while replies wait, only room for them (it is not
 * read until they are out); else requests, and room if a notification
 * found it full. */
static uint32_t client_events(const struct client *c)
{
	if (c->pending)
		return EPOLLOUT;
	return EPOLLIN | (c->feed_full ? EPOLLOUT : 0);
}

static void client_close(struct daemon *d, struct client *c)
{
	struct out_packet *o, *n;

	if (c->sync_seq) {
		struct client **at = &d->held;

		while (*at != c)
			at = &(*at)->held_next;
		*at = c->held_next;
	}
	if (c->parked)
		d->nparked--;
	else
		epoll_ctl(d->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	/* No file can be queued on a connection whose files the kernel
	 * refuses (refuse_files()): its close cannot wait, and needs no
	 * closing process (none may be running: closer.c). */
	if (c->nofiles) {
		close(c->fd);
	} else {
		closer_sock_close(d, c->fd, c->id.uid);
		d->files_open--;
	}
	if (c->id.pidfd >= 0)
		close(c->id.pidfd);
	for (o = c->pending; o; o = n) {
		n = o->next;
		free(o);
	}
	if (c->subscribed) {
		*(c->sub_prev ? &c->sub_prev->sub_next : &d->subscribers) = c->sub_next;
		if (c->sub_next)
			c->sub_next->sub_prev = c->sub_prev;
	}
	/* Its process may be asleep on the feed, counting on this
	 * connection: woken, it finds it gone and says FOLLOW again. */
	if (c->follows) {
		d->w.feed_followers--;
		d->w.feed_force = true;
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		d->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	d->nclients--;
	uid_adjust(&d->uid_clients, c->id.uid, -1);
	free(c);
}

/* Out of the epoll set while its uid's files wait for the closer
 * (closer.c), or while its uid waits for the feed's pacing: nothing more
 * is read from it, its packets wait in its socket, charged to it. */
static void park(struct daemon *d, struct client *c)
{
	epoll_ctl(d->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	c->parked = true;
	d->nparked++;
}

/*
 * The feed's pacing. The change feed is one ring (8,192 events in a
 * table of 1 GiB) that every follower reads, root's too, and one
 * that falls a ring behind loses events (told so, it re-reads the table).
 * Unlimited, one user looping batches of 4,000 registrations and 4,000
 * removals made 3.2-4.6 M events a second: the ring turned over every 2
 * ms, and a follower that re-read the table after each lap was lapped
 * again before it had; a root "procreg watch" saw 2 of 20 registrations
 * of root's made meanwhile. No quota bounds it (names removed count
 * against none).
 *
 * So the events a uid's requests make are paid for, at feed_rate a second
 * (by default 8 rings, 65,536 with the default ring): a uid (with its
 * subordinate uids, subuid.c) cannot turn the ring over more than 8 times
 * a second, and a follower woken by it has 125 ms to read before one uid
 * laps it. A uid that has made none for a while may make half a ring at
 * once (feed_burst_ns): a service registering a few thousand names at
 * start is not held up, and a follower that keeps up is not lapped by
 * it. Its deaths' events are charged to it too (server_feed_charge), or
 * processes that register and exit would make twice the rate; so are
 * those of its leases that come due (owners_tick), for the same reason.
 *
 * A uid over its budget is paced, never refused: its connections are
 * parked (out of the epoll set, their requests waiting in their sockets)
 * until what it made is paid for, and the timer takes them back
 * (server_unpark; main.c's tick), a packet each; other uids are served
 * meanwhile. A packet is handled whole, so a uid goes into debt by at
 * most a packet's events (4,000 or so), which the wait pays for. Root's
 * and procregd's own uid's requests are not paced.
 *
 * The budget is one time per uid, GCRA's: when all it made is paid for
 * (feed_due). Nothing is kept for a uid whose events are paid for.
 */
/* What a request writes to the owners journal (a place in line, a lease:
 * owners.c) is paid for in the same budget, an event for every this many
 * bytes: a place asked for again and again with new metadata writes a
 * record of up to 1.3 KiB each time, and one process doing so 70,000
 * times a second wrote the journal at 100 MB a second, rewriting it whole
 * every half second, the daemon's thread waiting on the disk meanwhile
 * (root's register+unregister pairs at 2,700 a second against 25,000).
 * Paid for, a uid writes 8 MiB a second at most with the default rate. */
#define JOURNAL_EVENT_BYTES 128

/* REQUEST_EVENTS. A request is paid for whatever it made: a refused one
 * (a name taken, or not the uid's to remove) as an event, and one that
 * succeeds and makes none (a lease renewed, a SYNC) as a quarter of one.
 * Such requests cost the daemon's thread time all the same, and packets
 * of a thousand are read one a turn from each connection, another uid's
 * single request waiting behind one of each. Unpaced, one user's 8
 * processes looping batches of 1,000 registrations of root's names
 * (EEXIST each) took root's register+unregister pairs from 10.5-13.7k a
 * second to 0.9-1.0k; unregistrations of them (EPERM), to 2.0-2.2k. A
 * uid's successful registrations were already paced so, an event each.
 * A quarter for the rest leaves a uid's renewals at 4 rings' worth a
 * second (262,144 with the default ring), more than 4 processes looping
 * renewals made (105-116k a second), and an event each had held them
 * to 63-66k. */
#define REQUESTS_AN_EVENT 4

static uint64_t feed_cost_ns(const struct daemon *d, uint64_t events)
{
	return events * 1000000000ull / d->feed_rate;
}

void server_feed_pacing(struct daemon *d)
{
	uint64_t cap = d->w.map.hdr->feed_cap;

	d->feed_resume_ns = UINT64_MAX;
	d->notify_resume_ns = UINT64_MAX;
	d->feed_rate = d->o.max_feed_rate_per_uid_set ? d->o.max_feed_rate_per_uid
						      : (uint32_t)(cap * 8);
	if (d->feed_rate)
		d->feed_burst_ns = feed_cost_ns(d, cap / 2 ? cap / 2 : 1);
}

static void feed_charge(struct daemon *d, uid_t uid, uint64_t events)
{
	uint64_t now, key = (uint64_t)subuid_owner(uid) + 2, *due;

	if (!events || !d->feed_rate || uid_privileged(d, uid))
		return;
	now = procreg__mono_ns();
	due = procreg__u64map_ref(&d->feed_due, key);
	if (due)
		*due = (*due > now ? *due : now) + feed_cost_ns(d, events);
	else /* no memory: not paced, as a quota errs generous */
		procreg__u64map_put(&d->feed_due, key, now + feed_cost_ns(d, events));
}

void server_feed_charge(struct daemon *d, uid_t uid, uint64_t h0)
{
	uint64_t events = d->w.map.hdr->feed_head - h0;

	d->feed_apart += events;
	feed_charge(d, uid, events);
}

uint64_t server_feed_paced(struct daemon *d, uid_t uid)
{
	uint64_t key = (uint64_t)subuid_owner(uid) + 2, due, now;

	if (!d->feed_rate || uid_privileged(d, uid) ||
	    procreg__u64map_get(&d->feed_due, key, &due) < 0)
		return 0;
	now = procreg__mono_ns();
	if (due <= now) {
		procreg__u64map_del(&d->feed_due, key); /* paid for */
		return 0;
	}
	return due - now > d->feed_burst_ns ? due - d->feed_burst_ns : 0;
}

/* Whether C is to wait for its uid's budget: then when, noted for the
 * timer; else 0. */
static uint64_t client_paced(struct daemon *d, const struct client *c)
{
	uint64_t until = server_feed_paced(d, c->id.uid);

	if (until && until < d->feed_resume_ns)
		d->feed_resume_ns = until;
	return until;
}

void server_unpark(struct daemon *d)
{
	/* Found again below for the clients that stay paced. */
	d->feed_resume_ns = UINT64_MAX;
	for (struct client *c = d->clients, *next; c && d->nparked; c = next) {
		next = c->next;
		if (!c->parked || c->sync_seq || closer_over(d, c->id.uid) || client_paced(d, c))
			continue;
		c->parked = false;
		d->nparked--;
		/* Replies it would not take keep it to EPOLLOUT, as before. */
		if (ev_add(d, c->fd, client_events(c), &c->ev) < 0)
			client_close(d, c);
	}
}

static int flush_pending(struct daemon *d, struct client *c);

void server_release_held(struct daemon *d, bool all)
{
	for (struct client **at = &d->held, *c; (c = *at);) {
		if (!all && procs_sync_waits(d, c->id.uid, c->sync_seq)) {
			at = &c->held_next;
			continue;
		}
		*at = c->held_next;
		c->sync_seq = 0;
		if (closer_over(d, c->id.uid) || client_paced(d, c))
			continue; /* parked still, for those: server_unpark() */
		c->parked = false;
		d->nparked--;
		/* The reply at once, not at the next wake-up; what the socket
		 * does not take waits for EPOLLOUT as ever. */
		if (ev_add(d, c->fd, client_events(c), &c->ev) < 0 || flush_pending(d, c) < 0)
			client_close(d, c);
	}
}

void server_close_all(struct daemon *d)
{
	while (d->clients)
		client_close(d, d->clients);
	if (d->spare_fd >= 0) {
		close(d->spare_fd);
		d->spare_fd = -1;
	}
	/* The listening socket is left for the exit to close: closing it
	 * releases connections not yet accepted, and the files of packets
	 * queued on them, whose last close may wait (a socket lingering
	 * over unsent data) unless the process is exiting, when the kernel
	 * does not linger. The closing processes share our descriptors and
	 * outlive us a moment (closer.c): the last of them to exit closes
	 * it, exiting too. */
	if (d->lfd >= 0 && !d->socket_inherited) {
		unlink(d->socket_path);
		/* Refusing connections from now on (it waits, open, for the
		 * last closing process), rather than queueing them for no one. */
		(void)shutdown(d->lfd, SHUT_RDWR);
	}
}

/*
 * Feed notifications. A notification carries nothing: it says "look at
 * the feed", whose events the subscriber reads from the table by its
 * cursor (procreg_feed_fd_clear, then procreg_next_event until none).
 * One that finds the socket full is redundant with those already in it,
 * and so is every later one until the subscriber reads: it is not sent,
 * and neither are the next, until the socket is writable again. Sent
 * regardless, each batch cost a failing send() to every subscriber that
 * never reads: with 127 of them, one user's, another user's synchronous
 * registrations and removals went from 23.6k pairs a second to 2.6-4.6k.
 *
 * Nothing is lost: a subscriber clears its socket before it reads the
 * feed, so what was published after its read leaves it to a notification
 * yet to come. Once its socket is writable again (it read them), one is
 * sent at once if any was skipped meanwhile: at worst a wake-up for
 * events it has read, which procreg_feed_fd() allows.
 */
/*
 * And a uid's notifications are paid for, NOTIFY_RATE a second for all
 * its subscribers, NOTIFY_BURST at once. A subscriber that reads every
 * notification gets one each batch, and a batch is one request when
 * requests come one at a time: 120 subscribers of one user, reading,
 * took root's synchronous registration and removal pairs from 17.7-18.1k
 * a second to 5.6-11.3k, 120 sends for each of root's requests (15.8-16.8k
 * paced; three alternating runs of a probe, Release builds). Paced,
 * a uid's subscribers cost the daemon at most NOTIFY_RATE sends a second;
 * one not sent for want of budget is owed, sent when its uid's turn comes
 * (server_notify_owed, from the timer), so that none is lost. With the
 * 128 connections a uid may have, each still hears within 8 ms of a
 * change at worst. Root's and procregd's own uid's are not paced.
 */
#define NOTIFY_RATE 16384
#define NOTIFY_BURST 256
#define NOTIFY_COST_NS (1000000000ull / NOTIFY_RATE)

/* Whether UID may have one more notification sent now: then it is
 * charged for it. Else when it may (d->notify_resume_ns). */
static bool notify_paid(struct daemon *d, uid_t uid, uint64_t *now)
{
	uint64_t key = (uint64_t)subuid_owner(uid) + 2, *due, at;

	if (uid_privileged(d, uid))
		return true;
	if (!*now)
		*now = procreg__mono_ns();
	due = procreg__u64map_ref(&d->notify_due, key);
	at = due && *due > *now ? *due : *now;
	if (at - *now > NOTIFY_BURST * NOTIFY_COST_NS) {
		/* Then half a burst's worth at once: a timer for each one
		 * would be a wake-up of the daemon's per notification. */
		at -= NOTIFY_BURST / 2 * NOTIFY_COST_NS;
		if (at < d->notify_resume_ns)
			d->notify_resume_ns = at;
		return false;
	}
	if (due)
		*due = at + NOTIFY_COST_NS;
	else /* no memory: not paced, as a quota errs generous */
		procreg__u64map_put(&d->notify_due, key, at + NOTIFY_COST_NS);
	return true;
}

static void notify_one(struct daemon *d, struct client *c, uint64_t *now)
{
	uint8_t frame[PR_FRAME_HDR];
	size_t pos = 0;
	bool was_full = c->feed_full;

	if (c->pending || c->feed_full || !notify_paid(d, c->id.uid, now)) {
		c->feed_owed = true;
		return;
	}
	c->feed_owed = false;
	procreg__proto_put_status(frame, &pos, PR_OP_NOTIFY | PR_OP_REPLY, 0, 0);
	if (send(c->fd, frame, pos, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EAGAIN)
		c->feed_full = true;
	/* Told when there is room again. Not while replies wait: it waits
	 * for EPOLLOUT already. A parked client is not in the set:
	 * server_unpark() asks for it. */
	if (c->feed_full && !was_full && !c->pending && !c->parked)
		ev_mod(d, c->fd, client_events(c), &c->ev);
}

void server_notify_feed(struct daemon *d)
{
	uint64_t now = 0;

	for (struct client *c = d->subscribers; c; c = c->sub_next)
		notify_one(d, c, &now);
}

void server_notify_owed(struct daemon *d)
{
	uint64_t now = 0;

	d->notify_resume_ns = UINT64_MAX;
	for (struct client *c = d->subscribers; c; c = c->sub_next)
		if (c->feed_owed && !c->feed_full && !c->pending)
			notify_one(d, c, &now);
}

/* C's socket has room: what waited for it goes. */
static void feed_room(struct daemon *d, struct client *c)
{
	uint64_t now = 0;

	c->feed_full = false;
	if (c->feed_owed)
		notify_one(d, c, &now);
}

static int send_reply(struct daemon *d, struct client *c, const uint8_t *buf, size_t len);

void server_notice_lost(struct daemon *d, const struct lost_notice *n)
{
	uint8_t frame[PR_FRAME_HDR + 64 + PROCREG_NAME_MAX + 64];
	size_t pos = 0;
	struct client *next;

	if (procreg__proto_put_lost(frame, &pos, n->name, strlen(n->name), n->node,
				    PROCREG_LOST_CONFLICT, (uint32_t)n->winner, n->time_ns) < 0)
		return;
	for (struct client *c = d->clients; c; c = next) {
		next = c->next;
		if (!c->notices || c->id.pid != n->pid || !ident_is(&c->id, n->start, n->ino))
			continue;
		/* Queued behind its replies like one, if it must wait. */
		if (send_reply(d, c, frame, pos) < 0)
			client_close(d, c);
	}
}

/* Now, in the clock of /proc/PID/stat's start times: ticks since boot. */
static uint64_t boot_ticks(void)
{
	static long hz;
	struct timespec ts;

	if (!hz)
		hz = sysconf(_SC_CLK_TCK);
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * (uint64_t)hz + (uint64_t)ts.tv_nsec / (1000000000ull / (uint64_t)hz);
}

/* A connection pr_accept() took without an fd to keep it: closed as any
 * refused one is, in a closing process, since packets queued on it may
 * carry files whose close waits. SO_PEERCRED needs no fd. */
static void shed(int fd, void *arg)
{
	struct daemon *d = arg;
	struct ucred cred;
	socklen_t len = sizeof(cred);

	closer_sock_close(d, fd,
			  getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ? (uid_t)-1 : cred.uid);
}

void server_accept_resume(struct daemon *d)
{
	/* The spare first, before anything else takes the fd just freed:
	 * with it, the next connection the daemon has no fd for is shed
	 * rather than left waiting for the next resume. */
	if (d->spare_fd < 0)
		d->spare_fd = pr_accept_spare();
	if (d->accept_paused && ev_mod(d, d->lfd, EPOLLIN, &d->listen_ev) == 0)
		d->accept_paused = false;
}

void server_accept(struct daemon *d)
{
	for (;;) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		struct client *c;
		int fd, pidfd = -1;

		/* The last shed connection's fd is free again once the closer
		 * has closed it. */
		if (d->spare_fd < 0)
			d->spare_fd = pr_accept_spare();
		fd = pr_accept(d->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC, &d->spare_fd, shed, d);
		if (fd == PR_ACCEPT_SHED) {
			log_limited(&d->refused_log, "connections refused",
				    "client refused: out of file descriptors (%u clients connected, --max-clients %u)",
				    d->nclients, d->o.max_clients);
			continue;
		}
		if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
			/* Out of fds and nothing shed (no spare: the last shed
			 * connection still waits for the closer). The socket
			 * stays readable, so it leaves the epoll set until the
			 * closer or the timer may have freed one
			 * (server_accept_resume), rather than wake the loop
			 * for nothing. */
			log_limited(&d->paused_log, "pauses",
				    "accepting paused: out of file descriptors (%u clients connected)",
				    d->nclients);
			if (ev_mod(d, d->lfd, 0, &d->listen_ev) == 0)
				d->accept_paused = true;
			return;
		}
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				log_warn("accept: %s", strerror(errno));
			return;
		}
		/* Who it is first: a refused connection may have packets queued
		 * already, whose files are charged to it (closer.c). */
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
			closer_sock_close(d, fd, (uid_t)-1);
			continue;
		}
		if (d->nclients >= d->o.max_clients) {
			log_limited(&d->refused_log, "connections refused",
				    "client refused: %u clients connected (--max-clients %u)",
				    d->nclients, d->o.max_clients);
			closer_sock_close(d, fd, cred.uid);
			continue;
		}
		if (!uid_privileged(d, cred.uid) &&
		    d->nclients >= d->o.max_clients - d->o.reserved_clients) {
			log_limited(&d->refused_res_log, "connections refused for the reserve",
				    "client refused: uid %u pid %d: %u clients connected, the last %u of --max-clients %u kept for root and uid %u (--reserved-clients)",
				    (unsigned)cred.uid, (int)cred.pid, d->nclients, d->o.reserved_clients,
				    d->o.max_clients, (unsigned)d->uid);
			closer_sock_close(d, fd, cred.uid);
			continue;
		}
		if (!uid_privileged(d, cred.uid) &&
		    uid_count(&d->uid_clients, cred.uid) >= d->o.max_clients_per_uid) {
			char note[96];

			log_limited(&d->refused_uid_log, "connections refused for a uid's quota",
				    "client refused: uid %u has %u connections%s (--max-clients-per-uid), pid %d",
				    (unsigned)cred.uid, (unsigned)uid_count(&d->uid_clients, cred.uid),
				    subuid_note(cred.uid, note, sizeof(note)), (int)cred.pid);
			closer_sock_close(d, fd, cred.uid);
			continue;
		}
		len = sizeof(pidfd);
		if (!d->no_peerpidfd &&
		    getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0)
			pidfd = -1;
		c = calloc(1, sizeof(*c));
		if (!c) {
			closer_sock_close(d, fd, cred.uid);
			if (pidfd >= 0)
				close(pidfd);
			continue;
		}
		c->ev.kind = EV_CLIENT;
		c->fd = fd;
		c->peer_pidfd = pidfd >= 0;
		c->accept_ticks = boot_ticks();
		c->id.pid = cred.pid;
		c->id.uid = cred.uid;
		c->id.pidfd = pidfd;
		c->pending_tail = &c->pending;
		/* A uid whose passed files wait to be closed is not read
		 * from until they are: its new connection waits parked. */
		if (closer_over(d, cred.uid)) {
			park(d, c);
		} else if (ev_add(d, fd, EPOLLIN, &c->ev) < 0) {
			closer_sock_close(d, fd, cred.uid);
			if (pidfd >= 0)
				close(pidfd);
			free(c);
			continue;
		}
		c->next = d->clients;
		if (d->clients)
			d->clients->prev = c;
		d->clients = c;
		d->nclients++;
		files_open_add(d);
		uid_adjust(&d->uid_clients, c->id.uid, 1);
	}
}

/* ---- replies ---------------------------------------------------------- */

static int queue_reply(struct daemon *d, struct client *c, const uint8_t *buf, size_t len)
{
	struct out_packet *o;

	if (c->pending_bytes + len > MAX_PENDING_BYTES)
		return -ENOBUFS; /* it does not read its replies: drop it */
	o = malloc(sizeof(*o) + len);
	if (!o)
		return -ENOMEM;
	o->next = NULL;
	o->len = len;
	memcpy(o->data, buf, len);
	if (!c->pending)
		ev_mod(d, c->fd, EPOLLOUT, &c->ev); /* stop reading until drained */
	*c->pending_tail = o;
	c->pending_tail = &o->next;
	c->pending_bytes += len;
	return 0;
}

static int send_reply(struct daemon *d, struct client *c, const uint8_t *buf, size_t len)
{
	if (c->peer_gone)
		return 0;
	if (!c->pending) {
		ssize_t n = send(c->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n >= 0)
			return 0;
		if (errno != EAGAIN)
			return -errno;
	}
	return queue_reply(d, c, buf, len);
}

static int flush_pending(struct daemon *d, struct client *c)
{
	while (c->pending) {
		struct out_packet *o = c->pending;
		ssize_t n = send(c->fd, o->data, o->len, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN ? 0 : -errno;
		c->pending = o->next;
		c->pending_bytes -= o->len;
		free(o);
	}
	c->pending_tail = &c->pending;
	if (c->subscribed)
		feed_room(d, c);
	return ev_mod(d, c->fd, client_events(c), &c->ev);
}

/* ---- requests --------------------------------------------------------- */

/*
 * A file passed with a packet is one this thread may have to close, and a
 * close may wait (closer.c): so packets are peeked first, and taken only
 * once every file they carry is installed (take_packet), two calls
 * a packet. A client that will pass none (PR_HELLO_NOFILES) has the kernel
 * refuse them instead (SO_PASSRIGHTS, Linux 6.16: a send with a file fails
 * with EPERM), and its packets are taken in one call, once none it sent
 * before the refusal can be queued still: from the packet after an ARM
 * with the word its HELLO's reply gave (proto.h), which the client could
 * only send after that reply, and so after the refusal began. Where the
 * kernel cannot, files pass as ever and the reply's arm is 0.
 */
bool server_passrights(void)
{
	int sv[2], off = 0;
	bool ok;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return false;
	ok = setsockopt(sv[0], SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof(off)) == 0;
	close(sv[0]);
	close(sv[1]);
	return ok;
}

static void refuse_files(struct daemon *d, struct client *c)
{
	int off = 0, on = 1;
	uint64_t arm = 0;

	if (d->no_passrights ||
	    setsockopt(c->fd, SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof(off)) < 0)
		return;
	/* Never blocking (a daemon started early in boot): without an arm,
	 * files pass again. */
	if (getrandom(&arm, sizeof(arm), GRND_NONBLOCK) != (ssize_t)sizeof(arm) || !arm) {
		(void)setsockopt(c->fd, SOL_SOCKET, SO_PASSRIGHTS, &on, sizeof(on));
		return;
	}
	c->arm = arm;
}

/* FILES: the kernel passes this client's files again, and its packets are
 * peeked again (before the reply, so before any can carry one). */
static int allow_files(struct daemon *d, struct client *c)
{
	int on = 1;

	if ((c->nofiles || c->arm) &&
	    setsockopt(c->fd, SOL_SOCKET, SO_PASSRIGHTS, &on, sizeof(on)) < 0)
		return -errno;
	if (c->nofiles)
		files_open_add(d);
	c->nofiles = false;
	c->arm = 0;
	return 0;
}

static int hello(struct daemon *d, struct client *c, const struct pr_frame *f, int passed_fd)
{
	pid_t pid;
	int err;

	if (f->version != PR_PROTO_VERSION)
		return -EPROTONOSUPPORT;
	if (c->id.pidfd < 0) {
		/* No SO_PEERPIDFD: take the client's own pidfd, but only if it
		 * names the process the kernel says is at the other end. */
		if (passed_fd < 0)
			return -EPERM;
		err = procreg__pidfd_pid(passed_fd, &pid);
		if (err < 0 || pid != c->id.pid)
			return -EPERM;
		c->id.pidfd = fcntl(passed_fd, F_DUPFD_CLOEXEC, 3);
		if (c->id.pidfd < 0)
			return -errno;
	}
	err = procreg__pidfd_identity(c->id.pidfd, &pid, &c->id.start, &c->id.ino);
	if (err < 0)
		return err;
	if (pid != c->id.pid)
		return -EPERM;
	if (!c->peer_pidfd) {
		uid_t uid;

		/* SO_PEERCRED's pid is the connecting process's, but it may
		 * have exited and its pid gone to another process by now: the
		 * process behind the pidfd must have existed when we accepted
		 * the connection, and have the uid that connected. */
		if (c->id.start > c->accept_ticks || procreg__proc_uid(pid, &uid) < 0 ||
		    uid != c->id.uid)
			return -EPERM;
	}
	c->hello_done = true;
	/* Only a HELLO with room for the arm in its reply (no reply is
	 * longer than its request) and that wants one. */
	if ((f->arg & PR_HELLO_NOFILES) && f->body_len >= 16 && !(f->arg & PR_HELLO_QUIET))
		refuse_files(d, c);
	c->notices = f->arg & PR_HELLO_NOTICES;
	/* It sends and closes without reading (reader pages): anything we
	 * sent would be left unread, and its close would then reset the
	 * connection before we read what it sent. */
	c->peer_gone = f->arg & PR_HELLO_QUIET;
	LOGV(d, "client pid %d uid %u: connected%s", (int)c->id.pid, (unsigned)c->id.uid,
	     d->no_peerpidfd ? " (pidfd passed)" : "");
	return 0;
}

/* The identity a REGISTER names: the client itself, or the process of a
 * pidfd it passed (same uid, or root). */
static int target_of(struct client *c, const struct pr_frame *f, int passed_fd,
		     struct ident *t)
{
	int err;

	if (!(f->h.flags & PR_F_PIDFD)) {
		*t = c->id;
		return 0;
	}
	if (passed_fd < 0)
		return -EBADF;
	memset(t, 0, sizeof(*t));
	t->pidfd = passed_fd;
	err = procreg__pidfd_identity(passed_fd, &t->pid, &t->start, &t->ino);
	if (err == -EBADF)
		return -EBADF;
	if (err < 0)
		return -ESRCH;
	err = procreg__proc_uid(t->pid, &t->uid);
	if (err < 0 || procreg__pidfd_exited(passed_fd))
		return -ESRCH;
	if (c->id.uid != 0 && c->id.uid != t->uid)
		return -EPERM;
	return 0;
}

/* What a REGISTER or JOIN frame asks for, as the registry takes it. */
static void request_of(const struct pr_frame *f, uint8_t kind, struct reg_request *rq)
{
	*rq = (struct reg_request){
		.kind = kind, .name = f->name, .name_len = f->name_len, .meta = f->meta,
		.meta_len = f->meta_len,
	};
	if (kind == PR_KIND_NAME) {
		rq->flags = f->h.flags & (PR_F_QUEUE | PR_F_REPLACE | PR_F_REPLACEABLE |
					  PR_F_LEASE_MARK);
	}
	rq->lease_ms = f->arg;
}

/* The checks every REGISTER and JOIN starts with: a valid name, an owner
 * the client may act for, and that owner's entry (attached first: see
 * registry.c's put_local). */
static int attach_target(struct daemon *d, struct client *c, const struct pr_frame *f,
			 int passed_fd, struct ident *id, struct proc **p)
{
	int err = procreg__proto_check_name(f);

	if (!err)
		err = target_of(c, f, passed_fd, id);
	if (!err)
		err = proc_attach(d, id, p);
	return err;
}

static int do_register(struct daemon *d, struct client *c, const struct pr_frame *f,
		       const struct pr_key *key, int passed_fd)
{
	int sig = (f->h.flags & PR_F_SIGNAL_MASK) >> PR_F_SIGNAL_SHIFT;
	struct reg_request rq;
	struct ident id;
	struct proc *p;
	int err = attach_target(d, c, f, passed_fd, &id, &p);

	if (err)
		return err;
	if (sig >= NSIG) {
		proc_release_if_empty(d, p);
		return -EINVAL;
	}
	request_of(f, PR_KIND_NAME, &rq);
	rq.key = key;
	err = registry_put(d, p, &id, &rq, false);
	/* For the process, from now on: what it gets if it loses a name to
	 * another node (proc_lost_name); journaled, to outlive a restart. */
	if (!err || err == -EINPROGRESS)
		owners_signal_set(d, p, sig);
	proc_release_if_empty(d, p);
	return err;
}

static int do_join(struct daemon *d, struct client *c, const struct pr_frame *f,
		   int passed_fd)
{
	struct reg_request rq;
	struct ident id;
	struct proc *p;
	int err = attach_target(d, c, f, passed_fd, &id, &p);

	if (err)
		return err;
	request_of(f, PR_KIND_MEMBER, &rq);
	err = registry_put(d, p, &id, &rq, false);
	proc_release_if_empty(d, p);
	return err;
}

/* Whether C may remove the entry R: its owner process, a process of the
 * owner's uid, or root. A remote node's entry only its own daemon removes. */
static int may_remove(const struct client *c, const struct pr_record *r)
{
	if (r->node != 0)
		return 0;
	return c->id.uid == 0 || c->id.uid == r->uid ||
	       (r->pid == (uint32_t)c->id.pid && ident_is(&c->id, r->start_time, r->aux));
}

static int do_unregister(struct daemon *d, struct client *c, const struct pr_frame *f,
			 const struct pr_key *key)
{
	struct reg_where at = { &d->w.map.hdr->names, 0 };
	uint64_t off;
	int err = procreg__proto_check_name(f);

	if (err)
		return err;
	off = key ? procreg__w_find(&d->w, at.root, key, &at.pos)
		  : procreg__w_find_name(&d->w, f->name, f->name_len, &at.pos);
	if (!off)
		return -ENOENT;
	if (!may_remove(c, rec(d, off)))
		return -EPERM;
	registry_remove(d, off, &at, PROCREG_EV_UNREGISTERED);
	return 0;
}

static int do_leave(struct daemon *d, struct client *c, const struct pr_frame *f)
{
	struct reg_where at = { NULL, 0 };
	struct pr_key k;
	uint64_t off;
	int err = procreg__proto_check_name(f);

	if (err)
		return err;
	if (procreg__w_group(&d->w, f->name, f->name_len, false, &at.root) < 0)
		return -ENOENT;
	pr_key_member(&k, (uint32_t)c->id.pid, c->id.start, 0, d->w.map.hdr->hash_seed);
	off = procreg__w_find(&d->w, at.root, &k, &at.pos);
	/* The key is the pid and start time: another process given the
	 * pid within the same tick has it too, not the same inode. */
	if (!off || !ident_is(&c->id, c->id.start, rec(d, off)->aux))
		return -ENOENT;
	registry_remove(d, off, &at, PROCREG_EV_LEFT);
	return 0;
}

/* A registration or join refused for a quota or the reserve: who asked,
 * and which limit (rate-limited: the client may ask again at once). */
static int note_refused(struct daemon *d, const struct client *c, int err)
{
	char note[96];

	/* A limiter each: a uid at its own cap must not keep the line that
	 * says all uids' room is spent from the log (the first a second). */
	if ((err == -EDQUOT || err == -ENOSPC) && d->procs_hit)
		log_limited(err == -EDQUOT ? &d->denied_procs_log : &d->denied_room_log,
			    err == -EDQUOT ? "names refused for a uid's limit on processes"
					   : "names refused for all uids' limit on processes",
			    "client pid %d uid %u: name refused (%s): each process holding names costs procregd a descriptor, and the uid's hold %llu%s (--max-procs-per-uid %u), those of all uids but root and uid %u %llu (at most %llu, the rest kept for connections and readers)",
			    (int)c->id.pid, (unsigned)c->id.uid, err == -EDQUOT ? "EDQUOT" : "ENOSPC",
			    (unsigned long long)uid_count(&d->uid_procs, c->id.uid),
			    subuid_note(c->id.uid, note, sizeof(note)), d->o.max_procs_per_uid,
			    (unsigned)d->uid, (unsigned long long)d->nprocs_unpriv,
			    (unsigned long long)d->procs_room);
	else if (err == -EDQUOT)
		log_limited(&d->denied_quota_log, "names refused for a quota",
			    "client pid %d uid %u: name refused (EDQUOT): --max-names-per-proc %u, --max-names-per-uid %u, for a place in line --max-places-per-uid %u or, for a lease, --max-leases-per-uid %u reached (the uid holds %llu%s, and %llu leases)",
			    (int)c->id.pid, (unsigned)c->id.uid, d->o.max_names_per_proc,
			    d->o.max_names_per_uid, d->o.max_places_per_uid, d->o.max_leases_per_uid,
			    (unsigned long long)uid_count(&d->uid_names, c->id.uid),
			    subuid_note(c->id.uid, note, sizeof(note)),
			    (unsigned long long)owners_uid_leases(d, c->id.uid));
	else if (err == -ENOSPC && d->w.reserve_hit)
		log_limited(&d->denied_res_log, "names refused for the reserve",
			    "client pid %d uid %u: name refused (ENOSPC): the table is full but for the %llu bytes kept for root and uid %u (--reserved-size) and the %llu kept for its name index to be rebuilt and grow",
			    (int)c->id.pid, (unsigned)c->id.uid, (unsigned long long)d->w.reserve,
			    (unsigned)d->uid, (unsigned long long)procreg__w_index_room(&d->w));
	else if (err == -ENOSPC && d->w.place_hit)
		log_limited(&d->denied_place_log, "names refused for their hash",
			    "client pid %d uid %u: name refused (ENOSPC): its hash would put it far "
			    "from its home slot, or behind many with its tag (names computed to "
			    "collide?)", (int)c->id.pid, (unsigned)c->id.uid);
	return err;
}

/* KEY: the name's key, made when F was read (parse_ahead), or NULL. */
static int handle_frame(struct daemon *d, struct client *c, const struct pr_frame *f,
			const struct pr_key *key, int passed_fd)
{
	if (!c->hello_done)
		return f->h.op == PR_OP_HELLO ? hello(d, c, f, passed_fd) : -EPROTO;
	switch (f->h.op) {
	case PR_OP_REGISTER:
		return note_refused(d, c, do_register(d, c, f, key, passed_fd));
	case PR_OP_UNREGISTER:
		return do_unregister(d, c, f, key);
	case PR_OP_JOIN:
		return note_refused(d, c, do_join(d, c, f, passed_fd));
	case PR_OP_LEAVE:
		return do_leave(d, c, f);
	case PR_OP_REFRESH:
		return procreg__proto_check_name(f) ?: owners_refresh(d, c, f);
	case PR_OP_SYNC:
		/* Once a packet: the deaths a SYNC must show are those before
		 * its packet was sent, and a later SYNC of the same packet
		 * was sent with it. Once a frame, a packet of 4,096 SYNCs
		 * cost as many rounds of epoll_wait, and held the others up.
		 * The packet's reply then waits for the deaths under way
		 * (procs.c: procs_sync_waits). */
		if (!d->synced) {
			d->sync_hold = procs_sync(d, c->id.uid);
			d->synced = true;
		}
		return 0;
	case PR_OP_READERS:
		return readers_add(d, &c->id, passed_fd);
	case PR_OP_FILES:
		return allow_files(d, c);
	case PR_OP_FOLLOW:
		if (!c->follows) {
			c->follows = true;
			d->w.feed_followers++;
		}
		return 0;
	case PR_OP_SUBSCRIBE:
		if (!c->subscribed) {
			c->subscribed = true;
			c->sub_next = d->subscribers;
			if (c->sub_next)
				c->sub_next->sub_prev = c;
			d->subscribers = c;
		}
		return 0;
	default:
		return -EBADMSG;
	}
}

/*
 * The requests of a packet touch the name index at random places: in a
 * big table, each is a cache and TLB miss that the writer waits for. The
 * packet holds the next requests already: the home slots of their names
 * are prefetched PREFETCH_AHEAD frames ahead of the one handled, so that
 * their misses overlap the work on the ones before. Into a table of 10^6
 * names, one client on the daemon's CPU: procregd's CPU a pipelined
 * registration 284-310 ns without, 146-155 with; registrations 2.8-3.1
 * M/s without, 5.2-5.5 with; removals 3.5 M/s, 6.4-6.6 (procreg-bench
 * register --prefill 1000000). Two frames ahead did about as well as four.
 *
 * A frame is parsed once, and a name's key (its hash) made once, when the
 * frame is read ahead: the frame is handled from what was kept, and the
 * key goes with it to the registry. Parsed again where it was handled and
 * hashed again in the registry, a request took 39 instructions more (the
 * daemon under callgrind, 200 processes registering 100 names each and
 * dying, one registering, removing and registering 20,000: 3.2% of the
 * requests' instructions, the parse's halved). A synchronous request, one
 * frame a packet, took 1,902 instructions of the daemon's loop, and takes
 * 1,659: four look-ahead parses a packet, three of them finding its end,
 * went with the second parse.
 *
 * The prefetch is a hint: it changes nothing but timing, whatever the
 * frame says (the slot it asks for is in the index, wherever the name
 * hashes). The key is made from the frame's bytes with the table's seed,
 * which never changes: the one the registry would make.
 */
#define PREFETCH_AHEAD 4

struct parsed {
	int r;                     /* procreg__proto_next's answer */
	size_t end;                /* where the next frame starts */
	struct pr_frame f;
	bool keyed;                /* k is the name's key */
	struct pr_key k;
};

/* The frames of one packet: the one handled and PREFETCH_AHEAD after it. */
struct lookahead {
	struct parsed q[PREFETCH_AHEAD + 1];
	unsigned head, tail;       /* frames handled, frames parsed */
	size_t pos;                /* where the next parse starts */
	bool done;                 /* the last parse found the end, or no frame */
};

static void parse_ahead(struct daemon *d, const struct client *c, size_t len,
			struct lookahead *la)
{
	while (!la->done && la->tail - la->head <= PREFETCH_AHEAD) {
		struct parsed *p = &la->q[la->tail++ % (PREFETCH_AHEAD + 1)];

		p->keyed = false;
		/* The end, found without a call that would clear a frame no
		 * one reads (a synchronous request's packet ends after one). */
		if (la->pos == len) {
			p->r = 0;
			p->end = len;
			la->done = true;
			break;
		}
		p->r = procreg__proto_next(d->in, len, &la->pos, &p->f);
		p->end = la->pos;
		if (p->r == 0 || p->r == -EBADMSG) {
			la->done = true;
		} else if (c->hello_done && p->r == 1 &&
			   (p->f.h.op == PR_OP_REGISTER || p->f.h.op == PR_OP_UNREGISTER) &&
			   p->f.name_len <= PROCREG_NAME_MAX) {
			/* Keys only once the client has said HELLO: the frames
			 * read ahead of it are handled unkeyed. */
			pr_key_name(&p->k, PR_KIND_NAME, p->f.name, p->f.name_len,
				    d->w.map.hdr->hash_seed);
			procreg__w_prefetch_hash(&d->w, p->k.hash);
			p->keyed = true;
		}
	}
}

/* The number of frames handled, or <0 when the connection must close. */
static int handle_packet(struct daemon *d, struct client *c, size_t len, int passed_fd)
{
	struct lookahead la;
	size_t out = 0;
	int status, frames = 0, err;

	/* Not an initialiser: that clears the whole queue, every packet. */
	la.head = la.tail = 0;
	la.pos = 0;
	la.done = false;
	d->synced = false;
	d->refused = 0;
	d->sync_hold = 0;
	for (;; la.head++) {
		struct parsed *p;
		const struct pr_frame *f;
		size_t pos;
		int r;

		parse_ahead(d, c, len, &la);
		p = &la.q[la.head % (PREFETCH_AHEAD + 1)];
		f = &p->f;
		pos = p->end;
		r = p->r;
		if (r == 0)
			break;
		if (r == -EBADMSG) {
			log_limited(&d->dropped_log, "clients closed",
				    "client pid %d uid %u: unframeable packet, closing", (int)c->id.pid,
				    (unsigned)c->id.uid);
			return -EBADMSG;
		}
		uint64_t t0 = PR_TRACE_CLOCK(procregd, reply);

		frames++;
		if (f->h.op == PR_OP_ARM && r == 1) {
			/* Unanswered. Alone in its packet, with the word the
			 * HELLO's reply gave: else the client broke the
			 * protocol, or guesses. */
			if (frames > 1 || pos != len || !c->arm || f->arm != c->arm) {
				log_limited(&d->dropped_log, "clients closed",
					    "client pid %d uid %u: ARM not as its HELLO's reply said, closing",
					    (int)c->id.pid, (unsigned)c->id.uid);
				return -EPROTO;
			}
			c->arm = 0;
			c->nofiles = true;
			d->files_open--;
			continue;
		}
		PR_TRACE(procregd, request, f->h.op, c->id.pid, f->name, f->name_len, f->h.id);
		if (r == -EPROTO || (f->h.op & PR_OP_REPLY))
			status = -EBADMSG;
		else if ((f->h.op == PR_OP_HELLO && (c->hello_done || frames > 1)) ||
			 (f->h.op == PR_OP_READERS && frames > 1) ||
			 (passed_fd >= 0 && frames > 1 && f->h.op != PR_OP_HELLO &&
			  (f->h.flags & PR_F_PIDFD)))
			status = -EBADMSG; /* one HELLO, one fd per packet */
		else
			status = handle_frame(d, c, f, p->keyed ? &p->k : NULL, passed_fd);
		PR_TRACE(procregd, reply, f->h.op, c->id.pid, status, t0 ? procreg__mono_ns() - t0 : 0,
			 f->h.id);
		d->refused += status < 0;
		/* A HELLO with its body has a HELLO back (with the arm, if
		 * it has room for it); one without (no client sends it) only
		 * its status, so that no reply is longer than its request: a
		 * packet of them fits d->out as every packet does, one reply
		 * to each frame. */
		if (f->h.op == PR_OP_HELLO && f->body_len >= 16)
			procreg__proto_put_hello_arm(d->out, &out, f->h.id, status,
						     status ? 0 : c->arm);
		else if (f->h.op == PR_OP_HELLO && f->body_len >= 2 * sizeof(uint32_t))
			procreg__proto_put_hello(d->out, &out, PR_OP_HELLO | PR_OP_REPLY, f->h.id,
						 status);
		else
			procreg__proto_put_status(d->out, &out, (uint16_t)(f->h.op | PR_OP_REPLY),
						  f->h.id, status);
		if (!c->hello_done)
			break; /* a failed HELLO ends the conversation */
	}
	if (out && d->sync_hold && !c->peer_gone) {
		/* Held, the connection parked: nothing more is read from it
		 * before its SYNC is answered (server_unpark). */
		if ((err = queue_reply(d, c, d->out, out)) < 0)
			return err;
		c->sync_seq = d->sync_hold;
		c->held_next = d->held;
		d->held = c;
		if (!c->parked)
			park(d, c);
	} else if (out && (err = send_reply(d, c, d->out, out)) < 0) {
		if (err != -EPIPE && err != -ECONNRESET)
			return err;
		/* It sent and closed (readers hand their pages over so):
		 * what it sent before the close is still handled; replies
		 * go nowhere. recv() says when nothing is left. */
		c->peer_gone = true;
	}
	return c->hello_done ? frames : -EPERM;
}

/* How many fds the frames of a packet may take: one if a frame is a HELLO,
 * a READERS, or a REGISTER or JOIN whose owner is the pidfd passed
 * (PR_F_PIDFD). */
static int fds_wanted(const uint8_t *buf, size_t len)
{
	struct pr_frame f;
	size_t pos = 0;
	int r;

	while ((r = procreg__proto_next(buf, len, &pos, &f)) != 0 && r != -EBADMSG)
		if (f.h.op == PR_OP_HELLO || f.h.op == PR_OP_READERS ||
		    ((f.h.op == PR_OP_REGISTER || f.h.op == PR_OP_JOIN) && (f.h.flags & PR_F_PIDFD)))
			return 1;
	return 0;
}

int passed_fds(struct msghdr *msg, int *fds)
{
	int n = 0;

	for (struct cmsghdr *h = CMSG_FIRSTHDR(msg); h; h = CMSG_NXTHDR(msg, h)) {
		size_t k;

		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS ||
		    h->cmsg_len < CMSG_LEN(0))
			continue;
		k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		if (k > (size_t)(PASSED_FDS_MAX - n))
			k = (size_t)(PASSED_FDS_MAX - n);
		memcpy(fds + n, CMSG_DATA(h), k * sizeof(int));
		n += (int)k;
	}
	return n;
}

/* One packet from C, handled: the number of its frames; 0 if there was
 * none to take (or C is parked); <0 when the connection must close. */
static int take_packet(struct daemon *d, struct client *c)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(PASSED_FDS_MAX * sizeof(int))];
	} u;
	struct iovec iov = { d->in, PR_PACKET_MAX };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = u.b, .msg_controllen = sizeof(u.b) };
	int fds[PASSED_FDS_MAX];
	int err = 0, nfds, want;
	uint64_t until;
	ssize_t n;
	bool peek;

	/* Its uid has as many files waiting to be closed as it may. */
	if (closer_over(d, c->id.uid)) {
		park(d, c);
		return 0;
	}
	/* Its uid made more events than the feed's pacing allows: it waits
	 * for its turn (the timer's). */
	if ((until = client_paced(d, c))) {
		char note[96];
		uint64_t now = procreg__mono_ns();

		log_limited(&d->paced_log, "uids paced",
			    "uid %u%s: its requests made feed events (a refused request counts as one, another as a quarter at least) faster than --max-feed-rate-per-uid %u a second allows: its connections are not read for %llu ms (their requests are served after, none refused)",
			    (unsigned)c->id.uid, subuid_note(c->id.uid, note, sizeof(note)),
			    d->feed_rate,
			    (unsigned long long)((until > now ? until - now : 0) / 1000000 + 1));
		park(d, c);
		return 0;
	}
	/* Peeked, then taken, unless it can carry no file (nofiles:
	 * refuse_files()). A file the kernel cannot install (the daemon out
	 * of fds) it drops, and were that its last reference, its close
	 * would run on this thread, where it may wait (closer.c). A peek
	 * installs copies and the packet keeps its own references: once
	 * every file is installed, taking the packet drops only references
	 * that are not the last. One that is not (MSG_CTRUNC) is left
	 * queued, for a closing process to drain with the connection. */
	peek = !c->nofiles;
	if (peek) {
		n = recvmsg(c->fd, &msg, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	} else {
		/* Nothing but bytes can come (the kernel refuses files and no
		 * credentials are asked for): recv(), with the packet's whole
		 * length to tell one too big. */
		n = recv(c->fd, d->in, PR_PACKET_MAX, MSG_DONTWAIT | MSG_TRUNC);
		msg.msg_controllen = 0;
		msg.msg_flags = n > (ssize_t)PR_PACKET_MAX ? MSG_TRUNC : 0;
	}
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	/* Before anything else: an empty packet, which reads as the end of
	 * the connection, may carry fds too. */
	nfds = peek ? passed_fds(&msg, fds) : 0;
	if (n > 0 && peek && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
	    recv(c->fd, NULL, 0, MSG_DONTWAIT) < 0) {
		err = -errno;
	} else if (n == 0) {
		err = -ECONNRESET;
	} else if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		log_limited(&d->dropped_log, "clients closed",
			    "client pid %d uid %u: oversized packet or control data, closing",
			    (int)c->id.pid, (unsigned)c->id.uid);
		err = -EMSGSIZE;
	} else if (nfds && nfds > (want = fds_wanted(d->in, (size_t)n))) {
		log_limited(&d->dropped_log, "clients closed",
			    "client pid %d uid %u: %d file descriptors passed with a packet that takes %d, closing",
			    (int)c->id.pid, (unsigned)c->id.uid, nfds, want);
		err = -EBADMSG;
	} else {
		uint64_t h0 = d->w.map.hdr->feed_head, apart = d->feed_apart,
			 j0 = owners_journaled(d);

		uint64_t events;

		procreg__w_clock_hold(&d->w, true);
		err = handle_packet(d, c, (size_t)n, nfds ? fds[0] : -1);
		procreg__w_clock_hold(&d->w, false);
		/* Its events, but for those charged to others meanwhile
		 * (server_feed_charge(): the deaths a SYNC drained); and what
		 * it had written to the owners journal. Requests that made
		 * fewer pay the least (REQUEST_EVENTS). */
		events = d->w.map.hdr->feed_head - h0 - (d->feed_apart - apart) +
			 (owners_journaled(d) - j0) / JOURNAL_EVENT_BYTES;
		if (err > 0) {
			uint64_t least = (uint64_t)d->refused +
					 ((uint64_t)(err - d->refused) + REQUESTS_AN_EVENT - 1) /
						 REQUESTS_AN_EVENT;

			if (events < least)
				events = least;
		}
		feed_charge(d, c->id.uid, events);
	}
	/* A request that keeps a passed fd keeps a dup of it. One not kept
	 * is ours alone: its close may wait (closer.c). */
	for (int k = 0; k < nfds; k++)
		closer_put(d, fds[k], c->id.uid);
	return err;
}

/*
 * A readable client's packets. The next is read at once only after a
 * packet of one request, and only from a client that was the one ready in
 * this wake-up: at most 16. A packet of one request is a synchronous
 * call's, and its caller sends the next as soon as the reply reaches it:
 * sharing the daemon's CPU, it often has by the time send() returns, and
 * reading on saves an epoll_wait a request. With others ready, each has
 * one packet read and the set is asked again (it is level-triggered: what
 * is left makes a client ready again), or the caller on the daemon's CPU
 * takes turn after turn while one on the other CPU waits, and that CPU
 * idles. A packet of many requests (procreg_batch) is mostly its sender's
 * last before it waits for the answers, and a read after it finds the
 * socket empty: a system call for nothing, on each of a thousand
 * processes' batches.
 *
 * Measured in alternating runs: 1,000 processes registering 100 names
 * each in one batch, procregd's CPU time in the step 33.5, 32.6, 38.6 and
 * 48.2 ms against 44.7, 35.1, 48.4 and 47.7 reading on after every packet
 * (with procs.c no longer polling a new process's pidfd; procreg-bench
 * stress --pipelined: 29% fewer recv calls). One packet a wake-up
 * whatever it holds cost the synchronous caller on the daemon's CPU:
 * 0.84x-0.87x the round trip against 0.90x-0.97x reading on (procreg-bench
 * register, same-cpu). Two synchronous callers on two CPUs: 78.8-103.6 k
 * registrations/s, 0.86x-1.06x their round trip, against 42.1-50.8 k/s,
 * 0.55x-0.66x, when a client was read on whatever else was ready; the one
 * caller on the daemon's CPU 0.91x-1.01x against 0.85x-1.01x (four
 * alternating runs of procreg-bench register, its echo server reading by
 * the same rules each time).
 */
void server_client_event(struct daemon *d, struct client *c, uint32_t events, bool alone)
{
	int err = 0, r = 0;

	if (events & EPOLLOUT)
		err = flush_pending(d, c);
	if (!err && !c->pending && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
		int most = alone ? 16 : 1;

		for (int i = 0; i < most && !c->pending; i++)
			if ((r = take_packet(d, c)) != 1)
				break;
		if (r < 0)
			err = r;
	}
	if (err < 0)
		client_close(d, c);
}
