#!/usr/bin/env bash
# The Debian packages as an operator meets them (make deb-test; .ci/run).
# As root, on this machine, which it leaves as it found it:
#
#   1. builds the packages twice from this tree (tools/deb-build.sh): this
#      VERSION into build/deb, and VERSION~debtest1 (older, by Debian's
#      ordering) into build/deb-prev, the build an upgrade starts from;
#   2. lintian on both: no error, no warning;
#   3. apt-get install ./build/deb-prev/*.deb: the system user, the unit
#      enabled and not started, systemd-analyze verify, the man pages, the
#      installed agent accepts its shipped config (-c, and --routes with the
#      shipped routes map); ratelimit-jwks, its conffile, its service and
#      timer (verified, not enabled), and the command turning a JWKS into the
#      kid map;
#   4. edits the conffile as an operator would (redis-timeout 1s, a comment),
#      then apt-get install ./build/deb/*.deb: the edit is kept, no prompt;
#   5. runs the installed agent, as the package's user, with the installed
#      config (only listen and redis given on the command line) against a
#      redis-server on an ephemeral loopback port: SPOP decisions, then the
#      acceptance story (tests/e2e/t_story.sh) through the installed HAProxy
#      files (/usr/share/ratelimit-spoa/haproxy), and docs/integrate.md's
#      steps on them (tests/e2e/t_integrate.sh), and a JWKS rotation under
#      load with the installed ratelimit-jwks (tests/e2e/t_jwks.sh);
#   6. the Redis module package: installed where Debian's Redis loads
#      modules, not enabled in /etc/redis/redis.conf, loads into a
#      redis-server;
#   7. apt-get remove keeps the edited config; apt-get purge leaves nothing
#      the packages installed (dpkg -L before, ls after), nor the unit's
#      enablement.
#
# The packages are purged on exit, on failure too, and the system user is
# removed if it was not there before. It refuses to run when ratelimit-spoa
# is already installed (it would purge someone's install).
#
#   DEB_TEST_NO_BUILD=1   use the .debs already in build/deb and build/deb-prev
#   DEB_TEST_CHECK=1      run the unit tests in the package build too
# ok/fail/check/eq, free_port, wait_port, and start_redis with cleanup by PID.
# shellcheck source=../tests/lib.sh
. "$(dirname "$0")/../tests/lib.sh"
# Not -e: a failed check is counted and the test goes on (t_done tallies).
set -uo pipefail
cd "$ROOT" || exit 1

PKGS=(ratelimit-spoa ratelimit-spoa-bench ratelimit-spoa-redis-module
	ratelimit-spoa-dbgsym ratelimit-spoa-bench-dbgsym ratelimit-spoa-redis-module-dbgsym)
CONF=/etc/ratelimit-spoa/ratelimit-spoa.conf
SHARE=/usr/share/ratelimit-spoa
USER_NAME=ratelimit-spoa
MODULE_SO=/usr/lib/redis/modules/ratelimit.so

die() { echo "deb-test: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (it installs and purges the packages on this machine)"
installed() { dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -q ' installed$'; }
present() { dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -qv 'not-installed$'; }
for p in "${PKGS[@]}"; do
	! present "$p" || die "$p is on this machine already: deb-test installs and purges it; remove it first"
done
user_before=0
getent passwd "$USER_NAME" >/dev/null && user_before=1

export DEBIAN_FRONTEND=noninteractive
apt_install() { apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends "$@" </dev/null >"$T/apt.log" 2>&1 || { tail -n 30 "$T/apt.log"; return 1; }; }
purge_ours() {
	local left=() p
	for p in "${PKGS[@]}"; do present "$p" && left+=("$p"); done
	[ ${#left[@]} -eq 0 ] || apt-get purge -y -q -o DPkg::Lock::Timeout=300 "${left[@]}" </dev/null >>"$T/apt.log" 2>&1
}

t_setup
deb_cleanup() {
	local rc=$?
	purge_ours || echo "deb-test: purge failed (see $T/apt.log)" >&2
	if [ "$user_before" = 0 ] && getent passwd "$USER_NAME" >/dev/null; then
		userdel "$USER_NAME" 2>/dev/null || true
		getent group "$USER_NAME" >/dev/null && groupdel "$USER_NAME" 2>/dev/null
	fi
	t_cleanup
	exit $rc
}
trap deb_cleanup EXIT

# -- 1. build ---------------------------------------------------------------------------------------
ver=$(cat VERSION)
prev=$ver~debtest1
if [ "${DEB_TEST_NO_BUILD:-0}" != 1 ]; then
	start=$(date +%s)
	# nocheck: the unit tests (dh_auto_test: make test) run in make check,
	# before this in CI; here the packaging is under test (DEB_TEST_CHECK=1
	# runs them in the first build too).
	nocheck="${DEB_BUILD_OPTIONS:+$DEB_BUILD_OPTIONS }nocheck"
	[ "${DEB_TEST_CHECK:-0}" = 1 ] && first_opts=${DEB_BUILD_OPTIONS:-} || first_opts=$nocheck
	DEB_BUILD_OPTIONS=$first_opts tools/deb-build.sh build/deb "$ver" || die "make deb failed"
	DEB_BUILD_OPTIONS=$nocheck tools/deb-build.sh build/deb-prev "$prev" || die "the build of $prev failed"
	echo "# both builds took $(($(date +%s) - start))s"
fi
new_debs=(build/deb/*_"$ver"_*.deb)
prev_debs=(build/deb-prev/*_"${prev}"_*.deb)
check "built ratelimit-spoa $ver" test -f "build/deb/ratelimit-spoa_${ver}_$(dpkg --print-architecture).deb"
check "built ratelimit-spoa $prev (the build to upgrade from)" test -f "${prev_debs[0]}"
echo "# packages: $(printf '%s ' "${new_debs[@]##*/}")"
check "built ratelimit-spoa-redis-module $ver" \
	test -f "build/deb/ratelimit-spoa-redis-module_${ver}_$(dpkg --print-architecture).deb"

# -- 2. lintian --------------------------------------------------------------------------------------
for d in build/deb build/deb-prev; do
	lintian --fail-on error,warning -I -E --pedantic "$d"/*.changes >"$T/lintian.out" 2>&1
	rc=$?
	grep -v '^running with root privileges' "$T/lintian.out" | sed 's/^/#   /'
	eq "lintian $d: no error, no warning (any info, pedantic or experimental tag is printed above)" 0 "$rc"
done

# -- 3. install the previous build -------------------------------------------------------------------
apt_install ./build/deb-prev/*_"$prev"_*.deb || die "apt-get install ./build/deb-prev/*.deb failed"
eq "dpkg: ratelimit-spoa $prev installed" "$prev" "$(dpkg-query -W -f='${Version}' ratelimit-spoa)"
eq "the agent says $prev" "ratelimit-spoa $prev" "$(/usr/sbin/ratelimit-spoa --version | cut -d' ' -f1,2)"
uid=$(id -u "$USER_NAME" 2>/dev/null || echo none)
check "system user $USER_NAME (uid $uid, below 1000)" test "$uid" != none -a "${uid//none/99999}" -lt 1000
eq "$USER_NAME has no login shell" /usr/sbin/nologin "$(getent passwd "$USER_NAME" | cut -d: -f7)"
eq "$CONF is a conffile" 1 "$(dpkg-query -W -f='${Conffiles}\n' ratelimit-spoa | grep -c " $CONF ")"
unit=$(dpkg -L ratelimit-spoa | grep '/systemd/system/ratelimit-spoa.service$')
check "the unit: User=$USER_NAME" grep -qx "User=$USER_NAME" "$unit"
check "the unit: Group=$USER_NAME" grep -qx "Group=$USER_NAME" "$unit"
check "the unit: no DynamicUser" eval "! grep -q '^DynamicUser' '$unit'"
# shellcheck disable=SC2016 # the unit's own ${CONFIG}
check "the unit: ExecStart is /usr/sbin/ratelimit-spoa with $CONF" \
	grep -qx 'ExecStart=/usr/sbin/ratelimit-spoa -f ${CONFIG}' "$unit"
check "the unit is enabled (deb-systemd-helper: multi-user.target.wants)" \
	test -L /etc/systemd/system/multi-user.target.wants/ratelimit-spoa.service
check "nothing started: no process runs as $USER_NAME" eval "! pgrep -u '$USER_NAME' >/dev/null"
if command -v systemd-analyze >/dev/null; then
	out=$(systemd-analyze verify "$unit" 2>&1); rc=$?
	eq "systemd-analyze verify $unit: clean ($out)" "0:" "$rc:$out"
else
	echo "# skipped systemd-analyze verify: not installed"
fi
for page in ratelimit-spoa.8 ratelimit-jwks.8 spoa-bench.1; do
	f=$(dpkg -L ratelimit-spoa ratelimit-spoa-bench | grep "/man/man./$page.gz$" || true)
	out=$(zcat "$f" 2>&1 | groff -man -Tutf8 -ww -z 2>&1); rc=$?
	eq "man page $page: installed, groff -ww clean" "0:" "$rc:$out"
done
check "the man page names the installed HAProxy files" zgrep -qE '/usr/share/ratelimit(\\)?-spoa/haproxy/' \
	/usr/share/man/man8/ratelimit-spoa.8.gz
missing=()
for f in $(zcat /usr/share/man/man8/ratelimit-spoa.8.gz | grep -oE '/(usr|etc)/[A-Za-z0-9_./\\-]+' |
	sed 's/\\-/-/g; s/[.]$//' | sort -u); do
	[ -e "$f" ] || missing+=("$f")
done
eq "every path ratelimit-spoa(8) names is installed" "" "${missing[*]:-}"
for f in haproxy.cfg ratelimit-block.cfg ratelimit-edge.cfg ratelimit-frontend.cfg ratelimit-agent.cfg spoe-ratelimit.conf routes.map apikeys.map \
	backend.cfg errors/401.json errors/429.json errors/503.json; do
	check "installed $SHARE/haproxy/$f" test -f "$SHARE/haproxy/$f"
done
for f in grafana/ratelimit-spoa.json prometheus/ratelimit-spoa.rules.yml sliding_window.lua; do
	check "installed $SHARE/$f" test -f "$SHARE/$f"
done
# ratelimit-jwks: the command, its settings (a conffile), its service and
# timer (installed, neither enabled nor started: it needs the IdP's URL).
eq "/etc/ratelimit-spoa/ratelimit-jwks.conf is a conffile" 1 \
	"$(dpkg-query -W -f='${Conffiles}\n' ratelimit-spoa | grep -c ' /etc/ratelimit-spoa/ratelimit-jwks.conf ')"
for u in ratelimit-jwks.service ratelimit-jwks.timer; do
	jf=$(dpkg -L ratelimit-spoa | grep "/systemd/system/$u$")
	check "installed $u" test -n "$jf"
	if [ -n "$jf" ] && command -v systemd-analyze >/dev/null; then
		out=$(systemd-analyze verify "$jf" 2>&1); rc=$?
		eq "systemd-analyze verify $jf: clean ($out)" "0:" "$rc:$out"
	fi
done
check "ratelimit-jwks.timer is not enabled on install" test ! -e /etc/systemd/system/timers.target.wants/ratelimit-jwks.timer
check "ratelimit-jwks.service runs /usr/sbin/ratelimit-jwks" \
	grep -q '^ExecStart=/usr/sbin/ratelimit-jwks ' /lib/systemd/system/ratelimit-jwks.service
"$ROOT/tools/jwt.sh" keygen "$T/jwks-key" >/dev/null
python3 - "$T/jwks-key/jwt-public.pem" > "$T/jwks.json" <<'PY'
import base64, json, sys
from cryptography.hazmat.primitives import serialization
n = serialization.load_pem_public_key(open(sys.argv[1], "rb").read()).public_numbers()
b = lambda i: base64.urlsafe_b64encode(i.to_bytes((i.bit_length() + 7) // 8, "big")).rstrip(b"=").decode()
print(json.dumps({"keys": [{"kty": "RSA", "kid": "deb-1", "use": "sig", "n": b(n.n), "e": b(n.e)}]}))
PY
out=$(/usr/sbin/ratelimit-jwks --source "$T/jwks.json" --dir "$T/jwks-out" --reload-cmd '' 2>&1); rc=$?
eq "the installed ratelimit-jwks turns a JWKS into the kid map: $out" "0 deb-1 RS256" \
	"$rc $(grep -v '^#' "$T/jwks-out/kid.map" 2>/dev/null | grep '^deb-1 ' | cut -d' ' -f1,2)"
check "... and its key file is the JWK's key" cmp -s <(openssl pkey -pubin -in "$T/jwks-key/jwt-public.pem" -outform DER) \
	<(openssl pkey -pubin -in "$(grep '^deb-1 ' "$T/jwks-out/kid.map" | cut -d' ' -f3)" -outform DER)

out=$(/usr/sbin/ratelimit-spoa -c -f "$CONF" 2>&1); rc=$?
eq "the installed agent accepts its shipped config (-c): $out" 0 "$rc"
out=$(/usr/sbin/ratelimit-spoa -c -f "$CONF" --routes "$SHARE/haproxy/routes.map" 2>&1); rc=$?
eq "... and the shipped routes map names only its policies (--routes): $out" 0 "$rc"

# -- 4. an operator edits the conffile; upgrade ----------------------------------------------------
sed -i 's/^redis-timeout .*/redis-timeout 1s/' "$CONF"
echo "# deb-test: edited by the operator" >> "$CONF"
edited=$(md5sum < "$CONF")
apt_install ./build/deb/*_"$ver"_*.deb || die "apt-get install ./build/deb/*.deb (the upgrade) failed"
eq "dpkg: upgraded to $ver" "$ver" "$(dpkg-query -W -f='${Version}' ratelimit-spoa)"
eq "the agent says $ver" "ratelimit-spoa $ver" "$(/usr/sbin/ratelimit-spoa --version | cut -d' ' -f1,2)"
eq "upgrade kept the edited conffile" "$edited" "$(md5sum < "$CONF")"
check "upgrade asked nothing and left no .dpkg-* beside it" \
	eval "! ls /etc/ratelimit-spoa/*.dpkg-* >/dev/null 2>&1 && ! grep -q 'Configuration file' '$T/apt.log'"
check "the unit is still enabled" test -L /etc/systemd/system/multi-user.target.wants/ratelimit-spoa.service
check "still nothing started" eval "! pgrep -u '$USER_NAME' >/dev/null"

# -- 5. the installed agent, with the installed config and HAProxy files ---------------------------
# start_agent (tests/lib.sh) runs $AGENT -f <its generated file>; this runs
# the package's agent as the package's user on the installed config instead,
# taking only the listen and redis lines of that file, as flags.
cat > "$T/installed-agent" <<EOF
#!/bin/sh
# ratelimit-spoa as the package runs it: /usr/sbin, $CONF, user $USER_NAME.
[ "\$1" = -f ] || exit 64
listen=\$(sed -n 's/^listen //p' "\$2"); redis=\$(sed -n 's/^redis //p' "\$2"); shift 2
exec setpriv --reuid=$USER_NAME --regid=$USER_NAME --init-groups -- \\
	/usr/sbin/ratelimit-spoa -f $CONF --listen "\$listen" --redis "\$redis" "\$@"
EOF
chmod 755 "$T/installed-agent"

start_redis
AGENT=$T/installed-agent start_agent "" || fail "the installed agent started"
eq "the agent runs as $USER_NAME" "$USER_NAME" "$(ps -o user= -p "$AGENT_PID" | tr -d ' ')"
# decide POLICY N: N decisions for one account on one connection, back to back.
decide() {
	python3 tests/spop.py --port "$AGENT_PORT" --count "$2" policy="$1" key=jwt:ACC-DEB cost=1 |
		sed -n 's/^status=//p' | xargs
}
eq "SPOP: policy transfer 3/1s of the installed config: 3 allow, then deny" "allow allow allow deny" \
	"$(decide transfer 4)"
eq "SPOP: policy exports 2/1s 5/1h of the installed config" "allow" "$(decide exports 1)"
eq "the decision is in Redis under the installed policy's key" 1 \
	"$(rcli --scan --pattern 'exports:limit:v1:*ACC-DEB*' | grep -c ':1h$')"
stop_agent; stop_redis

out=$(AGENT=$T/installed-agent HAPROXY_FILES=$SHARE/haproxy timeout 300 bash tests/e2e/t_story.sh 2>&1); rc=$?
echo "$out" | grep -E '^(not ok|# t_story)' | sed 's/^/#   /'
eq "the story, with the installed agent, config and HAProxy files (t_story.sh: $(echo "$out" | grep -c '^ok') checks)" \
	0 "$rc"
[ $rc = 0 ] || echo "$out" | tail -n 40 | sed 's/^/#   /'
# docs/integrate.md's steps (tests/e2e/t_integrate.sh) with the installed
# block, agent backend, SPOE file and errors, and the installed agent.
out=$(AGENT=/usr/sbin/ratelimit-spoa HAPROXY_FILES=$SHARE/haproxy timeout 300 bash tests/e2e/t_integrate.sh 2>&1); rc=$?
echo "$out" | grep -E '^(not ok|# t_integrate)' | sed 's/^/#   /'
eq "integrate.md's steps with the installed HAProxy files and agent (t_integrate.sh: $(echo "$out" | grep -c '^ok') checks)" \
	0 "$rc"
[ $rc = 0 ] || echo "$out" | tail -n 40 | sed 's/^/#   /'

# The installed ratelimit-edge.cfg and ratelimit-frontend.cfg, loaded as
# integrate.md's step 2 says (tests/e2e/t_edge_snippet.sh).
out=$(AGENT=/usr/sbin/ratelimit-spoa HAPROXY_FILES=$SHARE/haproxy timeout 300 bash tests/e2e/t_edge_snippet.sh 2>&1); rc=$?
echo "$out" | grep -E '^(not ok|# t_edge_snippet)' | sed 's/^/#   /'
eq "the installed edge file and frontend lines (t_edge_snippet.sh: $(echo "$out" | grep -c '^ok') checks)" \
	0 "$rc"
[ $rc = 0 ] || echo "$out" | tail -n 40 | sed 's/^/#   /'

# JWKS rotation under load (tests/e2e/t_jwks.sh) with the installed
# ratelimit-jwks, block and agent (on the test's own policies: the load
# must not meet the shipped transfer 3/1s).
out=$(AGENT=/usr/sbin/ratelimit-spoa HAPROXY_FILES=$SHARE/haproxy RATELIMIT_JWKS=/usr/sbin/ratelimit-jwks \
	timeout 300 bash tests/e2e/t_jwks.sh 2>&1); rc=$?
echo "$out" | grep -E '^(not ok|# t_jwks|# [0-9]+ requests)' | sed 's/^/#   /'
eq "JWKS rotation under load with the installed ratelimit-jwks (t_jwks.sh: $(echo "$out" | grep -c '^ok') checks)" \
	0 "$rc"
[ $rc = 0 ] || echo "$out" | tail -n 40 | sed 's/^/#   /'

# -- 6. the Redis module ---------------------------------------------------------------------------
if installed ratelimit-spoa-redis-module; then
	check "module installed as $MODULE_SO" test -f "$MODULE_SO"
	check "module not enabled behind the operator's back (no loadmodule in /etc/redis)" \
		eval "! grep -rqs '^[[:space:]]*loadmodule.*ratelimit' /etc/redis"
	check "README.Debian gives the loadmodule line" \
		zgrep -qs "loadmodule $MODULE_SO" /usr/share/doc/ratelimit-spoa-redis-module/README.Debian*
	rp=$(free_port)
	redis-server --port "$rp" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
		--logfile "$T/redis-module.log" --loadmodule "$MODULE_SO" &
	t_track $!
	if wait_port "$rp"; then
		check "redis-server --loadmodule $MODULE_SO: MODULE LIST has ratelimit" \
			eval "redis-cli -p $rp MODULE LIST | grep -qx ratelimit"
		check "... and the command RATELIMIT.DECIDE" \
			eval "redis-cli -p $rp COMMAND INFO ratelimit.decide | grep -qx ratelimit.decide"
		# The installed agent, with the installed config (redis-engine as
		# shipped), on that Redis: it decides with the module.
		seen=$(wc -l < "$T/agent.log")
		unset AGENT_PORT
		REDIS_PORT=$rp AGENT=$T/installed-agent start_agent "" || fail "the installed agent started (module)"
		eq "SPOP on the module's Redis: 3 allow, then deny" "allow allow allow deny" "$(decide transfer 4)"
		check "the agent decides with the module (redis_connected engine=module)" \
			eval "tail -n +$((seen + 1)) '$T/agent.log' | grep -q 'event=redis_connected .*engine=module'"
		stop_agent
	else
		fail "redis-server --loadmodule $MODULE_SO started ($(tail -n 3 "$T/redis-module.log"))"
	fi
fi

# -- 7. purge --------------------------------------------------------------------------------------
ours=()
for p in "${PKGS[@]}"; do installed "$p" && ours+=("$p"); done
dpkg -L "${ours[@]}" | sort -u > "$T/listed"
apt-get remove -y -q -o DPkg::Lock::Timeout=300 "${ours[@]}" </dev/null >>"$T/apt.log" 2>&1 ||
	fail "apt-get remove ${ours[*]}"
check "remove: the agent is gone" test ! -e /usr/sbin/ratelimit-spoa
check "remove: the operator's config stays (until purge)" grep -q '^# deb-test: edited by the operator' "$CONF"
# (apt knows no more of a removed package that had no conffiles: only the
# ones dpkg still holds, in state config-files, are purged)
rc_pkgs=()
for p in "${ours[@]}"; do present "$p" && rc_pkgs+=("$p"); done
eq "remove: only ratelimit-spoa keeps files until purge (its config)" ratelimit-spoa "${rc_pkgs[*]:-}"
apt-get purge -y -q -o DPkg::Lock::Timeout=300 "${rc_pkgs[@]}" </dev/null >>"$T/apt.log" 2>&1 ||
	fail "apt-get purge ${rc_pkgs[*]}"
left=()
while IFS= read -r f; do
	[ -e "$f" ] || [ -L "$f" ] || continue
	# A directory that another package also holds (/usr/share/doc, ...) stays.
	[ -d "$f" ] && { [ "$f" = /. ] || dpkg -S "$f" >/dev/null 2>&1; } && continue
	left+=("$f")
done < "$T/listed"
eq "purge: none of the $(wc -l < "$T/listed") paths the packages listed is left (dpkg -L before, ls after)" "" \
	"${left[*]:-}"
check "purge: $CONF's directory is gone" test ! -e /etc/ratelimit-spoa
check "purge: the unit's enablement is gone" eval \
	"! ls /etc/systemd/system/*/ratelimit-spoa.service /var/lib/systemd/deb-systemd-helper-enabled/*ratelimit-spoa* >/dev/null 2>&1"
for p in "${PKGS[@]}"; do
	check "purge: dpkg forgot $p" eval "! present $p"
done
# Debian keeps system users on purge (files elsewhere may still be owned by
# the uid); this test removes it when it made it (deb_cleanup).
check "purge kept the system user $USER_NAME (Debian practice; README.Debian says how to remove it)" \
	getent passwd "$USER_NAME"
t_done
