#!/usr/bin/env python3
"""Which agent source file calls which, read from the built objects.

    tools/check-calls.py [--doc docs/architecture.md] [--folders docs/architecture.md]
                         [--print] OBJECT|DIR...
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
  - with --folders, the folder map of docs/architecture.md: the agent's
    files live in spoa/ (the process) and spoa/<folder>/ (its subsystems);
    a file of one folder may need (call) a file of another only where the
    row of its folder names that folder under "may call", and may include
    another folder's header only where the row names it, plain or "(header
    only ...)"; and no two folders need or include each other, directly or
    through others. The includes are read from the sources (spoa/**/*.[ch]).
--print writes the graph, one "file: needs..." line each.
"""
import os
import re
import subprocess
import sys

DEFINED = set("TDRBCGSVWiu")        # nm's letters for a symbol a file defines


FOLDER_OF = {}                      # module -> its folder ("spoa" for spoa/ itself)


def folder_of_path(path):
    """The agent folder of a source or object path: the directory under the
    last "spoa/" ("spoa" for files directly in it)."""
    parts = os.path.normpath(path).split(os.sep)
    if "spoa" not in parts:
        # a file the agent links from outside spoa/ (module/rl_args.c):
        # its own directory's name stands for its folder
        return parts[-2] if len(parts) > 1 else "spoa"
    i = len(parts) - 1 - parts[::-1].index("spoa")
    rest = parts[i + 1:-1]
    return rest[0] if rest else "spoa"


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
        FOLDER_OF[mod] = folder_of_path(path)
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


FROW = re.compile(r"^\|\s*`(?:spoa/(?:([a-z_]+)/)?|(module)/)`[^|]*\|[^|]*\|(.*)\|\s*$")
FNAME = re.compile(r"`([a-z_]+)`")


def read_folder_map(path):
    """{folder: (may call set, header-only set, line number)} from the
    folder map's rows ("| `spoa/<folder>/` | owns | may call |")."""
    rows = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = FROW.match(line)
            if not m:
                continue
            folder = m.group(1) or m.group(2) or "spoa"
            calls, header = set(), set()
            for c in CHAIN_F.finditer(m.group(3)):
                (header if c.group(2) else calls).update(FNAME.findall(c.group(1)))
            rows[folder] = (calls, header, lineno)
    return rows


CHAIN_F = re.compile(r"(`[a-z_]+`(?: and `[a-z_]+`)*)(\s*\(header only\b)?")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)"', re.M)


def include_graph(srcdir):
    """{folder: {folder: [file -> header, ...]}} of the sources' includes
    across folders."""
    where = {}
    files = []
    for dp, _, names in os.walk(srcdir):
        for n in names:
            if n.endswith((".c", ".h")):
                where[n] = folder_of_path(os.path.join(dp, n))
                files.append(os.path.join(dp, n))
    out = {}
    for p in sorted(files):
        a = folder_of_path(p)
        with open(p, encoding="utf-8") as f:
            for h in INCLUDE.findall(f.read()):
                b = where.get(h)
                if b and b != a:
                    out.setdefault(a, {}).setdefault(b, []).append(
                        "%s -> %s" % (os.path.relpath(p), h))
    return out


def check_folders(graph, path, srcdir):
    """Calls and includes across folders against the folder map; no circle
    among folders."""
    rows = read_folder_map(path)
    bad = 0
    fcalls = {}
    for a, needs in graph.items():
        for b, syms in needs.items():
            fa, fb = FOLDER_OF.get(a, "spoa"), FOLDER_OF.get(b, "spoa")
            if fa != fb:
                fcalls.setdefault(fa, {}).setdefault(fb, []).append(
                    "%s -> %s (%s)" % (a, b, short(syms, 3)))
    fincs = include_graph(srcdir)
    for fa in sorted(set(FOLDER_OF.values()) | set(fincs)):
        if fa not in rows:
            print("check-calls: %s: no folder-map row for spoa/%s/" % (path, fa))
            bad += 1
    for fa, needs in sorted(fcalls.items()):
        calls, _, lineno = rows.get(fa, (set(), set(), 0))
        for fb, why in sorted(needs.items()):
            if fb not in calls:
                print("check-calls: %s:%d: spoa/%s/ calls into spoa/%s/, which its \"may call\" "
                      "does not name: %s" % (path, lineno, fa, fb, "; ".join(why[:3])))
                bad += 1
    for fa, incs in sorted(fincs.items()):
        calls, header, lineno = rows.get(fa, (set(), set(), 0))
        for fb, why in sorted(incs.items()):
            if fb not in calls and fb not in header:
                print("check-calls: %s:%d: spoa/%s/ includes a header of spoa/%s/, which its "
                      "\"may call\" does not name: %s" % (path, lineno, fa, fb, "; ".join(why[:3])))
                bad += 1
    fgraph = {f: set() for f in rows}
    for src_map in (fcalls, fincs):
        for fa, needs in src_map.items():
            fgraph.setdefault(fa, set()).update(needs)
    for f in list(fgraph):
        for b in fgraph[f]:
            fgraph.setdefault(b, set())
    comps = circles({a: {b: [] for b in bs} for a, bs in fgraph.items()})
    for comp in comps:
        print("check-calls: folders that need each other: %s" % ", ".join("spoa/%s/" % c for c in comp))
        bad += 1
    for fa, (calls, header, lineno) in sorted(rows.items()):
        used = set(fcalls.get(fa, {})) | set(fincs.get(fa, {}))
        for fb in sorted((calls | header) - used - {fa}):
            print("check-calls: %s:%d: spoa/%s/'s \"may call\" names `%s`, which it neither "
                  "calls nor includes" % (path, lineno, fa, fb))
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
    doc, folders, show, args = None, None, False, []
    i = 0
    while i < len(argv):
        if argv[i] in ("--doc", "--folders"):
            if argv[i] == "--doc":
                doc = argv[i + 1]
            else:
                folders = argv[i + 1]
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
    nf = check_folders(graph, folders, "spoa") if folders else 0
    if nf:
        print("check-calls: %d difference(s) between %s's folder map and the code" % (nf, folders))
    if ncirc:
        print("check-calls: %d circle(s) among the agent's files: calls must run one way "
              "(a file may not need, directly or not, a file that needs it)" % ncirc)
    if ndoc:
        print("check-calls: %d difference(s) between %s's module map and the objects" % (ndoc, doc))
    if not ncirc and not ndoc and not nf:
        print("check-calls: %d files, no circle%s%s" % (len(graph), ", the module map matches" if doc else "",
                                                     ", the folder map holds" if folders else ""))
    return 1 if ncirc or ndoc or nf else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
