/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * closer.c - the last close of files other processes hand procregd, done
 * off the daemon's thread, and off its process.
 *
 * Closing a file's descriptor runs its flush, and its last one its
 * release, and some of these wait: a TCP socket with SO_LINGER set and
 * data its peer does not take waits out its linger time (for ever, if it
 * asks), a file on a FUSE mount waits for its server to answer FLUSH, on
 * every close (a signal only sends the server an INTERRUPT; then the
 * wait goes on uninterruptibly, and not even SIGKILL ends it). Any local
 * user can pass procregd such a file with a packet (SCM_RIGHTS), and a
 * file procregd refuses is one it must close. Closed on the daemon's
 * thread, it would stop every client, death and timer for as long as its
 * sender liked. So:
 *
 *  - a passed file procregd does not keep goes to closer_put(), which
 *    closes at once only what cannot wait (a small memfd, a pidfd: all that a
 *    well-behaved client passes) and queues the rest, charged to the uid
 *    it came from, for a closing process; a socket is reset (SO_LINGER 0)
 *    before its close;
 *  - a client's connection is shut down, then queued the same way
 *    (closer_sock_close()): the closing process takes the files off the
 *    packets still queued on it and closes them as above before closing
 *    the socket. Once shut down, nothing more can be queued on it (the
 *    peer's send checks for that and queues under one lock), but how
 *    much is queued cannot be told without reading it all: an empty
 *    packet reads as the end, as does a pending error, with packets still
 *    behind them. So it reads past both, until more reads of nothing than
 *    the socket can hold packets (net.unix.max_dgram_qlen). The socket's
 *    own close cannot wait (a unix socket has no flush, and nothing is
 *    left queued on it): a connection waits only for the files on it,
 *    and behind its uid's closes queued before it.
 *
 * Processes, not threads. A close that waits uninterruptibly cannot be
 * cut short, and a process does not end while one of its threads waits:
 * with a thread of the daemon's held in a FLUSH, SIGTERM's exit left the
 * main thread a zombie its parent could not reap, and the held thread
 * kept the process's files (the scope's lock among them) open, for as
 * long as the FUSE server liked. The closes run in processes of their
 * own that share the daemon's table of descriptors (CLONE_FILES, so a
 * queued descriptor needs no passing: its number is told) and nothing
 * else. They are made by a spawner, which holds no mapping of the table:
 * the first is cloned before the table is opened or mapped, and one made
 * later lets go of its copy of the mapping first thing (spawner_start());
 * they do share its descriptor, as every other: main.c's
 * lock_by_mapping() is what keeps the scope's lock from outliving the
 * daemon. Each dies with its parent (PR_SET_PDEATHSIG), the spawner once
 * the daemon has (spawner_main). The spawner and the processes run only
 * while closes need them, or a connection may pass files: while none
 * does, the daemon's table of descriptors is its own, which makes each of
 * its system calls on a descriptor cheaper (spawner_start() says how
 * much). Where the kernel cannot refuse files, the first stays
 * (spawner_kept()). A connection whose
 * files the kernel refuses (server.c, refuse_files()) can have none
 * queued, and is closed by the daemon itself. The daemon at SIGTERM closes its own files (the table,
 * so the lock is free for the next daemon) and exits; a closing process
 * held in a FLUSH stays, holding the files still queued, until the FUSE
 * server answers or goes. The daemon's exit closes none of the files it
 * shares with them: the spawner outlives it a moment (it ends once every
 * thread of the daemon has, each having let go of the table of
 * descriptors), so the last of the closing processes to exit closes what
 * is left, exiting too (the kernel does not linger over a socket then).
 * A crash (SIGKILL) leaves the held process the daemon's descriptors
 * too, unclosed: the scope's lock is not among them (main.c holds it by
 * the table's mapping alone, which ends with the daemon), and the
 * spawner shuts down the daemon's listening sockets (closer_listeners())
 * and its clients' connections once the daemon is gone, so that a new
 * daemon's check of its socket path and its bind of the bridge's port do
 * not meet them, and clients reconnect. Until the spawner has run, a
 * moment, they are open still: a new daemon waits for its socket path
 * (server.c), a client for the table to name the new daemon (client.c).
 * A process that cannot be made (a limit on processes) is logged, and
 * tried again each tick; until then the uids waiting for one wait.
 *
 * Per uid (a subordinate uid's with its range's owner, subuid.c). Each
 * uid's closes queue on their own, and a uid's queue is
 * worked by one closing process at a time (HAND_MAX closes handed at
 * once, in order). A process free takes the next uid that waits, round
 * robin; when none is free, one more is made, up to CLOSER_PROCS_MAX,
 * the last of them only for root and the daemon's own uid. So a uid
 * whose close is held holds one process and its own queue, nothing of
 * anyone else's. A uid with CLOSER_PER_UID closes waiting is not read
 * from until they are done (server.c parks its connections; a privileged
 * uid is charged but never parked); its connections that end meanwhile
 * keep their descriptors until then. Processes end after CLOSER_IDLE_NS
 * idle, and the spawner once none is left and none is wanted; one is
 * made at start, to tell a system that cannot make one at once, and ends
 * as soon as it is up.
 *
 * Talk. The daemon writes a process the closes it hands on that
 * process's pipe (struct cmd: the descriptor's number); the processes
 * write the daemon one report per close done, and the spawner one per
 * process made, on one pipe (struct report), each a write smaller than
 * PIPE_BUF, so never torn. Only the daemon's thread touches the queues.
 * A descriptor's number is the daemon's until handed, the closing
 * process's until reported: the daemon never closes or reuses a number a
 * process may still close, and a process closes nothing but what it is
 * handed (its end of its pipe, in the shared table, the daemon closes
 * once the process is gone).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"

/* Closes handed to a process at once: a write to its pipe (8 bytes
 * each) well under PIPE_BUF. */
#define HAND_MAX 64
/* An idle closing process ends after this long. */
#define CLOSER_IDLE_NS (2000 * 1000000ull)
/* Connections that may pass files for this long: a spawner runs. */
#define FILES_OPEN_GRACE_NS (1000 * 1000000ull)
/* The daemon's listening sockets a spawner is told of: its own, the
 * bridge's. */
#define LISTENERS_MAX 8
/* A close that has waited this long is logged (once). */
#define CLOSER_SLOW_NS (10000 * 1000000ull)

struct cmd {
	int32_t fd;
	int32_t sock;             /* a client connection, shut down: drained first */
};

enum { R_CLOSED, R_UP, R_FAILED };

struct report {
	uint16_t k;               /* the process's slot */
	uint16_t kind;
	int32_t arg;              /* R_UP: its pidfd; R_FAILED: -errno */
};

struct closing {
	int fd;
	bool sock;
};

/* A uid's closes: a ring of n from head, the first w->handed of them
 * handed to the process that works it. */
struct uq {
	uid_t uid;
	struct closing *v;        /* cap entries, a power of two */
	uint32_t cap, head, n;
	int k;                    /* the process working it, -1: none */
	bool ready;               /* on the list of uids waiting for one */
	struct uq *next;
};

enum { W_FREE, W_SPAWNING, W_UP, W_RETIRING };

struct worker {
	int state;
	int cmd, cmd_r;           /* its pipe: our end, its end */
	int pidfd;
	struct uq *q;             /* the uid it works, NULL: idle */
	uint32_t handed;
	uint64_t idle_since;
	uint64_t since;           /* when its close under way was handed or begun */
	bool told;                /* that close logged as slow */
};

static struct {
	struct pr_u64map uqs;     /* uid + 2 -> struct uq * */
	struct uq *ready, **ready_tail;
	struct worker w[CLOSER_PROCS_MAX];
	unsigned used;            /* slots not free */
	unsigned busy_unpriv;     /* processes working an unprivileged uid */
	int req;                  /* the spawner's pipe, our end; -1: none, or told to end */
	int req_r;                /* its end, closed once it is gone */
	int rep;                  /* the reports' pipe, our end */
	int rep_w;                /* the end the spawner and the processes write */
	int spawner;              /* its pidfd; -1: none */
	pid_t spawner_pid;        /* our child: waited for once gone */
	int old_spawner, old_req_r; /* one told to end, while another runs */
	pid_t old_spawner_pid;
	int listeners[LISTENERS_MAX]; /* our listening sockets, told each spawner */
	int nlisteners;
	long qlen;                /* net.unix.max_dgram_qlen: packets a socket can hold */
	bool spawning;            /* a request to the spawner unanswered */
	bool backoff;             /* the last spawn failed: none till the next tick */
	bool checking;            /* the process made at start, a check only */
	bool running;
	struct pr_ratelimit fail_log, slow_log;
} cl = { .req = -1, .req_r = -1, .rep = -1, .rep_w = -1, .spawner = -1, .old_spawner = -1,
	  .old_req_r = -1 };

/* ---- the closing processes ---------------------------------------------- */

/* A linger of 0: a socket's close resets it and returns. */
static void close_now(int fd)
{
	static const struct linger now = { 1, 0 };

	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
	close(fd);
}

/* A closing process's buffers for drain(): a vector of DRAIN_MAX reads
 * (a batch is one recvmmsg() call: a connection that ended with nothing
 * queued, as a client's does, costs one call, not one per packet it could
 * hold), each with room for a packet's 253 files. */
#define DRAIN_MAX 1024
struct drain_buf {
	struct mmsghdr mm[DRAIN_MAX];
	struct iovec iov[DRAIN_MAX];
	char byte[DRAIN_MAX];
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(PASSED_FDS_MAX * sizeof(int))];
	} u[DRAIN_MAX];
};

/* Close the files a read brought. Whether there were any. */
static bool close_passed(struct msghdr *msg)
{
	int fds[PASSED_FDS_MAX], n = passed_fds(msg, fds);

	for (int k = 0; k < n; k++)
		close_now(fds[k]);
	return n > 0;
}

/* Every file on the packets queued on shut-down socket FD, closed. An
 * empty packet, the end and a pending error all read as nothing; reads of
 * nothing one more than the socket can hold packets mean it is empty. */
static void drain(struct drain_buf *b, int fd)
{
	long empty = 0;

	while (empty <= cl.qlen + 1) {
		unsigned v = (unsigned)(cl.qlen + 2 - empty < DRAIN_MAX ? cl.qlen + 2 - empty
									 : DRAIN_MAX);
		int n;

		for (unsigned i = 0; i < v; i++) {
			b->iov[i] = (struct iovec){ &b->byte[i], 1 };
			b->mm[i].msg_hdr = (struct msghdr){ .msg_iov = &b->iov[i], .msg_iovlen = 1,
							    .msg_control = b->u[i].b,
							    .msg_controllen = sizeof(b->u[i].b) };
		}
		n = recvmmsg(fd, b->mm, v, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, NULL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EBADF || errno == ENOTSOCK || errno == ENOMEM)
				return;
			empty++; /* a pending error, reported once: read on */
			continue;
		}
		for (int i = 0; i < n; i++)
			empty = close_passed(&b->mm[i].msg_hdr) || b->mm[i].msg_len > 0 ? 0 : empty + 1;
	}
}

static void report(int fd, unsigned k, int kind, int32_t arg)
{
	struct report r = { (uint16_t)k, (uint16_t)kind, arg };

	while (write(fd, &r, sizeof(r)) < 0 && errno == EINTR)
		;
}

/* A child sharing our descriptors (and nothing else: its memory a copy,
 * as fork's), its pidfd into *PIDFD. As fork(): 0 in the child. Not
 * glibc's fork(): its handlers are not for a child that shares the
 * table. clone3() where the kernel and any seccomp filter let us, else
 * clone(), whose pidfd goes where its parent_tid argument points. */
static pid_t clone_files(int *pidfd)
{
	struct clone_args a = { .flags = CLONE_FILES | CLONE_PIDFD,
				.pidfd = (uint64_t)(uintptr_t)pidfd, .exit_signal = SIGCHLD };
	long pid = syscall(SYS_clone3, &a, sizeof(a));

	if (pid < 0 && (errno == ENOSYS || errno == EPERM))
#if defined(__s390__)
		pid = syscall(SYS_clone, 0, CLONE_FILES | CLONE_PIDFD | SIGCHLD, pidfd, NULL, 0);
#else
		pid = syscall(SYS_clone, CLONE_FILES | CLONE_PIDFD | SIGCHLD, 0, pidfd, NULL, 0);
#endif
	return (pid_t)pid;
}

/* In a new child, called NAME: die with the parent (PARENT), whose death
 * may have come already; the descriptors' limit to the hard one, as the daemon's (a
 * drain installs files, and limits are a process's own). SIGTERM, SIGINT
 * and SIGHUP ignored: a service manager's stop, a terminal's ^C, reach
 * the whole group, and we must outlive the daemon's exit (while one of us
 * shares its descriptors, its exit closes none of them: it would close
 * the files still queued, and wait on them). No signal blocked. */
static void child_init(pid_t parent, const char *name, bool pdeath)
{
	struct rlimit rl;
	sigset_t none;

	if (pdeath)
		prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(0);
	/* Told apart from the daemon in ps and top. */
	prctl(PR_SET_NAME, name);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* A closing process: the closes handed on pipe CMD, each reported on REP,
 * until the daemon closes its end. */
static _Noreturn void worker_main(unsigned k, int cmd, int rep)
{
	struct drain_buf *b = NULL;
	struct cmd c[HAND_MAX];

	for (;;) {
		ssize_t n = read(cmd, c, sizeof(c));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (size_t i = 0; i < (size_t)n / sizeof(c[0]); i++) {
			if (c[i].sock && !b) {
				b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
				if (b == MAP_FAILED)
					b = NULL;
			}
			if (c[i].sock && b)
				drain(b, c[i].fd);
			close_now(c[i].fd);
			report(rep, k, R_CLOSED, 0);
		}
	}
	/* Our end of the pipe is left to the daemon, which closes it once
	 * it sees us gone (closer_tick): closed here too, its number could
	 * be handed out again to the daemon in between, and the daemon's
	 * close would then close that. */
	_exit(0);
}

struct spawn_req {
	int32_t k;                /* -1: CMD is a listening socket of the daemon's */
	int32_t cmd;              /* the process's end of its pipe */
};

/* The daemon's listening sockets, shut down (not closed: that could wait
 * on the files of connections not yet accepted) once it is gone: a new
 * daemon's connections, its socket path's check and its bind of a port
 * must not meet them, live for as long as a close here is held. */
static void shut_listeners(const int *fds, int n)
{
	struct sockaddr_un names[LISTENERS_MAX];
	socklen_t lens[LISTENERS_MAX];
	int nn = 0, dir;
	char ents[4096] __attribute__((aligned(8)));
	struct dirent64 *e;
	ssize_t got;

	for (int i = 0; i < n; i++) {
		int on = 0;
		socklen_t len = sizeof(on);

		/* Still a listening socket: the number is not another's. */
		if (getsockopt(fds[i], SOL_SOCKET, SO_ACCEPTCONN, &on, &len) < 0 || !on)
			continue;
		lens[nn] = sizeof(names[nn]);
		if (getsockname(fds[i], (struct sockaddr *)&names[nn], &lens[nn]) == 0 &&
		    names[nn].sun_family == AF_UNIX && lens[nn] > sizeof(sa_family_t))
			nn++;
		(void)shutdown(fds[i], SHUT_RDWR);
	}
	/* And its clients' connections, which the daemon accepted on one of
	 * them (so named as it is), ended for their peers now, not when the
	 * last of us is gone: a client then makes a new one. Nothing passed
	 * to the daemon is one of these. Read with getdents64() into our
	 * stack, not opendir(): a spawner made while the daemon ran threads
	 * (the bridge's) is a copy of one thread of it, and a lock of
	 * malloc's another held then stays held here. */
	dir = nn ? open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	while (dir >= 0 && (got = getdents64(dir, ents, sizeof(ents))) > 0) {
		for (ssize_t at = 0; at < got; at += e->d_reclen) {
			struct sockaddr_un sa;
			socklen_t len = sizeof(sa);
			int fd;

			e = (struct dirent64 *)(ents + at);
			fd = atoi(e->d_name);
			if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dir ||
			    getsockname(fd, (struct sockaddr *)&sa, &len) < 0 ||
			    sa.sun_family != AF_UNIX)
				continue;
			for (int i = 0; i < nn; i++)
				if (len == lens[i] && !memcmp(&sa, &names[i], len)) {
					(void)shutdown(fd, SHUT_RDWR);
					break;
				}
		}
	}
	if (dir >= 0)
		close(dir);
}

/* The spawner: a closing process made for each request on REQ, its pidfd
 * reported on REP. Children it does not wait for (SIGCHLD ignored). It
 * ends once the daemon has, every thread of it: its death signal
 * (PR_SET_PDEATHSIG) would come when the daemon's first thread is gone,
 * and were we all gone before its last, that thread's exit would be
 * the last holder of the table of descriptors, and close (wait on) the
 * files still queued. A pidfd reads as ended once the whole process has
 * (each of its threads' files let go of by then). The closing processes
 * die with the spawner. */
static _Noreturn void spawner_main(pid_t daemon, int req, int rep)
{
	int dfd = procreg__pidfd_open(daemon), listeners[LISTENERS_MAX], nl = 0;
	pid_t self;

	/* Without pidfd_open (before Linux 5.3), the death signal. */
	child_init(daemon, "procregd-spawn", dfd < 0);
	signal(SIGCHLD, SIG_IGN);
	self = getpid();
	for (;;) {
		struct pollfd p[2] = { { req, POLLIN, 0 }, { dfd, POLLIN, 0 } };
		struct spawn_req r;
		int pidfd = -1;
		ssize_t n;
		pid_t pid;

		if (poll(p, dfd < 0 ? 1 : 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents) {
			shut_listeners(listeners, nl);
			_exit(0);
		}
		n = read(req, &r, sizeof(r));
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof(r))
			break; /* told to end */
		if (r.k < 0) {
			if (nl < LISTENERS_MAX)
				listeners[nl++] = r.cmd;
			continue;
		}
		pid = clone_files(&pidfd);
		if (pid == 0) {
			child_init(self, "procregd-close", true);
			worker_main((unsigned)r.k, r.cmd, rep);
		}
		if (pid < 0)
			report(rep, (unsigned)r.k, R_FAILED, -errno);
		else
			report(rep, (unsigned)r.k, R_UP, pidfd);
	}
	/* The pidfd is in the daemon's table, which may outlive us. */
	if (dfd >= 0)
		close(dfd);
	_exit(0);
}

/* ---- the daemon's side ------------------------------------------------- */

static struct uq *uq_get(uid_t uid, bool make)
{
	uint64_t v;
	struct uq *q;

	if (procreg__u64map_get(&cl.uqs, (uint64_t)uid + 2, &v) == 0)
		return (struct uq *)(uintptr_t)v;
	if (!make || !(q = calloc(1, sizeof(*q))))
		return NULL;
	q->uid = uid;
	q->k = -1;
	if (procreg__u64map_put(&cl.uqs, (uint64_t)uid + 2, (uint64_t)(uintptr_t)q) < 0) {
		free(q);
		return NULL;
	}
	return q;
}

static void uq_free(struct uq *q)
{
	procreg__u64map_del(&cl.uqs, (uint64_t)q->uid + 2);
	free(q->v);
	free(q);
}

static bool uq_push(struct uq *q, int fd, bool sock)
{
	if (q->n == q->cap) {
		uint32_t cap = q->cap ? q->cap * 2 : 16;
		struct closing *v = malloc(cap * sizeof(*v));

		if (!v)
			return false;
		for (uint32_t i = 0; i < q->n; i++)
			v[i] = q->v[(q->head + i) & (q->cap - 1)];
		free(q->v);
		q->v = v;
		q->cap = cap;
		q->head = 0;
	}
	q->v[(q->head + q->n) & (q->cap - 1)] = (struct closing){ fd, sock };
	q->n++;
	return true;
}

static void ready_add(struct uq *q)
{
	q->ready = true;
	q->next = NULL;
	*cl.ready_tail = q;
	cl.ready_tail = &q->next;
}

/* The first uid waiting that a process may take now: any privileged one,
 * an unprivileged one while fewer than all but the last process work
 * unprivileged uids. Unlinked if TAKE. */
static struct uq *ready_pick(const struct daemon *d, bool take)
{
	struct uq **pp;

	for (pp = &cl.ready; *pp; pp = &(*pp)->next)
		if (uid_privileged(d, (*pp)->uid) || cl.busy_unpriv < CLOSER_PROCS_MAX - 1)
			break;
	if (*pp && take) {
		struct uq *q = *pp;

		*pp = q->next;
		if (!*pp)
			cl.ready_tail = pp;
		q->ready = false;
		q->next = NULL;
		return q;
	}
	return *pp;
}

/*
 * A spawner, sharing our table of descriptors: made when a close needs a
 * process and none runs, told to end once none is needed (closer_tick).
 * While none runs, the table is ours alone, and the kernel looks a
 * descriptor up without taking a reference to its file: shared, each
 * system call on one takes and drops one, and a synchronous request's
 * round trip took about 4% longer (three such calls on our side of it;
 * procreg-bench register's ratio to a socket round trip 0.896x against
 * 0.930x with none running, medians of nine runs taking turns). The
 * first is made at start, before the table is mapped. Made later, it is
 * a copy of our memory, the table's mapping in it, which it lets go of
 * before anything can wait there (the mapping alone holds the scope's
 * lock: main.c); the rest of the copy (our heap, copy-on-write) it keeps
 * while it runs, seconds.
 */
static int spawner_start(const struct daemon *d)
{
	int req[2], pidfd = -1, err;
	pid_t self = getpid(), pid;

	if (pipe2(req, O_CLOEXEC) < 0)
		return -errno;
	(void)fcntl(req[1], F_SETFL, O_NONBLOCK);
	pid = clone_files(&pidfd);
	if (pid == 0) {
		if (d->w.map.base)
			munmap(d->w.map.base, d->w.map.size);
		spawner_main(self, req[0], cl.rep_w);
	}
	if (pid < 0) {
		err = -errno;
		close(req[0]);
		close(req[1]);
		return err;
	}
	cl.spawner = pidfd;
	cl.spawner_pid = pid;
	cl.req = req[1];
	cl.req_r = req[0];
	for (int i = 0; i < cl.nlisteners; i++) {
		struct spawn_req r = { -1, cl.listeners[i] };

		if (write(cl.req, &r, sizeof(r)) != (ssize_t)sizeof(r))
			break;
	}
	return 0;
}

/* Whether the spawner that runs stays. Where the kernel cannot refuse
 * files (before Linux 6.16), every connection may pass them, and one is
 * wanted whenever a client is connected: the first, made before the
 * table was mapped, stays, rather than copies of the daemon made and
 * ended as connections come and go, each holding the daemon's memory
 * copy-on-write while it runs. The table is shared then, as it always
 * was before. */
static bool spawner_kept(const struct daemon *d)
{
	return d->no_passrights;
}

/* Whether a spawner runs, made now if none does (one told to end runs on
 * until it has). */
static bool spawner_up(const struct daemon *d)
{
	int err;

	if (cl.req >= 0)
		return true;
	if (cl.spawner >= 0) {
		if (cl.old_spawner >= 0)
			return false; /* a third: once the first is gone */
		cl.old_spawner = cl.spawner;
		cl.old_spawner_pid = cl.spawner_pid;
		cl.old_req_r = cl.req_r;
		cl.spawner = cl.req_r = -1;
	}
	if ((err = spawner_start(d)) < 0) {
		log_limited(&cl.fail_log, "closing processes not made",
			    "the closing processes' spawner could not be made: %s", strerror(-err));
		cl.backoff = true;
		return false;
	}
	return true;
}

/* Ask the spawner for one more process, for uid Q's sake. */
static void spawn(const struct daemon *d, const struct uq *q)
{
	struct spawn_req r;
	int p[2], k;

	if (cl.spawning || cl.backoff ||
	    cl.used >= CLOSER_PROCS_MAX - (uid_privileged(d, q->uid) ? 0 : 1))
		return;
	for (k = 0; k < CLOSER_PROCS_MAX && cl.w[k].state != W_FREE; k++)
		;
	if (k == CLOSER_PROCS_MAX || !spawner_up(d))
		return;
	if (pipe2(p, O_CLOEXEC) < 0) {
		cl.backoff = true;
		return;
	}
	(void)fcntl(p[1], F_SETFL, O_NONBLOCK);
	r = (struct spawn_req){ k, p[0] };
	if (write(cl.req, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
		close(p[0]);
		close(p[1]);
		cl.backoff = true;
		return;
	}
	cl.w[k] = (struct worker){ .state = W_SPAWNING, .cmd = p[1], .cmd_r = p[0], .pidfd = -1 };
	cl.used++;
	cl.spawning = true;
}

/* Q's first closes, to process K. */
static bool hand(const struct daemon *d, int k, struct uq *q)
{
	struct worker *w = &cl.w[k];
	struct cmd c[HAND_MAX];
	uint32_t n = q->n < HAND_MAX ? q->n : HAND_MAX;

	for (uint32_t i = 0; i < n; i++) {
		const struct closing *e = &q->v[(q->head + i) & (q->cap - 1)];

		c[i] = (struct cmd){ e->fd, e->sock };
	}
	/* Its pipe holds 64 KiB, and it has nothing of ours unread. */
	if (write(w->cmd, c, n * sizeof(c[0])) != (ssize_t)(n * sizeof(c[0])))
		return false;
	w->q = q;
	w->handed = n;
	w->since = procreg__mono_ns();
	w->told = false;
	q->k = k;
	if (!uid_privileged(d, q->uid))
		cl.busy_unpriv++;
	return true;
}

/* Every uid waiting that can have a process, given one; one more made if
 * one waits and none is free. */
static void dispatch(const struct daemon *d)
{
	struct uq *q;

	while ((q = ready_pick(d, false))) {
		int k;

		for (k = 0; k < CLOSER_PROCS_MAX; k++)
			if (cl.w[k].state == W_UP && !cl.w[k].q)
				break;
		if (k == CLOSER_PROCS_MAX) {
			spawn(d, q);
			return;
		}
		q = ready_pick(d, true);
		if (!hand(d, k, q)) {
			/* Never (see hand): the process is taken as lost. */
			ready_add(q);
			close(cl.w[k].cmd);
			cl.w[k].state = W_RETIRING;
			return;
		}
	}
}

/* Process K closed the first of what it was handed. */
static void closed_one(struct daemon *d, int k)
{
	struct worker *w = &cl.w[k];
	struct uq *q = w->q;

	if (!q || !w->handed)
		return;
	q->head = (q->head + 1) & (q->cap - 1);
	q->n--;
	w->handed--;
	uid_adjust(&d->uid_closing, q->uid, -1);
	if (w->told)
		log_limited(&cl.slow_log, "slow closes", "uid %u: its close that waited is done",
			    (unsigned)q->uid);
	w->since = procreg__mono_ns();
	w->told = false;
	if (w->handed)
		return;
	w->q = NULL;
	w->idle_since = procreg__mono_ns();
	q->k = -1;
	if (!uid_privileged(d, q->uid))
		cl.busy_unpriv--;
	if (q->n)
		ready_add(q);
	else
		uq_free(q);
}

static void on_report(struct daemon *d, const struct report *r)
{
	struct worker *w;

	if (r->k >= CLOSER_PROCS_MAX)
		return;
	w = &cl.w[r->k];
	switch (r->kind) {
	case R_CLOSED:
		closed_one(d, r->k);
		break;
	case R_UP:
		if (w->state != W_SPAWNING)
			break;
		w->state = W_UP;
		w->pidfd = r->arg;
		w->idle_since = procreg__mono_ns();
		cl.spawning = false;
		/* The check at start's, with nothing to do: ends now, and
		 * the spawner with it (spawner_start() says why), unless it
		 * is kept (spawner_kept()). */
		if (cl.checking && !cl.ready) {
			close(w->cmd);
			w->state = W_RETIRING;
			if (cl.req >= 0 && !spawner_kept(d)) {
				close(cl.req);
				cl.req = -1;
			}
		}
		cl.checking = false;
		break;
	case R_FAILED:
		if (w->state != W_SPAWNING)
			break;
		log_limited(&cl.fail_log, "closing processes not made",
			    "a closing process could not be made: %s (%u running)",
			    strerror(-r->arg), cl.used - 1);
		close(w->cmd);
		close(w->cmd_r);
		w->state = W_FREE;
		cl.used--;
		cl.spawning = false;
		cl.backoff = true;
		break;
	}
}

/* net.unix.max_dgram_qlen, the packets a unix socket's queue holds (one
 * more, in fact): 512 unless set, read once at start. */
static long max_qlen(void)
{
	FILE *f = fopen("/proc/sys/net/unix/max_dgram_qlen", "re");
	long v = 0;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v > 0 && v < (1l << 24) ? v : 512;
}

int closer_start(struct daemon *d)
{
	int rep[2], err;

	cl.qlen = max_qlen();
	cl.ready_tail = &cl.ready;
	if (pipe2(rep, O_CLOEXEC) < 0)
		return -errno;
	(void)fcntl(rep[0], F_SETFL, O_NONBLOCK);
	cl.rep = rep[0];
	cl.rep_w = rep[1];
	d->closer_ev.kind = EV_CLOSER;
	err = ev_add(d, cl.rep, EPOLLIN, &d->closer_ev);
	if (err)
		return err;
	/* Before the table is opened or mapped, and before any thread. */
	err = spawner_start(d);
	if (err)
		return err;
	cl.running = true;
	/* One process from the start, a check: a system that cannot make
	 * one says so now. It ends soon after, and the spawner then. */
	{
		struct uq none = { .uid = 0 };

		cl.checking = true;
		spawn(d, &none);
	}
	return cl.spawning ? 0 : -EAGAIN;
}

void closer_listeners(const struct daemon *d)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;

	if (!dir)
		return;
	/* Before any client: every descriptor is our own. Told to the
	 * spawner that runs, and to each made later. */
	while ((e = readdir(dir)) && cl.nlisteners < LISTENERS_MAX) {
		struct spawn_req r = { -1, atoi(e->d_name) };
		int on = 0;
		socklen_t len = sizeof(on);

		if (e->d_name[0] < '0' || e->d_name[0] > '9' || r.cmd == dirfd(dir) ||
		    (d->socket_inherited && r.cmd == d->lfd) ||
		    getsockopt(r.cmd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) < 0 || !on)
			continue;
		cl.listeners[cl.nlisteners++] = r.cmd;
		if (cl.req >= 0)
			(void)!write(cl.req, &r, sizeof(r));
	}
	closedir(dir);
}

/* Whether the process of pidfd FD has ended. */
void closer_tick(struct daemon *d)
{
	uint64_t now = procreg__mono_ns();

	if (!cl.running)
		return;
	for (int k = 0; k < CLOSER_PROCS_MAX; k++) {
		struct worker *w = &cl.w[k];

		if ((w->state != W_UP && w->state != W_RETIRING) || !procreg__pidfd_exited(w->pidfd))
			continue;
		/* Gone: ended as told, or killed (its closes then taken as
		 * done, whatever became of their files). */
		if (w->state == W_UP) {
			log_warn("a closing process ended unasked, %u closes of uid %u with it",
				 w->handed, w->q ? (unsigned)w->q->uid : 0);
			while (w->q)
				closed_one(d, k);
			close(w->cmd);
		}
		close(w->cmd_r);
		close(w->pidfd);
		w->state = W_FREE;
		cl.used--;
	}
	if (cl.old_spawner >= 0 && procreg__pidfd_exited(cl.old_spawner)) {
		(void)waitpid(cl.old_spawner_pid, NULL, WNOHANG);
		close(cl.old_spawner);
		close(cl.old_req_r);
		cl.old_spawner = cl.old_req_r = -1;
	}
	if (cl.spawner >= 0 && procreg__pidfd_exited(cl.spawner)) {
		if (cl.req >= 0) {
			log_err("the closing processes' spawner ended unasked: another is made when one is needed");
			close(cl.req);
			cl.req = -1;
		}
		(void)waitpid(cl.spawner_pid, NULL, WNOHANG);
		close(cl.spawner);
		close(cl.req_r);
		cl.spawner = cl.req_r = -1;
		/* A request it took with it: the slot back (its end of the
		 * pipe left alone, in case a process was made). */
		for (int k = 0; k < CLOSER_PROCS_MAX; k++)
			if (cl.w[k].state == W_SPAWNING) {
				close(cl.w[k].cmd);
				cl.w[k].state = W_FREE;
				cl.used--;
			}
		cl.spawning = false;
	}
	/* Closes that wait long: a file on a FUSE mount whose server does
	 * not answer, most likely. Only its uid's closes wait for it. */
	for (int k = 0; k < CLOSER_PROCS_MAX; k++) {
		struct worker *w = &cl.w[k];

		if (w->state != W_UP || !w->q || w->told || now - w->since < CLOSER_SLOW_NS)
			continue;
		w->told = true;
		log_limited(&cl.slow_log, "slow closes",
			    "uid %u: a file it passed has taken %llu s to close so far (a FUSE server that does not answer?); %u more of its closes wait behind it",
			    (unsigned)w->q->uid, (unsigned long long)((now - w->since) / 1000000000ull),
			    w->q->n - 1);
	}
	/* Idle ones end, the last too; then, none left and none wanted, the
	 * spawner (spawner_start() says why), made again at the next close
	 * that needs a process. */
	for (int k = 0; k < CLOSER_PROCS_MAX; k++) {
		struct worker *w = &cl.w[k];

		if (w->state != W_UP || w->q || now - w->idle_since <= CLOSER_IDLE_NS)
			continue;
		close(w->cmd);
		w->state = W_RETIRING;
	}
	/* Connections whose packets may carry files, for FILES_OPEN_GRACE_NS
	 * (not a client of the library in the moment before its ARM): a
	 * spawner runs while there are. Were the daemon to crash, its exit
	 * would drop the last references to the files queued there, and a
	 * last close may wait (a socket lingering over unsent data), in the
	 * daemon's exit, its listening sockets still open: a new daemon's
	 * check of its socket path would wait too. The spawner shuts them
	 * down first (spawner_main). */
	if (d->files_open && now - d->files_open_since >= FILES_OPEN_GRACE_NS && !cl.backoff)
		(void)spawner_up(d);
	if (cl.req >= 0 && !cl.used && !cl.ready && !cl.spawning && !d->files_open &&
	    !spawner_kept(d)) {
		close(cl.req);
		cl.req = -1;
	}
	cl.backoff = false;
	dispatch(d);
}

void closer_stop(struct daemon *d)
{
	bool queued = cl.ready != NULL;

	for (int k = 0; k < CLOSER_PROCS_MAX; k++)
		queued |= cl.w[k].q != NULL;
	if (!cl.running || !queued)
		return;
	cl.backoff = false;
	if (spawner_up(d)) {
		dispatch(d);
		return;
	}
	/* Our exit closes the files then, and may wait on one (a FUSE file's
	 * FLUSH), as a closing process held so would. The scope's lock ends
	 * before that, when teardown unmaps the table; the listening sockets
	 * are shut down here, as a spawner would once we are gone, so that a
	 * new daemon can serve. Only when no process can be made (a limit on
	 * processes or memory): while one runs, it shares the table, and our
	 * exit closes nothing. */
	log_err("closes are queued at exit and no closing processes' spawner can be made: "
		"the exit closes their files itself, and may wait on one");
	shut_listeners(cl.listeners, cl.nlisteners);
}

/* A shmem file holding more than this closes in a closing process: its
 * last close frees its pages, 19 ms for 512 MiB here, and a sender may
 * hold many GiB. A reader page, all a client passes, is 4 KiB. */
#define SHMEM_AT_ONCE_MAX (1u << 20)

/* Whether closing FD now cannot wait on anything: a small memfd or any
 * other shmem file (the only files F_GET_SEALS answers for), or a pidfd
 * (pidfd_send_signal() with no signal answers EBADF for anything else).
 * Neither question reaches the file's own operations: fstat() of a FUSE
 * file waits on its server, and reading /proc/self/fdinfo of an epoll
 * file takes a lock its owner can hold; fstat() of a shmem file is safe,
 * asked once F_GET_SEALS said it is one. */
static bool closes_at_once(int fd)
{
	struct stat st;

	if (fcntl(fd, F_GET_SEALS) >= 0)
		return fstat(fd, &st) == 0 && (uint64_t)st.st_blocks * 512 <= SHMEM_AT_ONCE_MAX;
	return procreg__is_pidfd(fd);
}

/* FD to UID's queue (its range owner's, for a subordinate uid: a queue
 * each would let one user hold a closing process per uid it may run
 * as): false if it could not be queued. */
static bool queue(struct daemon *d, int fd, uid_t uid, bool sock)
{
	struct uq *q;

	if (!cl.running || !(q = uq_get(subuid_owner(uid), true)))
		return false;
	if (!uq_push(q, fd, sock)) {
		if (!q->n && q->k < 0)
			uq_free(q);
		return false;
	}
	uid_adjust(&d->uid_closing, q->uid, 1);
	if (q->k < 0 && !q->ready)
		ready_add(q);
	dispatch(d);
	return true;
}

void closer_put(struct daemon *d, int fd, uid_t uid)
{
	if (fd < 0)
		return;
	/* Out of memory to queue it, or before the spawner runs: closed
	 * here, as it was before there were closing processes. */
	if (closes_at_once(fd) || !queue(d, fd, uid, false))
		close(fd);
}

void closer_event(struct daemon *d)
{
	struct report r[512];
	ssize_t n;

	while ((n = read(cl.rep, r, sizeof(r))) > 0)
		for (size_t i = 0; i < (size_t)n / sizeof(r[0]); i++)
			on_report(d, &r[i]);
	dispatch(d);
	server_unpark(d);
	server_accept_resume(d);
}

bool closer_over(const struct daemon *d, uid_t uid)
{
	return !uid_privileged(d, uid) && uid_count(&d->uid_closing, uid) >= CLOSER_PER_UID;
}

void closer_sock_close(struct daemon *d, int fd, uid_t uid)
{
	/* Shut down first: the peer's sends fail from here on, so what the
	 * closing process drains is all there will be. */
	(void)shutdown(fd, SHUT_RDWR);
	if (!queue(d, fd, uid, true))
		close(fd);
}
