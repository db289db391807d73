// core/device: which device a tensor or stream belongs to.
#pragma once

#include <string>

namespace tt {

enum class DeviceKind : int { kCpu = 0, kCuda = 1 };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  bool operator==(const Device&) const = default;
  std::string to_string() const { return (kind == DeviceKind::kCpu ? "cpu:" : "cuda:") + std::to_string(index); }
};

}  // namespace tt
