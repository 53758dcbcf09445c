#!/usr/bin/env bash
# Installs what dagrun needs to build, test and benchmark, from Debian's
# archive. Safe to run again. Run as root, or with sudo available.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libuv1-dev libyaml-dev libcjson-dev
  # tests and benchmarks
  python3 jq snakemake time
)

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
  exit 0
fi
echo "setup: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
