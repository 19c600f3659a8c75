/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bridge_proto.c - encode and decode replication frames on byte buffers.
 * No I/O, no crypto: see bridge_proto.h for the format. The input comes
 * from another host: every read below is bounded by the frame's length.
 */
#include <errno.h>
#include <string.h>

#include "bridge_proto.h"
#include "byteorder.h"
#include "layout.h"

/* A bounded reader over one frame's body. Once it fails it stays failed. */
struct rd {
	const uint8_t *p;
	size_t left;
	int bad;
};

static const uint8_t *take(struct rd *r, size_t n)
{
	const uint8_t *p = r->p;

	if (r->bad || n > r->left) {
		r->bad = 1;
		return NULL;
	}
	r->p += n;
	r->left -= n;
	return p;
}

static uint8_t rd8(struct rd *r)
{
	const uint8_t *p = take(r, 1);
	return p ? p[0] : 0;
}

static uint16_t rd16(struct rd *r)
{
	const uint8_t *p = take(r, 2);
	return p ? pr_get16(p) : 0;
}

static uint32_t rd32(struct rd *r)
{
	const uint8_t *p = take(r, 4);
	return p ? pr_get32(p) : 0;
}

static uint64_t rd64(struct rd *r)
{
	const uint8_t *p = take(r, 8);
	return p ? pr_get64(p) : 0;
}

int procreg__bp_valid_node(const char *s, size_t n)
{
	if (n == 0 || n > PR_BP_NODE_MAX)
		return 0;
	if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-' || c == '@'))
			return 0;
	}
	return 1;
}

static int printable(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return 0;
	return 1;
}

static int valid_addr(const char *s, size_t n)
{
	return n <= PR_BP_ADDR_MAX && printable(s, n);
}

/* A REFUSE's text may hold spaces. */
static int valid_text(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < ' ' || s[i] > '~')
			return 0;
	return 1;
}

/* A length-prefixed (u8) string: a node name (NODE) or an address. */
static const char *rd_str(struct rd *r, size_t *n, int node)
{
	size_t len = rd8(r);
	const char *s = (const char *)take(r, len);

	if (!s || !(node ? procreg__bp_valid_node(s, len) : valid_addr(s, len))) {
		r->bad = 1;
		return NULL;
	}
	*n = len;
	return s;
}

/* What both sides hold an entry to (the decoder after taking its bytes). */
static int check_entry(const struct pr_bp_entry *e)
{
	if ((e->op != PR_BP_PUT && e->op != PR_BP_DEL) ||
	    (e->kind != PR_KIND_NAME && e->kind != PR_KIND_MEMBER) || (e->flags & ~PR_REC_FLAGS) ||
	    e->name_len == 0 || e->name_len > PROCREG_NAME_MAX || e->meta_len > PROCREG_META_MAX ||
	    e->pid == 0 || (e->op == PR_BP_DEL && e->meta_len) || memchr(e->name, 0, e->name_len))
		return -EINVAL;
	return 0;
}

static int rd_entry(struct rd *r, struct pr_bp_entry *e)
{
	const uint8_t *h = take(r, PR_BP_ENTRY_HDR);

	memset(e, 0, sizeof(*e));
	if (!h)
		return -1;
	e->op = h[0];
	e->kind = h[1];
	e->flags = h[2];
	e->pid = pr_get32(h + 4);
	e->uid = pr_get32(h + 8);
	e->start_time = pr_get64(h + 12);
	e->registered_ns = pr_get64(h + 20);
	e->name_len = pr_get16(h + 28);
	e->meta_len = pr_get16(h + 30);
	e->name = (const char *)take(r, e->name_len);
	e->meta = take(r, e->meta_len);
	if (h[3] || !e->name || !e->meta || check_entry(e) < 0)
		return r->bad = 1, -1;
	return 0;
}

static int rd_peer(struct rd *r, struct pr_bp_peer *p)
{
	p->name = rd_str(r, &p->name_len, 1);
	p->addr = rd_str(r, &p->addr_len, 0);
	return r->bad ? -1 : 0;
}

static int decode_body(struct pr_bp_frame *f, struct rd *r)
{
	switch (f->type) {
	case PR_BP_HELLO:
		f->incarnation = rd64(r);
		f->nonce = take(r, PR_BP_NONCE);
		f->key = take(r, PR_BP_KEY);
		f->name = rd_str(r, &f->name_len, 1);
		f->addr = rd_str(r, &f->addr_len, 0);
		break;
	case PR_BP_AUTH:
		f->mac = take(r, PR_BP_MAC);
		break;
	case PR_BP_REFUSE:
		f->reason = rd8(r);
		f->text_len = rd8(r);
		f->text = (const char *)take(r, f->text_len);
		if (f->text && !valid_text(f->text, f->text_len))
			r->bad = 1;
		break;
	case PR_BP_HEARTBEAT:
		f->incarnation = rd64(r);
		f->seq = rd64(r);
		break;
	case PR_BP_PEERS: {
		struct pr_bp_peer p;

		f->count = rd16(r);
		f->items = r->p;
		f->items_len = r->left;
		/* No more than a sender may put: each item costs the reader
		 * look-ups, and tiny items would fit 16,000 to a frame. */
		if (f->count > PR_BP_PEERS_MAX)
			r->bad = 1;
		/* Never trust a count: walk every item now. */
		for (uint32_t i = 0; i < f->count && !r->bad; i++)
			rd_peer(r, &p);
		break;
	}
	case PR_BP_SNAP: {
		struct pr_bp_entry e;

		f->incarnation = rd64(r);
		f->seq = rd64(r);
		f->part = rd32(r);
		f->count = rd16(r);
		f->items = r->p;
		f->items_len = r->left;
		for (uint32_t i = 0; i < f->count && !r->bad; i++)
			rd_entry(r, &e);
		break;
	}
	case PR_BP_CHANGE:
		f->incarnation = rd64(r);
		f->seq = rd64(r);
		f->name = rd_str(r, &f->name_len, 1);
		if (!r->bad)
			rd_entry(r, &f->entry);
		break;
	default:
		return -1;
	}
	/* Nothing may follow the body: a frame means one thing. */
	if (r->bad || r->left)
		return -1;
	if (f->items)
		f->items_len -= r->left;
	return 0;
}

int procreg__bp_next(const uint8_t *buf, size_t len, size_t *pos, struct pr_bp_frame *f)
{
	size_t p = *pos;
	struct rd r;

	memset(f, 0, sizeof(*f));
	if (p >= len || len - p < PR_BP_HDR)
		return 0;
	f->len = pr_get32(buf + p);
	f->type = buf[p + 4];
	f->version = buf[p + 5];
	f->flags = pr_get16(buf + p + 6);
	if (f->len < PR_BP_HDR || f->len > PR_BP_FRAME_MAX)
		return -EBADMSG;
	/* Another version's frame, not garbage: the caller can say so. */
	if (f->version != PR_BP_VERSION && f->type != PR_BP_REFUSE)
		return f->version && f->type >= PR_BP_HELLO && f->type <= PR_BP_REFUSE && !f->flags
			       ? -EPROTONOSUPPORT
			       : -EBADMSG;
	if ((f->flags & ~PR_BP_SNAP_LAST) || (f->flags && f->type != PR_BP_SNAP))
		return -EBADMSG;
	if (f->len > len - p)
		return 0;
	r.p = buf + p + PR_BP_HDR;
	r.left = f->len - PR_BP_HDR;
	r.bad = 0;
	if (decode_body(f, &r) < 0)
		return -EBADMSG;
	*pos = p + f->len;
	return 1;
}

/* A reader over F's items from ITEM_POS, if F is of TYPE and has more. */
static int items_at(const struct pr_bp_frame *f, uint8_t type, size_t item_pos, struct rd *r)
{
	if (f->type != type || item_pos >= f->items_len)
		return 0;
	r->p = f->items + item_pos;
	r->left = f->items_len - item_pos;
	r->bad = 0;
	return 1;
}

int procreg__bp_snap_entry(const struct pr_bp_frame *f, size_t *item_pos, struct pr_bp_entry *e)
{
	struct rd r;

	if (!items_at(f, PR_BP_SNAP, *item_pos, &r) || rd_entry(&r, e) < 0)
		return 0;
	*item_pos = f->items_len - r.left;
	return 1;
}

int procreg__bp_peer(const struct pr_bp_frame *f, size_t *item_pos, struct pr_bp_peer *p)
{
	struct rd r;

	if (!items_at(f, PR_BP_PEERS, *item_pos, &r) || rd_peer(&r, p) < 0)
		return 0;
	*item_pos = f->items_len - r.left;
	return 1;
}

/* ---- encoding --------------------------------------------------------- */

static void put_hdr(uint8_t *p, size_t len, uint8_t type, uint16_t flags)
{
	pr_put32(p, (uint32_t)len);
	p[4] = type;
	p[5] = PR_BP_VERSION;
	pr_put16(p + 6, flags);
}

static int room(size_t cap, size_t pos, size_t n)
{
	return pos <= cap && n <= cap - pos;
}

static size_t put_str(uint8_t *p, const char *s)
{
	size_t n = s ? strlen(s) : 0;

	p[0] = (uint8_t)n;
	memcpy(p + 1, s, n);
	return 1 + n;
}

int procreg__bp_put_hello(uint8_t *buf, size_t cap, size_t *pos, uint64_t incarnation,
			  const uint8_t nonce[PR_BP_NONCE], const uint8_t key[PR_BP_KEY],
			  const char *name, const char *addr)
{
	size_t nl = strlen(name), al = addr ? strlen(addr) : 0;
	size_t len = PR_BP_HDR + 8 + PR_BP_NONCE + PR_BP_KEY + 1 + nl + 1 + al;
	uint8_t *p;

	if (!procreg__bp_valid_node(name, nl) || !valid_addr(addr ? addr : "", al))
		return -EINVAL;
	if (!room(cap, *pos, len))
		return -ENOBUFS;
	p = buf + *pos;
	put_hdr(p, len, PR_BP_HELLO, 0);
	pr_put64(p + 8, incarnation);
	memcpy(p + 16, nonce, PR_BP_NONCE);
	memcpy(p + 16 + PR_BP_NONCE, key, PR_BP_KEY);
	p += 16 + PR_BP_NONCE + PR_BP_KEY;
	p += put_str(p, name);
	put_str(p, addr);
	*pos += len;
	return 0;
}

int procreg__bp_put_auth(uint8_t *buf, size_t cap, size_t *pos, const uint8_t mac[PR_BP_MAC])
{
	size_t len = PR_BP_HDR + PR_BP_MAC;

	if (!room(cap, *pos, len))
		return -ENOBUFS;
	put_hdr(buf + *pos, len, PR_BP_AUTH, 0);
	memcpy(buf + *pos + PR_BP_HDR, mac, PR_BP_MAC);
	*pos += len;
	return 0;
}

int procreg__bp_put_refuse(uint8_t *buf, size_t cap, size_t *pos, uint8_t reason,
			   const char *text)
{
	size_t tl = text ? strlen(text) : 0, len;
	uint8_t *p;

	if (tl > PR_BP_TEXT_MAX)
		tl = PR_BP_TEXT_MAX;
	if (!valid_text(text ? text : "", tl))
		return -EINVAL;
	len = PR_BP_HDR + 2 + tl;
	if (!room(cap, *pos, len))
		return -ENOBUFS;
	p = buf + *pos;
	put_hdr(p, len, PR_BP_REFUSE, 0);
	p[8] = reason;
	p[9] = (uint8_t)tl;
	if (tl)
		memcpy(p + 10, text, tl);
	*pos += len;
	return 0;
}

int procreg__bp_put_heartbeat(uint8_t *buf, size_t cap, size_t *pos, uint64_t incarnation,
			      uint64_t seq)
{
	size_t len = PR_BP_HDR + 16;

	if (!room(cap, *pos, len))
		return -ENOBUFS;
	put_hdr(buf + *pos, len, PR_BP_HEARTBEAT, 0);
	pr_put64(buf + *pos + 8, incarnation);
	pr_put64(buf + *pos + 16, seq);
	*pos += len;
	return 0;
}

size_t procreg__bp_entry_size(const struct pr_bp_entry *e)
{
	return PR_BP_ENTRY_HDR + e->name_len + e->meta_len;
}

static void put_entry(uint8_t *p, const struct pr_bp_entry *e)
{
	p[0] = e->op;
	p[1] = e->kind;
	p[2] = e->flags;
	p[3] = 0;
	pr_put32(p + 4, e->pid);
	pr_put32(p + 8, e->uid);
	pr_put64(p + 12, e->start_time);
	pr_put64(p + 20, e->registered_ns);
	pr_put16(p + 28, (uint16_t)e->name_len);
	pr_put16(p + 30, (uint16_t)e->meta_len);
	memcpy(p + PR_BP_ENTRY_HDR, e->name, e->name_len);
	if (e->meta_len)
		memcpy(p + PR_BP_ENTRY_HDR + e->name_len, e->meta, e->meta_len);
}

int procreg__bp_put_change(uint8_t *buf, size_t cap, size_t *pos, uint64_t incarnation,
			   uint64_t seq, const char *origin, const struct pr_bp_entry *e)
{
	size_t ol = strlen(origin), len;
	uint8_t *p;

	if (!procreg__bp_valid_node(origin, ol) || check_entry(e) < 0)
		return -EINVAL;
	len = PR_BP_HDR + 16 + 1 + ol + procreg__bp_entry_size(e);
	if (!room(cap, *pos, len))
		return -ENOBUFS;
	p = buf + *pos;
	put_hdr(p, len, PR_BP_CHANGE, 0);
	pr_put64(p + 8, incarnation);
	pr_put64(p + 16, seq);
	p += 24;
	p += put_str(p, origin);
	put_entry(p, e);
	*pos += len;
	return 0;
}

/* Where a SNAP or PEERS frame's u16 count sits, from the frame's start. */
#define SNAP_COUNT_AT (PR_BP_HDR + 8 + 8 + 4)
#define PEERS_COUNT_AT PR_BP_HDR

int procreg__bp_begin(uint8_t *buf, size_t cap, size_t *pos, uint8_t type,
		      uint64_t incarnation, uint64_t seq, uint32_t part, size_t *start)
{
	size_t len = (type == PR_BP_SNAP ? SNAP_COUNT_AT : PEERS_COUNT_AT) + 2;
	uint8_t *p;

	if (type != PR_BP_SNAP && type != PR_BP_PEERS)
		return -EINVAL;
	if (!room(cap, *pos, len))
		return -ENOBUFS;
	p = buf + *pos;
	put_hdr(p, len, type, 0);
	if (type == PR_BP_SNAP) {
		pr_put64(p + 8, incarnation);
		pr_put64(p + 16, seq);
		pr_put32(p + 24, part);
		pr_put16(p + SNAP_COUNT_AT, 0);
	} else {
		pr_put16(p + PEERS_COUNT_AT, 0);
	}
	*start = *pos;
	*pos += len;
	return 0;
}

static uint8_t *count_at(uint8_t *buf, size_t start)
{
	return buf + start + (buf[start + 4] == PR_BP_SNAP ? SNAP_COUNT_AT : PEERS_COUNT_AT);
}

/* Room for N more bytes in the frame at START, and one more item. */
static int grow(uint8_t *buf, size_t cap, size_t pos, size_t start, size_t n)
{
	if (!room(cap, pos, n) || pos - start + n > PR_BP_FRAME_MAX ||
	    pr_get16(count_at(buf, start)) == UINT16_MAX)
		return -ENOBUFS;
	return 0;
}

static void counted(uint8_t *buf, size_t start)
{
	uint8_t *c = count_at(buf, start);

	pr_put16(c, (uint16_t)(pr_get16(c) + 1));
}

int procreg__bp_add_entry(uint8_t *buf, size_t cap, size_t *pos, size_t start,
			  const struct pr_bp_entry *e)
{
	size_t n = procreg__bp_entry_size(e);

	if (check_entry(e) < 0)
		return -EINVAL;
	if (grow(buf, cap, *pos, start, n) < 0)
		return -ENOBUFS;
	put_entry(buf + *pos, e);
	*pos += n;
	counted(buf, start);
	return 0;
}

int procreg__bp_add_peer(uint8_t *buf, size_t cap, size_t *pos, size_t start, const char *name,
			 const char *addr)
{
	size_t nl = strlen(name), al = strlen(addr), n = 2 + nl + al;
	uint8_t *p;

	if (!procreg__bp_valid_node(name, nl) || !valid_addr(addr, al))
		return -EINVAL;
	if (grow(buf, cap, *pos, start, n) < 0 || pr_get16(count_at(buf, start)) >= PR_BP_PEERS_MAX)
		return -ENOBUFS;
	p = buf + *pos;
	p += put_str(p, name);
	put_str(p, addr);
	*pos += n;
	counted(buf, start);
	return 0;
}

void procreg__bp_end(uint8_t *buf, size_t pos, size_t start, uint16_t flags)
{
	pr_put32(buf + start, (uint32_t)(pos - start));
	pr_put16(buf + start + 6, flags);
}
