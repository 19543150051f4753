#!/usr/bin/env python3
"""A stand-in SPOP agent, written from the contract in docs/configuration.md
("HAProxy side": the message, the variables, the responses) only.

It answers the `ratelimit` message like ratelimit-spoa would, but keeps its
sliding-window log in memory (one process, no Redis). The end-to-end suite
runs the HAProxy config against it to show that haproxy/ depends on the
contract, not on one implementation.

    fake_agent.py --listen 127.0.0.1:PORT --policy transfer=3/1 --policy reads=100/60
    fake_agent.py -f agent.conf          (reads listen and policy lines, ignores the rest)

--policy NAME=LIMIT/WINDOW_SECONDS; --error REASON answers status=error for
every decision (what the real agent does when Redis is unreachable). With -f
it takes the same command line as ratelimit-spoa, so the test harness can run
it as $AGENT.
"""
import argparse
import math
import socket
import sys
import threading
import time

HELLO, DISCONNECT, NOTIFY = 1, 2, 3
AGENT_HELLO, AGENT_DISCONNECT, ACK = 101, 102, 103
T_NULL, T_BOOL, T_INT32, T_UINT32, T_INT64, T_UINT64, T_IPV4, T_IPV6, T_STR, T_BIN = range(10)
SCOPE_TXN = 2


def varint_encode(x):
    if x < 240:
        return bytes([x])
    out = [(x & 0xff) | 0xf0]
    x = (x - 240) >> 4
    while x >= 128:
        out.append((x & 0xff) | 0x80)
        x = (x - 128) >> 7
    out.append(x)
    return bytes(out)


def varint_decode(buf, i):
    b = buf[i]
    i += 1
    if b < 240:
        return b, i
    x, r = b, 4
    for _ in range(9):
        b = buf[i]
        i += 1
        x += b << r
        r += 7
        if b < 128:
            return x, i
    raise ValueError("varint too long")


def str_decode(buf, i):
    n, i = varint_decode(buf, i)
    if i + n > len(buf):
        raise ValueError("truncated string")
    return bytes(buf[i:i + n]), i + n


def typed_decode(buf, i):
    t = buf[i] & 0x0f
    flags = buf[i] >> 4
    i += 1
    if t == T_NULL:
        return None, i
    if t == T_BOOL:
        return bool(flags & 1), i
    if t in (T_INT32, T_UINT32, T_INT64, T_UINT64):
        v, i = varint_decode(buf, i)
        if t in (T_INT32, T_INT64) and v >= 1 << 63:
            v -= 1 << 64
        return v, i
    if t == T_IPV4:
        return ("ip", bytes(buf[i:i + 4])), i + 4
    if t == T_IPV6:
        return ("ip", bytes(buf[i:i + 16])), i + 16
    if t in (T_STR, T_BIN):
        return str_decode(buf, i)
    raise ValueError("bad type %d" % t)


def kv_decode(buf, i, end):
    out = {}
    while i < end:
        k, i = str_decode(buf, i)
        v, i = typed_decode(buf, i)
        out[k.decode()] = v
    return out


def enc_str(s):
    b = s.encode() if isinstance(s, str) else s
    return varint_encode(len(b)) + b


def enc_typed(v):
    if isinstance(v, int):
        return bytes([T_INT64]) + varint_encode(v & ((1 << 64) - 1))
    return bytes([T_STR]) + enc_str(v)


def frame(ftype, sid, fid, payload):
    body = bytes([ftype]) + (1).to_bytes(4, "big") + varint_encode(sid) + varint_encode(fid) + payload
    return len(body).to_bytes(4, "big") + body


class Limiter:
    def __init__(self, policies, error):
        self.policies = policies
        self.error = error
        self.logs = {}
        self.lock = threading.Lock()

    def decide(self, args):
        policy = args.get("policy")
        key = args.get("key")
        cost = args.get("cost", 1)
        if isinstance(policy, bytes):
            policy = policy.decode()
        if policy not in self.policies:
            return {"status": "error", "reason": "unknown-policy"}
        limit, window = self.policies[policy]
        if not isinstance(key, bytes) or not 1 <= len(key) <= 256:
            return {"status": "error", "reason": "bad-key"}
        if not isinstance(cost, int) or not 1 <= cost <= limit:
            return {"status": "error", "reason": "bad-cost"}
        if self.error:
            return {"status": "error", "reason": self.error}
        now = time.monotonic()
        with self.lock:
            log = [t for t in self.logs.get((policy, key), []) if t > now - window]
            if len(log) + cost <= limit:
                log.extend([now] * cost)
                self.logs[(policy, key)] = log
                reset = math.ceil(log[0] + window - now)
                return self.headers(policy, limit, window, {
                    "status": "allow", "limit": limit, "remaining": limit - len(log),
                    "reset": max(reset, 0)})
            self.logs[(policy, key)] = log
            reset = math.ceil(log[0] + window - now)
            fit = log[len(log) + cost - limit - 1]
            retry = max(1, math.ceil(fit + window - now))
            return self.headers(policy, limit, window, {
                "status": "deny", "limit": limit, "remaining": max(limit - len(log), 0),
                "reset": max(reset, 0), "retry_after": retry})

    @staticmethod
    def headers(policy, limit, window, d):
        """The contract's window, policy_hdr and ratelimit_hdr (one window)."""
        w = max(1, math.ceil(window))
        d["window"] = w
        d["policy_hdr"] = '"%s";q=%d;w=%d' % (policy, limit, w)
        d["ratelimit_hdr"] = '"%s";r=%d;t=%d' % (policy, d["remaining"], d["reset"])
        return d


def handle(conn, limiter):
    buf = b""
    try:
        while True:
            while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            n = int.from_bytes(buf[:4], "big")
            f, buf = buf[4:4 + n], buf[4 + n:]
            ftype = f[0]
            i = 5
            sid, i = varint_decode(f, i)
            fid, i = varint_decode(f, i)
            if ftype == HELLO:
                kv = kv_decode(f, i, len(f))
                caps = b"pipelining" if b"pipelining" in (kv.get("capabilities") or b"") else b""
                payload = (enc_str("version") + bytes([T_STR]) + enc_str("2.0")
                           + enc_str("max-frame-size") + bytes([T_UINT32])
                           + varint_encode(kv.get("max-frame-size", 16380))
                           + enc_str("capabilities") + bytes([T_STR]) + enc_str(caps))
                conn.sendall(frame(AGENT_HELLO, 0, 0, payload))
                if kv.get("healthcheck"):
                    return
            elif ftype == DISCONNECT:
                payload = (enc_str("status-code") + bytes([T_UINT32]) + varint_encode(0)
                           + enc_str("message") + bytes([T_STR]) + enc_str("normal"))
                conn.sendall(frame(AGENT_DISCONNECT, 0, 0, payload))
                return
            elif ftype == NOTIFY:
                actions = b""
                while i < len(f):
                    name, i = str_decode(f, i)
                    nargs = f[i]
                    i += 1
                    args = {}
                    for _ in range(nargs):
                        k, i = str_decode(f, i)
                        v, i = typed_decode(f, i)
                        args[k.decode()] = v
                    if name == b"ratelimit":
                        for k, v in limiter.decide(args).items():
                            actions += bytes([1, 3, SCOPE_TXN]) + enc_str(k) + enc_typed(v)
                if not actions:
                    actions = bytes([2, 2, SCOPE_TXN]) + enc_str("reason")
                conn.sendall(frame(ACK, sid, fid, actions))
    except (OSError, ValueError, IndexError):
        return
    finally:
        conn.close()


UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def window_seconds(text):
    num = text.rstrip("mshMSH")
    unit = text[len(num):]
    return float(num or 1) * UNITS[unit]


def load_config(path, policies):
    """listen address and policies from an agent config file."""
    listen = None
    with open(path) as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0] == "listen":
                listen = words[1]
            elif words[0] == "policy":
                limit, window = words[2].split("/", 1)
                policies[words[1]] = (int(limit), window_seconds(window))
    return listen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-f", dest="config")
    ap.add_argument("--listen")
    ap.add_argument("--redis")
    ap.add_argument("--policy", action="append", default=[])
    ap.add_argument("--error", default="")
    a = ap.parse_args()
    policies = {}
    listen = load_config(a.config, policies) if a.config else None
    a.listen = a.listen or listen
    if not a.listen:
        ap.error("no listen address")
    for p in a.policy:
        name, spec = p.split("=", 1)
        limit, window = spec.split("/", 1)
        policies[name] = (int(limit), float(window))
    host, port = a.listen.rsplit(":", 1)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, int(port)))
    srv.listen(128)
    limiter = Limiter(policies, a.error)
    print("fake agent listening on %s" % a.listen, flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(conn, limiter), daemon=True).start()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
