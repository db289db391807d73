#!/usr/bin/env bash
# The GEMM survey (bench/training/gemm_survey.cu) at the shapes of the engine's workloads: GPT d4096 (16384 tokens a
# step, width 4096) and GPT-2 124M B16 (16384 tokens, width 768). Logs and JSON in OUTDIR, packed in
# OUTDIR/results.tgz; the table on stdout. A width "llama1b" surveys the Llama-3.2-1B shape's products instead (8192
# tokens: T 2048, B 4; d2048, qkv 3072, SwiGLU 8192, V 128256), and times the same products in PyTorch
# (bench/training/torch_gemms.py) beside them.
#   bench/training/gemm_survey_gpu.sh OUTDIR [WIDTHS (default "4096 768")]
set -uo pipefail
OUT=${1:?usage: bench/training/gemm_survey_gpu.sh OUTDIR [WIDTHS]}
WIDTHS=${2:-4096 768}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
tt_gpu_build "$OUT" gemm_survey || exit 1
for c in $WIDTHS; do
  if [ "$c" = llama1b ]; then
    shape=(--tokens 8192 --width 2048 --ffn 8192 --qkv 3072 --vocab 128256)
    build/gpu/bench/gemm_survey "${shape[@]}" --candidates 8 --reps 10 --json "$OUT/survey_$c.json" 2>&1 |
      tee "$OUT/survey_$c.log"
    python3 bench/training/torch_gemms.py "${shape[@]}" --reps 10 --json "$OUT/torch_$c.json" 2>&1 |
      tee "$OUT/torch_$c.log"
    continue
  fi
  build/gpu/bench/gemm_survey --tokens 16384 --width "$c" --candidates 16 --reps 10 --json "$OUT/survey_$c.json" \
    2>&1 | tee "$OUT/survey_$c.log"
done
tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true
