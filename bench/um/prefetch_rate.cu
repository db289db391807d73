// Issue 20: how fast the driver migrates managed memory, and whether splitting a migration helps. tiertrain's
// um-swap-activations runs at 0.24x of the explicit-copy swap because one cudaMemPrefetchAsync of an activation to
// the host moved 13.4 GB/s on an H200 where cudaMemcpyAsync to pinned memory moves 55 (docs/benchmarks/
// 2026-12-02-h200-um/). This measures one range of managed memory moved to the host (d2h) and back (h2d):
//
//   whole            one cudaMemPrefetchAsync of the range
//   chunks C xS      the range as C-MiB prefetches, round-robin over S streams (S = 1: one stream, in order)
//   batch C          one cudaMemPrefetchBatchAsync of the range's C-MiB pieces
//   copy             cudaMemcpyAsync between a device buffer and pinned host memory (the explicit swap's path)
//
// before each timed d2h move a kernel writes every word of the range on the device (resident and dirty there); before
// each h2d move the host writes every word (resident there). Advice (argument 3): none, accessed-by-host
// (cudaMemAdviseSetAccessedBy the CPU: its mappings are kept while the pages sit on the device), preferred-device.
// Each configuration runs `reps` times; a line gives the median and the first rep's GB/s. Managed memory is never
// more than half the GPU's free memory (the lent machines' rule: never oversubscribe).
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o prefetch_rate bench/um/prefetch_rate.cu
//   ./prefetch_rate [MiB, default 4096] [reps, default 3] [advice, default none]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                                       \
  do {                                                                                              \
    cudaError_t e_ = (x);                                                                           \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

namespace {

__global__ void write_words(uint32_t* p, size_t n, uint32_t v) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = v ^ static_cast<uint32_t>(i);
}

struct Setup {
  char* managed = nullptr;
  size_t bytes = 0;
  int device = 0;
  cudaMemLocation on_dev{}, on_host{};
  std::vector<cudaStream_t> streams;
  cudaEvent_t start = nullptr;
  std::vector<cudaEvent_t> done;
};

// Makes the range resident and dirty where the timed move starts: on the device (a kernel writes it) or on the host
// (the CPU writes it).
void place(Setup& s, bool on_device, uint32_t stamp) {
  if (on_device) {
    CK(cudaMemPrefetchAsync(s.managed, s.bytes, s.on_dev, 0, s.streams[0]));
    write_words<<<132 * 8, 256, 0, s.streams[0]>>>(reinterpret_cast<uint32_t*>(s.managed), s.bytes / 4, stamp);
    CK(cudaGetLastError());
  } else {
    CK(cudaMemPrefetchAsync(s.managed, s.bytes, s.on_host, 0, s.streams[0]));
    CK(cudaStreamSynchronize(s.streams[0]));
    std::memset(s.managed, static_cast<int>(stamp & 0xff), s.bytes);
  }
  CK(cudaDeviceSynchronize());
}

// Times `issue` (which enqueues the move on streams 0 .. used - 1): seconds from an event on stream 0, which the
// others wait for, to the last of their end events.
template <typename F>
double timed(Setup& s, int used, F&& issue) {
  CK(cudaEventRecord(s.start, s.streams[0]));
  for (int i = 1; i < used; ++i) CK(cudaStreamWaitEvent(s.streams[static_cast<size_t>(i)], s.start, 0));
  issue();
  for (int i = 0; i < used; ++i) CK(cudaEventRecord(s.done[static_cast<size_t>(i)], s.streams[static_cast<size_t>(i)]));
  float worst = 0.0f;
  for (int i = 0; i < used; ++i) {
    CK(cudaEventSynchronize(s.done[static_cast<size_t>(i)]));
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, s.start, s.done[static_cast<size_t>(i)]));
    worst = std::max(worst, ms);
  }
  return worst / 1e3;
}

void report(const char* dir, const std::string& what, size_t bytes, std::vector<double> secs) {
  const double first = bytes / secs.front() / 1e9;
  std::sort(secs.begin(), secs.end());
  const double median = bytes / secs[secs.size() / 2] / 1e9;
  std::printf("%s %-22s median %6.1f GB/s  first %6.1f GB/s  (%zu reps, %.0f MiB)\n", dir, what.c_str(), median,
              first, secs.size(), bytes / 1048576.0);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4096;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::string advice = argc > 3 ? argv[3] : "none";
  Setup s;
  CK(cudaSetDevice(s.device));
  s.bytes = mib << 20;
  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  // The managed range, the copy path's device buffer: at most half the free memory together.
  if (2 * s.bytes > free_b / 2) {
    std::fprintf(stderr, "%zu MiB twice is more than half of the %zu MiB free: refused (never oversubscribe)\n", mib,
                 free_b >> 20);
    return 2;
  }
  s.on_dev.type = cudaMemLocationTypeDevice;
  s.on_dev.id = s.device;
  s.on_host.type = cudaMemLocationTypeHost;
  s.on_host.id = 0;
  CK(cudaMallocManaged(&s.managed, s.bytes));
  if (advice == "accessed-by-host") {
    CK(cudaMemAdvise(s.managed, s.bytes, cudaMemAdviseSetAccessedBy, s.on_host));
  } else if (advice == "preferred-device") {
    CK(cudaMemAdvise(s.managed, s.bytes, cudaMemAdviseSetPreferredLocation, s.on_dev));
  } else if (advice != "none") {
    std::fprintf(stderr, "advice '%s': none, accessed-by-host or preferred-device\n", advice.c_str());
    return 2;
  }
  constexpr int kMaxStreams = 8;
  s.streams.resize(kMaxStreams);
  s.done.resize(kMaxStreams);
  for (int i = 0; i < kMaxStreams; ++i) {
    CK(cudaStreamCreateWithFlags(&s.streams[static_cast<size_t>(i)], cudaStreamNonBlocking));
    CK(cudaEventCreate(&s.done[static_cast<size_t>(i)]));
  }
  CK(cudaEventCreate(&s.start));
  std::printf("managed range %zu MiB, advice %s, %d reps; GPU free %zu of %zu MiB\n", mib, advice.c_str(), reps,
              free_b >> 20, total_b >> 20);

  for (const bool to_host : {true, false}) {
    const char* dir = to_host ? "d2h" : "h2d";
    const cudaMemLocation& to = to_host ? s.on_host : s.on_dev;
    const auto run = [&](const std::string& what, int used, const auto& issue) {
      std::vector<double> secs;
      for (int r = 0; r < reps; ++r) {
        place(s, to_host, static_cast<uint32_t>(r + 1));
        secs.push_back(timed(s, used, issue));
      }
      report(dir, what, s.bytes, secs);
    };
    run("whole", 1, [&] { CK(cudaMemPrefetchAsync(s.managed, s.bytes, to, 0, s.streams[0])); });
    for (const size_t chunk_mib : {size_t(2), size_t(8), size_t(32), size_t(128), size_t(512)}) {
      const size_t chunk = std::min(chunk_mib << 20, s.bytes);
      for (const int streams : {1, 2, 4, 8}) {
        run("chunks " + std::to_string(chunk_mib) + " MiB x" + std::to_string(streams), streams, [&] {
          size_t k = 0;
          for (size_t off = 0; off < s.bytes; off += chunk, ++k)
            CK(cudaMemPrefetchAsync(s.managed + off, std::min(chunk, s.bytes - off), to, 0,
                                    s.streams[k % static_cast<size_t>(streams)]));
        });
      }
    }
    for (const size_t chunk_mib : {size_t(2), size_t(32)}) {
      const size_t chunk = std::min(chunk_mib << 20, s.bytes);
      std::vector<void*> ptrs;
      std::vector<size_t> sizes;
      for (size_t off = 0; off < s.bytes; off += chunk) {
        ptrs.push_back(s.managed + off);
        sizes.push_back(std::min(chunk, s.bytes - off));
      }
      run("batch " + std::to_string(chunk_mib) + " MiB", 1, [&] {
        cudaMemLocation loc = to;
        size_t first = 0;
        CK(cudaMemPrefetchBatchAsync(ptrs.data(), sizes.data(), ptrs.size(), &loc, &first, 1, 0, s.streams[0]));
      });
    }
  }

  // The explicit swap's path, for reference: a device buffer to pinned host memory and back.
  char* dev = nullptr;
  char* pinned = nullptr;
  CK(cudaMalloc(&dev, s.bytes));
  CK(cudaMallocHost(&pinned, s.bytes));
  std::memset(pinned, 1, s.bytes);
  CK(cudaMemset(dev, 2, s.bytes));
  CK(cudaDeviceSynchronize());
  for (const bool to_host : {true, false}) {
    std::vector<double> secs;
    for (int r = 0; r < reps; ++r)
      secs.push_back(timed(s, 1, [&] {
        CK(cudaMemcpyAsync(to_host ? pinned : dev, to_host ? dev : pinned, s.bytes,
                           to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s.streams[0]));
      }));
    report(to_host ? "d2h" : "h2d", "copy (pinned)", s.bytes, secs);
  }
  CK(cudaFree(dev));
  CK(cudaFreeHost(pinned));
  CK(cudaFree(s.managed));
  return 0;
}
