// exec/executor: places the model's tensors as the plan says and runs the schedule. It allocates every buffer of
// the run from one inventory (plan/inventory.h), hands the model views of them (activation sets of its own,
// shared rebuilt sets, ring slots), compiles the plan into the schedule (plan/schedule.h) and runs each pass by
// issuing the schedule's operations in order, letting the model run its kernels between its boundaries (it
// implements the model's ModelHooks). It owns the optimizer (exec/optimizer.h) and the host copies.
//
//   TT_ASSIGN_OR_RETURN(auto ex, Executor::create(backend, {cfg, batch, DType::kBF16, plan, hyper}));
//   TT_TRY(ex->init_params(seed));
//   ex->train_step(lr, /*speculate=*/true);   // enqueued: forward, backward, optimizer step
//
// Note [model and executor]: the model computes; the executor places, copies and waits. Nothing but the schedule
// decides the order of copies and waits, so what --dry-run --schedule writes is what runs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "exec/grad_reducer.h"
#include "plan/inventory.h"
#include "exec/op_profiler.h"
#include "exec/optimizer.h"
#include "plan/plan.h"
#include "plan/schedule.h"
#include "model/model.h"

namespace tt {

struct ExecSpec {
  ModelConfig model;
  int batch = 1;
  DType compute = DType::kF32;
  Plan plan;                   // no layers: every block resident, the optimizer on the device
  AdamWHyper hyper;            // hyper.speculate: Note [speculative update] (CPU optimizer)
  int64_t lm_chunk_rows = 0;   // 0: the model's default
  int input_staging_slots = 0; // pinned host slots for the trainer's next batches (Note [input staging])
  int data_ranks = 1;          // Note [data parallel] in plan/schedule.cc: batch is this rank's share
  int grad_accum = 1;          // Note [gradient accumulation]: micro-batches of `batch` a step
  int tp_rank = 0;             // Note [tensor parallel] (model/gpt.h): this rank's place among model.tp
  int data_rank = 0;           // this rank's place among data_ranks
  bool shard_optimizer = false;  // Note [sharded optimizer] in exec/optimizer.h (with data_ranks > 1)
  // Note [data-parallel input] in exec/trainer.cc (--input via-root, data_ranks > 1): data rank 0's staging slots
  // hold the global batch, which its h2d stream copies to input.global and scatters from there to every data rank's
  // input.next (through the input reducer); the other ranks' h2d streams only receive.
  bool input_scatter = false;
  // Issue 20: managed memory beyond the GPU's free memory is refused unless this is set (--um-allow-oversubscription;
  // never on a shared GPU).
  bool um_allow_oversubscription = false;

  // What compile_schedule needs of it (the model's default LM chunk when lm_chunk_rows is 0).
  ScheduleSpec schedule_spec() const;
  bool master_in_halves() const { return plan.master_in_halves(compute); }  // Note [master in two halves]
  // A master in two halves is split or joined on the host this many parameters at a time (256 MiB of halves), not
  // the whole model's halves at once (16 GB for an 8B model); tests take fewer.
  int64_t halves_piece = int64_t{64} << 20;
  bool norm_beside = true;  // ScheduleSpec::norm_beside (Note [norm beside the backward] in plan/schedule.cc)

  // What the model and the plan require of each other, before anything is built: the plan's layers, the CPU
  // optimizer's f32 master, what needs the CPU optimizer, at least two slots per ring, swapped blocks that agree on
  // their parts.
  Status validate() const;
  // Note [bf16 gradients]: what this spec lacks for bf16 block gradients (for "built for %s only"), or nullptr.
  const char* bf16_grads_refusal() const;
};

// Note [bf16 gradients]: sets spec.plan.bf16_grads from the knob grad_dtype once the plan, the optimizer's
// placement, the compute, the micro-batches and the mesh are in the spec: f32 or bf16 as named (validate refuses
// what cannot take bf16); auto, unless the JSON plan names grad_dtype, bf16 where the compute is bf16, there is one
// data rank and nothing refuses it, else f32.
void apply_grad_dtype(GradDtype want, ExecSpec& spec);

// Note [bf16 gradients]
// With bf16 compute PyTorch's autocast casts each f32 weight to bf16 for its product, so the product's weight
// gradient comes out of cuBLAS in bf16 (an f32 sum rounded once) and is widened into the f32 .grad: the strongest
// PyTorch baseline trains on bf16-precision weight gradients in f32 bytes. Plan::bf16_grads (--grad-dtype bf16, JSON
// "grad_dtype": "bf16") keeps the blocks' gradient segments (1..L: Note [gradient segments] in model/model.h) in
// bf16: the GEMMs write dW in bf16 (cuBLAS's f32 sum rounded once to nearest even; the CPU backend rounds its f32
// sum the same way, with f32 compute), the vector gradients (norm gains, biases) go through the backends' f32
// reductions and are rounded once; the gradient norm's parts and AdamW read them (widened to f32 in registers), so a
// segment's norm part and update read 2 bytes a parameter instead of 4. The embeddings' segment (its backward adds
// rows; tied, it also takes the LM head's dW) and the final norm's stay f32. Half the blocks' gradient bytes: the
// arena (Note [gradients in dead activations]), the head in gradients and the inventory count them. Every plan with
// the setting gives the bits of in-core with it (tests), and a block gradient is the f32 run's rounded once
// (Executor.Bf16GradientsAreTheF32OnesRoundedOnce). Data ranks average the bf16 segments as they are (half the bytes;
// the host communicators add them in f32 in rank order and round once, NCCL reduces bf16 as PyTorch DDP's bf16
// compression hook does); model ranks hold their slices. First version: AdamW on the device and not sharded, one
// micro-batch a step (an accumulation in bf16 would round at every add, and cuBLAS's epilogue rounds an add into a
// bf16 dW twice: GPU test Bf16Gradients.*; PyTorch adds into f32), f32 or bf16 compute
// (a GPU: bf16); the rest is refused naming the flag. The default, auto (apply_grad_dtype), takes bf16 where the
// compute is bf16 (a GPU's), one data rank (DDP averages f32 .grad unless a compression hook is named) and the run
// takes them, f32 elsewhere (the CPU optimizer, accumulation, the CPU backend's f32 compute): autocast's numerics
// where the first version has them. docs/design/bf16-gradients.md.

// Note [head in gradients]
// The head's tensors (TensorRequest::head: the final norm's output and statistics, the logits chunk) are written
// from the last block's output on and read last by the backward of segment L + 1, which comes before every block's
// backward; a block's gradients are written first by its backward (Note [gradients first written] in
// backend/backend.h) and read after the whole backward by the optimizer, then dead until the next backward. So where
// the conditions of Note [gradients in dead activations] (plan/schedule.h) hold (the knob on, AdamW on the device,
// gradients neither streamed nor managed, no accumulation over micro-batches), the head's tensors live in blocks'
// gradient buffers, as PyTorch's caching allocator hands the logits' freed memory to the first gradients: each, the
// largest first, in the last block whose own buffer has room left (blocks whose gradients live in the activation
// arena have none). At the Llama-3-8B slice (B 2) the logits chunk and the final norm's output, 533 MiB, lie in
// block 7's 832 MiB. As for the arena, a forward after a backward overwrites those gradients (Executor::forward).
struct HeadInGrads {
  struct Place {
    int segment = -1;     // the block's gradient segment (1 + l)
    int64_t offset = 0;   // bytes into it (256-byte aligned)
  };
  std::map<std::string, Place> at;  // the head's tensors so placed, by name
  int64_t bytes = 0;                // what they would take in buffers of their own
  bool holds(const std::string& name) const { return at.count(name) > 0; }
};

class Executor : public ModelHooks {
 public:
  // Note [head in gradients]: which of the head's tensors live in blocks' gradient buffers, and where.
  static HeadInGrads head_in_grads(const ExecSpec& spec);
  // Every buffer a run of this spec takes, device and host, in allocation order.
  static Result<Inventory> inventory(const ExecSpec& spec);
  // Issue 20: the managed bytes the plan keeps on the device at once (all of them but the offloaded blocks', of
  // which swap_slots at a time when the schedule moves them: Note [managed activations]); the rest of the managed
  // pool lives in host memory between uses.
  static int64_t managed_device_bytes(const ExecSpec& spec, const Inventory& inventory);
  // Note [optimizer split] (plan/schedule.h): the most device optimizer segments a CPU-optimizer spec can take whose
  // inventory `fits` accepts (its device bytes rise with the count: bisection over 0..segments-1); 0 where the plan
  // cannot split, with speculation or a sharded optimizer. `out`, when given, gets that count's inventory.
  static int largest_optimizer_split(const ExecSpec& spec, const std::function<bool(const Inventory&)>& fits,
                                     Inventory* out = nullptr);
  // model: makes the model over the tensors the executor placed (default: the family's own, create_model; a test
  // passes a model with a family's tensors and kernels of its own).
  using ModelFactory = std::function<std::unique_ptr<Model>(Backend&, const ModelConfig&, int, DType, ModelTensors)>;
  static Result<std::unique_ptr<Executor>> create(Backend& backend, ExecSpec spec, ModelFactory model = {});
  ~Executor() override;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  Optimizer& optimizer() { return *opt_; }
  Backend& backend() { return be_; }
  const ExecSpec& spec() const { return spec_; }
  const Schedule& schedule() const { return schedule_; }
  const Inventory& allocated() const { return inventory_; }
  void set_profiler(OpProfiler* profiler) { prof_ = profiler; }
  // Note [data parallel]: what averages the gradients when spec.data_ranks > 1 (must outlive the executor's steps).
  void set_grad_reducer(GradReducer* reducer) { reducer_ = reducer; }
  // Note [tensor parallel] (model/gpt.h): what sums over the model dimension when spec.model.tp > 1.
  void set_tp_reducer(GradReducer* reducer) { tp_reducer_ = reducer; }
  // ExecSpec::input_scatter: what scatters the batch over the data dimension, on the h2d stream (a reducer of its
  // own: its calls must not interleave with the gradients' on another stream).
  void set_input_reducer(GradReducer* reducer) { input_reducer_ = reducer; }
  // Runs `schedule` from now on instead of the compiled one: a schedule for this executor (the same model, batch,
  // setup and events) with operations changed, reordered or removed, as a planner or a test may want. Validated;
  // it must keep the plan's data correct, which only the caller can know (the tests remove waits to show that each
  // one matters).
  Status use_schedule(Schedule schedule);

  // --- parameters (synchronous) ---
  Status init_params(uint64_t seed);
  // A flat host buffer of num_params() master-dtype values into the master / back; the compute copy refreshed.
  Status upload_params(const void* host);
  // After the CPU optimizer's whole host master was written where it is (Note [checkpoints without copies] in
  // exec/checkpoint.h): its staging copy and the device's compute copies refreshed from it.
  Status master_loaded();
  Status download_params(void* host);
  // All gradients into a flat host buffer (not with streamed gradients: their slots are reused).
  Status download_grads(void* host);
  // The compute stream waits for every pending update of the CPU optimizer (before reading all parameters).
  void wait_all();

  // --- passes (enqueued; plan/schedule.h) ---
  // Where gradients live in activation memory (Note [gradients in dead activations] in plan/schedule.h), a forward()
  // overwrites them: a step() of them and download_grads() are refused after it.
  void forward();                                  // Pass::kForward: losses of the current batch
  void backward();                                 // Pass::kBackward, after forward()
  void step(float lr);                             // Pass::kStep, after backward()
  void forward_backward();                         // Pass::kForwardBackward: the gradients, no step
  void train_step(float lr, bool speculate = false, bool accumulated = false);  // Pass::kTrain

  // The model's inputs and outputs and parameter layout, for callers that only feed and read it.
  Tensor tokens() const { return model_->tokens(); }
  Tensor targets() const { return model_->targets(); }
  Tensor losses() const { return model_->losses(); }
  const std::vector<ParamInfo>& params() const { return model_->params(); }
  int64_t num_params() const { return model_->num_params(); }
  DType master_dtype() const { return model_->master_dtype(); }

  // Note [input staging] (exec/trainer.h), with ExecSpec::input_staging_slots: fill(host) writes the next batch's
  // tokens then targets (2 x batch x seq int32) into a pinned host slot when the schedule draws it, and returns the
  // batch's loss scale (Model::set_loss_scale: < 0 for the default), which the model takes with the batch;
  // prefetch() draws and copies the first batch; each train_step() then takes its batch and draws and copies the
  // next one.
  void set_input_source(std::function<float(int32_t*)> fill) { input_source_ = std::move(fill); }
  // Note [gradient accumulation]: a step of grad_accum micro-batches is accumulate_step() for each but the last
  // (the first writes the gradients, the others add to them; each takes its batch from the input ring and starts the
  // next one's copy, as train_step does), then train_step(..., accumulated = true) for the last, which adds its
  // gradients and then reduces, clips and updates as a step of one batch does. The micro-batches' gradients are
  // summed, each scaled as the model's loss scale says (the trainer's: 1 / the targets of the whole step). With the
  // CPU optimizer the sums stay on the device until the last micro-batch's backward copies them to the host (and
  // takes the norm's parts of them there), as a step of one batch does. Plans that keep gradients anywhere but in
  // their own device buffers (streamed gradient slots, managed memory, later blocks' dead activations) are
  // refused with grad_accum > 1.
  void accumulate_step(bool first);
  // Note [host one step ahead] (exec/trainer.cc): pinned slot i (0 or 1) of grad_accum x batch x seq + 1 floats that
  // a training step's losses (micro-batch by micro-batch) and squared gradient norm are copied into; nullptr without
  // input staging.
  float* step_readback(int i) const { return step_readback_[i]; }
  // The first error of a copy that read an input staging slot, seen when the slot was drawn into again.
  const Status& input_status() const { return input_status_; }
  void prefetch();

  // ModelHooks.
  void at(Boundary b, int segment) override;
  void op(const char* name) override {
    if (prof_) prof_->mark(name);
  }
  void tp_sum(const char* name, const Tensor& t) override;
  void tp_max(const char* name, const Tensor& t) override;

 private:
  // Note [sharded optimizer]: the other data ranks' shares of one segment's new parameters, in `stream`'s order.
  Status upload_compute_copies();  // the CPU optimizer's resident compute copies from its host state
  void gather_param_shares(const Tensor& segment, Stream& stream);
  Executor(Backend& backend, ExecSpec spec)
      : be_(backend), spec_(std::move(spec)), segments_(model_segments(spec_.model)) {}
  Status allocate_and_bind(const ModelFactory& model);
  void run_pass(Pass p, void (Executor::*model_part)());
  void model_forward();
  void model_backward();
  void model_train();
  void model_none() {}
  void run_until_model();
  void issue(const Op& op);
  // The managed ranges a UM operation acts on: its inventory entry's (whole pieces), or for a segment of the compute
  // copy the segment's range, the pieces wholly inside it or its ends (Op::um_part).
  std::vector<memory::UmRange> um_ranges(const Op& op) const;
  Stream& stream(StreamId s);

  Backend& be_;
  ExecSpec spec_;
  ParamSegments segments_;  // of spec_.model (um_ranges' segments of the managed compute copy)
  Inventory inventory_;
  Schedule schedule_;
  RingLayout rings_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> opt_;
  std::vector<std::unique_ptr<Event>> events_;  // [schedule event]
  OpProfiler* prof_ = nullptr;
  GradReducer* reducer_ = nullptr;  // Note [data parallel]
  GradReducer* tp_reducer_ = nullptr;  // Note [tensor parallel]
  GradReducer* input_reducer_ = nullptr;  // ExecSpec::input_scatter
  // Everything allocated, freed in the destructor.
  std::vector<Tensor> device_, managed_;
  std::vector<std::pair<void*, bool>> host_;  // and whether from the pageable pool
  // Issue 20: the managed pool over one reservation of the backend's UM driver (Note [managed activations]).
  void* managed_base_ = nullptr;
  std::unique_ptr<memory::DevicePool> managed_pool_;
  std::map<std::string, Tensor> by_name_;
  std::map<std::string, void*> host_by_name_;
  // The device master (device optimizer): f32, or its low halves beside compute_flat_ (Note [master in two
  // halves]); the one compute buffer, if any.
  Tensor master_, compute_flat_;
  std::vector<Tensor> swap_slots_, param_slots_, grad_slots_;
  std::vector<void*> swap_host_;                // [layer] host copy of a swapped block's activations
  Tensor input_next_;
  Tensor input_global_;  // ExecSpec::input_scatter, data rank 0: the global batch, each rank's share in rank order
  std::vector<int32_t*> input_host_;
  std::vector<std::unique_ptr<Event>> input_slot_read_;  // [slot] recorded after the copy that read it last
  float* step_readback_[2] = {nullptr, nullptr};
  Status input_status_;
  std::function<float(int32_t*)> input_source_;
  int64_t input_fills_ = 0;  // batches drawn: batch k goes into host slot k % slots (Note [slot rings])
  int input_slot_ = -1;      // the host slot of the last batch drawn
  std::vector<float> input_scale_;  // [slot] the loss scale of the batch drawn into it (Note [loss mask])
  float next_scale_ = -1.0f;        // that of the batch in input.next
  // The pass being run: its operations and the next one to issue.
  const std::vector<Op>* ops_ = nullptr;
  size_t pos_ = 0;
  bool in_model_ = false;
  // Note [gradients in dead activations] (plan/schedule.h): arena_, where the resident sets and the gradients that
  // live among them lie in the "activations" entry; grads_pending_, a backward's gradients wait for their step;
  // grads_valid_, no forward has overwritten them since the last backward.
  ActivationArena arena_;
  HeadInGrads head_;  // Note [head in gradients]
  bool grads_pending_ = false, grads_valid_ = true;
  bool norm_parts_current_ = false;  // the last backward was a step's last (Note [norm beside the backward])
  bool first_micro_batch_ = true;  // the pass running is a step's first micro-batch (Note [gradients summed on the host])
  // Whether a forward overwrites gradients: some live in an activation set, or hold the head's tensors.
  bool grads_in_activations() const;
  std::unique_ptr<Event> comm_done_;  // forward() after a data-parallel backward: the comm stream's work so far
};

}  // namespace tt
