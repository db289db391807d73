// backend/cuda/cudnn_sdpa: causal attention through cuDNN's fused flash-attention engines (docs/design/
// cudnn-attention.md): the graphs of sdpa_graph.h lowered to backend descriptors, one execution plan per shape built
// on first use and kept, and the calls that bind our tensors' pointers to it. The CUDA backend asks it first and
// runs its own kernels (attention.cu) when it says no.
//
//   TT_ASSIGN_OR_RETURN(auto sdpa, CudnnSdpa::create(lib, stream, ws, ws_bytes, /*strict=*/false));
//   if (!sdpa->forward(dims, out, lse, qkv)) cuda::attention_forward<bf16>(...);
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/cudnn_loader.h"
#include "backend/cuda/sdpa_graph.h"
#include "core/status.h"

namespace tt::cudnn {

// Note [cudnn workspace]
// Our device pool is carved once, so cuDNN's workspace is reserved before the first call: backend_reserve adds
// workspace_bytes_for(shape, cap) (sdpa_backward_workspace_bound: the §3 bound of the deterministic backward) and
// the backend takes it from the pool as "attention.workspace" (which f32 runs use for their GEMMs instead). Where a
// whole batch would need more than the cap (knob attention_workspace; by default 1/64 of the budget or of the GPU's
// memory, Note [automatic attention workspace] in backend/attention_options.h), the backward runs over chunks of b
// sequences (pointers advanced by b T 3C, b T C,
// b H T) with a plan for the chunk's shape; the forward (256 bytes) always runs whole. A plan whose real workspace
// exceeds what is reserved is not used (logged): the shape runs on our kernels. Dsum, the backward's row sums, goes
// to the rowsum scratch our own backward uses (B H T floats).
// deterministic: which backward (Note [non-deterministic backward] in sdpa_graph.h); the other's d(q) accumulator
// lives at the start of the workspace, cuDNN's own after it.
int64_t workspace_bytes_for(const SdpaDims& d, int64_t cap, bool deterministic = true);
// Sequences per backward call for a workspace of `bytes` (0: none fits).
int64_t backward_chunk(const SdpaDims& d, int64_t bytes, bool deterministic = true);
// Whether cuDNN of this version (cudnnGetVersion: 91900 for 9.19.0) is given an attention of this shape at all (design
// note §5.3): head size 64 or 128, T >= 2, and before 9.16 T a multiple of 128. Outside it our kernels run.
bool sdpa_takes(int64_t version, int64_t T, int64_t hs);

class CudnnSdpa {
 public:
  // strict: a shape cuDNN should take (bf16, head size 64 or 128, T >= 2, aligned) but refuses is an error (knob
  // attention_impl=cudnn) rather than a fall-back. deterministic: the backward's form (Note [non-deterministic
  // backward]); false needs cuDNN 9.6 or later (which clears the d(q) accumulator itself), else it is an error.
  static Result<std::unique_ptr<CudnnSdpa>> create(const Library* lib, void* stream, void* workspace,
                                                   int64_t workspace_bytes, bool strict, bool deterministic = true);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  // Run on cuDNN and return true, or return false without touching anything (the caller runs its own kernels). The
  // decision is per shape and the same for forward and backward (both plans are built at the first call of a shape).
  // forward: out [B,T,C], lse [B,H,T] from qkv [B,T,Cq] (bf16; Note [sdpa layout]). backward: dqkv = d(qkv) (every element written) from
  // dout, qkv, out, lse; dsum: B H T floats of scratch.
  bool forward(const SdpaDims& d, void* out, float* lse, const void* qkv);
  bool backward(const SdpaDims& d, void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                float* dsum);

  const Library& library() const { return *lib_; }
  bool deterministic() const { return deterministic_; }
  int64_t forward_calls() const { return forward_calls_; }
  int64_t backward_calls() const { return backward_calls_; }

  struct Plan;  // cudnn_sdpa.cc

 private:
  CudnnSdpa(const Library* lib, Handle h, void* ws, int64_t ws_bytes, bool strict, bool deterministic)
      : lib_(lib), handle_(h), ws_(ws), ws_bytes_(ws_bytes), strict_(strict), deterministic_(deterministic) {}
  struct Shape {
    bool usable = false;
    std::shared_ptr<Plan> fwd, bwd;
    int64_t chunk = 0;  // sequences per backward call
    int64_t dq_acc = 0;  // bytes of the d(q) accumulator at the workspace's start (non-deterministic backward)
  };
  const Shape& shape(const SdpaDims& d);
  Result<std::shared_ptr<Plan>> build(const SdpaGraph& g, const char* what);
  void retire(const SdpaDims& d);  // a shape that failed at a call: our kernels from now on

  const Library* lib_;
  Handle handle_;
  void* ws_;
  int64_t ws_bytes_;
  bool strict_;
  bool deterministic_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>, Shape> shapes_;  // B, T, H, hs, KV
  std::vector<std::shared_ptr<Plan>> retired_;  // plans of retired shapes, which enqueued work may still use
  int64_t forward_calls_ = 0, backward_calls_ = 0;
};

}  // namespace tt::cudnn
