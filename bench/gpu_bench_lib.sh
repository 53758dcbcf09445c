# Sourced by the GPU benchmarks (bench/gpu_train.sh, bench/zero_cuda.sh):
#   gpu_bench_ready NAME BUILD_DIR
# sets bin (BUILD_DIR/bin/gpu_train) and why (the GPU's description), or
# says why there is nothing to measure and exits 0: a benchmark, not a
# test.
gpu_bench_ready() {
  bin=$2/bin/gpu_train
  if [ ! -x "$bin" ]; then
    echo "$1: no $bin: this build has no CUDA backend (nvcc not found when it was configured); nothing to measure"
    exit 0
  fi
  if ! why=$("$bin" available); then
    echo "$1: no GPU here ($why); nothing to measure"
    exit 0
  fi
}
