/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * client.c - the handle, and the client side of the daemon protocol.
 *
 * Writes go to procregd over one SOCK_SEQPACKET connection per handle and
 * process, made on the first call that needs it. Calls on one handle
 * serialise on its io mutex, so each call sees its own replies in order.
 * Between replies the daemon may send a notice (a name lost) in a packet
 * of its own: whoever reads the connection keeps it for procreg_lost().
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"
#include "probes.h"
#include "proto.h"
#include "procreg/version.h"

/* A notice of a name lost, kept until procreg_lost() takes it. */
struct pr_lost_note {
	struct pr_lost_note *next;
	int reason;
	pid_t winner;
	uint64_t time_ns;
	char name[PROCREG_NAME_MAX + 1];
	char node[64];
};

static void lost_free(procreg_t *reg)
{
	while (reg->lost) {
		struct pr_lost_note *n = reg->lost;

		reg->lost = n->next;
		free(n);
	}
	reg->lost_tail = &reg->lost;
}

PROCREG_API const char *procreg_version(void)
{
	return PROCREG_VERSION_STRING;
}

/* ---- sized structs ----------------------------------------------------- */

int procreg__sized(const void *s, size_t min, size_t known)
{
	const unsigned char *p = s;
	size_t sz;

	if (!s)
		return -EINVAL;
	memcpy(&sz, s, sizeof(sz));
	if (sz < min)
		return -EINVAL;
	/* Past this, .sz is garbage (a struct never set with PROCREG_OPTS),
	 * not a newer header: reading that far could fault. */
	if (sz > PR_SIZED_MAX)
		return -E2BIG;
	for (size_t i = known; i < sz; i++)
		if (p[i])
			return -EOPNOTSUPP;
	return 0;
}

void procreg__sized_in(void *dst, size_t known, const void *s)
{
	size_t sz;

	memcpy(&sz, s, sizeof(sz));
	memset(dst, 0, known);
	memcpy(dst, s, sz < known ? sz : known);
}

int procreg__opts_take(void *dst, size_t known, const void *s, size_t min)
{
	int err = s ? procreg__sized(s, min, known) : 0;

	if (err)
		return err;
	if (s) {
		procreg__sized_in(dst, known, s);
	} else {
		memset(dst, 0, known);
		memcpy(dst, &known, sizeof(known));
	}
	return 0;
}

void procreg__sized_out(void *dst, const void *src, size_t known)
{
	size_t sz;

	/* .sz (at least a size_t: checked) is the caller's; the rest as far
	 * as both reach. */
	memcpy(&sz, dst, sizeof(sz));
	memcpy((unsigned char *)dst + sizeof(sz), (const unsigned char *)src + sizeof(sz),
	       (sz < known ? sz : known) - sizeof(sz));
}

/* The uid a caller trusts besides root and itself: .trust_uid, else
 * $PROCREG_TRUST_UID, else none (0). */
static uid_t trust_of(uint32_t opt)
{
	const char *s = secure_getenv("PROCREG_TRUST_UID");
	unsigned long v;
	char *end;

	if (opt)
		return opt;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtoul(s, &end, 10);
	return *end || errno || v > UINT32_MAX ? 0 : (uid_t)v;
}

static int activation_dial(const char *path, uid_t trust, int timeout_ms);
static int set_timeouts(int fd, int timeout_ms);

/*
 * No table: on a fresh boot, with systemd holding the scope's socket
 * (procregd@.socket), no daemon has run yet. A connection to that socket
 * starts one; then wait for its table, up to TIMEOUT_MS (0: 10 s). A
 * socket nobody holds refuses at once, and the open fails with ENOENT as
 * before. Only a socket whose listener's user we would trust a table of
 * (procreg__trusted_owner()) is waited on.
 */
#define ACTIVATION_WAIT_MS 10000

static int activate(procreg_t *reg, uid_t trust, int timeout_ms)
{
	const char *path = reg->paths.socket[0] ? reg->paths.socket : reg->default_socket;
	uint64_t deadline;
	int fd, err = -ENOENT;

	if (timeout_ms <= 0)
		timeout_ms = ACTIVATION_WAIT_MS;
	fd = activation_dial(path, trust, timeout_ms);
	if (fd < 0)
		return -ENOENT;
	deadline = procreg__mono_ns() + (uint64_t)timeout_ms * 1000000ull;
	/* The table appears whole (the daemon makes it aside and links it
	 * in); a header not yet as expected is retried all the same. */
	while (procreg__mono_ns() < deadline) {
		err = procreg__map_reader(&reg->map, &reg->paths, trust, NULL);
		if (err != -ENOENT && err != -EPROTO)
			break;
		poll(NULL, 0, 10);
	}
	close(fd);
	return err;
}

static int activation_dial(const char *path, uid_t trust, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	int fd;

	if (!path[0] || strlen(path) >= sizeof(sa.sun_path))
		return -ENOENT;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (set_timeouts(fd, timeout_ms) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 ||
	    !procreg__trusted_owner(cred.uid, trust)) {
		close(fd);
		return -ENOENT;
	}
	return fd;
}

/*
 * fork() from a process whose other threads use a handle. Only the thread
 * that forks goes on in the child, and a lock another thread held stays
 * held there for ever: the child's first request (io) or first read of a
 * new thread (the reader lock) would wait on it. The reader lock is only
 * ever held for a few steps that do not wait, so fork() takes it and both
 * processes give it back. io is held across a whole request, which may
 * wait for the daemon as long as the handle's timeout: fork() takes it
 * only if it is free. Taken, what it guards is whole in the child; else
 * the child starts io afresh and leaves alone what it guards that may be
 * half-changed. Either way the child closes its copy of the connection
 * (the parent's requests and replies are the parent's) and drops the
 * notices (names the parent lost), freed only when whole.
 */
static pthread_mutex_t fork_lock = PTHREAD_MUTEX_INITIALIZER;
static procreg_t *fork_handles;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
	pthread_mutex_lock(&fork_lock);
	for (procreg_t *r = fork_handles; r; r = r->fork_next) {
		procreg__rcu_fork_lock(&r->rcu);
		r->fork_io = pthread_mutex_trylock(&r->io) == 0;
	}
}

static void fork_parent(void)
{
	for (procreg_t *r = fork_handles; r; r = r->fork_next) {
		if (r->fork_io)
			pthread_mutex_unlock(&r->io);
		procreg__rcu_fork_unlock(&r->rcu);
	}
	pthread_mutex_unlock(&fork_lock);
}

static void fork_child(void)
{
	for (procreg_t *r = fork_handles; r; r = r->fork_next) {
		procreg__rcu_fork_unlock(&r->rcu);
		if (r->fork_io) {
			lost_free(r);
			pthread_mutex_unlock(&r->io);
		} else {
			pthread_mutex_init(&r->io, NULL);
			r->lost = NULL;
			r->lost_tail = &r->lost;
		}
		if (r->fd >= 0)
			close(r->fd);
		r->fd = -1;
		r->fd_follows = false;
	}
	pthread_mutex_init(&fork_lock, NULL);
}

static void fork_init(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void fork_track(procreg_t *reg)
{
	pthread_once(&fork_once, fork_init);
	pthread_mutex_lock(&fork_lock);
	reg->fork_next = fork_handles;
	reg->fork_prev = &fork_handles;
	if (fork_handles)
		fork_handles->fork_prev = &reg->fork_next;
	fork_handles = reg;
	pthread_mutex_unlock(&fork_lock);
}

static void fork_untrack(procreg_t *reg)
{
	pthread_mutex_lock(&fork_lock);
	*reg->fork_prev = reg->fork_next;
	if (reg->fork_next)
		reg->fork_next->fork_prev = reg->fork_prev;
	pthread_mutex_unlock(&fork_lock);
}

PROCREG_API procreg_t *procreg_open(const struct procreg_opts *opts)
{
	struct procreg_opts o;
	const char *why = NULL;
	procreg_t *reg;
	int err = PR_OPTS_TAKE(&o, opts, procreg_opts, trust_uid);

	if (err) {
		errno = -err;
		return NULL;
	}
	reg = calloc(1, sizeof(*reg));
	if (!reg) {
		errno = ENOMEM;
		return NULL;
	}
	reg->fd = -1;
	err = procreg__paths(&reg->paths, o.scope, o.dir, o.socket);
	/* Too long a path for a socket: no default to dial, nothing else. */
	if (!err && procreg__default_socket(reg->default_socket, sizeof(reg->default_socket),
					    reg->paths.scope, o.dir) < 0)
		reg->default_socket[0] = 0;
	if (!err)
		err = procreg__map_reader(&reg->map, &reg->paths, trust_of(o.trust_uid), &why);
	if (err == -ENOENT)
		err = activate(reg, trust_of(o.trust_uid), o.timeout_ms);
	if (!err)
		err = procreg__rcu_init(&reg->rcu, &reg->map);
	if (!err) {
		reg->out = malloc(PR_PACKET_MAX);
		reg->in = malloc(PR_PACKET_MAX);
		if (!reg->out || !reg->in)
			err = -ENOMEM;
	}
	if (err) {
		procreg__unmap(&reg->map);
		free(reg->out);
		free(reg->in);
		free(reg);
		errno = -err;
		return NULL;
	}
	pthread_mutex_init(&reg->io, NULL);
	reg->lost_tail = &reg->lost;
	reg->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : 0;
	fork_track(reg);
	return reg;
}

PROCREG_API void procreg_close(procreg_t *reg)
{
	if (!reg)
		return;
	fork_untrack(reg);
	procreg__rcu_fini(&reg->rcu);
	if (reg->fd >= 0 && reg->fd_pid == procreg__self_pid())
		close(reg->fd);
	procreg__unmap(&reg->map);
	pthread_mutex_destroy(&reg->io);
	lost_free(reg);
	free(reg->out);
	free(reg->in);
	free(reg);
}

PROCREG_API const char *procreg_table_path(const procreg_t *reg)
{
	return reg->paths.table;
}

PROCREG_API const char *procreg_socket_path(const procreg_t *reg)
{
	/* Before the first connection, what the next one would use. The
	 * daemon writes its path before its pid, and is read in that order. */
	if (!reg->socket[0] && !reg->paths.socket[0] && PR_LOAD_ACQ(&reg->map.hdr->daemon_pid))
		return reg->map.hdr->socket_path;
	return reg->socket[0] ? reg->socket : reg->paths.socket;
}

/* ---- packets ---------------------------------------------------------- */

static int send_packet(int fd, const void *buf, size_t len, int pass_fd, int flags)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov = { (void *)buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (pass_fd >= 0) {
		memset(&u, 0, sizeof(u));
		msg.msg_control = u.b;
		msg.msg_controllen = sizeof(u.b);
		u.h.cmsg_level = SOL_SOCKET;
		u.h.cmsg_type = SCM_RIGHTS;
		u.h.cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(&u.h), &pass_fd, sizeof(int));
	}
	/* send() where there is no file: the kernel need not copy in a
	 * message header. */
	do
		n = pass_fd >= 0 ? sendmsg(fd, &msg, MSG_NOSIGNAL | flags)
				 : send(fd, buf, len, MSG_NOSIGNAL | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !(flags & MSG_DONTWAIT))
		return -ETIMEDOUT; /* SO_SNDTIMEO ran out: the daemon reads nothing */
	if (n < 0)
		return errno == EPIPE ? -ECONNRESET : -errno;
	return 0;
}

static ssize_t recv_packet(int fd, void *buf)
{
	ssize_t n;

	do
		n = recv(fd, buf, PR_PACKET_MAX, 0);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return -ECONNRESET;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return -ETIMEDOUT; /* SO_RCVTIMEO ran out: no reply */
	return n < 0 ? -errno : n;
}

static void disconnect(procreg_t *reg)
{
	if (reg->fd >= 0 && reg->fd_pid == procreg__self_pid())
		close(reg->fd);
	reg->fd = -1;
	reg->fd_follows = false;
}

/* Under reg->io. */
/* Send one frame and read its reply's status, on a connection of our own
 * (BUF: a scratch packet buffer, not reg->out, which may hold the request
 * we connect for). */
static int exchange(int fd, const uint8_t *frame, size_t len, int pass_fd, uint8_t *buf,
		    uint16_t want_op, uint64_t *arm)
{
	struct pr_frame f;
	size_t pos = 0;
	ssize_t n;
	int err = send_packet(fd, frame, len, pass_fd, 0);

	if (err)
		return err;
	n = recv_packet(fd, buf);
	if (n < 0)
		return (int)n;
	if (procreg__proto_next(buf, (size_t)n, &pos, &f) != 1 || f.h.op != (want_op | PR_OP_REPLY))
		return -EPROTO;
	if (arm)
		*arm = f.arm;
	return f.h.status;
}

/* Bound every wait on FD (connect, send, receive) to TIMEOUT_MS (> 0):
 * a stopped or hung daemon then costs a caller that long, not forever. */
static int set_timeouts(int fd, int timeout_ms)
{
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = timeout_ms % 1000 * 1000 };

	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		return -errno;
	return 0;
}

/* A connected socket to the daemon (FLAGS: SOCK_NONBLOCK or 0), or a
 * negative errno; the path goes to PATH. Only a daemon of the table's
 * owner (or root's socket: a service manager's) is talked to: a socket
 * anyone else bound at that path (in a shared directory, say) is refused
 * with -EPERM. Blocking waits on it end after TIMEOUT_MS (0: never).
 *
 * ACTIVATE: dial the socket even when the table says no daemon runs, as
 * a client of systemd's procregd@.socket must: the connection is what
 * starts the daemon. The path is then the one the last daemon published
 * (or the one given), else the default; a socket nobody holds refuses at
 * once. Reads never activate (they must not wait, nor start anything). */
static int connect_to(procreg_t *reg, int flags, char path[PR_SOCKET_PATH_MAX], int timeout_ms,
		      bool activate)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	int fd, err;

	/* Acquire: the daemon writes its socket path before its pid. */
	if (!PR_LOAD_ACQ(&reg->map.hdr->daemon_pid) && !activate)
		return -ECONNREFUSED;
	if (reg->paths.socket[0]) {
		memcpy(path, reg->paths.socket, PR_SOCKET_PATH_MAX);
	} else {
		memcpy(path, reg->map.hdr->socket_path, PR_SOCKET_PATH_MAX);
		path[PR_SOCKET_PATH_MAX - 1] = 0;
	}
	if (!path[0] && activate)
		memcpy(path, reg->default_socket, PR_SOCKET_PATH_MAX);
	if (!path[0])
		return -ECONNREFUSED;
	memcpy(sa.sun_path, path, sizeof(sa.sun_path));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | flags, 0);
	if (fd < 0)
		return -errno;
	err = timeout_ms > 0 ? set_timeouts(fd, timeout_ms) : 0;
	if (err) {
		close(fd);
		return err;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		/* EAGAIN, blocking: the listen backlog stayed full for the
		 * whole of SO_SNDTIMEO. */
		err = errno == ENOENT ? -ECONNREFUSED
		      : (errno == EAGAIN && !(flags & SOCK_NONBLOCK)) ? -ETIMEDOUT : -errno;
		close(fd);
		return err;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 ||
	    (cred.uid != reg->map.owner && cred.uid != 0)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* READERS frames for this process's pages on FD, a connection with a quiet
 * HELLO: sent, never answered. */
static int send_pages(procreg_t *reg, int fd)
{
	int fds[PR_RPAGES_MAX], n = procreg__rcu_page_fds(&reg->rcu, fds, PR_RPAGES_MAX);
	uint8_t frame[PR_FRAME_HDR];

	for (int i = 0; i < n; i++) {
		size_t pos = 0;
		int err;

		procreg__proto_put(frame, &pos, PR_OP_READERS, 0, 0, 0, NULL, 0, NULL, 0);
		err = send_packet(fd, frame, pos, fds[i], MSG_DONTWAIT);
		if (err)
			return err;
	}
	return 0;
}

/* HELLO with FLAGS (PR_HELLO_*), and our own pidfd: it proves who we are
 * where the daemon's kernel cannot give it one (SO_PEERPIDFD arrived in
 * 6.5). WAIT: for the reply (its status, and its arm in *ARM); else the
 * daemon is asked to send nothing back on this connection
 * (PR_HELLO_QUIET), which is sent and left. */
static int say_hello(int fd, bool wait, uint8_t *buf, uint32_t flags, uint64_t *arm)
{
	int pidfd = procreg__pidfd_open(procreg__self_pid()), err;
	uint8_t hello[64];
	size_t pos = 0;

	procreg__proto_put_hello_flags(hello, &pos, PR_OP_HELLO, 0, 0,
				       wait ? flags : flags | PR_HELLO_QUIET);
	err = wait ? exchange(fd, hello, pos, pidfd, buf, PR_OP_HELLO, arm)
		   : send_packet(fd, hello, pos, pidfd, MSG_DONTWAIT);
	if (pidfd >= 0)
		close(pidfd);
	return err;
}

/* Our reader pages to the daemon on a connection of their own, without
 * waiting for it: a quiet HELLO, one READERS packet a page, and close (the
 * daemon handles what was sent before the close). 0, or a negative errno
 * when they could not be sent. */
static int hand_over_pages(procreg_t *reg)
{
	char path[PR_SOCKET_PATH_MAX];
	uint8_t buf[64];
	int fd, err, any;

	/* A process that never read has no page: no connection for it. */
	if (!procreg__rcu_page_fds(&reg->rcu, &any, 1))
		return 0;
	fd = connect_to(reg, SOCK_NONBLOCK, path, 0, false);
	if (fd < 0)
		return fd;
	err = say_hello(fd, false, buf, 0, NULL);
	if (!err)
		err = send_pages(reg, fd);
	close(fd);
	return err;
}

/* A new connection to the daemon, past HELLO (with FLAGS, PR_HELLO_*):
 * the fd, or a negative errno. Our reader pages go too, on a connection of
 * their own (replies on this one are the caller's): an announcement may
 * have failed (the daemon's backlog full, say); the daemon keeps one copy
 * of each page. With PR_HELLO_NOFILES, *FILES says whether files may be
 * passed on it all the same (the kernel cannot refuse them). Under reg->io
 * (it uses reg->in). */
static int dial(procreg_t *reg, uint32_t flags, bool *files)
{
	int fd = connect_to(reg, 0, reg->socket, reg->timeout_ms, true), err;
	uint64_t arm = 0;

	if (fd < 0)
		return fd;
	err = say_hello(fd, true, reg->in, flags, &arm);
	if (!err && arm) {
		/* We have the reply: from the packet after this one, the
		 * daemon takes ours in one call (proto.h, server.c). */
		uint8_t frame[PR_FRAME_HDR + sizeof(arm)];
		size_t pos = 0;

		procreg__proto_put(frame, &pos, PR_OP_ARM, 0, 0, 0, &arm, sizeof(arm), NULL, 0);
		err = send_packet(fd, frame, pos, -1, 0);
	}
	if (err) {
		close(fd);
		return err;
	}
	if (files)
		*files = !arm;
	hand_over_pages(reg);
	return fd;
}

/*
 * Hand this process's reader pages to the daemon that now serves the
 * table, once per daemon start (and again after a new page): called from
 * the read paths, so it never waits (hand_over_pages). If that fails (the
 * daemon's backlog full, no fd left), reads stay correct, unprotected; it
 * is tried again a second later, and the next call that talks to the
 * daemon hands the pages over too (dial).
 */
#define ANNOUNCE_RETRY_NS 1000000000ull

void procreg__announce(procreg_t *reg)
{
	uint64_t gen = PR_LOAD_ACQ(&reg->map.hdr->daemon_gen);
	uint64_t was = PR_LOAD_RELAXED(&reg->rcu.announced);
	int err;

	/* One thread does it for the handle, and not again before its
	 * time after a failure. */
	if (was == gen || procreg__mono_ns() < PR_LOAD_RELAXED(&reg->rcu.announce_after) ||
	    uatomic_cmpxchg(&reg->rcu.announced, was, gen) != was)
		return;
	err = hand_over_pages(reg);
	if (err && err != -ECONNREFUSED) {
		/* No daemon (ECONNREFUSED): the next to start bumps
		 * daemon_gen. Anything else: again a second later. */
		uatomic_set(&reg->rcu.announce_after, procreg__mono_ns() + ANNOUNCE_RETRY_NS);
		uatomic_cmpxchg(&reg->rcu.announced, gen, 0);
	}
}

/* Under reg->io. */
static int connect_daemon(procreg_t *reg)
{
	uint64_t gen = PR_LOAD_ACQ(&reg->map.hdr->daemon_gen);
	int fd;

	if (reg->fd >= 0 && reg->fd_pid == procreg__self_pid()) {
		/* Made to a daemon another has replaced since: its
		 * connection may not have ended yet (procregd's closing
		 * processes share its sockets, and outlive a crash a
		 * moment), and a request sent on it would wait for no one. */
		if (!reg->fd_gen || gen == reg->fd_gen)
			return 0;
		disconnect(reg);
	}
	/* A connection inherited through a fork our atfork handler did not
	 * see (clone(2) called directly; fork_child() drops it otherwise)
	 * identifies the parent: leave it to the parent and make our own.
	 * So are the notices it read: names the parent lost, not us. */
	if (reg->fd >= 0)
		lost_free(reg);
	reg->fd = -1;
	fd = dial(reg, PR_HELLO_NOTICES | PR_HELLO_NOFILES, &reg->fd_files);
	if (fd < 0)
		return fd;
	reg->fd = fd;
	reg->fd_follows = false;
	reg->fd_pid = procreg__self_pid();
	reg->fd_gen = gen;
	return 0;
}

PROCREG_API int procreg_feed_fd(procreg_t *reg)
{
	uint8_t frame[64];
	size_t pos = 0;
	int fd, err;

	pthread_mutex_lock(&reg->io);
	/* No notices here: procreg_feed_fd_clear() reads nothing it gets. */
	fd = dial(reg, 0, NULL);
	if (fd >= 0) {
		procreg__proto_put(frame, &pos, PR_OP_SUBSCRIBE, 0, 1, 0, NULL, 0, NULL, 0);
		err = exchange(fd, frame, pos, -1, reg->in, PR_OP_SUBSCRIBE, NULL);
		if (!err && fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
			err = -errno;
		if (err) {
			close(fd);
			fd = err;
		}
	}
	pthread_mutex_unlock(&reg->io);
	return fd;
}

PROCREG_API int procreg_feed_fd_clear(int fd)
{
	uint8_t b[64];
	ssize_t n;

	/* Notifications carry nothing: the events are in the table. */
	while ((n = recv(fd, b, sizeof(b), MSG_DONTWAIT)) > 0)
		;
	if (n == 0)
		return -ECONNRESET;
	return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
}

static ssize_t recv_reply(procreg_t *reg);

/* Files on reg->fd again (FILES), before a packet that passes one: since
 * its PR_HELLO_NOFILES HELLO the kernel refuses them. Under reg->io, no
 * reply outstanding; reg->out untouched. */
static int allow_files(procreg_t *reg)
{
	uint8_t frame[PR_FRAME_HDR];
	struct pr_frame f;
	size_t pos = 0;
	ssize_t n;
	int err;

	if (reg->fd_files)
		return 0;
	procreg__proto_put(frame, &pos, PR_OP_FILES, 0, 0, 0, NULL, 0, NULL, 0);
	err = send_packet(reg->fd, frame, pos, -1, 0);
	if (err)
		return err;
	n = recv_reply(reg);
	if (n < 0)
		return (int)n;
	pos = 0;
	if (procreg__proto_next(reg->in, (size_t)n, &pos, &f) != 1 ||
	    f.h.op != (PR_OP_FILES | PR_OP_REPLY))
		return -EPROTO;
	if (f.h.status)
		return f.h.status;
	reg->fd_files = true;
	return 0;
}

/* Send a packet from reg->out (passing PASS_FD, if not -1), connecting
 * first if needed. A connection the daemon closed since our last call (it
 * restarted) is replaced once: safe, because a send that fails delivered
 * nothing. Under reg->io. */
static int send_fresh(procreg_t *reg, size_t len, int pass_fd)
{
	int err = 0;

	for (int tries = 0; tries < 2; tries++) {
		err = connect_daemon(reg);
		if (!err && pass_fd >= 0)
			err = allow_files(reg);
		if (!err)
			err = send_packet(reg->fd, reg->out, len, pass_fd, 0);
		if (err != -ECONNRESET && err != -ENOTCONN)
			break;
		disconnect(reg);
	}
	return err;
}

/* The packet BUF[0..len): if it holds notices, keep them for
 * procreg_lost() and return 1; 0 if it is something else (a reply);
 * -EPROTO for a notice that does not decode. Under reg->io. */
static int take_notices(procreg_t *reg, const uint8_t *buf, size_t len)
{
	struct pr_frame f;
	size_t pos = 0;
	uint16_t op;
	int r, n = 0;

	/* A reply, nearly always, and then its first frame's op says so:
	 * the caller decodes it, once (a whole decode here cost a round trip
	 * 44 instructions of the client's 569). */
	if (len < PR_FRAME_HDR)
		return 0;
	memcpy(&op, buf + offsetof(struct pr_frame_hdr, op), sizeof(op));
	if (op != (PR_OP_LOST | PR_OP_REPLY))
		return 0;
	while ((r = procreg__proto_next(buf, len, &pos, &f)) == 1 &&
	       f.h.op == (PR_OP_LOST | PR_OP_REPLY)) {
		struct pr_lost_note *note = calloc(1, sizeof(*note));

		if (!note)
			return -ENOMEM;
		note->reason = (int)f.arg;
		note->winner = (pid_t)f.pid;
		note->time_ns = f.time_ns;
		memcpy(note->name, f.name, f.name_len < PROCREG_NAME_MAX ? f.name_len : PROCREG_NAME_MAX);
		memcpy(note->node, f.meta, f.meta_len < sizeof(note->node) - 1 ? f.meta_len
									 : sizeof(note->node) - 1);
		*reg->lost_tail = note;
		reg->lost_tail = &note->next;
		n++;
	}
	if (r < 0 && (n || (pos >= PR_FRAME_HDR && f.h.op == (PR_OP_LOST | PR_OP_REPLY))))
		return -EPROTO;
	return n > 0;
}

/* The next packet that is not notices (those are kept): its length, or a
 * negative errno. Under reg->io. */
static ssize_t recv_reply(procreg_t *reg)
{
	for (;;) {
		ssize_t n = recv_packet(reg->fd, reg->in);
		int r;

		if (n < 0)
			return n;
		r = take_notices(reg, reg->in, (size_t)n);
		if (r < 0)
			return r;
		if (!r)
			return n;
	}
}

/* One request frame (already in reg->out), one reply. Under reg->io. */
static int roundtrip(procreg_t *reg, size_t len, uint32_t id, int pass_fd)
{
	struct pr_frame f;
	size_t pos = 0;
	ssize_t n;
	int err = send_fresh(reg, len, pass_fd);

	if (err)
		goto broken;
	n = recv_reply(reg);
	if (n < 0) {
		err = (int)n;
		goto broken;
	}
	if (procreg__proto_next(reg->in, (size_t)n, &pos, &f) != 1 || f.h.id != id ||
	    !(f.h.op & PR_OP_REPLY)) {
		err = -EPROTO;
		goto broken;
	}
	return f.h.status;
broken:
	disconnect(reg);
	return err;
}

PR_PROBE_DEFINE(procreg, request);
PR_PROBE_DEFINE(procreg, request_done);
PR_PROBE_DEFINE(procreg, batch);

/* roundtrip(), between procreg:request and procreg:request_done (NAME may
 * be NULL). Under reg->io. */
static int traced_roundtrip(procreg_t *reg, uint16_t op, const char *name, size_t name_len,
			    size_t len, uint32_t id, int pass_fd)
{
	uint64_t t0 = PR_TRACE_CLOCK(procreg, request_done);
	int err;

	PR_TRACE(procreg, request, op, name, name_len, id, reg->map.dev, reg->map.ino);
	err = roundtrip(reg, len, id, pass_fd);
	PR_TRACE(procreg, request_done, op, name, name_len, err, t0 ? procreg__mono_ns() - t0 : 0,
		 reg->map.dev, reg->map.ino);
	return err;
}

static int check_meta(size_t meta_len)
{
	return meta_len > PROCREG_META_MAX ? -EMSGSIZE : 0;
}

static int name_request_arg(procreg_t *reg, uint16_t op, uint16_t flags, int pidfd,
			    const char *name, const void *meta, size_t meta_len, uint32_t arg)
{
	size_t len, pos = 0;
	uint32_t id;
	int err = procreg__check_name(name, &len);

	if (!err)
		err = check_meta(meta_len);
	if (err)
		return err;
	if (meta_len && !meta)
		return -EINVAL;
	pthread_mutex_lock(&reg->io);
	id = ++reg->next_id;
	procreg__proto_put_name_arg(reg->out, &pos, op, flags, id, name, len, meta, meta_len, arg);
	err = traced_roundtrip(reg, op, name, len, pos, id, pidfd);
	pthread_mutex_unlock(&reg->io);
	return err;
}

static int name_request(procreg_t *reg, uint16_t op, const char *name, const void *meta,
			size_t meta_len)
{
	return name_request_arg(reg, op, 0, -1, name, meta, meta_len, 0);
}

/* What a REGISTER or JOIN asks for beyond its name and metadata: the
 * options of procreg_register_opts(), procreg_join_opts() and a batch's
 * ops, in one form. */
struct req_opts {
	unsigned int flags;
	uint32_t lease_ms;
	int lost_signal;
	int pidfd;
};

/* Check O for request OP and give its wire flags (the public flags are
 * the wire's, the signal in PR_F_SIGNAL). A membership has no owner to
 * queue behind or replace, but may have a lease; UNREGISTER and LEAVE take no
 * options at all. */
static int wire_opts(uint16_t op, const struct req_opts *o, uint16_t *wire)
{
	const unsigned int known = op == PR_OP_REGISTER ? PROCREG_PIDFD | PROCREG_QUEUE |
								  PROCREG_REPLACE | PROCREG_REPLACEABLE |
								  PROCREG_LEASE_MARK
				   : op == PR_OP_JOIN	  ? PROCREG_PIDFD
							  : 0;
	int sig = o->lost_signal;

	if ((o->flags & ~known) || (op != PR_OP_REGISTER && sig) ||
	    (op != PR_OP_REGISTER && op != PR_OP_JOIN && o->lease_ms))
		return -EINVAL;
	if ((o->flags & PROCREG_LEASE_MARK) && !o->lease_ms)
		return -EINVAL;
	if (sig < 0 || sig >= NSIG || sig > (PR_F_SIGNAL_MASK >> PR_F_SIGNAL_SHIFT))
		return -EINVAL;
	if ((o->flags & PROCREG_PIDFD) && o->pidfd < 0)
		return -EBADF;
	*wire = (uint16_t)(o->flags | (unsigned int)sig << PR_F_SIGNAL_SHIFT);
	return 0;
}

static int opts_request(procreg_t *reg, uint16_t op, const char *name, const void *meta,
			size_t meta_len, const struct req_opts *o)
{
	uint16_t wire;
	int err = wire_opts(op, o, &wire);

	if (err)
		return err;
	return name_request_arg(reg, op, wire, wire & PR_F_PIDFD ? o->pidfd : -1, name, meta,
				meta_len, o->lease_ms);
}

PROCREG_API int procreg_register_opts(procreg_t *reg, const char *name, const void *meta,
				      size_t meta_len, const struct procreg_register_opts *opts)
{
	struct procreg_register_opts o;
	int err = PR_OPTS_TAKE(&o, opts, procreg_register_opts, pidfd);

	if (err)
		return err;
	return opts_request(reg, PR_OP_REGISTER, name, meta, meta_len,
			    &(struct req_opts){ o.flags, o.lease_ms, o.lost_signal, o.pidfd });
}

PROCREG_API int procreg_join_opts(procreg_t *reg, const char *group, const void *meta,
				  size_t meta_len, const struct procreg_join_opts *opts)
{
	struct procreg_join_opts o;
	int err = PR_OPTS_TAKE(&o, opts, procreg_join_opts, pidfd);

	if (err)
		return err;
	return opts_request(reg, PR_OP_JOIN, group, meta, meta_len,
			    &(struct req_opts){ .flags = o.flags, .lease_ms = o.lease_ms,
						.pidfd = o.pidfd });
}

PROCREG_API int procreg_refresh(procreg_t *reg, const char *name)
{
	return name_request(reg, PR_OP_REFRESH, name, NULL, 0);
}

PROCREG_API int procreg_register(procreg_t *reg, const char *name, const void *meta,
				 size_t meta_len)
{
	return name_request(reg, PR_OP_REGISTER, name, meta, meta_len);
}

PROCREG_API int procreg_register_pidfd(procreg_t *reg, int pidfd, const char *name,
				       const void *meta, size_t meta_len)
{
	return opts_request(reg, PR_OP_REGISTER, name, meta, meta_len,
			    &(struct req_opts){ .flags = PROCREG_PIDFD, .pidfd = pidfd });
}

PROCREG_API int procreg_unregister(procreg_t *reg, const char *name)
{
	return name_request(reg, PR_OP_UNREGISTER, name, NULL, 0);
}

PROCREG_API int procreg_join(procreg_t *reg, const char *group, const void *meta,
			     size_t meta_len)
{
	return name_request(reg, PR_OP_JOIN, group, meta, meta_len);
}

PROCREG_API int procreg_join_pidfd(procreg_t *reg, int pidfd, const char *group,
				   const void *meta, size_t meta_len)
{
	return opts_request(reg, PR_OP_JOIN, group, meta, meta_len,
			    &(struct req_opts){ .flags = PROCREG_PIDFD, .pidfd = pidfd });
}

PROCREG_API int procreg_leave(procreg_t *reg, const char *group)
{
	return name_request(reg, PR_OP_LEAVE, group, NULL, 0);
}

PROCREG_API int procreg_ping(procreg_t *reg, int timeout_ms)
{
	char path[PR_SOCKET_PATH_MAX];
	uint8_t *buf;
	int fd, err;

	if (timeout_ms == 0 || timeout_ms < -1)
		return -EINVAL;
	/* A connection of its own, not the handle's: no wait behind a
	 * request of another thread's, and nothing it reads is a reply or a
	 * notice the handle's calls expect. The HELLO is the round trip: the
	 * daemon answers it from its event loop, like any request. */
	buf = malloc(PR_PACKET_MAX);
	if (!buf)
		return -ENOMEM;
	fd = connect_to(reg, 0, path, timeout_ms > 0 ? timeout_ms : 0, true);
	err = fd < 0 ? fd : say_hello(fd, true, buf, 0, NULL);
	if (fd >= 0)
		close(fd);
	free(buf);
	return err;
}

PROCREG_API int procreg_sync(procreg_t *reg)
{
	size_t pos = 0;
	uint32_t id;
	int err;

	pthread_mutex_lock(&reg->io);
	id = ++reg->next_id;
	procreg__proto_put(reg->out, &pos, PR_OP_SYNC, 0, id, 0, NULL, 0, NULL, 0);
	err = traced_roundtrip(reg, PR_OP_SYNC, NULL, 0, pos, id, -1);
	pthread_mutex_unlock(&reg->io);
	return err;
}

/*
 * FOLLOW, once per connection: from its reply on, the daemon wakes the
 * feed's sleepers after each batch of events for as long as the
 * connection lasts (feed.c says why it asks). A connection that ended
 * (the daemon closed it, or a new daemon serves the table: connect_daemon
 * makes another) has not told the daemon that serves now, so it is
 * looked at first: one poll(), before a sleep only.
 */
int procreg__follow(procreg_t *reg)
{
	struct pollfd p;
	size_t pos = 0;
	uint32_t id;
	int err = 0;

	pthread_mutex_lock(&reg->io);
	if (reg->fd_follows) {
		uint64_t gen = PR_LOAD_ACQ(&reg->map.hdr->daemon_gen);

		p = (struct pollfd){ .fd = reg->fd, .events = POLLRDHUP };
		if (reg->fd_pid != procreg__self_pid() || (reg->fd_gen && gen != reg->fd_gen) ||
		    (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))))
			disconnect(reg);
	}
	if (!reg->fd_follows) {
		id = ++reg->next_id;
		procreg__proto_put(reg->out, &pos, PR_OP_FOLLOW, 0, id, 0, NULL, 0, NULL, 0);
		err = roundtrip(reg, pos, id, -1);
		reg->fd_follows = err == 0;
	}
	pthread_mutex_unlock(&reg->io);
	return err;
}

/*
 * Batches. Ops are packed into packets of up to PR_PACKET_MAX bytes, and up
 * to BATCH_WINDOW packets are in flight: enough to keep the daemon busy,
 * few enough that their replies (smaller than the requests) always fit in
 * the socket buffer, so neither side can block the other.
 */
#define BATCH_WINDOW 4

static const uint16_t batch_ops[] = {
	[PROCREG_OP_REGISTER] = PR_OP_REGISTER,
	[PROCREG_OP_UNREGISTER] = PR_OP_UNREGISTER,
	[PROCREG_OP_JOIN] = PR_OP_JOIN,
	[PROCREG_OP_LEAVE] = PR_OP_LEAVE,
};

static int carries_meta(int kind)
{
	return kind == PROCREG_OP_REGISTER || kind == PROCREG_OP_JOIN;
}

/* Op I of an array whose ops are STRIDE bytes apart (the caller's .sz). */
static struct procreg_op *op_at(struct procreg_op *ops, size_t stride, size_t i)
{
	return (struct procreg_op *)((unsigned char *)ops + i * stride);
}

/* Every op's .sz checked, and the same as the first's (the stride): else
 * nothing can be read, or written, where the caller expects. */
static int batch_sized(struct procreg_op *ops, size_t n)
{
	size_t stride = ops->sz;

	for (size_t i = 0; i < n; i++) {
		int err = PR_SIZED(op_at(ops, stride, i), procreg_op, result);

		if (err)
			return err;
		if (op_at(ops, stride, i)->sz != stride)
			return -EINVAL;
	}
	return 0;
}

/* Validate an op (the library's copy) before it is sent; 0 and its wire
 * flags if it should go out. */
static int batch_check(const struct procreg_op *op, size_t *len, uint16_t *wire)
{
	int err;

	if (op->kind < PROCREG_OP_REGISTER || op->kind > PROCREG_OP_LEAVE)
		return -EINVAL;
	err = procreg__check_name(op->name, len);
	if (!err && carries_meta(op->kind))
		err = check_meta(op->meta_len);
	if (!err && carries_meta(op->kind) && op->meta_len && !op->meta)
		err = -EINVAL;
	if (!err)
		err = wire_opts(batch_ops[op->kind], &(struct req_opts){ op->flags, op->lease_ms,
									   op->lost_signal, op->pidfd },
				wire);
	return err;
}

/* Fill reg->out from ops[*next..n) (STRIDE bytes apart); the ids are the
 * op indexes. An op with a pidfd ends its packet, which it has alone (the
 * daemon takes one fd a packet): the fd to pass goes to *PASS_FD. */
static size_t batch_pack(procreg_t *reg, struct procreg_op *ops, size_t stride, size_t n,
			 size_t *next, int *pass_fd)
{
	size_t pos = 0, len;

	*pass_fd = -1;
	for (; *next < n; (*next)++) {
		struct procreg_op *op = op_at(ops, stride, *next), o;
		int meta;
		uint16_t wire;

		/* The library's copy of the op, checked and sent; one of the
		 * size this build knows (nearly always) in a fixed-size copy. */
		if (stride == sizeof(o))
			memcpy(&o, op, sizeof(o));
		else
			procreg__sized_in(&o, sizeof(o), op);
		meta = carries_meta(o.kind);
		op->result = batch_check(&o, &len, &wire);
		if (op->result)
			continue;
		if ((wire & PR_F_PIDFD) && pos)
			break; /* it starts the next packet */
		op->result = -ECANCELED; /* until answered */
		if (procreg__proto_put_name_arg(reg->out, &pos, batch_ops[o.kind], wire,
						(uint32_t)*next, o.name, len, meta ? o.meta : NULL,
						meta ? o.meta_len : 0, o.lease_ms) < 0)
			break; /* full: this op starts the next packet */
		if (wire & PR_F_PIDFD) {
			*pass_fd = o.pidfd;
			(*next)++;
			break;
		}
	}
	return pos;
}

static int batch_collect(procreg_t *reg, struct procreg_op *ops, size_t stride, size_t n)
{
	struct pr_frame f;
	size_t pos = 0;
	ssize_t len = recv_reply(reg);
	int r;

	if (len < 0)
		return (int)len;
	while ((r = procreg__proto_next(reg->in, (size_t)len, &pos, &f)) == 1) {
		if (!(f.h.op & PR_OP_REPLY) || f.h.id >= n)
			return -EPROTO;
		op_at(ops, stride, f.h.id)->result = f.h.status;
	}
	return r < 0 ? -EPROTO : 0;
}

PROCREG_API int procreg_batch(procreg_t *reg, struct procreg_op *ops, size_t n)
{
	size_t next = 0, inflight = 0, len, stride = n ? ops->sz : 0;
	uint64_t t0 = PR_TRACE_CLOCK(procreg, batch);
	int err, pass_fd;

	if (n > UINT32_MAX)
		return -E2BIG;
	err = n ? batch_sized(ops, n) : 0;
	if (err)
		return err;
	pthread_mutex_lock(&reg->io);
	err = connect_daemon(reg);
	while (!err && (next < n || inflight)) {
		if (next < n && inflight < BATCH_WINDOW) {
			size_t first = next;

			len = batch_pack(reg, ops, stride, n, &next, &pass_fd);
			if (len && first > 0 && pass_fd >= 0 && !reg->fd_files) {
				/* FILES first, which is answered in turn. */
				while (!err && inflight) {
					err = batch_collect(reg, ops, stride, n);
					inflight--;
				}
				if (!err)
					err = allow_files(reg);
			}
			if (len && !err) {
				err = first == 0 ? send_fresh(reg, len, pass_fd)
						 : send_packet(reg->fd, reg->out, len, pass_fd, 0);
				inflight++;
			}
			continue;
		}
		err = batch_collect(reg, ops, stride, n);
		inflight--;
	}
	if (err) {
		disconnect(reg);
		for (; next < n; next++)
			op_at(ops, stride, next)->result = -ECANCELED;
	}
	pthread_mutex_unlock(&reg->io);
	PR_TRACE(procreg, batch, n, err, t0 ? procreg__mono_ns() - t0 : 0, reg->map.dev,
		 reg->map.ino);
	return err;
}

/* ---- names lost -------------------------------------------------------- */

/* What the connection has now, without waiting: notices kept, anything
 * else a protocol error (no request is under way: io is held). 0, or a
 * negative errno (the connection is then dropped). Under reg->io. */
static int drain_notices(procreg_t *reg)
{
	for (;;) {
		ssize_t n = recv(reg->fd, reg->in, PR_PACKET_MAX, MSG_DONTWAIT);
		int r;

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		r = n < 0 ? -errno : n == 0 ? -ECONNRESET : take_notices(reg, reg->in, (size_t)n);
		if (r <= 0) {
			disconnect(reg);
			return r < 0 ? r : -EPROTO;
		}
	}
}

static void lost_fill(struct procreg_lost *out, const struct pr_lost_note *n)
{
	struct procreg_lost l = { .sz = sizeof(l), .reason = n->reason, .winner_pid = n->winner,
				  .time_ns = n->time_ns };

	memcpy(l.name, n->name, sizeof(l.name));
	memcpy(l.node, n->node, sizeof(l.node));
	procreg__sized_out(out, &l, sizeof(l));
}

static uint64_t ms_now(void)
{
	return procreg__mono_ns() / 1000000ull;
}

PROCREG_API int procreg_lost(procreg_t *reg, struct procreg_lost *out, int timeout_ms)
{
	uint64_t deadline = timeout_ms > 0 ? ms_now() + (uint64_t)timeout_ms : 0;
	int bad = out ? PR_SIZED(out, procreg_lost, node) : -EINVAL;

	if (bad)
		return bad;
	for (;;) {
		struct pr_lost_note *n;
		struct pollfd p;
		int err, wait_ms, r;

		pthread_mutex_lock(&reg->io);
		err = connect_daemon(reg);
		if (!err && !reg->lost)
			err = drain_notices(reg);
		n = reg->lost;
		if (n) {
			reg->lost = n->next;
			if (!reg->lost)
				reg->lost_tail = &reg->lost;
		}
		p = (struct pollfd){ .fd = reg->fd, .events = POLLIN };
		pthread_mutex_unlock(&reg->io);
		if (n) {
			lost_fill(out, n);
			free(n);
			return 0;
		}
		if (err)
			return err;
		if (timeout_ms == 0)
			return -ETIMEDOUT;
		wait_ms = -1;
		if (timeout_ms > 0) {
			uint64_t now = ms_now();

			if (now >= deadline)
				return -ETIMEDOUT;
			wait_ms = (int)(deadline - now);
		}
		/* Outside io: a request on another thread may read the notice
		 * first (and keep it), or drop the connection; either way the
		 * next turn sees it. */
		r = poll(&p, 1, wait_ms);
		if (r < 0 && errno == EINTR)
			return -EINTR;
		if (r == 0)
			return -ETIMEDOUT;
	}
}

PROCREG_API int procreg_lost_fd(procreg_t *reg)
{
	int err, fd;

	pthread_mutex_lock(&reg->io);
	err = connect_daemon(reg);
	fd = reg->fd;
	pthread_mutex_unlock(&reg->io);
	return err ? err : fd;
}

PROCREG_API const char *procreg_strerror(int err)
{
	switch (-err) {
	case 0:
		return "success";
	case EEXIST:
		return "name is held by another process";
	case ENOENT:
		return "no such name";
	case ENAMETOOLONG:
		return "name longer than 255 bytes (PROCREG_NAME_MAX)";
	case EINVAL:
		return "invalid argument (an empty name, or a bad scope)";
	case EMSGSIZE:
		return "metadata longer than 1024 bytes (PROCREG_META_MAX)";
	case EPERM:
		return "permission denied: the name or the process belongs to another user";
	case ENOSPC:
		return "the table is full (procregd --max-size)";
	case EDQUOT:
		return "the process holds too many names (procregd --max-names-per-proc)";
	case ECONNREFUSED:
		return "procregd is not running for this scope";
	case ECONNRESET:
		return "connection to procregd lost";
	case EPROTO:
		return "not a procreg table or peer of this version";
	case EPROTONOSUPPORT:
		return "procregd speaks another protocol version";
	case ESTALE:
		return "the table changed under every try of this read (a damaged table?)";
	case EUSERS:
		return "too many reader processes or pages (procregd --max-readers-per-uid, --max-readers, "
		       "--max-reader-pages-per-uid, --max-reader-pages)";
	case ESRCH:
		return "no such process (it has exited)";
	case EBADMSG:
		return "malformed request";
	case EBADF:
		return "not a valid pidfd";
	case ECANCELED:
		return "not processed: the batch was cut short";
	case EINPROGRESS:
		return "the name is taken: waiting in line for it";
	case EOPNOTSUPP:
		return "a struct member this library does not know is set (a newer header's?)";
	default:
		return strerror(-err);
	}
}
