// backend/cpu/cpu_stream: worker-thread streams and events with CUDA's semantics (core/stream.h): in-order execution,
// synchronize, record/wait across streams, re-recording, query, errors raised by work, draining on destruction; and
// the copies of the Backend interface on pool tensors.
//
// Where a test needs work to be "still running", it blocks that work on a Gate the test opens, rather than relying on
// a sleep being long enough; sleeps only give a wrongly-released task the chance to run.
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_stream.h"
#include "test_util.h"

namespace tt::cpu {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A one-shot barrier that work on a stream can block on until the test opens it.
class Gate {
 public:
  Gate() : future_(promise_.get_future().share()) {}
  ~Gate() { open(); }  // never leave a worker blocked
  void open() {
    if (!opened_.exchange(true)) promise_.set_value();
  }
  std::function<void()> wait_task() const {
    auto f = future_;
    return [f] { f.wait(); };
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_;
  std::atomic<bool> opened_{false};
};

TEST(CpuStream, Name) {
  CpuStream s("h2d");
  EXPECT_STREQ(s.name(), "h2d");
}

TEST(CpuStream, RunsWorkInSubmissionOrder) {
  CpuStream s("compute");
  std::vector<int> seen;  // touched only by the worker until synchronize returns
  for (int i = 0; i < 2000; ++i) s.enqueue([&seen, i] { seen.push_back(i); });
  ASSERT_TRUE(s.synchronize().is_ok());
  std::vector<int> want(2000);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(seen, want);
}

TEST(CpuStream, SynchronizeWaitsForRunningAndQueuedWork) {
  CpuStream s("compute");
  std::atomic<int> done{0};
  s.enqueue([&] {
    std::this_thread::sleep_for(30ms);
    done.fetch_add(1);
  });
  for (int i = 0; i < 10; ++i) s.enqueue([&] { done.fetch_add(1); });
  ASSERT_TRUE(s.synchronize().is_ok());
  EXPECT_EQ(done.load(), 11);
  // Idle stream: synchronize returns at once.
  EXPECT_TRUE(s.synchronize().is_ok());
}

TEST(CpuStream, SynchronizeBlocksUntilGatedWorkFinishes) {
  CpuStream s("compute");
  Gate gate;
  std::atomic<bool> ran{false};
  s.enqueue(gate.wait_task());
  s.enqueue([&] { ran = true; });
  std::atomic<bool> synced{false};
  std::thread host([&] {
    EXPECT_TRUE(s.synchronize().is_ok());
    synced = true;
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(synced.load()) << "synchronize returned while work was blocked";
  EXPECT_FALSE(ran.load());
  gate.open();
  host.join();
  EXPECT_TRUE(synced.load());
  EXPECT_TRUE(ran.load());
}

// --- events ---------------------------------------------------------------------------------------------------------

TEST(CpuEvent, NeverRecordedIsComplete) {
  CpuEvent e;
  EXPECT_TRUE(e.query());
  EXPECT_TRUE(e.synchronize().is_ok());
}

TEST(CpuEvent, QueryBeforeAndAfterTheCapturedWork) {
  CpuStream a("a");
  CpuEvent e;
  Gate gate;
  a.enqueue(gate.wait_task());
  a.record(e);
  EXPECT_FALSE(e.query());
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(e.query());  // still blocked
  gate.open();
  ASSERT_TRUE(e.synchronize().is_ok());
  EXPECT_TRUE(e.query());
}

TEST(CpuEvent, HostSynchronizeSeesTheEffect) {
  CpuStream a("a");
  CpuEvent e;
  std::atomic<int> value{0};
  a.enqueue([&] {
    std::this_thread::sleep_for(20ms);
    value = 42;
  });
  a.record(e);
  ASSERT_TRUE(e.synchronize().is_ok());
  EXPECT_EQ(value.load(), 42);
}

TEST(CpuEvent, RecordCapturesOnlyEarlierWork) {
  CpuStream a("a");
  CpuEvent e;
  Gate later;
  a.record(e);                   // captures nothing pending
  a.enqueue(later.wait_task());  // submitted after the record
  ASSERT_TRUE(e.synchronize().is_ok());  // must not wait for the later work
  EXPECT_TRUE(e.query());
  later.open();
  EXPECT_TRUE(a.synchronize().is_ok());
}

TEST(CpuEvent, WaitOnAnotherStreamSeesTheSlowTask) {
  CpuStream a("a"), b("b");
  CpuEvent e;
  std::atomic<int> flag{0};
  std::atomic<int> seen{-1};
  a.enqueue([&] {
    std::this_thread::sleep_for(30ms);
    flag = 1;
  });
  a.record(e);
  b.wait(e);
  b.enqueue([&] { seen = flag.load(); });
  ASSERT_TRUE(b.synchronize().is_ok());
  EXPECT_EQ(seen.load(), 1);
  ASSERT_TRUE(a.synchronize().is_ok());
}

TEST(CpuEvent, WaitBlocksTheOtherStreamUntilTheEventCompletes) {
  CpuStream a("a"), b("b");
  CpuEvent e;
  Gate gate;
  std::atomic<int> flag{0};
  std::atomic<int> seen{-1};
  a.enqueue(gate.wait_task());
  a.enqueue([&] { flag = 1; });
  a.record(e);
  b.wait(e);
  b.enqueue([&] { seen = flag.load(); });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(seen.load(), -1) << "work after wait() ran before the event completed";
  gate.open();
  ASSERT_TRUE(b.synchronize().is_ok());
  EXPECT_EQ(seen.load(), 1);
}

TEST(CpuEvent, WorkOnTheWaitingStreamBeforeTheWaitIsNotHeldBack) {
  CpuStream a("a"), b("b");
  CpuEvent e;
  Gate gate;
  std::atomic<bool> before{false};
  a.enqueue(gate.wait_task());
  a.record(e);
  b.enqueue([&] { before = true; });
  b.wait(e);
  std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(before.load());
  gate.open();
  EXPECT_TRUE(b.synchronize().is_ok());
}

TEST(CpuEvent, ReRecordingMovesTheEventToTheNewerPoint) {
  CpuStream a("a");
  CpuEvent e;
  std::atomic<int> step{0};
  a.enqueue([&] { step = 1; });
  a.record(e);
  ASSERT_TRUE(e.synchronize().is_ok());
  EXPECT_TRUE(e.query());
  EXPECT_EQ(step.load(), 1);

  Gate gate;
  a.enqueue(gate.wait_task());
  a.enqueue([&] { step = 2; });
  a.record(e);  // now captures the gated work too
  EXPECT_FALSE(e.query());
  std::atomic<bool> synced{false};
  std::thread host([&] {
    EXPECT_TRUE(e.synchronize().is_ok());
    synced = true;
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(synced.load()) << "synchronize used the old recording";
  gate.open();
  host.join();
  EXPECT_EQ(step.load(), 2);
  EXPECT_TRUE(e.query());
}

TEST(CpuEvent, WaitCapturesTheRecordingCurrentAtTheCall) {
  // CUDA: cudaStreamWaitEvent waits for the most recent record() at the time of the call; a later record() of the
  // same event does not affect it. Here the event is re-recorded on an idle stream C, which completes at once, while
  // the recording B waits for (on A) is still blocked. B must stay blocked.
  CpuStream a("a"), b("b"), c("c");
  CpuEvent e;
  Gate gate;
  std::atomic<int> flag{0};
  std::atomic<int> seen{-1};
  a.enqueue(gate.wait_task());
  a.enqueue([&] { flag = 1; });
  a.record(e);
  b.wait(e);
  b.enqueue([&] { seen = flag.load(); });
  c.record(e);
  ASSERT_TRUE(c.synchronize().is_ok());
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(seen.load(), -1) << "stream b passed its wait although the recording on a has not completed";
  gate.open();
  ASSERT_TRUE(b.synchronize().is_ok());
  ASSERT_TRUE(a.synchronize().is_ok());
}

TEST(CpuEvent, PingPongBetweenStreams) {
  // A produces x, B consumes it and produces y, A consumes y: ordered only by events, checked every round.
  CpuStream a("a"), b("b");
  CpuEvent x_ready, y_ready;
  int x = 0, y = 0;  // plain ints: the events must order the accesses
  std::atomic<int> errors{0};
  for (int i = 1; i <= 200; ++i) {
    a.enqueue([&, i] {
      if (y != 2 * (i - 1)) ++errors;
      x = i;
    });
    a.record(x_ready);
    b.wait(x_ready);
    b.enqueue([&, i] {
      if (x != i) ++errors;
      y = 2 * x;
    });
    b.record(y_ready);
    a.wait(y_ready);
  }
  ASSERT_TRUE(a.synchronize().is_ok());
  ASSERT_TRUE(b.synchronize().is_ok());
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(x, 200);
  EXPECT_EQ(y, 400);
}

// --- errors ---------------------------------------------------------------------------------------------------------

TEST(CpuStream, ExceptionIsReportedBySynchronize) {
  CpuStream s("compute");
  std::atomic<int> after{0};
  s.enqueue([] { throw std::runtime_error("kernel blew up at row 17"); });
  s.enqueue([&] { after = 1; });  // later work still runs
  Status st = s.synchronize();
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_TRUE(contains(st.message(), "kernel blew up at row 17")) << st.message();
  EXPECT_TRUE(contains(st.message(), "'compute'")) << st.message();
  EXPECT_EQ(after.load(), 1);

  // Reported once; the stream keeps working.
  EXPECT_TRUE(s.synchronize().is_ok());
  std::atomic<int> value{0};
  s.enqueue([&] { value = 7; });
  EXPECT_TRUE(s.synchronize().is_ok());
  EXPECT_EQ(value.load(), 7);
}

TEST(CpuStream, FirstOfSeveralErrorsIsKept) {
  CpuStream s("compute");
  s.enqueue([] { throw std::runtime_error("first"); });
  s.enqueue([] { throw std::logic_error("second"); });
  Status st = s.synchronize();
  ASSERT_FALSE(st.is_ok());
  EXPECT_TRUE(contains(st.message(), "first")) << st.message();
  EXPECT_FALSE(contains(st.message(), "second")) << st.message();
  EXPECT_TRUE(s.synchronize().is_ok());
}

TEST(CpuStream, NonStdExceptionIsReported) {
  CpuStream s("compute");
  s.enqueue([] { throw 17; });
  Status st = s.synchronize();
  ASSERT_FALSE(st.is_ok());
  EXPECT_TRUE(contains(st.message(), "unknown exception")) << st.message();
}

TEST(CpuStream, EventsStillCompleteAfterAnException) {
  CpuStream a("a"), b("b");
  CpuEvent e;
  a.enqueue([] { throw std::runtime_error("boom"); });
  a.record(e);
  b.wait(e);
  std::atomic<bool> ran{false};
  b.enqueue([&] { ran = true; });
  ASSERT_TRUE(b.synchronize().is_ok());  // no deadlock: the record after the failed task still runs
  EXPECT_TRUE(ran.load());
  EXPECT_FALSE(a.synchronize().is_ok());
}

// --- destruction ----------------------------------------------------------------------------------------------------

TEST(CpuStream, DestructionDrainsQueuedWork) {
  std::atomic<int> count{0};
  {
    CpuStream s("compute");
    for (int i = 0; i < 50; ++i)
      s.enqueue([&] {
        std::this_thread::sleep_for(1ms);
        count.fetch_add(1);
      });
  }  // no synchronize
  EXPECT_EQ(count.load(), 50);
}

TEST(CpuStream, DestructionWaitsForGatedWork) {
  std::atomic<bool> ran{false};
  Gate gate;
  auto s = std::make_unique<CpuStream>("compute");
  s->enqueue(gate.wait_task());
  s->enqueue([&] { ran = true; });
  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    gate.open();
  });
  s.reset();
  EXPECT_TRUE(ran.load());
  opener.join();
}

// --- the Backend interface: copies and fills on pool tensors --------------------------------------------------------

TEST(CpuBackendCopies, RoundTripThroughTheDevicePool) {
  std::unique_ptr<Backend> be = testing::make_cpu_backend(int64_t(16) << 20, 2);
  ASSERT_NE(be, nullptr);
  EXPECT_EQ(be->device().kind, DeviceKind::kCpu);
  const int n = 10000;
  Result<Tensor> a = be->pool().allocate(Shape{100, 100}, DType::kF32, TensorClass::kParam, "a");
  Result<Tensor> b = be->pool().allocate(Shape{n}, DType::kF32, TensorClass::kWorkspace, "b");
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(be->stats().tier(memory::Tier::kDevice).current,
            static_cast<int64_t>(2 * memory::device_alloc_size(n * sizeof(float))));

  std::vector<float> src(n), dst(n, -1.0f), zeros(n, -1.0f), again(n, -1.0f);
  for (int i = 0; i < n; ++i) src[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i) - 100.0f;

  // h2d on its stream; compute waits on an event, copies d2d, and reads back.
  std::unique_ptr<Event> uploaded = be->create_event();
  be->copy_h2d(a.value(), src.data(), be->h2d_stream());
  be->h2d_stream().record(*uploaded);
  be->compute_stream().wait(*uploaded);
  be->copy_d2d(b.value(), a.value(), be->compute_stream());  // same bytes, different shape
  be->copy_d2h(dst.data(), b.value(), be->compute_stream());
  be->fill_zero(b.value(), be->compute_stream());
  be->copy_d2h(zeros.data(), b.value(), be->compute_stream());
  std::unique_ptr<Event> computed = be->create_event();
  be->compute_stream().record(*computed);
  be->d2h_stream().wait(*computed);
  be->copy_d2h(again.data(), a.value(), be->d2h_stream());
  ASSERT_TRUE(be->synchronize_all().is_ok());

  EXPECT_EQ(dst, src);
  EXPECT_EQ(zeros, std::vector<float>(n, 0.0f));
  EXPECT_EQ(again, src);  // fill_zero of b left a alone
  EXPECT_EQ(std::memcmp(a.value().raw(), src.data(), n * sizeof(float)), 0);

  be->pool().free(a.value());
  be->pool().free(b.value());
  EXPECT_EQ(be->pool().in_use(), 0u);
}

TEST(CpuBackendCopies, IntegerAndPartialViews) {
  std::unique_ptr<Backend> be = testing::make_cpu_backend(int64_t(1) << 20, 1);
  ASSERT_NE(be, nullptr);
  Result<Tensor> t = be->pool().allocate(Shape{4, 8}, DType::kI32, TensorClass::kInput, "tokens");
  ASSERT_TRUE(t.is_ok());
  std::vector<int32_t> src(32);
  std::iota(src.begin(), src.end(), 100);
  be->copy_h2d(t.value(), src.data(), be->h2d_stream());
  ASSERT_TRUE(be->h2d_stream().synchronize().is_ok());
  // Zero only the second row, through a view.
  be->fill_zero(t.value().view(8, Shape{8}), be->compute_stream());
  std::vector<int32_t> out(32, -1);
  be->copy_d2h(out.data(), t.value(), be->compute_stream());
  ASSERT_TRUE(be->compute_stream().synchronize().is_ok());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], (i >= 8 && i < 16) ? 0 : 100 + i) << i;
  be->pool().free(t.value());
}

TEST(CpuBackendCopies, CreateBackendRejectsAZeroBudget) {
  Result<std::unique_ptr<Backend>> r = create_backend({.device_budget = 0, .threads = 1});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(r.status().message(), "budget")) << r.status().message();
}

TEST(CpuBackendCopies, PoolOfTheBackendHonoursTheBudget) {
  std::unique_ptr<Backend> be = testing::make_cpu_backend(int64_t(1) << 20, 1);
  ASSERT_NE(be, nullptr);
  EXPECT_EQ(be->pool().budget(), size_t(1) << 20);
  Result<Tensor> too_big = be->pool().allocate(Shape{(1 << 18) + 1}, DType::kF32, TensorClass::kParam, "w");
  EXPECT_EQ(too_big.status().code(), StatusCode::kOutOfMemory);
  Result<Tensor> fits = be->pool().allocate(Shape{1 << 18}, DType::kF32, TensorClass::kParam, "w");
  ASSERT_TRUE(fits.is_ok()) << fits.status().to_string();
  be->pool().free(fits.value());
}

}  // namespace
}  // namespace tt::cpu
