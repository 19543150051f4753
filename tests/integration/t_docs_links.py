#!/usr/bin/env python3
"""Every relative link of the user docs (docs/*.md, README.md) resolves:
the file it names exists, and a "#anchor" (on another page or the same one)
names a heading of that page as GitHub spells heading anchors (lower case,
punctuation dropped, spaces to hyphens, "-1", "-2" for repeats) or an
explicit <a name/id>. Links inside code (fenced blocks, `spans`) are text,
not links. No processes: it reads the files."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import ROOT, Harness  # noqa: E402

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)


def prose_lines(text):
    """(number, line) of the lines outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def slug(title):
    """GitHub's anchor for a heading's text: the text as rendered (links
    by their text, no code or emphasis marks), lower-cased, every character
    but letters, digits, spaces, hyphens and underscores dropped, each
    space a hyphen."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)
    t = re.sub(r"<[^>]+>", "", t)
    t = t.replace("`", "").replace("*", "")
    t = re.sub(r"(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])", "", t)
    t = t.strip().lower()
    t = "".join(c for c in t if c.isalnum() or c in " -_")
    return t.replace(" ", "-")


def anchors(path):
    """The anchors of the page at <path>: its headings' (repeats numbered
    as GitHub numbers them) and its explicit <a name/id>s."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    seen, out = {}, set()
    for _, line in prose_lines(text):
        m = HEADING.match(line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else "%s-%d" % (s, n))
        out.update(a.lower() for a in HTML_ANCHOR.findall(line))
    return out


def links(path):
    """(line number, target) of every relative link of the page at <path>."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for n, line in prose_lines(text):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue                            # http:, https:, mailto:
            yield n, target


h = Harness()

# The anchor rule itself, on headings of this project's shapes.
for title, want in (("What bounds each figure", "what-bounds-each-figure"),
                    ("The agent behind HAProxy, third round", "the-agent-behind-haproxy-third-round"),
                    ("(i) The module against the script", "i-the-module-against-the-script"),
                    ("`ctl show`: reading a key", "ctl-show-reading-a-key"),
                    ("Step 5 - logs", "step-5---logs"),
                    ("The SPOE floor (issue 29)", "the-spoe-floor-issue-29"),
                    ("max_inflight and [docs](x.md)", "max_inflight-and-docs")):
    h.eq("GitHub's anchor of %r" % title, want, slug(title))

pages = sorted(os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
               if f.endswith(".md"))
pages.append(os.path.join(ROOT, "README.md"))
cache = {}
bad, checked, with_anchor = [], 0, 0
for page in pages:
    rel = os.path.relpath(page, ROOT)
    for n, target in links(page):
        checked += 1
        path, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(dest):
            bad.append("%s:%d: %s: no such file" % (rel, n, target))
            continue
        if not frag:
            continue
        if not dest.endswith(".md"):
            continue                                # a line of a source file, e.g. #L10
        with_anchor += 1
        if dest not in cache:
            cache[dest] = anchors(dest)
        if frag.lower() not in cache[dest]:
            bad.append("%s:%d: %s: no such heading in %s" % (rel, n, target,
                                                            os.path.relpath(dest, ROOT)))

h.check("the docs have relative links to check (%d, %d with an anchor)" % (checked, with_anchor),
        checked > 100 and with_anchor > 20)
h.check("every relative link of docs/ and README.md resolves", not bad, "\n  " + "\n  ".join(bad))
# The pages other docs link into by anchor keep those headings.
log = os.path.join(ROOT, "docs", "benchmarks-log.md")
h.check("docs/benchmarks-log.md exists (the experiment log)", os.path.exists(log))
h.done()
