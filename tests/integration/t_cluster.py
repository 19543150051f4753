#!/usr/bin/env python3
"""The agent on a real Redis Cluster (3 primaries + 3 replicas on loopback,
started here with redis-server --cluster-enabled yes and redis-cli --cluster
create): the story holds, keys land on several primaries, slot routing
honours hash tags (multi-window keys), a slot migration during traffic
(ASK while the key moves, MOVED after) keeps deciding exactly, and the
script cache lost on a node (NOSCRIPT) is recovered.

Killing a primary is t_cluster_failover.py; both use class Cluster below.
"""
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
from harness import AGENT, Harness, race, wait_port  # noqa: E402,F401
import spop  # noqa: E402


def _bindable(port):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def cluster_ports(n):
    """<n> free ports whose cluster bus port (+10000) is free too, both below
    the kernel's ephemeral range (32768+), so that no client socket of a
    parallel test grabs one between our check and redis-server's bind."""
    ports = []
    tries = 0
    while len(ports) < n:
        tries += 1
        if tries > 5000:
            raise RuntimeError("no free port pairs")
        p = random.randint(11000, 22700)
        if p in ports or p + 10000 in ports or p - 10000 in ports:
            continue
        if _bindable(p) and _bindable(p + 10000):
            ports.append(p)
    return ports


def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def key_slot(key):
    k = key.encode()
    o = k.find(b"{")
    if o >= 0:
        c = k.find(b"}", o + 1)
        if c > o + 1:
            k = k[o + 1:c]
    return crc16(k) % 16384


class Cluster:
    """A 3-primary, 3-replica Redis Cluster on loopback, owned by <h>; with
    <tls> (harness.TLSCerts) every node, the bus and replication speak TLS
    only (tests/integration-tls)."""

    def __init__(self, h, primaries=3, replicas=1, node_timeout=1000, tls=None):
        self.h = h
        self.tls = tls
        self.ports = cluster_ports(primaries * (1 + replicas))
        self.procs = {}
        for i, p in enumerate(self.ports):
            for _ in range(5):
                if self.wait_node(self.start_node(p, node_timeout), p):
                    break
                # lost a race for one of the two ports: try another pair
                self.h.stop(self.procs.pop(p))
                p = self.ports[i] = cluster_ports(1)[0]
            else:
                raise RuntimeError("redis %d did not start" % p)
        out = subprocess.run(
            ["redis-cli"] + self.cli_tls() + ["--cluster", "create"] +
            ["127.0.0.1:%d" % p for p in self.ports] +
            ["--cluster-replicas", str(replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError("cluster create failed:\n" + out.stdout + out.stderr)
        if not self.wait_ok(30):
            raise RuntimeError("cluster_state did not become ok")
        if not self.wait_replicas(30, primaries * replicas):
            raise RuntimeError("replicas did not sync")

    def wait_replicas(self, secs, want=1):
        """Until <want> replicas have finished their first sync (a replica
        that never synced is too stale to be promoted; one not yet told to
        replicate is not counted, hence the number)."""
        end = time.time() + secs
        while time.time() < end:
            infos = [self.cli(p, "INFO", "replication") for p in self.alive()]
            reps = [i for i in infos if "role:slave" in i]
            if len(reps) >= want and all("master_link_status:up" in i for i in reps):
                return True
            time.sleep(0.2)
        return False

    def start_node(self, port, node_timeout=1000):
        d = os.path.join(self.h.tmp, "node-%d" % port)
        os.makedirs(d, exist_ok=True)
        listen = ["--port", str(port)]
        if self.tls:
            listen = self.tls.redis_args(port) + ["--tls-cluster", "yes", "--tls-replication", "yes"]
        self.procs[port] = self.h.spawn(
            ["redis-server"] + listen + ["--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(node_timeout), "--save", "", "--appendonly", "no",
             "--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0",
             "--dir", d],
            os.path.join(self.h.tmp, "redis-%d.log" % port))
        return self.procs[port]

    @staticmethod
    def wait_node(proc, port, secs=10.0):
        """Until <port> accepts (True) or <proc> exits (False)."""
        end = time.time() + secs
        while time.time() < end:
            if proc.poll() is not None:
                return False
            if wait_port(port, 0.2):
                return True
        return False

    def kill(self, port):
        self.h.stop(self.procs[port])

    def cli_tls(self):
        return self.tls.cli_args() if self.tls else []

    def cli(self, port, *args):
        out = subprocess.run(["redis-cli", "-p", str(port)] + self.cli_tls() + [str(a) for a in args],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip()

    def alive(self):
        return [p for p in self.ports if self.procs[p].poll() is None]

    def wait_ok(self, secs):
        end = time.time() + secs
        while time.time() < end:
            if all("cluster_state:ok" in self.cli(p, "CLUSTER", "INFO") for p in self.alive()):
                return True
            time.sleep(0.2)
        return False

    def nodes(self, port=None):
        """{node-id: (port, role, [slots...])} from CLUSTER NODES of <port>."""
        res = {}
        for line in self.cli(port or self.alive()[0], "CLUSTER", "NODES").splitlines():
            f = line.split()
            if len(f) < 8:
                continue
            flags = f[2].split(",")
            role = "master" if "master" in flags else "replica"
            if "fail" in flags or "fail?" in flags:
                role += ",fail"
            nport = int(f[1].split("@")[0].rsplit(":", 1)[1])
            res[f[0]] = (nport, role, f[8:])
        return res

    def primaries(self):
        return sorted(p for p, role, _ in self.nodes().values() if role == "master")

    def owner(self, key):
        """Port of the primary that serves <key>, asked of the cluster."""
        slot = key_slot(key)
        for nid, (port, role, slots) in self.nodes().items():
            if not role.startswith("master"):
                continue
            for s in slots:
                if s.startswith("["):
                    continue
                lo, _, hi = s.partition("-")
                if int(lo) <= slot <= int(hi or lo):
                    return port
        return None

    def node_id(self, port):
        return self.cli(port, "CLUSTER", "MYID")

    def rcli(self, *args):
        """A command routed by redis-cli -c (follows MOVED)."""
        out = subprocess.run(["redis-cli", "-c", "-p", str(self.alive()[0])] + self.cli_tls() +
                             [str(a) for a in args],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip()

    def seeds(self, n=2):
        return ",".join("127.0.0.1:%d" % p for p in self.ports[:n])


class EngineCluster(Cluster):
    """A Cluster whose nodes load the module when the suite runs on it
    (SPOA_TEST_REDIS_ENGINE=module), as the harness's own servers do."""

    def start_node(self, port, node_timeout=1000):
        spawn = self.h.spawn
        self.h.spawn = lambda argv, log: spawn(argv + harness.module_args(), log)
        try:
            return super().start_node(port, node_timeout)
        finally:
            self.h.spawn = spawn


def start_agent(h, cluster, extra, threads=2):
    h.agent_port = h.agent_port or __import__("harness").free_port()
    path = os.path.join(h.tmp, "agent.conf")
    with open(path, "w") as f:
        f.write("listen 127.0.0.1:%d\n" % h.agent_port)
        f.write("redis %s://%s\n" % ("cluster+tls" if cluster.tls else "cluster", cluster.seeds()))
        # generous: on a loaded machine a timeout is a (fail-closed) error,
        # and these tests are about routing and counts, not latency
        f.write("redis-timeout 500ms\n")
        f.write("threads %d\n" % threads)
        f.write(extra.strip() + "\n")
    h.agent = h.spawn([AGENT, "-f", path], h.agent_log)
    if not wait_port(h.agent_port):
        raise RuntimeError("agent did not start:\n" + h.log_tail())
    return h.agent


def conn(h):
    c = spop.Conn().connect("127.0.0.1", h.agent_port)
    c.hello()
    return c


def wait_decisions(c, key, policy, secs=20):
    """Until the agent decides (allow/deny) for <key>; returns the last answer."""
    end = time.time() + secs
    d = None
    while time.time() < end:
        d = c.ratelimit(key, policy=policy)["actions"]
        if d.get("status") in ("allow", "deny"):
            return d
        time.sleep(0.1)
    return d


if __name__ == "__main__":
    h = Harness()
    cl = Cluster(h)
    start_agent(h, cl, """
policy transfer 3/1s
policy burst 50/30s
policy api 10/1s 1000/1h
policy mig 100000/1h
policy mw 100000/1h 200000/24h
policy tag 30/1m 40/1h
policy bucket 1/1h algorithm=gcra burst=20
log-level debug
""")
    a, b = conn(h), conn(h)
    wait_decisions(a, "ACC-WARMUP", "transfer")

    # -- our slot function agrees with the cluster's ---------------------------
    keys = ["transfer:limit:v1:{ACC-1001}:1s", "api:limit:v1:{ACC-1001}:1s", "foo", "123456789"]
    h.eq("CRC16 slots agree with CLUSTER KEYSLOT",
         [key_slot(k) for k in keys],
         [int(cl.cli(cl.ports[0], "CLUSTER", "KEYSLOT", k)) for k in keys])

    # -- the story on a cluster -------------------------------------------------
    seen = []
    for i in range(6):
        seen.append((a if i % 2 == 0 else b).ratelimit("ACC-1001")["actions"]["status"])
    h.eq("story: 6 alternating requests -> 3 allow, 3 deny", ["allow"] * 3 + ["deny"] * 3, seen)
    h.eq("story: denied not recorded (on the owning primary)", "3",
         cl.cli(cl.owner("transfer:limit:v1:{ACC-1001}:1s"), "ZCARD", "transfer:limit:v1:{ACC-1001}:1s"))
    time.sleep(1.05)
    h.eq("story: a second later it passes again", "allow",
         a.ratelimit("ACC-1001")["actions"]["status"])

    # -- keys land on several primaries ----------------------------------------
    owners = {}
    for i in range(40):
        k = "ACC-%04d" % i
        d = a.ratelimit(k, policy="burst")["actions"]
        if d["status"] != "allow":
            h.fail("spread: %s decided %r" % (k, d))
            break
        owners.setdefault(cl.owner("burst:limit:v1:{%s}:30s" % k), []).append(k)
    h.eq("40 accounts spread over all 3 primaries", 3, len(owners))
    bad = [(p, k) for p, ks in owners.items() for k in ks
           if cl.cli(p, "EXISTS", "burst:limit:v1:{%s}:30s" % k) != "1"]
    h.eq("each key lives on the primary CRC16 routes it to", [], bad)

    # -- multi-window: one slot, one script call ----------------------------------
    for _ in range(10):
        d = a.ratelimit("ACC-MW", policy="api")["actions"]
    d2 = a.ratelimit("ACC-MW", policy="api")["actions"]
    h.eq("multi-window on a cluster: 10 allowed then deny (no CROSSSLOT)",
         ("allow", 0, "deny"), (d["status"], d["remaining"], d2["status"]))
    p = cl.owner("api:limit:v1:{ACC-MW}:1s")
    h.eq("multi-window keys on one primary, 10 each", ("10", "10"),
         (cl.cli(p, "ZCARD", "api:limit:v1:{ACC-MW}:1s"), cl.cli(p, "ZCARD", "api:limit:v1:{ACC-MW}:1h")))

    # -- accounts with braces: the hash tag is escaped, never empty -----------------
    # "}x" used to give "tag:limit:v1:{}x}:1m": an empty tag, so each window
    # hashed on its whole key, two slots, CROSSSLOT (issue 10 item 19).
    for acc, tag in (("}x", "%7Dx"), ("{a}b", "{a%7Db")):
        results = race(lambda: conn(h), "tag", acc, conns=10, per=5)
        h.eq("account %r, two windows on a cluster: a race admits exactly 30 of 50" % acc,
             (30, 20), (results.count("allow"), results.count("deny")))
        keys = ["tag:limit:v1:{%s}:1m" % tag, "tag:limit:v1:{%s}:1h" % tag]
        p = cl.owner(keys[0])
        h.eq("account %r: both windows on one primary, 30 entries each" % acc, (p, "30", "30"),
             (cl.owner(keys[1]), cl.cli(p, "ZCARD", keys[0]), cl.cli(p, "ZCARD", keys[1])))
        d = a.ratelimit(acc, policy="tag")["actions"]
        h.eq("account %r: then denied by the 1m window" % acc, ("deny", 30), (d["status"], d["limit"]))

    # -- a GCRA bucket on a cluster: one key, the account as its hash tag -----------
    results = race(lambda: conn(h), "bucket", "}g", conns=10, per=3)
    h.eq("gcra on a cluster: a race admits exactly the burst, 20 of 30", (20, 10),
         (results.count("allow"), results.count("deny")))
    gk = "bucket:limit:g1:{%7Dg}"
    h.check("gcra: the bucket is one string on the primary CRC16 routes it to",
            cl.cli(cl.owner(gk), "TYPE", gk) == "string", cl.cli(cl.owner(gk), "TYPE", gk))

    # -- a race across connections on a cluster stays exact ------------------------
    results = race(lambda: conn(h), "burst", "ACC-RACE", conns=10, per=10)
    h.eq("race: 100 requests, exactly 50 admitted", (50, 50),
         (results.count("allow"), results.count("deny")))

    # -- NOSCRIPT on one node is recovered -------------------------------------------
    for port in cl.primaries():
        cl.cli(port, "SCRIPT", "FLUSH")
    fine = all(a.ratelimit("ACC-%04d" % i)["actions"]["status"] == "allow" for i in range(100, 120))
    h.check("after SCRIPT FLUSH on every primary: still decides", fine)

    # -- slot migration during traffic: ASK, then MOVED, exact counts ----------------
    # Two slots move at once: one holds a single-window key, the other the
    # two keys of a multi-window account (moved together by one MIGRATE).
    single = "mig:limit:v1:{ACC-MIG}:1h"
    multi = ["mw:limit:v1:{ACC-MIGW}:1h", "mw:limit:v1:{ACC-MIGW}:24h"]
    moves = []
    for key in (single, multi[0]):
        slot = key_slot(key)
        src = cl.owner(key)
        dst = [p for p in cl.primaries() if p != src][0]
        moves.append((slot, src, dst, cl.node_id(src), cl.node_id(dst)))
    stop = threading.Event()
    counts = {"mig": {}, "mw": {}}
    errors = []

    def traffic(policy, account):
        c = conn(h)
        mine = counts[policy]
        while not stop.is_set():
            d = c.ratelimit(account, policy=policy)["actions"]
            mine[d["status"]] = mine.get(d["status"], 0) + 1
            if d["status"] == "error":
                errors.append((policy, d.get("reason")))
        c.close()

    trs = [threading.Thread(target=traffic, args=("mig", "ACC-MIG")),
           threading.Thread(target=traffic, args=("mw", "ACC-MIGW"))]
    for t in trs:
        t.start()
    time.sleep(0.5)
    # The migration as redis-cli --cluster reshard does it, step by step, so
    # the test can hold the slots in MIGRATING/IMPORTING while traffic runs.
    for slot, src, dst, src_id, dst_id in moves:
        cl.cli(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        cl.cli(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    time.sleep(0.4)
    for slot, src, dst, src_id, dst_id in moves:
        ks = cl.cli(src, "CLUSTER", "GETKEYSINSLOT", slot, 100).split()
        h.check("migration: slot %d still has its keys on the source" % slot, len(ks) >= 1, ks)
        h.eq("migration: MIGRATE moved slot %d's keys" % slot, "OK",
             cl.cli(src, "MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *ks))
    time.sleep(0.6)   # traffic now gets ASK from the source
    # Target first, then source, then the others (the order the Redis
    # Cluster spec asks for, so that no two nodes bounce a request).
    for slot, src, dst, src_id, dst_id in moves:
        for p in [dst, src] + [x for x in cl.primaries() if x not in (src, dst)]:
            cl.cli(p, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    time.sleep(0.6)   # and MOVED afterwards
    stop.set()
    for t in trs:
        t.join()
    h.check("migration: traffic kept flowing", counts["mig"].get("allow", 0) > 20 and
            counts["mw"].get("allow", 0) > 20, counts)
    # A timeout (a stalled machine) is a fail-closed error whose request may
    # still have been recorded; any other error would be a routing bug.
    h.eq("migration: no errors but timeouts while the slots moved", [],
         [e for e in errors if e[1] != "redis-timeout"][:5])

    def exact(policy, n):
        allowed = counts[policy].get("allow", 0)
        timeouts = sum(1 for e in errors if e[0] == policy)
        return allowed <= n <= allowed + timeouts

    dst = moves[0][2]
    n = int(cl.cli(dst, "ZCARD", single) or 0)
    h.check("migration: single-window key on the target, exact count", exact("mig", n),
            (n, counts["mig"]))
    dst = moves[1][2]
    ns = [int(cl.cli(dst, "ZCARD", k) or 0) for k in multi]
    h.check("migration: multi-window keys on the target, exact count in both",
            ns[0] == ns[1] and exact("mw", ns[0]), (ns, counts["mw"]))
    h.eq("after migration: decided on the new owners", ["allow", "allow"],
         [a.ratelimit("ACC-MIG", policy="mig")["actions"]["status"],
          a.ratelimit("ACC-MIGW", policy="mw")["actions"]["status"]])
    with open(h.agent_log) as f:
        log = f.read()
    h.check("the agent followed ASK and MOVED redirects",
            "kind=ask" in log and "kind=moved" in log)

    # -- a reload moves the agent between one Redis and the cluster ----------------
    conf = os.path.join(h.tmp, "agent.conf")
    with open(conf) as f:
        text = f.read()
    h.start_redis()
    with open(conf, "w") as f:
        f.write(text.replace("redis cluster://%s" % cl.seeds(), "redis redis://127.0.0.1:%d/0" % h.redis_port))
    h.agent.send_signal(signal.SIGHUP)
    # the reload lands asynchronously: until it does, decisions still go to
    # the cluster, so wait for one that reached the single server
    d = None
    end = time.time() + 20
    while time.time() < end:
        d = a.ratelimit("ACC-RELOAD", policy="burst")["actions"]
        if d["status"] in ("allow", "deny") and h.rcli("EXISTS", "burst:limit:v1:{ACC-RELOAD}:30s") == "1":
            break
        time.sleep(0.1)
    h.eq("reload to redis://: decided on the single server", ("allow", "1"),
         (d and d["status"], h.rcli("EXISTS", "burst:limit:v1:{ACC-RELOAD}:30s")))
    with open(conf, "w") as f:
        f.write(text)
    h.agent.send_signal(signal.SIGHUP)
    d = None
    end = time.time() + 20
    while time.time() < end:
        d = a.ratelimit("ACC-RELOAD2", policy="burst")["actions"]
        if d["status"] in ("allow", "deny") and \
                cl.cli(cl.owner("burst:limit:v1:{ACC-RELOAD2}:30s"), "EXISTS", "burst:limit:v1:{ACC-RELOAD2}:30s") == "1":
            break
        time.sleep(0.1)
    h.eq("reload back to cluster://: decided on the cluster again", "allow", d and d["status"])
    h.check("the agent ran through both reloads", h.agent.poll() is None)

    h.done()
