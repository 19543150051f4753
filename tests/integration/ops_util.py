"""Helpers shared by the t_ops_*.py tests: a strict Prometheus text parser,
a scraper, log readers, polling, and a traffic thread that keeps pipelined
NOTIFYs flowing on one open connection.

Not a test file itself (tests/run.sh only runs t_*.py)."""
import http.client
import math
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import spop  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def wait_ready(port, workers, timeout=15.0):
    """Until the metrics endpoint on <port> answers and <workers> threads
    are connected to Redis (the SPOP port listens a little earlier)."""
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


def log_text(h):
    try:
        with open(h.agent_log, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def log_count(h, needle):
    return log_text(h).count(needle)


def wait_log(h, needle, count=1, timeout=10.0):
    """Until the agent log holds <needle> at least <count> times."""
    return wait_for(lambda: log_count(h, needle) >= count, timeout)


def hup(h, needle="event=config_applied", workers=1, timeout=10.0):
    """SIGHUP the agent and wait until every worker applied it (or, for a
    rejected file, until the rejection is logged: pass that needle and
    workers=1)."""
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
