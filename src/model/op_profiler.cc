#include "model/op_profiler.h"

namespace tt {

void OpProfiler::mark(const char* name) {
  if (!enabled_) return;
  if (used_ == events_.size()) {
    events_.push_back(be_.create_event(/*timing=*/true));
    names_.push_back(nullptr);
  }
  be_.compute_stream().record(*events_[used_]);
  names_[used_] = name;
  ++used_;
}

Status OpProfiler::collect() {
  if (!enabled_ || used_ == 0) return Status::ok();
  mark("(end)");
  for (size_t i = 0; i + 1 < used_; ++i) {
    TT_ASSIGN_OR_RETURN(double ms, events_[i + 1]->elapsed_ms_since(*events_[i]));
    totals_[names_[i]] += ms;
  }
  used_ = 0;
  ++steps_;
  return Status::ok();
}

}  // namespace tt
