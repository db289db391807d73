#include "core/log.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unistd.h>

namespace tt::log {
namespace {

Settings g_settings;
std::mutex g_write_mutex;

struct SubsysName {
  const char* name;
  uint32_t bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"MEM", kMem},   {"SWAP", kSwap}, {"UM", kUm},     {"PERF", kPerf}, {"COMM", kComm},
    {"MESH", kMesh}, {"DATA", kData}, {"EXEC", kExec}, {"CKPT", kCkpt}, {"ALL", kAll},
};

const char* subsys_name(uint32_t bit) {
  for (const auto& s : kSubsysNames)
    if (s.bit == bit) return s.name;
  return "?";
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<Level> parse_level(const std::string& text) {
  std::string t = upper(text);
  if (t == "NONE") return Level::kNone;
  if (t == "WARN" || t.empty()) return Level::kWarn;
  if (t == "INFO") return Level::kInfo;
  if (t == "TRACE") return Level::kTrace;
  return make_status(StatusCode::kInvalidArgument, "log level '%s' is not one of NONE, WARN, INFO, TRACE",
                     text.c_str());
}

Result<uint32_t> parse_subsys(const std::string& text) {
  std::string t = upper(text);
  bool invert = !t.empty() && t[0] == '^';
  if (invert) t.erase(0, 1);
  if (t.empty()) return static_cast<uint32_t>(kAll);
  uint32_t mask = 0;
  size_t start = 0;
  while (start <= t.size()) {
    size_t comma = t.find(',', start);
    std::string item = t.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    bool found = false;
    for (const auto& s : kSubsysNames) {
      if (item == s.name) {
        mask |= s.bit;
        found = true;
      }
    }
    if (!found)
      return make_status(StatusCode::kInvalidArgument,
                         "debug subsystem '%s' is not one of MEM,SWAP,UM,PERF,COMM,MESH,DATA,EXEC,CKPT,ALL",
                         item.c_str());
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return invert ? ~mask : mask;
}

void configure(Settings settings) { g_settings = settings; }
void configure(const std::string& level, const std::string& subsys) {
  Settings s;
  if (auto l = parse_level(level); !level.empty() && l.is_ok()) s.level = l.value();
  if (auto m = parse_subsys(subsys); !subsys.empty() && m.is_ok()) s.subsys = m.value();
  configure(s);
}
const Settings& settings() { return g_settings; }

void write(Level level, uint32_t subsys, const char* file, int line, const char* fmt, ...) {
  static const auto t0 = std::chrono::steady_clock::now();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  va_list args;
  va_start(args, fmt);
  std::string msg = str_vformat(fmt, args);
  va_end(args);
  const char* lvl = level == Level::kWarn ? "WARN" : level == Level::kInfo ? "INFO" : "TRACE";
  const char* base = std::strrchr(file, '/');
  std::lock_guard<std::mutex> lock(g_write_mutex);
  std::fprintf(stderr, "[tiertrain %d %9.3fs] %s %s %s:%d %s\n", static_cast<int>(getpid()), secs, lvl,
               subsys_name(subsys), base ? base + 1 : file, line, msg.c_str());
}

}  // namespace tt::log
