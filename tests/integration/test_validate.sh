#!/usr/bin/env bash
# The validate stage on a really trained model: its numbers are
# deterministic and consistent (perplexity = exp(loss), accuracy a
# fraction), a later checkpoint scores better than an earlier one, it
# writes samples, and its gates stop the pipeline: a model above
# max_val_loss fails validate with the numbers in the message and
# checkpoint and export become upstream_failed; min_improvement compares
# with the previous promoted model. Bad inputs get clear errors, and a
# diverged model (NaN weights, or a loss that is no number) fails it.
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data v 320)
MODEL='n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, batch_size: 8, threads: 1'
cat > train.yaml <<Y
dag: train
tasks:
  train: {stage: train, with: {data: "$DATA", $MODEL, steps: 150, lr: 0.01, eval_every: 0, checkpoint_every: 30, keep_checkpoints: 10, samples: 0}}
Y
run_dagrun run train.yaml --no-cache --plain
expect_rc 0
CKPTS="$(run_dir train)/train/checkpoints"

# validate_dag NAME EXTRA: a DAG with one validate task.
validate_dag() {
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  validate: {stage: validate, with: {data: "$DATA", threads: 1, $2}}
Y
}

metric() { # METRICS_JSON KEY
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# The latest checkpoint of the directory, twice: the same numbers, over
# every window of the val split.
validate_dag latest "checkpoint: \"$CKPTS\", samples: 2, sample_tokens: 12, prompt: \"the cat\""
for i in 1 2; do
  run_dagrun run latest.yaml --no-cache --plain
  expect_rc 0
done
R1=$(ls -d "$DAGRUN_RUNS_DIR"/latest/*/ | head -n 1)
R2=$(ls -d "$DAGRUN_RUNS_DIR"/latest/*/ | tail -n 1)
[ "$R1" != "$R2" ] || fail "expected two runs"
/usr/bin/python3 - "$R1/validate/out/metrics.json" "$R2/validate/out/metrics.json" "$DATA" <<'P' || fail "metrics: $(cat "$R1/validate/out/metrics.json")"
import glob, json, math, struct, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("val_loss", "perplexity", "accuracy", "tokens", "batches", "windows"):
    assert a[k] == b[k], (k, a[k], b[k])
assert a["checkpoint"].endswith("/step-00000150"), a["checkpoint"]
assert a["step"] == 150 and a["passed"] is True and a["failures"] == []
assert abs(a["perplexity"] - math.exp(a["val_loss"])) < 1e-6 * a["perplexity"]
assert 0 < a["accuracy"] < 1, a
# 150 steps on this small grammar: well below ln(320) = 5.77
assert a["val_loss"] < 4.0, a
# Every window of the val split is scored, the last batch's too: windows
# of 33 tokens (T+1) in each file (they never cross files), counted here
# from the files' headers (token count at byte 24).
want = 0
for path in glob.glob(sys.argv[3] + "/val-*.tok"):
    with open(path, "rb") as f:
        (n,) = struct.unpack_from("<Q", f.read(32), 24)
    want += (n - 1) // 32
assert want % 8, f"{want} windows: a multiple of the batch, no partial batch to check"
assert a["windows"] == want, (a["windows"], want)
assert a["tokens"] == want * 32, a
assert a["batches"] == -(-want // 8), a
print(f"validate scored {want} windows in {a['batches']} batches")
P
expect_in "$R1/validate/attempt-1/log" "windows of 32 in"
expect_in "$R1/validate/out/samples.txt" "=== sample 2"
expect_in "$R1/validate/out/samples.txt" "the cat"
cmp "$R1/validate/out/samples.txt" "$R2/validate/out/samples.txt" || fail "samples differ between two runs with the same seed"
grep -q '"name":"accuracy"' "$R1/validate/metrics.jsonl" || fail "no accuracy metric"
LATEST_LOSS=$(metric "$R1/validate/out/metrics.json" val_loss)

# A named step: the earlier checkpoint scores worse.
validate_dag early "checkpoint: \"$CKPTS\", step: 30, samples: 0"
run_dagrun run early.yaml --no-cache --plain
expect_rc 0
EARLY_LOSS=$(metric "$(run_dir early)/validate/out/metrics.json" val_loss)
/usr/bin/python3 -c "import sys; sys.exit(not ($EARLY_LOSS > $LATEST_LOSS + 0.2))" ||
  fail "step 30 loss $EARLY_LOSS should be well above step 150 loss $LATEST_LOSS"

# The gate: a model above max_val_loss fails validate, and the tasks after
# it do not run.
cat > gated.yaml <<Y
dag: gated
tasks:
  validate: {stage: validate, with: {checkpoint: "$CKPTS", data: "$DATA", threads: 1, samples: 0, max_val_loss: 0.5, max_perplexity: 2}}
  checkpoint: {stage: checkpoint, needs: [validate], with: {checkpoint: "\${tasks.validate.outputs.checkpoint}", metrics: "\${tasks.validate.outputs.metrics}"}}
  export: {stage: export, needs: [checkpoint], with: {model: "\${tasks.checkpoint.outputs.model}"}}
Y
run_dagrun run gated.yaml --no-cache --plain
expect_rc 1
RG=$(run_dir gated)
[ "$(task_field "$RG" validate state)" = failed ] || fail "validate: $(task_field "$RG" validate state)"
[ "$(task_field "$RG" checkpoint state)" = upstream_failed ] || fail "checkpoint: $(task_field "$RG" checkpoint state)"
[ "$(task_field "$RG" export state)" = upstream_failed ] || fail "export: $(task_field "$RG" export state)"
expect_in "$RG/validate/attempt-1/log" "is above max_val_loss 0.5"
expect_in "$RG/validate/attempt-1/log" "is above max_perplexity 2"
grep -q "quality gates failed: val_loss [0-9.]* is above max_val_loss 0.5" "$T/out" "$T/err" ||
  fail "the run's output does not show the failed gate with its numbers: $(cat "$T/out" "$T/err")"
[ "$(metric "$RG/validate/out/metrics.json" passed)" = False ] || fail "metrics.json should say passed: false"
[ ! -d "$T/models" ] || fail "a failed gate promoted something: $(ls -R "$T/models")"

# min_improvement: promote the latest model, then an earlier (worse) one
# is refused, naming the previous model; the latest itself passes with
# min_improvement 0 (no worse than itself).
cat > promote.yaml <<Y
dag: promote
tasks:
  validate: {stage: validate, with: {checkpoint: "\${env:CKPT}", data: "$DATA", threads: 1, samples: 0, min_improvement: 0, models: "$T/models/promote"}}
  checkpoint: {stage: checkpoint, needs: [validate], with: {checkpoint: "\${tasks.validate.outputs.checkpoint}", metrics: "\${tasks.validate.outputs.metrics}", dir: "$T/models/promote"}}
Y
CKPT="$CKPTS/step-00000150" run_dagrun run promote.yaml --no-cache --plain
expect_rc 0
expect_in "$(ls -d "$DAGRUN_RUNS_DIR"/promote/*/ | tail -n 1)/validate/attempt-1/log" "no validated model in"
CKPT="$CKPTS/step-00000030" run_dagrun run promote.yaml --no-cache --plain
expect_rc 1
RW=$(ls -dt "$DAGRUN_RUNS_DIR"/promote/*/ | head -n 1)
expect_in "$RW/validate/attempt-1/log" "less than min_improvement 0"
expect_in "$RW/validate/attempt-1/log" "$T/models/promote/"
[ "$(task_field "${RW%/}" checkpoint state)" = upstream_failed ] || fail "worse model reached checkpoint"
# The same model again improves by exactly 0: min_improvement 0 passes.
CKPT="$CKPTS/step-00000150" run_dagrun run promote.yaml --no-cache --plain
expect_rc 0

# Bad inputs.
validate_dag nostep "checkpoint: \"$CKPTS\", step: 7"
run_dagrun run nostep.yaml --no-cache --plain
expect_rc 1
expect_in "$(run_dir nostep)/validate/attempt-1/log" "step-00000007"

OTHER=$(make_token_data w 300)
validate_dag vocab "checkpoint: \"$CKPTS\", data: \"$OTHER\""
sed -i "s|data: \"$DATA\", ||" vocab.yaml
run_dagrun run vocab.yaml --no-cache --plain
expect_rc 1
expect_in "$(run_dir vocab)/validate/attempt-1/log" "vocabulary of 320 tokens"
expect_in "$(run_dir vocab)/validate/attempt-1/log" "tokenized into 300"
# Another tokenizer of the same 320 ids: refused too, both files named.
OTHERTOK=$(other_token_data v 320)
validate_dag othertok "checkpoint: \"$CKPTS\", data: \"$OTHERTOK\""
sed -i "s|data: \"$DATA\", ||" othertok.yaml
run_dagrun run othertok.yaml --no-cache --plain
expect_rc 1
expect_in "$(run_dir othertok)/validate/attempt-1/log" "the data's tokenizer $OTHERTOK/tokenizer.json is not the model $CKPTS/step-00000150's ($DATA/tokenizer.json): they do not belong together"
# The model's tokenizer in other bytes is the same tokenizer: data whose
# tokenizer.json was written again (another layout and key order, as an
# older dagrun's tokenize wrote a given tokenizer.json in its own), its
# manifest recording that copy's sha256, is taken.
cp -r "$DATA" relaid
/usr/bin/python3 - relaid <<'P'
import hashlib, json, sys
d = sys.argv[1]
tok = json.load(open(d + "/tokenizer.json"))
json.dump(tok, open(d + "/tokenizer.json", "w"), indent=2, sort_keys=True)
m = json.load(open(d + "/manifest.json"))
old = m["tokenizer"]["sha256"]
m["tokenizer"]["sha256"] = hashlib.sha256(open(d + "/tokenizer.json", "rb").read()).hexdigest()
assert m["tokenizer"]["sha256"] != old
json.dump(m, open(d + "/manifest.json", "w"))
P
validate_dag relaid "checkpoint: \"$CKPTS\", data: \"$T/relaid\""
sed -i "s|data: \"$DATA\", ||" relaid.yaml
run_dagrun run relaid.yaml --no-cache --plain
expect_rc 0

validate_dag long "checkpoint: \"$CKPTS\", seq_len: 64"
run_dagrun run long.yaml --no-cache --plain
expect_rc 1
expect_in "$(run_dir long)/validate/attempt-1/log" "longer than the model's context 32"

validate_dag notdata "checkpoint: \"$CKPTS\""
sed -i "s|data: \"$DATA\"|data: \"$T\"|" notdata.yaml
run_dagrun run notdata.yaml --no-cache --plain
expect_rc 1
expect_in "$(run_dir notdata)/validate/attempt-1/log" "tokenize stage's output directory"

validate_dag badgate "checkpoint: \"$CKPTS\", max_val_loss: -1"
run_dagrun run badgate.yaml --no-cache --plain
expect_rc 1
expect_in "$(run_dir badgate)/validate/attempt-1/log" "max_val_loss must be above 0"

# A diverged model fails validate with no gate set: NaN weights (every
# checksum good) are refused naming the tensor; finite weights whose loss
# is no number (a LayerNorm weight of 3e38 overflows the logits) fail on
# the loss, with metrics.json keeping it.
set_weights "$CKPTS/step-00000150" nan-step nan
set_weights "$CKPTS/step-00000150" big-step 3e38 ln_f.weight
validate_dag nanw "checkpoint: \"$T/nan-step\""
run_dagrun run nanw.yaml --no-cache --plain
expect_rc 1
expect_in "$(run_dir nanw)/validate/attempt-1/log" 'tensor "wte.weight" holds nan at element 0: the weights are not finite numbers'
validate_dag nanloss "checkpoint: \"$T/big-step\""
run_dagrun run nanloss.yaml --no-cache --plain
expect_rc 1
expect_in "$(run_dir nanloss)/validate/attempt-1/log" "val_loss is nan, not a finite number"
[ "$(metric "$(run_dir nanloss)/validate/out/metrics.json" passed)" = False ] || fail "a NaN loss passed"

# A corrupt newest checkpoint: the one before it is validated, with a
# warning that names the skipped one and why.
{ read -r BAD; read -r PREV; } < <(corrupt_newest "$CKPTS" "$T/cdir")
validate_dag skip "checkpoint: \"$T/cdir\""
run_dagrun run skip.yaml --no-cache --plain
expect_rc 0
expect_in "$(run_dir skip)/validate/attempt-1/log" "WARN"
expect_in "$(run_dir skip)/validate/attempt-1/log" "skipped the newest checkpoint $BAD, which does not verify (model.safetensors: sha256 mismatch"
expect_in "$(run_dir skip)/validate/attempt-1/log" "using $PREV instead"
pass
