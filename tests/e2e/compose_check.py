"""Static checks of compose.yaml (no Docker engine on these machines).

    python3 tests/e2e/compose_check.py ROOT        prints ok / not ok lines
    python3 tests/e2e/compose_check.py ROOT --edge-env
        prints the edge's environment as shell assignments (for haproxy -c)
"""
import shlex
import sys

import yaml

root = sys.argv[1]
with open(f"{root}/compose.yaml") as f:
    doc = yaml.safe_load(f)
svcs = doc["services"]

if sys.argv[2:] == ["--edge-env"]:
    for k, v in svcs["haproxy-a"]["environment"].items():
        print(f"{k}={shlex.quote(str(v))}")
    sys.exit(0)

fails = 0


def check(what, cond):
    global fails
    print(("ok - " if cond else "not ok - ") + what)
    fails += 0 if cond else 1


check("compose.yaml: the demo topology",
      sorted(svcs) == ["agent", "backend", "haproxy-a", "haproxy-b", "keys", "redis"])
for name, s in sorted(svcs.items()):
    hc = s.get("healthcheck", {})
    check(f"compose.yaml: {name} has a healthcheck", bool(hc.get("test")))
    for dep, cond in (s.get("depends_on") or {}).items() if isinstance(s.get("depends_on"), dict) else []:
        want = "service_completed_successfully" if dep == "keys" else "service_healthy"
        check(f"compose.yaml: {name} waits for {dep} to be {want}", cond.get("condition") == want)
for name in ("haproxy-a", "haproxy-b", "backend"):
    img = svcs[name]["image"]
    check(f"compose.yaml: {name} runs an HAProxy CI tests ({img})",
          img in ("${HAPROXY_IMAGE:-haproxy:3.2}", "${HAPROXY_IMAGE:-haproxy:2.6}"))
for name in ("haproxy-a", "haproxy-b"):
    env = svcs[name]["environment"]
    check(f"compose.yaml: {name} resolves servers through Docker's DNS",
          env.get("RL_SERVER_OPTS") == "resolvers docker init-addr last,libc,none")
    check(f"compose.yaml: {name} loads the resolvers before haproxy.cfg",
          any("resolvers.cfg" in v for v in svcs[name]["volumes"])
          and svcs[name]["command"].index("/usr/local/etc/haproxy-compose/resolvers.cfg")
          < svcs[name]["command"].index("/usr/local/etc/haproxy/haproxy.cfg"))
vols = svcs["agent"].get("volumes", [])
check("compose.yaml: the agent's config is mounted",
      "./compose/agent.conf:/etc/ratelimit-spoa/agent.conf:ro" in vols
      and any(v.startswith("./etc/ratelimit-spoa.conf:") for v in vols))
with open(f"{root}/Dockerfile") as f:
    df = f.read()
code = [l for l in df.splitlines() if not l.lstrip().startswith("#")]
check("Dockerfile bakes no agent configuration",
      not any("policies" in l or "> /etc/ratelimit-spoa" in l for l in code))
sys.exit(1 if fails else 0)
