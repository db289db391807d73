#include "perf/sweep.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

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
std::string xml(const std::string& s) {
  std::string r;
  for (char ch : s) {
    switch (ch) {
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '&': r += "&amp;"; break;
      default: r += ch;
    }
  }
  return r;
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
  // The plot: budget (GiB) across, predicted ms/step up; a polyline per strategy through the budgets where it fits.
  std::map<std::string, std::vector<std::pair<double, double>>> lines;
  double x0 = 1e300, x1 = -1e300, y1 = 0;
  for (const SweepPoint& p : points) {
    const double x = static_cast<double>(p.budget) / (1 << 30);
    x0 = std::min(x0, x), x1 = std::max(x1, x);
    if (!p.fits) continue;
    lines[p.strategy].push_back({x, 1e3 * p.step_seconds});
    y1 = std::max(y1, 1e3 * p.step_seconds);
  }
  if (x1 <= x0) x1 = x0 + 1;
  y1 = y1 > 0 ? y1 * 1.08 : 1;
  const double W = 900, H = 520, L = 70, R = 290, T = 40, B = 50;
  auto sx = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto sy = [&](double y) { return H - B - y / y1 * (H - T - B); };
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                          "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#000000"};
  std::ofstream svg(prefix + ".svg");
  TT_RETURN_IF(!svg, kIoError, "cannot write %s.svg", prefix.c_str());
  svg << str_format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                    "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                    W, H);
  svg << str_format("<text x=\"%.0f\" y=\"22\" font-size=\"14\">%s</text>\n", L, xml(title).c_str());
  svg << str_format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
  svg << str_format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", L, T, L, H - B);
  for (int i = 0; i <= 5; ++i) {
    const double x = x0 + (x1 - x0) * i / 5, y = y1 * i / 5;
    svg << str_format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.1f</text>\n", sx(x), H - B + 18, x);
    svg << str_format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n", L - 6, sy(y) + 4, y);
    svg << str_format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, sy(y), W - R, sy(y));
  }
  svg << str_format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">device budget (GiB)</text>\n",
                    (L + W - R) / 2, H - 12);
  svg << str_format("<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" text-anchor=\"middle\">predicted "
                    "ms/step</text>\n", (T + H - B) / 2, (T + H - B) / 2);
  int k = 0;
  for (const auto& [name, pts] : lines) {
    const char* c = name == "auto" ? "#000000" : colors[k % 12];
    std::string d;
    for (const auto& [x, y] : pts) d += str_format("%s%.1f,%.1f", d.empty() ? "" : " ", sx(x), sy(y));
    svg << str_format("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"%s\"/>\n", c,
                      name == "auto" ? "3" : "1.5", d.c_str());
    for (const auto& [x, y] : pts) svg << str_format("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", sx(x), sy(y), c);
    const double ly = T + 14 + 16 * k;
    svg << str_format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n",
                      W - R + 12, ly - 4, W - R + 32, ly - 4, c);
    svg << str_format("<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", W - R + 38, ly, xml(name).c_str());
    ++k;
  }
  svg << "</svg>\n";
  TT_RETURN_IF(!svg.good(), kIoError, "writing %s.svg failed", prefix.c_str());
  return Status::ok();
}

}  // namespace tt::perf
