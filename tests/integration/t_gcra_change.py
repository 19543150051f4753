#!/usr/bin/env python3
"""A token bucket across a change of its rate (issue 35 item 2), through
the agent on a real Redis (either engine: SPOA_TEST_REDIS_ENGINE=module for
the module's).

A reload 10/1m burst=5 -> 2/1m burst=5 on a bucket drained under the old
rate admits nothing more: the 5 units it owes are 150 s at the new rate, a
full bucket (the TAT read as it stood would have admitted 4 more at once).
A live override 1/1h of a 3/1s bucket that admitted one and expired leaves
no hour-long debt: the one unit is a third of a second at the policy's
rate, long gone by then, and `ctl show` says so.

The rates are per minute and per hour, so that no unit comes back while
the test runs however slow the machine is: every count below is exact,
and nothing waits on a clock but the override's own expiry (1 s)."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, free_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

h = Harness()
h.start_redis()
mport = free_port()


def conf(rate):
    return """threads 2
redis-timeout 5s
policy rate %s algorithm=gcra burst=5
policy bucket 3/1s algorithm=gcra
""" % rate


h.start_agent("metrics 127.0.0.1:%d\n%s" % (mport, conf("10/1m")))
h.check("agent ready (metrics up, both workers on Redis)", u.wait_ready(mport, 2))
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()


def ask(key, policy):
    return c.ratelimit(key, policy=policy)["actions"]


def ctl(*args):
    p = subprocess.run([AGENT, "ctl", "-c", os.path.join(h.tmp, "agent.conf")] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def show(policy, key):
    rc, out, err = ctl("show", policy, key, "--json")
    if rc != 0:
        h.fail("ctl show %s %s: exit %d: %s" % (policy, key, rc, err))
        return {}
    return json.loads(out)["windows"][0]


# -- a reload lowers the rate of a drained bucket --------------------------------------------
got = [ask("jwt:ACC-D", "rate") for _ in range(5)]
h.eq("10/1m burst=5: 5 pass at once, remaining 4 .. 0", [("allow", 4 - i) for i in range(5)],
     [(a.get("status"), a.get("remaining")) for a in got])
u.write_conf(h, conf("2/1m"), mport)
h.check("reload to 2/1m burst=5 applied by both workers", u.hup(h, workers=2))
got = [ask("jwt:ACC-D", "rate") for _ in range(4)]
h.eq("after the reload the drained bucket admits nothing more (5 units owed, 150 s)",
     ["deny"] * 4, [a.get("status") for a in got])
h.check("its first denial: a unit comes back 30 s after the last admission, at the new rate",
        25 <= got[0].get("retry_after", 0) <= 30, got[0])
w = show("rate", "jwt:ACC-D")
h.eq("ctl show agrees: burst 5, used 5, remaining 0", (5, 5, 0),
     (w.get("limit"), w.get("used"), w.get("remaining")))
h.check("ctl show: full again within 150 s (5 units of 30 s)", 120 < w.get("reset", 0) <= 150, w)
a = ask("jwt:ACC-F", "rate")
h.eq("a fresh account under the new rate: its burst of 5", ("allow", 5, 4),
     (a.get("status"), a.get("limit"), a.get("remaining")))

# -- a live override 1/1h of a 3/1s bucket, and its expiry --------------------------------------
rc, _, err = ctl("override", "bucket", "jwt:ACC-O", "1/1h", "--for", "1s")
h.check("override bucket jwt:ACC-O 1/1h --for 1s: exit 0", rc == 0, err)
h.wait_until("every worker applied it", lambda: u.scrape(mport).get("live_overrides") == 1, 15)
a = ask("jwt:ACC-O", "bucket")
h.eq("under the override: one passes, a bucket of 1, none left", ("allow", 1, 0),
     (a.get("status"), a.get("limit"), a.get("remaining")))
# (no second request under it: a denial would sit in the agent's deny cache)
h.wait_until("the override expired on every worker", lambda: u.scrape(mport).get("live_overrides") == 0,
             15)
w = show("bucket", "jwt:ACC-O")
h.eq("ctl show after the expiry: the policy's bucket, full (the hour's debt is one unit at 3/1s)",
     (3, 0, 3, 0), (w.get("limit"), w.get("used"), w.get("remaining"), w.get("reset")))
got = [ask("jwt:ACC-O", "bucket") for _ in range(4)]
h.eq("after the expiry the policy's burst passes: 3, then a denial",
     [("allow", 3, 2), ("allow", 3, 1), ("allow", 3, 0)],
     [(a.get("status"), a.get("limit"), a.get("remaining")) for a in got[:3]])
h.eq("... the fourth denied", "deny", got[3].get("status"))

v = h.rcli("GET", "bucket:limit:g1:{jwt:ACC-O}").strip()
h.check("the stored value names the rate it was written under (<tat>:<frac>:1000:3:<owed>)",
        len(v.split(":")) == 5 and v.split(":")[2:4] == ["1000", "3"], v)
mem = int(h.rcli("MEMORY", "USAGE", "bucket:limit:g1:{jwt:ACC-O}").strip())
print("# MEMORY USAGE of one GCRA account (key bucket:limit:g1:{jwt:ACC-O}, value %s): %d bytes"
      % (v, mem))
c.close()
h.done()
