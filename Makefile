# ratelimit-spoa - a global rate limiter for HAProxy (SPOP agent, libev + hiredis + Redis)
# Every target:
#
#   make / make all build spoa/ratelimit-spoa (the agent), bench/spoa-bench
#                   (the load generator that plays HAProxy) and bench/spoa-floor
#                   (make bench's SPOE floor; never installed)
#   make demo       the two-HAProxy story end to end on loopback (installs what it needs)
#   make up / down  keep the demo stack running / stop it
#   make check      everything: deps, build, unit tests, integration and end-to-end tests
#   make test       unit tests only (cmocka; no network: test_limiter talks to
#                   a scripted fake Redis on loopback inside its own process)
#   make integration  the integration tests (tests/integration: real redis-server,
#                   haproxy; TESTS="tests/integration/t_x.py" runs some)
#   make e2e        the end-to-end tests (tests/e2e) on HAPROXY=, else Debian's 2.6
#   make haproxy32  HAProxy 3.2 from Debian's archive into build/ (once): built from its
#                   source package, else sid's binary package with its own libraries
#   make e2e-3.2    the end-to-end tests on that HAProxy 3.2
#   make haproxy30  HAProxy 3.0 LTS the same way, from trixie (build/haproxy-3.0)
#   make e2e-3.0    the end-to-end tests on that HAProxy 3.0
#   make sanitize   unit + integration tests under ASan + UBSan
#   make tsan       integration tests (TSAN_TESTS) under ThreadSanitizer, 4 threads
#   make valgrind   unit tests under valgrind
#   make lint       cppcheck + clang-tidy on spoa/ and bench/; no circle among the
#                   agent's files and docs/architecture.md's call lists true,
#                   each folder calling only what its row allows
#                   (tools/check-calls.py on the built objects and the includes)
#   make bench      load figures into docs/benchmarks.md
#   make fuzz       libFuzzer harnesses (FUZZ_SECONDS=60 each; the corpus grows in
#                   build/fuzz, tools/fuzz.sh says how to merge it back)
#   make chaos      fault injection under load (Redis/agent kill -9, SIGSTOP, reload; limits)
#   make install    PREFIX=/usr/local DESTDIR= (binary, the Redis module, config, systemd unit,
#                   man page, HAProxy examples)
#   make uninstall  removes what install put, but the config
#   make deb        Debian packages into build/deb/ (debian/, dpkg-buildpackage;
#                   installs its build tools); make deb-test builds, lintians,
#                   installs, runs, upgrades and purges them (as root)
#   make deps       apt-get the Debian packages that are missing
#   make deps-demo  only what make demo / make up need
#   make print-demo-pkgs / print-deb-pkgs  the package lists, one line each
#   make module     module/ratelimit.so: RATELIMIT.DECIDE, the script's decision as a Redis
#                   module (redismodule.h from Debian's redis source package, into build/)
#   make check-module  the module's integration tests (tests/integration/t_module*)
#   make check-module-servers  the same on Redis 8.0 and Valkey 9 built from Debian sid's
#                   source packages (cached under build/; ~4 min each the first time)
#   make valgrind-module  the module's tests with redis-server under valgrind
#   make integration-module  the integration suite with every agent on redis-engine module
#   make module-coverage  gcov of the module under its tests (build/cov/*.gcov)
#   make clean
#   make help       this text
#   make WITH_TLS=1 the same agent with TLS to Redis (rediss://): needs hiredis
#                   >= 1.1 with hiredis_ssl; on Debian 12 (hiredis 0.14) Debian's
#                   own hiredis 1.x source package is built into build/hiredis
#                   (tools/hiredis-build.sh) and linked statically
#   make check-tls  WITH_TLS=1: build, unit tests and the TLS integration tests
#   make integration-tls  the TLS integration tests alone (make WITH_TLS=1 integration-tls)
#
# Knobs: WERROR=0, SANITIZE=address,undefined, V=1, O=-O2, WITH_TLS=1
.DEFAULT_GOAL := all
SHELL := /bin/bash

CC       ?= cc
O        ?= -O2
WERROR   ?= 1
VERSION  := $(shell cat VERSION 2>/dev/null || echo 0.0.0)
PREFIX   ?= /usr/local
DESTDIR  ?=

WARN := -Wall -Wextra -Wstrict-prototypes -Wmissing-prototypes -Wwrite-strings \
        -Wshadow -Wpointer-arith -Wcast-align -Wformat=2 -Wvla -Wundef \
        -Wnull-dereference -Wdouble-promotion
ifeq ($(WERROR),1)
WARN += -Werror
endif

# hiredis: the system's (0.14 on Debian 12, 1.x elsewhere, found by
# pkg-config); with WITH_TLS=1 one with hiredis_ssl, built from Debian's
# source package when the system's has none.
PKG_CONFIG ?= pkg-config
WITH_TLS   ?= 0
HIREDIS_SYS_SSL     := $(shell $(PKG_CONFIG) --exists 'hiredis >= 1.1' hiredis_ssl 2>/dev/null && echo yes)
HIREDIS_LOCAL       := build/hiredis
ifeq ($(WITH_TLS),1)
ifeq ($(HIREDIS_SYS_SSL),yes)
HIREDIS_CFLAGS := -I$(shell $(PKG_CONFIG) --variable=includedir hiredis) -DSPOA_TLS=1
HIREDIS_LIBS   := $(shell $(PKG_CONFIG) --libs hiredis_ssl hiredis) -lssl -lcrypto
HIREDIS_DEP    :=
else
HIREDIS_CFLAGS := -I$(HIREDIS_LOCAL)/include -DSPOA_TLS=1
HIREDIS_LIBS   := $(HIREDIS_LOCAL)/lib/libhiredis_ssl.a $(HIREDIS_LOCAL)/lib/libhiredis.a -lssl -lcrypto
HIREDIS_DEP    := $(HIREDIS_LOCAL)/.done
endif
else
# (no pkg-config --cflags: its -I.../hiredis would put hiredis's net.h,
# read.h, ... ahead of ours; the sources include <hiredis/...>)
HIREDIS_CFLAGS :=
HIREDIS_LIBS   := -lhiredis
HIREDIS_DEP    :=
endif

CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -g $(O) $(WARN) -MMD -MP -pthread \
               -DSPOA_VERSION='"$(VERSION)"' -fno-strict-aliasing $(HIREDIS_CFLAGS)
ifeq ($(WITH_TLS),1)
BUILD_SUFFIX := -tls
endif
ifneq ($(SANITIZE),)
CFLAGS_BASE += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
LDFLAGS_SAN := -fsanitize=$(SANITIZE)
BUILD ?= build/san$(BUILD_SUFFIX)
else
BUILD ?= build/rel$(BUILD_SUFFIX)
endif
# CPPFLAGS and LDFLAGS as the environment gives them (dpkg-buildflags in
# make deb: _FORTIFY_SOURCE, relro, bindnow).
CFLAGS   ?=
CPPFLAGS ?=
LDFLAGS  ?=
ALL_CFLAGS := $(CFLAGS_BASE) $(CFLAGS)
LDLIBS_AGENT := -lev $(HIREDIS_LIBS) -lm -pthread
LDLIBS_TEST  := -lcmocka -lm
# A unit test links hiredis only with a module that uses it (the pure ones
# read plain values: struct window_reply, struct cluster_view).
HIREDIS_MODULES := redis_sync ctl ctl_pool ctl_leases ctl_io live_control denied_flush live_pools limiter limiter_lease limiter_call limiter_reply limiter_batch limiter_engine_script limiter_engine_module limiter_health limiter_link limiter_sentinel limiter_cluster redis_reply

ifeq ($(V),1)
Q :=
else
Q := @
endif

SPOA_MODULES := spop spop_write spop_hdrs window window_args stored headers config config_check config_lex config_routes log metrics proc conn conn_notify conn_ack worker http net \
                limiter limiter_lease limiter_call limiter_reply limiter_verdict limiter_batch limiter_engine_script limiter_engine_module limiter_health limiter_link limiter_sentinel limiter_cluster deny_cache cluster redis_url
SPOA_MODULES += resolve
SPOA_MODULES += redis_tls
SPOA_MODULES += redis_open
SPOA_MODULES += resp_cmd
SPOA_MODULES += redis_reply
SPOA_MODULES += live_rule ctl_args ctl_keys redis_sync ctl ctl_pool ctl_leases ctl_io live denied live_control denied_flush live_pools
SPOA_MODULES += config_directives config_policy
SPOA_MODULES += reload worker_reload
# The agent's folders (spoa/<folder>/README.md says what each owns and may
# call; tools/check-calls.py --folders holds the code to it). A module is
# named by its file's stem; obj_of maps stems to objects wherever they live.
SPOA_DIRS    := spoa spoa/conn spoa/ctl spoa/live spoa/limiter spoa/config spoa/redis spoa/obs spoa/spop spoa/core
# module/rl_args.[ch], the module's pure half, is linked into the agent too
# (a unit test's .deps names it rl_args; test_bench_frame's names the load
# generator's bench_frame)
SPOA_INC     := $(addprefix -I,$(SPOA_DIRS)) -Imodule
SPOA_SRCS    := $(foreach d,$(SPOA_DIRS),$(wildcard $(d)/*.c))
obj_of        = $(foreach m,$(1),$(BUILD)/$(patsubst %.c,%.o,$(filter %/$(m).c,$(SPOA_SRCS) module/rl_args.c bench/bench_frame.c)))
AGENT_OBJS   := $(call obj_of,$(SPOA_MODULES))
# stored.c reads what the engines store with the module's own parsers
AGENT_OBJS   += $(BUILD)/module/rl_args.o
MAIN_OBJ     := $(BUILD)/spoa/main.o
# the load generator (bench/bench.h says which file does what)
BENCH_SRCS   := bench/spoa-bench.c bench/bench_args.c bench/bench_thread.c bench/bench_conn.c \
                bench/bench_frame.c bench/bench_report.c
BENCH_OBJ    := $(patsubst %.c,$(BUILD)/%.o,$(BENCH_SRCS))
# make bench's SPOE floor (bench/spoa-floor.c): built, never installed.
FLOOR_OBJ    := $(BUILD)/bench/spoa-floor.o
# make bench preloads it into the agent to count allocations per request.
MCOUNT       := $(BUILD)/bench/mcount.so

AGENT := spoa/ratelimit-spoa
BENCH := bench/spoa-bench
FLOOR := bench/spoa-floor
ifneq ($(SANITIZE),)
AGENT := $(BUILD)/ratelimit-spoa
BENCH := $(BUILD)/spoa-bench
FLOOR := $(BUILD)/spoa-floor
endif

UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))

# Debian packages, in two groups (tools/deps.sh says why each is there):
# what the demo needs to build the agent and run (make demo, make up), and
# what the tests and tools add (make check, bench, fuzz, chaos, valgrind,
# lint). make deps installs both.
DEMO_PKGS := build-essential pkg-config libev-dev libhiredis-dev \
             redis-server redis-tools haproxy curl openssl python3 jq dpkg-dev
TEST_PKGS := libcmocka-dev wrk gnuplot-nox python3-cryptography python3-yaml python3-grpcio valgrind cppcheck clang clang-tidy \
             systemd redis-sentinel groff-base prometheus patchelf
DEB_PKGS  := $(DEMO_PKGS) $(TEST_PKGS)
# make WITH_TLS=1 builds hiredis 1.x from Debian's source package against
# Debian 12's OpenSSL (tools/hiredis-build.sh).
TLS_PKGS  := libssl-dev dpkg-dev
ifeq ($(WITH_TLS),1)
DEB_PKGS  += $(TLS_PKGS)
endif
# make deb: debian/control's Build-Depends and the packaging tools
# (tools/deb-build.sh); make deb-test adds lintian and what it runs the
# installed packages with (tools/deb-test.sh).
DEBBUILD_PKGS := build-essential pkg-config libev-dev libhiredis-dev libcmocka-dev \
                 debhelper dpkg-dev help2man
DEBTEST_PKGS  := lintian redis-server redis-tools haproxy curl openssl python3 jq systemd

.PHONY: check-tls integration-tls module check-module check-module-servers valgrind-module integration-module \
        module-coverage
.PHONY: all test check integration e2e e2e-3.2 haproxy32 e2e-3.0 haproxy30 chaos sanitize tsan valgrind lint bench fuzz install \
        uninstall demo up down deps deps-demo print-demo-pkgs print-deb-pkgs clean help deb deb-test

all: $(AGENT) $(BENCH) $(FLOOR)

help:
	@awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' Makefile

$(BUILD)/%.o: %.c | $(HIREDIS_DEP)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) $(SPOA_INC) -c $< -o $@

# SPOA_VERSION comes from VERSION: a new number rebuilds what prints it.
$(MAIN_OBJ) $(BENCH_OBJ): VERSION

# The agent carries its Lua script: no file to lose at install time.
$(BUILD)/spoa/script.c: lua/sliding_window.lua tools/embed.sh
	@mkdir -p $(dir $@)
	$(Q)tools/embed.sh spoa_script $< > $@

$(BUILD)/spoa/script.o: $(BUILD)/spoa/script.c
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -Wno-missing-prototypes -c $< -o $@

# spoa/ratelimit-spoa is the same file with or without TLS: relinked when
# the flavour (the object directory) changes.
FLAVOUR := build/.flavour$(if $(SANITIZE),-san)
$(shell mkdir -p build; echo '$(BUILD)' | cmp -s - $(FLAVOUR) || echo '$(BUILD)' > $(FLAVOUR))

$(AGENT): $(AGENT_OBJS) $(MAIN_OBJ) $(BUILD)/spoa/script.o $(FLAVOUR)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS_SAN) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS_AGENT)

$(BENCH): $(BENCH_OBJ) $(call obj_of,spop spop_write)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS_SAN) $(LDFLAGS) -o $@ $^ -lev -lm -pthread

$(FLOOR): $(FLOOR_OBJ) $(call obj_of,spop spop_write)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS_SAN) $(LDFLAGS) -o $@ $^ -lev

$(MCOUNT): bench/mcount.c
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  CC      $<")
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE -O2 $(WARN) -Wno-missing-prototypes \
		-shared -fPIC -o $@ $< -ldl

# The Redis module (module/): built against redismodule.h from Debian's
# redis source package, fetched into build/ at build time (never committed).
# ratelimit-test.so is the same code with the test clock (tests only).
MODULE_H      := build/redismodule/redismodule.h
MODULE_SO     := module/ratelimit.so
MODULE_TEST_SO := module/ratelimit-test.so
MODULE_SRCS   := module/ratelimit.c module/rl_log.c module/rl_gcra.c module/rl_pool.c module/rl_lease.c module/rl_quota.c module/rl_settle.c module/rl_args.c
MODULE_CFLAGS := -std=c11 -D_GNU_SOURCE -g $(O) $(WARN) -fPIC -fvisibility=hidden \
                 -isystem build/redismodule -Imodule -DRL_PRODUCT_VERSION='"$(VERSION)"'
MODULE_TESTS  := tests/integration/t_module.py tests/integration/t_module_diff.py \
                 tests/integration/t_module_cluster.py tests/integration/t_module_agents.py \
                 tests/integration/t_module_failalloc.py tests/integration/t_contract.py \
                 tests/integration/t_module_version.py tests/integration/t_gcra_agents.py \
                 tests/integration/t_pool.py

module: $(MODULE_SO) $(MODULE_TEST_SO)

$(MODULE_H): tools/redismodule-header.sh
	$(Q)tools/redismodule-header.sh build/redismodule

$(MODULE_SO): $(MODULE_SRCS) module/rl_args.h module/rl_module.h $(MODULE_H) VERSION
	$(if $(Q),@echo "  CC      $@")
	$(Q)$(CC) $(CPPFLAGS) $(MODULE_CFLAGS) $(CFLAGS) $(LDFLAGS) -shared -o $@ $(MODULE_SRCS)

$(MODULE_TEST_SO): $(MODULE_SRCS) module/rl_args.h module/rl_module.h $(MODULE_H) VERSION
	$(if $(Q),@echo "  CC      $@")
	$(Q)$(CC) $(CPPFLAGS) $(MODULE_CFLAGS) $(CFLAGS) $(LDFLAGS) -DRATELIMIT_TEST_CLOCK -shared -o $@ $(MODULE_SRCS)

# A unit test links only the modules its tests/unit/<name>.deps lists
# (pure ones: no sockets; test_limiter links the limiter and its fake Redis).
.SECONDEXPANSION:
$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $$(call obj_of,$$(shell cat tests/unit/$$*.deps))
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS_SAN) -o $@ $^ $(LDLIBS_TEST) \
		$(if $(filter $(HIREDIS_MODULES),$(shell cat tests/unit/$*.deps)),$(HIREDIS_LIBS)) -lev -pthread

$(BUILD)/tests/unit/%.o: tests/unit/%.c | $(HIREDIS_DEP)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes $(SPOA_INC) -Itests/unit -c $< -o $@

# Debian's hiredis >= 1.1 source package built with SSL (cached).
$(HIREDIS_LOCAL)/.done: tools/hiredis-build.sh
	$(Q)tools/hiredis-build.sh $(HIREDIS_LOCAL)

test: $(UNIT_TESTS)
	$(Q)set -e; for t in $(UNIT_TESTS); do echo "== $$t"; $$t; done

integration: $(AGENT) $(BENCH) $(MODULE_SO) $(MODULE_TEST_SO)
	$(Q)AGENT=$(CURDIR)/$(AGENT) BENCH=$(CURDIR)/$(BENCH) tests/run.sh integration

e2e: $(AGENT)
	$(Q)AGENT=$(CURDIR)/$(AGENT) tests/run.sh e2e

# HAProxy 3.2 LTS (3.1+ rewrote the SPOE engine) beside Debian 12's 2.6
# (build/haproxy-3.2/FROM says whether it was built or is sid's binary).
haproxy32:
	$(Q)tools/haproxy-build.sh >/dev/null

e2e-3.2: $(AGENT)
	$(Q)hap=$$(tools/haproxy-build.sh) && \
	echo "e2e on $$($$hap -v | head -1): $$(head -1 $$(dirname $$hap)/FROM 2>/dev/null)" && \
	HAPROXY=$$hap AGENT=$(CURDIR)/$(AGENT) tests/run.sh e2e

# HAProxy 3.0 LTS (the last line on the pre-3.1 SPOE engine, from trixie)
# beside 2.6 and 3.2: build/haproxy-3.0/haproxy.
haproxy30:
	$(Q)HAPROXY_SERIES=3.0 tools/haproxy-build.sh >/dev/null

e2e-3.0: $(AGENT)
	$(Q)hap=$$(HAPROXY_SERIES=3.0 tools/haproxy-build.sh) && \
	echo "e2e on $$($$hap -v | head -1): $$(head -1 $$(dirname $$hap)/FROM 2>/dev/null)" && \
	HAPROXY=$$hap AGENT=$(CURDIR)/$(AGENT) tests/run.sh e2e

# The whole integration suite with every agent on redis-engine module and
# the module in every redis-server the harness starts (needs an agent with
# the redis-engine directive).
integration-module: $(AGENT) $(BENCH) $(MODULE_SO) $(MODULE_TEST_SO)
	$(Q)SPOA_TEST_REDIS_ENGINE=module AGENT=$(CURDIR)/$(AGENT) BENCH=$(CURDIR)/$(BENCH) tests/run.sh integration

# The module's tests alone (they run in make integration too).
check-module: module $(AGENT) $(BENCH)
	$(Q)AGENT=$(CURDIR)/$(AGENT) BENCH=$(CURDIR)/$(BENCH) TESTS="$(MODULE_TESTS)" tests/run.sh integration

# The module's tests on Redis 8.0 and Valkey 9, built from Debian sid's
# source packages into build/ (cached; Redis 8 on libc's malloc, for
# valgrind-module too).
check-module-servers: module $(AGENT) $(BENCH)
	$(Q)set -e; r8=$$(MALLOC=libc tools/redis-server-build.sh redis 8. build/redis-8); \
	v9=$$(tools/redis-server-build.sh valkey 9. build/valkey-9); \
	for s in $$r8 $$v9; do echo "== the module's tests on $$($$s --version | cut -d' ' -f1-3)"; \
		REDIS_SERVER=$$s AGENT=$(CURDIR)/$(AGENT) BENCH=$(CURDIR)/$(BENCH) TESTS="$(MODULE_TESTS)" \
		tests/run.sh integration; done

# The module's tests once with redis-server (Redis 8 on libc's malloc)
# under valgrind: any memcheck error, or a block definitely lost from the
# module, fails.
VALGRIND_MODULE_LOGS := build/valgrind-module
valgrind-module: module $(AGENT) $(BENCH)
	$(Q)rm -rf $(VALGRIND_MODULE_LOGS); set -e; \
	r8=$$(MALLOC=libc tools/redis-server-build.sh redis 8. build/redis-8); \
	VALGRIND_REDIS_SERVER=$$r8 VALGRIND_LOG_DIR=$(CURDIR)/$(VALGRIND_MODULE_LOGS) \
		REDIS_SERVER=$(CURDIR)/tools/valgrind-redis.sh REDIS_START_SECS=60 DIFF_OPS=1500 TEST_TIMEOUT=1200 \
		AGENT=$(CURDIR)/$(AGENT) BENCH=$(CURDIR)/$(BENCH) TESTS="$(MODULE_TESTS)" tests/run.sh integration; \
	n=$$(ls $(VALGRIND_MODULE_LOGS)/vg.* | wc -l); \
	bad=$$(grep -L 'ERROR SUMMARY: 0 errors' $(VALGRIND_MODULE_LOGS)/vg.* || true); \
	lost=$$(grep -lE 'definitely lost: [1-9]' $(VALGRIND_MODULE_LOGS)/vg.* | \
		xargs -r grep -lE '(ratelimit|rl_log|rl_gcra|rl_pool|rl_lease|rl_settle|rl_args)\.c:' || true); \
	echo "valgrind-module: $$n redis-server processes, errors in: $${bad:-none}, module leaks in: $${lost:-none}"; \
	[ -z "$$bad" ] && [ -z "$$lost" ]

# Line and branch coverage of the module (gcov) by its tests: a --coverage
# build of ratelimit-test.so in build/cov stands in for both modules (a
# server that does not load it with test-clock reads the real clock); gcov
# writes build/cov/<file>.c.gcov per module source ("#####": a line no test ran) and
# prints the totals.
MODULE_COV_SO := build/cov/ratelimit-cov.so
module-coverage: $(MODULE_H) $(AGENT) $(BENCH)
	$(Q)rm -rf build/cov && mkdir -p build/cov
	$(Q)$(CC) $(MODULE_CFLAGS) -O0 --coverage -DRATELIMIT_TEST_CLOCK -shared -o $(MODULE_COV_SO) $(MODULE_SRCS)
	$(Q)RATELIMIT_MODULE=$(CURDIR)/$(MODULE_COV_SO) RATELIMIT_MODULE_TEST=$(CURDIR)/$(MODULE_COV_SO) \
		DIFF_OPS=1500 AGENT=$(CURDIR)/$(AGENT) BENCH=$(CURDIR)/$(BENCH) \
		TESTS="$(MODULE_TESTS)" tests/run.sh integration || true
	$(Q)gcov -b -o build/cov $(patsubst module/%.c,build/cov/ratelimit-cov.so-%.gcda,$(MODULE_SRCS)) \
		2>/dev/null | grep -A4 "^File 'module/"; \
		mv -f $(patsubst module/%,%.gcov,$(MODULE_SRCS)) build/cov/; rm -f redismodule.h.gcov; \
		echo "module-coverage: $(patsubst module/%,build/cov/%.gcov,$(MODULE_SRCS))"

# Fault injection under load and resource limits (tests/chaos, ~2 min).
chaos: $(AGENT) $(BENCH)
	$(Q)AGENT=$(CURDIR)/$(AGENT) BENCH=$(CURDIR)/$(BENCH) tests/run.sh chaos

check: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(MAKE) --no-print-directory test
	$(Q)$(MAKE) --no-print-directory integration
	$(Q)$(MAKE) --no-print-directory e2e

# The TLS integration tests (tests/integration-tls) need a WITH_TLS=1 build.
integration-tls: $(AGENT) $(BENCH)
	$(Q)if [ "$(WITH_TLS)" != 1 ]; then echo "integration-tls: run as make WITH_TLS=1 integration-tls" >&2; exit 1; fi
	$(Q)AGENT=$(CURDIR)/$(AGENT) BENCH=$(CURDIR)/$(BENCH) tests/run.sh integration-tls

check-tls:
	$(Q)$(MAKE) --no-print-directory WITH_TLS=1 deps
	$(Q)$(MAKE) --no-print-directory WITH_TLS=1 all
	$(Q)$(MAKE) --no-print-directory WITH_TLS=1 test
	$(Q)$(MAKE) --no-print-directory WITH_TLS=1 integration-tls

sanitize:
	$(Q)$(MAKE) --no-print-directory SANITIZE=address,undefined all test
	$(Q)ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(MAKE) --no-print-directory SANITIZE=address,undefined integration

# ThreadSanitizer over the tests that drive several workers at once, with
# every agent forced to 4 threads (SPOA_TEST_THREADS, read by the harness).
# A report makes the agent exit 66, which the harness counts as a failure.
# (t_cluster*, t_sentinel write their own configs: they run with 2 threads.)
TSAN_TESTS ?= tests/integration/t_agent.py tests/integration/t_multiwindow.py \
              tests/integration/t_ops_reload.py tests/integration/t_ops_metrics.py \
              tests/integration/t_ops_shadow.py tests/integration/t_cluster.py \
              tests/integration/t_cluster_failover.py tests/integration/t_sentinel.py \
              tests/integration/t_batch.py tests/integration/t_oom.py tests/integration/t_ctl.py
tsan:
	$(Q)$(MAKE) --no-print-directory SANITIZE=thread BUILD=build/tsan all
	$(Q)TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
		SPOA_TEST_THREADS=4 TESTS="$(TSAN_TESTS)" \
		$(MAKE) --no-print-directory SANITIZE=thread BUILD=build/tsan integration

valgrind: $(UNIT_TESTS)
	$(Q)set -e; for t in $(UNIT_TESTS); do echo "== valgrind $$t"; \
		valgrind -q --error-exitcode=1 --leak-check=full \
		--errors-for-leak-kinds=definite,indirect $$t; done

# After the static analysers, the call graph from the built objects
# (tools/check-calls.py): no circle among the agent's files, and the module
# map of docs/architecture.md names exactly what each file calls. Then the
# Redis module (module/: its own header from build/redismodule).
lint: $(AGENT) $(MODULE_H)
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
		--inline-suppr --std=c11 -D_GNU_SOURCE $(SPOA_INC) $(SPOA_SRCS) $(BENCH_SRCS) bench/spoa-floor.c
	clang-tidy --quiet $(SPOA_SRCS) $(BENCH_SRCS) bench/spoa-floor.c -- $(CFLAGS_BASE) $(SPOA_INC)
	tools/check-calls.py --self-test
	tools/check-calls.py --doc docs/architecture.md --folders docs/architecture.md $(AGENT_OBJS) $(MAIN_OBJ) $(BUILD)/spoa/script.o
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
		--inline-suppr --std=c11 -D_GNU_SOURCE -Imodule module/*.c
	clang-tidy --quiet module/*.c -- $(MODULE_CFLAGS)

# Debian packages into build/deb/ (tools/deb-build.sh: out of tree, version
# from VERSION; DEB_VERSION= and DEB_OUT= for another build, e.g. the
# previous one that make deb-test upgrades from).
DEB_VERSION ?= $(VERSION)
DEB_OUT     ?= build/deb
deb:
	$(Q)tools/deps.sh deb $(DEBBUILD_PKGS)
	$(Q)tools/deb-build.sh $(DEB_OUT) $(DEB_VERSION)

# Builds the packages twice (this version and an older one), then as root on
# this machine: lintian, install, the story from the installed files,
# upgrade keeping an edited conffile, purge (tools/deb-test.sh; it purges
# what it installed, also on failure).
deb-test:
	$(Q)tools/deps.sh deb $(DEBBUILD_PKGS) $(DEBTEST_PKGS)
	$(Q)tools/deb-test.sh

bench: all $(MCOUNT) $(MODULE_SO) $(MODULE_TEST_SO)
	$(Q)MCOUNT=$(CURDIR)/$(MCOUNT) tools/bench.sh

fuzz:
	$(Q)tools/fuzz.sh $(or $(FUZZ_SECONDS),60)

# Where install puts things (DESTDIR stages, e.g. for a package).
SYSCONFDIR     ?= /etc
SBINDIR        ?= $(PREFIX)/sbin
BINDIR         ?= $(PREFIX)/bin
MODULEDIR      ?= $(PREFIX)/lib/ratelimit-spoa
DATADIR        ?= $(PREFIX)/share/ratelimit-spoa
DOCDIR         ?= $(PREFIX)/share/doc/ratelimit-spoa
MAN8DIR        ?= $(PREFIX)/share/man/man8
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
# The unit's user: empty, DynamicUser=yes (systemd makes one per start); a
# name, User= and Group= that name instead (a system user the installer
# made: the Debian package's ratelimit-spoa, debian/ratelimit-spoa.sysusers).
SERVICE_USER   ?=
CONF           := $(DESTDIR)$(SYSCONFDIR)/ratelimit-spoa/ratelimit-spoa.conf
JWKS_CONF      := $(DESTDIR)$(SYSCONFDIR)/ratelimit-spoa/ratelimit-jwks.conf
HAPROXY_EXAMPLES := haproxy/haproxy.cfg haproxy/spoe-ratelimit.conf \
                    haproxy/ratelimit-block.cfg haproxy/ratelimit-agent.cfg \
                    haproxy/ratelimit-edge.cfg haproxy/ratelimit-frontend.cfg \
                    haproxy/routes.map haproxy/apikeys.map \
                    haproxy/backend.cfg haproxy/ratelimit-drain.lua
# Monitoring files, installed under DATADIR/<their directory under etc/>.
OPS_FILES := etc/prometheus/ratelimit-spoa.rules.yml etc/grafana/ratelimit-spoa.json
# ratelimit-jwks: the edge's JWT keys from an identity provider's JWKS
# (python3 with python3-cryptography), its service and timer, its man page.
JWKS_UNITS := ratelimit-jwks.service ratelimit-jwks.timer
INSTALLED := $(SBINDIR)/ratelimit-spoa $(BINDIR)/spoa-bench $(MODULEDIR)/ratelimit.so \
             $(DATADIR)/sliding_window.lua $(SYSTEMDUNITDIR)/ratelimit-spoa.service \
             $(MAN8DIR)/ratelimit-spoa.8 \
             $(SBINDIR)/ratelimit-jwks $(addprefix $(SYSTEMDUNITDIR)/,$(JWKS_UNITS)) $(MAN8DIR)/ratelimit-jwks.8 \
             $(addprefix $(DATADIR)/,$(HAPROXY_EXAMPLES) $(wildcard haproxy/errors/*.json)) \
             $(addprefix $(DATADIR)/,$(patsubst etc/%,%,$(OPS_FILES))) \
             $(addprefix $(DOCDIR)/,$(notdir $(wildcard docs/*.md)))

# The unit and the man page name the installed paths: rewritten for PREFIX.
# An existing config is never overwritten (it is the site's): the new
# default goes beside it as ratelimit-spoa.conf.dist.
install: $(AGENT) $(BENCH) $(MODULE_SO)
	install -Dm755 $(AGENT) $(DESTDIR)$(SBINDIR)/ratelimit-spoa
	install -Dm755 $(BENCH) $(DESTDIR)$(BINDIR)/spoa-bench
	install -Dm755 $(MODULE_SO) $(DESTDIR)$(MODULEDIR)/ratelimit.so
	install -Dm644 lua/sliding_window.lua $(DESTDIR)$(DATADIR)/sliding_window.lua
	$(Q)if [ -e $(CONF) ]; then \
		install -Dm644 etc/ratelimit-spoa.conf $(CONF).dist; \
		echo "install: kept $(CONF); the new default is $(CONF).dist"; \
	else \
		install -Dm644 etc/ratelimit-spoa.conf $(CONF); \
	fi
	install -d $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(MAN8DIR)
	sed -e 's|/usr/local/sbin/|$(SBINDIR)/|g' -e 's|/etc/ratelimit-spoa/|$(SYSCONFDIR)/ratelimit-spoa/|g' \
		$(if $(SERVICE_USER),-e 's|^DynamicUser=yes$$|User=$(SERVICE_USER)\nGroup=$(SERVICE_USER)|') \
		etc/ratelimit-spoa.service > $(DESTDIR)$(SYSTEMDUNITDIR)/ratelimit-spoa.service
	chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/ratelimit-spoa.service
	sed -e 's|"ratelimit-spoa [0-9][^"]*"|"ratelimit-spoa $(VERSION)"|' \
		-e 's|/usr/local/share/doc/ratelimit\\-spoa/|$(DOCDIR)/|g' \
		-e 's|/usr/local/share/ratelimit\\-spoa/|$(DATADIR)/|g' \
		-e 's|/etc/ratelimit\\-spoa/|$(SYSCONFDIR)/ratelimit\\-spoa/|g' \
		docs/ratelimit-spoa.8 > $(DESTDIR)$(MAN8DIR)/ratelimit-spoa.8
	chmod 644 $(DESTDIR)$(MAN8DIR)/ratelimit-spoa.8
	install -Dm755 tools/ratelimit-jwks $(DESTDIR)$(SBINDIR)/ratelimit-jwks
	$(Q)if [ -e $(JWKS_CONF) ]; then \
		install -Dm644 etc/ratelimit-jwks.conf $(JWKS_CONF).dist; \
		echo "install: kept $(JWKS_CONF); the new default is $(JWKS_CONF).dist"; \
	else \
		install -Dm644 etc/ratelimit-jwks.conf $(JWKS_CONF); \
	fi
	$(Q)for u in $(JWKS_UNITS); do \
		sed -e 's|/usr/local/sbin/|$(SBINDIR)/|g' -e 's|/etc/ratelimit-spoa/|$(SYSCONFDIR)/ratelimit-spoa/|g' \
			etc/$$u > $(DESTDIR)$(SYSTEMDUNITDIR)/$$u && chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/$$u || exit 1; done
	sed -e 's|"ratelimit-spoa [0-9][^"]*"|"ratelimit-spoa $(VERSION)"|' \
		-e 's|/usr/local/share/doc/ratelimit\\-spoa/|$(DOCDIR)/|g' \
		-e 's|/etc/ratelimit\\-spoa/|$(SYSCONFDIR)/ratelimit\\-spoa/|g' \
		docs/ratelimit-jwks.8 > $(DESTDIR)$(MAN8DIR)/ratelimit-jwks.8
	chmod 644 $(DESTDIR)$(MAN8DIR)/ratelimit-jwks.8
	$(Q)for f in $(HAPROXY_EXAMPLES) haproxy/errors/*.json; do \
		install -Dm644 $$f $(DESTDIR)$(DATADIR)/$$f || exit 1; done
	$(Q)for f in $(OPS_FILES); do \
		install -Dm644 $$f $(DESTDIR)$(DATADIR)/$${f#etc/} || exit 1; done
	$(Q)for f in docs/*.md; do \
		install -Dm644 $$f $(DESTDIR)$(DOCDIR)/$${f#docs/} || exit 1; done

# Removes what install put, except the config (the site's).
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	-rmdir $(DESTDIR)$(MODULEDIR) $(DESTDIR)$(DATADIR)/haproxy/errors $(DESTDIR)$(DATADIR)/haproxy \
		$(sort $(dir $(addprefix $(DESTDIR)$(DATADIR)/,$(patsubst etc/%,%,$(OPS_FILES))))) \
		$(DESTDIR)$(DATADIR) $(DESTDIR)$(DOCDIR) 2>/dev/null

# (the module when it builds: without it the script decides, as before)
demo: deps-demo all
	$(Q)$(MAKE) --no-print-directory module || echo "demo: no module (make module failed): the script decides"
	$(Q)tools/demo.sh story

up: deps-demo all
	$(Q)$(MAKE) --no-print-directory module || echo "up: no module (make module failed): the script decides"
	$(Q)tools/demo.sh up

down:
	$(Q)tools/demo.sh down

deps: deps-demo
	$(Q)tools/deps.sh tests $(TEST_PKGS)
ifeq ($(WITH_TLS),1)
	$(Q)tools/deps.sh tls $(TLS_PKGS)
endif

deps-demo:
	$(Q)tools/deps.sh demo $(DEMO_PKGS)

# The package lists, one line each (tests/integration/t_deps.sh reads them).
print-demo-pkgs:
	@echo $(DEMO_PKGS)

print-deb-pkgs:
	@echo $(DEB_PKGS)

clean:
	rm -rf build $(AGENT) $(BENCH) $(FLOOR) spoa/ratelimit-spoa bench/spoa-bench bench/spoa-floor $(MODULE_SO) $(MODULE_TEST_SO)

# (not the HAProxy 3.2 tree nor its apt state that tools/haproxy-build.sh keeps there)
-include $(shell find build -name '*.d' -type f -not -path 'build/haproxy-*' -not -path 'build/apt-*' 2>/dev/null)
