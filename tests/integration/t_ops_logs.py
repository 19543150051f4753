#!/usr/bin/env python3
"""Logs against real processes: one key=value line per event on stderr,
levels honoured (per-decision lines only at debug; Redis state changes at
info; nothing below warn at log-level warn), -d survives a reload, and the
Redis password never appears, at debug level, through connects, a wrong
password, Redis going away and coming back, reloads, a rejected URL, and
-c."""
import os
import re
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, free_port, wait_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

SECRET = "secret"
LINE = re.compile(r'^ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z level=(error|warn|info|debug) '
                  r'event=[a-z_]+( [a-z_]+=("([^"\\]|\\.)*"|[^ "]+))*$')

h = Harness()
rport = free_port()


def start_redis():
    # An ACL user with a password; the default user keeps working for
    # redis-cli in the test.
    h.redis = h.spawn(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                       "--appendonly", "no", "--dir", h.tmp,
                       "--user", "user", "on", ">" + SECRET, "~*", "&*", "+@all"],
                      os.path.join(h.tmp, "redis.log"))
    h.redis_port = rport
    if not wait_port(rport):
        raise RuntimeError("redis did not start")


def conf(text, name="agent.conf"):
    path = os.path.join(h.tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def start_agent(text, args=(), log="agent.log"):
    h.agent_port = free_port()
    h.agent_log = os.path.join(h.tmp, log)
    path = conf("listen 127.0.0.1:%d\n%s" % (h.agent_port, text))
    h.agent = h.spawn([AGENT, "-f", path] + list(args), h.agent_log)
    if not wait_port(h.agent_port):
        raise RuntimeError("agent did not start:\n" + h.log_tail())
    return path


def check_lines(what):
    lines = u.log_text(h).splitlines()
    bad = [l for l in lines if not LINE.match(l)]
    h.eq("%s: every line is ts= level= event= key=value..." % what, [], bad[:5])
    return lines


def conn():
    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    c.hello()
    return c


start_redis()
URL = "redis://user:%s@127.0.0.1:%d/0" % (SECRET, rport)

# -- debug level, a password in the URL ----------------------------------------------------------
path = start_agent("redis %s\nlog-level debug\nthreads 2\nredis-timeout 1s\npolicy transfer 3/1m\n" % URL)
h.check("both workers connect (info)", u.wait_log(h, "level=info event=redis_connected", 2))
c = conn()
statuses = [c.ratelimit("ACC-LOG")["actions"]["status"] for _ in range(4)]
h.eq("decisions", ["allow"] * 3 + ["deny"], statuses)
c.ratelimit("bad\"key\nforged=1")
c.ratelimit(None)
g = socket.create_connection(("127.0.0.1", h.agent_port))
g.sendall(b"\x7f\xff\xff\xff")
g.close()
hc = spop.Conn().connect("127.0.0.1", h.agent_port)
hc.hello(healthcheck=True)
hc.close()
h.eq("HAPROXY-DISCONNECT answered", spop.FRAME_AGENT_DISCONNECT, (c.disconnect() or {}).get("type"))
c.close()
u.wait_log(h, "event=spop_disconnect_received")
# The garbage connection may be on another worker: its line can come later.
u.wait_log(h, "event=spop_error")
text = u.log_text(h)
dec = [l for l in text.splitlines() if " event=decision " in l]
h.check("one debug line per decision", len(dec) >= 4 and all(" level=debug " in l for l in dec), dec[:2])
h.check("a decision line names policy, key, status and quota",
        any('policy=transfer key="ACC-LOG" cost=1 status=deny limit=3 remaining=0' in l for l in dec), dec[-1:])
h.check("a key with a quote and a newline cannot forge a field or a line",
        any('key="bad\\"key\\x0aforged=1"' in l for l in dec), [l for l in dec if "bad" in l])
h.check("a protocol error is a warn line", re.search(r"level=warn event=spop_error .*status=3", text))
h.check("HAProxy's DISCONNECT is an info line", "level=info event=spop_disconnect_received" in text)
u.wait_log(h, "level=info event=conn_close")
text = u.log_text(h)
h.check("a traffic connection: HELLO and close are info lines",
        "level=info event=spop_hello" in text and "level=info event=conn_close" in text)
h.check("a healthcheck connection stays out of info (one per second per HAProxy)",
        not any(" level=info " in l and "healthcheck" in l for l in text.splitlines()))

# Redis goes away and comes back: state changes at info.
h.stop(h.redis)
h.check("Redis gone: redis_disconnected at warn",
        u.wait_log(h, "level=warn event=redis_disconnected", 2))
start_redis()
h.check("Redis back: redis_connected at info", u.wait_log(h, "level=info event=redis_connected", 4, 20))

# A wrong password, then a URL that does not parse, then the right one.
conf("listen 127.0.0.1:%d\nredis redis://user:wrong%s@127.0.0.1:%d/0\nlog-level debug\nthreads 2\n"
     "policy transfer 3/1m\n" % (h.agent_port, SECRET, rport))
h.check("reload with a wrong password fails as a whole",
        u.hup(h, needle="event=reload_failed workers_failed=2", timeout=30))
h.check("the refusal is logged (warn)", u.wait_log(h, "event=redis_setup_failed", 1))
conf("listen 127.0.0.1:%d\nredis redis://user:%s@127.0.0.1:0\nredis-timeout 1s\npolicy transfer 3/1m\n" % (h.agent_port, SECRET))
h.check("a URL with port 0 is rejected", u.hup(h, needle="event=reload_rejected"))
line = [l for l in u.log_text(h).splitlines() if "reload_rejected" in l][-1]
h.check("... naming file:line", ("%s:2: redis: port must be 1..65535" % path) in line, line)
conf("listen 127.0.0.1:%d\nredis %s\nlog-level debug\nthreads 2\nredis-timeout 1s\npolicy transfer 3/1m\n" % (h.agent_port, URL))
h.check("reload back to the right password (the running one)", u.hup(h, workers=2))
c = conn()
h.eq("decides again", "allow", c.ratelimit("ACC-LOG2")["actions"]["status"])
c.close()

# -c and --redis print no password either.
bad = conf("redis redis://user:%s@127.0.0.1:99999/0\nredis-timeout 1s\npolicy transfer 3/1m\n" % SECRET, "bad.conf")
p = subprocess.run([AGENT, "-c", "-f", bad], capture_output=True, text=True)
h.check("-c on a bad URL: exit 1, file:line, no password",
        p.returncode == 1 and (bad + ":1:") in p.stderr and SECRET not in p.stdout + p.stderr, p.stderr)
p = subprocess.run([AGENT, "-c", "-f", bad, "--redis", "redis://u:%s@[::1]:6379/x" % SECRET],
                   capture_output=True, text=True)
h.check("--redis with a bad URL: exit 1, no password", p.returncode == 1 and SECRET not in p.stdout + p.stderr,
        p.stderr)
h.stop(h.agent)
lines = check_lines("debug run")
h.check("a run at debug level has debug lines", any(" level=debug " in l for l in lines))
leaks = [l for l in lines if SECRET in l]
h.eq("the password never appears in the log, at debug level", [], leaks)

# -- info: no per-decision line ---------------------------------------------------------------------
start_agent("redis %s\nlog-level info\nredis-timeout 1s\npolicy transfer 3/1m\n" % URL, log="agent-info.log")
h.check("info: redis_connected logged", u.wait_log(h, "level=info event=redis_connected"))
c = conn()
for _ in range(4):
    c.ratelimit("ACC-INFO")
c.close()
h.stop(h.agent)
lines = check_lines("info run")
h.eq("info: no debug line", [], [l for l in lines if " level=debug " in l])
h.check("info: started/redis_connected/stopped are there",
        all(any(" event=%s " % e in l + " " for l in lines) for e in ("started", "redis_connected", "stopped")))

# -- warn: nothing below warn -------------------------------------------------------------------------
start_agent("redis %s\nlog-level warn\nredis-timeout 1s\npolicy transfer 3/1m\n" % URL, log="agent-warn.log")
c = conn()
for _ in range(4):
    c.ratelimit("ACC-WARN")
g = socket.create_connection(("127.0.0.1", h.agent_port))
g.sendall(b"\x7f\xff\xff\xff")
g.close()
u.wait_log(h, "event=spop_error")
c.close()
h.stop(h.agent)
lines = check_lines("warn run")
h.eq("warn: only warn and error lines", [], [l for l in lines if not re.search(r" level=(warn|error) ", l)])
h.check("warn: the protocol error is there", any("event=spop_error" in l for l in lines))

# -- -d survives a reload to a file that says info ------------------------------------------------
start_agent("redis %s\nlog-level info\nredis-timeout 1s\npolicy transfer 3/1m\n" % URL, args=["-d"], log="agent-d.log")
h.check("reload with -d", u.hup(h, workers=1))
c = conn()
c.ratelimit("ACC-D")
c.close()
h.check("-d: decisions still logged at debug after the reload",
        u.wait_log(h, "level=debug event=decision", 1, 5))
h.stop(h.agent)
check_lines("-d run")
leaks = []
for name in ("agent.log", "agent-info.log", "agent-warn.log", "agent-d.log"):
    with open(os.path.join(h.tmp, name)) as f:
        leaks += [l for l in f if SECRET in l]
h.eq("no log of any run holds the password", [], leaks)
h.done()
