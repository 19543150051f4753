#!/usr/bin/env python3
"""Prometheus metrics against real processes: every scrape parses strictly
(HELP/TYPE before samples, `name{labels} value`, cumulative histogram
buckets ending in +Inf with _sum/_count), and every counter moves by what
the run did: decisions by policy and status, shadow denies, local-cache
answers, Redis latency, Redis errors by kind (timeout, refused, script,
noscript), reconnects, connections open/accepted/rejected, frames in/out by
type, malformed frames by status, NOTIFYs in flight, reloads, build info.
Counters never go backwards between scrapes under traffic, across a reload;
a policy keeps its series when policies are added or removed around it."""
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port, threads, wait_port  # noqa: E402
import harness as u  # noqa: E402
W = threads(2)  # worker threads (make tsan forces 4)
import spop  # noqa: E402

# Windows of a minute or more: no assertion depends on how fast the
# machine answers.
POLICIES = """
threads 2
redis-timeout 5s
policy transfer 3/1m
policy sh 2/10s shadow
policy slow 1/10s
policy reads 100/1m on-redis-error=allow
"""

h = Harness()
h.start_redis()
mport = free_port()
h.start_agent("metrics 127.0.0.1:%d\n%s" % (mport, POLICIES))
h.check("metrics endpoint listens", wait_port(mport), h.log_tail())


def scrape():
    return u.scrape(mport)


def delta(a, b, name, **labels):
    return (b.get(name, **labels) or 0) - (a.get(name, **labels) or 0)


def conn():
    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    c.hello()
    return c


def act(ack):
    return ack["actions"]


def decision_count_mismatches(m):
    """(policy, status, decisions_total, histogram _count) wherever the
    decision latency histogram did not count exactly the decisions."""
    bad = []
    for (name, labels), v in m.samples.items():
        if name == u.PREFIX + "decisions_total":
            lb = dict(labels)
            n = m.get("decision_duration_seconds_count", **lb)
            if n != v:
                bad.append((lb["policy"], lb["status"], v, n))
    return bad


# -- first scrape: format, build info, both workers connected ---------------
try:
    s0 = scrape()
    h.ok("first scrape parses strictly (%d samples)" % len(s0.samples))
except u.FormatError as e:
    h.fail("first scrape parses strictly: %s" % e)
    h.done()
h.eq("build_info carries the version", 1.0, s0.get("build_info", version=u.version()))
s0 = u.wait_for(lambda: (lambda m: m if m.get("redis_connected") == W else None)(scrape()), 10) or scrape()
h.eq("redis_connected: one per worker thread", float(W), s0.get("redis_connected"))
for fam, typ in (("decisions_total", "counter"), ("redis_call_duration_seconds", "histogram"),
                 ("decision_duration_seconds", "histogram"),
                 ("connections_open", "gauge"), ("notify_inflight", "gauge"),
                 ("config_reloads_total", "counter"), ("build_info", "gauge")):
    h.eq("TYPE of %s" % fam, typ, s0.types.get(u.PREFIX + fam))
for p in ("transfer", "sh", "slow", "reads"):
    h.check("series exist from the start: decisions_total{policy=%s}" % p,
            all(s0.get("decisions_total", policy=p, status=s) == 0 for s in ("allow", "deny", "error")))

# -- process_* (standard names, read from /proc at scrape time) ---------------


def proc(m, name):
    return m.samples.get((name, frozenset()))


for fam, typ in (("process_cpu_seconds_total", "counter"), ("process_resident_memory_bytes", "gauge"),
                 ("process_virtual_memory_bytes", "gauge"), ("process_open_fds", "gauge"),
                 ("process_max_fds", "gauge"), ("process_start_time_seconds", "gauge")):
    h.eq("TYPE of %s" % fam, typ, s0.types.get(fam))
with open("/proc/%d/stat" % h.agent.pid) as f:
    st = f.read().rsplit(")", 1)[1].split()
with open("/proc/stat") as f:
    btime = int([l for l in f if l.startswith("btime ")][0].split()[1])
tck = os.sysconf("SC_CLK_TCK")
h.check("process_start_time_seconds is the agent's start (from its /proc stat)",
        abs(proc(s0, "process_start_time_seconds") - (btime + int(st[19]) / tck)) < 0.02,
        (proc(s0, "process_start_time_seconds"), btime + int(st[19]) / tck))
h.check("process_start_time_seconds within the last 10 minutes",
        time.time() - 600 < proc(s0, "process_start_time_seconds") <= time.time() + 1)
with open("/proc/%d/limits" % h.agent.pid) as f:
    lim = [l.split()[3] for l in f if l.startswith("Max open files")][0]
h.eq("process_max_fds is the agent's soft RLIMIT_NOFILE", float(lim), proc(s0, "process_max_fds"))
h.check("process_resident_memory_bytes > 1 MB, <= virtual",
        1 << 20 < proc(s0, "process_resident_memory_bytes") <= proc(s0, "process_virtual_memory_bytes"))
h.check("process_cpu_seconds_total >= 0", proc(s0, "process_cpu_seconds_total") >= 0)

# -- connections and frames ----------------------------------------------------
c1, c2 = conn(), conn()
s1 = u.wait_for(lambda: (lambda m: m if m.get("connections_open") == 2 else None)(scrape())) or scrape()
h.eq("process_open_fds +2 with two SPOP connections", 2,
     proc(s1, "process_open_fds") - proc(s0, "process_open_fds"))
h.eq("connections_accepted_total +2", 2, delta(s0, s1, "connections_accepted_total"))
h.eq("connections_open = 2", 2.0, s1.get("connections_open"))
h.eq("frames_received haproxy-hello +2", 2, delta(s0, s1, "frames_received_total", type="haproxy-hello"))
h.eq("frames_sent agent-hello +2", 2, delta(s0, s1, "frames_sent_total", type="agent-hello"))

# -- decisions by policy and status ------------------------------------------------
seen = [act(c1.ratelimit("ACC-M1"))["status"] for _ in range(4)]
h.eq("transfer: 3 allow then deny", ["allow"] * 3 + ["deny"], seen)
sh = [act(c1.ratelimit("ACC-M2", policy="sh")) for _ in range(3)]
h.eq("shadow: all answered allow, the third with reason=shadow-deny",
     [("allow", None), ("allow", None), ("allow", "shadow-deny")],
     [(a["status"], a.get("reason")) for a in sh])
sl = [act(c1.ratelimit("ACC-M3", policy="slow"))["status"] for _ in range(3)]
h.eq("slow 1/10s: allow, deny, deny", ["allow", "deny", "deny"], sl)
h.eq("unknown policy -> error", "error", act(c1.ratelimit("ACC-M4", policy="nope"))["status"])
s2 = scrape()
h.eq("decisions transfer/allow +3", 3, delta(s1, s2, "decisions_total", policy="transfer", status="allow"))
h.eq("decisions transfer/deny +1", 1, delta(s1, s2, "decisions_total", policy="transfer", status="deny"))
h.eq("decisions sh/allow +2, sh/shadow-deny +1 (answered allow, counted apart)", (2, 1),
     (delta(s1, s2, "decisions_total", policy="sh", status="allow"),
      delta(s1, s2, "decisions_total", policy="sh", status="shadow-deny")))
h.eq("decisions sh/deny +0", 0, delta(s1, s2, "decisions_total", policy="sh", status="deny"))
h.eq("shadow_denies_total{sh} +1", 1, delta(s1, s2, "shadow_denies_total", policy="sh"))
h.eq("errors_total{shadow-deny} +1", 1, delta(s1, s2, "errors_total", reason="shadow-deny"))
h.eq("decisions slow/deny +2", 2, delta(s1, s2, "decisions_total", policy="slow", status="deny"))
h.eq("local_cache_answers_total{slow} +1 (the second deny never asked Redis)", 1,
     delta(s1, s2, "local_cache_answers_total", policy="slow"))
h.eq("local_cache_answers_total{transfer} +0", 0, delta(s1, s2, "local_cache_answers_total", policy="transfer"))
h.eq("errors_total{unknown-policy} +1", 1, delta(s1, s2, "errors_total", reason="unknown-policy"))
h.eq("frames_received notify +11", 11, delta(s1, s2, "frames_received_total", type="notify"))
h.eq("frames_sent ack +11", 11, delta(s1, s2, "frames_sent_total", type="ack"))
# Redis saw transfer x4, sh x3, slow x2 (the third slow came from the cache).
n = delta(s1, s2, "redis_call_duration_seconds_count")
h.eq("redis latency histogram: +9 observations", 9, n)
h.check("redis latency histogram: _sum grew", delta(s1, s2, "redis_call_duration_seconds_sum") > 0)
h.eq("notify_inflight back to 0", 0.0, s2.get("notify_inflight"))
h.eq("decision latency histogram: +4 transfer observations (3 allow, 1 deny)", (3, 1),
     (delta(s1, s2, "decision_duration_seconds_count", policy="transfer", status="allow"),
      delta(s1, s2, "decision_duration_seconds_count", policy="transfer", status="deny")))
h.eq("decision latency histogram: shadow-deny apart, as decisions_total", 1,
     delta(s1, s2, "decision_duration_seconds_count", policy="sh", status="shadow-deny"))
h.check("decision latency histogram: _sum grew",
        delta(s1, s2, "decision_duration_seconds_sum", policy="transfer", status="allow") > 0)
h.eq("decision latency histogram counts every decision, per policy and status", [],
     decision_count_mismatches(s2))

# -- Redis errors by kind ------------------------------------------------------------
h.rcli("SET", "transfer:limit:v1:ACC-WRONG", "not-a-zset")
d = act(c1.ratelimit("ACC-WRONG"))
h.eq("WRONGTYPE key: error redis-error", ("error", "redis-error"), (d["status"], d.get("reason")))
h.rcli("SCRIPT", "FLUSH")
d = act(c1.ratelimit("ACC-NOSCRIPT"))
h.eq("after SCRIPT FLUSH: allow", "allow", d["status"])
s3 = scrape()
h.eq("redis_errors_total{script} +1", 1, delta(s2, s3, "redis_errors_total", kind="script"))
h.eq("errors_total{redis-error} +1", 1, delta(s2, s3, "errors_total", reason="redis-error"))
h.eq("decisions transfer/error +1", 1, delta(s2, s3, "decisions_total", policy="transfer", status="error"))
# SCRIPT FLUSH is a NOSCRIPT (and one re-send) for the script engine only:
# on the module (make integration-module) it touches nothing the agent
# uses, and a noscript there would be a spurious re-send. The module's own
# "gone" case (MODULE UNLOAD) is counted in t_redis_engine.py.
on_module = (s3.get("redis_engine", engine="module") or 0) > 0
h.eq("redis_errors_total{noscript} %s (engine %s)" % ("+0" if on_module else "+1",
                                                    "module" if on_module else "script"),
     0 if on_module else 1, delta(s2, s3, "redis_errors_total", kind="noscript"))
eng, other = ("module", "script") if on_module else ("script", "module")
h.eq("redis_replies_total: the WRONGTYPE error and the decision after SCRIPT FLUSH, both "
     "named after the engine that answered (%s), none after the other" % eng, (1, 1, 0, 0),
     (delta(s2, s3, "redis_replies_total", engine=eng, result="error"),
      delta(s2, s3, "redis_replies_total", engine=eng, result="decision"),
      delta(s2, s3, "redis_replies_total", engine=other, result="error"),
      delta(s2, s3, "redis_replies_total", engine=other, result="decision")))

# Redis frozen (SIGSTOP): four pipelined NOTIFYs wait, in flight, until the
# 5 s redis-timeout answers them.
os.kill(h.redis.pid, signal.SIGSTOP)
try:
    for i in range(4):
        c2.send_notify(101 + 2 * i, 1, [("ratelimit", [("policy", "transfer"), ("key", "ACC-FROZEN-%d" % i)])])
    s4 = u.wait_for(lambda: (lambda m: m if m.get("notify_inflight") == 4 else None)(scrape())) or scrape()
    h.eq("notify_inflight = 4 while Redis is frozen", 4.0, s4.get("notify_inflight"))
    acks = [act(c2.wait_ack(101 + 2 * i, 1, timeout=20)) for i in range(4)]
    h.eq("frozen Redis: all four answered error redis-timeout", [("error", "redis-timeout")] * 4,
         [(a["status"], a.get("reason")) for a in acks])
finally:
    os.kill(h.redis.pid, signal.SIGCONT)
s5 = scrape()
h.eq("redis_errors_total{timeout} +4", 4, delta(s4, s5, "redis_errors_total", kind="timeout"))
h.eq("errors_total{redis-timeout} +4", 4, delta(s4, s5, "errors_total", reason="redis-timeout"))
h.eq("notify_inflight back to 0", 0.0, s5.get("notify_inflight"))

# Redis down: refused, then reconnects once it is back.
h.stop_redis()
s5 = u.wait_for(lambda: (lambda m: m if m.get("redis_connected") == 0 else None)(scrape())) or scrape()
h.eq("redis_connected = 0 with Redis down", 0.0, s5.get("redis_connected"))
d = act(c1.ratelimit("ACC-DOWN"))
h.eq("Redis down: error redis-unavailable", ("error", "redis-unavailable"), (d["status"], d.get("reason")))
d = act(c1.ratelimit("ACC-DOWN", policy="reads"))
h.eq("Redis down, fail-open policy: allow redis-unavailable", ("allow", "redis-unavailable"),
     (d["status"], d.get("reason")))
s6 = scrape()
h.check("redis_errors_total{refused} moved", delta(s5, s6, "redis_errors_total", kind="refused") >= 2,
        delta(s5, s6, "redis_errors_total", kind="refused"))
h.eq("decisions reads/allow +1 (fail-open)", 1, delta(s5, s6, "decisions_total", policy="reads", status="allow"))
h.eq("errors_total{redis-unavailable} +2", 2, delta(s5, s6, "errors_total", reason="redis-unavailable"))
h.start_redis()
s7 = u.wait_for(lambda: (lambda m: m if m.get("redis_connected") == W else None)(scrape()), 20) or scrape()
h.eq("redis_connected = %d again" % W, float(W), s7.get("redis_connected"))
h.check("redis_reconnects_total moved (both workers)", delta(s0, s7, "redis_reconnects_total") >= W,
        delta(s0, s7, "redis_reconnects_total"))
h.eq("back: allow", "allow", act(c1.ratelimit("ACC-BACK"))["status"])

# -- malformed frames by status --------------------------------------------------------
g = socket.create_connection(("127.0.0.1", h.agent_port))
g.sendall(b"\x7f\xff\xff\xff")
g.settimeout(5)
try:
    while g.recv(4096):
        pass
except OSError:
    pass
g.close()
g = spop.Conn().connect("127.0.0.1", h.agent_port)
g.send_raw(spop.encode_notify(1, 1, [("ratelimit", [("policy", "transfer"), ("key", "X")])]))
f = g.read_frame()
h.eq("NOTIFY before HELLO -> AGENT-DISCONNECT", spop.FRAME_AGENT_DISCONNECT, f["type"])
g.close()
s8 = u.wait_for(lambda: (lambda m: m if m.get("connections_open") == 2 else None)(scrape())) or scrape()
h.eq("malformed_frames_total{too-big} +1", 1, delta(s7, s8, "malformed_frames_total", status="too-big"))
h.eq("malformed_frames_total{invalid} +1", 1, delta(s7, s8, "malformed_frames_total", status="invalid"))
h.eq("frames_sent agent-disconnect +2", 2, delta(s7, s8, "frames_sent_total", type="agent-disconnect"))
h.eq("connections_accepted_total +2", 2, delta(s7, s8, "connections_accepted_total"))
h.eq("connections_open back to 2", 2.0, s8.get("connections_open"))

# HAProxy says DISCONNECT: counted in and out, the connection closes.
r = c2.disconnect()
h.eq("HAPROXY-DISCONNECT answered", spop.FRAME_AGENT_DISCONNECT, r and r["type"])
c2.close()
s9 = u.wait_for(lambda: (lambda m: m if m.get("connections_open") == 1 else None)(scrape())) or scrape()
h.eq("frames_received haproxy-disconnect +1", 1, delta(s8, s9, "frames_received_total", type="haproxy-disconnect"))
h.eq("frames_sent agent-disconnect +1", 1, delta(s8, s9, "frames_sent_total", type="agent-disconnect"))
h.eq("connections_open = 1", 1.0, s9.get("connections_open"))

# -- reloads, max-connections, and series that survive policy changes -------------------
u.write_conf(h, "max-connections 1\n" + POLICIES, mport)
h.check("reload (max-connections 1) applied", u.hup(h, workers=2))
x = spop.Conn().connect("127.0.0.1", h.agent_port)
try:
    f = x.read_frame(5)
    h.eq("over max-connections: AGENT-DISCONNECT", spop.FRAME_AGENT_DISCONNECT, f["type"])
except (EOFError, ConnectionResetError):
    h.ok("over max-connections: closed")
x.close()
s10 = scrape()
h.eq("connections_rejected_total +1", 1, delta(s9, s10, "connections_rejected_total"))
h.eq("config_reloads_total{success} +1", 1, delta(s9, s10, "config_reloads_total", result="success"))

before = {k: v for k, v in s10.samples.items() if "policy" in dict(k[1])}
u.write_conf(h, "policy newtop 5/1m\n" + POLICIES, mport)
h.check("reload (a policy added on top) applied", u.hup(h, workers=2))
s11 = scrape()
moved = [(k, v, s11.samples.get(k)) for k, v in before.items() if s11.samples.get(k) != v]
h.eq("adding a policy above the others leaves their series untouched", [], moved)
h.eq("the new policy starts at 0", 0.0, s11.get("decisions_total", policy="newtop", status="allow"))
for _ in range(2):
    act(c1.ratelimit("ACC-NT", policy="newtop"))
u.write_conf(h, "policy newtop 5/1m\n" + POLICIES.replace("policy sh 2/10s shadow\n", ""), mport)
h.check("reload (policy sh removed) applied", u.hup(h, workers=2))
s12 = scrape()
h.eq("a policy that moved keeps its counts (newtop allow = 2)", 2.0,
     s12.get("decisions_total", policy="newtop", status="allow"))
h.eq("transfer keeps its counts", s11.get("decisions_total", policy="transfer", status="allow"),
     s12.get("decisions_total", policy="transfer", status="allow"))
h.eq("slow keeps its cache answers", s11.get("local_cache_answers_total", policy="slow"),
     s12.get("local_cache_answers_total", policy="slow"))
h.eq("the removed policy's series are gone", None, s12.get("decisions_total", policy="sh", status="allow"))

with open(os.path.join(h.tmp, "agent.conf"), "a") as fh:
    fh.write("policy broken 3/1x\n")
h.check("a bad file is rejected", u.hup(h, needle="event=reload_rejected", workers=1))
s13 = scrape()
h.eq("config_reloads_total{failure} +1", 1, delta(s12, s13, "config_reloads_total", result="failure"))
h.eq("config_reloads_total{success} +0", 0, delta(s12, s13, "config_reloads_total", result="success"))

# -- counters never go backwards between scrapes, under traffic and a reload ---------------
u.write_conf(h, POLICIES, mport)
h.check("reload (back to the first policies) applied", u.hup(h, workers=2))
t = u.Traffic(h.agent_port, ["ACC-T%d" % i for i in range(20)])
t.start()
scrapes = [scrape()]
for i in range(12):
    u.wait_for(lambda: t.count() > 0, 5)
    if i == 6:
        u.write_conf(h, POLICIES.replace("transfer 3/1m", "transfer 5/1m"), mport)
        u.hup(h, workers=2)
    scrapes.append(scrape())
errs = t.stop()
h.eq("traffic: no error, no disconnect", [], errs)
bad = []
for a, b in zip(scrapes, scrapes[1:]):
    bad += u.monotonic_violations(a, b)
h.eq("no counter went backwards across %d scrapes (process_cpu_seconds_total included)" % len(scrapes),
     [], bad)
h.check("traffic moved the decisions", delta(scrapes[0], scrapes[-1], "frames_received_total", type="notify") > 0)
# (scraped after the traffic stopped: a decision is counted when it is made
# and observed in the histogram when its ACK is written, so a scrape taken
# mid-flight can see one without the other)
h.check("every ACK written", u.wait_for(lambda: not decision_count_mismatches(scrape()), 5))
h.eq("after traffic and reloads: histogram counts still equal decisions", [],
     decision_count_mismatches(scrape()))

# -- the endpoint stays small: only GET /metrics ---------------------------------------------
st, _, _ = u.fetch(mport, "/")
h.eq("GET / -> 404", 404, st)
st, _, _ = u.fetch(mport, "/metrics", method="POST")
h.eq("POST /metrics -> 405", 405, st)
big = socket.create_connection(("127.0.0.1", mport))
try:
    big.sendall(b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 4096 + b"\r\n\r\n")
except OSError:
    pass
big.settimeout(5)
try:
    got = big.recv(100)
except OSError:
    got = b""
big.close()
h.check("an oversized request is dropped, not answered", not got.startswith(b"HTTP/1.1 200"), got[:40])

# metrics off, then on another address, by reload
mport2 = free_port()
u.write_conf(h, POLICIES)
h.check("reload (metrics off) applied", u.hup(h, workers=2))
h.check("metrics off: the endpoint is closed",
        u.wait_for(lambda: not wait_port(mport, 0.2), 5))
u.write_conf(h, POLICIES, mport2)
h.check("reload (metrics on a new port) applied", u.hup(h, workers=2))
h.check("metrics on the new port", wait_port(mport2, 5))
m = u.scrape(mport2)
h.check("counters survived the endpoint moving", (m.get("decisions_total", policy="transfer", status="allow") or 0) >= 3)
c1.close()
h.done()
