// backend/cuda/cuda_probe: what GPUs this process can see (for --backend auto and for sizing the automatic budget),
// without creating a backend. Compiled only when TIERTRAIN_WITH_CUDA found a toolkit.
#pragma once

#include <cstdint>
#include <string>

namespace tt::cuda {

struct GpuInfo {
  int count = 0;            // 0 when no driver or no device
  int device = 0;           // this process's (core/device_env.h), which the rest describes
  std::string name;
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
  int cc_major = 0, cc_minor = 0;
  std::string error;        // why count is 0, when the runtime said so
};

GpuInfo probe();

}  // namespace tt::cuda
