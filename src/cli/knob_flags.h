// cli/knob_flags: every knob of the config registry (core/config.h) as a flag of the commands that take them (train,
// plan, calibrate), and the knobs resolved in priority order: defaults < --config FILE (or TIERTRAIN_CONFIG) <
// TIERTRAIN_* variables < flags. Also `--print-config`'s text.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/config.h"
#include "core/status.h"

namespace tt::cli {

class KnobFlags {
 public:
  // Adds a flag per knob of cfg to the subcommand, in the knob's group.
  void add_to(CLI::App* sub, const Config& cfg);
  // After parsing: the config file, the environment, then the flags given, into cfg.
  Status resolve(Config& cfg);

 private:
  size_t given(const std::string& name) const;
  std::map<std::string, std::vector<std::string>> raw_;  // a knob's values as given (CLI11 fills them)
  std::map<std::string, std::vector<CLI::Option*>> opts_;
};

// Every knob (value and origin), then every environment variable of core/env.h, wrapped to the terminal's width
// (COLUMNS, else 100 when stdout is not a terminal).
std::string describe_config(const Config& cfg);

}  // namespace tt::cli
