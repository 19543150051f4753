#!/usr/bin/env python3
"""Which agent source file calls which, read from the built objects.

    tools/check-calls.py [--doc docs/architecture.md] [--print] OBJECT|DIR...
    tools/check-calls.py --self-test

The agent's objects (make lint passes them: one <file>.o per spoa/<file>.c,
and script.o generated from lua/sliding_window.lua; a directory stands for
its *.o). File A
needs file B when A's object has an undefined symbol (nm: U) that B's object
defines (T, D, R, B, ...). That is every call, and every use of a variable,
across files; what a header holds inline (decimal.h, macros, enums) is not
seen, as it ties nothing together at link time.

Checks, each failing with exit 1 and saying what to change:
  - no circle: no two files need each other, directly or through others
    (the strongly connected components of the file graph, each listed with
    the symbols that close it);
  - with --doc, the module map of docs/architecture.md: the agent files
    named in each row's "may call" column are exactly those the row's file
    needs. A name followed by "(header only...)" (inline functions,
    structs, constants: nothing to link) or "(WITH_TLS=1...)" (only that
    build links it) may be absent from the objects.
--print writes the graph, one "file: needs..." line each.
"""
import os
import re
import subprocess
import sys

DEFINED = set("TDRBCGSVWiu")        # nm's letters for a symbol a file defines


def read_objects(paths):
    """{module: (defined set, undefined set)} of the objects named by paths
    (object files, or directories whose *.o are taken)."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += [os.path.join(p, n) for n in sorted(os.listdir(p)) if n.endswith(".o")]
        else:
            files.append(p)
    mods = {}
    for path in files:
        mod = os.path.basename(path)[:-2]
        out = subprocess.run(["nm", "-P", path], check=True,
                             capture_output=True, text=True).stdout
        defined, undefined = set(), set()
        for line in out.splitlines():
            f = line.split()
            if len(f) < 2:
                continue
            sym, kind = f[0], f[1]
            if kind == "U":
                undefined.add(sym)
            elif kind in DEFINED:
                defined.add(sym)
        mods[mod] = (defined, undefined)
    return mods


def build_graph(mods):
    """{a: {b: sorted symbols a needs from b}} over the agent's files."""
    owner = {}
    for mod, (defined, _) in mods.items():
        for sym in defined:
            owner.setdefault(sym, mod)
    graph = {m: {} for m in mods}
    for mod, (_, undefined) in mods.items():
        for sym in undefined:
            b = owner.get(sym)
            if b and b != mod:
                graph[mod].setdefault(b, []).append(sym)
    for m in graph:
        for b in graph[m]:
            graph[m][b].sort()
    return graph


def circles(graph):
    """The strongly connected components with more than one file (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def src(mod):
    return "build/.../script.c (lua/sliding_window.lua)" if mod == "script" else "spoa/%s.c" % mod


def short(syms, n=6):
    return ", ".join(syms[:n]) + (", ... (%d in all)" % len(syms) if len(syms) > n else "")


def check_circles(graph):
    comps = circles(graph)
    for comp in comps:
        print("check-calls: circle: %s need each other:" % ", ".join(src(m) for m in comp))
        for a in comp:
            for b in sorted(graph[a]):
                if b in comp:
                    print("    %s -> %s: %s" % (src(a), src(b), short(graph[a][b])))
    return len(comps)


ROW = re.compile(r"^\|\s*`([A-Za-z0-9_]+)\.(?:\[ch\]|c|h)`[^|]*\|[^|]*\|(.*)\|\s*$")
ONE = r"`[A-Za-z0-9_]+(?:\.(?:\[ch\]|c|h))?`(?:'s)?"
# a name, or names joined by "and", then perhaps the note that makes them optional
CHAIN = re.compile(r"(%s(?: and %s)*)(\s*\((?:header only|WITH_TLS=1)\b)?" % (ONE, ONE))
NAME = re.compile(r"`([A-Za-z0-9_]+)(?:\.(?:\[ch\]|c|h))?`")


def check_doc(graph, path):
    """Compare each module-map row's "may call" with the objects."""
    bad = 0
    seen = set()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = ROW.match(line)
            if not m or m.group(1) not in graph:
                continue
            mod = m.group(1)
            seen.add(mod)
            named, header_only = set(), set()
            for c in CHAIN.finditer(m.group(2)):
                for n in NAME.findall(c.group(1)):
                    if n in graph and n != mod:
                        (header_only if c.group(2) else named).add(n)
            needs = set(graph[mod])
            missing = sorted(needs - named - header_only)
            extra = sorted(named - needs)
            for b in missing:
                print("check-calls: %s:%d: %s calls %s (%s), which its \"may call\" does not name"
                      % (path, lineno, src(mod), src(b), short(graph[mod][b], 4)))
            for b in extra:
                print("check-calls: %s:%d: %s's \"may call\" names `%s`, which it does not call "
                      "(drop it, or mark a header-only use \"(header only: ...)\")" % (path, lineno, src(mod), b))
            bad += len(missing) + len(extra)
    for mod in sorted(set(graph) - seen - {"script"}):
        print("check-calls: %s: no module-map row for %s" % (path, src(mod)))
        bad += 1
    return bad


def self_test():
    """Compile small files in a temporary directory: a chain passes, a
    circle of three (not only a pair) fails, naming its files and symbols."""
    import tempfile
    srcs = {"a": "int b1(void); int a1(void) { return b1(); }",
            "b": "int c1(void); int b1(void) { return c1(); }",
            "c": "int c1(void) { return 0; }",
            "d": "int e1(void); int d1(void) { return e1(); }",
            "e": "int f1(void); int e1(void) { return f1(); }",
            "f": "int d1(void); int f1(void) { return d1(); }"}
    with tempfile.TemporaryDirectory() as tmp:
        objs = {}
        for name, text in srcs.items():
            with open(os.path.join(tmp, name + ".c"), "w") as f:
                f.write(text + "\n")
            objs[name] = os.path.join(tmp, name + ".o")
            subprocess.run([os.environ.get("CC", "cc"), "-c", "-o", objs[name],
                            os.path.join(tmp, name + ".c")], check=True)
        chain = build_graph(read_objects([objs["a"], objs["b"], objs["c"]]))
        ring = build_graph(read_objects([objs[n] for n in "abcdef"]))
        ok = (circles(chain) == [] and chain["a"] == {"b": ["b1"]} and
              circles(ring) == [["d", "e", "f"]] and ring["f"] == {"d": ["d1"]})
    print("check-calls: self-test %s" % ("passed" if ok else "FAILED"))
    return 0 if ok else 1


def main(argv):
    doc, show, args = None, False, []
    i = 0
    while i < len(argv):
        if argv[i] == "--doc":
            doc = argv[i + 1]
            i += 2
            continue
        if argv[i] == "--print":
            show = True
        else:
            args.append(argv[i])
        i += 1
    if args == ["--self-test"]:
        return self_test()
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    graph = build_graph(read_objects(args))
    if show:
        for m in sorted(graph):
            print("%s: %s" % (m, " ".join(sorted(graph[m]))))
    ncirc = check_circles(graph)
    ndoc = check_doc(graph, doc) if doc else 0
    if ncirc:
        print("check-calls: %d circle(s) among the agent's files: calls must run one way "
              "(a file may not need, directly or not, a file that needs it)" % ncirc)
    if ndoc:
        print("check-calls: %d difference(s) between %s's module map and the objects" % (ndoc, doc))
    if not ncirc and not ndoc:
        print("check-calls: %d files, no circle%s" % (len(graph), ", the module map matches" if doc else ""))
    return 1 if ncirc or ndoc else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
