#!/usr/bin/env python3
"""Health endpoints on the metrics listener, against real processes:
/healthz answers 200 while the agent serves SPOP, whatever Redis does;
/readyz answers 503 with a one-line reason until every worker's Redis link
is up with the script loaded, goes 503 when redis-server (ours, stopped by
PID) goes away and 200 again once it is back, and 503 while Redis may evict
keys (every decision refused); unknown paths are 404 and other methods 405,
as for /metrics; and idle or half-sent clients, 4x the client cap of the
port, cannot starve /healthz and /readyz (the oldest is pushed out)."""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port, wait_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

h = Harness()
h.redis_port = free_port()      # Redis starts after the agent
mport = free_port()
h.start_agent("metrics 127.0.0.1:%d\nthreads 2\npolicy transfer 100/1m\n" % mport)
h.check("metrics endpoint listens", wait_port(mport), h.log_tail())


def get(path, method="GET"):
    return u.fetch(mport, path, method=method)


healthz_codes = []


def probe(path):
    """GET <path>, and /healthz alongside it: every /healthz answer is kept."""
    st, _, _ = get("/healthz")
    healthz_codes.append(st)
    return get(path)


def one_line(body):
    return body.endswith("\n") and "\n" not in body[:-1]


st, hd, body = probe("/readyz")
h.eq("before Redis: /readyz 503", 503, st)
h.check("before Redis: a one-line reason", one_line(body) and body.startswith("not ready: 2 of 2 workers"), body)
h.check("text/plain", hd.get("content-type", "").startswith("text/plain"), hd)
st, _, body = get("/healthz")
h.eq("before Redis: /healthz 200 (SPOP is served: it answers errors)", (200, "ok\n"), (st, body))

h.start_redis()
r = u.wait_for(lambda: probe("/readyz")[0] == 200, 20)
h.check("Redis up, script loaded on both workers: /readyz 200", r, h.log_tail())
st, _, body = get("/readyz?verbose=1")
h.eq("/readyz ignores a query string", (200, "ready\n"), (st, body))
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()
h.eq("ready: a decision is allow", "allow", c.ratelimit("ACC-H1")["actions"]["status"])

pid = h.redis.pid
h.stop_redis()
h.check("redis-server %d stopped" % pid, not wait_port(h.redis_port, 0.3))
r = u.wait_for(lambda: probe("/readyz")[0] == 503, 20)
h.check("Redis stopped: /readyz 503", r)
st, _, body = get("/readyz")
h.check("Redis stopped: the reason names the links, one line",
        st == 503 and one_line(body) and "of 2 workers cannot decide" in body, body)
d = c.ratelimit("ACC-H1")["actions"]
h.eq("meanwhile SPOP is served: error redis-unavailable", ("error", "redis-unavailable"),
     (d["status"], d.get("reason")))

h.start_redis()
r = u.wait_for(lambda: probe("/readyz")[0] == 200, 20)
h.check("Redis back: /readyz 200 again", r, h.log_tail())
h.eq("back: allow", "allow", c.ratelimit("ACC-H2")["actions"]["status"])

# A Redis that may evict the windows: connected, script loaded, yet every
# decision is refused (redis-evicts-keys): not ready either.
h.stop_redis()
# (start_redis: the module loaded too when the suite runs on it)
h.start_redis(extra=("--maxmemory-policy", "allkeys-lru"))
h.check("redis-server restarted with maxmemory-policy allkeys-lru", wait_port(h.redis_port))
d = u.wait_for(lambda: (lambda a: a if a.get("reason") == "redis-evicts-keys" else None)(
    c.ratelimit("ACC-H3")["actions"]), 10, step=0.3) or {}
h.eq("evicting Redis: error redis-evicts-keys", ("error", "redis-evicts-keys"), (d.get("status"), d.get("reason")))
r = u.wait_for(lambda: (lambda a: a[0] == 503 and "noeviction" in a[2])(probe("/readyz")), 10)
st, _, body = get("/readyz")
h.check("evicting Redis: /readyz 503, the reason says why", r and one_line(body) and "noeviction" in body, body)
h.rcli("CONFIG", "SET", "maxmemory-policy", "noeviction")
# a worker asks again when a decision comes: one connection on each worker
c2 = spop.Conn().connect("127.0.0.1", h.agent_port)
c2.hello()
r = u.wait_for(lambda: all(x.ratelimit("ACC-H4")["actions"]["status"] == "allow" for x in (c, c2))
               and probe("/readyz")[0] == 200, 10, step=0.3)
h.check("noeviction again: decisions and /readyz 200", r, get("/readyz"))
c.close()
c2.close()
h.check("/healthz answered 200 at every probe (%d probes)" % len(healthz_codes),
        len(healthz_codes) > 3 and set(healthz_codes) == {200}, healthz_codes)

# -- idle and slow clients cannot starve the probes ---------------------------
# 4x the 64-client cap held idle, plus some that sent half a request and
# stopped: each new connection pushes out the oldest of them, so probes
# still answer (before: 16 idle clients reset every probe for 2 s).
IDLE, HALF = 256, 32
hold = []
for i in range(IDLE + HALF):
    s = socket.create_connection(("127.0.0.1", mport), timeout=5)
    if i >= IDLE:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    hold.append(s)
time.sleep(0.3)      # let the agent accept them all


def timed(path):
    t0 = time.monotonic()
    try:
        st = get(path)[0]
    except OSError as e:
        st = type(e).__name__
    return st, time.monotonic() - t0


res = [timed(p) for p in ("/healthz", "/readyz") * 10]
print("# %d idle + %d half-request clients held: 20 probes, slowest %.1f ms, median %.1f ms"
      % (IDLE, HALF, 1000 * max(t for _, t in res), 1000 * sorted(t for _, t in res)[len(res) // 2]))
h.eq("%d idle and %d half-sent clients held: /healthz and /readyz answer 200 (20 probes)"
     % (IDLE, HALF), [200] * 20, [st for st, _ in res])
for s in hold:
    s.close()

st, hd, body = get("/metrics")
h.check("/metrics still served beside them", st == 200 and "version=0.0.4" in hd.get("content-type", ""))
h.eq("GET /health -> 404", 404, get("/health")[0])
h.eq("GET /readyz/ -> 404", 404, get("/readyz/")[0])
h.eq("POST /readyz -> 405", 405, get("/readyz", "POST")[0])
h.eq("HEAD /healthz -> 405 (GET only)", 405, get("/healthz", "HEAD")[0])
h.done()
