#!/usr/bin/env bash
# HAProxy 3.2 LTS from Debian's archive (sid carries 3.2.x), on Debian 12,
# into build/haproxy-3.2/haproxy, for make e2e-3.2 and make bench; with
# HAPROXY_SERIES=3.0, HAProxy 3.0 LTS from trixie into build/haproxy-3.0
# (make haproxy30, make e2e-3.0).
#
#   tools/haproxy-build.sh     prints the binary's path (fetches it once; a
#                              second run finds it and is instant)
#
# Two ways, in this order:
#   source  Debian's own source package from sid (deb-src), built with
#           bookworm's -dev packages. The first choice, used whenever the
#           archive serves it.
#   binary  when the archive does not serve the source (the mirror CI uses
#           answers 404 for haproxy's .dsc and .orig.tar.gz while it serves
#           sid's .debs): sid's haproxy .deb and the shared libraries it
#           runs with (its Depends closure, library packages only; adduser
#           and the like serve the system service), unpacked under
#           build/haproxy-3.2/root. The binary is patched (patchelf) to run
#           sid's own ld.so with a DT_RPATH (not RUNPATH: it also applies
#           to the libraries' own dependencies) to root's library dirs, so
#           it runs on Debian 12 with sid's glibc and libraries, and it is
#           refused if LD_TRACE_LOADED_OBJECTS shows any library from outside
#           root. A patched binary rather than a wrapper that runs
#           ld.so --library-path: a master-worker reload re-executes the
#           binary itself, which a wrapper would not survive.
#
# Both go through a private apt state under build/apt-sid (its own sources
# file, lists, cache and empty dpkg status): the system's apt configuration
# and package set are not changed and no sid package is ever installed.
# Exit status 2 means the archive serves neither the source nor the binary
# package of the series (1: a failed build, or a binary that would load a
# host library). build/haproxy-3.2/FROM says which way the binary came.
# Knobs: HAPROXY_SERIES=3.2 (or 3.0); HAPROXY_SUITE (trixie for 3.0, sid
# otherwise; its private apt state is build/apt-<suite>); HAPROXY_FROM=auto (source, else binary),
# source or binary; HAPROXY_SRC=/dir builds an unpacked source tree of that
# series instead of fetching one; JOBS=$(nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
series=${HAPROXY_SERIES:-3.2}
# the Debian suite that carries the series: trixie ships 3.0 LTS (the last
# line on the pre-3.1 SPOE engine), sid 3.2
case $series in
3.0) suite_default=trixie ;;
*) suite_default=sid ;;
esac
suite=${HAPROXY_SUITE:-$suite_default}
from=${HAPROXY_FROM:-auto}
root=$PWD/build
out=$root/haproxy-$series
bin=$out/haproxy
# (the version read whole first: grep -q closing the pipe early would make
# haproxy -v fail under pipefail)
if [ -x "$bin" ] && [[ $("$bin" -v 2>/dev/null) == *"version $series."* ]]; then
	echo "$bin"
	exit 0
fi

# dpkg-dev unpacks the source package; patchelf adapts the binary package.
tools/deps.sh haproxy32 dpkg-dev patchelf >&2

apt_dir=$root/apt-$suite
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
	-o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$apt_dir/preferences.d"
	-o "Dir::State=$apt_dir/state" -o "Dir::State::Lists=$apt_dir/lists"
	-o "Dir::State::status=$apt_dir/state/status" -o "Dir::Cache=$apt_dir/cache"
	-o "Debug::NoLocking=1" -o "APT::Sandbox::User=root" -o "Acquire::Languages=none")
arch=$(dpkg --print-architecture)

# apt_update: the private state learns sid's source and binary indexes.
apt_update() {
	mkdir -p "$apt_dir"/{lists/partial,cache/archives/partial,sources.list.d,preferences.d,state}
	: > "$apt_dir/state/status"
	cat > "$apt_dir/sources.list.d/$suite.sources" <<SRC
Types: deb deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Architectures: $arch
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	echo "haproxy-build: reading ${suite}'s package indexes" >&2
	apt-get "${apt_opts[@]}" -qq update >&2
}

# fetch_source: unpacks sid's haproxy source package into $out/src and sets
# served=1; served stays 0 when the archive does not serve it. (Called as a
# plain command, not under || or &&, so that set -e holds inside; the same
# for the functions below.)
fetch_source() {
	local ver
	ver=$(apt-cache "${apt_opts[@]}" showsrc haproxy |
		awk -v s="$series." '$1 == "Version:" && index($2, s) == 1 { print $2 }' | sort -V | tail -1)
	if [ -z "$ver" ]; then
		echo "haproxy-build: $suite lists no haproxy $series.x source package" >&2
		return 0
	fi
	rm -rf "$out/src"; mkdir -p "$out/src"
	echo "haproxy-build: fetching the haproxy $ver source package from $suite" >&2
	# apt-get source applies Debian's patches (3.0 quilt) while unpacking.
	if ! (cd "$out/src" && apt-get "${apt_opts[@]}" -qq source "haproxy=$ver" >&2); then
		echo "haproxy-build: the archive did not serve haproxy $ver's source package" >&2
		rm -rf "$out/src"
		return 0
	fi
	served=1
}

# build_source DIR: builds HAProxy from an unpacked source tree into $bin.
build_source() {
	local src=$1 start
	# What the build needs from bookworm: OpenSSL (TLS and jwt_verify),
	# PCRE2, Lua 5.4, zlib.
	tools/deps.sh haproxy32 build-essential libssl-dev libpcre2-dev liblua5.4-dev zlib1g-dev >&2
	echo "haproxy-build: building $src (nice, ${JOBS:-$(nproc)} jobs)" >&2
	start=$(date +%s)
	nice -n 10 make -C "$src" -j"${JOBS:-$(nproc)}" -s \
		TARGET=linux-glibc USE_OPENSSL=1 USE_PCRE2=1 USE_PCRE2_JIT=1 \
		USE_LUA=1 LUA_INC=/usr/include/lua5.4 LUA_LIB_NAME=lua5.4 \
		USE_ZLIB=1 USE_PROMEX=1 >&2
	mkdir -p "$out"
	install -m755 "$src/haproxy" "$bin.tmp"
	mv "$bin.tmp" "$bin"
	echo "Debian's source package $(basename "$src"), built with Debian 12's libraries" > "$out/FROM"
	echo "haproxy-build: built in $(( $(date +%s) - start )) s: $("$bin" -v | head -1)" >&2
}

# lib_closure VERSION: haproxy=VERSION and the packages of the shared
# libraries it runs with, one per line: its Depends and Pre-Depends (the
# first of alternatives), followed through packages of section libs only.
lib_closure() {
	local ver=$1 deps
	deps=$(apt-cache "${apt_opts[@]}" depends --recurse --no-recommends --no-suggests \
		--no-conflicts --no-breaks --no-replaces --no-enhances "haproxy=$ver")
	# shellcheck disable=SC2046 # package names, one word each
	awk 'FNR == 1 { f++ }
	f == 1 && $1 == "Package:" { p = $2 } f == 1 && $1 == "Section:" { libs[p] = ($2 == "libs") }
	f == 2 && /^[^ ]/ { cur = $1; alt = 0; next }
	f == 2 && $1 ~ /^\|?(Pre)?Depends:$/ {
		if (!alt && $2 !~ /^</) edges[cur] = edges[cur] " " $2
		alt = ($1 ~ /^\|/)
	}
	END {
		q[n = 1] = "haproxy"; seen["haproxy"] = 1
		for (i = 1; i <= n; i++) {
			k = split(edges[q[i]], d, " ")
			for (j = 1; j <= k; j++)
				if (libs[d[j]] && !seen[d[j]]) { seen[d[j]] = 1; q[++n] = d[j] }
		}
		for (i = 2; i <= n; i++) print q[i]
	}' <(apt-cache "${apt_opts[@]}" show --no-all-versions \
		$(grep -v '^ ' <<<"$deps" | grep -v '^<' | sort -u)) - <<<"$deps"
}

# fetch_binary: sid's haproxy .deb and its libraries, unpacked under
# $out/root, the binary patched into $bin and checked, and served=1; served
# stays 0 when the archive does not serve them.
fetch_binary() {
	local ver pkgs debs deb d ma ldso rpath trace host start vv feature
	start=$(date +%s)
	ver=$(apt-cache "${apt_opts[@]}" madison haproxy |
		awk -v s="$series." '$3 ~ "^" s { print $3 }' | sort -V | tail -1)
	if [ -z "$ver" ]; then
		echo "haproxy-build: $suite lists no haproxy $series.x binary package" >&2
		return 0
	fi
	mapfile -t pkgs < <(lib_closure "$ver")
	if [[ " ${pkgs[*]} " != *" libc6 "* ]]; then
		echo "haproxy-build: no libc6 in haproxy $ver's dependencies: '${pkgs[*]}'" >&2
		return 1
	fi
	echo "haproxy-build: fetching ${suite}'s haproxy $ver and ${#pkgs[@]} library packages: ${pkgs[*]}" >&2
	debs=$out/debs
	rm -rf "$debs" "$out/root"; mkdir -p "$debs" "$out/root"
	if ! (cd "$debs" && apt-get "${apt_opts[@]}" -qq download "haproxy=$ver" "${pkgs[@]}" >&2); then
		echo "haproxy-build: the archive did not serve haproxy $ver's binary packages" >&2
		return 0
	fi
	for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$out/root"; done
	ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
	ldso=$(find "$out/root" -type f -name 'ld-linux*.so*' | head -1)
	rpath=
	for d in usr/lib/"$ma" lib/"$ma" usr/lib lib; do
		if [ -d "$out/root/$d" ] && [ ! -L "$out/root/$d" ]; then rpath+=${rpath:+:}$out/root/$d; fi
	done
	if [ -z "$ldso" ] || [ -z "$rpath" ]; then
		echo "haproxy-build: ${suite}'s libc6 left no ld.so or library dir under $out/root" >&2
		return 1
	fi
	cp "$out/root/usr/sbin/haproxy" "$bin.tmp"
	patchelf --set-interpreter "$ldso" --force-rpath --set-rpath "$rpath" "$bin.tmp"
	# Every object the loader maps must come from root: a host library
	# (bookworm's) under sid's glibc is what this way must never do.
	trace=$(LD_TRACE_LOADED_OBJECTS=1 "$bin.tmp" 2>&1) || true
	host=$(awk -v r="$out/root/" '/not found/ { print; next }
		{ for (i = 1; i <= NF; i++) if ($i ~ /^\// && index($i, r) != 1) print $i }' <<<"$trace")
	if [ -n "$host" ]; then
		echo "haproxy-build: the patched binary would load from outside $out/root:" >&2
		echo "$host" >&2
		return 1
	fi
	vv=$("$bin.tmp" -vv)
	for feature in +OPENSSL +LUA +PCRE2; do
		if [[ $vv != *" $feature "* ]]; then
			echo "haproxy-build: ${suite}'s haproxy $ver lacks '$feature'" >&2
			return 1
		fi
	done
	mv "$bin.tmp" "$bin"
	printf "${suite}'s binary package haproxy %s (the archive did not serve the source)\nlibraries: %s\n" \
		"$ver" "${pkgs[*]}" > "$out/FROM"
	served=1
	echo "haproxy-build: ${suite}'s haproxy $ver runs on $(awk '/=>/ { n++ } END { print n }' <<<"$trace")" \
		"of ${suite}'s libraries, none of the host's; ready in $(( $(date +%s) - start )) s" >&2
}

src=${HAPROXY_SRC:-}
if [ -z "$src" ]; then
	src=$(ls -d "$out"/src/haproxy-"$series".*/ 2>/dev/null | head -1 || true)
fi
if [ -n "$src" ]; then
	build_source "$src"
	echo "$bin"
	exit 0
fi
apt_update
served=0
if [ "$from" != binary ]; then
	fetch_source
	if [ $served = 1 ]; then
		build_source "$(ls -d "$out"/src/haproxy-"$series".*/ | head -1)"
	elif [ "$from" != source ]; then
		echo "haproxy-build: falling back to ${suite}'s binary package" >&2
	fi
fi
if [ $served = 0 ] && [ "$from" != source ]; then
	fetch_binary
fi
[ $served = 1 ] || exit 2
echo "$bin"
