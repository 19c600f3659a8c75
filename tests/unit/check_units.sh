#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# check_units.sh SERVICE_IN SOCKET PROCREGD USER SYSUSERS - the systemd
# units as installed (the service's ExecStart naming PROCREGD, run as
# USER) pass
# `systemd-analyze verify` without a word, and the service's sandbox
# scores at most 3.0 in `systemd-analyze security` (both offline: no
# running systemd needed). The table directory must stay the host's
# /dev/shm: PrivateDevices=yes would give the daemon a /dev/shm of its
# own, which no client sees. The service runs as USER, not root, with
# CAP_KILL ambient (it signals other users' processes), and SYSUSERS,
# the sysusers.d file, makes USER.
set -eu
service_in=$1 socket=$2 procregd=$3 user=$4 sysusers=$5
if ! command -v systemd-analyze >/dev/null; then
	echo "check_units: systemd-analyze not found (apt-get install systemd)" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
sed -e "s|@PROCREG_SBINDIR@|$(dirname "$procregd")|" -e "s|@PROCREG_DAEMON_USER@|$user|" \
	"$service_in" > "$tmp/procregd@.service"
if grep -q '@[A-Z_]*@' "$tmp/procregd@.service"; then
	echo "check_units: procregd@.service keeps a placeholder:" >&2
	grep '@[A-Z_]*@' "$tmp/procregd@.service" >&2
	fail=1
fi
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
	'RuntimeDirectory=procreg' 'EnvironmentFile=-/etc/default/procregd' "User=$user" \
	"Group=$user" 'AmbientCapabilities=CAP_KILL$' 'CapabilityBoundingSet=CAP_KILL$'; do
	if ! grep -q "^$want" "$tmp/procregd@.service"; then
		echo "check_units: procregd@.service lacks '$want'" >&2
		fail=1
	fi
done
for want in 'SocketMode=0666' 'ListenSequentialPacket=/run/procreg/'; do
	if ! grep -q "^$want" "$tmp/procregd@.socket"; then
		echo "check_units: procregd@.socket lacks '$want'" >&2
		fail=1
	fi
done
if grep -q '^User=root' "$tmp/procregd@.service" || [ "$user" = root ]; then
	echo "check_units: procregd@.service runs as root" >&2
	fail=1
fi
# systemd-sysusers reads it as it would at boot, into an empty root.
mkdir "$tmp/root" "$tmp/root/etc"
if ! out=$(systemd-sysusers --root="$tmp/root" --dry-run - < "$sysusers" 2>&1) ||
	! printf '%s\n' "$out" | grep -q "Creating user '$user'"; then
	echo "check_units: systemd-sysusers does not make the system user $user from $sysusers:" >&2
	printf '%s\n' "$out" >&2
	fail=1
fi
exit $fail
