#include "cli/perf_commands.h"

#include <optional>

#include "backend/registry.h"
#include "comm/comm.h"
#include "core/units.h"
#include "data/dataset.h"
#include "perf/auto_plan.h"
#include "perf/planner.h"
#include "perf/sweep.h"
#include "perf/what_if.h"

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
  if (r.run.exec.data_ranks > 1)
    std::fprintf(out,
                 "mesh %s: every row is one rank's (batch %d of the global %d; memory per device, tokens/s of one "
                 "rank), its collectives priced from the profile's allreduce rate for their ranks\n",
                 c.mesh.c_str(), r.run.exec.batch, c.batch);
  std::fprintf(out, "profile: %s\n", profile.c_str());
}

}  // namespace

int run_calibrate(const TrainConfig& cfg, const CalibrateCommand& cmd, FILE* out) {
  auto c = with_vocab(cfg);
  if (!c.is_ok()) return fail(c.status());
  // Note [pricing collectives] (perf/costs.cc): started as N ranks (tiertrain launch -n N, mpirun), every rank
  // measures an allreduce over the N through the runs' reducer together; then rank 0 alone measures the rest, the
  // others having stopped, so that nothing else runs beside its timings.
  auto world = comm::world();
  if (!world.is_ok()) return fail(world.status());
  const int ranks = world.value()->size(), me = world.value()->rank();
  std::optional<perf::LinkRate> reduce;
  if (ranks > 1) {
    auto backend = resolve_backend_name(c.value().backend);
    if (!backend.is_ok()) return fail(backend.status());
    if (me == 0) std::fprintf(out, "calibrate: an allreduce over %d ranks (64 KiB to 64 MiB)\n", ranks);
    auto be = create_backend(backend.value(), run_backend_options(c.value(), int64_t(256) << 20));
    if (!be.is_ok()) return fail(be.status());
    perf::CalibrateOptions o;
    auto rate = perf::measure_allreduce(*be.value(), *world.value(), o);
    if (!rate.is_ok()) return fail(rate.status());
    if (me != 0) {
      std::fprintf(out, "calibrate: rank %d measured the allreduce with the others; rank 0 measures the rest and "
                        "keeps the profile\n", me);
      return 0;
    }
    reduce = rate.value();
  }
  auto rows = perf::plan_rows(c.value());
  if (!rows.is_ok()) return fail(rows.status());
  // A fresh profile in the cache (keeping the allreduce rates it had), with this launch's rate; where --out says too.
  std::string path;
  auto profile = perf::machine_profile(c.value(), "", perf::rows_needs(rows.value()), out,
                                       /*recalibrate=*/true, &path, cmd.heat_seconds);
  if (!profile.is_ok()) return fail(profile.status());
  if (reduce) {
    profile.value().allreduce[ranks] = *reduce;
    if (Status s = profile.value().save(path); !s.is_ok()) return fail(s);
  }
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
  for (const auto& [n, l] : p.allreduce) {
    const std::string name = "allreduce x" + std::to_string(n);
    link(name.c_str(), l);
  }
  link("h2d pinned", p.h2d_pinned);
  link("d2h pinned", p.d2h_pinned);
  link("h2d pageable", p.h2d_pageable);
  link("d2h pageable", p.d2h_pageable);
  std::fprintf(out, "  both at once  h2d %.2f GB/s, d2h %.2f GB/s\n", p.duplex_h2d_bytes_per_s / 1e9,
               p.duplex_d2h_bytes_per_s / 1e9);
  if (p.um_to_host.valid()) {  // Unified Memory (Profile::um_*); a rate above 1 PB/s is a latency-only fit
    link("UM to host", p.um_to_host);
    link("UM to device", p.um_to_device);
    link("UM populate", p.um_populate);
    link("UM release", p.um_discard);
    link("UM on faults", p.um_fault_in);
  } else {
    std::fprintf(out, "  UM            not measured (no managed memory on this backend)\n");
  }
  std::fprintf(out, "  contention    (slower while the other runs)");
  for (int v = 0; v < perf::kNumTraffic; ++v)
    for (int o = 0; o < perf::kNumTraffic; ++o)
      if (o != v)
        std::fprintf(out, " %s|%s x%.2f", perf::traffic_name(static_cast<perf::Traffic>(v)),
                     perf::traffic_name(static_cast<perf::Traffic>(o)), p.slowdown[v][o]);
  std::fprintf(out, "\n");
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
  std::optional<perf::WhatIf> what_if;
  if (!cmd.what_if.empty()) {
    auto w = perf::parse_what_if(cmd.what_if);
    if (!w.is_ok()) return fail(w.status());
    if (cmd.measure_steps > 0)
      return fail(Status(StatusCode::kInvalidArgument, "--what-if describes another machine: it cannot --measure"));
    what_if = w.value();
    perf::Profile unused;
    perf::apply_what_if(*what_if, unused, c.value());  // the budget, before the plans are sized
  }
  auto rows = perf::plan_rows(c.value());
  if (!rows.is_ok()) return fail(rows.status());
  // The profile holds what every row and the automatic plan's search need, whichever rows are shown.
  const perf::ProfileNeeds needs = perf::rows_needs(rows.value());
  if (Status s = select_rows(rows.value(), cmd.plans); !s.is_ok()) return fail(s);
  std::string path;
  auto profile = perf::machine_profile(c.value(), cmd.profile, needs, stderr, /*recalibrate=*/false, &path);
  if (!profile.is_ok()) return fail(profile.status());
  if (what_if) {
    TrainConfig unused = c.value();
    perf::apply_what_if(*what_if, profile.value(), unused);
  }
  if (!cmd.sweep_budget.empty()) {
    std::vector<int64_t> v;
    for (size_t a = 0; a <= cmd.sweep_budget.size();) {
      const size_t b = std::min(cmd.sweep_budget.find(':', a), cmd.sweep_budget.size());
      auto n = parse_bytes(cmd.sweep_budget.substr(a, b - a));
      if (!n.is_ok())
        return fail(Status(StatusCode::kInvalidArgument,
                           "--sweep-budget " + cmd.sweep_budget + ": A:B:STEP, sizes such as 16GiB:96GiB:8GiB"));
      v.push_back(n.value());
      a = b + 1;
    }
    if (v.size() != 3)
      return fail(Status(StatusCode::kInvalidArgument,
                         "--sweep-budget " + cmd.sweep_budget + ": A:B:STEP, sizes such as 16GiB:96GiB:8GiB"));
    auto points = perf::sweep_budgets(c.value(), profile.value(), v[0], v[1], v[2], stderr);
    if (!points.is_ok()) return fail(points.status());
    const GptConfig& m = c.value().model;
    const std::string title = str_format("GPT L%d d%d T%d B%d: predicted ms/step by device budget%s", m.layers, m.dim,
                                         m.seq, c.value().batch, what_if ? (" (" + what_if->describe() + ")").c_str() : "");
    if (Status s = perf::write_sweep(points.value(), cmd.sweep_out, title); !s.is_ok()) return fail(s);
    size_t budgets = 0;
    for (size_t i = 0; i < points.value().size(); ++i)
      budgets += i == 0 || points.value()[i].budget != points.value()[i - 1].budget;
    std::fprintf(out, "sweep: %zu budgets written to %s.csv and %s.svg\n", budgets, cmd.sweep_out.c_str(),
                 cmd.sweep_out.c_str());
  }
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
  if (what_if) std::fprintf(out, "%s\n", what_if->describe().c_str());
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

Result<bool> choose_train_plan(TrainConfig& cfg, bool explain, FILE* out) {
  if (cfg.plan_value) return false;
  const bool asked = cfg.plan == "auto";
  if (!asked && cfg.plan_given) return false;
  TT_RETURN_IF(asked && cfg.dry_run, kInvalidArgument,
               "--plan auto with --dry-run: tiertrain plan predicts the automatic plan (and every other) without "
               "training");
  TT_ASSIGN_OR_RETURN(TrainConfig c, with_vocab(cfg));
  // What the profile must hold: the kernels of every family of plan the search may replay.
  TT_ASSIGN_OR_RETURN(std::vector<perf::PlanRow> rows, perf::plan_rows(c));
  if (!asked) {
    // No plan given: only when the in-core plan does not fit, and some plan does (else the trainer's error, which
    // names what each plan needs, stands).
    TrainConfig in_core = c;
    in_core.plan = "in-core";
    TT_ASSIGN_OR_RETURN(RunSpec r, resolve_run(in_core));
    if (r.fits_device && r.fits_host) return false;
    bool any = false;
    for (const perf::PlanRow& row : rows) any |= row.fits();
    if (!any) return false;
    std::fprintf(out, "the in-core plan needs %s, more than the budget of %s: choosing a plan (--plan auto)\n",
                 format_bytes(r.inventory.total(Inventory::kDevice)).c_str(), format_bytes(r.budget).c_str());
  }
  TT_RETURN_IF(cfg.optimizer.has_value(), kInvalidArgument,
               "--plan auto chooses where the optimizer runs: leave --optimizer at 'plan'");
  TT_ASSIGN_OR_RETURN(perf::Profile profile, perf::machine_profile(c, "", perf::rows_needs(rows), out));
  TT_ASSIGN_OR_RETURN(perf::AutoPlan a, perf::choose_plan(c, profile));
  std::fputs(a.explain(explain ? 8 : 1).c_str(), out);
  cfg.plan_value = a.best.run.exec.plan;
  return true;
}

}  // namespace tt::cli
