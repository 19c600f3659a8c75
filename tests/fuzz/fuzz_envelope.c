/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fuzz_envelope.c - libFuzzer harness for the NATS backend's envelope
 * codec (bridge_envelope.c).
 *
 * The first byte of the input picks what the rest is:
 *  0  a NATS message as anyone on the server may publish it, opened on a
 *     fixed subject: whatever it holds, never a crash, never a read past
 *     it, and never opened (nobody without the cookie makes a MAC);
 *  1  the fields of an envelope (type, flags, sender length, then the
 *     counters, the sender and the body from the bytes that follow),
 *     sealed with the cookie: sealing refuses only what breaks a limit,
 *     and what it seals opens to exactly the fields it was given, its
 *     body inside the envelope;
 *  2  a mask over a genuine envelope: it opens exactly when the mask
 *     changed nothing, and then to the fields it was sealed with.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bridge_envelope.h"
#include "bridge_proto.h"

#define COOKIE "fuzz-cookie-0123456789"
#define SUBJ "procreg.default.node.node-a"

static uint8_t out[PR_ENV_MAX];

static const struct pr_env_key *key(void)
{
	static struct pr_env_key *k;

	if (!k && procreg__env_key_new((const uint8_t *)COOKIE, strlen(COOKIE), &k) < 0)
		abort();
	return k;
}

static uint64_t take64(const uint8_t **p, size_t *n)
{
	uint64_t v = 0;

	for (int i = 0; i < 8 && *n; i++, (*p)++, (*n)--)
		v |= (uint64_t)**p << (8 * i);
	return v;
}

static void same(const struct pr_env *a, const struct pr_env *b)
{
	if (a->type != b->type || a->flags != b->flags || a->sender_len != b->sender_len ||
	    memcmp(a->sender, b->sender, a->sender_len) || a->incarnation != b->incarnation ||
	    a->counter != b->counter || a->req != b->req || a->body_len != b->body_len ||
	    (a->body_len && memcmp(a->body, b->body, a->body_len)))
		abort();
}

static void hostile(const uint8_t *data, size_t size)
{
	struct pr_env e;
	int r = procreg__env_open(key(), SUBJ, data, size, &e);

	if (r == 0)
		abort(); /* a MAC made without the cookie */
	if (r != -ENOMSG && r != -EBADMSG && r != -EACCES && r != -EPROTONOSUPPORT && r != -EIO &&
	    r != -ENOMEM)
		abort();
}

static void sealed(const uint8_t *data, size_t size)
{
	struct pr_env e = { 0 }, got;
	size_t len = 0;
	int r;

	if (size < 3)
		return;
	e.type = data[0];
	e.flags = data[1];
	e.sender_len = data[2];
	data += 3;
	size -= 3;
	e.incarnation = take64(&data, &size);
	e.counter = take64(&data, &size);
	e.req = take64(&data, &size);
	if (e.sender_len > size)
		e.sender_len = size;
	e.sender = (const char *)data;
	e.body = data + e.sender_len;
	e.body_len = size - e.sender_len;
	r = procreg__env_seal(key(), SUBJ, &e, out, sizeof(out), &len);
	if (r == -EINVAL) {
		/* Only for a limit broken. */
		if (e.type != 0 && e.type < PR_ENV_TYPES &&
		    procreg__bp_valid_node(e.sender, e.sender_len) && e.body_len <= PR_BP_FRAME_MAX)
			abort();
		return;
	}
	if (r != 0 || len != procreg__env_size(&e))
		abort();
	if (procreg__env_open(key(), SUBJ, out, len, &got) != 0)
		abort();
	same(&e, &got);
	if (got.body < out || got.body + got.body_len > out + len)
		abort();
	/* On another subject, it is not the same message. */
	if (procreg__env_open(key(), SUBJ "x", out, len, &got) != -EACCES)
		abort();
}

static void masked(const uint8_t *data, size_t size)
{
	static const uint8_t body[] = "a body of no particular shape";
	struct pr_env e = { .type = PR_ENV_SNAP, .flags = 0, .sender = "node-a", .sender_len = 6,
			    .incarnation = 7, .counter = 8, .req = 9, .body = body,
			    .body_len = sizeof(body) }, got;
	size_t len = 0;
	int changed = 0;

	if (procreg__env_seal(key(), SUBJ, &e, out, sizeof(out), &len) != 0)
		abort();
	for (size_t i = 0; i < size && i < len; i++) {
		out[i] ^= data[i];
		changed |= data[i];
	}
	if ((procreg__env_open(key(), SUBJ, out, len, &got) == 0) == !!changed)
		abort();
	if (!changed)
		same(&e, &got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0]) {
	case 0: hostile(data + 1, size - 1); break;
	case 1: sealed(data + 1, size - 1); break;
	case 2: masked(data + 1, size - 1); break;
	default: break;
	}
	return 0;
}
