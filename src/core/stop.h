// core/stop: a run's reasons to end before its last step, read where it can end cleanly (the training loop, after
// each step): a termination signal (SIGTERM, SIGINT, SIGUSR1, SIGUSR2: a scheduler's notice of preemption or of the
// time limit, `scancel`, Ctrl-C) or a wall-time limit. The training loop then finishes the steps in flight, writes a
// checkpoint and exits 75 (Note [stopping early] in exec/trainer.cc).
//
//   TT_ASSIGN_OR_RETURN(std::unique_ptr<StopRequest> stop, StopRequest::install(time_limit_s, elapsed_s));
//   ... if (stop->code() != 0) { /* stop: stop->describe() says why */ }
//
// Only the first signal counts; another one at least a second later ends the process at once, as the signal would
// without a handler (a second Ctrl-C). Copies of the first that arrive within the second (the terminal's group and a
// launcher forwarding it, a scheduler signalling every process of a job) are one request. From the first signal on,
// SIGPIPE is ignored: a reader of the output that the same Ctrl-C ended does not end the run before its checkpoint.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace tt {

class StopRequest {
 public:
  // The reason codes: a signal's number (1-63), or kTimeLimit. One code for the job: the ranks of a mesh agree on
  // the largest of theirs.
  static constexpr int kTimeLimit = 64;

  // Installs the handlers of the four signals (the old ones come back when it is destroyed); time_limit_s > 0 is
  // the wall-time limit, of which elapsed_s have passed already (the run started before the handlers matter). At
  // most one StopRequest exists at a time (the handlers are the process's).
  static Result<std::unique_ptr<StopRequest>> install(double time_limit_s, double elapsed_s = 0);
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // 0 while nothing asks to stop; else the first signal's number, or kTimeLimit once the limit has passed.
  int code() const;
  // A code in words: "SIGTERM", "the time limit of 90 min".
  std::string describe(int code) const;

 private:
  StopRequest(double limit_s, double start_s) : limit_s_(limit_s), start_s_(start_s) {}
  double limit_s_ = 0;
  double start_s_ = 0;  // CLOCK_MONOTONIC's seconds when the limit's time began
};

}  // namespace tt
