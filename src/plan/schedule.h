// plan/schedule: a resolved plan compiled for one model and batch into the operations of each pass, in the order
// they are issued, each on its stream (compute, h2d, d2h, host; room for communication streams) with its name,
// layer, kind, bytes moved, floating-point operations, and the event it waits for or records. The executor runs it
// and nothing else (exec/executor.h); --trace names its copies and host work as it does; --dry-run --schedule FILE
// writes it as JSON (docs/FORMATS.md); the performance model will replay it.
//
//   Schedule s = compile_schedule({cfg, batch, DType::kBF16, plan, /*speculate=*/false}, inventory);
//   for (const Op& op : s.pass(Pass::kTrain)) ...   // forward, backward, optimizer step
//
// Passes: kForward (evaluation: the blocks, then the LM head's losses), kBackward (after a kForward: the LM head
// with its backward, then the blocks in reverse), kStep (the optimizer), kTrain (kForward's blocks, kBackward,
// kStep: one training step), kForwardBackward (kTrain without the step), kSetup (every allocation of the run,
// before the first pass: nothing is allocated after it, so the memory a run takes is the setup's), kPrefetch (the
// first batch into the input ring; each kTrain then takes its batch and starts the next one's copy), kAccumulate
// (with grad_accum > 1: a micro-batch's forward and backward, its batch taken and the next one's copy started as
// kTrain does, its gradients added to the step's and nothing else: no reduction, norm or update; Note [gradient
// accumulation] in exec/executor.h). A kModel
// operation stands for the model's own kernels between two of its boundaries (model/model.h ModelHooks): the executor
// lets the model run them and checks that the model reached the boundaries the schedule expects, in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "plan/inventory.h"
#include "plan/plan.h"
#include "model/model.h"

namespace tt {

enum class StreamId : int { kCompute = 0, kH2D, kD2H, kHost, kComm };
constexpr int kNumStreams = 5;
const char* stream_name(StreamId s);

enum class OpKind : int {
  kModel,           // compute: the model's kernels from boundary `boundary` of `segment` to the next
  kWait,            // the stream waits for `event`
  kRecord,          // the stream records `event`
  kRebuildBlock,    // compute: the block's forward again (Note [recompute])
  kRebuildNorms,    // compute: Note [rebuilt norms]
  kRebuildMlp,      // compute: Note [MLP half]
  kSwapOut,         // d2h: block `layer`'s swapped activations, from its slot to its host copy (Note [swap])
  kSwapIn,          // h2d: back from its host copy into `slot`
  kParamsIn,        // h2d: a streamed block's compute copy from the host into `slot` (Note [streamed parameters])
  kGradsOut,        // d2h: `segment`'s gradients to the host (the CPU optimizer)
  kNormPart,        // compute: `segment`'s sum of squares into the norm's parts
  kNormTotal,       // compute: the parts summed in segment order
  kNormOut,         // d2h: the squared norm to the host
  kHostAdamW,       // host: AdamW of `segment` on the host (speculative: with a clip factor of 1, into the other set)
  kParamsBack,      // h2d: `segment`'s updated compute copy back to the device
  kDeviceAdamW,     // compute: AdamW of every parameter on the device, writing the compute copy in the same pass
  kAlloc,           // setup: the inventory entry `name` taken from its pool (memory below)
  kInputFill,       // h2d, at issue: the caller writes the next batch into its host slot of the input ring
  kInputIn,         // h2d: that batch from its host slot to the device (input.next)
  kInputTake,       // compute: the batch from input.next into the model's tokens and targets
  kGradReduce,      // compute: `segment`'s gradients averaged over the data-parallel ranks (Note [data parallel])
  // Unified Memory (issue 20, Note [managed activations], Note [managed optimizer exchange]): on the managed
  // inventory entry `entry` (its segment `segment`'s part when the entry is the flat compute copy of the parameters).
  kUmAdvise,        // setup: the plan's advice for the entry's class (Plan::um)
  kUmPrefetch,      // the pages moved to `place` (h2d stream to the device, d2h stream to the host); with um_dead
                    // their contents are dead: placed there without moving anything (a discard-and-prefetch)
  kRebuildAct,     // compute: Note [rebuilt activation] in plan/plan.h
  // Note [gradients summed on the host]:
  kGradsStage,     // d2h: `segment`'s gradients from its device slot to host staging slot `slot`
  kHostGradAdd,    // host: staging slot `slot` into the host gradients of `segment` (the step's first micro-batch
                   // writes them, the others add)
  kHostNormPart,   // host: `segment`'s sum of squares of its summed host gradients, into the host's norm parts
  kHostNormTotal,  // host: the host's parts added to the squared norm the device sent (norm_out), in segment order
};
const char* op_kind_name(OpKind k);

// Note [gradients summed on the host]
// Gradient accumulation (Note [gradient accumulation] in exec/executor.h) keeps the micro-batches' sums where the
// gradients live. A block whose gradients stream through device slots to the host (the CPU optimizer with
// grad = host_streamed) has nowhere on the device to keep them, so its sums are made on the host: after each
// micro-batch's backward of the block, its slot is copied to a pinned staging slot (a ring of as many as the device
// has gradient slots), and the host stream adds it into the host gradients (the step's first micro-batch copies it
// there); the slot is free once its copy is done, the staging slot once its add is. The last micro-batch then takes
// the block's part of the gradient norm on the host, of the sums (kHostNormPart: the device has only the last
// micro-batch's), and once the device's parts of the other segments arrive (norm_out) the host adds its own to them
// in segment order (kHostNormTotal) before the updates read the norm. The host's adds cost host memory bandwidth
// (read 2, write 1 float a gradient a micro-batch), which the performance model prices from the profile's host copy
// rate. Not built with data parallel (the averages are made on the device, of slots), tensor parallel or managed
// gradients: refused.
// Note [host buffers in rings]
// The CPU optimizer's host state is the fp32 master and AdamW's two moments: 12 bytes a parameter that stay. The
// gradients' host copy (4 bytes) and the staging copy of the bf16 compute copy (2) are transit: each segment's pass
// through them once a step. With a place for every parameter ("host_buffers": "whole", the default) each segment's
// gradients go out during the backward, as soon as it is done. As rings (Plan::host_ring, "ring") each passes through
// one of kHostRingSlots slots of the largest segment's size, in the update's order (forward order, after the
// backward): the d2h stream copies segment s's gradients into gradient slot s % 2 once the update of s - 2 has read
// it; the host update reads them there and writes the new compute copy into compute slot s % 2 once the upload of
// s - 2 has read it; the h2d stream uploads it from there. The host then holds 12 bytes a parameter and four slots
// (an 8B Llama: 90 GiB and 6 GiB, against 135 GiB whole), at the price of the gradients' copies moving from the
// backward into the update, which they share the host's memory bandwidth with, and of the first segment's copy
// exposed (the performance model prices both from the schedule). Same arithmetic, same bits. Not with speculation,
// a sharded optimizer, streamed or managed parameters or gradients (Plan::host_ring_refusal): they read the whole
// copies.
constexpr int kHostRingSlots = 2;
// Note [optimizer split]
// With the CPU optimizer the next forward waits for the host's update, segment by segment in forward order: about
// 28 bytes of host memory traffic a parameter, at the host's bandwidth (an 8B Llama on 16 cores: ~1.8 s a step),
// which clipping keeps from starting before the backward ends. Where the device has room beside the run, the first
// K segments (Plan::device_optimizer_segments: the embeddings, then the first blocks) keep their fp32 master and
// moments on the device (12 bytes a parameter more there) and are updated there (kDeviceAdamW, one op a segment, on
// the compute stream right after the norm, writing the compute copy in the same pass), while the host updates the
// others from segment K on; their gradients never leave the device. The forward then starts on the device's
// segments at once and waits only for the host's, whose update is shorter by their share. The first segments are
// the ones to move: the forward reads them first, and the host's update, in forward order, would reach them first
// too but only after the backward. The host state keeps a home for the device segments' master and moments
// (written from the device for checkpoints and whole reads: Optimizer::device_part_to_host; read back to the device
// when loaded), so checkpoints, resume and --init-from are as without a split. The device update and the host update
// are the same function on the CPU backend (same bits); on a GPU the device's is the CUDA kernel's (the device
// optimizer's rounding). Not with speculation, a sharded optimizer, managed memory or streamed parameters,
// gradients or optimizer state (Plan::optimizer_split_refusal): refused.

struct ScheduleSpec;
bool grads_summed_on_host(const ScheduleSpec& spec, int layer);
bool any_grads_summed_on_host(const ScheduleSpec& spec);

enum class Pass : int { kForward = 0, kBackward, kStep, kTrain, kForwardBackward, kSetup, kPrefetch, kAccumulate };
constexpr int kNumPasses = 8;
const char* pass_name(Pass p);

struct Op {
  StreamId stream = StreamId::kCompute;
  OpKind kind = OpKind::kModel;
  std::string name;     // as in the trace: "forward h.3", "swap_out h.3", "wait swap_in", "adamw h.3"
  int layer = -1;       // block, or -1
  int segment = -1;     // parameter segment (Note [gradient segments]), or -1
  Boundary boundary = Boundary::kBeforeForward;  // kModel: where the model's kernels start
  int event = -1;       // kWait, kRecord: index into Schedule::events
  int slot = -1;        // copies into or out of a ring slot
  int place = -1;       // kUmPrefetch: memory::UmPlace (0 the device, 1 the host)
  bool um_dead = false; // kUmPrefetch of pages whose contents are dead: a discard-and-prefetch, which places them at
                        // `place` and moves nothing; to the device a populate, to the host a release (priced as
                        // such: perf/costs.h; Note [managed activations] says why never a plain discard)
  std::string entry;    // UM operations: the managed inventory entry they act on
  // kUmPrefetch of a segment of the flat compute copy (Note [managed optimizer exchange]): its whole range, only the
  // 2 MiB pieces wholly inside it, or the rest of it (its ends, in pieces it shares with its neighbours).
  enum class UmPart : int { kWhole = 0, kInner = 1, kEnds = 2 };
  UmPart um_part = UmPart::kWhole;
  int64_t bytes = 0;    // bytes moved (copies) or read and written (compute, estimated)
  double flops = 0;     // floating-point operations (compute)
  bool speculative = false;  // runs only in a step that speculates (Note [speculative update] in exec/optimizer.h)
  // Memory the operation takes (> 0) or releases (< 0) in a pool: Inventory::kDevice or kHost, -1 for none.
  int mem_where = -1;
  TensorClass mem_class = TensorClass::kWorkspace;
  int64_t mem_bytes = 0;
  bool operator==(const Op&) const = default;
};

// The managed pieces (Inventory::kManagedAlignBytes) wholly inside the bytes [begin, end) of an entry, which starts
// on a piece of its own: [first, second), empty (first >= second) when there is none.
std::pair<int64_t, int64_t> inner_pieces(int64_t begin, int64_t end);

// Note [managed optimizer exchange]: segment s of the flat compute copy (elements of esize bytes) as bytes from the
// copy's start, [begin, end), and the managed pieces wholly inside it, [lo, hi) (inner_pieces). The one place the
// compiler, Schedule::validate and the executor take a part's bytes from.
struct SegmentPieces {
  int64_t begin = 0, end = 0, lo = 0, hi = 0;
  bool has_inner() const { return lo < hi; }
  // kWhole: the segment; kInner: its whole pieces (0 without); kEnds: the rest.
  int64_t part_bytes(Op::UmPart part) const;
};
SegmentPieces segment_pieces(const ParamSegments& segs, int s, int64_t esize);

struct ScheduleSpec {
  ModelConfig model;
  int batch = 1;
  DType compute = DType::kF32;
  Plan plan;
  bool speculate = false;
  int64_t lm_chunk_rows = 0;  // 0: the model's default
  int input_staging_slots = 0;  // Note [input staging]: host slots of the next batches; 0: the caller feeds inputs
  int data_ranks = 1;  // Note [data parallel]: ranks whose gradients are averaged (batch is one rank's share)
  int grad_accum = 1;  // Note [gradient accumulation]: micro-batches a step (kAccumulate compiled when above 1)
  // Note [sharded optimizer] (exec/optimizer.h): with the CPU optimizer, a rank's gradients to the host, host update
  // and parameters back cover its share of each segment (the largest share, rank 0's, is what the schedule counts).
  bool shard_optimizer = false;
  // Note [norm beside the backward] (plan/schedule.cc): the device optimizer's gradient norm in parts on the comm
  // stream during the backward (where norm_beside_backward() says it applies); false: in the step, on the compute one.
  bool norm_beside = true;
  // The elements of segment s (of n) this rank's optimizer covers: all, or the largest share when sharded.
  int64_t optimizer_share(int64_t n) const {
    return shard_optimizer && data_ranks > 1 ? segment_share(n, data_ranks) : n;
  }
};

// Note [norm beside the backward]: whether spec's schedule computes the norm's parts on the comm stream during the
// backward: spec.norm_beside, the device optimizer, one data rank and one tensor-parallel rank.
bool norm_beside_backward(const ScheduleSpec& spec);

// Bytes per pool and tensor class: the peak over a replay of passes, and where the replay ended.
struct MemoryUse {
  int64_t peak[Inventory::kNumWhere][kNumTensorClasses] = {};
  int64_t current[Inventory::kNumWhere][kNumTensorClasses] = {};
  int64_t peak_total[Inventory::kNumWhere] = {};
};

struct Schedule {
  ScheduleSpec spec;
  std::vector<std::string> events;  // names; the executor creates one backend event each
  std::vector<Op> passes[kNumPasses];
  // Per stream and pass: bytes moved, FLOPs, operation count (the JSON's summary).
  const std::vector<Op>& pass(Pass p) const { return passes[static_cast<int>(p)]; }

  // The memory the operations of these passes take and release, replayed in order (setup first, then the passes;
  // the performance model's memory prediction).
  MemoryUse replay_memory(const std::vector<Pass>& passes) const;
  // Checks what the executor relies on: each pass's kModel operations are the model's boundaries in order
  // (model_boundaries), waits and records name an event, every event waited for is recorded somewhere and always
  // on one stream, slots, layers and segments are in range, and allocations happen in kSetup only; Unified Memory
  // operations name a managed entry the plan moves, and a release of the compute copy (and the move of its ends)
  // is of whole pieces inside its segment, to the host, in kTrain only, with the bytes of its part.
  Status validate() const;

  nlohmann::json to_json() const;
  // Reads what to_json wrote (the spec's plan is rebuilt from its JSON); checks every field, then validate().
  static Result<Schedule> from_json(const nlohmann::json& j);
};

// Note [gradients in dead activations]
// Block l's gradients are written in its backward and read by the optimizer after the whole backward; the
// activation sets of blocks l + 1 .. L - 1 are dead from the end of their backwards (which come before block l's) to
// the next forward (which comes after the optimizer). So block l's gradients can live in the memory of those later
// sets, as PyTorch's caching allocator hands a freed activation's memory to a new gradient: the resident blocks' sets
// lie in one arena in block order (set l at set_at[l]), and the gradient segments of blocks L - 1, L - 2, ... are
// packed downwards from the arena's top, so that block l's lie wholly above the end of the last resident set at or
// before l (which its backward still reads): top = max(sets' bytes, max over l of E(l) + G(>= l)), E(l) that end,
// G(>= l) the bytes of the segments from l up. A segment that would lie wholly above the sets gains nothing there
// and keeps a buffer of its own (and the packing is redone without it). A set in the arena holds the block's output
// too, after its activations (arena_set_bytes): read last by the next block's backward, it is dead with the set. The embedding's gradients, where nothing but
// the backward's last operation writes them (an untied LM head: model_embedding_grads_last), come below block 0's:
// every set is dead by then. Where a block's gradients are larger than
// its activations (a big model at a small batch: the Llama-3-8B slice at B 2 has 832 MiB of gradients a block against
// 512 MiB of activations) they spread over several dead sets; where they are smaller they fall into the next one.
// It holds for the device optimizer with gradients neither streamed nor managed (the CPU optimizer's copies of the
// gradients to the host would race the next forward) and resident, unmanaged sets. A block's backward writes its
// segment without reading it (Note [gradients first written] in backend/backend.h), so the stale activations need no
// clearing. A forward overwrites them, so nothing may run one between a backward and its optimizer step (gradient
// accumulation over several forwards needs buffers of their own): after such a forward the executor refuses the step
// (a check) and download_grads (an error). Bit-identical to gradients in buffers of their own (tests);
// Plan::grads_in_activations = false turns it off.
struct ActivationArena {
  int64_t bytes = 0;               // the arena's size; 0: none (every set and gradient segment apart)
  std::vector<int64_t> set_at;     // [block] its activation set's byte offset in the arena, or -1
  std::vector<int64_t> grads_at;   // [block] its gradient segment's byte offset in the arena, or -1
  int64_t embedding_grads_at = -1;  // segment 0's gradients' byte offset in the arena, or -1
  int64_t saved_bytes = 0;         // what the sets and those segments apart would take beyond `bytes`
  bool holds_grads(int l) const { return l >= 0 && static_cast<size_t>(l) < grads_at.size() && grads_at[static_cast<size_t>(l)] >= 0; }
  bool holds_set(int l) const { return l >= 0 && static_cast<size_t>(l) < set_at.size() && set_at[static_cast<size_t>(l)] >= 0; }
  bool holds_embedding_grads() const { return embedding_grads_at >= 0; }
  int blocks_with_grads() const;
};
ActivationArena activation_arena(const Plan& plan, const ModelConfig& cfg, int batch, DType compute);
// Note [bf16 gradients] (exec/executor.h): the dtype of gradient segment s (0 the embeddings, 1 + l block l, L + 1
// the final norm: Note [gradient segments] in model/model.h): bf16 for the blocks' where the plan says so, else the
// master dtype.
DType segment_grad_dtype(const Plan& plan, DType compute, int layers, int s);
// Whether the plan's gradients may share memory over time (the arena above, Note [head in gradients] in
// exec/executor.h): the knob on, AdamW on the device, gradients not managed, the plan's layers the model's.
// (Gradient accumulation turns the knob off: its micro-batches' forwards would overwrite them.)
bool grads_share_memory(const Plan& plan, int layers);
// The bytes of block l's set in the arena: its held parts' activations, then its fixed tensors (its output:
// model_block_fixed_tensors), each 256-byte aligned, in that order.
int64_t arena_set_bytes(const Plan& plan, const ModelConfig& cfg, int batch, DType compute, int l);
ActivationArena activation_arena(const ScheduleSpec& spec);

// inventory: what the run allocates (Executor::inventory), whose entries become the setup pass.
Schedule compile_schedule(const ScheduleSpec& spec, const Inventory& inventory = {});

// Note [slot rings]
// Every place where a sequence of items takes turns in a few buffers is one SlotRing: the swapped blocks'
// activations in device slots (Note [swap]), the streamed blocks' parameters (Note [streamed parameters]), the
// streamed blocks' gradients (two slots, in backward order), and the next batches in pinned host slots (Note [input
// staging] in exec/trainer.h; its items are batches, numbered as they are drawn). Item k of the ring's order lives
// in slot k % slots. Whatever writes an item into its slot first waits until the slot's previous item is done with,
// and whatever reads an item waits until it is in; the events that say so are the schedule's (per slot or per
// item, as the ring's Note gives them). The schedule's copies and the executor's tensor views both take their slot
// from the ring, so they cannot disagree.
struct SlotRing {
  std::string name;           // "swap", "params", "grads", "input"
  int slots = 0;              // buffers (0: the ring holds nothing)
  std::vector<int> order;     // the items in use order (blocks; empty for a ring of batches)
  std::vector<int> position;  // [block] its place in order, or -1
  bool holds(int item) const { return item >= 0 && static_cast<size_t>(item) < position.size() && position[static_cast<size_t>(item)] >= 0; }
  int index(int item) const { return position[static_cast<size_t>(item)]; }
  int size() const { return static_cast<int>(order.size()); }
  // The slot of the item at place k of the order (of batch k for a ring of batches).
  int slot_at(int k) const { return k % slots; }
  int slot(int item) const { return slot_at(index(item)); }
  // Whether the item at place k is the last to use its slot (nothing comes after it there in this pass).
  bool last_in_slot(int k) const { return k + slots >= size(); }
};
// A ring over `items` (in use order) of at most `slots` buffers: min(slots, items) of them.
SlotRing make_ring(std::string name, int slots, const std::vector<int>& items, int layers);

// The rings of a plan, from the plan alone.
struct RingLayout {
  SlotRing swap, params, grads;
  // The managed blocks whose pages the schedule moves (Note [managed activations]): as swap, swap_slots of them on
  // the device at once.
  SlotRing um;
};
RingLayout ring_layout(const Plan& plan);

// The compute stream's operations of the model's passes, as the model announces them: kModel operations in order
// (tests and the executor's check).
std::vector<std::pair<Boundary, int>> model_boundaries(const ModelConfig& cfg, Pass p);

}  // namespace tt
