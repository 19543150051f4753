#!/usr/bin/env python3
"""The Grafana dashboard (etc/grafana/ratelimit-spoa.json) against a real
Prometheus: Debian's prometheus binary on a loopback ephemeral port, its own
temp storage, scraping our agent every second (and loading the alert rules)
while SPOP load runs: allows, denies answered from Redis and from the deny
cache, shadow denies, a reload. Then every query of every panel, of the
template variables and of the annotations is evaluated through the HTTP API
(template variables substituted): each must parse and return data with at
least one number. The rules must load and evaluate without error.

Fails, never skips, without the prometheus binary (make deps installs it).
With DASHBOARD_PLOT=path.svg the run is longer, takes Redis away for a while,
and renders the main graphs with tools/dashboard-plot.sh (docs/dashboard.svg
is made this way); the test itself never needs it."""
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port, wait_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

DASHBOARD = os.path.join(u.ROOT, "etc", "grafana", "ratelimit-spoa.json")
RULES = os.path.join(u.ROOT, "etc", "prometheus", "ratelimit-spoa.rules.yml")
PLOT = os.environ.get("DASHBOARD_PLOT")
# Grafana's built-in and our template variables, as a query editor would
# expand them for a short time range.
SUBST = {"$__rate_interval": "1m", "$__interval": "1s", "$__range": "1m",
         "${instance}": ".*", "$instance": ".*", "${policy}": ".*", "$policy": ".*",
         "${pool}": ".*", "$pool": ".*"}
POLICIES = """
threads 2
policy transfer 20/1m
policy reads 1000000/1m on-redis-error=allow
policy payout 5/1m shadow
pool backend 40/1m headroom=4
policy search 1000/1m pool=backend
"""

h = Harness()
prom_bin = shutil.which("prometheus")
if not prom_bin:
    h.fail("prometheus is installed (apt-get install prometheus, or make deps)")
    h.done()
h.ok("prometheus is installed")

with open(DASHBOARD) as f:
    dash = json.load(f)
h.ok("the dashboard is JSON")

# -- structure: what Grafana needs to import it ----------------------------------------
panels = dash.get("panels", [])
ids = [p.get("id") for p in panels]
h.check("panels have unique ids", len(ids) == len(set(ids)) and None not in ids, ids)
variables = {v["name"] for v in dash.get("templating", {}).get("list", [])}
h.check("template variables datasource, instance, policy, pool",
        {"datasource", "instance", "policy", "pool"} <= variables, variables)
targets = [(p["title"], t) for p in panels for t in p.get("targets", [])]
h.check("every panel has a query", all(p.get("targets") for p in panels),
        [p["title"] for p in panels if not p.get("targets")])
h.check("every target has a refId and an expr", all(t.get("refId") and t.get("expr") for _, t in targets))
used = set()
for _, t in targets:
    used |= set(re.findall(r"\$\{?([a-zA-Z_]+)", t["expr"]))
h.check("every variable a query uses is defined or built in",
        used <= variables | {"__rate_interval", "__interval", "__range"}, used)
cells = set()
overlap = []
for p in panels:
    g = p["gridPos"]
    for x in range(g["x"], g["x"] + g["w"]):
        for y in range(g["y"], g["y"] + g["h"]):
            if (x, y) in cells or x >= 24:
                overlap.append(p["title"])
            cells.add((x, y))
h.eq("panels fit the 24-column grid without overlapping", [], sorted(set(overlap)))
for want in ("decisions per second by policy and status", "deny ratio", "errors by reason",
             "decision latency", "redis call latency", "deny-cache share", "connections",
             "redis link state", "reloads", "pool used", "pool refusals", "pool accounts"):
    h.check("a panel for %s" % want, any(want in p["title"].lower() for p in panels))

# -- the stack: Redis, agent, Prometheus scraping it every second --------------------------
h.start_redis()
mport = free_port()
h.start_agent("metrics 127.0.0.1:%d\n%s" % (mport, POLICIES))
h.check("agent ready (both workers connected)", u.wait_ready(mport, 2))
pport = free_port()
pdir = os.path.join(h.tmp, "prometheus")
os.mkdir(pdir)
with open(os.path.join(pdir, "prometheus.yml"), "w") as f:
    f.write("""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%s]
scrape_configs:
  - job_name: ratelimit-spoa
    scrape_interval: 1s
    scrape_timeout: 900ms
    static_configs:
      - targets: ["127.0.0.1:%d"]
""" % (json.dumps(RULES), mport))
prom = h.spawn([prom_bin, "--config.file=" + os.path.join(pdir, "prometheus.yml"),
                "--storage.tsdb.path=" + os.path.join(pdir, "data"),
                "--web.listen-address=127.0.0.1:%d" % pport, "--log.level=warn"],
               os.path.join(h.tmp, "prometheus.log"))
h.check("prometheus listens on 127.0.0.1:%d" % pport, wait_port(pport, 30))
BASE = "http://127.0.0.1:%d" % pport


def api(path, **params):
    url = BASE + path + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            return json.loads(body)
        except ValueError:      # not ready yet: a plain-text 503
            return {"status": "error", "error": "%d %s" % (e.code, body[:80])}
    except OSError as e:
        return {"status": "error", "error": str(e)}


def query(expr):
    return api("/api/v1/query", query=expr)


def numbers(res):
    """The finite values of an instant or range query's answer."""
    out = []
    for s in res.get("data", {}).get("result", []):
        vals = s.get("values") or ([s["value"]] if "value" in s else [])
        out += [float(v[1]) for v in vals if not math.isnan(float(v[1])) and not math.isinf(float(v[1]))]
    return out


up = u.wait_for(lambda: numbers(query('up{job="ratelimit-spoa"} == 1')), 30)
h.check("prometheus scrapes the agent (up == 1)", up, prom.poll())


# -- load: allows, denies (Redis, then the deny cache), shadow denies --------------------
class PacedLoad(threading.Thread):
    """One connection per policy, a small pipelined batch every 20 ms."""

    def __init__(self, policy, keys):
        super().__init__(daemon=True)
        self.policy, self.keys = policy, keys
        self.halt = threading.Event()
        self.n, self.errors = 0, []

    def run(self):
        try:
            c = spop.Conn().connect("127.0.0.1", h.agent_port)
            c.hello()
            sid = 1
            while not self.halt.is_set():
                ids = []
                for i in range(4):
                    c.send_notify(sid, 1, [("ratelimit", [("policy", self.policy),
                                                          ("key", self.keys[(self.n + i) % len(self.keys)])])])
                    ids.append(sid)
                    sid += 2
                for s in ids:
                    c.wait_ack(s, 1, timeout=10)
                self.n += len(ids)
                time.sleep(0.02)
            c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            self.errors.append("%s: %s" % (type(e).__name__, e))


loads = [PacedLoad("transfer", ["ACC-D%d" % i for i in range(8)]),
         PacedLoad("reads", ["ACC-R%d" % i for i in range(50)]),
         PacedLoad("payout", ["ACC-P%d" % i for i in range(4)]),
         PacedLoad("search", ["ACC-S%d" % i for i in range(3)])]
start = time.time()
for t in loads:
    t.start()

seconds = float(os.environ.get("DASHBOARD_SECONDS", 120 if PLOT else 12))
time.sleep(seconds / 3)
u.hup(h, workers=2)
if PLOT:
    # an outage for the picture: errors by reason, link state, fail-open allows
    time.sleep(seconds / 6)
    h.stop_redis()
    time.sleep(seconds / 6)
    h.start_redis()
    u.wait_ready(mport, 2, 30)
    time.sleep(seconds / 3)
else:
    time.sleep(seconds * 2 / 3)
# enough scrapes inside the 1m windows, whatever the machine's pace
u.wait_for(lambda: (numbers(query('count_over_time(up{job="ratelimit-spoa"}[1m])')) or [0])[0] >= 10, 30)
for t in loads:
    t.halt.set()
for t in loads:
    t.join(20)
end = time.time()
h.eq("load ran without errors", [], [e for t in loads for e in t.errors])
h.check("load sent decisions on every policy", all(t.n > 0 for t in loads), [(t.policy, t.n) for t in loads])

# -- every query of the dashboard returns data --------------------------------------------


def expand(expr):
    for k in sorted(SUBST, key=len, reverse=True):
        expr = expr.replace(k, SUBST[k])
    return expr


for title, t in targets:
    expr = expand(t["expr"])
    res = query(expr)
    what = "%s [%s]" % (title, t.get("legendFormat") or t["refId"])
    if res.get("status") != "success":
        h.fail("%s: parses: %s (%s)" % (what, res.get("error"), expr))
        continue
    vals = numbers(res)
    h.check("%s: returns data (%d series)" % (what, len(res["data"]["result"])), vals, expr)

for v in dash["templating"]["list"]:
    if v["type"] != "query":
        continue
    m = re.match(r"label_values\((.*),\s*(\w+)\)$", v["definition"])
    if not m:
        h.fail("variable %s: a label_values(metric, label) query" % v["name"])
        continue
    res = api("/api/v1/label/%s/values" % m.group(2), **{"match[]": expand(m.group(1))})
    h.check("variable %s: values %s" % (v["name"], res.get("data")),
            res.get("status") == "success" and res.get("data"), res)
for a in dash.get("annotations", {}).get("list", []):
    res = api("/api/v1/query_range", query=expand(a["expr"]), start="%.3f" % start,
              end="%.3f" % end, step="1")
    h.check("annotation %s: marks the reload" % a["name"], res.get("status") == "success" and numbers(res), res)

vals = numbers(query('sum(ratelimit_spoa_decisions_total{status="deny"})'))
h.check("denies happened (so deny ratio and cache share mean something)", vals and vals[0] > 0, vals)
vals = numbers(query("sum(ratelimit_spoa_local_cache_answers_total)"))
h.check("deny-cache answers happened", vals and vals[0] > 0, vals)

# -- the alert rules load and evaluate on real data --------------------------------------------
rules = api("/api/v1/rules")
groups = rules.get("data", {}).get("groups", [])
loaded = [r for g in groups for r in g.get("rules", [])]
with open(RULES) as f:
    nfile = len(re.findall(r"^\s*- alert:", f.read(), re.M))
h.eq("prometheus loaded every alert rule", nfile, len(loaded))
bad = [(r["name"], r.get("lastError")) for r in loaded if r.get("health") not in ("ok",)]
h.eq("every rule evaluated without error", [], bad)

if PLOT:
    p = subprocess.run([os.path.join(u.ROOT, "tools", "dashboard-plot.sh"), BASE, "%d" % start,
                        "%d" % end, PLOT], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, RATE_INTERVAL="10s"))
    h.check("dashboard-plot.sh rendered %s" % PLOT, p.returncode == 0 and os.path.getsize(PLOT) > 0,
            p.stdout + p.stderr)

h.stop(prom)
h.done()
