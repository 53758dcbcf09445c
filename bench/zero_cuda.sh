#!/usr/bin/env bash
# The step-time overhead of each ZeRO stage on the GPU (gpu/zero/zero_cuda.h,
# NCCL) against stage 0 and against the CUDA engine alone, on the same
# model and micro-batch: bench/gpu_train.c's `run` and `zero -z 0|1|2|3`,
# taking turns within each round; prints the median ms/step of ROUNDS
# rounds, the ratios, and the GPU bytes. With RANKS > 1 the ZeRO runs are
# RANKS ranks under mpirun (one GPU each, or several on one GPU where NCCL
# allows it: NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1). A benchmark,
# not a test: without a GPU it says so and exits 0.
#
#   bench/zero_cuda.sh [BUILD_DIR]
#   env: MODEL=gpt2-124M B=8 T=1024 STEPS=10 WARMUP=3 ROUNDS=3 RANKS=1
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
MODEL=${MODEL:-gpt2-124M} B=${B:-8} T=${T:-1024} STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3} ROUNDS=${ROUNDS:-3} RANKS=${RANKS:-1}
. bench/gpu_bench_lib.sh
gpu_bench_ready zero_cuda.sh "$build"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(-m "$MODEL" -B "$B" -T "$T" -s "$STEPS" -w "$WARMUP")
launch=()
if [ "$RANKS" -gt 1 ]; then
  launch=(mpirun -np "$RANKS" --oversubscribe --bind-to none)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
echo "zero_cuda.sh: $why; $MODEL, micro-batch $B x $T per rank, $RANKS rank(s), $STEPS timed steps, median of $ROUNDS rounds"
for ((i = 0; i < ROUNDS; i++)); do
  for s in engine 0 1 2 3; do
    if [ "$s" = engine ]; then
      "$bin" run "${args[@]}" >"$out/$s.out" 2>"$out/$s.err"
    else
      "${launch[@]}" "$bin" zero -z "$s" "${args[@]}" >"$out/$s.out" 2>"$out/$s.err"
    fi || { echo "zero_cuda.sh: $s failed: $(tail -5 "$out/$s.err")"; exit 0; }
    sed -n 's/^RESULT.* ms_per_step=\([^ ]*\).*/\1/p' "$out/$s.out" >>"$out/ms-$s"
    grep '^rank 0' "$out/$s.out" >"$out/mem-$s" || true
  done
done
med() { sort -g "$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
base=$(med "$out/ms-0") alone=$(med "$out/ms-engine")
printf '%-8s %10s %10s %12s\n' run ms/step "vs stage 0" "vs engine"
for s in engine 0 1 2 3; do
  m=$(med "$out/ms-$s")
  awk -v n="$s" -v m="$m" -v b="$base" -v e="$alone" \
    'BEGIN { printf "%-8s %10.2f %10.3f %12.3f\n", (n == "engine" ? "engine" : "stage " n), m, m / b, m / e }'
done
for s in 0 1 2 3; do
  echo "stage $s: $(cat "$out/mem-$s")"
done
exit 0
