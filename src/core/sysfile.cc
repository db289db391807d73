#include "core/sysfile.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace tt {

bool read_small_file(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  while (!out->empty() && std::isspace(static_cast<unsigned char>(out->back()))) out->pop_back();
  return true;
}

std::vector<long long> parse_integers(const std::string& text) {
  std::vector<long long> out;
  const char* p = text.c_str();
  for (;;) {
    while (std::isspace(static_cast<unsigned char>(*p))) ++p;
    if (*p == '\0') break;
    char* end = nullptr;
    const long long x = std::strtoll(p, &end, 10);
    if (end == p) break;
    out.push_back(x);
    p = end;
  }
  return out;
}

}  // namespace tt
