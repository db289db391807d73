// backend/cuda/cuda_backend: one GPU as a Backend: three CUDA streams (compute, h2d, d2h), CUDA events, a device pool
// over one cudaMalloc of the device budget (nothing else is allocated on the device afterwards: cuBLAS's workspace and
// the kernels' scratch come out of the pool), cuBLAS GEMMs and the kernels of kernels.cuh. fp32 throughout.
//
//   TT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, cuda::create_backend({.device = 0, .device_budget = 8 << 30}));
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace tt::cuda {

// Device bytes the backend takes from its own budget for cuBLAS's workspace and the kernels' scratch.
constexpr int64_t kCublasWorkspaceBytes = int64_t(32) << 20;
constexpr int64_t kScratchBytes = int64_t(128) << 20;
constexpr int64_t kReservedBytes = kCublasWorkspaceBytes + kScratchBytes;
// Left free on the GPU when the budget is chosen automatically (CUDA context, cuBLAS handles, other processes).
constexpr int64_t kAutoBudgetHeadroomBytes = int64_t(2) << 30;

struct CudaBackendOptions {
  int device = 0;
  int64_t device_budget = 0;  // bytes; 0: the GPU's free memory minus kAutoBudgetHeadroomBytes
};

Result<std::unique_ptr<Backend>> create_backend(const CudaBackendOptions& options);

}  // namespace tt::cuda
