/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fuzz_proto.c - libFuzzer harness for the daemon's request decoder.
 *
 * The input is one packet as the daemon receives it: every frame is
 * decoded with procreg__proto_next() exactly as handle_packet() does, and
 * every name-carrying request goes through the daemon's own check
 * (procreg__proto_check_name). Whatever decodes must point inside the
 * packet, and must survive a round trip through the encoder.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

static uint8_t out[PR_PACKET_MAX];

static void touch(const void *p, size_t n)
{
	volatile uint8_t sink = 0;

	for (size_t i = 0; i < n; i++)
		sink ^= ((const uint8_t *)p)[i];
	(void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pr_frame f, g;
	size_t pos = 0, frames = 0;
	int r;

	if (size > PR_PACKET_MAX)
		return 0;
	while ((r = procreg__proto_next(data, size, &pos, &f)) != 0) {
		if (r == -EBADMSG)
			break;
		if (pos > size || ++frames > size / PR_FRAME_HDR + 1)
			abort(); /* no progress, or past the packet */
		if (r != 1)
			continue;
		if ((const uint8_t *)f.body < data || f.body + f.body_len > data + size)
			abort();
		touch(f.body, f.body_len);
		switch (f.h.op) {
		case PR_OP_REGISTER:
		case PR_OP_UNREGISTER:
		case PR_OP_JOIN:
		case PR_OP_LEAVE:
		case PR_OP_REFRESH:
			if ((const uint8_t *)f.name + f.name_len > f.body + f.body_len ||
			    (const uint8_t *)f.meta + f.meta_len > f.body + f.body_len)
				abort();
			touch(f.name, f.name_len);
			touch(f.meta, f.meta_len);
			if (procreg__proto_check_name(&f) == 0) {
				size_t o = 0, q = 0;

				if (procreg__proto_put_name_arg(out, &o, f.h.op, f.h.flags, f.h.id,
								f.name, f.name_len, f.meta,
								f.meta_len, f.arg) < 0)
					abort();
				if (procreg__proto_next(out, o, &q, &g) != 1 || q != o ||
				    g.name_len != f.name_len || g.meta_len != f.meta_len ||
				    g.arg != f.arg || memcmp(g.name, f.name, f.name_len) ||
				    (f.meta_len && memcmp(g.meta, f.meta, f.meta_len)))
					abort();
			}
			break;
		default:
			break;
		}
	}
	return 0;
}
