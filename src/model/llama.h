// model/llama: the Llama family (Note [model families] in model/model.h), as Llama 2 and 3, Mistral (without a sliding
// window) and Qwen2 publish it: token embedding, L pre-norm blocks (RMSNorm; attention with rotary position embeddings
// and grouped-query heads, optional QKV biases; residual; RMSNorm; SwiGLU MLP; residual), final RMSNorm, an LM head
// of its own or tied to the embedding, mean cross-entropy. No other biases.
//
//   ModelConfig cfg{.family = "llama", .vocab = 128256, .layers = 16, .dim = 2048, .heads = 32, .seq = 2048,
//                   .kv_heads = 8, .ffn = 8192, .tied_embeddings = true, .rope_theta = 500000};
//   std::unique_ptr<Model> llama = create_model(backend, cfg, batch, DType::kBF16, tensors);
//
// Note [Llama layout]
// A block's parameters: attn_norm.w [C]; attn.qkv.w [(H + 2 KV) hs, C] (the rows of q's H heads, then k's and v's KV
// heads: Hugging Face's q_proj, k_proj, v_proj stacked) and attn.qkv.b with qkv_bias; attn.proj.w [C, C] (o_proj);
// mlp_norm.w [C]; mlp.gate_up.w [2F, C] (gate_proj's rows, then up_proj's); mlp.down.w [C, F]. Before the blocks wte
// [Vp, C]; after them norm.w [C] and, untied, lm_head.w [Vp, C]. Activations: qkv holds q and k already rotated
// (Backend::rope after the QKV GEMM, turned back in the backward before the QKV GEMM's), fch the MLP's [gate | up],
// fch_act silu(gate) * up. The rotation's angles are a table [T, hs] of cos and sin the model computes on the host
// once (Hugging Face's frequencies, with Llama 3's scaling when configured) and keeps on the device.
//
// Note [tensor parallel] holds with these shapes: a rank holds H / tp query heads and KV / tp whole key/value heads
// (qkv.w's three row blocks), F / tp of the MLP's hidden width (gate_up.w's two row blocks), the matching columns of
// attn.proj.w and mlp.down.w; the norms are replicated; with split_vocab, wte's and lm_head.w's rows are split.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace tt {

const ModelFamily& llama_family();

// The MLP's hidden width of a configuration (ffn, or Llama's default: 8/3 of 4 dim rounded up to a multiple of 256).
int llama_ffn(const ModelConfig& cfg);
// The rotary table [seq, head_dim]: each position's cos then sin of the head_dim / 2 frequencies, as Hugging Face
// computes them (inverse frequencies and angles in f32 for an f32 table; in f64 for f64).
std::vector<double> llama_rope_table(const ModelConfig& cfg, bool f32_angles);

class Llama : public Model {
 public:
  Llama(Backend& backend, const ModelConfig& cfg, int batch, DType compute, ModelTensors tensors);

  void forward_blocks(ModelHooks& hooks) override;
  void lm_head(ModelHooks& hooks, bool with_backward) override;
  void backward_blocks(ModelHooks& hooks) override;
  void forward_block(ModelHooks& hooks, int l) override;
  // Note [rebuilt norms]: ln2 from res2, then ln1 from the block's input.
  void rebuild_norms(ModelHooks& hooks, int l) override;
  // Note [MLP half]: fch and fch_act from ln2.
  void rebuild_mlp(ModelHooks& hooks, int l) override;
  // Note [rebuilt activation]: fch_act from fch (the forward always runs SwiGLU as a kernel of its own).
  void rebuild_act(ModelHooks& hooks, int l) override;
  void compute_logits_rows(const Tensor& out, int64_t row_begin) override;
  // Note [KV cache]: the cache holds every block's rotated qkv rows [L, T, (H + 2 KV) hs].
  void decode_prefill(const NamedTensors& state, int n) override;
  void decode_step(const NamedTensors& state) override;

 private:
  struct Acts {
    Tensor ln1, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_rstd, fch, fch_act, res3;
  };
  struct LayerParams {
    Tensor attn_norm, qkvw, qkvb, projw, mlp_norm, gate_up, down;
  };
  LayerParams layer(int l, bool grads) const;
  Tensor block_input(int l) const { return l == 0 ? encoded_ : acts_[static_cast<size_t>(l) - 1].res3; }
  Tensor head() const { return cparam(head_index_); }
  int64_t vocab_begin() const { return cfg_.split_vocab ? int64_t(tp_rank_) * cfg_.local_vocab() : 0; }
  int local_heads() const { return cfg_.heads / cfg_.tp; }
  int local_kv_heads() const { return cfg_.kv_head_count() / cfg_.tp; }
  float eps() const { return static_cast<float>(cfg_.norm_eps); }
  void backward_block(ModelHooks& hooks, int l);

  std::vector<Acts> acts_;  // [layer]
  Tensor tokens_, encoded_, lnf_, lnf_rstd_, rope_;
  Tensor proj_out_, dresidual_, dln_, datty_, dqkv_, dact_;
  size_t wte_index_ = 0, norm_index_ = 0, head_index_ = 0;
  std::vector<std::array<size_t, 7>> layer_index_;  // [layer] its parameters in LayerParams order (qkvb: none = SIZE_MAX)
};

}  // namespace tt
