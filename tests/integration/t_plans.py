#!/usr/bin/env python3
"""Usage plans (issue 39) against a real redis-server: the SPOE arg plan
picks the plan's limits; no arg is plan-default's plan; a plan no policy
has is the policy's own limits, counted (unknown_plan_total) and logged
(unknown_plan), never an error; an account's override line beats its plan
and a live override (ctl) beats both; a plan change mid-window keeps
counting the same Redis key (its key does not depend on the limits), so
the switch back to the stricter plan is still denied; a plan with windows
of other lengths counts in other keys (docs/configuration.md, "Usage
plans"). Windows of a minute or more: nothing here depends on timing.
"""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness as u  # noqa: E402
from harness import AGENT, Harness  # noqa: E402
import spop  # noqa: E402

CONF = """threads 1
redis-timeout 5s
policy api 3/1m
plan free api 2/1m
plan pro api 5/1m
plan-default free
override api jwt:VIP 1/1m
live-max api 100/1m
"""

h = Harness()
h.start_redis()
h.start_agent(CONF, ready=True)
conf = os.path.join(h.tmp, "agent.conf")
a = spop.Conn().connect("127.0.0.1", h.agent_port)
a.hello()


def ask(key, plan=None):
    args = [("policy", "api"), ("key", key), ("cost", 1)]
    if plan is not None:
        args.append(("plan", plan))
    return a.notify([("ratelimit", args)])["actions"]


def run(key, plan, n):
    """<n> requests; the statuses and the last answer's limit."""
    out = [ask(key, plan) for _ in range(n)]
    return [d.get("status") for d in out], out[-1].get("limit")


def unknown():
    return u.scrape(h.metrics_port).get("unknown_plan_total") or 0


# -- plans by arg, and plan-default ------------------------------------------
h.eq("plan=pro: 5 allowed then denied, limit 5",
     (["allow"] * 5 + ["deny"], 5), run("jwt:P1", "pro", 6))
h.eq("plan=free: 2 allowed then denied, limit 2",
     (["allow"] * 2 + ["deny"], 2), run("jwt:F1", "free", 3))
h.eq("no plan arg: plan-default free's 2",
     (["allow"] * 2 + ["deny"], 2), run("jwt:D1", None, 3))
h.eq("an empty plan arg is no plan: plan-default's 2",
     (["allow"] * 2 + ["deny"], 2), run("jwt:D2", "", 3))

# -- unknown plan: the policy's own limits, counted and logged ---------------
n0 = unknown()
h.eq("plan=gold (no policy has it): the policy's own 3, never an error",
     (["allow"] * 3 + ["deny"], 3), run("jwt:U1", "gold", 4))
h.eq("unknown_plan_total counts each such decision", n0 + 4, unknown())
h.check("the log says unknown_plan", "event=unknown_plan policy=api plan=\"gold\"" in
        u.read_text(h.agent_log), h.log_tail())

# -- override line beats the plan ---------------------------------------------
h.eq("jwt:VIP on plan pro: its override line's 1 wins",
     (["allow", "deny"], 1), run("jwt:VIP", "pro", 2))

# -- a plan change mid-window keeps counting ---------------------------------
h.eq("jwt:C1 on free: 2 allowed, the third denied",
     (["allow", "allow", "deny"], 2), run("jwt:C1", "free", 3))
h.eq("jwt:C1 moves to pro in the same minute: 3 more (5 in the window), then denied",
     (["allow"] * 3 + ["deny"], 5), run("jwt:C1", "pro", 4))
h.eq("jwt:C1 back on free: still denied (the minute holds 5 of its 2)",
     (["deny"], 2), run("jwt:C1", "free", 1))
h.eq("one Redis key for the minute, whatever the plan: 5 units in it",
     5, h.units("api:limit:v1:{jwt:C1}:1m"))

# -- a plan's windows are its policy's: one with another length is refused --
bad = os.path.join(h.tmp, "bad-plan.conf")
with open(bad, "w") as f:
    f.write("listen 127.0.0.1:1\nredis redis://127.0.0.1:1\npolicy api 3/1m\nplan short api 10/1s\n")
rc_bad = subprocess.run([AGENT, "-c", "-f", bad], capture_output=True, text=True, timeout=30)
h.check("a plan whose window lengths differ from its policy's is refused with file:line",
        rc_bad.returncode != 0 and "plan 'short' of 'api': its windows must have the policy's lengths"
        in rc_bad.stderr, rc_bad.stderr)

# -- ctl show names the plan's limits, ctl reset clears every plan's keys ----
def ctl(*args):
    p = subprocess.run([AGENT, "ctl", "-c", conf] + list(args), capture_output=True, text=True,
                       timeout=30)
    return p.returncode, p.stdout, p.stderr


rc, out, err = ctl("show", "api", "jwt:C1", "--plan", "pro", "--json")
s = json.loads(out) if rc == 0 else {}
h.eq("ctl show --plan pro: the plan's limits, 5 used of 5, the policy's plans listed",
     ("plan", 5, 5, ["free", "pro"]),
     (s.get("limits"), s.get("windows", [{}])[0].get("limit"),
      s.get("windows", [{}])[0].get("used"), s.get("plans")))
rc, out, err = ctl("show", "api", "jwt:C1")
h.check("ctl show (text) lists the plans", rc == 0 and "\nplans free pro\n" in out, out)
rc, out, err = ctl("show", "api", "jwt:VIP", "--plan", "pro", "--json")
h.eq("ctl show --plan on an account with an override line: the override's",
     "config-override", json.loads(out).get("limits") if rc == 0 else err)
rc, out, err = ctl("show", "api", "jwt:C1", "--plan", "gold")
h.check("ctl show --plan gold: refused, named", rc == 1 and "policy 'api' has no plan 'gold'" in err,
        (rc, err))
rc, out, err = ctl("reset", "api", "jwt:C1")
h.eq("ctl reset jwt:C1: the minute's key is gone", (0, 0),
     (rc, int(h.rcli("EXISTS", "api:limit:v1:{jwt:C1}:1m"))))

# -- a live override beats both ----------------------------------------------
rc, out, err = ctl("override", "api", "jwt:VIP", "4/1m", "--for", "5m")
h.eq("ctl override api jwt:VIP 4/1m: accepted", 0, rc)
h.wait_until("the agent applies the live override over the override line and plan pro",
             lambda: ask("jwt:VIP", "pro").get("limit") == 4, 15)

# -- a reload changes a plan's limits; a bad plan-default keeps the old config
h.write_agent_conf("metrics 127.0.0.1:%d\n%s" % (h.metrics_port, CONF.replace(
    "plan pro api 5/1m", "plan pro api 6/1m")))
os.kill(h.agent.pid, signal.SIGHUP)
h.wait_until("after SIGHUP, plan pro is 6/1m", lambda: ask("jwt:R1", "pro").get("limit") == 6, 15)
h.write_agent_conf("metrics 127.0.0.1:%d\n%s" % (h.metrics_port, CONF.replace(
    "plan-default free", "plan-default gold")))
os.kill(h.agent.pid, signal.SIGHUP)
h.wait_until("a plan-default no plan line defines: the reload is rejected, file:line named",
             lambda: "plan-default: no policy has a plan 'gold'" in u.read_text(h.agent_log), 15)
h.eq("the running config still decides plan pro with 6/1m", 6, ask("jwt:R2", "pro").get("limit"))
h.done()
