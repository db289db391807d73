// core/config: the knob registry. Declaration and defaults, parsing of each type with errors that name where the
// bad value came from (--steps, TIERTRAIN_STEPS, the config file), the precedence default < file < env < flag,
// load_file / load_env, describe() and to_json().
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "temp_dir.h"

namespace tt {
namespace {

// A KnobSpec with the fields every knob has; tests set the others by name.
KnobSpec spec(const std::string& name, KnobType type, const std::string& default_value, const std::string& help = "") {
  KnobSpec s;
  s.name = name;
  s.type = type;
  s.default_value = default_value;
  s.help = help;
  return s;
}

// Declares a small registry with one knob of every type.
void declare_all(Config& cfg) {
  KnobSpec steps = spec("steps", KnobType::kInt, "500", "optimizer steps");
  steps.min = 1;
  cfg.declare(steps);
  KnobSpec lr = spec("lr", KnobType::kFloat, "0.001", "learning rate");
  lr.group = "optim";
  lr.min = 0;
  lr.max = 1;
  cfg.declare(lr);
  KnobSpec budget = spec("device_budget", KnobType::kBytes, "1GiB", "device memory budget");
  budget.group = "memory";
  budget.min = 1 << 20;
  cfg.declare(budget);
  cfg.declare(spec("verbose", KnobType::kBool, "false", "chatty"));
  KnobSpec mode = spec("mode", KnobType::kChoice, "auto", "placement policy");
  mode.group = "memory";
  mode.choices = {"auto", "device", "swap", "um"};
  cfg.declare(mode);
  cfg.declare(spec("run_name", KnobType::kString, "", "label of the run"));
}

const Knob& find_knob(const Config& cfg, const std::string& name) {
  for (const auto& k : cfg.knobs())
    if (k.spec.name == name) return k;
  ADD_FAILURE() << "no knob " << name;
  return cfg.knobs().front();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

#define EXPECT_CONTAINS(s, part) EXPECT_TRUE(contains((s), (part))) << "'" << (s) << "' lacks '" << (part) << "'"

// An envp array (NULL-terminated, mutable char*) from strings.
class FakeEnv {
 public:
  explicit FakeEnv(std::vector<std::string> vars) : vars_(std::move(vars)) {
    for (auto& v : vars_) ptrs_.push_back(v.data());
    ptrs_.push_back(nullptr);
  }
  char** envp() { return ptrs_.data(); }

 private:
  std::vector<std::string> vars_;
  std::vector<char*> ptrs_;
};

// --- declaration and defaults ---------------------------------------------------------------------------------------

TEST(Config, DefaultsAreParsedAndTyped) {
  Config cfg;
  declare_all(cfg);
  EXPECT_TRUE(cfg.has("steps"));
  EXPECT_FALSE(cfg.has("stepz"));
  EXPECT_EQ(cfg.get_int("steps"), 500);
  EXPECT_DOUBLE_EQ(cfg.get_float("lr"), 0.001);
  EXPECT_EQ(cfg.get_bytes("device_budget"), int64_t(1) << 30);
  EXPECT_FALSE(cfg.get_bool("verbose"));
  EXPECT_EQ(cfg.get_string("mode"), "auto");
  EXPECT_EQ(cfg.get_string("run_name"), "");
  for (const auto& k : cfg.knobs()) {
    EXPECT_EQ(k.source, KnobSource::kDefault) << k.spec.name;
    EXPECT_EQ(k.origin, "default") << k.spec.name;
  }
  EXPECT_EQ(cfg.knobs().size(), 6u);
}

TEST(Config, KnobsKeepDeclarationOrder) {
  Config cfg;
  declare_all(cfg);
  const std::vector<std::string> want = {"steps", "lr", "device_budget", "verbose", "mode", "run_name"};
  ASSERT_EQ(cfg.knobs().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(cfg.knobs()[i].spec.name, want[i]);
}

TEST(Config, FlagAndEnvNames) {
  EXPECT_EQ(Config::flag_name("device_budget"), "--device-budget");
  EXPECT_EQ(Config::flag_name("steps"), "--steps");
  EXPECT_EQ(Config::env_name("device_budget"), "TIERTRAIN_DEVICE_BUDGET");
  EXPECT_EQ(Config::env_name("steps"), "TIERTRAIN_STEPS");
}

TEST(ConfigDeathTest, DeclaringTwiceAborts) {
  EXPECT_DEATH(
      {
        Config cfg;
        cfg.declare(spec("steps", KnobType::kInt, "1"));
        cfg.declare(spec("steps", KnobType::kInt, "2"));
      },
      "declared twice");
}

TEST(ConfigDeathTest, InvalidDefaultAborts) {
  EXPECT_DEATH(
      {
        Config cfg;
        cfg.declare(spec("steps", KnobType::kInt, "many"));
      },
      "default of knob 'steps' is invalid");
}

// --- set: parsing of each type --------------------------------------------------------------------------------------

TEST(Config, SetParsesEachType) {
  Config cfg;
  declare_all(cfg);
  ASSERT_TRUE(cfg.set("steps", " 1000 ", KnobSource::kFlag).is_ok());
  EXPECT_EQ(cfg.get_int("steps"), 1000);
  ASSERT_TRUE(cfg.set("lr", "3e-4", KnobSource::kFlag).is_ok());
  EXPECT_DOUBLE_EQ(cfg.get_float("lr"), 3e-4);
  ASSERT_TRUE(cfg.set("device_budget", "512MiB", KnobSource::kFlag).is_ok());
  EXPECT_EQ(cfg.get_bytes("device_budget"), int64_t(512) << 20);
  ASSERT_TRUE(cfg.set("device_budget", "1.5GB", KnobSource::kFlag).is_ok());
  EXPECT_EQ(cfg.get_bytes("device_budget"), 1500000000);
  ASSERT_TRUE(cfg.set("mode", "swap", KnobSource::kFlag).is_ok());
  EXPECT_EQ(cfg.get_string("mode"), "swap");
  ASSERT_TRUE(cfg.set("run_name", "exp 7", KnobSource::kFlag).is_ok());
  EXPECT_EQ(cfg.get_string("run_name"), "exp 7");
}

TEST(Config, BoolSpellings) {
  Config cfg;
  declare_all(cfg);
  for (const char* t : {"1", "true", "TRUE", "yes", "On"}) {
    ASSERT_TRUE(cfg.set("verbose", "false", KnobSource::kFlag).is_ok());
    ASSERT_TRUE(cfg.set("verbose", t, KnobSource::kFlag).is_ok()) << t;
    EXPECT_TRUE(cfg.get_bool("verbose")) << t;
  }
  for (const char* t : {"0", "false", "No", "OFF"}) {
    ASSERT_TRUE(cfg.set("verbose", "true", KnobSource::kFlag).is_ok());
    ASSERT_TRUE(cfg.set("verbose", t, KnobSource::kFlag).is_ok()) << t;
    EXPECT_FALSE(cfg.get_bool("verbose")) << t;
  }
  Status s = cfg.set("verbose", "maybe", KnobSource::kFlag);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), "--verbose");
  EXPECT_CONTAINS(s.message(), "'maybe' is not a boolean");
}

TEST(Config, BoolImplicitValueDefaultsToTrue) {
  Config cfg;
  declare_all(cfg);
  KnobSpec resume = spec("resume", KnobType::kString, "");
  resume.implicit_value = "latest";
  cfg.declare(resume);
  EXPECT_EQ(find_knob(cfg, "verbose").spec.implicit_value, "true");
  EXPECT_EQ(find_knob(cfg, "resume").spec.implicit_value, "latest");
  EXPECT_EQ(find_knob(cfg, "steps").spec.implicit_value, "");
}

TEST(Config, IntErrorsNameTheFlag) {
  Config cfg;
  declare_all(cfg);
  for (const char* bad : {"abc", "12x", "1.5", "", "0x10", "99999999999999999999999"}) {
    Status s = cfg.set("steps", bad, KnobSource::kFlag);
    ASSERT_FALSE(s.is_ok()) << "'" << bad << "' accepted";
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_CONTAINS(s.message(), "--steps: '" + std::string(bad) + "' is not an integer");
  }
  EXPECT_EQ(cfg.get_int("steps"), 500);  // unchanged by the failures
  EXPECT_EQ(cfg.source("steps"), KnobSource::kDefault);
}

TEST(Config, IntRangeErrorsNameTheOriginAndTheRange) {
  Config cfg;
  declare_all(cfg);
  Status flag = cfg.set("steps", "0", KnobSource::kFlag);
  EXPECT_EQ(flag.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(flag.message(), "--steps");
  EXPECT_CONTAINS(flag.message(), "out of range");
  EXPECT_CONTAINS(flag.message(), ">= 1");

  Status env = cfg.set("steps", "-3", KnobSource::kEnv);
  EXPECT_EQ(env.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(env.message(), "TIERTRAIN_STEPS");
  EXPECT_CONTAINS(env.message(), "-3 is out of range");

  Status file = cfg.set("steps", "0", KnobSource::kFile, "file /etc/tt/run.json");
  EXPECT_EQ(file.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(file.message(), "/etc/tt/run.json");
  EXPECT_CONTAINS(file.message(), "steps");

  EXPECT_TRUE(cfg.set("steps", "1", KnobSource::kFlag).is_ok());  // the bound is inclusive
  EXPECT_EQ(cfg.get_int("steps"), 1);
}

TEST(Config, FloatErrorsAndClosedRange) {
  Config cfg;
  declare_all(cfg);
  Status nan = cfg.set("lr", "nan", KnobSource::kFlag);
  EXPECT_CONTAINS(nan.message(), "--lr: 'nan' is not a number");
  Status junk = cfg.set("lr", "0.1x", KnobSource::kFlag);
  EXPECT_CONTAINS(junk.message(), "'0.1x' is not a number");
  Status high = cfg.set("lr", "1.5", KnobSource::kEnv);
  EXPECT_EQ(high.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(high.message(), "TIERTRAIN_LR");
  EXPECT_CONTAINS(high.message(), "[0, 1]");
  EXPECT_TRUE(cfg.set("lr", "1", KnobSource::kFlag).is_ok());
  EXPECT_TRUE(cfg.set("lr", "0", KnobSource::kFlag).is_ok());
  EXPECT_DOUBLE_EQ(cfg.get_float("lr"), 0.0);
}

TEST(Config, BytesErrors) {
  Config cfg;
  declare_all(cfg);
  Status junk = cfg.set("device_budget", "12XB", KnobSource::kFlag);
  EXPECT_EQ(junk.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(junk.message(), "--device-budget");
  EXPECT_CONTAINS(junk.message(), "not a byte size");
  Status small = cfg.set("device_budget", "512KiB", KnobSource::kEnv);
  EXPECT_CONTAINS(small.message(), "TIERTRAIN_DEVICE_BUDGET");
  EXPECT_CONTAINS(small.message(), "out of range");
  EXPECT_CONTAINS(small.message(), ">= 1048576");
  EXPECT_EQ(cfg.get_bytes("device_budget"), int64_t(1) << 30);
}

TEST(Config, ChoiceErrorListsTheChoices) {
  Config cfg;
  declare_all(cfg);
  Status s = cfg.set("mode", "offload", KnobSource::kFlag);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), "--mode");
  EXPECT_CONTAINS(s.message(), "'offload' is not one of auto, device, swap, um");
  EXPECT_EQ(cfg.get_string("mode"), "auto");
}

// Issue 24: `--debug info` was refused ("'info' is not one of NONE, WARN, INFO, TRACE"). A choice matches in any case
// and is kept as declared.
TEST(Config, ChoicesMatchInAnyCaseAndKeepTheirDeclaredSpelling) {
  Config cfg;
  declare_all(cfg);
  ASSERT_TRUE(cfg.set("mode", "SWAP", KnobSource::kFlag).is_ok());
  EXPECT_EQ(cfg.get_string("mode"), "swap");
  ASSERT_TRUE(cfg.set("mode", "Um", KnobSource::kFlag).is_ok());
  EXPECT_EQ(cfg.get_string("mode"), "um");
  EXPECT_FALSE(cfg.set("mode", "swa", KnobSource::kFlag).is_ok());
  EXPECT_FALSE(cfg.set("mode", "swapp", KnobSource::kFlag).is_ok());
  EXPECT_EQ(cfg.get_string("mode"), "um");
}

TEST(Config, ValidateHookRunsAndNamesTheOrigin) {
  Config cfg;
  KnobSpec out_dir = spec("out_dir", KnobType::kString, "runs");
  out_dir.validate = [](const std::string& t) -> Status {
    if (!t.empty() && t.back() == '/') return Status(StatusCode::kInvalidArgument, "no trailing slash");
    return Status::ok();
  };
  cfg.declare(out_dir);
  EXPECT_TRUE(cfg.set("out_dir", "a/b", KnobSource::kFlag).is_ok());
  Status s = cfg.set("out_dir", "a/b/", KnobSource::kEnv);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), "TIERTRAIN_OUT_DIR: no trailing slash");
  EXPECT_EQ(cfg.get_string("out_dir"), "a/b");
}

TEST(Config, UnknownNameIsAnError) {
  Config cfg;
  declare_all(cfg);
  Status s = cfg.set("stepz", "5", KnobSource::kFlag);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), "stepz");
}

TEST(Config, SourceAndOriginAreRecorded) {
  Config cfg;
  declare_all(cfg);
  ASSERT_TRUE(cfg.set("steps", "7", KnobSource::kEnv).is_ok());
  ASSERT_TRUE(cfg.set("lr", "0.5", KnobSource::kFlag).is_ok());
  ASSERT_TRUE(cfg.set("mode", "um", KnobSource::kFile, "file /x/run.json").is_ok());
  EXPECT_EQ(cfg.source("steps"), KnobSource::kEnv);
  EXPECT_EQ(cfg.source("lr"), KnobSource::kFlag);
  EXPECT_EQ(cfg.source("mode"), KnobSource::kFile);
  EXPECT_EQ(find_knob(cfg, "steps").origin, "env TIERTRAIN_STEPS");
  EXPECT_EQ(find_knob(cfg, "steps").text, "7");
  EXPECT_EQ(find_knob(cfg, "lr").origin, "flag --lr");
  EXPECT_EQ(find_knob(cfg, "mode").origin, "file /x/run.json");
}

// --- precedence -----------------------------------------------------------------------------------------------------

TEST(Config, PrecedenceInLoadOrder) {
  // default < file < env < flag, applied in that order (what the CLI does).
  testing::TempDir dir;
  Config cfg;
  declare_all(cfg);
  const std::string path = dir.write("run.json", R"({"steps": 10, "lr": 0.25, "mode": "swap"})");
  ASSERT_TRUE(cfg.load_file(path).is_ok());
  FakeEnv env({"TIERTRAIN_STEPS=20", "TIERTRAIN_LR=0.5"});
  ASSERT_TRUE(cfg.load_env(env.envp()).is_ok());
  ASSERT_TRUE(cfg.set("steps", "30", KnobSource::kFlag).is_ok());

  EXPECT_EQ(cfg.get_int("steps"), 30);
  EXPECT_EQ(cfg.source("steps"), KnobSource::kFlag);
  EXPECT_DOUBLE_EQ(cfg.get_float("lr"), 0.5);
  EXPECT_EQ(cfg.source("lr"), KnobSource::kEnv);
  EXPECT_EQ(cfg.get_string("mode"), "swap");
  EXPECT_EQ(cfg.source("mode"), KnobSource::kFile);
  EXPECT_EQ(cfg.get_bytes("device_budget"), int64_t(1) << 30);
  EXPECT_EQ(cfg.source("device_budget"), KnobSource::kDefault);
}

TEST(Config, PrecedenceDoesNotDependOnLoadOrder) {
  // config.h: "its value comes from, in increasing priority: the default, a JSON config file, a TIERTRAIN_*
  // environment variable, a flag". A CLI has to parse its flags before it knows which --config file to load, so a
  // file (or the environment) applied after a flag must not override that flag.
  testing::TempDir dir;
  Config cfg;
  declare_all(cfg);
  ASSERT_TRUE(cfg.set("steps", "30", KnobSource::kFlag).is_ok());
  ASSERT_TRUE(cfg.set("lr", "0.5", KnobSource::kEnv).is_ok());
  FakeEnv env({"TIERTRAIN_STEPS=20"});
  ASSERT_TRUE(cfg.load_env(env.envp()).is_ok());
  const std::string path = dir.write("run.json", R"({"steps": 10, "lr": 0.25})");
  ASSERT_TRUE(cfg.load_file(path).is_ok());

  EXPECT_EQ(cfg.get_int("steps"), 30) << "a later env/file value overrode the flag";
  EXPECT_EQ(cfg.source("steps"), KnobSource::kFlag);
  EXPECT_DOUBLE_EQ(cfg.get_float("lr"), 0.5) << "a later file value overrode the environment";
  EXPECT_EQ(cfg.source("lr"), KnobSource::kEnv);
}

TEST(Config, SameSourceLaterWins) {
  Config cfg;
  declare_all(cfg);
  ASSERT_TRUE(cfg.set("steps", "30", KnobSource::kFlag).is_ok());
  ASSERT_TRUE(cfg.set("steps", "40", KnobSource::kFlag).is_ok());
  EXPECT_EQ(cfg.get_int("steps"), 40);
}

// --- load_file ------------------------------------------------------------------------------------------------------

TEST(ConfigFile, ValidFileSetsTypedValues) {
  testing::TempDir dir;
  Config cfg;
  declare_all(cfg);
  const std::string path = dir.write("run.json", R"({
    "steps": 7,
    "lr": 0.125,
    "device_budget": "256MiB",
    "verbose": true,
    "mode": "device",
    "run_name": "baseline"
  })");
  Status s = cfg.load_file(path);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(cfg.get_int("steps"), 7);
  EXPECT_DOUBLE_EQ(cfg.get_float("lr"), 0.125);
  EXPECT_EQ(cfg.get_bytes("device_budget"), int64_t(256) << 20);
  EXPECT_TRUE(cfg.get_bool("verbose"));
  EXPECT_EQ(cfg.get_string("mode"), "device");
  EXPECT_EQ(cfg.get_string("run_name"), "baseline");
  for (const auto& k : cfg.knobs()) {
    EXPECT_EQ(k.source, KnobSource::kFile) << k.spec.name;
    EXPECT_EQ(k.origin, "file " + path) << k.spec.name;
  }
}

TEST(ConfigFile, KebabCaseKeysAndNumericBytes) {
  testing::TempDir dir;
  Config cfg;
  declare_all(cfg);
  const std::string path = dir.write("run.json", R"({"device-budget": 2097152, "run-name": "k"})");
  Status s = cfg.load_file(path);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(cfg.get_bytes("device_budget"), 2097152);
  EXPECT_EQ(cfg.get_string("run_name"), "k");
  EXPECT_EQ(cfg.source("device_budget"), KnobSource::kFile);
}

TEST(ConfigFile, FloatKnobAcceptsAJsonInteger) {
  testing::TempDir dir;
  Config cfg;
  declare_all(cfg);
  ASSERT_TRUE(cfg.load_file(dir.write("a.json", R"({"lr": 1})")).is_ok());
  EXPECT_DOUBLE_EQ(cfg.get_float("lr"), 1.0);
}

TEST(ConfigFile, UnknownKeyIsAnErrorNamingIt) {
  testing::TempDir dir;
  Config cfg;
  declare_all(cfg);
  const std::string path = dir.write("run.json", R"({"steps": 3, "warmup-stepz": 10})");
  Status s = cfg.load_file(path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), "'warmup-stepz'");
  EXPECT_CONTAINS(s.message(), path);
}

TEST(ConfigFile, NotAnObject) {
  testing::TempDir dir;
  Config cfg;
  declare_all(cfg);
  for (const char* text : {"[1, 2, 3]", "42", "\"steps\""}) {
    const std::string path = dir.write("arr.json", text);
    Status s = cfg.load_file(path);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_CONTAINS(s.message(), "must hold a JSON object");
    EXPECT_CONTAINS(s.message(), path);
  }
}

TEST(ConfigFile, InvalidJson) {
  testing::TempDir dir;
  Config cfg;
  declare_all(cfg);
  for (const char* text : {"{\"steps\": ", "{steps: 5}", "", "{\"steps\": 5,}"}) {
    const std::string path = dir.write("bad.json", text);
    Status s = cfg.load_file(path);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "'" << text << "'";
    EXPECT_CONTAINS(s.message(), "is not valid JSON");
    EXPECT_CONTAINS(s.message(), path);
  }
  EXPECT_EQ(cfg.get_int("steps"), 500);
}

TEST(ConfigFile, MissingFileIsNotFound) {
  testing::TempDir dir;
  Config cfg;
  declare_all(cfg);
  const std::string path = dir.path() + "/nope.json";
  Status s = cfg.load_file(path);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(s.message(), path);
}

TEST(ConfigFile, BadValueNamesTheFileAndTheKey) {
  testing::TempDir dir;
  Config cfg;
  declare_all(cfg);
  const std::string path = dir.write("run.json", R"({"steps": 0})");
  Status s = cfg.load_file(path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), path);
  EXPECT_CONTAINS(s.message(), "'steps'");
  EXPECT_CONTAINS(s.message(), "out of range");

  const std::string frac = dir.write("frac.json", R"({"steps": 2.5})");
  Status f = cfg.load_file(frac);
  EXPECT_EQ(f.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(f.message(), frac);
  EXPECT_CONTAINS(f.message(), "not an integer");

  const std::string choice = dir.write("choice.json", R"({"mode": "magic"})");
  Status c = cfg.load_file(choice);
  EXPECT_CONTAINS(c.message(), choice);
  EXPECT_CONTAINS(c.message(), "auto, device, swap, um");
}

TEST(ConfigFile, NonScalarValueIsAnError) {
  testing::TempDir dir;
  Config cfg;
  declare_all(cfg);
  for (const char* text : {R"({"steps": [1]})", R"({"steps": null})", R"({"steps": {"a": 1}})"}) {
    const std::string path = dir.write("v.json", text);
    Status s = cfg.load_file(path);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_CONTAINS(s.message(), "steps");
  }
  EXPECT_EQ(cfg.get_int("steps"), 500);
}

// --- load_env -------------------------------------------------------------------------------------------------------

TEST(ConfigEnv, AppliesKnownVariablesAndIgnoresOthers) {
  Config cfg;
  declare_all(cfg);
  FakeEnv env({"PATH=/usr/bin", "TIERTRAIN_STEPS=5", "TIERTRAIN_FOO=1", "HOME=/root", "TIERTRAIN_DEVICE_BUDGET=2GiB",
               "TIERTRAIN_VERBOSE=yes", "XTIERTRAIN_LR=0.9", "TIERTRAIN_NOEQUALS"});
  Status s = cfg.load_env(env.envp());
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(cfg.get_int("steps"), 5);
  EXPECT_EQ(cfg.source("steps"), KnobSource::kEnv);
  EXPECT_EQ(cfg.get_bytes("device_budget"), int64_t(2) << 30);
  EXPECT_TRUE(cfg.get_bool("verbose"));
  EXPECT_DOUBLE_EQ(cfg.get_float("lr"), 0.001);  // XTIERTRAIN_LR is not ours
  EXPECT_EQ(cfg.source("lr"), KnobSource::kDefault);
  EXPECT_EQ(find_knob(cfg, "steps").origin, "env TIERTRAIN_STEPS");
}

TEST(ConfigEnv, ValueWithEqualsSign) {
  Config cfg;
  declare_all(cfg);
  FakeEnv env({"TIERTRAIN_RUN_NAME=a=b"});
  ASSERT_TRUE(cfg.load_env(env.envp()).is_ok());
  EXPECT_EQ(cfg.get_string("run_name"), "a=b");
}

TEST(ConfigEnv, BadValueNamesTheVariable) {
  Config cfg;
  declare_all(cfg);
  FakeEnv env({"TIERTRAIN_STEPS=lots"});
  Status s = cfg.load_env(env.envp());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), "TIERTRAIN_STEPS");
  EXPECT_CONTAINS(s.message(), "'lots' is not an integer");
  EXPECT_EQ(cfg.get_int("steps"), 500);
}

TEST(ConfigEnv, NullAndEmptyEnvironment) {
  Config cfg;
  declare_all(cfg);
  EXPECT_TRUE(cfg.load_env(nullptr).is_ok());
  FakeEnv empty(std::vector<std::string>{});
  EXPECT_TRUE(cfg.load_env(empty.envp()).is_ok());
  EXPECT_EQ(cfg.get_int("steps"), 500);
}

// --- describe and to_json -------------------------------------------------------------------------------------------

TEST(ConfigDescribe, ListsEveryKnobWithItsOrigin) {
  Config cfg;
  declare_all(cfg);
  ASSERT_TRUE(cfg.set("steps", "42", KnobSource::kFlag).is_ok());
  ASSERT_TRUE(cfg.set("lr", "0.01", KnobSource::kEnv).is_ok());
  ASSERT_TRUE(cfg.set("mode", "swap", KnobSource::kFile, "file /cfg/run.json").is_ok());
  const std::string d = cfg.describe();
  for (const auto& k : cfg.knobs()) {
    EXPECT_CONTAINS(d, k.spec.name);
    EXPECT_CONTAINS(d, k.spec.help);
    EXPECT_CONTAINS(d, Config::flag_name(k.spec.name));
    EXPECT_CONTAINS(d, Config::env_name(k.spec.name));
  }
  EXPECT_CONTAINS(d, "flag --steps");
  EXPECT_CONTAINS(d, "env TIERTRAIN_LR");
  EXPECT_CONTAINS(d, "file /cfg/run.json");
  EXPECT_CONTAINS(d, "default");
  EXPECT_CONTAINS(d, "42");
  EXPECT_CONTAINS(d, "auto|device|swap|um");
  EXPECT_CONTAINS(d, "[general]");
  EXPECT_CONTAINS(d, "[optim]");
  EXPECT_CONTAINS(d, "[memory]");
  // Each knob is on its own line, with its origin; its description on the lines after, indented further and
  // wrapped at the width asked for.
  std::istringstream lines(d);
  std::string line;
  int knob_lines = 0;
  while (std::getline(lines, line)) {
    EXPECT_LE(line.size(), 100u) << line;
    if (line.rfind("  ", 0) != 0 || line.rfind("      ", 0) == 0) continue;
    ++knob_lines;
    if (line.rfind("  steps ", 0) == 0) {
      EXPECT_CONTAINS(line, "flag --steps");
    } else if (line.rfind("  lr ", 0) == 0) {
      EXPECT_CONTAINS(line, "env TIERTRAIN_LR");
    } else if (line.rfind("  verbose ", 0) == 0) {
      EXPECT_CONTAINS(line, "default");
    }
  }
  EXPECT_EQ(knob_lines, 6);
  // Descriptions wrap at the width asked for, and lose no word.
  for (const int width : {40, 60, 200}) {
    const std::string narrow_text = cfg.describe(width);
    std::istringstream narrow(narrow_text);
    std::string joined;
    for (std::string l; std::getline(narrow, l);) {
      if (l.rfind("      ", 0) != 0) continue;
      EXPECT_LE(l.size(), static_cast<size_t>(width)) << l;
      joined += l.substr(6) + " ";
    }
    for (const auto& k : cfg.knobs()) EXPECT_CONTAINS(joined, k.spec.help);
  }
}

TEST(ConfigJson, ValuesKeepTheirTypes) {
  Config cfg;
  declare_all(cfg);
  ASSERT_TRUE(cfg.set("device_budget", "3GiB", KnobSource::kFlag).is_ok());
  ASSERT_TRUE(cfg.set("verbose", "on", KnobSource::kFlag).is_ok());
  const nlohmann::json j = cfg.to_json();
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 6u);
  ASSERT_TRUE(j.contains("steps"));
  EXPECT_TRUE(j["steps"].is_number_integer());
  EXPECT_EQ(j["steps"].get<int64_t>(), 500);
  EXPECT_TRUE(j["device_budget"].is_number_integer());
  EXPECT_EQ(j["device_budget"].get<int64_t>(), int64_t(3) << 30);
  EXPECT_TRUE(j["verbose"].is_boolean());
  EXPECT_TRUE(j["verbose"].get<bool>());
  EXPECT_TRUE(j["lr"].is_number_float());
  EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 0.001);
  EXPECT_TRUE(j["mode"].is_string());
  EXPECT_EQ(j["mode"].get<std::string>(), "auto");
  EXPECT_TRUE(j["run_name"].is_string());
}

TEST(ConfigJson, RoundTripsThroughLoadFile) {
  testing::TempDir dir;
  Config a;
  declare_all(a);
  ASSERT_TRUE(a.set("steps", "77", KnobSource::kFlag).is_ok());
  ASSERT_TRUE(a.set("lr", "0.0625", KnobSource::kFlag).is_ok());
  ASSERT_TRUE(a.set("device_budget", "5MiB", KnobSource::kFlag).is_ok());
  ASSERT_TRUE(a.set("mode", "um", KnobSource::kFlag).is_ok());
  const std::string path = dir.write("dump.json", a.to_json().dump());
  Config b;
  declare_all(b);
  Status s = b.load_file(path);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(b.to_json(), a.to_json());
}

}  // namespace
}  // namespace tt
