// backend/cuda/lt_gemm: row-major GEMMs through cuBLASLt with fused epilogues (bias; bias + GELU saving the
// pre-activation; GELU's derivative applied to the product; the bias gradient as the product's column sums), for the
// Linear layers where a fused epilogue saves a pass over an operand. The algorithm for each shape is chosen once by
// cuBLASLt's heuristic and cached.
//
//   LtGemm lt;  TT_TRY(lt.init(workspace, bytes));
//   bool done = lt.matmul(stream, {.m = N, .n = OC, .k = C, ...});   // false: no algorithm; use the plain path
//
// algorithms() and run() expose the heuristic's candidates for one call and run one of them: what
// bench/training/gemm_survey.cu times against the cached choice.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include <cublasLt.h>

#include "core/status.h"

namespace tt::cuda {

enum class Epilogue { kNone, kBias, kGeluAuxBias, kDGelu, kBiasGradA, kDGeluBiasGrad };
constexpr int kEpilogues = 6;

// Row-major D[m, n] = epilogue(op(A) op(B) (+ beta D)), with cblas's conventions for the operands (A is m x k after
// op, B is k x n after op). bias: with kBias and kGeluAuxBias n values added to every row of D (one per column);
// with kBiasGradA m values written (not accumulated): bias[i] = sum over k of op(A)[i, k], which for a Linear
// layer's weight gradient dW[OC, C] = dout^T inp is its bias gradient, the column sums of dout; with kDGeluBiasGrad
// n values written, the column sums of D after GELU's derivative. aux: m x n, leading dimension ld_aux (the
// pre-activation, written by kGeluAuxBias and read by kDGelu and kDGeluBiasGrad).
// LtCall's d_type and bias_type until set: the same as its `type`.
constexpr cudaDataType_t kLtSameAsType = static_cast<cudaDataType_t>(-1);

struct LtCall {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* d = nullptr;
  int ldd = 0;
  float beta = 0.0f;
  cudaDataType_t type = CUDA_R_16BF;          // of A, B and aux
  cudaDataType_t d_type = kLtSameAsType;      // of D: `type` unless set
  cudaDataType_t bias_type = kLtSameAsType;   // of the bias: `type` unless set
  Epilogue epilogue = Epilogue::kNone;
  const void* bias = nullptr;
  void* aux = nullptr;
  int ld_aux = 0;
};

// One of cuBLASLt's algorithms for a call. (A struct around the algorithm: nvcc 13's front end fails on
// std::vector<cublasLtMatmulAlgo_t> in C++20.)
struct LtAlgorithm {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
};

class LtGemm {
 public:
  LtGemm() = default;
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  ~LtGemm();
  Status init(void* workspace, size_t workspace_bytes);
  // Enqueues the product on `stream`. Returns false (and enqueues nothing) when cuBLASLt has no algorithm for the
  // call (alignment, leading dimensions, types); the caller then takes an unfused path.
  bool matmul(cudaStream_t stream, const LtCall& call);
  // Products enqueued through cuBLASLt so far with this epilogue (the fallbacks not counted).
  int64_t calls(Epilogue e) const { return calls_[static_cast<int>(e)]; }

  // Up to `max` of the heuristic's algorithms for the call, best first (the first is what matmul() caches).
  std::vector<LtAlgorithm> algorithms(const LtCall& call, int max);
  // Enqueues the product with the given algorithm (one of algorithms()'s for the same call).
  void run(cudaStream_t stream, const LtCall& call, const LtAlgorithm& algo);

 private:
  using Key = std::tuple<bool, bool, int, int, int, int, int, int, int, int, int, int, int, bool>;
  struct Cached {
    bool ok = false;
    LtAlgorithm algo;
  };
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Cached> cache_;
  int64_t calls_[kEpilogues] = {};  // per Epilogue
};

}  // namespace tt::cuda
