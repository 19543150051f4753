#!/usr/bin/env bash
# The Makefile's package lists: `make demo` / `make up` install only what
# the demo builds and runs (no developer tools as root before a demo), and
# `make deps` (what make check runs) installs everything. tools/deps.sh
# says what it installs and why. Installs nothing (DEPS_DRY_RUN).
. "$(dirname "$0")/../lib.sh"
mk() { env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory -s -C "$ROOT" "$@"; }
demo=" $(mk print-demo-pkgs) "
all=" $(mk print-deb-pkgs) "
has() { [[ $1 == *" $2 "* ]]; }

for p in clang clang-tidy valgrind cppcheck gnuplot-nox systemd redis-sentinel wrk \
	libcmocka-dev groff-base prometheus patchelf; do
	check "the demo's packages leave out $p" eval '! has "$demo" $p'
	check "make deps installs $p" has "$all" "$p"
done
# What tools/demo.sh runs and what the agent builds with.
for p in build-essential libev-dev libhiredis-dev redis-server haproxy curl openssl jq python3; do
	check "the demo's packages include $p" has "$demo" "$p"
done
bad=""
for p in $demo; do has "$all" "$p" || bad+=" $p"; done
eq "make deps installs every demo package" "" "$bad"

plan=$(mk -n demo up)
check "make demo / make up install the demo group" grep -q 'tools/deps.sh demo ' <<<"$plan"
check "make demo / make up do not install the test group" eval '! grep -q "tools/deps.sh tests" <<<"$plan"'
plan=$(mk -n deps)
check "make deps installs both groups" eval 'grep -q "tools/deps.sh demo " <<<"$plan" && grep -q "tools/deps.sh tests " <<<"$plan"'

plan=$(mk -n deb deb-test)
check "make deb / deb-test install the packaging tools first (group deb)" \
	grep -q 'tools/deps.sh deb .*debhelper' <<<"$plan"
out=$(DEPS_DRY_RUN=1 "$ROOT/tools/deps.sh" deb rlspoa-no-such-package 2>&1)
check "deps knows the deb group" grep -q '^deps (deb): would install rlspoa-no-such-package' <<<"$out"

out=$(DEPS_DRY_RUN=1 "$ROOT/tools/deps.sh" tests rlspoa-no-such-package valgrind 2>&1)
check "deps says which group, what and why" grep -q '^deps (tests): would install rlspoa-no-such-package — for the tests' <<<"$out"
out=$(DEPS_DRY_RUN=1 "$ROOT/tools/deps.sh" demo $demo 2>&1)
eq "nothing to say when the demo's packages are there" "" "$out"
t_done
