#!/usr/bin/env python3
"""The lean answer (issue 41): a "ratelimit" message's optional "vars"
argument names the variables the ACK sets, so HAProxy stores only what the
edge's rules read. Without it the ACK is today's full answer; "ietf" keeps
status, retry_after, reason and the two IETF fields; status is always set;
an unknown name is left out; a "vars" that is not a string is ignored. The decisions themselves do not change: the
same window is counted either way."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness  # noqa: E402
import spop  # noqa: E402

h = Harness()
h.start_redis()
h.start_agent("""
redis-timeout 1s
policy transfer 3/1s
policy slow 2/1h
""", ready=True)

c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()
FULL = {"status", "limit", "remaining", "reset", "window", "policy_hdr", "ratelimit_hdr"}


def ask(key, vars_=None, policy="slow"):
    args = [("policy", policy), ("key", key)]
    if vars_ is not None:
        args.append(("vars", vars_))
    return c.notify([("ratelimit", args)])["actions"]


a = ask("ACC-L1")
h.eq("no vars: the full answer", sorted(FULL), sorted(a))
a = ask("ACC-L2", "ietf")
h.eq("vars=ietf, allowed: status and the two IETF fields",
     ["policy_hdr", "ratelimit_hdr", "status"], sorted(a))
h.eq("vars=ietf: RateLimit-Policy as in the full answer", '"slow";q=2;w=3600', a["policy_hdr"])
h.check("vars=ietf: the RateLimit field counts down", a["ratelimit_hdr"].startswith('"slow";r=1;t='), a)
ask("ACC-L2", "ietf")
a = ask("ACC-L2", "ietf")
h.eq("vars=ietf, denied: status, retry_after and the IETF fields",
     ["policy_hdr", "ratelimit_hdr", "retry_after", "status"], sorted(a))
h.eq("vars=ietf, denied: deny", "deny", a["status"])
h.check("vars=ietf, denied: retry_after in seconds", a["retry_after"] >= 1, a)
# the window counted the same with or without vars: 2 admitted, then denied
keys = [k for k in h.rcli("KEYS", "*ACC-L2*").split() if h.rcli("TYPE", k) == "zset"]
h.check("the lean answer decides the same: 2 units stored", keys and all(h.units(k) == 2 for k in keys), keys)
a = ask("ACC-L3", "limit,remaining")
h.eq("vars=limit,remaining: those and status", ["limit", "remaining", "status"], sorted(a))
a = ask("ACC-L4", "")
h.eq("vars empty: status only", ["status"], sorted(a))
a = ask("ACC-L5", "bogus+window")
h.eq("an unknown name is left out, the known one kept", ["status", "window"], sorted(a))
a = ask("ACC-L6", 7)
h.eq("vars not a string: ignored, the full answer", sorted(FULL), sorted(a))
a = ask("ACC-L7", "ietf", policy="nope")
h.eq("an error keeps status and its reason under vars=ietf", ["reason", "status"], sorted(a))
h.eq("an error: status error", "error", a["status"])
c.close()
h.done()
