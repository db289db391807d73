// comm/crew: a rank's helper threads, which share out the large copies and reductions of one collective (Note
// [crew] in crew.cc). A crew of one is the calling thread alone.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace tt::comm {

class Crew {
 public:
  // threads: how many take part, the caller included (1: no helpers; at most kMaxThreads); the helpers run where
  // this process may. A helper that cannot be started leaves the crew smaller. awake: how long a helper stays awake
  // (spinning, then yielding its CPU) after its last job or wake() before it sleeps (TIERTRAIN_COMM_THREAD_WAIT_US).
  // pin: each helper runs on a CPU of its own among those the constructing thread may use, none on the CPU it is on
  // (only where there are CPUs for all; the communicator asks for it where a launcher narrowed the ranks' CPUs,
  // TIERTRAIN_COMM_THREAD_PIN).
  explicit Crew(int threads, std::chrono::microseconds awake = kAwake, bool pin = false);
  ~Crew();
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;

  static constexpr int kMaxThreads = 8;
  static constexpr std::chrono::microseconds kAwake{200};
  int size() const { return size_; }
  // The CPU each helper was pinned to (empty where not all could be pinned).
  const std::vector<int>& pinned() const { return pinned_; }
  // Wakes helpers that sleep, without a job, so that they are awake when the next run() comes: a collective that will
  // run its crew calls it first, and the helpers wake while it waits for its peers.
  void wake();
  // Runs part(i) for i in [0, size()), part 0 on the calling thread and the others on the helpers at once, and
  // returns when all are done: what the parts wrote is then visible to the caller (and to whoever the caller
  // releases it to). part must not throw. A call made while another runs (from a part, or from a second thread),
  // or in a fork's child, runs its parts one after the other on its own thread.
  template <typename F>
  void run(F&& part) {
    run_job([](void* f, int i) { (*static_cast<std::remove_reference_t<F>*>(f))(i); },
            const_cast<void*>(static_cast<const void*>(&part)));
  }

 private:
  using Job = void (*)(void* context, int part);
  void run_job(Job job, void* context);
  bool forked() const;  // Note [crew after fork]: this is a fork's child made since the crew was
  void helper(int index);

  uint64_t forks_ = 0;  // the process's fork count when the crew was made (Note [crew after fork])
  int size_ = 1;
  std::vector<std::thread> threads_;
  std::vector<int> pinned_;  // helper i (1-based) runs on pinned_[i - 1]
  Job job_ = nullptr;
  void* context_ = nullptr;
  std::chrono::microseconds awake_;
  // Bumped for each job (to an odd value), each wake() (to an even one) and once more to stop (a futex word).
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};          // helpers not yet done with the current job
  std::atomic<bool> busy_{false};        // a job is running
  std::atomic<bool> stop_{false};
};

// Note [crew after fork] in crew.cc: how many forks made this process (the child of a fork made since a thread was
// started does not have it), and a place for what such a child must let go of without freeing or joining (kept
// reachable, so that a leak checker does not report it).
uint64_t fork_count();
void let_go_after_fork(void* p);

// A spinning thread's pause (x86's PAUSE: the core's sibling gets the pipeline meanwhile).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// [begin, end) of part i of `parts` equal parts of n items, part boundaries multiples of `grain` items.
inline void share(size_t n, int parts, int i, size_t grain, size_t* begin, size_t* end) {
  const size_t units = (n + grain - 1) / grain;
  const size_t per = units / static_cast<size_t>(parts), extra = units % static_cast<size_t>(parts);
  const size_t u0 = static_cast<size_t>(i) * per + std::min(static_cast<size_t>(i), extra);
  const size_t u1 = u0 + per + (static_cast<size_t>(i) < extra ? 1 : 0);
  *begin = std::min(n, u0 * grain);
  *end = std::min(n, u1 * grain);
}

}  // namespace tt::comm
