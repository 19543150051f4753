#!/usr/bin/env python3
"""The module is exact under failure (issue 28): when growing a scratch
array fails, RATELIMIT.DECIDE changes the primary only by what it
replicates, so a replica (a real redis-server without the module) holds the
same data, member for member, score and TTL alike.

The failure is injected by module/ratelimit-test.so (the test build):
RATELIMIT.TEST-FAIL-ALLOC <n> empties the scratch arrays and makes the
<n>th growth from then on fail, as an out-of-memory Realloc would. The
arrays grow 16, 32, 64 ...: with 40 expired entries to trim, the 2nd growth
fails after 16 are collected. (Before the fix the module removed those 16
on the primary and replicated ZREMRANGEBYSCORE -inf cut, which removed all
40 on the replica.)"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, ROOT, wait_replicated  # noqa: E402
import resp  # noqa: E402
import harness  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "contract"))
import contract  # noqa: E402

harness.FORCED_ENGINE = ""

h = Harness()
r, rr = contract.start_clocked_pair(h)
h.check("replica linked", harness.wait_for(
    lambda: "master_link_status:up" in rr.call("INFO", "replication"), 20))

now = (int(time.time()) + 10 * 365 * 86400) * 1000000


def set_clock(t):
    r.call("HSET", "test:clock", "s", t // 1000000, "us", t % 1000000)


def state(conn, key):
    t = conn.call("TYPE", key)
    data = conn.call("ZRANGE", key, 0, -1, "WITHSCORES") if t == "zset" else \
        sorted(conn.call("HGETALL", key)) if t == "hash" else None
    return t, data, conn.call("PEXPIRETIME", key)


def same(what, key):
    ok = wait_replicated(lambda: r.call("INFO", "replication"))
    h.check("replica caught up (%s)" % what, ok)
    p, q = state(r, key), state(rr, key)
    h.check("%s: primary and replica hold the same data (%d entries)" %
            (what, len(p[1] or [])), p == q, "primary %r replica %r" % (p, q))
    return p


# --- a log window: the trim runs short of memory ------------------------------------
LOG = "fa:log:{acc}"
for i in range(40):
    set_clock(now + i * 1000)
    x = r.call("RATELIMIT.DECIDE", 1, LOG, 1, 100, 1000)
    if x[0] != 1:
        h.fail("setup admission %d: %r" % (i, x))
        break
h.eq("40 entries written", 40, r.call("ZCARD", LOG))
now += 10 * 1000000            # every entry out of the window
set_clock(now)
h.eq("armed: the 2nd growth fails", 2, r.call("RATELIMIT.TEST-FAIL-ALLOC", 2))
x = r.call("RATELIMIT.DECIDE", 1, LOG, 1, 100, 1000)
h.check("admitted (the trim is not needed for the decision): %r" % (x,),
        isinstance(x, list) and x[0] == 1 and x[2] == 99, x)
p = same("trim out of memory", LOG)
# (the new entry is member 1:1, as the first one was: ZADD rescored it)
h.eq("the primary removed nothing (all or nothing): 40 members", 40, len(p[1]) // 2)
h.check("the new entry is there", p[1][-1] == str(now), p[1][-2:])
h.eq("disarmed", 0, r.call("RATELIMIT.TEST-FAIL-ALLOC", 0))
x = r.call("RATELIMIT.DECIDE", 1, LOG, 1, 100, 1000)
h.check("next admission: %r" % (x,), isinstance(x, list) and x[0] == 1 and x[2] == 98, x)
p = same("trim with memory", LOG)
h.eq("the next trim removes the 40 expired entries", 2, len(p[1]) // 2)

# --- a denial's trim, out of memory: nothing changes --------------------------------
DEN = "fa:den:{acc}"
for i in range(40):
    set_clock(now + i * 1000)
    r.call("RATELIMIT.DECIDE", 1, DEN, 1, 100, 1000)
now += 10 * 1000000
set_clock(now)
h.eq("armed again", 1, r.call("RATELIMIT.TEST-FAIL-ALLOC", 1))
x = r.call("RATELIMIT.DECIDE", 1, DEN, 200, 100, 1000)      # cost > limit: a denial
h.check("denied: %r" % (x,), isinstance(x, list) and x[0] == 0, x)
p = same("denial's trim out of memory", DEN)
h.eq("nothing removed", 40, len(p[1]) // 2)
r.call("RATELIMIT.TEST-FAIL-ALLOC", 0)

# --- a bucketed window: the scan runs short of memory -------------------------------
BKT = "fa:bkt:{acc}"
for i in range(40):
    set_clock(now + i * 100000)
    r.call("RATELIMIT.DECIDE", 1, BKT, 1, 100, "10000:100")
set_clock(now + 41 * 100000)
before = same("bucketed setup", BKT)
h.eq("40 buckets", 80, len(before[1]))
h.eq("armed (bucketed)", 2, r.call("RATELIMIT.TEST-FAIL-ALLOC", 2))
x = r.call("RATELIMIT.DECIDE", 1, BKT, 1, 100, "10000:100")
h.check("out of memory answers an error, fail-closed: %r" % (x,),
        isinstance(x, resp.Err) and "out of memory" in str(x), x)
after = same("bucketed scan out of memory", BKT)
h.eq("nothing written", before, after)
r.call("RATELIMIT.TEST-FAIL-ALLOC", 0)
x = r.call("RATELIMIT.DECIDE", 1, BKT, 1, 100, "10000:100")
h.check("with memory again: admitted, remaining 59: %r" % (x,),
        isinstance(x, list) and x[0] == 1 and x[2] == 59, x)
same("bucketed, memory again", BKT)
# --- a bucketed window of dead fields only: holding them runs short ---------------
DEAD = "fa:dead:{acc}"
r.call("HSET", DEAD, *[x for i in range(20) for x in ("old%d" % i, 1)])
before = same("dead fields setup", DEAD)
h.eq("armed (dead fields)", 1, r.call("RATELIMIT.TEST-FAIL-ALLOC", 1))
x = r.call("RATELIMIT.DECIDE", 1, DEAD, 1, 100, "10000:100")
h.check("out of memory holding the dead fields: an error: %r" % (x,),
        isinstance(x, resp.Err) and "out of memory" in str(x), x)
h.eq("nothing written or trimmed", before, same("dead fields, out of memory", DEAD))
r.call("RATELIMIT.TEST-FAIL-ALLOC", 0)
x = r.call("RATELIMIT.DECIDE", 1, DEAD, 1, 100, "10000:100")
h.check("with memory: admitted: %r" % (x,), isinstance(x, list) and x[0] == 1, x)
after = same("dead fields trimmed", DEAD)
h.eq("the dead fields are gone, the new bucket stays", 2, len(after[1]))
h.eq("redis still answers", "PONG", r.call("PING"))
h.done()
