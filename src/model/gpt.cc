#include "model/gpt.h"

#include <algorithm>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/log.h"
#include "core/rng.h"

namespace tt {

Status GptConfig::validate() const {
  TT_RETURN_IF(vocab < 2 || vocab > 1 << 20, kInvalidArgument, "vocabulary size %d is out of range [2, 1048576]",
               vocab);
  TT_RETURN_IF(layers < 1, kInvalidArgument, "--layers must be >= 1, got %d", layers);
  TT_RETURN_IF(dim < 1 || heads < 1, kInvalidArgument, "--dim and --heads must be >= 1, got %d and %d", dim, heads);
  TT_RETURN_IF(dim % heads != 0, kInvalidArgument, "--dim %d is not divisible by --heads %d", dim, heads);
  TT_RETURN_IF(seq < 1, kInvalidArgument, "--seq must be >= 1, got %d", seq);
  TT_RETURN_IF(tp < 1 || heads % tp != 0, kInvalidArgument,
               "%d attention heads cannot be split %d ways over tensor-parallel ranks", heads, tp);
  TT_RETURN_IF(split_vocab && (tp < 2 || padded_vocab() % tp != 0), kInvalidArgument,
               "the vocabulary (%d rows, padded) cannot be split %d ways", padded_vocab(), tp);
  return Status::ok();
}

std::vector<ParamInfo> gpt_param_layout(const GptConfig& cfg) {
  const int64_t V = cfg.padded_vocab(), C = cfg.dim, T = cfg.seq, tp = cfg.tp, Cl = C / tp, Fl = 4 * C / tp;
  std::vector<ParamInfo> out;
  int64_t offset = 0;
  auto add = [&](std::string name, Shape shape, bool decay, int layer, bool sharded = false) {
    out.push_back(ParamInfo{std::move(name), shape, offset, decay, layer, sharded});
    offset += shape.numel();
  };
  if (cfg.split_vocab) {  // Note [vocabulary-parallel cross-entropy]: replicated wpe first, then this rank's rows
    add("wpe", {T, C}, true, -1);
    add("wte", {V / tp, C}, true, -1, true);
  } else {
    add("wte", {V, C}, true, -1);
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
      add(p + "attn.qkv.w", {3 * Cl, C}, true, l, true);
      add(p + "attn.proj.w", {C, Cl}, true, l, true);
      add(p + "mlp.fc.w", {Fl, C}, true, l, true);
      add(p + "mlp.proj.w", {C, Fl}, true, l, true);
      add(p + "attn.qkv.b", {3 * Cl}, false, l, true);
      add(p + "mlp.fc.b", {Fl}, false, l, true);
      continue;
    }
    add(p + "ln1.w", {C}, false, l);
    add(p + "ln1.b", {C}, false, l);
    add(p + "attn.qkv.w", {3 * C, C}, true, l);
    add(p + "attn.qkv.b", {3 * C}, false, l);
    add(p + "attn.proj.w", {C, C}, true, l);
    add(p + "attn.proj.b", {C}, false, l);
    add(p + "ln2.w", {C}, false, l);
    add(p + "ln2.b", {C}, false, l);
    add(p + "mlp.fc.w", {4 * C, C}, true, l);
    add(p + "mlp.fc.b", {4 * C}, false, l);
    add(p + "mlp.proj.w", {C, 4 * C}, true, l);
    add(p + "mlp.proj.b", {C}, false, l);
  }
  add("lnf.w", {C}, false, -1);
  add("lnf.b", {C}, false, -1);
  return out;
}

int64_t gpt_num_params(const GptConfig& cfg) {
  const GptSegments s = gpt_segments(cfg);
  return s.offset.back() + s.size.back();
}

DType master_dtype_for(DType compute) { return compute == DType::kBF16 ? DType::kF32 : compute; }

GptSegments gpt_segments(const GptConfig& cfg) {
  // The last model each thread asked about, remembered: the automatic plan's search asks for the same model's
  // segments tens of thousands of times (each candidate's inventory), and the layout builds a name per parameter.
  thread_local std::optional<std::pair<GptConfig, GptSegments>> last;
  if (last && last->first == cfg) return last->second;
  GptSegments s;
  const size_t S = static_cast<size_t>(cfg.layers) + 2;
  s.offset.assign(S, -1);
  s.size.assign(S, 0);
  s.shard_begin.assign(S, -1);
  for (const ParamInfo& p : gpt_param_layout(cfg)) {
    const size_t k = p.layer >= 0 ? static_cast<size_t>(p.layer) + 1 : p.name.rfind("lnf", 0) == 0 ? S - 1 : 0;
    if (s.offset[k] < 0) s.offset[k] = p.offset;
    TT_CHECK(p.offset == s.offset[k] + s.size[k], "parameter %s breaks segment %zu", p.name.c_str(), k);
    TT_CHECK(p.sharded || s.shard_begin[k] < 0, "replicated parameter %s follows sharded ones", p.name.c_str());
    if (p.sharded && s.shard_begin[k] < 0) s.shard_begin[k] = p.offset;
    s.size[k] += p.shape.numel();
    s.of_param.push_back(static_cast<int>(k));
  }
  for (size_t k = 0; k < S; ++k)
    if (s.shard_begin[k] < 0) s.shard_begin[k] = s.offset[k] + s.size[k];
  last.emplace(cfg, s);
  return s;
}

int64_t gpt_default_lm_chunk_rows(const GptConfig& cfg, int batch, DType compute) {
  // Note [LM head in chunks]: at most 512 MiB of logits, in chunks of equal size (a multiple of 64 rows).
  constexpr int64_t kChunkBytes = int64_t(512) << 20;
  const int64_t rows = static_cast<int64_t>(batch) * cfg.seq;
  const int64_t fit = kChunkBytes / (static_cast<int64_t>(cfg.local_vocab()) * static_cast<int64_t>(dtype_size(compute)));
  if (fit >= rows) return rows;
  const int64_t most = std::max<int64_t>(64, fit / 64 * 64);
  const int64_t chunks = (rows + most - 1) / most;
  const int64_t even = ((rows + chunks - 1) / chunks + 63) / 64 * 64;
  return std::min({rows, most, even});
}

std::vector<TensorRequest> gpt_block_activations(const GptConfig& cfg, int batch, DType dt, unsigned parts) {
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
      {kPartFc, {"fch", {B, T, Fl}, dt, A}},        {kPartGelu, {"fch_gelu", {B, T, Fl}, dt, A}}};
  std::vector<TensorRequest> r;
  for (const auto& [part, a] : all)
    if ((parts & part) != 0) r.push_back(a);
  return r;
}

std::vector<TensorRequest> gpt_fixed_tensors(const GptConfig& cfg, int batch, DType dt, int64_t lm_chunk_rows) {
  const int64_t B = batch, T = cfg.seq, C = cfg.dim, V = cfg.local_vocab(), Cl = C / cfg.tp, Fl = 4 * C / cfg.tp;
  const DType md = master_dtype_for(dt);
  const TensorClass A = TensorClass::kActivation, W = TensorClass::kWorkspace;
  std::vector<TensorRequest> r = {{"tokens", {B, T}, DType::kI32, TensorClass::kInput},
                                  {"targets", {B, T}, DType::kI32, TensorClass::kInput},
                                  {"encoded", {B, T, C}, dt, A}};
  for (int l = 0; l < cfg.layers; ++l) r.push_back({"h." + std::to_string(l) + ".res3", {B, T, C}, dt, A, l});
  const int64_t chunk = lm_chunk_rows > 0 ? std::min(lm_chunk_rows, B * T) : gpt_default_lm_chunk_rows(cfg, batch, dt);
  for (TensorRequest t : std::initializer_list<TensorRequest>{
           {"lnf", {B, T, C}, dt, A},        {"lnf_mean", {B, T}, md, A},     {"lnf_rstd", {B, T}, md, A},
           {"logits", {chunk, V}, dt, W},    {"losses", {B, T}, md, A},       {"proj_out", {B, T, C}, dt, W},
           {"dresidual", {B, T, C}, dt, W},  {"dln", {B, T, C}, dt, W},       {"datty", {B, T, Cl}, dt, W},
           {"dqkv", {B, T, 3 * Cl}, dt, W},  {"dfch", {B, T, Fl}, dt, W}})
    r.push_back(std::move(t));
  if (cfg.split_vocab) r.push_back({"xent_stats", {3, chunk}, md, W});
  return r;
}

Tensor* BlockActs::slot(const std::string& name) {
  const std::pair<const char*, Tensor*> table[] = {
      {"ln1", &ln1},   {"ln1_mean", &ln1_mean}, {"ln1_rstd", &ln1_rstd}, {"qkv", &qkv},
      {"atty", &atty}, {"lse", &lse},           {"res2", &res2},         {"ln2", &ln2},
      {"ln2_mean", &ln2_mean}, {"ln2_rstd", &ln2_rstd}, {"fch", &fch},  {"fch_gelu", &fch_gelu},
      {"res3", &res3}};
  for (const auto& [n, p] : table)
    if (name == n) return p;
  return nullptr;
}

Tensor* GptTensors::slot(const std::string& name) {
  if (name.rfind("h.", 0) == 0) {
    const size_t dot = name.find('.', 2);
    if (dot == std::string::npos || dot == 2 || name.find_first_not_of("0123456789", 2) != dot) return nullptr;
    const size_t l = static_cast<size_t>(std::stoul(name.substr(2, dot - 2)));
    return l < acts.size() ? acts[l].slot(name.substr(dot + 1)) : nullptr;
  }
  const std::pair<const char*, Tensor*> table[] = {
      {"tokens", &tokens},       {"targets", &targets},   {"encoded", &encoded}, {"lnf", &lnf},
      {"lnf_mean", &lnf_mean},   {"lnf_rstd", &lnf_rstd}, {"logits", &logits},   {"losses", &losses},
      {"proj_out", &proj_out},   {"dresidual", &dresidual}, {"dln", &dln},       {"datty", &datty},
      {"dqkv", &dqkv},           {"dfch", &dfch},         {"xent_stats", &xent_stats}};
  for (const auto& [n, p] : table)
    if (name == n) return p;
  return nullptr;
}

Tensor* GptDecodeState::slot(const std::string& name) {
  const std::pair<const char*, Tensor*> table[] = {
      {"decode.cache", &cache}, {"decode.token", &token},     {"decode.pos", &pos},   {"decode.qkv", &qkv},
      {"decode.x", &x},         {"decode.res2", &res2},
      {"decode.ln", &ln},       {"decode.atty", &atty},       {"decode.proj", &proj}, {"decode.fch", &fch},
      {"decode.fch_gelu", &fch_gelu}, {"decode.mean", &mean}, {"decode.rstd", &rstd}, {"decode.logits", &logits}};
  for (const auto& [n, p] : table)
    if (name == n) return p;
  return nullptr;
}

std::vector<TensorRequest> gpt_decode_tensors(const GptConfig& cfg, DType dt) {
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

const char* boundary_name(Boundary b) {
  switch (b) {
    case Boundary::kBeforeForward: return "before_forward";
    case Boundary::kAfterForward: return "after_forward";
    case Boundary::kBeforeHead: return "before_head";
    case Boundary::kAfterHead: return "after_head";
    case Boundary::kBeforeBackward: return "before_backward";
    case Boundary::kAfterBackward: return "after_backward";
  }
  return "?";
}

void GptHooks::tp_sum(const char* name, const Tensor& t) {
  (void)t;
  TT_CHECK(false, "a tensor-parallel model asked its hooks to sum %s over the ranks, and these hooks have no ranks",
           name);
}

void GptHooks::tp_max(const char* name, const Tensor& t) {
  (void)t;
  TT_CHECK(false, "a tensor-parallel model asked its hooks for the maximum of %s over the ranks, and these hooks have "
           "no ranks", name);
}

std::vector<ShardCopy> gpt_shard_copies(const GptConfig& cfg, int tp_rank) {
  const std::vector<ParamInfo> local = gpt_param_layout(cfg);
  const std::vector<ParamInfo> whole = gpt_param_layout(cfg.whole());
  TT_CHECK(tp_rank >= 0 && tp_rank < cfg.tp, "tensor-parallel rank %d of %d", tp_rank, cfg.tp);
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : whole) by_name[p.name] = &p;
  const int64_t C = cfg.dim, r = tp_rank;
  std::vector<ShardCopy> out;
  for (const ParamInfo& p : local) {
    const ParamInfo& w = *by_name.at(p.name);
    if (!p.sharded) {
      out.push_back({w.offset, p.offset, p.shape.numel()});
      continue;
    }
    const int64_t rows = p.shape[0], cols = p.shape.rank() == 2 ? p.shape[1] : 1;
    if (p.name.ends_with("attn.qkv.w") || p.name.ends_with("attn.qkv.b")) {
      // Q, K and V rows of this rank's heads: three blocks of C/tp rows.
      const int64_t part = rows / 3;
      for (int64_t j = 0; j < 3; ++j) out.push_back({w.offset + (j * C + r * part) * cols, p.offset + j * part * cols, part * cols});
    } else if (p.name == "wte" || p.name.ends_with("mlp.fc.w") || p.name.ends_with("mlp.fc.b")) {
      out.push_back({w.offset + r * rows * cols, p.offset, rows * cols});  // a block of rows
    } else {
      // The output projections: this rank's columns of every row.
      const int64_t whole_cols = w.shape[1];
      for (int64_t i = 0; i < rows; ++i) out.push_back({w.offset + i * whole_cols + r * cols, p.offset + i * cols, cols});
    }
  }
  return out;
}

void gpt_take_shard(const GptConfig& cfg, int tp_rank, const void* whole, void* local, size_t esize) {
  const auto* from = static_cast<const unsigned char*>(whole);
  auto* to = static_cast<unsigned char*>(local);
  for (const ShardCopy& c : gpt_shard_copies(cfg, tp_rank))
    std::memcpy(to + static_cast<size_t>(c.local) * esize, from + static_cast<size_t>(c.whole) * esize,
                static_cast<size_t>(c.count) * esize);
}

void gpt_put_shard(const GptConfig& cfg, int tp_rank, const void* local, void* whole, size_t esize) {
  const auto* from = static_cast<const unsigned char*>(local);
  auto* to = static_cast<unsigned char*>(whole);
  for (const ShardCopy& c : gpt_shard_copies(cfg, tp_rank))
    std::memcpy(to + static_cast<size_t>(c.whole) * esize, from + static_cast<size_t>(c.local) * esize,
                static_cast<size_t>(c.count) * esize);
}

namespace {
// Checks that t has the shape and dtype of the request (a programming error of the executor otherwise).
void check_tensor(const Tensor& t, const TensorRequest& r) {
  TT_CHECK(t.raw() != nullptr, "Gpt: tensor %s is not bound", r.name.c_str());
  TT_CHECK(t.shape() == r.shape && t.dtype() == r.dtype, "Gpt: tensor %s is %s %s, expected %s %s",
           r.name.c_str(), t.shape().to_string().c_str(), dtype_name(t.dtype()), r.shape.to_string().c_str(),
           dtype_name(r.dtype));
}
}  // namespace

Gpt::Gpt(Backend& backend, const GptConfig& cfg, int batch, DType dtype, GptTensors tensors)
    : be_(backend), cfg_(cfg), batch_(batch), dtype_(dtype), layout_(gpt_param_layout(cfg)),
      segs_(gpt_segments(cfg)), num_params_(gpt_num_params(cfg)), t_(std::move(tensors)) {
  TT_CHECK(cfg.validate().is_ok() && batch >= 1, "Gpt: invalid configuration or batch %d", batch);
  TT_CHECK(t_.acts.size() == static_cast<size_t>(cfg.layers) &&
               t_.params.size() == static_cast<size_t>(num_segments()) &&
               t_.grads.size() == static_cast<size_t>(num_segments()),
           "Gpt: %zu activation sets, %zu parameter and %zu gradient segments for %d layers", t_.acts.size(),
           t_.params.size(), t_.grads.size(), cfg.layers);
  for (int s = 0; s < num_segments(); ++s) {
    const Shape shape{segs_.size[static_cast<size_t>(s)]};
    check_tensor(t_.params[static_cast<size_t>(s)], {"params.seg" + std::to_string(s), shape, dtype, TensorClass::kParam});
    check_tensor(t_.grads[static_cast<size_t>(s)],
                 {"grads.seg" + std::to_string(s), shape, master_dtype(), TensorClass::kGrad});
  }
  for (int l = 0; l < cfg.layers; ++l)
    for (TensorRequest r : gpt_block_activations(cfg, batch, dtype)) {
      r.name = "h." + std::to_string(l) + "." + r.name;
      check_tensor(*t_.slot(r.name), r);
    }
  wte_index_ = cfg.split_vocab ? 1 : 0;
  TT_CHECK(layout_[wte_index_].name == "wte", "Gpt: wte is not parameter %zu", wte_index_);
  // Each block's parameters by role (their order in the layout depends on tp: gpt_param_layout).
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
  lm_chunk_rows_ = t_.logits.raw() ? t_.logits.dim(0) : 0;
  for (const TensorRequest& r : gpt_fixed_tensors(cfg, batch, dtype, lm_chunk_rows_)) {
    const Tensor* t = t_.slot(r.name);
    TT_CHECK(t != nullptr, "Gpt: no slot for tensor %s", r.name.c_str());
    check_tensor(*t, r);
  }
}

Tensor Gpt::cparam(size_t i) const {
  const ParamInfo& p = layout_[i];
  const size_t s = static_cast<size_t>(segs_.of_param[i]);
  return t_.params[s].view(p.offset - segs_.offset[s], p.shape);
}

Tensor Gpt::grad(size_t i) const {
  const ParamInfo& p = layout_[i];
  const size_t s = static_cast<size_t>(segs_.of_param[i]);
  return t_.grads[s].view(p.offset - segs_.offset[s], p.shape);
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

void Gpt::forward_blocks(GptHooks& h) {
  h.at(Boundary::kBeforeForward, 0);
  h.op("embedding_forward");
  if (cfg_.split_vocab) {  // Note [vocabulary-parallel cross-entropy]: wpe from rank 0, each token's row from its owner
    be_.embedding_forward(t_.encoded, t_.tokens, wte(), tp_rank_ == 0 ? wpe() : Tensor(), vocab_begin());
    h.tp_sum("embedding", t_.encoded);
  } else {
    be_.embedding_forward(t_.encoded, t_.tokens, wte(), wpe());
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
  be_.layernorm_forward(t_.lnf, t_.lnf_mean, t_.lnf_rstd, t_.acts.back().res3, cparam(lnf), cparam(lnf + 1));
  h.at(Boundary::kAfterForward, cfg_.layers + 1);
}

void Gpt::forward_block(GptHooks& h, int l) {
  const LayerParams w = compute_layer(l);
  const BlockActs& a = t_.acts[static_cast<size_t>(l)];
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
  be_.matmul_forward(t_.proj_out, a.atty, w.projw, tp && tp_rank_ != 0 ? Tensor() : w.projb);
  if (tp) h.tp_sum("attn.proj", t_.proj_out);
  h.op("residual_layernorm_forward");
  be_.residual_layernorm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, t_.proj_out, w.ln2w, w.ln2b);
  if (gelu_apart(l)) {  // Note [rebuilt GELU]: the kernel its rebuild runs
    h.op("matmul_forward mlp.fc");
    be_.matmul_forward(a.fch, a.ln2, w.fcw, w.fcb);
    h.op("gelu_forward mlp.gelu");
    be_.gelu_forward(a.fch_gelu, a.fch);
  } else {
    h.op("matmul_gelu_forward mlp.fc");
    be_.matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, w.fcw, w.fcb);
  }
  h.op("matmul_forward mlp.proj");
  be_.matmul_forward(t_.proj_out, a.fch_gelu, w.fcprojw, tp && tp_rank_ != 0 ? Tensor() : w.fcprojb);
  if (tp) h.tp_sum("mlp.proj", t_.proj_out);
  h.op("residual_forward");
  be_.residual_forward(a.res3, a.res2, t_.proj_out);
}

// Note [rebuilt norms]: ln2 from res2 (resident, or just brought back), ln1 from the block's input. ln2 was made
// in the forward by residual_layernorm_forward, which normalises the residual as rounded and stored, with
// layernorm_forward's arithmetic: the same bits (tested on both backends).
void Gpt::rebuild_norms(GptHooks& h, int l) {
  const LayerParams w = compute_layer(l);
  const BlockActs& a = t_.acts[static_cast<size_t>(l)];
  h.op("layernorm_forward ln2 (rebuild)");
  be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2w, w.ln2b);
  h.op("layernorm_forward ln1 (rebuild)");
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, block_input(l), w.ln1w, w.ln1b);
}

// Note [MLP half]: fch and fch_gelu from ln2 (resident, or just brought back) with the forward's kernel.
void Gpt::rebuild_mlp(GptHooks& h, int l) {
  const LayerParams w = compute_layer(l);
  const BlockActs& a = t_.acts[static_cast<size_t>(l)];
  h.op("matmul_gelu_forward mlp.fc (recompute)");
  be_.matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, w.fcw, w.fcb);
}

// Note [rebuilt GELU]: fch_gelu from fch (resident, or just brought back) with the kernel the block's forward ran.
void Gpt::rebuild_gelu(GptHooks& h, int l) {
  TT_CHECK(gelu_apart(l), "rebuild_gelu of block %d, whose forward fused its GELU into the GEMM", l);
  const BlockActs& a = t_.acts[static_cast<size_t>(l)];
  h.op("gelu_forward mlp.gelu (rebuild)");
  be_.gelu_forward(a.fch_gelu, a.fch);
}

void Gpt::set_gelu_apart(std::vector<bool> apart) {
  TT_CHECK(apart.empty() || apart.size() == static_cast<size_t>(cfg_.layers),
           "set_gelu_apart: %zu flags for %d layers", apart.size(), cfg_.layers);
  gelu_apart_ = std::move(apart);
}

void Gpt::lm_head(GptHooks& h, bool with_backward) {
  h.at(Boundary::kBeforeHead, 0);
  // Training: each chunk's matmul_backward writes its own rows of d(lnf) (it overwrites: no zeroing first); the first
  // chunk overwrites d(wte), the others add to it (Note [gradients first written] in backend/backend.h).
  const int64_t BT = static_cast<int64_t>(batch_) * cfg_.seq, C = cfg_.dim, Vp = cfg_.local_vocab();
  const Tensor wte = this->wte();
  const float dloss = 1.0f / static_cast<float>(BT);
  for (int64_t r0 = 0; r0 < BT; r0 += lm_chunk_rows_) {
    const int64_t n = std::min(lm_chunk_rows_, BT - r0);
    const Tensor logits = t_.logits.view(0, {n, Vp});
    const Tensor x = t_.lnf.view(r0 * C, {n, C});
    const Tensor tg = t_.targets.view(r0, {n});
    const GradWrite gw = r0 == 0 ? GradWrite::kOverwrite : GradWrite::kAccumulate;
    h.op("matmul_forward lm_head");
    be_.matmul_forward(logits, x, wte, Tensor());
    if (cfg_.split_vocab) {  // Note [vocabulary-parallel cross-entropy]
      const Tensor stats = t_.xent_stats.view(0, {3, n});
      h.op("xent_local_max");
      be_.xent_local_max(stats, logits, vocab_begin(), cfg_.vocab);
      h.tp_max("xent max", stats.view(0, {n}));
      h.op("xent_local_sums");
      be_.xent_local_sums(stats, logits, tg, vocab_begin(), cfg_.vocab);
      h.tp_sum("xent sums", stats.view(n, {2 * n}));
      h.op("xent_finish");
      be_.xent_finish(t_.losses.view(r0, {n}), with_backward ? logits : Tensor(), logits, stats, tg, dloss,
                      vocab_begin(), cfg_.vocab);
      if (with_backward) {
        h.op("matmul_backward lm_head");
        be_.matmul_backward(t_.dln.view(r0 * C, {n, C}), grad(wte_index_), Tensor(), logits, x, wte, gw);
      }
      continue;
    }
    if (!with_backward) {
      h.op("softmax_xent_forward");
      be_.softmax_xent_forward(t_.losses.view(r0, {n}), logits, logits, tg, cfg_.vocab);
      continue;
    }
    // Training: the probabilities go straight to their gradients, in place.
    h.op("softmax_xent_fused");
    be_.softmax_xent_fused(t_.losses.view(r0, {n}), logits, logits, tg, dloss, cfg_.vocab);
    h.op("matmul_backward lm_head");
    be_.matmul_backward(t_.dln.view(r0 * C, {n, C}), grad(wte_index_), Tensor(), logits, x, wte, gw);
  }
  // Each rank's columns gave their share of d(lnf).
  if (cfg_.split_vocab && with_backward) h.tp_sum("d lnf", t_.dln);
  h.at(Boundary::kAfterHead, 0);
}

void Gpt::compute_logits(const Tensor& out) {
  TT_CHECK(!cfg_.split_vocab, "compute_logits of a model whose vocabulary is split over ranks");
  const int64_t BT = static_cast<int64_t>(batch_) * cfg_.seq;
  be_.matmul_forward(out.reshape({BT, cfg_.padded_vocab()}), t_.lnf.reshape({BT, cfg_.dim}), wte(), Tensor());
}

namespace {
void check_decodable(const GptConfig& cfg, int batch, DType dt, GptDecodeState& s) {
  TT_CHECK(batch == 1 && cfg.tp == 1 && !cfg.split_vocab,
           "decoding needs a model of batch 1 on one rank (batch %d, tp %d)", batch, cfg.tp);
  for (const TensorRequest& r : gpt_decode_tensors(cfg, dt)) check_tensor(*s.slot(r.name), r);
}
}  // namespace

void Gpt::decode_prefill(const GptDecodeState& s, int n) {
  GptDecodeState st = s;
  check_decodable(cfg_, batch_, dtype_, st);
  TT_CHECK(n >= 1 && n <= cfg_.seq, "decode_prefill: %d positions, the model holds 1 to %d", n, cfg_.seq);
  const int64_t T = cfg_.seq, C = cfg_.dim, C3 = 3 * C;
  for (int l = 0; l < cfg_.layers; ++l)
    be_.copy_d2d(s.cache.view(l * T * C3, {n, C3}), t_.acts[static_cast<size_t>(l)].qkv.view(0, {n, C3}),
                 be_.compute_stream());
  be_.matmul_forward(s.logits, t_.lnf.view((n - 1) * C, {1, C}), wte(), Tensor());
}

void Gpt::decode_step(const GptDecodeState& s) {
  GptDecodeState st = s;
  check_decodable(cfg_, batch_, dtype_, st);
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

void Gpt::backward_blocks(GptHooks& h) {
  Stream& s = be_.compute_stream();
  // dln holds d(lnf output) from the LM head.
  const int L = cfg_.layers;
  h.at(Boundary::kBeforeBackward, L + 1);
  h.op("zero_scratch");
  be_.fill_zero(t_.dresidual, s);
  const size_t lnf = layout_.size() - 2;
  h.op("layernorm_backward");
  be_.layernorm_backward(t_.dresidual, grad(lnf), grad(lnf + 1), t_.dln, t_.acts.back().res3, cparam(lnf),
                         t_.lnf_mean, t_.lnf_rstd, GradWrite::kOverwrite);
  h.at(Boundary::kAfterBackward, L + 1);
  for (int l = L - 1; l >= 0; --l) {
    h.at(Boundary::kBeforeBackward, 1 + l);
    backward_block(h, l);
    h.at(Boundary::kAfterBackward, 1 + l);
  }
  h.at(Boundary::kBeforeBackward, 0);
  h.op("embedding_backward");
  // d(wte) adds to the LM head's; d(wpe) is written here first.
  be_.embedding_backward(grad(wte_index_), grad(wte_index_ ^ 1), t_.dresidual, t_.tokens, GradWrite::kOverwrite,
                         vocab_begin());
  h.at(Boundary::kAfterBackward, 0);
}

void Gpt::backward_block(GptHooks& h, int l) {
  const LayerParams w = compute_layer(l);
  const LayerParams g = grad_layer(l);
  const BlockActs& a = t_.acts[static_cast<size_t>(l)];
  const Tensor x = block_input(l);
  const GradWrite gw = GradWrite::kOverwrite;  // each of the block's gradients is written once, by one op
  // MLP: res3 = res2 + proj(gelu(fc(ln2(res2)))); dresidual holds d(res3) and becomes d(res2).
  h.op("matmul_backward_gelu mlp.proj");
  be_.matmul_backward_gelu(t_.dfch, g.fcprojw, g.fcprojb, t_.dresidual, a.fch_gelu, w.fcprojw, a.fch, gw);
  h.op("matmul_backward mlp.fc");  // overwrites dln (as every matmul_backward its dinp)
  be_.matmul_backward(t_.dln, g.fcw, g.fcb, t_.dfch, a.ln2, w.fcw, gw);
  if (cfg_.tp > 1) h.tp_sum("d ln2", t_.dln);  // Note [tensor parallel]: each rank's heads' share of d(ln2)
  h.op("layernorm_backward");
  be_.layernorm_backward(t_.dresidual, g.ln2w, g.ln2b, t_.dln, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd, gw);
  // Attention: res2 = x + proj(attn(qkv(ln1(x)))); dresidual becomes d(x).
  h.op("matmul_backward attn.proj");
  be_.matmul_backward(t_.datty, g.projw, g.projb, t_.dresidual, a.atty, w.projw, gw);
  h.op("attention_backward");  // writes every element of dqkv: no zeroing first
  be_.attention_backward(t_.dqkv, t_.datty, a.qkv, a.atty, a.lse, cfg_.heads / cfg_.tp);
  h.op("matmul_backward qkv");
  be_.matmul_backward(t_.dln, g.qkvw, g.qkvb, t_.dqkv, a.ln1, w.qkvw, gw);
  if (cfg_.tp > 1) h.tp_sum("d ln1", t_.dln);
  h.op("layernorm_backward");
  be_.layernorm_backward(t_.dresidual, g.ln1w, g.ln1b, t_.dln, x, w.ln1w, a.ln1_mean, a.ln1_rstd, gw);
}

std::vector<int64_t> gpt_tp_collectives(const GptConfig& cfg, int batch, DType dt, int64_t lm_chunk_rows,
                                        GptPiece piece, int segment) {
  std::vector<int64_t> r;
  if (cfg.tp == 1) return r;
  const int L = cfg.layers;
  const int64_t BT = static_cast<int64_t>(batch) * cfg.seq, e = static_cast<int64_t>(dtype_size(dt)),
                me = static_cast<int64_t>(dtype_size(master_dtype_for(dt))), act = BT * cfg.dim * e;
  const bool block = segment >= 1 && segment <= L;
  switch (piece) {
    case GptPiece::kForward:
      if (segment == 0 && cfg.split_vocab) r.push_back(act);  // the embedding's rows from their owners
      if (block) r = {act, act};                              // attn.proj, mlp.proj
      break;
    case GptPiece::kForwardGeluApart:
    case GptPiece::kRebuildBlock:
      r = {act, act};
      break;
    case GptPiece::kBackward:
      if (block) r = {act, act};  // d ln2, d ln1
      break;
    case GptPiece::kHead:
    case GptPiece::kHeadWithBackward: {
      if (!cfg.split_vocab) break;
      const int64_t chunk = lm_chunk_rows > 0 ? std::min(lm_chunk_rows, BT) : gpt_default_lm_chunk_rows(cfg, batch, dt);
      for (int64_t r0 = 0; r0 < BT; r0 += chunk) {
        const int64_t n = std::min(chunk, BT - r0);
        r.push_back(n * me);      // xent max
        r.push_back(2 * n * me);  // xent sums
      }
      if (piece == GptPiece::kHeadWithBackward) r.push_back(act);  // d lnf
      break;
    }
    case GptPiece::kRebuildNorms:
    case GptPiece::kRebuildMlp:
    case GptPiece::kRebuildGelu:
      break;
  }
  return r;
}

std::vector<NamedKernelCall> gpt_kernel_calls(const GptConfig& cfg, int batch, DType dt, int64_t lm_chunk_rows,
                                              GptPiece piece, int segment) {
  const int64_t B = batch, T = cfg.seq, C = cfg.dim, H = cfg.heads / cfg.tp, BT = B * T;
  const int64_t Cl = C / cfg.tp, Fl = 4 * C / cfg.tp, Vl = cfg.local_vocab();  // Note [tensor parallel]: this rank's
  const int L = cfg.layers;
  std::vector<NamedKernelCall> r;
  auto add = [&](const char* name, KernelOp op, std::array<int64_t, 4> dims) {
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
    case GptPiece::kForward:
      if (segment == 0) add("embedding_forward", KernelOp::kEmbeddingForward, {B, T, C, Vl});
      else if (segment == L + 1) add("layernorm_forward", KernelOp::kLayernormForward, {BT, C});
      else block_forward();
      break;
    case GptPiece::kRebuildBlock:
      block_forward();
      break;
    case GptPiece::kRebuildNorms:
      add("layernorm_forward ln2 (rebuild)", KernelOp::kLayernormForward, {BT, C});
      add("layernorm_forward ln1 (rebuild)", KernelOp::kLayernormForward, {BT, C});
      break;
    case GptPiece::kRebuildMlp:
      add("matmul_gelu_forward mlp.fc (recompute)", KernelOp::kMatmulGeluForward, {BT, Fl, C});
      break;
    case GptPiece::kRebuildGelu:
      add("gelu_forward mlp.gelu (rebuild)", KernelOp::kGeluForward, {BT * Fl});
      break;
    case GptPiece::kForwardGeluApart:
      block_forward(true);
      break;
    case GptPiece::kHead:
    case GptPiece::kHeadWithBackward: {
      const bool train = piece == GptPiece::kHeadWithBackward;
      const int64_t chunk = lm_chunk_rows > 0 ? std::min(lm_chunk_rows, BT) : gpt_default_lm_chunk_rows(cfg, batch, dt);
      for (int64_t r0 = 0; r0 < BT; r0 += chunk) {
        const int64_t n = std::min(chunk, BT - r0);
        add("matmul_forward lm_head", KernelOp::kMatmulForward, {n, Vl, C, 0});
        if (cfg.split_vocab) {
          add("xent_local_max", KernelOp::kXentLocalMax, {n, Vl});
          add("xent_local_sums", KernelOp::kXentLocalSums, {n, Vl});
          add("xent_finish", KernelOp::kXentFinish, {n, Vl, train ? 1 : 0});
          if (train) add("matmul_backward lm_head", KernelOp::kMatmulBackward, {n, Vl, C, 0});
          continue;
        }
        if (!train) {
          add("softmax_xent_forward", KernelOp::kSoftmaxXentForward, {n, Vl});
          continue;
        }
        add("softmax_xent_fused", KernelOp::kSoftmaxXentFused, {n, Vl});
        add("matmul_backward lm_head", KernelOp::kMatmulBackward, {n, Vl, C, 0});
      }
      break;
    }
    case GptPiece::kBackward:
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

// Note [parallel init]
// The flat parameter buffer is cut into chunks of kInitChunk elements; chunk k draws its normals, in order, from a
// generator of its own, seeded from (seed, k). Every element's value is thus a function of the seed and its flat
// index only, whatever the number of threads (a test checks it), and the chunks are drawn in parallel: a 3G-
// parameter model initialises in seconds, not in the minute one sequential stream takes. Each element draws one
// normal whether it uses it or not (LayerNorm weights and biases, the zero vocabulary padding rows of wte).
namespace {
constexpr int64_t kInitChunk = int64_t(1) << 20;

template <typename T>
void init_values_of(const GptConfig& cfg, const std::vector<ParamInfo>& layout, int64_t n, uint64_t seed, T* out) {
  const double resid_std = 0.02 / std::sqrt(2.0 * cfg.layers);
  // Per parameter: [begin, end) in flat elements, the std of its normals (0: a constant), the constant, and where
  // its normals stop (wte's padding rows are 0).
  struct Span {
    int64_t begin, end, normal_end;
    double std, constant;
  };
  std::vector<Span> spans;
  for (const ParamInfo& p : layout) {
    const int64_t count = p.shape.numel();
    Span sp{p.offset, p.offset + count, p.offset, 0.0, 0.0};
    if (p.shape.rank() == 2) {
      const bool residual = p.name.ends_with("attn.proj.w") || p.name.ends_with("mlp.proj.w");
      sp.std = residual ? resid_std : 0.02;
      sp.normal_end = p.offset + (p.name == "wte" ? static_cast<int64_t>(cfg.vocab) * cfg.dim : count);
    } else {
      const bool ln_weight = p.name.ends_with("ln1.w") || p.name.ends_with("ln2.w") || p.name == "lnf.w";
      sp.constant = ln_weight ? 1.0 : 0.0;
    }
    spans.push_back(sp);
  }
  uint64_t base = Rng(seed).next_u64();
  const int64_t chunks = (n + kInitChunk - 1) / kInitChunk;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < chunks; ++k) {
    uint64_t mix = base ^ (static_cast<uint64_t>(k) * 0xd1b54a32d192ed03ull);
    Rng rng(mix);
    const int64_t lo = k * kInitChunk, hi = std::min(n, lo + kInitChunk);
    // The first parameter that reaches into this chunk.
    size_t s = static_cast<size_t>(std::upper_bound(spans.begin(), spans.end(), lo,
                                                    [](int64_t i, const Span& sp) { return i < sp.end; }) -
                                   spans.begin());
    for (int64_t i = lo; i < hi; ++i) {
      while (i >= spans[s].end) ++s;
      const Span& sp = spans[s];
      const double z = rng.normal();
      out[i] = static_cast<T>(sp.std > 0 ? (i < sp.normal_end ? sp.std * z : 0.0) : sp.constant);
    }
  }
}
}  // namespace

void Gpt::init_values(const GptConfig& cfg, uint64_t seed, float* out) {
  TT_CHECK(cfg.tp == 1, "initial values are the whole model's (take a rank's shard with gpt_take_shard)");
  init_values_of(cfg, gpt_param_layout(cfg), gpt_num_params(cfg), seed, out);
}

void Gpt::init_values(const GptConfig& cfg, uint64_t seed, double* out) {
  TT_CHECK(cfg.tp == 1, "initial values are the whole model's (take a rank's shard with gpt_take_shard)");
  init_values_of(cfg, gpt_param_layout(cfg), gpt_num_params(cfg), seed, out);
}

}  // namespace tt
