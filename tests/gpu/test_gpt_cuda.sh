# The CUDA backend (gpu/cuda/gpt_cuda.h) against the CPU engine, through
# tests/gpu/gpt_cuda_check.c (which states and justifies the tolerances):
# - step: one training step from the same weights and batch, for AdamW and
#   Lion: the loss, the grad norm, every tensor's gradient, the updated
#   master weights and moments; weight decay alone (zero gradients) is
#   bitwise the CPU's on every tensor; upload/download are exact; bad ids and an
#   oversized batch are refused;
# - recompute: none, gelu and block give the same loss and gradients, each
#   with less device memory than the one before, as estimated; in each,
#   gradient accumulation (2 x scale 0.5) and a smaller micro-batch than
#   the model was made for match the CPU, and scale 0 adds nothing;
# - oom: gpt2-350M at 256 x 1024 fails with the clear message (naming the
#   batch and what to change), and the device still works after it;
# - llama: step's checks on two Llama shapes (GQA 4 on 2 heads of 32 with
#   an untied head; 4 on 1 of 24, the FP32 attention, tied), and two
#   deterministic runs bitwise equal;
# - llama-recompute: recompute's checks on the first Llama shape;
# - stages: pipeline stages (gpt_cuda_set_stage) chained, 2 and 3 of a
#   GPT-2 and 2 of each Llama shape, give the whole model's losses and
#   gradients bitwise (a tied head's embeddings to float rounding);
# - window: a master window of a shard of pieces (a pipeline stage's
#   ZeRO-1 slice) updates its part to the unwindowed shard's bits.
. "$(dirname "$0")/gpu_env.sh"

for cmd in step recompute oom llama llama-recompute stages window; do
  "$GPU_CHECK" $cmd >"$T/$cmd.out" 2>&1 || fail "gpt_cuda_check $cmd:
$(cat "$T/$cmd.out")"
  cat "$T/$cmd.out"
  expect_in "$T/$cmd.out" "$cmd: ok"
done
pass
