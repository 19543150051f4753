"""A minimal RESP2 client for the tests that talk to Redis without a
redis-cli process per call: one socket, pipelined calls, replies parsed
into str (bytes with raw=True) / int / list / None, an error reply as an
Err (never raised)."""
import socket


class Err(str):
    """An error reply (its text, without the '-')."""

    def __repr__(self):
        return "Err(%s)" % str.__repr__(self)


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        else:
            b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Redis:
    """<raw>: bulk strings as bytes (DUMP payloads), not decoded to str."""

    def __init__(self, port, host="127.0.0.1", timeout=30.0, raw=False):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.raw = raw

    def close(self):
        self.sock.close()

    def _fill(self):
        d = self.sock.recv(1 << 16)
        if not d:
            raise ConnectionError("redis closed the connection")
        self.buf += d

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._fill()

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return Err(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            s, self.buf = self.buf[:n], self.buf[n + 2:]
            return s if self.raw else s.decode(errors="replace")
        if t == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._reply() for _ in range(n)]
        raise ValueError("bad RESP line %r" % line)

    def pipeline(self, cmds):
        """Sends every command of <cmds> at once; their replies in order."""
        self.sock.sendall(b"".join(encode(c) for c in cmds))
        return [self._reply() for _ in cmds]

    def call(self, *args):
        return self.pipeline([args])[0]
