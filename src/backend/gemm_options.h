// backend/gemm_options: which library runs a GPU's bf16 GEMMs that have no fused epilogue (the knob `gemm_impl`).
// Parsed once into this enum; the CUDA backend reads it, the CPU backend ignores it.
//
//   TT_ASSIGN_OR_RETURN(GemmImpl g, parse_gemm_impl("cublaslt"));
#pragma once

#include <string>

#include "core/status.h"

namespace tt {

// kCublas: cublasGemmEx with its default algorithm. kCublasLt: cuBLASLt with the first algorithm its heuristic
// offers for the shape, chosen once per shape and cached (backend/cuda/lt_gemm.cuh), as the GEMMs with a fused bias
// or GELU already run; where cuBLASLt has none for a call, cublasGemmEx. Either is deterministic for a given GPU and
// library: the same shape takes the same algorithm in every step and every run (resumes stay bit-exact). f32 GEMMs
// (the exact-comparison mode) always take cublasGemmEx.
enum class GemmImpl { kCublas, kCublasLt };

inline const char* gemm_impl_name(GemmImpl g) { return g == GemmImpl::kCublas ? "cublas" : "cublaslt"; }
inline Result<GemmImpl> parse_gemm_impl(const std::string& s) {
  if (s == "cublas") return GemmImpl::kCublas;
  if (s == "cublaslt") return GemmImpl::kCublasLt;
  return make_status(StatusCode::kInvalidArgument, "gemm_impl '%s': one of cublas, cublaslt", s.c_str());
}

}  // namespace tt
