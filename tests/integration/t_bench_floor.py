#!/usr/bin/env python3
"""make bench's SPOE floor (bench/spoa-floor): it answers the HELLO like the
agent, every NOTIFY (pipelined, out of one write) with the fixed variables
of an allowed request, a healthcheck HELLO and then closes, and a
HAPROXY-DISCONNECT with an AGENT-DISCONNECT. No Redis: it does no I/O but
SPOP. The floor is next to $BENCH (bench/spoa-bench) in every build."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import ROOT, Harness, free_port, wait_port  # noqa: E402
import spop  # noqa: E402

BENCH = os.environ.get("BENCH", os.path.join(ROOT, "bench", "spoa-bench"))
FLOOR = os.path.join(os.path.dirname(BENCH), "spoa-floor")
WANT = {"status": "allow", "limit": 20, "remaining": 19, "reset": 1, "window": 1,
        "policy_hdr": '"transfer";q=20;w=1', "ratelimit_hdr": '"transfer";r=19;t=1'}

h = Harness()
if not os.access(FLOOR, os.X_OK):
    h.fail("spoa-floor built next to spoa-bench (make): %s missing" % FLOOR)
    h.done()
port = free_port()
h.spawn([FLOOR, "-a", "127.0.0.1:%d" % port], os.path.join(h.tmp, "floor.log"))
h.check("spoa-floor listens", wait_port(port, 10))

with spop.Conn().connect("127.0.0.1", port) as c:
    hello = c.hello(max_frame_size=16380)
    h.eq("AGENT-HELLO names version 2.0", "2.0", hello.get("version"))
    h.eq("AGENT-HELLO keeps HAProxy's max-frame-size", 16380, hello.get("max_frame_size"))
    h.check("AGENT-HELLO offers pipelining", "pipelining" in str(hello.get("capabilities")))
    ack = c.ratelimit("ACC-1", cost=1)
    h.eq("a NOTIFY gets the fixed variables", WANT, ack["actions"])
    h.eq("all of them txn-scoped SET-VARs", {("set-var", "txn")},
         {(a[0], a[1]) for a in ack["raw_actions"]})
    # 50 NOTIFYs in one write, answered by ids whatever the order
    raw = b"".join(spop.encode_notify(101 + 2 * i, 1, [("ratelimit", [("policy", "transfer"),
                                                                       ("key", "K%d" % i)])])
                   for i in range(50))
    c.send_raw(raw)
    got = [c.wait_ack(101 + 2 * i, 1)["actions"] for i in range(50)]
    h.eq("50 pipelined NOTIFYs, 50 ACKs with the fixed variables", [WANT] * 50, got)
    c.send_raw(spop.encode_disconnect(0, "bye"))
    f = c.read_frame()
    h.eq("HAPROXY-DISCONNECT gets an AGENT-DISCONNECT", spop.FRAME_AGENT_DISCONNECT, f["type"])
    h.check("then it closes", c.closed_by_peer())

with spop.Conn().connect("127.0.0.1", port) as c:
    c.hello(healthcheck=True)
    h.check("a healthcheck HELLO is answered, then closed", c.closed_by_peer())

with spop.Conn().connect("127.0.0.1", port) as c:
    c.send_raw(spop.encode_notify(1, 1, [("ratelimit", [("key", "K")])]))
    h.check("a NOTIFY before HELLO: closed", c.closed_by_peer())
port2 = free_port()
h.spawn([FLOOR, "-a", "127.0.0.1:%d" % port2, "-s"], os.path.join(h.tmp, "floor-s.log"))
h.check("spoa-floor -s listens", wait_port(port2, 10))
with spop.Conn().connect("127.0.0.1", port2) as c:
    c.hello()
    h.eq("-s: status only", {"status": "allow"}, c.ratelimit("ACC-1")["actions"])
h.done()
