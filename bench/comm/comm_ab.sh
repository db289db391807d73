#!/usr/bin/env bash
# A/B of shm settings on `tiertrain comm-bench` (issue 5's tuning): the same sweep under each setting, the settings
# interleaved within every repeat (so a slow spell of the machine falls on all of them), ranks bound to cores;
# then bench/comm/comm_ab_summary.py writes a table of the median time per size and setting, and each setting's ratio
# to the first, into OUTDIR/results.md.
#   TT_AB_SETTINGS="-;TIERTRAIN_COMM_CMA_BYTES=16384" bench/comm/comm_ab.sh OUTDIR
# TT_AB_SETTINGS: settings separated by ';', each "NAME=VALUE ..." or "-" for none (default: "-" only); BIND=share
# in a setting binds the ranks to their share of the CPUs instead of one core each; MPI=c++ (the whole setting)
# runs Open MPI's collectives from C++ instead (bench/mpi_raw_bench under mpirun, ranks bound to cores as
# bench/comm/comm_host.sh binds them), MPI=py through mpi4py (bench/comm/mpi4py_bench.py, PY the interpreter);
# TT_AB_RANKS (default "8 16"), TT_AB_COLLECTIVES (default allreduce), TT_AB_ARGS (the sweep flags, default
# "-b 8 -e 64 -f 2 -n 2000 -w 200" with bench/comm/comm_host.sh's warm-up: latency; gather, allgather and scatter, whose
# size is all ranks' pieces, then take 8-64 B a piece; TT_AB_STEP the factor between sizes), TT_AB_REPEATS (default 3), TT_AB_RUN_TIMEOUT (seconds a run may take, default 100), TT the
# binary, TT_MPI_BENCH the C++ reference (default beside it: build/gpu/bench/mpi_raw_bench).
set -uo pipefail
OUT=${1:?usage: bench/comm/comm_ab.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
TT=${TT:-build/gpu/src/tiertrain}
IFS=';' read -r -a settings <<< "${TT_AB_SETTINGS:--}"
MPI_BENCH=${TT_MPI_BENCH:-$(dirname "$(dirname "$TT")")/bench/mpi_raw_bench}
cpus=$(nproc)
: > "$OUT/settings.txt"
for i in "${!settings[@]}"; do echo "s$i ${settings[$i]}" >> "$OUT/settings.txt"; done
echo "comm-bench ${TT_AB_ARGS:--b 8 -e 64 -f ${TT_AB_STEP:-2} -n 2000 -w 200 --warmup-ms 100 --first-warmup-ms 1000 --min-ms 20 (8-64 B a piece where the size is every piece)} -c 1" > "$OUT/command.txt"
for n in ${TT_AB_RANKS:-8 16}; do
  [ "$n" -le "$cpus" ] || { echo "skipping $n ranks: $cpus CPUs" >&2; continue; }
  tt_mpirun_flags "$n"
  for c in ${TT_AB_COLLECTIVES:-allreduce}; do
    if [ -n "${TT_AB_ARGS:-}" ]; then
      read -r -a args <<< "$TT_AB_ARGS"
    else
      # (With comm_host.sh's warm-up: a process's first few hundred ms of calls are slow on the H200 machine's VM.)
      case "$c" in
        gather | allgather | scatter | reduce_scatter | alltoall) args=(-b $((8 * n)) -e $((64 * n))) ;;
        *) args=(-b 8 -e 64) ;;
      esac
      args+=(-f "${TT_AB_STEP:-2}" -n 2000 -w 200 --warmup-ms 100 --first-warmup-ms 1000 --min-ms 20)
    fi
    for r in $(seq 1 "${TT_AB_REPEATS:-3}"); do
      for i in "${!settings[@]}"; do
        envs=${settings[$i]}
        [ "$envs" = "-" ] && envs=""
        # BIND=share in a setting: the ranks get their share of the CPUs (tiertrain launch --bind-to share), not one.
        bind=core
        case " $envs " in *" BIND=share "*) bind=share; envs=$(echo " $envs " | sed 's/ BIND=share / /') ;; esac
        name="${c}_${n}_s${i}_r${r}"
        if [ "$envs" = "MPI=c++" ] || [ "$envs" = "MPI=py" ]; then
          prog=("$MPI_BENCH")
          [ "$envs" = "MPI=py" ] && prog=("${PY:-python3}" bench/comm/mpi4py_bench.py)
          timeout "${TT_AB_RUN_TIMEOUT:-100}" mpirun -n "$n" "${mpirun_flags[@]}" "${prog[@]}" -C "$c" "${args[@]}" \
            --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1 || { echo "$name failed:"; tail -3 "$OUT/$name.log"; }
          continue
        fi
        # shellcheck disable=SC2086
        env $envs timeout "${TT_AB_RUN_TIMEOUT:-100}" "$TT" launch -n "$n" --bind-to "$bind" -- "$TT" comm-bench -C "$c" \
          "${args[@]}" -c 1 --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1 || { echo "$name failed:"; tail -3 "$OUT/$name.log"; }
      done
    done
  done
done
python3 bench/comm/comm_ab_summary.py "$OUT"
