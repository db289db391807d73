#include "memory/arena.h"

#include <iterator>

#include "core/check.h"

namespace tt::memory {

Arena::Arena(size_t size) : size_(size) {
  if (size > 0) insert(0, size);
}

void Arena::insert(size_t offset, size_t bytes) {
  by_offset_[offset] = bytes;
  by_size_.emplace(bytes, offset);
  free_ += bytes;
}

void Arena::erase(size_t offset, size_t bytes) {
  by_offset_.erase(offset);
  auto range = by_size_.equal_range(bytes);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == offset) {
      by_size_.erase(it);
      free_ -= bytes;
      return;
    }
  }
  TT_CHECK(false, "free list out of sync at offset %zu", offset);
}

size_t Arena::largest_free() const { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }

std::optional<size_t> Arena::take(size_t bytes) {
  auto it = by_size_.lower_bound(bytes);
  if (it == by_size_.end()) return std::nullopt;
  const size_t block = it->first, offset = it->second;
  erase(offset, block);
  if (block > bytes) insert(offset + bytes, block - bytes);
  return offset;
}

void Arena::give(size_t offset, size_t bytes) {
  TT_CHECK(offset + bytes <= size_, "returning [%zu, +%zu) to an arena of %zu bytes", offset, bytes, size_);
  // Coalesce with the following and the preceding free blocks.
  auto next = by_offset_.lower_bound(offset);
  TT_CHECK(next == by_offset_.end() || next->first >= offset + bytes, "returning a block that overlaps a free one");
  if (next != by_offset_.end() && next->first == offset + bytes) {
    const size_t nbytes = next->second;
    erase(next->first, nbytes);
    bytes += nbytes;
  }
  auto after = by_offset_.lower_bound(offset);
  if (after != by_offset_.begin()) {
    auto prev = std::prev(after);
    TT_CHECK(prev->first + prev->second <= offset, "returning a block that overlaps a free one");
    if (prev->first + prev->second == offset) {
      const size_t poff = prev->first, pbytes = prev->second;
      erase(poff, pbytes);
      offset = poff;
      bytes += pbytes;
    }
  }
  insert(offset, bytes);
}

}  // namespace tt::memory
