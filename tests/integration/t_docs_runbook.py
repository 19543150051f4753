#!/usr/bin/env python3
"""The runbook reads what the documented log format writes: every field of
HAProxy's log that docs/operations.md reads ("Reading the edge log", "Agent
down", the shadow roll-out) is in each of the four log formats of
docs/integrate.md step 5 (httplog 2.6 and 3.x, JSON 2.6 and 3.x), under its
own name; the example log line has exactly the httplog format's fields, in
its order; the runbook names the site's stats socket, not the demo's
RL_ADMIN_SOCK; every st= of the SPOE example lines is in the st= table.
(tests/e2e/t_integrate_edge.sh runs the four formats through a real HAProxy,
tests/e2e/t_agent_down_log.sh the SPOE lines and the stats socket.)"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import ROOT, Harness  # noqa: E402

h = Harness()


def read(name):
    with open(os.path.join(ROOT, "docs", name)) as f:
        return f.read()


def block(text, tag):
    """The code block under "<!-- TAG -->"."""
    m = re.search(r"^<!-- " + re.escape(tag) + r" -->\n```\n(.*?)\n```", text, re.S | re.M)
    return m.group(1) if m else ""


def section(text, title):
    """From the heading TITLE to the next heading of its level or above."""
    m = re.search(r"^(#+) " + re.escape(title) + r"\n", text, re.M)
    if not m:
        return ""
    end = re.compile(r"^#{1,%d} " % len(m.group(1)), re.M).search(text, m.end())
    return text[m.end():end.start() if end else len(text)]


integrate, ops = read("integrate.md"), read("operations.md")
formats = {tag: block(integrate, "t_integrate: " + tag)
           for tag in ("log-httplog", "log-httplog-3", "log-json-2.6", "log-json-3")}
for tag, fmt in formats.items():
    h.check(f"integrate.md has its {tag} format", fmt.strip().startswith("log-format"), fmt)


def fields_of(tag, fmt):
    """The names a format writes after its variables: name=%[, %(name)[, "name":"%[."""
    pat = {"log-json-3": r"%\(([a-z_]+)\)%?\[", "log-json-2.6": r'"([a-z_]+)":"%\['}.get(tag, r" ([a-z_]+)=%\[")
    return re.findall(pat, fmt)


# What the runbook reads of HAProxy's log: the field table, and each
# `name=` the Agent down runbook and the shadow roll-out quote from it.
edge_log = section(ops, "Reading the edge log")
table = re.findall(r"^\| `([a-z_]+)=` \|", edge_log, re.M)
h.check("the edge-log table names fields", len(table) >= 5, table)
agent_down = section(ops, "Agent down")
quoted = set(re.findall(r"\b([a-z_]+)=", " ".join(re.findall(r"`([^`]*)`", agent_down))))
quoted -= {"st", "event"}   # HAProxy's SPOE line and the agent's journal, not the request log
shadow = re.search(r"HAProxy's log, `([^`]*)`", ops)
h.check("the shadow roll-out reads HAProxy's log", shadow is not None)
quoted |= set(re.findall(r"\b([a-z_]+)=", shadow.group(1) if shadow else ""))
h.check("the Agent down runbook quotes fields of HAProxy's log", {"rl", "reason", "spoe_err"} <= quoted, quoted)
for tag, fmt in formats.items():
    have = fields_of(tag, fmt)
    for name in sorted(set(table) | quoted):
        h.check(f"{tag}: the runbook's {name}= is in the documented format", name in have, have)

example = block(ops, "t_docs_runbook: log-example")
h.eq("the example log line: the httplog format's fields, in its order",
     fields_of("log-httplog", formats["log-httplog"]), re.findall(r" ([a-z_]+)=", example))
h.eq("the example log line: the fields the table explains", sorted(table), sorted(re.findall(r" ([a-z_]+)=", example)))

runbook = section(ops, "Runbook") + edge_log
h.check("the runbook does not use the demo's $RL_ADMIN_SOCK", "RL_ADMIN_SOCK" not in runbook)
h.check("the runbook reads the site's stats socket",
        'echo "show servers state be_ratelimit_agent" | socat - /run/haproxy/admin.sock' in runbook)

spoe = section(ops, "HAProxy's own SPOE lines")
st_table = re.search(r"^\| `st=` \| what happened.*?\n\n", spoe, re.S | re.M)
h.check("the SPOE section has the st= table", st_table is not None)
values = set(re.findall(r"`(\d+)`", st_table.group(0) if st_table else ""))
for tag in ("spoe-2.6", "spoe-3"):
    lines = block(ops, "t_docs_runbook: " + tag).splitlines()
    h.eq(f"{tag}: two example lines", 2, len(lines))
    for line in lines:
        st = re.search(r" st=(\d+) ", line)
        h.check(f"{tag}: st= of '{line}' is in the table", st is not None and st.group(1) in values, values)

# --- deployment.md: the files each host needs are the package's ---------------
hosts = section(read("deployment.md"), "Several HAProxy hosts, one Redis")
h.check("deployment.md has the several-hosts section", len(hosts) > 1000)
with open(os.path.join(ROOT, "Makefile")) as f:
    makefile = f.read()
examples = re.search(r"^HAPROXY_EXAMPLES := (.*?)\n(?!\s)", makefile, re.S | re.M).group(1)
shipped = {os.path.basename(w) for w in examples.split() if w.startswith("haproxy/")} | {"errors/"}
with open(os.path.join(ROOT, "debian", "ratelimit-spoa.install")) as f:
    installed = {"/" + line.strip() for line in f if line.strip()}
names = set(re.findall(r"`([^` ]+\.(?:cfg|conf|map|service|timer)|errors/)`", hosts))
for name in sorted(names):
    base = os.path.basename(name.rstrip("/")) + ("/" if name.endswith("/") else "")
    if name.startswith("/etc/ratelimit-spoa/") or "/etc/ratelimit-spoa/" + name in installed:
        h.check(f"deployment.md: {name} is installed by the package",
                os.path.join("/etc/ratelimit-spoa", base) in installed, installed)
    elif name.startswith("/etc/systemd/") or name.startswith("/etc/haproxy/ratelimit/") and base not in shipped:
        h.check(f"deployment.md: {name} is one integrate.md makes", name in read("integrate.md"))
    elif base.endswith((".service", ".timer")):
        h.check(f"deployment.md: {base} is a unit the package has", os.path.exists(os.path.join(ROOT, "etc", base)))
    else:
        h.check(f"deployment.md: {name} is a file of /usr/share/ratelimit-spoa/haproxy", base in shipped, shipped)
h.check("deployment.md names the package's HAProxy directory", "/usr/share/ratelimit-spoa/haproxy/" in hosts)
for cmd in ("ratelimit-spoa -c -f", "--routes", "ratelimit-spoa ctl show", "/readyz"):
    h.check(f"deployment.md: '{cmd}' is one the agent has", cmd in hosts)
h.done()
