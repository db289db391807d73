// Test helpers with no library behind them: explicit-tolerance comparisons that report the worst element, and the
// paths of test data. Any test may include it, whatever it links.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tt::testing {

inline std::string data_path(const std::string& name) { return std::string(TT_TEST_GOLDEN_DIR) + "/" + name; }

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
