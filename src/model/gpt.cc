#include "model/gpt.h"

#include <algorithm>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/rng.h"

namespace tt {

namespace {

class GptFamily final : public ModelFamily {
 public:
  const char* name() const override { return "gpt2"; }
  const char* display() const override { return "GPT-2"; }
  const char* summary() const override {
    return "GPT-2 as nanoGPT and llm.c: LayerNorm, GELU MLP, learned positions, tied head";
  }
  Status validate(const ModelConfig& cfg) const override;
  int ffn(const ModelConfig& cfg) const override { return 4 * cfg.dim; }
  std::vector<ParamInfo> param_layout(const ModelConfig& cfg) const override;
  std::vector<TensorRequest> block_activations(const ModelConfig& cfg, int batch, DType compute,
                                               unsigned parts) const override;
  std::vector<TensorRequest> fixed_tensors(const ModelConfig& cfg, int batch, DType compute,
                                           int64_t lm_chunk_rows) const override;
  std::vector<TensorRequest> decode_tensors(const ModelConfig& cfg, DType compute) const override;
  std::vector<NamedKernelCall> kernel_calls(const ModelConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows,
                                            ModelPiece piece, int segment) const override;
  std::vector<int64_t> tp_collectives(const ModelConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows,
                                      ModelPiece piece, int segment) const override {
    return decoder_tp_collectives(cfg, batch, compute, lm_chunk_rows, piece, segment);
  }
  void init_values(const ModelConfig& cfg, uint64_t seed, float* out) const override;
  void init_values(const ModelConfig& cfg, uint64_t seed, double* out) const override;
  std::unique_ptr<Model> create(Backend& backend, const ModelConfig& cfg, int batch, DType compute,
                                ModelTensors tensors) const override {
    return std::make_unique<Gpt>(backend, cfg, batch, compute, std::move(tensors));
  }
  std::vector<HfParam> hf_tensors(const ModelConfig& cfg) const override;
  nlohmann::json hf_config(const ModelConfig& cfg) const override;
  bool reads_hf_model_type(const std::string& type) const override { return type == "gpt2"; }
  Result<ModelConfig> from_hf_config(const nlohmann::json& j, int seq, const std::string& where) const override;
};

}  // namespace

const ModelFamily& gpt2_family() {
  static const GptFamily family;
  return family;
}

Status GptFamily::validate(const ModelConfig& cfg) const {
  // The GPT-2 family has none of the other families' options.
  const ModelConfig plain;
  TT_RETURN_IF(cfg.kv_heads != 0 && cfg.kv_heads != cfg.heads, kInvalidArgument,
               "the gpt2 family has no grouped-query attention (--kv-heads %d with --heads %d)", cfg.kv_heads,
               cfg.heads);
  TT_RETURN_IF(cfg.ffn != 0 && cfg.ffn != 4 * cfg.dim, kInvalidArgument,
               "the gpt2 family's MLP is 4 x dim wide (%d), not --ffn %d", 4 * cfg.dim, cfg.ffn);
  TT_RETURN_IF(!cfg.tied_embeddings || cfg.qkv_bias != plain.qkv_bias || cfg.rope_theta != plain.rope_theta ||
                   cfg.rope_scaling != plain.rope_scaling || cfg.norm_eps != plain.norm_eps,
               kInvalidArgument,
               "the gpt2 family has a tied LM head, biases everywhere, learned positions and LayerNorm's epsilon "
               "1e-5: untied embeddings, QKV-bias, RoPE and epsilon options are the llama family's");
  return Status::ok();
}

std::vector<ParamInfo> GptFamily::param_layout(const ModelConfig& cfg) const {
  const int64_t V = cfg.padded_vocab(), C = cfg.dim, T = cfg.seq, tp = cfg.tp, Cl = C / tp, Fl = 4 * C / tp;
  std::vector<ParamInfo> out;
  int64_t offset = 0;
  // rows: how the parameter splits over tensor-parallel ranks (ParamInfo::row_blocks; empty: its columns).
  auto add = [&](std::string name, Shape shape, bool decay, int layer, bool sharded = false,
                 std::vector<int64_t> rows = {}) {
    out.push_back(ParamInfo{std::move(name), shape, offset, decay, layer, sharded, std::move(rows)});
    offset += shape.numel();
  };
  if (cfg.split_vocab) {  // Note [vocabulary-parallel cross-entropy]: replicated wpe first, then this rank's rows
    add("wpe", {T, C}, true, -1);
    add("wte", {V / tp, C}, true, -1, true, {V});
  } else {
    add("wte", {V, C}, true, -1, false, {V});
    add("wpe", {T, C}, true, -1);
  }
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    if (tp > 1) {  // Note [tensor parallel]: replicated, then sharded (decaying matrices together)
      add(p + "ln1.w", {C}, false, l);
      add(p + "ln1.b", {C}, false, l);
      add(p + "attn.proj.b", {C}, false, l);
      add(p + "ln2.w", {C}, false, l);
      add(p + "ln2.b", {C}, false, l);
      add(p + "mlp.proj.b", {C}, false, l);
      add(p + "attn.qkv.w", {3 * Cl, C}, true, l, true, {C, C, C});
      add(p + "attn.proj.w", {C, Cl}, true, l, true);
      add(p + "mlp.fc.w", {Fl, C}, true, l, true, {4 * C});
      add(p + "mlp.proj.w", {C, Fl}, true, l, true);
      add(p + "attn.qkv.b", {3 * Cl}, false, l, true, {C, C, C});
      add(p + "mlp.fc.b", {Fl}, false, l, true, {4 * C});
      continue;
    }
    add(p + "ln1.w", {C}, false, l);
    add(p + "ln1.b", {C}, false, l);
    add(p + "attn.qkv.w", {3 * C, C}, true, l, false, {C, C, C});
    add(p + "attn.qkv.b", {3 * C}, false, l, false, {C, C, C});
    add(p + "attn.proj.w", {C, C}, true, l);
    add(p + "attn.proj.b", {C}, false, l);
    add(p + "ln2.w", {C}, false, l);
    add(p + "ln2.b", {C}, false, l);
    add(p + "mlp.fc.w", {4 * C, C}, true, l, false, {4 * C});
    add(p + "mlp.fc.b", {4 * C}, false, l, false, {4 * C});
    add(p + "mlp.proj.w", {C, 4 * C}, true, l);
    add(p + "mlp.proj.b", {C}, false, l);
  }
  add("lnf.w", {C}, false, -1);
  add("lnf.b", {C}, false, -1);
  return out;
}

std::vector<TensorRequest> GptFamily::block_activations(const ModelConfig& cfg, int batch, DType dt,
                                                        unsigned parts) const {
  const int64_t B = batch, T = cfg.seq, C = cfg.dim, H = cfg.heads / cfg.tp, Cl = C / cfg.tp, Fl = 4 * C / cfg.tp;
  const DType md = master_dtype_for(dt);
  const TensorClass A = TensorClass::kActivation;
  // In the order of the forward, each with its part.
  const std::pair<BlockPart, TensorRequest> all[] = {
      {kPartNorms, {"ln1", {B, T, C}, dt, A}},      {kPartNorms, {"ln1_mean", {B, T}, md, A}},
      {kPartNorms, {"ln1_rstd", {B, T}, md, A}},    {kPartCore, {"qkv", {B, T, 3 * Cl}, dt, A}},
      {kPartCore, {"atty", {B, T, Cl}, dt, A}},      {kPartCore, {"lse", {B, H, T}, md, A}},
      {kPartCore, {"res2", {B, T, C}, dt, A}},      {kPartNorms, {"ln2", {B, T, C}, dt, A}},
      {kPartNorms, {"ln2_mean", {B, T}, md, A}},    {kPartNorms, {"ln2_rstd", {B, T}, md, A}},
      {kPartFc, {"fch", {B, T, Fl}, dt, A}},        {kPartAct, {"fch_gelu", {B, T, Fl}, dt, A}}};
  std::vector<TensorRequest> r;
  for (const auto& [part, a] : all)
    if ((parts & part) != 0) r.push_back(a);
  return r;
}

std::vector<TensorRequest> GptFamily::fixed_tensors(const ModelConfig& cfg, int batch, DType dt,
                                                    int64_t lm_chunk_rows) const {
  const int64_t B = batch, T = cfg.seq, C = cfg.dim, V = cfg.local_vocab(), Cl = C / cfg.tp, Fl = 4 * C / cfg.tp;
  const DType md = master_dtype_for(dt);
  const TensorClass A = TensorClass::kActivation, W = TensorClass::kWorkspace;
  std::vector<TensorRequest> r = {{"tokens", {B, T}, DType::kI32, TensorClass::kInput},
                                  {"targets", {B, T}, DType::kI32, TensorClass::kInput},
                                  {"encoded", {B, T, C}, dt, A}};
  for (int l = 0; l < cfg.layers; ++l) r.push_back({"h." + std::to_string(l) + ".res3", {B, T, C}, dt, A, l});
  const int64_t chunk = lm_chunk_rows > 0 ? std::min(lm_chunk_rows, B * T) : model_default_lm_chunk_rows(cfg, batch, dt);
  for (TensorRequest t : std::initializer_list<TensorRequest>{
           {"lnf", {B, T, C}, dt, A, -1, true}, {"lnf_mean", {B, T}, md, A, -1, true},
           {"lnf_rstd", {B, T}, md, A, -1, true}, {"logits", {chunk, V}, dt, W, -1, true},
           {"losses", {B, T}, md, A},       {"proj_out", {B, T, C}, dt, W},
           {"dresidual", {B, T, C}, dt, W},  {"dln", {B, T, C}, dt, W},       {"datty", {B, T, Cl}, dt, W},
           {"dqkv", {B, T, 3 * Cl}, dt, W},  {"dfch", {B, T, Fl}, dt, W}})
    r.push_back(std::move(t));
  if (cfg.split_vocab) r.push_back({"xent_stats", {3, chunk}, md, W, -1, true});
  return r;
}

std::vector<TensorRequest> GptFamily::decode_tensors(const ModelConfig& cfg, DType dt) const {
  const int64_t L = cfg.layers, T = cfg.seq, C = cfg.dim;
  const DType md = master_dtype_for(dt);
  const TensorClass W = TensorClass::kWorkspace;
  return {{"decode.cache", {L, T, 3 * C}, dt, W}, {"decode.token", {1}, DType::kI32, TensorClass::kInput},
          {"decode.pos", {1}, DType::kI32, TensorClass::kInput}, {"decode.qkv", {1, 3 * C}, dt, W},
          {"decode.x", {1, C}, dt, W},            {"decode.res2", {1, C}, dt, W},
          {"decode.ln", {1, C}, dt, W},           {"decode.atty", {1, C}, dt, W},
          {"decode.proj", {1, C}, dt, W},         {"decode.fch", {1, 4 * C}, dt, W},
          {"decode.fch_gelu", {1, 4 * C}, dt, W}, {"decode.mean", {1}, md, W},
          {"decode.rstd", {1}, md, W},            {"decode.logits", {1, cfg.padded_vocab()}, dt, W}};
}

Gpt::Gpt(Backend& backend, const ModelConfig& cfg, int batch, DType dtype, ModelTensors tensors)
    : Model(gpt2_family(), backend, cfg, batch, dtype, std::move(tensors)) {
  acts_.resize(static_cast<size_t>(cfg.layers));
  for (int l = 0; l < cfg.layers; ++l) {
    BlockActs& a = acts_[static_cast<size_t>(l)];
    const std::string h = "h." + std::to_string(l) + ".";
    const std::pair<const char*, Tensor*> table[] = {
        {"ln1", &a.ln1},   {"ln1_mean", &a.ln1_mean}, {"ln1_rstd", &a.ln1_rstd}, {"qkv", &a.qkv},
        {"atty", &a.atty}, {"lse", &a.lse},           {"res2", &a.res2},         {"ln2", &a.ln2},
        {"ln2_mean", &a.ln2_mean}, {"ln2_rstd", &a.ln2_rstd}, {"fch", &a.fch},  {"fch_gelu", &a.fch_gelu},
        {"res3", &a.res3}};
    for (const auto& [n, t] : table) *t = tensor(h + n);
  }
  const std::pair<const char*, Tensor*> fixed[] = {
      {"tokens", &tokens_},       {"encoded", &encoded_},     {"lnf", &lnf_},   {"lnf_mean", &lnf_mean_},
      {"lnf_rstd", &lnf_rstd_},   {"proj_out", &proj_out_},   {"dresidual", &dresidual_},
      {"dln", &dln_},             {"datty", &datty_},         {"dqkv", &dqkv_}, {"dfch", &dfch_}};
  for (const auto& [n, t] : fixed) *t = tensor(n);
  wte_index_ = cfg.split_vocab ? 1 : 0;
  TT_CHECK(layout_[wte_index_].name == "wte", "Gpt: wte is not parameter %zu", wte_index_);
  // Each block's parameters by role (their order in the layout depends on tp: param_layout).
  static constexpr const char* kRoles[12] = {"ln1.w", "ln1.b", "attn.qkv.w", "attn.qkv.b", "attn.proj.w", "attn.proj.b",
                                             "ln2.w", "ln2.b", "mlp.fc.w",   "mlp.fc.b",   "mlp.proj.w",  "mlp.proj.b"};
  layer_index_.assign(static_cast<size_t>(cfg.layers), {});
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string prefix = "h." + std::to_string(l) + ".";
    for (size_t k = 0; k < 12; ++k) {
      const size_t base = 2 + 12 * static_cast<size_t>(l);
      size_t i = base;
      while (i < base + 12 && layout_[i].name != prefix + kRoles[k]) ++i;
      TT_CHECK(i < base + 12, "Gpt: block %d has no parameter %s", l, kRoles[k]);
      layer_index_[static_cast<size_t>(l)][k] = i;
    }
  }
}

Gpt::LayerParams Gpt::compute_layer(int layer) const {
  const auto& ix = layer_index_[static_cast<size_t>(layer)];
  auto v = [&](size_t k) { return cparam(ix[k]); };
  return LayerParams{v(0), v(1), v(2), v(3), v(4), v(5), v(6), v(7), v(8), v(9), v(10), v(11)};
}

Gpt::LayerParams Gpt::grad_layer(int layer) const {
  const auto& ix = layer_index_[static_cast<size_t>(layer)];
  auto v = [&](size_t k) { return grad(ix[k]); };
  return LayerParams{v(0), v(1), v(2), v(3), v(4), v(5), v(6), v(7), v(8), v(9), v(10), v(11)};
}

void Gpt::forward_blocks(ModelHooks& h) {
  h.at(Boundary::kBeforeForward, 0);
  h.op("embedding_forward");
  if (cfg_.split_vocab) {  // Note [vocabulary-parallel cross-entropy]: wpe from rank 0, each token's row from its owner
    be_.embedding_forward(encoded_, tokens_, wte(), tp_rank_ == 0 ? wpe() : Tensor(), vocab_begin());
    h.tp_sum("embedding", encoded_);
  } else {
    be_.embedding_forward(encoded_, tokens_, wte(), wpe());
  }
  h.at(Boundary::kAfterForward, 0);
  for (int l = 0; l < cfg_.layers; ++l) {
    h.at(Boundary::kBeforeForward, 1 + l);
    forward_block(h, l);
    h.at(Boundary::kAfterForward, 1 + l);
  }
  const size_t lnf = layout_.size() - 2;
  h.at(Boundary::kBeforeForward, cfg_.layers + 1);
  h.op("layernorm_forward");
  be_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, acts_.back().res3, cparam(lnf), cparam(lnf + 1));
  h.at(Boundary::kAfterForward, cfg_.layers + 1);
}

void Gpt::forward_block(ModelHooks& h, int l) {
  const LayerParams w = compute_layer(l);
  const BlockActs& a = acts_[static_cast<size_t>(l)];
  const Tensor x = block_input(l);
  h.op("layernorm_forward");
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b);
  h.op("matmul_forward qkv");
  be_.matmul_forward(a.qkv, a.ln1, w.qkvw, w.qkvb);
  h.op("attention_forward");
  be_.attention_forward(a.atty, a.lse, a.qkv, cfg_.heads / cfg_.tp);
  h.op("matmul_forward attn.proj");
  // Note [tensor parallel]: a row-parallel projection's partial sums; the bias once, from rank 0.
  const bool tp = cfg_.tp > 1;
  be_.matmul_forward(proj_out_, a.atty, w.projw, tp && tp_rank_ != 0 ? Tensor() : w.projb);
  if (tp) h.tp_sum("attn.proj", proj_out_);
  h.op("residual_layernorm_forward");
  be_.residual_layernorm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, proj_out_, w.ln2w, w.ln2b);
  if (act_apart(l)) {  // Note [rebuilt activation]: the kernel its rebuild runs
    h.op("matmul_forward mlp.fc");
    be_.matmul_forward(a.fch, a.ln2, w.fcw, w.fcb);
    h.op("gelu_forward mlp.gelu");
    be_.gelu_forward(a.fch_gelu, a.fch);
  } else {
    h.op("matmul_gelu_forward mlp.fc");
    be_.matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, w.fcw, w.fcb);
  }
  h.op("matmul_forward mlp.proj");
  be_.matmul_forward(proj_out_, a.fch_gelu, w.fcprojw, tp && tp_rank_ != 0 ? Tensor() : w.fcprojb);
  if (tp) h.tp_sum("mlp.proj", proj_out_);
  h.op("residual_forward");
  be_.residual_forward(a.res3, a.res2, proj_out_);
}

// Note [rebuilt norms]: ln2 from res2 (resident, or just brought back), ln1 from the block's input. ln2 was made
// in the forward by residual_layernorm_forward, which normalises the residual as rounded and stored, with
// layernorm_forward's arithmetic: the same bits (tested on both backends).
void Gpt::rebuild_norms(ModelHooks& h, int l) {
  const LayerParams w = compute_layer(l);
  const BlockActs& a = acts_[static_cast<size_t>(l)];
  h.op("layernorm_forward ln2 (rebuild)");
  be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2w, w.ln2b);
  h.op("layernorm_forward ln1 (rebuild)");
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, block_input(l), w.ln1w, w.ln1b);
}

// Note [MLP half]: fch and fch_gelu from ln2 (resident, or just brought back) with the forward's kernel.
void Gpt::rebuild_mlp(ModelHooks& h, int l) {
  const LayerParams w = compute_layer(l);
  const BlockActs& a = acts_[static_cast<size_t>(l)];
  h.op("matmul_gelu_forward mlp.fc (recompute)");
  be_.matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, w.fcw, w.fcb);
}

// Note [rebuilt activation]: fch_gelu from fch (resident, or just brought back) with the kernel the block's forward ran.
void Gpt::rebuild_act(ModelHooks& h, int l) {
  TT_CHECK(act_apart(l), "rebuild_act of block %d, whose forward fused its GELU into the GEMM", l);
  const BlockActs& a = acts_[static_cast<size_t>(l)];
  h.op("gelu_forward mlp.gelu (rebuild)");
  be_.gelu_forward(a.fch_gelu, a.fch);
}

void Gpt::lm_head(ModelHooks& h, bool with_backward) {
  // The head tied to wte: its gradient is d(wte), which the embedding's backward adds to later.
  run_lm_head(h, with_backward, lnf_, dln_, wte_index_, vocab_begin());
}

void Gpt::compute_logits_rows(const Tensor& out, int64_t row_begin) { logits_of(out, lnf_, wte_index_, row_begin); }

void Gpt::decode_prefill(const NamedTensors& state, int n) {
  check_decodable(state);
  const Tensor& cache = state.at("decode.cache");
  TT_CHECK(n >= 1 && n <= cfg_.seq, "decode_prefill: %d positions, the model holds 1 to %d", n, cfg_.seq);
  const int64_t T = cfg_.seq, C = cfg_.dim, C3 = 3 * C;
  for (int l = 0; l < cfg_.layers; ++l)
    be_.copy_d2d(cache.view(l * T * C3, {n, C3}), acts_[static_cast<size_t>(l)].qkv.view(0, {n, C3}),
                 be_.compute_stream());
  be_.matmul_forward(state.at("decode.logits"), lnf_.view((n - 1) * C, {1, C}), wte(), Tensor());
}

void Gpt::decode_step(const NamedTensors& state) {
  check_decodable(state);
  struct {
    Tensor cache, token, pos, qkv, x, res2, ln, atty, proj, fch, fch_gelu, mean, rstd, logits;
  } s;
  const std::pair<const char*, Tensor*> table[] = {
      {"cache", &s.cache}, {"token", &s.token}, {"pos", &s.pos},   {"qkv", &s.qkv},   {"x", &s.x},
      {"res2", &s.res2},   {"ln", &s.ln},       {"atty", &s.atty}, {"proj", &s.proj}, {"fch", &s.fch},
      {"fch_gelu", &s.fch_gelu}, {"mean", &s.mean}, {"rstd", &s.rstd}, {"logits", &s.logits}};
  for (const auto& [n, t] : table) *t = state.at(std::string("decode.") + n);
  const int64_t T = cfg_.seq, C = cfg_.dim, C3 = 3 * C;
  be_.embedding_at(s.x, s.token, s.pos, wte(), wpe());
  for (int l = 0; l < cfg_.layers; ++l) {
    const LayerParams w = compute_layer(l);
    be_.layernorm_forward(s.ln, s.mean, s.rstd, s.x, w.ln1w, w.ln1b);
    be_.matmul_forward(s.qkv, s.ln, w.qkvw, w.qkvb);
    be_.attention_decode(s.atty, s.cache.view(l * T * C3, {1, T, C3}), s.qkv, s.pos, cfg_.heads);
    be_.matmul_forward(s.proj, s.atty, w.projw, w.projb);
    be_.residual_layernorm_forward(s.res2, s.ln, s.mean, s.rstd, s.x, s.proj, w.ln2w, w.ln2b);
    be_.matmul_gelu_forward(s.fch, s.fch_gelu, s.ln, w.fcw, w.fcb);
    be_.matmul_forward(s.proj, s.fch_gelu, w.fcprojw, w.fcprojb);
    be_.residual_forward(s.x, s.res2, s.proj);
  }
  const size_t lnf = layout_.size() - 2;
  be_.layernorm_forward(s.ln, s.mean, s.rstd, s.x, cparam(lnf), cparam(lnf + 1));
  be_.matmul_forward(s.logits, s.ln, wte(), Tensor());
}

void Gpt::backward_blocks(ModelHooks& h) {
  Stream& s = be_.compute_stream();
  // dln holds d(lnf output) from the LM head.
  const int L = cfg_.layers;
  h.at(Boundary::kBeforeBackward, L + 1);
  h.op("zero_scratch");
  be_.fill_zero(dresidual_, s);
  const size_t lnf = layout_.size() - 2;
  h.op("layernorm_backward");
  be_.layernorm_backward(dresidual_, grad(lnf), grad(lnf + 1), dln_, acts_.back().res3, cparam(lnf),
                         lnf_mean_, lnf_rstd_, first_write());
  h.at(Boundary::kAfterBackward, L + 1);
  for (int l = L - 1; l >= 0; --l) {
    h.at(Boundary::kBeforeBackward, 1 + l);
    backward_block(h, l);
    h.at(Boundary::kAfterBackward, 1 + l);
  }
  h.at(Boundary::kBeforeBackward, 0);
  h.op("embedding_backward");
  // d(wte) adds to the LM head's; d(wpe) is written here first.
  be_.embedding_backward(grad(wte_index_), grad(wte_index_ ^ 1), dresidual_, tokens_, first_write(),
                         vocab_begin());
  h.at(Boundary::kAfterBackward, 0);
}

void Gpt::backward_block(ModelHooks& h, int l) {
  const LayerParams w = compute_layer(l);
  const LayerParams g = grad_layer(l);
  const BlockActs& a = acts_[static_cast<size_t>(l)];
  const Tensor x = block_input(l);
  const GradWrite gw = block_first_write(l);  // each of the block's gradients is written once, by one op
  // MLP: res3 = res2 + proj(gelu(fc(ln2(res2)))); dresidual holds d(res3) and becomes d(res2).
  h.op("matmul_backward_gelu mlp.proj");
  be_.matmul_backward_gelu(dfch_, g.fcprojw, g.fcprojb, dresidual_, a.fch_gelu, w.fcprojw, a.fch, gw);
  h.op("matmul_backward mlp.fc");  // overwrites dln (as every matmul_backward its dinp)
  be_.matmul_backward(dln_, g.fcw, g.fcb, dfch_, a.ln2, w.fcw, gw);
  if (cfg_.tp > 1) h.tp_sum("d ln2", dln_);  // Note [tensor parallel]: each rank's heads' share of d(ln2)
  h.op("layernorm_backward");
  be_.layernorm_backward(dresidual_, g.ln2w, g.ln2b, dln_, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd, gw);
  // Attention: res2 = x + proj(attn(qkv(ln1(x)))); dresidual becomes d(x).
  h.op("matmul_backward attn.proj");
  be_.matmul_backward(datty_, g.projw, g.projb, dresidual_, a.atty, w.projw, gw);
  h.op("attention_backward");  // writes every element of dqkv: no zeroing first
  be_.attention_backward(dqkv_, datty_, a.qkv, a.atty, a.lse, cfg_.heads / cfg_.tp);
  h.op("matmul_backward qkv");
  be_.matmul_backward(dln_, g.qkvw, g.qkvb, dqkv_, a.ln1, w.qkvw, gw);
  if (cfg_.tp > 1) h.tp_sum("d ln1", dln_);
  h.op("layernorm_backward");
  be_.layernorm_backward(dresidual_, g.ln1w, g.ln1b, dln_, x, w.ln1w, a.ln1_mean, a.ln1_rstd, gw);
}

std::vector<NamedKernelCall> GptFamily::kernel_calls(const ModelConfig& cfg, int batch, DType dt,
                                                     int64_t lm_chunk_rows, ModelPiece piece, int segment) const {
  const int64_t B = batch, T = cfg.seq, C = cfg.dim, H = cfg.heads / cfg.tp, BT = B * T;
  const int64_t Cl = C / cfg.tp, Fl = 4 * C / cfg.tp, Vl = cfg.local_vocab();  // Note [tensor parallel]: this rank's
  const int L = cfg.layers;
  std::vector<NamedKernelCall> r;
  auto add = [&](const char* name, KernelOp op, std::array<int64_t, 5> dims) {
    r.push_back({name, KernelCall{op, dt, dims}});
  };
  auto block_forward = [&](bool gelu_apart = false) {
    add("layernorm_forward", KernelOp::kLayernormForward, {BT, C});
    add("matmul_forward qkv", KernelOp::kMatmulForward, {BT, 3 * Cl, C, 1});
    add("attention_forward", KernelOp::kAttentionForward, {B, T, H, Cl / H});
    add("matmul_forward attn.proj", KernelOp::kMatmulForward, {BT, C, Cl, 1});
    add("residual_layernorm_forward", KernelOp::kResidualLayernormForward, {BT, C});
    if (gelu_apart) {
      add("matmul_forward mlp.fc", KernelOp::kMatmulForward, {BT, Fl, C, 1});
      add("gelu_forward mlp.gelu", KernelOp::kGeluForward, {BT * Fl});
    } else {
      add("matmul_gelu_forward mlp.fc", KernelOp::kMatmulGeluForward, {BT, Fl, C});
    }
    add("matmul_forward mlp.proj", KernelOp::kMatmulForward, {BT, C, Fl, 1});
    add("residual_forward", KernelOp::kResidualForward, {BT * C});
  };
  switch (piece) {
    case ModelPiece::kForward:
      if (segment == 0) add("embedding_forward", KernelOp::kEmbeddingForward, {B, T, C, Vl});
      else if (segment == L + 1) add("layernorm_forward", KernelOp::kLayernormForward, {BT, C});
      else block_forward();
      break;
    case ModelPiece::kRebuildBlock:
      block_forward();
      break;
    case ModelPiece::kRebuildNorms:
      add("layernorm_forward ln2 (rebuild)", KernelOp::kLayernormForward, {BT, C});
      add("layernorm_forward ln1 (rebuild)", KernelOp::kLayernormForward, {BT, C});
      break;
    case ModelPiece::kRebuildMlp:
      add("matmul_gelu_forward mlp.fc (recompute)", KernelOp::kMatmulGeluForward, {BT, Fl, C});
      break;
    case ModelPiece::kRebuildAct:
      add("gelu_forward mlp.gelu (rebuild)", KernelOp::kGeluForward, {BT * Fl});
      break;
    case ModelPiece::kForwardActApart:
      block_forward(true);
      break;
    case ModelPiece::kHead:
    case ModelPiece::kHeadWithBackward:
      append_head_kernel_calls(r, cfg, batch, dt, lm_chunk_rows, piece == ModelPiece::kHeadWithBackward);
      break;
    case ModelPiece::kBackward:
      if (segment == 0) {
        add("embedding_backward", KernelOp::kEmbeddingBackward, {B, T, C, Vl});
      } else if (segment == L + 1) {
        add("zero_scratch", KernelOp::kFillZero, {BT * C});
        add("layernorm_backward", KernelOp::kLayernormBackward, {BT, C});
      } else {
        add("matmul_backward_gelu mlp.proj", KernelOp::kMatmulBackwardGelu, {BT, C, Fl});
        add("matmul_backward mlp.fc", KernelOp::kMatmulBackward, {BT, Fl, C, 1});
        add("layernorm_backward", KernelOp::kLayernormBackward, {BT, C});
        add("matmul_backward attn.proj", KernelOp::kMatmulBackward, {BT, C, Cl, 1});
        add("attention_backward", KernelOp::kAttentionBackward, {B, T, H, Cl / H});
        add("matmul_backward qkv", KernelOp::kMatmulBackward, {BT, 3 * Cl, C, 1});
        add("layernorm_backward", KernelOp::kLayernormBackward, {BT, C});
      }
      break;
  }
  return r;
}

// Note [Hugging Face layout]: transformers' GPT2LMHeadModel: transformer.* names, the four projection matrices of a
// block stored [in, out] (GPT-2's Conv1D; ours are [out, in], as PyTorch's Linear), the token embedding with exactly
// vocab_size rows and tied to the LM head (no lm_head.weight), GELU's tanh form, LayerNorm epsilon 1e-5.
std::vector<HfParam> GptFamily::hf_tensors(const ModelConfig& cfg) const {
  static const std::pair<const char*, const char*> kTop[] = {
      {"wte", "transformer.wte.weight"}, {"wpe", "transformer.wpe.weight"},
      {"lnf.w", "transformer.ln_f.weight"}, {"lnf.b", "transformer.ln_f.bias"}};
  static const std::pair<const char*, const char*> kBlock[] = {
      {"ln1.w", "ln_1.weight"},          {"ln1.b", "ln_1.bias"},         {"attn.qkv.w", "attn.c_attn.weight"},
      {"attn.qkv.b", "attn.c_attn.bias"}, {"attn.proj.w", "attn.c_proj.weight"}, {"attn.proj.b", "attn.c_proj.bias"},
      {"ln2.w", "ln_2.weight"},          {"ln2.b", "ln_2.bias"},         {"mlp.fc.w", "mlp.c_fc.weight"},
      {"mlp.fc.b", "mlp.c_fc.bias"},     {"mlp.proj.w", "mlp.c_proj.weight"}, {"mlp.proj.b", "mlp.c_proj.bias"}};
  std::vector<HfParam> out;
  for (const ParamInfo& p : param_layout(cfg)) {
    HfTensor t;
    for (const auto& [a, b] : kTop)
      if (p.name == a) t.name = b;
    if (t.name.empty()) {
      const size_t dot = p.name.find('.', 2);
      const std::string rest = p.name.substr(dot + 1);
      for (const auto& [a, b] : kBlock)
        if (rest == a) t.name = "transformer." + p.name.substr(0, dot + 1) + b;
      // GPT-2's Conv1D keeps its weight [in, out].
      t.transposed = p.shape.rank() == 2;
    }
    TT_CHECK(!t.name.empty(), "GPT-2 parameter %s has no Hugging Face name", p.name.c_str());
    const int64_t cols = p.shape.rank() == 2 ? p.shape[1] : 1;
    t.rows = p.name == "wte" ? cfg.vocab : p.shape[0];
    t.more_rows_ok = p.name == "wpe";
    t.shape = p.shape.rank() == 1 ? std::vector<int64_t>{t.rows}
              : t.transposed      ? std::vector<int64_t>{cols, t.rows}
                                  : std::vector<int64_t>{t.rows, cols};
    out.push_back({p.name, {t}});
  }
  return out;
}

nlohmann::json GptFamily::hf_config(const ModelConfig& cfg) const {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", cfg.vocab},
          {"n_positions", cfg.seq},
          {"n_ctx", cfg.seq},
          {"n_embd", cfg.dim},
          {"n_layer", cfg.layers},
          {"n_head", cfg.heads},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"scale_attn_weights", true},
          {"tie_word_embeddings", true},
          {"bos_token_id", cfg.vocab > 256 ? 50256 : 0},
          {"eos_token_id", cfg.vocab > 256 ? 50256 : 0},
          {"torch_dtype", "float32"}};
}

Result<ModelConfig> GptFamily::from_hf_config(const nlohmann::json& j, int seq, const std::string& where) const {
  ModelConfig c;
  c.family = "gpt2";
  JsonKeys r(j, where);
  int positions = 0, inner = 0;
  TT_TRY(r.integer("vocab_size", &c.vocab));
  TT_TRY(r.integer("n_embd", &c.dim));
  TT_TRY(r.integer("n_layer", &c.layers));
  TT_TRY(r.integer("n_head", &c.heads));
  TT_TRY(r.integer("n_positions", &positions));
  TT_TRY(r.optional_integer("n_inner", &inner));
  TT_RETURN_IF(inner != 0 && inner != 4 * c.dim, kUnimplemented, "%s: n_inner %d; the gpt2 family's MLP is 4 x n_embd",
               where.c_str(), inner);
  TT_TRY(r.one_of("activation_function", {"gelu_new", "gelu_pytorch_tanh"}, "gelu_new"));
  TT_TRY(r.number_equal("layer_norm_epsilon", 1e-5, 1e-5));
  TT_TRY(r.boolean_equal("tie_word_embeddings", true, true));
  TT_RETURN_IF(seq > positions, kInvalidArgument, "%s: --seq %d is longer than the model's n_positions %d",
               where.c_str(), seq, positions);
  c.seq = seq;
  TT_TRY(c.validate());
  return c;
}

// Note [parallel init] (model/model.h): normal(0, 0.02); residual projections 0.02/sqrt(2L); biases 0; LayerNorm
// weights 1; wte's vocabulary padding rows 0.
namespace {
ParamInit gpt_init(const ModelConfig& cfg, const ParamInfo& p) {
  if (p.shape.rank() == 2) {
    const bool residual = p.name.ends_with("attn.proj.w") || p.name.ends_with("mlp.proj.w");
    return {residual ? 0.02 / std::sqrt(2.0 * cfg.layers) : 0.02, 0.0,
            p.name == "wte" ? static_cast<int64_t>(cfg.vocab) * cfg.dim : -1};
  }
  const bool ln_weight = p.name.ends_with("ln1.w") || p.name.ends_with("ln2.w") || p.name == "lnf.w";
  return {0.0, ln_weight ? 1.0 : 0.0, -1};
}
}  // namespace

void GptFamily::init_values(const ModelConfig& cfg, uint64_t seed, float* out) const {
  init_param_values(param_layout(cfg), model_num_params(cfg), seed,
                    [&](const ParamInfo& p) { return gpt_init(cfg, p); }, out);
}

void GptFamily::init_values(const ModelConfig& cfg, uint64_t seed, double* out) const {
  init_param_values(param_layout(cfg), model_num_params(cfg), seed,
                    [&](const ParamInfo& p) { return gpt_init(cfg, p); }, out);
}

}  // namespace tt
