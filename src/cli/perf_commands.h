// cli/perf_commands: `tiertrain calibrate` (measure this machine for the performance model, perf/calibrate.h) and
// `tiertrain plan` (every shortcut plan of the configured run predicted, perf/planner.h, and with --measure trained
// for a few steps beside its prediction). Both take the train command's knobs for the model, batch, backend and
// budget. They return the process's exit code.
#pragma once

#include <cstdio>
#include <string>

#include "exec/train_config.h"

namespace tt::cli {

struct CalibrateCommand {
  std::string out;  // "" : the per-machine cache
  double heat_seconds = -1;  // < 0: the default (Note [calibrating at sustained clocks] in perf/calibrate.h)
};
int run_calibrate(const TrainConfig& cfg, const CalibrateCommand& cmd, FILE* out);

struct PlanCommand {
  std::string profile;  // "" : the per-machine cache, calibrated on first use
  int measure_steps = 0;
  std::string plans;  // "in-core,recompute/cpu,auto": only these rows (a plan, or plan/optimizer); "" : all
  bool explain = false;
  std::string what_if;       // perf/what_if.h: a preset or key=value pairs
  std::string sweep_budget;  // "A:B:STEP" (sizes): perf/sweep.h
  std::string sweep_out = "plan-sweep";  // the sweep's CSV and SVG: PREFIX.csv, PREFIX.svg
};
int run_plan(const TrainConfig& cfg, const PlanCommand& cmd, FILE* out);

// `train`: with --plan auto, or with no --plan when the in-core plan does not fit the budget and some plan does,
// chooses the plan (perf/auto_plan.h; the machine calibrated on first use, saying so) into cfg.plan_value, says what
// it chose and why (the runners-up too with explain), and returns true. False when there was nothing to choose.
Result<bool> choose_train_plan(TrainConfig& cfg, bool explain, FILE* out);

}  // namespace tt::cli
