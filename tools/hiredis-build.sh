#!/usr/bin/env bash
# Build hiredis >= 1.1 with its SSL library (hiredis_ssl) from Debian's own
# source package, for `make WITH_TLS=1` where the system hiredis is 0.14
# (Debian 12). Nothing is downloaded but that source package, from sid
# (tools/debian-source.sh: a private apt state, no change to the system's
# apt configuration, no sid binary package).
#
#   tools/hiredis-build.sh <prefix>     e.g. build/hiredis
#
# Installs static libraries and headers under <prefix> (lib/, include/),
# built against bookworm's OpenSSL (libssl-dev). A second run finds
# <prefix>/.done and is instant.
set -euo pipefail
prefix=${1:?usage: tools/hiredis-build.sh <prefix>}
[ -e "$prefix/.done" ] && exit 0
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
cd "$(dirname "$0")/.."
tools/deps.sh tls build-essential dpkg-dev libssl-dev >&2

dir=$(tools/debian-source.sh hiredis 1. "$prefix/src")
ver=$(basename "$dir")
ver=${ver#hiredis-}
case $ver in
0.* | 1.0.*) echo "hiredis-build: sid has hiredis $ver; need >= 1.1" >&2; exit 1 ;;
esac
echo "hiredis-build: building hiredis $ver with USE_SSL=1 into $prefix (nice)" >&2
start=$(date +%s)
# LIBRARY_PATH is hiredis's install subdirectory (and a compiler variable
# some environments set): given explicitly.
nice -n 10 make -C "$dir" -s -j2 USE_SSL=1 PREFIX="$prefix" LIBRARY_PATH=lib \
	OPTIMIZATION=-O2 static >/dev/null
nice -n 10 make -C "$dir" -s USE_SSL=1 PREFIX="$prefix" LIBRARY_PATH=lib install >/dev/null
# Static only: the agent must not pick up a shared libhiredis 1.x at run time.
rm -f "$prefix"/lib/libhiredis*.so*
echo "$ver" >"$prefix/.done"
echo "hiredis-build: hiredis $ver built in $(( $(date +%s) - start ))s" >&2
