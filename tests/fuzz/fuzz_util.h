// Shared by the libFuzzer targets (tests/fuzz/README.md): the readers under test take paths, so each input is written
// to a file in a scratch folder of this process, removed at exit (with the static object). Logging is off (a warning per input would drown the
// fuzzer's own output).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/status.h"

namespace tt::fuzz {

class Scratch {
 public:
  static Scratch& get() {
    static Scratch s;
    return s;
  }
  const std::string& dir() const { return dir_; }
  // Writes `bytes` to dir()/name (creating parent folders) and returns the path.
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::filesystem::path p = std::filesystem::path(dir_) / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }
  // An empty folder dir()/name (its old contents removed).
  std::string fresh_folder(const std::string& name) const {
    const std::filesystem::path p = std::filesystem::path(dir_) / name;
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
    std::filesystem::create_directories(p);
    return p.string();
  }

 private:
  Scratch() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tiertrain-fuzz-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    dir_ = tmpl;
    log::configure(log::Settings{.level = log::Level::kNone, .subsys = 0});
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
};

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The input as JSON, or a discarded value when it does not parse (no exception).
inline nlohmann::json parse_json(const uint8_t* data, size_t size) {
  return nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
}

// With TT_FUZZ_VERBOSE=1 in the environment, says whether the input was accepted and if not why (to check that a
// seed reaches the code behind the reader: `TT_FUZZ_VERBOSE=1 build/fuzz/tests/fuzz/fuzz_plan tests/fuzz/corpus/plan/*`).
inline bool verbose() {
  static const bool v = std::getenv("TT_FUZZ_VERBOSE") != nullptr;
  return v;
}
template <typename R>
bool accepted(const R& r) {
  if (verbose()) std::fprintf(stderr, "tt-fuzz: %s\n", r.is_ok() ? "accepted" : r.status().to_string().c_str());
  return r.is_ok();
}
inline bool accepted(const Status& s) {
  if (verbose()) std::fprintf(stderr, "tt-fuzz: %s\n", s.is_ok() ? "accepted" : s.to_string().c_str());
  return s.is_ok();
}

// A property every accepted input must have; a violation is a finding like a crash.
#define TT_FUZZ_REQUIRE(cond)                                                     \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

}  // namespace tt::fuzz
