// backend/cuda/kernels: the CUDA kernels of the Backend ops (fp32), with launchers that take a stream and check the
// launch. Semantics are those of backend/backend.h and backend/cpu/kernels.h (row-major, Linear weights [out, in],
// backward kernels accumulate).
//
// Determinism: no kernel uses atomics; parameter gradients are reduced in a fixed order (column sums through a
// fixed split into partials, the embedding gradient through a stable sort of token ids), so a run is bit-reproducible
// on the same GPU and configuration.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace tt::cuda {

// Scratch the kernels use, carved from the device pool once when the backend is created.
struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// Row-major GEMM with cblas_sgemm's semantics: C[m, n] = alpha * op(A) op(B) + beta * C.
void gemm_rm(cublasHandle_t h, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
             const float* b, int ldb, float beta, float* c, int ldc);
// The same for `batch` products whose operands start stride_{a,b,c} elements apart.
void gemm_rm_strided(cublasHandle_t h, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                     int lda, long long stride_a, const float* b, int ldb, long long stride_b, float beta, float* c,
                     int ldc, long long stride_c, int batch);

void embedding_forward(cudaStream_t s, float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C);
void embedding_backward(cudaStream_t s, const Scratch& scratch, float* dwte, float* dwpe, const float* dout,
                        const int32_t* tokens, int B, int T, int C, int V);
void layernorm_forward(cudaStream_t s, float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int64_t N, int C);
void layernorm_backward(cudaStream_t s, const Scratch& scratch, float* dinp, float* dw, float* db, const float* dout,
                        const float* inp, const float* w, const float* mean, const float* rstd, int64_t N, int C);
// out[n, :] = bias (for a GEMM with beta = 1 to add onto).
void broadcast_rows(cudaStream_t s, float* out, const float* bias, int64_t N, int OC);
// dbias[o] += sum_n dout[n, o], in a fixed order.
void column_sums(cudaStream_t s, const Scratch& scratch, float* dbias, const float* dout, int64_t N, int OC);
// Rows of [rows, T] scores of causal attention: softmax over t2 <= t (row index mod T), zeros above the diagonal.
void causal_softmax(cudaStream_t s, float* att, int64_t rows, int T);
// ds = p * (dp - sum(p * dp)) * scale, in place over dp; zero above the diagonal.
void causal_softmax_backward(cudaStream_t s, float* dp, const float* p, int64_t rows, int T, float scale);
void gelu_forward(cudaStream_t s, float* out, const float* inp, int64_t n);
void gelu_backward(cudaStream_t s, float* dinp, const float* inp, const float* dout, int64_t n);
void residual_forward(cudaStream_t s, float* out, const float* a, const float* b, int64_t n);
void softmax_xent_forward(cudaStream_t s, float* losses, float* probs, const float* logits, const int32_t* targets,
                          int64_t N, int V);
void softmax_xent_backward(cudaStream_t s, float* dlogits, const float* probs, const int32_t* targets, float dloss,
                           int64_t N, int V);
void sum_squares(cudaStream_t s, const Scratch& scratch, float* out, const float* x, int64_t n);
void adamw_update(cudaStream_t s, float* param, const float* grad, float* m, float* v, int64_t n,
                  const float* grad_norm_sq, float lr, float beta1, float beta2, float eps, float weight_decay,
                  int64_t step, float grad_clip);

}  // namespace tt::cuda
