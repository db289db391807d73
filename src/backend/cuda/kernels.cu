// backend/cuda/kernels.cu: fp32 kernels and their launchers (see kernels.cuh).
#include "backend/cuda/kernels.cuh"

#include <algorithm>
#include <cmath>
#include <cfloat>
#include <cub/device/device_radix_sort.cuh>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"

namespace tt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 132 * 16;  // 16 blocks for each of an H100's or H200's 132 SMs: grid-stride loops fill it
constexpr int kColumnRowsPerChunk = 32;  // rows one thread sums in the deterministic column sums

int blocks_for(int64_t n, int threads = kThreads) {
  return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, kMaxBlocks));
}

using dev::ld;
using dev::st;
using dev::warp_sum;
// Block-wide reductions in a fixed order (warp shuffles, then warp 0 over the warps' results).
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T shared[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < nwarps ? shared[lane] : identity;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

struct Add {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// ---------------------------------------------------------------------------------------------------------------------
// kernels

template <typename X>
__global__ void embedding_forward_kernel(X* out, const int32_t* tokens, const X* wte, const X* wpe, int T, int C,
                                         int64_t n, int64_t begin, int V) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = i / C;
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(bt % T);
    const int64_t row = tokens[bt] - begin;
    const float e = row >= 0 && row < V ? ld(wte[row * C + c]) : 0.0f;
    out[i] = st<X>(e + (wpe ? ld(wpe[static_cast<int64_t>(t) * C + c]) : 0.0f));
  }
}

template <typename X>
__global__ void embedding_at_kernel(X* out, const int32_t* tokens, const int32_t* positions, const X* wte,
                                    const X* wpe, int64_t n, int C) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / C;
    const int c = static_cast<int>(i % C);
    const float e = ld(wte[static_cast<int64_t>(tokens[row]) * C + c]);
    out[i] = st<X>(e + ld(wpe[static_cast<int64_t>(positions[row]) * C + c]));
  }
}

// The sort keys of embedding_backward: a token's row in this wte, or V (past every row) for a token outside it.
__global__ void embedding_keys_kernel(int32_t* keys, const int32_t* tokens, int n, int64_t begin, int V) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int64_t row = tokens[i] - begin;
    keys[i] = row >= 0 && row < V ? static_cast<int32_t>(row) : V;
  }
}

template <typename X>
__global__ void dwpe_kernel(float* dwpe, const X* dout, int B, int T, int C, bool add) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < static_cast<int64_t>(T) * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int b = 0; b < B; ++b) s += ld(dout[static_cast<int64_t>(b) * T * C + i]);
    dwpe[i] = add ? dwpe[i] + s : s;
  }
}

__global__ void iota_kernel(int32_t* x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = i;
}

// One block per sorted position; the block at the start of a run of equal tokens sums the run's rows in position
// order and adds the sum to that token's row of dwte.
template <typename X>
__global__ void dwte_runs_kernel(float* dwte, const X* dout, const int32_t* sorted_tokens,
                                 const int32_t* sorted_pos, int n, int C, int V) {
  const int i = blockIdx.x;
  const int tok = sorted_tokens[i];
  if (tok == V || (i > 0 && sorted_tokens[i - 1] == tok)) return;  // V: a token of another rank's rows
  int end = i + 1;
  while (end < n && sorted_tokens[end] == tok) ++end;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.0f;
    for (int j = i; j < end; ++j) s += ld(dout[static_cast<int64_t>(sorted_pos[j]) * C + c]);
    dwte[static_cast<int64_t>(tok) * C + c] += s;
  }
}

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

template <typename X>
struct Vec {
  static constexpr int kN = 16 / sizeof(X);
  float v[kN];
  __device__ __forceinline__ void load(const X* p) {
    const int4 raw = *reinterpret_cast<const int4*>(p);
    const X* e = reinterpret_cast<const X*>(&raw);
#pragma unroll
    for (int j = 0; j < kN; ++j) v[j] = ld(e[j]);
  }
  __device__ __forceinline__ void store(X* p) const {
    int4 raw;
    X* e = reinterpret_cast<X*>(&raw);
#pragma unroll
    for (int j = 0; j < kN; ++j) e[j] = st<X>(v[j]);
    *reinterpret_cast<int4*>(p) = raw;
  }
};

// kNV: the column vectors a thread owns (1 where a row has at most kLnThreads vectors: C up to 4096 in bf16). With
// one, the kernel fits two blocks an SM (Note [one-pass LayerNorm backward]: 120 registers a thread with kNV 2).
template <typename X, int kNV>
__global__ void __launch_bounds__(kLnThreads, kNV == 1 ? 2 : 1) layernorm_backward_one_pass_kernel(
    X* __restrict__ dinp, float* __restrict__ partial, const X* __restrict__ dout, const X* __restrict__ inp,
    const X* __restrict__ w, const float* __restrict__ mean, const float* __restrict__ rstd, int64_t N, int C,
    int64_t rows_per_block) {
  constexpr int kV = Vec<X>::kN;
  constexpr int kWarps = kLnThreads / 32;
  __shared__ float row_a[kWarps], row_b[kWarps];
  extern __shared__ float combine[];  // [P][2][C] where P > 1
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
      const float m = mean[row], r = rstd[row];
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
          a += dn;
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
        const float m = mean[row], r = rstd[row], dnorm_mean = row_a[i], dnorm_norm_mean = row_b[i];
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
            acc_b[k][j] += d.v[j];
          }
          di.store(dinp + off);
        }
      }
    }
    __syncthreads();
  }

  float* out = partial + static_cast<int64_t>(blockIdx.x) * 2 * C;
  if (P == 1) {
#pragma unroll
    for (int k = 0; k < kNV; ++k) {
      const int cv = first_vec + k * kLnThreads;
      if (k >= nv || cv >= vectors) break;
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        out[cv * kV + j] = acc_w[k][j];
        out[C + cv * kV + j] = acc_b[k][j];
      }
    }
    return;
  }
  if (active) {
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      combine[(slot * 2) * C + first_vec * kV + j] = acc_w[0][j];
      combine[(slot * 2 + 1) * C + first_vec * kV + j] = acc_b[0][j];
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += kLnThreads) {
    float sw = 0.0f, sb = 0.0f;
    for (int q = 0; q < P; ++q) {
      sw += combine[(q * 2) * C + c];
      sb += combine[(q * 2 + 1) * C + c];
    }
    out[c] = sw;
    out[C + c] = sb;
  }
}

// Partial column sums over a fixed chunk of rows: partial[chunk][c] (and [chunk][C + c] for the LayerNorm bias).
// With inp != nullptr the first sum is of dout * normalised input (LayerNorm weight gradient).
template <typename X>
__global__ void column_partials_kernel(float* partial, const X* dout, const X* inp, const float* mean,
                                       const float* rstd, int64_t N, int C, int chunks) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunk = blockIdx.y;
  if (c >= C) return;
  const int64_t rows = (N + chunks - 1) / chunks;
  const int64_t r0 = chunk * rows, r1 = min(N, r0 + rows);
  float s = 0.0f, sb = 0.0f;
#pragma unroll 4
  for (int64_t r = r0; r < r1; ++r) {
    const float d = ld(dout[r * C + c]);
    if (inp != nullptr) {
      s += d * ((ld(inp[r * C + c]) - mean[r]) * rstd[r]);
      sb += d;
    } else {
      s += d;
    }
  }
  partial[static_cast<int64_t>(chunk) * (inp != nullptr ? 2 * C : C) + c] = s;
  if (inp != nullptr) partial[static_cast<int64_t>(chunk) * 2 * C + C + c] = sb;
}

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

// Adds the column sums of the partials to dst (and the second half's to dst2). Block (32, 32): x picks the column, y
// strides over the chunks; the 32 per-y sums are then added in y order, so the result does not depend on timing.
__global__ void column_finish_kernel(float* dst, float* dst2, const float* partial, int C, int chunks, int stride,
                                     bool add) {
  __shared__ float sh[32][33], sh2[32][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f, s2 = 0.0f;
  if (c < C) {
    for (int k = threadIdx.y; k < chunks; k += 32) {
      s += partial[static_cast<int64_t>(k) * stride + c];
      if (dst2 != nullptr) s2 += partial[static_cast<int64_t>(k) * stride + C + c];
    }
  }
  sh[threadIdx.y][threadIdx.x] = s;
  sh2[threadIdx.y][threadIdx.x] = s2;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.0f, t2 = 0.0f;
    for (int y = 0; y < 32; ++y) {
      t += sh[y][threadIdx.x];
      t2 += sh2[y][threadIdx.x];
    }
    dst[c] = add ? dst[c] + t : t;
    if (dst2 != nullptr) dst2[c] = add ? dst2[c] + t2 : t2;
  }
}

template <typename X>
__global__ void broadcast_rows_kernel(X* out, const X* bias, int64_t N, int OC) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < N * OC;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = bias[i % OC];
}

constexpr float kGeluScale = 0.7978845608028654f;

template <typename X>
__global__ void gelu_forward_kernel(X* out, const X* inp, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = ld(inp[i]);
    out[i] = st<X>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
  }
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

template <typename X>
__global__ void gelu_backward_kernel(X* dinp, const X* inp, const X* dout, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dinp[i] = st<X>(ld(dinp[i]) + gelu_grad(ld(inp[i])) * ld(dout[i]));
}

template <typename X>
__global__ void gelu_backward_scale_kernel(X* d, const X* pre, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    d[i] = st<X>(gelu_grad(ld(pre[i])) * ld(d[i]));
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

template <typename X, int kVpl, bool kResidual>
__global__ void __launch_bounds__(kLnFwdThreads) layernorm_forward_regs_kernel(
    X* __restrict__ res, X* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
    const X* __restrict__ a, const X* __restrict__ b, const X* __restrict__ w, const X* __restrict__ bias, int64_t N,
    int C) {
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
      const X* e = reinterpret_cast<const X*>(&raw[i]);
#pragma unroll
      for (int j = 0; j < kV; ++j) s += ld(e[j]);
    }
  }
  const float m = warp_sum(s) / C;
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
  const float r = rsqrtf(warp_sum(var) / C + 1e-5f);
#pragma unroll
  for (int i = 0; i < kVpl; ++i) {
    const int cv = lane + 32 * i;
    if (cv < vectors) {
      const int4 rw = *reinterpret_cast<const int4*>(w + static_cast<int64_t>(cv) * kV);
      const int4 rbias = *reinterpret_cast<const int4*>(bias + static_cast<int64_t>(cv) * kV);
      const X* e = reinterpret_cast<const X*>(&raw[i]);
      const X* we = reinterpret_cast<const X*>(&rw);
      const X* be = reinterpret_cast<const X*>(&rbias);
      int4 o;
      X* oe = reinterpret_cast<X*>(&o);
#pragma unroll
      for (int j = 0; j < kV; ++j) oe[j] = st<X>((ld(e[j]) - m) * r * ld(we[j]) + ld(be[j]));
      *reinterpret_cast<int4*>(out + base + static_cast<int64_t>(cv) * kV) = o;
    }
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// out = a + b in 16-byte vectors (every pointer 16-byte aligned, n a multiple of the vector).
template <typename X>
__global__ void residual_forward_vec_kernel(X* __restrict__ out, const X* __restrict__ a, const X* __restrict__ b,
                                            int64_t nv) {
  constexpr int kV = 16 / sizeof(X);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < nv;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int4 ra = reinterpret_cast<const int4*>(a)[i];
    const int4 rb = reinterpret_cast<const int4*>(b)[i];
    const X* ea = reinterpret_cast<const X*>(&ra);
    const X* eb = reinterpret_cast<const X*>(&rb);
    int4 o;
    X* eo = reinterpret_cast<X*>(&o);
#pragma unroll
    for (int j = 0; j < kV; ++j) eo[j] = st<X>(ld(ea[j]) + ld(eb[j]));
    reinterpret_cast<int4*>(out)[i] = o;
  }
}

template <typename X>
__global__ void residual_forward_kernel(X* out, const X* a, const X* b, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = st<X>(ld(a[i]) + ld(b[i]));
}

// One block per row; probs may alias logits.
template <typename X>
__global__ void softmax_xent_forward_kernel(float* losses, X* probs, const X* logits, const int32_t* targets, int V,
                                            int valid) {
  const int64_t row = blockIdx.x;
  const X* l = logits + row * V;
  X* p = probs + row * V;
  __shared__ float target_logit;
  if (threadIdx.x == 0) target_logit = ld(l[targets[row]]);
  // One pass for the maximum and the sum (online softmax: the running sum is rescaled when the maximum grows).
  float tmx = -FLT_MAX, ts = 0.0f;
  for (int i = threadIdx.x; i < valid; i += blockDim.x) {
    const float v = ld(l[i]);
    if (v > tmx) {
      ts = ts * expf(tmx - v) + 1.0f;
      tmx = v;
    } else {
      ts += expf(v - tmx);
    }
  }
  const float mx = block_reduce(tmx, Max{}, -FLT_MAX);
  float s = ts * expf(tmx - mx);
  s = block_reduce(s, Add{}, 0.0f);  // its barriers also order target_logit's write before the reads below
  const float inv = 1.0f / s;
  for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] = st<X>(i < valid ? expf(ld(l[i]) - mx) * inv : 0.0f);
  if (threadIdx.x == 0) losses[row] = logf(s) + mx - target_logit;
}

// One block per row (no 64-bit division per element).
template <typename X>
__global__ void softmax_xent_backward_kernel(X* dlogits, const X* probs, const int32_t* targets, float dloss, int V,
                                             int valid) {
  const int64_t row = blockIdx.x;
  const int tgt = targets[row];
  const X* p = probs + row * V;
  X* d = dlogits + row * V;
  for (int col = threadIdx.x; col < V; col += blockDim.x)
    d[col] = st<X>(col < valid ? (ld(p[col]) - (col == tgt ? 1.0f : 0.0f)) * dloss : 0.0f);
}

// Forward and backward of the cross-entropy, one block per row, two passes over the row (the second one usually
// from L2): an online max and sum of exp, then dlogits. Rows whose length is a multiple of 16 bytes' worth of values
// and that are 16-byte aligned move 16 bytes per load and store.
template <typename X>
__global__ void softmax_xent_fused_kernel(float* losses, X* dlogits, const X* logits, const int32_t* targets,
                                          float dloss, int V, int valid) {
  constexpr int kVec = 16 / sizeof(X);
  const int64_t row = blockIdx.x;
  const X* l = logits + row * V;
  X* d = dlogits + row * V;
  const int tgt = targets[row];
  __shared__ float target_logit;
  if (threadIdx.x == 0) target_logit = ld(l[tgt]);  // read before any thread overwrites the row (barriers below)
  const bool vec = V % kVec == 0 && reinterpret_cast<uintptr_t>(l) % 16 == 0 && reinterpret_cast<uintptr_t>(d) % 16 == 0;
  float tmx = -FLT_MAX, ts = 0.0f;
  if (vec) {
    for (int i0 = threadIdx.x * kVec; i0 < valid; i0 += blockDim.x * kVec) {
      const int4 raw = *reinterpret_cast<const int4*>(l + i0);
      const X* x = reinterpret_cast<const X*>(&raw);
      float v[kVec], m = tmx;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        v[k] = i0 + k < valid ? ld(x[k]) : -FLT_MAX;
        m = fmaxf(m, v[k]);
      }
      ts *= __expf(tmx - m);
      tmx = m;
#pragma unroll
      for (int k = 0; k < kVec; ++k) ts += __expf(v[k] - m);
    }
  } else {
    for (int i = threadIdx.x; i < valid; i += blockDim.x) {
      const float v = ld(l[i]);
      if (v > tmx) {
        ts = ts * __expf(tmx - v) + 1.0f;
        tmx = v;
      } else {
        ts += __expf(v - tmx);
      }
    }
  }
  const float mx = block_reduce(tmx, Max{}, -FLT_MAX);
  float s = tmx == -FLT_MAX ? 0.0f : ts * __expf(tmx - mx);
  s = block_reduce(s, Add{}, 0.0f);
  const float inv = 1.0f / s;
  if (vec) {
    for (int i0 = threadIdx.x * kVec; i0 < V; i0 += blockDim.x * kVec) {
      int4 raw = *reinterpret_cast<const int4*>(l + i0);
      X* x = reinterpret_cast<X*>(&raw);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const int i = i0 + k;
        x[k] = st<X>(i < valid ? (__expf(ld(x[k]) - mx) * inv - (i == tgt ? 1.0f : 0.0f)) * dloss : 0.0f);
      }
      *reinterpret_cast<int4*>(d + i0) = raw;
    }
  } else {
    for (int i = threadIdx.x; i < V; i += blockDim.x)
      d[i] = st<X>(i < valid ? (__expf(ld(l[i]) - mx) * inv - (i == tgt ? 1.0f : 0.0f)) * dloss : 0.0f);
  }
  if (threadIdx.x == 0) losses[row] = logf(s) + mx - target_logit;
}

// Note [vocabulary-parallel cross-entropy] (model/gpt.h), one block per row: the local maximum; the local sum of
// exp(x - global max) and the target's logit where this rank holds it; the losses and dlogits.
template <typename X>
__global__ void xent_local_max_kernel(float* stats, const X* logits, int V, int valid) {
  const int64_t row = blockIdx.x;
  const X* l = logits + row * V;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < valid; i += blockDim.x) m = fmaxf(m, ld(l[i]));
  m = block_reduce(m, Max{}, -INFINITY);
  if (threadIdx.x == 0) stats[row] = m;
}

template <typename X>
__global__ void xent_local_sums_kernel(float* stats, const X* logits, const int32_t* targets, int64_t N, int V,
                                       int valid, int64_t begin) {
  const int64_t row = blockIdx.x;
  const X* l = logits + row * V;
  const float mx = stats[row];
  float s = 0.0f;
  for (int i = threadIdx.x; i < valid; i += blockDim.x) s += __expf(ld(l[i]) - mx);
  s = block_reduce(s, Add{}, 0.0f);
  if (threadIdx.x == 0) {
    stats[N + row] = s;
    const int64_t col = targets[row] - begin;
    stats[2 * N + row] = col >= 0 && col < valid ? ld(l[col]) : 0.0f;
  }
}

template <typename X>
__global__ void xent_finish_kernel(float* losses, X* dlogits, const X* logits, const float* stats,
                                   const int32_t* targets, float dloss, int64_t N, int V, int valid, int64_t begin) {
  const int64_t row = blockIdx.x;
  const float mx = stats[row], sum = stats[N + row];
  if (threadIdx.x == 0) losses[row] = logf(sum) + mx - stats[2 * N + row];
  if (!dlogits) return;
  const X* l = logits + row * V;
  X* d = dlogits + row * V;
  const int64_t tgt = targets[row] - begin;
  const float inv = 1.0f / sum;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    d[i] = st<X>(i < valid ? (__expf(ld(l[i]) - mx) * inv - (i == tgt ? 1.0f : 0.0f)) * dloss : 0.0f);
}

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = st<D>(ld(src[i]));
}

constexpr int kSumBlocks = 512;

__device__ __forceinline__ double squares(const float4& v) {
  return static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y + static_cast<double>(v.z) * v.z +
         static_cast<double>(v.w) * v.w;
}

// A block's share of the sum of squares, in a fixed order (kSumBlocks blocks: the same partial sums every run). With
// vec (x 16-byte aligned), two 16-byte loads a thread in flight a turn: with one 4-byte load a thread the kernel could
// not keep enough bytes in flight to reach the memory's bandwidth (the gradient norm reads every gradient once a
// step: 13.7 GB at d4096).
__global__ void sum_squares_partial_kernel(double* partial, const float* x, int64_t n, bool vec) {
  double s = 0.0;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t scalar_from = 0;
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t n4 = n / 4;
    int64_t i = first;
    for (; i + stride < n4; i += 2 * stride) {
      const float4 a = x4[i], b = x4[i + stride];
      s += squares(a);
      s += squares(b);
    }
    if (i < n4) s += squares(x4[i]);
    scalar_from = 4 * n4;
  }
  for (int64_t i = scalar_from + first; i < n; i += stride) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  s = block_reduce(s, Add{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_squares_finish_kernel(float* out, const double* partial, int n) {
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  s = block_reduce(s, Add{}, 0.0);
  if (threadIdx.x == 0) out[0] = static_cast<float>(s);
}

// AdamW, one element; the same expression as the CPU backend's (host/adamw_scalar.h), so results match bit for bit.
struct AdamWScalars {
  float step_size, bc2_sqrt, decay, b2, one_minus_b1, one_minus_b2, eps;
  bool do_decay;
};
__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, const AdamWScalars& a) {
  if (a.do_decay) p *= a.decay;
  m = m + a.one_minus_b1 * (g - m);
  v = v * a.b2 + a.one_minus_b2 * g * g;
  p = p - a.step_size * (m / (sqrtf(v) / a.bc2_sqrt + a.eps));
}
__device__ __forceinline__ float adamw_clip(const float* grad_norm_sq, float grad_clip) {
  return grad_clip > 0.0f ? fminf(grad_clip / (sqrtf(grad_norm_sq[0]) + 1e-6f), 1.0f) : 1.0f;
}

// The pieces of one update with and without weight decay (AdamWArgs::piece_end, decay_bits), a kernel parameter.
struct AdamWPieces {
  int count = 1;  // at least one: the last piece ends at n
  uint32_t decay_bits = 1;
  int64_t end[AdamWArgs::kMaxPieces] = {};
};
// The piece holding element i, searched forward from piece k: a thread's elements only grow, so its cursor does too.
__device__ __forceinline__ int adamw_piece(const AdamWPieces& pc, int64_t i, int k) {
  while (k < pc.count - 1 && pc.end[k] <= i) ++k;
  return k;
}
__device__ __forceinline__ AdamWScalars adamw_in_piece(AdamWScalars a, const AdamWPieces& pc, int k) {
  a.do_decay = a.do_decay && ((pc.decay_bits >> k) & 1u) != 0;
  return a;
}

// Elements first, first + stride, ... below n, one at a time; out (may be null) receives the new parameters.
template <typename O>
__device__ __forceinline__ void adamw_elements(float* param, const float* grad, float* m, float* v, O* out,
                                               int64_t first, int64_t stride, int64_t n, float clip,
                                               const AdamWScalars& a, const AdamWPieces& pc) {
  int k = 0;
  for (int64_t i = first; i < n; i += stride) {
    k = adamw_piece(pc, i, k);
    float p = param[i], mi = m[i], vi = v[i];
    adamw_element(p, grad[i] * clip, mi, vi, adamw_in_piece(a, pc, k));
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if (out != nullptr) out[i] = st<O>(p);
  }
}

// Any alignment: one element a thread a turn.
template <typename O>
__global__ void adamw_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
                             float* __restrict__ v, O* __restrict__ out, int64_t n, const float* grad_norm_sq,
                             float grad_clip, AdamWScalars a, AdamWPieces pc) {
  adamw_elements(param, grad, m, v, out, blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x,
                 static_cast<int64_t>(gridDim.x) * blockDim.x, n, adamw_clip(grad_norm_sq, grad_clip), a, pc);
}

template <typename O>
struct alignas(4 * sizeof(O)) Four {
  O x[4];
};

// All four arrays 16-byte aligned (and out to four of its elements): four elements a thread a turn in 16-byte loads
// and stores (the update is bound by memory: 28 bytes an element, 30 with a bf16 copy); the last n % 4 elements one
// at a time.
template <typename O>
__global__ void adamw_vec4_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
                                  float* __restrict__ v, O* __restrict__ out, int64_t n, const float* grad_norm_sq,
                                  float grad_clip, AdamWScalars a, AdamWPieces pc) {
  const float clip = adamw_clip(grad_norm_sq, grad_clip);
  const int64_t n4 = n / 4;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int k = 0;
  for (int64_t i = first; i < n4; i += stride) {
    float4 p = reinterpret_cast<const float4*>(param)[i];
    const float4 g = reinterpret_cast<const float4*>(grad)[i];
    float4 mi = reinterpret_cast<const float4*>(m)[i];
    float4 vi = reinterpret_cast<const float4*>(v)[i];
    k = adamw_piece(pc, 4 * i, k);
    adamw_element(p.x, g.x * clip, mi.x, vi.x, adamw_in_piece(a, pc, k));
    k = adamw_piece(pc, 4 * i + 1, k);
    adamw_element(p.y, g.y * clip, mi.y, vi.y, adamw_in_piece(a, pc, k));
    k = adamw_piece(pc, 4 * i + 2, k);
    adamw_element(p.z, g.z * clip, mi.z, vi.z, adamw_in_piece(a, pc, k));
    k = adamw_piece(pc, 4 * i + 3, k);
    adamw_element(p.w, g.w * clip, mi.w, vi.w, adamw_in_piece(a, pc, k));
    reinterpret_cast<float4*>(m)[i] = mi;
    reinterpret_cast<float4*>(v)[i] = vi;
    reinterpret_cast<float4*>(param)[i] = p;
    if (out != nullptr) reinterpret_cast<Four<O>*>(out)[i] = Four<O>{{st<O>(p.x), st<O>(p.y), st<O>(p.z), st<O>(p.w)}};
  }
  adamw_elements(param, grad, m, v, out, 4 * n4 + first, stride, n, clip, a, pc);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------------
// launchers

void gemm_rm(cublasHandle_t h, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a,
             cudaDataType_t ab_type, int lda, const void* b, int ldb, float beta, void* c, cudaDataType_t c_type,
             int ldc) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands, keep the flags.
  TT_CUBLAS_ASSERT(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                                &alpha, b, ab_type, ldb, a, ab_type, lda, &beta, c, c_type, ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
}

template <typename X>
void embedding_forward(cudaStream_t s, X* out, const int32_t* tokens, const X* wte, const X* wpe, int B, int T, int C,
                       int64_t begin, int V) {
  const int64_t n = static_cast<int64_t>(B) * T * C;
  embedding_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, tokens, wte, wpe, T, C, n, begin, V);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void embedding_at(cudaStream_t s, X* out, const int32_t* tokens, const int32_t* positions, const X* wte, const X* wpe,
                  int N, int C) {
  const int64_t n = static_cast<int64_t>(N) * C;
  if (n == 0) return;
  embedding_at_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, tokens, positions, wte, wpe, n, C);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void embedding_backward(cudaStream_t s, const Scratch& scratch, float* dwte, float* dwpe, const X* dout,
                        const int32_t* tokens, int B, int T, int C, int64_t begin, int V, bool add_pe) {
  if (dwpe) {
    dwpe_kernel<<<blocks_for(static_cast<int64_t>(T) * C), kThreads, 0, s>>>(dwpe, dout, B, T, C, add_pe);
    TT_CUDA_CHECK_LAUNCH();
  }
  const int n = B * T;
  int bits = 1;
  while ((1 << bits) < V + 1) ++bits;  // keys up to V (embedding_keys_kernel)
  // Scratch: the keys, sorted keys, positions, sorted positions, then CUB's temporary storage.
  char* p = static_cast<char*>(scratch.ptr);
  auto take = [&](size_t bytes) {
    char* q = p;
    p += (bytes + 255) / 256 * 256;
    return q;
  };
  int32_t* keys = reinterpret_cast<int32_t*>(take(n * sizeof(int32_t)));
  int32_t* keys_out = reinterpret_cast<int32_t*>(take(n * sizeof(int32_t)));
  int32_t* pos = reinterpret_cast<int32_t*>(take(n * sizeof(int32_t)));
  int32_t* pos_out = reinterpret_cast<int32_t*>(take(n * sizeof(int32_t)));
  size_t temp_bytes = 0;
  TT_CUDA_ASSERT(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_out, pos, pos_out, n, 0, bits, s));
  void* temp = take(temp_bytes);
  TT_CHECK(static_cast<size_t>(p - static_cast<char*>(scratch.ptr)) <= scratch.bytes,
           "embedding_backward: %d positions need more than the %zu-byte CUDA scratch", n, scratch.bytes);
  embedding_keys_kernel<<<blocks_for(n), kThreads, 0, s>>>(keys, tokens, n, begin, V);
  TT_CUDA_CHECK_LAUNCH();
  iota_kernel<<<blocks_for(n), kThreads, 0, s>>>(pos, n);
  TT_CUDA_CHECK_LAUNCH();
  TT_CUDA_ASSERT(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys_out, pos, pos_out, n, 0, bits, s));
  dwte_runs_kernel<<<n, std::min(C, 1024), 0, s>>>(dwte, dout, keys_out, pos_out, n, C, V);
  TT_CUDA_CHECK_LAUNCH();
}

namespace {
unsigned warp_rows_grid(int64_t rows) {
  const int rows_per_block = kThreads / 32;
  return static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
}
// Note [LayerNorm forward in registers]: launches the register kernel and returns true where the rows split into
// aligned 16-byte vectors and fit a lane's 16 vectors; false (nothing launched) otherwise.
template <typename X, bool kResidual>
bool layernorm_forward_in_registers(cudaStream_t s, X* res, X* out, float* mean, float* rstd, const X* a, const X* b,
                                    const X* w, const X* bias, int64_t N, int C) {
  constexpr int kV = 16 / sizeof(X);
  if (N <= 0 || C <= 0 || C % kV != 0 || !dev::aligned16({res, out, a, b, w, bias})) return false;
  const int vpl = (C / kV + 31) / 32;
  const unsigned grid = static_cast<unsigned>((N + kLnFwdThreads / 32 - 1) / (kLnFwdThreads / 32));
  const auto go = [&]<int kVpl>() {
    layernorm_forward_regs_kernel<X, kVpl, kResidual><<<grid, kLnFwdThreads, 0, s>>>(res, out, mean, rstd, a, b, w,
                                                                                    bias, N, C);
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
// Chunks of rows for column sums of width `width` floats per chunk: about kColumnRowsPerChunk rows each (enough blocks
// to fill the GPU), as many as the scratch holds.
int column_chunks(int64_t N, int64_t width, size_t scratch_bytes) {
  const int64_t want = (N + kColumnRowsPerChunk - 1) / kColumnRowsPerChunk;
  const int64_t fit = static_cast<int64_t>(scratch_bytes / (static_cast<size_t>(width) * sizeof(float)));
  return static_cast<int>(std::max<int64_t>(1, std::min({want, fit, int64_t(65535)})));
}
}  // namespace

template <typename X>
void layernorm_forward(cudaStream_t s, X* out, float* mean, float* rstd, const X* inp, const X* w, const X* b,
                       int64_t N, int C) {
  if (layernorm_forward_in_registers<X, false>(s, nullptr, out, mean, rstd, inp, nullptr, w, b, N, C)) return;
  layernorm_forward_kernel<<<warp_rows_grid(N), kThreads, 0, s>>>(out, mean, rstd, inp, w, b, N, C);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void layernorm_backward(cudaStream_t s, const Scratch& scratch, X* dinp, float* dw, float* db, const X* dout,
                        const X* inp, const X* w, const float* mean, const float* rstd, int64_t N, int C, bool add) {
  // Note [one-pass LayerNorm backward], where the rows split into 16-byte vectors and a thread's share fits.
  constexpr int kV = 16 / sizeof(X);
  const int vectors = C / kV;
  if (N > 0 && C > 0 && C % kV == 0 && vectors <= kLnMaxVecs * kLnThreads && dev::aligned16({dinp, dout, inp, w})) {
    static const int sms = [] {
      int device = 0, n = 0;
      cudaGetDevice(&device);
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
      return std::max(n, 1);
    }();
    constexpr int kWarps = kLnThreads / 32;
    const int64_t fit = static_cast<int64_t>(scratch.bytes / (2 * static_cast<size_t>(C) * sizeof(float)));
    const int64_t blocks = std::max<int64_t>(1, std::min({(N + kWarps - 1) / kWarps, int64_t(2) * sms, fit}));
    const int64_t rows_per_block = (N + blocks - 1) / blocks;
    const int64_t used = (N + rows_per_block - 1) / rows_per_block;
    const int P = vectors >= kLnThreads ? 1 : kLnThreads / vectors;
    const size_t smem = P > 1 ? static_cast<size_t>(P) * 2 * C * sizeof(float) : 0;
    if (fit >= 1) {
      float* partial = static_cast<float*>(scratch.ptr);
      // The same grid and rows a block either way, so the same partials: the kernel's two forms give equal bits.
      const auto kernel = vectors <= kLnThreads ? layernorm_backward_one_pass_kernel<X, 1>
                                                : layernorm_backward_one_pass_kernel<X, kLnMaxVecs>;
      kernel<<<static_cast<unsigned>(used), kLnThreads, smem, s>>>(dinp, partial, dout, inp, w, mean, rstd, N, C,
                                                                   rows_per_block);
      TT_CUDA_CHECK_LAUNCH();
      column_finish_kernel<<<(C + 31) / 32, dim3(32, 32), 0, s>>>(dw, db, partial, C, static_cast<int>(used),
                                                                 2 * C, add);
      TT_CUDA_CHECK_LAUNCH();
      return;
    }
  }
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

template <typename X>
void gelu_forward(cudaStream_t s, X* out, const X* inp, int64_t n) {
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, inp, n);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void gelu_backward(cudaStream_t s, X* dinp, const X* inp, const X* dout, int64_t n) {
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(dinp, inp, dout, n);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void gelu_backward_scale(cudaStream_t s, X* d, const X* pre, int64_t n) {
  gelu_backward_scale_kernel<<<blocks_for(n), kThreads, 0, s>>>(d, pre, n);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void residual_layernorm_forward(cudaStream_t s, X* res, X* out, float* mean, float* rstd, const X* a, const X* b,
                                const X* w, const X* bias, int64_t N, int C) {
  if (layernorm_forward_in_registers<X, true>(s, res, out, mean, rstd, a, b, w, bias, N, C)) return;
  residual_layernorm_forward_kernel<<<warp_rows_grid(N), kThreads, 0, s>>>(res, out, mean, rstd, a, b, w, bias, N, C);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void residual_forward(cudaStream_t s, X* out, const X* a, const X* b, int64_t n) {
  constexpr int kV = 16 / sizeof(X);
  if (n % kV == 0 && dev::aligned16({out, a, b})) {
    residual_forward_vec_kernel<X><<<blocks_for(n / kV), kThreads, 0, s>>>(out, a, b, n / kV);
    TT_CUDA_CHECK_LAUNCH();
    return;
  }
  residual_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, a, b, n);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void softmax_xent_forward(cudaStream_t s, float* losses, X* probs, const X* logits, const int32_t* targets, int64_t N,
                          int V, int valid) {
  softmax_xent_forward_kernel<<<static_cast<unsigned>(N), 512, 0, s>>>(losses, probs, logits, targets, V, valid);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void softmax_xent_backward(cudaStream_t s, X* dlogits, const X* probs, const int32_t* targets, float dloss, int64_t N,
                           int V, int valid) {
  softmax_xent_backward_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(dlogits, probs, targets, dloss, V, valid);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void softmax_xent_fused(cudaStream_t s, float* losses, X* dlogits, const X* logits, const int32_t* targets,
                        float dloss, int64_t N, int V, int valid) {
  softmax_xent_fused_kernel<<<static_cast<unsigned>(N), 512, 0, s>>>(losses, dlogits, logits, targets, dloss, V, valid);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void xent_local_max(cudaStream_t s, float* stats, const X* logits, int64_t N, int V, int valid) {
  xent_local_max_kernel<<<static_cast<unsigned>(N), 512, 0, s>>>(stats, logits, V, valid);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void xent_local_sums(cudaStream_t s, float* stats, const X* logits, const int32_t* targets, int64_t N, int V, int valid,
                     int64_t begin) {
  xent_local_sums_kernel<<<static_cast<unsigned>(N), 512, 0, s>>>(stats, logits, targets, N, V, valid, begin);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void xent_finish(cudaStream_t s, float* losses, X* dlogits, const X* logits, const float* stats,
                 const int32_t* targets, float dloss, int64_t N, int V, int valid, int64_t begin) {
  xent_finish_kernel<<<static_cast<unsigned>(N), 512, 0, s>>>(losses, dlogits, logits, stats, targets, dloss, N, V,
                                                              valid, begin);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename D, typename S>
void convert(cudaStream_t s, D* dst, const S* src, int64_t n) {
  convert_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, n);
  TT_CUDA_CHECK_LAUNCH();
}

void sum_squares(cudaStream_t s, const Scratch& scratch, float* out, const float* x, int64_t n) {
  TT_CHECK(kSumBlocks * sizeof(double) <= scratch.bytes, "sum_squares: scratch too small");
  double* partial = static_cast<double*>(scratch.ptr);
  sum_squares_partial_kernel<<<kSumBlocks, kThreads, 0, s>>>(partial, x, n, dev::aligned16({x}));
  TT_CUDA_CHECK_LAUNCH();
  sum_squares_finish_kernel<<<1, kSumBlocks, 0, s>>>(out, partial, kSumBlocks);
  TT_CUDA_CHECK_LAUNCH();
}

namespace {
__global__ void sum_in_order_kernel(float* out, const float* parts, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(parts[i]);
  out[0] = static_cast<float>(s);
}
}  // namespace

void sum_in_order(cudaStream_t s, float* out, const float* parts, int64_t n) {
  sum_in_order_kernel<<<1, 1, 0, s>>>(out, parts, n);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename O>
void adamw_update(cudaStream_t s, float* param, const float* grad, float* m, float* v, O* out, int64_t n,
                  const float* grad_norm_sq, const AdamWArgs& args) {
  // Scalars exactly as the CPU backend computes them (in double, then rounded once).
  const double beta1 = args.beta1, beta2 = args.beta2, lr = args.lr, step = static_cast<double>(args.step);
  const double bc1 = 1.0 - std::pow(beta1, step);
  const double bc2 = 1.0 - std::pow(beta2, step);
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = static_cast<float>(1.0 - lr * static_cast<double>(args.weight_decay));
  const AdamWScalars a{step_size,       bc2_sqrt, decay, args.beta2, static_cast<float>(1.0 - beta1),
                       static_cast<float>(1.0 - beta2), args.eps, args.weight_decay != 0.0f};
  AdamWPieces pc;
  if (args.pieces > 0) {
    pc.count = args.pieces;
    pc.decay_bits = args.decay_bits;
    for (int i = 0; i < args.pieces; ++i) pc.end[i] = args.piece_end[static_cast<size_t>(i)];
  } else {
    pc.end[0] = n;
  }
  const bool aligned = ((reinterpret_cast<uintptr_t>(param) | reinterpret_cast<uintptr_t>(grad) |
                         reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v)) & 15) == 0 &&
                       (reinterpret_cast<uintptr_t>(out) & (4 * sizeof(O) - 1)) == 0;
  if (aligned) {
    adamw_vec4_kernel<O><<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(param, grad, m, v, out, n, grad_norm_sq,
                                                                       args.grad_clip, a, pc);
  } else {
    adamw_kernel<O><<<blocks_for(n), kThreads, 0, s>>>(param, grad, m, v, out, n, grad_norm_sq, args.grad_clip, a, pc);
  }
  TT_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------------------------------
// instantiations

#define TT_CUDA_INSTANTIATE(X)                                                                                      \
  template void embedding_forward<X>(cudaStream_t, X*, const int32_t*, const X*, const X*, int, int, int, int64_t,  \
                                     int);                                                                         \
  template void embedding_at<X>(cudaStream_t, X*, const int32_t*, const int32_t*, const X*, const X*, int, int);    \
  template void embedding_backward<X>(cudaStream_t, const Scratch&, float*, float*, const X*, const int32_t*, int,  \
                                      int, int, int64_t, int, bool);                                                \
  template void xent_local_max<X>(cudaStream_t, float*, const X*, int64_t, int, int);                               \
  template void xent_local_sums<X>(cudaStream_t, float*, const X*, const int32_t*, int64_t, int, int, int64_t);    \
  template void xent_finish<X>(cudaStream_t, float*, X*, const X*, const float*, const int32_t*, float, int64_t,    \
                               int, int, int64_t);                                                                 \
  template void layernorm_forward<X>(cudaStream_t, X*, float*, float*, const X*, const X*, const X*, int64_t, int); \
  template void layernorm_backward<X>(cudaStream_t, const Scratch&, X*, float*, float*, const X*, const X*,         \
                                      const X*, const float*, const float*, int64_t, int, bool);                   \
  template void layernorm_backward_two_pass<X>(cudaStream_t, const Scratch&, X*, float*, float*, const X*,      \
                                               const X*, const X*, const float*, const float*, int64_t, int, \
                                               bool);                                                          \
  template void broadcast_rows<X>(cudaStream_t, X*, const X*, int64_t, int);                                       \
  template void column_sums<X>(cudaStream_t, const Scratch&, float*, const X*, int64_t, int, bool);                \
  template void gelu_forward<X>(cudaStream_t, X*, const X*, int64_t);                                              \
  template void gelu_backward<X>(cudaStream_t, X*, const X*, const X*, int64_t);                                   \
  template void residual_forward<X>(cudaStream_t, X*, const X*, const X*, int64_t);                                \
  template void gelu_backward_scale<X>(cudaStream_t, X*, const X*, int64_t);                                       \
  template void residual_layernorm_forward<X>(cudaStream_t, X*, X*, float*, float*, const X*, const X*, const X*,   \
                                              const X*, int64_t, int);                                             \
  template void softmax_xent_forward<X>(cudaStream_t, float*, X*, const X*, const int32_t*, int64_t, int, int);    \
  template void softmax_xent_backward<X>(cudaStream_t, X*, const X*, const int32_t*, float, int64_t, int, int);    \
  template void softmax_xent_fused<X>(cudaStream_t, float*, X*, const X*, const int32_t*, float, int64_t, int, int);

TT_CUDA_INSTANTIATE(float)
TT_CUDA_INSTANTIATE(bf16)
#undef TT_CUDA_INSTANTIATE
template void convert<float, bf16>(cudaStream_t, float*, const bf16*, int64_t);
template void convert<bf16, float>(cudaStream_t, bf16*, const float*, int64_t);
template void adamw_update<float>(cudaStream_t, float*, const float*, float*, float*, float*, int64_t, const float*,
                                  const AdamWArgs&);
template void adamw_update<bf16>(cudaStream_t, float*, const float*, float*, float*, bf16*, int64_t, const float*,
                                 const AdamWArgs&);

}  // namespace tt::cuda
