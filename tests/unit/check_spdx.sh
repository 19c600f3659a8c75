#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# check_spdx.sh SRC - every source and build file of the tree says its
# licence in an SPDX line at its top (the first line, or the second after
# a #! line): BSD-2-Clause, but for the BPF program, which the kernel
# loads as "Dual BSD/GPL" and whose SPDX line must say the same. The files
# are git's list where SRC is a git checkout, else every file under SRC
# but build trees. A file without the line, or with another licence,
# fails the test with its name; so does a missing LICENSE.
set -eu
src=$1
cd "$src"
fail=0

if [ ! -f LICENSE ] || ! grep -q '^BSD 2-Clause License$' LICENSE; then
	echo "check_spdx: $src/LICENSE is missing or not the BSD 2-Clause text" >&2
	fail=1
fi

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	list() { git ls-files; }
else
	list() { find . -path './build*' -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||'; }
fi

bpf=tools/procreg-trace/procreg_trace.bpf.c
n=0
for f in $(list); do
	case $f in
	*/corpus/*|*.md|LICENSE|.gitignore|*/.gitignore|*/Cargo.lock) continue ;;
	esac
	n=$((n + 1))
	want='SPDX-License-Identifier: BSD-2-Clause'
	[ "$f" = "$bpf" ] && want='SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)'
	head=$(head -n 2 "$f")
	case $head in
	'#!'*) head=$(printf '%s\n' "$head" | sed -n 2p) ;;
	*) head=$(printf '%s\n' "$head" | sed -n 1p) ;;
	esac
	case $head in
	*"$want"*) ;;
	*) echo "check_spdx: $f: no '$want' line at its top" >&2; fail=1 ;;
	esac
done
if [ "$n" -lt 100 ]; then
	echo "check_spdx: only $n files found under $src" >&2
	fail=1
fi
if ! grep -q '^char LICENSE\[\] SEC("license") = "Dual BSD/GPL";$' "$bpf"; then
	echo "check_spdx: $bpf: its license section is not \"Dual BSD/GPL\"" >&2
	fail=1
fi
exit $fail
