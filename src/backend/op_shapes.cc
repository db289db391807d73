#include "backend/op_shapes.h"

#include <algorithm>

#include "backend/backend.h"

namespace tt::shapes {
namespace {

std::string s(const Tensor& t) { return t.shape().to_string() + " " + dtype_name(t.dtype()); }

void same_dtype(const char* op, const Tensor& ref, std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others)
    if (present(*t))
      TT_CHECK(t->dtype() == ref.dtype(), "%s: mixed dtypes %s and %s", op, dtype_name(ref.dtype()),
               dtype_name(t->dtype()));
}

void is_i32(const char* op, const Tensor& t) {
  TT_CHECK(t.dtype() == DType::kI32, "%s: token ids must be i32, got %s", op, dtype_name(t.dtype()));
}

// The dtype of parameter gradients, LayerNorm statistics and losses for activations of dtype `compute`: fp32 when
// the compute dtype is bf16 (fp32 master weights), else the compute dtype itself.
DType master_of(DType compute) { return compute == DType::kBF16 ? DType::kF32 : compute; }

void master_dtype(const char* op, DType compute, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (present(*t))
      TT_CHECK(t->dtype() == master_of(compute), "%s: with %s activations this tensor must be %s, got %s", op,
               dtype_name(compute), dtype_name(master_of(compute)), dtype_name(t->dtype()));
}

// Note [bf16 gradients] (exec/executor.h): a parameter's gradient is the master dtype, or bf16 where the compute
// dtype is f32 or bf16 (written in f32 and rounded once, to nearest even).
void grad_dtype(const char* op, DType compute, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (present(*t))
      TT_CHECK(t->dtype() == master_of(compute) ||
                   (t->dtype() == DType::kBF16 && (compute == DType::kF32 || compute == DType::kBF16)),
               "%s: with %s activations a gradient must be %s or bf16, got %s", op, dtype_name(compute),
               dtype_name(master_of(compute)), dtype_name(t->dtype()));
}

int last_dim(const Tensor& t) { return static_cast<int>(t.dim(t.shape().rank() - 1)); }

}  // namespace

Embedding embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                            int64_t vocab_begin) {
  const char* op = "embedding_forward";
  TT_CHECK(out.shape().rank() == 3, "%s: out must be [B, T, C], got %s", op, s(out).c_str());
  Embedding d{static_cast<int>(out.dim(0)), static_cast<int>(out.dim(1)), static_cast<int>(out.dim(2)),
              static_cast<int>(wte.dim(0)), vocab_begin};
  is_i32(op, tokens);
  same_dtype(op, out, {&wte, &wpe});
  TT_CHECK(vocab_begin >= 0, "%s: vocab_begin %lld", op, static_cast<long long>(vocab_begin));
  TT_CHECK(tokens.numel() == static_cast<int64_t>(d.B) * d.T && wte.dim(1) == d.C &&
               (!present(wpe) || (wpe.dim(1) == d.C && wpe.dim(0) >= d.T)),
           "%s: out %s tokens %s wte %s wpe %s", op, s(out).c_str(), s(tokens).c_str(), s(wte).c_str(),
           s(wpe).c_str());
  return d;
}

Embedding embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                             int64_t vocab_begin) {
  const char* op = "embedding_backward";
  TT_CHECK(dout.shape().rank() == 3, "%s: dout must be [B, T, C], got %s", op, s(dout).c_str());
  Embedding d{static_cast<int>(dout.dim(0)), static_cast<int>(dout.dim(1)), static_cast<int>(dout.dim(2)),
              static_cast<int>(dwte.dim(0)), vocab_begin};
  is_i32(op, tokens);
  master_dtype(op, dout.dtype(), {&dwte, &dwpe});
  TT_CHECK(vocab_begin >= 0, "%s: vocab_begin %lld", op, static_cast<long long>(vocab_begin));
  TT_CHECK(tokens.numel() == static_cast<int64_t>(d.B) * d.T && dwte.dim(1) == d.C &&
               (!present(dwpe) || (dwpe.dim(1) == d.C && dwpe.dim(0) >= d.T)),
           "%s: dout %s tokens %s dwte %s dwpe %s", op, s(dout).c_str(), s(tokens).c_str(), s(dwte).c_str(),
           s(dwpe).c_str());
  return d;
}

Rows layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& w,
                       const Tensor& b) {
  const char* op = "layernorm_forward";
  TT_CHECK(out.shape() == inp.shape(), "%s: out %s != inp %s", op, s(out).c_str(), s(inp).c_str());
  Rows d{0, last_dim(inp)};
  d.N = inp.numel() / d.C;
  same_dtype(op, inp, {&out, &w, &b});
  master_dtype(op, inp.dtype(), {&mean, &rstd});
  TT_CHECK(mean.numel() == d.N && rstd.numel() == d.N && w.numel() == d.C && b.numel() == d.C,
           "%s: inp %s mean %s rstd %s w %s b %s", op, s(inp).c_str(), s(mean).c_str(), s(rstd).c_str(),
           s(w).c_str(), s(b).c_str());
  return d;
}

Rows layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout, const Tensor& inp,
                        const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_backward";
  TT_CHECK(dinp.shape() == inp.shape() && dout.shape() == inp.shape(), "%s: dinp %s dout %s inp %s", op,
           s(dinp).c_str(), s(dout).c_str(), s(inp).c_str());
  Rows d{0, last_dim(inp)};
  d.N = inp.numel() / d.C;
  same_dtype(op, inp, {&dinp, &dout, &w});
  master_dtype(op, inp.dtype(), {&mean, &rstd});
  grad_dtype(op, inp.dtype(), {&dw, &db});
  TT_CHECK(mean.numel() == d.N && rstd.numel() == d.N && w.numel() == d.C && dw.numel() == d.C && db.numel() == d.C,
           "%s: inp %s mean %s rstd %s w %s dw %s db %s", op, s(inp).c_str(), s(mean).c_str(), s(rstd).c_str(),
           s(w).c_str(), s(dw).c_str(), s(db).c_str());
  return d;
}

Matmul matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias) {
  const char* op = "matmul_forward";
  TT_CHECK(w.shape().rank() == 2, "%s: w must be [OC, C], got %s", op, s(w).c_str());
  Matmul d{0, static_cast<int>(w.dim(1)), static_cast<int>(w.dim(0))};
  d.N = inp.numel() / d.C;
  same_dtype(op, inp, {&out, &w, &bias});
  TT_CHECK(inp.numel() == d.N * d.C && out.numel() == d.N * d.OC && (!present(bias) || bias.numel() == d.OC),
           "%s: out %s inp %s w %s bias %s", op, s(out).c_str(), s(inp).c_str(), s(w).c_str(), s(bias).c_str());
  return d;
}

Matmul matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& w) {
  const char* op = "matmul_backward";
  TT_CHECK(w.shape().rank() == 2, "%s: w must be [OC, C], got %s", op, s(w).c_str());
  Matmul d{0, static_cast<int>(w.dim(1)), static_cast<int>(w.dim(0))};
  d.N = inp.numel() / d.C;
  same_dtype(op, inp, {&dinp, &dout, &w});
  grad_dtype(op, inp.dtype(), {&dw, &dbias});
  TT_CHECK(inp.numel() == d.N * d.C && dout.numel() == d.N * d.OC && (!present(dinp) || dinp.numel() == d.N * d.C) &&
               (!present(dw) || dw.numel() == static_cast<int64_t>(d.OC) * d.C) &&
               (!present(dbias) || dbias.numel() == d.OC),
           "%s: dinp %s dw %s dbias %s dout %s inp %s w %s", op, s(dinp).c_str(), s(dw).c_str(), s(dbias).c_str(),
           s(dout).c_str(), s(inp).c_str(), s(w).c_str());
  return d;
}

Attention attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int heads) {
  const char* op = "attention";
  TT_CHECK(qkv.shape().rank() == 3 && heads > 0, "%s: qkv must be [B, T, Cq], got %s (heads %d)", op, s(qkv).c_str(),
           heads);
  const int64_t B = qkv.dim(0), T = qkv.dim(1), BT = B * T;
  TT_CHECK(BT > 0 && out.numel() % BT == 0, "%s: out %s qkv %s", op, s(out).c_str(), s(qkv).c_str());
  Attention d{static_cast<int>(B), static_cast<int>(T), static_cast<int>(out.numel() / BT), heads};
  TT_CHECK(d.C % heads == 0 && d.C > 0 && (qkv.dim(2) - d.C) > 0 && (qkv.dim(2) - d.C) % (2 * d.hs()) == 0,
           "%s: qkv %s is not [q (%d) | k | v] of %d-channel heads", op, s(qkv).c_str(), d.C, d.C / heads);
  d.KV = static_cast<int>((qkv.dim(2) - d.C) / (2 * d.hs()));
  same_dtype(op, qkv, {&out});
  master_dtype(op, qkv.dtype(), {&lse});
  TT_CHECK(heads % d.KV == 0 && lse.numel() == static_cast<int64_t>(d.B) * heads * d.T,
           "%s: out %s lse %s qkv %s heads %d (key/value heads %d must divide them)", op, s(out).c_str(),
           s(lse).c_str(), s(qkv).c_str(), heads, d.KV);
  return d;
}

Attention attention_decode(const Tensor& out, const Tensor& cache, const Tensor& qkv, const Tensor& pos, int heads) {
  const char* op = "attention_decode";
  TT_CHECK(cache.shape().rank() == 3 && cache.dim(1) >= 1 && heads > 0 && cache.dim(0) > 0,
           "%s: cache must be [B, Tmax, Cq], got %s", op, s(cache).c_str());
  const int64_t B = cache.dim(0);
  TT_CHECK(out.numel() % B == 0, "%s: out %s cache %s", op, s(out).c_str(), s(cache).c_str());
  Attention d{static_cast<int>(B), static_cast<int>(cache.dim(1)), static_cast<int>(out.numel() / B), heads};
  TT_CHECK(d.C % heads == 0 && d.C > 0 && (cache.dim(2) - d.C) > 0 && (cache.dim(2) - d.C) % (2 * d.hs()) == 0,
           "%s: cache %s is not [q (%d) | k | v] of %d-channel heads", op, s(cache).c_str(), d.C, d.C / heads);
  d.KV = static_cast<int>((cache.dim(2) - d.C) / (2 * d.hs()));
  same_dtype(op, cache, {&out, &qkv});
  is_i32(op, pos);
  TT_CHECK(heads % d.KV == 0 && qkv.numel() == d.B * d.Cq() && pos.numel() == d.B,
           "%s: out %s cache %s qkv %s pos %s heads %d", op, s(out).c_str(), s(cache).c_str(), s(qkv).c_str(),
           s(pos).c_str(), heads);
  return d;
}

Embedding embedding_at(const Tensor& out, const Tensor& tokens, const Tensor& positions, const Tensor& wte,
                       const Tensor& wpe) {
  const char* op = "embedding_at";
  TT_CHECK(wte.shape().rank() == 2 && wpe.shape().rank() == 2, "%s: wte %s wpe %s", op, s(wte).c_str(),
           s(wpe).c_str());
  Embedding d{static_cast<int>(tokens.numel()), 1, static_cast<int>(wte.dim(1)), static_cast<int>(wte.dim(0)), 0};
  is_i32(op, tokens);
  is_i32(op, positions);
  same_dtype(op, out, {&wte, &wpe});
  TT_CHECK(out.numel() == static_cast<int64_t>(d.B) * d.C && positions.numel() == d.B && wpe.dim(1) == d.C,
           "%s: out %s tokens %s positions %s wte %s wpe %s", op, s(out).c_str(), s(tokens).c_str(),
           s(positions).c_str(), s(wte).c_str(), s(wpe).c_str());
  return d;
}

Attention attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, int heads) {
  TT_CHECK(dqkv.shape() == qkv.shape() && dout.shape() == out.shape(),
           "attention_backward: dqkv %s qkv %s dout %s out %s", s(dqkv).c_str(), s(qkv).c_str(), s(dout).c_str(),
           s(out).c_str());
  same_dtype("attention_backward", qkv, {&dqkv, &dout});
  return attention_forward(out, lse, qkv, heads);
}

Matmul matmul_gelu_forward(const Tensor& pre, const Tensor& out, const Tensor& inp, const Tensor& w,
                           const Tensor& bias) {
  const Matmul d = matmul_forward(pre, inp, w, bias);
  elementwise("matmul_gelu_forward", out, pre);
  return d;
}

Matmul matmul_backward_gelu(const Tensor& dpre, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& w, const Tensor& pre) {
  TT_CHECK(present(dpre), "matmul_backward_gelu: dpre is required");
  const Matmul d = matmul_backward(dpre, dw, dbias, dout, inp, w);
  elementwise("matmul_backward_gelu", dpre, pre);
  return d;
}

Rows residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                const Tensor& a, const Tensor& b, const Tensor& w, const Tensor& bias) {
  elementwise("residual_layernorm_forward", res, a, b);
  return layernorm_forward(out, mean, rstd, res, w, bias);
}

Rows rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w) {
  const char* op = "rmsnorm_forward";
  TT_CHECK(out.shape() == inp.shape(), "%s: out %s != inp %s", op, s(out).c_str(), s(inp).c_str());
  Rows d{0, last_dim(inp)};
  d.N = inp.numel() / d.C;
  same_dtype(op, inp, {&out, &w});
  master_dtype(op, inp.dtype(), {&rstd});
  TT_CHECK(rstd.numel() == d.N && w.numel() == d.C, "%s: inp %s rstd %s w %s", op, s(inp).c_str(), s(rstd).c_str(),
           s(w).c_str());
  return d;
}

Rows residual_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd, const Tensor& a,
                              const Tensor& b, const Tensor& w) {
  elementwise("residual_rmsnorm_forward", res, a, b);
  return rmsnorm_forward(out, rstd, res, w);
}

Rows rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout, const Tensor& inp, const Tensor& w,
                      const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  TT_CHECK(dinp.shape() == inp.shape() && dout.shape() == inp.shape(), "%s: dinp %s dout %s inp %s", op,
           s(dinp).c_str(), s(dout).c_str(), s(inp).c_str());
  Rows d{0, last_dim(inp)};
  d.N = inp.numel() / d.C;
  same_dtype(op, inp, {&dinp, &dout, &w});
  master_dtype(op, inp.dtype(), {&rstd});
  grad_dtype(op, inp.dtype(), {&dw});
  TT_CHECK(rstd.numel() == d.N && w.numel() == d.C && dw.numel() == d.C, "%s: inp %s rstd %s w %s dw %s", op,
           s(inp).c_str(), s(rstd).c_str(), s(w).c_str(), s(dw).c_str());
  return d;
}

Rope rope(const Tensor& qkv, const Tensor& table, const Tensor& positions, int heads, int kv_heads) {
  const char* op = "rope";
  const bool at = present(positions);
  TT_CHECK(qkv.shape().rank() == (at ? 2 : 3) && table.shape().rank() == 2 && heads > 0 && kv_heads > 0 &&
               heads % kv_heads == 0,
           "%s: qkv %s (expected [B, T, Cq], or [B, Cq] with positions) table %s heads %d kv heads %d", op,
           s(qkv).c_str(), s(table).c_str(), heads, kv_heads);
  Rope d{static_cast<int>(qkv.dim(0)), at ? 1 : static_cast<int>(qkv.dim(1)), heads, kv_heads,
         static_cast<int>(table.dim(1)), static_cast<int>(table.dim(0))};
  master_dtype(op, qkv.dtype(), {&table});
  TT_CHECK(d.hs > 0 && d.hs % 2 == 0 && qkv.dim(qkv.shape().rank() - 1) == static_cast<int64_t>(heads + 2 * kv_heads) * d.hs &&
               (at || d.T <= d.rows),
           "%s: qkv %s is not [q | k | v] of %d query and %d key/value heads of %d channels (table %s)", op,
           s(qkv).c_str(), heads, kv_heads, d.hs, s(table).c_str());
  if (at) {
    is_i32(op, positions);
    TT_CHECK(positions.numel() == d.B, "%s: positions %s for %d rows", op, s(positions).c_str(), d.B);
  }
  return d;
}

Matmul swiglu(const char* op, const Tensor& out, const Tensor& inp) {
  const int F = last_dim(out);
  TT_CHECK(F > 0 && last_dim(inp) == 2 * F && inp.numel() / (2 * F) == out.numel() / F,
           "%s: inp %s must be [N, 2F] for out %s [N, F]", op, s(inp).c_str(), s(out).c_str());
  same_dtype(op, inp, {&out});
  return Matmul{out.numel() / F, 2 * F, F};
}

int64_t elementwise(const char* op, const Tensor& a, const Tensor& b, const Tensor& c) {
  TT_CHECK(a.shape() == b.shape() && (!present(c) || c.shape() == a.shape()), "%s: shapes %s, %s, %s", op,
           s(a).c_str(), s(b).c_str(), s(c).c_str());
  same_dtype(op, a, {&b, &c});
  return a.numel();
}

Softmax softmax_xent_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits, const Tensor& targets,
                             int vocab) {
  const char* op = "softmax_xent_forward";
  TT_CHECK(probs.shape() == logits.shape(), "%s: probs %s != logits %s", op, s(probs).c_str(), s(logits).c_str());
  Softmax d{0, last_dim(logits), vocab};
  TT_CHECK(vocab >= 1 && vocab <= d.V, "%s: vocab %d outside [1, %d]", op, vocab, d.V);
  d.N = logits.numel() / d.V;
  is_i32(op, targets);
  same_dtype(op, logits, {&probs});
  master_dtype(op, logits.dtype(), {&losses});
  TT_CHECK(losses.numel() == d.N && targets.numel() == d.N, "%s: losses %s targets %s logits %s", op,
           s(losses).c_str(), s(targets).c_str(), s(logits).c_str());
  return d;
}

Softmax softmax_xent_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets, int vocab) {
  const char* op = "softmax_xent_backward";
  TT_CHECK(dlogits.shape() == probs.shape(), "%s: dlogits %s != probs %s", op, s(dlogits).c_str(), s(probs).c_str());
  Softmax d{0, last_dim(probs), vocab};
  TT_CHECK(vocab >= 1 && vocab <= d.V, "%s: vocab %d outside [1, %d]", op, vocab, d.V);
  d.N = probs.numel() / d.V;
  is_i32(op, targets);
  same_dtype(op, probs, {&dlogits});
  TT_CHECK(targets.numel() == d.N, "%s: targets %s for probs %s", op, s(targets).c_str(), s(probs).c_str());
  return d;
}

Softmax xent_parallel(const char* op, const Tensor& stats, const Tensor& logits, const Tensor& targets,
                      int64_t vocab_begin, int vocab) {
  TT_CHECK(logits.shape().rank() == 2, "%s: logits must be [N, local columns], got %s", op, s(logits).c_str());
  Softmax d{logits.dim(0), static_cast<int>(logits.dim(1)), 0};
  TT_CHECK(vocab_begin >= 0 && vocab >= 1, "%s: vocab_begin %lld, vocab %d", op, static_cast<long long>(vocab_begin),
           vocab);
  // The local columns that take part: those before the global `vocab`.
  d.valid = static_cast<int>(std::clamp<int64_t>(vocab - vocab_begin, 0, d.V));
  master_dtype(op, logits.dtype(), {&stats});
  TT_CHECK(stats.shape().rank() == 2 && stats.dim(0) == 3 && stats.dim(1) == d.N, "%s: stats %s for logits %s", op,
           s(stats).c_str(), s(logits).c_str());
  if (present(targets)) {
    is_i32(op, targets);
    TT_CHECK(targets.numel() == d.N, "%s: targets %s for logits %s", op, s(targets).c_str(), s(logits).c_str());
  }
  return d;
}

Softmax xent_finish(const Tensor& losses, const Tensor& dlogits, const Tensor& logits, const Tensor& stats,
                    const Tensor& targets, int64_t vocab_begin, int vocab) {
  const char* op = "xent_finish";
  const Softmax d = xent_parallel(op, stats, logits, targets, vocab_begin, vocab);
  TT_CHECK(present(targets), "%s: no targets", op);
  master_dtype(op, logits.dtype(), {&losses});
  TT_CHECK(losses.numel() == d.N, "%s: losses %s for logits %s", op, s(losses).c_str(), s(logits).c_str());
  if (present(dlogits))
    TT_CHECK(dlogits.shape() == logits.shape() && dlogits.dtype() == logits.dtype(), "%s: dlogits %s != logits %s",
             op, s(dlogits).c_str(), s(logits).c_str());
  return d;
}

int64_t convert(const Tensor& dst, const Tensor& src) {
  TT_CHECK(dst.numel() == src.numel(), "convert: %s and %s differ in size", s(dst).c_str(), s(src).c_str());
  return dst.numel();
}

int64_t sum_squares(const Tensor& out, const Tensor& x) {
  // Note [bf16 gradients]: the sum of a bf16 tensor's squares in f32.
  const DType sum = x.dtype() == DType::kBF16 ? DType::kF32 : x.dtype();
  TT_CHECK(out.numel() >= 1 && out.dtype() == sum, "sum_squares: out %s must hold one %s", s(out).c_str(),
           dtype_name(sum));
  return x.numel();
}

int64_t adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& grad_norm_sq,
              const AdamWArgs& args, const Tensor& copy_out) {
  if (args.split_master) {  // Note [master in two halves]: two bf16 halves of an f32 master
    TT_CHECK(param.dtype() == DType::kBF16 && copy_out.dtype() == DType::kBF16 && param.shape() == copy_out.shape(),
             "adamw_update: a master in two halves needs bf16 param and copy_out of one shape, got %s and %s",
             s(param).c_str(), s(copy_out).c_str());
    TT_CHECK(grad.shape() == param.shape(), "adamw_update: grad %s and param %s differ", s(grad).c_str(),
             s(param).c_str());
    elementwise("adamw_update", m, v);
    TT_CHECK(m.shape() == param.shape(), "adamw_update: m %s and param %s differ", s(m).c_str(), s(param).c_str());
  } else {
    TT_CHECK(grad.shape() == param.shape(), "adamw_update: grad %s and param %s differ", s(grad).c_str(),
             s(param).c_str());
    elementwise("adamw_update", param, m, v);
  }
  // Note [bf16 gradients]: an f32 update may read bf16 gradients.
  TT_CHECK(grad.dtype() == m.dtype() || (grad.dtype() == DType::kBF16 && m.dtype() == DType::kF32),
           "adamw_update: grad %s with moments %s", s(grad).c_str(), s(m).c_str());
  TT_CHECK(grad_norm_sq.numel() >= 1 && grad_norm_sq.dtype() == m.dtype(),
           "adamw_update: grad_norm_sq %s must hold one %s", s(grad_norm_sq).c_str(), dtype_name(m.dtype()));
  TT_CHECK(copy_out.raw() == nullptr || copy_out.numel() == param.numel(),
           "adamw_update: copy_out %s and param %s differ in size", s(copy_out).c_str(), s(param).c_str());
  TT_CHECK(args.pieces >= 0 && args.pieces <= AdamWArgs::kMaxPieces, "adamw_update: %d pieces", args.pieces);
  int64_t begin = 0;
  for (int i = 0; i < args.pieces; ++i) {
    TT_CHECK(args.piece_end[static_cast<size_t>(i)] > begin, "adamw_update: piece %d is empty or out of order", i);
    begin = args.piece_end[static_cast<size_t>(i)];
  }
  TT_CHECK(args.pieces == 0 || begin == param.numel(),
           "adamw_update: the pieces cover %lld of %s's elements", static_cast<long long>(begin), s(param).c_str());
  return param.numel();
}

}  // namespace tt::shapes
