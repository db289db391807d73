#include "cli/model_commands.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/exit_codes.h"
#include "core/atomic_file.h"
#include "core/svg_chart.h"
#include "core/units.h"
#include "exec/export.h"

namespace tt::cli {

namespace {

// The sample as people read it: a text model's bytes as they are, token ids as a line of numbers.
void print_sample(const SampleResult& s, FILE* out) {
  const long long drawn = static_cast<long long>(s.tokens.size()) - static_cast<long long>(s.prompt_tokens);
  std::fprintf(out, "--- sample of %s (step %lld): %lld tokens after a prompt of %lld, in %.1f s (%.0f tokens/s, %lld "
               "full forwards) ---\n",
               s.checkpoint.c_str(), static_cast<long long>(s.step), drawn, static_cast<long long>(s.prompt_tokens),
               s.seconds, s.seconds > 0 ? static_cast<double>(drawn) / s.seconds : 0.0,
               static_cast<long long>(s.prefills));
  // Control bytes but newline and tab are shown escaped (\xNN): a terminal would act on them. sample.txt and --out
  // keep the bytes as they are.
  for (unsigned char c : s.text) {
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) std::fprintf(out, "\\x%02x", c);
    else std::fputc(c, out);
  }
  if (s.text.empty() || s.text.back() != '\n') std::fputc('\n', out);
  std::fputs("---\n", out);
  if (drawn > 0) {
    const double per = 1e3 / static_cast<double>(drawn);
    std::fprintf(out, "(a token: %.3f ms enqueuing the model, %.3f ms waiting for it, %.3f ms drawing)\n",
                 s.enqueue_seconds * per, s.wait_seconds * per, s.draw_seconds * per);
  }
}

}  // namespace

int run_sample(const SampleCommand& cmd, FILE* out) {
  auto s = sample_checkpoint(cmd.checkpoint, cmd.options);
  if (!s.is_ok()) return report(s.status());
  print_sample(s.value(), out);
  if (!cmd.out.empty()) {
    if (Status w = write_file_atomically(cmd.out, s.value().text); !w.is_ok()) return report(w);
    std::fprintf(out, "sample written to %s\n", cmd.out.c_str());
  }
  return 0;
}

int run_plot(const PlotCommand& cmd, FILE* out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = cmd.run;
  if (fs::is_directory(cmd.run, ec)) {
    file = cmd.run + "/metrics.jsonl";
    if (!fs::exists(file, ec)) file = cmd.run + "/metrics.json";
  }
  if (!fs::is_regular_file(file, ec))
    return report(make_status(StatusCode::kNotFound, "plot: no metrics in '%s' (a run folder with metrics.jsonl or "
                              "metrics.json, or such a file)", cmd.run.c_str()));
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
  std::string target = cmd.out;
  if (target.empty())
    target = fs::is_directory(cmd.run, ec) ? cmd.run + "/loss.svg" : fs::path(file).replace_extension(".svg").string();
  if (Status s = write_file_atomically(target, render_svg(chart)); !s.is_ok()) return report(s);
  std::fprintf(out, "loss curves (%zu training and %zu validation points) written to %s\n", n_train, n_val,
               target.c_str());
  if (skipped > 0) std::fprintf(out, "warning: %d records of %s could not be read and were left out\n", skipped,
                                file.c_str());
  return 0;
}

int run_eval(const EvalCommand& cmd, FILE* out) {
  auto e = evaluate_checkpoint(cmd.checkpoint, cmd.options);
  if (!e.is_ok()) return report(e.status());
  const EvalResult& r = e.value();
  std::fprintf(out,
               "%s (step %lld) on %s: loss %.4f nats/token, perplexity %.3f, %.4f bits/token; %lld batches, %lld "
               "tokens, %.1f s\n",
               r.checkpoint.c_str(), static_cast<long long>(r.step), cmd.options.data.c_str(), r.loss, std::exp(r.loss),
               r.loss / std::log(2.0), static_cast<long long>(r.batches), static_cast<long long>(r.tokens), r.seconds);
  return 0;
}

int run_export(const ExportCommand& cmd, FILE* out) {
  auto s = export_gpt2(cmd.checkpoint, cmd.out);
  if (!s.is_ok()) return report(s.status());
  std::fprintf(out,
               "%s: %lld tensors, %lld parameters (fp32, GPT-2 layout) written to %s (%s) with %s/config.json; in "
               "Python: transformers.GPT2LMHeadModel.from_pretrained(\"%s\")\n",
               s.value().checkpoint.c_str(), static_cast<long long>(s.value().tensors),
               static_cast<long long>(s.value().params), s.value().file.c_str(), format_bytes(s.value().bytes).c_str(),
               cmd.out.c_str(), cmd.out.c_str());
  return 0;
}

void finish_run_folder(const TrainConfig& cfg, FILE* out) {
  if (cfg.run_dir.empty()) return;
  if (cfg.sample_tokens > 0 && !cfg.checkpoint_dir.empty()) {
    SampleOptions o;
    o.tokens = cfg.sample_tokens;
    o.seed = cfg.seed;
    o.backend = cfg.backend;
    o.dtype = cfg.dtype;
    o.threads = cfg.threads;
    auto s = sample_checkpoint(cfg.checkpoint_dir, o);
    if (s.is_ok()) {
      print_sample(s.value(), out);
      const std::string path = cfg.run_dir + "/sample.txt";
      if (Status w = write_file_atomically(path, s.value().text); !w.is_ok())
        std::fprintf(out, "warning: %s\n", w.message().c_str());
    } else {
      std::fprintf(out, "warning: no sample: %s\n", s.status().message().c_str());
    }
  }
  const bool plotted = run_plot({.run = cfg.run_dir, .out = ""}, out) == 0;
  std::fprintf(out, "run folder: %s (config.json, metrics.jsonl, metrics.json, checkpoints/%s%s)\n",
               cfg.run_dir.c_str(), cfg.sample_tokens > 0 ? ", sample.txt" : "", plotted ? ", loss.svg" : "");
}

}  // namespace tt::cli
