// perf/sweep: predicted step time against the device budget for every plan (`tiertrain plan --sweep-budget
// A:B:STEP`): a CSV and an SVG plot with one line per strategy, drawn where the strategy fits.
//
//   TT_ASSIGN_OR_RETURN(auto points, sweep_budgets(cfg, profile, 16 << 30, 96 << 30, 8 << 30));
//   TT_TRY(write_sweep(points, "sweep", "GPT d4096 L16 B8 on an H200"));   // sweep.csv, sweep.svg
#pragma once

#include <string>
#include <vector>

#include "perf/profile.h"
#include "exec/train_config.h"

namespace tt::perf {

struct SweepPoint {
  int64_t budget = 0;
  std::string strategy;  // "recompute/device", ..., "auto"
  bool fits = false;
  double step_seconds = 0;
  std::string detail;    // the automatic plan: what it chose
};

// Budgets from..to (inclusive) by step; every shortcut with each optimizer placement, and the automatic plan.
Result<std::vector<SweepPoint>> sweep_budgets(const TrainConfig& cfg, const Profile& profile, int64_t from, int64_t to,
                                              int64_t step, FILE* progress = nullptr);
// prefix.csv (budget_bytes,budget_gib,strategy,fits,ms_per_step,detail) and prefix.svg.
Status write_sweep(const std::vector<SweepPoint>& points, const std::string& prefix, const std::string& title);

}  // namespace tt::perf
