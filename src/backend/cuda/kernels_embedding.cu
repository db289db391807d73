// backend/cuda/kernels_embedding.cu: token and position embeddings: forward, a position's lookup, backward (a stable
// sort of token ids); kernels and their launchers (kernels.cuh).
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/kernels_common.cuh"

namespace tt::cuda {
namespace {


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

}  // namespace

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

// ---------------------------------------------------------------------------------------------------------------------
// instantiations

#define TT_CUDA_INSTANTIATE(X) \
  template void embedding_forward<X>(cudaStream_t, X*, const int32_t*, const X*, const X*, int, int, int, int64_t, \
      int); \
  template void embedding_at<X>(cudaStream_t, X*, const int32_t*, const int32_t*, const X*, const X*, int, int); \
  template void embedding_backward<X>(cudaStream_t, const Scratch&, float*, float*, const X*, const int32_t*, int, \
      int, int, int64_t, int, bool);

TT_CUDA_INSTANTIATE(float)
TT_CUDA_INSTANTIATE(bf16)
#undef TT_CUDA_INSTANTIATE

}  // namespace tt::cuda
