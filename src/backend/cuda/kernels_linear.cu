// backend/cuda/kernels_linear.cu: the linear layers' GEMM (cuBLAS) and bias: broadcast rows, column sums; kernels and
// their launchers (kernels.cuh).
#include "backend/cuda/kernels_common.cuh"
#include "backend/cuda/kernel_columns.cuh"

namespace tt::cuda {
namespace {

// column_partials_kernel's plain column sums (inp == nullptr) with a thread on 16-byte vectors of columns: each
// column's sum runs over the same rows in the same order, so the partials are bit-identical to the scalar kernel's;
// a warp reads 512 contiguous bytes a row instead of 64. For dout 16-byte aligned and OC a multiple of the vector.
template <typename X>
__global__ void column_partials_vec_kernel(float* partial, const X* __restrict__ dout, int64_t N, int C, int chunks) {
  constexpr int kV = Vec<X>::kN;
  const int cv = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunk = blockIdx.y;
  if (cv >= C / kV) return;
  const int64_t rows = (N + chunks - 1) / chunks;
  const int64_t r0 = chunk * rows, r1 = min(N, r0 + rows);
  float s[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) s[j] = 0.0f;
#pragma unroll 4
  for (int64_t r = r0; r < r1; ++r) {
    Vec<X> d;
    d.load(dout + r * C + static_cast<int64_t>(cv) * kV);
#pragma unroll
    for (int j = 0; j < kV; ++j) s[j] += d.v[j];
  }
  float* out = partial + static_cast<int64_t>(chunk) * C + static_cast<int64_t>(cv) * kV;
#pragma unroll
  for (int j = 0; j < kV; ++j) out[j] = s[j];
}

template <typename X>
__global__ void broadcast_rows_kernel(X* out, const X* bias, int64_t N, int OC) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < N * OC;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = bias[i % OC];
}

}  // namespace


void gemm_rm(cublasHandle_t h, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a,
             cudaDataType_t ab_type, int lda, const void* b, int ldb, float beta, void* c, cudaDataType_t c_type,
             int ldc) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands, keep the flags.
  TT_CUBLAS_ASSERT(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                                &alpha, b, ab_type, ldb, a, ab_type, lda, &beta, c, c_type, ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
}

template <typename X>
void broadcast_rows(cudaStream_t s, X* out, const X* bias, int64_t N, int OC) {
  broadcast_rows_kernel<<<blocks_for(N * OC), kThreads, 0, s>>>(out, bias, N, OC);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void column_sums(cudaStream_t s, const Scratch& scratch, float* dbias, const X* dout, int64_t N, int OC, bool add) {
  const int chunks = column_chunks(N, OC, scratch.bytes);
  TT_CHECK(static_cast<size_t>(chunks) * OC * sizeof(float) <= scratch.bytes,
           "column_sums: OC=%d needs more than the CUDA scratch", OC);
  float* partial = static_cast<float*>(scratch.ptr);
  constexpr int kV = 16 / sizeof(X);
  if (OC % kV == 0 && dev::aligned16({dout})) {
    column_partials_vec_kernel<X><<<dim3((OC / kV + kThreads - 1) / kThreads, chunks), kThreads, 0, s>>>(
        partial, dout, N, OC, chunks);
  } else {
    column_partials_kernel<<<dim3((OC + kThreads - 1) / kThreads, chunks), kThreads, 0, s>>>(
        partial, dout, static_cast<const X*>(nullptr), nullptr, nullptr, N, OC, chunks);
  }
  TT_CUDA_CHECK_LAUNCH();
  column_finish_kernel<<<(OC + 31) / 32, dim3(32, 32), 0, s>>>(dbias, nullptr, partial, OC, chunks, OC, add);
  TT_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------------------------------
// instantiations

#define TT_CUDA_INSTANTIATE(X) \
  template void broadcast_rows<X>(cudaStream_t, X*, const X*, int64_t, int); \
  template void column_sums<X>(cudaStream_t, const Scratch&, float*, const X*, int64_t, int, bool);

TT_CUDA_INSTANTIATE(float)
TT_CUDA_INSTANTIATE(bf16)
#undef TT_CUDA_INSTANTIATE

}  // namespace tt::cuda
