/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fuzz_table.c - libFuzzer harness for the table reader.
 *
 * The input is written as a scope's table file, and everything a client
 * does without the daemon runs on it:
 * procreg_open, lookup (copying the entry out, and a presence test),
 * foreach, members, group_count, groups, stats and the change feed. A reader must neither crash nor loop on any file.
 *
 * So that the fuzzer spends its time past procreg__check_table_hdr, the
 * header fields that check compares with this build (magic, version,
 * sizes) are made right unless the input's last byte is 0xff, in which
 * case the input is written untouched.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

static char dir[64], table_path[PR_PATH_MAX], sock_path[PR_PATH_MAX];
static uint8_t buf[1u << 20];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/procreg-fuzz.XXXXXX");
	if (!mkdtemp(dir))
		abort();
	snprintf(table_path, sizeof(table_path), "%s/procreg.fuzz", dir);
	snprintf(sock_path, sizeof(sock_path), "%s/nobody.sock", dir);
}

struct walk {
	procreg_t *reg;
	unsigned n;
};

static int on_member(const struct procreg_entry *e, void *arg)
{
	struct walk *w = arg;

	(void)e;
	return ++w->n > 100000;
}

static int on_name(const struct procreg_entry *e, void *arg)
{
	struct walk *w = arg;
	unsigned char meta[PROCREG_META_MAX];
	PROCREG_OPTS(procreg_entry, again, .meta = meta, .meta_size = sizeof(meta));

	procreg_lookup(w->reg, e->name, &again);
	procreg_lookup(w->reg, e->name, NULL);
	return ++w->n > 100000;
}

static int on_group(const struct procreg_group *g, void *arg)
{
	struct walk *w = arg, m = { w->reg, 0 };
	uint64_t members, local;

	procreg_members(w->reg, g->name, on_member, &m);
	procreg_group_count(w->reg, g->name, &members, &local);
	return ++w->n > 100000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = { "a", "svc0", "svc1", "svc3", "g0", "g1", "nope" };
	/* A socket path where nothing listens: a header that says a daemon
	 * runs makes readers hand it their pages, and that must fail fast
	 * and harmlessly, not reach whatever path the input names. */
	PROCREG_OPTS(procreg_opts, o, .scope = "fuzz", .dir = dir, .socket = sock_path);
	PROCREG_OPTS(procreg_stats, st);
	PROCREG_OPTS(procreg_event, ev);
	unsigned char meta[PROCREG_META_MAX];
	PROCREG_OPTS(procreg_entry, e, .meta = meta, .meta_size = sizeof(meta));
	struct walk w;
	uint64_t members, local, cursor;
	procreg_t *reg;
	int fd;

	if (!dir[0])
		setup();
	if (size > sizeof(buf))
		return 0;
	memcpy(buf, data, size);
	if (size >= PR_HDR_SIZE && data[size - 1] != 0xff) {
		struct pr_table_hdr *h = (struct pr_table_hdr *)buf;

		h->magic = PR_TABLE_MAGIC;
		h->layout_version = PR_LAYOUT_VERSION;
		h->hdr_size = PR_HDR_SIZE;
		h->size_desc = PR_SIZE_DESC;
		h->file_size = size;
	}
	fd = open(table_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || (size && write(fd, buf, size) != (ssize_t)size))
		abort();
	close(fd);

	reg = procreg_open(&o);
	if (!reg)
		return 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		procreg_lookup(reg, names[i], &e);
		procreg_lookup(reg, names[i], NULL); /* a short name: its slot alone */
		procreg_group_count(reg, names[i], &members, &local);
		w = (struct walk){ reg, 0 };
		procreg_members(reg, names[i], on_member, &w);
	}
	w = (struct walk){ reg, 0 };
	procreg_foreach(reg, on_name, &w);
	w = (struct walk){ reg, 0 };
	procreg_groups(reg, on_group, &w);
	procreg_stats(reg, &st);
	cursor = 0;
	for (int i = 0; i < 64; i++)
		if (procreg_next_event(reg, &cursor, &ev, 0) == -ETIMEDOUT)
			break;
	cursor = procreg_feed_head(reg);
	cursor = cursor > 4 ? cursor - 4 : 0;
	for (int i = 0; i < 8; i++)
		if (procreg_next_event(reg, &cursor, &ev, 0) == -ETIMEDOUT)
			break;
	procreg_close(reg);
	return 0;
}
