/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * byteorder.h - little-endian integers in byte buffers, for the formats
 * that cross hosts (bridge_proto.c's frames, bridge_envelope.c's NATS
 * envelopes): every integer on the wire is little-endian whatever the
 * host, and is read and written a byte at a time, so a buffer need not be
 * aligned.
 */
#ifndef PROCREG_BYTEORDER_H
#define PROCREG_BYTEORDER_H

#include <stdint.h>

static inline void pr_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void pr_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void pr_put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t pr_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t pr_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t pr_get64(const uint8_t *p)
{
	return (uint64_t)pr_get32(p) | (uint64_t)pr_get32(p + 4) << 32;
}

#endif /* PROCREG_BYTEORDER_H */
