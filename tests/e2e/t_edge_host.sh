#!/usr/bin/env bash
# The host a host-scoped line of routes.map matches is the host the backend
# acts on, in every spelling HTTP allows, or the request is refused (400):
# a trailing dot, any case, a port, the absolute form ("GET http://host/x",
# with and without Host; its authority wins), HTTP/2's :authority, an IPv6
# literal. Raw requests (a socket, not curl), so the request line and
# headers are exactly the ones written here. Run on 2.6 and 3.2.
. "$(dirname "$0")/../lib.sh"
t_setup

mkdir -p "$T/hap"
cp -r "$ROOT/haproxy/." "$T/hap/"
cat > "$T/hap/routes.map" <<'MAP'
api.example.com:GET/accounts/   admin    jwt
api.example.com:POST/transfers  strict   ip
*                               anon     ip   fail=open
MAP
POLICIES="policy admin 100/1m
policy strict 2/1m
policy anon 60/1m on-redis-error=allow"
printf 'listen 127.0.0.1:1\nredis redis://127.0.0.1:1/0\n%s\n' "$POLICIES" > "$T/check.conf"
check "the agent accepts the map (--routes)" "$AGENT" -c -f "$T/check.conf" --routes "$T/hap/routes.map"

HAPROXY_FILES=$T/hap
jwt_setup
start_redis
start_agent "$E2E_REDIS_TIMEOUT
$POLICIES"
start_backend
start_haproxy A

# raw REQUEST: send REQUEST (printf escapes: \r\n) on one connection, write
# the response head to $T/raw.hdr; RSP_STATUS is its status code (000: none).
# raw_h2 NAME=VALUE...: the same as one HTTP/2 request (prior knowledge),
# headers as literals in the order given.
cat > "$T/raw.py" <<'PY'
import socket, struct, sys
port, mode = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(10)
def frame(t, flags, sid, p):
    return struct.pack(">I", len(p))[1:] + bytes([t, flags]) + struct.pack(">I", sid) + p
def hlen(n):  # an HPACK length, 7-bit prefix, no Huffman
    if n < 127:
        return bytes([n])
    out, n = [127], n - 127
    while n >= 128:
        out.append((n & 127) | 128); n >>= 7
    return bytes(out + [n])
def status_of(block):  # the response's :status: indexed (8..14) or literal
    b = block[0]
    if b & 0x80:
        return {8: "200", 9: "204", 10: "206", 11: "304", 12: "400", 13: "404", 14: "500"}.get(b & 0x7f, "???")
    name = b & 0x3f if b & 0x40 else b & 0x0f
    if name != 8 or block[1] & 0x80:  # not :status, or Huffman-coded
        return "???"
    return block[2:2 + block[1]].decode()
if mode == "h1":
    s.sendall(sys.argv[3].encode("latin1").decode("unicode_escape").encode("latin1"))
    data = b""
    while b"\r\n\r\n" not in data:
        b = s.recv(65536)
        if not b:
            break
        data += b
    head = data.split(b"\r\n\r\n")[0].decode("latin1")
    print(head)
else:
    block = b"".join(b"\x00" + hlen(len(k)) + k.encode() + hlen(len(v)) + v.encode()
                     for k, v in (a.split("=", 1) for a in sys.argv[3:]))
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"") + frame(1, 5, 1, block))
    data, status = b"", None
    while status is None:
        b = s.recv(65536)
        if not b:
            break
        data += b
        i = 0
        while i + 9 <= len(data):
            n, t, sid = int.from_bytes(data[i:i + 3], "big"), data[i + 3], int.from_bytes(data[i + 5:i + 9], "big")
            if i + 9 + n > len(data):
                break
            if t == 1 and sid == 1:
                status = status_of(data[i + 9:i + 9 + n])
            i += 9 + n
    print("HTTP/2 %s" % (status or "000"))
PY
raw() {
	python3 "$T/raw.py" "$HAP_PORT_A" h1 "$1" > "$T/raw.hdr" 2>/dev/null
	RSP_STATUS=$(head -1 "$T/raw.hdr" | awk '{print $2}'); RSP_STATUS=${RSP_STATUS:-000}
}
raw_h2() {
	python3 "$T/raw.py" "$HAP_PORT_A" h2 :method=GET :scheme=http "$@" > "$T/raw.hdr" 2>/dev/null
	RSP_STATUS=$(head -1 "$T/raw.hdr" | awk '{print $2}'); RSP_STATUS=${RSP_STATUS:-000}
}
raw_policy() { sed -n 's/^[Rr]ate[Ll]imit-[Pp]olicy: "\([^"]*\)".*/\1/p' "$T/raw.hdr" | tr -d '\r'; }

TOKEN=$(mint_token ACC-ADMIN)
G='GET /accounts/ACC-1'
# --- the host's own line, in each spelling: 401 without a token ----------------
while IFS='|' read -r what request; do
	raw "$request"
	eq "api.example.com's jwt line, $what: 401" 401 "$RSP_STATUS"
done <<EOF2
Host as written|$G HTTP/1.1\r\nHost: api.example.com\r\n\r\n
Host with a trailing dot|$G HTTP/1.1\r\nHost: api.example.com.\r\n\r\n
Host in upper case with a port|$G HTTP/1.1\r\nHost: API.EXAMPLE.COM:8080\r\n\r\n
Host with a trailing dot and a port|$G HTTP/1.1\r\nHost: api.example.com.:8080\r\n\r\n
Host with an empty port|$G HTTP/1.1\r\nHost: api.example.com:\r\n\r\n
absolute form without Host|GET http://api.example.com/accounts/ACC-1 HTTP/1.1\r\n\r\n
absolute form with a trailing dot, without Host|GET http://api.example.com./accounts/ACC-1 HTTP/1.1\r\n\r\n
absolute form, HTTPS scheme in upper case, port, without Host|GET HTTPS://Api.Example.Com:443/accounts/ACC-1 HTTP/1.1\r\n\r\n
absolute form with the same Host|GET http://API.example.com:80/accounts/ACC-1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n
absolute form on HTTP/1.0|GET http://api.example.com/accounts/ACC-1 HTTP/1.0\r\n\r\n
EOF2
raw_h2 :authority=api.example.com. :path=/accounts/ACC-1
eq "api.example.com's jwt line, HTTP/2 :authority with a trailing dot: 401" 401 "$RSP_STATUS"
raw_h2 :path=/accounts/ACC-1 host=API.example.com.
eq "api.example.com's jwt line, HTTP/2 without :authority, Host with a trailing dot: 401" 401 "$RSP_STATUS"
raw_h2 :authority=api.example.com :path=/accounts/ACC-1 host=www.example.com
eq "HTTP/2 :authority api.example.com, Host www.example.com: the authority wins (401)" 401 "$RSP_STATUS"
raw_h2 :authority=www.example.com :path=/accounts/ACC-1 host=api.example.com
eq "HTTP/2 :authority www.example.com, Host api.example.com: the authority wins (the default line, 200)" 200 "$RSP_STATUS"

raw "$G HTTP/1.1\r\nHost: api.example.com.\r\nAuthorization: Bearer $TOKEN\r\n\r\n"
eq "a trailing dot with a token: served" 200 "$RSP_STATUS"
eq "... under api.example.com's policy" admin "$(raw_policy)"
raw "$G HTTP/1.1\r\nHost: www.example.com.\r\n\r\n"
eq "another host with a trailing dot: the default line (served)" 200 "$RSP_STATUS"
eq "... under anon" anon "$(raw_policy)"
raw "$G HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"
eq "an IPv6 literal Host: the host-less lines (served)" 200 "$RSP_STATUS"
eq "... under anon" anon "$(raw_policy)"

# --- a host the backend could read otherwise, or none: 400 -------------------
keys=$(counted_keys)
while IFS='|' read -r what request; do
	raw "$request"
	eq "$what: 400" 400 "$RSP_STATUS"
done <<EOF2
absolute form whose Host differs|GET http://api.example.com/accounts/ACC-1 HTTP/1.1\r\nHost: www.example.com\r\n\r\n
absolute form for another host, Host api.example.com|GET http://www.example.com/accounts/ACC-1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n
absolute form with user@|GET http://u@api.example.com/accounts/ACC-1 HTTP/1.1\r\n\r\n
absolute form with an empty authority|GET http:///accounts/ACC-1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n
no Host (HTTP/1.1)|$G HTTP/1.1\r\n\r\n
no Host (HTTP/1.0)|$G HTTP/1.0\r\n\r\n
an empty Host|$G HTTP/1.1\r\nHost:\r\n\r\n
two dots at the end|$G HTTP/1.1\r\nHost: api.example.com..\r\n\r\n
a %-escape in the host|$G HTTP/1.1\r\nHost: api%2Eexample.com\r\n\r\n
a list in Host|$G HTTP/1.1\r\nHost: www.example.com, api.example.com\r\n\r\n
two different Host headers|$G HTTP/1.1\r\nHost: www.example.com\r\nHost: api.example.com\r\n\r\n
a space inside the host|$G HTTP/1.1\r\nHost: api.example.com x\r\n\r\n
EOF2
raw_h2 :path=/accounts/ACC-1
eq "HTTP/2 with neither :authority nor Host: 400" 400 "$RSP_STATUS"
eq "the refused requests reached no window" "$keys" "$(counted_keys)"

# --- the strict ip line: 2, then 429, whatever the spelling --------------------
P='POST /transfers'
n=0
for request in "$P HTTP/1.1\r\nHost: api.example.com.\r\nContent-Length: 0\r\n\r\n" \
	"POST http://api.example.com/transfers HTTP/1.1\r\nContent-Length: 0\r\n\r\n" \
	"$P HTTP/1.1\r\nHost: API.example.com.:443\r\nContent-Length: 0\r\n\r\n" \
	"POST http://api.example.com./transfers HTTP/1.1\r\nContent-Length: 0\r\n\r\n"; do
	n=$((n + 1))
	raw "$request"
	if [ "$n" -le 2 ]; then want=201; else want=429; fi
	eq "strict 2/1m, request $n: $want" "$want" "$RSP_STATUS"
	eq "strict 2/1m, request $n: policy strict" strict "$(raw_policy)"
done
t_done
