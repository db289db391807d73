// memory/device_pool: the budgeted device memory pool. One arena per device, sized to the device budget; every
// device tensor is carved out of it, so the budget is a hard cap by construction (docs/ARCHITECTURE.md invariant 2).
//
// Policy:
//  - the backend reserves one region of `budget` bytes up front (CPU: an untouched anonymous mapping, so unused
//    budget costs no RAM; CUDA: one cudaMalloc) and hands it to the pool; the pool never asks for more;
//  - blocks are 256-byte aligned, taken best-fit from a free list ordered by size, split, and coalesced with
//    their neighbours when freed;
//  - a request that cannot be met returns kOutOfMemory stating the budget, bytes in use, bytes free, the largest
//    free block, the request and its class, and the knob to change (--device-budget); nothing is evicted silently;
//  - current/peak bytes per tensor class are reported to MemoryStats (tier `device`);
//  - blocks belong to the compute stream, where all allocations are used in stream order; a block also used on
//    another stream is named with record_stream(), and its free() then records an event on each such stream and
//    keeps the block out of the free lists until those events have completed (c10's recordStream): a later
//    allocation never reuses memory another stream may still read or write. The contract, as in c10: whoever gets
//    a block from allocate() first uses it on the compute stream, or on a stream that waits for the compute stream.
//
//   DevicePool pool(region, budget, Device{}, &stats);
//   TT_ASSIGN_OR_RETURN(Tensor t, pool.allocate({B, T, C}, DType::kF32, TensorClass::kActivation, "h.0.ln1"));
//   ...
//   pool.free(t);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>
#include <string>
#include <unordered_map>

#include "core/stream.h"
#include "core/tensor.h"
#include "memory/arena.h"
#include "memory/stats.h"

namespace tt::memory {

constexpr size_t kDeviceAlignBytes = 256;

// Rounds up to the pool's alignment: what a request of `bytes` really takes from the budget.
inline size_t device_alloc_size(size_t bytes) {
  return (bytes + kDeviceAlignBytes - 1) / kDeviceAlignBytes * kDeviceAlignBytes;
}

class DevicePool {
 public:
  using EventFactory = std::function<std::unique_ptr<Event>()>;
  // capacity: the device's physical memory, for error messages (0: unknown). events: makes the events that keep
  // blocks used on other streams pending (needed only if record_stream is used).
  DevicePool(void* base, size_t budget, Device device, MemoryStats* stats, size_t capacity = 0,
             EventFactory events = nullptr);
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  Result<Tensor> allocate(Shape shape, DType dtype, TensorClass cls, const std::string& tag);
  Result<void*> allocate_bytes(size_t bytes, TensorClass cls, const std::string& tag);
  void free(const Tensor& t) { free(t.raw()); }
  void free(void* ptr);
  // Marks the block at ptr as used on `stream` (besides the compute stream).
  void record_stream(const void* ptr, Stream& stream);
  // Blocks freed but waiting for other streams.
  size_t pending_bytes() const;

  // The tier its bytes are counted under in MemoryStats (kDevice; kManaged for a pool over managed memory, whose
  // pages the driver moves: memory/um.h).
  void set_tier(Tier tier) { tier_ = tier; }
  Tier tier() const { return tier_; }
  size_t budget() const { return budget_; }
  size_t in_use() const { return in_use_; }
  size_t peak_in_use() const { return peak_in_use_; }
  size_t largest_free_block() const;
  int64_t allocation_count() const { return allocation_count_; }
  Device device() const { return device_; }

 private:
  struct Live {
    size_t offset;
    size_t bytes;
    TensorClass cls;
    std::vector<Stream*> streams;  // other streams that used the block
  };
  struct Pending {
    Live block;
    std::vector<std::unique_ptr<Event>> events;
  };
  void release(const Live& block);
  // Releases pending blocks whose events completed; with wait, waits for all of them first.
  void process_pending(bool wait);

  char* base_;
  size_t budget_;
  Device device_;
  MemoryStats* stats_;
  Tier tier_ = Tier::kDevice;
  size_t in_use_ = 0;
  size_t peak_in_use_ = 0;
  int64_t allocation_count_ = 0;
  Arena arena_;
  std::unordered_map<const void*, Live> live_;
  std::vector<Pending> pending_;
  size_t capacity_ = 0;
  EventFactory events_;
};

}  // namespace tt::memory
