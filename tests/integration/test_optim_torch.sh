# AdamW and Lion with clipping and warmup + cosine LR give the same
# parameters as PyTorch (torch.optim.AdamW, clip_grad_norm_, Lion as
# lion-pytorch) over ten steps, within 1e-5 relative
# (tests/reference/torch_optim.py states the metric).
. "$(dirname "$0")/lib.sh"

TOOL="$DAGRUN_BUILD_DIR/bin/optim_dump"
REF="$DAGRUN_SOURCE_DIR/tests/reference"
[ -x "$TOOL" ] || fail "no $TOOL (build the optim_dump target)"
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null \
  || fail "python3 with torch and numpy is needed (scripts/setup.sh --tests)"

for kind in adamw lion; do
  mkdir "$T/$kind"
  "$TOOL" "$kind" "$T/$kind" || fail "optim_dump $kind failed"
  /usr/bin/python3 "$REF/torch_optim.py" "$T/$kind" >"$T/$kind.out" 2>&1 \
    || fail "$kind differs from torch:
$(cat "$T/$kind.out")"
  cat "$T/$kind.out"
done
pass
