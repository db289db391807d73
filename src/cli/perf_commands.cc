#include "cli/perf_commands.h"

#include "core/units.h"
#include "data/dataset.h"
#include "perf/auto_plan.h"
#include "perf/planner.h"

namespace tt::cli {

namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "tiertrain: error: %s\n", s.message().c_str());
  return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

// The configuration with the vocabulary of its data (the model's size depends on it).
Result<TrainConfig> with_vocab(const TrainConfig& cfg) {
  TrainConfig c = cfg;
  TT_ASSIGN_OR_RETURN(data::TokenDataset ds, data::TokenDataset::load(c.data, c.val_fraction));
  c.model.vocab = ds.vocab();
  return c;
}

void describe_run(const TrainConfig& c, const perf::PlanRow& r, const std::string& profile, FILE* out) {
  std::fprintf(out, "GPT L%d d%d H%d T%d vocab %d, %s parameters, batch %d, %s on %s, budget %s%s\n", c.model.layers,
               c.model.dim, c.model.heads, c.model.seq, c.model.vocab,
               format_count(static_cast<double>(gpt_num_params(c.model))).c_str(), c.batch,
               dtype_name(r.run.exec.compute), r.run.probe.device.c_str(), format_bytes(r.run.budget).c_str(),
               r.run.budget_auto ? " (automatic: the in-core need + 5%, at most the free memory)" : "");
  std::fprintf(out, "profile: %s\n", profile.c_str());
}

}  // namespace

int run_calibrate(const TrainConfig& cfg, const CalibrateCommand& cmd, FILE* out) {
  auto c = with_vocab(cfg);
  if (!c.is_ok()) return fail(c.status());
  auto rows = perf::plan_rows(c.value());
  if (!rows.is_ok()) return fail(rows.status());
  // A fresh profile: where --out says, else the cache.
  std::string path;
  auto profile = perf::machine_profile(c.value(), "", perf::rows_needs(rows.value()), out,
                                       /*recalibrate=*/true, &path, cmd.heat_seconds);
  if (!profile.is_ok()) return fail(profile.status());
  if (!cmd.out.empty()) {
    if (Status s = profile.value().save(cmd.out); !s.is_ok()) return fail(s);
    path = cmd.out;
  }
  const perf::Profile& p = profile.value();
  std::fprintf(out, "calibrated in %.1f s (sequences timed after %.2f s of each): %s\n",
               p.calibrate_seconds, p.heat_seconds, path.c_str());
  auto link = [&](const char* name, const perf::LinkRate& l) {
    std::fprintf(out, "  %-13s %7.2f GB/s, latency %6.1f us\n", name, l.bytes_per_s / 1e9, l.latency_s * 1e6);
  };
  link("h2d pinned", p.h2d_pinned);
  link("d2h pinned", p.d2h_pinned);
  link("h2d pageable", p.h2d_pageable);
  link("d2h pageable", p.d2h_pageable);
  std::fprintf(out, "  both at once  h2d %.2f GB/s, d2h %.2f GB/s\n", p.duplex_h2d_bytes_per_s / 1e9,
               p.duplex_d2h_bytes_per_s / 1e9);
  for (const auto& [t, r] : p.host_adamw_params_per_s)
    std::fprintf(out, "  host AdamW    %3d threads: %s parameters/s\n", t, format_count(r).c_str());
  std::fprintf(out, "  host memcpy   %.2f GB/s\n", p.host_memcpy_bytes_per_s / 1e9);
  std::fprintf(out, "  kernels       %zu shapes, %zu sequences\n", p.kernels.size(), p.sequences.size());
  return 0;
}

// Keeps the rows --plans names (each "plan" or "plan/optimizer"); every name must match a row.
Status select_rows(std::vector<perf::PlanRow>& rows, const std::string& plans) {
  if (plans.empty()) return Status::ok();
  std::vector<std::string> names;
  for (size_t a = 0; a <= plans.size();) {
    const size_t b = std::min(plans.find(',', a), plans.size());
    if (b > a) names.push_back(plans.substr(a, b - a));
    a = b + 1;
  }
  std::vector<perf::PlanRow> kept;
  std::vector<bool> used(names.size(), false);
  for (perf::PlanRow& r : rows) {
    bool keep = false;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "auto") used[i] = true;  // the automatic plan's row is added after
      if (names[i] == r.plan || names[i] == r.plan + "/" + optimizer_placement_name(r.optimizer)) {
        keep = true;
        used[i] = true;
      }
    }
    if (keep) kept.push_back(std::move(r));
  }
  for (size_t i = 0; i < names.size(); ++i)
    TT_RETURN_IF(!used[i], kInvalidArgument,
                 "--plans: '%s' is none of the plans (a shortcut, or shortcut/device, shortcut/cpu)", names[i].c_str());
  rows = std::move(kept);
  return Status::ok();
}

int run_plan(const TrainConfig& cfg, const PlanCommand& cmd, FILE* out) {
  auto c = with_vocab(cfg);
  if (!c.is_ok()) return fail(c.status());
  auto rows = perf::plan_rows(c.value());
  if (!rows.is_ok()) return fail(rows.status());
  // The profile holds what every row and the automatic plan's search need, whichever rows are shown.
  const perf::ProfileNeeds needs = perf::rows_needs(rows.value());
  if (Status s = select_rows(rows.value(), cmd.plans); !s.is_ok()) return fail(s);
  std::string path;
  auto profile = perf::machine_profile(c.value(), cmd.profile, needs, stderr, /*recalibrate=*/false, &path);
  if (!profile.is_ok()) return fail(profile.status());
  if (Status s = perf::predict(rows.value(), profile.value(), c.value().threads); !s.is_ok()) return fail(s);
  // The automatic plan, as a last row.
  std::string auto_text;
  if (cmd.plans.empty() || ("," + cmd.plans + ",").find(",auto,") != std::string::npos) {
    auto a = perf::choose_plan(c.value(), profile.value());
    if (a.is_ok()) {
      rows.value().push_back(a.value().best);
      auto_text = a.value().explain(cmd.explain ? 8 : 1);
    } else {
      auto_text = "auto plan: " + a.status().message() + "\n";
    }
  }
  if (rows.value().empty()) return fail(Status(StatusCode::kInvalidArgument, "--plans: no plan left to show"));
  describe_run(c.value(), rows.value().front(), path, out);
  if (cmd.measure_steps > 0) {
    for (perf::PlanRow& r : rows.value()) {
      if (!r.fits()) continue;
      TrainConfig t = c.value();
      t.plan = r.plan;
      t.optimizer = r.optimizer;
      if (r.plan == "auto") {
        t.plan_value = r.run.exec.plan;
        t.optimizer.reset();
      }
      if (r.optimizer == OptimizerPlacement::kDevice) t.speculative_update = false;
      t.steps = cmd.measure_steps + 1;  // the first step warms up and is not counted
      t.stop_at = 0;
      t.eval_every = 0;
      t.checkpoint_dir.clear();
      t.resume.clear();
      t.metrics_out.clear();
      t.trace.clear();
      t.profile = false;
      std::fprintf(stderr, "measuring --plan %s --optimizer %s: %d steps\n", r.plan.c_str(),
                   optimizer_placement_name(r.optimizer), cmd.measure_steps);
      auto trainer = Trainer::create(t, nullptr);
      if (!trainer.is_ok()) return fail(trainer.status());
      auto summary = trainer.value()->run();
      if (!summary.is_ok()) return fail(summary.status());
      r.measured_s = summary.value().median_ms / 1e3;
      r.measured_peak = summary.value().device_peak_bytes;
    }
  }
  perf::print_plan_table(rows.value(), out);
  std::fputs(auto_text.c_str(), out);
  return 0;
}

Status choose_train_plan(TrainConfig& cfg, bool explain, FILE* out) {
  if (cfg.plan_value) return Status::ok();
  const bool asked = cfg.plan == "auto";
  if (!asked && cfg.plan_given) return Status::ok();
  TT_ASSIGN_OR_RETURN(TrainConfig c, with_vocab(cfg));
  if (!asked) {
    // No plan given: in-core when it fits (the usual case needs no profile at all).
    TrainConfig in_core = c;
    in_core.plan = "in-core";
    TT_ASSIGN_OR_RETURN(RunSpec r, resolve_run(in_core));
    if (r.fits_device && r.fits_host) return Status::ok();
    std::fprintf(out, "the in-core plan needs %s, more than the budget of %s: choosing a plan (--plan auto)\n",
                 format_bytes(r.inventory.total(Inventory::kDevice)).c_str(), format_bytes(r.budget).c_str());
  }
  TT_RETURN_IF(cfg.optimizer.has_value(), kInvalidArgument,
               "--plan auto chooses where the optimizer runs: leave --optimizer at 'plan'");
  // What the profile must hold: the kernels of every family of plan the search may replay.
  auto rows = perf::plan_rows(c);
  if (!rows.is_ok()) return rows.status();
  TT_ASSIGN_OR_RETURN(perf::Profile profile, perf::machine_profile(c, "", perf::rows_needs(rows.value()), out));
  TT_ASSIGN_OR_RETURN(perf::AutoPlan a, perf::choose_plan(c, profile));
  std::fputs(a.explain(explain ? 8 : 1).c_str(), out);
  cfg.plan_value = a.best.run.exec.plan;
  return Status::ok();
}

}  // namespace tt::cli
