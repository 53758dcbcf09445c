#!/usr/bin/env bash
# Ten training steps of the CPU engine (the train stage's calls: forward,
# backward, grad-norm clipping at 1.5, warmup + cosine LR, AdamW or Lion)
# against the same steps in PyTorch, float64, from our initial weights
# (tests/reference/torch_train.py): per step the loss and grad norm within
# 1e-4 relative; after the last step every tensor within 1e-4 of its
# largest reference value (the attention key bias, whose gradient is zero
# but for rounding, is reported and not judged); wte's padding rows zero.
. "$(dirname "$0")/lib.sh"

TOOL="$DAGRUN_BUILD_DIR/bin/train_dump"
REF="$DAGRUN_SOURCE_DIR/tests/reference"
[ -x "$TOOL" ] || fail "no $TOOL (build the train_dump target)"
PY=/usr/bin/python3
"$PY" -c 'import torch, numpy' 2>/dev/null \
  || fail "$PY cannot import torch and numpy (python3-torch python3-numpy)"

for kind in adamw lion; do
  mkdir "$T/$kind"
  OMP_NUM_THREADS=2 "$TOOL" "$kind" "$T/$kind" >"$T/$kind.dump" 2>&1 \
    || fail "train_dump $kind failed: $(cat "$T/$kind.dump")"
  "$PY" "$REF/torch_train.py" "$kind" "$T/$kind" >"$T/$kind.out" 2>&1 \
    || fail "training with $kind differs from PyTorch:
$(cat "$T/$kind.out")"
  cat "$T/$kind.out"
  # 28 tensors judged, and ten steps seen.
  [ "$(grep -c ' ok$' "$T/$kind.out")" -eq 28 ] \
    || fail "$kind: expected 28 tensors checked:
$(cat "$T/$kind.out")"
  expect_in "$T/$kind.out" "$kind step 9:"
  expect_in "$T/$kind.out" "$kind: agrees with torch"
done
pass
