# ratelimit-spoa - a global rate limiter for HAProxy (SPOP agent, libev + hiredis + Redis)
#
#   make            build spoa/ratelimit-spoa and spoa/spoa-bench
#   make demo       the two-HAProxy story end to end on loopback (installs what it needs)
#   make up / down  keep the demo stack running / stop it
#   make check      everything: deps, build, unit tests, integration and end-to-end tests
#   make test       unit tests only (cmocka, no sockets)
#   make sanitize   unit + integration tests under ASan + UBSan
#   make valgrind   unit tests under valgrind
#   make lint       cppcheck + clang-tidy on spoa/
#   make bench      load figures into docs/benchmarks.md
#   make fuzz       libFuzzer harnesses (FUZZ_SECONDS=60 each)
#   make install    PREFIX=/usr/local DESTDIR=
#   make deps       apt-get the Debian packages that are missing
#   make clean
#
# Knobs: WERROR=0, SANITIZE=address,undefined, V=1, O=-O2
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

CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -g $(O) $(WARN) -MMD -MP -pthread \
               -DSPOA_VERSION='"$(VERSION)"' -fno-strict-aliasing
ifneq ($(SANITIZE),)
CFLAGS_BASE += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
LDFLAGS_SAN := -fsanitize=$(SANITIZE)
BUILD ?= build/san
else
BUILD ?= build/rel
endif
CFLAGS  ?=
ALL_CFLAGS := $(CFLAGS_BASE) $(CFLAGS)
LDLIBS_AGENT := -lev -lhiredis -lm -pthread
LDLIBS_TEST  := -lcmocka -lhiredis -lm

ifeq ($(V),1)
Q :=
else
Q := @
endif

SPOA_MODULES := spop window config log metrics limiter conn worker http net
AGENT_OBJS   := $(addprefix $(BUILD)/spoa/,$(addsuffix .o,$(SPOA_MODULES)))
MAIN_OBJ     := $(BUILD)/spoa/main.o
BENCH_OBJ    := $(BUILD)/spoa/bench.o

AGENT := spoa/ratelimit-spoa
BENCH := spoa/spoa-bench
ifneq ($(SANITIZE),)
AGENT := $(BUILD)/ratelimit-spoa
BENCH := $(BUILD)/spoa-bench
endif

UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))

DEB_PKGS := build-essential pkg-config libev-dev libhiredis-dev libcmocka-dev \
            redis-server redis-tools haproxy curl openssl python3 jq wrk \
            gnuplot-nox valgrind cppcheck clang

.PHONY: all test check integration e2e sanitize valgrind lint bench fuzz install \
        uninstall demo up down deps clean help

all: $(AGENT) $(BENCH)

help:
	@sed -n '2,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -Ispoa -c $< -o $@

# The agent carries its Lua script: no file to lose at install time.
$(BUILD)/spoa/script.c: lua/sliding_window.lua tools/embed.sh
	@mkdir -p $(dir $@)
	$(Q)tools/embed.sh spoa_script $< > $@

$(BUILD)/spoa/script.o: $(BUILD)/spoa/script.c
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -c $< -o $@

$(AGENT): $(AGENT_OBJS) $(MAIN_OBJ) $(BUILD)/spoa/script.o
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS_SAN) -o $@ $^ $(LDLIBS_AGENT)

$(BENCH): $(BENCH_OBJ) $(BUILD)/spoa/spop.o
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS_SAN) -o $@ $^ -lev -lm -pthread

# A unit test links only the modules its tests/unit/<name>.deps lists
# (pure ones: no sockets).
.SECONDEXPANSION:
$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $$(addprefix $(BUILD)/spoa/,$$(addsuffix .o,$$(shell cat tests/unit/$$*.deps)))
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS_SAN) -o $@ $^ $(LDLIBS_TEST) -lev -pthread

$(BUILD)/tests/unit/%.o: tests/unit/%.c
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -Ispoa -Itests/unit -c $< -o $@

test: $(UNIT_TESTS)
	$(Q)set -e; for t in $(UNIT_TESTS); do echo "== $$t"; SHARED_DIR=$(CURDIR)/../shared $$t; done

integration: $(AGENT) $(BENCH)
	$(Q)AGENT=$(CURDIR)/$(AGENT) BENCH=$(CURDIR)/$(BENCH) tests/run.sh integration

e2e: $(AGENT)
	$(Q)AGENT=$(CURDIR)/$(AGENT) tests/run.sh e2e

check: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(MAKE) --no-print-directory test
	$(Q)$(MAKE) --no-print-directory integration
	$(Q)$(MAKE) --no-print-directory e2e

sanitize:
	$(Q)$(MAKE) --no-print-directory SANITIZE=address,undefined all test
	$(Q)ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(MAKE) --no-print-directory SANITIZE=address,undefined integration

valgrind: $(UNIT_TESTS)
	$(Q)set -e; for t in $(UNIT_TESTS); do echo "== valgrind $$t"; \
		SHARED_DIR=$(CURDIR)/../shared valgrind -q --error-exitcode=1 --leak-check=full \
		--errors-for-leak-kinds=definite,indirect $$t; done

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
		--inline-suppr --std=c11 -D_GNU_SOURCE -Ispoa spoa/*.c
	clang-tidy --quiet spoa/*.c -- $(CFLAGS_BASE) -Ispoa

bench: all
	$(Q)tools/bench.sh

fuzz:
	$(Q)tools/fuzz.sh $(or $(FUZZ_SECONDS),60)

install: $(AGENT)
	install -Dm755 $(AGENT) $(DESTDIR)$(PREFIX)/sbin/ratelimit-spoa
	install -Dm755 $(BENCH) $(DESTDIR)$(PREFIX)/bin/spoa-bench
	install -Dm644 lua/sliding_window.lua $(DESTDIR)$(PREFIX)/share/ratelimit-spoa/sliding_window.lua
	install -Dm644 etc/ratelimit-spoa.conf $(DESTDIR)/etc/ratelimit-spoa/ratelimit-spoa.conf
	install -Dm644 etc/ratelimit-spoa.service $(DESTDIR)$(PREFIX)/lib/systemd/system/ratelimit-spoa.service
	install -Dm644 docs/ratelimit-spoa.8 $(DESTDIR)$(PREFIX)/share/man/man8/ratelimit-spoa.8
	install -Dm644 haproxy/spoe-ratelimit.conf $(DESTDIR)$(PREFIX)/share/ratelimit-spoa/haproxy/spoe-ratelimit.conf
	install -Dm644 haproxy/haproxy.cfg $(DESTDIR)$(PREFIX)/share/ratelimit-spoa/haproxy/haproxy.cfg

demo: deps all
	$(Q)tools/demo.sh story

up: deps all
	$(Q)tools/demo.sh up

down:
	$(Q)tools/demo.sh down

deps:
	$(Q)tools/deps.sh $(DEB_PKGS)

clean:
	rm -rf build $(AGENT) $(BENCH) spoa/ratelimit-spoa spoa/spoa-bench

-include $(shell find build -name '*.d' 2>/dev/null)
