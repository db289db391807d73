#!/usr/bin/env bash
# The main job: a Release build, then training the default GPT on the default corpus (Debian's fortunes), on the GPU
# when the CUDA backend can use one and on the CPU backend otherwise. Extra arguments go to `tiertrain train`.
#   scripts/train.sh                      # defaults (tiertrain --print-config lists them)
#   scripts/train.sh --steps 2000 --metrics-out run.json
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
tt_install_deps
cmake --preset release >/dev/null
cmake --build --preset release --target tiertrain
exec build/release/src/tiertrain train "$@"
