#!/usr/bin/env python3
"""GCRA under the log's failure rules (issue 30), on both engines (one
agent on redis-engine script, one on redis-engine module, one Redis with
the module):
  - over maxmemory (noeviction): an admission is refused with reason
    redis-oom (the bucket's SET is the decision's first write), a full
    bucket is still denied (a denial writes nothing), nothing is recorded;
    on-redis-error=allow answers fail-open allow with the burst as limit;
  - a maxmemory-policy that may evict keys: every decision refused,
    reason redis-evicts-keys;
  - Redis gone: status=error (fail-closed), never an allow."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, MODULE_SO, wait_for  # noqa: E402
import harness  # noqa: E402
import spop  # noqa: E402

harness.FORCED_ENGINE = ""   # each agent here names its engine
h = Harness()
h.require_module()
h.start_redis(extra=["--loadmodule", MODULE_SO])

ENGINES = ("script", "module")
ports = h.engine_agents("deny-cache off\n"
                        "policy bucket 1/1h algorithm=gcra burst=3\n"
                        "policy open 1/1h algorithm=gcra burst=7 on-redis-error=allow\n", "bucket")
conns = {}
for engine in ENGINES:
    conns[engine] = spop.Conn().connect("127.0.0.1", ports[engine])
    conns[engine].hello()


def ask(engine, key, policy="bucket"):
    return conns[engine].ratelimit(key, policy=policy, timeout=15)["actions"]


for engine in ENGINES:
    h.eq("%s: a new bucket admits" % engine, "allow", ask(engine, "used-" + engine)["status"])
    for _ in range(3):
        ask(engine, "full-" + engine)
    h.eq("%s: a full bucket is denied" % engine, "deny", ask(engine, "full-" + engine)["status"])
tat = {e: h.rcli("GET", "bucket:limit:g1:{full-%s}" % e) for e in ENGINES}

# Over maxmemory.
for i in range(16):
    h.rcli("SET", "fill:%d" % i, "x" * 65536)
h.eq("maxmemory-policy noeviction", "OK", h.rcli("CONFIG", "SET", "maxmemory-policy", "noeviction"))
h.eq("maxmemory 1mb", "OK", h.rcli("CONFIG", "SET", "maxmemory", "1mb"))
keys0 = h.rcli("DBSIZE")
for engine in ENGINES:
    d = ask(engine, "new-" + engine)
    h.eq("%s, over maxmemory: a new bucket gets error/redis-oom" % engine, ("error", "redis-oom"),
         (d.get("status"), d.get("reason")))
    d = ask(engine, "used-" + engine)
    h.eq("%s, over maxmemory: a bucket in use gets error/redis-oom" % engine, ("error", "redis-oom"),
         (d.get("status"), d.get("reason")))
    h.eq("%s, over maxmemory: a full bucket is still denied" % engine, "deny",
         ask(engine, "full-" + engine)["status"])
    d = ask(engine, "open-" + engine, policy="open")
    h.eq("%s, over maxmemory, on-redis-error=allow: fail-open allow, the burst as limit" % engine,
         ("allow", "redis-oom", 7), (d.get("status"), d.get("reason"), d.get("limit")))
h.eq("over maxmemory: nothing recorded (as many keys as before)", keys0, h.rcli("DBSIZE"))
h.eq("over maxmemory: the full buckets' TATs did not move", tat,
     {e: h.rcli("GET", "bucket:limit:g1:{full-%s}" % e) for e in ENGINES})
h.eq("maxmemory lifted", "OK", h.rcli("CONFIG", "SET", "maxmemory", "0"))
for engine in ENGINES:
    d = ask(engine, "new-" + engine)
    h.eq("%s, after: the refused one was not counted (remaining 2)" % engine, ("allow", 2),
         (d.get("status"), d.get("remaining")))

# A Redis that may evict keys.
h.eq("maxmemory-policy allkeys-lru", "OK", h.rcli("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"))
for engine in ENGINES:
    h.check("%s, evicting Redis: refused, redis-evicts-keys" % engine,
            wait_for(lambda: ask(engine, "ev-" + engine).get("reason") == "redis-evicts-keys", 15))
    d = ask(engine, "ev2-" + engine)
    h.eq("%s, evicting Redis: an error, never an allow" % engine, ("error", "redis-evicts-keys"),
         (d.get("status"), d.get("reason")))
h.eq("evicting Redis: nothing recorded", "0", h.rcli("EXISTS", "bucket:limit:g1:{ev2-script}",
                                                    "bucket:limit:g1:{ev2-module}"))
h.rcli("CONFIG", "SET", "maxmemory-policy", "noeviction")

# Redis gone: fail-closed.
h.stop_redis()
for engine in ENGINES:
    d = ask(engine, "gone-" + engine)
    h.check("%s, Redis down: status=error (fail-closed), reason redis-*" % engine,
            d.get("status") == "error" and str(d.get("reason", "")).startswith("redis-"), d)
for c in conns.values():
    c.close()
h.done()
