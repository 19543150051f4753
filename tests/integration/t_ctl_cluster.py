#!/usr/bin/env python3
"""ratelimit-spoa ctl on a real Redis Cluster (3 primaries + 3 replicas,
t_cluster.py's Cluster) with two agents on it: the same commands as
t_ctl.py (run_common), plus what a cluster adds: ctl is given a seed that
does not serve the {ctl} slot nor the accounts' slots, so every command
is routed by its key's slot after a MOVED; the live-control keys share one
slot; accounts on different primaries are shown and reset."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Harness  # noqa: E402
from t_cluster import EngineCluster, key_slot, start_agent, wait_decisions  # noqa: E402
from t_ctl import POLICIES, conn, ctl, ctl_json, run_common  # noqa: E402


h = Harness()
cl = EngineCluster(h)
engine = "redis-engine %s\n" % harness.FORCED_ENGINE if harness.FORCED_ENGINE else ""
start_agent(h, cl, POLICIES + engine)
body = harness.force_threads("redis cluster://%s\nredis-timeout 500ms\nthreads 1\n%s"
                             % (cl.seeds(), POLICIES))
_, bport, _, blog = h.spawn_side_agent("agent-b", body)
agents = [conn(h.agent_port), conn(bport)]
for c in agents:
    wait_decisions(c, "jwt:ACC-WARMUP", "transfer")

keys = ["ratelimit-spoa:{ctl}:version", "ratelimit-spoa:{ctl}:overrides",
        "ratelimit-spoa:{ctl}:events", "ratelimit-spoa:{ctl}:denied:1"]
h.eq("the live-control keys share one slot", 1, len({key_slot(k) for k in keys}))

# ctl's own config: the agents' policies, one seed that serves neither the
# {ctl} slot nor the first account below: its commands go there by MOVED
ctl_owner = cl.owner(keys[0])
acc_owner = cl.owner("minute:limit:v1:{jwt:ACC-S}:1m")
seed = [p for p in cl.primaries() if p not in (ctl_owner, acc_owner)]
h.check("a primary serves neither the {ctl} slot nor jwt:ACC-S's", seed, (ctl_owner, acc_owner))
# (agent A's file too: the reload checks of run_common edit it)
conf = os.path.join(h.tmp, "agent.conf")
with open(conf) as f:
    text = f.read()
one_seed = "redis cluster://127.0.0.1:%d\n" % (seed or cl.primaries())[0]
text = text.replace("redis cluster://%s\n" % cl.seeds(), one_seed)
h.check("ctl's file names that one seed", one_seed in text, text)
with open(conf, "w") as f:
    f.write(text)

run_common(h, conf, agents, [h.agent_log, blog], cl.rcli)

# accounts on each primary: show and reset find their keys
by_node = {}
i = 0
while len(by_node) < len(cl.primaries()) and i < 1000:
    acc = "jwt:ACC-N%d" % i
    by_node.setdefault(cl.owner("slow:limit:v1:{%s}:1m" % acc), acc)
    i += 1
h.eq("an account on every primary", len(cl.primaries()), len(by_node))
for port, acc in sorted(by_node.items()):
    agents[0].ratelimit(acc, policy="slow")
    s = ctl_json(h, conf, "show", "slow", acc)
    h.eq("show %s (on :%d): used 1" % (acc, port), 1, s and s["windows"][0]["used"])
    rc, _, err = ctl(conf, "reset", "slow", acc)
    h.check("reset %s (on :%d): its key deleted" % (acc, port), rc == 0 and "keys_deleted=1" in err,
            err)
    h.eq("the key is gone from its primary", "0", cl.rcli("EXISTS", "slow:limit:v1:{%s}:1m" % acc))
h.done()
