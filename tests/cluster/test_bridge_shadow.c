/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_bridge_shadow.c - a conflict seen from a third node: one real
 * daemon (node a) and two hand-made nodes (b, c) speaking the replication
 * protocol to it. Found by the soak (test_soak): a name registered on b
 * and on c while they could not see each other, c's the earlier. Node a
 * keeps c's and sets b's aside; if c's goes before b ever hears of it, b's
 * registration stands after all, and a must show it (b will not send it
 * again). Also: a metadata update keeps the registration's stamp, which is
 * what orders a conflict.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster.h"
#include "internal.h"
#include "bridge_proto.h"

#define COOKIE "a-shadow-cookie-0123456789"
#define WAIT_MS 10000

static int setup(void **state)
{
	return th_bridged_fx_start(state, "a", COOKIE);
}

static int teardown(void **state)
{
	return th_bridged_fx_stop(state);
}

/* A hand-made node: authenticated, its (empty) snapshot sent. Big:
 * static. */
struct fake {
	const char *name;
	uint64_t seq;
	struct th_peer p;
};

static void fake_send(struct fake *k, const uint8_t *buf, size_t len)
{
	th_peer_send(&k->p, buf, len);
}

static void fake_connect(struct fake *k, const char *listen, const char *name)
{
	uint8_t buf[256];
	size_t pos = 0, start;

	k->name = name;
	k->seq = 0;
	assert_int_equal(th_peer_connect(&k->p, listen, name, 7, COOKIE), 0);
	assert_int_equal(procreg__bp_begin(buf, sizeof(buf), &pos, PR_BP_SNAP, 7, 0, 0, &start), 0);
	procreg__bp_end(buf, pos, start, PR_BP_SNAP_LAST);
	fake_send(k, buf, pos);
}

/* A change from K: NAME registered (PUT) or removed (DEL) by PID, stamped
 * STAMP. */
static void fake_change(struct fake *k, uint8_t op, const char *name, uint32_t pid, uint64_t stamp)
{
	uint8_t buf[512];
	size_t pos = 0;
	struct pr_bp_entry e = { .op = op, .kind = PR_KIND_NAME, .pid = pid, .uid = 0,
				 .start_time = 1000 + pid, .registered_ns = stamp, .name = name,
				 .name_len = strlen(name) };

	assert_int_equal(procreg__bp_put_change(buf, sizeof(buf), &pos, 7, ++k->seq, k->name, &e), 0);
	fake_send(k, buf, pos);
}

/* NAME on REG owned by PID, or, PID 0, absent. */
#define expect_owner(reg, name, pid) th_expect_name(reg, name, pid, false, WAIT_MS)

static void test_loser_stands_when_winner_goes(void **state)
{
	struct th_bridged_fx *f = *state;
	uint64_t t = procreg__now_ns();
	static struct fake b, c;

	fake_connect(&c, f->listen, "c");
	fake_connect(&b, f->listen, "b");

	/* c's registration is the earlier: it stays here; b's is set aside. */
	fake_change(&c, PR_BP_PUT, "job", 300, t);
	expect_owner(f->reg, "job", 300);
	fake_change(&b, PR_BP_PUT, "job", 200, t + 1000);
	fake_change(&b, PR_BP_PUT, "marker-b", 200, t);
	expect_owner(f->reg, "marker-b", 200);
	expect_owner(f->reg, "job", 300);
	/* c's goes before b heard of it: b's stands, here too. */
	fake_change(&c, PR_BP_DEL, "job", 300, t);
	expect_owner(f->reg, "job", 200);

	/* The same when the winner's node goes down. */
	fake_change(&c, PR_BP_PUT, "task", 301, t);
	expect_owner(f->reg, "task", 301);
	fake_change(&b, PR_BP_PUT, "task", 201, t + 1000);
	fake_change(&b, PR_BP_PUT, "marker-b2", 200, t);
	expect_owner(f->reg, "marker-b2", 200);
	th_peer_close(&c.p);
	expect_owner(f->reg, "task", 201);

	/* A loser that gave up (its node heard of the winner) is not set
	 * aside any more: when the winner goes, nobody holds the name. */
	fake_connect(&c, f->listen, "c");
	fake_change(&c, PR_BP_PUT, "lead", 302, t - 1000);
	expect_owner(f->reg, "lead", 302);
	fake_change(&b, PR_BP_PUT, "lead", 202, t);
	fake_change(&b, PR_BP_DEL, "lead", 202, t);
	fake_change(&b, PR_BP_PUT, "marker-b3", 200, t);
	expect_owner(f->reg, "marker-b3", 200);
	fake_change(&c, PR_BP_DEL, "lead", 302, t - 1000);
	expect_owner(f->reg, "lead", 0);
	assert_int_equal(procreg_lookup(f->reg, "job", NULL), 0);
	th_peer_close(&b.p);
	th_peer_close(&c.p);
	expect_owner(f->reg, "job", 0);
}

/* Replacing one's own metadata is not a new registration: the stamp that
 * orders conflicts stays. */
static void test_update_keeps_stamp(void **state)
{
	struct th_bridged_fx *f = *state;
	TH_ENTRY(e1);
	TH_ENTRY(e2);

	assert_int_equal(procreg_register(f->reg, "mine", "v1", 2), 0);
	assert_int_equal(procreg_lookup(f->reg, "mine", &e1), 0);
	th_msleep(2);
	assert_int_equal(procreg_register(f->reg, "mine", "v2", 2), 0);
	assert_int_equal(procreg_lookup(f->reg, "mine", &e2), 0);
	assert_memory_equal(e2.meta, "v2", 2);
	assert_true(e2.registered_ns == e1.registered_ns);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_loser_stands_when_winner_goes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_update_keeps_stamp, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
