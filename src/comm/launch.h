// comm/launch: `tiertrain launch -n N -- CMD ...`: starts N local ranks of one job, like torchrun or mpirun on one
// node. Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (and TIERTRAIN_RANK, TIERTRAIN_WORLD_SIZE),
// and TIERTRAIN_COMM_ID, the job's unique name, which the ranks' communicators meet under (comm/shm.h). SIGINT and
// SIGTERM are forwarded to every rank. When a rank fails (a non-zero exit or a signal), the others are stopped
// (SIGTERM, then SIGKILL after a grace period) and the launcher exits non-zero with a line naming that rank.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace tt::comm {

struct LaunchOptions {
  int ranks = 1;
  std::vector<std::string> command;  // program and arguments, run once per rank
  bool bind_cores = false;           // pin rank r to CPU r (mod the CPUs this process may use)
  // Pin rank r to its share of those CPUs instead: k = max(1, CPUs / ranks) consecutive ones from CPU r * k (its
  // helper threads then have CPUs of their own: Note [crew] in comm/crew.cc).
  bool bind_share = false;
  double grace_seconds = 5.0;        // between SIGTERM and SIGKILL when stopping the other ranks
};

// Runs the job to its end; returns the exit code for the launcher: 0 if every rank exited with 0, otherwise the
// failing rank's exit code (128 + the signal if it was killed by one), after a line on stderr naming it.
Result<int> launch(const LaunchOptions& options);

}  // namespace tt::comm
