// core/check: assertions for invariants that must hold in every build (TT_CHECK) or in debug builds (TT_DCHECK),
// and the one generic check macro that the CUDA/NCCL/MPI checks are built from.
//
// TT_CHECK is for programmer errors (a broken invariant), never for bad user input: user input gets a Status.
//
//   TT_CHECK(n >= 0, "negative size %lld", (long long)n);
//   TT_EXT_CHECK(cudaMalloc(&p, n), cudaSuccess, cudaGetErrorString, "cuda");   // returns a Status on failure
#pragma once

#include <cstdio>
#include <cstdlib>

#include "core/status.h"

namespace tt::detail {
inline std::string check_message() { return {}; }
template <typename... Args>
std::string check_message(const char* fmt, Args... args) {
  if constexpr (sizeof...(Args) == 0) {
    return fmt;
  } else {
    return str_format(fmt, args...);
  }
}
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace tt::detail

#define TT_CHECK(cond, ...)                                                                             \
  do {                                                                                                  \
    if (__builtin_expect(!(cond), 0))                                                                   \
      ::tt::detail::check_failed(__FILE__, __LINE__, #cond, ::tt::detail::check_message(__VA_ARGS__));         \
  } while (0)

#ifdef NDEBUG
#define TT_DCHECK(cond, ...) \
  do {                       \
  } while (0)
#else
#define TT_DCHECK(cond, ...) TT_CHECK(cond, __VA_ARGS__)
#endif

// Generic check for a C API that returns an error code: evaluates call, compares with ok_value, and on failure
// returns a kInternal Status "<lib> error <code> (<to_string(code)>) in <call>" with a breadcrumb.
#define TT_EXT_CHECK(call, ok_value, to_string, lib)                                                       \
  do {                                                                                                     \
    auto tt_ext_rc_ = (call);                                                                              \
    if (tt_ext_rc_ != (ok_value)) {                                                                        \
      ::tt::Status tt_s_ = ::tt::make_status(::tt::StatusCode::kInternal, "%s error %d (%s) in %s", lib,   \
                                             static_cast<int>(tt_ext_rc_), to_string(tt_ext_rc_), #call);  \
      tt_s_.add_breadcrumb(__FILE__, __LINE__);                                                            \
      return tt_s_;                                                                                        \
    }                                                                                                      \
  } while (0)
