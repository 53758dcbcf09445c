#!/usr/bin/env bash
# One call of the device tool, on its GPU machine, in the repository's
# root, with .gpu carried (tests/gpu/bundle.sh made it here):
#
#   bash tests/gpu/device_run.sh [tests|bench|all]      (default all)
#
# Unpacks .gpu/dagrun-gpu.tar.xz into /tmp (once per machine), takes its
# environment (env.sh), then runs the GPU tests (tests/gpu/run.sh) and/or
# the GPU benchmarks (kernel_bench with both attention kernels,
# bench/gpu_train.sh: GPT-2 124M against PyTorch with the batch sweep,
# bench/zero_cuda.sh: each ZeRO stage against stage 0), each into a log
# in $OUT (the folder the device tool brings back; ./gpu-logs without
# it): env.txt, tests.log, kernel_bench.log, gpu_train.log, zero_cuda.log.
# Exits with the tests' status (0 when only benchmarks ran).
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
logs=${OUT:-gpu-logs}
mkdir -p "$logs"
if [ ! -d /tmp/dagrun-gpu ]; then
  [ -f .gpu/dagrun-gpu.tar.xz ] ||
    { echo "device_run: no .gpu/dagrun-gpu.tar.xz (make it with tests/gpu/bundle.sh and carry .gpu)" >&2; exit 2; }
  tar xf .gpu/dagrun-gpu.tar.xz -C /tmp || exit 2
fi
# shellcheck disable=SC1091
. /tmp/dagrun-gpu/env.sh
b=/tmp/dagrun-gpu/build
{
  date -u
  nvidia-smi
  nvcc --version 2>/dev/null | tail -2
  echo "NCCL: $("$b/bin/gpt_cuda_check" nccl-version)"
  echo "python3: $DAGRUN_TEST_PYTHON"
  "$DAGRUN_TEST_PYTHON" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
} >"$logs/env.txt" 2>&1
rc=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  tests/gpu/run.sh "$b" >"$logs/tests.log" 2>&1
  rc=$?
  tail -n 3 "$logs/tests.log"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  {
    echo "== tensor-core attention (default)"
    "$b/bin/kernel_bench"
    echo "== DAGRUN_CUDA_ATTENTION=fp32"
    DAGRUN_CUDA_ATTENTION=fp32 "$b/bin/kernel_bench"
  } >"$logs/kernel_bench.log" 2>&1
  PYTHON=$DAGRUN_TEST_PYTHON bench/gpu_train.sh "$b" >"$logs/gpu_train.log" 2>&1
  bench/zero_cuda.sh "$b" >"$logs/zero_cuda.log" 2>&1
  tail -n 12 "$logs/gpu_train.log"
fi
exit $rc
