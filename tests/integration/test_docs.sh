# The documentation holds together: every relative Markdown link and every
# cited *.md path in the tree names a file that exists (anchors included,
# for links to a heading of a Markdown file), README.md stays a tour of at
# most 400 lines, and docs/stages.md names every param of every built-in
# stage that `dagrun stages --json` lists.
. "$(dirname "$0")/lib.sh"

cd "$DAGRUN_SOURCE_DIR"
n=$(wc -l < README.md)
[ "$n" -le 400 ] || fail "README.md has $n lines; the reference belongs in docs/ (at most 400)"

# Files git knows (tracked, or new and not ignored): a build tree or a
# runs/ directory inside the checkout is not part of the docs.
git ls-files --cached --others --exclude-standard > "$T/files" 2>/dev/null ||
  find . -path ./build -prune -o -path ./.deps -prune -o -type f -print | sed 's|^\./||' > "$T/files"

"$PY" - "$T/files" > "$T/bad" <<'P'
import os, re, sys

files = [l.rstrip("\n") for l in open(sys.argv[1]) if l.strip()]
known = set(files)
dirs = {os.path.dirname(f) for f in files}
while True:
    more = {os.path.dirname(d) for d in dirs} - dirs
    if not more:
        break
    dirs |= more

def exists(path):
    path = os.path.normpath(path)
    return path in known or path in dirs or os.path.exists(path)

def slug(title):
    # GitHub's anchors: lower case, punctuation but - and _ dropped,
    # spaces to -.
    t = re.sub(r"`", "", title.strip().lower())
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")

anchors = {}
def anchors_of(path):
    if path not in anchors:
        a = set()
        fence = False
        for line in open(path, encoding="utf-8"):
            if line.startswith("```"):
                fence = not fence
            m = None if fence else re.match(r"#{1,6} (.*)", line)
            if m:
                a.add(slug(m.group(1)))
        anchors[path] = a
    return anchors[path]

bad = []
link = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A cited document: a path with a folder, ending in .md, not in a URL
# and not after a shell variable; it may be relative to the citing file's
# folder or to the root.
cite = re.compile(r"(?<![\w/.$-])((?:\.\.?/)*[\w.-]+(?:/[\w.-]+)*\.md)\b")
for f in files:
    if f.startswith(("tests/reference/node", ".deps/")):
        continue
    if not f.endswith((".md", ".c", ".h", ".cu", ".cuh", ".sh", ".txt",
                       ".py", ".yaml", ".yml", ".in", ".cmake")) and \
       os.path.basename(f) not in ("run",):
        continue
    try:
        text = open(f, encoding="utf-8").read()
    except (UnicodeDecodeError, FileNotFoundError):
        continue
    here = os.path.dirname(f)
    for no, line in enumerate(text.split("\n"), 1):
        if f.endswith(".md"):
            for target in link.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue  # http:, https:, mailto:
                path, _, frag = target.partition("#")
                full = os.path.join(here, path) if path else f
                if not exists(full):
                    bad.append(f"{f}:{no}: link to {target}: no such file")
                elif frag and full.endswith(".md") and \
                        frag not in anchors_of(os.path.normpath(full)):
                    bad.append(f"{f}:{no}: link to {target}: no heading #{frag}")
        for path in cite.findall(line):
            if "://" in line and re.search(r"https?://\S*" + re.escape(path), line):
                continue
            # A file name alone (such as the model card the export stage
            # writes) is a file a program makes, not a citation.
            if "/" not in path:
                continue
            if not (exists(os.path.join(here, path)) or exists(path)):
                bad.append(f"{f}:{no}: cites {path}: no such file")
if bad:
    print("\n".join(bad))
P
[ ! -s "$T/bad" ] || fail "documents cited that do not exist:
$(cat "$T/bad")"

# Every param of every built-in stage is in docs/stages.md.
DAGRUN_PLUGIN_PATH= "$DAGRUN" stages --json > "$T/stages.json"
"$PY" - "$T/stages.json" docs/stages.md > "$T/missing" <<'P'
import json, sys
doc = open(sys.argv[2], encoding="utf-8").read()
for s in json.load(open(sys.argv[1])):
    if f"### {s['name']} " not in doc:
        print(f"stage {s['name']} has no section '### {s['name']} {s['version']}'")
        continue
    section = doc.split(f"### {s['name']} ", 1)[1].split("\n### ", 1)[0]
    for p in s["params"]:
        if f"| `{p['name']}` |" not in section:
            print(f"stage {s['name']}: param {p['name']} is not in its table")
P
[ ! -s "$T/missing" ] || fail "docs/stages.md is behind dagrun stages:
$(cat "$T/missing")"
pass
