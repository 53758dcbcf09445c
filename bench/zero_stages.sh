#!/usr/bin/env bash
# The step-time overhead of each ZeRO stage against stage 0 on CPU ranks:
# tests/reference/zero_check (gpu/zero/zero.h over MPI) at world size 2,
# one OpenMP/OpenBLAS thread per rank, the same model and global batch
# for every stage. Prints ms/step (the mean of the steps after the first,
# as zero_check measures it; the median of REPEATS runs) per stage and the
# ratio to stage 0, and rank 0's peak parameter and gradient bytes in a
# step. A benchmark, not a test: it always exits 0 once the runs succeed.
#
#   bench/zero_stages.sh [BUILD_DIR] [LAYERS] [WIDTH] [MICRO] [STEPS] [REPEATS]
#
# Defaults: build, 8 layers, width 256, micro-batch 4 per rank (of 16
# tokens: zero_check's context), 20 steps, 3 runs per stage.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} layers=${2:-8} width=${3:-256} micro=${4:-4}
steps=${5:-20} repeats=${6:-3}
tool="$build/bin/zero_check"
[ -x "$tool" ] || { echo "zero_stages: no $tool (build it: scripts/build.sh $build)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "zero_stages: mpirun (Open MPI) is needed" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "world size 2, $layers layers, width $width, micro-batch $micro x 16 tokens per rank, $steps steps, median of $repeats runs"
# The stages take turns within each round, so that a load that comes and
# goes on the machine falls on all of them alike.
for ((i = 0; i < repeats; i++)); do
  for stage in 0 1 2 3; do
    mpirun --oversubscribe --bind-to none -np 2 "$tool" --stage "$stage" \
      --micro "$micro" --steps "$steps" --layers "$layers" --width "$width" \
      >"$out/s$stage.out" 2>"$out/s$stage.err" ||
      { echo "zero_stages: stage $stage failed: $(tail -5 "$out/s$stage.err")" >&2; exit 1; }
    awk '$1 == "step_ms" { print $2 }' "$out/s$stage.out" >>"$out/ms$stage"
  done
done
printf "%-6s %10s %8s %12s %11s  %s\n" stage ms/step ratio "params MiB" "grads MiB" "rank 0's split of the last run, ms: forward backward comm optimizer"
# peak STAGE KEY: rank 0's zero_memory field KEY of stage STAGE's last run, MiB.
peak() { awk -v k="$2" '$1 == "mem" { for (i = 2; i < NF; i += 2) if ($i == k) print $(i + 1) / 1048576 }' "$out/s$1.out"; }
base=""
for stage in 0 1 2 3; do
  med=$(sort -g "$out/ms$stage" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  [ -n "$base" ] || base=$med
  split=$(awk '$1 == "phases_ms" { printf "%.1f %.1f %.1f %.1f", $3, $5, $7, $9 }' "$out/s$stage.out")
  printf "%-6s %10.2f %8.2f %12.2f %11.2f  %s\n" "$stage" "$med" "$(awk -v a="$med" -v b="$base" 'BEGIN { print a / b }')" \
    "$(peak "$stage" peak_params)" "$(peak "$stage" peak_grads)" "$split"
done
