/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * proto.c - encode and decode daemon protocol frames on byte buffers.
 * No I/O here: see proto.h for the format.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "internal.h"
#include "proto.h"

#define ALIGN8(x) (((x) + 7u) & ~(size_t)7u)

struct name_body {
	uint16_t name_len;
	uint16_t meta_len;
	uint32_t arg;       /* REGISTER: lease in milliseconds, 0 for none */
};

struct lost_body {
	uint16_t name_len;
	uint16_t node_len;
	uint32_t reason;
	uint32_t winner;
	uint32_t reserved;
	uint64_t time_ns;
};

/* The body is a fixed part of FIXED bytes, then the name (NAME_LEN
 * bytes), then a second field (META_LEN bytes: metadata, or the LOST
 * notice's node): point F at both, if they are inside the body. */
static int body_strings(struct pr_frame *f, size_t fixed, uint16_t name_len, uint16_t meta_len)
{
	if (fixed + (size_t)name_len + meta_len > f->body_len)
		return -EPROTO;
	f->name = (const char *)f->body + fixed;
	f->name_len = name_len;
	f->meta = f->body + fixed + name_len;
	f->meta_len = meta_len;
	return 0;
}

static int decode_body(struct pr_frame *f)
{
	struct name_body nb;
	uint16_t op = f->h.op & (uint16_t)~PR_OP_REPLY;

	/* Replies carry a body only for HELLO, and the LOST notice; the op
	 * of any other reply is the request's, echoed, whatever it was. */
	if ((f->h.op & PR_OP_REPLY) && op != PR_OP_HELLO && op != PR_OP_LOST)
		return 0;
	switch (op) {
	case PR_OP_HELLO:
		if (f->body_len < 8)
			return -EPROTO;
		memcpy(&f->version, f->body, 4);
		memcpy(&f->arg, f->body + 4, 4);
		if (f->body_len >= 16)
			memcpy(&f->arm, f->body + 8, 8);
		return 0;
	case PR_OP_ARM:
		if (f->body_len < 8)
			return -EPROTO;
		memcpy(&f->arm, f->body, 8);
		return 0;
	case PR_OP_LOST: {
		struct lost_body lb;

		if (!(f->h.op & PR_OP_REPLY) || f->body_len < sizeof(lb))
			return -EPROTO;
		memcpy(&lb, f->body, sizeof(lb));
		if (body_strings(f, sizeof(lb), lb.name_len, lb.node_len) < 0)
			return -EPROTO;
		f->arg = lb.reason;
		f->pid = lb.winner;
		f->time_ns = lb.time_ns;
		return 0;
	}
	case PR_OP_REGISTER:
	case PR_OP_UNREGISTER:
	case PR_OP_JOIN:
	case PR_OP_LEAVE:
	case PR_OP_REFRESH:
		if (f->body_len < sizeof(nb))
			return -EPROTO;
		memcpy(&nb, f->body, sizeof(nb));
		if ((op == PR_OP_UNREGISTER || op == PR_OP_LEAVE || op == PR_OP_REFRESH) &&
		    nb.meta_len)
			return -EPROTO;
		if (body_strings(f, sizeof(nb), nb.name_len, nb.meta_len) < 0)
			return -EPROTO;
		f->arg = nb.arg;
		return 0;
	case PR_OP_SYNC:
	case PR_OP_SUBSCRIBE:
	case PR_OP_NOTIFY:
	case PR_OP_READERS:
	case PR_OP_FILES:
	case PR_OP_FOLLOW:
		return 0;
	default:
		return -EPROTO;
	}
}

/* procreg__proto_next clears a frame's fields one by one: a field added
 * after arm, the last it clears, must be cleared there too. */
_Static_assert(offsetof(struct pr_frame, arm) + sizeof(uint64_t) == sizeof(struct pr_frame),
	       "every field of a frame is cleared in procreg__proto_next");

int procreg__proto_next(const uint8_t *buf, size_t len, size_t *pos, struct pr_frame *f)
{
	size_t p = *pos;

	if (p >= len || len - p < PR_FRAME_HDR) {
		memset(f, 0, sizeof(*f));
		return p >= len ? 0 : -EBADMSG;
	}
	/* Field by field, not a memset of the whole frame: GCC makes that a
	 * rep stos, whose start-up costs more than the rest of the parse,
	 * on every request the daemon reads. */
	memcpy(&f->h, buf + p, PR_FRAME_HDR);
	f->name = NULL;
	f->name_len = 0;
	f->meta = NULL;
	f->meta_len = 0;
	f->arg = 0;
	f->version = 0;
	f->pid = 0;
	f->time_ns = 0;
	f->arm = 0;
	if (f->h.len < PR_FRAME_HDR || f->h.len % 8 || f->h.len > len - p) {
		f->body = NULL;
		f->body_len = 0;
		return -EBADMSG;
	}
	f->body = buf + p + PR_FRAME_HDR;
	f->body_len = f->h.len - PR_FRAME_HDR;
	*pos = p + f->h.len;
	return decode_body(f) < 0 ? -EPROTO : 1;
}

int procreg__proto_put(uint8_t *buf, size_t *pos, uint16_t op, uint16_t flags,
		       uint32_t id, int32_t status, const void *a, size_t alen,
		       const void *b, size_t blen)
{
	size_t len = ALIGN8(PR_FRAME_HDR + alen + blen);
	struct pr_frame_hdr h = {
		.op = op, .flags = flags, .len = (uint32_t)len, .id = id, .status = status,
	};
	uint8_t *p;

	if (len > PR_PACKET_MAX - *pos)
		return -ENOBUFS;
	p = buf + *pos;
	memcpy(p, &h, PR_FRAME_HDR);
	if (alen)
		memcpy(p + PR_FRAME_HDR, a, alen);
	if (blen)
		memcpy(p + PR_FRAME_HDR + alen, b, blen);
	memset(p + PR_FRAME_HDR + alen + blen, 0, len - PR_FRAME_HDR - alen - blen);
	*pos += len;
	return 0;
}

int procreg__proto_put_hello_flags(uint8_t *buf, size_t *pos, uint16_t op, uint32_t id,
				   int32_t status, uint32_t flags)
{
	uint32_t body[4] = { PR_PROTO_VERSION, flags, 0, 0 };

	return procreg__proto_put(buf, pos, op, 0, id, status, body,
				  flags & PR_HELLO_NOFILES ? 16 : 8, NULL, 0);
}

int procreg__proto_put_hello_arm(uint8_t *buf, size_t *pos, uint32_t id, int32_t status,
				 uint64_t arm)
{
	uint32_t body[4] = { PR_PROTO_VERSION, 0 };

	memcpy(&body[2], &arm, sizeof(arm));
	return procreg__proto_put(buf, pos, PR_OP_HELLO | PR_OP_REPLY, 0, id, status, body,
				  sizeof(body), NULL, 0);
}

int procreg__proto_put_hello(uint8_t *buf, size_t *pos, uint16_t op, uint32_t id,
			     int32_t status)
{
	return procreg__proto_put_hello_flags(buf, pos, op, id, status, 0);
}

int procreg__proto_put_lost(uint8_t *buf, size_t *pos, const char *name, size_t name_len,
			    const char *node, uint32_t reason, uint32_t winner, uint64_t time_ns)
{
	uint8_t body[sizeof(struct lost_body) + PROCREG_NAME_MAX];
	size_t node_len = strlen(node);
	struct lost_body lb = { (uint16_t)name_len, (uint16_t)node_len, reason, winner, 0, time_ns };

	if (name_len > PROCREG_NAME_MAX || node_len > 255)
		return -EINVAL;
	memcpy(body, &lb, sizeof(lb));
	memcpy(body + sizeof(lb), name, name_len);
	return procreg__proto_put(buf, pos, PR_OP_LOST | PR_OP_REPLY, 0, 0, 0, body,
				  sizeof(lb) + name_len, node, node_len);
}

size_t procreg__proto_name_size(size_t name_len, size_t meta_len)
{
	return ALIGN8(PR_FRAME_HDR + sizeof(struct name_body) + name_len + meta_len);
}

int procreg__proto_put_name_arg(uint8_t *buf, size_t *pos, uint16_t op, uint16_t flags,
				uint32_t id, const char *name, size_t name_len,
				const void *meta, size_t meta_len, uint32_t arg)
{
	struct name_body nb = { (uint16_t)name_len, (uint16_t)meta_len, arg };
	size_t body = PR_FRAME_HDR + sizeof(nb), len;
	struct pr_frame_hdr h;
	uint8_t *p;

	if (name_len > PROCREG_NAME_MAX || meta_len > PROCREG_META_MAX)
		return -EINVAL;
	len = ALIGN8(body + name_len + meta_len);
	if (len > PR_PACKET_MAX - *pos)
		return -ENOBUFS;
	h = (struct pr_frame_hdr){ .op = op, .flags = flags, .len = (uint32_t)len, .id = id };
	/* Straight into the packet, every request of a batch passes here:
	 * the padding (fewer than 8 bytes, all in the frame's last 8) is
	 * cleared first, and the header, name and metadata written over. */
	p = buf + *pos;
	memset(p + len - 8, 0, 8);
	memcpy(p, &h, PR_FRAME_HDR);
	memcpy(p + PR_FRAME_HDR, &nb, sizeof(nb));
	memcpy(p + body, name, name_len);
	if (meta_len)
		memcpy(p + body + name_len, meta, meta_len);
	*pos += len;
	return 0;
}

int procreg__proto_put_name(uint8_t *buf, size_t *pos, uint16_t op, uint16_t flags,
			    uint32_t id, const char *name, size_t name_len,
			    const void *meta, size_t meta_len)
{
	return procreg__proto_put_name_arg(buf, pos, op, flags, id, name, name_len, meta,
					   meta_len, 0);
}

