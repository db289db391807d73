// `tiertrain plan`: every shortcut plan of the configured run predicted on this machine (perf/planner.h): fits,
// memory, ms/step, exposed copies, and the automatic plan; --measure trains each beside its prediction. Takes the
// train command's knobs. Also the automatic choice `train` makes (choose_train_plan).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/units.h"
#include "data/dataset.h"
#include "exec/trainer.h"
#include "perf/auto_plan.h"
#include "perf/planner.h"
#include "perf/sweep.h"
#include "perf/what_if.h"

namespace tt::cli {

// The configuration with the vocabulary of its data (the model's size depends on it).
Result<TrainConfig> with_vocab(const TrainConfig& cfg) {
  TrainConfig c = cfg;
  TT_ASSIGN_OR_RETURN(data::TokenDataset ds, data::TokenDataset::load(c.data, c.val_fraction));
  c.model.vocab = ds.vocab();
  return c;
}

namespace {

struct PlanOptions {
  std::string profile;  // "" : the per-machine cache, calibrated on first use
  int measure_steps = 0;
  std::string plans;  // "in-core,recompute/cpu,auto": only these rows (a plan, or plan/optimizer); "" : all
  bool explain = false;
  std::string what_if;       // perf/what_if.h: a preset or key=value pairs
  std::string sweep_budget;  // "A:B:STEP" (sizes): perf/sweep.h
  std::string sweep_out = "plan-sweep";  // the sweep's CSV and SVG: PREFIX.csv, PREFIX.svg
};

void describe_run(const TrainConfig& c, const perf::PlanRow& r, const std::string& profile, FILE* out) {
  std::fprintf(out, "%s, %s parameters, batch %d, %s on %s, budget %s%s\n", c.model.describe().c_str(),
               format_count(static_cast<double>(model_num_params(c.model))).c_str(), c.batch,
               dtype_name(r.run.exec.compute), r.run.probe.device.c_str(), format_bytes(r.run.budget).c_str(),
               r.run.budget_auto ? " (automatic: the in-core need + 5%, at most the free memory)" : "");
  if (r.run.exec.data_ranks > 1)
    std::fprintf(out,
                 "mesh %s: every row is one rank's (batch %d of the global %d; memory per device, tokens/s of one "
                 "rank), its collectives priced from the profile's allreduce rate for their ranks\n",
                 c.mesh.c_str(), r.run.exec.batch, c.batch);
  std::fprintf(out, "profile: %s\n", profile.c_str());
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

int run_plan(const TrainConfig& cfg, const PlanOptions& cmd, FILE* out) {
  auto c = with_vocab(cfg);
  if (!c.is_ok()) return report(c.status());
  std::optional<perf::WhatIf> what_if;
  if (!cmd.what_if.empty()) {
    auto w = perf::parse_what_if(cmd.what_if);
    if (!w.is_ok()) return report(w.status());
    if (cmd.measure_steps > 0)
      return report(Status(StatusCode::kInvalidArgument, "--what-if describes another machine: it cannot --measure"));
    what_if = w.value();
    perf::Profile unused;
    perf::apply_what_if(*what_if, unused, c.value());  // the budget, before the plans are sized
  }
  auto rows = perf::plan_rows(c.value());
  if (!rows.is_ok()) return report(rows.status());
  // The profile holds what every row and the automatic plan's search need, whichever rows are shown.
  const perf::ProfileNeeds needs = perf::rows_needs(rows.value());
  if (Status s = select_rows(rows.value(), cmd.plans); !s.is_ok()) return report(s);
  std::string path;
  auto profile = perf::machine_profile(c.value(), cmd.profile, needs, stderr, /*recalibrate=*/false, &path);
  if (!profile.is_ok()) return report(profile.status());
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
        return report(Status(StatusCode::kInvalidArgument,
                           "--sweep-budget " + cmd.sweep_budget + ": A:B:STEP, sizes such as 16GiB:96GiB:8GiB"));
      v.push_back(n.value());
      a = b + 1;
    }
    if (v.size() != 3)
      return report(Status(StatusCode::kInvalidArgument,
                         "--sweep-budget " + cmd.sweep_budget + ": A:B:STEP, sizes such as 16GiB:96GiB:8GiB"));
    auto points = perf::sweep_budgets(c.value(), profile.value(), v[0], v[1], v[2], stderr);
    if (!points.is_ok()) return report(points.status());
    const ModelConfig& m = c.value().model;
    const std::string title = str_format("%s B%d: predicted ms/step by device budget%s", m.describe().c_str(),
                                         c.value().batch, what_if ? (" (" + what_if->describe() + ")").c_str() : "");
    if (Status s = perf::write_sweep(points.value(), cmd.sweep_out, title); !s.is_ok()) return report(s);
    size_t budgets = 0;
    for (size_t i = 0; i < points.value().size(); ++i)
      budgets += i == 0 || points.value()[i].budget != points.value()[i - 1].budget;
    std::fprintf(out, "sweep: %zu budgets written to %s.csv and %s.svg\n", budgets, cmd.sweep_out.c_str(),
                 cmd.sweep_out.c_str());
  }
  if (Status s = perf::predict(rows.value(), profile.value(), c.value().threads); !s.is_ok()) return report(s);
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
  if (rows.value().empty()) return report(Status(StatusCode::kInvalidArgument, "--plans: no plan left to show"));
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
      if (!trainer.is_ok()) return report(trainer.status());
      auto summary = trainer.value()->run();
      if (!summary.is_ok()) return report(summary.status());
      r.measured_s = summary.value().median_ms / 1e3;
      r.measured_peak = summary.value().device_peak_bytes;
    }
  }
  perf::print_plan_table(rows.value(), out);
  std::fputs(auto_text.c_str(), out);
  return 0;
}

class PlanCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* plan = app.add_subcommand(
        "plan", "predict every plan of the configured run on this machine (fits, memory, ms/step, exposed copies); "
                "takes the train command's flags; calibrates on first use");
    plan->add_option("--machine-profile", o_.profile,
                     "read this machine profile (tiertrain calibrate --out) instead of the cache");
    plan->add_option("--measure", o_.measure_steps,
                     "also train each plan that fits for this many steps (after one warm-up step) and print the "
                     "measured step time beside the prediction")
        ->check(CLI::Range(0, 100000));
    plan->add_option("--plans", o_.plans,
                     "only these rows: a comma-separated list of shortcuts, or shortcut/device, shortcut/cpu, or auto");
    plan->add_flag("--explain", o_.explain, "say how the automatic plan was chosen, with the runners-up");
    plan->add_option("--what-if", o_.what_if,
                     "predict for this machine's compute with another link and memory: a preset (v100-pcie3, "
                     "a100-pcie4, h100-pcie5, gh200-c2c) or h2d=25GB/s,d2h=25GB/s,latency=10us,device_mem=32GiB");
    plan->add_option("--sweep-budget", o_.sweep_budget,
                     "A:B:STEP (sizes): predicted ms/step of every plan at each budget, to --sweep-out.csv and .svg");
    plan->add_option("--sweep-out", o_.sweep_out, "prefix of the sweep's CSV and SVG [default: plan-sweep]");
    return plan;
  }
  bool takes_knobs() const override { return true; }
  int run(Context& ctx) override {
    auto tc = train_config_from(ctx.cfg);
    if (!tc.is_ok()) return report(tc.status());
    return run_plan(tc.value(), o_, stdout);
  }

 private:
  PlanOptions o_;
};

}  // namespace

std::unique_ptr<Command> make_plan_command() { return std::make_unique<PlanCommand>(); }

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
  if (cfg.micro_batch_auto) {
    // Note [automatic micro-batch]: the profile holds every candidate's kernels.
    for (const int m : perf::micro_batch_candidates(c.batch, 1)) {
      if (m == c.batch) continue;  // (rows above)
      TrainConfig mc = c;
      mc.batch = m;
      mc.grad_accum = c.batch / m;
      TT_ASSIGN_OR_RETURN(std::vector<perf::PlanRow> more, perf::plan_rows(mc));
      for (perf::PlanRow& r : more) rows.push_back(std::move(r));
    }
    TT_ASSIGN_OR_RETURN(perf::Profile profile, perf::machine_profile(c, "", perf::rows_needs(rows), out));
    TT_ASSIGN_OR_RETURN(perf::AutoMicroBatch a, perf::choose_micro_batch(c, profile));
    std::fputs(a.explain(explain ? 8 : 1).c_str(), out);
    cfg.batch = a.best.micro_batch;
    cfg.grad_accum = a.best.grad_accum;
    cfg.micro_batch_auto = false;
    cfg.plan_value = a.best.plan.best.run.exec.plan;
    return true;
  }
  TT_ASSIGN_OR_RETURN(perf::Profile profile, perf::machine_profile(c, "", perf::rows_needs(rows), out));
  TT_ASSIGN_OR_RETURN(perf::AutoPlan a, perf::choose_plan(c, profile));
  std::fputs(a.explain(explain ? 8 : 1).c_str(), out);
  cfg.plan_value = a.best.run.exec.plan;
  return true;
}

}  // namespace tt::cli
