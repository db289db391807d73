// comm/launch: `tiertrain launch -n N -- CMD ...`: starts N local ranks of one job, like torchrun or mpirun on one
// node. Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (and TIERTRAIN_RANK, TIERTRAIN_WORLD_SIZE),
// and TIERTRAIN_COMM_ID, the job's unique name, which the ranks' communicators meet under (comm/shm.h). SIGINT,
// SIGTERM, SIGUSR1, SIGUSR2, SIGHUP and SIGQUIT are passed to every rank, which may take the time it needs to end
// (`train` checkpoints first at the first four: Note [stopping early] in exec/trainer.cc); a second one kills them.
// When a rank fails (a non-zero exit other than 75, or a signal), the others are stopped (SIGTERM, then SIGKILL after
// a grace period) and the launcher exits non-zero with a line naming that rank. Exit 75 (kStoppedEarly) is a rank
// that stopped early to be resumed: not a failure. A closed stdout loses the ranks' output, not the job.
#pragma once

#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/status.h"

namespace tt::comm {

struct LaunchOptions {
  int ranks = 1;
  std::vector<std::string> command;  // program and arguments, run once per rank
  bool bind_cores = false;           // pin rank r to CPU r (mod the CPUs this process may use)
  // Pin rank r to its share of those CPUs instead: k = max(1, CPUs / ranks) consecutive ones from CPU r * k (its
  // helper threads then have CPUs of their own: Note [crew] in comm/crew.cc).
  bool bind_share = false;
  double grace_seconds = 5.0;        // between SIGTERM and SIGKILL when stopping the others after a rank failed
  // Note [rank output]: each rank's stdout and stderr go through the launcher, line by line, each line prefixed with
  // "[rank R] " (off: the ranks write to the launcher's stdout and stderr directly, interleaving as they come).
  bool tag_output = true;
  // Also each rank's stdout and stderr, untagged, into DIR/rank<R>.out and DIR/rank<R>.err (DIR made if missing).
  std::string log_dir;
};

// A rank's exit code for "stopped early, to be resumed" (sysexits.h's EX_TEMPFAIL; `train` at a signal or its
// --time-limit: Note [stopping early] in exec/trainer.cc).
constexpr int kStoppedEarly = 75;

// Runs the job to its end; returns the exit code for the launcher: 0 if every rank exited with 0, 75 if every rank
// exited with 0 or 75 and one with 75, otherwise the failing rank's exit code (128 + the signal if it was killed by
// one), after a line on stderr naming it.
// The launcher first removes what killed jobs left (remove_stale_segments), saying so on stderr.
Result<int> launch(const LaunchOptions& options);

// Note [stale segments]
// A job's shared-memory segments (tiertrain-<job>-<rank> in /dev/shm, or TIERTRAIN_SHM_DIR; comm/shm.h) are
// unlinked once every rank has mapped them; a job killed before that (the launcher during the rendezvous,
// hand-started ranks) leaves them behind, holding memory until the machine restarts (25 GB apparent in issue 25's
// audit). A segment is stale when it is this user's, older than `min_age_seconds` (a rendezvous under way is
// younger), and no process maps it or holds it open (/proc/*/maps, /proc/*/fd). Removes those; `tiertrain launch
// --cleanup` runs it alone.
RemovedFiles remove_stale_segments(double min_age_seconds = 60);

}  // namespace tt::comm
