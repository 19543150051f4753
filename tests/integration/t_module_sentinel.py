#!/usr/bin/env python3
"""Sentinel failover from a primary with the module to a replica without
it (issue 21): the agent on `redis-engine auto` decides with
RATELIMIT.DECIDE on the primary, the replica (no module) holds the same
windows through plain replication, and after SENTINEL FAILOVER the agent
falls back to the script on the new primary and goes on counting where the
module stopped: exactly the limit across the failover, never a free pass.

Needs an agent with the redis-engine directive; until then this test says
so and stops."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, MODULE_SO, free_port, wait_port  # noqa: E402
import harness  # noqa: E402
import spop  # noqa: E402

harness.FORCED_ENGINE = ""   # the primary has the module, the replica not
MASTER = "rlmod"
h = Harness()
h.require_module()


cli = harness.rcli


def wait_until(what, pred, secs=30):
    return h.wait_until(what, pred, secs)


conf = os.path.join(h.tmp, "agent.conf")
h.agent_port = free_port()


def write_conf(url):
    with open(conf, "w") as f:
        f.write("listen 127.0.0.1:%d\nredis %s\nredis-timeout 500ms\nthreads 2\nredis-engine auto\n"
                "policy big 40/1h\n" % (h.agent_port, url))


write_conf("redis://127.0.0.1:1/0")
probe = subprocess.run([AGENT, "-c", "-f", conf], capture_output=True, text=True)
if probe.returncode != 0 and "redis-engine" in probe.stdout + probe.stderr:
    print("# skipped: this agent has no redis-engine directive yet")
    h.ok("skipped until the agent can choose its engine")
    h.done()

p1, p2 = free_port(), free_port()
h.start_redis_node(p1, ["--loadmodule", MODULE_SO])
h.start_redis_node(p2, replicaof=p1)
sports = [free_port() for _ in range(3)]
for s in sports:
    h.start_sentinel(s, p1, MASTER)
wait_until("the replica is in sync", lambda: "master_link_status:up" in cli(p2, "INFO", "replication"))
wait_until("the sentinels know the replica and each other",
           lambda: all("127.0.0.1" in cli(s, "SENTINEL", "REPLICAS", MASTER) and
                       cli(s, "SENTINEL", "CKQUORUM", MASTER).startswith("OK") for s in sports))
h.check("the primary has the module, the replica not",
        "ratelimit" in cli(p1, "MODULE", "LIST") and "ratelimit" not in cli(p2, "MODULE", "LIST"))

write_conf("sentinel://%s/%s" % (",".join("127.0.0.1:%d" % s for s in sports), MASTER))
h.agent = h.spawn([AGENT, "-f", conf], h.agent_log)
h.check("agent listens", wait_port(h.agent_port, 15))
a = spop.Conn().connect("127.0.0.1", h.agent_port)
a.hello()


def decide(key):
    return a.ratelimit(key, policy="big")["actions"]["status"]


def wait_decided(key, secs=30):
    end, seen = time.time() + secs, []
    while time.time() < end:
        s = decide(key)
        seen.append(s)
        if s in ("allow", "deny"):
            return s, seen
        time.sleep(0.05)
    return None, seen


s, _ = wait_decided("ACC-WARM")
h.check("the agent decides through the sentinels", s == "allow")
cli(p1, "CONFIG", "RESETSTAT")
first = [decide("ACC-FO") for _ in range(25)]
h.eq("25 of 40 on the primary", ["allow"] * 25, first)
h.check("decided by the module on the primary", "cmdstat_ratelimit.decide:calls=" in cli(p1, "INFO", "commandstats"))
h.check("the replica has the writes", harness.wait_replicated(lambda: cli(p1, "INFO", "replication")))
h.eq("the replica (no module) holds the module's window", "25", cli(p2, "ZCARD", "big:limit:v1:ACC-FO"))

h.eq("SENTINEL FAILOVER accepted", "OK", cli(sports[0], "SENTINEL", "FAILOVER", MASTER))
wait_until("the replica is the primary", lambda: "role:master" in cli(p2, "INFO", "replication"))
# (until the old primary follows the new one it still takes writes, which
# its resync then drops: Sentinel's own window, module or not; the agent is
# asked once it is over)
wait_until("the old primary follows the new one", lambda: "role:slave" in cli(p1, "INFO", "replication"))
s, seen = wait_decided("ACC-FO")
h.check("after failover: decided again (the 26th)", s == "allow", seen[-3:])
h.check("while switching: errors only, never a free pass",
        all(x in ("error", "allow") for x in seen) and seen.count("allow") <= 1, seen)
rest = [decide("ACC-FO") for _ in range(20)]
h.eq("the script on the new primary goes on from the module's count: 14 more, then denied",
     ["allow"] * 14 + ["deny"] * 6, rest)
h.eq("exactly 40 recorded across the failover", "40", cli(p2, "ZCARD", "big:limit:v1:ACC-FO"))
stats = cli(p2, "INFO", "commandstats")
h.check("the new primary (no module) decided with the script",
        "cmdstat_evalsha" in stats or "cmdstat_eval:" in stats, stats)
h.check("agent process unchanged", h.agent.poll() is None)
h.done()
