#!/usr/bin/env bash
# On the GPU machine: build (Release, sm_90, tests on) the named test executables and run each with its gtest filter,
# logs and a summary under OUTDIR (packed in OUTDIR/results.tgz: the device tool brings back a few files only).
#   scripts/gpu_tests.sh OUTDIR comm_test:'CommNccl.*' generate_test:'*' ...
set -uo pipefail
OUT=${1:?usage: scripts/gpu_tests.sh OUTDIR EXE:FILTER...}
shift
source "$(dirname "$0")/../bench/lib.sh"
tt_gpu_setup "$OUT"
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
pack() { tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true; }
trap pack EXIT
exes=()
for spec in "$@"; do exes+=("${spec%%:*}"); done
tt_gpu_build "$OUT" tiertrain "${exes[@]}" || exit 1
status=0
for spec in "$@"; do
  exe=${spec%%:*}
  filter=${spec#*:}
  build/gpu/tests/"$exe" --gtest_filter="$filter" > "$OUT/$exe.log" 2>&1 || status=1
  echo "$exe $filter: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$OUT/$exe.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]|Failure' -A8 "$OUT/$exe.log" | head -40
done
exit $status
