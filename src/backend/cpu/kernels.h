// backend/cpu/kernels: the CPU kernels, templated on the element type (float for training, double for gradient
// checks), parallelised with OpenMP. Plain functions on raw pointers: the backend enqueues them on its streams and
// the op tests call them directly.
//
// Determinism: no kernel uses atomics or OpenMP reductions. Work is split so that every output element is written by
// exactly one thread (parameter gradients are split by channel, not by row), and reductions combine per-thread
// partials in thread order; results are therefore bit-identical from run to run for a fixed thread count
// (docs/ARCHITECTURE.md invariants 1 and 6 rely on this).
//
// Conventions as in backend/backend.h: row-major, Linear weights [out, in], backward kernels accumulate (+=).
#pragma once

#include <cstdint>

namespace tt::cpu {

// Threads the kernels use (OpenMP and OpenBLAS); 0 keeps the current setting.
void set_num_threads(int threads);
int num_threads();

// wte holds the rows of tokens [begin, begin + V) (the others contribute nothing); wpe / dwpe may be null.
// The backward ops' `add`: whether they add to their parameter gradients or overwrite them (Note [gradients first
// written] in backend/backend.h); dwte is always added to.
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C, int64_t begin,
                       int V);
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C, int64_t begin,
                        int V, bool add_pe);

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N, int C);
template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean,
                        const T* rstd, int64_t N, int C, bool add);

// RMSNorm: out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps); the backward adds to dinp, writes or adds dw.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* w, int64_t N, int C, T eps);
template <typename T>
void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd, int64_t N, int C,
                      bool add);
// Rotary position embedding of the H + KV q and k heads of each row of qkv [B, T, (H + 2 KV) hs], in place: the
// pairs (i, i + hs/2) turned by the angles of table row p ([cos | sin] of hs/2 frequencies), p the row's t or, with
// positions, positions[b] (T = 1); inverse turns back (the backward).
template <typename T>
void rope(T* qkv, const T* table, const int32_t* positions, int B, int T_, int H, int KV, int hs, bool inverse);
// SwiGLU over rows of inp [N, 2F] = [gate | up]: out [N, F] = silu(gate) * up; dinp [N, 2F] from dout [N, F].
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int F);
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int F);

template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int64_t N, int C, int OC);
template <typename T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int64_t N, int C, int OC,
                     bool add);

// Causal attention saving only lse[B, H, T] (log-sum-exp of each row's scaled scores); the backward rebuilds the
// probabilities from q, k and lse.
// qkv [B, T, C + 2 KV hs]: H query heads and KV key/value heads (shapes::Attention).
template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int C, int H, int KV);
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* lse, int B, int T_, int C, int H, int KV);
// Note [KV cache]: qkv[b] written into cache[b, pos[b]] (cache [B, Tmax, Cq]), then out[b] = its query attending to
// cache rows 0..pos[b].
template <typename T>
void attention_decode(T* out, T* cache, const T* qkv, const int32_t* pos, int B, int Tmax, int C, int H, int KV);
// out[i] = wte[tokens[i]] + wpe[positions[i]], rows of C.
template <typename T>
void embedding_at(T* out, const int32_t* tokens, const int32_t* positions, const T* wte, const T* wpe, int N, int C);

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);
// d[i] *= gelu'(pre[i]), in place.
template <typename T>
void gelu_backward_scale(T* d, const T* pre, int64_t n);
template <typename T>
void residual_forward(T* out, const T* a, const T* b, int64_t n);

// Rows of V values of which the first `valid` take part (the rest is vocabulary padding: probability 0).
template <typename T>
void softmax_xent_forward(T* losses, T* probs, const T* logits, const int32_t* targets, int64_t N, int V, int valid);
template <typename T>
void softmax_xent_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int64_t N, int V, int valid);
// Backend::xent_local_max / xent_local_sums / xent_finish over rows of V local columns, the first `valid` of them
// real, the first one global column `begin`; stats [3, N]. dlogits may be null (losses only) or alias logits.
template <typename T>
void xent_local_max(T* stats, const T* logits, int64_t N, int V, int valid);
template <typename T>
void xent_local_sums(T* stats, const T* logits, const int32_t* targets, int64_t N, int V, int valid, int64_t begin);
template <typename T>
void xent_finish(T* losses, T* dlogits, const T* logits, const T* stats, const int32_t* targets, T dloss, int64_t N,
                 int V, int valid, int64_t begin);

template <typename T>
T sum_squares(const T* x, int64_t n);
// The same over bf16 values (Note [bf16 gradients]), in double, the same split over threads.
float sum_squares_bf16(const uint16_t* x, int64_t n);
// PyTorch's single-tensor AdamW step, with the gradient scaled by the clipping factor first.
template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, T grad_norm_sq, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step, float grad_clip);
// The float update is host/adamw.h's adamw_update_f32 (the host library below the backends).

}  // namespace tt::cpu
