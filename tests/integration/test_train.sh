# The train stage on real token files: the loss falls below the unigram
# entropy, a run resumed from its middle checkpoint ends with the very
# same weights as one that never stopped (with dropout too), dropout
# changes the losses and is reproducible, overfit_one_batch drives the loss
# to near zero (and fails loudly when it cannot), a corrupt checkpoint is
# refused naming the file, and bad params are refused.
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data t 320)
MODEL='n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, batch_size: 4, threads: 1'

train_dag() { # NAME EXTRA_PARAMS
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train: {stage: train, with: {data: "$DATA", $MODEL, $2}}
Y
}

# Learns: 200 steps end well below the unigram entropy.
train_dag learn "steps: 200, lr: 0.003, eval_every: 50, checkpoint_every: 100, samples: 2, sample_tokens: 16"
run_dagrun run learn.yaml --plain
expect_rc 0
R=$(run_dir learn)
/usr/bin/python3 - "$R/train/out/summary.json" <<'P' || fail "did not learn: $(cat "$R/train/out/summary.json")"
import json, math, sys
s = json.load(open(sys.argv[1]))
assert s["steps"] == 200, s
assert abs(s["init_loss"] - s["ln_vocab"]) < 0.3, s
assert s["val_loss"] < s["unigram_entropy"] - 0.5, s
P
[ -s "$R/train/out/samples.txt" ] || fail "no samples.txt"
expect_in "$R/train/out/samples.txt" "=== sample 2"
expect_in "$R/train/attempt-1/log" "loss at initialization"
ls "$R/train/checkpoints/step-00000100" "$R/train/checkpoints/step-00000200" >/dev/null || fail "checkpoints: $(ls "$R/train/checkpoints")"
grep -q '"name":"val_loss"' "$R/train/metrics.jsonl" || fail "no val_loss metric"

# Exact resume: 200 steps in one go, and 100 + resume from the step-100
# checkpoint + 100, give bitwise identical weights.
train_dag resume "steps: 200, lr: 0.003, eval_every: 50, checkpoint_every: 100, samples: 0, resume: \"$R/train/checkpoints/step-00000100\""
run_dagrun run resume.yaml --plain
expect_rc 0
R2=$(run_dir resume)
expect_in "$R2/train/attempt-1/log" "resumed from"
cmp "$R/train/checkpoints/step-00000200/model.safetensors" "$R2/train/checkpoints/step-00000200/model.safetensors" ||
  fail "resumed run's weights differ from the uninterrupted run's"
cmp "$R/train/checkpoints/step-00000200/optim.bin" "$R2/train/checkpoints/step-00000200/optim.bin" ||
  fail "resumed run's optimizer state differs"
# The loss at initialization comes with the checkpoint: the resumed run's
# summary has the first run's. A checkpoint from before it was kept (no
# init_loss in its manifest) still resumes, with none in the summary.
cp -r "$R/train/checkpoints/step-00000100" old-ckpt
"$PY" - old-ckpt/manifest.json <<'P'
import json, sys
m = json.load(open(sys.argv[1]))
assert "init_loss" in m["state"], m["state"]
del m["state"]["init_loss"]
# Nor its tokenizer's identity: still accepted, as before the record.
assert len(m["state"]["config"].pop("tokenizer_sha256")) == 64, m["state"]
json.dump(m, open(sys.argv[1], "w"))
P
train_dag oldckpt "steps: 110, samples: 0, eval_every: 0, checkpoint_every: 0, resume: \"$T/old-ckpt\""
run_dagrun run oldckpt.yaml --plain
expect_rc 0
"$PY" - "$R/train/out/summary.json" "$R2/train/out/summary.json" "$(run_dir oldckpt)/train/out/summary.json" <<'P' || fail "init_loss after a resume: $(cat "$R2/train/out/summary.json")"
import json, sys
first, resumed, old = (json.load(open(p)) for p in sys.argv[1:4])
assert resumed["init_loss"] == first["init_loss"], (resumed, first)
assert old["steps"] == 110 and "init_loss" not in old, old
P

# One tokenizer is not one vocabulary size: with data of another
# tokenizer of 320 ids, resume and init_from refuse the checkpoint,
# naming both tokenizer files.
OTHER=$(other_token_data t 320)
CK100="$R/train/checkpoints/step-00000100"
cat > othertok.yaml <<Y
dag: othertok
tasks:
  resume: {stage: train, with: {data: "$OTHER", $MODEL, steps: 110, samples: 0, eval_every: 0, resume: "$CK100"}}
  init: {stage: train, with: {data: "$OTHER", batch_size: 4, threads: 1, steps: 1, samples: 0, eval_every: 0, init_from: "$CK100"}}
Y
run_dagrun run othertok.yaml --plain
expect_rc 1
RO=$(run_dir othertok)
expect_in "$RO/resume/attempt-1/log" "this run's data's tokenizer $OTHER/tokenizer.json is not the checkpoint $CK100's ($DATA/tokenizer.json)"
expect_in "$RO/init/attempt-1/log" "init_from: the data's tokenizer $OTHER/tokenizer.json is not the model $CK100's ($DATA/tokenizer.json)"

# resume: auto skips a corrupt checkpoint for the previous valid one. The
# learn attempt is run again by hand in the same task directory, with its
# newest checkpoint truncated: it resumes from step 100, says why, and
# ends with the same bits as before.
rerun_attempt() { # NAME: the learn attempt again, its log in NAME.log
  set +e
  "$DAGRUN" __worker "$R/train/attempt-1/attempt.json" 3>"$1.msgs" >"$1.log" 2>&1
  local rc=$?
  set -e
  [ "$rc" -eq 0 ] || fail "re-run attempt failed ($rc): $(cat "$1.log")"
}
cp "$R/train/checkpoints/step-00000200/model.safetensors" want-200.safetensors
truncate -s 2000 "$R/train/checkpoints/step-00000200/model.safetensors"
rerun_attempt again
expect_in again.log "skipping checkpoint"
expect_in again.log "step-00000200: model.safetensors: truncated"
expect_in again.log "resumed from $R/train/checkpoints/step-00000100 at step 100"
cmp want-200.safetensors "$R/train/checkpoints/step-00000200/model.safetensors" ||
  fail "resumed from the older checkpoint, the run ended with other weights"
# Every checkpoint corrupt: it starts again from step 0, and says so once,
# naming them, with a corrupt_checkpoints metric (it said nothing).
truncate -s 2000 "$R/train/checkpoints/step-00000200/model.safetensors" \
  "$R/train/checkpoints/step-00000100/model.safetensors"
rerun_attempt over
expect_in over.log "every checkpoint in $R/train/checkpoints is corrupt (2: step-00000200, step-00000100): starting again from step 0"
expect_in over.log "loss at initialization"
expect_in over.msgs '"name":"corrupt_checkpoints","value":2,"step":0'

# A corrupt checkpoint is refused with the file named.
cp -r "$R/train/checkpoints/step-00000100" bad-ckpt
truncate -s 1000 bad-ckpt/model.safetensors
train_dag corrupt "steps: 200, resume: \"$T/bad-ckpt\""
run_dagrun run corrupt.yaml --plain
expect_rc 1
expect_in "$T/out" "model.safetensors"
expect_in "$T/out" "truncated"
# An optim.bin cut short, its checksum made to match: said so, not taken
# for another optimizer's state.
cp -r "$R/train/checkpoints/step-00000100" short-ckpt
truncate -s -4 short-ckpt/optim.bin
"$PY" - short-ckpt <<'P'
import hashlib, json, os, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
b = open(d + "/optim.bin", "rb").read()
m["files"]["optim.bin"] = {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()}
json.dump(m, open(d + "/manifest.json", "w"))
P
train_dag shortopt "steps: 200, resume: \"$T/short-ckpt\""
run_dagrun run shortopt.yaml --plain
expect_rc 1
expect_in "$T/out" "short-ckpt/optim.bin: "
expect_in "$T/out" "bytes, but its header's "
expect_in "$T/out" ": truncated"
expect_not_in "$T/out" "another optimizer"
# A resume that names nothing there (a typo of auto) says which path.
train_dag resumetypo "steps: 10, resume: sometimes"
run_dagrun run resumetypo.yaml --plain
expect_rc 1
expect_in "$T/out" "resume: ./sometimes: No such file or directory (resume is auto, never, or a checkpoint directory)"
# A checkpoint past steps (the total, not steps to add) is refused rather
# than "trained" for no step.
train_dag pastend "steps: 50, samples: 0, resume: \"$R/train/checkpoints/step-00000100\""
run_dagrun run pastend.yaml --plain
expect_rc 1
expect_in "$T/out" "step-00000100 is at step 100, past steps: 50"

# A loss that is not finite fails the run. A diverging run (its loss and
# grad norm NaN from some step on) fails after 10 such steps in a row,
# and nothing downstream takes its checkpoint.
train_dag diverge "steps: 60, lr: 9.9, warmup: 0, grad_clip: 0, spike_policy: none, eps: 1e-30, beta2: 0.0001, eval_every: 0, samples: 0"
echo '  export: {stage: export, needs: [train], with: {model: "${tasks.train.outputs.checkpoint}"}}' >> diverge.yaml
run_dagrun run diverge.yaml --plain
expect_rc 1
expect_in "$T/out" "not finite 10 steps in a row"
expect_in "$T/out" "export: upstream_failed"
# A few skipped steps are counted in summary.json; a run whose last step's
# loss is not finite succeeds with the weights from before it, and says so
# (DAGRUN_FAULT_NAN_STEPS makes those steps' losses NaN).
train_dag nanfew "steps: 8, eval_every: 4, samples: 0"
DAGRUN_FAULT_NAN_STEPS=3,4 run_dagrun run nanfew.yaml --plain
expect_rc 0
expect_in "$(run_dir nanfew)/train/attempt-1/log" "step 3: loss nan, grad norm"
"$PY" - "$(run_dir nanfew)/train/out/summary.json" <<'P' || fail "nonfinite_steps: $(cat "$(run_dir nanfew)/train/out/summary.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["nonfinite_steps"] == 2 and s["steps"] == 8, s
P
train_dag nanlast "steps: 8, warmup: 20, eval_every: 0, samples: 0"
DAGRUN_FAULT_NAN_STEPS=8 run_dagrun run nanlast.yaml --plain
expect_rc 0
# (A warmup past the steps is said: the learning rate never reaches lr.)
expect_in "$(run_dir nanlast)/train/attempt-1/log" "warmup 20 is longer than steps 8: the learning rate never reaches lr (it peaks at 40% of it)"
expect_in "$(run_dir nanlast)/train/attempt-1/log" "the last 1 steps were skipped for a loss or grad norm that was not finite (1 in all): the weights are those before them"
# A token file that is not the one its manifest lists (the validation
# split copied over a train file) is refused by name, not trained on.
cp -r "$DATA" swapped-data
cp swapped-data/val-00000.tok swapped-data/train-00000.tok
sed "s|$DATA|$T/swapped-data|" nanlast.yaml > swapped.yaml
sed -i 's/^dag: nanlast/dag: swapped/' swapped.yaml
run_dagrun run swapped.yaml --plain
expect_rc 1
expect_in "$T/out" "swapped-data/train-00000.tok holds"
expect_in "$T/out" "it is not the file the tokenize stage wrote there (copied over, or cut short)"
# A finite loss that ends above where it started: a warning, not a failure.
train_dag rise "steps: 20, lr: 2, warmup: 0, grad_clip: 0, spike_policy: none, eval_every: 0, samples: 0"
run_dagrun run rise.yaml --plain
expect_rc 0
expect_in "$(run_dir rise)/train/attempt-1/log" "is above the loss at initialization"

# Validation as the validate stage does it. A validation split smaller
# than one batch is scored in fewer or shorter sequences (a number, not
# nan); no validation split at all is a warning; a validation that fails
# (an id outside the vocabulary in the split) fails the task.
cat > smallval.yaml <<Y
dag: smallval
tasks:
  shard: {stage: shard, with: {input: "$T/corpus-t", separator: "%", shards: 2, val_fraction: 0.002}}
  noval: {stage: shard, with: {input: "$T/corpus-t", separator: "%", shards: 2, val_fraction: 0}}
  tokenize: {stage: tokenize, needs: [shard], with: {shards: "\${tasks.shard.outputs.dir}", tokenizer: "$DATA/tokenizer.json"}}
  tok_noval: {stage: tokenize, needs: [noval], with: {shards: "\${tasks.noval.outputs.dir}", tokenizer: "$DATA/tokenizer.json"}}
  train: {stage: train, needs: [tokenize], with: {data: "\${tasks.tokenize.outputs.dir}", ${MODEL/batch_size: 4/batch_size: 32}, steps: 4, eval_every: 2, samples: 0}}
  train_noval: {stage: train, needs: [tok_noval], with: {data: "\${tasks.tok_noval.outputs.dir}", $MODEL, steps: 2, samples: 0}}
Y
run_dagrun run smallval.yaml --plain
expect_rc 0
RS=$(run_dir smallval)
expect_in "$RS/train/attempt-1/log" "the validation split is too small for batches of 32x32: evaluating"
"$PY" - "$RS/train/out/summary.json" <<'P' || fail "small validation split: $(cat "$RS/train/out/summary.json")"
import json, math, sys
s = json.load(open(sys.argv[1]))
assert isinstance(s["val_loss"], float) and math.isfinite(s["val_loss"]), s
P
expect_in "$RS/train_noval/attempt-1/log" "has no validation files"
cp -r "$DATA" badval
"$PY" - badval/val-00000.tok <<'P'
import hashlib, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<H", b, 128 + 2 * 40, 900)  # a token id past vocab_size 320
b[40:72] = hashlib.sha256(b[128:]).digest()
open(sys.argv[1], "wb").write(b)
P
sed "s|data: \"$DATA\"|data: \"$T/badval\"|; s/dag: nanlast/dag: badval/" nanlast.yaml > badval.yaml
run_dagrun run badval.yaml --plain
expect_rc 1
expect_in "$T/out" "validation data: "
expect_in "$T/out" "has id 900, outside the vocabulary (320)"

# overfit_one_batch: the one batch is learned by heart...
train_dag overfit "steps: 150, lr: 0.01, warmup: 0, overfit_one_batch: true, samples: 0"
run_dagrun run overfit.yaml --plain
expect_rc 0
# ...and a learning rate that cannot get there fails the check, saying so.
train_dag noverfit "steps: 5, lr: 0.000001, overfit_one_batch: true, samples: 0"
run_dagrun run noverfit.yaml --plain
expect_rc 1
expect_in "$T/out" "overfit_one_batch: loss"

# Lion trains too.
train_dag lion "steps: 60, optimizer: lion, lr: 0.001, samples: 0"
run_dagrun run lion.yaml --plain
expect_rc 0
decay_of() { # MANIFEST: the decay_tensors its training config records
  "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["state"]["config"]["decay_tensors"])' "$1"
}
[ "$(decay_of "$(run_dir lion)"/train/checkpoints/step-00000060/manifest.json)" = matrices ] ||
  fail "a default run's checkpoint does not say decay_tensors matrices"

# decay_tensors: all_2d reaches the model (the checkpoint's config is
# read from its tensors' flags; unit/test_gpt checks the decay itself),
# and a value outside the choices is refused at check.
train_dag decay2d "steps: 10, samples: 0, eval_every: 0, decay_tensors: all_2d"
run_dagrun run decay2d.yaml --plain
expect_rc 0
expect_in "$(run_dir decay2d)/train/attempt-1/log" "weight decay on every 2-D tensor"
[ "$(decay_of "$(run_dir decay2d)"/train/checkpoints/step-00000010/manifest.json)" = all_2d ] ||
  fail "decay_tensors: all_2d is not in the checkpoint's config"
train_dag baddecay "decay_tensors: everything"
run_dagrun run baddecay.yaml --plain
expect_rc 2
expect_in "$T/err" "param 'decay_tensors': 'everything' is not one of matrices, all_2d"

# The loss-spike guard, on a bad batch injected at step 61 (numbered as
# the metrics number steps): each policy does what it says, and the event
# is logged and counted at the step the loss metric names.
for policy in skip lower_lr reset rollback; do
  train_dag "spike_$policy" "steps: 100, lr: 0.003, checkpoint_every: 40, samples: 0, spike_policy: $policy"
  DAGRUN_FAULT_SPIKE_STEPS=61 run_dagrun run "spike_$policy.yaml" --plain
  expect_rc 0
  RS=$(run_dir "spike_$policy")
  expect_in "$RS/train/attempt-1/log" "step 61: injected bad batch"
  expect_in "$RS/train/attempt-1/log" "step 61: loss spike"
  /usr/bin/python3 - "$RS/train" "$policy" <<'P' || fail "spike policy $policy: $(grep -i spike "$RS/train/attempt-1/log")"
import json, sys
d, policy = sys.argv[1:3]
s = json.load(open(d + "/out/summary.json"))
assert s["spike_events"] == 1 and s["steps"] == 100, s
log = open(d + "/attempt-1/log").read()
lr, loss, spike, events = {}, {}, {}, {}
for line in open(d + "/metrics.jsonl"):
    m = json.loads(line)
    {"lr": lr, "loss": loss, "spike": spike, "spike_events": events}.get(m["name"], {})[m["step"]] = m["value"]
# The spike and its count, at the step its loss is reported at (none after
# a rollback).
assert list(spike) == [61], spike
assert events == {61: 1}, events
if policy != "rollback":
    assert spike[61] == loss[61] and loss[61] > 3 * loss[60], (spike, loss[60], loss[61])
want = {"skip": "update skipped", "lower_lr": "learning rate lowered",
        "reset": "optimizer moments reset", "rollback": "rolled back to step 40"}[policy]
assert want in log, want
if policy == "lower_lr":
    # this step and the next 100 run at a tenth of the schedule's rate
    assert lr[61] < 0.2 * lr[60] and lr[62] < 0.2 * lr[59], (lr[59], lr[60], lr[61], lr[62])
P
done

# dropout: training steps drop (the losses differ from the same run
# without; the loss at initialization, an evaluation, does not); the same
# seed gives the same bits (prefetch or not), and a run resumed from its
# middle checkpoint ends with the uninterrupted run's bits (the masks are
# keyed by the batch's number, which the checkpoint keeps).
DROP="steps: 60, lr: 0.003, eval_every: 0, checkpoint_every: 30, samples: 0"
train_dag nodrop "$DROP"
train_dag drop "$DROP, dropout: 0.2"
train_dag drop2 "$DROP, dropout: 0.2, prefetch: 0" # not a cache hit; the same batches
for d in nodrop drop drop2; do
  run_dagrun run "$d.yaml" --plain
  expect_rc 0
done
RD=$(run_dir drop)
expect_in "$RD/train/attempt-1/log" "dropout 0.2: training on the CPU engine"
train_dag dropres "$DROP, dropout: 0.2, resume: \"$RD/train/checkpoints/step-00000030\""
run_dagrun run dropres.yaml --plain
expect_rc 0
for d in drop2 dropres; do
  cmp "$RD/train/checkpoints/step-00000060/model.safetensors" "$(run_dir $d)/train/checkpoints/step-00000060/model.safetensors" ||
    fail "$d: not the bits of the first dropout run"
done
"$PY" - "$(run_dir nodrop)/train" "$RD/train" <<'P' || fail "dropout did not change training: see above"
import json, sys
def series(d):
    out = {}
    for line in open(d + "/metrics.jsonl"):
        m = json.loads(line)
        out.setdefault(m["name"], {})[m["step"]] = m["value"]
    return out
a, b = series(sys.argv[1]), series(sys.argv[2])
assert a["init_loss"] == b["init_loss"], (a["init_loss"], b["init_loss"])
assert all(a["loss"][k] != b["loss"][k] for k in range(1, 61)), "a step without dropout's effect"
c = json.load(open(sys.argv[2] + "/checkpoints/step-00000060/manifest.json"))
assert c["state"]["config"]["dropout"] == 0.2, c["state"]["config"]
P
for bad in "dropout: 1|dropout must be in [0,1)" \
  "dropout: 0.1, device: cuda|dropout 0.1: the CUDA engine has no dropout (the CPU engine has): set device: cpu, or dropout: 0"; do
  train_dag dropbad "steps: 1, ${bad%%|*}"
  run_dagrun run dropbad.yaml --plain
  expect_rc 1
  expect_in "$T/out" "${bad#*|}"
done

# A value outside the optimizer's choices: refused by check, at the value.
train_dag badopt "optimizer: sgd"
run_dagrun run badopt.yaml --plain
expect_rc 2
expect_in "$T/err" "param 'optimizer': 'sgd' is not one of adamw, lion"
[ ! -d "$DAGRUN_RUNS_DIR/badopt" ] || fail "optimizer: sgd started a run"
train_dag baddata "steps: 1"
sed -i "s|$DATA|$T/nowhere|" baddata.yaml
run_dagrun run baddata.yaml --plain
expect_rc 1
expect_in "$T/out" "nowhere/manifest.json"
pass
