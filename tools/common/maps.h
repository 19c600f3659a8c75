/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * maps.h - what this process maps of a file, as the kernel says it
 * (/proc/self/smaps): how a tool sees whether a table is in huge pages.
 */
#ifndef PROCREG_TOOLS_MAPS_H
#define PROCREG_TOOLS_MAPS_H

#include <stdint.h>

/* This process's mappings of the file at PATH (found by its device and
 * inode, whatever path reached it): KiB of them resident, and KiB of
 * those mapped by huge pages (one page-table entry for 2 MiB). Only pages
 * this process has touched count. 0, or -1 if it maps no such file (or
 * the file or smaps cannot be read). */
int pr_mapping_pages(const char *path, uint64_t *rss_kib, uint64_t *huge_kib);

#endif /* PROCREG_TOOLS_MAPS_H */
