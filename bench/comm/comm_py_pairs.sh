#!/usr/bin/env bash
# Python against mpi4py + Open MPI, one collective at a few rank counts, within a time budget (for a short device
# call after scripts/gpu_comm.sh --no-bench built the venv): tiertrain.comm from Python (ranks bound to their share
# of the CPUs) on TT_PAIRS_BUFFERS (pool: Comm.zeros, the default; huge; numpy), then mpi4py (ranks bound to one core
# each) on huge-page arrays (numpy with TT_PAIRS_BUFFERS=numpy), alternately, into OUTDIR.
#   TT_PAIRS_RANKS="16 32" TT_PAIRS_COLLECTIVE=allreduce TT_PAIRS_ARGS="-b 1M -e 4M" TT_PAIRS_BUDGET_S=60 \
#     bench/comm/comm_py_pairs.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: bench/comm/comm_py_pairs.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
TT=${TT:-build/gpu/src/tiertrain}
PY=${PY:-build/gpu-pyenv/bin/python}
c=${TT_PAIRS_COLLECTIVE:-allreduce}
read -r -a args <<< "${TT_PAIRS_ARGS:--b 1M -e 4M} -n 10 -w 3 --warmup-ms 100"
case "${TT_PAIRS_BUFFERS:-pool}" in
  pool) py_bufs=(--pool) mpi_bufs=(--huge) ;;
  huge) py_bufs=(--huge) mpi_bufs=(--huge) ;;
  *) py_bufs=() mpi_bufs=() ;;
esac
end=$(( $(date +%s) + ${TT_PAIRS_BUDGET_S:-120} ))
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
for n in ${TT_PAIRS_RANKS:-16 32}; do
  for who in py ompi; do
    left=$(( end - $(date +%s) ))
    [ "$left" -gt 5 ] || { echo "out of time before $who at $n ranks"; break 2; }
    if [ "$who" = py ]; then
      timeout "$left" "$TT" launch -n "$n" --bind-to share -- "$PY" bench/comm/py_comm_bench.py -C "$c" "${args[@]}" \
        "${py_bufs[@]}" > "$OUT/py_${c}_$n.log" 2>&1 || tail -3 "$OUT/py_${c}_$n.log"
    else
      timeout "$left" mpirun -n "$n" --bind-to core --map-by core "${root[@]}" "$PY" bench/comm/mpi4py_bench.py -C "$c" \
        "${args[@]}" "${mpi_bufs[@]}" > "$OUT/ompi_${c}_$n.log" 2>&1 || tail -3 "$OUT/ompi_${c}_$n.log"
    fi
  done
  # size, Python time out of place / in place, mpi4py's, and the ratios (mpi4py time / Python time).
  paste <(grep -v '^#' "$OUT/py_${c}_$n.log" | awk 'NF>=6 {print $1, $3, $6}') \
        <(grep -av '^#' "$OUT/ompi_${c}_$n.log" | grep -a -v ':' | awk 'NF>=6 {print $3, $6}') |
    awk -v n="$n" -v c="$c" 'NF==5 {printf "%s %d ranks %8d B: python %8.1f / %8.1f us, mpi4py %8.1f / %8.1f us: %.2fx / %.2fx\n", c, n, $1, $2, $3, $4, $5, $4/$2, $5/$3}' |
    tee -a "$OUT/pairs.txt"
done
