/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cli.h - what the procreg CLI's files share: options, exit statuses,
 * output helpers.
 *
 *   main.c       options, the command table, name and group commands
 *   inspect.c    top, readers, stats --format prometheus: counters and
 *                the reader registry, through the introspection API
 *   check.c      check: the report of procreg_check()
 *   nodes.c      nodes, and node names: through procreg_bridge()
 *   autostart.c  starting procregd for run and join when none serves
 */
#ifndef PROCREG_CLI_H
#define PROCREG_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "procreg.h"

/* Exit statuses, documented in --help and procreg(1). */
#define EXIT_NO 1       /* not found, name taken, timed out, check found damage */
#define EXIT_ERR 2      /* usage, no table, daemon unreachable, permission */

#define MAX_GROUPS 64

struct cli {
	const char *scope, *dir;
	char *meta;                       /* run, join --meta STR */
	size_t meta_len;                  /* its bytes (--escaped: may hold NUL) */
	int json;
	bool escaped;                     /* --escaped: operands in the escaped form */
	char *groups[MAX_GROUPS];         /* run --group G */
	int ngroups;
	const char *timeout;              /* --timeout SECONDS: wait's limit, else each
					   * wait for procregd's answer */
	int timeout_ms;                   /* ...for the library (procreg_opts) */
	const char *count;                /* wait --count N */
	const char *ttl;                  /* run --ttl SECONDS */
	const char *on_lost;              /* run --on-lost SIGNAL|none */
	int lost_signal;                  /* ...as a number, 0: none */
	unsigned int reg_flags;           /* run --queue, --replace, --replaceable, --lease-mark */
	bool once;                        /* top --once */
	const char *interval;             /* top --interval SECONDS */
	const char *format;               /* stats --format text|json|prometheus */
	bool no_autostart;                /* run, join --no-autostart */
	char **cmd;                       /* run, join: CMD [ARGS], NULL-terminated */
};

extern const char *prog;

void die_usage(const char *msg, const char *arg) __attribute__((noreturn));
procreg_t *open_or_die(const struct cli *c);
/* ERR from a call that talks to procregd, as a message: -ETIMEDOUT says
 * how long it waited. */
const char *daemon_strerror(const struct cli *c, int err);
/* NAME (or any word a user gave) for a message: escaped (output.h), and
 * no more than PROCREG_NAME_MAX of its bytes shown. Each call has a buffer
 * of its own; the last four results stay valid. */
const char *cli_name(const char *name);
/* The scope's name as the user chose it (option, environment, default). */
const char *scope_name(const struct cli *c);

/* inspect.c */
int cmd_top(struct cli *c, int argc, char **argv);
int cmd_readers(struct cli *c, int argc, char **argv);
void stats_prometheus(procreg_t *reg, const struct cli *c);

/* check.c */
int cmd_check(struct cli *c, int argc, char **argv);

/* nodes.c: the bridge's status (procregd --node), from procreg_bridge(). */
#include <stdint.h>
struct node_info {
	uint32_t id;
	char name[64];
	char addr[128];
	char incarnation[17];
	unsigned long long up_since_ns, changes_in, bytes_in, bytes_out;
};
struct nodes_info {
	char self[64];
	char incarnation[17];
	unsigned long long seq, changes_out, changes_in, conflicts, nodes_down, refused;
	struct node_info *v;
	size_t n;
	struct procreg_peer *peers;   /* every --peer, connected or not */
	size_t npeers;
};
/* 0, or negative (no file: the daemon does not replicate). */
int nodes_read(procreg_t *reg, struct nodes_info *ni);
void nodes_free(struct nodes_info *ni);
int cmd_nodes(struct cli *c, int argc, char **argv);

/* autostart.c: make sure a daemon serves the scope before a write; 0, or
 * EXIT_ERR with the reason printed. Does nothing with --no-autostart or
 * PROCREG_NO_AUTOSTART set (to anything but "" or "0"). */
int autostart(const struct cli *c, const char *what);

#endif
