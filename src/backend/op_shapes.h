// backend/op_shapes: the shape and dtype contract of every Backend op, checked in one place for every backend.
// Dtypes: the activations of an op share one compute dtype (f32, f64, or bf16); parameter gradients, LayerNorm
// statistics and losses are in the master dtype, which is f32 for bf16 activations and the compute dtype otherwise.
// Each function aborts with the shapes involved when the contract is broken (a programming error, not user input)
// and returns the dimensions the kernels need.
//
//   const shapes::Rows d = shapes::layernorm_forward(out, mean, rstd, inp, w, b);   // d.N rows of d.C
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tt {
struct AdamWArgs;
}

namespace tt::shapes {

struct Embedding {
  int B, T, C, V;            // V: wte's rows
  int64_t vocab_begin = 0;   // the token of wte's first row
};
struct Rows {
  int64_t N;
  int C;
};
struct Matmul {
  int64_t N;
  int C, OC;
};
// Causal attention with grouped-query heads: H query heads and KV key/value heads (KV divides H; KV == H: multi-head)
// of hs = C / H channels; qkv rows are [q (C) | k (KV hs) | v (KV hs)], Cq = C + 2 KV hs wide.
struct Attention {
  int B, T, C, H;
  int KV = 0;
  int hs() const { return C / H; }
  int64_t Cq() const { return C + 2 * static_cast<int64_t>(KV) * hs(); }
};
// Rotary position embedding of the q and k heads of qkv [B, T, Cq] (Attention's layout): hs channels a head, the
// table [rows, hs] of cos then sin of the hs / 2 frequencies at each position.
struct Rope {
  int B, T, H, KV, hs;
  int rows;  // the table's positions
};
struct Softmax {
  int64_t N;
  int V;      // row length (padded vocabulary)
  int valid;  // columns that take part in the softmax
};

Embedding embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                            int64_t vocab_begin);
Embedding embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                             int64_t vocab_begin);
Rows layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& w,
                       const Tensor& b);
Rows layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout, const Tensor& inp,
                        const Tensor& w, const Tensor& mean, const Tensor& rstd);
Matmul matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias);
Matmul matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& w);
// The key/value heads are those qkv's width leaves after out's C: (Cq - C) / (2 hs).
Attention attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int heads);
// d.T: the cache's positions Tmax (cache [B, Tmax, Cq]); out [B, C], qkv [B, Cq], pos [B] i32.
Attention attention_decode(const Tensor& out, const Tensor& cache, const Tensor& qkv, const Tensor& pos, int heads);
// out [N, C], tokens and positions [N] i32: d.B = N, d.T = 1.
Embedding embedding_at(const Tensor& out, const Tensor& tokens, const Tensor& positions, const Tensor& wte,
                       const Tensor& wpe);
Attention attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, int heads);
Matmul matmul_gelu_forward(const Tensor& pre, const Tensor& out, const Tensor& inp, const Tensor& w,
                           const Tensor& bias);
Matmul matmul_backward_gelu(const Tensor& dpre, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& w, const Tensor& pre);
Rows residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                const Tensor& a, const Tensor& b, const Tensor& w, const Tensor& bias);
Rows rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w);
Rows residual_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd, const Tensor& a,
                              const Tensor& b, const Tensor& w);
Rows rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout, const Tensor& inp, const Tensor& w,
                      const Tensor& rstd);
// qkv [B, T, Cq] (or [B, Cq] with positions [B] i32: T = 1), table [rows, hs] in the master dtype.
Rope rope(const Tensor& qkv, const Tensor& table, const Tensor& positions, int heads, int kv_heads);
// inp [N, 2F] = [gate | up] a row, out [N, F].
Matmul swiglu(const char* op, const Tensor& out, const Tensor& inp);
// Same shape and dtype for all defined tensors; returns the element count.
int64_t elementwise(const char* op, const Tensor& a, const Tensor& b, const Tensor& c = Tensor());
Softmax softmax_xent_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits, const Tensor& targets,
                             int vocab);
Softmax softmax_xent_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets, int vocab);
// Backend::xent_local_max / xent_local_sums (targets may be undefined for the max): V = the local columns, valid =
// those of them before the global vocab.
Softmax xent_parallel(const char* op, const Tensor& stats, const Tensor& logits, const Tensor& targets,
                      int64_t vocab_begin, int vocab);
Softmax xent_finish(const Tensor& losses, const Tensor& dlogits, const Tensor& logits, const Tensor& stats,
                    const Tensor& targets, int64_t vocab_begin, int vocab);
int64_t convert(const Tensor& dst, const Tensor& src);
int64_t sum_squares(const Tensor& out, const Tensor& x);
int64_t adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& grad_norm_sq,
              const AdamWArgs& args, const Tensor& copy_out);

// True when t refers to memory (an undefined optional tensor is a default-constructed Tensor).
inline bool present(const Tensor& t) { return t.raw() != nullptr; }

}  // namespace tt::shapes
