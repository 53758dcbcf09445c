# The logits of a model trained on the GPU (train stage, device: cuda,
# 60 steps of gpt-tiny-shaped L2 H2 C64) and run on the GPU (gpt_cuda_check
# logits) against references that share nothing with dagrun, on its
# exported Hugging Face directory:
# - Hugging Face's GPT2LMHeadModel.from_pretrained (float32), where
#   transformers is installed;
# - GPT-2's forward in PyTorch float64 (tests/reference/check_export.py
#   logits), where torch is.
# Tolerance max|ours - ref| / max|ref| < 3e-2: the GPU computes in BF16
# (weights and activations rounded to 8 significant bits, 2^-9 = 2e-3
# relative each); a logit is a 64-term dot product of such values after
# two blocks of such ops, its error a few 1e-3 of the largest logit; the
# CPU engine's fp32 is held to 1e-4 by test_export.sh. Without torch it
# says so and exits 77 (skipped: run.sh reports it, and does not call
# the run a pass).
. "$(dirname "$0")/gpu_env.sh"

PY=${PYTHON:-$PY}
have_torch=0 have_hf=0
"$PY" -c 'import torch, numpy' 2>/dev/null && have_torch=1
"$PY" -c 'import transformers, torch' 2>/dev/null && have_hf=1
if [ $have_torch = 0 ]; then
  # Not a failure of dagrun: the reference is missing (as hf_check.py).
  echo "SKIPPED: $PY has no torch (nor transformers): no reference to compare with"
  rm -rf "$T"
  exit 77
fi
REF="$DAGRUN_SOURCE_DIR/tests/reference"
BIN="$DAGRUN_BUILD_DIR/bin"
DATA=$(make_token_data hf 320)
cat > hf.yaml <<Y
dag: hf
tasks:
  train: {stage: train, with: {data: "$DATA", n_layer: 2, n_head: 2, n_embd: 64, block_size: 64, batch_size: 8, steps: 60, lr: 0.003, eval_every: 0, samples: 0, device: cuda}}
  export: {stage: export, needs: [train], with: {model: "\${tasks.train.outputs.checkpoints}"}}
Y
run_dagrun run hf.yaml --plain
expect_rc 0
R=$(run_dir hf)
expect_in "$R/train/attempt-1/log" "device: cuda"
E32="$R/export/out/model"
printf 'the cat eats the fish. a dog trains on every epoch. our team writes the logs.' > prompt.txt
"$BIN/bpe_tool" encode "$E32/tokenizer.json" prompt.txt > prompt.ids || fail "encoding the prompt failed"
"$GPU_CHECK" logits "$E32" prompt.ids ours.bin > ours.txt || fail "gpt_cuda_check logits: $(cat ours.txt)"
"$PY" "$REF/check_export.py" logits "$E32" prompt.ids ours.bin 3e-2 > torch.log 2>&1 ||
  fail "GPU logits against PyTorch float64: $(cat torch.log)"
cat torch.log
if [ $have_hf = 1 ]; then
  "$PY" - "$E32" prompt.ids ours.bin <<'P' || fail "GPU logits against transformers (above)"
import sys
import numpy as np
import torch
from transformers import GPT2LMHeadModel
d, ids_path, ours_path = sys.argv[1:]
m = GPT2LMHeadModel.from_pretrained(d, torch_dtype=torch.float32).eval()
ids = [int(v) for v in open(ids_path).read().split()]
with torch.no_grad():
    ref = m(torch.tensor([ids])).logits[0].double().numpy()
V = m.config.vocab_size
ref = ref[:, :V]
ours = np.fromfile(ours_path, dtype=np.float32).astype(np.float64).reshape(len(ids), V)
rel = float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))
print("transformers GPT2LMHeadModel: %d tokens x %d, max|ours-ref|/max|ref| = %.3e" % (len(ids), V, rel))
assert rel < 3e-2, rel
# and the same next token nearly everywhere
agree = float(np.mean(ours.argmax(1) == ref.argmax(1)))
print("argmax agrees at %.1f%% of positions" % (100 * agree))
assert agree >= 0.8, agree
P
else
  echo "transformers not installed: compared with PyTorch float64 only"
fi
pass
