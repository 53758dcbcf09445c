#!/usr/bin/env bash
# Sets up, builds and runs the main job on this machine: dags/pretrain.yaml
# on the default corpus (DAGRUN_CORPUS and DAGRUN_CORPUS_FORMAT change it).
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the build and the main job need; scripts/test.sh adds the
# tests' packages (scripts/setup.sh --tests).
scripts/setup.sh
scripts/build.sh build
exec build/bin/dagrun dags/pretrain.yaml "$@"
