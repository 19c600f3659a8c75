/*
 * procreg_trace.h - what the BPF side (procreg_trace.bpf.c) and the loader
 * (procreg_trace.c) share: the event record of the ring buffer, and the
 * layout of the per-CPU counter and histogram maps.
 */
#ifndef PROCREG_TRACE_H
#define PROCREG_TRACE_H

#define PT_NAME_MAX 256          /* PROCREG_NAME_MAX and its NUL */
#define PT_SLOTS 64              /* log2 histogram buckets: [2^i, 2^(i+1)) ns */

/* Histograms, one row each in the "hists" per-CPU array. */
enum pt_hist {
	PT_H_LOOKUP,             /* procreg:lookup_latency */
	PT_H_REQUEST,            /* procreg:request_done, the caller's round trip */
	PT_H_SERVE,              /* procregd:reply, the daemon's time on a request */
	PT_H_GRACE,              /* procregd:grace_period */
	PT_H_DEATH,              /* procregd:death, pidfd wake-up to removal */
	PT_H_N,
};

/* Counters, one slot each in the "counters" per-CPU array. */
enum pt_counter {
	PT_C_LOOKUPS,
	PT_C_MISSES,
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
};

struct pt_event {
	__u64 ts_ns;             /* bpf_ktime_get_ns() */
	__u32 type;              /* enum pt_event_type */
	__u32 pid;               /* the process the event is about */
	__u32 kind;              /* record kind (PR_KIND_*), index kind for GROW */
	__u32 name_len;          /* bytes in name, 0 if none */
	__u64 a, b, c;
	char name[PT_NAME_MAX];
};

#endif /* PROCREG_TRACE_H */
