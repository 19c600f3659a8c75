/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bridge_envelope.h - the envelope the NATS bridge backend
 * (tools/procregd/nats.c) wraps replication frames in: one NATS message,
 * one envelope. Encoding and decoding work on byte buffers (no I/O), so
 * tests and fuzzers feed them anything; the MAC is HMAC-SHA256 through
 * OpenSSL.
 *
 * Every integer little-endian:
 *   u8  magic[4]    "PRN1"
 *   u8  type        enum pr_env_type
 *   u8  flags       PR_ENV_ANNOUNCE
 *   u8  sender_len, sender (a node name: 1..PR_BP_NODE_MAX of
 *                   [A-Za-z0-9_.@-])
 *   u64 incarnation the sender's
 *   u64 counter     the sender's, one up per message it sends (any subject),
 *                   from its wall clock in ns when it started: higher in a
 *                   later incarnation than in any earlier one
 *   u64 req         SNAPREQ: the request's id; SNAP: the id it answers
 *   ... body        frames back to back (STREAM), one frame (SNAP),
 *                   nothing (SNAPREQ); PR_BP_FRAME_MAX bytes at most
 *   u8  mac[32]     HMAC-SHA256(cookie, u16 subject_len, subject, all the above)
 *
 * The subject the message travels on is under the MAC, so a message
 * cannot be moved to another subject; the counter lets a receiver refuse
 * a replay (nats.c keeps the newest per sender and type). The body is
 * not decoded here: the frames in it are bridge_proto.h's, checked by
 * procreg__bp_next().
 */
#ifndef PROCREG_BRIDGE_ENVELOPE_H
#define PROCREG_BRIDGE_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#include "bridge_proto.h"

#define PR_ENV_MAGIC "PRN1"
#define PR_ENV_FIXED (4 + 1 + 1 + 1 + 8 + 8 + 8)   /* without sender, body, MAC */
#define PR_ENV_MAX (PR_ENV_FIXED + PR_BP_NODE_MAX + PR_BP_FRAME_MAX + PR_BP_MAC)
#define PR_ENV_SUBJECT_MAX 65535u  /* its length is a u16 under the MAC */
#define PR_ENV_ANNOUNCE 0x1        /* the sender just (re)connected: tell it we are here */

enum pr_env_type {
	PR_ENV_STREAM = 1,          /* the sender's CHANGE and HEARTBEAT frames */
	PR_ENV_SNAPREQ = 2,         /* a request for the receiver's snapshot */
	PR_ENV_SNAP = 3,            /* one SNAP frame, answering a request */
	PR_ENV_TYPES
};

/* One envelope. Decoded, SENDER and BODY point into the buffer it came
 * from (SENDER is not NUL-terminated). */
struct pr_env {
	uint8_t type;               /* enum pr_env_type */
	uint8_t flags;
	const char *sender;
	size_t sender_len;
	uint64_t incarnation;
	uint64_t counter;
	uint64_t req;
	const uint8_t *body;
	size_t body_len;
};

/* The MAC's key: the cluster cookie, keyed once. */
struct pr_env_key;

/* A key from COOKIE (copied: the caller may wipe its own): 0, or
 * -ENOMEM / -EIO. */
int procreg__env_key_new(const uint8_t *cookie, size_t len, struct pr_env_key **out);
void procreg__env_key_free(struct pr_env_key *k);

/* Bytes E takes as an envelope. */
size_t procreg__env_size(const struct pr_env *e);

/* E as an envelope for SUBJECT, MACed with K, into BUF (capacity CAP):
 * its length in *LEN. -EINVAL for a field that breaks a limit (a sender
 * that is not a node name, an unknown type, a body over
 * PR_BP_FRAME_MAX, a subject over PR_ENV_SUBJECT_MAX); -ENOBUFS when it
 * does not fit; -EIO if the MAC cannot be computed. */
int procreg__env_seal(const struct pr_env_key *k, const char *subject, const struct pr_env *e,
		      uint8_t *buf, size_t cap, size_t *len);

/* The envelope in BUF[0..len), received on SUBJECT: 0 with *E filled, or
 *   -ENOMSG           not an envelope (too short, no magic);
 *   -EBADMSG          malformed (a sender that is not a node name, a
 *                     length past the end, a body over PR_BP_FRAME_MAX);
 *   -EACCES           the MAC does not check out (another cookie, forged,
 *                     or moved from another subject);
 *   -EPROTONOSUPPORT  authenticated, but of a type this version does not
 *                     know;
 *   -EIO              the MAC could not be computed.
 * Nothing of an envelope that fails the MAC is trusted: *E is filled
 * only on 0. */
int procreg__env_open(const struct pr_env_key *k, const char *subject, const uint8_t *buf,
		      size_t len, struct pr_env *e);

#endif /* PROCREG_BRIDGE_ENVELOPE_H */
