#!/usr/bin/env python3
"""Resource limits against the real agent: when a limit is hit the agent
sheds load with a clear SPOP status, never by growing without bound.

  max-connections   the connection over the cap gets AGENT-DISCONNECT 13
                    at once; a slot freed is usable again; of 20 opened at
                    once exactly the cap is served
  hello-timeout     a silent or half-HELLO connection gets status 2
  frame-timeout     half a frame, then silence: status 2; a quiet line
                    between frames is left alone
  max frame size    a length over the negotiated size (or over 16380 before
                    HELLO, or over 1 MiB whatever HAProxy offers) gets
                    status 3 before the agent reads the payload; a HELLO
                    offering < 256 gets status 9; a zero length status 4
  max-inflight      NOTIFYs over the cap on one connection are answered
                    error/overload at once, while Redis is frozen
  output buffer     a peer that sends NOTIFYs but never reads its ACKs:
                    the agent stops reading it (backpressure) and its
                    memory stays flat; every ACK arrives once the peer reads
"""
import os
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, rss_kib  # noqa: E402
import spop  # noqa: E402

BOUND = 10.0        # generous: shared 2-core machines
h = Harness()
h.start_redis()
h.start_agent("""
threads 1
max-connections 4
max-inflight 4
hello-timeout 1s
frame-timeout 1s
redis-timeout 3s
policy transfer 1000000/1s
""")


def conn(hello=True, **kw):
    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    if hello:
        c.hello(**kw)
    return c


def disconnect_of(c, timeout=BOUND):
    """Status of the AGENT-DISCONNECT <c> receives, then whether the agent
    closed the connection; None when nothing came."""
    try:
        f = c.read_frame(timeout)
    except (EOFError, ConnectionResetError):
        return None, True
    except TimeoutError:
        return None, False
    if f["type"] != spop.FRAME_AGENT_DISCONNECT:
        return ("not a DISCONNECT: %s" % f["type_name"]), False
    return f.get("status_code"), c.closed_by_peer(BOUND)


def ratelimit_ok(c):
    return c.ratelimit("ACC-LIM")["actions"].get("status") in ("allow", "deny")


# -- max-connections 4 ---------------------------------------------------------
held = [conn() for _ in range(4)]
extra = conn(hello=False)
st, closed = disconnect_of(extra)
h.eq("max-connections: the 5th connection gets DISCONNECT 13 and a close", (13, True), (st, closed))
extra.close()
h.check("max-connections: the 4 held connections still decide", all(ratelimit_ok(c) for c in held))
held.pop().close()
again = None
end = time.monotonic() + BOUND
while again is None and time.monotonic() < end:
    c = conn(hello=False)
    f = c.hello(strict=False)
    if f["type"] == spop.FRAME_AGENT_HELLO:
        again = c
    else:
        c.close()
        time.sleep(0.1)
h.check("max-connections: a freed slot is usable again", again is not None and ratelimit_ok(again))
for c in held + [again]:
    if c:
        c.close()


def burst(n):
    """<n> connections opened at once (all in the listen backlog while the
    agent is stopped, so it accepts them in one go): how many got
    AGENT-HELLO, and the sorted DISCONNECT statuses of the others."""
    os.kill(h.agent.pid, signal.SIGSTOP)
    try:
        socks = [conn(hello=False) for _ in range(n)]
        for c in socks:
            c.send_raw(spop.encode_haproxy_hello(engine_id="burst"))
    finally:
        os.kill(h.agent.pid, signal.SIGCONT)
    served, refused = 0, []
    for c in socks:
        try:
            f = c.read_frame(BOUND)
            if f["type"] == spop.FRAME_AGENT_HELLO:
                served += 1
            else:
                refused.append(f.get("status_code"))
        except (EOFError, ConnectionResetError, TimeoutError) as e:
            refused.append(type(e).__name__)
    for c in socks:
        c.close()
    return served, sorted(refused, key=str)


# the 5 connections above are closing: until the agent saw them go, fewer
# than 4 may be served; never more
end = time.monotonic() + BOUND
while True:
    served, refused = burst(20)
    if served == 4 or served > 4 or time.monotonic() > end:
        break
    time.sleep(0.2)
h.eq("max-connections: 20 opened at once, exactly 4 served, 16 refused with 13",
     (4, [13] * 16), (served, refused))
time.sleep(0.3)

# -- hello-timeout 1s ------------------------------------------------------------
c = conn(hello=False)
t0 = time.monotonic()
st, closed = disconnect_of(c)
h.eq("hello-timeout: a silent connection gets status 2 and a close", (2, True), (st, closed))
print("# silent connection closed after %.2f s (hello-timeout 1s)" % (time.monotonic() - t0))
c.close()
c = conn(hello=False)
c.send_raw(spop.encode_haproxy_hello()[:20])
h.eq("hello-timeout: half a HELLO gets status 2 and a close", (2, True), disconnect_of(c))
c.close()

# -- frame-timeout 1s ------------------------------------------------------------
c = conn()
frame = spop.encode_notify(1, 1, [("ratelimit", [("policy", "transfer"), ("key", "ACC-LIM")])])
c.send_raw(frame[:10])
t0 = time.monotonic()
st, closed = disconnect_of(c)
h.eq("frame-timeout: half a NOTIFY then silence gets status 2 and a close", (2, True), (st, closed))
print("# stalled frame dropped after %.2f s (frame-timeout 1s)" % (time.monotonic() - t0))
c.close()
c = conn()
time.sleep(2.5)
h.check("frame-timeout: a quiet connection between frames stays open", ratelimit_ok(c))
c.close()

# -- frame sizes -----------------------------------------------------------------
c = conn(hello=False)
c.send_raw(struct.pack(">I", 0x7fffffff))
h.eq("frame size: 2 GiB announced before HELLO -> status 3 after 4 bytes", (3, True), disconnect_of(c))
c.close()
c = conn(hello=False)
c.send_raw(struct.pack(">I", 16381))
h.eq("frame size: 16381 before HELLO (HAProxy's default is 16380) -> status 3", (3, True),
     disconnect_of(c))
c.close()
c = conn(max_frame_size=256)
h.eq("frame size: HELLO offering 256 -> AGENT-HELLO echoes 256", 256,
     c.agent_hello.get("max_frame_size"))
big = spop.encode_notify(1, 1, [("ratelimit", [("policy", "transfer"), ("key", "K" * 250),
                                               ("pad", "x" * 40)])])
c.send_raw(big)
h.eq("frame size: a %d-byte NOTIFY over the 256 negotiated -> status 3" % (len(big) - 4), (3, True),
     disconnect_of(c))
c.close()
c = conn(max_frame_size=0xffffffff)
h.eq("frame size: HELLO offering 4 GiB -> AGENT-HELLO caps it at 1 MiB", 1 << 20,
     c.agent_hello.get("max_frame_size"))
c.send_raw(struct.pack(">I", (1 << 20) + 1))
h.eq("frame size: 1 MiB + 1 announced -> status 3", (3, True), disconnect_of(c))
c.close()
c = conn(hello=False)
f = c.hello(max_frame_size=100, strict=False)
h.eq("frame size: HELLO offering 100 -> status 9", 9, f.get("status_code"))
c.close()
c = conn()
c.send_raw(struct.pack(">I", 0))
h.eq("frame size: a zero length -> status 4", (4, True), disconnect_of(c))
c.close()

# -- max-inflight 4 ----------------------------------------------------------------
c = conn()
h.check("max-inflight: decisions flow before the freeze", ratelimit_ok(c))
os.kill(h.redis.pid, signal.SIGSTOP)
try:
    msg = [("ratelimit", [("policy", "transfer"), ("key", "ACC-INFL")])]
    c.send_raw(b"".join(spop.encode_notify(2 * i + 1, 1, msg) for i in range(10)))
    early = []
    try:
        while len(early) < 6:
            f = c.read_frame(BOUND)
            early.append(f.get("actions", {}))
    except (TimeoutError, EOFError):
        pass
    h.eq("max-inflight: 6 of 10 NOTIFYs answered at once while Redis is frozen",
         [("error", "overload")] * 6, [(a.get("status"), a.get("reason")) for a in early])
finally:
    os.kill(h.redis.pid, signal.SIGCONT)
late = []
try:
    while len(late) < 4:
        late.append(c.read_frame(BOUND).get("actions", {}).get("status"))
except (TimeoutError, EOFError):
    pass
h.check("max-inflight: the 4 in flight get their own answer (%s)" % late,
        len(late) == 4 and all(s in ("allow", "deny", "error") for s in late))
c.close()

# -- a peer that never reads its ACKs ------------------------------------------------
# 300k NOTIFYs (18 MB) is more than the kernel buffers on both sides hold, so
# the sender blocks only if the agent stops reading. The NOTIFYs share their
# ids (the agent does not care; it keeps in-flight state per request).
N = 300000
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", h.agent_port))
c = spop.Conn(s)
c.hello()
time.sleep(0.2)
r0 = rss_kib(h.agent.pid)
one = spop.encode_notify(1, 1, [("ratelimit", [("policy", "transfer"), ("key", "ACC-BP")])])
data = one * N
c.sock.settimeout(3.0)
sent = 0
try:
    while sent < len(data):
        sent += c.sock.send(data[sent:sent + 65536])
except socket.timeout:
    pass
time.sleep(2.0)     # longer than frame-timeout: a half-read frame is not a stall
grown = rss_kib(h.agent.pid) - r0
print("# %d of %d bytes of NOTIFYs taken before the agent pushed back; RSS +%d KiB"
      % (sent, len(data), grown))
h.check("backpressure: the agent stopped taking NOTIFYs it could not answer (%d/%d bytes)"
        % (sent, len(data)), sent < len(data))
h.check("backpressure: agent memory stays flat (+%d KiB, bound 64 MiB)" % grown, grown < 64 * 1024)

# Read again: count ACK frames by their length prefix (decoding 300k in
# Python would be slow) while sending the rest.
c.sock.settimeout(None)
c.sock.setblocking(False)
buf = bytearray(c.buf)
acks = other = 0
deadline = time.monotonic() + 60
import select  # noqa: E402
while acks + other < N and time.monotonic() < deadline:
    want_w = [c.sock] if sent < len(data) else []
    r, w, _ = select.select([c.sock], want_w, [], 1.0)
    if w:
        try:
            sent += c.sock.send(data[sent:sent + 65536])
        except BlockingIOError:
            pass
    if r:
        try:
            chunk = c.sock.recv(1 << 20)
        except BlockingIOError:
            chunk = b"?"
        if not chunk:
            break
        if chunk != b"?":
            buf += chunk
    off = 0
    while len(buf) - off >= 9:
        n = int.from_bytes(buf[off:off + 4], "big")
        if len(buf) - off < 4 + n:
            break
        if buf[off + 4] == spop.FRAME_ACK:
            acks += 1
        else:
            other += 1
        off += 4 + n
    del buf[:off]
h.eq("backpressure: every NOTIFY got its ACK once the peer read (no DISCONNECT)", (N, 0), (acks, other))
c.close()

h.check("agent still running", h.agent.poll() is None)
with open(h.agent_log, errors="replace") as f:
    text = f.read()
h.check("no sanitizer report in the agent log",
        "AddressSanitizer" not in text and "runtime error" not in text)
h.done()
