// backend/cuda/kernel_columns.cuh: the deterministic column sums (bias and LayerNorm weight gradients): partials of
// fixed chunks of rows, then added in a fixed order; and the 16-byte vectors of columns they read. Internal to
// kernels_layernorm.cu and kernels_linear.cu.
#pragma once

#include "backend/cuda/kernels_common.cuh"

namespace tt::cuda {
namespace {

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

// Chunks of rows for column sums of width `width` floats per chunk: about kColumnRowsPerChunk rows each (enough blocks
// to fill the GPU), as many as the scratch holds.
inline int column_chunks(int64_t N, int64_t width, size_t scratch_bytes) {
  const int64_t want = (N + kColumnRowsPerChunk - 1) / kColumnRowsPerChunk;
  const int64_t fit = static_cast<int64_t>(scratch_bytes / (static_cast<size_t>(width) * sizeof(float)));
  return static_cast<int>(std::max<int64_t>(1, std::min({want, fit, int64_t(65535)})));
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

}  // namespace
}  // namespace tt::cuda
