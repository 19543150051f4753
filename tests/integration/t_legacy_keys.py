#!/usr/bin/env python3
"""legacy-keys against a real redis-server: on (the default), a decision of
a one-window policy also writes the account's 1.0.0 key
"<policy>:limit:v1:<account>" beside its window key (an upgrade from 1.0.0,
docs/deployment.md); off, it writes the window key alone; a reload switches
it both ways."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
from harness import Harness  # noqa: E402
import spop  # noqa: E402

POLICIES = """
redis-timeout 5s
policy hr 5/1h
"""

h = Harness()
h.start_redis()
h.start_agent(ready=True, extra=POLICIES)
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()


def keys_after(account):
    """One decision of <account> under hr: is it allowed, does its window
    key exist, does its 1.0.0 key exist."""
    st = c.ratelimit(account, policy="hr")["actions"].get("status")
    return (st, h.rcli("EXISTS", "hr:limit:v1:{%s}:1h" % account),
            h.rcli("EXISTS", "hr:limit:v1:%s" % account))


h.eq("default (on): the window key and the 1.0.0 key", ("allow", "1", "1"), keys_after("jwt:A"))

harness.write_conf(h, POLICIES + "legacy-keys off\n", metrics_port=h.metrics_port)
h.check("reload to legacy-keys off applied", harness.hup(h))
h.eq("off: the window key alone", ("allow", "1", "0"), keys_after("jwt:B"))
old = h.units("hr:limit:v1:jwt:A")
h.eq("off: jwt:A is admitted", "allow", c.ratelimit("jwt:A", policy="hr")["actions"].get("status"))
h.eq("off: jwt:A's 1.0.0 key is not written", old, h.units("hr:limit:v1:jwt:A"))

harness.write_conf(h, POLICIES + "legacy-keys on\n", metrics_port=h.metrics_port)
h.check("reload to legacy-keys on applied", harness.hup(h))
h.eq("on again: both keys", ("allow", "1", "1"), keys_after("jwt:C"))

sys.exit(h.done())
