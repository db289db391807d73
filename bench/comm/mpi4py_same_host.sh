#!/usr/bin/env bash
# Issue 48 on a many-core host (the GPU machine's 16 cores): bench/comm/mpi4py_same.py, one mpi4py program, over
# mpi4py (Open MPI, ranks bound to cores) and over tiertrain.comm (`tiertrain launch`, ranks bound to cores) with only
# the import changed, at TT_SAME_RANKS ranks ("2 4 8 16"), TT_SAME_REPEATS runs a side (1), interleaved; the
# Python environment from scripts/gpu_pyenv.sh (the tiertrain package and mpi4py from .deps/wheels, or the folder
# TT_WHEELS names, built there).
# Results: OUTDIR/same_<impl>_<ranks>_<run>.json, logs, and OUTDIR/results.md (bench/comm/mpi4py_same_table.py's
# tables, one per rank count). TT_SAME_CASES: some of the cases only ("pingpong,window"). TT_SAME_VARIANTS: more
# tiertrain runs after each pair, each "NAME:VAR=VALUE,..." (environment variables of that run; NAME bind-none runs it
# without --bind-to core), e.g. "ring:TIERTRAIN_COMM_P2P_CMA_BYTES=0"; their JSON beside as same_<NAME>_<ranks>_<run>.
#   bench/comm/mpi4py_same_host.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: bench/comm/mpi4py_same_host.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -n "${cmake_prefix+x}" ] || { source scripts/gpu_deps.sh; }
start=$(date +%s)
# (The package without the program: `tiertrain launch` is TT, built beside it.)
PY=$(PIP_CONFIG_SETTINGS=cmake.define.TIERTRAIN_PIP_CLI=OFF scripts/gpu_pyenv.sh /tmp/tt-pyenv 2> "$OUT/pyenv.log" | tail -n 1)
echo "python environment ($(( $(date +%s) - start )) s): $PY"
"$PY" -c "import mpi4py, tiertrain.comm; print('mpi4py', mpi4py.__version__)" || { tail -5 "$OUT/pyenv.log"; exit 1; }
TTBIN=${TT:-build/gpu/src/tiertrain}  # (the package's console script has no program in it here)
[ -x "$TTBIN" ] || { tt_gpu_tiertrain; TTBIN=$TT; }
lscpu > "$OUT/lscpu.txt" 2>&1 || true
A=(--max-bytes "${TT_SAME_MAX:-16777216}" --bytes-per-case "${TT_SAME_BYTES:-3e8}")
[ -n "${TT_SAME_CASES:-}" ] && A+=(--cases "$TT_SAME_CASES")  # (a comma-separated subset of mpi4py_same.py's CASES)
lim=${TT_SAME_TIMEOUT:-240}
for n in ${TT_SAME_RANKS:-2 4 8 16}; do
  [ "$n" -le "$(nproc)" ] || continue
  tt_mpirun_flags "$n"
  for i in $(seq 1 "${TT_SAME_REPEATS:-1}"); do
    s=$(date +%s)
    timeout "$lim" mpirun -n "$n" "${mpirun_flags[@]}" "$PY" bench/comm/mpi4py_same.py --impl mpi4py "${A[@]}" \
      --json "$OUT/same_mpi4py_${n}_$i.json" > "$OUT/same_mpi4py_${n}_$i.log" 2>&1 ||
      { echo "mpi4py $n ranks failed"; tail -3 "$OUT/same_mpi4py_${n}_$i.log"; }
    m=$(date +%s)
    timeout "$lim" "$TTBIN" launch -n "$n" --bind-to core -- "$PY" bench/comm/mpi4py_same.py --impl tiertrain "${A[@]}" \
      --json "$OUT/same_tiertrain_${n}_$i.json" > "$OUT/same_tiertrain_${n}_$i.log" 2>&1 ||
      { echo "tiertrain $n ranks failed ($TTBIN):"; tail -5 "$OUT/same_tiertrain_${n}_$i.log"; }
    echo "$n ranks, run $i: mpi4py $(( m - s )) s, tiertrain $(( $(date +%s) - m )) s"
    for v in ${TT_SAME_VARIANTS:-}; do
      name=${v%%:*} vars=${v#*:} bind=(--bind-to core)
      [ "$vars" = "$v" ] && vars=""
      [ "$name" = bind-none ] && bind=()
      env ${vars//,/ } timeout "$lim" "$TTBIN" launch -n "$n" "${bind[@]}" -- "$PY" bench/comm/mpi4py_same.py \
        --impl tiertrain "${A[@]}" --json "$OUT/same_${name}_${n}_$i.json" > "$OUT/same_${name}_${n}_$i.log" 2>&1 ||
        { echo "tiertrain ($name) $n ranks failed:"; tail -5 "$OUT/same_${name}_${n}_$i.log"; }
    done
  done
  # One results file per rank count in the table tool's layout: {"runs": {side: [rows of each run]}}.
  "$PY" - "$OUT" "$n" <<'PYEOF'
import glob, json, sys
out, n = sys.argv[1], sys.argv[2]
runs = {}
for side in ("mpi4py", "tiertrain"):
    runs[side] = [json.load(open(p))["rows"] for p in sorted(glob.glob(f"{out}/same_{side}_{n}_*.json"))]
# (The variants' rows, by name, for a look beside the table.)
variants = sorted({p.split("/same_")[1].rsplit("_", 2)[0] for p in glob.glob(f"{out}/same_*_{n}_*.json")} -
                  {"mpi4py", "tiertrain"})
for v in variants:
    rows = [json.load(open(p))["rows"] for p in sorted(glob.glob(f"{out}/same_{v}_{n}_*.json"))]
    best = {}
    for side, rs in (("mpi4py", runs["mpi4py"]), ("tiertrain", runs["tiertrain"]), (v, rows)):
        b = {}
        for run in rs:
            for r in run:
                k = (r["case"], r["bytes"])
                b[k] = min(b.get(k, 1e9), r["seconds"])
        best[side] = b
    print(f"variant {v}, {n} ranks: case bytes  mpi4py us | tiertrain us | {v} us (best of the runs)")
    for k in sorted(best[v]):
        print(f"  {k[0]:9s} {k[1]:>9d}  {best['mpi4py'].get(k, 0) * 1e6:10.1f} | "
              f"{best['tiertrain'].get(k, 0) * 1e6:10.1f} | {best[v][k] * 1e6:10.1f}")
json.dump({"ranks": int(n), "runs": runs}, open(f"{out}/results_{n}.json", "w"), indent=1)
PYEOF
  { echo "## $n ranks"; "$PY" bench/comm/mpi4py_same_table.py "$OUT/results_$n.json"; echo; } >> "$OUT/results.md" 2>&1
done
tar -czf "$OUT/logs.tgz" -C "$OUT" --exclude logs.tgz $(cd "$OUT" && ls | grep -E '^same_|^pyenv|^lscpu') &&
  (cd "$OUT" && rm -f same_* pyenv.log lscpu.txt)
cat "$OUT/results.md"
