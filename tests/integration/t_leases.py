#!/usr/bin/env python3
"""In-flight leases (issue 38): two agents, one on `redis-engine script`
and one on `redis-engine module`, on one Redis that has the module, with
`policy export 1000/1h inflight=5`.

- 50 requests of one account at once, over both agents, each holding its
  lease until its "ratelimit-done" (as HAProxy's response phase sends it):
  Redis's own record (the AOF's writes to the account's leases) never holds
  more than 5 at a time; the refused ones carry reason in-flight and were
  recorded in no window; every lease is released at the end.
- Releases are idempotent and stay within their account: a lease released
  twice, or named under another account, changes nothing.
- A release while Redis is down is not lost: the agent acknowledges the
  message at once, and the release reaches Redis once it is back (its data
  kept in the AOF), before the lease would have ended.
- A policy of leases alone (inflight= without windows): one runs, the
  next is refused in-flight until the first is released.
- A killed agent's leases end at lease= on Redis's clock: the account is
  refused until then, then admitted again.
"""
import glob
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, MODULE_SO, wait_for, scrape  # noqa: E402
import harness  # noqa: E402
import spop  # noqa: E402

harness.FORCED_ENGINE = ""   # each agent here names its engine
LEASES = "export:inflight:l1:{jwt:ACC-1}"
h = Harness()
h.require_module()
h.start_redis(extra=["--loadmodule", MODULE_SO, "--appendonly", "yes", "--appendfsync", "always"])

body = "policy warm 10/1s\npolicy export 1000/1h inflight=5 lease=3s\n" \
       "policy upload 1000/1h inflight=1 lease=1m\npolicy conc inflight=1 lease=1m\n"
agents = harness.engine_agents(h, body)


def done(c, key, lease, policy="export"):
    """The response phase's message: notify ratelimit-done(policy, key, lease)."""
    return c.notify([("ratelimit-done", [("policy", policy), ("key", key), ("lease", lease)])])


def request(engine, key, out, lock, hold):
    """One request: its decision, then (admitted) its release once <hold>
    is set, as HAProxy sends it at the response."""
    c = spop.Conn().connect("127.0.0.1", agents[engine][1])
    c.hello()
    a = c.ratelimit(key, policy="export", timeout=15)["actions"]
    with lock:
        out.append(a)
    if a.get("status") == "allow":
        hold.wait(60)
        done(c, key, a.get("lease"))
    c.close()


# --- 50 at once against inflight=5 ------------------------------------------------------
out, lock, hold = [], threading.Lock(), threading.Event()
ths = [threading.Thread(target=request, args=(("script", "module")[i % 2], "jwt:ACC-1", out, lock, hold))
       for i in range(50)]
for t in ths:
    t.start()
wait_for(lambda: len(out) == 50, 60)
allowed = [a for a in out if a.get("status") == "allow"]
denied = [a for a in out if a.get("status") == "deny"]
h.eq("50 requests at once over both agents: 5 admitted while they run", (50, 5, 45),
     (len(out), len(allowed), len(denied)))
h.eq("the refused: reason in-flight, limit 5, remaining 0", [("in-flight", 5, 0)],
     sorted(set((a.get("reason"), a.get("limit"), a.get("remaining")) for a in denied)))
h.check("each admission carries its own lease id (32 hex digits)",
        len(set(a.get("lease") for a in allowed)) == 5 and
        all(len(a.get("lease", "")) == 32 and int(a["lease"], 16) >= 0 for a in allowed),
        [a.get("lease") for a in allowed])
h.eq("Redis holds the 5 running leases", "5", h.rcli("ZCARD", LEASES))
h.eq("the refused were recorded in no window (the hour's window holds 5)", 5,
     h.units("export:limit:v1:{jwt:ACC-1}:1h"))
hold.set()
for t in ths:
    t.join(60)
h.eq("every response released its lease", "0", wait_for(lambda: h.rcli("ZCARD", LEASES) == "0" and "0", 15))


def aof_commands(d):
    """Every command of the AOF's incremental files in <d>, in order."""
    files = sorted(glob.glob(os.path.join(d, "appendonlydir", "*.incr.aof")),
                   key=lambda p: int(p.rsplit(".", 3)[-3]))
    cmds = []
    for path in files:
        data, i = open(path, "rb").read(), 0
        while i < len(data):
            j = data.index(b"\r\n", i)
            n, i, cmd = int(data[i + 1:j]), j + 2, []
            for _ in range(n):
                j = data.index(b"\r\n", i)
                ln = int(data[i + 1:j])
                cmd.append(data[j + 2:j + 2 + ln].decode(errors="replace"))
                i = j + 4 + ln
            cmds.append(cmd)
    return cmds


held, worst, adds = set(), 0, 0
for c in aof_commands(h.tmp):
    if len(c) < 2 or c[1] != LEASES:
        continue
    op = c[0].upper()
    if op == "ZADD":
        held.add(c[3])
        adds += 1
    elif op == "ZREM":
        held.difference_update(c[2:])
    elif op == "DEL":
        held.clear()
    worst = max(worst, len(held))
h.eq("the AOF: 5 leases written to the account's set", 5, adds)
h.check("the AOF: never more than 5 leases held at once (%d)" % worst, worst <= 5)

# --- idempotent, and only within the account ------------------------------------------
c = spop.Conn().connect("127.0.0.1", agents["module"][1])
c.hello()
a = c.ratelimit("jwt:ACC-2", policy="export")["actions"]
lease = a.get("lease", "")
done(c, "jwt:ACC-3", lease)
h.eq("a lease named under another account releases nothing of this one", "1",
     h.rcli("ZCARD", "export:inflight:l1:{jwt:ACC-2}"))
done(c, "jwt:ACC-2", lease)
done(c, "jwt:ACC-2", lease)
c.close()
h.eq("released (twice): the account's leases are empty", "0",
     wait_for(lambda: h.rcli("ZCARD", "export:inflight:l1:{jwt:ACC-2}") == "0" and "0", 10))


def leases_total(port, event):
    return wait_for(lambda: scrape(port).get("leases_total", event=event), 5) or 0


m = agents["module"][2]
h.check("the module's agent counted a release and a second one that found nothing",
        wait_for(lambda: leases_total(m, "gone") >= 1, 10) and leases_total(m, "released") >= 1,
        (leases_total(m, "released"), leases_total(m, "gone")))

# --- a release while Redis restarts ---------------------------------------------------
UP = "upload:inflight:l1:{jwt:ACC-5}"
mport = agents["module"][1]
c = spop.Conn().connect("127.0.0.1", mport)
c.hello()
a = c.ratelimit("jwt:ACC-5", policy="upload")["actions"]
h.eq("a lease taken under upload (lease=1m)", ("allow", "1"), (a.get("status"), h.rcli("ZCARD", UP)))
released = leases_total(agents["module"][2], "released")
h.stop_redis()
ack = done(c, "jwt:ACC-5", a.get("lease"), policy="upload")
h.check("Redis down: the agent still acknowledges ratelimit-done at once", ack is not None, ack)
h.start_redis(extra=["--loadmodule", MODULE_SO, "--appendonly", "yes", "--appendfsync", "always"])
h.eq("the release, retried, reached Redis once it was back", "0",
     wait_for(lambda: h.rcli("ZCARD", UP) == "0" and "0", 30))
h.check("counted as released, not failed",
        wait_for(lambda: leases_total(agents["module"][2], "released") == released + 1, 10) and
        not leases_total(agents["module"][2], "release-failed"),
        (leases_total(agents["module"][2], "released"), leases_total(agents["module"][2], "release-failed")))
c.close()

# --- leases alone ----------------------------------------------------------------------
c = spop.Conn().connect("127.0.0.1", agents["script"][1])
c.hello()
a1 = c.ratelimit("jwt:ACC-6", policy="conc")["actions"]
h.check("leases alone: the first admitted, with its lease, limit 1 and no window",
        a1.get("status") == "allow" and len(a1.get("lease", "")) == 32 and a1.get("limit") == 1 and
        a1.get("remaining") == 0 and "policy_hdr" not in a1, a1)
a2 = c.ratelimit("jwt:ACC-6", policy="conc")["actions"]
h.eq("leases alone: the second refused in-flight", ("deny", "in-flight"), (a2.get("status"), a2.get("reason")))
done(c, "jwt:ACC-6", a1.get("lease"), policy="conc")
a3 = wait_for(lambda: (lambda x: x.get("status") == "allow" and x)(
    c.ratelimit("jwt:ACC-6", policy="conc")["actions"]), 10)
h.check("leases alone: once released, the next admitted", bool(a3), a3)
h.eq("leases alone: no window key written", "", h.rcli("KEYS", "conc:limit:*"))
c.close()

# --- a killed agent's leases end at lease= ----------------------------------------------
p, port, _ = agents["script"]
c = spop.Conn().connect("127.0.0.1", port)
c.hello()
taken = [c.ratelimit("jwt:ACC-4", policy="export")["actions"].get("status") for _ in range(5)]
h.eq("5 leases taken through the script's agent", ["allow"] * 5, taken)
os.kill(p.pid, signal.SIGKILL)
p.wait()
c2 = spop.Conn().connect("127.0.0.1", agents["module"][1])
c2.hello()
a = c2.ratelimit("jwt:ACC-4", policy="export")["actions"]
h.check("the agent gone, its leases still count: in-flight, retry within lease= (3s)",
        a.get("status") == "deny" and a.get("reason") == "in-flight" and 1 <= a.get("retry_after", 0) <= 3, a)
a = wait_for(lambda: (lambda x: x.get("status") == "allow" and x)(
    c2.ratelimit("jwt:ACC-4", policy="export")["actions"]), 15)
h.check("once lease= has passed on Redis's clock, the account is admitted again", bool(a), a)
c2.close()
h.done()
