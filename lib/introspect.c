/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * introspect.c - what operators' tools read: the table's header, its
 * reader registry, a verification of the whole table, the replication
 * status file. The public calls are documented in procreg.h
 * ("Introspection").
 *
 * Nothing here writes shared memory or talks to the daemon. The header's
 * counters and the reader registry are daemon-written and read with plain
 * loads (each the value before or after one change); a registry entry is
 * copied under its seq word. The table check walks the indexes inside one
 * read-side critical section, like a long lookup: everything it reaches
 * stays whole until it leaves (the daemon frees retired memory only after
 * a grace period), so it runs while the daemon writes, and holds
 * reclamation back for as long as the walk takes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bridge_proto.h"
#include "internal.h"
#include "nodes_file.h"

/* Outputs are sized structs (procreg.h, "Sized structs"): checked with
 * PR_SIZED, built whole in the library's own struct, then copied out as
 * far as the caller's .sz reaches (procreg__sized_out). Structs handed to
 * a callback are the library's, with its .sz. */

/* ---- the header ------------------------------------------------------- */

PROCREG_API int procreg_table_info(procreg_t *reg, struct procreg_table_info *out)
{
	const struct pr_table_hdr *h;
	struct procreg_table_info t;
	struct pr_reader_slot *s;
	struct pr_ixv ix;
	int err;

	if (!reg || !out)
		return -EINVAL;
	err = PR_SIZED(out, procreg_table_info, freed_gp);
	if (err)
		return err;
	memset(&t, 0, sizeof(t));
	h = reg->map.hdr;
	/* Immutable after creation. */
	t.layout_version = h->layout_version;
	t.name_max = h->name_max;
	t.meta_max = h->meta_max;
	t.max_readers = h->readers_cap;
	t.file_size = h->file_size;
	t.created_ns = h->created_ns;
	t.feed_capacity = h->feed_cap;
	/* Daemon-written. */
	t.name_tombstones = CMM_LOAD_SHARED(h->names.tombs);
	t.rehashes = CMM_LOAD_SHARED(h->rehashes);
	t.generation = CMM_LOAD_SHARED(h->generation);
	t.gp = PR_LOAD_ACQ(&h->gp);
	t.freed_gp = CMM_LOAD_SHARED(h->freed_gp);
	/* The index blocks' capacities: inside a section, since a rebuild
	 * retires the block the offset led to. */
	s = procreg__rcu_slot(&reg->rcu);
	if (s) {
		int stale, tries = 0;

		procreg__announce_if_new(reg);
		do {
			uint64_t gp = pr_read_lock(&reg->map, s);

			t.name_capacity = procreg__index(&reg->map, &h->names, &ix) ? 0 : ix.cap;
			t.group_capacity = procreg__index(&reg->map, &h->groups, &ix) ? 0 : ix.cap;
			stale = pr_read_valid(&reg->map, gp);
			pr_read_unlock(s);
		} while (stale && ++tries < PR_READ_TRIES);
		if (stale)
			t.name_capacity = t.group_capacity = 0;
	}
	procreg__sized_out(out, &t, sizeof(t));
	return 0;
}

PROCREG_API int procreg_name_hash(procreg_t *reg, const char *name, uint64_t *hash)
{
	size_t len;
	int err;

	if (!reg || !hash)
		return -EINVAL;
	err = procreg__check_name(name, &len);
	if (err)
		return err;
	/* hash_seed is immutable once the table is published. */
	*hash = pr_hash(name, len, reg->map.hdr->hash_seed);
	return 0;
}

/* ---- the reader registry ---------------------------------------------- */

/* Copy the registry entry E into X under its seq (odd while the daemon
 * rewrites it, changed if it did meanwhile): 1 if it is in use, 0 if it
 * is free or was never still long enough to copy. */
static int registry_entry(const struct pr_reader_info *e, struct pr_reader_info *x)
{
	for (int tries = 0; tries < 64; tries++) {
		uint32_t seq = PR_LOAD_ACQ(&e->seq);

		if (seq & 1)
			continue;
		memcpy(x, e, sizeof(*x));
		cmm_smp_rmb();
		if (CMM_LOAD_SHARED(e->seq) != seq)
			continue;
		return x->pid != 0;
	}
	return 0;
}

/* Whether the process (PID, START) still runs. */
static bool alive(pid_t pid, uint64_t start)
{
	uint64_t now;

	return procreg__proc_start_time(pid, &now) == 0 && now == start;
}

/* Call CB for every registry entry in use, as a struct procreg_reader. */
static int each_reader(procreg_t *reg, procreg_reader_cb cb, void *arg)
{
	const struct pr_table_hdr *h = reg->map.hdr;
	uint32_t cap = h->readers_cap;
	const struct pr_reader_info *v = pr_at(&reg->map, h->readers_off, (uint64_t)cap * sizeof(*v));

	for (uint32_t i = 0; v && i < cap; i++) {
		struct pr_reader_info x;
		struct procreg_reader r = { .sz = sizeof(r) };
		int ret;

		if (!registry_entry(&v[i], &x))
			continue;
		r.pid = (pid_t)x.pid;
		r.uid = x.uid;
		r.start_time = x.start;
		r.flags = (x.flags & PR_READER_STALLED ? PROCREG_READER_STALLED : 0) |
			  (alive(r.pid, r.start_time) ? 0 : PROCREG_READER_GONE);
		r.pages = x.pages;
		r.threads = x.slots;
		r.in_section = x.active;
		r.lookups = x.lookups;
		r.stalled_ns = x.stalled_ns;
		r.registered_ns = x.registered_ns;
		r.refreshed_ns = x.refreshed_ns;
		ret = cb(&r, arg);
		if (ret)
			return ret;
	}
	return 0;
}

PROCREG_API int procreg_readers(procreg_t *reg, procreg_reader_cb cb, void *arg)
{
	if (!reg || !cb)
		return -EINVAL;
	return each_reader(reg, cb, arg);
}

struct reader_count {
	struct procreg_reader_check *c;
	int unwell;                 /* readers stalled or gone, each once */
};

static int count_reader(const struct procreg_reader *r, void *arg)
{
	struct reader_count *rc = arg;

	rc->c->readers++;
	rc->c->gone += !!(r->flags & PROCREG_READER_GONE);
	rc->c->threads += r->threads;
	rc->c->in_section += r->in_section;
	rc->unwell += r->flags != 0;
	return 0;
}

PROCREG_API int procreg_reader_check(procreg_t *reg, struct procreg_reader_check *out)
{
	const struct pr_table_hdr *h;
	struct procreg_reader_check c;
	struct reader_count rc = { &c, 0 };
	int err;

	if (!reg || !out)
		return -EINVAL;
	err = PR_SIZED(out, procreg_reader_check, last_stall_ns);
	if (err)
		return err;
	memset(&c, 0, sizeof(c));
	h = reg->map.hdr;
	c.max_readers = h->readers_cap;
	each_reader(reg, count_reader, &rc);
	/* The daemon's count of stalled readers, as procreg stats has always
	 * shown it; the return value counts what this walk saw. */
	c.stalled = CMM_LOAD_SHARED(h->readers_stalled);
	c.stalls = CMM_LOAD_SHARED(h->reader_stalls);
	c.refused = CMM_LOAD_SHARED(h->readers_refused);
	c.last_stall_pid = (pid_t)CMM_LOAD_SHARED(h->last_stall_pid);
	c.last_stall_uid = CMM_LOAD_SHARED(h->last_stall_uid);
	c.last_stall_ns = CMM_LOAD_SHARED(h->last_stall_ns);
	procreg__sized_out(out, &c, sizeof(c));
	return rc.unwell;
}

/* ---- the table check -------------------------------------------------- */

/* How many walks a check tries before it gives up on a busy table. */
#define CHECK_ATTEMPTS 50

struct owner {
	uint32_t pid;
	uint64_t start;
	char name[PROCREG_NAME_MAX + 1];
	bool member;
};

struct check {
	const struct pr_map *m;
	uint64_t arena_end;         /* arena_top as read at the start */
	char *problems[PROCREG_CHECK_PROBLEMS_MAX];
	size_t nproblems;           /* kept */
	uint64_t nfound;            /* found, kept or not */
	bool nomem;                 /* a problem could not be kept */
	uint64_t names, groups, members, tombs, procs;
	struct owner *owners;       /* local owners, for liveness and the process count */
	size_t nowners, cap;
};

static void problem(struct check *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct check *k, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	k->nfound++;
	if (k->nproblems == PROCREG_CHECK_PROBLEMS_MAX)
		return;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	if (s)
		k->problems[k->nproblems++] = s;
	else
		k->nomem = true;
}

static void check_reset(struct check *k)
{
	for (size_t i = 0; i < k->nproblems; i++)
		free(k->problems[i]);
	k->nproblems = 0;
	k->nfound = 0;
	k->nomem = false;
	k->names = k->groups = k->members = k->tombs = k->procs = 0;
	k->nowners = 0;
}

static void add_owner(struct check *k, const struct pr_record *r, uint16_t nl, bool member)
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
	memcpy(o->name, r->data, nl);
	o->name[nl] = 0;
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
	if (off < m->hdr->arena_off || off + sizeof(struct pr_index) + ix.cap * sizeof(struct pr_slot) > k->arena_end)
		problem(k, "%s index: block at %llu (%llu slots) outside the arena [%llu, %llu)",
			what, (unsigned long long)off, (unsigned long long)ix.cap,
			(unsigned long long)m->hdr->arena_off, (unsigned long long)k->arena_end);
	for (uint64_t p = 0; p < ix.cap; p++) {
		uint64_t w = PR_LOAD_ACQ(&ix.slot[p].word), roff = pr_slot_off(w);
		const struct pr_record *r, *found;
		struct pr_key key;
		uint16_t nl;

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
		/* The length is read once and bounded: a walk this long may outlast
		 * the daemon's patience with readers, and the record be reused
		 * under it (rcu.c); everything below uses this NL. */
		nl = CMM_LOAD_SHARED(r->name_len);
		if (nl == 0 || nl > PROCREG_NAME_MAX || !pr_at(m, roff, PR_RECORD_SIZE(nl, 0))) {
			problem(k, "%s index slot %llu: record at %llu: name of %u bytes", what,
				(unsigned long long)p, (unsigned long long)roff, nl);
			continue;
		}
		if (r->data[nl] != 0 || memchr(r->data, 0, nl)) {
			problem(k, "%s index slot %llu: record at %llu: name not NUL-terminated", what,
				(unsigned long long)p, (unsigned long long)roff);
			continue;
		}
		if (kind == PR_KIND_MEMBER)
			pr_key_member(&key, r->pid, r->start_time, r->node, seed);
		else
			pr_key_name(&key, kind, r->data, nl, seed);
		if (!pr_slot_is(w, CMM_LOAD_SHARED(ix.slot[p].key), key.skey)) {
			problem(k, "%s '%.*s' (slot %llu): the slot does not hold its key", what,
				(int)nl, r->data, (unsigned long long)p);
			continue;
		}
		if (kind == PR_KIND_MEMBER && (nl != group->name_len ||
					      memcmp(r->data, group->data, nl))) {
			problem(k, "%s: member pid %u at slot %llu names group '%.*s'", what, r->pid,
				(unsigned long long)p, (int)nl, r->data);
			continue;
		}
		found = procreg__probe(m, &ix, &key, NULL);
		if (found != r)
			problem(k, "%s '%.*s' (slot %llu): a probe for its key does not reach it", what,
				(int)nl, r->data, (unsigned long long)p);
		live++;
		local += r->node == 0;
		if (r->node == 0 && kind != PR_KIND_GROUP)
			add_owner(k, r, nl, kind == PR_KIND_MEMBER);
		if (kind == PR_KIND_GROUP) {
			const struct pr_root *gr = procreg__group_root(m, r);
			char gwhat[PROCREG_NAME_MAX + 16];
			uint64_t before = k->members;

			snprintf(gwhat, sizeof(gwhat), "group '%.*s'", (int)nl, r->data);
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
static int walk_once(struct check *k, struct pr_reader_slot *slot)
{
	const struct pr_map *m = k->m;
	const struct pr_table_hdr *h = m->hdr;
	uint64_t gen, top, gp;

	check_reset(k);
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

		if (i && !by_owner(&k->owners[i - 1], o) && !strcmp(k->owners[i - 1].name, o->name))
			continue;
		if (alive((pid_t)o->pid, o->start))
			continue;
		if (!o->member && (procreg_lookup(reg, o->name, &e) != 0 || e.pid != (pid_t)o->pid ||
				   e.start_time != o->start))
			continue; /* removed meanwhile */
		problem(k, "%s '%s': owner pid %u (start time %llu) is not alive",
			o->member ? "group" : "name", o->name, o->pid, (unsigned long long)o->start);
	}
}

PROCREG_API int procreg_check(procreg_t *reg, struct procreg_check *out, procreg_problem_cb cb,
			      void *arg)
{
	struct check k = { 0 };
	struct procreg_check c;
	struct pr_reader_slot *slot;
	int err = -EAGAIN, attempts = 0;

	if (!reg || !out)
		return -EINVAL;
	err = PR_SIZED(out, procreg_check, problems);
	if (err)
		return err;
	memset(&c, 0, sizeof(c));
	err = -EAGAIN;
	slot = procreg__rcu_slot(&reg->rcu);
	if (!slot)
		return -ENOMEM;
	procreg__announce_if_new(reg);
	k.m = &reg->map;
	while (err == -EAGAIN && attempts++ < CHECK_ATTEMPTS)
		err = walk_once(&k, slot);
	if (!err) {
		check_owners(&k, reg);
		if (k.nomem)
			err = -ENOMEM;
	}
	if (!err) {
		c.names = k.names;
		c.groups = k.groups;
		c.memberships = k.members;
		c.tombstones = k.tombs;
		c.processes = k.procs;
		c.problems = k.nfound;
		procreg__sized_out(out, &c, sizeof(c));
		err = k.nfound ? -EUCLEAN : 0;
		for (size_t i = 0; cb && i < k.nproblems; i++) {
			int ret = cb(k.problems[i], arg);

			if (ret) {
				err = ret;
				break;
			}
		}
	}
	check_reset(&k);
	free(k.owners);
	return err;
}

/* ---- the replication status file (nodes_file.h) ----------------------- */

/* The bridge's limits are the API's, and the scan formats' widths. */
_Static_assert(PROCREG_NODE_NAME_MAX == PR_BP_NODE_MAX && PROCREG_NODE_ADDR_MAX == PR_BP_ADDR_MAX,
	       "node names and addresses: one limit");
_Static_assert(sizeof(((struct procreg_node *)0)->name) == 64 &&
		       sizeof(((struct procreg_node *)0)->addr) == 128,
	       "the scan formats of nodes_file.h bound these fields");

/* Open DIR/procreg.SCOPE.nodes: only a regular file of the table's owner
 * (the daemon that writes it), as the table itself is trusted. */
static int nodes_open(procreg_t *reg, FILE **f)
{
	char path[PR_PATH_MAX + sizeof(PR_NODES_SUFFIX)];
	struct stat st;
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s" PR_NODES_SUFFIX, reg->paths.table) >=
	    sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return errno == ELOOP ? -EPERM : -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (st.st_uid != reg->map.owner && st.st_uid != 0) ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		close(fd);
		return -EPERM;
	}
	*f = fdopen(fd, "re");
	if (!*f) {
		close(fd);
		return -ENOMEM;
	}
	return 0;
}

void *procreg__grow_append(void *v, size_t n, size_t *cap, const void *x, size_t sz)
{
	char *a = v;

	if (n == *cap) {
		size_t nc = *cap ? 2 * *cap : 16;

		if (!(a = realloc(v, nc * sz)))
			return NULL;
		*cap = nc;
	}
	memcpy(a + n * sz, x, sz);
	return a;
}

/* Read the whole file: *OUT (may be NULL), then CB for each node line
 * (and each down line, if DOWN: its name, address and incarnation) and
 * PCB for each peer line. The file is read to its end before a callback
 * is first called, so that -EPROTO comes before any node. */
static int nodes_read(procreg_t *reg, struct procreg_bridge *out, procreg_node_cb cb, bool down,
		      void *arg, procreg_peer_cb pcb, void *parg)
{
	struct procreg_bridge b;
	struct procreg_node *v = NULL;
	struct procreg_peer *pv = NULL;
	size_t n = 0, cap = 0, np = 0, pcap = 0;
	char line[512], inc[17];
	bool ok = false;
	FILE *f = NULL;
	int err = nodes_open(reg, &f);

	if (err)
		return err;
	memset(&b, 0, sizeof(b));
	while (!err && fgets(line, sizeof(line), f)) {
		struct procreg_node x;
		struct procreg_peer p;
		unsigned long long u[5];
		int up;

		memset(&x, 0, sizeof(x));
		memset(&p, 0, sizeof(p));
		if (!strncmp(line, PR_NODES_MAGIC, strlen(PR_NODES_MAGIC))) {
			ok = true;
		} else if (sscanf(line, PR_NODES_SELF_SCAN, b.node, inc, &u[0]) == 3) {
			b.incarnation = strtoull(inc, NULL, 16);
			b.seq = u[0];
		} else if (sscanf(line, PR_NODES_STATS_SCAN, &u[0], &u[1], &u[2], &u[3], &u[4]) == 5) {
			b.changes_out = u[0];
			b.changes_in = u[1];
			b.conflicts = u[2];
			b.nodes_down = u[3];
			b.resyncs = u[4];
		} else if (sscanf(line, PR_NODES_NODE_SCAN, &x.id, x.name, x.addr, inc, &u[0], &u[1],
				  &u[2], &u[3]) == 8) {
			x.incarnation = strtoull(inc, NULL, 16);
			x.up_since_ns = u[0];
			x.changes_in = u[1];
			x.bytes_in = u[2];
			x.bytes_out = u[3];
			if (!strcmp(x.addr, PR_NODES_NO_ADDR))
				x.addr[0] = 0;
			b.nodes++;
			if (cb) {
				void *nv = procreg__grow_append(v, n, &cap, &x, sizeof(x));

				if (!nv)
					err = -ENOMEM;
				else
					v = nv, n++;
			}
		} else if (down && cb &&
			   sscanf(line, PR_NODES_DOWN_SCAN, &x.id, x.name, x.addr, inc) == 4) {
			void *nv;

			x.incarnation = strtoull(inc, NULL, 16);
			if (!strcmp(x.addr, PR_NODES_NO_ADDR))
				x.addr[0] = 0;
			nv = procreg__grow_append(v, n, &cap, &x, sizeof(x));
			if (!nv)
				err = -ENOMEM;
			else
				v = nv, n++;
		} else if (sscanf(line, PR_NODES_PEER_SCAN, &up, p.addr, p.node) == 3) {
			p.up = up == 1;
			if (!strcmp(p.node, PR_NODES_NO_NAME))
				p.node[0] = 0;
			if (pcb) {
				void *nv = procreg__grow_append(pv, np, &pcap, &p, sizeof(p));

				if (!nv)
					err = -ENOMEM;
				else
					pv = nv, np++;
			}
		}
	}
	fclose(f);
	if (!err && !ok)
		err = -EPROTO;
	if (!err && out) {
		procreg__sized_out(out, &b, sizeof(b));
	}
	for (size_t i = 0; !err && i < n; i++) {
		v[i].sz = sizeof(v[i]);
		err = cb(&v[i], arg);
	}
	for (size_t i = 0; !err && i < np; i++) {
		pv[i].sz = sizeof(pv[i]);
		err = pcb(&pv[i], parg);
	}
	free(v);
	free(pv);
	return err;
}

PROCREG_API int procreg_bridge(procreg_t *reg, struct procreg_bridge *out, procreg_node_cb cb,
			       void *arg)
{
	int err = 0;

	if (!reg)
		return -EINVAL;
	if (out)
		err = PR_SIZED(out, procreg_bridge, nodes);
	return err ? err : nodes_read(reg, out, cb, false, arg, NULL, NULL);
}

PROCREG_API int procreg_bridge_peers(procreg_t *reg, procreg_peer_cb cb, void *arg)
{
	if (!reg)
		return -EINVAL;
	return nodes_read(reg, NULL, NULL, false, NULL, cb, arg);
}

struct name_of {
	uint32_t id;
	char *buf;
	size_t len;
};

static int name_of_node(const struct procreg_node *n, void *arg)
{
	struct name_of *w = arg;

	if (n->id != w->id)
		return 0;
	if (strlen(n->name) >= w->len)
		return -ERANGE;
	strcpy(w->buf, n->name);
	return 1;
}

PROCREG_API int procreg_node_name(procreg_t *reg, uint32_t id, char *buf, size_t len)
{
	PROCREG_OPTS(procreg_bridge, b);
	struct name_of w = { id, buf, len };
	int err;

	if (!reg || !buf)
		return -EINVAL;
	err = nodes_read(reg, id == 0 ? &b : NULL, id == 0 ? NULL : name_of_node, true, &w, NULL,
			 NULL);
	if (err < 0)
		return err;
	if (id != 0)
		return err == 1 ? 0 : -ENOENT;
	if (!b.node[0])
		return -ENOENT;
	if (strlen(b.node) >= len)
		return -ERANGE;
	strcpy(buf, b.node);
	return 0;
}
