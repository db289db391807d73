// Unified Memory placements (issue 20; Note [managed activations] in plan/schedule.cc) on the CPU backend, whose
// managed memory is emulated (Note [emulated managed memory] in backend/cpu/cpu_backend.cc: a discard poisons its
// pages):
// - every managed plan trains bit for bit as in-core, with slow kernels and a slow link;
// - the UM driver receives exactly the schedule's advice, prefetches and discards, in the schedule's order per
//   stream, on the right ranges and streams (a recording driver);
// - a discard issued before the block's backward has read its pages changes the result (the check can fail);
// - the plan JSON of managed placements and advice, and its refusals; the refusal to oversubscribe.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "backend/registry.h"
#include "core/rng.h"
#include "exec/executor.h"

namespace tt {
namespace {

using nlohmann::json;

const ModelConfig kCfg{.vocab = 64, .layers = 5, .dim = 16, .heads = 2, .seq = 8};
constexpr int kBatch = 2;

Plan plan_of(const std::string& name, int slots = 2) {
  if (name == "mixed") {
    // Offloaded, swapped, recomputed, managed and resident blocks in one plan, state partly managed, advice given.
    return Plan::from_json(json::parse(R"({
        "managed": ["grad", "optim_state"],
        "um": {"prefetch": true, "advice": {"grad": {"preferred": "device"},
                                            "activation_offload": {"accessed_by": ["device"]}}},
        "default": {"activation": "managed_offload"},
        "layers": {"1": {"activation": "swap"}, "2": {"activation": "recompute"}, "3": {"activation": "managed"},
                   "4": {"activation": {"attention": "managed_offload", "mlp": "recompute"}}}})"),
                           kCfg.layers, "mixed", slots - 1)
        .value();
  }
  if (name == "cpu-exchange" || name == "cpu-exchange-faults") {
    // Note [managed optimizer exchange]: the CPU optimizer reading managed gradients and writing the managed compute
    // copy, with the schedule's prefetches or (faults) without; activations offloaded through UM as well.
    const bool prefetch = name == "cpu-exchange";
    return Plan::from_json(json::parse(std::string(R"({"optimizer": "cpu", "managed": ["param", "grad"],
        "default": {"activation": "managed_offload"}, "layers": {"2": {"activation": "swap"}},
        "um": {"advice": "default", "prefetch": )") + (prefetch ? "true" : "false") + "}}"),
                           kCfg.layers, name, slots - 1)
        .value();
  }
  if (name == "um-swap-no-discard") {  // the offloaded activations moved to the host when dead, never discarded
    Plan p = Plan::resolve("um-swap-activations", kCfg.layers, slots).value();
    p.um.discard = false;
    return p;
  }
  return Plan::resolve(name, kCfg.layers, slots).value();
}

ExecSpec spec_of(const Plan& plan, bool speculate = false) {
  ExecSpec s;
  s.hyper.speculate = speculate;
  s.model = kCfg;
  s.batch = kBatch;
  s.compute = DType::kF32;
  s.plan = plan;
  s.input_staging_slots = 2;
  return s;
}

std::unique_ptr<Backend> backend(int64_t compute_us = 0, int64_t copy_us = 0, bool record = false,
                                 int64_t host_us = 0) {
  BackendOptions o;
  o.host_delay_us = host_us;
  o.device_budget = int64_t(64) << 20;
  o.threads = 1;
  o.compute_delay_us = compute_us;
  o.copy_delay_us = copy_us;
  o.record_um_calls = record;
  return std::move(create_backend("cpu", o)).value();
}

void feed(Executor& ex, Backend& be, const ModelConfig& cfg = kCfg) {
  Rng rng(11);
  auto batch = std::make_shared<std::vector<int32_t>>(2 * kBatch * cfg.seq);
  for (auto& t : *batch) t = static_cast<int32_t>(rng.uniform_int(cfg.vocab));
  be.copy_h2d(ex.tokens(), batch->data(), be.compute_stream());
  be.copy_h2d(ex.targets(), batch->data() + kBatch * cfg.seq, be.compute_stream());
  ASSERT_TRUE(be.compute_stream().synchronize().is_ok());
  ex.set_input_source([batch](int32_t* host) {
    std::memcpy(host, batch->data(), batch->size() * sizeof(int32_t));
    return -1.0f;  // the default loss scale
  });
  ex.prefetch();
}

struct Bits {
  std::vector<float> params, losses;
  bool operator==(const Bits& o) const {
    return params.size() == o.params.size() && losses.size() == o.losses.size() &&
           std::memcmp(params.data(), o.params.data(), params.size() * sizeof(float)) == 0 &&
           std::memcmp(losses.data(), o.losses.data(), losses.size() * sizeof(float)) == 0;
  }
};

// Three steps, each after an evaluation forward; `edit` may change the schedule first.
Bits run3(const ExecSpec& spec, int64_t compute_us, int64_t copy_us,
          const std::function<void(Schedule&)>& edit = {}, int64_t host_us = 0) {
  auto be = backend(compute_us, copy_us, false, host_us);
  auto ex = std::move(Executor::create(*be, spec)).value();
  EXPECT_TRUE(ex->init_params(3).is_ok());
  feed(*ex, *be, spec.model);
  if (edit) {
    Schedule s = ex->schedule();
    edit(s);
    EXPECT_TRUE(ex->use_schedule(std::move(s)).is_ok());
  }
  for (int step = 1; step <= 3; ++step) {
    ex->forward();
    ex->train_step(1e-2f, /*speculate=*/spec.hyper.speculate);
  }
  Bits r;
  r.params.resize(static_cast<size_t>(ex->num_params()));
  r.losses.resize(static_cast<size_t>(kBatch * spec.model.seq));
  EXPECT_TRUE(ex->download_params(r.params.data()).is_ok());
  be->copy_d2h(r.losses.data(), ex->losses(), be->compute_stream());
  EXPECT_TRUE(be->synchronize_all().is_ok());
  return r;
}

TEST(UmPlans, TrainBitForBitAsInCore) {
  const Bits in_core = run3(spec_of(plan_of("in-core")), 0, 0);
  for (const char* name : {"um", "um-advised", "um-swap-activations", "um-swap-no-discard", "mixed"}) {
    for (int slots : {2, 3}) {
      SCOPED_TRACE(std::string(name) + " slots " + std::to_string(slots));
      const ExecSpec spec = spec_of(plan_of(name, slots));
      EXPECT_TRUE(run3(spec, 200, 300) == in_core);
    }
  }
  // The CPU optimizer beside offloaded activations, and reading managed gradients and writing the managed compute
  // copy (Note [managed optimizer exchange]), with and without prefetches, with and without speculation (a slow host
  // too, so that updates overlap the next forward).
  ExecSpec cpu_in_core = spec_of(plan_of("in-core"));
  cpu_in_core.plan.optimizer = OptimizerPlacement::kCpu;
  const Bits cpu_ref = run3(cpu_in_core, 0, 0);
  ExecSpec cpu_um = spec_of(plan_of("um-swap-activations"));
  cpu_um.plan.optimizer = OptimizerPlacement::kCpu;
  EXPECT_TRUE(run3(cpu_um, 200, 300) == cpu_ref);
  for (const char* name : {"cpu-exchange", "cpu-exchange-faults"}) {
    for (bool speculate : {false, true}) {
      SCOPED_TRACE(std::string(name) + (speculate ? " speculative" : ""));
      EXPECT_TRUE(run3(spec_of(plan_of(name), speculate), 200, 300) == cpu_ref);
    }
  }
}

// Note [managed optimizer exchange]: no host copy of the gradients or of the compute copy, and no copies between
// them: the schedule moves pages instead.
TEST(UmPlans, TheCpuOptimizerExchangesThroughManagedMemoryWithoutCopies) {
  const ExecSpec spec = spec_of(plan_of("cpu-exchange"));
  const Inventory inv = Executor::inventory(spec).value();
  EXPECT_EQ(inv.find("adam.grads"), nullptr);
  EXPECT_EQ(inv.find("params.compute.host"), nullptr);
  EXPECT_EQ(inv.find("params.compute")->where, Inventory::kManaged);
  EXPECT_EQ(inv.find("grads.seg1")->where, Inventory::kManaged);
  const Schedule s = compile_schedule(spec.schedule_spec(), inv);
  ASSERT_TRUE(s.validate().is_ok()) << s.validate().to_string();
  const int S = kCfg.layers + 2;
  std::vector<int> grads_out(S), params_out(S), params_in(S), populates(S);
  for (const Op& op : s.pass(Pass::kTrain)) {
    EXPECT_NE(op.kind, OpKind::kGradsOut) << op.name;
    EXPECT_NE(op.kind, OpKind::kParamsBack) << op.name;
    if (op.segment < 0 || op.entry.empty() || op.entry.starts_with("managed.h.")) continue;
    const size_t k = static_cast<size_t>(op.segment);
    const bool grads = op.entry == "grads.seg" + std::to_string(op.segment);
    EXPECT_TRUE(grads || op.entry == "params.compute") << op.entry;
    if (grads) {
      ++(op.place == 1 ? grads_out : populates)[k];
      // The gradients' populate: dead pages, a discard-and-prefetch (never a plain discard: Note [managed
      // activations]).
      EXPECT_EQ(op.um_dead, op.place == 0) << op.name;
    } else {
      // The compute copy: to the host after its last read, back with its new contents. Dead then (the update
      // rewrites it whole), but released only with "release_params" (off here), and then only in the 2 MiB pieces
      // wholly inside a segment: moved whole (TheComputeCopyIsReleasedAfterItsLastRead releases).
      EXPECT_FALSE(op.um_dead) << op.name;
      EXPECT_EQ(op.um_part, Op::UmPart::kWhole) << op.name;
      ++(op.place == 1 ? params_out : params_in)[k];
    }
  }
  for (int k = 0; k < S; ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(grads_out[k], 1);
    EXPECT_EQ(params_out[k], 1);
    EXPECT_EQ(params_in[k], 1);
    EXPECT_EQ(populates[k], 1);
  }
  // Without prefetches the same orderings, and no UM operation in a step.
  const ExecSpec faults = spec_of(plan_of("cpu-exchange-faults"));
  const Schedule f = compile_schedule(faults.schedule_spec(), Executor::inventory(faults).value());
  for (const Op& op : f.pass(Pass::kTrain)) EXPECT_TRUE(op.entry.empty()) << op.name;
}

// The managed set of a block (its one inventory entry) and of a named entry, as ranges.
struct Ranges {
  std::map<void*, std::string> names;  // start -> entry name
};

TEST(UmPlans, TheDriverGetsExactlyTheSchedulesCalls) {
  for (const char* name : {"um-advised", "um-swap-activations", "um-swap-no-discard", "mixed", "cpu-exchange"}) {
    SCOPED_TRACE(name);
    auto be = backend(0, 0, /*record=*/true);
    auto* rec = dynamic_cast<memory::RecordingUmDriver*>(be->um());
    ASSERT_NE(rec, nullptr);
    const ExecSpec spec = spec_of(plan_of(name, 3));
    auto ex = std::move(Executor::create(*be, spec)).value();
    const Schedule& s = ex->schedule();
    // The managed entries, by their first byte (every entry is one range of the managed pool).
    std::map<const void*, const InventoryEntry*> entry_at;
    const std::vector<memory::UmCall> setup = rec->calls();
    // Set-up: every kUmAdvise and set-up kUmPrefetch, in order, on the entry named, with the plan's advice.
    std::vector<const Op*> want;
    for (const Op& op : s.pass(Pass::kSetup))
      if (op.kind == OpKind::kUmAdvise || op.kind == OpKind::kUmPrefetch) want.push_back(&op);
    ASSERT_EQ(setup.size(), want.size());
    // Every plan here has advice (um-swap-activations: its offloaded blocks are mapped on the device by default, and
    // placed by the forward).
    const bool no_discard = std::string(name) == "um-swap-no-discard";
    EXPECT_FALSE(want.empty());
    std::map<std::string, memory::UmRange> range_of;  // entry name -> range, from the calls
    for (size_t i = 0; i < want.size(); ++i) {
      const Op& op = *want[i];
      const memory::UmCall& c = setup[i];
      SCOPED_TRACE(op.name);
      const InventoryEntry* e = ex->allocated().find(op.name);
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->where, Inventory::kManaged);
      ASSERT_EQ(c.ranges.size(), 1u);
      EXPECT_EQ(c.ranges[0].bytes, e->bytes);
      // Whole 2 MiB pieces of its own: no page shared with another entry.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(c.ranges[0].ptr) % Inventory::kManagedAlignBytes, 0u);
      EXPECT_EQ(e->bytes % Inventory::kManagedAlignBytes, 0u);
      auto [it, fresh] = range_of.emplace(op.name, c.ranges[0]);
      EXPECT_EQ(it->second.ptr, c.ranges[0].ptr);
      if (op.kind == OpKind::kUmAdvise) {
        EXPECT_EQ(c.kind, memory::UmCall::kAdvise);
        const bool offload = e->layer >= 0 && spec.plan.activation(e->layer) == ActPlacement::kManagedOffload;
        EXPECT_TRUE(c.advice == spec.plan.um.advice(e->cls, offload));
        EXPECT_TRUE(c.advice.any());
      } else {
        EXPECT_EQ(c.kind, memory::UmCall::kPrefetch);
        EXPECT_EQ(c.to, memory::UmPlace::kDevice);
        EXPECT_FALSE(e->layer >= 0 && spec.plan.offloaded(e->layer)) << "offloaded blocks are placed by the forward";
      }
    }
    // Every managed entry that has advice got it, and every one not offloaded was placed on the device.
    for (const InventoryEntry& e : ex->allocated().entries()) {
      if (e.where != Inventory::kManaged) continue;
      const bool offloaded = e.layer >= 0 && spec.plan.offloaded(e.layer);
      const bool offload = e.layer >= 0 && spec.plan.activation(e.layer) == ActPlacement::kManagedOffload;
      int advised = 0, placed = 0;
      for (const Op* op : want)
        if (op->name == e.name) (op->kind == OpKind::kUmAdvise ? advised : placed) += 1;
      EXPECT_EQ(advised, spec.plan.um.advice(e.cls, offload).any() ? 1 : 0) << e.name;
      EXPECT_EQ(placed, offloaded ? 0 : 1) << e.name;
    }
    // One training step: the calls per stream equal the train pass's UM operations on that stream, in order.
    feed(*ex, *be);
    rec->clear();
    ex->train_step(1e-3f);
    ASSERT_TRUE(be->synchronize_all().is_ok());
    const std::vector<memory::UmCall> calls = rec->calls();
    int moved = 0;
    size_t matched = 0;
    for (StreamId sid : {StreamId::kCompute, StreamId::kH2D, StreamId::kD2H}) {
      Stream* st = sid == StreamId::kCompute ? &be->compute_stream()
                   : sid == StreamId::kH2D   ? &be->h2d_stream()
                                             : &be->d2h_stream();
      std::vector<const memory::UmCall*> got;
      for (const memory::UmCall& c : calls)
        if (c.stream == st) got.push_back(&c);
      std::vector<const Op*> ops;
      for (const Op& op : s.pass(Pass::kTrain))
        if (op.stream == sid && op.kind == OpKind::kUmPrefetch) ops.push_back(&op);
      SCOPED_TRACE(stream_name(sid));
      size_t next = 0;  // in `got`
      for (size_t i = 0; i < ops.size(); ++i) {
        const Op& op = *ops[i];
        SCOPED_TRACE(op.name);
        ASSERT_FALSE(op.entry.empty());
        memory::UmRange want_range;
        if (op.entry.starts_with("managed.h.")) {
          ASSERT_TRUE(spec.plan.offloaded(op.layer));
          // An offloaded block was never placed at set-up: its range's size is its inventory entry's.
          // (its start is not known from the set-up calls: only the size is checked)
          want_range = {nullptr, ex->allocated().find(op.entry)->bytes};
        } else if (op.entry == "params.compute") {  // one segment of the flat compute copy
          const ParamSegments segs = model_segments(kCfg);
          const auto r = range_of.find(op.entry);
          ASSERT_NE(r, range_of.end());
          want_range = {static_cast<char*>(r->second.ptr) + segs.offset[static_cast<size_t>(op.segment)] * 4,
                        static_cast<size_t>(segs.size[static_cast<size_t>(op.segment)]) * 4};
        } else {
          const auto r = range_of.find(op.entry);
          ASSERT_NE(r, range_of.end());
          want_range = r->second;
        }
        // The call this operation makes: a prefetch of its range, or for dead pages a discard-and-prefetch (these
        // plans leave "release_params" off: the compute copy is moved whole; TheComputeCopyIsReleasedAfterItsLastRead
        // checks the calls of the parts).
        struct Want {
          memory::UmCall::Kind kind;
          std::vector<memory::UmRange> ranges;
        };
        EXPECT_EQ(op.um_part, Op::UmPart::kWhole);
        std::vector<Want> want = {{op.um_dead ? memory::UmCall::kDiscard : memory::UmCall::kPrefetch, {want_range}}};
        for (const Want& w : want) {
          ASSERT_LT(next, got.size());
          const memory::UmCall& c = *got[next++];
          ++matched;
          EXPECT_EQ(c.kind, w.kind);
          EXPECT_EQ(static_cast<int>(c.to), op.place);
          ASSERT_EQ(c.ranges.size(), w.ranges.size());
          for (size_t k = 0; k < c.ranges.size(); ++k) {
            if (w.ranges[k].ptr != nullptr) {
              EXPECT_EQ(c.ranges[k].ptr, w.ranges[k].ptr);
            }
            EXPECT_EQ(c.ranges[k].bytes, w.ranges[k].bytes);
          }
        }
        if (op.um_dead) {
          // Dead pages (a block's activations after its backward and before its forward, gradients after their
          // update) on the h2d stream, which populates and prefetches back (Note [managed activations]); the compute
          // copy's release after a segment's backward on the d2h stream, behind its gradients' move to the host
          // (Note [managed optimizer exchange]).
          EXPECT_EQ(sid, op.entry == "params.compute" ? StreamId::kD2H : StreamId::kH2D);
        } else {
          EXPECT_EQ(sid, op.place == 0 ? StreamId::kH2D : StreamId::kD2H);
        }
        ++moved;
      }
      EXPECT_EQ(next, got.size());
    }
    EXPECT_EQ(matched, calls.size()) << "every call is one of the schedule's";
    // Each offloaded block: populated once, out once unless among the last `slots`, in as often, discarded once
    // (without discards: moved to the host once more instead, and refilled rather than populated).
    const RingLayout rings = ring_layout(spec.plan);
    const char* populate_name = no_discard ? "um_refill" : "um_populate";
    for (int l : rings.um.order) {
      int populate = 0, out = 0, in = 0, discard = 0;
      for (const Op& op : s.pass(Pass::kTrain)) {
        if (op.layer != l || !op.entry.starts_with("managed.h.")) continue;
        populate += op.kind == OpKind::kUmPrefetch && op.name.starts_with(populate_name) ? 1 : 0;
        // A populate moves nothing (priced so: Op::um_dead); a refill moves the pages back.
        if (op.kind == OpKind::kUmPrefetch && op.place == 0) {
          EXPECT_EQ(op.um_dead, op.name.starts_with("um_populate")) << op.name;
        }
        out += op.kind == OpKind::kUmPrefetch && op.place == 1 && !op.um_dead ? 1 : 0;
        in += op.kind == OpKind::kUmPrefetch && op.name.starts_with("um_in") ? 1 : 0;
        const bool release = op.kind == OpKind::kUmPrefetch && op.place == 1 && op.um_dead;
        EXPECT_EQ(release, op.name.starts_with("um_release")) << op.name;
        discard += release ? 1 : 0;
      }
      const bool stays = rings.um.last_in_slot(rings.um.index(l));
      EXPECT_EQ(populate, 1) << l;
      EXPECT_EQ(out, (stays ? 0 : 1) + (no_discard ? 1 : 0)) << l;
      EXPECT_EQ(in, stays ? 0 : 1) << l;
      EXPECT_EQ(discard, no_discard ? 0 : 1) << l;
    }
    if (std::string(name) != "um-advised") {
      EXPECT_GT(moved, 0);
    }
    // An evaluation forward discards every offloaded block after its forward and copies none out (without discards:
    // moves it to the host), so that no more than `slots` of them are on the device after it either.
    for (int l : rings.um.order) {
      int discard = 0, out = 0, populate = 0;
      for (const Op& op : s.pass(Pass::kForward)) {
        if (op.layer != l || !op.entry.starts_with("managed.h.")) continue;
        discard += op.kind == OpKind::kUmPrefetch && op.place == 1 && op.um_dead ? 1 : 0;
        out += op.kind == OpKind::kUmPrefetch && op.place == 1 && !op.um_dead ? 1 : 0;
        populate += op.kind == OpKind::kUmPrefetch && op.place == 0 ? 1 : 0;
      }
      EXPECT_EQ(discard, no_discard ? 0 : 1) << l;
      EXPECT_EQ(out, no_discard ? 1 : 0) << l;
      EXPECT_EQ(populate, 1) << l;
    }
  }
}

// The discard is what the emulation can check: moved before the block's backward (on the compute stream), the block
// reads poisoned pages and the run differs from in-core. (A prefetch moves nothing on the CPU, so removing a wait for one cannot show;
// on a GPU, scripts/gpu.sh runs these plans bit for bit against in-core.)
TEST(UmPlans, ADiscardBeforeTheLastReadChangesTheResult) {
  const Bits in_core = run3(spec_of(plan_of("in-core")), 0, 0);
  const ExecSpec spec = spec_of(plan_of("um-swap-activations", 2));
  EXPECT_TRUE(run3(spec, 0, 0) == in_core);
  const Bits early = run3(spec, 0, 0, [](Schedule& s) {
    for (Pass p : {Pass::kTrain}) {
      std::vector<Op>& ops = s.passes[static_cast<int>(p)];
      int moved = 0;
      for (size_t i = 0; i < ops.size(); ++i) {
        if (!(ops[i].kind == OpKind::kUmPrefetch && ops[i].um_dead && ops[i].name.starts_with("um_release"))) continue;
        // Back to just before the block's backward (the model operation before it).
        size_t j = i;
        while (j > 0 && !(ops[j - 1].kind == OpKind::kModel && ops[j - 1].name == "backward h." + std::to_string(ops[i].layer))) --j;
        ASSERT_GT(j, 0u);
        // On the compute stream, so that it surely runs before the backward reads (on its own h2d stream, moved
        // ahead of its wait for the backward, it would race the backward instead).
        Op d = ops[i];
        d.stream = StreamId::kCompute;
        ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(i));
        ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(j - 1), d);
        ++moved;
      }
      EXPECT_EQ(moved, kCfg.layers);
    }
  });
  EXPECT_FALSE(early == in_core);
}

// Note [managed optimizer exchange]: the gradients are discarded only after the host update read them. Without the
// h2d stream's wait for the update (and with a host that starts each piece of work 100 ms late), the discard poisons
// them first and the run differs.
TEST(UmPlans, TheGradientDiscardWaitsForTheUpdate) {
  ExecSpec in_core = spec_of(plan_of("in-core"));
  in_core.plan.optimizer = OptimizerPlacement::kCpu;
  const Bits ref = run3(in_core, 0, 0);
  const ExecSpec spec = spec_of(plan_of("cpu-exchange"));
  EXPECT_TRUE(run3(spec, 0, 0, {}, 100000) == ref);
  const Bits early = run3(
      spec, 0, 0,
      [](Schedule& s) {
        std::vector<Op>& ops = s.passes[static_cast<int>(Pass::kTrain)];
        size_t removed = 0;
        for (size_t i = 0; i + 1 < ops.size(); ++i)
          if (ops[i].kind == OpKind::kWait && ops[i].stream == StreamId::kH2D &&
              ops[i + 1].kind == OpKind::kUmPrefetch && ops[i + 1].um_dead &&
              !ops[i + 1].entry.starts_with("managed.h.")) {  // the gradients' populate
            ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(i));
            ++removed;
          }
        EXPECT_EQ(removed, static_cast<size_t>(kCfg.layers + 2));
      },
      100000);
  EXPECT_FALSE(early == ref);
}

// The pieces of a segment's bytes that it may release: the whole 2 MiB pieces inside [begin, end).
TEST(UmPlans, InnerPieces) {
  const int64_t piece = static_cast<int64_t>(Inventory::kManagedAlignBytes);
  EXPECT_EQ(inner_pieces(1, 2 * piece + 1), std::make_pair(piece, 2 * piece));
  EXPECT_EQ(inner_pieces(1, 4 * piece + 1), std::make_pair(piece, 4 * piece));
  EXPECT_EQ(inner_pieces(0, piece), std::make_pair(int64_t{0}, piece));
  EXPECT_EQ(inner_pieces(piece, 3 * piece), std::make_pair(piece, 3 * piece));
  // None: lo >= hi.
  for (auto [b, e] : {std::pair<int64_t, int64_t>{1, piece}, {1, piece + 1}, {piece - 1, 2 * piece - 1}, {0, piece - 1}}) {
    const auto [lo, hi] = inner_pieces(b, e);
    EXPECT_GE(lo, hi) << b << " " << e;
  }
}

// Note [managed optimizer exchange]: with "release_params", after a segment's backward the compute copy's pieces
// wholly inside the segment are released (poisoned by the emulation) and its ends moved; without it (the default)
// all of it is moved. Blocks of 7 MiB here (the tests' usual model has segments far smaller than a 2 MiB piece).
// Bit for bit as in-core; the driver gets exactly the parts' ranges, each inside its segment; only train steps
// release (after backward() or forward_backward() a forward may come before the update); the schedule's checks
// refuse a release elsewhere; with the releases moved before the block's backward, the backward reads poison.
TEST(UmPlans, TheComputeCopyIsReleasedAfterItsLastRead) {
  const ModelConfig big{.vocab = 64, .layers = 2, .dim = 384, .heads = 2, .seq = 8};
  ExecSpec in_core = spec_of(plan_of("in-core"));
  in_core.model = big;
  in_core.plan = Plan::resolve("in-core", big.layers, 1).value();
  in_core.plan.optimizer = OptimizerPlacement::kCpu;
  const Bits ref = run3(in_core, 0, 0);
  {
    ExecSpec moved = spec_of(Plan::from_json(json::parse(R"({"optimizer": "cpu", "managed": ["param", "grad"],
                                                             "um": {"advice": "default", "prefetch": true}})"),
                                             big.layers, "exchange", 1)
                                 .value());
    moved.model = big;
    EXPECT_FALSE(moved.plan.um.release_params);
    const Schedule s = compile_schedule(moved.schedule_spec(), Executor::inventory(moved).value());
    for (const Op& op : s.pass(Pass::kTrain))
      if (op.entry == "params.compute") {
        EXPECT_FALSE(op.um_dead) << op.name;
        EXPECT_EQ(op.um_part, Op::UmPart::kWhole) << op.name;
      }
    EXPECT_TRUE(run3(moved, 0, 0) == ref);
  }
  for (bool speculate : {false, true}) {
    SCOPED_TRACE(speculate ? "speculative" : "");
    ExecSpec spec = spec_of(Plan::from_json(json::parse(R"({"optimizer": "cpu", "managed": ["param", "grad"],
                                                            "um": {"advice": "default", "prefetch": true,
                                                                   "release_params": true}})"),
                                            big.layers, "exchange", 1)
                                .value(),
                            speculate);
    spec.model = big;
    EXPECT_TRUE(run3(spec, 100, 100) == ref);
    // Each block's release discards its inner pieces (the block's 7 MiB hold at least two whole ones).
    auto be = backend(0, 0, /*record=*/true);
    auto* rec = dynamic_cast<memory::RecordingUmDriver*>(be->um());
    auto ex = std::move(Executor::create(*be, spec)).value();
    char* cc = nullptr;  // the compute copy's first byte, from its set-up call
    {
      std::vector<const Op*> setup_ops;
      for (const Op& op : ex->schedule().pass(Pass::kSetup))
        if (op.kind == OpKind::kUmAdvise || op.kind == OpKind::kUmPrefetch) setup_ops.push_back(&op);
      const std::vector<memory::UmCall> setup = rec->calls();
      ASSERT_EQ(setup.size(), setup_ops.size());
      for (size_t i = 0; i < setup.size(); ++i)
        if (setup_ops[i]->name == "params.compute") cc = static_cast<char*>(setup[i].ranges[0].ptr);
      ASSERT_NE(cc, nullptr);
    }
    feed(*ex, *be, big);
    rec->clear();
    ex->train_step(1e-3f);
    ASSERT_TRUE(be->synchronize_all().is_ok());
    // The d2h stream's calls on the compute copy are the schedule's operations on it, in order: a release of the
    // inner pieces (one discard-and-prefetch of whole pieces), the ends moved (a prefetch of one or two ranges at the
    // segment's ends), or a segment moved whole; every range inside its segment, to the host.
    {
      const ParamSegments sg = model_segments(big);
      const size_t total = ex->allocated().find("params.compute")->bytes;
      const std::vector<memory::UmCall> calls = rec->calls();  // (a copy)
      std::vector<const memory::UmCall*> got;
      for (const memory::UmCall& c : calls)
        if (c.stream == &be->d2h_stream() && !c.ranges.empty() && static_cast<char*>(c.ranges[0].ptr) >= cc &&
            static_cast<char*>(c.ranges[0].ptr) < cc + total)
          got.push_back(&c);
      std::vector<const Op*> ops;
      for (const Op& op : ex->schedule().pass(Pass::kTrain))
        if (op.stream == StreamId::kD2H && op.kind == OpKind::kUmPrefetch && op.entry == "params.compute")
          ops.push_back(&op);
      ASSERT_EQ(got.size(), ops.size());
      int inner = 0, ends = 0;
      const auto es = static_cast<int64_t>(dtype_size(spec.compute));
      for (size_t i = 0; i < ops.size(); ++i) {
        const Op& op = *ops[i];
        const memory::UmCall& c = *got[i];
        SCOPED_TRACE(op.name + " " + std::to_string(op.segment));
        const char* begin = cc + sg.offset[static_cast<size_t>(op.segment)] * es;
        const char* end = begin + sg.size[static_cast<size_t>(op.segment)] * es;
        EXPECT_EQ(c.kind, op.um_dead ? memory::UmCall::kDiscard : memory::UmCall::kPrefetch);
        EXPECT_EQ(c.to, memory::UmPlace::kHost);
        int64_t sum = 0;
        for (const memory::UmRange& r : c.ranges) {
          EXPECT_GE(static_cast<char*>(r.ptr), begin);
          EXPECT_LE(static_cast<char*>(r.ptr) + r.bytes, end);
          sum += static_cast<int64_t>(r.bytes);
        }
        EXPECT_EQ(sum, op.bytes);
        if (op.um_part == Op::UmPart::kInner) {
          ++inner;
          ASSERT_EQ(c.ranges.size(), 1u);
          EXPECT_EQ(reinterpret_cast<uintptr_t>(c.ranges[0].ptr) % Inventory::kManagedAlignBytes, 0u);
          EXPECT_EQ(c.ranges[0].bytes % Inventory::kManagedAlignBytes, 0u);
        } else if (op.um_part == Op::UmPart::kEnds) {
          ++ends;
          ASSERT_GE(c.ranges.size(), 1u);
          ASSERT_LE(c.ranges.size(), 2u);
          EXPECT_TRUE(static_cast<char*>(c.ranges.front().ptr) == begin ||
                      static_cast<char*>(c.ranges.back().ptr) + c.ranges.back().bytes == end);
        } else {
          ASSERT_EQ(c.ranges.size(), 1u);
          EXPECT_EQ(static_cast<char*>(c.ranges[0].ptr), begin);
          EXPECT_EQ(c.ranges[0].bytes, static_cast<size_t>(end - begin));
        }
      }
      EXPECT_EQ(inner, big.layers);  // the blocks' segments; the embeddings (64 x 384) and the final LayerNorm are
      EXPECT_EQ(ends, big.layers);   // smaller than a piece and moved whole
    }
    // Only a train step releases: after backward() or forward_backward() a forward() may come before the update.
    for (Pass p : {Pass::kForward, Pass::kBackward, Pass::kForwardBackward, Pass::kStep}) {
      int moves = 0;
      for (const Op& op : ex->schedule().pass(p))
        if (op.entry == "params.compute") {
          EXPECT_FALSE(op.um_dead) << pass_name(p) << " " << op.name;
          EXPECT_EQ(op.um_part, Op::UmPart::kWhole) << pass_name(p) << " " << op.name;
          moves += op.place == 1 ? 1 : 0;
        }
      if (p == Pass::kBackward || p == Pass::kForwardBackward) {
        EXPECT_EQ(moves, big.layers + 2) << pass_name(p);
      }
    }
    // The schedule's checks refuse a release anywhere else, of anything but whole pieces, or anywhere but the host.
    {
      const std::vector<Op>& train = ex->schedule().pass(Pass::kTrain);
      size_t r = 0;
      while (r < train.size() && !(train[r].entry == "params.compute" && train[r].um_dead)) ++r;
      ASSERT_LT(r, train.size());
      auto refused = [&](const std::function<void(Schedule&)>& change, const char* why) {
        Schedule m = ex->schedule();
        change(m);
        const Status st = m.validate();
        EXPECT_FALSE(st.is_ok()) << why;
        EXPECT_NE(st.to_string().find(why), std::string::npos) << st.to_string();
      };
      auto train_op = [&](Schedule& m) -> Op& { return m.passes[static_cast<int>(Pass::kTrain)][r]; };
      refused([&](Schedule& m) { train_op(m).um_part = Op::UmPart::kWhole; }, "only in whole pieces");
      refused([&](Schedule& m) { train_op(m).place = 0; }, "only in whole pieces");
      refused([&](Schedule& m) { train_op(m).bytes += 4096; }, "but its part of segment");
      refused([&](Schedule& m) { train_op(m).segment = big.layers + 2; }, "out of range");
      refused([&](Schedule& m) {  // the ends moved in a pass that does not release
        Op ends = train_op(m);
        ends.um_dead = false;
        ends.um_part = Op::UmPart::kEnds;
        m.passes[static_cast<int>(Pass::kBackward)].push_back(ends);
      }, "only in the train pass");
      refused([&](Schedule& m) { m.passes[static_cast<int>(Pass::kForwardBackward)].push_back(train_op(m)); },
              "only in the train pass");
      refused([&](Schedule& m) { train_op(m).segment = 0; }, "holds no whole");  // the embeddings: within a piece
    }
    size_t discarded = 0;
    for (const memory::UmCall& c : rec->calls())
      if (c.kind == memory::UmCall::kDiscard && c.to == memory::UmPlace::kHost) {
        EXPECT_EQ(c.stream, &be->d2h_stream());
        EXPECT_EQ(reinterpret_cast<uintptr_t>(c.ranges[0].ptr) % Inventory::kManagedAlignBytes, 0u);
        EXPECT_EQ(c.ranges[0].bytes % Inventory::kManagedAlignBytes, 0u);
        discarded += c.ranges[0].bytes;
      }
    EXPECT_GE(discarded, 2 * big.layers * Inventory::kManagedAlignBytes);
    // In the schedule: after each segment's backward its release (the whole pieces) and its ends moved add up to
    // the segment; each block's release is at least two pieces.
    const ParamSegments segs = model_segments(big);
    std::vector<int64_t> released(segs.size.size()), ends(segs.size.size());
    for (const Op& op : ex->schedule().pass(Pass::kTrain)) {
      if (op.entry != "params.compute" || op.place != 1) continue;
      EXPECT_EQ(op.um_dead, op.um_part == Op::UmPart::kInner) << op.name;
      (op.um_dead ? released : ends)[static_cast<size_t>(op.segment)] += op.bytes;
    }
    // The parts survive the schedule's JSON (--schedule).
    auto back = Schedule::from_json(json::parse(ex->schedule().to_json().dump()));
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_TRUE(back.value().pass(Pass::kTrain) == ex->schedule().pass(Pass::kTrain));
    for (size_t k = 0; k < segs.size.size(); ++k) {
      SCOPED_TRACE(k);
      EXPECT_EQ(released[k] + ends[k], segs.size[k] * static_cast<int64_t>(dtype_size(spec.compute)));
      if (k >= 1 && k <= static_cast<size_t>(big.layers)) {
        EXPECT_GE(released[k], 2 * static_cast<int64_t>(Inventory::kManagedAlignBytes));
      }
    }
  }
  ExecSpec spec = spec_of(Plan::from_json(json::parse(R"({"optimizer": "cpu", "managed": ["param", "grad"],
                                                          "um": {"advice": "default", "prefetch": true,
                                                                 "release_params": true}})"),
                                          big.layers, "exchange", 1)
                              .value());
  spec.model = big;
  const Bits early = run3(spec, 0, 0, [&](Schedule& s) {
    std::vector<Op>& ops = s.passes[static_cast<int>(Pass::kTrain)];
    int moved = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!(ops[i].kind == OpKind::kUmPrefetch && ops[i].um_dead && ops[i].entry == "params.compute" &&
            ops[i].layer >= 0))
        continue;
      size_t j = i;
      while (j > 0 && !(ops[j - 1].kind == OpKind::kModel &&
                        ops[j - 1].name == "backward h." + std::to_string(ops[i].layer)))
        --j;
      ASSERT_GT(j, 0u);
      Op d = ops[i];
      d.stream = StreamId::kCompute;  // surely before the backward's reads
      ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(i));
      ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(j - 1), d);
      ++moved;
    }
    EXPECT_EQ(moved, big.layers);
  });
  EXPECT_FALSE(early == ref);
}

// "um": {"discard": false}: the schedule discards no activations; the dead pages go to the host on the d2h stream
// (um_evict) and come back as a migration (um_refill, priced at the rate to the device, not a populate's).
TEST(UmPlans, WithoutDiscardsTheDeadPagesGoToTheHost) {
  const Plan p = plan_of("um-swap-no-discard", 3);
  EXPECT_FALSE(p.um.discard);
  const Plan back = Plan::from_json(p.to_json(), kCfg.layers, "back").value();
  EXPECT_FALSE(back.um.discard);
  EXPECT_EQ(back.to_json(), p.to_json());
  EXPECT_FALSE(Plan::from_json(json::parse(R"({"um": {"prefetch": true, "discard": "no"}})"), kCfg.layers, "x").is_ok());
  auto be = backend();
  auto ex = std::move(Executor::create(*be, spec_of(p))).value();
  int evicts = 0, refills = 0;
  for (Pass pass : {Pass::kTrain, Pass::kForward})
    for (const Op& op : ex->schedule().pass(pass)) {
      EXPECT_FALSE(op.um_dead) << op.name;
      if (op.kind != OpKind::kUmPrefetch) continue;
      EXPECT_EQ(op.name.find("populate"), std::string::npos) << op.name;
      if (op.name.starts_with("um_evict")) {
        ++evicts;
        EXPECT_EQ(op.stream, StreamId::kD2H);
        EXPECT_EQ(op.place, static_cast<int>(memory::UmPlace::kHost));
      }
      refills += op.name.starts_with("um_refill");
    }
  EXPECT_EQ(evicts, 2 * kCfg.layers);  // every offloaded block after its backward, and after an evaluation's forward
  EXPECT_EQ(refills, 2 * kCfg.layers);
}

TEST(UmPlans, JsonPlacementsAndAdviceRoundTrip) {
  const Plan p = plan_of("mixed", 3);
  EXPECT_TRUE(p.uses_managed());
  EXPECT_FALSE(p.managed_params);
  EXPECT_TRUE(p.managed_grads && p.managed_optim);
  EXPECT_EQ(p.activation(0), ActPlacement::kManagedOffload);
  EXPECT_EQ(p.activation(3), ActPlacement::kManaged);
  EXPECT_TRUE(p.offloaded(0) && !p.offloaded(3) && !p.offloaded(1));
  EXPECT_TRUE(p.mlp_rebuilt(4));
  EXPECT_EQ(p.um.grad.preferred, memory::UmPlace::kDevice);
  EXPECT_TRUE(p.um.activation_offload.accessed_by_device);
  EXPECT_FALSE(p.um.param.any());
  EXPECT_EQ(p.swap_slots(), 3);
  const Plan back = Plan::from_json(p.to_json(), kCfg.layers, "back").value();
  EXPECT_EQ(back.to_json(), p.to_json());
  EXPECT_TRUE(back.um == p.um);
  // Shortcuts.
  const Plan um = plan_of("um");
  EXPECT_TRUE(um.managed_params && um.managed_grads && um.managed_optim);
  EXPECT_FALSE(um.um.prefetch);
  EXPECT_FALSE(um.um.param.any());
  const Plan adv = plan_of("um-advised");
  EXPECT_TRUE(adv.um.prefetch);
  EXPECT_EQ(adv.um.param.preferred, memory::UmPlace::kDevice);
  EXPECT_FALSE(adv.offloaded(0));
  const Plan sw = plan_of("um-swap-activations");
  EXPECT_FALSE(sw.managed_params);
  EXPECT_TRUE(sw.offloaded(0));
  // "advice": "default" gives the table without prefetching; "prefetch" says so apart.
  const Plan only = Plan::from_json(json::parse(R"({"um": {"advice": "default"}})"), 2, "x").value();
  EXPECT_FALSE(only.um.prefetch);
  EXPECT_EQ(only.um.param.preferred, memory::UmPlace::kDevice);
}

TEST(UmPlans, ReleaseParamsRoundTrips) {
  const Plan p = Plan::from_json(json::parse(R"({"optimizer": "cpu", "managed": ["param", "grad"],
                                                 "um": {"advice": "default", "prefetch": true,
                                                        "release_params": true}})"),
                                 kCfg.layers, "x")
                     .value();
  EXPECT_TRUE(p.um.release_params);
  const Plan back = Plan::from_json(p.to_json(), kCfg.layers, "back").value();
  EXPECT_TRUE(back.um.release_params);
  EXPECT_TRUE(back.um == p.um);
  EXPECT_NE(p.summary().find("released"), std::string::npos) << p.summary();
  // Without any of the CPU optimizer, a managed compute copy, prefetch or discard it takes no effect, and the
  // summary does not claim it.
  for (const char* text : {R"({"managed": ["param", "grad"], "um": {"advice": "default", "prefetch": true,
                                "release_params": true}})",
                           R"({"optimizer": "cpu", "managed": ["grad"], "um": {"advice": "default", "prefetch": true,
                                "release_params": true}})",
                           R"({"optimizer": "cpu", "managed": ["param", "grad"], "um": {"advice": "default",
                                "prefetch": false, "release_params": true}})",
                           R"({"optimizer": "cpu", "managed": ["param", "grad"], "um": {"advice": "default",
                                "prefetch": true, "discard": false, "release_params": true}})"}) {
    const Plan none = Plan::from_json(json::parse(text), kCfg.layers, "x").value();
    EXPECT_TRUE(none.uses_managed()) << text;
    EXPECT_EQ(none.summary().find("released"), std::string::npos) << none.summary();
  }
  const auto yes = Plan::from_json(json::parse(R"({"um": {"release_params": "yes"}})"), kCfg.layers, "x");
  ASSERT_FALSE(yes.is_ok());
  EXPECT_NE(yes.status().to_string().find("release_params: true or false"), std::string::npos);
}

TEST(UmPlans, Refusals) {
  auto bad = [](const char* text) {
    auto r = Plan::from_json(json::parse(text), 2, "bad");
    EXPECT_FALSE(r.is_ok()) << text;
    return r.is_ok() ? std::string() : r.status().to_string();
  };
  EXPECT_NE(bad(R"({"managed": ["activation"]})").find("\"activation\": \"managed\""), std::string::npos);
  EXPECT_NE(bad(R"({"um": {"advice": {"param": {"preferred": "gpu"}}}})").find("preferred"), std::string::npos);
  EXPECT_NE(bad(R"({"um": {"advice": {"weights": {}}}})").find("unknown kind 'weights'"), std::string::npos);
  EXPECT_NE(bad(R"({"um": {"prefetch": 1}})").find("true or false"), std::string::npos);
  EXPECT_NE(bad(R"({"default": {"activation": "managed-offload"}})").find("managed_offload"), std::string::npos);
  // The CPU optimizer keeps its state on the host; streamed and managed at once is a contradiction.
  ExecSpec cpu = spec_of(plan_of("um"));
  cpu.plan.optimizer = OptimizerPlacement::kCpu;
  const Status s = cpu.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.to_string().find("\"optim_state\" cannot be managed"), std::string::npos) << s.to_string();
  ExecSpec both = spec_of(plan_of("offload-params"));
  both.plan.managed_params = true;
  EXPECT_NE(both.validate().to_string().find("choose one"), std::string::npos);
  // The emulated driver refuses more managed memory than the machine has, unless told to allow it.
  auto be = backend();
  const size_t huge = static_cast<size_t>(cpu::physical_memory_bytes()) * 4;
  auto r = be->um()->reserve(huge, /*allow_oversubscription=*/false);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(r.status().to_string().find("--um-allow-oversubscription"), std::string::npos);
  auto ok = be->um()->reserve(huge, /*allow_oversubscription=*/true);  // address space only: nothing is touched
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  be->um()->release(ok.value());
}

// The budget counts the managed pages the plan keeps on the device: all of um's, and of um-swap-activations' only
// swap_slots blocks at once.
TEST(UmPlans, ManagedBytesOnTheDevice) {
  const ExecSpec um = spec_of(plan_of("um-advised"));
  const Inventory inv = Executor::inventory(um).value();
  EXPECT_EQ(Executor::managed_device_bytes(um, inv), inv.total(Inventory::kManaged));
  const ExecSpec sw = spec_of(plan_of("um-swap-activations", 2));
  const Inventory sinv = Executor::inventory(sw).value();
  const int64_t block = static_cast<int64_t>(sinv.find("managed.h.0")->bytes);
  EXPECT_EQ(sinv.total(Inventory::kManaged), block * kCfg.layers);
  EXPECT_EQ(Executor::managed_device_bytes(sw, sinv), block * 2);
  // Without the schedule's prefetches nothing leaves the device on purpose: everything counts.
  ExecSpec nomove = sw;
  nomove.plan.um.prefetch = false;
  EXPECT_EQ(Executor::managed_device_bytes(nomove, Executor::inventory(nomove).value()), block * kCfg.layers);
}

}  // namespace
}  // namespace tt
