// model/op_profiler: time per op on the compute stream, from events recorded between ops (no synchronisation until
// collect()). Off unless a run asks for it (--profile); when on, each op costs one event record.
//
//   OpProfiler prof(backend);
//   prof.mark("attention_forward"); backend.attention_forward(...);
//   prof.mark("gelu_forward");      backend.gelu_forward(...);
//   TT_TRY(prof.collect());          // closes the last op, waits, adds each op's time to its name's total
//   prof.totals_ms();                // {"attention_forward": 12.3, ...} over all collected steps
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tt {

class OpProfiler {
 public:
  explicit OpProfiler(Backend& backend) : be_(backend) {}
  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }

  // Starts op `name` (and ends the previous one) on the compute stream.
  void mark(const char* name);
  // Ends the last op, waits for the stream, and adds the ops' durations to the totals.
  Status collect();
  const std::map<std::string, double>& totals_ms() const { return totals_; }
  int steps() const { return steps_; }

 private:
  Backend& be_;
  bool enabled_ = false;
  std::vector<std::unique_ptr<Event>> events_;  // reused from step to step
  std::vector<const char*> names_;
  size_t used_ = 0;
  std::map<std::string, double> totals_;
  int steps_ = 0;
};

}  // namespace tt
