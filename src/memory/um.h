// memory/um: what a backend offers of Unified (managed) Memory (issue 20): one reservation of managed memory, the
// advice per range, and prefetches and discards in stream order. The executor sub-allocates the reservation with a
// DevicePool counted under Tier::kManaged, applies the plan's advice per tensor class at set-up and issues the
// schedule's prefetches and discards through this interface (Note [managed activations] in plan/schedule.cc).
//
//   UmDriver* um = backend.um();                  // nullptr: this backend has no managed memory
//   TT_ASSIGN_OR_RETURN(void* base, um->reserve(bytes, /*allow_oversubscription=*/false));
//   TT_TRY(um->advise({{base, bytes}}, UmAdvice{.preferred = UmPlace::kDevice}));
//   um->prefetch({{p, n}}, UmPlace::kHost, backend.d2h_stream());
//   um->discard({{p, n}}, UmPlace::kHost, backend.h2d_stream());  // contents dead: off the device, nothing moved
//
// CUDA (backend/cuda/um.cc): cudaMallocManaged, cudaMemAdvise / cudaMemPrefetchAsync with a cudaMemLocation (CUDA
// 13's forms), cudaMemDiscardAndPrefetchBatchAsync. The CPU backend emulates it (its device memory is host memory
// already): prefetches cost the simulated link's delay and move nothing, and a discard overwrites the range with a poison
// pattern in stream order, so that a schedule that discards live data computes wrong numbers there too (the tests'
// bit-identity against in-core then fails). RecordingUmDriver keeps every call, for the tests that compare the
// calls with the schedule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/stream.h"

namespace tt::memory {

// A GPU's managed prefetches to the host go in pieces of this many bytes unless the knob um_host_piece_mib says
// otherwise (Note [prefetches to the host in pieces] in backend/cuda/um.cc).
constexpr int64_t kDefaultUmHostPieceBytes = int64_t(32) << 20;

// Where pages are, or should be: the backend's device, or host memory. kNone: no preference.
enum class UmPlace : int { kNone = -1, kDevice = 0, kHost = 1 };
const char* um_place_name(UmPlace p);

// cudaMemAdvise's advice for one range: the preferred location, the processors that access it (mapped there, so
// that their accesses do not fault), read-mostly (read-only copies where it is read).
struct UmAdvice {
  UmPlace preferred = UmPlace::kNone;
  bool accessed_by_device = false;
  bool accessed_by_host = false;
  bool read_mostly = false;
  bool any() const { return preferred != UmPlace::kNone || accessed_by_device || accessed_by_host || read_mostly; }
  bool operator==(const UmAdvice&) const = default;
};

struct UmRange {
  void* ptr = nullptr;
  size_t bytes = 0;
};

class UmDriver {
 public:
  virtual ~UmDriver() = default;
  virtual std::string describe() const = 0;
  // One reservation of `bytes` of managed memory. Refused (kOutOfMemory, naming both figures) when it is more
  // than the device's free memory, unless allow_oversubscription: managed memory beyond the device's free memory
  // evicts pages under load, and on a GPU shared with other jobs it can stall them all.
  virtual Result<void*> reserve(size_t bytes, bool allow_oversubscription) = 0;
  virtual void release(void* base) = 0;
  // Applied at once (not in stream order), before the ranges are used.
  virtual Status advise(const std::vector<UmRange>& ranges, const UmAdvice& advice) = 0;
  // In `stream`'s order: the ranges' pages moved to `to` (kDevice or kHost); the caller orders the stream after
  // the last use of the pages where they were, and their next use after the stream.
  virtual void prefetch(const std::vector<UmRange>& ranges, UmPlace to, Stream& stream) = 0;
  // In `stream`'s order: the ranges' contents are dead, and their pages are placed at `to` (kDevice or kHost)
  // without moving their data (a discard-and-prefetch in one call; never a plain discard: Note [managed activations]
  // in plan/schedule.cc). Reading them before the next write gives indeterminate values.
  virtual void discard(const std::vector<UmRange>& ranges, UmPlace to, Stream& stream) = 0;
  // Counting of the driver's page faults and migrations (`train --um-counters`): CUPTI's Unified Memory counters on
  // a GPU; on the CPU backend's emulation, what its prefetches would have moved (it has no faults). counted() returns
  // the totals since start_counting (gpu_page_faults, cpu_page_faults, bytes_to_device, bytes_to_host, ...).
  virtual Status start_counting() {
    return make_status(StatusCode::kUnimplemented, "%s counts no page faults", describe().c_str());
  }
  virtual std::map<std::string, int64_t> counted() { return {}; }
};

// One call of a UmDriver, as RecordingUmDriver keeps it.
struct UmCall {
  enum Kind { kAdvise, kPrefetch, kDiscard } kind = kPrefetch;
  std::vector<UmRange> ranges;
  UmPlace to = UmPlace::kNone;  // kPrefetch, kDiscard
  UmAdvice advice;              // kAdvise
  const Stream* stream = nullptr;
};

// Forwards every call to another driver and keeps a copy of it (thread-safe).
class RecordingUmDriver final : public UmDriver {
 public:
  explicit RecordingUmDriver(std::unique_ptr<UmDriver> inner) : inner_(std::move(inner)) {}
  std::string describe() const override { return inner_->describe() + ", recorded"; }
  Result<void*> reserve(size_t bytes, bool allow_oversubscription) override {
    return inner_->reserve(bytes, allow_oversubscription);
  }
  void release(void* base) override { inner_->release(base); }
  Status advise(const std::vector<UmRange>& ranges, const UmAdvice& advice) override;
  void prefetch(const std::vector<UmRange>& ranges, UmPlace to, Stream& stream) override;
  void discard(const std::vector<UmRange>& ranges, UmPlace to, Stream& stream) override;
  Status start_counting() override { return inner_->start_counting(); }
  std::map<std::string, int64_t> counted() override { return inner_->counted(); }
  std::vector<UmCall> calls() const;
  void clear();

 private:
  std::unique_ptr<UmDriver> inner_;
  mutable std::mutex mu_;
  std::vector<UmCall> calls_;
};

}  // namespace tt::memory
