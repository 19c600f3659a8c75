/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * procreg_trace.h - what the BPF side (procreg_trace.bpf.c) and the loader
 * (procreg_trace.c) share: the event record of the ring buffer, and the
 * layout of the per-CPU counter and histogram maps.
 */
#ifndef PROCREG_TRACE_H
#define PROCREG_TRACE_H

#define PT_NAME_MAX 256          /* PROCREG_NAME_MAX and its NUL */
#define PT_SLOTS 64              /* log2 histogram buckets: [2^i, 2^(i+1)) ns */

/* The kind a probe names (procregd:publish, change, conflict, bridge_out,
 * bridge_apply): the values README.md's "Tracing" documents. */
enum pt_kind {
	PT_KIND_NAME = 1,
	PT_KIND_GROUP = 2,
	PT_KIND_MEMBER = 3,
};

/* Histograms, one row each in the "hists" per-CPU array. */
enum pt_hist {
	PT_H_LOOKUP,             /* procreg:lookup_latency */
	PT_H_REQUEST,            /* procreg:request_done, the caller's round trip */
	PT_H_SERVE,              /* procregd:reply, the daemon's time on a request */
	PT_H_GRACE,              /* procregd:grace_period */
	PT_H_DEATH,              /* procregd:death, pidfd wake-up to removal */
	PT_H_BRIDGE_IN,          /* procregd:bridge_in, a frame from another node applied */
	PT_H_N,
};

/* Counters, one slot each in the "counters" per-CPU array. */
enum pt_counter {
	PT_C_LOOKUPS,
	PT_C_MISSES,
	PT_C_BRIDGE_OUT,         /* procregd:bridge_out: changes sent */
	PT_C_BRIDGE_IN,          /* procregd:bridge_in: frames received */
	PT_C_BRIDGE_REFUSED,     /* ... of which refused (a gap, a protocol error) */
	PT_C_BRIDGE_APPLY,       /* procregd:bridge_apply: entries applied */
	PT_C_N,
};

/* Per name hash ("names") and per process ("procs"), per CPU. */
struct pt_count {
	__u64 lookups;
	__u64 misses;
};

/* A name as a lookup passed it ("seen", by hash). */
struct pt_name {
	char s[PT_NAME_MAX];
};

/* Ring buffer records. */
enum pt_event_type {
	PT_EV_CHANGE = 1,        /* procregd:change: a = PROCREG_EV_*, b = feed sequence */
	PT_EV_DEATH,             /* procregd:death: a = entries removed, b = ns to removal */
	PT_EV_CONFLICT,          /* procregd:conflict: a = holder pid */
	PT_EV_GRACE,             /* procregd:grace_period: a = ns, b = slots waited on, c = gp */
	PT_EV_GROW,              /* procregd:grow: a = old capacity, b = new, c = live */
	PT_EV_BRIDGE_OUT,        /* procregd:bridge_out: a = op, b = seq, c = frame bytes */
	PT_EV_BRIDGE_APPLY,      /* procregd:bridge_apply: node = origin, a = op, b = result */
	PT_EV_BRIDGE_NODE,       /* procregd:bridge_node: node, a = 1 up, 0 down, 2 lost (grace), b = incarnation, c = removed */
	PT_EV_BRIDGE_CONFLICT,   /* procregd:bridge_conflict: node = winner, peer = loser,
				  * a = local pid that lost (0: none), b = local lost */
};

#define PT_NODE_MAX 64           /* PROCREG_NODE_NAME_MAX and its NUL */

struct pt_event {
	__u64 ts_ns;             /* bpf_ktime_get_ns() */
	__u32 type;              /* enum pt_event_type */
	__u32 pid;               /* the process the event is about */
	__u32 kind;              /* enum pt_kind, index kind for GROW */
	__u32 name_len;          /* bytes in name, 0 if none */
	__u64 a, b, c;
	char name[PT_NAME_MAX];
	char node[PT_NODE_MAX];  /* bridge events: a node's name, "" if none */
	char peer[PT_NODE_MAX];  /* bridge_conflict: the losing node */
};

#endif /* PROCREG_TRACE_H */
