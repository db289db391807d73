#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz (issue 25), built with clang, ASan and UBSan (preset `fuzz`, build/fuzz):
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     each target for SECONDS (default 60), all targets by default
#
# Targets: tensorfile, checkpoint_meta, config, plan, profile, dataset, hf_folder, tokenizer, chat_template, examples (tests/fuzz/README.md). Each first runs the
# inputs that once broke it (tests/fuzz/regressions/TARGET/), then fuzzes from its committed seeds
# (tests/fuzz/corpus/TARGET/) and the inputs earlier runs found (build/fuzz/corpus/TARGET/, not committed). A crash,
# a sanitizer report, an input slower than 10 s or a process over 2 GiB is a finding: the script says where the
# input was written (build/fuzz/findings/TARGET/) and exits 1. A finding is mended, then its input goes into
# tests/fuzz/regressions/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
all=(tensorfile checkpoint_meta config plan profile dataset hf_folder tokenizer chat_template examples)
targets=("${@:-${all[@]}}")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
case $seconds in ''|*[!0-9]*) echo "scripts/fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;; esac
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "scripts/fuzz.sh: no target '$t' (targets: ${all[*]})" >&2; exit 2; }
done
source scripts/deps.sh
tt_install_deps "${TIERTRAIN_FUZZ_APT_PACKAGES[@]}"
cmake --preset fuzz > /dev/null
cmake --build --preset fuzz
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${targets[@]}"; do
  bin=build/fuzz/tests/fuzz/fuzz_$t
  found=build/fuzz/findings/$t
  work=build/fuzz/corpus/$t
  mkdir -p "$found" "$work"
  regressions=(tests/fuzz/regressions/"$t"/*)
  if [ -e "${regressions[0]}" ]; then
    echo "== fuzz_$t: ${#regressions[@]} regression input(s)"
    if ! "$bin" -timeout=10 -rss_limit_mb=2048 "${regressions[@]}" > "build/fuzz/$t.regressions.log" 2>&1; then
      echo "fuzz_$t: a regression input fails again; build/fuzz/$t.regressions.log:" >&2
      tail -40 "build/fuzz/$t.regressions.log" >&2
      status=1
      continue
    fi
  fi
  echo "== fuzz_$t: $seconds s"
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$found/" "$work" "tests/fuzz/corpus/$t" > "build/fuzz/$t.log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^stat::new_units_added' "build/fuzz/$t.log" | tr '\n' ' '
    echo "(corpus: $(ls "$work" | wc -l) inputs)"
  else
    echo "fuzz_$t: FINDING; input in $found/, log build/fuzz/$t.log:" >&2
    grep -E 'ERROR|SUMMARY|fuzz property|Test unit written' "build/fuzz/$t.log" | head -20 >&2
    status=1
  fi
done
exit $status
