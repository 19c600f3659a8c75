/* SPDX-License-Identifier: BSD-2-Clause */
/* maps.c - see maps.h. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "maps.h"

int pr_mapping_pages(const char *path, uint64_t *rss_kib, uint64_t *huge_kib)
{
	bool in = false, found = false;
	struct stat st;
	char line[4200];
	FILE *f;

	*rss_kib = *huge_kib = 0;
	/* By device and inode, as smaps names the file: the path it prints
	 * is the kernel's, which need not be the one we were given (a
	 * symbolic link on the way, a doubled slash). */
	if (stat(path, &st) < 0 || !(f = fopen("/proc/self/smaps", "re")))
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long kib, ino;
		unsigned int maj, min;
		char *sp = strchr(line, ' '), *dash = strchr(line, '-');

		/* A mapping's first line, "start-end perms offset maj:min
		 * inode path", then its fields, "Name:   N kB". */
		if (dash && sp && dash < sp) {
			in = sscanf(sp, " %*s %*s %x:%x %llu", &maj, &min, &ino) == 3 &&
			     maj == major(st.st_dev) && min == minor(st.st_dev) &&
			     ino == (unsigned long long)st.st_ino;
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
