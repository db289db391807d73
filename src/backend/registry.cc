#include "backend/registry.h"

#include "backend/cpu/cpu_backend.h"
#include "core/units.h"
#include "host/adamw.h"
#ifdef TIERTRAIN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_probe.h"
#endif

namespace tt {

std::vector<std::string> backend_names() {
#ifdef TIERTRAIN_HAVE_CUDA
  return {"cuda", "cpu"};
#else
  return {"cpu"};
#endif
}

BackendProbe probe_backend(const std::string& name) {
  BackendProbe p;
  p.name = name;
  if (name == "cpu") {
    p.built = p.available = true;
    p.device = "cpu";
    p.total_bytes = cpu::physical_memory_bytes();
    p.free_bytes = cpu::available_memory_bytes();
    return p;
  }
  if (name == "cuda") {
#ifdef TIERTRAIN_HAVE_CUDA
    p.built = true;
    p.device_memory = true;
    p.auto_budget_headroom = cuda::kAutoBudgetHeadroomBytes;
    const cuda::GpuInfo gpu = cuda::probe();
    p.available = gpu.count > 0;
    p.error = gpu.count > 0 ? "" : gpu.error.empty() ? "0 devices" : gpu.error;
    p.device = str_format("cuda:%d %s", gpu.device, gpu.name.c_str());
    p.total_bytes = gpu.total_bytes;
    p.free_bytes = gpu.free_bytes;
#else
    p.error = "this build has no CUDA backend (configure with a CUDA toolkit, TIERTRAIN_WITH_CUDA)";
#endif
    return p;
  }
  p.error = "unknown backend '" + name + "'";
  return p;
}

Result<std::string> resolve_backend_name(const std::string& name) {
  std::string built;
  for (const std::string& n : backend_names()) built += (built.empty() ? "" : ", ") + n;
  if (name == "auto") {
    for (const std::string& n : backend_names())
      if (probe_backend(n).available) return n;
    return make_status(StatusCode::kFailedPrecondition, "no backend is available");
  }
  const BackendProbe p = probe_backend(name);
  TT_RETURN_IF(!p.built && p.error.rfind("unknown", 0) == 0, kInvalidArgument, "--backend %s: %s (built: %s)",
               name.c_str(), p.error.c_str(), built.c_str());
  TT_RETURN_IF(!p.built, kFailedPrecondition, "--backend %s: %s", name.c_str(), p.error.c_str());
  if (!p.available) {
    // Issue 24: the CUDA runtime's own words ("CUDA driver version is insufficient for CUDA runtime version") are
    // what it says on a machine with no NVIDIA driver at all; say what that means and what to do.
    const bool no_driver = p.error.find("driver") != std::string::npos ||
                           p.error.find("no CUDA-capable device") != std::string::npos;
    return make_status(StatusCode::kFailedPrecondition,
                       "--backend %s: no usable GPU: %s (the CUDA runtime says: %s); --backend cpu runs on the CPU, "
                       "--backend auto picks the GPU when there is one",
                       name.c_str(),
                       no_driver ? "this machine has no NVIDIA GPU driver, or one older than this build's CUDA needs"
                                 : "CUDA sees no GPU here",
                       p.error.c_str());
  }
  return name;
}

BackendReserve backend_reserve(const std::string& name, const AttentionShape& shape, const AttentionOptions& attention) {
  BackendReserve r;
#ifdef TIERTRAIN_HAVE_CUDA
  if (name == "cuda") {
    r.scratch_bytes = cuda::scratch_bytes_for(shape.B * shape.T, static_cast<int>(shape.H));
    r.attention_workspace_bytes = cuda::attention_workspace_for(shape, attention);
    r.reserved_bytes = cuda::reserved_bytes(r.scratch_bytes) + r.attention_workspace_bytes;
  }
#else
  (void)name;
  (void)shape;
  (void)attention;
#endif
  return r;
}

Result<std::unique_ptr<Backend>> create_backend(const std::string& name, const BackendOptions& o) {
#ifdef TIERTRAIN_HAVE_CUDA
  if (name == "cuda")
    return cuda::create_backend({.device = o.device >= 0 ? o.device : cuda::probe().device,
                                 .device_budget = o.device_budget,
                                 .scratch_bytes = o.scratch_bytes > 0 ? o.scratch_bytes : cuda::kMinScratchBytes,
                                 .host_numa_node = o.host_numa_node,
                                 .host_threads = host::optimizer_threads(o.threads, /*beside_gpu=*/true),
                                 .attention = o.attention,
                                 .gemm = o.gemm,
                                 .xent_blocks = o.xent_blocks,
                                 .attention_workspace_bytes = o.attention_workspace_bytes,
                                 .record_um_calls = o.record_um_calls,
                                 .um_host_piece_bytes = o.um_host_piece_bytes});
#endif
  if (name == "cpu")
    return cpu::create_backend({.device_budget = o.device_budget,
                                .threads = o.threads,
                                .copy_delay_us = o.copy_delay_us,
                                .compute_delay_us = o.compute_delay_us,
                                .host_delay_us = o.host_delay_us,
                                .lock_host_memory = o.lock_host_memory,
                                .host_numa_node = o.host_numa_node,
                                .record_um_calls = o.record_um_calls});
  return make_status(StatusCode::kInvalidArgument, "no backend named '%s' in this build", name.c_str());
}

}  // namespace tt
