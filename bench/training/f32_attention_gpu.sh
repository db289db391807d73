#!/usr/bin/env bash
# f32 attention's three paths (--f32-attention, backend/attention_options.h): GPT-2 124M B16 T1024 in f32 with the
# fused 3xTF32 kernels (auto, Note [3xTF32 attention]), cuBLAS SGEMMs (gemm, Note [f32 attention by GEMMs]) and the
# SIMT flash kernels (simt), each with --profile (the attention ops' time a step). One log per run in OUTDIR, packed in
# OUTDIR/results.tgz; a summary line per run on stdout.
#   bench/training/f32_attention_gpu.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: bench/training/f32_attention_gpu.sh OUTDIR}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
tt_gpu_tiertrain
tt_random_shard
status=0
# TT_F32_PATHS: the paths to run (default "auto gemm simt").
for path in ${TT_F32_PATHS:-auto gemm simt}; do
  steps=12
  [ "$path" = simt ] && steps=6
  "$TT" train --layers 12 --dim 768 --heads 12 --seq 1024 --batch 16 --dtype f32 --f32-attention "$path" \
    --data "$SHARD" --steps "$steps" --warmup 2 --eval-every 0 --log-every 100 --profile > "$OUT/f32_$path.log" 2>&1 ||
    status=1
  echo "f32_attention $path: $(grep -o 'median.*' "$OUT/f32_$path.log" | head -n 1);" \
    "$(grep -E '^ +attention_(forward|backward)' "$OUT/f32_$path.log" | awk '{printf "%s %s ms; ", $1, $2}')"
done
tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true
exit $status
