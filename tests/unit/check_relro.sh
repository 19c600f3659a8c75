#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# check_relro.sh FILE... - each is linked with full RELRO: its symbols
# bound at load (BIND_NOW) and a GNU_RELRO segment, which the loader makes
# read-only once they are. libprocreg relies on it so that forked workers
# do not bind its calls again each; procregd, so that its GOT cannot be
# written once it runs.
set -eu
fail=0
for f in "$@"; do
	if ! readelf -dW "$f" | grep -Eq '\((FLAGS|FLAGS_1)\).*[[:space:]](BIND_NOW|NOW)([[:space:]]|$)'; then
		echo "check_relro: $f: symbols not bound at load (no BIND_NOW)" >&2
		fail=1
	fi
	if ! readelf -lW "$f" | grep -q 'GNU_RELRO'; then
		echo "check_relro: $f: no GNU_RELRO segment" >&2
		fail=1
	fi
done
exit $fail
