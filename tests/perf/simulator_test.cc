// The schedule's replay (perf/simulator.h): a wait sees only the records issued before it, a step with nothing to
// wait for takes the sum of its compute work, the compute stream's time is its work plus its waits, copies slower
// than compute show as exposed waits, and the CPU optimizer's host work overlaps the next step.
#include <gtest/gtest.h>

#include "exec/executor.h"
#include "perf/simulator.h"

namespace tt::perf {
namespace {

const ModelConfig kCfg{.vocab = 256, .layers = 6, .dim = 64, .heads = 4, .seq = 32};

Schedule schedule_for(const std::string& plan_name, OptimizerPlacement opt = OptimizerPlacement::kDevice,
                      bool norm_beside = true) {
  ExecSpec spec;
  spec.model = kCfg;
  spec.batch = 4;
  spec.plan = Plan::resolve(plan_name, kCfg.layers, 2).value();
  if (!spec.plan.needs_cpu_optimizer()) spec.plan.optimizer = opt;
  spec.lm_chunk_rows = model_default_lm_chunk_rows(spec.model, spec.batch, spec.compute);
  ScheduleSpec ss{spec.model, spec.batch, spec.compute, spec.plan, false, spec.lm_chunk_rows};
  ss.norm_beside = norm_beside;
  const Schedule s = compile_schedule(ss, Executor::inventory(spec).value());
  EXPECT_TRUE(s.validate().is_ok());
  return s;
}

// The model's blocks take 1 ms each, everything else on the compute stream nothing; copies `copy` seconds each;
// host work `host` seconds a segment.
struct TestCosts final : CostModel {
  double copy = 0, host = 0;
  double seconds(const Op& op) const override {
    switch (op.kind) {
      case OpKind::kModel: return 1e-3;
      case OpKind::kSwapOut: case OpKind::kSwapIn: case OpKind::kParamsIn: case OpKind::kParamsBack:
      case OpKind::kGradsOut: case OpKind::kNormOut: case OpKind::kInputIn:
        return copy;
      case OpKind::kHostAdamW: return host;
      default: return 0;
    }
  }
};

// Every compute-stream operation 1 ms, every copy 2 ms, host work 3 ms.
struct ClassCosts final : CostModel {
  double seconds(const Op& op) const override {
    switch (cost_class(op)) {
      case CostClass::kFree: return 0;
      case CostClass::kCompute: return 1e-3;
      case CostClass::kHost: return 3e-3;
      default: return 2e-3;
    }
  }
};

// A step with nothing to wait for is its compute stream's work (the norm's parts in the step). Beside the backward
// (Note [norm beside the backward] in plan/schedule.cc) the parts leave the compute stream but not the compute units
// (Note [replaying a schedule]): the compute stream's own work is shorter by them, the step is not; only the last
// part, the embeddings' (after every backward), shows as a wait.
TEST(Simulator, AStepWithNothingToWaitForIsItsComputeWork) {
  const Schedule s = schedule_for("in-core", OptimizerPlacement::kDevice, /*norm_beside=*/false);
  const ClassCosts costs;
  double compute = 0, part = 0;
  for (const Op& op : s.pass(Pass::kTrain)) {
    if (op.stream == StreamId::kCompute) compute += costs.seconds(op);
    if (op.kind == OpKind::kNormPart) part = costs.seconds(op);
  }
  const SimResult r = simulate(s, Pass::kTrain, costs);
  EXPECT_NEAR(r.step_seconds, compute, 1e-12);
  EXPECT_NEAR(r.busy_seconds[static_cast<int>(StreamId::kCompute)], compute, 1e-12);
  EXPECT_EQ(r.exposed_wait_seconds, 0);
  EXPECT_GT(compute, 0);
  const int segments = kCfg.layers + 2;
  const SimResult beside = simulate(schedule_for("in-core"), Pass::kTrain, costs);
  EXPECT_NEAR(beside.busy_seconds[static_cast<int>(StreamId::kCompute)], compute - segments * part, 1e-12);
  EXPECT_NEAR(beside.exposed_wait_seconds, part, 1e-12);
  EXPECT_NEAR(beside.step_seconds, compute, 1e-12);
  EXPECT_GT(part, 0);
}

// Compute work on two streams runs one operation at a time, in issue order; a copy beside it runs at once.
TEST(Simulator, ComputeOnTwoStreamsTakesTurns) {
  Schedule s;
  std::vector<Op>& ops = s.passes[static_cast<int>(Pass::kTrain)];
  auto op = [&](StreamId st, OpKind k) {
    Op o;
    o.stream = st;
    o.kind = k;
    o.name = "op";
    ops.push_back(o);
  };
  op(StreamId::kCompute, OpKind::kModel);   // 1 ms
  op(StreamId::kComm, OpKind::kNormPart);   // 1 ms, compute
  op(StreamId::kCompute, OpKind::kModel);   // 1 ms, after both
  op(StreamId::kD2H, OpKind::kSwapOut);     // 2 ms, from 0
  const SimResult r = simulate(s, Pass::kTrain, ClassCosts{}, 1);
  EXPECT_NEAR(r.step_seconds, 3e-3, 1e-12);
  EXPECT_NEAR(r.busy_seconds[static_cast<int>(StreamId::kCompute)], 2e-3, 1e-12);
  EXPECT_NEAR(r.busy_seconds[static_cast<int>(StreamId::kComm)], 1e-3, 1e-12);
  EXPECT_EQ(r.exposed_wait_seconds, 0);
}

TEST(Simulator, SlowCopiesShowAsExposedWaits) {
  const Schedule s = schedule_for("swap-activations");
  TestCosts free_copies, slow_copies;
  slow_copies.copy = 0.05;  // 50 blocks' worth of compute a copy
  const SimResult fast = simulate(s, Pass::kTrain, free_copies);
  const SimResult slow = simulate(s, Pass::kTrain, slow_copies);
  const int c = static_cast<int>(StreamId::kCompute);
  EXPECT_NEAR(fast.step_seconds, fast.busy_seconds[c], 1e-12);
  EXPECT_EQ(fast.exposed_wait_seconds, 0);
  // The compute stream's time is its work plus its waits; the slow copies are what it waits for.
  EXPECT_NEAR(slow.step_seconds, slow.busy_seconds[c] + slow.exposed_wait_seconds, 1e-12);
  EXPECT_GT(slow.exposed_wait_seconds, 0.05);
  EXPECT_GT(slow.waits.at("wait swap_in"), 0);
  // 4 of the 6 blocks leave their slots and come back: 8 copies of 50 ms, at most two at a time (d2h and h2d).
  EXPECT_GE(slow.step_seconds, 4 * 0.05);
  EXPECT_LE(slow.step_seconds, slow.busy_seconds[c] + 8 * 0.05 + 1e-9);
}

TEST(Simulator, AWaitSeesOnlyTheRecordsIssuedBeforeIt) {
  Schedule s;
  s.events = {"E", "F"};
  std::vector<Op>& ops = s.passes[static_cast<int>(Pass::kTrain)];
  auto op = [&](StreamId st, OpKind k, int event = -1) {
    Op o;
    o.stream = st;
    o.kind = k;
    o.event = event;
    o.name = k == OpKind::kWait ? "wait" : "op";
    ops.push_back(o);
  };
  op(StreamId::kCompute, OpKind::kWait, 1);  // F not recorded yet: no wait
  op(StreamId::kH2D, OpKind::kSwapIn);       // 2 s
  op(StreamId::kH2D, OpKind::kRecord, 0);    // E at 2
  op(StreamId::kCompute, OpKind::kWait, 0);  // waits until 2
  op(StreamId::kCompute, OpKind::kModel);    // 1 ms
  op(StreamId::kH2D, OpKind::kSwapIn);       // 2 s more
  op(StreamId::kH2D, OpKind::kRecord, 1);    // F at 4: the first wait, issued before, never sees it
  TestCosts costs;
  costs.copy = 2;
  const SimResult one = simulate(s, Pass::kTrain, costs, 1);
  EXPECT_NEAR(one.step_seconds, 2.001, 1e-12);
  EXPECT_NEAR(one.exposed_wait_seconds, 2.0, 1e-12);
  // Step 2 is issued at 2.001: its first wait sees step 1's F (at 4), its E comes at 6, its block ends at 6.001.
  const SimResult two = simulate(s, Pass::kTrain, costs, 2);
  EXPECT_NEAR(two.step_seconds, 6.001 - 2.001, 1e-12);
  EXPECT_NEAR(two.exposed_wait_seconds, (4 - 2.001) + (6 - 4), 1e-12);
}

// Analytic cases on hand-made schedules: blocks of 1 ms on the compute stream, copies of `copy` seconds.
struct Builder {
  Schedule s;
  std::vector<Op>& ops = s.passes[static_cast<int>(Pass::kTrain)];
  int ev(const std::string& name) {
    for (size_t i = 0; i < s.events.size(); ++i)
      if (s.events[i] == name) return static_cast<int>(i);
    s.events.push_back(name);
    return static_cast<int>(s.events.size()) - 1;
  }
  void add(StreamId st, OpKind k, const std::string& event = "") {
    Op o;
    o.stream = st;
    o.kind = k;
    o.event = event.empty() ? -1 : ev(event);
    o.name = k == OpKind::kWait ? "wait " + event : "op";
    ops.push_back(o);
  }
};

// Copy-bound with a known overlap: n blocks, each followed by a copy out of its result that the next block's start
// does not wait for, and the step ends waiting for the last copy. Copies longer than a block run back to back from
// the end of block 1: the step is 1 ms + n copies.
TEST(Simulator, CopyBoundWithAKnownOverlap) {
  for (const double copy : {0.5e-3, 2e-3}) {
    Builder b;
    const int n = 5;
    for (int k = 0; k < n; ++k) {
      b.add(StreamId::kCompute, OpKind::kModel);
      b.add(StreamId::kCompute, OpKind::kRecord, "done" + std::to_string(k));
      b.add(StreamId::kD2H, OpKind::kWait, "done" + std::to_string(k));
      b.add(StreamId::kD2H, OpKind::kSwapOut);
    }
    b.add(StreamId::kD2H, OpKind::kRecord, "out");
    b.add(StreamId::kCompute, OpKind::kWait, "out");
    TestCosts costs;
    costs.copy = copy;
    const SimResult r = simulate(b.s, Pass::kTrain, costs, 1);
    // Compute-bound: the last copy starts when the last block ends (n ms) and the step waits for it alone.
    // Copy-bound: 1 ms, then n copies back to back.
    const double want = copy <= 1e-3 ? n * 1e-3 + copy : 1e-3 + n * copy;
    EXPECT_NEAR(r.step_seconds, want, 1e-12) << copy;
    EXPECT_NEAR(r.exposed_wait_seconds, want - n * 1e-3, 1e-12);
    EXPECT_NEAR(r.busy_seconds[static_cast<int>(StreamId::kD2H)], n * copy, 1e-12);
  }
}

// Two copy directions at once: h2d and d2h are separate engines, so a copy each way overlaps fully; two copies the
// same way run one after the other. (How much each slows the other is the cost model's: the contention cases below.)
TEST(Simulator, TwoCopyDirectionsAtOnce) {
  TestCosts costs;
  costs.copy = 3e-3;
  Builder both;
  both.add(StreamId::kH2D, OpKind::kSwapIn);
  both.add(StreamId::kH2D, OpKind::kRecord, "in");
  both.add(StreamId::kD2H, OpKind::kSwapOut);
  both.add(StreamId::kD2H, OpKind::kRecord, "out");
  both.add(StreamId::kCompute, OpKind::kWait, "in");
  both.add(StreamId::kCompute, OpKind::kWait, "out");
  EXPECT_NEAR(simulate(both.s, Pass::kTrain, costs, 1).step_seconds, 3e-3, 1e-12);
  Builder same;
  same.add(StreamId::kH2D, OpKind::kSwapIn);
  same.add(StreamId::kH2D, OpKind::kSwapIn);
  same.add(StreamId::kH2D, OpKind::kRecord, "in");
  same.add(StreamId::kCompute, OpKind::kWait, "in");
  EXPECT_NEAR(simulate(same.s, Pass::kTrain, costs, 1).step_seconds, 6e-3, 1e-12);
}

// TestCosts whose copies each way and host work slow each other (Note [contention] in perf/profile.h).
struct ContendedCosts final : CostModel {
  TestCosts base;
  double slow[kNumCostClasses][kNumCostClasses] = {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1},
                                                   {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}};
  double fixed = 0;  // of every copy and host update
  double seconds(const Op& op) const override { return base.seconds(op); }
  double fixed_seconds(const Op& op) const override { return cost_class(op) == CostClass::kCompute ? 0 : fixed; }
  double slowdown(CostClass v, CostClass o) const override { return slow[static_cast<int>(v)][static_cast<int>(o)]; }
  void set(CostClass v, CostClass o, double x) { slow[static_cast<int>(v)][static_cast<int>(o)] = x; }
};

// Analytic cases: a 10 ms host update and a 10 ms copy to the host start together and the step waits for both.
// While the copy runs, the update does 1/s of its work a second.
TEST(Simulator, ContentionSlowsWhatOverlaps) {
  Builder b;
  b.add(StreamId::kHost, OpKind::kHostAdamW);
  b.add(StreamId::kHost, OpKind::kRecord, "host");
  b.add(StreamId::kD2H, OpKind::kSwapOut);
  b.add(StreamId::kD2H, OpKind::kRecord, "out");
  b.add(StreamId::kCompute, OpKind::kWait, "host");
  b.add(StreamId::kCompute, OpKind::kWait, "out");
  ContendedCosts costs;
  costs.base.copy = costs.base.host = 10e-3;
  const int h = static_cast<int>(StreamId::kHost), d = static_cast<int>(StreamId::kD2H);
  // No contention: 10 ms.
  EXPECT_NEAR(simulate(b.s, Pass::kTrain, costs, 1).step_seconds, 10e-3, 1e-12);
  // The copy slows the update 1.5-fold: 10 ms at 2/3 of its rate, then the last 3.3 ms alone.
  costs.set(CostClass::kHost, CostClass::kD2H, 1.5);
  SimResult r = simulate(b.s, Pass::kTrain, costs, 1);
  EXPECT_NEAR(r.busy_seconds[h], 10e-3 + 10e-3 / 3, 1e-5);
  EXPECT_NEAR(r.busy_seconds[d], 10e-3, 1e-12);
  EXPECT_NEAR(r.step_seconds, 10e-3 + 10e-3 / 3, 1e-5);
  // Each slows the other 1.5-fold: both run at 2/3 of their rate throughout and end at 15 ms.
  costs.set(CostClass::kD2H, CostClass::kHost, 1.5);
  r = simulate(b.s, Pass::kTrain, costs, 1);
  EXPECT_NEAR(r.busy_seconds[h], 15e-3, 1e-4);
  EXPECT_NEAR(r.busy_seconds[d], 15e-3, 1e-4);
  // Work that does not overlap is not slowed: the copy waits for the update first.
  Builder seq;
  seq.add(StreamId::kHost, OpKind::kHostAdamW);
  seq.add(StreamId::kHost, OpKind::kRecord, "host");
  seq.add(StreamId::kD2H, OpKind::kWait, "host");
  seq.add(StreamId::kD2H, OpKind::kSwapOut);
  seq.add(StreamId::kD2H, OpKind::kRecord, "out");
  seq.add(StreamId::kCompute, OpKind::kWait, "out");
  EXPECT_NEAR(simulate(seq.s, Pass::kTrain, costs, 1).step_seconds, 20e-3, 1e-12);
  // Compute is not slowed: a block beside the copy keeps its 1 ms.
  Builder comp;
  comp.add(StreamId::kD2H, OpKind::kSwapOut);
  comp.add(StreamId::kCompute, OpKind::kModel);
  costs.set(CostClass::kCompute, CostClass::kD2H, 3.0);
  r = simulate(comp.s, Pass::kTrain, costs, 1);
  EXPECT_NEAR(r.busy_seconds[static_cast<int>(StreamId::kCompute)], 1e-3, 1e-12);
}

// Contention stretches the work, not the fixed cost (a link's latency, a host task's start): a 10 ms update of which
// 5 ms are fixed, beside a 10 ms copy that slows its work 2-fold, is stretched by half as much as a 10 ms update of
// work alone; an update that is all fixed cost is not stretched at all.
TEST(Simulator, ContentionSparesFixedCosts) {
  Builder b;
  b.add(StreamId::kHost, OpKind::kHostAdamW);
  b.add(StreamId::kHost, OpKind::kRecord, "host");
  b.add(StreamId::kD2H, OpKind::kSwapOut);
  b.add(StreamId::kD2H, OpKind::kRecord, "out");
  b.add(StreamId::kCompute, OpKind::kWait, "host");
  b.add(StreamId::kCompute, OpKind::kWait, "out");
  ContendedCosts costs;
  costs.base.copy = costs.base.host = 10e-3;
  costs.set(CostClass::kHost, CostClass::kD2H, 2.0);
  const int h = static_cast<int>(StreamId::kHost);
  const double all_work = simulate(b.s, Pass::kTrain, costs, 1).busy_seconds[h] - 10e-3;
  EXPECT_NEAR(all_work, 5e-3, 1e-5);  // the copy's 10 ms cover 10 ms of the update: half its work is left
  costs.fixed = 5e-3;
  const double half_work = simulate(b.s, Pass::kTrain, costs, 1).busy_seconds[h] - 10e-3;
  EXPECT_GT(half_work, 0);
  EXPECT_LT(half_work, 0.6 * all_work);
  costs.fixed = 10e-3;
  EXPECT_NEAR(simulate(b.s, Pass::kTrain, costs, 1).busy_seconds[h], 10e-3, 1e-12);
}

TEST(Simulator, TheCpuOptimizerOverlapsTheNextForward) {
  const Schedule s = schedule_for("in-core", OptimizerPlacement::kCpu);
  TestCosts costs;
  costs.host = 1e-3;  // a segment's update: as long as a block
  const SimResult r = simulate(s, Pass::kTrain, costs, 4);
  const int c = static_cast<int>(StreamId::kCompute), h = static_cast<int>(StreamId::kHost);
  EXPECT_NEAR(r.busy_seconds[h], 8 * 1e-3, 1e-12);  // 6 blocks, the embeddings, the final LayerNorm
  // Without overlap a step would be its compute plus the whole update; the forward waits only for what it needs.
  EXPECT_LT(r.step_seconds, r.busy_seconds[c] + r.busy_seconds[h] - 1e-3);
  EXPECT_GT(r.step_seconds, r.busy_seconds[c]);
  EXPECT_GT(r.waits.at("wait cpu optimizer"), 0);
}

}  // namespace
}  // namespace tt::perf
