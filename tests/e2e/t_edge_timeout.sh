#!/usr/bin/env bash
# ratelimit-edge takes no timeout the site did not ask for: its defaults
# section sets "timeout client" (HAProxy needs one of a frontend) and nothing
# else, so a frontend "from ratelimit-edge" that restates its own timeout
# client waits for a request exactly as before the merge (HAProxy uses
# timeout client where timeout http-request is not set). Checked on the
# section HAProxy reads, and with haproxy -c -dW on a frontend that restates
# the site's 120 s and nothing more. (Observing a 10 s timeout would take
# 10 s of waiting: the test reads the configuration instead.)
. "$(dirname "$0")/../lib.sh"
t_setup
H=$HAPROXY_FILES

section() { awk '/^defaults ratelimit-edge$/{f=1; next} f && /^[a-z#]/{exit} f' "$1"; }
timeouts=$(section "$H/ratelimit-edge.cfg" | grep -E '^[[:space:]]*timeout[[:space:]]' | awk '{print $2}' | sort | xargs)
eq "ratelimit-edge.cfg's defaults section sets timeout client, and no other timeout" client "$timeouts"
check "ratelimit-block.cfg (pasted into a frontend) sets no timeout" \
	test -z "$(grep -E '^[[:space:]]*timeout[[:space:]]' "$H/ratelimit-block.cfg")"

# A site that never set timeout http-request: its defaults say 120 s of
# timeout client; its frontend restates that, as docs/integrate.md says.
P=$(free_port)
{
	site_head
	echo "    timeout client  120s"
	echo "frontend api from ratelimit-edge"
	echo "    bind 127.0.0.1:$P"
	echo "    timeout client  120s"
	cat "$H/ratelimit-frontend.cfg"
	echo "    default_backend app"
	echo "backend app"
	echo "    server s1 127.0.0.1:1"
} > "$T/site.cfg"
out=$(RL_HAPROXY_DIR=$H RL_APIKEYS_MAP=$H/apikeys.map RL_JWT_PUBKEY=$T/none.pem \
	"$HAPROXY" -c -dW -f "$H/ratelimit-edge.cfg" -f "$T/site.cfg" -f "$H/ratelimit-agent.cfg" 2>&1); rc=$?
eq "a frontend restating only its timeout client: haproxy -c -dW passes ($out)" 0 "$rc"
check "the guide's checklist names timeout http-request" grep -q 'timeout http-request' \
	<(awk '/^## Checklist/{f=1; next} f && /^## /{exit} f' "$ROOT/docs/integrate.md")
t_done
