#!/usr/bin/env bash
# Build the Debian packages (debian/) out of tree, for `make deb`.
#
#   tools/deb-build.sh [OUT [VERSION]]    OUT: build/deb, VERSION: VERSION's
#                                         (another one is written to the
#                                         copy's VERSION too)
#
# Copies this checkout (its tracked files and new ones git does not ignore,
# as they are in the work tree; not build/) to OUT/ratelimit-spoa-VERSION,
# writes debian/changelog there from VERSION (the one place the version is
# written), and runs dpkg-buildpackage -b -us -uc in it: the .debs, -dbgsym
# .debs, .buildinfo and .changes land in OUT, the log in OUT/build.log. The
# checkout itself is never written to, except build/redismodule (the module's
# header, fetched once: tools/redismodule-header.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/deb}
version=${2:-$(cat VERSION)}
case $version in
[0-9]*) ;;
*) echo "deb-build: '$version' is not a Debian version (it must start with a digit)" >&2; exit 2 ;;
esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
src=$out/ratelimit-spoa-$version
rm -rf "$src"
rm -f "$out"/*.deb "$out"/*.ddeb "$out"/*.changes "$out"/*.buildinfo "$out"/build.log
mkdir -p "$src"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# Deleted-but-tracked files are skipped; build/ is ignored by git.
	git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done |
		tar --null -T - -cf - | tar -xf - -C "$src"
else
	tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C "$src"
fi
# Built files that git ignores were not copied; nothing else is expected.
[ -d "$src/debian" ] || { echo "deb-build: no debian/ in the tree" >&2; exit 1; }

# Another version than VERSION's (make deb DEB_VERSION=...) is the build's
# VERSION too: the agent's --version and the package's agree.
echo "$version" > "$src/VERSION"

# One entry, for VERSION, dated by the last commit (reproducible builds).
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
maint=$(sed -n 's/^Maintainer: //p' debian/control)
cat > "$src/debian/changelog" <<EOF
ratelimit-spoa ($version) unstable; urgency=medium

  * Version $version, built from the project's tree (VERSION).

 -- $maint  $(date -u -R -d "@$epoch")
EOF

# redismodule.h, fetched once into the checkout's build/ (it is never in
# the tree), then given to the build tree, so the package build does not
# fetch Debian's redis source package again.
tools/redismodule-header.sh build/redismodule >&2
mkdir -p "$src/build/redismodule"
cp -p build/redismodule/redismodule.h build/redismodule/VERSION "$src/build/redismodule/"

profiles=${DEB_BUILD_PROFILES:-}
opts=${DEB_BUILD_OPTIONS:-}
[[ $opts == *parallel=* ]] || opts="${opts:+$opts }parallel=2"

echo "deb-build: ratelimit-spoa $version in $src (log: $out/build.log)" >&2
start=$(date +%s)
if ! (cd "$src" && DEB_BUILD_PROFILES=$profiles DEB_BUILD_OPTIONS=$opts SOURCE_DATE_EPOCH=$epoch \
	dpkg-buildpackage -b -us -uc) >"$out/build.log" 2>&1; then
	tail -n 40 "$out/build.log" >&2
	echo "deb-build: dpkg-buildpackage failed (whole log: $out/build.log; tree kept in $src)" >&2
	exit 1
fi
rm -rf "$src"
echo "deb-build: built in $(($(date +%s) - start))s:" >&2
ls -1 "$out"/*.deb >&2
