#!/usr/bin/env bash
# cuDNN's fused attention on one GPU, in one call (issue 23, docs/design/cudnn-attention.md): build everything
# (Release, sm_90, tests included), the tests that exercise it (our declarations against cuDNN's header; the loader and
# graph data; BackendOps.Attention under our kernels and attention_impl=cudnn against the CPU; cuDNN against our
# kernels; the backward bit-identical over runs; the bit-exact GPU trainer tests, which take cuDNN where it loads),
# then the step time of tiertrain with attention_impl=native and =cudnn against torch.compile at GPT-2 124M B16 T1024
# and GPT d4096 L16 T2048 B8, and op profiles of the cuDNN runs.
#
#   bench/training/cudnn_gpu.sh OUTDIR [tests|bench|all]
#
# OUTDIR gets ctest.log, one JSON and log per run, profile_*.txt, results.md / results.json (gpu_summary.py) and
# everything packed in results.tgz; TT_ONLY_ARCHIVE=1 leaves only results.md and results.tgz.
set -uo pipefail
OUT=${1:?usage: bench/training/cudnn_gpu.sh OUTDIR [tests|bench|all]}
part=${2:-all}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
{ nvidia-smi; nvcc --version; python3 -c 'import torch; print("torch", torch.__version__)'; } > "$OUT/machine.txt" 2>&1
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
status=0
pack() {
  python3 bench/training/gpu_summary.py "$OUT" > /dev/null 2>&1 || true
  tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true
}
trap pack EXIT

start=$(date +%s)
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERTRAIN_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  ${cmake_prefix:+-DCMAKE_PREFIX_PATH=$cmake_prefix} > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; exit 1; }
grep -i cudnn "$OUT/configure.log"
targets=(tiertrain)
[ "$part" != bench ] && targets+=(cudnn_test cudnn_header_test backend_ops_test trainer_test gpt_golden_test host_stream_test)
cmake --build build/gpu -j "$(nproc)" -- -k 0 "${targets[@]}" > "$OUT/build.log" 2>&1 || { status=1; grep -B2 -A12 "error" "$OUT/build.log" | head -60; }
echo "build: $(( $(date +%s) - start )) s"
TT=build/gpu/src/tiertrain

if [ "$part" != bench ]; then
  start=$(date +%s)
  for t in cudnn_header_test cudnn_test backend_ops_test gpt_golden_test host_stream_test; do
    [ -x build/gpu/tests/$t ] || { echo "$t: not built"; status=1; continue; }
    build/gpu/tests/$t --gtest_brief=1 > "$OUT/test_$t.log" 2>&1 || status=1
    echo "$t: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_$t.log" | tr '\n' ' ') $(grep -c '^\[  FAILED' "$OUT/test_$t.log") failed lines"
  done
  TIERTRAIN_DEBUG=INFO TIERTRAIN_DEBUG_SUBSYS=PERF build/gpu/tests/trainer_test --gtest_filter='TrainerCuda*' \
    > "$OUT/test_trainer_cuda.log" 2>&1 || status=1
  echo "trainer_test TrainerCuda*: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$OUT/test_trainer_cuda.log" | tr '\n' ' ')"
  grep -h -E "cuDNN|cudnn|FAILED|Failure" "$OUT"/test_*.log | sort | uniq -c | sort -rn | head -25
  echo "tests: $(( $(date +%s) - start )) s"
fi

if [ "$part" != tests ]; then
  tt_random_shard
  run() {  # NAME STEPS FLAGS...
    local name=$1 steps=$2
    shift 2
    TIERTRAIN_DEBUG=INFO TIERTRAIN_DEBUG_SUBSYS=PERF "$TT" train "$@" --data "$SHARD" --steps "$steps" --warmup 5 \
      --eval-every 0 --log-every 10 --metrics-out "$OUT/tiertrain_$name.json" > "$OUT/tiertrain_$name.log" 2>&1 ||
      { echo "tiertrain $name failed"; tail -5 "$OUT/tiertrain_$name.log"; status=1; }
    echo "tiertrain $name: $(grep -o 'median.*' "$OUT/tiertrain_$name.log" | head -n 1) | $(grep -m1 -o 'attention B[^:]*: [^,]*' "$OUT/tiertrain_$name.log")"
  }
  torch_run() {  # NAME FLAGS...
    local name=$1
    shift
    python3 bench/training/torch_gpt_gpu.py "$@" --json-out "$OUT/torch_$name.json" > "$OUT/torch_$name.log" 2>&1 ||
      { echo "torch $name failed"; tail -5 "$OUT/torch_$name.log"; status=1; }
    echo "torch $name: $(tail -n 1 "$OUT/torch_$name.log" | cut -c1-160)"
  }
  g=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16)
  d=(--layers 16 --dim 4096 --heads 32 --seq 2048 --batch 8)
  run gpt2_b16_cudnn 40 "${g[@]}" --attention-impl cudnn
  run gpt2_b16_native 40 "${g[@]}" --attention-impl native
  "$TT" train "${g[@]}" --attention-impl cudnn --data "$SHARD" --steps 12 --warmup 2 --eval-every 0 --log-every 100 \
    --profile > "$OUT/profile_tiertrain_cudnn_gpt2_b16.txt" 2>&1 || status=1
  torch_run gpt2_b16_compile "${g[@]}" --steps 40 --warmup-steps 15 --mode bf16 --compile
  pack
  run d4096_cudnn 15 "${d[@]}" --attention-impl cudnn
  run d4096_native 15 "${d[@]}" --attention-impl native
  "$TT" train "${d[@]}" --attention-impl cudnn --data "$SHARD" --steps 6 --warmup 2 --eval-every 0 --log-every 100 \
    --profile > "$OUT/profile_tiertrain_cudnn_d4096.txt" 2>&1 || status=1
  torch_run d4096_compile "${d[@]}" --steps 14 --warmup-steps 6 --mode bf16 --compile
  pack
  cat "$OUT/results.md" 2>/dev/null
  grep -h -E "attention_(forward|backward) " "$OUT"/profile_tiertrain_cudnn_*.txt | head -8
fi
pack
if [ "${TT_ONLY_ARCHIVE:-0}" = 1 ]; then
  find "$OUT" -maxdepth 1 -type f ! -name results.tgz ! -name results.md -delete
  find "$OUT" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
fi
exit $status
