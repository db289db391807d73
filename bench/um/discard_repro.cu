// Issue 20: the managed-activation race, outside tiertrain. The stream and event pattern of `um-swap-activations`
// (src/plan/schedule.cc, Note [managed activations]) with nothing else: N blocks of managed memory, S of them on the
// device at a time; each step a "forward" kernel writes every word of block k with a value of (step, block, word),
// the d2h stream prefetches block k to the host after it, the h2d stream populates block k + S; a "backward" kernel
// then checks every word of each block (after the h2d stream brought it back) and counts the words that differ,
// and the block's pages are made dead afterwards. How they are made dead is the mode:
//
//   discard      cudaMemDiscardBatchAsync after the backward, a prefetch to the device before the next forward
//                (tiertrain's default for um-swap-activations)
//   discard-dp   cudaMemDiscardBatchAsync after the backward, cudaMemDiscardAndPrefetchBatchAsync before the forward
//   dp-only      nothing after the backward, cudaMemDiscardAndPrefetchBatchAsync before the forward
//   evict        a prefetch to the host after the backward, a prefetch to the device before the forward (no discard)
//   dp-host      cudaMemDiscardAndPrefetchBatchAsync to the host after the backward (the pages leave the device,
//                nothing is copied), cudaMemDiscardAndPrefetchBatchAsync to the device before the forward
//   dp-host-pf   the same after the backward, a plain prefetch to the device before the forward
//
// A wrong word that holds the previous step's value is "stale"; any other wrong value is "other". Managed memory is
// never more than half the GPU's free memory (the lent machines' rule: never oversubscribe).
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o discard_repro bench/um/discard_repro.cu
//   ./discard_repro MODE [block MiB] [blocks N] [slots S] [steps] [work]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                                           \
  do {                                                                                                  \
    cudaError_t e_ = (x);                                                                               \
    if (e_ != cudaSuccess) {                                                                            \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));         \
      std::exit(2);                                                                                     \
    }                                                                                                   \
  } while (0)

__device__ __forceinline__ unsigned value(unsigned step, unsigned block, size_t i) {
  return (step * 2654435761u) ^ (block * 40503u) ^ static_cast<unsigned>(i * 2246822519u);
}

// `work` rounds of arithmetic a word, so that a kernel takes about as long as a transformer block's would.
__global__ void write_block(unsigned* p, size_t n, unsigned step, unsigned block, int work) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned v = value(step, block, i);
    unsigned x = v;
    for (int r = 0; r < work; ++r) x = x * 1664525u + 1013904223u;
    p[i] = v ^ static_cast<unsigned>((x == 0xdeadbeefu) & (work < 0));  // x kept alive; the value written is v
  }
}

__global__ void check_block(const unsigned* p, size_t n, unsigned step, unsigned block, int work,
                            unsigned long long* counts) {
  unsigned long long stale = 0, other = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const unsigned got = p[i];
    unsigned x = got;
    for (int r = 0; r < work; ++r) x = x * 1664525u + 1013904223u;
    if ((x == 0xdeadbeefu) & (work < 0)) ++other;  // never: x kept alive
    if (got == value(step, block, i)) continue;
    if (step > 0 && got == value(step - 1, block, i)) ++stale;
    else ++other;
  }
  if (stale) atomicAdd(&counts[0], stale);
  if (other) atomicAdd(&counts[1], other);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s discard|discard-dp|dp-only|evict|dp-host|dp-host-pf [block MiB] [blocks] [slots] [steps] [work]\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  if (mode != "discard" && mode != "discard-dp" && mode != "dp-only" && mode != "evict" && mode != "dp-host" &&
      mode != "dp-host-pf") {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  const size_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 4;
  const int N = argc > 3 ? std::atoi(argv[3]) : 8;
  const int S = argc > 4 ? std::atoi(argv[4]) : 2;
  const int steps = argc > 5 ? std::atoi(argv[5]) : 50;
  const int work = argc > 6 ? std::atoi(argv[6]) : 64;
  const size_t bytes = mib << 20, words = bytes / 4;
  int dev = 0;
  CK(cudaSetDevice(dev));
  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  if (bytes * N > free_b / 2) {
    std::fprintf(stderr, "refused: %zu MiB managed is more than half the %zu MiB free\n", (bytes * N) >> 20,
                 free_b >> 20);
    return 2;
  }
  unsigned* base = nullptr;
  CK(cudaMallocManaged(&base, bytes * N + (2u << 20)));
  // 2 MiB-aligned blocks, as tiertrain's managed pool has them.
  unsigned* aligned = reinterpret_cast<unsigned*>((reinterpret_cast<uintptr_t>(base) + (2u << 20) - 1) & ~uintptr_t((2u << 20) - 1));
  std::vector<unsigned*> blk(N);
  for (int k = 0; k < N; ++k) blk[k] = aligned + size_t(k) * words;
  cudaMemLocation on_dev{cudaMemLocationTypeDevice, dev}, on_host{cudaMemLocationTypeHost, 0};
  cudaStream_t compute, h2d, d2h;
  CK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&h2d, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&d2h, cudaStreamNonBlocking));
  auto events = [&] {
    std::vector<cudaEvent_t> v(N);
    for (auto& e : v) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return v;
  };
  std::vector<cudaEvent_t> ready = events(), fwd = events(), out = events(), bwd = events(), freed = events(),
                           in = events();
  unsigned long long* counts = nullptr;
  CK(cudaMalloc(&counts, 2 * sizeof(unsigned long long)));
  CK(cudaMemset(counts, 0, 2 * sizeof(unsigned long long)));
  const bool discard_after = mode == "discard" || mode == "discard-dp";
  auto dead_to_device = [&](int k) {  // the populate
    void* p = blk[k];
    size_t n = bytes;
    size_t idx = 0;
    if (mode == "discard-dp" || mode == "dp-only" || mode == "dp-host")
      CK(cudaMemDiscardAndPrefetchBatchAsync(&p, &n, 1, &on_dev, &idx, 1, 0, h2d));
    else
      CK(cudaMemPrefetchAsync(p, n, on_dev, 0, h2d));
  };
  auto populate = [&](int k) {
    CK(cudaStreamWaitEvent(h2d, freed[k]));
    if (k < N - S) CK(cudaStreamWaitEvent(h2d, out[k]));
    if (k >= S) CK(cudaStreamWaitEvent(h2d, out[k - S]));
    dead_to_device(k);
    CK(cudaEventRecord(ready[k], h2d));
  };
  // Every event recorded once before the first step, so that the first waits are on something.
  for (int k = 0; k < N; ++k)
    for (auto* v : {&ready, &fwd, &out, &bwd, &freed, &in}) CK(cudaEventRecord((*v)[k], compute));
  const int grid = 264, threads = 512;
  unsigned long long total_stale = 0, total_other = 0;
  int bad_steps = 0, first_bad = -1;
  for (int step = 0; step < steps; ++step) {
    for (int k = 0; k < S && k < N; ++k) populate(k);
    for (int k = 0; k < N; ++k) {
      CK(cudaStreamWaitEvent(compute, ready[k]));
      write_block<<<grid, threads, 0, compute>>>(blk[k], words, step, k, work);
      CK(cudaGetLastError());
      if (k < N - S) {
        CK(cudaEventRecord(fwd[k], compute));
        CK(cudaStreamWaitEvent(d2h, fwd[k]));
        CK(cudaMemPrefetchAsync(blk[k], bytes, on_host, 0, d2h));
        CK(cudaEventRecord(out[k], d2h));
        if (k + S < N) populate(k + S);
      }
    }
    for (int k = N - 1; k >= 0; --k) {
      if (k < N - S) CK(cudaStreamWaitEvent(compute, in[k]));
      check_block<<<grid, threads, 0, compute>>>(blk[k], words, step, k, work, counts);
      CK(cudaGetLastError());
      CK(cudaEventRecord(bwd[k], compute));
      if (discard_after) {
        CK(cudaStreamWaitEvent(h2d, bwd[k]));
        void* p = blk[k];
        size_t n = bytes;
        CK(cudaMemDiscardBatchAsync(&p, &n, 1, 0, h2d));
        CK(cudaEventRecord(freed[k], h2d));
      } else if (mode == "dp-host" || mode == "dp-host-pf") {
        CK(cudaStreamWaitEvent(h2d, bwd[k]));
        void* p = blk[k];
        size_t n = bytes;
        size_t idx = 0;
        CK(cudaMemDiscardAndPrefetchBatchAsync(&p, &n, 1, &on_host, &idx, 1, 0, h2d));
        CK(cudaEventRecord(freed[k], h2d));
      } else if (mode == "evict") {
        CK(cudaStreamWaitEvent(d2h, bwd[k]));
        CK(cudaMemPrefetchAsync(blk[k], bytes, on_host, 0, d2h));
        CK(cudaEventRecord(freed[k], d2h));
      } else {
        CK(cudaEventRecord(freed[k], compute));  // dp-only: dead from here, discarded at the populate
      }
      if (k >= S) {
        const int next = k - S;
        CK(cudaStreamWaitEvent(h2d, freed[k]));
        CK(cudaStreamWaitEvent(h2d, out[next]));
        CK(cudaMemPrefetchAsync(blk[next], bytes, on_dev, 0, h2d));
        CK(cudaEventRecord(in[next], h2d));
      }
    }
    CK(cudaDeviceSynchronize());
    unsigned long long c[2];
    CK(cudaMemcpy(c, counts, sizeof c, cudaMemcpyDeviceToHost));
    CK(cudaMemset(counts, 0, sizeof c));
    if (c[0] || c[1]) {
      ++bad_steps;
      if (first_bad < 0) first_bad = step;
      std::printf("step %d: %llu stale words, %llu other wrong words\n", step, c[0], c[1]);
    }
    total_stale += c[0];
    total_other += c[1];
  }
  std::printf("RESULT mode=%s block_mib=%zu blocks=%d slots=%d steps=%d work=%d bad_steps=%d first_bad=%d "
              "stale_words=%llu other_words=%llu\n",
              mode.c_str(), mib, N, S, steps, work, bad_steps, first_bad, total_stale, total_other);
  CK(cudaFree(base));
  return bad_steps ? 1 : 0;
}
