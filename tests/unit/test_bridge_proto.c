/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_bridge_proto.c - the replication codec (lib/bridge_proto.c) on byte
 * buffers: round trips, streams cut anywhere, and hostile input.
 *
 * Decoded buffers are exact-size heap copies, so that under
 * AddressSanitizer a read one byte past a frame is caught.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "internal.h"
#include "bridge_proto.h"

static struct pr_bp_entry entry(uint8_t op, uint8_t kind, const char *name, const char *meta)
{
	struct pr_bp_entry e = {
		.op = op, .kind = kind, .flags = PROCREG_ENTRY_REPLACEABLE, .pid = 4242, .uid = 1000,
		.start_time = 123456789, .registered_ns = 0x1122334455667788ull, .name = name,
		.name_len = strlen(name), .meta = meta, .meta_len = meta ? strlen(meta) : 0,
	};
	return e;
}

static void assert_entry_equal(const struct pr_bp_entry *a, const struct pr_bp_entry *b)
{
	assert_int_equal(a->op, b->op);
	assert_int_equal(a->kind, b->kind);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->pid, b->pid);
	assert_int_equal(a->uid, b->uid);
	assert_int_equal(a->start_time, b->start_time);
	assert_int_equal(a->registered_ns, b->registered_ns);
	assert_int_equal(a->name_len, b->name_len);
	assert_memory_equal(a->name, b->name, a->name_len);
	assert_int_equal(a->meta_len, b->meta_len);
	if (a->meta_len)
		assert_memory_equal(a->meta, b->meta, a->meta_len);
}

static void test_roundtrip(void **state)
{
	uint8_t *buf = calloc(1, 4 * PR_BP_FRAME_MAX), *c, nonce[PR_BP_NONCE], mac[PR_BP_MAC];
	uint8_t key[PR_BP_KEY];
	size_t pos = 0, rpos = 0, start, ip;
	struct pr_bp_entry e1 = entry(PR_BP_PUT, PR_KIND_NAME, "payments", "unix:/run/p.sock");
	struct pr_bp_entry e2 = entry(PR_BP_DEL, PR_KIND_MEMBER, "workers", NULL), got;
	struct pr_bp_peer peer;
	struct pr_bp_frame f;

	(void)state;
	memset(nonce, 0xa5, sizeof(nonce));
	memset(mac, 0x5a, sizeof(mac));
	memset(key, 0x3c, sizeof(key));
	assert_int_equal(procreg__bp_put_hello(buf, 4 * PR_BP_FRAME_MAX, &pos, 77, nonce, key,
					       "node-a", "127.0.0.1:7000"), 0);
	assert_int_equal(procreg__bp_put_auth(buf, 4 * PR_BP_FRAME_MAX, &pos, mac), 0);
	assert_int_equal(procreg__bp_put_refuse(buf, 4 * PR_BP_FRAME_MAX, &pos, PR_BP_REFUSE_AUTH,
						"authentication failed"), 0);
	assert_int_equal(procreg__bp_put_heartbeat(buf, 4 * PR_BP_FRAME_MAX, &pos, 77, 9), 0);
	assert_int_equal(procreg__bp_put_change(buf, 4 * PR_BP_FRAME_MAX, &pos, 77, 10, "node-a", &e1), 0);
	assert_int_equal(procreg__bp_begin(buf, 4 * PR_BP_FRAME_MAX, &pos, PR_BP_SNAP, 77, 10, 3, &start), 0);
	assert_int_equal(procreg__bp_add_entry(buf, 4 * PR_BP_FRAME_MAX, &pos, start, &e1), 0);
	assert_int_equal(procreg__bp_add_entry(buf, 4 * PR_BP_FRAME_MAX, &pos, start, &e2), 0);
	procreg__bp_end(buf, pos, start, PR_BP_SNAP_LAST);
	assert_int_equal(procreg__bp_begin(buf, 4 * PR_BP_FRAME_MAX, &pos, PR_BP_PEERS, 0, 0, 0, &start), 0);
	assert_int_equal(procreg__bp_add_peer(buf, 4 * PR_BP_FRAME_MAX, &pos, start, "node-b", "10.0.0.2:7000"), 0);
	procreg__bp_end(buf, pos, start, 0);

	c = th_exact(buf, pos);
	assert_int_equal(procreg__bp_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.type, PR_BP_HELLO);
	assert_int_equal(f.incarnation, 77);
	assert_memory_equal(f.nonce, nonce, PR_BP_NONCE);
	assert_memory_equal(f.key, key, PR_BP_KEY);
	assert_int_equal(f.name_len, 6);
	assert_memory_equal(f.name, "node-a", 6);
	assert_int_equal(f.addr_len, 14);
	assert_memory_equal(f.addr, "127.0.0.1:7000", 14);

	assert_int_equal(procreg__bp_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.type, PR_BP_AUTH);
	assert_memory_equal(f.mac, mac, PR_BP_MAC);

	assert_int_equal(procreg__bp_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.type, PR_BP_REFUSE);
	assert_int_equal(f.reason, PR_BP_REFUSE_AUTH);
	assert_int_equal(f.text_len, 21);
	assert_memory_equal(f.text, "authentication failed", 21);

	assert_int_equal(procreg__bp_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.type, PR_BP_HEARTBEAT);
	assert_int_equal(f.seq, 9);

	assert_int_equal(procreg__bp_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.type, PR_BP_CHANGE);
	assert_int_equal(f.incarnation, 77);
	assert_int_equal(f.seq, 10);
	assert_memory_equal(f.name, "node-a", 6);
	assert_entry_equal(&f.entry, &e1);

	assert_int_equal(procreg__bp_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.type, PR_BP_SNAP);
	assert_int_equal(f.flags, PR_BP_SNAP_LAST);
	assert_int_equal(f.incarnation, 77);
	assert_int_equal(f.seq, 10);
	assert_int_equal(f.part, 3);
	assert_int_equal(f.count, 2);
	ip = 0;
	assert_int_equal(procreg__bp_snap_entry(&f, &ip, &got), 1);
	assert_entry_equal(&got, &e1);
	assert_int_equal(procreg__bp_snap_entry(&f, &ip, &got), 1);
	assert_entry_equal(&got, &e2);
	assert_int_equal(procreg__bp_snap_entry(&f, &ip, &got), 0);

	assert_int_equal(procreg__bp_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.type, PR_BP_PEERS);
	assert_int_equal(f.count, 1);
	ip = 0;
	assert_int_equal(procreg__bp_peer(&f, &ip, &peer), 1);
	assert_memory_equal(peer.name, "node-b", 6);
	assert_memory_equal(peer.addr, "10.0.0.2:7000", 13);
	assert_int_equal(procreg__bp_peer(&f, &ip, &peer), 0);

	assert_int_equal(procreg__bp_next(c, pos, &rpos, &f), 0);
	assert_int_equal(rpos, pos);
	free(c);
	free(buf);
}

/* A stream cut at every byte: never a frame from a partial buffer, never
 * an error, and the whole frames before the cut decode. */
static void test_truncated(void **state)
{
	uint8_t buf[4096], nonce[PR_BP_NONCE] = { 1 }, key[PR_BP_KEY] = { 2 };
	size_t pos = 0;
	struct pr_bp_entry e = entry(PR_BP_PUT, PR_KIND_NAME, "svc", "meta");
	struct pr_bp_frame f;

	(void)state;
	assert_int_equal(procreg__bp_put_hello(buf, sizeof(buf), &pos, 1, nonce, key, "a", ""), 0);
	assert_int_equal(procreg__bp_put_change(buf, sizeof(buf), &pos, 1, 1, "a", &e), 0);
	for (size_t cut = 0; cut < pos; cut++) {
		uint8_t *c = th_exact(buf, cut);
		size_t rp = 0;
		int frames = 0, r;

		while ((r = procreg__bp_next(c, cut, &rp, &f)) == 1)
			frames++;
		assert_int_equal(r, 0);
		assert_true(frames <= 1);
		free(c);
	}
}

static void set32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void set16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static int decode_once(const uint8_t *buf, size_t len)
{
	uint8_t *c = th_exact(buf, len);
	struct pr_bp_frame f;
	size_t rp = 0;
	int r = procreg__bp_next(c, len, &rp, &f);

	free(c);
	return r;
}

static void test_hostile(void **state)
{
	uint8_t buf[4096], nonce[PR_BP_NONCE] = { 0 }, key[PR_BP_KEY] = { 0 };
	size_t pos = 0, start;
	struct pr_bp_entry e = entry(PR_BP_PUT, PR_KIND_NAME, "svc", "meta");

	(void)state;
	/* Lengths below the header, above the maximum. */
	memset(buf, 0, sizeof(buf));
	set32(buf, 4);
	buf[4] = PR_BP_HEARTBEAT;
	buf[5] = PR_BP_VERSION;
	assert_int_equal(decode_once(buf, 8), -EBADMSG);
	set32(buf, PR_BP_FRAME_MAX + 1);
	assert_int_equal(decode_once(buf, 8), -EBADMSG);
	/* Another version (told apart from garbage: a version 0 is not
	 * one), unknown type, unknown flags. */
	pos = 0;
	assert_int_equal(procreg__bp_put_heartbeat(buf, sizeof(buf), &pos, 1, 1), 0);
	assert_int_equal(decode_once(buf, pos), 1);
	buf[5] = 9;
	assert_int_equal(decode_once(buf, pos), -EPROTONOSUPPORT);
	buf[5] = 0;
	assert_int_equal(decode_once(buf, pos), -EBADMSG);
	buf[5] = 9;
	buf[4] = 99;
	assert_int_equal(decode_once(buf, pos), -EBADMSG);
	buf[5] = PR_BP_VERSION;
	buf[4] = 99;
	assert_int_equal(decode_once(buf, pos), -EBADMSG);
	buf[4] = PR_BP_HEARTBEAT;
	set16(buf + 6, 1);
	assert_int_equal(decode_once(buf, pos), -EBADMSG);
	set16(buf + 6, 0);
	/* A body longer or shorter than its type says. */
	set32(buf, (uint32_t)pos + 8);
	assert_int_equal(decode_once(buf, pos + 8), -EBADMSG);
	set32(buf, (uint32_t)pos - 1);
	assert_int_equal(decode_once(buf, pos - 1), -EBADMSG);

	/* A change whose name length runs past the frame. */
	pos = 0;
	assert_int_equal(procreg__bp_put_change(buf, sizeof(buf), &pos, 1, 1, "a", &e), 0);
	assert_int_equal(decode_once(buf, pos), 1);
	{
		size_t ent = 8 + 16 + 2; /* header, inc+seq, origin "a" */

		set16(buf + ent + 28, 200);
		assert_int_equal(decode_once(buf, pos), -EBADMSG);
		set16(buf + ent + 28, 3);
		set16(buf + ent + 30, 2000); /* metadata over the limit */
		assert_int_equal(decode_once(buf, pos), -EBADMSG);
		set16(buf + ent + 30, 4);
		buf[ent + 1] = PR_KIND_GROUP; /* groups are not replicated */
		assert_int_equal(decode_once(buf, pos), -EBADMSG);
		buf[ent + 1] = PR_KIND_NAME;
		buf[ent + 2] = 0x80; /* unknown record flag */
		assert_int_equal(decode_once(buf, pos), -EBADMSG);
		buf[ent + 2] = 0;
		buf[ent + PR_BP_ENTRY_HDR + 1] = 0; /* a NUL inside the name */
		assert_int_equal(decode_once(buf, pos), -EBADMSG);
		buf[ent + PR_BP_ENTRY_HDR + 1] = 'v';
		assert_int_equal(decode_once(buf, pos), 1);
		buf[8 + 16 + 1] = '/'; /* an origin that is not a node name */
		assert_int_equal(decode_once(buf, pos), -EBADMSG);
	}

	/* A snapshot claiming more entries than it holds, or fewer. */
	pos = 0;
	assert_int_equal(procreg__bp_begin(buf, sizeof(buf), &pos, PR_BP_SNAP, 1, 1, 0, &start), 0);
	assert_int_equal(procreg__bp_add_entry(buf, sizeof(buf), &pos, start, &e), 0);
	procreg__bp_end(buf, pos, start, PR_BP_SNAP_LAST);
	assert_int_equal(decode_once(buf, pos), 1);
	set16(buf + 28, 60000); /* after header, inc, seq, part */
	assert_int_equal(decode_once(buf, pos), -EBADMSG);
	set16(buf + 28, 0);
	assert_int_equal(decode_once(buf, pos), -EBADMSG);
	/* A snapshot frame cut before its part (a version 1 body). */
	set16(buf + 28, 1);
	assert_int_equal(decode_once(buf, pos), 1);
	memmove(buf + 24, buf + 28, pos - 28);
	set32(buf, (uint32_t)pos - 4);
	assert_int_equal(decode_once(buf, pos - 4), -EBADMSG);
	/* A version 1 or 2 frame: another version, whatever its body; the
	 * position does not move. */
	pos = 0;
	assert_int_equal(procreg__bp_put_heartbeat(buf, sizeof(buf), &pos, 1, 1), 0);
	for (uint8_t v = 1; v <= 2; v++) {
		struct pr_bp_frame f;
		size_t rp = 0;

		buf[5] = v;
		assert_int_equal(procreg__bp_next(buf, pos, &rp, &f), -EPROTONOSUPPORT);
		assert_int_equal(rp, 0);
		assert_int_equal(f.version, v);
		assert_int_equal(f.type, PR_BP_HEARTBEAT);
	}

	/* A REFUSE decodes whatever its version; its text is printable. */
	pos = 0;
	assert_int_equal(procreg__bp_put_refuse(buf, sizeof(buf), &pos, 200, "from the future"), 0);
	buf[5] = 4;
	assert_int_equal(decode_once(buf, pos), 1);
	buf[12] = '\n';
	assert_int_equal(decode_once(buf, pos), -EBADMSG);
	buf[12] = 'o';
	buf[9] = 100; /* text length past the frame */
	assert_int_equal(decode_once(buf, pos), -EBADMSG);
	assert_int_equal(procreg__bp_put_refuse(buf, sizeof(buf), &pos, 1, "a\tb"), -EINVAL);

	/* Hello with an empty or oversized node name. */
	pos = 0;
	assert_int_equal(procreg__bp_put_hello(buf, sizeof(buf), &pos, 1, nonce, key, "", ""),
			 -EINVAL);
	{
		char longname[PR_BP_NODE_MAX + 2];

		memset(longname, 'x', sizeof(longname) - 1);
		longname[sizeof(longname) - 1] = 0;
		assert_int_equal(procreg__bp_put_hello(buf, sizeof(buf), &pos, 1, nonce, key, longname,
						       ""), -EINVAL);
	}
	assert_int_equal(procreg__bp_put_hello(buf, sizeof(buf), &pos, 1, nonce, key, "n", "h:1"), 0);
	buf[8 + 8 + PR_BP_NONCE + PR_BP_KEY] = 0; /* name length 0 */
	assert_int_equal(decode_once(buf, pos), -EBADMSG);

	/* Encoders refuse what decoders would refuse. */
	e.name_len = PROCREG_NAME_MAX + 1;
	assert_int_equal(procreg__bp_put_change(buf, sizeof(buf), &pos, 1, 1, "a", &e), -EINVAL);
	e = entry(PR_BP_PUT, PR_KIND_NAME, "svc", "meta");
	assert_int_equal(procreg__bp_put_change(buf, 10, &(size_t){ 0 }, 1, 1, "a", &e), -ENOBUFS);
}

/* Random bytes, and random mutations of valid frames: the decoder answers
 * 0, 1 or -EBADMSG and never reads outside the buffer. */
static void test_garbage(void **state)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;
	uint8_t valid[2048], buf[2048], nonce[PR_BP_NONCE] = { 3 }, key[PR_BP_KEY] = { 4 };
	size_t vlen = 0, start;
	struct pr_bp_entry e = entry(PR_BP_PUT, PR_KIND_MEMBER, "group", "m");

	(void)state;
	procreg__bp_put_hello(valid, sizeof(valid), &vlen, 5, nonce, key, "n1", "127.0.0.1:1");
	procreg__bp_put_refuse(valid, sizeof(valid), &vlen, PR_BP_REFUSE_VERSION, "version 3");
	procreg__bp_put_change(valid, sizeof(valid), &vlen, 5, 1, "n1", &e);
	procreg__bp_begin(valid, sizeof(valid), &vlen, PR_BP_SNAP, 5, 1, 0, &start);
	procreg__bp_add_entry(valid, sizeof(valid), &vlen, start, &e);
	procreg__bp_end(valid, vlen, start, PR_BP_SNAP_LAST);
	for (int round = 0; round < 20000; round++) {
		size_t len, rp = 0;
		struct pr_bp_frame f;
		uint8_t *c;
		int r;

		if (round & 1) {
			len = th_xorshift(&s) % sizeof(buf);
			for (size_t i = 0; i < len; i++)
				buf[i] = (uint8_t)th_xorshift(&s);
			if (len >= 8 && (round & 2)) {
				set32(buf, (uint32_t)(th_xorshift(&s) % (len + 1)));
				buf[5] = PR_BP_VERSION;
				buf[4] = (uint8_t)(1 + th_xorshift(&s) % 7);
			}
		} else {
			len = vlen;
			memcpy(buf, valid, vlen);
			for (int k = 0; k < 4; k++)
				buf[th_xorshift(&s) % vlen] = (uint8_t)th_xorshift(&s);
		}
		c = th_exact(buf, len);
		while ((r = procreg__bp_next(c, len, &rp, &f)) == 1) {
			size_t ip = 0;
			struct pr_bp_entry ge;
			struct pr_bp_peer gp;

			assert_true(rp <= len);
			while (procreg__bp_snap_entry(&f, &ip, &ge))
				assert_true((const uint8_t *)ge.name + ge.name_len <= c + len);
			ip = 0;
			while (procreg__bp_peer(&f, &ip, &gp))
				assert_true((const uint8_t *)gp.addr + gp.addr_len <= c + len);
		}
		assert_true(r == 0 || r == -EBADMSG || r == -EPROTONOSUPPORT);
		free(c);
	}
}

/* A snapshot too big for one frame, split as the daemon splits it (a
 * frame is ended when the next entry does not fit): its parts decode
 * numbered 0 up, all as of the same change, the part at byte 24 of the
 * frame (u32, little-endian), every entry once. */
static void test_snap_parts(void **state)
{
	static uint8_t buf[PR_BP_FRAME_MAX];
	static char meta[PROCREG_META_MAX];
	uint32_t part = 0, seen = 0, frames = 0;
	size_t pos = 0, start;
	const int n = 300;

	(void)state;
	memset(meta, 'm', sizeof(meta));
	assert_int_equal(procreg__bp_begin(buf, sizeof(buf), &pos, PR_BP_SNAP, 9, 41, part, &start), 0);
	for (int i = 0; i <= n; i++) {
		char name[32];
		struct pr_bp_entry e;
		int r = 0;

		snprintf(name, sizeof(name), "svc-%d", i);
		e = entry(PR_BP_PUT, PR_KIND_NAME, name, NULL);
		e.meta = meta;
		e.meta_len = sizeof(meta);
		if (i < n && (r = procreg__bp_add_entry(buf, sizeof(buf), &pos, start, &e)) == 0)
			continue;
		assert_true(i == n || r == -ENOBUFS);
		procreg__bp_end(buf, pos, start, i == n ? PR_BP_SNAP_LAST : 0);
		{
			struct pr_bp_frame f;
			struct pr_bp_entry got;
			size_t rp = 0, ip = 0;

			assert_int_equal(procreg__bp_next(buf, pos, &rp, &f), 1);
			assert_int_equal(rp, pos);
			assert_int_equal(f.type, PR_BP_SNAP);
			assert_int_equal(f.part, part);
			assert_int_equal(buf[24] | buf[25] << 8 | buf[26] << 16 | (uint32_t)buf[27] << 24,
					 part);
			assert_int_equal(f.seq, 41);
			assert_int_equal(f.incarnation, 9);
			assert_int_equal(f.flags, i == n ? PR_BP_SNAP_LAST : 0);
			while (procreg__bp_snap_entry(&f, &ip, &got)) {
				char want[32];

				snprintf(want, sizeof(want), "svc-%u", seen++);
				assert_int_equal(got.name_len, strlen(want));
				assert_memory_equal(got.name, want, got.name_len);
			}
		}
		frames++;
		if (i == n)
			break;
		pos = 0;
		assert_int_equal(procreg__bp_begin(buf, sizeof(buf), &pos, PR_BP_SNAP, 9, 41, ++part,
						   &start), 0);
		i--; /* the entry that did not fit goes first in the next part */
	}
	assert_int_equal(seen, n);
	assert_true(frames >= 3);
	assert_int_equal(part, frames - 1);
}

static void test_node_names(void **state)
{
	(void)state;
	assert_true(procreg__bp_valid_node("node-1.example@x", 16));
	assert_false(procreg__bp_valid_node("", 0));
	assert_false(procreg__bp_valid_node(".", 1));
	assert_false(procreg__bp_valid_node("..", 2));
	assert_false(procreg__bp_valid_node("a b", 3));
	assert_false(procreg__bp_valid_node("a/b", 3));
}

/* A PEERS frame holds what a sender may put, PR_BP_PEERS_MAX items, and
 * no more: one more (small items would fit thousands to a frame, each a
 * look-up for the reader) is refused. */
static void test_peers_max(void **state)
{
	size_t cap = 2 * PR_BP_FRAME_MAX, pos = 0, start;
	uint8_t *buf = malloc(cap);
	char name[16];

	(void)state;
	assert_non_null(buf);
	assert_int_equal(procreg__bp_begin(buf, cap, &pos, PR_BP_PEERS, 0, 0, 0, &start), 0);
	for (unsigned i = 0; i < PR_BP_PEERS_MAX; i++) {
		snprintf(name, sizeof(name), "n%u", i);
		assert_int_equal(procreg__bp_add_peer(buf, cap, &pos, start, name, "h:1"), 0);
	}
	assert_int_equal(procreg__bp_add_peer(buf, cap, &pos, start, "over", "h:1"), -ENOBUFS);
	procreg__bp_end(buf, pos, start, 0);
	assert_int_equal(decode_once(buf, pos), 1);
	/* One more item, by hand: "x" with no address. */
	buf[pos++] = 1;
	buf[pos++] = 'x';
	buf[pos++] = 0;
	set16(buf + start + PR_BP_HDR, PR_BP_PEERS_MAX + 1);
	procreg__bp_end(buf, pos, start, 0);
	assert_int_equal(decode_once(buf, pos), -EBADMSG);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_hostile),
		cmocka_unit_test(test_peers_max),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_snap_parts),
		cmocka_unit_test(test_node_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
