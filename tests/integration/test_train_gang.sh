# The train stage in a gang (world_size 2, launcher mpirun): data-parallel
# training with ZeRO (gpu/zero/zero.h) on CPU ranks.
# - Two ranks of batch_size 2 train as one process of batch_size 4 on the
#   same data (each rank takes its half of the global batch the one
#   process would draw): at every ZeRO stage 0-3 the 20 per-step losses
#   equal the one process's (relative difference < 1e-4) and so do the
#   final weights (max abs difference < 1e-4 of the largest weight;
#   measured: 6e-6, in the attention biases).
# - The final output checkpoint (full weights, written by rank 0) is read
#   by validate downstream, the checkpoints output by export, and a plain train refuses to resume from it
#   (no optimizer state), saying so.
# - Rank 1 killed by SIGKILL after step 13 (the test hook
#   DAGRUN_TEST_KILL_RANK_AT_STEP): the gang stops (no process of the
#   attempt left), the retry resumes from the sharded checkpoint of step
#   10, says so, and ends with the losses of steps 11-20 and the final
#   weights of the uninterrupted run (relative difference < 1e-5).
# - Each step of a gang reports where its time went, as one process does:
#   time_data_s, time_forward_s, time_backward_s, time_optimizer_s,
#   time_comm_s (collectives the rank waited in), all >= 0, adding up to
#   step_time_s within 5% (or 0.5 ms); forward and backward > 0, comm > 0
#   (two ranks always exchange something); tokens = steps x 128;
#   flops_per_s > 0; the overlap (comm_overlap, the share of
#   reduce-scatters started during backward) is 0 at stage 2 (one bucket,
#   holding the embeddings, final last) and 3 of 4 at stage 3 (one per
#   group; the embeddings' last).
# - Rank 0's communication per kind (summary.json's comm and a log
#   line): the gradients' all-reduces (stages 0-1), reduces (2) or
#   reduce-scatters (3), stage 3's all-gathers, no send/recv.
# - Resume across shapes: one process's checkpoint of step 10 (weights,
#   optimizer, step) continued by a gang of 2 at stage 3, and the stage-2
#   gang's sharded checkpoint of step 10 continued by one process, give
#   steps 11-20 the losses of the uninterrupted runs (relative difference
#   < 1e-5; measured 1.1e-7, the same as one process against a gang). A
#   gang refuses the weights-only final model, and one process a sharded
#   checkpoint of another model, saying why.
# - A gang of one (world_size 1 under mpirun) trains through ZeRO too,
#   with one process's losses (relative difference < 1e-5), and says it
#   chose the CPU because no rank sees a GPU.
# - device: cuda in a gang where no rank sees a GPU fails on every rank,
#   saying how many ranks see one and why this one does not.
# - A timeout stops the gang, which writes a sharded checkpoint first.
# - A data mixture: two ranks of 2 draw the one process's global batch
#   (losses and per-source tokens alike).
# - world_size 2 with launcher local, and dropout in a gang, are refused
#   with messages that say what to do (gradient accumulation in a gang:
#   test_train_gang_parity).
. "$(dirname "$0")/lib.sh"

use_train_gang
ENV=$GANG_ENV

DATA=$(make_token_data gang 320)
MODEL="data: \"$DATA\", n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, threads: 1, steps: 20, lr: 0.003, warmup: 2, eval_every: 10, samples: 0, spike_policy: none"

# --- The reference: one process, batch_size 4 (a checkpoint at step 10
# for the resume below).
one_process one "$MODEL, batch_size: 4, checkpoint_every: 10"

# --- Two ranks of batch_size 2, each ZeRO stage; stage 2 also feeds
# validate, which reads the final checkpoint.
for stage in 0 1 2 3; do
  cat > z$stage.yaml <<Y
dag: z$stage
tasks:
  train:
    stage: train
    world_size: 2
    launcher: mpirun
    $ENV
    with: {$MODEL, batch_size: 2, zero_stage: $stage, checkpoint_every: 5}
  validate: {stage: validate, needs: [train], with: {data: "$DATA", threads: 1, max_batches: 4, checkpoint: "\${tasks.train.outputs.checkpoint}"}}
  export: {stage: export, needs: [train], with: {model: "\${tasks.train.outputs.checkpoints}"}}
Y
  run_dagrun run z$stage.yaml --plain
  expect_rc 0
  R=$(run_dir z$stage)
  expect_in "$R/train/attempt-1/log" "ZeRO stage $stage: global batch 2 x 2 = 4 sequences"
  losses "$R" > z$stage.losses
  same_losses one.losses z$stage.losses 1e-4
  same_weights "$R1/train/checkpoints/step-00000020/model.safetensors" \
    "$R/train/model/step-00000020/model.safetensors" 1e-4
  [ -s "$R/train/checkpoints/step-00000020/zero-rank-00001.safetensors" ] ||
    fail "no sharded checkpoint: $(ls "$R/train/checkpoints")"
  [ "$(task_field "$R" train outputs | sed -n "s/.*'checkpoint': '\([^']*\)'.*/\1/p")" = "$R/train/model/step-00000020" ] ||
    fail "checkpoint output: $(task_field "$R" train outputs)"
  /usr/bin/python3 -c "import json, math, sys; v = json.load(open(sys.argv[1]))['val_loss']; assert math.isfinite(v) and v < 6, v" \
    "$R/validate/out/metrics.json" || fail "validate: $(cat "$R/validate/out/metrics.json")"
  ls "$R/export/out/model/"*.safetensors >/dev/null || fail "export: $(ls -R "$R/export/out")"
  # Rank 0's communication per kind over the 20 steps (comm_stats): the
  # gradients' reduction every step (stages 0-1 all-reduces, 2 reduces to
  # the owners, 3 reduce-scatters), the parameters' all-gathers at stage 3.
  expect_in "$R/train/attempt-1/log" "rank 0's communication over 20 steps (time inside the comm calls); allreduce "
  /usr/bin/python3 - "$R/train/out/summary.json" "$stage" <<'P' || fail "stage $stage: comm: $(cat "$R/train/out/summary.json")"
import json, sys
c, stage = json.load(open(sys.argv[1]))["comm"], int(sys.argv[2])
assert c["rank"] == 0 and c["steps"] == 20, c
kinds = {k: v for k, v in c.items() if isinstance(v, dict)}
assert all(v["calls"] > 0 and v["bytes"] >= 0 and v["seconds"] >= 0 for v in kinds.values()), c
assert sum(v["seconds"] for v in kinds.values()) > 0, c
assert kinds["allreduce"]["calls"] >= 20, c
if stage == 2:  # each group's gradient reduced to its shards' owners
    assert kinds["reduce"]["calls"] >= 20 and kinds["reduce"]["bytes"] > 0, c
if stage == 3:
    assert kinds["reduce_scatter"]["calls"] >= 20 and kinds["reduce_scatter"]["bytes"] > 0, c
    assert kinds["allgather"]["calls"] >= 20, c
assert "send" not in kinds and "recv" not in kinds, c
P
  # Where the time went, per step.
  /usr/bin/python3 - "$R/train/metrics.jsonl" "$stage" <<'P' || fail "stage $stage: step times: see above"
import collections, json, sys
m = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    e = json.loads(line)
    m[e["name"]][e["step"]] = e["value"]
stage = int(sys.argv[2])
phases = ["time_data_s", "time_forward_s", "time_backward_s", "time_optimizer_s", "time_comm_s"]
worst = 0
for s in range(1, 21):
    v = {k: m[k][s] for k in phases + ["step_time_s", "tokens", "flops_per_s"]}
    assert all(v[k] >= 0 for k in phases), (s, v)
    assert v["time_forward_s"] > 0 and v["time_backward_s"] > 0 and v["time_comm_s"] > 0, (s, v)
    gap = abs(sum(v[k] for k in phases) - v["step_time_s"])
    assert gap <= max(0.05 * v["step_time_s"], 5e-4), (s, gap, v)
    worst = max(worst, gap / v["step_time_s"])
    assert v["tokens"] == s * 128 and v["flops_per_s"] > 0, (s, v)
    if stage >= 2:
        # Stages 2-3 send a group at a time (the embeddings, each layer,
        # ln_f): all but the embeddings' (final last) during backward.
        o = m["comm_overlap"][s]
        assert 0.5 < o < 1, (s, o)
n = 20
print("stage %d: step %.2f ms = data %.3f + fwd %.2f + bwd %.2f + opt %.3f + comm %.2f (means), phases vs step at worst %.2f%%%s" % (
    stage, *(1e3 * sum(m[k][s] for s in range(1, 21)) / n for k in ["step_time_s"] + phases), 100 * worst,
    ", overlap %.2f" % (sum(m["comm_overlap"].values()) / n) if stage >= 2 else ""))
P
done

# --- recompute: block on CPU ranks at ZeRO stage 3, whose parameters the
# hooks gather a layer at a time, in the backward's recomputation too:
# z3's losses and weights, to the bit.
sed 's/^dag: z3$/dag: z3rc/; s/zero_stage: 3,/zero_stage: 3, recompute: block,/' z3.yaml > z3rc.yaml
run_dagrun run z3rc.yaml --plain
expect_rc 0
losses "$(run_dir z3rc)" > z3rc.losses
same_losses z3.losses z3rc.losses 0
cmp "$(run_dir z3)/train/model/step-00000020/model.safetensors" \
  "$(run_dir z3rc)/train/model/step-00000020/model.safetensors" ||
  fail "recompute: block in a gang trained other weights"
Z2=$(run_dir z2)

# train_dag NAME WITH [gang]: runs NAME.yaml, a DAG of one train task
# with params WITH; "gang" makes it a gang of 2 ranks under mpirun.
train_dag() {
  if [ "${3:-}" = gang ]; then
    printf 'dag: %s\ntasks:\n  train:\n    stage: train\n    world_size: 2\n    launcher: mpirun\n    %s\n    with: {%s}\n' \
      "$1" "$ENV" "$2" > "$1.yaml"
  else
    printf 'dag: %s\ntasks:\n  train: {stage: train, with: {%s}}\n' "$1" "$2" > "$1.yaml"
  fi
  run_dagrun run "$1.yaml" --plain
}

# --- Resume across shapes. One process's step-10 checkpoint, on by a
# gang at stage 3 (the shards cut from the whole state), and the stage-2
# gang's sharded one, on by one process of the gang's global batch:
train_dag o2g "$MODEL, batch_size: 2, zero_stage: 3, resume: \"$R1/train/checkpoints/step-00000010\"" gang
resumed_as one o2g "resumed from one-process checkpoint $R1/train/checkpoints/step-00000010 at step 10"
train_dag g2o "$MODEL, batch_size: 4, resume: \"$Z2/train/checkpoints/step-00000010\""
resumed_as z2 g2o "is a gang's sharded checkpoint: read whole"
# Refused: the weights-only final model, by a gang and by one process;
# one process resuming a sharded checkpoint of another model.
train_dag wog "$MODEL, batch_size: 2, resume: \"$Z2/train/model/step-00000020\"" gang
expect_rc 1
expect_in "$T/out" "weights only, no optimizer state"
train_dag wo "$MODEL, batch_size: 4, resume: \"$Z2/train/model/step-00000020\""
expect_rc 1
expect_in "$T/out" "weights only, no optimizer state"
train_dag g2big "${MODEL/n_embd: 32/n_embd: 64}, batch_size: 4, resume: \"$Z2/train/checkpoints/step-00000010\""
expect_rc 1
expect_in "$T/out" "parameters and adamw state; this model has"

# --- Rank 1 dies after step 13; the retry resumes from step 10.
cat > kill.yaml <<Y
dag: kill
tasks:
  train:
    stage: train
    world_size: 2
    launcher: mpirun
    retries: 1
    retry_delay: 0
    env: {DAGRUN_TEST_KILL_RANK_AT_STEP: "1:13", OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1", LSAN_OPTIONS: "$LSAN_OPTIONS", ASAN_OPTIONS: "$ASAN_OPTIONS"}
    with: {$MODEL, batch_size: 2, zero_stage: 2, checkpoint_every: 5}
Y
start=$(date +%s)
run_dagrun run kill.yaml --plain
end=$(date +%s)
expect_rc 0
[ $((end - start)) -lt 60 ] || fail "the killed gang took $((end - start)) s"
RK=$(run_dir kill)
expect_in "$RK/train/attempt-1/rank-1/log" "killing itself after step 13"
[ -d "$RK/train/attempt-2" ] || fail "no retry"
if pgrep -f "$RK/train/attempt-1" >/dev/null; then
  fail "processes of the killed attempt left: $(pgrep -af "$RK/train/attempt-1")"
fi
expect_in "$RK/train/attempt-2/log" "resumed from sharded checkpoint $RK/train/checkpoints/step-00000010 at step 10"
losses "$RK" 2 > kill.losses
[ "$(head -1 kill.losses | cut -d' ' -f1)" = 11 ] || fail "the retry did not start at step 11: $(cat kill.losses)"
same_losses z2.tail kill.losses 1e-5
same_weights "$Z2/train/model/step-00000020/model.safetensors" \
  "$RK/train/model/step-00000020/model.safetensors" 1e-5

# --- A timeout stops the gang: the ranks agree on the stop and write a
# sharded checkpoint together before they go.
cat > to.yaml <<Y
dag: to
tasks:
  train:
    stage: train
    world_size: 2
    launcher: mpirun
    timeout: 8s
    kill_grace: 20s
    env: {DAGRUN_TEST_LOADER_DELAY_MS: "50", OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1", LSAN_OPTIONS: "$LSAN_OPTIONS", ASAN_OPTIONS: "$ASAN_OPTIONS"}
    with: {${MODEL/steps: 20/steps: 100000}, batch_size: 2, zero_stage: 1}
Y
run_dagrun run to.yaml --plain
expect_rc 1
expect_in "$T/out" "timed out after 8.0s"
RT=$(run_dir to)
expect_in "$RT/train/attempt-1/log" "sharded checkpoint step"
ls "$RT/train/checkpoints/"step-*/zero-rank-00001.safetensors >/dev/null ||
  fail "no sharded checkpoint on stop: $(ls "$RT/train/checkpoints")"
if pgrep -f "$RT/train/attempt-1" >/dev/null; then
  fail "processes of the stopped gang left: $(pgrep -af "$RT/train/attempt-1")"
fi

# --- A gang of one rank: the gang's path (ZeRO over MPI), one process's
# result; device: auto says why it is the CPU.
cat > solo.yaml <<Y
dag: solo
tasks:
  train: {stage: train, world_size: 1, launcher: mpirun, $ENV, with: {$MODEL, batch_size: 4, zero_stage: 2}}
Y
run_dagrun run solo.yaml --plain
expect_rc 0
RS=$(run_dir solo)
expect_in "$RS/train/attempt-1/log" "gang of 1 ranks (CPUs, MPI), ZeRO stage 2"
expect_in "$RS/train/attempt-1/log" "device: cpu (device: auto, and 0 of the 1 ranks see a usable GPU (this one: "
losses "$RS" > solo.losses
same_losses one.losses solo.losses 1e-5
ls "$RS/train/checkpoints/"step-00000020/zero-rank-00000.safetensors >/dev/null ||
  fail "no sharded checkpoint in the gang of one: $(ls "$RS/train/checkpoints")"

# --- device: cuda with no GPU on any rank: every rank fails, saying so.
cat > cuda.yaml <<Y
dag: cuda
tasks:
  train: {stage: train, world_size: 2, launcher: mpirun, retries: 0, $ENV, with: {$MODEL, batch_size: 2, device: cuda}}
Y
run_dagrun run cuda.yaml --plain
expect_rc 1
expect_in "$T/out" "device: cuda in a gang of 2, but 0 of the 2 ranks see a usable GPU (this one: "
expect_in "$T/out" "use device: cpu or auto"
RC=$(run_dir cuda)
[ "$(task_field "$RC" train state)" = failed ] ||
  fail "device: cuda gang recorded '$(task_field "$RC" train state)', not failed"

# --- The loss-spike guard in a gang, inside each ZeRO step: a bad batch
# injected at step 16 (DAGRUN_FAULT_SPIKE_STEPS: the loss and norm the
# guard sees x20 and x100) is a spike, logged and counted; the steps
# before it train as the uninterrupted stage-2 run; skip leaves its
# update out (step 17 differs); lower_lr runs it and the rest at a tenth
# of the rate; rollback, which a gang cannot do inside a step, skips the
# update instead and says so at the start and at the spike.
for policy in skip lower_lr rollback; do
  cat > spike_$policy.yaml <<Y
dag: spike_$policy
tasks:
  train: {stage: train, world_size: 2, launcher: mpirun, $ENV, with: {${MODEL/spike_policy: none/spike_policy: $policy, spike_window: 5}, batch_size: 2, zero_stage: 2}}
Y
  DAGRUN_FAULT_SPIKE_STEPS=16 run_dagrun run spike_$policy.yaml --plain
  expect_rc 0
  R=$(run_dir spike_$policy)
  L="$R/train/attempt-1/log"
  expect_in "$L" "step 16: injected bad batch (DAGRUN_FAULT_SPIKE_STEPS)"
  expect_in "$L" "step 16: loss spike"
  case $policy in
  skip) expect_in "$L" "update skipped" ;;
  lower_lr) expect_in "$L" "learning rate lowered" ;;
  rollback)
    expect_in "$L" "spike_policy rollback: a gang skips the spike's update instead"
    expect_in "$L" "update skipped (a gang cannot reset or roll back" ;;
  esac
  /usr/bin/python3 - "$R/train" "$policy" z2.losses <<'P' || fail "spike in a gang, $policy: see above"
import json, sys
d, policy, ref = sys.argv[1:4]
s = json.load(open(d + "/out/summary.json"))
assert s["spike_events"] == 1 and s["steps"] == 20, s
want = {int(k): float(v) for k, v in (l.split() for l in open(ref))}
lr, loss, spike, events = {}, {}, {}, {}
for line in open(d + "/metrics.jsonl"):
    m = json.loads(line)
    {"lr": lr, "loss": loss, "spike": spike, "spike_events": events}.get(m["name"], {})[m["step"]] = m["value"]
assert list(spike) == [16], spike
assert events == {16: 1}, events
for k in range(1, 17):
    assert abs(loss[k] - want[k]) <= 1e-4 * abs(want[k]), (k, loss[k], want[k])
if policy == "lower_lr":
    assert lr[16] < 0.2 * lr[15] and lr[20] < 0.2 * lr[14], (lr[14], lr[15], lr[16], lr[20])
else:
    assert abs(loss[17] - want[17]) > 1e-4 * abs(want[17]), (loss[17], want[17])
    assert lr[16] > 0.5 * lr[15], (lr[15], lr[16])
print("spike in a gang, %s: step 16 loss %.4f, step 17 %.4f (uninterrupted %.4f)" % (policy, loss[16], loss[17], want[17]))
P
done

# --- A data mixture in a gang: each rank takes its half of the global
# batch the one process draws from the mixture (disjoint rows), so two
# ranks of 2 have the losses, the per-source tokens and the per-source
# validation losses of one process of 4 (source b's budget, 640 tokens,
# runs out mid-run).
MIX="${MODEL#data: \"$DATA\", }, data_mix: {a: \"$DATA\", b: \"$DATA\"}, data_weights: {a: 0.7, b: 0.3}, data_max_tokens: {b: 640}"
cat > mixone.yaml <<Y
dag: mixone
tasks:
  train: {stage: train, with: {$MIX, batch_size: 4}}
Y
cat > mixgang.yaml <<Y
dag: mixgang
tasks:
  train: {stage: train, world_size: 2, launcher: mpirun, $ENV, with: {$MIX, batch_size: 2}}
Y
run_dagrun run mixone.yaml --plain
expect_rc 0
run_dagrun run mixgang.yaml --plain
expect_rc 0
losses "$(run_dir mixone)" > mixone.losses
losses "$(run_dir mixgang)" > mixgang.losses
same_losses mixone.losses mixgang.losses 1e-4
"$PY" - "$(run_dir mixone)/train/out/summary.json" "$(run_dir mixgang)/train/out/summary.json" <<'P' || fail "mixture in a gang: see above"
import json, sys
a, b = (json.load(open(p))["data_mix"] for p in sys.argv[1:3])
# Each source's validation loss: the same windows, summed over the ranks
# in another order than one process sums them.
va, vb = ({k: v.pop("val_loss") for k, v in m.items()} for m in (a, b))
assert a == b and a["b"]["tokens"] == 640, (a, b)
assert va.keys() == {"a", "b"} and all(abs(va[k] - vb[k]) <= 1e-5 * va[k] for k in va), (va, vb)
P

# --- Refused: ranks that MPI did not start, and dropout in a gang.
gang_refused() { # NAME LAUNCHER EXTRA_PARAMS MESSAGE
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train: {stage: train, world_size: 2, launcher: $2, $ENV, with: {$MODEL, batch_size: 2 $3}}
Y
  run_dagrun run "$1.yaml" --plain
  expect_rc 1
  expect_in "$T/out" "$4"
}
gang_refused local local "" "set launcher: mpirun"
gang_refused gdrop mpirun ", dropout: 0.1" "dropout 0.1 in a gang"
pass
