# The train stage in a gang on the GPU (device: cuda, gpu/zero/zero_cuda.h)
# as one machine with one GPU can run it: a gang of one rank under mpirun
# (NCCL at world size 1), deterministic, gpt-tiny, 20 steps of batch 8 x 64:
# - at ZeRO stages 0, 1, 2 and 3 the losses are bitwise one process's on
#   the GPU (the same kernels in the same order; the collectives of one
#   rank copy), the log says "GPUs, NCCL" and the GPU's memory, the
#   summary device cuda, and validate reads the final checkpoint; stage 3
#   (whose GPU forward needs every rank's layers) takes the pre-flight
#   loss and the validation on rank 0's CPU: both in the summary;
# - at stage 3, rank 0 killed after step 13: the retry resumes from the
#   sharded checkpoint of step 10 (the shard pulled from the GPU, pushed
#   back on resume) and ends with the uninterrupted run's losses and
#   final weights (bitwise);
# - grad_accum 2 on GPU ranks at ZeRO stages 0 and 1: 10 losses bitwise
#   one GPU process's with grad_accum 2 (the micro-batches' gradients
#   added on the GPU, reduced once a step); at stage 2 refused
#   (zero_cuda_step_accum: stages 2-3 take one micro-batch), saying what
#   to do instead.
. "$(dirname "$0")/gpu_env.sh"
command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup.sh installs openmpi-bin)"

DATA=$(make_token_data gang-gpu 320)
# GPU_TEST_EVAL_BATCHES: the batches of each validation (at steps 10 and
# 20 and the final one; the stage's default, 20, unless set): the checks
# read only that stage 3's is finite; the emulator's ctest sets 2 (the
# same forward on every rank's path, fewer batches).
EVAL=${GPU_TEST_EVAL_BATCHES:+, eval_batches: $GPU_TEST_EVAL_BATCHES}
# SHAPE: gpu_env.sh's (GPU_TEST_LAYERS).
COMMON="data: \"$DATA\", model: gpt-tiny, seq_len: 64, batch_size: 8, lr: 0.001, warmup: 2, eval_every: 10, samples: 0, spike_policy: none, checkpoint_every: 5, seed: 7, deterministic: true$EVAL$SHAPE"

# gang_dag NAME WITH [TASK_KEYS] [STEPS]: a DAG of one train task of
# STEPS steps (20), a gang of one rank under mpirun, and validate after it.
gang_dag() {
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train: {stage: train, world_size: 1, launcher: mpirun, ${3:-} with: {$COMMON, steps: ${4:-20}, $2}}
  validate: {stage: validate, needs: [train], with: {data: "$DATA", max_batches: 4, checkpoint: "\${tasks.train.outputs.checkpoint}"}}
Y
  run_dagrun run "$1.yaml" --plain --no-cache
}

cat > one.yaml <<Y
dag: one
tasks:
  train: {stage: train, with: {$COMMON, steps: 20, device: cuda}}
Y
run_dagrun run one.yaml --plain --no-cache
expect_rc 0
R1=$(run_dir one)
losses "$R1" > one.losses
[ "$(wc -l < one.losses)" -eq 20 ] || fail "one process: $(cat one.losses)"

for stage in 0 1 2 3; do
  gang_dag g$stage "device: cuda, zero_stage: $stage"
  expect_rc 0
  R=$(run_dir g$stage)
  expect_in "$R/train/attempt-1/log" "gang of 1 ranks (GPUs, NCCL), ZeRO stage $stage"
  expect_in "$R/train/attempt-1/log" "rank 0's GPU holds params"
  losses "$R" > g$stage.losses
  cmp -s one.losses g$stage.losses ||
    fail "stage $stage: losses differ from one process's: $(diff one.losses g$stage.losses | head)"
  "$PY" -c "import json, sys; s = json.load(open(sys.argv[1])); assert s['device'] == 'cuda' and s['zero_stage'] == $stage, s" \
    "$R/train/out/summary.json" || fail "stage $stage summary: $(cat "$R/train/out/summary.json")"
  [ "$(task_field "$R" validate state)" = success ] || fail "stage $stage: validate did not succeed"
  echo "stage $stage: 20 losses bitwise one process's on the GPU"
done
expect_in "$(run_dir g3)/train/attempt-1/log" "BF16 copy of its shard, two gathered layers"
"$PY" -c "import json, math, sys; s = json.load(open(sys.argv[1])); assert math.isfinite(s['init_loss']) and math.isfinite(s['val_loss']), s" \
  "$(run_dir g3)/train/out/summary.json" || fail "stage 3: no pre-flight or validation loss: $(cat "$(run_dir g3)/train/out/summary.json")"

# Rank 0 dies after step 13; the retry resumes from step 10.
gang_dag kill "device: cuda, zero_stage: 3" "retries: 1, retry_delay: 0, env: {DAGRUN_TEST_KILL_RANK_AT_STEP: \"0:13\"},"
expect_rc 0
RK=$(run_dir kill)
[ -d "$RK/train/attempt-2" ] || fail "no retry"
expect_in "$RK/train/attempt-2/log" "resumed from sharded checkpoint $RK/train/checkpoints/step-00000010 at step 10"
losses "$RK" 2 > kill.losses
grep -E '^(1[1-9]|20) ' g3.losses > g3.tail
cmp -s g3.tail kill.losses || fail "resumed losses differ: $(diff g3.tail kill.losses | head)"
# The tensors, bit for bit (the file's header may differ in what is not
# a weight).
"$PY" - "$(run_dir g3)/train/model/step-00000020/model.safetensors" \
  "$RK/train/model/step-00000020/model.safetensors" <<'P' ||
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), [k for k in a if a.get(k) != b.get(k)][:5]
P
  fail "the resumed gang's final weights differ from the uninterrupted one's"

# grad_accum 2 on GPU ranks at stages 0-1: one GPU process's losses with
# grad_accum 2, bit for bit.
cat > one_accum.yaml <<Y
dag: one_accum
tasks:
  train: {stage: train, with: {$COMMON, steps: 10, device: cuda, grad_accum: 2}}
Y
run_dagrun run one_accum.yaml --plain --no-cache
expect_rc 0
losses "$(run_dir one_accum)" > one_accum.losses
[ "$(wc -l < one_accum.losses)" -eq 10 ] || fail "one process, grad_accum 2: $(cat one_accum.losses)"
cmp -s one_accum.losses one.losses && fail "grad_accum 2 gave grad_accum 1's losses"
for stage in 0 1; do
  gang_dag accum$stage "device: cuda, zero_stage: $stage, grad_accum: 2" "" 10
  expect_rc 0
  R=$(run_dir accum$stage)
  expect_in "$R/train/attempt-1/log" "global batch 1 x 8 x 2 (grad_accum) = 16 sequences"
  losses "$R" > accum$stage.losses
  # The gang reports a step's loss in FP32 (zero_step_result), one process
  # its micro-batches' mean in FP64: the same loss, compared as FP32.
  "$PY" - one_accum.losses accum$stage.losses <<'P' ||
import struct, sys
f32 = lambda x: struct.unpack("f", struct.pack("f", float(x)))[0]
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
assert [s for s, _ in a] == [s for s, _ in b], (a, b)
bad = [(s, x, y) for (s, x), (_, y) in zip(a, b) if f32(x) != f32(y)]
assert not bad, bad[:5]
P
    fail "stage $stage, grad_accum 2: losses differ from one process's: $(diff one_accum.losses accum$stage.losses | head)"
  echo "stage $stage, grad_accum 2: 10 losses bitwise one process's (as FP32)"
done
# At stage 2: refused, saying what to do.
gang_dag accum "device: cuda, zero_stage: 2, grad_accum: 2" "retries: 0," 2
expect_rc 1
expect_in "$T/out" "grad_accum 2 in a gang on GPUs at zero_stage 2"
pass
