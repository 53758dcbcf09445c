#!/usr/bin/env bash
# Where a training step of the CUDA engine spends its GPU time: one step
# of bench/gpu_train.c (`run -s 1 -w 0`) under Nsight Compute (ncu),
# which times every kernel the step launches (gpu__time_duration, the
# clocks left as they are); prints each kernel's launches, total time and
# share of the step, largest first. A benchmark, not a test: without a
# GPU or ncu it says so and exits 0.
#
#   bench/gpu_profile.sh [BUILD_DIR]      (default build/)
#   env: MODEL=gpt2-124M B=8 T=1024 TOP=30 PYTHON=python3 NCU=ncu
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
. bench/gpu_bench_lib.sh
gpu_bench_ready gpu_profile.sh "$build"
ncu=${NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -n 1)}
if [ -z "$ncu" ] || [ ! -x "$ncu" ]; then
  echo "gpu_profile.sh: no ncu (Nsight Compute) here; nothing to measure"
  exit 0
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "gpu_profile.sh: $why; ${MODEL:-gpt2-124M}, one step of batch ${B:-8} x ${T:-1024}"
# ncu itself runs without LD_LIBRARY_PATH (a bundle's libraries,
# tests/gpu/bundle.sh, are not for it); the step gets it back through env.
if ! env -u LD_LIBRARY_PATH "$ncu" --clock-control none \
  --metrics gpu__time_duration.sum --csv --print-units base \
  env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" "$bin" run \
  -m "${MODEL:-gpt2-124M}" -B "${B:-8}" -T "${T:-1024}" -s 1 -w 0 >"$out" 2>&1; then
  echo "gpu_profile.sh: ncu failed: $(tail -5 "$out")"
  exit 0
fi
"${PYTHON:-python3}" - "$out" "${TOP:-30}" <<'PY'
import csv, sys
from collections import defaultdict
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
tot, cnt = defaultdict(float), defaultdict(int)
for r in csv.DictReader(rows):
    if r.get('Metric Name') != 'gpu__time_duration.sum':
        continue
    name = r['Kernel Name'].split('(')[0]
    unit = {'ns': 1, 'nsecond': 1, 'us': 1e3, 'usecond': 1e3,
            'ms': 1e6, 'msecond': 1e6}.get(r.get('Metric Unit', 'ns'), 1)
    tot[name] += float(r['Metric Value'].replace(',', '')) * unit
    cnt[name] += 1
step = sum(tot.values())
print(f"{sum(cnt.values())} kernels, {step / 1e6:.2f} ms of GPU time in the step")
print(f"{'kernel':<60} {'launches':>8} {'ms':>8} {'share':>7}")
for name in sorted(tot, key=tot.get, reverse=True)[:int(sys.argv[2])]:
    print(f"{name[:60]:<60} {cnt[name]:>8} {tot[name] / 1e6:>8.3f} {100 * tot[name] / step:>6.1f}%")
PY
exit 0
