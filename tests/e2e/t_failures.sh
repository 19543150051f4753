#!/usr/bin/env bash
# Failure modes (docs/operations.md): Redis down -> transfers 503 (fail-closed)
# while reads stay up (fail-open, RateLimit-Limit only); agent down, frozen
# (SIGSTOP) or refusing connections -> 503 on fail-closed routes, while the
# routes routes.map marks "open" pass (no RateLimit header, reason=no-decision
# in the log); each recovers on its own when the process comes back.
# Recovery is polled (reconnect backoff, health checks), never timed.
. "$(dirname "$0")/../lib.sh"
t_setup
start_edge A B

tok=$(mint_token ACC-F1)

# until_status WANT NAME METHOD PATH: retry for up to ~30s until WANT.
until_status() {
	local want=$1; shift
	for _ in $(seq 120); do
		req "$1" "$2" "$3" "$tok"
		[ "$RSP_STATUS" = "$want" ] && return 0
		sleep 0.25
	done
	return 1
}

req A POST /transfers "$tok"; eq "baseline: transfer allowed" 201 "$RSP_STATUS"
req B GET /accounts/ACC-F1 "$tok"; eq "baseline: read allowed" 200 "$RSP_STATUS"

# --- Redis down -------------------------------------------------------------
stop_redis
for inst in A B; do
	req $inst POST /transfers "$tok"
	eq "Redis down, $inst: transfer 503" 503 "$RSP_STATUS"
	eq "Redis down, $inst: problem+json" application/problem+json "$(rsp_hdr Content-Type)"
	check "Redis down, $inst: 503 body carries the agent's reason" \
		grep -Eq '"reason":"redis-(unavailable|timeout)' "$T/rsp.body"
	eq "Redis down, $inst: no RateLimit-Limit on 503" "" "$(rsp_hdr RateLimit-Limit)"

	req $inst GET /accounts/ACC-F1 "$tok"
	eq "Redis down, $inst: read still served (fail-open)" 200 "$RSP_STATUS"
	eq "Redis down, $inst: fail-open read says the limit" 100 "$(rsp_hdr RateLimit-Limit)"
	eq "Redis down, $inst: no Remaining without a count" "" "$(rsp_hdr RateLimit-Remaining)"
	eq "Redis down, $inst: no RateLimit field without a count" "" "$(rsp_hdr RateLimit)"
	eq "Redis down, $inst: RateLimit-Policy still describes the quota" '"reads";q=100;w=60' "$(rsp_hdr RateLimit-Policy)"
done
eq "Redis down: no transfer reached the backend" 1 "$(grep -c 'transfers 201.*account=ACC-F1' "$T/backend.log")"

start_redis "$REDIS_PORT"
check "Redis back: transfers recover by themselves" until_status 201 A POST /transfers
eq "Redis back: RateLimit headers again" 3 "$(rsp_hdr RateLimit-Limit)"
req B GET /accounts/ACC-F1 "$tok"
check "Redis back: reads counted again (Remaining present)" test -n "$(rsp_hdr RateLimit-Remaining)"

# --- Agent down (stopped: connections refused) -------------------------------
# agent_gone WHAT: a transfer gets 503 on both instances, the fail-open
# routes pass (reads by account, anonymous by address) with no RateLimit
# header, and HAProxy's log says why.
agent_gone() {
	local what=$1 inst
	for inst in A B; do
		req $inst POST /transfers "$tok"
		eq "agent $what, $inst: transfer 503" 503 "$RSP_STATUS"
		eq "agent $what, $inst: problem+json" application/problem+json "$(rsp_hdr Content-Type)"
		check "agent $what, $inst: 503 body says no-decision" grep -q '"reason":"no-decision"' "$T/rsp.body"
		req $inst GET /accounts/ACC-F1 "$tok"
		eq "agent $what, $inst: fail-open read passes" 200 "$RSP_STATUS"
		eq "agent $what, $inst: fail-open read has no RateLimit-Limit" "" "$(rsp_hdr RateLimit-Limit)"
		eq "agent $what, $inst: fail-open read has no RateLimit-Policy" "" "$(rsp_hdr RateLimit-Policy)"
		req $inst GET /public/status
		eq "agent $what, $inst: anonymous fail-open default route passes" 200 "$RSP_STATUS"
		req $inst GET /accounts/ACC-F1
		eq "agent $what, $inst: still 401 without a token (identity first)" 401 "$RSP_STATUS"
	done
	check "agent $what: the passed read is logged with reason=no-decision" \
		grep -q 'GET /accounts/ACC-F1 HTTP/1.1" account=ACC-F1 .* reason=no-decision' "$T/haproxy-A.log"
}
stop_agent
: > "$T/haproxy-A.log"
agent_gone stopped
# Once the health check marks the agent DOWN, 503 no longer waits for
# "timeout processing": the edge keeps answering, it does not hang.
req A POST /transfers "$tok"
eq "agent down: still 503 later" 503 "$RSP_STATUS"
req A GET /accounts/ACC-F1 "$tok"
eq "agent down: read still passes later" 200 "$RSP_STATUS"

start_agent "$E2E_REDIS_TIMEOUT
$(edge_policies)"
check "agent back, A: transfers recover" until_status 201 A POST /transfers
check "agent back, B: transfers recover" until_status 201 B POST /transfers
eq "agent back: RateLimit headers again" 3 "$(rsp_hdr RateLimit-Limit)"
req A GET /accounts/ACC-F1 "$tok"
eq "agent back: reads carry RateLimit-Limit again" 100 "$(rsp_hdr RateLimit-Limit)"

# --- Agent frozen (SIGSTOP: connections open, no answer) --------------------
# HAProxy waits "timeout processing" (2s here), then the health check marks
# the agent DOWN; both give no status, the same as an outage.
kill -STOP "$AGENT_PID"
: > "$T/haproxy-A.log"
agent_gone frozen
kill -CONT "$AGENT_PID"
check "agent thawed, A: transfers recover" until_status 201 A POST /transfers
check "agent thawed, B: transfers recover" until_status 201 B POST /transfers
eq "agent thawed: RateLimit headers again" 3 "$(rsp_hdr RateLimit-Limit)"
t_done
