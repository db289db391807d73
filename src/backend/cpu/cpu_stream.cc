#include "backend/cpu/cpu_stream.h"

#include <exception>

#include "core/check.h"

namespace tt::cpu {

Status CpuEvent::synchronize() {
  std::unique_lock<std::mutex> lock(state_->mu);
  std::shared_ptr<bool> marker = state_->latest;
  if (marker) state_->cv.wait(lock, [&] { return *marker; });
  return Status::ok();
}

Result<double> CpuEvent::elapsed_ms_since(Event& start) {
  auto* st = dynamic_cast<CpuEvent*>(&start);
  TT_RETURN_IF(st == nullptr, kInvalidArgument, "elapsed_ms_since needs two CPU events");
  TT_TRY(st->synchronize());
  TT_TRY(synchronize());
  std::chrono::steady_clock::time_point a, b;
  {
    std::lock_guard<std::mutex> lock(st->state_->mu);
    a = st->state_->done_at;
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    b = state_->done_at;
  }
  return std::chrono::duration<double, std::milli>(b - a).count();
}

bool CpuEvent::query() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return !state_->latest || *state_->latest;
}

CpuStream::CpuStream(std::string name) : name_(std::move(name)), worker_([this] { run(); }) {}

CpuStream::~CpuStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  worker_.join();
}

void simulated_delay(int64_t us) {
  if (us <= 0) return;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point end = Clock::now() + std::chrono::microseconds(us);
  if (us > kSpinUs) std::this_thread::sleep_until(end - std::chrono::microseconds(kSpinUs));
  while (Clock::now() < end) {
  }
}

void CpuStream::enqueue(std::function<void()> fn) {
  if (task_delay_us_ > 0)
    fn = [f = std::move(fn), us = task_delay_us_] {
      simulated_delay(us);
      f();
    };
  enqueue_undelayed(std::move(fn));
}

// Records and waits take no time on a GPU: the simulated kernel delay is not theirs.
void CpuStream::enqueue_undelayed(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(fn));
  }
  cv_work_.notify_one();
}

void CpuStream::run() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and drained
      fn = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    std::string err;
    try {
      fn();
    } catch (const std::exception& e) {
      err = e.what();
    } catch (...) {
      err = "unknown exception";
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      if (!err.empty() && error_.empty()) error_ = err;
      if (queue_.empty()) cv_idle_.notify_all();
    }
  }
}

Status CpuStream::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
  if (!error_.empty()) {
    std::string e = std::move(error_);
    error_.clear();
    return make_status(StatusCode::kInternal, "work on stream '%s' failed: %s", name_.c_str(), e.c_str());
  }
  return Status::ok();
}

void CpuStream::record(Event& event) {
  auto* e = dynamic_cast<CpuEvent*>(&event);
  TT_CHECK(e != nullptr, "CpuStream::record needs a CpuEvent");
  std::shared_ptr<CpuEvent::State> st = e->state_;
  auto marker = std::make_shared<bool>(false);
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->latest = marker;
  }
  enqueue_undelayed([st, marker] {
    {
      std::lock_guard<std::mutex> lock(st->mu);
      *marker = true;
      if (st->latest == marker) st->done_at = std::chrono::steady_clock::now();
    }
    st->cv.notify_all();
  });
}

void CpuStream::wait(Event& event) {
  auto* e = dynamic_cast<CpuEvent*>(&event);
  TT_CHECK(e != nullptr, "CpuStream::wait needs a CpuEvent");
  std::shared_ptr<CpuEvent::State> st = e->state_;
  std::shared_ptr<bool> marker;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    marker = st->latest;
  }
  if (!marker) return;  // never recorded: nothing to wait for
  enqueue_undelayed([st, marker] {
    std::unique_lock<std::mutex> lock(st->mu);
    st->cv.wait(lock, [&] { return *marker; });
  });
}

}  // namespace tt::cpu
