#!/usr/bin/env bash
# Host collectives side by side (issue 5): tiertrain's shm backend against Open MPI through mpi4py, on this machine's
# cores, at 8 and 16 ranks (and 32 where there are 32 CPUs), allreduce, broadcast, gather and allgather of f32 from 8 B to
# 256 MiB, ranks bound to cores. Run after scripts/gpu.sh (or any build) made build/gpu; writes JSON, logs and
# results.md into OUTDIR.
#   bench/comm/comm_host.sh OUTDIR
# TT_COMM_BIND=share binds tiertrain's ranks to their share of the CPUs (with as many threads a rank, Note [crew])
# instead of one core each (Open MPI's ranks stay bound to one core each). TT_COMM_RANKS="8 16" picks the rank counts, TT_COMM_COLLECTIVES the collectives, TT_COMM_MIN the smallest size of
# the sweeps (default 8), TT_COMM_MAX the largest (default 256M), TT_COMM_REPEATS how many times each sweep runs (default 1), TT the binary. TT_COMM_AB="NAME=VALUE
# ..." also runs tiertrain's latency runs and sweeps (C++ only) with those settings into OUTDIR/ab, right after the
# same runs without them, and summarises that folder too (an A/B of a setting, e.g. TIERTRAIN_COMM_TREE_RANKS=16;
# TT_COMM_AB_LAT_ONLY=1: its latency runs only).
# TT_COMM_WARMUP_MS / TT_COMM_FIRST_WARMUP_MS / TT_COMM_MIN_MS: the warm-up of each size and of the first (100 and 1000
# ms), and the least time of calls timed per row (20 ms); TT_COMM_PY_PAIRS: Python and C++ loops alternated per row (3).
set -uo pipefail
OUT=${1:?usage: bench/comm/comm_host.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
TT=${TT:-build/gpu/src/tiertrain}
MPI_BENCH=${TT_MPI_BENCH:-$(dirname "$(dirname "$TT")")/bench/mpi_raw_bench}
MAX=${TT_COMM_MAX:-256M}
cpus=$(nproc)
ranks=${TT_COMM_RANKS:-"8 16"}
[ -z "${TT_COMM_RANKS:-}" ] && [ "$cpus" -ge 32 ] && ranks="8 16 32"
lim=${TT_COMM_RUN_TIMEOUT:-150}  # seconds a run may take
# Every power of two (64 MiB, the issue's size, among them); fewer iterations than comm-bench's default keep the
# 256 MiB rows short.
# At least 100 ms of untimed calls at each size (the same in all three programs): the first size of a run was
# otherwise 2-4x slower than steady state in either library's process, whatever the warm-up count.
# The run's first size warms up longer (TT_COMM_FIRST_WARMUP_MS, default 1000 ms): on the H200 machine's VM a
# process's first few hundred ms of collectives ran up to 15x slower, in C++, Python and Open MPI alike
# (docs/benchmarks/2026-11-30-h200x2-comm-pool-measured/). Each row times at least TT_COMM_MIN_MS (default 20 ms) of
# calls, and no fewer than TT_COMM_ITERS: ten calls of 20 us were at the mercy of one descheduled vCPU.
warm=(--warmup-ms "${TT_COMM_WARMUP_MS:-100}" --first-warmup-ms "${TT_COMM_FIRST_WARMUP_MS:-1000}")
sweep=(-b "${TT_COMM_MIN:-8}" -e "$MAX" -f 2 -n "${TT_COMM_ITERS:-10}" -w 3 "${warm[@]}" --min-ms "${TT_COMM_MIN_MS:-20}")
lscpu > "$OUT/lscpu.txt" 2>&1 || true
# TT_COMM_PY_BUFFERS: the Python benchmarks' buffers: numpy (default: numpy's arrays for both libraries), huge
# (tiertrain.comm.zeros, on huge pages, for both) or pool (Comm.zeros, tiertrain's shared pool, against mpi4py on the
# huge-page arrays and on numpy's arrays: the summary takes mpi4py's faster row of the two, size by size).
case "${TT_COMM_PY_BUFFERS:-numpy}" in
  numpy) py_bufs="" mpi_bufs="" ;;
  huge) py_bufs="--huge" mpi_bufs="--huge" ;;
  pool) py_bufs="--pool" mpi_bufs="--huge" ;;
  *) echo "TT_COMM_PY_BUFFERS: numpy, huge or pool" >&2; exit 2 ;;
esac
echo "python buffers: ${TT_COMM_PY_BUFFERS:-numpy} (tiertrain: ${py_bufs:-numpy}, mpi4py: ${mpi_bufs:-numpy})" > "$OUT/buffers.txt"
# One run of tiertrain's comm-bench for collective $c at $n ranks, with the settings in ENV (may be empty) in front:
# NAME's JSON and log in OUT (NAME may start with a folder of OUT).
#   tt_comm_bench NAME ENV ARGS...
tt_comm_bench() {
  local name=$1 envs=$2
  shift 2
  # shellcheck disable=SC2086
  env $envs timeout "$lim" "$TT" launch -n "$n" --bind-to "${TT_COMM_BIND:-core}" -- "$TT" comm-bench -C "$c" "$@" -c 1 \
    --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1 || tail -3 "$OUT/$name.log"
}
for n in $ranks; do
  [ "$n" -le "$cpus" ] || continue
  # Open MPI bound to physical cores (hardware threads beyond them): bench/lib.sh
  tt_mpirun_flags "$n"
  for c in ${TT_COMM_COLLECTIVES:-allreduce broadcast gather allgather}; do
    # Latency: the smallest sizes, many iterations after many warm-up ones (the first size of a sweep otherwise
    # carries the libraries' first-call costs), for each of the three.
    lat=(-b 8 -e 64 -f 2 -n 2000 -w 200 "${warm[@]}" --min-ms "${TT_COMM_MIN_MS:-20}")
    # The collectives whose size is all ranks' pieces: 8-64 B a piece.
    case "$c" in
      gather | allgather | scatter | reduce_scatter | alltoall)
        lat=(-b $((8 * n)) -e $((64 * n)) -f 2 -n 2000 -w 200 "${warm[@]}" --min-ms "${TT_COMM_MIN_MS:-20}") ;;
    esac
    tt_comm_bench "shm_lat_${c}_$n" "" "${lat[@]}"
    if [ -n "${TT_COMM_AB:-}" ]; then
      mkdir -p "$OUT/ab"
      tt_comm_bench "ab/shm_lat_${c}_$n" "$TT_COMM_AB" "${lat[@]}"
      # TT_COMM_AB_LAT_ONLY=1: the latency runs alone (a setting of small calls, e.g. TIERTRAIN_COMM_INLINE=1).
      [ "${TT_COMM_AB_LAT_ONLY:-0}" = 1 ] || tt_comm_bench "ab/shm_${c}_$n" "$TT_COMM_AB" "${sweep[@]}"
    fi
    if "${PY:-python3}" -c "import mpi4py" 2>/dev/null && command -v mpirun >/dev/null; then
      timeout "$lim" mpirun -n "$n" "${mpirun_flags[@]}" "${PY:-python3}" bench/comm/mpi4py_bench.py -C "$c" "${lat[@]}" \
        --json "$OUT/ompi_lat_${c}_$n.json" > "$OUT/ompi_lat_${c}_$n.log" 2>&1 || tail -3 "$OUT/ompi_lat_${c}_$n.log"
    fi
    # Open MPI's latency from C++ (bench/mpi_raw_bench, built with the tree where MPI is found): the like-for-like
    # reference of comm-bench's, without mpi4py's cost a call.
    if [ -x "$MPI_BENCH" ] && command -v mpirun >/dev/null; then
      timeout "$lim" mpirun -n "$n" "${mpirun_flags[@]}" "$MPI_BENCH" -C "$c" "${lat[@]}" \
        --json "$OUT/ompic_lat_${c}_$n.json" > "$OUT/ompic_lat_${c}_$n.log" 2>&1 || tail -3 "$OUT/ompic_lat_${c}_$n.log"
    fi
    # The sweeps, TT_COMM_REPEATS times in turn (C++, Python, Open MPI, then again): the summary takes each size's
    # median run, so that a slow spell of the machine does not decide a ratio.
    for r in $(seq 1 "${TT_COMM_REPEATS:-1}"); do
      sfx=""
      [ "$r" -gt 1 ] && sfx=".r$r"
      tt_comm_bench "shm_${c}_$n$sfx" "" "${sweep[@]}"
      # The Python API (needs the package: pip install . ; PY names the interpreter that has it).
      if "${PY:-python3}" -c "import tiertrain.comm" 2>/dev/null; then
        # A crash prints the Python stack of the rank that crashed (faulthandler); output unbuffered.
        # shellcheck disable=SC2086
        PYTHONFAULTHANDLER=1 PYTHONUNBUFFERED=1 timeout "$lim" "$TT" launch -n "$n" --bind-to "${TT_COMM_BIND:-core}" -- \
          "${PY:-python3}" bench/comm/py_comm_bench.py -C "$c" "${sweep[@]}" $py_bufs --pairs "${TT_COMM_PY_PAIRS:-3}" \
          --json "$OUT/py_${c}_$n$sfx.json" > "$OUT/py_${c}_$n$sfx.log" 2>&1 || tail -3 "$OUT/py_${c}_$n$sfx.log"
      fi
      if "${PY:-python3}" -c "import mpi4py" 2>/dev/null && command -v mpirun >/dev/null; then
        # shellcheck disable=SC2086
        timeout "$lim" mpirun -n "$n" "${mpirun_flags[@]}" "${PY:-python3}" bench/comm/mpi4py_bench.py -C "$c" "${sweep[@]}" $mpi_bufs \
          --json "$OUT/ompi_${c}_$n$sfx.json" > "$OUT/ompi_${c}_$n$sfx.log" 2>&1 || tail -3 "$OUT/ompi_${c}_$n$sfx.log"
        if [ "${TT_COMM_PY_BUFFERS:-numpy}" = pool ]; then  # and on numpy's arrays (ompi_numpy_*)
          timeout "$lim" mpirun -n "$n" "${mpirun_flags[@]}" "${PY:-python3}" bench/comm/mpi4py_bench.py -C "$c" "${sweep[@]}" \
            --json "$OUT/ompi_numpy_${c}_$n$sfx.json" > "$OUT/ompi_numpy_${c}_$n$sfx.log" 2>&1 ||
            tail -3 "$OUT/ompi_numpy_${c}_$n$sfx.log"
        fi
      fi
    done
  done
done
python3 bench/comm/comm_summary.py "$OUT"
if [ -n "${TT_COMM_AB:-}" ]; then
  echo "A/B: $TT_COMM_AB (C++ only)" | tee "$OUT/ab/setting.txt"
  python3 bench/comm/comm_summary.py "$OUT/ab"
fi
