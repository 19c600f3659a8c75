/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * hlc.h - a hybrid logical clock for replication stamps, kept in one
 * 64-bit nanosecond value so that a stamp still reads as a wall-clock time
 * (a record's registered_ns): the logical part is the nanoseconds a stamp
 * runs ahead of the wall clock.
 *
 * A node stamps a local event with pr_hlc_now(): after every stamp it has
 * made and every stamp it has observed, and never behind its wall clock.
 * It observes every stamp that arrives from another node. So an event
 * that causally follows another (a name registered on b after b learned
 * that a released it) gets the later stamp, whatever the two clocks say;
 * concurrent events compare by wall clock, roughly. A stamp more than
 * MAX_AHEAD past our wall clock is not observed: one node with a clock far
 * in the future must not drag every node's stamps there.
 */
#ifndef PROCREG_HLC_H
#define PROCREG_HLC_H

#include <errno.h>
#include <stdint.h>

struct pr_hlc {
	uint64_t last;            /* the newest stamp made or observed */
};

static inline uint64_t pr_hlc_now(struct pr_hlc *h, uint64_t wall_ns)
{
	h->last = wall_ns > h->last ? wall_ns : h->last + 1;
	return h->last;
}

/* 0, or -ERANGE (and nothing observed) if REMOTE is too far ahead. */
static inline int pr_hlc_observe(struct pr_hlc *h, uint64_t remote, uint64_t wall_ns,
				 uint64_t max_ahead_ns)
{
	if (remote > wall_ns && remote - wall_ns > max_ahead_ns)
		return -ERANGE;
	if (remote > h->last)
		h->last = remote;
	return 0;
}

#endif /* PROCREG_HLC_H */
