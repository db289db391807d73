#!/usr/bin/env bash
# Where the CPU optimizer's step goes on a GPU machine (issue 19: the performance model predicted plans with the CPU
# optimizer 0-36% fast; Notes [host threads beside a GPU] in src/host/adamw.h and [a cold host update] in
# src/perf/calibrate.cc). Builds tiertrain, calibrates the GPT-2 and GPT d1024 shapes, then traces runs with the
# CPU optimizer with the default team (every core but one) and with --threads of every core and of all but two, so
# that each host update's span in the trace can be set beside its calibrated time (bench/perf/host_opt_summary.py),
# and prints the model's prediction of the same runs.
#
#   bench/perf/host_opt_gpu.sh OUTDIR
#
# OUTDIR gets profile*.json, train_<name>.txt, trace_<name>.json.gz, metrics_<name>.json, plan_*.txt, all packed in
# results.tgz.
set -euo pipefail
OUT=${1:?usage: bench/perf/host_opt_gpu.sh OUTDIR}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
cores=$(nproc)
{ nvidia-smi; nvcc --version; lscpu; } > "$OUT/machine.txt" 2>&1 || true
tt_gpu_tiertrain
export XDG_CACHE_HOME=/tmp/tiertrain-hostopt-cache
rm -rf "$XDG_CACHE_HOME"
tt_random_shard
gpt2=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16)
d1024=(--layers 16 --dim 1024 --heads 16 --seq 2048 --batch 8)
common=(--data "$SHARD" --eval-every 0 --steps 8 --warmup 1)

"$TT" calibrate "${gpt2[@]}" --data "$SHARD" --out "$OUT/profile.json" > "$OUT/calibrate.txt" 2>&1 ||
  { tail -5 "$OUT/calibrate.txt"; exit 1; }
"$TT" calibrate "${d1024[@]}" --data "$SHARD" --out "$OUT/profile_d1024.json" > "$OUT/calibrate_d1024.txt" 2>&1 ||
  { tail -5 "$OUT/calibrate_d1024.txt"; exit 1; }

run() {  # NAME FLAGS...
  local name=$1
  shift
  "$TT" train "${common[@]}" "$@" --trace "$OUT/trace_$name.json" --metrics-out "$OUT/metrics_$name.json" \
    > "$OUT/train_$name.txt" 2>&1 || echo "$name failed"
  echo "$name: $(grep -o 'median.*' "$OUT/train_$name.txt" | head -n 1)"
  gzip -f "$OUT/trace_$name.json" 2>/dev/null || true
}
for t in 0 "$cores" $((cores - 2)); do
  run "gpt2_incore_t$t" "${gpt2[@]}" --plan in-core --optimizer cpu --threads "$t"
  run "d1024_incore_t$t" "${d1024[@]}" --plan in-core --optimizer cpu --threads "$t"
  run "d1024_norms_8g_t$t" "${d1024[@]}" --plan swap-attention-recompute-mlp-norms --optimizer cpu \
    --device-budget 8GiB --threads "$t"
done
# The model's prediction of the same runs, from the same profiles.
"$TT" plan "${gpt2[@]}" --data "$SHARD" --machine-profile "$OUT/profile.json" --plans in-core/cpu,in-core/device \
  > "$OUT/plan_gpt2.txt" 2>&1 || echo "plan gpt2 failed"
"$TT" plan "${d1024[@]}" --data "$SHARD" --machine-profile "$OUT/profile_d1024.json" --device-budget 8GiB \
  --plans swap-attention-recompute-mlp-norms/cpu > "$OUT/plan_d1024_8g.txt" 2>&1 || echo "plan d1024 failed"
"$TT" plan "${d1024[@]}" --data "$SHARD" --machine-profile "$OUT/profile_d1024.json" --plans in-core/cpu \
  > "$OUT/plan_d1024.txt" 2>&1 || echo "plan d1024 failed"
tail -n 4 "$OUT"/plan_*.txt
tar czf /tmp/results.tgz -C "$OUT" . && mv /tmp/results.tgz "$OUT/results.tgz"
find "$OUT" -type f ! -name 'results.tgz' -delete
