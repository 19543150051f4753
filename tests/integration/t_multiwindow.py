#!/usr/bin/env python3
"""Multi-window policies and weighted requests against a real redis-server:
"2 per second AND 3 per 6 seconds" decided all-or-nothing in one script call.
Boundaries of both windows, a denial records nothing in either window (even
the one that had room), the variables report the deciding window, cost above
the smallest limit is an error, and a race across connections stays exact in
every window."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
from harness import Harness  # noqa: E402
import spop  # noqa: E402

h = Harness()
h.start_redis()
# A generous deadline: on a loaded machine a timeout would be a (fail-closed)
# error, and these tests are about counts, not latency.
h.start_agent(ready=True, extra="""
threads 2
redis-timeout 1s
policy api   2/1s 3/6s
policy race  30/10s 100/1h
policy race2 100/10s 40/1h
policy race3 50/10s 1000/1h
policy three 5/1s 8/10s 9/1h
""")


def conn():
    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    c.hello()
    return c


a = conn()


def ask(key, policy="api", cost=None):
    return a.ratelimit(key, policy=policy, cost=cost)["actions"]


def zcard(key):
    return int(h.rcli("ZCARD", key) or 0)


K1S = "api:limit:v1:{ACC-MW}:1s"
K6S = "api:limit:v1:{ACC-MW}:6s"

# -- t0: the 1s window binds ------------------------------------------------
t0 = time.monotonic()
d = ask("ACC-MW")
h.eq("1st: allow, deciding window is 1s (least remaining): limit 2, remaining 1",
     ("allow", 2, 1), (d["status"], d["limit"], d["remaining"]))
d = ask("ACC-MW")
h.eq("2nd: allow, 1s window full: limit 2, remaining 0, reset 1",
     ("allow", 2, 0, 1), (d["status"], d["limit"], d["remaining"], d["reset"]))
d = ask("ACC-MW")
h.eq("3rd: denied by the 1s window (the 6s one has room): limit 2, retry_after 1",
     ("deny", 2, 0, 1), (d["status"], d["limit"], d["remaining"], d["retry_after"]))
h.eq("denied: nothing recorded in either window", (2, 2), (zcard(K1S), zcard(K6S)))
h.check("keys share the {account} hash tag; single-window key form absent",
        h.rcli("EXISTS", "api:limit:v1:ACC-MW") == "0" and zcard(K1S) == 2)
t1s, t6s = int(h.rcli("PTTL", K1S)), int(h.rcli("PTTL", K6S))
# -2: the 1s key already expired, which a loaded machine may reach before we
# look; what matters is that it never outlives its window and the 6s one does
h.check("each key expires with its own window (PTTL 1s key <= 1000 < 6s key's <= 6000)",
        (t1s == -2 or 0 < t1s <= 1000) and 1000 < t6s <= 6000, (t1s, t6s))

# -- past the 1s boundary: now the 6s window binds ---------------------------
time.sleep(max(0.0, t0 + 1.1 - time.monotonic()))
d = ask("ACC-MW")
h.eq("after 1s: allow, deciding window is now 6s: limit 3, remaining 0",
     ("allow", 3, 0), (d["status"], d["limit"], d["remaining"]))
h.check("after 1s: reset counts down the 6s window (1..5 s)", 1 <= d["reset"] <= 5, d)
before = (zcard(K1S), zcard(K6S))
d = ask("ACC-MW")
h.eq("denied by the 6s window while the 1s window has room: limit 3",
     ("deny", 3, 0), (d["status"], d["limit"], d["remaining"]))
h.check("retry_after comes from the 6s window's log (1..5 s)", 1 <= d["retry_after"] <= 5, d)
# (the 1s window may only lose its entry to time, never gain one)
after = (zcard(K1S), zcard(K6S))
h.check("denied by one window: nothing recorded in the other either",
        before[0] == 1 and after[0] <= 1 and after[1] == 3, (before, after))

# -- both windows deny: the longest retry wins -------------------------------
d = ask("ACC-MW", cost=2)
h.eq("cost 2, both windows full: deny reported by the 6s window (longest retry)",
     ("deny", 3), (d["status"], d["limit"]))
h.check("cost 2: retry_after 1..5 s (two entries must leave the 6s window)",
        1 <= d["retry_after"] <= 5, d)
after2 = (zcard(K1S), zcard(K6S))
h.check("cost 2 denied: nothing recorded", after2[0] <= after[0] and after2[1] == 3, (after, after2))

# -- cost: 1..smallest limit -------------------------------------------------
d = ask("ACC-MW-COST", cost=3)
h.eq("cost 3 > smallest limit 2: error bad-cost (not a deny forever)",
     ("error", "bad-cost"), (d["status"], d.get("reason")))
h.eq("bad cost: no key written", "0", h.rcli("EXISTS", "api:limit:v1:{ACC-MW-COST}:1s"))
d = ask("ACC-MW-COST", cost=2)
h.eq("cost 2 = smallest limit: allow, 1s window left with 0",
     ("allow", 2, 0), (d["status"], d["limit"], d["remaining"]))
h.eq("cost 2 recorded as one entry of 2 units in each window", (1, 1, 2, 2),
     (zcard("api:limit:v1:{ACC-MW-COST}:1s"), zcard("api:limit:v1:{ACC-MW-COST}:6s"),
      h.units("api:limit:v1:{ACC-MW-COST}:1s"), h.units("api:limit:v1:{ACC-MW-COST}:6s")))

# -- past the 6s boundary: the first two entries leave -----------------------
time.sleep(max(0.0, t0 + 6.15 - time.monotonic()))
d = ask("ACC-MW")
h.eq("after 6s: allow again (1 of 3 left in the 6s window before this one)",
     "allow", d["status"])
h.eq("after 6s: both windows hold what is in them", (1, 2), (zcard(K1S), zcard(K6S)))

# -- three windows: the least remaining reports -------------------------------
for _ in range(4):
    d = ask("ACC-3W", policy="three")
h.eq("three windows, 4 requests: 1s window reports (remaining 1)", (5, 1), (d["limit"], d["remaining"]))
d = ask("ACC-3W", policy="three", cost=1)
d = ask("ACC-3W", policy="three", cost=1)
h.eq("three windows: 1s full -> deny with limit 5", ("deny", 5), (d["status"], d["limit"]))
h.eq("three windows: every key holds 5", (5, 5, 5),
     tuple(zcard("three:limit:v1:{ACC-3W}:" + w) for w in ("1s", "10s", "1h")))


# -- races across connections stay exact in every window ----------------------
def race(policy, key, conns=20, per=10, cost=None):
    return harness.race(conn, policy, key, conns, per, cost)


r = race("race", "ACC-RACE")
h.eq("race, short window binds (30/10s, 100/1h): exactly 30 of 200 admitted",
     (30, 170), (r.count("allow"), r.count("deny")))
h.eq("race: 30 members in each window", (30, 30),
     (zcard("race:limit:v1:{ACC-RACE}:10s"), zcard("race:limit:v1:{ACC-RACE}:1h")))

r = race("race2", "ACC-RACE")
h.eq("race, long window binds (100/10s, 40/1h): exactly 40 of 200 admitted",
     (40, 160), (r.count("allow"), r.count("deny")))
h.eq("race: 40 members in each window", (40, 40),
     (zcard("race2:limit:v1:{ACC-RACE}:10s"), zcard("race2:limit:v1:{ACC-RACE}:1h")))

r = race("race3", "ACC-RACE", cost=2)
h.eq("race with cost 2 (50/10s): exactly 25 of 200 admitted",
     (25, 175), (r.count("allow"), r.count("deny")))
h.eq("race with cost 2: 50 units in 25 entries in each window", (50, 50, 25, 25),
     (h.units("race3:limit:v1:{ACC-RACE}:10s"), h.units("race3:limit:v1:{ACC-RACE}:1h"),
      zcard("race3:limit:v1:{ACC-RACE}:10s"), zcard("race3:limit:v1:{ACC-RACE}:1h")))

h.done()
