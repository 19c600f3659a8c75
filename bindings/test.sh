#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# bindings/test.sh LANG BUILD_DIR: build the LANG binding (python, rust or
# go) against the libprocreg of the CMake build tree BUILD_DIR, and run its
# tests, its README example among them. ctest runs it once per language
# (label bindings). Everything it builds goes under BUILD_DIR/bindings;
# nothing is downloaded. A missing toolchain is a failure, never a skip:
# CI installs them all (the README's apt-get line).
set -euo pipefail
lang=$1
build=$(cd "$2" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
out=$build/bindings/$lang
mkdir -p "$out"

fail() {
	echo "bindings/test.sh $lang: $*" >&2
	exit 1
}
[ -e "$build/libprocreg.so" ] || fail "no $build/libprocreg.so: build the tree first"

# The tests start daemons of their own, in directories of their own: none
# may reach the host's registry, or start one.
unset PROCREG_DIR PROCREG_SCOPE PROCREG_SOCKET
export PROCREG_BUILD_DIR=$build PROCREG_NO_AUTOSTART=1

case $lang in
python)
	# Debian's interpreter, where python3-pytest and python3-setuptools
	# are (a python3 of another origin earlier in PATH has neither).
	py=${PROCREG_PYTHON:-/usr/bin/python3}
	[ -x "$py" ] || fail "$py not found (apt-get install python3-dev python3-pip python3-setuptools python3-pytest)"
	"$py" -c 'import setuptools, pytest, pip' ||
		fail "$py lacks setuptools, pip or pytest (apt-get install python3-pip python3-setuptools python3-pytest)"
	rm -rf "$out/site"
	# As a user installs it; --target, so that nothing of the system's
	# changes; no index and no build isolation, so nothing is fetched.
	"$py" -m pip install --quiet --no-index --no-deps --no-build-isolation --target "$out/site" \
		"$src/bindings/python"
	cd "$out"
	PYTHONPATH=$out/site exec "$py" -m pytest -p no:cacheprovider -v "$src/bindings/python/tests"
	;;
rust)
	# The cargo of rustup's default place when PATH lacks one (CI runs
	# as root with a cargo installed in /root/.cargo/bin).
	cargo=${CARGO:-$(command -v cargo || echo "${HOME:-/root}/.cargo/bin/cargo")}
	[ -x "$cargo" ] || cargo=/root/.cargo/bin/cargo
	[ -x "$cargo" ] || fail "cargo not found (set CARGO, or install it in ~/.cargo/bin)"
	export CARGO_TARGET_DIR=$out/target LD_LIBRARY_PATH=$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	cd "$src/bindings/rust"
	# --locked: the committed Cargo.lock, which lists no crate from outside.
	"$cargo" test --offline --locked -j2
	# The benchmark builds, and its example runs to the end (tiny sizes).
	exec "$cargo" run --offline --locked -j2 --release --example bench -- 100 1
	;;
go)
	command -v go >/dev/null || fail "go not found (apt-get install golang-go)"
	# The standard library only, and the Go that is installed: nothing is
	# fetched. Caches under the build tree, whatever HOME is.
	export GOTOOLCHAIN=local GOPROXY=off GOCACHE=$out/cache GOPATH=$out/gopath
	export CGO_ENABLED=1 CGO_CFLAGS="-I$src/include -I$build/generated" \
		CGO_LDFLAGS="-L$build -Wl,-rpath,$build"
	cd "$src/bindings/go"
	go vet ./...
	go test -count=1 -p 2 -v ./...
	# The benchmark builds, and runs to the end (tiny sizes).
	exec go run ./bench -names 100 -rounds 1
	;;
*)
	fail "unknown language (python, rust, go)"
	;;
esac
