#!/usr/bin/env bash
# test_train_emulated.sh NAME: tests/gpu/NAME.sh (test_train_cuda,
# test_train_gang_cuda), unchanged, on the CPU emulator: the ctests
# gpu/train_cuda_emulated and gpu/train_gang_cuda_emulated
# (emu/CMakeLists.txt), which give it the integration tests' environment;
# by hand: DAGRUN_BUILD_DIR=build-foo bash tests/gpu/emu/test_train_emulated.sh
# test_train_cuda.
#
# - GPU_STAGE_DIR: the emulated train plugin's directory (a train.so built
#   from stages/train with DAGRUN_HAVE_CUDA on the emulated CUDA runtime,
#   engine, NCCL and ZeRO), which gpu_env.sh puts first on
#   DAGRUN_PLUGIN_PATH, so that `stage: train` is it;
# - GPU_CHECK: gpt_cuda_emulated, gpu_env.sh's "is there a GPU" check;
# - OPENBLAS_NUM_THREADS=1: the emulator is one thread, and OpenBLAS's
#   idle workers would spin beside it (cuBLASLt's products are OpenBLAS's);
# - an EMU ERROR (a launch, copy or collective a GPU would refuse or hang
#   on) in any run's log fails the test even where the stage did not
#   notice it: $DAGRUN is a shim that runs dagrun, then looks in the runs'
#   logs (lib.sh removes them when the test passes);
# - each dagrun call runs its fibers in another order (DAGRUN_EMU_SEED:
#   the call's number, unless set), so that two runs that must give the
#   same bits (deterministic: true) do not merely repeat one schedule.
set -uo pipefail
name=${1:?usage: test_train_emulated.sh NAME (test_train_cuda, test_train_gang_cuda)}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export DAGRUN_SOURCE_DIR=${DAGRUN_SOURCE_DIR:-$src}
export DAGRUN_BUILD_DIR=${DAGRUN_BUILD_DIR:-$src/build}
case $DAGRUN_BUILD_DIR in /*) ;; *) DAGRUN_BUILD_DIR=$src/$DAGRUN_BUILD_DIR ;; esac
real=${DAGRUN:-$DAGRUN_BUILD_DIR/bin/dagrun}
export GPU_STAGE_DIR=$DAGRUN_BUILD_DIR/tests/gpu/emu/stages
export GPU_CHECK=$DAGRUN_BUILD_DIR/bin/gpt_cuda_emulated
export OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for f in "$GPU_STAGE_DIR/train.so" "$GPU_CHECK" "$real"; do
  [ -e "$f" ] || { echo "FAIL: no $f (build the emulator's targets)"; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/dagrun-emu-train.XXXXXX")
trap 'rm -rf "$work"' EXIT
export DAGRUN_EMU_TRAIN_ERRORS=$work/emu-errors
export DAGRUN_EMU_TRAIN_DAGRUN=$real
export DAGRUN_EMU_TRAIN_CALLS=$work/calls
cat > "$work/dagrun" <<'S'
#!/usr/bin/env bash
echo "$*" >> "$DAGRUN_EMU_TRAIN_CALLS"
[ -n "${DAGRUN_EMU_SEED:-}" ] ||
  export DAGRUN_EMU_SEED=$(wc -l < "$DAGRUN_EMU_TRAIN_CALLS")
"$DAGRUN_EMU_TRAIN_DAGRUN" "$@"
rc=$?
if [ -n "${DAGRUN_RUNS_DIR:-}" ] && [ -d "$DAGRUN_RUNS_DIR" ]; then
  grep -rs -m 3 "EMU ERROR" "$DAGRUN_RUNS_DIR" >> "$DAGRUN_EMU_TRAIN_ERRORS"
fi
exit $rc
S
chmod +x "$work/dagrun"
export DAGRUN=$work/dagrun

start=$SECONDS
bash "$DAGRUN_SOURCE_DIR/tests/gpu/$name.sh"
rc=$?
echo "$name on the emulator: exit $rc after $((SECONDS - start)) s"
if [ -s "$DAGRUN_EMU_TRAIN_ERRORS" ]; then
  echo "FAIL [$name emulated]: EMU ERROR in the runs' logs:"
  sort -u "$DAGRUN_EMU_TRAIN_ERRORS" | head -20
  exit 1
fi
exit $rc
