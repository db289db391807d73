#!/usr/bin/env bash
# Where the first size's time goes in the Python benchmark (the 1 MiB out-of-place anomaly): py_comm_bench.py at
# 8 ranks, 1-4 MiB on Comm.zeros, with TIERTRAIN_BENCH_TRACE (each rank's warm-up on stderr), under a few settings (helpers pinned or not: Note [crew]).
#   bench/comm/py_first_size.sh OUTDIR   (after scripts/gpu_comm.sh ... --no-bench made build/gpu and build/gpu-pyenv)
set -u
O=${1:?usage: bench/comm/py_first_size.sh OUTDIR}
mkdir -p "$O"
cd "$(dirname "$0")/../.."
PY=${PY:-build/gpu-pyenv/bin/python}
TT=${TT:-build/gpu/src/tiertrain}
# run NAME "ENV ..." ARGS...
run() {
  local name=$1 envs=$2
  shift 2
  # shellcheck disable=SC2086
  env $envs TIERTRAIN_BENCH_TRACE=1 PYTHONUNBUFFERED=1 timeout 40 "$TT" launch -n 8 --bind-to share -- "$PY" \
    bench/comm/py_comm_bench.py -b 1M -e 4M -f 2 -n 10 -w 3 "$@" > "$O/$name.log" 2>&1 || echo "$name failed"
}
for c in broadcast allreduce; do
  for r in 1 2; do
    run "${c}_pool_pin_r$r" "" -C "$c" --pool --warmup-ms 100
    run "${c}_pool_nopin_r$r" "TIERTRAIN_COMM_THREAD_PIN=0" -C "$c" --pool --warmup-ms 100
  done
  run "${c}_numpy_pin" "" -C "$c" --warmup-ms 100
  run "${c}_pool_w1000" "" -C "$c" --pool --warmup-ms 1000
done
