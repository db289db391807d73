#!/usr/bin/env bash
# Model state streamed and offloaded on one GPU (issue 4, measurement b): a model trained in-core on the unbounded
# GPU, then with the CPU optimizer and with parameters and gradients streamed from host memory (offload-params,
# offload-params with recomputed activations, offload-all), each at the budget it needs. The table reports each
# plan against in-core and the in-core model state (parameters, gradients, moments) against the plan's budget; a
# trace of offload-params. Run after scripts/gpu.sh built build/gpu. Writes JSON, a trace and results.md into OUTDIR.
#   bench/ooc/offload_gpu.sh OUTDIR [DATA]
# TT_OFF_LAYERS, TT_OFF_DIM, TT_OFF_HEADS, TT_OFF_SEQ, TT_OFF_BATCH, TT_OFF_STEPS change the model and the run;
# TT_OFF_LR the learning rate (default 3e-4); TT_OFF_RUNS picks runs (default: in-core cpu-optimizer offload-params
# offload-params-recompute offload-params-recompute-speculative offload-all trace; also offload-all-speculative,
# offload-params-recompute-noclip, offload-params-recompute-speculative-noclip).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
tt_bench_setup "${1:?usage: bench/ooc/offload_gpu.sh OUTDIR [DATA]}" "${2:-/usr/share/games/fortunes}"
L=${TT_OFF_LAYERS:-8} D=${TT_OFF_DIM:-2048} H=${TT_OFF_HEADS:-16} T=${TT_OFF_SEQ:-2048} B=${TT_OFF_BATCH:-8}
STEPS=${TT_OFF_STEPS:-10}
common=(--layers "$L" --dim "$D" --heads "$H" --seq "$T" --batch "$B" --data "$DATA" --steps "$STEPS" --warmup 3
        --eval-every 0 --log-every 100 --lr "${TT_OFF_LR:-3e-4}")
cat > "$OUT/plan_offload_recompute.json" <<JSON
{"version": 1, "comment": "parameters and gradients streamed, activations recomputed", "optimizer": "cpu",
 "default": {"param": "host_streamed", "grad": "host_streamed", "activation": "recompute"}}
JSON
for r in ${TT_OFF_RUNS:-in-core cpu-optimizer offload-params offload-params-recompute \
           offload-params-recompute-speculative offload-all trace}; do
  case "$r" in
    in-core) tt_run in-core --plan in-core ;;
    cpu-optimizer) tt_run_tight cpu-optimizer --plan in-core --optimizer cpu ;;
    offload-params) tt_run_tight offload-params --plan offload-params ;;
    offload-params-recompute) tt_run_tight offload-params-recompute --plan "$OUT/plan_offload_recompute.json" ;;
    offload-params-recompute-speculative)
      tt_run_tight offload-params-recompute-speculative --plan "$OUT/plan_offload_recompute.json" --speculative-update ;;
    offload-all) tt_run_tight offload-all --plan offload-all ;;
    offload-all-speculative) tt_run_tight offload-all-speculative --plan offload-all --speculative-update ;;
    # The clip off (--grad-clip 0): every speculated update is kept, as in training whose norms stay under the clip;
    # the pair shows what the speculation gains when it holds.
    offload-params-recompute-noclip)
      tt_run_tight offload-params-recompute-noclip --plan "$OUT/plan_offload_recompute.json" --grad-clip 0 ;;
    offload-params-recompute-speculative-noclip)
      tt_run_tight offload-params-recompute-speculative-noclip --plan "$OUT/plan_offload_recompute.json" --grad-clip 0 \
        --speculative-update ;;
    trace)  # steps 2-4 of the streamed plan with recompute
      "$TT" train "${common[@]}" --steps 4 --plan "$OUT/plan_offload_recompute.json" \
        --trace "$OUT/trace_offload_params_recompute.json" > "$OUT/trace.log" 2>&1 || tail -5 "$OUT/trace.log" ;;
    *) echo "unknown run $r" >&2; exit 2 ;;
  esac
done
python3 bench/ooc/ooc_summary.py "$OUT"
