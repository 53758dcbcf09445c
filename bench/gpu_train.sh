#!/usr/bin/env bash
# GPT-2 124M (T=1024) trained on one GPU by dagrun's CUDA engine
# (bench/gpu_train.c) and by PyTorch (bench/torch_gpt2.py: bf16 autocast,
# torch.compile, scaled_dot_product_attention, fused AdamW) on the same
# batch, in one run; prints tokens/s, ms/step, peak memory and MFU of
# both (FLOPs per token = 6N + 6*L*C*T) and dagrun's ratio to PyTorch;
# then dagrun's micro-batch sweep (1, 2, 4, ... until out of memory).
#
#   bench/gpu_train.sh [BUILD_DIR]       (default build/)
#   env: B=16 T=1024 STEPS=20 WARMUP=5 PEAK_TFLOPS=989 (H100 SXM dense
#        BF16; an H200's is the same) MODEL=gpt2-124M RECOMPUTE=none
#        SWEEP=1 (0: no sweep) SWEEP_STEPS=5 TORCH=1 (0: dagrun only)
#        PYTHON=python3
#   A Llama: MODEL=llama-small or smollm-135m-shape with TORCH=0
#   (bench/torch_gpt2.py is GPT-2's; the FLOPs are the Llama's).
#
# Without a GPU (or a build without CUDA) it says so and exits 0: a
# benchmark, not a test. Every run's output also goes to bench/out/.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
B=${B:-16} T=${T:-1024} STEPS=${STEPS:-20} WARMUP=${WARMUP:-5}
PEAK=${PEAK_TFLOPS:-989} MODEL=${MODEL:-gpt2-124M} RC=${RECOMPUTE:-none}
PY=${PYTHON:-python3}
. bench/gpu_bench_lib.sh
gpu_bench_ready gpu_train.sh "$build"
mkdir -p bench/out
log=bench/out/gpu_train-$(date -u +%Y%m%dT%H%M%SZ).log
echo "gpu_train.sh: $why; log: $log"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null | tee -a "$log"

"$bin" run -m "$MODEL" -B "$B" -T "$T" -s "$STEPS" -w "$WARMUP" -r "$RC" -p "$PEAK" 2>&1 | tee -a "$log"
ours=$(grep '^RESULT engine=dagrun' "$log" | tail -n 1)
theirs=""
if [ "${TORCH:-1}" = 1 ]; then
  PYTHONUNBUFFERED=1 "$PY" bench/torch_gpt2.py --model "$MODEL" --B "$B" --T "$T" \
    --steps "$STEPS" --warmup "$WARMUP" --peak-tflops "$PEAK" 2>&1 | tee -a "$log"
  theirs=$(grep '^RESULT engine=torch' "$log" | tail -n 1)
fi
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }
echo
echo "== GPT-2 $MODEL, batch $B x $T, $STEPS timed steps; FLOPs/token = 6N + 6*L*C*T = $(field "$ours" flops_per_token); peak $PEAK TFLOP/s" | tee -a "$log"
printf '%-8s %12s %10s %16s %8s\n' engine tokens/s ms/step "peak alloc GiB" MFU | tee -a "$log"
for r in "$ours" "$theirs"; do
  [ -n "$r" ] || continue
  awk -v e="$(field "$r" engine)" -v t="$(field "$r" tokens_per_s)" -v m="$(field "$r" ms_per_step)" \
      -v p="$(field "$r" peak_alloc_bytes)" -v u="$(field "$r" mfu)" \
      'BEGIN { printf "%-8s %12.0f %10.2f %16.2f %7.1f%%\n", e, t, m, p / 2^30, 100 * u }' | tee -a "$log"
done
if [ -n "$ours" ] && [ -n "$theirs" ]; then
  awk -v a="$(field "$ours" tokens_per_s)" -v b="$(field "$theirs" tokens_per_s)" \
    'BEGIN { printf "dagrun / PyTorch tokens/s: %.3fx (target >= 1.1x)\n", a / b }' | tee -a "$log"
elif [ -z "$ours" ]; then
  echo "dagrun's run failed (above)" | tee -a "$log"
fi

if [ "${SWEEP:-1}" = 1 ]; then
  echo
  echo "== micro-batch sweep (dagrun, T=$T, recompute $RC, ${SWEEP_STEPS:-5} steps each)" | tee -a "$log"
  "$bin" sweep -m "$MODEL" -T "$T" -s "${SWEEP_STEPS:-5}" -w 2 -r "$RC" -p "$PEAK" 2>&1 |
    grep -v '^RESULT' | tee -a "$log"
fi
exit 0
