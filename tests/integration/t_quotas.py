#!/usr/bin/env python3
"""Calendar quotas (issue 39) through two agents on one Redis.

Part 1, on a clock the test moves (module/ratelimit-test.so loaded with
test-clock: both agents on redis-engine module read Redis's time from the
hash test:clock): one account on `3/1s 4/hour tz=+05:30` is served by
agents A and B in turn; the quota is spent across both, the last
microsecond of the hour (10:29:59.999999 UTC, the hour of +05:30 ends at
:30 UTC) still refuses on both with reason=quota, and the first
microsecond of the next hour admits again on both: it resets at the
boundary, for every agent at once, not before and not one hour after each
request. The 1s window never refuses here (the test moves the clock by
seconds between requests). A reload of A to 6/hour keeps counting the same
key (two more, then quota).

Part 2, on Redis's own clock with both engines side by side (agent S on the
script, agent M on the module): `3/month` is shared (3 admitted in all,
then reason=quota on both), retry_after ends at the first of next month
00:00 UTC as Redis's TIME says (bounded by TIME read before and after the
request, no timing assertion), `ctl show` gives used, remaining and the
exact reset instant, and `ctl reset` clears the quota.

Part 3: a token bucket with a quota beside it (`100/1s burst=100
algorithm=gcra 2/month`), both engines: two admitted, then reason=quota."""
import datetime
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, wait_for  # noqa: E402
import harness  # noqa: E402
import spop  # noqa: E402

harness.FORCED_ENGINE = ""
h = Harness()
if not os.path.exists(harness.MODULE_TEST_SO):
    h.fail("module built (make module): %s missing" % harness.MODULE_TEST_SO)
    h.done()


def clock(rport, dt, us=0):
    """test:clock at <dt> (UTC) plus <us> microseconds."""
    t = int((dt - datetime.datetime(1970, 1, 1)).total_seconds()) * 1000000 + us
    harness.rcli(rport, "HSET", "test:clock", "s", str(t // 1000000), "us", str(t % 1000000))


def agent(name, rport, engine, policy):
    body = ("redis redis://127.0.0.1:%d/0\nredis-timeout 5s\nredis-engine %s\n"
            "deny-cache off\npolicy api %s\n" % (rport, engine, policy))
    p, port, _, log = h.spawn_side_agent(name, body)
    c = spop.Conn().connect("127.0.0.1", port)
    c.hello()
    return p, c, log


def ask(c, key):
    return c.ratelimit(key, policy="api", timeout=15)["actions"]


# ---- part 1: the boundary, on a controlled clock ----
rport = h.spawn_redis("clocked", ["--loadmodule", harness.MODULE_TEST_SO, "test-clock"], module=False)
HOUR = "3/1s 4/hour tz=+05:30"
pa, ca, loga = agent("agent-a", rport, "module", HOUR)
pb, cb, _ = agent("agent-b", rport, "module", HOUR)
base = datetime.datetime(2031, 3, 9, 9, 30, 0)   # 15:00 at +05:30: an hour begins
got = []
for i in range(4):
    clock(rport, base + datetime.timedelta(minutes=5 * i))
    got.append(ask(ca if i % 2 == 0 else cb, "jwt:Q1").get("status"))
h.eq("4/hour across A and B: four admitted", ["allow"] * 4, got)
clock(rport, base + datetime.timedelta(minutes=30))
va, vb = ask(ca, "jwt:Q1"), ask(cb, "jwt:Q1")
h.eq("the fifth, on A: deny reason=quota", ("deny", "quota"), (va.get("status"), va.get("reason")))
h.eq("and on B", ("deny", "quota"), (vb.get("status"), vb.get("reason")))
h.eq("retry_after: to the end of the hour (10:30 UTC), 30 min", 1800, va.get("retry_after"))
h.eq("the quota's limit and remaining", (4, 0), (va.get("limit"), va.get("remaining")))
clock(rport, base + datetime.timedelta(hours=1), -1)
va, vb = ask(ca, "jwt:Q1"), ask(cb, "jwt:Q1")
h.eq("the hour's last microsecond: still quota on A and on B", [("deny", "quota")] * 2,
     [(v.get("status"), v.get("reason")) for v in (va, vb)])
h.eq("retry_after then: 1 s (1 us, rounded up)", 1, va.get("retry_after"))
clock(rport, base + datetime.timedelta(hours=1))
va = ask(ca, "jwt:Q1")
clock(rport, base + datetime.timedelta(hours=1, seconds=2))
vb = ask(cb, "jwt:Q1")
h.eq("the next hour's first microsecond: A admits, then B", ["allow", "allow"],
     [va.get("status"), vb.get("status")])
h.eq("the new period counts both: 2 remain", 2, vb.get("remaining"))
key = "api:limit:c1:{jwt:Q1}:hour"
end_us = int((base + datetime.timedelta(hours=2) - datetime.datetime(1970, 1, 1)).total_seconds()) * 1000000
h.eq("one string per account and period: '<end>:<units>'", "%d:2" % end_us,
     harness.rcli(rport, "GET", key).strip())
# a reload of A to 3/hour: the same key keeps counting (2 + 1, then quota;
# a counter that started afresh would admit 3)
path = os.path.join(h.tmp, "agent-a.conf")
with open(path) as f:
    text = f.read()
with open(path, "w") as f:
    f.write(text.replace("4/hour", "3/hour"))
pa.send_signal(signal.SIGHUP)
h.check("A reloaded", wait_for(lambda: "event=config_applied" in harness.read_text(loga), 15),
        harness.read_text(loga))
got = []
for i in range(2):
    clock(rport, base + datetime.timedelta(hours=1, seconds=10 + 2 * i))
    v = ask(ca, "jwt:Q1")
    got.append((v.get("status"), v.get("reason", "")))
h.eq("after the reload to 3/hour: one more, then quota (the 2 counted stand)",
     [("allow", ""), ("deny", "quota")], got)
for c in (ca, cb):
    c.close()
h.stop(pa)
h.stop(pb)

# ---- part 2: both engines on Redis's own clock; ctl show and reset ----
h.start_redis(extra=["--loadmodule", harness.MODULE_SO])
rport = h.redis_port
ps, cs, _ = agent("agent-s", rport, "script", "3/month")
pm, cm, _ = agent("agent-m", rport, "module", "3/month")


def redis_now():
    s, us = harness.rcli(rport, "TIME").split()
    return int(s) + int(us) / 1e6


got = [ask(c, "jwt:Q2").get("status") for c in (cs, cm, cs)]
h.eq("3/month across the script's agent and the module's: three admitted", ["allow"] * 3, got)
t0 = redis_now()
vs, vm = ask(cs, "jwt:Q2"), ask(cm, "jwt:Q2")
t1 = redis_now()
h.eq("then quota on both engines", [("deny", "quota")] * 2,
     [(v.get("status"), v.get("reason")) for v in (vs, vm)])
now = datetime.datetime.utcfromtimestamp(t0)
nxt = datetime.datetime(now.year + (now.month == 12), now.month % 12 + 1, 1)
end = (nxt - datetime.datetime(1970, 1, 1)).total_seconds()
for name, v in (("script", vs), ("module", vm)):
    ra = v.get("retry_after", 0)
    h.check("%s: retry_after ends at the first of next month, 00:00 UTC (%d s)" % (name, ra),
            end - t1 <= ra <= end - t0 + 1, (end - t1, end - t0))
conf = os.path.join(h.tmp, "agent-s.conf")


def ctl(*args):
    p = subprocess.run([AGENT, "ctl", "-c", conf] + list(args), capture_output=True, text=True,
                       timeout=30)
    return p.returncode, p.stdout, p.stderr


rc, out, err = ctl("show", "api", "jwt:Q2", "--json")
w = json.loads(out)["windows"][0] if rc == 0 else {}
h.eq("ctl show: used, remaining, the period", (3, 0, "month"),
     (w.get("used"), w.get("remaining"), w.get("period")))
h.eq("ctl show: the exact reset instant (ms)", int(end * 1000), w.get("reset_at_ms"))
h.eq("ctl show: its key", "api:limit:c1:{jwt:Q2}:month", w.get("key"))
rc, out, err = ctl("show", "api", "jwt:Q2")
h.check("ctl show (text): the quota line", rc == 0 and "quota 3/month used 3 remaining 0" in out, out + err)
rc, out, err = ctl("reset", "api", "jwt:Q2")
h.eq("ctl reset: done", 0, rc)
h.eq("after ctl reset: admitted again", "allow", ask(cm, "jwt:Q2").get("status"))
for c in (cs, cm):
    c.close()
h.stop(ps)
h.stop(pm)

# ---- part 3: a token bucket with a quota beside it, both engines ----
# (an hour's rate: the bucket's key lives long enough to be looked at)
GQ = "100/1h burst=100 algorithm=gcra 2/month"
ps, cs, _ = agent("agent-gs", rport, "script", GQ)
pm, cm, _ = agent("agent-gm", rport, "module", GQ)
vs = [ask(c, "jwt:Q3") for c in (cs, cm, cs, cm)]
h.eq("bucket + 2/month: two admitted, then quota on both engines",
     [("allow", ""), ("allow", ""), ("deny", "quota"), ("deny", "quota")],
     [(v.get("status"), v.get("reason", "")) for v in vs])
h.eq("the quota's item in RateLimit-Policy beside the bucket's",
     '"api-1h";q=100;w=3600, "api-month";q=2;w=2678400', vs[0].get("policy_hdr"))
h.check("the bucket and the quota: a g1 and a c1 key",
        harness.rcli(rport, "EXISTS", "api:limit:g1:{jwt:Q3}").strip() == "1" and
        harness.rcli(rport, "GET", "api:limit:c1:{jwt:Q3}:month").strip().endswith(":2"),
        harness.rcli(rport, "KEYS", "*Q3*"))
for c in (cs, cm):
    c.close()
h.stop(ps)
h.stop(pm)

# ---- part 4: a live override keeps the quota counting ----
# A live override names no calendar period; the quota of the limits it
# stands in for keeps counting beside it (live-max lets it raise the rate).
LQ = "100/1s 3/month\nlive-max api 50/1s"
ps, cs, logs = agent("agent-ls", rport, "script", LQ)
pm, cm, logm = agent("agent-lm", rport, "module", LQ)
got = [ask(c, "jwt:Q4").get("status") for c in (cs, cm)]
h.eq("3/month: two of three used", ["allow", "allow"], got)
rc, out, err = subprocess.run([AGENT, "ctl", "-c", os.path.join(h.tmp, "agent-ls.conf"), "override",
                               "api", "jwt:Q4", "5/1s", "--for", "5m"],
                              capture_output=True, text=True, timeout=30).returncode, "", ""
h.eq("ctl override api jwt:Q4 5/1s (within live-max): accepted", 0, rc)
for lg in (logs, logm):
    harness.wait_for(lambda: "event=live_override_change" in harness.read_text(lg), timeout=20)
vs = [ask(c, "jwt:Q4") for c in (cs, cm)]
h.eq("under the live override: the quota's last unit, then quota (both engines' agents)",
     [("allow", ""), ("deny", "quota")], [(v.get("status"), v.get("reason", "")) for v in vs])
h.eq("the live override's window and the quota in RateLimit-Policy",
     '"api-1s";q=5;w=1, "api-month";q=3;w=2678400', vs[0].get("policy_hdr"))
for c in (cs, cm):
    c.close()
h.done()
