"""Test harness for integration tests written in Python: real redis-server and
agent processes on loopback, ephemeral ports, one temp dir, cleanup on exit.
Only processes started here are stopped, by PID.

    from harness import Harness
    h = Harness()
    h.start_redis()
    h.start_agent("policy transfer 3/1s")
    h.eq("what", expected, got)
    h.done()
"""
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
AGENT = os.environ.get("AGENT", os.path.join(ROOT, "spoa", "ratelimit-spoa"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, secs=10.0, host="127.0.0.1"):
    end = time.time() + secs
    while time.time() < end:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def race(connect, policy, key, conns=20, per=10, cost=None):
    """<conns> connections from <connect>() each pipeline <per> NOTIFYs for
    one <key> at once, then collect the ACKs; returns every status."""
    results = []
    lock = threading.Lock()

    def hammer():
        c = connect()
        mine = []
        args = [("policy", policy), ("key", key)]
        if cost is not None:
            args.append(("cost", cost))
        sids = range(1, 2 * per, 2)
        for sid in sids:
            c.send_notify(sid, 1, [("ratelimit", args)])
        for sid in sids:
            mine.append(c.wait_ack(sid, 1)["actions"]["status"])
        c.close()
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=hammer) for _ in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


class Harness:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="rlspoa.")
        self.procs = []
        self.passed = 0
        self.failed = 0
        self.redis = None
        self.redis_port = None
        self.agent = None
        self.agent_port = None
        self.agent_log = os.path.join(self.tmp, "agent.log")
        atexit.register(self.cleanup)
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(130))

    # -- processes ---------------------------------------------------------
    def spawn(self, argv, log):
        f = open(log, "ab")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def start_redis(self, port=None):
        self.redis_port = port or self.redis_port or free_port()
        self.redis = self.spawn(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.tmp],
            os.path.join(self.tmp, "redis.log"))
        if not wait_port(self.redis_port):
            raise RuntimeError("redis did not start")
        return self.redis

    def stop_redis(self):
        self.stop(self.redis)
        self.redis = None

    def rcli(self, *args):
        out = subprocess.run(["redis-cli", "-p", str(self.redis_port)] + [str(a) for a in args],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip()

    def write_agent_conf(self, extra, listen=None):
        self.agent_port = self.agent_port or free_port()
        path = os.path.join(self.tmp, "agent.conf")
        with open(path, "w") as f:
            f.write("listen %s\n" % (listen or "127.0.0.1:%d" % self.agent_port))
            f.write("redis redis://127.0.0.1:%d/0\n" % (self.redis_port or 6379))
            f.write(extra.strip() + "\n")
        return path

    def start_agent(self, extra, listen=None, args=(), wait=True):
        path = self.write_agent_conf(extra, listen)
        self.agent = self.spawn([AGENT, "-f", path] + list(args), self.agent_log)
        if wait:
            if listen and listen.startswith("unix:"):
                end = time.time() + 10
                while not os.path.exists(listen[5:]) and time.time() < end:
                    time.sleep(0.05)
            elif not wait_port(self.agent_port):
                raise RuntimeError("agent did not start:\n" + self.log_tail())
        return self.agent

    def stop(self, p, sig=signal.SIGTERM, timeout=10):
        if p is None or p.poll() is not None:
            return p.returncode if p else None
        try:
            os.kill(p.pid, signal.SIGCONT)
        except OSError:
            pass
        p.send_signal(sig)
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()

    def log_tail(self, n=30):
        try:
            with open(self.agent_log) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def cleanup(self):
        for p in self.procs:
            self.stop(p, timeout=5)
        if self.failed or os.environ.get("T_KEEP") == "1":
            print("# logs kept in %s" % self.tmp)
            print("# agent log tail:\n" + "".join("#   " + l + "\n" for l in self.log_tail().splitlines()))
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- assertions --------------------------------------------------------
    def ok(self, what):
        self.passed += 1
        print("ok - " + what, flush=True)

    def fail(self, what):
        self.failed += 1
        print("not ok - " + what, flush=True)

    def check(self, what, cond, detail=""):
        if cond:
            self.ok(what)
        else:
            self.fail(what + (": " + str(detail) if detail else ""))

    def eq(self, what, expected, got):
        if expected == got:
            self.ok(what)
        else:
            self.fail("%s: expected %r, got %r" % (what, expected, got))

    def done(self):
        print("# %s: %d passed, %d failed" % (os.path.basename(sys.argv[0]), self.passed, self.failed))
        sys.exit(1 if self.failed else 0)
