#!/usr/bin/env python3
"""A cached denial never outlives the limits that made it (issue 35, item 3).

Two agents on one Redis: A (threads 2, several SPOP connections so that
its workers each cache a denial) and B. Policy transfer 3/1s.

- A live override 1/1h for 3 s: the account is denied through A (Redis's
  deny, Retry-After about an hour, cached on A's workers, then answered from
  the caches). Once the override expires on A's clock, every connection of A
  must answer as the policy does (limit 3: it admits), where A once kept
  answering deny, Retry-After ~3598, limit 1 from its cache for an hour while
  B admitted and ctl show said used 1 remaining 2.
- The same when the override is removed (ctl override ... --remove).
- A raising override (policy hourly 2/1h, live 5/1h under live-max) admits
  an account that the policy's denial, cached, still holds.

No clock is asserted: each wait is a bounded poll (the bound is for a slow
machine, not a measure); the time each end took is printed.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness as u  # noqa: E402
from harness import AGENT, Harness  # noqa: E402
import spop  # noqa: E402

POLICIES = "policy transfer 3/1s\npolicy hourly 2/1h\nlive-max hourly 10/1h\n"
SEE_SECS = 15    # a change is documented to apply within 1 s; generous here
NCONNS = 4

h = Harness()
h.start_redis()
h.start_agent(POLICIES + "threads 2\nredis-timeout 5s\n", ready=True)
conf = os.path.join(h.tmp, "agent.conf")
_, bport, bm, blog = h.spawn_side_agent(
    "agent-b", u.force_threads("redis redis://127.0.0.1:%d/0\nthreads 1\nredis-timeout 5s\n%s"
                               % (h.redis_port, POLICIES)))
u.wait_ready(bm, u.threads(1))
for lg in (h.agent_log, blog):
    h.wait_until("agent %s polls the live overrides" % os.path.basename(lg),
                 lambda: "event=live_control_ready" in u.read_text(lg), SEE_SECS)


def conn(port):
    c = spop.Conn().connect("127.0.0.1", port)
    c.hello()
    return c


a = [conn(h.agent_port) for _ in range(NCONNS)]
b = conn(bport)


def ask(c, key, policy="transfer"):
    return c.ratelimit(key, policy=policy)["actions"]


def ctl(*args):
    p = subprocess.run([AGENT, "ctl", "-c", conf] + list(args), capture_output=True, text=True,
                       timeout=30)
    return p.returncode, p.stdout, p.stderr


def cache_answers(policy):
    return u.scrape(h.metrics_port).get("local_cache_answers_total", policy=policy) or 0


def deny_everywhere(what, key, policy, limit):
    """Every connection of A denied <key> with <limit> twice: Redis's answer,
    cached by the worker, then the cache's."""
    hits = cache_answers(policy)
    for c in a:
        for _ in range(2):
            d = ask(c, key, policy)
            h.check("%s: A denies with limit %d" % (what, limit),
                    d.get("status") == "deny" and d.get("limit") == limit, d)
    h.check("%s: A's caches answered (local_cache_answers_total +%d or more)" % (what, NCONNS),
            cache_answers(policy) >= hits + NCONNS, (hits, cache_answers(policy)))


def policy_answers_everywhere(what, key, policy, limit, since):
    """Until A's first connection answers under the policy's <limit>, then
    every other connection too: no answer is the old limits' any more."""
    ok = h.wait_until(what + ": A's first connection answers with limit %d" % limit,
                      lambda: ask(a[0], key, policy).get("limit") == limit, SEE_SECS)
    print("# %s: A answered under limit %d %.2f s after the change started"
          % (what, limit, time.monotonic() - since))
    got = [ask(c, key, policy) for c in a[1:]]
    h.check(what + ": every other connection of A answers with limit %d" % limit,
            ok and all(d.get("limit") == limit for d in got), got)
    return ok


# -- a live override's end by expiry --------------------------------------
t0 = time.monotonic()
rc, _, err = ctl("override", "transfer", "jwt:X", "1/1h", "--for", "3s")
h.check("override transfer jwt:X 1/1h --for 3s", rc == 0, err)
h.wait_until("A applies it", lambda: ask(a[0], "jwt:X").get("limit") == 1, SEE_SECS)
deny_everywhere("under 1/1h", "jwt:X", "transfer", 1)
d = ask(a[0], "jwt:X")
h.check("the cached deny says Retry-After about an hour", d.get("retry_after", 0) > 3000, d)
policy_answers_everywhere("expired", "jwt:X", "transfer", 3, t0)
took = time.monotonic() - t0
h.check("not before its 3 s (%.2f s after the ctl started)" % took, took >= 2.95, took)
s = json.loads(ctl("show", "transfer", "jwt:X", "--json")[1] or "{}")
h.eq("show: the policy's limits apply again", "policy", s.get("limits"))
d = ask(b, "jwt:Y-fresh")
h.eq("B decides as ever", "allow", d.get("status"))

# -- a live override's end by removal --------------------------------------
rc, _, err = ctl("override", "transfer", "jwt:R", "1/1h", "--for", "10m")
h.check("override transfer jwt:R 1/1h --for 10m", rc == 0, err)
h.wait_until("A applies it", lambda: ask(a[0], "jwt:R").get("limit") == 1, SEE_SECS)
deny_everywhere("under 1/1h until removed", "jwt:R", "transfer", 1)
t0 = time.monotonic()
rc, _, err = ctl("override", "transfer", "jwt:R", "--remove")
h.check("override --remove", rc == 0, err)
policy_answers_everywhere("removed", "jwt:R", "transfer", 3, t0)

# -- a raising override over the policy's cached denial ---------------------
for _ in range(2):
    h.eq("hourly 2/1h: admitted", "allow", ask(a[0], "jwt:H", "hourly").get("status"))
deny_everywhere("hourly, used up", "jwt:H", "hourly", 2)
t0 = time.monotonic()
rc, _, err = ctl("override", "hourly", "jwt:H", "5/1h", "--for", "10m")
h.check("override hourly jwt:H 5/1h (raising, under live-max)", rc == 0, err)
if policy_answers_everywhere("raised", "jwt:H", "hourly", 5, t0):
    s = json.loads(ctl("show", "hourly", "jwt:H", "--json")[1] or "{}")
    w = (s.get("windows") or [{}])[0]
    h.eq("raised: 3 more admitted, then the raised limit denies (show: used 5 of 5)",
         (5, 0), (w.get("used"), w.get("remaining")))
h.done()
