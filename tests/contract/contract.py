"""The decision contract (tests/contract/decisions.txt): parsed, and run
against a Redis holding both engines (the script's clocked test copy and
module/ratelimit-test.so loaded with test-clock). Used by
tests/integration/t_contract.py; tests/unit/test_contract.c reads the
same file for the agent's side.

A case, one directive a line ('#' starts a comment):
  case NAME
  clock US               Redis's time: T0 + US microseconds
  keys K...              KEYS, by short name (the same name twice: one key)
  args A...              ARGV, as sent
  before K zset M S ...  the stored state before: members and scores (us
  before K hash F V ...  after T0), bucket fields (ms after T0) and values,
  before K string V      a key of another type; "=x" is x as it stands
  before K gcra TAT FRAC a GCRA bucket: the string "<T0 + TAT us>:<FRAC>"
  before K gcra TAT FRAC MS LIMIT OWED   or "<T0 + TAT us>:<FRAC>:<MS>:<LIMIT>:<OWED>"
  before K ttl MS        (and its expiry, ms after T0)
  reply A L R RESET RETRY IDX   the reply (one line per decision of a batch)
  reply error TEXT...    an error reply: it starts with TEXT
  agent STATUS LIMIT REM RESET_S RETRY_S IDX REASON
                         what the agent decides from the reply above
                         (window_decide_reply: seconds rounded up)
  after K zset ...       the stored state after (the same forms; "after K
  after K ttl MS|none    none": no such key), every key of the case
  end
T0 is 4,000,000,000 s (year 2096): no key expires under a test."""
import os
import re

T0_S = 4000000000
T0_US = T0_S * 1000000
T0_MS = T0_S * 1000


class Case:
    def __init__(self, name, line):
        self.name, self.line = name, line
        self.clock = 0
        self.keys, self.args = [], []
        self.before, self.after = {}, {}      # short key -> (type, [items])
        self.ttl_before, self.ttl_after = {}, {}
        self.replies, self.agents = [], []

    def key(self, prefix, short):
        return "%sct:%s:%s" % (prefix, self.name, short)

    def shorts(self):
        seen = []
        for k in self.keys + list(self.before) + list(self.after):
            if k not in seen:
                seen.append(k)
        return seen


def parse(path):
    cases, cur = [], None
    for n, raw in enumerate(open(path), 1):
        line = raw.split("#", 1)[0].split()
        if not line:
            continue
        d, rest = line[0], line[1:]
        if d == "case":
            if cur is not None:  # a lost "end" would fold two cases into one
                raise ValueError("%s:%d: case %s before %s's end" % (path, n, rest[0], cur.name))
            cur = Case(rest[0], n)
            continue
        if cur is None:
            raise ValueError("%s:%d: %s outside a case" % (path, n, d))
        if d == "clock":
            cur.clock = int(rest[0])
        elif d == "keys":
            cur.keys = rest
        elif d == "args":
            cur.args = rest
        elif d in ("before", "after"):
            k, kind, items = rest[0], rest[1], rest[2:]
            if kind == "ttl":
                (cur.ttl_before if d == "before" else cur.ttl_after)[k] = \
                    None if items[0] == "none" else int(items[0])
            else:
                (cur.before if d == "before" else cur.after)[k] = (kind, items)
        elif d == "reply":
            cur.replies.append(("error", " ".join(rest[1:])) if rest[0] == "error"
                               else ("ok", [int(x) for x in rest]))
        elif d == "agent":
            cur.agents.append(rest)
        elif d == "end":
            cases.append(cur)
            cur = None
        else:
            raise ValueError("%s:%d: unknown directive %s" % (path, n, d))
    return cases


def score_abs(s):
    return s[1:] if s.startswith("=") else str(T0_US + int(s))


def field_abs(f):
    return f[1:] if f.startswith("=") else str(T0_MS + int(f))


def score_rel(s):
    try:
        v = int(s)
    except ValueError:
        return "=" + s
    return str(v - T0_US) if abs(v - T0_US) < 10 ** 13 else "=" + s


def field_rel(f):
    try:
        v = int(f)
    except ValueError:
        return "=" + f
    return str(v - T0_MS) if abs(v - T0_MS) < 10 ** 10 and str(v) == f else "=" + f


def setup_cmds(case, prefix):
    """Commands that lay down the case's state before (its keys deleted first)."""
    cmds = [["DEL"] + [case.key(prefix, k) for k in case.shorts()]]
    for k, (kind, items) in case.before.items():
        name = case.key(prefix, k)
        if kind == "zset":
            a = []
            for i in range(0, len(items), 2):
                a += [score_abs(items[i + 1]), items[i]]
            cmds.append(["ZADD", name] + a)
        elif kind == "hash":
            a = []
            for i in range(0, len(items), 2):
                a += [field_abs(items[i]), items[i + 1]]
            cmds.append(["HSET", name] + a)
        elif kind == "string":
            cmds.append(["SET", name, items[0]])
        elif kind == "gcra":
            cmds.append(["SET", name, ":".join([score_abs(items[0])] + items[1:])])
    for k, ms in case.ttl_before.items():
        if ms is not None:
            cmds.append(["PEXPIREAT", case.key(prefix, k), T0_MS + ms])
    return cmds


def set_clock_cmd(case):
    t = T0_US + case.clock
    return ["HSET", "test:clock", "s", t // 1000000, "us", t % 1000000]


def read_state(conn, case, prefix):
    """{short key: ((type, items relative), ttl relative ms or None)}."""
    out = {}
    for k in case.shorts():
        name = case.key(prefix, k)
        t, z, hh, s, exp = conn.pipeline([["TYPE", name], ["ZRANGE", name, 0, -1, "WITHSCORES"],
                                          ["HGETALL", name], ["GET", name],
                                          ["PEXPIRETIME", name]])
        if t == "zset":
            items = []
            for i in range(0, len(z), 2):
                items += [z[i], score_rel(z[i + 1])]
            st = ("zset", items)
        elif t == "hash":
            pairs = sorted(((field_rel(hh[i]), hh[i + 1]) for i in range(0, len(hh), 2)),
                           key=lambda p: (len(p[0]), p[0]))
            st = ("hash", [x for p in pairs for x in p])
        elif t == "string" and re.fullmatch(r"[0-9]+:[0-9]+(:[0-9]+:[0-9]+:[0-9]+)?", s):
            tat, rest = s.split(":", 1)
            st = ("gcra", [score_rel(tat)] + rest.split(":"))
        elif t == "string":
            st = ("string", [s])
        else:
            st = ("none", [])
        out[k] = (st, None if exp is None or exp < 0 else exp - T0_MS)
    return out


def expected_state(case):
    out = {}
    for k in case.shorts():
        st = case.after.get(k, ("none", []))
        if st[0] == "hash":
            items = st[1]
            pairs = sorted(((items[i], items[i + 1]) for i in range(0, len(items), 2)),
                           key=lambda p: (len(p[0]), p[0]))
            st = ("hash", [x for p in pairs for x in p])
        out[k] = ((st[0], list(st[1])), case.ttl_after.get(k))
    return out


def reply_matches(exp, got):
    """Does reply <got> (a resp value) match <exp> (a parsed reply line)?"""
    kind, v = exp
    if kind == "error":
        # (an error inside a batch: Redis puts "ERR " before a script's
        # nested error, WRONGTYPE or OOM included; the module's nested
        # error is Redis's own text. The agent reads both alike.)
        return isinstance(got, str) and type(got).__name__ == "Err" and \
            (got.startswith(v) or got.startswith("ERR " + v))
    return isinstance(got, list) and got == v


def replies_of(case, got):
    """The per-decision replies of <got> (a batch answers an array of them)."""
    if case.args and case.args[0] == "batch" and isinstance(got, list):
        return got
    return [got]


def clocked_script(src):
    """The script's test copy: TIME read from the hash test:clock, PEXPIRE
    counted from that clock (PEXPIREAT floor(now / 1000) + ttl); and how
    many of each were rewritten (1, 1, 1: TIME, PEXPIRE, SET's PX)."""
    s, n1 = re.subn(r"redis\.call\('TIME'\)", "redis.call('HMGET', 'test:clock', 's', 'us')", src)
    s, n2 = re.subn(r"call\('PEXPIRE', ([^,]+), ([^)]+)\)",
                    r"call('PEXPIREAT', \1, int(math.floor(now / 1000) + \2))", s)
    # (a GCRA admission's SET ... PX <ttl>)
    s, n3 = re.subn(r"'PX', (\w+)\)", r"'PXAT', int(math.floor(now / 1000) + \1))", s)
    return s, (n1, n2, n3)


def instrumented_script(src):
    """A test-only copy of the (clocked) script that records which of its
    branches ran: after every 'then' and 'else' of the code (comments
    aside) it calls __cov(<n>), which HSETs field <n> of the hash test:cov.
    Returns the copy and {n: (line number, line)} of the markers. (The
    marker is a write: the copy is for the contract's coverage only, never
    for the OOM or read-only behaviour.)"""
    out, marks, n = [], {}, 0
    for lineno, line in enumerate(src.splitlines(), 1):
        code, sep, comment = line.partition("--")
        parts = re.split(r"\b(then|else)\b", code)
        if len(parts) > 1:
            code = ""
            for i, p in enumerate(parts):
                code += p
                if p in ("then", "else") and i % 2 == 1:
                    n += 1
                    marks[n] = (lineno, line.strip())
                    code += " __cov(%d)" % n
        out.append(code + sep + comment)
    head = "local function __cov(n) redis.call('HSET', 'test:cov', n, 1) end\n"
    return head + "\n".join(out) + "\n", marks


def start_clocked_pair(h):
    """For tests of the engines on the fake clock: a primary with
    module/ratelimit-test.so loaded with test-clock, and a replica of it (a
    real redis-server without the module). Returns their resp.Redis
    connections (primary, replica); ends the test when the module is not
    built."""
    import harness
    import resp
    if not os.path.exists(harness.MODULE_TEST_SO):
        h.fail("module built (make module): %s missing" % harness.MODULE_TEST_SO)
        h.done()
    h.start_redis(extra=["--loadmodule", harness.MODULE_TEST_SO, "test-clock"])
    port = harness.free_port()
    h.start_redis_node(port, replicaof=h.redis_port)
    return resp.Redis(h.redis_port), resp.Redis(port)


def load_clocked_script(h, r):
    """The script's clocked test copy, loaded into <r>: (source, sha)."""
    import harness
    src, counts = clocked_script(open(os.path.join(harness.ROOT, "lua", "sliding_window.lua")).read())
    h.eq("script copy: TIME, PEXPIRE and SET's PX rewritten once each", (1, 1, 1), counts)
    sha = r.call("SCRIPT", "LOAD", src)
    h.check("script copy loads", isinstance(sha, str) and len(sha) == 40, sha)
    return src, sha
