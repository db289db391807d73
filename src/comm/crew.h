// comm/crew: a rank's helper threads, which share out the large copies and reductions of one collective (Note
// [crew] in crew.cc). A crew of one is the calling thread alone.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <thread>

namespace tt::comm {

class Crew {
 public:
  // threads: how many take part, the caller included (1: no helpers); the helpers run where this process may.
  explicit Crew(int threads);
  ~Crew();
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;

  int size() const { return size_; }
  // Runs part(i) for i in [0, size()) at once, part 0 on the calling thread, and returns when all are done; what
  // the parts wrote is then visible to the caller (and to whoever the caller releases it to). part must not throw.
  void run(const std::function<void(int)>& part);

  // The number of threads a crew of one of `ranks` ranks has by default: the CPUs this process may run on divided
  // by `ranks` (as if all ranks shared them; `tiertrain launch --bind-to share` sets TIERTRAIN_COMM_THREADS to each
  // rank's share instead), 1 to kMaxThreads.
  static int default_threads(int ranks);
  static constexpr int kMaxThreads = 8;

 private:
  void helper(int index);

  int size_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped for each job, and once more to stop
  std::atomic<int> pending_{0};          // helpers not yet done with the current job
  std::atomic<bool> stop_{false};
};

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
