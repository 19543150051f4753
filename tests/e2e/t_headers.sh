#!/usr/bin/env bash
# The response contract: RateLimit-Limit/-Remaining/-Reset and the draft's
# RateLimit-Policy / RateLimit on every response that carries a decision
# (backend success, backend error, HAProxy's own 429), consistent with each
# other, and on nothing else (401, an exempt path). Each case uses its own account, so
# only the 429 case depends on requests sharing a window (one curl burst).
. "$(dirname "$0")/../lib.sh"
t_setup
start_edge A B

# consistent WHAT POLICY LIMIT WINDOW: the five headers of the last req agree.
consistent() {
	local what=$1 pol=$2 lim=$3 win=$4 rem reset
	rem=$(rsp_hdr RateLimit-Remaining); reset=$(rsp_hdr RateLimit-Reset)
	eq "$what: RateLimit-Limit" "$lim" "$(rsp_hdr RateLimit-Limit)"
	check "$what: RateLimit-Remaining is an integer in 0..$lim ('$rem')" \
		test -n "$rem" -a "$rem" -ge 0 -a "$rem" -le "$lim"
	check "$what: RateLimit-Reset is whole seconds in 0..$win ('$reset')" \
		test -n "$reset" -a "$reset" -ge 0 -a "$reset" -le "$win"
	eq "$what: RateLimit-Policy" "\"$pol\";q=$lim;w=$win" "$(rsp_hdr RateLimit-Policy)"
	eq "$what: RateLimit" "\"$pol\";r=$rem;t=$reset" "$(rsp_hdr RateLimit)"
}

req A POST /transfers "$(mint_token ACC-H1)"
eq "allowed transfer: 201 from the backend" 201 "$RSP_STATUS"
consistent "allowed transfer" transfer 3 1
eq "allowed transfer: remaining after the first" 2 "$(rsp_hdr RateLimit-Remaining)"

req B POST /transfers "$(mint_token ACC-H2)" -H "X-Demo-Status: 500"
eq "backend error: 500 passes through" 500 "$RSP_STATUS"
consistent "backend error" transfer 3 1

req B GET /accounts/ACC-H3 "$(mint_token ACC-H3)"
eq "read route: 200" 200 "$RSP_STATUS"
consistent "read route" reads 100 60
eq "read route: remaining" 99 "$(rsp_hdr RateLimit-Remaining)"

# Four transfers in one burst: the fourth is HAProxy's own 429.
req_seq POST "$(mint_token ACC-H4)" A /transfers B /transfers A /transfers B /transfers
eq "burst: 3 pass then 429" "201 201 201 429" "$(cut -d' ' -f1 "$T/seq.out" | xargs)"
eq "429: RateLimit-Limit" 3 "$(seq_hdr 4 RateLimit-Limit)"
eq "429: RateLimit-Remaining" 0 "$(seq_hdr 4 RateLimit-Remaining)"
eq "429: RateLimit-Policy" '"transfer";q=3;w=1' "$(seq_hdr 4 RateLimit-Policy)"
eq "429: RateLimit matches the trio" "\"transfer\";r=0;t=$(seq_hdr 4 RateLimit-Reset)" "$(seq_hdr 4 RateLimit)"
ra=$(seq_hdr 4 Retry-After); rs=$(seq_hdr 4 RateLimit-Reset)
check "429: Retry-After ($ra) >= 1 and not before the reset ($rs)" test -n "$ra" -a "$ra" -ge 1 -a "$ra" -ge "$rs"
eq "429: body retry_after equals the header" "$ra" "$(jq -r .retry_after "$T/seq.body.4")"
eq "429: problem type" "https://iana.org/assignments/http-problem-types#quota-exceeded" "$(jq -r .type "$T/seq.body.4")"
eq "429: problem status" 429 "$(jq -r .status "$T/seq.body.4")"
eq "429: problem names the violated policy" '["transfer"]' "$(jq -c '."violated-policies"' "$T/seq.body.4")"
for i in 1 2 3; do
	eq "allowed #$i: no Retry-After" "" "$(seq_hdr $i Retry-After)"
done

# A policy with two windows (exports: 2/1s 5/1h): RateLimit-Policy lists
# both items, RateLimit names the window that decided. The agent formats
# both; haproxy.cfg knows no window. Requests go one by one, waiting out the
# 1s window whenever it denies, until the 1h window is what denies.
tok=$(mint_token ACC-H7)
req A POST /exports "$tok"
eq "multi-window: first export allowed" 201 "$RSP_STATUS"
eq "multi-window: RateLimit-Policy lists every window" \
	'"exports-1s";q=2;w=1, "exports-1h";q=5;w=3600' "$(rsp_hdr RateLimit-Policy)"
eq "multi-window: the 1s window decides first (least remaining)" '"exports-1s";r=1;t=1' "$(rsp_hdr RateLimit)"
admitted=1
for _ in $(seq 40); do
	req B POST /exports "$tok"
	if [ "$RSP_STATUS" = 201 ]; then
		admitted=$((admitted + 1))
	elif [ "$RSP_STATUS" = 429 ] && [ "$(rsp_hdr Retry-After)" -gt 1 ]; then
		break
	else
		sleep 0.3   # the 1s window denied: wait until it admits again
	fi
done
eq "multi-window: 5 exports admitted in the hour" 5 "$admitted"
eq "multi-window: then 429" 429 "$RSP_STATUS"
eq "multi-window: RateLimit-Policy on the 429" \
	'"exports-1s";q=2;w=1, "exports-1h";q=5;w=3600' "$(rsp_hdr RateLimit-Policy)"
rs=$(rsp_hdr RateLimit-Reset)
check "multi-window: the 1h window decides (reset $rs s)" test "$rs" -gt 1 -a "$rs" -le 3600
eq "multi-window: RateLimit names the 1h window" "\"exports-1h\";r=0;t=$rs" "$(rsp_hdr RateLimit)"
eq "multi-window: RateLimit-Limit is the deciding window's" 5 "$(rsp_hdr RateLimit-Limit)"
eq "multi-window: the problem names the violated item" exports-1h "$(jq -r '."violated-policies"[0]' "$T/rsp.body")"
eq "multi-window: quota-exceeded problem type" "https://iana.org/assignments/http-problem-types#quota-exceeded" "$(jq -r .type "$T/rsp.body")"

# No decision, no headers.
req A POST /transfers ""
eq "401: no RateLimit-Limit" "" "$(rsp_hdr RateLimit-Limit)"
eq "401: no RateLimit" "" "$(rsp_hdr RateLimit)"
# An unlisted path takes routes.map's default line: counted by address, its
# decision in the headers of the demo's 404.
req A GET /nowhere "$(mint_token ACC-H5)"
eq "unlisted path: 404" 404 "$RSP_STATUS"
check "unlisted path: the default route decided ($(rsp_hdr RateLimit-Policy))" \
	grep -q '^"anon";' <<<"$(rsp_hdr RateLimit-Policy)"
eq "unlisted path: counted by address, not by the token's account" "0 1" \
	"$(rcli exists reads:limit:v1:jwt:ACC-H5) $(rcli exists anon:limit:v1:ip:127.0.0.1)"
# An exempt path: no decision, no headers.
req A GET /healthz ""
eq "exempt /healthz: 200" 200 "$RSP_STATUS"
eq "exempt /healthz: no RateLimit-Limit" "" "$(rsp_hdr RateLimit-Limit)"

# The backend itself is down: HAProxy's own 503 comes after an allow, so it
# still carries the decision (and is not the no-decision problem document).
kill -TERM "$BACKEND_PID"; wait_gone "$BACKEND_PID"
req A POST /transfers "$(mint_token ACC-H6)"
eq "backend down: HAProxy's 503" 503 "$RSP_STATUS"
eq "backend down: RateLimit-Limit still there" 3 "$(rsp_hdr RateLimit-Limit)"
eq "backend down: RateLimit-Remaining still there" 2 "$(rsp_hdr RateLimit-Remaining)"
t_done
