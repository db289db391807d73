// perf/what_if: the seed's co-design question, how the best plan and its speed change with the link and the device
// memory: this machine's profile with other host-link rates and another memory size. Compute stays as calibrated
// here (an H200's kernels with a PCIe 3 link, say), and the answers are predictions for that hybrid, nothing more.
//
//   TT_ASSIGN_OR_RETURN(WhatIf w, parse_what_if("h2d=25GB/s,d2h=25GB/s,device_mem=32GiB"));   // or "a100-pcie4"
//   apply_what_if(w, profile, train_config);   // link rates into the profile, the budget into the configuration
#pragma once

#include <string>

#include "exec/train_config.h"
#include "perf/profile.h"

namespace tt::perf {

struct WhatIf {
  std::string name;          // the preset, or "" for given values
  double h2d_bytes_per_s = 0;  // 0: as calibrated
  double d2h_bytes_per_s = 0;
  double latency_s = -1;     // < 0: as calibrated
  int64_t device_mem = 0;    // 0: the budget as configured
  std::string describe() const;
};

// Named presets: v100-pcie3, a100-pcie4, h100-pcie5, gh200-c2c (their links' usual pinned rates and memory sizes).
// Or comma-separated key=value: h2d=25GB/s, d2h=25GB/s (or link= for both), latency=10us, device_mem=32GiB. Errors
// name the key or the preset.
Result<WhatIf> parse_what_if(const std::string& text);
// The device budget becomes 95% of device_mem (what a run would leave for the CUDA context and other users) unless
// the configuration gives --device-budget.
void apply_what_if(const WhatIf& w, Profile& profile, TrainConfig& cfg);

}  // namespace tt::perf
