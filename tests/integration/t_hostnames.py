#!/usr/bin/env python3
"""Host names in the redis URL, resolved off the event loop and again on
every reconnect (a managed endpoint's address moves on failover):
`localhost` works; a name that does not resolve answers `error` (never
allow) and is logged; and while a lookup hangs (slow_dns.c, an LD_PRELOAD
shim that holds getaddrinfo("slow.test") until released) the agent keeps
answering every decision at once (error, or allow for on-redis-error=allow)
and serves /metrics; once the name resolves, decisions come from Redis.
No timing assertions: "at once" means while the lookup is still held."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, free_port, wait_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
h = Harness()
h.start_redis()
mport = free_port()
POLICIES = """
redis-timeout 200ms
metrics 127.0.0.1:%d
policy transfer 3/1s
policy open 100/1s on-redis-error=allow
policy big 1000000/1h
""" % mport


def conn():
    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    c.hello()
    return c


def run_agent(host, env=None):
    h.stop(h.agent)
    if os.path.exists(h.agent_log):
        os.truncate(h.agent_log, 0)
    h.redis_host = host
    path = h.write_agent_conf(POLICIES)
    f = open(h.agent_log, "ab")
    h.agent = subprocess.Popen([AGENT, "-f", path], stdout=f, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, env=dict(os.environ, **(env or {})))
    h.procs.append(h.agent)
    if not wait_port(h.agent_port):
        h.fail("agent starts: " + h.log_tail())
        h.done()


def wait_status(c, key, want, policy="big", secs=15.0):
    end = time.time() + secs
    seen = []
    while time.time() < end:
        seen.append(c.ratelimit(key, policy=policy)["actions"]["status"])
        if seen[-1] == want:
            return True, seen
        time.sleep(0.1)
    return False, seen


# -- localhost ------------------------------------------------------------------------------------
run_agent("localhost")
c = conn()
ok, seen = wait_status(c, "warm", "allow")
h.check("redis://localhost:PORT: decides", ok, seen[-3:])
h.eq("the story by name", ["allow", "allow", "allow", "deny"],
     [c.ratelimit("BY-NAME")["actions"]["status"] for _ in range(4)])
c.close()
h.check("the log shows the name (addr=localhost:PORT/0)",
        "addr=localhost:%d/0" % h.redis_port in u.log_text(h), h.log_tail())

# -- a name that does not resolve ------------------------------------------------------------------
run_agent("no-such-host.invalid")
c = conn()
sts = [c.ratelimit("NX-%d" % i)["actions"] for i in range(10)]
c.close()
h.check("a name that does not resolve: never allow", all(a["status"] != "allow" for a in sts), sts)
h.check("... error, reason redis-unavailable",
        all(a["status"] == "error" and a.get("reason") == "redis-unavailable" for a in sts), sts)
h.check("the failed lookup is logged (redis_connect_failed reason=\"resolve: ...\")",
        u.wait_for(lambda: 'reason="resolve: ' in u.log_text(h), 10), h.log_tail())

# -- a lookup that hangs: no stall ---------------------------------------------------------------------
so = os.path.join(h.tmp, "slow_dns.so")
r = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", so, os.path.join(HERE, "slow_dns.c"), "-ldl"],
                   capture_output=True, text=True)
h.check("slow_dns.c builds", r.returncode == 0, r.stderr)
preload = so
# a sanitizer build wants its runtime first in the list
ldd = subprocess.run(["ldd", AGENT], capture_output=True, text=True).stdout
for line in ldd.splitlines():
    if "libasan" in line and "=>" in line:
        preload = line.split("=>")[1].split()[0] + ":" + so
dns = os.path.join(h.tmp, "dns")
os.makedirs(dns)
run_agent("slow.test", env={"LD_PRELOAD": preload, "SLOW_DNS_DIR": dns})
h.check("the agent's lookup of slow.test is under way (held)",
        u.wait_for(lambda: os.path.exists(os.path.join(dns, "entered")), 15))
c = conn()
answers = [(p, c.ratelimit("HELD-%d" % i, policy=p)["actions"]) for i in range(30)
           for p in ("transfer", "open")]
metrics_ok = False
try:
    metrics_ok = u.scrape(mport).get("decisions_total", policy="transfer", status="error") is not None
except Exception as e:  # noqa: BLE001
    metrics_ok = str(e)
held = not os.path.exists(os.path.join(dns, "left"))
h.check("60 decisions answered while the lookup is still held", held and len(answers) == 60)
h.check("... fail-closed policy: error, never allow",
        all(a["status"] == "error" for p, a in answers if p == "transfer"),
        [a for p, a in answers if p == "transfer"][:3])
h.check("... on-redis-error=allow policy: allow",
        all(a["status"] == "allow" for p, a in answers if p == "open"),
        [a for p, a in answers if p == "open"][:3])
h.check("/metrics answers while the lookup is held", metrics_ok is True, metrics_ok)
open(os.path.join(dns, "release"), "w").close()
ok, seen = wait_status(c, "after-release", "allow", secs=20)
h.check("once the name resolves, decisions come from Redis", ok and
        h.rcli("EXISTS", "big:limit:v1:after-release") == "1", seen[-3:])
c.close()
h.done()
