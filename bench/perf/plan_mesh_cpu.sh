#!/usr/bin/env bash
# The performance model on a data-parallel mesh, CPU backend (Note [pricing collectives] in src/perf/costs.cc): an
# allreduce over 2 ranks calibrated under `tiertrain launch -n 2`, then every shortcut plan of a data=2 mesh
# predicted and measured for 5 steps (`plan --measure`) under `launch -n 2`; rank 0's table.
#
#   bench/perf/plan_mesh_cpu.sh OUTDIR
#
# OUTDIR gets the profile, both logs, plan.txt (rank 0's table) and results.json (the rows).
set -euo pipefail
OUT=${1:?usage: bench/perf/plan_mesh_cpu.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
TT=${TT:-build/release/src/tiertrain}
DATA=$OUT/corpus.txt
python3 -c "
import random
random.seed(1)
w = 'the quick brown fox jumps over the lazy dog while seven wizards quietly hex bold jumping zebras'.split()
open('$DATA', 'w').write(' '.join(random.choice(w) for _ in range(200000)))"
model=(--data "$DATA" --backend cpu --layers 4 --dim 128 --heads 4 --seq 64 --batch 16 --threads 1)
{ date -u; uname -a; nproc; git rev-parse HEAD 2>/dev/null || true; } > "$OUT/machine.txt"
"$TT" launch -n 2 -- "$TT" calibrate "${model[@]}" --out "$OUT/profile.json" > "$OUT/calibrate.log" 2>&1
"$TT" launch -n 2 -- "$TT" plan "${model[@]}" --mesh data=2 --machine-profile "$OUT/profile.json" --measure 5 \
  > "$OUT/plan.log" 2>&1
grep '^\[rank 0\]' "$OUT/plan.log" | sed 's/^\[rank 0\] //' > "$OUT/plan.txt"
python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
rows = []
for line in open(f"{out}/plan.txt"):
    m = re.match(r"(\S+)\s+(device|cpu)\s+(yes\*?|no|over)\s+.*?\s([\d.]+)\s+\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+([+-][\d.]+)%", line)
    if m:
        rows.append({"plan": m[1], "optimizer": m[2], "predicted_ms": float(m[4]), "measured_ms": float(m[5]),
                     "error_pct": float(m[6])})
json.dump({"rows": rows}, open(f"{out}/results.json", "w"), indent=1)
errs = [abs(r["error_pct"]) for r in rows]
print(f"{len(rows)} rows, |error| {min(errs):.1f}-{max(errs):.1f}%")
PY
