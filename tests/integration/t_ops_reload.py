#!/usr/bin/env python3
"""SIGHUP under traffic. Four connections keep pipelined NOTIFYs flowing
while the agent reloads: a policy goes 3/1s -> 5/1s -> 7/1s, bad files are
rejected with `file:line: reason` in the log and the old configuration keeps
serving, a move to an unreachable Redis fails as a whole (counted, the old
Redis keeps serving), Redis moves to another server and database with no
error answer (the new Redis is set up before the old one is dropped). Throughout: no
DISCONNECT, no connection closed, no error answer, every NOTIFY ACKed; a
decision in flight during a reload finishes under its own generation; the
local deny cache is emptied by a reload."""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port, threads, wait_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

h = Harness()
h.start_redis()
mport = free_port()
conf = os.path.join(h.tmp, "agent.conf")


def policies(limit, extra=""):
    return """
threads 2
redis-timeout 5s
policy transfer %d/1s
policy slow %s
%s""" % (limit, "1/10s", extra)


h.start_agent("metrics 127.0.0.1:%d\n%s" % (mport, policies(3)))
h.check("agent ready (metrics up, both workers on Redis)", u.wait_ready(mport, 2))

probe = spop.Conn().connect("127.0.0.1", h.agent_port)
probe.hello()
nprobe = [0]


def fresh_limit():
    """The limit a never-seen account gets now."""
    nprobe[0] += 1
    a = probe.ratelimit("PROBE-%d" % nprobe[0])["actions"]
    return a.get("limit"), a.get("status")


h.eq("before: a fresh account gets limit 3", (3, "allow"), fresh_limit())

traffic = [u.Traffic(h.agent_port, ["R%d-%d" % (i, j) for j in range(10)]) for i in range(4)]
for t in traffic:
    t.start()
h.check("traffic flows on 4 connections", u.wait_for(lambda: all(t.count() > 40 for t in traffic), 20))
disc_before = u.log_count(h, "event=spop_disconnect_sent")

# -- a good reload: 3/1s -> 5/1s ---------------------------------------------------------
u.write_conf(h, policies(5), mport)
h.check("reload 5/1s applied by both workers", u.hup(h, workers=2))
h.eq("after: a fresh account gets limit 5", (5, "allow"), fresh_limit())
h.check("the traffic sees limit 5 too", u.wait_for(lambda: all(5 in t.limits for t in traffic), 10),
        [sorted(t.limits) for t in traffic])

# -- bad files: rejected with file:line, the old configuration serves --------------------------
with open(conf, "w") as f:
    f.write("listen 127.0.0.1:%d\nredis redis://127.0.0.1:%d/0\npolicy transfer 9/1x\n"
            % (h.agent_port, h.redis_port))
n0 = [t.count() for t in traffic]
h.check("a file with a bad line is rejected", u.hup(h, needle="event=reload_rejected"))
line = [l for l in u.log_text(h).splitlines() if "event=reload_rejected" in l][-1]
h.check("the log names file:line: reason", re.search(r'error="%s:3: policy \'transfer\': bad window' %
                                                        re.escape(conf), line), line)
h.check("the rejection is logged at error level", " level=error " in line, line)
h.eq("the old configuration still serves (limit 5)", (5, "allow"), fresh_limit())

os.rename(conf, conf + ".away")
h.check("a missing file is rejected", u.hup(h, needle="event=reload_rejected", workers=1))
line = [l for l in u.log_text(h).splitlines() if "event=reload_rejected" in l][-1]
h.check("... naming the file", ("%s: cannot open" % conf) in line, line)
with open(conf, "w") as f:
    f.write("listen 127.0.0.1:%d\nredis redis://127.0.0.1:%d/0\nthreads 2\n" % (h.agent_port, h.redis_port))
h.check("a file without any policy is rejected", u.hup(h, needle="event=reload_rejected", workers=1))
line = [l for l in u.log_text(h).splitlines() if "event=reload_rejected" in l][-1]
h.check("... with the reason", "no policy defined" in line, line)
h.eq("still the old configuration (limit 5)", (5, "allow"), fresh_limit())
h.check("traffic kept flowing through the rejected reloads",
        u.wait_for(lambda: all(t.count() > c + 16 for t, c in zip(traffic, n0)), 10))
m = u.scrape(mport)
h.eq("config_reloads_total{failure} = 3", 3.0, m.get("config_reloads_total", result="failure"))

# -- a decision in flight across a reload finishes under its own generation ------------------
os.kill(h.redis.pid, signal.SIGSTOP)
try:
    probe.send_notify(9001, 1, [("ratelimit", [("policy", "transfer"), ("key", "INFLIGHT")])])
    u.wait_for(lambda: (u.scrape(mport).get("notify_inflight") or 0) >= 1, 5)
    u.write_conf(h, policies(7), mport)
    applied = u.hup(h, workers=2)
finally:
    os.kill(h.redis.pid, signal.SIGCONT)
h.check("reload 7/1s applied while a decision waited on Redis", applied)
a = probe.wait_ack(9001, 1, timeout=15)["actions"]
h.eq("the in-flight decision answered under the old limit", ("allow", 5), (a["status"], a.get("limit")))
h.eq("the next one under the new limit", (7, "allow"), fresh_limit())
h.check("the traffic sees limit 7", u.wait_for(lambda: all(7 in t.limits for t in traffic), 10),
        [sorted(t.limits) for t in traffic])

# -- the local deny cache is emptied by a reload -----------------------------------------------
seen = [probe.ratelimit("CACHED", policy="slow")["actions"]["status"] for _ in range(3)]
h.eq("slow 1/10s: allow, deny, deny", ["allow", "deny", "deny"], seen)
m = u.scrape(mport)
h.eq("the third was answered from the local deny cache", 1.0,
     m.get("local_cache_answers_total", policy="slow"))
u.write_conf(h, policies(7).replace("slow 1/10s", "slow 2/10s"), mport)
h.check("reload slow 2/10s applied", u.hup(h, workers=2))
a = probe.ratelimit("CACHED", policy="slow")["actions"]
h.eq("after the reload the account passes (the cache did not answer)", ("allow", 2, 0),
     (a["status"], a.get("limit"), a.get("remaining")))

# -- the run as a whole ------------------------------------------------------------------
time.sleep(0.2)
results = [t.stop() for t in traffic]
h.eq("traffic: no DISCONNECT, no closed connection, every NOTIFY ACKed", [[]] * 4, results)
statuses = {}
for t in traffic:
    for k, v in t.statuses.items():
        statuses[k] = statuses.get(k, 0) + v
reasons = {}
for t in traffic:
    for k, v in t.reasons.items():
        reasons[k] = reasons.get(k, 0) + v
h.check("traffic: only allow and deny answers (no error)", set(statuses) <= {"allow", "deny"},
        (statuses, reasons))
h.check("traffic: both allow and deny seen", statuses.get("allow", 0) > 0 and statuses.get("deny", 0) > 0, statuses)
h.eq("traffic: sent == acked", [t.sent for t in traffic], [t.acked for t in traffic])
h.check("traffic: every connection saw limits 3, 5 and 7", all({3, 5, 7} <= t.limits for t in traffic),
        [sorted(t.limits) for t in traffic])
h.eq("agent sent no DISCONNECT during the run", disc_before, u.log_count(h, "event=spop_disconnect_sent"))
m = u.scrape(mport)
h.eq("config_reloads_total{success} = 3", 3.0, m.get("config_reloads_total", result="success"))
h.eq("decisions_total{transfer,error} = 0", 0.0, m.get("decisions_total", policy="transfer", status="error"))
print("# traffic: %d decisions over the run: %r" % (sum(t.acked for t in traffic), statuses))
# -- Redis settings change live: another server, another database ----------------------------
port2 = free_port()
h.spawn(["redis-server", "--port", str(port2), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", h.tmp], os.path.join(h.tmp, "redis2.log"))
h.check("second redis up", wait_port(port2))


def rcli2(*args):
    return subprocess.run(["redis-cli", "-p", str(port2)] + [str(x) for x in args],
                          capture_output=True, text=True, timeout=10).stdout.strip()


# A reload that moves Redis connects and sets up the new Redis (AUTH,
# SELECT, ROLE, eviction check, SCRIPT LOAD) before the old one is dropped:
# decisions keep going to the old Redis until then, so none answers error.
traffic = [u.Traffic(h.agent_port, ["R%d-%d" % (i, j) for j in range(10)]) for i in range(2)]
for t in traffic:
    t.start()
u.wait_for(lambda: all(t.count() > 40 for t in traffic), 20)

# -- first to a Redis that is not there: the reload fails, nothing changes ----------------------
dead = free_port()
with open(conf, "w") as f:
    f.write("listen 127.0.0.1:%d\nredis redis://127.0.0.1:%d/3\nmetrics 127.0.0.1:%d\n%s\n"
            % (h.agent_port, dead, mport, policies(9).strip()))
fails0 = u.scrape(mport).get("config_reloads_total", result="failure")
n0 = [t.count() for t in traffic]
h.check("reload to an unreachable Redis: reload_failed logged",
        u.hup(h, needle="level=error event=reload_failed workers_failed=%d" % threads(2), timeout=30))
line = [l for l in u.log_text(h).splitlines() if "event=reload_failed workers_failed" in l][-1]
h.check("... saying why", "new redis not ready" in line and str(dead) in line, line)
h.eq("... counted as a failure", fails0 + 1, u.scrape(mport).get("config_reloads_total", result="failure"))
h.eq("... the old configuration serves (limit 7, not 9)", (7, "allow"), fresh_limit())
h.check("... the old Redis kept serving the traffic",
        u.wait_for(lambda: all(t.count() > c + 40 for t, c in zip(traffic, n0)), 10))
h.eq("... not one error answer meanwhile", 0, sum(t.statuses.get("error", 0) for t in traffic))
h.eq("... both workers still connected", float(threads(2)), u.scrape(mport).get("redis_connected"))

# -- then to a live one under pipelined traffic: zero error answers --------------------------------
with open(conf, "w") as f:
    f.write("listen 127.0.0.1:%d\nredis redis://127.0.0.1:%d/3\nmetrics 127.0.0.1:%d\n%s\n"
            % (h.agent_port, port2, mport, policies(7).strip()))
h.check("reload to the second Redis applied", u.hup(h, workers=2))
h.check("both workers connected to it",
        u.wait_for(lambda: u.scrape(mport).get("redis_connected") == threads(2), 10))
h.eq("decisions go on", (7, "allow"), fresh_limit())
h.eq("... recorded in the second Redis, database 3", "1", rcli2("-n", 3, "ZCARD", "transfer:limit:v1:PROBE-%d" % nprobe[0]))
h.eq("... not in the first one", "0", h.rcli("ZCARD", "transfer:limit:v1:PROBE-%d" % nprobe[0]))
h.check("the traffic follows: keys appear in the second Redis",
        u.wait_for(lambda: rcli2("-n", 3, "EXISTS", "transfer:limit:v1:R0-0") == "1", 10))
n1 = [t.count() for t in traffic]
u.wait_for(lambda: all(t.count() > c + 100 for t, c in zip(traffic, n1)), 10)
results = [t.stop() for t in traffic]
h.eq("Redis switch: no DISCONNECT, no closed connection, every NOTIFY ACKed", [[]] * 2, results)
h.eq("Redis switch: zero error answers", 0, sum(t.statuses.get("error", 0) for t in traffic))
h.eq("Redis switch: no reason on any answer", {}, {k: v for t in traffic for k, v in t.reasons.items()})
print("# Redis switch: %d decisions, %d error answers" %
      (sum(t.acked for t in traffic), sum(t.statuses.get("error", 0) for t in traffic)))

probe.close()
h.done()
