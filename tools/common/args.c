/* SPDX-License-Identifier: BSD-2-Clause */
/* args.c - see args.h. */
#include <errno.h>
#include <stdlib.h>

#include "args.h"

int pr_parse_u64(const char *s, uint64_t unit, uint64_t *out)
{
	unsigned long long v;
	uint64_t mul = 1;
	char *end;

	/* strtoull() would take leading space and a minus sign (and
	 * negate): a number here starts with a digit. */
	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	if (unit && *end) {
		switch (*end) {
		case 'g': case 'G': mul *= unit; /* fall through */
		case 'm': case 'M': mul *= unit; /* fall through */
		case 'k': case 'K': mul *= unit; end++; break;
		default: break;
		}
	}
	if (*end || (v && mul > UINT64_MAX / v))
		return -1;
	*out = (uint64_t)v * mul;
	return 0;
}
