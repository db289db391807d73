#!/usr/bin/env bash
# On a machine with a GPU, in one command: build (Release, sm_90), run every test (the GPU tests included), run the
# GPU benchmarks side by side with PyTorch, and write logs, JSON and a table (results.json, results.md) into OUTDIR.
#
#   scripts/gpu.sh OUTDIR [--no-tests] [--no-bench] [--ooc] [--offload] [--comm] [--nccl] [--sanitize]
#
# --offload adds bench/ooc/offload_gpu.sh (streamed parameters and the CPU optimizer, issue 4 b) into OUTDIR/raw/offload;
# --comm adds bench/comm/comm_host.sh (host collectives against Open MPI, issue 5) into OUTDIR/raw/comm, with the Python
# package and mpi4py installed offline into a venv (scripts/gpu_pyenv.sh); --nccl adds bench/comm/nccl_gpu.sh (the nccl
# backend against raw NCCL and PyTorch on the machine's GPUs) into OUTDIR/raw/nccl.
# --ooc adds the out-of-core benchmark (bench/ooc/ooc_gpu.sh: plans, the CPU optimizer, PyTorch save_on_cpu) into
# OUTDIR/raw/ooc. --sanitize runs compute-sanitizer memcheck and racecheck over the GPU tests (every CUDA case of
# the test binaries that have one; TT_SANITIZE_TIMEOUT seconds each, default 120; TT_SANITIZE_SPECS="tool:binary:filter
# ..." picks a part) into OUTDIR/raw/sanitizer.log.
#
# TT_COMMIT names the commit in the results when the tree has no .git (a copied working tree).
# Dependencies: the Debian packages of scripts/deps.sh. On a machine that has a GPU but cannot install them (no
# network), put their .deb files in .deps/debs/ (scripts/gpu_fetch_debs.sh, run where apt works) and this script
# unpacks the missing ones into a private prefix.
set -euo pipefail
OUT=${1:?usage: scripts/gpu.sh OUTDIR [--no-tests] [--no-bench] [--ooc] [--offload] [--comm] [--nccl] [--sanitize]}
shift
RUN_TESTS=1
RUN_BENCH=1
RUN_OOC=0
RUN_SANITIZE=0
RUN_OFFLOAD=0
RUN_COMM=0
RUN_NCCL=0
for a in "$@"; do
  case "$a" in
    --no-tests) RUN_TESTS=0 ;;
    --no-bench) RUN_BENCH=0 ;;
    --ooc) RUN_OOC=1 ;;
    --sanitize) RUN_SANITIZE=1 ;;
    --offload) RUN_OFFLOAD=1 ;;
    --comm) RUN_COMM=1 ;;
    --nccl) RUN_NCCL=1 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# Everything goes to $OUT/raw; at the end it is packed into raw.tar.gz beside results.md, results.json and ctest.log
# (a device machine returns only a few files).
FINAL=$OUT
OUT=$FINAL/raw
mkdir -p "$OUT"
pack() {
  cp -f "$OUT"/results.md "$OUT"/results.json "$OUT"/ctest.log "$OUT"/sanitizer.log "$FINAL"/ 2>/dev/null || true
  tar -C "$FINAL" -czf "$FINAL/raw.tar.gz" raw && rm -rf "$OUT"
}
trap pack EXIT
cd "$(dirname "$0")/.."
# NVLink multicast stays off on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

# --- dependencies: the Debian packages, or their .deb files unpacked into a private prefix ---------------------------
source scripts/gpu_deps.sh

# --- build ----------------------------------------------------------------------------------------------------------
{ nvidia-smi; nvcc --version; } > "$OUT/machine.txt" 2>&1 || true
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERTRAIN_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  ${cmake_prefix:+-DCMAKE_PREFIX_PATH=$cmake_prefix} 2>&1 | tee "$OUT/configure.log"
cmake --build build/gpu -j "$(nproc)" 2>&1 | tail -n 30 | tee "$OUT/build.log"
TT=build/gpu/src/tiertrain
# The Python package and mpi4py for --comm build in the background meanwhile (scripts/gpu_pyenv.sh).
if [ "$RUN_COMM" = 1 ]; then
  scripts/gpu_pyenv.sh > "$OUT/pyenv.out" 2> "$OUT/pyenv.log" &
  PYENV_PID=$!
fi

# --- tests ----------------------------------------------------------------------------------------------------------
status=0
if [ "$RUN_TESTS" = 1 ]; then
  # TT_CTEST_REGEX runs a part of the tests (ctest -R).
  ( cd build/gpu && ctest -j1 --output-on-failure --timeout 900 ${TT_CTEST_REGEX:+-R "$TT_CTEST_REGEX"} ) \
    > "$OUT/ctest.log" 2>&1 || status=1
  tail -n 15 "$OUT/ctest.log"
fi

# --- benchmarks: GPT-2 124M shape on random GPT-2 tokens, tiertrain and PyTorch side by side -------------------------
if [ "$RUN_BENCH" = 1 ]; then
  SHARD=/tmp/tiertrain-random-gpt2.bin
  [ -f "$SHARD" ] || python3 tools/make_random_shard.py "$SHARD" --tokens 20000000
  B=${TT_BENCH_BATCH:-16}
  common=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch "$B")
  for dt in bf16 f32; do
    "$TT" train "${common[@]}" --dtype $dt --data "$SHARD" --steps 30 --warmup 5 --eval-every 0 --log-every 10 \
      --metrics-out "$OUT/tiertrain_$dt.json" 2>&1 | tee "$OUT/tiertrain_$dt.log" || status=1
  done
  py=(python3 bench/training/torch_gpt_gpu.py --layers 12 --dim 768 --heads 12 --seq 1024 --batch "$B" --steps 30)
  "${py[@]}" --mode fp32 --json-out "$OUT/torch_fp32_eager.json" || status=1
  "${py[@]}" --mode bf16 --json-out "$OUT/torch_bf16_eager.json" || status=1
  python3 bench/training/gpu_summary.py "$OUT" || status=1
  # The main job on the GPU: default model, default corpus (its metrics are not a benchmark row).
  "$TT" train --data "$DATA_DIR" --log-every 250 --metrics-out "$OUT/main_job.metrics" > "$OUT/main_job.log" 2>&1 ||
    status=1
  tail -n 3 "$OUT/main_job.log"
  "${py[@]}" --mode bf16 --compile --json-out "$OUT/torch_bf16_compile.json" > "$OUT/torch_compile.log" 2>&1 ||
    status=1
  python3 bench/training/gpu_summary.py "$OUT" || status=1
fi
# --- compute-sanitizer over the GPU tests ----------------------------------------------------------------------------
if [ "$RUN_SANITIZE" = 1 ]; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  limit=${TT_SANITIZE_TIMEOUT:-120}
  # TT_SANITIZE_SPECS: "tool:binary:gtest-filter ..." to run a part (racecheck of the training tests is slow).
  specs=${TT_SANITIZE_SPECS:-}
  if [ -z "$specs" ]; then
    for tool in memcheck racecheck; do
      for t in "backend_ops_test:*" "host_stream_test:*Cuda*" "gpt_golden_test:*Cuda*" "trainer_test:TrainerCuda*"; do
        specs="$specs $tool:$t"
      done
    done
  fi
  for spec in $specs; do
    tool=${spec%%:*} rest=${spec#*:}
    bin=${rest%%:*} filter=${rest#*:}
    echo "== $tool $bin $filter" >> "$OUT/sanitizer.log"
    rc=0
    timeout "$limit" "$SAN" --tool "$tool" "build/gpu/tests/$bin" --gtest_filter="$filter" >> "$OUT/sanitizer.log" 2>&1 || rc=$?
    echo "rc=$rc (124: stopped at the ${limit} s limit)" >> "$OUT/sanitizer.log"
    [ "$rc" = 0 ] || status=1
  done
  grep -E "^==|^rc=|SUMMARY" "$OUT/sanitizer.log" || true
fi

# --- out-of-core plans and the CPU optimizer (issue 4) ----------------------------------------------------------------
if [ "$RUN_OOC" = 1 ]; then
  TT="$TT" bench/ooc/ooc_gpu.sh "$OUT/ooc" "$DATA_DIR" || status=1
fi
if [ "$RUN_OFFLOAD" = 1 ]; then
  # The (b) model: d4096 L8 (1.6G parameters); a lower learning rate than the default, which diverges at this width.
  TT="$TT" TT_OFF_DIM=${TT_OFF_DIM:-4096} TT_OFF_HEADS=${TT_OFF_HEADS:-32} bench/ooc/offload_gpu.sh "$OUT/offload" "$DATA_DIR" ||
    status=1
fi
if [ "$RUN_NCCL" = 1 ]; then
  TT="$TT" bench/comm/nccl_gpu.sh "$OUT/nccl" || status=1
fi
if [ "$RUN_COMM" = 1 ]; then
  wait "$PYENV_PID" && PY=$(tail -n 1 "$OUT/pyenv.out") || PY=python3
  # The Python package's tests on this machine (its GPUs included: torch CUDA tensors through nccl).
  TT_TIERTRAIN_BIN="$TT" "$PY" -m pytest -q python/tests > "$OUT/pytest.log" 2>&1 || status=1
  tail -n 3 "$OUT/pytest.log"
  PY="$PY" TT="$TT" bench/comm/comm_host.sh "$OUT/comm" || status=1
fi
exit $status
