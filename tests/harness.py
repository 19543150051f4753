"""The Python test helpers, one module for every suite (integration, chaos,
fuzz capture): real redis-server and agent processes on loopback, ephemeral
ports, one temp dir, cleanup on exit. Only processes started here are
stopped, by PID. Not a test file itself (tests/run.sh only runs t_*.py).

    from harness import Harness
    h = Harness()
    h.start_redis()
    h.start_agent("policy transfer 3/1s")
    h.eq("what", expected, got)
    h.done()

Sections: processes and assertions (Harness, free_port, wait_port, race);
operations (a strict Prometheus text parser, scrape, log readers, polling,
SIGHUP, a Traffic thread of pipelined NOTIFYs); faults (Load on one hot
account with every outcome timed, WindowWatch, the over-admission checks,
Noise from spoa-bench); and a command line for the shell tests
(httpload, watch: see the end of the file). TLS helpers (TLSCerts) too.

TLS (a build with make WITH_TLS=1; Debian 12's redis-server has TLS):
    certs = h.tls_certs()               # CA, server and client certificates
    h.start_redis(tls=certs, auth_clients=True)
    h.start_agent(certs.agent_conf(client=True) + "policy transfer 3/1s")
"""
import atexit
import http.client
import math
import os
import re
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
import spop  # noqa: E402

AGENT = os.environ.get("AGENT", os.path.join(ROOT, "spoa", "ratelimit-spoa"))
# The server every test starts (REDIS_SERVER=build/redis-8/redis-server: the
# module's tests on Redis 8 / Valkey 9, make check-module-servers), and the
# module (make module): the production build and the one with the test
# clock (module/ratelimit-test.so, never for production).
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
MODULE_SO = os.environ.get("RATELIMIT_MODULE", os.path.join(ROOT, "module", "ratelimit.so"))
MODULE_TEST_SO = os.environ.get("RATELIMIT_MODULE_TEST",
                                os.path.join(ROOT, "module", "ratelimit-test.so"))
# How long a redis-server may take to listen (make valgrind-module: longer).
REDIS_START_SECS = float(os.environ.get("REDIS_START_SECS", "10"))
# The whole suite on one engine: SPOA_TEST_REDIS_ENGINE=module (or script,
# auto) adds "redis-engine <it>" to every agent config the harness writes
# and, for module and auto, loads the module into every redis-server it
# starts (make integration-module).
FORCED_ENGINE = os.environ.get("SPOA_TEST_REDIS_ENGINE", "")
# `make tsan` runs every agent with this many worker threads (see threads()).
FORCED_THREADS = os.environ.get("SPOA_TEST_THREADS")
# The exit status a ThreadSanitizer report gives the agent (make tsan).
TSAN_EXIT = 66


def threads(n):
    """The worker count an agent started with "threads <n>" really has."""
    return int(FORCED_THREADS) if FORCED_THREADS else n


def force_threads(text):
    """<text> (a config) with its threads line set to SPOA_TEST_THREADS, and
    a redis-engine line from SPOA_TEST_REDIS_ENGINE (see FORCED_ENGINE)
    where the test did not choose one."""
    if FORCED_ENGINE and not re.search(r"(?m)^redis-engine ", text):
        text = text.rstrip("\n") + "\nredis-engine %s\n" % FORCED_ENGINE
    if not FORCED_THREADS:
        return text
    text = re.sub(r"(?m)^threads \d+\n?", "", text)
    return text.rstrip("\n") + "\nthreads %s\n" % FORCED_THREADS


def module_args(extra=()):
    """--loadmodule for the servers the harness starts when the suite runs
    on the module (SPOA_TEST_REDIS_ENGINE=module or auto), unless <extra>
    loads one already."""
    if FORCED_ENGINE in ("module", "auto") and "--loadmodule" not in extra:
        return ["--loadmodule", MODULE_SO]
    return []


def engine_commands():
    """INFO commandstats names of the decision command the agents send under
    this run: the module's RATELIMIT.DECIDE when the suite runs on the module
    (SPOA_TEST_REDIS_ENGINE=module, or auto on the servers the harness loads
    it into), the script's EVALSHA + EVAL otherwise."""
    if FORCED_ENGINE in ("module", "auto"):
        return ("cmdstat_ratelimit.decide",)
    return ("cmdstat_evalsha", "cmdstat_eval")


def engine_calls(commandstats, names=None):
    """Decision calls Redis ran, summed from <commandstats> (the text of
    INFO commandstats) over <names> (default engine_commands())."""
    names = names or engine_commands()
    n = 0
    for line in commandstats.splitlines():
        name = line.split(":", 1)[0]
        if name in names and "calls=" in line:
            n += int(line.split("calls=")[1].split(",")[0])
    return n


def redis_server_argv(port, tmp, extra=(), module=True):
    """argv of a plain redis-server on 127.0.0.1:<port> (no persistence, its
    files in <tmp>) plus <extra>, with the module loaded when the suite runs
    on it (module_args; <module> False: never): for tests that start their
    own servers."""
    return [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", tmp] + list(extra) + (module_args(extra) if module else [])


def rcli(port, *args, user=None):
    """redis-cli against 127.0.0.1:<port> (as ACL <user> = (name, password)
    when given); its output, stripped."""
    auth = ["--user", user[0], "--pass", user[1], "--no-auth-warning"] if user else []
    return subprocess.run(["redis-cli", "-p", str(port)] + auth + [str(a) for a in args],
                          capture_output=True, text=True, timeout=30).stdout.strip()


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


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=60)


class TLSCerts:
    """A test CA, a server certificate for <names> and <ips> (loopback by
    default), a client certificate (mutual TLS), and a second CA that signed
    none of them (the "wrong CA"), made with openssl in <directory>.
    EC P-256 keys: quick to generate on a shared box."""

    def __init__(self, directory, names=("localhost",), ips=("127.0.0.1", "::1")):
        os.makedirs(directory, exist_ok=True)
        self.dir = directory
        p = lambda n: os.path.join(directory, n)  # noqa: E731
        self.ca, self.ca_key = p("ca.pem"), p("ca.key")
        self.other_ca, other_key = p("other-ca.pem"), p("other-ca.key")
        self.server_cert, self.server_key = p("server.pem"), p("server.key")
        self.client_cert, self.client_key = p("client.pem"), p("client.key")
        for cert, key, cn in ((self.ca, self.ca_key, "ratelimit-spoa test CA"),
                              (self.other_ca, other_key, "some other CA")):
            openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=" + cn)
        san = ",".join(["DNS:" + n for n in names] + ["IP:" + i for i in ips])
        self._leaf(self.server_cert, self.server_key, "redis-server", san, "serverAuth,clientAuth")
        self._leaf(self.client_cert, self.client_key, "ratelimit-spoa", None, "clientAuth")
        for key in (self.server_key, self.client_key, self.ca_key, other_key):
            os.chmod(key, 0o600)

    def _leaf(self, cert, key, cn, san, usage):
        csr = cert + ".csr"
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=" + cn)
        ext = cert + ".ext"
        with open(ext, "w") as f:
            f.write("extendedKeyUsage=%s\n" % usage)
            if san:
                f.write("subjectAltName=%s\n" % san)
        openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key,
                "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext)

    def redis_args(self, port, auth_clients=False):
        """redis-server arguments: TLS only on <port> (--port 0)."""
        return ["--port", "0", "--tls-port", str(port),
                "--tls-cert-file", self.server_cert, "--tls-key-file", self.server_key,
                "--tls-ca-cert-file", self.ca,
                "--tls-auth-clients", "yes" if auth_clients else "no"]

    def cli_args(self):
        """redis-cli arguments to reach a TLS redis-server."""
        return ["--tls", "--cacert", self.ca, "--cert", self.client_cert, "--key", self.client_key]

    def agent_conf(self, client=False, ca=None, server_name=None, verify=None):
        """redis-tls-* lines for the agent's config."""
        lines = ["redis-tls-ca %s" % (ca or self.ca)]
        if client:
            lines += ["redis-tls-cert %s" % self.client_cert, "redis-tls-key %s" % self.client_key]
        if server_name:
            lines.append("redis-tls-server-name %s" % server_name)
        if verify is not None:
            lines.append("redis-tls-verify %s" % verify)
        return "\n".join(lines) + "\n"


def agent_tls():
    """Whether the agent under test was built with TLS (its --version)."""
    out = subprocess.run([AGENT, "--version"], capture_output=True, text=True, timeout=10)
    return "tls: yes" in out.stdout


def rss_kib(pid):
    """Resident memory of process <pid> in KiB (-1 if unknown)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


class Harness:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="rlspoa.")
        self.procs = []
        self.passed = 0
        self.failed = 0
        self.redis = None
        self.redis_port = None
        self.redis_tls = None                  # TLSCerts when Redis speaks TLS
        self.redis_host = "127.0.0.1"          # what the agent's URL names
        self._certs = None
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

    def spawn_redis(self, name, extra=(), module=True):
        """A redis-server of the test's own on a free port, logging to
        redis-<name>.log in the temp dir (redis_server_argv: <module> False
        for a test that chooses what Redis loads); returns the port."""
        port = free_port()
        self.spawn(redis_server_argv(port, self.tmp, extra, module),
                   os.path.join(self.tmp, "redis-%s.log" % name))
        if not wait_port(port, REDIS_START_SECS):
            raise RuntimeError("redis %s did not start" % name)
        return port

    def tls_certs(self):
        """The test's TLSCerts (made once, in its temp dir)."""
        if self._certs is None:
            self._certs = TLSCerts(os.path.join(self.tmp, "tls"))
        return self._certs

    def start_redis(self, port=None, tls=None, auth_clients=False, extra=()):
        """redis-server on loopback; with <tls> (TLSCerts) TLS only, client
        certificates required when <auth_clients>; <extra>: more arguments
        (e.g. --loadmodule)."""
        self.redis_port = port or self.redis_port or free_port()
        self.redis_tls = tls
        listen = tls.redis_args(self.redis_port, auth_clients) if tls else \
            ["--port", str(self.redis_port)]
        self.redis = self.spawn(
            [REDIS_SERVER] + listen + ["--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.tmp] + list(extra) + module_args(extra),
            os.path.join(self.tmp, "redis.log"))
        if not wait_port(self.redis_port, REDIS_START_SECS):
            raise RuntimeError("redis did not start")
        return self.redis

    def start_redis_node(self, port, extra=(), replicaof=None, tls=None):
        """One more redis-server on loopback <port> (a primary, or a replica
        of 127.0.0.1:<replicaof>) with the arguments <extra>; with <tls>
        (TLSCerts) TLS only, replication included. Returns the process."""
        listen = tls.redis_args(port) + ["--tls-replication", "yes"] if tls else ["--port", str(port)]
        argv = [REDIS_SERVER] + listen + ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                            "--dir", self.tmp, "--dbfilename", "dump-%d.rdb" % port]
        if replicaof:
            argv += ["--replicaof", "127.0.0.1", str(replicaof)]
        p = self.spawn(argv + list(extra) + module_args(extra), os.path.join(self.tmp, "redis-%d.log" % port))
        if not wait_port(port, REDIS_START_SECS):
            raise RuntimeError("redis %d did not start" % port)
        return p

    def start_sentinel(self, port, primary, master, extra=(), tls=None):
        """A sentinel on loopback <port> watching 127.0.0.1:<primary> as
        <master> (quorum 2, down after 1 s, failover timeout 4 s), plus the
        config lines <extra>; with <tls> (TLSCerts) it listens and talks to
        the Redis servers over TLS only."""
        conf = os.path.join(self.tmp, "sentinel-%d.conf" % port)
        with open(conf, "w") as f:
            if tls:
                f.write("port 0\ntls-port %d\ntls-cert-file %s\ntls-key-file %s\n"
                        "tls-ca-cert-file %s\ntls-auth-clients no\ntls-replication yes\n"
                        % (port, tls.server_cert, tls.server_key, tls.ca))
            else:
                f.write("port %d\n" % port)
            f.write("bind 127.0.0.1\ndir %s\n" % self.tmp)
            f.write("sentinel monitor %s 127.0.0.1 %d 2\n" % (master, primary))
            f.write("sentinel down-after-milliseconds %s 1000\n" % master)
            f.write("sentinel failover-timeout %s 4000\n" % master)
            for line in extra:
                f.write(line + "\n")
        # redis-sentinel (Debian package redis-sentinel, in DEB_PKGS) is
        # redis-server in sentinel mode: fall back to that if it is missing.
        argv = ["redis-sentinel", conf] if shutil.which("redis-sentinel") else \
            ["redis-server", conf, "--sentinel"]
        p = self.spawn(argv, os.path.join(self.tmp, "sentinel-%d.log" % port))
        if not wait_port(port):
            raise RuntimeError("sentinel %d did not start" % port)
        return p

    def stop_redis(self):
        self.stop(self.redis)
        self.redis = None

    def rcli(self, *args):
        tls = self.redis_tls.cli_args() if self.redis_tls else []
        out = subprocess.run(["redis-cli", "-p", str(self.redis_port)] + tls + [str(a) for a in args],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip()

    def units(self, key):
        """Units recorded in the window <key>: one entry per admitted request,
        its member "<cum>:<cost>[:<mark>]" in hex (lua/sliding_window.lua)."""
        members = self.rcli("ZRANGE", key, 0, -1).split()
        return sum(int(m.split(":")[1], 16) for m in members)

    def write_agent_conf(self, extra, listen=None):
        self.agent_port = self.agent_port or free_port()
        path = os.path.join(self.tmp, "agent.conf")
        with open(path, "w") as f:
            f.write("listen %s\n" % (listen or "127.0.0.1:%d" % self.agent_port))
            f.write("redis %s://%s:%d/0\n" % ("rediss" if self.redis_tls else "redis",
                                             self.redis_host, self.redis_port or 6379))
            f.write(force_threads(extra.strip() + "\n"))
        return path

    def side_agent_conf(self, name, body):
        """<name>.conf for an agent of its own beside self.agent: listen and
        metrics on free ports, then <body> as given; (path, port, metrics
        port)."""
        port, mport = free_port(), free_port()
        path = os.path.join(self.tmp, "%s.conf" % name)
        with open(path, "w") as f:
            f.write("listen 127.0.0.1:%d\nmetrics 127.0.0.1:%d\n%s" % (port, mport, body))
        return path, port, mport

    def engine_agents(self, body, warm_policy, engines=("script", "module")):
        """A mixed fleet on self.redis_port: one side agent per engine
        (redis-engine <engine>, then <body>), each past its first decision
        (a warm-up key under <warm_policy>, deleted after); {engine: SPOP
        port}."""
        import spop
        ports = {}
        for engine in engines:
            _, port, _, _ = self.spawn_side_agent(
                "agent-" + engine, "redis redis://127.0.0.1:%d/0\nredis-timeout 5s\nredis-engine %s\n%s"
                % (self.redis_port, engine, body))
            c = spop.Conn().connect("127.0.0.1", port)
            c.hello()
            key = "warmup-" + engine
            wait_for(lambda: c.ratelimit(key, policy=warm_policy, timeout=15)["actions"].get("status")
                     in ("allow", "deny"), 30)
            c.close()
            ports[engine] = port
        for k in rcli(self.redis_port, "KEYS", "*warmup-*").split():
            rcli(self.redis_port, "DEL", k)
        return ports

    def spawn_side_agent(self, name, body):
        """That agent started, logging to <name>.log; (proc, port, metrics
        port, log path) once both ports listen."""
        path, port, mport = self.side_agent_conf(name, body)
        log = os.path.join(self.tmp, "%s.log" % name)
        p = self.spawn([AGENT, "-f", path], log)
        if not wait_port(port) or not wait_port(mport):
            raise RuntimeError("agent %s did not start" % name)
        return p, port, mport, log

    def start_agent(self, extra, listen=None, args=(), wait=True, ready=False):
        """Start the agent; with <ready>, also give it a metrics listener and
        wait until /readyz says every worker can decide (the SPOP port
        listens before the Redis links are up, so a test that counts exact
        answers must not race the first connect)."""
        if ready:
            self.metrics_port = free_port()
            extra = "metrics 127.0.0.1:%d\n%s" % (self.metrics_port, extra)
        path = self.write_agent_conf(extra, listen)
        self.agent = self.spawn([AGENT, "-f", path] + list(args), self.agent_log)
        if ready and not wait_for(lambda: _readyz(self.metrics_port), 15.0):
            raise RuntimeError("agent not ready:\n" + self.log_tail())
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
            if self.stop(p, timeout=5) == TSAN_EXIT:
                self.fail("pid %d exited %d: a ThreadSanitizer report (see its log)"
                          % (p.pid, TSAN_EXIT))
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

    def wait_until(self, what, pred, secs=20):
        """Until pred() is true (True); after <secs> a failed check (False)."""
        if wait_for(pred, secs, 0.1):
            return True
        self.fail("timed out waiting: " + what)
        return False

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

    def require_module(self):
        """End the test, failed, when module/ratelimit.so is not built
        (make module): the tests that need the module say so first."""
        if not os.path.exists(MODULE_SO):
            self.fail("module built (make module): %s missing" % MODULE_SO)
            self.done()

    def done(self):
        print("# %s: %d passed, %d failed" % (os.path.basename(sys.argv[0]), self.passed, self.failed))
        sys.exit(1 if self.failed else 0)


# ==========================================================================
# Operations: metrics, logs, polling, reload, traffic (the t_ops_* tests)
# ==========================================================================

PREFIX = "ratelimit_spoa_"

# --------------------------------------------------------------------------
# Prometheus text exposition format 0.0.4, parsed strictly
# --------------------------------------------------------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(r"^(%s)(\{(.*)\})? (\S+)$" % _NAME)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"')
_VALUE = re.compile(r"^(-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|[+-]Inf|NaN)$")
_HELP = re.compile(r"^# HELP (%s) (\S.*)$" % _NAME)
_TYPE = re.compile(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % _NAME)


class FormatError(Exception):
    pass


def _labels(text, line):
    """'a="x",b="y"' -> {"a": "x", "b": "y"}; anything else raises."""
    out = {}
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            raise FormatError("bad labels in %r" % line)
        name = m.group(1)
        if name in out:
            raise FormatError("label %s twice in %r" % (name, line))
        out[name] = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                raise FormatError("bad labels in %r" % line)
            pos += 1
    return out


def _le(v):
    return math.inf if v == "+Inf" else float(v)


def parse(text):
    """Parse <text> strictly. Returns (samples, types): samples maps
    (name, frozenset(labels.items())) -> float, types maps family -> type.

    Checks: the text ends with a newline and has no blank line; every
    family has # HELP then # TYPE, once, before its samples, which follow
    contiguously; every sample line is `name{labels} value`; no sample
    twice; counters are >= 0; histograms have cumulative buckets ending in
    le="+Inf", with _sum and a _count equal to the +Inf bucket."""
    if not text.endswith("\n"):
        raise FormatError("text does not end with a newline")
    samples, types, helps, done = {}, {}, set(), set()
    current = pending_help = None
    hist = {}       # (family, labels without le) -> {"buckets": [(le, v)], "sum", "count"}
    for line in text[:-1].split("\n"):
        if line == "":
            raise FormatError("blank line")
        if line.startswith("#"):
            m = _HELP.match(line)
            if m:
                fam = m.group(1)
                if fam in helps or fam in done:
                    raise FormatError("HELP for %s twice" % fam)
                if current is not None:
                    done.add(current)
                helps.add(fam)
                current = None
                pending_help = fam
                continue
            m = _TYPE.match(line)
            if m:
                fam = m.group(1)
                if fam in types:
                    raise FormatError("TYPE for %s twice" % fam)
                if fam not in helps or pending_help != fam:
                    raise FormatError("TYPE for %s without its HELP just before" % fam)
                types[fam] = m.group(2)
                current = fam
                continue
            raise FormatError("unexpected comment %r" % line)
        m = _SAMPLE.match(line)
        if not m:
            raise FormatError("not a sample line: %r" % line)
        name, lbl, value = m.group(1), m.group(3), m.group(4)
        if not _VALUE.match(value):
            raise FormatError("bad value in %r" % line)
        if current is None:
            raise FormatError("sample %r outside a declared family" % line)
        ftype = types[current]
        suffix = name[len(current):] if name.startswith(current) else None
        if suffix is None or (suffix and not (ftype == "histogram" and suffix in ("_bucket", "_sum", "_count"))):
            raise FormatError("sample %s does not belong to family %s" % (name, current))
        labels = _labels(lbl, line) if lbl else {}
        key = (name, frozenset(labels.items()))
        if key in samples:
            raise FormatError("sample twice: %r" % line)
        v = float(value)
        samples[key] = v
        if ftype == "counter" and v < 0:
            raise FormatError("negative counter: %r" % line)
        if ftype == "histogram":
            base = frozenset((k, x) for k, x in labels.items() if k != "le")
            h = hist.setdefault((current, base), {"buckets": [], "sum": None, "count": None})
            if suffix == "_bucket":
                if "le" not in labels:
                    raise FormatError("bucket without le: %r" % line)
                h["buckets"].append((_le(labels["le"]), v))
            elif suffix == "_sum":
                h["sum"] = v
            else:
                h["count"] = v
    for (fam, _), h in hist.items():
        b = h["buckets"]
        if not b or b[-1][0] != math.inf:
            raise FormatError("%s: buckets do not end with le=\"+Inf\"" % fam)
        for (le0, v0), (le1, v1) in zip(b, b[1:]):
            if not le1 > le0:
                raise FormatError("%s: le not increasing" % fam)
            if v1 < v0:
                raise FormatError("%s: buckets not cumulative" % fam)
        if h["sum"] is None or h["count"] is None:
            raise FormatError("%s: _sum or _count missing" % fam)
        if h["count"] != b[-1][1]:
            raise FormatError("%s: _count %s != +Inf bucket %s" % (fam, h["count"], b[-1][1]))
    for fam in helps:
        if fam not in types:
            raise FormatError("HELP without TYPE for %s" % fam)
    return samples, types


def fetch(port, path="/metrics", method="GET", timeout=5.0):
    """One HTTP request to 127.0.0.1:<port>: (status, headers dict, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        c.close()


class Metrics:
    """One parsed scrape. m.get("decisions_total", policy="transfer",
    status="allow") -> value, or None when the series is absent."""

    def __init__(self, text):
        self.text = text
        self.samples, self.types = parse(text)

    def get(self, name, **labels):
        return self.samples.get((PREFIX + name, frozenset(labels.items())))

    def series(self, name):
        return {dict(k[1]).get("policy", ""): v for k, v in self.samples.items()
                if k[0] == PREFIX + name}


def scrape(port):
    status, headers, body = fetch(port)
    if status != 200:
        raise FormatError("GET /metrics answered %d" % status)
    ctype = headers.get("content-type", "")
    if not ctype.startswith("text/plain") or "version=0.0.4" not in ctype:
        raise FormatError("content-type %r" % ctype)
    return Metrics(body)


def _readyz(port):
    try:
        return fetch(port, "/readyz")[0] == 200
    except OSError:
        return False


def wait_ready(port, workers, timeout=15.0):
    """Until the metrics endpoint on <port> answers and <workers> threads
    are connected to Redis (the SPOP port listens a little earlier)."""
    workers = threads(workers)

    def ready():
        try:
            return scrape(port).get("redis_connected") == workers
        except OSError:
            return False
    return wait_for(ready, timeout)


def monotonic_violations(a, b):
    """Counter samples (and histogram parts) of scrape <a> that are bigger
    than in the later scrape <b>."""
    bad = []
    for key, v in a.samples.items():
        name = key[0]
        fam = name
        for suf in ("_bucket", "_sum", "_count"):
            if name.endswith(suf) and name[:-len(suf)] in a.types:
                fam = name[:-len(suf)]
        if a.types.get(fam) not in ("counter", "histogram"):
            continue
        if key in b.samples and b.samples[key] < v:
            bad.append((name, dict(key[1]), v, b.samples[key]))
    return bad


# --------------------------------------------------------------------------
# Polling and logs
# --------------------------------------------------------------------------

def wait_for(fn, timeout=10.0, step=0.05):
    """fn() until it returns something true; that value, or the last one
    after <timeout> seconds (a bound for slow machines, not a measure)."""
    end = time.time() + timeout
    v = fn()
    while not v and time.time() < end:
        time.sleep(step)
        v = fn()
    return v

def engine_agents(h, body):
    """One agent per engine ("script", "module") on h's Redis with config
    <body> (which has "policy warm ..."), each answering: {engine: (process,
    port, metrics port)}. The warm-up's key is deleted."""
    import spop
    agents = {}
    for engine in ("script", "module"):
        p, port, mport, _ = h.spawn_side_agent(
            "agent-" + engine, "redis redis://127.0.0.1:%d/0\nredis-timeout 5s\nredis-engine %s\n%s"
            % (h.redis_port, engine, body))
        c = spop.Conn().connect("127.0.0.1", port)
        c.hello()
        wait_for(lambda: c.ratelimit("warmup", policy="warm", timeout=15)["actions"].get("status")
                 in ("allow", "deny"), 30)
        c.close()
        agents[engine] = (p, port, mport)
    h.rcli("DEL", "warm:limit:v1:{warmup}:1s")
    return agents



def replicas_caught_up(info, target):
    """True when <info> (INFO replication of a primary) lists a replica and
    every replica has acknowledged offset <target>."""
    offs = [int(kv.split("=", 1)[1]) for line in info.splitlines()
            if re.match(r"(slave|replica)\d+:", line)
            for kv in line.split(":", 1)[1].split(",") if kv.startswith("offset=")]
    return bool(offs) and min(offs) >= target


def wait_replicated(info, timeout=15.0):
    """Until every replica of a primary holds what the primary has written so
    far; <info>() returns that primary's INFO replication. WAIT from a new
    redis-cli proves nothing here: it counts acks of that connection's own
    writes, and it wrote nothing, so it answers at once. (Replicas ack once a
    second: this takes up to about 1 s.)"""
    first = info()
    m = [ln for ln in first.splitlines() if ln.startswith("master_repl_offset:")]
    if not m:
        return False
    target = int(m[0].split(":", 1)[1])
    return bool(wait_for(lambda: replicas_caught_up(info(), target), timeout, 0.1))


def statuses(port, key, n):
    """<n> decisions for <key> (default policy) on a new connection to the
    agent on <port>: their (status, reason)s."""
    c = spop.Conn().connect("127.0.0.1", port)
    c.hello()
    out = [c.ratelimit(key)["actions"] for _ in range(n)]
    c.close()
    return [(a["status"], a.get("reason")) for a in out]


def read_text(path):
    """<path>'s text ("" while it does not exist)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def log_text(h):
    return read_text(h.agent_log)


def log_count(h, needle):
    return log_text(h).count(needle)


def wait_log(h, needle, count=1, timeout=10.0):
    """Until the agent log holds <needle> at least <count> times."""
    return wait_for(lambda: log_count(h, needle) >= count, timeout)


def hup(h, needle="event=config_applied", workers=1, timeout=10.0):
    """SIGHUP the agent and wait until every worker applied it (or, for a
    rejected file, until the rejection is logged: pass that needle and
    workers=1)."""
    if needle == "event=config_applied":
        workers = threads(workers)
    before = log_count(h, needle)
    h.agent.send_signal(signal.SIGHUP)
    return wait_log(h, needle, before + workers, timeout)


def write_conf(h, extra, metrics_port=None):
    """Rewrite the agent's config (same listen and redis) with <extra>."""
    text = extra.strip() + "\n"
    if metrics_port:
        text = "metrics 127.0.0.1:%d\n" % metrics_port + text
    return h.write_agent_conf(text)


def version():
    with open(os.path.join(ROOT, "VERSION")) as f:
        return f.read().strip()


# --------------------------------------------------------------------------
# Traffic
# --------------------------------------------------------------------------

class Traffic(threading.Thread):
    """One connection, kept open, sending batches of <batch> pipelined
    NOTIFYs until stop(); every ACK is matched to its NOTIFY. Records
    statuses, reasons and limits seen, and anything abnormal in <errors>
    (a DISCONNECT, a closed connection, a missing ACK)."""

    def __init__(self, port, keys, policy="transfer", batch=8):
        super().__init__(daemon=True)
        self.port, self.keys, self.policy, self.batch = port, keys, policy, batch
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.sent = self.acked = 0
        self.statuses, self.reasons, self.limits = {}, {}, set()
        self.errors = []
        self.conn = spop.Conn().connect("127.0.0.1", port)
        self.conn.hello()

    def run(self):
        sid, n = 1, 0
        try:
            while not self.halt.is_set():
                ids = []
                for _ in range(self.batch):
                    key = self.keys[n % len(self.keys)]
                    n += 1
                    self.conn.send_notify(sid, 1, [("ratelimit", [("policy", self.policy), ("key", key)])])
                    ids.append(sid)
                    sid += 2
                with self.lock:
                    self.sent += len(ids)
                for s in ids:
                    a = self.conn.wait_ack(s, 1, timeout=10.0)["actions"]
                    with self.lock:
                        self.acked += 1
                        st = a.get("status")
                        self.statuses[st] = self.statuses.get(st, 0) + 1
                        if "reason" in a:
                            self.reasons[a["reason"]] = self.reasons.get(a["reason"], 0) + 1
                        if "limit" in a:
                            self.limits.add(a["limit"])
        except Exception as e:  # noqa: BLE001 - every failure is a finding
            with self.lock:
                self.errors.append("%s: %s" % (type(e).__name__, e))

    def count(self):
        with self.lock:
            return self.acked

    def stop(self):
        self.halt.set()
        self.join(30)
        extra = []
        if self.conn.frames_in:
            extra.append("unexpected frames: %r" % self.conn.frames_in)
        self.conn.close()
        return self.errors + extra


# ==========================================================================
# Faults: load on one hot account, the window watcher, the checks (chaos)
#
# Times are time.monotonic() seconds. An outcome is "allow", "deny", "error",
# "none" (the connection broke before an ACK: HAProxy answers 503) or
# "invalid:<what>" (anything that is not an ACK with a status).
# ==========================================================================

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
#   harness.py httpload URL TOKEN OUT STOPFILE [THREADS]
#       POSTs to URL with the bearer TOKEN until STOPFILE exists; one line per
#       request in OUT: "<t_send> <t_recv> <status> <RateLimit-Limit> <Retry-After>"
#       (epoch seconds; status 0 = no HTTP answer; "-" for an absent header)
#   harness.py watch REDIS_PORT KEY OUT STOPFILE
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
        sys.exit("usage: harness.py httpload URL TOKEN OUT STOPFILE [THREADS] | "
                 "watch REDIS_PORT KEY OUT STOPFILE")
