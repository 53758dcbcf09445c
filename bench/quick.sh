#!/usr/bin/env bash
# The quick version of each benchmark (bench/README.md), as the test
# command runs it after the tests: scheduling against ninja, tokenizing
# against sentencepiece, training against PyTorch (GPT-2 and Llama),
# parallel layouts on CPU ranks (D=2 against P=2), each small enough for
# well under a minute, each printing its ratio, so that a regression shows
# the day it lands. It never fails: a benchmark is not a
# test, and a slow or busy machine is not a bug. One that cannot run says
# so.
#
#   bench/quick.sh [BUILD_DIR]      (default: build)
set -uo pipefail
cd "$(dirname "$0")/.."
# Absolute: the benchmarks write DAG files that name their inputs, which
# dagrun reads relative to the DAG file.
BUILD=$(cd "${1:-build}" && pwd)
OUT="$BUILD/bench-quick"
mkdir -p "$OUT"
PY=/usr/bin/python3

# quick NAME CMD...: runs one benchmark (5 minutes at most), its output
# on ours.
quick() {
  local name=$1 rc
  shift
  echo "== bench (quick): $name"
  timeout 300 "$@"
  rc=$?
  [ "$rc" -eq 0 ] || echo "bench $name did not finish (exit $rc); not a test"
}

quick sched "$PY" bench/sched/run.py --dagrun "$BUILD/bin/dagrun" \
  --tasks 300 --repeat 3 --skip-snakemake --check-tasks 0 --out "$OUT/sched"
quick tokenize "$PY" bench/tokenize/run.py --dagrun "$BUILD/bin/dagrun" \
  --mb 2 --vocab 2048 --out "$OUT/tokenize"
quick train "$PY" bench/train/run.py --bench "$BUILD/bin/engine_bench" \
  --configs gpt-tiny --steps 3
quick parallel "$PY" bench/parallel/run.py --dagrun "$BUILD/bin/dagrun" --quick
quick train-llama "$PY" bench/train/run.py --bench "$BUILD/bin/engine_bench" \
  --configs llama-tiny --steps 3
exit 0
