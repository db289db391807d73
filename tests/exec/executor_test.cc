// The executor on its own (exec/executor.h) and the schedule it runs (plan/schedule.h), on the CPU backend with its
// delay knobs (slow kernels, a slow link, a slow host), which give every operation a known minimum time:
// - the schedule of every plan validates and survives a JSON round trip, and broken ones are refused;
// - the memory the schedule says a run takes equals what the pools measured, per pool and tensor class, and the
//   inventory is exactly what was allocated;
// - the copies and waits run in the schedule's order, and copies overlap compute;
// - every kind of wait in the schedule is needed: running the schedule without it gives other bits than in-core;
// - against a stand-in model (FakeGpt: the GPT's tensors and boundaries, kernels of its own), every block reads back
//   exactly the data its own forward of that pass wrote, under every plan, and a wait of the swap ring removed makes
//   some block read another's; a model off the schedule is stopped.
#include <algorithm>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <set>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "core/bf16.h"
#include "core/rng.h"
#include "exec/executor.h"
#include "model/gpt.h"
#include "exec/op_profiler.h"
#include "exec_util.h"

namespace tt {
namespace {

using nlohmann::json;

const ModelConfig kCfg{.vocab = 64, .layers = 4, .dim = 16, .heads = 2, .seq = 8};
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
  } else if (name == "mixed-gelu") {  // Note [rebuilt activation] on swapped and resident blocks
    p = Plan::from_json(json::parse(R"({"default": {"activation": {"attention": "swap", "mlp": "swap",
        "gelu": "recompute"}}, "layers": {"1": {"activation": "recompute"},
        "2": {"activation": {"attention": "resident", "mlp": "resident", "gelu": "recompute"}}}})"),
                        kCfg.layers, "mixed-gelu")
            .value();
  } else if (name.ends_with("+split")) {  // Note [optimizer split]: the first two segments' AdamW on the device
    p = make_plan(name.substr(0, name.size() - 6), OptimizerPlacement::kCpu, slots);
    p.optimizer = OptimizerPlacement::kCpu;
    p.device_optimizer_segments = 2;
    return p;
  } else if (name.ends_with("+ring")) {  // Note [host buffers in rings]: the shortcut with the CPU optimizer's rings
    p = make_plan(name.substr(0, name.size() - 5), OptimizerPlacement::kCpu, slots);
    p.host_ring = true;
    return p;
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
  for (const char* n : {"in-core", "in-core-selective", "recompute", "swap-activations", "swap-attention-recompute-mlp",
                        "swap-attention-recompute-mlp-norms", "mixed", "mixed-gelu"}) {
    r.push_back({n, OptimizerPlacement::kDevice, false});
    r.push_back({n, OptimizerPlacement::kCpu, false});
  }
  for (const char* n : {"offload-params", "offload-all"}) {
    r.push_back({n, OptimizerPlacement::kCpu, false});
    r.push_back({n, OptimizerPlacement::kCpu, true});
  }
  r.push_back({"swap-activations", OptimizerPlacement::kCpu, true});
  for (const char* n : {"in-core+ring", "swap-activations+ring", "in-core+split", "in-core+ring+split",
                        "swap-activations+split"})
    r.push_back({n, OptimizerPlacement::kCpu, false});
  // Unified Memory (issue 20; tests/exec/um_test.cc has the rest): managed state needs the device optimizer.
  for (const char* n : {"um", "um-advised"}) r.push_back({n, OptimizerPlacement::kDevice, false});
  r.push_back({"um-swap-activations", OptimizerPlacement::kDevice, false});
  r.push_back({"um-swap-activations", OptimizerPlacement::kCpu, true});
  return r;
}

Schedule compile_for(const ExecSpec& spec) {
  ExecSpec s = spec;
  s.lm_chunk_rows = model_default_lm_chunk_rows(s.model, s.batch, s.compute);
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

// A tensor-parallel rank's schedule keeps its shard's geometry through the JSON (its segments, which the checks of
// the exchange's parts measure, are the shard's).
TEST(Schedule, ATensorParallelShardRoundTripsThroughJson) {
  ExecSpec spec = make_spec(make_plan("in-core", OptimizerPlacement::kDevice), false);
  spec.model.tp = 2;
  spec.model.split_vocab = true;
  const Schedule s = compile_for(spec);
  ASSERT_TRUE(s.validate().is_ok()) << s.validate().to_string();
  auto back = Schedule::from_json(json::parse(s.to_json().dump()));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back.value().spec.model.tp, 2);
  EXPECT_TRUE(back.value().spec.model.split_vocab);
  EXPECT_EQ(back.value().to_json(), s.to_json());
}

// Note [data parallel]: with data_ranks > 1 every segment's gradients are reduced once, on the comm stream, after
// the compute stream recorded that the backward wrote them; and whatever reads them (the copy to the host, the
// norm's parts) first waits for that reduction. On every plan; the JSON keeps data_ranks.
TEST(Schedule, DataParallelReducesEverySegmentBeforeItIsRead) {
  for (const PlanCase& c : every_plan()) {
    SCOPED_TRACE(c.name + (c.opt == OptimizerPlacement::kCpu ? " cpu" : " device") + (c.speculate ? " spec" : ""));
    ExecSpec spec = make_spec(make_plan(c.name, c.opt), c.speculate);
    spec.lm_chunk_rows = model_default_lm_chunk_rows(spec.model, spec.batch, spec.compute);
    ScheduleSpec ss = spec.schedule_spec();
    ss.data_ranks = 2;
    const Schedule s = compile_schedule(ss, Executor::inventory(spec).value());
    ASSERT_TRUE(s.validate().is_ok()) << s.validate().to_string();
    const int S = spec.model.layers + 2;
    std::vector<int> reduced(static_cast<size_t>(S), 0);
    std::vector<std::string> seg_names(static_cast<size_t>(S));  // from the reductions' names: "grad reduce h.3"
    std::set<std::string> waited[kNumStreams];  // events each stream has waited for so far
    std::set<std::string> recorded_compute;
    for (const Op& op : s.pass(Pass::kTrain)) {
      const int st = static_cast<int>(op.stream);
      if (op.kind == OpKind::kWait) waited[st].insert(s.events[static_cast<size_t>(op.event)]);
      if (op.kind == OpKind::kRecord && op.stream == StreamId::kCompute)
        recorded_compute.insert(s.events[static_cast<size_t>(op.event)]);
      if (op.kind == OpKind::kGradReduce) {
        EXPECT_EQ(op.stream, StreamId::kComm) << op.name;
        ++reduced[static_cast<size_t>(op.segment)];
        seg_names[static_cast<size_t>(op.segment)] = op.name.substr(std::string("grad reduce ").size());
        const std::string grads = "grads " + seg_names[static_cast<size_t>(op.segment)];
        EXPECT_TRUE(waited[st].count(grads) && recorded_compute.count(grads)) << op.name << " waits for " << grads;
      }
      if ((op.kind == OpKind::kGradsOut || op.kind == OpKind::kNormPart) && op.segment >= 0) {
        ASSERT_EQ(reduced[static_cast<size_t>(op.segment)], 1) << op.name << " of segment " << op.segment;
        const std::string done = "reduced " + seg_names[static_cast<size_t>(op.segment)];
        EXPECT_TRUE(waited[st].count(done)) << op.name << " on " << stream_name(op.stream) << " does not wait for "
                                            << done;
      }
    }
    for (int seg = 0; seg < S; ++seg) EXPECT_EQ(reduced[static_cast<size_t>(seg)], 1) << "segment " << seg;
    auto back = Schedule::from_json(json::parse(s.to_json().dump()));
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_EQ(back.value().spec.data_ranks, 2);
    EXPECT_EQ(back.value().to_json(), s.to_json());
  }
}

// Note [norm beside the backward] (plan/schedule.cc): with AdamW on the device each segment's part of the norm is
// computed once, on the comm stream, after waiting for the compute stream's record that its backward is done; the
// compute stream waits for every part before the total. With the knob off, with the CPU optimizer and over data
// ranks the parts stay on the compute stream. On every plan.
TEST(Schedule, TheNormsPartsRunBesideTheBackward) {
  for (const PlanCase& c : every_plan()) {
    SCOPED_TRACE(c.name + (c.opt == OptimizerPlacement::kCpu ? " cpu" : " device") + (c.speculate ? " spec" : ""));
    ExecSpec spec = make_spec(make_plan(c.name, c.opt), c.speculate);
    spec.lm_chunk_rows = model_default_lm_chunk_rows(spec.model, spec.batch, spec.compute);
    const int S = spec.model.layers + 2;
    for (const int variant : {0, 1, 2}) {  // as it is, the knob off, two data ranks
      ScheduleSpec ss = spec.schedule_spec();
      if (variant == 1) ss.norm_beside = false;
      if (variant == 2) ss.data_ranks = 2;
      const bool beside = c.opt == OptimizerPlacement::kDevice && variant == 0;
      EXPECT_EQ(norm_beside_backward(ss), beside);
      const Schedule s = compile_schedule(ss, Executor::inventory(spec).value());
      ASSERT_TRUE(s.validate().is_ok()) << s.validate().to_string();
      std::vector<int> parts(static_cast<size_t>(S), 0);
      std::set<std::string> waited[kNumStreams], recorded[kNumStreams], parts_after;
      std::string last_wait[kNumStreams];
      for (const Op& op : s.pass(Pass::kTrain)) {
        const int st = static_cast<int>(op.stream);
        const std::string ev = op.event >= 0 ? s.events[static_cast<size_t>(op.event)] : std::string();
        if (op.kind == OpKind::kWait) waited[st].insert(ev), last_wait[st] = ev;
        if (op.kind == OpKind::kRecord) recorded[st].insert(ev);
        if (op.kind == OpKind::kNormPart) {
          ++parts[static_cast<size_t>(op.segment)];
          EXPECT_EQ(op.stream, beside ? StreamId::kComm : StreamId::kCompute) << op.name << " " << op.segment;
          if (beside) {  // right after the wait for its own backward's record, a record of its own
            EXPECT_EQ(last_wait[st].rfind("grads ", 0), 0u) << "segment " << op.segment << ": " << last_wait[st];
            EXPECT_TRUE(recorded[static_cast<int>(StreamId::kCompute)].count(last_wait[st])) << last_wait[st];
            EXPECT_TRUE(parts_after.insert(last_wait[st]).second) << "two parts after " << last_wait[st];
          }
        }
        if (op.kind == OpKind::kNormTotal && beside) {
          int normed = 0;
          for (const std::string& w : waited[static_cast<int>(StreamId::kCompute)])
            normed += w.rfind("normed ", 0) == 0 && recorded[static_cast<int>(StreamId::kComm)].count(w);
          EXPECT_EQ(normed, S) << "the total waits for every part";
        }
      }
      for (int seg = 0; seg < S; ++seg) EXPECT_EQ(parts[static_cast<size_t>(seg)], 1) << "segment " << seg;
    }
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
  ex.set_input_source([batch](int32_t* host) {
    std::memcpy(host, batch->data(), batch->size() * sizeof(int32_t));
    return -1.0f;  // the default loss scale
  });
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

// Note [host one step ahead] (exec/trainer.cc): the trainer may enqueue a step while the one before it runs, so the
// executor draws a batch into a staging slot only after the copy that last read that slot has finished. With slow
// copies and steps enqueued back to back (batch 3 is drawn into batch 1's slot while batch 1's copy still waits out
// its delay), the parameters are those of steps run one at a time; they differ when the draw does not wait.
TEST(Executor, InputSlotIsRewrittenOnlyAfterItsCopyFinished) {
  std::vector<float> params[2];
  for (int back_to_back = 0; back_to_back < 2; ++back_to_back) {
    SCOPED_TRACE(back_to_back ? "back to back" : "one at a time");
    auto be = std::move(cpu::create_backend({.device_budget = int64_t(64) << 20, .threads = 1, .copy_delay_us = 20000}))
                  .value();
    auto ex = std::move(Executor::create(*be, make_spec(make_plan("in-core", OptimizerPlacement::kDevice)))).value();
    ASSERT_TRUE(ex->init_params(3).is_ok());
    auto drawn = std::make_shared<int>(0);
    ex->set_input_source([drawn](int32_t* host) {  // batch n: every token n * 7 + i mod vocab
      const int n = ++*drawn;
      for (int i = 0; i < 2 * kBatch * kCfg.seq; ++i) host[i] = (n * 7 + i) % kCfg.vocab;
      return -1.0f;
    });
    ex->prefetch();
    for (int step = 1; step <= 3; ++step) {
      ex->train_step(1e-2f, /*speculate=*/true);
      if (!back_to_back) {
        ASSERT_TRUE(be->synchronize_all().is_ok());
      }
    }
    ASSERT_TRUE(be->synchronize_all().is_ok());
    ASSERT_TRUE(ex->input_status().is_ok()) << ex->input_status().to_string();
    EXPECT_EQ(*drawn, 4);
    params[back_to_back].resize(static_cast<size_t>(ex->num_params()));
    ASSERT_TRUE(ex->download_params(params[back_to_back].data()).is_ok());
    ASSERT_TRUE(be->synchronize_all().is_ok());
  }
  EXPECT_EQ(std::memcmp(params[0].data(), params[1].data(), params[0].size() * sizeof(float)), 0)
      << "steps enqueued back to back trained on other batches";
}

// Note [host buffers in rings]: the host keeps the master and the moments (12 bytes a parameter with f32 compute)
// and two gradient slots of the largest segment, 4 bytes a parameter less the slots than the whole copies; the rings
// are refused where a whole copy is read (streamed parameters or gradients, speculation, the device optimizer).
TEST(Executor, HostRingsHoldTheStateAndTwoSegmentsAndAreRefusedWhereWholeCopiesAreRead) {
  const ExecSpec whole = make_spec(make_plan("in-core", OptimizerPlacement::kCpu));
  const ExecSpec ring = make_spec(make_plan("in-core+ring"));
  ASSERT_TRUE(ring.validate().is_ok()) << ring.validate().to_string();
  const int64_t n = model_num_params(kCfg);
  const ParamSegments segs = model_segments(kCfg);
  const int64_t largest = *std::max_element(segs.size.begin(), segs.size.end());
  const Inventory a = Executor::inventory(whole).value(), b = Executor::inventory(ring).value();
  EXPECT_EQ(b.total(Inventory::kDevice), a.total(Inventory::kDevice));
  EXPECT_EQ(a.total(Inventory::kHost) - b.total(Inventory::kHost),
            static_cast<int64_t>(memory::host_alloc_size(static_cast<size_t>(n) * 4)) -
                2 * static_cast<int64_t>(memory::host_alloc_size(static_cast<size_t>(largest) * 4)));
  EXPECT_EQ(b.find("adam.grads"), nullptr);
  // Note [pinned and pageable host memory]: the moments pageable; the master too but with f32 compute, where the
  // copies send it.
  for (const Inventory* inv : {&a, &b}) {
    EXPECT_TRUE(inv->find("adam.m")->pageable && inv->find("adam.v")->pageable);
    EXPECT_FALSE(inv->find("params.master")->pageable);
    EXPECT_EQ(inv->pageable_total(), 2 * static_cast<int64_t>(memory::host_alloc_size(static_cast<size_t>(n) * 4)));
  }
  ExecSpec bf16 = ring;
  bf16.compute = DType::kBF16;
  EXPECT_TRUE(Executor::inventory(bf16).value().find("params.master")->pageable);
  ASSERT_NE(b.find("grads.ring1"), nullptr);
  EXPECT_EQ(b.find("grads.ring1")->request, static_cast<size_t>(largest) * 4);
  struct Refused {
    ExecSpec spec;
    const char* says;
  };
  ExecSpec speculating = ring, device = ring, streamed = make_spec(make_plan("offload-params"));
  speculating.hyper.speculate = true;
  device.plan.optimizer = OptimizerPlacement::kDevice;
  streamed.plan.host_ring = true;
  for (const Refused& r : {Refused{speculating, "--speculative-update"}, Refused{device, "CPU optimizer's"},
                           Refused{streamed, "streams its parameters or gradients"}}) {
    const Status st = r.spec.validate();
    EXPECT_NE(st.message().find(r.says), std::string::npos) << st.to_string();
  }
}

// Note [optimizer split]: the device holds the first K segments' master and moments (12 bytes a parameter), the
// host its whole state as without a split (their home); the step updates segments 0..K-1 on the compute stream and
// moves and updates only the others on the host; what cannot split is refused, named.
TEST(Executor, OptimizerSplitUpdatesTheFirstSegmentsOnTheDevice) {
  const ParamSegments segs = model_segments(kCfg);
  const int S = kCfg.layers + 2;
  for (const char* base : {"in-core", "in-core+ring"}) {
    SCOPED_TRACE(base);
    const ExecSpec whole = make_spec(make_plan(base, OptimizerPlacement::kCpu));
    for (const int K : {1, 2, S - 1}) {
      SCOPED_TRACE(K);
      ExecSpec split = whole;
      split.plan.device_optimizer_segments = K;
      ASSERT_TRUE(split.validate().is_ok()) << split.validate().to_string();
      const Inventory a = Executor::inventory(whole).value(), b = Executor::inventory(split).value();
      const int64_t n = segs.offset[static_cast<size_t>(K)];
      EXPECT_EQ(b.total(Inventory::kHost), a.total(Inventory::kHost));
      EXPECT_EQ(b.of(Inventory::kDevice, TensorClass::kOptimState), 2 * static_cast<int64_t>(device_alloc_bytes({n}, DType::kF32)));
      EXPECT_EQ(b.of(Inventory::kDevice, TensorClass::kParam) - a.of(Inventory::kDevice, TensorClass::kParam),
                static_cast<int64_t>(device_alloc_bytes({n}, DType::kF32)));
      const Schedule s = compile_for(split);
      ASSERT_TRUE(s.validate().is_ok()) << s.validate().to_string();
      std::vector<int> device(static_cast<size_t>(S), 0), host(static_cast<size_t>(S), 0), out(static_cast<size_t>(S), 0);
      for (const Op& op : s.pass(Pass::kTrain)) {
        if (op.kind == OpKind::kDeviceAdamW) {
          EXPECT_EQ(op.stream, StreamId::kCompute);
          ++device[static_cast<size_t>(op.segment)];
        }
        if (op.kind == OpKind::kHostAdamW) ++host[static_cast<size_t>(op.segment)];
        if (op.kind == OpKind::kGradsOut) ++out[static_cast<size_t>(op.segment)];
      }
      for (int seg = 0; seg < S; ++seg) {
        EXPECT_EQ(device[static_cast<size_t>(seg)], seg < K ? 1 : 0) << "segment " << seg;
        EXPECT_EQ(host[static_cast<size_t>(seg)], seg < K ? 0 : 1) << "segment " << seg;
        EXPECT_EQ(out[static_cast<size_t>(seg)], seg < K ? 0 : 1) << "segment " << seg;
      }
    }
  }
  // A schedule that moves a device segment's gradients to the host is refused by validate().
  ExecSpec split = make_spec(make_plan("in-core+split"));
  ExecSpec unsplit = split;
  unsplit.plan.device_optimizer_segments = 0;
  Schedule broken = compile_for(unsplit);
  broken.spec.plan.device_optimizer_segments = 2;
  EXPECT_NE(broken.validate().message().find("is updated on the device"), std::string::npos)
      << broken.validate().to_string();
  struct Refused {
    ExecSpec spec;
    const char* says;
  };
  ExecSpec device = split, all = split, speculating = split, streamed = make_spec(make_plan("offload-params"));
  device.plan.optimizer = OptimizerPlacement::kDevice;
  all.plan.device_optimizer_segments = S;
  speculating.hyper.speculate = true;
  streamed.plan.device_optimizer_segments = 1;
  ExecSpec managed = make_spec(make_plan("um-swap-activations", OptimizerPlacement::kCpu));
  managed.plan.device_optimizer_segments = 1;
  for (const Refused& r : {Refused{device, "splits the CPU optimizer"}, Refused{all, "is the device optimizer"},
                           Refused{speculating, "--speculative-update"}, Refused{streamed, "streams its parameters"},
                           Refused{managed, "managed memory"}}) {
    const Status st = r.spec.validate();
    EXPECT_NE(st.message().find(r.says), std::string::npos) << st.to_string();
  }
  // JSON: the count round-trips; out of range refused.
  const Plan back = Plan::from_json(split.plan.to_json(), kCfg.layers, "back").value();
  EXPECT_EQ(back.device_optimizer_segments, 2);
  EXPECT_FALSE(Plan::from_json(json::parse(R"({"optimizer": "cpu", "device_optimizer_segments": 6})"), kCfg.layers, "x")
                   .is_ok());
}

// Note [master in two halves] (core/bf16.h): with bf16 compute and AdamW on the device, the master lives as the
// compute copy and its low halves ("params.low", no f32 "params"): what goes up comes down in every bit (ties,
// zeros of both signs, the largest float, a NaN), and the compute copy is each value's high half. (bf16 compute
// trains on a GPU only; the CPU backend holds the tensors and copies them all the same.)
TEST(Executor, MasterInTwoHalvesComesBackWhole) {
  ExecSpec spec = make_spec(make_plan("in-core", OptimizerPlacement::kDevice));
  spec.compute = DType::kBF16;
  ASSERT_TRUE(spec.master_in_halves());
  const Inventory inv = Executor::inventory(spec).value();
  EXPECT_EQ(inv.find("params"), nullptr);
  ASSERT_NE(inv.find("params.low"), nullptr);
  EXPECT_EQ(inv.find("params.low")->dtype, DType::kBF16);
  // Not with the CPU optimizer (its master is on the host) or with f32 compute (the master is the compute copy).
  ExecSpec host = make_spec(make_plan("in-core", OptimizerPlacement::kCpu)), f32 = spec;
  host.compute = DType::kBF16;
  f32.compute = DType::kF32;
  EXPECT_FALSE(host.master_in_halves());
  EXPECT_FALSE(f32.master_in_halves());
  spec.halves_piece = 997;  // split and joined in pieces, the last a shorter one
  auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
  auto ex = std::move(Executor::create(*be, spec)).value();
  const int64_t n = ex->num_params();
  ASSERT_GT(n, 3 * spec.halves_piece);
  ASSERT_NE(n % spec.halves_piece, 0);
  std::vector<float> up(static_cast<size_t>(n));
  Rng rng(5);
  for (float& x : up) x = static_cast<float>(rng.normal());
  const uint32_t special[] = {0x3f808000u, 0xbf818000u, 0x80000000u, 0x00000000u, 0x7f7fffffu, 0x7fc00000u,
                              0x00000001u, 0x3f807fffu};
  for (size_t k = 0; k < std::size(special); ++k) up[17 * k + 3] = std::bit_cast<float>(special[k]);
  up[996] = std::bit_cast<float>(0x3f808000u);  // a tie at a piece's end and the next piece's start
  up[997] = std::bit_cast<float>(0xbf818000u);
  up.back() = std::bit_cast<float>(0x3f818000u);
  ASSERT_TRUE(ex->upload_params(up.data()).is_ok());
  std::vector<float> down(up.size(), 1.0f);
  ASSERT_TRUE(ex->download_params(down.data()).is_ok());
  EXPECT_EQ(0, std::memcmp(up.data(), down.data(), up.size() * sizeof(float)));
  const ParamSegments& segs = ex->model().segments();
  int64_t checked = 0;
  for (int s = 0; s < ex->model().num_segments(); ++s) {
    const Tensor& t = ex->model().tensors().params[static_cast<size_t>(s)];
    ASSERT_EQ(t.dtype(), DType::kBF16);
    std::vector<uint16_t> copy(static_cast<size_t>(t.numel()));
    be->copy_d2h(copy.data(), t, be->compute_stream());
    ASSERT_TRUE(be->compute_stream().synchronize().is_ok());
    for (size_t i = 0; i < copy.size(); ++i, ++checked)
      ASSERT_EQ(copy[i], bf16_high(up[static_cast<size_t>(segs.offset[static_cast<size_t>(s)]) + i]))
          << "segment " << s << " element " << i;
  }
  EXPECT_EQ(checked, n);
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
      EXPECT_EQ(st.of(memory::Tier::kManaged, k).peak, m.peak[Inventory::kManaged][cls]);
      EXPECT_EQ(inv.of(Inventory::kManaged, k), m.peak[Inventory::kManaged][cls]);
    }
    EXPECT_EQ(static_cast<int64_t>(be->pool().peak_in_use()), m.peak_total[Inventory::kDevice]);
    // Note [pinned and pageable host memory]: the host entries from the host pool, or the pageable one.
    EXPECT_EQ(static_cast<int64_t>(be->host_pool().peak_in_use() + be->pageable_pool().peak_in_use()),
              m.peak_total[Inventory::kHost]);
    EXPECT_EQ(static_cast<int64_t>(be->pageable_pool().peak_in_use()), inv.pageable_total());
    if (c.opt == OptimizerPlacement::kCpu) {
      EXPECT_GT(inv.pageable_total(), 0);  // AdamW's moments at least
    }
    // One allocation per inventory entry, and none since.
    int64_t device_entries = 0, host_entries = 0, pageable_entries = 0;
    for (const InventoryEntry& e : inv.entries())
      if (e.where != Inventory::kManaged)
        (e.where == Inventory::kDevice ? device_entries : e.pageable ? pageable_entries : host_entries) += 1;
    EXPECT_EQ(be->pool().allocation_count(), device_entries);
    EXPECT_EQ(be->host_pool().allocation_count(), host_entries);
    EXPECT_EQ(be->pageable_pool().allocation_count(), pageable_entries);
  }
}

// Note [gradients first written] (backend/backend.h): nothing zeroes the gradients, so a backward must write every
// element of every gradient. With every gradient buffer poisoned with NaN first, forward_backward gives the
// gradients of clean buffers, bit for bit: with gradients in buffers of their own and in dead activations, and with
// the LM head in three chunks (its first overwrites d(wte), the others add).
TEST(Executor, BackwardWritesEveryGradientWithoutZeroing) {
  for (const bool aliased : {false, true}) {
    for (const int64_t lm_rows : {int64_t(0), int64_t(kBatch) * kCfg.seq / 3}) {
      SCOPED_TRACE(std::string(aliased ? "gradients in activations" : "own buffers") + ", LM chunk rows " +
                   std::to_string(lm_rows));
      ExecSpec spec = make_spec(make_plan("in-core", OptimizerPlacement::kDevice));
      spec.plan.grads_in_activations = aliased;
      spec.lm_chunk_rows = lm_rows;
      auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
      auto ex = std::move(Executor::create(*be, spec)).value();
      ASSERT_TRUE(ex->init_params(1).is_ok());
      feed(*ex, *be);
      const size_t n = static_cast<size_t>(ex->num_params());
      std::vector<float> want(n), got(n, 0.0f);
      ex->forward_backward();
      ASSERT_TRUE(ex->download_grads(want.data()).is_ok());
      ASSERT_TRUE(be->synchronize_all().is_ok());
      std::vector<std::vector<float>> nan;
      for (const Tensor& g : ex->model().tensors().grads) {
        ASSERT_EQ(g.dtype(), DType::kF32);
        nan.emplace_back(static_cast<size_t>(g.numel()), std::numeric_limits<float>::quiet_NaN());
        be->copy_h2d(g, nan.back().data(), be->compute_stream());
      }
      ASSERT_TRUE(be->synchronize_all().is_ok());
      ex->forward_backward();
      ASSERT_TRUE(ex->download_grads(got.data()).is_ok());
      ASSERT_TRUE(be->synchronize_all().is_ok());
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) bad += std::isnan(got[i]) ? 1 : 0;
      EXPECT_EQ(bad, 0u) << "gradient elements left as they were";
      EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0);
    }
  }
}

// Note [bf16 gradients] (exec/executor.h): with the plan's bf16_grads the blocks' gradient segments are bf16 (half the
// bytes), each element the f32 run's rounded once to nearest even (the CPU backend computes it in f32 and rounds), and
// the embeddings' and final norm's segments are the f32 run's bit for bit: GPT-2 (LayerNorm gains and biases, Linear
// biases), a tied Llama with a QKV bias and an untied one, with gradients in buffers of their own and in dead
// activations; the gradient buffers are poisoned with NaN first, so every element is written.
TEST(Executor, Bf16GradientsAreTheF32OnesRoundedOnce) {
  const ModelConfig gpt{.vocab = 61, .layers = 3, .dim = 16, .heads = 2, .seq = 8};
  ModelConfig tied{.family = "llama", .vocab = 61, .layers = 3, .dim = 16, .heads = 4, .seq = 8, .kv_heads = 2,
                   .ffn = 24, .qkv_bias = true};
  ModelConfig untied = tied;
  untied.tied_embeddings = false;
  untied.qkv_bias = false;
  for (const ModelConfig& cfg : {gpt, tied, untied}) {
    for (const bool aliased : {false, true}) {
      SCOPED_TRACE(cfg.describe() + (aliased ? ", gradients in activations" : ", own buffers"));
      Rng rng(11);
      std::vector<int32_t> tokens(static_cast<size_t>(2 * cfg.seq)), targets(tokens.size());
      for (size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(cfg.vocab)));
        targets[i] = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(cfg.vocab)));
      }
      auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
      ExecSpec spec;
      spec.plan = Plan::resolve("in-core", cfg.layers, 2).value();
      spec.plan.grads_in_activations = aliased;
      auto f32 = testing::make_gpt(*be, cfg, 2, DType::kF32, spec);
      ASSERT_TRUE(f32.is_ok()) << f32.status().to_string();
      spec.plan.bf16_grads = true;
      auto b16 = testing::make_gpt(*be, cfg, 2, DType::kF32, spec);
      ASSERT_TRUE(b16.is_ok()) << b16.status().to_string();
      Executor& a = *f32.value();
      Executor& b = *b16.value();
      const std::vector<Tensor>& grads = b.model().tensors().grads;
      for (size_t s = 0; s < grads.size(); ++s) {
        const bool block = s >= 1 && s <= static_cast<size_t>(cfg.layers);
        EXPECT_EQ(grads[s].dtype(), block ? DType::kBF16 : DType::kF32) << "segment " << s;
        EXPECT_EQ(grads[s].nbytes(), static_cast<size_t>(grads[s].numel()) * (block ? 2 : 4)) << "segment " << s;
        std::vector<uint8_t> nan(grads[s].nbytes(), 0xff);  // NaN in f32 and in bf16
        be->copy_h2d(grads[s], nan.data(), be->compute_stream());
        ASSERT_TRUE(be->synchronize_all().is_ok());
      }
      const size_t np = static_cast<size_t>(a.num_params());
      std::vector<float> want(np), got(np);
      for (Executor* e : {&a, &b}) {
        ASSERT_TRUE(e->init_params(5).is_ok());
        be->copy_h2d(e->tokens(), tokens.data(), be->compute_stream());
        be->copy_h2d(e->targets(), targets.data(), be->compute_stream());
        e->forward_backward();
        ASSERT_TRUE(e->download_grads(e == &a ? want.data() : got.data()).is_ok());
      }
      const ParamSegments& segs = b.model().segments();
      size_t rounded = 0, kept = 0, bad = 0;
      for (size_t s = 0; s < grads.size(); ++s) {
        const bool block = s >= 1 && s <= static_cast<size_t>(cfg.layers);
        for (int64_t i = segs.offset[s]; i < segs.offset[s] + segs.size[s]; ++i) {
          const float w = want[static_cast<size_t>(i)], g = got[static_cast<size_t>(i)];
          const float expect = block ? bf16_to_float(float_to_bf16(w)) : w;
          if (std::bit_cast<uint32_t>(g) != std::bit_cast<uint32_t>(expect)) ++bad;
          (g != w ? rounded : kept) += 1;
        }
      }
      EXPECT_EQ(bad, 0u);
      EXPECT_GT(rounded, np / 2) << "most block gradients lose bits in bf16";
      EXPECT_GT(kept, 0u);
    }
  }
}

// Note [bf16 gradients]: the knob grad_dtype's auto (the default) gives bf16 block gradients where the compute is bf16
// and the spec takes them (AdamW on the device, not sharded, gradients not managed, one micro-batch), f32 elsewhere,
// and leaves a JSON plan's named grad_dtype as it is; f32 and bf16 are taken as named (validate refuses bf16 where
// the spec cannot take it).
TEST(Executor, AutoGradDtypeTakesBf16WhereTheSpecCan) {
  const ModelConfig cfg{.family = "llama", .vocab = 61, .layers = 3, .dim = 16, .heads = 4, .seq = 8, .kv_heads = 2,
                        .ffn = 24};
  ExecSpec base;
  base.model = cfg;
  base.compute = DType::kBF16;
  base.plan = Plan::resolve("in-core", cfg.layers, 2).value();
  auto applied = [](ExecSpec s, GradDtype want) {
    apply_grad_dtype(want, s);
    return s;
  };
  EXPECT_TRUE(applied(base, GradDtype::kAuto).plan.bf16_grads);
  EXPECT_TRUE(applied(base, GradDtype::kAuto).validate().is_ok());
  EXPECT_FALSE(applied(base, GradDtype::kF32).plan.bf16_grads);
  struct Case {
    const char* what;  // the refusal's words
    std::function<void(ExecSpec&)> set;
  };
  for (const Case& c : std::vector<Case>{
           {"computing in f32 or bf16", [](ExecSpec& s) { s.compute = DType::kF16; }},
           {"AdamW on the device", [](ExecSpec& s) { s.plan.optimizer = OptimizerPlacement::kCpu; }},
           {"AdamW on the device", [](ExecSpec& s) { s.plan = Plan::resolve("offload-all", 3, 2).value(); }},
           {"not in managed memory", [](ExecSpec& s) { s.plan = Plan::resolve("um", 3, 2).value(); }},
           {"--grad-accum 1", [](ExecSpec& s) {
              s.grad_accum = 2;
              s.plan.grads_in_activations = false;  // (as the trainer sets it with accumulation)
            }},
           {"not sharded", [](ExecSpec& s) {
              s.data_ranks = 2;
              s.batch = 2;
              s.shard_optimizer = true;
            }}}) {
    SCOPED_TRACE(c.what);
    ExecSpec s = base;
    c.set(s);
    ASSERT_NE(s.bf16_grads_refusal(), nullptr);
    EXPECT_NE(std::string(s.bf16_grads_refusal()).find(c.what), std::string::npos) << s.bf16_grads_refusal();
    const ExecSpec a = applied(s, GradDtype::kAuto);
    EXPECT_FALSE(a.plan.bf16_grads);
    const ExecSpec named = applied(s, GradDtype::kBF16);
    EXPECT_TRUE(named.plan.bf16_grads);
    const Status v = named.validate();
    ASSERT_FALSE(v.is_ok());
    EXPECT_NE(v.message().find("--grad-dtype bf16"), std::string::npos) << v.to_string();
  }
  // Several data ranks (not sharded): f32 under auto (DDP averages f32 gradients), bf16 when named.
  ExecSpec ranks = base;
  ranks.data_ranks = 2;
  ranks.batch = 2;
  EXPECT_EQ(ranks.bf16_grads_refusal(), nullptr);
  EXPECT_FALSE(applied(ranks, GradDtype::kAuto).plan.bf16_grads);
  EXPECT_TRUE(applied(ranks, GradDtype::kBF16).validate().is_ok());
  // f32 compute (the CPU backend's): f32 under auto, bf16 when named (the CPU backend rounds its f32 sums).
  ExecSpec f32 = base;
  f32.compute = DType::kF32;
  EXPECT_FALSE(applied(f32, GradDtype::kAuto).plan.bf16_grads);
  EXPECT_TRUE(applied(f32, GradDtype::kBF16).validate().is_ok());
  // A JSON plan that names grad_dtype keeps it under auto, either way; a knob named overrides it.
  for (const bool named_bf16 : {false, true}) {
    auto plan = Plan::from_json(nlohmann::json{{"grad_dtype", named_bf16 ? "bf16" : "f32"}}, cfg.layers, "p.json");
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    ExecSpec s = f32;
    s.plan = plan.value();
    EXPECT_EQ(applied(s, GradDtype::kAuto).plan.bf16_grads, named_bf16);
    s.compute = DType::kBF16;
    EXPECT_EQ(applied(s, GradDtype::kAuto).plan.bf16_grads, named_bf16);
    EXPECT_FALSE(applied(s, GradDtype::kF32).plan.bf16_grads);
    EXPECT_EQ(plan.value().to_json().value("grad_dtype", ""), named_bf16 ? "bf16" : "f32");
  }
}

// Note [gradient accumulation]: three micro-batches accumulated (the first writing every gradient, the others adding,
// each at the loss scale of the whole step) give the gradients of one batch of all three, in f64 to 1e-12 (the sums
// run in another order), for GPT-2, a tied and an untied Llama (whose untied d(wte) is zeroed only by a step's first
// micro-batch), with the LM head in chunks; the gradient buffers are poisoned with NaN before, so every element is
// written. A plan that keeps its gradients in managed memory is refused with grad_accum > 1.
TEST(Executor, AccumulatedMicroBatchesGiveTheGradientsOfOneBatch) {
  const ModelConfig gpt{.vocab = 61, .layers = 2, .dim = 16, .heads = 2, .seq = 8};
  ModelConfig tied{.family = "llama", .vocab = 61, .layers = 2, .dim = 16, .heads = 4, .seq = 8, .kv_heads = 2,
                   .ffn = 24};
  ModelConfig untied = tied;
  untied.tied_embeddings = false;
  for (const ModelConfig& cfg : {gpt, tied, untied}) {
    SCOPED_TRACE(cfg.describe());
    const int micro = 2, n = 3, T = cfg.seq;
    Rng rng(3);
    std::vector<int32_t> tokens(static_cast<size_t>(micro * n * T)), targets(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(cfg.vocab)));
      targets[i] = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(cfg.vocab)));
    }
    auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
    ExecSpec one_spec;
    one_spec.lm_chunk_rows = micro * n * T / 4;
    auto one = testing::make_gpt(*be, cfg, micro * n, DType::kF64, one_spec);
    ASSERT_TRUE(one.is_ok()) << one.status().to_string();
    ExecSpec acc_spec;
    acc_spec.grad_accum = n;
    acc_spec.lm_chunk_rows = micro * T / 2;
    acc_spec.plan = Plan::resolve("in-core", cfg.layers, 2).value();
    acc_spec.plan.grads_in_activations = false;
    auto acc = testing::make_gpt(*be, cfg, micro, DType::kF64, acc_spec);
    ASSERT_TRUE(acc.is_ok()) << acc.status().to_string();
    Executor& a = *one.value();
    Executor& b = *acc.value();
    ASSERT_TRUE(a.init_params(5).is_ok());
    ASSERT_TRUE(b.init_params(5).is_ok());
    be->copy_h2d(a.tokens(), tokens.data(), be->compute_stream());
    be->copy_h2d(a.targets(), targets.data(), be->compute_stream());
    a.forward_backward();
    const size_t np = static_cast<size_t>(a.num_params());
    std::vector<double> want(np), got(np);
    ASSERT_TRUE(a.download_grads(want.data()).is_ok());
    for (const Tensor& g : b.model().tensors().grads) {
      std::vector<double> nan(static_cast<size_t>(g.numel()), std::numeric_limits<double>::quiet_NaN());
      be->copy_h2d(g, nan.data(), be->compute_stream());
      ASSERT_TRUE(be->synchronize_all().is_ok());
    }
    b.model().set_loss_scale(1.0f / static_cast<float>(micro * n * T));  // the whole step's
    for (int k = 0; k < n; ++k) {
      const size_t at = static_cast<size_t>(k * micro * T);
      be->copy_h2d(b.tokens(), tokens.data() + at, be->compute_stream());
      be->copy_h2d(b.targets(), targets.data() + at, be->compute_stream());
      b.accumulate_step(/*first=*/k == 0);
    }
    ASSERT_TRUE(b.download_grads(got.data()).is_ok());
    ASSERT_TRUE(be->synchronize_all().is_ok());
    size_t bad = 0;
    for (size_t i = 0; i < np; ++i)
      if (!(std::abs(got[i] - want[i]) <= 1e-12 + 1e-9 * std::abs(want[i])) && ++bad <= 5)
        ADD_FAILURE() << "gradient " << i << ": accumulated " << got[i] << ", one batch " << want[i];
    EXPECT_EQ(bad, 0u);
  }
  // Managed gradients are not accumulated yet: refused, named; streamed ones (summed on the host) over a data mesh
  // neither.
  auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
  ExecSpec spec = make_spec(make_plan("um-advised", OptimizerPlacement::kCpu));
  spec.grad_accum = 2;
  auto refused = Executor::create(*be, spec);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("accumulating managed gradients"), std::string::npos)
      << refused.status().message();
  ExecSpec dp = make_spec(make_plan("offload-all", OptimizerPlacement::kCpu));
  dp.grad_accum = 2;
  dp.data_ranks = 2;
  EXPECT_NE(dp.validate().message().find("summed there, which is not built with data or tensor parallel"),
            std::string::npos)
      << dp.validate().message();
}

// A forward_backward on each executor (the same model, parameters and batch), then their gradients bit for bit.
void expect_same_gradients(Executor& ex, Backend& be, Executor& apart, Backend& be2) {
  const size_t n = static_cast<size_t>(ex.num_params());
  std::vector<float> g(n), want(n);
  ex.forward_backward();
  apart.forward_backward();
  ASSERT_TRUE(ex.download_grads(g.data()).is_ok());
  ASSERT_TRUE(apart.download_grads(want.data()).is_ok());
  ASSERT_TRUE(be.synchronize_all().is_ok() && be2.synchronize_all().is_ok());
  EXPECT_EQ(std::memcmp(g.data(), want.data(), n * sizeof(float)), 0);
}

// Note [gradients in dead activations]: the gradients of a backward can be read until a forward runs; after it
// (the forward overwrote the activation sets they live in) reading them is refused, and reading them before is
// what keeping them apart gives.
TEST(Executor, GradientsInActivationsAreReadBeforeTheNextForwardOnly) {
  auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
  auto ex = std::move(Executor::create(*be, make_spec(make_plan("in-core", OptimizerPlacement::kDevice)))).value();
  ExecSpec apart_spec = make_spec(make_plan("in-core", OptimizerPlacement::kDevice));
  apart_spec.plan.grads_in_activations = false;
  auto be2 = testing::make_cpu_backend(int64_t(64) << 20, 1);
  auto apart = std::move(Executor::create(*be2, apart_spec)).value();
  ASSERT_LT(ex->allocated().total(Inventory::kDevice), apart->allocated().total(Inventory::kDevice));
  for (auto* e : {ex.get(), apart.get()}) ASSERT_TRUE(e->init_params(1).is_ok());
  feed(*ex, *be);
  feed(*apart, *be2);
  const size_t n = static_cast<size_t>(ex->num_params());
  std::vector<float> g(n), want(n);
  expect_same_gradients(*ex, *be, *apart, *be2);
  ex->forward();
  apart->forward();
  const Status s = ex->download_grads(g.data());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
  EXPECT_NE(s.message().find("grads_in_activations"), std::string::npos) << s.message();
  EXPECT_TRUE(apart->download_grads(want.data()).is_ok());
  // A new backward gives readable gradients again; after a whole step too, until the next forward.
  ex->forward_backward();
  EXPECT_TRUE(ex->download_grads(g.data()).is_ok());
  ex->train_step(1e-3f);
  EXPECT_TRUE(ex->download_grads(g.data()).is_ok());
  ex->forward();
  EXPECT_EQ(ex->download_grads(g.data()).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(be->synchronize_all().is_ok() && be2->synchronize_all().is_ok());
}

// Note [head in gradients] (exec/executor.h): with every block recomputed (no resident set, so no arena) the head's
// tensors still live in blocks' gradient buffers, each inside one, none overlapping; the inventory lacks their
// entries; the gradients are bit for bit those of a run keeping them apart, and a forward after the backward makes
// reading them an error (it overwrote the buffers that hold the head).
TEST(Executor, HeadTensorsLiveInGradientBuffersUntilTheBackward) {
  ExecSpec spec = make_spec(make_plan("recompute", OptimizerPlacement::kDevice));
  spec.lm_chunk_rows = 4;  // a chunk small enough for a block's gradients
  ExecSpec apart_spec = spec;
  apart_spec.plan.grads_in_activations = false;
  EXPECT_TRUE(Executor::head_in_grads(apart_spec).at.empty());
  const HeadInGrads head = Executor::head_in_grads(spec);
  for (const char* name : {"lnf", "lnf_mean", "lnf_rstd", "logits"}) EXPECT_TRUE(head.holds(name)) << name;
  EXPECT_EQ(head.at.size(), 4u);
  const Inventory inv = Executor::inventory(spec).value();
  for (const auto& [name, place] : head.at) EXPECT_EQ(inv.find(name), nullptr) << name;
  EXPECT_EQ(Executor::inventory(apart_spec).value().total(Inventory::kDevice) - inv.total(Inventory::kDevice),
            head.bytes);
  auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
  auto be2 = testing::make_cpu_backend(int64_t(64) << 20, 1);
  auto ex = std::move(Executor::create(*be, spec)).value();
  auto apart = std::move(Executor::create(*be2, apart_spec)).value();
  // Each view inside its block's gradients, and no two overlapping.
  std::vector<std::pair<const char*, const char*>> spans;
  for (const auto& [name, place] : head.at) {
    const Tensor& t = ex->model().tensors().named.at(name);
    const Tensor& g = ex->model().tensors().grads[static_cast<size_t>(place.segment)];
    const char* b = static_cast<const char*>(t.raw());
    const char* gb = static_cast<const char*>(g.raw());
    EXPECT_TRUE(b >= gb && b + t.nbytes() <= gb + g.nbytes()) << name;
    for (const auto& [lo, hi] : spans) EXPECT_TRUE(b + t.nbytes() <= lo || b >= hi) << name;
    spans.push_back({b, b + t.nbytes()});
  }
  for (auto* e : {ex.get(), apart.get()}) ASSERT_TRUE(e->init_params(1).is_ok());
  feed(*ex, *be);
  feed(*apart, *be2);
  std::vector<float> g(static_cast<size_t>(ex->num_params()));
  for (int step = 0; step < 3; ++step) {
    ex->train_step(1e-2f);
    apart->train_step(1e-2f);
  }
  expect_same_gradients(*ex, *be, *apart, *be2);
  ex->forward();
  EXPECT_EQ(ex->download_grads(g.data()).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(be->synchronize_all().is_ok() && be2->synchronize_all().is_ok());
}

// "Two data ranks" whose average is the identity, held until the test opens the gate: each reduction copies its
// segment, waits for the gate in the comm stream's order, and writes the copy back.
class GatedIdentityReducer final : public GradReducer {
 public:
  GatedIdentityReducer(Backend& be, bool open) : be_(be), open_(open) {}
  int ranks() const override { return 2; }
  void reduce(const Tensor& g, Stream& stream) override {
    EXPECT_TRUE(be_.enqueue_on(stream, [this, g] {
      std::vector<char> copy(g.nbytes());
      std::memcpy(copy.data(), g.raw(), g.nbytes());
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return open_; });
      }
      std::memcpy(g.raw(), copy.data(), g.nbytes());
    }));
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void sum(const Tensor&, Stream&) override { ADD_FAILURE() << "sum"; }
  void max(const Tensor&, Stream&) override { ADD_FAILURE() << "max"; }
  void broadcast(const Tensor&, int, Stream&) override { ADD_FAILURE() << "broadcast"; }
  void allgather(const Tensor&, Stream&) override { ADD_FAILURE() << "allgather"; }
  void scatter(const Tensor&, const Tensor&, int, Stream&) override { ADD_FAILURE() << "scatter"; }
  Status status() const override { return Status::ok(); }

 private:
  Backend& be_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_;
};

// Note [gradients in dead activations] with data-parallel ranks: a forward right after forward_backward() waits for
// the averages still running in place on the comm stream (held here until the test opens the gate; a forward that
// finished meanwhile would have written activations into memory those averages then overwrite), and its losses and
// the backward after it match an executor whose gradients have buffers of their own.
TEST(Executor, AForwardAfterADataParallelBackwardWaitsForTheAverages) {
  std::vector<float> losses[2], grads[2];
  for (const bool aliased : {false, true}) {
    ExecSpec spec = make_spec(make_plan("in-core", OptimizerPlacement::kDevice));
    spec.data_ranks = 2;
    spec.plan.grads_in_activations = aliased;
    auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
    auto ex = std::move(Executor::create(*be, spec)).value();
    GatedIdentityReducer reducer(*be, /*open=*/!aliased);
    ex->set_grad_reducer(&reducer);
    ASSERT_TRUE(ex->init_params(5).is_ok());
    feed(*ex, *be);
    ex->forward_backward();
    if (!aliased) {
      ASSERT_TRUE(be->synchronize_all().is_ok());  // the reference: nothing overlaps
    }
    ex->forward();
    if (aliased) {
      auto done = be->create_event();
      be->compute_stream().record(*done);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT_FALSE(done->query()) << "the forward ran while the averages were held";
      reducer.open();
    }
    ex->backward();
    ASSERT_TRUE(be->synchronize_all().is_ok());
    const int k = aliased ? 1 : 0;
    losses[k].resize(static_cast<size_t>(ex->losses().numel()));
    be->copy_d2h(losses[k].data(), ex->losses(), be->compute_stream());
    grads[k].resize(static_cast<size_t>(ex->num_params()));
    ASSERT_TRUE(ex->download_grads(grads[k].data()).is_ok());
    ASSERT_TRUE(be->synchronize_all().is_ok());
  }
  EXPECT_EQ(std::memcmp(losses[0].data(), losses[1].data(), losses[0].size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)), 0);
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
      // Note [host buffers in rings]: a gradient slot's copy waits for the update that last read it; the update
      // waits for its gradients' copy into the slot.
      {"in-core+ring", OptimizerPlacement::kCpu, StreamId::kD2H, "wait cpu optimizer", slow_host},
      {"in-core+ring", OptimizerPlacement::kCpu, StreamId::kHost, "wait grads", slow_link},
      // Note [norm beside the backward]: a segment's part of the norm waits for its backward.
      {"in-core", OptimizerPlacement::kDevice, StreamId::kComm, "wait backward", slow_kernels},
      // Note [optimizer split]: the forward still waits for the segments the host updates.
      {"in-core+split", OptimizerPlacement::kCpu, StreamId::kCompute, "wait cpu optimizer", slow_host},
      {"in-core+ring+split", OptimizerPlacement::kCpu, StreamId::kD2H, "wait cpu optimizer", slow_host},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.plan) + ": " + stream_name(c.stream) + " " + c.wait);
    const ExecSpec spec = make_spec(make_plan(c.plan, c.opt));
    const Result3& want = c.opt == OptimizerPlacement::kCpu ? reference_cpu : reference;
    EXPECT_TRUE(run3(spec, c.delays) == want) << "the full schedule differs from in-core";
    EXPECT_FALSE(run3(spec, c.delays, without(c.stream, c.wait)) == want) << "the wait made no difference";
  }
}


// The executor against a stand-in model: the GPT's tensors and boundaries, kernels of its own with known times (each
// takes the CPU backend's compute delay). The forward of block l writes a value of (block, pass) into every tensor
// the block saves, wherever the executor placed it (its own set, a shared set, a swap slot); the backward of block l
// sums the squares of each into a device scalar; rebuilds write the same value again. A block that reads another
// block's data, or an earlier pass's, shows in its sums, whatever the GPT's arithmetic would have made of it.
class FakeGpt : public Gpt {
 public:
  static constexpr int kEpochs = 3;  // passes are told apart modulo this
  FakeGpt(Backend& be, const ModelConfig& cfg, int batch, DType dt, ModelTensors t, bool skip_a_block = false)
      : Gpt(be, cfg, batch, dt, std::move(t)), be_(be), skip_(skip_a_block) {
    const int64_t n = static_cast<int64_t>(batch) * cfg.seq * 4 * cfg.dim;  // the largest saved tensor
    zero_ = std::move(be.pool().allocate({n}, DType::kF32, TensorClass::kWorkspace, "fake.zero")).value();
    be.fill_zero(zero_, be.compute_stream());
    for (int e = 0; e < kEpochs; ++e)
      for (int l = 0; l < cfg.layers; ++l) {
        Tensor v = std::move(be.pool().allocate({n}, DType::kF32, TensorClass::kWorkspace, "fake.value")).value();
        std::vector<float> host(static_cast<size_t>(n), value(l, e));
        be.copy_h2d(v, host.data(), be.compute_stream());
        EXPECT_TRUE(be.compute_stream().synchronize().is_ok());
        values_.push_back(v);
      }
    sums_ = std::move(be.pool().allocate({cfg.layers * kSaved}, DType::kF32, TensorClass::kWorkspace, "fake.sums"))
                .value();
  }
  ~FakeGpt() override {
    (void)be_.synchronize_all();
    be_.pool().free(sums_);
    for (auto it = values_.rbegin(); it != values_.rend(); ++it) be_.pool().free(*it);
    be_.pool().free(zero_);
  }
  static float value(int l, int e) { return static_cast<float>(1 + l + 16 * e); }

  void forward_blocks(ModelHooks& h) override {
    epoch_ = (epoch_ + 1) % kEpochs;
    be_.fill_zero(sums_, be_.compute_stream());
    const int L = config().layers;
    for (int s = 0; s <= L + 1; ++s) {
      if (skip_ && s == 2) continue;  // a model that leaves a block out
      h.at(Boundary::kBeforeForward, s);
      if (s >= 1 && s <= L) forward_block(h, s - 1);
      h.at(Boundary::kAfterForward, s);
    }
  }
  void lm_head(ModelHooks& h, bool) override {
    h.at(Boundary::kBeforeHead, 0);
    h.at(Boundary::kAfterHead, 0);
  }
  void backward_blocks(ModelHooks& h) override {
    for (int s = config().layers + 1; s >= 0; --s) {
      h.at(Boundary::kBeforeBackward, s);
      if (s >= 1 && s <= config().layers) {
        h.op("fake backward");
        const std::vector<Tensor> saved = block(s - 1);
        for (size_t i = 0; i < saved.size(); ++i)
          be_.sum_squares(sums_.view((s - 1) * kSaved + static_cast<int64_t>(i), {1}), flat(saved[i]));
      }
      h.at(Boundary::kAfterBackward, s);
    }
  }
  void forward_block(ModelHooks& h, int l) override {
    h.op("fake forward");
    for (const Tensor& t : block(l)) write(t, l);
  }
  void rebuild_norms(ModelHooks& h, int l) override {
    h.op("fake rebuild norms");
    const BlockActs& a = acts(l);
    for (const Tensor& t : {a.ln1, a.ln1_mean, a.ln1_rstd, a.ln2, a.ln2_mean, a.ln2_rstd}) write(t, l);
  }
  void rebuild_mlp(ModelHooks& h, int l) override {
    h.op("fake rebuild mlp");
    const BlockActs& a = acts(l);
    for (const Tensor& t : {a.fch, a.fch_gelu}) write(t, l);
  }
  void rebuild_act(ModelHooks& h, int l) override {
    h.op("fake rebuild gelu");
    write(acts(l).fch_gelu, l);
  }

  // After a training pass (synchronised): the blocks whose saved tensors did not hold their own value of this pass.
  std::vector<std::string> wrong_blocks() {
    const int L = config().layers;
    std::vector<float> got(static_cast<size_t>(L * kSaved));
    be_.copy_d2h(got.data(), sums_, be_.compute_stream());
    EXPECT_TRUE(be_.compute_stream().synchronize().is_ok());
    std::vector<std::string> wrong;
    for (int l = 0; l < L; ++l) {
      const std::vector<Tensor> saved = block(l);
      for (size_t i = 0; i < saved.size(); ++i) {
        const double v = value(l, epoch_);
        const double want = static_cast<double>(saved[i].numel()) * v * v;
        if (got[static_cast<size_t>(l) * kSaved + i] != static_cast<float>(want))
          wrong.push_back("h." + std::to_string(l) + "." + std::to_string(i));
      }
    }
    return wrong;
  }

 private:
  static constexpr int kSaved = 13;  // a block's saved tensors and its output
  std::vector<Tensor> block(int l) const {
    const BlockActs& a = acts(l);
    return {a.ln1, a.ln1_mean, a.ln1_rstd, a.qkv, a.atty, a.lse, a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, a.fch, a.fch_gelu, a.res3};
  }
  static Tensor flat(const Tensor& t) { return t.reshape({t.numel()}); }
  void write(const Tensor& t, int l) {
    const Tensor& v = values_[static_cast<size_t>(epoch_ * config().layers + l)];
    be_.residual_forward(flat(t), v.view(0, {t.numel()}), zero_.view(0, {t.numel()}));
  }
  Backend& be_;
  bool skip_;
  int epoch_ = 0;
  Tensor zero_, sums_;
  std::vector<Tensor> values_;  // [epoch][layer]
};

struct FakeRun {
  std::unique_ptr<Backend> be;
  std::unique_ptr<Executor> ex;
  FakeGpt* model = nullptr;
};
FakeRun fake_run(const ExecSpec& spec, Delays d, bool skip_a_block = false) {
  FakeRun r;
  r.be = std::move(cpu::create_backend({.device_budget = int64_t(64) << 20, .threads = 1, .copy_delay_us = d.copy_us,
                                        .compute_delay_us = d.compute_us, .host_delay_us = d.host_us}))
             .value();
  auto ex = Executor::create(*r.be, spec,
                             [&r, skip_a_block](Backend& be, const ModelConfig& c, int b, DType dt, ModelTensors t) {
                               auto m = std::make_unique<FakeGpt>(be, c, b, dt, std::move(t), skip_a_block);
                               r.model = m.get();
                               return m;
                             });
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  r.ex = std::move(ex).value();
  feed(*r.ex, *r.be);
  return r;
}

// Every block reads back exactly what its own forward of this pass wrote, under every plan, after evaluation
// forwards too; and with a wait of the rings removed under the delay that exposes it, some block reads another's
// data or an earlier pass's.
TEST(ExecutorFakeModel, EveryBlockReadsBackItsOwnDataAndEachRingWaitIsNeeded) {
  const Delays slow_kernels{2000, 0, 0}, slow_link{0, 15000, 0};
  for (const char* plan : {"in-core", "in-core-selective", "recompute", "swap-activations",
                           "swap-attention-recompute-mlp-norms", "mixed", "mixed-gelu", "offload-all"}) {
    for (const Delays& d : {slow_kernels, slow_link}) {
      SCOPED_TRACE(std::string(plan) + (d.copy_us > 0 ? ", slow link" : ", slow kernels"));
      FakeRun r = fake_run(make_spec(make_plan(plan, OptimizerPlacement::kCpu)), d);
      for (int step = 0; step < 2; ++step) {
        r.ex->forward();
        r.ex->train_step(1e-3f);
        EXPECT_EQ(r.model->wrong_blocks(), std::vector<std::string>{});
      }
    }
  }
  struct Case {
    StreamId stream;
    const char* wait;
    Delays delays;
  };
  // Note [swap], with 4 swapped blocks in 2 slots.
  const Case cases[] = {{StreamId::kCompute, "wait swap_in", slow_link},
                        {StreamId::kCompute, "wait swap_out", slow_link},
                        {StreamId::kD2H, "wait forward", slow_kernels},
                        {StreamId::kH2D, "wait backward", slow_kernels}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(stream_name(c.stream)) + " " + c.wait);
    FakeRun r = fake_run(make_spec(make_plan("swap-activations")), c.delays);
    Schedule s = r.ex->schedule();
    without(c.stream, c.wait)(s);
    ASSERT_TRUE(r.ex->use_schedule(std::move(s)).is_ok());
    size_t wrong = 0;
    for (int step = 0; step < 2; ++step) {
      r.ex->forward();
      r.ex->train_step(1e-3f);
      wrong += r.model->wrong_blocks().size();
    }
    EXPECT_GT(wrong, 0u) << "the wait made no difference";
  }
}

// A model that does not reach the boundaries the schedule expects stops the run, naming where.
TEST(ExecutorFakeModelDeathTest, AModelOffTheScheduleIsStopped) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        FakeRun r = fake_run(make_spec(make_plan("swap-activations")), {}, /*skip_a_block=*/true);
        r.ex->train_step(1e-3f);
      },
      "where the schedule has");
}

}  // namespace
}  // namespace tt
