#!/usr/bin/env bash
# The performance model against measurement on one GPU (issue 19): builds tiertrain, calibrates the machine (timed),
# then `tiertrain plan --measure N` for each workload: every plan's predicted step beside its measured one.
#
#   bench/perf/plan_gpu.sh OUTDIR [WORKLOADS]
#     WORKLOADS of: gpt2 d1024 d1024_8 d2048 d2048_15 d4096 d4096_40 d4096_sweep heat trace
#     (default: gpt2 d2048 d4096 d4096_40)
#
# OUTDIR gets machine.txt, calibrate.txt, profile.json, plan_<workload>.txt (each with its progress lines) and
# clocks.csv (the SM clock and power, sampled every 500 ms while it ran), all also packed in results.tgz. "heat"
# calibrates the d4096 shapes with --heat 0, 0.2 and 1 and predicts the d4096 plans with each profile, beside an
# op-by-op profile of a d4096 run (Note [calibrating at sustained clocks] in src/perf/calibrate.h); "trace" writes a
# Chrome trace of GPT-2 with the CPU optimizer (its host stream's updates).
set -euo pipefail
OUT=${1:?usage: bench/perf/plan_gpu.sh OUTDIR [WORKLOADS]}
WORKLOADS=${2:-gpt2 d2048 d4096 d4096_40}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
{ nvidia-smi; nvcc --version; } > "$OUT/machine.txt" 2>&1 || true
tt_gpu_tiertrain
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 500 \
  > "$OUT/clocks.csv" 2>/dev/null &
SMI=$!
trap 'kill $SMI 2>/dev/null || true' EXIT
export XDG_CACHE_HOME=/tmp/tiertrain-plan-cache
rm -rf "$XDG_CACHE_HOME"
tt_random_shard

gpt2=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16)
d2048=(--layers 8 --dim 2048 --heads 16 --seq 2048 --batch 8)
d4096=(--layers 16 --dim 4096 --heads 32 --seq 2048 --batch 8)
d1024=(--layers 16 --dim 1024 --heads 16 --seq 2048 --batch 8)
common=(--data "$SHARD" --warmup 1)
secs() { echo $(( ($(date +%s%N) - $1) / 1000000 ))e-3; }

t0=$(date +%s%N)
"$TT" calibrate "${gpt2[@]}" "${common[@]}" --out "$OUT/profile.json" > "$OUT/calibrate.txt" 2>&1 ||
  { tail -5 "$OUT/calibrate.txt"; exit 1; }
echo "calibrate (the GPT-2 plans' shapes, links, host): $(secs "$t0") s"
tail -n 12 "$OUT/calibrate.txt"

plan() {  # NAME FLAGS...
  local name=$1 t
  shift
  t=$(date +%s%N)
  "$TT" plan "$@" "${common[@]}" > "$OUT/plan_$name.txt" 2>&1 || echo "plan $name failed"
  echo "== $name ($(secs "$t") s)"
  grep -v '^calibrate: [0-9]' "$OUT/plan_$name.txt" || true
}
d2048_plans=recompute/device,swap-activations/device,swap-attention-recompute-mlp/device
d2048_plans+=,swap-attention-recompute-mlp-norms/device,in-core/cpu,swap-attention-recompute-mlp-norms/cpu
d2048_plans+=,auto
d4096_plans=recompute/device,swap-attention-recompute-mlp/device,swap-attention-recompute-mlp-norms/device,auto
d4096_tight_plans=recompute/cpu,swap-attention-recompute-mlp-norms/cpu,offload-all/cpu,auto
for w in $WORKLOADS; do
  case $w in
    gpt2) plan gpt2 "${gpt2[@]}" --measure "${TT_MEASURE:-5}" --explain ;;
    d2048) plan d2048 "${d2048[@]}" --device-budget 12GiB --measure "${TT_MEASURE:-3}" --plans "$d2048_plans" ;;
    d4096) plan d4096 "${d4096[@]}" --device-budget 64GiB --measure "${TT_MEASURE:-3}" --plans "$d4096_plans" ;;
    d4096_40) plan d4096_40GiB "${d4096[@]}" --device-budget 40GiB --measure 2 --plans "$d4096_tight_plans" ;;
    d1024) plan d1024 "${d1024[@]}" --measure "${TT_MEASURE:-3}" ;;
    d1024_8) plan d1024_8GiB "${d1024[@]}" --device-budget 8GiB --measure "${TT_MEASURE:-3}" ;;
    d2048_15) plan d2048_15GiB "${d2048[@]}" --device-budget 15GiB --measure "${TT_MEASURE:-3}" \
                --plans recompute/device,swap-attention-recompute-mlp-norms/device,swap-activations/device,auto ;;
    d4096_sweep)
      plan d4096_sweep "${d4096[@]}" --plans auto --sweep-budget 24GiB:120GiB:8GiB --sweep-out "$OUT/sweep_d4096"
      for w in v100-pcie3 a100-pcie4 h100-pcie5 gh200-c2c link=55GB/s,device_mem=141GiB; do
        name=${w%%,*}
        plan "d4096_whatif_${name//\//_}" "${d4096[@]}" --what-if "$w"
      done
      ;;
    heat)
      for h in 0 0.2 1; do
        "$TT" calibrate "${d4096[@]}" "${common[@]}" --heat "$h" --out "$OUT/profile_d4096_heat$h.json" \
          > /dev/null 2>&1 || echo "calibrate --heat $h failed"
        plan "d4096_heat$h" "${d4096[@]}" --device-budget 64GiB --plans "$d4096_plans" \
          --machine-profile "$OUT/profile_d4096_heat$h.json"
      done
      "$TT" train "${d4096[@]}" "${common[@]}" --device-budget 64GiB --plan swap-attention-recompute-mlp-norms \
        --steps 4 --eval-every 0 --profile > "$OUT/train_d4096_profile.txt" 2>&1 || echo "profiled run failed"
      tail -n 40 "$OUT/train_d4096_profile.txt"
      ;;
    trace)
      "$TT" train "${gpt2[@]}" "${common[@]}" --plan in-core --optimizer cpu --steps 6 --eval-every 0 \
        --trace "$OUT/trace_gpt2_cpu_opt.json" > "$OUT/train_gpt2_cpu_opt.txt" 2>&1 || echo "traced run failed"
      gzip -f "$OUT/trace_gpt2_cpu_opt.json"
      tail -n 2 "$OUT/train_gpt2_cpu_opt.txt"
      ;;
    *) echo "unknown workload $w" >&2; exit 2 ;;
  esac
done
kill $SMI 2>/dev/null || true
# The device tool brings back a few files: everything goes into results.tgz.
tar czf /tmp/results.tgz -C "$OUT" . && mv /tmp/results.tgz "$OUT/results.tgz"
find "$OUT" -type f ! -name 'results.tgz' -delete
