#!/usr/bin/env python3
"""Redis Cluster and Sentinel over TLS (an agent built with make WITH_TLS=1).

Cluster: 3 primaries + 3 replicas, TLS only (--tls-port, --tls-cluster,
--tls-replication), the agent on cluster+tls:// seeds: keys land on several
primaries, the story holds. Sentinel: a TLS primary and replica and three
TLS sentinels, the agent on sentinel+tls:// (one sentinel named
"localhost": resolved off the loop, verified by name): it finds the primary
over TLS and the story holds, and a SENTINEL FAILOVER is followed. A wrong
CA never allows."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import AGENT, Harness, agent_tls, free_port, wait_port  # noqa: E402
import harness as u  # noqa: E402
from t_cluster import Cluster, conn, start_agent, wait_decisions  # noqa: E402

h = Harness()
if not agent_tls():
    h.fail("the agent under test has no TLS (build with make WITH_TLS=1)")
    h.done()
certs = h.tls_certs()

# -- Redis Cluster over TLS ----------------------------------------------------------------------
cl = Cluster(h, tls=certs)
start_agent(h, cl, certs.agent_conf(client=True) + "policy transfer 3/1s\npolicy big 1000000/1h\n")
c = conn(h)
d = wait_decisions(c, "warm", "big", secs=30)
h.check("cluster+tls://: the agent decides", d and d.get("status") == "allow", d)
keys = ["acct-%d" % i for i in range(12)]
owners = {cl.owner("transfer:limit:v1:{%s}:1s" % k) for k in keys}
h.check("the keys live on several primaries", len(owners) >= 2, owners)
bad = []
for k in keys:
    seq = [c.ratelimit(k)["actions"]["status"] for _ in range(4)]
    if seq != ["allow", "allow", "allow", "deny"]:
        bad.append((k, seq))
h.eq("the story on every key over TLS (3 allow, then deny)", [], bad)
h.eq("the windows are in the TLS cluster", "3", cl.rcli("ZCARD", "transfer:limit:v1:{acct-0}:1s"))
c.close()
h.stop(h.agent)
for p in list(cl.procs):
    cl.kill(p)

# -- Sentinel over TLS -------------------------------------------------------------------------------
MASTER = "rltls"


def scli(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port)] + certs.cli_args() + [str(a) for a in args],
                         capture_output=True, text=True, timeout=10)
    return out.stdout.strip()


def wait_until(what, pred, secs=30):
    if not u.wait_for(pred, secs, 0.2):
        h.fail("timed out waiting: " + what)


p1, p2 = free_port(), free_port()
h.start_redis_node(p1, tls=certs)
h.start_redis_node(p2, replicaof=p1, tls=certs)
sports = [free_port() for _ in range(3)]
for s in sports:
    h.start_sentinel(s, p1, MASTER, tls=certs)
wait_until("the TLS replica is in sync", lambda: "master_link_status:up" in scli(p2, "INFO", "replication"))
wait_until("the TLS sentinels know the replica and each other",
           lambda: all(scli(s, "SENTINEL", "CKQUORUM", MASTER).startswith("OK") and
                       "127.0.0.1" in scli(s, "SENTINEL", "REPLICAS", MASTER) for s in sports))

h.agent_port = free_port()
url = "sentinel+tls://localhost:%d,%s/%s" % (sports[0], ",".join("127.0.0.1:%d" % s for s in sports[1:]),
                                             MASTER)


def run_agent(tls_conf):
    h.stop(h.agent)
    path = os.path.join(h.tmp, "agent-sentinel.conf")
    with open(path, "w") as f:
        f.write("listen 127.0.0.1:%d\nredis %s\nredis-timeout 500ms\nthreads 2\n" % (h.agent_port, url))
        f.write(tls_conf + "policy transfer 3/1s\npolicy big 1000000/1h\n")
    h.agent = h.spawn([AGENT, "-f", path], h.agent_log)
    if not wait_port(h.agent_port):
        raise RuntimeError("agent did not start:\n" + h.log_tail())


run_agent(certs.agent_conf(client=True, ca=certs.other_ca))
c = conn(h)
seen = [c.ratelimit("s-wrong-%d" % i)["actions"]["status"] for i in range(10)]
c.close()
h.check("sentinel+tls:// with a wrong CA: never allow", "allow" not in seen, seen)

run_agent(certs.agent_conf(client=True))
c = conn(h)
d = wait_decisions(c, "s-warm", "big", secs=30)
h.check("sentinel+tls://: the agent finds the primary through TLS sentinels and decides",
        d and d.get("status") == "allow", d)
h.eq("the story through Sentinel over TLS", ["allow", "allow", "allow", "deny"],
     [c.ratelimit("S-ACC")["actions"]["status"] for _ in range(4)])
h.eq("the window is on the TLS primary", "3", scli(p1, "ZCARD", "transfer:limit:v1:S-ACC"))

scli(sports[1], "SENTINEL", "FAILOVER", MASTER)
wait_until("the sentinels name the replica as primary",
           lambda: scli(sports[1], "SENTINEL", "get-master-addr-by-name", MASTER).split()[-1:] == [str(p2)])
end = time.time() + 30
ok = False
while time.time() < end and not ok:
    d = c.ratelimit("S-AFTER", policy="big")["actions"]
    ok = d.get("status") == "allow" and scli(p2, "EXISTS", "big:limit:v1:S-AFTER") == "1"
    time.sleep(0.2)
h.check("after a failover the agent decides on the new TLS primary", ok, d)
c.close()
h.done()
