#!/usr/bin/env python3
"""Redis Cluster failover: killing a primary makes the agent answer `error`
for its slots (fail-closed, never a free pass) until the cluster promotes
the replica; then decisions resume without restarting the agent, the
script is loaded on the new primary, and the old primary coming back as a
replica changes nothing."""
import hashlib
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, wait_replicated  # noqa: E402
from t_cluster import Cluster, conn, start_agent, wait_decisions  # noqa: E402

h = Harness()
cl = Cluster(h, node_timeout=1000)
start_agent(h, cl, """
policy transfer 3/1s
policy big 1000000/1h
""")
a = conn(h)
wait_decisions(a, "ACC-WARMUP", "big")

key = "big:limit:v1:{ACC-FO}:1h"
victim = cl.owner(key)
for _ in range(5):
    d = a.ratelimit("ACC-FO", policy="big")["actions"]
h.eq("before: decided on primary %d" % victim, "allow", d["status"])
h.eq("before: recorded on the primary", "5", cl.cli(victim, "ZCARD", key))
# Let the replica catch up so its promotion keeps the count.
h.check("before: the replica has the writes",
        wait_replicated(lambda: cl.cli(victim, "INFO", "replication")),
        cl.cli(victim, "INFO", "replication"))

h.stop(cl.procs[victim], sig=signal.SIGKILL)   # a crash, not a shutdown
statuses = []
reasons = set()
resumed = None
end = time.time() + 60
while time.time() < end:
    d = a.ratelimit("ACC-FO", policy="big")["actions"]
    statuses.append(d["status"])
    if d["status"] == "error":
        reasons.add(d.get("reason"))
    if d["status"] == "allow":
        resumed = d
        break
    time.sleep(0.05)

h.check("primary killed: the next decisions are errors (fail-closed)",
        len(statuses) >= 2 and statuses[0] == "error", statuses[:5])
h.check("while no primary serves the slot: only errors, never allow",
        all(s == "error" for s in statuses[:-1]), sorted(set(statuses)))
h.check("error reasons are Redis failures",
        reasons <= {"redis-unavailable", "redis-timeout", "redis-error"}, reasons)
h.check("replica promoted: decisions resume without restarting the agent", resumed is not None,
        statuses[-3:])
h.check("the agent process is the same one", h.agent.poll() is None)

new_owner = cl.owner(key)
h.check("the slot now belongs to the promoted replica", new_owner not in (None, victim),
        (victim, new_owner))
if new_owner:
    h.eq("count survived the failover (5 before + 1 after)", "6", cl.cli(new_owner, "ZCARD", key))
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lua",
                           "sliding_window.lua"), "rb") as f:
        sha = hashlib.sha1(f.read()).hexdigest()
    h.eq("script loaded on the new primary", "1", cl.cli(new_owner, "SCRIPT", "EXISTS", sha))

# Other accounts on every primary decide again.
fine = [a.ratelimit("ACC-AFTER-%d" % i)["actions"]["status"] for i in range(30)]
h.eq("after failover: accounts on every primary decide", ["allow"] * 30, fine)

# The old primary comes back as a replica of the new one: nothing changes.
cl.start_node(victim)
cl.wait_ok(20)
deadline = time.time() + 20
while time.time() < deadline:
    roles = {p: r for p, r, _ in cl.nodes().values()}
    if roles.get(victim) == "replica":
        break
    time.sleep(0.2)
h.eq("old primary rejoined as a replica", "replica", {p: r for p, r, _ in cl.nodes().values()}.get(victim))
d = wait_decisions(a, "ACC-FO", "big", secs=10)
h.eq("after the old primary rejoined: still decided on the new owner", "allow", d["status"])
h.eq("and recorded there", "7", cl.cli(new_owner, "ZCARD", key))

h.done()
