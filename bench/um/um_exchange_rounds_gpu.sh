#!/usr/bin/env bash
# The CPU optimizer's exchange (issue 20, item 4) measured in alternating rounds on one GPU, so that the machine's
# drift falls on every variant alike: explicit copies (in-core --optimizer cpu), default UM, and the exchange's
# advice variants with the schedule's prefetches; then each UM variant again for 6 steps of the same model with
# --um-counters (GPU and CPU page faults, migrated bytes per step; up to d5845e9 these runs were always GPT-2).
#
#   bench/um/um_exchange_rounds_gpu.sh OUTDIR [ROUNDS]      (ROUNDS: default 3)
#
# TT_MODELS (default "gpt2 d1024"), TT_EXCHANGE_PLANS (plan files in bench/um/plans) and TT_EXCHANGE_FLAGS as in
# um_exchange_gpu.sh. OUTDIR gets one log and JSON per run and rounds.txt (one line per run: model plan round ms).
set -uo pipefail
OUT=${1:?usage: bench/um/um_exchange_rounds_gpu.sh OUTDIR [ROUNDS]}
ROUNDS=${2:-3}
source "$(dirname "$0")/../lib.sh"
tt_gpu_train_setup "$OUT" || exit 1
: > "$OUT/rounds.txt"
P=bench/um/plans
PLANS=${TT_EXCHANGE_PLANS:-exchange-default-um exchange-advice-prefetch exchange-params-on-device exchange-grads-on-device exchange-both-on-device}
run() {  # NAME STEPS FLAGS...
  local name=$1 steps=$2
  shift 2
  "$TT" train "$@" ${TT_EXCHANGE_FLAGS:-} --data "$SHARD" --steps "$steps" --warmup 3 --eval-every 0 --log-every 10 \
    --metrics-out "$OUT/$name.json" > "$OUT/$name.log" 2>&1 || { echo "$name failed"; tail -3 "$OUT/$name.log"; }
}
ms() { grep -o 'median.*ms/step' "$OUT/$1.log" | grep -o '[0-9.]* ms/step' | cut -d' ' -f1; }  # the run's median step
for model in ${TT_MODELS:-gpt2 d1024}; do
  if [ $model = gpt2 ]; then m=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16); else
    m=(--layers 16 --dim 1024 --heads 16 --seq 1024 --batch 8); fi
  for r in $(seq 1 "$ROUNDS"); do
    run "${model}_copies_r$r" 20 "${m[@]}" --plan in-core --optimizer cpu
    echo "$model copies $r $(ms "${model}_copies_r$r")" | tee -a "$OUT/rounds.txt"
    for p in $PLANS; do
      run "${model}_${p}_r$r" 20 "${m[@]}" --plan "$P/$p.json"
      echo "$model $p $r $(ms "${model}_${p}_r$r")" | tee -a "$OUT/rounds.txt"
    done
  done
  for p in $PLANS; do
    run "faults_${model}_$p" 6 "${m[@]}" --plan "$P/$p.json" --um-counters
    echo "faults $model $p: $(grep -o 'GPU page faults.*' "$OUT/faults_${model}_$p.log" | head -1)" | tee -a "$OUT/rounds.txt"
  done
done
