// comm/pool: which ranges of a rank's shared pool are handed out as buffers (Note [shared buffers] in comm/shm_internal.h): first
// fit over the free ranges, in granules, with neighbours merged when a range comes back. Offsets only: the caller
// maps, allocates and releases the memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace tt::comm {

class PoolRanges {
 public:
  static constexpr size_t kNone = ~size_t{0};
  // A pool of `bytes` (rounded down to whole granules), handed out in multiples of `granule` bytes at offsets that
  // are multiples of it.
  PoolRanges(size_t bytes, size_t granule);

  // The offset of a free range of at least `bytes` (rounded up to granules; 0 bytes take one), now in use; kNone if
  // no free range is that large. *taken: the bytes it took.
  size_t take(size_t bytes, size_t* taken);
  // Gives back the range that take() returned at `offset`; its length, or 0 if no range in use starts there.
  size_t give_back(size_t offset);

  size_t capacity() const { return capacity_; }
  size_t in_use() const;  // bytes in use now

 private:
  size_t granule_, capacity_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> length; no two touch (they are merged)
  std::map<size_t, size_t> used_;  // offset -> length
};

}  // namespace tt::comm
