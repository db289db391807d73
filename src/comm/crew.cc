#include "comm/crew.h"

#include <sched.h>

#include <algorithm>

namespace tt::comm {

// Note [crew]
// A rank of the shm backend moves each large collective's bytes through one core: on the H200 machine's host each
// phase of an allreduce (copy in, reduce a slice, copy the slices out) runs at 6-13 GB/s a core
// (docs/benchmarks/2026-11-30-h200x2-comm-tuning/, TIERTRAIN_COMM_PROFILE). Where the ranks leave cores idle (8
// ranks on 32 CPUs), a rank's crew shares those phases out over several threads. The helpers wait for a job by
// spinning on `generation_` for a while (the phases of one call follow each other within microseconds), then
// yielding, then sleeping on it (std::atomic::wait); the caller bumps it with release order, runs part 0 itself, and spins until
// `pending_` is 0. Each helper's writes happen before its release decrement of `pending_`, which the caller
// acquires: what the helpers wrote is visible to the caller and to whoever it releases a flag to (streaming stores
// are fenced inside stream_copy before that). Parts split the work, never share it, so results are the same bits
// whatever the crew's size: a reduction's elements are each combined in rank order by one thread.

namespace {

// A waiting thread spins kSpins times, then yields its CPU on each check (where threads outnumber CPUs, the one it
// waits for may need that CPU), and a helper sleeps after kYields of those.
constexpr int kSpins = 4096;
constexpr int kYields = 4096;

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

Crew::Crew(int threads) : size_(std::clamp(threads, 1, kMaxThreads)) {
  threads_.reserve(static_cast<size_t>(size_ - 1));
  for (int i = 1; i < size_; ++i) threads_.emplace_back([this, i] { helper(i); });
}

Crew::~Crew() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void Crew::run(const std::function<void(int)>& part) {
  if (size_ == 1) {
    part(0);
    return;
  }
  job_ = &part;
  pending_.store(size_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  part(0);
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpins) relax();
    else sched_yield();
  }
}

void Crew::helper(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kSpins + kYields; ++spin) {
      if (spin < kSpins) relax();
      else sched_yield();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    (*job_)(index);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

int Crew::default_threads(int ranks) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const int n = sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : 1;
  return std::clamp(n / std::max(1, ranks), 1, kMaxThreads);
}

}  // namespace tt::comm
