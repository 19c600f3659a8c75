#!/bin/sh
# A short tour of procreg on the default scope: starts procregd if it is not
# running, registers a service, looks it up, kills it and shows the name go.
# Usage: tools/demo.sh [BUILD_DIR]   (default: build)
set -eu
B=${1:-build}
PROCREG=$B/procreg

say() { printf '\n$ %s\n' "$*"; }

if ! "$PROCREG" stats >/dev/null 2>&1 || [ "$("$PROCREG" stats --json | sed 's/.*"daemon_pid":\([0-9]*\).*/\1/')" = 0 ]; then
	say "$B/procregd"
	"$B/procregd"
fi

say "$PROCREG run demo.payments demo.api --meta unix:/run/payments.sock -- sleep 30 &"
"$PROCREG" run demo.payments demo.api --meta unix:/run/payments.sock -- sleep 30 &
svc=$!
# Wait until the names are there (the registration is acknowledged before exec).
i=0
until "$PROCREG" get demo.payments >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -lt 500 ] || { echo "demo: registration did not appear" >&2; exit 1; }
	sleep 0.01
done

say "$PROCREG ls"
"$PROCREG" ls
say "$PROCREG get demo.payments"
"$PROCREG" get demo.payments
say "$PROCREG run demo.payments -- true      # taken: exit status 1"
"$PROCREG" run demo.payments -- true || echo "(exit status $?)"

say "kill -9 $svc      # the names go with the process"
kill -9 "$svc"
wait "$svc" 2>/dev/null || true
i=0
while "$PROCREG" get demo.payments >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -lt 500 ] || { echo "demo: name outlived its process" >&2; exit 1; }
	sleep 0.01
done
say "$PROCREG get demo.payments"
"$PROCREG" get demo.payments || echo "(exit status $?)"
say "$PROCREG stats"
"$PROCREG" stats
printf '\nprocregd keeps running for the default scope; stop it with: kill %s\n' \
	"$("$PROCREG" stats --json | sed 's/.*"daemon_pid":\([0-9]*\).*/\1/')"
