#include "perf/simulator.h"

#include "memory/um.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace tt::perf {

CostClass cost_class(const Op& op) {
  switch (op.kind) {
    case OpKind::kWait:
    case OpKind::kRecord:
    case OpKind::kAlloc:
    case OpKind::kInputFill:
    case OpKind::kUmAdvise:    // (set-up only)
      return CostClass::kFree;
    case OpKind::kGradReduce:  // Note [pricing collectives] in perf/costs.cc
      return CostClass::kComm;
    // Unified Memory (issue 20): the driver's prefetches on the stream of their direction (Note [managed
    // activations] in plan/schedule.cc); a discard-and-prefetch of dead pages moves nothing and is the work of the
    // stream it runs on: the h2d stream for activations in either direction, the d2h stream for the release of the
    // exchange's compute copy (Note [managed optimizer exchange]).
    case OpKind::kUmPrefetch:
      if (op.um_dead) return op.stream == StreamId::kD2H ? CostClass::kD2H : CostClass::kH2D;
      return op.place == static_cast<int>(memory::UmPlace::kDevice) ? CostClass::kH2D : CostClass::kD2H;
    case OpKind::kSwapOut:
    case OpKind::kGradsOut:
    case OpKind::kGradsStage:
    case OpKind::kNormOut:
      return CostClass::kD2H;
    case OpKind::kSwapIn:
    case OpKind::kParamsIn:
    case OpKind::kParamsBack:
    case OpKind::kInputIn:
      return CostClass::kH2D;
    case OpKind::kHostAdamW:
    case OpKind::kHostGradAdd:
    case OpKind::kHostNormPart:
    case OpKind::kHostNormTotal:
      return CostClass::kHost;
    default:
      return CostClass::kCompute;
  }
}

namespace {

using Span = std::pair<double, double>;

struct Replay {
  SimResult result;
  std::vector<Span> last;                // [op] its start and end in the last step; (-1, -1) if it did not run
  std::vector<Span> busy[kNumCostClasses];  // every step's operations with a time, by class, sorted and merged
};

// One walk over `steps` steps in issue order (Note [replaying a schedule]); with spans, also where each operation ran.
Replay replay(const Schedule& schedule, Pass pass, const std::vector<double>& cost, double readback, int steps,
              bool spans) {
  const std::vector<Op>& ops = schedule.pass(pass);
  std::vector<double> event_at(schedule.events.size(), -1.0);  // the last record issued so far; -1: none
  double free_at[kNumStreams] = {};
  double sms_free = 0;  // Note [replaying a schedule]: when the device's compute units are free
  double step_start = 0, last_end = 0;
  Replay out;
  if (spans) out.last.assign(ops.size(), Span(-1.0, -1.0));
  for (int step = 0; step < steps; ++step) {
    const bool last = step == steps - 1;
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
        // Compute work on any stream takes the compute units, one operation at a time, in issue order.
        if (d > 0 && cost_class(op) == CostClass::kCompute) {
          t = std::max(t, sms_free);
          sms_free = t + d;
        }
        if (spans && d > 0) {
          out.busy[static_cast<int>(cost_class(op))].emplace_back(t, t + d);
          if (last) out.last[i] = Span(t, t + d);
        }
        t += d;
        cur.busy_seconds[s] += d;
      }
    }
    // The caller reads the step's results back on the compute stream, waits for it, then issues the next step.
    double& compute = free_at[static_cast<int>(StreamId::kCompute)];
    compute = std::max(compute, step_start) + readback;
    const double end = compute;
    cur.step_seconds = end - last_end;
    last_end = end;
    step_start = end;
    if (last) out.result = cur;
  }
  for (std::vector<Span>& b : out.busy) {
    std::sort(b.begin(), b.end());
    std::vector<Span> merged;
    for (const Span& x : b) {
      if (!merged.empty() && x.first <= merged.back().second) merged.back().second = std::max(merged.back().second, x.second);
      else merged.push_back(x);
    }
    b = std::move(merged);
  }
  return out;
}

// How much of [a, b) the sorted, disjoint spans cover (seconds).
double covered(const std::vector<Span>& spans, double a, double b) {
  if (b <= a) return 0;
  auto it = std::upper_bound(spans.begin(), spans.end(), a, [](double x, const Span& s) { return x < s.second; });
  double in = 0;
  for (; it != spans.end() && it->first < b; ++it) in += std::min(b, it->second) - std::max(a, it->first);
  return in;
}

}  // namespace

SimResult simulate(const Schedule& schedule, Pass pass, const CostModel& costs, int steps) {
  const std::vector<Op>& ops = schedule.pass(pass);
  steps = std::max(1, steps);
  // Each operation's time, once: every step runs the same operations.
  std::vector<double> cost(ops.size(), 0.0), fixed(ops.size(), 0.0);
  for (size_t i = 0; i < ops.size(); ++i)
    if (!ops[i].speculative && ops[i].kind != OpKind::kWait && ops[i].kind != OpKind::kRecord) {
      cost[i] = costs.seconds(ops[i]);
      fixed[i] = std::clamp(costs.fixed_seconds(ops[i]), 0.0, cost[i]);
    }
  const double readback = costs.readback_seconds();
  // The kinds of traffic that slow each other (Note [contention] in perf/profile.h).
  constexpr CostClass kTraffic[] = {CostClass::kH2D, CostClass::kD2H, CostClass::kHost};
  double slow[kNumCostClasses][kNumCostClasses];
  bool contention = false;
  for (CostClass v : kTraffic)
    for (CostClass o : kTraffic) {
      slow[static_cast<int>(v)][static_cast<int>(o)] = v == o ? 1.0 : costs.slowdown(v, o);
      contention |= slow[static_cast<int>(v)][static_cast<int>(o)] != 1.0;
    }
  Replay r = replay(schedule, pass, cost, readback, steps, contention);
  if (!contention) return r.result;
  std::vector<double> scaled(cost);
  for (int round = 0; round < kContentionRounds; ++round) {
    double moved = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const auto [a, b] = r.last[i];
      const CostClass c = cost_class(ops[i]);
      if (b <= a || (c != CostClass::kH2D && c != CostClass::kD2H && c != CostClass::kHost)) continue;
      // While the other runs, the operation does 1/slowdown of its work a second: each second overlapped adds
      // (1 - 1/slowdown) seconds, for the share of the operation that is work rather than fixed cost.
      const double work = 1.0 - fixed[i] / cost[i];
      double d = cost[i];
      for (CostClass o : kTraffic)
        if (o != c)
          d += work * (1.0 - 1.0 / slow[static_cast<int>(c)][static_cast<int>(o)]) * covered(r.busy[static_cast<int>(o)], a, b);
      moved = std::max(moved, std::abs(d - scaled[i]) / scaled[i]);
      scaled[i] = d;
    }
    if (moved < 1e-3) break;
    r = replay(schedule, pass, scaled, readback, steps, true);
  }
  return r.result;
}

}  // namespace tt::perf
