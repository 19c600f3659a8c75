/*
 * check.c - procreg check: verify a scope's table without writing it.
 *
 * The walk runs inside one read-side critical section, like a long
 * lookup: everything it reaches stays whole until it leaves (the daemon
 * frees retired memory only after a grace period), so it may run while
 * the daemon writes. It holds back reclamation, never writes, for as long
 * as the walk takes.
 *
 * What it checks, for the name index, the group index and every group's
 * member index:
 *  - the index block is whole, inside the arena, with a power-of-two
 *    capacity and the shift that goes with it;
 *  - every live slot word points to a whole record inside the arena, of
 *    the index's kind, whose hash matches its key and the slot's tag,
 *    and which a probe for its key finds (the chain to it is walkable);
 *  - the index's counters (live, local, tombstones) and the header's
 *    memberships and processes equal what the walk counted;
 *  - every local owner (pid, start time) is alive.
 * The counters are compared only on a walk during which the table's
 * generation did not move: a walk that races a write is done again.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "cli.h"
#include "output.h"

#define MAX_PROBLEMS 100
#define ATTEMPTS 50

struct owner {
	uint32_t pid;
	uint64_t start;
	char name[PROCREG_NAME_MAX + 1];
	bool member;
};

struct check {
	const struct pr_map *m;
	uint64_t arena_end;         /* arena_top as read at the start */
	char *problems[MAX_PROBLEMS];
	size_t nproblems, dropped;
	uint64_t names, groups, members, tombs, procs;
	struct owner *owners;       /* local owners, for liveness and the process count */
	size_t nowners, cap;
};

static void problem(struct check *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct check *k, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	if (k->nproblems == MAX_PROBLEMS) {
		k->dropped++;
		return;
	}
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	/* Problems quote names: kept escaped, for the text and the JSON
	 * report alike. */
	if (s) {
		char *e = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&e, &len);

		if (f) {
			procreg__text(f, s, strlen(s));
			fclose(f);
		}
		free(s);
		s = f ? e : NULL;
	}
	if (s)
		k->problems[k->nproblems++] = s;
	else
		k->dropped++;
}

static void reset(struct check *k)
{
	for (size_t i = 0; i < k->nproblems; i++)
		free(k->problems[i]);
	k->nproblems = k->dropped = 0;
	k->names = k->groups = k->members = k->tombs = k->procs = 0;
	k->nowners = 0;
}

static void add_owner(struct check *k, const struct pr_record *r, bool member)
{
	struct owner *o;

	if (k->nowners == k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 256;

		o = realloc(k->owners, cap * sizeof(*o));
		if (!o)
			return; /* the liveness check is the poorer for it, no more */
		k->owners = o;
		k->cap = cap;
	}
	o = &k->owners[k->nowners++];
	o->pid = r->pid;
	o->start = r->start_time;
	o->member = member;
	memcpy(o->name, r->data, r->name_len);
	o->name[r->name_len] = 0;
}

static const char *kind_name(uint8_t kind)
{
	return kind == PR_KIND_NAME ? "name" : kind == PR_KIND_GROUP ? "group" : "member";
}

/* Inside a read-side critical section. WHAT names the index in messages. */
static void walk_index(struct check *k, const struct pr_root *root, uint8_t kind,
		       const char *what, const struct pr_record *group)
{
	const struct pr_map *m = k->m;
	uint64_t seed = m->hdr->hash_seed, off = CMM_LOAD_SHARED(root->index_off);
	uint64_t live = 0, local = 0, tombs = 0;
	struct pr_ixv ix;

	if (procreg__index(m, root, &ix)) {
		problem(k, "%s index: offset %llu is not a whole index block inside the table", what,
			(unsigned long long)off);
		return;
	}
	if (off < m->hdr->arena_off || off + sizeof(struct pr_index) + ix.cap * 8 > k->arena_end)
		problem(k, "%s index: block at %llu (%llu slots) outside the arena [%llu, %llu)",
			what, (unsigned long long)off, (unsigned long long)ix.cap,
			(unsigned long long)m->hdr->arena_off, (unsigned long long)k->arena_end);
	for (uint64_t p = 0; p < ix.cap; p++) {
		uint64_t w = PR_LOAD_ACQ(&ix.slot[p]), roff = pr_slot_off(w);
		const struct pr_record *r, *found;
		struct pr_key key;

		if (w == PR_SLOT_TOMB)
			tombs++;
		if (!pr_slot_live(w))
			continue;
		r = procreg__record_at(m, w);
		if (!r || roff < m->hdr->arena_off || roff + procreg__record_size(r) > k->arena_end) {
			problem(k, "%s index slot %llu: record offset %llu outside the arena [%llu, %llu)",
				what, (unsigned long long)p, (unsigned long long)roff,
				(unsigned long long)m->hdr->arena_off, (unsigned long long)k->arena_end);
			continue;
		}
		if (r->kind != kind) {
			problem(k, "%s index slot %llu: record at %llu is a %s record", what,
				(unsigned long long)p, (unsigned long long)roff,
				r->kind >= PR_KIND_NAME && r->kind <= PR_KIND_MEMBER ? kind_name(r->kind)
										      : "corrupt");
			continue;
		}
		if (r->data[r->name_len] != 0 || memchr(r->data, 0, r->name_len)) {
			problem(k, "%s index slot %llu: record at %llu: name not NUL-terminated", what,
				(unsigned long long)p, (unsigned long long)roff);
			continue;
		}
		if (kind == PR_KIND_MEMBER)
			pr_key_member(&key, r->pid, r->start_time, r->node, seed);
		else
			pr_key_name(&key, kind, r->data, r->name_len, seed);
		if (r->hash != key.hash || pr_slot_tag(w) != (uint32_t)(key.hash >> 32)) {
			problem(k, "%s '%s' (slot %llu): hash does not match its key", what, r->data,
				(unsigned long long)p);
			continue;
		}
		if (kind == PR_KIND_MEMBER && (r->name_len != group->name_len ||
					      memcmp(r->data, group->data, r->name_len))) {
			problem(k, "%s: member pid %u at slot %llu names group '%s'", what, r->pid,
				(unsigned long long)p, r->data);
			continue;
		}
		found = procreg__probe(m, &ix, &key, NULL);
		if (found != r)
			problem(k, "%s '%s' (slot %llu): a probe for its key does not reach it", what,
				r->data, (unsigned long long)p);
		live++;
		local += r->node == 0;
		if (r->node == 0 && kind != PR_KIND_GROUP)
			add_owner(k, r, kind == PR_KIND_MEMBER);
		if (kind == PR_KIND_GROUP) {
			const struct pr_root *gr = procreg__group_root(m, r);
			char gwhat[PROCREG_NAME_MAX + 16];
			uint64_t before = k->members;

			snprintf(gwhat, sizeof(gwhat), "group '%s'", r->data);
			if (!gr || r->aux < m->hdr->arena_off || r->aux + sizeof(*gr) > k->arena_end) {
				problem(k, "%s: root block at %llu outside the arena", gwhat,
					(unsigned long long)r->aux);
				continue;
			}
			walk_index(k, gr, PR_KIND_MEMBER, gwhat, r);
			if (k->members == before)
				problem(k, "%s: no members, yet still published", gwhat);
		}
	}
	if (kind == PR_KIND_NAME)
		k->names += live;
	else if (kind == PR_KIND_GROUP)
		k->groups += live;
	else
		k->members += live;
	k->tombs += tombs;
	/* Counters: the daemon's, against the walk's. */
	if (CMM_LOAD_SHARED(root->live) != live)
		problem(k, "%s index: counter says %llu live entries, the walk found %llu", what,
			(unsigned long long)CMM_LOAD_SHARED(root->live), (unsigned long long)live);
	if (CMM_LOAD_SHARED(root->local) != local)
		problem(k, "%s index: counter says %llu local entries, the walk found %llu", what,
			(unsigned long long)CMM_LOAD_SHARED(root->local), (unsigned long long)local);
	if (CMM_LOAD_SHARED(root->tombs) != tombs)
		problem(k, "%s index: counter says %llu tombstones, the walk found %llu", what,
			(unsigned long long)CMM_LOAD_SHARED(root->tombs), (unsigned long long)tombs);
}

static int by_owner(const void *a, const void *b)
{
	const struct owner *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* One walk; 0 if the table did not change during it, -EAGAIN if it did. */
static int walk_once(struct check *k, procreg_t *reg, struct pr_reader_slot *slot)
{
	const struct pr_map *m = &reg->map;
	const struct pr_table_hdr *h = m->hdr;
	uint64_t gen, top, gp;

	reset(k);
	gp = pr_read_lock(m, slot);
	gen = CMM_LOAD_SHARED(h->generation);
	cmm_smp_rmb();
	top = CMM_LOAD_SHARED(h->arena_top);
	k->arena_end = top;
	if (top < h->arena_off || top > h->file_size) {
		problem(k, "header: arena top %llu outside [%llu, %llu]", (unsigned long long)top,
			(unsigned long long)h->arena_off, (unsigned long long)h->file_size);
		k->arena_end = h->file_size;
	}
	if (CMM_LOAD_SHARED(h->arena_used) > k->arena_end - h->arena_off)
		problem(k, "header: arena_used %llu exceeds the arena's %llu bytes in use",
			(unsigned long long)CMM_LOAD_SHARED(h->arena_used),
			(unsigned long long)(k->arena_end - h->arena_off));
	walk_index(k, &h->names, PR_KIND_NAME, "name", NULL);
	walk_index(k, &h->groups, PR_KIND_GROUP, "group", NULL);
	if (CMM_LOAD_SHARED(h->memberships) != k->members)
		problem(k, "header: memberships counter says %llu, the walk found %llu",
			(unsigned long long)CMM_LOAD_SHARED(h->memberships),
			(unsigned long long)k->members);
	/* Distinct local owners. The daemon also counts processes that hold
	 * only a place in a queue, which the table does not show: the
	 * counter may exceed the walk's count, never fall below it. */
	if (k->nowners)
		qsort(k->owners, k->nowners, sizeof(*k->owners), by_owner);
	for (size_t i = 0; i < k->nowners; i++)
		k->procs += i == 0 || by_owner(&k->owners[i - 1], &k->owners[i]) != 0;
	if (CMM_LOAD_SHARED(h->processes) < k->procs)
		problem(k, "header: processes counter says %llu, the walk found %llu owners",
			(unsigned long long)CMM_LOAD_SHARED(h->processes), (unsigned long long)k->procs);
	cmm_smp_rmb();
	/* A change, or memory reused under the walk (the daemon need not
	 * have waited for us: rcu.c): walk again. */
	if (CMM_LOAD_SHARED(h->generation) != gen || pr_read_valid(m, gp)) {
		pr_read_unlock(slot);
		return -EAGAIN;
	}
	pr_read_unlock(slot);
	return 0;
}

/* Outside the critical section (syscalls): owners that are gone. An owner
 * that died a moment ago is the daemon's to remove; its names are stale
 * only if they are still published after a fresh lookup. */
static void check_owners(struct check *k, procreg_t *reg)
{
	for (size_t i = 0; i < k->nowners; i++) {
		const struct owner *o = &k->owners[i];
		PROCREG_OPTS(procreg_entry, e);
		uint64_t st;

		if (i && !by_owner(&k->owners[i - 1], o) && !strcmp(k->owners[i - 1].name, o->name))
			continue;
		if (procreg__proc_start_time((pid_t)o->pid, &st) == 0 && st == o->start)
			continue;
		if (!o->member && (procreg_lookup(reg, o->name, &e) != 0 || e.pid != (pid_t)o->pid ||
				   e.start_time != o->start))
			continue; /* removed meanwhile */
		problem(k, "%s '%s': owner pid %u (start time %llu) is not alive", o->member ? "group" : "name",
			o->name, o->pid, (unsigned long long)o->start);
	}
}

int cmd_check(struct cli *c, int argc, char **argv)
{
	struct check k = { 0 };
	PROCREG_OPTS(procreg_stats, st);
	struct pr_reader_slot *slot;
	procreg_t *reg;
	int err = -EAGAIN, attempts = 0;

	if (argc != 0)
		die_usage("check: unexpected argument", argv[0]);
	reg = open_or_die(c);
	k.m = &reg->map;
	slot = procreg__rcu_slot(&reg->rcu);
	if (!slot) {
		fprintf(stderr, "%s: check: out of memory\n", prog);
		procreg_close(reg);
		return EXIT_ERR;
	}
	procreg__announce_if_new(reg);
	while (err == -EAGAIN && attempts++ < ATTEMPTS)
		err = walk_once(&k, reg, slot);
	if (err) {
		fprintf(stderr, "%s: check: the table changed during each of %d walks; try again "
			"when it is quieter\n", prog, ATTEMPTS);
		reset(&k);
		free(k.owners);
		procreg_close(reg);
		return EXIT_ERR;
	}
	check_owners(&k, reg);
	procreg_stats(reg, &st);
	if (c->json) {
		printf("{\"ok\":%s,\"table\":", k.nproblems || k.dropped ? "false" : "true");
		procreg__json_str(stdout, procreg_table_path(reg), strlen(procreg_table_path(reg)));
		printf(",\"names\":%llu,\"groups\":%llu,\"memberships\":%llu,\"tombstones\":%llu,"
		       "\"processes\":%llu,\"daemon_pid\":%d,\"problems\":[",
		       (unsigned long long)k.names, (unsigned long long)k.groups,
		       (unsigned long long)k.members, (unsigned long long)k.tombs,
		       (unsigned long long)k.procs, (int)st.daemon_pid);
		for (size_t i = 0; i < k.nproblems; i++) {
			if (i)
				putchar(',');
			procreg__json_str(stdout, k.problems[i], strlen(k.problems[i]));
		}
		printf("],\"problems_not_shown\":%zu}\n", k.dropped);
	} else {
		for (size_t i = 0; i < k.nproblems; i++)
			printf("%s: %s\n", procreg_table_path(reg), k.problems[i]);
		if (k.dropped)
			printf("%s: ... and %zu more problems\n", procreg_table_path(reg), k.dropped);
		printf("%s: %s: %llu names, %llu groups, %llu memberships, %llu tombstones checked%s\n",
		       procreg_table_path(reg), k.nproblems || k.dropped ? "DAMAGED" : "ok",
		       (unsigned long long)k.names, (unsigned long long)k.groups,
		       (unsigned long long)k.members, (unsigned long long)k.tombs,
		       k.nproblems || k.dropped ? "" : "; counters agree, owners alive");
	}
	err = k.nproblems || k.dropped ? EXIT_NO : 0;
	reset(&k);
	free(k.owners);
	procreg_close(reg);
	return err;
}
