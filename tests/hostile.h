/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * hostile.h - what the tests of safe output share: names, groups and
 * metadata an unprivileged user registers to attack whoever reads them,
 * and the checks every output must pass.
 */
#ifndef PROCREG_TEST_HOSTILE_H
#define PROCREG_TEST_HOSTILE_H

#include <stddef.h>

#include "procreg.h"
#include "tjson.h"

/* Names with escape sequences, line breaks, C1 controls, bidirectional
 * overrides, bytes that are not UTF-8 (lone, truncated, overlong,
 * surrogate, above U+10FFFF), valid non-ASCII UTF-8, a leading '-'. None
 * holds a space, so that a column of text output is one name. */
#define TH_NHOSTILE 21
#define TH_NHOSTILE_GROUPS 4
extern const char *const th_hostile_names[TH_NHOSTILE];
extern const char *const th_hostile_groups[TH_NHOSTILE_GROUPS];
/* Metadata of the same kind, NUL included. */
extern const char th_hostile_meta[];
extern const size_t th_hostile_meta_len;

/* Register PREFIX + each hostile name in REG, with the hostile metadata,
 * and with JOIN join each hostile group (the same metadata): 0, or the
 * first error. */
int th_hostile_claim(procreg_t *reg, const char *prefix, int join);

/* The index in V (NV strings) of the bytes B[0..N), or -1. */
int th_find(const char *const *v, size_t nv, const char *b, size_t n);

/* Fail the test unless BUF[0..LEN) is safe text for a terminal
 * (tj_safe_text()); WHAT names the output. */
void th_expect_safe(const char *what, const char *buf, size_t len);
/* BUF[0..LEN) as strict JSON (tj_parse()), or fail the test. */
struct tj *th_expect_json(const char *what, const char *buf, size_t len);
/* The bytes the escaped text S[0..N) stands for, into OUT (CAP bytes,
 * more than N): their number. Fails the test if S is not in the form. */
size_t th_decode(const char *s, size_t n, char *out, size_t cap);

#endif
