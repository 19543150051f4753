#!/usr/bin/env python3
"""The agent on a Sentinel-managed primary: one primary, one replica, three
sentinels (redis-sentinel) on loopback. The agent discovers the primary
through the sentinels, the story holds, a SENTINEL FAILOVER is followed
(+switch-master, or the reconnect that the demotion forces) and decisions
resume on the new primary with the script loaded there, without restarting
the agent. A dead sentinel in the list is skipped, and the password comes
from a file named in the environment, never from argv."""
import hashlib
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, free_port, wait_port, wait_replicated  # noqa: E402
import spop  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PASSWORD = "s3ntinel-test-pw"
MASTER = "rlmaster"

h = Harness()


def cli(port, *args, auth=True):
    argv = ["redis-cli", "-p", str(port), "--no-auth-warning"]
    if auth:
        argv += ["-a", PASSWORD]
    out = subprocess.run(argv + [str(x) for x in args], capture_output=True, text=True, timeout=10)
    return out.stdout.strip()


def start_redis(port, replicaof=None):
    return h.start_redis_node(port, ["--requirepass", PASSWORD, "--masterauth", PASSWORD], replicaof)


def start_sentinel(port, primary):
    return h.start_sentinel(port, primary, MASTER, ["sentinel auth-pass %s %s" % (MASTER, PASSWORD),
                                                    "sentinel parallel-syncs %s 1" % MASTER])


def master_addr(sport):
    return cli(sport, "SENTINEL", "get-master-addr-by-name", MASTER, auth=False).split()


wait_until = h.wait_until


p1, p2 = free_port(), free_port()
start_redis(p1)
start_redis(p2, replicaof=p1)
dead_sentinel = free_port()    # listed first in the URL, never started
sports = [free_port() for _ in range(3)]
for s in sports:
    start_sentinel(s, p1)
wait_until("the replica is in sync",
           lambda: "master_link_status:up" in cli(p2, "INFO", "replication"))
wait_until("the sentinels know the replica and each other",
           lambda: all("127.0.0.1" in cli(s, "SENTINEL", "REPLICAS", MASTER, auth=False) and
                       cli(s, "SENTINEL", "CKQUORUM", MASTER, auth=False).startswith("OK")
                       for s in sports), secs=30)

# The agent: password from a file named in the environment.
pwfile = os.path.join(h.tmp, "redis.pw")
with open(pwfile, "w") as f:
    f.write(PASSWORD + "\n")
os.chmod(pwfile, 0o600)
h.agent_port = free_port()
conf = os.path.join(h.tmp, "agent.conf")
url = "sentinel://%s/%s" % (",".join("127.0.0.1:%d" % s for s in [dead_sentinel] + sports), MASTER)
with open(conf, "w") as f:
    f.write("listen 127.0.0.1:%d\nredis %s\nredis-timeout 500ms\nthreads 2\n" % (h.agent_port, url))
    f.write("policy transfer 3/1s\npolicy big 1000000/1h\n")
env = dict(os.environ, RATELIMIT_SPOA_REDIS_PASSWORD_FILE=pwfile)
logf = open(h.agent_log, "ab")
h.agent = subprocess.Popen([AGENT, "-f", conf], stdout=logf, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, env=env)
h.procs.append(h.agent)
if not wait_port(h.agent_port):
    h.fail("agent did not start")
    h.done()
with open("/proc/%d/cmdline" % h.agent.pid, "rb") as f:
    h.check("the password is not in the agent's argv", PASSWORD.encode() not in f.read())

a = spop.Conn().connect("127.0.0.1", h.agent_port)
a.hello()


def decide(key, policy="transfer"):
    return a.ratelimit(key, policy=policy)["actions"]


def wait_decided(key, policy, secs=30):
    end = time.time() + secs
    seen = []
    while time.time() < end:
        d = decide(key, policy)
        seen.append(d["status"])
        if d["status"] in ("allow", "deny"):
            return d, seen
        time.sleep(0.05)
    return None, seen


d, _ = wait_decided("ACC-WARMUP", "big")
h.check("agent found the primary through the sentinels (first one dead)", d is not None)

# -- the story on the discovered primary -------------------------------------
seen = [decide("ACC-1001")["status"] for _ in range(6)]
h.eq("story: 3 allow, 3 deny", ["allow"] * 3 + ["deny"] * 3, seen)
h.eq("story: recorded on the primary", "3", cli(p1, "ZCARD", "transfer:limit:v1:ACC-1001"))
for _ in range(4):
    decide("ACC-FO", "big")
h.check("the replica has the writes", wait_replicated(lambda: cli(p1, "INFO", "replication")))

# -- SENTINEL FAILOVER --------------------------------------------------------
h.eq("SENTINEL FAILOVER accepted", "OK", cli(sports[0], "SENTINEL", "FAILOVER", MASTER, auth=False))
wait_until("the sentinels name the replica as primary",
           lambda: master_addr(sports[1]) == ["127.0.0.1", str(p2)], secs=30)
wait_until("the new primary takes writes", lambda: "role:master" in cli(p2, "INFO", "replication"))
d, seen = wait_decided("ACC-FO", "big")
h.check("after failover: decisions resume without restarting the agent",
        d is not None and d["status"] == "allow", seen[-3:])
h.check("while switching: errors only, never a free pass",
        all(s in ("error", "allow") for s in seen) and seen.count("allow") <= 1, seen)
h.check("agent process unchanged", h.agent.poll() is None)
h.eq("the write went to the new primary (4 before + 1)", "5", cli(p2, "ZCARD", "big:limit:v1:ACC-FO"))
with open(os.path.join(ROOT, "lua", "sliding_window.lua"), "rb") as f:
    sha = hashlib.sha1(f.read()).hexdigest()
h.eq("script loaded on the new primary", "1", cli(p2, "SCRIPT", "EXISTS", sha))
wait_until("the old primary follows the new one",
           lambda: "role:slave" in cli(p1, "INFO", "replication"))
more = [decide("ACC-NEW-%d" % i, "big")["status"] for i in range(10)]
h.eq("later decisions all on the new primary", ["allow"] * 10, more)
h.eq("and recorded there", "1", cli(p2, "ZCARD", "big:limit:v1:ACC-NEW-9"))
with open(h.agent_log) as f:
    log = f.read()
h.check("the agent logged the switch", "sentinel" in log and str(p2) in log)
h.check("the password never appears in the agent's log", PASSWORD not in log)

h.done()
