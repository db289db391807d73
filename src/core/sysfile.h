// core/sysfile: small text files of /sys and /proc, read with POSIX calls and parsed with strtol, without iostreams.
// (A Python extension built with a statically linked libstdc++ crashed in `std::istream >> int`: its copy's locale
// facets were never initialised. Code the Python package reaches reads files through here.)
#pragma once

#include <string>
#include <vector>

namespace tt {

// The whole file, trailing whitespace removed; false if it cannot be opened or read.
bool read_small_file(const std::string& path, std::string* out);
// The integers of a whitespace-separated list ("10 21 21"); stops at the first thing that is not one.
std::vector<long long> parse_integers(const std::string& text);

}  // namespace tt
