#!/usr/bin/env bash
# Fetch and unpack one source package from Debian sid, for the tools that
# build a newer upstream than bookworm ships (tools/haproxy-build.sh:
# HAProxy 3.2; tools/hiredis-build.sh: hiredis 1.x with SSL, for
# make WITH_TLS=1).
#
#   tools/debian-source.sh PACKAGE VERSION-PREFIX DEST
#
# Unpacks the newest PACKAGE whose version starts with VERSION-PREFIX (with
# or without its epoch: redis 8. matches 5:8.0.6-3) into
# DEST (emptied first; apt-get source applies Debian's patches, 3.0 quilt)
# and prints the unpacked directory. Only the source package comes from sid,
# through a private apt state under build/apt-sid (a deb-src line in its own
# sources file): the system's apt configuration and package set are not
# changed and no sid binary package is ever fetched. Needs dpkg-dev.
# Exit status 2 means the archive does not serve such a source package.
set -euo pipefail
pkg=${1:?usage: tools/debian-source.sh PACKAGE VERSION-PREFIX DEST}
prefix=${2:?usage: tools/debian-source.sh PACKAGE VERSION-PREFIX DEST}
dest=${3:?usage: tools/debian-source.sh PACKAGE VERSION-PREFIX DEST}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
cd "$(dirname "$0")/.."
# Its own state, apart from haproxy-build.sh's build/apt-sid (binary indexes too).
apt_dir=$PWD/build/apt-sid-src
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/sources.list.d"
cat > "$apt_dir/sources.list.d/sid-src.sources" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o "Debug::NoLocking=1"
	-o "APT::Sandbox::User=root")
echo "debian-source: fetching the $pkg $prefix* source package from sid" >&2
apt-get "${apt_opts[@]}" -qq update >&2
ver=$(apt-cache "${apt_opts[@]}" showsrc "$pkg" |
	awk -v s="$prefix" '$1 == "Version:" { v = $2; sub(/^[0-9]+:/, "", v)
		if (index($2, s) == 1 || index(v, s) == 1) print $2 }' | sort -V | tail -1)
if [ -z "$ver" ]; then
	echo "debian-source: sid lists no $pkg $prefix* source package" >&2
	exit 2
fi
rm -rf "$dest"; mkdir -p "$dest"
if ! (cd "$dest" && apt-get "${apt_opts[@]}" -qq source "$pkg=$ver" >&2); then
	echo "debian-source: the archive did not serve $pkg $ver's source package" >&2
	rm -rf "$dest"
	exit 2
fi
ls -d "$dest/$pkg"-*/ | head -1
