#include "comm/pool.h"

#include <iterator>

namespace tt::comm {

PoolRanges::PoolRanges(size_t bytes, size_t granule) : granule_(granule), capacity_(bytes / granule * granule) {
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

size_t PoolRanges::take(size_t bytes, size_t* taken) {
  const size_t want = bytes == 0 ? granule_ : (bytes + granule_ - 1) / granule_ * granule_;
  if (want < bytes) return kNone;  // overflow
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const size_t off = it->first, rest = it->second - want;
    free_.erase(it);
    if (rest > 0) free_.emplace(off + want, rest);
    used_.emplace(off, want);
    if (taken != nullptr) *taken = want;
    return off;
  }
  return kNone;
}

size_t PoolRanges::give_back(size_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto u = used_.find(offset);
  if (u == used_.end()) return 0;
  const size_t given = u->second;
  size_t off = u->first, len = given;
  used_.erase(u);
  auto next = free_.lower_bound(off);
  if (next != free_.end() && next->first == off + len) {  // merge with the range after
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // and with the one before
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(off, len);
  return given;
}

size_t PoolRanges::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [o, l] : used_) n += l;
  return n;
}

}  // namespace tt::comm
