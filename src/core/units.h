// core/units: byte sizes as people write them ("512MiB", "2GiB", "1.5GB", "123456") and back.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace tt {

// Accepts an integer or decimal number followed by an optional unit: B, KiB, MiB, GiB, TiB (powers of 1024) or
// KB, MB, GB, TB (powers of 1000); case-insensitive, optional space. Rejects negatives, overflow and junk.
Result<int64_t> parse_bytes(const std::string& text);

// "1.50 GiB", "512.00 MiB", "1023 B".
std::string format_bytes(int64_t bytes);

// A count or rate in short: "1.23M", "412.5k", "950".
std::string format_count(double n);

}  // namespace tt
