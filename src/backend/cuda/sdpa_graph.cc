#include "backend/cuda/sdpa_graph.h"

#include "core/check.h"

namespace tt::cudnn {
namespace {

// Builds one graph: tensors by name, operations in order.
class Builder {
 public:
  explicit Builder(const SdpaDims& d) : d_(d) {}

  int64_t io(int64_t uid, const char* name, DataType dt, std::array<int64_t, 4> dims, std::array<int64_t, 4> strides) {
    g_.tensors.push_back({uid, name, dt, dims, strides, false, false});
    return uid;
  }
  int64_t scalar(int64_t uid, const char* name) {
    g_.tensors.push_back({uid, name, kFloat, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true});
    return uid;
  }
  int64_t virt(const char* name, DataType dt, std::array<int64_t, 4> dims, std::array<int64_t, 4> strides) {
    const int64_t uid = next_++;
    g_.tensors.push_back({uid, name, dt, dims, strides, true, false});
    return uid;
  }
  // Shapes of the intermediates.
  int64_t scores(const char* name, DataType dt = kFloat) {  // [B, H, T, T], row-major
    return virt(name, dt, {d_.B, d_.H, d_.T, d_.T}, {d_.H * d_.T * d_.T, d_.T * d_.T, d_.T, 1});
  }
  int64_t scores_t(const char* name) {  // the transpose of a scores tensor, bf16 (a matmul's A operand)
    return virt(name, kBf16, {d_.B, d_.H, d_.T, d_.T}, {d_.H * d_.T * d_.T, d_.T * d_.T, 1, d_.T});
  }
  int64_t rows(const char* name, DataType dt = kFloat) {  // [B, H, T, 1]
    return virt(name, dt, {d_.B, d_.H, d_.T, 1}, {d_.H * d_.T, d_.T, 1, 1});
  }

  int64_t matmul(int64_t a, int64_t b, int64_t y) {
    g_.ops.push_back({SdpaOpKind::kMatmul, kPwIdentity, kReduceAdd, kFloat, -1, a, b, 0, y});
    return y;
  }
  int64_t pw(PointwiseMode m, int64_t x, int64_t b, int64_t y, DataType prec = kFloat) {
    g_.ops.push_back({SdpaOpKind::kPointwise, m, kReduceAdd, prec, -1, x, b, 0, y});
    return y;
  }
  int64_t gen_index(int64_t axis, int64_t x, int64_t y) {
    g_.ops.push_back({SdpaOpKind::kPointwise, kPwGenIndex, kReduceAdd, kFloat, axis, x, 0, 0, y});
    return y;
  }
  int64_t select(int64_t x, int64_t b, int64_t t, int64_t y) {
    g_.ops.push_back({SdpaOpKind::kPointwise, kPwBinarySelect, kReduceAdd, kFloat, -1, x, b, t, y});
    return y;
  }
  int64_t reduce(ReduceOp r, int64_t x, int64_t y) {
    g_.ops.push_back({SdpaOpKind::kReduction, kPwIdentity, r, kFloat, -1, x, 0, 0, y});
    return y;
  }
  int64_t reshape(int64_t x, int64_t y) {
    g_.ops.push_back({SdpaOpKind::kReshape, kPwIdentity, kReduceAdd, kFloat, -1, x, 0, 0, y});
    return y;
  }
  // The causal mask (keys after the query get -inf): col and row indices of s, keep = row >= col, s or -inf.
  int64_t causal_mask(int64_t s, int64_t neg) {
    const int64_t col = gen_index(3, s, scores("col", kInt32));
    const int64_t row = gen_index(2, s, scores("row", kInt32));
    const int64_t keep = pw(kPwCmpGe, row, col, scores("keep", kBoolean), kBoolean);
    return select(s, neg, keep, scores("masked"));
  }

  // q/k/v views of qkv (Note [sdpa layout]).
  std::array<int64_t, 4> head_rows() const { return {d_.Cq() * d_.T, d_.hs, d_.Cq(), 1}; }
  std::array<int64_t, 4> head_cols() const { return {d_.Cq() * d_.T, d_.hs, 1, d_.Cq()}; }
  std::array<int64_t, 4> out_rows() const { return {d_.C() * d_.T, d_.hs, d_.C(), 1}; }
  std::array<int64_t, 4> bhtd() const { return {d_.B, d_.H, d_.T, d_.hs}; }
  std::array<int64_t, 4> kv_btd() const { return {d_.B, d_.kv(), d_.T, d_.hs}; }  // k or v of the KV heads
  std::array<int64_t, 4> kv_bdt() const { return {d_.B, d_.kv(), d_.hs, d_.T}; }  // transposed
  std::array<int64_t, 4> contiguous() const { return {d_.H * d_.T * d_.hs, d_.T * d_.hs, d_.hs, 1}; }
  // A matmul's result that is d(k) or d(v) itself (multi-head), or of every query head, summed over each group
  // into it (grouped-query).
  void grad_kv(int64_t a, int64_t b, int64_t grad, const char* full) {
    if (d_.kv() == d_.H) {
      matmul(a, b, grad);
      return;
    }
    reduce(kReduceAdd, matmul(a, b, virt(full, kBf16, bhtd(), contiguous())), grad);
  }
  std::array<int64_t, 4> stats_strides() const { return {d_.H * d_.T, d_.T, 1, 1}; }

  SdpaGraph take() { return std::move(g_); }

 private:
  SdpaDims d_;
  SdpaGraph g_;
  int64_t next_ = kFirstVirtualUid;
};

}  // namespace

const SdpaTensor& SdpaGraph::tensor(int64_t uid) const {
  for (const SdpaTensor& t : tensors)
    if (t.uid == uid) return t;
  TT_CHECK(false, "sdpa graph: no tensor with uid %lld", static_cast<long long>(uid));
  return tensors.front();
}

SdpaGraph sdpa_forward_graph(const SdpaDims& d) {
  Builder g(d);
  const int64_t q = g.io(kUidQ, "Q", kBf16, g.bhtd(), g.head_rows());
  const int64_t k = g.io(kUidK, "K^T", kBf16, g.kv_bdt(), g.head_cols());
  const int64_t v = g.io(kUidV, "V", kBf16, g.kv_btd(), g.head_rows());
  const int64_t o = g.io(kUidO, "O", kBf16, g.bhtd(), g.out_rows());
  const int64_t stats = g.io(kUidStats, "Stats", kFloat, {d.B, d.H, d.T, 1}, g.stats_strides());
  const int64_t scale = g.scalar(kUidScale, "scale");
  const int64_t neg = g.scalar(kUidNegInf, "neg_inf");
  const int64_t s = g.matmul(q, k, g.scores("S"));                        // 1
  const int64_t s1 = g.pw(kPwMul, s, scale, g.scores("S*scale"));        // 2
  const int64_t s2 = g.causal_mask(s1, neg);                             // 3-6
  const int64_t m = g.reduce(kReduceMax, s2, g.rows("max"));             // 7
  const int64_t sm = g.pw(kPwSub, s2, m, g.scores("S-max"));             // 8
  const int64_t e = g.pw(kPwExp, sm, 0, g.scores("exp"));                // 9
  const int64_t z = g.reduce(kReduceAdd, e, g.rows("sum"));              // 10
  const int64_t lz = g.pw(kPwLog, z, 0, g.rows("log sum"));              // 11
  g.pw(kPwAdd, m, lz, stats);                                            // 12
  const int64_t p = g.pw(kPwDiv, e, z, g.scores("P", kBf16));            // 13
  g.matmul(p, v, o);                                                     // 14
  return g.take();
}

SdpaGraph sdpa_backward_graph(const SdpaDims& d, bool deterministic) {
  Builder g(d);
  const int64_t q = g.io(kUidQ, "Q", kBf16, g.bhtd(), g.head_rows());
  const int64_t k = g.io(kUidK, "K^T", kBf16, g.kv_bdt(), g.head_cols());
  const int64_t v = g.io(kUidV, "V^T", kBf16, g.kv_bdt(), g.head_cols());
  const int64_t o = g.io(kUidO, "O", kBf16, g.bhtd(), g.out_rows());
  const int64_t dout = g.io(kUidDO, "dO", kBf16, g.bhtd(), g.out_rows());
  const int64_t stats = g.io(kUidStats, "Stats", kFloat, {d.B, d.H, d.T, 1}, g.stats_strides());
  const int64_t dq = g.io(kUidDQ, "dQ", kBf16, g.bhtd(), g.head_rows());
  const int64_t dk = g.io(kUidDK, "dK", kBf16, g.kv_btd(), g.head_rows());
  const int64_t dv = g.io(kUidDV, "dV", kBf16, g.kv_btd(), g.head_rows());
  const int64_t dsum = g.io(kUidDsum, "Dsum", kFloat, {d.B, d.H, d.T, 1}, g.stats_strides());
  const int64_t scale = g.scalar(kUidScale, "scale");
  const int64_t one = g.scalar(kUidOne, "one");
  const int64_t neg = g.scalar(kUidNegInf, "neg_inf");
  const int64_t dp = g.matmul(dout, v, g.scores("dP"));                                        // 1
  const int64_t s = g.matmul(q, k, g.scores("S"));                                             // 2
  const int64_t doo = g.pw(kPwMul, dout, o,
                           g.virt("dO*O", kFloat, g.bhtd(), {d.H * d.T * d.hs, d.T * d.hs, d.hs, 1}));  // 3
  const int64_t kview = g.reshape(k, g.virt("K", kBf16, g.kv_btd(), g.head_rows()));           // 4
  const int64_t s1 = g.pw(kPwMul, s, scale, g.scores("S*scale"));                              // 5
  const int64_t s3 = g.pw(kPwSub, s1, stats, g.scores("S*scale-Stats"));                       // 6
  const int64_t s4 = g.causal_mask(s3, neg);                                                   // 7-10
  const int64_t p = g.pw(kPwExp, s4, 0, g.scores("P"));                                        // 11
  const int64_t pt = g.reshape(p, g.scores_t("P^T"));                                          // 12
  g.grad_kv(pt, dout, dv, "dV of every head");                                               // 13 (+ sum)
  const int64_t rs = g.reduce(kReduceAdd, doo, g.rows("sum dO*O"));                            // 14
  g.pw(kPwMul, rs, one, dsum);                                                                 // 15
  const int64_t t1 = g.pw(kPwSub, dp, dsum, g.scores("dP-Dsum"));                              // 16
  const int64_t t2 = g.pw(kPwMul, t1, p, g.scores("P*(dP-Dsum)"));                             // 17
  const int64_t ds = g.pw(kPwMul, t2, scale, g.scores("dS"));                                  // 18
  const int64_t dst = g.reshape(ds, g.scores_t("dS^T"));                                       // 19
  g.grad_kv(dst, q, dk, "dK of every head");                                                  // 20 (+ sum)
  if (deterministic) {
    g.matmul(ds, kview, dq);                                                                   // 21
  } else {  // Note [non-deterministic backward]
    const int64_t acc = g.io(kUidDQAcc, "dQacc", kFloat, g.bhtd(), g.contiguous());
    g.pw(kPwIdentity, g.matmul(ds, kview, acc), 0, dq);                                        // 21, 22
  }
  return g.take();
}

int64_t sdpa_dq_accumulator_bytes(const SdpaDims& d) { return (d.B * d.H * d.T * d.hs * 4 + 255) / 256 * 256; }

int64_t sdpa_backward_workspace_bound(const SdpaDims& d, bool deterministic) {
  if (!deterministic) {
    const int64_t acc = sdpa_dq_accumulator_bytes(d);
    if (d.kv() == d.H) return acc + (int64_t(1) << 20);
    return acc + 2 * d.B * d.H * d.T * d.hs * 4 + (int64_t(16) << 20);
  }
  const int64_t t = (d.T + 127) / 128 * 128;
  if (d.kv() == d.H) return d.B * d.H * t * t * 2 + (int64_t(1) << 20);
  // Grouped-query: twice the scores' bytes (dP kept in fp32, or bf16 twice), and the full-head d(k) and d(v) in fp32.
  // Measured: cuDNN 9.19 on an H100 asks 1.06 GiB at B 2, T 2048, H 32, KV 8, hs 64 (this bound: 1.08 GiB).
  return d.B * d.H * t * t * 4 + 2 * d.B * d.H * t * d.hs * 4 + (int64_t(16) << 20);
}

}  // namespace tt::cudnn
