// backend/attention_options: which implementation runs a backend's attention ops (issue 23), as the knobs
// `attention_impl`, `cudnn_library` and `attention_workspace` give it. Parsed once into this struct; the CUDA
// backend reads it (backend/cuda/cudnn_sdpa.h), the CPU backend ignores it.
//
//   TT_ASSIGN_OR_RETURN(AttentionImpl impl, parse_attention_impl("auto"));
//   create_backend("cuda", {..., .attention = {.impl = impl}});
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/units.h"

namespace tt {

// kAuto: cuDNN's fused attention where the library loads and takes the shape, else our kernels. kCudnn: the same
// choice per shape, but a cuDNN that does not load is an error when the backend is created (and a shape cuDNN
// should take but refuses is one at the call). kNative: our kernels (backend/cuda/attention.cu) always. bf16 only:
// f32 follows F32Attention whatever the choice.
enum class AttentionImpl { kAuto, kCudnn, kNative };

// f32 attention on a GPU (the exact-comparison mode; knob `f32_attention`). kAuto: our fused 3xTF32 tensor-core
// kernels (Note [3xTF32 attention] in backend/cuda/attention_tf32.cu) where they take the shape (head size 64 or
// 128), else cuBLAS SGEMMs over an attention workspace (Note [f32 attention by GEMMs]) where one is reserved, else
// our SIMT flash kernels. kGemm: the GEMMs where the workspace holds a (batch, head) pair, else the SIMT kernels.
// kSimt: the SIMT kernels always. All three are fp32-accurate; kAuto is the fastest where it applies
// (docs/design/f32-attention.md).
enum class F32Attention { kAuto, kGemm, kSimt };

inline const char* f32_attention_name(F32Attention f) {
  return f == F32Attention::kAuto ? "auto" : f == F32Attention::kGemm ? "gemm" : "simt";
}
inline Result<F32Attention> parse_f32_attention(const std::string& s) {
  if (s == "auto") return F32Attention::kAuto;
  if (s == "gemm") return F32Attention::kGemm;
  if (s == "simt") return F32Attention::kSimt;
  return make_status(StatusCode::kInvalidArgument, "f32_attention '%s': one of auto, gemm, simt", s.c_str());
}

inline const char* attention_impl_name(AttentionImpl i) {
  return i == AttentionImpl::kAuto ? "auto" : i == AttentionImpl::kCudnn ? "cudnn" : "native";
}
inline Result<AttentionImpl> parse_attention_impl(const std::string& s) {
  if (s == "auto") return AttentionImpl::kAuto;
  if (s == "cudnn") return AttentionImpl::kCudnn;
  if (s == "native") return AttentionImpl::kNative;
  return make_status(StatusCode::kInvalidArgument, "attention_impl '%s': one of auto, cudnn, native", s.c_str());
}

// The least cap on the attention workspace (Note [cudnn workspace] in backend/cuda/cudnn_sdpa.h); the knob's value
// `auto` (kAutoAttentionWorkspace) resolves to it or more (resolve_attention_workspace).
constexpr int64_t kDefaultAttentionWorkspaceBytes = int64_t(512) << 20;
constexpr int64_t kAutoAttentionWorkspace = -1;

struct AttentionOptions {
  AttentionImpl impl = AttentionImpl::kAuto;
  std::string cudnn_library{};  // a libcudnn.so.9 file or the folder holding it; "": search (cudnn_loader.h)
  // Bytes cuDNN's backward (bf16) or the f32 GEMMs may use; kAutoAttentionWorkspace until the run resolves it.
  int64_t workspace_cap = kDefaultAttentionWorkspaceBytes;
  F32Attention f32 = F32Attention::kAuto;
  // cuDNN's backward form (knob attention_deterministic; Note [non-deterministic backward] in
  // backend/cuda/sdpa_graph.h): true repeats bit for bit; false accumulates d(q) in fp32 atomics, faster, not repeatable.
  bool deterministic = true;
};

// Note [automatic attention workspace]
// The attention workspace grows as B H T^2; under the cap the backward runs over chunks of the batch, which costs
// time: cuDNN's backward is slower in many small calls than in a few large ones or one
// (docs/benchmarks/2026-12-03-h200-engine-layernorm-workspace/). So `attention_workspace = auto` (the default) lets it
// take 1/64 of the memory the run may use: the --device-budget where one is given, else the device's memory (2.2 GB
// of a 141 GB GPU: GPT d4096 B8 T2048's 2.05 GiB runs whole), and never less
// than 512 MiB. A tight budget (an out-of-core plan's) keeps the 512 MiB floor; so does an automatic budget where
// only the floor lets the run fit the free memory (keep_automatic_workspace in exec/trainer.h); an explicit value is
// kept as is.

// The knob's text: "auto" (kAutoAttentionWorkspace) or a size (0 included).
inline Result<int64_t> parse_attention_workspace(const std::string& text) {
  if (text == "auto") return kAutoAttentionWorkspace;
  auto bytes = parse_bytes(text);
  TT_RETURN_IF(!bytes.is_ok() || bytes.value() < 0, kInvalidArgument,
               "attention_workspace '%s': a size such as 512MiB or 2GiB, 0, or auto", text.c_str());
  return bytes.value();
}
inline int64_t resolve_attention_workspace(int64_t cap, int64_t device_budget, int64_t device_memory) {
  if (cap != kAutoAttentionWorkspace) return cap;
  const int64_t room = device_budget > 0 ? device_budget : device_memory;
  return room / 64 > kDefaultAttentionWorkspaceBytes ? room / 64 : kDefaultAttentionWorkspaceBytes;
}

// What an attention op of a run looks like, for sizing the backend's reserve before it exists.
struct AttentionShape {
  int64_t B = 0, T = 0, H = 0, hs = 0;
  bool bf16 = false;  // activations in bf16 (cuDNN is used for bf16 only)
  int64_t KV = 0;     // key/value heads (grouped-query attention; 0: H)
};

}  // namespace tt
