/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * procreg/resolver.h - a custom rule for name conflicts between nodes, from a
 * shared object (procregd --resolver PATH): it exports
 *
 *   int procreg_resolve_v1(const struct pr_conflict_entry *a,
 *                          const struct pr_conflict_entry *b);
 *
 * returning < 0 when A should keep the name, > 0 when B should, 0 to leave
 * it to the built-in rule (earlier stamp, then smaller node name). Every
 * node calls it on the same two entries, in either order, and they must
 * agree: it must be a pure function of its arguments, and
 * resolve(a, b) = -resolve(b, a). procregd asks both ways and falls back to
 * the built-in rule when the answers do not say the same thing. Every node
 * of a mesh should load the same resolver.
 *
 * Installed as <procreg/resolver.h>: it needs no other header of procreg's,
 * and a resolver needs no library of procreg's.
 */
#ifndef PROCREG_RESOLVER_H
#define PROCREG_RESOLVER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PR_RESOLVER_SYMBOL "procreg_resolve_v1"

struct pr_conflict_entry {
	size_t sz;                  /* sizeof, as the daemon was built: fields may be added */
	const char *name;           /* the contested name (NUL-terminated) */
	const char *node;           /* the node that owns this registration */
	uint32_t pid;               /* its owner, on that node */
	uint32_t uid;
	uint64_t registered_ns;     /* its stamp (hybrid logical clock) */
	const void *meta;
	size_t meta_len;
};

typedef int (*pr_resolver_fn)(const struct pr_conflict_entry *a,
			      const struct pr_conflict_entry *b);

#ifdef __cplusplus
}
#endif
#endif /* PROCREG_RESOLVER_H */
