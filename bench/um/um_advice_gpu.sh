#!/usr/bin/env bash
# The offloaded activations' advice (issue 20) at GPT-2 124M B16: um-swap-activations with no advice (the default
# table), mapped on the device, and preferring the host, against swap-activations' explicit copies.
#
#   bench/um/um_advice_gpu.sh OUTDIR      (builds build/gpu/src/tiertrain if it is missing; TT names another)
#
# TT_OFFLOAD_PLANS (shortcuts or plan files) replaces the list of plans.
set -uo pipefail
OUT=${1:?usage: bench/um/um_advice_gpu.sh OUTDIR}
source "$(dirname "$0")/../lib.sh"
tt_gpu_train_setup "$OUT" || exit 1
g=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16)
for plan in ${TT_OFFLOAD_PLANS:-swap-activations um-swap-activations bench/um/plans/offload-accessed-by-device.json \
            bench/um/plans/offload-preferred-host.json}; do
  name=$(basename "$plan" .json)
  "$TT" train "${g[@]}" --plan "$plan" --data "$SHARD" --steps 20 --warmup 5 --eval-every 0 --log-every 10 \
    --metrics-out "$OUT/tiertrain_$name.json" > "$OUT/tiertrain_$name.log" 2>&1 ||
    { echo "$name failed"; tail -3 "$OUT/tiertrain_$name.log"; }
  echo "$name: $(grep -o 'median.*' "$OUT/tiertrain_$name.log" | head -n 1)"
done
