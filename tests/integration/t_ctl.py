#!/usr/bin/env python3
"""ratelimit-spoa ctl against a real redis-server, with two agents on it:
show (used, remaining, reset; the limits that apply), a live override seen
by both agents without a reload, a block answered deny reason=blocked
without Redis, the ceiling (refused by ctl, and by the agents when written
by a ctl of another configuration), a live override over a config
override and back, expiry on its own, reset, the overrides list with who
and why, top-denied from the agents' per-second denial counts, the events
the agents log, and the metrics. t_ctl_cluster.py runs the same commands on
a Redis Cluster."""
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
from harness import AGENT, Harness  # noqa: E402
import spop  # noqa: E402

POLICIES = """
policy transfer 3/1s
policy api 10/1s 100/1h
live-max api 50/1s 200/1h
policy slow 2/1m
policy hourly 2/1h
policy minute 5/1m
policy bucket 2/1m algorithm=gcra burst=3
override transfer jwt:ACC-VIP 30/1s
"""
# how long an agent may take to see a change: the poll is 0.5 s, the
# bound documented is 1 s; generous here, the machine is shared
SEE_SECS = 15


def ctl(conf, *args):
    """ratelimit-spoa ctl -c <conf> <args>: (exit status, stdout, stderr)."""
    p = subprocess.run([AGENT, "ctl", "-c", conf] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def ctl_json(h, conf, *args):
    rc, out, err = ctl(conf, *args, "--json")
    if rc != 0:
        h.fail("ctl %s: exit %d: %s" % (" ".join(args), rc, err))
        return None
    return json.loads(out)


def conn(port):
    c = spop.Conn().connect("127.0.0.1", port)
    c.hello()
    return c


def ask(c, key, policy="transfer"):
    return c.ratelimit(key, policy=policy)["actions"]


def seen_by_all(h, what, conns, key, pred, policy="transfer"):
    """Until every connection's agent answers <key> so that pred(answer)."""
    return h.wait_until(what, lambda: all(pred(ask(c, key, policy)) for c in conns), SEE_SECS)


def seen_after(log, needle):
    """Milliseconds from a change (at_ms=, Redis's clock) to the agent's log
    line for it (ts=, the agent's clock, the same host), for the first
    live_override_change line holding <needle>; None when there is none."""
    for line in log.splitlines():
        if "event=live_override_change" in line and needle in line:
            ts = re.search(r"^ts=(\S+)Z ", line)
            at = re.search(r" at_ms=(\d+)", line)
            if ts and at:
                t = datetime.datetime.strptime(ts.group(1), "%Y-%m-%dT%H:%M:%S.%f")
                t = t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000
                return int(t - int(at.group(1)))
    return None


def run_common(h, conf, agents, logs, cli):
    """The checks both topologies share; <agents> are SPOP connections to
    distinct agents, <logs> their log files, cli(*args) a redis-cli command
    (routed by slot on a cluster)."""
    a, b = agents[0], agents[-1]
    for lg in logs:
        h.wait_until("agent %s polls the live overrides" % os.path.basename(lg),
                     lambda: "event=live_control_ready" in harness.read_text(lg), SEE_SECS)

    # -- show: used, remaining, reset ---------------------------------------
    # a minute's window: the counts hold however slow the machine is
    s = ctl_json(h, conf, "show", "minute", "jwt:ACC-S")
    h.eq("show, untouched account: limits of the policy, used 0, remaining 5, reset 0",
         ("policy", 0, 5, 0), (s["limits"], s["windows"][0]["used"], s["windows"][0]["remaining"],
                               s["windows"][0]["reset"]))
    h.eq("show, untouched account: no live override", None, s["live"])
    ask(a, "jwt:ACC-S", "minute")
    ask(b, "jwt:ACC-S", "minute")
    s = ctl_json(h, conf, "show", "minute", "jwt:ACC-S")
    w = s["windows"][0]
    h.eq("show after 2 decisions on two agents: used 2, remaining 3, the key",
         (2, 3, "minute:limit:v1:{jwt:ACC-S}:1m"), (w["used"], w["remaining"], w["key"]))
    h.check("show: reset is when the oldest unit leaves, within the minute", 1 <= w["reset"] <= 60, w)
    rc, out, _ = ctl(conf, "show", "minute", "jwt:ACC-S")
    h.check("show (text): one line per window with used and remaining",
            rc == 0 and "used 2 remaining 3" in out, out)
    # a log whose newest entry neither engine wrote: their decisions on it
    # fail ('bad entry'), so show reads it as they do, full (it used to sum
    # the entries it could parse and show the window empty)
    cli("ZADD", "minute:limit:v1:{jwt:ACC-BAD}:1m", "9000000000000000", "foreign")
    h.eq("a decision on a log with a foreign entry: error", "error",
         ask(a, "jwt:ACC-BAD", "minute").get("status"))
    w = ctl_json(h, conf, "show", "minute", "jwt:ACC-BAD")["windows"][0]
    h.eq("show, a log with a foreign entry: full, as the engines refuse it (used 5, remaining 0)",
         (5, 0), (w["used"], w["remaining"]))
    for _ in range(3):
        ask(a, "jwt:ACC-MW", "api")
    s = ctl_json(h, conf, "show", "api", "jwt:ACC-MW")
    h.eq("show, two windows: both keys (one hash tag), 3 used in the hour",
         [("api:limit:v1:{jwt:ACC-MW}:1s", 10), ("api:limit:v1:{jwt:ACC-MW}:1h", 100)],
         [(w["key"], w["limit"]) for w in s["windows"]])
    h.eq("show, the hour's window: used 3, remaining 97", (3, 97),
         (s["windows"][1]["used"], s["windows"][1]["remaining"]))
    s = ctl_json(h, conf, "show", "transfer", "jwt:ACC-VIP")
    h.eq("show, a config override: its limits", ("config-override", 30),
         (s["limits"], s["windows"][0]["limit"]))

    # -- a live override, seen by every agent --------------------------------
    # 1 a minute: once one passed, the next is denied however slow the machine
    rc, _, err = ctl(conf, "override", "transfer", "jwt:ACC-O", "1/1m", "--for", "2m",
                     "--reason", "partner batch loop")
    h.check("override 1/1m: exit 0, what it did on stderr",
            rc == 0 and "override set" in err and "limits=1/1m" in err, err)
    seen_by_all(h, "every agent decides jwt:ACC-O with limit 1", agents, "jwt:ACC-O",
                lambda d: d.get("limit") == 1)
    d = ask(b, "jwt:ACC-O")
    h.eq("the live override's limit is what denies", ("deny", 1), (d["status"], d["limit"]))
    s = ctl_json(h, conf, "show", "transfer", "jwt:ACC-O")
    h.eq("show: the live override applies, with who and why",
         ("live-override", 1, True, "partner batch loop"),
         (s["limits"], s["windows"][0]["limit"], s["live"]["applies"], s["live"]["reason"]))
    h.check("show: its time left is at most its --for", 0 < s["live"]["expires_in_ms"] <= 120000,
            s["live"])
    h.check("show: who is user@host", "@" in s["live"]["who"], s["live"]["who"])
    for lg in logs:
        h.check("agent %s logged the change with who, what, why" % os.path.basename(lg),
                harness.wait_for(lambda: "event=live_override_change" in harness.read_text(lg) and
                                 "partner batch loop" in harness.read_text(lg), SEE_SECS))
        seen = seen_after(harness.read_text(lg), "partner batch loop")
        h.check("agent %s saw it within 1.5 s of the change (the bound is 1 s: a 0.5 s poll "
                "and a read; took %s ms)" % (os.path.basename(lg), seen),
                seen is not None and seen <= 1500, seen)

    # -- the ceiling ---------------------------------------------------------
    rc, _, err = ctl(conf, "override", "transfer", "jwt:ACC-O", "4/1s", "--for", "1m")
    h.check("ctl refuses 4/1s over transfer's 3/1s (no live-max): exit 1, says why",
            rc == 1 and "ceiling" in err, err)
    rc, _, err = ctl(conf, "override", "api", "jwt:ACC-O", "40/1s", "--for", "1m")
    h.check("ctl refuses 40/1s alone under live-max 50/1s 200/1h (no hour bound)",
            rc == 1 and "200/1h" in err, err)
    rc, _, err = ctl(conf, "override", "api", "jwt:ACC-LM", "40/1s", "150/1h", "--for", "5m")
    h.check("ctl takes 40/1s 150/1h under live-max 50/1s 200/1h", rc == 0, err)
    seen_by_all(h, "every agent raises jwt:ACC-LM to 40/1s (its deciding window)", agents,
                "jwt:ACC-LM", lambda d: d.get("limit") == 40, "api")
    s = ctl_json(h, conf, "show", "api", "jwt:ACC-LM")
    h.eq("show: the raised windows", [40, 150], [w["limit"] for w in s["windows"]])
    # the first agent reloads a file without that ceiling: it stops applying
    # the override at once, the other agent (its ceiling kept) goes on
    with open(conf) as f:
        text = f.read()
    with open(conf, "w") as f:
        f.write(text.replace("live-max api 50/1s 200/1h\n", ""))
    h.agent.send_signal(signal.SIGHUP)
    h.wait_until("agent A, reloaded without live-max, decides jwt:ACC-LM with api's 10/1s",
                 lambda: ask(a, "jwt:ACC-LM", "api").get("limit") == 10, SEE_SECS)
    h.eq("agent B, whose file keeps the ceiling, still applies 40/1s", 40,
         ask(b, "jwt:ACC-LM", "api").get("limit"))
    with open(conf, "w") as f:
        f.write(text)
    h.agent.send_signal(signal.SIGHUP)
    h.wait_until("agent A, the ceiling back, applies 40/1s again",
                 lambda: ask(a, "jwt:ACC-LM", "api").get("limit") == 40, SEE_SECS)
    # a ctl with another configuration (a looser one) writes past this
    # agent's ceiling: the agents refuse to apply it
    other = os.path.join(h.tmp, "other.conf")
    with open(conf) as f:
        text = f.read()
    with open(other, "w") as f:
        f.write(text.replace("policy transfer 3/1s", "policy transfer 3/1s\nlive-max transfer 100/1s"))
    rc, _, err = ctl(other, "override", "transfer", "jwt:ACC-LOOSE", "100/1s", "--for", "1m")
    h.check("a ctl whose config has live-max 100/1s writes 100/1s", rc == 0, err)
    for lg in logs:
        h.check("agent %s refuses it: event=live_override_refused" % os.path.basename(lg),
                harness.wait_for(lambda: "event=live_override_refused" in harness.read_text(lg) and
                                 "jwt:ACC-LOOSE" in harness.read_text(lg), SEE_SECS))
    h.eq("and decides with the policy's limit 3 on every agent", [3] * len(agents),
         [ask(c, "jwt:ACC-LOOSE").get("limit") for c in agents])
    s = ctl_json(h, conf, "show", "transfer", "jwt:ACC-LOOSE")
    h.eq("show (this config) says it does not apply", ("policy", False),
         (s["limits"], s["live"]["applies"]))

    # -- block ---------------------------------------------------------------
    rc, _, err = ctl(conf, "override", "transfer", "jwt:ACC-B", "block", "--for", "10m",
                     "--reason", "fraud")
    h.check("override block: exit 0", rc == 0 and "limits=block" in err, err)
    seen_by_all(h, "every agent denies jwt:ACC-B with reason blocked", agents, "jwt:ACC-B",
                lambda d: d.get("status") == "deny" and d.get("reason") == "blocked")
    nblocked = len(agents)
    for c in agents:
        d = ask(c, "jwt:ACC-B")
        nblocked += 1
        h.check("blocked: deny, reason blocked, retry_after the time left (<= 600 s)",
                d["status"] == "deny" and d["reason"] == "blocked" and 1 <= d["retry_after"] <= 600,
                d)
    # the decisions made while waiting for the block went to Redis: start
    # the key afresh, then only blocked decisions
    cli("DEL", "transfer:limit:v1:jwt:ACC-B")
    for c in agents:
        ask(c, "jwt:ACC-B")
        nblocked += 1
    h.eq("a block asks no Redis: the account's window key stays absent", 0,
         int(cli("EXISTS", "transfer:limit:v1:jwt:ACC-B") or 0))

    # -- a live override wins over a config override while it lasts ----------
    rc, _, err = ctl(conf, "override", "transfer", "jwt:ACC-VIP", "5/1s", "--for", "10m")
    h.check("override the config override's 30/1s with 5/1s", rc == 0, err)
    seen_by_all(h, "every agent applies the live 5/1s over the config's 30/1s", agents,
                "jwt:ACC-VIP", lambda d: d.get("limit") == 5)
    rc, _, err = ctl(conf, "override", "transfer", "jwt:ACC-VIP", "--remove")
    h.check("override --remove: exit 0", rc == 0 and "override removed" in err, err)
    seen_by_all(h, "removed: every agent is back to the config override's 30", agents,
                "jwt:ACC-VIP", lambda d: d.get("limit") == 30)

    # -- overrides: the list -------------------------------------------------
    lst = ctl_json(h, conf, "overrides")
    got = {(o["policy"], o["account"]): o for o in lst}
    h.check("overrides lists the live ones (not the removed one)",
            ("transfer", "jwt:ACC-O") in got and ("transfer", "jwt:ACC-B") in got and
            ("transfer", "jwt:ACC-VIP") not in got, sorted(got))
    o = got.get(("transfer", "jwt:ACC-B"), {})
    h.check("overrides: limits, time left, who, why",
            o.get("limits") == "block" and 0 < o.get("expires_in_ms", 0) <= 600000 and
            "@" in o.get("who", "") and o.get("reason") == "fraud", o)
    rc, out, _ = ctl(conf, "overrides")
    h.check("overrides (text): a header and the block", rc == 0 and "WHO" in out and "fraud" in out, out)

    # -- expiry on its own ---------------------------------------------------
    t_set = time.monotonic()
    rc, _, err = ctl(conf, "override", "transfer", "jwt:ACC-E", "1/1s", "--for", "3s")
    h.check("override for 3s", rc == 0, err)
    seen_by_all(h, "applied", agents[:1], "jwt:ACC-E", lambda d: d.get("limit") == 1)
    seen_by_all(h, "expired on its own: every agent back to 3 without a change in Redis",
                agents, "jwt:ACC-E", lambda d: d.get("limit") == 3)
    # a busy machine can only make the end later, never earlier
    took = time.monotonic() - t_set
    h.check("and not before its 3 s (%.2f s after the ctl started)" % took, took >= 2.95, took)
    h.check("expired: no longer listed",
            ("transfer", "jwt:ACC-E") not in {(o["policy"], o["account"])
                                              for o in ctl_json(h, conf, "overrides")})
    ttl = int(cli("PTTL", "ratelimit-spoa:{ctl}:overrides") or -2)
    h.check("the overrides hash carries a TTL (its latest expiry, <= 10 min)",
            0 < ttl <= 600000, ttl)

    # -- a token bucket (algorithm=gcra): show, reset, a live rate, a block ---
    # 2 a minute, burst 3: a unit comes back every 30 s, so the counts hold
    # however slow the machine is
    s = ctl_json(h, conf, "show", "bucket", "jwt:ACC-G")
    w = s["windows"][0]
    h.eq("show, an untouched bucket: full (limit = its burst 3, used 0, remaining 3, reset 0), "
         "its one key", (3, 0, 3, 0, "bucket:limit:g1:{jwt:ACC-G}"),
         (w["limit"], w["used"], w["remaining"], w["reset"], w["key"]))
    d = [ask(c, "jwt:ACC-G", "bucket") for c in (a, b)]
    s = ctl_json(h, conf, "show", "bucket", "jwt:ACC-G")
    w = s["windows"][0]
    h.eq("show after 2 admissions on two agents: used 2, remaining 1 (what the last decision said)",
         (2, 1, 1), (w["used"], w["remaining"], d[-1].get("remaining")))
    h.check("show: the bucket is full again within its 2 units' time (60 s)", 30 < w["reset"] <= 60, w)
    rc, out, _ = ctl(conf, "show", "bucket", "jwt:ACC-G")
    h.check("show (text): the bucket with its burst", rc == 0 and "burst 3 used 2 remaining 1" in out, out)
    rc, _, err = ctl(conf, "reset", "bucket", "jwt:ACC-G")
    h.check("reset of a bucket: exit 0, its key deleted", rc == 0 and "keys_deleted=1" in err, err)
    h.eq("show after reset: full", 0, ctl_json(h, conf, "show", "bucket", "jwt:ACC-G")["windows"][0]["used"])
    rc, _, err = ctl(conf, "override", "bucket", "jwt:ACC-GO", "1/1m", "--for", "2m")
    h.check("override of a bucket, a slower rate 1/1m: exit 0", rc == 0, err)
    seen_by_all(h, "every agent decides jwt:ACC-GO with a bucket of 1 (the rate's limit, under the burst)",
                agents, "jwt:ACC-GO", lambda d: d.get("limit") == 1, "bucket")
    h.eq("the live rate's bucket of 1 denies the next", "deny", ask(b, "jwt:ACC-GO", "bucket")["status"])
    rc, _, err = ctl(conf, "override", "bucket", "jwt:ACC-GX", "10/1s", "--for", "1m")
    h.check("override of a bucket above its configured rate: refused (no live-max)",
            rc != 0 and "ceiling" in err, err)
    rc, _, err = ctl(conf, "override", "bucket", "jwt:ACC-GX", "1/1s", "2/1m", "--for", "1m")
    h.check("override of a bucket with two windows: refused (one rate)", rc != 0 and "one rate" in err, err)
    rc, _, err = ctl(conf, "override", "bucket", "jwt:ACC-GB", "block", "--for", "1m")
    seen_by_all(h, "every agent blocks jwt:ACC-GB, limit = the burst", agents, "jwt:ACC-GB",
                lambda d: (d.get("status"), d.get("reason"), d.get("limit")) == ("deny", "blocked", 3),
                "bucket")

    # -- reset ---------------------------------------------------------------
    # a minute's window: only the reset can let it pass within the test
    got = [ask(c, "jwt:ACC-R", "slow").get("status") for c in (a, b, a, b)]
    h.eq("jwt:ACC-R exhausted under slow 2/1m: 2 allow, then deny (each agent caches it)",
         ["allow"] * 2 + ["deny"] * 2, got)
    rc, _, err = ctl(conf, "reset", "slow", "jwt:ACC-R")
    # (its window's key, and the 1.0.x one an agent writes for an upgrade;
    # none of the latter on a cluster)
    h.check("reset: exit 0, keys deleted", rc == 0 and re.search(r"keys_deleted=[12] ", err), err)
    s = ctl_json(h, conf, "show", "slow", "jwt:ACC-R")
    h.eq("show after reset: used 0", 0, s["windows"][0]["used"])
    # each agent forgets its cached denial once it sees the reset
    for c in agents:
        ok = h.wait_until("after reset, every agent admits jwt:ACC-R again (well inside the minute)",
                          lambda: ask(c, "jwt:ACC-R", "slow").get("status") == "allow", SEE_SECS)
        if ok:
            h.ok("an agent admits jwt:ACC-R after the reset")
    for lg in logs:
        h.check("agent %s logged the reset with who" % os.path.basename(lg),
                harness.wait_for(lambda: "event=live_reset" in harness.read_text(lg) and
                                 "jwt:ACC-R" in harness.read_text(lg), SEE_SECS))
    ask(a, "jwt:ACC-R2", "api")
    rc, _, err = ctl(conf, "reset", "api", "jwt:ACC-R2")
    h.check("reset of a two-window account deletes both keys", rc == 0 and "keys_deleted=2" in err, err)
    s = ctl_json(h, conf, "show", "api", "jwt:ACC-R2")
    h.eq("show after reset: nothing used", [0, 0], [w["used"] for w in s["windows"]])

    # -- top-denied ----------------------------------------------------------
    for _ in range(5):
        ask(a, "jwt:ACC-B")
        nblocked += 1
    # exact counts on a policy nothing else here denies: 2 allowed, then
    # T1 denied 7 times and T2 3 times, across the agents
    for i in range(9):
        ask(agents[i % len(agents)], "jwt:ACC-T1", "hourly")
    for i in range(5):
        ask(agents[i % len(agents)], "jwt:ACC-T2", "hourly")
    h.check("top-denied --policy hourly: exactly T1 7, T2 3, most first",
            harness.wait_for(lambda: [(x["account"], x["denied"]) for x in
                                      ctl_json(h, conf, "top-denied", "--policy", "hourly")] ==
                             [("jwt:ACC-T1", 7), ("jwt:ACC-T2", 3)], SEE_SECS),
            ctl_json(h, conf, "top-denied", "--policy", "hourly"))
    # the denials so far: jwt:ACC-O 1 (and any while waiting), jwt:ACC-R 1,
    # jwt:ACC-B nblocked plus the waits; the agents flush each second
    def top():
        t = ctl_json(h, conf, "top-denied", "--minutes", "5")
        return t or []
    h.check("top-denied: the blocked jwt:ACC-B counted with every block sent here",
            harness.wait_for(lambda: any(x["account"] == "jwt:ACC-B" and x["policy"] == "transfer"
                                         and x["denied"] >= nblocked for x in top()), SEE_SECS),
            top())
    h.eq("top-denied --count 1: one line", 1, len(ctl_json(h, conf, "top-denied", "--count", "1")))
    rc, out, _ = ctl(conf, "top-denied", "--policy", "hourly")
    h.check("top-denied (text): T1 first", rc == 0 and out.splitlines()[1].split() ==
            ["7", "hourly", "jwt:ACC-T1"], out)

    # -- usage ---------------------------------------------------------------
    for cmd in ("", "show", "reset", "override", "overrides", "top-denied"):
        rc, out, _ = ctl(conf, *([cmd] if cmd else []), "--help")
        h.check("ctl %s--help: exit 0, usage" % (cmd + " " if cmd else ""),
                rc == 0 and out.startswith("Usage: ratelimit-spoa ctl"), out)
    rc, _, err = ctl(conf, "show", "nope", "jwt:X")
    h.check("an unknown policy: exit 1, named", rc == 1 and "no policy 'nope'" in err, err)
    rc, _, err = ctl(conf, "override", "transfer", "jwt:X", "1/1s")
    h.check("override without --for: exit 2, usage", rc == 2 and "--for" in err, err)


if __name__ == "__main__":
    h = Harness()
    h.start_redis()
    h.start_agent(ready=True, extra="threads 2\nredis-timeout 1s\n" + POLICIES)
    conf = os.path.join(h.tmp, "agent.conf")
    body = harness.force_threads("redis redis://127.0.0.1:%d/0\nthreads 1\nredis-timeout 1s\n%s"
                                 % (h.redis_port, POLICIES))
    _, bport, bmport, blog = h.spawn_side_agent("agent-b", body)
    harness.wait_ready(bmport, harness.threads(1))
    agents = [conn(h.agent_port), conn(bport)]
    run_common(h, conf, agents, [h.agent_log, blog], h.rcli)

    # -- an override ends on the agent's clock, even when Redis cannot be polled
    rc, _, err = ctl(conf, "override", "transfer", "jwt:ACC-FRZ", "block", "--for", "4s")
    h.check("block for 4s", rc == 0, err)
    seen_by_all(h, "applied", agents, "jwt:ACC-FRZ", lambda d: d.get("reason") == "blocked")
    h.eq("metrics: nothing dropped from top-denied so far", 0,
         harness.scrape(h.metrics_port).get("denied_dropped_total"))
    os.kill(h.redis.pid, signal.SIGSTOP)
    try:
        d = ask(agents[0], "jwt:ACC-FRZ")
        h.eq("Redis frozen: the block is still answered, without Redis", ("deny", "blocked"),
             (d.get("status"), d.get("reason")))
        h.wait_until("Redis still frozen: the block ends at its expiry all the same",
                     lambda: ask(agents[0], "jwt:ACC-FRZ").get("reason") != "blocked", SEE_SECS)
        d = ask(agents[0], "jwt:ACC-FRZ")
        h.eq("after it, the decision goes to Redis (frozen: an error)", "error", d.get("status"))
    finally:
        os.kill(h.redis.pid, signal.SIGCONT)
    h.check("metrics: the denials counted while Redis was frozen could not be written: dropped",
            harness.wait_for(lambda: harness.scrape(h.metrics_port).get("denied_dropped_total") > 0,
                             SEE_SECS))

    # -- sentinel://: ctl finds the primary through a sentinel -----------------
    sport = harness.free_port()
    h.start_sentinel(sport, h.redis_port, "rlprimary")
    sconf = os.path.join(h.tmp, "ctl-sentinel.conf")
    with open(sconf, "w") as f:
        f.write("redis sentinel://127.0.0.1:%d/rlprimary\n%s" % (sport, POLICIES))
    h.eq("sentinel://: overrides lists what redis:// lists",
         sorted((o["policy"], o["account"]) for o in ctl_json(h, conf, "overrides")),
         sorted((o["policy"], o["account"]) for o in (ctl_json(h, sconf, "overrides") or [])))
    s = ctl_json(h, sconf, "show", "hourly", "jwt:ACC-T1")
    h.eq("sentinel://: show reads the primary's windows (2 used of 2)", (2, 0),
         s and (s["windows"][0]["used"], s["windows"][0]["remaining"]))

    # -- the ACL of docs/deployment.md: an agent and ctl as that user --------
    acl = [l.split()[2:] for l in harness.read_text(os.path.join(harness.ROOT, "docs", "deployment.md"))
           .splitlines() if l.startswith("ACL SETUSER ratelimit ") and "ratelimit.decide" not in l]
    h.check("deployment.md has the ACL lines, live control's among them",
            len(acl) >= 2 and any("~ratelimit-spoa:{ctl}:*" in a for a in acl), acl)
    for a in acl:
        h.eq("ACL SETUSER %s" % " ".join(a[:3]), "OK", h.rcli("ACL", "SETUSER", *a))
    if harness.FORCED_ENGINE in ("module", "auto"):
        h.rcli("ACL", "SETUSER", "ratelimit", "+ratelimit.decide", "+ratelimit.version")
    uconf = os.path.join(h.tmp, "acl.conf")
    ubody = harness.force_threads("redis redis://ratelimit:s3cret@127.0.0.1:%d/0\nthreads 1\n"
                                  "redis-timeout 1s\n%s" % (h.redis_port, POLICIES))
    with open(uconf, "w") as f:
        f.write(ubody)
    _, uport, umport, ulog = h.spawn_side_agent("agent-acl", ubody)
    harness.wait_ready(umport, harness.threads(1))
    h.wait_until("the ACL user's agent polls the live overrides",
                 lambda: "event=live_control_ready" in harness.read_text(ulog), SEE_SECS)
    u = conn(uport)
    rc, _, err = ctl(uconf, "override", "transfer", "jwt:ACC-ACL", "block", "--for", "1m")
    h.check("ctl as the ACL user: override", rc == 0, err)
    seen_by_all(h, "the ACL user's agent applies the block", [u], "jwt:ACC-ACL",
                lambda d: d.get("reason") == "blocked")
    for args in (("show", "hourly", "jwt:ACC-T1"), ("overrides",), ("top-denied",),
                 ("reset", "hourly", "jwt:ACC-T2"), ("override", "transfer", "jwt:ACC-ACL", "--remove")):
        rc, _, err = ctl(uconf, *args)
        h.check("ctl as the ACL user: %s" % args[0], rc == 0, err)
    for _ in range(3):
        ask(u, "jwt:ACC-ACL2", "hourly")
    h.check("the ACL user's agent writes its denial counts",
            harness.wait_for(lambda: any(x["account"] == "jwt:ACC-ACL2" for x in
                                         ctl_json(h, uconf, "top-denied", "--policy", "hourly")),
                             SEE_SECS))
    h.check("and logs no failure of live control",
            "live_poll_failed" not in harness.read_text(ulog) and
            "denied_flush_failed" not in harness.read_text(ulog), harness.read_text(ulog)[-2000:])

    # -- metrics -------------------------------------------------------------
    m = harness.scrape(h.metrics_port)
    h.check("metrics: live_overrides counts those in effect (ACC-O, ACC-LM, ACC-B; "
            "ACC-LOOSE is stored though refused)", m.get("live_overrides") >= 3,
            m.get("live_overrides"))
    h.check("metrics: live_override_decisions_total{kind=block} counts the blocks",
            m.get("live_override_decisions_total", kind="block") >= 3)
    h.check("metrics: live_override_decisions_total{kind=limits} counts the others",
            m.get("live_override_decisions_total", kind="limits") >= 1)
    h.check("metrics: a block is counted as a deny of its policy",
            m.get("decisions_total", policy="transfer", status="deny") >= 3)
    h.done()
