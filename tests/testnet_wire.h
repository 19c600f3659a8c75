/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * testnet_wire.h - the messages between the test transport's switch
 * (testnet.c, inside a test process) and the bridge backend each daemon
 * loads (bridge_backend_testnet.c). One message per SOCK_SEQPACKET
 * datagram: a fixed header, then for SEND and FRAME one replication
 * frame (bridge_proto.h).
 *
 * A pair of nodes is "connected" while the switch says so; each time it
 * comes up it gets a new epoch, the way each TCP connection is a new
 * stream: a frame carries the epoch it was sent in, and one that arrives
 * after its epoch ended is dropped, never delivered into the next.
 */
#ifndef PROCREG_TESTNET_WIRE_H
#define PROCREG_TESTNET_WIRE_H

#include <stdint.h>

#include "procreg/backend.h"

enum tn_type {
	TN_HELLO = 1,  /* backend -> switch: NAME is this node, INC its incarnation */
	TN_SEND,       /* backend -> switch: a frame for NAME, sent in EPOCH */
	TN_RESET,      /* backend -> switch: NAME's frame was refused in EPOCH: drop the pair */
	TN_UP,         /* switch -> backend: NAME (incarnation INC) is up, as of EPOCH */
	TN_DOWN,       /* switch -> backend: NAME is down: EPOCH ended */
	TN_FRAME,      /* switch -> backend: a frame from NAME, sent in EPOCH */
};

struct tn_hdr {
	uint8_t type;
	uint8_t pad[3];
	uint32_t epoch;
	uint64_t inc;
	char name[PR_BRIDGE_NODE_MAX + 1]; /* NUL-terminated */
};

#define TN_MSG_MAX (sizeof(struct tn_hdr) + PR_BRIDGE_FRAME_MAX)

#endif
