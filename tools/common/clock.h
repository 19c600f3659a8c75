/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * clock.h - the tools' monotonic clock, and the rate limit of a log line
 * that others can provoke. Header only: procreg-bridge-nats.so, which
 * links nothing of procregd's, uses it as the tools do. The library and
 * procregd have procreg__mono_ns() (lib/internal.h); the tools built on
 * the public library alone have this.
 */
#ifndef PROCREG_TOOLS_CLOCK_H
#define PROCREG_TOOLS_CLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC, in nanoseconds. */
static inline uint64_t pr_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A message that any client or peer can provoke at will goes out once a
 * second at most, so that whoever provokes it cannot flood the log. One
 * that a few honest events in a row make (a node refused and resynced)
 * may have BURST more go out within a second, earned back one for each
 * second without a line. */
struct pr_ratelimit {
	uint64_t last_ns;    /* when the last one went out; 0: never */
	uint64_t held;       /* held back since */
	uint32_t burst;      /* set by its owner; 0: one a second */
	uint32_t extra;      /* of BURST, left */
};

/* At NOW_NS (monotonic): true if the message goes out, with *HELD (if
 * not NULL) set to how many were held back since the last one went out;
 * false if it is held back (and counted). */
static inline bool pr_ratelimit_pass(struct pr_ratelimit *rl, uint64_t now_ns, uint64_t *held)
{
	if (!rl->last_ns) {
		rl->extra = rl->burst;
	} else if (now_ns - rl->last_ns >= 2000000000ull) {
		uint64_t earned = (now_ns - rl->last_ns) / 1000000000ull - 1;

		rl->extra = earned >= rl->burst - rl->extra ? rl->burst : rl->extra + (uint32_t)earned;
	}
	if (rl->last_ns && now_ns - rl->last_ns < 1000000000ull) {
		if (!rl->extra) {
			rl->held++;
			return false;
		}
		rl->extra--;
	}
	if (held)
		*held = rl->held;
	rl->held = 0;
	rl->last_ns = now_ns;
	return true;
}

/* At NOW_NS: true if RL holds a count of lines held back in a second
 * that is up, with *HELD set to it, for a line that says it now: else the
 * count of a last burst would wait for a next line that may never come.
 * The next line of the kind still goes out at once (two lines a second at
 * most): a count said on time must not keep back the line that says why. */
static inline bool pr_ratelimit_due(struct pr_ratelimit *rl, uint64_t now_ns, uint64_t *held)
{
	if (!rl->held || now_ns - rl->last_ns < 1000000000ull)
		return false;
	*held = rl->held;
	rl->held = 0;
	return true;
}

#endif /* PROCREG_TOOLS_CLOCK_H */
