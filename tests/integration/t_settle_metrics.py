#!/usr/bin/env python3
"""settles_total (settle=, docs/operations.md): two agents, one per engine,
on one Redis that has the module. Per ratelimit-done, /metrics counts what
the settle did: charged (real cost above the reservation), refunded (below),
even (equal), gone (the same reservation settled a second time)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, MODULE_SO, scrape, wait_for  # noqa: E402
import harness  # noqa: E402
import spop  # noqa: E402

harness.FORCED_ENGINE = ""   # each agent here names its engine
h = Harness()
h.require_module()
h.start_redis(extra=["--loadmodule", MODULE_SO])

body = "policy warm 10/1s\n" \
       "policy tok 100/1h settle=x-usage-units lease=1m\n"
agents = harness.engine_agents(h, body)
EVENTS = ("charged", "refunded", "even", "gone", "failed")


def counts(mport):
    m = scrape(mport)
    return tuple(int(m.get("settles_total", event=e) or 0) for e in EVENTS)


def settle(c, acc, reserved, real):
    """One admission reserving <reserved>, settled at <real>; its lease."""
    a = c.ratelimit(acc, policy="tok", cost=reserved)["actions"]
    h.eq("%s: admitted with a lease" % acc, "allow", a.get("status"))
    lease = a.get("lease", "")
    c.notify([("ratelimit-done", [("policy", "tok"), ("key", acc), ("lease", lease),
                                  ("cost", real)])])
    return lease


for engine in ("script", "module"):
    _, port, mport = agents[engine]
    c = spop.Conn().connect("127.0.0.1", port)
    c.hello()
    acc = "jwt:M-%s" % engine
    h.eq("%s: no settle counted yet" % engine, (0, 0, 0, 0, 0), counts(mport))
    settle(c, acc, 1, 5)
    h.check("%s: a charge" % engine, wait_for(lambda: counts(mport) == (1, 0, 0, 0, 0), 5),
            counts(mport))
    settle(c, acc, 10, 2)
    h.check("%s: a refund" % engine, wait_for(lambda: counts(mport) == (1, 1, 0, 0, 0), 5),
            counts(mport))
    lease = settle(c, acc, 3, 3)
    h.check("%s: an even settle" % engine, wait_for(lambda: counts(mport) == (1, 1, 1, 0, 0), 5),
            counts(mport))
    c.notify([("ratelimit-done", [("policy", "tok"), ("key", acc), ("lease", lease),
                                  ("cost", 3)])])
    h.check("%s: a second settle of the same reservation: gone" % engine,
            wait_for(lambda: counts(mport) == (1, 1, 1, 1, 0), 5), counts(mport))
    c.close()

sys.exit(h.done())
