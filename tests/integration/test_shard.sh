# The shard stage on real corpora: byte-balanced shards whose counts and
# checksums match the manifest, exact text round-trip, no document in both
# splits, duplicates across files kept once, byte-identical output for any
# thread count, another order for another seed, gzip JSON Lines, and the
# fortunes corpus.
. "$(dirname "$0")/lib.sh"

# A corpus of "%"-separated documents in nested files, sizes from a few
# bytes to ~20 KB (so "within one document of the mean" means something),
# with JSON-hostile characters, and exact duplicates planted across files.
# expected.json: the distinct texts, and how many duplicates were planted.
/usr/bin/python3 - <<'P'
import json, os, random
random.seed(7)
os.makedirs("corpus/sub/deeper", exist_ok=True)
words = ["alpha", "beta", "gamma", "delta", "quote\"d", "back\\slash",
         "tab\there", "caf\u00e9", "\u65e5\u672c", "\U0001F600", "ctl\x01x",
         "line\u2028sep", "</script>", "{\"json\": 1}"]
docs = []
for i in range(900):
    n = random.choice([1, 3, 10, 40, 200, 2500])
    lines, line = [], []
    for _ in range(n):
        line.append(random.choice(words))
        if len(line) > random.randint(3, 12):
            lines.append(" ".join(line)); line = []
    lines.append(" ".join(line) or "end")
    docs.append(f"doc {i}\n" + "\n".join(lines))
files = [[] for _ in range(7)]
for i, d in enumerate(docs):
    files[i % 7].append(d)
# Planted duplicates: copies of documents in other files (and one twice).
planted = 0
for src, dst in [(5, 3), (10, 6), (10, 2), (77, 0), (400, 1)]:
    files[dst].append(docs[src]); planted += 1
names = ["a.txt", "b.txt", "sub/c.txt", "sub/d.txt", "sub/deeper/e.txt",
         "f.txt", "g.txt"]
for name, ds in zip(names, files):
    with open("corpus/" + name, "w", encoding="utf-8") as f:
        f.write("\n%\n".join(ds) + "\n%\n")
json.dump({"texts": docs, "planted": planted}, open("expected.json", "w"))
P

# check_run RUN_DIR TRAIN_SHARDS VAL_SHARDS: the invariants a user of the
# shards relies on, checked against the manifest and expected.json.
check_run() {
  local out="$1/shard/out"
  [ -f "$out/manifest.json" ] || fail "no manifest in $out"
  # Every checksum in the manifest is what sha256sum says.
  /usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
for s in m["shards"]:
    print(s["sha256"] + "  " + s["path"])
' "$out" > "$T/sums"
  (cd "$out" && sha256sum --quiet -c "$T/sums") || fail "sha256 mismatch in $out"
  /usr/bin/python3 - "$out" "$2" "$3" <<'P' || fail "shards in $out are wrong"
import json, os, sys
out, ntrain, nval = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m = json.load(open(out + "/manifest.json"))
exp = json.load(open("expected.json"))
assert m["format"] == "dagrun-shards" and m["version"] == 1, m["format"]
names = sorted(f for f in os.listdir(out) if f.endswith(".jsonl"))
want = [f"train-{i:05d}.jsonl" for i in range(ntrain)] + \
       [f"val-{i:05d}.jsonl" for i in range(nval)]
assert names == sorted(want), names
assert [s["path"] for s in m["shards"]] == want, m["shards"]
texts = {"train": [], "val": []}
ids = {"train": set(), "val": set()}
longest = 0
for s in m["shards"]:
    raw = open(out + "/" + s["path"], "rb").read()
    assert len(raw) == s["bytes"] == os.path.getsize(out + "/" + s["path"])
    lines = raw.split(b"\n")
    assert lines[-1] == b"", "shard does not end with a newline"
    lines = lines[:-1]
    assert len(lines) == s["documents"], (s, len(lines))
    for ln in lines:
        longest = max(longest, len(ln) + 1)
        o = json.loads(ln)
        assert set(o) == {"id", "text"}, o.keys()
        assert len(o["id"]) == 32 and int(o["id"], 16) >= 0, o["id"]
        texts[s["split"]].append(o["text"])
        ids[s["split"]].add(o["id"])
d = m["documents"]
assert d["train"] == len(texts["train"]) and d["val"] == len(texts["val"]), d
assert d["kept"] == d["train"] + d["val"], d
assert d["read"] == d["kept"] + sum(v for k, v in m["dropped"].items()
                                    if k not in ("empty_file", "unreadable")), m
# Exactly the distinct input texts, byte for byte, each once.
got = texts["train"] + texts["val"]
assert len(got) == len(set(got)), "a text appears twice"
assert set(got) == set(exp["texts"]), "texts differ from the input"
assert m["dropped"]["duplicate"] == exp["planted"], m["dropped"]
# No leakage: no validation id or text in training.
assert not ids["train"] & ids["val"], "an id is in both splits"
assert not set(texts["train"]) & set(texts["val"]), "a text is in both splits"
assert len(ids["train"]) + len(ids["val"]) == d["kept"], "ids not unique"
# Balance: each training shard within 1% of the mean or within one
# document (the longest line) of it.
tb = [s["bytes"] for s in m["shards"] if s["split"] == "train"]
mean = sum(tb) / len(tb)
for b in tb:
    assert abs(b - mean) <= max(0.01 * mean, longest), (b, mean, longest)
assert 0 < m["peak_rss_bytes"] < 1 << 30, m["peak_rss_bytes"]
P
}

cat > main.yaml <<'Y'
dag: main
tasks:
  shard:
    stage: shard
    with: {input: [corpus], separator: "%", shards: 5, val_fraction: 0.05,
           val_shards: 2, threads: 2}
Y
run_dagrun run main.yaml --plain
expect_rc 0
R=$(run_dir main)
check_run "$R" 5 2
expect_in "$R/shard/outputs.json" '"train_shards"'
/usr/bin/python3 -c '
import json, sys
o = json.load(open(sys.argv[1] + "/shard/outputs.json"))
o = o.get("outputs", o)
assert o["train_shards"] == "5" and o["val_shards"] == "2", o
assert o["manifest"].endswith("/shard/out/manifest.json"), o
' "$R" || fail "outputs: $(cat "$R/shard/outputs.json")"
expect_in "$R/shard/attempt-1/log" "kept 900 of 905 documents"

# The same params on 1 and 4 threads: byte-identical shards.
for th in 1 4; do
  sed -e "s/threads: 2/threads: $th/" -e "s/^dag: main/dag: th$th/" main.yaml > th$th.yaml
  run_dagrun run th$th.yaml --plain
  expect_rc 0
  R2=$(run_dir th$th)
  check_run "$R2" 5 2
  for f in "$R/shard/out"/*.jsonl; do
    cmp -s "$f" "$R2/shard/out/$(basename "$f")" || fail "threads: $th: $(basename "$f") differs"
  done
done

# Another seed: the same documents in another order and split.
sed -e 's/threads: 2/threads: 2, seed: 99/' -e 's/^dag: main/dag: seed99/' main.yaml > seed.yaml
run_dagrun run seed.yaml --plain
expect_rc 0
R3=$(run_dir seed99)
check_run "$R3" 5 2
cmp -s "$R/shard/out/train-00000.jsonl" "$R3/shard/out/train-00000.jsonl" \
  && fail "seed 99 gave the same train-00000.jsonl as seed 1234"
cmp -s "$R/shard/out/val-00000.jsonl" "$R3/shard/out/val-00000.jsonl" \
  && fail "seed 99 gave the same val-00000.jsonl as seed 1234"

# gzip JSON Lines with another text field, and a plain .jsonl beside it.
/usr/bin/python3 - <<'P'
import gzip, json, os
exp = json.load(open("expected.json"))
os.makedirs("jl", exist_ok=True)
for k in range(3):
    part = exp["texts"][k::3]
    with gzip.open(f"jl/part{k}.jsonl.gz", "wt", encoding="utf-8") as f:
        for t in part:
            f.write(json.dumps({"id": 0, "content": t, "meta": {"k": k}},
                               ensure_ascii=(k == 0)) + "\n")
# The planted duplicates again, uncompressed.
with open("jl/zdups.jsonl", "w", encoding="utf-8") as f:
    for t in [exp["texts"][i] for i in (5, 10, 10, 77, 400)]:
        f.write(json.dumps({"content": t}) + "\n")
P
cat > gz.yaml <<'Y'
dag: gz
tasks:
  shard:
    stage: shard
    with: {input: ["jl/*.jsonl.gz", "jl/*.jsonl"], format: jsonl,
           text_field: content, shards: 5, val_fraction: 0.05, val_shards: 2}
Y
run_dagrun run gz.yaml --plain
expect_rc 0
R6=$(run_dir gz)
check_run "$R6" 5 2
/usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1] + "/shard/out/manifest.json"))
assert m["inputs"]["files"] == 4, m["inputs"]
assert m["inputs"]["text_bytes"] > 2 * m["inputs"]["bytes"], m["inputs"]
' "$R6" || fail "gzip inputs: $(head -c 2000 "$R6/shard/out/manifest.json")"

# The fortunes corpus, as dags/pretrain.yaml reads it.
[ -d /usr/share/games/fortunes ] || fail "fortunes is not installed"
cat > fortunes.yaml <<'Y'
dag: fortunes
tasks:
  shard:
    stage: shard
    with: {input: /usr/share/games/fortunes, exclude: ["*.dat", "*.u8"],
           separator: "%", shards: 8, val_fraction: 0.02}
Y
run_dagrun run fortunes.yaml --plain
expect_rc 0
R7=$(run_dir fortunes)
/usr/bin/python3 - "$R7/shard/out" <<'P' || fail "fortunes: $(head -c 3000 "$R7/shard/out/manifest.json")"
import json, os, sys
out = sys.argv[1]
m = json.load(open(out + "/manifest.json"))
d = m["documents"]
assert d["train"] > 10000 and d["val"] > 100, d
assert m["dropped"]["duplicate"] > 0, m["dropped"]
bad = {k: v for k, v in m["dropped"].items()
       if k in ("invalid_utf8", "unreadable", "empty_file", "too_large")}
assert not any(bad.values()), bad
# Only the text files were read: no .dat index, no .u8 link.
assert not any(p["file"].endswith((".dat", ".u8")) for p in m["problems"])
assert m["inputs"]["files"] == len([f for f in os.listdir("/usr/share/games/fortunes")
    if not f.endswith((".dat", ".u8")) and
    os.path.isfile("/usr/share/games/fortunes/" + f)]), m["inputs"]
tb = [s["bytes"] for s in m["shards"] if s["split"] == "train"]
longest = max(len(l) + 1 for s in m["shards"]
              for l in open(out + "/" + s["path"], "rb").read().split(b"\n"))
mean = sum(tb) / len(tb)
assert all(abs(b - mean) <= max(0.01 * mean, longest) for b in tb), (tb, longest)
P

# One long line costs what the same bytes in short lines cost: the JSON
# escape scanned to the end of the document for every 64 KiB of output,
# so 16 MB in one line took 3 s and 32 MB 12 s (against 0.2 s in short
# lines). The bound is generous (5x plus a second) so a slow or busy
# machine never fails it; the old code missed it by far.
"$PY" -c '
line = "ab cd " * (32 * 1024 * 1024 // 6)
open("long.txt", "w").write(line + "\n")
open("short.txt", "w").write("".join(line[i:i + 79] + "\n"
                                     for i in range(0, len(line), 80)))'
shard_ms() { # INPUT: MS, the milliseconds of a shard-only run of INPUT
  printf 'dag: ll-%s\ntasks:\n  shard: {stage: shard, with: {input: %s, shards: 1, val_fraction: 0, memory_limit: 4GiB}}\n' \
    "${1%.txt}" "$1" > "ll-$1.yaml"
  local t0=$(date +%s%N)
  run_dagrun run "ll-$1.yaml" --plain
  expect_rc 0
  MS=$((($(date +%s%N) - t0) / 1000000))
}
shard_ms short.txt
short_ms=$MS
shard_ms long.txt
long_ms=$MS
echo "shard: 32 MB in one line ${long_ms} ms, in 80-byte lines ${short_ms} ms"
[ "$long_ms" -lt $((5 * short_ms + 1000)) ] \
  || fail "one 32 MB line took ${long_ms} ms, the same bytes in lines ${short_ms} ms"
pass
