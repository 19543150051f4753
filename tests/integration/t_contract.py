#!/usr/bin/env python3
"""The decision contract (issue 28): every case of tests/contract/
decisions.txt, run on the script and on the module, gives the reply the
file states and leaves the stored data it states (members, scores, bucket
fields, TTLs); a replica (a real redis-server without the module) ends with
the same data. tests/unit/test_contract.c checks the agent's reading of the
same replies. The format and the clock: tests/contract/contract.py.

CONTRACT_RECORD=1 prints each case with what the module answered and left
in place of the expected lines (to draft a new case: review every number
by hand before committing it; the file is the contract, not a recording)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "contract"))
from harness import Harness, ROOT  # noqa: E402
import contract  # noqa: E402
import harness  # noqa: E402
import resp  # noqa: E402

harness.FORCED_ENGINE = ""
PATH = os.environ.get("CONTRACT_FILE", os.path.join(ROOT, "tests", "contract", "decisions.txt"))
RECORD = os.environ.get("CONTRACT_RECORD") == "1"

h = Harness()
cases = contract.parse(PATH)
h.check("the contract has cases (%d)" % len(cases), len(cases) > 0)
r, replica = contract.start_clocked_pair(h)
src, sha = contract.load_clocked_script(h, r)
# The script's branches: the same cases on an instrumented copy (a third
# engine, held to the same replies and data), then every marker must have run.
cov_src, MARKS = contract.instrumented_script(src)
cov_sha = r.call("SCRIPT", "LOAD", cov_src)
h.check("instrumented copy loads (%d branch markers)" % len(MARKS),
        isinstance(cov_sha, str) and len(MARKS) > 40, cov_sha)
ENGINES = (("script", "s|", lambda keys, args: ["EVALSHA", sha, len(keys)] + keys + args),
           ("module", "m|", lambda keys, args: ["RATELIMIT.RELEASE"] + keys + args[1:]
            if args[:1] == ["release"] else ["RATELIMIT.SETTLE", len(keys)] + keys + args[1:]
            if args[:1] == ["settle"] else ["RATELIMIT.DECIDE", len(keys)] + keys + args),
           ("script-cov", "c|", lambda keys, args: ["EVALSHA", cov_sha, len(keys)] + keys + args))
# Lines whose branches are alternatives by server, not by case: at least
# one of their markers must run. (How pcall sees a redis.call error inside
# a batch: as a table {err=...} or as a string, by Redis version; Debian's
# 7.0 gives the string.)
EITHER = {
    "if type(r) == 'table' and r.err then r = { err = r.err } else r = { err = 'ERR ' .. tostring(r) } end":
        "a redis.call error inside a batch's decision, as the server raises it",
}


def show(st):
    (kind, items), ttl = st
    return "%s %s ttl %s" % (kind, " ".join(items), "none" if ttl is None else ttl)


def record(case, got, state):
    print("case %s" % case.name)
    print("clock %d" % case.clock)
    print("keys %s" % " ".join(case.keys))
    print("args %s" % " ".join(case.args))
    for line in open(PATH).read().splitlines()[case.line:]:
        if line.startswith("before"):
            print(line)
        elif line.startswith("end") or line.startswith("case"):
            break
    for x in contract.replies_of(case, got):
        if isinstance(x, resp.Err):
            print("reply error %s" % x)
        else:
            print("reply %s" % " ".join(str(v) for v in x))
    for k, ((kind, items), ttl) in state.items():
        print("after %s %s %s" % (k, kind, " ".join(items)) if kind != "none" else "after %s none" % k)
        if kind != "none":
            print("after %s ttl %s" % (k, "none" if ttl is None else ttl))
    print("end\n")


for case in cases:
    want = contract.expected_state(case)
    for engine, prefix, cmd in ENGINES:
        r.pipeline(contract.setup_cmds(case, prefix) + [contract.set_clock_cmd(case)])
        keys = [case.key(prefix, k) for k in case.keys]
        got = r.call(*cmd(keys, case.args))
        state = contract.read_state(r, case, prefix)
        if RECORD and engine == "module":
            record(case, got, state)
            continue
        reps = contract.replies_of(case, got)
        ok = len(reps) == len(case.replies) and \
            all(contract.reply_matches(e, g) for e, g in zip(case.replies, reps))
        h.check("%s: %s: reply %s" % (case.name, engine, got), ok,
                "expected %s" % (case.replies,))
        diff = [k for k in want if want[k] != state[k]]
        h.check("%s: %s: stored data" % (case.name, engine), not diff,
                "; ".join("%s: expected [%s] got [%s]" % (k, show(want[k]), show(state[k]))
                          for k in diff))

# The deny cache (issue 28): an agent answers a deny again from its cache,
# stored when the request was sent, until the deny's deadline or reset
# (the first), with reset and retry_after counting down and the rest kept
# (tests/unit/test_contract.c checks spoa/limiter/deny_cache.c gives exactly that).
# So the cache on and off agree only if both engines, asked again at any
# instant before then, give that reply and change nothing more: every
# single-decision deny of the file, asked again at three later instants.
# (Not a cost above a limit: the agent refuses that itself, bad-cost, and
# both engines give it retry_after = the window at every instant.) A deny
# adds nothing; it may trim what left a window, so later there may be less.
# A GCRA deny holds only one unit short (remaining + 1 == cost: the bucket
# drains continuously; window_deny_holds() in spoa/core/window.c). A pool's
# deny is not cached (its reason; a share grows as accounts leave).
def sendable(case):
    try:
        cost, lims = int(case.args[0]), [int(x) for x in case.args[1::2]]
    except (ValueError, IndexError):
        return False
    wins = case.args[2::2]
    if not lims or len(wins) != len(lims) or cost < 1:
        return False
    for i, w in enumerate(wins):
        if w.startswith("gcra:"):
            lims[i] = int(w.split(":")[2])
            if case.replies[0][1][2] + 1 != cost:
                return False
    return all(cost <= lim for lim in lims)


def members(st):
    (kind, items), _ = st
    return set(items[0::2]) if kind in ("zset", "hash") else set()


ncached = 0
for case in cases:
    if RECORD or len(case.replies) != 1 or case.replies[0][0] == "error" or \
            case.replies[0][1][0] != 0 or not sendable(case):
        continue
    v = case.replies[0][1]
    # (a pool's deny is never cached: window_deny_holds(); a window's deny
    # in a pooled decision is, with the pool's 7th element 0)
    if len(v) == 7 and v[6] != 0:
        continue
    until = min(v[3], v[4])
    want = contract.expected_state(case)
    for dt in sorted(set([0, until // 2, until - 1])):
        later = [0, v[1], v[2], v[3] - dt, v[4] - dt, v[5]] + v[6:]
        for engine, prefix, cmd in ENGINES[:2]:
            t = contract.T0_US + case.clock + dt
            r.pipeline(contract.setup_cmds(case, prefix) +
                       [["HSET", "test:clock", "s", t // 1000000, "us", t % 1000000]])
            got = r.call(*cmd([case.key(prefix, k) for k in case.keys], case.args))
            state = contract.read_state(r, case, prefix)
            gained = [k for k in want if not members(state[k]) <= members(want[k])]
            h.check("%s: %s: %d us later the deny cache's answer %s" % (case.name, engine, dt, later),
                    got == later and not gained, "got %s, data %s" % (got, state))
        ncached += 1
h.check("deny cases asked again for the cache (%d case-instants)" % ncached, ncached >= 40)
# (the replica check below reads each case's data as the first pass left it)
for case in cases:
    for engine, prefix, cmd in ENGINES:
        r.pipeline(contract.setup_cmds(case, prefix) + [contract.set_clock_cmd(case)])
        r.call(*cmd([case.key(prefix, k) for k in case.keys], case.args))

# Every then/else of the script ran in some case (test:cov holds the markers).
ran = set(int(x) for x in r.call("HKEYS", "test:cov"))
missed, either = [], {}
for n, (ln, text) in sorted(MARKS.items()):
    if text in EITHER:
        either[ln] = either.get(ln, False) or n in ran
    elif n not in ran:
        missed.append("%d: line %d: %s" % (n, ln, text))
missed += ["line %d: neither branch" % ln for ln, hit in either.items() if not hit]
print("# script branches: %d of %d markers ran (%d lines of server-dependent alternatives)" %
      (len(ran), len(MARKS), len(either)))
if not RECORD:
    h.eq("every branch of the script ran in some case", [], missed)
h.check("replica caught up", harness.wait_replicated(lambda: r.call("INFO", "replication")))
rep_bad = []
for case in cases:
    want = contract.expected_state(case)
    for engine, prefix, _ in ENGINES:
        if contract.read_state(replica, case, prefix) != want and not RECORD:
            rep_bad.append("%s/%s" % (case.name, engine))
h.eq("the replica holds every case's data after, both engines", [], rep_bad)
h.eq("redis still answers", "PONG", r.call("PING"))
h.done()
