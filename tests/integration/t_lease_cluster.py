#!/usr/bin/env python3
"""In-flight leases on a real Redis Cluster (issue 38; t_cluster.py's
Cluster, 3 primaries + 3 replicas), two agents on it, `policy export
100/1h inflight=2 lease=10m`.

- An account's leases key carries the account's hash tag
  ("export:inflight:l1:{<account>}"), so it is in the slot of the account's
  windows and decided with them in one atomic call.
- Two requests of one account over the two agents are admitted, a third
  is refused `in-flight` and recorded in no window; the leases are on the
  primary that serves the account's slot.
- A `ratelimit-done` to the other agent than the one that admitted (any
  agent releases) frees a slot, and the next request passes; a second
  release of the same lease changes nothing.
- Accounts in other slots (on other primaries) are counted apart."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Harness, wait_for  # noqa: E402
import spop  # noqa: E402
from t_cluster import EngineCluster, key_slot, start_agent, wait_decisions  # noqa: E402

POLICIES = "policy warm 10/1s\npolicy export 100/1h inflight=2 lease=10m\n"


def done(c, key, lease):
    """The response phase's message: notify ratelimit-done(policy, key, lease)."""
    return c.notify([("ratelimit-done", [("policy", "export"), ("key", key), ("lease", lease)])])


h = Harness()
cl = EngineCluster(h)
engine = "redis-engine %s\n" % harness.FORCED_ENGINE if harness.FORCED_ENGINE else ""
start_agent(h, cl, POLICIES + engine)
body = harness.force_threads("redis cluster://%s\nredis-timeout 500ms\nthreads 2\n%s%s"
                             % (cl.seeds(), POLICIES, engine))
_, bport, _, _ = h.spawn_side_agent("agent-b", body)
conns = []
for port in (h.agent_port, bport):
    c = spop.Conn().connect("127.0.0.1", port)
    c.hello()
    wait_decisions(c, "jwt:ACC-WARMUP", "warm")
    conns.append(c)
a, b = conns


def ask(c, key):
    return c.ratelimit(key, policy="export", timeout=15)["actions"]


def leases(acc):
    return cl.rcli("ZCARD", "export:inflight:l1:{%s}" % acc)


ACC = "jwt:ACC-L1"
LKEY = "export:inflight:l1:{%s}" % ACC
h.eq("the leases are in the slot of the account's windows", key_slot("export:limit:v1:{%s}:1h" % ACC),
     key_slot(LKEY))
r1, r2, r3 = ask(a, ACC), ask(b, ACC), ask(a, ACC)
h.eq("two admitted over the two agents, the third refused in-flight",
     [("allow", ""), ("allow", ""), ("deny", "in-flight")],
     [(r.get("status"), r.get("reason", "")) for r in (r1, r2, r3)])
h.eq("Redis holds the two running leases", "2", leases(ACC))
h.eq("the refused request was recorded in no window (the hour holds 2)", "2",
     cl.rcli("ZCARD", "export:limit:v1:{%s}:1h" % ACC))
h.eq("on the primary that serves the account's slot", "2", cl.cli(cl.owner(LKEY), "ZCARD", LKEY))

# Any agent releases: the lease agent A gave, released through agent B.
ack = done(b, ACC, r1.get("lease"))
h.check("ratelimit-done acknowledged", ack is not None, ack)
h.eq("the release reached the account's primary", "1", wait_for(lambda: leases(ACC) == "1" and "1", 15))
h.eq("the next request passes", "allow", ask(a, ACC).get("status"))
done(a, ACC, r1.get("lease"))
# (the agent acknowledges first and releases after: a later request on the
# same connection is answered after that release went out)
h.eq("the account is at its bound again", ("deny", "in-flight"),
     (lambda r: (r.get("status"), r.get("reason", "")))(ask(b, ACC)))

# Accounts in other slots (other primaries) have their own slots.
others = ["jwt:ACC-L%d" % i for i in range(2, 8)]
owners = set(cl.owner("export:inflight:l1:{%s}" % o) for o in others)
h.check("the other accounts' leases are on several primaries", len(owners) >= 2, owners)
got = [ask((a, b)[i % 2], o).get("status") for i, o in enumerate(others)]
h.eq("each other account is admitted its first request", ["allow"] * len(others), got)
for c in conns:
    c.close()
h.done()
