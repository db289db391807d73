#!/usr/bin/env bash
# The engine's speed against fair PyTorch baselines on one GPU (issue 23): the vocabulary padded to 50304 for both,
# fused AdamW, SDPA flash attention, bf16 autocast, eager, torch.compile and (GPT-2) torch.compile with
# max-autotune-no-cudagraphs; MFU beside tokens/s; op-by-op profiles of tiertrain (--profile) and of the compiled
# PyTorch run (torch.profiler, top kernels) to see where the gap is.
#
#   bench/training/engine_gpu.sh OUTDIR [PARTS]    (PARTS: "all" (default), or some of gpt2 d4096 fp32, e.g. "gpt2 d4096")
#
# gpt2: GPT-2 124M (L12 d768 T1024) at B16 and B32; d4096: GPT L16 d4096 T2048 B8 in-core; GPT-2 B16 and d4096 also
# with --plan in-core-selective (Note [rebuilt GELU]); fp32: GPT-2 B16 in f32 (attention by the fused 3xTF32 kernels,
# Note [3xTF32 attention], by cuBLAS GEMMs and by our SIMT kernels: --f32-attention) against PyTorch fp32 (TF32 off)
# eager and compiled, and tiertrain's f32 profile. TT_TORCH_MODES (default "eager compile autotune") picks the
# PyTorch runs of the gpt2 and d4096 parts; TT_D4096_VARIANTS (default "own_grads selective") the d4096 rows beside
# the default plan; TT_F32_PATHS (default "auto gemm simt") tiertrain's f32 attention paths; TT_ONLY_ARCHIVE=1 leaves only results.md and results.tgz in OUTDIR at the end.
# OUTDIR gets one JSON per run, the logs, the card's clock and power while each run went (gpu_*.csv), profile_*.txt,
# results.json and results.md (bench/training/gpu_summary.py), packed in results.tgz.
set -euo pipefail
OUT=${1:?usage: bench/training/engine_gpu.sh OUTDIR [all | gpt2 d4096 fp32 (some of them)]}
part=${2:-all}
has() { [ "$part" = all ] || [[ " $part " == *" $1 "* ]]; }
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
{ nvidia-smi; nvcc --version; python3 -c 'import torch; print("torch", torch.__version__)'; } > "$OUT/machine.txt" 2>&1 || true
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
tt_gpu_tiertrain
tt_random_shard
status=0
modes=" ${TT_TORCH_MODES:-eager compile autotune} "
pack() {  # the summary and the archive, again after each long part
  python3 bench/training/gpu_summary.py "$OUT" > /dev/null || status=1
  tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true
}

# The card's SM clock and power draw every 250 ms while a run goes (gpu_NAME.csv); the summary line gives their
# medians over the run's second half (its timed steps): a step bound by the card's power limit runs its GEMMs at a
# lower clock than one with idle gaps.
watch_start() {
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 250 > "$OUT/gpu_$1.csv" 2>/dev/null &
  watch_pid=$!
}
watch_stop() {
  kill "$watch_pid" 2>/dev/null || true
  wait "$watch_pid" 2>/dev/null || true
  python3 - "$OUT/gpu_$1.csv" <<'PY' || true
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    try:
        rows.append([float(x) for x in line.split(",")])
    except ValueError:
        pass
half = rows[len(rows) // 2:]
if half:
    print(f"  card: SM clock {statistics.median(r[0] for r in half):.0f} MHz, "
          f"power {statistics.median(r[1] for r in half):.0f} W (medians of {len(half)} samples)")
PY
}
tiertrain() {  # NAME STEPS FLAGS...
  local name=$1 steps=$2
  shift 2
  watch_start "tiertrain_$name"
  "$TT" train "$@" --data "$SHARD" --steps "$steps" --warmup 5 --eval-every 0 --log-every 10 \
    --metrics-out "$OUT/tiertrain_$name.json" > "$OUT/tiertrain_$name.log" 2>&1 ||
    { echo "tiertrain $name failed"; tail -5 "$OUT/tiertrain_$name.log"; status=1; }
  grep -o 'median.*' "$OUT/tiertrain_$name.log" | head -n 1 | sed "s/^/tiertrain $name: /"
  watch_stop "tiertrain_$name"
}
torch_run() {  # NAME FLAGS...
  local name=$1
  shift
  watch_start "torch_$name"
  python3 bench/training/torch_gpt_gpu.py "$@" --json-out "$OUT/torch_$name.json" > "$OUT/torch_$name.log" 2>&1 ||
    { echo "torch $name failed"; tail -5 "$OUT/torch_$name.log"; status=1; }
  tail -n 1 "$OUT/torch_$name.log" | cut -c1-200
  watch_stop "torch_$name"
}

if has gpt2; then
  for B in 16 32; do
    m=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch "$B")
    tiertrain "gpt2_b$B" 40 "${m[@]}"
    [ "$B" = 16 ] && tiertrain "gpt2_b${B}_selective" 40 "${m[@]}" --plan in-core-selective
    # (TT_GPT2_F32_GRADS=1: also with f32 weight gradients, the default before --grad-dtype auto: Note [bf16 gradients])
    [ "${TT_GPT2_F32_GRADS:-0}" = 1 ] && tiertrain "gpt2_b${B}_f32grads" 40 "${m[@]}" --grad-dtype f32
    [[ $modes == *" eager "* ]] && torch_run "gpt2_b${B}_eager" "${m[@]}" --steps 30 --mode bf16
    prof=()
    [ "$B" = 16 ] && prof=(--profile-out "$OUT/profile_torch_compile_gpt2_b16.txt")
    [[ $modes == *" compile "* ]] &&
      torch_run "gpt2_b${B}_compile" "${m[@]}" --steps 40 --warmup-steps 15 --mode bf16 --compile "${prof[@]}"
  done
  "$TT" train --layers 12 --dim 768 --heads 12 --seq 1024 --batch 16 --data "$SHARD" --steps 12 --warmup 2 \
    --eval-every 0 --log-every 100 --profile > "$OUT/profile_tiertrain_gpt2_b16.txt" 2>&1 || status=1
  pack
  # Autotuning takes minutes: last, so that a call's time limit leaves the rows above.
  for B in 16 32; do
    [[ $modes == *" autotune "* ]] || continue
    torch_run "gpt2_b${B}_autotune" --layers 12 --dim 768 --heads 12 --seq 1024 --batch "$B" --steps 40 \
      --warmup-steps 15 --mode bf16 --compile --compile-mode max-autotune-no-cudagraphs
    pack
  done
fi
if has d4096; then
  m=(--layers 16 --dim 4096 --heads 32 --seq 2048 --batch 8)
  tiertrain d4096 15 "${m[@]}"
  # TT_D4096_VARIANTS (default "own_grads selective"): the other d4096 rows ("" for the default plan alone).
  variants=" ${TT_D4096_VARIANTS-own_grads selective} "
  # Note [gradients in dead activations]: every gradient in a buffer of its own, as before it (same speed, more
  # memory).
  [[ $variants == *" own_grads "* ]] && tiertrain d4096_own_grads 15 "${m[@]}" --grads-in-activations false
  # Note [rebuilt GELU]: the GELU and LayerNorm outputs rebuilt in the backward (peak memory against PyTorch's).
  [[ $variants == *" selective "* ]] && tiertrain d4096_selective 15 "${m[@]}" --plan in-core-selective
  [[ $modes == *" eager "* ]] && torch_run d4096_eager "${m[@]}" --steps 12 --warmup-steps 4 --mode bf16
  [[ $modes == *" compile "* ]] && torch_run d4096_compile "${m[@]}" --steps 14 --warmup-steps 6 --mode bf16 \
    --compile --profile-out "$OUT/profile_torch_compile_d4096.txt"
  "$TT" train "${m[@]}" --data "$SHARD" --steps 6 --warmup 2 --eval-every 0 --log-every 100 --profile \
    > "$OUT/profile_tiertrain_d4096.txt" 2>&1 || status=1
fi
if has fp32; then
  m=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16)
  f32_paths=" ${TT_F32_PATHS:-auto gemm simt} "
  [[ $f32_paths == *" auto "* ]] && tiertrain gpt2_b16_f32 20 "${m[@]}" --dtype f32
  [[ $f32_paths == *" gemm "* ]] && tiertrain gpt2_b16_f32_gemm_attention 20 "${m[@]}" --dtype f32 --f32-attention gemm
  [[ $f32_paths == *" simt "* ]] && tiertrain gpt2_b16_f32_simt_attention 12 "${m[@]}" --dtype f32 --f32-attention simt
  torch_run gpt2_b16_fp32_eager "${m[@]}" --steps 20 --warmup-steps 5 --mode fp32 \
    --profile-out "$OUT/profile_torch_fp32_eager_gpt2_b16.txt"
  torch_run gpt2_b16_fp32_compile "${m[@]}" --steps 24 --warmup-steps 10 --mode fp32 --compile
  "$TT" train "${m[@]}" --dtype f32 --data "$SHARD" --steps 8 --warmup 2 --eval-every 0 --log-every 100 --profile \
    > "$OUT/profile_tiertrain_gpt2_b16_f32.txt" 2>&1 || status=1
fi
pack
cat "$OUT/results.md"
# TT_ONLY_ARCHIVE=1 (for the device tool, which brings back a few files a call): leave results.md and results.tgz.
if [ "${TT_ONLY_ARCHIVE:-0}" = 1 ]; then
  find "$OUT" -maxdepth 1 -type f ! -name results.tgz ! -name results.md -delete
fi
exit $status
