#!/usr/bin/env python3
"""tools/ratelimit-jwks on its own: the JWK -> PEM conversion gives back the
very keys (RSA and EC P-256), use/alg/key_ops are respected, keys without a
kid are handled as documented, bad documents are refused with a clear error
and nothing written, an https:// URL is fetched only with the right CA, and
a second run over the same keys writes nothing and reloads nothing. A kid
the map would not read back as written (newline, CR, blank, #) is left out
and the map is checked as HAProxy reads it; odd documents (nested 100000
deep, huge numbers, NaN, invalid UTF-8) get the tool's refusal, never a
traceback."""
import http.server
import importlib.machinery
import importlib.util
import json
import os
import ssl
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import ROOT, Harness, TLSCerts  # noqa: E402

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: E402

TOOL = os.path.join(ROOT, "tools", "ratelimit-jwks")
loader = importlib.machinery.SourceFileLoader("ratelimit_jwks", TOOL)
spec = importlib.util.spec_from_loader("ratelimit_jwks", loader)
jw = importlib.util.module_from_spec(spec)
loader.exec_module(jw)

h = Harness()


def b64(n, size=None):
    raw = n.to_bytes(size or (n.bit_length() + 7) // 8, "big")
    return jw.base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def rsa_jwk(key, kid=None, **extra):
    pub = key.public_key().public_numbers()
    d = {"kty": "RSA", "n": b64(pub.n), "e": b64(pub.e)}
    if kid is not None:
        d["kid"] = kid
    d.update(extra)
    return d


def ec_jwk(key, kid=None, **extra):
    pub = key.public_key().public_numbers()
    d = {"kty": "EC", "crv": "P-256", "x": b64(pub.x, 32), "y": b64(pub.y, 32)}
    if kid is not None:
        d["kid"] = kid
    d.update(extra)
    return d


def spki(key):
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


r1 = rsa.generate_private_key(public_exponent=65537, key_size=2048)
r2 = rsa.generate_private_key(public_exponent=65537, key_size=2048)
small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
e1 = ec.generate_private_key(ec.SECP256R1())
p384 = ec.generate_private_key(ec.SECP384R1())

# --- JWK -> PEM --------------------------------------------------------------
h.eq("RSA JWK -> its own public key", ("RS256", spki(r1)), jw.jwk_to_pem(rsa_jwk(r1, "a")))
h.eq("EC P-256 JWK -> its own public key", ("ES256", spki(e1)), jw.jwk_to_pem(ec_jwk(e1, "b")))
h.eq("alg RS256 kept", "RS256", jw.jwk_to_pem(rsa_jwk(r1, alg="RS256"))[0])
h.eq("PS256 left out by default", None, jw.jwk_to_pem(rsa_jwk(r1, alg="PS256"))[0])
h.eq("PS256 kept with --ps256", "PS256", jw.jwk_to_pem(rsa_jwk(r1, alg="PS256"), True)[0])
h.eq("RS512 left out", None, jw.jwk_to_pem(rsa_jwk(r1, alg="RS512"))[0])
h.eq("use enc left out", None, jw.jwk_to_pem(rsa_jwk(r1, use="enc"))[0])
h.eq("use sig kept", "RS256", jw.jwk_to_pem(rsa_jwk(r1, use="sig"))[0])
h.eq("key_ops without verify left out", None, jw.jwk_to_pem(rsa_jwk(r1, key_ops=["encrypt"]))[0])
h.eq("an RSA key of 1024 bits left out", None, jw.jwk_to_pem(rsa_jwk(small))[0])
h.eq("a P-384 key left out", None, jw.jwk_to_pem({"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"})[0])
h.eq("an EC key with alg RS256 left out", None, jw.jwk_to_pem(ec_jwk(e1, alg="RS256"))[0])
h.eq("a symmetric key left out", None, jw.jwk_to_pem({"kty": "oct", "k": "c2VjcmV0"})[0])


def refused(what, arg, needle, fn=jw.jwk_to_pem):
    """fn(arg) raises JwksError whose text has needle."""
    try:
        fn(arg)
    except jw.JwksError as exc:
        h.check(what + ": says why", needle in str(exc), str(exc))
        return
    h.fail(what + ": accepted")


bad_point = ec_jwk(e1)
bad_point["y"] = b64(int.from_bytes(jw.base64.urlsafe_b64decode(bad_point["y"] + "="), "big") ^ 1, 32)
refused("an EC point not on P-256", bad_point, "P-256")
refused("EC x of 31 bytes", dict(ec_jwk(e1), x=b64(1, 31)), "32-byte")
refused("RSA n that is not base64url", dict(rsa_jwk(r1), n="a+b/c"), "base64url")
refused("RSA without e", {"kty": "RSA", "n": rsa_jwk(r1)["n"]}, "'e'")
refused("RSA with an even e", dict(rsa_jwk(r1), e=b64(65536)), "range")

# --- Documents -----------------------------------------------------------------
doc = {"keys": [rsa_jwk(r1, "2026-01"), rsa_jwk(r2, "2026-07", use="sig", alg="RS256"),
                ec_jwk(e1, "ec-1"), rsa_jwk(r2, "enc-1", use="enc"), {"kty": "oct", "k": "eA"}]}
entries, notes = jw.plan(doc)
h.eq("three usable keys, kid order kept", ["2026-01", "2026-07", "ec-1"], [k for k, _, _ in entries])
h.eq("two keys left out, each said", 2, len(notes))
entries, notes = jw.plan({"keys": [rsa_jwk(r1)]})
h.eq("one key without kid: the no-kid entry only", ["*"], [k for k, _, _ in entries])
entries, notes = jw.plan({"keys": [rsa_jwk(r1, "only")]})
h.eq("one key with kid: its kid and the no-kid entry", ["only", "*"], [k for k, _, _ in entries])
entries, notes = jw.plan({"keys": [rsa_jwk(r1, "a"), rsa_jwk(r2)]})
h.eq("several keys: the one without kid left out", ["a"], [k for k, _, _ in entries])
h.check("several keys: the one without kid named in a note", any("without a kid" in n for n in notes), notes)
entries, notes = jw.plan({"keys": [rsa_jwk(r1, "a b"), rsa_jwk(r2, "../../etc/x"), rsa_jwk(r2, "ok")]})
h.eq("a kid with a space is left out; a kid with / is kept as a map key",
     ["../../etc/x", "ok"], [k for k, _, _ in entries])
files, kidmap, cfg = jw.render(entries, "/var/lib/x")
h.check("key files are named by hash, never by kid",
        all(n.startswith("k-") and "/" not in n and ".." not in n for n in files), list(files))

# --- Kids the map would not read back as written -------------------------------
# HAProxy reads kid.map line by line, key up to the first blank: a kid with a
# newline, CR, blank or # would split, merge or shadow a line. Each is left
# out (and said, escaped), and the map loads back as exactly the kids kept.
h.eq("the map reader skips comments and blank lines, trims as HAProxy does",
     [("a", "RS256 /f"), ("#b", "c"), ("d", "")],
     jw.read_map(b"# c\n\n  a \t RS256 /f \t\r\n #b c\n\t\nd\n"))
for bad in ("2026-01\n", "2026-01\r", " 2026-01", "2026-01 ", "2026-01\t", "\t2026-01",
            "20 26-01", "2026#01", "#2026-01", "2026-01\x00", "2026-01\u2028", "2026-01\x0b", "2026-0١"):
    entries, notes = jw.plan({"keys": [rsa_jwk(r1, "2026-01"), rsa_jwk(r2, bad)]})
    h.eq(f"kid {bad!r} beside 2026-01: left out, 2026-01 kept for its own key",
         [("2026-01", spki(r1)), ("*", spki(r1))], [(k, p) for k, _, p in entries])
    h.check(f"kid {bad!r}: the note names it escaped, on one line",
            len(notes) == 1 and repr(bad) in notes[0] and "\n" not in notes[0], notes)
    kidmap = jw.render(entries, "/var/lib/x")[1]
    h.eq(f"kid {bad!r} beside 2026-01: the map loads back as the kids kept",
         ["*", "2026-01"], sorted(k for k, _ in jw.read_map(kidmap)))
entries, notes = jw.plan({"keys": [rsa_jwk(r1, "x" * 5000 + "\n"), rsa_jwk(r2, "b")]})
h.check("a long bad kid: the note quotes it cut short", len(notes) == 1 and len(notes[0]) < 200, notes)
# The check that refuses a map that would not load back, on entries plan()
# would never make (a kid with a newline given straight to render).
forged = [("2026-01", "RS256", spki(r1)), ("2026-01\n", "RS256", spki(r2))]
try:
    jw.check_map(jw.render(forged, "/var/lib/x")[1], forged, "/var/lib/x")
    h.fail("a map whose line a kid splits: accepted")
except jw.JwksError as exc:
    h.check("a map whose line a kid splits: refused, said", "would not load back" in str(exc), str(exc))
forged_dir = os.path.join(h.tmp, "forged")
try:
    jw.install(forged, forged_dir, "", lambda msg: None)
    h.fail("install of a map a kid splits: accepted")
except jw.JwksError:
    h.check("install of a map a kid splits: refused before writing anything", not os.path.exists(forged_dir))


def plan_refused(what, document, needle):
    refused(what, document, needle, jw.plan)


plan_refused("not an object", [1], "'keys' array")
plan_refused("no keys member", {"key": []}, "'keys' array")
plan_refused("no usable key", {"keys": [{"kty": "oct", "k": "eA"}]}, "no key the edge")
plan_refused("a kid for two keys", {"keys": [rsa_jwk(r1, "d"), rsa_jwk(r2, "d")]}, "more than one key")
plan_refused("a key that is not an object", {"keys": ["x"]}, "keys[0]")
plan_refused("one malformed key spoils the document", {"keys": [rsa_jwk(r1, "a"), dict(rsa_jwk(r2, "b"), n="!")]},
             "keys[1] (kid 'b')")

# --- The command: files, atomic and idempotent; refusals write nothing ---------
out = os.path.join(h.tmp, "jwks")
src = os.path.join(h.tmp, "jwks.json")
marker = os.path.join(h.tmp, "reloads")


def run(*args, source=src):
    p = subprocess.run([sys.executable, TOOL, "--source", source, "--dir", out,
                        "--reload-cmd", "sh -c 'echo x >> %s'" % marker] + list(args),
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def reloads():
    try:
        with open(marker) as f:
            return len(f.readlines())
    except FileNotFoundError:
        return 0


def snapshot():
    return {n: open(os.path.join(out, n), "rb").read() for n in sorted(os.listdir(out))}


with open(src, "w") as f:
    json.dump(doc, f)
rc, text = run()
h.eq("first run: exit 0", 0, rc)
h.eq("first run: one reload", 1, reloads())
snap = snapshot()
h.eq("first run: map, cfg and three key files", 5, len(snap))
h.check("the map names each kid with its algorithm",
        b"2026-01 RS256 " + out.encode() in snap["kid.map"] and b"ec-1 ES256 " in snap["kid.map"], snap["kid.map"])
key_files = [n for n in snap if n.startswith("k-")]
h.check("keys.cfg names every key file", all(n.encode() in snap["keys.cfg"] for n in key_files))
rc, text = run()
h.eq("same keys again: exit 0", 0, rc)
h.eq("same keys again: no reload", 1, reloads())
h.eq("same keys again: the files unchanged", snap, snapshot())
h.check("same keys again: says so", "unchanged" in text, text)

for what, body in (("not JSON", "{"), ("no usable key", '{"keys":[]}'),
                   ("a malformed key", json.dumps({"keys": [dict(rsa_jwk(r1, "a"), e="")]}))):
    with open(src, "w") as f:
        f.write(body)
    rc, text = run()
    h.eq(what + ": exit 1", 1, rc)
    h.check(what + ": refused, nothing written (says so)", "refused, nothing written" in text, text)
    h.eq(what + ": the files unchanged", snap, snapshot())
h.eq("refused documents: no reload", 1, reloads())

# A document that would give a traceback elsewhere: the tool's own refusal.
deep = "[" * 100000 + "]" * 100000
odd = {
    "nested 100000 deep": deep,
    "keys nested 100000 deep": '{"keys":' + deep + "}",
    "a member nested 900 deep": '{"keys":[{"kty":"RSA","kid":' + "[" * 900 + "]" * 900 + "}]}",
    "a 5000-digit number": '{"keys":[{"kty":"RSA","kid":' + "9" * 5000 + "}]}",
    "a number too large for a float": '{"keys":[{"kty":"RSA","use":1e400}]}',
    "NaN": '{"keys":[{"kty":NaN}]}',
    "invalid UTF-8": b'{"keys":[{"kty":"\xff\xfe"}]}',
    "a lone surrogate": '{"keys":[{"kty":"RSA","use":"\\ud800"}]}',
    "a top-level array": "[1]",
    "keys that are not objects": '{"keys":[1,2]}',
    "keys not an array": '{"keys":{"kty":"RSA"}}',
    "a base64url member of 4n+1 characters": '{"keys":[{"kty":"EC","crv":"P-256","x":"A","y":"A"}]}',
    "an RSA e larger than n": json.dumps({"keys": [dict(rsa_jwk(r1, "a"), e=b64((1 << 80000) + 1))]}),
    "two keys, one kid": json.dumps({"keys": [rsa_jwk(r1, "d"), rsa_jwk(r2, "d")]}),
}
for what, body in odd.items():
    with open(src, "wb") as f:
        f.write(body if isinstance(body, bytes) else body.encode())
    rc, text = run()
    h.check(what + ": exit 1, refused in the tool's own words, no traceback",
            rc == 1 and "refused, nothing written" in text and "Traceback" not in text, text[-300:])
    h.eq(what + ": the files unchanged", snap, snapshot())
h.eq("odd documents: no reload", 1, reloads())
with open(src, "w") as f:
    json.dump(doc, f)
for what, args, code, needle in (
        ("a --ca-file that does not exist", ["--ca-file", os.path.join(h.tmp, "none.pem"),
                                             "--source", "https://127.0.0.1:1/"], 1, "cannot fetch"),
        ("a --reload-cmd with an open quote", ["--reload-cmd", "'a"], 2, "--reload-cmd"),
        ("a --dir that cannot be made", ["--dir", "/proc/no/such"], 1, "cannot write")):
    p = subprocess.run([sys.executable, TOOL, "--source", src, "--dir", out] + args,
                       capture_output=True, text=True, timeout=60)
    h.check(what + f": exit {code}, said, no traceback",
            p.returncode == code and needle in p.stderr and "Traceback" not in p.stderr, p.stderr[-300:])
p = subprocess.run([sys.executable, TOOL, "--source", src, "--dir", os.path.join(h.tmp, "a $x")],
                   capture_output=True, text=True, timeout=60)
h.check("a --dir HAProxy would read otherwise ($, space) is refused, nothing made",
        p.returncode == 2 and "--dir" in p.stderr and not os.path.exists(os.path.join(h.tmp, "a $x")), p.stderr)
rc, text = run(source="http://127.0.0.1:1/jwks.json")
h.check("an http:// URL is refused", rc == 1 and "https://" in text, text)

# A new key: its file appears, the old one's goes with it.
with open(src, "w") as f:
    json.dump({"keys": [rsa_jwk(r2, "2026-07")]}, f)
rc, text = run()
h.eq("rotation: exit 0 and one more reload", (0, 2), (rc, reloads()))
h.eq("rotation: map, cfg and one key file left", 3, len(snapshot()))

# A reload that fails is tried again by the next run, though nothing changed.
with open(src, "w") as f:
    json.dump({"keys": [rsa_jwk(r1, "2026-01")]}, f)
p = subprocess.run([sys.executable, TOOL, "--source", src, "--dir", out, "--reload-cmd", "false"],
                   capture_output=True, text=True, timeout=60)
h.check("a failed reload: exit 1, said", p.returncode == 1 and "next run tries again" in p.stderr, p.stderr)
p = subprocess.run([sys.executable, TOOL, "--source", src, "--dir", out, "--reload-cmd", "/no/such/reload"],
                   capture_output=True, text=True, timeout=60)
h.check("a reload command that cannot run: exit 1, said, no traceback",
        p.returncode == 1 and "next run tries again" in p.stderr and "Traceback" not in p.stderr, p.stderr)
rc, text = run()
h.eq("after a failed reload: the next run reloads", (0, 3), (rc, reloads()))

# The tester's document: the kid in use and the same kid with a newline. The
# second is left out; kid.map holds 2026-01 on one line, for its own key.
nl_dir = os.path.join(h.tmp, "jwks-nl")
with open(src, "w") as f:
    json.dump({"keys": [rsa_jwk(r1, "2026-01"), rsa_jwk(r2, "2026-01\n")]}, f)
p = subprocess.run([sys.executable, TOOL, "--source", src, "--dir", nl_dir, "--reload-cmd", ""],
                   capture_output=True, text=True, timeout=60)
h.check("kid '2026-01\\n' beside 2026-01: exit 0, the left-out kid named escaped",
        p.returncode == 0 and "'2026-01\\n') left out" in p.stderr, p.stdout + p.stderr)
with open(os.path.join(nl_dir, "kid.map"), "rb") as f:
    pairs = jw.read_map(f.read())
pem_of = {k: open(v.split()[1], "rb").read() for k, v in pairs}
h.eq("kid '2026-01\\n' beside 2026-01: the map as HAProxy reads it is 2026-01 and *, the good key",
     {"2026-01": spki(r1), "*": spki(r1)}, pem_of)

# --- https:// with a CA bundle ----------------------------------------------------
certs = TLSCerts(os.path.join(h.tmp, "tls"))
body = json.dumps({"keys": [ec_jwk(e1, "ec-9")]}).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(certs.server_cert, certs.server_key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
threading.Thread(target=srv.serve_forever, daemon=True).start()
url = "https://127.0.0.1:%d/jwks.json" % srv.server_address[1]
rc, text = run("--ca-file", certs.other_ca, source=url)
h.check("https with a CA that did not sign the server: refused", rc == 1 and "cannot fetch" in text, text)
h.check("https with the wrong CA: nothing written", b"ec-9" not in snapshot()["kid.map"])
rc, text = run("--ca-file", certs.ca, source=url)
h.eq("https with the right CA: exit 0", 0, rc)
h.check("https with the right CA: the served key is in the map", b"ec-9 ES256" in snapshot()["kid.map"])
srv.shutdown()
h.done()
