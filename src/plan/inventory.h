// plan/inventory: every buffer a run allocates, device and host, one entry each with its tier, tensor class and the
// bytes its pool takes. The executor allocates exactly these entries (and nothing else), the budget check and
// --dry-run read the same list, so what is checked, printed and allocated cannot disagree.
//
//   Inventory inv;
//   inv.add_device("grads.seg1", {n}, DType::kF32, TensorClass::kGrad);
//   inv.add_host("swap.h.3", bytes, TensorClass::kActivation);
//   int64_t dev = inv.total(Inventory::kDevice);  // as DevicePool takes them (256-byte blocks)
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tensor.h"

namespace tt {

// What the device pool takes for one tensor of this shape and dtype (its 256-byte alignment).
size_t device_alloc_bytes(const Shape& shape, DType dtype);

struct InventoryEntry {
  std::string name;
  int where = 0;       // Inventory::kDevice, kHost or kManaged
  TensorClass cls = TensorClass::kWorkspace;
  Shape shape;         // device and managed entries; host entries are bytes
  DType dtype = DType::kU8;
  int layer = -1;
  size_t request = 0;  // bytes asked for
  size_t bytes = 0;    // bytes the pool takes for it (its alignment)
  bool backend_owned = false;  // taken by the backend itself (add_backend_reserved), not by the executor
  bool pageable = false;       // a host entry of the pageable pool (Note [pinned and pageable host memory])
};

// Note [pinned and pageable host memory]
// Host memory a copy engine reads or writes is pinned (page-locked: the host pool, memory/host_pool.h), so that the
// copies run at the link's speed and beside compute. Pinning is slow (the kernel walks and locks every page), takes
// memory the OS can no longer move or reclaim, and may be limited; memory only the host's threads touch gains
// nothing from it. So host entries that no copy reads or writes come from a second, pageable pool: AdamW's moments
// of the CPU optimizer (both sets), and its fp32 master where the copies move the bf16 compute copy instead (with f32
// compute the master is what the copies send). --dry-run and the host memory check say how much of each.

// Device bytes a set of tensors takes as the pool lays them out one after the other (each 256-byte aligned): a swap
// slot's size for the tensors carved out of it.
template <typename Requests>
size_t device_bytes_of(const Requests& requests) {
  size_t bytes = 0;
  for (const auto& r : requests) bytes += device_alloc_bytes(r.shape, r.dtype);
  return bytes;
}

class Inventory {
 public:
  // Device entries come from the device pool, host entries from the host pool (pinned where the backend pins),
  // managed entries from the managed pool (one reservation of Unified Memory: memory/um.h, issue 20).
  enum Where : int { kDevice = 0, kHost = 1, kManaged = 2 };
  static constexpr int kNumWhere = 3;

  void add_device(std::string name, Shape shape, DType dtype, TensorClass cls, int layer = -1);
  void add_host(std::string name, size_t bytes, TensorClass cls, bool pageable = false);
  // Taken from the managed pool in whole 2 MiB pieces (kManagedAlignBytes), so that no two entries share a page:
  // a discard or prefetch of one never touches another's data (cudaMemDiscardBatchAsync is undefined for memory
  // accessed during it, and the driver acts on whole pages).
  void add_managed(std::string name, Shape shape, DType dtype, TensorClass cls, int layer = -1);
  static constexpr size_t kManagedAlignBytes = size_t(2) << 20;
  // Bytes the backend reserves in the device pool for itself (CUDA's cuBLAS workspace and scratch): an entry
  // "backend.reserved" (workspace) counted in the device totals, allocated by the backend, not by the executor.
  void add_backend_reserved(int64_t bytes);

  const std::vector<InventoryEntry>& entries() const { return entries_; }
  const InventoryEntry* find(const std::string& name) const;
  int64_t total(Where w) const { return totals_[w]; }
  int64_t pageable_total() const { return pageable_; }  // of total(kHost)
  int64_t pinned_total() const { return totals_[kHost] - pageable_; }
  // "param 12.0 MiB, grad 12.0 MiB, ..." over the classes with bytes, of the host's pageable or pinned entries.
  std::string describe_host(bool pageable) const;
  int64_t of(Where w, TensorClass cls) const { return per_class_[w][static_cast<int>(cls)]; }
  int64_t backend_reserved() const { return reserved_; }
  // "param 12.0 MiB, grad 12.0 MiB, ..." over the classes with bytes.
  std::string describe(Where w) const;
  nlohmann::json to_json() const;

 private:
  void add_pooled(std::string name, Where where, Shape shape, DType dtype, TensorClass cls, int layer);
  std::vector<InventoryEntry> entries_;
  std::unordered_map<std::string, size_t> index_;  // name -> place in entries_
  int64_t totals_[kNumWhere] = {};
  int64_t per_class_[kNumWhere][kNumTensorClasses] = {};
  int64_t reserved_ = 0;
  int64_t pageable_ = 0;
};

}  // namespace tt
