#include "core/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/env.h"

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/log.h"
#include "core/units.h"

namespace tt {
namespace {

const char* type_name(KnobType t) {
  switch (t) {
    case KnobType::kBool: return "bool";
    case KnobType::kInt: return "int";
    case KnobType::kFloat: return "float";
    case KnobType::kString: return "string";
    case KnobType::kBytes: return "bytes";
    case KnobType::kChoice: return "choice";
  }
  return "?";
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n\r");
  return s.substr(b, e - b + 1);
}

std::string range_text(const KnobSpec& spec) {
  auto num = [&](double v) {
    if (spec.type == KnobType::kFloat) return str_format("%g", v);
    return str_format("%lld", static_cast<long long>(v));
  };
  bool has_min = std::isfinite(spec.min), has_max = std::isfinite(spec.max);
  if (has_min && has_max) return "[" + num(spec.min) + ", " + num(spec.max) + "]";
  if (has_min) return ">= " + num(spec.min);
  if (has_max) return "<= " + num(spec.max);
  return "any";
}

}  // namespace

std::string Config::flag_name(const std::string& name) {
  std::string f = "--" + name;
  for (char& c : f)
    if (c == '_') c = '-';
  return f;
}

std::string Config::env_name(const std::string& name) {
  std::string e = "TIERTRAIN_";
  for (char c : name) e += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return e;
}

void Config::declare(KnobSpec spec) {
  TT_CHECK(!has(spec.name), "knob '%s' declared twice", spec.name.c_str());
  if (spec.type == KnobType::kBool && spec.implicit_value.empty()) spec.implicit_value = "true";
  Knob k;
  k.spec = std::move(spec);
  const std::string name = k.spec.name;
  const std::string def = k.spec.default_value;
  index_[name] = knobs_.size();
  knobs_.push_back(std::move(k));
  Status s = set(name, def, KnobSource::kDefault, "default");
  TT_CHECK(s.is_ok(), "default of knob '%s' is invalid: %s", name.c_str(), s.to_string().c_str());
}

Status Config::set(const std::string& name, const std::string& raw_text, KnobSource source,
                   const std::string& origin_in) {
  auto it = index_.find(name);
  TT_RETURN_IF(it == index_.end(), kInvalidArgument, "unknown option '%s'", name.c_str());
  Knob& k = knobs_[it->second];
  const KnobSpec& spec = k.spec;
  const std::string origin = origin_in.empty() ? (source == KnobSource::kFlag  ? "flag " + flag_name(name)
                                                  : source == KnobSource::kEnv ? "env " + env_name(name)
                                                                               : std::string("default"))
                                               : origin_in;
  const std::string text = trim(raw_text);
  // Where the value came from, as the user would write it: "--steps", "TIERTRAIN_STEPS", "config.json: steps".
  const std::string where = source == KnobSource::kFlag ? flag_name(name)
                            : source == KnobSource::kEnv ? env_name(name)
                            : source == KnobSource::kFile ? origin + ": key '" + name + "'"
                                                          : "default of " + name;
  std::variant<bool, int64_t, double, std::string> value;
  auto check_range = [&](double v) -> Status {
    if (v < spec.min || v > spec.max)
      return make_status(StatusCode::kInvalidArgument, "%s: %s is out of range (allowed: %s)", where.c_str(),
                         text.c_str(), range_text(spec).c_str());
    return Status::ok();
  };
  switch (spec.type) {
    case KnobType::kBool: {
      std::string t;
      for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (t == "1" || t == "true" || t == "yes" || t == "on") value = true;
      else if (t == "0" || t == "false" || t == "no" || t == "off") value = false;
      else
        return make_status(StatusCode::kInvalidArgument, "%s: '%s' is not a boolean (true/false, 1/0, yes/no, on/off)",
                           where.c_str(), text.c_str());
      break;
    }
    case KnobType::kInt: {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || end == nullptr || *end != '\0' || errno == ERANGE)
        return make_status(StatusCode::kInvalidArgument, "%s: '%s' is not an integer", where.c_str(), text.c_str());
      TT_TRY(check_range(static_cast<double>(v)));
      value = static_cast<int64_t>(v);
      break;
    }
    case KnobType::kFloat: {
      errno = 0;
      char* end = nullptr;
      double v = std::strtod(text.c_str(), &end);
      if (text.empty() || end == nullptr || *end != '\0' || errno == ERANGE || !std::isfinite(v))
        return make_status(StatusCode::kInvalidArgument, "%s: '%s' is not a number", where.c_str(), text.c_str());
      TT_TRY(check_range(v));
      value = v;
      break;
    }
    case KnobType::kBytes: {
      Result<int64_t> v = parse_bytes(text);
      if (!v.is_ok()) return make_status(StatusCode::kInvalidArgument, "%s: %s", where.c_str(),
                                         v.status().message().c_str());
      TT_TRY(check_range(static_cast<double>(v.value())));
      value = v.value();
      break;
    }
    case KnobType::kChoice: {
      // Any case ("info" for INFO, "BF16" for bf16); the value kept is the choice as declared.
      const std::string* match = nullptr;
      for (const auto& c : spec.choices)
        if (c.size() == text.size() && std::equal(c.begin(), c.end(), text.begin(), [](char x, char y) {
              return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
            }))
          match = &c;
      if (match == nullptr) {
        std::string all;
        for (const auto& c : spec.choices) all += (all.empty() ? "" : ", ") + c;
        return make_status(StatusCode::kInvalidArgument, "%s: '%s' is not one of %s", where.c_str(), text.c_str(),
                           all.c_str());
      }
      value = *match;
      break;
    }
    case KnobType::kString: value = text; break;
  }
  if (spec.validate) {
    Status s = spec.validate(text);
    if (!s.is_ok()) return make_status(StatusCode::kInvalidArgument, "%s: %s", where.c_str(), s.message().c_str());
  }
  // A value from a lower-priority source never replaces one from a higher (default < file < env < flag), whatever
  // the order in which sources are applied; it was still parsed above, so a bad value is reported either way.
  if (source < k.source) return Status::ok();
  k.value = std::move(value);
  k.text = text;
  k.source = source;
  k.origin = origin;
  return Status::ok();
}

Result<nlohmann::json> parse_json_unique_keys(const std::string& text, const std::string& what) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> open;  // the keys of each object being parsed, innermost last
  std::string repeated;
  const nlohmann::json::parser_callback_t seen = [&](int /*depth*/, Event e, nlohmann::json& parsed) {
    if (e == Event::object_start) {
      open.emplace_back();
    } else if (e == Event::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (e == Event::key && !open.empty() && parsed.is_string()) {
      if (!open.back().insert(parsed.get<std::string>()).second && repeated.empty())
        repeated = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, seen);
  } catch (const nlohmann::json::exception& e) {
    return make_status(StatusCode::kInvalidArgument, "%s is not valid JSON: %s", what.c_str(), e.what());
  }
  TT_RETURN_IF(!repeated.empty(), kInvalidArgument,
               "%s: key \"%s\" appears twice in one object; name each key once", what.c_str(), repeated.c_str());
  return j;
}

Status Config::load_file(const std::string& path) {
  TT_TRY(require_regular_file(path, "config file"));
  std::ifstream in(path);
  TT_RETURN_IF(!in, kNotFound, "cannot open config file '%s': %s", path.c_str(), std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  TT_ASSIGN_OR_RETURN(nlohmann::json j, parse_json_unique_keys(text.str(), "config file '" + path + "'"));
  TT_RETURN_IF(!j.is_object(), kInvalidArgument, "config file '%s' must hold a JSON object {\"knob\": value}",
               path.c_str());
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string name = it.key();
    for (char& c : name)
      if (c == '-') c = '_';
    TT_RETURN_IF(name == "config", kInvalidArgument,
                 "config file '%s': a config file cannot name another (key \"config\"); give one --config", path.c_str());
    TT_RETURN_IF(!has(name), kInvalidArgument, "config file '%s': unknown knob '%s' (tiertrain --print-config lists them)",
                 path.c_str(), it.key().c_str());
    const nlohmann::json& v = it.value();
    std::string text;
    if (v.is_string()) text = v.get<std::string>();
    else if (v.is_boolean()) text = v.get<bool>() ? "true" : "false";
    else if (v.is_number_integer()) text = std::to_string(v.get<long long>());
    else if (v.is_number()) text = str_format("%.17g", v.get<double>());
    else
      return make_status(StatusCode::kInvalidArgument, "config file '%s': knob '%s' must be a string, number or bool",
                         path.c_str(), name.c_str());
    TT_TRY(set(name, text, KnobSource::kFile, "file " + path));
  }
  return Status::ok();
}

Status Config::load_env(char** envp) {
  if (envp == nullptr) return Status::ok();
  for (char** e = envp; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr || std::strncmp(*e, "TIERTRAIN_", 10) != 0) continue;
    std::string var(*e, static_cast<size_t>(eq - *e));
    std::string name;
    for (char c : var.substr(10)) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!has(name) && env::find(var) != nullptr) continue;  // declared in core/env.cc: not a knob
    if (!has(name)) {
      TT_LOG(WARN, ALL, "ignoring unknown environment variable %s", var.c_str());
      continue;
    }
    TT_TRY(set(name, eq + 1, KnobSource::kEnv, "env " + var));
  }
  return Status::ok();
}

const Knob& Config::knob(const std::string& name) const {
  auto it = index_.find(name);
  TT_CHECK(it != index_.end(), "knob '%s' was never declared", name.c_str());
  return knobs_[it->second];
}

bool Config::get_bool(const std::string& name) const { return std::get<bool>(knob(name).value); }
int64_t Config::get_int(const std::string& name) const { return std::get<int64_t>(knob(name).value); }
double Config::get_float(const std::string& name) const { return std::get<double>(knob(name).value); }
int64_t Config::get_bytes(const std::string& name) const { return std::get<int64_t>(knob(name).value); }
const std::string& Config::get_string(const std::string& name) const {
  return std::get<std::string>(knob(name).value);
}

std::string wrap_text(const std::string& text, const std::string& indent, int width) {
  const size_t room = static_cast<size_t>(std::max(20, width - static_cast<int>(indent.size())));
  std::string out, line;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    if (!line.empty() && line.size() + 1 + w.size() > room) {
      out += indent + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  if (!line.empty()) out += indent + line + "\n";
  return out;
}

std::string Config::describe(int width) const {
  std::map<std::string, std::vector<const Knob*>> groups;
  std::vector<std::string> order;
  size_t value_width = 8, name_width = 22;
  for (const auto& k : knobs_) {
    name_width = std::max(name_width, k.spec.name.size());
    if (!groups.count(k.spec.group)) order.push_back(k.spec.group);
    groups[k.spec.group].push_back(&k);
    value_width = std::max(value_width, std::min<size_t>(40, k.text.empty() ? 2 : k.text.size()));
  }
  std::ostringstream os;
  for (const auto& g : order) {
    os << "[" << g << "]\n";
    for (const Knob* k : groups[g]) {
      const std::string value = k->text.empty() ? "\"\"" : k->text;
      os << str_format("  %-*s %-*s %s\n", static_cast<int>(name_width), k->spec.name.c_str(),
                       static_cast<int>(value_width), value.c_str(), k->origin.c_str());
      std::string about = k->spec.help + " (" + type_name(k->spec.type);
      if (k->spec.type == KnobType::kChoice) {
        std::string all;
        for (const auto& c : k->spec.choices) all += (all.empty() ? "" : "|") + c;
        about += ": " + all;
      } else if (k->spec.type == KnobType::kInt || k->spec.type == KnobType::kFloat ||
                 k->spec.type == KnobType::kBytes) {
        if (std::isfinite(k->spec.min) || std::isfinite(k->spec.max)) about += " " + range_text(k->spec);
      }
      about += "; " + flag_name(k->spec.name) + ", " + env_name(k->spec.name) + ")";
      os << wrap_text(about, "      ", width);
    }
  }
  return os.str();
}

nlohmann::json Config::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& k : knobs_) {
    std::visit([&](const auto& v) { j[k.spec.name] = v; }, k.value);
  }
  return j;
}

}  // namespace tt
