// cli/exit_codes: the exit codes of the guide's table (docs/GUIDE.md, Exit codes), and how an error becomes one (shared by the commands).
#pragma once

#include <cstdio>

#include "core/log.h"
#include "core/status.h"

namespace tt::cli {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
// `train` stopped early, at a signal or its --time-limit, after a checkpoint (Note [stopping early] in
// exec/trainer.cc): sysexits.h's EX_TEMPFAIL, "try again", which the same command with --resume does.
constexpr int kExitStopped = 75;

// Prints the error (and its trail with --debug INFO) and returns its exit code: 2 for bad usage, else 1.
inline int report(const Status& s) {
  std::fprintf(stderr, "tiertrain: error: %s\n", s.message().c_str());
  if (log::enabled(log::Level::kInfo, log::kAll))
    std::fprintf(stderr, "tiertrain: trail: %s\n", s.to_string_with_trail().c_str());
  return s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

}  // namespace tt::cli
