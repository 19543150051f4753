#!/usr/bin/env python3
"""`listen unix:/path` and `metrics unix:/path` never remove what is not
theirs: a regular file or a live socket at the path is refused at boot (and
kept), a stale socket is replaced, and an agent on its way out removes its
own socket only, never one that took the path since."""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, free_port  # noqa: E402
import spop  # noqa: E402

h = Harness()
h.start_redis()
POLICY = "policy transfer 3/1s"
sock = os.path.join(h.tmp, "agent.sock")


KEYS = iter(range(1, 1 << 30))


def decides(path):
    """The status an agent on <path> answers for a fresh account."""
    try:
        c = spop.Conn().connect_unix(path)
        c.hello()
        st = c.ratelimit("ACC-UNIX-%d" % next(KEYS))["actions"]["status"]
        c.close()
        return st
    except OSError as e:
        return "error: %s" % e


def boot(listen, extra=""):
    """Start an agent that is expected to refuse to boot; its exit code and
    the last line of its log."""
    conf = os.path.join(h.tmp, "second.conf")
    with open(conf, "w") as f:
        f.write("listen %s\nredis redis://127.0.0.1:%d/0\n%s\n%s\n"
                % (listen, h.redis_port, extra, POLICY))
    log = os.path.join(h.tmp, "second.log")
    open(log, "w").close()
    p = h.spawn([AGENT, "-f", conf], log)
    try:
        rc = p.wait(15)
    except Exception:  # noqa: BLE001
        h.stop(p)
        rc = "still running"
    with open(log) as f:
        lines = f.read().splitlines()
    return rc, lines[-1] if lines else ""


# -- a regular file at the path: refused, kept ---------------------------------
with open(sock, "w") as f:
    f.write("precious\n")
rc, last = boot("unix:" + sock)
h.eq("regular file at the listen path: boot fails", 1, rc)
h.check("... saying why", "exists and is not a socket" in last, last)
h.eq("... and the file is kept", "precious\n", open(sock).read() if os.path.exists(sock) else None)
mport = free_port()
rc, last = boot("127.0.0.1:%d" % mport, "metrics unix:" + sock)
h.eq("regular file at the metrics path: boot fails", (1, "precious\n"),
     (rc, open(sock).read() if os.path.exists(sock) else None))
os.unlink(sock)

# -- a stale socket (its listener died without removing it): replaced ------------
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sock)
s.close()
h.check("stale socket left behind", os.path.exists(sock))
h.start_agent(POLICY, listen="unix:" + sock)
# the stale file is there from the start: wait for the agent to answer on it
end = time.time() + 10
while decides(sock) != "allow" and time.time() < end:
    time.sleep(0.05)
h.eq("stale socket replaced: the agent decides on it", "allow", decides(sock))
first = h.agent
ino = os.stat(sock).st_ino

# -- a second agent on the live path: refused, the first keeps its socket -------
rc, last = boot("unix:" + sock)
h.eq("second agent on a live socket: boot fails", 1, rc)
h.check("... saying it is in use", "in use by another process" in last, last)
h.eq("... the first agent's socket is still there", ino, os.stat(sock).st_ino if os.path.exists(sock) else None)
h.eq("... and still answers", "allow", decides(sock))

# -- on exit, an agent removes its own socket only ----------------------------
# someone else took the path while the first agent ran (here: a file)
os.rename(sock, sock + ".old")
with open(sock, "w") as f:
    f.write("not yours\n")
h.eq("first agent exits 0", 0, h.stop(first))
h.eq("... and leaves the path's new owner alone", "not yours\n",
     open(sock).read() if os.path.exists(sock) else None)
os.unlink(sock)
os.unlink(sock + ".old")
# the path is free: the socket exists at once, the Redis link may not be up yet
h.start_agent(POLICY, listen="unix:" + sock, ready=True)
h.eq("an agent on a free path decides", "allow", decides(sock))
h.eq("... exits 0", 0, h.stop(h.agent))
h.check("... and removes its own socket", not os.path.exists(sock))

h.done()
