// Shared helpers of the tests: a CPU backend, explicit-tolerance comparisons that report the worst element, and the
// paths of test data.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "exec/executor.h"
#ifdef TIERTRAIN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_probe.h"
#endif

namespace tt {
// gtest prints parameters with this.
inline void PrintTo(DType d, std::ostream* os) { *os << dtype_name(d); }
}  // namespace tt

namespace tt::testing {

inline std::string data_path(const std::string& name) { return std::string(TT_TEST_GOLDEN_DIR) + "/" + name; }

inline std::unique_ptr<Backend> make_cpu_backend(int64_t budget = int64_t(512) << 20, int threads = 0) {
  auto r = cpu::create_backend({.device_budget = budget, .threads = threads});
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return std::move(r).value();
}

// A GPT placed by an executor: all resident with the optimizer on the device unless `spec` says otherwise (its
// model, batch and dtype are set here).
inline Result<std::unique_ptr<Executor>> make_gpt(Backend& be, const GptConfig& cfg, int batch, DType dtype,
                                                  ExecSpec spec = {}) {
  spec.model = cfg;
  spec.batch = batch;
  spec.compute = dtype;
  return Executor::create(be, std::move(spec));
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

// Elementwise |got - want| <= atol + rtol * |want|; reports the worst element on failure.
template <typename A, typename B>
::testing::AssertionResult all_close(const std::string& what, const A* got, const B* want, size_t n, double atol,
                                     double rtol) {
  double worst_excess = 0, worst_err = 0;
  size_t worst = 0, bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const double err = std::fabs(g - w), tol = atol + rtol * std::fabs(w);
    if (!(err <= tol)) {
      ++bad;
      if (!(err - tol <= worst_excess)) {
        worst_excess = err - tol;
        worst = i;
        worst_err = err;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << n << " elements outside atol " << atol
                                       << " rtol " << rtol << "; worst at " << worst << ": got "
                                       << static_cast<double>(got[worst]) << " want "
                                       << static_cast<double>(want[worst]) << " (err " << worst_err << ")";
}

template <typename A, typename B>
::testing::AssertionResult all_close(const std::string& what, const std::vector<A>& got, const std::vector<B>& want,
                                     double atol, double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size();
  return all_close(what, got.data(), want.data(), got.size(), atol, rtol);
}

inline double max_abs_diff(const double* a, const double* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace tt::testing
