#!/usr/bin/env python3
"""TLS to a real redis-server (Debian 12's 7.0, TLS only: --port 0,
--tls-port), certificates made with openssl at test time (harness.TLSCerts).
Needs an agent built with make WITH_TLS=1 (run by make check-tls).

The story over rediss:// (allow, allow, allow, deny); mutual TLS
(tls-auth-clients yes: without a client certificate -> error, with one ->
the story); a wrong CA and a wrong server name -> error, never allow (also
for an on-redis-error=deny policy under load); redis-tls-verify off ->
decides and warns at every connect; the TLS Redis restarted -> recovery;
-c catches a missing CA file. No timing assertions: waits are bounds."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, agent_tls, free_port, wait_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

h = Harness()
if not agent_tls():
    h.fail("the agent under test has no TLS (build with make WITH_TLS=1)")
    h.done()
certs = h.tls_certs()
POLICIES = "policy transfer 3/1s\npolicy big 1000000/1h\nredis-timeout 500ms\nlog-level debug\n"


def conn():
    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    c.hello()
    return c


def status(c, key, policy="transfer"):
    return c.ratelimit(key, policy=policy)["actions"]


def wait_status(key, want, secs=15.0, policy="big"):
    """Until a decision on <key> answers <want>; the statuses seen meanwhile."""
    seen = []
    end = time.time() + secs
    c = conn()
    try:
        while time.time() < end:
            s = status(c, key, policy)["status"]
            seen.append(s)
            if s == want:
                return True, seen
            time.sleep(0.1)
    finally:
        c.close()
    return False, seen


def restart_agent(tls_conf, url=None):
    h.stop(h.agent)
    if os.path.exists(h.agent_log):
        os.truncate(h.agent_log, 0)
    path = h.write_agent_conf(tls_conf + POLICIES)
    if url:
        text = open(path).read().splitlines()
        text[1] = "redis " + url
        with open(path, "w") as f:
            f.write("\n".join(text) + "\n")
    h.agent = h.spawn([AGENT, "-f", path], h.agent_log)
    if not wait_port(h.agent_port):
        h.fail("agent starts: " + h.log_tail())
        h.done()


# -- the story over rediss:// ---------------------------------------------------------------
h.start_redis(tls=certs, auth_clients=False)
h.eq("redis-server answers over TLS (redis-cli --tls)", "PONG", h.rcli("PING"))
restart_agent(certs.agent_conf())
ok, seen = wait_status("warm-up", "allow")
h.check("rediss:// with redis-tls-ca: decides", ok, seen)
c = conn()
h.eq("the story over TLS: 3/1s -> allow x3, deny",
     ["allow", "allow", "allow", "deny"], [status(c, "ACC-TLS")["status"] for _ in range(4)])
c.close()
h.eq("the window is in the TLS Redis", "3", h.rcli("ZCARD", "transfer:limit:v1:ACC-TLS"))
log = u.log_text(h)
h.check("the log names the TLS address", "addr=tls:127.0.0.1:%d/0" % h.redis_port in log,
        "no tls: address in the log")

# -- mutual TLS --------------------------------------------------------------------------------
h.stop_redis()
h.start_redis(tls=certs, auth_clients=True)
restart_agent(certs.agent_conf(client=False))
ok, seen = wait_status("mtls-none", "allow", secs=3)
h.check("tls-auth-clients yes, no client certificate: never allow", "allow" not in seen, seen)
h.check("... error instead", seen and set(seen) == {"error"}, seen)
restart_agent(certs.agent_conf(client=True))
ok, seen = wait_status("mtls", "allow")
h.check("mutual TLS (redis-tls-cert, redis-tls-key): decides", ok, seen)

# -- wrong CA, wrong server name: fail closed ------------------------------------------------------
for what, conf in (("a wrong CA", certs.agent_conf(client=True, ca=certs.other_ca)),
                   ("a wrong server name", certs.agent_conf(client=True,
                                                            server_name="not-redis.example"))):
    restart_agent(conf)
    c = conn()
    seen = [status(c, "wrong-%d" % i, "transfer") for i in range(20)]
    c.close()
    sts = [a["status"] for a in seen]
    h.check("%s: never allow (20 decisions)" % what, "allow" not in sts, sts)
    h.check("%s: error, reason redis-*" % what,
            set(sts) == {"error"} and all(a.get("reason", "").startswith("redis-") for a in seen), seen)
    h.check("%s: the log says the certificate check failed" % what,
            u.wait_for(lambda: "certificate verify failed" in u.log_text(h), 10), h.log_tail())

# localhost in the certificate: the name connected to is verified
restart_agent(certs.agent_conf(client=True), url="rediss://localhost:%d/0" % h.redis_port)
ok, seen = wait_status("by-name", "allow")
h.check("rediss://localhost: the host name is resolved and verified", ok, seen)

# -- verification off: decides, warns at every connect ----------------------------------------------
restart_agent(certs.agent_conf(client=True, ca=certs.other_ca, verify="off"))
ok, seen = wait_status("noverify", "allow")
h.check("redis-tls-verify off: decides despite the wrong CA", ok, seen)
h.check("redis-tls-verify off: warns at connect",
        u.wait_for(lambda: "redis_tls_unverified" in u.log_text(h), 10), h.log_tail())

# -- the TLS Redis restarted: recovery -----------------------------------------------------------
restart_agent(certs.agent_conf(client=True))
ok, seen = wait_status("before-restart", "allow")
h.check("decides before the restart", ok, seen)
h.stop_redis()
ok, seen = wait_status("during-restart", "error", secs=10, policy="transfer")
h.check("Redis down: error, never allow", ok and "allow" not in seen, seen)
h.start_redis(port=h.redis_port, tls=certs, auth_clients=True)
ok, seen = wait_status("after-restart", "allow", secs=20)
h.check("TLS Redis restarted: decisions resume", ok, seen[-5:])

# -- -c: files checked ---------------------------------------------------------------------------------
bad = os.path.join(h.tmp, "bad.conf")
with open(bad, "w") as f:
    f.write("redis rediss://127.0.0.1:%d\nredis-tls-ca %s/missing.pem\npolicy p 1/s\n" % (h.redis_port, h.tmp))
p = subprocess.run([AGENT, "-c", "-f", bad], capture_output=True, text=True, timeout=10)
h.check("-c: a missing redis-tls-ca file is a file:line error",
        p.returncode != 0 and "bad.conf:2: redis-tls-ca" in p.stderr and "no such file" in p.stderr,
        p.stderr)
h.done()
