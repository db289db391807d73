// backend/cpu/cpu_stream: a stream as a worker thread that runs submitted work in order, and events between such
// streams, with CUDA's semantics (core/stream.h). The CPU backend has three: compute, h2d, d2h.
//
//   CpuStream s("compute");
//   s.enqueue([=] { kernel(...); });
//   TT_TRY(s.synchronize());
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/stream.h"

namespace tt::cpu {

class CpuEvent : public Event {
 public:
  CpuEvent() : state_(std::make_shared<State>()) {}
  Status synchronize() override;
  bool query() override;
  Result<double> elapsed_ms_since(Event& start) override;

 private:
  friend class CpuStream;
  // Each record() makes a new marker that its stream sets when it gets there; wait() captures the marker current at
  // the call, so a later record (on any stream) never releases an earlier wait, as with cudaStreamWaitEvent.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::shared_ptr<bool> latest;  // marker of the latest record(); null before the first
    std::chrono::steady_clock::time_point done_at;  // when the latest marker was set
  };
  std::shared_ptr<State> state_;
};

// Note [simulated delays]
// The CPU backend's delays (a slow link, slow kernels, a slow host: --cpu-copy-delay-us and its siblings) stand for
// work of a known length, which the performance model's calibration measures and its predictions are then checked
// against (tests/perf/plan_accuracy_test.cc). A plain sleep overshoots by the timer's slack, which on a loaded 2-core
// VM varies from one minute to the next: in one run the calibration saw the device optimizer's 2 ms kernels 10%
// longer than the training steps did, and the test's device rows were predicted 13-15% slow. So a delay sleeps until
// kSpinUs before its end, then spins: it lasts what it says (unless the thread is preempted in the spin).
constexpr int64_t kSpinUs = 200;
void simulated_delay(int64_t us);

class CpuStream : public Stream {
 public:
  explicit CpuStream(std::string name);
  ~CpuStream() override;
  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;

  const char* name() const override { return name_.c_str(); }
  Status synchronize() override;
  void record(Event& event) override;
  void wait(Event& event) override;

  // Runs fn on the worker thread after everything submitted before it. An exception thrown by fn is kept and
  // reported by the next synchronize().
  void enqueue(std::function<void()> fn);
  // Waits this long (simulated_delay) before every function enqueued from now on (not before record/wait markers):
  // slow kernels or slow host work, so that a missing wait shows up as a wrong result in tests.
  void set_task_delay_us(int64_t us) { task_delay_us_ = us; }

 private:
  void run();
  void enqueue_undelayed(std::function<void()> fn);

  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_work_;
  std::condition_variable cv_idle_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  int64_t task_delay_us_ = 0;
  std::string error_;
  std::thread worker_;
};

}  // namespace tt::cpu
