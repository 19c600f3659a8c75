/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_bridge_envelope.c - the NATS backend's envelope codec
 * (lib/bridge_envelope.c) on byte buffers: a round trip, every
 * truncation, every byte of a sealed envelope changed (each refused, and
 * refused for the right reason), another key or subject refused, and the
 * limits of sealing.
 *
 * Opened buffers are exact-size heap copies, so that under
 * AddressSanitizer a read one byte past an envelope is caught.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "harness.h"
#include "internal.h"
#include "bridge_envelope.h"
#include "bridge_proto.h"

#define COOKIE "an-envelope-cookie-0123456789"
#define SUBJ "procreg.default.node.node-a"

struct fx {
	struct pr_env_key *key;
	uint8_t body[256];
	size_t body_len;
	struct pr_env e;
	uint8_t buf[PR_ENV_MAX];
	size_t len;
};

static int setup(void **state)
{
	struct fx *x = calloc(1, sizeof(*x));
	struct pr_bp_entry ent = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 42,
				   .registered_ns = 9, .name = "svc", .name_len = 3 };

	assert_non_null(x);
	assert_int_equal(procreg__env_key_new((const uint8_t *)COOKIE, strlen(COOKIE), &x->key), 0);
	assert_int_equal(procreg__bp_put_change(x->body, sizeof(x->body), &x->body_len, 0x77, 5,
						"node-a", &ent), 0);
	assert_int_equal(procreg__bp_put_heartbeat(x->body, sizeof(x->body), &x->body_len, 0x77, 5),
			 0);
	x->e = (struct pr_env){ .type = PR_ENV_STREAM, .flags = PR_ENV_ANNOUNCE,
				.sender = "node-a", .sender_len = 6,
				.incarnation = 0x0102030405060708ull, .counter = 0x1112131415161718ull,
				.req = 0x2122232425262728ull, .body = x->body, .body_len = x->body_len };
	assert_int_equal(procreg__env_seal(x->key, SUBJ, &x->e, x->buf, sizeof(x->buf), &x->len), 0);
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct fx *x = *state;

	procreg__env_key_free(x->key);
	free(x);
	return 0;
}

/* Open BUF[0..len) from an exact-size copy. */
static int open_copy(const struct pr_env_key *k, const char *subj, const uint8_t *buf,
		     size_t len, struct pr_env *e, uint8_t **copy)
{
	*copy = malloc(len ? len : 1);
	assert_non_null(*copy);
	memcpy(*copy, buf, len);
	return procreg__env_open(k, subj, *copy, len, e);
}

static void test_roundtrip(void **state)
{
	struct fx *x = *state;
	struct pr_env got;
	uint8_t *c;

	assert_int_equal(x->len, procreg__env_size(&x->e));
	assert_int_equal(x->len, PR_ENV_FIXED + 6 + x->body_len + PR_BP_MAC);
	assert_memory_equal(x->buf, PR_ENV_MAGIC, 4);
	assert_int_equal(open_copy(x->key, SUBJ, x->buf, x->len, &got, &c), 0);
	assert_int_equal(got.type, PR_ENV_STREAM);
	assert_int_equal(got.flags, PR_ENV_ANNOUNCE);
	assert_int_equal(got.sender_len, 6);
	assert_memory_equal(got.sender, "node-a", 6);
	assert_int_equal(got.incarnation, x->e.incarnation);
	assert_int_equal(got.counter, x->e.counter);
	assert_int_equal(got.req, x->e.req);
	assert_int_equal(got.body_len, x->body_len);
	assert_memory_equal(got.body, x->body, x->body_len);
	assert_ptr_equal(got.body, c + PR_ENV_FIXED + 6);
	free(c);

	/* A snapshot request: no body at all. And a body of the biggest size. */
	for (int i = 0; i < 2; i++) {
		static uint8_t big[PR_BP_FRAME_MAX], out[PR_ENV_MAX];
		struct pr_env e = { .type = i ? PR_ENV_SNAP : PR_ENV_SNAPREQ, .sender = "b",
				    .sender_len = 1, .req = 3, .body = i ? big : NULL,
				    .body_len = i ? sizeof(big) : 0 };
		size_t len = 0;

		memset(big, 0xab, sizeof(big));
		assert_int_equal(procreg__env_seal(x->key, SUBJ, &e, out, sizeof(out), &len), 0);
		assert_int_equal(open_copy(x->key, SUBJ, out, len, &got, &c), 0);
		assert_int_equal(got.type, e.type);
		assert_int_equal(got.req, 3);
		assert_int_equal(got.body_len, e.body_len);
		if (i)
			assert_memory_equal(got.body, big, sizeof(big));
		free(c);
	}
}

/* Cut anywhere: never opened. Too short to be one, or cut inside its
 * sender: not an envelope, or malformed; cut later, the MAC is over
 * other bytes. */
static void test_truncated(void **state)
{
	struct fx *x = *state;
	struct pr_env got;
	uint8_t *c;

	for (size_t n = 0; n < x->len; n++) {
		int r = open_copy(x->key, SUBJ, x->buf, n, &got, &c);

		free(c);
		if (n < PR_ENV_FIXED + 1 + PR_BP_MAC)
			assert_int_equal(r, -ENOMSG);
		else if (n < PR_ENV_FIXED + 6 + PR_BP_MAC)
			assert_int_equal(r, -EBADMSG);
		else
			assert_int_equal(r, -EACCES);
	}
	/* One byte more: the MAC is not at the end any more. */
	{
		uint8_t *longer = calloc(1, x->len + 1);

		memcpy(longer, x->buf, x->len);
		assert_int_equal(open_copy(x->key, SUBJ, longer, x->len + 1, &got, &c), -EACCES);
		free(c);
		free(longer);
	}
}

/* Every byte changed, one at a time: refused, every time. The magic is
 * not an envelope; a sender length or a sender name that breaks the
 * rules is malformed (or, a longer length still in bounds, fails the
 * MAC); anything else fails the MAC. */
static void test_every_byte_corrupted(void **state)
{
	struct fx *x = *state;
	struct pr_env got;
	uint8_t *c;

	for (size_t i = 0; i < x->len; i++) {
		for (int flip = 0; flip < 3; flip++) {
			static const uint8_t masks[3] = { 0x01, 0x80, 0xff };
			uint8_t saved = x->buf[i];
			int r;

			x->buf[i] ^= masks[flip];
			r = open_copy(x->key, SUBJ, x->buf, x->len, &got, &c);
			free(c);
			x->buf[i] = saved;
			if (i < 4)
				assert_int_equal(r, -ENOMSG);
			else if (i == 6 || (i >= 7 && i < 13))
				assert_true(r == -EBADMSG || r == -EACCES);
			else
				assert_int_equal(r, -EACCES);
		}
	}
	/* Untouched, it still opens. */
	assert_int_equal(open_copy(x->key, SUBJ, x->buf, x->len, &got, &c), 0);
	free(c);
}

/* The MAC covers the subject and needs the cookie. */
static void test_other_subject_or_key(void **state)
{
	struct fx *x = *state;
	struct pr_env_key *other = NULL;
	struct pr_env got;
	uint8_t *c;

	assert_int_equal(open_copy(x->key, "procreg.default.node.node-b", x->buf, x->len, &got, &c),
			 -EACCES);
	free(c);
	assert_int_equal(open_copy(x->key, "", x->buf, x->len, &got, &c), -EACCES);
	free(c);
	assert_int_equal(procreg__env_key_new((const uint8_t *)"not-the-cookie", 14, &other), 0);
	assert_int_equal(open_copy(other, SUBJ, x->buf, x->len, &got, &c), -EACCES);
	free(c);
	procreg__env_key_free(other);
}

/* The MAC as bridge_envelope.h defines it, computed apart from the
 * codec: HMAC-SHA256(cookie, u16 subject_len, subject, the bytes before
 * it), into BUF[len - PR_BP_MAC..len). */
static void mac_by_hand(uint8_t *buf, size_t len, const char *subj)
{
	size_t sl = strlen(subj), n = 0;
	uint8_t *in = malloc(2 + sl + len);

	assert_non_null(in);
	in[0] = (uint8_t)sl;
	in[1] = (uint8_t)(sl >> 8);
	memcpy(in + 2, subj, sl);
	memcpy(in + 2 + sl, buf, len - PR_BP_MAC);
	assert_non_null(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, COOKIE, strlen(COOKIE), in,
				  2 + sl + len - PR_BP_MAC, buf + len - PR_BP_MAC, PR_BP_MAC, &n));
	assert_int_equal(n, PR_BP_MAC);
	free(in);
}

/* The layout, byte for byte, and the MAC over it, as the header says:
 * a codec that drifted from its documented format fails here. */
static void test_layout(void **state)
{
	struct fx *x = *state;
	uint8_t *copy = malloc(x->len);
	size_t at = 7 + 6;

	assert_non_null(copy);
	assert_int_equal(x->buf[4], PR_ENV_STREAM);
	assert_int_equal(x->buf[5], PR_ENV_ANNOUNCE);
	assert_int_equal(x->buf[6], 6);
	assert_memory_equal(x->buf + 7, "node-a", 6);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(x->buf[at + i], (uint8_t)(x->e.incarnation >> (8 * i)));
		assert_int_equal(x->buf[at + 8 + i], (uint8_t)(x->e.counter >> (8 * i)));
		assert_int_equal(x->buf[at + 16 + i], (uint8_t)(x->e.req >> (8 * i)));
	}
	assert_memory_equal(x->buf + at + 24, x->body, x->body_len);
	memcpy(copy, x->buf, x->len);
	mac_by_hand(copy, x->len, SUBJ);
	assert_memory_equal(copy, x->buf, x->len);
	free(copy);
}

/* A type this version does not know, from a node with the cookie:
 * authenticated, and still refused as such. */
static void test_unknown_type(void **state)
{
	struct fx *x = *state;
	static const uint8_t types[] = { 0, PR_ENV_TYPES, 0xff };
	struct pr_env got;
	uint8_t *c;

	x->e.type = PR_ENV_TYPES;
	assert_int_equal(procreg__env_seal(x->key, SUBJ, &x->e, x->buf, sizeof(x->buf), &x->len),
			 -EINVAL);
	x->e.type = PR_ENV_STREAM;
	assert_int_equal(procreg__env_seal(x->key, SUBJ, &x->e, x->buf, sizeof(x->buf), &x->len), 0);
	for (size_t i = 0; i < sizeof(types); i++) {
		x->buf[4] = types[i];
		mac_by_hand(x->buf, x->len, SUBJ);
		assert_int_equal(open_copy(x->key, SUBJ, x->buf, x->len, &got, &c),
				 -EPROTONOSUPPORT);
		free(c);
	}
	/* And a known one, MACed by hand, opens. */
	x->buf[4] = PR_ENV_SNAP;
	mac_by_hand(x->buf, x->len, SUBJ);
	assert_int_equal(open_copy(x->key, SUBJ, x->buf, x->len, &got, &c), 0);
	assert_int_equal(got.type, PR_ENV_SNAP);
	free(c);
}

/* Sealing checks its fields and its room. */
static void test_seal_limits(void **state)
{
	struct fx *x = *state;
	static uint8_t big[PR_BP_FRAME_MAX + 1], out[PR_ENV_MAX + 1];
	struct pr_env e = x->e;
	size_t len = 0;

	assert_int_equal(procreg__env_seal(x->key, SUBJ, &e, out, x->len - 1, &len), -ENOBUFS);
	assert_int_equal(procreg__env_seal(x->key, SUBJ, &e, out, x->len, &len), 0);
	assert_int_equal(len, x->len);
	assert_memory_equal(out, x->buf, x->len);
	e.body = big;
	e.body_len = sizeof(big);
	assert_int_equal(procreg__env_seal(x->key, SUBJ, &e, out, sizeof(out), &len), -EINVAL);
	e = x->e;
	e.sender = "bad/name";
	e.sender_len = 8;
	assert_int_equal(procreg__env_seal(x->key, SUBJ, &e, out, sizeof(out), &len), -EINVAL);
	e.sender_len = 0;
	assert_int_equal(procreg__env_seal(x->key, SUBJ, &e, out, sizeof(out), &len), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_layout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
		cmocka_unit_test_setup_teardown(test_every_byte_corrupted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_subject_or_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_type, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seal_limits, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
