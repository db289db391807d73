// model/gpt: the GPT-2 family (Note [model families] in model/model.h): the reference GPT of docs/ARCHITECTURE.md
// (GPT-2 style, as nanoGPT and llm.c): token + learned position embedding, L pre-LN blocks (LayerNorm, causal
// multi-head attention, residual; LayerNorm, MLP 4d with tanh-GELU, residual), final LayerNorm, LM head tied to the
// token embedding, mean cross-entropy.
//
// The model computes; it does not place, copy or wait (Note [model and executor] in model/model.h). Its passes run
// block by block on the backend's compute stream over the views the executor placed:
//
//   std::unique_ptr<Model> gpt = create_model(backend, cfg, batch, DType::kF32, tensors);  // cfg.family "gpt2"
//   gpt->forward_blocks(hooks);                          // embedding, blocks, final LayerNorm
//   gpt->lm_head(hooks, /*with_backward=*/true);          // losses, and d(lnf), d(wte)
//   gpt->backward_blocks(hooks);                         // gradients of the mean loss (written, not added to)
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace tt {

// The family's description (its ModelConfig fields: vocab, layers, dim, heads, seq, tp, split_vocab; the others keep
// their defaults).
const ModelFamily& gpt2_family();

// Note [tensor parallel]
// With tp > 1 each rank of the model dimension holds, of every block, its heads' columns of QKV ([3C/tp, C] as
// Q, K and V rows of its heads), its rows of the MLP's first matrix ([4C/tp, C]) and their biases, and the matching
// input columns of the two output projections ([C, C/tp], [C, 4C/tp]); LayerNorms, the projections' biases, wpe and
// the final LayerNorm are replicated; wte too, unless split_vocab gives each rank its block of Vp/tp rows (then
// listed after wpe). The forward sums each
// projection's partial output over the ranks (ModelHooks::tp_sum; the bias added by rank 0 alone), the backward sums
// the gradients of the two LayerNorm outputs the column-parallel GEMMs produce (Megatron's f and g operators), so
// every replicated tensor, its gradient included, is the same on every rank. A rank's attention runs on its
// heads/tp heads unchanged.
//
// Note [vocabulary-parallel cross-entropy]
// With split_vocab, rank r holds wte's rows [r Vp/tp, (r+1) Vp/tp): the embedding adds the rows of the tokens it
// holds (and rank 0 wpe) and the ranks sum the result; the LM head computes the logits of its columns only, and the
// cross-entropy of each row needs the row's maximum over all columns, then its sum of exponentials and the target's
// logit: Backend::xent_local_max, a maximum over the ranks, xent_local_sums, a sum over the ranks (of B T x 2
// values, not of the logits), xent_finish. The gradient of lnf that each rank's columns give is summed after the
// head; each rank's d(wte) rows are its own.
//
// Note [KV cache]
// Drawing text one token at a time, the keys and values of the tokens already seen do not change. The decoder keeps
// every block's qkv rows of the positions so far (cache [L, T, 3C], compute dtype) and runs each new token through
// the blocks as one row, its attention over the cached rows (Backend::attention_decode, which also appends the row):
// a token costs the weights' reads once instead of a forward over the whole window. A prefill fills the cache from a
// forward over the context (the executor's batch-of-one model). The token and its position are read from device
// memory (token, pos) when the step runs, so that one recorded step (Backend::capture: a CUDA graph) replays for every
// token: at GPT-2 a token is about 110 kernels of one row each, whose launches cost as much as their work. The
// cache holds at most T positions: whoever draws restarts the context (prefill) when it outgrows them
// (apps/generate.cc).

// The activations a block saves for its backward.
struct BlockActs {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, res3;
};

class Gpt : public Model {
 public:
  // The tensors must match what the family requests for (cfg, batch, compute); checked.
  Gpt(Backend& backend, const ModelConfig& cfg, int batch, DType compute, ModelTensors tensors);

  void forward_blocks(ModelHooks& hooks) override;
  // LM head tied to wte: with with_backward, d(lnf) and d(wte).
  void lm_head(ModelHooks& hooks, bool with_backward) override;
  void backward_blocks(ModelHooks& hooks) override;
  void forward_block(ModelHooks& hooks, int l) override;
  // Note [rebuilt norms]: ln2 from res2, then ln1 from the block's input.
  void rebuild_norms(ModelHooks& hooks, int l) override;
  // Note [MLP half]: fch and fch_gelu from ln2 with the forward's kernel.
  void rebuild_mlp(ModelHooks& hooks, int l) override;
  // Note [rebuilt activation]: fch_gelu from fch with the forward's kernel (the block's GELU is apart).
  void rebuild_act(ModelHooks& hooks, int l) override;
  void compute_logits_rows(const Tensor& out, int64_t row_begin) override;
  // Note [KV cache]: the cache holds every block's qkv rows [L, T, 3C].
  void decode_prefill(const NamedTensors& state, int n) override;
  void decode_step(const NamedTensors& state) override;

 protected:
  const BlockActs& acts(int l) const { return acts_[static_cast<size_t>(l)]; }

 private:
  struct LayerParams {
    Tensor ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  LayerParams compute_layer(int layer) const;
  LayerParams grad_layer(int layer) const;
  Tensor block_input(int l) const { return l == 0 ? encoded_ : acts_[static_cast<size_t>(l) - 1].res3; }
  // wte and wpe (in the other order with split_vocab: the layout); the token of wte's first row.
  Tensor wte() const { return cparam(wte_index_); }
  Tensor wpe() const { return cparam(wte_index_ ^ 1); }
  int64_t vocab_begin() const { return cfg_.split_vocab ? int64_t(tp_rank_) * cfg_.local_vocab() : 0; }
  void backward_block(ModelHooks& hooks, int l);

  std::vector<BlockActs> acts_;  // [layer]
  Tensor tokens_, encoded_, lnf_, lnf_mean_, lnf_rstd_;
  Tensor proj_out_, dresidual_, dln_, datty_, dqkv_, dfch_;
  size_t wte_index_ = 0;
  std::vector<std::array<size_t, 12>> layer_index_;  // [layer] the indices of its 12 parameters, in LayerParams order
};

}  // namespace tt
