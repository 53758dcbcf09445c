#!/usr/bin/env bash
# Pipeline parallelism (gpu/pipeline/pipeline.h) in the train stage on
# CPU ranks under mpirun: pipeline_parallel 2, world_size 2, a 4-layer
# GPT (width 32), 20 steps of grad_accum 4 micro-batches of batch_size 2.
# - 1f1b and gpipe: every step's loss within 1e-4 (relative) of one
#   process with the same batch_size and grad_accum, and the final
#   weights within 1e-4 of the largest weight (the same bound as the ZeRO
#   gang's: the only differences are the order of two float sums, wte's
#   head and lookup parts and the clipping norm's stage sums, which AdamW
#   carries on for 20 steps; measured: 2.3e-6 at worst of a largest
#   weight 1.03, in the attention biases, 4 stages and 8 micro-batches).
# - The log has the bubble line, measured beside (p-1)/(m+p-1) = 20%,
#   and says how many micro-batches' activations stage 0 keeps: 2 under
#   1f1b (P - s), 4 (all) under gpipe.
# - summary.json's comm: stage 0's sends and recvs, one or more per
#   micro-batch each.
# - The same with 4 stages of one layer on 4 ranks (1f1b).
# - Data parallel beside the pipeline: 2 replicas of 2 stages on 4 ranks
#   (rank r is stage r % 2 of replica r / 2), each on its 2 rows of each
#   micro-batch of a global batch of 4: the losses and final weights of
#   one process of batch_size 4 with the same grad_accum (which draws
#   the same rows), within the same bounds, and its val_loss; one
#   process of batch_size 4 resumes its step-10 checkpoint and it
#   resumes one process's, both with one process's losses of steps 11-20.
#   It runs at zero_stage 1 (the default: each rank of a stage group
#   keeps half its stage's optimizer state, the log's figures checked);
#   zero_stage 0 and 2 give the same losses and weights. At zero_stage 3
#   (the parameters sharded too: each rank keeps half its stage's
#   between steps, fewer bytes than at 2, and gathers the stage for the
#   step) one4's losses and val_loss and zero_stage 2's weights; its
#   step-10 checkpoint resumes as one process and one process's resumes
#   as the zero_stage 3 gang.
# - The final checkpoint (rank 0's gather, one process's format) is
#   validated and exported downstream; one process resumes from the
#   pipeline's step-10 checkpoint, and a pipeline from one process's and
#   from a pipeline's, all with one process's losses of steps 11-20.
# - A timeout stops both ranks, which write a checkpoint first (one
#   process resumes it).
# - A checkpoint rank 0 cannot write fails the task at once on every
#   rank, with rank 0's reason.
# - Refused at start with the numbers: world_size 3 with
#   pipeline_parallel 2 (not a multiple), n_layer 3 with 2 stages, device:
#   cuda where no rank sees a GPU, pipeline_parallel without a gang. (A Llama: test_llama_parallel.)
. "$(dirname "$0")/lib.sh"

use_train_gang
ENV=$GANG_ENV

DATA=$(make_token_data pipe 320)
MODEL="data: \"$DATA\", n_layer: 4, n_head: 2, n_embd: 32, block_size: 32, threads: 1, steps: 20, lr: 0.003, warmup: 2, eval_every: 10, samples: 0, spike_policy: none, batch_size: 2, grad_accum: 4, checkpoint_every: 10"

one_process one "$MODEL"

# Stage 0 keeps the activations of P - 0 = 2 micro-batches under 1f1b,
# of all 4 under gpipe.
declare -A SLOTS=([1f1b]=2 [gpipe]=4)
for sched in 1f1b gpipe; do
  cat > p$sched.yaml <<Y
dag: p$sched
tasks:
  train:
    stage: train
    world_size: 2
    launcher: mpirun
    $ENV
    with: {$MODEL, pipeline_parallel: 2, pipeline_schedule: $sched}
  validate: {stage: validate, needs: [train], with: {data: "$DATA", threads: 1, max_batches: 4, checkpoint: "\${tasks.train.outputs.checkpoint}"}}
  export: {stage: export, needs: [train], with: {model: "\${tasks.train.outputs.checkpoints}"}}
Y
  run_dagrun run p$sched.yaml --plain
  expect_rc 0
  R=$(run_dir p$sched)
  LOG="$R/train/attempt-1/log"
  expect_in "$LOG" "stage 0 of 2 (layers 0-1, embeddings), schedule $sched, 4 micro-batches (grad_accum) of 2 x 32, the activations of ${SLOTS[$sched]} of them kept at most"
  expect_in "$LOG" "(p-1)/(m+p-1) = (2-1)/(4+2-1) = 20.0%"
  grep -F "pipeline bubble" "$LOG" | sed 's/^/  /'
  # Stage 0's communication (comm_stats): at least one send (activations)
  # and one recv (their gradients) per micro-batch, its waits for stage 1
  # counted in the recvs' seconds.
  /usr/bin/python3 - "$R/train/out/summary.json" <<'P' || fail "p$sched: comm: $(cat "$R/train/out/summary.json")"
import json, sys
c = json.load(open(sys.argv[1]))["comm"]
assert c["steps"] == 20, c
for k in ("send", "recv"):
    assert c[k]["calls"] >= 80 and c[k]["bytes"] > 0 and c[k]["seconds"] >= 0, c
assert c["recv"]["seconds"] > 0, c
P
  losses "$R" > p$sched.losses
  same_losses one.losses p$sched.losses 1e-4
  same_weights "$R1/train/checkpoints/step-00000020/model.safetensors" \
    "$R/train/checkpoints/step-00000020/model.safetensors" 1e-4
  /usr/bin/python3 -c "import json, math, sys; v = json.load(open(sys.argv[1]))['val_loss']; assert math.isfinite(v) and v < 6, v" \
    "$R/validate/out/metrics.json" || fail "validate: $(cat "$R/validate/out/metrics.json")"
  ls "$R/export/out/model/"*.safetensors >/dev/null || fail "export: $(ls -R "$R/export/out")"
done
P1=$(run_dir p1f1b)

# Four stages of one layer on 4 ranks (oversubscribed): two middle stages
# that receive the stream and send its gradient back; the same losses and
# weights.
gang_dag p4 "$MODEL, pipeline_parallel: 4" 4
expect_rc 0
R=$(run_dir p4)
expect_in "$R/train/attempt-1/log" "stage 0 of 4 (layers 0-0, embeddings), schedule 1f1b, 4 micro-batches (grad_accum) of 2 x 32, the activations of 4 of them kept at most"
expect_in "$R/train/attempt-1/log" "(p-1)/(m+p-1) = (4-1)/(4+4-1) = 42.9%"
losses "$R" > p4.losses
same_losses one.losses p4.losses 1e-4
same_weights "$R1/train/checkpoints/step-00000020/model.safetensors" \
  "$R/train/checkpoints/step-00000020/model.safetensors" 1e-4

# Two replicas of two stages: rank r is stage r % 2 of replica r / 2;
# the loader draws 2 x 2 rows a micro-batch, as one process of
# batch_size 4 does, and each replica trains its 2.
ONE=$R1
one_process one4 "${MODEL/batch_size: 2/batch_size: 4}"
gang_dag dp "$MODEL, pipeline_parallel: 2" 4
expect_rc 0
R=$(run_dir dp)
expect_in "$R/train/attempt-1/log" "rank 0 is stage 0 of 2 (layers 0-1, embeddings), schedule 1f1b, 4 micro-batches (grad_accum) of 2 x 32, the activations of 2 of them kept at most; data-parallel replica 0 of 2 (global batch 2 x 2 x 4 = 16 sequences)"
/usr/bin/python3 -c "import json, sys; s = json.load(open(sys.argv[1])); assert (s['data_parallel'], s['tokens']) == (2, 20 * 16 * 32), s" \
  "$R/train/out/summary.json" || fail "dp: $(cat "$R/train/out/summary.json")"
losses "$R" > dp.losses
same_losses one4.losses dp.losses 1e-4
same_weights "$R1/train/checkpoints/step-00000020/model.safetensors" \
  "$R/train/checkpoints/step-00000020/model.safetensors" 1e-4
# Rank 0 validates the gathered weights over one process's windows.
# same_val_loss NAME RUN: RUN's val_loss within 1e-4 of R1's.
same_val_loss() {
  /usr/bin/python3 -c "import json, sys; a, b = (json.load(open(f))['val_loss'] for f in sys.argv[1:]); assert abs(a - b) <= 1e-4 * a, (a, b)" \
    "$R1/train/out/summary.json" "$2/train/out/summary.json" || fail "$1: val_loss differs from one process's"
}
same_val_loss dp "$R"
# ZeRO over the stage groups: dp ran at zero_stage 1 (the default), each
# rank keeping the AdamW state of half its stage's range; at 0 and 2 the
# same losses and weights (2 is 1 here: the stage keeps the model's
# gradient array, which the log's figures show).
summary_is_zero() {
  /usr/bin/python3 -c "import json, sys; s = json.load(open(sys.argv[1])); assert s['zero_stage'] == int(sys.argv[2]), s" \
    "$1/train/out/summary.json" "$2" || fail "$1: zero_stage is not $2"
}
summary_is_zero "$R" 1
DP=$R
for z in 0 2; do
  gang_dag dp$z "$MODEL, pipeline_parallel: 2, zero_stage: $z" 4
  expect_rc 0
  RZ=$(run_dir dp$z)
  summary_is_zero "$RZ" $z
  losses "$RZ" > dp$z.losses
  same_losses one4.losses dp$z.losses 1e-4
  same_losses dp.losses dp$z.losses 1e-4
  same_weights "$R1/train/checkpoints/step-00000020/model.safetensors" \
    "$RZ/train/checkpoints/step-00000020/model.safetensors" 1e-4
done
# Stage 0 keeps its own range alone (36768 floats: 0.140 MiB of
# parameters and as much of gradients, where the whole model's arrays
# were 0.237 MiB each), beside its reduced half of the gradient at
# zero_stage 1; its optimizer state halved (0.280 MiB whole).
expect_in "$DP/train/attempt-1/log" "rank 0 holds 0.140 MiB of parameters, 0.210 MiB of gradients (0.210 MiB at most in a step) and 0.140 MiB of optimizer state between steps (zero_stage 1 over 2 data-parallel replicas)"
expect_in "$(run_dir dp0)/train/attempt-1/log" "rank 0 holds 0.140 MiB of parameters, 0.140 MiB of gradients (0.140 MiB at most in a step) and 0.280 MiB of optimizer state between steps (zero_stage 0 over 2 data-parallel replicas)"
# zero_stage 3: each rank keeps its half of its stage's range between
# steps, of the parameters and of their gradient; the next step gathers
# the stage whole (and the last stage's copy of the tied wte from the
# first) and drops it after the reduce-scatter. one4's losses and
# val_loss, dp2's weights (the same sums in the same order: measured
# 7.8e-8 and 3.1e-6, as dp2's). Between steps stage 0 holds 0.070 MiB of
# parameters (zero_stage 2: 0.140), the last stage 0.049 (its layers and
# ln_f halved, no tied copy); every rank less than at zero_stage 2
# (summary.json's between_steps, parameters and gradients). In the step
# the arrays and the slice beside them, more than zero_stage 2's: the
# log says so, and summary.json's peak is no lower.
gang_dag dpz3 "$MODEL, pipeline_parallel: 2, zero_stage: 3" 4
expect_rc 0
DP3=$(run_dir dpz3)
summary_is_zero "$DP3" 3
losses "$DP3" > dpz3.losses
same_losses one4.losses dpz3.losses 1e-4
same_weights "$(run_dir dp2)/train/checkpoints/step-00000020/model.safetensors" \
  "$DP3/train/checkpoints/step-00000020/model.safetensors" 1e-4
same_val_loss dpz3 "$DP3"
expect_in "$DP3/train/attempt-1/log" "rank 0 holds 0.070 MiB of parameters (0.210 MiB at most in a step), 0.070 MiB of gradients (0.210 MiB at most in a step) and 0.140 MiB of optimizer state between steps (zero_stage 3 over 2 data-parallel replicas)"
expect_in "$DP3/train/attempt-1/log" "rank 0: zero_stage 3's parameters at most in a step (0.210 MiB: its slice and its stage's arrays, gathered whole for the step) are no better than zero_stage 2's 0.140 MiB for this model"
/usr/bin/python3 - "$(run_dir dp2)/train/out/summary.json" "$DP3/train/out/summary.json" <<'P' || fail "dpz3: parameters between steps not below zero_stage 2's: $(jq -c .memory "$DP3/train/out/summary.json")"
import json, sys
two, three = (json.load(open(f))["memory"]["ranks"] for f in sys.argv[1:])
assert [r["rank"] for r in two] == [r["rank"] for r in three] == [0, 1, 2, 3], (two, three)
for a, b in zip(two, three):
    print("rank %d between steps: parameters %d bytes at zero_stage 2, %d at 3; inside the step %d, %d" % (a["rank"], a["between_steps"]["params"], b["between_steps"]["params"], a["peak"]["params"], b["peak"]["params"]))
    assert b["between_steps"]["params"] < a["between_steps"]["params"], (a, b)
    assert b["between_steps"]["grads"] < a["between_steps"]["grads"], (a, b)
    assert b["peak"]["params"] >= a["peak"]["params"], (a, b)  # the stage gathered whole
P
# Its step-10 checkpoint (the slices gathered, one process's format)
# resumes as one process of batch_size 4, and one4's resumes as the
# zero_stage 3 gang (each rank taking its slice), both with one4's
# losses of steps 11-20.
printf 'dag: dpz32o\ntasks:\n  train: {stage: train, with: {%s, resume: "%s"}}\n' \
  "${MODEL/batch_size: 2/batch_size: 4}" "$DP3/train/checkpoints/step-00000010" > dpz32o.yaml
run_dagrun run dpz32o.yaml --plain
resumed_as one4 dpz32o "resumed from $DP3/train/checkpoints/step-00000010 at step 10" 1e-4
gang_dag o2dpz3 "$MODEL, pipeline_parallel: 2, zero_stage: 3, resume: \"$R1/train/checkpoints/step-00000010\"" 4
resumed_as one4 o2dpz3 "resumed from $R1/train/checkpoints/step-00000010 at step 10" 1e-4
R=$DP
# Its checkpoints are one process's of batch_size 4, and it resumes one.
printf 'dag: dp2o\ntasks:\n  train: {stage: train, with: {%s, resume: "%s"}}\n' \
  "${MODEL/batch_size: 2/batch_size: 4}" "$R/train/checkpoints/step-00000010" > dp2o.yaml
run_dagrun run dp2o.yaml --plain
resumed_as one4 dp2o "resumed from $R/train/checkpoints/step-00000010 at step 10" 1e-4
gang_dag o2dp "$MODEL, pipeline_parallel: 2, resume: \"$R1/train/checkpoints/step-00000010\"" 4
resumed_as one4 o2dp "resumed from $R1/train/checkpoints/step-00000010 at step 10" 1e-4
R1=$ONE

printf 'dag: p2o\ntasks:\n  train: {stage: train, with: {%s, resume: "%s"}}\n' \
  "$MODEL" "$P1/train/checkpoints/step-00000010" > p2o.yaml
run_dagrun run p2o.yaml --plain
resumed_as one p2o "resumed from $P1/train/checkpoints/step-00000010 at step 10" 1e-4
gang_dag o2p "$MODEL, pipeline_parallel: 2, resume: \"$R1/train/checkpoints/step-00000010\""
resumed_as one o2p "resumed from $R1/train/checkpoints/step-00000010 at step 10" 1e-4
gang_dag p2p "$MODEL, pipeline_parallel: 2, pipeline_schedule: gpipe, resume: \"$P1/train/checkpoints/step-00000010\""
resumed_as one p2p "resumed from $P1/train/checkpoints/step-00000010 at step 10" 1e-4

# A timeout stops the pipeline: the ranks agree on the stop, rank 0
# gathers and writes a checkpoint, which one process resumes.
MTO=${MODEL/steps: 20/steps: 100000}
MTO=${MTO/checkpoint_every: 10/checkpoint_every: 0}
cat > to.yaml <<Y
dag: to
tasks:
  train:
    stage: train
    world_size: 2
    launcher: mpirun
    timeout: 4s
    kill_grace: 20s
    env: {DAGRUN_TEST_LOADER_DELAY_MS: "20", OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1", LSAN_OPTIONS: "$LSAN_OPTIONS", ASAN_OPTIONS: "$ASAN_OPTIONS"}
    with: {$MTO, pipeline_parallel: 2}
Y
run_dagrun run to.yaml --plain
expect_rc 1
expect_in "$T/out" "timed out after 4.0s"
RT=$(run_dir to)
expect_in "$RT/train/attempt-1/log" "checkpoint step"
CK=$(ls -d "$RT/train/checkpoints/"step-* | tail -n 1)
[ -n "$CK" ] || fail "no checkpoint on stop: $(ls "$RT/train/checkpoints")"
STOP=$((10#${CK##*step-}))
[ "$STOP" -gt 0 ] || fail "stopped before the first step: $CK"
printf 'dag: resto\ntasks:\n  train: {stage: train, with: {%s, resume: "%s"}}\n' \
  "${MODEL/steps: 20/steps: $((STOP + 2))}" "$CK" > resto.yaml
run_dagrun run resto.yaml --plain
expect_rc 0
expect_in "$(run_dir resto)/train/attempt-1/log" "resumed from $CK at step $STOP"

# A checkpoint rank 0 cannot write (its directory replaced by a file
# after the first one) fails the task at once with rank 0's reason, on
# every rank: before, the other stage went on into the next step and
# waited for rank 0 until the communicator's timeout (304 s measured).
MCK=${MTO/steps: 100000/steps: 8}
cat > ckbad.yaml <<Y
dag: ckbad
tasks:
  train:
    stage: train
    world_size: 2
    launcher: mpirun
    env: {DAGRUN_TEST_LOADER_DELAY_MS: "300", OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1", LSAN_OPTIONS: "$LSAN_OPTIONS", ASAN_OPTIONS: "$ASAN_OPTIONS"}
    with: {${MCK/checkpoint_every: 0/checkpoint_every: 1}, pipeline_parallel: 2}
Y
(
  for _ in $(seq 3000); do
    first=$(ls -d "$DAGRUN_RUNS_DIR"/ckbad/*/train/checkpoints/step-00000001 2>/dev/null || true)
    if [ -n "$first" ]; then
      dir=$(dirname "$first")
      mv "$dir" "$dir.moved" && : > "$dir"
      exit 0
    fi
    sleep 0.02
  done
) &
SWAP=$!
START=$(date +%s)
run_dagrun run ckbad.yaml --plain
wait "$SWAP"
expect_rc 1
[ $(($(date +%s) - START)) -lt 60 ] || fail "ckbad: the gang stopped only after $(($(date +%s) - START)) s"
RC_DIR=$(run_dir ckbad)
grep -qF "checkpoint: cannot create $RC_DIR/train/checkpoints: Not a directory" "$RC_DIR/run.json" ||
  fail "ckbad: reason: $(grep reason "$RC_DIR/run.json")"
[ -d "$RC_DIR/train/checkpoints.moved/step-00000001" ] || fail "ckbad: the first checkpoint is missing"

gang_refused dp3 "world_size 3 is not a multiple of pipeline_parallel 2" \
  "$MODEL, pipeline_parallel: 2" 3
gang_refused layers "pipeline_parallel 2 does not divide the model's 3 layers" \
  "${MODEL/n_layer: 4/n_layer: 3}, pipeline_parallel: 2"
gang_refused cuda "device: cuda in a gang of 2, but 0 of the 2 ranks see a usable GPU" \
  "$MODEL, pipeline_parallel: 2, device: cuda"
printf 'dag: solo\ntasks:\n  train: {stage: train, with: {%s, pipeline_parallel: 2}}\n' "$MODEL" > solo.yaml
run_dagrun run solo.yaml --plain
[ "$RC" -ne 0 ] || fail "solo: exit code 0"
expect_in "$T/err" "pipeline_parallel 2 needs a gang of 2 CPU ranks" # dagrun check's
pass
