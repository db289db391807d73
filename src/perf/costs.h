// perf/costs: the time of each operation of a schedule on a calibrated machine. A compute operation runs the kernel
// calls the model lists for its piece (Note [kernel calls] in model/model.h) or the optimizer's and executor's own
// calls, each priced from the profile (Note [interpolating kernel times]); a copy takes its link's latency plus its
// bytes over the link's pinned bandwidth; a host AdamW its segment's parameters over the host's rate; a Unified Memory
// prefetch or discard its bytes at the driver's measured rate for that kind (Profile::um_*).
//
//   ProfileCosts costs(profile, schedule.spec);
//   TT_TRY(costs.status());                       // every op priced (else: which op and kernel the profile lacks)
//   SimResult r = simulate(schedule, Pass::kTrain, costs);
#pragma once

#include <map>
#include <tuple>
#include <vector>

#include "plan/schedule.h"
#include "perf/profile.h"
#include "perf/simulator.h"

namespace tt::perf {

// The kernel calls a compute operation of a schedule of this spec runs, in order (empty for copies, host work,
// waits and records).
std::vector<KernelCall> op_kernel_calls(const Op& op, const ScheduleSpec& spec);
// Every distinct kernel call of the passes of a schedule (what calibration measures for a model).
std::vector<KernelCall> schedule_kernel_calls(const Schedule& schedule);
// Every distinct sequence of kernel calls a compute operation of the training pass runs (Note [kernel sequences]).
std::vector<std::vector<KernelCall>> schedule_sequences(const Schedule& schedule);
// The parameter sizes of each segment the training pass updates on the host (the CPU optimizer), distinct.
std::vector<std::vector<int64_t>> schedule_host_segments(const Schedule& schedule);
// The parameter sizes of segment s, in update order.
std::vector<int64_t> segment_param_sizes(const ModelConfig& cfg, int segment);

struct ProfileCosts final : CostModel {
  // host_threads: the CPU optimizer's threads (--threads; 0: the count the profile's segments were measured with,
  // the backend's default on that machine).
  ProfileCosts(const Profile& profile, const ScheduleSpec& spec, int host_threads = 0);
  double seconds(const Op& op) const override;
  double readback_seconds() const override;
  // The profile's contention (Note [contention] in perf/profile.h) between copies each way and the host update.
  double slowdown(CostClass victim, CostClass other) const override;
  // A copy's link latency; a host update's task start (Note [contention] in perf/profile.h).
  double fixed_seconds(const Op& op) const override;
  // Not ok when some operation could not be priced (the first such, named).
  const Status& status() const { return status_; }
  // Kernel calls priced by interpolation rather than measured.
  int interpolated() const { return interpolated_; }
  // Note [pricing collectives]: whether some of the run's collectives went unpriced (the profile has no
  // allreduce rate for that number of ranks).
  bool unpriced_collectives() const { return unpriced_collectives_; }

 private:
  double kernels(const Op& op) const;
  // An allreduce of `bytes` over `ranks` ranks at the profile's rate (Note [pricing collectives]); 0, and
  // unpriced_collectives(), without one.
  double allreduce_seconds(int ranks, int64_t bytes) const;
  const LinkRate* um_link(const Op& op) const;
  const Profile& p_;
  ScheduleSpec spec_;
  std::vector<int64_t> seg_params_;
  std::vector<std::vector<int64_t>> seg_sizes_;
  double host_rate_ = 0;
  mutable bool unpriced_collectives_ = false;
  double host_segment_scale_ = 1;  // a measured segment at the run's thread count: rate(measured) / rate(run)
  // Compute operations priced so far, by what fixes their calls: kind, boundary, segment (blocks alike: all the
  // same class), the LM head's backward.
  mutable std::map<std::tuple<int, int, int, bool>, double> cache_;
  mutable Status status_;
  mutable int interpolated_ = 0;
};

}  // namespace tt::perf
