#!/usr/bin/env python3
"""`ctl show` and `ctl reset` under an inflight= policy (issue 38), against
a real redis-server: `policy upload 1000/1h inflight=3 lease=1m`.

- show: the account's running leases beside its windows (--json
  "inflight": limit, running, next_end_ms, key; text "inflight 3 running
  2 next ends in ...s"), read at Redis's time as the decisions count them;
  a lease released by "ratelimit-done" is no longer counted; a policy
  without inflight= shows none.
- reset: the account's windows start afresh, its leases stay (each is a
  request still running: deleting them would let the account run more
  than inflight= at once), and ctl says so on stderr; the account is then
  admitted while a slot is free and refused in-flight once 3 run."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, wait_for  # noqa: E402
import spop  # noqa: E402

ACC = "jwt:ACC-L"
LEASES = "upload:inflight:l1:{%s}" % ACC
h = Harness()
h.start_redis()
h.start_agent("policy upload 1000/1h inflight=3 lease=1m\npolicy plain 10/1m\n", ready=True)
conf = os.path.join(h.tmp, "agent.conf")


def ctl(*args):
    p = subprocess.run([AGENT, "ctl", "-c", conf] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def show_json(policy, acc):
    rc, out, err = ctl("show", policy, acc, "--json")
    h.eq("ctl show %s %s --json: exit 0" % (policy, acc), 0, rc)
    try:
        return json.loads(out)
    except ValueError:
        h.fail("ctl show --json: not JSON: %r %r" % (out, err))
        return {}


c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()
a1 = c.ratelimit(ACC, policy="upload")["actions"]
a2 = c.ratelimit(ACC, policy="upload")["actions"]
h.eq("two leases taken", ("allow", "allow", "2"), (a1.get("status"), a2.get("status"),
                                                 h.rcli("ZCARD", LEASES)))
j = show_json("upload", ACC)
inf = j.get("inflight", {})
h.eq("show --json: the leases beside the windows", (3, 2, LEASES),
     (inf.get("limit"), inf.get("running"), inf.get("key")))
h.check("show --json: the first ends within lease= (1m)", 0 < inf.get("next_end_ms", 0) <= 60000, inf)
h.eq("show --json: the window still counts the two admissions", 2,
     (j.get("windows") or [{}])[0].get("used"))
rc, out, err = ctl("show", "upload", ACC)
h.check("show (text): a line for the leases",
        "inflight 3 running 2 next ends in " in out and ("key " + LEASES) in out, out)

c.notify([("ratelimit-done", [("policy", "upload"), ("key", ACC), ("lease", a1.get("lease"))])])
h.eq("a lease released by ratelimit-done is no longer counted", 1,
     wait_for(lambda: show_json("upload", ACC).get("inflight", {}).get("running") == 1 and 1, 10))
h.check("a policy without inflight= shows no leases", "inflight" not in show_json("plain", ACC))

c.ratelimit(ACC, policy="upload")
rc, out, err = ctl("reset", "upload", ACC)
h.eq("reset: exit 0", 0, rc)
h.check("reset: ctl says the leases stay", "2 in-flight leases stay" in err, err)
h.eq("reset: the windows start afresh, the leases stay", ("", "2"),
     (h.rcli("KEYS", "upload:limit:*"), h.rcli("ZCARD", LEASES)))
a = c.ratelimit(ACC, policy="upload")["actions"]
h.eq("after reset: the third slot is taken", "allow", a.get("status"))
a = c.ratelimit(ACC, policy="upload")["actions"]
h.eq("after reset: a fourth is refused in-flight (3 still run)", ("deny", "in-flight"),
     (a.get("status"), a.get("reason")))
h.eq("show: 3 running", 3, show_json("upload", ACC).get("inflight", {}).get("running"))
c.close()
h.done()
