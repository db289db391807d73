#!/usr/bin/env bash
# Does training at width d 4096 go wrong on the GPU only? The GPT runs at d 4096 diverge in the benchmarks (loss
# 5.7 -> 12.4 in 10 steps at lr <= 1e-4, in-core too, docs/benchmarks/2026-11-30-h200x2-ooc-d4096/), where d 2048
# learns at lr 1e-3. This trains small-batch models of widths 2048 and 4096 for a few steps on the CPU backend (f32:
# the reference, itself checked against PyTorch by gpt_golden_test) and on the CUDA backend (f32 and bf16), same
# seed, data and schedule, and prints each run's losses side by side: a GPU that departs from the CPU at one width
# only points at a kernel; all three alike point at the hyperparameters.
#   bench/training/width_check.sh OUTDIR [DATA]
# TT_WIDTHS (default "2048 4096"), TT_WIDTH_LAYERS (2), TT_WIDTH_LR (1e-4), TT_WIDTH_STEPS (10).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
tt_bench_setup "${1:?usage: bench/training/width_check.sh OUTDIR [DATA]}" "${2:-/usr/share/games/fortunes}"
L=${TT_WIDTH_LAYERS:-2} LR=${TT_WIDTH_LR:-1e-4} STEPS=${TT_WIDTH_STEPS:-10}
for D in ${TT_WIDTHS:-2048 4096}; do
  for run in cpu:f32 cuda:f32 cuda:bf16; do
    be=${run%%:*} dt=${run##*:}
    name="d${D}_${be}_${dt}"
    "$TT" train --layers "$L" --dim "$D" --heads $((D / 128)) --seq 128 --batch 4 --data "$DATA" --steps "$STEPS" \
      --warmup 3 --lr "$LR" --grad-clip 0 --eval-every 0 --log-every 1 --backend "$be" --dtype "$dt" \
      > "$OUT/$name.log" 2>&1 || { echo "$name failed:"; tail -3 "$OUT/$name.log"; }
  done
done
python3 - "$OUT" <<'PY'
import glob, os, re, sys
out = sys.argv[1]
runs = {}
for f in sorted(glob.glob(os.path.join(out, "d*_*.log"))):
    runs[os.path.basename(f)[:-4]] = [(re.search(r"loss ([0-9.]+)", l).group(1), re.search(r"norm ([0-9.]+)", l).group(1))
                                      for l in open(f) if l.startswith("step") and "| loss" in l]
names = list(runs)
steps = max((len(v) for v in runs.values()), default=0)
lines = ["| step | " + " | ".join(names) + " |", "| ---: |" + " ---: |" * len(names)]
for i in range(steps):
    cells = [f"{runs[n][i][0]} ({runs[n][i][1]})" if i < len(runs[n]) else "" for n in names]
    lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
text = "Loss (gradient norm) each step\n\n" + "\n".join(lines) + "\n"
open(os.path.join(out, "results.md"), "w").write(text)
print(text)
PY
