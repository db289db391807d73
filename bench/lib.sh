# What the benchmarks' shell scripts share (bench/ooc/ooc_gpu.sh, bench/ooc/offload_gpu.sh, bench/comm/comm_host.sh,
# bench/comm/comm_ab.sh, ...); sourced, not run.
#   tt_bench_setup OUTDIR DATA        the output folder, the repository root as the working directory, NVLink
#                                     multicast off, TT (the binary)
#   tt_run NAME FLAGS...              one `tiertrain train` with "${common[@]}" and FLAGS, its metrics in
#                                     OUT/tiertrain_NAME.json and its log beside; prints the summary line. Skipped
#                                     unless NAME is in RUNS when RUNS (" a b c ") is set.
#   tt_run_tight NAME FLAGS...        tt_run at a budget of what the run needs: its --dry-run figure plus 0.01 of its
#                                     unit (at most ~15 MiB over), instead of the automatic budget's 5% slack, so that
#                                     what the budget leaves after model state is what the plan needs.
#   tt_gpu_setup OUTDIR               (the GPU scripts: bench/perf/plan_gpu.sh, bench/training/ab_step_time.sh) sets
#                                     OUT to OUTDIR's absolute path (made), the repository root as the working
#                                     directory, NVLink multicast off, nvcc on PATH, the Debian packages of
#                                     scripts/gpu_deps.sh (cmake_prefix)
#   tt_gpu_tiertrain                  (after tt_gpu_setup; bench/perf/*.sh) builds tiertrain alone for sm_90 in
#                                     build/gpu (Release, no tests) and sets TT to it; prints the build's last line
#   tt_gpu_build OUT TARGET...        (after tt_gpu_setup; bench/sample/sample_gpu.sh, scripts/gpu_tests.sh) builds
#                                     the targets for sm_90 in build/gpu (Release, tests on), logs in OUT; fails with
#                                     the first errors shown
#   tt_random_shard                   sets SHARD to a GPT-2 token shard of 20M random tokens in /tmp (made once)
#   tt_gpu_train_setup OUTDIR         (bench/um/*.sh) tt_gpu_setup, OUT/commit.txt (TT_COMMIT when set), TT (built
#                                     by tt_gpu_tiertrain if missing; fails if it is still missing) and SHARD
#   tt_mpirun_flags N                 (the collectives' benchmarks, bench/comm/comm_host.sh and
#                                     bench/comm/comm_ab.sh) sets the array mpirun_flags: Open MPI's N ranks bound to physical cores, or to hardware
#                                     threads where N is more than the cores (as tiertrain's launcher binds to
#                                     logical CPUs); --allow-run-as-root as root.

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

tt_run_tight() {
  local name=$1
  shift
  if [ -n "${RUNS:-}" ] && [[ "$RUNS" != *" $name "* ]]; then return 0; fi
  local budget
  budget=$("$TT" train "${common[@]}" "$@" --dry-run 2>&1 |
    sed -n 's/.*needs \([0-9.]*\) \([KMG]iB\) of.*/\1 \2/p' | head -n 1 |
    awk '{ if (NF == 2) printf "%.2f%s", $1 + 0.01, $2 }')
  if [ -z "$budget" ]; then
    echo "tiertrain $name: no need figure from --dry-run; the automatic budget"
    tt_run "$name" "$@"
    return
  fi
  tt_run "$name" "$@" --device-budget "$budget"
}

tt_mpirun_flags() {
  local cores
  cores=$(lscpu -p=Core,Socket 2>/dev/null | grep -v '^#' | sort -u | wc -l)
  [ "$cores" -gt 0 ] || cores=$(nproc)
  mpirun_flags=(--bind-to core --map-by core)
  [ "$1" -gt "$cores" ] && mpirun_flags=(--use-hwthread-cpus --bind-to hwthread --map-by hwthread)
  [ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)
  return 0
}

tt_gpu_setup() {
  mkdir -p "$1"
  OUT=$(cd "$1" && pwd)
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
  source scripts/gpu_deps.sh
}

# Configures build/gpu (Release, sm_90, tests on) and builds the given targets, logs in OUT/configure.log and
# OUT/build.log; prints the build's time; fails with the first errors shown.
tt_gpu_build() {
  local out=$1
  shift
  local start=$(date +%s)
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERTRAIN_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTIERTRAIN_BUILD_TESTS=ON ${cmake_prefix:+-DCMAKE_PREFIX_PATH=$cmake_prefix} > "$out/configure.log" 2>&1 ||
    { tail -20 "$out/configure.log"; return 1; }
  cmake --build build/gpu -j "$(nproc)" -- -k 0 "$@" > "$out/build.log" 2>&1 ||
    { grep -B2 -A12 "error" "$out/build.log" | head -60; return 1; }
  echo "build: $(( $(date +%s) - start )) s"
}

tt_gpu_tiertrain() {
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERTRAIN_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTIERTRAIN_BUILD_TESTS=OFF ${cmake_prefix:+-DCMAKE_PREFIX_PATH=$cmake_prefix} > /dev/null 2>&1
  cmake --build build/gpu -j "$(nproc)" --target tiertrain 2>&1 | tail -n 1
  TT=build/gpu/src/tiertrain
}

tt_random_shard() {
  SHARD=/tmp/tiertrain-random-gpt2.bin
  [ -f "$SHARD" ] || python3 tools/make_random_shard.py "$SHARD" --tokens 20000000 > /dev/null
}

# A training benchmark on one GPU: tt_gpu_setup OUTDIR, OUTDIR/commit.txt (TT_COMMIT when given: git on the device
# may be stale), TT (built if missing) and the random GPT-2 shard in SHARD.
tt_gpu_train_setup() {
  tt_gpu_setup "$1"
  echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
  TT=${TT:-build/gpu/src/tiertrain}
  [ -x "$TT" ] || tt_gpu_tiertrain
  [ -x "$TT" ] || { echo "no tiertrain at $TT: the build failed"; return 1; }
  tt_random_shard
}
