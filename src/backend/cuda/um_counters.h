// backend/cuda/um_counters: Unified Memory's page faults and migrations counted by CUPTI's activity API
// (CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER), for `train --um-counters` (issue 20: faults per step in each mode).
// libcupti is loaded at run time (CUDA's own folder, then the loader's path), so the build needs CUPTI's headers
// only, and a machine without libcupti says so instead of failing to start.
//
//   TT_ASSIGN_OR_RETURN(std::unique_ptr<UmCounters> c, UmCounters::start());
//   ... work ...
//   std::map<std::string, int64_t> t = c->totals();  // gpu_page_faults, cpu_page_faults, bytes_to_device, ...
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/status.h"

namespace tt::cuda {

class UmCounters {
 public:
  // Loads CUPTI, configures and enables the counters (after the CUDA context exists). One at a time per process.
  static Result<std::unique_ptr<UmCounters>> start();
  ~UmCounters();
  // Every record delivered so far, summed by kind: gpu_page_faults (fault groups), cpu_page_faults,
  // bytes_to_device, bytes_to_host, thrashing, throttling, remote_maps; and dropped_records.
  std::map<std::string, int64_t> totals();

 private:
  UmCounters() = default;
};

}  // namespace tt::cuda
