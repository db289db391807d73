#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/log.h"

namespace tt {

namespace {

constexpr size_t kNone = std::numeric_limits<size_t>::max();

class LlamaFamily final : public ModelFamily {
 public:
  const char* name() const override { return "llama"; }
  const char* display() const override { return "Llama"; }
  const char* summary() const override {
    return "Llama 2/3, Mistral, Qwen2: RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention";
  }
  Status validate(const ModelConfig& cfg) const override;
  int ffn(const ModelConfig& cfg) const override { return llama_ffn(cfg); }
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
    return std::make_unique<Llama>(backend, cfg, batch, compute, std::move(tensors));
  }
  std::vector<HfParam> hf_tensors(const ModelConfig& cfg) const override;
  nlohmann::json hf_config(const ModelConfig& cfg) const override;
  bool reads_hf_model_type(const std::string& type) const override {
    return type == "llama" || type == "mistral" || type == "qwen2";
  }
  Result<ModelConfig> from_hf_config(const nlohmann::json& j, int seq, const std::string& where) const override;
};

// Sizes of one rank's share (Note [tensor parallel]).
struct Dims {
  int64_t B, T, C, H, KV, hs, F, Vl, tp;
  int64_t Hl() const { return H / tp; }
  int64_t KVl() const { return KV / tp; }
  int64_t Cl() const { return C / tp; }               // this rank's query width
  int64_t Cq() const { return (Hl() + 2 * KVl()) * hs; }  // this rank's qkv width
  int64_t Fl() const { return F / tp; }
};
Dims dims(const ModelConfig& cfg, int batch) {
  return {batch, cfg.seq, cfg.dim, cfg.heads, cfg.kv_head_count(), cfg.head_dim(), llama_ffn(cfg),
          cfg.local_vocab(), cfg.tp};
}

int64_t chunk_rows(const ModelConfig& cfg, int batch, DType dt, int64_t lm_chunk_rows) {
  const int64_t BT = static_cast<int64_t>(batch) * cfg.seq;
  return lm_chunk_rows > 0 ? std::min(lm_chunk_rows, BT) : model_default_lm_chunk_rows(cfg, batch, dt);
}

}  // namespace

const ModelFamily& llama_family() {
  static const LlamaFamily family;
  return family;
}

int llama_ffn(const ModelConfig& cfg) {
  if (cfg.ffn > 0) return cfg.ffn;
  const int64_t h = 2 * (4 * static_cast<int64_t>(cfg.dim)) / 3;
  return static_cast<int>((h + 255) / 256 * 256);
}

Status LlamaFamily::validate(const ModelConfig& cfg) const {
  TT_RETURN_IF(cfg.head_dim() % 2 != 0, kInvalidArgument,
               "the rotary embedding turns pairs of channels: the head width %d (--dim / --heads) must be even",
               cfg.head_dim());
  TT_RETURN_IF(llama_ffn(cfg) % cfg.tp != 0, kInvalidArgument,
               "the MLP's width %d cannot be split %d ways over tensor-parallel ranks", llama_ffn(cfg), cfg.tp);
  const RopeScaling& r = cfg.rope_scaling;
  TT_RETURN_IF(r.factor < 0 || (r.factor > 0 && (r.low_freq_factor <= 0 || r.high_freq_factor <= r.low_freq_factor ||
                                                 r.original_max_position < 1)),
               kInvalidArgument,
               "rope scaling: factor %g, low_freq_factor %g, high_freq_factor %g, original_max_position %d (expected "
               "factor >= 0; with a factor, 0 < low < high and a positive original length)",
               r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position);
  return Status::ok();
}

std::vector<ParamInfo> LlamaFamily::param_layout(const ModelConfig& cfg) const {
  const Dims d = dims(cfg, 1);
  const int64_t V = cfg.padded_vocab(), tp = cfg.tp;
  std::vector<ParamInfo> out;
  int64_t offset = 0;
  // rows: how the parameter splits over tensor-parallel ranks (ParamInfo::row_blocks; empty: its columns).
  auto add = [&](std::string name, Shape shape, bool decay, int layer, bool sharded = false,
                 std::vector<int64_t> rows = {}) {
    out.push_back(ParamInfo{std::move(name), shape, offset, decay, layer, sharded, std::move(rows)});
    offset += shape.numel();
  };
  // Note [Llama layout]: Q's heads, then K's and V's, each cut in rank order (whole key/value groups a rank).
  const std::vector<int64_t> qkv_rows = {d.H * d.hs, d.KV * d.hs, d.KV * d.hs};
  add("wte", {cfg.split_vocab ? V / tp : V, d.C}, true, -1, cfg.split_vocab, {V});
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    const bool sh = tp > 1;
    // Note [tensor parallel]: the replicated norms first, then the sharded matrices (and the QKV bias).
    add(p + "attn_norm.w", {d.C}, false, l);
    add(p + "mlp_norm.w", {d.C}, false, l);
    add(p + "attn.qkv.w", {d.Cq(), d.C}, true, l, sh, qkv_rows);
    add(p + "attn.proj.w", {d.C, d.Cl()}, true, l, sh);
    add(p + "mlp.gate_up.w", {2 * d.Fl(), d.C}, true, l, sh, {d.F, d.F});
    add(p + "mlp.down.w", {d.C, d.Fl()}, true, l, sh);
    if (cfg.qkv_bias) add(p + "attn.qkv.b", {d.Cq()}, false, l, sh, qkv_rows);
  }
  add("norm.w", {d.C}, false, -1);
  if (!cfg.tied_embeddings)
    add("lm_head.w", {cfg.split_vocab ? V / tp : V, d.C}, true, -1, cfg.split_vocab, {V});
  return out;
}

std::vector<TensorRequest> LlamaFamily::block_activations(const ModelConfig& cfg, int batch, DType dt,
                                                          unsigned parts) const {
  const Dims d = dims(cfg, batch);
  const DType md = master_dtype_for(dt);
  const TensorClass A = TensorClass::kActivation;
  const std::pair<BlockPart, TensorRequest> all[] = {
      {kPartNorms, {"ln1", {d.B, d.T, d.C}, dt, A}},        {kPartNorms, {"ln1_rstd", {d.B, d.T}, md, A}},
      {kPartCore, {"qkv", {d.B, d.T, d.Cq()}, dt, A}},      {kPartCore, {"atty", {d.B, d.T, d.Cl()}, dt, A}},
      {kPartCore, {"lse", {d.B, d.Hl(), d.T}, md, A}},      {kPartCore, {"res2", {d.B, d.T, d.C}, dt, A}},
      {kPartNorms, {"ln2", {d.B, d.T, d.C}, dt, A}},        {kPartNorms, {"ln2_rstd", {d.B, d.T}, md, A}},
      {kPartFc, {"fch", {d.B, d.T, 2 * d.Fl()}, dt, A}},    {kPartAct, {"fch_act", {d.B, d.T, d.Fl()}, dt, A}}};
  std::vector<TensorRequest> r;
  for (const auto& [part, a] : all)
    if ((parts & part) != 0) r.push_back(a);
  return r;
}

std::vector<TensorRequest> LlamaFamily::fixed_tensors(const ModelConfig& cfg, int batch, DType dt,
                                                      int64_t lm_chunk_rows) const {
  const Dims d = dims(cfg, batch);
  const DType md = master_dtype_for(dt);
  const TensorClass A = TensorClass::kActivation, W = TensorClass::kWorkspace;
  std::vector<TensorRequest> r = {{"tokens", {d.B, d.T}, DType::kI32, TensorClass::kInput},
                                  {"targets", {d.B, d.T}, DType::kI32, TensorClass::kInput},
                                  {"rope", {d.T, d.hs}, md, W},
                                  {"encoded", {d.B, d.T, d.C}, dt, A}};
  for (int l = 0; l < cfg.layers; ++l) r.push_back({"h." + std::to_string(l) + ".res3", {d.B, d.T, d.C}, dt, A, l});
  const int64_t chunk = chunk_rows(cfg, batch, dt, lm_chunk_rows);
  // No buffer for d(fch): SwiGLU's backward writes it over the block's fch, dead from then on (the MLP's widest
  // tensor: 224 MiB at the Llama-3-8B shape, B 2 T 2048).
  for (TensorRequest t : std::initializer_list<TensorRequest>{
           {"lnf", {d.B, d.T, d.C}, dt, A, -1, true},  {"lnf_rstd", {d.B, d.T}, md, A, -1, true},
           {"logits", {chunk, d.Vl}, dt, W, -1, true}, {"losses", {d.B, d.T}, md, A},
           {"proj_out", {d.B, d.T, d.C}, dt, W},    {"dresidual", {d.B, d.T, d.C}, dt, W},
           {"dln", {d.B, d.T, d.C}, dt, W},         {"datty", {d.B, d.T, d.Cl()}, dt, W},
           {"dqkv", {d.B, d.T, d.Cq()}, dt, W},     {"dact", {d.B, d.T, d.Fl()}, dt, W}})
    r.push_back(std::move(t));
  if (cfg.split_vocab) r.push_back({"xent_stats", {3, chunk}, md, W, -1, true});
  return r;
}

std::vector<TensorRequest> LlamaFamily::decode_tensors(const ModelConfig& cfg, DType dt) const {
  const Dims d = dims(cfg, 1);
  const DType md = master_dtype_for(dt);
  const TensorClass W = TensorClass::kWorkspace;
  return {{"decode.cache", {cfg.layers, d.T, d.Cq()}, dt, W}, {"decode.token", {1}, DType::kI32, TensorClass::kInput},
          {"decode.pos", {1}, DType::kI32, TensorClass::kInput}, {"decode.qkv", {1, d.Cq()}, dt, W},
          {"decode.x", {1, d.C}, dt, W},        {"decode.res2", {1, d.C}, dt, W},
          {"decode.ln", {1, d.C}, dt, W},       {"decode.atty", {1, d.C}, dt, W},
          {"decode.proj", {1, d.C}, dt, W},     {"decode.fch", {1, 2 * d.F}, dt, W},
          {"decode.fch_act", {1, d.F}, dt, W},  {"decode.rstd", {1}, md, W},
          {"decode.logits", {1, cfg.padded_vocab()}, dt, W}};
}

// Note [parallel init] (model/model.h): normal(0, 0.02); the residual projections 0.02/sqrt(2L); norms 1; the QKV bias
// 0; the embedding's and the head's vocabulary padding rows 0.
namespace {
ParamInit llama_init(const ModelConfig& cfg, const ParamInfo& p) {
  if (p.shape.rank() == 2) {
    const bool residual = p.name.ends_with("attn.proj.w") || p.name.ends_with("mlp.down.w");
    const bool vocab = p.name == "wte" || p.name == "lm_head.w";
    return {residual ? 0.02 / std::sqrt(2.0 * cfg.layers) : 0.02, 0.0,
            vocab ? static_cast<int64_t>(cfg.vocab) * cfg.dim : -1};
  }
  return {0.0, p.name.ends_with("norm.w") ? 1.0 : 0.0, -1};
}
}  // namespace

void LlamaFamily::init_values(const ModelConfig& cfg, uint64_t seed, float* out) const {
  init_param_values(param_layout(cfg), model_num_params(cfg), seed,
                    [&](const ParamInfo& p) { return llama_init(cfg, p); }, out);
}

void LlamaFamily::init_values(const ModelConfig& cfg, uint64_t seed, double* out) const {
  init_param_values(param_layout(cfg), model_num_params(cfg), seed,
                    [&](const ParamInfo& p) { return llama_init(cfg, p); }, out);
}

// Note [Hugging Face layout]: transformers' LlamaForCausalLM (Qwen2ForCausalLM with QKV biases): q_proj, k_proj and
// v_proj stacked into our qkv, gate_proj and up_proj into our gate_up; every matrix [out, in] as ours; the embedding
// and the head with exactly vocab_size rows.
std::vector<HfParam> LlamaFamily::hf_tensors(const ModelConfig& cfg) const {
  const Dims d = dims(cfg, 1);
  std::vector<HfParam> out;
  for (const ParamInfo& p : param_layout(cfg)) {
    const int64_t cols = p.shape.rank() == 2 ? p.shape[1] : 1;
    auto one = [&](const std::string& name, int64_t row0, int64_t rows) {
      return HfTensor{name, p.shape.rank() == 2 ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows}, row0,
                      rows};
    };
    HfParam h{p.name, {}};
    if (p.name == "wte") {
      h.tensors = {one("model.embed_tokens.weight", 0, cfg.vocab)};
    } else if (p.name == "lm_head.w") {
      h.tensors = {one("lm_head.weight", 0, cfg.vocab)};
    } else if (p.name == "norm.w") {
      h.tensors = {one("model.norm.weight", 0, d.C)};
    } else {
      const size_t dot = p.name.find('.', 2);
      const std::string pre = "model.layers." + p.name.substr(2, dot - 2) + ".", rest = p.name.substr(dot + 1);
      const char* suffix = rest.ends_with(".b") ? "bias" : "weight";
      if (rest == "attn_norm.w") h.tensors = {one(pre + "input_layernorm.weight", 0, d.C)};
      if (rest == "mlp_norm.w") h.tensors = {one(pre + "post_attention_layernorm.weight", 0, d.C)};
      if (rest == "attn.proj.w") h.tensors = {one(pre + "self_attn.o_proj.weight", 0, d.C)};
      if (rest == "mlp.down.w") h.tensors = {one(pre + "mlp.down_proj.weight", 0, d.C)};
      if (rest == "mlp.gate_up.w")
        h.tensors = {one(pre + "mlp.gate_proj.weight", 0, d.F), one(pre + "mlp.up_proj.weight", d.F, d.F)};
      if (rest == "attn.qkv.w" || rest == "attn.qkv.b") {
        const int64_t q = d.H * d.hs, kv = d.KV * d.hs;
        h.tensors = {one(pre + "self_attn.q_proj." + suffix, 0, q), one(pre + "self_attn.k_proj." + suffix, q, kv),
                     one(pre + "self_attn.v_proj." + suffix, q + kv, kv)};
      }
    }
    TT_CHECK(!h.tensors.empty(), "Llama parameter %s has no Hugging Face name", p.name.c_str());
    out.push_back(std::move(h));
  }
  return out;
}

nlohmann::json LlamaFamily::hf_config(const ModelConfig& cfg) const {
  // Qwen2's class has QKV biases and no others; Llama's attention_bias would add one to o_proj as well.
  const bool qwen2 = cfg.qkv_bias;
  nlohmann::json j = {{"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
                      {"model_type", qwen2 ? "qwen2" : "llama"},
                      {"vocab_size", cfg.vocab},
                      {"hidden_size", cfg.dim},
                      {"intermediate_size", llama_ffn(cfg)},
                      {"num_hidden_layers", cfg.layers},
                      {"num_attention_heads", cfg.heads},
                      {"num_key_value_heads", cfg.kv_head_count()},
                      {"head_dim", cfg.head_dim()},
                      {"hidden_act", "silu"},
                      {"max_position_embeddings", cfg.seq},
                      {"rms_norm_eps", cfg.norm_eps},
                      {"rope_theta", cfg.rope_theta},
                      {"rope_scaling", nullptr},
                      {"tie_word_embeddings", cfg.tied_embeddings},
                      {"attention_dropout", 0.0},
                      {"initializer_range", 0.02},
                      {"use_cache", true},
                      {"torch_dtype", "float32"}};
  if (qwen2) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = cfg.layers;
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  if (cfg.rope_scaling.factor > 0)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", cfg.rope_scaling.factor},
                         {"low_freq_factor", cfg.rope_scaling.low_freq_factor},
                         {"high_freq_factor", cfg.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", cfg.rope_scaling.original_max_position}};
  return j;
}

Result<ModelConfig> LlamaFamily::from_hf_config(const nlohmann::json& j, int seq, const std::string& where) const {
  ModelConfig c;
  c.family = "llama";
  c.tied_embeddings = false;  // LlamaConfig's default
  const std::string type = j.at("model_type").get<std::string>();
  JsonKeys r(j, where);
  int positions = 0, head_dim = 0;
  TT_TRY(r.integer("vocab_size", &c.vocab));
  TT_TRY(r.integer("hidden_size", &c.dim));
  TT_TRY(r.integer("intermediate_size", &c.ffn));
  TT_TRY(r.integer("num_hidden_layers", &c.layers));
  TT_TRY(r.integer("num_attention_heads", &c.heads));
  TT_TRY(r.optional_integer("num_key_value_heads", &c.kv_heads));
  TT_TRY(r.integer("max_position_embeddings", &positions));
  TT_TRY(r.optional_integer("head_dim", &head_dim));
  TT_RETURN_IF(head_dim != 0 && head_dim * c.heads != c.dim, kUnimplemented,
               "%s: head_dim %d with %d heads is not hidden_size %d (heads of another width: not supported)",
               where.c_str(), head_dim, c.heads, c.dim);
  TT_TRY(r.one_of("hidden_act", {"silu"}, "silu"));
  TT_TRY(r.number("rms_norm_eps", &c.norm_eps));
  TT_TRY(r.number("rope_theta", &c.rope_theta));
  TT_TRY(r.boolean("tie_word_embeddings", &c.tied_embeddings));
  TT_TRY(r.boolean_equal("mlp_bias", false, false));
  if (type == "qwen2") {
    c.qkv_bias = true;  // Qwen2's attention has Q, K and V biases
    bool sliding = false;
    TT_TRY(r.boolean("use_sliding_window", &sliding));
    TT_RETURN_IF(sliding, kUnimplemented, "%s: use_sliding_window true: sliding-window attention is not supported",
                 where.c_str());
  } else {
    TT_TRY(r.boolean_equal("attention_bias", false, false));
    int window = 0;
    TT_TRY(r.optional_integer("sliding_window", &window));
    TT_RETURN_IF(window != 0 && window < seq, kUnimplemented,
                 "%s: sliding_window %d is shorter than --seq %d: sliding-window attention is not supported",
                 where.c_str(), window, seq);
  }
  if (r.has("rope_scaling")) {
    const nlohmann::json& s = j.at("rope_scaling");
    const std::string at = where + " rope_scaling";
    TT_RETURN_IF(!s.is_object(), kInvalidArgument, "%s: rope_scaling is not an object", where.c_str());
    JsonKeys rs(s, at);
    const char* type_key = s.contains("rope_type") ? "rope_type" : "type";
    TT_TRY(rs.one_of(type_key, {"llama3", "default"}, "default"));
    if (s.value(type_key, std::string()) == "llama3") {
      TT_TRY(rs.number("factor", &c.rope_scaling.factor));
      TT_TRY(rs.number("low_freq_factor", &c.rope_scaling.low_freq_factor));
      TT_TRY(rs.number("high_freq_factor", &c.rope_scaling.high_freq_factor));
      TT_TRY(rs.integer("original_max_position_embeddings", &c.rope_scaling.original_max_position));
      TT_RETURN_IF(!(c.rope_scaling.factor > 0), kInvalidArgument, "%s: no factor", at.c_str());
    }
  }
  TT_RETURN_IF(seq > positions, kInvalidArgument, "%s: --seq %d is longer than the model's max_position_embeddings %d",
               where.c_str(), seq, positions);
  c.seq = seq;
  if (c.kv_heads == c.heads) c.kv_heads = 0;
  if (Status st = c.validate(); !st.is_ok()) return Status(st.code(), where + ": " + st.message());
  return c;
}

std::vector<double> llama_rope_table(const ModelConfig& cfg, bool f32_angles) {
  // Hugging Face's LlamaRotaryEmbedding: inv_freq[i] = 1 / theta^(2i / hs); Llama 3's scaling divides the low
  // frequencies by the factor and blends the middle band; angle = position * inv_freq.
  const int hs = cfg.head_dim(), half = hs / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    const double e = static_cast<double>(2 * i) / hs;
    inv[static_cast<size_t>(i)] = f32_angles ? static_cast<double>(1.0f / std::pow(static_cast<float>(cfg.rope_theta),
                                                                                  static_cast<float>(e)))
                                             : 1.0 / std::pow(cfg.rope_theta, e);
  }
  const RopeScaling& rs = cfg.rope_scaling;
  if (rs.factor > 0) {
    const double old_len = rs.original_max_position, low_wavelen = old_len / rs.low_freq_factor,
                 high_wavelen = old_len / rs.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * M_PI / f;
      double g = wavelen > low_wavelen ? f / rs.factor : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const double smooth = (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        g = (1 - smooth) * g / rs.factor + smooth * g;
      }
      f = f32_angles ? static_cast<double>(static_cast<float>(g)) : g;
    }
  }
  std::vector<double> table(static_cast<size_t>(cfg.seq) * hs);
  for (int p = 0; p < cfg.seq; ++p)
    for (int i = 0; i < half; ++i) {
      const double a = f32_angles ? static_cast<double>(static_cast<float>(p) * static_cast<float>(inv[static_cast<size_t>(i)]))
                                  : p * inv[static_cast<size_t>(i)];
      table[static_cast<size_t>(p) * hs + i] = std::cos(a);
      table[static_cast<size_t>(p) * hs + half + i] = std::sin(a);
    }
  return table;
}

Llama::Llama(Backend& backend, const ModelConfig& cfg, int batch, DType dtype, ModelTensors tensors)
    : Model(llama_family(), backend, cfg, batch, dtype, std::move(tensors)) {
  acts_.resize(static_cast<size_t>(cfg.layers));
  for (int l = 0; l < cfg.layers; ++l) {
    Acts& a = acts_[static_cast<size_t>(l)];
    const std::string h = "h." + std::to_string(l) + ".";
    const std::pair<const char*, Tensor*> table[] = {
        {"ln1", &a.ln1},   {"ln1_rstd", &a.ln1_rstd}, {"qkv", &a.qkv}, {"atty", &a.atty},       {"lse", &a.lse},
        {"res2", &a.res2}, {"ln2", &a.ln2}, {"ln2_rstd", &a.ln2_rstd}, {"fch", &a.fch}, {"fch_act", &a.fch_act},
        {"res3", &a.res3}};
    for (const auto& [n, t] : table) *t = tensor(h + n);
  }
  const std::pair<const char*, Tensor*> fixed[] = {
      {"tokens", &tokens_},     {"encoded", &encoded_},     {"lnf", &lnf_}, {"lnf_rstd", &lnf_rstd_},
      {"rope", &rope_},         {"proj_out", &proj_out_},   {"dresidual", &dresidual_},
      {"dln", &dln_},           {"datty", &datty_},         {"dqkv", &dqkv_}, {"dact", &dact_}};
  for (const auto& [n, t] : fixed) *t = tensor(n);
  wte_index_ = param_index("wte");
  norm_index_ = param_index("norm.w");
  head_index_ = cfg.tied_embeddings ? wte_index_ : param_index("lm_head.w");
  static constexpr const char* kRoles[7] = {"attn_norm.w", "attn.qkv.w", "attn.qkv.b", "attn.proj.w",
                                            "mlp_norm.w",  "mlp.gate_up.w", "mlp.down.w"};
  layer_index_.assign(static_cast<size_t>(cfg.layers), {});
  for (int l = 0; l < cfg.layers; ++l)
    for (size_t k = 0; k < 7; ++k) {
      const std::string name = "h." + std::to_string(l) + "." + kRoles[k];
      size_t& ix = layer_index_[static_cast<size_t>(l)][k];
      ix = kNone;
      for (size_t i = 0; i < layout_.size(); ++i)
        if (layout_[i].name == name) ix = i;
      TT_CHECK(ix != kNone || (k == 2 && !cfg.qkv_bias), "Llama: block %d has no parameter %s", l, kRoles[k]);
    }
  // The rotary table, once (Note [Llama layout]), in the master dtype.
  const std::vector<double> t = llama_rope_table(cfg, master_dtype() == DType::kF32);
  if (master_dtype() == DType::kF64) {
    be_.copy_h2d(rope_, t.data(), be_.compute_stream());
    TT_CHECK(be_.compute_stream().synchronize().is_ok(), "Llama: the rotary table did not reach the device");
  } else {
    const std::vector<float> f(t.begin(), t.end());
    be_.copy_h2d(rope_, f.data(), be_.compute_stream());
    TT_CHECK(be_.compute_stream().synchronize().is_ok(), "Llama: the rotary table did not reach the device");
  }
}

Llama::LayerParams Llama::layer(int l, bool grads) const {
  const auto& ix = layer_index_[static_cast<size_t>(l)];
  auto v = [&](size_t k) { return ix[k] == kNone ? Tensor() : grads ? grad(ix[k]) : cparam(ix[k]); };
  return LayerParams{v(0), v(1), v(2), v(3), v(4), v(5), v(6)};
}

void Llama::forward_blocks(ModelHooks& h) {
  h.at(Boundary::kBeforeForward, 0);
  h.op("embedding_forward");
  be_.embedding_forward(encoded_, tokens_, cparam(wte_index_), Tensor(), vocab_begin());
  if (cfg_.split_vocab) h.tp_sum("embedding", encoded_);  // Note [vocabulary-parallel cross-entropy]
  h.at(Boundary::kAfterForward, 0);
  for (int l = 0; l < cfg_.layers; ++l) {
    h.at(Boundary::kBeforeForward, 1 + l);
    forward_block(h, l);
    h.at(Boundary::kAfterForward, 1 + l);
  }
  h.at(Boundary::kBeforeForward, cfg_.layers + 1);
  h.op("rmsnorm_forward");
  be_.rmsnorm_forward(lnf_, lnf_rstd_, acts_.back().res3, cparam(norm_index_), eps());
  h.at(Boundary::kAfterForward, cfg_.layers + 1);
}

void Llama::forward_block(ModelHooks& h, int l) {
  const LayerParams w = layer(l, false);
  const Acts& a = acts_[static_cast<size_t>(l)];
  const Tensor x = block_input(l);
  const bool tp = cfg_.tp > 1;
  h.op("rmsnorm_forward");
  be_.rmsnorm_forward(a.ln1, a.ln1_rstd, x, w.attn_norm, eps());
  h.op("matmul_forward qkv");
  be_.matmul_forward(a.qkv, a.ln1, w.qkvw, w.qkvb);
  h.op("rope");
  be_.rope(a.qkv, rope_, Tensor(), local_heads(), local_kv_heads(), false);
  h.op("attention_forward");
  be_.attention_forward(a.atty, a.lse, a.qkv, local_heads());
  h.op("matmul_forward attn.proj");
  be_.matmul_forward(proj_out_, a.atty, w.projw, Tensor());
  if (tp) h.tp_sum("attn.proj", proj_out_);
  h.op("residual_rmsnorm_forward");
  be_.residual_rmsnorm_forward(a.res2, a.ln2, a.ln2_rstd, x, proj_out_, w.mlp_norm, eps());
  h.op("matmul_forward mlp.gate_up");
  be_.matmul_forward(a.fch, a.ln2, w.gate_up, Tensor());
  h.op("swiglu_forward");
  be_.swiglu_forward(a.fch_act, a.fch);
  h.op("matmul_forward mlp.down");
  be_.matmul_forward(proj_out_, a.fch_act, w.down, Tensor());
  if (tp) h.tp_sum("mlp.down", proj_out_);
  h.op("residual_forward");
  be_.residual_forward(a.res3, a.res2, proj_out_);
}

// Note [rebuilt norms]: ln2 from res2, ln1 from the block's input, with the forward's kernel: the same bits.
void Llama::rebuild_norms(ModelHooks& h, int l) {
  const LayerParams w = layer(l, false);
  const Acts& a = acts_[static_cast<size_t>(l)];
  h.op("rmsnorm_forward ln2 (rebuild)");
  be_.rmsnorm_forward(a.ln2, a.ln2_rstd, a.res2, w.mlp_norm, eps());
  h.op("rmsnorm_forward ln1 (rebuild)");
  be_.rmsnorm_forward(a.ln1, a.ln1_rstd, block_input(l), w.attn_norm, eps());
}

void Llama::rebuild_mlp(ModelHooks& h, int l) {
  const LayerParams w = layer(l, false);
  const Acts& a = acts_[static_cast<size_t>(l)];
  h.op("matmul_forward mlp.gate_up (recompute)");
  be_.matmul_forward(a.fch, a.ln2, w.gate_up, Tensor());
  h.op("swiglu_forward (recompute)");
  be_.swiglu_forward(a.fch_act, a.fch);
}

void Llama::rebuild_act(ModelHooks& h, int l) {
  const Acts& a = acts_[static_cast<size_t>(l)];
  h.op("swiglu_forward (rebuild)");
  be_.swiglu_forward(a.fch_act, a.fch);
}

void Llama::lm_head(ModelHooks& h, bool with_backward) {
  // The head's matrix: wte when tied (the embedding's backward adds to its gradient), lm_head.w otherwise.
  run_lm_head(h, with_backward, lnf_, dln_, head_index_, vocab_begin());
}

void Llama::compute_logits_rows(const Tensor& out, int64_t row_begin) {
  logits_of(out, lnf_, head_index_, row_begin);
}

void Llama::backward_blocks(ModelHooks& h) {
  Stream& s = be_.compute_stream();
  const int L = cfg_.layers;
  h.at(Boundary::kBeforeBackward, L + 1);
  h.op("zero_scratch");
  be_.fill_zero(dresidual_, s);
  h.op("rmsnorm_backward");
  be_.rmsnorm_backward(dresidual_, grad(norm_index_), dln_, acts_.back().res3, cparam(norm_index_), lnf_rstd_,
                       first_write());
  h.at(Boundary::kAfterBackward, L + 1);
  for (int l = L - 1; l >= 0; --l) {
    h.at(Boundary::kBeforeBackward, 1 + l);
    backward_block(h, l);
    h.at(Boundary::kAfterBackward, 1 + l);
  }
  h.at(Boundary::kBeforeBackward, 0);
  // d(wte) adds to the LM head's when tied; untied, nothing wrote it yet (Note [gradients first written]).
  if (!cfg_.tied_embeddings && !accumulate_grads()) {  // (accumulating: it adds to the micro-batches' before)
    h.op("zero d wte");
    be_.fill_zero(grad(wte_index_), s);
  }
  h.op("embedding_backward");
  be_.embedding_backward(grad(wte_index_), Tensor(), dresidual_, tokens_, first_write(), vocab_begin());
  h.at(Boundary::kAfterBackward, 0);
}

void Llama::backward_block(ModelHooks& h, int l) {
  const LayerParams w = layer(l, false);
  const LayerParams g = layer(l, true);
  const Acts& a = acts_[static_cast<size_t>(l)];
  const Tensor x = block_input(l);
  const GradWrite gw = block_first_write(l);  // each of the block's gradients is written once, by one op
  // MLP: res3 = res2 + down(swiglu(gate_up(ln2(res2)))); dresidual holds d(res3) and becomes d(res2).
  h.op("matmul_backward mlp.down");
  be_.matmul_backward(dact_, g.down, Tensor(), dresidual_, a.fch_act, w.down, gw);
  h.op("swiglu_backward");
  be_.swiglu_backward(a.fch, a.fch, dact_);  // in place: d(fch) over fch, dead from here (see fixed_tensors)
  h.op("matmul_backward mlp.gate_up");
  be_.matmul_backward(dln_, g.gate_up, Tensor(), a.fch, a.ln2, w.gate_up, gw);
  if (cfg_.tp > 1) h.tp_sum("d ln2", dln_);  // Note [tensor parallel]
  h.op("rmsnorm_backward");
  be_.rmsnorm_backward(dresidual_, g.mlp_norm, dln_, a.res2, w.mlp_norm, a.ln2_rstd, gw);
  // Attention: res2 = x + proj(attn(rope(qkv(ln1(x))))); dresidual becomes d(x).
  h.op("matmul_backward attn.proj");
  be_.matmul_backward(datty_, g.projw, Tensor(), dresidual_, a.atty, w.projw, gw);
  h.op("attention_backward");  // writes every element of dqkv
  be_.attention_backward(dqkv_, datty_, a.qkv, a.atty, a.lse, local_heads());
  h.op("rope backward");
  be_.rope(dqkv_, rope_, Tensor(), local_heads(), local_kv_heads(), true);
  h.op("matmul_backward qkv");
  be_.matmul_backward(dln_, g.qkvw, g.qkvb, dqkv_, a.ln1, w.qkvw, gw);
  if (cfg_.tp > 1) h.tp_sum("d ln1", dln_);
  h.op("rmsnorm_backward");
  be_.rmsnorm_backward(dresidual_, g.attn_norm, dln_, x, w.attn_norm, a.ln1_rstd, gw);
}

void Llama::decode_prefill(const NamedTensors& state, int n) {
  check_decodable(state);
  TT_CHECK(n >= 1 && n <= cfg_.seq, "decode_prefill: %d positions, the model holds 1 to %d", n, cfg_.seq);
  const Tensor& cache = state.at("decode.cache");
  const int64_t T = cfg_.seq, C = cfg_.dim, Cq = dims(cfg_, 1).Cq();
  for (int l = 0; l < cfg_.layers; ++l)
    be_.copy_d2d(cache.view(l * T * Cq, {n, Cq}), acts_[static_cast<size_t>(l)].qkv.view(0, {n, Cq}),
                 be_.compute_stream());
  be_.matmul_forward(state.at("decode.logits"), lnf_.view((n - 1) * C, {1, C}), head(), Tensor());
}

void Llama::decode_step(const NamedTensors& state) {
  check_decodable(state);
  const Tensor &cache = state.at("decode.cache"), &token = state.at("decode.token"), &pos = state.at("decode.pos"),
               &qkv = state.at("decode.qkv"), &x = state.at("decode.x"), &res2 = state.at("decode.res2"),
               &ln = state.at("decode.ln"), &atty = state.at("decode.atty"), &proj = state.at("decode.proj"),
               &fch = state.at("decode.fch"), &fch_act = state.at("decode.fch_act"), &rstd = state.at("decode.rstd");
  const int64_t T = cfg_.seq, C = cfg_.dim, Cq = dims(cfg_, 1).Cq();
  be_.embedding_forward(x.reshape({1, 1, C}), token.reshape({1, 1}), cparam(wte_index_), Tensor());
  for (int l = 0; l < cfg_.layers; ++l) {
    const LayerParams w = layer(l, false);
    be_.rmsnorm_forward(ln, rstd, x, w.attn_norm, eps());
    be_.matmul_forward(qkv, ln, w.qkvw, w.qkvb);
    be_.rope(qkv, rope_, pos, cfg_.heads, cfg_.kv_head_count(), false);
    be_.attention_decode(atty, cache.view(l * T * Cq, {1, T, Cq}), qkv, pos, cfg_.heads);
    be_.matmul_forward(proj, atty, w.projw, Tensor());
    be_.residual_rmsnorm_forward(res2, ln, rstd, x, proj, w.mlp_norm, eps());
    be_.matmul_forward(fch, ln, w.gate_up, Tensor());
    be_.swiglu_forward(fch_act, fch);
    be_.matmul_forward(proj, fch_act, w.down, Tensor());
    be_.residual_forward(x, res2, proj);
  }
  be_.rmsnorm_forward(ln, rstd, x, cparam(norm_index_), eps());
  be_.matmul_forward(state.at("decode.logits"), ln, head(), Tensor());
}

std::vector<NamedKernelCall> LlamaFamily::kernel_calls(const ModelConfig& cfg, int batch, DType dt,
                                                       int64_t lm_chunk_rows, ModelPiece piece, int segment) const {
  const Dims d = dims(cfg, batch);
  const int64_t BT = d.B * d.T, C = d.C, Vl = d.Vl, bias = cfg.qkv_bias ? 1 : 0;
  const DType md = master_dtype_for(dt);
  const int L = cfg.layers;
  std::vector<NamedKernelCall> r;
  auto add = [&](const char* name, KernelOp op, std::array<int64_t, 5> dims, DType type) {
    r.push_back({name, KernelCall{op, type, dims}});
  };
  auto block_forward = [&] {
    add("rmsnorm_forward", KernelOp::kRmsnormForward, {BT, C}, dt);
    add("matmul_forward qkv", KernelOp::kMatmulForward, {BT, d.Cq(), C, bias}, dt);
    add("rope", KernelOp::kRope, {BT, d.Hl() + d.KVl(), d.hs, 0}, dt);
    add("attention_forward", KernelOp::kAttentionForward, {d.B, d.T, d.Hl(), d.hs, d.KVl()}, dt);
    add("matmul_forward attn.proj", KernelOp::kMatmulForward, {BT, C, d.Cl(), 0}, dt);
    add("residual_rmsnorm_forward", KernelOp::kResidualRmsnormForward, {BT, C}, dt);
    add("matmul_forward mlp.gate_up", KernelOp::kMatmulForward, {BT, 2 * d.Fl(), C, 0}, dt);
    add("swiglu_forward", KernelOp::kSwigluForward, {BT, d.Fl()}, dt);
    add("matmul_forward mlp.down", KernelOp::kMatmulForward, {BT, C, d.Fl(), 0}, dt);
    add("residual_forward", KernelOp::kResidualForward, {BT * C}, dt);
  };
  switch (piece) {
    case ModelPiece::kForward:
    case ModelPiece::kForwardActApart:  // SwiGLU is always a kernel of its own
      if (segment == 0) add("embedding_forward", KernelOp::kEmbeddingForward, {d.B, d.T, C, Vl}, dt);
      else if (segment == L + 1) add("rmsnorm_forward", KernelOp::kRmsnormForward, {BT, C}, dt);
      else block_forward();
      break;
    case ModelPiece::kRebuildBlock:
      block_forward();
      break;
    case ModelPiece::kRebuildNorms:
      add("rmsnorm_forward ln2 (rebuild)", KernelOp::kRmsnormForward, {BT, C}, dt);
      add("rmsnorm_forward ln1 (rebuild)", KernelOp::kRmsnormForward, {BT, C}, dt);
      break;
    case ModelPiece::kRebuildMlp:
      add("matmul_forward mlp.gate_up (recompute)", KernelOp::kMatmulForward, {BT, 2 * d.Fl(), C, 0}, dt);
      add("swiglu_forward (recompute)", KernelOp::kSwigluForward, {BT, d.Fl()}, dt);
      break;
    case ModelPiece::kRebuildAct:
      add("swiglu_forward (rebuild)", KernelOp::kSwigluForward, {BT, d.Fl()}, dt);
      break;
    case ModelPiece::kHead:
    case ModelPiece::kHeadWithBackward:
      append_head_kernel_calls(r, cfg, batch, dt, lm_chunk_rows, piece == ModelPiece::kHeadWithBackward);
      break;
    case ModelPiece::kBackward:
      if (segment == 0) {
        if (!cfg.tied_embeddings) add("zero d wte", KernelOp::kFillZero, {Vl * C}, md);
        add("embedding_backward", KernelOp::kEmbeddingBackward, {d.B, d.T, C, Vl}, dt);
      } else if (segment == L + 1) {
        add("zero_scratch", KernelOp::kFillZero, {BT * C}, dt);
        add("rmsnorm_backward", KernelOp::kRmsnormBackward, {BT, C}, dt);
      } else {
        add("matmul_backward mlp.down", KernelOp::kMatmulBackward, {BT, C, d.Fl(), 0}, dt);
        add("swiglu_backward", KernelOp::kSwigluBackward, {BT, d.Fl()}, dt);
        add("matmul_backward mlp.gate_up", KernelOp::kMatmulBackward, {BT, 2 * d.Fl(), C, 0}, dt);
        add("rmsnorm_backward", KernelOp::kRmsnormBackward, {BT, C}, dt);
        add("matmul_backward attn.proj", KernelOp::kMatmulBackward, {BT, C, d.Cl(), 0}, dt);
        add("attention_backward", KernelOp::kAttentionBackward, {d.B, d.T, d.Hl(), d.hs, d.KVl()}, dt);
        add("rope backward", KernelOp::kRope, {BT, d.Hl() + d.KVl(), d.hs, 1}, dt);
        add("matmul_backward qkv", KernelOp::kMatmulBackward, {BT, d.Cq(), C, bias}, dt);
        add("rmsnorm_backward", KernelOp::kRmsnormBackward, {BT, C}, dt);
      }
      break;
  }
  return r;
}

}  // namespace tt
