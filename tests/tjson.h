/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * tjson.h - a strict JSON reader for the tests: what the tools print under
 * --json must be exactly one RFC 8259 value in valid UTF-8, and the bytes
 * of each name must come back from it.
 *
 * Strict means: the whole input is UTF-8 with no overlong form, no
 * surrogate and nothing above U+10FFFF; strings hold no raw control
 * character; escapes are the eight of the RFC and \uXXXX, whose surrogates
 * come in pairs; numbers follow the grammar; nothing but whitespace around
 * the value. Written here, independently of tools/common/output.c, so that
 * the writer is checked against a reading of the standard and not against
 * itself.
 */
#ifndef PROCREG_TJSON_H
#define PROCREG_TJSON_H

#include <stddef.h>
#include <stdint.h>

enum tj_type { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ };

struct tj {
	enum tj_type type;
	char *s;                   /* TJ_STR: the decoded bytes, NUL-terminated too */
	size_t len;
	char *key;                 /* a member of an object: its key, decoded */
	size_t klen;
	struct tj *v;              /* TJ_ARR, TJ_OBJ: the elements, the members */
	size_t n;
	double num;
};

/* BUF[0..LEN) as exactly one JSON value: the tree (tj_free() it), or NULL
 * with the reason and its offset in ERR. */
struct tj *tj_parse(const char *buf, size_t len, char *err, size_t errlen);
void tj_free(struct tj *v);
/* OBJ's member KEY; NULL if OBJ is not an object or has none. */
const struct tj *tj_get(const struct tj *obj, const char *key);

/*
 * The bytes that procreg's string field KEY of OBJ stands for (see
 * tools/common/output.h): KEY_base64 decoded when present, else KEY's
 * string. When KEY_base64 is present, KEY must be exactly those bytes with
 * each byte that is not in well-formed UTF-8 replaced by U+FFFD, and the
 * bytes must not be UTF-8 (else the field should not be there). Into OUT
 * (CAP bytes), *LEN their number; 0, or -1 with the reason in ERR.
 */
int tj_bytes(const struct tj *obj, const char *key, char *out, size_t cap, size_t *len,
	     char *err, size_t errlen);

/* The well-formed UTF-8 sequence at P (N bytes left): its length and code
 * point; 0 if P does not start one. */
size_t tj_utf8_next(const unsigned char *p, size_t n, uint32_t *cp);

/*
 * Whether BUF[0..LEN) is safe text for a terminal: well-formed UTF-8, no
 * C0 control but the line feed, no DEL, no C1 control, no bidirectional
 * formatting character or line/paragraph separator. 0, or -1 with the
 * offending offset in *AT.
 */
int tj_safe_text(const char *buf, size_t len, size_t *at);

#endif
