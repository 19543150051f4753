#!/usr/bin/env bash
# Install the Debian packages of one group that are missing, saying which
# and why. Idempotent: prints nothing and touches nothing when everything
# is there.
#
#   tools/deps.sh GROUP PACKAGE...     GROUP: demo or tests (the Makefile's
#                                      DEMO_PKGS and TEST_PKGS), haproxy32
#                                      (tools/haproxy-build.sh), tls
#                                      (TLS_PKGS: make WITH_TLS=1), module
#                                      (MODULE_PKGS: make module, and Redis 8 /
#                                      Valkey 9 from source for its tests) or deb
#                                      (DEBBUILD_PKGS, DEBTEST_PKGS: make deb,
#                                      make deb-test)
#
# DEPS_DRY_RUN=1 prints what would be installed and installs nothing.
set -euo pipefail
group=${1:?usage: tools/deps.sh demo|tests|haproxy32|tls|module|deb PACKAGE...}
shift
case $group in
demo)  purpose="to build the agent and run the demo (make demo, make up)" ;;
tests) purpose="for the tests and tools (make check, bench, fuzz, chaos, valgrind, lint)" ;;
haproxy32) purpose="to get HAProxy 3.2 from Debian's archive (make haproxy32, make e2e-3.2)" ;;
tls)   purpose="to build the agent with TLS to Redis (make WITH_TLS=1)" ;;
module) purpose="to build the Redis module and the newer servers it is tested on (make module)" ;;
deb)   purpose="to build and check the Debian packages (make deb, make deb-test)" ;;
*) echo "deps: unknown group '$group' (demo, tests, haproxy32, tls, module or deb)" >&2; exit 2 ;;
esac

# why PACKAGE: what the package is for, one line.
why() {
	case $1 in
	build-essential) echo "the C compiler and make" ;;
	pkg-config)      echo "library flags for the build" ;;
	libev-dev)       echo "the agent's event loop (libev)" ;;
	libhiredis-dev)  echo "the agent's Redis client (hiredis)" ;;
	redis-server)    echo "the Redis the demo and the tests start" ;;
	redis-tools)     echo "redis-cli, to look at the counters" ;;
	haproxy)         echo "the two edge HAProxies and the backend" ;;
	curl)            echo "the demo's HTTP requests" ;;
	openssl)         echo "signs the demo's JWTs (tools/jwt.sh)" ;;
	python3)         echo "free ports; the tests' SPOP client" ;;
	jq)              echo "reads the demo's response headers" ;;
	libcmocka-dev)   echo "unit tests (make test)" ;;
	wrk)             echo "HTTP load for make bench" ;;
	gnuplot-nox)     echo "make bench's graphs" ;;
	python3-cryptography) echo "make bench signs 10,000 JWTs in one process; tools/ratelimit-jwks (JWK -> PEM) and its tests" ;;
	python3-yaml)    echo "the e2e check of compose.yaml" ;;
	python3-grpcio)  echo "tests/e2e/t_grpc.sh: a real gRPC client and server through the edge" ;;
	valgrind)        echo "make valgrind; make bench (i) counts Redis instructions with callgrind" ;;
	cppcheck)        echo "make lint" ;;
	clang-tidy)      echo "make lint" ;;
	clang)           echo "make fuzz (libFuzzer)" ;;
	systemd)         echo "systemd-analyze verify of the shipped unit (tests)" ;;
	redis-sentinel)  echo "the Sentinel failover tests" ;;
	groff-base)      echo "the man page check (tests)" ;;
	prometheus)      echo "promtool for the alert rules, a real Prometheus for the dashboard (tests)" ;;
	debhelper)       echo "builds the Debian packages (make deb: debian/rules, compat 13)" ;;
	help2man)        echo "spoa-bench(1) from its --help (make deb)" ;;
	lintian)         echo "checks the Debian packages (make deb-test)" ;;
	dpkg-dev)        echo "unpacks Debian's source packages (haproxy 3.2, hiredis 1.x for TLS, redismodule.h, Redis 8, Valkey 9); dpkg-buildpackage (make deb)" ;;
	patchelf)        echo "runs sid's HAProxy 3.2 .deb with sid's own ld.so and libraries" ;;
	libssl-dev)      echo "OpenSSL: HAProxy 3.2 (TLS, jwt_verify), the agent's TLS (hiredis_ssl)" ;;
	libpcre2-dev)    echo "HAProxy 3.2 with PCRE2" ;;
	liblua5.4-dev)   echo "HAProxy 3.2 with Lua" ;;
	zlib1g-dev)      echo "HAProxy 3.2 with zlib" ;;
	*)               echo "" ;;
	esac
}

missing=()
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
verb=installing
[ "${DEPS_DRY_RUN:-0}" = 1 ] && verb="would install"
echo "deps ($group): $verb ${missing[*]} — $purpose"
for p in "${missing[@]}"; do
	printf '  %-16s %s\n' "$p" "$(why "$p")"
done
[ "${DEPS_DRY_RUN:-0}" = 1 ] && exit 0
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's packages may start their own services on install; the project
# starts its own instances on ephemeral ports and never relies on these.
