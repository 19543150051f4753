#!/usr/bin/env python3
"""A Redis that starts evicting while the agent is connected (issue 19 item 1).

At connect the agent refuses a Redis whose maxmemory-policy is not
noeviction (t_redis_safety.py). Here the policy changes live, as a managed
service's console changes it: under SPOP load on 40 accounts limited to
20/1m (deny cache off: every decision goes to Redis), `CONFIG SET maxmemory-policy allkeys-random` and a Redis filled over
its maxmemory, so that it evicts windows. The agent asks every ready link
for the policy and for INFO stats's evicted_keys every 500 ms (the bound
docs/security.md states: seen within 1 s). The test asserts outcomes, not
timings: 2 s after the switch every decision is error/redis-evicts-keys,
no account was admitted after that, the gauge is 1, /readyz is 503, one
error line per worker; back to noeviction, decisions come back.

Then Redis's own evidence alone: an ACL user without CONFIG (the agent
cannot read the policy), Redis switched to allkeys-random, filled so that
it evicts, and switched back before anything else: evicted_keys grew, and
that is the same signal. An ACL user without INFO: a warning once, and the
policy check goes on. And what the poll costs Redis, printed (calls/s and
usec_per_call of CONFIG GET and INFO, from INFO commandstats)."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

LIMIT = 20
ACCOUNTS = ["ACC-%02d" % i for i in range(40)]
THREADS = 2
h = Harness()


def redis(name, *extra):
    """A redis-server of its own on a free port (with the module when the
    suite runs on it); returns the port."""
    return h.spawn_redis(name, ["--enable-debug-command", "yes"] + list(extra))


rcli = u.rcli


def info(port, section, field, user=None):
    for line in rcli(port, "INFO", section, user=user).splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


def agent(name, url):
    """An agent on <url> with its own log and metrics; returns (proc, port,
    metrics port, log path)."""
    return h.spawn_side_agent(name, u.force_threads(
        "redis %s\nredis-timeout 1s\nthreads %d\npolicy transfer %d/1m\ndeny-cache off\n"
        % (url, THREADS, LIMIT)))


text = u.read_text


def metric(mport, name, **labels):
    try:
        return u.scrape(mport).get(name, **labels) or 0
    except Exception:  # noqa: BLE001
        return None


def readyz(mport):
    try:
        return u.fetch(mport, "/readyz")[0]
    except OSError:
        return None


def fill_until_evicting(port, user=None):
    """Fill Redis with filler keys and set maxmemory under what it holds, so
    that its next writes evict (under the policy it has now)."""
    rcli(port, "DEBUG", "POPULATE", 200000, "filler", 100, user=user)
    used = int(info(port, "memory", "used_memory", user=user))
    rcli(port, "CONFIG", "SET", "maxmemory", used * 2 // 3, user=user)
    rcli(port, "SET", "nudge", "x", user=user)   # a write: Redis evicts now


class Load:
    """SPOP clients asking for the accounts round robin until stopped;
    every answer kept as (time, account, status, reason)."""

    def __init__(self, port, clients=4):
        self.port = port
        self.answers = []
        self.lock = threading.Lock()
        self.stopping = False
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(clients)]
        for t in self.threads:
            t.start()

    def run(self, n):
        c = spop.Conn().connect("127.0.0.1", self.port)
        c.hello()
        i = n
        while not self.stopping:
            key = ACCOUNTS[i % len(ACCOUNTS)]
            i += 1
            a = c.ratelimit(key)["actions"]
            with self.lock:
                self.answers.append((time.time(), key, a["status"], a.get("reason")))
        c.close()

    def stop(self):
        self.stopping = True
        for t in self.threads:
            t.join()
        return self.answers


def first_allow(port, key):
    c = spop.Conn().connect("127.0.0.1", port)
    c.hello()
    s = c.ratelimit(key)["actions"]["status"]
    c.close()
    return s == "allow"


# -- 1. the policy switched live under load, Redis filled: refused within the bound ----
rp = redis("live", "--maxmemory-policy", "noeviction")
p, port, mport, log = agent("live", "redis://127.0.0.1:%d/0" % rp)
h.check("the agent is ready on a noeviction Redis", u.wait_for(lambda: readyz(mport) == 200, 15))
load = Load(port)
time.sleep(1.0)
t_switch = time.time()
rcli(rp, "CONFIG", "SET", "maxmemory-policy", "allkeys-random")
fill_until_evicting(rp)
time.sleep(2.0)
t_bound = t_switch + 2.0
time.sleep(1.0)
answers = load.stop()
evicted = int(info(rp, "stats", "evicted_keys"))
h.check("Redis did evict keys (%d): the test exercised eviction" % evicted, evicted > 0)
before = [a for a in answers if a[0] < t_switch]
after = [a for a in answers if a[0] >= t_bound]
h.check("load ran before the switch (%d answers, %d allows)"
        % (len(before), sum(1 for a in before if a[2] == "allow")),
        any(a[2] == "allow" for a in before))
h.check("load ran after the bound (%d answers)" % len(after), len(after) > 50)
late = [a for a in after if (a[2], a[3]) != ("error", "redis-evicts-keys")]
h.check("2 s after the switch every decision is error/redis-evicts-keys", not late, late[:5])
h.eq("no account admitted after the bound", 0, sum(1 for a in after if a[2] == "allow"))
seen = [a[0] - t_switch for a in answers if a[0] >= t_switch and a[3] == "redis-evicts-keys"]
print("# first redis-evicts-keys answer %.3f s after CONFIG SET (bound: 1 s)" %
      (min(seen) if seen else -1))
over = {}
for a in answers:
    if a[2] == "allow":
        over[a[1]] = over.get(a[1], 0) + 1
print("# admissions per account over the run: max %d (limit %d), %d accounts over it"
      % (max(over.values()) if over else 0, LIMIT, sum(1 for v in over.values() if v > LIMIT)))
for line in text(log).splitlines():
    if "level=error event=redis_unsafe_eviction" in line:
        import datetime
        ts = datetime.datetime.strptime(line.split()[0][3:], "%Y-%m-%dT%H:%M:%S.%fZ")
        ts = ts.replace(tzinfo=datetime.timezone.utc).timestamp()
        print("# redis_unsafe_eviction logged %.3f s after CONFIG SET was started" % (ts - t_switch))
        break
h.eq("the unsafe-eviction gauge is 1", 1.0, metric(mport, "redis_unsafe_eviction"))
h.eq("/readyz fails (503)", 503, readyz(mport))
lines = text(log).count("level=error event=redis_unsafe_eviction")
h.check("logged at error once per worker link (%d lines, %d workers)" % (lines, THREADS),
        1 <= lines <= THREADS, text(log)[-800:])
h.check("... naming the policy", "policy=allkeys-random" in text(log))

# back to noeviction: decisions come back (after the hold of the evicted_keys signal)
rcli(rp, "CONFIG", "SET", "maxmemory-policy", "noeviction")
rcli(rp, "CONFIG", "SET", "maxmemory", 0)
rcli(rp, "FLUSHALL")
h.check("noeviction again: decisions come back",
        u.wait_for(lambda: first_allow(port, "BACK"), 20, 0.3))
h.check("the gauge is back to 0 (every worker)",
        u.wait_for(lambda: metric(mport, "redis_unsafe_eviction") == 0.0, 10))
h.eq("/readyz passes again", 200, u.wait_for(lambda: readyz(mport) == 200 and 200, 5))
h.check("redis_eviction_safe logged", "event=redis_eviction_safe" in text(log))
h.stop(p)

# -- 2. evicted_keys alone: the agent may not read the policy ------------------------
ADMIN = ("admin", "adm")
ra = redis("evidence", "--maxmemory-policy", "noeviction", "--user", "default", "off",
           "--user", "admin", "on", ">adm", "~*", "&*", "+@all",
           "--user", "rl", "on", ">pw", "~*", "+@all", "-config")
p, port, mport, log = agent("evidence", "redis://rl:pw@127.0.0.1:%d/0" % ra)
h.check("no CONFIG permission: redis_eviction_unknown at warn",
        u.wait_for(lambda: "level=warn event=redis_eviction_unknown" in text(log), 10),
        text(log)[-600:])
h.check("... and the agent is ready", u.wait_for(lambda: readyz(mport) == 200, 15))
h.check("decisions work", first_allow(port, "EVIDENCE-0"))
load = Load(port, clients=2)
time.sleep(0.5)
rcli(ra, "CONFIG", "SET", "maxmemory-policy", "allkeys-random", user=ADMIN)
fill_until_evicting(ra, user=ADMIN)
rcli(ra, "CONFIG", "SET", "maxmemory-policy", "noeviction", user=ADMIN)
rcli(ra, "CONFIG", "SET", "maxmemory", 0, user=ADMIN)
t_back = time.time()
h.check("Redis evicted keys (%s)" % info(ra, "stats", "evicted_keys", user=ADMIN),
        int(info(ra, "stats", "evicted_keys", user=ADMIN)) > 0)
time.sleep(2.0)
t_bound = time.time()
time.sleep(1.0)
answers = load.stop()
after = [a for a in answers if a[0] >= t_bound]
h.check("load ran after the bound (%d answers)" % len(after), len(after) > 20)
late = [a for a in after if (a[2], a[3]) != ("error", "redis-evicts-keys")]
h.check("evicted_keys grew: every decision is error/redis-evicts-keys", not late, late[:5])
h.eq("the gauge is 1", 1.0, metric(mport, "redis_unsafe_eviction"))
h.eq("/readyz fails (503)", 503, readyz(mport))
h.check("logged at error, naming evicted_keys",
        "level=error event=redis_unsafe_eviction" in text(log) and "evicted_keys=" in text(log),
        text(log)[-800:])
h.check("it clears once evicted_keys stops growing (the hold)",
        u.wait_for(lambda: first_allow(port, "EVIDENCE-1"), 20, 0.3))
h.check("the gauge is back to 0 (every worker)",
        u.wait_for(lambda: metric(mport, "redis_unsafe_eviction") == 0.0, 10))
h.stop(p)

# -- 3. an ACL user without INFO: a warning once, the policy check goes on --------------
rn = redis("noinfo", "--maxmemory-policy", "noeviction", "--user", "default", "off",
           "--user", "admin", "on", ">adm", "~*", "&*", "+@all",
           "--user", "rl", "on", ">pw", "~*", "+@all", "-info")
p, port, mport, log = agent("noinfo", "redis://rl:pw@127.0.0.1:%d/0" % rn)
h.check("no INFO permission: redis_eviction_evidence_unknown at warn",
        u.wait_for(lambda: "level=warn event=redis_eviction_evidence_unknown" in text(log), 10),
        text(log)[-600:])
h.check("... the agent is ready", u.wait_for(lambda: readyz(mport) == 200, 15))
h.check("decisions work", first_allow(port, "NOINFO"))
rcli(rn, "CONFIG", "SET", "maxmemory-policy", "volatile-lru", user=ADMIN)
time.sleep(2.0)
h.check("the live policy switch is still seen",
        not first_allow(port, "NOINFO-2") and metric(mport, "redis_unsafe_eviction") == 1.0)
h.check("warned once per worker link (%d)"
        % text(log).count("event=redis_eviction_evidence_unknown"),
        text(log).count("event=redis_eviction_evidence_unknown") <= THREADS)
h.stop(p)

# -- 3b. the documented ACL (docs/deployment.md) is enough for both checks ---------------
with open(os.path.join(u.ROOT, "docs", "deployment.md")) as f:
    acl = next(l for l in f if l.startswith("ACL SETUSER ratelimit ")).split()[2:]
rd = redis("docacl", "--maxmemory-policy", "noeviction")
h.eq("the documented ACL user is created", "OK", rcli(rd, "ACL", "SETUSER", *acl))
pw = next(a[1:] for a in acl if a.startswith(">"))
p, port, mport, log = agent("docacl", "redis://ratelimit:%s@127.0.0.1:%d/0" % (pw, rd))
h.check("documented ACL: the agent is ready", u.wait_for(lambda: readyz(mport) == 200, 15))
time.sleep(1.5)
h.check("... with no eviction warning (CONFIG GET and INFO allowed)",
        "eviction_unknown" not in text(log) and "evidence_unknown" not in text(log),
        text(log)[-600:])
rcli(rd, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
h.check("... and a live switch is seen",
        u.wait_for(lambda: metric(mport, "redis_unsafe_eviction") == 1.0, 5))
h.stop(p)

# -- 4. what the poll costs Redis, measured (printed, not asserted) ----------------------
rc = redis("cost", "--maxmemory-policy", "noeviction")
p, port, mport, log = agent("cost", "redis://127.0.0.1:%d/0" % rc)
u.wait_for(lambda: readyz(mport) == 200, 15)
rcli(rc, "CONFIG", "RESETSTAT")
time.sleep(10.0)
stats = rcli(rc, "INFO", "commandstats")
for line in stats.splitlines():
    if line.startswith("cmdstat_info:") or line.startswith("cmdstat_config|get:"):
        print("# idle agent, %d worker links, 10 s: %s" % (THREADS, line))
h.stop(p)
h.done()
