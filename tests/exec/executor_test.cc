// The executor on its own (exec/executor.h) and the schedule it runs (exec/schedule.h), on the CPU backend with its
// delay knobs (slow kernels, a slow link, a slow host), which give every operation a known minimum time:
// - the schedule of every plan validates and survives a JSON round trip, and broken ones are refused;
// - the memory the schedule says a run takes equals what the pools measured, per pool and tensor class, and the
//   inventory is exactly what was allocated;
// - the copies and waits run in the schedule's order, and copies overlap compute;
// - every kind of wait in the schedule is needed: running the schedule without it gives other bits than in-core.
#include <algorithm>
#include <memory>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "exec/executor.h"
#include "exec/op_profiler.h"
#include "test_util.h"

namespace tt {
namespace {

using nlohmann::json;

const GptConfig kCfg{.vocab = 64, .layers = 4, .dim = 16, .heads = 2, .seq = 8};
constexpr int kBatch = 2;

// A plan by name (a shortcut, or "mixed": swap, recompute, resident and the halves in one plan), with the optimizer
// where asked.
Plan make_plan(const std::string& name, OptimizerPlacement opt = OptimizerPlacement::kDevice, int slots = 2) {
  Plan p;
  if (name == "mixed") {
    p = Plan::from_json(json::parse(R"({"default": {"activation": "swap"},
        "layers": {"1": {"activation": "recompute"}, "2": {"activation": "resident"}}})"),
                        kCfg.layers, "mixed")
            .value();
  } else {
    p = Plan::resolve(name, kCfg.layers, slots).value();
  }
  if (!p.needs_cpu_optimizer()) p.optimizer = opt;
  return p;
}

ExecSpec make_spec(const Plan& plan, bool speculate = false) {
  ExecSpec s;
  s.model = kCfg;
  s.batch = kBatch;
  s.compute = DType::kF32;
  s.plan = plan;
  s.hyper.speculate = speculate;
  s.input_staging_slots = 2;
  return s;
}

struct PlanCase {
  std::string name;
  OptimizerPlacement opt;
  bool speculate;
};
std::vector<PlanCase> every_plan() {
  std::vector<PlanCase> r;
  for (const char* n : {"in-core", "recompute", "swap-activations", "swap-attention-recompute-mlp",
                        "swap-attention-recompute-mlp-norms", "mixed"}) {
    r.push_back({n, OptimizerPlacement::kDevice, false});
    r.push_back({n, OptimizerPlacement::kCpu, false});
  }
  for (const char* n : {"offload-params", "offload-all"}) {
    r.push_back({n, OptimizerPlacement::kCpu, false});
    r.push_back({n, OptimizerPlacement::kCpu, true});
  }
  r.push_back({"swap-activations", OptimizerPlacement::kCpu, true});
  return r;
}

Schedule compile_for(const ExecSpec& spec) {
  ExecSpec s = spec;
  s.lm_chunk_rows = gpt_default_lm_chunk_rows(s.model, s.batch, s.compute);
  return compile_schedule({s.model, s.batch, s.compute, s.plan, s.hyper.speculate, s.lm_chunk_rows},
                          Executor::inventory(s).value());
}

TEST(Schedule, EveryPlanValidatesAndRoundTripsThroughJson) {
  for (const PlanCase& c : every_plan()) {
    SCOPED_TRACE(c.name + (c.opt == OptimizerPlacement::kCpu ? " cpu" : " device") + (c.speculate ? " spec" : ""));
    const Schedule s = compile_for(make_spec(make_plan(c.name, c.opt), c.speculate));
    ASSERT_TRUE(s.validate().is_ok()) << s.validate().to_string();
    const json j = s.to_json();
    auto back = Schedule::from_json(json::parse(j.dump()));
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_EQ(back.value().events, s.events);
    for (int p = 0; p < kNumPasses; ++p) EXPECT_TRUE(back.value().passes[p] == s.passes[p]) << pass_name(Pass(p));
    EXPECT_EQ(back.value().spec.plan.to_json(), s.spec.plan.to_json());
    EXPECT_EQ(back.value().to_json(), j);
    // The training step has the model's every boundary and, with any host placement, copies.
    EXPECT_FALSE(s.pass(Pass::kTrain).empty());
    EXPECT_FALSE(s.pass(Pass::kSetup).empty());
  }
}

TEST(Schedule, BrokenSchedulesAreRefused) {
  const Schedule good = compile_for(make_spec(make_plan("swap-activations")));
  ASSERT_TRUE(good.validate().is_ok());
  auto train = [](Schedule& s) -> std::vector<Op>& { return s.passes[static_cast<int>(Pass::kTrain)]; };
  {  // An event waited for and never recorded.
    Schedule s = good;
    for (auto& ops : s.passes)
      std::erase_if(ops, [&](const Op& op) { return op.kind == OpKind::kRecord && s.events[op.event] == "swap_in h.0"; });
    EXPECT_NE(s.validate().message().find("never recorded"), std::string::npos) << s.validate().to_string();
  }
  {  // The model's blocks out of order.
    Schedule s = good;
    std::vector<Op>& ops = train(s);
    auto first = std::find_if(ops.begin(), ops.end(), [](const Op& op) { return op.name == "forward h.0"; });
    auto second = std::find_if(ops.begin(), ops.end(), [](const Op& op) { return op.name == "forward h.1"; });
    ASSERT_TRUE(first != ops.end() && second != ops.end());
    std::iter_swap(first, second);
    EXPECT_NE(s.validate().message().find("boundaries"), std::string::npos) << s.validate().to_string();
  }
  {  // A slot that does not exist.
    Schedule s = good;
    for (Op& op : train(s))
      if (op.kind == OpKind::kSwapIn) op.slot = 7;
    EXPECT_NE(s.validate().message().find("slot 7"), std::string::npos) << s.validate().to_string();
  }
  {  // An allocation inside a step.
    Schedule s = good;
    train(s).push_back(s.pass(Pass::kSetup).front());
    EXPECT_NE(s.validate().message().find("setup"), std::string::npos) << s.validate().to_string();
  }
  {  // An event recorded on two streams.
    Schedule s = good;
    for (Op& op : train(s))
      if (op.kind == OpKind::kRecord && s.events[op.event] == "fwd_done h.0") op.stream = StreamId::kH2D;
    EXPECT_NE(s.validate().message().find("two streams"), std::string::npos) << s.validate().to_string();
  }
  {  // JSON naming an event the schedule does not have, or a kind that does not exist.
    json j = good.to_json();
    j["passes"]["train"]["ops"][0]["event"] = "no such event";
    EXPECT_FALSE(Schedule::from_json(j).is_ok());
    json k = good.to_json();
    k["passes"]["train"]["ops"][0]["kind"] = "teleport";
    EXPECT_FALSE(Schedule::from_json(k).is_ok());
  }
}

// One fixed batch: into the model's inputs now (for a forward before the first step), and as the input source of
// every training step (Note [input staging]), whose first copy starts here.
void feed(Executor& ex, Backend& be) {
  Rng rng(11);
  auto batch = std::make_shared<std::vector<int32_t>>(2 * kBatch * kCfg.seq);
  for (auto& t : *batch) t = static_cast<int32_t>(rng.uniform_int(kCfg.vocab));
  be.copy_h2d(ex.tokens(), batch->data(), be.compute_stream());
  be.copy_h2d(ex.targets(), batch->data() + kBatch * kCfg.seq, be.compute_stream());
  EXPECT_TRUE(be.compute_stream().synchronize().is_ok());
  ex.set_input_source([batch](int32_t* host) { std::memcpy(host, batch->data(), batch->size() * sizeof(int32_t)); });
  ex.prefetch();
}

struct Delays {
  int64_t compute_us = 0, copy_us = 0, host_us = 0;
};

struct Result3 {
  std::vector<float> params, losses;
  bool operator==(const Result3& o) const {
    return params.size() == o.params.size() && losses.size() == o.losses.size() &&
           std::memcmp(params.data(), o.params.data(), params.size() * sizeof(float)) == 0 &&
           std::memcmp(losses.data(), o.losses.data(), losses.size() * sizeof(float)) == 0;
  }
};

// Three training steps (each after an evaluation forward, which has no backward to order its copies) and the
// parameters and the last losses; `edit` may change the schedule before the first step.
Result3 run3(const ExecSpec& spec, Delays d, const std::function<void(Schedule&)>& edit = {}) {
  auto be = std::move(cpu::create_backend({.device_budget = int64_t(64) << 20,
                                           .threads = 1,
                                           .copy_delay_us = d.copy_us,
                                           .compute_delay_us = d.compute_us,
                                           .host_delay_us = d.host_us}))
                .value();
  auto ex = std::move(Executor::create(*be, spec)).value();
  EXPECT_TRUE(ex->init_params(3).is_ok());
  feed(*ex, *be);
  if (edit) {
    Schedule s = ex->schedule();
    edit(s);
    EXPECT_TRUE(ex->use_schedule(std::move(s)).is_ok());
  }
  for (int step = 1; step <= 3; ++step) {
    ex->forward();
    ex->train_step(1e-2f, /*speculate=*/true);
  }
  Result3 r;
  r.params.resize(static_cast<size_t>(ex->num_params()));
  r.losses.resize(static_cast<size_t>(kBatch * kCfg.seq));
  EXPECT_TRUE(ex->download_params(r.params.data()).is_ok());
  be->copy_d2h(r.losses.data(), ex->losses(), be->compute_stream());
  EXPECT_TRUE(be->synchronize_all().is_ok());
  return r;
}

// Removes the waits named `name` on stream `st` from every pass.
std::function<void(Schedule&)> without(StreamId st, const std::string& name) {
  return [st, name](Schedule& s) {
    size_t removed = 0;
    for (auto& ops : s.passes)
      removed += std::erase_if(ops, [&](const Op& op) { return op.kind == OpKind::kWait && op.stream == st && op.name == name; });
    EXPECT_GT(removed, 0u) << "no wait '" << name << "' on " << stream_name(st) << " to remove";
  };
}

TEST(Executor, MemoryOfTheScheduleIsWhatThePoolsMeasured) {
  for (const PlanCase& c : every_plan()) {
    SCOPED_TRACE(c.name + (c.opt == OptimizerPlacement::kCpu ? " cpu" : " device") + (c.speculate ? " spec" : ""));
    auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
    auto ex = std::move(Executor::create(*be, make_spec(make_plan(c.name, c.opt), c.speculate))).value();
    ASSERT_TRUE(ex->init_params(1).is_ok());
    feed(*ex, *be);
    for (int i = 0; i < 2; ++i) {
      ex->forward();
      ex->train_step(1e-3f, true);
    }
    ASSERT_TRUE(be->synchronize_all().is_ok());
    const MemoryUse m = ex->schedule().replay_memory({Pass::kForward, Pass::kTrain, Pass::kForward, Pass::kTrain});
    const Inventory& inv = ex->allocated();
    const memory::MemoryStats& st = be->stats();
    const memory::Tier host_tier = memory::Tier::kHost;  // the CPU backend's host pool, unlocked
    for (int cls = 0; cls < kNumTensorClasses; ++cls) {
      const TensorClass k = static_cast<TensorClass>(cls);
      SCOPED_TRACE(tensor_class_name(k));
      EXPECT_EQ(st.of(memory::Tier::kDevice, k).peak, m.peak[Inventory::kDevice][cls]);
      EXPECT_EQ(st.of(host_tier, k).peak, m.peak[Inventory::kHost][cls]);
      EXPECT_EQ(inv.of(Inventory::kDevice, k), m.peak[Inventory::kDevice][cls]);
      EXPECT_EQ(inv.of(Inventory::kHost, k), m.peak[Inventory::kHost][cls]);
    }
    EXPECT_EQ(static_cast<int64_t>(be->pool().peak_in_use()), m.peak_total[Inventory::kDevice]);
    EXPECT_EQ(static_cast<int64_t>(be->host_pool().peak_in_use()), m.peak_total[Inventory::kHost]);
    // One allocation per inventory entry, and none since.
    int64_t device_entries = 0, host_entries = 0;
    for (const InventoryEntry& e : inv.entries()) (e.where == Inventory::kDevice ? device_entries : host_entries) += 1;
    EXPECT_EQ(be->pool().allocation_count(), device_entries);
    EXPECT_EQ(be->host_pool().allocation_count(), host_entries);
  }
}

TEST(Executor, CopiesAndWaitsRunInTheScheduleOrderAndCopiesOverlapCompute) {
  for (const char* plan : {"swap-activations", "offload-all"}) {
    SCOPED_TRACE(plan);
    auto be = std::move(cpu::create_backend({.device_budget = int64_t(64) << 20, .threads = 1, .copy_delay_us = 2000,
                                             .compute_delay_us = 300}))
                  .value();
    auto ex = std::move(Executor::create(*be, make_spec(make_plan(plan, OptimizerPlacement::kCpu)))).value();
    ASSERT_TRUE(ex->init_params(1).is_ok());
    feed(*ex, *be);
    OpProfiler prof(*be);
    prof.set_tracing(true);
    ex->set_profiler(&prof);
    ex->train_step(1e-3f);  // not traced
    prof.set_enabled(true);
    ex->train_step(1e-3f);
    ASSERT_TRUE(prof.collect(2).is_ok());
    ASSERT_TRUE(prof.flush().is_ok());
    // Per stream, the names of the schedule's copies and host work in order, against the trace's in start order.
    const std::vector<Op>& ops = ex->schedule().pass(Pass::kTrain);
    for (StreamId st : {StreamId::kH2D, StreamId::kD2H, StreamId::kHost}) {
      SCOPED_TRACE(stream_name(st));
      std::vector<std::string> want, got;
      for (const Op& op : ops)
        if (op.stream == st && op.kind != OpKind::kWait && op.kind != OpKind::kRecord && !op.speculative &&
            op.kind != OpKind::kInputFill)  // the host's draw, at issue: no span
          want.push_back(op.name);
      std::vector<OpProfiler::Span> spans;
      const int track = st == StreamId::kH2D ? OpProfiler::kH2D : st == StreamId::kD2H ? OpProfiler::kD2H : OpProfiler::kHost;
      for (const OpProfiler::Span& s : prof.spans())
        if (s.track == track && s.step == 2) spans.push_back(s);
      std::stable_sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.start_ms < b.start_ms; });
      for (const auto& s : spans) got.push_back(s.name);
      EXPECT_FALSE(want.empty());
      EXPECT_EQ(got, want);
    }
    // The compute stream's waits, in order.
    std::vector<std::string> want_waits, got_waits;
    for (const Op& op : ops)
      if (op.stream == StreamId::kCompute && op.kind == OpKind::kWait) want_waits.push_back(op.name);
    std::vector<OpProfiler::Span> compute;
    for (const OpProfiler::Span& s : prof.spans())
      if (s.track == OpProfiler::kCompute && s.step == 2) compute.push_back(s);
    std::stable_sort(compute.begin(), compute.end(), [](const auto& a, const auto& b) { return a.start_ms < b.start_ms; });
    for (const auto& s : compute)
      if (s.name.rfind("wait ", 0) == 0) got_waits.push_back(s.name);
    EXPECT_EQ(got_waits, want_waits);
    // Some copy runs while the compute stream runs a kernel.
    int overlapping = 0;
    for (const OpProfiler::Span& c : prof.spans()) {
      if (c.step != 2 || (c.track != OpProfiler::kH2D && c.track != OpProfiler::kD2H)) continue;
      for (const OpProfiler::Span& k : compute)
        if (k.name.rfind("wait ", 0) != 0 && k.start_ms < c.end_ms && c.start_ms < k.end_ms) ++overlapping;
    }
    EXPECT_GT(overlapping, 0);
  }
}

// Each kind of wait in the schedule, removed, under the delay that exposes what it orders: the run must no longer
// give the in-core bits (the full schedule does). Slow link: a consumer runs before its copy lands. Slow kernels: a
// copy reads or overwrites a buffer the compute stream still writes or reads. Slow host: the forward reads
// parameters before the CPU optimizer's update of them came back.
TEST(Executor, EveryKindOfWaitIsNeeded) {
  const Result3 reference = run3(make_spec(make_plan("in-core")), {});
  const Result3 reference_cpu = run3(make_spec(make_plan("in-core", OptimizerPlacement::kCpu)), {});
  struct Case {
    const char* plan;
    OptimizerPlacement opt;
    StreamId stream;
    const char* wait;
    Delays delays;
  };
  const Delays slow_link{0, 20000, 0}, slow_kernels{3000, 0, 0}, slow_host{0, 0, 20000};
  const Case cases[] = {
      // Note [swap]: the backward's wait for its swap-in; the forward's wait for the slot's last copy out; the copy
      // out's wait for the forward; the swap-in's wait for the slot's backward.
      {"swap-activations", OptimizerPlacement::kDevice, StreamId::kCompute, "wait swap_in", slow_link},
      {"swap-activations", OptimizerPlacement::kDevice, StreamId::kCompute, "wait swap_out", slow_link},
      {"swap-activations", OptimizerPlacement::kDevice, StreamId::kD2H, "wait forward", slow_kernels},
      {"swap-activations", OptimizerPlacement::kDevice, StreamId::kH2D, "wait backward", slow_kernels},
      // Note [streamed parameters]: a block's wait for its upload; an upload's wait for its slot to be free.
      {"offload-params", OptimizerPlacement::kCpu, StreamId::kCompute, "wait params", slow_link},
      {"offload-params", OptimizerPlacement::kCpu, StreamId::kH2D, "wait param slot", slow_kernels},
      // Streamed gradients: a block's wait for its gradient slot to have left for the host.
      {"offload-params", OptimizerPlacement::kCpu, StreamId::kCompute, "wait grad slot", slow_link},
      // The CPU optimizer: the forward's wait for the updated parameters; the gradients' wait for the backward.
      {"in-core", OptimizerPlacement::kCpu, StreamId::kCompute, "wait cpu optimizer", slow_host},
      {"in-core", OptimizerPlacement::kCpu, StreamId::kD2H, "wait backward", slow_kernels},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.plan) + ": " + stream_name(c.stream) + " " + c.wait);
    const ExecSpec spec = make_spec(make_plan(c.plan, c.opt));
    const Result3& want = c.opt == OptimizerPlacement::kCpu ? reference_cpu : reference;
    EXPECT_TRUE(run3(spec, c.delays) == want) << "the full schedule differs from in-core";
    EXPECT_FALSE(run3(spec, c.delays, without(c.stream, c.wait)) == want) << "the wait made no difference";
  }
}

}  // namespace
}  // namespace tt
