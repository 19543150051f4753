#!/usr/bin/env python3
"""Decisions whose outcome the agent cannot know (issue 19 item 6): sent to
Redis, and the connection lost before the reply. Our own redis-server is
frozen (SIGSTOP), N decisions are sent (the agent writes them to the
socket), then Redis is killed (SIGKILL): the link drops with the N calls in
flight. Each is answered error/redis-unavailable, and counted in
ratelimit_spoa_decisions_unknown_outcome_total: exactly N. A second agent
with batching (redis-batch 16) counts a batch's calls one by one. The
counter of late admissions (redis-timeout, then Redis ran it) stays 0:
the two never count the same decision."""
import os
import signal
import time
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port, wait_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

N = 7
h = Harness()


def run(batch):
    h.start_redis(port=free_port())
    mport = free_port()
    h.agent_port = None
    h.start_agent("metrics 127.0.0.1:%d\nredis-timeout 10s\nredis-batch %d\n"
                  "policy transfer 100/1m\n" % (mport, batch))
    h.check("batch %d: agent ready" % batch, u.wait_ready(mport, 1) and wait_port(mport))

    def metric(name):
        return u.scrape(mport).get(name) or 0

    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    c.hello()
    h.eq("batch %d: a first decision is allowed" % batch, "allow",
         c.ratelimit("UNKNOWN")["actions"]["status"])
    h.eq("batch %d: nothing unknown yet" % batch, 0, metric("decisions_unknown_outcome_total"))
    os.kill(h.redis.pid, signal.SIGSTOP)
    for i in range(N):
        c.send_notify(101 + 2 * i, 1, [("ratelimit", [("policy", "transfer"), ("key", "UNKNOWN")])])
    # the agent has sent them once it holds them: wait until hiredis has
    # written them (they sit in Redis's socket buffer)
    time.sleep(0.5)
    h.redis.send_signal(signal.SIGKILL)
    h.redis.wait()
    answers = [c.wait_ack(101 + 2 * i, 1, timeout=10)["actions"] for i in range(N)]
    h.eq("batch %d: the %d in flight are answered error/redis-unavailable" % (batch, N),
         [("error", "redis-unavailable")] * N, [(a["status"], a.get("reason")) for a in answers])
    h.check("batch %d: decisions_unknown_outcome_total counts exactly them (%d)" % (batch, N),
            u.wait_for(lambda: metric("decisions_unknown_outcome_total") == N, 5),
            metric("decisions_unknown_outcome_total"))
    h.eq("batch %d: late_admissions_total stays 0" % batch, 0, metric("late_admissions_total"))
    c.close()
    h.stop(h.agent)


run(1)
run(16)
h.done()
