// cli/command: the subcommands of the `tiertrain` program, one file each (cli/<name>_command.cc). A command declares
// its flags on the CLI11 app (add_to) and runs once the command line is parsed (run). main() (cli/main.cc) builds
// the program from all_commands(), parses, resolves the knobs of the commands that take them, and runs the one
// parsed. Data goes to stdout, diagnostics to stderr, as Unix tools do (`tiertrain sample RUN > out.txt` keeps the
// text alone).
//
//   class PlotCommand final : public Command {
//     CLI::App* add_to(CLI::App& app) override { ... app.add_subcommand("plot", "...") ... }
//     int run(Context& ctx) override { ... return 0; }
//   };
//   std::unique_ptr<Command> make_plot_command() { return std::make_unique<PlotCommand>(); }
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/exit_codes.h"
#include "core/config.h"
#include "core/status.h"
#include "exec/train_config.h"

namespace tt::cli {

// Checks for numeric flags that CLI11's own let through (issue 47): CLI::PositiveNumber accepts NaN (every comparison
// with it is false), and an unsigned option takes "-1" as 2^64 - 1.
inline std::string finite_number_error(const std::string& s, double low, bool low_inclusive) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !std::isfinite(v)) return "'" + s + "' is not a finite number";
  if (low_inclusive ? v < low : v <= low)
    return "'" + s + "' must be " + (low_inclusive ? "at least " : "above ") + std::to_string(low).substr(0, 3);
  return {};
}
inline const CLI::Validator kFinitePositive(
    [](std::string& s) { return finite_number_error(s, 0.0, false); }, "NUMBER > 0");
inline const CLI::Validator kFiniteNonNegative(
    [](std::string& s) { return finite_number_error(s, 0.0, true); }, "NUMBER >= 0");
inline const CLI::Validator kUnsigned(
    [](std::string& s) {
      return s.find_first_not_of("0123456789") == std::string::npos && !s.empty()
                 ? std::string()
                 : "'" + s + "' is not a whole number >= 0";
    },
    "UINT");

// What a command runs with.
struct Context {
  Config& cfg;                    // the knobs, resolved: defaults < --config file < environment < flags
  std::vector<std::string> tail;  // `launch -n N -- CMD ...`: the command after "--"
  bool has_tail = false;
};

class Command {
 public:
  virtual ~Command() = default;
  // Adds the subcommand and its own flags to the program; returns it.
  virtual CLI::App* add_to(CLI::App& app) = 0;
  // Every knob of the config registry is also a flag of this command (train, plan, calibrate).
  virtual bool takes_knobs() const { return false; }
  // After the knobs are resolved and before --print-config prints them (train: its run folder's paths).
  virtual Status prepare(Config& cfg) { return Status::ok(); }
  // Runs the parsed command; returns the process's exit code.
  virtual int run(Context& ctx) = 0;
};

// Every command, in the order --help lists them.
std::vector<std::unique_ptr<Command>> all_commands();

std::unique_ptr<Command> make_train_command();
std::unique_ptr<Command> make_calibrate_command();
std::unique_ptr<Command> make_plan_command();
std::unique_ptr<Command> make_sample_command();
std::unique_ptr<Command> make_tokenize_command();
std::unique_ptr<Command> make_plot_command();
std::unique_ptr<Command> make_eval_command();
std::unique_ptr<Command> make_export_command();
std::unique_ptr<Command> make_gen_features_command();
std::unique_ptr<Command> make_train_features_command();
std::unique_ptr<Command> make_launch_command();
std::unique_ptr<Command> make_comm_bench_command();

// --- Shared between commands ---

// The configuration with the vocabulary of its data (the model's size depends on it). plan_command.cc.
Result<TrainConfig> with_vocab(const TrainConfig& cfg);

// `train` with --plan auto, or with no --plan when the in-core plan does not fit the budget and some plan does:
// chooses the plan (perf/auto_plan.h), prints why, and sets cfg.plan_value. False when nothing was chosen (a plan was
// given, or in-core fits, or nothing fits). plan_command.cc.
Result<bool> choose_train_plan(TrainConfig& cfg, bool explain, FILE* out);

// A run's loss curves as an SVG (`plot`): the run folder's (or metrics file's) records, to out_svg ("" : RUN/loss.svg
// or the metrics file's name with .svg). Returns the exit code. plot_command.cc.
int plot_run(const std::string& run, const std::string& out_svg, FILE* out);

// After a run with --run-dir: --sample-tokens tokens from its final checkpoint, printed and written to
// RUN/sample.txt (not when `sample` is false: a run stopped early), its loss curves in RUN/loss.svg, then where the
// run folder is. A failed sample is a warning: the run itself succeeded. sample_command.cc.
void finish_run_folder(const TrainConfig& cfg, FILE* out, bool sample = true);

}  // namespace tt::cli
