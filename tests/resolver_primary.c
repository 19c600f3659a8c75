/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * resolver_primary.c - a conflict resolver in a shared object, for
 * test_bridge: the registration whose metadata is "primary" keeps the
 * name; otherwise it gives no answer and the built-in rule decides.
 */
#include <string.h>

#include "procreg/resolver.h"

static int primary(const struct pr_conflict_entry *e)
{
	return e->meta_len == 7 && !memcmp(e->meta, "primary", 7);
}

__attribute__((visibility("default"))) int procreg_resolve_v1(const struct pr_conflict_entry *a,
							      const struct pr_conflict_entry *b)
{
	return primary(b) - primary(a);
}
