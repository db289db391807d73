#!/usr/bin/env bash
# Issue 21's input measurement on the CPU backend: the large-input workload (apps/features.h), 256 MiB of features a
# step (--batch 16384 rows of 4096 float32), at 2 and 4 ranks with --input direct, via-root and replicated; the
# input stage's time per step (each rank's, the slowest rank's) beside the whole step. One process per rank
# (tiertrain launch), one thread each.
#
#   bench/features/input_cpu.sh OUTDIR [STEPS]
#
# OUTDIR gets one JSON and one log per run and results.md; the dataset (512 MiB) goes to /tmp/tiertrain-features.
set -euo pipefail
OUT=${1:?usage: bench/features/input_cpu.sh OUTDIR [STEPS]}
STEPS=${2:-6}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
TT=${TT:-build/release/src/tiertrain}
DATA=/tmp/tiertrain-features
[ -f "$DATA/features.npy" ] || "$TT" gen-features --out "$DATA" --samples 32768 --dim 4096 --classes 16
{ date -u; uname -a; nproc; git rev-parse HEAD 2>/dev/null || true; } > "$OUT/machine.txt"
for n in 2 4; do
  for input in direct via-root replicated; do
    name="n${n}_${input}"
    "$TT" launch -n "$n" -- "$TT" train-features --data "$DATA" --backend cpu --threads 1 --batch 16384 --hidden 32 \
      --steps "$STEPS" --mesh "data=$n" --input "$input" --metrics-out "$OUT/$name.json" > "$OUT/$name.log" 2>&1 ||
      { echo "$name failed"; tail -5 "$OUT/$name.log"; exit 1; }
    echo "$name: $(tail -n 1 "$OUT/$name.log")"
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys, os
out = sys.argv[1]
rows = []
for n in (2, 4):
    base = None
    for mode in ("direct", "via-root", "replicated"):
        j = json.load(open(os.path.join(out, f"n{n}_{mode}.json")))
        s = j["steps"][1:]  # the first step warms the page cache and the pools
        inp = statistics.median(x["input_ms"] for x in s)
        slow = statistics.median(x["input_ms_max"] for x in s)
        step = statistics.median(x["step_ms"] for x in s)
        rows.append((n, mode, inp, slow, step))
with open(os.path.join(out, "results.md"), "w") as f:
    f.write("| ranks | input | input stage, rank 0 (ms) | input stage, slowest rank (ms) | step (ms) | slowest input vs direct |\n")
    f.write("| ---: | --- | ---: | ---: | ---: | ---: |\n")
    for n, mode, inp, slow, step in rows:
        d = next(r for r in rows if r[0] == n and r[1] == "direct")
        f.write(f"| {n} | {mode} | {inp:.1f} | {slow:.1f} | {step:.1f} | {slow / d[3]:.2f}x |\n")
print(open(os.path.join(out, "results.md")).read())
PY
