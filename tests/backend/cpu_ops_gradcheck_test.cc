// Gradient check of every CPU op against central finite differences, in double precision: for an op y = f(x) and a
// random upstream gradient dy, the backward kernel's dx must equal d/dx sum(dy * f(x)).
#include <cmath>
#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/kernels.h"
#include "core/rng.h"
#include "check_util.h"

namespace tt {
namespace {

using Vec = std::vector<double>;

Vec randn(size_t n, Rng& rng, double scale = 1.0) {
  Vec v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of L(x) = sum(dy * f(x)) with respect to every element of x (x is modified and restored).
Vec numeric_grad(Vec& x, const std::function<double()>& loss, double h = 1e-6) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double lp = loss();
    x[i] = keep - h;
    const double lm = loss();
    x[i] = keep;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

constexpr double kAtol = 1e-7, kRtol = 1e-6;

TEST(CpuOpsGradcheck, Embedding) {
  Rng rng(1);
  const int B = 2, T = 3, C = 5, V = 7;
  std::vector<int32_t> tok = {1, 4, 4, 0, 6, 1};
  Vec wte = randn(V * C, rng), wpe = randn(T * C, rng), dy = randn(B * T * C, rng), out(B * T * C);
  auto loss = [&] {
    cpu::embedding_forward<double>(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, 0, V);
    return dot(out, dy);
  };
  // dwte is added to (it starts at zero here), dwpe overwritten (it starts as NaN: nothing may read it).
  Vec dwte(V * C, 0.0), dwpe(T * C, std::numeric_limits<double>::quiet_NaN());
  cpu::embedding_backward<double>(dwte.data(), dwpe.data(), dy.data(), tok.data(), B, T, C, 0, V, false);
  EXPECT_TRUE(testing::all_close("dwte", dwte, numeric_grad(wte, loss), kAtol, kRtol));
  EXPECT_TRUE(testing::all_close("dwpe", dwpe, numeric_grad(wpe, loss), kAtol, kRtol));
  // Note [vocabulary-parallel cross-entropy]: rows [3, 7) of wte on one rank, [0, 3) and wpe on the other; the two
  // outputs add up to the whole embedding, and each rank's gradient is its rows of the whole one.
  Vec lo(B * T * C), hi(B * T * C), dlo(3 * C, 0.0), dhi(4 * C, 0.0);
  cpu::embedding_forward<double>(lo.data(), tok.data(), wte.data(), wpe.data(), B, T, C, 0, 3);
  cpu::embedding_forward<double>(hi.data(), tok.data(), wte.data() + 3 * C, nullptr, B, T, C, 3, 4);
  loss();
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(lo[i] + hi[i], out[i]) << i;
  cpu::embedding_backward<double>(dlo.data(), nullptr, dy.data(), tok.data(), B, T, C, 0, 3, true);
  cpu::embedding_backward<double>(dhi.data(), nullptr, dy.data(), tok.data(), B, T, C, 3, 4, true);
  EXPECT_EQ(Vec(dwte.begin(), dwte.begin() + 3 * C), dlo);
  EXPECT_EQ(Vec(dwte.begin() + 3 * C, dwte.end()), dhi);
}

// Note [vocabulary-parallel cross-entropy]: the three steps over two ranks' columns (with the maximum and the sums
// taken over them between the steps, as the ranks' collectives do) give the losses and dlogits of the one-rank op,
// padding columns included.
TEST(CpuOpsGradcheck, VocabularyParallelCrossEntropyEqualsTheWholeOne) {
  Rng rng(9);
  const int N = 5, Vp = 12, vocab = 10, half = Vp / 2;
  Vec logits = randn(N * Vp, rng, 3.0);
  std::vector<int32_t> tg = {0, 9, 5, 6, 3};
  Vec loss(N), probs(N * Vp), dlogits(N * Vp);
  cpu::softmax_xent_forward<double>(loss.data(), probs.data(), logits.data(), tg.data(), N, Vp, vocab);
  cpu::softmax_xent_backward<double>(dlogits.data(), probs.data(), tg.data(), 0.25, N, Vp, vocab);
  Vec part[2] = {Vec(N * half), Vec(N * half)}, stats[2] = {Vec(3 * N), Vec(3 * N)};
  for (int r = 0; r < 2; ++r)
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < half; ++j) part[r][n * half + j] = logits[n * Vp + r * half + j];
  const int valid[2] = {half, vocab - half};
  for (int r = 0; r < 2; ++r) cpu::xent_local_max<double>(stats[r].data(), part[r].data(), N, half, valid[r]);
  for (int n = 0; n < N; ++n) stats[0][n] = stats[1][n] = std::max(stats[0][n], stats[1][n]);
  for (int r = 0; r < 2; ++r)
    cpu::xent_local_sums<double>(stats[r].data(), part[r].data(), tg.data(), N, half, valid[r], r * half);
  for (int i = N; i < 3 * N; ++i) stats[0][i] = stats[1][i] = stats[0][i] + stats[1][i];
  for (int r = 0; r < 2; ++r) {
    Vec l(N), d(N * half);
    cpu::xent_finish<double>(l.data(), d.data(), part[r].data(), stats[r].data(), tg.data(), 0.25, N, half, valid[r],
                             r * half);
    for (int n = 0; n < N; ++n) {
      EXPECT_NEAR(l[n], loss[n], 1e-12) << "rank " << r << " row " << n;
      for (int j = 0; j < half; ++j)
        EXPECT_NEAR(d[n * half + j], dlogits[n * Vp + r * half + j], 1e-12) << "rank " << r << " " << n << "," << j;
    }
    cpu::xent_finish<double>(l.data(), nullptr, part[r].data(), stats[r].data(), tg.data(), 0.25, N, half, valid[r],
                             r * half);  // evaluation: the losses alone
    for (int n = 0; n < N; ++n) EXPECT_NEAR(l[n], loss[n], 1e-12);
  }
}

TEST(CpuOpsGradcheck, LayerNorm) {
  Rng rng(2);
  const int N = 6, C = 9;
  Vec x = randn(N * C, rng, 2.0), w = randn(C, rng), b = randn(C, rng), dy = randn(N * C, rng);
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    cpu::layernorm_forward<double>(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(out, dy);
  };
  loss();
  // Accumulating: the gradients are added to what the buffers hold (dx is always added to).
  Vec dx(N * C, 0.5), dw(C, -0.25), db(C, 1.0);
  cpu::layernorm_backward<double>(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                                  rstd.data(), N, C, true);
  // Overwriting: dw and db start as NaN, which nothing may read.
  Vec dx2(N * C, 0.5), dw2(C, std::numeric_limits<double>::quiet_NaN()), db2(dw2);
  cpu::layernorm_backward<double>(dx2.data(), dw2.data(), db2.data(), dy.data(), x.data(), w.data(), mean.data(),
                                  rstd.data(), N, C, false);
  Vec nx = numeric_grad(x, loss), nw = numeric_grad(w, loss), nb = numeric_grad(b, loss);
  for (auto& v : nx) v += 0.5;
  for (auto& v : nw) v -= 0.25;
  for (auto& v : nb) v += 1.0;
  EXPECT_TRUE(testing::all_close("dx", dx, nx, kAtol, kRtol));
  EXPECT_TRUE(testing::all_close("dw", dw, nw, kAtol, kRtol));
  EXPECT_TRUE(testing::all_close("db", db, nb, kAtol, kRtol));
  EXPECT_EQ(dx2, dx);
  for (int c = 0; c < C; ++c) {
    EXPECT_NEAR(dw2[c], dw[c] + 0.25, 1e-12) << c;  // what the accumulating call added
    EXPECT_NEAR(db2[c], db[c] - 1.0, 1e-12) << c;
  }
}

TEST(CpuOpsGradcheck, Matmul) {
  Rng rng(3);
  const int N = 5, C = 4, OC = 6;
  Vec x = randn(N * C, rng), w = randn(OC * C, rng), b = randn(OC, rng), dy = randn(N * OC, rng), out(N * OC);
  auto loss = [&] {
    cpu::matmul_forward<double>(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    return dot(out, dy);
  };
  // dx starts as garbage: matmul_backward overwrites dinp; dw and db start as NaN and are overwritten too.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Vec dx = randn(N * C, rng), dw(OC * C, nan), db(OC, nan);
  cpu::matmul_backward<double>(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC, false);
  EXPECT_TRUE(testing::all_close("dx", dx, numeric_grad(x, loss), kAtol, kRtol));
  EXPECT_TRUE(testing::all_close("dw", dw, numeric_grad(w, loss), kAtol, kRtol));
  EXPECT_TRUE(testing::all_close("db", db, numeric_grad(b, loss), kAtol, kRtol));
  // Accumulating adds the same gradients to what dw and db hold.
  Vec dw_add(OC * C, -0.25), db_add(OC, 1.0);
  cpu::matmul_backward<double>(nullptr, dw_add.data(), db_add.data(), dy.data(), x.data(), w.data(), N, C, OC, true);
  for (int i = 0; i < OC * C; ++i) EXPECT_NEAR(dw_add[i], dw[i] - 0.25, 1e-12) << i;
  for (int o = 0; o < OC; ++o) EXPECT_NEAR(db_add[o], db[o] + 1.0, 1e-12) << o;
  // Without bias the forward must not read one.
  loss();  // refresh out at the unperturbed inputs
  Vec out2(N * OC);
  cpu::matmul_forward<double>(out2.data(), x.data(), w.data(), nullptr, N, C, OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) EXPECT_NEAR(out2[n * OC + o] + b[o], out[n * OC + o], 1e-12);
}

// Multi-head (KV = H) and grouped-query (KV = 1 and 2 of 4: each key/value head serves a group of query heads).
TEST(CpuOpsGradcheck, Attention) {
  for (const int KV : {4, 2, 1}) {
    SCOPED_TRACE("key/value heads " + std::to_string(KV));
    Rng rng(4);
    const int B = 2, T = 5, C = 16, H = 4, hs = C / H, Cq = C + 2 * KV * hs;
    Vec qkv = randn(B * T * Cq, rng), dy = randn(B * T * C, rng), out(B * T * C), lse(B * H * T);
    auto loss = [&] {
      cpu::attention_forward<double>(out.data(), lse.data(), qkv.data(), B, T, C, H, KV);
      return dot(out, dy);
    };
    loss();
    // lse is the log-sum-exp of each row's scaled causal scores, computed here directly (query head h reads key
    // head h / (H / KV)).
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < T; ++t) {
          double sum = 0;
          for (int t2 = 0; t2 <= t; ++t2) {
            double sc = 0;
            for (int c = 0; c < hs; ++c)
              sc += qkv[(b * T + t) * Cq + h * hs + c] * qkv[(b * T + t2) * Cq + C + (h / (H / KV)) * hs + c];
            sum += std::exp(sc / std::sqrt(double(hs)));
          }
          EXPECT_NEAR(lse[(b * H + h) * T + t], std::log(sum), 1e-12);
        }
    // Causality: changing the last token's k and v leaves every earlier output as it was.
    const Vec before = out;
    for (int b = 0; b < B; ++b)
      for (int c = C; c < Cq; ++c) qkv[(b * T + T - 1) * Cq + c] += 0.5;
    loss();
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < (T - 1) * C; ++i) EXPECT_EQ(out[b * T * C + i], before[b * T * C + i]);
    loss();
    // Every element written (the contract): the gradient buffer starts as NaN.
    Vec dqkv(qkv.size(), std::numeric_limits<double>::quiet_NaN());
    cpu::attention_backward<double>(dqkv.data(), dy.data(), qkv.data(), lse.data(), B, T, C, H, KV);
    EXPECT_TRUE(testing::all_close("dqkv", dqkv, numeric_grad(qkv, loss), kAtol, kRtol));
  }
}

TEST(CpuOpsGradcheck, RmsNorm) {
  Rng rng(7);
  const int N = 6, C = 9;
  Vec x = randn(N * C, rng, 2.0), w = randn(C, rng), dy = randn(N * C, rng), out(N * C), rstd(N);
  auto loss = [&] {
    cpu::rmsnorm_forward<double>(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
    return dot(out, dy);
  };
  loss();
  for (int n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c];
    EXPECT_NEAR(rstd[n], 1 / std::sqrt(ms / C + 1e-5), 1e-12);
  }
  // dx is added to (here to 0.5), dw written, then added to.
  Vec dx(N * C, 0.5), dw(C, std::numeric_limits<double>::quiet_NaN());
  cpu::rmsnorm_backward<double>(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C, false);
  Vec gx = numeric_grad(x, loss);
  for (double& g : gx) g += 0.5;
  EXPECT_TRUE(testing::all_close("dx", dx, gx, kAtol, kRtol));
  EXPECT_TRUE(testing::all_close("dw", dw, numeric_grad(w, loss), kAtol, kRtol));
  Vec dw2(C, 1.0), unused(N * C, 0.0);
  cpu::rmsnorm_backward<double>(unused.data(), dw2.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C, true);
  for (int c = 0; c < C; ++c) EXPECT_NEAR(dw2[c], dw[c] + 1.0, 1e-12);
}

// The rotation of the q and k heads (not the v heads) by each position's angles; the inverse is its transpose (the
// backward), and with positions each row takes its own table row.
TEST(CpuOpsGradcheck, Rope) {
  Rng rng(8);
  const int B = 2, T = 3, H = 4, KV = 2, hs = 6, Cq = (H + 2 * KV) * hs;
  Vec table(T * hs);
  for (int p = 0; p < T; ++p)
    for (int i = 0; i < hs / 2; ++i) {
      const double a = p * std::pow(10000.0, -2.0 * i / hs);
      table[p * hs + i] = std::cos(a);
      table[p * hs + hs / 2 + i] = std::sin(a);
    }
  Vec x = randn(B * T * Cq, rng), dy = randn(B * T * Cq, rng);
  Vec y = x;
  cpu::rope<double>(y.data(), table.data(), nullptr, B, T, H, KV, hs, false);
  for (int bt = 0; bt < B * T; ++bt) {
    const int p = bt % T;
    for (int h = 0; h < H + 2 * KV; ++h)
      for (int i = 0; i < hs / 2; ++i) {
        const double* in = &x[bt * Cq + h * hs];
        const double* o = &y[bt * Cq + h * hs];
        if (h >= H + KV) {  // v heads untouched
          EXPECT_EQ(o[i], in[i]);
          continue;
        }
        const double c = table[p * hs + i], sn = table[p * hs + hs / 2 + i];
        EXPECT_NEAR(o[i], in[i] * c - in[hs / 2 + i] * sn, 1e-14);
        EXPECT_NEAR(o[hs / 2 + i], in[hs / 2 + i] * c + in[i] * sn, 1e-14);
      }
  }
  // The backward: d/dx sum(dy * rope(x)) = rope^T dy = the inverse rotation of dy.
  auto loss = [&] {
    Vec r = x;
    cpu::rope<double>(r.data(), table.data(), nullptr, B, T, H, KV, hs, false);
    return dot(r, dy);
  };
  Vec dx = dy;
  cpu::rope<double>(dx.data(), table.data(), nullptr, B, T, H, KV, hs, true);
  EXPECT_TRUE(testing::all_close("dx", dx, numeric_grad(x, loss), kAtol, kRtol));
  // Rows at given positions (decoding): row b at table row positions[b].
  const std::vector<int32_t> pos = {2, 0};
  Vec one(x.begin(), x.begin() + 2 * Cq), want(2 * Cq);
  cpu::rope<double>(one.data(), table.data(), pos.data(), 2, 1, H, KV, hs, false);
  for (int b = 0; b < 2; ++b) {
    Vec row(x.begin() + b * Cq, x.begin() + (b + 1) * Cq);
    Vec full(T * Cq, 0.0);
    std::copy(row.begin(), row.end(), full.begin() + pos[b] * Cq);
    cpu::rope<double>(full.data(), table.data(), nullptr, 1, T, H, KV, hs, false);
    for (int c = 0; c < Cq; ++c) EXPECT_EQ(one[b * Cq + c], full[pos[b] * Cq + c]) << b << " " << c;
  }
}

TEST(CpuOpsGradcheck, SwiGlu) {
  Rng rng(9);
  const int N = 4, F = 7;
  Vec x = randn(N * 2 * F, rng, 2.0), dy = randn(N * F, rng), out(N * F);
  auto loss = [&] {
    cpu::swiglu_forward<double>(out.data(), x.data(), N, F);
    return dot(out, dy);
  };
  loss();
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < F; ++i) {
      const double g = x[n * 2 * F + i], u = x[n * 2 * F + F + i];
      EXPECT_NEAR(out[n * F + i], g / (1 + std::exp(-g)) * u, 1e-14);
    }
  Vec dx(x.size(), std::numeric_limits<double>::quiet_NaN());  // overwritten
  cpu::swiglu_backward<double>(dx.data(), x.data(), dy.data(), N, F);
  EXPECT_TRUE(testing::all_close("dx", dx, numeric_grad(x, loss), kAtol, kRtol));
}

TEST(CpuOpsGradcheck, Gelu) {
  Rng rng(5);
  const int n = 50;
  Vec x = randn(n, rng, 3.0), dy = randn(n, rng), out(n);
  auto loss = [&] {
    cpu::gelu_forward<double>(out.data(), x.data(), n);
    return dot(out, dy);
  };
  Vec dx(n, 0.0);
  cpu::gelu_backward<double>(dx.data(), x.data(), dy.data(), n);
  EXPECT_TRUE(testing::all_close("dx", dx, numeric_grad(x, loss), kAtol, kRtol));
}

TEST(CpuOpsGradcheck, Residual) {
  Rng rng(6);
  const int n = 20;
  Vec a = randn(n, rng), b = randn(n, rng), out(n);
  cpu::residual_forward<double>(out.data(), a.data(), b.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
}

TEST(CpuOpsGradcheck, SoftmaxCrossEntropy) {
  Rng rng(7);
  const int N = 4, V = 11;
  std::vector<int32_t> tgt = {3, 0, 10, 7};
  Vec logits = randn(N * V, rng, 2.0), probs(N * V), losses(N);
  const double dloss = 0.25;
  auto loss = [&] {
    cpu::softmax_xent_forward<double>(losses.data(), probs.data(), logits.data(), tgt.data(), N, V, V);
    double s = 0;
    for (double l : losses) s += l;
    return s * dloss;
  };
  loss();
  Vec dlogits(N * V);
  cpu::softmax_xent_backward<double>(dlogits.data(), probs.data(), tgt.data(), dloss, N, V, V);
  EXPECT_TRUE(testing::all_close("dlogits", dlogits, numeric_grad(logits, loss), kAtol, kRtol));
  // In place (probs aliasing logits) gives the same losses.
  loss();  // refresh losses and probs at the unperturbed logits
  Vec inplace = logits, losses2(N);
  cpu::softmax_xent_forward<double>(losses2.data(), inplace.data(), inplace.data(), tgt.data(), N, V, V);
  EXPECT_TRUE(testing::all_close("in-place losses", losses2, losses, 0, 0));
  EXPECT_TRUE(testing::all_close("in-place probs", inplace, probs, 0, 0));
}

TEST(CpuOpsGradcheck, SoftmaxCrossEntropyIgnoresVocabularyPadding) {
  Rng rng(9);
  const int N = 3, V = 11, valid = 8;
  std::vector<int32_t> tgt = {0, 7, 4};
  Vec logits = randn(N * V, rng, 2.0), probs(N * V), losses(N);
  cpu::softmax_xent_forward<double>(losses.data(), probs.data(), logits.data(), tgt.data(), N, V, valid);
  // The same rows cut to the valid columns give the same losses and probabilities.
  Vec cut(N * valid), cut_probs(N * valid), cut_losses(N);
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < valid; ++i) cut[n * valid + i] = logits[n * V + i];
  cpu::softmax_xent_forward<double>(cut_losses.data(), cut_probs.data(), cut.data(), tgt.data(), N, valid, valid);
  EXPECT_TRUE(testing::all_close("losses", losses, cut_losses, 0, 0));
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < valid; ++i) EXPECT_EQ(probs[n * V + i], cut_probs[n * valid + i]);
    for (int i = valid; i < V; ++i) EXPECT_EQ(probs[n * V + i], 0.0);
  }
  Vec d(N * V, 1.0);
  cpu::softmax_xent_backward<double>(d.data(), probs.data(), tgt.data(), 0.5, N, V, valid);
  for (int n = 0; n < N; ++n)
    for (int i = valid; i < V; ++i) EXPECT_EQ(d[n * V + i], 0.0);
}

TEST(CpuOps, SumSquaresIsDeterministicAndExact) {
  Rng rng(8);
  Vec x = randn(100003, rng);
  double want = 0;
  for (double v : x) want += v * v;
  const double a = cpu::sum_squares<double>(x.data(), static_cast<int64_t>(x.size()));
  const double b = cpu::sum_squares<double>(x.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(a, b);
  EXPECT_NEAR(a, want, 1e-9 * want);
}

TEST(CpuOps, AdamWMatchesClosedForm) {
  // One step from zero moments: m = (1-b1) g, v = (1-b2) g^2, so the update is lr * sign(g) (up to eps), and
  // decayed parameters shrink by (1 - lr*wd) first. With clipping the gradient is scaled by clip/norm.
  Vec p = {1.0, -2.0, 0.5}, g = {0.3, -0.4, 0.0}, m(3, 0.0), v(3, 0.0);
  const double norm_sq = 0.25;  // norm 0.5 -> clip 0.25 scales g by 0.5 (minus the 1e-6 guard)
  cpu::adamw_update<double>(p.data(), g.data(), m.data(), v.data(), 3, norm_sq, 0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, 1,
                            0.25f);
  const double lr = static_cast<double>(0.01f), wd = static_cast<double>(0.1f);
  const double scale = static_cast<double>(0.25f) / (0.5 + 1e-6);
  EXPECT_NEAR(p[0], 1.0 * (1 - lr * wd) - lr, 1e-8);
  EXPECT_NEAR(p[1], -2.0 * (1 - lr * wd) + lr, 1e-8);
  EXPECT_NEAR(p[2], 0.5 * (1 - lr * wd), 1e-12);
  EXPECT_NEAR(m[0], (1 - static_cast<double>(0.9f)) * 0.3 * scale, 1e-7);
}

}  // namespace
}  // namespace tt
