#!/usr/bin/env python3
"""The deny cache answers only the numbers Redis would give (issue 28).

Policy 5/10s, one account: cost 1, 2 s later cost 2, 2 s later cost 1 (all
allowed), then cost 2 (denied: remaining 1, Retry-After 6, now cached),
cost 1 (allowed: remaining 0) and cost 2 again. Agent A runs with the
default deny-cache; agent T (deny-cache off) on the same Redis is the
truth. The last cost-2 answer of A must equal T's: remaining 0 and the
later Retry-After (8), where the cache once answered remaining 1 and 6.

No clock is asserted: each answer of A is compared with T's answers just
before and just after it on the same key (denials change nothing in
Redis), so its Retry-After must lie between them and its remaining equal
theirs, however slow the machine. The same runs on a two-window policy
and on a bucketed one (precision=), which the cache answers as exactly.

Across agents (the admission sent to agent B, which A cannot see), the
cached answer of A is stale by that admission until the entry's reset:
printed as the measured bound, and checked against the documented one
(remaining never lower and Retry-After never later than the truth; the
entry no longer answers once its reset passed). Answers from the cache
are counted in local_cache_answers_total.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness as u  # noqa: E402
from harness import Harness  # noqa: E402
import spop  # noqa: E402

POLICY = ("threads 1\nredis-timeout 5s\npolicy p 5/10s\n"
          "policy m 5/10s 6/30s\npolicy b 5/10s precision=1s\n")
# the account's policy: S and X the issue's, M two windows, B buckets
POL = {"S": "p", "X": "p", "M": "m", "B": "b"}
h = Harness()
h.start_redis()
h.start_agent(POLICY, ready=True)                        # A: deny-cache on (default)
URL = "redis redis://127.0.0.1:%d/0\n" % h.redis_port
_, tport, tm, _ = h.spawn_side_agent("truth", u.force_threads(URL + POLICY + "deny-cache off\n"))
_, bport, bm, _ = h.spawn_side_agent("other", u.force_threads(URL + POLICY))
for port in (tm, bm):
    if not u.wait_for(lambda: u._readyz(port), 15.0):
        h.fail("side agent ready")
        h.done()
a = spop.Conn().connect("127.0.0.1", h.agent_port)
t = spop.Conn().connect("127.0.0.1", tport)
b = spop.Conn().connect("127.0.0.1", bport)
for c in (a, t, b):
    c.hello()


def ask(c, key, cost):
    return c.ratelimit(key, policy=POL[key], cost=cost)["actions"]


def cache_answers():
    m = u.scrape(h.metrics_port)
    return sum(m.get("local_cache_answers_total", policy=p) or 0 for p in set(POL.values()))


def sandwiched(what, key, cost):
    """A's answer between two of the truth's (all denials: no change)."""
    before = ask(t, key, cost)
    got = ask(a, key, cost)
    after = ask(t, key, cost)
    print("# %s: A %s remaining %s Retry-After %s; truth %s remaining %s Retry-After %s..%s"
          % (what, got.get("status"), got.get("remaining"), got.get("retry_after"),
             before.get("status"), before.get("remaining"), after.get("retry_after"),
             before.get("retry_after")))
    h.check(what + ": the truth denies, before and after",
            before.get("status") == after.get("status") == "deny", (before, after))
    h.check(what + ": A denies with the truth's remaining",
            got.get("status") == "deny" and got.get("remaining") == before.get("remaining")
            == after.get("remaining"), (got, before, after))
    h.check(what + ": A's Retry-After lies within the truth's",
            after.get("retry_after", -1) <= got.get("retry_after", -2)
            <= before.get("retry_after", -3), (got, before, after))
    return got, before


# Accounts on one timeline: S (every request through A), X (the cost-1
# admission at t=4.2 goes through B, another agent), and M and B as S on
# a two-window policy and a bucketed one (cached under the same rules).
KEYS = ("S", "X", "M", "B")
for key in KEYS:
    h.eq("%s t=0 cost 1: allowed" % key, "allow", ask(a, key, 1).get("status"))
time.sleep(2)
for key in KEYS:
    h.eq("%s t=2 cost 2: allowed" % key, "allow", ask(a, key, 2).get("status"))
time.sleep(2)
for key in KEYS:
    h.eq("%s t=4 cost 1: allowed" % key, "allow", ask(a, key, 1).get("status"))
time.sleep(0.1)
for key in KEYS:
    d = ask(a, key, 2)   # asks Redis, and is cached
    h.check("%s t=4.1 cost 2: denied, remaining 1" % key,
            d.get("status") == "deny" and d.get("remaining") == 1, d)
hits0 = cache_answers()
sandwiched("S cached cost 2 (nothing changed)", "S", 2)
h.eq("that answer came from the cache (local_cache_answers_total +1)", hits0 + 1, cache_answers())

# one agent: the admission A itself sees
d = ask(a, "S", 1)
h.check("S t=4.2 cost 1 through A: allowed, remaining 0",
        d.get("status") == "allow" and d.get("remaining") == 0, d)
got, truth = sandwiched("S t=4.3 cost 2 after A's own admission", "S", 2)
h.check("S: remaining 0, as with deny-cache off (the cache once said 1)",
        got.get("remaining") == 0, got)
hits1 = cache_answers()
sandwiched("S cost 2 again (cached anew, exact)", "S", 2)
h.eq("that answer came from the cache", hits1 + 1, cache_answers())

# the same on two windows and on buckets: every answer of A equals the truth
for key in ("M", "B"):
    sandwiched("%s cached cost 2" % key, key, 2)
    d = ask(a, key, 1)
    h.check("%s cost 1 through A: allowed" % key, d.get("status") == "allow", d)
    sandwiched("%s cost 2 after A's own admission" % key, key, 2)
    hits = cache_answers()
    sandwiched("%s cost 2 again (cached anew)" % key, key, 2)
    h.eq("%s: that answer came from the cache" % key, hits + 1, cache_answers())

# across agents: the admission goes through B, which A cannot see
d = ask(b, "X", 1)
h.check("X t=4.2 cost 1 through B: allowed, remaining 0",
        d.get("status") == "allow" and d.get("remaining") == 0, d)
hits2 = cache_answers()
before = ask(t, "X", 2)
got = ask(a, "X", 2)
print("# cross-agent bound, measured: A (cache) remaining %s Retry-After %s reset %s; "
      "truth remaining %s Retry-After %s"
      % (got.get("remaining"), got.get("retry_after"), got.get("reset"),
         before.get("remaining"), before.get("retry_after")))
h.eq("X: A's answer came from its cache", hits2 + 1, cache_answers())
h.check("X: stale within the documented bound (remaining not lower, Retry-After not later)",
        got.get("status") == "deny" and got.get("remaining") >= before.get("remaining")
        and got.get("retry_after") <= before.get("retry_after"), (got, before))
h.check("X: the stale entry lives no longer than its reset (the first entry leaves)",
        got.get("reset", 99) <= got.get("retry_after", 0), got)
h.done()
