// backend/cpu/cpu_backend: the CPU as a device. Its "device memory" is a budgeted arena separate from host memory
// (an anonymous mapping of --device-budget bytes, touched only as it is used), its streams are worker threads, its
// GEMMs are OpenBLAS and its other kernels OpenMP (kernels.h). Every out-of-core and mesh path therefore runs, and
// is tested, without a GPU.
//
//   TT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, cpu::create_backend({.device_budget = 1 << 30}));
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace tt::cpu {

struct CpuBackendOptions {
  int64_t device_budget = 0;  // bytes; must be > 0
  int threads = 0;            // OpenMP/OpenBLAS threads; 0 = OMP_NUM_THREADS, else the cores of the affinity mask
  int64_t copy_delay_us = 0;  // added before every host<->device copy: a slow link, to study and test overlap
  // Added before every compute-stream op and every piece of host-stream work: slow kernels and a slow host
  // optimizer, so that tests catch copies that overwrite or read data too early.
  int64_t compute_delay_us = 0;
  int64_t host_delay_us = 0;
  bool lock_host_memory = false;  // mlock the host pool's slabs (subject to RLIMIT_MEMLOCK)
  int host_numa_node = -1;        // place the host pool's slabs on this node; -1: where first touched
  bool record_um_calls = false;   // um() keeps every call (tests)
};

Result<std::unique_ptr<Backend>> create_backend(const CpuBackendOptions& options);

// Bytes of physical memory on this machine (for choosing a default budget).
int64_t physical_memory_bytes();
// Bytes of memory the kernel says are available for new allocations without swapping (MemAvailable of
// /proc/meminfo: free memory plus the page cache and reclaimable slabs it can drop); the physical memory where that
// cannot be read.
int64_t available_memory_bytes();

}  // namespace tt::cpu
