#!/usr/bin/env python3
"""The deny cache gives its table back: a burst of denies for 12,000
accounts fills a `deny-cache-size 65536` table (about 23 MiB mapped, most of
it touched); once every cached deadline passed (policy 1/3s), the worker's
trim unmaps it and RSS returns to within a few MiB of what it was before
(before the fix the table stayed resident until a reload). The cache still
answers denies meanwhile, and maps a new table after. And -c knows the
directive."""
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, Harness, rss_kib  # noqa: E402
import spop  # noqa: E402

BOUND = 30.0        # generous: shared 2-core machines
N = 12000
SANITIZED = "ASAN_OPTIONS" in os.environ or "TSAN_OPTIONS" in os.environ
h = Harness()

# -- -c knows deny-cache-size: a valid size passes, 0 is refused with file:line
for size, rc, text in (("4096", 0, "configuration is valid"),
                       ("0", 1, "c.conf:1: deny-cache-size must be an integer 1..1048576")):
    path = os.path.join(h.tmp, "c.conf")
    with open(path, "w") as f:
        f.write("deny-cache-size %s\npolicy d 1/3s\n" % size)
    p = subprocess.run([AGENT, "-c", "-f", path], capture_output=True, text=True, timeout=10)
    h.check("-c on deny-cache-size %s: exit %d, says '%s'" % (size, rc, text),
            p.returncode == rc and text in p.stdout + p.stderr, (p.returncode, p.stdout, p.stderr))

h.start_redis()
h.start_agent("""
threads 1
redis-timeout 5s
max-inflight 65536
deny-cache-size 65536
policy d 1/3s
""", ready=True)
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello(max_frame_size=1 << 20)
for i in range(20):
    c.ratelimit("warm%d" % i, policy="d")
time.sleep(3.5)     # the warm-up's pools trimmed, nothing cached
base = rss_kib(h.agent.pid)


def burst(tag):
    """Two requests per account, pipelined from a thread: statuses seen."""
    frames = [spop.encode_notify(2 * i + 1, 1, [("ratelimit", [("policy", "d"),
                                                              ("key", "%s%d" % (tag, i // 2))])])
              for i in range(2 * N)]
    t = threading.Thread(target=c.send_raw, args=(b"".join(frames),))
    t.start()
    seen = {}
    for i in range(2 * N):
        st = c.wait_ack(2 * i + 1, 1, BOUND)["actions"].get("status")
        seen[st] = seen.get(st, 0) + 1
    t.join(BOUND)
    return seen


seen = burst("A")
peak = rss_kib(h.agent.pid)
h.eq("%d accounts, two requests each: one allowed, one denied" % N,
     {"allow": N, "deny": N}, seen)
m = c.ratelimit("A7", policy="d")["actions"]
h.eq("a cached account is still denied", "deny", m.get("status"))
end = time.monotonic() + BOUND
after = rss_kib(h.agent.pid)
while after > base + 4096 and time.monotonic() < end:
    time.sleep(0.5)
    after = rss_kib(h.agent.pid)
print("# RSS: %d KiB before, %d KiB after %d denies, %d KiB once they expired"
      % (base, peak, N, after))
if SANITIZED:
    h.ok("RSS after the denies expired # SKIP under a sanitizer")
else:
    h.check("the burst grew RSS by the table (> 8 MiB)", peak > base + 8192, (base, peak))
    h.check("the table is given back once no entry is live (RSS within 4 MiB of before)",
            after <= base + 4096, (base, peak, after))
seen = burst("B")
h.eq("the cache serves again after (a new table)", {"allow": N, "deny": N}, seen)
h.done()
