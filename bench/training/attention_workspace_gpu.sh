#!/usr/bin/env bash
# The cuDNN attention backward's batch chunks (Note [cudnn workspace] in src/backend/cuda/cudnn_sdpa.h) on GPT d4096
# L16 T2048 B8 in-core: the attention_workspace cap at 512 MiB (the default: 8 calls of one sequence), 1100 MiB (2
# calls of four) and 2100 MiB (the whole batch in one call), each timed (15 steps) and profiled (6 steps, --profile:
# the attention ops' time a step). Logs in OUTDIR, packed in OUTDIR/results.tgz; the summary lines on stdout.
#   bench/training/attention_workspace_gpu.sh OUTDIR [CAPS (default "512MiB 1100MiB 2100MiB")]
set -uo pipefail
OUT=${1:?usage: bench/training/attention_workspace_gpu.sh OUTDIR [CAPS]}
CAPS=${2:-512MiB 1100MiB 2100MiB}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
tt_gpu_tiertrain
tt_random_shard
m=(--layers 16 --dim 4096 --heads 32 --seq 2048 --batch 8 --data "$SHARD" --eval-every 0)
for cap in $CAPS; do
  "$TT" train "${m[@]}" --attention-workspace "$cap" --steps 15 --warmup 5 --log-every 10 \
    --metrics-out "$OUT/cap_$cap.json" > "$OUT/cap_$cap.log" 2>&1
  "$TT" train "${m[@]}" --attention-workspace "$cap" --steps 6 --warmup 2 --log-every 100 --profile \
    > "$OUT/cap_${cap}_profile.txt" 2>&1
  echo "attention_workspace $cap: $(grep -o 'median.*' "$OUT/cap_$cap.log" | head -n 1);" \
    "$(grep -o 'backward in chunks of [0-9]* sequences' "$OUT/cap_$cap.log" | head -n 1);" \
    "$(grep -E '^ +attention_(forward|backward)' "$OUT/cap_${cap}_profile.txt" | awk '{printf "%s %s ms; ", $1, $2}')"
done
tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true
find "$OUT" -maxdepth 1 -type f ! -name results.tgz -delete
