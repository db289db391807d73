// perf/simulator: replays a schedule (plan/schedule.h) with a time for each operation, and predicts the time of a
// pass run step after step, each stream's busy time and the compute stream's exposed waits. The core of the
// performance model; the operation times come from a CostModel (perf/costs.h: ProfileCosts, from the machine's
// calibrated profile).
//
//   ProfileCosts costs(profile, schedule.spec);
//   SimResult r = simulate(schedule, Pass::kTrain, costs);
//   std::printf("%.1f ms a step, %.1f ms exposed\n", 1e3 * r.step_seconds, 1e3 * r.exposed_wait_seconds);
//
// Note [replaying a schedule]
// Each stream runs its operations in order. A wait completes when the last record of its event issued before the
// wait has run (CUDA's semantics, and the CPU backend's: a later record never releases an earlier wait); a wait on
// an event never recorded before it is no wait. So one walk over the operations in issue order gives every start
// time exactly: an operation starts when its stream is free and it has been issued; a wait moves its stream's clock
// to the time of that record. The caller issues a step at once and waits for the compute stream at its end (the
// trainer reads the losses: CostModel::readback_seconds), so step k is issued when the compute stream finished step
// k - 1 and that read; streams still busy
// (the CPU optimizer's host updates, their copies back) carry on into it. The replay runs several steps and reports
// the last, the steady state.
//
// Compute work runs one operation at a time whatever its stream (the device's SMs, the CPU backend's cores), in
// issue order: an operation of the compute class off the compute stream (the norm's parts beside the backward, Note
// [norm beside the backward] in plan/schedule.cc) starts when its stream is free and the compute work issued before
// it is done, and the compute stream's next operation waits for it. So it saves nothing, as measured on the H100
// (1B 127.0/127.6 ms a step in the step, 127.5/127.0 beside: docs/benchmarks/2026-12-07-h100-llama-1b-norm-beside/),
// where Hopper's cuBLAS kernels keep every SM for a whole product. Copies and the host's work take their own engines.
//
// Copies and the host update slow each other (Note [contention] in perf/profile.h): when the cost model says so,
// the replay is repeated, each copy or host operation's time set to its own time plus, for each other kind, the
// seconds that kind was busy during the operation in the previous replay times (1 - 1/slowdown) (while the other
// runs, the operation does 1/slowdown of its work a second), until no operation's time moves by more than 0.1% (at
// most kContentionRounds more replays). A 10 ms host update beside a 10 ms copy that slows it 1.5-fold: 13.3 ms;
// two 10 ms operations that slow each other 1.5-fold: 15 ms each.
#pragma once

#include <map>
#include <string>

#include "plan/schedule.h"

namespace tt::perf {

// Where an operation's time goes: nowhere (waits, records, allocations, the caller's draw of a batch), a copy each
// way, host work, compute-stream work, or a collective over the ranks (the data-parallel gradients' average).
enum class CostClass { kFree, kD2H, kH2D, kHost, kCompute, kComm };
constexpr int kNumCostClasses = 6;
CostClass cost_class(const Op& op);  // a Unified Memory prefetch by its direction, a discard by its stream

// The time of one operation of a schedule.
class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual double seconds(const Op& op) const = 0;
  // What the caller does on the compute stream after each step before it issues the next: the trainer reads the
  // step's losses and gradient norm back (two small copies; microseconds on a GPU).
  virtual double readback_seconds() const { return 0; }
  // How much slower an operation of class `victim` runs while one of class `other` runs (1: no slower).
  virtual double slowdown(CostClass victim, CostClass other) const {
    (void)victim, (void)other;
    return 1.0;
  }
  // The part of seconds(op) that contention does not stretch (a copy's latency, a host task's start).
  virtual double fixed_seconds(const Op& op) const {
    (void)op;
    return 0.0;
  }
};

constexpr int kContentionRounds = 6;

struct SimResult {
  double step_seconds = 0;                    // the last step: from the end of the one before to its own end
  double busy_seconds[kNumStreams] = {};      // each stream's work in the last step
  double exposed_wait_seconds = 0;            // the compute stream waiting on other streams, in the last step
  std::map<std::string, double> waits;        // the same by the waits' names
};

// Replays `pass` `steps` times back to back (Note [replaying a schedule]); steps >= 1.
SimResult simulate(const Schedule& schedule, Pass pass, const CostModel& costs, int steps = 3);

}  // namespace tt::perf
