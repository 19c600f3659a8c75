/* SPDX-License-Identifier: BSD-2-Clause */
/* maps.c - see maps.h. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "maps.h"

int pr_mapping_pages(const char *path, uint64_t *rss_kib, uint64_t *huge_kib)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	size_t plen = strlen(path);
	bool in = false, found = false;
	char line[4200];

	*rss_kib = *huge_kib = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *nl = strchr(line, '\n'), *sp = strchr(line, ' '), *dash = strchr(line, '-');
		unsigned long long kib;
		size_t len;

		if (nl)
			*nl = 0;
		len = strlen(line);
		/* A mapping's first line, "start-end perms offset dev inode
		 * path", then its fields, "Name:   N kB". */
		if (dash && sp && dash < sp) {
			in = len > plen && !strcmp(line + len - plen, path) &&
			     line[len - plen - 1] == ' ';
			found |= in;
		} else if (in && sscanf(line, "Rss: %llu kB", &kib) == 1) {
			*rss_kib += kib;
		} else if (in && (sscanf(line, "ShmemPmdMapped: %llu kB", &kib) == 1 ||
				  sscanf(line, "FilePmdMapped: %llu kB", &kib) == 1)) {
			*huge_kib += kib;
		}
	}
	fclose(f);
	return found ? 0 : -1;
}
