#!/usr/bin/env python3
"""Operating a pool (issue 37) against a real redis-server: its metrics,
`ctl show-pool`, `ctl top-denied` telling a pool's refusals apart, and
`ctl reset` on a pooled policy.

`pool backend 5/1h headroom=2` shared by two policies, `pool idle` unused,
and a policy without a pool. A hog takes 3 (limit - headroom) and is
refused twice with pool-share; two light accounts take the last 2; a third
account is refused with pool-full; an account over its own limit is denied
without its pool. Then:

- metrics: pool_limit, pool_used (5), pool_accounts_active (3) as the
  live-control thread reads them each second; pool_refusals_total by pool
  and reason (2 pool-share, 1 pool-full); the idle pool's series at 0;
- show-pool: used, remaining, reset, the accounts by units and whether
  each is at its share, as the engines' log and hash hold them; --top;
- top-denied: api/pool-share and other/pool-full apart from the account's
  own limit (--json: reason);
- show and reset of an account under a pooled policy: its own windows
  only (they used to take the pool's keys for the account's: reset deleted
  the whole pool, every account's units); the pool keeps the hog's units,
  and ctl says so.

The pools' windows are an hour: nothing leaves them while the test runs."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
from harness import AGENT, Harness  # noqa: E402
import spop  # noqa: E402

LOG, HASH = "backend:pool:p1:{backend}", "backend:pool:a1:{backend}"
CONF = """
threads 2
redis-timeout 5s
pool backend 5/1h headroom=2
pool idle 10/1h
policy api 100/1h pool=backend
policy other 100/1h pool=backend
policy plain 3/1h
"""
SEE_SECS = 15

h = Harness()
h.start_redis()
h.start_agent(CONF, ready=True)
conf = os.path.join(h.tmp, "agent.conf")


def ctl(*args):
    p = subprocess.run([AGENT, "ctl", "-c", conf] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def ctl_json(*args):
    rc, out, err = ctl(*args, "--json")
    if rc != 0:
        h.fail("ctl %s: exit %d: %s" % (" ".join(args), rc, err))
        return None
    return json.loads(out)


def scrape():
    return harness.scrape(h.metrics_port)


m0 = scrape()
h.eq("before any traffic: every pool's series, at 0 (limit from the config)",
     [5, 0, 0, 0, 0, 10, 0, 0, 0, 0],
     [m0.get(n, pool=p, **lb) for p in ("backend", "idle") for n, lb in
      (("pool_limit", {}), ("pool_used", {}), ("pool_accounts_active", {}),
       ("pool_refusals_total", {"reason": "pool-full"}),
       ("pool_refusals_total", {"reason": "pool-share"}))])
h.eq("pool_used is a gauge, pool_refusals_total a counter",
     ("gauge", "gauge", "counter"),
     tuple(m0.types.get(harness.PREFIX + n) for n in
           ("pool_used", "pool_accounts_active", "pool_refusals_total")))

c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()


def ask(key, policy):
    return c.ratelimit(key, policy=policy)["actions"]


hog = [ask("jwt:HOG", "api") for _ in range(5)]
h.eq("the hog alone: 3 admitted (limit - headroom), then pool-share",
     ["allow"] * 3 + ["deny"] * 2, [a.get("status") for a in hog])
h.eq("the hog's refusals say pool-share", ["pool-share"] * 2, [a.get("reason") for a in hog[3:]])
light = [ask("jwt:L1", "api"), ask("jwt:L2", "other")]
h.eq("two light accounts take the headroom", ["allow", "allow"], [a.get("status") for a in light])
full = ask("jwt:L3", "other")
h.eq("a third: pool-full", ("deny", "pool-full"), (full.get("status"), full.get("reason")))
own = [ask("jwt:P", "plain") for _ in range(4)]
h.eq("an unpooled account over its own limit", ["allow"] * 3 + ["deny"],
     [a.get("status") for a in own])
c.close()

# -- metrics ---------------------------------------------------------------------------
h.check("metrics: pool_used 5 and pool_accounts_active 3 (read each second)",
        harness.wait_for(lambda: (lambda m: m.get("pool_used", pool="backend") == 5 and
                                  m.get("pool_accounts_active", pool="backend") == 3)(scrape()),
                         SEE_SECS), scrape().text[-3000:])
m = scrape()
h.eq("metrics: refusals by pool and reason; the idle pool's none",
     (2, 1, 0, 0, 0, 0),
     (m.get("pool_refusals_total", pool="backend", reason="pool-share"),
      m.get("pool_refusals_total", pool="backend", reason="pool-full"),
      m.get("pool_refusals_total", pool="idle", reason="pool-share"),
      m.get("pool_refusals_total", pool="idle", reason="pool-full"),
      m.get("pool_used", pool="idle"), m.get("pool_accounts_active", pool="idle")))
h.eq("metrics: the pool's refusals are denials of their policies, in errors_total too",
     (2, 1, 2, 1), (m.get("decisions_total", policy="api", status="deny"),
                    m.get("decisions_total", policy="other", status="deny"),
                    m.get("errors_total", reason="pool-share"), m.get("errors_total", reason="pool-full")))

# -- show-pool -------------------------------------------------------------------------
doc = ctl_json("show-pool", "backend")
if doc:
    h.eq("show-pool --json: the pool as the engines count it",
         ("backend", 5, 3600000, 2, 5, 0, 3, ["api", "other"]),
         (doc["pool"], doc["limit"], doc["window_ms"], doc["headroom"], doc["used"],
          doc["remaining"], doc["accounts"], doc["policies"]))
    h.check("show-pool --json: reset within the hour", 3500 <= doc["reset"] <= 3600, doc)
    h.eq("show-pool --json: the accounts by units, the hog at its share",
         [("jwt:HOG", 3, True), ("jwt:L1", 1, False), ("jwt:L2", 1, False)],
         [(t["account"], t["units"], t["at_share"]) for t in doc["top"]])
    h.eq("the accounts' units are the pool's hash", {"jwt:HOG": 3, "jwt:L1": 1, "jwt:L2": 1},
         {t["account"]: int(h.rcli("HGET", HASH, t["account"])) for t in doc["top"]})
doc = ctl_json("show-pool", "backend", "--top", "1")
h.eq("show-pool --top 1: the hog only", ["jwt:HOG"], [t["account"] for t in (doc or {}).get("top", [])])
rc, out, err = ctl("show-pool", "backend")
lines = out.splitlines()
h.check("show-pool (text): the pool's line", rc == 0 and lines and lines[0].startswith(
    "pool backend limit 5/1h headroom 2 used 5 remaining 0 reset ") and
    lines[0].endswith(" accounts 3 policies api,other"), out + err)
h.eq("show-pool (text): header, then the hog first", (["UNITS", "USED%", "AT-SHARE", "ACCOUNT"],
                                                      ["3", "60", "yes", "jwt:HOG"]),
     (lines[1].split() if len(lines) > 1 else None, lines[2].split() if len(lines) > 2 else None))
doc = ctl_json("show-pool", "idle")
h.eq("show-pool of an unused pool", (0, 10, 0, []),
     (doc["used"], doc["remaining"], doc["accounts"], doc["top"]) if doc else None)
rc, out, err = ctl("show-pool", "--help")
h.check("show-pool --help: its usage", rc == 0 and out.startswith(
    "Usage: ratelimit-spoa ctl [-c FILE] show-pool POOL [--top N] [--json]"), out + err)
rc, out, err = ctl("--help")
h.check("ctl --help lists show-pool", rc == 0 and "show-pool POOL [--top N]" in out, out)
rc, out, err = ctl("show-pool", "nosuch")
h.check("show-pool of an unknown pool: exit 1, said", rc == 1 and "no pool 'nosuch'" in err, err)

# -- top-denied ------------------------------------------------------------------------
want = [("api", "pool-share", "jwt:HOG", 2), ("other", "pool-full", "jwt:L3", 1),
        ("plain", "account", "jwt:P", 1)]
h.check("top-denied --json: a pool's refusals apart, with their reason",
        harness.wait_for(lambda: sorted((x["policy"], x["reason"], x["account"], x["denied"])
                                        for x in ctl_json("top-denied") or []) == want, SEE_SECS),
        ctl_json("top-denied"))
h.eq("top-denied --policy api: its pool's refusals", [("api", "pool-share", "jwt:HOG")],
     [(x["policy"], x["reason"], x["account"]) for x in ctl_json("top-denied", "--policy", "api")])
rc, out, _ = ctl("top-denied")
h.check("top-denied (text): the pool's reason beside the policy",
        rc == 0 and ["2", "api/pool-share", "jwt:HOG"] in [ln.split() for ln in out.splitlines()], out)

# -- show of a pooled account: its window, not its pool's keys ----------------------------
doc = ctl_json("show", "api", "jwt:L1")
h.eq("show api jwt:L1: its own window first, no key of the pool (show-pool's)",
     (("api:limit:v1:{jwt:L1}:1h", 1, 99), []),
     ((lambda ws: (ws[0] if ws else None, [w for w in ws if ":pool:" in w[0]]))(
         [(w["key"], w["used"], w["remaining"]) for w in (doc or {}).get("windows", [])])))

# -- reset on a pooled policy ------------------------------------------------------------
before = (h.rcli("ZRANGE", LOG, 0, -1, "WITHSCORES"), h.rcli("HGETALL", HASH))
h.check("the hog's window exists", h.rcli("EXISTS", "api:limit:v1:{jwt:HOG}:1h") == "1",
        h.rcli("KEYS", "*"))
rc, out, err = ctl("reset", "api", "jwt:HOG")
h.check("reset api jwt:HOG: done, its window deleted",
        rc == 0 and h.rcli("EXISTS", "api:limit:v1:{jwt:HOG}:1h") == "0", err)
h.check("reset: ctl says the pool keeps the hog's 3 units",
        "pool backend keeps the account's 3 units" in err, err)
h.eq("reset: the pool's log and hash unchanged",
     before, (h.rcli("ZRANGE", LOG, 0, -1, "WITHSCORES"), h.rcli("HGETALL", HASH)))
rc, out, err = ctl("reset", "plain", "jwt:P")
h.check("reset of an unpooled policy says nothing of a pool", rc == 0 and "pool" not in err, err)

h.done()
