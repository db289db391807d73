#!/usr/bin/env bash
# The shm tuning A/Bs of issue 5 in one call (after scripts/gpu.sh built build/gpu), each through bench/comm/comm_ab.sh
# into OUTDIR/<name>, and the Python layer against a C++ loop in the same process (bench/comm/py_comm_bench.py --pairs)
# into OUTDIR/py_pairs when PY names an interpreter with the package:
# - gather: single copies from 32 KiB pieces, on 4 KiB pages and on huge pages (TIERTRAIN_COMM_HUGE_BYTES), against
#   the default (256 KiB pieces);
# - tree: the arrival tree (TIERTRAIN_COMM_TREE_RANKS=16) against the flat arrival, 8 B-1 KiB, 16/24/32 ranks;
# - stream: streaming stores from 64 KiB results (TIERTRAIN_COMM_STREAM_BYTES) for allreduce of 256 KiB-16 MiB;
# - gather_pages: gathers of 256 KiB-8 MiB with comm-bench's buffers on 4 KiB pages below 4 MiB (the default, as
#   numpy's) against huge pages from 64 KiB (Note [single copy by pages]), 8/16/32 ranks;
# - tree32: the default arrival at 32 ranks (the tree) against the flat one (TIERTRAIN_COMM_TREE_RANKS=0);
# - py_huge: Python Gather, Allreduce and Bcast of 1-8 MiB on tiertrain.comm.zeros buffers (huge pages) against
#   mpi4py + Open MPI on the same kind of buffers, 8/16/32 ranks (needs PY, and mpi4py for the second).
# - allreduce_profile: where an allreduce of 1 and 4 MiB spends its rounds (TIERTRAIN_COMM_PROFILE), 8/16/32 ranks;
# - allreduce_chunks: allreduce of 1-8 MiB with 1 and 2 MiB segment areas (smaller rounds) against the default 8.
# - allreduce_span: allreduce of 1-16 MiB with rounds bounded by the default span (32 MiB over all ranks) against
#   none (TIERTRAIN_COMM_REDUCE_SPAN=0: half an area, 4 MiB), 8/16/32 ranks, 3 repeats.
# - crew: allreduce, broadcast and allgather of 1-16 MiB at 8 and 16 ranks, one core a rank (one thread) against
#   each rank's share of the CPUs with as many threads (Note [crew]).
#   bench/comm/comm_tuning.sh OUTDIR [EXPERIMENT...]      (default: gather tree stream py_pairs)
set -uo pipefail
OUT=${1:?usage: bench/comm/comm_tuning.sh OUTDIR [gather] [tree] [stream] [py_pairs]}
shift
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
export TT=${TT:-build/gpu/src/tiertrain}
for e in "${@:-gather tree stream py_pairs}"; do for x in $e; do case "$x" in
  gather)
    TT_AB_RANKS="8 16 32" TT_AB_COLLECTIVES=gather TT_AB_ARGS="-b 256K -e 8M -f 2 -n 20 -w 5" TT_AB_REPEATS=2 \
      TT_AB_SETTINGS="-;TIERTRAIN_COMM_CMA_BYTES=32768;TIERTRAIN_COMM_HUGE_BYTES=65536 TIERTRAIN_COMM_CMA_BYTES=32768;TIERTRAIN_COMM_HUGE_BYTES=65536" \
      bench/comm/comm_ab.sh "$OUT/gather" > "$OUT/gather.out" 2>&1 ;;
  tree)
    TT_AB_RANKS="16 24 32" TT_AB_COLLECTIVES="allreduce broadcast" TT_AB_REPEATS=3 \
      TT_AB_SETTINGS="-;TIERTRAIN_COMM_TREE_RANKS=16" bench/comm/comm_ab.sh "$OUT/tree" > "$OUT/tree.out" 2>&1
    TT_AB_RANKS="16 24 32" TT_AB_COLLECTIVES="gather allgather" TT_AB_REPEATS=3 TT_AB_ARGS="-b 256 -e 1K -f 2 -n 2000 -w 200" \
      TT_AB_SETTINGS="-;TIERTRAIN_COMM_TREE_RANKS=16" bench/comm/comm_ab.sh "$OUT/tree" > "$OUT/tree2.out" 2>&1 ;;
  stream)
    TT_AB_RANKS="16 32" TT_AB_COLLECTIVES=allreduce TT_AB_ARGS="-b 256K -e 16M -f 2 -n 10 -w 3" TT_AB_REPEATS=2 \
      TT_AB_SETTINGS="-;TIERTRAIN_COMM_STREAM_BYTES=65536" bench/comm/comm_ab.sh "$OUT/stream" > "$OUT/stream.out" 2>&1 ;;
  gather_pages)
    TT_AB_RANKS="8 16 32" TT_AB_COLLECTIVES=gather TT_AB_ARGS="-b 256K -e 8M -f 2 -n 20 -w 5" TT_AB_REPEATS=2 \
      TT_AB_SETTINGS="-;TIERTRAIN_COMM_HUGE_BYTES=65536" bench/comm/comm_ab.sh "$OUT/gather_pages" > "$OUT/gather_pages.out" 2>&1 ;;
  tree32)
    TT_AB_RANKS=32 TT_AB_COLLECTIVES="allreduce broadcast" TT_AB_REPEATS=3 TT_AB_SETTINGS="-;TIERTRAIN_COMM_TREE_RANKS=0" \
      bench/comm/comm_ab.sh "$OUT/tree32" > "$OUT/tree32.out" 2>&1
    TT_AB_RANKS=32 TT_AB_COLLECTIVES="gather allgather" TT_AB_REPEATS=3 TT_AB_ARGS="-b 256 -e 1K -f 2 -n 2000 -w 200" \
      TT_AB_SETTINGS="-;TIERTRAIN_COMM_TREE_RANKS=0" bench/comm/comm_ab.sh "$OUT/tree32" > "$OUT/tree32b.out" 2>&1 ;;
  py_huge)
    [ -n "${PY:-}" ] && "$PY" -c "import tiertrain.comm" 2>/dev/null || { echo "py_huge: no PY with tiertrain" >&2; continue; }
    mkdir -p "$OUT/py_huge"
    flags=(--bind-to core --map-by core)
    [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
    for n in ${TT_HUGE_RANKS:-8 16 32}; do
      [ "$n" -le "$(nproc)" ] || continue
      for c in gather allreduce broadcast; do
        timeout 100 "$TT" launch -n "$n" --bind-to core -- "$PY" bench/comm/py_comm_bench.py -C "$c" -b 1M -e 8M -f 2 -n 20 \
          -w 5 --huge --json "$OUT/py_huge/py_${c}_$n.json" > "$OUT/py_huge/py_${c}_$n.log" 2>&1 ||
          tail -3 "$OUT/py_huge/py_${c}_$n.log"
        if "$PY" -c "import mpi4py" 2>/dev/null && command -v mpirun >/dev/null; then
          timeout 100 mpirun -n "$n" "${flags[@]}" "$PY" bench/comm/mpi4py_bench.py -C "$c" -b 1M -e 8M -f 2 -n 20 -w 5 --huge \
            --json "$OUT/py_huge/ompi_${c}_$n.json" > "$OUT/py_huge/ompi_${c}_$n.log" 2>&1 || tail -3 "$OUT/py_huge/ompi_${c}_$n.log"
        fi
      done
    done ;;
  allreduce_profile)
    mkdir -p "$OUT/allreduce_profile"
    for n in 8 16 32; do
      [ "$n" -le "$(nproc)" ] || continue
      for b in 1M 4M; do
        TIERTRAIN_COMM_PROFILE=1 timeout 60 "$TT" launch -n "$n" --bind-to core -- "$TT" comm-bench -C allreduce -b "$b" \
          -e "$b" -n 50 -w 10 -c 0 > "$OUT/allreduce_profile/allreduce_${n}_$b.log" 2>&1
      done
    done ;;
  allreduce_chunks)
    TT_AB_RANKS="8 16 32" TT_AB_COLLECTIVES=allreduce TT_AB_ARGS="-b 1M -e 8M -f 2 -n 20 -w 5" TT_AB_REPEATS=2 \
      TT_AB_SETTINGS="-;TIERTRAIN_COMM_BUFFER=1048576;TIERTRAIN_COMM_BUFFER=2097152" \
      bench/comm/comm_ab.sh "$OUT/allreduce_chunks" > "$OUT/allreduce_chunks.out" 2>&1 ;;
  allreduce_span)
    TT_AB_RANKS="8 16 32" TT_AB_COLLECTIVES=allreduce TT_AB_ARGS="-b 1M -e 16M -f 2 -n 20 -w 5" TT_AB_REPEATS=3 \
      TT_AB_SETTINGS="-;TIERTRAIN_COMM_REDUCE_SPAN=0" bench/comm/comm_ab.sh "$OUT/allreduce_span" > "$OUT/allreduce_span.out" 2>&1 ;;
  crew)
    TT_AB_RANKS="8 16" TT_AB_COLLECTIVES="allreduce broadcast allgather" TT_AB_ARGS="-b 1M -e 16M -f 2 -n 10 -w 3" \
      TT_AB_REPEATS=2 TT_AB_SETTINGS="-;BIND=share" bench/comm/comm_ab.sh "$OUT/crew" > "$OUT/crew.out" 2>&1 ;;
  py_pairs)
    [ -n "${PY:-}" ] && "$PY" -c "import tiertrain.comm" 2>/dev/null || { echo "py_pairs: no PY with tiertrain" >&2; continue; }
    mkdir -p "$OUT/py_pairs"
    for n in ${TT_PAIRS_RANKS:-8 16}; do
      for c in allreduce broadcast gather allgather; do
        timeout 120 "$TT" launch -n "$n" --bind-to core -- "$PY" bench/comm/py_comm_bench.py -C "$c" -b 1M -e 64M -f 2 -n 10 \
          -w 3 --pairs 5 --json "$OUT/py_pairs/py_${c}_$n.json" > "$OUT/py_pairs/py_${c}_$n.log" 2>&1 ||
          tail -3 "$OUT/py_pairs/py_${c}_$n.log"
      done
    done ;;
  *) echo "unknown experiment $x" >&2; exit 2 ;;
esac; done; done
