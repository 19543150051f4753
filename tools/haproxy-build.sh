#!/usr/bin/env bash
# Build HAProxy 3.2 LTS from Debian's own source package (sid carries 3.2.x)
# into build/haproxy-3.2/haproxy, with bookworm's -dev packages.
#
#   tools/haproxy-build.sh     prints the binary's path (builds it once; a
#                              second run finds it and is instant)
#
# Only the source package comes from sid (tools/debian-source.sh: a private
# apt state; the system's apt configuration is not changed, no sid binary
# package is fetched). Exit status 2 means the archive does not serve the
# source package (as opposed to 1, a failed build).
# Knobs: HAPROXY_SERIES=3.2; HAPROXY_SRC=/dir builds an unpacked source tree
# of that series instead of fetching one; JOBS=$(nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
series=${HAPROXY_SERIES:-3.2}
root=$PWD/build
out=$root/haproxy-$series
bin=$out/haproxy
# (the version read whole first: grep -q closing the pipe early would make
# haproxy -v fail under pipefail)
if [ -x "$bin" ] && [[ $("$bin" -v 2>/dev/null) == *"version $series."* ]]; then
	echo "$bin"
	exit 0
fi

# What the build needs from bookworm: OpenSSL (TLS and jwt_verify), PCRE2,
# Lua 5.4, zlib; dpkg-dev unpacks the source package.
tools/deps.sh haproxy32 build-essential dpkg-dev libssl-dev libpcre2-dev liblua5.4-dev zlib1g-dev >&2

src=${HAPROXY_SRC:-}
if [ -z "$src" ]; then
	src=$(ls -d "$out"/src/haproxy-"$series".*/ 2>/dev/null | head -1 || true)
fi
if [ -z "$src" ]; then
	src=$(tools/debian-source.sh haproxy "$series." "$out/src") || exit $?
fi

echo "haproxy-build: building $src (nice, ${JOBS:-$(nproc)} jobs)" >&2
start=$(date +%s)
nice -n 10 make -C "$src" -j"${JOBS:-$(nproc)}" -s \
	TARGET=linux-glibc USE_OPENSSL=1 USE_PCRE2=1 USE_PCRE2_JIT=1 \
	USE_LUA=1 LUA_INC=/usr/include/lua5.4 LUA_LIB_NAME=lua5.4 \
	USE_ZLIB=1 USE_PROMEX=1 >&2
mkdir -p "$out"
install -m755 "$src/haproxy" "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "haproxy-build: built in $(( $(date +%s) - start )) s: $("$bin" -v | head -1)" >&2
echo "$bin"
