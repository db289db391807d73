// plan/plan: the --plan shortcuts, JSON plans (a default, per-layer ranges, or one object per layer), and the errors
// a wrong or not-yet-supported plan gets before anything is allocated.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "plan/plan.h"
#include "plan/schedule.h"
#include "temp_dir.h"

namespace tt {
namespace {

using nlohmann::json;

std::vector<ActPlacement> acts(const Plan& p) {
  std::vector<ActPlacement> r;
  for (int l = 0; l < static_cast<int>(p.layers.size()); ++l) r.push_back(p.activation(l));
  return r;
}
// Per block, a flag the executor reads from the plan.
std::vector<bool> per_block(const Plan& p, bool (Plan::*flag)(int) const) {
  std::vector<bool> r;
  for (int l = 0; l < static_cast<int>(p.layers.size()); ++l) r.push_back((p.*flag)(l));
  return r;
}
std::vector<bool> none(const Plan& p) { return std::vector<bool>(p.layers.size(), false); }

TEST(Plan, Shortcuts) {
  auto in_core = Plan::resolve("in-core", 3, 2);
  ASSERT_TRUE(in_core.is_ok());
  EXPECT_EQ(acts(in_core.value()), std::vector<ActPlacement>(3, ActPlacement::kResident));
  auto swap = Plan::resolve("swap-activations", 3, 4);
  ASSERT_TRUE(swap.is_ok());
  EXPECT_EQ(acts(swap.value()), std::vector<ActPlacement>(3, ActPlacement::kSwap));
  EXPECT_EQ(swap.value().swap_prefetch, 3);
  EXPECT_EQ(swap.value().swap_slots(), 4);
  auto re = Plan::resolve("recompute", 2, 2);
  ASSERT_TRUE(re.is_ok());
  EXPECT_EQ(acts(re.value()), std::vector<ActPlacement>(2, ActPlacement::kRecompute));
  // The offload shortcuts: every block's parameters and gradients streamed, the optimizer on the CPU; offload-all
  // swaps the activations too.
  for (const char* name : {"offload-params", "offload-all"}) {
    SCOPED_TRACE(name);
    auto p = Plan::resolve(name, 3, 2);
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    EXPECT_EQ(p.value().optimizer, OptimizerPlacement::kCpu);
    EXPECT_TRUE(p.value().needs_cpu_optimizer());
    EXPECT_EQ(per_block(p.value(), &Plan::params_streamed), std::vector<bool>(3, true));
    EXPECT_EQ(per_block(p.value(), &Plan::grads_streamed), std::vector<bool>(3, true));
    EXPECT_TRUE(p.value().cpu_optimizer());
    EXPECT_EQ(p.value().param_slots(), 2);
    EXPECT_EQ(acts(p.value()), std::vector<ActPlacement>(3, std::string(name) == "offload-all"
                                                                ? ActPlacement::kSwap
                                                                : ActPlacement::kResident));
    EXPECT_NE(p.value().summary().find("parameters of 3 blocks streamed from the host"), std::string::npos)
        << p.value().summary();
  }
  // Note [MLP half]: every block swaps its attention half and recomputes its MLP half; the JSON says so.
  auto halves = Plan::resolve("swap-attention-recompute-mlp", 3, 2);
  ASSERT_TRUE(halves.is_ok());
  EXPECT_EQ(acts(halves.value()), std::vector<ActPlacement>(3, ActPlacement::kSwap));
  EXPECT_EQ(per_block(halves.value(), &Plan::mlp_rebuilt), std::vector<bool>(3, true));
  EXPECT_EQ(halves.value().to_json()["layers"][0]["activation"], json({{"attention", "swap"}, {"mlp", "recompute"}}));
  EXPECT_NE(halves.value().summary().find("the MLP half of 3 of them recomputed"), std::string::npos)
      << halves.value().summary();
  auto back = Plan::from_json(halves.value().to_json(), 3, "round trip");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(per_block(back.value(), &Plan::mlp_rebuilt), std::vector<bool>(3, true));
  EXPECT_EQ(per_block(in_core.value(), &Plan::mlp_rebuilt), none(in_core.value()));
  // A layer's plain placement overrides a split default (and its flag); equal halves are the plain placement.
  auto over = Plan::from_json(json::parse(R"({"default": {"activation": {"attention": "resident", "mlp": "recompute"}},
      "layers": {"1": {"activation": "resident"}, "2": {"activation": {"attention": "swap", "mlp": "swap"}}}})"),
                              3, "over.json");
  ASSERT_TRUE(over.is_ok()) << over.status().to_string();
  EXPECT_EQ(per_block(over.value(), &Plan::mlp_rebuilt), std::vector<bool>({true, false, false}));
  EXPECT_EQ(acts(over.value()),
            std::vector<ActPlacement>({ActPlacement::kResident, ActPlacement::kResident, ActPlacement::kSwap}));
  // Note [rebuilt norms]: the LayerNorm outputs rebuilt as well; the JSON says so and reads back; a plain placement
  // clears the flag.
  auto norms = Plan::resolve("swap-attention-recompute-mlp-norms", 3, 2);
  ASSERT_TRUE(norms.is_ok());
  EXPECT_EQ(per_block(norms.value(), &Plan::norms_rebuilt), std::vector<bool>(3, true));
  EXPECT_EQ(per_block(norms.value(), &Plan::mlp_rebuilt), std::vector<bool>(3, true));
  EXPECT_EQ(norms.value().to_json()["layers"][0]["activation"],
            json({{"attention", "swap"}, {"mlp", "recompute"}, {"norms", "recompute"}}));
  EXPECT_NE(norms.value().summary().find("the norm outputs of 3 rebuilt"), std::string::npos)
      << norms.value().summary();
  auto norms_back = Plan::from_json(norms.value().to_json(), 3, "round trip");
  ASSERT_TRUE(norms_back.is_ok()) << norms_back.status().to_string();
  EXPECT_EQ(per_block(norms_back.value(), &Plan::norms_rebuilt), std::vector<bool>(3, true));
  EXPECT_EQ(per_block(halves.value(), &Plan::norms_rebuilt), none(halves.value()));
  auto norms_only = Plan::from_json(
      json::parse(R"({"default": {"activation": {"attention": "resident", "mlp": "resident", "norms": "recompute"}},
                      "layers": {"2": {"activation": "swap"}}})"),
      3, "norms.json");
  ASSERT_TRUE(norms_only.is_ok()) << norms_only.status().to_string();
  EXPECT_EQ(per_block(norms_only.value(), &Plan::norms_rebuilt), std::vector<bool>({true, true, false}));
  EXPECT_EQ(per_block(norms_only.value(), &Plan::mlp_rebuilt), none(norms_only.value()));
  EXPECT_EQ(norms_only.value().to_json()["layers"][0]["activation"],
            json({{"attention", "resident"}, {"mlp", "resident"}, {"norms", "recompute"}}));
  for (const char* wrong : {R"({"attention": "resident", "mlp": "recompute", "norms": "swap"})",
                            R"({"attention": "recompute", "mlp": "recompute", "norms": "resident"})",
                            R"({"attention": "swap", "mlp": "recompute", "norm": "recompute"})"}) {
    SCOPED_TRACE(wrong);
    auto w = Plan::from_json(json::parse(std::string(R"({"default": {"activation": )") + wrong + "}}"), 3, "w.json");
    EXPECT_FALSE(w.is_ok());
  }
  // Swapped blocks share slots: they must rebuild the same parts.
  auto disagree = Plan::from_json(
      json::parse(R"({"default": {"activation": {"attention": "swap", "mlp": "recompute"}},
                      "layers": {"1": {"activation": {"attention": "swap", "mlp": "recompute", "norms": "recompute"}}}})"),
      3, "d.json");
  ASSERT_FALSE(disagree.is_ok());
  EXPECT_NE(disagree.status().message().find("norm outputs"), std::string::npos) << disagree.status().message();
  // Note [rebuilt activation]: only the GELU output rebuilt (the MLP half kept), alone or with the norms; the shortcut
  // in-core-selective rebuilds both on every block. An MLP half rebuilt rebuilds its GELU output with it: the GELU
  // is not apart there.
  auto selective = Plan::resolve("in-core-selective", 3, 2);
  ASSERT_TRUE(selective.is_ok()) << selective.status().to_string();
  EXPECT_EQ(acts(selective.value()), std::vector<ActPlacement>(3, ActPlacement::kResident));
  EXPECT_EQ(per_block(selective.value(), &Plan::act_rebuilt), std::vector<bool>(3, true));
  EXPECT_EQ(per_block(selective.value(), &Plan::norms_rebuilt), std::vector<bool>(3, true));
  EXPECT_EQ(per_block(selective.value(), &Plan::mlp_rebuilt), none(selective.value()));
  EXPECT_EQ(selective.value().act_apart(), std::vector<bool>(3, true));
  EXPECT_EQ(selective.value().held_parts(0), unsigned(kPartCore | kPartFc));
  EXPECT_EQ(selective.value().to_json()["layers"][0]["activation"],
            json({{"attention", "resident"}, {"mlp", "resident"}, {"norms", "recompute"}, {"act", "recompute"}}));
  EXPECT_NE(selective.value().summary().find("the activation output of 3 rebuilt"), std::string::npos)
      << selective.value().summary();
  auto selective_back = Plan::from_json(selective.value().to_json(), 3, "round trip");
  ASSERT_TRUE(selective_back.is_ok()) << selective_back.status().to_string();
  EXPECT_EQ(per_block(selective_back.value(), &Plan::act_rebuilt), std::vector<bool>(3, true));
  auto gelu_swap = Plan::from_json(
      json::parse(R"({"default": {"activation": {"attention": "swap", "mlp": "swap", "gelu": "recompute"}},
                      "layers": {"1": {"activation": {"attention": "swap", "mlp": "recompute"}},
                                 "2": {"activation": "recompute"}}})"),
      3, "gelu.json");
  ASSERT_FALSE(gelu_swap.is_ok());  // block 1 swaps its attention half only: not the parts block 0 swaps
  auto gelu_mix = Plan::from_json(
      json::parse(R"({"default": {"activation": {"attention": "swap", "mlp": "swap", "gelu": "recompute"}},
                      "layers": {"1": {"activation": {"attention": "resident", "mlp": "recompute",
                                                      "gelu": "recompute"}},
                                 "2": {"activation": "recompute"}}})"),
      3, "gelu.json");
  ASSERT_TRUE(gelu_mix.is_ok()) << gelu_mix.status().to_string();
  EXPECT_EQ(per_block(gelu_mix.value(), &Plan::act_rebuilt), std::vector<bool>({true, false, false}));
  EXPECT_EQ(per_block(gelu_mix.value(), &Plan::mlp_rebuilt), std::vector<bool>({false, true, false}));
  EXPECT_EQ(gelu_mix.value().held_parts(0), unsigned(kPartAll & ~kPartAct));
  EXPECT_EQ(gelu_mix.value().swapped_parts(), unsigned(kPartAll & ~kPartAct));
  EXPECT_FALSE(in_core.value().needs_cpu_optimizer());
  auto bad = Plan::resolve("swap-everything", 2, 2);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("not a plan name"), std::string::npos);
}

TEST(Plan, JsonDefaultAndRanges) {
  const json j = json::parse(R"({"version": 1, "swap_prefetch": 2, "default": {"activation": "swap"},
                                 "layers": {"0-2": {"activation": "recompute"}, "5": {"activation": "resident"}},
                                 "comment": "mixed"})");
  auto p = Plan::from_json(j, 6, "mix.json");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  using A = ActPlacement;
  EXPECT_EQ(acts(p.value()), (std::vector<A>{A::kRecompute, A::kRecompute, A::kRecompute, A::kSwap, A::kSwap,
                                             A::kResident}));
  EXPECT_EQ(p.value().swap_slots(), 3);
  EXPECT_EQ(p.value().summary(),
            "mix.json: activations swap 2, recompute 3, resident 1 (swap prefetch 2); model state resident, "
            "optimizer on device");
  auto cpu_opt = Plan::from_json(json::parse(R"({"optimizer": "cpu"})"), 2, "c.json");
  ASSERT_TRUE(cpu_opt.is_ok()) << cpu_opt.status().to_string();
  EXPECT_EQ(cpu_opt.value().optimizer, OptimizerPlacement::kCpu);
  EXPECT_NE(cpu_opt.value().summary().find("AdamW state and fp32 master on the host"), std::string::npos);
  // Streamed gradients are accepted (the trainer checks that the optimizer is on the CPU).
  auto grads = Plan::from_json(json::parse(R"({"optimizer": "cpu", "layers": {"1": {"grad": "host_streamed"}}})"), 3,
                               "g.json");
  ASSERT_TRUE(grads.is_ok()) << grads.status().to_string();
  EXPECT_EQ(per_block(grads.value(), &Plan::grads_streamed), (std::vector<bool>{false, true, false}));
  EXPECT_NE(grads.value().summary().find("gradients of 1 blocks streamed"), std::string::npos);
  // Streamed parameters, with their own prefetch distance.
  auto params = Plan::from_json(
      json::parse(R"({"optimizer": "cpu", "param_prefetch": 2, "layers": {"0-1": {"param": "host_streamed"}}})"), 3,
      "p.json");
  ASSERT_TRUE(params.is_ok()) << params.status().to_string();
  EXPECT_EQ(per_block(params.value(), &Plan::params_streamed), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(params.value().param_slots(), 3);
  EXPECT_EQ(per_block(params.value(), &Plan::grads_streamed), none(params.value()));
  auto params_copy = Plan::from_json(params.value().to_json(), 3, "copy");
  ASSERT_TRUE(params_copy.is_ok()) << params_copy.status().to_string();
  EXPECT_EQ(params_copy.value().param_prefetch, 2);
  EXPECT_EQ(per_block(params_copy.value(), &Plan::params_streamed), (std::vector<bool>{true, true, false}));
  // Round trip through to_json (the metrics file's copy of the plan).
  auto q = Plan::from_json(p.value().to_json(), 6, "copy");
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_EQ(acts(q.value()), acts(p.value()));
  EXPECT_EQ(q.value().swap_prefetch, 2);
}

TEST(Plan, JsonArrayFromAFile) {
  testing::TempDir dir;
  const std::string path = dir.write("plan.json", R"({"layers": [{"activation": "swap"}, {"activation": "resident"},
                                                                  {"activation": "swap", "param": "resident"}]})");
  auto p = Plan::resolve(path, 3, 2);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  using A = ActPlacement;
  EXPECT_EQ(acts(p.value()), (std::vector<A>{A::kSwap, A::kResident, A::kSwap}));
  EXPECT_EQ(p.value().source, path);
  // Without swap_prefetch in the file, --swap-slots gives it.
  auto q = Plan::resolve(path, 3, 4);
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q.value().swap_prefetch, 3);
}

TEST(Plan, ErrorsNameWhatIsWrong) {
  struct Case {
    const char* json;
    const char* message;
    StatusCode code = StatusCode::kInvalidArgument;
  };
  const Case cases[] = {
      {R"({"layer": {}})", "unknown key 'layer'"},
      {R"({"version": 2})", "version 2 is not supported"},
      {R"({"default": {"activation": "offload"}})", "unknown activation placement 'offload'"},
      {R"({"default": {"activation": "host_streamed"}})", "cannot be host_streamed"},
      {R"({"default": {"weights": "resident"}})", "unknown tensor class 'weights'"},
      {R"({"layers": {"0-3": {"activation": "swap"}, "3": {"activation": "resident"}}})", "layer 3 is given twice"},
      {R"({"layers": {"4": {"activation": "swap"}}})", "outside the model's layers 0-3"},
      {R"({"layers": {"x": {"activation": "swap"}}})", "'x' is not a layer number"},
      {R"({"layers": [{"activation": "swap"}]})", "layers has 1 entries but the model has 4"},
      {R"({"swap_prefetch": 0})", "swap_prefetch must be an integer in 1..1023"},
      {R"({"swap_prefetch": 4294967297})", "swap_prefetch must be an integer in 1..1023"},
      {R"({"version": 4294967297})", "version 4294967297 is not supported"},
      {R"({"layers": {"+3": {"activation": "swap"}}})", "'+3' is not a layer number"},
      {R"({"layers": {" 3": {"activation": "swap"}}})", "' 3' is not a layer number"},
      {R"({"layers": {"1-": {"activation": "swap"}}})", "'1-' is not a layer number"},
      {R"({"optimizer": "gpu"})", "optimizer must be"},
      {R"({"param_prefetch": 0})", "param_prefetch must be an integer in 1..1023"},
      {R"({"default": {"activation": {"attention": "swap"}}})", "give both halves"},
      {R"({"default": {"activation": {"attention": "swap", "ffn": "recompute"}}})", "unknown part 'ffn' (attention, mlp, norms, act)"},
      {R"({"default": {"activation": {"attention": "resident", "mlp": "swap"}}})",
       "the MLP half can be placed apart from the attention half only by recomputing it"},
      {R"({"default": {"activation": {"attention": "resident", "mlp": "recompute", "norms": "swap"}}})",
       "the normalisations' outputs (norms) can be placed apart from the attention half only by recomputing them"},
      {R"({"default": {"activation": {"attention": "recompute", "mlp": "resident"}}})",
       "a recomputed attention half rebuilds the whole block"},
      {R"({"default": {"activation": {"attention": "recompute", "mlp": "recompute"}, "param": "resident"},
           "layers": {"1": {"activation": {"attention": "swap", "mlp": 3}}}})",
       "layers.1.activation.mlp: expected a string"},
      {R"({"default": {"activation": "swap"}, "layers": {"2": {"activation": {"attention": "swap", "mlp": "recompute"}}}})",
       "swapped layers 0 and 2 differ in whether their MLP half, their activation output or their norm outputs are "
       "recomputed"},
      {R"({"default": {"activation": {"attention": "resident", "mlp": "resident", "gelu": "swap"}}})",
       "the MLP activation's output (act) can be placed apart from the MLP half only by recomputing it (mlp resident, "
       "act swap)"},
      {R"({"default": {"activation": {"attention": "recompute", "mlp": "recompute", "gelu": "resident"}}})",
       "a recomputed attention half rebuilds the whole block"},
      {R"({"default": {"activation": "swap"}, "layers": {"1": {"activation": {"attention": "swap", "mlp": "swap",
           "gelu": "recompute"}}}})",
       "swapped layers 0 and 1 differ"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    auto p = Plan::from_json(json::parse(c.json), 4, "p.json");
    ASSERT_FALSE(p.is_ok());
    EXPECT_EQ(p.status().code(), c.code);
    EXPECT_NE(p.status().message().find(c.message), std::string::npos) << p.status().message();
  }
  testing::TempDir dir;
  auto broken = Plan::resolve(dir.write("broken.json", "{\"layers\": ["), 4, 2);
  ASSERT_FALSE(broken.is_ok());
  EXPECT_NE(broken.status().message().find("not valid JSON"), std::string::npos) << broken.status().message();
}

// Note [gradients in dead activations]: the arena's invariants for any plan and shape. Every set in block order; a
// block's gradients wholly above the end of the last resident set at or before it (its own backward reads those),
// below the arena's top, overlapping some set (else they would be apart), disjoint from every other block's; the
// top the least those allow; saved_bytes what the sets and segments apart would take beyond the arena.
// Returns how many blocks' gradients lie in the arena.
int expect_arena_invariants(const Plan& plan, const ModelConfig& cfg, int batch, DType compute) {
  const ActivationArena a = activation_arena(plan, cfg, batch, compute);
  const int L = cfg.layers;
  EXPECT_EQ(a.set_at.size(), static_cast<size_t>(L));
  EXPECT_EQ(a.grads_at.size(), static_cast<size_t>(L));
  if (a.bytes == 0) {
    EXPECT_EQ(a.blocks_with_grads(), 0);
    for (int l = 0; l < L; ++l) EXPECT_FALSE(a.holds_set(l) || a.holds_grads(l)) << l;
    return 0;
  }
  const ParamSegments segs = model_segments(cfg);
  int64_t sets = 0, apart = 0;
  std::vector<int64_t> end(static_cast<size_t>(L)), grad(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    const size_t k = static_cast<size_t>(l);
    const bool resident = plan.activation(l) == ActPlacement::kResident && !plan.managed_block(l);
    EXPECT_EQ(a.holds_set(l), resident) << l;
    if (resident) {
      EXPECT_EQ(a.set_at[k], sets) << l;
      sets += arena_set_bytes(plan, cfg, batch, compute, l);
    }
    end[k] = sets;
    grad[k] = static_cast<int64_t>(device_alloc_bytes({segs.size[k + 1]}, master_dtype_for(compute)));
    if (a.holds_grads(l)) EXPECT_FALSE(plan.grads_streamed(l)) << l;
  }
  // The embedding's gradients (item -1, after every block's backward: any dead set will do), only where the backward's
  // last operation alone writes them.
  if (a.holds_embedding_grads()) EXPECT_TRUE(model_embedding_grads_last(cfg));
  int64_t least = sets, above = 0;
  for (int l = L - 1; l >= -1; --l) {
    if (l == -1) {
      if (!a.holds_embedding_grads()) continue;
      const int64_t e = static_cast<int64_t>(device_alloc_bytes({segs.size[0]}, master_dtype_for(compute)));
      EXPECT_GE(a.embedding_grads_at, 0);
      EXPECT_LT(a.embedding_grads_at, sets);
      for (int j = 0; j < L; ++j)
        if (a.holds_grads(j))
          EXPECT_TRUE(a.grads_at[static_cast<size_t>(j)] >= a.embedding_grads_at + e) << "block " << j;
      above += e;
      least = std::max(least, above);
      apart += e;
      continue;
    }
    const size_t k = static_cast<size_t>(l);
    if (!a.holds_grads(l)) continue;
    const int64_t at = a.grads_at[k];
    EXPECT_GE(at, end[k]) << "block " << l << "'s gradients over a set its backward reads";
    EXPECT_LT(at, sets) << "block " << l << "'s gradients overlap no set";
    EXPECT_LE(at + grad[k], a.bytes) << l;
    for (int j = 0; j < l; ++j)
      if (a.holds_grads(j))
        EXPECT_TRUE(a.grads_at[static_cast<size_t>(j)] + grad[static_cast<size_t>(j)] <= at ||
                    at + grad[k] <= a.grads_at[static_cast<size_t>(j)])
            << "blocks " << j << " and " << l;
    above += grad[k];
    least = std::max(least, end[k] + above);
    apart += grad[k];
  }
  EXPECT_EQ(a.bytes, least);
  EXPECT_EQ(a.saved_bytes, sets + apart - a.bytes);
  EXPECT_GT(a.saved_bytes, 0);
  return a.blocks_with_grads() + (a.holds_embedding_grads() ? 1 : 0);
}

TEST(ActivationArena, GradientsLieInDeadSetsOnly) {
  const ModelConfig gpt{.vocab = 256, .layers = 8, .dim = 32, .heads = 2, .seq = 32};
  const ModelConfig llama{.family = "llama", .vocab = 256, .layers = 8, .dim = 64, .heads = 4, .seq = 16, .kv_heads = 2,
                          .ffn = 160, .tied_embeddings = false};
  const Plan mix = Plan::from_json(json::parse(R"({"layers": [{"activation": "swap"}, {"activation": "resident"},
      {"activation": "resident"}, {"activation": "recompute"}, {"activation": "swap"}, {"activation": "recompute"},
      {"activation": "swap"}, {"activation": "resident"}]})"), 8, "mix").value();
  const Plan halves = Plan::from_json(json::parse(R"({"default": {"activation": {"attention": "resident",
      "mlp": "recompute"}}, "layers": {"5": {"activation": "recompute"}}})"), 8, "halves").value();
  int cases = 0, with_grads = 0;
  for (const ModelConfig& cfg : {gpt, llama})
    for (const int batch : {1, 2, 4, 16})
      for (const Plan& plan : {Plan::resolve("in-core", 8, 2).value(), Plan::resolve("in-core-selective", 8, 2).value(),
                               Plan::resolve("recompute", 8, 2).value(), mix, halves})
        for (const DType dt : {DType::kF32, DType::kBF16}) {
          SCOPED_TRACE(cfg.family + " batch " + std::to_string(batch) + " " + plan.source + " " + dtype_name(dt));
          ++cases;
          with_grads += expect_arena_invariants(plan, cfg, batch, dt) > 0;
        }
  // (The recompute plan has no resident set, so no arena; the others have one.)
  EXPECT_EQ(with_grads, cases * 4 / 5);
}

// The Llama-3-8B slice of issue 45 (L8 d4096, 32 heads over 8, SwiGLU 14336, T 2048, B 2, bf16): a block's gradients
// (f32) are larger than its activations, so they spread over several dead sets. Untied (as Llama 3 8B), the
// embedding's gradients (V x d f32) come first, at the bottom, then blocks 0-2's, up to a top (e + 3 g) above the
// sets; the other blocks' would lie above every set and keep buffers of their own. Saved: the sets' bytes. Tied, the
// head writes the embedding's gradients before any set is dead: blocks 0-4 from the end of block 0's set.
TEST(ActivationArena, LargeGradientsSpreadOverSeveralSets) {
  ModelConfig cfg{.family = "llama", .vocab = 128256, .layers = 8, .dim = 4096, .heads = 32, .seq = 2048,
                  .kv_heads = 8, .ffn = 14336, .tied_embeddings = false, .rope_theta = 500000};
  const Plan plan = Plan::resolve("in-core", 8, 2).value();
  const ActivationArena a = activation_arena(plan, cfg, 2, DType::kBF16);
  const int64_t set = arena_set_bytes(plan, cfg, 2, DType::kBF16, 0);  // its activations and output
  const ParamSegments segs = model_segments(cfg);
  const int64_t g = static_cast<int64_t>(device_alloc_bytes({segs.size[1]}, DType::kF32));
  const int64_t e = static_cast<int64_t>(device_alloc_bytes({segs.size[0]}, DType::kF32));
  ASSERT_GT(g, set);
  ASSERT_GE(e + 3 * g, 8 * set);  // (the packing's arithmetic below holds for these sizes)
  ASSERT_LT(e + 2 * g, 8 * set);
  EXPECT_TRUE(a.holds_embedding_grads());
  EXPECT_EQ(a.embedding_grads_at, 0);
  EXPECT_EQ(a.blocks_with_grads(), 3);
  for (int l = 0; l < 3; ++l) EXPECT_EQ(a.grads_at[static_cast<size_t>(l)], e + l * g) << l;
  for (int l = 3; l < 8; ++l) EXPECT_FALSE(a.holds_grads(l)) << l;
  EXPECT_EQ(a.bytes, e + 3 * g);
  EXPECT_EQ(a.saved_bytes, 8 * set);
  // Block 0's gradients cross from block 3's set into block 4's.
  EXPECT_LT(a.grads_at[0], a.set_at[4]);
  EXPECT_GT(a.grads_at[0] + g, a.set_at[4]);
  expect_arena_invariants(plan, cfg, 2, DType::kBF16);
  cfg.tied_embeddings = true;
  const ActivationArena tied = activation_arena(plan, cfg, 2, DType::kBF16);
  ASSERT_LT(set + 5 * g, 8 * set + g);
  EXPECT_FALSE(tied.holds_embedding_grads());
  EXPECT_EQ(tied.blocks_with_grads(), 5);
  for (int l = 0; l < 5; ++l) EXPECT_EQ(tied.grads_at[static_cast<size_t>(l)], set + l * g) << l;
  EXPECT_EQ(tied.bytes, set + 5 * g);
  EXPECT_EQ(tied.saved_bytes, 8 * set + 5 * g - (set + 5 * g));
  expect_arena_invariants(plan, cfg, 2, DType::kBF16);
  cfg.tied_embeddings = false;
  // Off, or with the CPU optimizer: no arena.
  Plan off = plan;
  off.grads_in_activations = false;
  EXPECT_EQ(activation_arena(off, cfg, 2, DType::kBF16).bytes, 0);
  Plan cpu = Plan::resolve("in-core", 8, 2).value();
  cpu.optimizer = OptimizerPlacement::kCpu;
  EXPECT_EQ(activation_arena(cpu, cfg, 2, DType::kBF16).bytes, 0);
}

}  // namespace
}  // namespace tt
