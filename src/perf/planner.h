// perf/planner: every plan of a run predicted on a calibrated machine (`tiertrain plan`): for each shortcut plan,
// with the optimizer on the device and on the host, whether it fits the budget, its device and host memory (the
// inventory's), and its predicted step time, tokens a second, exposed transfer time and host optimizer time (the
// schedule replayed with the profile's costs, perf/simulator.h); with --measure, each trained for a few steps and
// its measured step time beside the prediction.
//
//   TT_ASSIGN_OR_RETURN(std::vector<PlanRow> rows, estimate_plans(train_config, profile));
//   print_plan_table(rows, stdout);
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "exec/trainer.h"
#include "perf/calibrate.h"
#include "perf/costs.h"
#include "perf/profile.h"

namespace tt::perf {

struct PlanRow {
  std::string plan;  // the shortcut
  OptimizerPlacement optimizer = OptimizerPlacement::kDevice;
  RunSpec run;       // resolve_run's: inventory, budget, fits
  Schedule schedule;
  SimResult sim;
  int interpolated = 0;  // kernel calls priced by interpolation
  bool unpriced_collectives = false;  // Note [pricing collectives] in perf/costs.cc: no rate for the ranks
  double tokens_per_s = 0;
  int64_t copy_bytes = 0;  // bytes a training step moves between host and device
  double measured_s = -1;  // --measure: the median step; < 0 when not measured
  int64_t measured_peak = -1;  // --measure: the device pool's peak in use
  // Note [oversubscribed Unified Memory]: managed bytes beyond what the budget leaves them (> 0 only for a plan with
  // managed memory that does not fit), and the step predicted with their migrations.
  int64_t oversubscribed = 0;
  bool fits() const { return run.fits_device && run.fits_host; }
};

// Note [oversubscribed Unified Memory]
// A plan with managed memory that needs more device memory than the budget can still run with
// --um-allow-oversubscription: the driver keeps what fits and migrates the rest on page faults. The model prices
// that where it cannot be run (the lent GPUs never oversubscribe): with over = the need less the budget (at most the
// managed bytes the plan keeps on the device), a step touches its pages forward and then backward, so with the
// least recently used evicted the backward misses `over` bytes (the forward's first pages, long evicted) and the
// next forward the same again: 2 x over faulted in at the profile's fault rate (um.fault_in) and 2 x over evicted at
// its rate to the host (um.to_host), added to the step (faults stall the kernels that take them). An estimate from
// measured rates under that access model, not checked against an oversubscribed run.

// The shortcut plans with each optimizer placement they allow, resolved for this configuration (cfg.model.vocab
// set); nothing is allocated.
Result<std::vector<PlanRow>> plan_rows(const TrainConfig& cfg);
// What the profile must hold for the rows: every kernel call their schedules run, and every sequence of calls their
// compute operations run (Note [kernel sequences] in perf/profile.h).
struct ProfileNeeds {
  std::vector<KernelCall> kernels;
  std::vector<std::vector<KernelCall>> sequences;
  std::vector<std::vector<int64_t>> host_segments;
  bool um = false;  // some schedule moves managed pages: Profile::um_* needed
};
ProfileNeeds rows_needs(const std::vector<PlanRow>& rows);
// Predicts each row's step from the profile (an error names an operation the profile cannot price). host_threads:
// the CPU optimizer's threads (--threads; 0: all cores).
Status predict(std::vector<PlanRow>& rows, const Profile& profile, int host_threads = 0);

// The machine's profile for this configuration's backend: `path` (or the per-machine cache when empty), calibrated
// first when there is none (saying so on `progress`), extended with the kernel calls it lacks. The cache is written
// back; an explicit path is only read.
// heat_seconds: for a new profile (< 0: kDefaultHeatSeconds).
Result<Profile> machine_profile(const TrainConfig& cfg, const std::string& path, const ProfileNeeds& needs,
                                FILE* progress, bool recalibrate = false, std::string* used_path = nullptr,
                                double heat_seconds = -1);

void print_plan_table(const std::vector<PlanRow>& rows, FILE* out);

}  // namespace tt::perf
