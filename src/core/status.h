// core/status: error values that carry a breadcrumb trail instead of exceptions.
//
// Library code returns Status or Result<T>; tools decide whether to exit. Each TT_TRY hop appends "file:line" so a
// failure deep in a call chain reads like NCCL's "file:line -> code" trail.
//
//   Result<int> parse(const std::string& s);
//   Status run() {
//     TT_ASSIGN_OR_RETURN(int n, parse("42"));
//     TT_RETURN_IF(n < 0, kInvalidArgument, "n must be >= 0, got %d", n);
//     TT_TRY(do_work(n));
//     return Status::ok();
//   }
#pragma once

#include <cstdarg>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad flag, config value, shape
  kNotFound,            // missing file, knob, tensor
  kIoError,             // read/write/fsync/rename failed
  kDataLoss,            // truncated or corrupt file
  kOutOfMemory,         // a budget or a pool is exhausted
  kFailedPrecondition,  // state does not allow the call (mismatched checkpoint, ...)
  kUnimplemented,
  kInternal,
  kDeadlineExceeded,    // a wait passed its deadline (a peer that never arrived)
  kAborted,             // a peer died, or the operation was cancelled
};

const char* status_code_name(StatusCode code);

// printf-style formatting into a std::string.
std::string str_format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string str_vformat(const char* fmt, va_list args);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::vector<std::string>& breadcrumbs() const { return breadcrumbs_; }

  // Appends "file:line" (used by TT_TRY); returns *this for chaining.
  Status& add_breadcrumb(const char* file, int line);
  // Prefixes the message with context: "loading checkpoint x: <old message>".
  Status& with_context(const std::string& context);

  // "<code>: <message>" (no breadcrumbs).
  std::string to_string() const;
  // to_string() plus the breadcrumb trail, for logs.
  std::string to_string_with_trail() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::vector<std::string> breadcrumbs_;
};

Status make_status(StatusCode code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Ok when `path` names a regular file (after symlinks). Otherwise kNotFound when nothing is there, else
// kInvalidArgument naming what is there instead ("is a folder", "is a FIFO or device"): opening a FIFO blocks until
// a writer comes, and a folder fails later with a less clear error. `what` starts the message ("config file").
Status require_regular_file(const std::string& path, const char* what);

// Aborts: a Result must hold a value or an error, never an ok Status without a value.
[[noreturn]] void detail_result_from_ok_status();

// Result<T>: a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).is_ok()) detail_result_from_ok_status();
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  Status take_status() { return is_ok() ? Status::ok() : std::move(std::get<Status>(v_)); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> v_;
};

namespace detail {
inline Status to_status(Status s) { return s; }
template <typename T>
Status to_status(Result<T>&& r) { return r.take_status(); }
}  // namespace detail

}  // namespace tt

#define TT_CONCAT_INNER(a, b) a##b
#define TT_CONCAT(a, b) TT_CONCAT_INNER(a, b)

// Evaluates a Status expression; on failure appends a breadcrumb and returns it.
#define TT_TRY(expr)                                              \
  do {                                                            \
    ::tt::Status tt_try_status_ = (expr);                         \
    if (!tt_try_status_.is_ok()) {                                \
      tt_try_status_.add_breadcrumb(__FILE__, __LINE__);          \
      return tt_try_status_;                                      \
    }                                                             \
  } while (0)

#define TT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                  \
  auto tmp = (expr);                                              \
  if (!tmp.is_ok()) {                                             \
    ::tt::Status tt_s_ = tmp.take_status();                       \
    tt_s_.add_breadcrumb(__FILE__, __LINE__);                     \
    return tt_s_;                                                 \
  }                                                               \
  lhs = std::move(tmp).value()

// Evaluates a Result<T> expression; on success moves the value into lhs, else returns the Status.
#define TT_ASSIGN_OR_RETURN(lhs, expr) TT_ASSIGN_OR_RETURN_IMPL(TT_CONCAT(tt_result_, __LINE__), lhs, expr)

// Returns a Status with the given code and printf-style message when cond holds.
#define TT_RETURN_IF(cond, code, ...)                                                        \
  do {                                                                                       \
    if (cond) {                                                                              \
      ::tt::Status tt_s_ = ::tt::make_status(::tt::StatusCode::code, __VA_ARGS__);           \
      tt_s_.add_breadcrumb(__FILE__, __LINE__);                                              \
      return tt_s_;                                                                          \
    }                                                                                        \
  } while (0)
