#!/usr/bin/env python3
"""The import cycles between the files of each crate of the workspace.

A file depends on another when it names an item of it (`use crate::a::b::X`, `super::X`, a
path in code); an item a module only re-exports counts as its defining file's. A cycle is a
strongly connected component of more than one file. Test modules (`#[cfg(test)] mod tests`),
`#[cfg(doc)]` imports and comments are left out. It reads the sources as text: a measure for planning, not a proof.

    python3 scripts/import_cycles.py [ROOT] [--explain] [--through-reexports]

--explain prints the edges inside each cycle and what each names; --through-reexports counts
an item reached through a re-export as the re-exporting file's.
"""
import os, re, sys
args = [a for a in sys.argv[1:] if not a.startswith("-")]
root = args[0] if args else "."
RESOLVE = "--through-reexports" not in sys.argv
EXPLAIN = "--explain" in sys.argv
crates = {"root": "src"}
for c in ["rpc", "engine", "etcd", "store", "bridge", "python", "testkit"]:
    if os.path.isdir(os.path.join(root, c, "src")): crates[c] = c + "/src"
path_re = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
use_re = re.compile(r"\buse\s+(crate|super|self)::([^;]*);", re.S)
def modpath(src, f):
    rel = os.path.relpath(f, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"): rel = rel[:-1]
    return tuple(rel)
def expand(tree):
    # expand a use tree "a::{b, c::{d}}" into paths
    tree = tree.strip()
    m = re.match(r"^([A-Za-z0-9_:]*?)(?:::)?\{(.*)\}$", tree, re.S)
    if not m: return [tree.split(" as ")[0].strip()]
    pre, body = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{": depth += 1
        if ch == "}": depth -= 1
        if ch == "," and depth == 0: parts.append(cur); cur = ""
        else: cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        p = p.strip()
        if not p: continue
        for e in expand(p): out.append((pre + "::" + e) if pre else e)
    return out
total = 0
for crate, src in crates.items():
    src = os.path.join(root, src)
    files = {}
    for d, _, fs in os.walk(src):
        for f in fs:
            if f.endswith(".rs"): files[modpath(src, os.path.join(d, f))] = os.path.join(d, f)
    def resolve2(base, segs, depth):
        cur, best = base, (base if base in files else None)
        for s in segs:
            if s == "super": cur = cur[:-1]; continue
            nxt = cur + (s,)
            if nxt in files: cur = best = nxt
            else: break
        return best
    def resolve(base, kind, segs, depth=0):
        if kind == "crate": cur = ()
        elif kind == "self": cur = base
        else:
            cur = base
            while segs and segs[0] == "super": segs = segs[1:]; cur = cur[:-1]
            cur = cur[:-1]
        # segs after first super handled: "super::super::x"
        best = cur if cur in files else None
        for i, s in enumerate(segs):
            if s == "super": cur = cur[:-1]; continue
            nxt = cur + (s,)
            if nxt in files: cur = best = nxt; continue
            if RESOLVE and best is not None and (best, s) in reexp and depth < 8:
                b, rest = reexp[(best, s)]
                r = resolve2(b, rest, depth + 1)
                if r is not None: return r
            break
        return best
    reexp = {}
    for m, f in files.items():
        t = re.sub(r"//[^\n]*", "", open(f).read())
        for tree in re.findall(r"\bpub(?:\([a-z]+\))?\s+use\s+([^;]*);", t, re.S):
            for p in expand(tree):
                segs = [x for x in p.split("::") if x]
                if not segs: continue
                name = p.split(" as ")[-1].strip().split("::")[-1]
                if segs[0] in ("self",): segs = segs[1:]; base = m
                elif segs[0] == "crate": segs = segs[1:]; base = ()
                elif segs[0] == "super": segs = segs[1:]; base = m[:-1]
                else: base = m
                reexp[(m, name)] = (base, segs[:-1])
    edges = {m: set() for m in files}
    why = {}
    for m, f in files.items():
        text = open(f).read()
        # drop cfg(test) mod tests blocks crudely: cut at "#[cfg(test)]\nmod tests"
        i = text.find("#[cfg(test)]\nmod tests")
        if i >= 0: text = text[:i]
        text = re.sub(r"//[^\n]*", "", text)
        text = re.sub(r"#\[cfg\(doc\)\]\s*use[^;]*;", "", text)
        paths = []
        for k, tree in use_re.findall(text):
            for p in expand(tree): paths.append((k, [s for s in p.split("::") if s]))
        for k, rest in path_re.findall(text):
            paths.append((k, rest.split("::")[1:]))
        for k, segs in paths:
            t = resolve(m, k, list(segs))
            if t is not None and t != m:
                edges[m].add(t)
                why.setdefault((m, t), set()).add("::".join([k] + list(segs)))
    # ignore edges from a parent to its own descendants? keep all; count SCCs
    idx, low, st, on, sccs, n = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def strong(v):
        idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
        for w in edges[v]:
            if w not in idx: strong(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            c = []
            while True:
                w = st.pop(); on.discard(w); c.append(w)
                if w == v: break
            if len(c) > 1: sccs.append(c)
    for v in files:
        if v not in idx: strong(v)
    for c in sccs:
        print(crate, len(c), sorted("/".join(x) or "lib" for x in c))
        if EXPLAIN:
            for a in c:
                for b in edges[a]:
                    if b in c: print("   ", "/".join(a) or "lib", "->", "/".join(b) or "lib", sorted(why[(a, b)])[:4])
    total += len(sccs)
print("cycles (SCCs > 1 file):", total)
