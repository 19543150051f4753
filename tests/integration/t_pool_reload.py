#!/usr/bin/env python3
"""A pool's window on reload (issue 37): a pool's log holds only the running
window's units (a decision trims what left it, the keys expire one window
after the newest entry), so a longer window would count less than was
admitted. A reload that lengthens a pool's window is rejected with
`file:line: reason` and the running configuration keeps deciding, the
pool's count untouched; a shorter window is applied (it counts what is
stored, all of it within the longer window)."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

LOG = "backend:pool:p1:{backend}"
h = Harness()
h.start_redis()


def conf(window):
    return "threads 2\npolicy warm 10/1s\n# the pool\npool backend 3/%s headroom=1\n" \
           "policy api 100/1h pool=backend\n" % window


h.start_agent(conf("1h"), ready=True)
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()
got = [c.ratelimit("ACC-%d" % i, policy="api")["actions"] for i in range(4)]
h.eq("1h pool of 3: three accounts pass, the fourth is refused (pool-full)",
     ["allow", "allow", "allow", "deny"], [a.get("status") for a in got])

u.write_conf(h, conf("2h"))
h.check("a reload that lengthens the pool's window is rejected", u.hup(h, needle="event=reload_rejected"))
line = [ln for ln in u.log_text(h).splitlines() if "event=reload_rejected" in ln][-1]
path = os.path.join(h.tmp, "agent.conf")
h.check("the log names file:line: the pool and both windows",
        re.search(r"%s:\d+: pool 'backend': its window cannot grow on reload \(3600000ms to 7200000ms\)"
                  % re.escape(path), line), line)
lines = open(path).read().splitlines()
n = int(re.search(r"%s:(\d+):" % re.escape(path), line).group(1))
h.eq("... the pool's own line", "pool backend 3/2h headroom=1", lines[n - 1])
a = c.ratelimit("ACC-9", policy="api")["actions"]
h.eq("the running pool still decides: full, refused", ("deny", "pool-full", 3),
     (a.get("status"), a.get("reason"), a.get("limit")))
h.eq("the pool's log untouched: 3 units", 3, int(h.rcli("ZCARD", LOG)))

u.write_conf(h, conf("30m"))
h.check("a shorter window is applied", u.hup(h, workers=2))
a = c.ratelimit("ACC-10", policy="api")["actions"]
h.eq("under the 30m pool the units stored still count: refused", ("deny", "pool-full"),
     (a.get("status"), a.get("reason")))
c.close()
h.done()
