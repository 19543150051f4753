#!/usr/bin/env bash
# An HAProxy reload (-x <stats socket> -sf <old pid>) in the middle of
# traffic: every request before, during and after gets a decision (201 or
# 429 with RateLimit headers), none is refused for lack of one, and the new
# process keeps talking to the agent once the old one has gone. HAProxy 3.1+
# closes its SPOP connections with a TCP reset on reload (no
# HAPROXY-DISCONNECT) and the new process opens all of its own at once: for
# the agent that is a normal close, so nothing at warn/error level and no
# error counted. Then a reload in master-worker mode (SIGUSR2 to the master,
# which re-executes its own binary), as Debian's haproxy.service does.
. "$(dirname "$0")/../lib.sh"
t_setup
jwt_setup
start_redis
# A quota the traffic below cannot exhaust, so every answer should be 201;
# a 429 would still be a decision and is accepted.
MPORT=$(free_port)
start_agent "$E2E_REDIS_TIMEOUT
metrics 127.0.0.1:$MPORT
policy transfer 100000/1m
policy reads    100/1m  on-redis-error=allow"
start_backend
start_haproxy A

tok=$(mint_token ACC-RELOAD)
url="http://127.0.0.1:$HAP_PORT_A/transfers"

# Client loops (load_start), then: let some traffic through, reload, let
# more through (counted, not timed).
load_start POST "$url" "$tok"
load_wait 20
old_pid=$HAP_PID_A
reload_haproxy A
before=$(wc -l < "$T/loop.out")
check "the old process hands over and exits" wait_gone "$old_pid" 40
load_wait $((before + 20))
load_stop

total=$(wc -l < "$T/loop.out")
echo "# $total requests across the reload: $(cut -d' ' -f1 "$T/loop.out" | sort | uniq -c | xargs)"
check "traffic flowed before and after the reload ($total requests)" test "$total" -ge 40
eq "every request got a decision (201/429)" 0 "$(grep -vcE '^(201|429) ' "$T/loop.out")"
eq "every response carried RateLimit-Limit" 0 "$(grep -vc ' 100000$' "$T/loop.out")"
check "the new process is running" kill -0 "$HAP_PID_A"

req A POST /transfers "$tok"
eq "after the reload: allowed" 201 "$RSP_STATUS"
eq "after the reload: decided by the agent" 100000 "$(rsp_hdr RateLimit-Limit)"
eq "after the reload: every admitted request is in the window" \
	"$(grep -c '^201 ' "$T/loop.out" | awk '{ print $1 + 1 }')" "$(rcli zcard transfer:limit:v1:jwt:ACC-RELOAD)"

# A second reload while idle, then decide again.
reload_haproxy A
wait_gone "$HAP_OLD_PID" 40
req A POST /transfers "$tok"
eq "after a second reload: still deciding" 100000 "$(rsp_hdr RateLimit-Limit)"

# Master-worker mode, as Debian's haproxy.service runs it (-Ws; systemctl
# reload sends SIGUSR2): the master re-executes its own binary, which must
# start again as it is (a binary that runs only through a wrapper, such as
# ld.so --library-path, loses its libraries there and the master exits).
start_haproxy M "$ROOT/haproxy/haproxy.cfg" -W
master=$HAP_PID_M
req M POST /transfers "$tok"
eq "master-worker: decided by the agent" 100000 "$(rsp_hdr RateLimit-Limit)"
w1=$(hap_workers "$master")
check "master-worker: one worker ($w1)" test -n "$w1"
kill -USR2 "$master"
check "master-worker: a reload replaces the worker" wait_new_worker "$master" "$w1"
check "master-worker: the master survives its re-exec" kill -0 "$master"
req M POST /transfers "$tok"
eq "master-worker: after the reload, decided by the agent" 100000 "$(rsp_hdr RateLimit-Limit)"

eq "the agent logged nothing at warn or error level across the reloads" "" \
	"$(grep -E 'level=(warn|error)' "$T/agent.log")"
m=$(curl -s -m 5 "http://127.0.0.1:$MPORT/metrics")
check "the agent's metrics were read" grep -q '^ratelimit_spoa_errors_total' <<<"$m"
eq "no agent error counted (errors_total)" 0 \
	"$(awk '/^ratelimit_spoa_errors_total/ { n += $2 } END { print n + 0 }' <<<"$m")"
eq "no malformed frame counted" 0 \
	"$(awk '/^ratelimit_spoa_malformed_frames_total/ { n += $2 } END { print n + 0 }' <<<"$m")"
echo "# agent closes: $(grep -o 'event=conn_close conn=[0-9]* reason="[^"]*"' "$T/agent.log" | sed 's/.*reason=//' | sort | uniq -c | xargs)"
t_done
