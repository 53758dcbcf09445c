#!/usr/bin/env bash
# Packs what the GPU tests and benchmarks need on a machine that has a GPU
# but none of dagrun's libraries and no network: the lent device machine
# (its image has CUDA, PyTorch and NCCL in PyTorch's Python packages; not
# libuv, libyaml, OpenBLAS, Open MPI...). Built here, on this Debian, for
# sm_90 (H100/H200), into OUT/dagrun-gpu.tar.xz:
#   dagrun-gpu/build/       bin/ (dagrun, kernel_check, gpt_cuda_check,
#                           gpu_train, kernel_bench, model_logits,
#                           comm_check, and the tools the GPU tests run
#                           as $BIN/NAME),
#                           lib/dagrun/stages/, tests/plugins/: a build
#                           tree as tests/gpu/run.sh takes it
#   dagrun-gpu/deps/lib/    every shared library those load, but the C
#                           library's own, the C++ runtime and CUDA's
#                           (the machine's newer ones serve)
#   dagrun-gpu/deps/mpi/    Open MPI's mpirun and plugins, relocated
#   dagrun-gpu/env.sh       the environment: the libraries above, then
#                           CUDA's and NCCL's (/usr/local/cuda, python3's
#                           nvidia packages), mpirun, DAGRUN_TEST_PYTHON
# There, in the repository's root (the device tool's working tree):
#   tar xf .gpu/dagrun-gpu.tar.xz -C /tmp && . /tmp/dagrun-gpu/env.sh &&
#     tests/gpu/run.sh /tmp/dagrun-gpu/build
#
#   tests/gpu/bundle.sh [OUT_DIR]     (default .gpu, ignored by git: name it
#                                      in the device tool's carry); builds
#                                      build-gpu-bundle (Release, sm_90)
#   tests/gpu/bundle.sh --build DIR [OUT_DIR]
#                                      packs the existing build DIR instead
#   tests/gpu/bundle.sh --check OUT_DIR
#                                      unpacks OUT_DIR/dagrun-gpu.tar.xz and
#                                      checks it here (see check below)
#   tests/gpu/bundle.sh --self-test DIR
#                                      packs build DIR into a temporary
#                                      directory and checks it (ctest's
#                                      gpu/bundle: the bundle keeps up with
#                                      the build's libraries)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

# Libraries the target machine has (newer): the C library's, the C++
# runtime, and CUDA's, which must be the machine's own (the driver's
# libcuda above all; the toolkit's cudart/cuBLASLt and NCCL too big to
# carry and present there).
system_lib() {
  case $(basename "$1") in
  ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*) return 0 ;;
  libstdc++.so*|libgcc_s.so*) return 0 ;;
  libcuda.so*|libnvidia-*|libcudart.so*|libcublas*.so*|libnccl.so*) return 0 ;;
  esac
  return 1
}

# The shared libraries files $@ load, one path a line (ldd: the closure).
closure() {
  for f in "$@"; do ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'; done | sort -u
}

# The programs the bundle carries: the tests' and benchmarks' own, and
# every tool a GPU test runs as $BIN/NAME (test_gpu_logits' bpe_tool was
# missing once, found only on the GPU).
bundled_programs() {
  {
    printf '%s\n' dagrun kernel_check gpt_cuda_check gpu_train kernel_bench model_logits comm_check
    grep -oh '\$BIN/[a-z_]*' tests/gpu/*.sh | sed 's|^\$BIN/||'
  } | sort -u
}

check() {
  local dir=$1 t
  t=$(mktemp -d)
  tar xf "$dir/dagrun-gpu.tar.xz" -C "$t"
  local b=$t/dagrun-gpu
  # shellcheck disable=SC1091
  . "$b/env.sh"
  # 1. Every ELF file resolves every library, and outside the bundle only
  # to the ones left to the machine.
  local bad=0 f lib
  while IFS= read -r f; do
    while IFS= read -r lib; do
      case $lib in
      "$b"/*) ;;
      *) system_lib "$lib" || { echo "check: $f loads $lib from outside the bundle"; bad=1; } ;;
      esac
    done < <(closure "$f")
    if ldd "$f" 2>/dev/null | grep -q 'not found'; then
      echo "check: $f: $(ldd "$f" | grep 'not found' | head -3)"
      bad=1
    fi
  done < <(find "$b" -type f \( -name '*.so*' -o -perm -u+x \) -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
  # 2. Every program is there, for the tests that run it.
  for f in $(bundled_programs); do
    [ -x "$b/build/bin/$f" ] || { echo "check: no build/bin/$f in the bundle"; bad=1; }
  done
  # 3. The relocated mpirun runs the comm layer's check on two ranks, and
  # nothing it or the ranks load at run time (Open MPI's, PMIx's plugins)
  # comes from this machine but the libraries left to the target.
  # The loader's trace: one file per process (LD_DEBUG_OUTPUT), so that
  # the processes' lines do not interleave.
  local out trace=$t/ld-trace
  mkdir -p "$trace"
  out=$(LD_DEBUG=files LD_DEBUG_OUTPUT=$trace/p mpirun -np 2 --oversubscribe \
    --bind-to none "$b/build/bin/comm_check" mpi 2>&1) ||
    { echo "check: comm_check under the bundle's mpirun failed: $(tail -5 <<<"$out")"; bad=1; }
  grep -q "comm_check: mpi size 2: ok" <<<"$out" ||
    { echo "check: comm_check did not pass under the bundle's mpirun"; bad=1; }
  grep -qh "file=$b/deps/mpi/lib" "$trace"/p.* ||
    { echo "check: mpirun loaded no plugin from the bundle"; bad=1; }
  while IFS= read -r lib; do
    system_lib "$lib" || { echo "check: loaded at run time from outside the bundle: $lib"; bad=1; }
  done < <(grep -oh 'file=/[^ ]*' "$trace"/p.* | sed 's/^file=//' | grep -v "^$b/" | sort -u)
  # 4. The programs start: dagrun loads every stage of the main pipeline
  # (check), the engine's test its CUDA and NCCL libraries.
  "$b/build/bin/dagrun" check "$root/dags/pretrain.yaml" >"$t/check.out" 2>&1 ||
    { echo "check: dagrun check dags/pretrain.yaml: $(tail -3 "$t/check.out")"; bad=1; }
  "$b/build/bin/gpt_cuda_check" estimate >"$t/est.out" 2>&1 ||
    { echo "check: gpt_cuda_check estimate: $(tail -3 "$t/est.out")"; bad=1; }
  "$b/build/bin/gpt_cuda_check" nccl-version >"$t/nccl.out" 2>&1 ||
    { echo "check: gpt_cuda_check nccl-version: $(tail -3 "$t/nccl.out")"; bad=1; }
  local nccl
  nccl=$(cat "$t/nccl.out" 2>/dev/null)
  rm -rf "$t"
  if [ "$bad" != 0 ]; then
    echo "bundle check: FAILED"
    return 1
  fi
  echo "bundle check: ok (every library found, mpirun relocated, dagrun loads its stages, NCCL $nccl)"
}

case ${1:-} in
--check)
  check "${2:-.gpu}"
  exit
  ;;
--self-test)
  [ -n "${2:-}" ] || { echo "usage: tests/gpu/bundle.sh --self-test BUILD_DIR" >&2; exit 2; }
  tmp=$(mktemp -d)
  # The fastest compression: this bundle goes nowhere.
  XZ_OPT=-0 "$0" --build "$2" "$tmp" && check "$tmp"
  rc=$?
  rm -rf "$tmp"
  exit $rc
  ;;
--build)
  build=$(cd "${2:?--build DIR}" && pwd)
  shift 2
  ;;
*)
  build=$root/build-gpu-bundle
  scripts/build.sh "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDAGRUN_WERROR=OFF
  ;;
esac
out=${1:-.gpu}
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -x "$build/bin/kernel_check" ] || { echo "bundle: $build has no CUDA backend (nvcc not found?)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
b=$work/dagrun-gpu
mkdir -p "$b/build/bin" "$b/build/lib" "$b/build/tests" "$b/deps/lib" "$b/deps/mpi/bin" \
  "$b/deps/mpi/lib/x86_64-linux-gnu/openmpi/lib" "$b/deps/mpi/share"
for t in $(bundled_programs); do
  [ -x "$build/bin/$t" ] && cp "$build/bin/$t" "$b/build/bin/"
done
cp -r "$build/lib/dagrun" "$b/build/lib/"
[ -d "$build/tests/plugins" ] && cp -r "$build/tests/plugins" "$b/build/tests/"
cp "$build/CMakeCache.txt" "$b/build/"

# Open MPI as Debian lays it out under /usr, under deps/mpi (OPAL_PREFIX
# relocates it): mpirun (orterun), orted, the plugins, the help texts;
# PMIx's plugins beside them (PMIX_INSTALL_PREFIX).
cp -L /usr/bin/orterun "$b/deps/mpi/bin/mpirun"
cp -L /usr/bin/orted "$b/deps/mpi/bin/"
cp -rL /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 "$b/deps/mpi/lib/x86_64-linux-gnu/openmpi/lib/"
cp -rL /usr/lib/x86_64-linux-gnu/pmix2 "$b/deps/mpi/lib/x86_64-linux-gnu/"
cp -r /usr/share/openmpi "$b/deps/mpi/share/"
[ -d /usr/share/pmix ] && cp -r /usr/share/pmix "$b/deps/mpi/share/"

elves=$(find "$b" -type f \( -name '*.so*' -o -perm -u+x \) -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
# The closure's closure: a library's own needs are in ldd's answer already.
# shellcheck disable=SC2086
closure $elves | while IFS= read -r lib; do
  system_lib "$lib" || cp -L "$lib" "$b/deps/lib/"
done

cat > "$b/env.sh" <<'E'
# Sourced: the environment that runs the bundle's programs (tests/gpu/bundle.sh).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=$(command -v python3 || true)
# CUDA's libraries: the toolkit's, then those of python3's nvidia packages
# (PyTorch's cudart, cuBLAS, NCCL, cuDNN and the NVRTC its fused
# attention compiles with).
nv=$(
  [ -n "$py" ] && "$py" - <<'P' 2>/dev/null
import glob, os, site
dirs = []
for s in site.getsitepackages():
    for lib in ("libnccl.so.2", "libcublasLt.so.13", "libcudart.so.13",
                "libcudnn.so.9", "libnvrtc.so.13"):
        for f in glob.glob(os.path.join(s, "nvidia", "**", lib), recursive=True):
            d = os.path.dirname(f)
            if d not in dirs:
                dirs.append(d)
print(":".join(dirs))
P
)
export LD_LIBRARY_PATH=$here/deps/lib:/usr/local/cuda/lib64${nv:+:$nv}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$here/deps/mpi/bin:$PATH
# Open MPI and PMIx relocated (Debian's layout under deps/mpi); hwloc's
# optional topology plugins not carried (an empty path: none loaded).
export OPAL_PREFIX=$here/deps/mpi
export PMIX_PREFIX=$here/deps/mpi/lib/x86_64-linux-gnu/pmix2
export PMIX_PKGLIBDIR=$PMIX_PREFIX/lib/pmix
export HWLOC_PLUGINS_PATH=$here/deps/hwloc-plugins
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -n "$py" ] && export DAGRUN_TEST_PYTHON=$py
E
tar cJf "$out/dagrun-gpu.tar.xz" -C "$work" dagrun-gpu
echo "bundle: $out/dagrun-gpu.tar.xz ($(du -h "$out/dagrun-gpu.tar.xz" | cut -f1)); unpacked $(du -sh "$b" | cut -f1)"
