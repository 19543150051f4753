#!/usr/bin/env bash
# A real haproxy (the SPOP client that is not ours) sends NOTIFYs to the
# agent: decisions come back as txn.rl.* variables; a missing account is an
# error, never an allow; Redis down is an error on a fail-closed policy.
. "$(dirname "$0")/../lib.sh"
t_setup
start_redis
start_agent "policy transfer 3/1s"
HAP_PORT=$(free_port)
export HAP_PORT AGENT_PORT SPOE_CONF="$ROOT/tests/integration/haproxy/minimal-spoe.conf"
"$HAPROXY" -c -f "$ROOT/tests/integration/haproxy/minimal.cfg" >"$T/haproxy-check.log" 2>&1
check "haproxy -c accepts the minimal config" [ $? -eq 0 ]
"$HAPROXY" -f "$ROOT/tests/integration/haproxy/minimal.cfg" -db >>"$T/haproxy.log" 2>&1 &
t_track $!
wait_port "$HAP_PORT" || fail "haproxy did not start"

get() { curl -s -m 5 -H "x-account: $1" "http://127.0.0.1:$HAP_PORT/"; }
for i in 1 2 3; do
	r=$(get ACC-1001)
	eq "request $i allowed" "status=allow limit=3 remaining=$((3 - i)) reset=1 retry_after= reason= err=" "$r"
done
r=$(get ACC-1001)
eq "request 4 denied with retry_after" "status=deny limit=3 remaining=0 reset=1 retry_after=1 reason= err=" "$r"
eq "denied request not recorded" "3" "$(rcli ZCARD transfer:limit:v1:ACC-1001)"
r=$(get ACC-2002)
case $r in status=allow*) ok "another account is independent";; *) fail "another account: $r";; esac
r=$(curl -s -m 5 "http://127.0.0.1:$HAP_PORT/")
case $r in status=error*reason=bad-key*) ok "no account -> error bad-key";; *) fail "no account: $r";; esac
sleep 1.1
r=$(get ACC-1001)
case $r in status=allow*) ok "a second later it passes again";; *) fail "after the window: $r";; esac
stop_redis
r=$(get ACC-1001)
case $r in status=error*reason=redis-unavailable*) ok "redis down -> error (fail-closed)";; *) fail "redis down: $r";; esac
start_redis "$REDIS_PORT"
ok_after=0
for _ in $(seq 40); do
	r=$(get ACC-3003)
	case $r in status=allow*) ok_after=1; break;; esac
	sleep 0.25
done
check "decisions resume after redis restarts (no agent restart)" [ $ok_after -eq 1 ]
t_done
