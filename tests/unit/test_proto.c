/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_proto.c - encoding and decoding daemon protocol frames
 * (lib/proto.c) on byte buffers, without sockets.
 *
 * Parsed buffers are copied into heap blocks of exactly their length, so
 * that under AddressSanitizer any read past the end of a packet is caught,
 * not just a crash.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "internal.h"
#include "proto.h"

/* Everything a decoded frame points at lies inside [buf, buf + len). */
static void assert_inside(const uint8_t *buf, size_t len, const struct pr_frame *f)
{
	assert_true(f->body >= buf + PR_FRAME_HDR);
	assert_true(f->body + f->body_len <= buf + len);
	assert_int_equal(f->body_len + PR_FRAME_HDR, f->h.len);
	if (f->name) {
		assert_true((const uint8_t *)f->name >= f->body);
		assert_true((const uint8_t *)f->name + f->name_len <= f->body + f->body_len);
	}
	if (f->meta_len) {
		assert_true((const uint8_t *)f->meta >= f->body);
		assert_true((const uint8_t *)f->meta + f->meta_len <= f->body + f->body_len);
	}
}

static void test_roundtrip(void **state)
{
	uint8_t *buf = calloc(1, PR_PACKET_MAX), *c;
	char name[PROCREG_NAME_MAX];
	uint8_t meta[PROCREG_META_MAX];
	struct pr_frame f;
	size_t pos = 0, rpos = 0;

	(void)state;
	assert_non_null(buf);
	for (size_t i = 0; i < sizeof(name); i++)
		name[i] = (char)('a' + i % 26);
	for (size_t i = 0; i < sizeof(meta); i++)
		meta[i] = (uint8_t)(i * 7); /* includes NUL bytes: meta is binary */

	/* HELLO. */
	assert_int_equal(procreg__proto_put_hello(buf, &pos, PR_OP_HELLO, 77, 0), 0);
	assert_int_equal(pos % 8, 0);
	c = th_exact(buf, pos);
	assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.h.op, PR_OP_HELLO);
	assert_int_equal(f.h.id, 77);
	assert_int_equal(f.h.status, 0);
	assert_int_equal(f.h.len, pos);
	assert_int_equal(f.version, PR_PROTO_VERSION);
	assert_int_equal(rpos, pos);
	assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 0);
	free(c);

	/* HELLO with its flags. */
	pos = rpos = 0;
	assert_int_equal(procreg__proto_put_hello_flags(buf, &pos, PR_OP_HELLO, 78, 0,
							PR_HELLO_NOTICES), 0);
	c = th_exact(buf, pos);
	assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.arg, PR_HELLO_NOTICES);
	free(c);

	/* A HELLO that asks for files to be refused has room for the arm
	 * its reply carries: the reply is no longer. An ARM gives it back,
	 * and one cut short is malformed. */
	pos = rpos = 0;
	assert_int_equal(procreg__proto_put_hello_flags(buf, &pos, PR_OP_HELLO, 79, 0,
							PR_HELLO_NOFILES), 0);
	assert_int_equal(pos, PR_FRAME_HDR + 16);
	{
		size_t rlen = 0;
		uint64_t arm = 0x0123456789abcdefull;

		assert_int_equal(procreg__proto_put_hello_arm(buf + pos, &rlen, 79, 0, arm), 0);
		assert_int_equal(rlen, pos);
		c = th_exact(buf + pos, rlen);
		assert_int_equal(procreg__proto_next(c, rlen, &rpos, &f), 1);
		assert_int_equal(f.h.op, PR_OP_HELLO | PR_OP_REPLY);
		assert_int_equal(f.arm, arm);
		free(c);
		rlen = rpos = 0;
		assert_int_equal(procreg__proto_put(buf, &rlen, PR_OP_ARM, 0, 0, 0, &arm,
						    sizeof(arm), NULL, 0), 0);
		c = th_exact(buf, rlen);
		assert_int_equal(procreg__proto_next(c, rlen, &rpos, &f), 1);
		assert_int_equal(f.arm, arm);
		free(c);
		rlen = rpos = 0;
		assert_int_equal(procreg__proto_put(buf, &rlen, PR_OP_ARM, 0, 0, 0, NULL, 0, NULL,
						    0), 0);
		c = th_exact(buf, rlen);
		assert_int_equal(procreg__proto_next(c, rlen, &rpos, &f), -EPROTO);
		free(c);
	}

	/* A LOST notice; a LOST that is no reply is malformed, and one whose
	 * strings run past it too. */
	pos = rpos = 0;
	assert_int_equal(procreg__proto_put_lost(buf, &pos, "job", 3, "node-a", PROCREG_LOST_CONFLICT,
						 4242, 0x1122334455667788ull), 0);
	assert_int_equal(pos % 8, 0);
	c = th_exact(buf, pos);
	assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.h.op, PR_OP_LOST | PR_OP_REPLY);
	assert_int_equal(f.h.id, 0);
	assert_int_equal(f.name_len, 3);
	assert_memory_equal(f.name, "job", 3);
	assert_int_equal(f.meta_len, 6);
	assert_memory_equal(f.meta, "node-a", 6);
	assert_int_equal(f.arg, PROCREG_LOST_CONFLICT);
	assert_int_equal(f.pid, 4242);
	assert_int_equal(f.time_ns, 0x1122334455667788ull);
	free(c);
	buf[0] = PR_OP_LOST, buf[1] = 0;
	rpos = 0;
	assert_int_equal(procreg__proto_next(buf, pos, &rpos, &f), -EPROTO);
	buf[1] = PR_OP_REPLY >> 8;
	buf[PR_FRAME_HDR] = 200; /* name length */
	rpos = 0;
	assert_int_equal(procreg__proto_next(buf, pos, &rpos, &f), -EPROTO);

	/* HELLO reply with an error status. */
	pos = rpos = 0;
	assert_int_equal(procreg__proto_put_hello(buf, &pos, PR_OP_HELLO | PR_OP_REPLY, 9, -EACCES), 0);
	c = th_exact(buf, pos);
	assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.h.op, PR_OP_HELLO | PR_OP_REPLY);
	assert_int_equal(f.h.id, 9);
	assert_int_equal(f.h.status, -EACCES);
	assert_int_equal(f.version, PR_PROTO_VERSION);
	free(c);

	/* REGISTER at every name length and a spread of meta lengths,
	 * including the limits. */
	for (size_t nl = 1; nl <= PROCREG_NAME_MAX; nl += (nl < 20 ? 1 : 17)) {
		for (size_t ml = 0; ml <= PROCREG_META_MAX; ml += (ml < 16 ? 1 : 201)) {
			pos = rpos = 0;
			assert_int_equal(procreg__proto_put_name(buf, &pos, PR_OP_REGISTER, PR_F_PIDFD,
								 (uint32_t)(nl * 10000 + ml), name, nl, meta, ml), 0);
			assert_int_equal(pos, procreg__proto_name_size(nl, ml));
			assert_int_equal(pos % 8, 0);
			c = th_exact(buf, pos);
			assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 1);
			assert_inside(c, pos, &f);
			assert_int_equal(f.h.op, PR_OP_REGISTER);
			assert_int_equal(f.h.flags, PR_F_PIDFD);
			assert_int_equal(f.h.id, nl * 10000 + ml);
			assert_int_equal(f.h.status, 0);
			assert_int_equal(f.name_len, nl);
			assert_memory_equal(f.name, name, nl);
			assert_int_equal(f.meta_len, ml);
			if (ml)
				assert_memory_equal(f.meta, meta, ml);
			assert_int_equal(rpos, pos);
			assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 0);
			free(c);
		}
	}
	/* The exact limits, and one past them. */
	pos = rpos = 0;
	assert_int_equal(procreg__proto_put_name(buf, &pos, PR_OP_REGISTER, 0, 1, name,
						 PROCREG_NAME_MAX, meta, PROCREG_META_MAX), 0);
	c = th_exact(buf, pos);
	assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.name_len, PROCREG_NAME_MAX);
	assert_int_equal(f.meta_len, PROCREG_META_MAX);
	assert_memory_equal(f.meta, meta, PROCREG_META_MAX);
	free(c);
	pos = 0;
	assert_int_equal(procreg__proto_put_name(buf, &pos, PR_OP_REGISTER, 0, 1, name,
						 PROCREG_NAME_MAX + 1, NULL, 0), -EINVAL);
	assert_int_equal(procreg__proto_put_name(buf, &pos, PR_OP_REGISTER, 0, 1, name, 1,
						 meta, PROCREG_META_MAX + 1), -EINVAL);
	assert_int_equal(pos, 0); /* nothing written */

	/* UNREGISTER. */
	pos = rpos = 0;
	assert_int_equal(procreg__proto_put_name(buf, &pos, PR_OP_UNREGISTER, 0, 3, "svc", 3, NULL, 0), 0);
	c = th_exact(buf, pos);
	assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.h.op, PR_OP_UNREGISTER);
	assert_int_equal(f.name_len, 3);
	assert_memory_equal(f.name, "svc", 3);
	assert_int_equal(f.meta_len, 0);
	free(c);

	/* SYNC (empty body) and a plain reply with a status. */
	pos = rpos = 0;
	assert_int_equal(procreg__proto_put(buf, &pos, PR_OP_SYNC, 0, 5, 0, NULL, 0, NULL, 0), 0);
	assert_int_equal(pos, PR_FRAME_HDR);
	assert_int_equal(procreg__proto_put(buf, &pos, PR_OP_REGISTER | PR_OP_REPLY, 0, 6, -EEXIST,
					    NULL, 0, NULL, 0), 0);
	c = th_exact(buf, pos);
	assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.h.op, PR_OP_SYNC);
	assert_int_equal(f.body_len, 0);
	assert_int_equal(f.h.id, 5);
	assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 1);
	assert_int_equal(f.h.op, PR_OP_REGISTER | PR_OP_REPLY);
	assert_int_equal(f.h.status, -EEXIST);
	assert_int_equal(f.h.id, 6);
	assert_int_equal(procreg__proto_next(c, pos, &rpos, &f), 0);
	free(c);

	/* put pads with zeros to a multiple of 8: the padding is defined. */
	memset(buf, 0xee, 64);
	pos = 0;
	assert_int_equal(procreg__proto_put(buf, &pos, PR_OP_SYNC, 0, 1, 0, "x", 1, "yz", 2), 0);
	assert_int_equal(pos, 24);
	assert_memory_equal(buf + PR_FRAME_HDR, "xyz\0\0\0\0\0", 8);
	free(buf);
}

/* A packet with many frames of every kind, back to back. */
struct expect {
	uint16_t op;
	uint32_t id;
	size_t name_len, meta_len, end;
};

static size_t build_packet(uint8_t *buf, struct expect *ex, size_t *nex, size_t max_frames)
{
	static const char name[] = "service-name-for-framing-tests";
	static const uint8_t meta[40] = { 1, 2, 3, 0, 5, 6, 7, 8, 9, 10 };
	size_t pos = 0, n = 0;

	for (size_t i = 0; i < max_frames; i++) {
		size_t nl = 1 + i % (sizeof(name) - 1), ml = i % sizeof(meta);
		uint16_t op;
		int err;

		switch (i % 5) {
		case 0:
			op = PR_OP_HELLO;
			err = procreg__proto_put_hello(buf, &pos, op, (uint32_t)i, 0);
			nl = ml = 0;
			break;
		case 1:
			op = PR_OP_REGISTER;
			err = procreg__proto_put_name(buf, &pos, op, 0, (uint32_t)i, name, nl, meta, ml);
			break;
		case 2:
			op = PR_OP_UNREGISTER;
			ml = 0;
			err = procreg__proto_put_name(buf, &pos, op, 0, (uint32_t)i, name, nl, NULL, 0);
			break;
		case 3:
			op = PR_OP_SYNC;
			nl = ml = 0;
			err = procreg__proto_put(buf, &pos, op, 0, (uint32_t)i, 0, NULL, 0, NULL, 0);
			break;
		default:
			op = PR_OP_REGISTER | PR_OP_REPLY;
			nl = ml = 0;
			err = procreg__proto_put(buf, &pos, op, 0, (uint32_t)i, -(int32_t)i, NULL, 0, NULL, 0);
			break;
		}
		assert_int_equal(err, 0);
		ex[n].op = op;
		ex[n].id = (uint32_t)i;
		ex[n].name_len = nl;
		ex[n].meta_len = ml;
		ex[n].end = pos;
		n++;
	}
	*nex = n;
	return pos;
}

static void check_frame(const struct pr_frame *f, const struct expect *e)
{
	assert_int_equal(f->h.op, e->op);
	assert_int_equal(f->h.id, e->id);
	if (e->op == PR_OP_REGISTER || e->op == PR_OP_UNREGISTER) {
		assert_int_equal(f->name_len, e->name_len);
		assert_int_equal(f->meta_len, e->meta_len);
		assert_memory_equal(f->name, "service-name-for-framing-tests", e->name_len);
	}
	if (e->op == (PR_OP_REGISTER | PR_OP_REPLY))
		assert_int_equal(f->h.status, -(int32_t)e->id);
}

static void test_many_frames(void **state)
{
	uint8_t *buf = calloc(1, PR_PACKET_MAX), *c;
	struct expect ex[64];
	struct pr_frame f;
	size_t n, len, pos = 0, k = 0;
	int r;

	(void)state;
	assert_non_null(buf);
	len = build_packet(buf, ex, &n, 64);
	c = th_exact(buf, len);
	while ((r = procreg__proto_next(c, len, &pos, &f)) == 1) {
		assert_true(k < n);
		assert_inside(c, len, &f);
		check_frame(&f, &ex[k]);
		assert_int_equal(pos, ex[k].end);
		k++;
	}
	assert_int_equal(r, 0);
	assert_int_equal(k, n);
	assert_int_equal(pos, len);
	free(c);
	free(buf);
}

/* Cut a valid packet at every length: each complete frame before the cut
 * decodes as before, then the parse ends cleanly (cut on a frame boundary)
 * or with -EBADMSG (cut inside a frame), and never reads past the cut. */
static void test_truncation(void **state)
{
	uint8_t *buf = calloc(1, PR_PACKET_MAX), *c;
	struct expect ex[24];
	struct pr_frame f;
	size_t n, len;

	(void)state;
	assert_non_null(buf);
	len = build_packet(buf, ex, &n, 24);
	for (size_t cut = 0; cut <= len; cut++) {
		size_t pos = 0, k = 0;
		bool boundary = cut == 0;
		int r;

		for (size_t i = 0; i < n; i++)
			boundary |= ex[i].end == cut;
		c = th_exact(buf, cut);
		while ((r = procreg__proto_next(c, cut, &pos, &f)) == 1) {
			assert_true(k < n);
			assert_inside(c, cut, &f);
			check_frame(&f, &ex[k]);
			k++;
		}
		if (boundary) {
			assert_int_equal(r, 0);
			assert_int_equal(pos, cut);
		} else {
			assert_int_equal(r, -EBADMSG);
			/* Stopped at the frame the cut went through, without
			 * consuming it. */
			assert_int_equal(pos, k ? ex[k - 1].end : 0);
			assert_true(ex[k].end > cut);
		}
		free(c);
	}
	free(buf);
}

static void put_hdr(uint8_t *b, uint16_t op, uint32_t len, uint32_t id)
{
	struct pr_frame_hdr h = { .op = op, .len = len, .id = id };

	memcpy(b, &h, sizeof(h));
}

static void test_bad_len(void **state)
{
	uint8_t raw[256] = { 0 }, *c;
	struct pr_frame f;
	size_t pos;

	(void)state;
	/* Not a multiple of 8. */
	for (uint32_t l = 17; l < 48; l++) {
		if (l % 8 == 0)
			continue;
		put_hdr(raw, PR_OP_SYNC, l, 1);
		c = th_exact(raw, 64);
		pos = 0;
		assert_int_equal(procreg__proto_next(c, 64, &pos, &f), -EBADMSG);
		assert_int_equal(pos, 0);
		free(c);
	}
	/* Shorter than the header itself (0 and 8 are multiples of 8). */
	for (uint32_t l = 0; l < PR_FRAME_HDR; l++) {
		put_hdr(raw, PR_OP_SYNC, l, 1);
		c = th_exact(raw, 64);
		pos = 0;
		assert_int_equal(procreg__proto_next(c, 64, &pos, &f), -EBADMSG);
		assert_int_equal(pos, 0);
		free(c);
	}
	/* Longer than the buffer: by 8, and absurdly (a 32-bit length that
	 * would wrap a careless pos + len). */
	{
		uint32_t lens[] = { 72, 64 + 8 * 1000, 0xfffffff8u, 0x80000000u };

		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			put_hdr(raw, PR_OP_SYNC, lens[i], 1);
			c = th_exact(raw, 64);
			pos = 0;
			assert_int_equal(procreg__proto_next(c, 64, &pos, &f), -EBADMSG);
			assert_int_equal(pos, 0);
			free(c);
		}
	}
	/* A bad second frame after a good first one: the first decodes, the
	 * second is -EBADMSG at its own offset. */
	put_hdr(raw, PR_OP_SYNC, 16, 1);
	put_hdr(raw + 16, PR_OP_SYNC, 4096, 2);
	c = th_exact(raw, 48);
	pos = 0;
	assert_int_equal(procreg__proto_next(c, 48, &pos, &f), 1);
	assert_int_equal(f.h.id, 1);
	assert_int_equal(pos, 16);
	assert_int_equal(procreg__proto_next(c, 48, &pos, &f), -EBADMSG);
	assert_int_equal(pos, 16);
	free(c);
	/* Fewer bytes left than a header. */
	for (size_t l = 1; l < PR_FRAME_HDR; l++) {
		c = th_exact(raw, l);
		pos = 0;
		assert_int_equal(procreg__proto_next(c, l, &pos, &f), -EBADMSG);
		free(c);
	}
}

/* A frame whose header is fine but whose body is not: -EPROTO, with the
 * header filled (so the daemon can answer it) and pos past the frame (so
 * the rest of the packet can still be read). */
static void test_bad_body(void **state)
{
	uint8_t raw[128], *c;
	struct pr_frame f;
	size_t pos;
	struct {
		uint16_t name_len, meta_len;
		uint32_t reserved;
	} nb;

	(void)state;

	/* REGISTER declaring more name than the body holds. */
	memset(raw, 'n', sizeof(raw));
	put_hdr(raw, PR_OP_REGISTER, 32, 11);
	nb.name_len = 9;   /* body is 16: 8 of lengths + 8 of data */
	nb.meta_len = 0;
	nb.reserved = 0;
	memcpy(raw + 16, &nb, 8);
	put_hdr(raw + 32, PR_OP_SYNC, 16, 12);
	c = th_exact(raw, 48);
	pos = 0;
	assert_int_equal(procreg__proto_next(c, 48, &pos, &f), -EPROTO);
	assert_int_equal(f.h.id, 11);
	assert_int_equal(f.h.op, PR_OP_REGISTER);
	assert_int_equal(pos, 32);
	assert_int_equal(procreg__proto_next(c, 48, &pos, &f), 1);
	assert_int_equal(f.h.id, 12);
	assert_int_equal(procreg__proto_next(c, 48, &pos, &f), 0);
	free(c);

	/* Exactly fitting is fine; one more byte of meta is not. */
	nb.name_len = 5;
	nb.meta_len = 3;
	memcpy(raw + 16, &nb, 8);
	c = th_exact(raw, 32);
	pos = 0;
	assert_int_equal(procreg__proto_next(c, 32, &pos, &f), 1);
	assert_int_equal(f.name_len, 5);
	assert_int_equal(f.meta_len, 3);
	assert_inside(c, 32, &f);
	free(c);
	nb.meta_len = 4;
	memcpy(raw + 16, &nb, 8);
	c = th_exact(raw, 32);
	pos = 0;
	assert_int_equal(procreg__proto_next(c, 32, &pos, &f), -EPROTO);
	free(c);
	/* Lengths that would wrap 16-bit arithmetic. */
	nb.name_len = 0xffff;
	nb.meta_len = 0xffff;
	memcpy(raw + 16, &nb, 8);
	c = th_exact(raw, 32);
	pos = 0;
	assert_int_equal(procreg__proto_next(c, 32, &pos, &f), -EPROTO);
	free(c);

	/* REGISTER / UNREGISTER with no room for the lengths at all. */
	put_hdr(raw, PR_OP_REGISTER, 16, 1);
	c = th_exact(raw, 16);
	pos = 0;
	assert_int_equal(procreg__proto_next(c, 16, &pos, &f), -EPROTO);
	free(c);
	put_hdr(raw, PR_OP_UNREGISTER, 16, 1);
	c = th_exact(raw, 16);
	pos = 0;
	assert_int_equal(procreg__proto_next(c, 16, &pos, &f), -EPROTO);
	free(c);

	/* UNREGISTER carries no meta. */
	put_hdr(raw, PR_OP_UNREGISTER, 32, 1);
	nb.name_len = 2;
	nb.meta_len = 1;
	memcpy(raw + 16, &nb, 8);
	c = th_exact(raw, 32);
	pos = 0;
	assert_int_equal(procreg__proto_next(c, 32, &pos, &f), -EPROTO);
	free(c);

	/* HELLO too short for its version. */
	put_hdr(raw, PR_OP_HELLO, 16, 1);
	c = th_exact(raw, 16);
	pos = 0;
	assert_int_equal(procreg__proto_next(c, 16, &pos, &f), -EPROTO);
	assert_int_equal(pos, 16);
	free(c);
}

static void test_unknown_op(void **state)
{
	/* Request ops this version does not know. */
	uint16_t ops[] = { 0, 0x20, 0x21, 0x7fff };
	/* Replies echo the request's op, whatever it was: framed, not judged
	 * (only a HELLO reply has a body to check). */
	uint16_t replies[] = { PR_OP_REPLY, PR_OP_REPLY | 0x20, 0xffff,
			       PR_OP_REPLY | PR_OP_REGISTER, PR_OP_REPLY | PR_OP_SYNC };
	uint8_t raw[64] = { 0 }, *c;
	struct pr_frame f;

	(void)state;
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		size_t pos = 0;

		put_hdr(raw, ops[i], 24, (uint32_t)i);
		put_hdr(raw + 24, PR_OP_SYNC, 16, 100);
		c = th_exact(raw, 40);
		assert_int_equal(procreg__proto_next(c, 40, &pos, &f), -EPROTO);
		assert_int_equal(f.h.op, ops[i]);
		assert_int_equal(f.h.id, i);
		assert_int_equal(pos, 24);
		/* The packet goes on after it. */
		assert_int_equal(procreg__proto_next(c, 40, &pos, &f), 1);
		assert_int_equal(f.h.id, 100);
		free(c);
	}
	for (size_t i = 0; i < sizeof(replies) / sizeof(replies[0]); i++) {
		size_t pos = 0;

		put_hdr(raw, replies[i], 24, (uint32_t)i);
		put_hdr(raw + 24, PR_OP_SYNC, 16, 100);
		c = th_exact(raw, 40);
		assert_int_equal(procreg__proto_next(c, 40, &pos, &f), 1);
		assert_int_equal(f.h.op, replies[i]);
		assert_int_equal(f.h.id, i);
		assert_int_equal(f.body_len, 8);
		assert_null(f.name);
		assert_int_equal(pos, 24);
		assert_int_equal(procreg__proto_next(c, 40, &pos, &f), 1);
		assert_int_equal(f.h.id, 100);
		free(c);
	}
	/* A HELLO reply is still checked: it must carry the version. */
	{
		size_t pos = 0;

		put_hdr(raw, PR_OP_REPLY | PR_OP_HELLO, 16, 1);
		c = th_exact(raw, 16);
		assert_int_equal(procreg__proto_next(c, 16, &pos, &f), -EPROTO);
		assert_int_equal(pos, 16);
		free(c);
	}
}

static void test_packet_full(void **state)
{
	uint8_t *buf = calloc(1, PR_PACKET_MAX), *c;
	char name[PROCREG_NAME_MAX];
	uint8_t meta[PROCREG_META_MAX] = { 0 };
	size_t pos = 0, before, frames = 0, fsz = procreg__proto_name_size(sizeof(name), sizeof(meta));
	struct pr_frame f;
	int err;

	(void)state;
	assert_non_null(buf);
	memset(name, 'q', sizeof(name));
	/* Fill with the largest frames until one does not fit. */
	while ((err = procreg__proto_put_name(buf, &pos, PR_OP_REGISTER, 0, (uint32_t)frames,
					      name, sizeof(name), meta, sizeof(meta))) == 0)
		frames++;
	assert_int_equal(err, -ENOBUFS);
	assert_int_equal(frames, PR_PACKET_MAX / fsz);
	assert_int_equal(pos, frames * fsz);
	/* The failed put wrote nothing and left pos alone. */
	before = pos;
	assert_int_equal(procreg__proto_put_name(buf, &pos, PR_OP_REGISTER, 0, 0, name,
						 sizeof(name), meta, sizeof(meta)), -ENOBUFS);
	assert_int_equal(pos, before);
	/* Smaller frames still fill the rest, up to exactly PR_PACKET_MAX. */
	while (procreg__proto_put(buf, &pos, PR_OP_SYNC, 0, 0, 0, NULL, 0, NULL, 0) == 0)
		;
	assert_int_equal(pos, PR_PACKET_MAX);
	assert_int_equal(procreg__proto_put(buf, &pos, PR_OP_SYNC, 0, 0, 0, NULL, 0, NULL, 0), -ENOBUFS);
	assert_int_equal(procreg__proto_put_hello(buf, &pos, PR_OP_HELLO, 0, 0), -ENOBUFS);
	assert_int_equal(pos, PR_PACKET_MAX);
	/* The full packet still parses, every frame. */
	c = th_exact(buf, pos);
	{
		size_t rp = 0, k = 0;

		while (procreg__proto_next(c, pos, &rp, &f) == 1)
			k++;
		assert_int_equal(rp, PR_PACKET_MAX);
		assert_int_equal(k, frames + (PR_PACKET_MAX - before) / PR_FRAME_HDR);
	}
	free(c);

	/* One frame bigger than a whole packet. */
	pos = 0;
	{
		uint8_t *big = calloc(1, PR_PACKET_MAX);

		assert_non_null(big);
		assert_int_equal(procreg__proto_put(buf, &pos, PR_OP_SYNC, 0, 0, 0, big,
						    PR_PACKET_MAX - PR_FRAME_HDR + 1, NULL, 0), -ENOBUFS);
		assert_int_equal(pos, 0);
		/* Exactly a packet is fine. */
		assert_int_equal(procreg__proto_put(buf, &pos, PR_OP_SYNC, 0, 0, 0, big,
						    PR_PACKET_MAX - PR_FRAME_HDR, NULL, 0), 0);
		assert_int_equal(pos, PR_PACKET_MAX);
		free(big);
	}
	free(buf);
}

/* Garbage, and garbage that looks like frames: never a crash, never a read
 * outside the buffer, and every decoded frame lies inside it. */
static void test_garbage(void **state)
{
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	uint8_t tmp[1024];
	size_t ok = 0, proto = 0, bad = 0, clean = 0;

	(void)state;
	for (int it = 0; it < 200000; it++) {
		size_t len = th_xorshift(&seed) % sizeof(tmp), pos = 0;
		uint8_t *c;
		struct pr_frame f;
		int r, steps = 0;

		for (size_t i = 0; i < len; i += 8) {
			uint64_t v = th_xorshift(&seed);

			memcpy(tmp + i, &v, len - i < 8 ? len - i : 8);
		}
		/* Half the time, make the headers plausible so the body
		 * decoders get exercised, not just the framing. */
		if (it & 1) {
			for (size_t p = 0; p + PR_FRAME_HDR <= len;) {
				uint64_t r2 = th_xorshift(&seed);
				uint32_t fl = (uint32_t)(PR_FRAME_HDR + 8 * (r2 % 40));
				uint16_t op = (uint16_t)(1 + (r2 >> 8) % 5);

				if (r2 & (1ull << 40))
					op |= PR_OP_REPLY;
				memcpy(tmp + p, &op, 2);
				memcpy(tmp + p + 4, &fl, 4);
				if (p + PR_FRAME_HDR + 4 <= len && (r2 & (1ull << 41))) {
					/* small declared lengths, so that some fit */
					uint16_t nl = (uint16_t)((r2 >> 16) % 64), ml = (uint16_t)((r2 >> 24) % 64);

					memcpy(tmp + p + 16, &nl, 2);
					memcpy(tmp + p + 18, &ml, 2);
				}
				p += fl;
			}
		}
		c = th_exact(tmp, len);
		while ((r = procreg__proto_next(c, len, &pos, &f)) != 0) {
			assert_true(++steps <= (int)(len / 16) + 1);
			assert_true(pos <= len);
			if (r == -EBADMSG) {
				bad++;
				break;
			}
			if (r == -EPROTO) {
				proto++;
				continue;
			}
			assert_int_equal(r, 1);
			assert_inside(c, len, &f);
			/* Touch every byte the frame points at. */
			{
				volatile uint8_t sink = 0;

				for (size_t i = 0; i < f.name_len; i++)
					sink ^= (uint8_t)f.name[i];
				for (size_t i = 0; i < f.meta_len; i++)
					sink ^= ((const uint8_t *)f.meta)[i];
				(void)sink;
			}
			ok++;
		}
		if (r == 0)
			clean++;
		free(c);
	}
	/* The generator reached every outcome. */
	assert_true(ok > 1000);
	assert_true(proto > 1000);
	assert_true(bad > 1000);
	assert_true(clean > 100);
}

/* The daemon's check of a request's name: a NUL anywhere refuses it,
 * whatever the length (and before the length is held against the limit);
 * bytes next to the name are not the name's. */
static void test_check_name(void **state)
{
	char buf[PROCREG_NAME_MAX + 64];
	struct pr_frame f = { 0 };

	(void)state;
	f.name = buf;
	f.name_len = 0;
	assert_int_equal(procreg__proto_check_name(&f), -EINVAL);
	for (size_t n = 1; n <= 40; n++) {
		memset(buf, 'a', sizeof(buf));
		buf[n] = 0; /* just past the name: not the name's */
		f.name_len = n;
		assert_int_equal(procreg__proto_check_name(&f), 0);
		for (size_t i = 0; i < n; i++) {
			buf[i] = 0;
			assert_int_equal(procreg__proto_check_name(&f), -EINVAL);
			buf[i] = (char)0x80; /* a top bit set is no NUL */
			assert_int_equal(procreg__proto_check_name(&f), 0);
			buf[i] = 1;
			assert_int_equal(procreg__proto_check_name(&f), 0);
			buf[i] = 'a';
		}
	}
	memset(buf, 'b', sizeof(buf));
	f.name_len = PROCREG_NAME_MAX;
	assert_int_equal(procreg__proto_check_name(&f), 0);
	f.name_len = PROCREG_NAME_MAX + 1;
	assert_int_equal(procreg__proto_check_name(&f), -ENAMETOOLONG);
	buf[PROCREG_NAME_MAX + 30] = 0;
	f.name_len = PROCREG_NAME_MAX + 31;
	assert_int_equal(procreg__proto_check_name(&f), -EINVAL);
	f.name_len = 5;
	f.meta_len = PROCREG_META_MAX + 1;
	assert_int_equal(procreg__proto_check_name(&f), -EMSGSIZE);
}

/* A reply of a header alone reads back as procreg__proto_put writes it,
 * and is refused when the packet is full. */
static void test_put_status(void **state)
{
	static uint8_t a[PR_PACKET_MAX], b[PR_PACKET_MAX];
	size_t pa = 0, pb = 0, rpos = 0;
	struct pr_frame f;

	(void)state;
	assert_int_equal(procreg__proto_put_status(a, &pa, PR_OP_REGISTER | PR_OP_REPLY, 77, -EEXIST), 0);
	assert_int_equal(procreg__proto_put(b, &pb, PR_OP_REGISTER | PR_OP_REPLY, 0, 77, -EEXIST,
					    NULL, 0, NULL, 0), 0);
	assert_int_equal(pa, PR_FRAME_HDR);
	assert_int_equal(pb, pa);
	assert_memory_equal(a, b, pa);
	assert_int_equal(procreg__proto_next(a, pa, &rpos, &f), 1);
	assert_int_equal(f.h.op, PR_OP_REGISTER | PR_OP_REPLY);
	assert_int_equal(f.h.id, 77);
	assert_int_equal(f.h.status, -EEXIST);
	pa = PR_PACKET_MAX - PR_FRAME_HDR;
	assert_int_equal(procreg__proto_put_status(a, &pa, PR_OP_SYNC | PR_OP_REPLY, 1, 0), 0);
	assert_int_equal(pa, PR_PACKET_MAX);
	assert_int_equal(procreg__proto_put_status(a, &pa, PR_OP_SYNC | PR_OP_REPLY, 2, 0), -ENOBUFS);
	assert_int_equal(pa, PR_PACKET_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_many_frames),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_bad_len),
		cmocka_unit_test(test_bad_body),
		cmocka_unit_test(test_unknown_op),
		cmocka_unit_test(test_packet_full),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_check_name),
		cmocka_unit_test(test_put_status),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
