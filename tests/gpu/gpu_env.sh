# Sourced first by tests/gpu/test_*.sh: the environment that ctest gives
# the integration tests (tests/CMakeLists.txt), defaulted from the
# checkout and its build/ so that a test runs as `bash tests/gpu/X.sh`
# (DAGRUN_BUILD_DIR=build-foo to use another build), then lib.sh.
# Skips the test (exit 77, tests/gpu/run.sh's convention) where the
# build has no CUDA backend or the machine no GPU.
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export DAGRUN_SOURCE_DIR=${DAGRUN_SOURCE_DIR:-$src}
export DAGRUN_BUILD_DIR=${DAGRUN_BUILD_DIR:-$src/build}
case $DAGRUN_BUILD_DIR in /*) ;; *) DAGRUN_BUILD_DIR=$src/$DAGRUN_BUILD_DIR ;; esac
export DAGRUN=${DAGRUN:-$DAGRUN_BUILD_DIR/bin/dagrun}
export DAGRUN_TEST_PLUGIN_DIR=${DAGRUN_TEST_PLUGIN_DIR:-$DAGRUN_BUILD_DIR/tests/plugins}
# GPU_CHECK, GPU_STAGE_DIR: set by tests/gpu/emu/test_train_emulated.sh,
# which runs these tests on the CPU emulator: the emulated
# gpt_cuda_check (gpt_cuda_emulated), and a directory of stage plugins
# searched before all others (the emulated train.so). Unset on a GPU.
GPU_CHECK=${GPU_CHECK:-$DAGRUN_BUILD_DIR/bin/gpt_cuda_check}
if [ ! -x "$GPU_CHECK" ]; then
  echo "skip: no $GPU_CHECK (a build without the CUDA backend)"
  exit 77
fi
if ! "$GPU_CHECK" available >/dev/null; then
  echo "skip: $("$GPU_CHECK" available)"
  exit 77
fi
export DAGRUN_TEST_KEEP_GPU=1 # lib.sh would hide the GPU from the CPU tests
. "$DAGRUN_SOURCE_DIR/tests/integration/lib.sh"
if [ -n "${GPU_STAGE_DIR:-}" ]; then
  export DAGRUN_PLUGIN_PATH="$GPU_STAGE_DIR:$DAGRUN_PLUGIN_PATH"
fi

# GPU_TEST_LAYERS: gpt-tiny's layers in test_train_cuda and
# test_train_gang_cuda (4 unless set), as SHAPE, params to append; the
# emulator's ctest sets 2: every kernel and collective of a step runs the
# same, each step costs about two thirds.
SHAPE=${GPU_TEST_LAYERS:+, n_layer: $GPU_TEST_LAYERS}

# gpu_steps DEFAULT MIN: N, the steps of a run (GPU_TEST_STEPS, else
# DEFAULT; the emulator's ctests train fewer), an even number >= MIN, and
# H = N / 2, where the resumed runs start; EVAL, the final validation's
# batches as a param (GPU_TEST_EVAL_BATCHES; unset: the stage's default).
gpu_steps() {
  N=${GPU_TEST_STEPS:-$1}
  case $N in *[!0-9]*|'') fail "GPU_TEST_STEPS=$N: an even number of steps" ;; esac
  [ $((N % 2)) -eq 0 ] && [ "$N" -ge "$2" ] ||
    fail "GPU_TEST_STEPS=$N: an even number >= $2"
  H=$((N / 2))
  EVAL=${GPU_TEST_EVAL_BATCHES:+, eval_batches: $GPU_TEST_EVAL_BATCHES}
}

# gpu_train NAME EXTRA: a DAG NAME.yaml of one train task with $COMMON
# and EXTRA as its params, run; the test fails when it does. --no-cache:
# two runs of one task (deterministic pairs) must both train, where
# dagrun would reuse the first's result.
gpu_train() {
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train: {stage: train, with: {$COMMON, $2}}
Y
  run_dagrun run "$1.yaml" --plain --no-cache
  [ "$RC" -eq 0 ] || fail "$1 failed: $(cat "$T/out" "$T/err")"
}

# optim_halved NAME R0 R1: the run directories R0 (zero_stage 0) and R1
# (zero_stage 1) of the same 4-rank GPU layout: R1's summary says
# zero_stage 1 on cuda, and each rank's optimizer state (summary.json's
# memory formula: the device's bytes) is at most half of R0's, but for
# the device arrays' alignment (each of AdamW's two arrays is 128-byte
# aligned: 2 x 2 x 128 bytes of slack on twice R1's).
optim_halved() {
  "$PY" - "$2/train/out/summary.json" "$3/train/out/summary.json" <<'P' ||
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert b["zero_stage"] == 1 and b["device"] == "cuda", b
za = [r["formula"]["optim"] for r in a["memory"]["ranks"]]
zb = [r["formula"]["optim"] for r in b["memory"]["ranks"]]
assert len(za) == len(zb) == 4 and all(za), (za, zb)
for x, y in zip(za, zb):
    assert 0 < 2 * y <= x + 2 * 2 * 128, (za, zb)
print("optimizer state per rank, zero_stage 0 vs 1:", za, zb)
P
    fail "$1: the optimizer state is not sliced"
}

# between_below NAME RZ1 RZ3: every rank's device bytes of parameters
# and of gradients between steps (summary.json's memory.ranks[q].
# between_steps) in RZ3 (zero_stage 3) below RZ1's (zero_stage 1), and
# its peak in the step above its between steps (the stage's arrays
# counted while they are there).
between_below() {
  "$PY" - "$2/train/out/summary.json" "$3/train/out/summary.json" <<'P' ||
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["zero_stage"] == 1 and b["zero_stage"] == 3 and b["device"] == "cuda", b
ra, rb = a["memory"]["ranks"], b["memory"]["ranks"]
assert len(ra) == len(rb) >= 4, (ra, rb)
for x, y in zip(ra, rb):
    for k in ("params", "grads"):
        assert y["between_steps"][k] < x["between_steps"][k], (k, x, y)
        assert y["between_steps"][k] < y["peak"][k], (k, y)
    print("rank %d between steps, zero_stage 1 vs 3: params %d vs %d, grads %d vs %d (in the step %d, %d)" % (
        y["rank"], x["between_steps"]["params"], y["between_steps"]["params"],
        x["between_steps"]["grads"], y["between_steps"]["grads"],
        y["peak"]["params"], y["peak"]["grads"]))
P
    fail "$1: zero_stage 3 holds no less between steps than zero_stage 1"
}
