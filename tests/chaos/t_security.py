#!/usr/bin/env python3
"""The threat model's guarantees (docs/security.md), each checked against
the real agent:

  listen     a non-loopback listen or metrics address is refused unless
             allow-remote-listen (SPOP has no authentication)
  secrets    the Redis password works but never shows in argv
             (/proc/<pid>/cmdline), the log (debug level) or /metrics
  keys       whatever bytes the key holds, the only Redis keys written are
             exactly "<policy>:limit:v1:{<tag>}:<window>" (and, for an
             upgrade, "<policy>:limit:v1:<key>"): no other key touched, no
             Lua or RESP injection, no escape from the prefix; keys that
             are empty, too long, NULL or an address are refused
"""
import os
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, free_port, wait_port  # noqa: E402
import ipaddress  # noqa: E402
import spop  # noqa: E402

SECRET = "Pw-7f3a9c-s3cr3t"
h = Harness()


# -- listen: loopback or unix unless allowed ----------------------------------------
def check_conf(text):
    path = os.path.join(h.tmp, "check.conf")
    with open(path, "w") as f:
        f.write(text)
    p = subprocess.run([AGENT, "-c", "-f", path], capture_output=True, text=True, timeout=10)
    return p.returncode, p.stdout + p.stderr


for addr in ("0.0.0.0:12345", "[::]:12345", "192.0.2.10:12345", "10.1.2.3:12345",
             "[::ffff:10.0.0.1]:12345", "example.com:12345"):
    rc, out = check_conf("listen %s\npolicy transfer 3/1s\n" % addr)
    h.check("listen %s refused without allow-remote-listen" % addr,
            rc == 1 and "not loopback" in out, out.strip())
rc, out = check_conf("listen 0.0.0.0:12345\nallow-remote-listen\npolicy transfer 3/1s\n")
h.check("listen 0.0.0.0 accepted with allow-remote-listen", rc == 0, out.strip())
rc, out = check_conf("listen 127.0.0.1:1\nmetrics 0.0.0.0:9102\npolicy transfer 3/1s\n")
h.check("metrics 0.0.0.0 refused without allow-remote-listen", rc == 1 and "not loopback" in out, out)
for addr in ("127.0.0.2:12345", "[::1]:12345", "localhost:12345", "unix:/run/x.sock"):
    rc, out = check_conf("listen %s\npolicy transfer 3/1s\n" % addr)
    h.check("listen %s accepted (loopback or unix)" % addr, rc == 0, out.strip())
p = subprocess.run([AGENT, "-c", "--listen", "0.0.0.0:1"], capture_output=True, text=True, timeout=10)
h.check("--listen 0.0.0.0 refused as well", p.returncode == 1, p.stdout + p.stderr)
# A real start on a public address fails before listening.
port = free_port()
path = os.path.join(h.tmp, "remote.conf")
with open(path, "w") as f:
    f.write("listen 0.0.0.0:%d\npolicy transfer 3/1s\n" % port)
p = subprocess.run([AGENT, "-f", path], capture_output=True, text=True, timeout=10)
h.check("the agent does not start on 0.0.0.0 (exit 1, nothing listening)",
        p.returncode == 1 and not wait_port(port, 0.3), p.stderr)

# -- secrets: a password-protected Redis ----------------------------------------------
h.redis_port = free_port()
h.redis = h.spawn(["redis-server", "--port", str(h.redis_port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", h.tmp, "--requirepass", SECRET],
                  os.path.join(h.tmp, "redis.log"))
wait_port(h.redis_port)
mport = free_port()
h.write_agent_conf("log-level debug\nmetrics 127.0.0.1:%d\npolicy transfer 3/1s\n" % mport)
conf = os.path.join(h.tmp, "agent.conf")
with open(conf) as f:
    text = f.read().replace("redis://127.0.0.1", "redis://:%s@127.0.0.1" % SECRET)
with open(conf, "w") as f:
    f.write(text)
h.agent = h.spawn([AGENT, "-f", conf], h.agent_log)
wait_port(h.agent_port)


def rcli(*args):
    p = subprocess.run(["redis-cli", "-p", str(h.redis_port), "--no-auth-warning", "-a", SECRET] +
                       [str(a) for a in args], capture_output=True, text=True, timeout=10)
    return p.stdout.strip()


c = None
status = None
end = time.monotonic() + 10
while time.monotonic() < end and status != "allow":
    try:
        c = c or spop.Conn().connect("127.0.0.1", h.agent_port)
        if c.agent_hello is None:
            c.hello()
        status = c.ratelimit("ACC-SEC")["actions"].get("status")
    except (OSError, EOFError, spop.Error):
        c = None
    if status != "allow":
        time.sleep(0.1)
h.eq("the password from the config file authenticates (a decision is made)", "allow", status)
with open("/proc/%d/cmdline" % h.agent.pid, "rb") as f:
    cmdline = f.read()
h.check("the password is not in the agent's argv", SECRET.encode() not in cmdline)
try:
    metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5).read().decode()
except OSError as e:
    metrics = "unreachable: %r" % e
h.check("the password is not in /metrics", SECRET not in metrics and "ratelimit_spoa" in metrics,
        metrics[:200])

# -- keys stay inside their prefix -----------------------------------------------------
rcli("SET", "canary", "alive")
keys = [
    b"*", b"?", b"[a-z]", b"{ACC}", b"ACC-1\r\nFLUSHALL\r\n", b"a:b:c", b"../../etc/passwd",
    b"x\") redis.call('FLUSHALL') --", b"]] redis.call('DEL','canary') --[[", b"\x00\xff\x01binary",
    "\u00e9\u4e2d\u6587".encode(), b" ", b"%s%n%x", b"K" * 256, b"reads:limit:v1:ACC-1",
]
answers = []
for k in keys:
    a = c.notify([("ratelimit", [("policy", "transfer"), ("key", k)])])["actions"]
    answers.append(a.get("status"))
h.eq("every odd key is decided like any other (allow)", ["allow"] * len(keys), answers)


def redis_keys():
    """KEYS * with exact bytes (redis-cli would escape them)."""
    s = socket.create_connection(("127.0.0.1", h.redis_port), timeout=5)

    def cmd(*parts):
        s.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
    cmd(b"AUTH", SECRET.encode())
    cmd(b"KEYS", b"*")
    buf = b""
    while True:
        buf += s.recv(65536)
        try:
            rest = buf.split(b"\r\n", 1)[1]          # after +OK
            n = int(rest.split(b"\r\n", 1)[0][1:])
            body = rest.split(b"\r\n", 1)[1]
            out = []
            for _ in range(n):
                ln, body = body.split(b"\r\n", 1)
                ln = int(ln[1:])
                if len(body) < ln + 2:
                    raise ValueError
                out.append(body[:ln])
                body = body[ln + 2:]
            s.close()
            return set(out)
        except (IndexError, ValueError):
            continue


def key_forms(k):
    """Its window's key "<policy>:limit:v1:{<tag>}:1s" ('}' and '%' escaped),
    and the 1.0.x key an agent writes beside it for an upgrade (never for a
    key starting with '{': that could be another account's window key)."""
    tag = k.replace(b"%", b"%25").replace(b"}", b"%7D")
    forms = {b"transfer:limit:v1:{" + tag + b"}:1s"}
    if not k.startswith(b"{"):
        forms.add(b"transfer:limit:v1:" + k)
    return forms


want = set().union(*(key_forms(k) for k in keys + [b"ACC-SEC"])) | {b"canary"}
h.eq("Redis holds exactly the keys of each key's window (and their 1.0.x form), and the canary",
     sorted(want), sorted(redis_keys()))
h.eq("the canary survived every injection attempt", "alive", rcli("GET", "canary"))
for what, args in (("an empty key", [("key", "")]), ("a 257-byte key", [("key", "K" * 257)]),
                   ("a NULL key (missing sample)", [("key", None)]),
                   ("an IPv4 key (the client address)", [("key", ipaddress.IPv4Address("10.0.0.1"))]),
                   ("no key at all", [])):
    a = c.notify([("ratelimit", [("policy", "transfer")] + args)])["actions"]
    h.eq("%s: error bad-key" % what, ("error", "bad-key"), (a.get("status"), a.get("reason")))
a = c.notify([("ratelimit", [("policy", "transfer:limit:v1:x"), ("key", "ACC-1")])])["actions"]
h.eq("a policy name that is not configured: error unknown-policy", ("error", "unknown-policy"),
     (a.get("status"), a.get("reason")))
h.eq("refused requests wrote nothing", sorted(want), sorted(redis_keys()))
c.close()

h.stop(h.agent)
with open(h.agent_log, errors="replace") as f:
    log = f.read()
h.check("the agent logged at debug level", " level=debug " in log)
h.check("the password is not in the log", SECRET not in log)
h.done()
