/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * proto.h - the daemon protocol, version 1.
 *
 * Transport: a SOCK_SEQPACKET unix socket. One packet carries one or more
 * frames, back to back, PR_PACKET_MAX bytes at most. Every frame starts with
 * this 16-byte header (host byte order: both ends are on one host):
 *
 *   u16 op       request op, or op | PR_OP_REPLY in a reply
 *   u16 flags
 *   u32 len      frame length including the header, a multiple of 8
 *   u32 id       chosen by the client, echoed in the reply
 *   i32 status   0 in requests; 0 or a negative errno in replies
 *
 * The daemon answers each packet with one packet holding one reply frame per
 * request frame, in order. A client may send many packets before reading
 * replies (pipelining); the daemon stops reading a client whose replies it
 * cannot send, so a client that never reads only stalls itself.
 *
 * Requests:
 *   HELLO       u32 version, u32 flags[, u64 zero]. Must be the first frame
 *               of a connection, alone in its packet; may carry the client's
 *               own pidfd (pidfd_open(getpid())) as SCM_RIGHTS, which the
 *               daemon uses where the kernel lacks SO_PEERPIDFD. Reply: u32
 *               version, u32 zero[, u64 arm].
 *               flags PR_HELLO_NOTICES: the client takes notices (LOST,
 *               below) on this connection, between replies;
 *               PR_HELLO_QUIET: nothing is sent back on this connection, not
 *               even the reply to HELLO (see below);
 *               PR_HELLO_NOFILES (with the u64): the client will pass no
 *               file on this connection after its HELLO unless it sends
 *               FILES first. Where the kernel can refuse them
 *               (SO_PASSRIGHTS, Linux 6.16), the daemon has it do so and
 *               answers with a random non-zero arm; else arm is 0, and
 *               files pass as ever.
 *   ARM         u64 arm, alone in its packet, unanswered: the first packet
 *               after a HELLO reply whose arm is not 0, with that arm. A
 *               packet sent after it is taken in one call instead of peeked
 *               first (server.c): only a client that has the reply knows
 *               the arm, and it was sent after the kernel began to refuse
 *               files. A wrong arm closes the connection.
 *   FILES       empty: files pass again on this connection (after a
 *               PR_HELLO_NOFILES HELLO), from the reply on.
 *   REGISTER    u16 name_len, u16 meta_len, u32 lease_ms; name; meta.
 *               flags PR_F_PIDFD: the owner is the process of the pidfd
 *               passed as SCM_RIGHTS with this packet (one frame per packet);
 *               PR_F_QUEUE, PR_F_REPLACE, PR_F_REPLACEABLE, PR_F_LEASE_MARK
 *               below. A queued request is answered -EINPROGRESS; the name
 *               is published for it (event TRANSFERRED) when its turn comes.
 *               lease_ms > 0: the owner must REFRESH within that time.
 *               flags bits 8..14 (PR_F_SIGNAL): a signal number, 0 for
 *               none; the owner gets that signal if it loses a name to
 *               another node's registration (it applies to the process).
 *   UNREGISTER  u16 name_len, u16 reserved, u32 reserved; name.
 *   SYNC        empty. Answered after every death already signalled.
 *   JOIN        as REGISTER; the name is a group, the metadata the
 *               membership's (PR_F_PIDFD as for REGISTER; lease_ms > 0: the
 *               member must REFRESH the group within that time).
 *   LEAVE       as UNREGISTER; the name is a group.
 *   REFRESH     as UNREGISTER: renews the name's lease (owner's uid or root)
 *               and the sender's own membership lease of the group so named.
 *   SUBSCRIBE   empty. From then on the daemon sends a NOTIFY | REPLY frame
 *               (id 0, empty) on this connection after each batch of work
 *               that published events: a readable socket says "look at
 *               the feed". One that finds the socket full is dropped, and
 *               none is sent until the socket has room again (the client
 *               read), then one if any was dropped meanwhile.
 *   FOLLOW      empty. A thread of the client may sleep on the change
 *               feed's futex (feed.c): from the reply on, and while the
 *               connection lasts, the daemon wakes the futex after each
 *               batch of work that published events. Without a connection
 *               that said it, it only bumps the futex word.
 *   READERS     empty, alone in its packet, with one reader page (a sealed
 *               memfd: rcu.c) as SCM_RIGHTS. The daemon maps it and waits
 *               for its slots in every grace period until the sender exits.
 *               -EPERM for a page not sealed or not whole, -EUSERS past the
 *               reader quotas (the sender's reads stay correct, unprotected:
 *               rcu.c), -EEXIST for a page it already has.
 *
 * A client may send and close without reading: with PR_HELLO_QUIET in its
 * HELLO, the daemon sends nothing back on that connection (no reply left
 * unread when the client closes, which would reset the connection and
 * lose the packets still queued), and handles every packet sent before
 * the close. That is how readers hand over their pages without waiting
 * for the daemon.
 *
 * File descriptors (SCM_RIGHTS): a packet carries one at most, and only if
 * one of its frames takes it (HELLO; REGISTER or JOIN with PR_F_PIDFD;
 * READERS). A packet with more fds than that, with fds and no frame taking
 * one, or whose data or control data was cut (over PR_PACKET_MAX) closes
 * its connection unanswered; none of its frames is carried out. The daemon
 * closes every fd it receives, keeping a copy only of a pidfd it accepts
 * (and a mapping of a reader page).
 *
 * Notices, from the daemon unasked, each in a packet of its own, only on a
 * connection whose HELLO set PR_HELLO_NOTICES:
 *   LOST        op PR_OP_LOST | PR_OP_REPLY, id 0: u16 name_len,
 *               u16 node_len, u32 reason (PROCREG_LOST_*), u32 winner pid,
 *               u32 reserved, u64 time_ns (CLOCK_REALTIME); name; node.
 *               A name of the process at the other end was taken from it
 *               (sent to each of its connections that asked).
 *
 * A malformed frame is answered with -EBADMSG (the rest of its packet with
 * -ECANCELED) where its header could be read, else the connection closes.
 * Parsing and encoding work on byte buffers (no I/O), so tests and fuzzers
 * can feed them anything.
 */
#ifndef PROCREG_PROTO_H
#define PROCREG_PROTO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "procreg.h"

#define PR_PROTO_VERSION 1u
#define PR_PACKET_MAX 65536u
#define PR_FRAME_HDR 16u

enum pr_op {
	PR_OP_HELLO = 1,
	PR_OP_REGISTER = 2,
	PR_OP_UNREGISTER = 3,
	PR_OP_SYNC = 4,
	PR_OP_JOIN = 5,
	PR_OP_LEAVE = 6,
	PR_OP_REFRESH = 7,
	PR_OP_SUBSCRIBE = 8,
	PR_OP_NOTIFY = 9,
	PR_OP_LOST = 10,
	PR_OP_READERS = 11,
	PR_OP_ARM = 12,
	PR_OP_FILES = 13,
	PR_OP_FOLLOW = 14,
	PR_OP_REPLY = 0x8000,
};

#define PR_F_PIDFD 0x1        /* the owner is the pidfd passed with the packet */
#define PR_F_QUEUE 0x2        /* REGISTER: if taken, wait in line */
#define PR_F_REPLACE 0x4      /* REGISTER: if taken by a replaceable owner, take over */
#define PR_F_REPLACEABLE 0x8  /* REGISTER: a later PR_F_REPLACE may take it over */
#define PR_F_LEASE_MARK 0x10  /* REGISTER: an expired lease marks the name unhealthy
			       * instead of releasing it */
#define PR_F_SIGNAL_SHIFT 8   /* REGISTER: the signal on losing a name (bits 8..14) */
#define PR_F_SIGNAL_MASK 0x7f00
#define PR_HELLO_NOTICES 0x1  /* HELLO flags: notices welcome */
#define PR_HELLO_QUIET 0x2    /* HELLO flags: nothing is sent back on this connection */
#define PR_HELLO_NOFILES 0x4  /* HELLO flags: no file passed after this HELLO */

struct pr_frame_hdr {
	uint16_t op;
	uint16_t flags;
	uint32_t len;
	uint32_t id;
	int32_t status;
};

_Static_assert(sizeof(struct pr_frame_hdr) == PR_FRAME_HDR, "frame header");

/* A decoded frame: points into the packet buffer. */
struct pr_frame {
	struct pr_frame_hdr h;
	const uint8_t *body;
	size_t body_len;
	/* REGISTER / UNREGISTER */
	const char *name;
	size_t name_len;
	const void *meta;
	size_t meta_len;
	uint32_t arg;       /* REGISTER: lease_ms; HELLO: flags; LOST: reason */
	uint32_t version;   /* HELLO */
	uint32_t pid;       /* LOST: the winner's */
	uint64_t time_ns;   /* LOST */
	uint64_t arm;       /* HELLO's reply, ARM */
};

/* Next frame of BUF[*pos..len). 1 and *f filled, 0 at the end, -EBADMSG if
 * the frame header is unusable (the rest of the packet cannot be framed).
 * A frame whose header is fine but whose body is not gets f->h and returns
 * -EPROTO: the caller answers it with -EBADMSG and goes on. */
int procreg__proto_next(const uint8_t *buf, size_t len, size_t *pos, struct pr_frame *f);

/* The daemon's check of a decoded REGISTER/UNREGISTER/JOIN/LEAVE/REFRESH
 * frame's name and metadata: 0, -EINVAL (empty, or holds a NUL),
 * -ENAMETOOLONG, -EMSGSIZE. Inline: every request passes here. */
static inline int procreg__proto_check_name(const struct pr_frame *f)
{
	if (f->name_len == 0 || __builtin_memchr(f->name, 0, f->name_len))
		return -EINVAL;
	if (f->name_len > PROCREG_NAME_MAX)
		return -ENAMETOOLONG;
	if (f->meta_len > PROCREG_META_MAX)
		return -EMSGSIZE;
	return 0;
}

/* Append a frame to BUF (capacity PR_PACKET_MAX) at *pos. -ENOBUFS when
 * it does not fit (the caller starts a new packet). */
int procreg__proto_put(uint8_t *buf, size_t *pos, uint16_t op, uint16_t flags,
		       uint32_t id, int32_t status, const void *a, size_t alen,
		       const void *b, size_t blen);
/* A frame of a header alone, as nearly every reply is: procreg__proto_put
 * without a call, on the daemon's path for every request. */
static inline int procreg__proto_put_status(uint8_t *buf, size_t *pos, uint16_t op, uint32_t id,
					    int32_t status)
{
	const struct pr_frame_hdr h = { .op = op, .len = PR_FRAME_HDR, .id = id, .status = status };

	if (PR_FRAME_HDR > PR_PACKET_MAX - *pos)
		return -ENOBUFS;
	__builtin_memcpy(buf + *pos, &h, PR_FRAME_HDR);
	*pos += PR_FRAME_HDR;
	return 0;
}
/* HELLO (op PR_OP_HELLO) or its reply (PR_OP_HELLO | PR_OP_REPLY). */
int procreg__proto_put_hello(uint8_t *buf, size_t *pos, uint16_t op, uint32_t id,
			     int32_t status);
/* The same, with the HELLO's flags (PR_HELLO_*): with PR_HELLO_NOFILES,
 * the u64 too, so that the reply's arm makes it no longer. */
int procreg__proto_put_hello_flags(uint8_t *buf, size_t *pos, uint16_t op, uint32_t id,
				   int32_t status, uint32_t flags);
/* A HELLO reply with ARM, the word of the ARM to come (0: none). */
int procreg__proto_put_hello_arm(uint8_t *buf, size_t *pos, uint32_t id, int32_t status,
				 uint64_t arm);
/* A LOST notice: NAME lost to NODE's registration (pid WINNER), for REASON,
 * at TIME_NS. A decoded one: f->name, f->meta (the node), f->arg (the
 * reason), f->pid, f->time_ns. */
int procreg__proto_put_lost(uint8_t *buf, size_t *pos, const char *name, size_t name_len,
			    const char *node, uint32_t reason, uint32_t winner, uint64_t time_ns);
int procreg__proto_put_name(uint8_t *buf, size_t *pos, uint16_t op, uint16_t flags,
			    uint32_t id, const char *name, size_t name_len,
			    const void *meta, size_t meta_len);
int procreg__proto_put_name_arg(uint8_t *buf, size_t *pos, uint16_t op, uint16_t flags,
				uint32_t id, const char *name, size_t name_len,
				const void *meta, size_t meta_len, uint32_t arg);
/* Bytes a REGISTER/UNREGISTER frame takes. */
size_t procreg__proto_name_size(size_t name_len, size_t meta_len);

_Static_assert(PR_F_QUEUE == PROCREG_QUEUE && PR_F_REPLACE == PROCREG_REPLACE &&
		       PR_F_REPLACEABLE == PROCREG_REPLACEABLE &&
		       PR_F_LEASE_MARK == PROCREG_LEASE_MARK,
	       "procreg_register_opts flags go on the wire as they are");

#endif /* PROCREG_PROTO_H */
