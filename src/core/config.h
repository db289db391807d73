// core/config: the one registry of knobs. Every knob is declared once (name, type, default, description); its value
// comes from, in increasing priority: the default, a JSON config file, a TIERTRAIN_* environment variable, a flag.
// `tiertrain --print-config` prints every knob, its value and where that value came from.
//
//   Config cfg;
//   cfg.declare({.name = "steps", .type = KnobType::kInt, .default_value = "500", .help = "optimizer steps",
//                .min = 1});
//   TT_TRY(cfg.load_env(environ));
//   TT_TRY(cfg.set("steps", "1000", KnobSource::kFlag));
//   int64_t steps = cfg.get_int("steps");
//
// Names are snake_case; the flag is --kebab-case and the variable TIERTRAIN_UPPER_CASE ("device_budget",
// "--device-budget", "TIERTRAIN_DEVICE_BUDGET"). Values are parsed and range-checked when set, so a bad value is
// reported with its origin ("--steps: 'abc' is not an integer") before any work starts.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace tt {

enum class KnobType { kBool, kInt, kFloat, kString, kBytes, kChoice };
enum class KnobSource { kDefault = 0, kFile = 1, kEnv = 2, kFlag = 3 };

struct KnobSpec {
  std::string name;           // snake_case
  KnobType type = KnobType::kString;
  std::string default_value;  // text, parsed like any other source
  std::string help;
  std::string group = "general";
  std::vector<std::string> choices;  // kChoice: allowed values
  double min = -std::numeric_limits<double>::infinity();  // kInt, kFloat, kBytes: inclusive range
  double max = std::numeric_limits<double>::infinity();
  std::string implicit_value;  // value of a bare flag (`--resume` alone means "latest"); bools use "true"
  std::function<Status(const std::string&)> validate;  // extra check of the text, optional
};

struct Knob {
  KnobSpec spec;
  std::variant<bool, int64_t, double, std::string> value;
  std::string text;     // the text the value was parsed from
  KnobSource source = KnobSource::kDefault;
  std::string origin;   // "default", "file config.json", "env TIERTRAIN_STEPS", "flag --steps"
};

// `text` cut into lines of at most `width` characters at spaces (a longer word alone on its line), each line
// starting with `indent` (--print-config's descriptions of knobs and environment variables).
std::string wrap_text(const std::string& text, const std::string& indent, int width);

class Config {
 public:
  // Declares a knob and sets its default. Declaring a name twice is a programming error.
  void declare(KnobSpec spec);
  bool has(const std::string& name) const { return index_.count(name) != 0; }

  // Parses and range-checks text for the knob; on error the message names the origin and the accepted values.
  Status set(const std::string& name, const std::string& text, KnobSource source, const std::string& origin = "");
  // Reads a JSON object {"knob": value, ...} (keys snake_case or kebab-case). Unknown keys are errors.
  Status load_file(const std::string& path);
  // Applies every TIERTRAIN_<KNOB> variable of envp (env::environment()). Unknown TIERTRAIN_* variables get a
  // warning, except those of the environment registry (core/env.h: the communicator's, the launcher's, ...).
  Status load_env(char** envp);

  bool get_bool(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  int64_t get_bytes(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;  // kString and kChoice
  KnobSource source(const std::string& name) const { return knob(name).source; }
  const KnobSpec& spec(const std::string& name) const { return knob(name).spec; }

  const std::vector<Knob>& knobs() const { return knobs_; }

  static std::string flag_name(const std::string& name);  // "--device-budget"
  static std::string env_name(const std::string& name);   // "TIERTRAIN_DEVICE_BUDGET"

  // Every knob, grouped: a line of name, value and origin (the value column as wide as the longest value, up to 40
  // characters), then its description, type, range, flag and variable, indented and wrapped at `width` columns.
  std::string describe(int width = 100) const;
  // {"knob": value} with typed JSON values (bytes as integers).
  nlohmann::json to_json() const;

 private:
  const Knob& knob(const std::string& name) const;
  std::vector<Knob> knobs_;
  std::map<std::string, size_t> index_;
};

// A JSON document whose objects name each key once (nlohmann's parser keeps the last of a repeated key without a
// word: a config or plan that says "batch" twice would run with whichever came last). `what` names the document in
// the errors: invalid JSON, or the repeated key and where (kInvalidArgument).
Result<nlohmann::json> parse_json_unique_keys(const std::string& text, const std::string& what);

}  // namespace tt
