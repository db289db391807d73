// backend/cuda/kernels_layernorm.cu: LayerNorm: forward (with the residual add), backward in one pass or two; RMSNorm
// forward and backward; kernels and their launchers (kernels.cuh).
#include "backend/cuda/kernels_common.cuh"
#include "backend/cuda/kernel_columns.cuh"

namespace tt::cuda {
namespace {

// One warp per row.
template <typename X>
__global__ void layernorm_forward_kernel(X* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                         const X* __restrict__ inp, const X* __restrict__ w, const X* __restrict__ b,
                                         int64_t N, int C) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const X* x = inp + row * C;
  float s = 0.0f;
#pragma unroll 4
  for (int c = lane; c < C; c += 32) s += ld(x[c]);
  const float m = warp_sum(s) / C;
  float v = 0.0f;
#pragma unroll 4
  for (int c = lane; c < C; c += 32) {
    const float d = ld(x[c]) - m;
    v += d * d;
  }
  const float r = rsqrtf(warp_sum(v) / C + 1e-5f);
  X* o = out + row * C;
#pragma unroll 4
  for (int c = lane; c < C; c += 32) o[c] = st<X>((ld(x[c]) - m) * r * ld(w[c]) + ld(b[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <typename X>
// __restrict__: dinp never aliases the inputs, so the loads of the next columns may be issued before the store of
// this one (without it ncu showed every warp waiting out each load before the next, and the kernel many times slower).
__global__ void layernorm_backward_dinp_kernel(X* __restrict__ dinp, const X* __restrict__ dout,
                                               const X* __restrict__ inp, const X* __restrict__ w,
                                               const float* __restrict__ mean, const float* __restrict__ rstd,
                                               int64_t N, int C) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const X* x = inp + row * C;
  const X* d = dout + row * C;
  const float m = mean[row], r = rstd[row];
  float a = 0.0f, bsum = 0.0f;
#pragma unroll 4
  for (int c = lane; c < C; c += 32) {
    const float dn = ld(w[c]) * ld(d[c]);
    a += dn;
    bsum += dn * (ld(x[c]) - m) * r;
  }
  const float dnorm_mean = warp_sum(a) / C, dnorm_norm_mean = warp_sum(bsum) / C;
  X* di = dinp + row * C;
#pragma unroll 4
  for (int c = lane; c < C; c += 32) {
    const float norm = (ld(x[c]) - m) * r;
    di[c] = st<X>(ld(di[c]) + (ld(w[c]) * ld(d[c]) - dnorm_mean - norm * dnorm_norm_mean) * r);
  }
}

// Note [one-pass LayerNorm backward]
// The LayerNorm backward in one pass over memory (dout and inp read once, dinp read and written once: 8 bytes an
// element in bf16), where the two-pass row kernel and column_partials_kernel read each element about seven times.
// A block of kLnThreads threads owns a fixed run of rows and walks it in groups of one row per warp:
//   A. warp w reduces row g + w (the sums of w * dout and of w * dout * norm) into shared memory;
//   B. the block then goes over the group's rows again (from L1/L2: a group is 16 rows) column-wise, each thread on
//      fixed 16-byte vectors of columns, writing dinp and adding dout * norm and dout to its own column accumulators.
// Where a row has fewer vectors than the block has threads (GPT-2's 768 columns are 96 vectors), P = threads / vectors
// threads share a column vector, each taking every P-th row of the group, and their accumulators are added in slot
// order at the end. Each block writes its column partials ([block][2C]: weight, then bias), column_finish_kernel adds
// them in block order: the sums do not depend on timing. The formula is the two-pass kernel's; the row sums' order
// differs (16-byte vectors a lane), so the two round differently: the two-pass kernels remain for rows that do not
// split into aligned vectors or are wider than a block's share (fixed for a model's shapes: one path a run). The grid
// is two blocks an SM. Where a thread owns one column vector (rows of up to kLnThreads vectors: 4096 bf16 values) the
// kernel is held to 64 registers (ptxas, sm_90: 4 bytes spilled) and both blocks of an SM run at once; owning two, it
// takes 120 and runs them one after the other. The one pass is faster than the two-pass kernels
// (docs/benchmarks/2026-12-03-h200-engine-layernorm-workspace/), and two blocks an SM faster than one
// (docs/benchmarks/2026-12-03-h200-engine-grads-written/).
constexpr int kLnThreads = 512;
constexpr int kLnMaxVecs = 2;  // vectors of columns a thread owns: C up to 2 * 8 * 512 = 8192 in bf16, 4096 in f32


// kNV: the column vectors a thread owns (1 where a row has at most kLnThreads vectors: C up to 4096 in bf16). With
// one, the kernel fits two blocks an SM (Note [one-pass LayerNorm backward]: 120 registers a thread with kNV 2).
// kRms: RMSNorm's backward (Note [RMSNorm on the LayerNorm kernels]): no mean, no bias; partial is [block][C].
template <typename X, int kNV, bool kRms>
__global__ void __launch_bounds__(kLnThreads, kNV == 1 ? 2 : 1) layernorm_backward_one_pass_kernel(
    X* __restrict__ dinp, float* __restrict__ partial, const X* __restrict__ dout, const X* __restrict__ inp,
    const X* __restrict__ w, const float* __restrict__ mean, const float* __restrict__ rstd, int64_t N, int C,
    int64_t rows_per_block) {
  constexpr int kV = Vec<X>::kN;
  constexpr int kWarps = kLnThreads / 32;
  constexpr int kParts = kRms ? 1 : 2;  // column sums kept: the weight's (and the bias')
  __shared__ float row_a[kWarps], row_b[kWarps];
  extern __shared__ float combine[];  // [P][kParts][C] where P > 1
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int vectors = C / kV;
  const int P = vectors >= kLnThreads ? 1 : kLnThreads / vectors;  // threads sharing a column vector
  const int slot = threadIdx.x / vectors;                          // valid where P > 1
  const bool active = P == 1 || slot < P;
  const int nv = P == 1 ? (vectors + kLnThreads - 1) / kLnThreads : 1;
  const int first_vec = P == 1 ? threadIdx.x : threadIdx.x % vectors;
  const int64_t r0 = blockIdx.x * rows_per_block, r1 = min(N, r0 + rows_per_block);

  float wv[kNV][kV], acc_w[kNV][kV], acc_b[kNV][kV];
#pragma unroll
  for (int i = 0; i < kNV; ++i)
#pragma unroll
    for (int j = 0; j < kV; ++j) wv[i][j] = acc_w[i][j] = acc_b[i][j] = 0.0f;
#pragma unroll
  for (int i = 0; i < kNV; ++i) {
    const int cv = first_vec + i * kLnThreads;
    if (active && i < nv && cv < vectors) {
      Vec<X> t;
      t.load(w + static_cast<int64_t>(cv) * kV);
#pragma unroll
      for (int j = 0; j < kV; ++j) wv[i][j] = t.v[j];
    }
  }

  for (int64_t g = r0; g < r1; g += kWarps) {
    const int rows_here = static_cast<int>((r1 - g < kWarps ? r1 - g : kWarps));
    // A: the row reductions, one warp a row, lane on column vectors lane, lane + 32, ...
    if (warp < rows_here) {
      const int64_t row = g + warp;
      const float m = kRms ? 0.0f : mean[row], r = rstd[row];
      float a = 0.0f, b = 0.0f;
      for (int cv = lane; cv < vectors; cv += 32) {
        const int64_t off = row * C + static_cast<int64_t>(cv) * kV;
        Vec<X> d, x, wc;
        d.load(dout + off);
        x.load(inp + off);
        wc.load(w + static_cast<int64_t>(cv) * kV);
#pragma unroll
        for (int j = 0; j < kV; ++j) {
          const float dn = wc.v[j] * d.v[j];
          if constexpr (!kRms) a += dn;
          b += dn * (x.v[j] - m) * r;
        }
      }
      a = warp_sum(a);
      b = warp_sum(b);
      if (lane == 0) {
        row_a[warp] = a / C;
        row_b[warp] = b / C;
      }
    }
    __syncthreads();
    // B: dinp and the column accumulators, column vectors per thread.
    if (active) {
      for (int i = P == 1 ? 0 : slot; i < rows_here; i += P) {
        const int64_t row = g + i;
        const float m = kRms ? 0.0f : mean[row], r = rstd[row], dnorm_mean = row_a[i], dnorm_norm_mean = row_b[i];
#pragma unroll
        for (int k = 0; k < kNV; ++k) {
          const int cv = first_vec + k * kLnThreads;
          if (k >= nv || cv >= vectors) break;
          const int64_t off = row * C + static_cast<int64_t>(cv) * kV;
          Vec<X> d, x, di;
          d.load(dout + off);
          x.load(inp + off);
          di.load(dinp + off);
#pragma unroll
          for (int j = 0; j < kV; ++j) {
            const float norm = (x.v[j] - m) * r;
            di.v[j] = di.v[j] + (wv[k][j] * d.v[j] - dnorm_mean - norm * dnorm_norm_mean) * r;
            acc_w[k][j] += d.v[j] * norm;
            if constexpr (!kRms) acc_b[k][j] += d.v[j];
          }
          di.store(dinp + off);
        }
      }
    }
    __syncthreads();
  }

  float* out = partial + static_cast<int64_t>(blockIdx.x) * kParts * C;
  if (P == 1) {
#pragma unroll
    for (int k = 0; k < kNV; ++k) {
      const int cv = first_vec + k * kLnThreads;
      if (k >= nv || cv >= vectors) break;
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        out[cv * kV + j] = acc_w[k][j];
        if constexpr (!kRms) out[C + cv * kV + j] = acc_b[k][j];
      }
    }
    return;
  }
  if (active) {
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      combine[(slot * kParts) * C + first_vec * kV + j] = acc_w[0][j];
      if constexpr (!kRms) combine[(slot * 2 + 1) * C + first_vec * kV + j] = acc_b[0][j];
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += kLnThreads) {
    float sw = 0.0f, sb = 0.0f;
    for (int q = 0; q < P; ++q) {
      sw += combine[(q * kParts) * C + c];
      if constexpr (!kRms) sb += combine[(q * 2 + 1) * C + c];
    }
    out[c] = sw;
    if constexpr (!kRms) out[C + c] = sb;
  }
}


// res = a + b (rounded to X, as stored), then LayerNorm of res; one warp per row.
template <typename X>
__global__ void residual_layernorm_forward_kernel(X* __restrict__ res, X* __restrict__ out, float* __restrict__ mean,
                                                  float* __restrict__ rstd, const X* __restrict__ a,
                                                  const X* __restrict__ b, const X* __restrict__ w,
                                                  const X* __restrict__ bias, int64_t N, int C) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const X* x = a + row * C;
  const X* y = b + row * C;
  X* r = res + row * C;
  float s = 0.0f;
#pragma unroll 4
  for (int c = lane; c < C; c += 32) {
    const X v = st<X>(ld(x[c]) + ld(y[c]));
    r[c] = v;
    s += ld(v);
  }
  const float m = warp_sum(s) / C;
  float var = 0.0f;
#pragma unroll 4
  for (int c = lane; c < C; c += 32) {
    const float dv = ld(r[c]) - m;
    var += dv * dv;
  }
  const float rs = rsqrtf(warp_sum(var) / C + 1e-5f);
  X* o = out + row * C;
#pragma unroll 4
  for (int c = lane; c < C; c += 32) o[c] = st<X>((ld(r[c]) - m) * rs * ld(w[c]) + ld(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// Note [LayerNorm forward in registers]
// One warp a row, the row held in the warp's registers as raw 16-byte vectors (lane l holds vectors l, l + 32, ...):
// the input is read from memory once, the mean and the variance (two-pass, from registers) and the output follow
// without touching it again. The row-strided kernels above read each element three times with 2-byte loads (the
// second and third from L1/L2). With a residual (b != null), the sum a + b
// is rounded to X as it is stored in res, and the statistics are those of the rounded values, as in
// residual_layernorm_forward_kernel. kVpl (vectors a lane) is a power of two from 1 to 16: rows of up to 16 * 32 * 8
// = 4096 bf16 or 2048 f32 elements; wider rows, or rows not in aligned 16-byte vectors, take the row-strided kernels
// (fixed by a model's shapes: one path a run). The sums' order differs from theirs (vector by vector, then across
// lanes), so the two round differently.
constexpr int kLnFwdThreads = 128;

// kRms: RMSNorm (Note [RMSNorm on the LayerNorm kernels]): no mean, no bias, the given eps.
template <typename X, int kVpl, bool kResidual, bool kRms>
__global__ void __launch_bounds__(kLnFwdThreads) layernorm_forward_regs_kernel(
    X* __restrict__ res, X* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
    const X* __restrict__ a, const X* __restrict__ b, const X* __restrict__ w, const X* __restrict__ bias, int64_t N,
    int C, float eps) {
  constexpr int kV = 16 / sizeof(X);
  const int64_t row = blockIdx.x * static_cast<int64_t>(kLnFwdThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const int vectors = C / kV;
  const int64_t base = row * C;
  int4 raw[kVpl];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kVpl; ++i) {
    const int cv = lane + 32 * i;
    if (cv < vectors) {
      raw[i] = *reinterpret_cast<const int4*>(a + base + static_cast<int64_t>(cv) * kV);
      if constexpr (kResidual) {
        const int4 rb = *reinterpret_cast<const int4*>(b + base + static_cast<int64_t>(cv) * kV);
        X* e = reinterpret_cast<X*>(&raw[i]);
        const X* f = reinterpret_cast<const X*>(&rb);
#pragma unroll
        for (int j = 0; j < kV; ++j) e[j] = st<X>(ld(e[j]) + ld(f[j]));
        *reinterpret_cast<int4*>(res + base + static_cast<int64_t>(cv) * kV) = raw[i];
      }
      if constexpr (!kRms) {
        const X* e = reinterpret_cast<const X*>(&raw[i]);
#pragma unroll
        for (int j = 0; j < kV; ++j) s += ld(e[j]);
      }
    }
  }
  const float m = kRms ? 0.0f : warp_sum(s) / C;
  float var = 0.0f;
#pragma unroll
  for (int i = 0; i < kVpl; ++i) {
    if (lane + 32 * i < vectors) {
      const X* e = reinterpret_cast<const X*>(&raw[i]);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const float d = ld(e[j]) - m;
        var += d * d;
      }
    }
  }
  const float r = rsqrtf(warp_sum(var) / C + eps);
#pragma unroll
  for (int i = 0; i < kVpl; ++i) {
    const int cv = lane + 32 * i;
    if (cv < vectors) {
      const int4 rw = *reinterpret_cast<const int4*>(w + static_cast<int64_t>(cv) * kV);
      const X* e = reinterpret_cast<const X*>(&raw[i]);
      const X* we = reinterpret_cast<const X*>(&rw);
      int4 o;
      X* oe = reinterpret_cast<X*>(&o);
      if constexpr (kRms) {
#pragma unroll
        for (int j = 0; j < kV; ++j) oe[j] = st<X>(ld(e[j]) * r * ld(we[j]));
      } else {
        const int4 rbias = *reinterpret_cast<const int4*>(bias + static_cast<int64_t>(cv) * kV);
        const X* be = reinterpret_cast<const X*>(&rbias);
#pragma unroll
        for (int j = 0; j < kV; ++j) oe[j] = st<X>((ld(e[j]) - m) * r * ld(we[j]) + ld(be[j]));
      }
      *reinterpret_cast<int4*>(out + base + static_cast<int64_t>(cv) * kV) = o;
    }
  }
  if (lane == 0) {
    if constexpr (!kRms) mean[row] = m;
    rstd[row] = r;
  }
}

}  // namespace

namespace {
unsigned warp_rows_grid(int64_t rows) {
  const int rows_per_block = kThreads / 32;
  return static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
}

// RMSNorm, one warp per row: out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
template <typename X>
__global__ void rmsnorm_forward_kernel(X* __restrict__ out, float* __restrict__ rstd, const X* __restrict__ inp,
                                       const X* __restrict__ w, int64_t N, int C, float eps) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const X* x = inp + row * C;
  float v = 0.0f;
#pragma unroll 4
  for (int c = lane; c < C; c += 32) {
    const float e = ld(x[c]);
    v += e * e;
  }
  const float r = rsqrtf(warp_sum(v) / C + eps);
  X* o = out + row * C;
#pragma unroll 4
  for (int c = lane; c < C; c += 32) o[c] = st<X>(ld(x[c]) * r * ld(w[c]));
  if (lane == 0) rstd[row] = r;
}

// dinp += r (w dy - norm mean(w dy norm)), norm = x r; one warp per row.
template <typename X>
__global__ void rmsnorm_backward_dinp_kernel(X* __restrict__ dinp, const X* __restrict__ dout, const X* __restrict__ inp,
                                             const X* __restrict__ w, const float* __restrict__ rstd, int64_t N,
                                             int C) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const X* x = inp + row * C;
  const X* d = dout + row * C;
  const float r = rstd[row];
  float dot = 0.0f;
#pragma unroll 4
  for (int c = lane; c < C; c += 32) dot += ld(w[c]) * ld(d[c]) * (ld(x[c]) * r);
  const float mean = warp_sum(dot) / C;
  X* di = dinp + row * C;
#pragma unroll 4
  for (int c = lane; c < C; c += 32)
    di[c] = st<X>(ld(di[c]) + (ld(w[c]) * ld(d[c]) - ld(x[c]) * r * mean) * r);
}

// Partial column sums of dout * x * rstd over fixed chunks of rows: partial[chunk][c].
template <typename X>
__global__ void rmsnorm_column_partials_kernel(float* partial, const X* dout, const X* inp, const float* rstd,
                                               int64_t N, int C, int chunks) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunk = blockIdx.y;
  if (c >= C) return;
  const int64_t rows = (N + chunks - 1) / chunks;
  const int64_t r0 = chunk * rows, r1 = min(N, r0 + rows);
  float s = 0.0f;
#pragma unroll 4
  for (int64_t r = r0; r < r1; ++r) s += ld(dout[r * C + c]) * (ld(inp[r * C + c]) * rstd[r]);
  partial[static_cast<int64_t>(chunk) * C + c] = s;
}
// Note [LayerNorm forward in registers]: launches the register kernel and returns true where the rows split into
// aligned 16-byte vectors and fit a lane's 16 vectors; false (nothing launched) otherwise.
template <typename X, bool kResidual, bool kRms = false>
bool layernorm_forward_in_registers(cudaStream_t s, X* res, X* out, float* mean, float* rstd, const X* a, const X* b,
                                    const X* w, const X* bias, int64_t N, int C, float eps = 1e-5f) {
  constexpr int kV = 16 / sizeof(X);
  if (N <= 0 || C <= 0 || C % kV != 0 || !dev::aligned16({res, out, a, b, w, bias})) return false;
  const int vpl = (C / kV + 31) / 32;
  const unsigned grid = static_cast<unsigned>((N + kLnFwdThreads / 32 - 1) / (kLnFwdThreads / 32));
  const auto go = [&]<int kVpl>() {
    layernorm_forward_regs_kernel<X, kVpl, kResidual, kRms><<<grid, kLnFwdThreads, 0, s>>>(res, out, mean, rstd, a, b,
                                                                                          w, bias, N, C, eps);
    TT_CUDA_CHECK_LAUNCH();
    return true;
  };
  if (vpl <= 1) return go.template operator()<1>();
  if (vpl <= 2) return go.template operator()<2>();
  if (vpl <= 4) return go.template operator()<4>();
  if (vpl <= 8) return go.template operator()<8>();
  if (vpl <= 16) return go.template operator()<16>();
  return false;
}
}  // namespace

template <typename X>
void layernorm_forward(cudaStream_t s, X* out, float* mean, float* rstd, const X* inp, const X* w, const X* b,
                       int64_t N, int C) {
  if (layernorm_forward_in_registers<X, false>(s, nullptr, out, mean, rstd, inp, nullptr, w, b, N, C)) return;
  layernorm_forward_kernel<<<warp_rows_grid(N), kThreads, 0, s>>>(out, mean, rstd, inp, w, b, N, C);
  TT_CUDA_CHECK_LAUNCH();
}

// Note [one-pass LayerNorm backward]: launches it (kRms: RMSNorm's, Note [RMSNorm on the LayerNorm kernels]) and its
// column finish where the rows split into 16-byte vectors and a thread's share fits; false (nothing launched)
// otherwise.
template <typename X, bool kRms>
bool norm_backward_one_pass(cudaStream_t s, const Scratch& scratch, X* dinp, float* dw, float* db, const X* dout,
                            const X* inp, const X* w, const float* mean, const float* rstd, int64_t N, int C,
                            bool add) {
  constexpr int kV = 16 / sizeof(X);
  constexpr int kParts = kRms ? 1 : 2;
  const int vectors = C / kV;
  if (N <= 0 || C <= 0 || C % kV != 0 || vectors > kLnMaxVecs * kLnThreads || !dev::aligned16({dinp, dout, inp, w}))
    return false;
  static const int sms = [] {
    int device = 0, n = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    return std::max(n, 1);
  }();
  constexpr int kWarps = kLnThreads / 32;
  const int64_t fit = static_cast<int64_t>(scratch.bytes / (kParts * static_cast<size_t>(C) * sizeof(float)));
  if (fit < 1) return false;
  const int64_t blocks = std::max<int64_t>(1, std::min({(N + kWarps - 1) / kWarps, int64_t(2) * sms, fit}));
  const int64_t rows_per_block = (N + blocks - 1) / blocks;
  const int64_t used = (N + rows_per_block - 1) / rows_per_block;
  const int P = vectors >= kLnThreads ? 1 : kLnThreads / vectors;
  const size_t smem = P > 1 ? static_cast<size_t>(P) * kParts * C * sizeof(float) : 0;
  float* partial = static_cast<float*>(scratch.ptr);
  // The same grid and rows a block either way, so the same partials: the kernel's two forms give equal bits.
  const auto kernel = vectors <= kLnThreads ? layernorm_backward_one_pass_kernel<X, 1, kRms>
                                            : layernorm_backward_one_pass_kernel<X, kLnMaxVecs, kRms>;
  kernel<<<static_cast<unsigned>(used), kLnThreads, smem, s>>>(dinp, partial, dout, inp, w, mean, rstd, N, C,
                                                               rows_per_block);
  TT_CUDA_CHECK_LAUNCH();
  column_finish_kernel<<<(C + 31) / 32, dim3(32, 32), 0, s>>>(dw, db, partial, C, static_cast<int>(used), kParts * C,
                                                             add);
  TT_CUDA_CHECK_LAUNCH();
  return true;
}

template <typename X>
void layernorm_backward(cudaStream_t s, const Scratch& scratch, X* dinp, float* dw, float* db, const X* dout,
                        const X* inp, const X* w, const float* mean, const float* rstd, int64_t N, int C, bool add) {
  if (norm_backward_one_pass<X, false>(s, scratch, dinp, dw, db, dout, inp, w, mean, rstd, N, C, add)) return;
  layernorm_backward_two_pass(s, scratch, dinp, dw, db, dout, inp, w, mean, rstd, N, C, add);
}

template <typename X>
void layernorm_backward_two_pass(cudaStream_t s, const Scratch& scratch, X* dinp, float* dw, float* db,
                                 const X* dout, const X* inp, const X* w, const float* mean, const float* rstd,
                                 int64_t N, int C, bool add) {
  layernorm_backward_dinp_kernel<<<warp_rows_grid(N), kThreads, 0, s>>>(dinp, dout, inp, w, mean, rstd, N, C);
  TT_CUDA_CHECK_LAUNCH();
  const int chunks = column_chunks(N, 2 * static_cast<int64_t>(C), scratch.bytes);
  TT_CHECK(static_cast<size_t>(chunks) * 2 * C * sizeof(float) <= scratch.bytes,
           "layernorm_backward: C=%d needs more than the CUDA scratch", C);
  float* partial = static_cast<float*>(scratch.ptr);
  column_partials_kernel<<<dim3((C + kThreads - 1) / kThreads, chunks), kThreads, 0, s>>>(partial, dout, inp, mean,
                                                                                          rstd, N, C, chunks);
  TT_CUDA_CHECK_LAUNCH();
  column_finish_kernel<<<(C + 31) / 32, dim3(32, 32), 0, s>>>(dw, db, partial, C, chunks, 2 * C, add);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void residual_layernorm_forward(cudaStream_t s, X* res, X* out, float* mean, float* rstd, const X* a, const X* b,
                                const X* w, const X* bias, int64_t N, int C) {
  if (layernorm_forward_in_registers<X, true>(s, res, out, mean, rstd, a, b, w, bias, N, C)) return;
  residual_layernorm_forward_kernel<<<warp_rows_grid(N), kThreads, 0, s>>>(res, out, mean, rstd, a, b, w, bias, N, C);
  TT_CUDA_CHECK_LAUNCH();
}

// Note [RMSNorm on the LayerNorm kernels]
// RMSNorm is LayerNorm with the mean taken as 0 and no bias: out = x r w, r = 1 / sqrt(mean(x^2) + eps); dinp +=
// r (w dy - norm mean(w dy norm)), norm = x r; dw = sum dy norm. Where the rows split into aligned 16-byte vectors
// it runs on LayerNorm's register forward (Note [LayerNorm forward in registers]) and one-pass backward (Note
// [one-pass LayerNorm backward]) with that flag (kRms): the row read once, 16-byte loads, the column sums in
// fixed block order. The row kernels above (one warp a row, 2-byte loads, the backward reading each element about
// five times) remain for the other shapes; the two round differently (the row sums' order), one path a run.
template <typename X>
void rmsnorm_forward(cudaStream_t s, X* out, float* rstd, const X* inp, const X* w, int64_t N, int C, float eps) {
  if (layernorm_forward_in_registers<X, false, true>(s, nullptr, out, nullptr, rstd, inp, nullptr, w, nullptr, N, C,
                                                     eps))
    return;
  rmsnorm_forward_kernel<<<warp_rows_grid(N), kThreads, 0, s>>>(out, rstd, inp, w, N, C, eps);
  TT_CUDA_CHECK_LAUNCH();
}

// Note [residual and RMSNorm in one pass]: on the register kernel (kResidual, kRms) the sum is rounded to X as it is
// stored and normalised from registers, the same values and the same order of sums as rmsnorm_forward's register
// kernel reading the stored sum: the same bits as the two ops. Rows that kernel does not take run the two ops.
template <typename X>
void residual_rmsnorm_forward(cudaStream_t s, X* res, X* out, float* rstd, const X* a, const X* b, const X* w,
                              int64_t N, int C, float eps) {
  if (layernorm_forward_in_registers<X, true, true>(s, res, out, nullptr, rstd, a, b, w, nullptr, N, C, eps)) return;
  residual_forward<X>(s, res, a, b, N * C);
  rmsnorm_forward<X>(s, out, rstd, res, w, N, C, eps);
}

template <typename X>
void rmsnorm_backward(cudaStream_t s, const Scratch& scratch, X* dinp, float* dw, const X* dout, const X* inp,
                      const X* w, const float* rstd, int64_t N, int C, bool add) {
  if (norm_backward_one_pass<X, true>(s, scratch, dinp, dw, nullptr, dout, inp, w, nullptr, rstd, N, C, add)) return;
  rmsnorm_backward_dinp_kernel<<<warp_rows_grid(N), kThreads, 0, s>>>(dinp, dout, inp, w, rstd, N, C);
  TT_CUDA_CHECK_LAUNCH();
  const int chunks = column_chunks(N, C, scratch.bytes);
  TT_CHECK(static_cast<size_t>(chunks) * C * sizeof(float) <= scratch.bytes,
           "rmsnorm_backward: C=%d needs more than the CUDA scratch", C);
  float* partial = static_cast<float*>(scratch.ptr);
  rmsnorm_column_partials_kernel<<<dim3((C + kThreads - 1) / kThreads, chunks), kThreads, 0, s>>>(partial, dout, inp,
                                                                                                 rstd, N, C, chunks);
  TT_CUDA_CHECK_LAUNCH();
  column_finish_kernel<<<(C + 31) / 32, dim3(32, 32), 0, s>>>(dw, nullptr, partial, C, chunks, C, add);
  TT_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------------------------------
// instantiations

#define TT_CUDA_INSTANTIATE(X) \
  template void layernorm_forward<X>(cudaStream_t, X*, float*, float*, const X*, const X*, const X*, int64_t, int); \
  template void layernorm_backward<X>(cudaStream_t, const Scratch&, X*, float*, float*, const X*, const X*, \
      const X*, const float*, const float*, int64_t, int, bool); \
  template void layernorm_backward_two_pass<X>(cudaStream_t, const Scratch&, X*, float*, float*, const X*, \
      const X*, const X*, const float*, const float*, int64_t, int, bool); \
  template void residual_layernorm_forward<X>(cudaStream_t, X*, X*, float*, float*, const X*, const X*, const X*, \
      const X*, int64_t, int); \
  template void rmsnorm_forward<X>(cudaStream_t, X*, float*, const X*, const X*, int64_t, int, float); \
  template void residual_rmsnorm_forward<X>(cudaStream_t, X*, X*, float*, const X*, const X*, const X*, int64_t, \
      int, float); \
  template void rmsnorm_backward<X>(cudaStream_t, const Scratch&, X*, float*, const X*, const X*, const X*, \
      const float*, int64_t, int, bool);

TT_CUDA_INSTANTIATE(float)
TT_CUDA_INSTANTIATE(bf16)
#undef TT_CUDA_INSTANTIATE

}  // namespace tt::cuda
