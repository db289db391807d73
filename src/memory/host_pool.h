// memory/host_pool: host memory the copy engines read and write at full speed: page-locked ("pinned") on a GPU, on a
// chosen NUMA node. Pinning is slow (the kernel walks and locks every page) and fragments when done per buffer, so
// the pool takes memory from the OS in a few slabs, places and pins each once, and sub-allocates them exactly.
//
// Policy:
//  - reserve(bytes) takes one slab of exactly `bytes` (rounded to pages): a run that reserves what its plan needs
//    pins once, at start, and holds no more than it uses (pinned within 5% of held is tested);
//  - an allocation that no slab can hold takes a new slab of exactly its size, never a larger one;
//  - blocks are 256-byte aligned, best-fit, split and coalesced (memory/arena.h); freed blocks are reused, so a run
//    that frees and reallocates the same sizes pins nothing after warm-up;
//  - a slab is placed with mbind before its pages are touched (memory/numa.h), then pinned; a refused pin is an
//    error naming RLIMIT_MEMLOCK with its current values and how to raise it;
//  - bytes held per tensor class go to MemoryStats under the pool's tier; slab bytes are slab_bytes().
//
//   HostPool pool({.tier = Tier::kPinnedHost, .numa_node = 0, .pin = register_fn, .unpin = unregister_fn}, &stats);
//   TT_TRY(pool.reserve(need));
//   TT_ASSIGN_OR_RETURN(void* p, pool.allocate(bytes, TensorClass::kActivation, "swap.h.3"));
//   pool.free(p);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "memory/arena.h"
#include "memory/stats.h"

namespace tt::memory {

constexpr size_t kHostAlignBytes = 256;

// What a request of `bytes` really takes from the pool (rounded up to its alignment; at least one block).
inline size_t host_alloc_size(size_t bytes) {
  return ((bytes > 0 ? bytes : 1) + kHostAlignBytes - 1) / kHostAlignBytes * kHostAlignBytes;
}

struct HostPoolOptions {
  Tier tier = Tier::kPinnedHost;
  int numa_node = -1;  // -1: no placement (pages go where they are first touched)
  // Placement refused (mbind not permitted or not supported): an error if required, else a warning and no placement.
  bool numa_required = false;
  // Ask for transparent huge pages (madvise MADV_HUGEPAGE; advice: the kernel may decline): for memory the host
  // streams through, where 4 KiB pages cost a page fault each on first touch and a TLB miss every 4 KiB after.
  bool huge_pages = false;
  // Locks a slab's pages (cudaHostRegister on a GPU, mlock on the CPU backend when asked for); unset: not locked.
  // kOutOfMemory from it means the locked-memory limit (the error then names RLIMIT_MEMLOCK).
  std::function<Status(void*, size_t)> pin;
  std::function<void(void*, size_t)> unpin;
};

// The options of a pool of plain pages for what only the host touches (Backend::pageable_pool): never pinned, on
// the pinned pool's NUMA node, huge pages asked for.
inline HostPoolOptions pageable_pool_options(int numa_node, bool numa_required) {
  HostPoolOptions o;
  o.tier = Tier::kHost;
  o.numa_node = numa_node;
  o.numa_required = numa_required;
  o.huge_pages = true;
  return o;
}

class HostPool {
 public:
  HostPool(HostPoolOptions options, MemoryStats* stats);
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;
  ~HostPool();

  // Takes a slab of `bytes` now, so that allocations up to that much need no pinning later.
  Status reserve(size_t bytes);
  Result<void*> allocate(size_t bytes, TensorClass cls, const std::string& tag);
  void free(void* ptr);

  size_t slab_bytes() const { return slab_bytes_; }  // taken from the OS (and pinned, if pinning)
  size_t in_use() const { return in_use_; }          // held by live blocks
  size_t peak_in_use() const { return peak_in_use_; }
  int64_t slab_count() const { return static_cast<int64_t>(slabs_.size()); }
  int64_t allocation_count() const { return allocation_count_; }
  int numa_node() const { return options_.numa_node; }
  bool pinned() const { return static_cast<bool>(options_.pin); }
  // "3 slabs, 1.2 GiB pinned on NUMA node 0, 1.1 GiB held"
  std::string describe() const;

 private:
  struct Slab {
    char* base;
    size_t bytes;
    Arena arena;
  };
  struct Live {
    size_t slab;
    size_t offset;
    size_t bytes;
    TensorClass cls;
  };
  Status add_slab(size_t bytes);

  HostPoolOptions options_;
  MemoryStats* stats_;
  std::vector<Slab> slabs_;
  std::unordered_map<const void*, Live> live_;
  size_t slab_bytes_ = 0;
  size_t in_use_ = 0;
  size_t peak_in_use_ = 0;
  int64_t allocation_count_ = 0;
};

// The current soft and hard RLIMIT_MEMLOCK, as "8 MiB (hard: unlimited)".
std::string memlock_limit_string();

}  // namespace tt::memory
