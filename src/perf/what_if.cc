#include "perf/what_if.h"

#include <cstdlib>

#include "core/units.h"

namespace tt::perf {

namespace {
struct Preset {
  const char* name;
  double h2d, d2h;  // pinned bytes a second, as such links measure
  int64_t mem;
  const char* what;
};
constexpr int64_t kGiB = int64_t(1) << 30;
const Preset kPresets[] = {
    {"v100-pcie3", 12e9, 13e9, 32 * kGiB, "PCIe 3 x16, 32 GiB"},
    {"a100-pcie4", 25e9, 26e9, 80 * kGiB, "PCIe 4 x16, 80 GiB"},
    {"h100-pcie5", 50e9, 52e9, 80 * kGiB, "PCIe 5 x16, 80 GiB"},
    {"gh200-c2c", 400e9, 400e9, 96 * kGiB, "NVLink-C2C, 96 GiB"},
};

// "25GB/s", "25 GB/s", "12.5GiB/s": bytes a second.
Result<double> parse_rate(const std::string& key, const std::string& v) {
  const size_t slash = v.find("/s");
  TT_RETURN_IF(slash == std::string::npos || slash + 2 != v.size(), kInvalidArgument,
               "--what-if %s=%s: a rate such as 25GB/s", key.c_str(), v.c_str());
  auto b = parse_bytes(v.substr(0, slash));
  TT_RETURN_IF(!b.is_ok() || b.value() <= 0, kInvalidArgument, "--what-if %s=%s: a rate such as 25GB/s", key.c_str(),
               v.c_str());
  return static_cast<double>(b.value());
}
}  // namespace

std::string WhatIf::describe() const {
  std::string s = name.empty() ? "what-if" : "what-if " + name;
  auto rate = [](double r) { return str_format("%.1f GB/s", r / 1e9); };
  s += ": h2d " + (h2d_bytes_per_s > 0 ? rate(h2d_bytes_per_s) : std::string("as calibrated"));
  s += ", d2h " + (d2h_bytes_per_s > 0 ? rate(d2h_bytes_per_s) : std::string("as calibrated"));
  if (latency_s >= 0) s += str_format(", latency %.1f us", latency_s * 1e6);
  if (device_mem > 0) s += ", device memory " + format_bytes(device_mem);
  return s + "; compute as calibrated on this machine";
}

Result<WhatIf> parse_what_if(const std::string& text) {
  WhatIf w;
  for (const Preset& p : kPresets) {
    if (text != p.name) continue;
    w.name = p.name;
    w.h2d_bytes_per_s = p.h2d;
    w.d2h_bytes_per_s = p.d2h;
    w.device_mem = p.mem;
    return w;
  }
  TT_RETURN_IF(text.find('=') == std::string::npos, kInvalidArgument,
               "--what-if %s: a preset (v100-pcie3, a100-pcie4, h100-pcie5, gh200-c2c) or key=value pairs (h2d=, "
               "d2h=, link=, latency=, device_mem=)",
               text.c_str());
  for (size_t a = 0; a < text.size();) {
    const size_t b = std::min(text.find(',', a), text.size());
    const std::string item = text.substr(a, b - a);
    a = b + 1;
    const size_t eq = item.find('=');
    TT_RETURN_IF(eq == std::string::npos, kInvalidArgument, "--what-if: '%s' is not key=value", item.c_str());
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "h2d" || k == "d2h" || k == "link") {
      TT_ASSIGN_OR_RETURN(double r, parse_rate(k, v));
      if (k != "d2h") w.h2d_bytes_per_s = r;
      if (k != "h2d") w.d2h_bytes_per_s = r;
    } else if (k == "latency") {
      char* end = nullptr;
      const double us = std::strtod(v.c_str(), &end);
      TT_RETURN_IF(end == v.c_str() || std::string(end) != "us" || !(us >= 0) || us > 1e6, kInvalidArgument,
                   "--what-if latency=%s: microseconds such as 10us", v.c_str());
      w.latency_s = us * 1e-6;
    } else if (k == "device_mem") {
      auto m = parse_bytes(v);
      TT_RETURN_IF(!m.is_ok() || m.value() <= 0, kInvalidArgument, "--what-if device_mem=%s: a size such as 32GiB",
                   v.c_str());
      w.device_mem = m.value();
    } else {
      return make_status(StatusCode::kInvalidArgument,
                         "--what-if: unknown key '%s' (h2d, d2h, link, latency, device_mem)", k.c_str());
    }
  }
  return w;
}

void apply_what_if(const WhatIf& w, Profile& profile, TrainConfig& cfg) {
  if (w.h2d_bytes_per_s > 0) profile.h2d_pinned.bytes_per_s = w.h2d_bytes_per_s;
  if (w.d2h_bytes_per_s > 0) profile.d2h_pinned.bytes_per_s = w.d2h_bytes_per_s;
  if (w.latency_s >= 0) profile.h2d_pinned.latency_s = profile.d2h_pinned.latency_s = w.latency_s;
  if (w.device_mem > 0 && cfg.device_budget == 0) cfg.device_budget = w.device_mem / 20 * 19;
}

}  // namespace tt::perf
