#!/usr/bin/env python3
"""One string per refusal reason, everywhere: the table in docs/operations.md
(#refusal-reasons) against the code and a live agent.

Static: the table lists exactly the agent's reasons (spoa/core/window.c) plus
HAProxy's no-decision (haproxy/errors/503.json); each row's 503 body reason,
errors_total label and redis_errors_total kind name the row's reason or a
kind the agent renders (spoa/obs/metrics.c); every log event it names is an
event the agent logs (log_*("event", ...) in spoa/**/*.c); the 503 body takes
the ACK's reason variable, which the agent sets from the same strings.

Live: a real agent refuses unknown-policy, bad-key, bad-cost and overload;
the ACK's reason, the errors_total{reason} label and the log event
(event=decision_refused reason=...) carry the row's string, once each."""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port, wait_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402


def read(*path):
    with open(os.path.join(u.ROOT, *path)) as f:
        return f.read()


h = Harness()
doc = read("docs", "operations.md")
sec = doc.split("## Refusal reasons\n", 1)
h.check("operations.md has a Refusal reasons section", len(sec) == 2)
table = [l for l in sec[-1].split("\n## ", 1)[0].splitlines() if l.startswith("| `")]
rows = {}
for line in table:
    cells = [c.strip() for c in line.strip("|").split("|")]
    rows[cells[0].strip("`")] = cells
h.check("the table has rows", len(rows) >= 8, list(rows))

window_c = read("spoa", "core", "window.c")
agent_reasons = set(re.findall(r'\[WINDOW_REASON_[A-Z_]+\]\s*=\s*"([a-z-]+)"', window_c))
h.check("window.c names the agent's reasons", len(agent_reasons) >= 8, agent_reasons)
body503 = read("haproxy", "errors", "503.json")
m = re.search(r'"reason":"%\[var\(txn\.rl\.reason,([a-z-]+)\)', body503)
h.check("the 503 body's reason is txn.rl.reason, defaulting to HAProxy's own", m, body503)
haproxy_reasons = {m.group(1)} if m else set()
h.eq("the table lists exactly the agent's reasons and HAProxy's default",
     sorted(agent_reasons | haproxy_reasons), sorted(rows))
conn_c = read("spoa", "conn", "conn_ack.c")   # where the ACK is built
h.check("the ACK's reason variable is window_reason_str() (same strings as the table)",
        re.search(r'why = window_reason_str\(d->reason\).*?"reason", why', conn_c, re.S))
h.check("errors_total's reason label is window_reason_str() (same strings)",
        re.search(r'errors_total\{reason=\\"%s\\"\}.*?window_reason_str', read("spoa", "obs", "metrics.c"), re.S))

# operations.md's errors_total row names exactly the same set (protocol.md's
# lists: tests/unit/test_reasons.c).
orow = [l for l in doc.splitlines() if l.startswith("| `errors_total` |")]
h.check("operations.md has the errors_total row", len(orow) == 1, orow)
ocell = orow[0].split("|")[4] if orow else ""
while re.search(r"\([^()]*\)", ocell):      # the reasons, not what their notes name
    ocell = re.sub(r"\([^()]*\)", "", ocell)
ovals = set(re.findall(r"`([a-z]+(?:-[a-z]+)*)`", ocell))
h.eq("operations.md's errors_total row lists exactly the agent's reasons", sorted(agent_reasons), sorted(ovals))

kinds = set(re.findall(r'\[METRICS_REDIS_ERR_[A-Z]+\]\s*=\s*"([a-z]+)"', read("spoa", "obs", "metrics.c")))
events = set()
for path in glob.glob(os.path.join(u.ROOT, "spoa", "**", "*.c"), recursive=True):
    with open(path) as f:
        src = f.read()
    events |= set(re.findall(r'log_(?:debug|info|warn|error)\(\s*"([a-z_]+)"', src))
    # log_limited(level, key, "event", ...), the event possibly chosen by a ?:
    for call in re.findall(r"log_limited\(([^;]*)", src):
        events |= set(re.findall(r'"([a-z_]+)"', call.split(",", 2)[2].split('"%', 1)[0]
                                 if call.count(",") >= 2 else ""))
h.check("the agent logs events", "decision" in events and "redis_connected" in events, sorted(events))
for reason, cells in sorted(rows.items()):
    _, _, client, metrics, logs = cells
    bodies = re.findall(r'"reason":"([a-z-]+)"', client)
    labels = re.findall(r'errors_total\{reason="([a-z-]+)"\}', metrics)
    row_kinds = re.findall(r'kind="([a-z]+)"', metrics)
    row_events = re.findall(r"`([a-z_]+)`", logs)
    h.check("%s: the 503 body names it" % reason,
            bodies == [reason] if "503" in client else bodies == [], client)
    if reason in agent_reasons:
        h.eq("%s: the errors_total label is it" % reason, [reason], labels)
        h.check("%s: at least one log event" % reason, row_events, logs)
    h.check("%s: the redis_errors_total kinds exist %s" % (reason, row_kinds), set(row_kinds) <= kinds, kinds)
    h.check("%s: the log events exist %s" % (reason, row_events), set(row_events) <= events,
            set(row_events) - events)

# -- live: the refusals decided before Redis ---------------------------------------------
h.start_redis()
mport = free_port()
h.start_agent("metrics 127.0.0.1:%d\nmax-inflight 1\npolicy transfer 100/1m\n" % mport)
h.check("metrics endpoint listens", wait_port(mport))
h.check("agent ready", u.wait_ready(mport, 1))
s0 = u.scrape(mport)
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()
seen = {
    "unknown-policy": c.ratelimit("ACC-1", policy="nope")["actions"],
    "bad-key": c.ratelimit("", policy="transfer")["actions"],
    "bad-cost": c.ratelimit("ACC-1", policy="transfer", cost=0)["actions"],
}
# two NOTIFYs in one write: the second finds the first in flight (max-inflight 1)
c.send_raw(spop.encode_notify(101, 1, [("ratelimit", [("policy", "transfer"), ("key", "ACC-2")])]) +
           spop.encode_notify(103, 1, [("ratelimit", [("policy", "transfer"), ("key", "ACC-3")])]))
c.wait_ack(101, 1)
seen["overload"] = c.wait_ack(103, 1)["actions"]
c.close()
s1 = u.scrape(mport)
for reason, act in sorted(seen.items()):
    h.eq("%s: the ACK says error and reason %s" % (reason, reason), ("error", reason),
         (act.get("status"), act.get("reason")))
    h.eq("%s: errors_total{reason=%s} +1" % (reason, reason), 1,
         s1.get("errors_total", reason=reason) - s0.get("errors_total", reason=reason))
    h.check("%s: logged as event=decision_refused reason=%s" % (reason, reason),
            u.wait_log(h, "reason=%s" % reason, 1) and
            re.search(r"level=warn event=decision_refused reason=%s policy=\S+ suppressed=0" % reason,
                      u.log_text(h)), h.log_tail(8))
h.done()
