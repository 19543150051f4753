#!/usr/bin/env python3
"""Faults under load, at the SPOP level (the agent's own contract): three
connections hammer one hot account on a fail-closed 5/1s policy while
spoa-bench keeps other accounts busy; meanwhile Redis is killed (-9) and
restarted, frozen (SIGSTOP) and thawed, and the agent is killed (-9) and
restarted.

Asserted: every ACK is allow, deny or error (nothing else, never an empty
one); no allow for a request sent while Redis was down or frozen; the hot
account's admissions never exceed 5 in any 1 s window, read from Redis
(every member ever in the sorted set, by score) and from the client side;
and decisions resume within 10 s of each fault's end (the measured times
are printed; the bound is generous on purpose: shared 2-core machines)."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (ROOT, Harness, Load, Noise, WindowWatch,  # noqa: E402
                     allows_between, client_violation)

LIMIT, WINDOW_S = 5, 1.0
RECOVERY_BOUND = 10.0
CONF = """
threads 2
redis-timeout 50ms
policy transfer %d/1s
policy noise 1000000/1s
""" % LIMIT
KEY = "ACC-HOT"
RKEY = "transfer:limit:v1:{%s}:1s" % KEY
BENCH = os.environ.get("BENCH", os.path.join(ROOT, "bench", "spoa-bench"))

h = Harness()
h.start_redis()
h.start_agent(CONF)
load = Load(h.agent_port, KEY).start()
noise = Noise(BENCH, h.agent_port).start()
watch = WindowWatch(h.rcli, RKEY).start()
recovery = {}

h.check("warm-up: decisions flow", load.wait_decisions(time.monotonic() - 1, n=20) is not None)
time.sleep(1.0)

# -- 1. Redis killed (-9), down for 2 s, restarted on the same port -------------
h.redis.kill()
h.redis.wait()
t_down = time.monotonic()
time.sleep(2.0)
t_up = time.monotonic()
h.start_redis(port=h.redis_port)
bad = allows_between(load.snapshot(), t_down, t_up)
h.eq("redis killed: no allow while it was down", [], bad[:3])
errs = [r for r in load.snapshot() if t_down <= r[0] and r[1] <= t_up and r[2] == "error"]
h.check("redis killed: requests got error (-> 503), %d of them" % len(errs), len(errs) > 0)
h.check("redis killed: errors say redis-unavailable or redis-timeout",
        all(r[3] in ("redis-unavailable", "redis-timeout") for r in errs),
        set(r[3] for r in errs))
recovery["redis kill -9 + restart"] = load.wait_decisions(t_up, n=3, timeout=RECOVERY_BOUND)
time.sleep(1.0)

# -- 2. Redis frozen (SIGSTOP) for 2 s: a store that stops answering --------------
os.kill(h.redis.pid, signal.SIGSTOP)
t_stop = time.monotonic()
time.sleep(2.0)
t_cont = time.monotonic()
os.kill(h.redis.pid, signal.SIGCONT)
bad = allows_between(load.snapshot(), t_stop, t_cont)
h.eq("redis frozen: no allow while it was frozen", [], bad[:3])
errs = [r for r in load.snapshot() if t_stop <= r[0] and r[1] <= t_cont and r[2] == "error"]
h.check("redis frozen: requests got error within the deadline, %d of them" % len(errs),
        len(errs) > 0)
recovery["redis SIGSTOP/SIGCONT"] = load.wait_decisions(t_cont, n=3, timeout=RECOVERY_BOUND)
time.sleep(1.0)

# -- 3. Agent killed (-9) and restarted on the same port ----------------------------
h.agent.kill()
h.agent.wait()
t_kill = time.monotonic()
h.start_agent(CONF, wait=False)
t_agent = time.monotonic()
recovery["agent kill -9 + restart"] = load.wait_decisions(t_agent, n=3, timeout=RECOVERY_BOUND)
time.sleep(1.0)

load.stop()
noise.stop()
watch.stop()
log = load.snapshot()

# -- the whole run ----------------------------------------------------------------
kinds = {}
for r in log:
    kinds[r[2]] = kinds.get(r[2], 0) + 1
print("# outcomes: %s; noise: %d spoa-bench runs, %d ACKs" % (kinds, noise.runs, noise.acks))
h.eq("every ACK was allow, deny or error", [],
     [k for k in kinds if k not in ("allow", "deny", "error", "none")])
h.check("the hot account hit its limit (denies seen)", kinds.get("deny", 0) > 0, kinds)
h.check("broken connections only around the agent kill",
        all(t_kill - 0.5 <= r[1] <= t_agent + RECOVERY_BOUND for r in log if r[2] == "none"),
        [round(r[1] - t_kill, 2) for r in log if r[2] == "none"][:5])
worst = watch.worst_window(int(WINDOW_S * 1e6))
h.check("redis: at most %d admissions in any 1 s window (worst %d, %d members seen)"
        % (LIMIT, worst, len(watch.members)), 0 < worst <= LIMIT, worst)
grp = client_violation(log, LIMIT, WINDOW_S)
h.eq("client side: no %d allows provably inside one window" % (LIMIT + 1), None, grp)
for what, secs in recovery.items():
    print("# recovery after %s: %s" % (what, "%.2f s" % secs if secs is not None else "none"))
    h.check("decisions resume within %d s after %s" % (RECOVERY_BOUND, what), secs is not None)
h.check("agent still running", h.agent.poll() is None)
with open(h.agent_log, errors="replace") as f:
    text = f.read()
h.check("no sanitizer report in the agent log",
        "AddressSanitizer" not in text and "runtime error" not in text)
h.done()
