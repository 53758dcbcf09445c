#!/usr/bin/env bash
# Configures and builds dagrun into build/ (or $1). Extra arguments go to
# cmake, e.g. scripts/build.sh build-asan -DDAGRUN_SANITIZE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
ninja -C "$dir"
