#!/usr/bin/env python3
"""A Redis that cannot hold the windows must never turn the limiter off.

Eviction (issue 10 item 3): a redis-server started with
`--maxmemory-policy volatile-lru` would evict the windows (the only keys
with a TTL); the agent logs `redis_unsafe_eviction` at error once per
connection, sets the `redis_unsafe_eviction` gauge and answers
`error/redis-evicts-keys`, never allow; fixed with CONFIG SET, decisions
come back; `redis-allow-eviction yes` decides anyway. An ACL user without
CONFIG gets a warning and decisions work.

A replica (issue 10 item 5): `redis://` pointed at a replica is refused at
connect (ROLE), logged at error once per attempt with backoff (a handful of
lines, not one per request), the connected gauge stays 0, and every answer
is an error.

The deny cache (issue 10 item 20, as docs/configuration.md says): after
Redis lost its data an account the cache holds stays denied until a reload
or its cached deadline."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

h = Harness()


def redis(name, *extra):
    """A redis-server of its own on a free port; returns the port."""
    return h.spawn_redis(name, extra, module=False)


rcli = u.rcli


def agent(name, url, extra=""):
    """An agent on <url> with its own log and metrics; returns (proc, port,
    metrics port, log path)."""
    return h.spawn_side_agent(name, "redis %s\nredis-timeout 1s\npolicy transfer 3/10s\n%s" % (url, extra))


text = u.read_text


def count(log, needle):
    return text(log).count(needle)


def metric(mport, name, **labels):
    try:
        return u.scrape(mport).get(name, **labels) or 0
    except Exception:  # noqa: BLE001
        return None


statuses = u.statuses


# -- eviction policy volatile-lru: refused -------------------------------------------
ev = redis("volatile", "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
p, port, mport, log = agent("evict", "redis://127.0.0.1:%d/0" % ev)
h.check("volatile-lru: redis_unsafe_eviction at error",
        u.wait_for(lambda: "level=error event=redis_unsafe_eviction" in text(log), 10), text(log)[-600:])
h.check("... naming the policy", "policy=volatile-lru" in text(log))
h.eq("the unsafe-eviction gauge is 1", 1.0, u.wait_for(lambda: metric(mport, "redis_unsafe_eviction"), 5))
seen = statuses(port, "EVICT", 10)
h.eq("10 decisions: all error/redis-evicts-keys, never allow",
     [("error", "redis-evicts-keys")] * 10, seen)
h.eq("nothing was written to Redis", "0", rcli(ev, "DBSIZE"))
h.eq("logged once for this connection", 1, count(log, "event=redis_unsafe_eviction"))
h.eq("errors_total{reason=redis-evicts-keys} counts them", 10.0,
     metric(mport, "errors_total", reason="redis-evicts-keys"))

# -- fixed at runtime: the agent looks again and decides ---------------------------------
rcli(ev, "CONFIG", "SET", "maxmemory-policy", "noeviction")


def first_allow():
    return statuses(port, "FIXED", 1)[0][0] == "allow"


h.check("CONFIG SET noeviction: decisions come back", u.wait_for(first_allow, 10, 0.3))
h.eq("the gauge is back to 0", 0.0, metric(mport, "redis_unsafe_eviction"))
h.check("redis_eviction_safe logged", "event=redis_eviction_safe" in text(log))
h.stop(p)

# -- the opt-out: redis-allow-eviction yes ---------------------------------------------
rcli(ev, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
p, port, mport, log = agent("evict-ok", "redis://127.0.0.1:%d/0" % ev, "redis-allow-eviction yes\n")
h.check("allow-eviction: still logged at error",
        u.wait_for(lambda: "level=error event=redis_unsafe_eviction" in text(log), 10))
h.check("... saying it decides anyway", "deciding anyway" in text(log))
h.eq("allow-eviction: 3/10s decides (allow x3, deny)",
     ["allow", "allow", "allow", "deny"], [s for s, _ in statuses(port, "OPTOUT", 4)])
h.eq("the gauge still says 1", 1.0, metric(mport, "redis_unsafe_eviction"))
h.stop(p)

# -- an ACL user without CONFIG: a warning, decisions work -------------------------------
acl = redis("acl", "--user", "default", "off", "--user", "rl", "on", ">pw", "~*", "+@all",
            "-config")
p, port, mport, log = agent("acl", "redis://rl:pw@127.0.0.1:%d/0" % acl)
h.check("no CONFIG permission: redis_eviction_unknown at warn",
        u.wait_for(lambda: "level=warn event=redis_eviction_unknown" in text(log), 10),
        text(log)[-600:])
h.check("... and the link comes up", u.wait_for(lambda: metric(mport, "redis_connected") == 1, 10))
h.eq("decisions work", ["allow", "allow", "allow", "deny"],
     [s for s, _ in statuses(port, "ACL", 4)])
h.check("no unsafe-eviction claim", "redis_unsafe_eviction" not in text(log))
h.stop(p)

# -- a replica: refused at connect, with backoff -----------------------------------------
primary = redis("primary")
replica = redis("replica", "--replicaof", "127.0.0.1", str(primary))
p, port, mport, log = agent("replica", "redis://127.0.0.1:%d/0" % replica)
h.check("replica: redis_not_primary at error",
        u.wait_for(lambda: "level=error event=redis_not_primary" in text(log), 10), text(log)[-600:])
t0 = time.time()
seen = []
while time.time() - t0 < 4:
    seen += statuses(port, "REPLICA-%d" % len(seen), 10)
    time.sleep(0.05)
h.check("every answer is an error (%d asked)" % len(seen),
        seen and all(s == "error" for s, _ in seen), set(seen))
lines = count(log, "event=redis_")
h.check("the Redis lines stay few over 4 s of traffic (%d)" % lines, lines < 40, lines)
h.check("attempts back off: fewer than 20 redis_not_primary lines (%d)"
        % count(log, "event=redis_not_primary"), count(log, "event=redis_not_primary") < 20)
h.eq("the connected gauge never said 1", 0.0, metric(mport, "redis_connected"))
h.eq("the replica holds no window", "0", rcli(replica, "DBSIZE"))
h.stop(p)

# -- what the docs say of the deny cache: it outlives a Redis that lost its data ----------------
p, port, mport, log = agent("cache", "redis://127.0.0.1:%d/0" % primary)
c = spop.Conn().connect("127.0.0.1", port)
c.hello()
seq = [c.ratelimit("CACHED")["actions"]["status"] for _ in range(4)]
h.eq("3/10s: allow x3, then deny (from Redis)", ["allow", "allow", "allow", "deny"], seq)
rcli(primary, "FLUSHALL")
h.eq("Redis lost the window, yet the deny cache still denies (conservative)", "deny",
     c.ratelimit("CACHED")["actions"]["status"])
h.eq("... from the cache, not from Redis", "0", rcli(primary, "DBSIZE"))
p.send_signal(signal.SIGHUP)
h.check("a reload empties the cache: Redis decides again (allow)",
        u.wait_for(lambda: c.ratelimit("CACHED")["actions"]["status"] == "allow", 10, 0.2))
c.close()
h.stop(p)
h.done()
