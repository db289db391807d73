// `tiertrain plot RUN`: the loss curves (training loss per logged step, validation loss per evaluation) of a run
// folder's metrics.jsonl (or a metrics .jsonl / .json file) as an SVG line chart: RUN/loss.svg, or --out.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/atomic_file.h"
#include "core/svg_chart.h"

namespace tt::cli {

int plot_run(const std::string& run, const std::string& out_svg, FILE* out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = run;
  if (fs::is_directory(run, ec)) {
    file = run + "/metrics.jsonl";
    if (!fs::exists(file, ec)) file = run + "/metrics.json";
  }
  if (!fs::is_regular_file(file, ec))
    return report(make_status(StatusCode::kNotFound, "plot: no metrics in '%s' (a run folder with metrics.jsonl or "
                              "metrics.json, or such a file)", run.c_str()));
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return report(make_status(StatusCode::kIoError, "plot: cannot read %s", file.c_str()));
  ChartSeries train{.name = "train", .points = {}}, val{.name = "validation", .points = {}};
  int skipped = 0;
  auto add = [&](const nlohmann::json& r, const std::string& kind) {
    if (!r.is_object() || !r.contains("step") || !r.contains("loss") || !r["step"].is_number() ||
        !r["loss"].is_number()) {
      ++skipped;
      return;
    }
    (kind == "val" ? val : train).points.emplace_back(r["step"].get<double>(), r["loss"].get<double>());
  };
  const nlohmann::json whole = nlohmann::json::parse(text.str(), nullptr, false);
  if (whole.is_object() && whole.contains("steps")) {  // metrics.json (--metrics-out)
    if (whole["steps"].is_array())
      for (const nlohmann::json& r : whole["steps"]) add(r, "train");
    if (whole.contains("val") && whole["val"].is_array())
      for (const nlohmann::json& r : whole["val"]) add(r, "val");
  } else {  // metrics.jsonl: a record a line; a killed run's last line may be cut
    std::istringstream lines(text.str());
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
      if (r.is_discarded() || !r.is_object() || !r.contains("kind") || !r["kind"].is_string()) {
        ++skipped;
        continue;
      }
      const std::string kind = r["kind"].get<std::string>();
      if (kind == "train" || kind == "val") add(r, kind);
    }
  }
  if (train.points.empty() && val.points.empty())
    return report(make_status(StatusCode::kDataLoss, "plot: %s holds no loss records", file.c_str()));
  // A resumed run appends to the same file: by step.
  std::sort(train.points.begin(), train.points.end());
  std::sort(val.points.begin(), val.points.end());
  LineChart chart{.title = "loss: " + file, .x_label = "step", .y_label = "loss", .series = {}};
  chart.y_from_zero = false;
  chart.x_format = "%.0f";
  chart.y_format = "%.2f";
  const size_t n_train = train.points.size(), n_val = val.points.size();
  chart.series.push_back(std::move(train));
  if (n_val > 0) chart.series.push_back(std::move(val));
  std::string target = out_svg;
  if (target.empty())
    target = fs::is_directory(run, ec) ? run + "/loss.svg" : fs::path(file).replace_extension(".svg").string();
  if (Status s = write_file_atomically(target, render_svg(chart)); !s.is_ok()) return report(s);
  std::fprintf(out, "loss curves (%zu training and %zu validation points) written to %s\n", n_train, n_val,
               target.c_str());
  if (skipped > 0) std::fprintf(out, "warning: %d records of %s could not be read and were left out\n", skipped,
                                file.c_str());
  return 0;
}

namespace {

class PlotCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* plot = app.add_subcommand(
        "plot", "draw a run's loss curves (training and validation) as an SVG: tiertrain plot RUN (a run folder, or "
                "a metrics .jsonl / .json file)");
    plot->add_option("run", run_, "run folder or metrics file")->required();
    plot->add_option("--out", out_, "the SVG to write [default: RUN/loss.svg]");
    return plot;
  }
  int run(Context&) override { return plot_run(run_, out_, stdout); }

 private:
  std::string run_;
  std::string out_;  // "": loss.svg in the run folder, or the metrics file's name with .svg
};

}  // namespace

std::unique_ptr<Command> make_plot_command() { return std::make_unique<PlotCommand>(); }

}  // namespace tt::cli
