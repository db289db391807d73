// backend/cuda/device_util: device helpers shared by the kernel files: loads and stores of an activation type X
// (float or bf16) with fp32 arithmetic, warp reductions in a fixed order, cp.async copies into shared memory, and
// allow_smem for kernels launched with more than the default dynamic shared memory.
#pragma once

#include <cstdint>
#include <initializer_list>

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"

namespace tt::cuda::dev {

__device__ __forceinline__ float ld(float x) { return x; }
__device__ __forceinline__ float ld(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename X>
__device__ __forceinline__ X st(float v);
template <>
__device__ __forceinline__ float st<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Copies 16 bytes from global to shared memory asynchronously (cp.async.cg); cp_async_commit closes the group of
// copies issued since the last commit (an empty group is allowed), cp_async_wait<N> waits until at most N groups are
// in flight.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Whether every pointer is 16-byte aligned (null counts as aligned): the condition of the 16-byte vector and cp.async
// paths, checked on the host before a launch.
inline bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Allows a kernel the dynamic shared memory it is launched with (above the default 48 KiB when needed); set at every
// launch, since the attribute belongs to the current device.
template <typename K>
void allow_smem(K kernel, int bytes) {
  TT_CUDA_ASSERT(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

}  // namespace tt::cuda::dev
