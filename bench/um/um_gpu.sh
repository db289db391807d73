#!/usr/bin/env bash
# Unified Memory placements on one GPU (issue 20), in one call: build (Release, sm_90) tiertrain and the tests that
# run managed plans; the GPU trainer test that checks every plan (um, um-advised, um-swap-activations among them) bit
# for bit against in-core in f32 and bf16; compute-sanitizer memcheck over short managed runs; then the step time,
# device peak and managed bytes of in-core, swap-activations, um-swap-activations, um and um-advised on two models.
# Managed memory is never oversubscribed here (--um-allow-oversubscription is never given).
#
#   bench/um/um_gpu.sh OUTDIR [tests|bench|all]
#
# OUTDIR gets the logs, one JSON per run, results.md (a table) and everything packed in results.tgz.
set -uo pipefail
OUT=${1:?usage: bench/um/um_gpu.sh OUTDIR [tests|bench|all]}
part=${2:-all}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
nvidia-smi > "$OUT/machine.txt" 2>&1
status=0
pack() { tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true; }
trap pack EXIT
start=$(date +%s)
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERTRAIN_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  ${cmake_prefix:+-DCMAKE_PREFIX_PATH=$cmake_prefix} > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; exit 1; }
targets=(tiertrain)
[ "$part" != bench ] && targets+=(trainer_test um_test)
cmake --build build/gpu -j "$(nproc)" -- -k 0 "${targets[@]}" > "$OUT/build.log" 2>&1 ||
  { status=1; grep -B2 -A12 "error" "$OUT/build.log" | head -60; }
echo "build: $(( $(date +%s) - start )) s"
TT=build/gpu/src/tiertrain

if [ "$part" != bench ]; then
  start=$(date +%s)
  build/gpu/tests/um_test --gtest_brief=1 > "$OUT/test_um.log" 2>&1 || status=1
  echo "um_test: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_um.log" | tr '\n' ' ')"
  # TT_TEST_REPEAT (default 1): the plans' bit-identity test that many times (a UM race shows now and then:
  # docs/benchmarks/2026-12-02-h200-um-race/).
  build/gpu/tests/trainer_test --gtest_filter='TrainerCuda.PlansMatchInCore' --gtest_repeat="${TT_TEST_REPEAT:-1}" \
    > "$OUT/test_trainer_plans.log" 2>&1 || status=1
  echo "TrainerCuda.PlansMatchInCore x${TT_TEST_REPEAT:-1}: $(grep -c '^\[       OK \] TrainerCuda' "$OUT/test_trainer_plans.log") passed, $(grep -c '^\[  FAILED  \] TrainerCuda.PlansMatchInCore (' "$OUT/test_trainer_plans.log") failed"
  grep -A9 Failure "$OUT/test_trainer_plans.log" | grep -E 'trainer_test.cc:[0-9]+: [^F]' | sort | uniq -c | head -10
  tt_random_shard
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for plan in um um-advised um-swap-activations; do
    timeout 300 "$SAN" --tool memcheck --leak-check no --error-exitcode 9 "$TT" train --layers 4 --dim 128 --heads 2 \
      --seq 64 --batch 4 --data "$SHARD" --steps 3 --warmup 1 --eval-every 2 --plan "$plan" \
      > "$OUT/memcheck_$plan.log" 2>&1
    echo "memcheck $plan: rc $? | $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_$plan.log" | tail -1)"
  done
  echo "tests: $(( $(date +%s) - start )) s"
fi

if [ "$part" != tests ]; then
  tt_random_shard
  run() {  # NAME STEPS FLAGS...
    local name=$1 steps=$2
    shift 2
    "$TT" train "$@" --data "$SHARD" --dry-run > "$OUT/dry_$name.log" 2>&1
    "$TT" train "$@" --data "$SHARD" --steps "$steps" --warmup 5 --eval-every 0 --log-every 10 \
      --metrics-out "$OUT/tiertrain_$name.json" > "$OUT/tiertrain_$name.log" 2>&1 ||
      { echo "tiertrain $name failed"; tail -5 "$OUT/tiertrain_$name.log"; status=1; }
    echo "$name: $(grep -o 'median.*' "$OUT/tiertrain_$name.log" | head -n 1) | need $(grep -o 'needs [^(]*' "$OUT/dry_$name.log" | head -1)| $(grep -o 'managed memory[^;]*' "$OUT/dry_$name.log" | head -1)"
  }
  g=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16)
  d=(--layers 16 --dim 2048 --heads 16 --seq 2048 --batch 8)
  for plan in in-core swap-activations um-swap-activations um-advised um; do
    run "gpt2_$plan" 30 "${g[@]}" --plan "$plan"
  done
  run "gpt2_um-swap-no-discard" 30 "${g[@]}" --plan bench/um/plans/offload-no-discard.json
  "$TT" train "${g[@]}" --plan um-swap-activations --data "$SHARD" --steps 6 --warmup 2 --eval-every 0 \
    --log-every 100 --trace "$OUT/trace_gpt2_um_swap.json" > "$OUT/trace_gpt2_um_swap.log" 2>&1 || true
  "$TT" train "${g[@]}" --plan swap-activations --data "$SHARD" --steps 6 --warmup 2 --eval-every 0 \
    --log-every 100 --trace "$OUT/trace_gpt2_swap.json" > "$OUT/trace_gpt2_swap.log" 2>&1 || true
  pack
  for plan in in-core swap-activations um-swap-activations um-advised um; do
    run "d2048_$plan" 12 "${d[@]}" --plan "$plan"
  done
fi
pack
exit $status
