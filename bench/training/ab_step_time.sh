#!/usr/bin/env bash
# Step time of this tree against another source tree (an earlier commit, e.g. `git archive C | tar -x -C .ab_old`),
# side by side on one GPU: both built the same way, each workload run old, new, old, new in one call, the median
# ms/step of each run and the new/old ratio of the medians of the two. For checking that a change costs nothing.
#
#   bench/training/ab_step_time.sh OUTDIR OLD_SRC build     # build both (Release, sm_90), new with its tests
#   bench/training/ab_step_time.sh OUTDIR OLD_SRC tests     # the new build's GPU tests (ctest -R Cuda)
#   bench/training/ab_step_time.sh OUTDIR OLD_SRC gpt2      # GPT-2 124M B16 T1024: in-core, and the halves-norms plan (3 slots)
#   bench/training/ab_step_time.sh OUTDIR OLD_SRC d4096     # GPT d4096 L16 T2048 B8, halves-norms plan (3 slots), tight budget
#   bench/training/ab_step_time.sh OUTDIR OLD_SRC summary   # ab.json and ab.md from what OUTDIR holds
# TT_AB_REPEAT (default 2) pairs of runs per workload.
set -euo pipefail
OUT=${1:?usage: bench/training/ab_step_time.sh OUTDIR OLD_SRC build|tests|gpt2|d4096|summary}
OLD=$(cd "${2:?OLD_SRC}" && pwd)
PHASE=${3:?phase}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
NEW_TT=build/gpu/src/tiertrain
OLD_TT=build/gpu-old/src/tiertrain
REPEAT=${TT_AB_REPEAT:-2}

configure() {  # SRC BUILD [extra cmake flags]
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERTRAIN_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    ${cmake_prefix:+-DCMAKE_PREFIX_PATH=$cmake_prefix} "${@:3}" > "$OUT/configure_$(basename "$2").log" 2>&1
}

# One workload: NAME then the flags; old, new, old, new, each with its metrics and log.
ab() {
  local name=$1
  shift
  for i in $(seq 1 "$REPEAT"); do
    for v in old new; do
      local tt=$NEW_TT
      [ "$v" = old ] && tt=$OLD_TT
      "$tt" train "$@" --metrics-out "$OUT/${name}_${v}_$i.json" > "$OUT/${name}_${v}_$i.log" 2>&1 ||
        { echo "$name $v $i failed:"; tail -n 5 "$OUT/${name}_${v}_$i.log"; }
      tail -n 1 "$OUT/${name}_${v}_$i.log" | cut -c1-160
    done
  done
}

case "$PHASE" in
  build)
    { nvidia-smi; nvcc --version; } > "$OUT/machine.txt" 2>&1 || true
    configure . build/gpu
    configure "$OLD" build/gpu-old -DTIERTRAIN_BUILD_TESTS=OFF
    cmake --build build/gpu-old -j "$(nproc)" --target tiertrain 2>&1 | tail -n 3
    cmake --build build/gpu -j "$(nproc)" 2>&1 | tail -n 3
    ;;
  tests)
    ( cd build/gpu && ctest -j1 --output-on-failure --timeout 500 -R "${TT_CTEST_REGEX:-Cuda}" ) > "$OUT/ctest.log" 2>&1 ||
      echo "GPU tests FAILED"
    tail -n 12 "$OUT/ctest.log"
    ;;
  gpt2)
    SHARD=/tmp/tiertrain-random-gpt2.bin
    [ -f "$SHARD" ] || python3 tools/make_random_shard.py "$SHARD" --tokens 20000000
    common=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16 --data "$SHARD" --steps 30 --warmup 5
            --eval-every 0 --log-every 100)
    ab gpt2_in-core "${common[@]}"
    ab gpt2_halves-norms-s3 "${common[@]}" --plan swap-attention-recompute-mlp-norms --swap-slots 3
    ;;
  d4096)
    common=(--layers 16 --dim 4096 --heads 32 --seq 2048 --batch 8 --data "$DATA_DIR" --steps 12 --warmup 3
            --eval-every 0 --log-every 100 --plan swap-attention-recompute-mlp-norms --swap-slots 3)
    # The budget the plan needs (the new build's --dry-run figure + 0.01 GiB), the same for both.
    budget=$("$NEW_TT" train "${common[@]}" --dry-run 2>&1 | sed -n 's/.*needs \([0-9.]*\) \([KMG]iB\) of.*/\1 \2/p' |
      head -n 1 | awk '{ printf "%.2f%s", $1 + 0.01, $2 }')
    echo "budget $budget"
    ab d4096_halves-norms-s3 "${common[@]}" --device-budget "$budget"
    ;;
  summary) ;;
  *) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac

python3 - "$OUT" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
runs = {}
for f in sorted(glob.glob(os.path.join(out, "*_*_*.json"))):
    m = re.match(r"(.+)_(old|new)_(\d+)\.json$", os.path.basename(f))
    if not m:
        continue
    j = json.load(open(f))
    runs.setdefault(m.group(1), {"old": [], "new": []})[m.group(2)].append(
        {"ms": j["summary"]["median_ms_per_step"], "last_loss": j["summary"]["last_loss"],
         "device_peak": j["memory"]["device"]["peak"]})
rows = []
for name, r in sorted(runs.items()):
    if not r["old"] or not r["new"]:
        continue
    old = statistics.median(x["ms"] for x in r["old"])
    new = statistics.median(x["ms"] for x in r["new"])
    same_loss = len({x["last_loss"] for x in r["old"] + r["new"]}) == 1
    rows.append({"workload": name, "old_ms": [x["ms"] for x in r["old"]], "new_ms": [x["ms"] for x in r["new"]],
                 "old_median_ms": old, "new_median_ms": new, "new_over_old": new / old,
                 "same_last_loss": same_loss, "last_loss": r["new"][0]["last_loss"]})
json.dump(rows, open(os.path.join(out, "ab.json"), "w"), indent=2)
lines = ["| workload | old ms/step (runs) | new ms/step (runs) | new / old | same losses |", "| --- | --- | --- | ---: | --- |"]
for r in rows:
    lines.append("| %s | %s | %s | %.3f | %s |" % (r["workload"], " / ".join("%.1f" % x for x in r["old_ms"]),
                 " / ".join("%.1f" % x for x in r["new_ms"]), r["new_over_old"], "yes" if r["same_last_loss"] else "NO"))
open(os.path.join(out, "ab.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
