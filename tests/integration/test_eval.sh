# `dagrun eval` and the eval stage on a model trained briefly on the
# fortunes package's platitudes and on an untrained one of the same
# shape: on the shipped multiple-choice file (tests/data/mc-platitudes.
# jsonl, made from that text by tests/data/make_mc.py, which makes it
# again byte for byte), the trained model's 95% interval lies above
# chance and the untrained one's holds chance; the trained model's
# perplexity on held-out text (the val split and another fortunes file)
# is below the untrained one's, which is near the vocabulary size. The
# stage writes eval.json, the per-item results and its metrics, and
# agrees with the command; bad inputs are refused by name, and a
# diverged model (NaN weights, a loss that is no number) fails it.
. "$(dirname "$0")/lib.sh"

SRC=/usr/share/games/fortunes/platitudes
HELD=/usr/share/games/fortunes/love
MC="$DAGRUN_SOURCE_DIR/tests/data/mc-platitudes.jsonl"
[ -f "$SRC" ] && [ -f "$HELD" ] || fail "$SRC: Debian's fortunes package is needed (scripts/setup.sh installs it)"
"$PY" "$DAGRUN_SOURCE_DIR/tests/data/make_mc.py" "$SRC" | cmp - "$MC" ||
  fail "tests/data/make_mc.py no longer makes $MC"

mkdir -p corpus && cp "$SRC" corpus/
SHAPE='n_layer: 2, n_head: 2, n_embd: 64, block_size: 32, batch_size: 16, samples: 0, threads: 1'
cat > mc.yaml <<Y
dag: mc
tasks:
  shard: {stage: shard, with: {input: "$T/corpus", separator: "%", shards: 1, val_fraction: 0.05}}
  tokenize: {stage: tokenize, needs: [shard], with: {shards: "\${tasks.shard.outputs.dir}", vocab_size: 512}}
  train: {stage: train, needs: [tokenize], with: {data: "\${tasks.tokenize.outputs.dir}", $SHAPE, steps: 600, lr: 0.003, warmup: 20, spike_policy: none, eval_every: 300, eval_choices: "$MC"}}
  # An untrained model: one step at a learning rate that moves nothing.
  init: {stage: train, needs: [tokenize], with: {data: "\${tasks.tokenize.outputs.dir}", $SHAPE, steps: 1, lr: 1e-9, eval_every: 0}}
  eval:
    stage: eval
    needs: [train]
    with: {model: "\${tasks.train.outputs.checkpoint}", data: "\${tasks.tokenize.outputs.dir}", choices: "$MC", threads: 1}
Y
run_dagrun run mc.yaml --plain
expect_rc 0
R=$(run_dir mc)
DATA="$R/tokenize/out"

# ev NAME ARGS...: dagrun eval into NAME.out / NAME.err, RC set.
ev() { run_to "$1" "$DAGRUN" eval "${@:2}"; }
for m in train init; do
  ev "$m" "$R/$m/checkpoints" --choices "$MC" --data "$DATA" --threads 1 --json --out "out-$m"
  [ "$RC" -eq 0 ] || fail "dagrun eval $m exited $RC: $(cat "$m.err")"
  ev "$m-text" "$R/$m/checkpoints" --text "$HELD" --threads 1 --json
  [ "$RC" -eq 0 ] || fail "dagrun eval --text $m exited $RC: $(cat "$m-text.err")"
done
# The human form: one line per measurement.
ev human "$R/train/checkpoints" --choices "$MC" --text "$HELD" --max-tokens 200
[ "$RC" -eq 0 ] || fail "dagrun eval (text) exited $RC: $(cat human.err)"
expect_in human.out "perplexity "
expect_in human.out "over 200 tokens of $HELD"
expect_in human.out "multiple choice: accuracy "
expect_in human.out "95% interval ["

"$PY" - train.out init.out train-text.out init-text.out out-train/choices.jsonl "$R/eval/out/eval.json" <<'P' || fail "the numbers: $(cat train.out init.out)"
import json, math, sys
tr, rd, trt, rdt = (json.load(open(p)) for p in sys.argv[1:5])
for name, s in ("trained", tr), ("untrained", rd):
    c, p = s["choices"], s["perplexity"]
    print(f"{name}: accuracy {c['accuracy']:.3f} ({c['correct']} of {c['items']}), "
          f"95% [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}], chance {c['chance']}; "
          f"val perplexity {p['perplexity']:.1f} over {p['tokens']} tokens")
vocab = 512
def wilson(k, n, z=1.959963984540054):
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0, mid - half), min(1, mid + half)
for s in tr, rd:
    c = s["choices"]
    assert c["accuracy"] == c["correct"] / c["items"], c
    assert all(abs(a - b) < 1e-9 for a, b in zip(c["ci95"], wilson(c["correct"], c["items"]))), c
c = tr["choices"]
assert c["items"] == 200 and c["chance"] == 0.25, c
assert c["ci95"][0] > c["chance"], ("trained model not above chance", c)
c = rd["choices"]
assert c["ci95"][0] <= c["chance"] <= c["ci95"][1], ("untrained model not at chance", c)
for t, r in (tr["perplexity"], rd["perplexity"]), (trt["perplexity"], rdt["perplexity"]):
    assert t["perplexity"] < r["perplexity"] / 4, (t, r)
    assert vocab / 2 < r["perplexity"] < vocab * 2, r
    assert t["tokens"] == r["tokens"] > 100, (t, r)
    assert abs(math.log(t["perplexity"]) - t["loss"]) < 1e-9, t
print("held-out text perplexity: trained %.1f, untrained %.1f over %d tokens" % (
    trt["perplexity"]["perplexity"], rdt["perplexity"]["perplexity"], trt["perplexity"]["tokens"]))
# Per item: its losses, the lowest one's index as the prediction, and
# the correct ones adding up to the accuracy.
items = [json.loads(l) for l in open(sys.argv[5])]
assert [i["index"] for i in items] == list(range(200)), "indexes"
right = 0
for i in items:
    ls = i["losses"]
    assert len(ls) == 4 and all(math.isfinite(x) and x > 0 for x in ls), i
    assert i["predicted"] == ls.index(min(ls)), i
    assert i["correct"] == (i["predicted"] == i["label"]), i
    right += i["correct"]
assert right == tr["choices"]["correct"], (right, tr["choices"])
# The stage measured the same model on the same inputs: the same numbers.
st = json.load(open(sys.argv[6]))
assert st["choices"]["accuracy"] == tr["choices"]["accuracy"], (st, tr)
assert abs(st["perplexity"]["loss"] - tr["perplexity"]["loss"]) < 1e-9, (st, tr)
P
# The labels in the per-item results are the file's.
"$PY" - "$MC" out-train/choices.jsonl <<'P' || fail "per-item labels differ from $MC"
import json, sys
want = [json.loads(l)["label"] for l in open(sys.argv[1])]
got = [json.loads(l)["label"] for l in open(sys.argv[2])]
assert want == got
P
[ -s out-train/eval.json ] || fail "--out wrote no eval.json"

# The train stage measured the same task with its validations (steps
# 300 and 600): at the end, what the eval stage found on its checkpoint.
"$PY" - "$R/train/metrics.jsonl" "$R/eval/out/eval.json" <<'P' || fail "train's mc_accuracy: $(grep mc_accuracy "$R/train/metrics.jsonl")"
import json, sys
acc = {m["step"]: m["value"] for m in map(json.loads, open(sys.argv[1]))
       if m["name"] == "mc_accuracy"}
st = json.load(open(sys.argv[2]))
assert sorted(acc) == [300, 600], acc
assert acc[600] == st["choices"]["accuracy"], (acc, st["choices"])
print("train's mc_accuracy by step:", acc)
P
# A file that is not there fails the train task before it trains.
cat > badtrain.yaml <<Y
dag: badtrain
tasks:
  train: {stage: train, with: {data: "$DATA", $SHAPE, steps: 5, eval_choices: /nonexistent/mc.jsonl}}
Y
run_dagrun run badtrain.yaml --plain
[ "$RC" -ne 0 ] || fail "train with a missing eval_choices succeeded"
expect_in "$T/out" "eval_choices: /nonexistent/mc.jsonl"

# The stage: outputs, files, metrics (the report's and TensorBoard's).
for o in accuracy accuracy_low accuracy_high chance items results perplexity loss tokens metrics model; do
  grep -q "\"$o\"" "$R/run.json" || fail "eval output $o missing from run.json"
done
[ -s "$R/eval/out/choices.jsonl" ] || fail "no out/choices.jsonl"
for m in mc_accuracy mc_accuracy_low mc_accuracy_high eval_loss eval_perplexity; do
  grep -q "\"name\":\"$m\"\|\"name\": \"$m\"" "$R/eval/metrics.jsonl" || fail "metric $m missing: $(cat "$R/eval/metrics.jsonl")"
done
expect_in "$R/eval/attempt-1/log" "multiple choice: accuracy"

# Bad inputs: exit 2 for usage, 1 for what cannot be used, named.
CK="$R/train/checkpoints"
bad_ev() { # RC TEXT ARGS...
  local want=$1 text=$2
  shift 2
  ev bad "$@"
  [ "$RC" -eq "$want" ] || fail "dagrun eval $*: exit $RC, expected $want: $(cat bad.err)"
  expect_in bad.err "$text"
}
bad_ev 2 "nothing to evaluate" "$CK"
bad_ev 2 "one perplexity at a time" "$CK" --text "$HELD" --data "$DATA"
bad_ev 2 "unknown option" "$CK" --bogus
bad_ev 2 "--split is val or train" "$CK" --data "$DATA" --split test
bad_ev 2 "--batch-size needs an integer" "$CK" --text "$HELD" --batch-size 0
bad_ev 2 "needs a MODEL" --text "$HELD"
bad_ev 1 "/nonexistent/model" /nonexistent/model --text "$HELD"
bad_ev 1 "/nonexistent/text" "$CK" --text /nonexistent/text
: > empty.txt
bad_ev 1 "empty.txt: 0 tokens" "$CK" --text empty.txt
printf '%s\n' '{"ctx": "a b", "endings": ["c", "d"], "label": 1}' '' '{"ctx": "a", "endings": ["c", "d"], "label": 2}' > l3.jsonl
bad_ev 1 "l3.jsonl:3: needs \"label\"" "$CK" --choices l3.jsonl
printf '%s\n' '{"context": "a", "endings": ["c"], "label": 0}' > e1.jsonl
bad_ev 1 "e1.jsonl:1: needs \"endings\", an array of 2 or more strings" "$CK" --choices e1.jsonl
printf '%s\n' '{"endings": ["c", "d"], "label": "1"}' > nc.jsonl
bad_ev 1 "nc.jsonl:1: needs \"ctx\"" "$CK" --choices nc.jsonl
# Another tokenizer of the same 512 ids (trained on other text): its data
# and the tokenizer itself are refused, both files named.
OTHER=$(other_token_data e 512)
bad_ev 1 "the data's tokenizer $OTHER/tokenizer.json is not the model $CK/step-00000600's ($DATA/tokenizer.json)" "$CK" --data "$OTHER"
bad_ev 1 "the tokenizer $OTHER/tokenizer.json is not the model $CK/step-00000600's ($DATA/tokenizer.json)" "$CK" --text "$HELD" --tokenizer "$OTHER/tokenizer.json"
printf '%s\n' 'not json' > nj.jsonl
bad_ev 1 "nj.jsonl:1: not a JSON object" "$CK" --choices nj.jsonl
# A diverged model: NaN weights (checksums good) refused naming the
# tensor; finite weights whose loss is no number (a LayerNorm weight of
# 3e38 overflows the logits) fail on the loss, not print "perplexity nan".
LAST=$(ls -d "$CK"/step-* | tail -n 1)
set_weights "$LAST" nan-step nan
set_weights "$LAST" big-step 3e38 ln_f.weight
bad_ev 1 'tensor "wte.weight" holds nan at element 0' nan-step --data "$DATA"
bad_ev 1 "the loss is nan over" big-step --data "$DATA"
# A corrupt newest checkpoint: the one before it is measured, with a
# warning that names the skipped one and why.
{ read -r BAD; read -r PREV; } < <(corrupt_newest "$CK" "$T/cdir")
ev skip "$T/cdir" --data "$DATA" --max-tokens 64
[ "$RC" -eq 0 ] || fail "eval with a corrupt newest checkpoint: exit $RC: $(cat skip.err)"
expect_in skip.err "warning: skipped the newest checkpoint $BAD, which does not verify (model.safetensors: sha256 mismatch"
expect_in skip.err "using $PREV instead"
expect_not_in bad.out "perplexity"
cat > nanloss.yaml <<Y
dag: nanloss
tasks:
  eval: {stage: eval, with: {model: "$T/big-step", text: "$HELD"}}
Y
run_dagrun run nanloss.yaml --plain
expect_rc 1
expect_in "$(run_dir nanloss)/eval/attempt-1/log" "the loss is nan over"
# Hugging Face's field forms are accepted: "context", a label string.
printf '%s\n' '{"context": "The cat", "endings": ["sat", "dog"], "label": "0"}' > hf.jsonl
ev hf "$CK" --choices hf.jsonl
[ "$RC" -eq 0 ] || fail "context / string label refused: $(cat hf.err)"
expect_in hf.out "(1 of 1)"
ev help --help
[ "$RC" -eq 0 ] || fail "--help: exit $RC"
expect_in help.out "--choices"

# The stage refuses a task with nothing to evaluate.
cat > none.yaml <<Y
dag: none
tasks:
  eval: {stage: eval, with: {model: "$CK"}}
Y
run_dagrun run none.yaml --plain
[ "$RC" -ne 0 ] || fail "an eval task with nothing to evaluate succeeded"
expect_in "$T/out" "nothing to evaluate"
pass
