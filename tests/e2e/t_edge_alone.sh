#!/usr/bin/env bash
# "HAProxy alone" (make bench's baseline, tools/haproxy-cpu.sh) is the demo
# edge with the limiter stripped by tools/edge-alone.sh: it must still be
# the same edge answering by itself. Without any agent or Redis running,
# a transfer with a valid token gets 201 every time (no 503: nothing left
# waits for an answer; no 429), a missing token still gets 401, and no
# RateLimit header is added. If the edge's layout changes so that the
# script strips too little or too much, this fails (and so would the bench).
. "$(dirname "$0")/../lib.sh"
t_setup
jwt_setup || exit 1
start_backend || exit 1
"$ROOT/tools/edge-alone.sh" "$HAPROXY_FILES/haproxy.cfg" >"$T/alone.cfg"
eq "edge-alone.sh strips the limiter" 0 "$?"
check "the stripped edge has no SPOE filter" bash -c "! grep -v '^[[:space:]]*#' '$T/alone.cfg' | grep -q 'filter spoe'"
AGENT_PORT=$(free_port)   # nothing listens there
start_haproxy alone "$T/alone.cfg" || exit 1
tok=$(mint_token ACC-1001)
codes=
for _ in 1 2 3 4 5 6; do
	codes="$codes $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X POST \
		-H "Authorization: Bearer $tok" "http://127.0.0.1:$HAP_PORT_alone/transfers")"
done
eq "6 transfers, no agent: every one 201" " 201 201 201 201 201 201" "$codes"
eq "no token: 401" 401 "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X POST \
	"http://127.0.0.1:$HAP_PORT_alone/transfers")"
hdrs=$(curl -s -D - -o /dev/null --max-time 5 -X POST -H "Authorization: Bearer $tok" \
	"http://127.0.0.1:$HAP_PORT_alone/transfers")
check "no RateLimit header" bash -c "! grep -qi '^ratelimit' <<<'$hdrs'"
t_done
