#!/usr/bin/env python3
"""Late admissions (issue 10 item 8): Redis frozen (SIGSTOP of our own
redis-server) for less than the stall limit, with a short redis-timeout.
Every call is answered error/redis-timeout at its deadline; when Redis
thaws it still runs each script and admits it. Those admissions are counted
in ratelimit_spoa_late_admissions_total: exactly the timed-out answers,
exactly what Redis recorded."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port, wait_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

N = 6
h = Harness()
h.start_redis()
mport = free_port()
h.start_agent("metrics 127.0.0.1:%d\nredis-timeout 50ms\npolicy transfer 100/1m\n" % mport)
h.check("agent ready", u.wait_ready(mport, 1) and wait_port(mport))


def metric(name, **labels):
    return u.scrape(mport).get(name, **labels) or 0


c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()
h.eq("before: nothing late", 0, metric("late_admissions_total"))
h.eq("a first decision is allowed", "allow", c.ratelimit("LATE")["actions"]["status"])

os.kill(h.redis.pid, signal.SIGSTOP)
try:
    for i in range(N):
        c.send_notify(101 + 2 * i, 1, [("ratelimit", [("policy", "transfer"), ("key", "LATE")])])
    answers = [c.wait_ack(101 + 2 * i, 1, timeout=10)["actions"] for i in range(N)]
    time.sleep(0.3)   # well under the stall limit (1 s): the link stays
finally:
    os.kill(h.redis.pid, signal.SIGCONT)
late = [a for a in answers if a.get("reason") == "redis-timeout"]
h.check("calls answered error/redis-timeout while Redis was frozen (%d of %d)" % (len(late), N),
        late and all(a["status"] == "error" for a in late), answers)
h.check("Redis ran them once thawed: %d entries" % (N + 1),
        u.wait_for(lambda: h.rcli("ZCARD", "transfer:limit:v1:LATE") == str(N + 1), 10),
        h.rcli("ZCARD", "transfer:limit:v1:LATE"))
h.check("late_admissions_total counts every timed-out admission (%d)" % len(late),
        u.wait_for(lambda: metric("late_admissions_total") == len(late), 10),
        metric("late_admissions_total"))
h.eq("the agent still decides", "allow", c.ratelimit("LATE")["actions"]["status"])
c.close()
h.done()
