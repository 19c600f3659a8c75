// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * procreg_trace.bpf.c - the kernel side of procreg-trace: handlers for the
 * USDT probes of libprocreg and procregd (lib/probes.h; their arguments
 * are documented in README.md, "Tracing").
 *
 * Counters and histograms live in per-CPU maps, so a handler never
 * contends with another CPU; the loader sums the CPUs when it prints.
 * Events go to userspace through one BPF ring buffer. Which handlers run
 * is decided by what the loader attaches; the rodata below only trims
 * what an attached handler records.
 */
#include <stdbool.h>
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>   /* struct pt_regs, for the USDT argument specs */
#include <bpf/bpf_helpers.h>
#include <bpf/usdt.bpf.h>

#include "procreg_trace.h"

/* The kernel lets a program call GPL-only helpers (bpf_probe_read_user_str
 * and the like) only if this string is GPL-compatible: "Dual BSD/GPL" is,
 * and says what the SPDX line above says. */
char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader through skel->rodata before load. */
const volatile bool top_names = false;   /* count lookups per name hash */
const volatile bool top_procs = false;   /* count lookups per process */
const volatile bool bridge_changes = false; /* a record per change out and entry applied */
/* Library probes: count only those of one registry, the table whose file
 * is (reg_dev, reg_ino). Without -p or --lib the library's probes are
 * attached for every process that maps an object carrying them, so that
 * a process is traced however briefly it lives; this keeps the other
 * registries' users out. */
const volatile bool one_registry = false;

/* The registry's table file, set by the loader before the first attach
 * and again if the file is replaced (a table made anew): .bss, which the
 * loader may write while the programs run. */
__u64 reg_dev = 0, reg_ino = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PT_C_N);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PT_H_N * PT_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} hists SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);                 /* the name's hash in the table */
	__type(value, struct pt_count);
} names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);                 /* tgid */
	__type(value, struct pt_count);
} procs SEC(".maps");

/* The name each hash was first seen with: top's fallback for names no
 * longer (or never) in the table. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct pt_name);
} seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pt_name);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

static __always_inline void count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);

	if (v)
		*v += 1;
}

static __always_inline void hist(__u32 h, __u64 ns)
{
	__u32 slot = 0, key;
	__u64 *v;

	/* floor(log2(ns)), unrolled: the verifier needs a bounded loop. */
	if (ns >> 32) { slot += 32; ns >>= 32; }
	if (ns >> 16) { slot += 16; ns >>= 16; }
	if (ns >> 8) { slot += 8; ns >>= 8; }
	if (ns >> 4) { slot += 4; ns >>= 4; }
	if (ns >> 2) { slot += 2; ns >>= 2; }
	if (ns >> 1) slot += 1;
	key = h * PT_SLOTS + slot;
	v = bpf_map_lookup_elem(&hists, &key);
	if (v)
		*v += 1;
}

static __always_inline void bump(void *map, const void *key, bool miss)
{
	struct pt_count *c = bpf_map_lookup_elem(map, key), zero = {};

	if (!c) {
		bpf_map_update_elem(map, key, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(map, key);
		if (!c)
			return; /* full: the totals in "counters" still count it */
	}
	c->lookups++;
	if (miss)
		c->misses++;
}

/* A new ring-buffer record, its name copied from the traced process
 * (LEN bytes, not necessarily NUL-terminated there). NULL if the ring is
 * full: the loader reports the drops it sees in the feed sequence. */
static __always_inline struct pt_event *event(__u32 type, __u32 pid, const char *name,
					      __u64 len)
{
	struct pt_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	__u32 n = len > PT_NAME_MAX - 1 ? PT_NAME_MAX - 1 : (__u32)len;

	if (!e)
		return NULL;
	e->ts_ns = bpf_ktime_get_ns();
	e->type = type;
	e->pid = pid;
	e->kind = 0;
	e->a = e->b = e->c = 0;
	e->name[0] = 0;
	e->node[0] = 0;
	e->peer[0] = 0;
	if (name && n && bpf_probe_read_user(e->name, n & (PT_NAME_MAX - 1), name) == 0)
		e->name[n & (PT_NAME_MAX - 1)] = 0;
	else
		n = 0;
	e->name_len = n;
	return e;
}

/* An event with its KIND and values A, B, C (what they mean is the
 * type's: procreg_trace.h), sent at once. */
static __always_inline void emit(__u32 type, __u32 pid, const char *name, __u64 len,
				 __u32 kind, __u64 a, __u64 b, __u64 c)
{
	struct pt_event *e = event(type, pid, name, len);

	if (!e)
		return;
	e->kind = kind;
	e->a = a;
	e->b = b;
	e->c = c;
	bpf_ringbuf_submit(e, 0);
}

/* ---- library ---------------------------------------------------------- */

/* Whether a library probe fired on the registry traced (the probes'
 * last two arguments are the table file's device and inode). */
static __always_inline bool ours(__u64 dev, __u64 ino)
{
	return !one_registry || (dev == reg_dev && ino == reg_ino);
}

SEC("usdt")
int BPF_USDT(on_lookup, __u64 hash, const char *name, __u64 len, int result, __u64 dev,
	     __u64 ino)
{
	bool miss = result == -2; /* -ENOENT */
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!ours(dev, ino))
		return 0;
	count(PT_C_LOOKUPS);
	if (miss)
		count(PT_C_MISSES);
	if (top_names) {
		bump(&names, &hash, miss);
		if (!bpf_map_lookup_elem(&seen, &hash)) {
			__u32 zero = 0;
			struct pt_name *n = bpf_map_lookup_elem(&scratch, &zero);

			if (n && bpf_probe_read_user_str(n->s, sizeof(n->s), name) > 0)
				bpf_map_update_elem(&seen, &hash, n, BPF_NOEXIST);
		}
	}
	if (top_procs)
		bump(&procs, &tgid, miss);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_lookup_latency, __u64 hash, __u64 ns, int result, __u64 dev, __u64 ino)
{
	if (!ours(dev, ino))
		return 0;
	hist(PT_H_LOOKUP, ns);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_request_done, int op, const char *name, __u64 len, int status, __u64 ns,
	     __u64 dev, __u64 ino)
{
	if (!ours(dev, ino))
		return 0;
	hist(PT_H_REQUEST, ns);
	return 0;
}

/* ---- daemon ----------------------------------------------------------- */

SEC("usdt")
int BPF_USDT(on_reply, int op, int pid, int status, __u64 ns, __u32 id)
{
	hist(PT_H_SERVE, ns);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_grace_period, __u64 gp, __u64 ns, __u32 waited)
{
	hist(PT_H_GRACE, ns);
	emit(PT_EV_GRACE, 0, NULL, 0, 0, ns, waited, gp);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_grace_period_hist, __u64 gp, __u64 ns, __u32 waited)
{
	hist(PT_H_GRACE, ns);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_death, int pid, __u64 removed, __u64 ns)
{
	hist(PT_H_DEATH, ns);
	emit(PT_EV_DEATH, pid, NULL, 0, 0, removed, ns, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_death_hist, int pid, __u64 removed, __u64 ns)
{
	hist(PT_H_DEATH, ns);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_change, __u32 type, __u32 pid, __u32 kind, const char *name, __u64 len,
	     __u64 seq)
{
	emit(PT_EV_CHANGE, pid, name, len, kind, type, seq, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_conflict, int pid, const char *name, __u64 len, __u32 holder, __u32 kind)
{
	emit(PT_EV_CONFLICT, pid, name, len, kind, holder, 0, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_grow, int kind, __u64 old_cap, __u64 new_cap, __u64 live)
{
	emit(PT_EV_GROW, 0, NULL, 0, kind, old_cap, new_cap, live);
	return 0;
}

/* ---- the bridge (replication) ---------------------------------------- */

static __always_inline void node_str(char *dst, const char *src)
{
	if (!src || bpf_probe_read_user_str(dst, PT_NODE_MAX, src) <= 0)
		dst[0] = 0;
}

SEC("usdt")
int BPF_USDT(on_bridge_out, __u32 op, __u32 kind, const char *name, __u64 len, __u64 seq,
	     __u64 bytes)
{
	count(PT_C_BRIDGE_OUT);
	if (bridge_changes)
		emit(PT_EV_BRIDGE_OUT, 0, name, len, kind, op, seq, bytes);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_bridge_in, const char *node, __u32 type, __u64 seq, __u64 ns, int result)
{
	count(PT_C_BRIDGE_IN);
	if (result < 0)
		count(PT_C_BRIDGE_REFUSED);
	hist(PT_H_BRIDGE_IN, ns);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_bridge_apply, const char *node, __u32 op, __u32 kind, const char *name,
	     __u64 len, int result)
{
	struct pt_event *e;

	count(PT_C_BRIDGE_APPLY);
	if (!bridge_changes)
		return 0;
	e = event(PT_EV_BRIDGE_APPLY, 0, name, len);
	if (!e)
		return 0;
	node_str(e->node, node);
	e->kind = kind;
	e->a = op;
	e->b = (__u64)(__s64)result;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_bridge_node, const char *node, int up, __u64 inc, __u64 removed)
{
	struct pt_event *e = event(PT_EV_BRIDGE_NODE, 0, NULL, 0);

	if (!e)
		return 0;
	node_str(e->node, node);
	e->a = up;
	e->b = inc;
	e->c = removed;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_bridge_conflict, const char *name, __u64 len, const char *winner,
	     const char *loser, __u32 local_pid, int local_lost)
{
	struct pt_event *e = event(PT_EV_BRIDGE_CONFLICT, local_pid, name, len);

	if (!e)
		return 0;
	node_str(e->node, winner);
	node_str(e->peer, loser);
	e->a = local_pid;
	e->b = local_lost;
	bpf_ringbuf_submit(e, 0);
	return 0;
}
