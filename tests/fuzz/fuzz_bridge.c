/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fuzz_bridge.c - libFuzzer harness for the bridge's frame decoder and the
 * mesh's secure channel (bridge_proto.c, bridge_sec.c).
 *
 * The first byte of the input picks what the rest is:
 *  0  a byte stream as a peer sends it in clear (the handshake's frames)
 *     or as a record opens to (every other frame): every frame
 *     procreg__bp_next() accepts must lie inside the stream, its items
 *     must walk to their count, a CHANGE must survive a round trip
 *     through the encoder, and a SNAP (its part number included) must
 *     encode back to the very bytes it came from;
 *  1  what a node that was dialed hears in its handshake, frame by frame
 *     into the channel: never up (nobody without the cookie proves it);
 *  2  the same for the dialer, after its HELLO;
 *  3  records after a genuine handshake between two ends in this process:
 *     made-up records are never opened, and a genuine record XORed with
 *     the input opens exactly when the input changed nothing.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bridge_proto.h"
#include "bridge_sec.h"

#define COOKIE "fuzz-cookie-0123456789"

static uint8_t out[PR_BP_FRAME_MAX];

static void inside(const void *p, size_t n, const uint8_t *data, size_t size)
{
	if (n && ((const uint8_t *)p < data || (const uint8_t *)p + n > data + size))
		abort();
}

static void check_entry(const struct pr_bp_entry *e, const uint8_t *data, size_t size)
{
	inside(e->name, e->name_len, data, size);
	inside(e->meta, e->meta_len, data, size);
}

static void decode_stream(const uint8_t *data, size_t size)
{
	struct pr_bp_frame f, g;
	size_t pos = 0, last = 0;
	int r;

	while ((r = procreg__bp_next(data, size, &pos, &f)) == 1) {
		size_t item = 0, n = 0, frame_at = pos - f.len;

		if (pos <= last || pos > size)
			abort(); /* no progress, or past the stream */
		last = pos;
		inside(f.name, f.name_len, data, size);
		inside(f.addr, f.addr_len, data, size);
		inside(f.items, f.items_len, data, size);
		if (f.type == PR_BP_SNAP) {
			struct pr_bp_entry e;
			size_t o = 0, start;

			if (procreg__bp_begin(out, sizeof(out), &o, PR_BP_SNAP, f.incarnation, f.seq,
					      f.part, &start) < 0)
				abort();
			while (procreg__bp_snap_entry(&f, &item, &e) == 1) {
				check_entry(&e, data, size);
				if (procreg__bp_add_entry(out, sizeof(out), &o, start, &e) < 0)
					abort();
				n++;
			}
			if (n != f.count)
				abort();
			procreg__bp_end(out, o, start, f.flags);
			if (o != f.len || memcmp(out, data + frame_at, o))
				abort();
		} else if (f.type == PR_BP_PEERS) {
			struct pr_bp_peer p;

			while (procreg__bp_peer(&f, &item, &p) == 1) {
				inside(p.name, p.name_len, data, size);
				inside(p.addr, p.addr_len, data, size);
				n++;
			}
			if (n != f.count)
				abort();
		} else if (f.type == PR_BP_CHANGE) {
			char origin[PR_BP_NODE_MAX + 1];
			size_t o = 0, q = 0;

			check_entry(&f.entry, data, size);
			if (f.name_len > PR_BP_NODE_MAX)
				abort();
			memcpy(origin, f.name, f.name_len);
			origin[f.name_len] = 0;
			/* What decodes, encodes back to something that decodes
			 * to the same change. */
			if (procreg__bp_put_change(out, sizeof(out), &o, f.incarnation, f.seq, origin,
						   &f.entry) == 0) {
				if (procreg__bp_next(out, o, &q, &g) != 1 || g.type != PR_BP_CHANGE ||
				    g.seq != f.seq || g.incarnation != f.incarnation ||
				    g.entry.name_len != f.entry.name_len ||
				    memcmp(g.entry.name, f.entry.name, f.entry.name_len) ||
				    g.entry.meta_len != f.entry.meta_len ||
				    (f.entry.meta_len &&
				     memcmp(g.entry.meta, f.entry.meta, f.entry.meta_len)))
					abort();
			}
		}
	}
	if (r == -EPROTONOSUPPORT && (f.version == PR_BP_VERSION || f.type == PR_BP_REFUSE))
		abort();
	if (r != 0 && r != -EBADMSG && r != -EPROTONOSUPPORT)
		abort();
}

static struct pr_bs *end_new(const char *node, bool dialer)
{
	struct pr_bs_config c = { .cookie = (const uint8_t *)COOKIE, .cookie_len = strlen(COOKIE),
				  .node = node, .incarnation = 1, .addr = "", .dialer = dialer };
	struct pr_bs *s;

	if (procreg__bs_new(&s, &c) < 0)
		abort();
	return s;
}

/* Hostile handshake frames into one end: it never comes up. */
static void handshake_stream(const uint8_t *data, size_t size, bool dialer)
{
	struct pr_bs *s = end_new("fuzzed", dialer);
	uint8_t reply[PR_BS_HELLO_MAX + 64];
	struct pr_bp_frame f;
	size_t pos = 0, start, n = 0;
	int r = PR_BS_MORE;

	if (dialer && procreg__bs_hello(s, reply, sizeof(reply), &n) < 0)
		abort();
	while (r == PR_BS_MORE && (start = pos, procreg__bp_next(data, size, &pos, &f)) == 1) {
		if (f.type == PR_BP_REFUSE)
			continue;
		n = 0;
		r = procreg__bs_handshake(s, data + start, &f, reply, sizeof(reply), &n);
		if (r == PR_BS_UP || n > sizeof(reply))
			abort();
		if (r < 0 && r != -EPROTO && r != -ELOOP && r != -EACCES && r != -EINVAL)
			abort();
	}
	procreg__bs_free(s);
}

/* Feed every frame of IN[0..len) to S; what it answers to OUT. */
static int feed(struct pr_bs *s, const uint8_t *in, size_t len, uint8_t *out, size_t cap,
		size_t *olen)
{
	struct pr_bp_frame f;
	size_t pos = 0, start;
	int r = PR_BS_MORE;

	*olen = 0;
	while (r == PR_BS_MORE && (start = pos, procreg__bp_next(in, len, &pos, &f)) == 1)
		r = procreg__bs_handshake(s, in + start, &f, out, cap, olen);
	return r;
}

/* Two ends through a genuine handshake: *D the dialer, *A the other. */
static void pair_up(struct pr_bs **d, struct pr_bs **a)
{
	uint8_t a1[PR_BS_HELLO_MAX + 64], a2[PR_BS_HELLO_MAX + 64];
	size_t l1 = 0, l2 = 0;

	*d = end_new("d", true);
	*a = end_new("a", false);
	if (procreg__bs_hello(*d, a1, sizeof(a1), &l1) < 0 ||
	    feed(*a, a1, l1, a2, sizeof(a2), &l2) != PR_BS_MORE ||
	    feed(*d, a2, l2, a1, sizeof(a1), &l1) != PR_BS_MORE ||
	    feed(*a, a1, l1, a2, sizeof(a2), &l2) != PR_BS_UP ||
	    feed(*d, a2, l2, a1, sizeof(a1), &l1) != PR_BS_UP)
		abort();
}

static void records(const uint8_t *data, size_t size)
{
	static uint8_t rec[PR_BS_REC_MAX], pt[PR_BS_PT_MAX];
	struct pr_bs *d, *a;
	size_t used, n;
	bool changed = false;
	int r;

	pair_up(&d, &a);
	/* Made up: never opened. */
	r = procreg__bs_open(a, data, size, &used, pt, &n);
	if (r == 1)
		abort();
	procreg__bs_free(a);
	/* A genuine record of the input's size, XORed with it. */
	if (size && size <= PR_BS_PT_MAX) {
		struct pr_bs *d2, *a3;

		pair_up(&d2, &a3);
		memset(pt, 0x5a, size);
		if (procreg__bs_seal(d2, pt, size, rec) < 0)
			abort();
		for (size_t i = 0; i < size; i++) {
			rec[PR_BS_REC_HDR + i] ^= data[i];
			changed |= data[i] != 0;
		}
		r = procreg__bs_open(a3, rec, size + PR_BS_OVERHEAD, &used, pt, &n);
		if (changed ? r == 1 : (r != 1 || n != size || pt[0] != 0x5a))
			abort();
		procreg__bs_free(d2);
		procreg__bs_free(a3);
	}
	procreg__bs_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	switch (data[0] % 4) {
	case 0:
		decode_stream(data + 1, size - 1);
		break;
	case 1:
	case 2:
		handshake_stream(data + 1, size - 1, data[0] % 4 == 2);
		break;
	case 3:
		records(data + 1, size - 1);
		break;
	}
	return 0;
}
