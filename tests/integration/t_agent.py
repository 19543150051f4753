#!/usr/bin/env python3
"""The agent against a real redis-server, driven by a Python SPOP client:
the story, quota values, denied-not-recorded, a race across connections,
cost, bad input, garbage on one connection not hurting another, unix
sockets, -c, and SIGTERM draining."""
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, log_text, race, wait_for  # noqa: E402
import spop  # noqa: E402

h = Harness()
h.start_redis()
# redis-timeout 1s: the shared CI machine can stall a Redis call past the 50ms
# default, and this file asserts exact counts, not behaviour under timeouts
h.start_agent("""
threads 2
redis-timeout 1s
policy transfer 3/1s
policy burst 50/10s
policy heavy 10/10s
policy reads 100/1m on-redis-error=allow
""", ready=True)


def conn():
    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    c.hello()
    return c


def act(ack):
    return ack["actions"]


def bare_tokens(line):
    """<line>'s key=value tokens as a log parser splits them: a value may be
    "..." with backslash escapes."""
    toks, cur, i, quoted = [], "", 0, False
    while i < len(line):
        ch = line[i]
        if quoted and ch == "\\" and i + 1 < len(line):
            cur += line[i:i + 2]
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        if ch == " " and not quoted:
            toks.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    return toks + [cur]


# -- the story: two connections (two HAProxy instances) alternate ----------
a, b = conn(), conn()
# The SPOP port listens before the workers' Redis links are up: on a loaded
# machine the first decisions could be errors. Wait until each connection's
# worker decides (on another policy and key).
for c in (a, b):
    wait_for(lambda: act(c.ratelimit("ACC-WARMUP", policy="burst"))["status"] != "error")
seen = []
for i in range(6):
    ack = (a if i % 2 == 0 else b).ratelimit("ACC-1001")
    seen.append(act(ack)["status"])
h.eq("story: 6 alternating requests -> 3 allow, 3 deny", ["allow"] * 3 + ["deny"] * 3, seen)
h.eq("story: denied requests are not recorded", "3", h.rcli("ZCARD", "transfer:limit:v1:ACC-1001"))
time.sleep(1.05)
d = act(a.ratelimit("ACC-1001"))
h.eq("story: a second later it passes again", ("allow", 2), (d["status"], d.get("remaining")))

# -- values ----------------------------------------------------------------
v = [act(a.ratelimit("ACC-VAL")) for _ in range(4)]
h.eq("first allow: limit/remaining/reset", (3, 2, 1), (v[0]["limit"], v[0]["remaining"], v[0]["reset"]))
h.eq("third allow: remaining 0", 0, v[2]["remaining"])
h.check("allow carries no retry_after", "retry_after" not in v[0], v[0])
h.eq("deny: retry_after 1, remaining 0, reset 1",
     ("deny", 1, 0, 1), (v[3]["status"], v[3]["retry_after"], v[3]["remaining"], v[3]["reset"]))
h.check("no reason on plain decisions", "reason" not in v[0] and "reason" not in v[3], v[3])
ttl = int(h.rcli("PTTL", "transfer:limit:v1:ACC-VAL"))
h.check("key expires with the window (0 < PTTL <= 1000)", 0 < ttl <= 1000, ttl)

# -- retry_after is computed from the log: 10/10s, entries spread in time ---
for i in range(10):
    act(a.ratelimit("ACC-SPREAD", policy="heavy"))
d = act(a.ratelimit("ACC-SPREAD", policy="heavy"))
h.check("10/10s: deny with retry_after in 9..10 s", d["status"] == "deny" and 9 <= d["retry_after"] <= 10, d)

# -- cost --------------------------------------------------------------------
d = act(a.ratelimit("ACC-COST", policy="heavy", cost=7))
h.eq("cost 7 of 10: remaining 3", ("allow", 3), (d["status"], d["remaining"]))
d = act(a.ratelimit("ACC-COST", policy="heavy", cost=4))
h.eq("cost 4 with 3 left: deny", "deny", d["status"])
d = act(a.ratelimit("ACC-COST", policy="heavy", cost=3))
h.eq("cost 3 with 3 left: allow, remaining 0", ("allow", 0), (d["status"], d["remaining"]))
h.eq("cost units recorded: 2 entries carrying 10 units", ("2", 10),
     (h.rcli("ZCARD", "heavy:limit:v1:ACC-COST"), h.units("heavy:limit:v1:ACC-COST")))
d = act(a.ratelimit("ACC-COST2", policy="heavy", cost=11))
h.eq("cost above the limit: error bad-cost", ("error", "bad-cost"), (d["status"], d.get("reason")))
d = act(a.ratelimit("ACC-COST2", policy="heavy", cost=0))
h.eq("cost 0: error bad-cost", ("error", "bad-cost"), (d["status"], d.get("reason")))

# -- bad input ----------------------------------------------------------------
d = act(a.ratelimit("ACC-1", policy="nope"))
h.eq("unknown policy -> error unknown-policy", ("error", "unknown-policy"), (d["status"], d.get("reason")))
d = act(a.ratelimit(None))
h.eq("NULL key -> error bad-key", ("error", "bad-key"), (d["status"], d.get("reason")))
d = act(a.notify([("ratelimit", [("policy", "transfer")])]))
h.eq("missing key -> error bad-key", ("error", "bad-key"), (d["status"], d.get("reason")))
import ipaddress  # noqa: E402
d = act(a.ratelimit(ipaddress.IPv4Address("10.0.0.1")))
h.eq("IPv4 key -> error bad-key (never the client IP)", ("error", "bad-key"), (d["status"], d.get("reason")))
d = act(a.ratelimit("K" * 257))
h.eq("257-byte key -> error bad-key", ("error", "bad-key"), (d["status"], d.get("reason")))
d = act(a.ratelimit("K" * 256))
h.eq("256-byte key -> decided", "allow", d["status"])
ack = a.notify([("other", [("x", 1)])])
h.check("other message: ACKed with at least one action", len(ack["action_list"]) >= 1
        if "action_list" in ack else len(ack.get("actions", {})) >= 0, ack)
h.check("other message: no status set", "status" not in act(ack), ack)
d = act(a.notify([("ratelimit", [("policy", "transfer"), ("key", "ACC-M1")]),
                  ("ratelimit", [("policy", "nope"), ("key", "ACC-M1")])]))
h.eq("two ratelimit messages in one NOTIFY: error too-many-messages",
     ("error", "too-many-messages"), (d["status"], d.get("reason")))
h.eq("... and the first one recorded nothing", "0", h.rcli("EXISTS", "transfer:limit:v1:ACC-M1"))

# -- garbage on one connection does not hurt another --------------------------
g = conn()
g.send_raw(b"\x00\x00\x00\x05\x03\x00\x00\x00\x01")   # NOTIFY cut short inside its length
g.send_raw(b"\x7f\xff\xff\xff")                          # then a huge length
f = g.read_frame()
h.eq("garbage -> AGENT-DISCONNECT", spop.FRAME_AGENT_DISCONNECT, f["type"])
h.check("garbage -> connection closed", g.closed_by_peer(), "still open")
h.eq("other connection still decides", "allow", act(b.ratelimit("ACC-OTHER"))["status"])
r = socket.create_connection(("127.0.0.1", h.agent_port))
r.sendall(os.urandom(4096))
r.close()
h.eq("random bytes on a third connection: still deciding", "allow", act(b.ratelimit("ACC-OTHER2"))["status"])

# -- healthcheck HELLO ----------------------------------------------------------
hc = spop.Conn().connect("127.0.0.1", h.agent_port)
f = hc.hello(healthcheck=True)
h.eq("healthcheck HELLO -> AGENT-HELLO", spop.FRAME_AGENT_HELLO, f["type"])
h.check("healthcheck -> closed after AGENT-HELLO", hc.closed_by_peer(), "still open")
h.check("no pipelining offered -> none announced",
        "pipelining" not in (conn_np := spop.Conn().connect("127.0.0.1", h.agent_port)).hello(capabilities="").get(
            "capabilities", ""), "announced")
conn_np.close()

# -- log injection: a peer's engine-id and DISCONNECT message stay quoted ------
FORGED = "level=error event=redis_stalled"
for eng, msg in (("x " + FORGED, 'y" ' + FORGED + ' "'), ('e\\" ' + FORGED, "m\\")):
    li = spop.Conn().connect("127.0.0.1", h.agent_port)
    li.hello(engine_id=eng)
    li.disconnect(message=msg)
    li.close()
h.check("log injection: both HELLOs and DISCONNECTs were logged",
        wait_for(lambda: log_text(h).count("event=spop_disconnect_received") >= 2, 10))
bare = [ln for ln in log_text(h).splitlines() if set(FORGED.split()) & set(bare_tokens(ln))]
h.eq("log injection: no forged level=error/event=redis_stalled outside quotes", [], bare)

# -- a race: 20 connections x 10 requests for one account, limit 50 ------------
results = race(conn, "burst", "ACC-RACE", conns=20, per=10)
h.eq("race: 200 requests, exactly 50 admitted", (50, 150, 200),
     (results.count("allow"), results.count("deny"), len(results)))
h.eq("race: 50 members in the set", "50", h.rcli("ZCARD", "burst:limit:v1:ACC-RACE"))

# -- fail-open policy while Redis is down; fail-closed stays error --------------
h.stop_redis()
d = act(a.ratelimit("ACC-DOWN"))
h.eq("redis down, fail-closed: error redis-unavailable", ("error", "redis-unavailable"),
     (d["status"], d.get("reason")))
d = act(a.ratelimit("ACC-DOWN", policy="reads"))
h.eq("redis down, fail-open: allow + reason, limit only",
     ("allow", "redis-unavailable", 100, False),
     (d["status"], d.get("reason"), d.get("limit"), "remaining" in d))
h.start_redis()
ok = False
for _ in range(40):
    if act(a.ratelimit("ACC-BACK"))["status"] == "allow":
        ok = True
        break
    time.sleep(0.25)
h.check("redis back: decisions resume without restarting the agent", ok)

# -- SCRIPT FLUSH: NOSCRIPT is recovered -----------------------------------------
h.rcli("SCRIPT", "FLUSH")
h.eq("after SCRIPT FLUSH: still decides", "allow", act(a.ratelimit("ACC-FLUSH"))["status"])
h.eq("after SCRIPT FLUSH: recorded", "1", h.rcli("ZCARD", "transfer:limit:v1:ACC-FLUSH"))

# -- -c checks a config and prints file:line ---------------------------------------
bad = os.path.join(h.tmp, "bad.conf")
with open(bad, "w") as fh:
    fh.write("policy transfer 3/1s\npolicy oops 3/1x\n")
p = subprocess.run([AGENT, "-c", "-f", bad], capture_output=True, text=True)
h.eq("-c on a bad config exits 1", 1, p.returncode)
h.check("-c names file:line", (bad + ":2:") in p.stderr, p.stderr)
p = subprocess.run([AGENT, "-c", "-f", os.path.join(h.tmp, "agent.conf")], capture_output=True, text=True)
h.eq("-c on a good config exits 0", 0, p.returncode)
with open(bad, "wb") as fh:
    fh.write(b"\xef\xbb\xbfpolicy a 10/1s 5/1m\n")
p = subprocess.run([AGENT, "-c", "-f", bad], capture_output=True, text=True)
h.eq("-c: a leading BOM is skipped, a window that never decides is a warning",
     (0, bad + ":1: warning: policy 'a': 10/1s can never decide"),
     (p.returncode, p.stderr[:len(bad) + 47]))

# -- SIGTERM drains: in-flight answered, exit 0 ---------------------------------------
c = conn()
c.send_notify(1, 1, [("ratelimit", [("policy", "burst"), ("key", "ACC-DRAIN")])])
h.agent.send_signal(signal.SIGTERM)
try:
    ack = c.wait_ack(1, 1)
    h.check("drain: in-flight NOTIFY answered", ack["actions"].get("status") in ("allow", "deny"), ack)
except Exception as e:  # noqa: BLE001
    h.fail("drain: in-flight NOTIFY answered (%s)" % e)
try:
    f = c.read_frame(5)
    h.eq("drain: agent sends DISCONNECT status 0", (spop.FRAME_AGENT_DISCONNECT, 0),
         (f["type"], f.get("status_code")))
except Exception as e:  # noqa: BLE001
    h.fail("drain: agent sends DISCONNECT (%s)" % e)
h.eq("drain: exit code 0", 0, h.agent.wait(10))

# -- exit while Redis stalls: the requests still pending are freed ---------------
# (the peer leaves, so the drain ends at once with a call in flight; under
# make sanitize a leak makes the exit status non-zero)
h.start_agent("redis-timeout 5s\npolicy transfer 3/1s")
os.kill(h.redis.pid, signal.SIGSTOP)
try:
    c = conn()
    c.send_notify(1, 1, [("ratelimit", [("policy", "transfer"), ("key", "ACC-STALL")])])
    time.sleep(0.3)
    h.agent.send_signal(signal.SIGTERM)
    c.close()
    h.eq("exit with a decision pending in a stalled Redis: exit code 0", 0, h.agent.wait(20))
finally:
    os.kill(h.redis.pid, signal.SIGCONT)

# -- unix socket listener ------------------------------------------------------------
sock = os.path.join(h.tmp, "agent.sock")
h.start_agent("policy transfer 3/1s", listen="unix:" + sock, ready=True)
u = spop.Conn().connect(sock)
u.hello()
h.eq("unix socket: decides", "allow", act(u.ratelimit("ACC-UNIX"))["status"])
u.close()
h.stop(h.agent)
h.check("unix socket removed on exit", not os.path.exists(sock))

h.done()
