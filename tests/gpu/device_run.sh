#!/usr/bin/env bash
# One call of the device tool, on its GPU machine, in the repository's
# root, with .gpu carried (tests/gpu/bundle.sh made it here):
#
#   bash tests/gpu/device_run.sh [tests|bench|all]      (default all)
#   env: BUDGET=SECONDS (default 540): the whole run's time; each step
#        gets its own limit, cut to what is left of the budget, so that
#        one hung step leaves the others theirs and the call ends before
#        the device tool's limit; TEST_LIMIT=SECONDS (default 120): one
#        GPU test's; ZERO=0 leaves bench/zero_cuda.sh out; BATCHES
#        (default "16 32"): gpu_train's batches against PyTorch; SWEEP=0
#        no micro-batch sweep; ATTENTION_VARIANTS (default "tc-fused
#        tc-sync"): the DAGRUN_CUDA_ATTENTION values that gpu_train (B=16,
#        dagrun alone) and kernel_bench also run with (kernel_bench runs
#        the default and cudnn besides); TORCH_PROFILE=0 leaves PyTorch's
#        profile out; LLAMA=0 leaves gpu_train's Llama (llama-small,
#        B=16, dagrun alone) out
#
# Unpacks .gpu/dagrun-gpu.tar.xz into /tmp (once per machine), takes its
# environment (env.sh), then runs the GPU tests (tests/gpu/run.sh) and/or
# the GPU benchmarks (bench/gpu_train.sh: GPT-2 124M against PyTorch
# with the batch sweep, bench/gpu_profile.sh: each kernel's share of a
# step, then PyTorch's step's (bench/torch_gpt2.py --profile),
# bench/zero_cuda.sh: each ZeRO stage against stage 0, kernel_bench with
# both attention kernels, then bench/torch_attention.py: PyTorch's
# attention backends beside ours: in that order, the most wanted first,
# should the budget run out), each into a log in $OUT (the folder the
# device tool brings back; ./gpu-logs without it): env.txt, tests.log,
# gpu_train.log, gpu_profile.log, zero_cuda.log, kernel_bench.log, and
# steps.txt (each step's exit status and seconds, printed last).
# Exits with the tests' status (0 when only benchmarks ran).
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
logs=${OUT:-gpu-logs}
budget=${BUDGET:-540}
mkdir -p "$logs"
start=$(date +%s)
: >"$logs/steps.txt"

# step LOG LIMIT CMD...: CMD into $logs/LOG under min(LIMIT, what is left
# of the budget); its status and time go to steps.txt.
step() {
  local log=$1 limit=$2 left rc=0 t0
  shift 2
  left=$((budget - ($(date +%s) - start)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    echo "$log: not run, the budget is spent" >>"$logs/steps.txt"
    return 124
  fi
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >>"$logs/$log" 2>&1 || rc=$?
  echo "$log: $* -> exit $rc in $(($(date +%s) - t0)) s (limit $limit s)" >>"$logs/steps.txt"
  return "$rc"
}

if [ ! -d /tmp/dagrun-gpu ]; then
  [ -f .gpu/dagrun-gpu.tar.xz ] ||
    { echo "device_run: no .gpu/dagrun-gpu.tar.xz (make it with tests/gpu/bundle.sh and carry .gpu)" >&2; exit 2; }
  tar xf .gpu/dagrun-gpu.tar.xz -C /tmp || exit 2
fi
# shellcheck disable=SC1091
. /tmp/dagrun-gpu/env.sh
# Open MPI's shared-memory transport copies across processes with CMA
# (process_vm_readv), which a sandboxed kernel (gVisor) may refuse in
# the middle of a run: plain copies through the shared segment instead.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
b=/tmp/dagrun-gpu/build
{
  date -u
  uname -r
  nvidia-smi
  nvcc --version 2>/dev/null | tail -2
  echo "NCCL: $("$b/bin/gpt_cuda_check" nccl-version)"
  echo "python3: $DAGRUN_TEST_PYTHON"
  "$DAGRUN_TEST_PYTHON" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
} >"$logs/env.txt" 2>&1
rc=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  GPU_TEST_TIMEOUT=${TEST_LIMIT:-120} step tests.log "${TESTS_BUDGET:-330}" tests/gpu/run.sh "$b"
  rc=$?
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  # Against PyTorch at each batch of BATCHES (the sweep after the first);
  # then dagrun alone with each attention of ATTENTION_VARIANTS (the
  # default's figures are the first run's), so that a kernel change is
  # measured against the kernels it replaces on the same card.
  sweep=${SWEEP:-1}
  for bsz in ${BATCHES:-16 32}; do
    B=$bsz SWEEP=$sweep PYTHON=$DAGRUN_TEST_PYTHON SWEEP_STEPS=3 step gpu_train.log 200 bench/gpu_train.sh "$b"
    sweep=0
  done
  for att in ${ATTENTION_VARIANTS:-tc-fused tc-sync}; do
    echo "== DAGRUN_CUDA_ATTENTION=$att" >>"$logs/gpu_train.log"
    DAGRUN_CUDA_ATTENTION=$att B=16 SWEEP=0 TORCH=0 step gpu_train.log 60 bench/gpu_train.sh "$b"
  done
  # A Llama (issue 26's CUDA kernels: RMSNorm, SwiGLU, RoPE and GQA in
  # the layout step), dagrun alone: bench/torch_gpt2.py is GPT-2's.
  if [ "${LLAMA:-1}" = 1 ]; then
    echo "== MODEL=llama-small" >>"$logs/gpu_train.log"
    MODEL=llama-small B=16 SWEEP=0 TORCH=0 step gpu_train.log 60 bench/gpu_train.sh "$b"
  fi
  PYTHON=$DAGRUN_TEST_PYTHON step gpu_profile.log 80 bench/gpu_profile.sh "$b"
  # PyTorch's step at the same batch, kernel by kernel, beside it.
  if [ "${TORCH_PROFILE:-1}" = 1 ]; then
    echo "== torch_gpt2.py --profile (B=8)" >>"$logs/gpu_profile.log"
    step gpu_profile.log 120 "$DAGRUN_TEST_PYTHON" bench/torch_gpt2.py --B 8 --profile 30
  fi
  [ "${ZERO:-1}" = 1 ] && ROUNDS=${ROUNDS:-2} step zero_cuda.log 120 bench/zero_cuda.sh "$b"
  for att in default cudnn ${ATTENTION_VARIANTS:-tc-fused tc-sync} fp32; do
    echo "== DAGRUN_CUDA_ATTENTION=$att" >>"$logs/kernel_bench.log"
    # empty: the default kernels (an unknown name is refused)
    DAGRUN_CUDA_ATTENTION=${att#default} step kernel_bench.log 40 "$b/bin/kernel_bench"
  done
  # PyTorch's attention backends on the same shape, beside the default's
  # figures above (the first attention lines of kernel_bench.log).
  echo "== torch_attention" >>"$logs/kernel_bench.log"
  step kernel_bench.log 60 "$DAGRUN_TEST_PYTHON" bench/torch_attention.py --kernel-bench "$logs/kernel_bench.log"
fi
grep -E '^(PASS|FAIL)' "$logs/tests.log" 2>/dev/null | awk '{ print $1 }' | sort | uniq -c
grep -E '^(-- |GPU tests|SKIPPED|TIMED OUT)' "$logs/tests.log" 2>/dev/null
grep -E 'tokens/s:|^dagrun |^torch |^== ' "$logs/gpu_train.log" 2>/dev/null
grep -E '^== |^attention|^(dagrun \(|flash|cudnn|efficient)' "$logs/kernel_bench.log" 2>/dev/null
head -n 25 "$logs/gpu_profile.log" 2>/dev/null
grep -A 14 '^== torch_gpt2.py --profile' "$logs/gpu_profile.log" 2>/dev/null
tail -n 9 "$logs/zero_cuda.log" 2>/dev/null
cat "$logs/steps.txt"
exit $rc
