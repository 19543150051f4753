#!/usr/bin/env python3
"""An account's keys against a real redis-server: a change of limits keeps
counting what the account was admitted in the window, whichever way it came
(a live override with another number of windows, its expiry, its removal, a
config override line on reload, a reload that adds a window); ctl reset
under a live override of another number of windows deletes every key form
and the next request passes; accounts built of '{', '}', ':', '%' and
window-like suffixes never share a key with another account (SPOP decision,
show, reset); and an upgrade from 1.0.x, whose one-window key was
"<policy>:limit:v1:<account>", admits no more: that key still counts, and
a 1.0.x agent beside this one sees what this one admitted."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
from harness import AGENT, Harness  # noqa: E402
import spop  # noqa: E402

SEE_SECS = 15
# hour windows: every count below holds however slow the machine is
POLICIES = """
threads 2
redis-timeout 5s
policy hr 5/1h
live-max hr 50/1h 100/24h
policy two 5/1h 10/24h
policy transfer 3/1h
override transfer jwt:VIP 10/1h 100/24h
policy exp 3/1h precision=1m
live-max exp 50/1h
"""

h = Harness()
h.start_redis()
h.start_agent(ready=True, extra=POLICIES)
conf = os.path.join(h.tmp, "agent.conf")
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()


def ask(key, policy="hr"):
    return c.ratelimit(key, policy=policy)["actions"]


def run(n, key, policy="hr"):
    """<n> decisions: how many were allowed."""
    return sum(ask(key, policy).get("status") == "allow" for _ in range(n))


def ctl(*args):
    p = subprocess.run([AGENT, "ctl", "-c", conf] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def until_limit(key, limit, policy="hr"):
    """Ask until the agent decides <key> with <limit>; the allowed answers
    on the way (the change applies within the poll)."""
    got = {"allowed": 0}

    def seen():
        d = ask(key, policy)
        if d.get("status") == "allow":
            got["allowed"] += 1
        return d.get("limit") == limit
    h.wait_until("the agent decides %s with limit %d" % (key, limit), seen, SEE_SECS)
    return got["allowed"]


# -- 1. a lowering live override with another number of windows -------------
h.eq("hr 5/1h: the account uses its 5, the 6th is denied", (5, "deny"),
     (run(5, "jwt:H1"), ask("jwt:H1")["status"]))
rc, _, err = ctl("override", "hr", "jwt:H1", "4/1h", "10/24h", "--for", "10m")
h.check("ctl override hr jwt:H1 4/1h 10/24h --for 10m: accepted", rc == 0, err)
after = until_limit("jwt:H1", 4)
h.eq("under 4/1h 10/24h: 0 more in the same hour (the 1h window still holds 5)", 0,
     after + run(4, "jwt:H1"))

# -- 2. an override of two windows, then its expiry ---------------------------
# Seen through the agent's own count of the overrides in effect, so that no
# request is asked before it applies or after it ends (a deny would be
# cached: the deny cache's expiry is not what this test is about).
def in_effect(n):
    return h.wait_until("the agent counts %d live overrides in effect" % n,
                        lambda: harness.scrape(h.metrics_port).get("live_overrides") == n, SEE_SECS)


in_effect(1)
rc, _, err = ctl("override", "hr", "jwt:H2", "3/1h", "6/24h", "--for", "3s")
h.check("ctl override hr jwt:H2 3/1h 6/24h --for 3s: accepted", rc == 0, err)
in_effect(2)
h.eq("under 3/1h 6/24h: 3 pass", 3, run(3, "jwt:H2"))
in_effect(1)
h.eq("expired, back to hr 5/1h: 2 more in the hour, not 5", 2, run(5, "jwt:H2"))

# -- 3. a raising one, removed -----------------------------------------------
h.eq("hr 5/1h: jwt:H3 uses 3", 3, run(3, "jwt:H3"))
rc, _, err = ctl("override", "hr", "jwt:H3", "8/1h", "20/24h", "--for", "10m")
h.check("ctl override hr jwt:H3 8/1h 20/24h: accepted", rc == 0, err)
got = until_limit("jwt:H3", 8)
h.eq("under 8/1h 20/24h: 5 more (8 in the hour)", 5, got + run(6, "jwt:H3"))
rc, _, err = ctl("override", "hr", "jwt:H3", "--remove")
h.check("override --remove: accepted", rc == 0, err)
h.eq("removed, back to 5/1h: 0 more", 0, until_limit("jwt:H3", 5) + run(3, "jwt:H3"))

# -- 4. ctl reset under a live override of another number of windows ---------
h.eq("jwt:H1 is still denied", "deny", ask("jwt:H1")["status"])
rc, out, err = ctl("reset", "hr", "jwt:H1")
h.check("ctl reset hr jwt:H1: accepted", rc == 0, err)
left = [k for k in h.rcli("KEYS", "hr:limit:*jwt:H1*").split()]
h.eq("reset: no key of jwt:H1 in any form is left", [], left)
# the agent forgets its cached denial once it sees the reset
got = {}
h.wait_until("reset: the next request passes", lambda: got.update(ask("jwt:H1")) or
             got.get("status") == "allow", SEE_SECS)
h.eq("... under the live 4/1h 10/24h, from empty windows", ("allow", 4, 3),
     (got.get("status"), got.get("limit"), got.get("remaining")))

# -- 5. accounts that look like another's key ---------------------------------
# the several-window form of jwt:VIP (config override) and the one-window
# form of '{jwt:VIP}:1h' were one key before
h.eq("jwt:VIP (10/1h 100/24h) uses 2", 2, run(2, "jwt:VIP", "transfer"))
odd = ["{jwt:VIP}:1h", "jwt:VIP}:1h", "{jwt:VIP%7D}:1h", "a}:1h", "%7D", "}", "{", "%", ":1h"]
for k in odd:
    h.eq("'%s' (3/1h) has its own window: 3 pass, the 4th is denied" % k, (3, "deny"),
         (run(3, k, "transfer"), ask(k, "transfer")["status"]))
d = ask("jwt:VIP", "transfer")
h.eq("jwt:VIP still holds its own 2 (3rd now): remaining 7", ("allow", 7), (d["status"], d["remaining"]))
rc, out, err = ctl("show", "transfer", "{jwt:VIP}:1h", "--json")
h.check("show '{jwt:VIP}:1h': its own key, used 3", rc == 0 and '"used":3' in out and
        "transfer:limit:v1:{{jwt:VIP%7D:1h}:1h" in out, out + err)
rc, out, err = ctl("reset", "transfer", "{jwt:VIP}:1h")
h.check("reset '{jwt:VIP}:1h': accepted", rc == 0, err)
d = ask("jwt:VIP", "transfer")
h.eq("... jwt:VIP's window is untouched: remaining 6", ("allow", 6), (d["status"], d["remaining"]))
h.check("... and '{jwt:VIP}:1h' starts afresh", h.wait_until(
    "'{jwt:VIP}:1h' passes again", lambda: ask("{jwt:VIP}:1h", "transfer")["status"] == "allow",
    SEE_SECS))

# -- 6. a config override line and a reload that adds a window ----------------
h.eq("two 5/1h 10/24h is 'hr' to come: jwt:C uses 5 of hr", 5, run(5, "jwt:C"))
h.eq("transfer 3/1h: jwt:R uses 3", 3, run(3, "jwt:R", "transfer"))
harness.write_conf(h, POLICIES.replace("policy hr 5/1h", "policy hr 5/1h\noverride hr jwt:C 4/1h 10/24h")
                   .replace("policy transfer 3/1h", "policy transfer 3/1h 10/24h"),
                   metrics_port=h.metrics_port)
h.check("reload with a config override line of two windows for jwt:C, and transfer "
        "with a second window", harness.hup(h, workers=2))
d = ask("jwt:C")
h.eq("config override 4/1h 10/24h after the reload: denied, limit 4", ("deny", 4), (d["status"], d["limit"]))
d = ask("jwt:R", "transfer")
h.eq("transfer 3/1h 10/24h after the reload: denied, limit 3", ("deny", 3), (d["status"], d["limit"]))

# -- 7. an upgrade from 1.0.x -------------------------------------------------
# A 1.0.x agent decided one-window policies on "<policy>:limit:v1:<account>"
# (b1 for a bucketed window): played here by the script on that key.
lua = open(os.path.join(harness.ROOT, "lua", "sliding_window.lua")).read()


def old_agent(key, window):
    r = h.rcli("EVAL", lua, 1, key, 1, 5 if key.startswith("hr:") else 3, window)
    return r.split()[0] == "1"


h.eq("1.0.x admitted jwt:U 5 times under hr 5/1h", 5,
     sum(old_agent("hr:limit:v1:jwt:U", 3600000) for _ in range(5)))
h.eq("this agent: jwt:U is denied (the 1.0.x key counts)", "deny", ask("jwt:U")["status"])
h.eq("this agent admits jwt:U2 twice", 2, run(2, "jwt:U2"))
h.eq("... and a 1.0.x agent beside it sees them: 3 more, not 5", 3,
     sum(old_agent("hr:limit:v1:jwt:U2", 3600000) for _ in range(5)))
h.eq("... so this agent denies jwt:U2 too", "deny", ask("jwt:U2")["status"])
h.eq("bucketed (precision=1m): 1.0.x admitted jwt:UB 3 times in b1", 3,
     sum(old_agent("exp:limit:b1:jwt:UB", "3600000:60000") for _ in range(3)))
h.eq("... this agent denies jwt:UB", "deny", ask("jwt:UB", "exp")["status"])
rc, out, err = ctl("show", "hr", "jwt:U", "--json")
h.check("show lists the 1.0.x key while it counts", rc == 0 and '"hr:limit:v1:jwt:U"' in out, out + err)
rc, out, err = ctl("reset", "hr", "jwt:U")
h.eq("reset deletes the 1.0.x key too", "0", h.rcli("EXISTS", "hr:limit:v1:jwt:U"))
h.check("... and jwt:U passes again",
        h.wait_until("jwt:U passes again", lambda: ask("jwt:U")["status"] == "allow", SEE_SECS))

mem_new = int(h.rcli("MEMORY", "USAGE", "hr:limit:v1:{jwt:H2}:1h", "SAMPLES", "0") or 0)
print("# MEMORY USAGE hr:limit:v1:{jwt:H2}:1h (5 entries): %d bytes" % mem_new)
h.done()
