#!/usr/bin/env bash
# The CPU optimizer's exchange with the GPU (issue 20, item 4) on one GPU: explicit copies (in-core --optimizer cpu)
# against the same update over managed memory (Note [managed optimizer exchange]) with default UM, advice only,
# advice and prefetch, and the pages mapped on both sides; then every UM plan again for a few steps with
# --um-counters (page faults and migrations per step; CUPTI). GPT-2 124M B16 and GPT d1024 L16 T1024 B8.
#
#   bench/um/um_exchange_gpu.sh OUTDIR      (builds build/gpu/src/tiertrain unless TT names one)
#
# TT_MODELS (default "gpt2 d1024"), TT_EXCHANGE_PLANS (plan files in bench/um/plans, default the four below) and
# TT_FAULT_PLANS (default: every UM plan below) pick a part; TT_EXCHANGE_FLAGS are added to every run (e.g.
# "--speculative-update true").
set -uo pipefail
OUT=${1:?usage: bench/um/um_exchange_gpu.sh OUTDIR}
source "$(dirname "$0")/../lib.sh"
tt_gpu_train_setup "$OUT" || exit 1
P=bench/um/plans
run() {  # NAME STEPS FLAGS...
  local name=$1 steps=$2
  shift 2
  "$TT" train "$@" ${TT_EXCHANGE_FLAGS:-} --data "$SHARD" --steps "$steps" --warmup 3 --eval-every 0 --log-every 10 \
    --metrics-out "$OUT/tiertrain_$name.json" > "$OUT/tiertrain_$name.log" 2>&1 ||
    { echo "$name failed"; tail -3 "$OUT/tiertrain_$name.log"; }
  echo "$name: $(grep -o 'median.*' "$OUT/tiertrain_$name.log" | head -n 1 | cut -c1-60) $(grep -o 'GPU page faults.*' "$OUT/tiertrain_$name.log" | head -1)"
}
pack() { tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true; }
trap pack EXIT
for model in ${TT_MODELS:-gpt2 d1024}; do
  if [ $model = gpt2 ]; then m=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16); else
    m=(--layers 16 --dim 1024 --heads 16 --seq 1024 --batch 8); fi
  run "${model}_copies" 20 "${m[@]}" --plan in-core --optimizer cpu
  for p in ${TT_EXCHANGE_PLANS:-exchange-default-um exchange-advice exchange-advice-prefetch exchange-mapped-prefetch}; do
    run "${model}_$p" 20 "${m[@]}" --plan "$P/$p.json"
  done
done
# Faults and migrations per step (counting costs time: separate short runs).
g=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16)
for p in ${TT_FAULT_PLANS:-um um-advised um-swap-activations $P/offload-preferred-host.json \
         $P/exchange-default-um.json $P/exchange-advice.json $P/exchange-advice-prefetch.json}; do
  run "faults_$(basename "$p" .json)" 6 "${g[@]}" --plan "$p" --um-counters
done
