#!/usr/bin/env python3
"""A pool on a real Redis Cluster (issue 37; t_cluster.py's Cluster, 3
primaries + 3 replicas), two agents on it, `pool shared 20/1h headroom=4`
and a policy of large per-account limits in it.

- Under cluster:// a pooled policy's account keys carry the pool's hash
  tag ("api:limit:v1:{shared}/<account>:1h"), so the account's windows and
  the pool's log and hash are in one slot and decided in one atomic call.
- A hog racing over both agents is held at limit - headroom = 16, light
  accounts racing it each get their request, a new account then finds the
  pool full: the pool's log never holds more than 20 and the pool's hash
  agrees with every account's own window, all on the pool's primary.
- `ctl show` and `ctl reset` of a pooled account find its keys (from a
  seed that does not serve the pool's slot: by MOVED).
- A reload that takes the policy out of its pool (its accounts' keys would
  change and start empty) is refused with file:line; the pool keeps
  deciding.

The pool's window is an hour, so nothing leaves it while the test runs."""
import os
import re
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Harness  # noqa: E402
import spop  # noqa: E402
from t_cluster import EngineCluster, key_slot, start_agent, wait_decisions  # noqa: E402
from t_ctl import ctl, ctl_json  # noqa: E402

LOG, ACC = "shared:pool:p1:{shared}", "shared:pool:a1:{shared}"
POLICIES = "policy warm 10/1s\npool shared 20/1h headroom=4\npolicy api 1000/1h pool=shared\n"


h = Harness()
cl = EngineCluster(h)
engine = "redis-engine %s\n" % harness.FORCED_ENGINE if harness.FORCED_ENGINE else ""
start_agent(h, cl, POLICIES + engine)
body = harness.force_threads("redis cluster://%s\nredis-timeout 500ms\nthreads 2\n%s%s"
                             % (cl.seeds(), POLICIES, engine))
_, bport, _, blog = h.spawn_side_agent("agent-b", body)
ports = [h.agent_port, bport]
for port in ports:
    c = spop.Conn().connect("127.0.0.1", port)
    c.hello()
    wait_decisions(c, "jwt:ACC-WARMUP", "warm")
    c.close()


def key(acc):
    return "api:limit:v1:{shared}/%s:1h" % acc


h.eq("the hog's window is in the pool's slot", key_slot(LOG), key_slot(key("jwt:HOG")))
h.check("... where its own tag would not be",
        key_slot("api:limit:v1:{jwt:HOG}:1h") != key_slot(LOG), key_slot(LOG))


def hammer(port, acc, n, out, lock):
    """<n> decisions of <acc> under api through one connection to <port>."""
    c = spop.Conn().connect("127.0.0.1", port)
    c.hello()
    mine = [(acc, c.ratelimit(acc, policy="api")["actions"]) for _ in range(n)]
    c.close()
    with lock:
        out.extend(mine)


def race(jobs):
    out, lock = [], threading.Lock()
    ths = [threading.Thread(target=hammer, args=(p, a, n, out, lock)) for p, a, n in jobs]
    for t in ths:
        t.start()
    for t in ths:
        t.join(120)
    return out


# --- the hog alone, then light accounts racing it -------------------------------------
out = race([(ports[i % 2], "jwt:HOG", 10) for i in range(8)])
st = [a.get("status") for _, a in out]
h.eq("the hog alone, 80 requests over both agents: held at limit - headroom (16)", 16,
     st.count("allow"))
h.eq("the hog: the others denied with reason pool-share", ["pool-share"],
     sorted(set(a.get("reason") for _, a in out if a.get("status") != "allow")))
jobs = [(ports[i % 2], "jwt:HOG", 10) for i in range(4)]
jobs += [(ports[(i + 1) % 2], "jwt:LIGHT-%d" % i, 1) for i in range(4)]
out = race(jobs)
h.eq("four light accounts racing the hog: each admitted within the headroom", ["allow"] * 4,
     [a.get("status") for k, a in out if k.startswith("jwt:LIGHT")])
h.eq("the hog meanwhile: nothing more", [],
     [a for k, a in out if k == "jwt:HOG" and a.get("status") != "deny"])
c = spop.Conn().connect("127.0.0.1", bport)
c.hello()
a = c.ratelimit("jwt:LIGHT-9", policy="api")["actions"]
h.eq("the pool full: a new account is refused with pool-full",
     ("deny", "pool-full", 20, 0), (a.get("status"), a.get("reason"), a.get("limit"), a.get("remaining")))

# --- Redis's own record, on the pool's primary -------------------------------------------
members = cl.rcli("ZRANGE", LOG, 0, -1).split()
h.eq("the pool's log: 20 units, its limit", 20, sum(int(m.split(":")[1], 16) for m in members))
hv = cl.rcli("HGETALL", ACC).split()
held = dict(zip(hv[0::2], (int(x) for x in hv[1::2])))
want = {"jwt:HOG": 16}
want.update(("jwt:LIGHT-%d" % i, 1) for i in range(4))
h.eq("the pool's hash: each account's units", want, held)
owner = cl.owner(LOG)
units = sum(int(m.split(":")[1], 16) for m in cl.rcli("ZRANGE", key("jwt:HOG"), 0, -1).split())
h.check("the hog's own window holds its 16", units == 16, cl.cli(owner, "KEYS", "api:*"))
h.eq("... on the pool's primary, beside the pool's log", ("1", "1"),
     (cl.cli(owner, "EXISTS", LOG), cl.cli(owner, "EXISTS", key("jwt:HOG"))))
h.eq("the refused account: no window written", "0", cl.rcli("EXISTS", key("jwt:LIGHT-9")))

# --- ctl show / reset of a pooled account, from a seed off the pool's slot ------------------
conf = os.path.join(h.tmp, "agent.conf")
seed = [p for p in cl.primaries() if p != owner][0]
ctl_conf = os.path.join(h.tmp, "ctl.conf")
with open(ctl_conf, "w") as f:
    f.write("redis cluster://127.0.0.1:%d\n%s" % (seed, POLICIES))
s = ctl_json(h, ctl_conf, "show", "api", "jwt:HOG")
h.eq("ctl show of the pooled hog: its window's 16", 16, s and s["windows"][0]["used"])
rc, _, err = ctl(ctl_conf, "reset", "api", "jwt:LIGHT-0")
h.check("ctl reset of a pooled account: its key deleted", rc == 0 and "keys_deleted=1" in err, err)
h.eq("... gone from the pool's primary", "0", cl.cli(owner, "EXISTS", key("jwt:LIGHT-0")))

# --- a reload taking the policy out of its pool: refused ---------------------------------
with open(conf) as f:
    text = f.read()
with open(conf, "w") as f:
    f.write(text.replace("policy api 1000/1h pool=shared\n", "policy api 1000/1h\n"))
h.check("a reload taking api out of its pool is rejected",
        harness.hup(h, needle="event=reload_rejected"))
line = [ln for ln in harness.log_text(h).splitlines() if "event=reload_rejected" in ln][-1]
h.check("the log names file:line, the policy and both pools",
        re.search(r"%s:\d+: policy 'api': on a Redis Cluster its pool cannot change on reload "
                  r"\(pool=shared to pool=\(none\)\)" % re.escape(conf), line), line)
c2 = spop.Conn().connect("127.0.0.1", h.agent_port)
c2.hello()
a = c2.ratelimit("jwt:LIGHT-8", policy="api")["actions"]
h.eq("the running pool still decides: full, refused", ("deny", "pool-full"),
     (a.get("status"), a.get("reason")))
c.close()
c2.close()
h.done()
