#!/usr/bin/env python3
"""Redis over maxmemory with noeviction (issue 10 item 4): no decision is
admitted or recorded. The script's first write is its ZADD, which Redis
refuses over maxmemory (a trim first would have let it through): the agent
answers status=error reason=redis-oom on a fail-closed policy (fail-open
allow with that reason on on-redis-error=allow), counts
redis_errors_total{kind="oom"} and errors_total{reason="redis-oom"}, logs
event=redis_oom at warn, and Redis's keys and memory do not grow. Once
memory is back under the limit, decisions are exact again."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

h = Harness()
h.start_redis()
mport = free_port()
h.start_agent("""
metrics 127.0.0.1:%d
threads 1
redis-timeout 5s
policy transfer 3/1m
policy api 2/10s 5/1h
policy reads 100/1m on-redis-error=allow
""" % mport)
h.check("agent connected to Redis", u.wait_ready(mport, 1), h.log_tail())
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()


def ask(key, policy="transfer", cost=None):
    return c.ratelimit(key, policy=policy, cost=cost)["actions"]


def used_memory():
    # What the decisions kept: the Lua heap's garbage collected first (a
    # no-writes script runs over maxmemory), in case it is counted here.
    # Clients' buffers are left out too: a connection the agent opens in
    # between (its live-control thread's, a second link) is no recorded data.
    h.rcli("EVAL", "#!lua flags=no-writes\ncollectgarbage('collect') return 1", "0")
    info = dict(line.split(":", 1) for line in h.rcli("INFO", "memory").splitlines() if ":" in line)
    if "used_memory" not in info:
        return -1
    return int(info["used_memory"]) - int(info.get("mem_clients_normal", 0))


# Before the limit: one account in use, one full.
h.eq("before: allowed", "allow", ask("ACC-USED")["status"])
for _ in range(3):
    ask("ACC-FULL")
h.eq("before: ACC-FULL is full", "deny", ask("ACC-FULL")["status"])

# Fill Redis with other keys (1 MB), then put maxmemory below what it uses.
for i in range(16):
    h.rcli("SET", "fill:%d" % i, "x" * 65536)
h.eq("maxmemory-policy noeviction", "OK", h.rcli("CONFIG", "SET", "maxmemory-policy", "noeviction"))
h.eq("maxmemory 1mb", "OK", h.rcli("CONFIG", "SET", "maxmemory", "1mb"))
h.check("Redis is over maxmemory (a SET is refused)",
        h.rcli("SET", "probe", "x").startswith("OOM"), h.rcli("INFO", "memory"))
keys0, mem0 = h.rcli("DBSIZE"), used_memory()
before = u.scrape(mport)

d = ask("ACC-USED")
h.eq("over maxmemory: an account in use gets error/redis-oom",
     ("error", "redis-oom"), (d["status"], d.get("reason")))
d = ask("ACC-NEW")
h.eq("over maxmemory: a new account gets error/redis-oom", ("error", "redis-oom"),
     (d["status"], d.get("reason")))
d = ask("ACC-MW", policy="api")
h.eq("over maxmemory: two windows, error/redis-oom", ("error", "redis-oom"),
     (d["status"], d.get("reason")))
d = ask("ACC-R", policy="reads")
h.eq("over maxmemory, on-redis-error=allow: fail-open allow with reason redis-oom",
     ("allow", "redis-oom"), (d["status"], d.get("reason")))
d = ask("ACC-FULL")
h.eq("over maxmemory: a full account is still denied (nothing to record)", "deny", d["status"])
NEW = 2000
results = [ask("ACC-N%d" % i, cost=2)["status"] for i in range(NEW)]
h.eq("over maxmemory: %d decisions on new accounts, none allowed" % NEW, {"error"}, set(results))

h.eq("nothing recorded: ACC-USED still holds 1 entry", "1", h.rcli("ZCARD", "transfer:limit:v1:ACC-USED"))
h.eq("nothing recorded: no new key", "0",
     h.rcli("EXISTS", "transfer:limit:v1:ACC-NEW", "api:limit:v1:{ACC-MW}:10s",
            "api:limit:v1:{ACC-MW}:1h", "reads:limit:v1:ACC-R", "transfer:limit:v1:ACC-N0"))
h.eq("Redis holds as many keys as before", keys0, h.rcli("DBSIZE"))
mem1 = used_memory()
# (128 KB of slack: Redis itself allocates some 50-75 KB once in this run,
# whatever the number of decisions (200 or 2,000: the same), against the
# 2,000 keys and entries that recording them would take, 400 KB or more)
h.check("Redis memory did not grow (%d -> %d)" % (mem0, mem1), mem1 <= mem0 + 131072)

# A batch (redis-batch; EVAL of the file, after the memory check: Redis caches
# the script's body) whose first decision is a deny: its trim is a write,
# and Redis checks a script's writes against maxmemory only until it has
# written once, so the script holds a batch's trims back until every
# decision has tried its admission. Here the second decision must be refused.
with open(os.path.join(u.ROOT, "lua", "sliding_window.lua")) as f:
    script = f.read()
out = h.rcli("EVAL", script, 2, "transfer:limit:v1:ACC-FULL", "transfer:limit:v1:ACC-BATCH",
             "batch", 2, 1, 1, 3, 60000, 1, 1, 3, 60000)
h.check("over maxmemory, a batch [deny, new account]: the second is refused (OOM)",
        "OOM" in out, out)
h.eq("... and nothing recorded for it", "0", h.rcli("EXISTS", "transfer:limit:v1:ACC-BATCH"))
h.eq("... and the full account is still full", 3, h.units("transfer:limit:v1:ACC-FULL"))
h.eq("... and Redis holds as many keys as before", keys0, h.rcli("DBSIZE"))

after = u.scrape(mport)
h.eq("redis_errors_total{kind=oom} counts the refusals", NEW + 3 + 1,
     after.get("redis_errors_total", kind="oom") - before.get("redis_errors_total", kind="oom"))
h.eq("errors_total{reason=redis-oom} too", NEW + 3 + 1,
     after.get("errors_total", reason="redis-oom") - before.get("errors_total", reason="redis-oom"))
h.eq("not counted as script errors", before.get("redis_errors_total", kind="script"),
     after.get("redis_errors_total", kind="script"))
h.check("logged at warn as event=redis_oom",
        u.log_count(h, "level=warn event=redis_oom") >= 1, h.log_tail())

# Memory back: decisions are exact again.
h.eq("maxmemory lifted", "OK", h.rcli("CONFIG", "SET", "maxmemory", "0"))
d = ask("ACC-USED")
h.eq("after: allowed, remaining 1 (the refused ones were not counted)",
     ("allow", 1), (d["status"], d.get("remaining")))

c.close()
h.done()
