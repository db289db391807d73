// model/gpt: the math of the reference GPT of docs/ARCHITECTURE.md (GPT-2 style, as nanoGPT and llm.c): token + learned
// position embedding, L pre-LN blocks (LayerNorm, causal multi-head attention, residual; LayerNorm, MLP 4d with
// tanh-GELU, residual), final LayerNorm, LM head tied to the token embedding, mean cross-entropy.
//
// The model computes; it does not place, copy or wait (Note [model and executor]). It says which tensors it needs
// (parameter layout, gradient segments, each block's activations by part, workspace), is handed views of them
// (GptTensors) by whoever placed them (exec/executor.h), and runs its passes block by block on the backend's compute
// stream, announcing every block boundary to a GptHooks that it owns the definition of:
//
//   Gpt gpt(backend, cfg, batch, DType::kF32, tensors);   // tensors: views the executor allocated
//   gpt.forward_blocks(hooks);                           // embedding, blocks, final LayerNorm
//   gpt.lm_head(hooks, /*with_backward=*/true);           // losses, and d(lnf), d(wte)
//   gpt.backward_blocks(hooks);                          // gradients of the mean loss (written, not added to)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/kernel_call.h"

namespace tt {

struct GptConfig {
  int vocab = 256;
  int layers = 4;
  int dim = 128;
  int heads = 4;
  int seq = 128;  // maximum sequence length (size of wpe)
  // Note [tensor parallel]: how many ways the blocks are split over tensor-parallel ranks (their heads and the MLP's
  // hidden width; 1: not split). Every size the functions below give (parameters, activations, kernel calls) is then
  // one rank's; heads stays the whole model's.
  int tp = 1;
  // With tp > 1: the vocabulary too (wte's rows, the LM head's columns; Note [vocabulary-parallel cross-entropy]).
  bool split_vocab = false;
  // The LM head's columns on one rank.
  int local_vocab() const { return split_vocab ? padded_vocab() / tp : padded_vocab(); }

  Status validate() const;
  bool operator==(const GptConfig&) const = default;
  // Rows of the token embedding and columns of the logits: vocab rounded up to a multiple of 128, so that the LM
  // head's GEMMs have aligned leading dimensions (50257 -> 50304, as llm.c does). The padding rows start at zero, never
  // receive a gradient and take no part in the softmax.
  int padded_vocab() const { return (vocab + 127) / 128 * 128; }
  // The same model on one rank (tp = 1): the layout checkpoints and initial values use.
  GptConfig whole() const {
    GptConfig c = *this;
    c.tp = 1;
    c.split_vocab = false;
    return c;
  }
};

struct ParamInfo {
  std::string name;  // e.g. "h.3.attn.qkv.w"
  Shape shape;
  int64_t offset = 0;  // in elements, within the flat buffer
  bool decay = false;  // weight decay applies (matrices and embeddings)
  int layer = -1;      // block index, -1 for embeddings and the final LayerNorm
  bool sharded = false;  // split over the tensor-parallel ranks (Note [tensor parallel]); else the same on each
};

// The parameters in flat-buffer order: wte, wpe, block 0, ..., block L-1, lnf, so that a block's parameters are
// contiguous. With tp > 1 a block lists its replicated parameters first, then its sharded ones (Note [tensor
// parallel]).
std::vector<ParamInfo> gpt_param_layout(const GptConfig& cfg);
int64_t gpt_num_params(const GptConfig& cfg);

// Note [tensor parallel]
// With tp > 1 each rank of the model dimension holds, of every block, its heads' columns of QKV ([3C/tp, C] as
// Q, K and V rows of its heads), its rows of the MLP's first matrix ([4C/tp, C]) and their biases, and the matching
// input columns of the two output projections ([C, C/tp], [C, 4C/tp]); LayerNorms, the projections' biases, wpe and
// the final LayerNorm are replicated; wte too, unless split_vocab gives each rank its block of Vp/tp rows (then
// listed after wpe). The forward sums each
// projection's partial output over the ranks (GptHooks::tp_sum; the bias added by rank 0 alone), the backward sums
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
// The copies between the whole model's flat buffer (tp = 1 layout, what checkpoints and initial values use) and one
// rank's: element ranges [whole, whole + count) -> [local, local + count).
struct ShardCopy {
  int64_t whole = 0, local = 0, count = 0;
};
std::vector<ShardCopy> gpt_shard_copies(const GptConfig& cfg, int tp_rank);
// A rank's flat buffer from the whole model's, and back, for elements of `esize` bytes.
void gpt_take_shard(const GptConfig& cfg, int tp_rank, const void* whole, void* local, size_t esize);
void gpt_put_shard(const GptConfig& cfg, int tp_rank, const void* local, void* whole, size_t esize);

// Note [gradient segments]
// Parameters, their compute copies and their gradients are cut into segments: 0 the embeddings, 1 + l block l,
// L + 1 the final LayerNorm; segment s covers flat elements [offset[s], offset[s] + size[s]). Each segment is one
// tensor, which the executor may place anywhere (its own buffer, a shared slot, a host copy). The global gradient
// norm is the sum in segment order of each segment's sum of squares (Backend::sum_in_order), so it does not depend
// on where the gradients are.
struct GptSegments {
  std::vector<int64_t> offset, size;  // [segment] in flat elements
  // [segment] where its sharded parameters begin (offset + size: none); Note [tensor parallel]: with tp > 1 the
  // gradient norm sums each segment's two parts apart, the sharded one over the ranks.
  std::vector<int64_t> shard_begin;
  std::vector<int> of_param;          // [parameter index] its segment
  int count() const { return static_cast<int>(offset.size()); }
};
GptSegments gpt_segments(const GptConfig& cfg);
// The most elements of a segment of n that one of `ranks` ranks holds when it is split evenly in rank order (Note
// [sharded optimizer] in exec/optimizer.h): ceil(n / ranks); the last ranks may hold fewer.
inline int64_t segment_share(int64_t n, int ranks) { return (n + ranks - 1) / ranks; }

// Note [mixed precision]
// A model has a compute dtype (activations and the weights the kernels read: f32, f64 or bf16) and a master dtype
// (parameters as the optimizer keeps them, their gradients, LayerNorm statistics and losses): fp32 when computing in
// bf16, the compute dtype otherwise. With bf16 compute a bf16 copy of the parameters sits beside the fp32 master;
// every change of the master (upload, optimizer step) refreshes the copy.
DType master_dtype_for(DType compute);

// One tensor the model needs.
struct TensorRequest {
  std::string name;
  Shape shape;
  DType dtype;
  TensorClass cls;
  int layer = -1;
};

// Note [LM head in chunks]
// The logits of all B*T positions (B*T*V values: 1.6 GB in bf16 for GPT-2 at batch 16) are never materialised: the
// LM head runs over chunks of rows, each chunk's logits turned into losses and, when training, at once into the
// gradients of the final LayerNorm's output and of wte, in one buffer of lm_chunk_rows x padded_vocab.
// Each chunk adds its part of d(wte) (V x C, f32) once, so small chunks read and write that gradient many times, and
// larger chunks make a faster step (docs/benchmarks/2026-12-02-h200-engine-same-call/). The default is at most
// 512 MiB of logits, in equal chunks of a multiple of 64 rows (`--lm-chunk-rows` sets it).
int64_t gpt_default_lm_chunk_rows(const GptConfig& cfg, int batch, DType compute);

// The parts of one block's saved activations (all but its output, which every block keeps: its successor's input).
// The executor may keep them apart (plan/plan.h): the LayerNorm outputs and statistics (Note [rebuilt norms]), the
// rest of the attention half (qkv, atty, lse, res2), the MLP half (Note [MLP half]): its pre-activation fch and its
// GELU output fch_gelu (Note [rebuilt GELU]).
enum BlockPart : unsigned {
  kPartNorms = 1,
  kPartCore = 2,
  kPartFc = 4,
  kPartGelu = 8,
  kPartMlp = kPartFc | kPartGelu,
  kPartAttention = kPartNorms | kPartCore,
  kPartAll = kPartNorms | kPartCore | kPartMlp
};
// The tensors of a block's activations in the given parts (names without the "h.<l>." prefix), in forward order.
std::vector<TensorRequest> gpt_block_activations(const GptConfig& cfg, int batch, DType compute,
                                                 unsigned parts = kPartAll);

// Every other tensor the model computes with, by role: the inputs, the activations outside the blocks (encoded,
// each block's output res3, lnf and its statistics, losses), and the workspace (the LM head's logits chunk, the
// backward's scratch).
std::vector<TensorRequest> gpt_fixed_tensors(const GptConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows);

// The activations a block saves for its backward.
struct BlockActs {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, res3;
  // The member named `name` (as gpt_block_activations names them, or "res3"); nullptr for an unknown name.
  Tensor* slot(const std::string& name);
};

// Views of every tensor the model computes with, placed by the executor. params[s] and grads[s] are segment s's
// compute copy and gradients (Note [gradient segments]); the views must stay valid while the model runs.
struct GptTensors {
  std::vector<Tensor> params, grads;  // [segment]
  std::vector<BlockActs> acts;        // [layer]
  Tensor tokens, targets, encoded, lnf, lnf_mean, lnf_rstd, logits, losses;
  Tensor xent_stats;  // [3, LM chunk rows] with split_vocab (Note [vocabulary-parallel cross-entropy]), else unbound
  Tensor proj_out, dresidual, dln, datty, dqkv, dfch;
  // The member a tensor of gpt_fixed_tensors or gpt_block_activations is bound to, by its name ("tokens",
  // "h.3.qkv"); nullptr for an unknown name.
  Tensor* slot(const std::string& name);
};

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
struct GptDecodeState {
  Tensor cache;                      // [L, T, 3C] compute dtype
  Tensor token, pos;                 // [1] i32: the token decode_step reads and its position (< T)
  Tensor qkv;                        // [1, 3C] the new row of a block
  Tensor x, res2, ln, atty, proj;    // [1, C] compute dtype
  Tensor fch, fch_gelu;              // [1, 4C]
  Tensor mean, rstd;                 // [1] master dtype
  Tensor logits;                     // [1, padded vocab] compute dtype
  // The member named `name` (as gpt_decode_tensors names them); nullptr for an unknown name.
  Tensor* slot(const std::string& name);
};
std::vector<TensorRequest> gpt_decode_tensors(const GptConfig& cfg, DType compute);

// Note [model and executor]
// The model owns this interface and calls it at every block boundary of a pass; the executor implements it, and
// there waits for copies, starts copies and rebuilds what the plan recomputes. The model calls
// op(name) before every kernel it enqueues (the timeline's compute ops). Segments are those of Note [gradient
// segments]; the LM head is its own boundary.
enum class Boundary { kBeforeForward, kAfterForward, kBeforeHead, kAfterHead, kBeforeBackward, kAfterBackward };
const char* boundary_name(Boundary b);
class GptHooks {
 public:
  virtual ~GptHooks() = default;
  virtual void at(Boundary b, int segment) = 0;
  virtual void op(const char* name) { (void)name; }
  // Note [tensor parallel]: t summed over the model's tensor-parallel ranks, in place, in the compute stream's order;
  // called only when the model's tp > 1 (a hook that has no such ranks refuses).
  virtual void tp_sum(const char* name, const Tensor& t);
  // The element-wise maximum over the same ranks (Note [vocabulary-parallel cross-entropy]).
  virtual void tp_max(const char* name, const Tensor& t);
};

// Note [kernel calls]
// The backend calls of one piece of a pass, in the order the model enqueues them, each with the name it announces
// through GptHooks::op: what the performance model prices (perf/profile.h) and the calibration times. A test runs
// the model and checks the names and their order against these lists, so they cannot drift from the passes.
enum class GptPiece {
  kForward,           // segment s's forward (0: embedding, 1 + l: block l, L + 1: final LayerNorm)
  kBackward,          // segment s's backward
  kHead,              // the LM head, evaluating (losses only)
  kHeadWithBackward,  // the LM head, training
  kRebuildBlock,      // Note [recompute]: block `segment - 1`'s forward again
  kRebuildNorms,      // Note [rebuilt norms]
  kRebuildMlp,        // Note [MLP half]
  kRebuildGelu,       // Note [rebuilt GELU]
  kForwardGeluApart,  // block `segment - 1`'s forward with its GELU as a kernel of its own (Note [rebuilt GELU])
};
struct NamedKernelCall {
  std::string name;
  KernelCall call;
};
// lm_chunk_rows: as the run's logits buffer (0: the model's default).
std::vector<NamedKernelCall> gpt_kernel_calls(const GptConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows,
                                              GptPiece piece, int segment);
// Note [tensor parallel]: the bytes of each sum or maximum over the model's ranks (GptHooks::tp_sum, tp_max) one
// piece runs, in order (none with tp 1): what the performance model prices beside the piece's kernels (Note
// [pricing collectives] in perf/costs.cc). Tested against the passes as the kernel calls are.
std::vector<int64_t> gpt_tp_collectives(const GptConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows,
                                        GptPiece piece, int segment);

class Gpt {
 public:
  // The tensors must match what the functions above request for (cfg, batch, compute); checked.
  Gpt(Backend& backend, const GptConfig& cfg, int batch, DType compute, GptTensors tensors);
  // The passes and the pieces are virtual so that a test model with the same tensors can stand in for the GPT's
  // kernels (tests/exec/executor_test.cc: the executor on its own).
  virtual ~Gpt() = default;

  const GptConfig& config() const { return cfg_; }
  // Note [tensor parallel]: this rank's place along the model dimension (0 by default); rank 0 adds the row-parallel
  // projections' biases.
  void set_tp_rank(int rank) { tp_rank_ = rank; }
  int tp_rank() const { return tp_rank_; }
  // Note [rebuilt GELU]: the blocks whose forward runs the MLP's GELU as a kernel of its own (one flag a layer;
  // none by default).
  void set_gelu_apart(std::vector<bool> apart);
  bool gelu_apart(int l) const {
    return static_cast<size_t>(l) < gelu_apart_.size() && gelu_apart_[static_cast<size_t>(l)];
  }
  int batch() const { return batch_; }
  DType dtype() const { return dtype_; }  // compute dtype
  DType master_dtype() const { return master_dtype_for(dtype_); }
  Backend& backend() { return be_; }
  const std::vector<ParamInfo>& params() const { return layout_; }
  const GptSegments& segments() const { return segs_; }
  int num_segments() const { return segs_.count(); }
  int64_t num_params() const { return num_params_; }
  const GptTensors& tensors() const { return t_; }
  Tensor tokens() const { return t_.tokens; }    // [B, T] i32 device input
  Tensor targets() const { return t_.targets; }  // [B, T] i32 device input
  Tensor losses() const { return t_.losses; }    // [B, T] per-position loss after the LM head
  // Parameter i's compute copy and gradient (views into their segments).
  Tensor cparam(size_t i) const;
  Tensor grad(size_t i) const;

  // --- passes, enqueued on the compute stream, announcing their boundaries ---
  // Embedding (segment 0), the blocks (1 + l), the final LayerNorm (L + 1).
  virtual void forward_blocks(GptHooks& hooks);
  // LM head tied to wte, over chunks of rows (Note [LM head in chunks]): logits, probabilities and losses; with
  // with_backward the probabilities become dlogits in place, whose contributions go to d(lnf) and d(wte).
  virtual void lm_head(GptHooks& hooks, bool with_backward);
  // From d(lnf) (the LM head's) down to the embedding: the final LayerNorm (L + 1), blocks L-1 .. 0, the embedding
  // (0). With lm_head's backward before it, it writes every gradient (Note [gradients first written] in
  // backend/backend.h): nothing zeroes them, and a second backward would overwrite, not add to, the first's.
  virtual void backward_blocks(GptHooks& hooks);

  // --- pieces of the forward the executor calls to rebuild what it did not keep ---
  // Block l's whole forward from its input (Note [recompute]); it rewrites res3 with the same bits.
  virtual void forward_block(GptHooks& hooks, int l);
  // Note [rebuilt norms]: ln2 from res2, then ln1 from the block's input.
  virtual void rebuild_norms(GptHooks& hooks, int l);
  // Note [MLP half]: fch and fch_gelu from ln2 with the forward's kernel.
  virtual void rebuild_mlp(GptHooks& hooks, int l);
  // Note [rebuilt GELU]: fch_gelu from fch with the forward's kernel (the block's GELU is apart).
  virtual void rebuild_gelu(GptHooks& hooks, int l);
  // logits [B*T, padded_vocab] of the last forward into out (tests and sampling).
  void compute_logits(const Tensor& out);

  // --- Note [KV cache]: a model of batch 1 and tp 1 only ---
  // After forward_blocks over a context of n positions: their qkv rows into s.cache, the logits of position n - 1
  // into s.logits.
  void decode_prefill(const GptDecodeState& s, int n);
  // The token in s.token at the position in s.pos (read when the step runs), s.cache holding the positions before
  // it: its qkv rows into the cache, its logits into s.logits. Enqueues only (capture() may record it).
  void decode_step(const GptDecodeState& s);

  // Initial parameter values, on the host (normal(0, 0.02); residual projections 0.02/sqrt(2L); biases 0;
  // LayerNorm weights 1): each a function of the seed and its flat index, drawn in parallel (Note [parallel init]).
  static void init_values(const GptConfig& cfg, uint64_t seed, float* out);
  static void init_values(const GptConfig& cfg, uint64_t seed, double* out);

 private:
  struct LayerParams {
    Tensor ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  LayerParams compute_layer(int layer) const;
  LayerParams grad_layer(int layer) const;
  Tensor block_input(int l) const { return l == 0 ? t_.encoded : t_.acts[static_cast<size_t>(l) - 1].res3; }
  // wte and wpe (in the other order with split_vocab: gpt_param_layout); the token of wte's first row.
  Tensor wte() const { return cparam(wte_index_); }
  Tensor wpe() const { return cparam(wte_index_ ^ 1); }
  int64_t vocab_begin() const { return cfg_.split_vocab ? int64_t(tp_rank_) * cfg_.local_vocab() : 0; }
  void backward_block(GptHooks& hooks, int l);

  Backend& be_;
  GptConfig cfg_;
  int batch_;
  DType dtype_;
  std::vector<ParamInfo> layout_;
  GptSegments segs_;
  int64_t num_params_ = 0;
  GptTensors t_;
  int64_t lm_chunk_rows_ = 0;
  int tp_rank_ = 0;
  std::vector<bool> gelu_apart_;
  size_t wte_index_ = 0;
  std::vector<std::array<size_t, 12>> layer_index_;  // [layer] the indices of its 12 parameters, in LayerParams order
};

}  // namespace tt
