#!/usr/bin/env bash
# Issue 20: bench/um/discard_repro.cu over its modes and a few sizes, on one GPU (managed memory never more than half
# the free memory: the program refuses otherwise). Writes OUTDIR/discard_repro.log and a line per run in
# OUTDIR/discard_repro.txt.
#   bench/um/discard_repro.sh OUTDIR [STEPS]
set -uo pipefail
OUT=${1:?usage: bench/um/discard_repro.sh OUTDIR [STEPS]}
steps=${2:-200}
mkdir -p "$OUT"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" -O2 -std=c++17 -arch=sm_90 -o "$OUT/discard_repro" "$(dirname "$0")/discard_repro.cu" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv > "$OUT/machine.txt" 2>&1
# TT_REPRO_CONFIGS: block MiB:blocks:slots, comma-separated; TT_REPRO_MODES: the modes, space-separated.
IFS=, read -r -a configs <<< "${TT_REPRO_CONFIGS:-2:12:2,4:8:2,64:8:2,2:24:4}"
for c in "${configs[@]}"; do
  cfg=${c//:/ }
  for mode in ${TT_REPRO_MODES:-discard discard-dp dp-only evict dp-host dp-host-pf}; do
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    timeout 120 "$OUT/discard_repro" "$mode" $cfg "$steps" 64 >> "$OUT/discard_repro.log" 2>&1
    rc=$?
    line=$(grep RESULT "$OUT/discard_repro.log" | tail -1)
    printf '%s rc=%d seconds=%.1f\n' "$line" "$rc" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')" | tee -a "$OUT/discard_repro.txt"
  done
done
