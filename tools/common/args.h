/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * args.h - numbers on the tools' command lines.
 */
#ifndef PROCREG_TOOLS_ARGS_H
#define PROCREG_TOOLS_ARGS_H

#include <stdint.h>

/*
 * S as a whole number: decimal digits, then at most one of the suffixes
 * k/K, m/M, g/G, which multiply it by UNIT, UNIT^2, UNIT^3 (1000 for a
 * count, 1024 for a size; 0: no suffix taken). 0 with *OUT set, or -1 for
 * anything else: an empty string, a sign, a space, a value past
 * UINT64_MAX.
 */
int pr_parse_u64(const char *s, uint64_t unit, uint64_t *out);

#endif /* PROCREG_TOOLS_ARGS_H */
