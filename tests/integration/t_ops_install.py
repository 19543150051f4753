#!/usr/bin/env python3
"""Install: `make install PREFIX=... DESTDIR=$tmp` lays out the binary, the
default config, a hardened systemd unit (accepted by systemd-analyze verify
where it is available), the man page (rendered cleanly by man and groff),
the HAProxy examples and the docs; a second install keeps an edited config;
uninstall removes all but the config. --version names the hiredis and libev
versions; --help and the man page document the same options and
directives."""
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import AGENT, ROOT, Harness, free_port  # noqa: E402
import harness as u  # noqa: E402

BENCH = os.environ.get("BENCH", os.path.join(ROOT, "bench", "spoa-bench"))
h = Harness()
VERSION = u.version()


def make(*args, destdir):
    # -o: install the binaries under test as they are, never rebuild them
    # (a sanitizer run installs its own build).
    argv = ["make", "--no-print-directory", "-C", ROOT, "AGENT=" + AGENT, "BENCH=" + BENCH,
            "-o", AGENT, "-o", BENCH, "DESTDIR=" + destdir] + list(args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)


# -- make install, PREFIX=/usr/local -----------------------------------------------------------------
D = os.path.join(h.tmp, "root")
p = make("install", "PREFIX=/usr/local", destdir=D)
h.eq("make install exits 0", 0, p.returncode)
if p.returncode:
    print("# " + p.stdout.replace("\n", "\n# ") + p.stderr.replace("\n", "\n# "))
    h.done()
L = lambda rel: os.path.join(D, rel.lstrip("/"))  # noqa: E731
expect = {
    "/usr/local/sbin/ratelimit-spoa": 0o755,
    "/usr/local/bin/spoa-bench": 0o755,
    "/usr/local/lib/ratelimit-spoa/ratelimit.so": 0o755,
    "/etc/ratelimit-spoa/ratelimit-spoa.conf": 0o644,
    "/usr/local/lib/systemd/system/ratelimit-spoa.service": 0o644,
    "/usr/local/share/man/man8/ratelimit-spoa.8": 0o644,
    "/usr/local/share/ratelimit-spoa/haproxy/haproxy.cfg": 0o644,
    "/usr/local/share/ratelimit-spoa/haproxy/spoe-ratelimit.conf": 0o644,
    "/usr/local/share/ratelimit-spoa/haproxy/ratelimit-block.cfg": 0o644,
    "/usr/local/share/ratelimit-spoa/haproxy/ratelimit-edge.cfg": 0o644,
    "/usr/local/share/ratelimit-spoa/haproxy/ratelimit-frontend.cfg": 0o644,
    "/usr/local/share/ratelimit-spoa/haproxy/routes.map": 0o644,
    "/usr/local/share/ratelimit-spoa/haproxy/errors/429.json": 0o644,
    "/usr/local/share/ratelimit-spoa/haproxy/errors/503.json": 0o644,
    "/usr/local/share/ratelimit-spoa/sliding_window.lua": 0o644,
    "/usr/local/share/ratelimit-spoa/prometheus/ratelimit-spoa.rules.yml": 0o644,
    "/usr/local/share/ratelimit-spoa/grafana/ratelimit-spoa.json": 0o644,
    "/usr/local/share/doc/ratelimit-spoa/configuration.md": 0o644,
    "/usr/local/share/doc/ratelimit-spoa/operations.md": 0o644,
    "/usr/local/sbin/ratelimit-jwks": 0o755,
    "/etc/ratelimit-spoa/ratelimit-jwks.conf": 0o644,
    "/usr/local/lib/systemd/system/ratelimit-jwks.service": 0o644,
    "/usr/local/lib/systemd/system/ratelimit-jwks.timer": 0o644,
    "/usr/local/share/man/man8/ratelimit-jwks.8": 0o644,
}
got = {f: (mode(L(f)) if os.path.isfile(L(f)) else None) for f in expect}
h.eq("laid out with the right modes", expect, got)
with open(L("/etc/ratelimit-spoa/ratelimit-spoa.conf")) as a, open(os.path.join(ROOT, "etc/ratelimit-spoa.conf")) as b:
    h.check("the default config is etc/ratelimit-spoa.conf", a.read() == b.read())

sbin = L("/usr/local/sbin/ratelimit-spoa")
p = run([sbin, "--version"])
h.check("--version: 'ratelimit-spoa VERSION (hiredis X.Y.Z, libev X.Y, tls: yes|no)'",
        p.returncode == 0 and re.fullmatch(r"ratelimit-spoa %s \(hiredis \d+\.\d+\.\d+, libev \d+\.\d+, "
                                           r"tls: (yes|no)\)\n" % re.escape(VERSION), p.stdout), p.stdout)
m = re.search(r"hiredis (\S+), libev ([^,)]+), tls: no\)", p.stdout)
# (a TLS build links the hiredis 1.x it built, not libhiredis-dev)
if shutil.which("dpkg-query") and m:
    q = [run(["dpkg-query", "-W", "-f=${Version}", pkg]).stdout.strip() for pkg in ("libhiredis-dev", "libev-dev")]
    if all(q):
        h.check("--version: hiredis as built (libhiredis-dev %s)" % q[0], q[0].startswith(m.group(1)), m.group(1))
        h.check("--version: libev as linked (libev-dev %s)" % q[1],
                q[1].split(":")[-1].startswith(m.group(2)), m.group(2))
p = run([sbin, "-c", "-f", L("/etc/ratelimit-spoa/ratelimit-spoa.conf")])
h.check("the installed binary accepts the installed config (-c)", p.returncode == 0, p.stderr)

# -- the systemd unit ------------------------------------------------------------------------------
unit_path = L("/usr/local/lib/systemd/system/ratelimit-spoa.service")
with open(unit_path) as f:
    unit = f.read()
keys = {}
for line in unit.splitlines():
    if "=" in line and not line.startswith("#") and not line.startswith("["):
        k, v = line.split("=", 1)
        keys.setdefault(k.strip(), []).append(v.strip())
required = {
    "DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
    "PrivateTmp": "yes", "PrivateDevices": "yes", "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    "CapabilityBoundingSet": "", "MemoryDenyWriteExecute": "yes", "LockPersonality": "yes",
    "RuntimeDirectory": "ratelimit-spoa",
}
h.eq("unit: hardening settings", required, {k: (keys.get(k) or [None])[0] for k in required})
h.check("unit: SystemCallFilter=@system-service", "@system-service" in keys.get("SystemCallFilter", []))
h.eq("unit: ExecStartPre checks the config", ["/usr/local/sbin/ratelimit-spoa -c -f ${CONFIG}"],
     keys.get("ExecStartPre"))
h.eq("unit: ExecStart", ["/usr/local/sbin/ratelimit-spoa -f ${CONFIG}"], keys.get("ExecStart"))
h.check("unit: ExecReload checks, then sends SIGHUP",
        keys.get("ExecReload") == ["/usr/local/sbin/ratelimit-spoa -c -f ${CONFIG}", "/bin/kill -HUP $MAINPID"],
        keys.get("ExecReload"))
h.check("unit: the config path", "CONFIG=/etc/ratelimit-spoa/ratelimit-spoa.conf" in keys.get("Environment", []))
h.check("unit: documented", "man:ratelimit-spoa(8)" in keys.get("Documentation", []))
h.eq("unit: Type=notify (the agent says READY=1 once it listens)", (["notify"], ["main"]),
     (keys.get("Type"), keys.get("NotifyAccess")))

if shutil.which("systemd-analyze"):
    # verify checks that the Exec binaries exist and the man page resolves:
    # point both at the staging tree.
    vdir = os.path.join(h.tmp, "verify")
    os.makedirs(vdir)
    staged = os.path.join(vdir, "ratelimit-spoa.service")
    with open(staged, "w") as f:
        f.write(unit.replace("/usr/local/sbin/", L("/usr/local/sbin/")))
    env = dict(os.environ, MANPATH=L("/usr/local/share/man") + ":")
    p = run(["systemd-analyze", "verify", staged], env=env)
    h.check("systemd-analyze verify accepts the unit", p.returncode == 0 and not p.stderr.strip(),
            (p.returncode, p.stderr.strip()))
    p = run(["systemd-analyze", "security", "--offline=true", "--threshold=20", staged], env=env)
    exposure = re.search(r"Overall exposure level for \S+: (\S+)", p.stdout)
    h.check("systemd-analyze security: exposure at most 2.0 (%s)" % (exposure and exposure.group(1)),
            p.returncode == 0 and exposure, p.stdout[-300:])
else:
    print("# skipped systemd-analyze verify: systemd-analyze is not installed (the 'systemd' package)")

# -- the man page --------------------------------------------------------------------------------------
man_path = L("/usr/local/share/man/man8/ratelimit-spoa.8")
with open(man_path) as f:
    man_src = f.read()
h.check("man page: .TH carries the version", ('"ratelimit-spoa %s"' % VERSION) in man_src, man_src.splitlines()[3:4])
rendered = ""
if shutil.which("groff"):
    p = run(["groff", "-man", "-Tutf8", "-ww", "-z", man_path])
    h.check("groff -man -ww: no warning", p.returncode == 0 and not p.stderr.strip(), p.stderr)
if shutil.which("man"):
    p = run(["man", "-l", man_path], env=dict(os.environ, MANWIDTH="80", MANPAGER="cat", PAGER="cat"))
    h.check("man -l renders it without complaint", p.returncode == 0 and not p.stderr.strip() and
            "NAME" in p.stdout, p.stderr)
    rendered = p.stdout
else:
    print("# skipped man -l: man-db is not installed")
if shutil.which("lexgrog"):
    p = run(["lexgrog", man_path])
    h.check("lexgrog parses the NAME line (whatis/apropos)",
            p.returncode == 0 and '"ratelimit-spoa - ' in p.stdout, p.stdout)
h.check("man page: FILES points at the installed examples",
        "/usr/local/share/ratelimit-spoa/haproxy/" in man_src)

# --help and the man page document the same things.
helptext = run([AGENT, "--help"]).stdout
man_text = rendered or re.sub(r"\\[-&%]|\\f[BIRP]", lambda m: "-" if m.group(0) == "\\-" else "", man_src)
long_opts = set(re.findall(r"(--[a-z][a-z-]+)", helptext.split("Configuration directives")[0]))
h.check("--help lists its options", long_opts >= {"--config", "--check", "--listen", "--redis", "--debug",
                                                   "--version", "--help"}, long_opts)
missing = sorted(o for o in long_opts if o not in man_text)
h.eq("every --help option is in the man page", [], missing)
# --help prints the directives from the parser's table (spoa/config/
# config_directives.c), one "  <name> ..." line each, in its order.
help_list = re.findall(r"^  ([a-z][a-z-]+)(?: |$)",
                       helptext.split("Configuration directives")[1].split("Signals:")[0], re.M)
help_dirs = set(help_list)
# the directives are the tags of the CONFIGURATION section's .TP paragraphs
man_conf = man_src.split(".SH CONFIGURATION")[1].split(".SH SIGNALS")[0].split("\n")
man_list = []
for i, line in enumerate(man_conf[:-1]):
    if line == ".TP":
        tag = re.match(r"^\.[BIR]+ +\"?([a-z\\-]+)", man_conf[i + 1])
        if tag:
            man_list.append(tag.group(1).replace("\\-", "-"))
# a row added to the table without its man page entry, an entry without a
# row, or one out of the table's order fails here
h.eq("the man page's CONFIGURATION entries are --help's directives, in the table's order",
     help_list, man_list)
with open(os.path.join(ROOT, "spoa", "config", "config_directives.c")) as f:
    table = re.findall(r'^\t\{ "([a-z-]+)", CONFIG_ARG_[A-Z]+,', f.read(), re.M)
h.eq("--help lists the parser's table (spoa/config/config_directives.c), in its order", table, help_list)
parsed = set(table)
with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
    directives = re.split(r"^#+ ", f.read().split("\n## Directives\n", 1)[-1], flags=re.M)[0]
    table = set(re.findall(r"^\| `([a-z-]+)` \|", directives, re.M))
h.eq("docs/configuration.md documents no directive the parser lacks", [], sorted(table - parsed))
if parsed - table:
    print("# note: docs/configuration.md's table lacks %s" % ", ".join(sorted(parsed - table)))
for sig in ("SIGHUP", "SIGTERM"):
    h.check("--help and the man page both explain %s" % sig, sig in helptext and sig in man_text)

# -- the sd_notify protocol the unit relies on ----------------------------------------------------
def notify_run(addr, bind_to):
    """Start the agent with NOTIFY_SOCKET=<addr>; collect its datagrams over
    start, SIGHUP (good, then bad file) and SIGTERM."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(bind_to)
    s.settimeout(15)
    port = free_port()
    cfg = os.path.join(h.tmp, "notify.conf")
    with open(cfg, "w") as f:
        f.write("listen 127.0.0.1:%d\nredis redis://127.0.0.1:1/0\npolicy transfer 3/1s\n" % port)
    log = open(os.path.join(h.tmp, "notify.log"), "ab")
    p = subprocess.Popen([AGENT, "-f", cfg], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, NOTIFY_SOCKET=addr))
    h.procs.append(p)
    got = []
    try:
        got.append(s.recv(256).decode())
        p.send_signal(signal.SIGHUP)
        got += [s.recv(256).decode(), s.recv(256).decode()]
        with open(cfg, "a") as f:
            f.write("policy oops 1/1x\n")
        p.send_signal(signal.SIGHUP)
        got += [s.recv(256).decode(), s.recv(256).decode()]
        p.send_signal(signal.SIGTERM)
        got.append(s.recv(256).decode())
    except OSError as e:
        got.append("error: %s" % e)
    p.wait(15)
    s.close()
    return got


want = ["READY=1", "RELOADING=1", "READY=1", "RELOADING=1", "READY=1", "STOPPING=1"]
sock = os.path.join(h.tmp, "notify.sock")
h.eq("sd_notify (path): READY, RELOADING/READY per reload (good or rejected), STOPPING", want,
     notify_run(sock, sock))
name = "rlspoa-notify-%d" % os.getpid()
h.eq("sd_notify (abstract socket '@...')", want, notify_run("@" + name, "\0" + name))

# -- a second install keeps an edited config ---------------------------------------------------------
conf = L("/etc/ratelimit-spoa/ratelimit-spoa.conf")
with open(conf, "a") as f:
    f.write("policy site-edit 1/1s\n")
p = make("install", "PREFIX=/usr/local", destdir=D)
h.eq("second make install exits 0", 0, p.returncode)
with open(conf) as f:
    h.check("the edited config is kept", "site-edit" in f.read())
h.check("the new default is put beside it (.dist)", os.path.isfile(conf + ".dist"))
h.check("install says so", "kept" in p.stdout, p.stdout[-300:])

# -- uninstall -----------------------------------------------------------------------------------------
p = make("uninstall", "PREFIX=/usr/local", destdir=D)
h.eq("make uninstall exits 0", 0, p.returncode)
left = sorted(os.path.relpath(os.path.join(dp, f), D) for dp, _, fs in os.walk(D) for f in fs)
h.eq("uninstall leaves only the site's config",
     ["etc/ratelimit-spoa/ratelimit-jwks.conf", "etc/ratelimit-spoa/ratelimit-jwks.conf.dist",
      "etc/ratelimit-spoa/ratelimit-spoa.conf", "etc/ratelimit-spoa/ratelimit-spoa.conf.dist"], left)

# -- PREFIX=/usr: the unit and the man page follow -------------------------------------------------------
D2 = os.path.join(h.tmp, "root-usr")
p = make("install", "PREFIX=/usr", destdir=D2)
h.eq("make install PREFIX=/usr exits 0", 0, p.returncode)
with open(os.path.join(D2, "usr/lib/systemd/system/ratelimit-spoa.service")) as f:
    unit2 = f.read()
h.check("PREFIX=/usr: ExecStart=/usr/sbin/ratelimit-spoa", "ExecStart=/usr/sbin/ratelimit-spoa -f" in unit2)
h.check("PREFIX=/usr: no /usr/local left in the unit", "/usr/local" not in unit2)
with open(os.path.join(D2, "usr/lib/systemd/system/ratelimit-jwks.service")) as f:
    h.check("PREFIX=/usr: ratelimit-jwks.service runs /usr/sbin/ratelimit-jwks",
            "ExecStart=/usr/sbin/ratelimit-jwks " in f.read())
with open(os.path.join(D2, "usr/share/man/man8/ratelimit-spoa.8")) as f:
    h.check("PREFIX=/usr: the man page names /usr/share/ratelimit-spoa", "/usr/share/ratelimit-spoa/" in f.read())
h.done()
