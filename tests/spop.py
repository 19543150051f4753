#!/usr/bin/env python3
"""spop - a small SPOP 2.0 client that plays HAProxy, for integration tests.

No dependencies beyond the standard library. See docs/protocol.md for the
byte layouts (docs/protocol.md cites the spec, HAProxy's doc/SPOE.txt section 3).

Library:

    import spop
    c = spop.Conn().connect("127.0.0.1", 12345)   # or .connect("/run/x.sock")
    hello = c.hello()                  # AGENT-HELLO as a dict
    ack = c.notify([("ratelimit", [("policy", "transfer"),
                                   ("key", "ACC-1001"), ("cost", 1)])])
    ack["actions"]                     # {"status": "allow", "limit": 3, ...}
    c.disconnect()                     # HAPROXY-DISCONNECT, reads the reply
    c.close()

Python values map to SPOP types: None -> NULL, bool -> BOOL, int -> INT64
(what HAProxy sends for every integer), str -> STR, bytes -> BIN,
ipaddress.IPv4Address -> IPV4, IPv6Address -> IPV6; spop.Typed(T_UINT32, 5)
forces a type.

Command line (handy for demos):

    python3 tests/spop.py --port 12345 policy=transfer key=ACC-1001 [cost=1]
    python3 tests/spop.py --port 12345 policy=transfer key:ipv4=10.0.0.1
    python3 tests/spop.py --port 12345 --healthcheck
    python3 tests/spop.py --selftest          # decodes tests/vectors

prints the ACK's variables as name=value lines.
"""

import argparse
import ipaddress
import os
import select
import socket
import struct
import sys
import threading
import time
import uuid

# Frame types (spec 3.2.2).
FRAME_UNSET = 0
FRAME_HAPROXY_HELLO = 1
FRAME_HAPROXY_DISCONNECT = 2
FRAME_NOTIFY = 3
FRAME_AGENT_HELLO = 101
FRAME_AGENT_DISCONNECT = 102
FRAME_ACK = 103
FRAME_NAMES = {
    FRAME_UNSET: "UNSET",
    FRAME_HAPROXY_HELLO: "HAPROXY-HELLO",
    FRAME_HAPROXY_DISCONNECT: "HAPROXY-DISCONNECT",
    FRAME_NOTIFY: "NOTIFY",
    FRAME_AGENT_HELLO: "AGENT-HELLO",
    FRAME_AGENT_DISCONNECT: "AGENT-DISCONNECT",
    FRAME_ACK: "ACK",
}

FLAG_FIN = 0x1
FLAG_ABORT = 0x2

# Typed data (spec 3.1): type in the low nibble, flags in the high one.
T_NULL, T_BOOL, T_INT32, T_UINT32, T_INT64, T_UINT64 = 0, 1, 2, 3, 4, 5
T_IPV4, T_IPV6, T_STR, T_BIN = 6, 7, 8, 9
TYPE_NAMES = {
    "null": T_NULL, "bool": T_BOOL, "int32": T_INT32, "uint32": T_UINT32,
    "int": T_INT64, "int64": T_INT64, "uint64": T_UINT64, "ipv4": T_IPV4,
    "ipv6": T_IPV6, "str": T_STR, "bin": T_BIN,
}

# Actions (spec 3.4) and variable scopes.
ACT_SET_VAR = 1
ACT_UNSET_VAR = 2
SCOPES = ["proc", "sess", "txn", "req", "res"]

# Status codes (spec 3.5).
STATUS = {
    0: "normal", 1: "I/O error", 2: "a timeout occurred",
    3: "frame is too big", 4: "invalid frame received",
    5: "version value not found", 6: "max-frame-size value not found",
    7: "capabilities value not found", 8: "unsupported version",
    9: "max-frame-size too big or too small",
    10: "payload fragmentation is not supported",
    11: "invalid interlaced frames", 12: "frame-id not found",
    13: "resource allocation error", 99: "an unknown error occurred",
}

VARINT_MAX_LEN = 10
U64 = (1 << 64) - 1


class Error(Exception):
    """A malformed frame or an unexpected answer. <frame> when one came."""

    def __init__(self, msg, frame=None):
        super().__init__(msg)
        self.frame = frame


class Typed:
    """A value with an explicit SPOP type, e.g. Typed(T_UINT32, 16380)."""

    def __init__(self, type_, value=None):
        self.type = type_
        self.value = value

    def __repr__(self):
        return "Typed(%d, %r)" % (self.type, self.value)


# --------------------------------------------------------------------------
# Varint: HAProxy's own encoding (spec 3.1 "Peers encoding"), not LEB128.
# --------------------------------------------------------------------------

def encode_varint(v):
    if v < 0 or v > U64:
        raise ValueError("varint out of range: %r" % v)
    if v < 240:
        return bytes([v])
    out = bytearray([(v & 0xff) | 0xf0])
    v = (v - 240) >> 4
    while v >= 128:
        out.append((v & 0xff) | 0x80)
        v = (v - 128) >> 7
    out.append(v)
    return bytes(out)


def decode_varint(buf, off=0, end=None):
    """Returns (value, new offset); raises Error when truncated, over 10
    bytes, or over 64 bits."""
    end = len(buf) if end is None else end
    if off >= end:
        raise Error("truncated varint")
    v = buf[off]
    off += 1
    if v < 240:
        return v, off
    shift = 4
    for _ in range(VARINT_MAX_LEN - 1):
        if off >= end:
            raise Error("truncated varint")
        b = buf[off]
        off += 1
        v += b << shift
        if b < 0x80:
            if v > U64:
                raise Error("varint over 64 bits")
            return v, off
        shift += 7
    raise Error("varint over %d bytes" % VARINT_MAX_LEN)


# --------------------------------------------------------------------------
# Strings and typed data
# --------------------------------------------------------------------------

def _as_bytes(s):
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


def encode_str(s):
    """A bare STRING (names): varint length + bytes, no type byte."""
    b = _as_bytes(s)
    return encode_varint(len(b)) + b


def decode_bytes(buf, off, end):
    n, off = decode_varint(buf, off, end)
    if n > end - off:
        raise Error("string runs past the end")
    return bytes(buf[off:off + n]), off + n


def decode_str(buf, off, end):
    b, off = decode_bytes(buf, off, end)
    return b.decode("utf-8", "surrogateescape"), off


def _int_range(v, lo, hi, what):
    if not lo <= v <= hi:
        raise ValueError("%s out of range: %r" % (what, v))


def encode_data(value):
    """TYPED-DATA for a Python value (see the module docstring)."""
    if isinstance(value, Typed):
        t, v = value.type, value.value
        if t == T_NULL:
            return b"\x00"
        if t == T_BOOL:
            return b"\x11" if v else b"\x01"
        if t in (T_INT32, T_INT64):
            bits = 32 if t == T_INT32 else 64
            _int_range(v, -(1 << (bits - 1)), (1 << (bits - 1)) - 1, "int")
            return bytes([t]) + encode_varint(v & U64)
        if t in (T_UINT32, T_UINT64):
            _int_range(v, 0, (1 << (32 if t == T_UINT32 else 64)) - 1, "uint")
            return bytes([t]) + encode_varint(v)
        if t == T_IPV4:
            return b"\x06" + ipaddress.IPv4Address(v).packed
        if t == T_IPV6:
            return b"\x07" + ipaddress.IPv6Address(v).packed
        if t in (T_STR, T_BIN):
            return bytes([t]) + encode_str(v)
        if 0 <= t <= 15:
            # Reserved types, raw: lets tests send what the agent must refuse.
            return bytes([t]) + (_as_bytes(v) if v is not None else b"")
        raise ValueError("bad type %r" % t)
    if value is None:
        return b"\x00"
    if isinstance(value, bool):          # before int: bool is an int
        return b"\x11" if value else b"\x01"
    if isinstance(value, int):
        return encode_data(Typed(T_INT64, value))
    if isinstance(value, str):
        return b"\x08" + encode_str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"\x09" + encode_str(bytes(value))
    if isinstance(value, ipaddress.IPv4Address):
        return b"\x06" + value.packed
    if isinstance(value, ipaddress.IPv6Address):
        return b"\x07" + value.packed
    raise TypeError("no SPOP type for %r" % (value,))


def decode_data(buf, off, end):
    """Returns (type, python value, new offset)."""
    if off >= end:
        raise Error("truncated typed data")
    t = buf[off] & 0x0f
    flags = buf[off] >> 4
    off += 1
    if t == T_NULL:
        return t, None, off
    if t == T_BOOL:
        return t, bool(flags & 1), off
    if t in (T_INT32, T_INT64):
        v, off = decode_varint(buf, off, end)
        return t, v - (1 << 64) if v >> 63 else v, off
    if t in (T_UINT32, T_UINT64):
        v, off = decode_varint(buf, off, end)
        return t, v, off
    if t in (T_IPV4, T_IPV6):
        n = 4 if t == T_IPV4 else 16
        if end - off < n:
            raise Error("truncated address")
        return t, ipaddress.ip_address(bytes(buf[off:off + n])), off + n
    if t == T_STR:
        v, off = decode_str(buf, off, end)
        return t, v, off
    if t == T_BIN:
        v, off = decode_bytes(buf, off, end)
        return t, v, off
    raise Error("unknown data type %d" % t)


def encode_kv(items):
    if isinstance(items, dict):
        items = list(items.items())
    return b"".join(encode_str(k) + encode_data(v) for k, v in items)


def decode_kv(buf, off, end):
    """Returns a list of (name, type, value)."""
    out = []
    while off < end:
        name, off = decode_str(buf, off, end)
        t, v, off = decode_data(buf, off, end)
        out.append((name, t, v))
    return out


# --------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------

def encode_frame(ftype, stream_id, frame_id, payload=b"", flags=FLAG_FIN):
    body = (bytes([ftype]) + struct.pack(">I", flags) +
            encode_varint(stream_id) + encode_varint(frame_id) + payload)
    return struct.pack(">I", len(body)) + body


def encode_haproxy_hello(max_frame_size=16380, capabilities="pipelining",
                         healthcheck=False, engine_id=None, versions="2.0"):
    """HAPROXY-HELLO with HAProxy's key order (so it matches the vectors)."""
    kv = [("supported-versions", versions),
          ("max-frame-size", Typed(T_UINT32, max_frame_size)),
          ("capabilities", capabilities)]
    if healthcheck:
        kv.append(("healthcheck", True))
    if engine_id is not None:
        kv.append(("engine-id", engine_id))
    return encode_frame(FRAME_HAPROXY_HELLO, 0, 0, encode_kv(kv))


def encode_disconnect(status=0, message="normal", agent=False):
    kv = [("status-code", Typed(T_UINT32, status)), ("message", message)]
    return encode_frame(FRAME_AGENT_DISCONNECT if agent else
                        FRAME_HAPROXY_DISCONNECT, 0, 0, encode_kv(kv))


def encode_messages(messages):
    """LIST-OF-MESSAGES from [(name, [(arg, value), ...] or {arg: value})]."""
    out = bytearray()
    for name, args in messages:
        if isinstance(args, dict):
            args = list(args.items())
        if len(args) > 255:
            raise ValueError("NB-ARGS is one byte")
        out += encode_str(name) + bytes([len(args)]) + encode_kv(args)
    return bytes(out)


def encode_notify(stream_id, frame_id, messages):
    return encode_frame(FRAME_NOTIFY, stream_id, frame_id,
                        encode_messages(messages))


def encode_ack(stream_id, frame_id, actions):
    """ACK from [("set-var", scope, name, value) | ("unset-var", scope, name)];
    scope is a name ("txn") or a number. The agent's side, for tests."""
    out = bytearray()
    for act in actions:
        scope = act[1] if isinstance(act[1], int) else SCOPES.index(act[1])
        if act[0] == "set-var":
            out += bytes([ACT_SET_VAR, 3, scope]) + encode_str(act[2])
            out += encode_data(act[3])
        elif act[0] == "unset-var":
            out += bytes([ACT_UNSET_VAR, 2, scope]) + encode_str(act[2])
        else:
            raise ValueError("unknown action %r" % (act[0],))
    return encode_frame(FRAME_ACK, stream_id, frame_id, bytes(out))


def _decode_actions(buf, off, end, frame):
    raw = []
    actions = {}
    while off < end:
        if end - off < 2:
            raise Error("truncated action")
        atype, nargs = buf[off], buf[off + 1]
        off += 2
        if atype not in (ACT_SET_VAR, ACT_UNSET_VAR):
            raise Error("unknown action type %d" % atype)
        if nargs != (3 if atype == ACT_SET_VAR else 2):
            raise Error("action %d with %d args" % (atype, nargs))
        if off >= end:
            raise Error("truncated action scope")
        scope = buf[off]
        off += 1
        scope_name = SCOPES[scope] if scope < len(SCOPES) else str(scope)
        name, off = decode_str(buf, off, end)
        if atype == ACT_SET_VAR:
            t, v, off = decode_data(buf, off, end)
            raw.append(("set-var", scope_name, name, v, t))
            actions[name] = v
        else:
            raw.append(("unset-var", scope_name, name))
            actions.pop(name, None)
    frame["actions"] = actions
    frame["raw_actions"] = raw


def _list(s):
    return [x.strip() for x in s.split(",") if x.strip()]


def decode_frame(buf, max_frame_size=None):
    """Decodes the frame at the start of <buf>. Returns (frame dict, bytes
    used), or (None, 0) when <buf> does not hold a whole frame yet. Raises
    Error on a malformed frame.

    Every dict has type, type_name, flags, fin, abort, stream_id, frame_id,
    raw; then by type:
      HAPROXY-HELLO    kv, supported_versions, max_frame_size, capabilities
                       (list), healthcheck, engine_id
      AGENT-HELLO      kv, version, max_frame_size, capabilities (list)
      *-DISCONNECT     kv, status_code, message
      NOTIFY           messages: [(name, [(arg, value), ...])]
      ACK              actions: {name: value} after applying them in order
                       (unset-var removes), raw_actions: [("set-var", scope,
                       name, value, type) | ("unset-var", scope, name)]
    """
    if len(buf) < 4:
        return None, 0
    (n,) = struct.unpack(">I", bytes(buf[:4]))
    if n == 0:
        raise Error("zero-length frame")
    if max_frame_size is not None and n > max_frame_size:
        raise Error("frame of %d bytes over max %d" % (n, max_frame_size))
    if len(buf) < 4 + n:
        return None, 0
    off, end = 4, 4 + n
    if n < 5:
        raise Error("truncated frame header")
    ftype = buf[off]
    (flags,) = struct.unpack(">I", bytes(buf[off + 1:off + 5]))
    off += 5
    sid, off = decode_varint(buf, off, end)
    fid, off = decode_varint(buf, off, end)
    f = {
        "type": ftype, "type_name": FRAME_NAMES.get(ftype, str(ftype)),
        "flags": flags, "fin": bool(flags & FLAG_FIN),
        "abort": bool(flags & FLAG_ABORT), "stream_id": sid,
        "frame_id": fid, "raw": bytes(buf[:end]),
    }
    if ftype in (FRAME_HAPROXY_HELLO, FRAME_AGENT_HELLO,
                 FRAME_HAPROXY_DISCONNECT, FRAME_AGENT_DISCONNECT):
        items = decode_kv(buf, off, end)
        kv = {k: v for k, _, v in items}
        f["kv"] = kv
        f["items"] = items
        if ftype == FRAME_HAPROXY_HELLO:
            f["supported_versions"] = _list(kv.get("supported-versions", ""))
            f["max_frame_size"] = kv.get("max-frame-size")
            f["capabilities"] = _list(kv.get("capabilities", ""))
            f["healthcheck"] = kv.get("healthcheck") is True
            f["engine_id"] = kv.get("engine-id")
        elif ftype == FRAME_AGENT_HELLO:
            f["version"] = kv.get("version")
            f["max_frame_size"] = kv.get("max-frame-size")
            f["capabilities"] = _list(kv.get("capabilities") or "")
        else:
            f["status_code"] = kv.get("status-code")
            f["message"] = kv.get("message")
    elif ftype == FRAME_NOTIFY:
        msgs = []
        while off < end:
            name, off = decode_str(buf, off, end)
            if off >= end:
                raise Error("NB-ARGS past the end")
            nargs = buf[off]
            off += 1
            args = []
            for _ in range(nargs):
                an, off = decode_str(buf, off, end)
                _, av, off = decode_data(buf, off, end)
                args.append((an, av))
            msgs.append((name, args))
        f["messages"] = msgs
    elif ftype == FRAME_ACK:
        _decode_actions(buf, off, end, f)
    return f, end


# --------------------------------------------------------------------------
# Connection
# --------------------------------------------------------------------------

class Conn:
    """One SPOP connection, HAProxy's side. Not thread-safe."""

    def __init__(self, sock=None):
        self.sock = sock
        self.buf = bytearray()
        self.pending = {}           # (stream_id, frame_id) -> ACK not yet asked for
        self.agent_hello = None
        self.max_frame_size = 16380
        self.next_stream_id = 1     # 3.x style: odd, per connection
        self.frames_in = []         # non-ACK frames read while waiting for an ACK

    # -- set-up --
    def connect(self, host="127.0.0.1", port=None, timeout=5.0):
        """TCP to <host>:<port>, or a unix socket when <port> is None and
        <host> is a path (or "unix:/path")."""
        if port is None:
            return self.connect_unix(host[5:] if host.startswith("unix:") else host,
                                     timeout)
        s = socket.create_connection((host, int(port)), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._adopt(s)

    def connect_unix(self, path, timeout=5.0):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(path)
        return self._adopt(s)

    def _adopt(self, s):
        s.settimeout(None)
        self.sock = s
        return self

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- raw I/O --
    def send_raw(self, data):
        """Writes <data> as is (one sendall)."""
        self.sock.sendall(bytes(data))

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no frame from the agent in time")
        r, _, _ = select.select([self.sock], [], [], left)
        if not r:
            raise TimeoutError("no frame from the agent in time")
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed by the agent")
        self.buf += data

    def read_frame(self, timeout=5.0):
        """The next frame from the agent as a dict (see decode_frame).
        Raises TimeoutError, EOFError (closed; ConnectionResetError too), or
        Error (malformed)."""
        deadline = time.monotonic() + timeout
        while True:
            f, used = decode_frame(self.buf)
            if f is not None:
                del self.buf[:used]
                return f
            self._fill(deadline)

    def closed_by_peer(self, timeout=2.0):
        """True when the agent closes (EOF or RST) within <timeout> without
        sending anything else; frames read meanwhile are kept in frames_in."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                self.frames_in.append(self.read_frame(deadline - time.monotonic()))
        except (EOFError, ConnectionResetError):
            return True
        except TimeoutError:
            return False

    # -- protocol --
    def hello(self, capabilities=None, max_frame_size=16380, healthcheck=False,
              engine_id=None, versions="2.0", timeout=5.0, strict=True):
        """HAPROXY-HELLO, then the agent's answer. Defaults are HAProxy's:
        capabilities "pipelining" ("" on a healthcheck), an engine-id unless
        healthcheck. With <strict>, anything but an AGENT-HELLO raises
        Error (its .frame holds what came)."""
        if capabilities is None:
            capabilities = "" if healthcheck else "pipelining"
        if engine_id is None and not healthcheck:
            engine_id = str(uuid.uuid4())
        self.send_raw(encode_haproxy_hello(max_frame_size, capabilities,
                                           healthcheck, engine_id or None,
                                           versions))
        f = self.read_frame(timeout)
        if f["type"] == FRAME_AGENT_HELLO:
            self.agent_hello = f
            if isinstance(f.get("max_frame_size"), int):
                self.max_frame_size = f["max_frame_size"]
        elif strict:
            raise Error("expected AGENT-HELLO, got %s %s" %
                        (f["type_name"], f.get("kv", "")), f)
        return f

    def send_notify(self, stream_id, frame_id, messages):
        """NOTIFY with <messages> = [(name, [(arg, value), ...])]."""
        self.send_raw(encode_notify(stream_id, frame_id, messages))

    def wait_ack(self, stream_id, frame_id, timeout=5.0):
        """The ACK for (<stream_id>, <frame_id>); ACKs for other ids met on
        the way are kept for their own wait_ack(). A DISCONNECT raises Error."""
        deadline = time.monotonic() + timeout
        key = (stream_id, frame_id)
        while key not in self.pending:
            f = self.read_frame(max(0.0, deadline - time.monotonic()))
            if f["type"] == FRAME_ACK:
                self.pending[(f["stream_id"], f["frame_id"])] = f
                continue
            self.frames_in.append(f)
            if f["type"] == FRAME_AGENT_DISCONNECT:
                raise Error("agent disconnected: %s %s" %
                            (f.get("status_code"), f.get("message")), f)
        return self.pending.pop(key)

    def notify(self, messages, stream_id=None, frame_id=1, timeout=5.0):
        """send_notify + wait_ack. Without <stream_id>, the next odd one."""
        if stream_id is None:
            stream_id = self.next_stream_id
            self.next_stream_id += 2
        self.send_notify(stream_id, frame_id, messages)
        return self.wait_ack(stream_id, frame_id, timeout)

    def ratelimit(self, key, policy="transfer", cost=None, **kw):
        """The story's message: notify ratelimit(policy, key[, cost])."""
        args = [("policy", policy), ("key", key)]
        if cost is not None:
            args.append(("cost", cost))
        return self.notify([("ratelimit", args)], **kw)

    def disconnect(self, status=0, message="normal", timeout=5.0):
        """HAPROXY-DISCONNECT; returns the agent's reply frame, or None when
        it just closed."""
        self.send_raw(encode_disconnect(status, message))
        try:
            return self.read_frame(timeout)
        except (EOFError, ConnectionResetError):
            return None


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def parse_arg(text):
    """"name=value" (int-looking -> INT64, else STR) or "name:type=value"
    with type among TYPE_NAMES (null takes no value: "name:null=")."""
    if "=" not in text:
        raise ValueError("expected name=value, got %r" % text)
    name, value = text.split("=", 1)
    if ":" in name:
        name, tname = name.split(":", 1)
        if tname not in TYPE_NAMES:
            raise ValueError("unknown type %r (one of %s)" %
                             (tname, ", ".join(sorted(TYPE_NAMES))))
        t = TYPE_NAMES[tname]
        if t == T_NULL:
            return name, None
        if t == T_BOOL:
            return name, value.lower() in ("1", "true", "yes", "on")
        if t in (T_INT32, T_INT64, T_UINT32, T_UINT64):
            return name, Typed(t, int(value, 0))
        if t == T_BIN:
            return name, value.encode()
        return name, Typed(t, value)
    try:
        return name, int(value, 10)
    except ValueError:
        return name, value


def _show(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    return str(v)


def main(argv):
    ap = argparse.ArgumentParser(
        description="Send one SPOP NOTIFY (as HAProxy would) and print the "
                    "ACK's variables as name=value lines.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int)
    ap.add_argument("--unix", help="unix socket path instead of host:port")
    ap.add_argument("--message", default="ratelimit")
    ap.add_argument("--max-frame-size", type=int, default=16380)
    ap.add_argument("--no-pipelining", action="store_true")
    ap.add_argument("--healthcheck", action="store_true",
                    help="send a healthcheck HELLO, print the AGENT-HELLO")
    ap.add_argument("--count", type=int, default=1,
                    help="send the NOTIFY this many times on one connection")
    ap.add_argument("--raw", action="store_true",
                    help="print every action with its scope and type")
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("args", nargs="*", help="name=value or name:type=value")
    o = ap.parse_args(argv)

    if o.selftest:
        return selftest()
    if o.port is None and o.unix is None:
        ap.error("--port or --unix is required")
    try:
        args = [parse_arg(a) for a in o.args]
    except ValueError as e:
        ap.error(str(e))

    c = Conn()
    try:
        if o.unix:
            c.connect_unix(o.unix, o.timeout)
        else:
            c.connect(o.host, o.port, o.timeout)
        h = c.hello(capabilities="" if o.no_pipelining else None,
                    max_frame_size=o.max_frame_size,
                    healthcheck=o.healthcheck, timeout=o.timeout)
        if o.healthcheck:
            print("version=%s" % h.get("version"))
            print("max-frame-size=%s" % h.get("max_frame_size"))
            print("capabilities=%s" % ",".join(h.get("capabilities", [])))
            return 0
        for i in range(o.count):
            ack = c.notify([(o.message, args)], timeout=o.timeout)
            if o.count > 1:
                print("# %d" % (i + 1))
            if o.raw:
                for a in ack["raw_actions"]:
                    print(" ".join(_show(x) for x in a))
            else:
                for k, v in ack["actions"].items():
                    print("%s=%s" % (k, _show(v)))
        c.disconnect(timeout=o.timeout)
    except (OSError, EOFError, TimeoutError, Error) as e:
        print("spop: %s" % e, file=sys.stderr)
        return 1
    finally:
        c.close()
    return 0


# --------------------------------------------------------------------------
# Self-test: HAProxy's captured frames, varint vectors, a socket round trip
# --------------------------------------------------------------------------

VARINT_VECTORS = [
    (0, "00"), (239, "ef"), (240, "f000"), (255, "ff00"), (256, "f001"),
    (2287, "ff7f"), (2288, "f08000"), (16380, "fcf006"),
    (264431, "ffff7f"), (264432, "f0808000"), (33818864, "f080808000"),
    ((1 << 32) - 1, "fff0fefe7e"), (U64, "fff0fefefefefefefe0e"),
]


# tests/unit/test_spop.c ACK_ALLOW, what spop_ack_*() write for that ACK
ACK_ALLOW_HEX = (
    "00 00 00 57 67 00 00 00 01 00 01"
    "01 03 02 06 73 74 61 74 75 73 08 05 61 6c 6c 6f 77"
    "01 03 02 05 6c 69 6d 69 74 04 03"
    "01 03 02 09 72 65 6d 61 69 6e 69 6e 67 04 02"
    "01 03 02 05 72 65 73 65 74 04 01"
    "02 02 02 06 72 65 61 73 6f 6e"
    "01 03 00 01 6e 04 ff f0 fe fe fe fe fe fe fe 0e")


class _Tap:
    def __init__(self):
        self.n_ok = 0
        self.n_fail = 0

    def check(self, cond, what):
        if cond:
            self.n_ok += 1
            print("ok - %s" % what)
        else:
            self.n_fail += 1
            print("not ok - %s" % what)
        return cond


def _vectors_dir():
    """$VECTORS_DIR, else the repo's own copy (tests/vectors)."""
    d = os.environ.get("VECTORS_DIR")
    if d:
        return d
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors")


def _fake_agent(sock):
    """A minimal agent built from this module, to exercise Conn: AGENT-HELLO
    echoing the size, ACKs in reverse order of two pipelined NOTIFYs,
    AGENT-DISCONNECT on DISCONNECT."""
    buf = bytearray()
    held = []
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return
            buf += data
            while True:
                f, used = decode_frame(buf)
                if f is None:
                    break
                del buf[:used]
                if f["type"] == FRAME_HAPROXY_HELLO:
                    kv = [("version", "2.0"),
                          ("max-frame-size", Typed(T_UINT32, f["max_frame_size"])),
                          ("capabilities", "pipelining")]
                    sock.sendall(encode_frame(FRAME_AGENT_HELLO, 0, 0, encode_kv(kv)))
                elif f["type"] == FRAME_NOTIFY:
                    held.append(f)
                    args = dict(f["messages"][0][1]) if f["messages"] else {}
                    if args.get("hold") and len(held) < 2:
                        continue
                    for h in reversed(held):
                        a = dict(h["messages"][0][1]) if h["messages"] else {}
                        sock.sendall(encode_ack(h["stream_id"], h["frame_id"], [
                            ("set-var", "txn", "status", "allow"),
                            ("set-var", "txn", "echo", a.get("key")),
                            ("set-var", "txn", "limit", 3),
                            ("unset-var", "txn", "reason"),
                        ]))
                    held = []
                elif f["type"] == FRAME_HAPROXY_DISCONNECT:
                    sock.sendall(encode_disconnect(0, "normal", agent=True))
                    return
    finally:
        sock.close()


def selftest():
    t = _Tap()

    # 1. varints both ways, and what must be refused
    for v, h in VARINT_VECTORS:
        t.check(encode_varint(v).hex() == h and
                decode_varint(bytes.fromhex(h)) == (v, len(h) // 2),
                "varint %d <-> %s" % (v, h))
    for bad in ["f0808080808080808080 00", "f0808080808080808080",
                "fff0fefefefefefefe0f", "f0808080808080808010", "f0", ""]:
        try:
            decode_varint(bytes.fromhex(bad.replace(" ", "")))
            t.check(False, "varint %r refused" % bad)
        except Error:
            t.check(True, "varint %r refused" % bad)
    for v in list(range(0, 70000, 7)) + [(1 << k) + d for k in range(64)
                                          for d in (-1, 0, 1) if (1 << k) + d <= U64]:
        if decode_varint(encode_varint(v)) != (v, len(encode_varint(v))):
            t.check(False, "varint round trip %d" % v)
            break
    else:
        t.check(True, "varint round trips")
    t.check(encode_data(True) == b"\x11" and encode_data(False) == b"\x01",
            "bool true 0x11, false 0x01")
    t.check(encode_data(-1) == bytes.fromhex("04fff0fefefefefefefe0e") and
            decode_data(encode_data(-1), 0, 11)[1] == -1, "int64 -1")
    t.check(encode_data(ipaddress.IPv4Address("10.0.0.1")) == b"\x06\x0a\x00\x00\x01",
            "ipv4 typed data")

    # 2. HAProxy's captured frames: decode, check, re-encode byte for byte
    vdir = _vectors_dir()
    files = sorted(os.path.join(dp, fn) for dp, _, fns in os.walk(vdir)
                   for fn in fns if fn.endswith(".hex"))
    rels = [os.path.relpath(p, vdir) for p in files]
    for ver, kinds in (("haproxy-2.6", ("haproxy-hello-1", "haproxy-hello-healthcheck-1",
                                        "haproxy-disconnect-1", "notify-1", "notify-2",
                                        "notify-3")),
                       ("haproxy-3.2", ("haproxy-hello-1", "haproxy-hello-healthcheck-1",
                                        "notify-1", "notify-2", "notify-3"))):
        missing = [k for k in kinds if "%s/%s.hex" % (ver, k) not in rels]
        t.check(not missing, "vectors under %s/%s (missing: %s)"
                % (vdir, ver, " ".join(missing) or "none"))
    for path in files:
        rel = os.path.relpath(path, vdir)
        base = os.path.basename(path)
        raw = bytes.fromhex(open(path).read().strip())
        try:
            f, used = decode_frame(raw, 16380)
        except Error as e:
            t.check(False, "%s decodes (%s)" % (rel, e))
            continue
        ok = f is not None and used == len(raw) and f["fin"]
        # every strict prefix is "need more"
        ok = ok and all(decode_frame(raw[:k])[0] is None for k in range(len(raw)))
        v26 = rel.startswith("haproxy-2.6")
        if base.startswith("haproxy-hello-"):
            hc = base.startswith("haproxy-hello-healthcheck-")
            ok = ok and (f["type"] == FRAME_HAPROXY_HELLO and
                         f["supported_versions"] == ["2.0"] and
                         f["max_frame_size"] == 16380 and
                         f["healthcheck"] == hc and
                         f["capabilities"] == ([] if hc else ["pipelining"]) and
                         (f["engine_id"] is None) == hc)
            again = encode_haproxy_hello(16380, "" if hc else "pipelining", hc,
                                         f["engine_id"])
        elif base.startswith("haproxy-disconnect-"):
            ok = ok and f["status_code"] == 0 and f["message"] == "normal"
            again = encode_disconnect(0, "normal")
        elif base.startswith("notify-"):
            n = int(base[7:].split(".")[0])
            key = None if n == 3 else "ACC-100%d" % n
            msgs = [("ratelimit", [("policy", "transfer"), ("key", key),
                                   ("cost", 1)])]
            sid = 2 * (n - 1) if v26 else 2 * n - 1
            ok = ok and (f["messages"] == msgs and f["stream_id"] == sid and
                         f["frame_id"] == 1)
            again = encode_notify(sid, 1, msgs)
        else:
            again = raw
        t.check(ok, "%s decoded and checked" % rel)
        t.check(again == raw, "%s re-encoded byte for byte" % rel)

    # 3. an ACK as the C codec writes it (tests/unit/test_spop.c ACK_ALLOW)
    ack = encode_ack(0, 1, [("set-var", "txn", "status", "allow"),
                            ("set-var", "txn", "limit", 3),
                            ("set-var", "txn", "remaining", 2),
                            ("set-var", "txn", "reset", 1),
                            ("unset-var", "txn", "reason"),
                            ("set-var", "proc", "n", -1)])
    f, _ = decode_frame(ack)
    t.check(f["actions"] == {"status": "allow", "limit": 3, "remaining": 2,
                             "reset": 1, "n": -1} and
            f["raw_actions"][4] == ("unset-var", "txn", "reason") and
            ack == bytes.fromhex(ACK_ALLOW_HEX.replace(" ", "")),
            "ACK encode/decode, same bytes as the C codec's")

    # 4. malformed frames are refused
    for what, h in [("zero length", "00000000"),
                    ("NB-ARGS past the end", "0000000c 03 00000001 01 01 04 72617465"),
                    ("string past the end", "0000000b 01 00000001 00 00 20 616263"),
                    ("unknown data type", "0000000d 03 00000001 01 01 01 72 01 01 6b 0a"),
                    ("overlong varint",
                     "00000011 03 00000001 01 f0 80 80 80 80 80 80 80 80 80 00")]:
        try:
            decode_frame(bytes.fromhex(h.replace(" ", "")))
            t.check(False, "malformed frame refused: %s" % what)
        except Error:
            t.check(True, "malformed frame refused: %s" % what)

    # 5. Conn over a socketpair against a fake agent
    a, b = socket.socketpair()
    th = threading.Thread(target=_fake_agent, args=(b,), daemon=True)
    th.start()
    c = Conn(a)
    h = c.hello()
    t.check(h["type"] == FRAME_AGENT_HELLO and h["version"] == "2.0" and
            h["max_frame_size"] == 16380 and h["capabilities"] == ["pipelining"],
            "Conn.hello")
    ack = c.ratelimit("ACC-1001", cost=1)
    t.check(ack["stream_id"] == 1 and ack["actions"].get("echo") == "ACC-1001"
            and ack["actions"]["limit"] == 3, "Conn.notify")
    c.send_notify(11, 1, [("ratelimit", [("key", "A"), ("hold", True)])])
    c.send_notify(13, 1, [("ratelimit", [("key", "B"), ("hold", True)])])
    a11 = c.wait_ack(11, 1)
    a13 = c.wait_ack(13, 1)
    t.check(a11["actions"]["echo"] == "A" and a13["actions"]["echo"] == "B",
            "pipelined ACKs out of order matched by ids")
    d = c.disconnect()
    t.check(d is not None and d["type"] == FRAME_AGENT_DISCONNECT and
            d["status_code"] == 0, "Conn.disconnect")
    t.check(c.closed_by_peer(2.0), "agent closed after DISCONNECT")
    c.close()
    th.join(2.0)

    print("# spop.py selftest: %d passed, %d failed" % (t.n_ok, t.n_fail))
    return 0 if t.n_fail == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
