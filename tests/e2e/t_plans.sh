#!/usr/bin/env bash
# Usage plans through the shipped edge (issue 39), two HAProxy instances:
#   - JWTs whose claim "plan" (RL_PLAN_CLAIM=plan) is free or pro get their
#     plan's limits on POST /transfers, across A and B: free 2 x 201 then
#     429, pro 4 x 201 then 429, each announced in RateLimit-Policy; a token
#     without the claim gets the policy's own 3; a plan the agent does not
#     know ("gold") gets the policy's own 3 too, logged as unknown_plan;
#   - an API key map with a plan column ("<key> <account> plan=<plan>"):
#     the key's plan on GET /partner/accounts/, the account without the
#     column's word, and a line without it keeps working (the policy's own);
#   - a client certificate map (RL_CERT_PLANS_MAP, "<CN> plan=<plan>") on a
#     mutual-TLS listener: the certificate's plan on GET /internal/accounts/;
#   - ratelimit-spoa -c --plans checks the maps' plans against the config.
# Windows of a minute: no assertion depends on timing.
. "$(dirname "$0")/../lib.sh"
t_setup
jwt_setup
start_backend
policies="$(edge_policies | sed -E 's|^policy[[:space:]]+transfer[[:space:]].*$|policy transfer 3/1m|')
plan free transfer 2/1m
plan pro  transfer 4/1m
plan free reads 2/1m
plan pro  reads 4/1m"
printf '%s\n' '# test keys' 'k-free ACC-KF plan=free' 'k-pro ACC-KP plan=pro' 'k-none ACC-KN' \
	> "$T/apikeys.map"
printf '%s\n' 'svc-pro plan=pro' > "$T/cert-plans.map"
# a client CA, the edge's server certificate, and client certificates by CN
pki=$T/pki; mkdir -p "$pki"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=client-ca \
	-keyout "$pki/ca.key" -out "$pki/ca.pem" 2>/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=edge \
	-keyout "$pki/edge.key" -out "$pki/edge.pem" 2>/dev/null
cat "$pki/edge.pem" "$pki/edge.key" > "$pki/edge.bundle"
for cn in svc-pro svc-none; do
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$cn" \
		-keyout "$pki/$cn.key" -out "$pki/$cn.csr" 2>/dev/null
	openssl x509 -req -in "$pki/$cn.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 2 -out "$pki/$cn.pem" 2>/dev/null
done
TLS_PORT=$(free_port)
export RL_PLAN_CLAIM=plan RL_APIKEYS_MAP=$T/apikeys.map RL_CERT_PLANS_MAP=$T/cert-plans.map
start_redis
start_agent "$E2E_REDIS_TIMEOUT
$policies"
RL_TLS_BIND=127.0.0.1:$TLS_PORT RL_TLS_CERT=$pki/edge.bundle RL_TLS_CA=$pki/ca.pem start_haproxy A
start_haproxy B

# statuses N: the statuses of the last req_seq's N responses, space-separated
statuses() { local i s=''; for i in $(seq "$1"); do s="$s $(seq_status "$i")"; done; echo "${s# }"; }

# --- JWT claim ---------------------------------------------------------------
req_seq POST "$(mint_token ACC-F --claims '"plan":"free"')" A /transfers B /transfers A /transfers
eq "plan free: 2 x 201 then 429 across A and B" "201 201 429" "$(statuses 3)"
eq "plan free: RateLimit-Policy announces its 2/1m" '"transfer";q=2;w=60' "$(seq_hdr 1 RateLimit-Policy)"
eq "plan free: RateLimit-Limit 2" 2 "$(seq_hdr 2 RateLimit-Limit)"

req_seq POST "$(mint_token ACC-P --claims '"plan":"pro"')" A /transfers B /transfers A /transfers \
	B /transfers A /transfers
eq "plan pro: 4 x 201 then 429 across A and B" "201 201 201 201 429" "$(statuses 5)"
eq "plan pro: RateLimit-Policy announces its 4/1m" '"transfer";q=4;w=60' "$(seq_hdr 4 RateLimit-Policy)"
eq "plan pro: the 429 has a Retry-After" true "$([ -n "$(seq_hdr 5 Retry-After)" ] && echo true)"

req_seq POST "$(mint_token ACC-N)" A /transfers B /transfers A /transfers B /transfers
eq "no plan claim: the policy's own 3" "201 201 201 429" "$(statuses 4)"
eq "no plan claim: RateLimit-Limit 3" 3 "$(seq_hdr 1 RateLimit-Limit)"

req_seq POST "$(mint_token ACC-G --claims '"plan":"gold"')" A /transfers B /transfers A /transfers B /transfers
eq "unknown plan gold: the policy's own 3, never a 503" "201 201 201 429" "$(statuses 4)"
check "the agent logs unknown_plan" grep -q 'event=unknown_plan policy=transfer plan="gold"' "$T/agent.log"

# --- API key map with a plan column -----------------------------------------
for c in "k-free|ACC-KF|2|200 200 429" "k-pro|ACC-KP|4|200 200 200 200 429" "k-none|ACC-KN|100|200 200 200 200 200"; do
	IFS='|' read -r k acc lim want <<<"$c"
	got=''
	for i in $(seq "$(wc -w <<<"$want")"); do
		inst=A; [ $((i % 2)) = 0 ] && inst=B
		req "$inst" GET /partner/accounts/x "" -H "X-API-Key: $k"
		got="$got $RSP_STATUS"
		[ "$i" = 1 ] && { eq "$k: X-Account is the account alone" "$acc" "$(jq -r .account "$T/rsp.body")"
			eq "$k: RateLimit-Limit $lim" "$lim" "$(rsp_hdr RateLimit-Limit)"; }
	done
	eq "$k: statuses across A and B" "$want" "${got# }"
done

# --- client certificate map ---------------------------------------------------
for c in "svc-pro|4" "svc-none|100"; do
	IFS='|' read -r cn lim <<<"$c"
	RSP_STATUS=$(curl -s -m 10 -k --cert "$pki/$cn.pem" --key "$pki/$cn.key" -D "$T/rsp.hdr" \
		-o "$T/rsp.body" -w '%{http_code}' "https://127.0.0.1:$TLS_PORT/internal/accounts/x")
	eq "certificate $cn: 200" 200 "$RSP_STATUS"
	eq "certificate $cn: RateLimit-Limit $lim" "$lim" "$(rsp_hdr RateLimit-Limit)"
done

# --- -c --plans: the maps' plans against the agent's config -----------------
out=$("$AGENT" -c -f "$T/agent.conf" --plans "$T/apikeys.map" --plans "$T/cert-plans.map" 2>&1); rc=$?
eq "-c --plans on both maps: valid" 0 "$rc"
check "-c --plans on both maps: no warning" test -z "$(grep warning <<<"$out")"
echo 'k-gold ACC-KG plan=gold' >> "$T/apikeys.map"
out=$("$AGENT" -c -f "$T/agent.conf" --plans "$T/apikeys.map" 2>&1)
check "-c --plans warns of plan gold with map:line" \
	grep -q "apikeys.map:5: warning: plan 'gold' is no plan of this config" <<<"$out"
t_done
