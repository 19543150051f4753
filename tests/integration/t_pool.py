#!/usr/bin/env python3
"""Two agents on one pool (issue 37): a mixed fleet, one agent on
`redis-engine script` and one on `redis-engine module`, on one Redis that
has the module, with `pool shared 20/1h headroom=4` and a policy of large
per-account limits in it.

- A hog alone, racing from eight connections over both agents, is held at
  limit - headroom = 16: the rest refused with reason pool-share.
- Light accounts, racing the hog, each get their request within the
  headroom: all four admitted, the hog none more.
- The pool then full, a new account is refused with pool-full.
- Redis's own record agrees: the AOF's writes to the pool's log hold 20
  units, never more than the limit in any window of the pool's length; the
  pool's hash holds each account's units; a refused request was recorded
  nowhere (the hog's own window holds its 16).

The pool's window is an hour, so that nothing leaves it while the test runs
("exactly" must not be a matter of timing); the sliding of a pool's window
on a controlled clock is the contract's (tests/contract/decisions.txt)."""
import glob
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, MODULE_SO  # noqa: E402
import harness  # noqa: E402
import spop  # noqa: E402

harness.FORCED_ENGINE = ""   # each agent here names its engine
LOG, ACC = "shared:pool:p1:{shared}", "shared:pool:a1:{shared}"
h = Harness()
h.require_module()
h.start_redis(extra=["--loadmodule", MODULE_SO, "--appendonly", "yes", "--appendfsync", "always"])

ports = h.engine_agents("threads 2\nredis-batch 8\n"
                        "policy warm 10/1s\n"
                        "pool shared 20/1h headroom=4\n"
                        "policy api 1000/1h pool=shared\n", "warm")
h.rcli("CONFIG", "RESETSTAT")


def hammer(engine, key, n, out, lock):
    """<n> decisions of <key> under api through one connection of
    <engine>'s agent; out gets (key, actions) per answer."""
    c = spop.Conn().connect("127.0.0.1", ports[engine])
    c.hello()
    mine = [(key, c.ratelimit(key, policy="api")["actions"]) for _ in range(n)]
    c.close()
    with lock:
        out.extend(mine)


def race(jobs):
    """Runs (engine, key, n) jobs at once; every answer."""
    out, lock = [], threading.Lock()
    ths = [threading.Thread(target=hammer, args=(e, k, n, out, lock)) for e, k, n in jobs]
    for t in ths:
        t.start()
    for t in ths:
        t.join(120)
    return out


# --- the hog alone ----------------------------------------------------------------------
out = race([(("script", "module")[i % 2], "jwt:HOG", 10) for i in range(8)])
st = [a.get("status") for _, a in out]
h.eq("the hog alone, 80 requests over both agents: held at limit - headroom (16)", 16,
     st.count("allow"))
denied = [a for _, a in out if a.get("status") == "deny"]
h.eq("the hog: the others denied with reason pool-share", (64, ["pool-share"]),
     (len(denied), sorted(set(a.get("reason") for a in denied))))
h.check("the hog's denies carry the pool's numbers (limit 20, remaining 0, retry about an hour)",
        all(a.get("limit") == 20 and a.get("remaining") == 0 and 3590 <= a.get("retry_after", 0) <= 3600
            for a in denied), sorted(set((a.get("limit"), a.get("remaining"), a.get("retry_after"))
                                         for a in denied)))

# --- light accounts racing the hog --------------------------------------------------------
jobs = [(("script", "module")[i % 2], "jwt:HOG", 10) for i in range(4)]
jobs += [(("module", "script")[i % 2], "jwt:LIGHT-%d" % i, 1) for i in range(4)]
out = race(jobs)
light = [a for k, a in out if k.startswith("jwt:LIGHT")]
hog = [a for k, a in out if k == "jwt:HOG"]
h.eq("four light accounts racing the hog: each admitted within the headroom", ["allow"] * 4,
     [a.get("status") for a in light])
h.eq("the hog meanwhile: nothing more", [], [a for a in hog if a.get("status") != "deny"])

# --- the pool full ------------------------------------------------------------------------
c = spop.Conn().connect("127.0.0.1", ports["module"])
c.hello()
a = c.ratelimit("jwt:LIGHT-9", policy="api")["actions"]
c.close()
h.eq("the pool full: a new account is refused with pool-full",
     ("deny", "pool-full", 20, 0), (a.get("status"), a.get("reason"), a.get("limit"), a.get("remaining")))

# --- Redis's own record -------------------------------------------------------------------
members = h.rcli("ZRANGE", LOG, 0, -1).split()
h.eq("the pool's log: 20 entries of cost 1", (20, 20),
     (len(members), sum(int(m.split(":")[1], 16) for m in members)))
hv = h.rcli("HGETALL", ACC).split()
held = dict(zip(hv[0::2], (int(x) for x in hv[1::2])))
want = {"jwt:HOG": 16}
want.update(("jwt:LIGHT-%d" % i, 1) for i in range(4))
h.eq("the pool's hash: each account's units", want, held)
h.eq("the hog's own window holds its 16 (its refusals recorded nowhere)", 16,
     h.units("api:limit:v1:{jwt:HOG}:1h"))
h.eq("the refused account: no window written", "0", h.rcli("EXISTS", "api:limit:v1:{jwt:LIGHT-9}:1h"))


def aof_commands(d):
    """Every command of the AOF's incremental files in <d>, in order."""
    files = sorted(glob.glob(os.path.join(d, "appendonlydir", "*.incr.aof")),
                   key=lambda p: int(p.rsplit(".", 3)[-3]))
    cmds = []
    for path in files:
        data, i = open(path, "rb").read(), 0
        while i < len(data):
            assert data[i:i + 1] == b"*", (path, i)
            j = data.index(b"\r\n", i)
            n, i, cmd = int(data[i + 1:j]), j + 2, []
            for _ in range(n):
                j = data.index(b"\r\n", i)
                ln = int(data[i + 1:j])
                cmd.append(data[j + 2:j + 2 + ln].decode())
                i = j + 4 + ln
            cmds.append(cmd)
    return cmds


h.rcli("CONFIG", "SET", "appendfsync", "always")
entries = [(int(c[2]), c[3]) for c in aof_commands(h.tmp) if c[0].upper() == "ZADD" and c[1] == LOG]
h.eq("the AOF: 20 admissions written to the pool's log", 20, len(entries))
worst = max(sum(int(m.split(":")[1], 16) for s2, m in entries if s - 3600 * 10 ** 6 < s2 <= s)
            for s, _ in entries)
h.check("the AOF: no window of the pool's length holds more than its limit (%d of 20)" % worst,
        worst <= 20)
stats = h.rcli("INFO", "commandstats")
h.check("the module's agent called RATELIMIT.DECIDE", "cmdstat_ratelimit.decide:calls=" in stats, stats)
h.check("the script's agent called EVALSHA", "cmdstat_evalsha:calls=" in stats, stats)
logs = "".join(harness.read_text(os.path.join(h.tmp, "agent-%s.log" % e)) for e in ports)
h.check("a pool's deny is a deny, never logged as a fail-open or a refusal",
        "reason=pool-" not in logs, [ln for ln in logs.splitlines() if "reason=pool-" in ln][:3])
mem = [int(h.rcli("MEMORY", "USAGE", k)) for k in (LOG, ACC)]
print("# MEMORY USAGE of the pool with 5 accounts, 20 entries: log %d bytes, hash %d bytes" %
      tuple(mem))
h.done()
