#!/usr/bin/env bash
# The "Agent down" runbook of docs/operations.md against a real HAProxy (2.6,
# or 3.x with HAPROXY=): with the agent stopped, HAProxy's own SPOE lines have
# the shape of the documented examples for this version, each st= is in the
# documented table and equals the request's spoe_err=, spoe_err=1 comes while
# the agent's server is still UP and the documented "no connection" value once
# it is DOWN, and "show servers state" on the stats socket gives the state the
# runbook reads (6th field: 2 UP, 0 DOWN).
. "$(dirname "$0")/../lib.sh"
t_setup
DOC=$ROOT/docs/operations.md
ver=$("$HAPROXY" -v | sed -n 's/^HA-\{0,1\}Proxy version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p' | head -1)
read -r vmaj vmin <<<"$ver"
echo "# HAProxy $vmaj.$vmin ($HAPROXY)"
# block NAME: the code block under "<!-- t_docs_runbook: NAME -->".
block() {
	awk -v tag="<!-- t_docs_runbook: $1 -->" '
		$0 == tag { f = 1; next }
		f && /^```/ { if (inb) exit; inb = 1; next }
		f && inb { print }' "$DOC"
}
# 3.1 rewrote the SPOE engine: its line and its "no connection" value.
if [ $((vmaj * 100 + vmin)) -ge 301 ]; then examples=$(block spoe-3) down_st=257; else examples=$(block spoe-2.6) down_st=2; fi
check "the runbook has this version's SPOE example lines" test "$(wc -l <<<"$examples")" -eq 2
eq "the runbook's example for a DOWN agent has st=$down_st" "$down_st" \
	"$(sed -n 2p <<<"$examples" | sed -n 's/.* st=\([0-9]*\) .*/\1/p')"
# shape LINE: the example as a regex, its numbers any numbers, st= as written.
shape() { sed -e 's/[][]/\\&/g' -e 's/-\{0,1\}[0-9][0-9]*/-?[0-9]+/g' -e 's/st=-?\[0-9\]+/st=[0-9]+/' <<<"$1"; }
# every value the st= table names (a row, or a 256+N value in its text)
documented_st=$(sed -n '/^| `st=` | what happened/,/^$/p' "$DOC" | grep -o '`[0-9][0-9]*`' | tr -d '`')

export RL_SPOE_TIMEOUT=500ms
start_edge A || { fail "the edge started"; t_done; exit 1; }
sock=$T/haproxy-A.sock   # the site's own stats socket in the runbook
# The runbook's `echo ... | socat - SOCK`, without socat: one command, read to EOF.
admin() { python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(sys.argv[2].encode() + b"\n")
sys.stdout.write(b"".join(iter(lambda: s.recv(4096), b"")).decode())' "$sock" "$1"; }
state() { admin "show servers state be_ratelimit_agent" | awk '$4 == "agent1" { print $6 }'; }
check "the runbook's command is this one" grep -q 'echo "show servers state be_ratelimit_agent" | socat - /run/haproxy/admin.sock' "$DOC"
tok=$(mint_token ACC-DOWN)
req A POST /transfers "$tok"
eq "agent up: 201" 201 "$RSP_STATUS"
eq "show servers state: the agent's server UP (2)" 2 "$(state)"

stop_agent
# The health check marks the server DOWN after 2 failed checks a second
# apart; a machine too busy to send the next request before that has no
# "still UP" request to look at (then either value is the documented one).
up_before=$(state)
req A POST /transfers "$tok"
up_after=$(state)
eq "agent stopped: 503" 503 "$RSP_STATUS"
for _ in $(seq 100); do [ "$(state)" = 0 ] && break; sleep 0.1; done
eq "show servers state: the agent's server DOWN (0)" 0 "$(state)"
req A POST /transfers "$tok"
eq "agent's server DOWN: 503" 503 "$RSP_STATUS"
for _ in $(seq 50); do [ "$(grep -c ' 503 .*key=jwt:ACC-DOWN' "$T/haproxy-A.log")" -ge 2 ] && break; sleep 0.1; done

spoe=$(grep '^SPOE: ' "$T/haproxy-A.log")
echo "$spoe" | sed 's/^/# /'
eq "two SPOE lines, one per refused request" 2 "$(grep -c . <<<"$spoe")"
for i in 1 2; do
	line=$(sed -n "${i}p" <<<"$spoe")
	check "SPOE line $i has the documented shape ($line)" grep -Eq "^$(shape "$(sed -n "${i}p" <<<"$examples")")\$" <<<"$line"
	st=$(sed -n 's/.* st=\([0-9]*\) .*/\1/p' <<<"$line")
	check "SPOE line $i: st=$st is in the runbook's table" grep -qx "$st" <<<"$documented_st"
	sid=$(sed -n 's/.* sid=\([0-9]*\) .*/\1/p' <<<"$line")
	req_line=$(grep ' 503 .*key=jwt:ACC-DOWN' "$T/haproxy-A.log" | sed -n "${i}p")
	check "SPOE line $i: its request logged rl=- reason=no-decision spoe_err=$st ($req_line)" \
		grep -Eq " rl=- .* reason=no-decision .* spoe_err=$st spoe_ms=[0-9]+$" <<<"$req_line"
done
first_st=$(sed -n '1s/.* st=\([0-9]*\) .*/\1/p' <<<"$spoe")
if [ "$up_before$up_after" = 22 ]; then
	eq "while still UP: st=1 (timeout)" 1 "$first_st"
else
	echo "# the server was marked DOWN around the first request ($up_before, $up_after)"
	check "around the DOWN mark: st=$first_st is 1 or $down_st" grep -qx "1\|$down_st" <<<"$first_st"
fi
eq "once DOWN: st=$down_st, as the runbook says for this version" "$down_st" "$(sed -n '2s/.* st=\([0-9]*\) .*/\1/p' <<<"$spoe")"
check "HAProxy logged the server DOWN as the runbook quotes it" \
	grep -q 'Server be_ratelimit_agent/agent1 is DOWN, reason: Layer4 connection problem, info: "Connection refused"' "$T/haproxy-A.log"
t_done
