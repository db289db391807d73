#!/usr/bin/env bash
# Out-of-core plans on one GPU (issue 4, measurements a, c, d): a model whose activations are several times what a
# budget leaves after model state, trained in-core on the unbounded GPU and with each plan (and the CPU optimizer)
# at the budget that plan needs (bench/lib.sh tt_run_tight: its --dry-run figure, without the automatic budget's 5%
# slack); PyTorch eager in-core and with save_on_cpu(pin_memory=True) capped at the swap
# plan's budget; traces of the swap plan and of the CPU optimizer. Run after scripts/gpu.sh built build/gpu. Writes
# JSON, traces and results.md into OUTDIR.
#   bench/ooc/ooc_gpu.sh OUTDIR [DATA]
# TT_OOC_RUNS picks the tiertrain runs (default: all of in-core swap recompute mix halves halves-mix halves-norms
# halves-norms-s3 cpu-optimizer recompute-cpu-optimizer, halves-norms being the halves plan with the LayerNorm
# outputs rebuilt too; also halves-s3, the halves plan with 3 swap slots, and trace-halves / trace-halves-norms,
# traced runs of them alone); TT_OOC_EXTRAS=0 skips the traces and the PyTorch rows.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
tt_bench_setup "${1:?usage: bench/ooc/ooc_gpu.sh OUTDIR [DATA]}" "${2:-/usr/share/games/fortunes}"
L=${TT_OOC_LAYERS:-8} D=${TT_OOC_DIM:-2048} H=${TT_OOC_HEADS:-16} T=${TT_OOC_SEQ:-2048} B=${TT_OOC_BATCH:-8}
STEPS=${TT_OOC_STEPS:-12}
common=(--layers "$L" --dim "$D" --heads "$H" --seq "$T" --batch "$B" --data "$DATA" --steps "$STEPS" --warmup 3
        --eval-every 0 --log-every 100)
half=$((L / 2 - 1))
cat > "$OUT/plan_mix.json" <<JSON
{"version": 1, "comment": "first half swapped (their backward comes last), second half recomputed",
 "default": {"activation": "recompute"}, "layers": {"0-$half": {"activation": "swap"}}, "swap_prefetch": 1}
JSON
# Note [MLP half]: the first half's blocks swap their attention half and rebuild their MLP half; the second half
# (whose backward comes first, with the least time to bring anything back) is recomputed whole.
cat > "$OUT/plan_halves_mix.json" <<JSON
{"version": 1, "comment": "first half: attention swapped, MLP recomputed; second half recomputed",
 "default": {"activation": "recompute"},
 "layers": {"0-$half": {"activation": {"attention": "swap", "mlp": "recompute"}}}, "swap_prefetch": 1}
JSON
RUNS=" ${TT_OOC_RUNS:-in-core swap recompute mix halves halves-mix halves-norms halves-norms-s3 cpu-optimizer recompute-cpu-optimizer} "
tt_run in-core --plan in-core
tt_run_tight swap --plan swap-activations --swap-slots 2
tt_run_tight recompute --plan recompute
tt_run_tight mix --plan "$OUT/plan_mix.json"
tt_run_tight halves --plan swap-attention-recompute-mlp --swap-slots 2
tt_run_tight halves-s3 --plan swap-attention-recompute-mlp --swap-slots 3
tt_run_tight halves-mix --plan "$OUT/plan_halves_mix.json"
# Note [rebuilt norms]: the halves plan with each block's LayerNorm outputs rebuilt too (5 C per token swapped, not 7).
tt_run_tight halves-norms --plan swap-attention-recompute-mlp-norms --swap-slots 2
tt_run_tight halves-norms-s3 --plan swap-attention-recompute-mlp-norms --swap-slots 3
tt_run_tight cpu-optimizer --plan in-core --optimizer cpu
tt_run_tight recompute-cpu-optimizer --plan recompute --optimizer cpu
if [ "${TT_OOC_EXTRAS:-1}" = 1 ]; then
  # A short traced run of the swap plan (the trace covers steps 2-4).
  "$TT" train "${common[@]}" --steps 4 --plan swap-activations --trace "$OUT/trace_swap.json" > "$OUT/trace_swap.log" 2>&1 ||
    tail -5 "$OUT/trace_swap.log"
  "$TT" train "${common[@]}" --steps 4 --plan in-core --optimizer cpu --trace "$OUT/trace_cpu_optimizer.json" \
    > "$OUT/trace_cpu_optimizer.log" 2>&1 || tail -5 "$OUT/trace_cpu_optimizer.log"
  budget_gib=$(python3 -c "import json; print(json.load(open('$OUT/tiertrain_swap.json'))['memory']['device']['budget'] / 2**30)")
  py=(python3 bench/training/torch_gpt_gpu.py --layers "$L" --dim "$D" --heads "$H" --seq "$T" --batch "$B" --vocab 256
      --steps "$STEPS" --warmup-steps 3 --mode bf16)
  "${py[@]}" --json-out "$OUT/torch_in-core.json" > "$OUT/torch_in-core.log" 2>&1 || tail -3 "$OUT/torch_in-core.log"
  "${py[@]}" --save-on-cpu --memory-budget-gib "$budget_gib" --json-out "$OUT/torch_save_on_cpu.json" \
    > "$OUT/torch_save_on_cpu.log" 2>&1 || tail -3 "$OUT/torch_save_on_cpu.log"
fi
# A short traced run of the halves plan (steps 2-4), with the extras or when asked for by name.
if [ "${TT_OOC_EXTRAS:-1}" = 1 ] || [[ "$RUNS" == *" trace-halves "* ]]; then
  "$TT" train "${common[@]}" --steps 4 --plan swap-attention-recompute-mlp --trace "$OUT/trace_halves.json" \
    > "$OUT/trace_halves.log" 2>&1 || tail -5 "$OUT/trace_halves.log"
fi
if [[ "$RUNS" == *" trace-halves-norms "* ]]; then
  "$TT" train "${common[@]}" --steps 4 --plan swap-attention-recompute-mlp-norms --swap-slots 3 \
    --trace "$OUT/trace_halves_norms.json" > "$OUT/trace_halves_norms.log" 2>&1 || tail -5 "$OUT/trace_halves_norms.log"
fi
python3 bench/ooc/ooc_summary.py "$OUT"
