#!/usr/bin/env bash
# Runs every GPU test against a build: kernel_check (each CUDA kernel
# against the CPU engine's op), then every tests/gpu/test_*.sh, each
# given the build directory as $1 (and as DAGRUN_BUILD_DIR).
#
#   tests/gpu/run.sh BUILD_DIR [--quick]
#   env: GPU_TEST_TIMEOUT=SECONDS  stops a check or test that runs longer
#        (reported as TIMED OUT, a failure); unset: no limit
#
# Exits 0 when all pass, 1 when any fails, 77 (ctest: "Skipped") when
# there is nothing to run them on: CUDA not built in BUILD_DIR, or no
# GPU (nvidia-smi missing or failing, or CUDA seeing 0 devices).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 1 ]; then
  echo "usage: tests/gpu/run.sh BUILD_DIR [--quick]" >&2
  exit 2
fi
if ! build=$(cd "$1" 2>/dev/null && pwd); then
  echo "run.sh: no build directory $1" >&2
  exit 2
fi
shift
skip() {
  echo "SKIPPED: $*"
  exit 77
}

check=$build/bin/kernel_check
if [ ! -x "$check" ]; then
  cache=$build/CMakeCache.txt
  if [ ! -f "$cache" ]; then
    echo "run.sh: $build is not a CMake build directory" >&2
    exit 2
  fi
  if grep -q '^DAGRUN_CUDA:BOOL=OFF' "$cache"; then
    skip "CUDA not built in $build (configured with -DDAGRUN_CUDA=OFF)"
  fi
  if ! grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$cache"; then
    skip "CUDA not built in $build (no nvcc found when it was configured)"
  fi
  echo "run.sh: CUDA is configured in $build but $check is missing:" \
    "build it (ninja -C $build kernel_check)" >&2
  exit 1
fi

if ! command -v nvidia-smi >/dev/null 2>&1; then
  skip "no GPU (nvidia-smi not found)"
fi
if ! smi=$(nvidia-smi -L 2>&1); then
  skip "no GPU (nvidia-smi failed: $(echo "$smi" | head -n 1))"
fi
if ! probe=$("$check" --probe 2>&1); then
  skip "no GPU (${probe#kernel_check: })"
fi
echo "$smi"

# within RUN: the command under GPU_TEST_TIMEOUT, where set (a lent GPU's
# time is short: one hung test must not take the rest's).
within() {
  if [ -z "${GPU_TEST_TIMEOUT:-}" ]; then
    "$@"
    return
  fi
  local rc=0
  timeout --kill-after=5 "$GPU_TEST_TIMEOUT" "$@" || rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "TIMED OUT after ${GPU_TEST_TIMEOUT} s: $*"
  fi
  return "$rc"
}

failed=() skipped=()
echo "== kernel_check"
SECONDS=0
within "$check" "$@" || failed+=(kernel_check)
echo "-- kernel_check: $SECONDS s"
for t in "$here"/test_*.sh; do
  [ -e "$t" ] || continue
  name=$(basename "$t" .sh)
  echo "== $name"
  # 77: the test could not run here (it said why); not a pass.
  rc=0
  SECONDS=0
  DAGRUN_BUILD_DIR=$build within bash "$t" "$build" || rc=$?
  echo "-- $name: exit $rc, $SECONDS s"
  if [ "$rc" -eq 77 ]; then
    skipped+=("$name")
  elif [ "$rc" -ne 0 ]; then
    failed+=("$name")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "GPU tests FAILED: ${failed[*]}${skipped:+; SKIPPED: ${skipped[*]}}"
  exit 1
fi
if [ ${#skipped[@]} -gt 0 ]; then
  echo "GPU tests: the others passed; SKIPPED: ${skipped[*]}"
  exit 1
fi
echo "GPU tests: all passed"
