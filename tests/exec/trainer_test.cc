// exec/trainer: the invariants of a training run on the CPU backend:
//  - resume is bit-exact: 20 steps straight equal 10 steps, a checkpoint, a new process-like trainer resuming, and
//    10 more (every loss and every final parameter bit);
//  - the same configuration twice gives the same bits (determinism);
//  - a model that does not fit the device budget is refused before anything is allocated, naming bytes needed and
//    available; peak device bytes stay within the budget;
//  - a short version of the main job: on the default corpus the loss falls well below ln(256) = 5.55.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>
#include <vector>

#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "core/units.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "exec/checkpoint.h"
#include "exec/trainer.h"
#include "temp_dir.h"
#include "exec_util.h"

namespace tt {
namespace {

// The device bytes a run of this configuration needs, as the trainer resolves it (its inventory and what the
// backend keeps for itself).
int64_t device_need(const TrainConfig& tc) {
  auto r = resolve_run(tc);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.value().inventory.total(Inventory::kDevice);
}
int64_t device_need_of(const TrainConfig& tc, TensorClass cls) {
  return resolve_run(tc).value().inventory.of(Inventory::kDevice, cls);
}
// The inventory of the model and optimizer alone for a plan (by name or file), f32.
Inventory plan_inventory(const ModelConfig& cfg, int batch, const std::string& plan) {
  ExecSpec spec;
  spec.model = cfg;
  spec.batch = batch;
  spec.plan = Plan::resolve(plan, cfg.layers, 2).value();
  return Executor::inventory(spec).value();
}
// Bytes of a block's activations in the given parts, as the device pool takes them.
size_t block_bytes(const ModelConfig& cfg, int batch, unsigned parts = kPartAll) {
  size_t n = 0;
  for (const TensorRequest& r : model_block_activations(cfg, batch, DType::kF32, parts))
    n += memory::device_alloc_size(static_cast<size_t>(r.shape.numel()) * dtype_size(r.dtype));
  return n;
}

using testing::TempDir;

TrainConfig small_config(const std::string& data) {
  TrainConfig tc;
  tc.model = ModelConfig{.vocab = 256, .layers = 2, .dim = 32, .heads = 2, .seq = 32};
  tc.batch = 4;
  tc.data = data;
  tc.val_fraction = 0.1;
  tc.steps = 20;
  tc.lr = 3e-3f;
  tc.warmup = 5;
  tc.eval_every = 0;
  tc.device_budget = int64_t(64) << 20;
  tc.threads = 2;
  tc.seed = 99;
  tc.backend = "cpu";
  return tc;
}

struct RunResult {
  std::vector<double> losses;
  std::vector<float> params, m, v;
};

RunResult finish(Trainer& t, const std::vector<double>& earlier_losses = {}) {
  RunResult r;
  r.losses = earlier_losses;
  for (const StepRecord& s : t.history()) r.losses.push_back(s.loss);
  const size_t n = static_cast<size_t>(t.model().num_params());
  r.params.resize(n);
  r.m.resize(n);
  r.v.resize(n);
  EXPECT_TRUE(t.executor().download_params(r.params.data()).is_ok());
  Backend& be = t.backend();
  EXPECT_TRUE(t.optimizer().download_state(r.m.data(), r.v.data()).is_ok());
  EXPECT_TRUE(be.compute_stream().synchronize().is_ok());
  return r;
}

void expect_bit_identical(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)), 0)
        << "loss of step " << i + 1 << ": " << a.losses[i] << " vs " << b.losses[i];
  ASSERT_EQ(a.params.size(), b.params.size());
  EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(float)), 0) << "parameters differ";
  EXPECT_EQ(std::memcmp(a.m.data(), b.m.data(), a.m.size() * sizeof(float)), 0) << "Adam m differs";
  EXPECT_EQ(std::memcmp(a.v.data(), b.v.data(), a.v.size() * sizeof(float)), 0) << "Adam v differs";
}

// Runs cfg to --stop-at 10 with checkpoints in ckpt_dir, then resumes from the latest checkpoint in a new trainer to
// the end: the losses of both parts and the final state.
RunResult run_split_at_10(TrainConfig cfg, const std::string& ckpt_dir) {
  TrainConfig first = cfg;
  first.stop_at = 10;
  first.checkpoint_dir = ckpt_dir;
  std::vector<double> first_losses;
  {
    auto t = Trainer::create(first, nullptr);
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    if (!t.is_ok()) return {};
    auto s = t.value()->run();
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_EQ(s->last_step, 10);
    for (const StepRecord& r : t.value()->history()) first_losses.push_back(r.loss);
  }
  TrainConfig second = cfg;
  second.checkpoint_dir = ckpt_dir;
  second.resume = "latest";
  auto t2 = Trainer::create(second, nullptr);
  EXPECT_TRUE(t2.is_ok()) << t2.status().to_string();
  if (!t2.is_ok()) return {};
  EXPECT_EQ(t2.value()->step(), 10);
  auto s2 = t2.value()->run();
  EXPECT_TRUE(s2.is_ok()) << s2.status().to_string();
  EXPECT_EQ(s2->first_step, 11);
  return finish(*t2.value(), first_losses);
}

TEST(Trainer, ResumeIsBitExact) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));

  auto straight = Trainer::create(small_config(data), nullptr);
  ASSERT_TRUE(straight.is_ok()) << straight.status().to_string();
  ASSERT_TRUE(straight.value()->run().is_ok());
  const RunResult a = finish(*straight.value());
  ASSERT_EQ(a.losses.size(), 20u);

  ASSERT_TRUE(access(dir.file("ckpt").c_str(), F_OK) != 0);
  const RunResult b = run_split_at_10(small_config(data), dir.file("ckpt"));
  ASSERT_EQ(access(dir.file("ckpt/step_00000010.ttf").c_str(), R_OK), 0);
  expect_bit_identical(a, b);
}

TEST(Trainer, SameConfigurationSameBits) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(30000));
  TrainConfig tc = small_config(data);
  tc.steps = 6;
  auto t1 = Trainer::create(tc, nullptr);
  auto t2 = Trainer::create(tc, nullptr);
  ASSERT_TRUE(t1.is_ok() && t2.is_ok());
  ASSERT_TRUE(t1.value()->run().is_ok());
  ASSERT_TRUE(t2.value()->run().is_ok());
  expect_bit_identical(finish(*t1.value()), finish(*t2.value()));
  // And a different seed gives different parameters.
  tc.seed = 100;
  auto t3 = Trainer::create(tc, nullptr);
  ASSERT_TRUE(t3.is_ok());
  ASSERT_TRUE(t3.value()->run().is_ok());
  EXPECT_NE(finish(*t1.value()).params, finish(*t3.value()).params);
}

// Note [host one step ahead]: enqueuing step k + 1 before finishing step k gives the same bits as one step at a
// time: losses, parameters, AdamW's state and the checkpoints written on the way; the steps before an evaluation, a
// checkpoint, the first and the last are finished before the next is enqueued, every other one is not.
TEST(Trainer, HostAheadGivesTheSameBits) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(30000));
  RunResult result[2];
  std::vector<double> val_losses[2];
  for (int ahead = 0; ahead < 2; ++ahead) {
    SCOPED_TRACE(ahead ? "host ahead" : "one step at a time");
    TrainConfig tc = small_config(data);
    tc.steps = 8;
    tc.eval_every = 4;
    tc.checkpoint_every = 3;
    tc.checkpoint_dir = dir.file(ahead ? "ahead" : "stepwise");
    tc.host_ahead = ahead == 1;
    // Slow copies and kernels (the CPU backend's streams are threads): the copies that read a staging slot or fill a
    // readback slot are still running when the host gets to the slot, unless it waits for them.
    tc.cpu_copy_delay_us = 20000;
    tc.cpu_compute_delay_us = 100;
    auto t = Trainer::create(tc, nullptr);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    auto s = t.value()->run();
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    // Finished before the next: 1 (first), 3 and 6 (checkpoints), 4 (evaluation), 8 (last); 3, 6 and 8 were
    // enqueued while 2, 5 and 7 ran.
    EXPECT_EQ(s->steps_enqueued_ahead, ahead ? 3 : 0);
    ASSERT_EQ(t.value()->history().size(), 8u);
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(t.value()->history()[i].step, static_cast<int64_t>(i + 1));
    ASSERT_EQ(t.value()->evals().size(), 2u);
    for (const EvalRecord& e : t.value()->evals()) val_losses[ahead].push_back(e.loss);
    result[ahead] = finish(*t.value());
  }
  expect_bit_identical(result[0], result[1]);
  EXPECT_EQ(val_losses[0], val_losses[1]);
  for (const char* ckpt : {"step_00000003.ttf", "step_00000006.ttf", "step_00000008.ttf"}) {
    SCOPED_TRACE(ckpt);
    const std::string a = testing::read_file(dir.file(std::string("stepwise/") + ckpt));
    const std::string b = testing::read_file(dir.file(std::string("ahead/") + ckpt));
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "the checkpoints differ";
  }
}

TEST(Trainer, ModelTooLargeForBudgetIsRefusedUpFront) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(30000));
  TrainConfig tc = small_config(data);
  const struct { int64_t total; } need{device_need(tc)};
  tc.device_budget = need.total - 1;
  auto t = Trainer::create(tc, nullptr);
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kOutOfMemory);
  const std::string msg = t.status().message();
  EXPECT_NE(msg.find("does not fit the device budget"), std::string::npos) << msg;
  EXPECT_NE(msg.find(format_bytes(need.total)), std::string::npos) << msg;
  EXPECT_NE(msg.find(format_bytes(need.total - 1)), std::string::npos) << msg;
  EXPECT_NE(msg.find("--device-budget"), std::string::npos) << msg;
  EXPECT_NE(msg.find("activation"), std::string::npos) << msg;

  // Exactly the need fits, and the pool's peak never passes the budget.
  tc.device_budget = need.total;
  tc.steps = 3;
  tc.eval_every = 1;
  auto ok = Trainer::create(tc, nullptr);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  ASSERT_TRUE(ok.value()->run().is_ok());
  EXPECT_LE(ok.value()->backend().pool().peak_in_use(), static_cast<size_t>(tc.device_budget));
  EXPECT_EQ(static_cast<int64_t>(ok.value()->backend().pool().peak_in_use()), need.total);
}

// DESIGN.md invariant 1 for the first placement: rebuilding activations gives the same bits as keeping them, with
// less device memory; a budget that only the recompute plan fits is refused in-core with a hint, then trains.
TEST(Trainer, RecomputePlanIsBitIdenticalWithLessMemory) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  TrainConfig in_core = small_config(data);
  in_core.model.layers = 3;
  TrainConfig recompute = in_core;
  recompute.plan = "recompute";
  const struct { int64_t total; } need_re{device_need(recompute)};
  EXPECT_LT(device_need_of(recompute, TensorClass::kActivation), device_need_of(in_core, TensorClass::kActivation) / 2)
      << "3 blocks kept vs 1 block + 3 outputs";

  auto a = Trainer::create(in_core, nullptr);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(a.value()->run().is_ok());
  recompute.device_budget = need_re.total;  // exactly what it needs: in-core cannot fit
  auto b = Trainer::create(recompute, nullptr);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  ASSERT_TRUE(b.value()->run().is_ok());
  expect_bit_identical(finish(*a.value()), finish(*b.value()));
  EXPECT_LE(b.value()->backend().pool().peak_in_use(), static_cast<size_t>(need_re.total));
  EXPECT_LT(b.value()->backend().pool().peak_in_use(), a.value()->backend().pool().peak_in_use());

  TrainConfig too_small = in_core;
  too_small.device_budget = need_re.total;
  auto refused = Trainer::create(too_small, nullptr);
  ASSERT_FALSE(refused.is_ok());
  // The message names the plans that would fit, with their needs.
  EXPECT_NE(refused.status().message().find("--plan recompute needs " + format_bytes(need_re.total) + " (fits)"),
            std::string::npos)
      << refused.status().message();

  // And it resumes bit for bit.
  expect_bit_identical(finish(*b.value()), run_split_at_10(recompute, dir.file("ckpt")));
}

// Note [automatic attention workspace]: the larger automatic workspace is kept unless only the 512 MiB floor lets the
// run (its need plus the automatic budget's 5%) fit the free memory.
TEST(Trainer, AutomaticAttentionWorkspaceFallsBackToTheFloorOnlyWhereThatFits) {
  const int64_t gib = int64_t(1) << 30, mib = int64_t(1) << 20;
  const int64_t big = 2200 * mib, floor = 640 * mib;  // backend reserves with the automatic cap and with the floor
  EXPECT_TRUE(keep_automatic_workspace(80 * gib, big, floor, 130 * gib));    // plenty of room: the larger one
  EXPECT_FALSE(keep_automatic_workspace(120 * gib, big, floor, 128 * gib));  // 122.1 * 1.05 > 128, 120.6 * 1.05 fits
  EXPECT_TRUE(keep_automatic_workspace(125 * gib, big, floor, 128 * gib));   // neither fits: the plan's error says so
}

TEST(Trainer, AutomaticCpuBudgetRefusesAModelLargerThanHalfTheMemory) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(30000));
  TrainConfig tc = small_config(data);
  tc.device_budget = 0;  // automatic: half the RAM
  tc.model = ModelConfig{.vocab = 256, .layers = 64, .dim = 8192, .heads = 64, .seq = 32};  // ~51.5G parameters
  auto t = Trainer::create(tc, nullptr);
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(t.status().message().find("does not fit the device budget"), std::string::npos) << t.status().message();
}

// Swapping block activations to host memory and back through a few device slots gives the same bits as keeping
// them, with less device memory, for several depth/slot combinations (slots that divide the depth, that do not, and
// more slots than blocks).
TEST(Trainer, SwapPlanIsBitIdenticalWithLessMemory) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  for (auto [layers, slots] : {std::pair{3, 2}, std::pair{4, 2}, std::pair{5, 3}, std::pair{2, 3}}) {
    TrainConfig in_core = small_config(data);
    in_core.model.layers = layers;
    in_core.steps = 8;
    in_core.eval_every = 3;  // forward-only passes between training steps
    TrainConfig swap = in_core;
    swap.plan = "swap-activations";
    swap.swap_slots = slots;
    // A slow link (5 ms per copy): a compute that did not wait for a swap-in, or a forward that overwrote a slot
    // still being copied out, would read or clobber stale data and differ.
    swap.cpu_copy_delay_us = 5000;
    auto a = Trainer::create(in_core, nullptr);
    auto b = Trainer::create(swap, nullptr);
    ASSERT_TRUE(a.is_ok() && b.is_ok()) << b.status().to_string();
    ASSERT_TRUE(a.value()->run().is_ok());
    ASSERT_TRUE(b.value()->run().is_ok());
    SCOPED_TRACE("layers " + std::to_string(layers) + ", slots " + std::to_string(slots));
    expect_bit_identical(finish(*a.value()), finish(*b.value()));
    ASSERT_EQ(a.value()->evals().size(), b.value()->evals().size());
    for (size_t i = 0; i < a.value()->evals().size(); ++i)
      EXPECT_EQ(a.value()->evals()[i].loss, b.value()->evals()[i].loss);
    if (slots < layers) {
      EXPECT_LT(b.value()->backend().pool().peak_in_use(), a.value()->backend().pool().peak_in_use());
    }
    // Host memory for every swapped block but the last `slots` (which stay in their slots).
    const size_t swap_host =
        static_cast<size_t>(resolve_run(swap).value().inventory.of(Inventory::kHost, TensorClass::kActivation));
    EXPECT_EQ(swap_host, static_cast<size_t>(std::max(0, layers - slots)) *
                             ((block_bytes(swap.model, swap.batch) + 255) / 256 * 256));
    EXPECT_GE(b.value()->backend().host_pool().peak_in_use(), swap_host);
  }
}

// A JSON plan mixing swap, recompute and resident blocks per layer gives the same bits as in-core, through
// evaluations and a resume, under a slow simulated link; it needs less device memory; and a budget below what it
// needs is refused before step 1, naming the bytes and the plan.
TEST(Trainer, MixedJsonPlanIsBitIdentical) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  const char* plans[] = {
      R"({"layers": [{"activation": "swap"}, {"activation": "recompute"}, {"activation": "resident"},
                     {"activation": "swap"}, {"activation": "recompute"}, {"activation": "swap"}]})",
      R"({"default": {"activation": "swap"}, "layers": {"0": {"activation": "recompute"}}, "swap_prefetch": 2})",
      R"({"default": {"activation": "recompute"}, "layers": {"2-4": {"activation": "swap"}}})",
      // Note [MLP half]: the attention half swapped or resident, the MLP half recomputed; mixed with whole blocks.
      R"({"default": {"activation": {"attention": "swap", "mlp": "recompute"}}})",
      R"({"layers": [{"activation": {"attention": "resident", "mlp": "recompute"}}, {"activation": "recompute"},
                     {"activation": {"attention": "swap", "mlp": "recompute"}}, {"activation": "resident"},
                     {"activation": {"attention": "swap", "mlp": "recompute"}},
                     {"activation": {"attention": "swap", "mlp": "recompute"}}]})",
      // Note [rebuilt norms]: the LayerNorm outputs rebuilt too, with swapped and resident attention halves, with and
      // without the MLP half, mixed with whole blocks.
      R"({"default": {"activation": {"attention": "swap", "mlp": "recompute", "norms": "recompute"}}})",
      R"({"layers": [{"activation": {"attention": "resident", "mlp": "resident", "norms": "recompute"}},
                     {"activation": "recompute"},
                     {"activation": {"attention": "swap", "mlp": "recompute", "norms": "recompute"}},
                     {"activation": {"attention": "resident", "mlp": "recompute", "norms": "recompute"}},
                     {"activation": {"attention": "swap", "mlp": "recompute", "norms": "recompute"}},
                     {"activation": {"attention": "swap", "mlp": "recompute", "norms": "recompute"}}]})",
      // Note [rebuilt activation]: only the GELU output rebuilt (its forward runs the GELU apart: on the CPU backend the
      // fused op's arithmetic), alone and with the norms, on resident and swapped blocks, mixed with the others; the
      // last block to run its forward keeps its GELU output (no rebuild), the others rebuild it.
      R"({"default": {"activation": {"attention": "resident", "mlp": "resident", "norms": "recompute",
                                     "gelu": "recompute"}}})",
      R"({"layers": [{"activation": {"attention": "swap", "mlp": "swap", "gelu": "recompute"}},
                     {"activation": {"attention": "resident", "mlp": "resident", "gelu": "recompute"}},
                     {"activation": "recompute"},
                     {"activation": {"attention": "swap", "mlp": "swap", "gelu": "recompute"}},
                     {"activation": {"attention": "resident", "mlp": "recompute"}},
                     {"activation": {"attention": "swap", "mlp": "swap", "gelu": "recompute"}}]})",
  };
  for (const char* plan : plans) {
    SCOPED_TRACE(plan);
    TrainConfig in_core = small_config(data);
    in_core.model.layers = 6;
    in_core.steps = 8;
    in_core.eval_every = 3;
    TrainConfig mixed = in_core;
    mixed.plan = dir.write("plan.json", plan);
    mixed.cpu_copy_delay_us = 3000;
    auto a = Trainer::create(in_core, nullptr);
    auto b = Trainer::create(mixed, nullptr);
    ASSERT_TRUE(a.is_ok() && b.is_ok()) << b.status().to_string();
    ASSERT_TRUE(a.value()->run().is_ok());
    ASSERT_TRUE(b.value()->run().is_ok());
    const RunResult ra = finish(*a.value());
    expect_bit_identical(ra, finish(*b.value()));
    ASSERT_EQ(a.value()->evals().size(), b.value()->evals().size());
    for (size_t i = 0; i < a.value()->evals().size(); ++i)
      EXPECT_EQ(a.value()->evals()[i].loss, b.value()->evals()[i].loss);
    EXPECT_LT(b.value()->backend().pool().peak_in_use(), a.value()->backend().pool().peak_in_use());
    // Split at step 10 with a checkpoint: the same as straight through.
    TrainConfig longer = mixed;
    longer.steps = 20;
    longer.eval_every = 0;
    auto straight = Trainer::create(longer, nullptr);
    ASSERT_TRUE(straight.is_ok());
    ASSERT_TRUE(straight.value()->run().is_ok());
    expect_bit_identical(finish(*straight.value()), run_split_at_10(longer, dir.file("ckpt")));
    // Refused up front below its need, with the bytes and the plan in the message.
    const struct { int64_t total; } need{device_need(mixed)};
    TrainConfig tight = mixed;
    tight.device_budget = need.total - 1;
    auto refused = Trainer::create(tight, nullptr);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kOutOfMemory);
    EXPECT_NE(refused.status().message().find(format_bytes(need.total)), std::string::npos)
        << refused.status().message();
    EXPECT_NE(refused.status().message().find("plan.json: activations"), std::string::npos)
        << refused.status().message();
  }
}

// Note [gradients in dead activations]: keeping blocks' gradients among the activation sets of later blocks once
// those are dead, and the head's tensors in gradient buffers before their backward, changes no bit (losses,
// evaluations, parameters, Adam's moments, a resume) and saves exactly the bytes the arena and the head say; recomputed and swapped blocks have no set there, and the CPU optimizer keeps every gradient
// apart. At batch 1 and T 8 a block's gradients are larger than its activations and spread over several sets.
TEST(Trainer, GradientsInDeadActivationsChangeNoBit) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  // Swapped blocks 0, 4 and 6 in two slots (block 0 copied out and back), blocks 3 and 5 recomputed, blocks 1, 2 and 7
  // resident: the gradients of blocks 0 to 6 (smaller than a set here) among those three sets; a slow simulated link
  // and slow kernels.
  const std::string mix = dir.write("mix.json", R"({"layers": [{"activation": "swap"}, {"activation": "resident"},
      {"activation": "resident"}, {"activation": "recompute"}, {"activation": "swap"}, {"activation": "recompute"},
      {"activation": "swap"}, {"activation": "resident"}]})");
  const struct {
    std::string plan;
    int aliased;  // segments kept among the sets
    int batch = 4, seq = 32;
    bool llama = false;  // a Llama with an untied head: the embedding's gradients among the sets too
    // The head's tensors in blocks' gradient buffers (Note [head in gradients] in exec/executor.h): the final norm's
    // output and statistics (GPT-2's three, Llama's two) where they fit, the logits too at batch 1.
    size_t head = 3;
  } cases[] = {{"in-core", 7},           {"in-core-selective", 7},    {mix, 7}, {"offload-params", 0, 4, 32, false, 0},
               {"in-core", 3, 1, 8, false, 4}, {"in-core", 7, 4, 32, true, 2}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.plan + " batch " + std::to_string(c.batch) + (c.llama ? " llama" : ""));
    TrainConfig on = small_config(data);
    if (c.llama)
      on.model = ModelConfig{.family = "llama", .vocab = 256, .layers = 8, .dim = 32, .heads = 4, .seq = 32,
                             .kv_heads = 2, .ffn = 48, .tied_embeddings = false, .rope_theta = 10000};
    on.model.layers = 8;
    on.batch = c.batch;
    on.model.seq = c.seq;
    on.steps = 12;
    on.eval_every = 4;
    on.plan = c.plan;
    on.cpu_copy_delay_us = 1000;
    on.cpu_compute_delay_us = 50;
    TrainConfig off = on;
    off.grads_in_activations = false;
    // The bytes saved: what the arena's sets and segments apart would take beyond it.
    const Plan plan = Plan::resolve(c.plan, on.model.layers, on.swap_slots).value();
    const ActivationArena arena = activation_arena(plan, on.model, on.batch, DType::kF32);
    const int aliased = arena.blocks_with_grads();
    const int64_t bytes = arena.saved_bytes;
    EXPECT_EQ(arena.holds_embedding_grads(), c.llama);
    if (c.batch == 1) {  // block 0's gradients reach past block 1's set
      const int64_t g = static_cast<int64_t>(device_alloc_bytes({model_segments(on.model).size[1]}, DType::kF32));
      EXPECT_GT(arena.grads_at[0] + g, arena.set_at[2]);
    }
    EXPECT_EQ(aliased, c.aliased);
    // Note [head in gradients] (exec/executor.h): the head's tensors in blocks' gradient buffers, where they fit.
    const HeadInGrads head = Executor::head_in_grads(resolve_run(on).value().exec);
    EXPECT_EQ(head.at.size(), c.head);
    EXPECT_EQ(head.holds("logits"), c.head == 4);
    EXPECT_EQ(device_need(off) - device_need(on), bytes + head.bytes);
    auto a = Trainer::create(off, nullptr);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    ASSERT_TRUE(a.value()->run().is_ok());
    auto b = Trainer::create(on, nullptr);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    ASSERT_TRUE(b.value()->run().is_ok());
    expect_bit_identical(finish(*a.value()), finish(*b.value()));
    ASSERT_EQ(a.value()->evals().size(), b.value()->evals().size());
    for (size_t i = 0; i < a.value()->evals().size(); ++i)
      EXPECT_EQ(a.value()->evals()[i].loss, b.value()->evals()[i].loss);
    if (c.aliased > 0) {
      EXPECT_LT(b.value()->backend().pool().peak_in_use(), a.value()->backend().pool().peak_in_use());
    }
  }
  // And a run with them resumed from a checkpoint gives the bits of a whole run without them.
  TrainConfig on = small_config(data);
  on.model.layers = 5;
  TrainConfig off = on;
  off.grads_in_activations = false;
  auto whole = Trainer::create(off, nullptr);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  ASSERT_TRUE(whole.value()->run().is_ok());
  expect_bit_identical(finish(*whole.value()), run_split_at_10(on, dir.file("ckpt")));
}

// The CPU optimizer (moments and fp32 master in host memory, AdamW on the host stream) gives the same bits as the
// device optimizer, alone and with swapped activations, through evaluations and a resume, under a slow simulated
// link; its state leaves the device, and the host pool holds it.
TEST(Trainer, CpuOptimizerIsBitIdentical) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  // Gradients streamed to the host for every block, or for some with swapped activations.
  const std::string streamed_all =
      dir.write("grads_all.json", R"({"optimizer": "cpu", "default": {"grad": "host_streamed"}})");
  const std::string streamed_mix = dir.write(
      "grads_mix.json", R"({"optimizer": "cpu", "default": {"activation": "swap"},
                            "layers": {"1": {"grad": "host_streamed"}, "3": {"grad": "host_streamed"},
                                       "2": {"grad": "host_streamed", "activation": "recompute"}}})");
  // Parameters streamed (Note [streamed parameters]): every block (the shortcuts), or some, mixed with recompute,
  // swap and resident gradients, with three slots.
  const std::string params_mix = dir.write(
      "params_mix.json", R"({"optimizer": "cpu", "param_prefetch": 2,
                             "layers": {"0": {"param": "host_streamed", "activation": "recompute"},
                                        "1": {"param": "host_streamed", "grad": "host_streamed"},
                                        "2": {"activation": "swap"},
                                        "3": {"param": "host_streamed", "activation": "swap"}}})");
  for (const std::string& plan : {std::string("in-core"), std::string("swap-activations"), streamed_all, streamed_mix,
                                  std::string("offload-params"), std::string("offload-all"), params_mix}) {
    SCOPED_TRACE(plan);
    TrainConfig device = small_config(data);
    device.model.layers = 4;
    device.steps = 8;
    device.eval_every = 3;
    // Every gradient in a buffer of its own (class kGrad), as the streamed gradients' memory is compared with it.
    device.grads_in_activations = false;
    TrainConfig cpu = device;
    cpu.plan = plan;
    cpu.optimizer = OptimizerPlacement::kCpu;
    // A slow link, slow kernels and a slower host update: a copy that does not wait for what it must (a slot's
    // previous contents used, a segment updated) lands at the wrong time and changes the result.
    cpu.cpu_copy_delay_us = 3000;
    cpu.cpu_compute_delay_us = 100;
    cpu.cpu_host_delay_us = 5000;
    auto a = Trainer::create(device, nullptr);
    auto b = Trainer::create(cpu, nullptr);
    ASSERT_TRUE(a.is_ok() && b.is_ok()) << b.status().to_string();
    ASSERT_TRUE(b.value()->optimizer().on_cpu());
    ASSERT_TRUE(a.value()->run().is_ok());
    ASSERT_TRUE(b.value()->run().is_ok());
    expect_bit_identical(finish(*a.value()), finish(*b.value()));
    ASSERT_EQ(a.value()->evals().size(), b.value()->evals().size());
    for (size_t i = 0; i < a.value()->evals().size(); ++i)
      EXPECT_EQ(a.value()->evals()[i].loss, b.value()->evals()[i].loss);
    const auto& dev = b.value()->backend().stats();
    EXPECT_EQ(dev.of(memory::Tier::kDevice, TensorClass::kOptimState).peak, 0);
    EXPECT_GT(a.value()->backend().stats().of(memory::Tier::kDevice, TensorClass::kOptimState).peak, 0);
    // The moments, gradients and norm, and the model's f32 master (Note [master on host]).
    const int64_t P = model_num_params(b.value()->model().config());
    EXPECT_TRUE(b.value()->optimizer().on_cpu());
    // The host gradients, the norm and the master (f32: the copies send it) in the pinned pool, m and v in the
    // pageable one (Note [pinned and pageable host memory]).
    EXPECT_GE(b.value()->backend().host_pool().peak_in_use(),
              memory::host_alloc_size(static_cast<size_t>(P) * 4) + memory::host_alloc_size(4) +
                  memory::host_alloc_size(static_cast<size_t>(P) * 4) - memory::kHostAlignBytes);
    EXPECT_EQ(b.value()->backend().pageable_pool().peak_in_use(), 2 * memory::host_alloc_size(static_cast<size_t>(P) * 4));
    // Split at step 10 with a checkpoint: the same as straight through.
    TrainConfig longer = cpu;
    longer.steps = 20;
    longer.eval_every = 0;
    auto straight = Trainer::create(longer, nullptr);
    ASSERT_TRUE(straight.is_ok());
    ASSERT_TRUE(straight.value()->run().is_ok());
    expect_bit_identical(finish(*straight.value()),
                         run_split_at_10(longer, dir.file("ckpt-" + std::to_string(plan.size()))));
    if (plan == streamed_all) {
      // Four blocks' gradients in two slots: less device memory for gradients than the device optimizer's run.
      EXPECT_LT(dev.of(memory::Tier::kDevice, TensorClass::kGrad).peak,
                a.value()->backend().stats().of(memory::Tier::kDevice, TensorClass::kGrad).peak);
    }
    if (plan == "offload-params") {
      // Four blocks' parameters in two slots: the device holds the embeddings, the final LayerNorm and two blocks.
      const ModelConfig& m = b.value()->model().config();
      const int64_t block = 12LL * m.dim * m.dim + 13LL * m.dim;
      EXPECT_LT(dev.of(memory::Tier::kDevice, TensorClass::kParam).peak,
                a.value()->backend().stats().of(memory::Tier::kDevice, TensorClass::kParam).peak -
                    static_cast<int64_t>(sizeof(float)) * block);
    }
  }
  // Streamed state without the CPU optimizer is refused up front.
  for (const char* placement : {R"({"default": {"grad": "host_streamed"}})", R"({"default": {"param": "host_streamed"}})",
                                R"({"default": {"optim_state": "host_streamed"}})"}) {
    TrainConfig bad = small_config(data);
    bad.plan = dir.write("bad.json", placement);
    auto refused = Trainer::create(bad, nullptr);
    ASSERT_FALSE(refused.is_ok()) << placement;
    EXPECT_NE(refused.status().message().find("needs the CPU optimizer"), std::string::npos)
        << refused.status().message();
  }
  TrainConfig forced = small_config(data);
  forced.plan = "offload-params";
  forced.optimizer = OptimizerPlacement::kDevice;
  EXPECT_FALSE(Trainer::create(forced, nullptr).is_ok());
}

// Each plan run of `base` (with the CPU optimizer where `cpu`, speculating where `speculate`; with slow_cpu under
// slow kernels, a slow link and a slower host) gives in-core's bits `ra` and its evaluations `a`'s; then `base` run
// for 20 steps straight and split at step 10 over a checkpoint in `ckpt` give the same bits.
struct PlanRun {
  std::string plan;
  bool cpu, speculate;
};
void expect_every_plan_matches(const TrainConfig& base, const Trainer& a, const RunResult& ra,
                               const std::vector<PlanRun>& runs, bool slow_cpu, const std::string& ckpt) {
  for (const PlanRun& r : runs) {
    SCOPED_TRACE(r.plan + (r.cpu ? " cpu" : "") + (r.speculate ? " speculative" : ""));
    TrainConfig tc = base;
    tc.plan = r.plan;
    if (r.cpu) {
      tc.optimizer = OptimizerPlacement::kCpu;
      tc.speculative_update = r.speculate;
      if (slow_cpu) {
        tc.cpu_copy_delay_us = 2000;
        tc.cpu_compute_delay_us = 100;
        tc.cpu_host_delay_us = 3000;
      }
    }
    auto b = Trainer::create(tc, nullptr);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    ASSERT_TRUE(b.value()->run().is_ok());
    expect_bit_identical(ra, finish(*b.value()));
    ASSERT_EQ(a.evals().size(), b.value()->evals().size());
    for (size_t i = 0; i < a.evals().size(); ++i) EXPECT_EQ(a.evals()[i].loss, b.value()->evals()[i].loss);
  }
  TrainConfig longer = base;
  longer.steps = 20;
  longer.eval_every = 0;
  auto straight = Trainer::create(longer, nullptr);
  ASSERT_TRUE(straight.is_ok());
  ASSERT_TRUE(straight.value()->run().is_ok());
  expect_bit_identical(finish(*straight.value()), run_split_at_10(longer, ckpt));
}

// Note [checkpoints without copies] (exec/checkpoint.h): with the CPU optimizer (its host buffers whole or as rings)
// the checkpoint is written straight from the host master and moments (the gathered state points at them, no copy)
// and read straight back: a run split by a checkpoint resumes bit for bit; the file is the device optimizer's too
// (the second half with AdamW on the device continues the device run's bits), and --init-from reads it into the host
// master as into the device's.
// A trainer of cfg run to its end (the test fails where it cannot be created or run), and its result.
RunResult run_through(const TrainConfig& cfg) {
  auto t = Trainer::create(cfg, nullptr);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (!t.is_ok()) return {};
  EXPECT_TRUE(t.value()->run().is_ok());
  return finish(*t.value());
}

TEST(Trainer, CpuOptimizerCheckpointsFromItsHostStateAndResumesBitExact) {
  TempDir dir;
  TrainConfig device = small_config(dir.write("corpus.txt", testing::synthetic_text(60000)));
  device.steps = 20;
  device.eval_every = 0;
  const RunResult want = run_through(device);
  for (const char* buffers : {"whole", "ring"}) {
    SCOPED_TRACE(buffers);
    TrainConfig cpu = device;
    cpu.optimizer = OptimizerPlacement::kCpu;
    cpu.host_buffers = buffers;
    auto t = Trainer::create(cpu, nullptr);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    ASSERT_TRUE(t.value()->run().is_ok());
    auto whole = gather_whole_state(t.value()->executor(), nullptr);
    ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
    EXPECT_FALSE(whole.value().copied());
    EXPECT_TRUE(whole.value().own_params.empty() && whole.value().own_m.empty() && whole.value().own_v.empty());
    EXPECT_EQ(whole.value().params, reinterpret_cast<const unsigned char*>(t.value()->optimizer().host_master()));
    EXPECT_EQ(whole.value().bytes, want.params.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(whole.value().params, want.params.data(), whole.value().bytes), 0);
    const std::string ckpt = dir.file(std::string("ckpt_") + buffers);
    expect_bit_identical(want, run_split_at_10(cpu, ckpt));
    // The second half on the device optimizer, from the CPU optimizer's checkpoint of step 10.
    TrainConfig second = device;
    second.checkpoint_dir = ckpt + "_dev";
    TrainConfig first = cpu;
    first.stop_at = 10;
    first.checkpoint_dir = second.checkpoint_dir;
    std::vector<double> first_losses;
    {
      auto f = Trainer::create(first, nullptr);
      ASSERT_TRUE(f.is_ok()) << f.status().to_string();
      ASSERT_TRUE(f.value()->run().is_ok());
      for (const StepRecord& r : f.value()->history()) first_losses.push_back(r.loss);
    }
    second.resume = "latest";
    auto d = Trainer::create(second, nullptr);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    ASSERT_TRUE(d.value()->run().is_ok());
    expect_bit_identical(want, finish(*d.value(), first_losses));
    // --init-from: the parameters of step 10 into the host master, as into the device's master.
    std::vector<float> from[2];
    for (const OptimizerPlacement where : {OptimizerPlacement::kDevice, OptimizerPlacement::kCpu}) {
      TrainConfig init = where == OptimizerPlacement::kCpu ? cpu : device;
      init.init_from = second.checkpoint_dir;
      init.steps = 2;
      from[where == OptimizerPlacement::kCpu] = run_through(init).params;
    }
    ASSERT_FALSE(from[0].empty());
    EXPECT_EQ(from[0], from[1]);
  }
}

// The Llama family through every plan (docs/ARCHITECTURE.md invariant 1): each activation placement and rebuild,
// a mixed JSON plan, Unified Memory, the CPU optimizer with streamed gradients and parameters and the speculative
// update (under a slow link, slow kernels and a slower host), give in-core's bits, losses and evaluations; and a run
// split by a checkpoint resumes bit for bit. Grouped-query heads, QKV biases and an untied head.
TEST(Trainer, LlamaEveryPlanIsBitIdenticalToInCore) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  TrainConfig base = small_config(data);
  base.model = ModelConfig{.family = "llama", .vocab = 256, .layers = 4, .dim = 32, .heads = 4, .seq = 32,
                           .kv_heads = 2, .ffn = 48, .tied_embeddings = false, .qkv_bias = true, .rope_theta = 500000};
  base.steps = 8;
  base.eval_every = 3;
  base.grads_in_activations = false;  // the device run's gradients in buffers of their own, as the host plans'
  auto a = Trainer::create(base, nullptr);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(a.value()->run().is_ok());
  const RunResult ra = finish(*a.value());
  EXPECT_LT(ra.losses.back(), ra.losses.front());
  const std::string mixed = dir.write("mixed.json", R"({"default": {"activation": "swap"},
      "layers": {"1": {"activation": "recompute"},
                 "2": {"activation": {"attention": "resident", "mlp": "resident", "norms": "recompute",
                                      "act": "recompute"}}}})");
  const std::string params_mix = dir.write("params_mix.json", R"({"optimizer": "cpu", "param_prefetch": 2,
      "layers": {"0": {"param": "host_streamed", "activation": "recompute"},
                 "1": {"param": "host_streamed", "grad": "host_streamed"}, "2": {"activation": "swap"},
                 "3": {"param": "host_streamed", "activation": "swap"}}})");
  expect_every_plan_matches(base, *a.value(), ra,
                            {{"recompute", false, false},
                             {"swap-activations", false, false},
                             {"swap-attention-recompute-mlp", false, false},
                             {"swap-attention-recompute-mlp-norms", false, false},
                             {"in-core-selective", false, false},
                             {mixed, false, false},
                             {"um-swap-activations", false, false},
                             {"in-core", true, false},
                             {"offload-params", true, false},
                             {"offload-all", true, true},
                             {params_mix, true, false}},
                            /*slow_cpu=*/true, dir.file("ckpt"));
}

// Note [bf16 gradients] (exec/executor.h): with --grad-dtype bf16 (the blocks' gradients in bf16) every plan with
// AdamW on the device gives in-core's bits, evaluations included, a resume continues bit for bit, and the loss falls
// as with f32 gradients (within 2% after 8 steps) without being the same bits; the combinations the first version
// does not take are refused, naming the flag.
TEST(Trainer, Bf16GradientsEveryDevicePlanIsBitIdenticalToInCore) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  TrainConfig f32 = small_config(data);
  f32.model = ModelConfig{.family = "llama", .vocab = 256, .layers = 4, .dim = 32, .heads = 4, .seq = 32,
                          .kv_heads = 2, .ffn = 48, .tied_embeddings = false, .qkv_bias = true, .rope_theta = 500000};
  f32.steps = 8;
  f32.eval_every = 3;
  TrainConfig base = f32;
  base.grad_dtype = GradDtype::kBF16;
  auto a = Trainer::create(base, nullptr);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(a.value()->run().is_ok());
  const RunResult ra = finish(*a.value());
  EXPECT_LT(ra.losses.back(), ra.losses.front());
  auto c = Trainer::create(f32, nullptr);
  ASSERT_TRUE(c.is_ok() && c.value()->run().is_ok());
  const RunResult rc = finish(*c.value());
  EXPECT_NE(ra.params, rc.params) << "bf16 gradients left every parameter as f32 gradients did";
  EXPECT_NEAR(ra.losses.back(), rc.losses.back(), 0.02 * rc.losses.back());
  const std::string mixed = dir.write("mixed.json", R"({"default": {"activation": "swap"},
      "layers": {"1": {"activation": "recompute"},
                 "2": {"activation": {"attention": "resident", "mlp": "resident", "norms": "recompute",
                                      "act": "recompute"}}}})");
  const std::string as_json = dir.write("bf16.json", R"({"grad_dtype": "bf16", "grads_in_activations": false})");
  TrainConfig from_plan = f32;
  from_plan.plan = as_json;
  auto p = Trainer::create(from_plan, nullptr);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ASSERT_TRUE(p.value()->run().is_ok());
  expect_bit_identical(ra, finish(*p.value()));
  expect_every_plan_matches(base, *a.value(), ra,
                            {{"recompute", false, false},
                             {"swap-activations", false, false},
                             {"swap-attention-recompute-mlp-norms", false, false},
                             {"in-core-selective", false, false},
                             {mixed, false, false}},
                            /*slow_cpu=*/false, dir.file("ckpt"));
  struct Refused {
    std::string what;
    std::function<void(TrainConfig&)> set;
  };
  for (const Refused& r : std::vector<Refused>{
           {"AdamW on the device", [](TrainConfig& t) { t.optimizer = OptimizerPlacement::kCpu; }},
           {"--grad-accum 1", [](TrainConfig& t) { t.grad_accum = 2; }},
           {"AdamW on the device", [](TrainConfig& t) { t.plan = "offload-all"; }}}) {
    SCOPED_TRACE(r.what);
    TrainConfig t = base;
    r.set(t);
    auto bad = Trainer::create(t, nullptr);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("--grad-dtype bf16"), std::string::npos) << bad.status().to_string();
    EXPECT_NE(bad.status().message().find(r.what), std::string::npos) << bad.status().to_string();
  }
}

// Fine-tuning data in masked shards of the synthetic text: documents of 25 to 90 tokens, the first 10 to 60 of
// each (the "prompt") not counted (Note [loss mask]), so that the targets that count differ from batch to batch.
std::string write_masked_shards(TempDir& dir, const std::string& name) {
  const std::string text = testing::synthetic_text(60000);
  std::vector<uint32_t> train, val;
  Rng rng(17);
  for (size_t at = 0; at < text.size();) {
    const size_t n = std::min(text.size() - at, static_cast<size_t>(25 + rng.uniform_int(66)));
    const size_t prompt = std::min(n, static_cast<size_t>(10 + rng.uniform_int(51)));
    std::vector<uint32_t>& to = at < text.size() * 9 / 10 ? train : val;
    for (size_t i = 0; i < n; ++i)
      to.push_back(static_cast<unsigned char>(text[at + i]) | (i < prompt ? data::kNoLoss : 0u));
    at += n;
  }
  std::filesystem::create_directories(dir.file(name));
  EXPECT_TRUE(data::write_token_shard(dir.file(name + "/train_000.bin"), data::Tokens(train), 256).is_ok());
  EXPECT_TRUE(data::write_token_shard(dir.file(name + "/val_000.bin"), data::Tokens(val), 256).is_ok());
  return dir.file(name);
}

// Note [loss mask]: with masked data (targets that count differing from batch to batch, so that a batch's loss
// scale must travel with it through the input staging), every plan gives in-core's bits, evaluations included, and
// a resume continues bit for bit; the loss falls.
TEST(Trainer, MaskedDataEveryPlanIsBitIdenticalToInCore) {
  TempDir dir;
  TrainConfig base = small_config(write_masked_shards(dir, "masked"));
  base.model = ModelConfig{.family = "llama", .vocab = 256, .layers = 3, .dim = 32, .heads = 4, .seq = 32,
                           .kv_heads = 2, .ffn = 48};
  base.steps = 8;
  base.eval_every = 4;
  base.eval_batches = 2;
  base.grads_in_activations = false;
  auto a = Trainer::create(base, nullptr);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(a.value()->dataset().train().masked());
  ASSERT_TRUE(a.value()->run().is_ok());
  const RunResult ra = finish(*a.value());
  EXPECT_LT(ra.losses.back(), ra.losses.front());
  for (double l : ra.losses) EXPECT_TRUE(std::isfinite(l) && l > 0) << l;
  expect_every_plan_matches(base, *a.value(), ra,
                            {{"recompute", false, false},
                             {"swap-activations", false, false},
                             {"in-core", true, false},
                             {"offload-all", true, true}},
                            /*slow_cpu=*/false, dir.file("ckpt"));
}

// Note [loss mask]: the first step's loss is the mean over the targets of its batch that count, and its gradient
// that of this mean (its norm, which a scale of 1 / (B x T) would change by their ratio), as a forward and backward
// of that batch on the trainer's own executor, before the run, give them.
TEST(Trainer, MaskedDataLossAndGradientAreThoseOfTheTargetsThatCount) {
  TempDir dir;
  TrainConfig tc = small_config(write_masked_shards(dir, "masked"));
  tc.steps = 1;
  tc.grad_clip = 0;
  tc.grads_in_activations = false;
  auto t = Trainer::create(tc, nullptr);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  Trainer& tr = *t.value();
  const int B = tc.batch, T = tc.model.seq;
  auto sampler = data::BatchSampler::create(&tr.dataset().train(), B, T, tc.seed);
  ASSERT_TRUE(sampler.is_ok());
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  const int64_t count = sampler->next(tokens.data(), targets.data());
  ASSERT_GT(count, 0);
  ASSERT_LT(count, B * T);
  Executor& ex = tr.executor();
  Backend& be = tr.backend();
  be.copy_h2d(ex.tokens(), tokens.data(), be.compute_stream());
  be.copy_h2d(ex.targets(), targets.data(), be.compute_stream());
  ex.model().set_loss_scale(1.0f / static_cast<float>(count));
  ex.forward_backward();
  std::vector<float> losses(tokens.size()), grads(static_cast<size_t>(ex.num_params()));
  be.copy_d2h(losses.data(), ex.losses(), be.compute_stream());
  ASSERT_TRUE(be.compute_stream().synchronize().is_ok());
  ASSERT_TRUE(ex.download_grads(grads.data()).is_ok());
  double sum = 0, norm_sq = 0;
  for (float l : losses) sum += l;
  for (float g : grads) norm_sq += static_cast<double>(g) * g;
  ASSERT_TRUE(tr.run().is_ok());
  ASSERT_EQ(tr.history().size(), 1u);
  EXPECT_NEAR(tr.history()[0].loss, sum / static_cast<double>(count), 1e-6);
  EXPECT_NEAR(tr.history()[0].grad_norm, std::sqrt(norm_sq), 1e-5 * std::sqrt(norm_sq));
}

// Note [gradient accumulation]: a step of micro-batches (2 of 4 sequences, 4 of 2) follows the step of one batch of 8
// (the same windows, in the same order) up to rounding: losses, gradient norms, evaluations and the parameters after
// it, for GPT-2 and a Llama, on text and on masked data (whose step count spans the micro-batches), with activations
// resident, recomputed and swapped; a resume in the middle continues bit for bit; the CPU optimizer is refused.
TEST(Trainer, GradientAccumulationFollowsOneLargeBatch) {
  TempDir dir;
  const std::string text = dir.write("corpus.txt", testing::synthetic_text(60000));
  const std::string masked = write_masked_shards(dir, "masked");
  const ModelConfig llama{.family = "llama", .vocab = 256, .layers = 2, .dim = 32, .heads = 4, .seq = 32,
                          .kv_heads = 2, .ffn = 48};
  struct Case {
    std::string data;
    ModelConfig model;
    std::string plan;
  };
  for (const Case& c : {Case{text, small_config(text).model, "in-core"}, Case{text, llama, "recompute"},
                        Case{masked, llama, "swap-activations"}, Case{masked, small_config(text).model, "in-core"}}) {
    SCOPED_TRACE(c.model.describe() + " " + c.plan + (c.data == masked ? " masked" : ""));
    TrainConfig one = small_config(c.data);
    one.model = c.model;
    one.plan = c.plan;
    one.batch = 8;
    one.steps = 6;
    one.eval_every = 3;
    one.eval_batches = 2;
    one.grads_in_activations = false;
    auto a = Trainer::create(one, nullptr);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    ASSERT_TRUE(a.value()->run().is_ok());
    const RunResult ra = finish(*a.value());
    for (const auto& [micro, n] : {std::pair{4, 2}, std::pair{2, 4}}) {
      SCOPED_TRACE(std::to_string(n) + " micro-batches of " + std::to_string(micro));
      TrainConfig acc = one;
      acc.batch = micro;
      acc.grad_accum = n;
      acc.eval_batches = one.eval_batches * one.batch / micro;  // the same validation windows
      auto b = Trainer::create(acc, nullptr);
      ASSERT_TRUE(b.is_ok()) << b.status().to_string();
      ASSERT_TRUE(b.value()->run().is_ok());
      const RunResult rb = finish(*b.value());
      ASSERT_EQ(ra.losses.size(), rb.losses.size());
      for (size_t i = 0; i < ra.losses.size(); ++i) EXPECT_NEAR(ra.losses[i], rb.losses[i], 1e-5 * ra.losses[i]);
      for (size_t i = 0; i < a.value()->history().size(); ++i)
        EXPECT_NEAR(a.value()->history()[i].grad_norm, b.value()->history()[i].grad_norm,
                    1e-4 * a.value()->history()[i].grad_norm);
      ASSERT_EQ(a.value()->evals().size(), b.value()->evals().size());
      for (size_t i = 0; i < a.value()->evals().size(); ++i)
        EXPECT_NEAR(a.value()->evals()[i].loss, b.value()->evals()[i].loss, 1e-5 * a.value()->evals()[i].loss);
      double worst = 0;
      for (size_t i = 0; i < ra.params.size(); ++i)
        worst = std::max(worst, static_cast<double>(std::abs(ra.params[i] - rb.params[i])));
      EXPECT_LT(worst, 1e-4) << "parameters after the steps";
    }
  }
  // Resumed in the middle: the uninterrupted run's bits.
  TrainConfig acc = small_config(masked);
  acc.batch = 4;
  acc.grad_accum = 3;
  acc.steps = 20;
  auto straight = Trainer::create(acc, nullptr);
  ASSERT_TRUE(straight.is_ok()) << straight.status().to_string();
  ASSERT_TRUE(straight.value()->run().is_ok());
  expect_bit_identical(finish(*straight.value()), run_split_at_10(acc, dir.file("ckpt")));
  // The CPU optimizer (its update and the speculative one; with parameters streamed from the host, gradients on the
  // device): the sums stay on the device until the last micro-batch copies them out, so the host AdamW updates from
  // the same gradients: the device optimizer's bits.
  const RunResult device_bits = finish(*straight.value());
  const std::string streamed_params = dir.write(
      "streamed-params.json",
      R"({"version": 1, "optimizer": "cpu", "layers": [)"
      R"({"activation": "resident", "param": "host_streamed", "grad": "resident", "optim_state": "host_streamed"},)"
      R"({"activation": "resident", "param": "host_streamed", "grad": "resident", "optim_state": "host_streamed"}]})");
  for (const int variant : {0, 1, 2, 3, 4, 5}) {
    const bool speculate = variant == 1;
    SCOPED_TRACE(variant == 0   ? "CPU optimizer"
                 : variant == 1 ? "CPU optimizer, speculative update"
                 : variant == 2 ? "CPU optimizer, parameters streamed"
                 : variant == 3 ? "CPU optimizer, host buffers in rings"
                 : variant == 4 ? "CPU optimizer split, 2 segments on the device"
                                : "CPU optimizer split, 3 segments on the device, host buffers in rings");
    TrainConfig cpu = acc;
    cpu.optimizer = OptimizerPlacement::kCpu;
    cpu.speculative_update = speculate;
    if (variant == 2) cpu.plan = streamed_params;
    if (variant == 3 || variant == 5) cpu.host_buffers = "ring";  // Note [host buffers in rings]
    if (variant >= 4) cpu.device_optimizer_segments = variant == 4 ? "2" : "3";  // Note [optimizer split]
    auto c = Trainer::create(cpu, nullptr);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    ASSERT_TRUE(c.value()->run().is_ok());
    expect_bit_identical(device_bits, finish(*c.value()));
    // Resumed bit for bit: the device segments' state through its home in the host state (checkpoints in place).
    if (variant >= 4) expect_bit_identical(device_bits, run_split_at_10(cpu, dir.file("ckpt_split" + std::to_string(variant))));
  }
  // Note [gradients summed on the host]: streamed gradients (offload-params, offload-all; with the speculative
  // update too) are summed on the host and the norm's parts of those blocks taken there: the same training up to the
  // rounding of the norm's sum (summed in another order), and the same norms.
  const std::vector<StepRecord>& want = straight.value()->history();
  for (const char* plan : {"offload-params", "offload-all"}) {
    for (const bool speculate : {false, true}) {
      SCOPED_TRACE(std::string(plan) + (speculate ? ", speculative update" : ""));
      TrainConfig streamed = acc;
      streamed.plan = plan;
      streamed.speculative_update = speculate;
      auto c = Trainer::create(streamed, nullptr);
      ASSERT_TRUE(c.is_ok()) << c.status().to_string();
      ASSERT_TRUE(c.value()->run().is_ok());
      const std::vector<StepRecord>& got = c.value()->history();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(got[i].loss, want[i].loss, 1e-5 * want[i].loss) << "step " << i + 1;
        EXPECT_NEAR(got[i].grad_norm, want[i].grad_norm, 1e-5 * want[i].grad_norm) << "step " << i + 1;
      }
      const RunResult rc = finish(*c.value());
      double worst = 0;
      for (size_t i = 0; i < device_bits.params.size(); ++i)
        worst = std::max(worst, static_cast<double>(std::abs(device_bits.params[i] - rc.params[i])));
      EXPECT_LT(worst, 1e-5) << "parameters after the steps";
    }
  }
  // Managed gradients are not summed anywhere yet: refused, named.
  TrainConfig managed = acc;
  managed.plan = "um-advised";
  auto refused = Trainer::create(managed, nullptr);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("accumulating managed gradients"), std::string::npos)
      << refused.status().message();
}

// Note [speculative update]: the CPU optimizer updating each block during the backward as if the norm were under
// the clip gives the device optimizer's bits whether the guess holds (a clip far above the norm: every update kept)
// or not (a clip far below it: the first step's updates redone, and no guess after that), with parameters streamed or resident, through evaluations and a
// resume, under slow kernels, a slow link and a slower host.
TEST(Trainer, SpeculativeUpdateIsBitIdentical) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  for (const float clip : {1e6f, 1e-3f}) {
    for (const char* plan : {"in-core", "offload-params"}) {
      SCOPED_TRACE(std::string(plan) + " clip " + std::to_string(clip));
      TrainConfig device = small_config(data);
      device.model.layers = 4;
      device.steps = 8;
      device.eval_every = 3;
      device.grad_clip = clip;
      TrainConfig cpu = device;
      cpu.plan = plan;
      cpu.optimizer = OptimizerPlacement::kCpu;
      cpu.speculative_update = true;
      cpu.cpu_copy_delay_us = 3000;
      cpu.cpu_compute_delay_us = 100;
      cpu.cpu_host_delay_us = 5000;
      auto a = Trainer::create(device, nullptr);
      auto b = Trainer::create(cpu, nullptr);
      ASSERT_TRUE(a.is_ok() && b.is_ok()) << b.status().to_string();
      ASSERT_TRUE(a.value()->run().is_ok());
      ASSERT_TRUE(b.value()->run().is_ok());
      expect_bit_identical(finish(*a.value()), finish(*b.value()));
      for (size_t i = 0; i < a.value()->evals().size(); ++i)
        EXPECT_EQ(a.value()->evals()[i].loss, b.value()->evals()[i].loss);
      // Every segment (embeddings, blocks, final LayerNorm) is speculated at every step while the norms stay under
      // the clip; over it, only the first step guesses (and is redone), then the trainer stops guessing.
      const Optimizer& opt = b.value()->optimizer();
      const int64_t segments = device.model.layers + 2;
      if (clip > 1.0f) {
        EXPECT_EQ(opt.speculation_kept(), int64_t(device.steps) * segments);
        EXPECT_EQ(opt.speculation_redone(), 0);
      } else {
        EXPECT_EQ(opt.speculation_kept(), 0);
        EXPECT_EQ(opt.speculation_redone(), segments);
      }
      TrainConfig longer = cpu;
      longer.steps = 14;
      longer.eval_every = 0;
      auto straight = Trainer::create(longer, nullptr);
      ASSERT_TRUE(straight.is_ok());
      ASSERT_TRUE(straight.value()->run().is_ok());
      expect_bit_identical(finish(*straight.value()),
                           run_split_at_10(longer, dir.file(std::string("ckpt-") + plan + std::to_string(clip > 1))));
    }
  }
  TrainConfig bad = small_config(data);
  bad.speculative_update = true;
  auto refused = Trainer::create(bad, nullptr);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("applies to the CPU optimizer"), std::string::npos)
      << refused.status().message();
}

// Note [MLP half]: swapping only the attention half and recomputing the MLP half needs less device memory than
// swapping whole blocks (the slots hold half a block) and moves about half the bytes to the host; keeping the
// attention half resident needs less than in-core and more than recomputing whole blocks.
TEST(Trainer, MlpHalfPlansNeedWhatTheyShould) {
  const ModelConfig m = small_config("unused").model;
  ModelConfig cfg = m;
  cfg.layers = 6;
  const int batch = 4;
  auto need = [&](const char* plan) { return plan_inventory(cfg, batch, plan).total(Inventory::kDevice); };
  auto host_acts = [&](const char* plan) {
    return plan_inventory(cfg, batch, plan).of(Inventory::kHost, TensorClass::kActivation);
  };
  const size_t all = block_bytes(cfg, batch);
  const size_t attention = block_bytes(cfg, batch, kPartAttention);
  const size_t mlp = block_bytes(cfg, batch, kPartMlp);
  EXPECT_EQ(attention + mlp, all);
  EXPECT_GT(mlp, all / 2);  // fch and fch_gelu: 8 of the 15 C per token
  EXPECT_LT(need("swap-attention-recompute-mlp"), need("swap-activations"));
  // Two slots of half a block and one MLP set, against two slots of whole blocks.
  EXPECT_EQ(need("swap-activations") - need("swap-attention-recompute-mlp"),
            static_cast<int64_t>(2 * all - 2 * attention - mlp));
  // The host copies: one per swapped block but the last two (they stay in their slots), half a block each.
  EXPECT_EQ(host_acts("swap-attention-recompute-mlp"), static_cast<int64_t>(4 * memory::host_alloc_size(attention)));
  EXPECT_EQ(host_acts("swap-activations"), static_cast<int64_t>(4 * memory::host_alloc_size(all)));
  TempDir dir;
  const std::string resident_mlp = dir.write(
      "p.json", R"({"default": {"activation": {"attention": "resident", "mlp": "recompute"}}})");
  EXPECT_LT(need(resident_mlp.c_str()), need("in-core"));
  EXPECT_GT(need(resident_mlp.c_str()), need("recompute"));
  // Note [rebuilt norms]: the slots lose the LayerNorm outputs (2 of the 7 C per token of the attention half), and
  // one shared set of them is added; the host copies shrink alike.
  const size_t norms = block_bytes(cfg, batch, kPartNorms);
  const size_t core = block_bytes(cfg, batch, kPartCore);
  EXPECT_EQ(norms + core, attention);
  EXPECT_EQ(need("swap-attention-recompute-mlp") - need("swap-attention-recompute-mlp-norms"),
            static_cast<int64_t>(2 * norms - norms));
  EXPECT_EQ(host_acts("swap-attention-recompute-mlp-norms"), static_cast<int64_t>(4 * memory::host_alloc_size(core)));
  // Note [rebuilt activation]: in-core-selective keeps one shared set of the GELU and LayerNorm outputs instead of one a
  // block.
  const size_t gelu = block_bytes(cfg, batch, kPartAct);
  EXPECT_EQ(block_bytes(cfg, batch, kPartFc), gelu);
  EXPECT_EQ(need("in-core") - need("in-core-selective"), static_cast<int64_t>((cfg.layers - 1) * (gelu + norms)));
  EXPECT_EQ(host_acts("in-core-selective"), 0);
}

// Neither pool allocates once the run is set up (steps and evaluations reuse everything), for every plan; the host
// pool takes its memory in the one slab reserved at start, and holds all of it.
TEST(Trainer, NoAllocationAfterSetup) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(30000));
  for (const char* plan : {"in-core", "in-core-selective", "recompute", "swap-activations",
                           "swap-attention-recompute-mlp", "swap-attention-recompute-mlp-norms"}) {
    SCOPED_TRACE(plan);
    TrainConfig tc = small_config(data);
    tc.model.layers = 4;  // more swapped blocks than slots: some are copied out
    tc.steps = 5;
    tc.eval_every = 2;
    tc.plan = plan;
    auto t = Trainer::create(tc, nullptr);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    Backend& be = t.value()->backend();
    const int64_t device_allocs = be.pool().allocation_count(), host_allocs = be.host_pool().allocation_count();
    ASSERT_TRUE(t.value()->run().is_ok());
    EXPECT_EQ(be.pool().allocation_count(), device_allocs);
    EXPECT_EQ(be.host_pool().allocation_count(), host_allocs);
    EXPECT_EQ(be.host_pool().slab_count(), 1);
    // Held within 5% of what is pinned, or within the one page the slab is rounded up to.
    const double slack = static_cast<double>(be.host_pool().slab_bytes() - be.host_pool().peak_in_use());
    EXPECT_LE(slack, std::max(0.05 * static_cast<double>(be.host_pool().slab_bytes()),
                              static_cast<double>(sysconf(_SC_PAGESIZE))))
        << be.host_pool().describe();
  }
}

// --trace: a valid Chrome trace with a track per stream; with swapped activations over a slow simulated link the
// copies overlap compute ops (not only the compute stream's waits), the bytes match the plan, and the metrics carry
// the transfer totals.
TEST(Trainer, TraceShowsCopiesOverlappingCompute) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(30000));
  TrainConfig tc = small_config(data);
  tc.model.layers = 4;
  tc.steps = 4;
  tc.eval_every = 0;
  tc.plan = "swap-activations";
  tc.cpu_copy_delay_us = 2000;
  tc.trace = dir.file("trace.json");
  tc.metrics_out = dir.file("metrics.json");
  auto t = Trainer::create(tc, nullptr);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_TRUE(t.value()->run().is_ok());
  std::ifstream f(tc.trace);
  const nlohmann::json trace = nlohmann::json::parse(f);  // throws (fails the test) if not valid JSON
  std::map<int, std::string> tracks;
  struct Span {
    double t0, t1;
    std::string name;
  };
  std::map<int, std::vector<Span>> spans;
  int64_t d2h_bytes = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") tracks[e.at("tid")] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    const double ts = e.at("ts"), dur = e.at("dur");
    EXPECT_GE(dur, 0.0);
    spans[e.at("tid")].push_back({ts, ts + dur, e.at("name")});
    if (e.at("tid") == 3) d2h_bytes += e.at("args").at("bytes").get<int64_t>();
  }
  ASSERT_EQ(tracks.size(), 5u);
  EXPECT_NE(tracks[4].find("host"), std::string::npos);
  EXPECT_NE(tracks[1].find("compute"), std::string::npos);
  EXPECT_NE(tracks[2].find("h2d"), std::string::npos);
  EXPECT_NE(tracks[3].find("d2h"), std::string::npos);
  // Steps 2-4 are traced: each swaps out every block but the last two (which stay in the two slots).
  const int64_t block = static_cast<int64_t>(block_bytes(tc.model, tc.batch));
  EXPECT_EQ(d2h_bytes, 3 * (tc.model.layers - 2) * block);
  EXPECT_EQ(spans[0].size(), 3u);  // one span per step
  // Overlap: some copy runs while the compute stream runs an op that is not a wait.
  int overlapping = 0;
  for (int copy_track : {2, 3})
    for (const Span& c : spans[copy_track])
      for (const Span& k : spans[1])
        if (k.name.rfind("wait ", 0) != 0 && k.t0 < c.t1 && c.t0 < k.t1 && k.t1 - k.t0 > 0.01) ++overlapping;
  EXPECT_GT(overlapping, 0);
  std::ifstream m(tc.metrics_out);
  const nlohmann::json metrics = nlohmann::json::parse(m);
  EXPECT_EQ(metrics.at("transfers_per_step").at("d2h_bytes").get<double>(),
            static_cast<double>((tc.model.layers - 2) * block));
  EXPECT_GT(metrics.at("transfers_per_step").at("h2d_bytes").get<double>(), 0.0);
}

TEST(Trainer, MetricsFileHasTheRun) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(30000));
  TrainConfig tc = small_config(data);
  tc.steps = 4;
  tc.eval_every = 2;
  tc.metrics_out = dir.file("m.json");
  tc.resolved = {{"steps", 4}};
  auto t = Trainer::create(tc, nullptr);
  ASSERT_TRUE(t.is_ok());
  ASSERT_TRUE(t.value()->run().is_ok());
  std::ifstream f(tc.metrics_out);
  ASSERT_TRUE(f.good());
  nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["config"]["steps"], 4);
  ASSERT_EQ(j["steps"].size(), 4u);
  EXPECT_GT(j["steps"][0]["loss"].get<double>(), 0.0);
  EXPECT_GT(j["steps"][3]["tokens_per_s"].get<double>(), 0.0);
  ASSERT_EQ(j["val"].size(), 2u);
  EXPECT_GT(j["summary"]["median_tokens_per_s"].get<double>(), 0.0);
  const auto& dev = j["memory"]["device"];
  EXPECT_GT(dev["peak"].get<int64_t>(), 0);
  EXPECT_LE(dev["peak"].get<int64_t>(), dev["budget"].get<int64_t>());
  EXPECT_GT(dev["classes"]["activation"]["peak"].get<int64_t>(), 0);
  EXPECT_GT(dev["classes"]["param"]["peak"].get<int64_t>(), 0);
  EXPECT_GT(dev["classes"]["optim_state"]["peak"].get<int64_t>(), 0);
}

TEST(Trainer, LearningRateSchedule) {
  TrainConfig tc;
  tc.lr = 1.0f;
  tc.min_lr_frac = 0.1f;
  tc.warmup = 10;
  tc.steps = 110;
  EXPECT_FLOAT_EQ(learning_rate(tc, 1), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(tc, 10), 1.0f);
  EXPECT_NEAR(learning_rate(tc, 60), 0.55f, 1e-6);
  EXPECT_NEAR(learning_rate(tc, 110), 0.1f, 1e-6);
  for (int64_t s = 11; s < 110; ++s) EXPECT_GE(learning_rate(tc, s), learning_rate(tc, s + 1));
}

// Without --lr the peak learning rate follows the width (auto_learning_rate): 3e-3 up to d128, 3e-3 x 128 / d above;
// a given --lr is taken as it is.
TEST(Trainer, LearningRateFollowsTheWidthUnlessGiven) {
  const auto resolve = [](const char* dim, const char* lr) {
    Config cfg;
    declare_train_knobs(cfg);
    EXPECT_TRUE(cfg.set("dim", dim, KnobSource::kFlag).is_ok());
    EXPECT_TRUE(cfg.set("heads", "4", KnobSource::kFlag).is_ok());
    if (lr != nullptr) {
      EXPECT_TRUE(cfg.set("lr", lr, KnobSource::kFlag).is_ok());
    }
    auto tc = train_config_from(cfg);
    EXPECT_TRUE(tc.is_ok()) << tc.status().to_string();
    return tc.value();
  };
  EXPECT_FLOAT_EQ(resolve("128", nullptr).lr, 3e-3f);
  EXPECT_TRUE(resolve("128", nullptr).lr_auto);
  EXPECT_FLOAT_EQ(resolve("64", nullptr).lr, 3e-3f);
  EXPECT_FLOAT_EQ(resolve("768", nullptr).lr, 5e-4f);
  EXPECT_FLOAT_EQ(resolve("4096", nullptr).lr, 9.375e-5f);
  EXPECT_FLOAT_EQ(resolve("4096", "1e-3").lr, 1e-3f);
  EXPECT_FALSE(resolve("4096", "1e-3").lr_auto);
}

// Note [prefetches to the host in pieces]: the knob reaches the backend's options in bytes, 32 MiB by default, 0 for
// whole ranges; a negative size is refused.
TEST(Trainer, UmHostPieceKnobReachesTheBackendOptions) {
  const auto piece = [](const char* mib) -> Result<int64_t> {
    Config cfg;
    declare_train_knobs(cfg);
    if (mib != nullptr) TT_TRY(cfg.set("um_host_piece_mib", mib, KnobSource::kFlag));
    TT_ASSIGN_OR_RETURN(TrainConfig tc, train_config_from(cfg));
    return run_backend_options(tc, int64_t(1) << 30).um_host_piece_bytes;
  };
  ASSERT_TRUE(piece(nullptr).is_ok());
  EXPECT_EQ(piece(nullptr).value(), int64_t(32) << 20);
  EXPECT_EQ(piece("0").value(), 0);
  EXPECT_EQ(piece("8").value(), int64_t(8) << 20);
  EXPECT_FALSE(piece("-1").is_ok());
}

// The GPU run the plan tests compare with: 4 layers of `model`, 8 steps, evaluations every 3, in `dtype`.
TrainConfig cuda_plan_base(const std::string& data, const ModelConfig& model, const char* dtype) {
  TrainConfig base = small_config(data);
  base.model = model;
  base.model.layers = 4;
  base.backend = "cuda";
  base.dtype = dtype;
  base.device_budget = int64_t(1) << 30;
  base.steps = 8;
  base.eval_every = 3;
  // f32 gradients in every plan, so that the plans that take bf16 ones (the device optimizer's) and those that do not
  // (managed gradients) compare bit for bit; bf16 gradients are the Llama test's "bf16 grads" rows.
  base.grad_dtype = GradDtype::kF32;
  return base;
}

// The CUDA backend trains like the CPU backend (every loss within `tolerance` of the fp32 CPU run) and resumes bit
// for bit, with activations in `dtype`.
void check_cuda_training(const std::string& dtype, DType want, double tolerance, const ModelConfig* model = nullptr) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  TrainConfig cpu_cfg = small_config(data);
  if (model != nullptr) cpu_cfg.model = *model;
  TrainConfig gpu_cfg = cpu_cfg;
  gpu_cfg.backend = "cuda";
  gpu_cfg.dtype = dtype;
  gpu_cfg.device_budget = int64_t(1) << 30;
  auto cpu_run = Trainer::create(cpu_cfg, nullptr);
  auto gpu_run = Trainer::create(gpu_cfg, nullptr);
  ASSERT_TRUE(cpu_run.is_ok() && gpu_run.is_ok()) << gpu_run.status().to_string();
  EXPECT_EQ(gpu_run.value()->model().dtype(), want);
  ASSERT_TRUE(cpu_run.value()->run().is_ok());
  ASSERT_TRUE(gpu_run.value()->run().is_ok());
  const RunResult c = finish(*cpu_run.value()), g = finish(*gpu_run.value());
  ASSERT_EQ(c.losses.size(), g.losses.size());
  for (size_t i = 0; i < c.losses.size(); ++i) EXPECT_NEAR(g.losses[i], c.losses[i], tolerance) << "step " << i + 1;
  expect_bit_identical(g, run_split_at_10(gpu_cfg, dir.file("ckpt")));
}

TEST(TrainerCuda, MatchesCpuAndResumesBitExact) {
  TT_SKIP_WITHOUT_GPU();
  check_cuda_training("f32", DType::kF32, 2e-4);
}

TEST(TrainerCuda, BFloat16TrainsAndResumesBitExact) {
  TT_SKIP_WITHOUT_GPU();
  check_cuda_training("bf16", DType::kBF16, 0.05);
}

// The Llama family on a GPU, multi-head (head size 32: the general attention kernels) and grouped-query (two query
// heads over one key/value head of 64: the bf16 tensor-core kernels, Note [grouped-query attention]): like the CPU in
// f32 and bf16, resumed bit for bit; every plan, and the norm computed in the step, gives in-core's bits (invariant 1
// with the same kernels), in bf16 with bf16 gradients too (Note [bf16 gradients]).
TEST(TrainerCuda, LlamaMatchesCpuResumesAndEveryPlanIsBitIdentical) {
  TT_SKIP_WITHOUT_GPU();
  const ModelConfig mha{.family = "llama", .vocab = 256, .layers = 2, .dim = 64, .heads = 2, .seq = 32,
                        .ffn = 96, .tied_embeddings = false, .qkv_bias = true, .rope_theta = 500000};
  ModelConfig gqa = mha;
  gqa.dim = 128;
  gqa.kv_heads = 1;
  gqa.seq = 64;
  gqa.qkv_bias = false;
  gqa.tied_embeddings = true;
  for (const ModelConfig* llama : std::initializer_list<const ModelConfig*>{&mha, &gqa}) {
    SCOPED_TRACE(llama->kv_heads ? "grouped-query" : "multi-head");
    check_cuda_training("f32", DType::kF32, 2e-4, llama);
    check_cuda_training("bf16", DType::kBF16, 0.05, llama);
    TempDir dir;
    const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
    for (const char* dtype : {"bf16", "bf16 grads", "f32"}) {  // Note [bf16 gradients]: "bf16 grads"
      SCOPED_TRACE(dtype);
      const bool bf16_grads = std::string(dtype) == "bf16 grads";
      TrainConfig base = cuda_plan_base(data, *llama, bf16_grads ? "bf16" : dtype);
      base.grad_dtype = bf16_grads ? GradDtype::kBF16 : GradDtype::kF32;
      auto a = Trainer::create(base, nullptr);
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      ASSERT_TRUE(a.value()->run().is_ok());
      const RunResult ra = finish(*a.value());
      // "norm-in-step": in-core with the gradient norm's parts on the compute stream in the step (Note [norm beside
      // the backward]), which the others compute on the comm stream beside the backward.
      for (const char* plan : {"recompute", "swap-activations", "swap-attention-recompute-mlp-norms",
                               "in-core-selective", "um-swap-activations", "norm-in-step"}) {
        SCOPED_TRACE(plan);
        TrainConfig tc = base;
        const bool in_step = std::string(plan) == "norm-in-step";
        tc.plan = in_step ? base.plan : plan;
        tc.norm_beside_backward = !in_step;
        auto b = Trainer::create(tc, nullptr);
        ASSERT_TRUE(b.is_ok()) << b.status().to_string();
        ASSERT_TRUE(b.value()->run().is_ok());
        expect_bit_identical(ra, finish(*b.value()));
      }
    }
  }
}

// Issue 46 on a GPU: a grouped-query Llama in bf16, a step of 2 micro-batches of 4, with the CPU optimizer: its host
// buffers whole or as rings (Note [host buffers in rings]: the bf16 compute copy through its ring too), and its
// parameters streamed from the host with the gradients summed on the device, give the same bits; gradients streamed
// to the host and summed there (offload-params, Note [gradients summed on the host]) add in the same order but take
// the norm of the host's sums, another rounding: within bf16 tolerance, as the device optimizer is (its AdamW is the
// CUDA kernel's) and one batch of 8.
TEST(TrainerCuda, AccumulationWithTheCpuOptimizerEveryPlacement) {
  TT_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  const ModelConfig gqa{.family = "llama", .vocab = 256, .layers = 4, .dim = 128, .heads = 4, .seq = 64,
                        .kv_heads = 2, .ffn = 192};
  TrainConfig base = cuda_plan_base(data, gqa, "bf16");
  base.batch = 4;
  base.grad_accum = 2;
  base.optimizer = OptimizerPlacement::kCpu;
  base.host_buffers = "whole";
  base.device_optimizer_segments = "plan";  // none: every update the host's (Note [optimizer split])
  auto a = Trainer::create(base, nullptr);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(a.value()->run().is_ok());
  const RunResult ra = finish(*a.value());
  TrainConfig ring = base;
  ring.host_buffers = "ring";
  TrainConfig streamed = base;
  streamed.plan = dir.write("streamed.json", R"({"optimizer": "cpu", "default": {"activation": "resident",
      "param": "host_streamed", "grad": "resident", "optim_state": "host_streamed"}})");
  for (const TrainConfig* tc : {&ring, &streamed}) {
    SCOPED_TRACE(tc == &ring ? "host rings" : "parameters streamed");
    auto b = Trainer::create(*tc, nullptr);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    ASSERT_TRUE(b.value()->run().is_ok());
    expect_bit_identical(ra, finish(*b.value()));
  }
  TrainConfig host_sums = base;
  host_sums.plan = "offload-params";
  TrainConfig split = base;  // Note [optimizer split]: the first 3 segments' update is the CUDA kernel's
  split.device_optimizer_segments = "3";
  TrainConfig device = base;
  device.optimizer = OptimizerPlacement::kDevice;
  TrainConfig one = base;
  one.batch = 8;
  one.grad_accum = 1;
  for (const TrainConfig* tc : {&host_sums, &device, &one, &split}) {
    SCOPED_TRACE(tc == &host_sums ? "gradients summed on the host" : tc == &device ? "device optimizer"
                 : tc == &one     ? "one batch"
                                  : "optimizer split");
    auto b = Trainer::create(*tc, nullptr);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    ASSERT_TRUE(b.value()->run().is_ok());
    const RunResult rb = finish(*b.value());
    ASSERT_EQ(rb.losses.size(), ra.losses.size());
    for (size_t i = 0; i < ra.losses.size(); ++i) EXPECT_NEAR(rb.losses[i], ra.losses[i], 0.05) << "step " << i + 1;
  }
}

// Issue 46 on a GPU: the CPU optimizer's run resumes bit for bit with its host buffers whole and as rings: the
// checkpoint written from the host master and moments where they are, and read back into them (Note [checkpoints
// without copies] in exec/checkpoint.h), with the moments and the master in the pageable pool (Note [pinned and
// pageable host memory] in plan/inventory.h).
TEST(TrainerCuda, CpuOptimizerResumesBitExactInPlace) {
  TT_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  const ModelConfig gqa{.family = "llama", .vocab = 256, .layers = 4, .dim = 128, .heads = 4, .seq = 64,
                        .kv_heads = 2, .ffn = 192};
  // And split (Note [optimizer split]): two segments' AdamW on the device, their state through its home on the host.
  for (const char* variant : {"whole", "ring", "ring+split"}) {
    SCOPED_TRACE(variant);
    TrainConfig cfg = cuda_plan_base(data, gqa, "bf16");
    cfg.steps = 14;
    cfg.grad_accum = 2;
    cfg.optimizer = OptimizerPlacement::kCpu;
    cfg.host_buffers = std::string(variant) == "whole" ? "whole" : "ring";
    cfg.device_optimizer_segments = std::string(variant) == "ring+split" ? "2" : "plan";
    auto a = Trainer::create(cfg, nullptr);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    ASSERT_TRUE(a.value()->run().is_ok());
    expect_bit_identical(finish(*a.value()), run_split_at_10(cfg, dir.file(std::string("ckpt_") + variant)));
  }
}

// cuDNN's fused attention in training (head size 64, where cuDNN takes the shape; attention_impl auto): resumes bit
// for bit, recompute gives the bits of in-core (forward and recomputed forward take the same plan), and the losses
// stay within bf16 tolerance of our kernels' (attention_impl=native). Skipped where cuDNN does not load.
TEST(TrainerCuda, CudnnAttentionResumesAndRecomputesBitExact) {
  TT_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  TrainConfig cfg = small_config(data);
  cfg.model.dim = 128;
  cfg.model.heads = 2;
  cfg.model.seq = 64;
  cfg.backend = "cuda";
  cfg.dtype = "bf16";
  cfg.device_budget = int64_t(1) << 30;
  auto a = Trainer::create(cfg, nullptr);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(a.value()->run().is_ok());
  const auto counters = a.value()->backend().counters();
  // Skipped only where cuDNN did not load; loaded, it must have run this shape (head size 64, T 64).
  const std::string desc = a.value()->backend().describe();
  if (desc.find("where it takes the shape") == std::string::npos) GTEST_SKIP() << "cuDNN is not loaded: " << desc;
  ASSERT_TRUE(counters.count("cudnn_attention_backward") && counters.at("cudnn_attention_backward") > 0)
      << "cuDNN loaded but did not run the attention: " << desc;
  const RunResult ra = finish(*a.value());
  expect_bit_identical(ra, run_split_at_10(cfg, dir.file("ckpt")));
  TrainConfig rc = cfg;
  rc.plan = "recompute";
  auto b = Trainer::create(rc, nullptr);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  ASSERT_TRUE(b.value()->run().is_ok());
  expect_bit_identical(ra, finish(*b.value()));
  TrainConfig nc = cfg;
  nc.attention.impl = AttentionImpl::kNative;
  auto n = Trainer::create(nc, nullptr);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  ASSERT_TRUE(n.value()->run().is_ok());
  EXPECT_EQ(n.value()->backend().counters().at("cudnn_attention_backward"), 0);
  const RunResult rn = finish(*n.value());
  for (size_t i = 0; i < ra.losses.size(); ++i) EXPECT_NEAR(ra.losses[i], rn.losses[i], 0.05) << "step " << i + 1;
}

// On CUDA, in bf16 and f32, the out-of-core plans give the same bits as in-core on CUDA (the same deterministic
// kernels), through evaluations; the CPU optimizer trains within bf16 tolerance of the device optimizer (its AdamW
// is the host's, whose rounding may differ from the CUDA kernel's in the last bit), and with it the offload plans
// (streamed parameters and gradients) give the same bits as keeping them resident.
TEST(TrainerCuda, PlansMatchInCore) {
  TT_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  const std::string mix = dir.write("mix.json", R"({"layers": [{"activation": "swap"}, {"activation": "recompute"},
      {"activation": "swap"}, {"activation": "swap"}]})");
  // um-swap-activations without discards (docs/benchmarks/2026-12-02-h200-um-race/).
  const std::string no_discard = dir.write("um_no_discard.json", R"({"default": {"activation": "managed_offload"},
      "um": {"prefetch": true, "advice": "default", "discard": false}})");
  for (const char* dtype : {"bf16", "f32"}) {
    SCOPED_TRACE(dtype);
    const TrainConfig base = cuda_plan_base(data, small_config(data).model, dtype);
    auto a = Trainer::create(base, nullptr);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    ASSERT_TRUE(a.value()->run().is_ok());
    const RunResult ra = finish(*a.value());
    // Unified Memory too (issue 20): default UM, advised, and activations swapped through managed memory.
    for (const std::string& plan : {std::string("recompute"), std::string("swap-activations"),
                                      std::string("swap-attention-recompute-mlp"),
                                      std::string("swap-attention-recompute-mlp-norms"), mix, std::string("um"),
                                      std::string("um-advised"), std::string("um-swap-activations"), no_discard}) {
      SCOPED_TRACE(plan);
      TrainConfig tc = base;
      tc.plan = plan;
      auto b = Trainer::create(tc, nullptr);
      ASSERT_TRUE(b.is_ok()) << b.status().to_string();
      ASSERT_TRUE(b.value()->run().is_ok());
      expect_bit_identical(ra, finish(*b.value()));
      for (size_t i = 0; i < a.value()->evals().size(); ++i)
        EXPECT_EQ(a.value()->evals()[i].loss, b.value()->evals()[i].loss);
    }
    // Note [rebuilt activation]: in-core-selective runs each block's GELU apart from its GEMM (another rounding than the
    // fused epilogue's): within the tolerance of in-core, in less memory, and bit-identical to a plan with the same
    // kernels (swapped blocks with their GELU and LayerNorm outputs rebuilt, block 1 resident with them rebuilt: a
    // block recomputed whole would run its GELU in the epilogue, another rounding in bf16).
    TrainConfig sel = base;
    sel.plan = "in-core-selective";
    auto s = Trainer::create(sel, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    ASSERT_TRUE(s.value()->run().is_ok());
    EXPECT_LT(s.value()->backend().pool().peak_in_use(), a.value()->backend().pool().peak_in_use());
    const RunResult rs = finish(*s.value());
    ASSERT_EQ(rs.losses.size(), ra.losses.size());
    for (size_t i = 0; i < ra.losses.size(); ++i) EXPECT_NEAR(rs.losses[i], ra.losses[i], 0.05) << "step " << i + 1;
    TrainConfig gelu_swap = base;
    gelu_swap.plan = dir.write("gelu_swap.json", R"({"default": {"activation": {"attention": "swap", "mlp": "swap",
        "norms": "recompute", "gelu": "recompute"}}, "layers": {"1": {"activation": {"attention": "resident",
        "mlp": "resident", "norms": "recompute", "gelu": "recompute"}}}})");
    auto g = Trainer::create(gelu_swap, nullptr);
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    ASSERT_TRUE(g.value()->run().is_ok());
    expect_bit_identical(rs, finish(*g.value()));
    TrainConfig cpu_opt = base;
    cpu_opt.optimizer = OptimizerPlacement::kCpu;
    cpu_opt.device_optimizer_segments = "plan";  // none: every update the host's (Note [optimizer split])
    auto c = Trainer::create(cpu_opt, nullptr);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    ASSERT_TRUE(c.value()->run().is_ok());
    const RunResult rc = finish(*c.value());
    ASSERT_EQ(rc.losses.size(), ra.losses.size());
    for (size_t i = 0; i < ra.losses.size(); ++i) EXPECT_NEAR(rc.losses[i], ra.losses[i], 0.05) << "step " << i + 1;
    // With the CPU optimizer, streaming parameters and gradients (and swapping activations) changes no bit; nor do
    // managed gradients and compute copy exchanged in place (Note [managed optimizer exchange]), with the schedule's
    // prefetches and without.
    const std::string exchange = dir.write("exchange.json", R"({"optimizer": "cpu", "managed": ["param", "grad"],
        "um": {"advice": "default", "prefetch": true}, "default": {"activation": "managed_offload"}})");
    const std::string faults = dir.write("faults.json", R"({"optimizer": "cpu", "managed": ["param", "grad"],
        "default": {"activation": "managed"}})");
    for (const std::string& plan : {std::string("offload-params"), std::string("offload-all"), exchange, faults}) {
      SCOPED_TRACE(plan);
      TrainConfig tc = cpu_opt;
      tc.plan = plan;
      auto d = Trainer::create(tc, nullptr);
      ASSERT_TRUE(d.is_ok()) << d.status().to_string();
      ASSERT_TRUE(d.value()->run().is_ok());
      expect_bit_identical(rc, finish(*d.value()));
      for (size_t i = 0; i < c.value()->evals().size(); ++i)
        EXPECT_EQ(c.value()->evals()[i].loss, d.value()->evals()[i].loss);
    }
  }
}

// Note [managed optimizer exchange] on a GPU with blocks larger than a 2 MiB piece (PlansMatchInCore's are far
// smaller, so no piece of their compute copy is ever released), "release_params" on: after each segment's backward
// the pieces of the compute copy wholly inside it are released (discard-and-prefetch to the host) and its ends
// moved; the run is the CPU optimizer's with copies, bit for bit, through evaluations, with speculation too.
TEST(TrainerCuda, ManagedExchangeReleasesTheComputeCopyBitForBit) {
  TT_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(60000));
  const std::string exchange = dir.write("exchange.json", R"({"optimizer": "cpu", "managed": ["param", "grad"],
      "um": {"advice": "default", "prefetch": true, "release_params": true}})");
  for (const char* dtype : {"bf16", "f32"}) {
    for (bool speculate : {false, true}) {
      SCOPED_TRACE(std::string(dtype) + (speculate ? " speculative" : ""));
      TrainConfig base = small_config(data);
      base.model = ModelConfig{.vocab = 256, .layers = 3, .dim = 512, .heads = 4, .seq = 32};  // 3.1M a block
      base.backend = "cuda";
      base.dtype = dtype;
      base.device_budget = int64_t(1) << 30;
      base.steps = 8;
      base.eval_every = 3;
      base.optimizer = OptimizerPlacement::kCpu;
      base.device_optimizer_segments = "plan";  // none: every update the host's (Note [optimizer split])
      base.speculative_update = speculate;
      auto a = Trainer::create(base, nullptr);
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      ASSERT_TRUE(a.value()->run().is_ok());
      TrainConfig tc = base;
      tc.plan = exchange;
      auto b = Trainer::create(tc, nullptr);
      ASSERT_TRUE(b.is_ok()) << b.status().to_string();
      ASSERT_TRUE(b.value()->run().is_ok());
      // The releases are in the schedule that ran: one per block at least (its 12 MiB (f32) or 6 MiB (bf16)
      // hold at least one whole 2 MiB piece).
      int releases = 0;
      for (const Op& op : b.value()->executor().schedule().pass(Pass::kTrain))
        releases += op.entry == "params.compute" && op.um_dead && op.um_part == Op::UmPart::kInner ? 1 : 0;
      EXPECT_GE(releases, base.model.layers);
      expect_bit_identical(finish(*a.value()), finish(*b.value()));
      ASSERT_EQ(a.value()->evals().size(), b.value()->evals().size());
      ASSERT_FALSE(a.value()->evals().empty());
      for (size_t i = 0; i < a.value()->evals().size(); ++i)
        EXPECT_EQ(a.value()->evals()[i].loss, b.value()->evals()[i].loss);
    }
  }
}

// A short version of the main job: default model on the default corpus.
TEST(MainJob, LossFallsWellBelowUniformOnDefaultCorpus) {
  if (access(kDefaultCorpus, R_OK) != 0) GTEST_SKIP() << kDefaultCorpus << " missing (apt-get install fortunes)";
  TrainConfig tc;  // the defaults of `tiertrain train`, on the CPU backend
  tc.backend = "cpu";
  tc.steps = 120;
  tc.warmup = 20;
  tc.eval_every = 120;
  tc.device_budget = int64_t(1) << 30;
  auto t = Trainer::create(tc, stdout);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  auto s = t.value()->run();
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_GT(s->first_loss, 5.0);
  EXPECT_LT(s->last_val_loss, 3.0) << "uniform over bytes is ln 256 = 5.55";
  EXPECT_LT(s->last_loss, 3.0);
}

}  // namespace
}  // namespace tt
