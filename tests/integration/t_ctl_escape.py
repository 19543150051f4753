#!/usr/bin/env python3
"""ctl's text output and the agents' log lines about changes cannot be forged
by a name (issue 35, item 8).

An account made of a newline, a carriage return, a tab, an escape sequence,
a backslash followed by "x0a" (what an escaped newline looks like), bytes
that are not UTF-8 and a quote, with a reason holding a newline: every text
output of ctl (override set/removed on stderr, overrides, show, top-denied,
reset, an error) prints it escaped, one line per line, no control byte, and
the escaped text decodes back to exactly the account (so it differs from
the account that holds the text "\\x0a"). --json stays valid JSON whose
strings give the account's bytes back. The agent's log lines about the
change stay one line each.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness as u  # noqa: E402
from harness import AGENT, Harness  # noqa: E402
import spop  # noqa: E402

POLICIES = "policy transfer 3/1s\npolicy hourly 1/1h\n"
SEE_SECS = 15
EVIL = b'jwt:E\n\r\t\x1b[31m\\x0a\xff\xfe\xc3\xa9"\xc2\x9b\xe2\x80\xae!'
# the same bytes as log_escape_text() writes them (docs/operations.md)
EVIL_TEXT = b'jwt:E\\x0a\\x0d\\x09\\x1b[31m\\\\x0a\\xff\\xfe\xc3\xa9\\"\\xc2\\x9b\\xe2\\x80\\xae!'
# what an escaped newline looks like, as an account of its own
LOOKALIKE = b"jwt:E\\x0a"
REASON = b"line1\nts=0 level=error event=forged"

h = Harness()
h.start_redis()
h.start_agent(POLICIES + "threads 1\nredis-timeout 5s\n", ready=True)
conf = os.path.join(h.tmp, "agent.conf")
h.wait_until("the agent polls the live overrides",
             lambda: "event=live_control_ready" in u.read_text(h.agent_log), SEE_SECS)


def ctl(*args):
    """ratelimit-spoa ctl -c <conf> <args> (bytes): (rc, stdout, stderr) as bytes."""
    p = subprocess.run([AGENT.encode(), b"ctl", b"-c", conf.encode()] +
                       [a if isinstance(a, bytes) else a.encode() for a in args],
                       capture_output=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def unescape(t):
    """The reverse of log_escape_text(): \\\\, \\", \\xHH."""
    out, i = bytearray(), 0
    while i < len(t):
        if t[i:i + 1] == b"\\":
            if t[i + 1:i + 2] in (b"\\", b'"'):
                out += t[i + 1:i + 2]
                i += 2
                continue
            out.append(int(t[i + 2:i + 4], 16))
            i += 4
            continue
        out.append(t[i])
        i += 1
    return bytes(out)


def clean_lines(what, text, nlines):
    """<text> is <nlines> lines, each printable UTF-8 without a control byte."""
    lines = text.split(b"\n")
    h.check(what + ": %d line(s), ended by a newline" % nlines,
            len(lines) == nlines + 1 and lines[-1] == b"", text)
    ok = True
    try:
        s = text.decode("utf-8")
    except UnicodeDecodeError:
        ok = False
        s = ""
    bad = [c for c in s if c != "\n" and (ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 or
                                          c in "\u2028\u2029\u202a\u202b\u202c\u202d\u202e")]
    h.check(what + ": valid UTF-8, no control character", ok and not bad, (text, bad))
    return lines[:-1]


h.eq("the escaped form decodes back to the account", EVIL, unescape(EVIL_TEXT))
h.check("and differs from the look-alike's", EVIL_TEXT != LOOKALIKE.replace(b"\\", b"\\\\"))

# -- override set: stderr ------------------------------------------------------
rc, out, err = ctl("override", "transfer", EVIL, "1/1m", "--for", "10m", "--reason", REASON)
h.eq("override set: exit 0", 0, rc)
ln = clean_lines("override set (stderr)", err, 1)
h.check("override set: the account and the reason escaped",
        b"account=" + EVIL_TEXT + b" " in err and b'reason="line1\\x0ats=0' in err, err)
rc, _, err = ctl("override", "transfer", LOOKALIKE, "1/1m", "--for", "10m")
h.eq("the look-alike account: its own override", 0, rc)
h.check("the look-alike prints as \\\\x0a", b"account=jwt:E\\\\x0a " in err, err)

# -- overrides (text and JSON) ----------------------------------------------------
rc, out, _ = ctl("overrides")
lines = clean_lines("overrides (text)", out, 3)
rows = {unescape(l.split()[1]) for l in lines[1:]}
h.eq("overrides (text): the two accounts, each decoded back exactly", {EVIL, LOOKALIKE}, rows)
h.check("overrides (text): the reason escaped on its row",
        any(b"line1\\x0ats=0" in l and EVIL_TEXT in l for l in lines), out)
rc, out, _ = ctl("overrides", "--json")
try:
    doc = json.loads(out.decode("utf-8"))
except ValueError as e:
    doc = None
    h.fail("overrides --json: not JSON: %s: %r" % (e, out))
if doc is not None:
    got = {o["account"].encode("latin-1") for o in doc}
    h.eq("overrides --json: each account's bytes (one \\u00XX per byte)", {EVIL, LOOKALIKE}, got)
    h.check("overrides --json: the reason whole",
            any(o["reason"].encode("latin-1") == REASON for o in doc), doc)

# -- the agent's log lines about the change -------------------------------------
h.wait_until("the agent logs the change",
             lambda: u.read_text(h.agent_log).count("event=live_override_change") >= 2, SEE_SECS)
with open(h.agent_log, "rb") as f:
    log = f.read()
loglines = log.split(b"\n")[:-1]
h.check("agent log: every line is a log line (ts= first), none forged",
        all(l.startswith(b"ts=") for l in loglines),
        [l for l in loglines if not l.startswith(b"ts=")])
clean_lines("agent log", log, len(loglines))
change = [l for l in loglines if b"event=live_override_change" in l and b"1/1m" in l]
h.check("agent log: the change with the account quoted and escaped",
        any(b'account="' + EVIL_TEXT + b'"' in l for l in change), change)
h.check("agent log: the reason escaped in detail=",
        any(b"line1\\x0ats=0 level=error event=forged" in l for l in change), change)
h.check("agent log: the forged-looking text stays inside the quoted detail",
        any(re.search(rb'detail="[^"]*reason=line1\\x0ats=0 level=error event=forged"', l)
            for l in change), change)

# -- show (text and JSON) ---------------------------------------------------------
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()
h.eq("the account admitted once under 1/1m", "allow", c.ratelimit(EVIL)["actions"].get("status"))
h.eq("then denied", "deny", c.ratelimit(EVIL)["actions"].get("status"))
rc, out, _ = ctl("show", "transfer", EVIL)
# policy line, the window's key, the 1.0.x key beside it (an agent writes
# both for its first hour: docs/deployment.md, "Upgrading from 1.0.0"),
# the live override
lines = clean_lines("show (text)", out, 4)
h.check("show (text): the account escaped on its first line",
        lines and lines[0] == b"policy transfer account " + EVIL_TEXT + b" limits live-override",
        lines)
h.check("show (text): the key escaped, the reason escaped",
        b"\\x0a" in lines[1] and b"\\x0a" in lines[2] and b'reason "line1\\x0ats=0' in lines[3], lines)
rc, out, _ = ctl("show", "transfer", EVIL, "--json")
try:
    doc = json.loads(out.decode("utf-8"))
    h.eq("show --json: the account's bytes", EVIL, doc["account"].encode("latin-1"))
except ValueError as e:
    h.fail("show --json: not JSON: %s: %r" % (e, out))

# -- top-denied (text and JSON) ---------------------------------------------------
h.wait_until("top-denied lists the account (the agent flushes each second)",
             lambda: EVIL_TEXT in ctl("top-denied")[1], SEE_SECS)
rc, out, _ = ctl("top-denied")
lines = clean_lines("top-denied (text)", out, 2)
h.eq("top-denied (text): the account decoded back", EVIL, unescape(lines[1].split()[2]))
rc, out, _ = ctl("top-denied", "--json")
try:
    doc = json.loads(out.decode("utf-8"))
    h.eq("top-denied --json: the account's bytes", [EVIL], [d["account"].encode("latin-1")
                                                            for d in doc])
except ValueError as e:
    h.fail("top-denied --json: not JSON: %s: %r" % (e, out))

# -- remove, reset, an error: stderr ----------------------------------------------
rc, _, err = ctl("override", "transfer", EVIL, "--remove")
clean_lines("override removed (stderr)", err, 1)
h.check("override removed: the account escaped", b"account=" + EVIL_TEXT + b" " in err, err)
rc, _, err = ctl("reset", "transfer", EVIL)
clean_lines("reset (stderr)", err, 1)
h.check("reset: the account escaped", rc == 0 and b"account=" + EVIL_TEXT + b" " in err, err)
rc, _, err = ctl("show", b"no\npe\x1b", "jwt:x")
h.check("an unknown policy typed with a newline: exit 1, one line, escaped",
        rc == 1 and err.count(b"\n") == 1 and b"no policy 'no\\x0ape\\x1b'" in err, err)
h.done()
