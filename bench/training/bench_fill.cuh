// bench/training/bench_fill.cuh: what the CUDA benchmarks of bench/training share: deterministic pseudo-random bf16
// values on the device (a hash of the index and a seed), so that every run and every compared path reads the same
// inputs.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

namespace tt::bench {

// p[i] = scale * a value in [-1, 1) hashed from i and seed.
__global__ inline void fill_kernel(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    p[i] = __float2bfloat16(scale * (static_cast<float>(h & 0xffff) / 32768.0f - 1.0f));
  }
}

}  // namespace tt::bench
