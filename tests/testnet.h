/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * testnet.h - the test transport's switch: daemons started with
 * --bridge-backend bridge_backend_testnet.so and PROCREG_TESTNET set to
 * tn_path() attach to it, and it relays their replication frames. The
 * test decides, per directed link, whether it is connected and what
 * happens to frames on it; every random decision comes from one seeded
 * generator, so a run is reproducible from its seed (up to scheduling).
 *
 * A pair of nodes is up while both of its links are connected and both
 * daemons are attached: cutting either direction drops the pair on both
 * sides (a TCP connection does not survive losing one direction), and
 * healing it brings it up in a new epoch, each side starting with the
 * other's snapshot. A pair one side refused a frame on goes down and
 * comes back up a few milliseconds later.
 *
 * The switch runs in a thread of the test process; every function here
 * may be called from the test's thread.
 */
#ifndef PROCREG_TESTNET_H
#define PROCREG_TESTNET_H

#include <stdbool.h>
#include <stdint.h>

struct testnet;

struct tn_faults {
	uint32_t delay_ms;      /* every frame is held this long */
	uint32_t jitter_ms;     /* plus up to this much more, drawn per frame */
	uint32_t loss_pm;       /* per mille of frames dropped, of any type */
	uint32_t reorder_pm;    /* per mille of frames swapped with the one before */
};

struct tn_stats {
	uint64_t frames;        /* delivered */
	uint64_t dropped;       /* by loss */
	uint64_t snap_dropped;  /* by tn_drop_snap */
	uint64_t reordered;
	uint64_t stale;         /* sent in an epoch that ended before delivery */
	uint64_t resets;        /* pairs dropped because a side refused a frame */
	uint64_t ups;           /* pairs brought up */
};

/* Start a switch listening in DIR (its socket is DIR/testnet.sock), its
 * generator seeded with SEED (not 0). */
struct testnet *tn_start(const char *dir, uint64_t seed);
void tn_stop(struct testnet *t);
const char *tn_path(const struct testnet *t);

/* Connect or cut the link from node A to node B (names as given with
 * --node). Links are connected until cut. */
void tn_link(struct testnet *t, const char *a, const char *b, bool connected);
/* Both directions. */
void tn_pair(struct testnet *t, const char *a, const char *b, bool connected);
/* Faults on the link from A to B (NULL: every link, present and future). */
void tn_faults(struct testnet *t, const char *a, const char *b, const struct tn_faults *f);
/* On the link from A to B, drop the next COUNT SNAP frames of part PART
 * (TN_SNAP_LAST: the last part of a snapshot, whatever its number),
 * whatever tn_faults says. */
#define TN_SNAP_LAST UINT32_MAX
void tn_drop_snap(struct testnet *t, const char *a, const char *b, uint32_t part, uint32_t count);
/* Whether the pair A, B is up now (both attached, both links connected). */
bool tn_is_up(struct testnet *t, const char *a, const char *b);
/* Whether node A is attached. */
bool tn_attached(struct testnet *t, const char *a);
void tn_get_stats(struct testnet *t, struct tn_stats *s);

#endif
