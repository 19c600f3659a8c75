#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# check_abi.sh LIB MAP HEADER - the library's exported symbols, the version
# script and the public header must name the same functions: a function
# exported but not listed (or listed under no version), listed but not
# exported, or declared PROCREG_API but not exported, fails the test, as
# does a wildcard in a global list (every symbol is named).
set -eu
lib=$1 map=$2 hdr=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# The map's names, by version node: "NODE NAME" lines. Comments out, then
# each "NODE {" opens a node, "local:" ends its global list.
sed -e 's|/\*.*\*/||g' -e '/\/\*/,/\*\//d' "$map" | awk '
	/^[ \t]*[A-Za-z0-9_.]+[ \t]*\{/ { node = $1; sub(/\{.*/, "", node); global = 1; next }
	/local:/ { global = 0; next }
	/global:/ { global = 1; next }
	/^[ \t]*\}/ { node = ""; next }
	node != "" && global && /[A-Za-z0-9_*?]+[ \t]*;/ {
		s = $0; gsub(/[ \t;]/, "", s); print node, s
	}' > "$tmp/map"
if grep -q '[*?]' "$tmp/map"; then
	echo "check_abi: a wildcard in a global list of $map:" >&2
	grep '[*?]' "$tmp/map" >&2
	fail=1
fi
# What the library exports: "NODE NAME", from name@@NODE.
nm -D --defined-only "$lib" | awk '{ print $NF }' | awk -F'@@' 'NF == 2 { print $2, $1 }' |
	sort > "$tmp/lib"
nm -D --defined-only "$lib" | awk '{ print $NF }' | grep -v '@' |
	grep -v '^PROCREG_' > "$tmp/unversioned" || true
if [ -s "$tmp/unversioned" ]; then
	echo "check_abi: exported without a version:" >&2
	cat "$tmp/unversioned" >&2
	fail=1
fi
sort "$tmp/map" > "$tmp/map.sorted"
if ! diff -u "$tmp/map.sorted" "$tmp/lib" > "$tmp/diff"; then
	echo "check_abi: $map (-) and the exports of $lib (+) differ:" >&2
	cat "$tmp/diff" >&2
	fail=1
fi
# The header's functions: every PROCREG_API declaration (comments and
# preprocessor lines out).
sed -e 's|/\*.*\*/||g' -e '/\/\*/,/\*\//d' -e '/^[ \t]*#/d' "$hdr" | tr '\n' ' ' |
	grep -o 'PROCREG_API[^(;]*(' |
	sed 's/.*[ *]\(procreg_[A-Za-z0-9_]*\)[ ]*($/\1/' | sort -u > "$tmp/hdr"
awk '{ print $2 }' "$tmp/map" | sort -u > "$tmp/names"
if ! diff -u "$tmp/names" "$tmp/hdr" > "$tmp/diff"; then
	echo "check_abi: $map (-) and the PROCREG_API functions of $hdr (+) differ:" >&2
	cat "$tmp/diff" >&2
	fail=1
fi
[ "$fail" = 0 ] && echo "check_abi: $(wc -l < "$tmp/names") functions, each exported, listed and declared"
exit $fail
