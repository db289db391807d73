#include "model/model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <cstring>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "model/llama.h"

namespace tt {

// Note [model families]: the families of this build, the one list of them.
const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> families = {&gpt2_family(), &llama_family()};
  return families;
}

namespace {
const ModelFamily* find_family(const std::string& name) {
  for (const ModelFamily* f : model_families())
    if (name == f->name()) return f;
  return nullptr;
}
}  // namespace

const ModelFamily& family_of(const ModelConfig& cfg) {
  const ModelFamily* f = find_family(cfg.family);
  TT_CHECK(f != nullptr, "unknown model family '%s' (not validated)", cfg.family.c_str());
  return *f;
}

Status ModelConfig::validate() const {
  const ModelFamily* f = find_family(family);
  if (f == nullptr) {
    std::string known;
    for (const ModelFamily* k : model_families()) known += std::string(known.empty() ? "" : ", ") + k->name();
    return Status(StatusCode::kInvalidArgument, "unknown model family '" + family + "' (known: " + known + ")");
  }
  TT_RETURN_IF(vocab < 2 || vocab > 1 << 20, kInvalidArgument, "vocabulary size %d is out of range [2, 1048576]",
               vocab);
  TT_RETURN_IF(layers < 1, kInvalidArgument, "--layers must be >= 1, got %d", layers);
  TT_RETURN_IF(dim < 1 || heads < 1, kInvalidArgument, "--dim and --heads must be >= 1, got %d and %d", dim, heads);
  TT_RETURN_IF(dim % heads != 0, kInvalidArgument, "--dim %d is not divisible by --heads %d", dim, heads);
  TT_RETURN_IF(seq < 1, kInvalidArgument, "--seq must be >= 1, got %d", seq);
  TT_RETURN_IF(kv_heads < 0 || ffn < 0, kInvalidArgument, "--kv-heads and --ffn must be >= 0, got %d and %d",
               kv_heads, ffn);
  TT_RETURN_IF(heads % kv_head_count() != 0, kInvalidArgument,
               "--kv-heads %d does not divide --heads %d (each key/value head serves a whole group of query heads)",
               kv_head_count(), heads);
  TT_RETURN_IF(!(norm_eps > 0 && norm_eps < 1), kInvalidArgument, "the normalisation epsilon %g is not in (0, 1)",
               norm_eps);
  TT_RETURN_IF(tp < 1 || heads % tp != 0, kInvalidArgument,
               "%d attention heads cannot be split %d ways over tensor-parallel ranks", heads, tp);
  TT_RETURN_IF(kv_head_count() % tp != 0, kInvalidArgument,
               "%d key/value heads cannot be split %d ways over tensor-parallel ranks (each rank holds whole groups)",
               kv_head_count(), tp);
  TT_RETURN_IF(split_vocab && (tp < 2 || padded_vocab() % tp != 0), kInvalidArgument,
               "the vocabulary (%d rows, padded) cannot be split %d ways", padded_vocab(), tp);
  return f->validate(*this);
}

std::string ModelConfig::describe() const {
  const ModelFamily* f = find_family(family);
  std::string s = std::string(f ? f->display() : family.c_str()) + " L" + std::to_string(layers) + " d" +
                  std::to_string(dim) + " H" + std::to_string(heads);
  if (kv_head_count() != heads) s += " KV" + std::to_string(kv_head_count());
  if (ffn > 0) s += " F" + std::to_string(ffn);
  s += " T" + std::to_string(seq) + " V" + std::to_string(vocab);
  return s;
}

nlohmann::json model_config_json(const ModelConfig& cfg) {
  nlohmann::json j = {{"family", cfg.family}, {"vocab", cfg.vocab}, {"layers", cfg.layers}, {"dim", cfg.dim},
                      {"heads", cfg.heads},   {"seq", cfg.seq}};
  if (cfg.family != "gpt2") {
    j["kv_heads"] = cfg.kv_head_count();
    j["ffn"] = cfg.ffn;
    j["tied_embeddings"] = cfg.tied_embeddings;
    j["qkv_bias"] = cfg.qkv_bias;
    j["rope_theta"] = cfg.rope_theta;
    j["norm_eps"] = cfg.norm_eps;
    if (cfg.rope_scaling.factor > 0)
      j["rope_scaling"] = {{"factor", cfg.rope_scaling.factor},
                           {"low_freq_factor", cfg.rope_scaling.low_freq_factor},
                           {"high_freq_factor", cfg.rope_scaling.high_freq_factor},
                           {"original_max_position", cfg.rope_scaling.original_max_position}};
  }
  if (cfg.tp > 1) {
    j["tp"] = cfg.tp;
    j["split_vocab"] = cfg.split_vocab;
  }
  return j;
}

namespace {
std::string dump(const nlohmann::json& v) {
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

Result<ModelConfig> model_config_from_json(const nlohmann::json& j, const std::string& where) {
  TT_RETURN_IF(!j.is_object(), kInvalidArgument, "%s: model is %s, expected an object", where.c_str(),
               dump(j).c_str());
  static const char* kKeys[] = {"family", "vocab", "layers",   "dim",        "heads",        "seq",
                                "kv_heads", "ffn", "tied_embeddings", "qkv_bias", "rope_theta", "rope_scaling",
                                "norm_eps", "tp",  "split_vocab"};
  for (const auto& item : j.items()) {
    const std::string& key = item.key();  // not a structured binding: clang before 16 cannot capture one
    TT_RETURN_IF(std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return key == k; }) ==
                     std::end(kKeys),
                 kInvalidArgument, "%s: unknown key model.%s", where.c_str(), key.c_str());
  }
  ModelConfig c;
  const JsonKeys r(j, where, "model.");
  TT_TRY(r.string("family", &c.family));
  constexpr int kMax = (1 << 30);
  TT_TRY(r.integer_in("vocab", 2, 1 << 20, true, &c.vocab));
  TT_TRY(r.integer_in("layers", 1, kMax, true, &c.layers));
  TT_TRY(r.integer_in("dim", 1, kMax, true, &c.dim));
  TT_TRY(r.integer_in("heads", 1, kMax, true, &c.heads));
  TT_TRY(r.integer_in("seq", 1, kMax, true, &c.seq));
  TT_TRY(r.integer_in("kv_heads", 0, kMax, false, &c.kv_heads));
  if (c.kv_heads == c.heads) c.kv_heads = 0;  // written as a count; 0 is the same model
  TT_TRY(r.integer_in("ffn", 0, kMax, false, &c.ffn));
  TT_TRY(r.boolean("tied_embeddings", &c.tied_embeddings));
  TT_TRY(r.boolean("qkv_bias", &c.qkv_bias));
  TT_TRY(r.number("rope_theta", &c.rope_theta));
  TT_TRY(r.number("norm_eps", &c.norm_eps));
  if (r.has("rope_scaling")) {
    const nlohmann::json& rs = j.at("rope_scaling");
    TT_RETURN_IF(!rs.is_object(), kInvalidArgument, "%s: model.rope_scaling is %s, expected an object", where.c_str(),
                 dump(rs).c_str());
    const JsonKeys s(rs, where, "model.rope_scaling.");
    TT_TRY(s.number("factor", &c.rope_scaling.factor));
    TT_TRY(s.number("low_freq_factor", &c.rope_scaling.low_freq_factor));
    TT_TRY(s.number("high_freq_factor", &c.rope_scaling.high_freq_factor));
    TT_TRY(s.integer_in("original_max_position", 1, kMax, false, &c.rope_scaling.original_max_position));
  }
  TT_TRY(r.integer_in("tp", 1, 1 << 16, false, &c.tp));
  TT_TRY(r.boolean("split_vocab", &c.split_vocab));
  if (Status st = c.validate(); !st.is_ok())
    return Status(StatusCode::kInvalidArgument, where + ": " + st.message());
  return c;
}

DType master_dtype_for(DType compute) { return compute == DType::kBF16 ? DType::kF32 : compute; }

std::vector<ParamInfo> model_param_layout(const ModelConfig& cfg) { return family_of(cfg).param_layout(cfg); }

int model_ffn(const ModelConfig& cfg) { return family_of(cfg).ffn(cfg); }

bool JsonKeys::has(const char* key) const { return j_.is_object() && j_.contains(key) && !j_.at(key).is_null(); }

Status JsonKeys::integer_in(const char* key, int lo, int hi, bool required, int* out) const {
  if (!has(key)) {
    TT_RETURN_IF(required, kInvalidArgument, "%s: %s is missing", where_.c_str(), name(key).c_str());
    return Status::ok();
  }
  const nlohmann::json& v = j_.at(key);
  TT_RETURN_IF(!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi, kInvalidArgument,
               "%s: %s is %s, expected an integer in [%d, %d]", where_.c_str(), name(key).c_str(), dump(v).c_str(),
               lo, hi);
  *out = v.get<int>();
  return Status::ok();
}

Status JsonKeys::number(const char* key, double* out) const {
  if (!has(key)) return Status::ok();
  const nlohmann::json& v = j_.at(key);
  TT_RETURN_IF(!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0, kInvalidArgument,
               "%s: %s is %s, expected a positive number", where_.c_str(), name(key).c_str(), dump(v).c_str());
  *out = v.get<double>();
  return Status::ok();
}

Status JsonKeys::boolean(const char* key, bool* out) const {
  if (!has(key)) return Status::ok();
  TT_RETURN_IF(!j_.at(key).is_boolean(), kInvalidArgument, "%s: %s is %s, expected true or false", where_.c_str(),
               name(key).c_str(), dump(j_.at(key)).c_str());
  *out = j_.at(key).get<bool>();
  return Status::ok();
}

Status JsonKeys::string(const char* key, std::string* out) const {
  if (!has(key)) return Status::ok();
  TT_RETURN_IF(!j_.at(key).is_string(), kInvalidArgument, "%s: %s is %s, expected a string", where_.c_str(),
               name(key).c_str(), dump(j_.at(key)).c_str());
  *out = j_.at(key).get<std::string>();
  return Status::ok();
}

Status JsonKeys::one_of(const char* key, std::initializer_list<const char*> allowed, const char* absent) const {
  std::string v = absent;
  TT_TRY(string(key, &v));
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return Status::ok();
    list += std::string(list.empty() ? "" : ", ") + a;
  }
  return make_status(StatusCode::kUnimplemented, "%s: %s is \"%s\"; this family supports %s", where_.c_str(),
                     name(key).c_str(), v.c_str(), list.c_str());
}

Status JsonKeys::number_equal(const char* key, double want, double absent) const {
  double v = absent;
  TT_TRY(number(key, &v));
  TT_RETURN_IF(std::abs(v - want) > 1e-9 * std::abs(want), kUnimplemented,
               "%s: %s is %g; this family supports %g only", where_.c_str(), name(key).c_str(), v, want);
  return Status::ok();
}

Status JsonKeys::boolean_equal(const char* key, bool want, bool absent) const {
  bool v = absent;
  TT_TRY(boolean(key, &v));
  TT_RETURN_IF(v != want, kUnimplemented, "%s: %s is %s; this family supports %s only", where_.c_str(),
               name(key).c_str(), v ? "true" : "false", want ? "true" : "false");
  return Status::ok();
}

std::vector<HfParam> model_hf_tensors(const ModelConfig& cfg) { return family_of(cfg.whole()).hf_tensors(cfg.whole()); }

nlohmann::json model_hf_config(const ModelConfig& cfg) { return family_of(cfg).hf_config(cfg.whole()); }

Result<ModelConfig> model_config_from_hf(const nlohmann::json& j, int seq, const std::string& where) {
  TT_RETURN_IF(!j.is_object() || !j.contains("model_type") || !j.at("model_type").is_string(), kInvalidArgument,
               "%s: no \"model_type\" string (a Hugging Face model's config.json names its model type)",
               where.c_str());
  const std::string type = j.at("model_type").get<std::string>();
  std::string known;
  for (const ModelFamily* f : model_families()) {
    if (f->reads_hf_model_type(type)) return f->from_hf_config(j, seq, where);
    known += std::string(known.empty() ? "" : ", ") + f->name();
  }
  return make_status(StatusCode::kUnimplemented,
                     "%s: model_type \"%s\" is not a family tiertrain trains (families: %s; Llama's family reads "
                     "llama, mistral and qwen2)",
                     where.c_str(), type.c_str(), known.c_str());
}

int64_t model_num_params(const ModelConfig& cfg) {
  const ParamSegments s = model_segments(cfg);
  return s.offset.back() + s.size.back();
}

bool model_embedding_grads_last(const ModelConfig& cfg) { return !cfg.tied_embeddings; }

ParamSegments model_segments(const ModelConfig& cfg) {
  // The last model each thread asked about, remembered: the automatic plan's search asks for the same model's
  // segments tens of thousands of times (each candidate's inventory), and the layout builds a name per parameter.
  thread_local std::optional<std::pair<ModelConfig, ParamSegments>> last;
  if (last && last->first == cfg) return last->second;
  ParamSegments s;
  const size_t S = static_cast<size_t>(cfg.layers) + 2;
  s.offset.assign(S, -1);
  s.size.assign(S, 0);
  s.shard_begin.assign(S, -1);
  bool after_blocks = false;  // Note [model families]: layer -1 before the first block is segment 0, after it L + 1
  for (const ParamInfo& p : model_param_layout(cfg)) {
    TT_CHECK(p.layer < cfg.layers, "parameter %s of layer %d in a model of %d", p.name.c_str(), p.layer, cfg.layers);
    if (p.layer >= 0) after_blocks = true;
    const size_t k = p.layer >= 0 ? static_cast<size_t>(p.layer) + 1 : after_blocks ? S - 1 : 0;
    if (s.offset[k] < 0) s.offset[k] = p.offset;
    TT_CHECK(p.offset == s.offset[k] + s.size[k], "parameter %s breaks segment %zu", p.name.c_str(), k);
    TT_CHECK(p.sharded || s.shard_begin[k] < 0, "replicated parameter %s follows sharded ones", p.name.c_str());
    if (p.sharded && s.shard_begin[k] < 0) s.shard_begin[k] = p.offset;
    s.size[k] += p.shape.numel();
    s.of_param.push_back(static_cast<int>(k));
  }
  for (size_t k = 0; k < S; ++k) {
    TT_CHECK(s.offset[k] >= 0, "segment %zu of a %s model has no parameters", k, cfg.family.c_str());
    if (s.shard_begin[k] < 0) s.shard_begin[k] = s.offset[k] + s.size[k];
  }
  last.emplace(cfg, s);
  return s;
}

int64_t model_default_lm_chunk_rows(const ModelConfig& cfg, int batch, DType compute) {
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

std::vector<TensorRequest> model_block_activations(const ModelConfig& cfg, int batch, DType compute, unsigned parts) {
  return family_of(cfg).block_activations(cfg, batch, compute, parts);
}

std::vector<TensorRequest> model_fixed_tensors(const ModelConfig& cfg, int batch, DType compute,
                                               int64_t lm_chunk_rows) {
  return family_of(cfg).fixed_tensors(cfg, batch, compute, lm_chunk_rows);
}

std::vector<TensorRequest> model_block_fixed_tensors(const ModelConfig& cfg, int batch, DType compute, int l) {
  std::vector<TensorRequest> r;
  for (TensorRequest& t : model_fixed_tensors(cfg, batch, compute, 0))
    if (t.layer == l) r.push_back(std::move(t));
  return r;
}

std::vector<TensorRequest> model_decode_tensors(const ModelConfig& cfg, DType compute) {
  return family_of(cfg).decode_tensors(cfg, compute);
}

std::vector<NamedKernelCall> model_kernel_calls(const ModelConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows,
                                                ModelPiece piece, int segment) {
  return family_of(cfg).kernel_calls(cfg, batch, compute, lm_chunk_rows, piece, segment);
}

std::vector<int64_t> model_tp_collectives(const ModelConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows,
                                          ModelPiece piece, int segment) {
  return family_of(cfg).tp_collectives(cfg, batch, compute, lm_chunk_rows, piece, segment);
}

void model_init_values(const ModelConfig& cfg, uint64_t seed, float* out) {
  TT_CHECK(cfg.tp == 1, "initial values are the whole model's (take a rank's shard with model_take_shard)");
  family_of(cfg).init_values(cfg, seed, out);
}

void model_init_values(const ModelConfig& cfg, uint64_t seed, double* out) {
  TT_CHECK(cfg.tp == 1, "initial values are the whole model's (take a rank's shard with model_take_shard)");
  family_of(cfg).init_values(cfg, seed, out);
}

std::unique_ptr<Model> create_model(Backend& backend, const ModelConfig& cfg, int batch, DType compute,
                                    ModelTensors tensors) {
  return family_of(cfg).create(backend, cfg, batch, compute, std::move(tensors));
}

std::vector<ShardCopy> model_shard_copies(const ModelConfig& cfg, int tp_rank) {
  TT_CHECK(tp_rank >= 0 && tp_rank < cfg.tp, "tensor-parallel rank %d of %d", tp_rank, cfg.tp);
  const std::vector<ParamInfo> local = model_param_layout(cfg);
  const std::vector<ParamInfo> whole = model_param_layout(cfg.whole());
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : whole) by_name[p.name] = &p;
  const int64_t r = tp_rank, tp = cfg.tp;
  std::vector<ShardCopy> out;
  for (const ParamInfo& p : local) {
    const ParamInfo& w = *by_name.at(p.name);
    if (!p.sharded) {
      out.push_back({w.offset, p.offset, p.shape.numel()});
      continue;
    }
    const int64_t cols = p.shape.rank() == 2 ? p.shape[1] : 1;
    if (!w.row_blocks.empty()) {
      // Each block of rows cut evenly: this rank's part of each, one after the other.
      int64_t whole_row = 0, local_row = 0;
      for (const int64_t rows : w.row_blocks) {
        TT_CHECK(rows % tp == 0, "parameter %s: a block of %lld rows over %lld ranks", p.name.c_str(),
                 static_cast<long long>(rows), static_cast<long long>(tp));
        const int64_t part = rows / tp;
        out.push_back({w.offset + (whole_row + r * part) * cols, p.offset + local_row * cols, part * cols});
        whole_row += rows;
        local_row += part;
      }
      TT_CHECK(local_row == p.shape[0], "parameter %s: row blocks of %lld rows for a shard of %lld", p.name.c_str(),
               static_cast<long long>(local_row), static_cast<long long>(p.shape[0]));
      continue;
    }
    // Columns cut: this rank's columns of every row.
    const int64_t rows = p.shape[0], whole_cols = w.shape[1];
    for (int64_t i = 0; i < rows; ++i) out.push_back({w.offset + i * whole_cols + r * cols, p.offset + i * cols, cols});
  }
  return out;
}

std::vector<int64_t> decoder_tp_collectives(const ModelConfig& cfg, int batch, DType dt, int64_t lm_chunk_rows,
                                            ModelPiece piece, int segment) {
  std::vector<int64_t> r;
  if (cfg.tp == 1) return r;
  const int L = cfg.layers;
  const int64_t BT = static_cast<int64_t>(batch) * cfg.seq, e = static_cast<int64_t>(dtype_size(dt)),
                me = static_cast<int64_t>(dtype_size(master_dtype_for(dt))), act = BT * cfg.dim * e;
  const bool block = segment >= 1 && segment <= L;
  switch (piece) {
    case ModelPiece::kForward:
    case ModelPiece::kForwardActApart:
      if (segment == 0 && cfg.split_vocab) r.push_back(act);  // the embedding's rows from their owners
      if (block) r = {act, act};                              // the attention's and the MLP's output projections
      break;
    case ModelPiece::kRebuildBlock:
      r = {act, act};
      break;
    case ModelPiece::kBackward:
      if (block) r = {act, act};  // the gradients of the two normalised inputs
      break;
    case ModelPiece::kHead:
    case ModelPiece::kHeadWithBackward: {
      if (!cfg.split_vocab) break;
      const int64_t chunk = lm_chunk_rows > 0 ? std::min(lm_chunk_rows, BT) : model_default_lm_chunk_rows(cfg, batch, dt);
      for (int64_t r0 = 0; r0 < BT; r0 += chunk) {
        const int64_t n = std::min(chunk, BT - r0);
        r.push_back(n * me);      // xent max
        r.push_back(2 * n * me);  // xent sums
      }
      if (piece == ModelPiece::kHeadWithBackward) r.push_back(act);  // d lnf
      break;
    }
    case ModelPiece::kRebuildNorms:
    case ModelPiece::kRebuildMlp:
    case ModelPiece::kRebuildAct:
      break;
  }
  return r;
}

void append_head_kernel_calls(std::vector<NamedKernelCall>& r, const ModelConfig& cfg, int batch, DType dt,
                              int64_t lm_chunk_rows, bool train) {
  const int64_t BT = static_cast<int64_t>(batch) * cfg.seq, C = cfg.dim, Vl = cfg.local_vocab();
  const int64_t chunk = lm_chunk_rows > 0 ? std::min(lm_chunk_rows, BT) : model_default_lm_chunk_rows(cfg, batch, dt);
  auto add = [&](const char* name, KernelOp op, std::array<int64_t, 5> dims) {
    r.push_back({name, KernelCall{op, dt, dims}});
  };
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
}

void Model::logits_of(const Tensor& out, const Tensor& lnf, size_t head, int64_t row_begin) {
  TT_CHECK(!cfg_.split_vocab, "compute_logits of a model whose vocabulary is split over ranks");
  const int64_t BT = static_cast<int64_t>(batch_) * cfg_.seq, V = cfg_.padded_vocab(), rows = out.numel() / V;
  TT_CHECK(rows * V == out.numel() && row_begin >= 0 && row_begin + rows <= BT,
           "compute_logits_rows: rows %lld to %lld of %lld", static_cast<long long>(row_begin),
           static_cast<long long>(row_begin + rows), static_cast<long long>(BT));
  be_.matmul_forward(out.reshape({rows, V}), lnf.view(row_begin * cfg_.dim, {rows, cfg_.dim}), cparam(head),
                     Tensor());
}

void Model::run_lm_head(ModelHooks& h, bool with_backward, const Tensor& lnf, const Tensor& dln, size_t head,
                        int64_t vocab_begin) {
  h.at(Boundary::kBeforeHead, 0);
  const int64_t BT = static_cast<int64_t>(batch_) * cfg_.seq, C = cfg_.dim, Vp = cfg_.local_vocab();
  const Tensor w = cparam(head), gw_all = grad(head);
  const Tensor& logits_all = tensor("logits");
  const Tensor& losses = tensor("losses");
  const Tensor& targets = tensor("targets");
  const float dloss = loss_scale_ >= 0 ? loss_scale_ : 1.0f / static_cast<float>(BT);  // Note [loss mask]
  for (int64_t r0 = 0; r0 < BT; r0 += lm_chunk_rows_) {
    const int64_t n = std::min(lm_chunk_rows_, BT - r0);
    const Tensor logits = logits_all.view(0, {n, Vp});
    const Tensor x = lnf.view(r0 * C, {n, C});
    const Tensor tg = targets.view(r0, {n});
    const GradWrite gw = r0 == 0 ? first_write() : GradWrite::kAccumulate;
    h.op("matmul_forward lm_head");
    be_.matmul_forward(logits, x, w, Tensor());
    if (cfg_.split_vocab) {  // Note [vocabulary-parallel cross-entropy]
      const Tensor stats = tensor("xent_stats").view(0, {3, n});
      h.op("xent_local_max");
      be_.xent_local_max(stats, logits, vocab_begin, cfg_.vocab);
      h.tp_max("xent max", stats.view(0, {n}));
      h.op("xent_local_sums");
      be_.xent_local_sums(stats, logits, tg, vocab_begin, cfg_.vocab);
      h.tp_sum("xent sums", stats.view(n, {2 * n}));
      h.op("xent_finish");
      be_.xent_finish(losses.view(r0, {n}), with_backward ? logits : Tensor(), logits, stats, tg, dloss, vocab_begin,
                      cfg_.vocab);
      if (with_backward) {
        h.op("matmul_backward lm_head");
        be_.matmul_backward(dln.view(r0 * C, {n, C}), gw_all, Tensor(), logits, x, w, gw);
      }
      continue;
    }
    if (!with_backward) {
      h.op("softmax_xent_forward");
      be_.softmax_xent_forward(losses.view(r0, {n}), logits, logits, tg, cfg_.vocab);
      continue;
    }
    // Training: the probabilities go straight to their gradients, in place.
    h.op("softmax_xent_fused");
    be_.softmax_xent_fused(losses.view(r0, {n}), logits, logits, tg, dloss, cfg_.vocab);
    h.op("matmul_backward lm_head");
    be_.matmul_backward(dln.view(r0 * C, {n, C}), gw_all, Tensor(), logits, x, w, gw);
  }
  // Each rank's columns gave their share of d(lnf).
  if (cfg_.split_vocab && with_backward) h.tp_sum("d lnf", dln);
  h.at(Boundary::kAfterHead, 0);
}

void model_take_shard(const ModelConfig& cfg, int tp_rank, const void* whole, void* local, size_t esize) {
  const auto* from = static_cast<const unsigned char*>(whole);
  auto* to = static_cast<unsigned char*>(local);
  for (const ShardCopy& c : model_shard_copies(cfg, tp_rank))
    std::memcpy(to + static_cast<size_t>(c.local) * esize, from + static_cast<size_t>(c.whole) * esize,
                static_cast<size_t>(c.count) * esize);
}

void model_put_shard(const ModelConfig& cfg, int tp_rank, const void* local, void* whole, size_t esize) {
  const auto* from = static_cast<const unsigned char*>(local);
  auto* to = static_cast<unsigned char*>(whole);
  for (const ShardCopy& c : model_shard_copies(cfg, tp_rank))
    std::memcpy(to + static_cast<size_t>(c.whole) * esize, from + static_cast<size_t>(c.local) * esize,
                static_cast<size_t>(c.count) * esize);
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

void ModelHooks::tp_sum(const char* name, const Tensor& t) {
  (void)t;
  TT_CHECK(false, "a tensor-parallel model asked its hooks to sum %s over the ranks, and these hooks have no ranks",
           name);
}

void ModelHooks::tp_max(const char* name, const Tensor& t) {
  (void)t;
  TT_CHECK(false, "a tensor-parallel model asked its hooks for the maximum of %s over the ranks, and these hooks have "
           "no ranks", name);
}

void check_tensor(const Tensor& t, const TensorRequest& r) {
  TT_CHECK(t.raw() != nullptr, "model: tensor %s is not bound", r.name.c_str());
  TT_CHECK(t.shape() == r.shape && t.dtype() == r.dtype, "model: tensor %s is %s %s, expected %s %s",
           r.name.c_str(), t.shape().to_string().c_str(), dtype_name(t.dtype()), r.shape.to_string().c_str(),
           dtype_name(r.dtype));
}

Model::Model(const ModelFamily& family, Backend& backend, const ModelConfig& cfg, int batch, DType dtype,
             ModelTensors tensors)
    : family_(family), be_(backend), cfg_(cfg), batch_(batch), dtype_(dtype), layout_(model_param_layout(cfg)),
      segs_(model_segments(cfg)), num_params_(model_num_params(cfg)), t_(std::move(tensors)) {
  TT_CHECK(cfg.validate().is_ok() && batch >= 1, "model: invalid configuration or batch %d", batch);
  TT_CHECK(&family_of(cfg) == &family, "model: a %s configuration for the %s family", cfg.family.c_str(),
           family.name());
  TT_CHECK(t_.params.size() == static_cast<size_t>(num_segments()) &&
               t_.grads.size() == static_cast<size_t>(num_segments()),
           "model: %zu parameter and %zu gradient segments, expected %d", t_.params.size(), t_.grads.size(),
           num_segments());
  for (int s = 0; s < num_segments(); ++s) {
    const Shape shape{segs_.size[static_cast<size_t>(s)]};
    check_tensor(t_.params[static_cast<size_t>(s)], {"params.seg" + std::to_string(s), shape, dtype, TensorClass::kParam});
    // Note [bf16 gradients] (exec/executor.h): the blocks' segments may be bf16.
    const bool bf16_block = s >= 1 && s <= cfg.layers && t_.grads[static_cast<size_t>(s)].dtype() == DType::kBF16;
    check_tensor(t_.grads[static_cast<size_t>(s)],
                 {"grads.seg" + std::to_string(s), shape, bf16_block ? DType::kBF16 : master_dtype(), TensorClass::kGrad});
  }
  for (int l = 0; l < cfg.layers; ++l)
    for (TensorRequest r : model_block_activations(cfg, batch, dtype)) {
      r.name = "h." + std::to_string(l) + "." + r.name;
      check_tensor(tensor(r.name), r);
    }
  auto logits = t_.named.find("logits");
  lm_chunk_rows_ = logits != t_.named.end() && logits->second.raw() ? logits->second.dim(0) : 0;
  for (const TensorRequest& r : model_fixed_tensors(cfg, batch, dtype, lm_chunk_rows_)) check_tensor(tensor(r.name), r);
}

const Tensor& Model::tensor(const std::string& name) const {
  auto it = t_.named.find(name);
  TT_CHECK(it != t_.named.end(), "model: no tensor %s was bound", name.c_str());
  return it->second;
}

Tensor Model::cparam(size_t i) const {
  const ParamInfo& p = layout_[i];
  const size_t s = static_cast<size_t>(segs_.of_param[i]);
  return t_.params[s].view(p.offset - segs_.offset[s], p.shape);
}

Tensor Model::grad(size_t i) const {
  const ParamInfo& p = layout_[i];
  const size_t s = static_cast<size_t>(segs_.of_param[i]);
  return t_.grads[s].view(p.offset - segs_.offset[s], p.shape);
}

size_t Model::param_index(const std::string& name) const {
  for (size_t i = 0; i < layout_.size(); ++i)
    if (layout_[i].name == name) return i;
  TT_CHECK(false, "model: no parameter %s", name.c_str());
  return 0;
}

void Model::set_act_apart(std::vector<bool> apart) {
  TT_CHECK(apart.empty() || apart.size() == static_cast<size_t>(cfg_.layers),
           "set_act_apart: %zu flags for %d layers", apart.size(), cfg_.layers);
  act_apart_ = std::move(apart);
}

void Model::check_decodable(const NamedTensors& state) const {
  TT_CHECK(batch_ == 1 && cfg_.tp == 1 && !cfg_.split_vocab,
           "decoding needs a model of batch 1 on one rank (batch %d, tp %d)", batch_, cfg_.tp);
  for (const TensorRequest& r : model_decode_tensors(cfg_, dtype_)) {
    auto it = state.find(r.name);
    TT_CHECK(it != state.end(), "decoding: no tensor %s", r.name.c_str());
    check_tensor(it->second, r);
  }
}

// Note [parallel init]
// The flat parameter buffer is cut into chunks of kInitChunk elements; chunk k draws its normals, in order, from a
// generator of its own, seeded from (seed, k). Every element's value is thus a function of the seed and its flat
// index only, whatever the number of threads (a test checks it), and the chunks are drawn in parallel: a 3G-
// parameter model initialises in seconds, not in the minute one sequential stream takes. Each element draws one
// normal whether it uses it or not (constants, the zero vocabulary padding rows of an embedding).
namespace {
constexpr int64_t kInitChunk = int64_t(1) << 20;

template <typename T>
void init_values_of(const std::vector<ParamInfo>& layout, int64_t n, uint64_t seed,
                    const std::function<ParamInit(const ParamInfo&)>& init, T* out) {
  // Per parameter: [begin, end) in flat elements, the std of its normals (0: a constant), the constant, and where
  // its normals stop.
  struct Span {
    int64_t begin, end, normal_end;
    double std, constant;
  };
  std::vector<Span> spans;
  for (const ParamInfo& p : layout) {
    const int64_t count = p.shape.numel();
    const ParamInit pi = init(p);
    spans.push_back(Span{p.offset, p.offset + count, p.offset + (pi.normals < 0 ? count : std::min(pi.normals, count)),
                         pi.std, pi.constant});
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

void init_param_values(const std::vector<ParamInfo>& layout, int64_t n, uint64_t seed,
                       const std::function<ParamInit(const ParamInfo&)>& init, float* out) {
  init_values_of(layout, n, seed, init, out);
}

void init_param_values(const std::vector<ParamInfo>& layout, int64_t n, uint64_t seed,
                       const std::function<ParamInit(const ParamInfo&)>& init, double* out) {
  init_values_of(layout, n, seed, init, out);
}

}  // namespace tt
