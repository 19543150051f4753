"""Shared pieces of the fault-injection tests (tests/chaos/t_*): a load of
SPOP clients on one hot account that records every outcome with its send
and receive times, a watcher that keeps every member the Redis window ever
held, and the checks both feed.

Times are time.monotonic() seconds. An outcome is "allow", "deny", "error",
"none" (the connection broke before an ACK: HAProxy answers 503) or
"invalid:<what>" (anything that is not an ACK with a status).
"""
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import spop  # noqa: E402

DECIDED = ("allow", "deny")


class Load:
    """<nconns> threads, each with its own SPOP connection (like HAProxy
    threads), sending one NOTIFY at a time for <key> on <policy>, and
    reconnecting at once when the agent goes away."""

    def __init__(self, port, key, policy="transfer", nconns=3):
        self.port = port
        self.key = key
        self.policy = policy
        self.nconns = nconns
        self.log = []               # (t_send, t_recv, outcome, reason)
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.threads = []

    def _record(self, t0, outcome, reason=None):
        with self.lock:
            self.log.append((t0, time.monotonic(), outcome, reason))

    def _run(self):
        c = None
        while not self.stop_ev.is_set():
            if c is None:
                try:
                    c = spop.Conn().connect("127.0.0.1", self.port, timeout=1.0)
                    c.hello(timeout=2.0)
                except (OSError, EOFError, TimeoutError, spop.Error):
                    if c is not None:
                        c.close()
                    c = None
                    time.sleep(0.02)
                    continue
            t0 = time.monotonic()
            try:
                ack = c.ratelimit(self.key, policy=self.policy, timeout=3.0)
            except (OSError, EOFError, TimeoutError, spop.Error):
                self._record(t0, "none")
                c.close()
                c = None
                continue
            a = ack.get("actions", {})
            st = a.get("status")
            if st in ("allow", "deny", "error"):
                self._record(t0, st, a.get("reason"))
            else:
                self._record(t0, "invalid:%r" % (a,))
        if c is not None:
            c.close()

    def start(self):
        for _ in range(self.nconns):
            t = threading.Thread(target=self._run, daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(10)

    def snapshot(self):
        with self.lock:
            return list(self.log)

    def wait_decisions(self, after, n=1, timeout=10.0):
        """Seconds from <after> until <n> decisions (allow/deny) sent at or
        after <after> came back, or None if not within <timeout>."""
        end = after + timeout
        while time.monotonic() < end:
            got = [r for r in self.snapshot() if r[0] >= after and r[2] in DECIDED]
            if len(got) >= n:
                return sorted(r[1] for r in got)[n - 1] - after
            time.sleep(0.01)
        return None


class WindowWatch:
    """Polls ZRANGE <key> WITHSCORES every <period> seconds and keeps the
    union of every member seen with its score: members are unique per
    request and live a whole window, so the union is the admission history
    (minus what a killed Redis lost before a poll)."""

    def __init__(self, rcli, key, period=0.1):
        self.rcli = rcli
        self.key = key
        self.period = period
        self.members = {}
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _poll(self):
        out = self.rcli("ZRANGE", self.key, 0, -1, "WITHSCORES")
        words = out.split("\n") if out else []
        if len(words) % 2:
            return      # "Could not connect" and the like: Redis is down
        for i in range(0, len(words), 2):
            try:
                self.members[words[i]] = int(float(words[i + 1]))
            except ValueError:
                return

    def _run(self):
        while not self.stop_ev.is_set():
            try:
                self._poll()
            except Exception:   # redis-cli timing out while Redis is frozen
                pass
            self.stop_ev.wait(self.period)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_ev.set()
        self.thread.join(30)
        try:
            self._poll()
        except Exception:
            pass

    def worst_window(self, window_us):
        """The most members whose scores fall in any [s, s + window)."""
        scores = sorted(self.members.values())
        worst, j = 0, 0
        for i, s in enumerate(scores):
            if j < i:
                j = i
            while j < len(scores) and scores[j] < s + window_us:
                j += 1
            worst = max(worst, j - i)
        return worst


def client_violation(log, limit, window_s):
    """A sound check from the client side: <limit>+1 allows whose whole
    send..receive spans fit inside one window prove an over-admission
    (Redis decided each between its send and its receive). Returns the
    offending group or None."""
    allows = sorted((r for r in log if r[2] == "allow"), key=lambda r: r[1])
    for i in range(len(allows) - limit):
        grp = allows[i:i + limit + 1]
        if max(r[1] for r in grp) - min(r[0] for r in grp) < window_s:
            return grp
    return None


def allows_between(log, t_from, t_to):
    """ACKs that said allow for a request sent at or after <t_from> and
    answered at or before <t_to>: none may exist while the store is out."""
    return [r for r in log if r[2] == "allow" and r[0] >= t_from and r[1] <= t_to]


class Noise:
    """spoa-bench ($BENCH) in a loop on other accounts, so the faults hit an
    agent under load; runs of <secs> seconds, restarted when the agent dies."""

    def __init__(self, bench, port, policy="noise", secs=1):
        self.argv = [bench, "-a", "127.0.0.1:%d" % port, "-c", "2", "-d", "8", "-t",
                     "%ds" % secs, "-p", policy, "-k", "1000", "--drain-timeout", "1s",
                     "--json"]
        self.stop_ev = threading.Event()
        self.runs = 0
        self.acks = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import json
        while not self.stop_ev.is_set():
            if not os.access(self.argv[0], os.X_OK):
                return
            p = subprocess.run(self.argv, capture_output=True, text=True, timeout=30)
            self.runs += 1
            try:
                self.acks += int(json.loads(p.stdout.strip().splitlines()[-1]).get("acked", 0))
            except (ValueError, IndexError, AttributeError):
                time.sleep(0.05)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_ev.set()
        self.thread.join(40)


# ---------------------------------------------------------------------------
# Command line, for the shell tests (which start processes with tests/lib.sh)
#
#   chaoslib.py httpload URL TOKEN OUT STOPFILE [THREADS]
#       POSTs to URL with the bearer TOKEN until STOPFILE exists; one line per
#       request in OUT: "<t_send> <t_recv> <status> <RateLimit-Limit> <Retry-After>"
#       (epoch seconds; status 0 = no HTTP answer; "-" for an absent header)
#   chaoslib.py watch REDIS_PORT KEY OUT STOPFILE
#       WindowWatch until STOPFILE exists, then "<member> <score>" lines in OUT
# ---------------------------------------------------------------------------

def _httpload(url, token, out, stopfile, nthreads=2):
    import http.client
    import urllib.parse
    u = urllib.parse.urlsplit(url)
    lock = threading.Lock()
    f = open(out, "a", buffering=1)

    def run():
        while not os.path.exists(stopfile):
            t0 = time.time()
            st, lim, ra = 0, "-", "-"
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
            try:
                c.request("POST", u.path, headers={"Authorization": "Bearer " + token,
                                                   "Connection": "close"})
                r = c.getresponse()
                r.read()
                st = r.status
                lim = r.getheader("RateLimit-Limit") or "-"
                ra = r.getheader("Retry-After") or "-"
            except (OSError, http.client.HTTPException):
                time.sleep(0.01)
            finally:
                c.close()
            with lock:
                f.write("%.6f %.6f %d %s %s\n" % (t0, time.time(), st, lim, ra))

    ts = [threading.Thread(target=run, daemon=True) for _ in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    f.close()


def _watch(port, key, out, stopfile):
    def rcli(*args):
        p = subprocess.run(["redis-cli", "-p", str(port)] + [str(a) for a in args],
                           capture_output=True, text=True, timeout=5)
        return p.stdout.strip()
    w = WindowWatch(rcli, key).start()
    while not os.path.exists(stopfile):
        time.sleep(0.1)
    w.stop()
    with open(out, "w") as f:
        for m, s in w.members.items():
            f.write("%s %d\n" % (m, s))


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "httpload":
        _httpload(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5],
                  int(sys.argv[6]) if len(sys.argv) > 6 else 2)
    elif cmd == "watch":
        _watch(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    else:
        sys.exit("usage: chaoslib.py httpload URL TOKEN OUT STOPFILE [THREADS] | "
                 "watch REDIS_PORT KEY OUT STOPFILE")
