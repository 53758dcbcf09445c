# Pipeline parallel on GPU ranks (device: cuda, gpu/pipeline over the CUDA
# engine) through the train stage: pipeline_parallel 2 on a gang of 2
# ranks under mpirun (one GPU a rank), a 4-layer GPT (width 32), 20
# steps of grad_accum 4 micro-batches of batch_size 2, deterministic:
# - 1f1b and gpipe: the log's layout line says "GPUs (BF16 streams)",
#   summary.json's device is cuda, and every step's loss is within 3e-4
#   (relative) of one GPU process's with the same batch_size and
#   grad_accum, the final weights within 5e-3 of the largest weight.
#   Why not closer: the stages add the one GPU's bits into every layer
#   (gpt_cuda_check stages), but the tied embeddings' two parts and the
#   clipping norm's stage sums are added in another order; those last
#   bits flip a few weights' BF16 copies, and the two runs drift apart
#   by BF16 noise from then on (on the emulator: 2.6e-5 at worst of the
#   losses, 7.7e-4 of the weights). A stage that sends the wrong tensor
#   back (its received stream instead of its input's gradient) is off by
#   1.2e-2 at step 2.
# - 2 replicas x 2 stages on 4 ranks (zero_stage: 0) against one
#   process of batch_size 4 (below, with its bounds); the same at
#   zero_stage 1 (ZeRO over the stage groups: below), whose checkpoint
#   one process resumes; and at zero_stage 3 (the stage's parameters
#   sharded too: below), its device bytes between steps below zero_stage
#   1's, its checkpoint resumed by one process and one process's by it.
# - One GPU process resumes the 1f1b run's step-10 checkpoint (rank 0's
#   gather, one process's format): its steps 11-20 within 1e-4 of the
#   pipeline's (on the emulator the same bits: no BF16 copy flipped).
# About 110-135 s on the emulator (2 cores).
# On a GPU machine it needs two GPUs (NCCL puts no two ranks of a
# communicator on one GPU), and the comm layer's NCCL point to point and
# split; the emulator (GPU_STAGE_DIR) runs it on the CPU.
. "$(dirname "$0")/gpu_env.sh"
if [ -z "${GPU_STAGE_DIR:-}" ] && [ "$(nvidia-smi -L | grep -c '^GPU ')" -lt 2 ]; then
  echo "SKIPPED: pipeline_parallel 2 on GPU ranks needs two GPUs"
  rm -rf "$T"
  exit 77
fi
use_train_gang

DATA=$(make_token_data pipe-gpu 320)
MODEL="data: \"$DATA\", n_layer: 4, n_head: 2, n_embd: 32, block_size: 32, steps: 20, lr: 0.003, warmup: 2, eval_every: 10, eval_batches: 2, samples: 0, spike_policy: none, batch_size: 2, grad_accum: 4, checkpoint_every: 10, seed: 7, deterministic: true, device: cuda"

one_process one "$MODEL"
for sched in 1f1b gpipe; do
  gang_dag p$sched "$MODEL, pipeline_parallel: 2, pipeline_schedule: $sched"
  expect_rc 0
  R=$(run_dir p$sched)
  expect_in "$R/train/attempt-1/log" "stage 0 of 2 (layers 0-1, embeddings), schedule $sched"
  expect_in "$R/train/attempt-1/log" "sequences); GPUs (BF16 streams), NCCL"
  "$PY" -c "import json, sys; s = json.load(open(sys.argv[1])); assert s['device'] == 'cuda' and s['pipeline_parallel'] == 2, s" \
    "$R/train/out/summary.json" || fail "p$sched summary: $(cat "$R/train/out/summary.json")"
  losses "$R" > p$sched.losses
  same_losses one.losses p$sched.losses 3e-4
  same_weights "$R1/train/checkpoints/step-00000020/model.safetensors" \
    "$R/train/checkpoints/step-00000020/model.safetensors" 5e-3
done

# zero_gang NAME WITH STAGE LIKE: a gang of 2 replicas x 2 stages (WITH
# on 4 ranks) at zero_stage STAGE on the GPUs: its losses within 1e-4
# of LIKE's and 3e-4 of one4's (one process of batch_size 4), its final
# weights within 3e-2 of one4's; its step-10 checkpoint resumed by one
# process and one4's by the gang (NAME"o", NAME"r"), within 3e-4. RG:
# its run directory.
zero_gang() {
  gang_dag "$1" "$2" 4
  expect_rc 0
  RG=$(run_dir "$1")
  expect_in "$RG/train/attempt-1/log" "sequences); GPUs (BF16 streams), NCCL"
  expect_in "$RG/train/attempt-1/log" "between steps (zero_stage $3 over 2 data-parallel replicas)"
  losses "$RG" > "$1.losses"
  same_losses "$4.losses" "$1.losses" 1e-4
  same_losses one4.losses "$1.losses" 3e-4
  same_weights "$R1/train/checkpoints/step-00000020/model.safetensors" \
    "$RG/train/checkpoints/step-00000020/model.safetensors" 3e-2
  printf 'dag: %so\ntasks:\n  train: {stage: train, with: {%s, resume: "%s"}}\n' \
    "$1" "${MODEL/batch_size: 2/batch_size: 4}" "$RG/train/checkpoints/step-00000010" > "$1o.yaml"
  run_dagrun run "$1o.yaml" --plain
  resumed_as "$1" "$1o" "resumed from $RG/train/checkpoints/step-00000010 at step 10" 3e-4
  gang_dag "$1r" "$2, resume: \"$R1/train/checkpoints/step-00000010\"" 4
  resumed_as one4 "$1r" "resumed from $R1/train/checkpoints/step-00000010 at step 10" 3e-4
}

# Two replicas of two stages on 4 ranks (data parallel beside the
# pipeline: the stage groups' gradients averaged over NCCL, the loss over
# MPI): one GPU process of batch_size 4 with the same grad_accum, the
# losses within the same 3e-4 (measured 3.4e-5), the final weights within
# 3e-2 of the largest (measured 1.1e-2). Looser than the pipeline
# alone's: each replica's backward sums its 2 rows where one process sums
# 4 (the bias and norm gradients' row sums in another order), so the
# gradients differ by BF16 noise from step 1, not by last bits, and a
# weight whose gradient is within that noise of zero moves by lr a step
# either way (20 x 0.003 = 6e-2 at most). On a GPU machine it needs four
# GPUs.
ngpu=4
[ -n "${GPU_STAGE_DIR:-}" ] || ngpu=$(nvidia-smi -L | grep -c '^GPU ')
if [ "$ngpu" -ge 4 ]; then
  ONE=$R1
  one_process one4 "${MODEL/batch_size: 2/batch_size: 4}"
  gang_dag dp "$MODEL, pipeline_parallel: 2, zero_stage: 0" 4
  expect_rc 0
  R=$(run_dir dp)
  expect_in "$R/train/attempt-1/log" "data-parallel replica 0 of 2 (global batch 2 x 2 x 4 = 16 sequences); GPUs (BF16 streams), NCCL"
  losses "$R" > dp.losses
  same_losses one4.losses dp.losses 3e-4
  same_weights "$R1/train/checkpoints/step-00000020/model.safetensors" \
    "$R/train/checkpoints/step-00000020/model.safetensors" 3e-2
  # ZeRO-1 over the stage groups (each of a stage's 2 ranks keeps the
  # master weights and AdamW moments of half the stage's floats, the
  # gradients reduce-scattered, the BF16 slices all-gathered): the
  # losses within 3e-4 of one process's too (measured 2.8e-5), and of
  # zero_stage 0's within 1e-4 (measured 2.5e-5: the same gradients but
  # for the order of the tied embeddings' and the clipping norm's sums,
  # whose last bits flip a few BF16 weights; a Llama with an untied head
  # gives zero_stage 0's bits), the weights within 3e-2 of one
  # process's. Each rank's optimizer state (summary.json's formula) at
  # most half of zero_stage 0's (the last stage's tied copy has none).
  # With device: auto and the default zero_stage (1): the GPUs taken.
  # One process of batch_size 4 resumes the ZeRO gang's step-10
  # checkpoint (the slices gathered to rank 0): its steps 11-20 within
  # the same 3e-4 of the gang's. And the other way: the ZeRO gang
  # resumes one process's step-10 checkpoint (each rank takes its slice
  # of the state): its steps 11-20 within 3e-4 of one process's.
  zero_gang dz "${MODEL/device: cuda/device: auto}, pipeline_parallel: 2" 1 dp
  RZ=$RG
  optim_halved dz "$R" "$RZ"
  # ZeRO-3 over the stage groups: between steps each rank keeps its
  # slice of its stage's master weights, BF16 copy and reduced gradient
  # alone (gpu/pipeline/pipeline_cuda.c); the stage's BF16 parameters
  # and gradients are made for the step from the slices and freed after
  # the reduce-scatter. The losses within zero_stage 1's bounds (1e-4
  # of it: measured the same bits; 3e-4 of one process), the weights
  # within 3e-2 of one process's, the two resumes as zero_stage 1's;
  # every rank's device bytes of parameters and of gradients between
  # steps below zero_stage 1's (summary.json's between_steps).
  zero_gang dz3 "$MODEL, pipeline_parallel: 2, zero_stage: 3" 3 dz
  between_below dz3 "$RZ" "$RG"
  R1=$ONE
else
  echo "SKIPPED: 2 replicas x 2 stages (needs four GPUs; $ngpu here)"
fi

P1=$(run_dir p1f1b)
printf 'dag: p2o\ntasks:\n  train: {stage: train, with: {%s, resume: "%s"}}\n' \
  "$MODEL" "$P1/train/checkpoints/step-00000010" > p2o.yaml
run_dagrun run p2o.yaml --plain
resumed_as p1f1b p2o "resumed from $P1/train/checkpoints/step-00000010 at step 10" 1e-4
pass
