#!/usr/bin/env python3
"""Module cycles of a crate: `python3 devtools/module_cycles.py oi-user/src`.

Each .rs file is a module; an edge A -> B when A's non-test code names B (`crate::b::...`,
`super::...`, `use` groups expanded; comments left out). Reports the strongly connected
components among the children of every folder (the crate's top-level modules, then inside
each folder), with up to three uses behind each edge. Test code (#[cfg(test)] modules,
*tests.rs files, tests/ folders) is left out. Reads the files as text; builds nothing."""
import os, re, sys, collections
root = sys.argv[1]
def modpath(rel):
    parts = rel[:-3].split('/')
    if parts[-1] in ('mod', 'lib', 'main'): parts = parts[:-1]
    return parts
files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            rel = os.path.relpath(os.path.join(d, f), root)
            p = modpath(rel)
            if any(x == 'tests' or x.endswith('_tests') for x in p): continue
            files[tuple(p)] = open(os.path.join(d, f)).read()
def strip_tests(src):
    # drop `#[cfg(test)] mod x { ... }` blocks and `#[cfg(test)] mod x;` lines
    out, i = [], 0
    for m in re.finditer(r'#\[cfg\(test\)\]\s*(pub(\(crate\))?\s+)?mod\s+\w+\s*(;|\{)', src):
        if m.start() < i: continue
        out.append(src[i:m.start()])
        if m.group(0).endswith(';'):
            i = m.end(); continue
        depth, j = 1, m.end()
        while j < len(src) and depth:
            depth += {'{': 1, '}': -1}.get(src[j], 0); j += 1
        i = j
    out.append(src[i:])
    src = ''.join(out)
    return re.sub(r'//[^\n]*', '', src)
def expand_use(body):
    # a::{b, c::{d}} -> a::b, a::c::d
    body = re.sub(r'\s+', '', body)
    def rec(prefix, s):
        res, depth, start = [], 0, 0
        items = []
        for k, c in enumerate(s):
            if c == '{': depth += 1
            elif c == '}': depth -= 1
            elif c == ',' and depth == 0: items.append(s[start:k]); start = k + 1
        items.append(s[start:])
        for it in items:
            if not it: continue
            m = re.match(r'^(.*?)::\{(.*)\}$', it)
            if m: res += rec(prefix + m.group(1) + '::', m.group(2))
            elif it.startswith('{') and it.endswith('}'): res += rec(prefix, it[1:-1])
            else: res.append(prefix + it)
        return res
    return rec('', body)
known = set(files)
def resolve(cur, path):
    segs = [s for s in path.split('::') if s]
    if not segs: return None
    if segs[0] == 'crate': base, segs = [], segs[1:]
    elif segs[0] in ('super', 'self'):
        base = list(cur)
        while segs and segs[0] in ('super', 'self'):
            if segs[0] == 'super': base = base[:-1]
            segs = segs[1:]
    else: return None
    best = None
    cand = list(base)
    for s in segs:
        cand.append(s)
        if tuple(cand) in known: best = tuple(cand)
        else: break
    return best
edges = collections.defaultdict(set)
for mod, src in files.items():
    src = strip_tests(src)
    paths = []
    for m in re.finditer(r'\buse\s+([^;]+);', src): paths += expand_use(m.group(1))
    paths += re.findall(r'\b((?:crate|super)(?:::\w+)+)', src)
    for p in paths:
        t = resolve(mod, p.split(' as ')[0])
        if t and t != mod: edges[mod].add(t)
def sccs(nodes, adj):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in adj.get(v, ()):
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in nodes:
        if v not in index: visit(v)
    return out
def level(prefix):
    d = len(prefix) + 1
    adj, why = collections.defaultdict(set), collections.defaultdict(list)
    for a, bs in edges.items():
        for b in bs:
            if a[:len(prefix)] == prefix and b[:len(prefix)] == prefix and len(a) >= d and len(b) >= d:
                x, y = a[:d], b[:d]
                if x != y:
                    adj[x].add(y); why[(x, y)].append(('::'.join(a), '::'.join(b)))
    nodes = sorted({m[:d] for m in known if m[:len(prefix)] == prefix and len(m) >= d})
    return sccs(nodes, adj), why
folders = sorted({m[:k] for m in known for k in range(len(m))})
found = 0
for f in folders:
    comps, why = level(f)
    for c in comps:
        found += 1
        names = ['::'.join(x) for x in c]
        print(f"cycle in {'::'.join(f) or 'crate'}: {' <-> '.join(names)}")
        for x in c:
            for y in c:
                if (x, y) in why:
                    ex = why[(x, y)][:3]
                    print(f"    {'::'.join(x)} -> {'::'.join(y)}: " + '; '.join(f'{a} uses {b}' for a, b in ex))
print(f"{found} cycle(s) among {len(known)} modules")
