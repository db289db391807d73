// backend/cuda/cuda_backend: one GPU as a Backend: three CUDA streams (compute, h2d, d2h), CUDA events, a device pool
// over one cudaMalloc of the device budget (nothing else is allocated on the device afterwards: cuBLAS's workspace and
// the kernels' scratch come out of the pool), cuBLAS GEMMs and the kernels of kernels.cuh, in fp32 or bf16
// activations with fp32 master tensors.
//
//   TT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, cuda::create_backend({.device = 0, .device_budget = 8 << 30}));
#pragma once

#include <cstdint>
#include <memory>

#include "backend/attention_options.h"
#include "backend/backend.h"
#include "backend/gemm_options.h"
#include "backend/cuda/um.h"

namespace tt::cuda {

// Device bytes the backend takes from its own budget for cuBLAS's workspace and the kernels' scratch.
constexpr int64_t kCublasWorkspaceBytes = int64_t(32) << 20;
constexpr int64_t kMinScratchBytes = int64_t(128) << 20;
// Scratch a model needs: at least kMinScratchBytes, and room for the attention backward's row sums (one float per
// token and head) and for sorting B*T token ids (embedding backward).
int64_t scratch_bytes_for(int64_t tokens_per_step, int heads);
// The attention workspace for this shape: in bf16 cuDNN's (Note [cudnn workspace] in cudnn_sdpa.h), 0 unless the
// options allow cuDNN, the shape is one it takes (head size 64 or 128) and the library loads; in f32 the GEMMs' (Note
// [f32 attention by GEMMs] in attention_gemm.cu), at most options.workspace_cap.
int64_t attention_workspace_for(const AttentionShape& shape, const AttentionOptions& options);
// The scratch of sum_squares_on, apart from the compute stream's (Backend::sum_squares_on).
constexpr int64_t kSideScratchBytes = int64_t(64) << 10;
// cuBLAS workspace plus scratch.
inline int64_t reserved_bytes(int64_t scratch_bytes) { return kCublasWorkspaceBytes + kSideScratchBytes + scratch_bytes; }
// Left free on the GPU when the budget is chosen automatically (CUDA context, cuBLAS handles, other processes).
constexpr int64_t kAutoBudgetHeadroomBytes = int64_t(2) << 30;

struct CudaBackendOptions {
  int device = 0;
  int64_t device_budget = 0;  // bytes; 0: the GPU's free memory minus kAutoBudgetHeadroomBytes
  int64_t scratch_bytes = kMinScratchBytes;  // from scratch_bytes_for()
  int host_numa_node = -1;  // the host pool's node; -1: the GPU's own (from sysfs)
  int host_threads = 1;     // Backend::host_threads (host::optimizer_threads)
  AttentionOptions attention{};
  GemmImpl gemm = GemmImpl::kCublas;      // the bf16 GEMMs without an epilogue (gemm_options.h)
  int64_t xent_blocks = 0;  // the fused cross-entropy's grid (Note [cross-entropy rows in flight]; 0: one block a row)
  int64_t attention_workspace_bytes = 0;  // from attention_workspace_for(); 0: neither cuDNN nor f32 GEMMs
  bool record_um_calls = false;           // um() keeps every call (memory::RecordingUmDriver)
  int64_t um_host_piece_bytes = memory::kDefaultUmHostPieceBytes;  // Note [prefetches to the host in pieces] (um.h)
};

Result<std::unique_ptr<Backend>> create_backend(const CudaBackendOptions& options);

}  // namespace tt::cuda
