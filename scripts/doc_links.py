#!/usr/bin/env python3
"""Checks every relative link and anchor in the README and docs/.

A link to a file must name a file the repository holds; a link with an
anchor (`file.md#part` or `#part`) must name a heading of that file, made
into an anchor the way GitHub does it (lower case, punctuation dropped,
spaces to hyphens, repeats numbered -1, -2, ...). Links to other sites are
not followed: these machines reach none. Exits 1 and names each broken link.

Usage: python3 scripts/doc_links.py [FILE_OR_DIR ...]   (default: README.md ARCHITECTURE.md docs/)
"""
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
REFDEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def strip_code(text, inline=True):
    """Drops fenced blocks and (with `inline`) inline code, where brackets
    are not links; headings keep their inline code, which their anchors
    are made of."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            out.append("")
            continue
        if fenced:
            out.append("")
        else:
            out.append(re.sub(r"`[^`]*`", "``", line) if inline else line)
    return "\n".join(out)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        seen, found = {}, set(HTML_ID.findall(text))
        for line in strip_code(text, inline=False).splitlines():
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def check(path, root):
    with open(path, encoding="utf-8") as f:
        text = strip_code(f.read())
    broken = []
    targets = LINK.findall(text) + IMAGE.findall(text) + REFDEF.findall(text)
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else os.path.normpath(
            os.path.join(os.path.dirname(path), file_part))
        if not os.path.abspath(dest).startswith(root + os.sep):
            broken.append(f"{path}: {target}: points outside the repository")
            continue
        if not os.path.exists(dest):
            broken.append(f"{path}: {target}: no such file")
            continue
        if anchor and dest.endswith(".md") and anchor not in anchors(dest):
            broken.append(f"{path}: {target}: no heading makes the anchor #{anchor}")
    return broken


def main(args):
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    os.chdir(root)
    files = []
    for arg in args or ["README.md", "ARCHITECTURE.md", "docs"]:
        if os.path.isdir(arg):
            for dirpath, _, names in os.walk(arg):
                files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".md")]
        else:
            files.append(arg)
    broken = [b for f in sorted(files) for b in check(f, root)]
    for b in broken:
        print(b)
    print(f"doc links: {len(files)} files, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
