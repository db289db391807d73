#include "core/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace tt {

Result<int64_t> parse_bytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t num_start = i;
  bool seen_digit = false, seen_dot = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    if (text[i] == '.') {
      if (seen_dot) break;
      seen_dot = true;
    } else {
      seen_digit = true;
    }
    ++i;
  }
  auto bad = [&]() {
    return make_status(StatusCode::kInvalidArgument,
                       "'%s' is not a byte size (examples: 1048576, 512MiB, 2GiB, 1.5GB)", text.c_str());
  };
  if (!seen_digit) return bad();
  double number = std::strtod(text.substr(num_start, i - num_start).c_str(), nullptr);
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < text.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) break;
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i != text.size()) return bad();
  double mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "kib" || unit == "k") mult = 1024.0;
  else if (unit == "mib" || unit == "m") mult = 1024.0 * 1024;
  else if (unit == "gib" || unit == "g") mult = 1024.0 * 1024 * 1024;
  else if (unit == "tib" || unit == "t") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "gb") mult = 1e9;
  else if (unit == "tb") mult = 1e12;
  else return bad();
  double bytes = number * mult;
  if (!(bytes < 9.0e18)) return make_status(StatusCode::kInvalidArgument, "byte size '%s' is too large", text.c_str());
  if (unit.empty() || unit == "b") {
    if (seen_dot && bytes != std::floor(bytes))
      return make_status(StatusCode::kInvalidArgument, "byte size '%s' is not a whole number of bytes", text.c_str());
  }
  return static_cast<int64_t>(std::llround(bytes));
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return str_format("%lld B", static_cast<long long>(bytes));
  return str_format("%.2f %s", v, units[u]);
}

std::string format_count(double n) {
  if (n >= 1e9) return str_format("%.2fG", n / 1e9);
  if (n >= 1e6) return str_format("%.2fM", n / 1e6);
  if (n >= 1e3) return str_format("%.1fk", n / 1e3);
  return str_format("%.0f", n);
}

}  // namespace tt
