// Note [kernel calls] (model/model.h): the GPT's own passes, run by the executor on the CPU backend under plans that
// recompute, rebuild and swap, announce exactly the kernels model_kernel_calls lists for each piece, in order.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "exec/executor.h"
#include "exec/grad_reducer.h"
#include "model/gpt.h"

namespace tt {
namespace {

// One piece of a pass as the model ran it: where it started and the kernels it announced.
struct Group {
  ModelPiece piece;
  int segment;
  bool is_after = false;  // after a boundary: nothing should run until the next one
  std::vector<std::string> names;
  std::vector<int64_t> collectives;  // bytes of each tp_sum / tp_max
};

// Forwards every boundary and op to the executor's hooks and records them in groups.
class Recorder final : public ModelHooks {
 public:
  Recorder(ModelHooks& inner, std::vector<Group>& groups, bool training) : in_(inner), g_(groups), train_(training) {}
  void at(Boundary b, int segment) override {
    in_.at(b, segment);  // the executor may rebuild here: those groups come first
    Group g{ModelPiece::kForward, segment, false, {}, {}};
    switch (b) {
      case Boundary::kBeforeForward: g.piece = ModelPiece::kForward; break;
      case Boundary::kBeforeBackward: g.piece = ModelPiece::kBackward; break;
      case Boundary::kBeforeHead: g.piece = train_ ? ModelPiece::kHeadWithBackward : ModelPiece::kHead; break;
      default: g.is_after = true;
    }
    g_.push_back(g);
  }
  void op(const char* name) override {
    in_.op(name);
    g_.back().names.push_back(name);
  }
  void tp_sum(const char* name, const Tensor& t) override {
    in_.tp_sum(name, t);
    g_.back().collectives.push_back(static_cast<int64_t>(t.numel() * dtype_size(t.dtype())));
  }
  void tp_max(const char* name, const Tensor& t) override {
    in_.tp_max(name, t);
    g_.back().collectives.push_back(static_cast<int64_t>(t.numel() * dtype_size(t.dtype())));
  }

 private:
  ModelHooks& in_;
  std::vector<Group>& g_;
  bool train_;
};

// A family's model with every boundary, kernel and collective recorded: the executor runs this wrapper, which runs
// the family's own passes with a Recorder in front of the executor's hooks.
class RecordingModel final : public Model {
 public:
  explicit RecordingModel(std::unique_ptr<Model> inner)
      : Model(inner->family(), inner->backend(), inner->config(), inner->batch(), inner->dtype(), inner->tensors()),
        in_(std::move(inner)) {}
  std::vector<Group> groups;
  bool training = false;
  void forward_blocks(ModelHooks& h) override {
    sync();
    Recorder r(h, groups, training);
    in_forward_ = true;
    in_->forward_blocks(r);
    in_forward_ = false;
  }
  void lm_head(ModelHooks& h, bool with_backward) override {
    sync();
    Recorder r(h, groups, with_backward);
    in_->lm_head(r, with_backward);
  }
  void backward_blocks(ModelHooks& h) override {
    sync();
    Recorder r(h, groups, true);
    in_->backward_blocks(r);
  }
  void forward_block(ModelHooks& h, int l) override {
    // The family's forward_blocks calls its own forward_block (recorded as the block's forward); the executor
    // calls this one to rebuild a block.
    piece(h, ModelPiece::kRebuildBlock, l, [&](ModelHooks& r) { in_->forward_block(r, l); });
  }
  void rebuild_norms(ModelHooks& h, int l) override {
    piece(h, ModelPiece::kRebuildNorms, l, [&](ModelHooks& r) { in_->rebuild_norms(r, l); });
  }
  void rebuild_mlp(ModelHooks& h, int l) override {
    piece(h, ModelPiece::kRebuildMlp, l, [&](ModelHooks& r) { in_->rebuild_mlp(r, l); });
  }
  void rebuild_act(ModelHooks& h, int l) override {
    piece(h, ModelPiece::kRebuildAct, l, [&](ModelHooks& r) { in_->rebuild_act(r, l); });
  }
  void compute_logits_rows(const Tensor& out, int64_t row_begin) override { in_->compute_logits_rows(out, row_begin); }
  void decode_prefill(const NamedTensors& s, int n) override { in_->decode_prefill(s, n); }
  void decode_step(const NamedTensors& s) override { in_->decode_step(s); }

 private:
  // What the executor set on this model, onto the family's.
  void sync() {
    in_->set_tp_rank(tp_rank());
    in_->set_act_apart(act_apart_);
  }
  template <typename F>
  void piece(ModelHooks& h, ModelPiece p, int l, F run) {
    TT_CHECK(!in_forward_, "a rebuild inside the forward");
    sync();
    groups.push_back({p, 1 + l, false, {}, {}});
    Recorder r(h, groups, true);
    run(r);
  }
  std::unique_ptr<Model> in_;
  bool in_forward_ = false;
};

// A reducer that reduces nothing: one process runs a tensor-parallel rank's passes with it.
class NoCollectives final : public GradReducer {
 public:
  int ranks() const override { return 2; }
  void reduce(const Tensor&, Stream&) override {}
  void sum(const Tensor&, Stream&) override {}
  void max(const Tensor&, Stream&) override {}
  void broadcast(const Tensor&, int, Stream&) override {}
  void allgather(const Tensor&, Stream&) override {}
  void scatter(const Tensor&, const Tensor&, int, Stream&) override {}
  Status status() const override { return Status::ok(); }
};

// The executor runs spec's passes on the CPU backend with the recording model, as a run does: an evaluation's
// forward (the head without its backward), then a training forward and backward (rebuilds in the backward); the
// groups the model recorded. tp_reducer: what stands for the model dimension's sums (tp > 1).
std::vector<Group> record_passes(const ExecSpec& spec, GradReducer* tp_reducer = nullptr) {
  auto be = cpu::create_backend({.device_budget = int64_t(64) << 20, .threads = 1}).value();
  RecordingModel* model = nullptr;
  auto ex = Executor::create(*be, spec, [&](Backend& b, const ModelConfig& c, int n, DType dt, ModelTensors t) {
    auto m = std::make_unique<RecordingModel>(create_model(b, c, n, dt, std::move(t)));
    model = m.get();
    return std::unique_ptr<Model>(std::move(m));
  });
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  if (!ex.is_ok()) return {};
  if (tp_reducer != nullptr) ex.value()->set_tp_reducer(tp_reducer);
  EXPECT_TRUE(ex.value()->init_params(1).is_ok());
  std::vector<int32_t> tokens(static_cast<size_t>(spec.batch * spec.model.seq), 7);
  be->copy_h2d(ex.value()->tokens(), tokens.data(), be->compute_stream());
  be->copy_h2d(ex.value()->targets(), tokens.data(), be->compute_stream());
  EXPECT_TRUE(be->synchronize_all().is_ok());
  ex.value()->forward();
  model->training = true;
  ex.value()->forward_backward();
  EXPECT_TRUE(be->synchronize_all().is_ok());
  return model->groups;
}

// Every family, GPT-2 and a Llama with grouped-query heads, QKV biases and its own head.
std::vector<ModelConfig> families(int layers, int tp = 1, bool split_vocab = false) {
  return {ModelConfig{.vocab = 200, .layers = layers, .dim = 32, .heads = 4, .seq = 16, .tp = tp,
                      .split_vocab = split_vocab},
          ModelConfig{.family = "llama", .vocab = 200, .layers = layers, .dim = 32, .heads = 4, .seq = 16,
                      .kv_heads = 2, .ffn = 40, .tied_embeddings = false, .qkv_bias = true, .tp = tp,
                      .split_vocab = split_vocab}};
}

void check_kernel_calls(const ModelConfig& cfg) {
  const int batch = 3;
  // Note [rebuilt activation]: blocks 0 and 1 swap with their GELU output rebuilt, block 2 recomputes.
  const std::string gelu_swap =
      R"({"default": {"activation": {"attention": "swap", "mlp": "swap", "gelu": "recompute"}},
          "layers": {"2": {"activation": "recompute"}}})";
  const std::vector<std::string> plans = {"in-core", "recompute", "swap-attention-recompute-mlp-norms",
                                          "in-core-selective", gelu_swap};
  for (const std::string& plan_name : plans) {
    SCOPED_TRACE(plan_name);
    ExecSpec spec;
    spec.model = cfg;
    spec.batch = batch;
    spec.plan = plan_name[0] == '{' ? Plan::from_json(nlohmann::json::parse(plan_name), cfg.layers, "gelu").value()
                                    : Plan::resolve(plan_name, cfg.layers, 2).value();
    spec.lm_chunk_rows = 20;  // three chunks of 48 rows, the last one short
    std::vector<Group> groups = record_passes(spec);
    ASSERT_FALSE(groups.empty());

    int pieces = 0, rebuilds = 0, apart = 0;
    for (Group& g : groups) {
      // A block whose GELU output is rebuilt runs its forward with the GELU apart.
      if (!g.is_after && g.piece == ModelPiece::kForward && g.segment >= 1 && g.segment <= cfg.layers &&
          spec.plan.act_rebuilt(g.segment - 1)) {
        g.piece = ModelPiece::kForwardActApart;
        ++apart;
      }
      if (g.is_after) {
        EXPECT_EQ(g.names, std::vector<std::string>{}) << "kernels after a boundary, before the next";
        continue;
      }
      std::vector<std::string> want;
      for (const NamedKernelCall& k : model_kernel_calls(cfg, batch, DType::kF32, spec.lm_chunk_rows, g.piece, g.segment))
        want.push_back(k.name);
      EXPECT_EQ(g.names, want) << "piece " << static_cast<int>(g.piece) << " of segment " << g.segment;
      ++pieces;
      rebuilds += g.piece == ModelPiece::kRebuildBlock || g.piece == ModelPiece::kRebuildNorms ||
                  g.piece == ModelPiece::kRebuildMlp || g.piece == ModelPiece::kRebuildAct;
    }
    int want_apart = 0;
    for (int l = 0; l < cfg.layers; ++l) want_apart += spec.plan.act_rebuilt(l) ? 2 : 0;  // two forwards
    EXPECT_EQ(apart, want_apart);
    // Two forwards of L + 2 segments, two heads, one backward of L + 2 segments, and the plan's rebuilds.
    EXPECT_EQ(pieces - rebuilds, 3 * (cfg.layers + 2) + 2);
    if (plan_name != "in-core") {
      EXPECT_GT(rebuilds, 0);
    }
  }
}

TEST(ModelKernelCalls, TheModelRunsExactlyTheListedKernelsOfEveryPiece) {
  for (const ModelConfig& cfg : families(3)) {
    SCOPED_TRACE(cfg.describe());
    check_kernel_calls(cfg);
  }
}

// Note [tensor parallel]: a rank's passes (model=2, the vocabulary split and not) run exactly the sums and maxima
// model_tp_collectives lists for each piece, in bytes and order, as the performance model prices them.
void check_tp_collectives(const ModelConfig& cfg) {
  const int batch = 3;
  ExecSpec spec;
  spec.model = cfg;
  spec.batch = batch;
  spec.plan = Plan::resolve("in-core-selective", cfg.layers, 2).value();  // a rebuilt piece or two as well
  spec.lm_chunk_rows = 20;
  NoCollectives none;
  std::vector<Group> groups = record_passes(spec, &none);
  ASSERT_FALSE(groups.empty());
  int64_t total = 0;
  for (Group& g : groups) {
    if (g.is_after) {
      EXPECT_TRUE(g.collectives.empty()) << "a collective after a boundary, before the next";
      continue;
    }
    if (g.piece == ModelPiece::kForward && g.segment >= 1 && g.segment <= cfg.layers &&
        spec.plan.act_rebuilt(g.segment - 1))
      g.piece = ModelPiece::kForwardActApart;
    EXPECT_EQ(g.collectives, model_tp_collectives(cfg, batch, DType::kF32, spec.lm_chunk_rows, g.piece, g.segment))
        << "piece " << static_cast<int>(g.piece) << " of segment " << g.segment;
    for (int64_t b : g.collectives) total += b;
  }
  EXPECT_GT(total, 0);
}

TEST(ModelKernelCalls, TheModelRunsExactlyTheListedTensorParallelCollectives) {
  for (const bool split_vocab : {false, true}) {
    for (const ModelConfig& cfg : families(2, 2, split_vocab)) {
      SCOPED_TRACE(cfg.describe() + (split_vocab ? " vocabulary split" : " vocabulary whole"));
      check_tp_collectives(cfg);
    }
  }
}

// The listed shapes are the model's: the FLOPs of a block's forward are 24 B T C^2 for its GEMMs plus its
// attention's, as the schedule counts them.
TEST(GptKernelCalls, ABlocksFlopsAreItsGemmsAndAttention) {
  const ModelConfig cfg{.vocab = 256, .layers = 2, .dim = 64, .heads = 4, .seq = 32};
  const int B = 2;
  double gemm = 0, attn = 0;
  for (const NamedKernelCall& k : model_kernel_calls(cfg, B, DType::kBF16, 0, ModelPiece::kForward, 1)) {
    if (k.call.op == KernelOp::kAttentionForward) attn += k.call.flops();
    else if (k.call.compute_bound()) gemm += k.call.flops();
  }
  const double BT = B * cfg.seq, C = cfg.dim;
  EXPECT_DOUBLE_EQ(gemm, 24 * BT * C * C);
  EXPECT_DOUBLE_EQ(attn, 2.0 * B * cfg.seq * cfg.seq * C);
}

// Note [tensor parallel]: a rank of a block split tp ways runs 1/tp of its GEMMs' and attention's FLOPs.
TEST(GptKernelCalls, ATensorParallelRankRunsItsShareOfABlock) {
  for (int tp : {2, 4}) {
    const ModelConfig cfg{.vocab = 256, .layers = 2, .dim = 64, .heads = 4, .seq = 32, .tp = tp};
    double gemm = 0, attn = 0;
    for (const NamedKernelCall& k : model_kernel_calls(cfg, 2, DType::kBF16, 0, ModelPiece::kForward, 1)) {
      if (k.call.op == KernelOp::kAttentionForward) attn += k.call.flops();
      else if (k.call.compute_bound()) gemm += k.call.flops();
    }
    const double BT = 2 * cfg.seq, C = cfg.dim;
    EXPECT_DOUBLE_EQ(gemm, 24 * BT * C * C / tp) << tp;
    EXPECT_DOUBLE_EQ(attn, 2.0 * 2 * cfg.seq * cfg.seq * C / tp) << tp;
    // With the vocabulary split, the LM head's GEMMs are the rank's columns' too.
    ModelConfig v = cfg;
    v.split_vocab = true;
    double head = 0, whole_head = 0;
    for (const NamedKernelCall& k : model_kernel_calls(v, 2, DType::kBF16, 0, ModelPiece::kHeadWithBackward, 0))
      if (k.call.compute_bound()) head += k.call.flops();
    for (const NamedKernelCall& k : model_kernel_calls(cfg, 2, DType::kBF16, 0, ModelPiece::kHeadWithBackward, 0))
      if (k.call.compute_bound()) whole_head += k.call.flops();
    EXPECT_DOUBLE_EQ(head, whole_head / tp) << tp;
  }
}

}  // namespace
}  // namespace tt
