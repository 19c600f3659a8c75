/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_soak.c - a bounded soak: three bridged daemons, with readers,
 * writers, deaths and random disconnects, for PROCREG_SOAK_SECONDS
 * (default 60) after a warm-up; then the promise is checked: the replicas
 * agree, nothing of a dead process is left, and the daemons' memory, table
 * files and fds have not grown.
 *
 * The nodes talk through TCP proxies in this test (one in front of each
 * node's --listen), which cut connections at random (both sides closed);
 * the mesh reconnects. Nodes dial the addresses they hear of in HELLOs,
 * so each node advertises its proxy's (--advertise), as it would behind
 * address translation: every connection between nodes stays on a proxy.
 * (A proxy may not rewrite a HELLO: the handshake covers it.)
 *
 * Workers are processes: writers (on every node) register (some waiting
 * in line, PROCREG_QUEUE), unregister, join and leave names of a shared
 * pool (so nodes conflict) and of their own, with metadata that names the
 * entry and its owner; readers look up,
 * iterate and list members on every node and check that every record they
 * see is well-formed; a spawner starts short-lived processes that register
 * and are SIGKILLed, some of them in mid-request.
 *
 * Measured per daemon after the warm-up and at the end, each time with
 * every worker gone and the cluster settled: VmRSS, the table file's
 * allocated size, the arena's high-water mark and /proc/PID/fd. Bounds
 * (see check_growth): fds exactly back to the warm-up's count; the arena
 * and the file no more than what one whole new set of this workload's
 * live entries could need; RSS no more than that plus the mesh's retained
 * buffers. A leak per operation would exceed them: the run makes far more
 * operations than there are live entries (asserted).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "internal.h"
#include "bridge_proto.h"

#define NODES 3
#define WRITERS_PER_NODE 2
#define WRITERS (NODES * WRITERS_PER_NODE)
#define READERS 2
#define POOL 48                 /* soak-nNN: contested by every writer */
#define OWN 8                   /* soak-wPID-K: one writer's own */
#define GROUPS 6                /* soak-gK */
#define DEATH_OPS 6             /* at most, per short-lived process */
#define SETTLE_MS 120000        /* generous: the machine is shared */

/* The most entries one table holds at once in this workload (every
 * node's, since each table holds the whole cluster): the pool, the
 * writers' own names, their memberships, the groups, and one short-lived
 * process's entries at a time. */
#define LIVE_MAX (POOL + WRITERS * OWN + WRITERS * GROUPS + GROUPS + DEATH_OPS)
/* The largest record this workload writes: names under 32 bytes,
 * metadata under 48, 16-byte aligned. */
#define RECORD_MAX ((sizeof(struct pr_record) + 32 + 48 + 15) & ~(size_t)15)
/* A hash index block of the smallest capacity (256 slots), as writer.c
 * sizes them. */
#define INDEX_BLOCK (sizeof(struct pr_index) + 256 * sizeof(uint64_t))
/* What the mesh keeps per connection once a flush is done: an output
 * buffer up to 1 MiB (bigger ones are freed), the input buffer (two
 * records), what records opened to (a frame's start and a record), the
 * wire buffer (a record and the handshake's room) and the channel. */
#define MESH_KEEP ((1u << 20) + 2 * PR_BS_REC_MAX + PR_BP_FRAME_MAX + PR_BS_PT_MAX + \
		   PR_BS_REC_MAX + 1024 + 4096)


enum phase { PH_RUN = 1, PH_HOLD, PH_EXIT };

/* Shared by the test and every process it forks (MAP_SHARED). */
struct shared {
	volatile int phase;
	volatile int real_port[NODES];   /* each node's --listen port */
	int proxy_port[NODES];
	uint64_t ops, reads, checked, deaths, cuts, idle, bad;
	char bad_msg[256];
};

struct soak {
	char *base;
	char cookie[512];
	struct th_node n[NODES];
	struct shared *sh;
	pid_t proxy;
	int proxy_lfd[NODES];
	pid_t writer[WRITERS];
	pid_t reader[READERS];
	pid_t spawner;
};

struct sample {
	long rss_kb, anon_kb, fds;
	uint64_t file_bytes, arena_top, feed_head;
	char *fd_list;             /* which they were (th_fds_text) */
};

static void bad(struct shared *sh, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad(struct shared *sh, const char *fmt, ...)
{
	va_list ap;

	if (__atomic_fetch_add(&sh->bad, 1, __ATOMIC_SEQ_CST) == 0) {
		va_start(ap, fmt);
		vsnprintf(sh->bad_msg, sizeof(sh->bad_msg), fmt, ap);
		va_end(ap);
	}
}

static void add(uint64_t *c, uint64_t n)
{
	__atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t seed_rng(void)
{
	return ((uint64_t)getpid() << 32) ^ now_ms() ^ 0x9e3779b97f4a7c15ull;
}

static int rnd(uint64_t *s, int n)
{
	return (int)(th_xorshift(s) % (uint64_t)n);
}

static void usleep_rnd(uint64_t *s, int max_us)
{
	struct timespec ts = { 0, (long)rnd(s, max_us) * 1000L };

	nanosleep(&ts, NULL);
}

/* ---- the proxies -------------------------------------------------------- */

#define PAIRS 64
#define PBUF 65536

struct pdir {
	uint8_t buf[PBUF];
	size_t len, off;
};

struct pair {
	bool live;
	int fd[2];               /* 0: the dialing node, 1: the node behind */
	struct pdir dir[2];      /* dir[s]: bytes read from fd[s] */
};

static void pair_close(struct pair *pr)
{
	close(pr->fd[0]);
	close(pr->fd[1]);
	pr->live = false;
}

static void pair_interest(int ep, struct pair *pr, int idx)
{
	for (int s = 0; s < 2; s++) {
		const struct pdir *in = &pr->dir[s], *out = &pr->dir[1 - s];
		struct epoll_event e = { .data.u64 = (uint64_t)idx * 2 + (uint64_t)s };

		if (in->off == in->len)
			e.events |= EPOLLIN;
		if (out->off < out->len)
			e.events |= EPOLLOUT;
		epoll_ctl(ep, EPOLL_CTL_MOD, pr->fd[s], &e);
	}
}

/* Move what is buffered from side S to the other side. <0: close. */
static int pdir_flush(struct pair *pr, int s)
{
	struct pdir *d = &pr->dir[s];

	while (d->off < d->len) {
		ssize_t n = send(pr->fd[1 - s], d->buf + d->off, d->len - d->off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN ? 0 : -1;
		d->off += (size_t)n;
	}
	if (d->off == d->len)
		d->off = d->len = 0;
	return 0;
}

static int pdir_read(struct pair *pr, int s)
{
	struct pdir *d = &pr->dir[s];
	ssize_t n;

	if (d->len)
		return 0;
	n = recv(pr->fd[s], d->buf + d->len, PBUF - d->len, MSG_DONTWAIT);
	if (n == 0)
		return -1;
	if (n < 0)
		return errno == EAGAIN ? 0 : -1;
	d->len += (size_t)n;
	return pdir_flush(pr, s);
}

static int proxy_accept(struct shared *sh, int ep, struct pair *pairs, int lfd, int node)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), b, one = 1, i;

	if (a < 0)
		return 0;
	for (i = 0; i < PAIRS && pairs[i].live; i++)
		;
	sa.sin_port = htons((uint16_t)sh->real_port[node]);
	b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (i == PAIRS || b < 0 || connect(b, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(a);
		if (b >= 0)
			close(b);
		return 0; /* not up (yet): the dialer retries */
	}
	memset(&pairs[i], 0, sizeof(pairs[i]));
	pairs[i].live = true;
	pairs[i].fd[0] = a;
	pairs[i].fd[1] = b;
	for (int s = 0; s < 2; s++) {
		struct epoll_event e = { .events = EPOLLIN, .data.u64 = (uint64_t)i * 2 + (uint64_t)s };

		setsockopt(pairs[i].fd[s], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		fcntl(pairs[i].fd[s], F_SETFL, O_NONBLOCK);
		epoll_ctl(ep, EPOLL_CTL_ADD, pairs[i].fd[s], &e);
	}
	return 0;
}

/* The proxies' process: one epoll loop for all three. */
static int proxy_main(void *arg)
{
	struct soak *s = arg;
	struct shared *sh = s->sh;
	struct pair *pairs = calloc(PAIRS, sizeof(*pairs));
	int ep = epoll_create1(EPOLL_CLOEXEC);
	uint64_t rng = seed_rng(), next_cut = now_ms() + 1000;

	if (!pairs || ep < 0)
		return 90;
	for (int i = 0; i < NODES; i++) {
		struct epoll_event e = { .events = EPOLLIN, .data.u64 = 1000000 + (uint64_t)i };

		if (epoll_ctl(ep, EPOLL_CTL_ADD, s->proxy_lfd[i], &e) < 0)
			return 91;
	}
	for (;;) {
		struct epoll_event evs[32];
		int n = epoll_wait(ep, evs, 32, 50);

		for (int k = 0; k < n; k++) {
			uint64_t u = evs[k].data.u64;
			struct pair *pr;
			int idx, side, err = 0;

			if (u >= 1000000) {
				proxy_accept(sh, ep, pairs, s->proxy_lfd[u - 1000000], (int)(u - 1000000));
				continue;
			}
			idx = (int)(u / 2);
			side = (int)(u % 2);
			pr = &pairs[idx];
			if (!pr->live)
				continue;
			if (evs[k].events & EPOLLOUT)
				err = pdir_flush(pr, 1 - side);
			if (!err && (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
				err = pdir_read(pr, side);
			if (err)
				pair_close(pr);
			else
				pair_interest(ep, pr, idx);
		}
		/* A disconnect: both sides of one connection, at random. */
		if (sh->phase == PH_RUN && now_ms() >= next_cut) {
			int live[PAIRS], nl = 0;

			for (int i = 0; i < PAIRS; i++)
				if (pairs[i].live)
					live[nl++] = i;
			if (nl) {
				pair_close(&pairs[live[rnd(&rng, nl)]]);
				add(&sh->cuts, 1);
			}
			next_cut = now_ms() + 300 + (uint64_t)rnd(&rng, 1700);
		}
	}
	return 0;
}

/* ---- workers -------------------------------------------------------------- */

static void meta_of(char *buf, size_t cap, const char *name, pid_t pid, unsigned v)
{
	snprintf(buf, cap, "%.31s@%d#%u", name, (int)pid, v);
}

/* Every record any worker writes has a name of this workload and
 * metadata "NAME@PID#N" of its own name and owner. */
static int well_formed(const struct procreg_entry *e, const char *want_name, bool member)
{
	char prefix[PROCREG_NAME_MAX + 32];
	size_t nl = strnlen(e->name, sizeof(e->name)), pl;
	int a, b, end = 0;

	if (nl == 0 || nl >= 32 || (want_name && strcmp(e->name, want_name)))
		return 0;
	if (member) {
		if (sscanf(e->name, "soak-g%d%n", &a, &end) != 1 || (size_t)end != nl || a < 0 ||
		    a >= GROUPS)
			return 0;
	} else if (!((sscanf(e->name, "soak-n%d%n", &a, &end) == 1 && (size_t)end == nl && a >= 0 &&
		      a < POOL) ||
		     (sscanf(e->name, "soak-w%d-%d%n", &a, &b, &end) == 2 && (size_t)end == nl &&
		      b >= 0 && b < OWN) ||
		     (sscanf(e->name, "soak-d%d-%d%n", &a, &b, &end) == 2 && (size_t)end == nl &&
		      b >= 0 && b < DEATH_OPS))) {
		return 0;
	}
	if (e->pid <= 1 || e->uid != getuid() || e->flags != 0 || e->node > 16 ||
	    e->meta_len >= 48)
		return 0;
	pl = (size_t)snprintf(prefix, sizeof(prefix), "%s@%d#", e->name, (int)e->pid);
	if (e->meta_len <= pl || memcmp(e->meta, prefix, pl))
		return 0;
	for (size_t i = pl; i < e->meta_len; i++)
		if (((const char *)e->meta)[i] < '0' || ((const char *)e->meta)[i] > '9')
			return 0;
	return 1;
}

static void report(struct shared *sh, const struct procreg_entry *e, const char *what)
{
	bad(sh, "%s: malformed record: name '%.40s' pid %d node %u uid %u flags %u meta '%.*s'",
	    what, e->name, (int)e->pid, e->node, e->uid, e->flags, (int)(e->meta_len < 60 ? e->meta_len : 60),
	    (const char *)e->meta);
}

struct read_ctx {
	struct shared *sh;
	const char *group;
};

static int check_name_cb(const struct procreg_entry *e, void *arg)
{
	struct read_ctx *c = arg;

	add(&c->sh->checked, 1);
	if (!well_formed(e, NULL, false))
		report(c->sh, e, "foreach");
	return 0;
}

static int check_member_cb(const struct procreg_entry *e, void *arg)
{
	struct read_ctx *c = arg;

	add(&c->sh->checked, 1);
	if (!well_formed(e, c->group, true))
		report(c->sh, e, "members");
	return 0;
}

static int check_group_cb(const struct procreg_group *g, void *arg)
{
	struct read_ctx *c = arg;
	int k, end = 0;

	add(&c->sh->checked, 1);
	if (sscanf(g->name, "soak-g%d%n", &k, &end) != 1 || (size_t)end != strlen(g->name) ||
	    k < 0 || k >= GROUPS || g->local_members > g->members)
		bad(c->sh, "groups: malformed group '%.40s' (%llu members, %llu local)", g->name,
		    (unsigned long long)g->members, (unsigned long long)g->local_members);
	return 0;
}

static int reader_main(void *arg)
{
	struct soak *s = arg;
	struct shared *sh = s->sh;
	procreg_t *r[NODES];
	uint64_t rng = seed_rng();
	struct read_ctx c = { sh, NULL };

	for (int i = 0; i < NODES; i++)
		if (!(r[i] = th_open(s->n[i].dir)))
			return 20;
	while (sh->phase == PH_RUN) {
		procreg_t *reg = r[rnd(&rng, NODES)];
		char name[32];
		TH_ENTRY(e);
		int err;

		if (procreg_foreach(reg, check_name_cb, &c) != 0)
			bad(sh, "foreach failed");
		for (int i = 0; i < 16; i++) {
			snprintf(name, sizeof(name), "soak-n%02d", rnd(&rng, POOL));
			err = procreg_lookup(reg, name, &e);
			add(&sh->checked, 1);
			if (err == 0 && !well_formed(&e, name, false))
				report(sh, &e, "lookup");
			else if (err && err != -ENOENT)
				bad(sh, "lookup %s: %s", name, procreg_strerror(err));
		}
		for (int g = 0; g < GROUPS; g++) {
			char group[32];

			snprintf(group, sizeof(group), "soak-g%d", g);
			c.group = group;
			if (procreg_members(reg, group, check_member_cb, &c) != 0)
				bad(sh, "members %s failed", group);
		}
		c.group = NULL;
		if (procreg_groups(reg, check_group_cb, &c) != 0)
			bad(sh, "groups failed");
		add(&sh->reads, 1);
		usleep_rnd(&rng, 3000);
	}
	for (int i = 0; i < NODES; i++)
		procreg_close(r[i]);
	return 0;
}

static bool expected(int op, int err)
{
	switch (op) {
	case PROCREG_OP_REGISTER:
		return err == 0 || err == -EEXIST;
	case PROCREG_OP_UNREGISTER:
		return err == 0 || err == -ENOENT || err == -EPERM;
	case PROCREG_OP_JOIN:
		return err == 0;
	case PROCREG_OP_LEAVE:
		return err == 0 || err == -ENOENT;
	}
	return false;
}

static const char *op_name(int op)
{
	static const char *const n[] = { "?", "register", "unregister", "join", "leave" };

	return op >= 1 && op <= 4 ? n[op] : "?";
}

struct writer_arg {
	struct soak *s;
	int node;
};

/* One random operation's name and kind. */
static int pick(uint64_t *rng, char *name, size_t cap)
{
	int x = rnd(rng, 100);

	if (x < 35) {
		snprintf(name, cap, "soak-n%02d", rnd(rng, POOL));
		return PROCREG_OP_REGISTER;
	}
	if (x < 52) {
		snprintf(name, cap, "soak-n%02d", rnd(rng, POOL));
		return PROCREG_OP_UNREGISTER;
	}
	if (x < 64) {
		snprintf(name, cap, "soak-w%d-%d", (int)getpid(), rnd(rng, OWN));
		return PROCREG_OP_REGISTER;
	}
	if (x < 72) {
		snprintf(name, cap, "soak-w%d-%d", (int)getpid(), rnd(rng, OWN));
		return PROCREG_OP_UNREGISTER;
	}
	snprintf(name, cap, "soak-g%d", rnd(rng, GROUPS));
	return x < 87 ? PROCREG_OP_JOIN : PROCREG_OP_LEAVE;
}

static int writer_main(void *arg)
{
	struct writer_arg *w = arg;
	struct shared *sh = w->s->sh;
	procreg_t *r = th_open(w->s->n[w->node].dir);
	uint64_t rng = seed_rng();
	unsigned v = 0;

	if (!r)
		return 30;
	while (sh->phase == PH_RUN) {
		char names[8][32], metas[8][64];
		struct procreg_op ops[8];
		int n = rnd(&rng, 10) == 0 ? 8 : 1, err = 0;

		for (int i = 0; i < n; i++) {
			ops[i] = (struct procreg_op){ .sz = sizeof(ops[i]) };
			ops[i].kind = pick(&rng, names[i], sizeof(names[i]));
			ops[i].name = names[i];
			meta_of(metas[i], sizeof(metas[i]), names[i], getpid(), v++);
			ops[i].meta = metas[i];
			ops[i].meta_len = strlen(metas[i]);
			ops[i].result = 0;
		}
		if (n > 1) {
			err = procreg_batch(r, ops, (size_t)n);
		} else {
			switch (ops[0].kind) {
			case PROCREG_OP_REGISTER:
				if (rnd(&rng, 8) == 0 && !strncmp(names[0], "soak-n", 6)) {
					/* In line for it if taken, here or on
					 * another node. */
					PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_QUEUE);

					ops[0].result = procreg_register_opts(r, names[0], metas[0],
									      ops[0].meta_len, &o);
					if (ops[0].result == -EINPROGRESS)
						ops[0].result = 0;
				} else {
					ops[0].result = procreg_register(r, names[0], metas[0],
									 ops[0].meta_len);
				}
				break;
			case PROCREG_OP_UNREGISTER:
				ops[0].result = procreg_unregister(r, names[0]);
				break;
			case PROCREG_OP_JOIN:
				ops[0].result = procreg_join(r, names[0], metas[0], ops[0].meta_len);
				break;
			default:
				ops[0].result = procreg_leave(r, names[0]);
			}
		}
		if (err)
			bad(sh, "writer %d: batch: %s", (int)getpid(), procreg_strerror(err));
		for (int i = 0; i < n; i++)
			if (!expected(ops[i].kind, ops[i].result))
				bad(sh, "writer %d: %s %s: %s", (int)getpid(), op_name(ops[i].kind),
				    names[i], procreg_strerror(ops[i].result));
		add(&sh->ops, (uint64_t)n);
		/* Paced: the machine running the suite is shared. */
		usleep_rnd(&rng, 6000);
	}
	/* Holding what we have until told to go: the replicas are compared
	 * meanwhile. */
	add(&sh->idle, 1);
	while (sh->phase != PH_EXIT)
		th_msleep(10);
	procreg_close(r);
	return 0;
}

/* A short-lived process: registers and joins, reporting each step, and
 * waits to be killed. */
static void mortal(struct soak *s, int node, int report_fd, uint64_t rng)
{
	procreg_t *r = th_open(s->n[node].dir);
	int nops = 1 + rnd(&rng, DEATH_OPS);
	char name[32], meta[64];

	if (!r)
		_exit(50);
	for (int i = 0; i < nops; i++) {
		int k = rnd(&rng, 3), err;

		if (k == 0) {
			snprintf(name, sizeof(name), "soak-g%d", rnd(&rng, GROUPS));
			meta_of(meta, sizeof(meta), name, getpid(), 0);
			err = procreg_join(r, name, meta, strlen(meta));
		} else {
			if (k == 1)
				snprintf(name, sizeof(name), "soak-d%d-%d", (int)getpid(), i);
			else
				snprintf(name, sizeof(name), "soak-n%02d", rnd(&rng, POOL));
			meta_of(meta, sizeof(meta), name, getpid(), 0);
			err = procreg_register(r, name, meta, strlen(meta));
		}
		if (err && err != -EEXIST)
			bad(s->sh, "short-lived %d: %s: %s", (int)getpid(), name, procreg_strerror(err));
		if (write(report_fd, "x", 1) != 1)
			_exit(51);
	}
	close(report_fd); /* no more steps: the spawner need not wait for one */
	for (;;)
		pause();
}

static int spawner_main(void *arg)
{
	struct soak *s = arg;
	struct shared *sh = s->sh;
	uint64_t rng = seed_rng();

	while (sh->phase == PH_RUN) {
		int p[2], node = rnd(&rng, NODES);
		uint64_t child_rng = th_xorshift(&rng);
		pid_t kid;

		if (pipe2(p, O_CLOEXEC) < 0)
			return 60;
		kid = fork();
		if (kid < 0)
			return 61;
		if (kid == 0) {
			close(p[0]);
			mortal(s, node, p[1], child_rng);
		}
		close(p[1]);
		if (rnd(&rng, 2)) {
			/* After some of its steps... */
			int want = 1 + rnd(&rng, 3);
			char buf[8];

			for (int got = 0; got < want;) {
				struct pollfd pfd = { p[0], POLLIN, 0 };
				ssize_t n;

				if (poll(&pfd, 1, 10000) <= 0)
					break;
				n = read(p[0], buf, sizeof(buf));
				if (n <= 0)
					break;
				got += (int)n;
			}
		} else {
			/* ...or anywhere, a request perhaps half-handled. */
			usleep_rnd(&rng, 3000);
		}
		kill(kid, SIGKILL);
		if (th_wait(kid) != 128 + SIGKILL)
			bad(sh, "short-lived %d: exited on its own", (int)kid);
		close(p[0]);
		add(&sh->deaths, 1);
		usleep_rnd(&rng, 20000);
	}
	return 0;
}

/* ---- the cluster ------------------------------------------------------- */

static int start_node(struct soak *s, int i)
{
	struct th_node *n = &s->n[i];
	char peers[NODES][32], advertise[32];
	const char *args[32];
	int err, k = 0;

	snprintf(advertise, sizeof(advertise), "127.0.0.1:%d", s->sh->proxy_port[i]);
	args[k++] = "--node";
	args[k++] = n->name;
	args[k++] = "--cookie-file";
	args[k++] = s->cookie;
	args[k++] = "--advertise";
	args[k++] = advertise;
	for (int j = 0; j < NODES; j++) {
		if (j == i)
			continue;
		snprintf(peers[j], sizeof(peers[j]), "127.0.0.1:%d", s->sh->proxy_port[j]);
		args[k++] = "--peer";
		args[k++] = peers[j];
	}
	args[k] = NULL;
	/* The proxy forwards to the port it finds in real_port: there before
	 * the daemon starts. */
	err = th_daemon_start_listen(&n->d, n->dir, n->listen, &s->sh->real_port[i], args, NULL);
	if (err)
		return err;
	n->reg = th_open(n->dir);
	return n->reg ? 0 : -1;
}

/* Node ids of a table to names (procreg_bridge); the count of nodes up. */
struct idmap {
	int n;
	unsigned id[8];
	char name[8][64];
};

static int idmap_add(const struct procreg_node *n, void *arg)
{
	struct idmap *m = arg;

	if (m->n < 8) {
		m->id[m->n] = n->id;
		snprintf(m->name[m->n], sizeof(m->name[m->n]), "%s", n->name);
		m->n++;
	}
	return 0;
}

static int read_nodes(const struct th_node *nd, struct idmap *m)
{
	m->n = 0;
	if (procreg_bridge(nd->reg, NULL, idmap_add, m) != 0)
		m->n = 0;
	return m->n;
}

static const char *id_name(const struct idmap *m, const struct th_node *self, uint32_t id)
{
	if (id == 0)
		return self->name;
	for (int i = 0; i < m->n; i++)
		if (m->id[i] == id)
			return m->name[i];
	return "?";
}

/* Every entry of one table as "KIND NAME PID OWNER-NODE", sorted. */
struct view {
	int n, cap;
	char (*v)[128];
	const struct idmap *ids;
	const struct th_node *self;
	const char *group;
};

static int view_add(const struct procreg_entry *e, void *arg)
{
	struct view *w = arg;

	if (w->n == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 256;
		w->v = realloc(w->v, (size_t)w->cap * sizeof(*w->v));
		assert_non_null(w->v);
	}
	snprintf(w->v[w->n++], sizeof(*w->v), "%c %.40s %d %.60s", w->group ? 'M' : 'N', e->name,
		 (int)e->pid, id_name(w->ids, w->self, e->node));
	return 0;
}

static int view_group(const struct procreg_group *g, void *arg)
{
	struct view *w = arg;

	w->group = g->name;
	procreg_members(w->self->reg, g->name, view_add, w);
	w->group = NULL;
	return 0;
}

static int cmp_line(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void view_take(struct view *w, const struct th_node *nd, const struct idmap *ids)
{
	memset(w, 0, sizeof(*w));
	w->ids = ids;
	w->self = nd;
	procreg_foreach(nd->reg, view_add, w);
	procreg_groups(nd->reg, view_group, w);
	qsort(w->v, (size_t)w->n, sizeof(*w->v), cmp_line);
}

/* The node a writer pid works on; -1: not a writer (so: dead). */
static int writer_node(const struct soak *s, int pid)
{
	for (int i = 0; i < WRITERS; i++)
		if (s->writer[i] == pid)
			return i / WRITERS_PER_NODE;
	return -1;
}

/* Whether the replicas agree, with every entry a live writer's, on the
 * node that writer works on. WHY says what is still wrong. */
static int replicas_agree(struct soak *s, char *why, size_t cap, int *entries)
{
	struct idmap ids[NODES];
	struct view v[NODES];
	int ok = 1;

	for (int i = 0; i < NODES; i++) {
		if (procreg_sync(s->n[i].reg) != 0) {
			snprintf(why, cap, "%s: sync failed", s->n[i].name);
			return 0;
		}
		if (read_nodes(&s->n[i], &ids[i]) != NODES - 1) {
			snprintf(why, cap, "%s: %d nodes up", s->n[i].name, ids[i].n);
			return 0;
		}
	}
	for (int i = 0; i < NODES; i++)
		view_take(&v[i], &s->n[i], &ids[i]);
	for (int i = 0; i < NODES && ok; i++) {
		for (int k = 0; k < v[i].n && ok; k++) {
			char kind, name[64], owner[64];
			int pid, wn;

			if (sscanf(v[i].v[k], "%c %63s %d %63s", &kind, name, &pid, owner) != 4) {
				snprintf(why, cap, "%s: unreadable '%s'", s->n[i].name, v[i].v[k]);
				ok = 0;
			} else if ((wn = writer_node(s, pid)) < 0) {
				snprintf(why, cap, "%s: '%s': an entry of a dead process", s->n[i].name,
					 v[i].v[k]);
				ok = 0;
			} else if (strcmp(owner, s->n[wn].name)) {
				snprintf(why, cap, "%s: '%s': owner works on %s", s->n[i].name, v[i].v[k],
					 s->n[wn].name);
				ok = 0;
			}
		}
		/* Sorted both: the first line where they part says what one
		 * has and the other lacks. */
		for (int k = 0, j = 0; ok && i > 0 && (k < v[i].n || j < v[0].n); k++, j++) {
			int c = k == v[i].n ? 1 : j == v[0].n ? -1 : strcmp(v[i].v[k], v[0].v[j]);

			if (c) {
				snprintf(why, cap, "%s has '%s', %s has not (%d and %d entries)",
					 c < 0 ? s->n[i].name : s->n[0].name,
					 c < 0 ? v[i].v[k] : v[0].v[j], c < 0 ? s->n[0].name : s->n[i].name,
					 v[i].n, v[0].n);
				ok = 0;
			}
		}
	}
	*entries = v[0].n;
	for (int i = 0; i < NODES; i++)
		free(v[i].v);
	return ok;
}

static int tables_empty(struct soak *s)
{
	for (int i = 0; i < NODES; i++) {
		PROCREG_OPTS(procreg_stats, st);

		if (procreg_sync(s->n[i].reg) != 0 || procreg_stats(s->n[i].reg, &st) != 0 ||
		    st.names || st.memberships || st.groups)
			return 0;
	}
	return 1;
}

static void dump_logs(struct soak *s)
{
	for (int i = 0; i < NODES; i++)
		th_daemon_dump_log(&s->n[i].d);
}

static void check_daemons(struct soak *s)
{
	for (int i = 0; i < NODES; i++) {
		PROCREG_OPTS(procreg_stats, st);

		int status;
		pid_t pid = s->n[i].d.pid;

		if (waitpid(pid, &status, WNOHANG) == pid) {
			s->n[i].d.pid = 0;
			dump_logs(s);
			fail_msg("%s: daemon %d exited (status 0x%x)", s->n[i].name, (int)pid, status);
		}
		assert_int_equal(procreg_stats(s->n[i].reg, &st), 0);
		assert_int_equal(st.daemon_pid, pid);
	}
}

static void check_bad(struct soak *s)
{
	if (get(&s->sh->bad)) {
		dump_logs(s);
		fail_msg("%llu errors; the first: %s", (unsigned long long)get(&s->sh->bad),
			 s->sh->bad_msg);
	}
}

static void expect_exit(pid_t pid, const char *what)
{
	int st = th_wait(pid);

	if (st != 0)
		fail_msg("%s %d: exit status %d", what, (int)pid, st);
}

/* One round of the workload for SECONDS, then quiesce: workers stop,
 * writers hold what they have while the replicas are compared, then
 * exit, and every table must empty. */
static void run_round(struct soak *s, int seconds, const char *label)
{
	struct shared *sh = s->sh;
	struct writer_arg wa[WRITERS];
	uint64_t t0 = now_ms(), last = t0;
	char why[512] = "";
	int entries = 0, ok = 0;

	sh->idle = 0;
	sh->phase = PH_RUN;
	for (int i = 0; i < WRITERS; i++) {
		wa[i] = (struct writer_arg){ s, i / WRITERS_PER_NODE };
		s->writer[i] = th_fork(writer_main, &wa[i]);
	}
	for (int i = 0; i < READERS; i++)
		s->reader[i] = th_fork(reader_main, s);
	s->spawner = th_fork(spawner_main, s);

	while (now_ms() - t0 < (uint64_t)seconds * 1000) {
		th_msleep(200);
		check_daemons(s);
		check_bad(s);
		if (now_ms() - last >= 10000) {
			last = now_ms();
			printf("soak %s: %llus: %llu writes, %llu read passes, %llu records checked, "
			       "%llu deaths, %llu disconnects\n", label,
			       (unsigned long long)(last - t0) / 1000, (unsigned long long)get(&sh->ops),
			       (unsigned long long)get(&sh->reads), (unsigned long long)get(&sh->checked),
			       (unsigned long long)get(&sh->deaths), (unsigned long long)get(&sh->cuts));
			fflush(stdout);
		}
	}

	sh->phase = PH_HOLD;
	/* Reaped pids are forgotten: teardown must not kill their reuse. */
	for (int i = 0; i < READERS; i++) {
		expect_exit(s->reader[i], "reader");
		s->reader[i] = 0;
	}
	expect_exit(s->spawner, "spawner");
	s->spawner = 0;
	for (int i = 0; i < 60000 && get(&sh->idle) < WRITERS; i++)
		th_msleep(1);
	assert_int_equal(get(&sh->idle), WRITERS);
	check_bad(s);

	for (uint64_t t = now_ms(); now_ms() - t < SETTLE_MS;) {
		if ((ok = replicas_agree(s, why, sizeof(why), &entries)))
			break;
		th_msleep(100);
	}
	if (!ok) {
		dump_logs(s);
		fail_msg("soak %s: the replicas do not agree: %s", label, why);
	}
	printf("soak %s: the replicas agree: %d entries each, every one a live writer's on its node\n",
	       label, entries);

	sh->phase = PH_EXIT;
	for (int i = 0; i < WRITERS; i++) {
		expect_exit(s->writer[i], "writer");
		s->writer[i] = 0;
	}
	for (uint64_t t = now_ms(); !tables_empty(s);) {
		if (now_ms() - t > SETTLE_MS) {
			dump_logs(s);
			fail_msg("soak %s: entries left after every writer exited", label);
		}
		th_msleep(100);
	}
	check_daemons(s);
	check_bad(s);
}

/* ---- measurements ------------------------------------------------------ */

static void take_sample(struct soak *s, int i, struct sample *m)
{
	PROCREG_OPTS(procreg_stats, st);
	struct stat sb;
	int fd;

	m->rss_kb = th_status_kb(s->n[i].d.pid, "VmRSS");
	m->anon_kb = th_status_kb(s->n[i].d.pid, "RssAnon");
	m->fds = th_count_fds(s->n[i].d.pid);
	m->fd_list = th_fds_text(s->n[i].d.pid);
	fd = open(procreg_table_path(s->n[i].reg), O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sb), 0);
	m->file_bytes = (uint64_t)sb.st_blocks * 512;
	close(fd);
	assert_int_equal(procreg_stats(s->n[i].reg, &st), 0);
	m->arena_top = st.arena_top;
	m->feed_head = procreg_feed_head(s->n[i].reg);
}

struct fdwait {
	struct soak *s;
	const long *want;
	bool or_fewer;             /* a count below WANT will do */
};

static int fds_settled(void *arg)
{
	struct fdwait *w = arg;
	struct idmap ids;

	for (int i = 0; i < NODES; i++) {
		long n;

		if (read_nodes(&w->s->n[i], &ids) != NODES - 1)
			return 0;
		n = th_count_fds(w->s->n[i].d.pid);
		if (w->or_fewer ? n > w->want[i] : n != w->want[i])
			return 0;
	}
	return 1;
}

/* The warm-up's figures: once the mesh is whole and each daemon's fd
 * count has stayed put for two seconds (no handshake half done). */
static void baseline(struct soak *s, struct sample *b)
{
	long want[NODES];
	struct fdwait w = { s, want, false };
	int stable = 0;

	for (uint64_t t = now_ms(); stable < 20; th_msleep(100)) {
		for (int i = 0; i < NODES; i++)
			want[i] = th_count_fds(s->n[i].d.pid);
		stable = fds_settled(&w) ? stable + 1 : 0;
		if (now_ms() - t > SETTLE_MS)
			fail_msg("soak: the daemons' fds never settled after the warm-up");
	}
	for (int i = 0; i < NODES; i++)
		take_sample(s, i, &b[i]);
}

static void print_sample(const char *when, const struct th_node *n, const struct sample *m)
{
	printf("soak %-5s %s: VmRSS %ld kB (RssAnon %ld kB), table file %llu bytes allocated, "
	       "arena top %llu, fds %ld, feed head %llu\n",
	       when, n->name, m->rss_kb, m->anon_kb, (unsigned long long)m->file_bytes,
	       (unsigned long long)m->arena_top, m->fds, (unsigned long long)m->feed_head);
}

/*
 * The bounds, per daemon, end against warm-up:
 *  - fds: no more than after the warm-up. Quiesced, a daemon holds its
 *    fixed set (table, sockets, epoll, timers), one connection per other
 *    node and one for the test's handle; no pidfd of a process holding a
 *    name (none does) and no other client. After the warm-up it may still
 *    hold one fd more for a while, which is gone by the end (a run had 23
 *    then, 22 at the end): fewer at the end is no leak, and a leak, one
 *    a write or a connection, makes many more.
 *  - arena high-water mark: at most 2 x LIVE_MAX x RECORD_MAX, plus two
 *    smallest index blocks per index (the name and group indexes and one
 *    per group). The allocator reuses freed blocks of the same size; at
 *    worst the main round needs a fresh home for every live entry and one
 *    retired copy of each awaiting its grace period. A leak grows with the
 *    operations instead, and there are many more of them than LIVE_MAX.
 *  - table file: the arena bound, rounded up to pages, plus the chunk the
 *    daemon allocates the file's pages ahead of the arena's top
 *    (PR_BACK_CHUNK). The change feed's ring is allocated with the table,
 *    before the warm-up.
 *  - VmRSS: the file bound (the daemon maps the table and writes it), plus
 *    what the mesh keeps per connection (MESH_KEEP, two connections), plus
 *    1 MiB for the allocator's slack.
 */
static void check_growth(struct soak *s, const struct sample *b, const struct sample *e)
{
	uint64_t arena_bound = 2 * LIVE_MAX * RECORD_MAX + (2 + GROUPS) * 2 * INDEX_BLOCK;

	for (int i = 0; i < NODES; i++) {
		uint64_t file_bound = ((arena_bound + 4095) & ~4095ull) + 4096 + PR_BACK_CHUNK;
		uint64_t rss_bound = file_bound + 2 * MESH_KEEP + (1u << 20);
		int64_t drss = (e[i].rss_kb - b[i].rss_kb) * 1024;

		printf("soak bounds %s: arena +%lld of %llu, file +%lld of %llu, VmRSS %+lld of %llu bytes\n",
		       s->n[i].name, (long long)(e[i].arena_top - b[i].arena_top),
		       (unsigned long long)arena_bound, (long long)(e[i].file_bytes - b[i].file_bytes),
		       (unsigned long long)file_bound, (long long)drss, (unsigned long long)rss_bound);
		if (e[i].fds > b[i].fds) {
			printf("%s's fds after the warm-up:\n%s%s's at the end:\n%s", s->n[i].name,
			       b[i].fd_list ? b[i].fd_list : "", s->n[i].name,
			       e[i].fd_list ? e[i].fd_list : "");
			fail_msg("%s: %ld fds at the end, %ld after the warm-up", s->n[i].name, e[i].fds,
				 b[i].fds);
		}
		if (e[i].fds < b[i].fds)
			printf("soak %s: %ld fds at the end, %ld after the warm-up; then they were:\n%s",
			       s->n[i].name, e[i].fds, b[i].fds, b[i].fd_list ? b[i].fd_list : "");
		assert_true(e[i].arena_top <= b[i].arena_top + arena_bound);
		assert_true(e[i].file_bytes <= b[i].file_bytes + file_bound);
		if (TH_SANITIZED)
			printf("soak: VmRSS " TH_RSS_UNBOUNDED "\n");
		else
			assert_true(drss <= (int64_t)rss_bound);
	}
}

/* ---- the test ----------------------------------------------------------- */

static int setup(void **state)
{
	struct soak *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	s->sh = mmap(NULL, sizeof(*s->sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(s->sh != MAP_FAILED);
	memset(s->sh, 0, sizeof(*s->sh));
	s->base = th_nodes_make(s->n, NODES, "soak", s->cookie, sizeof(s->cookie),
				"a-soak-cookie-0123456789");
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	struct soak *s = *state;
	int bad_stop = 0;

	/* After a failure, workers may still run: they go first. */
	for (int i = 0; i < WRITERS; i++)
		th_kill_wait(&s->writer[i]);
	for (int i = 0; i < READERS; i++)
		th_kill_wait(&s->reader[i]);
	th_kill_wait(&s->spawner);
	th_kill_wait(&s->proxy);
	bad_stop = th_nodes_stop(s->n, NODES);
	th_rmrf(s->base);
	free(s->base);
	munmap(s->sh, sizeof(*s->sh));
	free(s);
	return bad_stop;
}

static void test_soak(void **state)
{
	struct soak *s = *state;
	const char *env = getenv("PROCREG_SOAK_SECONDS");
	int seconds = env ? atoi(env) : 60, warm;
	struct sample b[NODES], e[NODES];
	long want[NODES];
	struct fdwait fw = { s, want, true };
	uint64_t ops_warm;

	if (seconds < 5)
		seconds = 5;
	warm = seconds / 6 < 5 ? 5 : seconds / 6;

	/* The proxies listen first: the nodes are told their ports. */
	for (int i = 0; i < NODES; i++) {
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(sa);

		s->proxy_lfd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(s->proxy_lfd[i] >= 0);
		assert_int_equal(bind(s->proxy_lfd[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
		assert_int_equal(listen(s->proxy_lfd[i], 64), 0);
		assert_int_equal(getsockname(s->proxy_lfd[i], (struct sockaddr *)&sa, &len), 0);
		s->sh->proxy_port[i] = ntohs(sa.sin_port);
		s->sh->real_port[i] = -1;
	}
	s->proxy = th_fork(proxy_main, s);
	for (int i = 0; i < NODES; i++)
		close(s->proxy_lfd[i]);
	for (int i = 0; i < NODES; i++)
		assert_int_equal(start_node(s, i), 0);

	printf("soak: %d s warm-up, then %d s (PROCREG_SOAK_SECONDS); %d writers, %d readers, "
	       "1 spawner of short-lived processes, 3 nodes behind disconnecting proxies\n",
	       warm, seconds, WRITERS, READERS);
	run_round(s, warm, "warm-up");
	ops_warm = get(&s->sh->ops);
	baseline(s, b);
	for (int i = 0; i < NODES; i++)
		print_sample("start", &s->n[i], &b[i]);

	s->sh->ops = s->sh->reads = s->sh->checked = s->sh->deaths = s->sh->cuts = 0;
	run_round(s, seconds, "run");

	/* Settled: the mesh whole and every fd count back, or lower (or the
	 * figures below say which is not). */
	for (int i = 0; i < NODES; i++)
		want[i] = b[i].fds;
	for (uint64_t t = now_ms(); !fds_settled(&fw) && now_ms() - t < SETTLE_MS;)
		th_msleep(100);
	for (int i = 0; i < NODES; i++) {
		take_sample(s, i, &e[i]);
		print_sample("end", &s->n[i], &e[i]);
	}
	printf("soak: %d s: %llu writes (%llu in the warm-up), %llu read passes, %llu records "
	       "checked, %llu deaths, %llu disconnects\n",
	       seconds, (unsigned long long)get(&s->sh->ops), (unsigned long long)ops_warm,
	       (unsigned long long)get(&s->sh->reads), (unsigned long long)get(&s->sh->checked),
	       (unsigned long long)get(&s->sh->deaths), (unsigned long long)get(&s->sh->cuts));
	fflush(stdout);
	check_growth(s, b, e);
	for (int i = 0; i < NODES; i++) {
		free(b[i].fd_list);
		free(e[i].fd_list);
	}
	/* Enough happened for the bounds to mean something: a leak per
	 * write would have outgrown them. */
	assert_true(get(&s->sh->ops) >= 20 * LIVE_MAX);
	assert_true(get(&s->sh->deaths) > 0);
	assert_true(get(&s->sh->cuts) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_soak, setup, teardown),
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
