#include "core/status.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tt {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kDataLoss: return "data loss";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kUnimplemented: return "unimplemented";
    case StatusCode::kInternal: return "internal error";
    case StatusCode::kDeadlineExceeded: return "deadline exceeded";
    case StatusCode::kAborted: return "aborted";
  }
  return "unknown";
}

std::string str_vformat(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  char small[512];
  int n = std::vsnprintf(small, sizeof(small), fmt, copy);
  va_end(copy);
  if (n < 0) return std::string(fmt);
  if (static_cast<size_t>(n) < sizeof(small)) return std::string(small, static_cast<size_t>(n));
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), fmt, args);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string str_format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = str_vformat(fmt, args);
  va_end(args);
  return s;
}

Status make_status(StatusCode code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = str_vformat(fmt, args);
  va_end(args);
  return Status(code, std::move(s));
}

void detail_result_from_ok_status() {
  std::fprintf(stderr, "tiertrain: internal check failed: a Result<T> was built from an ok Status\n");
  std::abort();
}

Status& Status::add_breadcrumb(const char* file, int line) {
  const char* base = std::strstr(file, "src/");
  breadcrumbs_.push_back(str_format("%s:%d", base ? base + 4 : file, line));
  return *this;
}

Status& Status::with_context(const std::string& context) {
  message_ = context + ": " + message_;
  return *this;
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

std::string Status::to_string_with_trail() const {
  std::string s = to_string();
  if (!breadcrumbs_.empty()) {
    s += " [at ";
    for (size_t i = 0; i < breadcrumbs_.size(); ++i) {
      if (i) s += " <- ";
      s += breadcrumbs_[i];
    }
    s += "]";
  }
  return s;
}

Status require_regular_file(const std::string& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return make_status(StatusCode::kNotFound, "%s '%s' does not exist: %s", what, path.c_str(), std::strerror(errno));
  if (S_ISREG(st.st_mode)) return Status::ok();
  // A failure of the file (exit 1), as a missing one is: the flag that names it is well formed.
  return make_status(StatusCode::kFailedPrecondition, "%s '%s' is %s, not a file", what, path.c_str(),
                     S_ISDIR(st.st_mode) ? "a folder" : "a FIFO, socket or device");
}

}  // namespace tt
