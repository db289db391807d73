#include "comm/crew.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <system_error>
#include <vector>

namespace tt::comm {

// Note [crew]
// A rank of the shm backend moves each large collective's bytes through one core, and each phase of an allreduce (copy
// in, reduce a slice, copy the slices out) is then bound by what one core moves, far less than the host's memory can
// (docs/benchmarks/2026-11-30-h200x2-comm-tuning/, TIERTRAIN_COMM_PROFILE). Where the ranks leave CPUs idle (8 ranks
// on 32, say), a rank's crew shares those phases out over several threads. A crew has one thread unless asked for more
// (TIERTRAIN_COMM_THREADS; `tiertrain launch --bind-to share` sets it to each rank's share of the CPUs): its helpers
// spin between jobs, which takes CPU from whatever else runs there.
// The helpers wait for a job by spinning on `generation_` for a while (the phases of one call follow each other within
// microseconds), then yielding, then sleeping on it (std::atomic::wait, a futex): awake_ in all
// (TIERTRAIN_COMM_THREAD_WAIT_US; the communicator's default is 5 ms). For a job the caller bumps it to an odd value
// with release order, runs part 0 itself, and spins until `pending_` is 0; wake() bumps it to an even value, which
// sends the helpers back to spinning without a job (a collective wakes its crew in begin(), so that the futex wake-up,
// tens of us on a virtual machine, overlaps its wait for its peers instead of delaying its first copy). A helper that
// sees an odd value runs the job written before it; job_ is written again only once every helper is done (`pending_`
// 0), so a helper that missed an even value in between still runs the right job. Each helper's writes happen before its
// release decrement of `pending_`, which the caller acquires: what the helpers wrote is visible to the caller and to
// whoever it releases a flag to (streaming stores are fenced inside stream_copy before that). Parts split the work,
// never share it, so results are the same bits whatever the crew's size: a reduction's elements are each combined in
// rank order by one thread.
// Helpers left to the scheduler made a Python rank's first collectives several times slower, until the load balancer
// had moved them: a woken helper went to a busy CPU and waited there for the balancer. So each helper is pinned to a
// CPU of its own among the process's, not the one the caller was on when the crew was made (TIERTRAIN_COMM_THREAD_PIN,
// on by default), where the process has a CPU for every thread of the crew and `tiertrain launch` bound the rank to
// CPUs of its own (ranks that share CPUs would all pin to the same first ones); the caller's thread stays where it is.

namespace {

// A helper waiting for work spins for kSpin (or awake_, if shorter), then yields its CPU on each check until awake_
// (where threads outnumber CPUs, the caller may need that CPU), then sleeps on the generation; the phases of one
// collective follow each other within microseconds, so a crew stays awake through a call, and sleeps soon after it.
constexpr std::chrono::microseconds kSpin{50};

// Note [crew after fork]: a fork's child has the crew but not its helpers (only the forking thread is copied). Each
// crew notes the fork count when made; in a child made since, run() runs every part on the calling thread, wake()
// does nothing, and the destructor lets go of the helpers' handles instead of joining threads that are not there
// (a Python process that forks after making a communicator would otherwise hang at exit in the child).
std::atomic<uint64_t> g_forks{0};

void count_fork_in_child() { g_forks.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

uint64_t fork_count() {
  static const bool registered = [] { return pthread_atfork(nullptr, nullptr, count_fork_in_child) == 0; }();
  (void)registered;
  return g_forks.load(std::memory_order_relaxed);
}

void let_go_after_fork(void* p) {
  static std::mutex mu;
  static auto* kept = new std::vector<void*>;  // reachable to the end: a leak checker does not report them
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(p);
}

Crew::Crew(int threads, std::chrono::microseconds awake, bool pin) : forks_(fork_count()), awake_(awake) {
  const int want = std::clamp(threads, 1, kMaxThreads);
  // Note [crew]: pinned helpers, each on a CPU of its own that is not the caller's, among those the calling thread
  // may use.
  std::vector<int> cpus;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (pin && want > 1 && sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) >= want) {
    const int here = sched_getcpu();
    for (int cpu = 0; cpu < CPU_SETSIZE && static_cast<int>(cpus.size()) < want - 1; ++cpu)
      if (CPU_ISSET(cpu, &allowed) && cpu != here) cpus.push_back(cpu);
    if (static_cast<int>(cpus.size()) < want - 1) cpus.clear();
  }
  threads_.reserve(static_cast<size_t>(want - 1));
  bool all_pinned = !cpus.empty();
  for (int i = 1; i < want; ++i) {
    try {
      threads_.emplace_back([this, i] { helper(i); });
    } catch (const std::system_error&) {  // no more threads: a smaller crew
      break;
    }
    if (!cpus.empty()) {  // from here, so that pinned() says what took (a helper may start where it likes first)
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[static_cast<size_t>(i - 1)], &one);
      all_pinned = all_pinned && pthread_setaffinity_np(threads_.back().native_handle(), sizeof(one), &one) == 0;
    }
  }
  size_ = static_cast<int>(threads_.size()) + 1;
  if (all_pinned) pinned_.assign(cpus.begin(), cpus.begin() + static_cast<long>(threads_.size()));
}

bool Crew::forked() const { return fork_count() != forks_; }

Crew::~Crew() {
  if (forked()) {  // Note [crew after fork]: no helpers here to stop; their handles are let go, never joined
    for (auto& t : threads_) let_go_after_fork(new std::thread(std::move(t)));
    return;
  }
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void Crew::run_job(Job job, void* context) {
  if (size_ == 1 || forked() || busy_.exchange(true, std::memory_order_acquire)) {
    for (int i = 0; i < size_; ++i) job(context, i);
    return;
  }
  job_ = job;
  context_ = context;
  pending_.store(size_ - 1, std::memory_order_relaxed);
  const uint32_t g = generation_.load(std::memory_order_relaxed);  // only this thread writes it (busy_)
  generation_.store(g + ((g & 1) != 0 ? 2 : 1), std::memory_order_release);
  generation_.notify_all();
  job(context, 0);
  const auto start = std::chrono::steady_clock::now();
  for (unsigned spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin % 64 != 0 || std::chrono::steady_clock::now() - start < kSpin) cpu_relax();
    else sched_yield();
  }
  busy_.store(false, std::memory_order_release);
}

void Crew::wake() {
  if (size_ == 1 || forked() || busy_.exchange(true, std::memory_order_acquire)) return;
  const uint32_t g = generation_.load(std::memory_order_relaxed);
  generation_.store(g + ((g & 1) != 0 ? 1 : 2), std::memory_order_release);
  generation_.notify_all();  // no system call where no helper sleeps
  busy_.store(false, std::memory_order_release);
}

void Crew::helper(int index) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    const auto start = std::chrono::steady_clock::now();
    for (unsigned spin = 1; g == seen; ++spin) {
      if (spin % 64 == 0) {
        const auto waited = std::chrono::steady_clock::now() - start;
        if (waited > awake_) break;
        if (waited > kSpin) sched_yield();
      }
      cpu_relax();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    if ((g & 1) == 0) continue;  // wake(): awake again, no job
    job_(context_, index);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace tt::comm
