// The host's memory bandwidth as the collectives and the host AdamW meet it: T threads (1, 2, 4, ... up to every
// CPU), each copying, reading or writing a private buffer of its own, all at once. The ceiling the shm backend's
// copies (issue 5) and the CPU optimizer's update (issue 4 b) run against on a machine.
//
//   OMP_PROC_BIND=close OMP_PLACES=cores build/release/bench/membw [MIB_PER_THREAD=64] [SECONDS=0.3]
//
// Columns (GB/s, summed over the threads; the median of 5 timed rounds after one untimed):
//   copy       memcpy from one buffer to another: bytes copied (memory traffic is 2x, 3x with the destination's
//              line reads before writes)
//   copy nt    the same with non-temporal (streaming) stores, as the shm backend copies large results
//              (comm::stream_copy): no destination reads
//   read       a sum over the buffer
//   write nt   streaming stores of a constant
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <emmintrin.h>
#include <omp.h>

#include "comm/reduce.h"

namespace {

using Clock = std::chrono::steady_clock;

uint64_t read_sum(const char* src, size_t bytes) {
  const uint64_t* p = reinterpret_cast<const uint64_t*>(src);
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < bytes / 8; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  return s0 + s1 + s2 + s3;
}

void write_nt(char* dst, size_t bytes) {
  const __m128i v = _mm_set1_epi32(0x01020304);
  for (size_t i = 0; i < bytes; i += 16) _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), v);
  _mm_sfence();
}

struct Buffers {
  char* src = nullptr;
  char* dst = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? static_cast<size_t>(std::atoll(argv[1])) : 64;
  const double min_seconds = argc > 2 ? std::atof(argv[2]) : 0.3;
  const size_t bytes = mib << 20;
  const int max_threads = omp_get_max_threads();
  std::vector<int> counts;
  for (int t = 1; t < max_threads; t *= 2) counts.push_back(t);
  counts.push_back(max_threads);
  std::vector<Buffers> buf(static_cast<size_t>(max_threads));
  // Each thread allocates and first-touches its own buffers (its NUMA node's memory).
#pragma omp parallel num_threads(max_threads)
  {
    Buffers& b = buf[static_cast<size_t>(omp_get_thread_num())];
    b.src = static_cast<char*>(std::aligned_alloc(4096, bytes));
    b.dst = static_cast<char*>(std::aligned_alloc(4096, bytes));
    std::memset(b.src, 1, bytes);
    std::memset(b.dst, 2, bytes);
  }
  std::printf("# membw: %zu MiB per thread, %d CPUs; GB/s summed over the threads (median of 5 rounds)\n", mib,
              max_threads);
  std::printf("# %7s %10s %10s %10s %10s\n", "threads", "copy", "copy nt", "read", "write nt");
  volatile uint64_t sink = 0;
  for (int t : counts) {
    double gbs[4];
    for (int kind = 0; kind < 4; ++kind) {
      // Rounds of `reps` passes, reps chosen so that a round lasts about min_seconds / 5.
      int reps = 1;
      std::vector<double> rates;
      for (int round = -1; round < 5; ++round) {
        const auto t0 = Clock::now();
        uint64_t local = 0;
#pragma omp parallel num_threads(t) reduction(+ : local)
        {
          Buffers& b = buf[static_cast<size_t>(omp_get_thread_num())];
          for (int r = 0; r < reps; ++r) {
            switch (kind) {
              case 0: std::memcpy(b.dst, b.src, bytes); break;
              case 1: tt::comm::stream_copy(b.dst, b.src, bytes); break;
              case 2: local += read_sum(b.src, bytes); break;
              default: write_nt(b.dst, bytes); break;
            }
          }
        }
        sink = sink + local;
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        if (round < 0) {  // untimed: sizes the rounds
          reps = std::max(1, static_cast<int>(min_seconds / 5 / std::max(s, 1e-6)));
          continue;
        }
        rates.push_back(static_cast<double>(bytes) * reps * t / s / 1e9);
      }
      std::sort(rates.begin(), rates.end());
      gbs[kind] = rates[rates.size() / 2];
    }
    std::printf("  %7d %10.1f %10.1f %10.1f %10.1f\n", t, gbs[0], gbs[1], gbs[2], gbs[3]);
    std::fflush(stdout);
  }
  for (Buffers& b : buf) {
    std::free(b.src);
    std::free(b.dst);
  }
  return 0;
}
