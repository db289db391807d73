// backend/registry: the backends of this build by name ("cpu", "cuda"): what each can say before it exists (is
// there a device, how much memory is free, what the backend keeps for itself in the budget) and how to create one.
// The one place that knows which backends were compiled in; callers ask by name.
//
//   const BackendProbe p = probe_backend("cuda");          // p.available, p.free_bytes, p.error
//   TT_ASSIGN_OR_RETURN(auto be, create_backend("cuda", {.device_budget = budget, .scratch_bytes = s}));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/attention_options.h"
#include "backend/backend.h"
#include "backend/gemm_options.h"

namespace tt {

struct BackendProbe {
  std::string name;          // "cpu", "cuda"
  bool built = false;        // compiled into this build
  bool available = false;    // built, and a device is there
  std::string device;        // "cuda:0 NVIDIA H200", "cpu"
  std::string error;         // why it is not available
  bool device_memory = false;  // has memory of its own apart from the host's (a GPU)
  int64_t total_bytes = 0;   // device memory (host RAM for the CPU)
  int64_t free_bytes = 0;    // of it free now (the CPU: the RAM available without swapping, MemAvailable)
  // Memory to leave free on the device when the budget is automatic (other processes, the CUDA context).
  int64_t auto_budget_headroom = 0;
};

struct BackendOptions {
  int64_t device_budget = 0;   // bytes, > 0
  int64_t scratch_bytes = 0;   // backend scratch within the budget (reserved_bytes below); 0: the backend's minimum
  int device = -1;             // a GPU's index; -1: this process's (core/device_env.h: TIERTRAIN_DEVICE, local rank)
  int threads = 0;             // CPU: OpenMP/OpenBLAS threads; a GPU: the CPU optimizer's; 0: all cores (a GPU: all but one)
  int64_t copy_delay_us = 0;   // CPU: simulated link, slow kernels, slow host work (tests)
  int64_t compute_delay_us = 0;
  int64_t host_delay_us = 0;
  bool lock_host_memory = false;  // CPU: mlock the host pool
  int host_numa_node = -1;
  AttentionOptions attention{};            // a GPU: cuDNN or our attention kernels (attention_options.h)
  GemmImpl gemm = GemmImpl::kCublas;       // a GPU: the bf16 GEMMs without an epilogue (gemm_options.h)
  int64_t xent_blocks = 0;                 // a GPU: the fused cross-entropy's grid (0: one block a row)
  int64_t attention_workspace_bytes = 0;   // cuDNN's or f32 GEMMs' attention workspace in the budget (BackendReserve)
  bool record_um_calls = false;            // tests: um() keeps every call (memory::RecordingUmDriver)
  // A GPU: managed prefetches to the host in pieces of this size (0: whole ranges).
  int64_t um_host_piece_bytes = memory::kDefaultUmHostPieceBytes;
};

// Backends compiled in, in order of preference for "auto".
std::vector<std::string> backend_names();
BackendProbe probe_backend(const std::string& name);
// "auto": the first available backend in preference order (a GPU when there is one, else the CPU).
Result<std::string> resolve_backend_name(const std::string& name);
// Device bytes the backend takes out of the budget for itself for a step of this attention shape (the CUDA backend's
// cuBLAS workspace, kernel scratch and cuDNN's attention workspace); 0 for the CPU. scratch and attention workspace:
// what to pass as BackendOptions::scratch_bytes and ::attention_workspace_bytes.
struct BackendReserve {
  int64_t scratch_bytes = 0;
  int64_t attention_workspace_bytes = 0;
  int64_t reserved_bytes = 0;  // everything, the two above included
};
BackendReserve backend_reserve(const std::string& name, const AttentionShape& shape,
                               const AttentionOptions& attention = {});
Result<std::unique_ptr<Backend>> create_backend(const std::string& name, const BackendOptions& options);

}  // namespace tt
