#!/usr/bin/env python3
"""Agent and module versions (issue 28): the module reports its protocol and
product version (RATELIMIT.VERSION, MODULE LIST's ver); the agent reads them
at connect, logs both, and uses the module only on a protocol it speaks.

A mixed-version fleet, each side on a real redis-server:
  this module                    -> module_version protocol=6, the module decides
  a module before 1.1.0          -> (no RATELIMIT.VERSION) protocol 1, the module
  a module of another protocol,  -> redis-engine auto: the script decides;
                                    redis-engine module: every decision an
                                    error, never an allow; not ready
  a protocol-1 module, and a     -> protocol 1 cannot decide GCRA: as another
  policy with algorithm=gcra        protocol (auto: the script; module: refused)
  a protocol-2 module, and a     -> protocol 2 cannot decide a pool: likewise
  pooled policy (pool=)
  a protocol-3 module, and a     -> protocol 3 has no leases: likewise
  policy with inflight=
  a protocol-3 module, and a     -> protocol 3 cannot decide a calendar quota
  quota (100/month)                 (issue 39): likewise
The last ones are module/ratelimit-test.so loaded with test-no-version,
test-protocol=7, test-protocol=1, test-protocol=2 and test-protocol=3 (test
builds only)."""
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, MODULE_SO, MODULE_TEST_SO, wait_for  # noqa: E402
import harness  # noqa: E402
import spop  # noqa: E402

harness.FORCED_ENGINE = ""   # each case names its engine and its module
h = Harness()
for so in (MODULE_SO, MODULE_TEST_SO):
    if not os.path.exists(so):
        h.fail("module built (make module): %s missing" % so)
        h.done()

version = open(os.path.join(harness.ROOT, "VERSION")).read().strip()


def commandstats(port, name):
    return harness.engine_calls(harness.rcli(port, "INFO", "commandstats"), ("cmdstat_" + name,))


def one_case(name, module_args, engine, policy="3/1s", before=""):
    """A Redis loading the module with <module_args>, an agent on
    redis-engine <engine> with <before> (lines) then policy transfer
    <policy>; (the decision's status and reason, the agent's log, the Redis
    port)."""
    port = h.spawn_redis(name, ["--loadmodule"] + module_args, module=False)
    p, aport, _, log = h.spawn_side_agent("agent-" + name,
                                          "redis redis://127.0.0.1:%d/0\nredis-timeout 5s\n"
                                          "redis-engine %s\n%spolicy transfer %s\n" %
                                          (port, engine, before, policy))
    wait_for(lambda: "redis_connected" in harness.read_text(log) or
             "redis_engine_protocol" in harness.read_text(log), harness.REDIS_START_SECS)
    c = spop.Conn().connect("127.0.0.1", aport)
    c.hello()
    v = c.ratelimit("ACC-V-%s" % name, timeout=15)["actions"]
    c.close()
    h.stop(p)
    return v, harness.read_text(log), port


# The module reports itself.
port = h.spawn_redis("plain", ["--loadmodule", MODULE_SO], module=False)
h.eq("RATELIMIT.VERSION: protocol and product version", "6\n" + version,
     harness.rcli(port, "RATELIMIT.VERSION"))
h.check("MODULE LIST: ver is the protocol", "ratelimit\nver\n6\n" in harness.rcli(port, "MODULE", "LIST"),
        harness.rcli(port, "MODULE", "LIST"))

v, log, rport = one_case("current", [MODULE_SO], "auto")
h.eq("current module: allowed", "allow", v and v.get("status"))
h.check("current module: the agent logs both versions",
        "event=module_version addr=127.0.0.1:%d/0 protocol=6 version=%s" % (rport, version) in log, log)
h.check("current module: the module decided", commandstats(rport, "ratelimit.decide") >= 1)
h.eq("current module: the script never ran", 0, commandstats(rport, "evalsha") + commandstats(rport, "eval"))

v, log, rport = one_case("old", [MODULE_TEST_SO, "test-no-version"], "module")
h.eq("module before 1.1.0 (no RATELIMIT.VERSION): allowed on redis-engine module", "allow",
     v and v.get("status"))
h.check("module before 1.1.0: logged as protocol 1", "protocol=1 version=- (no RATELIMIT.VERSION" in log, log)
h.check("module before 1.1.0: the module decided", commandstats(rport, "ratelimit.decide") >= 1)

v, log, rport = one_case("newer-auto", [MODULE_TEST_SO, "test-protocol=7"], "auto")
h.eq("another protocol, redis-engine auto: allowed", "allow", v and v.get("status"))
h.check("another protocol, auto: warned, with the upgrade order",
        "level=warn event=redis_engine_protocol" in log and "protocol=7 speaks=6" in log, log)
h.eq("another protocol, auto: the module never decided", 0, commandstats(rport, "ratelimit.decide"))
h.check("another protocol, auto: the script decided", commandstats(rport, "evalsha") +
        commandstats(rport, "eval") >= 1)

v, log, rport = one_case("newer-module", [MODULE_TEST_SO, "test-protocol=7"], "module")
h.eq("another protocol, redis-engine module: an error, never an allow", "error", v and v.get("status"))
h.eq("another protocol, module: the reason", "redis-unavailable", v and v.get("reason"))
h.check("another protocol, module: logged at error",
        "level=error event=redis_engine_protocol" in log and "protocol=7 speaks=6" in log, log)
h.eq("another protocol, module: the module never decided", 0, commandstats(rport, "ratelimit.decide"))

# GCRA needs protocol 2: a protocol-1 module is, for a gcra policy, a
# protocol this agent does not speak; for a log policy, one it does.
# a bucket of one request lives T = 20 min, so its key is still there when
# looked at on a loaded machine (at 3/1s it expired after 333 ms)
GCRA = "3/1h algorithm=gcra burst=3"
v, log, rport = one_case("p1-log", [MODULE_TEST_SO, "test-protocol=1"], "module")
h.eq("protocol 1, a log policy, redis-engine module: allowed", "allow", v and v.get("status"))
h.check("protocol 1, a log policy: the module decided", commandstats(rport, "ratelimit.decide") >= 1)

v, log, rport = one_case("p1-gcra-auto", [MODULE_TEST_SO, "test-protocol=1"], "auto", GCRA)
h.eq("protocol 1, gcra, redis-engine auto: allowed", "allow", v and v.get("status"))
h.check("protocol 1, gcra, auto: warned, naming the protocol needed",
        "level=warn event=redis_engine_protocol" in log and "protocol=1 speaks=6 needs=2" in log, log)
h.eq("protocol 1, gcra, auto: the module never decided", 0, commandstats(rport, "ratelimit.decide"))
h.check("protocol 1, gcra, auto: the script decided", commandstats(rport, "evalsha") +
        commandstats(rport, "eval") >= 1)
h.check("protocol 1, gcra, auto: the bucket is a GCRA key",
        harness.rcli(rport, "EXISTS", "transfer:limit:g1:{ACC-V-p1-gcra-auto}").strip() == "1",
        harness.rcli(rport, "KEYS", "*"))

v, log, rport = one_case("p1-gcra-module", [MODULE_TEST_SO, "test-protocol=1"], "module", GCRA)
h.eq("protocol 1, gcra, redis-engine module: an error, never an allow", "error", v and v.get("status"))
h.check("protocol 1, gcra, module: logged at error",
        "level=error event=redis_engine_protocol" in log and "protocol=1 speaks=6 needs=2" in log, log)
h.eq("protocol 1, gcra, module: the module never decided", 0, commandstats(rport, "ratelimit.decide"))

# A pooled policy (issue 37) needs protocol 3: a protocol-2 module is for it
# a protocol it does not speak, as a protocol-1 module is for gcra.
POOL = ("3/1s pool=tp", "pool tp 5/1s\n")
v, log, rport = one_case("p2-pool-auto", [MODULE_TEST_SO, "test-protocol=2"], "auto", *POOL)
h.eq("protocol 2, a pool, redis-engine auto: allowed", "allow", v and v.get("status"))
h.check("protocol 2, a pool, auto: warned, naming the protocol needed",
        "level=warn event=redis_engine_protocol" in log and "protocol=2 speaks=6 needs=3" in log, log)
h.eq("protocol 2, a pool, auto: the module never decided", 0, commandstats(rport, "ratelimit.decide"))
h.check("protocol 2, a pool, auto: the script decided, into the pool",
        harness.rcli(rport, "HGET", "tp:pool:a1:{tp}", "ACC-V-p2-pool-auto").strip() == "1",
        harness.rcli(rport, "KEYS", "*"))
v, log, rport = one_case("p2-pool-module", [MODULE_TEST_SO, "test-protocol=2"], "module", *POOL)
h.eq("protocol 2, a pool, redis-engine module: an error, never an allow", "error",
     v and v.get("status"))
h.check("protocol 2, a pool, module: logged at error",
        "level=error event=redis_engine_protocol" in log and "protocol=2 speaks=6 needs=3" in log, log)
v, log, rport = one_case("p3-pool-module", [MODULE_TEST_SO], "module", *POOL)
h.eq("protocol 3, a pool, redis-engine module: allowed", "allow", v and v.get("status"))
h.check("protocol 3, a pool, module: the module decided, into the pool",
        commandstats(rport, "ratelimit.decide") >= 1 and
        harness.rcli(rport, "HGET", "tp:pool:a1:{tp}", "ACC-V-p3-pool-module").strip() == "1")

# A policy with inflight= (issue 38) needs protocol 4: a protocol-3 module
# is for it a protocol it does not speak; this module decides it.
LEASED = "3/1s inflight=2"
v, log, rport = one_case("p3-lease-auto", [MODULE_TEST_SO, "test-protocol=3"], "auto", LEASED)
h.eq("protocol 3, inflight=, redis-engine auto: allowed", "allow", v and v.get("status"))
h.check("protocol 3, inflight=, auto: warned, naming the protocol needed",
        "level=warn event=redis_engine_protocol" in log and "protocol=3 speaks=6 needs=4" in log, log)
h.eq("protocol 3, inflight=, auto: the module never decided", 0, commandstats(rport, "ratelimit.decide"))
h.eq("protocol 3, inflight=, auto: the script took the lease", "1",
     harness.rcli(rport, "ZCARD", "transfer:inflight:l1:{ACC-V-p3-lease-auto}").strip())
v, log, rport = one_case("p3-lease-module", [MODULE_TEST_SO, "test-protocol=3"], "module", LEASED)
h.eq("protocol 3, inflight=, redis-engine module: an error, never an allow", "error",
     v and v.get("status"))
h.check("protocol 3, inflight=, module: logged at error",
        "level=error event=redis_engine_protocol" in log and "protocol=3 speaks=6 needs=4" in log, log)
v, log, rport = one_case("p4-lease-module", [MODULE_TEST_SO], "module", LEASED)
h.check("protocol 4, inflight=, redis-engine module: allowed with a lease",
        v and v.get("status") == "allow" and len(v.get("lease", "")) == 32, v)
h.check("protocol 4, inflight=, module: the module decided, the lease taken",
        commandstats(rport, "ratelimit.decide") >= 1 and
        harness.rcli(rport, "ZCARD", "transfer:inflight:l1:{ACC-V-p4-lease-module}").strip() == "1")

# A calendar quota (issue 39) needs protocol 4: a protocol-3 module is for
# it a protocol it does not speak (auto: the script; module: an error).
QUOTA = "3/1s 100/month"
v, log, rport = one_case("p3-quota-auto", [MODULE_TEST_SO, "test-protocol=3"], "auto", QUOTA)
h.eq("protocol 3, a quota, redis-engine auto: allowed", "allow", v and v.get("status"))
h.check("protocol 3, a quota, auto: warned, naming the protocol needed",
        "level=warn event=redis_engine_protocol" in log and "protocol=3 speaks=6 needs=4" in log, log)
h.eq("protocol 3, a quota, auto: the module never decided", 0, commandstats(rport, "ratelimit.decide"))
h.check("protocol 3, a quota, auto: the script decided, into the quota's counter",
        harness.rcli(rport, "GET", "transfer:limit:c1:{ACC-V-p3-quota-auto}:month").strip()
        .endswith(":1"), harness.rcli(rport, "KEYS", "*"))
v, log, rport = one_case("p3-quota-module", [MODULE_TEST_SO, "test-protocol=3"], "module", QUOTA)
h.eq("protocol 3, a quota, redis-engine module: an error, never an allow", "error",
     v and v.get("status"))
h.check("protocol 3, a quota, module: logged at error",
        "level=error event=redis_engine_protocol" in log and "protocol=3 speaks=6 needs=4" in log, log)
h.eq("protocol 3, a quota, module: the module never decided", 0, commandstats(rport, "ratelimit.decide"))
v, log, rport = one_case("p4-quota-module", [MODULE_SO], "module", QUOTA)
h.eq("protocol 4, a quota, redis-engine module: allowed", "allow", v and v.get("status"))
h.check("protocol 4, a quota, module: the module decided, into the quota's counter",
        commandstats(rport, "ratelimit.decide") >= 1 and
        harness.rcli(rport, "GET", "transfer:limit:c1:{ACC-V-p4-quota-module}:month").strip()
        .endswith(":1"))

# A reload that adds a gcra policy asks the module again: on protocol 1,
# auto moves that Redis to the script (log and gcra decisions alike).
rport = h.spawn_redis("p1-reload", ["--loadmodule", MODULE_TEST_SO, "test-protocol=1"], module=False)
body = "redis redis://127.0.0.1:%d/0\nredis-timeout 5s\nredis-engine auto\npolicy transfer 3/1s\n" % rport
p, aport, _, log = h.spawn_side_agent("agent-p1-reload", body)
path = os.path.join(h.tmp, "agent-p1-reload.conf")
c = spop.Conn().connect("127.0.0.1", aport)
c.hello()
h.check("reload, before: a log policy on the protocol-1 module is decided by it",
        wait_for(lambda: c.ratelimit("ACC-R1", timeout=15)["actions"].get("status") == "allow" and
                 commandstats(rport, "ratelimit.decide") >= 1, 15))
with open(path, "a") as f:
    f.write("policy bucket 3/1s algorithm=gcra\n")
p.send_signal(signal.SIGHUP)
h.check("reload: applied, and the protocol-1 module is no longer spoken (warned, needs=2)",
        wait_for(lambda: "event=config_applied" in harness.read_text(log) and
                 "protocol=1 speaks=6 needs=2" in harness.read_text(log), 15), harness.read_text(log))
calls = commandstats(rport, "ratelimit.decide")
v = c.ratelimit("ACC-R2", policy="bucket", timeout=15)["actions"]
h.eq("reload, after: the gcra policy decides (allowed)", "allow", v.get("status"))
v = c.ratelimit("ACC-R3", timeout=15)["actions"]
h.eq("reload, after: the log policy still decides", "allow", v.get("status"))
h.eq("reload, after: the module decided neither", calls, commandstats(rport, "ratelimit.decide"))
h.check("reload, after: the script did (the bucket is its g1 key)",
        harness.rcli(rport, "EXISTS", "bucket:limit:g1:{ACC-R2}").strip() == "1" and
        commandstats(rport, "evalsha") + commandstats(rport, "eval") >= 2)
c.close()
h.stop(p)

v, log, rport = one_case("p2-gcra", [MODULE_SO], "module", GCRA)
h.eq("this module, gcra, redis-engine module: allowed", "allow", v and v.get("status"))
h.check("this module, gcra: the module decided", commandstats(rport, "ratelimit.decide") >= 1)
h.done()
