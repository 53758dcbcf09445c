# The tree's layering, read from every #include "..." of its C, C++ and
# CUDA sources. Fails naming file:line when
# - a file in orchestrator/<layer>/ includes from a higher layer (base <-
#   dagfile <- host <- run <- store <- report <- serve <- main.c: arrows
#   point down only);
# - anything in lib/ or gpu/ includes from orchestrator/ or stages/, or
#   lib/ from gpu/ (lib/ is the leaf every tree may use);
# - folders include each other, directly or round a longer loop (a cycle
#   between folders);
# - an include across folders does not name its folder: a bare "x.h"
#   that is not in the including file's own folder (tests/ may include
#   their helper headers, testlib.h and the like, bare).
# An include is resolved as the compiler would: the including file's
# folder first, then the include roots the CMake files give (LAYER_ROOTS
# below), then, for a bare name, any folder's header of that name (some
# target's own -I); one that resolves to no file of the tree (a
# generated header) is not judged.
#
# LAYERS_SOURCE_DIR (default DAGRUN_SOURCE_DIR) names the tree to read,
# so that the check can be tried on a copy with a bad include.
. "$(dirname "$0")/lib.sh"

SRC=${LAYERS_SOURCE_DIR:-$DAGRUN_SOURCE_DIR}
[ -d "$SRC/orchestrator" ] || fail "no orchestrator/ under $SRC"

$PY - "$SRC" >"$T/report" 2>&1 <<'PY' || fail "layering broken:
$(cat "$T/report")"
import os, re, sys

src = sys.argv[1]
# Where "dir/x.h" is looked up after the including file's folder: the
# include directories of the CMake targets (orchestrator/CMakeLists.txt,
# lib/, gpu/, stages/common, plugins/, tests/gpu/emu).
LAYER_ROOTS = ["orchestrator", ".", "plugins/include", "gpu", "stages",
               "tests/gpu/emu", "tests/unit"]
LAYERS = ["base", "dagfile", "host", "run", "store", "report", "serve"]
TOP = len(LAYERS)  # orchestrator/main.c
EXTS = (".c", ".h", ".cu", ".cuh", ".cpp", ".hpp", ".inc")
SKIP = {".git", ".deps", "node_modules"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

def rel(p):
    return os.path.relpath(p, src).replace(os.sep, "/")

files = []
for root, dirs, names in os.walk(src):
    r = rel(root)
    dirs[:] = sorted(d for d in dirs
                     if d not in SKIP and not d.startswith("build")
                     and not (r == "." and d.startswith(".")))
    for n in sorted(names):
        if n.endswith(EXTS):
            files.append(rel(os.path.join(root, n)))

def folder(f):
    return os.path.dirname(f) or "."

by_name = {}
for f in files:
    by_name.setdefault(os.path.basename(f), []).append(f)

def resolve(f, name):
    """The tree file that #include "name" in f names, and whether it was
    found in f's own folder, or (None, False). A bare name found in
    neither f's folder nor a root is some other folder's header reached
    through an -I of its own: the first file of that name."""
    own = os.path.normpath(os.path.join(folder(f), name)).replace(os.sep, "/")
    if os.path.isfile(os.path.join(src, own)):
        return own, folder(own) == folder(f)
    for r in LAYER_ROOTS:
        cand = os.path.normpath(os.path.join(r, name)).replace(os.sep, "/")
        if os.path.isfile(os.path.join(src, cand)):
            return cand, False
    if "/" not in name and name in by_name:
        return by_name[name][0], False
    return None, False

def layer(f):
    """Rank of an orchestrator file's layer, or None outside it."""
    parts = f.split("/")
    if parts[0] != "orchestrator":
        return None
    if len(parts) == 2:
        return TOP
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None

def top(f):
    return f.split("/")[0]

errors = []
edges = {}  # (folder, folder) -> first "file:line" that makes it
for f in files:
    with open(os.path.join(src, f), errors="replace") as fh:
        for ln, line in enumerate(fh, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            name = m.group(1)
            target, own = resolve(f, name)
            if target is None:
                continue
            at = "%s:%d" % (f, ln)
            lf, lt = layer(f), layer(target)
            if lf is not None and lt is not None and lt > lf:
                errors.append('%s: #include "%s": %s may not include from '
                              "%s (a higher layer)"
                              % (at, name, folder(f), folder(target)))
            if top(f) in ("lib", "gpu") and top(target) in ("orchestrator",
                                                            "stages"):
                errors.append('%s: #include "%s": %s/ may not include from '
                              "%s/" % (at, name, top(f), top(target)))
            if top(f) == "lib" and top(target) == "gpu":
                errors.append('%s: #include "%s": lib/ may not include from '
                              "gpu/" % (at, name))
            if ("/" not in name and not own and
                    not (top(f) == "tests" and top(target) == "tests")):
                errors.append('%s: #include "%s" is %s: across folders, '
                              "name the folder" % (at, name, target))
            a, b = folder(f), folder(target)
            if a != b:
                edges.setdefault((a, b), at)

# Cycles between folders: strongly connected components of the folder
# graph (Tarjan's algorithm), each edge inside one named by an include.
graph = {}
for (a, b) in edges:
    graph.setdefault(a, []).append(b)
    graph.setdefault(b, [])
index, low, stack, on, comps = {}, {}, [], set(), []
def strong(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w in sorted(graph[v]):
        if w not in index:
            strong(w)
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
            comps.append(sorted(comp))
sys.setrecursionlimit(10000)
for v in sorted(graph):
    if v not in index:
        strong(v)
for comp in comps:
    inside = sorted((a, b) for (a, b) in edges if a in comp and b in comp)
    errors.append("cycle between folders %s:\n%s" % (
        ", ".join(comp),
        "\n".join("  %s -> %s (%s)" % (a, b, edges[(a, b)])
                  for (a, b) in inside)))

for e in errors:
    print(e)
print("%d files, %d folder edges, %d problems"
      % (len(files), len(edges), len(errors)))
sys.exit(1 if errors else 0)
PY
cat "$T/report"
pass
