/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * registry.h - the one path by which names and memberships enter and
 * leave the table (registry.c).
 *
 * Every change to an entry has the same side effects: the table (writer
 * primitives), the owning process's bookkeeping (procs.c), the owners
 * journal (owners.c: leases, who is next in line), the change feed, the
 * bridge (bridge.c: local changes out, shadows rechecked) and the
 * counters. registry.c is where their order is decided, once for every
 * cause: a request (server.c), a death (procs.c), a hand-over or a lease
 * (owners.c), another node (bridge.c). Those files keep their policy —
 * who may ask, who is next, who wins a conflict — and call these.
 *
 * The order, and why:
 *   put:    quota and journal room checked, record written unpublished,
 *           the process's list grown (may fail: nothing has changed yet),
 *           a lease journaled, then the one store that publishes; then
 *           the bookkeeping of a record replaced, the end of a lease
 *           journaled, the event, the bridge, the counter.
 *   remove: the process's list, the store that unpublishes, the event,
 *           the bridge, the counter; last the journal (a lease ends, the
 *           name goes to the next in line).
 * A lease is journaled before its record is published and its end after
 * the record is gone, so that a crash in between never leaves a leased
 * record without its lease (recovery drops a lease whose record is not
 * leased). An event describes what the table already shows. A record
 * removed stays readable until the batch is published (writer.c's retire
 * epochs), so the event, the bridge and the hand-over all read the name
 * from the record itself.
 *
 * Writer thread only.
 */
#ifndef PROCREGD_REGISTRY_H
#define PROCREGD_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "internal.h"

struct daemon;
struct proc;
struct ident;
struct pr_record;

/* A name or membership a local process asks for. */
struct reg_request {
	uint8_t kind;             /* PR_KIND_NAME or PR_KIND_MEMBER */
	const char *name;         /* the name, or the group's */
	size_t name_len;
	const void *meta;
	size_t meta_len;
	/* PROCREG_QUEUE, PROCREG_REPLACE, PROCREG_REPLACEABLE,
	 * PROCREG_LEASE_MARK (names only; the owners journal keeps them so) */
	uint32_t flags;
	uint32_t lease_ms;        /* names: 0, or the lease */
	/* Names: the name's key, if the caller made it already (NULL: made
	 * here). */
	const struct pr_key *key;
};

/* Another node's entry, as that node stamped it. */
struct reg_remote {
	uint16_t node;            /* the bridge's id of it, never 0 */
	uint8_t kind;             /* PR_KIND_NAME or PR_KIND_MEMBER */
	uint8_t flags;            /* PROCREG_ENTRY_* */
	uint32_t pid, uid;
	uint64_t start_time;
	uint64_t registered_ns;
	const char *name;
	size_t name_len;
	const void *meta;
	size_t meta_len;
};

/* Publish RQ for the local process P (identity ID; attached first, see
 * proc_attach). A name another process holds is taken over if it is
 * replaceable and RQ asks to replace, waited for if RQ asks to queue
 * (-EINPROGRESS), refused otherwise (-EEXIST). HANDOVER: P was next in
 * line for it (owners.c), the event says TRANSFERRED. The table's reserve
 * is for the entries of root's and our own uid's processes. */
int registry_put(struct daemon *d, struct proc *p, const struct ident *id,
		 const struct reg_request *rq, bool handover);

/* Where a probe of this request found an entry: its index's root and its
 * slot. A hint only: the removal checks the slot still holds the entry. */
struct reg_where {
	struct pr_root *root;
	uint64_t pos;
};

/* Remove the local entry OFF with event EV: UNREGISTERED (a request),
 * LEFT (a membership), EXPIRED (its lease ran out). A name goes to the
 * next in line. AT: where the caller's probe found OFF (the removal then
 * probes no second time), or NULL. */
void registry_remove(struct daemon *d, uint64_t off, const struct reg_where *at, uint32_t ev);

/* The local name OFF loses to NODE's registration by WINNER: removed with
 * a CONFLICT event, its owner told at the end of the batch; its lease
 * ends, and those in line for it stay there (the name is taken). */
void registry_lose(struct daemon *d, uint64_t off, const char *node, pid_t winner);

/* P exited (procs.c: proc_died, which took it out of every line): the
 * last MOST of the names and memberships it still holds leave the table,
 * with a DIED event each; then those names go to the next in line.
 * Returns how many left. */
size_t registry_died(struct daemon *d, struct proc *p, size_t most);
/* A death whose entries are all out: counted in the table's header. */
void registry_death_counted(struct daemon *d);

/* Republish the local name OFF with the record flags FLAGS (a lease
 * marked unhealthy, or healthy again) and event EV. */
int registry_set_flags(struct daemon *d, uint64_t off, uint8_t flags, uint32_t ev);

/* Publish another node's entry E (new, or in place of what holds its
 * key: the caller has settled any conflict); *OFF gets the record.
 * -ENOSPC where only the local share and the reserve have room: they
 * are not another node's (d->w.reserve_hit then says so). */
int registry_apply(struct daemon *d, const struct reg_remote *e, uint64_t *off);

/* Remove another node's entry OFF with event EV (0: UNREGISTERED for a
 * name, LEFT for a membership); a name goes to the next in line here. */
void registry_apply_remove(struct daemon *d, uint64_t off, uint32_t ev);

/* Whether a removal walk takes R, at OFF, and with which event (*EV, as
 * registry_apply_remove()'s). */
typedef bool (*registry_pick_fn)(uint64_t off, const struct pr_record *r, void *arg,
				 uint32_t *ev);

/* A walk that removes entries of other nodes, a part at a time, requests
 * served in between (procreg__w_walk_some()). Zeroed to start. */
struct registry_removal {
	struct pr_wcursor wc;
	uint64_t seen, removed;
};

/* About BUDGET more slots of RM: every entry PICK takes removed, then
 * their names passed to the next in line. 1 while more remain, 0 once the
 * walk is over (RM freed, the walk logged with -v), or -ENOMEM (RM freed,
 * the walk not over: begin it again). */
int registry_remove_some(struct daemon *d, struct registry_removal *rm, uint64_t budget,
			 registry_pick_fn pick, void *arg);

#endif /* PROCREGD_REGISTRY_H */
