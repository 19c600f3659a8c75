/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * out.c - what the bench prints: a human table as it goes, and with
 * --json one JSON object at the end (built as the figures come in), with
 * the targets each subcommand checks.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "output.h"

FILE *human(void)
{
	return bo.json ? stderr : stdout;
}

void hprintf(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(human(), fmt, ap);
	va_end(ap);
	fflush(human());
}

/* ---- JSON -------------------------------------------------------------- */

/* The document, built in memory as the figures come in. */
static FILE *jf;
static char *jb;
static size_t jlen;
static int depth;
static bool first[64] = { true };
static char jclose[64];                 /* the bracket that closes each level */

static FILE *jout(void)
{
	if (!jf && !(jf = open_memstream(&jb, &jlen))) {
		perror("procreg-bench");
		exit(2);
	}
	return jf;
}

static void jput(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void jput(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(jout(), fmt, ap);
	va_end(ap);
}

static void jstring(const char *s)
{
	procreg__json_str(jout(), s, strlen(s));
}

static void jkey(const char *key)
{
	if (!first[depth])
		jput(",");
	first[depth] = false;
	if (key) {
		jstring(key);
		jput(":");
	}
}

void j_obj(const char *key)
{
	jkey(key);
	jput("{");
	first[++depth] = true;
	jclose[depth] = '}';
}

void j_arr(const char *key)
{
	jkey(key);
	jput("[");
	first[++depth] = true;
	jclose[depth] = ']';
}

void j_end(void)
{
	jput("%c", jclose[depth]);
	depth--;
}

void j_num(const char *key, double v)
{
	jkey(key);
	if (isfinite(v))
		jput("%.6g", v);
	else
		jput("null");
}

void j_int(const char *key, uint64_t v)
{
	jkey(key);
	jput("%llu", (unsigned long long)v);
}

void j_str(const char *key, const char *s)
{
	jkey(key);
	jstring(s);
}

void j_bool(const char *key, bool v)
{
	jkey(key);
	jput(v ? "true" : "false");
}

void j_print(void)
{
	if (!jf)
		return;
	if (fclose(jf) == 0 && bo.json) {
		fwrite(jb, 1, jlen, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	jf = NULL;
	free(jb);
	jb = NULL;
}

/* ---- targets ----------------------------------------------------------- */

struct target {
	char what[160];
	double value, goal;
	char cmp[3];
	char unit[16];
	bool met;
};

static struct target targets[64];
static int ntargets;

void target(const char *what, double value, const char *cmp, double goal, const char *unit)
{
	struct target *t;

	if (ntargets == 64)
		return;
	t = &targets[ntargets++];
	snprintf(t->what, sizeof(t->what), "%s", what);
	snprintf(t->cmp, sizeof(t->cmp), "%s", cmp);
	snprintf(t->unit, sizeof(t->unit), "%s", unit);
	t->value = value;
	t->goal = goal;
	t->met = isfinite(value) && (!strcmp(cmp, ">=") ? value >= goal : value <= goal);
}

void targets_report(void)
{
	if (!ntargets)
		return;
	hprintf("\ntargets\n");
	for (int i = 0; i < ntargets; i++) {
		struct target *t = &targets[i];

		hprintf("  %-4s %-62s %10.3g%s  (target %s %g%s)\n", t->met ? "MET" : "MISS",
			t->what, t->value, t->unit, t->cmp, t->goal, t->unit);
	}
	j_arr("targets");
	for (int i = 0; i < ntargets; i++) {
		struct target *t = &targets[i];

		j_obj(NULL);
		j_str("what", t->what);
		j_num("value", t->value);
		j_str("cmp", t->cmp);
		j_num("target", t->goal);
		j_str("unit", t->unit);
		j_bool("met", t->met);
		j_end();
	}
	j_end();
}

/* ---- figures ----------------------------------------------------------- */

const char *fmt_rate(double v)
{
	static char buf[16][32];
	static int k;
	char *b = buf[k++ % 16];

	if (!isfinite(v))
		snprintf(b, 32, "-");
	else if (v >= 1e9)
		snprintf(b, 32, "%.2f G/s", v / 1e9);
	else if (v >= 1e6)
		snprintf(b, 32, "%.2f M/s", v / 1e6);
	else if (v >= 1e3)
		snprintf(b, 32, "%.1f k/s", v / 1e3);
	else
		snprintf(b, 32, "%.0f /s", v);
	return b;
}

const char *fmt_count(uint64_t n)
{
	static char buf[16][32];
	static int k;
	char *b = buf[k++ % 16], tmp[32];
	int len = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)n), o = 0;

	for (int i = 0; i < len; i++) {
		if (i && (len - i) % 3 == 0)
			b[o++] = ',';
		b[o++] = tmp[i];
	}
	b[o] = 0;
	return b;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double median(double *v, int n)
{
	double t[64];

	if (n <= 0)
		return NAN;
	if (n > 64)
		n = 64;
	memcpy(t, v, (size_t)n * sizeof(*t));
	qsort(t, (size_t)n, sizeof(*t), cmp_double);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}
