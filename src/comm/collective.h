// comm/collective: what the backends share about one collective operation: its kind, whether it has a root, and
// the argument errors ("misuse") a rank reports to all its peers instead of leaving them waiting. Internal to comm/.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "comm/comm.h"

namespace tt::comm {

inline const char* kind_name(int64_t k) {
  static const char* names[] = {"barrier",   "broadcast", "reduce",         "allreduce", "gather",
                                "scatter",   "allgather", "reduce_scatter", "alltoall"};
  return k >= 0 && k <= kAlltoall ? names[k] : "?";
}

inline bool is_rooted(int64_t k) { return k == kBroadcast || k == kReduce || k == kGather || k == kScatter; }

// Why a communicator became unusable: its first error, or abandon()'s reason. Written by a failed call (on the
// progress thread for a non-blocking one) or by abandon() (on the caller's thread, e.g. Python's after an argument
// error while an operation is in flight), read by every later call: safe from several threads.
class Broken {
 public:
  // Sets the reason unless one is set already; whether it did.
  bool set_first(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (set_.load(std::memory_order_relaxed)) return false;
    why_ = why;
    set_.store(true, std::memory_order_release);
    return true;
  }
  // Sets the reason, replacing any earlier one.
  void set(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    why_ = why;
    set_.store(true, std::memory_order_release);
  }
  bool is_set() const { return set_.load(std::memory_order_acquire); }
  std::string why() const {
    std::lock_guard<std::mutex> lock(mu_);
    return why_;
  }

 private:
  mutable std::mutex mu_;
  std::string why_;
  std::atomic<bool> set_{false};
};

enum Misuse : int32_t { kNoMisuse = 0, kBadRoot = 1, kInPlaceNotRoot = 2, kNotDeviceMemory = 3 };

// The misuse of a call with these arguments on a rank of a world of `size`.
inline Misuse misuse_of(int64_t kind, int root, int size, bool in_place_not_root) {
  if (is_rooted(kind) && (root < 0 || root >= size)) return kBadRoot;
  return in_place_not_root ? kInPlaceNotRoot : kNoMisuse;
}

inline const char* misuse_text(int64_t m) {
  return m == kBadRoot ? "gave a root that is not a rank"
         : m == kInPlaceNotRoot ? "asked for in place but is not the root"
         : m == kNotDeviceMemory ? "gave a buffer that is not memory of its GPU (cudaMalloc or managed)"
                                 : "";
}

// The aliased in-place forms of comm.h, as the backends take them (send == kInPlace): send == recv; for allgather,
// and for gather at its root, send == recv + rank * count; for reduce_scatter, recv == send + rank * count (recv
// becomes the whole buffer). Elsewhere aliasing is not in place (a non-root's gather buffer is not read). The
// Communicator's public calls apply it, so backends see only kInPlace.
struct Args {
  const void* s;
  void* r;
};
Args in_place_form(Kind k, int rank, int root, size_t count, DType d, const void* s, void* r);

// What the backends without shm's shared headers (mpi, nccl) exchange before every call, by an allgather of
// kDescriptionWords int64 per rank, so that disagreeing ranks get an error on every rank instead of a hang or a wrong
// answer: sequence number, kind, count, dtype, op, root, misuse. Fields a kind does not use are zeroed.
constexpr int kDescriptionWords = 7;
void describe(int64_t* out, int64_t seq, int64_t kind, size_t count, DType d, Op op, int root, int64_t misuse);
// The error naming every misuse and every rank whose description differs from this rank's (`all`: size x
// kDescriptionWords, rank order), or ok. `backend` goes into the message.
Status compare_descriptions(const char* backend, const int64_t* all, int size, int rank, const int64_t* mine);

}  // namespace tt::comm
