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

namespace tt {

// kAuto: cuDNN's fused attention where the library loads and takes the shape, else our kernels. kCudnn: the same
// choice per shape, but a cuDNN that does not load is an error when the backend is created (and a shape cuDNN
// should take but refuses is one at the call). kNative: our kernels (backend/cuda/attention.cu) always. Whatever
// the choice, f32 runs as cuBLAS GEMMs where an attention workspace was reserved (Note [f32 attention by GEMMs];
// --attention-workspace 0 leaves it to our flash kernels).
enum class AttentionImpl { kAuto, kCudnn, kNative };

inline const char* attention_impl_name(AttentionImpl i) {
  return i == AttentionImpl::kAuto ? "auto" : i == AttentionImpl::kCudnn ? "cudnn" : "native";
}
inline Result<AttentionImpl> parse_attention_impl(const std::string& s) {
  if (s == "auto") return AttentionImpl::kAuto;
  if (s == "cudnn") return AttentionImpl::kCudnn;
  if (s == "native") return AttentionImpl::kNative;
  return make_status(StatusCode::kInvalidArgument, "attention_impl '%s': one of auto, cudnn, native", s.c_str());
}

// Default cap on cuDNN's attention workspace (Note [cudnn workspace] in backend/cuda/cudnn_sdpa.h).
constexpr int64_t kDefaultAttentionWorkspaceBytes = int64_t(512) << 20;

struct AttentionOptions {
  AttentionImpl impl = AttentionImpl::kAuto;
  std::string cudnn_library{};  // a libcudnn.so.9 file or the folder holding it; "": search (cudnn_loader.h)
  int64_t workspace_cap = kDefaultAttentionWorkspaceBytes;  // bytes cuDNN's backward (bf16) or the f32 GEMMs may use
};

// What an attention op of a run looks like, for sizing the backend's reserve before it exists.
struct AttentionShape {
  int64_t B = 0, T = 0, H = 0, hs = 0;
  bool bf16 = false;  // activations in bf16 (cuDNN is used for bf16 only)
};

}  // namespace tt
