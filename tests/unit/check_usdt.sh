#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# check_usdt.sh FILE... - each has USDT probes, and no probe argument is
# in memory addressed by a base and an index register ("8@16(%rsp,%rax)"):
# libbpf could not read that form until 2025 (Debian 12's 1.1 cannot), and
# procreg-trace would fail to attach to the probe. lib/probes.h asks for
# registers and constants only; this catches a compiler or a header that
# does otherwise.
set -eu
fail=0
for f in "$@"; do
	notes=$(readelf -nW "$f")
	if ! printf '%s\n' "$notes" | grep -q 'Arguments:'; then
		echo "check_usdt: $f: no USDT probes" >&2
		fail=1
		continue
	fi
	bad=$(printf '%s\n' "$notes" | grep -B3 'Arguments:.*(%[a-z0-9]*,%' | grep -E 'Name:|Arguments:' || true)
	if [ -n "$bad" ]; then
		printf 'check_usdt: %s: probe arguments with an index register:\n%s\n' "$f" "$bad" >&2
		fail=1
	fi
done
exit $fail
