#!/usr/bin/env bash
# tests/spop.py (the client that plays HAProxy in the tests) against its own
# self-test: varints, HAProxy's captured frames in tests/vectors decoded and
# re-encoded byte for byte, and a socket round trip with a fake agent.
set -u
cd "$(dirname "$0")/../.." || exit 1
python3 tests/spop.py --selftest
