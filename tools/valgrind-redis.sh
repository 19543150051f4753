#!/usr/bin/env bash
# redis-server under valgrind (memcheck), for make valgrind-module: the
# tests start it as their REDIS_SERVER, with the module loaded.
#
#   VALGRIND_REDIS_SERVER=build/redis-8/redis-server \
#   VALGRIND_LOG_DIR=build/valgrind-module tools/valgrind-redis.sh ARGS...
#
# The server should be built on libc's malloc (MALLOC=libc
# tools/redis-server-build.sh): jemalloc's arenas hide heap errors from
# memcheck. Each process writes $VALGRIND_LOG_DIR/vg.<pid>; make
# valgrind-module fails on any error, or on a block definitely lost from
# the module.
set -euo pipefail
: "${VALGRIND_REDIS_SERVER:?the redis-server to run}"
: "${VALGRIND_LOG_DIR:?where the logs go}"
mkdir -p "$VALGRIND_LOG_DIR"
exec valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --show-leak-kinds=definite \
	--suppressions="$(dirname "$0")/../tests/valgrind-redis.supp" \
	--errors-for-leak-kinds=none --num-callers=30 --log-file="$VALGRIND_LOG_DIR/vg.%p" \
	"$VALGRIND_REDIS_SERVER" "$@"
