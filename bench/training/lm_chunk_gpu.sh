#!/usr/bin/env bash
# The LM head's chunk size (Note [LM head in chunks] in model/gpt.h) against step time and peak memory on one GPU
# (issue 23): every chunk accumulates the f32 gradient of wte (V x C) once, so small chunks read and write it many
# times; large chunks hold more logits.
#
#   bench/training/lm_chunk_gpu.sh OUTDIR
#
# OUTDIR gets one log and JSON per run and results.md (gpu_summary.py), packed in results.tgz.
set -uo pipefail
OUT=${1:?usage: bench/training/lm_chunk_gpu.sh OUTDIR}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
tt_gpu_tiertrain
tt_random_shard
run() {  # NAME STEPS FLAGS...
  local name=$1 steps=$2
  shift 2
  "$TT" train "$@" --data "$SHARD" --steps "$steps" --warmup 5 --eval-every 0 --log-every 10 \
    --metrics-out "$OUT/tiertrain_$name.json" > "$OUT/tiertrain_$name.log" 2>&1 ||
    { echo "tiertrain $name failed"; tail -3 "$OUT/tiertrain_$name.log"; }
  echo "$name: $(grep -o 'median.*' "$OUT/tiertrain_$name.log" | head -n 1)"
}
g16=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16)
g32=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 32)
d=(--layers 16 --dim 4096 --heads 32 --seq 2048 --batch 8)
for rows in ${TT_CHUNKS:-0 1024 2048 4096 8192 16384}; do
  run "gpt2_b16_chunk$rows" 40 "${g16[@]}" --lm-chunk-rows "$rows"
done
for rows in ${TT_CHUNKS32:-0 4096 8192}; do
  run "gpt2_b32_chunk$rows" 40 "${g32[@]}" --lm-chunk-rows "$rows"
done
for rows in ${TT_CHUNKSD:-0 2048 4096}; do
  run "d4096_chunk$rows" 12 "${d[@]}" --lm-chunk-rows "$rows"
done
for rows in ${TT_PROFILE_CHUNKS:-0 4096}; do
  "$TT" train "${g16[@]}" --lm-chunk-rows "$rows" --data "$SHARD" --steps 12 --warmup 2 --eval-every 0 \
    --log-every 100 --profile > "$OUT/profile_gpt2_b16_chunk$rows.txt" 2>&1
  grep -E "lm_head|softmax_xent|ms/step in ops" "$OUT/profile_gpt2_b16_chunk$rows.txt" | sed "s/^/chunk $rows: /"
done
python3 bench/training/gpu_summary.py "$OUT" > /dev/null 2>&1 || true
tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true
cat "$OUT/results.md" 2>/dev/null | cut -c1-160
