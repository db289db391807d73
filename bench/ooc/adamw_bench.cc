// Throughput of the host AdamW (the CPU optimizer's update) on this machine: the vectorised update with and without
// the bf16 copy, against the scalar formula split over the same OpenMP threads (what the update was before it was
// vectorised), for 1 thread and for every thread. Bytes counted: the gradient read, the parameter, m and v read and
// written (28 per parameter), plus 2 per parameter for the bf16 copy.
//
//   build/release/bench/adamw_bench [PARAMETERS=50000000] [REPEATS=5]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <omp.h>

#include "host/adamw.h"
#include "host/adamw_scalar.h"

namespace {

double seconds_of(int repeats, auto&& f) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f(r + 1);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];  // median
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 50'000'000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<float> p(n, 0.5f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  std::vector<uint16_t> b(n);
  std::vector<float> p2(n), m2(n), v2(n);  // the second set of the out-of-place update
  // First touch by the threads that will use each range.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    p[i] = 0.5f + 1e-9f * static_cast<float>(i % 1000), g[i] = 0.01f, m[i] = v[i] = 0.0f;
    p2[i] = m2[i] = v2[i] = 0.0f;
    b[i] = 0;
  }
  const int max_threads = omp_get_max_threads();
  std::printf("host AdamW, %lld parameters, median of %d\n", static_cast<long long>(n), repeats);
  std::printf("%-28s %8s %10s %12s %8s\n", "variant", "threads", "ms", "Gparam/s", "GB/s");
  for (const int threads : {1, max_threads}) {
    omp_set_num_threads(threads);
    const auto row = [&](const char* name, double s, double bytes_per) {
      std::printf("%-28s %8d %10.2f %12.3f %8.1f\n", name, threads, s * 1e3, n / s / 1e9, n * bytes_per / s / 1e9);
    };
    row("scalar (before)", seconds_of(repeats, [&](int step) {
          const auto sc = tt::host::adamw_scalars<float>(4.0f, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 1.0f);
#pragma omp parallel for schedule(static)
          for (int64_t i = 0; i < n; ++i) tt::host::adamw_one(p.data(), g.data(), m.data(), v.data(), p.data(), m.data(), v.data(), i, sc);
        }), 28);
    row("vectorised", seconds_of(repeats, [&](int step) {
          tt::host::adamw_update_f32(p.data(), g.data(), m.data(), v.data(), nullptr, n, 4.0f, 3e-4f, 0.9f, 0.95f,
                                    1e-8f, 0.1f, step, 1.0f);
        }), 28);
    row("vectorised + bf16 copy", seconds_of(repeats, [&](int step) {
          tt::host::adamw_update_f32(p.data(), g.data(), m.data(), v.data(), b.data(), n, 4.0f, 3e-4f, 0.9f, 0.95f,
                                    1e-8f, 0.1f, step, 1.0f);
        }), 30);
    // The speculative update's form: the new state into a second set of arrays.
    row("out of place + bf16 copy", seconds_of(repeats, [&](int step) {
          tt::host::adamw_update_f32(tt::host::AdamWArrays{p.data(), g.data(), m.data(), v.data(), p2.data(), m2.data(),
                                                         v2.data(), b.data()},
                                    n, 4.0f, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 1.0f);
        }), 30);
  }
  return 0;
}
