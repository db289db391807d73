#!/bin/sh
# Issue 24: the installed layout works from a clean prefix. `cmake --install` of the build into a temporary folder,
# then a separate project finds it with find_package(tiertrain), links tiertrain::comm, and its 3 ranks (started by
# the installed tiertrain) all-reduce.
#   tests/install/install_test.sh BUILD_DIR [CXX CXXFLAGS LDFLAGS]
# The consumer is built with the compiler and flags of the build under test, as a user of that toolchain would
# (a sanitizer build's static libraries need its runtime: -fsanitize=... at the consumer's link too).
set -eu
build=$1
cxx=${2:-}
cxxflags=${3:-}
ldflags=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -x "$work/prefix/bin/tiertrain"
test -f "$work/prefix/include/tiertrain/comm/comm.h"
test -f "$work/prefix/lib/cmake/tiertrain/tiertrainConfig.cmake" || test -f "$work/prefix/lib64/cmake/tiertrain/tiertrainConfig.cmake"
# The consumer sees the installed prefix only (not this source tree or build).
cmake -S "$here/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" \
  ${cxx:+-DCMAKE_CXX_COMPILER="$cxx"} -DCMAKE_CXX_FLAGS="$cxxflags" -DCMAKE_EXE_LINKER_FLAGS="$ldflags" \
  > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
out=$("$work/prefix/bin/tiertrain" launch -n 3 -- "$work/consumer/allreduce_sum")
echo "$out"
for r in 0 1 2; do
  echo "$out" | grep -q "rank $r of 3: sum 6" || { echo "rank $r did not report sum 6"; exit 1; }
done
echo "installed layout OK"
