#!/usr/bin/env bash
# Static checks of what an SRE copies: haproxy -c with zero warnings, the SPOE
# directives both 2.6 and 3.x need, every txn.rl.* variable referenced
# (docs/configuration.md, "Variables"), the agent accepting the policies
# haproxy.cfg names, compose.yaml.
. "$(dirname "$0")/../lib.sh"
t_setup
jwt_setup
H=$ROOT/haproxy

# haproxy_check CFG: "haproxy -c" with warnings fatal (-dW); prints its
# output less the line 2.6 prints on success (3.x prints nothing), so "" means
# no warning or notice on any version.
haproxy_check() {
	RL_HAPROXY_DIR=$H RL_APIKEYS_MAP=$H/apikeys.map RL_ADMIN_SOCK=$T/admin.sock RL_BIND=127.0.0.1:1 \
		"$HAPROXY" -c -dW -f "$1" 2>&1 | grep -vx 'Configuration file is valid'
	return "${PIPESTATUS[0]}"
}

out=$(haproxy_check "$H/haproxy.cfg"); rc=$?
eq "haproxy -c -dW haproxy.cfg passes" 0 "$rc"
eq "haproxy -c haproxy.cfg prints no warning or notice" "" "$out"
out=$(haproxy_check "$H/backend.cfg"); rc=$?
eq "haproxy -c -dW backend.cfg passes" 0 "$rc"
eq "haproxy -c backend.cfg prints no warning or notice" "" "$out"

# The SPOE file: each directive of the 2.6/3.x compatibility recipe.
spoe=$(sed 's/#.*//' "$H/spoe-ratelimit.conf")
for d in 'timeout hello ' 'timeout idle ' 'timeout processing ' 'option pipelining' \
	'no option async' 'no option send-frag-payload' 'option var-prefix rl' \
	'option set-on-error ' 'spoe-group rl-check' 'use-backend be_ratelimit_agent' \
	'args policy=.* key=.* cost='; do
	check "spoe-ratelimit.conf: $d" grep -Eq "^ *$d" <<<"$spoe"
done
check "spoe-ratelimit.conf: no message sent on an event (only via send-spoe-group)" \
	test -z "$(grep -E '^ *event ' <<<"$spoe")"

cfg=$(sed 's/#.*//' "$H/haproxy.cfg")
check "haproxy.cfg: agent backend in mode tcp (2.6 rejects mode spop)" \
	grep -Pzq 'backend be_ratelimit_agent from ratelimit-agent\n( +[^\n]*\n)*? +mode tcp\n' <<<"$cfg"
check "haproxy.cfg: option spop-check" grep -q 'option spop-check' <<<"$cfg"
check "haproxy.cfg: no mode spop" test -z "$(grep 'mode spop' <<<"$cfg")"
check "haproxy.cfg: send-spoe-group" grep -q 'http-request send-spoe-group ratelimit rl-check' <<<"$cfg"
check "haproxy.cfg: ratelimit-done at the response, only with a lease" \
	grep -q 'http-response send-spoe-group ratelimit rl-done if { var(txn.rl.lease) -m found }$' <<<"$cfg"
check "spoe-ratelimit.conf: ratelimit-done names policy, key, lease, the real cost and the response's headers (settle=), lean or not" \
	grep -Pzq 'spoe-message ratelimit-done\n\.if defined\(RL_IETF_ONLY\)\n +args policy=var\(txn.rl_policy\) key=var\(txn.rl_key\) lease=var\(txn.rl.lease\) cost=var\(txn.rl_real\) hdrs=res.hdrs_bin vars=str\(ietf\)\n\.else\n +args policy=var\(txn.rl_policy\) key=var\(txn.rl_key\) lease=var\(txn.rl.lease\) cost=var\(txn.rl_real\) hdrs=res.hdrs_bin\n\.endif\n' <<<"$spoe"
check "spoe-ratelimit.conf: the agent sends both groups" grep -Eq '^ *groups rl-check rl-done$' <<<"$spoe"
check "haproxy.cfg: 503 unless allow or deny" grep -Eq 'acl rl_decided +var\(txn.rl.status\) -m str allow deny' <<<"$cfg"
# The client's address is an account only on a route whose identity is ip
# (routes.map), and X-Forwarded-For only from a listed trusted proxy.
addr=$(grep -E 'set-var\(txn\.(account|rl_addr)\) +(src|req\.f?hdr(_ip)?\(x-forwarded)' <<<"$cfg")
check "haproxy.cfg: keyed by the client address on ip routes only" \
	test -n "$addr" -a -z "$(grep -v ' if rl_ip' <<<"$addr")"
check "haproxy.cfg: X-Forwarded-For only from RL_TRUSTED_PROXIES" \
	test -z "$(grep 'x-forwarded' <<<"$addr" | grep -v ' if rl_ip { src -f "${RL_TRUSTED_PROXIES}" }$')"
for v in status limit remaining reset retry_after reason window policy_hdr ratelimit_hdr lease; do
	check "haproxy.cfg references txn.rl.$v (HAProxy drops unknown vars)" grep -q "var(txn\.rl\.${v}[,)]" <<<"$cfg"
done
check "register-var-names lists the agent's variables" \
	grep -Eq '^ *register-var-names +status limit remaining reset retry_after reason window policy_hdr ratelimit_hdr pool pool_limit pool_remaining pool_reset lease$' <<<"$spoe"

# jwt_verify must be given a literal algorithm and the key file, not the
# token's own header.
check "jwt_verify pins RS256" grep -q 'jwt_verify("RS256",' <<<"$cfg"

# The routes map names only policies of the shipped agent config (the one
# policies file), and the agent's check says so; a map naming a policy the
# agent lacks fails, naming the line.
out=$("$AGENT" -c -f "$ROOT/etc/ratelimit-spoa.conf" --routes "$H/routes.map" 2>&1); rc=$?
eq "ratelimit-spoa -c --routes accepts the shipped routes.map ($out)" 0 "$rc"
{ echo "listen 127.0.0.1:12345"; echo "redis redis://127.0.0.1:6379/0"; edge_policies; } > "$T/agent-check.conf"
out=$("$AGENT" -c -f "$T/agent-check.conf" 2>&1); rc=$?
eq "the agent accepts the shipped policies ($out)" 0 "$rc"
{ cat "$H/routes.map"; echo "POST/reports reports jwt 2"; } > "$T/routes.map"
out=$("$AGENT" -c -f "$T/agent-check.conf" --routes "$T/routes.map" 2>&1); rc=$?
eq "--routes: a policy the agent lacks fails" 1 "$rc"
eq "--routes: the error names file:line and the policy" \
	"$T/routes.map:$(wc -l < "$T/routes.map"): route 'POST/reports' names policy 'reports', which the agent's config does not define" "$out"
out=$("$AGENT" -f "$T/agent-check.conf" --routes "$T/routes.map" 2>&1); rc=$?
eq "--routes without -c is refused ($out)" 1 "$rc"

# An override key without its identity kind (the shipped block sends
# "jwt:ACC-PARTNER", never "ACC-PARTNER") never matches: -c warns, naming
# file:line, and still accepts the config; every documented example has it.
printf 'policy payout 10/1m\noverride payout ACC-PARTNER 100/1m\noverride payout key:ACC-P2 100/1m\n' > "$T/override.conf"
out=$("$AGENT" -c -f "$T/override.conf" 2>&1); rc=$?
eq "-c: an override without an identity kind is a warning, not an error" 0 "$rc"
check "-c: the warning names file:line and the prefix ($out)" \
	grep -qF "$T/override.conf:2: warning: override 'ACC-PARTNER' of 'payout': the key has no identity kind" <<<"$out"
eq "-c: a prefixed override is not warned about" 1 "$(grep -c warning <<<"$out")"
bare=$(cd "$ROOT" && grep -rnE '^[[:space:]#]*override[[:space:]]+[^[:space:]<]+[[:space:]]+[^[:space:]]+[[:space:]]+[0-9]' \
	docs/*.md README.md etc haproxy compose 2>/dev/null | grep -vE 'override[[:space:]]+[^[:space:]]+[[:space:]]+(jwt|key|cert):' || true)
eq "every override example in the docs carries jwt:, key: or cert:" "" "$bare"

# same_set WHAT WANT GOT: the two word lists hold the same words; a failure
# names what GOT lacks and what it has too many.
same_set() {
	local lack extra
	lack=$(comm -23 <(tr -s ' ' '\n' <<<"$2" | sort -u) <(tr -s ' ' '\n' <<<"$3" | sort -u) | xargs)
	extra=$(comm -13 <(tr -s ' ' '\n' <<<"$2" | sort -u) <(tr -s ' ' '\n' <<<"$3" | sort -u) | xargs)
	eq "$1" "lacks: ; too many: " "lacks: $lack; too many: $extra"
}

# Every directive the parser knows (the table in spoa/config/config_directives.c)
# has a row in docs/configuration.md's directive table and an entry in the man
# page; neither documents one the parser does not know.
known=$(sed -n 's/^[[:space:]]*{ "\([a-z-]*\)", CONFIG_ARG_[A-Z]*,.*/\1/p' "$ROOT/spoa/config/config_directives.c" | sort)
check "the parser's directive table is found ($(wc -w <<<"$known") directives)" test "$(wc -w <<<"$known")" -ge 20
table=$(awk '/^## Directives/{on=1; next} on && /^## /{exit} on' "$ROOT/docs/configuration.md" |
	sed -n 's/^| `\([a-z-]*\)` |.*/\1/p' | sort)
same_set "docs/configuration.md's directive table lists exactly the parser's directives" "$known" "$table"
man=$(awk '/^\.SH CONFIGURATION/{on=1; next} on && /^\.SH /{exit} on && prev ~ /^\.TP/ {print} {prev=$0}' \
	"$ROOT/docs/ratelimit-spoa.8" | sed 's/\\-/-/g' | awk '{print $2}' | sort)
same_set "the man page's CONFIGURATION entries are exactly the parser's directives" "$known" "$man"

# make help names every target of the Makefile, and no target it lacks.
phony=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$ROOT/Makefile" | sed -n 's/^\.PHONY: *//p' |
	tr -s ' \t' '\n\n' | grep . | sort -u)
helped=$(make -s -C "$ROOT" help | grep -oE '\bmake [a-z0-9.-]+( / [a-z0-9.-]+)*' |
	sed 's/^make //; s# / #\n#g' | grep -vx make | sort -u)
check "the Makefile's targets are found ($(wc -w <<<"$phony"))" test "$(wc -w <<<"$phony")" -ge 20
same_set "make help names exactly the Makefile's targets" "$phony" "$helped"

# The demo carries what a site adds (docs/integrate.md, step 2) verbatim:
# ratelimit-edge.cfg's defaults section, and ratelimit-frontend.cfg's lines
# in the frontend that takes it with "from"; the pasted block is the same
# rules, in the same order (its comments aside).
edge_section() { awk '/^defaults ratelimit-edge$/{f=1; print; next} f && /^[a-z#]/{exit} f' "$1" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'; }
rules() { grep -vE '^[[:space:]]*(#|$)' | grep -vE '^    (mode|option|timeout|log) |^defaults '; }
eq "haproxy.cfg holds ratelimit-edge.cfg's defaults section unchanged" \
	"$(edge_section "$H/ratelimit-edge.cfg")" "$(edge_section "$H/haproxy.cfg")"
lines=$(awk '/=== ratelimit-spoa: the lines of a frontend/,/=== end of the ratelimit-spoa lines/' "$H/haproxy.cfg")
eq "haproxy.cfg's frontend holds ratelimit-frontend.cfg unchanged" "$(cat "$H/ratelimit-frontend.cfg")" "$lines"
check "haproxy.cfg: the frontend takes it (from ratelimit-edge)" grep -qx 'frontend api from ratelimit-edge' "$H/haproxy.cfg"
eq "ratelimit-block.cfg: ratelimit-edge.cfg's rules, then ratelimit-frontend.cfg's" \
	"$( { edge_section "$H/ratelimit-edge.cfg" | rules; grep -v '^    log global$' "$H/ratelimit-frontend.cfg" | rules; } )" \
	"$(rules < "$H/ratelimit-block.cfg")"
eq "haproxy.cfg holds haproxy/ratelimit-agent.cfg's backend unchanged" \
	"$(awk '/^defaults ratelimit-agent/{f=1} f' "$H/ratelimit-agent.cfg")" \
	"$(awk '/^defaults ratelimit-agent/{f=1} f' "$H/haproxy.cfg")"
check "haproxy.cfg knows no window (the agent formats RateLimit-Policy)" \
	test -z "$(grep -E 'rl_window|;w=' <<<"$cfg")"

# Tokens.
dec=$("$ROOT/tools/jwt.sh" decode "$(mint_token ACC-1001)")
eq "jwt.sh mints RS256" RS256 "$(sed -n 1p <<<"$dec" | jq -r .alg)"
eq "jwt.sh puts the account in sub" ACC-1001 "$(sed -n 2p <<<"$dec" | jq -r .sub)"
check "no private key is committed" test -z "$(cd "$ROOT" && git ls-files -z | xargs -0 grep -lE -- '-----BEGIN [A-Z ]*PRIVATE KEY-----' 2>/dev/null)"

# Compose: validated only (no Docker engine on these machines): the YAML,
# then haproxy -c on the config as compose runs it (resolvers file first, the
# edge's environment with its paths mapped to the repo).
check "Dockerfile builds from debian:bookworm" grep -q '^FROM debian:bookworm' "$ROOT/Dockerfile"
python3 "$ROOT/tests/e2e/compose_check.py" "$ROOT"
# compose_hap_check HOST...: haproxy -c -dW as an edge of compose.yaml; with
# the service names made loopback ones (they resolve only inside Docker).
compose_hap_check() {
	(
		eval "$(python3 "$ROOT/tests/e2e/compose_check.py" "$ROOT" --edge-env)"
		[ "${1:-}" = loopback ] && { RL_AGENT_ADDR=localhost:12345
			RL_TRANSFERS_ADDR=localhost:8091 RL_ACCOUNTS_ADDR=localhost:8092; }
		export RL_AGENT_ADDR RL_TRANSFERS_ADDR RL_ACCOUNTS_ADDR RL_SERVER_OPTS RL_INSTANCE RL_LOG
		RL_HAPROXY_DIR=$H RL_ADMIN_SOCK=$T/admin-compose.sock RL_BIND=127.0.0.1:1 \
			"$HAPROXY" -c -dW -f "$ROOT/compose/haproxy-resolvers.cfg" -f "$H/haproxy.cfg" 2>&1 |
			grep -vx 'Configuration file is valid'
		exit "${PIPESTATUS[0]}"
	)
}
out=$(compose_hap_check loopback); rc=$?
eq "haproxy -c -dW: the compose edge config (resolvers docker) passes ($out)" 0 "$rc"
eq "haproxy -c: the compose edge config prints no warning" "" "$out"
out=$(compose_hap_check names)
check "haproxy -c: with compose's names, only 'could not resolve' (init-addr none) is said" \
	test -z "$(grep -E 'WARNING|ALERT' <<<"$out" | grep -v -e 'could not resolve address' -e 'zero-warning')"
{ cat "$ROOT/compose/agent.conf"; grep -E '^(policy|override)[[:space:]]' "$ROOT/etc/ratelimit-spoa.conf"; } > "$T/agent-compose.conf"
out=$("$AGENT" -c -f "$T/agent-compose.conf" 2>&1); rc=$?
eq "the agent accepts compose's mounted config + policies ($out)" 0 "$rc"
# The agent backend beside a site's own defaults (option forwardfor, option
# httplog, mode http): its own defaults section keeps them out, so -dW
# (warnings fatal) stays clean.
{ site_head; cat <<EOF; } > "$T/site.cfg"
frontend site
    bind 127.0.0.1:$(free_port)
    filter spoe engine ratelimit config $H/spoe-ratelimit.conf
    default_backend app
backend app
    server s1 127.0.0.1:1
EOF
out=$(RL_HAPROXY_DIR=$H "$HAPROXY" -c -dW -f "$T/site.cfg" -f "$H/ratelimit-agent.cfg" 2>&1); rc=$?
eq "site defaults with forwardfor/httplog + ratelimit-agent.cfg: haproxy -c -dW passes ($out)" 0 "$rc"
check "site defaults + ratelimit-agent.cfg: no warning" test -z "$(grep -E 'WARNING|ALERT' <<<"$out")"
t_done
