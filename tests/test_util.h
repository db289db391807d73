// Shared helpers of the tests that link the backends (tt_backends): a CPU backend, a CUDA one where there is a GPU,
// and check_util.h's comparisons.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "check_util.h"

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#ifdef TIERTRAIN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_probe.h"
#endif

namespace tt {
// gtest prints parameters with this.
inline void PrintTo(DType d, std::ostream* os) { *os << dtype_name(d); }
}  // namespace tt

namespace tt::testing {

inline std::unique_ptr<Backend> make_cpu_backend(int64_t budget = int64_t(512) << 20, int threads = 0) {
  auto r = cpu::create_backend({.device_budget = budget, .threads = threads});
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return std::move(r).value();
}

// True when this build has the CUDA backend and a GPU is visible.
inline bool have_gpu() {
#ifdef TIERTRAIN_HAVE_CUDA
  static const bool yes = cuda::probe().count > 0;
  return yes;
#else
  return false;
#endif
}

// A CUDA backend on device 0, or nullptr (and the test is skipped by the caller) when there is none.
inline std::unique_ptr<Backend> make_cuda_backend(int64_t budget = int64_t(4) << 30) {
#ifdef TIERTRAIN_HAVE_CUDA
  if (!have_gpu()) return nullptr;
  auto r = cuda::create_backend({.device = 0, .device_budget = budget});
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : nullptr;
#else
  (void)budget;
  return nullptr;
#endif
}

#define TT_SKIP_WITHOUT_GPU()                                                                       \
  do {                                                                                              \
    if (!::tt::testing::have_gpu()) GTEST_SKIP() << "no GPU here (or a build without CUDA): skipped"; \
  } while (0)

}  // namespace tt::testing
