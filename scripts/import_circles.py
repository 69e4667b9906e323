#!/usr/bin/env python3
# The import-circle guard (docs/library.md, "Layers and guards"): which files of a crate
# import which (`use crate::a::b`, `crate::a::b::x` in paths, `use super::x`
# and `super::x`, resolved against the file's module), and every pair of
# files, or of top-level modules, that import each other. Exits 1 when there
# is one. Usage: scripts/import_circles.py CRATE_SRC_DIR...
import os, re, sys

def check(root):
    files = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            if f.endswith('.rs'):
                p = os.path.join(d, f); rel = os.path.relpath(p, root)
                parts = rel[:-3].split(os.sep)
                if parts[-1] in ('mod', 'lib', 'main'): parts = parts[:-1]
                files[tuple(parts)] = p
    def resolve(path):
        # longest prefix of `path` that is a file module
        for n in range(len(path), -1, -1):
            if tuple(path[:n]) in files: return tuple(path[:n])
        return None
    edges = set()
    for mod, p in files.items():
        text = '\n'.join(l for l in open(p).read().split('\n') if not l.lstrip().startswith('//'))
        for m in re.finditer(r'\b(crate|super)((?:::\w+)+)', text):
            kind, rest = m.group(1), m.group(2).strip(':').split('::')
            if kind == 'crate':
                base = []
            else:
                base = list(mod[:-1])
                # `super::super::x`
                while rest and rest[0] == 'super':
                    base = base[:-1]; rest = rest[1:]
            target = resolve(base + rest)
            if target is not None and target != mod and target != ():
                # `use super::*` from a child file to its parent is an import too
                edges.add((mod, target))
        # `use super::*;` / `use super::{...}`
        for m in re.finditer(r'\bsuper::(\*|\{)', text):
            target = tuple(mod[:-1])
            if target != () and target != mod: edges.add((mod, target))
    name = lambda m: '/'.join(m) or 'lib'
    bad = sorted({tuple(sorted((a, b))) for a, b in edges if (b, a) in edges})
    print(f'{root}: {len(files)} files, {len(edges)} import edges')
    for a, b in bad: print('FILE CIRCLE:', name(a), '<->', name(b))

    # module level: top-level modules
    top = {(a[0], b[0]) for a, b in edges if a and b and a[0] != b[0]}
    mb = sorted({tuple(sorted(e)) for e in top if (e[1], e[0]) in top})
    for a, b in mb: print('TOP-MODULE CIRCLE:', a, '<->', b)
    return bool(bad or mb)


failed = [root for root in sys.argv[1:] if check(root)]
sys.exit(1 if failed else 0)
