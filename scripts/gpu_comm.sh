#!/usr/bin/env bash
# On the GPU machine, the host collectives against Open MPI in one command: build (scripts/gpu.sh, no tests, no
# GPU benchmarks), then the Python package and mpi4py into a venv under build/ (kept on a warm machine: a second call
# skips the ~4 min build), its tests, then bench/comm/comm_host.sh into OUTDIR/comm with the TT_COMM_* settings given.
# The venv is built before anything is measured, never beside it.
# --no-bench stops after the venv and the tests (for a script of one's own after it: PY=build/gpu-pyenv/bin/python).
# --pack leaves OUTDIR/comm as comm.tgz (with results.md beside it) and the build logs as build.tgz: the device tool
# brings back a limited number of files, and a full comm_host.sh run writes hundreds.
# TT_COMMIT names the commit in commit.txt (the device's copy of the tree may carry an older git HEAD).
#   scripts/gpu_comm.sh OUTDIR [--no-pytest] [--no-bench] [--pack]
set -uo pipefail
OUT=${1:?usage: scripts/gpu_comm.sh OUTDIR [--no-pytest] [--no-bench] [--pack]}
shift
RUN_PYTEST=1
RUN_BENCH=1
PACK=0
for a in "$@"; do
  case "$a" in
    --no-pytest) RUN_PYTEST=0 ;;
    --no-bench) RUN_BENCH=0 ;;
    --pack) PACK=1 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
scripts/gpu.sh "$OUT/build" --no-tests --no-bench > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
arch=x86_64-linux-gnu
if [ -d /tmp/tiertrain-deps/usr ]; then
  export CMAKE_PREFIX_PATH=/tmp/tiertrain-deps/usr
  export LD_LIBRARY_PATH=/tmp/tiertrain-deps/usr/lib/$arch:/tmp/tiertrain-deps/usr/lib/$arch/openblas-openmp
fi
VENV=$PWD/build/gpu-pyenv
commit=${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
# The package is rebuilt when the tree's commit differs from the one it was built from.
if [ "$(cat "$VENV/.commit" 2>/dev/null)" != "$commit" ] || ! "$VENV/bin/python" -c "import tiertrain.comm" 2>/dev/null; then
  start=$(date +%s)
  scripts/gpu_pyenv.sh "$VENV" > "$OUT/pyenv.out" 2> "$OUT/pyenv.log" && echo "$commit" > "$VENV/.commit"
  echo "venv built in $(( $(date +%s) - start )) s"
  # A freshly built mpi4py wheel comes back with the results: put it in .deps/wheels to skip its build next time.
  [ -d "$VENV/wheels" ] && mkdir -p "$OUT/wheels" && cp "$VENV"/wheels/mpi4py-*.whl "$OUT/wheels/" 2>/dev/null
fi
PY=$VENV/bin/python
if [ "$RUN_PYTEST" = 1 ]; then
  TT_TIERTRAIN_BIN=build/gpu/src/tiertrain "$PY" -m pytest -q -p no:cacheprovider python/tests > "$OUT/pytest.log" 2>&1
  tail -n 2 "$OUT/pytest.log"
fi
echo "$commit" > "$OUT/commit.txt"
pack() {
  [ "$PACK" = 1 ] || return 0
  [ -d "$OUT/build" ] && tar czf "$OUT/build.tgz" -C "$OUT" build && rm -rf "$OUT/build"
  if [ -d "$OUT/comm" ]; then
    [ -f "$OUT/comm/results.md" ] && cp "$OUT/comm/results.md" "$OUT/results.md"
    tar czf "$OUT/comm.tgz" -C "$OUT" comm && rm -rf "$OUT/comm"
  fi
}
if [ "$RUN_BENCH" != 1 ]; then
  pack
  exit 0
fi
PY="$PY" TT=build/gpu/src/tiertrain bench/comm/comm_host.sh "$OUT/comm"
pack
