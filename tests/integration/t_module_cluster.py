#!/usr/bin/env python3
"""RATELIMIT.DECIDE in Redis Cluster (issue 21): two primaries with the
module. The command declares its keys like EVAL, so a node redirects a key
it does not serve (MOVED), refuses a batch across slots (CROSSSLOT), sends
a key being migrated to its new owner (ASK), and the windows the module
wrote migrate like any sorted set or hash: after the slot moved, the new
owner goes on counting where the old one stopped, TTLs included."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, MODULE_SO, REDIS_SERVER, REDIS_START_SECS, wait_for, wait_port  # noqa: E402
import resp  # noqa: E402
import harness  # noqa: E402
from t_cluster import cluster_ports, key_slot  # noqa: E402

# (these tests choose where the module is loaded: not SPOA_TEST_REDIS_ENGINE)
harness.FORCED_ENGINE = ""

D = "RATELIMIT.DECIDE"


h = Harness()
h.require_module()
ports = []
for name in ("a", "b"):
    for _ in range(5):
        p = cluster_ports(1)[0]
        d = os.path.join(h.tmp, "node-" + name)
        os.makedirs(d, exist_ok=True)
        proc = h.spawn([REDIS_SERVER, "--port", str(p), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
                        "--save", "", "--appendonly", "no", "--dir", d, "--loadmodule", MODULE_SO],
                       os.path.join(h.tmp, "redis-%s.log" % name))
        if wait_port(p, max(15, REDIS_START_SECS)) and proc.poll() is None:
            ports.append(p)
            break
    else:
        h.fail("node %s started" % name)
        h.done()
A, B = ports
ca, cb = resp.Redis(A), resp.Redis(B)
ida, idb = ca.call("CLUSTER", "MYID"), cb.call("CLUSTER", "MYID")
ca.call("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
cb.call("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
ca.call("CLUSTER", "MEET", "127.0.0.1", B)
h.check("a two-node cluster with the module on both",
        wait_for(lambda: all("cluster_state:ok" in c.call("CLUSTER", "INFO") for c in (ca, cb)), 30))

acc_a = next("{acc-%d}" % i for i in range(1000) if key_slot("{acc-%d}" % i) <= 8191)
acc_b = next("{acc-%d}" % i for i in range(1000) if key_slot("{acc-%d}" % i) > 8191)
LA, BA = "t:limit:v1:%s:1h" % acc_a, "t:limit:b1:%s:1d" % acc_a
LB = "t:limit:v1:%s:1h" % acc_b
ARGS = [1, 5, 3600000, 20, "86400000:60000"]

x = ca.call(D, 2, LA, BA, *ARGS)
h.check("node A decides on a key it serves", isinstance(x, list) and x[0] == 1, x)
x = ca.call(D, 1, LB, 1, 5, 3600000)
h.check("node A redirects a key of node B: MOVED %d 127.0.0.1:%d" % (key_slot(LB), B),
        isinstance(x, resp.Err) and x == "MOVED %d 127.0.0.1:%d" % (key_slot(LB), B), x)
x = ca.call(D, 2, LA, LB, "batch", 2, 1, 1, 5, 3600000, 1, 1, 5, 3600000)
h.check("a batch across slots: CROSSSLOT, nothing decided", isinstance(x, resp.Err) and x.startswith("CROSSSLOT"), x)
h.eq("CROSSSLOT wrote nothing", ["1:1"], ca.call("ZRANGE", LA, 0, -1))
x = cb.call(D, 1, LB, 1, 5, 3600000)
h.check("node B decides on its own key", isinstance(x, list) and x[0] == 1, x)
for _ in range(2):
    ca.call(D, 2, LA, BA, *ARGS)
before = (ca.call("ZRANGE", LA, 0, -1, "WITHSCORES"), ca.call("HGETALL", BA),
          ca.call("PEXPIRETIME", LA), ca.call("PEXPIRETIME", BA))
h.eq("3 of 5 on node A", ["1:1", "2:1", "3:1"], before[0][0::2])

# Migrate the account's slot from A to B, as redis-cli --cluster reshard does.
slot = key_slot(LA)
h.eq("B imports slot %d" % slot, "OK", cb.call("CLUSTER", "SETSLOT", slot, "IMPORTING", ida))
h.eq("A migrates slot %d" % slot, "OK", ca.call("CLUSTER", "SETSLOT", slot, "MIGRATING", idb))
h.eq("MIGRATE the module's keys (a sorted set and a hash)", "OK",
     ca.call("MIGRATE", "127.0.0.1", B, "", 0, 5000, "KEYS", LA, BA))
x = ca.call(D, 2, LA, BA, *ARGS)
h.check("during the migration node A answers ASK for the moved keys",
        isinstance(x, resp.Err) and x.startswith("ASK %d 127.0.0.1:%d" % (slot, B)), x)
r = cb.pipeline([["ASKING"], [D, 2, LA, BA, *ARGS]])
h.check("ASKING + the decision on node B: the 4th of 5, the count went with the keys",
        r[0] == "OK" and isinstance(r[1], list) and r[1][0] == 1 and r[1][2] == 1, r)
for c in (ca, cb):
    c.call("CLUSTER", "SETSLOT", slot, "NODE", idb)
x = ca.call(D, 2, LA, BA, *ARGS)
h.check("the slot is B's: node A redirects the account (MOVED)",
        isinstance(x, resp.Err) and x == "MOVED %d 127.0.0.1:%d" % (slot, B), x)
x = cb.call(D, 2, LA, BA, *ARGS)
h.check("after the migration node B admits the 5th", isinstance(x, list) and x[0] == 1 and x[2] == 0, x)
x = cb.call(D, 2, LA, BA, *ARGS)
h.check("and denies the 6th: exactly the limit across the migration", isinstance(x, list) and x[0] == 0, x)
h.eq("the entries written on A are on B, in order", ["1:1", "2:1", "3:1", "4:1", "5:1"],
     cb.call("ZRANGE", LA, 0, -1))
h.check("the TTLs came with the keys (and the admissions on B moved them on)",
        cb.call("PEXPIRETIME", LA) >= before[2] and cb.call("PEXPIRETIME", BA) >= before[3] > 0)
h.eq("nothing is left on node A", 0, ca.call("CLUSTER", "COUNTKEYSINSLOT", slot))
h.done()
