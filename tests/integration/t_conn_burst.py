#!/usr/bin/env python3
"""max-connections is counted at accept, across worker threads: 20
connections opened at once against `max-connections 4` (all waiting in the
listen backlog while the agent is stopped, so it accepts them in one go):
exactly 4 get AGENT-HELLO, the 16 others AGENT-DISCONNECT status 13 and a
close (docs/configuration.md, "max-connections"); the 4 then decide, and
the cap holds again for a second burst once they closed. (A count taken
after the handshake instead of at accept lets every one of the 20 in.)"""
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, scrape, wait_for  # noqa: E402
import spop  # noqa: E402

BOUND = 10.0        # generous: shared 2-core machines
h = Harness()
h.start_redis()
h.start_agent("""
threads 2
max-connections 4
redis-timeout 3s
policy transfer 1000000/1s
""", ready=True)


def burst(n):
    """<n> connections opened at once: the served ones (AGENT-HELLO) and the
    sorted DISCONNECT statuses (or errors) of the others."""
    # Connections closed just before (the readiness probe's, the previous
    # burst's) hold their slots until the agent has seen them go.
    h.check("no connection open before the burst",
            wait_for(lambda: scrape(h.metrics_port).get("connections_open") == 0, BOUND))
    os.kill(h.agent.pid, signal.SIGSTOP)
    try:
        socks = [spop.Conn().connect("127.0.0.1", h.agent_port) for _ in range(n)]
        for c in socks:
            c.send_raw(spop.encode_haproxy_hello(engine_id="burst"))
    finally:
        os.kill(h.agent.pid, signal.SIGCONT)
    served, refused = [], []
    for c in socks:
        try:
            f = c.read_frame(BOUND)
            if f["type"] == spop.FRAME_AGENT_HELLO:
                served.append(c)
                continue
            refused.append(f.get("status_code"))
            if not c.closed_by_peer(BOUND):
                refused.append("still open")
        except (EOFError, ConnectionResetError, TimeoutError) as e:
            refused.append(type(e).__name__)
        c.close()
    return served, sorted(refused, key=str)


served, refused = burst(20)
h.eq("20 connections at once, max-connections 4: exactly 4 get AGENT-HELLO, "
     "16 get DISCONNECT 13 and a close", (4, [13] * 16), (len(served), refused))
ok = [c.ratelimit("ACC-BURST")["actions"].get("status") for c in served]
h.eq("... the 4 served connections decide", ["allow"] * len(served), ok)
for c in served:
    c.close()

served, refused = burst(20)
for c in served:
    c.close()
h.eq("a second burst once they closed: exactly 4 again", (4, [13] * 16), (len(served), refused))
h.done()
