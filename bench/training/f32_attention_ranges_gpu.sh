#!/usr/bin/env bash
# The f32 attention's causal query ranges (Note [f32 attention by GEMMs] in src/backend/cuda/attention_gemm.cu):
# GPT-2 124M B16 T1024 in f32 with TT_F32_ATTENTION_RANGES = 1, 2, 4 and 8, each with --profile (the attention ops'
# time a step). One log per run in OUTDIR, packed in OUTDIR/results.tgz; the summary lines on stdout.
#   bench/training/f32_attention_ranges_gpu.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: bench/training/f32_attention_ranges_gpu.sh OUTDIR}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
tt_gpu_tiertrain
tt_random_shard
for n in 1 2 4 8; do
  TT_F32_ATTENTION_RANGES=$n "$TT" train --layers 12 --dim 768 --heads 12 --seq 1024 --batch 16 --dtype f32 \
    --data "$SHARD" --steps 12 --warmup 3 --eval-every 0 --log-every 100 --profile > "$OUT/ranges_$n.log" 2>&1
  echo "ranges $n: $(grep -o 'median.*' "$OUT/ranges_$n.log" | head -n 1);" \
    "$(grep -E '^ +attention_(forward|backward)' "$OUT/ranges_$n.log" | awk '{printf "%s %s ms; ", $1, $2}')"
done
tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true
