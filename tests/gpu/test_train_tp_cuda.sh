# tensor_parallel on GPU ranks (gpu/tensor/tensor_cuda.h) in the train
# stage: a gang of 2 ranks under mpirun, one GPU a rank, NCCL between
# them, a 2-layer GPT-2 (width 32, 4 heads) on a vocabulary of 300 ids
# (padded to 320: rank 1's rows of wte hold the 20 padding rows),
# GPU_TEST_STEPS steps (10 unless set; an even number), against one GPU
# process of the same batch:
# - every step's loss within 2e-3 (relative) of the one GPU's: both are
#   BF16; the gang also rounds each row-split product's partial output
#   to BF16 before the sum and sums the softmax's denominator in another
#   order (gpt_cuda_emulated_tensor_2ranks measures the engine alone);
#   without the activations' all-reduces the losses are 4e-3 off at the
#   first step and more after;
# - the final weights within 0.1 of the largest weight: AdamW moves each
#   weight about lr a step whatever its gradient's size, so an element
#   whose gradient is within BF16 noise of zero may go the other way
#   (2 lr a step apart at worst);
# - the log's layout line and device, the summary's device cuda and
#   tensor_parallel 2;
# - the gang's checkpoint of step N/2 resumes as one GPU process with
#   the gang's losses of the steps after (same bound);
# - the same for a Llama (GQA, an untied head) against one GPU;
# - deterministic: true: two gangs' losses bitwise equal (on the
#   emulator the gang without it gave equal bits too: its float atomics
#   land in one order there; a GPU's do not);
# - two replicas of the tensor group on 4 ranks (data parallel beside
#   it, on GPUs) at zero_stage 0 and, with device: auto, the default
#   zero_stage 1 (ZeRO-1 over the replicas: below), against one GPU
#   process of batch_size 4; one GPU process resumes the ZeRO gang's
#   checkpoint, and the ZeRO gang one process's;
# - T=2 x P=2 on 4 ranks (each tensor group a pipeline stage, each rank
#   its stage's part of its shard) with grad_accum 4, 1f1b and gpipe,
#   against the tensor group alone with the same grad_accum, and the
#   Llama's; one GPU process resumes its checkpoint; and 2 replicas of
#   it on 8 ranks at zero_stage 1 against it at batch_size 4, and at
#   zero_stage 3 against zero_stage 1 where the train stage runs it;
# - the replicas at zero_stage 2 and 3 against zero_stage 1 (below),
#   the memory between steps lower at each, stage 3's checkpoint resumed
#   by one GPU process and one process's by the stage-3 gang.
# A machine with one GPU skips it (NCCL wants a GPU a rank); the
# emulator's ctest (gpu/train_tp_cuda_emulated) has as many as asked.
. "$(dirname "$0")/gpu_env.sh"
command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup.sh installs openmpi-bin)"
if [ -z "${GPU_STAGE_DIR:-}" ] &&
  [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
  echo "skip: tensor_parallel 2 on GPUs needs 2 GPUs"
  exit 77
fi
use_train_gang

# gang_like NAME WITH WORLD LINE REF LTOL WREF WTOL: gang_dag NAME (WITH
# on WORLD ranks) succeeds, its log says LINE, its losses are within
# LTOL of REF.losses and its final weights within WTOL of run WREF's.
gang_like() {
  gang_dag "$1" "$2" "$3"
  expect_rc 0
  expect_in "$(run_dir "$1")/train/attempt-1/log" "$4"
  losses "$(run_dir "$1")" > "$1.losses"
  same_losses "$5.losses" "$1.losses" "$6"
  same_weights "$7/train/checkpoints/$CK/model.safetensors" \
    "$(run_dir "$1")/train/checkpoints/$CK/model.safetensors" "$8"
}

# one4_resumes NAME FROM TOL [EXTRA]: one GPU process of batch_size 4
# (EXTRA: more params) resumes run FROM's step-H checkpoint: it says so,
# and its losses are within TOL of FROM.losses' after step H.
one4_resumes() {
  local c2=$COMMON from
  from=$(run_dir "$2")
  COMMON=${c2/batch_size: 2/batch_size: 4}
  gpu_train "$1" "${4:+$4, }device: cuda, resume: \"$from/train/checkpoints/$HK\""
  COMMON=$c2
  expect_in "$(run_dir "$1")/train/attempt-1/log" "resumed from $from/train/checkpoints/$HK at step $H"
  losses "$(run_dir "$1")" > "$1.losses"
  awk -v h="$H" '$1 > h' "$2.losses" > "$2.tail"
  same_losses "$2.tail" "$1.losses" "$3"
}

# tz_memory R1 R2 R3: the run directories of one 4-rank GPU layout at
# zero_stage 1, 2 and 3 (summary.json's memory.ranks, device bytes):
# between steps each rank's gradients at 2 below 1's (the slice's alone,
# not the part's whole array) and its parameters at 3 below 2's (the
# slice's master weights and BF16 copy, not the part's whole BF16 copy),
# the gradients at 3 no more than 2's; inside the step (peak) both
# above their between steps at 3, the gradients at 2.
tz_memory() {
  "$PY" - "$1/train/out/summary.json" "$2/train/out/summary.json" "$3/train/out/summary.json" <<'P' ||
import json, sys
s = [json.load(open(f)) for f in sys.argv[1:]]
assert [x["zero_stage"] for x in s] == [1, 2, 3] and s[2]["device"] == "cuda", s[2]
r1, r2, r3 = (x["memory"]["ranks"] for x in s)
assert len(r1) == len(r2) == len(r3) == 4, (r1, r2, r3)
for a, b, c in zip(r1, r2, r3):
    A, B, C = a["between_steps"], b["between_steps"], c["between_steps"]
    assert B["grads"] < A["grads"] and B["params"] == A["params"], (a, b)
    assert C["params"] < B["params"] and C["grads"] <= B["grads"], (b, c)
    assert B["grads"] < b["peak"]["grads"], b
    assert C["params"] < c["peak"]["params"] and C["grads"] < c["peak"]["grads"], c
    print("rank %d between steps at zero_stage 1, 2, 3: params %d %d %d, grads %d %d %d (in the step at 3: %d, %d)" % (
        c["rank"], A["params"], B["params"], C["params"], A["grads"], B["grads"],
        C["grads"], c["peak"]["params"], c["peak"]["grads"]))
P
    fail "zero_stage 2-3 on GPU tensor ranks hold no less between steps"
}

gpu_steps 10 4
DATA=$(make_token_data tpgpu 300)
COMMON="data: \"$DATA\", n_layer: 2, n_head: 4, n_embd: 32, block_size: 32, seq_len: 32, batch_size: 2, steps: $N, lr: 0.003, warmup: 2, eval_every: 0, samples: 0, spike_policy: none, checkpoint_every: $H, seed: 7$EVAL"

gpu_train one "device: cuda"
R1=$(run_dir one)
losses "$R1" > one.losses

gang_dag t2 "$COMMON, tensor_parallel: 2, device: cuda"
expect_rc 0
R=$(run_dir t2)
expect_in "$R/train/attempt-1/log" "tensor parallel: rank 0 is shard 0 of 2 (heads 0-1 of 4, MLP columns 0-63 of 128, vocabulary rows 0-159 of 320;"
expect_in "$R/train/attempt-1/log" "device: cuda: one GPU a rank, NCCL between them"
"$PY" -c "import json, sys; s = json.load(open(sys.argv[1])); assert (s['device'], s['tensor_parallel'], s['world_size']) == ('cuda', 2, 2), s" \
  "$R/train/out/summary.json" || fail "t2 summary: $(cat "$R/train/out/summary.json")"
losses "$R" > t2.losses
[ "$(wc -l < t2.losses)" -eq "$N" ] || fail "t2: $(cat t2.losses)"
same_losses one.losses t2.losses 5e-4
CK=$(printf 'step-%08d' "$N")
same_weights "$R1/train/checkpoints/$CK/model.safetensors" \
  "$R/train/checkpoints/$CK/model.safetensors" 0.05

# The gang's checkpoint of step H resumes as one GPU process.
HK=$(printf 'step-%08d' "$H")
gpu_train t2one "device: cuda, resume: \"$R/train/checkpoints/$HK\""
expect_in "$(run_dir t2one)/train/attempt-1/log" "resumed from $R/train/checkpoints/$HK at step $H"
losses "$(run_dir t2one)" > t2one.losses
awk -v h="$H" '$1 > h' t2.losses > t2.tail
same_losses t2.tail t2one.losses 5e-4

# A Llama (GQA: 4 query heads on 2 key/value heads, an untied head):
# tensor_parallel 2 against one GPU, the same bounds.
LDATA=$(make_token_data tpllama 320)
LCOMMON="data: \"$LDATA\", model: llama-tiny, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 64, intermediate_size: 128, head: untied, block_size: 32, seq_len: 32, batch_size: 2, steps: $N, lr: 0.003, warmup: 2, eval_every: 0, samples: 0, spike_policy: none, checkpoint_every: $H, seed: 7$EVAL"
printf 'dag: lone\ntasks:\n  train: {stage: train, with: {%s, device: cuda}}\n' "$LCOMMON" > lone.yaml
run_dagrun run lone.yaml --plain --no-cache
expect_rc 0
losses "$(run_dir lone)" > lone.losses
gang_dag lt2 "$LCOMMON, tensor_parallel: 2, device: cuda"
expect_rc 0
losses "$(run_dir lt2)" > lt2.losses
same_losses lone.losses lt2.losses 5e-4
same_weights "$(run_dir lone)/train/checkpoints/$CK/model.safetensors" \
  "$(run_dir lt2)/train/checkpoints/$CK/model.safetensors" 0.05

# zero_stage 3 with one replica: nothing to shard over, the group's
# losses (as on CPU ranks; it was refused mid-start on GPU ranks).
gang_dag t2z3 "$COMMON, tensor_parallel: 2, zero_stage: 3, device: cuda"
expect_rc 0
losses "$(run_dir t2z3)" > t2z3.losses
same_losses t2.losses t2z3.losses 5e-4

# deterministic: true: two runs of the gang (4 steps), the same bits
# (the emulator runs their threads in another order each call).
for d in det1 det2; do
  printf 'dag: %s\ntasks:\n  train:\n    stage: train\n    world_size: 2\n    launcher: mpirun\n    %s\n    with: {%s}\n' \
    "$d" "$GANG_ENV" "${COMMON/steps: $N/steps: 4}, tensor_parallel: 2, device: cuda, deterministic: true" > "$d.yaml"
  run_dagrun run "$d.yaml" --plain --no-cache
  expect_rc 0
  losses "$(run_dir "$d")" > "$d.losses"
done
[ "$(wc -l < det1.losses)" -eq 4 ] && cmp -s det1.losses det2.losses ||
  fail "deterministic: the two gangs' losses differ: $(diff det1.losses det2.losses | head)"

# Two replicas of the tensor group of 2 on 4 ranks: the shards'
# gradients averaged over NCCL across the replicas, against one tensor
# group of batch_size 4 (each replica trains 2 of its rows): the losses
# within 1e-4 (relative; measured 9.6e-6: each replica's backward sums
# its 2 rows where the group sums 4, the bias and norm gradients' row
# sums in another order); without the replicas' mean 2e-3 off at step 2.
# And against one GPU process of batch_size 4: the losses within 1e-3,
# the final weights within 0.1 of the largest (measured 6.3e-4 and
# 1.4e-2: the tensor group's own BF16 drift at this batch, which the
# group of batch_size 4 shows as well).
# Then ZeRO-1 over the replicas with device: auto and the default
# zero_stage (1): the GPUs taken; each rank keeps the master weights and
# AdamW moments of half its shard (summary.json's optimizer bytes at most
# half of zero_stage 0's), the gradients reduce-scattered, the BF16
# slices all-gathered; the losses within 1e-4 of zero_stage 0's (the
# same gradients, the clipping norm summed in another order), the
# weights within 0.1 of one process's. One GPU process of batch_size 4
# resumes its step-H checkpoint (the slices gathered to rank 0), and the
# ZeRO gang one process's (each rank takes its slice): the steps after
# within 1e-3 of the run they continue.
ngpu=8 # the emulator: as many as asked
[ -n "${GPU_STAGE_DIR:-}" ] || ngpu=$(nvidia-smi -L | grep -c '^GPU ')
if [ "$ngpu" -ge 4 ]; then
  C2=$COMMON
  COMMON=${C2/batch_size: 2/batch_size: 4}
  gpu_train one4 "device: cuda"
  COMMON=$C2
  R4=$(run_dir one4)
  losses "$R4" > one4.losses
  gang_dag dt0 "$COMMON, tensor_parallel: 2, zero_stage: 0, device: cuda" 4
  expect_rc 0
  R=$(run_dir dt0)
  expect_in "$R/train/attempt-1/log" "data-parallel replica 0 of 2 (global batch 2 x 2 x 1 = 4 sequences)"
  expect_in "$R/train/attempt-1/log" "device: cuda: one GPU a rank, NCCL between them"
  losses "$R" > dt0.losses
  gang_dag t4 "${COMMON/batch_size: 2/batch_size: 4}, tensor_parallel: 2, device: cuda"
  expect_rc 0
  losses "$(run_dir t4)" > t4.losses
  same_losses t4.losses dt0.losses 1e-4
  same_losses one4.losses dt0.losses 1e-3
  same_weights "$R4/train/checkpoints/$CK/model.safetensors" \
    "$R/train/checkpoints/$CK/model.safetensors" 0.1
  gang_dag dtz "$COMMON, tensor_parallel: 2, device: auto" 4
  expect_rc 0
  RZ=$(run_dir dtz)
  expect_in "$RZ/train/attempt-1/log" "device: cuda: one GPU a rank, NCCL between them"
  expect_in "$RZ/train/attempt-1/log" "of optimizer state between steps (zero_stage 1 over 2 data-parallel replicas)"
  losses "$RZ" > dtz.losses
  same_losses dt0.losses dtz.losses 1e-4
  same_losses one4.losses dtz.losses 1e-3
  same_weights "$R4/train/checkpoints/$CK/model.safetensors" \
    "$RZ/train/checkpoints/$CK/model.safetensors" 0.1
  optim_halved dtz "$R" "$RZ"
  awk -v h="$H" '$1 > h' one4.losses > one4.tail
  one4_resumes dtzone dtz 1e-3
  gang_dag dtzr "$COMMON, tensor_parallel: 2, zero_stage: 1, device: cuda, resume: \"$R4/train/checkpoints/$HK\"" 4
  expect_rc 0
  expect_in "$(run_dir dtzr)/train/attempt-1/log" "resumed from $R4/train/checkpoints/$HK at step $H"
  losses "$(run_dir dtzr)" > dtzr.losses
  same_losses one4.tail dtzr.losses 1e-3
  # zero_stage 2 and 3 on the same layout: at 2 the engine's gradient
  # array is its slice's (the passes add into a whole array made for the
  # step, freed after the reduce-scatter); at 3 the master weights, BF16
  # copy and gradient are the slice's alone between steps, the whole BF16
  # parameters all-gathered into an array made for the step. The losses
  # within 1e-4 of zero_stage 1's (the same gradients and updates),
  # the weights within 0.1 of one process's; between steps (summary.json's
  # between_steps) each rank's gradient bytes at 2 below 1's and its
  # parameter bytes at 3 below 2's, inside the step (peak) more than
  # between (tz_memory). Stage 3's step-H checkpoint resumed by one GPU
  # process of batch_size 4, and one process's by the stage-3 gang: the
  # steps after within 1e-3 of the run each continues.
  for z in 2 3; do
    gang_like dtz$z "$COMMON, tensor_parallel: 2, zero_stage: $z, device: cuda" 4 \
      "between steps (zero_stage $z over 2 data-parallel replicas)" dtz 1e-4 "$R4" 0.1
  done
  tz_memory "$RZ" "$(run_dir dtz2)" "$(run_dir dtz3)"
  one4_resumes dtz3one dtz3 1e-3
  gang_dag dtz3r "$COMMON, tensor_parallel: 2, zero_stage: 3, device: cuda, resume: \"$R4/train/checkpoints/$HK\"" 4
  expect_rc 0
  expect_in "$(run_dir dtz3r)/train/attempt-1/log" "resumed from $R4/train/checkpoints/$HK at step $H"
  losses "$(run_dir dtz3r)" > dtz3r.losses
  same_losses one4.tail dtz3r.losses 1e-3
  # T=2 x P=2: each stage's tensor group runs its layer's shards (one
  # activation slot per micro-batch in flight), the BF16 stream between
  # the stages over NCCL, the stages' gradients summed; against the
  # tensor group alone with grad_accum 4: the losses within 1e-4
  # (relative), the weights within 0.02 of the largest (the tied
  # embedding's lookup and head gradients are added in another order:
  # last bits, which on a GPU's unordered atomics can flip a few BF16
  # weights; on the emulator the same losses, weights within 1.1e-8). A
  # stage that sends back its received stream instead of its input's
  # gradient is 1.2e-2 off at step 2, stages whose gradients are not
  # summed 1e-3.
  # Its step-H checkpoint (the first stage's group's shards) resumes as
  # one GPU process with its losses (the same bound as the group's).
  gang_dag ta "$COMMON, grad_accum: 4, tensor_parallel: 2, device: cuda"
  expect_rc 0
  losses "$(run_dir ta)" > ta.losses
  for sched in 1f1b gpipe; do
    gang_like tp$sched "$COMMON, grad_accum: 4, tensor_parallel: 2, pipeline_parallel: 2, pipeline_schedule: $sched, device: cuda" 4 \
      "tensor parallel: rank 0 is shard 0 of 2 of stage 0 of 2 (layers 0-0, $sched schedule" \
      ta 1e-4 "$(run_dir ta)" 0.02
    expect_in "$(run_dir tp$sched)/train/attempt-1/log" "device: cuda: one GPU a rank, NCCL between them"
  done
  # Each stage keeps its part of the shard alone: every rank's parameter
  # bytes on the device (summary.json's memory formula) below the
  # tensor group's without stages (both stages keep the tied embedding's
  # shard, the bulk of this small model; a layer's shard is the rest).
  stage_parts_smaller tp1f1b "$(run_dir ta)" "$(run_dir tp1f1b)"
  # The Llama (an untied head: on the last stage alone, no tied sum) as
  # T=2 x P=2 against its tensor group alone: the losses within 5e-4, the
  # weights within 0.05, the group's own bounds against one GPU (measured
  # 1.1e-4: the clipping norm is the stages' sums added, whose last bits
  # differ from the group's one sum; a BF16 weight that flips then drifts).
  gang_dag ltp "$LCOMMON, tensor_parallel: 2, pipeline_parallel: 2, device: cuda" 4
  expect_rc 0
  losses "$(run_dir ltp)" > ltp.losses
  same_losses lt2.losses ltp.losses 5e-4
  same_weights "$(run_dir lt2)/train/checkpoints/$CK/model.safetensors" \
    "$(run_dir ltp)/train/checkpoints/$CK/model.safetensors" 0.05
  # All three: 2 replicas of T=2 x P=2 on 8 ranks at zero_stage 1 (each
  # rank's ZeRO slice is of its stage's part; a checkpoint pulls the
  # slices over the replicas, then adds the stages' parts) against the
  # T x P gang of batch_size 4: the losses within 1e-4 (as D x T against
  # its group above), the weights within 0.02; its checkpoint resumed by
  # one GPU process of batch_size 4 within 5e-4 of the steps after.
  if [ "$ngpu" -ge 8 ]; then
    gang_dag tp4 "${COMMON/batch_size: 2/batch_size: 4}, grad_accum: 4, tensor_parallel: 2, pipeline_parallel: 2, device: cuda" 4
    expect_rc 0
    losses "$(run_dir tp4)" > tp4.losses
    gang_dag dtp "$COMMON, grad_accum: 4, tensor_parallel: 2, pipeline_parallel: 2, zero_stage: 1, device: cuda" 8
    expect_rc 0
    R=$(run_dir dtp)
    expect_in "$R/train/attempt-1/log" "of stage 0 of 2 (layers 0-0, 1f1b schedule"
    expect_in "$R/train/attempt-1/log" "data-parallel replica 0 of 2"
    expect_in "$R/train/attempt-1/log" "(zero_stage 1 over 2 data-parallel replicas)"
    losses "$R" > dtp.losses
    same_losses tp4.losses dtp.losses 1e-4
    same_weights "$(run_dir tp4)/train/checkpoints/$CK/model.safetensors" \
      "$R/train/checkpoints/$CK/model.safetensors" 0.02
    one4_resumes dtpone dtp 5e-4 "grad_accum: 4"
    # And at zero_stage 3 (each rank's slice of its stage's part; the
    # part's whole arrays made for the step): zero_stage 1's losses
    # within 1e-4 (measured the same bits), every rank's parameters and
    # gradients between steps below zero_stage 1's (between_below), the
    # final weights zero_stage 1's within 1e-6 of the largest (measured
    # the same bits), its checkpoint resumed by one GPU process as
    # zero_stage 1's.
    gang_dag dtpz3 "$COMMON, grad_accum: 4, tensor_parallel: 2, pipeline_parallel: 2, zero_stage: 3, device: cuda" 8
    expect_rc 0
    losses "$(run_dir dtpz3)" > dtpz3.losses
    same_losses dtp.losses dtpz3.losses 1e-4
    same_weights "$R/train/checkpoints/$CK/model.safetensors" \
      "$(run_dir dtpz3)/train/checkpoints/$CK/model.safetensors" 1e-6
    between_below dtpz3 "$R" "$(run_dir dtpz3)"
    one4_resumes dtpz3one dtpz3 5e-4 "grad_accum: 4"
  else
    echo "SKIPPED: 2 replicas x 2 stages x tensor_parallel 2 (needs eight GPUs; $ngpu here)"
  fi
  # The clipping norm counts the tied embedding once (the first stage's
  # copy): every step's grad_norm within 1e-4 of the group's alone
  # (counted twice, the clipping scales the update otherwise: the losses
  # above are 3.1e-4 off by step 4).
  for x in ta tp1f1b; do
    "$PY" -c 'import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m["name"] == "grad_norm": print(m["step"], repr(m["value"]))' \
      "$(run_dir $x)/train/metrics.jsonl" > $x.norms
  done
  same_losses ta.norms tp1f1b.norms 1e-4
  awk -v h="$H" '$1 > h' tp1f1b.losses > tp1f1b.tail
  # A T x P gang resumes its own step-H checkpoint (each stage takes its
  # part of the shards and of their optimizer state, the last its copy
  # of the tied embedding): the steps after within 1e-4 of the run's.
  gang_dag tpr "$COMMON, grad_accum: 4, tensor_parallel: 2, pipeline_parallel: 2, device: cuda, resume: \"$(run_dir tp1f1b)/train/checkpoints/$HK\"" 4
  expect_rc 0
  expect_in "$(run_dir tpr)/train/attempt-1/log" "resumed from $(run_dir tp1f1b)/train/checkpoints/$HK at step $H"
  losses "$(run_dir tpr)" > tpr.losses
  same_losses tp1f1b.tail tpr.losses 1e-4
  gpu_train tpone "grad_accum: 4, device: cuda, resume: \"$(run_dir tp1f1b)/train/checkpoints/$HK\""
  expect_in "$(run_dir tpone)/train/attempt-1/log" "resumed from $(run_dir tp1f1b)/train/checkpoints/$HK at step $H"
  losses "$(run_dir tpone)" > tpone.losses
  same_losses tp1f1b.tail tpone.losses 5e-4
else
  echo "SKIPPED: 2 replicas x tensor_parallel 2 and 2 stages x tensor_parallel 2 (need four GPUs; $ngpu here)"
fi
pass
