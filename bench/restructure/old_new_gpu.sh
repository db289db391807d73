#!/usr/bin/env bash
# On a GPU machine: this tree against an older source tree (issue 44: a restructuring changes no output).
#   bench/restructure/old_new_gpu.sh OUTDIR OLD_SRC [check|speed]
# OLD_SRC is the older commit's sources (git archive C | tar -x -C .ab_old). `check` (the default): both built as
# bench/training/ab_step_time.sh builds them, the new build's GPU tests, and the same bits from both on the CUDA
# backend, f32 and bf16, over several plans (bench/restructure/same_bits.py: every step's loss and gradient norm, the
# validation losses, every tensor of the final checkpoint). `speed`: GPT-2 124M's step time old and new
# (ab_step_time.sh gpt2). Everything lands in OUTDIR/results.tgz, the summaries in OUTDIR/summary.txt.
set -uo pipefail
OUT=$(mkdir -p "${1:?usage: OUTDIR OLD_SRC [check|speed]}" && cd "$1" && pwd)
OLD=${2:?OLD_SRC}
WHAT=${3:-check}
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
pack() { tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz --exclude '*.ttf' . 2>/dev/null || true; }
trap pack EXIT
status=0
if [ "$WHAT" = check ]; then
  git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
  bench/training/ab_step_time.sh "$OUT" "$OLD" build | tee -a "$OUT/summary.txt" || exit 1
  [ -x build/gpu-old/src/tiertrain ] && [ -x build/gpu/src/tiertrain ] || { echo "a build failed" | tee -a "$OUT/summary.txt"; exit 1; }
  TT_CTEST_REGEX='Cuda|Dtypes/BackendOps|GptGolden|Sample\.|HostStream|AttentionCudnn|CommNccl' \
    bench/training/ab_step_time.sh "$OUT" "$OLD" tests | tee -a "$OUT/summary.txt"
  grep -q "GPU tests FAILED" "$OUT/summary.txt" && status=1
  PY=python3
  $PY -c 'import numpy' 2>/dev/null || $PY -m pip install -q --no-index .deps/wheels/numpy-*.whl 2>&1 | tail -2
  plans=in-core,in-core-selective,recompute,swap-activations,swap-attention-recompute-mlp-norms,offload-all,in-core/cpu,swap-activations/cpu,um-advised
  for dtype in f32 bf16; do
    echo "== same bits, CUDA backend, $dtype" | tee -a "$OUT/summary.txt"
    $PY bench/restructure/same_bits.py build/gpu-old/src/tiertrain build/gpu/src/tiertrain --out "$OUT/bits-$dtype" \
      --backend cuda --plans "$plans" --extra "--dtype $dtype" | tee -a "$OUT/summary.txt" || status=1
  done
else
  TT_AB_REPEAT=${TT_AB_REPEAT:-2} bench/training/ab_step_time.sh "$OUT" "$OLD" gpt2 | tee -a "$OUT/summary.txt"
fi
exit $status
