// comm/collective: what the backends share about one collective operation: its kind, whether it has a root, and
// the argument errors ("misuse") a rank reports to all its peers instead of leaving them waiting. Internal to comm/.
#pragma once

#include <cstdint>

namespace tt::comm {

enum Kind : int32_t { kBarrier, kBroadcast, kReduce, kAllreduce, kGather, kScatter, kAllgather, kReduceScatter,
                      kAlltoall };

inline const char* kind_name(int64_t k) {
  static const char* names[] = {"barrier",   "broadcast", "reduce",         "allreduce", "gather",
                                "scatter",   "allgather", "reduce_scatter", "alltoall"};
  return k >= 0 && k <= kAlltoall ? names[k] : "?";
}

inline bool is_rooted(int64_t k) { return k == kBroadcast || k == kReduce || k == kGather || k == kScatter; }

enum Misuse : int32_t { kNoMisuse = 0, kBadRoot = 1, kInPlaceNotRoot = 2 };

// The misuse of a call with these arguments on a rank of a world of `size`.
inline Misuse misuse_of(int64_t kind, int root, int size, bool in_place_not_root) {
  if (is_rooted(kind) && (root < 0 || root >= size)) return kBadRoot;
  return in_place_not_root ? kInPlaceNotRoot : kNoMisuse;
}

inline const char* misuse_text(int64_t m) {
  return m == kBadRoot ? "gave a root that is not a rank"
         : m == kInPlaceNotRoot ? "asked for in place but is not the root"
                                : "";
}

}  // namespace tt::comm
