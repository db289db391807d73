#include "perf/simulator.h"

#include <algorithm>
#include <vector>

namespace tt::perf {

CostClass cost_class(OpKind kind) {
  switch (kind) {
    case OpKind::kWait:
    case OpKind::kRecord:
    case OpKind::kAlloc:
    case OpKind::kInputFill:
      return CostClass::kFree;
    case OpKind::kSwapOut:
    case OpKind::kGradsOut:
    case OpKind::kNormOut:
      return CostClass::kD2H;
    case OpKind::kSwapIn:
    case OpKind::kParamsIn:
    case OpKind::kParamsBack:
    case OpKind::kInputIn:
      return CostClass::kH2D;
    case OpKind::kHostAdamW:
      return CostClass::kHost;
    default:
      return CostClass::kCompute;
  }
}

SimResult simulate(const Schedule& schedule, Pass pass, const CostModel& costs, int steps) {
  const std::vector<Op>& ops = schedule.pass(pass);
  // Each operation's time, once: every step runs the same operations.
  std::vector<double> cost(ops.size(), 0.0);
  for (size_t i = 0; i < ops.size(); ++i)
    if (!ops[i].speculative && ops[i].kind != OpKind::kWait && ops[i].kind != OpKind::kRecord)
      cost[i] = costs.seconds(ops[i]);
  std::vector<double> event_at(schedule.events.size(), -1.0);  // the last record issued so far; -1: none
  double free_at[kNumStreams] = {};
  double step_start = 0, last_end = 0;
  SimResult r;
  for (int step = 0; step < std::max(1, steps); ++step) {
    const bool last = step == std::max(1, steps) - 1;
    SimResult cur;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.speculative) continue;  // a step that speculates is the caller's guess; the replay assumes none
      const int s = static_cast<int>(op.stream);
      double& t = free_at[s];
      t = std::max(t, step_start);  // nothing starts before it is issued
      if (op.kind == OpKind::kWait) {
        const double at = event_at[static_cast<size_t>(op.event)];
        if (at > t) {
          if (op.stream == StreamId::kCompute) {
            cur.exposed_wait_seconds += at - t;
            cur.waits[op.name] += at - t;
          }
          t = at;
        }
      } else if (op.kind == OpKind::kRecord) {
        event_at[static_cast<size_t>(op.event)] = t;
      } else {
        const double d = cost[i];
        t += d;
        cur.busy_seconds[s] += d;
      }
    }
    // The caller reads the step's results back on the compute stream, waits for it, then issues the next step.
    double& compute = free_at[static_cast<int>(StreamId::kCompute)];
    compute = std::max(compute, step_start) + costs.readback_seconds();
    const double end = compute;
    cur.step_seconds = end - last_end;
    last_end = end;
    step_start = end;
    if (last) r = cur;
  }
  return r;
}

}  // namespace tt::perf
