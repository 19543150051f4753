#!/usr/bin/env python3
"""The module against the script (issue 21): one long random stream of
decisions fed to both, on one Redis and one fake clock, must give identical
replies and leave identical data, key TTLs included.

The stream: policies of 1-3 windows, sliding logs and bucketed windows
(precision=), and GCRA buckets (algorithm=gcra: one window, bursts 1..20,
limits that do not divide the window), limits 1..20, costs 1..limit or
burst (and now and then one above it), many accounts, single decisions and batches (an account may appear
twice in one batch), and a clock that moves by the script's own edges: the
same microsecond, 1 us later, exactly at a reply's retry_after or reset (and
1 us before), stepped back, or past every window.

The clock: the script is a copy whose TIME reads the hash test:clock (as in
t_lua.sh) and whose PEXPIRE counts from that clock (PEXPIREAT floor(now /
1000) + ttl, so that a TTL is compared to the millisecond); the module is
module/ratelimit-test.so loaded with test-clock, which reads the same hash
and sets the same absolute expiry. The fake clock runs ten years ahead of
the real one, so no key expires under the test. The script's keys start
with "s|", the module's with "m|", the rest of the name is the same.

Four streams: many keys (8 policies x 5 accounts), then one key (one
policy of one window, one account: every call on the same sorted set or
hash), then one GCRA key, then one pool (pool=: two policies, a log and a
bucketed one, of 6 accounts in one pool of 12 with headroom 4, so that
accounts reach their share and pool-share's retry walks the log as
accounts come and go). A replica (a real redis-server without the module) follows the
primary throughout: at the end it holds exactly the primary's data, both
engines' keys, TTLs included.

Knobs: DIFF_OPS=6000 (calls of the many-key stream; the one-key stream
makes a third of that), DIFF_SEED=1 (printed: rerun a failure with it)."""
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, ROOT  # noqa: E402
import resp  # noqa: E402
import harness  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "contract"))
import contract  # noqa: E402

# (these tests choose where the module is loaded: not SPOA_TEST_REDIS_ENGINE)
harness.FORCED_ENGINE = ""

OPS = int(os.environ.get("DIFF_OPS", "6000"))
SEED = int(os.environ.get("DIFF_SEED", "1"))

h = Harness()
print("# DIFF_SEED=%d DIFF_OPS=%d" % (SEED, OPS))
r, replica = contract.start_clocked_pair(h)
# The script's test copy: TIME from the fake clock, expiry counted from it.
clocked, sha = contract.load_clocked_script(h, r)
h.check("module loaded", "ratelimit" in str(r.call("MODULE", "LIST")), r.call("MODULE", "LIST"))

rnd = random.Random(SEED)
now = (int(time.time()) + 10 * 365 * 86400) * 1000000 + 123457


def set_clock(t):
    r.call("HSET", "test:clock", "s", t // 1000000, "us", t % 1000000)


def make_policy(i):
    if rnd.random() < 0.3:
        # GCRA: one window, a burst below, at or above the limit; limits
        # that do not divide the window (T not a whole us)
        limit = rnd.choice([1, 3, 7, 10, 20])
        ms = rnd.choice([333, 1000, 2000, 60000])
        burst = rnd.choice([1, 2, 3, 5, 10, 20, limit])
        return [(limit, "gcra:%d:%d" % (ms, burst), "g", burst)]
    wins = []
    for j in range(rnd.choice([1, 1, 2, 2, 3])):
        limit = rnd.choice([1, 3, 5, 10, 20, 20, 50])
        ms = rnd.choice([1000, 2000, 5000, 60000])
        if rnd.random() < 0.3:
            prec = rnd.choice([p for p in (100, 250, 1000, 5000) if p < ms])
            wins.append((limit, "%d:%d" % (ms, prec), "b", limit))
        else:
            wins.append((limit, str(ms), "v", limit))
    return wins


POLICIES = [make_policy(i) for i in range(8)]
ACCOUNTS = 5
TAG = ""          # a key-name prefix per stream
POOL = None       # (limit, ms, headroom): every decision also in this pool
SHARE = [0]       # pool-share refusals seen (a 7th element of 2)


def decision():
    """(keys without the engine prefix, args after the key count)."""
    pi = rnd.randrange(len(POLICIES))
    pol = POLICIES[pi]
    acc = rnd.randrange(ACCOUNTS)
    keys = ["%sp%d:%s%d:{acc-%d}" % (TAG, pi, kind, j, acc) for j, (_, _, kind, _) in enumerate(pol)]
    # (the largest cost that can pass: the smallest limit, a bucket's burst)
    lim = min(cap for _, _, _, cap in pol)
    x = rnd.random()
    cost = 1 if x < 0.6 else rnd.randint(1, lim) if x < 0.97 else max(c for _, _, _, c in pol) + 1
    args = [cost]
    for l, w, _, _ in pol:
        args += [l, w]
    if POOL:
        keys += ["%spool:v:{pool}" % TAG, "%spool:h:{pool}" % TAG]
        args += [POOL[0], "pool:%d:%d:acc-%d" % (POOL[1], POOL[2], acc)]
    return keys, args


def call_pair():
    """One call (a single decision or a batch) to both engines."""
    if rnd.random() < 0.5:
        keys, args = decision()
        decs = [(keys, args)]
        ks, a = keys, args
    else:
        decs = [decision() for _ in range(rnd.randint(1, 6))]
        if len(decs) > 1 and rnd.random() < 0.2:
            decs.append(decs[0])
        ks, a = [], ["batch", len(decs)]
        for keys, args in decs:
            ks += keys
            a += [len(keys)] + args
    sk = ["s|" + k for k in ks]
    mk = ["m|" + k for k in ks]
    rs, rm = r.pipeline([["EVALSHA", sha, len(sk)] + sk + a,
                         ["RATELIMIT.DECIDE", len(mk)] + mk + a])
    return ks, rs, rm


def state(prefix, keys, conn=None):
    conn = conn or r
    cmds = []
    for k in keys:
        k = prefix + k
        read = ["ZRANGE", k, 0, -1, "WITHSCORES"] if ":v" in k else \
            ["GET", k] if ":g" in k else ["HGETALL", k]
        cmds += [["TYPE", k], read, ["PEXPIRETIME", k]]
    out = conn.pipeline(cmds)
    res = []
    for i in range(0, len(out), 3):
        t, data, exp = out[i:i + 3]
        if t == "hash":
            data = sorted(zip(data[0::2], data[1::2]))
        res.append((t, data, exp))
    return res


def stream(ops):
    """<ops> random calls to both engines; the counts and the first
    difference."""
    global now
    mismatch_reply = mismatch_data = 0
    first_bad = None
    n_allow = n_deny = n_err = n_batch = 0
    last = None
    set_clock(now)
    for op in range(ops):
        # the clock, by the edges the replies name
        x = rnd.random()
        if last and x < 0.2:
            allowed, _, _, reset, retry = last[:5]
            pick = rnd.choice([retry, retry - 1, reset, reset - 1, retry + 1])
            if pick > 0:
                now += pick
        elif x < 0.35:
            pass                                  # the same microsecond
        elif x < 0.45:
            now += 1
        elif x < 0.49:
            now -= rnd.randint(1, 500000)        # stepped back
        elif x < 0.495:
            now += 61000000 + rnd.randint(0, 5000000)   # past every window
        elif x < 0.53:
            now += rnd.randint(0, 2000000)
        else:
            now += rnd.randint(0, 5000)
        set_clock(now)
        ks, rs, rm = call_pair()
        if rs != rm:
            mismatch_reply += 1
            if first_bad is None:
                first_bad = "op %d keys %s: script %r module %r" % (op, ks, rs, rm)
        replies = rm if isinstance(rm, list) and rm and isinstance(rm[0], list) else [rm]
        if len(replies) > 1 or (isinstance(rm, list) and rm and isinstance(rm[0], list)):
            n_batch += 1
        for x1 in replies:
            if isinstance(x1, resp.Err):
                n_err += 1
            elif isinstance(x1, list):
                if x1[0] == 1:
                    n_allow += 1
                else:
                    n_deny += 1
                if len(x1) == 7 and x1[6] == 2:
                    SHARE[0] += 1
                last = x1
        uniq = sorted(set(ks))
        ss, sm = state("s|", uniq), state("m|", uniq)
        if ss != sm:
            mismatch_data += 1
            if first_bad is None:
                for k, a, b in zip(uniq, ss, sm):
                    if a != b:
                        first_bad = "op %d key %s: script %r module %r" % (op, k, a, b)
                        break

    return mismatch_reply, mismatch_data, first_bad, n_allow, n_deny, n_err, n_batch


n_gcra = sum(1 for p in POLICIES if p[0][2] == "g")
h.check("the stream has GCRA policies (%d of %d) and others" % (n_gcra, len(POLICIES)),
        0 < n_gcra < len(POLICIES))
for name, ops, pols, accs, pool in (("many keys", OPS, list(POLICIES), 5, None),
                                    ("one key", max(OPS // 3, 1), [[(10, "2000", "v", 10)]], 1, None),
                                    ("one GCRA key", max(OPS // 3, 1),
                                     [[(3, "gcra:1000:5", "g", 5)]], 1, None),
                                    ("one pool", max(OPS // 3, 1),
                                     [[(8, "2000", "v", 8)], [(6, "3000:500", "b", 6)]], 6,
                                     (12, 2000, 4))):
    POLICIES[:] = pols
    ACCOUNTS = accs
    POOL = pool
    TAG = "one%d:" % len(name) if accs == 1 else "pool:" if pool else ""
    mismatch_reply, mismatch_data, first_bad, n_allow, n_deny, n_err, n_batch = stream(ops)
    print("# %s: %d calls (%d batches): %d allowed, %d denied, %d errors" %
          (name, ops, n_batch, n_allow, n_deny, n_err))
    h.eq("%s: identical replies over %d calls" % (name, ops), 0, mismatch_reply)
    h.eq("%s: identical data (members, scores, bucket fields, TTLs) after every call" % name,
         0, mismatch_data)
    if first_bad:
        print("# first difference: " + first_bad)
    h.check("%s: the stream allowed and denied (%d / %d)" % (name, n_allow, n_deny),
            n_allow > ops // 4 and n_deny > ops // 10)
    h.eq("%s: no decision errored (a cost above a limit is a deny)" % name, 0, n_err)
    if pool:
        h.check("%s: the pool refused for the share (%d), its retry walked" % (name, SHARE[0]),
                SHARE[0] > ops // 20)

# Every key of both engines, at the end: same names, same contents.
sk = sorted(k[2:] for k in r.call("KEYS", "s|*"))
mk = sorted(k[2:] for k in r.call("KEYS", "m|*"))
h.eq("the same keys in both engines", sk, mk)
h.eq("the same contents at the end", state("s|", sk), state("m|", sk))
# The replica (no module: it applies the plain commands the module
# replicates, and the script's effects) holds the same data.
h.check("replica caught up", harness.wait_replicated(lambda: r.call("INFO", "replication")))
allk = sorted(r.call("KEYS", "s|*") + r.call("KEYS", "m|*"))
h.eq("the replica holds the same keys", allk,
     sorted(replica.call("KEYS", "s|*") + replica.call("KEYS", "m|*")))
h.eq("the replica holds the same contents, TTLs included (%d keys)" % len(allk),
     state("", allk), state("", allk, replica))
h.eq("redis still answers", "PONG", r.call("PING"))
h.done()
