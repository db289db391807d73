// model/model: what the rest of the system knows of a model, whatever its family. A model is a description (its
// configuration, parameters, segments, activations by part, kernel calls per piece, tensor-parallel collectives,
// shards, initial values) and an implementation of its passes on views it is handed. The executor, the schedule
// compiler, the performance model, the mesh, checkpoints and sampling read only this file; each family (model/gpt.h,
// model/llama.h) implements it in one file of its own and is listed once in model/model.cc (Note [model families]).
//
//   const ModelConfig cfg = ...;                          // family "gpt2" or "llama", sizes, options
//   std::vector<ParamInfo> layout = model_param_layout(cfg);
//   std::unique_ptr<Model> m = create_model(backend, cfg, batch, DType::kBF16, tensors);  // views placed elsewhere
//   m->forward_blocks(hooks); m->lm_head(hooks, true); m->backward_blocks(hooks);
//
// Note [model families]
// A family is a class derived from ModelFamily (the description, by configuration) and one derived from Model (the
// math), in model/<family>.{h,cc}, plus the backend kernels it calls. The two share a contract with the executor:
// - parameters in one flat buffer, in segments: segment 0 the parameters before the first block (layer -1), segment
//   1 + l block l's (layer l, contiguous), segment L + 1 those after the last block (layer -1 again); with tp > 1 a
//   segment lists its replicated parameters, then its sharded ones (Note [tensor parallel]);
// - a block's saved activations cut into the four parts of BlockPart (the plans keep, swap or rebuild each part), the
//   block's output "h.<l>.res3" kept by every block (its successor's input; it is dead after the successor's
//   backward), the other tensors named by the family (model_fixed_tensors), allocated in the order listed, the
//   head's marked (TensorRequest::head); the names "tokens", "targets" and "losses" are required;
// - the boundaries of ModelHooks announced in order, every kernel announced through ModelHooks::op as listed by
//   model_kernel_calls (a test runs each family against its lists);
// - decoding (Note [KV cache]) with "decode.token", "decode.pos" and "decode.logits" among its tensors.
// The guide's "Adding a model family" lists the steps.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backend/backend.h"
#include "backend/kernel_call.h"

namespace tt {

// Llama 3's rescaling of the rotary frequencies for long contexts (Hugging Face "rope_type": "llama3"); factor 0:
// none.
struct RopeScaling {
  double factor = 0, low_freq_factor = 1, high_freq_factor = 4;
  int original_max_position = 8192;
  bool operator==(const RopeScaling&) const = default;
};

// The configuration of a decoder-only language model of any family. Fields a family does not use keep their
// defaults (checked by its validate()).
struct ModelConfig {
  std::string family = "gpt2";  // a name of model_families()
  int vocab = 256;
  int layers = 4;
  int dim = 128;
  int heads = 4;
  int seq = 128;       // the longest sequence (GPT-2: rows of wpe)
  int kv_heads = 0;    // grouped-query attention: key/value heads (0: as many as heads)
  int ffn = 0;         // the MLP's hidden width (0: the family's default)
  bool tied_embeddings = true;  // the LM head is the token embedding (else a matrix of its own)
  bool qkv_bias = false;        // Llama family: biases on Q, K and V (Qwen2)
  double rope_theta = 10000.0;  // Llama family: the rotary embedding's base
  RopeScaling rope_scaling = {};
  double norm_eps = 1e-5;       // the normalisations' epsilon
  // Note [tensor parallel]: how many ways the blocks are split over tensor-parallel ranks (their heads and the MLP's
  // hidden width; 1: not split). Every size the functions below give (parameters, activations, kernel calls) is then
  // one rank's; heads stays the whole model's.
  int tp = 1;
  // With tp > 1: the vocabulary too (the embedding's rows, the LM head's columns; Note [vocabulary-parallel
  // cross-entropy]).
  bool split_vocab = false;

  bool operator==(const ModelConfig&) const = default;
  Status validate() const;  // the family's checks (unknown family: an error naming the known ones)
  int kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  int head_dim() const { return dim / heads; }
  // Rows of the token embedding and columns of the logits: vocab rounded up to a multiple of 128, so that the LM
  // head's GEMMs have aligned leading dimensions (50257 -> 50304, as llm.c does). The padding rows start at zero, never
  // receive a gradient and take no part in the softmax.
  int padded_vocab() const { return (vocab + 127) / 128 * 128; }
  // The LM head's columns on one rank.
  int local_vocab() const { return split_vocab ? padded_vocab() / tp : padded_vocab(); }
  // The same model on one rank (tp = 1): the layout checkpoints and initial values use.
  ModelConfig whole() const {
    ModelConfig c = *this;
    c.tp = 1;
    c.split_vocab = false;
    return c;
  }
  // "GPT-2 L12 d768 H12 T1024 V50257" and the family's options.
  std::string describe() const;
};
// The configuration as JSON (checkpoints, schedules, run records): the family, vocab, layers, dim, heads, seq, the
// options of families other than gpt2, tp and split_vocab when split.
nlohmann::json model_config_json(const ModelConfig& cfg);
// Its inverse, strict: every key of the right type and range (an error names `where` and the key), unknown keys
// refused, the result validated. A configuration without "family" is GPT-2's (files written before families).
Result<ModelConfig> model_config_from_json(const nlohmann::json& j, const std::string& where);

struct ParamInfo {
  std::string name;  // e.g. "h.3.attn.qkv.w"
  Shape shape;
  int64_t offset = 0;  // in elements, within the flat buffer
  bool decay = false;  // weight decay applies (matrices and embeddings)
  int layer = -1;      // block index, -1 for the parameters before and after the blocks
  bool sharded = false;  // split over the tensor-parallel ranks (Note [tensor parallel]); else the same on each
  // How it splits over tensor-parallel ranks (whether or not it is split in this layout): the whole model's blocks of
  // rows, each cut evenly in rank order (Q, K and V's rows: three blocks); empty: its columns are cut instead.
  std::vector<int64_t> row_blocks;
};

// Note [gradient segments]
// Parameters, their compute copies and their gradients are cut into segments: 0 the parameters before the blocks,
// 1 + l block l, L + 1 those after; segment s covers flat elements [offset[s], offset[s] + size[s]). Each segment is
// one tensor, which the executor may place anywhere (its own buffer, a shared slot, a host copy). The global gradient
// norm is the sum in segment order of each segment's sum of squares (Backend::sum_in_order), so it does not depend
// on where the gradients are.
struct ParamSegments {
  std::vector<int64_t> offset, size;  // [segment] in flat elements
  // [segment] where its sharded parameters begin (offset + size: none); Note [tensor parallel]: with tp > 1 the
  // gradient norm sums each segment's two parts apart, the sharded one over the ranks.
  std::vector<int64_t> shard_begin;
  std::vector<int> of_param;          // [parameter index] its segment
  int count() const { return static_cast<int>(offset.size()); }
};
// The most elements of a segment of n that one of `ranks` ranks holds when it is split evenly in rank order (Note
// [sharded optimizer] in exec/optimizer.h): ceil(n / ranks); the last ranks may hold fewer.
inline int64_t segment_share(int64_t n, int ranks) { return (n + ranks - 1) / ranks; }

// Note [mixed precision]
// A model has a compute dtype (activations and the weights the kernels read: f32, f64 or bf16) and a master dtype
// (parameters as the optimizer keeps them, their gradients, normalisation statistics and losses): fp32 when computing
// in bf16, the compute dtype otherwise. With bf16 compute a bf16 copy of the parameters sits beside the fp32 master;
// every change of the master (upload, optimizer step) refreshes the copy.
DType master_dtype_for(DType compute);

// One tensor the model needs.
struct TensorRequest {
  std::string name;
  Shape shape;
  DType dtype;
  TensorClass cls;
  int layer = -1;
  // A tensor of the head (Note [head in gradients] in exec/executor.h): written from the last block's output on and
  // read last by the backward of segment L + 1, before any block's backward (the final norm's output and statistics,
  // the logits chunk).
  bool head = false;
};

// The parts of one block's saved activations (all but its output, which every block keeps: its successor's input).
// The executor may keep them apart (plan/plan.h): the normalisations' outputs and statistics (Note [rebuilt norms]),
// the rest of the attention half, the MLP half (Note [MLP half]): its pre-activation (kPartFc) and its activation's
// output (kPartAct: GELU, SwiGLU; Note [rebuilt activation]).
enum BlockPart : unsigned {
  kPartNorms = 1,
  kPartCore = 2,
  kPartFc = 4,
  kPartAct = 8,
  kPartMlp = kPartFc | kPartAct,
  kPartAttention = kPartNorms | kPartCore,
  kPartAll = kPartNorms | kPartCore | kPartMlp
};

// Tensors by name: what the executor placed for a model, or a decoder's state.
using NamedTensors = std::map<std::string, Tensor>;

// Views of every tensor a model computes with, placed by the executor. params[s] and grads[s] are segment s's
// compute copy and gradients (Note [gradient segments]); `named` holds every tensor of model_fixed_tensors and each
// block's activations as "h.<l>.<name>". The views must stay valid while the model runs.
struct ModelTensors {
  std::vector<Tensor> params, grads;  // [segment]
  NamedTensors named;
};

// Note [model and executor]
// The model owns this interface and calls it at every block boundary of a pass; the executor implements it, and
// there waits for copies, starts copies and rebuilds what the plan recomputes. The model calls
// op(name) before every kernel it enqueues (the timeline's compute ops). Segments are those of Note [gradient
// segments]; the LM head is its own boundary.
enum class Boundary { kBeforeForward, kAfterForward, kBeforeHead, kAfterHead, kBeforeBackward, kAfterBackward };
const char* boundary_name(Boundary b);
class ModelHooks {
 public:
  virtual ~ModelHooks() = default;
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
// through ModelHooks::op: what the performance model prices (perf/profile.h) and the calibration times. A test runs
// each family's model and checks the names and their order against these lists, so they cannot drift from the passes.
enum class ModelPiece {
  kForward,           // segment s's forward (0: before the blocks, 1 + l: block l, L + 1: after them)
  kBackward,          // segment s's backward
  kHead,              // the LM head, evaluating (losses only)
  kHeadWithBackward,  // the LM head, training
  kRebuildBlock,      // Note [recompute]: block `segment - 1`'s forward again
  kRebuildNorms,      // Note [rebuilt norms]
  kRebuildMlp,        // Note [MLP half]
  kRebuildAct,        // Note [rebuilt activation]
  kForwardActApart,   // block `segment - 1`'s forward with its activation as a kernel of its own
};
struct NamedKernelCall {
  std::string name;
  KernelCall call;
};

class Model;

// Note [Hugging Face layout]
// How a family's parameters are stored in a Hugging Face model folder (transformers' own classes for the family):
// each of our parameters is one or more of their tensors, each holding a run of our parameter's rows (rows of a
// [out, in] matrix, or elements of a vector), maybe transposed (GPT-2's Conv1D stores [in, out]). Rows of ours that no
// tensor holds (the vocabulary's padding rows) are zero. The folder's config.json says the family and its sizes.
struct HfTensor {
  std::string name;             // "model.layers.3.self_attn.k_proj.weight"
  std::vector<int64_t> shape;   // as stored there
  int64_t row0 = 0, rows = 0;   // the rows of our parameter it holds
  bool transposed = false;
  // The stored tensor may have more rows than these (only the first `rows` read): GPT-2's positions beyond --seq.
  bool more_rows_ok = false;
};
struct HfParam {
  std::string param;  // ours
  std::vector<HfTensor> tensors;
};
// The keys of one JSON object, read strictly (a Hugging Face config.json, the model of a checkpoint or schedule):
// each error names the file, the key, what it holds and what was expected. A key that is absent or null is missing.
class JsonKeys {
 public:
  // prefix: how keys are named in errors ("model." gives model.dim; none gives "hidden_size").
  JsonKeys(const nlohmann::json& j, std::string where, std::string prefix = "")
      : j_(j), where_(std::move(where)), prefix_(std::move(prefix)) {}
  bool has(const char* key) const;
  // An integer in [lo, hi]; missing: an error when required, else out unchanged.
  Status integer_in(const char* key, int lo, int hi, bool required, int* out) const;
  Status integer(const char* key, int* out) const { return integer_in(key, 1, 1 << 30, true, out); }
  Status optional_integer(const char* key, int* out) const { return integer_in(key, 0, 1 << 30, false, out); }
  Status number(const char* key, double* out) const;       // optional, finite and > 0
  Status boolean(const char* key, bool* out) const;        // optional
  Status string(const char* key, std::string* out) const;  // optional
  // The key (or `absent` when it is missing) must be one of `allowed`.
  Status one_of(const char* key, std::initializer_list<const char*> allowed, const char* absent) const;
  // The key (or `absent`) must equal `want` (a setting this family does not have otherwise).
  Status number_equal(const char* key, double want, double absent) const;
  Status boolean_equal(const char* key, bool want, bool absent) const;

 private:
  std::string name(const char* key) const { return prefix_.empty() ? "\"" + std::string(key) + "\"" : prefix_ + key; }
  const nlohmann::json& j_;
  std::string where_, prefix_;
};

// The copies between the whole model's flat buffer (tp = 1 layout, what checkpoints and initial values use) and one
// rank's: element ranges [whole, whole + count) -> [local, local + count).
struct ShardCopy {
  int64_t whole = 0, local = 0, count = 0;
};

// A family's description (Note [model families]). Every function is of a validated configuration.
class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual const char* name() const = 0;     // "gpt2"
  virtual const char* display() const = 0;  // "GPT-2"
  virtual const char* summary() const = 0;  // what --family's help says of it
  virtual Status validate(const ModelConfig& cfg) const = 0;
  // The MLP's hidden width (what tensor parallelism splits beside the heads).
  virtual int ffn(const ModelConfig& cfg) const = 0;
  virtual std::vector<ParamInfo> param_layout(const ModelConfig& cfg) const = 0;
  virtual std::vector<TensorRequest> block_activations(const ModelConfig& cfg, int batch, DType compute,
                                                       unsigned parts) const = 0;
  virtual std::vector<TensorRequest> fixed_tensors(const ModelConfig& cfg, int batch, DType compute,
                                                   int64_t lm_chunk_rows) const = 0;
  virtual std::vector<TensorRequest> decode_tensors(const ModelConfig& cfg, DType compute) const = 0;
  virtual std::vector<NamedKernelCall> kernel_calls(const ModelConfig& cfg, int batch, DType compute,
                                                    int64_t lm_chunk_rows, ModelPiece piece, int segment) const = 0;
  virtual std::vector<int64_t> tp_collectives(const ModelConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows,
                                              ModelPiece piece, int segment) const = 0;
  // Initial values of the whole model (tp 1), a function of the seed and each element's flat index.
  virtual void init_values(const ModelConfig& cfg, uint64_t seed, float* out) const = 0;
  virtual void init_values(const ModelConfig& cfg, uint64_t seed, double* out) const = 0;
  virtual std::unique_ptr<Model> create(Backend& backend, const ModelConfig& cfg, int batch, DType compute,
                                        ModelTensors tensors) const = 0;
  // Note [Hugging Face layout]: the whole model's (tp 1) tensors there, in our parameters' order.
  virtual std::vector<HfParam> hf_tensors(const ModelConfig& cfg) const = 0;
  // The folder's config.json for this configuration (what transformers reads).
  virtual nlohmann::json hf_config(const ModelConfig& cfg) const = 0;
  // Whether a config.json of this "model_type" is this family's, and the configuration it describes for training on
  // sequences of `seq` (a setting this family cannot run is an error naming the key). `where` names the file.
  virtual bool reads_hf_model_type(const std::string& model_type) const = 0;
  virtual Result<ModelConfig> from_hf_config(const nlohmann::json& j, int seq, const std::string& where) const = 0;
};

// The families of this build, and the one a configuration names (it must be known: ModelConfig::validate).
const std::vector<const ModelFamily*>& model_families();
const ModelFamily& family_of(const ModelConfig& cfg);

// Note [Hugging Face layout]: the family's tensors and config.json, and the configuration a config.json describes
// (its "model_type" picks the family; an unknown one is an error naming the known ones).
std::vector<HfParam> model_hf_tensors(const ModelConfig& cfg);
nlohmann::json model_hf_config(const ModelConfig& cfg);
Result<ModelConfig> model_config_from_hf(const nlohmann::json& j, int seq, const std::string& where);
// The MLP's hidden width of the configuration's family.
int model_ffn(const ModelConfig& cfg);
// The parameters in flat-buffer order (Note [model families]).
std::vector<ParamInfo> model_param_layout(const ModelConfig& cfg);
int64_t model_num_params(const ModelConfig& cfg);
ParamSegments model_segments(const ModelConfig& cfg);
// Whether segment 0's gradients (the token embedding's, and the GPT's positions') are written by the backward's last
// operation alone, the embedding's backward: where the LM head has a matrix of its own. Then they may live in the
// dead activations of every block (Note [gradients in dead activations] in plan/schedule.h).
bool model_embedding_grads_last(const ModelConfig& cfg);
// The tensors of a block's activations in the given parts (names without the "h.<l>." prefix), in forward order.
std::vector<TensorRequest> model_block_activations(const ModelConfig& cfg, int batch, DType compute,
                                                   unsigned parts = kPartAll);
// Every other tensor the model computes with, in allocation order: the inputs, the activations outside the blocks
// (each block's output "h.<l>.res3" with its layer), the LM head's chunk of logits, the losses, the scratch.
std::vector<TensorRequest> model_fixed_tensors(const ModelConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows);
// Those of block l (its layer): its output, read last by the next block's backward (by the final norm's for the
// last block), before block l's own; so it may lie in block l's activation set (Note [gradients in dead activations]).
std::vector<TensorRequest> model_block_fixed_tensors(const ModelConfig& cfg, int batch, DType compute, int l);
std::vector<TensorRequest> model_decode_tensors(const ModelConfig& cfg, DType compute);
// lm_chunk_rows: as the run's logits buffer (0: the model's default).
std::vector<NamedKernelCall> model_kernel_calls(const ModelConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows,
                                                ModelPiece piece, int segment);
// Note [tensor parallel]: the bytes of each sum or maximum over the model's ranks (ModelHooks::tp_sum, tp_max) one
// piece runs, in order (none with tp 1): what the performance model prices beside the piece's kernels (Note
// [pricing collectives] in perf/costs.cc). Tested against the passes as the kernel calls are.
std::vector<int64_t> model_tp_collectives(const ModelConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows,
                                          ModelPiece piece, int segment);
void model_init_values(const ModelConfig& cfg, uint64_t seed, float* out);
void model_init_values(const ModelConfig& cfg, uint64_t seed, double* out);
std::unique_ptr<Model> create_model(Backend& backend, const ModelConfig& cfg, int batch, DType compute,
                                    ModelTensors tensors);

// Note [LM head in chunks]
// The logits of all B*T positions (B*T*V values: 1.6 GB in bf16 for GPT-2 at batch 16) are never materialised: the
// LM head runs over chunks of rows, each chunk's logits turned into losses and, when training, at once into the
// gradients of the final normalisation's output and of the head's matrix, in one buffer of lm_chunk_rows x
// padded_vocab. Each chunk adds its part of the head's gradient (V x C, f32) once, so small chunks read and write that
// gradient many times, and larger chunks make a faster step (docs/benchmarks/2026-12-02-h200-engine-same-call/). The
// default is at most 512 MiB of logits, in equal chunks of a multiple of 64 rows (`--lm-chunk-rows` sets it).
int64_t model_default_lm_chunk_rows(const ModelConfig& cfg, int batch, DType compute);

std::vector<ShardCopy> model_shard_copies(const ModelConfig& cfg, int tp_rank);
// A rank's flat buffer from the whole model's, and back, for elements of `esize` bytes.
void model_take_shard(const ModelConfig& cfg, int tp_rank, const void* whole, void* local, size_t esize);
void model_put_shard(const ModelConfig& cfg, int tp_rank, const void* local, void* whole, size_t esize);

// Note [tensor parallel]: the sums and maxima of a decoder whose blocks are Megatron's column- then row-parallel
// pairs (attention, MLP): one sum after each pair's forward and one of each pair's input gradient in the backward; with
// split_vocab the embedding's rows and the head's steps (Note [vocabulary-parallel cross-entropy]). GPT-2's and the
// Llama family's lists.
std::vector<int64_t> decoder_tp_collectives(const ModelConfig& cfg, int batch, DType compute, int64_t lm_chunk_rows,
                                            ModelPiece piece, int segment);
// The LM head's kernel calls (Model::run_lm_head), appended.
void append_head_kernel_calls(std::vector<NamedKernelCall>& r, const ModelConfig& cfg, int batch, DType compute,
                              int64_t lm_chunk_rows, bool train);

// A model's math over the views it was handed (Note [model and executor]). The passes and the pieces are virtual:
// each family implements them, and a test model with a family's tensors can stand in for its kernels
// (tests/exec/executor_test.cc: the executor on its own).
class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ModelFamily& family() const { return family_; }
  // Note [tensor parallel]: this rank's place along the model dimension (0 by default).
  void set_tp_rank(int rank) { tp_rank_ = rank; }
  int tp_rank() const { return tp_rank_; }
  // Note [rebuilt activation]: the blocks whose forward runs the MLP's activation as a kernel of its own (one flag a
  // layer; none by default).
  void set_act_apart(std::vector<bool> apart);
  bool act_apart(int l) const {
    return static_cast<size_t>(l) < act_apart_.size() && act_apart_[static_cast<size_t>(l)];
  }
  // Note [loss mask] (data/dataset.h): the gradient of the loss for each target that counts: 1 / (B x T) by default
  // (a negative scale), else the scale given (1 / the targets that count, times the data-parallel ranks whose
  // gradients are averaged). Read when the LM head's kernels are enqueued: set it for each batch before its pass.
  void set_loss_scale(float dloss) { loss_scale_ = dloss; }
  // Note [gradient accumulation] (exec/executor.h): while set, the backward adds to every parameter gradient instead
  // of writing it first (the micro-batches after a step's first); how a gradient's first write is done, either way.
  void set_accumulate_grads(bool on) { accumulate_grads_ = on; }
  bool accumulate_grads() const { return accumulate_grads_; }
  GradWrite first_write() const { return accumulate_grads_ ? GradWrite::kAccumulate : GradWrite::kOverwrite; }
  // Note [gradients summed on the host] (plan/schedule.h): blocks whose gradients go through a slot that other
  // blocks reuse are summed on the host, so their backward always writes them first; block l's first write.
  void set_blocks_summed_elsewhere(std::vector<char> blocks) { summed_elsewhere_ = std::move(blocks); }
  GradWrite block_first_write(int l) const {
    const bool apart = static_cast<size_t>(l) < summed_elsewhere_.size() && summed_elsewhere_[static_cast<size_t>(l)];
    return apart ? GradWrite::kOverwrite : first_write();
  }
  int batch() const { return batch_; }
  DType dtype() const { return dtype_; }  // compute dtype
  DType master_dtype() const { return master_dtype_for(dtype_); }
  Backend& backend() { return be_; }
  const std::vector<ParamInfo>& params() const { return layout_; }
  const ParamSegments& segments() const { return segs_; }
  int num_segments() const { return segs_.count(); }
  int64_t num_params() const { return num_params_; }
  const ModelTensors& tensors() const { return t_; }
  // A tensor of model_fixed_tensors or a block's ("h.3.qkv"); checked to exist.
  const Tensor& tensor(const std::string& name) const;
  Tensor tokens() const { return tensor("tokens"); }    // [B, T] i32 device input
  Tensor targets() const { return tensor("targets"); }  // [B, T] i32 device input
  Tensor losses() const { return tensor("losses"); }    // [B, T] per-position loss after the LM head
  // Parameter i's compute copy and gradient (views into their segments).
  Tensor cparam(size_t i) const;
  Tensor grad(size_t i) const;
  // The index of the parameter named `name`; checked to exist.
  size_t param_index(const std::string& name) const;

  // --- passes, enqueued on the compute stream, announcing their boundaries ---
  // Segment 0 (the embedding), the blocks (1 + l), segment L + 1 (the final normalisation).
  virtual void forward_blocks(ModelHooks& hooks) = 0;
  // The LM head over chunks of rows (Note [LM head in chunks]): logits, probabilities and losses; with with_backward
  // the probabilities become dlogits in place, whose contributions go to the final normalisation's output and the
  // head's matrix.
  virtual void lm_head(ModelHooks& hooks, bool with_backward) = 0;
  // From the LM head's gradient down to the embedding: segment L + 1, blocks L-1 .. 0, segment 0. With lm_head's
  // backward before it, it writes every gradient (Note [gradients first written] in backend/backend.h): nothing
  // zeroes them, and a second backward would overwrite, not add to, the first's.
  virtual void backward_blocks(ModelHooks& hooks) = 0;

  // --- pieces of the forward the executor calls to rebuild what it did not keep ---
  // Block l's whole forward from its input (Note [recompute]); it rewrites res3 with the same bits.
  virtual void forward_block(ModelHooks& hooks, int l) = 0;
  // Note [rebuilt norms]: the block's normalisations from their inputs.
  virtual void rebuild_norms(ModelHooks& hooks, int l) = 0;
  // Note [MLP half]: the MLP's pre-activation and activation from its normalised input, with the forward's kernels.
  virtual void rebuild_mlp(ModelHooks& hooks, int l) = 0;
  // Note [rebuilt activation]: the activation from the pre-activation with the kernel the block's forward ran (the
  // block's activation is apart).
  virtual void rebuild_act(ModelHooks& hooks, int l) = 0;
  // The logits of rows [row_begin, row_begin + rows) of the last forward's B*T positions into out [rows,
  // padded_vocab] (tests, sampling, eval --logits-out); compute_logits: all B*T of them.
  virtual void compute_logits_rows(const Tensor& out, int64_t row_begin) = 0;
  void compute_logits(const Tensor& out) { compute_logits_rows(out, 0); }

  // --- Note [KV cache]: a model of batch 1 and tp 1 only; `state` holds model_decode_tensors ---
  // After forward_blocks over a context of n positions: their keys and values into the cache, the logits of position
  // n - 1 into "decode.logits".
  virtual void decode_prefill(const NamedTensors& state, int n) = 0;
  // The token in "decode.token" at the position in "decode.pos" (read when the step runs), the cache holding the
  // positions before it: its keys and values into the cache, its logits into "decode.logits". Enqueues only
  // (capture() may record it).
  virtual void decode_step(const NamedTensors& state) = 0;

 protected:
  // The tensors must match what the family requests for (cfg, batch, compute); checked.
  Model(const ModelFamily& family, Backend& backend, const ModelConfig& cfg, int batch, DType compute,
        ModelTensors tensors);
  // Checks that `state` holds the family's decoding tensors, and that this model can decode.
  void check_decodable(const NamedTensors& state) const;
  // The LM head over chunks of rows (Note [LM head in chunks]) with the head's matrix parameter `head` (V or V/tp
  // rows), from lnf [B, T, C]: the losses, and training, d(lnf) into dln and the head's gradient (the first chunk
  // overwrites it, the others add); "logits", "losses", "targets" and with split_vocab "xent_stats" are the bound
  // tensors of those names. Announces its boundary and kernels as append_head_kernel_calls lists them.
  void run_lm_head(ModelHooks& hooks, bool with_backward, const Tensor& lnf, const Tensor& dln, size_t head,
                   int64_t vocab_begin);
  // compute_logits_rows of a head whose matrix is parameter `head`, from lnf [B, T, C].
  void logits_of(const Tensor& out, const Tensor& lnf, size_t head, int64_t row_begin);

  const ModelFamily& family_;
  Backend& be_;
  ModelConfig cfg_;
  int batch_;
  DType dtype_;
  std::vector<ParamInfo> layout_;
  ParamSegments segs_;
  int64_t num_params_ = 0;
  ModelTensors t_;
  int64_t lm_chunk_rows_ = 0;  // rows of the bound "logits"
  int tp_rank_ = 0;
  std::vector<bool> act_apart_;
  float loss_scale_ = -1.0f;  // Note [loss mask]; < 0: 1 / (B x T)
  bool accumulate_grads_ = false;
  std::vector<char> summed_elsewhere_;  // per block (set_blocks_summed_elsewhere)
};

// Note [parallel init]: how one parameter starts: normals of std `std` for its first `normals` elements (-1: all)
// and 0 after them, or, with std 0, the constant.
struct ParamInit {
  double std = 0, constant = 0;
  int64_t normals = -1;
};
// The whole flat buffer of `layout` (n elements) from the seed, each parameter as init(parameter) says.
void init_param_values(const std::vector<ParamInfo>& layout, int64_t n, uint64_t seed,
                       const std::function<ParamInit(const ParamInfo&)>& init, float* out);
void init_param_values(const std::vector<ParamInfo>& layout, int64_t n, uint64_t seed,
                       const std::function<ParamInit(const ParamInfo&)>& init, double* out);

// Checks that t has the shape and dtype of the request (a programming error of the executor otherwise).
void check_tensor(const Tensor& t, const TensorRequest& r);

}  // namespace tt
