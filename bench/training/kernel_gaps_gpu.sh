#!/usr/bin/env bash
# The GPU's idle time between kernels in a training step (docs/design/cuda-graph-step.md: what a CUDA graph of the
# step could at most remove), from the GPU's own timestamps: each run once without and once with the CUPTI trace of
# bench/training/kernel_gaps.cc (CUDA_INJECTION64_PATH), so that the trace's own cost shows in the step times.
#
#   bench/training/kernel_gaps_gpu.sh OUTDIR [RUNS]    (RUNS: some of gpt2_b16 gpt2_b32 d4096; default all three)
#
# TT_GAPS_FLAGS: more flags for every run (e.g. "--host-ahead false", to see the steps one at a time).
#
# CUPTI is taken from CUPTI_ROOT, the toolkit's extras/CUPTI, the Python environment's nvidia-cuda-cupti wheel
# (nvidia/cu13), or .deps/wheels/nvidia_cuda_cupti-*.whl (scripts/gpu_fetch_debs.sh), in that order.
# OUTDIR gets each run's log and metrics, the traces' summaries (gaps_NAME.txt, gaps_NAME.json) and results.tgz
# (the traces themselves, compressed).
set -euo pipefail
OUT=${1:?usage: bench/training/kernel_gaps_gpu.sh OUTDIR [gpt2_b16 gpt2_b32 d4096]}
runs=" ${2:-gpt2_b16 gpt2_b32 d4096} "
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
tt_gpu_tiertrain
tt_random_shard

cupti_root() {
  local d
  for d in "${CUPTI_ROOT:-}" "$(dirname "$(dirname "$(command -v nvcc)")")/extras/CUPTI"; do
    [ -n "$d" ] && [ -f "$d/include/cupti.h" ] && { echo "$d"; return; }
  done
  d=$(python3 -c 'import nvidia.cu13 as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  [ -n "$d" ] && [ -f "$d/include/cupti.h" ] && { echo "$d"; return; }
  local whl
  whl=$(ls .deps/wheels/nvidia_cuda_cupti-*.whl 2>/dev/null | head -n 1 || true)
  [ -n "$whl" ] || return 1
  rm -rf /tmp/tt-cupti && python3 -m zipfile -e "$whl" /tmp/tt-cupti
  echo /tmp/tt-cupti/nvidia/cu13
}
CUPTI=$(cupti_root) || { echo "no CUPTI found (CUPTI_ROOT, extras/CUPTI, nvidia-cuda-cupti)"; exit 1; }
cudainc=$(dirname "$(dirname "$(command -v nvcc)")")/include
cuptilib=$(ls -d "$CUPTI"/lib64 "$CUPTI"/lib 2>/dev/null | head -n 1 || true)
g++ -std=c++17 -O2 -fPIC -shared -I"$CUPTI/include" -I"$cudainc" bench/training/kernel_gaps.cc \
  -L"$cuptilib" -lcupti -Wl,-rpath,"$cuptilib" -o "$OUT/libkernel_gaps.so" 2> "$OUT/gaps_build.log" ||
  g++ -std=c++17 -O2 -fPIC -shared -I"$CUPTI/include" -I"$cudainc" bench/training/kernel_gaps.cc \
    "$cuptilib"/libcupti.so* -Wl,-rpath,"$cuptilib" -o "$OUT/libkernel_gaps.so" 2>> "$OUT/gaps_build.log" ||
  { echo "building the CUPTI tracer failed:"; tail -20 "$OUT/gaps_build.log"; exit 1; }
echo "CUPTI from $CUPTI" | tee "$OUT/cupti.txt"

status=0
one() {  # NAME TRACED STEPS FLAGS...
  local name=$1 traced=$2 steps=$3
  shift 3
  local log="$OUT/tiertrain_${name}_${traced}.log"
  local env=()
  [ "$traced" = traced ] && env=(CUDA_INJECTION64_PATH="$OUT/libkernel_gaps.so" TT_GAPS_OUT="$OUT/trace_$name.csv")
  # shellcheck disable=SC2086 # TT_GAPS_FLAGS is split into flags on purpose
  env "${env[@]}" "$TT" train "$@" --data "$SHARD" --steps "$steps" --warmup 5 --eval-every 0 --log-every 10 \
    ${TT_GAPS_FLAGS:-} --metrics-out "$OUT/tiertrain_${name}_${traced}.json" > "$log" 2>&1 ||
    { echo "tiertrain $name ($traced) failed"; tail -5 "$log"; status=1; return; }
  echo "tiertrain $name ($traced): $(grep -o 'median[^|]*' "$log" | head -n 1)"
}
gaps() {  # NAME FLAGS...
  local name=$1 steps=$2
  shift 2
  [[ $runs == *" $name "* ]] || return 0
  one "$name" plain "$steps" "$@"
  one "$name" traced "$steps" "$@"
  [ -f "$OUT/trace_$name.csv" ] || { echo "no trace for $name"; status=1; return; }
  python3 bench/training/kernel_gaps.py "$OUT/trace_$name.csv" --json "$OUT/gaps_$name.json" |
    tee "$OUT/gaps_$name.txt" || status=1
  gzip -f "$OUT/trace_$name.csv"
}
gpt2=(--layers 12 --dim 768 --heads 12 --seq 1024)
gaps gpt2_b16 40 "${gpt2[@]}" --batch 16
gaps gpt2_b32 30 "${gpt2[@]}" --batch 32
gaps d4096 10 --layers 16 --dim 4096 --heads 32 --seq 2048 --batch 8
rm -f "$OUT/libkernel_gaps.so"
tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true
exit $status
