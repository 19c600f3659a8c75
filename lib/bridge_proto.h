/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bridge_proto.h - the replication protocol between procregd nodes,
 * version 3.
 *
 * Transport: a byte stream (the built-in TCP mesh) carrying frames back to
 * back. Unlike the local protocol this crosses hosts, so every integer is
 * little-endian on the wire whatever the host, and every byte that arrives
 * is hostile until checked. Every frame starts with an 8-byte header:
 *
 *   u32 len      frame length including the header, PR_BP_FRAME_MAX at most
 *   u8  type     enum pr_bp_type
 *   u8  version  PR_BP_VERSION
 *   u16 flags    per type (SNAP: PR_BP_SNAP_LAST)
 *
 * Bodies:
 *   HELLO      u64 incarnation, u8 nonce[32], u8 key[32] (an X25519
 *              public key, fresh for this connection), u8 name_len, name,
 *              u8 addr_len, addr (where the sender may be dialed,
 *              "host:port", may be empty). The handshake's first two
 *              frames, in clear: the dialer's, then the other side's.
 *   AUTH       u8 proof[32]: the sender holds the cookie and took part in
 *              this very handshake (bridge_sec.h). The third and fourth
 *              frames: the dialer's first, the other side's only once the
 *              dialer's checked out.
 *   REFUSE     u8 reason (enum pr_bp_refuse), u8 text_len, text (printable
 *              ASCII): why the sender drops the connection, in clear and
 *              unauthenticated, for the log only. Its layout is the same
 *              in every version from 3 on, and it is decoded whatever its
 *              version byte says, so a node can tell one of another
 *              version why.
 *   HEARTBEAT  u64 incarnation, u64 seq (the sender's newest change).
 *   PEERS      u16 count, then count x (u8 name_len, name, u8 addr_len,
 *              addr): the nodes the sender is connected to (full mesh).
 *              An empty one is also the mesh's sign of life to a node
 *              whose snapshot waits its turn (no HEARTBEAT before it).
 *   SNAP       u64 incarnation, u64 seq (the snapshot is as of this
 *              change), u32 part, u16 count, count entries. A snapshot
 *              is one or more SNAP frames, numbered by part from 0 up,
 *              all with the same seq; the last has PR_BP_SNAP_LAST. A
 *              receiver applies parts only in order, holding one that
 *              comes early; a repeated or stray part is refused, and a
 *              missing one, like a gap in CHANGE frames, is noticed and
 *              brings a fresh snapshot (a transport that may lose a
 *              frame, as NATS may, would otherwise lose the entries in
 *              it for good).
 *   CHANGE     u64 incarnation, u64 seq, u8 origin_len, origin, one entry.
 *
 * Over the mesh, HEARTBEAT, PEERS, SNAP and CHANGE travel only inside the
 * encrypted records of bridge_sec.h, once the handshake is over; over
 * NATS, inside its MACed envelopes (nats.c).
 *
 * An entry: u8 op (PUT, DEL), u8 kind (PR_KIND_NAME or PR_KIND_MEMBER),
 * u8 flags (PROCREG_ENTRY_*), u8 reserved, u32 pid, u32 uid,
 * u64 start_time, u64 registered_ns, u16 name_len, u16 meta_len, name,
 * meta. For a MEMBER, name is the group.
 *
 * Versions: 1 had no part in SNAP. 2 added it. 3 replaced the handshake
 * (HELLO carries a key; AUTH is bound to both HELLOs; REFUSE) and put
 * everything after it in encrypted records. Nodes of different versions
 * refuse each other (the version byte), so a mixed cluster does not
 * replicate rather than replicate wrong; procreg__bp_next() tells a frame
 * of another version apart from garbage, so the refusal can say why.
 *
 * Decoding works on byte buffers (no I/O, no crypto): tests and fuzzers
 * feed it anything.
 */
#ifndef PROCREG_BRIDGE_PROTO_H
#define PROCREG_BRIDGE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "procreg.h"

#define PR_BP_VERSION 3u
#define PR_BP_HDR 8u
#define PR_BP_FRAME_MAX 65536u
#define PR_BP_NONCE 32u
#define PR_BP_MAC 32u         /* an AUTH proof */
#define PR_BP_KEY 32u         /* an X25519 public key */
#define PR_BP_TEXT_MAX 255u   /* a REFUSE's text */
#define PR_BP_NODE_MAX 63u     /* node name: 1..63 of [A-Za-z0-9_.@-] */
#define PR_BP_ADDR_MAX 127u    /* "host:port", printable ASCII */
#define PR_BP_ENTRY_HDR 32u
#define PR_BP_PEERS_MAX 1024u

#define PR_BP_SNAP_LAST 0x1

enum pr_bp_type {
	PR_BP_HELLO = 1,
	PR_BP_AUTH = 2,
	PR_BP_HEARTBEAT = 3,
	PR_BP_PEERS = 4,
	PR_BP_SNAP = 5,
	PR_BP_CHANGE = 6,
	PR_BP_REFUSE = 7,
};

/* Why a REFUSE: a node of a later version may send a reason this one does
 * not know (it is logged as a number). */
enum pr_bp_refuse {
	PR_BP_REFUSE_VERSION = 1,   /* another protocol version */
	PR_BP_REFUSE_AUTH = 2,      /* the AUTH proof did not check out */
	PR_BP_REFUSE_NAME = 3,      /* the peer has the receiver's node name */
	PR_BP_REFUSE_PROTO = 4,     /* a frame out of place in the handshake */
	PR_BP_REFUSE_TIMEOUT = 5,   /* the handshake took too long */
};

enum pr_bp_op { PR_BP_PUT = 1, PR_BP_DEL = 2 };

/* One name or membership, as it travels. Strings point into the frame;
 * they are not NUL-terminated. */
struct pr_bp_entry {
	uint8_t op;                 /* enum pr_bp_op */
	uint8_t kind;               /* PR_KIND_NAME or PR_KIND_MEMBER */
	uint8_t flags;              /* PROCREG_ENTRY_* */
	uint32_t pid;
	uint32_t uid;
	uint64_t start_time;
	uint64_t registered_ns;
	const char *name;
	size_t name_len;
	const void *meta;
	size_t meta_len;
};

struct pr_bp_peer {
	const char *name;
	size_t name_len;
	const char *addr;
	size_t addr_len;
};

/* A decoded frame: points into the buffer it came from. */
struct pr_bp_frame {
	uint8_t type;
	uint8_t version;            /* the header's */
	uint16_t flags;
	uint32_t len;
	uint64_t incarnation;       /* HELLO, HEARTBEAT, SNAP, CHANGE */
	uint64_t seq;               /* HEARTBEAT, SNAP, CHANGE */
	const uint8_t *nonce;       /* HELLO */
	const uint8_t *key;         /* HELLO */
	const uint8_t *mac;         /* AUTH: the proof */
	uint8_t reason;             /* REFUSE */
	const char *text;           /* REFUSE */
	size_t text_len;
	const char *name;           /* HELLO: the sender; CHANGE: the origin */
	size_t name_len;
	const char *addr;           /* HELLO */
	size_t addr_len;
	uint32_t part;              /* SNAP: its place in the snapshot, from 0 */
	uint32_t count;             /* PEERS, SNAP: checked against the body */
	const uint8_t *items;       /* PEERS, SNAP: the first item */
	size_t items_len;
	struct pr_bp_entry entry;   /* CHANGE */
};

/* The frame at BUF[*pos..len): 1 with *F filled and *pos past it; 0 if
 * the buffer does not yet hold a whole frame (read more: at most
 * PR_BP_FRAME_MAX bytes will be needed); -EBADMSG if it is not a valid
 * frame (drop the connection). Every length, count and name inside is
 * checked before 1 is returned. -EPROTONOSUPPORT for a frame header of
 * another protocol version (a known type, a length in bounds): F has its
 * version, type and length, *pos does not move. A REFUSE is decoded
 * whatever its version. */
int procreg__bp_next(const uint8_t *buf, size_t len, size_t *pos, struct pr_bp_frame *f);

/* The next entry of a SNAP frame's items, or peer of a PEERS frame:
 * *ITEM_POS starts at 0. 1 and filled, 0 at the end. (procreg__bp_next
 * already checked them all.) */
int procreg__bp_snap_entry(const struct pr_bp_frame *f, size_t *item_pos,
			   struct pr_bp_entry *e);
int procreg__bp_peer(const struct pr_bp_frame *f, size_t *item_pos, struct pr_bp_peer *p);

/* 1 if S[0..n) is a valid node name. */
int procreg__bp_valid_node(const char *s, size_t n);

/* Encoders: append to BUF (capacity CAP) at *pos. -ENOBUFS when the frame
 * does not fit; -EINVAL for an argument that breaks a limit. */
int procreg__bp_put_hello(uint8_t *buf, size_t cap, size_t *pos, uint64_t incarnation,
			  const uint8_t nonce[PR_BP_NONCE], const uint8_t key[PR_BP_KEY],
			  const char *name, const char *addr);
int procreg__bp_put_auth(uint8_t *buf, size_t cap, size_t *pos, const uint8_t mac[PR_BP_MAC]);
/* TEXT: printable ASCII, PR_BP_TEXT_MAX bytes at most (longer is cut). */
int procreg__bp_put_refuse(uint8_t *buf, size_t cap, size_t *pos, uint8_t reason,
			   const char *text);
int procreg__bp_put_heartbeat(uint8_t *buf, size_t cap, size_t *pos, uint64_t incarnation,
			      uint64_t seq);
int procreg__bp_put_change(uint8_t *buf, size_t cap, size_t *pos, uint64_t incarnation,
			   uint64_t seq, const char *origin, const struct pr_bp_entry *e);

/* PEERS and SNAP are built in steps: begin, add items, end. The frame at
 * *start is incomplete until end. add returns -ENOBUFS when the item does
 * not fit: end this frame and begin another (a SNAP: with PART one up).
 * INCARNATION, SEQ and PART are for SNAP; PEERS ignores them. */
int procreg__bp_begin(uint8_t *buf, size_t cap, size_t *pos, uint8_t type,
		      uint64_t incarnation, uint64_t seq, uint32_t part, size_t *start);
int procreg__bp_add_entry(uint8_t *buf, size_t cap, size_t *pos, size_t start,
			  const struct pr_bp_entry *e);
int procreg__bp_add_peer(uint8_t *buf, size_t cap, size_t *pos, size_t start,
			 const char *name, const char *addr);
void procreg__bp_end(uint8_t *buf, size_t pos, size_t start, uint16_t flags);

/* Bytes an entry takes on the wire. */
size_t procreg__bp_entry_size(const struct pr_bp_entry *e);

#endif /* PROCREG_BRIDGE_PROTO_H */
