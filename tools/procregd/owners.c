/*
 * owners.c - standby owners and leases: the daemon's private bookkeeping
 * for who owns a name next, and until when.
 *
 * Queues. A REGISTER with PR_F_QUEUE for a taken name puts its process in
 * line (one queue per contested name, first come first served). Whenever a
 * name goes — unregistered, its owner dead, its lease expired — the first
 * live process in line gets it at once, in the same turn of the event
 * loop, with a TRANSFERRED event. A process in line is watched through its
 * pidfd like an owner; if it dies first, it leaves the line.
 *
 * Leases. A registration may carry a lease: unless its owner refreshes it
 * in time, the name is released (or, with PR_F_LEASE_MARK, republished
 * marked unhealthy), though the process lives. Deadlines are kept here and
 * checked from the daemon's timer, which is armed for the nearest one.
 *
 * Both are few in practice (contested names, leased names), so they are
 * plain lists; while both are empty, a registration or a death costs
 * nothing here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "proto.h"

struct waiter {
	struct waiter *next;
	struct proc *p;
	struct ident id;
	uint16_t flags;
	uint32_t lease_ms;
	uint16_t meta_len;
	uint8_t meta[];
};

struct queue {
	struct queue *next;
	struct waiter *head;
	uint16_t len;
	char name[PROCREG_NAME_MAX + 1];
};

struct lease {
	struct lease *next;
	uint64_t ttl_ns, deadline_ns;
	bool mark;       /* mark unhealthy instead of releasing */
	bool expired;    /* marked: waiting for a refresh */
	uint16_t len;
	char name[PROCREG_NAME_MAX + 1];
};

static bool same_name(const char *a, size_t alen, const char *b, size_t blen)
{
	return alen == blen && !memcmp(a, b, alen);
}

static struct queue **find_queue(struct daemon *d, const char *name, size_t len)
{
	struct queue **q;

	for (q = &d->queues; *q; q = &(*q)->next)
		if (same_name((*q)->name, (*q)->len, name, len))
			break;
	return q;
}

static struct lease **find_lease(struct daemon *d, const char *name, size_t len)
{
	struct lease **l;

	for (l = &d->leases; *l; l = &(*l)->next)
		if (same_name((*l)->name, (*l)->len, name, len))
			break;
	return l;
}

bool owners_interested(const struct daemon *d, const char *name, size_t len)
{
	if (!d->queues && !d->leases)
		return false;
	return *find_queue((struct daemon *)d, name, len) || *find_lease((struct daemon *)d, name, len);
}

/* P takes (DELTA 1) or gives up (-1) a place in a line: it counts as a
 * name of P's uid, as the uid quota says (procs.c: uid_may_add). */
static void place_taken(struct daemon *d, struct proc *p, int delta)
{
	p->waiting += (uint32_t)delta;
	uid_adjust(&d->uid_names, p->uid, delta);
}

int owners_enqueue(struct daemon *d, struct proc *p, const struct ident *id,
		   const struct pr_frame *f)
{
	struct queue **qp = find_queue(d, f->name, f->name_len), *q = *qp;
	struct waiter *w, **wp = NULL;

	/* Asking again keeps one's place, with the newer metadata. */
	if (q)
		for (wp = &q->head; *wp && (*wp)->p != p; wp = &(*wp)->next)
			;
	/* A new place in line costs the daemon memory like a name does: it
	 * counts against the same limits, per process and per uid (else one
	 * uid could queue for names without bound). */
	if ((!wp || !*wp) &&
	    (p->names.n + p->waiting >= d->o.max_names_per_proc || !uid_may_add(d, p)))
		return -EDQUOT;
	if (!q) {
		q = calloc(1, sizeof(*q));
		if (!q)
			return -ENOMEM;
		q->len = (uint16_t)f->name_len;
		memcpy(q->name, f->name, f->name_len);
		*qp = q;
		wp = &q->head;
	}
	w = malloc(sizeof(*w) + f->meta_len);
	if (!w) {
		if (!q->head) {
			*qp = q->next;
			free(q);
		}
		return -ENOMEM;
	}
	w->p = p;
	w->id = *id;
	w->id.pidfd = -1; /* the proc holds the pidfd */
	w->flags = f->h.flags & (uint16_t)~(PR_F_QUEUE | PR_F_PIDFD);
	w->lease_ms = f->arg;
	w->meta_len = (uint16_t)f->meta_len;
	memcpy(w->meta, f->meta, f->meta_len);
	if (*wp) {
		w->next = (*wp)->next;
		free(*wp);
	} else {
		w->next = NULL;
		place_taken(d, p, 1);
	}
	*wp = w;
	return 0;
}

void owners_proc_gone(struct daemon *d, struct proc *p)
{
	struct queue **qp = &d->queues;

	if (!p->waiting)
		return;
	while (*qp) {
		struct queue *q = *qp;

		for (struct waiter **wp = &q->head; *wp;) {
			struct waiter *w = *wp;

			if (w->p == p) {
				*wp = w->next;
				place_taken(d, p, -1);
				free(w);
			} else {
				wp = &w->next;
			}
		}
		if (!q->head) {
			*qp = q->next;
			free(q);
		} else {
			qp = &q->next;
		}
	}
}

int owners_lease_set(struct daemon *d, const char *name, size_t len, uint32_t lease_ms,
		     bool mark)
{
	struct lease **lp, *l;

	if (!lease_ms && !d->leases)
		return 0; /* the common case: no lease here, none anywhere */
	lp = find_lease(d, name, len);
	l = *lp;
	if (!lease_ms) {
		if (l) {
			*lp = l->next;
			free(l);
		}
		return 0;
	}
	if (!l) {
		l = calloc(1, sizeof(*l));
		if (!l)
			return -ENOMEM;
		l->len = (uint16_t)len;
		memcpy(l->name, name, len);
		*lp = l;
	}
	l->ttl_ns = (uint64_t)lease_ms * 1000000ull;
	l->deadline_ns = procreg__mono_ns() + l->ttl_ns;
	l->mark = mark;
	l->expired = false;
	return 0;
}

void owners_name_gone(struct daemon *d, const char *name, size_t len)
{
	struct queue **qp;
	struct queue *q;

	owners_lease_set(d, name, len, 0, false);
	qp = find_queue(d, name, len);
	q = *qp;
	while (q && q->head) {
		struct waiter *w = q->head;
		struct pr_frame f = { 0 };
		struct pr_key k;
		uint64_t off;
		int err;

		q->head = w->next;
		/* Given back before entry_put() checks the quotas: the place
		 * becomes the name. */
		place_taken(d, w->p, -1);
		f.h.op = PR_OP_REGISTER;
		f.h.flags = w->flags;
		f.name = q->name;
		f.name_len = q->len;
		f.meta = w->meta;
		f.meta_len = w->meta_len;
		f.arg = w->lease_ms;
		pr_key_name(&k, PR_KIND_NAME, q->name, q->len, d->w.map.hdr->hash_seed);
		err = entry_put(d, w->p, &w->id, &d->w.map.hdr->names, &k, &f, true, &off);
		if (err)
			log_msg("name '%s': next in line, pid %d: %s", q->name, (int)w->p->pid,
				strerror(-err));
		proc_release_if_empty(d, w->p);
		free(w);
		if (!err)
			break;
	}
	if (q && !q->head) {
		*qp = q->next;
		free(q);
	}
}

/* Publish a copy of the record at OFF (same owner) with FLAGS. */
static int republish(struct daemon *d, uint64_t off, uint16_t flags)
{
	const struct pr_record *r = (const struct pr_record *)(d->w.map.base + off);
	struct pr_record t = *r;
	struct pr_key k;
	uint64_t pos, noff;
	int err;

	t.flags = flags;
	err = procreg__w_new_record(&d->w, &t, r->data, r->data + r->name_len + 1, &noff);
	if (err)
		return err;
	pr_key_name(&k, PR_KIND_NAME, r->data, r->name_len, d->w.map.hdr->hash_seed);
	procreg__w_find(&d->w, &d->w.map.hdr->names, &k, &pos);
	procreg__w_publish(&d->w, &d->w.map.hdr->names, pos, noff);
	proc_replace_name(d, off, noff);
	bridge_note(d, 0, noff);
	return 0;
}

static uint64_t find_name(struct daemon *d, const char *name, size_t len)
{
	struct pr_key k;
	uint64_t pos;

	pr_key_name(&k, PR_KIND_NAME, name, len, d->w.map.hdr->hash_seed);
	return procreg__w_find(&d->w, &d->w.map.hdr->names, &k, &pos);
}

int owners_refresh(struct daemon *d, const struct client *c, const struct pr_frame *f)
{
	struct lease *l = *find_lease(d, f->name, f->name_len);
	uint64_t off = find_name(d, f->name, f->name_len);
	const struct pr_record *r;

	if (!off)
		return -ENOENT;
	r = (const struct pr_record *)(d->w.map.base + off);
	if (c->id.uid != 0 && c->id.uid != r->uid)
		return -EPERM;
	if (!l)
		return -EINVAL;
	l->deadline_ns = procreg__mono_ns() + l->ttl_ns;
	if (l->expired) {
		int err = republish(d, off, r->flags & (uint16_t)~PROCREG_ENTRY_UNHEALTHY);

		if (err)
			return err;
		l->expired = false;
		procreg__w_emit(&d->w, PROCREG_EV_REFRESHED,
				(const struct pr_record *)(d->w.map.base + find_name(d, f->name,
										   f->name_len)));
	}
	return 0;
}

uint64_t owners_tick(struct daemon *d)
{
	uint64_t now = procreg__mono_ns(), next = UINT64_MAX;
	struct lease **lp = &d->leases;

	while (*lp) {
		struct lease *l = *lp;
		uint64_t off;

		if (l->expired || l->deadline_ns > now) {
			if (!l->expired && l->deadline_ns < next)
				next = l->deadline_ns;
			lp = &l->next;
			continue;
		}
		off = find_name(d, l->name, l->len);
		if (!off) {
			/* Gone some other way already. */
			*lp = l->next;
			free(l);
			continue;
		}
		if (l->mark) {
			const struct pr_record *r = (const struct pr_record *)(d->w.map.base + off);

			if (republish(d, off, r->flags | PROCREG_ENTRY_UNHEALTHY) == 0) {
				l->expired = true;
				procreg__w_emit(&d->w, PROCREG_EV_EXPIRED,
						(const struct pr_record *)(d->w.map.base +
									   find_name(d, l->name, l->len)));
			}
			lp = &l->next;
			continue;
		}
		LOGV(d, "name '%s': lease expired, released", l->name);
		procreg__w_emit(&d->w, PROCREG_EV_EXPIRED, (const struct pr_record *)(d->w.map.base + off));
		{
			char name[PROCREG_NAME_MAX + 1];
			size_t len = l->len;

			memcpy(name, l->name, len);
			/* Releasing drops the lease (and may hand the name on). */
			proc_remove_name(d, off);
			owners_name_gone(d, name, len);
		}
		lp = &d->leases; /* the list changed under us: start over */
	}
	return next == UINT64_MAX ? UINT64_MAX : next - now;
}

uint64_t owners_next_deadline(const struct daemon *d)
{
	uint64_t next = UINT64_MAX;

	for (const struct lease *l = d->leases; l; l = l->next)
		if (!l->expired && l->deadline_ns < next)
			next = l->deadline_ns;
	return next;
}

void owners_free_all(struct daemon *d)
{
	while (d->queues) {
		struct queue *q = d->queues;

		d->queues = q->next;
		while (q->head) {
			struct waiter *w = q->head;

			q->head = w->next;
			free(w);
		}
		free(q);
	}
	while (d->leases) {
		struct lease *l = d->leases;

		d->leases = l->next;
		free(l);
	}
}
