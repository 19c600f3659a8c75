#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# A short tour of procreg on the default scope: starts procregd if it is not
# running, registers a service, looks it up, kills it and shows the name go.
# Usage: tools/demo.sh [BUILD_DIR]   (default: build)
set -eu
B=${1:-build}
PROCREG=$B/procreg

say() { printf '\n$ %s\n' "$*"; }
# Show a command, then run it.
run() { say "$*"; "$@"; }
daemon_pid() { "$PROCREG" stats --json | sed 's/.*"daemon_pid":\([0-9]*\).*/\1/'; }
# Wait until NAME is registered (WANT yes) or not (WANT no); else say WHY
# and give up after 5 s.
await() {
	want=$1 name=$2 why=$3 i=0
	while :; do
		if "$PROCREG" get "$name" >/dev/null 2>&1; then has=yes; else has=no; fi
		[ "$has" != "$want" ] || return 0
		i=$((i + 1)); [ $i -lt 500 ] || { echo "demo: $why" >&2; exit 1; }
		sleep 0.01
	done
}

if ! "$PROCREG" stats >/dev/null 2>&1 || [ "$(daemon_pid)" = 0 ]; then
	run "$B/procregd"
fi

say "$PROCREG run demo.payments demo.api --meta unix:/run/payments.sock -- sleep 30 &"
"$PROCREG" run demo.payments demo.api --meta unix:/run/payments.sock -- sleep 30 &
svc=$!
# The registration is acknowledged before exec: the names come soon.
await yes demo.payments "registration did not appear"

run "$PROCREG" ls
run "$PROCREG" get demo.payments
say "$PROCREG run demo.payments -- true      # taken: exit status 1"
"$PROCREG" run demo.payments -- true || echo "(exit status $?)"

say "kill -9 $svc      # the names go with the process"
kill -9 "$svc"
wait "$svc" 2>/dev/null || true
await no demo.payments "name outlived its process"
run "$PROCREG" get demo.payments || echo "(exit status $?)"
run "$PROCREG" stats
printf '\nprocregd keeps running for the default scope; stop it with: kill %s\n' "$(daemon_pid)"
