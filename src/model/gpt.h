// model/gpt: the reference GPT of DESIGN.md (GPT-2 style, as nanoGPT and llm.c): token + learned position
// embedding, L pre-LN blocks (LayerNorm, causal multi-head attention, residual; LayerNorm, MLP 4d with tanh-GELU,
// residual), final LayerNorm, LM head tied to the token embedding, mean cross-entropy.
//
// All parameters live in one flat buffer laid out layer by layer (wte, wpe, block 0, ..., block L-1, lnf), so that
// a layer's parameters are contiguous (what host streaming will move). Every buffer the model uses is listed by
// allocation_list(); the trainer sums it to check the device budget before allocating anything.
//
//   TT_ASSIGN_OR_RETURN(auto gpt, Gpt::create(backend, cfg, /*batch=*/16, DType::kF32));
//   gpt->init_params(seed);                         // or upload_params(host)
//   backend.copy_h2d(gpt->tokens(), host_tokens, backend.compute_stream());  // and targets()
//   gpt->forward();                                 // losses() holds B*T per-position losses
//   gpt->backward();                                // grads of the mean loss, per segment (grad_segment)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/op_profiler.h"

namespace tt {

struct GptConfig {
  int vocab = 256;
  int layers = 4;
  int dim = 128;
  int heads = 4;
  int seq = 128;  // maximum sequence length (size of wpe)

  Status validate() const;
  bool operator==(const GptConfig&) const = default;
  // Rows of the token embedding and columns of the logits: vocab rounded up to a multiple of 128, so that the LM
  // head's GEMMs have aligned leading dimensions (50257 -> 50304, as llm.c does). The padding rows start at zero, never
  // receive a gradient and take no part in the softmax.
  int padded_vocab() const { return (vocab + 127) / 128 * 128; }
};

struct ParamInfo {
  std::string name;  // e.g. "h.3.attn.qkv.w"
  Shape shape;
  int64_t offset = 0;  // in elements, within the flat buffer
  bool decay = false;  // weight decay applies (matrices and embeddings)
  int layer = -1;      // block index, -1 for embeddings and the final LayerNorm
};

// The parameters in flat-buffer order.
std::vector<ParamInfo> gpt_param_layout(const GptConfig& cfg);
int64_t gpt_num_params(const GptConfig& cfg);

// One device buffer the model needs.
struct AllocRequest {
  std::string name;
  Shape shape;
  DType dtype;
  TensorClass cls;
  int layer = -1;
};

// Note [mixed precision]
// A model has a compute dtype (activations and the weights the kernels read: f32, f64 or bf16) and a master dtype
// (parameters as the optimizer keeps them, their gradients, LayerNorm statistics and losses): fp32 when computing in
// bf16, the compute dtype otherwise. With bf16 compute the model keeps a bf16 copy of the parameters beside the fp32
// master; every change of the master (upload, optimizer step) refreshes the copy.
DType master_dtype_for(DType compute);

// Note [LM head in chunks]
// The logits of all B*T positions (B*T*V values: 1.6 GB in bf16 for GPT-2 at batch 16) are never materialised: the
// LM head runs over chunks of rows, each chunk's logits turned into losses and, when training, at once into the
// gradients of the final LayerNorm's output and of wte, in one buffer of lm_chunk_rows x padded_vocab.

// Where a block keeps its activations (all but its output, which every block keeps: its successor's input).
//  kResident: in its own device buffers.
//  kRecompute (Note [recompute]): in one activation set shared by all recomputed blocks, rebuilt from the block's
//    input right before its backward. The same kernels on the same inputs give the same bits.
//  kSwap (Note [swap]): copied to host memory on the d2h stream right after the block's forward and brought back on
//    the h2d stream for its backward, through swap_slots device slots shared by the swapped blocks.
// Every mix is bit-identical to keeping everything resident.
// Note [MLP half]: a resident or swapped block may also have its MLP half (fch, fch_gelu: 8 of its 15 C per token)
// recomputed: those two live in one set shared by such blocks, and the block's backward rebuilds them from ln2 with
// the forward's kernel (matmul_gelu_forward) before it uses them; the rest of the block (its attention half) stays
// resident or swaps. Swapped blocks then move only their attention half.
// Note [rebuilt norms]: a resident or swapped block may likewise have its LayerNorm outputs (ln1, ln2 and their
// statistics: 2 of its 15 C per token) rebuilt: they live in one set shared by such blocks, and the block's backward
// rebuilds them with layernorm_forward, ln1 from the block's input (which every block keeps) and ln2 from res2,
// before anything reads them. ln2 is made in the forward by residual_layernorm_forward, which normalises the
// residual as rounded and stored, with layernorm_forward's arithmetic: the same bits (tested on both backends).
// A swapped block then moves 5 C per token with its MLP half rebuilt (qkv, atty, res2), not 7: in the forward the
// copies out are what bounds a block on the H200 (docs/benchmarks/2026-11-30-h200x2-ooc-d4096-tight/), and two
// LayerNorms cost little next to moving their outputs.
enum class ActPlacement { kResident, kRecompute, kSwap };
const char* act_placement_name(ActPlacement p);

// How a model keeps its activations.
struct GptOptions {
  int64_t lm_chunk_rows = 0;  // rows per LM-head chunk (Note [LM head in chunks]); 0 chooses
  std::vector<ActPlacement> activations;  // one per block; empty: all resident
  // Note [gradient segments]: per block, whether its gradients are streamed: written into one of two shared device
  // slots during its backward and sent to the host at once (needs the CPU optimizer). Empty: none.
  std::vector<bool> grads_streamed;
  // Note [master on host]: the fp32 master lives in the host pool (the CPU optimizer's); the device keeps only the
  // compute copy, which every change of the master refreshes from a host staging copy (bf16 with bf16 compute,
  // produced on the host; the master itself with f32 compute). Needs an f32 master.
  bool master_on_host = false;
  // Note [streamed parameters]: per block, whether its compute copy lives only in host memory (the host staging copy
  // of Note [master on host]) and is uploaded into one of param_slots shared device slots ahead of its forward and
  // again ahead of its backward. Needs master_on_host. Empty: none.
  std::vector<bool> params_streamed;
  int param_slots = 2;  // >= 2 when any block streams; uploads run param_slots - 1 streamed blocks ahead
  // Device slots of the swapped blocks (>= 2 when any block swaps): a slot freed by one swapped block's backward is
  // refilled at once with the swapped block swap_slots below it, so copies run swap_slots - 1 swapped blocks ahead.
  int swap_slots = 2;
  // Note [MLP half]: per block, whether its MLP half is recomputed (for resident and swapped blocks; a recomputed
  // block rebuilds everything anyway). Swapped blocks must agree. Empty: none.
  std::vector<bool> mlp_recomputed;
  // Note [rebuilt norms]: per block, whether its LayerNorm outputs are rebuilt (resident and swapped blocks). Swapped
  // blocks must agree. Empty: none.
  std::vector<bool> norms_recomputed;

  ActPlacement placement(int layer) const {
    return activations.empty() ? ActPlacement::kResident : activations[static_cast<size_t>(layer)];
  }
  // Whether block `layer` keeps its MLP half in the shared MLP set (Note [MLP half]).
  bool mlp_half_recomputed(int layer) const { return rebuilds(mlp_recomputed, layer); }
  bool any_mlp_half_recomputed() const { return any_rebuilds(mlp_recomputed); }
  // Whether block `layer` keeps its LayerNorm outputs in the shared norms set (Note [rebuilt norms]).
  bool norms_rebuilt(int layer) const { return rebuilds(norms_recomputed, layer); }
  bool any_norms_rebuilt() const { return any_rebuilds(norms_recomputed); }
  // A per-block flag of a part rebuilt apart from the rest (which a recomputed block rebuilds anyway).
  bool rebuilds(const std::vector<bool>& flags, int layer) const {
    return static_cast<size_t>(layer) < flags.size() && flags[static_cast<size_t>(layer)] &&
           placement(layer) != ActPlacement::kRecompute;
  }
  bool any_rebuilds(const std::vector<bool>& flags) const {
    for (size_t l = 0; l < flags.size(); ++l)
      if (rebuilds(flags, static_cast<int>(l))) return true;
    return false;
  }
  bool any(ActPlacement p) const;
  int count(ActPlacement p) const;
  // All blocks placed alike (the CLI shortcuts).
  static GptOptions all(int layers, ActPlacement p, int swap_slots = 2);
};

class Gpt {
 public:
  // Every device buffer a model of this shape and batch needs (parameters, gradients, activations, workspace,
  // inputs), in allocation order. Optimizer state is the optimizer's (model/adamw.h).
  static std::vector<AllocRequest> allocation_list(const GptConfig& cfg, int batch, DType compute,
                                                   const GptOptions& options = {});
  static Result<std::unique_ptr<Gpt>> create(Backend& backend, const GptConfig& cfg, int batch, DType compute,
                                             const GptOptions& options = {});
  // Rows per LM-head chunk: logits of at most 64 MiB, a multiple of 64 rows, at least 64 (or all rows).
  static int64_t default_lm_chunk_rows(const GptConfig& cfg, int batch, DType compute);
  // The tensors of one block's activations other than its output (names without the "h.<l>." prefix), and their
  // bytes as the pool takes them, for any union of its parts: the LayerNorm outputs and statistics (Note [rebuilt
  // norms]), the rest of the attention half (qkv, atty, lse, res2), the MLP half (Note [MLP half]).
  enum Part : unsigned { kNorms = 1, kCore = 2, kMlp = 4, kAttention = kNorms | kCore, kAll = kNorms | kCore | kMlp };
  static std::vector<AllocRequest> block_activations(const GptConfig& cfg, int batch, DType compute,
                                                     unsigned parts = kAll);
  static size_t block_activation_bytes(const GptConfig& cfg, int batch, DType compute, unsigned parts = kAll);
  // The parts block `layer` keeps in its own set or swap slot: all but those it rebuilds.
  static unsigned held_parts(const GptOptions& options, int layer);
  // Host-pool bytes the model takes (swapped activations: one block's worth per layer), as the pool rounds them.
  static size_t host_bytes(const GptConfig& cfg, int batch, DType compute, const GptOptions& options);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return cfg_; }
  int batch() const { return batch_; }
  DType dtype() const { return dtype_; }  // compute dtype
  DType master_dtype() const { return master_of_dtype_; }
  Backend& backend() { return be_; }

  const std::vector<ParamInfo>& params() const { return layout_; }
  int64_t num_params() const { return num_params_; }
  Tensor grad(size_t i) const;
  // The device master (undefined with the master on the host).
  Tensor flat_params() const { return params_; }
  // Note [master on host]: the host master (f32, num_params()) and the host staging of the compute copy (compute
  // dtype; the master itself with f32 compute); nullptr with the master on the device. Whoever changes the master
  // there also writes the staging copy and uploads it into compute_segment() (not for streamed blocks: the model
  // uploads those itself).
  bool master_on_host() const { return h_master_ != nullptr; }
  float* host_master() const { return h_master_; }
  void* host_compute() const { return h_compute_; }
  // Points the host master and staging copy elsewhere (the CPU optimizer's alternating state sets: Note
  // [speculative update] in model/adamw.h); uploads enqueued from now on read the new ones. The model still frees
  // only its own.
  void set_host_copies(float* master, void* compute) {
    h_master_ = master;
    h_compute_ = compute;
  }
  // Note [gradient segments]: gradients (master dtype) live in one device buffer per segment: 0 the embeddings,
  // 1 + l block l, L + 1 the final LayerNorm; segment s covers flat elements [segment_offset(s), + segment_size(s)).
  // A streamed block's segment is a shared slot, valid from its backward until its grads_done hook returns.
  int num_segments() const { return cfg_.layers + 2; }
  int64_t segment_offset(int s) const { return seg_offset_[static_cast<size_t>(s)]; }
  int64_t segment_size(int s) const { return seg_size_[static_cast<size_t>(s)]; }
  Tensor grad_segment(int s) const;
  bool grads_streamed(int s) const { return s >= 1 && s <= cfg_.layers && !options_.grads_streamed.empty() &&
                                            options_.grads_streamed[static_cast<size_t>(s - 1)]; }
  bool params_streamed(int s) const { return s >= 1 && s <= cfg_.layers && !options_.params_streamed.empty() &&
                                             options_.params_streamed[static_cast<size_t>(s - 1)]; }
  // The device compute copy of segment s (the bf16 copy with bf16 compute, else the master itself): its own buffer,
  // or for a streamed block the slot it is uploaded into (valid between its upload and its last use in a pass).
  Tensor compute_segment(int s) const;
  // Enqueues the refresh of the compute copy from the master (no-op without a copy).
  void refresh_compute_params();
  Tensor tokens() const { return tokens_; }    // [B, T] i32 device input
  Tensor targets() const { return targets_; }  // [B, T] i32 device input
  Tensor losses() const { return losses_; }    // [B, T] per-position loss after forward()

  // Initialises parameters on the host from seed (normal(0, 0.02); residual projections 0.02/sqrt(2L); biases 0;
  // LayerNorm weights 1) and uploads them: each value a function of the seed and its flat index,
  // drawn in parallel (Note [parallel init]). Synchronous.
  Status init_params(uint64_t seed);
  // Copies a flat host buffer of num_params() master-dtype values into the master / back, refreshing the compute
  // copy. Synchronous (with the master on the host, waits for every stream first).
  Status upload_params(const void* host);
  Status download_params(void* host);
  // All gradients into a flat host buffer (not with streamed gradients: their slots are reused).
  Status download_grads(void* host);

  // Enqueue the forward pass (tokens -> losses) and the backward pass (gradients of the mean loss, zeroed first)
  // on the compute stream. backward() consumes what the last forward() saved (and computes the LM head's logits
  // again, chunk by chunk, since they are not kept); forward_backward() runs the blocks forward and then backward(),
  // so the LM head's logits are computed once, as a training step wants.
  void forward();
  void backward();
  void forward_backward();
  // Enqueues logits [B*T, padded_vocab] of the last forward() into out (tests and sampling; the training path never
  // materialises them separately).
  void compute_logits(const Tensor& out);
  // Times every op of forward() and backward() when set (nullptr: off).
  void set_profiler(OpProfiler* profiler) { prof_ = profiler; }
  // Called with a parameter segment (0: embeddings, 1 + l: block l, L + 1: final LayerNorm) and a stream right
  // before that stream first reads the segment's parameters in a pass: the compute stream for a resident segment's
  // device copy (before the forward uses it), the h2d stream for a streamed block's host staging copy (before its
  // upload). The CPU optimizer's hook to make that stream wait for the segment's update.
  void set_param_gate(std::function<void(int, Stream&)> gate) { param_gate_ = std::move(gate); }
  // Called with a segment as soon as the backward has written its last gradient (the final LayerNorm first, then
  // blocks L-1 .. 0, the embeddings last): the CPU optimizer's hook to send them to the host at once.
  void set_grads_done(std::function<void(int)> done) { grads_done_ = std::move(done); }

 private:
  struct LayerActs {
    Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, res3;
  };
  struct LayerParams {
    Tensor ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  Gpt(Backend& backend, const GptConfig& cfg, int batch, DType dtype);
  void forward_blocks();   // embedding, blocks, final LayerNorm
  void forward_layer(int l, const Tensor& x);  // block l from its input x
  void lm_head(bool with_backward);  // logits, losses (and dlnf, dwte) chunk by chunk
  void backward_blocks();  // from dlnf (in dln_) down to the embedding
  // Note [swap] hooks.
  void swap_before_forward(int l);
  void swap_after_forward(int l);
  void swap_before_backward(int l);
  void swap_after_backward(int l);
  void mark(const char* op) {
    if (prof_) prof_->mark(op);
  }
  int span_begin(Stream& s, const char* name, int64_t bytes) { return prof_ ? prof_->span_begin(s, name, bytes) : -1; }
  void gate(int segment, Stream& reader) {
    if (param_gate_) param_gate_(segment, reader);
  }
  // Note [streamed parameters] hooks.
  void params_forward_start();
  void params_upload(int k);  // streamed block k (in streamed_params_ order) into its slot
  void params_before_use(int l);
  void params_after_forward(int l);
  void params_after_backward(int l);
  Tensor cparam(size_t i) const;  // parameter i's compute copy on the device
  LayerParams compute_layer(int layer) const;
  void grads_done(int segment) {
    if (grads_done_) grads_done_(segment);
  }
  void span_end(Stream& s, int id) {
    if (prof_) prof_->span_end(s, id);
  }

  Backend& be_;
  GptConfig cfg_;
  int batch_;
  DType dtype_;
  std::vector<ParamInfo> layout_;
  std::vector<Tensor> owned_;  // everything allocated from the pool, freed in the destructor
  DType master_of_dtype_;
  int64_t num_params_ = 0;
  Tensor params_, params_c_, tokens_, targets_, losses_;
  std::vector<Tensor> param_segs_;  // [segment] device compute copy; undefined for streamed blocks
  // Note [streamed parameters]: the streamed blocks, ascending; [layer] their index in it or -1; the slots; events.
  std::vector<int> streamed_params_, pstream_index_;
  std::vector<Tensor> param_slots_mem_;
  std::vector<std::unique_ptr<Event>> pslot_free_;  // [slot] the compute stream is done with its contents
  std::vector<std::unique_ptr<Event>> param_in_;    // [layer] its upload into its slot is done
  std::vector<std::string> param_in_names_;         // [layer] timeline names of the uploads
  float* h_master_ = nullptr;   // Note [master on host]
  void* h_compute_ = nullptr;   // its compute-dtype staging copy (== h_master_ with f32 compute)
  float* own_master_ = nullptr;  // the ones allocated here (h_master_ and h_compute_ may point to others)
  void* own_compute_ = nullptr;
  std::vector<Tensor> grad_segs_;               // [segment] device gradients; undefined for streamed blocks
  std::vector<int64_t> seg_offset_, seg_size_;  // [segment] in flat elements
  std::vector<size_t> seg_of_param_;            // [param] its segment
  std::vector<Tensor> grad_slots_;              // two block-sized slots for streamed gradients
  std::vector<std::unique_ptr<Event>> grad_slot_free_;  // [slot] the last copy out of the slot is done
  std::vector<int> grad_slot_of_;               // [layer] the slot a streamed block's gradients are in
  int next_grad_slot_ = 0;
  LayerParams grad_layer_view(int layer) const;
  Tensor encoded_, lnf_, lnf_mean_, lnf_rstd_, probs_;
  std::vector<LayerActs> acts_;
  OpProfiler* prof_ = nullptr;
  std::function<void(int, Stream&)> param_gate_;
  std::function<void(int)> grads_done_;
  int64_t lm_chunk_rows_ = 0;
  GptOptions options_;
  int last_recomputed_ = -1;  // the last recomputed block of the forward (the shared set holds it after the forward)
  // Note [swap]: device slots (one block's activations each), host copies per swapped block, and the events that
  // order the copies with the compute.
  int swap_slots_ = 0;                            // 0: no block swaps
  std::vector<int> swapped_;                      // the swapped blocks, ascending
  std::vector<int> swap_index_;                   // [layer] position in swapped_, -1 if not swapped
  std::vector<Tensor> swap_slots_mem_;            // [slot] u8 bytes
  std::vector<void*> swap_host_;                  // [layer] host copy (swapped blocks but the last swap_slots_)
  std::vector<std::string> swap_out_names_, swap_in_names_;  // [layer] timeline names of the copies
  size_t swap_bytes_ = 0;
  std::vector<std::unique_ptr<Event>> fwd_done_, out_done_, in_done_, bwd_done_;  // [layer]
  int shared_holds_ = -1;  // with recompute: the block whose activations the shared set holds
  int mlp_holds_ = -1;     // Note [MLP half]: the block whose MLP half the shared MLP set holds
  int norms_hold_ = -1;    // Note [rebuilt norms]: the block whose LayerNorm outputs the shared norms set holds
  // workspace
  Tensor proj_out_, dresidual_, dln_, datty_, dqkv_, dfch_;
};

}  // namespace tt
