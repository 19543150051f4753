#!/usr/bin/env python3
"""precision=<duration>: windows counted in buckets (a hash per key) against
a real redis-server.

- never over-admit: random arrivals with random costs on Redis's own clock
  (a test copy of the script returns the Redis TIME it decided at); for every
  admission t, the units admitted in (t - window, t] stay within the limit,
  for a bucketed window alone and for one bucketed plus one exact window;
  and the hash Redis keeps holds exactly the units recorded per bucket;
- retry_after never early, exact to the microsecond: on a clock the test
  sets, every denial is replayed on a copy of its keys 1 us before
  retry_after (still denied) and at retry_after (admitted);
- memory: a full 1000/1h precision=1m account fits in 2 KB (MEMORY USAGE);
- out of memory: a bucketed admission is refused whole (the HINCRBY is the
  first write) and writes nothing;
- through the agent: the key layout (b1 hash beside v1 sorted set), the
  variables, and -c's checks of precision."""
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
from harness import Harness  # noqa: E402
import resp  # noqa: E402
import spop  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = open(os.path.join(ROOT, "lua", "sliding_window.lua")).read()
RET = "best_retry, best - 1 }"


h = Harness()
h.start_redis()
r = resp.Redis(h.redis_port, raw=True).call

# Test copies: one returns the Redis time it decided at (7th element), one
# reads its clock from a hash the test sets.
assert RET in SCRIPT and "local t = redis.call('TIME')" in SCRIPT
TIMED = r("SCRIPT", "LOAD", SCRIPT.replace(RET, "best_retry, best - 1, nows }")).decode()
CLOCKED = r("SCRIPT", "LOAD", SCRIPT.replace(
    "local t = redis.call('TIME')",
    "local t = redis.call('HMGET', 'test:clock', 's', 'us')")).decode()


def ev(sha, keys, cost, wins):
    """One decision; <wins> = [(limit, window ms, precision ms or 0)...]."""
    argv = []
    for lim, ms, prec in wins:
        argv += [lim, "%d:%d" % (ms, prec) if prec else ms]
    return r("EVALSHA", sha, len(keys), *keys, cost, *argv)


# -- never over-admit, on Redis's clock ---------------------------------------
def property_run(name, keys, wins, secs, max_cost, rate):
    """Arrivals at about <rate> a second (exponential gaps, so bursts and
    lulls), costs 1..<max_cost>: offered a little above the limits, so that
    admissions spread over every bucket and the windows fill."""
    admitted = []          # (redis time us, cost)
    decisions = denied = 0
    end = time.monotonic() + secs
    rnd = random.Random(12)
    while time.monotonic() < end:
        cost = rnd.randint(1, max_cost)
        rep = ev(TIMED, keys, cost, wins)
        if isinstance(rep, resp.Err):
            h.fail("%s: script error %s" % (name, rep))
            return
        decisions += 1
        if rep[0] == 1:
            admitted.append((int(rep[6]), cost))
        else:
            denied += 1
        time.sleep(rnd.expovariate(rate))
    worst = []
    for lim, ms, prec in wins:
        w = ms * 1000
        peak = 0
        j = 0
        total = 0
        # two pointers over admissions in time order: units in (t - w, t]
        for t, c in admitted:
            total += c
            while admitted[j][0] <= t - w:
                total -= admitted[j][1]
                j += 1
            peak = max(peak, total)
        worst.append(peak)
        h.check("%s: every %dms window holds at most %d units (peak %d; %d decisions, "
                "%d admitted with %d units, %d denied)" % (name, ms, lim, peak, decisions,
                                                           len(admitted), sum(c for _, c in admitted),
                                                           denied),
                peak <= lim)
    h.check("%s: some admitted, some denied" % name, admitted and denied)
    # Redis's own record: each live bucket holds exactly the units admitted in it.
    for (lim, ms, prec), key in zip(wins, keys):
        if not prec:
            continue
        rec = {}
        for t, c in admitted:
            e = (t // 1000 // prec + 1) * prec
            rec[e] = rec.get(e, 0) + c
        got = r("HGETALL", key)
        fields = {int(got[i]): int(got[i + 1]) for i in range(0, len(got), 2)}
        h.check("%s: %d buckets in Redis, each with the units recorded for it" % (name, len(fields)),
                fields and all(rec.get(e) == v for e, v in fields.items()),
                "redis %r" % fields)
        h.check("%s: at most window/precision + 1 buckets" % name, len(fields) <= ms // prec + 1)


property_run("bucketed 200/4s precision=1s", ["p:limit:b1:one"], [(200, 4000, 1000)], 8, 4, 25)
property_run("mixed 50/1s + 160/4s precision=1s",
             ["p:limit:v1:{mix}:1s", "p:limit:b1:{mix}:4s"],
             [(50, 1000, 0), (160, 4000, 1000)], 8, 3, 25)


# -- retry_after never early, on the test's clock -----------------------------
def clock(us):
    r("HSET", "test:clock", "s", us // 1000000, "us", us % 1000000)


def replay(keys, cost, wins, at):
    """Decide on copies of <keys> at time <at> (the originals untouched)."""
    copies = []
    for i, k in enumerate(keys):
        c = "{replay}:%d" % i
        r("DEL", c)
        dump = r("DUMP", k)
        if dump is not None:
            r("RESTORE", c, 0, dump)
        copies.append(c)
    clock(at)
    return ev(CLOCKED, copies, cost, wins)


def retry_run(name, keys, wins):
    rnd = random.Random(7)
    now = 1_700_000_000_000_000
    early = late = probes = 0
    for _ in range(250):
        now += rnd.choice([0, 1, 999, 1000000, rnd.randint(0, 90_000_000)])
        clock(now)
        cost = rnd.randint(1, 6)
        rep = ev(CLOCKED, keys, cost, wins)
        for k in keys:
            r("PERSIST", k)
        if rep[0] == 1:
            continue
        retry = rep[4]
        probes += 1
        if replay(keys, cost, wins, now + retry - 1)[0] != 0:
            early += 1
        if replay(keys, cost, wins, now + retry)[0] != 1:
            late += 1
        clock(now)
    h.check("%s: %d denials replayed" % (name, probes), probes >= 20)
    h.eq("%s: 1 us before retry_after is still denied" % name, 0, early)
    h.eq("%s: at retry_after it is admitted" % name, 0, late)


retry_run("retry bucketed 40/1h precision=1m", ["r:limit:b1:one"], [(40, 3600000, 60000)])
retry_run("retry mixed 8/10m + 40/1h precision=1m",
          ["r:limit:v1:{m}:10m", "r:limit:b1:{m}:1h"],
          [(8, 600000, 0), (40, 3600000, 60000)])
retry_run("retry bucketed 30/1d precision=15m", ["r:limit:b1:day"], [(30, 86400000, 900000)])


# -- memory bound ---------------------------------------------------------------
def fill(key, lim, ms, prec, minutes):
    """Admit <lim> units spread evenly over the window, one unit a request."""
    start = 1_800_000_000_000_000
    for i in range(lim):
        clock(start + i * ms * 1000 // lim)
        ev(CLOCKED, [key], 1, [(lim, ms, prec)])
    return r("MEMORY", "USAGE", key)


mb = fill("m:limit:b1:acc", 1000, 3600000, 60000, 60)
ml = fill("m:limit:v1:acc", 1000, 3600000, 0, 60)
h.eq("memory: the bucketed account is full (60 buckets, 1000 units)", (60, 1000),
     (r("HLEN", "m:limit:b1:acc"),
      sum(int(v) for v in r("HVALS", "m:limit:b1:acc"))))
h.check("memory: full 1000/1h precision=1m account: %d bytes <= 2048 (log: %d)" % (mb, ml),
        mb <= 2048)
r("DEL", "m:limit:v1:acc")

# -- out of memory: the HINCRBY is the first write ------------------------------
clock(1_900_000_000_000_000)
ev(CLOCKED, ["o:limit:b1:acc"], 1, [(10, 3600000, 60000)])
clock(1_900_000_000_000_000 + 3700 * 1000000)    # its bucket has left the window
r("SET", "ballast", "x" * 1000000)
r("CONFIG", "SET", "maxmemory-policy", "noeviction")
r("CONFIG", "SET", "maxmemory", "1mb")
rep = ev(CLOCKED, ["o:limit:b1:acc"], 1, [(10, 3600000, 60000)])
h.check("oom: the bucketed admission is refused with OOM", isinstance(rep, resp.Err) and
        "OOM" in str(rep), repr(rep))
h.eq("oom: nothing written, not even the trim", 1, r("HLEN", "o:limit:b1:acc"))
rep = ev(CLOCKED, ["o:limit:b1:new"], 1, [(10, 3600000, 60000)])
h.eq("oom: no key created for a new account", (True, 0),
     (isinstance(rep, resp.Err), r("EXISTS", "o:limit:b1:new")))
r("CONFIG", "SET", "maxmemory", "0")
r("DEL", "ballast")

# -- through the agent ----------------------------------------------------------
h.start_agent(ready=True, extra="""
threads 1
redis-timeout 2s
policy exports 3/10s 5/1h precision=1m
policy big 4/1h precision=5m
override big ACC-VIP 2/1s 8/1h
""")
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()


def ask(key, policy, cost=None):
    return c.ratelimit(key, policy=policy, cost=cost)["actions"]


d = ask("ACC-1", "exports", cost=2)
h.eq("agent: mixed policy admits", ("allow", 3, 1), (d["status"], d["limit"], d["remaining"]))
h.eq("agent: 10s window in a v1 sorted set, 1h in a b1 hash (one hash tag)",
     ("zset", "hash"), (r("TYPE", "exports:limit:v1:{ACC-1}:10s"),
                        r("TYPE", "exports:limit:b1:{ACC-1}:1h")))
for _ in range(3):
    d = ask("ACC-2", "big")
d = ask("ACC-2", "big")
h.eq("agent: big 4/1h: 4th admitted", ("allow", 0), (d["status"], d["remaining"]))
d = ask("ACC-2", "big")
now_s = int(r("TIME")[0])
end_s = (now_s // 300 + 1) * 300
h.eq("agent: 5th denied", "deny", d["status"])
h.check("agent: retry_after from the bucket end: %s s (bucket ends in %d s, + 1 h)"
        % (d.get("retry_after"), end_s - now_s),
        end_s - now_s + 3600 - 2 <= d.get("retry_after", 0) <= end_s - now_s + 3600 + 1)
h.eq("agent: single-window key is a b1 hash, the form of any window count", "hash",
     r("TYPE", "big:limit:b1:{ACC-2}:1h"))
h.eq("agent: ... and, for an upgrade, the 1.0.x form is written beside it: 4 units each", (4, 4),
     tuple(sum(int(v) for v in r("HVALS", k)) for k in ("big:limit:b1:{ACC-2}:1h",
                                                                 "big:limit:b1:ACC-2")))
d = ask("ACC-VIP", "big", cost=2)
h.eq("agent: override's 1s window stays exact, 1h bucketed",
     ("allow", "zset", "hash"), (d["status"], r("TYPE", "big:limit:v1:{ACC-VIP}:1s"),
                                 r("TYPE", "big:limit:b1:{ACC-VIP}:1h")))


# -- -c: precision checks ---------------------------------------------------------
def check_conf(line):
    path = os.path.join(h.tmp, "c.conf")
    with open(path, "w") as f:
        f.write("listen 127.0.0.1:1\nredis redis://127.0.0.1:1/0\n%s\n" % line)
    out = subprocess.run([harness.AGENT, "-c", "-f", path], capture_output=True, text=True)
    return out.returncode, out.stderr.strip()


for line, want in [
    ("policy a 10/1s 1000/1h precision=1m", None),
    ("policy a 1000/1d precision=15m", "bad window"),
    ("policy a 1000/24h precision=15m", None),
    ("policy a 1000/1h precision=7m", "does not divide the 1h window"),
    ("policy a 1000/1h precision=5s", "720 buckets"),
    ("policy a 1000/1h precision=500ms", "below the minimum"),
    ("policy a 10/1m precision=1m", "applies to no window"),
    ("policy a 10/1h precision=x", "bad precision"),
    ("policy a 10/1h precision=1m\noverride a K 5/1s 20/150s", "does not divide the 150s window"),
]:
    rc, err = check_conf(line)
    if want is None:
        h.eq("-c accepts '%s'" % line, 0, rc)
    else:
        h.check("-c rejects '%s' with file:line: ...%s" % (line.replace("\n", " / "), want),
                rc != 0 and "c.conf:" in err and want in err, err)

h.done()
