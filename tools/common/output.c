/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * output.c - the escaped text form and the lossless JSON form of names
 * and metadata (output.h says what each is).
 *
 * Both walk the bytes one unit at a time: an ASCII byte, a well-formed
 * UTF-8 sequence, or one byte that is neither. Each unit is turned into a
 * short string; the FILE writers, the bounded buffer writer and the width
 * count all go through the same two functions, so that what is printed,
 * what is measured and what is echoed in a message cannot disagree.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "output.h"

size_t procreg__utf8_len(const void *s, size_t n)
{
	const unsigned char *p = s;
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len;

	if (n == 0)
		return 0;
	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return 0; /* a continuation byte, 0xc0/0xc1 (overlong), above 0xf4 */
	if (p[0] == 0xe0)
		lo = 0xa0; /* overlong */
	else if (p[0] == 0xed)
		hi = 0x9f; /* surrogates */
	else if (p[0] == 0xf0)
		lo = 0x90; /* overlong */
	else if (p[0] == 0xf4)
		hi = 0x8f; /* above U+10FFFF */
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return len;
}

bool procreg__utf8_valid(const void *s, size_t n)
{
	const unsigned char *p = s;

	for (size_t i = 0, len; i < n; i += len)
		if (!(len = procreg__utf8_len(p + i, n - i)))
			return false;
	return true;
}

/* The code point of the well-formed sequence P of LEN bytes. */
static uint32_t code_point(const unsigned char *p, size_t len)
{
	switch (len) {
	case 1: return p[0];
	case 2: return (uint32_t)(p[0] & 0x1f) << 6 | (p[1] & 0x3f);
	case 3: return (uint32_t)(p[0] & 0x0f) << 12 | (uint32_t)(p[1] & 0x3f) << 6 | (p[2] & 0x3f);
	default:
		return (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3f) << 12 |
		       (uint32_t)(p[2] & 0x3f) << 6 | (p[3] & 0x3f);
	}
}

/* Code points a terminal does not print as a character: controls, and
 * those that break the line or reorder what follows on it (a name could
 * otherwise make the rest of an administrator's line read backwards). */
static bool unprintable(uint32_t c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0x061c || c == 0x200e ||
	       c == 0x200f || c == 0x2028 || c == 0x2029 || (c >= 0x202a && c <= 0x202e) ||
	       (c >= 0x2066 && c <= 0x2069);
}

static const char hex[] = "0123456789abcdef";

/* The next unit of P (N > 0 bytes left) in the escaped text form, into OUT
 * (at most 12 characters, not NUL-terminated); *USED gets the bytes it
 * stands for. Returns its length. */
static size_t text_unit(const unsigned char *p, size_t n, char *out, size_t *used)
{
	size_t len = procreg__utf8_len(p, n), o = 0;

	if (len && !unprintable(code_point(p, len)) && p[0] != '\\') {
		memcpy(out, p, len);
		*used = len;
		return len;
	}
	if (!len)
		len = 1; /* one byte that is not UTF-8: that byte alone */
	*used = len;
	if (len == 1 && (p[0] == '\\' || p[0] == '\n' || p[0] == '\t' || p[0] == '\r')) {
		out[0] = '\\';
		out[1] = p[0] == '\\' ? '\\' : p[0] == '\n' ? 'n' : p[0] == '\t' ? 't' : 'r';
		return 2;
	}
	for (size_t i = 0; i < len; i++) {
		out[o++] = '\\';
		out[o++] = 'x';
		out[o++] = hex[p[i] >> 4];
		out[o++] = hex[p[i] & 15];
	}
	return o;
}

void procreg__text(FILE *f, const void *s, size_t n)
{
	const unsigned char *p = s;
	char u[16];

	for (size_t i = 0, used; i < n; i += used) {
		size_t ul = text_unit(p + i, n - i, u, &used);

		fwrite(u, 1, ul, f);
	}
}

size_t procreg__text_width(const void *s, size_t n)
{
	const unsigned char *p = s;
	size_t w = 0;
	char u[16];

	for (size_t i = 0, used; i < n; i += used) {
		size_t ul = text_unit(p + i, n - i, u, &used);

		/* Passed through: one character, whatever its bytes. */
		w += (unsigned char)u[0] >= 0x80 ? 1 : ul;
	}
	return w;
}

void procreg__text_pad(FILE *f, const void *s, size_t n, int width)
{
	size_t w = procreg__text_width(s, n);

	procreg__text(f, s, n);
	for (; width > 0 && w < (size_t)width; w++)
		fputc(' ', f);
}

const char *procreg__text_cut(char *buf, size_t cap, const void *s, size_t n, size_t max)
{
	const unsigned char *p = s;
	size_t o = 0, i = 0, used, ul, total = 0, limit;
	char u[16], marker[48];
	int ml;

	if (!cap)
		return buf;
	/* Whole, when all of it is wanted and fits. */
	for (size_t k = 0; k < n && n <= max && total < cap; k += used)
		total += text_unit(p + k, n - k, u, &used);
	if (n <= max && total < cap) {
		for (; i < n; i += used) {
			ul = text_unit(p + i, n - i, u, &used);
			memcpy(buf + o, u, ul);
			o += ul;
		}
		buf[o] = 0;
		return buf;
	}
	/* Cut at a unit, with room left for the marker. */
	ml = snprintf(marker, sizeof(marker), "...[%zu bytes, cut]", n);
	limit = (size_t)ml < cap ? cap - 1 - (size_t)ml : 0;
	for (; i < n; i += used) {
		ul = text_unit(p + i, n - i, u, &used);
		if (i + used > max || o + ul > limit)
			break;
		memcpy(buf + o, u, ul);
		o += ul;
	}
	snprintf(buf + o, cap - o, "%s", marker);
	return buf;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int procreg__unescape(char *s, size_t *len, size_t *bad)
{
	size_t o = 0;

	for (size_t i = 0; s[i]; i++) {
		int h, l;

		if (s[i] != '\\') {
			s[o++] = s[i];
			continue;
		}
		switch (s[i + 1]) {
		case '\\': s[o++] = '\\'; i++; continue;
		case 'n': s[o++] = '\n'; i++; continue;
		case 't': s[o++] = '\t'; i++; continue;
		case 'r': s[o++] = '\r'; i++; continue;
		case 'x':
			if ((h = hexval(s[i + 2])) >= 0 && (l = hexval(s[i + 3])) >= 0) {
				s[o++] = (char)(h << 4 | l);
				i += 3;
				continue;
			}
			break;
		}
		if (bad)
			*bad = i;
		return -EINVAL;
	}
	s[o] = 0;
	if (len)
		*len = o;
	return 0;
}

/* ---- JSON ------------------------------------------------------------- */

/* The next unit of P (N > 0 bytes left) inside a JSON string, into OUT (at
 * most 6 characters); *USED gets the bytes it stands for, *LOST is set if
 * they were not UTF-8 (and became U+FFFD). Returns its length. */
static size_t json_unit(const unsigned char *p, size_t n, char *out, size_t *used, bool *lost)
{
	size_t len = procreg__utf8_len(p, n);
	uint32_t c;

	if (!len) {
		*used = 1;
		*lost = true;
		memcpy(out, "\\ufffd", 6);
		return 6;
	}
	*used = len;
	c = code_point(p, len);
	if (c == '"' || c == '\\') {
		out[0] = '\\';
		out[1] = (char)c;
		return 2;
	}
	if (c == '\n' || c == '\t' || c == '\r' || c == '\b' || c == '\f') {
		out[0] = '\\';
		out[1] = c == '\n' ? 'n' : c == '\t' ? 't' : c == '\r' ? 'r' : c == '\b' ? 'b' : 'f';
		return 2;
	}
	if (unprintable(c)) { /* all in the BMP: one \u escape */
		out[0] = '\\';
		out[1] = 'u';
		for (int k = 0; k < 4; k++)
			out[2 + k] = hex[(c >> (12 - 4 * k)) & 15];
		return 6;
	}
	memcpy(out, p, len);
	return len;
}

/* The string; whether a byte was lost. */
static bool json_string(FILE *f, const void *s, size_t n)
{
	const unsigned char *p = s;
	bool lost = false;
	char u[8];

	fputc('"', f);
	for (size_t i = 0, used; i < n; i += used) {
		size_t ul = json_unit(p + i, n - i, u, &used, &lost);

		fwrite(u, 1, ul, f);
	}
	fputc('"', f);
	return lost;
}

void procreg__json_str(FILE *f, const void *s, size_t n)
{
	json_string(f, s, n);
}

void procreg__json_field(FILE *f, const char *key, const void *s, size_t n)
{
	json_string(f, key, strlen(key));
	fputc(':', f);
	if (!json_string(f, s, n))
		return;
	fputc(',', f);
	fputc('"', f);
	/* Keys are ours: plain ASCII, nothing to escape. */
	fputs(key, f);
	fputs("_base64\":\"", f);
	procreg__base64(f, s, n);
	fputc('"', f);
}

void procreg__base64(FILE *f, const void *s, size_t n)
{
	static const char b64[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = s;

	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
			     (i + 2 < n ? p[i + 2] : 0);

		fputc(b64[v >> 18], f);
		fputc(b64[(v >> 12) & 63], f);
		fputc(i + 1 < n ? b64[(v >> 6) & 63] : '=', f);
		fputc(i + 2 < n ? b64[v & 63] : '=', f);
	}
}
