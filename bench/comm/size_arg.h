// bench/size_arg: the size flags of the C++ reference benchmarks (-b, -e: bytes, with K, M or G), as comm-bench and
// comm_bench_common.py read them.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string>

inline size_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const std::string suffix(end);
  if (suffix == "K") v *= 1024;
  if (suffix == "M") v *= 1024 * 1024;
  if (suffix == "G") v *= 1024.0 * 1024 * 1024;
  return static_cast<size_t>(v);
}
