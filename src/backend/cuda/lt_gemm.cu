#include "backend/cuda/lt_gemm.cuh"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace tt::cuda {
namespace {

#define TT_LT_ASSERT(call) TT_CUBLAS_ASSERT(call)

// The largest power of two (at most 256) that divides the address: what cuBLASLt may assume about the buffer.
uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

cublasLtEpilogue_t to_lt(Epilogue e) {
  switch (e) {
    case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::kNone: break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// The descriptors of one call, destroyed with it.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

LtGemm::~LtGemm() {
  if (handle_) cublasLtDestroy(handle_);
}

Status LtGemm::init(void* workspace, size_t workspace_bytes) {
  TT_CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_ = workspace;
  workspace_bytes_ = workspace_bytes;
  return Status::ok();
}

bool LtGemm::matmul(cudaStream_t stream, const LtCall& c) {
  const bool needs_aux = c.epilogue == Epilogue::kGeluAuxBias || c.epilogue == Epilogue::kDGelu;
  const bool needs_bias = c.epilogue == Epilogue::kBias || c.epilogue == Epilogue::kGeluAuxBias;
  if ((needs_aux && (c.aux == nullptr || alignment_of(c.aux) < 16 || c.ld_aux % 8 != 0)) ||
      (needs_bias && (c.bias == nullptr || alignment_of(c.bias) < 16)))
    return false;
  // Row-major D = op(A) op(B) is column-major D^T = op(B)^T op(A)^T: cuBLASLt's A is our B and its B our A, with
  // m and n swapped; a bias per column of our D is a bias per row of its D, as the epilogue wants.
  // Alignments as cuBLASLt may assume them, capped at 16 bytes so that the cache key (below) and the heuristic's
  // query agree: an algorithm is never chosen for more alignment than every call sharing its key has.
  const uint32_t align_a = std::min<uint32_t>(alignment_of(c.b), 16), align_b = std::min<uint32_t>(alignment_of(c.a), 16),
                 align_d = std::min<uint32_t>(alignment_of(c.d), 16);
  Descriptors ds;
  TT_LT_ASSERT(cublasLtMatmulDescCreate(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  TT_LT_ASSERT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  TT_LT_ASSERT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const cublasLtEpilogue_t epi = to_lt(c.epilogue);
  TT_LT_ASSERT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (needs_bias) {
    TT_LT_ASSERT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
    TT_LT_ASSERT(
        cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c.type, sizeof(c.type)));
  }
  if (needs_aux) {
    const int64_t ld = c.ld_aux;
    TT_LT_ASSERT(
        cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c.aux, sizeof(c.aux)));
    TT_LT_ASSERT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    TT_LT_ASSERT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &c.type,
                                                sizeof(c.type)));
  }
  // Stored shapes (column-major rows x cols) of cuBLASLt's A (our B), B (our A) and D.
  const int lt_m = c.n, lt_n = c.m;
  TT_LT_ASSERT(cublasLtMatrixLayoutCreate(&ds.a, c.type, c.trans_b ? c.k : lt_m, c.trans_b ? lt_m : c.k, c.ldb));
  TT_LT_ASSERT(cublasLtMatrixLayoutCreate(&ds.b, c.type, c.trans_a ? lt_n : c.k, c.trans_a ? c.k : lt_n, c.lda));
  TT_LT_ASSERT(cublasLtMatrixLayoutCreate(&ds.d, c.type, lt_m, lt_n, c.ldd));

  const auto a16 = [](uint32_t a) { return static_cast<int>(a); };
  const Key key{c.trans_a,
                c.trans_b,
                c.m,
                c.n,
                c.k,
                c.lda,
                c.ldb,
                c.ldd,
                static_cast<int>(c.type),
                static_cast<int>(c.epilogue) * (1 << 15) + a16(align_a) * 1024 + a16(align_b) * 32 + a16(align_d),
                c.ld_aux,
                c.beta != 0.0f};
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    TT_LT_ASSERT(cublasLtMatmulPreferenceCreate(&ds.pref));
    const uint64_t ws = workspace_bytes_;
    TT_LT_ASSERT(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                      sizeof(ws)));
    TT_LT_ASSERT(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                      sizeof(align_a)));
    TT_LT_ASSERT(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                      sizeof(align_b)));
    TT_LT_ASSERT(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                      sizeof(align_d)));
    TT_LT_ASSERT(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                      sizeof(align_d)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t rc =
        cublasLtMatmulAlgoGetHeuristic(handle_, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &result, &found);
    Cached entry;
    entry.ok = rc == CUBLAS_STATUS_SUCCESS && found > 0;
    if (entry.ok) entry.algo = result.algo;
    it = cache_.emplace(key, entry).first;
  }
  if (!it->second.ok) return false;
  const float alpha = 1.0f;
  TT_LT_ASSERT(cublasLtMatmul(handle_, ds.op, &alpha, c.b, ds.a, c.a, ds.b, &c.beta, c.d, ds.d, c.d, ds.d,
                              &it->second.algo, workspace_, workspace_bytes_, stream));
  ++calls_[static_cast<int>(c.epilogue)];
  return true;
}

}  // namespace tt::cuda
