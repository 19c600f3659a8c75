/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * nodes_file.h - the replication status file, DIR/procreg.SCOPE.nodes.
 *
 * Written by procregd --node (tools/procregd/bridge.c), replaced
 * atomically (a new file renamed over the old) when a node comes or goes
 * and about once a second; read by the library (introspect.c:
 * procreg_bridge(), procreg_node_name()). No file: the daemon does not
 * replicate. Both sides use the formats below, so that they change
 * together:
 *
 *   procreg-nodes 1
 *   self NAME INCARNATION SEQ
 *   stats CHANGES_OUT CHANGES_IN CONFLICTS NODES_DOWN REFUSED
 *   node ID NAME ADDR INCARNATION UP_SINCE_NS CHANGES_IN BYTES_IN BYTES_OUT
 *   down ID NAME ADDR INCARNATION
 *   peer UP ADDR NAME
 *
 * one "node" line per other node up, one "down" line per node down whose
 * entries the table still holds (for about a second: a reader that
 * finds one of them must still learn whose it is), and one
 * "peer" line per peer the
 * daemon was told to connect to (--peer), up or not: UP is 1 while a
 * connection to it is up, else 0; ADDR as given; NAME the node last
 * authenticated there, "-" before any. Names are [A-Za-z0-9_.@-] and
 * addresses printable ASCII without spaces (bridge_proto.h checks both),
 * so a word is a field; an unknown address is "-". INCARNATION is 16 hex
 * digits. A reader skips lines it does not know, so a writer may add some.
 */
#ifndef PROCREG_NODES_FILE_H
#define PROCREG_NODES_FILE_H

#define PR_NODES_SUFFIX ".nodes"
#define PR_NODES_MAGIC "procreg-nodes 1"

/* printf formats (the writer). */
#define PR_NODES_SELF_FMT "self %s %016llx %llu\n"
#define PR_NODES_STATS_FMT "stats %llu %llu %llu %llu %llu\n"
#define PR_NODES_NODE_FMT "node %u %s %s %016llx %llu %llu %llu %llu\n"
#define PR_NODES_DOWN_FMT "down %u %s %s %016llx\n"
#define PR_NODES_PEER_FMT "peer %d %s %s\n"
#define PR_NODES_NO_ADDR "-"
#define PR_NODES_NO_NAME "-"

/* scanf formats (the reader): the same fields, bounded by
 * PROCREG_NODE_NAME_MAX and PROCREG_NODE_ADDR_MAX. */
#define PR_NODES_SELF_SCAN "self %63s %16s %llu"
#define PR_NODES_STATS_SCAN "stats %llu %llu %llu %llu %llu"
#define PR_NODES_NODE_SCAN "node %u %63s %127s %16s %llu %llu %llu %llu"
#define PR_NODES_DOWN_SCAN "down %u %63s %127s %16s"
#define PR_NODES_PEER_SCAN "peer %d %127s %63s"

#endif /* PROCREG_NODES_FILE_H */
