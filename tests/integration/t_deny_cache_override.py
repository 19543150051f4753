#!/usr/bin/env python3
"""The deny cache answers an account that has a config override line.

Each cached denial carries the limits it was decided under, and a lookup
answers only under the same limits (issue 35 item 3). Both ends must find
the account's limits the same way: its `override` line when it has one.
Policy p 5/10s with `override p O 2/10s`: O's third request is denied by
Redis and cached, the fourth is answered from the cache
(local_cache_answers_total +1) with the override's limit; an account
without an override line likewise under the policy's.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness as u  # noqa: E402
from harness import Harness  # noqa: E402
import spop  # noqa: E402

h = Harness()
h.start_redis()
h.start_agent("threads 1\nredis-timeout 5s\npolicy p 5/10s\noverride p O 2/10s\n", ready=True)
a = spop.Conn().connect("127.0.0.1", h.agent_port)
a.hello()


def cache_answers():
    return u.scrape(h.metrics_port).get("local_cache_answers_total", policy="p") or 0


for key, limit in (("O", 2), ("P", 5)):
    for i in range(limit):
        h.eq("%s request %d: allowed" % (key, i + 1), "allow",
             a.ratelimit(key, policy="p")["actions"].get("status"))
    d = a.ratelimit(key, policy="p")["actions"]
    h.check("%s over its limit %d: denied by Redis" % (key, limit),
            d.get("status") == "deny" and d.get("limit") == limit, d)
    n = cache_answers()
    d = a.ratelimit(key, policy="p")["actions"]
    h.check("%s again: denied, limit %d" % (key, limit),
            d.get("status") == "deny" and d.get("limit") == limit, d)
    h.eq("%s again: answered from the cache" % key, n + 1, cache_answers())
h.done()
