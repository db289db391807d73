#include "cli/knob_flags.h"

#include <cstdlib>

#include <sys/ioctl.h>
#include <unistd.h>

#include "core/env.h"

namespace tt::cli {

namespace {

const char* type_hint(KnobType t) {
  switch (t) {
    case KnobType::kBool: return "BOOL";
    case KnobType::kInt: return "INT";
    case KnobType::kFloat: return "FLOAT";
    case KnobType::kBytes: return "BYTES";
    case KnobType::kChoice: return "CHOICE";  // shown as {a,b,c} instead, below
    case KnobType::kString: return "TEXT";
  }
  return "VALUE";
}

}  // namespace

void KnobFlags::add_to(CLI::App* sub, const Config& cfg) {
  for (const Knob& k : cfg.knobs()) {
    CLI::Option* o = sub->add_option(Config::flag_name(k.spec.name), raw_[k.spec.name],
                                     k.spec.help + " [default: " +
                                         (k.spec.default_value.empty() ? "none" : k.spec.default_value) + "]");
    if (k.spec.type == KnobType::kChoice) {
      std::string names;  // the choices themselves, as CLI11 shows its own IsMember checks
      for (const std::string& c : k.spec.choices) names += (names.empty() ? "" : ",") + c;
      o->type_name("{" + names + "}");
    } else {
      o->type_name(type_hint(k.spec.type));
    }
    o->group(k.spec.group);
    if (k.spec.implicit_value.empty()) {
      o->expected(1);
    } else {
      o->expected(0, 1);
    }
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    opts_[k.spec.name].push_back(o);
  }
}

size_t KnobFlags::given(const std::string& name) const {
  size_t n = 0;
  if (auto it = opts_.find(name); it != opts_.end())
    for (CLI::Option* o : it->second) n += o->count();
  return n;
}

Status KnobFlags::resolve(Config& cfg) {
  std::string config_file;
  if (given("config") > 0 && !raw_["config"].empty()) config_file = raw_["config"].back();
  else config_file = env::get_or("TIERTRAIN_CONFIG", "");
  if (!config_file.empty()) TT_TRY(cfg.load_file(config_file));
  TT_TRY(cfg.load_env(env::environment()));
  for (const auto& [name, unused] : opts_) {
    if (given(name) == 0) continue;
    const KnobSpec& spec = cfg.spec(name);
    const std::vector<std::string>& values = raw_[name];
    // A bare `--resume` reaches us as no value or an empty one: it means the implicit value.
    const bool bare = values.empty() || (values.back().empty() && !spec.implicit_value.empty());
    const std::string text = bare ? spec.implicit_value : values.back();
    TT_TRY(cfg.set(name, text, KnobSource::kFlag));
  }
  return Status::ok();
}

std::string describe_config(const Config& cfg) {
  int width = 100;
  winsize ws{};
  if (isatty(1) && ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) width = ws.ws_col;
  else if (const char* c = env::get("COLUMNS"); c != nullptr && std::atoi(c) >= 40) width = std::atoi(c);
  return cfg.describe(width) + "\n" + env::describe(width);
}

}  // namespace tt::cli
