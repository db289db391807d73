#!/usr/bin/env bash
# Issue 20: bench/um/prefetch_rate.cu (how fast the driver migrates managed memory, whole, in chunks over several
# streams, batched; against cudaMemcpyAsync to pinned memory) with each advice, on one GPU. Managed memory is never
# more than half the free memory (the program refuses otherwise). Writes OUTDIR/prefetch_rate_ADVICE.txt.
#   bench/um/prefetch_rate.sh OUTDIR [MiB, default 4096] [reps, default 3]
set -uo pipefail
OUT=${1:?usage: bench/um/prefetch_rate.sh OUTDIR [MiB] [reps]}
mib=${2:-4096}
reps=${3:-3}
mkdir -p "$OUT"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" -O2 -std=c++17 -arch=sm_90 -o "$OUT/prefetch_rate" "$(dirname "$0")/prefetch_rate.cu" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv > "$OUT/machine.txt" 2>&1
status=0
for advice in ${TT_UM_ADVICE:-none accessed-by-host preferred-device}; do
  timeout 300 "$OUT/prefetch_rate" "$mib" "$reps" "$advice" > "$OUT/prefetch_rate_$advice.txt" 2>&1 || status=1
  cat "$OUT/prefetch_rate_$advice.txt"
done
rm -f "$OUT/prefetch_rate"
exit $status
