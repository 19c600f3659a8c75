/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * subuid.c - subordinate uid ranges: whose quota a uid's use counts in.
 *
 * An administrator gives a user ranges of subordinate uids (/etc/subuid,
 * shadow's subuid(5)); with newuidmap installed, the user's processes in a
 * user namespace of its own run as any of them, and the kernel reports
 * each as a uid of its own (SO_PEERCRED, a pidfd's owner). Counted that
 * way, one user would hold every per-uid quota of procregd (names,
 * connections, places in line, reader processes and pages, closings, feed
 * events) once for itself and once more for each of its subordinate
 * uids, 65,536 of them by shadow's default: room enough to take from
 * everyone else what the global limits leave them. So every per-uid count is kept under the
 * uid that owns the range (uid_count, uid_adjust in procs.c call
 * subuid_owner). What a uid may do is still its own: privilege (root,
 * procregd's own uid) is never inherited from an owner, and records and
 * events keep the uid the process runs as.
 *
 * Read once, at start, before the first client: a count taken under an
 * owner is given back under the same owner, so the ranges cannot change
 * while the daemon runs. A changed file applies from the next start.
 *
 * Trust. Whoever could write the file could charge its own use to another
 * user and so exhaust that user's quotas: it must be a regular file of
 * root's (or procregd's own uid's), writable by no one else; otherwise it
 * is not read (logged). Ignored: ranges of root or procregd's uid (those
 * have no per-uid limit, and their ranges give no one else anything; not
 * logged, as they are common), and, each logged, ranges holding uid 0,
 * procregd's uid or their own owner's, ranges that overlap (all of them,
 * root's included: a uid in two ranges counts as itself), and the ranges
 * of an owner that is itself a subordinate uid. Numbers are read as
 * shadow reads them (0x hexadecimal, a leading 0 octal).
 *
 * Limits: the file up to 4 MiB (65,536 lines of 64 bytes), and 65,536
 * ranges of it (the rest is ignored, logged).
 *
 * Written by the serving thread in setup(), before any client and before
 * the closing processes are forked; only read from then on. Nothing here
 * is in the table.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"

#define SUBUID_DEFAULT "/etc/subuid"
#define SUBUID_FILE_MAX (4u << 20)
#define SUBUID_RANGES_MAX 65536u

struct range {
	uint32_t first, last;     /* inclusive */
	uint32_t owner;
	uint32_t line;            /* of the file */
	bool privileged;          /* root's or procregd's: only while overlaps are found */
};

static struct range *ranges;      /* sorted by first; no two overlap */
static size_t nranges;

uid_t subuid_owner(uid_t uid)
{
	size_t lo = 0, hi = nranges;

	/* Below the lowest subordinate uid (nearly every uid): no search. */
	if (!nranges || uid < ranges[0].first)
		return uid;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (uid > ranges[mid].last)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < nranges && uid >= ranges[lo].first ? ranges[lo].owner : uid;
}

const char *subuid_note(uid_t uid, char *buf, size_t size)
{
	uid_t owner = subuid_owner(uid);

	if (owner == uid)
		return "";
	snprintf(buf, size, ", with those of uid %u, its range's owner (subordinate uids)",
		 (unsigned)owner);
	return buf;
}

/* A number, all of S[0..len), at most MAX: read as shadow reads the
 * file's numbers (strtoul, base 0), so that a range means the uids
 * newuidmap maps: 0x... hexadecimal, 0... octal, else decimal. */
static int parse_u32(const char *s, size_t len, uint32_t max, uint32_t *out)
{
	unsigned base = 10;
	uint64_t v = 0;

	if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
		len -= 2;
	} else if (len > 1 && s[0] == '0') {
		base = 8;
		s++;
		len--;
	}
	if (len == 0)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		unsigned dig = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
			       : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
			       : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
						      : 16;

		if (dig >= base)
			return -EINVAL;
		v = v * base + dig;
		if (v > max)
			return -ERANGE;
	}
	*out = (uint32_t)v;
	return 0;
}

/* The uid of OWNER (a login name, or a uid in decimal). */
static int owner_uid(const char *owner, size_t len, uint32_t *uid)
{
	char name[256], *buf;
	struct passwd pw, *res = NULL;
	long size = sysconf(_SC_GETPW_R_SIZE_MAX);
	int err;

	if (!parse_u32(owner, len, UINT32_MAX - 1, uid))
		return 0;
	if (len >= sizeof(name))
		return -ENAMETOOLONG;
	if (memchr(owner, 0, len))
		return -EINVAL;
	memcpy(name, owner, len);
	name[len] = 0;
	size = size > 0 ? size : 16384;
	for (;;) {
		buf = malloc((size_t)size);
		if (!buf)
			return -ENOMEM;
		err = getpwnam_r(name, &pw, buf, (size_t)size, &res);
		if (err != ERANGE || size >= (1 << 20))
			break;
		free(buf);
		size *= 2;
	}
	if (res)
		*uid = (uint32_t)pw.pw_uid;
	free(buf);
	return res ? 0 : err ? -err : -ENOENT;
}

static int by_first(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	if (x->first != y->first)
		return x->first < y->first ? -1 : 1;
	return x->line < y->line ? -1 : x->line > y->line;
}

/* One line "owner:first:count" of PATH (line LINE) into *R: 0, 1 for a
 * line to skip quietly (blank, a comment), or -1 for one to skip with a
 * warning (logged here). */
static int parse_line(const struct daemon *d, const char *path, unsigned line, const char *s,
		      size_t len, struct range *r)
{
	const char *c1 = memchr(s, ':', len), *c2;
	uint32_t first, count;
	int err;

	if (len == 0 || s[0] == '#')
		return 1;
	c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - s)) : NULL;
	if (!c1 || !c2 || c1 == s ||
	    parse_u32(c1 + 1, (size_t)(c2 - c1 - 1), UINT32_MAX - 1, &first) ||
	    parse_u32(c2 + 1, len - (size_t)(c2 + 1 - s), UINT32_MAX, &count) || count == 0 ||
	    (uint64_t)first + count - 1 > UINT32_MAX - 1) {
		log_warn("%s:%u: not OWNER:FIRST:COUNT with FIRST + COUNT <= 4294967295: ignored",
			 path, line);
		return -1;
	}
	err = owner_uid(s, (size_t)(c1 - s), &r->owner);
	if (err) {
		log_warn("%s:%u: owner '%.*s': %s: ignored", path, line, (int)(c1 - s), s,
			 err == -ENOENT ? "no such user" : strerror(-err));
		return -1;
	}
	r->first = first;
	r->last = first + (count - 1);
	r->line = line;
	/* Root's ranges are common (rootful containers): kept until the
	 * overlaps are found (a range over one of root's gives its uids to
	 * no one), then left out quietly. */
	r->privileged = uid_privileged(d, r->owner);
	if (r->privileged)
		return 0;
	if (r->first == 0 || (r->first <= d->uid && d->uid <= r->last) ||
	    (r->first <= r->owner && r->owner <= r->last)) {
		log_warn("%s:%u: the range %u-%u holds uid 0, procregd's own (%u) or its owner's (%u): ignored",
			 path, line, (unsigned)r->first, (unsigned)r->last, (unsigned)d->uid,
			 (unsigned)r->owner);
		return -1;
	}
	return 0;
}

/* A uid in two ranges (the same uids given to two users, or to a user
 * and to root's containers) is counted as itself: newuidmap lets either
 * owner run as it, and charging one's use to the other would let it
 * exhaust the other's quotas. So ranges that overlap are left out, all
 * of them; then root's and procregd's, which were kept for that. */
static void drop_overlaps(const char *path)
{
	uint32_t reach = 0;       /* the highest uid of the ranges before */
	size_t k = 0;

	for (size_t i = 0; i < nranges; i++) {
		const struct range *r = &ranges[i];
		bool before = i && r->first <= reach, after = i + 1 < nranges &&
							       ranges[i + 1].first <= r->last;

		reach = i && reach > r->last ? reach : r->last;
		if (before || after) {
			log_warn("%s:%u: the range %u-%u of uid %u overlaps another: ignored, and its "
				 "uids count as their own",
				 path, (unsigned)r->line, (unsigned)r->first, (unsigned)r->last,
				 (unsigned)r->owner);
			continue;
		}
		if (!r->privileged)
			ranges[k++] = *r;
	}
	nranges = k;
}

/* The ranges of an owner that is itself a subordinate uid of another are
 * left out: an owner then always counts as itself, and a count kept
 * under subuid_owner(uid) is found under the same uid when asked for by
 * that owner (closer.c keys its queues so). Removing ranges only frees
 * uids, so no owner kept falls in a range kept. */
static int drop_chained(const char *path)
{
	uint32_t *boss = malloc((nranges ? nranges : 1) * sizeof(*boss));
	size_t k = 0;

	if (!boss)
		return -ENOMEM;
	/* All looked up before the array changes under the search. */
	for (size_t i = 0; i < nranges; i++)
		boss[i] = subuid_owner(ranges[i].owner);
	for (size_t i = 0; i < nranges; i++) {
		const struct range *r = &ranges[i];

		if (boss[i] != r->owner) {
			log_warn("%s:%u: the range %u-%u of uid %u, itself in a range of uid %u: ignored",
				 path, (unsigned)r->line, (unsigned)r->first, (unsigned)r->last,
				 (unsigned)r->owner, (unsigned)boss[i]);
			continue;
		}
		ranges[k++] = *r;
	}
	free(boss);
	nranges = k;
	return 0;
}

/* The ranges of the file's text BUF[0..len), checked, sorted. */
static int parse(const struct daemon *d, const char *path, const char *buf, size_t len)
{
	size_t cap = 0, skipped = 0;
	unsigned line = 0;

	for (const char *s = buf, *end = buf + len; s < end;) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		size_t l = nl ? (size_t)(nl - s) : (size_t)(end - s);
		struct range r, *n;
		int rc;

		line++;
		rc = parse_line(d, path, line, s, l, &r);
		s += l + 1;
		if (rc)
			continue;
		if (nranges == SUBUID_RANGES_MAX) {
			skipped++;
			continue;
		}
		n = procreg__grow_append(ranges, nranges, &cap, &r, sizeof(r));
		if (!n)
			return -ENOMEM;
		ranges = n;
		nranges++;
	}
	if (skipped)
		log_warn("%s: %zu ranges past the first %u: ignored", path, skipped,
			 SUBUID_RANGES_MAX);
	if (nranges)
		qsort(ranges, nranges, sizeof(*ranges), by_first);
	drop_overlaps(path);
	return drop_chained(path);
}

int subuid_load(const struct daemon *d)
{
	const char *path = d->o.subuid_file ? d->o.subuid_file : SUBUID_DEFAULT;
	bool asked = d->o.subuid_file != NULL;
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	int fd, err = 0;

	if (!*path)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		err = -errno;
		/* No file where none was asked for: no ranges, the rule of
		 * a host without subordinate uids. */
		if (!asked && err == -ENOENT)
			return 0;
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		log_err("subordinate uids: %s: not a regular file", path);
		err = -EINVAL;
		goto out;
	}
	if ((st.st_uid != 0 && st.st_uid != d->uid) || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		log_err("subordinate uids: %s: owned by uid %u, mode %04o: only a file of root's or "
			"uid %u, writable by no one else, is read (whoever writes it decides whose "
			"quotas a uid's use counts in)",
			path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)d->uid);
		err = -EPERM;
		goto out;
	}
	if (st.st_size > SUBUID_FILE_MAX) {
		log_err("subordinate uids: %s: %lld bytes, more than %u", path,
			(long long)st.st_size, SUBUID_FILE_MAX);
		err = -EFBIG;
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		err = -ENOMEM;
		goto out;
	}
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	err = parse(d, path, buf, len);
	if (!err && nranges)
		log_notice("subordinate uids: %zu range%s of %s: their uids count in their "
			   "owners' per-uid limits", nranges, nranges == 1 ? "" : "s", path);
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	if (err && err != -EPERM && err != -EINVAL && err != -EFBIG)
		log_err("subordinate uids: %s: %s", path, strerror(-err));
	/* Asked for by name, it must be read; the default file, where it
	 * cannot be, leaves every uid counted as its own (logged above). */
	if (err && !asked) {
		free(ranges);
		ranges = NULL;
		nranges = 0;
		return 0;
	}
	return err;
}
