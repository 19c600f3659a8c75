/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_bridge_sec.c - the mesh's secure channel (lib/bridge_sec.c) on
 * byte buffers: two ends taken through the handshake by hand, then
 * records; and every way a frame of either can be wrong, moved, reused or
 * forged.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "bridge_sec.h"

#define COOKIE "a-cookie-for-the-channel-tests"

static struct pr_bs *end_new(const char *node, bool dialer, const char *cookie)
{
	struct pr_bs_config c = { .cookie = (const uint8_t *)cookie, .cookie_len = strlen(cookie),
				  .node = node, .incarnation = 42, .addr = "127.0.0.1:4370",
				  .dialer = dialer };
	struct pr_bs *s;

	assert_int_equal(procreg__bs_new(&s, &c), 0);
	return s;
}

/* What one end sends: the frames in BUF[0..len). */
struct wire {
	uint8_t buf[4096];
	size_t len;
};

/* Feed every frame of W to S: the last result; what S answers goes to
 * OUT (reset first). */
static int feed(struct pr_bs *s, const struct wire *w, struct wire *out)
{
	size_t pos = 0;
	int r = PR_BS_MORE;

	out->len = 0;
	while (pos < w->len) {
		struct pr_bp_frame f;
		size_t start = pos;

		assert_int_equal(procreg__bp_next(w->buf, w->len, &pos, &f), 1);
		r = procreg__bs_handshake(s, w->buf + start, &f, out->buf, sizeof(out->buf), &out->len);
		if (r != PR_BS_MORE)
			break;
	}
	return r;
}

/* A whole handshake between D (dialer) and A: both up. The four frames
 * in H[0..4) if H is not NULL. */
static void handshake(struct pr_bs *d, struct pr_bs *a, struct wire *h)
{
	static struct wire w[4];

	if (!h)
		h = w;
	h[0].len = 0;
	assert_int_equal(procreg__bs_hello(d, h[0].buf, sizeof(h[0].buf), &h[0].len), 0);
	assert_int_equal(feed(a, &h[0], &h[1]), PR_BS_MORE);          /* its HELLO, no AUTH */
	assert_int_equal(feed(d, &h[1], &h[2]), PR_BS_MORE);          /* the dialer's AUTH */
	assert_int_equal(feed(a, &h[2], &h[3]), PR_BS_UP);            /* the acceptor's AUTH */
	{
		struct wire none;

		assert_int_equal(feed(d, &h[3], &none), PR_BS_UP);
		assert_int_equal(none.len, 0);
	}
}

static int frame_type(const struct wire *w)
{
	struct pr_bp_frame f;
	size_t pos = 0;

	assert_int_equal(procreg__bp_next(w->buf, w->len, &pos, &f), 1);
	assert_int_equal(pos, w->len); /* one frame */
	return f.type;
}

/* Seal PT on S into REC: its length. */
static size_t seal(struct pr_bs *s, const char *pt, uint8_t *rec)
{
	assert_int_equal(procreg__bs_seal(s, (const uint8_t *)pt, strlen(pt), rec), 0);
	return strlen(pt) + PR_BS_OVERHEAD;
}

/* Open the record REC[0..len) on S: the result, and the plaintext (NUL
 * terminated) in PT. */
static int open_rec(struct pr_bs *s, const uint8_t *rec, size_t len, char *pt)
{
	size_t used = 0, n = 0;
	int r = procreg__bs_open(s, rec, len, &used, (uint8_t *)pt, &n);

	if (r == 1) {
		assert_int_equal(used, len);
		pt[n] = 0;
	}
	return r;
}

static void test_handshake_and_records(void **state)
{
	struct pr_bs *d = end_new("dialer-node", true, COOKIE), *a = end_new("acceptor", false, COOKIE);
	struct wire h[4];
	static uint8_t rec[PR_BS_REC_MAX];
	static char pt[PR_BS_PT_MAX + 1];
	size_t n;

	(void)state;
	handshake(d, a, h);
	/* The frames in order, each end's identity on the other. */
	assert_int_equal(frame_type(&h[0]), PR_BP_HELLO);
	assert_int_equal(frame_type(&h[1]), PR_BP_HELLO);
	assert_int_equal(frame_type(&h[2]), PR_BP_AUTH);
	assert_int_equal(frame_type(&h[3]), PR_BP_AUTH);
	assert_string_equal(procreg__bs_peer(a)->name, "dialer-node");
	assert_string_equal(procreg__bs_peer(d)->name, "acceptor");
	assert_string_equal(procreg__bs_peer(d)->addr, "127.0.0.1:4370");
	assert_int_equal(procreg__bs_peer(d)->incarnation, 42);

	/* Records both ways; the plaintext is not in the record. */
	for (int i = 0; i < 10; i++) {
		n = seal(d, "payments unix:/run/p.sock", rec);
		assert_null(memmem(rec, n, "payments", 8));
		assert_int_equal(open_rec(a, rec, n, pt), 1);
		assert_string_equal(pt, "payments unix:/run/p.sock");
		n = seal(a, "the other way", rec);
		assert_int_equal(open_rec(d, rec, n, pt), 1);
		assert_string_equal(pt, "the other way");
	}
	/* A record in pieces: incomplete until whole. */
	n = seal(d, "in pieces", rec);
	for (size_t cut = 0; cut < n; cut++)
		assert_int_equal(open_rec(a, rec, cut, pt), 0);
	assert_int_equal(open_rec(a, rec, n, pt), 1);
	/* The largest record, and one too large to seal. */
	memset(pt, 'x', PR_BS_PT_MAX);
	assert_int_equal(procreg__bs_seal(d, (uint8_t *)pt, PR_BS_PT_MAX, rec), 0);
	assert_int_equal(open_rec(a, rec, PR_BS_REC_MAX, pt), 1);
	assert_int_equal(procreg__bs_seal(d, (uint8_t *)pt, PR_BS_PT_MAX + 1, rec), -EINVAL);
	assert_int_equal(procreg__bs_seal(d, (uint8_t *)pt, 0, rec), -EINVAL);
	procreg__bs_free(d);
	procreg__bs_free(a);
}

/* A record altered, replayed, reordered, dropped or made up: refused,
 * and the channel is dead from then on. */
static void test_records_tampered(void **state)
{
	static uint8_t r1[PR_BS_REC_MAX], r2[PR_BS_REC_MAX], x[PR_BS_REC_MAX];
	char pt[256];
	size_t n1, n2;

	(void)state;
	for (int kind = 0; kind < 6; kind++) {
		struct pr_bs *d = end_new("d", true, COOKIE), *a = end_new("a", false, COOKIE);
		int r = 0;

		handshake(d, a, NULL);
		n1 = seal(d, "change 1", r1);
		n2 = seal(d, "change 2", r2);
		switch (kind) {
		case 0: /* one bit of the ciphertext */
			r1[PR_BS_REC_HDR + 2] ^= 0x10;
			r = open_rec(a, r1, n1, pt);
			break;
		case 1: /* one bit of the tag */
			r1[n1 - 1] ^= 1;
			r = open_rec(a, r1, n1, pt);
			break;
		case 2: /* replayed */
			assert_int_equal(open_rec(a, r1, n1, pt), 1);
			r = open_rec(a, r1, n1, pt);
			break;
		case 3: /* reordered (or the first dropped) */
			r = open_rec(a, r2, n2, pt);
			break;
		case 4: /* the length: a shorter record ends inside this one */
			memcpy(x, r1, n1);
			x[0] = (uint8_t)(n1 - 1);
			r = open_rec(a, x, n1 - 1, pt);
			break;
		case 5: /* made up by someone without the keys */
			memset(x, 0x41, n1);
			x[0] = (uint8_t)n1, x[1] = x[2] = x[3] = 0;
			r = open_rec(a, x, n1, pt);
			break;
		}
		assert_int_equal(r, -EACCES);
		/* Dead: even the genuine next record is refused now. */
		assert_int_equal(open_rec(a, r2, n2, pt), -EACCES);
		procreg__bs_free(d);
		procreg__bs_free(a);
	}
	/* A length no record has. */
	{
		struct pr_bs *d = end_new("d", true, COOKIE), *a = end_new("a", false, COOKIE);

		handshake(d, a, NULL);
		memset(x, 0, 64);
		x[0] = PR_BS_OVERHEAD; /* nothing inside */
		assert_int_equal(open_rec(a, x, 64, pt), -EBADMSG);
		procreg__bs_free(d);
		procreg__bs_free(a);
		d = end_new("d", true, COOKIE), a = end_new("a", false, COOKIE);
		handshake(d, a, NULL);
		x[0] = 0xff, x[1] = 0xff, x[2] = 0x01; /* over PR_BS_REC_MAX */
		assert_int_equal(open_rec(a, x, 64, pt), -EBADMSG);
		procreg__bs_free(d);
		procreg__bs_free(a);
	}
}

/* Another cookie: the acceptor refuses the dialer's proof and proves
 * nothing itself; the dialer would refuse the acceptor's too. */
static void test_wrong_cookie(void **state)
{
	struct pr_bs *d = end_new("d", true, "another-cookie-entirely");
	struct pr_bs *a = end_new("a", false, COOKIE);
	struct wire h[4];

	(void)state;
	h[0].len = 0;
	assert_int_equal(procreg__bs_hello(d, h[0].buf, sizeof(h[0].buf), &h[0].len), 0);
	assert_int_equal(feed(a, &h[0], &h[1]), PR_BS_MORE);
	assert_int_equal(feed(d, &h[1], &h[2]), PR_BS_MORE);
	assert_int_equal(feed(a, &h[2], &h[3]), -EACCES);
	assert_int_equal(h[3].len, 0);
	procreg__bs_free(d);
	procreg__bs_free(a);
}

/* A proof is good for its own handshake, its own role, and nothing else:
 * the relay protocol 2 allowed (a dialer's proof for node a, or a's, shown to c)
 * and a reflection (a proof sent back to its maker) are refused. */
static void test_proofs_do_not_travel(void **state)
{
	struct pr_bs *d1 = end_new("x", true, COOKIE), *a = end_new("a", false, COOKIE);
	struct pr_bs *d2 = end_new("x", true, COOKIE), *c = end_new("c", false, COOKIE);
	struct pr_bs *d3 = end_new("y", true, COOKIE), *e = end_new("e", false, COOKIE);
	struct wire h1[4], h2[4], h3[4], none;

	(void)state;
	/* Two handshakes of the same dialer name, to a and to c, up to the
	 * dialer's proofs. */
	h1[0].len = h2[0].len = h3[0].len = 0;
	assert_int_equal(procreg__bs_hello(d1, h1[0].buf, sizeof(h1[0].buf), &h1[0].len), 0);
	assert_int_equal(feed(a, &h1[0], &h1[1]), PR_BS_MORE);
	assert_int_equal(feed(d1, &h1[1], &h1[2]), PR_BS_MORE);
	assert_int_equal(procreg__bs_hello(d2, h2[0].buf, sizeof(h2[0].buf), &h2[0].len), 0);
	assert_int_equal(feed(c, &h2[0], &h2[1]), PR_BS_MORE);
	assert_int_equal(feed(d2, &h2[1], &h2[2]), PR_BS_MORE);
	/* The proof made for a, shown to c: refused, and c proves nothing. */
	assert_int_equal(feed(c, &h1[2], &none), -EACCES);
	assert_int_equal(none.len, 0);
	/* Reflection: a dialer's own proof sent back to it. */
	assert_int_equal(procreg__bs_hello(d3, h3[0].buf, sizeof(h3[0].buf), &h3[0].len), 0);
	assert_int_equal(feed(e, &h3[0], &h3[1]), PR_BS_MORE);
	assert_int_equal(feed(d3, &h3[1], &h3[2]), PR_BS_MORE);
	assert_int_equal(feed(d3, &h3[2], &none), -EACCES);
	/* The genuine handshake with a still completes. */
	assert_int_equal(feed(a, &h1[2], &h1[3]), PR_BS_UP);
	assert_int_equal(feed(d1, &h1[3], &none), PR_BS_UP);
	procreg__bs_free(d1);
	procreg__bs_free(a);
	procreg__bs_free(d2);
	procreg__bs_free(c);
	procreg__bs_free(d3);
	procreg__bs_free(e);
}

/* A HELLO altered on the way (its address rewritten, say): the two ends
 * hash different transcripts, and the proofs fail. */
static void test_hello_altered(void **state)
{
	struct pr_bs *d = end_new("d", true, COOKIE), *a = end_new("a", false, COOKIE);
	struct wire h[4];

	(void)state;
	h[0].len = 0;
	assert_int_equal(procreg__bs_hello(d, h[0].buf, sizeof(h[0].buf), &h[0].len), 0);
	h[0].buf[h[0].len - 1] ^= 1; /* the last byte of the address: '0' -> '1' */
	assert_int_equal(feed(a, &h[0], &h[1]), PR_BS_MORE);
	assert_int_equal(feed(d, &h[1], &h[2]), PR_BS_MORE);
	assert_int_equal(feed(a, &h[2], &h[3]), -EACCES);
	procreg__bs_free(d);
	procreg__bs_free(a);
}

/* Frames out of place, our own name, a key that gives no secret. */
static void test_handshake_misuse(void **state)
{
	struct pr_bs *d = end_new("d", true, COOKIE), *a = end_new("a", false, COOKIE);
	struct wire h[4], w;
	uint8_t zero[PR_BP_NONCE] = { 0 }, rec[64];

	(void)state;
	/* An AUTH first. */
	w.len = 0;
	assert_int_equal(procreg__bp_put_auth(w.buf, sizeof(w.buf), &w.len, zero), 0);
	assert_int_equal(feed(a, &w, &h[1]), -EPROTO);
	/* Records before the handshake is over. */
	assert_int_equal(procreg__bs_seal(d, zero, 4, rec), -EINVAL);
	procreg__bs_free(a);
	/* The acceptor may not speak first to a dialer that has not. */
	a = end_new("a", false, COOKIE);
	w.len = 0;
	assert_int_equal(procreg__bs_hello(a, w.buf, sizeof(w.buf), &w.len), -EPROTO);
	assert_int_equal(procreg__bp_put_hello(w.buf, sizeof(w.buf), &w.len, 1, zero, zero, "z", ""), 0);
	assert_int_equal(feed(d, &w, &h[1]), -EPROTO);
	procreg__bs_free(d);
	/* A dialer with the acceptor's name. */
	d = end_new("a", true, COOKIE);
	h[0].len = 0;
	assert_int_equal(procreg__bs_hello(d, h[0].buf, sizeof(h[0].buf), &h[0].len), 0);
	assert_int_equal(feed(a, &h[0], &h[1]), -ELOOP);
	procreg__bs_free(a);
	procreg__bs_free(d);
	/* An all-zero key: no shared secret. */
	a = end_new("a", false, COOKIE);
	w.len = 0;
	assert_int_equal(procreg__bp_put_hello(w.buf, sizeof(w.buf), &w.len, 1, zero, zero, "z", ""), 0);
	assert_int_equal(feed(a, &w, &h[1]), -EINVAL);
	procreg__bs_free(a);
}

/* Keys are replaced every so many records, on both ends at the same
 * record: with the same interval records flow past it; with another, the
 * first record after the first replacement fails. */
static void test_rekey(void **state)
{
	static uint8_t rec[PR_BS_REC_MAX];
	char pt[64];

	(void)state;
	for (int same = 1; same >= 0; same--) {
		struct pr_bs *d = end_new("d", true, COOKIE), *a = end_new("a", false, COOKIE);
		int failed_at = -1;

		handshake(d, a, NULL);
		procreg__bs_set_rekey(d, 4);
		procreg__bs_set_rekey(a, same ? 4 : 8);
		for (int i = 0; i < 20 && failed_at < 0; i++) {
			size_t n = seal(d, "tick", rec);

			if (open_rec(a, rec, n, pt) != 1)
				failed_at = i;
		}
		assert_int_equal(failed_at, same ? -1 : 4);
		procreg__bs_free(d);
		procreg__bs_free(a);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handshake_and_records),
		cmocka_unit_test(test_records_tampered),
		cmocka_unit_test(test_wrong_cookie),
		cmocka_unit_test(test_proofs_do_not_travel),
		cmocka_unit_test(test_hello_altered),
		cmocka_unit_test(test_handshake_misuse),
		cmocka_unit_test(test_rekey),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
