#!/usr/bin/env bash
# Sets up, builds and runs the main job on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
exec build/bin/dagrun dags/smoke.yaml "$@"
