#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Run each libFuzzer harness of BUILD_DIR (configured with -DPROCREG_FUZZ=ON)
# for SECONDS, starting from its seed corpus in tests/fuzz/corpus/. New
# inputs go to a scratch directory, not into the tree. Fails on any crash,
# leak, sanitizer report or timeout (libFuzzer exits non-zero and leaves a
# crash-*/leak-*/timeout-* file in the scratch directory).
#   tests/fuzz/run.sh BUILD_DIR [SECONDS]
set -euo pipefail
build=$1
secs=${2:-30}
src=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d /tmp/procreg-fuzz-run.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
status=0
for h in fuzz_proto fuzz_table fuzz_bridge fuzz_envelope; do
	mkdir -p "$scratch/$h"
	echo "== $h: ${secs}s"
	if ! (cd "$scratch" && "$build/tests/fuzz/$h" -max_total_time="$secs" -timeout=25 \
		-rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
		"$scratch/$h" "$src/corpus/$h" >"$scratch/$h.log" 2>&1); then
		status=1
		cat "$scratch/$h.log"
		ls "$scratch"
	fi
	grep -E '^Done|stat::number_of_executed_units|ERROR' "$scratch/$h.log" || true
done
exit $status
