#!/usr/bin/env bash
# The CPU engine's Llama family against Llama written in plain PyTorch
# (tests/reference/torch_llama.py, float64), for the shapes of
# tests/reference/llama_shape.h (L2 H4, context 16, vocab 67 padded to
# 128, RoPE theta 500, SwiGLU width 12 HS + 2):
#   one forward and backward (gpt_dump, perturbed weights, B3 T16): the
#   logits and the loss within 1e-5 relative, every parameter's gradient
#   within 1e-4 of that tensor's largest reference value, for grouped-query
#   attention with 1 and 2 key/value heads and plain multi-head (4), head
#   sizes 6 and 10, the head tied and untied;
#   ten AdamW steps (train_dump: clipping at 1.2, warmup + cosine): per
#   step the loss and grad norm within 1e-4, every tensor after the last
#   step within 1e-4, the padding rows of the embedding and lm_head zero.
. "$(dirname "$0")/lib.sh"

DUMP="$DAGRUN_BUILD_DIR/bin/gpt_dump"
TRAIN="$DAGRUN_BUILD_DIR/bin/train_dump"
REF="$DAGRUN_SOURCE_DIR/tests/reference"
[ -x "$DUMP" ] || fail "no $DUMP (build the gpt_dump target)"
[ -x "$TRAIN" ] || fail "no $TRAIN (build the train_dump target)"
PY=/usr/bin/python3
"$PY" -c 'import torch, numpy' 2>/dev/null \
  || fail "$PY cannot import torch and numpy (Debian: python3-torch python3-numpy)"

# KV HS UNTIED: tensors = embedding + 9 per layer + norm (+ lm_head);
# checks = logits + loss + one per tensor.
for shape in "2 6 1" "1 10 0" "2 10 0" "4 6 1"; do
  set -- $shape
  d="$T/grad-$1-$2-$3"
  mkdir "$d"
  OMP_NUM_THREADS=2 "$DUMP" dump "$d" llama $shape >"$d.out" 2>&1 \
    || fail "gpt_dump dump llama $shape failed: $(cat "$d.out")"
  "$PY" "$REF/torch_gpt.py" check "$d" >"$d.check" 2>&1 \
    || fail "our Llama ($shape) differs from PyTorch's:
$(cat "$d.check")"
  cat "$d.check"
  expect_in "$d.check" "llama: n_kv_head $1, head size $2"
  grep -q "^logits .* ok$" "$d.check" || fail "$shape: logits not checked"
  grep -q "^model.norm.weight .* ok$" "$d.check" \
    || fail "$shape: the check did not reach model.norm"
  want=$((2 + 1 + 9 * 2 + 1 + $3))
  [ "$(grep -c ' ok$' "$d.check")" -eq "$want" ] \
    || fail "$shape: expected $want checks:
$(cat "$d.check")"
done

for shape in "2 6 1" "1 6 0" "1 10 1"; do
  set -- $shape
  d="$T/train-$1-$2-$3"
  mkdir "$d"
  OMP_NUM_THREADS=2 "$TRAIN" adamw "$d" llama $shape >"$d.out" 2>&1 \
    || fail "train_dump adamw llama $shape failed: $(cat "$d.out")"
  "$PY" "$REF/torch_train.py" adamw "$d" >"$d.check" 2>&1 \
    || fail "ten AdamW steps of Llama ($shape) differ from PyTorch:
$(cat "$d.check")"
  cat "$d.check"
  expect_in "$d.check" "adamw step 9:"
  expect_in "$d.check" "adamw: agrees with torch"
  want=$((1 + 9 * 2 + 1 + $3))
  [ "$(grep -c ' ok$' "$d.check")" -eq "$want" ] \
    || fail "$shape: expected $want tensors checked:
$(cat "$d.check")"
done

# A config the family cannot run is refused with the numbers named.
"$DUMP" dump "$T" llama 3 6 1 >"$T/bad.out" 2>&1 && fail "n_kv_head 3 of 4 heads was accepted"
expect_in "$T/bad.out" "n_kv_head (3) must divide n_head (4)"
"$DUMP" dump "$T" llama 2 5 1 >"$T/bad.out" 2>&1 && fail "head size 5 was accepted"
expect_in "$T/bad.out" "(20/4 = 5) must be even"
pass
