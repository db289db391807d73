#include "backend/cpu/kernels.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <bit>
#include <type_traits>
#include <limits>
#include <omp.h>
#include <vector>


#include "core/bf16.h"
#include "host/adamw.h"
#include "host/adamw_scalar.h"

namespace tt::cpu {
namespace {

// Splits [0, n) into `parts` contiguous ranges; range i of them.
inline void split_range(int64_t n, int parts, int i, int64_t* begin, int64_t* end) {
  const int64_t base = n / parts, rem = n % parts;
  *begin = i * base + std::min<int64_t>(i, rem);
  *end = *begin + base + (i < rem ? 1 : 0);
}

template <typename T>
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

template <>
void gemm<float>(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha,
              a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

template <>
void gemm<double>(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, double alpha,
                  const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha,
              a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)

// Note [vectorisable tanh]
// libm's tanhf is scalar and was a third of a training step. For float we compute tanh(u) = sign(u) (1 - e) / (1 + e)
// with e = exp(-2|u|) from a branch-free exp (Cody-Waite range reduction, degree-6 polynomial; relative error below
// 2e-7 on [-87, 0]) that the compiler vectorises. The absolute error of tanh stays below 3e-7, which is all GELU
// needs (it adds tanh to 1). Double precision (gradient checks) keeps std::tanh.
#pragma omp declare simd
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

template <typename T>
inline T tanh_(T u) {
  if constexpr (std::is_same_v<T, float>) {
    const float a = u < 0 ? -u : u;
    const float e = exp_nonpositive(-2.0f * a);
    const float t = (1.0f - e) / (1.0f + e);
    return u < 0 ? -t : t;
  } else {
    return std::tanh(u);
  }
}

}  // namespace

void set_num_threads(int threads) {
  if (threads <= 0) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

// ---------------------------------------------------------------------------------------------------------------------
// embedding

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C, int64_t begin,
                       int V) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < static_cast<int64_t>(B) * T_; ++bt) {
    const int t = static_cast<int>(bt % T_);
    const int64_t row = tokens[bt] - begin;
    const T* te = row >= 0 && row < V ? wte + row * C : nullptr;
    const T* pe = wpe ? wpe + static_cast<int64_t>(t) * C : nullptr;
    T* o = out + bt * C;
    for (int c = 0; c < C; ++c) o[c] = (te ? te[c] : T(0)) + (pe ? pe[c] : T(0));
  }
}

template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C, int64_t begin,
                        int V, bool add_pe) {
  // Split by channel: every thread owns a slice of columns of dwte and dwpe, so no two threads write one element and
  // the order of additions is the same on every run.
#pragma omp parallel
  {
    int64_t c0, c1;
    split_range(C, omp_get_num_threads(), omp_get_thread_num(), &c0, &c1);
    if (dwpe && !add_pe)
      for (int64_t t = 0; t < T_; ++t) std::fill(dwpe + t * C + c0, dwpe + t * C + c1, T(0));
    for (int64_t bt = 0; bt < static_cast<int64_t>(B) * T_; ++bt) {
      const int t = static_cast<int>(bt % T_);
      const T* d = dout + bt * C;
      const int64_t row = tokens[bt] - begin;
      if (row >= 0 && row < V) {
        T* te = dwte + row * C;
        for (int64_t c = c0; c < c1; ++c) te[c] += d[c];
      }
      if (dwpe) {
        T* pe = dwpe + static_cast<int64_t>(t) * C;
        for (int64_t c = c0; c < c1; ++c) pe[c] += d[c];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// layernorm

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N, int C) {
  const T eps = T(1e-5);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T m = 0;
    #pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    T v = 0;
    #pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) {
      const T d = x[c] - m;
      v += d * d;
    }
    v /= C;
    const T s = T(1) / std::sqrt(v + eps);
    T* o = out + n * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean,
                        const T* rstd, int64_t N, int C, bool add) {
#pragma omp parallel
  {
    // Rows: input gradient.
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C;
      const T* d = dout + n * C;
      const T m = mean[n], s = rstd[n];
      T dnorm_mean = 0, dnorm_norm_mean = 0;
      #pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int c = 0; c < C; ++c) {
        const T norm = (x[c] - m) * s;
        const T dnorm = w[c] * d[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
      T* di = dinp + n * C;
      for (int c = 0; c < C; ++c) {
        const T norm = (x[c] - m) * s;
        const T dnorm = w[c] * d[c];
        di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
    // Channels: weight and bias gradients, each column summed by one thread in row order.
    int64_t c0, c1;
    split_range(C, omp_get_num_threads(), omp_get_thread_num(), &c0, &c1);
    if (!add) {
      std::fill(dw + c0, dw + c1, T(0));
      std::fill(db + c0, db + c1, T(0));
    }
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C;
      const T* d = dout + n * C;
      const T m = mean[n], s = rstd[n];
      for (int64_t c = c0; c < c1; ++c) {
        dw[c] += d[c] * ((x[c] - m) * s);
        db[c] += d[c];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// matmul

template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int64_t N, int C, int OC) {
  T beta = 0;
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) std::copy(bias, bias + OC, out + n * OC);
    beta = 1;
  }
  gemm<T>(CblasNoTrans, CblasTrans, N, OC, C, T(1), inp, C, w, C, beta, out, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int64_t N, int C, int OC,
                     bool add) {
  if (dinp != nullptr) gemm<T>(CblasNoTrans, CblasNoTrans, N, C, OC, T(1), dout, OC, w, C, T(0), dinp, C);
  if (dw != nullptr) gemm<T>(CblasTrans, CblasNoTrans, OC, C, N, T(1), dout, OC, inp, C, T(add ? 1 : 0), dw, C);
  if (dbias != nullptr) {
#pragma omp parallel
    {
      int64_t o0, o1;
      split_range(OC, omp_get_num_threads(), omp_get_thread_num(), &o0, &o1);
      if (!add) std::fill(dbias + o0, dbias + o1, T(0));
      for (int64_t n = 0; n < N; ++n) {
        const T* d = dout + n * OC;
        for (int64_t o = o0; o < o1; ++o) dbias[o] += d[o];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// attention: one (batch, head) pair per task, each task writing only its own slices (no races). Within a task the
// products are GEMMs on the strided q, k, v slices of qkv; OpenBLAS runs them single-threaded inside the parallel
// region. The T x T probabilities live in a per-thread buffer for the duration of one task only: the forward keeps
// lse per row, and the backward rebuilds p = exp(scores - lse), exact zeros above the diagonal. Grouped-query
// attention: query head h reads key/value head h / (H / KV); the backward runs one task per (batch, key/value head),
// its group's query heads in order, so that their sums into dk and dv are in one fixed order.

namespace {
// Scaled scores of one (batch, head) pair into a[T, T] (lower triangle and diagonal meaningful).
template <typename T>
void attention_scores(T* a, const T* q, const T* k, int T_, int hs, int64_t Cq) {
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  gemm<T>(CblasNoTrans, CblasTrans, T_, T_, hs, scale, q, Cq, k, Cq, T(0), a, T_);
}

// Where (batch, query head) pair bh's slices start: q, k, v in a [B, T, Cq] tensor (its key/value head's k and v),
// and its rows of a [B, T, C] one.
template <typename P>
struct HeadSlices {
  P q, k, v;
  int64_t y;  // offset in [B, T, C]
};
template <typename P>
HeadSlices<P> head_slices(P qkv, int64_t bh, int T_, int C, int H, int KV) {
  const int64_t b = bh / H, h = bh % H, hs = C / H, kvh = h / (H / KV), Cq = C + 2 * int64_t(KV) * hs;
  P row = qkv + b * T_ * Cq;
  return {row + h * hs, row + C + kvh * hs, row + C + int64_t(KV) * hs + kvh * hs, b * T_ * static_cast<int64_t>(C) + h * hs};
}
}  // namespace

template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int C, int H, int KV) {
  const int hs = C / H;
  const int64_t Cq = C + 2 * static_cast<int64_t>(KV) * hs;
#pragma omp parallel
  {
    std::vector<T> a(static_cast<size_t>(T_) * static_cast<size_t>(T_));
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < static_cast<int64_t>(B) * H; ++bh) {
      const auto [q, k, v, y] = head_slices(qkv, bh, T_, C, H, KV);
      attention_scores(a.data(), q, k, T_, hs, Cq);
      for (int t = 0; t < T_; ++t) {
        T* row = a.data() + static_cast<int64_t>(t) * T_;
        T maxv = -std::numeric_limits<T>::infinity();
        for (int t2 = 0; t2 <= t; ++t2) maxv = std::max(maxv, row[t2]);
        T sum = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          const T e = std::exp(row[t2] - maxv);
          row[t2] = e;
          sum += e;
        }
        const T inv = T(1) / sum;
        for (int t2 = 0; t2 <= t; ++t2) row[t2] *= inv;
        for (int t2 = t + 1; t2 < T_; ++t2) row[t2] = 0;
        lse[bh * T_ + t] = maxv + std::log(sum);
      }
      // out = probs v
      gemm<T>(CblasNoTrans, CblasNoTrans, T_, hs, T_, T(1), a.data(), T_, v, Cq, T(0), out + y, C);
    }
  }
}

// One (batch, head) pair per task: the new row into the cache (the key/value head's k and v by the first query head
// of its group), the scores of its query, the forward's softmax (maximum, exponentials, one scale by the inverse
// sum), then the weighted sum of the values in position order.
template <typename T>
void attention_decode(T* out, T* cache, const T* qkv, const int32_t* pos, int B, int Tmax, int C, int H, int KV) {
  const int hs = C / H, group = H / KV;
  const int64_t Cq = C + 2 * static_cast<int64_t>(KV) * hs;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  // The new rows first (every head reads its key/value head's new k and v).
  for (int64_t b = 0; b < B; ++b)
    std::copy(qkv + b * Cq, qkv + (b + 1) * Cq, cache + b * Tmax * Cq + static_cast<int64_t>(pos[b]) * Cq);
#pragma omp parallel
  {
    std::vector<T> p(static_cast<size_t>(Tmax));
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < static_cast<int64_t>(B) * H; ++bh) {
      const int64_t b = bh / H, h = bh % H, kvh = h / group;
      const int n = pos[b] + 1;
      const T* rows = cache + b * Tmax * Cq;
      const T* q = qkv + b * Cq + h * hs;
      T maxv = -std::numeric_limits<T>::infinity();
      for (int j = 0; j < n; ++j) {
        const T* kj = rows + j * Cq + C + kvh * hs;
        T dot = 0;
        for (int c = 0; c < hs; ++c) dot += q[c] * kj[c];
        p[static_cast<size_t>(j)] = scale * dot;
        maxv = std::max(maxv, p[static_cast<size_t>(j)]);
      }
      T sum = 0;
      for (int j = 0; j < n; ++j) sum += p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - maxv);
      const T inv = T(1) / sum;
      T* o = out + b * static_cast<int64_t>(C) + h * hs;
      for (int c = 0; c < hs; ++c) o[c] = 0;
      for (int j = 0; j < n; ++j) {
        const T pj = p[static_cast<size_t>(j)] * inv;
        const T* vj = rows + j * Cq + C + static_cast<int64_t>(KV) * hs + kvh * hs;
        for (int c = 0; c < hs; ++c) o[c] += pj * vj[c];
      }
    }
  }
}

template <typename T>
void embedding_at(T* out, const int32_t* tokens, const int32_t* positions, const T* wte, const T* wpe, int N, int C) {
  for (int64_t i = 0; i < N; ++i) {
    const T* te = wte + static_cast<int64_t>(tokens[i]) * C;
    const T* pe = wpe + static_cast<int64_t>(positions[i]) * C;
    for (int c = 0; c < C; ++c) out[i * C + c] = te[c] + pe[c];
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* lse, int B, int T_, int C, int H, int KV) {
  const int hs = C / H, group = H / KV;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  const int64_t Cq = C + 2 * static_cast<int64_t>(KV) * hs;
#pragma omp parallel
  {
    std::vector<T> p(static_cast<size_t>(T_) * static_cast<size_t>(T_));
    std::vector<T> dp(static_cast<size_t>(T_) * static_cast<size_t>(T_));
#pragma omp for schedule(static)
    for (int64_t bkv = 0; bkv < static_cast<int64_t>(B) * KV; ++bkv) {
      for (int g = 0; g < group; ++g) {  // the group's query heads in order: dk, dv written by the first, then added
        const int64_t bh = (bkv / KV) * H + (bkv % KV) * group + g;
        const T beta = g == 0 ? T(0) : T(1);
        const auto [q, k, v, y] = head_slices(qkv, bh, T_, C, H, KV);
        const auto [dq, dk, dv, unused] = head_slices(dqkv, bh, T_, C, H, KV);
        const T* d = dout + y;
        // p = exp(scores - lse), rebuilt
        attention_scores(p.data(), q, k, T_, hs, Cq);
        for (int t = 0; t < T_; ++t) {
          T* row = p.data() + static_cast<int64_t>(t) * T_;
          const T l = lse[bh * T_ + t];
          for (int t2 = 0; t2 <= t; ++t2) row[t2] = std::exp(row[t2] - l);
          for (int t2 = t + 1; t2 < T_; ++t2) row[t2] = 0;
        }
        // dv (+)= p^T dout; dp = dout v^T (every element of dq, dk, dv is written: the backward's contract)
        gemm<T>(CblasTrans, CblasNoTrans, T_, hs, T_, T(1), p.data(), T_, d, C, beta, dv, Cq);
        gemm<T>(CblasNoTrans, CblasTrans, T_, T_, hs, T(1), d, C, v, Cq, T(0), dp.data(), T_);
        // through the softmax: ds = p * (dp - sum_t2 p dp), scaled; zero above the diagonal since p is.
        for (int t = 0; t < T_; ++t) {
          const T* pr = p.data() + static_cast<int64_t>(t) * T_;
          T* dr = dp.data() + static_cast<int64_t>(t) * T_;
          T dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int t2 = 0; t2 <= t; ++t2) dot += pr[t2] * dr[t2];
          for (int t2 = 0; t2 <= t; ++t2) dr[t2] = pr[t2] * (dr[t2] - dot) * scale;
          for (int t2 = t + 1; t2 < T_; ++t2) dr[t2] = 0;
        }
        // dq = ds k; dk (+)= ds^T q
        gemm<T>(CblasNoTrans, CblasNoTrans, T_, hs, T_, T(1), dp.data(), T_, k, Cq, T(0), dq, Cq);
        gemm<T>(CblasTrans, CblasNoTrans, T_, hs, T_, T(1), dp.data(), T_, q, Cq, beta, dk, Cq);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// The Llama family's row and element-wise kernels.

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* w, int64_t N, int C, T eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T v = 0;
    #pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) v += x[c] * x[c];
    v /= C;
    const T s = T(1) / std::sqrt(v + eps);
    T* o = out + n * C;
    for (int c = 0; c < C; ++c) o[c] = x[c] * s * w[c];
    rstd[n] = s;
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd, int64_t N, int C,
                      bool add) {
#pragma omp parallel
  {
    // Rows: dx = s (dnorm - norm mean(dnorm norm)), dnorm = w dy, norm = x s.
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C;
      const T* d = dout + n * C;
      const T s = rstd[n];
      T dot = 0;
      #pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; ++c) dot += w[c] * d[c] * (x[c] * s);
      dot /= C;
      T* di = dinp + n * C;
      for (int c = 0; c < C; ++c) di[c] += (w[c] * d[c] - (x[c] * s) * dot) * s;
    }
    // Channels: each column of dw summed by one thread in row order.
    int64_t c0, c1;
    split_range(C, omp_get_num_threads(), omp_get_thread_num(), &c0, &c1);
    for (int64_t c = c0; c < c1; ++c) {
      T sum = 0;
      for (int64_t n = 0; n < N; ++n) sum += dout[n * C + c] * (inp[n * C + c] * rstd[n]);
      dw[c] = add ? dw[c] + sum : sum;
    }
  }
}

template <typename T>
void rope(T* qkv, const T* table, const int32_t* positions, int B, int T_, int H, int KV, int hs, bool inverse) {
  const int half = hs / 2, heads = H + KV;  // the q heads, then the k heads: contiguous at the start of a row
  const int64_t Cq = static_cast<int64_t>(H + 2 * KV) * hs;
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < static_cast<int64_t>(B) * T_; ++bt) {
    const int64_t p = positions != nullptr ? positions[bt / T_] : bt % T_;
    const T* cs = table + p * hs;
    T* row = qkv + bt * Cq;
    for (int h = 0; h < heads; ++h) {
      T* x = row + static_cast<int64_t>(h) * hs;
      for (int i = 0; i < half; ++i) {
        const T c = cs[i], sn = inverse ? -cs[half + i] : cs[half + i];
        const T x1 = x[i], x2 = x[half + i];
        x[i] = x1 * c - x2 * sn;
        x[half + i] = x2 * c + x1 * sn;
      }
    }
  }
}

namespace {
template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
}  // namespace

template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* g = inp + n * 2 * F;
    const T* u = g + F;
    T* o = out + n * F;
    for (int i = 0; i < F; ++i) o[i] = g[i] * sigmoid(g[i]) * u[i];
  }
}

template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* g = inp + n * 2 * F;
    const T* u = g + F;
    const T* d = dout + n * F;
    T* dg = dinp + n * 2 * F;
    T* du = dg + F;
    for (int i = 0; i < F; ++i) {
      const T sg = sigmoid(g[i]), silu = g[i] * sg;
      dg[i] = d[i] * u[i] * (sg * (T(1) + g[i] * (T(1) - sg)));
      du[i] = d[i] * silu;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// elementwise

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  const T s = static_cast<T>(kGeluScale);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + tanh_(s * (x + T(0.044715) * x * x * x)));
  }
}

namespace {
// d gelu(x) / dx of the tanh approximation.
template <typename T>
inline T gelu_grad(T x) {
  const T s = static_cast<T>(kGeluScale);
  const T u = s * (x + T(0.044715) * x * x * x);
  const T th = tanh_(u);
  const T sech2 = T(1) - th * th;
  return T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * s * (T(1) + T(3 * 0.044715) * x * x);
}
}  // namespace

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dinp[i] += gelu_grad(inp[i]) * dout[i];
}

template <typename T>
void gelu_backward_scale(T* d, const T* pre, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] = gelu_grad(pre[i]) * d[i];
}

template <typename T>
void residual_forward(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// ---------------------------------------------------------------------------------------------------------------------
// softmax cross-entropy

template <typename T>
void softmax_xent_forward(T* losses, T* probs, const T* logits, const int32_t* targets, int64_t N, int V, int valid) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* l = logits + n * V;
    T* p = probs + n * V;
    T maxv = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : maxv)
    for (int i = 0; i < valid; ++i) maxv = std::max(maxv, l[i]);
    const int tgt = targets[n];  // < 0: no target here (Note [loss mask]): loss 0
    const T target_logit = tgt >= 0 ? l[tgt] : T(0);  // read before p (which may alias l) is written
    T sum = 0;
    for (int i = 0; i < valid; ++i) {
      const T e = std::exp(l[i] - maxv);
      p[i] = e;
      sum += e;
    }
    const T inv = T(1) / sum;
    for (int i = 0; i < valid; ++i) p[i] *= inv;
    for (int i = valid; i < V; ++i) p[i] = 0;
    losses[n] = tgt >= 0 ? std::log(sum) + maxv - target_logit : T(0);
  }
}

template <typename T>
void softmax_xent_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int64_t N, int V, int valid) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* p = probs + n * V;
    T* d = dlogits + n * V;
    const int tgt = targets[n];
    const T scale = tgt >= 0 ? dloss : T(0);  // Note [loss mask]: no gradient from a row without a target
    for (int i = 0; i < valid; ++i) d[i] = (p[i] - (i == tgt ? T(1) : T(0))) * scale;
    for (int i = valid; i < V; ++i) d[i] = 0;
  }
}

template <typename T>
void xent_local_max(T* stats, const T* logits, int64_t N, int V, int valid) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* l = logits + n * V;
    T maxv = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : maxv)
    for (int i = 0; i < valid; ++i) maxv = std::max(maxv, l[i]);
    stats[n] = maxv;
  }
}

template <typename T>
void xent_local_sums(T* stats, const T* logits, const int32_t* targets, int64_t N, int V, int valid, int64_t begin) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* l = logits + n * V;
    const T maxv = stats[n];
    T sum = 0;
    for (int i = 0; i < valid; ++i) sum += std::exp(l[i] - maxv);
    stats[N + n] = sum;
    const int64_t col = targets[n] - begin;  // a negative target (Note [loss mask]) is no rank's column
    stats[2 * N + n] = targets[n] >= 0 && col >= 0 && col < valid ? l[col] : T(0);
  }
}

template <typename T>
void xent_finish(T* losses, T* dlogits, const T* logits, const T* stats, const int32_t* targets, T dloss, int64_t N,
                 int V, int valid, int64_t begin) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T maxv = stats[n], sum = stats[N + n];
    const bool counts = targets[n] >= 0;  // Note [loss mask]
    losses[n] = counts ? std::log(sum) + maxv - stats[2 * N + n] : T(0);
    if (!dlogits) continue;
    const T* l = logits + n * V;
    T* d = dlogits + n * V;
    const int64_t tgt = counts ? targets[n] - begin : -1;
    const T inv = T(1) / sum, scale = counts ? dloss : T(0);
    for (int i = 0; i < valid; ++i) d[i] = (std::exp(l[i] - maxv) * inv - (i == tgt ? T(1) : T(0))) * scale;
    for (int i = valid; i < V; ++i) d[i] = 0;
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// optimizer

namespace {
// The sum of squares of n values value(i), in double, over the OpenMP team's even split (one partial a thread, added
// in thread order): deterministic for a fixed thread count.
template <typename Value>
double squares_in_order(int64_t n, Value value) {
  std::vector<double> partial(static_cast<size_t>(omp_get_max_threads()), 0.0);
  int used = 1;
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
#pragma omp single
    used = nt;
    int64_t i0, i1;
    split_range(n, nt, tid, &i0, &i1);
    double s = 0;
    for (int64_t i = i0; i < i1; ++i) {
      const double v = value(i);
      s += v * v;
    }
    partial[static_cast<size_t>(tid)] = s;
  }
  double total = 0;
  for (int i = 0; i < used; ++i) total += partial[static_cast<size_t>(i)];
  return total;
}
}  // namespace

template <typename T>
T sum_squares(const T* x, int64_t n) {
  return static_cast<T>(squares_in_order(n, [x](int64_t i) { return static_cast<double>(x[i]); }));
}

float sum_squares_bf16(const uint16_t* x, int64_t n) {
  return static_cast<float>(squares_in_order(n, [x](int64_t i) { return static_cast<double>(bf16_to_float(x[i])); }));
}

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, T grad_norm_sq, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step, float grad_clip) {
  if constexpr (std::is_same_v<T, float>) {
    host::adamw_update_f32(param, grad, m, v, nullptr, n, grad_norm_sq, lr, beta1, beta2, eps, weight_decay, step,
                     grad_clip);
  } else {
    const host::AdamWScalars<T> s = host::adamw_scalars(grad_norm_sq, lr, beta1, beta2, eps, weight_decay, step, grad_clip);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) host::adamw_one(param, grad, m, v, param, m, v, i, s);
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// instantiations

#define TT_CPU_INSTANTIATE(T)                                                                                       \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int, int64_t, int);        \
  template void embedding_backward<T>(T*, T*, const T*, const int32_t*, int, int, int, int64_t, int, bool);         \
  template void xent_local_max<T>(T*, const T*, int64_t, int, int);                                                  \
  template void xent_local_sums<T>(T*, const T*, const int32_t*, int64_t, int, int, int64_t);                       \
  template void xent_finish<T>(T*, T*, const T*, const T*, const int32_t*, T, int64_t, int, int, int64_t);          \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int);                       \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t, int,   \
                                      bool);                                                                        \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int64_t, int, int);                              \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int, int, bool);              \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int, int);                                    \
  template void attention_backward<T>(T*, const T*, const T*, const T*, int, int, int, int, int);                   \
  template void attention_decode<T>(T*, T*, const T*, const int32_t*, int, int, int, int, int);                   \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int, T);                                    \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int, bool);            \
  template void rope<T>(T*, const T*, const int32_t*, int, int, int, int, int, bool);                              \
  template void swiglu_forward<T>(T*, const T*, int64_t, int);                                                     \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int);                                          \
  template void embedding_at<T>(T*, const int32_t*, const int32_t*, const T*, const T*, int, int);                \
  template void gelu_forward<T>(T*, const T*, int64_t);                                                             \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);                                                  \
  template void gelu_backward_scale<T>(T*, const T*, int64_t);                                                     \
  template void residual_forward<T>(T*, const T*, const T*, int64_t);                                               \
  template void softmax_xent_forward<T>(T*, T*, const T*, const int32_t*, int64_t, int, int);                       \
  template void softmax_xent_backward<T>(T*, const T*, const int32_t*, T, int64_t, int, int);                       \
  template T sum_squares<T>(const T*, int64_t);                                                                     \
  template void adamw_update<T>(T*, const T*, T*, T*, int64_t, T, float, float, float, float, float, int64_t, float);

TT_CPU_INSTANTIATE(float)
TT_CPU_INSTANTIATE(double)
#undef TT_CPU_INSTANTIATE

}  // namespace tt::cpu
