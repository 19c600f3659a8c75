#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# check_units.sh SERVICE_IN SOCKET PROCREGD - the systemd units as
# installed (the service's ExecStart naming PROCREGD) pass
# `systemd-analyze verify` without a word, and the service's sandbox
# scores at most 3.0 in `systemd-analyze security` (both offline: no
# running systemd needed). The table directory must stay the host's
# /dev/shm: PrivateDevices=yes would give the daemon a /dev/shm of its
# own, which no client sees.
set -eu
service_in=$1 socket=$2 procregd=$3
if ! command -v systemd-analyze >/dev/null; then
	echo "check_units: systemd-analyze not found (apt-get install systemd)" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
sed "s|@PROCREG_SBINDIR@|$(dirname "$procregd")|" "$service_in" > "$tmp/procregd@.service"
cp "$socket" "$tmp/procregd@.socket"

if ! out=$(systemd-analyze verify --man=no "$tmp/procregd@.service" "$tmp/procregd@.socket" 2>&1) ||
	[ -n "$out" ]; then
	echo "check_units: systemd-analyze verify:" >&2
	printf '%s\n' "$out" >&2
	fail=1
fi
if ! out=$(systemd-analyze security --offline=true --threshold=30 --no-pager \
	"$tmp/procregd@.service" 2>&1); then
	echo "check_units: systemd-analyze security (at most 3.0):" >&2
	printf '%s\n' "$out" >&2
	fail=1
fi
printf '%s\n' "$out" | tail -n 1
for want in 'Type=notify' 'WatchdogSec=' 'PrivateDevices=no' 'ReadWritePaths=/dev/shm' \
	'RuntimeDirectory=procreg' 'EnvironmentFile=-/etc/default/procregd'; do
	if ! grep -q "^$want" "$tmp/procregd@.service"; then
		echo "check_units: procregd@.service lacks '$want'" >&2
		fail=1
	fi
done
exit $fail
