// backend/cuda/kernels_xent.cu: softmax cross-entropy over the vocabulary: whole rows, or in chunks of the LM head;
// kernels and their launchers (kernels.cuh).
#include "backend/cuda/kernels_common.cuh"

namespace tt::cuda {
namespace {

// One block per row; probs may alias logits.
template <typename X>
__global__ void softmax_xent_forward_kernel(float* losses, X* probs, const X* logits, const int32_t* targets, int V,
                                            int valid) {
  const int64_t row = blockIdx.x;
  const X* l = logits + row * V;
  X* p = probs + row * V;
  const int tgt = targets[row];  // < 0: no target here (Note [loss mask]): loss 0
  __shared__ float target_logit;
  if (threadIdx.x == 0) target_logit = tgt >= 0 ? ld(l[tgt]) : 0.0f;
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
  if (threadIdx.x == 0) losses[row] = tgt >= 0 ? logf(s) + mx - target_logit : 0.0f;
}

// One block per row (no 64-bit division per element).
template <typename X>
__global__ void softmax_xent_backward_kernel(X* dlogits, const X* probs, const int32_t* targets, float dloss, int V,
                                             int valid) {
  const int64_t row = blockIdx.x;
  const int tgt = targets[row];
  const float scale = tgt >= 0 ? dloss : 0.0f;  // Note [loss mask]: no gradient from a row without a target
  const X* p = probs + row * V;
  X* d = dlogits + row * V;
  for (int col = threadIdx.x; col < V; col += blockDim.x)
    d[col] = st<X>(col < valid ? (ld(p[col]) - (col == tgt ? 1.0f : 0.0f)) * scale : 0.0f);
}

// Note [cross-entropy rows in flight]
// The fused loss reads each row of logits twice (the max and sum, then dlogits written in place). With one block of
// 512 threads a row, an H100 holds 4 rows an SM in flight: 528 rows of the Llama-3 vocabulary (256 KiB each in bf16)
// are 135 MiB against a 50 MiB L2, so the second pass reads the row from memory again (the 1B step's loss, 2.2 ms,
// is what three passes over the logits would take). A grid of fewer blocks, each taking every gridDim-th row, keeps
// the rows in flight within L2; four 16-byte loads a thread in flight keep the memory busy with fewer threads.
// Each thread reads the same elements in the same order whatever the grid: the same bits. The launcher takes the
// grid (0: one block a row, the default). Measured (bench/training/xent_rows.cu, H100, 2026-12-07: record
// docs/benchmarks/2026-12-07-h100-llama-1b-bf16-grads/): one block a row is the fastest, 0.536 ms for 2,048 rows
// (2.94 TB/s counting three passes over the rows, near the card's memory bandwidth) against 0.542-0.983 ms for 528
// down to 66 blocks, and 2.080 ms for 8,192 rows against 2.134 at 264 blocks: the rows' second pass was not waiting
// on memory the way the estimate above assumed, and the knob stays for other cards.

// Forward and backward of the cross-entropy, two passes over a row by one block: an online max and sum of exp, then
// dlogits. A block takes rows blockIdx.x, blockIdx.x + gridDim.x, ...: with a grid of fewer blocks than rows, the
// rows in flight (the grid's) fit in L2 and the second pass reads them from there (Note [cross-entropy rows in
// flight]). A thread reads the same elements in the same order whatever the grid: the same bits. Rows whose length
// is a multiple of 16 bytes' worth of values and that are 16-byte aligned move 16 bytes per load and store, kUnroll
// loads a thread in flight.
template <typename X>
__global__ void softmax_xent_fused_kernel(float* losses, X* dlogits, const X* logits, const int32_t* targets,
                                          float dloss, int64_t N, int V, int valid) {
  constexpr int kVec = 16 / sizeof(X);
  constexpr int kUnroll = 4;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const X* l = logits + row * V;
    X* d = dlogits + row * V;
    const int tgt = targets[row];
    const bool vec =
        V % kVec == 0 && reinterpret_cast<uintptr_t>(l) % 16 == 0 && reinterpret_cast<uintptr_t>(d) % 16 == 0;
    if (tgt < 0) {  // Note [loss mask]: no target here: loss 0, no gradient (the whole block takes this branch)
      for (int i = threadIdx.x; i < V; i += blockDim.x) d[i] = st<X>(0.0f);
      if (threadIdx.x == 0) losses[row] = 0.0f;
      continue;
    }
    // Thread 0's alone, read before any thread overwrites the row (the barriers of the reductions below).
    const float target_logit = threadIdx.x == 0 ? ld(l[tgt]) : 0.0f;
    float tmx = -FLT_MAX, ts = 0.0f;
    const int step = blockDim.x * kVec;
    if (vec) {
      for (int base = threadIdx.x * kVec; base < valid; base += kUnroll * step) {
        int4 raw[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (base + u * step < valid) raw[u] = *reinterpret_cast<const int4*>(l + base + u * step);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int i0 = base + u * step;
          if (i0 >= valid) break;
          const X* x = reinterpret_cast<const X*>(&raw[u]);
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
      for (int base = threadIdx.x * kVec; base < V; base += kUnroll * step) {
        int4 raw[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (base + u * step < V) raw[u] = *reinterpret_cast<const int4*>(l + base + u * step);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int i0 = base + u * step;
          if (i0 >= V) break;
          X* x = reinterpret_cast<X*>(&raw[u]);
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            const int i = i0 + k;
            x[k] = st<X>(i < valid ? (__expf(ld(x[k]) - mx) * inv - (i == tgt ? 1.0f : 0.0f)) * dloss : 0.0f);
          }
          *reinterpret_cast<int4*>(d + i0) = raw[u];
        }
      }
    } else {
      for (int i = threadIdx.x; i < V; i += blockDim.x)
        d[i] = st<X>(i < valid ? (__expf(ld(l[i]) - mx) * inv - (i == tgt ? 1.0f : 0.0f)) * dloss : 0.0f);
    }
    if (threadIdx.x == 0) losses[row] = logf(s) + mx - target_logit;
  }
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
    const int64_t col = targets[row] - begin;  // a negative target (Note [loss mask]) is no rank's column
    stats[2 * N + row] = targets[row] >= 0 && col >= 0 && col < valid ? ld(l[col]) : 0.0f;
  }
}

template <typename X>
__global__ void xent_finish_kernel(float* losses, X* dlogits, const X* logits, const float* stats,
                                   const int32_t* targets, float dloss, int64_t N, int V, int valid, int64_t begin) {
  const int64_t row = blockIdx.x;
  const float mx = stats[row], sum = stats[N + row];
  const bool counts = targets[row] >= 0;  // Note [loss mask]
  if (threadIdx.x == 0) losses[row] = counts ? logf(sum) + mx - stats[2 * N + row] : 0.0f;
  if (!dlogits) return;
  const X* l = logits + row * V;
  X* d = dlogits + row * V;
  const int64_t tgt = counts ? targets[row] - begin : -1;
  const float inv = 1.0f / sum, scale = counts ? dloss : 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    d[i] = st<X>(i < valid ? (__expf(ld(l[i]) - mx) * inv - (i == tgt ? 1.0f : 0.0f)) * scale : 0.0f);
}

}  // namespace

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
                        float dloss, int64_t N, int V, int valid, int64_t blocks) {
  if (blocks <= 0) blocks = N;
  blocks = std::max<int64_t>(1, std::min(blocks, N));
  softmax_xent_fused_kernel<<<static_cast<unsigned>(blocks), 512, 0, s>>>(losses, dlogits, logits, targets, dloss, N,
                                                                          V, valid);
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

// ---------------------------------------------------------------------------------------------------------------------
// instantiations

#define TT_CUDA_INSTANTIATE(X) \
  template void xent_local_max<X>(cudaStream_t, float*, const X*, int64_t, int, int); \
  template void xent_local_sums<X>(cudaStream_t, float*, const X*, const int32_t*, int64_t, int, int, int64_t); \
  template void xent_finish<X>(cudaStream_t, float*, X*, const X*, const float*, const int32_t*, float, int64_t, \
      int, int, int64_t); \
  template void softmax_xent_forward<X>(cudaStream_t, float*, X*, const X*, const int32_t*, int64_t, int, int); \
  template void softmax_xent_backward<X>(cudaStream_t, X*, const X*, const int32_t*, float, int64_t, int, int); \
  template void softmax_xent_fused<X>(cudaStream_t, float*, X*, const X*, const int32_t*, float, int64_t, int, int, \
      int64_t);

TT_CUDA_INSTANTIATE(float)
TT_CUDA_INSTANTIATE(bf16)
#undef TT_CUDA_INSTANTIATE

}  // namespace tt::cuda
