/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bridge_sec.h - the mesh's secure channel: the handshake that proves two
 * nodes hold the cluster's cookie and agrees on keys, and the encrypted
 * records every frame after it travels in. No I/O: the mesh
 * (tools/procregd/mesh.c) moves the bytes; tests and fuzzers feed it
 * anything. The design, and why it is this rather than TLS, is at the top
 * of bridge_sec.c.
 *
 * The handshake, four frames of bridge_proto.h in clear:
 *
 *   dialer                                    acceptor
 *   HELLO (name, incarnation, nonce, key) ->
 *                                          <- HELLO (the same, its own)
 *   AUTH (proof: dialer)                  ->
 *                                          <- AUTH (proof: acceptor)
 *   records ...                          <->  records ...
 *
 * The acceptor says nothing until the dialer's HELLO is acceptable, and
 * proves nothing until the dialer has proved itself. Both proofs and both
 * directions' keys come from the cookie, an X25519 exchange of the two
 * fresh keys, and a hash of both HELLOs exactly as they crossed the wire,
 * the dialer's first: a proof holds for one handshake, one role, and the
 * two identities in it, and for nothing else.
 *
 * A record:
 *
 *   u32 len       the record's length, this field included (little-endian)
 *   ciphertext    len - PR_BS_OVERHEAD bytes: AES-256-GCM of a piece of
 *                 the sender's stream of frames (records cut the stream
 *                 anywhere, a frame may span two)
 *   u8  tag[16]   over the ciphertext and, as associated data, len
 *
 * Each direction has its own key, and the nonce is the record's number in
 * that direction (4 zero bytes, then the number as a u64, little-endian),
 * counted by both ends, never sent: a record dropped, repeated, reordered,
 * altered, cut short or made up fails its tag. Every PR_BS_REKEY records a
 * direction's key is replaced by one derived from it.
 */
#ifndef PROCREG_BRIDGE_SEC_H
#define PROCREG_BRIDGE_SEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bridge_proto.h"

#define PR_BS_REC_HDR 4u
#define PR_BS_TAG 16u
#define PR_BS_OVERHEAD (PR_BS_REC_HDR + PR_BS_TAG)
#define PR_BS_PT_MAX 65536u                       /* plaintext in one record */
#define PR_BS_REC_MAX (PR_BS_PT_MAX + PR_BS_OVERHEAD)
#define PR_BS_REKEY (1ull << 20)                  /* records per key, each way */
/* A HELLO's size at most: what a connection must buffer in the handshake. */
#define PR_BS_HELLO_MAX (PR_BP_HDR + 8 + PR_BP_NONCE + PR_BP_KEY + 2 + PR_BP_NODE_MAX + PR_BP_ADDR_MAX)

/* One connection's channel. */
struct pr_bs;

struct pr_bs_config {
	const uint8_t *cookie;      /* copied, and wiped once the keys are made */
	size_t cookie_len;
	const char *node;           /* this node */
	uint64_t incarnation;
	const char *addr;           /* where this node may be dialed, or "" */
	bool dialer;                /* this end opened the connection */
};

/* The other end, as its HELLO says (authenticated once the channel is up). */
struct pr_bs_peer {
	char name[PR_BP_NODE_MAX + 1];
	char addr[PR_BP_ADDR_MAX + 1];
	uint64_t incarnation;
};

/* 0 and *S, or -ENOMEM, -EINVAL (a node name or address that breaks a
 * limit). */
int procreg__bs_new(struct pr_bs **s, const struct pr_bs_config *c);
void procreg__bs_free(struct pr_bs *s);

/* The dialer's HELLO, the first frame of the connection, appended to
 * OUT[*pos..cap). The acceptor's goes out from procreg__bs_handshake(). */
int procreg__bs_hello(struct pr_bs *s, uint8_t *out, size_t cap, size_t *pos);

enum { PR_BS_MORE = 0, PR_BS_UP = 1 };

/*
 * A handshake frame from the peer: RAW[0..f->len) as it arrived, F as
 * procreg__bp_next() decoded it. Appends what goes back, if anything, to
 * OUT[*pos..cap) (PR_BS_HELLO_MAX + 64 bytes is always room enough).
 * PR_BS_MORE: wait for the next frame; PR_BS_UP: the peer is authenticated
 * and records may flow. Negative, and the connection must end: -EPROTO (a
 * frame out of place), -ELOOP (the peer has this node's name), -EACCES
 * (its proof is wrong: another cookie, or a proof made for another
 * handshake), -EINVAL (a key that yields no shared secret), -EIO or
 * -ENOMEM (the crypto library failed).
 */
int procreg__bs_handshake(struct pr_bs *s, const uint8_t *raw, const struct pr_bp_frame *f,
			  uint8_t *out, size_t cap, size_t *pos);

/* The peer's HELLO, once it came (name "" before). */
const struct pr_bs_peer *procreg__bs_peer(const struct pr_bs *s);

/* Seal PT[0..len) (1..PR_BS_PT_MAX bytes) as the next record into OUT
 * (len + PR_BS_OVERHEAD bytes). 0, or -EINVAL (a bad length, or the channel
 * is not up), -EIO (the crypto library failed). */
int procreg__bs_seal(struct pr_bs *s, const uint8_t *pt, size_t len, uint8_t *out);

/* The record at IN[0..len): 1 with its plaintext in PT (room for the
 * record's length, as its first 4 bytes say, less PR_BS_OVERHEAD:
 * PR_BS_PT_MAX at most), its length in *PT_LEN and the record's in *USED;
 * 0 if IN does not hold a whole record yet (at most PR_BS_REC_MAX bytes
 * will be needed); -EBADMSG for a length no record has; -EACCES if it
 * fails authentication. After a negative return the channel is dead:
 * every later call fails. */
int procreg__bs_open(struct pr_bs *s, const uint8_t *in, size_t len, size_t *used, uint8_t *pt,
		     size_t *pt_len);

/* Tests: replace keys every RECORDS records instead of PR_BS_REKEY (both
 * ends must agree). */
void procreg__bs_set_rekey(struct pr_bs *s, uint64_t records);

#endif /* PROCREG_BRIDGE_SEC_H */
