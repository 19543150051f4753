#!/usr/bin/env python3
"""Decisions sent during start-up, before the agent's Redis link is set up:
they wait for the link up to their deadline (redis-timeout) and are
answered from Redis once it is reachable within it, in the order they came
(one Redis; sentinel://, the sentinel started after the decisions;
cluster://, every node frozen while the agent starts, thawed after them); with no Redis within the
deadline they are refused with the documented reason (redis-unavailable:
error on a fail-closed policy, allow on a fail-open one), only once the
deadline has passed. No /readyz wait here: that gap is what this file
tests."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port  # noqa: E402
import spop  # noqa: E402
from t_cluster import Cluster  # noqa: E402

h = Harness()


def conn(port):
    c = spop.Conn().connect("127.0.0.1", port)
    c.hello()
    return c


def send(c, key, policy):
    """A NOTIFY for (<policy>, <key>), not waited for: its (stream, frame)."""
    sid = c.next_stream_id
    c.next_stream_id += 2
    c.send_notify(sid, 1, [("ratelimit", [("policy", policy), ("key", key)])])
    return sid


def answer(c, sid, timeout=30.0):
    """(status, reason) of the ACK of stream <sid>."""
    a = c.wait_ack(sid, 1, timeout)["actions"]
    return a.get("status"), a.get("reason")


# -- Redis comes up while the decisions wait --------------------------------
# Redis's port is chosen, but nothing listens there yet: the agent starts,
# its link fails and retries with backoff, and decisions queue meanwhile.
h.redis_port = free_port()
h.start_agent("""
threads 1
redis-timeout 20s
policy startup 3/1m
policy reads 100/1m on-redis-error=allow
""")
c = conn(h.agent_port)
sids = [send(c, "ACC-START", "startup") for _ in range(4)]
read_sid = send(c, "ACC-START", "reads")
time.sleep(0.5)   # a few failed attempts of the link (not needed for the checks)
h.start_redis()
got = [answer(c, s) for s in sids]
h.eq("start-up: decisions sent before Redis was up are answered from Redis, in order",
     [("allow", None)] * 3 + [("deny", None)], got)
h.eq("start-up: a fail-open policy's decision is answered from Redis too",
     ("allow", None), answer(c, read_sid))
h.eq("start-up: the three admissions are recorded", 3, h.units("startup:limit:v1:ACC-START"))
c.close()

# -- no Redis within the deadline: refused once it has passed ----------------
# An agent of its own on a port where nothing ever listens; redis-timeout 3s
# is longer than the link's longest backoff (2 s), so every decision waits
# for its whole deadline.
nowhere = free_port()
proc, port, mport, log = h.spawn_side_agent("nowhere", """threads 1
redis redis://127.0.0.1:%d/0
redis-timeout 3s
policy startup 3/1m
policy reads 100/1m on-redis-error=allow
""" % nowhere)
c = conn(port)
t0 = time.monotonic()
closed, opened = send(c, "ACC-NONE", "startup"), send(c, "ACC-NONE", "reads")
got = (answer(c, closed), answer(c, opened))
elapsed = time.monotonic() - t0
h.eq("no Redis: fail-closed -> error, fail-open -> allow, both redis-unavailable",
     (("error", "redis-unavailable"), ("allow", "redis-unavailable")), got)
# a lower bound only: a loaded machine can make it later, never earlier
h.check("no Redis: refused only once the deadline (3 s) has passed", elapsed >= 2.9,
        "answered after %.2f s" % elapsed)
c.close()
h.stop(proc)

# -- sentinel://: the sentinel that names the primary comes up later --------
primary, sport = free_port(), free_port()
h.start_redis_node(primary)
proc, port, mport, log = h.spawn_side_agent("sentinel", """threads 1
redis sentinel://127.0.0.1:%d/rlstart
redis-timeout 20s
policy startup 3/1m
""" % sport)
c = conn(port)
sids = [send(c, "ACC-SENT", "startup") for _ in range(4)]
time.sleep(0.5)   # the agent asks a sentinel that is not there yet
h.start_sentinel(sport, primary, "rlstart")
h.eq("sentinel://: decisions sent before the sentinel was up are answered from the primary "
     "it names, in order", [("allow", None)] * 3 + [("deny", None)], [answer(c, s) for s in sids])
c.close()
h.stop(proc)

# -- cluster://: no node answers while the agent starts ---------------------
# Every node frozen (SIGSTOP: the kernel still accepts the connections, no
# setup reply and no slot map comes), long enough for the decisions to be
# sent; a node timeout of 15 s keeps the nodes from failing each other over
# the pause.
cl = Cluster(h, node_timeout=15000)
for p in cl.ports:
    os.kill(cl.procs[p].pid, signal.SIGSTOP)
try:
    proc, port, mport, log = h.spawn_side_agent("cluster", """threads 1
redis cluster://%s
redis-timeout 20s
policy startup 3/1m
""" % cl.seeds())
    c = conn(port)
    sids = [send(c, "ACC-CLUSTER", "startup") for _ in range(4)]
    time.sleep(0.5)
finally:
    for p in cl.ports:
        os.kill(cl.procs[p].pid, signal.SIGCONT)
h.eq("cluster://: decisions sent before the agent had a slot map are answered once it has "
     "one and the slot's primary, in order", [("allow", None)] * 3 + [("deny", None)],
     [answer(c, s) for s in sids])
h.eq("cluster://: the three admissions are recorded on the slot's primary", "3",
     cl.rcli("ZCARD", "startup:limit:v1:{ACC-CLUSTER}:1m"))
c.close()
h.done()
