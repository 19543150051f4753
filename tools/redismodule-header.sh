#!/usr/bin/env bash
# redismodule.h for `make module`, from Debian's own redis source package
# (sid's 8.0.x; the header is self-contained and the module looks every
# function up at load, so one header serves Redis 7.0 to 8 and Valkey).
# Never committed to the repo: fetched into build/ at build time.
#
#   tools/redismodule-header.sh <dir>     e.g. build/redismodule
#
# Writes <dir>/redismodule.h and <dir>/VERSION (the package version); a
# second run finds them and is instant. Nothing is downloaded but that
# source package (tools/debian-source.sh: a private apt state, no change to
# the system's apt configuration, no sid binary package).
set -euo pipefail
dir=${1:?usage: tools/redismodule-header.sh <dir>}
[ -s "$dir/redismodule.h" ] && [ -s "$dir/VERSION" ] && exit 0
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
cd "$(dirname "$0")/.."
tools/deps.sh module dpkg-dev >&2
src=$(tools/debian-source.sh redis "${REDISMODULE_H_VERSION:-8.}" "$dir/src")
install -m644 "$src/src/redismodule.h" "$dir/redismodule.h.tmp"
mv "$dir/redismodule.h.tmp" "$dir/redismodule.h"
basename "$src" >"$dir/VERSION"
rm -rf "$dir/src"
echo "redismodule-header: $(cat "$dir/VERSION")'s redismodule.h in $dir" >&2
