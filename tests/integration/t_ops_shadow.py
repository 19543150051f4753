#!/usr/bin/env python3
"""Shadow mode and per-key overrides, end to end against real Redis.

Shadow: the policy decides and records in Redis as usual, but where it
would deny it answers allow with reason=shadow-deny (quota variables kept,
no retry_after), counted in shadow_denies_total; the local deny cache never
answers for it. Overrides: `override transfer ACC-VIP 30/1s` gives that
account 30 in the same Redis key, other accounts keep the policy's limit;
overrides work on shadow and multi-window policies and change by reload.
Also the rollout of a new limit: shadow first, watch, then enforce."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port, threads  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

# A generous redis-timeout: a loaded machine must not turn a slow call
# into an error answer (the timeout path is t_ops_metrics' business).
CONF = """
threads 2
redis-timeout 1s
policy transfer 3/1s
policy wire 3/1m
policy next 2/1m shadow
policy both 2/1m 4/1h shadow
override transfer ACC-VIP 30/1s
override wire ACC-VIP 30/1m
override next ACC-VIP 5/1m
"""

h = Harness()
h.start_redis()
mport = free_port()
h.start_agent("metrics 127.0.0.1:%d\n%s" % (mport, CONF))
h.check("agent ready (metrics up, both workers on Redis)", u.wait_ready(mport, 2))
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()


def act(key, policy, **kw):
    return c.ratelimit(key, policy=policy, **kw)["actions"]


def zcard(key):
    return int(h.rcli("ZCARD", key) or 0)


m0 = u.scrape(mport)

# -- shadow: answers allow, records like the real thing ------------------------------------------
r = [act("ACC-S", "next") for _ in range(5)]
h.eq("shadow: every answer is allow", ["allow"] * 5, [a["status"] for a in r])
h.eq("shadow: the first two carry no reason", [None, None], [a.get("reason") for a in r[:2]])
h.eq("shadow: where it would deny, reason=shadow-deny", ["shadow-deny"] * 3, [a.get("reason") for a in r[2:]])
h.eq("shadow: quota as the policy computed it (limit 2, remaining 0)",
     [(2, 0)] * 3, [(a.get("limit"), a.get("remaining")) for a in r[2:]])
h.check("shadow: reset is given, retry_after is not (HAProxy must not send Retry-After)",
        all("reset" in a and "retry_after" not in a for a in r[2:]), r[2])
h.eq("shadow: Redis holds the admitted entries only, as the real policy would", 2, zcard("next:limit:v1:ACC-S"))
m1 = u.scrape(mport)
h.eq("shadow: shadow_denies_total{next} +3", 3.0,
     m1.get("shadow_denies_total", policy="next") - m0.get("shadow_denies_total", policy="next"))
h.eq("shadow: decisions_total{next} allow +2, shadow-deny +3, deny +0", (2.0, 3.0, 0.0),
     (m1.get("decisions_total", policy="next", status="allow"),
      m1.get("decisions_total", policy="next", status="shadow-deny"),
      m1.get("decisions_total", policy="next", status="deny")))
h.eq("shadow: the local deny cache never answers for it", 0.0,
     m1.get("local_cache_answers_total", policy="next"))

# A shadow multi-window policy: each window counts as usual.
r = [act("ACC-S2", "both") for _ in range(3)]
h.eq("shadow multi-window: allow, allow, allow+shadow-deny",
     [("allow", None), ("allow", None), ("allow", "shadow-deny")],
     [(a["status"], a.get("reason")) for a in r])
h.eq("shadow multi-window: both windows recorded 2", (2, 2),
     (zcard("both:limit:v1:{ACC-S2}:1m"), zcard("both:limit:v1:{ACC-S2}:1h")))

# A shadow policy next to an enforcing one in one NOTIFY: a NOTIFY is one
# decision (docs/protocol.md), so two ratelimit messages are refused whole.
a = c.notify([("ratelimit", [("policy", "wire"), ("key", "ACC-MIX")]),
              ("ratelimit", [("policy", "next"), ("key", "ACC-S")])])["actions"]
h.eq("one NOTIFY, enforcing + shadow: refused (too-many-messages)",
     ("error", "too-many-messages"), (a["status"], a.get("reason")))

# Shadow with Redis away: fails closed like any policy (shadow is not fail-open).
h.stop_redis()
a = act("ACC-S3", "next")
h.eq("shadow, Redis down: error redis-unavailable (on-redis-error applies as usual)",
     ("error", "redis-unavailable"), (a["status"], a.get("reason")))
h.start_redis()
h.check("Redis back", u.wait_for(lambda: u.scrape(mport).get("redis_connected") == threads(2), 20))

# -- overrides ----------------------------------------------------------------------------------
a = act("ACC-VIP", "transfer")
h.eq("override transfer ACC-VIP 30/1s: limit 30, remaining 29", ("allow", 30, 29),
     (a["status"], a.get("limit"), a.get("remaining")))
a = act("ACC-OTHER", "transfer")
h.eq("another account keeps 3/1s", ("allow", 3, 2), (a["status"], a.get("limit"), a.get("remaining")))
h.eq("the override uses the policy's key", 1, zcard("transfer:limit:v1:ACC-VIP"))

# Exhaustive on a 1-minute window (no clock in the way): exactly 30 pass.
for i in range(31):
    c.send_notify(1001 + 2 * i, 1, [("ratelimit", [("policy", "wire"), ("key", "ACC-VIP")])])
r = [c.wait_ack(1001 + 2 * i, 1)["actions"] for i in range(31)]
h.eq("override wire ACC-VIP 30/1m: 30 allowed of 31", (30, 1),
     (sum(a["status"] == "allow" for a in r), sum(a["status"] == "deny" for a in r)))
h.eq("... the last is denied with limit 30", ("deny", 30, 0), (r[-1]["status"], r[-1]["limit"], r[-1]["remaining"]))
h.eq("... 30 entries in Redis", 30, zcard("wire:limit:v1:ACC-VIP"))
r = [act("ACC-VIP2", "wire")["status"] for _ in range(4)]
h.eq("keys are exact: ACC-VIP2 has the policy's 3/1m", ["allow"] * 3 + ["deny"], r)
r = [act("acc-vip", "wire")["status"] for _ in range(4)]
h.eq("keys are case-sensitive: acc-vip has 3/1m", ["allow"] * 3 + ["deny"], r)

# An override on a shadow policy.
r = [act("ACC-VIP", "next") for _ in range(6)]
h.eq("override next ACC-VIP 5/1m (shadow): 5 plain allows, then shadow-deny",
     [None] * 5 + ["shadow-deny"], [a.get("reason") for a in r])
h.eq("... limit 5", 5, r[-1]["limit"])

# Overrides change by reload.
u.write_conf(h, CONF + "override transfer ACC-GOLD 10/1m\n", mport)
h.check("reload adding an override applied", u.hup(h, workers=2))
a = act("ACC-GOLD", "transfer")
h.eq("the new override applies after the reload", ("allow", 10, 9), (a["status"], a.get("limit"), a.get("remaining")))
u.write_conf(h, CONF.replace("override wire ACC-VIP 30/1m\n", ""), mport)
h.check("reload removing an override applied", u.hup(h, workers=2))
a = act("ACC-VIP", "wire")
h.eq("without its override ACC-VIP is back to 3/1m (30 recorded: denied)", ("deny", 3),
     (a["status"], a.get("limit")))

# -- rolling out a new limit: shadow first, then enforce (the runbook's steps) ----------------------
u.write_conf(h, CONF + "policy payout 1/1m shadow\n", mport)
h.check("step 1: the new policy in shadow mode", u.hup(h, workers=2))
r = [act("ACC-R", "payout") for _ in range(2)]
h.eq("step 1: nobody is refused; the would-be deny is visible",
     [("allow", None), ("allow", "shadow-deny")], [(a["status"], a.get("reason")) for a in r])
h.eq("step 1: shadow_denies_total{payout} = 1", 1.0, u.scrape(mport).get("shadow_denies_total", policy="payout"))
u.write_conf(h, CONF + "policy payout 1/1m\n", mport)
h.check("step 2: enforce (drop 'shadow')", u.hup(h, workers=2))
a = act("ACC-R", "payout")
h.eq("step 2: the same account is now denied, with retry_after (the window carried over)",
     ("deny", True), (a["status"], a.get("retry_after", 0) >= 1))
m = u.scrape(mport)
h.eq("step 2: decisions_total{payout,deny} = 1", 1.0, m.get("decisions_total", policy="payout", status="deny"))
c.close()
h.done()
