#!/usr/bin/env python3
"""The limiter against a real redis-server that misbehaves: ACL login and
SELECT from the URL (the password never logged), the local deny cache
(answers without Redis, smaller costs still asked, shadow never cached,
cleared by a reload), SCRIPT FLUSH under pipelined load (NOSCRIPT -> EVAL,
exact counts), Redis stopped and restarted, Redis frozen with SIGSTOP for
2 s (every call answered, never "allow" for a fail-closed policy, the stalled
connection dropped, recovery after SIGCONT), and a reload that moves the
agent to another database. No timing assertions: waits are bounds."""
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port, wait_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

USER = "rl-agent"
PASSWORD = "p@ss:w/rd-7Qx"                 # '@', ':' and '/' must be %-escaped
PASSWORD_URL = "p%40ss%3Aw%2Frd-7Qx"
ADMIN_PASSWORD = "admin-9Zk"

h = Harness()
mport = free_port()


def start_redis():
    """redis-server with an ACL user for the agent and a password on the
    default user (for redis-cli), on the same port across restarts."""
    h.redis_port = h.redis_port or free_port()
    h.redis = h.spawn(
        ["redis-server", "--port", str(h.redis_port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", h.tmp,
         "--requirepass", ADMIN_PASSWORD,
         "--user", USER, "on", ">" + PASSWORD, "~*", "+@all"],
        os.path.join(h.tmp, "redis.log"))
    if not wait_port(h.redis_port):
        raise RuntimeError("redis did not start")


def rcli(*args, db=0):
    out = subprocess.run(["redis-cli", "--no-auth-warning", "-a", ADMIN_PASSWORD,
                          "-p", str(h.redis_port), "-n", str(db)] + [str(a) for a in args],
                         capture_output=True, text=True, timeout=10)
    return out.stdout.strip()


def conf(db):
    return """
listen 127.0.0.1:%d
redis redis://%s:%s@127.0.0.1:%d/%d
redis-timeout 100ms
threads 1
log-level debug
metrics 127.0.0.1:%d
policy transfer 3/1s
policy slow 2/5s
policy away 2/1m
policy burst 10/10s
policy sh 1/10s shadow
policy reads 100/1m on-redis-error=allow
""" % (h.agent_port, USER, PASSWORD_URL, h.redis_port, db, mport)


def write_conf(db):
    with open(os.path.join(h.tmp, "agent.conf"), "w") as f:
        f.write(conf(db).strip() + "\n")


def conn():
    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    c.hello()
    return c


def act(ack):
    return ack["actions"]


def metric(name, **labels):
    try:
        return u.scrape(mport).get(name, **labels) or 0
    except Exception:  # noqa: BLE001
        return None


def redis_calls():
    return metric("redis_call_duration_seconds_count")


def cache_answers(policy):
    return metric("local_cache_answers_total", policy=policy)


def wait_allow(c, key, timeout=10.0):
    """Until <key> is allowed again (Redis back): a bound, not a measure."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            if act(c.ratelimit(key))["status"] == "allow":
                return True
        except spop.Error:
            return False
        time.sleep(0.1)
    return False


start_redis()
h.agent_port = free_port()
write_conf(3)
h.agent = h.spawn([os.environ.get("AGENT", os.path.join(u.ROOT, "spoa", "ratelimit-spoa")),
                   "-f", os.path.join(h.tmp, "agent.conf")], h.agent_log)
if not wait_port(h.agent_port) or not wait_port(mport):
    h.fail("agent starts: " + h.log_tail())
    h.done()
h.check("redis connected gauge is 1", u.wait_for(lambda: metric("redis_connected") == 1, 10),
        metric("redis_connected"))

# -- ACL login and SELECT from the URL -----------------------------------------
a = conn()
d = act(a.ratelimit("ACC-ACL"))
h.eq("ACL user from the URL: decides", "allow", d["status"])
h.eq("SELECT from the URL: the key is in db 3", "1", rcli("ZCARD", "transfer:limit:v1:ACC-ACL", db=3))
h.eq("... and not in db 0", "0", rcli("ZCARD", "transfer:limit:v1:ACC-ACL", db=0))
log = u.log_text(h)
h.check("the password never reaches the log", PASSWORD not in log and PASSWORD_URL not in log
        and "p@ss" not in log, "found in agent.log")
h.check("the address is logged", "event=redis_connected addr=127.0.0.1:%d/3" % h.redis_port in log,
        "no redis_connected line")

# -- the local deny cache ----------------------------------------------------------
seq = [act(a.ratelimit("ACC-CACHE", policy="slow"))["status"] for _ in range(3)]
h.eq("slow 2/5s: allow, allow, deny (from Redis)", ["allow", "allow", "deny"], seq)
calls0, cached0 = redis_calls(), cache_answers("slow")
d = act(a.ratelimit("ACC-CACHE", policy="slow"))
h.check("denied account asked again: deny, retry_after 1..5",
        d["status"] == "deny" and 1 <= d.get("retry_after", 0) <= 5 and d.get("limit") == 2, d)
h.eq("... answered from the local cache (counted)", cached0 + 1, cache_answers("slow"))
h.eq("... without a Redis call", calls0, redis_calls())
h.check("... logged at debug", u.log_count(h, "event=deny_cache_hit policy=slow") >= 1, "no log line")
d = act(a.ratelimit("ACC-CACHE", policy="slow", cost=2))
h.eq("a larger cost (another retry_after): deny from Redis, not the cache", ("deny", cached0 + 1),
     (d["status"], cache_answers("slow")))
h.eq("... one Redis call", calls0 + 1, redis_calls())
d = act(a.ratelimit("ACC-CACHE", policy="slow", cost=2))
h.eq("that cost again: deny from the cache", ("deny", cached0 + 2),
     (d["status"], cache_answers("slow")))
h.eq("... no Redis call", calls0 + 1, redis_calls())
h.eq("the set holds only the 2 admitted entries", "2", rcli("ZCARD", "slow:limit:v1:ACC-CACHE", db=3))

act(a.ratelimit("ACC-SH", policy="sh"))
d1 = act(a.ratelimit("ACC-SH", policy="sh"))
calls1 = redis_calls()
d2 = act(a.ratelimit("ACC-SH", policy="sh"))
h.eq("shadow deny: allow + shadow-deny", ("allow", "shadow-deny"), (d1["status"], d1.get("reason")))
h.eq("shadow policy: never answered from the cache", (0, calls1 + 1),
     (cache_answers("sh"), redis_calls()))
h.eq("shadow policy: next answer still shadow-deny", "shadow-deny", d2.get("reason"))

# Redis away: the cached account is still refused (429, not 503). A
# minute's window, so the cached deny outlives stopping Redis on a slow
# machine (at 2/5s it could end first, and then Redis is asked).
act(a.ratelimit("ACC-CACHE2", policy="away"))
act(a.ratelimit("ACC-CACHE2", policy="away"))
h.eq("ACC-CACHE2 denied by Redis", "deny", act(a.ratelimit("ACC-CACHE2", policy="away"))["status"])
h.stop_redis()
d = act(a.ratelimit("ACC-CACHE2", policy="away"))
h.eq("Redis stopped: a cached deny is still a deny", "deny", d["status"])
d = act(a.ratelimit("ACC-OTHER", policy="slow"))
h.eq("Redis stopped: fail-closed -> error redis-unavailable", ("error", "redis-unavailable"),
     (d["status"], d.get("reason")))
d = act(a.ratelimit("ACC-OTHER", policy="reads"))
h.eq("Redis stopped: fail-open -> allow + reason, limit only",
     ("allow", "redis-unavailable", 100, False),
     (d["status"], d.get("reason"), d.get("limit"), "remaining" in d))
h.eq("connected gauge drops to 0", 0, metric("redis_connected"))
reconnects0 = metric("redis_reconnects_total")
time.sleep(0.5)
start_redis()
h.check("Redis restarted: decisions resume without restarting the agent", wait_allow(a, "ACC-BACK"))
h.check("reconnects counted", metric("redis_reconnects_total") > reconnects0,
        metric("redis_reconnects_total"))
h.eq("connected gauge back to 1", 1, metric("redis_connected"))

# a reload clears the cache: the same denied account goes to Redis again
for _ in range(3):
    act(a.ratelimit("ACC-RELOAD", policy="slow"))
h.check("reload: ACC-RELOAD cached", act(a.ratelimit("ACC-RELOAD", policy="slow"))["status"] == "deny")
cached1 = cache_answers("slow")
h.check("SIGHUP applied", u.hup(h), h.log_tail())
calls2 = redis_calls()
d = act(a.ratelimit("ACC-RELOAD", policy="slow"))
h.eq("after a reload: asked Redis again (still deny there)", ("deny", cached1, calls2 + 1),
     (d["status"], cache_answers("slow"), redis_calls()))

# -- SCRIPT FLUSH with 15 calls in flight: each NOSCRIPT re-sent as EVAL -----
noscript0 = metric("redis_errors_total", kind="noscript")
rcli("SCRIPT", "FLUSH")
b = conn()
for i in range(15):
    b.send_notify(1 + 2 * i, 1, [("ratelimit", [("policy", "burst"), ("key", "ACC-FLUSH")])])
st = [b.wait_ack(1 + 2 * i, 1)["actions"].get("status") for i in range(15)]
h.eq("after SCRIPT FLUSH, 15 pipelined: exactly 10 allow, 5 deny", (10, 5),
     (st.count("allow"), st.count("deny")))
h.eq("after SCRIPT FLUSH: 10 members", "10", rcli("ZCARD", "burst:limit:v1:ACC-FLUSH", db=3))
h.check("NOSCRIPT counted", metric("redis_errors_total", kind="noscript") > noscript0)
with open(os.path.join(u.ROOT, "lua", "sliding_window.lua"), "rb") as f:
    sha = hashlib.sha1(f.read()).hexdigest()
h.check("the agent loaded the script again", u.wait_for(lambda: rcli("SCRIPT", "EXISTS", sha) == "1", 5))
h.eq("next call: EVALSHA works", "allow", act(b.ratelimit("ACC-FLUSH2"))["status"])

# -- Redis frozen (SIGSTOP) for 2 s -----------------------------------------------
timeouts0 = metric("redis_errors_total", kind="timeout")
stalled0 = u.log_count(h, "event=redis_stalled")
results = {"closed": [], "open": [], "errors": []}


def during_freeze(key, policy, out):
    c = conn()
    end = time.time() + 2.0
    while time.time() < end:
        try:
            out.append(act(c.ratelimit(key, policy=policy, timeout=5.0)))
        except Exception as e:  # noqa: BLE001
            results["errors"].append(repr(e))
            return
        time.sleep(0.05)
    c.close()


os.kill(h.redis.pid, signal.SIGSTOP)
try:
    ts = [threading.Thread(target=during_freeze, args=("ACC-FROZEN", "transfer", results["closed"])),
          threading.Thread(target=during_freeze, args=("ACC-FROZEN", "reads", results["open"]))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
finally:
    os.kill(h.redis.pid, signal.SIGCONT)
closed, opened = results["closed"], results["open"]
h.eq("frozen: every call answered (no client timeout)", [], results["errors"])
h.check("frozen: calls were made", len(closed) >= 3 and len(opened) >= 3, (len(closed), len(opened)))
h.check("frozen, fail-closed: never allow, always error timeout/unavailable",
        all(d["status"] == "error" and d.get("reason") in ("redis-timeout", "redis-unavailable")
            for d in closed), [(d["status"], d.get("reason")) for d in closed])
h.check("frozen, fail-open: allow + reason",
        all(d["status"] == "allow" and d.get("reason") in ("redis-timeout", "redis-unavailable")
            for d in opened), [(d["status"], d.get("reason")) for d in opened])
h.check("frozen: some calls timed out individually",
        metric("redis_errors_total", kind="timeout") > timeouts0)
h.check("frozen: the stalled connection was dropped",
        u.log_count(h, "event=redis_stalled") > stalled0, "no redis_stalled log line")
h.check("frozen: later calls answered 'unavailable' at once (no pile-up)",
        any(d.get("reason") == "redis-unavailable" for d in closed),
        [d.get("reason") for d in closed])
c = conn()
h.check("after SIGCONT: decisions resume", wait_allow(c, "ACC-THAW"))

# -- a reload that changes the URL: reconnect to the new database ---------------
write_conf(5)
h.check("reload to db 5 applied", u.hup(h))
h.check("decides after the URL change", wait_allow(c, "ACC-DB5"))
# a 10 s window, so a loaded machine cannot expire the key before we look
h.eq("new keys land in db 5", ("allow", "1"),
     (act(c.ratelimit("ACC-DB5B", policy="burst"))["status"],
      rcli("ZCARD", "burst:limit:v1:ACC-DB5B", db=5)))
h.check("the address change is logged",
        u.log_count(h, "event=redis_address_changed worker=0 from=127.0.0.1:%d/3 to=127.0.0.1:%d/5"
                    % (h.redis_port, h.redis_port)) == 1, "no redis_address_changed line")
h.check("still no password in the log", PASSWORD not in u.log_text(h) and
        PASSWORD_URL not in u.log_text(h))

# -- clean exit -------------------------------------------------------------------
h.eq("SIGTERM: exit 0", 0, h.stop(h.agent))
h.done()
