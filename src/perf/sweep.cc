#include "perf/sweep.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "core/atomic_file.h"
#include "core/svg_chart.h"
#include "core/units.h"
#include "perf/auto_plan.h"
#include "perf/planner.h"

namespace tt::perf {

Result<std::vector<SweepPoint>> sweep_budgets(const TrainConfig& cfg, const Profile& profile, int64_t from, int64_t to,
                                              int64_t step, FILE* progress) {
  TT_RETURN_IF(from <= 0 || to < from || step <= 0, kInvalidArgument,
               "--sweep-budget A:B:STEP: 0 < A <= B and STEP > 0");
  TT_RETURN_IF((to - from) / step > 1000, kInvalidArgument, "--sweep-budget: more than 1000 budgets");
  std::vector<SweepPoint> out;
  for (int64_t b = from; b <= to; b += step) {
    TrainConfig c = cfg;
    c.device_budget = b;
    TT_ASSIGN_OR_RETURN(std::vector<PlanRow> rows, plan_rows(c));
    TT_TRY(predict(rows, profile, c.threads));
    for (const PlanRow& r : rows)
      out.push_back({b, r.plan + "/" + optimizer_placement_name(r.optimizer), r.fits(), r.sim.step_seconds, ""});
    auto a = choose_plan(c, profile);
    if (a.is_ok()) {
      out.push_back({b, "auto", true, a.value().best.sim.step_seconds, AutoPlan::describe(a.value().best.run.exec.plan)});
    } else {
      out.push_back({b, "auto", false, 0, a.status().message()});
    }
    if (progress) {
      std::fprintf(progress, "sweep: budget %s done\n", format_bytes(b).c_str());
      std::fflush(progress);
    }
  }
  return out;
}

namespace {
std::string csv_quote(const std::string& s) {
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}
}  // namespace

Status write_sweep(const std::vector<SweepPoint>& points, const std::string& prefix, const std::string& title) {
  {
    std::ofstream csv(prefix + ".csv");
    TT_RETURN_IF(!csv, kIoError, "cannot write %s.csv", prefix.c_str());
    csv << "budget_bytes,budget_gib,strategy,fits,ms_per_step,detail\n";
    for (const SweepPoint& p : points)
      csv << p.budget << "," << static_cast<double>(p.budget) / (1 << 30) << "," << p.strategy << ","
          << (p.fits ? 1 : 0) << "," << (p.fits ? str_format("%.3f", 1e3 * p.step_seconds) : std::string()) << ","
          << csv_quote(p.detail) << "\n";
    TT_RETURN_IF(!csv.good(), kIoError, "writing %s.csv failed", prefix.c_str());
  }
  // The plot: budget (GiB) across, predicted ms/step up; a line per strategy through the budgets where it fits.
  std::map<std::string, std::vector<std::pair<double, double>>> lines;
  for (const SweepPoint& p : points)
    if (p.fits) lines[p.strategy].push_back({static_cast<double>(p.budget) / (1 << 30), 1e3 * p.step_seconds});
  LineChart chart{.title = title, .x_label = "device budget (GiB)", .y_label = "predicted ms/step", .series = {}};
  for (auto& [name, pts] : lines) chart.series.push_back({.name = name, .points = std::move(pts), .emphasis = name == "auto"});
  TT_TRY(write_file_atomically(prefix + ".svg", render_svg(chart)));
  return Status::ok();
}

}  // namespace tt::perf
