/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gen_seeds.c - writes the fuzzers' seed corpora (tests/fuzz/corpus/).
 *
 *   gen_seeds OUTDIR
 *
 * OUTDIR/proto/: request packets as clients send them, built with the
 * encoder. OUTDIR/table/: real tables written by the daemon's writer
 * (names, groups with members, a removal, feed events), cut after the
 * last arena byte in use so that each is a few KiB; file_size in the
 * header says the cut length, as fuzz_table expects. feed-cap-wraps is
 * a crash fixed in lib/feed.c, kept as a regression seed. OUTDIR/bridge/:
 * replication frames, each file led by the byte that tells fuzz_bridge
 * what the rest is (a stream to decode, a handshake, records).
 * OUTDIR/envelope/: NATS envelopes, each led by the byte that tells
 * fuzz_envelope what the rest is (a message from a stranger, the fields
 * of one to seal, a mask over a genuine one).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "proto.h"
#include "bridge_envelope.h"
#include "bridge_proto.h"

static void put_file(const char *dir, const char *name, const void *p, size_t n)
{
	char path[PR_PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
		perror(path);
		exit(1);
	}
}

static void proto_seeds(const char *dir)
{
	static uint8_t b[PR_PACKET_MAX];
	size_t n;

	n = 0;
	procreg__proto_put_hello(b, &n, PR_OP_HELLO, 1, 0);
	put_file(dir, "hello", b, n);
	n = 0;
	procreg__proto_put_name(b, &n, PR_OP_REGISTER, 0, 2, "svc.a", 5, "meta", 4);
	put_file(dir, "register", b, n);
	n = 0;
	procreg__proto_put_name_arg(b, &n, PR_OP_REGISTER, PR_F_QUEUE | PR_F_REPLACEABLE, 3,
				    "leased", 6, NULL, 0, 1500);
	procreg__proto_put_name(b, &n, PR_OP_JOIN, 0, 4, "group", 5, "m", 1);
	procreg__proto_put_name(b, &n, PR_OP_LEAVE, 0, 5, "group", 5, NULL, 0);
	procreg__proto_put_name(b, &n, PR_OP_UNREGISTER, 0, 6, "svc.a", 5, NULL, 0);
	procreg__proto_put_name(b, &n, PR_OP_REFRESH, 0, 7, "leased", 6, NULL, 0);
	procreg__proto_put(b, &n, PR_OP_SYNC, 0, 8, 0, NULL, 0, NULL, 0);
	put_file(dir, "batch", b, n);
	n = 0;
	procreg__proto_put_hello(b, &n, PR_OP_HELLO | PR_OP_REPLY, 1, -EPERM);
	procreg__proto_put(b, &n, PR_OP_REGISTER | PR_OP_REPLY, 0, 2, -EEXIST, NULL, 0, NULL, 0);
	put_file(dir, "replies", b, n);
}

/* Mode byte (fuzz_bridge.c) 0: frames for the decoder; 1 and 2:
 * handshake frames for the dialed end and the dialer; 3: records. */
static void bridge_seeds(const char *dir)
{
	static uint8_t b[PR_BP_FRAME_MAX];
	static const uint8_t nonce[PR_BP_NONCE] = { 1, 2, 3 }, mac[PR_BP_MAC] = { 4, 5, 6 };
	static const uint8_t key[PR_BP_KEY] = { 9 }; /* a point on the curve: u = 9 */
	struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 42, .uid = 1000,
				 .start_time = 7, .registered_ns = 9, .name = "svc.a",
				 .name_len = 5, .meta = "unix:/run/a.sock", .meta_len = 16 };
	size_t n = 1, start;

	b[0] = 0;
	procreg__bp_put_hello(b, sizeof(b), &n, 1, nonce, key, "node-a", "127.0.0.1:7000");
	procreg__bp_put_auth(b, sizeof(b), &n, mac);
	procreg__bp_put_refuse(b, sizeof(b), &n, PR_BP_REFUSE_VERSION, "version 3, not 2");
	procreg__bp_put_heartbeat(b, sizeof(b), &n, 1, 3);
	put_file(dir, "handshake", b, n);
	b[0] = 1;
	put_file(dir, "handshake-dialed", b, n);
	b[0] = 2;
	put_file(dir, "handshake-dialer", b, n);
	b[0] = 3;
	memset(b + 1, 0, 64);
	b[1] = 64;
	put_file(dir, "record", b, 65);
	b[0] = 0;
	n = 1;
	procreg__bp_put_change(b, sizeof(b), &n, 1, 4, "node-a", &e);
	e.op = PR_BP_DEL;
	e.kind = PR_KIND_MEMBER;
	e.name = "workers";
	e.name_len = 7;
	procreg__bp_put_change(b, sizeof(b), &n, 1, 5, "node-a", &e);
	put_file(dir, "changes", b, n);
	n = 1;
	procreg__bp_begin(b, sizeof(b), &n, PR_BP_SNAP, 1, 5, 0, &start);
	e.op = PR_BP_PUT;
	procreg__bp_add_entry(b, sizeof(b), &n, start, &e);
	e.kind = PR_KIND_NAME;
	e.name = "svc.b";
	e.name_len = 5;
	procreg__bp_add_entry(b, sizeof(b), &n, start, &e);
	procreg__bp_end(b, n, start, 0);
	/* A snapshot's second and last part. */
	procreg__bp_begin(b, sizeof(b), &n, PR_BP_SNAP, 1, 5, 1, &start);
	e.name = "svc.c";
	procreg__bp_add_entry(b, sizeof(b), &n, start, &e);
	procreg__bp_end(b, n, start, PR_BP_SNAP_LAST);
	procreg__bp_begin(b, sizeof(b), &n, PR_BP_PEERS, 1, 5, 0, &start);
	procreg__bp_add_peer(b, sizeof(b), &n, start, "node-b", "127.0.0.1:7001");
	procreg__bp_add_peer(b, sizeof(b), &n, start, "node-c", "[::1]:7002");
	procreg__bp_end(b, n, start, 0);
	put_file(dir, "snapshot-peers", b, n);
}

/* Mode byte (fuzz_envelope.c) 0: messages as strangers send them (a
 * well-formed envelope whose MAC is under another key, with the frames
 * of a stream; junk); 1: fields to seal; 2: masks. */
static void envelope_seeds(const char *dir)
{
	static uint8_t b[PR_ENV_MAX + 1], body[1024];
	struct pr_bp_entry e = { .op = PR_BP_PUT, .kind = PR_KIND_NAME, .pid = 42, .uid = 1000,
				 .start_time = 7, .registered_ns = 9, .name = "svc.a",
				 .name_len = 5, .meta = "unix:/run/a.sock", .meta_len = 16 };
	struct pr_env env = { .type = PR_ENV_STREAM, .flags = PR_ENV_ANNOUNCE, .sender = "node-a",
			      .sender_len = 6, .incarnation = 1, .counter = 1u << 30, .req = 0 };
	struct pr_env_key *k = NULL;
	size_t n = 0, len = 0;

	procreg__bp_put_change(body, sizeof(body), &n, 1, 4, "node-a", &e);
	procreg__bp_put_heartbeat(body, sizeof(body), &n, 1, 4);
	env.body = body;
	env.body_len = n;
	if (procreg__env_key_new((const uint8_t *)"not-the-fuzzers-cookie", 22, &k) < 0 ||
	    procreg__env_seal(k, "procreg.default.node.node-a", &env, b + 1, sizeof(b) - 1,
			      &len) < 0) {
		fprintf(stderr, "gen_seeds: envelope not sealed\n");
		exit(1);
	}
	procreg__env_key_free(k);
	b[0] = 0;
	put_file(dir, "stream-other-key", b, len + 1);
	put_file(dir, "junk", "\0PRN1junk", 10);
	/* type, flags, sender_len, incarnation, counter, req, sender, body */
	b[0] = 1;
	b[1] = PR_ENV_SNAP;
	b[2] = 0;
	b[3] = 6;
	memset(b + 4, 0, 24);
	b[4] = 1;
	b[12] = 2;
	b[20] = 3;
	memcpy(b + 28, "node-a", 6);
	memcpy(b + 34, body, n);
	put_file(dir, "fields-snap", b, 34 + n);
	b[1] = PR_ENV_SNAPREQ;
	put_file(dir, "fields-snapreq", b, 34);
	b[0] = 2;
	memset(b + 1, 0, 64);
	put_file(dir, "mask-none", b, 65);
	b[10] = 0x40;
	put_file(dir, "mask-sender", b, 65);
}

/* Publish an entry for PID under K in ROOT: a name, or a membership. */
static void publish(struct pr_writer *w, struct pr_root *root, const struct pr_key *k,
		    const char *s, const char *meta, uint32_t pid, uint32_t ev)
{
	struct pr_record t = { 0 };
	uint64_t pos, off;

	if (procreg__w_reserve(w, root) < 0)
		exit(1);
	procreg__w_find(w, root, k, &pos);
	t.kind = k->kind;
	t.pid = pid;
	t.start_time = 1000 + pid;
	t.uid = 1000;
	t.name_len = (uint16_t)strlen(s);
	t.meta_len = (uint16_t)strlen(meta);
	if (procreg__w_new_record(w, &t, s, meta, &off) < 0)
		exit(1);
	procreg__w_publish(w, root, pos, off);
	procreg__w_emit(w, ev, (const struct pr_record *)(w->map.base + off));
}

static void name(struct pr_writer *w, const char *s, const char *meta, uint32_t pid)
{
	struct pr_key k;

	pr_key_name(&k, PR_KIND_NAME, s, strlen(s), w->map.hdr->hash_seed);
	publish(w, &w->map.hdr->names, &k, s, meta, pid, PROCREG_EV_REGISTERED);
}

static void member(struct pr_writer *w, const char *g, uint32_t pid)
{
	struct pr_root *root;
	struct pr_key k;

	if (procreg__w_group(w, g, strlen(g), true, &root) < 0)
		exit(1);
	pr_key_member(&k, pid, 1000 + pid, 0, w->map.hdr->hash_seed);
	publish(w, root, &k, g, "mm", pid, PROCREG_EV_JOINED);
}

static void table_seed(const char *tmp, const char *out, const char *fname, int variant)
{
	struct pr_paths p;
	struct pr_writer w;
	struct pr_writer_opts o = { .max_size = PR_HDR_SIZE + (1u << 20), .readers = 8,
				    .mode = 0644 };
	const char *why = "";
	char scope[32];
	uint8_t *copy;
	size_t len;

	snprintf(scope, sizeof(scope), "seed%d", variant);
	if (procreg__paths(&p, scope, tmp, NULL) < 0 || procreg__writer_open(&w, &p, &o, &why) < 0) {
		fprintf(stderr, "gen_seeds: writer: %s\n", why);
		exit(1);
	}
	if (variant >= 1) {
		name(&w, "a", "", 10);
		name(&w, "svc0", "meta0", 11);
	}
	if (variant >= 2) {
		char s[16];

		for (int i = 1; i < 12; i++) {
			snprintf(s, sizeof(s), "svc%d", i);
			name(&w, s, "x", (uint32_t)(20 + i));
		}
		member(&w, "g0", 10);
		member(&w, "g0", 11);
		member(&w, "g1", 12);
		procreg__w_unpublish(&w, procreg__w_find_name(&w, "svc3", 4, &(uint64_t){ 0 }));
	}
	len = (w.map.hdr->arena_top + PR_ALIGN - 1) & ~(size_t)(PR_ALIGN - 1);
	copy = malloc(len);
	memcpy(copy, w.map.base, len);
	((struct pr_table_hdr *)copy)->file_size = len;
	if (variant == 3) {
		/* The reader crash fuzz_table led to: a ring capacity whose
		 * size in bytes wraps to 0, and a head far past the ring. */
		((struct pr_table_hdr *)copy)->feed_cap = 1ull << 58;
		((struct pr_table_hdr *)copy)->feed_head = 1ull << 40;
	}
	put_file(out, fname, copy, len);
	free(copy);
	procreg__writer_close(&w);
	unlink(p.table);
}

int main(int argc, char **argv)
{
	char dir[PR_PATH_MAX], tmp[] = "/tmp/procreg-seeds.XXXXXX";

	if (argc != 2) {
		fprintf(stderr, "usage: gen_seeds OUTDIR\n");
		return 2;
	}
	snprintf(dir, sizeof(dir), "%s/proto", argv[1]);
	mkdir(argv[1], 0755);
	mkdir(dir, 0755);
	proto_seeds(dir);
	snprintf(dir, sizeof(dir), "%s/bridge", argv[1]);
	mkdir(dir, 0755);
	bridge_seeds(dir);
	snprintf(dir, sizeof(dir), "%s/envelope", argv[1]);
	mkdir(dir, 0755);
	envelope_seeds(dir);
	snprintf(dir, sizeof(dir), "%s/table", argv[1]);
	mkdir(dir, 0755);
	if (!mkdtemp(tmp))
		return 1;
	table_seed(tmp, dir, "empty", 0);
	table_seed(tmp, dir, "two-names", 1);
	table_seed(tmp, dir, "names-groups", 2);
	table_seed(tmp, dir, "feed-cap-wraps", 3);
	rmdir(tmp);
	return 0;
}
