#!/usr/bin/env bash
# The main job: a Release build, then training the default GPT on the default corpus (Debian's fortunes), on the GPU
# when the CUDA backend can use one and on the CPU backend otherwise (800 steps there: about 2 minutes on 2 cores).
# The run keeps everything in runs/<date-time>/ (Note [run folder] in src/exec/train_config.h: the resolved config,
# metrics.jsonl as it goes, metrics.json, the final checkpoint, and the sample of text it prints at the end).
# Extra arguments go to `tiertrain train`.
#   scripts/train.sh                      # defaults (tiertrain --print-config lists them)
#   scripts/train.sh --steps 2000 --run-dir runs/long
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
tt_install_deps
cmake --preset release >/dev/null
cmake --build --preset release --target tiertrain
run_dir=(--run-dir auto)
for a in "$@"; do case $a in --run-dir|--run-dir=*) run_dir=() ;; esac; done
exec build/release/src/tiertrain train "${run_dir[@]}" "$@"
