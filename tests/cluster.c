/* SPDX-License-Identifier: BSD-2-Clause */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "internal.h"
#include "bridge_proto.h"

char *th_nodes_make(struct th_node *n, int count, const char *prefix, char *cookie, size_t cap,
		    const char *text)
{
	char *base = th_mkdtemp();
	char line[256];

	snprintf(cookie, cap, "%s/cookie", base);
	snprintf(line, sizeof(line), "%s\n", text);
	th_write_file(cookie, line, 0600);
	/* Daemons run as a system user (harness.h) reach their directories
	 * through BASE, and read the cookie as their own (0600, theirs). */
	if (th_daemon_user()) {
		assert_int_equal(chmod(base, 0755), 0);
		th_daemon_own(cookie);
	}
	for (int i = 0; i < count; i++) {
		snprintf(n[i].name, sizeof(n[i].name), "%s%c", prefix, 'a' + i);
		snprintf(n[i].dir, sizeof(n[i].dir), "%s/%s%c", base, prefix, 'a' + i);
		assert_int_equal(mkdir(n[i].dir, 0755), 0);
	}
	return base;
}

/* SIGTERM; SIGKILL if it has not exited within MS: its exit status, or -1
 * if it had to be killed. */
static int stop_within(struct th_daemon *d, int ms)
{
	int st = -1;

	kill(d->pid, SIGTERM);
	for (int waited = 0; waited < ms; waited += 10) {
		pid_t r = waitpid(d->pid, &st, WNOHANG);

		if (r == d->pid) {
			d->pid = 0;
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		}
		th_msleep(10);
	}
	fprintf(stderr, "%s: did not stop within %d ms: killed\n", d->dir, ms);
	th_daemon_kill(d);
	return -1;
}

int th_nodes_stop(struct th_node *n, int count)
{
	int bad = 0;

	for (int i = 0; i < count; i++) {
		if (n[i].reg)
			procreg_close(n[i].reg);
		n[i].reg = NULL;
		if (n[i].d.pid && n[i].may_hang && stop_within(&n[i].d, 10000) != 0) {
			th_daemon_dump_log(&n[i].d);
			bad = -1;
		}
		if (n[i].d.pid && th_daemon_stop(&n[i].d) != 0) {
			th_daemon_dump_log(&n[i].d);
			bad = -1;
		}
	}
	return bad;
}

int th_daemon_start_listen(struct th_daemon *d, const char *dir, char *listen,
			   volatile int *port_out, const char *const *args,
			   const char *const *env)
{
	const char *argv[64];
	int err = -1, k = 0;

	argv[k++] = "--listen";
	argv[k++] = listen;
	for (int i = 0; args && args[i] && k < 63; i++)
		argv[k++] = args[i];
	argv[k] = NULL;
	for (int attempt = 0; attempt < 5 && err; attempt++) {
		int port = th_free_port();

		if (port_out)
			*port_out = port;
		snprintf(listen, 32, "127.0.0.1:%d", port);
		err = th_daemon_start(d, dir, argv, env);
		if (err && !th_log_has(d->log, "cannot listen"))
			return err;
	}
	return err;
}

int th_node_start(struct th_node *n, const char *cookie, const char *const *args,
		  const char *const *env)
{
	const char *argv[64] = { "--node", n->name, "--cookie-file", cookie };
	int k = 4, err;

	for (int i = 0; args && args[i] && k < 63; i++)
		argv[k++] = args[i];
	argv[k] = NULL;
	err = th_daemon_start_listen(&n->d, n->dir, n->listen, NULL, argv, env);
	if (err)
		return err;
	n->reg = th_open(n->dir);
	return n->reg ? 0 : -1;
}

int th_bridged_fx_start(void **state, const char *node, const char *cookie)
{
	struct th_bridged_fx *f = calloc(1, sizeof(*f));
	char path[600], line[256];

	assert_non_null(f);
	f->dir = th_mkdtemp();
	assert_int_equal(chmod(f->dir, 0755), 0);
	snprintf(path, sizeof(path), "%s/cookie", f->dir);
	snprintf(line, sizeof(line), "%s\n", cookie);
	th_write_file(path, line, 0600);
	assert_int_equal(th_daemon_start_listen(&f->d, f->dir, f->listen, NULL,
						(const char *const[]){ "--node", node,
								       "--cookie-file", path, NULL },
						NULL), 0);
	f->reg = th_open(f->dir);
	assert_non_null(f->reg);
	*state = f;
	return 0;
}

int th_bridged_fx_stop(void **state)
{
	struct th_bridged_fx *f = *state;
	int st;

	procreg_close(f->reg);
	st = th_daemon_stop_dump(&f->d);
	th_rmrf(f->dir);
	free(f->dir);
	free(f);
	return st ? -1 : 0;
}

struct name_probe {
	procreg_t *reg;
	const char *name;
	pid_t pid;              /* expected owner; 0: expect absent */
	bool remote;            /* expect a remote entry */
};

static int probe_name(void *arg)
{
	struct name_probe *p = arg;
	TH_ENTRY(e);
	int r = procreg_lookup(p->reg, p->name, &e);

	if (!p->pid)
		return r == -ENOENT;
	return r == 0 && e.pid == p->pid && (!p->remote || e.node != 0);
}

bool th_name_within(procreg_t *reg, const char *name, pid_t pid, bool remote, int ms)
{
	struct name_probe p = { reg, name, pid, remote };

	return th_until(probe_name, &p, ms);
}

void th_expect_name(procreg_t *reg, const char *name, pid_t pid, bool remote, int ms)
{
	if (!th_name_within(reg, name, pid, remote, ms))
		fail_msg("'%s': expected %s", name, pid ? "visible" : "gone");
}

static int count_cb(const struct procreg_entry *e, void *arg)
{
	(void)e;
	(*(int *)arg)++;
	return 0;
}

struct group_probe {
	procreg_t *reg;
	const char *group;
	int want;
};

static int probe_group(void *arg)
{
	struct group_probe *g = arg;
	int n = 0;

	procreg_members(g->reg, g->group, count_cb, &n);
	return n == g->want;
}

void th_expect_members(procreg_t *reg, const char *group, int want, int ms)
{
	struct group_probe g = { reg, group, want };

	if (!th_until(probe_group, &g, ms))
		fail_msg("group '%s': expected %d members", group, want);
}

void th_expect_meta(procreg_t *reg, const char *name, const void *meta, size_t len, int ms)
{
	TH_ENTRY(e);

	for (int i = 0; i < ms / 5; i++) {
		if (procreg_lookup(reg, name, &e) == 0 && e.meta_len == len)
			break;
		th_msleep(5);
	}
	assert_int_equal(e.meta_len, len);
	assert_memory_equal(e.meta, meta, len);
}

void th_expect_names(procreg_t *reg, uint64_t want, int ms)
{
	PROCREG_OPTS(procreg_stats, st);

	for (int i = 0; i < ms / 5 && st.names != want; i++) {
		procreg_stats(reg, &st);
		if (st.names != want)
			th_msleep(5);
	}
	assert_int_equal(st.names, want);
}

void th_register_bulk(procreg_t *reg, const char *prefix, int count, const char *meta)
{
	struct procreg_op *ops = calloc((size_t)count, sizeof(*ops));
	char (*names)[64] = calloc((size_t)count, sizeof(*names));

	assert_non_null(ops);
	assert_non_null(names);
	for (int i = 0; i < count; i++) {
		snprintf(names[i], sizeof(names[i]), "%s%d", prefix, i);
		ops[i] = (struct procreg_op){ .sz = sizeof(struct procreg_op), .kind = PROCREG_OP_REGISTER, .name = names[i],
					      .meta = meta, .meta_len = strlen(meta) };
	}
	assert_int_equal(procreg_batch(reg, ops, (size_t)count), 0);
	for (int i = 0; i < count; i++)
		assert_int_equal(ops[i].result, 0);
	free(names);
	free(ops);
}

int th_feed_count(procreg_t *reg, uint64_t *cursor, int type, const char *name)
{
	PROCREG_OPTS(procreg_event, ev);
	int n = 0;

	th_feed_settle(reg);
	while (procreg_next_event(reg, cursor, &ev, 0) == 0)
		if (ev.type == type && !strcmp(ev.name, name))
			n++;
	return n;
}

struct log_probe {
	const char *path, *needle;
};

static int probe_log(void *arg)
{
	struct log_probe *l = arg;

	return th_log_has(l->path, l->needle);
}

void th_expect_log(const char *path, const char *needle, int ms)
{
	struct log_probe lp = { path, needle };

	if (!th_until(probe_log, &lp, ms)) {
		th_dump_log(path); /* what the daemon said instead */
		fail_msg("%s: no '%s' (the log is above)", path, needle);
	}
}

pid_t th_spawn_holding(const char *dir, int (*hold)(procreg_t *r, void *arg), void *arg,
		       char *st)
{
	int ready[2];
	pid_t pid;

	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		procreg_t *r = th_open(dir);
		int c;
		char b;

		close(ready[0]);
		if (!r)
			_exit(10);
		c = hold(r, arg);
		if (c < 0)
			_exit(-c);
		b = (char)c;
		if (write(ready[1], &b, 1) != 1)
			_exit(12);
		for (;;)
			pause();
	}
	close(ready[1]);
	if (read(ready[0], st, 1) != 1)
		*st = 0;
	close(ready[0]);
	return pid;
}

struct holder {
	const char *name, *meta;
};

static int hold_name(procreg_t *r, void *arg)
{
	struct holder *h = arg;

	return procreg_register(r, h->name, h->meta, strlen(h->meta)) == 0 ? 'x' : -10;
}

pid_t th_spawn_holder(const char *dir, const char *name, const char *meta)
{
	struct holder h = { name, meta };
	char st;
	pid_t pid = th_spawn_holding(dir, hold_name, &h, &st);

	assert_int_equal(st, 'x');
	return pid;
}

int th_probe_cli(void *arg)
{
	struct th_cliprobe *p = arg;

	if (th_cli(p->dir, p->out, sizeof(p->out), p->args) != 0)
		return 0;
	for (int i = 0; i < 4 && p->needles[i]; i++)
		if (!strstr(p->out, p->needles[i]))
			return 0;
	return 1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void th_propagation_figures(procreg_t *a, procreg_t *b, procreg_t *c, const char *label)
{
	uint64_t lat[200], t0, t_reg, t_b = 0, t_c = 0;
	TH_ENTRY(e);
	char name[64];

	for (int i = 0; i < 200; i++) {
		snprintf(name, sizeof(name), "lat%d", i);
		t0 = procreg__mono_ns();
		assert_int_equal(procreg_register(a, name, NULL, 0), 0);
		/* A bound, not a figure: a name that never arrives fails. */
		while (procreg_lookup(b, name, &e) != 0)
			assert_true(procreg__mono_ns() - t0 < 10000000000ull);
		lat[i] = procreg__mono_ns() - t0;
	}
	qsort(lat, 200, sizeof(lat[0]), cmp_u64);
	t0 = procreg__mono_ns();
	for (int i = 0; i < 2000; i++) {
		snprintf(name, sizeof(name), "bulk%d", i);
		assert_int_equal(procreg_register(a, name, "m", 1), 0);
	}
	t_reg = procreg__mono_ns() - t0;
	while (!t_b || !t_c) {
		if (!t_b && procreg_lookup(b, "bulk1999", &e) == 0)
			t_b = procreg__mono_ns() - t0;
		if (!t_c && procreg_lookup(c, "bulk1999", &e) == 0)
			t_c = procreg__mono_ns() - t0;
		assert_true(procreg__mono_ns() - t0 < 30000000000ull);
	}
	printf("%spropagation a->b, one name (register on a returns .. lookup on b finds it): "
	       "median %.0f us, p90 %.0f us, max %.0f us (200 names)\n",
	       label, lat[100] / 1e3, lat[180] / 1e3, lat[199] / 1e3);
	printf("%s2000 names registered on a in %.1f ms; all on b after %.1f ms, on c after %.1f ms\n",
	       label, t_reg / 1e6, t_b / 1e6, t_c / 1e6);
}

char *th_fds_text(pid_t pid)
{
	char path[64], link[600], target[512], *text = NULL;
	size_t size = 0;
	struct dirent *e;
	FILE *f = open_memstream(&text, &size);
	DIR *d;

	if (!f)
		return NULL;
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	while (d && (e = readdir(d))) {
		ssize_t n;

		if (e->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
		n = readlink(link, target, sizeof(target) - 1);
		target[n > 0 ? n : 0] = 0;
		fprintf(f, "  fd %s -> %s\n", e->d_name, target);
	}
	if (d)
		closedir(d);
	fclose(f);
	return text;
}

void th_list_fds(pid_t pid)
{
	char *text = th_fds_text(pid);

	if (text)
		fputs(text, stdout);
	free(text);
}

int th_fds_back(void *count)
{
	const struct th_fdcount *c = count;

	return th_count_fds(c->pid) <= c->want;
}

long th_count_fds(pid_t pid)
{
	char path[64];
	struct dirent *e;
	long n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

size_t th_fake_change_from(uint8_t *buf, size_t cap, uint64_t inc, uint64_t seq,
			   const char *origin, const char *name)
{
	size_t pos = 0;
	struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 99,
				 .registered_ns = procreg__now_ns(), .name = name,
				 .name_len = strlen(name) };

	assert_int_equal(procreg__bp_put_change(buf, cap, &pos, inc, seq, origin, &e), 0);
	return pos;
}

size_t th_fake_change(uint8_t *buf, size_t cap, uint64_t inc, uint64_t seq, const char *name)
{
	return th_fake_change_from(buf, cap, inc, seq, "fake", name);
}

size_t th_fake_snap(uint8_t *buf, size_t cap, uint64_t inc, uint32_t part, uint64_t stamp,
		    const char *const *names, bool last)
{
	size_t pos = 0, start;

	assert_int_equal(procreg__bp_begin(buf, cap, &pos, PR_BP_SNAP, inc, 0, part, &start), 0);
	for (int i = 0; names[i]; i++) {
		struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 99,
					 .registered_ns = stamp, .name = names[i],
					 .name_len = strlen(names[i]) };

		assert_int_equal(procreg__bp_add_entry(buf, cap, &pos, start, &e), 0);
	}
	procreg__bp_end(buf, pos, start, last ? PR_BP_SNAP_LAST : 0);
	return pos;
}

int th_dial(const char *listen)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_port = htons((uint16_t)atoi(strchr(listen, ':') + 1));
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* More bytes from the daemon: 0, or -ECONNRESET at its end. */
static int peer_fill(struct th_peer *p)
{
	ssize_t n;

	assert_true(p->in_len < sizeof(p->in));
	n = read(p->fd, p->in + p->in_len, sizeof(p->in) - p->in_len);
	if (n <= 0)
		return -ECONNRESET;
	p->in_len += (size_t)n;
	return 0;
}

static void peer_consume(struct th_peer *p, size_t n)
{
	memmove(p->in, p->in + n, p->in_len - n);
	p->in_len -= n;
}

/* The handshake from where it stands until it is over (0, or its error
 * as th_peer_connect()), or, HOLD, until our AUTH is made: that is kept
 * in P->held, not sent, and 0 returned. */
static int peer_handshake(struct th_peer *p, bool hold)
{
	uint8_t out[sizeof(p->held)];
	size_t pos;
	int r;

	for (;;) {
		struct pr_bp_frame f;
		size_t fp = 0;

		r = procreg__bp_next(p->in, p->in_len, &fp, &f);
		assert_true(r >= 0);
		if (r == 0) {
			if (peer_fill(p) < 0)
				return -ECONNRESET;
			continue;
		}
		memcpy(p->frame, p->in, fp);
		if (f.type == PR_BP_REFUSE) {
			peer_consume(p, fp);
			continue; /* the connection's end follows */
		}
		pos = 0;
		r = procreg__bs_handshake(p->bs, p->in, &f, out, sizeof(out), &pos);
		peer_consume(p, fp);
		if (pos && hold && r == PR_BS_MORE) {
			memcpy(p->held, out, pos);
			p->held_len = pos;
			return 0;
		}
		if (pos)
			assert_int_equal(write(p->fd, out, pos), (ssize_t)pos);
		if (r != PR_BS_MORE)
			return r == PR_BS_UP ? 0 : r;
	}
}

/* Dial LISTEN and send our HELLO. */
static void peer_dial(struct th_peer *p, const char *listen, const char *name, uint64_t inc,
		      const char *cookie)
{
	struct pr_bs_config bc = { .cookie = (const uint8_t *)cookie, .cookie_len = strlen(cookie),
				   .node = name, .incarnation = inc, .addr = "", .dialer = true };
	uint8_t out[PR_BS_HELLO_MAX + 64];
	size_t pos = 0;

	memset(p, 0, sizeof(*p));
	p->fd = th_dial(listen);
	assert_int_equal(procreg__bs_new(&p->bs, &bc), 0);
	assert_int_equal(procreg__bs_hello(p->bs, out, sizeof(out), &pos), 0);
	assert_int_equal(write(p->fd, out, pos), (ssize_t)pos);
}

int th_peer_connect(struct th_peer *p, const char *listen, const char *name, uint64_t inc,
		    const char *cookie)
{
	peer_dial(p, listen, name, inc, cookie);
	return peer_handshake(p, false);
}

int th_peer_connect_held(struct th_peer *p, const char *listen, const char *name, uint64_t inc,
			 const char *cookie)
{
	peer_dial(p, listen, name, inc, cookie);
	return peer_handshake(p, true);
}

void th_peer_release(struct th_peer *p)
{
	assert_int_equal(write(p->fd, p->held, p->held_len), (ssize_t)p->held_len);
	p->held_len = 0;
}

int th_peer_finish(struct th_peer *p)
{
	return peer_handshake(p, false);
}

void th_peer_send(struct th_peer *p, const uint8_t *buf, size_t len)
{
	static uint8_t rec[PR_BS_REC_MAX];

	while (len) {
		size_t n = len > PR_BS_PT_MAX ? PR_BS_PT_MAX : len;

		assert_int_equal(procreg__bs_seal(p->bs, buf, n, rec), 0);
		assert_int_equal(write(p->fd, rec, n + PR_BS_OVERHEAD), (ssize_t)(n + PR_BS_OVERHEAD));
		buf += n;
		len -= n;
	}
}

/* The next frame from the daemon, of any type, in *F (pointing into
 * P->frame): 0, or -ECONNRESET at the connection's end. */
int th_peer_next(struct th_peer *p, struct pr_bp_frame *f)
{
	for (;;) {
		size_t fp = 0, used = 0, n = 0;
		int r = procreg__bp_next(p->pt, p->pt_len, &fp, f);

		assert_true(r >= 0);
		if (r == 1) {
			size_t q = 0;

			memcpy(p->frame, p->pt, fp);
			memmove(p->pt, p->pt + fp, p->pt_len - fp);
			p->pt_len -= fp;
			assert_int_equal(procreg__bp_next(p->frame, fp, &q, f), 1);
			return 0;
		}
		r = procreg__bs_open(p->bs, p->in, p->in_len, &used, p->pt + p->pt_len, &n);
		assert_true(r >= 0);
		if (r == 1) {
			p->pt_len += n;
			peer_consume(p, used);
			continue;
		}
		if (peer_fill(p) < 0)
			return -ECONNRESET;
	}
}

void th_peer_expect(struct th_peer *p, uint8_t type, struct pr_bp_frame *f)
{
	do
		assert_int_equal(th_peer_next(p, f), 0);
	while (f->type != type);
}

void th_peer_close(struct th_peer *p)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	procreg__bs_free(p->bs);
	p->bs = NULL;
}

long th_status_kb(pid_t pid, const char *key)
{
	char path[64], line[256];
	size_t kl = strlen(key);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ':')
			v = strtol(line + kl + 1, NULL, 10);
	fclose(f);
	return v;
}

/* ---- scenarios both transports run -------------------------------------- */

void th_scenario_visible(struct th_node *n, int ms)
{
	TH_ENTRY(e);

	assert_int_equal(procreg_register(n[0].reg, "payments", "unix:/p.sock", 12), 0);
	th_expect_name(n[1].reg, "payments", getpid(), true, ms);
	th_expect_name(n[2].reg, "payments", getpid(), true, ms);
	assert_int_equal(procreg_lookup(n[1].reg, "payments", &e), 0);
	assert_int_equal(e.meta_len, 12);
	assert_memory_equal(e.meta, "unix:/p.sock", 12);
	assert_int_equal(procreg_lookup(n[0].reg, "payments", &e), 0);
	assert_int_equal(e.node, 0);

	/* A remote name is taken here too: registering it fails. */
	assert_int_equal(procreg_register(n[2].reg, "payments", NULL, 0), -EEXIST);
	/* Nor can a client here remove it. */
	assert_int_equal(procreg_unregister(n[1].reg, "payments"), -EPERM);

	/* Metadata updates travel. */
	assert_int_equal(procreg_register(n[0].reg, "payments", "v2", 2), 0);
	th_expect_meta(n[2].reg, "payments", "v2", 2, ms);

	/* Groups: one member from each of two nodes, seen on all three. */
	assert_int_equal(procreg_join(n[1].reg, "workers", "b", 1), 0);
	assert_int_equal(procreg_join(n[2].reg, "workers", "c", 1), 0);
	for (int i = 0; i < 3; i++)
		th_expect_members(n[i].reg, "workers", 2, ms);
}

void th_scenario_unregister_leave(struct th_node *n, int ms)
{
	assert_int_equal(procreg_unregister(n[0].reg, "payments"), 0);
	th_expect_name(n[1].reg, "payments", 0, false, ms);
	th_expect_name(n[2].reg, "payments", 0, false, ms);
	assert_int_equal(procreg_leave(n[1].reg, "workers"), 0);
	for (int i = 0; i < 3; i++)
		th_expect_members(n[i].reg, "workers", 1, ms);
}

void th_scenario_death(struct th_node *n, int ms)
{
	pid_t holder = th_spawn_holder(n[2].dir, "short-lived", "held");

	th_expect_name(n[0].reg, "short-lived", holder, true, ms);
	th_expect_name(n[1].reg, "short-lived", holder, true, ms);
	kill(holder, SIGKILL);
	th_wait(holder);
	th_expect_name(n[2].reg, "short-lived", 0, false, ms);
	th_expect_name(n[0].reg, "short-lived", 0, false, ms);
	th_expect_name(n[1].reg, "short-lived", 0, false, ms);
}

void th_scenario_node_killed(struct th_node *n, int ms)
{
	pid_t holder = th_spawn_holder(n[0].dir, "on-a", "held");
	uint64_t cursor;

	assert_int_equal(procreg_join(n[0].reg, "pool", NULL, 0), 0);
	th_expect_name(n[1].reg, "on-a", holder, true, ms);
	th_expect_name(n[2].reg, "on-a", holder, true, ms);
	th_expect_members(n[1].reg, "pool", 1, ms);
	cursor = procreg_feed_head(n[1].reg);

	th_daemon_kill(&n[0].d);
	th_expect_name(n[1].reg, "on-a", 0, false, ms);
	th_expect_name(n[2].reg, "on-a", 0, false, ms);
	th_expect_members(n[1].reg, "pool", 0, ms);
	th_expect_members(n[2].reg, "pool", 0, ms);
	/* The change feed says why. */
	assert_true(th_feed_count(n[1].reg, &cursor, PROCREG_EV_NODE_DOWN, "on-a") > 0);
	kill(holder, SIGKILL);
	th_wait(holder);
}
