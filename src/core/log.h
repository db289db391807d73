// core/log: leveled, per-subsystem logging to stderr, in the manner of NCCL_DEBUG / NCCL_DEBUG_SUBSYS.
//
// Level and subsystems come from the config knobs `debug` (TIERTRAIN_DEBUG=WARN|INFO|TRACE) and `debug_subsys`
// (TIERTRAIN_DEBUG_SUBSYS=MEM,SWAP,UM,PERF,COMM,MESH,DATA,EXEC,CKPT or ALL). The level is checked before the message
// is formatted, so a disabled TRACE line costs one branch.
//
//   TT_LOG(INFO, DATA, "read %zu bytes from %s", n, path.c_str());
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace tt::log {

enum class Level : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

enum Subsys : uint32_t {
  kMem = 1u << 0,
  kSwap = 1u << 1,
  kUm = 1u << 2,
  kPerf = 1u << 3,
  kComm = 1u << 4,
  kMesh = 1u << 5,
  kData = 1u << 6,
  kExec = 1u << 7,
  kCkpt = 1u << 8,
  kAll = 0xffffffffu,
};

struct Settings {
  Level level = Level::kWarn;
  uint32_t subsys = kAll;
};

// Parses "WARN"/"INFO"/"TRACE"/"NONE" and "MEM,DATA" / "ALL" / "^MEM" (all but MEM).
Result<Level> parse_level(const std::string& text);
Result<uint32_t> parse_subsys(const std::string& text);

void configure(Settings settings);
// From the texts of the `debug` and `debug_subsys` knobs (TIERTRAIN_DEBUG, TIERTRAIN_DEBUG_SUBSYS); a text that does
// not parse (or is empty) keeps the default of Settings.
void configure(const std::string& level, const std::string& subsys);
const Settings& settings();

inline bool enabled(Level level, uint32_t subsys) {
  const Settings& s = settings();
  return static_cast<int>(level) <= static_cast<int>(s.level) && (s.subsys & subsys) != 0;
}

void write(Level level, uint32_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

}  // namespace tt::log

#define TT_LOG_LEVEL_WARN ::tt::log::Level::kWarn
#define TT_LOG_LEVEL_INFO ::tt::log::Level::kInfo
#define TT_LOG_LEVEL_TRACE ::tt::log::Level::kTrace
#define TT_LOG_SUBSYS_MEM ::tt::log::kMem
#define TT_LOG_SUBSYS_SWAP ::tt::log::kSwap
#define TT_LOG_SUBSYS_UM ::tt::log::kUm
#define TT_LOG_SUBSYS_PERF ::tt::log::kPerf
#define TT_LOG_SUBSYS_COMM ::tt::log::kComm
#define TT_LOG_SUBSYS_MESH ::tt::log::kMesh
#define TT_LOG_SUBSYS_DATA ::tt::log::kData
#define TT_LOG_SUBSYS_EXEC ::tt::log::kExec
#define TT_LOG_SUBSYS_CKPT ::tt::log::kCkpt
#define TT_LOG_SUBSYS_ALL ::tt::log::kAll

#define TT_LOG(level, subsys, ...)                                                                   \
  do {                                                                                               \
    if (::tt::log::enabled(TT_LOG_LEVEL_##level, TT_LOG_SUBSYS_##subsys))                            \
      ::tt::log::write(TT_LOG_LEVEL_##level, TT_LOG_SUBSYS_##subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
