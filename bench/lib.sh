# What the GPU training benchmarks (bench/ooc_gpu.sh, bench/offload_gpu.sh) share; sourced, not run.
#   tt_bench_setup OUTDIR DATA        the output folder, the repository root as the working directory, NVLink
#                                     multicast off, TT (the binary)
#   tt_run NAME FLAGS...              one `tiertrain train` with "${common[@]}" and FLAGS, its metrics in
#                                     OUT/tiertrain_NAME.json and its log beside; prints the summary line. Skipped
#                                     unless NAME is in RUNS when RUNS (" a b c ") is set.

tt_bench_setup() {
  OUT=$1
  DATA=$2
  mkdir -p "$OUT"
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  TT=${TT:-build/gpu/src/tiertrain}
}

tt_run() {
  local name=$1
  shift
  if [ -n "${RUNS:-}" ] && [[ "$RUNS" != *" $name "* ]]; then return 0; fi
  "$TT" train "${common[@]}" "$@" --metrics-out "$OUT/tiertrain_$name.json" > "$OUT/tiertrain_$name.log" 2>&1 ||
    { echo "tiertrain $name failed:"; tail -5 "$OUT/tiertrain_$name.log"; }
  tail -n 1 "$OUT/tiertrain_$name.log"
}
