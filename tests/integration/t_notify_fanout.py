#!/usr/bin/env python3
"""One NOTIFY is one decision: a NOTIFY with two or more `ratelimit`
messages is answered status=error reason=too-many-messages without a Redis
call (counted in Redis' INFO commandstats) and records nothing -- before,
a message on a policy with room counted a unit while another denied, and
the answer was deny -- whatever max-notify-messages says; a 1 MiB NOTIFY of
30,000 messages is refused the same way while another connection's
decisions go on; max-inflight counts decisions, not frames; and after a
burst the agent gives its pools back (RSS measured)."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, rss_kib  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

BOUND = 30.0        # generous: shared 2-core machines
# a sanitizer's allocator holds freed memory back (quarantine): RSS is only shown
SANITIZED = "ASAN_OPTIONS" in os.environ or "TSAN_OPTIONS" in os.environ
MIB = 1 << 20
h = Harness()
h.start_redis()


def conn(max_frame=MIB):
    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    c.hello(max_frame_size=max_frame)
    return c


def msgs(n, prefix="K"):
    return [("ratelimit", [("policy", "p"), ("key", "%s%d" % (prefix, i))]) for i in range(n)]


def evalsha_calls():
    """Decision calls Redis has run (EVALSHA, and EVAL after a NOSCRIPT; or
    RATELIMIT.DECIDE when the suite runs on the module)."""
    return u.engine_calls(h.rcli("INFO", "commandstats"))


def act(ack):
    return ack["actions"]


# redis-batch 1: one script call per decision, so script calls count decisions
h.start_agent("""
threads 1
redis-timeout 5s
max-inflight 4
redis-batch 1
policy p 1000000/1s
policy full 1/1h
""", ready=True)

# -- two messages: one with room, one on a full policy: nothing is counted -------
a = conn()
h.eq("the full policy takes its one unit", "allow",
     act(a.notify([("ratelimit", [("policy", "full"), ("key", "X")])])).get("status"))
before = evalsha_calls()
d = act(a.notify([("ratelimit", [("policy", "p"), ("key", "X")]),
                  ("ratelimit", [("policy", "full"), ("key", "X")])]))
h.eq("two ratelimit messages: status=error reason=too-many-messages",
     ("error", "too-many-messages"), (d.get("status"), d.get("reason")))
h.eq("... no Redis call", 0, evalsha_calls() - before)
h.eq("... and the policy with room recorded nothing", "0", h.rcli("EXISTS", "p:limit:v1:X"))
d = act(a.notify(msgs(16)))
h.eq("16 messages (the old max-notify-messages default): refused the same way",
     ("error", "too-many-messages"), (d.get("status"), d.get("reason")))
before = evalsha_calls()
d = act(a.notify(msgs(1) + [("other", [("x", 1)])] * 5))
h.eq("one ratelimit message among others: decided", "allow", d.get("status"))
h.eq("... with one script call", 1, evalsha_calls() - before)

# -- one 1 MiB NOTIFY of 30,000 messages while another connection decides ------
big = spop.encode_notify(1, 1, msgs(30000, "k"))
h.check("the NOTIFY fits a 1 MiB frame (%d bytes)" % len(big), len(big) <= MIB, len(big))
other = []
stop = threading.Event()


def steady():
    b = conn()
    i = 0
    while not stop.is_set():
        i += 1
        other.append(act(b.notify(msgs(1, "B%d-" % i)))["status"])
    b.close()


t = threading.Thread(target=steady)
before = evalsha_calls()
t.start()
a.send_raw(big)
d = act(a.wait_ack(1, 1, BOUND))
time.sleep(0.5)
stop.set()
t.join(BOUND)
calls = evalsha_calls() - before
h.eq("30,000 messages: status=error reason=too-many-messages",
     ("error", "too-many-messages"), (d.get("status"), d.get("reason")))
h.check("... Redis ran only the other connection's calls (%d calls, %d decisions)"
        % (calls, len(other)), calls <= len(other) + 5, calls)
h.check("the other connection kept deciding (%d decisions)" % len(other),
        len(other) > 0 and set(other) == {"allow"}, sorted(set(other)))
a.close()

# -- max-inflight counts decisions: 4 in flight, the 5th is shed; none is free --
os.kill(h.redis.pid, 19)      # SIGSTOP: every call stays in flight
try:
    a = conn()
    for sid in range(1, 8, 2):
        a.send_notify(sid, 1, msgs(1, "I%d-" % sid))
    a.send_notify(9, 1, [("other", [("x", 1)])])
    a.send_notify(11, 1, msgs(1, "I11-"))
    other = a.wait_ack(9, 1, BOUND)
    h.check("max-inflight 4: a NOTIFY without a ratelimit message is ACKed at once",
            "status" not in act(other), other)
    shed = act(a.wait_ack(11, 1, BOUND))
    h.eq("... the 5th decision is shed at once",
         ("error", "overload"), (shed.get("status"), shed.get("reason")))
finally:
    os.kill(h.redis.pid, 18)  # SIGCONT
got = [act(a.wait_ack(sid, 1, BOUND)).get("status") for sid in (1, 3, 5, 7)]
h.eq("... the 4 in flight are decided", ["allow"] * 4, got)
a.close()
h.stop(h.agent)

# -- after a burst the pools are given back --------------------------------------
h.start_agent("""
threads 1
redis-timeout 5s
max-inflight 65536
max-notify-messages 1000
policy p 1000000/1s
""")
a = conn()
for _ in range(3):
    act(a.notify(msgs(1, "W")))
base = rss_kib(h.agent.pid)
peak = base
for r in range(3):
    # 10,000 NOTIFYs sent by a thread while this one reads their ACKs: the
    # agent stops reading while its ACKs wait, so one thread alone could
    # block on a full socket
    blob = b"".join(spop.encode_notify(sid, 1, msgs(1, "R%d-%d-" % (r, sid)))
                    for sid in range(1, 20000, 2))
    t = threading.Thread(target=a.send_raw, args=(blob,))
    t.start()
    for sid in range(1, 20000, 2):
        act(a.wait_ack(sid, 1, BOUND))
        if sid % 2000 == 1:
            peak = max(peak, rss_kib(h.agent.pid))
    t.join(BOUND)
    peak = max(peak, rss_kib(h.agent.pid))
end = time.monotonic() + (3 if SANITIZED else BOUND)
after = rss_kib(h.agent.pid)
while after > base + (peak - base) // 4 and time.monotonic() < end:
    time.sleep(0.5)
    after = rss_kib(h.agent.pid)
print("# RSS: %d KiB before, %d KiB at the peak (30,000 calls, up to 10,000 in flight), "
      "%d KiB after" % (base, peak, after))
if SANITIZED:
    h.ok("RSS after the burst # SKIP under a sanitizer")
else:
    h.check("RSS comes back after the burst (most of the growth given back)",
            after <= base + (peak - base) // 4, (base, peak, after))
h.done()
