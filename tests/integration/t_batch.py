#!/usr/bin/env python3
"""redis-batch against a real redis-server: decisions ready together go to
Redis as one script call, each decided exactly as alone. Exactness under
races (many connections pipelining; one key, many keys; mixed policies and
costs in one batch: exactly <limit> admitted, checked against Redis's own
record), a decision failing inside a batch (WRONGTYPE) without its
neighbours, SCRIPT FLUSH under pipelined load (NOSCRIPT -> the batch re-sent
as EVAL), Redis frozen with SIGSTOP (every decision answered, never allow
on a fail-closed policy; Redis's record = allows + late admissions), that
batching happens (INFO commandstats: script calls < decisions), and
redis-batch 1 (one call per decision, same answers). No timing
assertions: waits are bounds."""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

h = Harness()
h.start_redis()

POLICIES = """
policy one 40/1m
policy few 3/1m
policy multi 25/1m 60/1h
policy costly 30/1m max-cost=5
"""


def start(batch, extra=""):
    if h.agent:
        h.stop(h.agent)
        h.agent = None
    h.agent_port = free_port()
    h.start_agent("redis-timeout 200ms\nthreads 1\nredis-batch %d\n%s\n%s" % (batch, extra, POLICIES),
                  ready=True)


def conn():
    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    c.hello()
    return c


def metric(name, **labels):
    return u.scrape(h.metrics_port).get(name, **labels) or 0


def script_calls():
    """Decision calls Redis ran (EVALSHA + EVAL, or RATELIMIT.DECIDE when
    the suite runs on the module) by INFO commandstats."""
    return u.engine_calls(h.rcli("INFO", "commandstats"))


def pipeline(reqs, conns=16):
    """Send <reqs> [(policy, key, cost)] over <conns> connections, each
    pipelining its share at once; returns [(req, actions)]."""
    out = []
    lock = threading.Lock()

    def run(share):
        c = conn()
        sids = []
        for i, (p, k, cost) in enumerate(share):
            args = [("policy", p), ("key", k)]
            if cost is not None:
                args.append(("cost", cost))
            c.send_notify(1 + 2 * i, 1, [("ratelimit", args)])
            sids.append(1 + 2 * i)
        mine = [(share[i], c.wait_ack(sid, 1, timeout=15.0)["actions"]) for i, sid in enumerate(sids)]
        c.close()
        with lock:
            out.extend(mine)

    ts = [threading.Thread(target=run, args=(reqs[i::conns],)) for i in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def admitted(res, key=None, policy=None):
    return sum((r[2] or 1) for r, a in res if a.get("status") == "allow"
               and (key is None or r[1] == key) and (policy is None or r[0] == policy))


def run_races(tag):
    """The exactness races; returns (decisions sent to Redis, script calls)."""
    calls0 = script_calls()
    dec0 = metric("redis_call_duration_seconds_count")
    # one key, 20 connections x 20 pipelined
    res = pipeline([("one", "K1-" + tag, None)] * 400, conns=20)
    h.eq("%s: one key, 400 racing: exactly 40 admitted" % tag, 40, admitted(res))
    h.eq("%s: one key: Redis recorded 40" % tag, 40, h.units("one:limit:v1:K1-" + tag))
    h.eq("%s: one key: every other one denied" % tag, 360,
         sum(1 for _, a in res if a.get("status") == "deny"))
    # many keys
    keys = ["MK%d-%s" % (i, tag) for i in range(60)]
    res = pipeline([("few", k, None) for k in keys] * 6, conns=16)
    bad = [k for k in keys if admitted(res, key=k) != 3 or h.units("few:limit:v1:" + k) != 3]
    h.eq("%s: 60 keys x 6 racing: exactly 3 each, as Redis recorded" % tag, [], bad)
    # mixed policies and costs on the same account, in the same batches
    acct = "MIX-" + tag
    reqs = []
    for i in range(120):
        reqs.append(("multi", acct, None))
        reqs.append(("costly", acct, 1 + i % 5))
    res = pipeline(reqs, conns=12)
    # fill what is left with cost 1: then the account is exactly full
    c = conn()
    for _ in range(40):
        c.ratelimit(acct, policy="costly", cost=1)
    c.close()
    got = h.units("costly:limit:v1:" + acct)
    h.eq("%s: mixed costs: Redis recorded exactly 30 units" % tag, 30, got)
    h.check("%s: mixed costs: the racing admissions are what Redis recorded (<= 30)" % tag,
            admitted(res, policy="costly") <= 30)
    h.eq("%s: multi-window: exactly 25 admitted" % tag, 25, admitted(res, policy="multi"))
    h.eq("%s: multi-window: both windows recorded 25" % tag, (25, 25),
         (h.units("multi:limit:v1:{%s}:1m" % acct), h.units("multi:limit:v1:{%s}:1h" % acct)))
    errors = [a for _, a in res if a.get("status") not in ("allow", "deny")]
    h.eq("%s: no errors in the races" % tag, [], errors)
    return (metric("redis_call_duration_seconds_count") - dec0, script_calls() - calls0)


# -- batched (the default directive value is exercised by redis-batch 32) ---
start(32, "deny-cache off")
decisions, calls = run_races("b32")
h.check("batched: fewer script calls than decisions (%d calls for %d decisions)" % (calls, decisions),
        0 < calls < decisions, (calls, decisions))

# -- a decision that fails inside a batch fails alone ------------------------
h.rcli("SET", "one:limit:v1:WRONG", "x")
res = pipeline([("one", "WRONG", None), ("one", "RIGHT", None)] * 30, conns=4)
wrong = [a for r, a in res if r[1] == "WRONG"]
h.check("WRONGTYPE in a batch: that decision is error/redis-error",
        all(a.get("status") == "error" and a.get("reason") == "redis-error" for a in wrong), wrong[:2])
h.eq("WRONGTYPE in a batch: its neighbours decided (30 allow)", 30, admitted(res, key="RIGHT"))

# -- SCRIPT FLUSH under pipelined load ------------------------------------
# About the script engine's own recovery (NOSCRIPT -> the batch re-sent as
# EVAL): pinned to redis-engine script, whatever engine the suite runs on
# (on the module, SCRIPT FLUSH touches nothing the agent uses; the module's
# counterpart, MODULE UNLOAD under load, is in t_redis_engine.py).
start(32, "deny-cache off\nredis-engine script")
noscript0 = metric("redis_errors_total", kind="noscript")
stop = threading.Event()


def flusher():
    while not stop.is_set():
        h.rcli("SCRIPT", "FLUSH")
        time.sleep(0.01)


h.rcli("SCRIPT", "FLUSH")   # the first batch meets NOSCRIPT for sure
ft = threading.Thread(target=flusher)
ft.start()
try:
    res = pipeline([("one", "FLUSH", None)] * 200 + [("few", "FLUSH%d" % i, None) for i in range(20)] * 4,
                   conns=10)
finally:
    stop.set()
    ft.join()
h.eq("SCRIPT FLUSH under load: exactly 40 admitted", 40, admitted(res, key="FLUSH"))
h.eq("SCRIPT FLUSH under load: Redis recorded 40", 40, h.units("one:limit:v1:FLUSH"))
h.eq("SCRIPT FLUSH under load: 3 per small key",
     [], [i for i in range(20) if admitted(res, key="FLUSH%d" % i) != 3])
h.eq("SCRIPT FLUSH under load: no errors", [], [a for _, a in res if a.get("status") == "error"])
h.check("NOSCRIPT was seen", metric("redis_errors_total", kind="noscript") > noscript0)
start(32, "deny-cache off")   # back on the suite's engine

# -- Redis frozen: every decision answered, fail-closed ------------------------
late0 = metric("late_admissions_total")
allows = []
answers = []
errs = []


def during_freeze(n):
    c = conn()
    try:
        for rnd in range(6):
            for i in range(8):
                c.send_notify(1 + 2 * (rnd * 8 + i), 1,
                              [("ratelimit", [("policy", "one"), ("key", "FROZEN%d" % n)])])
            for i in range(8):
                a = c.wait_ack(1 + 2 * (rnd * 8 + i), 1, timeout=15.0)["actions"]
                answers.append(a)
                if a.get("status") == "allow":
                    allows.append(n)
            time.sleep(0.1)
    except Exception as e:  # noqa: BLE001
        errs.append(repr(e))
    c.close()


os.kill(h.redis.pid, signal.SIGSTOP)
try:
    ts = [threading.Thread(target=during_freeze, args=(n,)) for n in range(4)]
    for t in ts:
        t.start()
    time.sleep(0.8)
finally:
    os.kill(h.redis.pid, signal.SIGCONT)
for t in ts:
    t.join()
h.eq("frozen Redis: every decision answered", ([], 4 * 48), (errs, len(answers)))
h.check("frozen Redis: timeouts answered error/redis-timeout",
        any(a.get("reason") == "redis-timeout" for a in answers))
h.check("frozen Redis: nothing but allow/deny/error",
        all(a.get("status") in ("allow", "deny", "error") for a in answers))
u.wait_for(lambda: metric("late_admissions_total") >= late0, 5)
recorded = sum(h.units("one:limit:v1:FROZEN%d" % n) for n in range(4))
late = metric("late_admissions_total") - late0
h.eq("frozen Redis: Redis's record = allows + late admissions", recorded, len(allows) + late)

# -- redis-batch 1: one script call per decision, the same answers ------------------
h.rcli("FLUSHALL")
start(1, "deny-cache off")
decisions, calls = run_races("b1")
h.eq("redis-batch 1: one script call per decision", decisions, calls)

h.done()
