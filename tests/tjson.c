/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * tjson.c - the strict JSON reader of the tests (tjson.h).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tjson.h"

#define TJ_DEPTH 64

struct rd {
	const unsigned char *p;
	size_t n, i;
	char *err;
	size_t errlen;
	bool failed;
};

static void fail(struct rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct rd *r, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (r->failed)
		return;
	r->failed = true;
	k = snprintf(r->err, r->errlen, "at byte %zu: ", r->i);
	if (k < 0 || (size_t)k >= r->errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(r->err + k, r->errlen - (size_t)k, fmt, ap);
	va_end(ap);
}

size_t tj_utf8_next(const unsigned char *p, size_t n, uint32_t *cp)
{
	uint32_t c;
	size_t len;

	if (n == 0)
		return 0;
	if (p[0] < 0x80) {
		*cp = p[0];
		return 1;
	}
	if ((p[0] & 0xe0) == 0xc0) {
		len = 2;
		c = p[0] & 0x1f;
	} else if ((p[0] & 0xf0) == 0xe0) {
		len = 3;
		c = p[0] & 0x0f;
	} else if ((p[0] & 0xf8) == 0xf0) {
		len = 4;
		c = p[0] & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t k = 1; k < len; k++) {
		if ((p[k] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[k] & 0x3f);
	}
	/* The shortest form only, no surrogate, nothing past U+10FFFF. */
	if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000) ||
	    (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
		return 0;
	*cp = c;
	return len;
}

static void ws(struct rd *r)
{
	while (r->i < r->n && (r->p[r->i] == ' ' || r->p[r->i] == '\t' || r->p[r->i] == '\n' ||
			       r->p[r->i] == '\r'))
		r->i++;
}

static void put_utf8(FILE *f, uint32_t c)
{
	if (c < 0x80) {
		fputc((int)c, f);
	} else if (c < 0x800) {
		fputc((int)(0xc0 | c >> 6), f);
		fputc((int)(0x80 | (c & 0x3f)), f);
	} else if (c < 0x10000) {
		fputc((int)(0xe0 | c >> 12), f);
		fputc((int)(0x80 | ((c >> 6) & 0x3f)), f);
		fputc((int)(0x80 | (c & 0x3f)), f);
	} else {
		fputc((int)(0xf0 | c >> 18), f);
		fputc((int)(0x80 | ((c >> 12) & 0x3f)), f);
		fputc((int)(0x80 | ((c >> 6) & 0x3f)), f);
		fputc((int)(0x80 | (c & 0x3f)), f);
	}
}

static int hex4(struct rd *r, uint32_t *out)
{
	uint32_t v = 0;

	if (r->n - r->i < 4) {
		fail(r, "\\u escape cut short");
		return -1;
	}
	for (int k = 0; k < 4; k++) {
		unsigned char c = r->p[r->i++];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else {
			fail(r, "\\u escape: '%c' is not a hex digit", c);
			return -1;
		}
	}
	*out = v;
	return 0;
}

/* A string at r->i (its opening quote): decoded into *S, *LEN. */
static int string(struct rd *r, char **s, size_t *len)
{
	char *buf = NULL;
	size_t blen = 0;
	FILE *f = open_memstream(&buf, &blen);

	if (!f) {
		fail(r, "out of memory");
		return -1;
	}
	r->i++; /* the quote */
	for (;;) {
		uint32_t c, lo;
		size_t k;

		if (r->i >= r->n) {
			fail(r, "string not closed");
			break;
		}
		c = r->p[r->i];
		if (c == '"') {
			r->i++;
			fclose(f);
			*s = buf;
			*len = blen;
			return 0;
		}
		if (c < 0x20) {
			fail(r, "raw control byte 0x%02x in a string", c);
			break;
		}
		if (c != '\\') {
			k = tj_utf8_next(r->p + r->i, r->n - r->i, &c);
			if (!k) {
				fail(r, "not UTF-8 (byte 0x%02x)", r->p[r->i]);
				break;
			}
			fwrite(r->p + r->i, 1, k, f);
			r->i += k;
			continue;
		}
		if (++r->i >= r->n) {
			fail(r, "escape cut short");
			break;
		}
		c = r->p[r->i++];
		switch (c) {
		case '"': case '\\': case '/': fputc((int)c, f); continue;
		case 'b': fputc('\b', f); continue;
		case 'f': fputc('\f', f); continue;
		case 'n': fputc('\n', f); continue;
		case 'r': fputc('\r', f); continue;
		case 't': fputc('\t', f); continue;
		case 'u': break;
		default:
			fail(r, "bad escape \\%c", c);
			goto out;
		}
		if (hex4(r, &c) < 0)
			break;
		if (c >= 0xdc00 && c <= 0xdfff) {
			fail(r, "lone low surrogate \\u%04x", c);
			break;
		}
		if (c >= 0xd800 && c <= 0xdbff) {
			if (r->n - r->i < 2 || r->p[r->i] != '\\' || r->p[r->i + 1] != 'u') {
				fail(r, "high surrogate \\u%04x without its low half", c);
				break;
			}
			r->i += 2;
			if (hex4(r, &lo) < 0)
				break;
			if (lo < 0xdc00 || lo > 0xdfff) {
				fail(r, "high surrogate followed by \\u%04x", lo);
				break;
			}
			c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
		}
		put_utf8(f, c);
	}
out:
	fclose(f);
	free(buf);
	return -1;
}

static int number(struct rd *r, double *out)
{
	size_t start = r->i;
	char tmp[64];

	if (r->i < r->n && r->p[r->i] == '-')
		r->i++;
	if (r->i < r->n && r->p[r->i] == '0') {
		r->i++;
	} else if (r->i < r->n && r->p[r->i] >= '1' && r->p[r->i] <= '9') {
		while (r->i < r->n && r->p[r->i] >= '0' && r->p[r->i] <= '9')
			r->i++;
	} else {
		fail(r, "bad number");
		return -1;
	}
	if (r->i < r->n && r->p[r->i] == '.') {
		r->i++;
		if (r->i >= r->n || r->p[r->i] < '0' || r->p[r->i] > '9') {
			fail(r, "bad fraction");
			return -1;
		}
		while (r->i < r->n && r->p[r->i] >= '0' && r->p[r->i] <= '9')
			r->i++;
	}
	if (r->i < r->n && (r->p[r->i] == 'e' || r->p[r->i] == 'E')) {
		r->i++;
		if (r->i < r->n && (r->p[r->i] == '+' || r->p[r->i] == '-'))
			r->i++;
		if (r->i >= r->n || r->p[r->i] < '0' || r->p[r->i] > '9') {
			fail(r, "bad exponent");
			return -1;
		}
		while (r->i < r->n && r->p[r->i] >= '0' && r->p[r->i] <= '9')
			r->i++;
	}
	snprintf(tmp, sizeof(tmp), "%.*s", (int)(r->i - start), (const char *)r->p + start);
	*out = strtod(tmp, NULL);
	return 0;
}

static int value(struct rd *r, struct tj *v, int depth);

/* Elements of an array or members of an object, up to CLOSE. */
static int items(struct rd *r, struct tj *v, char close, int depth)
{
	size_t cap = 0;

	r->i++;
	ws(r);
	if (r->i < r->n && r->p[r->i] == (unsigned char)close) {
		r->i++;
		return 0;
	}
	for (;;) {
		struct tj *kid;

		if (v->n == cap) {
			struct tj *nv = realloc(v->v, (cap = cap ? cap * 2 : 8) * sizeof(*nv));

			if (!nv) {
				fail(r, "out of memory");
				return -1;
			}
			v->v = nv;
		}
		kid = &v->v[v->n];
		memset(kid, 0, sizeof(*kid));
		ws(r);
		if (close == '}') {
			if (r->i >= r->n || r->p[r->i] != '"') {
				fail(r, "object key expected");
				return -1;
			}
			if (string(r, &kid->key, &kid->klen) < 0)
				return -1;
			ws(r);
			if (r->i >= r->n || r->p[r->i] != ':') {
				free(kid->key);
				fail(r, "':' expected");
				return -1;
			}
			r->i++;
		}
		v->n++;
		if (value(r, kid, depth + 1) < 0)
			return -1;
		ws(r);
		if (r->i < r->n && r->p[r->i] == ',') {
			r->i++;
			continue;
		}
		if (r->i < r->n && r->p[r->i] == (unsigned char)close) {
			r->i++;
			return 0;
		}
		fail(r, "',' or '%c' expected", close);
		return -1;
	}
}

static int literal(struct rd *r, const char *word)
{
	size_t k = strlen(word);

	if (r->n - r->i < k || memcmp(r->p + r->i, word, k)) {
		fail(r, "unexpected '%c'", r->p[r->i]);
		return -1;
	}
	r->i += k;
	return 0;
}

static int value(struct rd *r, struct tj *v, int depth)
{
	if (depth > TJ_DEPTH) {
		fail(r, "nested too deep");
		return -1;
	}
	ws(r);
	if (r->i >= r->n) {
		fail(r, "value expected");
		return -1;
	}
	switch (r->p[r->i]) {
	case '{': v->type = TJ_OBJ; return items(r, v, '}', depth);
	case '[': v->type = TJ_ARR; return items(r, v, ']', depth);
	case '"': v->type = TJ_STR; return string(r, &v->s, &v->len);
	case 't': v->type = TJ_TRUE; return literal(r, "true");
	case 'f': v->type = TJ_FALSE; return literal(r, "false");
	case 'n': v->type = TJ_NULL; return literal(r, "null");
	default: v->type = TJ_NUM; return number(r, &v->num);
	}
}

static void tj_free_kids(struct tj *v)
{
	for (size_t i = 0; i < v->n; i++) {
		tj_free_kids(&v->v[i]);
		free(v->v[i].key);
	}
	free(v->v);
	free(v->s);
}

void tj_free(struct tj *v)
{
	if (!v)
		return;
	tj_free_kids(v);
	free(v);
}

struct tj *tj_parse(const char *buf, size_t len, char *err, size_t errlen)
{
	struct rd r = { (const unsigned char *)buf, len, 0, err, errlen, false };
	struct tj *v = calloc(1, sizeof(*v));
	uint32_t cp;

	if (errlen)
		err[0] = 0;
	if (!v)
		return NULL;
	/* The whole document is UTF-8, not only what strings decode to. */
	for (size_t k; r.i < len; r.i += k)
		if (!(k = tj_utf8_next(r.p + r.i, len - r.i, &cp))) {
			fail(&r, "not UTF-8 (byte 0x%02x)", r.p[r.i]);
			free(v);
			return NULL;
		}
	r.i = 0;
	if (value(&r, v, 0) == 0) {
		ws(&r);
		if (r.i != len)
			fail(&r, "text after the value");
	}
	if (r.failed) {
		tj_free(v);
		return NULL;
	}
	return v;
}

const struct tj *tj_get(const struct tj *obj, const char *key)
{
	size_t k = strlen(key);

	if (!obj || obj->type != TJ_OBJ)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (obj->v[i].klen == k && !memcmp(obj->v[i].key, key, k))
			return &obj->v[i];
	return NULL;
}

static int b64val(char c)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const char *p = c ? strchr(a, c) : NULL;

	return p ? (int)(p - a) : -1;
}

/* Strict base64: groups of four, padding only at the end. */
static int b64_decode(const char *s, size_t n, unsigned char *out, size_t cap, size_t *len)
{
	size_t o = 0;

	if (n % 4)
		return -1;
	for (size_t i = 0; i < n; i += 4) {
		int v[4], pad = 0;

		for (int k = 0; k < 4; k++) {
			if (s[i + k] == '=' && i + 4 == n && k >= 2) {
				v[k] = 0;
				pad++;
				continue;
			}
			if (pad || (v[k] = b64val(s[i + k])) < 0)
				return -1;
		}
		if (o + 3 - (size_t)pad > cap)
			return -1;
		out[o++] = (unsigned char)(v[0] << 2 | v[1] >> 4);
		if (pad < 2)
			out[o++] = (unsigned char)((v[1] & 15) << 4 | v[2] >> 2);
		if (pad < 1)
			out[o++] = (unsigned char)((v[2] & 3) << 6 | v[3]);
	}
	*len = o;
	return 0;
}

int tj_bytes(const struct tj *obj, const char *key, char *out, size_t cap, size_t *len,
	     char *err, size_t errlen)
{
	const struct tj *t = tj_get(obj, key), *b;
	char bkey[128];
	uint32_t cp;

	snprintf(bkey, sizeof(bkey), "%s_base64", key);
	b = tj_get(obj, bkey);
	if (!t || t->type != TJ_STR) {
		snprintf(err, errlen, "no string \"%s\"", key);
		return -1;
	}
	if (!b) {
		if (t->len > cap) {
			snprintf(err, errlen, "\"%s\": too long", key);
			return -1;
		}
		memcpy(out, t->s, t->len);
		*len = t->len;
		return 0;
	}
	if (b->type != TJ_STR ||
	    b64_decode(b->s, b->len, (unsigned char *)out, cap, len) < 0) {
		snprintf(err, errlen, "\"%s\": not base64", bkey);
		return -1;
	}
	{
		/* KEY must be the bytes with U+FFFD for each that is not
		 * UTF-8; and there must have been one. */
		char *want = NULL;
		size_t wlen = 0, k;
		bool lost = false;
		FILE *f = open_memstream(&want, &wlen);
		int ok;

		if (!f)
			return -1;
		for (size_t i = 0; i < *len; i += k) {
			k = tj_utf8_next((const unsigned char *)out + i, *len - i, &cp);
			if (k) {
				fwrite(out + i, 1, k, f);
			} else {
				k = 1;
				lost = true;
				fputs("\xef\xbf\xbd", f);
			}
		}
		fclose(f);
		ok = lost && wlen == t->len && !memcmp(want, t->s, wlen);
		free(want);
		if (!ok) {
			snprintf(err, errlen, "\"%s\" is not its \"%s\" with U+FFFD for the bytes "
				 "that are not UTF-8%s", key, bkey, lost ? "" : " (and all are)");
			return -1;
		}
	}
	return 0;
}

int tj_safe_text(const char *buf, size_t len, size_t *at)
{
	const unsigned char *p = (const unsigned char *)buf;
	uint32_t c;

	for (size_t i = 0, k; i < len; i += k) {
		k = tj_utf8_next(p + i, len - i, &c);
		if (!k || (c < 0x20 && c != '\n') || (c >= 0x7f && c <= 0x9f) || c == 0x061c ||
		    c == 0x200e || c == 0x200f || c == 0x2028 || c == 0x2029 ||
		    (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069)) {
			*at = i;
			return -1;
		}
	}
	return 0;
}
