#!/usr/bin/env bash
# The C++ test suite under a sanitizer (issue 25), CPU backend:
#
#   scripts/sanitize.sh asan [CTEST_REGEX]    AddressSanitizer + UndefinedBehaviorSanitizer (build/asan)
#   scripts/sanitize.sh tsan [CTEST_REGEX]    ThreadSanitizer (build/tsan)
#   scripts/sanitize.sh quick                 ASan + UBSan on the tests of the readers of outside input (tensor files,
#                                             config, datasets, checkpoints), in the fuzz targets' build (build/fuzz,
#                                             clang): a quick check by hand (the whole suite's build alone takes
#                                             about 16 minutes on two cores; `scripts/test.sh --full` runs asan and tsan)
#
# Every report stops the test that made it (halt_on_error), so a green run is a clean one. Third-party reports are
# suppressed in scripts/sanitizers/*.supp, each with its reason; the tests that cannot run under a sanitizer are
# left out below, each with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:?usage: scripts/sanitize.sh asan|tsan [CTEST_REGEX]}
case $which in asan|tsan|quick) ;; *) echo "scripts/sanitize.sh: asan, tsan or quick, not '$which'" >&2; exit 2 ;; esac
source scripts/deps.sh
tt_install_deps
supp=$PWD/scripts/sanitizers
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1
export LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1
# ThreadSanitizer cannot see the barriers of an OpenMP runtime that is not instrumented: with GCC's libgomp every
# parallel loop reported its threads' writes as racing with what follows the loop (14 tests). So the tsan build is
# clang's, with LLVM's OpenMP runtime and its Archer tool, which tells TSan about every barrier, task and lock of the
# runtime (OMPT); OpenBLAS, built against libgomp, is given LLVM's runtime under libgomp's name (LLVM's libomp
# implements libgomp's entry points), so one runtime, one team of threads, all of it seen.
if [ "$which" = tsan ]; then
  tt_install_deps "${TIERTRAIN_FUZZ_APT_PACKAGES[@]}"
  llvm_lib=$(dirname "$(readlink -f "$(command -v clang)")")/../lib
  [ -f "$llvm_lib/libarcher.so" ] && [ -f "$llvm_lib/libomp.so.5" ] ||
    { echo "scripts/sanitize.sh: no libarcher.so / libomp.so.5 in $llvm_lib (apt-get install libomp-dev)" >&2; exit 2; }
  mkdir -p build/tsan/gomp
  ln -sf "$(readlink -f "$llvm_lib/libomp.so.5")" build/tsan/gomp/libgomp.so.1
  export LD_LIBRARY_PATH=$PWD/build/tsan/gomp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OMP_TOOL_LIBRARIES=$(readlink -f "$llvm_lib/libarcher.so")
  export TSAN_OPTIONS=$TSAN_OPTIONS:ignore_noninstrumented_modules=1
fi
# Open MPI's shared-memory transport maps more than the sanitizers' shadow likes; its tests use the TCP one.
export OMPI_MCA_btl=self,tcp
# Left out (a regex of test names), with the reasons:
# - tests that cap the address space (ulimit -v): ASan and TSan reserve terabytes of shadow memory;
# - a refused mlock named: ASan's interceptor of mlock does nothing and succeeds;
# - huge pages through madvise: the sanitizers' allocators do not give the alignment the tests check;
# - tests of speed (a time limit, or a prediction checked against a measured step): the sanitizers slow the code
#   2-20 times, and unevenly.
skip='HugePages|RefusedPinNamesRlimitMemlock|PoolsThatCannotBeMappedAreOffEverywhere|Searches48BlocksQuickly|PlanAccuracy'
# Under tsan also: the exhaustive plan search and the CLI's calibrations (single-threaded searches and timings, each
# over 10 minutes under TSan's instrumentation), and the crew's test of a fork's child, which starts threads in the
# child of a threaded process (TSan: "starting new threads after multi-threaded fork is not supported").
[ "$which" = tsan ] && skip="$skip|AutoPlan.EqualsTheExhaustiveSearch|Cli.PlanPredicts|Cli.TrainChoosesThePlan|Crew.AForksChild"
if [ "$which" = quick ]; then
  tt_install_deps "${TIERTRAIN_FUZZ_APT_PACKAGES[@]}"
  cmake --preset fuzz > /dev/null
  cmake --build build/fuzz --target tensorfile_test config_test dataset_test checkpoint_test
  # That build reads past CRC mismatches (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, for the fuzzer's sake: see
  # core/tensorfile.cc), so the tests of flipped bytes are left to the other builds.
  ctest --test-dir build/fuzz -j1 --output-on-failure --timeout 600 \
    -R '^(Crc32|TensorFile|TensorFileGolden|TensorFileTest|Config|ConfigFile|ConfigEnv|ConfigJson|ConfigDescribe|Dataset|Sampler|Checkpoint)\.' \
    -E "$skip|Flipped|TruncatedAndCorruptFilesAreNamed"
  exit
fi
cmake --preset "$which" > /dev/null
cmake --build --preset "$which"
# The ranks under mpirun (CommMpi.*, *UnderMpirun): Open MPI unloads its components before LeakSanitizer reports,
# so their leaks show with no module to attribute or suppress them by; those tests run with leak detection off (the
# other checks stay on).
mpi_tests='CommMpi|UnderMpirun'
mpi_env=()
[ "$which" = asan ] && mpi_env=(env "ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0")
if [ -n "${2:-}" ]; then
  # The tests the regex names, split into the two groups (ctest fails on a regex that names none).
  names=$(ctest --preset "$which" -N -R "$2" -E "$skip" | sed -n 's/^ *Test *#[0-9]*: //p')
  plain=$(grep -Ev "$mpi_tests" <<< "$names" | sed 's/[]*.+?()|^$[]/\\&/g' | paste -sd'|' || true)
  under_mpirun=$(grep -E "$mpi_tests" <<< "$names" | sed 's/[]*.+?()|^$[]/\\&/g' | paste -sd'|' || true)
  [ -n "$names" ] || { echo "scripts/sanitize.sh: no test matches '$2'" >&2; exit 2; }
  [ -n "$plain$under_mpirun" ] || { echo "scripts/sanitize.sh: could not sort the tests of '$2'" >&2; exit 2; }
  [ -z "$plain" ] || ctest --preset "$which" -j1 -R "^($plain)\$" || status=$?
  [ -z "$under_mpirun" ] || "${mpi_env[@]}" ctest --preset "$which" -j1 -R "^($under_mpirun)\$" || status=$?
  exit "${status:-0}"
else
  ctest --preset "$which" -j1 -E "$skip|$mpi_tests"
  "${mpi_env[@]}" ctest --preset "$which" -j1 -R "$mpi_tests" -E "$skip"
fi
