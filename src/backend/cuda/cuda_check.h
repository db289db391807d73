// backend/cuda/cuda_check: the CUDA and cuBLAS checks, built on core/check.h's one generic macro.
//
//   TT_CUDA_CHECK(cudaMalloc(&p, n));          // returns a Status naming the call on failure
//   my_kernel<<<grid, block, 0, stream>>>(...);
//   TT_CUDA_CHECK_LAUNCH();                    // aborts with the kernel's launch error (launches are checked always)
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/check.h"

namespace tt::cuda {
inline const char* cublas_status_string(cublasStatus_t s) { return cublasGetStatusString(s); }
}  // namespace tt::cuda

#define TT_CUDA_CHECK(call) TT_EXT_CHECK(call, cudaSuccess, cudaGetErrorString, "CUDA")
#define TT_CUBLAS_CHECK(call) TT_EXT_CHECK(call, CUBLAS_STATUS_SUCCESS, ::tt::cuda::cublas_status_string, "cuBLAS")

// For calls inside enqueue paths that cannot return a Status (the Backend op interface): a failure here is a broken
// invariant (bad launch configuration, lost device), so it aborts with the call and the error.
#define TT_CUDA_ASSERT(call)                                                                          \
  do {                                                                                                \
    cudaError_t tt_rc_ = (call);                                                                      \
    TT_CHECK(tt_rc_ == cudaSuccess, "%s failed: %s", #call, cudaGetErrorString(tt_rc_));              \
  } while (0)
#define TT_CUBLAS_ASSERT(call)                                                                        \
  do {                                                                                                \
    cublasStatus_t tt_rc_ = (call);                                                                   \
    TT_CHECK(tt_rc_ == CUBLAS_STATUS_SUCCESS, "%s failed: %s", #call, cublasGetStatusString(tt_rc_)); \
  } while (0)
#define TT_CUDA_CHECK_LAUNCH() TT_CUDA_ASSERT(cudaGetLastError())
