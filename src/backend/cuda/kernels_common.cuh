// backend/cuda/kernels_common.cuh: what the kernels_*.cu files share, each its own copy (an anonymous namespace):
// launch geometry, block-wide reductions in a fixed order. Internal to those files; the interface is kernels.cuh.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

namespace tt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 132 * 16;  // 16 blocks for each of an H100's or H200's 132 SMs: grid-stride loops fill it
constexpr int kColumnRowsPerChunk = 32;  // rows one thread sums in the deterministic column sums

inline int blocks_for(int64_t n, int threads = kThreads) {
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

}  // namespace
}  // namespace tt::cuda
