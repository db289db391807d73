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
    // Our A is cuBLASLt's B (below): the reduction over k of its B.
    case Epilogue::kBiasGradA: return CUBLASLT_EPILOGUE_BGRADB;
    case Epilogue::kDGeluBiasGrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case Epilogue::kNone: break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool needs_aux(Epilogue e) {
  return e == Epilogue::kGeluAuxBias || e == Epilogue::kDGelu || e == Epilogue::kDGeluBiasGrad;
}
bool needs_bias(Epilogue e) {
  return e == Epilogue::kBias || e == Epilogue::kGeluAuxBias || e == Epilogue::kBiasGradA ||
         e == Epilogue::kDGeluBiasGrad;
}

cudaDataType_t d_type_of(const LtCall& c) { return c.d_type == kLtSameAsType ? c.type : c.d_type; }
cudaDataType_t bias_type_of(const LtCall& c) { return c.bias_type == kLtSameAsType ? c.type : c.bias_type; }

// The descriptors of one call, destroyed with it, and the alignments cuBLASLt may assume of its operands.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  uint32_t align_a = 0, align_b = 0, align_d = 0;
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// False where the call cannot go through cuBLASLt at all (an epilogue's pointer missing or misaligned).
bool usable(const LtCall& c) {
  if (needs_aux(c.epilogue) && (c.aux == nullptr || alignment_of(c.aux) < 16 || c.ld_aux % 8 != 0)) return false;
  if (needs_bias(c.epilogue) && (c.bias == nullptr || alignment_of(c.bias) < 16)) return false;
  return true;
}

// Row-major D = op(A) op(B) is column-major D^T = op(B)^T op(A)^T: cuBLASLt's A is our B and its B our A, with m and
// n swapped; a bias per column of our D is a bias per row of its D, as the epilogue wants.
void describe(const LtCall& c, Descriptors& ds) {
  // Alignments as cuBLASLt may assume them, capped at 16 bytes so that the cache key (below) and the heuristic's
  // query agree: an algorithm is never chosen for more alignment than every call sharing its key has.
  ds.align_a = std::min<uint32_t>(alignment_of(c.b), 16);
  ds.align_b = std::min<uint32_t>(alignment_of(c.a), 16);
  ds.align_d = std::min<uint32_t>(alignment_of(c.d), 16);
  TT_LT_ASSERT(cublasLtMatmulDescCreate(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  TT_LT_ASSERT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  TT_LT_ASSERT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const cublasLtEpilogue_t epi = to_lt(c.epilogue);
  TT_LT_ASSERT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (needs_bias(c.epilogue)) {
    TT_LT_ASSERT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
    const cudaDataType_t bias_type = bias_type_of(c);
    TT_LT_ASSERT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof(bias_type)));
  }
  if (needs_aux(c.epilogue)) {
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
  TT_LT_ASSERT(cublasLtMatrixLayoutCreate(&ds.d, d_type_of(c), lt_m, lt_n, c.ldd));
}

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

std::vector<LtAlgorithm> LtGemm::algorithms(const LtCall& c, int max) {
  if (!usable(c) || max <= 0) return {};
  Descriptors ds;
  describe(c, ds);
  cublasLtMatmulPreference_t pref = nullptr;
  TT_LT_ASSERT(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  TT_LT_ASSERT(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  TT_LT_ASSERT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ds.align_a,
                                                    sizeof(ds.align_a)));
  TT_LT_ASSERT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ds.align_b,
                                                    sizeof(ds.align_b)));
  TT_LT_ASSERT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ds.align_d,
                                                    sizeof(ds.align_d)));
  TT_LT_ASSERT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ds.align_d,
                                                    sizeof(ds.align_d)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(max));
  int found = 0;
  const cublasStatus_t rc =
      cublasLtMatmulAlgoGetHeuristic(handle_, ds.op, ds.a, ds.b, ds.d, ds.d, pref, max, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<LtAlgorithm> out;
  if (rc != CUBLAS_STATUS_SUCCESS) return out;
  for (int i = 0; i < found; ++i)
    if (results[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS)
      out.push_back({results[static_cast<size_t>(i)].algo, results[static_cast<size_t>(i)].workspaceSize});
  return out;
}

void LtGemm::run(cudaStream_t stream, const LtCall& c, const LtAlgorithm& algo) {
  Descriptors ds;
  describe(c, ds);
  const float alpha = 1.0f;
  TT_LT_ASSERT(cublasLtMatmul(handle_, ds.op, &alpha, c.b, ds.a, c.a, ds.b, &c.beta, c.d, ds.d, c.d, ds.d, &algo.algo,
                              workspace_, workspace_bytes_, stream));
}

bool LtGemm::matmul(cudaStream_t stream, const LtCall& c) {
  if (!usable(c)) return false;
  const auto align = [](const void* p) { return static_cast<int>(std::min<uint32_t>(alignment_of(p), 16)); };
  const Key key{c.trans_a,
                c.trans_b,
                c.m,
                c.n,
                c.k,
                c.lda,
                c.ldb,
                c.ldd,
                static_cast<int>(c.type),
                static_cast<int>(d_type_of(c)),
                static_cast<int>(bias_type_of(c)),
                static_cast<int>(c.epilogue) * (1 << 15) + align(c.b) * 1024 + align(c.a) * 32 + align(c.d),
                c.ld_aux,
                c.beta != 0.0f};
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    const std::vector<LtAlgorithm> found = algorithms(c, 1);
    Cached entry;
    entry.ok = !found.empty();
    if (entry.ok) entry.algo = found[0];
    it = cache_.emplace(key, entry).first;
  }
  if (!it->second.ok) return false;
  run(stream, c, it->second.algo);
  ++calls_[static_cast<int>(c.epilogue)];
  return true;
}

}  // namespace tt::cuda
