#include "model/gpt.h"

#include <algorithm>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/units.h"

namespace tt {

Status GptConfig::validate() const {
  TT_RETURN_IF(vocab < 2 || vocab > 1 << 20, kInvalidArgument, "vocabulary size %d is out of range [2, 1048576]",
               vocab);
  TT_RETURN_IF(layers < 1, kInvalidArgument, "--layers must be >= 1, got %d", layers);
  TT_RETURN_IF(dim < 1 || heads < 1, kInvalidArgument, "--dim and --heads must be >= 1, got %d and %d", dim, heads);
  TT_RETURN_IF(dim % heads != 0, kInvalidArgument, "--dim %d is not divisible by --heads %d", dim, heads);
  TT_RETURN_IF(seq < 1, kInvalidArgument, "--seq must be >= 1, got %d", seq);
  return Status::ok();
}

std::vector<ParamInfo> gpt_param_layout(const GptConfig& cfg) {
  const int64_t V = cfg.padded_vocab(), C = cfg.dim, T = cfg.seq;
  std::vector<ParamInfo> out;
  int64_t offset = 0;
  auto add = [&](std::string name, Shape shape, bool decay, int layer) {
    out.push_back(ParamInfo{std::move(name), shape, offset, decay, layer});
    offset += shape.numel();
  };
  add("wte", {V, C}, true, -1);
  add("wpe", {T, C}, true, -1);
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
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
  const auto layout = gpt_param_layout(cfg);
  return layout.back().offset + layout.back().shape.numel();
}

DType master_dtype_for(DType compute) { return compute == DType::kBF16 ? DType::kF32 : compute; }

int64_t Gpt::default_lm_chunk_rows(const GptConfig& cfg, int batch, DType compute) {
  constexpr int64_t kChunkBytes = int64_t(64) << 20;
  const int64_t rows = static_cast<int64_t>(batch) * cfg.seq;
  const int64_t fit = kChunkBytes / (static_cast<int64_t>(cfg.padded_vocab()) * static_cast<int64_t>(dtype_size(compute)));
  if (fit >= rows) return rows;
  return std::min(rows, std::max<int64_t>(64, fit / 64 * 64));
}

std::vector<AllocRequest> Gpt::block_activations(const GptConfig& cfg, int batch, DType dt, unsigned parts) {
  const int64_t B = batch, T = cfg.seq, C = cfg.dim, H = cfg.heads;
  const DType md = master_dtype_for(dt);
  const TensorClass A = TensorClass::kActivation;
  // In the order of the forward, each with its part.
  const std::pair<Part, AllocRequest> all[] = {
      {kNorms, {"ln1", {B, T, C}, dt, A}},      {kNorms, {"ln1_mean", {B, T}, md, A}},
      {kNorms, {"ln1_rstd", {B, T}, md, A}},    {kCore, {"qkv", {B, T, 3 * C}, dt, A}},
      {kCore, {"atty", {B, T, C}, dt, A}},      {kCore, {"lse", {B, H, T}, md, A}},
      {kCore, {"res2", {B, T, C}, dt, A}},      {kNorms, {"ln2", {B, T, C}, dt, A}},
      {kNorms, {"ln2_mean", {B, T}, md, A}},    {kNorms, {"ln2_rstd", {B, T}, md, A}},
      {kMlp, {"fch", {B, T, 4 * C}, dt, A}},    {kMlp, {"fch_gelu", {B, T, 4 * C}, dt, A}}};
  std::vector<AllocRequest> r;
  for (const auto& [part, a] : all)
    if ((parts & part) != 0) r.push_back(a);
  return r;
}

size_t Gpt::block_activation_bytes(const GptConfig& cfg, int batch, DType dt, unsigned parts) {
  size_t bytes = 0;
  for (const AllocRequest& a : block_activations(cfg, batch, dt, parts))
    bytes += memory::device_alloc_size(static_cast<size_t>(a.shape.numel()) * dtype_size(a.dtype));
  return bytes;
}

unsigned Gpt::held_parts(const GptOptions& options, int layer) {
  return kAll & ~(options.mlp_half_recomputed(layer) ? unsigned(kMlp) : 0u) &
         ~(options.norms_rebuilt(layer) ? unsigned(kNorms) : 0u);
}

const char* act_placement_name(ActPlacement p) {
  switch (p) {
    case ActPlacement::kResident: return "resident";
    case ActPlacement::kRecompute: return "recompute";
    case ActPlacement::kSwap: return "swap";
  }
  return "?";
}

bool GptOptions::any(ActPlacement p) const { return count(p) > 0; }

int GptOptions::count(ActPlacement p) const {
  if (activations.empty()) return p == ActPlacement::kResident ? 1 : 0;  // "all resident"
  return static_cast<int>(std::count(activations.begin(), activations.end(), p));
}

GptOptions GptOptions::all(int layers, ActPlacement p, int swap_slots) {
  GptOptions o;
  o.activations.assign(static_cast<size_t>(layers), p);
  o.swap_slots = swap_slots;
  return o;
}

// What a swapped block moves: the parts it does not rebuild (swapped blocks agree on those: Gpt::create checks).
static unsigned swapped_part(const GptOptions& options, int layers) {
  for (int l = 0; l < layers; ++l)
    if (options.placement(l) == ActPlacement::kSwap) return Gpt::held_parts(options, l);
  return Gpt::kAll;
}

size_t Gpt::host_bytes(const GptConfig& cfg, int batch, DType dt, const GptOptions& options) {
  const size_t per_block =
      memory::host_alloc_size(block_activation_bytes(cfg, batch, dt, swapped_part(options, cfg.layers)));
  // The last swap_slots swapped blocks never leave their slots.
  size_t bytes = per_block * static_cast<size_t>(std::max(0, options.count(ActPlacement::kSwap) - options.swap_slots));
  if (options.master_on_host) {
    const size_t P = static_cast<size_t>(gpt_num_params(cfg));
    bytes += memory::host_alloc_size(P * sizeof(float));
    if (dt != DType::kF32) bytes += memory::host_alloc_size(P * dtype_size(dt));
  }
  return bytes;
}

std::vector<AllocRequest> Gpt::allocation_list(const GptConfig& cfg, int batch, DType dt, const GptOptions& options) {
  const int64_t B = batch, T = cfg.seq, C = cfg.dim, V = cfg.padded_vocab(), P = gpt_num_params(cfg);
  const DType md = master_dtype_for(dt);
  std::vector<AllocRequest> r;
  auto add = [&](std::string name, Shape shape, DType d, TensorClass cls, int layer = -1) {
    r.push_back(AllocRequest{std::move(name), shape, d, cls, layer});
  };
  // Elements per segment (Note [gradient segments]): 0 the embeddings, 1 + l block l, L + 1 the final LayerNorm.
  std::vector<int64_t> size(static_cast<size_t>(cfg.layers) + 2, 0);
  for (const ParamInfo& p : gpt_param_layout(cfg))
    size[p.layer >= 0 ? static_cast<size_t>(p.layer) + 1 : p.name.rfind("lnf", 0) == 0 ? size.size() - 1 : 0] +=
        p.shape.numel();
  const auto flag = [&](const std::vector<bool>& v, size_t s) {
    return s >= 1 && s <= static_cast<size_t>(cfg.layers) && !v.empty() && v[s - 1];
  };
  if (!options.master_on_host) add("params", {P}, md, TensorClass::kParam);
  // The compute copy: one buffer, or with streamed parameters one per resident segment and the streamed blocks'
  // slots (Note [streamed parameters]).
  int streamed_params = 0;
  for (size_t s = 0; s < size.size(); ++s) streamed_params += flag(options.params_streamed, s) ? 1 : 0;
  if (streamed_params > 0) {
    for (size_t s = 0; s < size.size(); ++s)
      if (!flag(options.params_streamed, s)) add("params.compute.seg" + std::to_string(s), {size[s]}, dt, TensorClass::kParam);
    for (int i = 0; i < std::min(options.param_slots, streamed_params); ++i)
      add("params.slot" + std::to_string(i), {size[1]}, dt, TensorClass::kParam);
  } else if (md != dt || options.master_on_host) {
    add("params.compute", {P}, dt, TensorClass::kParam);
  }
  // Note [gradient segments]: one buffer per segment; streamed blocks share two slots.
  bool any_streamed = false;
  for (size_t s = 0; s < size.size(); ++s) {
    const bool streamed = flag(options.grads_streamed, s);
    any_streamed = any_streamed || streamed;
    if (!streamed) add("grads.seg" + std::to_string(s), {size[s]}, md, TensorClass::kGrad);
  }
  if (any_streamed)
    for (int i = 0; i < 2; ++i) add("grads.slot" + std::to_string(i), {size[1]}, md, TensorClass::kGrad);
  add("tokens", {B, T}, DType::kI32, TensorClass::kInput);
  add("targets", {B, T}, DType::kI32, TensorClass::kInput);
  add("encoded", {B, T, C}, dt, TensorClass::kActivation);
  // A block's activations: their own set for resident blocks, one shared set for the recomputed ones, a few slots
  // for the swapped ones; plus each block's output.
  auto add_block = [&](const std::string& p, int l, unsigned part) {
    for (const AllocRequest& a : block_activations(cfg, batch, dt, part)) add(p + a.name, a.shape, a.dtype, a.cls, l);
  };
  if (options.any(ActPlacement::kRecompute)) add_block("recompute.", -1, kAll);
  // Note [MLP half]: one MLP set shared by the blocks whose MLP half is recomputed.
  if (options.any_mlp_half_recomputed()) add_block("recompute_mlp.", -1, kMlp);
  // Note [rebuilt norms]: one set of LayerNorm outputs shared by the blocks that rebuild theirs.
  if (options.any_norms_rebuilt()) add_block("recompute_norms.", -1, kNorms);
  // min(slots, swapped blocks): more slots than swapped blocks would hold nothing.
  if (options.any(ActPlacement::kSwap))
    for (int i = 0; i < std::min(options.swap_slots, options.count(ActPlacement::kSwap)); ++i)
      add("swap.slot" + std::to_string(i),
          {static_cast<int64_t>(block_activation_bytes(cfg, batch, dt, swapped_part(options, cfg.layers)))},
          DType::kU8, TensorClass::kActivation);
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    if (options.placement(l) == ActPlacement::kResident)
      add_block(p, l, held_parts(options, l));
    add(p + "res3", {B, T, C}, dt, TensorClass::kActivation, l);
  }
  add("lnf", {B, T, C}, dt, TensorClass::kActivation);
  add("lnf_mean", {B, T}, md, TensorClass::kActivation);
  add("lnf_rstd", {B, T}, md, TensorClass::kActivation);
  const int64_t chunk = options.lm_chunk_rows > 0 ? std::min(options.lm_chunk_rows, B * T)
                                                 : default_lm_chunk_rows(cfg, batch, dt);
  add("logits", {chunk, V}, dt, TensorClass::kWorkspace);
  add("losses", {B, T}, md, TensorClass::kActivation);
  const TensorClass W = TensorClass::kWorkspace;
  add("proj_out", {B, T, C}, dt, W);
  add("dresidual", {B, T, C}, dt, W);
  add("dln", {B, T, C}, dt, W);
  add("datty", {B, T, C}, dt, W);
  add("dqkv", {B, T, 3 * C}, dt, W);
  add("dfch", {B, T, 4 * C}, dt, W);
  return r;
}

Gpt::Gpt(Backend& backend, const GptConfig& cfg, int batch, DType dtype)
    : be_(backend), cfg_(cfg), batch_(batch), dtype_(dtype), layout_(gpt_param_layout(cfg)),
      master_of_dtype_(master_dtype_for(dtype)), num_params_(gpt_num_params(cfg)) {}

Gpt::~Gpt() {
  (void)be_.synchronize_all();
  for (void* h : swap_host_) be_.free_host(h);
  if (own_compute_ != own_master_) be_.free_host(own_compute_);
  be_.free_host(own_master_);
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) be_.pool().free(*it);
}

Result<std::unique_ptr<Gpt>> Gpt::create(Backend& backend, const GptConfig& cfg, int batch, DType dtype,
                                         const GptOptions& options) {
  TT_TRY(cfg.validate());
  TT_RETURN_IF(batch < 1, kInvalidArgument, "--batch must be >= 1, got %d", batch);
  std::unique_ptr<Gpt> g(new Gpt(backend, cfg, batch, dtype));
  TT_RETURN_IF(options.master_on_host && g->master_of_dtype_ != DType::kF32, kInvalidArgument,
               "a master on the host is f32; computing in %s keeps a %s master", dtype_name(dtype),
               dtype_name(g->master_of_dtype_));
  std::map<std::string, Tensor> by_name;
  for (const AllocRequest& req : allocation_list(cfg, batch, dtype, options)) {
    TT_ASSIGN_OR_RETURN(Tensor t, backend.pool().allocate(req.shape, req.dtype, req.cls, req.name));
    g->owned_.push_back(t);
    by_name[req.name] = t;
  }
  if (by_name.count("params")) g->params_ = by_name["params"];
  if (by_name.count("params.compute")) g->params_c_ = by_name["params.compute"];
  if (options.master_on_host) {
    const size_t P = static_cast<size_t>(g->num_params_);
    TT_ASSIGN_OR_RETURN(void* m, backend.allocate_host(P * sizeof(float), TensorClass::kParam, "params.master"));
    g->h_master_ = static_cast<float*>(m);
    if (dtype == DType::kF32) {
      g->h_compute_ = g->h_master_;
    } else {
      TT_ASSIGN_OR_RETURN(g->h_compute_,
                          backend.allocate_host(P * dtype_size(dtype), TensorClass::kParam, "params.compute.host"));
    }
    g->own_master_ = g->h_master_;
    g->own_compute_ = g->h_compute_;
  }
  // Gradient segments (Note [gradient segments]).
  TT_RETURN_IF(!options.grads_streamed.empty() && static_cast<int>(options.grads_streamed.size()) != cfg.layers,
               kInvalidArgument, "%zu gradient placements for a model of %d layers", options.grads_streamed.size(),
               cfg.layers);
  {
    const size_t S = static_cast<size_t>(cfg.layers) + 2;
    g->seg_offset_.assign(S, -1);
    g->seg_size_.assign(S, 0);
    for (const ParamInfo& p : g->layout_) {
      const size_t s = p.layer >= 0 ? static_cast<size_t>(p.layer) + 1 : p.name.rfind("lnf", 0) == 0 ? S - 1 : 0;
      if (g->seg_offset_[s] < 0) g->seg_offset_[s] = p.offset;
      TT_RETURN_IF(p.offset != g->seg_offset_[s] + g->seg_size_[s], kInternal, "parameter %s breaks segment %zu",
                   p.name.c_str(), s);
      g->seg_size_[s] += p.shape.numel();
      g->seg_of_param_.push_back(s);
    }
    for (size_t s = 0; s < S; ++s) g->grad_segs_.push_back(by_name["grads.seg" + std::to_string(s)]);
    if (by_name.count("grads.slot0")) {
      for (int i = 0; i < 2; ++i) {
        g->grad_slots_.push_back(by_name["grads.slot" + std::to_string(i)]);
        g->grad_slot_free_.push_back(backend.create_event());
      }
    }
    g->grad_slot_of_.assign(static_cast<size_t>(cfg.layers), -1);
  }
  // The device compute copy per segment, and the streamed blocks' slots (Note [streamed parameters]).
  TT_RETURN_IF(!options.params_streamed.empty() && static_cast<int>(options.params_streamed.size()) != cfg.layers,
               kInvalidArgument, "%zu parameter placements for a model of %d layers", options.params_streamed.size(),
               cfg.layers);
  g->options_ = options;
  {
    const size_t S = static_cast<size_t>(cfg.layers) + 2;
    g->pstream_index_.assign(static_cast<size_t>(cfg.layers), -1);
    for (int l = 0; l < cfg.layers; ++l) {
      if (!g->params_streamed(1 + l)) continue;
      g->pstream_index_[static_cast<size_t>(l)] = static_cast<int>(g->streamed_params_.size());
      g->streamed_params_.push_back(l);
    }
    const Tensor flat = g->params_c_.raw() ? g->params_c_ : g->params_;  // the one buffer, if there is one
    for (size_t s = 0; s < S; ++s) {
      if (g->params_streamed(static_cast<int>(s))) {
        g->param_segs_.emplace_back();
      } else if (flat.raw()) {
        g->param_segs_.push_back(flat.view(g->seg_offset_[s], {g->seg_size_[s]}));
      } else {
        g->param_segs_.push_back(by_name.at("params.compute.seg" + std::to_string(s)));
      }
    }
    if (!g->streamed_params_.empty()) {
      TT_RETURN_IF(!options.master_on_host, kInvalidArgument,
                   "streamed parameters are uploaded from the host master's staging copy: they need the master on "
                   "the host (the CPU optimizer)");
      TT_RETURN_IF(options.param_slots < 2, kInvalidArgument, "streaming parameters needs at least 2 slots, got %d",
                   options.param_slots);
      const int slots = std::min(options.param_slots, static_cast<int>(g->streamed_params_.size()));
      for (int i = 0; i < slots; ++i) {
        g->param_slots_mem_.push_back(by_name.at("params.slot" + std::to_string(i)));
        g->pslot_free_.push_back(backend.create_event());
      }
      for (int l = 0; l < cfg.layers; ++l) {
        g->param_in_.push_back(backend.create_event());
        g->param_in_names_.push_back("params h." + std::to_string(l));
      }
    }
  }
  g->tokens_ = by_name["tokens"];
  g->targets_ = by_name["targets"];
  g->encoded_ = by_name["encoded"];
  g->acts_.resize(static_cast<size_t>(cfg.layers));
  TT_RETURN_IF(!options.activations.empty() && static_cast<int>(options.activations.size()) != cfg.layers,
               kInvalidArgument, "%zu activation placements for a model of %d layers", options.activations.size(),
               cfg.layers);
  TT_RETURN_IF(!options.mlp_recomputed.empty() && static_cast<int>(options.mlp_recomputed.size()) != cfg.layers,
               kInvalidArgument, "%zu MLP-half placements for a model of %d layers", options.mlp_recomputed.size(),
               cfg.layers);
  TT_RETURN_IF(!options.norms_recomputed.empty() && static_cast<int>(options.norms_recomputed.size()) != cfg.layers,
               kInvalidArgument, "%zu LayerNorm-output placements for a model of %d layers",
               options.norms_recomputed.size(), cfg.layers);
  const unsigned swapped = swapped_part(options, cfg.layers);
  for (int l = 0; l < cfg.layers; ++l)
    TT_RETURN_IF(options.placement(l) == ActPlacement::kSwap && held_parts(options, l) != swapped, kInvalidArgument,
                 "block %d: swapped blocks must agree on whether their MLP half and their LayerNorm outputs are "
                 "rebuilt (they share slots)", l);
  for (int l = 0; l < cfg.layers; ++l)
    if (options.placement(l) == ActPlacement::kRecompute) g->last_recomputed_ = l;
  g->swap_index_.assign(static_cast<size_t>(cfg.layers), -1);
  for (int l = 0; l < cfg.layers; ++l) {
    if (options.placement(l) != ActPlacement::kSwap) continue;
    g->swap_index_[static_cast<size_t>(l)] = static_cast<int>(g->swapped_.size());
    g->swapped_.push_back(l);
  }
  if (!g->swapped_.empty()) {
    TT_RETURN_IF(options.swap_slots < 2, kInvalidArgument, "swapping activations needs at least 2 slots, got %d",
                 options.swap_slots);
    g->swap_slots_ = std::min(options.swap_slots, static_cast<int>(g->swapped_.size()));
    if (static_cast<int>(g->swapped_.size()) <= options.swap_slots)
      TT_LOG(WARN, MEM, "%zu swapped blocks and %d swap slots: every swapped block stays in its slot, nothing is "
             "copied (swap more blocks than slots to save device memory)", g->swapped_.size(), options.swap_slots);
    g->swap_bytes_ = block_activation_bytes(cfg, batch, dtype, swapped);
    for (int i = 0; i < g->swap_slots_; ++i) {
      Tensor slot = by_name["swap.slot" + std::to_string(i)];
      g->swap_slots_mem_.push_back(slot);
      // Carve the block's tensors out of the slot, each 256-byte aligned, under the names the layers use.
      size_t off = 0;
      for (const AllocRequest& a : block_activations(cfg, batch, dtype, swapped)) {
        by_name["swap" + std::to_string(i) + "." + a.name] =
            Tensor(static_cast<char*>(slot.raw()) + off, a.shape, a.dtype, a.cls, slot.device());
        off += memory::device_alloc_size(static_cast<size_t>(a.shape.numel()) * dtype_size(a.dtype));
      }
    }
    g->swap_host_.assign(static_cast<size_t>(cfg.layers), nullptr);
    for (int l = 0; l < cfg.layers; ++l) {
      g->swap_out_names_.push_back("swap_out h." + std::to_string(l));
      g->swap_in_names_.push_back("swap_in h." + std::to_string(l));
      for (auto* v : {&g->fwd_done_, &g->out_done_, &g->in_done_, &g->bwd_done_}) v->push_back(backend.create_event());
      const int k = g->swap_index_[static_cast<size_t>(l)];
      if (k < 0 || k >= static_cast<int>(g->swapped_.size()) - g->swap_slots_) continue;  // never leaves its slot
      TT_ASSIGN_OR_RETURN(g->swap_host_[static_cast<size_t>(l)],
                          backend.allocate_host(g->swap_bytes_, TensorClass::kActivation, "swap.h." + std::to_string(l)));
    }
  }
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string own = "h." + std::to_string(l) + ".";
    const ActPlacement pl = options.placement(l);
    const std::string p =
        pl == ActPlacement::kRecompute ? std::string("recompute.")
        : pl == ActPlacement::kSwap    ? "swap" + std::to_string(g->swap_index_[static_cast<size_t>(l)] % g->swap_slots_) + "."
                                       : own;
    LayerActs& a = g->acts_[static_cast<size_t>(l)];
    const std::string np = options.norms_rebuilt(l) ? std::string("recompute_norms.") : p;
    a.ln1 = by_name[np + "ln1"];
    a.ln1_mean = by_name[np + "ln1_mean"];
    a.ln1_rstd = by_name[np + "ln1_rstd"];
    a.qkv = by_name[p + "qkv"];
    a.atty = by_name[p + "atty"];
    a.lse = by_name[p + "lse"];
    a.res2 = by_name[p + "res2"];
    a.ln2 = by_name[np + "ln2"];
    a.ln2_mean = by_name[np + "ln2_mean"];
    a.ln2_rstd = by_name[np + "ln2_rstd"];
    const std::string mp = options.mlp_half_recomputed(l) ? std::string("recompute_mlp.") : p;
    a.fch = by_name[mp + "fch"];
    a.fch_gelu = by_name[mp + "fch_gelu"];
    a.res3 = by_name[own + "res3"];
  }
  g->lnf_ = by_name["lnf"];
  g->lnf_mean_ = by_name["lnf_mean"];
  g->lnf_rstd_ = by_name["lnf_rstd"];
  g->probs_ = by_name["logits"];
  g->lm_chunk_rows_ = g->probs_.dim(0);
  g->losses_ = by_name["losses"];
  g->proj_out_ = by_name["proj_out"];
  g->dresidual_ = by_name["dresidual"];
  g->dln_ = by_name["dln"];
  g->datty_ = by_name["datty"];
  g->dqkv_ = by_name["dqkv"];
  g->dfch_ = by_name["dfch"];
  TT_LOG(INFO, EXEC, "GPT L%d d%d H%d T%d V%d: %lld parameters, device pool in use %s", cfg.layers, cfg.dim,
         cfg.heads, cfg.seq, cfg.vocab, static_cast<long long>(gpt_num_params(cfg)),
         format_bytes(static_cast<int64_t>(backend.pool().in_use())).c_str());
  return g;
}

Tensor Gpt::compute_segment(int s) const {
  if (params_streamed(s)) {
    const int k = pstream_index_[static_cast<size_t>(s - 1)];
    return param_slots_mem_[static_cast<size_t>(k) % param_slots_mem_.size()];
  }
  return param_segs_[static_cast<size_t>(s)];
}

Tensor Gpt::cparam(size_t i) const {
  const ParamInfo& p = layout_[i];
  const int s = static_cast<int>(seg_of_param_[i]);
  return compute_segment(s).view(p.offset - segment_offset(s), p.shape);
}

void Gpt::refresh_compute_params() {
  if (params_c_.raw() && params_.raw()) be_.convert(params_c_, params_);
}

Tensor Gpt::grad_segment(int s) const {
  if (grads_streamed(s)) {
    const int slot = grad_slot_of_[static_cast<size_t>(s - 1)];
    TT_CHECK(slot >= 0, "the gradients of streamed block %d are not in a slot (its backward has not run)", s - 1);
    return grad_slots_[static_cast<size_t>(slot)];
  }
  return grad_segs_[static_cast<size_t>(s)];
}

Tensor Gpt::grad(size_t i) const {
  const ParamInfo& p = layout_[i];
  const int s = static_cast<int>(seg_of_param_[i]);
  return grad_segment(s).view(p.offset - segment_offset(s), p.shape);
}

Gpt::LayerParams Gpt::grad_layer_view(int layer) const {
  const size_t base = 2 + 12 * static_cast<size_t>(layer);
  auto v = [&](size_t k) { return grad(base + k); };
  return LayerParams{v(0), v(1), v(2), v(3), v(4), v(5), v(6), v(7), v(8), v(9), v(10), v(11)};
}

Gpt::LayerParams Gpt::compute_layer(int layer) const {
  // Block l's 12 tensors follow wte, wpe and the blocks before it.
  const size_t base = 2 + 12 * static_cast<size_t>(layer);
  auto v = [&](size_t k) { return cparam(base + k); };
  return LayerParams{v(0), v(1), v(2), v(3), v(4), v(5), v(6), v(7), v(8), v(9), v(10), v(11)};
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
void init_values(const GptConfig& cfg, const std::vector<ParamInfo>& layout, int64_t n, uint64_t seed, T* out) {
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

Status Gpt::init_params(uint64_t seed) {
  const int64_t n = num_params_;
  if (master_of_dtype_ == DType::kF64) {
    auto host = std::make_unique_for_overwrite<double[]>(static_cast<size_t>(n));
    init_values(cfg_, layout_, n, seed, host.get());
    return upload_params(host.get());
  }
  auto host = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));  // every element is written
  init_values(cfg_, layout_, n, seed, host.get());
  return upload_params(host.get());
}

Status Gpt::upload_params(const void* host) {
  if (h_master_ == nullptr) {
    be_.copy_h2d(params_, host, be_.compute_stream());
    refresh_compute_params();
    return be_.compute_stream().synchronize();
  }
  TT_TRY(be_.synchronize_all());  // no update or upload of the master is in flight
  const int64_t n = num_params_;
  std::memcpy(h_master_, host, static_cast<size_t>(n) * sizeof(float));
  if (h_compute_ != h_master_) {
    TT_CHECK(dtype_ == DType::kBF16, "no host conversion of the master to %s", dtype_name(dtype_));
    uint16_t* c = static_cast<uint16_t*>(h_compute_);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) c[i] = float_to_bf16(h_master_[i]);
  }
  // Every resident segment's device copy; streamed blocks are uploaded by each pass (Note [streamed parameters]).
  const size_t esize = dtype_size(dtype_);
  for (int s = 0; s < num_segments(); ++s)
    if (!params_streamed(s))
      be_.copy_h2d(param_segs_[static_cast<size_t>(s)],
                   static_cast<const char*>(h_compute_) + static_cast<size_t>(segment_offset(s)) * esize,
                   be_.compute_stream());
  return be_.compute_stream().synchronize();
}

Status Gpt::download_params(void* host) {
  if (h_master_ == nullptr) {
    be_.copy_d2h(host, params_, be_.compute_stream());
    return be_.compute_stream().synchronize();
  }
  TT_TRY(be_.synchronize_all());
  std::memcpy(host, h_master_, static_cast<size_t>(num_params_) * sizeof(float));
  return Status::ok();
}

Status Gpt::download_grads(void* host) {
  const size_t esize = dtype_size(master_of_dtype_);
  for (int s = 0; s < num_segments(); ++s) {
    TT_RETURN_IF(grads_streamed(s), kFailedPrecondition, "download_grads: block %d's gradients are streamed", s - 1);
    be_.copy_d2h(static_cast<char*>(host) + static_cast<size_t>(segment_offset(s)) * esize, grad_segment(s),
                 be_.compute_stream());
  }
  return be_.compute_stream().synchronize();
}

void Gpt::forward() {
  forward_blocks();
  lm_head(/*with_backward=*/false);
}

void Gpt::backward() {
  Stream& s = be_.compute_stream();
  mark("zero_grads");
  for (const Tensor& t : grad_segs_)
    if (t.raw()) be_.fill_zero(t, s);
  mark("zero_scratch");
  be_.fill_zero(dln_, s);
  lm_head(/*with_backward=*/true);
  backward_blocks();
}

void Gpt::forward_backward() {
  forward_blocks();
  backward();
}

void Gpt::forward_blocks() {
  Stream& cs = be_.compute_stream();
  params_forward_start();
  gate(0, cs);
  mark("embedding_forward");
  be_.embedding_forward(encoded_, tokens_, cparam(0), cparam(1));
  Tensor x = encoded_;
  for (int l = 0; l < cfg_.layers; ++l) {
    if (!params_streamed(1 + l)) gate(1 + l, cs);  // a streamed block's upload was gated
    params_before_use(l);
    swap_before_forward(l);
    forward_layer(l, x);
    swap_after_forward(l);
    params_after_forward(l);
    x = acts_[static_cast<size_t>(l)].res3;
  }
  shared_holds_ = last_recomputed_;
  const size_t lnf = layout_.size() - 2;
  gate(cfg_.layers + 1, cs);
  mark("layernorm_forward");
  be_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, cparam(lnf), cparam(lnf + 1));
}

// Note [swap]. The swapped blocks w_0 < w_1 < ... < w_{m-1} share S slots: w_k lives in slot k % S. Ordering, with
// events per block:
//  forward:  w_k may overwrite its slot once the previous occupant's copy out finished (out_done); after it, the
//            d2h stream copies the slot out (after fwd_done), except for the last S swapped blocks, which stay in
//            their slots until their backward (their out_done is never recorded, so waiting for it is a no-op; the
//            next forward reuses their slots after this step's backward, on the same compute stream).
//  backward: the last S swapped blocks are still in their slots. After w_k's backward its slot is free: the h2d
//            stream brings w_{k-S} into it (after bwd_done[w_k] and out_done[w_k], whose copy read the same slot),
//            and w_{k-S}'s backward waits for in_done.
//  next forward: the first S swapped blocks wait for the last copy out of their slot in the previous forward (it
//            matters after an evaluation forward, which has no backward to order it).
void Gpt::swap_before_forward(int l) {
  const int k = swap_slots_ == 0 ? -1 : swap_index_[static_cast<size_t>(l)];
  if (k < 0) return;
  // The last copy out of this slot: that of w_{k-S} in this forward, or for the first S that of the previous
  // forward's last copied block in this slot (the largest k' < m - S with k' = k mod S). After a training step it
  // is long done (the backward's swap-ins waited for it); after an evaluation forward it may still be running.
  const int S = swap_slots_, m = static_cast<int>(swapped_.size());
  int prev = k - S;
  if (k < S) {
    prev = k + S * ((m - 1 - k) / S);
    while (prev >= m - S) prev -= S;
  }
  if (prev < 0) return;  // this slot's blocks are never copied out
  mark("wait swap_out");
  be_.compute_stream().wait(*out_done_[static_cast<size_t>(swapped_[static_cast<size_t>(prev)])]);
}

void Gpt::swap_after_forward(int l) {
  const int k = swap_slots_ == 0 ? -1 : swap_index_[static_cast<size_t>(l)];
  if (k < 0 || k >= static_cast<int>(swapped_.size()) - swap_slots_) return;  // stays in its slot
  const size_t i = static_cast<size_t>(l);
  be_.compute_stream().record(*fwd_done_[i]);
  be_.d2h_stream().wait(*fwd_done_[i]);
  const int c = span_begin(be_.d2h_stream(), swap_out_names_[i].c_str(), static_cast<int64_t>(swap_bytes_));
  be_.copy_d2h(swap_host_[i], swap_slots_mem_[static_cast<size_t>(k % swap_slots_)], be_.d2h_stream());
  span_end(be_.d2h_stream(), c);
  be_.d2h_stream().record(*out_done_[i]);
}

void Gpt::swap_before_backward(int l) {
  const int k = swap_slots_ == 0 ? -1 : swap_index_[static_cast<size_t>(l)];
  // The last S swapped blocks are still in their slots.
  if (k < 0 || k >= static_cast<int>(swapped_.size()) - swap_slots_) return;
  mark("wait swap_in");
  be_.compute_stream().wait(*in_done_[static_cast<size_t>(l)]);
}

void Gpt::swap_after_backward(int l) {
  const int k = swap_slots_ == 0 ? -1 : swap_index_[static_cast<size_t>(l)];
  if (k < 0) return;
  const size_t i = static_cast<size_t>(l);
  be_.compute_stream().record(*bwd_done_[i]);
  if (k < swap_slots_) return;
  const int next = swapped_[static_cast<size_t>(k - swap_slots_)];  // the next block to need this slot
  const size_t n = static_cast<size_t>(next);
  be_.h2d_stream().wait(*bwd_done_[i]);
  be_.h2d_stream().wait(*out_done_[i]);
  be_.h2d_stream().wait(*out_done_[n]);
  const int c = span_begin(be_.h2d_stream(), swap_in_names_[n].c_str(), static_cast<int64_t>(swap_bytes_));
  be_.copy_h2d(swap_slots_mem_[static_cast<size_t>(k % swap_slots_)], swap_host_[n], be_.h2d_stream());
  span_end(be_.h2d_stream(), c);
  be_.h2d_stream().record(*in_done_[n]);
}

// Note [streamed parameters]. The streamed blocks p_0 < p_1 < ... < p_{m-1} share Q slots: p_k lives in slot k % Q.
// Every upload into a slot waits (on the h2d stream) for pslot_free of that slot, recorded on the compute stream
// after the last use of its previous contents, and for the gate (the CPU optimizer's update of that block's host
// copy); every use waits for the block's param_in.
//  forward:  at its start every slot is marked free (whatever a previous pass left in it has been used by then, in
//            compute-stream order) and p_0 .. p_{Q-1} are uploaded. After p_k's forward, if p_{k+Q} exists, its slot
//            is marked free and p_{k+Q} uploaded into it. The last Q streamed blocks stay in their slots.
//  backward: p_{m-1} .. p_{m-Q} are in their slots. After p_k's backward its slot is marked free and p_{k-Q}
//            uploaded into it (its backward, or its recompute, waits for it).
// The host copy an upload reads is rewritten only by the next update, which starts after this step's backward,
// which waited for every upload of this step: the uploads are done by then.
// Two of these waits are not the only thing ordering their copies today, and the tests cannot catch their removal:
// the gate (the h2d stream has also waited for the update of the final LayerNorm, the last one, before uploading
// it) and the marks at the start of a forward (the trainer synchronises after an evaluation's forward). They stay
// so that neither ordering depends on those facts.
void Gpt::params_forward_start() {
  if (streamed_params_.empty()) return;
  for (const auto& e : pslot_free_) be_.compute_stream().record(*e);
  const int m = static_cast<int>(streamed_params_.size()), Q = static_cast<int>(param_slots_mem_.size());
  for (int k = 0; k < std::min(m, Q); ++k) params_upload(k);
}

void Gpt::params_upload(int k) {
  const int l = streamed_params_[static_cast<size_t>(k)];
  const size_t q = static_cast<size_t>(k) % param_slots_mem_.size();
  Stream& h2d = be_.h2d_stream();
  gate(1 + l, h2d);
  h2d.wait(*pslot_free_[q]);
  const size_t bytes = param_slots_mem_[q].nbytes();
  const int c = span_begin(h2d, param_in_names_[static_cast<size_t>(l)].c_str(), static_cast<int64_t>(bytes));
  be_.copy_h2d(param_slots_mem_[q],
               static_cast<const char*>(h_compute_) + static_cast<size_t>(segment_offset(1 + l)) * dtype_size(dtype_),
               h2d);
  span_end(h2d, c);
  h2d.record(*param_in_[static_cast<size_t>(l)]);
}

void Gpt::params_before_use(int l) {
  if (pstream_index_.empty() || pstream_index_[static_cast<size_t>(l)] < 0) return;
  mark("wait params");
  be_.compute_stream().wait(*param_in_[static_cast<size_t>(l)]);
}

void Gpt::params_after_forward(int l) {
  const int k = pstream_index_.empty() ? -1 : pstream_index_[static_cast<size_t>(l)];
  const int m = static_cast<int>(streamed_params_.size()), Q = static_cast<int>(param_slots_mem_.size());
  if (k < 0 || k + Q >= m) return;  // not streamed, or stays in its slot for the backward
  be_.compute_stream().record(*pslot_free_[static_cast<size_t>(k % Q)]);
  params_upload(k + Q);
}

void Gpt::params_after_backward(int l) {
  const int k = pstream_index_.empty() ? -1 : pstream_index_[static_cast<size_t>(l)];
  if (k < 0) return;
  const int Q = static_cast<int>(param_slots_mem_.size());
  be_.compute_stream().record(*pslot_free_[static_cast<size_t>(k % Q)]);
  if (k - Q >= 0) params_upload(k - Q);
}

void Gpt::forward_layer(int l, const Tensor& x) {
  const LayerParams w = compute_layer(l);
  LayerActs& a = acts_[static_cast<size_t>(l)];
  if (options_.norms_rebuilt(l)) norms_hold_ = l;
  mark("layernorm_forward");
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b);
  mark("matmul_forward qkv");
  be_.matmul_forward(a.qkv, a.ln1, w.qkvw, w.qkvb);
  mark("attention_forward");
  be_.attention_forward(a.atty, a.lse, a.qkv, cfg_.heads);
  mark("matmul_forward attn.proj");
  be_.matmul_forward(proj_out_, a.atty, w.projw, w.projb);
  mark("residual_layernorm_forward");
  be_.residual_layernorm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, proj_out_, w.ln2w, w.ln2b);
  mark("matmul_gelu_forward mlp.fc");
  be_.matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, w.fcw, w.fcb);
  if (options_.mlp_half_recomputed(l)) mlp_holds_ = l;
  mark("matmul_forward mlp.proj");
  be_.matmul_forward(proj_out_, a.fch_gelu, w.fcprojw, w.fcprojb);
  mark("residual_forward");
  be_.residual_forward(a.res3, a.res2, proj_out_);
}

// LM head tied to wte, over chunks of rows (Note [LM head in chunks]): logits, then in place probabilities and
// losses; with_backward also turns them into dlogits and adds their contribution to dlnf (dln_) and dwte.
void Gpt::lm_head(bool with_backward) {
  const int64_t BT = static_cast<int64_t>(batch_) * cfg_.seq, C = cfg_.dim, Vp = cfg_.padded_vocab();
  const Tensor wte = cparam(0);
  for (int64_t r0 = 0; r0 < BT; r0 += lm_chunk_rows_) {
    const int64_t n = std::min(lm_chunk_rows_, BT - r0);
    const Tensor logits = probs_.view(0, {n, Vp});
    const Tensor x = lnf_.view(r0 * C, {n, C});
    const Tensor tg = targets_.view(r0, {n});
    mark("matmul_forward lm_head");
    be_.matmul_forward(logits, x, wte, Tensor());
    if (!with_backward) {
      mark("softmax_xent_forward");
      be_.softmax_xent_forward(losses_.view(r0, {n}), logits, logits, tg, cfg_.vocab);
      continue;
    }
    // Training: the probabilities go straight to their gradients, in place.
    mark("softmax_xent_fused");
    be_.softmax_xent_fused(losses_.view(r0, {n}), logits, logits, tg, 1.0f / static_cast<float>(BT), cfg_.vocab);
    mark("matmul_backward lm_head");
    be_.matmul_backward(dln_.view(r0 * C, {n, C}), grad(0), Tensor(), logits, x, wte);
  }
}

void Gpt::compute_logits(const Tensor& out) {
  const int64_t BT = static_cast<int64_t>(batch_) * cfg_.seq;
  be_.matmul_forward(out.reshape({BT, cfg_.padded_vocab()}), lnf_.reshape({BT, cfg_.dim}), cparam(0),
                     Tensor());
}

void Gpt::backward_blocks() {
  Stream& s = be_.compute_stream();
  const Tensor dwte = grad(0), dwpe = grad(1);
  // dln_ holds d(lnf output) from the LM head.
  mark("zero_scratch");
  be_.fill_zero(dresidual_, s);
  const size_t lnf = layout_.size() - 2;
  const Tensor last = acts_.back().res3;
  mark("layernorm_backward");
  be_.layernorm_backward(dresidual_, grad(lnf), grad(lnf + 1), dln_, last, cparam(lnf), lnf_mean_, lnf_rstd_);
  grads_done(cfg_.layers + 1);
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    params_before_use(l);  // before a recompute, which reads them too
    const LayerParams w = compute_layer(l);
    if (grads_streamed(1 + l)) {
      TT_CHECK(grads_done_ != nullptr, "block %d streams its gradients, but nothing takes them (the CPU optimizer)", l);
      // Note [gradient segments]: the next slot, once the copy out of its previous block is done; zeroed.
      const int slot = next_grad_slot_;
      next_grad_slot_ ^= 1;
      mark("wait grad slot");
      be_.compute_stream().wait(*grad_slot_free_[static_cast<size_t>(slot)]);
      grad_slot_of_[static_cast<size_t>(l)] = slot;
      be_.fill_zero(grad_slots_[static_cast<size_t>(slot)], s);
    }
    const LayerParams g = grad_layer_view(l);
    const LayerActs& a = acts_[static_cast<size_t>(l)];
    const Tensor x = l == 0 ? encoded_ : acts_[static_cast<size_t>(l) - 1].res3;
    if (options_.placement(l) == ActPlacement::kRecompute && shared_holds_ != l) {
      // Note [recompute]: rebuild this block's activations from its input. It rewrites res3 with the same bits.
      forward_layer(l, x);
      shared_holds_ = l;
    }
    swap_before_backward(l);
    if (options_.norms_rebuilt(l) && norms_hold_ != l) {
      // Note [rebuilt norms]: ln2 from res2 (resident, or just brought back), ln1 from the block's input.
      mark("layernorm_forward ln2 (rebuild)");
      be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2w, w.ln2b);
      mark("layernorm_forward ln1 (rebuild)");
      be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b);
      norms_hold_ = l;
    }
    if (options_.mlp_half_recomputed(l) && mlp_holds_ != l) {
      // Note [MLP half]: rebuild fch and fch_gelu from ln2 (resident, or just brought back) with the forward's kernel.
      mark("matmul_gelu_forward mlp.fc (recompute)");
      be_.matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, w.fcw, w.fcb);
      mlp_holds_ = l;
    }
    // MLP: res3 = res2 + proj(gelu(fc(ln2(res2)))); dresidual holds d(res3) and becomes d(res2).
    mark("matmul_backward_gelu mlp.proj");
    be_.matmul_backward_gelu(dfch_, g.fcprojw, g.fcprojb, dresidual_, a.fch_gelu, w.fcprojw, a.fch);
    mark("zero_scratch");
    be_.fill_zero(dln_, s);
    mark("matmul_backward mlp.fc");
    be_.matmul_backward(dln_, g.fcw, g.fcb, dfch_, a.ln2, w.fcw);
    mark("layernorm_backward");
    be_.layernorm_backward(dresidual_, g.ln2w, g.ln2b, dln_, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd);
    // Attention: res2 = x + proj(attn(qkv(ln1(x)))); dresidual becomes d(x).
    mark("zero_scratch");
    be_.fill_zero(datty_, s);
    mark("matmul_backward attn.proj");
    be_.matmul_backward(datty_, g.projw, g.projb, dresidual_, a.atty, w.projw);
    mark("zero_scratch");
    be_.fill_zero(dqkv_, s);
    mark("attention_backward");
    be_.attention_backward(dqkv_, datty_, a.qkv, a.atty, a.lse, cfg_.heads);
    mark("zero_scratch");
    be_.fill_zero(dln_, s);
    mark("matmul_backward qkv");
    be_.matmul_backward(dln_, g.qkvw, g.qkvb, dqkv_, a.ln1, w.qkvw);
    mark("layernorm_backward");
    be_.layernorm_backward(dresidual_, g.ln1w, g.ln1b, dln_, x, w.ln1w, a.ln1_mean, a.ln1_rstd);
    swap_after_backward(l);
    params_after_backward(l);
    grads_done(1 + l);
    if (grads_streamed(1 + l)) be_.d2h_stream().record(*grad_slot_free_[static_cast<size_t>(grad_slot_of_[static_cast<size_t>(l)])]);
  }
  mark("embedding_backward");
  be_.embedding_backward(dwte, dwpe, dresidual_, tokens_);
  grads_done(0);
}

}  // namespace tt
