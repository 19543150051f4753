#!/usr/bin/env bash
# make bench's self-answering shape (tools/edge-self.sh): the demo edge
# answering by itself instead of proxying, with the limiter (the shipped
# edge) and without it (edge-alone.sh first). No backend runs: nothing
# listens at the backends' addresses. With the limiter, ACC-3001's transfers
# get 201, 201, 201 then 429 (the limiter still decides) with the RateLimit
# headers; a read gets 200; without the limiter every transfer is 201 and
# no RateLimit header is added. If the edge's layout changes so that the
# script turns too little or too much, this fails (and so would the bench).
. "$(dirname "$0")/../lib.sh"
t_setup
jwt_setup || exit 1
start_redis || exit 1
start_agent "$E2E_REDIS_TIMEOUT
$(edge_policies)" || exit 1
TRANSFERS_PORT=$(free_port) ACCOUNTS_PORT=$(free_port)   # nothing listens there
"$ROOT/tools/edge-self.sh" "$HAPROXY_FILES/haproxy.cfg" >"$T/self.cfg"
eq "edge-self.sh turns the shipped edge" 0 "$?"
"$ROOT/tools/edge-alone.sh" "$HAPROXY_FILES/haproxy.cfg" | "$ROOT/tools/edge-self.sh" /dev/stdin >"$T/self-alone.cfg"
eq "edge-self.sh turns edge-alone.sh's output" 0 "$?"
check "no use_backend left" bash -c "! grep -v '^[[:space:]]*#' '$T/self.cfg' | grep -q use_backend"
start_haproxy S "$T/self.cfg" || exit 1
start_haproxy L "$T/self-alone.cfg" || exit 1

tok=$(mint_token ACC-3001)
req_seq POST "$tok" S /transfers S /transfers S /transfers S /transfers
statuses=
for i in 1 2 3 4; do statuses="$statuses $(seq_status $i)"; done
eq "self-answering edge with the limiter: 3 x 201 then 429" " 201 201 201 429" "$statuses"
eq "#1 RateLimit-Policy" '"transfer";q=3;w=1' "$(seq_hdr 1 RateLimit-Policy)"
eq "#1 served by the edge itself" S "$(seq_hdr 1 X-Served-By)"
req S GET /accounts/ACC-3001 "$tok"
eq "a read answered by the edge: 200" 200 "$RSP_STATUS"

tok2=$(mint_token ACC-3002)
codes=
for _ in 1 2 3 4 5; do
	req L POST /transfers "$tok2"
	codes="$codes $RSP_STATUS"
done
eq "self-answering edge without the limiter: every transfer 201" " 201 201 201 201 201" "$codes"
eq "without the limiter: no RateLimit header" "" "$(rsp_hdr RateLimit-Policy)"
req L POST /transfers ""
eq "without the limiter: no token still 401" 401 "$RSP_STATUS"
t_done
