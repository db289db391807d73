#!/usr/bin/env bash
# The CPU optimizer's exchange through managed memory with the compute copy released after each segment's backward
# (plan key um.release_params, Note [managed optimizer exchange]), in one call on one GPU: build tiertrain and the
# tests; the GPU tests of the release (bit for bit against the CPU optimizer's copies) and of every plan; then
# GPT-2 124M B16 with explicit copies, default UM, the table + prefetch moving the compute copy whole
# (exchange-advice-prefetch) and releasing it (exchange-release-params), in alternating rounds
# (bench/um/um_exchange_rounds_gpu.sh; GPT d1024 L16 B8 too), page faults counted for each. TT_RELEASE_PART=single
# runs each once instead, then with --speculative-update (call 2 of docs/benchmarks/2026-12-03-h200-um-exchange-release,
# whose plans then had other names: its "no-discard" plan moved the compute copy whole, its
# "exchange-advice-prefetch" released it).
#
#   bench/um/um_exchange_release_gpu.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: bench/um/um_exchange_release_gpu.sh OUTDIR}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
export TT_COMMIT  # (to the scripts below, when set)
# (tt_gpu_build: tests on, whatever a previous configure of build/gpu left in its cache)
tt_gpu_build "$OUT" tiertrain trainer_test um_test || exit 1
build/gpu/tests/um_test --gtest_brief=1 > "$OUT/test_um.log" 2>&1
echo "um_test: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_um.log" | tr '\n' ' ')"
timeout 300 build/gpu/tests/trainer_test --gtest_brief=1 \
  --gtest_filter='TrainerCuda.ManagedExchangeReleasesTheComputeCopyBitForBit:TrainerCuda.PlansMatchInCore' \
  > "$OUT/test_trainer.log" 2>&1
echo "trainer_test: $(grep -E '^\[  (PASSED|FAILED)|^\[  FAILED  \] ' "$OUT/test_trainer.log" | tr '\n' ' ')"
export TT=build/gpu/src/tiertrain
if [ "${TT_RELEASE_PART:-rounds}" = single ]; then  # call 2: one run each, then with speculation
  P="exchange-default-um exchange-advice-prefetch exchange-release-params"
  TT_MODELS=gpt2 TT_EXCHANGE_PLANS="$P" \
    TT_FAULT_PLANS="bench/um/plans/exchange-advice-prefetch.json bench/um/plans/exchange-release-params.json" \
    bench/um/um_exchange_gpu.sh "$OUT/plain"
  TT_MODELS=gpt2 TT_EXCHANGE_PLANS="$P" TT_FAULT_PLANS=" " TT_EXCHANGE_FLAGS="--speculative-update true" \
    bench/um/um_exchange_gpu.sh "$OUT/spec"
  TT_MODELS=d1024 TT_EXCHANGE_PLANS="exchange-default-um exchange-advice-prefetch" TT_FAULT_PLANS=" " \
    bench/um/um_exchange_gpu.sh "$OUT/d1024"
  exit 0
fi
# Alternating rounds (the default): GPT-2 three, d1024 two.
P="exchange-default-um exchange-advice-prefetch exchange-release-params"
TT_MODELS=gpt2 TT_EXCHANGE_PLANS="$P" bench/um/um_exchange_rounds_gpu.sh "$OUT/gpt2" 3
TT_MODELS=d1024 TT_EXCHANGE_PLANS="$P" bench/um/um_exchange_rounds_gpu.sh "$OUT/d1024" 2
