#!/usr/bin/env bash
# Data parallel on the CPU backend (issue 21): the same model and global batch trained by one process (1 thread, and
# as many threads as ranks) and by N ranks of one thread each (`tiertrain launch -n N -- tiertrain train --mesh
# data=N`), interleaved, R rounds; each run's median step time and tokens/s from its metrics file, and how far each
# data-parallel loss curve is from the one-process curve.
#
#   bench/training/data_parallel_cpu.sh OUT_DIR [RANKS] [ROUNDS]
#
# Needs an idle machine with at least RANKS cores: each rank runs one thread.
set -euo pipefail
out=${1:?usage: bench/training/data_parallel_cpu.sh OUT_DIR [RANKS] [ROUNDS]}
ranks=${2:-2}
rounds=${3:-3}
cd "$(dirname "$0")/../.."
bin=${TIERTRAIN_BIN:-build/release/src/tiertrain}
mkdir -p "$out"
data=$out/corpus.txt
[ -f "$data" ] || python3 -c "
import random
random.seed(1)
w = 'the quick brown fox jumps over the lazy dog while seven wizards quietly hex bold jumping zebras'.split()
open('$data', 'w').write(' '.join(random.choice(w) for _ in range(400000)))"
args="train --data $data --backend cpu --layers 4 --dim 128 --heads 4 --seq 128 --batch 16 --steps 30 --warmup 3 \
  --eval-every 0 --log-every 10"
for r in $(seq 1 "$rounds"); do
  "$bin" $args --threads 1 --metrics-out "$out/one_t1_$r.json" > "$out/one_t1_$r.log" 2>&1
  "$bin" $args --threads "$ranks" --metrics-out "$out/one_t${ranks}_$r.json" > "$out/one_t${ranks}_$r.log" 2>&1
  "$bin" launch -n "$ranks" -- "$bin" $args --threads 1 --mesh data="$ranks" \
    --metrics-out "$out/dp${ranks}_$r.json" > "$out/dp${ranks}_$r.log" 2>&1
done
python3 - "$out" "$ranks" "$rounds" <<'EOF'
import json, statistics, sys
out, ranks, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = {}
for name in ["one_t1", f"one_t{ranks}", f"dp{ranks}"]:
    runs = [json.load(open(f"{out}/{name}_{r}.json")) for r in range(1, rounds + 1)]
    ms = [x["summary"]["median_ms_per_step"] for x in runs]
    tps = [x["summary"]["median_tokens_per_s"] for x in runs]
    rows[name] = {"median_ms": statistics.median(ms), "tokens_per_s": statistics.median(tps), "ms_per_round": ms,
                  "losses": [s["loss"] for s in runs[0]["steps"]]}
ref = rows["one_t1"]["losses"]
for name, row in rows.items():
    row["max_rel_loss_diff"] = max(abs(a - b) / a for a, b in zip(ref, row["losses"]))
    del row["losses"]
json.dump(rows, open(f"{out}/results.json", "w"), indent=2)
base = rows["one_t1"]["tokens_per_s"]
print("| run | median ms/step | tokens/s | vs 1 thread | max rel. loss diff vs 1 process |")
print("| --- | ---: | ---: | ---: | ---: |")
for name, row in rows.items():
    print(f"| {name} | {row['median_ms']:.1f} | {row['tokens_per_s']:.0f} | {row['tokens_per_s'] / base:.2f}x | "
          f"{row['max_rel_loss_diff']:.1e} |")
EOF
