# The train stage on real token files: the loss falls below the unigram
# entropy, a run resumed from its middle checkpoint ends with the very
# same weights as one that never stopped, overfit_one_batch drives the loss
# to near zero (and fails loudly when it cannot), a corrupt checkpoint is
# refused naming the file, and bad params are refused.
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data t 320)
MODEL='n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, batch_size: 4, threads: 2'

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

# A corrupt checkpoint is refused with the file named.
cp -r "$R/train/checkpoints/step-00000100" bad-ckpt
truncate -s 1000 bad-ckpt/model.safetensors
train_dag corrupt "steps: 200, resume: \"$T/bad-ckpt\""
run_dagrun run corrupt.yaml --plain
expect_rc 1
expect_in "$T/out" "model.safetensors"
expect_in "$T/out" "truncated"

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

train_dag badopt "optimizer: sgd"
run_dagrun run badopt.yaml --plain
expect_rc 1
expect_in "$T/out" "optimizer must be adamw or lion, not 'sgd'"
train_dag baddata "steps: 1"
sed -i "s|$DATA|$T/nowhere|" baddata.yaml
run_dagrun run baddata.yaml --plain
expect_rc 1
expect_in "$T/out" "nowhere/manifest.json"
pass
