#!/usr/bin/env bash
# The CPU GPT-2 engine against GPT-2 written in plain PyTorch
# (tests/reference/torch_gpt.py, float64): for a tiny model with perturbed
# weights (L2 H2 C32 T16, vocab 67 padded to 128, B3 T16), the logits and
# the loss within 1e-5 relative, every parameter's gradient within 1e-4 of
# that tensor's largest reference value.
. "$(dirname "$0")/lib.sh"

DUMP="$DAGRUN_BUILD_DIR/bin/gpt_dump"
[ -x "$DUMP" ] || fail "no $DUMP (build the gpt_dump target)"
PY=/usr/bin/python3
"$PY" -c 'import torch, numpy' 2>/dev/null \
  || fail "$PY cannot import torch and numpy (Debian: python3-torch python3-numpy)"

mkdir -p "$T/dump"
OMP_NUM_THREADS=2 "$DUMP" dump "$T/dump" >"$T/dump.out" 2>&1 \
  || fail "gpt_dump dump failed: $(cat "$T/dump.out")"
if ! "$PY" "$DAGRUN_SOURCE_DIR/tests/reference/torch_gpt.py" check "$T/dump" \
  >"$T/check.out" 2>&1; then
  fail "our GPT-2 differs from PyTorch's:
$(cat "$T/check.out")"
fi
cat "$T/check.out"
grep -q "^ln_f.bias .* ok$" "$T/check.out" || fail "the check did not reach every tensor"
[ "$(grep -c ' ok$' "$T/check.out")" -eq 30 ] \
  || fail "expected 30 checks (logits, loss, 28 tensors):
$(cat "$T/check.out")"
pass
