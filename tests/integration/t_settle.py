#!/usr/bin/env python3
"""Reserve, then settle (issue 38, settle=): two agents, one on
`redis-engine script` and one on `redis-engine module`, on one Redis that
has the module.

- An admission under a settle= policy answers a lease id and writes the
  reservation's record; the response's "ratelimit-done" with the real cost
  charges (5 for a reservation of 1: the next request sees 4 fewer) or
  refunds (2 for 10: 8 back) in the account's window, on either engine,
  and a token bucket's TAT moves the same way. The answer to that message
  waits for the settle and carries what the window has left after it
  (limit, remaining, reset, ratelimit_hdr; only what "vars" names).
- A second settle of the same reservation, or one under another account,
  changes nothing; a response without the cost, or with a malformed one,
  leaves the reservation as it stands (its record until lease=).
- The overshoot bound, by Redis's own record: 20 requests reserve 1 each
  against 20/1h while they run (the 21st refused), then each settles 3:
  the window holds 60 = the limit + the sum of real - reserved of the
  requests in flight at once, and nothing more is admitted.
"""
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, MODULE_SO, wait_for  # noqa: E402
import harness  # noqa: E402
import spop  # noqa: E402

harness.FORCED_ENGINE = ""   # each agent here names its engine
h = Harness()
h.require_module()
h.start_redis(extra=["--loadmodule", MODULE_SO])

body = "policy warm 10/1s\n" \
       "policy tok 100/1h settle=X-Usage-Units lease=1m\n" \
       "policy tokg 10/1s algorithm=gcra burst=100 settle=x-usage-units\n" \
       "policy burst 20/1h settle=x-usage-units\n" \
       "policy tokx 100/1h settle=X-Tokens\n"
agents = harness.engine_agents(h, body)


def conn(engine):
    c = spop.Conn().connect("127.0.0.1", agents[engine][1])
    c.hello()
    return c


def hdrs_bin(headers):
    """HAProxy's res.hdrs_bin: <str:name><str:value> per header, then two empty strings."""
    out = b""
    for v in [x for h in headers for x in h] + ["", ""]:
        b = v.encode()
        out += spop.encode_varint(len(b)) + b
    return out


def done(c, policy, key, lease, cost=None, vars=None, hdrs=None):
    """The response phase's message: ratelimit-done(policy, key, lease[, cost][, vars][, hdrs])."""
    args = [("policy", policy), ("key", key), ("lease", lease)]
    if cost is not None:
        args.append(("cost", cost))
    if vars is not None:
        args.append(("vars", vars))
    if hdrs is not None:
        args.append(("hdrs", hdrs_bin(hdrs)))
    return c.notify([("ratelimit-done", args)])


def record(policy, key, lease):
    return "%s:settle:s1:{%s}:%s" % (policy, key, lease)


for engine in ("script", "module"):
    c = conn(engine)
    acc = "jwt:ACC-%s" % engine
    win = "tok:limit:v1:{%s}:1h" % acc

    # a charge: reserved 1, cost 5
    a = c.ratelimit(acc, policy="tok", cost=1)["actions"]
    lease = a.get("lease", "")
    h.check("%s: an admission under settle= answers a lease id (32 hex digits)" % engine,
            a.get("status") == "allow" and len(lease) == 32 and int(lease, 16) >= 0, a)
    h.check("%s: the reservation's record is written" % engine,
            h.rcli("GET", record("tok", acc, lease)).startswith("c1/"),
            h.rcli("GET", record("tok", acc, lease)))
    h.eq("%s: the window holds the reservation" % engine, 1, h.units(win))
    d = done(c, "tok", acc, lease, 5)["actions"]
    # (the answer waits for the settle: the record is gone by now)
    h.eq("%s: the settle takes the record" % engine, "0", h.rcli("EXISTS", record("tok", acc, lease)))
    h.eq("%s: the settled response's fields: what the window has left after it" % engine,
         (100, 95, 3600), (d.get("limit"), d.get("remaining"), d.get("reset")))
    h.eq("%s: and its RateLimit value" % engine, '"tok";r=95;t=3600', d.get("ratelimit_hdr"))
    h.check("%s: no status, no lease, no policy_hdr in a settle's answer" % engine,
            not any(k in d for k in ("status", "lease", "policy_hdr")), d)
    h.eq("%s: reserved 1, cost 5: the window holds 5" % engine, 5, h.units(win))
    b = c.ratelimit(acc, policy="tok", cost=1)["actions"]
    h.eq("%s: the next request sees 4 fewer remaining (99 - 4 - 1)" % engine, 94,
         b.get("remaining"))

    # twice, or under another account: nothing (the second still answers
    # what the window holds)
    d = done(c, "tok", acc, lease, 50)["actions"]
    h.eq("%s: a second settle changes nothing and answers the window as it is" % engine,
         94, d.get("remaining"))
    done(c, "tok", "jwt:ACC-other", b.get("lease", ""), 50)
    # (the next message on the same connection is handled after them)
    c.ratelimit("warmup", policy="warm")
    h.eq("%s: a second settle, and one under another account, change nothing" % engine, 6,
         wait_for(lambda: h.units(win), 5))
    h.check("%s: the other account's settle left the record" % engine,
            h.rcli("EXISTS", record("tok", acc, b.get("lease", ""))) == "1")

    # absent or malformed cost: the reservation stands (nothing answered:
    # the request's own fields stay)
    d = done(c, "tok", acc, b.get("lease", ""))["actions"]
    h.check("%s: no cost: the answer sets no field" % engine,
            not any(k in d for k in ("limit", "remaining", "reset", "ratelimit_hdr")), d)
    done(c, "tok", acc, b.get("lease", ""), "12x")
    c.ratelimit("warmup", policy="warm")
    h.eq("%s: no cost, or a malformed one: the reservation stands" % engine,
         ("1", 6), (h.rcli("EXISTS", record("tok", acc, b.get("lease", ""))), h.units(win)))

    # a refund: reserved 10, cost 2 (the header's text, as HAProxy reads it)
    r = c.ratelimit(acc, policy="tok", cost=10)["actions"]
    h.eq("%s: a reservation of 10" % engine, 16, h.units(win))
    d = done(c, "tok", acc, r.get("lease", ""), "2", vars="ietf")["actions"]
    h.eq("%s: reserved 10, cost 2: 8 back" % engine, 8, h.units(win))
    h.eq("%s: the refund's answer, lean (vars=ietf): the RateLimit value only" % engine,
         ({"ratelimit_hdr": '"tok";r=92;t=3600'}), d)

    # a token bucket: reserved 1, cost 21 (2 s of TAT at 10/s)
    acc_g = "jwt:ACC-g-%s" % engine
    g = c.ratelimit(acc_g, policy="tokg", cost=1)["actions"]
    h.eq("%s: gcra: the first admission leaves 99" % engine, 99, g.get("remaining"))
    d = done(c, "tokg", acc_g, g.get("lease", ""), 21)["actions"]
    h.check("%s: gcra: the settle's answer: the burst, 20 fewer (79, or 80 if a unit came back)"
            % engine, d.get("limit") == 100 and d.get("remaining") in (79, 80) and
            d.get("ratelimit_hdr", "").startswith('"tokg";r='), d)
    g2 = c.ratelimit(acc_g, policy="tokg", cost=1)["actions"]
    h.check("%s: gcra: the next request sees 20 fewer (78, or 79 if a unit came back meanwhile)"
            % engine, g2.get("remaining") in (78, 79), g2)
    # the policy's own header, read by the agent in the response's headers
    # (hdrs, res.hdrs_bin), whatever header the edge read into "cost"
    acc_x = "jwt:ACC-x-%s" % engine
    win_x = "tokx:limit:v1:{%s}:1h" % acc_x
    x = c.ratelimit(acc_x, policy="tokx", cost=1)["actions"]
    d = done(c, "tokx", acc_x, x.get("lease", ""), "3",
             hdrs=[("content-type", "application/json"), ("X-TOKENS", "7")])["actions"]
    h.eq("%s: settle=X-Tokens: the header in hdrs decides (7, not the edge's cost 3)" % engine,
         (7, 93), (h.units(win_x), d.get("remaining")))
    x = c.ratelimit(acc_x, policy="tokx", cost=1)["actions"]
    d = done(c, "tokx", acc_x, x.get("lease", ""), "50", hdrs=[("x-usage-units", "50")])["actions"]
    h.eq("%s: hdrs without the policy's header: the reservation stands (cost ignored)" % engine,
         (8, "1"), (h.units(win_x), h.rcli("EXISTS", record("tokx", acc_x, x.get("lease", "")))))
    c.close()

# --- the overshoot bound, by Redis's own record -------------------------------------------
acc = "jwt:ACC-burst"
win = "burst:limit:v1:{%s}:1h" % acc
out, lock, hold = [], threading.Lock(), threading.Event()


def request(engine):
    c = conn(engine)
    a = c.ratelimit(acc, policy="burst", timeout=15)["actions"]
    with lock:
        out.append(a)
    if a.get("status") == "allow":
        hold.wait(60)
        done(c, "burst", acc, a.get("lease"), 3)
    c.close()


ths = [threading.Thread(target=request, args=(("script", "module")[i % 2],)) for i in range(21)]
for t in ths:
    t.start()
wait_for(lambda: len(out) == 21, 60)
h.eq("21 at once against 20/1h: 20 reserved while they run", 20,
     len([a for a in out if a.get("status") == "allow"]))
h.eq("Redis holds the 20 reservations", 20, h.units(win))
hold.set()
for t in ths:
    t.join(60)
h.eq("each settled 3 for 1: 60 = the limit + the sum of real - reserved in flight", 60,
     wait_for(lambda: h.units(win) == 60 and 60, 15))
h.check("no record left behind",
        h.rcli("KEYS", "burst:settle:s1:*") == "", h.rcli("KEYS", "burst:settle:s1:*"))
c = conn("module")
h.eq("nothing more is admitted", "deny", c.ratelimit(acc, policy="burst")["actions"].get("status"))
c.close()
h.done()
