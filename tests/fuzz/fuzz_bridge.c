/*
 * fuzz_bridge.c - libFuzzer harness for the bridge's frame decoder.
 *
 * The input is a byte stream as a peer sends it (before or after
 * authentication: the decoder is the same). Every frame
 * procreg__bp_next() accepts must lie inside the stream, its items must
 * walk to their count, a CHANGE must survive a round trip through the
 * encoder, and a SNAP (its part number included) must encode back to the
 * very bytes it came from.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bridge_proto.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
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
	if (r != 0 && r != -EBADMSG)
		abort();
	return 0;
}
