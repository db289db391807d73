#include "memory/um.h"

namespace tt::memory {

const char* um_place_name(UmPlace p) {
  switch (p) {
    case UmPlace::kNone: return "none";
    case UmPlace::kDevice: return "device";
    case UmPlace::kHost: return "host";
  }
  return "?";
}

Status RecordingUmDriver::advise(const std::vector<UmRange>& ranges, const UmAdvice& advice) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    UmCall c;
    c.kind = UmCall::kAdvise;
    c.ranges = ranges;
    c.advice = advice;
    calls_.push_back(std::move(c));
  }
  return inner_->advise(ranges, advice);
}

void RecordingUmDriver::prefetch(const std::vector<UmRange>& ranges, UmPlace to, Stream& stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back({UmCall::kPrefetch, ranges, to, {}, &stream});
  }
  inner_->prefetch(ranges, to, stream);
}

void RecordingUmDriver::discard(const std::vector<UmRange>& ranges, UmPlace to, Stream& stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back({UmCall::kDiscard, ranges, to, {}, &stream});
  }
  inner_->discard(ranges, to, stream);
}

std::vector<UmCall> RecordingUmDriver::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

void RecordingUmDriver::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.clear();
}

}  // namespace tt::memory
