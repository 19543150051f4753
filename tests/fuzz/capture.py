#!/usr/bin/env python3
"""Capture real HAProxy 2.6 SPOP traffic as fuzzing seeds.

Runs redis-server, the agent ($AGENT), a recording TCP proxy and the
installed haproxy (tests/integration/haproxy/minimal.cfg) on loopback, sends
a few requests (normal accounts, a 256-byte account, no account, a burst
over the limit), then stops haproxy so it says goodbye. Every frame HAProxy
sent is written to tests/fuzz/seeds/fuzz_spop/cap26-*, and every connection's
whole byte stream (prefixed with fuzz_conn's two mode bytes) to
tests/fuzz/seeds/fuzz_conn/cap26-*.

    AGENT=build/san/ratelimit-spoa python3 tests/fuzz/capture.py
"""
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from harness import Harness, free_port, wait_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
streams = []            # (direction, bytearray) per accepted connection
lock = threading.Lock()


def pipe(src, dst, buf):
    try:
        while True:
            d = src.recv(65536)
            if not d:
                break
            with lock:
                buf.extend(d)
            dst.sendall(d)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def proxy(listener, agent_port):
    while True:
        try:
            c, _ = listener.accept()
        except OSError:
            return
        a = socket.create_connection(("127.0.0.1", agent_port))
        up = bytearray()
        with lock:
            streams.append(up)
        threading.Thread(target=pipe, args=(c, a, up), daemon=True).start()
        threading.Thread(target=pipe, args=(a, c, bytearray()), daemon=True).start()


def frames(buf):
    out, off = [], 0
    while len(buf) - off >= 4:
        n = int.from_bytes(buf[off:off + 4], "big")
        if len(buf) - off < 4 + n:
            break
        out.append(bytes(buf[off:off + 4 + n]))
        off += 4 + n
    return out


def save(dirname, prefix, data):
    d = os.path.join(HERE, "seeds", dirname)
    os.makedirs(d, exist_ok=True)
    name = "%s-%s" % (prefix, hashlib.sha1(data).hexdigest()[:12])
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    h = Harness()
    h.start_redis()
    h.start_agent("policy transfer 3/1s")
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", 0))
    lst.listen(16)
    threading.Thread(target=proxy, args=(lst, h.agent_port), daemon=True).start()

    hap_port = free_port()
    env = dict(os.environ, HAP_PORT=str(hap_port), AGENT_PORT=str(lst.getsockname()[1]),
               SPOE_CONF=os.path.join(ROOT, "tests/integration/haproxy/minimal-spoe.conf"))
    hap = subprocess.Popen(["haproxy", "-db", "-f",
                            os.path.join(ROOT, "tests/integration/haproxy/minimal.cfg")],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    h.procs.append(hap)
    if not wait_port(hap_port):
        h.fail("haproxy did not start")
        h.done()
    time.sleep(1.5)     # at least one spop-check HELLO
    keys = ["ACC-1001", "ACC-1002", "A" * 256, "ACC-\u00e9\u00e8", None] + ["ACC-BURST"] * 5
    for k in keys:
        hdr = []
        if k is not None:
            hdr = ["-H", "x-account: " + k]
        subprocess.run(["curl", "-s", "-m", "5", "-o", "/dev/null"] + hdr +
                       ["http://127.0.0.1:%d/" % hap_port], check=False)
    hap.send_signal(signal.SIGUSR1)     # soft stop: HAPROXY-DISCONNECT
    try:
        hap.wait(10)
    except subprocess.TimeoutExpired:
        hap.kill()
    time.sleep(0.3)
    nframes = 0
    with lock:
        for s in streams:
            fs = frames(s)
            for f in fs:
                save("fuzz_spop", "cap26", b"\x01" + f)
                nframes += 1
            if fs:
                save("fuzz_conn", "cap26", b"\x00\x00" + bytes(s))
                save("fuzz_conn", "cap26", b"\x02\x00" + bytes(s))
    h.check("captured frames from haproxy", nframes > 0, nframes)
    print("# %d connections, %d frames" % (len(streams), nframes))
    h.done()


if __name__ == "__main__":
    main()
