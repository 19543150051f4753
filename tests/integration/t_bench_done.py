#!/usr/bin/env python3
"""spoa-bench --done (issue 38's bench): the response phase as HAProxy plays
it. Against a real agent per engine (script and module) on one Redis, under
`policy bulk 1000000/1h inflight=1000 lease=10m`:

- with --done, every admission's lease is named back in a ratelimit-done
  NOTIFY of its own, each acknowledged (the report counts them), and Redis
  then holds no lease of any account: the agent released them all;
- without --done the leases stay in Redis (one per admission, until
  lease=): what --done is measured against;
- --done against a policy without inflight= sends nothing (no lease in any
  answer), as the edge's rule, conditional on txn.rl.lease, sends nothing.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import ROOT, Harness, MODULE_SO  # noqa: E402
import harness  # noqa: E402

BENCH = os.environ.get("BENCH", os.path.join(ROOT, "bench", "spoa-bench"))
N, KEYS = 300, 5

harness.FORCED_ENGINE = ""   # each agent here names its engine
h = Harness()
h.require_module()
h.start_redis(extra=["--loadmodule", MODULE_SO])
agents = harness.engine_agents(h, "policy warm 10/1s\npolicy bulk 1000000/1h inflight=1000 lease=10m\n"
                                  "policy plain 1000000/1h\n")


def bench(port, prefix, *extra, policy="bulk"):
    """spoa-bench -n N over KEYS accounts <prefix>0.. ; its JSON report."""
    r = subprocess.run([BENCH, "-a", "127.0.0.1:%d" % port, "-c", "2", "-d", "8", "-n", str(N),
                        "-k", str(KEYS), "--key-prefix", prefix, "-p", policy, "--strict", "--json"]
                       + list(extra), capture_output=True, text=True, timeout=120)
    h.eq("spoa-bench %s %s exits 0 (%s)" % (prefix, " ".join(extra), r.stderr.strip()), 0, r.returncode)
    return json.loads(r.stdout) if r.stdout.strip() else {}


def leases(prefix):
    """The leases Redis holds over every account <prefix>0..KEYS-1."""
    return sum(int(h.rcli("ZCARD", "bulk:inflight:l1:{%s%d}" % (prefix, i)) or 0) for i in range(KEYS))


for engine, (_, port, _) in sorted(agents.items()):
    p = "D%s-" % engine
    r = bench(port, p, "--done")
    h.eq("%s, --done: %d admitted, %d ratelimit-done sent and acked" % (engine, N, N),
         (N, N, N), (r.get("allow"), r.get("done_sent"), r.get("done_acked")))
    # the agent acknowledges a done at once and releases behind it
    h.wait_until("%s, --done: Redis holds no lease of the %d accounts" % (engine, KEYS),
                 lambda: leases(p) == 0)
    h.eq("%s, --done: no lease left" % engine, 0, leases(p))

    p = "N%s-" % engine
    r = bench(port, p)
    h.eq("%s, without --done: %d admitted, no done counted" % (engine, N),
         (N, None), (r.get("allow"), r.get("done_sent")))
    h.eq("%s, without --done: every admission's lease stays in Redis" % engine, N, leases(p))

    r = bench(port, "P%s-" % engine, "--done", policy="plain")
    h.eq("%s, --done under a policy without inflight=: %d admitted, nothing sent" % (engine, N),
         (N, 0, 0), (r.get("allow"), r.get("done_sent"), r.get("done_acked")))

_, port, _ = agents["module"]
r = bench(port, "C-", "--done-cost", "3")
h.eq("--done-cost implies --done: every lease released", (N, N), (r.get("done_sent"), r.get("done_acked")))
h.wait_until("--done-cost: no lease left", lambda: leases("C-") == 0)
h.done()
