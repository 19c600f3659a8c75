/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * hostile.c - hostile names and the checks of safe output (hostile.h).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "hostile.h"
#include "output.h"

const char *const th_hostile_names[] = {
	"esc\x1b[2J\x1b]0;owned\x07",
	"nl\nforged:line",
	"cr\rover",
	"tab\tbed",
	"c1csi\xc2\x9b" "31m",
	"rawc1\x9b" "31m",
	"ff\xff",
	"trunc\xe2\x82",
	"overlong\xc0\xaf",
	"overlong3\xe0\x80\xaf",
	"surrogate\xed\xa0\x80",
	"above\xf4\x90\x80\x80",
	"utf8.caf\xc3\xa9.\xf0\x9f\x90\x8d",
	"bidi\xe2\x80\xae" "evil",
	"sep\xe2\x80\xa8" "x",
	"back\\slash\\x41",
	"del\x7f",
	"-dash",
	"q\"uote",
	"\xc3\xbf",       /* U+00FF, to be told from the byte 0xff */
	"\xff\xff",
};

const char *const th_hostile_groups[] = { "grp\x1b[31m", "grp\xff\xfe", "grp.caf\xc3\xa9",
					  "grp\xe2\x80\xae" "x" };

const char th_hostile_meta[] = "m\x1b[2J\n\0\xff\xc2\x9b\\x41\r\xe2\x80\xae" "end";
const size_t th_hostile_meta_len = sizeof(th_hostile_meta) - 1;

int th_hostile_claim(procreg_t *reg, const char *prefix, int join)
{
	char name[PROCREG_NAME_MAX + 1];
	int err = 0;

	for (size_t i = 0; i < TH_NHOSTILE && !err; i++) {
		snprintf(name, sizeof(name), "%s%s", prefix, th_hostile_names[i]);
		err = procreg_register(reg, name, th_hostile_meta, th_hostile_meta_len);
	}
	for (size_t i = 0; i < TH_NHOSTILE_GROUPS && join && !err; i++)
		err = procreg_join(reg, th_hostile_groups[i], th_hostile_meta, th_hostile_meta_len);
	return err;
}

int th_find(const char *const *v, size_t nv, const char *b, size_t n)
{
	for (size_t i = 0; i < nv; i++)
		if (strlen(v[i]) == n && !memcmp(v[i], b, n))
			return (int)i;
	return -1;
}

void th_expect_safe(const char *what, const char *buf, size_t len)
{
	size_t at;

	if (tj_safe_text(buf, len, &at) < 0)
		fail_msg("%s: unsafe byte 0x%02x at %zu of:\n%.*s", what, (unsigned char)buf[at], at,
			 (int)len, buf);
}

struct tj *th_expect_json(const char *what, const char *buf, size_t len)
{
	char err[256];
	struct tj *doc = tj_parse(buf, len, err, sizeof(err));

	if (!doc)
		fail_msg("%s: not strict UTF-8 JSON: %s:\n%.*s", what, err, (int)len, buf);
	return doc;
}

size_t th_decode(const char *s, size_t n, char *out, size_t cap)
{
	size_t len;

	assert_true(n < cap);
	memcpy(out, s, n);
	out[n] = 0;
	if (procreg__unescape(out, &len, NULL) < 0)
		fail_msg("not in the escaped form: %.*s", (int)n, s);
	return len;
}
