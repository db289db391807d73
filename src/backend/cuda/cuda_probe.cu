#include "backend/cuda/cuda_probe.h"

#include <cuda_runtime.h>

#include "core/device_env.h"

namespace tt::cuda {

GpuInfo probe() {
  GpuInfo info;
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    info.error = cudaGetErrorString(rc);
    cudaGetLastError();  // clear the sticky-free error so later calls are not confused
    return info;
  }
  info.count = count;
  if (count > 0) {
    auto device = process_device(count);  // (core/device_env.h)
    if (!device.is_ok()) {
      info.error = device.status().message();
      info.count = 0;
      return info;
    }
    info.device = device.value();
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, info.device) == cudaSuccess) {
      info.name = prop.name;
      info.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
      info.cc_major = prop.major;
      info.cc_minor = prop.minor;
    }
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(info.device) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      info.free_bytes = static_cast<int64_t>(free_b);
  }
  return info;
}

}  // namespace tt::cuda
