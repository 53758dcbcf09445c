# Per-source validation of a data mixture: two sources of very different
# text, rep, sentences repeated (learnable), and scores, random letters
# (about ln 26 nats a letter at best), mixed 0.7/0.3. Each source's validation
# loss is its own metric (val_loss/<name>: metrics.jsonl, tfevents, the
# log, summary.json, dagrun compare), scored on its own validation
# windows (the validate stage on that source's split agrees), the
# repeated one far below the random one; val_loss is their mean weighted
# 0.7/0.3; a run killed (kill -9 of dagrun) and resumed reports the very
# values of a run that never stopped.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"

mkdir -p "$T/corpus-rep" "$T/corpus-rand" "$T/corpus-same"
"$PY" - "$T" <<'P'
import random, sys
t = sys.argv[1]
rng = random.Random(7)
lines = ["the cat sat on the mat.", "the dog sat on the log.", "a bird sat on a wire."]
for f in range(2):
    with open(f"{t}/corpus-rep/rep{f}.txt", "w") as out:
        out.write("\n%\n".join(" ".join(rng.choice(lines) for _ in range(8))
                                for _ in range(150)) + "\n")
    # same: one document again and again; shard keeps one copy, so it
    # has no validation files.
    with open(f"{t}/corpus-same/same{f}.txt", "w") as out:
        out.write("\n%\n".join([" ".join(lines * 3)] * 40) + "\n")
    with open(f"{t}/corpus-rand/rand{f}.txt", "w") as out:
        docs = [" ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                                 for _ in range(rng.randint(3, 8)))
                         for _ in range(60)) for _ in range(60)]
        out.write("\n%\n".join(docs) + "\n")
P
REP=$(tokenize_corpus rep "$T/corpus-rep" "vocab_size: 300")
RAND=$(tokenize_corpus rand "$T/corpus-rand" "tokenizer: \"$REP/tokenizer.json\"")
SAME=$(tokenize_corpus same "$T/corpus-same" "tokenizer: \"$REP/tokenizer.json\"")

BASE='n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, batch_size: 4, threads: 1, samples: 0, lr: 0.01'
MIX="data_mix: {rep: \"$REP\", scores: \"$RAND\"}, data_weights: {rep: 0.7, scores: 0.3}"
RUN="steps: 60, eval_every: 20, eval_batches: 3, checkpoint_every: 20"
mix_dag() { # NAME [TASK_KEYS]
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train: {stage: train, ${2:-} with: {$BASE, $MIX, $RUN}}
Y
}

mix_dag whole
run_dagrun run whole.yaml --plain
expect_rc 0
R=$(run_dir whole)
expect_in "$R/train/attempt-1/log" "step 60: val loss by source: rep "
"$PY" - "$R/train" <<'P' || fail "per-source validation: $(cat "$R/train/out/summary.json")"
import glob, json, sys
d = sys.argv[1]
val = {}
for line in open(d + "/metrics.jsonl"):
    m = json.loads(line)
    if m["name"].startswith("val_loss"):
        val.setdefault(m["name"], {})[m["step"]] = m["value"]
assert sorted(val) == ["val_loss", "val_loss/rep", "val_loss/scores"], sorted(val)
for name, s in val.items():
    assert sorted(s) == [20, 40, 60], (name, s)
rep, rnd, all_ = val["val_loss/rep"], val["val_loss/scores"], val["val_loss"]
for k in (20, 40, 60):
    assert abs(all_[k] - (0.7 * rep[k] + 0.3 * rnd[k])) < 1e-12, (k, all_[k], rep[k], rnd[k])
# The repeated sentence is learnt; random letters cannot be.
assert rep[60] < rep[20] and rep[60] < 2.0, rep
assert rnd[60] > 2.5 and rnd[60] - rep[60] > 1.5, (rnd, rep)
s = json.load(open(d + "/out/summary.json"))
assert s["val_loss"] == all_[60], s
assert s["data_mix"]["rep"]["val_loss"] == rep[60], s["data_mix"]
assert s["data_mix"]["scores"]["val_loss"] == rnd[60], s["data_mix"]
ev = b"".join(open(f, "rb").read() for f in glob.glob(d + "/events.out.tfevents.*"))
assert b"val_loss/rep" in ev and b"val_loss/scores" in ev, "no per-source val_loss in tfevents"
print(rep[60], rnd[60])
P

# ---- Each source's own windows: the validate stage on the last
# checkpoint and one source's split, with the train stage's batches
# (4 x 32, eval_batches 3), scores what val_loss/<source> said.
for src in rep scores; do
  dir=$REP
  [ "$src" = scores ] && dir=$RAND
  cat > "val-$src.yaml" <<Y
dag: val-$src
tasks:
  validate: {stage: validate, with: {checkpoint: "$R/train/checkpoints/step-00000060", data: "$dir", batch_size: 4, max_batches: 3, samples: 0, threads: 1}}
Y
  run_dagrun run "val-$src.yaml" --plain
  expect_rc 0
  "$PY" - "$(run_dir "val-$src")/validate/out/metrics.json" "$R/train/out/summary.json" "$src" <<'P' ||
import json, sys
v = json.load(open(sys.argv[1]))
want = json.load(open(sys.argv[2]))["data_mix"][sys.argv[3]]["val_loss"]
got = v["val_loss"]
assert abs(got - want) < 1e-5, (got, want, v)
P
    fail "validate on $src's split disagrees with val_loss/$src"
done

# ---- A source without validation files is left out of val_loss, with a
# warning naming it.
cat > noval.yaml <<Y
dag: noval
tasks:
  train: {stage: train, with: {$BASE, data_mix: {scores: "$RAND", same: "$SAME"}, steps: 4, eval_every: 2}}
Y
run_dagrun run noval.yaml --plain
expect_rc 0
N=$(run_dir noval)
expect_in "$N/train/attempt-1/log" "data_mix: same has no validation files: val_loss leaves it out"
"$PY" - "$N/train/metrics.jsonl" <<'P' || fail "noval: $(grep val_loss "$N/train/metrics.jsonl")"
import json, sys
val = {}
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m["name"].startswith("val_loss"):
        val.setdefault(m["name"], {})[m["step"]] = m["value"]
assert sorted(val) == ["val_loss", "val_loss/scores"], sorted(val)
assert val["val_loss"] == val["val_loss/scores"] and sorted(val["val_loss"]) == [2, 4], val
P

# ---- dagrun compare lists the per-source metrics.
mix_dag again "cache: false,"
run_dagrun run again.yaml --plain
expect_rc 0
A=$(basename "$(run_dir again)")
run_dagrun compare "$(basename "$R")" "$A"
expect_rc 0
expect_in "$T/out" "train.val_loss/rep"
expect_in "$T/out" "train.val_loss/scores"
# The random source is named scores: its row is still a loss, where lower
# is better (a metric is judged by its name up to the slash).
run_dagrun compare "$(basename "$R")" "$A" --json
expect_rc 0
"$PY" - "$T/out" <<'P' || fail "compare --json: $(cat "$T/out")"
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1]))["metrics"] if r.get("task") == "train"}
for name in ("val_loss", "val_loss/rep", "val_loss/scores"):
    assert rows[name]["better"] == "lower", rows[name]
    assert rows[name]["values"][0]["final"] == rows[name]["values"][1]["final"], rows[name]
P

# ---- Killed and resumed: dagrun killed (-9) once the step-20 checkpoint
# is written, then resumed; every validation after the resume (and the
# summary) is the uninterrupted run's, to the bit.
mix_dag killed "cache: false,"
kill_at_checkpoint killed 20 40
K=$KILLED
run_dagrun resume "$(basename "$K")" --plain
expect_rc 0
expect_in "$K/train/attempt-2/log" "resumed from"
"$PY" - "$R/train" "$K/train" <<'P' || fail "the resumed run's validation differs: $(cat "$K/train/metrics.jsonl" | grep val_loss)"
import json, sys
def val(d, attempt=None):
    out = {}
    for line in open(d + "/metrics.jsonl"):
        m = json.loads(line)
        if m["name"].startswith("val_loss") and (attempt is None or m["attempt"] == attempt):
            out[(m["name"], m["step"])] = m["value"]
    return out
a, b = val(sys.argv[1]), val(sys.argv[2], attempt=2)
assert b and all(a[k] == v for k, v in b.items()), (a, b)
assert {k[1] for k in b} >= {40, 60}, b
sa, sb = (json.load(open(d + "/out/summary.json")) for d in sys.argv[1:3])
assert sa["val_loss"] == sb["val_loss"] and sa["data_mix"] == sb["data_mix"], (sa, sb)
P
pass
