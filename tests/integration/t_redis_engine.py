#!/usr/bin/env python3
"""redis-engine auto|script|module (issue 21 item 4) against real Redis.

The agent asks every Redis it connects to whether it has the module's
command (COMMAND INFO ratelimit.decide), logs the engine at info
(event=redis_connected engine=...) and exposes it as
ratelimit_spoa_redis_engine{engine=...}.
  - auto on a Redis without the module: the script, decisions as ever;
  - script: the script, and Redis is not asked;
  - module on a Redis without it: a clear error at connect
    (level=error event=redis_engine_missing), /readyz 503, every decision
    error (a fail-closed policy), none allowed, nothing written;
  - the documented ACL (docs/deployment.md) allows the question;
  - an ACL user without COMMAND: a warning, auto keeps the script;
  - -c knows the directive and refuses a bad value.
With module/ratelimit.so (make module; make integration builds it; the test
fails without it): auto picks the module, and MODULE UNLOAD under load never
gives a free pass (auto falls back to the script at the exact limit, module
fails closed)."""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

AGENT = u.AGENT
MODULE = os.path.join(u.ROOT, "module", "ratelimit.so")
h = Harness()


def redis(name, *extra):
    """A redis-server of its own on a free port (it loads the module only
    where this test says so); returns the port."""
    return h.spawn_redis(name, extra, module=False)


rcli = u.rcli


def body(url, extra):
    return u.force_threads("redis %s\nredis-timeout 1s\ndeny-cache off\npolicy transfer 3/10s\n%s"
                           % (url, extra))


def agent(name, url, extra="redis-engine auto\n"):
    """An agent on <url>; <extra>: more config lines. The engine is always
    pinned (auto by default, as a config without the directive): this test
    is about the choice itself, so make integration-module's forced engine
    (SPOA_TEST_REDIS_ENGINE) must not replace it."""
    return h.spawn_side_agent(name, body(url, extra))


text = u.read_text


def engine_gauge(mport):
    try:
        m = u.scrape(mport)
    except Exception:  # noqa: BLE001
        return None
    return {e: m.get("redis_engine", engine=e) for e in ("script", "module")}


def readyz(mport):
    try:
        return u.fetch(mport, "/readyz")[0]
    except OSError:
        return None


statuses = u.statuses


def command_info_calls(port):
    for line in rcli(port, "INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_command|info:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


plain = redis("plain")
URL = "redis://127.0.0.1:%d/0" % plain

# -- -c knows the directive --------------------------------------------------------
for v in ("auto", "script", "module"):
    path, _, _ = h.side_agent_conf("c-" + v, body(URL, "redis-engine %s\n" % v))
    r = subprocess.run([AGENT, "-c", "-f", path], capture_output=True, text=True)
    h.eq("-c: redis-engine %s is valid" % v, 0, r.returncode)
path, _, _ = h.side_agent_conf("c-bad", body(URL, "redis-engine lua\n"))
r = subprocess.run([AGENT, "-c", "-f", path], capture_output=True, text=True)
h.check("-c: redis-engine lua is refused, naming the choices",
        r.returncode == 1 and "redis-engine must be auto, script or module" in r.stderr, r.stderr)
r = subprocess.run([AGENT, "--help"], capture_output=True, text=True)
h.check("--help lists redis-engine", "redis-engine auto|script|module" in r.stdout)

# -- auto on a Redis without the module: the script ------------------------------------
rcli(plain, "CONFIG", "RESETSTAT")
p, port, mport, log = agent("auto", URL)
h.check("auto: ready", u.wait_for(lambda: readyz(mport) == 200, 15))
h.check("auto: Redis was asked (COMMAND INFO)", command_info_calls(plain) >= 1)
h.check("auto: redis_connected at info names engine=script",
        "level=info event=redis_connected" in text(log) and "engine=script" in text(log),
        text(log)[-500:])
h.eq("auto: redis_engine{engine=script} 1, module 0", {"script": 1.0, "module": 0.0},
     engine_gauge(mport))
h.eq("auto: decides (3/10s)", ["allow"] * 3 + ["deny"], [s for s, _ in statuses(port, "AUTO", 4)])
h.stop(p)

# -- script: not asked ---------------------------------------------------------------------
rcli(plain, "CONFIG", "RESETSTAT")
p, port, mport, log = agent("script", URL, "redis-engine script\n")
h.check("script: ready", u.wait_for(lambda: readyz(mport) == 200, 15))
h.eq("script: Redis is not asked", 0, command_info_calls(plain))
h.eq("script: the gauge says script", {"script": 1.0, "module": 0.0}, engine_gauge(mport))
h.eq("script: decides", ["allow"] * 3 + ["deny"], [s for s, _ in statuses(port, "SCRIPT", 4)])
h.stop(p)

# -- module on a Redis without it: fail-closed -----------------------------------------------
rcli(plain, "FLUSHALL")
p, port, mport, log = agent("module", URL, "redis-engine module\n")
h.check("module: level=error event=redis_engine_missing",
        u.wait_for(lambda: "level=error event=redis_engine_missing" in text(log), 10),
        text(log)[-500:])
h.eq("module: /readyz 503", 503, readyz(mport))
h.check("... saying why (RATELIMIT.DECIDE not found)",
        u.wait_for(lambda: "RATELIMIT.DECIDE" in str(u.fetch(mport, "/readyz")[2]), 5),
        u.fetch(mport, "/readyz")[2])
seen = statuses(port, "MOD", 10)
h.check("module: 10 decisions, every one error, none allowed",
        all(s == "error" for s, _ in seen), seen)
h.eq("module: nothing written to Redis", "0", rcli(plain, "DBSIZE"))
h.eq("module: the gauge says neither engine", {"script": 0.0, "module": 0.0}, engine_gauge(mport))
time.sleep(2.5)
h.check("module: logged once a streak, not per attempt (%d)"
        % text(log).count("event=redis_engine_missing"),
        text(log).count("event=redis_engine_missing") <= u.threads(1))
h.stop(p)

# -- a reload that changes redis-engine on the same Redis ---------------------------------
import signal  # noqa: E402
rcli(plain, "FLUSHALL")
p, port, mport, log = agent("reload", URL)
h.check("reload: ready with auto (the script)", u.wait_for(lambda: readyz(mport) == 200, 15))
path = os.path.join(h.tmp, "reload.conf")
with open(path) as f:
    base = re.sub(r"(?m)^redis-engine .*\n", "", f.read())
with open(path, "w") as f:
    f.write(base + "redis-engine module\n")
p.send_signal(signal.SIGHUP)
h.check("reload to redis-engine module: /readyz 503",
        u.wait_for(lambda: readyz(mport) == 503, 10), text(log)[-500:])
seen = statuses(port, "RELOAD", 5)
h.check("... every decision error, none allowed", all(s == "error" for s, _ in seen), seen)
with open(path, "w") as f:
    f.write(base + "redis-engine script\n")
p.send_signal(signal.SIGHUP)
h.check("reload to redis-engine script: ready again", u.wait_for(lambda: readyz(mport) == 200, 15),
        text(log)[-500:])
h.eq("... and decides", ["allow"] * 3 + ["deny"], [s for s, _ in statuses(port, "RELOAD2", 4)])
h.stop(p)

# -- the documented ACL allows the question; without COMMAND: a warning -----------------------
with open(os.path.join(u.ROOT, "docs", "deployment.md")) as f:
    acl = next(line for line in f if line.startswith("ACL SETUSER ratelimit ")).split()[2:]
h.check("the documented ACL has +command|info", "+command|info" in acl, acl)
h.eq("the documented ACL user is created", "OK", rcli(plain, "ACL", "SETUSER", *acl))
pw = next(a[1:] for a in acl if a.startswith(">"))
p, port, mport, log = agent("docacl", "redis://ratelimit:%s@127.0.0.1:%d/0" % (pw, plain))
h.check("documented ACL: ready", u.wait_for(lambda: readyz(mport) == 200, 15))
time.sleep(0.5)
h.check("... with no redis_engine_unknown warning", "redis_engine_unknown" not in text(log),
        text(log)[-500:])
h.stop(p)
rcli(plain, "ACL", "SETUSER", "nocmd", "on", ">pw", "~*", "+@all", "-command")
p, port, mport, log = agent("nocmd", "redis://nocmd:pw@127.0.0.1:%d/0" % plain)
h.check("no COMMAND permission: redis_engine_unknown at warn",
        u.wait_for(lambda: "level=warn event=redis_engine_unknown" in text(log), 10),
        text(log)[-500:])
h.check("... auto keeps the script", u.wait_for(lambda: readyz(mport) == 200, 15) and
        engine_gauge(mport) == {"script": 1.0, "module": 0.0})
h.stop(p)

# -- with the module (make module) ---------------------------------------------------------
if not os.path.exists(MODULE):
    h.fail("%s is built (make module; make integration builds it)" % MODULE)
    h.done()

mod = redis("module", "--loadmodule", MODULE, "--enable-module-command", "yes")   # (MODULE UNLOAD below)
MURL = "redis://127.0.0.1:%d/0" % mod
p, port, mport, log = agent("auto-mod", MURL)
h.check("auto + module: ready", u.wait_for(lambda: readyz(mport) == 200, 15))
h.check("auto + module: engine=module at info", "engine=module" in text(log), text(log)[-500:])
h.eq("auto + module: the gauge says module", {"script": 0.0, "module": 1.0}, engine_gauge(mport))
h.eq("auto + module: decides (3/10s)", ["allow"] * 3 + ["deny"],
     [s for s, _ in statuses(port, "MODAUTO", 4)])
# MODULE UNLOAD under load: never over the limit, the script takes over
c = spop.Conn().connect("127.0.0.1", port)
c.hello()
seq = []
for i in range(3):
    seq.append(c.ratelimit("UNLOAD")["actions"])
h.eq("MODULE UNLOAD answers OK", "OK", rcli(mod, "MODULE", "UNLOAD", "ratelimit"))
for i in range(5):
    seq.append(c.ratelimit("UNLOAD")["actions"])
c.close()
h.eq("MODULE UNLOAD (auto): exactly 3 allowed of 8, the rest deny (the script read the "
     "module's data)", ["allow"] * 3 + ["deny"] * 5, [a["status"] for a in seq])
h.check("... logged redis_engine_missing at warn",
        "level=warn event=redis_engine_missing" in text(log), text(log)[-500:])
h.eq("... the gauge says script", {"script": 1.0, "module": 0.0}, engine_gauge(mport))
h.stop(p)
h.eq("MODULE LOAD answers OK", "OK", rcli(mod, "MODULE", "LOAD", MODULE))
rcli(mod, "FLUSHALL")
p, port, mport, log = agent("only-mod", MURL, "redis-engine module\n")
h.check("module + module: ready", u.wait_for(lambda: readyz(mport) == 200, 15))
h.eq("module + module: decides", ["allow"] * 3 + ["deny"],
     [s for s, _ in statuses(port, "MODONLY", 4)])
h.eq("MODULE UNLOAD answers OK", "OK", rcli(mod, "MODULE", "UNLOAD", "ratelimit"))
seen = statuses(port, "MODONLY2", 5)
h.check("MODULE UNLOAD (module): every decision error, none allowed",
        all(s == "error" for s, _ in seen), seen)
h.check("... /readyz 503", u.wait_for(lambda: readyz(mport) == 503, 10))
h.stop(p)

# -- the module refuses on an evicting Redis: the agent says redis-evicts-keys -------------
# redis-allow-eviction yes: the agent's own poll lets decisions through, so
# the refusal comes from the module (loaded without allow-eviction) at the
# moment it decides, as its "EVICTS ..." error.
h.eq("MODULE LOAD again answers OK", "OK", rcli(mod, "MODULE", "LOAD", MODULE))
rcli(mod, "FLUSHALL")
rcli(mod, "CONFIG", "SET", "maxmemory", "100mb")
rcli(mod, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
p, port, mport, log = agent("evicts", MURL, "redis-engine module\nredis-allow-eviction yes\n"
                            "policy open 3/10s on-redis-error=allow\n")
h.check("module on an evicting Redis: the agent connects", u.wait_for(lambda: engine_gauge(mport) ==
        {"script": 0.0, "module": 1.0}, 15), text(log)[-500:])
h.eq("... a fail-closed decision: error redis-evicts-keys", [("error", "redis-evicts-keys")] * 2,
     statuses(port, "EVICTS", 2))
c = spop.Conn().connect("127.0.0.1", port)
c.hello()
a = c.ratelimit("EVICTS", policy="open")["actions"]
c.close()
h.eq("... a fail-open decision: allow redis-evicts-keys", ("allow", "redis-evicts-keys"),
     (a.get("status"), a.get("reason")))
h.eq("... nothing written", "0", rcli(mod, "EXISTS", "transfer:limit:v1:EVICTS"))
h.check("... logged redis_evicts_keys at warn with the module's reply",
        u.wait_for(lambda: "level=warn event=redis_evicts_keys" in text(log) and "EVICTS" in text(log), 5),
        text(log)[-500:])
m = u.scrape(mport)
h.eq("... counted as redis_errors_total{kind=\"evicts\"} (3 refusals), not as script errors",
     (3, 0), (m.get("redis_errors_total", kind="evicts"), m.get("redis_errors_total", kind="script")))
h.eq("... and as the module's: redis_replies_total{engine=\"module\",result=\"error\"} 3, none "
     "the script's", (3, 0, 0),
     (m.get("redis_replies_total", engine="module", result="error"),
      m.get("redis_replies_total", engine="script", result="error"),
      m.get("redis_replies_total", engine="script", result="decision")))
h.stop(p)
h.done()
