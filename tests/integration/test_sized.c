/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_sized.c - the sized-struct rule of the API (procreg.h, "Sized
 * structs") on every function that takes a struct: .sz 0 or too small
 * refused, a larger .sz accepted with an all-zero tail and refused
 * (-EOPNOTSUPP) with a non-zero one, a struct filled no further than its
 * .sz; and the options batch ops and joins take (pidfd, flags, lease).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"

#define fx th_fx

/* Room past a struct: bytes that must stay as the test set them. */
#define TAIL 64
#define CANARY 0xc3

static int setup(void **state)
{
	return th_fx_start(state, NULL, NULL);
}

static int teardown(void **state)
{
	return th_fx_stop(state);
}

/* A struct of SZ bytes at the start of a buffer that holds TAIL more: its
 * first SZ bytes zero with .sz = SZ, the tail CANARY, or zero with
 * ZERO_TAIL (then the part past the library's struct is the caller's
 * "unknown" members, all unset). */
static void *sized(size_t known, size_t sz, bool zero_tail)
{
	unsigned char *b = malloc(known + TAIL);

	assert_non_null(b);
	memset(b, zero_tail ? 0 : CANARY, known + TAIL);
	memset(b, 0, sz < known ? sz : known);
	memcpy(b, &sz, sizeof(sz));
	return b;
}

static void canary_intact(const void *p, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (((const unsigned char *)p)[i] != CANARY)
			fail_msg("byte %zu past .sz written (0x%02x)", i, ((const unsigned char *)p)[i]);
}

/* ---- what every function does with .sz --------------------------------- */

static void test_open(void **state)
{
	struct fx *f = *state;
	struct procreg_opts *o;
	procreg_t *r;

	/* A forgotten .sz does not open the default scope. */
	o = sized(sizeof(*o), 0, true);
	o->dir = f->dir;
	errno = 0;
	assert_null(procreg_open(o));
	assert_int_equal(errno, EINVAL);
	free(o);
	o = sized(sizeof(*o), sizeof(size_t), true);
	errno = 0;
	assert_null(procreg_open(o));
	assert_int_equal(errno, EINVAL);
	free(o);
	/* One byte short of the last member (the struct's tail padding is
	 * not needed). */
	o = sized(sizeof(*o), offsetof(struct procreg_opts, trust_uid) + sizeof(o->trust_uid) - 1, true);
	errno = 0;
	assert_null(procreg_open(o));
	assert_int_equal(errno, EINVAL);
	free(o);
	/* A newer caller's struct: fine while what we do not know is unset. */
	o = sized(sizeof(*o), sizeof(*o) + TAIL, true);
	o->dir = f->dir;
	r = procreg_open(o);
	assert_non_null(r);
	assert_int_equal(procreg_lookup(r, "nothing", NULL), -ENOENT);
	procreg_close(r);
	((unsigned char *)o)[sizeof(*o) + TAIL - 1] = 1;
	errno = 0;
	assert_null(procreg_open(o));
	assert_int_equal(errno, EOPNOTSUPP);
	free(o);
}

static void test_register_and_join_opts(void **state)
{
	struct fx *f = *state;
	struct procreg_register_opts *ro;
	struct procreg_join_opts *jo;

	for (size_t sz = 0; sz < sizeof(*ro); sz += sizeof(int)) {
		ro = sized(sizeof(*ro), sz, true);
		assert_int_equal(procreg_register_opts(f->reg, "r", NULL, 0, ro), -EINVAL);
		free(ro);
	}
	/* The first release's join options ended at .pidfd: that size is
	 * still taken (no lease), anything shorter is not. */
	for (size_t sz = 0; sz < offsetof(struct procreg_join_opts, lease_ms); sz += sizeof(int)) {
		jo = sized(sizeof(*jo), sz, true);
		assert_int_equal(procreg_join_opts(f->reg, "g", NULL, 0, jo), -EINVAL);
		free(jo);
	}
	jo = sized(sizeof(*jo), offsetof(struct procreg_join_opts, lease_ms), false);
	assert_int_equal(procreg_join_opts(f->reg, "g.old", NULL, 0, jo), 0);
	free(jo);
	{
		uint64_t n;

		assert_int_equal(procreg_group_count(f->reg, "g.old", &n, NULL), 0);
		assert_int_equal(n, 1);
	}
	ro = sized(sizeof(*ro), sizeof(*ro) + TAIL, true);
	ro->flags = PROCREG_REPLACEABLE;
	assert_int_equal(procreg_register_opts(f->reg, "r", "m", 1, ro), 0);
	((unsigned char *)ro)[sizeof(*ro)] = 1;
	assert_int_equal(procreg_register_opts(f->reg, "r2", NULL, 0, ro), -EOPNOTSUPP);
	free(ro);
	jo = sized(sizeof(*jo), sizeof(*jo) + TAIL, true);
	assert_int_equal(procreg_join_opts(f->reg, "g", "m", 1, jo), 0);
	((unsigned char *)jo)[sizeof(*jo) + 7] = 0x80;
	assert_int_equal(procreg_join_opts(f->reg, "g2", NULL, 0, jo), -EOPNOTSUPP);
	free(jo);
	/* Nothing refused was done; NULL options are the defaults. */
	assert_int_equal(procreg_lookup(f->reg, "r2", NULL), -ENOENT);
	assert_int_equal(procreg_register_opts(f->reg, "r3", NULL, 0, NULL), 0);
	assert_int_equal(procreg_join_opts(f->reg, "g3", NULL, 0, NULL), 0);
	assert_int_equal(procreg_group_count(f->reg, "g2", NULL, NULL), 0);
	{
		uint64_t n;

		assert_int_equal(procreg_group_count(f->reg, "g3", &n, NULL), 0);
		assert_int_equal(n, 1);
		assert_int_equal(procreg_group_count(f->reg, "g2", &n, NULL), 0);
		assert_int_equal(n, 0);
	}
}

static void test_lookup(void **state)
{
	struct fx *f = *state;
	const size_t known = sizeof(struct procreg_entry);
	struct procreg_entry *e;
	char meta[8];

	assert_int_equal(procreg_register(f->reg, "svc", "0123456789", 10), 0);
	for (size_t sz = 0; sz < known; sz += 8) {
		e = sized(known, sz, false);
		assert_int_equal(procreg_lookup(f->reg, "svc", e), -EINVAL);
		canary_intact(e, sz > sizeof(size_t) ? sz : sizeof(size_t), known + TAIL);
		free(e);
	}
	/* Exactly our size: filled, nothing past it written; the metadata
	 * cut to the room given, its whole length told. */
	e = sized(known, known, false);
	memset(meta, CANARY, sizeof(meta));
	e->meta = meta;
	e->meta_size = 4;
	assert_int_equal(procreg_lookup(f->reg, "svc", e), 0);
	assert_int_equal(e->pid, getpid());
	assert_string_equal(e->name, "svc");
	assert_int_equal(e->meta_len, 10);
	assert_memory_equal(meta, "0123", 4);
	canary_intact(meta, 4, sizeof(meta));
	canary_intact(e, known, known + TAIL);
	assert_int_equal(e->sz, known);
	free(e);
	/* Larger, zero tail: filled, the tail left zero; a set byte in it:
	 * refused, nothing filled. */
	e = sized(known, known + TAIL, true);
	assert_int_equal(procreg_lookup(f->reg, "svc", e), 0);
	assert_int_equal(e->pid, getpid());
	for (size_t i = known; i < known + TAIL; i++)
		assert_int_equal(((unsigned char *)e)[i], 0);
	assert_int_equal(e->sz, known + TAIL);
	free(e);
	e = sized(known, known + TAIL, true);
	((unsigned char *)e)[known + 3] = 9;
	assert_int_equal(procreg_lookup(f->reg, "svc", e), -EOPNOTSUPP);
	assert_int_equal(e->pid, 0);
	assert_string_equal(e->name, "");
	free(e);
	/* No entry at all: presence only. */
	assert_int_equal(procreg_lookup(f->reg, "svc", NULL), 0);
}

/* procreg_lookup_many: its entries .sz bytes apart, all of one .sz, checked
 * before anything is written; each name answered as procreg_lookup would,
 * names that could never be registered included. */
static void test_lookup_many(void **state)
{
	struct fx *f = *state;
	const size_t known = sizeof(struct procreg_entry), big = known + TAIL;
	char longname[PROCREG_NAME_MAX + 2];
	const char *names[40];
	int res[40], want[40], found = 0;
	unsigned char *arr = calloc(40, big);
	char nb[40][16];

	assert_non_null(arr);
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	for (int i = 0; i < 40; i++) {
		snprintf(nb[i], sizeof(nb[i]), "many.%d", i);
		names[i] = nb[i];
		want[i] = -ENOENT;
		if (i % 3 == 0) {
			assert_int_equal(procreg_register(f->reg, nb[i], nb[i], strlen(nb[i])), 0);
			want[i] = 0;
			found++;
		}
	}
	names[7] = "";
	want[7] = -EINVAL;
	names[20] = longname;
	want[20] = -ENAMETOOLONG;

	/* Entries of a larger .sz (a newer header), zero tails: each filled
	 * at its stride, the tails left zero. */
	for (int i = 0; i < 40; i++)
		((struct procreg_entry *)(arr + i * big))->sz = big;
	memset(res, 0x55, sizeof(res));
	assert_int_equal(procreg_lookup_many(f->reg, names, 40, (struct procreg_entry *)arr, res),
			 found);
	for (int i = 0; i < 40; i++) {
		struct procreg_entry *e = (struct procreg_entry *)(arr + i * big);

		assert_int_equal(res[i], want[i]);
		assert_int_equal(e->sz, big);
		if (want[i] == 0) {
			assert_int_equal(e->pid, getpid());
			assert_string_equal(e->name, names[i]);
			assert_int_equal(e->meta_len, strlen(names[i]));
		} else {
			assert_int_equal(e->pid, 0);
		}
		for (size_t b = known; b < big; b++)
			assert_int_equal(arr[i * big + b], 0);
	}
	/* Presence only. */
	assert_int_equal(procreg_lookup_many(f->reg, names, 40, NULL, res), found);
	for (int i = 0; i < 40; i++)
		assert_int_equal(res[i], want[i]);

	/* One entry of another .sz: refused, not one result written. */
	((struct procreg_entry *)(arr + 33 * big))->sz = known;
	memset(res, 0x55, sizeof(res));
	assert_int_equal(procreg_lookup_many(f->reg, names, 40, (struct procreg_entry *)arr, res),
			 -EINVAL);
	for (int i = 0; i < 40; i++)
		assert_int_equal(res[i], 0x55555555);
	/* An .sz never set, and one far past any struct. */
	memset(arr, 0, 40 * big);
	assert_int_equal(procreg_lookup_many(f->reg, names, 40, (struct procreg_entry *)arr, res),
			 -EINVAL);
	((struct procreg_entry *)arr)->sz = 1 << 20;
	assert_int_equal(procreg_lookup_many(f->reg, names, 1, (struct procreg_entry *)arr, res),
			 -E2BIG);
	/* No names, or nowhere for the results. */
	assert_int_equal(procreg_lookup_many(f->reg, NULL, 3, NULL, res), -EINVAL);
	assert_int_equal(procreg_lookup_many(f->reg, names, 3, NULL, NULL), -EINVAL);
	assert_int_equal(procreg_lookup_many(f->reg, NULL, 0, NULL, NULL), 0);
	free(arr);
}

static int entry_sz(const struct procreg_entry *e, void *arg)
{
	/* A callback's entry has the library's size and its metadata. */
	if (e->sz != sizeof(*e) || e->meta_len != 10 || memcmp(e->meta, "0123456789", 10))
		return -1;
	++*(int *)arg;
	return 0;
}

static int group_sz(const struct procreg_group *g, void *arg)
{
	if (g->sz != sizeof(*g))
		return -1;
	++*(int *)arg;
	return 0;
}

static void test_callbacks(void **state)
{
	struct fx *f = *state;
	int n = 0;

	assert_int_equal(procreg_register(f->reg, "cb", "0123456789", 10), 0);
	assert_int_equal(procreg_join(f->reg, "cbg", "0123456789", 10), 0);
	assert_int_equal(procreg_foreach(f->reg, entry_sz, &n), 0);
	assert_int_equal(procreg_members(f->reg, "cbg", entry_sz, &n), 0);
	assert_int_equal(procreg_groups(f->reg, group_sz, &n), 0);
	assert_int_equal(n, 3);
}

static void test_stats(void **state)
{
	struct fx *f = *state;
	const size_t known = sizeof(struct procreg_stats);
	struct procreg_stats *st;

	assert_int_equal(procreg_register(f->reg, "s", NULL, 0), 0);
	for (size_t sz = 0; sz < known; sz += 8) {
		st = sized(known, sz, false);
		assert_int_equal(procreg_stats(f->reg, st), -EINVAL);
		free(st);
	}
	st = sized(known, known, false);
	assert_int_equal(procreg_stats(f->reg, st), 0);
	assert_int_equal(st->names, 1);
	assert_int_equal(st->daemon_pid, f->d.pid);
	assert_int_equal(st->sz, known);
	canary_intact(st, known, known + TAIL);
	free(st);
	st = sized(known, known + TAIL, true);
	assert_int_equal(procreg_stats(f->reg, st), 0);
	assert_int_equal(st->names, 1);
	((unsigned char *)st)[known + TAIL - 1] = 1;
	assert_int_equal(procreg_stats(f->reg, st), -EOPNOTSUPP);
	/* An .sz never set: refused without reading that far (the buffer
	 * ends TAIL bytes past the struct; ASan would see a read past it). */
	memset(st, 0xff, sizeof(size_t));
	assert_int_equal(procreg_stats(f->reg, st), -E2BIG);
	assert_int_equal(procreg_stats(f->reg, NULL), -EINVAL);
	free(st);
}

static void test_next_event(void **state)
{
	struct fx *f = *state;
	const size_t known = sizeof(struct procreg_event);
	uint64_t head = procreg_feed_head(f->reg), cur;
	struct procreg_event *ev;

	assert_int_equal(procreg_register(f->reg, "ev", NULL, 0), 0);
	for (size_t sz = 0; sz < known; sz += 8) {
		ev = sized(known, sz, false);
		cur = head;
		assert_int_equal(procreg_next_event(f->reg, &cur, ev, 0), -EINVAL);
		assert_int_equal(cur, head); /* nothing taken */
		free(ev);
	}
	ev = sized(known, known, false);
	cur = head;
	assert_int_equal(procreg_next_event(f->reg, &cur, ev, 0), 0);
	assert_int_equal(ev->type, PROCREG_EV_REGISTERED);
	assert_string_equal(ev->name, "ev");
	canary_intact(ev, known, known + TAIL);
	free(ev);
	ev = sized(known, known + TAIL, true);
	((unsigned char *)ev)[known] = 1;
	cur = head;
	assert_int_equal(procreg_next_event(f->reg, &cur, ev, 0), -EOPNOTSUPP);
	assert_int_equal(cur, head);
	((unsigned char *)ev)[known] = 0;
	assert_int_equal(procreg_next_event(f->reg, &cur, ev, 0), 0);
	assert_string_equal(ev->name, "ev");
	free(ev);
}

static void test_lost(void **state)
{
	struct fx *f = *state;
	const size_t known = sizeof(struct procreg_lost);
	struct procreg_lost *l;

	assert_int_equal(procreg_lost(f->reg, NULL, 0), -EINVAL);
	for (size_t sz = 0; sz < known; sz += 8) {
		l = sized(known, sz, false);
		assert_int_equal(procreg_lost(f->reg, l, 0), -EINVAL);
		free(l);
	}
	/* Accepted: nothing lost, so it times out. */
	l = sized(known, known + TAIL, true);
	assert_int_equal(procreg_lost(f->reg, l, 0), -ETIMEDOUT);
	((unsigned char *)l)[known + 1] = 1;
	assert_int_equal(procreg_lost(f->reg, l, 0), -EOPNOTSUPP);
	free(l);
}

/* ---- batches ----------------------------------------------------------- */

/* N ops STRIDE bytes apart (at least the library's struct), zeroed, each
 * with .sz = STRIDE and .result = 99. */
static struct procreg_op *ops_new(size_t n, size_t stride)
{
	unsigned char *b = calloc(n, stride);

	assert_non_null(b);
	for (size_t i = 0; i < n; i++) {
		struct procreg_op *op = (struct procreg_op *)(b + i * stride);

		op->sz = stride;
		op->result = 99;
	}
	return (struct procreg_op *)b;
}

static struct procreg_op *op_at(struct procreg_op *ops, size_t stride, size_t i)
{
	return (struct procreg_op *)((unsigned char *)ops + i * stride);
}

static void test_batch_sizes(void **state)
{
	struct fx *f = *state;
	const size_t known = sizeof(struct procreg_op), big = known + 24;
	static const char *const names[] = { "b0", "b1", "b2" };
	struct procreg_op *ops;

	/* A newer caller's ops, further apart: each found where it is. */
	ops = ops_new(3, big);
	for (int i = 0; i < 3; i++) {
		op_at(ops, big, i)->kind = PROCREG_OP_REGISTER;
		op_at(ops, big, i)->name = names[i];
	}
	assert_int_equal(procreg_batch(f->reg, ops, 3), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(op_at(ops, big, i)->result, 0);
		assert_int_equal(procreg_lookup(f->reg, names[i], NULL), 0);
	}
	/* A set byte past what we know, in any op: none is sent, no
	 * result written. */
	for (int i = 0; i < 3; i++) {
		op_at(ops, big, i)->kind = PROCREG_OP_UNREGISTER;
		op_at(ops, big, i)->result = 99;
	}
	((unsigned char *)op_at(ops, big, 2))[known + 5] = 1;
	assert_int_equal(procreg_batch(f->reg, ops, 3), -EOPNOTSUPP);
	for (int i = 0; i < 3; i++)
		assert_int_equal(op_at(ops, big, i)->result, 99);
	/* Ops of different sizes, or one too small: -EINVAL, nothing sent. */
	((unsigned char *)op_at(ops, big, 2))[known + 5] = 0;
	op_at(ops, big, 1)->sz = known;
	assert_int_equal(procreg_batch(f->reg, ops, 3), -EINVAL);
	op_at(ops, big, 1)->sz = big;
	op_at(ops, big, 0)->sz = 0;
	assert_int_equal(procreg_batch(f->reg, ops, 3), -EINVAL);
	op_at(ops, big, 0)->sz = big;
	for (int i = 0; i < 3; i++)
		assert_int_equal(op_at(ops, big, i)->result, 99);
	assert_int_equal(procreg_lookup(f->reg, "b0", NULL), 0);
	free(ops);
	ops = ops_new(1, known);
	ops->sz = offsetof(struct procreg_op, result); /* without its last member */
	ops->kind = PROCREG_OP_REGISTER;
	ops->name = "short";
	assert_int_equal(procreg_batch(f->reg, ops, 1), -EINVAL);
	assert_int_equal(ops->result, 99);
	assert_int_equal(procreg_lookup(f->reg, "short", NULL), -ENOENT);
	free(ops);
	/* No ops: nothing to check. */
	assert_int_equal(procreg_batch(f->reg, NULL, 0), 0);
}

static pid_t sleeper(int *pidfd)
{
	pid_t kid = fork();

	assert_true(kid >= 0);
	if (kid == 0) {
		pause();
		_exit(0);
	}
	*pidfd = (int)syscall(SYS_pidfd_open, kid, 0);
	assert_true(*pidfd >= 0);
	return kid;
}

/* A batch's ops take the single calls' options: a pidfd (each in a packet
 * of its own, between ops packed together), a lease, queueing, and the
 * options' checks, op by op. */
static void test_batch_options(void **state)
{
	struct fx *f = *state;
	int pidfd, pidfd2;
	pid_t kid = sleeper(&pidfd), kid2 = sleeper(&pidfd2);
	const size_t o = sizeof(struct procreg_op);
	struct procreg_op ops[9];
	TH_ENTRY(e);
	uint64_t n;

	ops[0] = (struct procreg_op){ .sz = o, .kind = PROCREG_OP_REGISTER, .name = "mine" };
	ops[1] = (struct procreg_op){ .sz = o, .kind = PROCREG_OP_REGISTER, .name = "kid",
				      .meta = "k", .meta_len = 1, .flags = PROCREG_PIDFD,
				      .pidfd = pidfd };
	ops[2] = (struct procreg_op){ .sz = o, .kind = PROCREG_OP_JOIN, .name = "kids",
				      .flags = PROCREG_PIDFD, .pidfd = pidfd };
	ops[3] = (struct procreg_op){ .sz = o, .kind = PROCREG_OP_JOIN, .name = "kids",
				      .flags = PROCREG_PIDFD, .pidfd = pidfd2 };
	ops[4] = (struct procreg_op){ .sz = o, .kind = PROCREG_OP_REGISTER, .name = "leased",
				      .lease_ms = 60000, .flags = PROCREG_REPLACEABLE };
	/* Taken by the child: in line for it. */
	ops[5] = (struct procreg_op){ .sz = o, .kind = PROCREG_OP_REGISTER, .name = "kid",
				      .flags = PROCREG_QUEUE };
	/* Refused one by one, the others still sent. */
	ops[6] = (struct procreg_op){ .sz = o, .kind = PROCREG_OP_JOIN, .name = "kids",
				      .flags = PROCREG_QUEUE };
	ops[7] = (struct procreg_op){ .sz = o, .kind = PROCREG_OP_LEAVE, .name = "kids",
				      .lease_ms = 5 };
	ops[8] = (struct procreg_op){ .sz = o, .kind = PROCREG_OP_REGISTER, .name = "bad",
				      .flags = PROCREG_PIDFD, .pidfd = -1 };
	for (int i = 0; i < 9; i++)
		ops[i].result = 99;
	assert_int_equal(procreg_batch(f->reg, ops, 9), 0);
	assert_int_equal(ops[0].result, 0);
	assert_int_equal(ops[1].result, 0);
	assert_int_equal(ops[2].result, 0);
	assert_int_equal(ops[3].result, 0);
	assert_int_equal(ops[4].result, 0);
	assert_int_equal(ops[5].result, -EINPROGRESS);
	assert_int_equal(ops[6].result, -EINVAL);
	assert_int_equal(ops[7].result, -EINVAL);
	assert_int_equal(ops[8].result, -EBADF);
	assert_int_equal(procreg_lookup(f->reg, "mine", &e), 0);
	assert_int_equal(e.pid, getpid());
	assert_int_equal(procreg_lookup(f->reg, "kid", &e), 0);
	assert_int_equal(e.pid, kid);
	assert_memory_equal(e_meta, "k", 1);
	assert_int_equal(procreg_lookup(f->reg, "leased", &e), 0);
	assert_int_equal(e.flags, PROCREG_ENTRY_LEASED | PROCREG_ENTRY_REPLACEABLE);
	assert_int_equal(procreg_group_count(f->reg, "kids", &n, NULL), 0);
	assert_int_equal(n, 2);
	assert_int_equal(procreg_lookup(f->reg, "bad", NULL), -ENOENT);
	/* The queued op takes the name when the child dies. */
	kill(kid, SIGKILL);
	th_wait(kid);
	assert_int_equal(procreg_wait_owner(f->reg, "kid", 5000), 0);
	assert_int_equal(procreg_group_count(f->reg, "kids", &n, NULL), 0);
	assert_int_equal(n, 1);
	kill(kid2, SIGKILL);
	th_wait(kid2);
	close(pidfd);
	close(pidfd2);
}

static void test_join_opts(void **state)
{
	struct fx *f = *state;
	int pidfd;
	pid_t kid = sleeper(&pidfd);
	TH_ENTRY(e);
	uint64_t n;

	{
		PROCREG_OPTS(procreg_join_opts, o, .flags = PROCREG_PIDFD, .pidfd = pidfd);

		assert_int_equal(procreg_join_opts(f->reg, "jo", "x", 1, &o), 0);
	}
	{
		/* No queue or replace for a membership. */
		PROCREG_OPTS(procreg_join_opts, o, .flags = PROCREG_QUEUE);

		assert_int_equal(procreg_join_opts(f->reg, "jo", NULL, 0, &o), -EINVAL);
		o.flags = PROCREG_PIDFD;
		o.pidfd = -1;
		assert_int_equal(procreg_join_opts(f->reg, "jo", NULL, 0, &o), -EBADF);
	}
	{
		PROCREG_OPTS(procreg_register_opts, o, .flags = PROCREG_PIDFD, .pidfd = pidfd);

		assert_int_equal(procreg_register_opts(f->reg, "jo.kid", NULL, 0, &o), 0);
		assert_int_equal(procreg_lookup(f->reg, "jo.kid", &e), 0);
		assert_int_equal(e.pid, kid);
	}
	assert_int_equal(procreg_group_count(f->reg, "jo", &n, NULL), 0);
	assert_int_equal(n, 1);
	kill(kid, SIGKILL);
	th_wait(kid);
	assert_int_equal(procreg_sync(f->reg), 0);
	assert_int_equal(procreg_group_count(f->reg, "jo", &n, NULL), 0);
	assert_int_equal(n, 0);
	close(pidfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_open, setup, teardown),
		cmocka_unit_test_setup_teardown(test_register_and_join_opts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lookup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lookup_many, setup, teardown),
		cmocka_unit_test_setup_teardown(test_callbacks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
		cmocka_unit_test_setup_teardown(test_next_event, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lost, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_sizes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_options, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_opts, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
