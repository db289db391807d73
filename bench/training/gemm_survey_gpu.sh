#!/usr/bin/env bash
# The GEMM survey (bench/training/gemm_survey.cu) at the shapes of the engine's workloads: GPT d4096 (16384 tokens a
# step, width 4096) and GPT-2 124M B16 (16384 tokens, width 768). Logs and JSON in OUTDIR, packed in
# OUTDIR/results.tgz; the table on stdout.
#   bench/training/gemm_survey_gpu.sh OUTDIR [WIDTHS (default "4096 768")]
set -uo pipefail
OUT=${1:?usage: bench/training/gemm_survey_gpu.sh OUTDIR [WIDTHS]}
WIDTHS=${2:-4096 768}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
tt_gpu_build "$OUT" gemm_survey || exit 1
for c in $WIDTHS; do
  build/gpu/bench/gemm_survey --tokens 16384 --width "$c" --candidates 16 --reps 10 --json "$OUT/survey_$c.json" \
    2>&1 | tee "$OUT/survey_$c.log"
done
tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true
