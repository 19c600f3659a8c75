/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * registry.c - every change to the table's names and memberships, with its
 * side effects in one order (registry.h says which, and why).
 *
 * Writer thread only. Nothing here decides policy: who may ask is
 * server.c's, who is next in line and when a lease ends is owners.c's,
 * who wins between nodes is bridge.c's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "daemon.h"
#include "probes.h"

PR_PROBE_DEFINE(procregd, conflict);

static void count(uint64_t *counter, uint64_t n)
{
	CMM_STORE_SHARED(*counter, *counter + n);
}

/* ---- the table ---------------------------------------------------------- */

/* Room for one more entry in ROOT, then K's place in it: *OLD the record
 * there now (0: none), *POS the slot to publish at. The reserve may
 * rebuild the index, which moves every slot: the find comes after it. */
static int slot_for(struct daemon *d, struct pr_root *root, const struct pr_key *k,
		    uint64_t *pos, uint64_t *old)
{
	int err = procreg__w_reserve(&d->w, root);

	if (!err)
		*old = procreg__w_find(&d->w, root, k, pos);
	return err;
}

/* The one record template: E's content, owned as E says; a local one with
 * room in the owned records' array. */
static int new_record(struct daemon *d, const struct reg_remote *e,
		      uint64_t ino, uint64_t *off)
{
	struct pr_record t = { 0 };
	int err;

	t.kind = e->kind;
	t.flags = e->flags;
	t.node = e->node;
	t.pid = e->pid;
	t.uid = e->uid;
	t.start_time = e->start_time;
	t.registered_ns = e->registered_ns;
	t.aux = ino;
	t.name_len = (uint16_t)e->name_len;
	t.meta_len = (uint16_t)e->meta_len;
	err = procreg__w_new_record(&d->w, &t, e->name, e->meta, off);
	/* Another node's entries are owned by no process here. */
	if (!err && e->node == 0 && (err = proc_owned_room(d, *off)) < 0)
		procreg__w_discard(&d->w, *off);
	return err;
}

/* The root K's entry goes in: the name index, or group NAME's member
 * index (made if CREATE and missing). */
static int root_for(struct daemon *d, uint8_t kind, const char *name, size_t len, bool create,
		    struct pr_root **root)
{
	if (kind == PR_KIND_NAME) {
		*root = &d->w.map.hdr->names;
		return 0;
	}
	return procreg__w_group(&d->w, name, len, create, root);
}

/* The published entry OFF leaves the table: the store, the event (the
 * record, retired, is still whole), the bridge. AT: where a probe of this
 * request found it, or NULL. */
static void take_out_at(struct daemon *d, uint64_t off, const struct reg_where *at, uint32_t ev)
{
	if (at)
		procreg__w_unpublish_at(&d->w, off, at->root, at->pos);
	else
		procreg__w_unpublish(&d->w, off);
	procreg__w_emit(&d->w, ev, rec(d, off));
	bridge_note(d, 1, off);
}

static void take_out(struct daemon *d, uint64_t off, uint32_t ev)
{
	take_out_at(d, off, NULL, ev);
}

/* After names left the table: each goes to the next in line, if anyone
 * waits (owners.c). Their records were retired in this batch: still
 * readable. */
static void pass_on(struct daemon *d, const uint64_t *offs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct pr_record *r = rec(d, offs[i]);

		if (r->kind == PR_KIND_NAME && owners_interested(d, r->data, r->name_len))
			owners_name_gone(d, r->data, r->name_len);
	}
}

/* ---- local entries ------------------------------------------------------ */

static bool may_hold_more(const struct daemon *d, const struct proc *p)
{
	return p->names.n < d->o.max_names_per_proc && uid_may_add(d, p);
}

/*
 * P is attached before anything is looked up: attaching may process the
 * death of a previous process with P's pid, whose removals change slots,
 * and a slot position found before them could end up past an empty slot,
 * where no probe would find the new entry.
 */
static int put_local(struct daemon *d, struct proc *p, const struct ident *id,
		     struct pr_root *root, const struct reg_request *rq, bool handover)
{
	bool name = rq->kind == PR_KIND_NAME, mine = false;
	uint32_t ev = !name ? PROCREG_EV_JOINED
		      : handover ? PROCREG_EV_TRANSFERRED : PROCREG_EV_REGISTERED;
	struct reg_remote e = {
		.kind = rq->kind, .pid = (uint32_t)id->pid, .uid = id->uid, .start_time = id->start,
		.name = rq->name, .name_len = rq->name_len, .meta = rq->meta, .meta_len = rq->meta_len,
	};
	struct proc *loser = NULL;
	struct pr_key k;
	uint64_t pos, old, off;
	int err;

	if (name && rq->key)
		k = *rq->key;
	else if (name)
		pr_key_name(&k, PR_KIND_NAME, rq->name, rq->name_len, d->w.map.hdr->hash_seed);
	else
		pr_key_member(&k, (uint32_t)id->pid, id->start, 0, d->w.map.hdr->hash_seed);
	err = slot_for(d, root, &k, &pos, &old);
	/* Another node's entry whose removal is decided is gone already
	 * (bridge.c): taken out, which may pass the name on, before this. */
	while (!err && old && name && rec(d, old)->node && bridge_take_pending(d, old))
		err = slot_for(d, root, &k, &pos, &old);
	if (!err && !old)
		err = procreg__w_place_ok(&d->w, root, &k, pos);
	if (err)
		return err;
	if (old) {
		const struct pr_record *r = rec(d, old);

		mine = r->node == 0 && r->pid == (uint32_t)id->pid && r->start_time == id->start;
		if (mine) {
			if (name)
				ev = PROCREG_EV_UPDATED;
		} else if (name && (rq->flags & PROCREG_REPLACE) && r->node == 0 &&
			   (r->flags & PROCREG_ENTRY_REPLACEABLE)) {
			ev = PROCREG_EV_REPLACED;
		} else if (name && (rq->flags & PROCREG_QUEUE)) {
			return (err = owners_enqueue(d, p, id, rq)) ? err : -EINPROGRESS;
		} else {
			PR_TRACE(procregd, conflict, id->pid, rq->name, rq->name_len, r->pid, k.kind);
			LOGV(d, "name '%.*s': refused to pid %d: held by pid %u, node %u",
			     (int)rq->name_len, rq->name, (int)id->pid, r->pid, r->node);
			return -EEXIST;
		}
	}
	if (!mine && !may_hold_more(d, p))
		return -EDQUOT;
	/* A lease is journaled, and leases are counted (--max-leases,
	 * --max-leases-per-uid): room for it first, or no change at all (a
	 * hand-over's was set aside when its place in line was taken). */
	if (rq->lease_ms && !handover && (err = owners_lease_room(d, id, rq)))
		return err;
	/* A metadata update keeps the registration's stamp: it is when the
	 * name was registered, and what decides a conflict between nodes. A
	 * fresh stamp would reorder a conflict under way, and two nodes could
	 * each see their own registration as the earlier, both keeping it. */
	if (mine)
		e.registered_ns = rec(d, old)->registered_ns;
	else
		e.registered_ns = d->bridge ? bridge_stamp(d) : procreg__w_now(&d->w);
	if (name)
		e.flags = (rq->flags & PROCREG_REPLACEABLE ? PROCREG_ENTRY_REPLACEABLE : 0) |
			  (rq->lease_ms ? PROCREG_ENTRY_LEASED : 0);
	else
		e.flags = rq->lease_ms ? PROCREG_ENTRY_LEASED : 0;
	err = new_record(d, &e, id->ino, &off);
	if (err)
		return err;
	if (!mine && (err = proc_add_name(d, p, off)) < 0) {
		procreg__w_discard(&d->w, off);
		return err;
	}
	/* The lease while the change can still be undone: never a leased
	 * record without its lease. Joining again sets the lease anew, or (0)
	 * drops it. */
	if (name && rq->lease_ms)
		err = owners_lease_set(d, rq->name, rq->name_len, id->uid, rq->lease_ms,
				       rq->flags & PROCREG_LEASE_MARK);
	else if (!name)
		err = owners_member_lease_set(d, rec(d, off), rq->lease_ms);
	if (err) {
		if (!mine)
			proc_forget_name(d, off);
		procreg__w_discard(&d->w, off);
		return err;
	}
	if (old && !mine)
		loser = proc_forget_name(d, old);
	/* Replies come after this store: an acknowledged write is published. */
	procreg__w_publish_key(&d->w, root, pos, off, &k);
	if (mine)
		proc_replace_name(d, old, off);
	proc_release_if_empty(d, loser);
	if (name && !rq->lease_ms)
		owners_lease_set(d, rq->name, rq->name_len, id->uid, 0, false);
	/* A new registration's stamp is the clock read just now, unless a
	 * bridge's clock made it. */
	if (!mine && !d->bridge)
		procreg__w_emit_at(&d->w, ev, rec(d, off), e.registered_ns);
	else
		procreg__w_emit(&d->w, ev, rec(d, off));
	bridge_note(d, 0, off);
	if (!handover)
		count(name ? &d->w.map.hdr->registrations : &d->w.map.hdr->joins, 1);
	return 0;
}

int registry_put(struct daemon *d, struct proc *p, const struct ident *id,
		 const struct reg_request *rq, bool handover)
{
	bool was = d->w.no_reserve;
	struct pr_root *root;
	int err;

	d->w.no_reserve = !uid_privileged(d, id->uid);
	d->w.req_uid = (uint32_t)id->uid;
	d->w.reserve_hit = false;
	d->w.place_hit = false;
	err = root_for(d, rq->kind, rq->name, rq->name_len, false, &root);
	/* A new group for a process at its quota would only be made to be
	 * dropped again. */
	if (err == -ENOENT)
		err = may_hold_more(d, p) ? root_for(d, rq->kind, rq->name, rq->name_len, true, &root)
					  : -EDQUOT;
	if (!err)
		err = put_local(d, p, id, root, rq, handover);
	if (err && rq->kind == PR_KIND_MEMBER)
		procreg__w_drop_group_if_empty(&d->w, rq->name, rq->name_len);
	d->w.no_reserve = was;
	d->w.req_uid = PR_NO_UID;
	return err;
}

/* Remove the local entry OFF (found AT, or NULL) with event EV; LOST: it
 * lost to another node (its lease ends, nobody is handed it). */
static void remove_local(struct daemon *d, uint64_t off, const struct reg_where *at, uint32_t ev,
			 bool lost)
{
	const struct pr_record *r = rec(d, off);
	struct proc *p = proc_forget_name(d, off);

	take_out_at(d, off, at, ev);
	proc_release_if_empty(d, p);
	if (ev == PROCREG_EV_UNREGISTERED)
		count(&d->w.map.hdr->unregistrations, 1);
	else if (ev == PROCREG_EV_LEFT)
		count(&d->w.map.hdr->leaves, 1);
	if (r->kind != PR_KIND_NAME) {
		owners_member_lease_set(d, r, 0);
		return;
	}
	if (lost)
		owners_lease_set(d, r->data, r->name_len, r->uid, 0, false);
	else
		owners_name_gone(d, r->data, r->name_len);
}

void registry_remove(struct daemon *d, uint64_t off, const struct reg_where *at, uint32_t ev)
{
	remove_local(d, off, at, ev, false);
}

void registry_lose(struct daemon *d, uint64_t off, const char *node, pid_t winner)
{
	/* Noted while the record still has its owner's place in procs.c. */
	proc_lost_name(d, off, node, winner);
	remove_local(d, off, NULL, PROCREG_EV_CONFLICT, true);
}

/*
 * A dead process's records, and the index slots that hold them, are
 * rarely in cache any more: each removal would wait for a miss on the
 * record (to hash its name), then one on the slot. The record DIED_AHEAD
 * names ahead is prefetched, and the home slot of the one half as far
 * ahead, whose record came in meanwhile, so that the misses overlap the
 * removals before them. A hint: it changes nothing but timing.
 */
#define DIED_AHEAD 8

static void died_prefetch(struct daemon *d, const uint64_t *offs, size_t n, size_t i)
{
	if (i + DIED_AHEAD < n)
		__builtin_prefetch(rec(d, offs[i + DIED_AHEAD]));
	if (i + DIED_AHEAD / 2 < n) {
		const struct pr_record *r = rec(d, offs[i + DIED_AHEAD / 2]);

		if (r->kind == PR_KIND_NAME)
			procreg__w_prefetch_hash(&d->w, pr_hash(r->data, r->name_len,
							       d->w.map.hdr->hash_seed));
	}
}

size_t registry_died(struct daemon *d, struct proc *p, size_t most)
{
	size_t n = p->names.n < most ? p->names.n : most;
	/* The last N of P's list: what else takes an entry of P's out
	 * meanwhile (a lease run out, a conflict lost) swaps P's last into
	 * its place, so the list stays whole from its start. */
	const uint64_t *offs = p->names.v + (p->names.n - n);
	bool held = d->w.clock_held;

	/* One stamp for all the events of one slice, as for one packet's. */
	if (!held)
		procreg__w_clock_hold(&d->w, true);
	/* The first DIED_AHEAD: the loop's prefetches start past them. */
	for (size_t i = 0; i < DIED_AHEAD && i < n; i++)
		__builtin_prefetch(rec(d, offs[i]));
	for (size_t i = 0; i < n; i++) {
		died_prefetch(d, offs, n, i);
		take_out(d, offs[i], PROCREG_EV_DIED);
		/* After the record is out, as remove_local() does: the
		 * journal's end of the lease never precedes it. The record is
		 * still whole: retired in this batch, not freed. */
		if (rec(d, offs[i])->kind == PR_KIND_MEMBER)
			owners_member_lease_set(d, rec(d, offs[i]), 0);
	}
	if (!held)
		procreg__w_clock_hold(&d->w, false);
	/* Dropped from P's list, their memory kept: OFFS stays valid (P is
	 * in no line any more, so nothing below gives it a name). */
	proc_forget_last(d, p, n);
	/* Then the names pass on: a standby owns one in the same turn of the
	 * loop that took it from the dead. */
	pass_on(d, offs, n);
	return n;
}

void registry_death_counted(struct daemon *d)
{
	count(&d->w.map.hdr->deaths, 1);
}

int registry_set_flags(struct daemon *d, uint64_t off, uint8_t flags, uint32_t ev)
{
	const struct pr_record *r = rec(d, off);
	struct reg_remote e = {
		.node = r->node, .kind = r->kind, .flags = flags, .pid = r->pid, .uid = r->uid,
		.start_time = r->start_time, .registered_ns = r->registered_ns,
		.name = r->data, .name_len = r->name_len,
		.meta = r->data + r->name_len + 1, .meta_len = r->meta_len,
	};
	struct pr_key k;
	uint64_t pos, old, noff;
	int err;

	pr_key_name(&k, PR_KIND_NAME, r->data, r->name_len, d->w.map.hdr->hash_seed);
	err = slot_for(d, &d->w.map.hdr->names, &k, &pos, &old);
	if (!err)
		err = new_record(d, &e, r->aux, &noff);
	if (err)
		return err;
	procreg__w_publish(&d->w, &d->w.map.hdr->names, pos, noff);
	proc_replace_name(d, off, noff);
	procreg__w_emit(&d->w, ev, rec(d, noff));
	bridge_note(d, 0, noff);
	return 0;
}

/* ---- other nodes' entries ----------------------------------------------- */

static int apply_remote(struct daemon *d, const struct reg_remote *e, uint64_t *off_out)
{
	bool member = e->kind == PR_KIND_MEMBER;
	struct pr_root *root;
	struct pr_key k;
	uint64_t pos, old, off;
	int err = root_for(d, e->kind, e->name, e->name_len, true, &root);

	if (err)
		return err;
	if (member)
		pr_key_member(&k, e->pid, e->start_time, e->node, d->w.map.hdr->hash_seed);
	else
		pr_key_name(&k, PR_KIND_NAME, e->name, e->name_len, d->w.map.hdr->hash_seed);
	err = slot_for(d, root, &k, &pos, &old);
	if (!err)
		err = new_record(d, e, 0, &off);
	if (err) {
		if (member)
			procreg__w_drop_group_if_empty(&d->w, e->name, e->name_len);
		return err;
	}
	procreg__w_publish(&d->w, root, pos, off);
	procreg__w_emit(&d->w, member ? PROCREG_EV_JOINED
				 : old ? PROCREG_EV_UPDATED : PROCREG_EV_REGISTERED, rec(d, off));
	*off_out = off;
	return 0;
}

int registry_apply(struct daemon *d, const struct reg_remote *e, uint64_t *off_out)
{
	bool was = d->w.no_reserve;
	int err;

	/* The reserve (--reserved-size, and the last eighth of each index)
	 * is for this host's root and procregd's uid, and the local share
	 * before it (--local-size, and the eighth of each index before
	 * that) for this host's users. Another node's entries are whatever
	 * a node with the cookie sends: held back from both, or a node
	 * could fill the table to the last byte and root could register
	 * nothing here, or to the reserve and no user could. */
	d->w.no_reserve = true;
	d->w.remote = true;
	d->w.reserve_hit = false;
	err = apply_remote(d, e, off_out);
	d->w.no_reserve = was;
	d->w.remote = false;
	return err;
}

static uint32_t remote_event(const struct pr_record *r, uint32_t ev)
{
	return ev ? ev : r->kind == PR_KIND_NAME ? PROCREG_EV_UNREGISTERED : PROCREG_EV_LEFT;
}

void registry_apply_remove(struct daemon *d, uint64_t off, uint32_t ev)
{
	take_out(d, off, remote_event(rec(d, off), ev));
	pass_on(d, &off, 1);
}

struct remove_some {
	struct daemon *d;
	struct registry_removal *rm;
	registry_pick_fn pick;
	void *arg;
	struct pr_vec names;
	bool lost;              /* a name not kept for passing on: no memory */
};

static int remove_one(uint64_t off, const struct pr_record *r, void *arg)
{
	struct remove_some *c = arg;
	uint32_t ev = 0;

	c->rm->seen++;
	if (!c->pick(off, r, c->arg, &ev))
		return 0;
	take_out(c->d, off, remote_event(r, ev));
	if (r->kind == PR_KIND_NAME && procreg__vec_push(&c->names, off) < 0)
		c->lost = true;
	c->rm->removed++;
	return 0;
}

int registry_remove_some(struct daemon *d, struct registry_removal *rm, uint64_t budget,
			 registry_pick_fn pick, void *arg)
{
	struct remove_some c = { .d = d, .rm = rm, .pick = pick, .arg = arg };
	int more = procreg__w_walk_some(&d->w, &rm->wc, budget, remove_one, &c);

	/* Passed on after the part: a hand-over publishes, and may rebuild
	 * the index being walked. */
	if (c.lost)
		log_warn("out of memory: names removed with their node not offered to the next in line");
	pass_on(d, c.names.v, c.names.n);
	procreg__vec_free(&c.names);
	if (more > 0)
		return 1;
	/* Each walk costs the whole table on the daemon's only thread, in
	 * parts: said, so that their number can be seen. */
	if (!more)
		LOGV(d, "removal walk: %llu of %llu entries taken", (unsigned long long)rm->removed,
		     (unsigned long long)rm->seen);
	procreg__w_cursor_free(&rm->wc);
	return more;
}
