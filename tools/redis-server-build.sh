#!/usr/bin/env bash
# Build redis-server from one of Debian sid's source packages, for the
# module's tests on servers newer than Debian 12's Redis 7.0 (.ci/run's
# module stage, make check-module-servers): Redis 8.0 (package redis) and
# Valkey 9 (package valkey). Nothing is downloaded but that source package
# (tools/debian-source.sh: a private apt state, no change to the system's
# apt configuration, no sid binary package).
#
#   tools/redis-server-build.sh redis 8. build/redis-8      -> prints .../redis-server
#   tools/redis-server-build.sh valkey 9. build/valkey-9    -> prints .../valkey-server
#
# The server is built with its bundled Lua, no TLS, no systemd, at nice 10;
# a second run finds <prefix>/.done and is instant. MALLOC=libc (the
# environment) builds it on the C library's malloc instead of jemalloc:
# valgrind then sees every allocation, the module's included (make
# valgrind-module runs Redis 8 built so).
# Prints the path of the server binary on stdout.
set -euo pipefail
pkg=${1:?usage: tools/redis-server-build.sh PACKAGE VERSION-PREFIX PREFIX}
want=${2:?usage: tools/redis-server-build.sh PACKAGE VERSION-PREFIX PREFIX}
prefix=${3:?usage: tools/redis-server-build.sh PACKAGE VERSION-PREFIX PREFIX}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
case $pkg in
redis) bin=redis-server ;;
valkey) bin=valkey-server ;;
*) echo "redis-server-build: unknown package $pkg (redis or valkey)" >&2; exit 1 ;;
esac
if [ -e "$prefix/.done" ] && [ -x "$prefix/$bin" ]; then
	echo "$prefix/$bin"
	exit 0
fi
cd "$(dirname "$0")/.."
tools/deps.sh module build-essential dpkg-dev pkg-config >&2

dir=$(tools/debian-source.sh "$pkg" "$want" "$prefix/src")
ver=$(basename "$dir")
ver=${ver#"$pkg"-}
echo "redis-server-build: building $pkg $ver (malloc: ${MALLOC:-jemalloc}, no TLS) into $prefix (nice)" >&2
start=$(date +%s)
# BUILD_TLS=no and USE_SYSTEMD=no: nothing beyond build-essential; the
# module tests need neither.
nice -n 10 make -C "$dir" -s -j2 BUILD_TLS=no USE_SYSTEMD=no ${MALLOC:+MALLOC=$MALLOC} "$bin" \
	>"$prefix/build.log" 2>&1 || {
	tail -n 30 "$prefix/build.log" >&2
	echo "redis-server-build: $pkg $ver failed to build (log: $prefix/build.log)" >&2
	exit 1
}
install -m755 "$dir/src/$bin" "$prefix/$bin"
rm -rf "$prefix/src"
echo "$pkg $ver ${MALLOC:-jemalloc}" >"$prefix/.done"
echo "redis-server-build: $pkg $ver built in $(( $(date +%s) - start ))s" >&2
echo "$prefix/$bin"
