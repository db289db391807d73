// backend/cuda/kernels: the CUDA kernels of the Backend ops, with launchers that take a stream and check the launch.
// Semantics are those of backend/backend.h and backend/cpu/kernels.h (row-major, Linear weights [out, in], backward
// kernels accumulate). Activation types `X` are float or __nv_bfloat16, with fp32 arithmetic inside every kernel;
// parameter gradients, LayerNorm statistics and losses are float (the master dtype).
//
// Determinism: no kernel uses atomics; parameter gradients are reduced in a fixed order (column sums through a
// fixed split into partials, the embedding gradient through a stable sort of token ids), so a run is bit-reproducible
// on the same GPU and configuration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace tt {
struct AdamWArgs;
}

namespace tt::cuda {

using bf16 = __nv_bfloat16;

// Scratch the kernels use, carved from the device pool once when the backend is created.
struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
};

template <typename X>
constexpr cudaDataType_t cuda_type();
template <>
constexpr cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <>
constexpr cudaDataType_t cuda_type<bf16>() { return CUDA_R_16BF; }

// Row-major GEMM with cblas_sgemm's semantics, C[m, n] = alpha * op(A) op(B) + beta * C, fp32 accumulation; A and B
// share a type, C may be that type or fp32.
void gemm_rm(cublasHandle_t h, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a,
             cudaDataType_t ab_type, int lda, const void* b, int ldb, float beta, void* c, cudaDataType_t c_type,
             int ldc);

// wte holds the rows of tokens [begin, begin + V); wpe and dwpe may be null. The backward kernels' `add`: whether they
// add to their parameter gradients or overwrite them (Note [gradients first written] in backend/backend.h); dwte is
// always added to.
template <typename X>
void embedding_forward(cudaStream_t s, X* out, const int32_t* tokens, const X* wte, const X* wpe, int B, int T, int C,
                       int64_t begin, int V);
template <typename X>
void embedding_backward(cudaStream_t s, const Scratch& scratch, float* dwte, float* dwpe, const X* dout,
                        const int32_t* tokens, int B, int T, int C, int64_t begin, int V, bool add_pe);
template <typename X>
void layernorm_forward(cudaStream_t s, X* out, float* mean, float* rstd, const X* inp, const X* w, const X* b,
                       int64_t N, int C);
template <typename X>
void layernorm_backward(cudaStream_t s, const Scratch& scratch, X* dinp, float* dw, float* db, const X* dout,
                        const X* inp, const X* w, const float* mean, const float* rstd, int64_t N, int C, bool add);
// The two-pass kernels layernorm_backward falls back to (Note [one-pass LayerNorm backward]); declared for
// bench/training/gemm_survey, which times both.
template <typename X>
void layernorm_backward_two_pass(cudaStream_t s, const Scratch& scratch, X* dinp, float* dw, float* db,
                                 const X* dout, const X* inp, const X* w, const float* mean, const float* rstd,
                                 int64_t N, int C, bool add);
// out[n, :] = bias (for a GEMM with beta = 1 to add onto).
template <typename X>
void broadcast_rows(cudaStream_t s, X* out, const X* bias, int64_t N, int OC);
// dbias[o] (+)= sum_n dout[n, o] (as `add` says), in a fixed order.
template <typename X>
void column_sums(cudaStream_t s, const Scratch& scratch, float* dbias, const X* dout, int64_t N, int OC, bool add);
// Causal attention (attention.cu): out[B, T, C] and lse[B, H, T] from qkv[B, T, C + 2 KV C / H] (H query heads over
// KV key/value heads: Note [grouped-query attention]; KV = H is [q | k | v] of C each); the backward writes dqkv and
// needs attention_scratch_bytes of scratch.
template <typename X>
void attention_forward(cudaStream_t s, X* out, float* lse, const X* qkv, int B, int T, int C, int H, int KV);
template <typename X>
void attention_backward(cudaStream_t s, const Scratch& scratch, X* dqkv, const X* dout, const X* qkv, const X* out,
                        const float* lse, int B, int T, int C, int H, int KV);
// Note [KV cache]: qkv[b] into cache[b, pos[b]] (cache [B, Tmax, C + 2 KV C / H]), then out[b] from its query over
// rows 0..pos[b].
template <typename X>
void attention_decode(cudaStream_t s, X* out, X* cache, const X* qkv, const int32_t* pos, int B, int Tmax, int C,
                      int H, int KV);
// out[i] = wte[tokens[i]] + wpe[positions[i]], rows of C.
template <typename X>
void embedding_at(cudaStream_t s, X* out, const int32_t* tokens, const int32_t* positions, const X* wte, const X* wpe,
                  int N, int C);
int64_t attention_scratch_bytes(int B, int T, int H);
// D[(b H + h) T + t] = dout . out over row t's head h: the row sums the attention backwards need (of
// attention_scratch_bytes).
template <typename X>
void attention_row_dots(cudaStream_t s, float* D, const X* dout, const X* out, int B, int T, int C, int H);
// Note [3xTF32 attention] (attention_tf32.cu): f32 causal attention fused on tensor cores, three TF32 products an
// fp32 product; for head size 64 or 128 and 16-byte aligned rows (attention_tf32x3_takes). Same contract as
// attention_forward and attention_backward (the backward needs attention_scratch_bytes of scratch).
// The backward computes d(q) from the d(k)/d(v) pass where a workspace (ws, ws_bytes) holds the partials of one or more
// (b, h) pairs (Note [d(q) from the key tiles]), else in a kernel of its own; attention_tf32x3_workspace_for sizes
// it: at most cap bytes, 0 where fewer pairs than pay off fit. Returns whether the partials ran.
bool attention_tf32x3_takes(int B, int C, int H, std::initializer_list<const void*> ptrs);
int64_t attention_tf32x3_workspace_for(int64_t B, int64_t T, int64_t H, int64_t hs, int64_t cap);
void attention_forward_tf32x3(cudaStream_t s, float* out, float* lse, const float* qkv, int B, int T, int C, int H);
bool attention_backward_tf32x3(cudaStream_t s, const Scratch& scratch, void* ws, int64_t ws_bytes, float* dqkv,
                               const float* dout, const float* qkv, const float* out, const float* lse, int B, int T,
                               int C, int H);
// Note [f32 attention by GEMMs] (attention_gemm.cu): f32 causal attention through cuBLAS's batched fp32 GEMMs (h on
// stream st) over a workspace of ws_bytes, which attention_gemm_workspace_for sizes: at most cap bytes, 0 where
// one (batch, head) pair's two T x T matrices do not fit (then the kernels above run). Same contract as
// attention_forward and attention_backward; no scratch needed.
int64_t attention_gemm_workspace_for(int64_t B, int64_t T, int64_t H, int64_t cap);
// Whether a workspace of ws_bytes holds one pair at length T (else the kernels above must run).
bool attention_gemm_fits(int64_t ws_bytes, int64_t T);
void attention_forward_gemm(cublasHandle_t h, cudaStream_t st, void* ws, int64_t ws_bytes, float* out, float* lse,
                            const float* qkv, int B, int T, int C, int H);
void attention_backward_gemm(cublasHandle_t h, cudaStream_t st, void* ws, int64_t ws_bytes, float* dqkv,
                             const float* dout, const float* qkv, const float* out, const float* lse, int B, int T,
                             int C, int H);
// The Llama family's kernels (Backend::rmsnorm_forward, rmsnorm_backward, rope, swiglu_forward, swiglu_backward):
// RMSNorm rows of C (rstd in f32; dw from column partials added in a fixed order), the rotation of the q and k heads
// of qkv [B, T, (H + 2 KV) hs] by table [rows, hs] (f32; positions: [B] i32 or null), SwiGLU over rows of [gate | up].
template <typename X>
void rmsnorm_forward(cudaStream_t s, X* out, float* rstd, const X* inp, const X* w, int64_t N, int C, float eps);
// res = a + b (rounded to X), then rmsnorm_forward of res: the same bits as the two (Note [residual and RMSNorm in
// one pass] in kernels_layernorm.cu).
template <typename X>
void residual_rmsnorm_forward(cudaStream_t s, X* res, X* out, float* rstd, const X* a, const X* b, const X* w,
                              int64_t N, int C, float eps);
template <typename X>
void rmsnorm_backward(cudaStream_t s, const Scratch& scratch, X* dinp, float* dw, const X* dout, const X* inp,
                      const X* w, const float* rstd, int64_t N, int C, bool add);
template <typename X>
void rope(cudaStream_t s, X* qkv, const float* table, const int32_t* positions, int B, int T, int H, int KV, int hs,
          bool inverse);
template <typename X>
void swiglu_forward(cudaStream_t s, X* out, const X* inp, int64_t N, int F);
template <typename X>
void swiglu_backward(cudaStream_t s, X* dinp, const X* inp, const X* dout, int64_t N, int F);
template <typename X>
void gelu_forward(cudaStream_t s, X* out, const X* inp, int64_t n);
template <typename X>
void gelu_backward(cudaStream_t s, X* dinp, const X* inp, const X* dout, int64_t n);
// d *= gelu'(pre), in place.
template <typename X>
void gelu_backward_scale(cudaStream_t s, X* d, const X* pre, int64_t n);
template <typename X>
void residual_forward(cudaStream_t s, X* out, const X* a, const X* b, int64_t n);
template <typename X>
void residual_layernorm_forward(cudaStream_t s, X* res, X* out, float* mean, float* rstd, const X* a, const X* b,
                                const X* w, const X* bias, int64_t N, int C);
// Rows of V values of which the first `valid` take part (the rest is vocabulary padding: probability 0).
template <typename X>
void softmax_xent_forward(cudaStream_t s, float* losses, X* probs, const X* logits, const int32_t* targets, int64_t N,
                          int V, int valid);
template <typename X>
void softmax_xent_backward(cudaStream_t s, X* dlogits, const X* probs, const int32_t* targets, float dloss, int64_t N,
                           int V, int valid);
// Forward and backward in one pass: losses, and dlogits = (softmax - onehot) * dloss (may alias logits). blocks: the
// grid, each block taking every blocks-th row (<= 0: one a row); the same bits for any.
template <typename X>
void softmax_xent_fused(cudaStream_t s, float* losses, X* dlogits, const X* logits, const int32_t* targets,
                        float dloss, int64_t N, int V, int valid, int64_t blocks = 0);
// Backend::xent_local_max / xent_local_sums / xent_finish: rows of V local columns (the first `valid` real), the
// first one global column `begin`; stats [3, N] f32; dlogits may be null or alias logits.
template <typename X>
void xent_local_max(cudaStream_t s, float* stats, const X* logits, int64_t N, int V, int valid);
template <typename X>
void xent_local_sums(cudaStream_t s, float* stats, const X* logits, const int32_t* targets, int64_t N, int V, int valid,
                     int64_t begin);
template <typename X>
void xent_finish(cudaStream_t s, float* losses, X* dlogits, const X* logits, const float* stats,
                 const int32_t* targets, float dloss, int64_t N, int V, int valid, int64_t begin);
// dst = src converted (float <-> bf16, or a copy).
template <typename D, typename S>
void convert(cudaStream_t s, D* dst, const S* src, int64_t n);
void sum_squares(cudaStream_t s, const Scratch& scratch, float* out, const float* x, int64_t n);
void sum_squares(cudaStream_t s, const Scratch& scratch, float* out, const bf16* x, int64_t n);
// out[0] = sum of parts[0..n) in index order, in double.
void sum_in_order(cudaStream_t s, float* out, const float* parts, int64_t n);
// AdamW over n elements in args' pieces; out (may be null) receives the new parameters (f32), or their high halves
// (bf16: Note [master in two halves] in core/bf16.h). G: the gradients' type, float or bf16 (Note [bf16 gradients]).
template <typename O, typename G>
void adamw_update(cudaStream_t s, float* param, const G* grad, float* m, float* v, O* out, int64_t n,
                  const float* grad_norm_sq, const AdamWArgs& args);
// The same update of a master in two halves (Note [master in two halves]): `high` is the bf16 compute copy.
template <typename G>
void adamw_update_split(cudaStream_t s, uint16_t* low, uint16_t* high, const G* grad, float* m, float* v,
                        int64_t n, const float* grad_norm_sq, const AdamWArgs& args);

}  // namespace tt::cuda
