// memory/arena: the free list of one contiguous range of bytes, by offset: best-fit allocation with splitting, and
// coalescing with both neighbours on release. No memory of its own; DevicePool and HostPool put it over theirs.
//
// Invariants: free blocks never overlap nor touch (touching blocks are merged); free + taken = size.
//
//   Arena a(1 << 20);
//   std::optional<size_t> off = a.take(4096);   // nullopt: no free block that large
//   a.give(*off, 4096);
#pragma once

#include <cstddef>
#include <map>
#include <optional>

namespace tt::memory {

class Arena {
 public:
  explicit Arena(size_t size = 0);
  // The offset of a block of exactly `bytes`, from the smallest free block that holds it; nullopt if none does.
  std::optional<size_t> take(size_t bytes);
  // Returns a block taken earlier.
  void give(size_t offset, size_t bytes);
  size_t size() const { return size_; }
  size_t free_bytes() const { return free_; }
  size_t largest_free() const;

 private:
  void insert(size_t offset, size_t bytes);
  void erase(size_t offset, size_t bytes);

  size_t size_ = 0;
  size_t free_ = 0;
  std::map<size_t, size_t> by_offset_;     // offset -> bytes
  std::multimap<size_t, size_t> by_size_;  // bytes -> offset
};

}  // namespace tt::memory
