#include "plan/schedule.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>


namespace tt {

const char* stream_name(StreamId s) {
  switch (s) {
    case StreamId::kCompute: return "compute";
    case StreamId::kH2D: return "h2d";
    case StreamId::kD2H: return "d2h";
    case StreamId::kHost: return "host";
    case StreamId::kComm: return "comm";
  }
  return "?";
}

namespace {
constexpr const char* kOpKindNames[] = {"model",        "wait",       "record",     "rebuild_block", "rebuild_norms",
                                        "rebuild_mlp",  "swap_out",   "swap_in",    "params_in",     "grads_out",
                                        "norm_part",    "norm_total", "norm_out",   "host_adamw",    "params_back",
                                        "device_adamw", "alloc",      "input_fill", "input_in",      "input_take",
                                        "grad_reduce",  "um_advise",  "um_prefetch", "rebuild_act",
                                        "grads_stage",  "host_grad_add", "host_norm_part", "host_norm_total"};
constexpr const char* kPassNames[] = {"forward", "backward", "step",     "train",
                                      "forward_backward", "setup", "prefetch", "accumulate"};
constexpr const char* kBoundaryNames[] = {"before_forward", "after_forward",   "before_head",
                                          "after_head",     "before_backward", "after_backward"};
static_assert(std::size(kOpKindNames) == static_cast<size_t>(OpKind::kHostNormTotal) + 1, "a name for every OpKind");
static_assert(std::size(kPassNames) == static_cast<size_t>(kNumPasses), "a name for every Pass");
static_assert(std::size(kBoundaryNames) == static_cast<size_t>(Boundary::kAfterBackward) + 1, "a name per Boundary");
}  // namespace

const char* op_kind_name(OpKind k) { return kOpKindNames[static_cast<int>(k)]; }
const char* pass_name(Pass p) { return kPassNames[static_cast<int>(p)]; }

bool grads_summed_on_host(const ScheduleSpec& spec, int layer) {
  return spec.grad_accum > 1 && spec.plan.cpu_optimizer() && layer >= 0 &&
         layer < static_cast<int>(spec.plan.layers.size()) && spec.plan.grads_streamed(layer);
}
bool any_grads_summed_on_host(const ScheduleSpec& spec) {
  for (int l = 0; l < static_cast<int>(spec.plan.layers.size()); ++l)
    if (grads_summed_on_host(spec, l)) return true;
  return false;
}

// Note [data parallel]
// With data_ranks > 1 each rank runs the schedule on its share of the global batch (data::BatchSampler's shards),
// and each segment's gradients are averaged over the ranks (kGradReduce, through the executor's GradReducer:
// exec/grad_reducer.h) as soon as the backward has written them, before anything reads them: the norm's part, the
// copy to the host (CPU optimizer) and the update. Every rank then holds the same averaged gradients, bit for bit
// (the collectives give every rank the same bits), so the replicas stay equal without any broadcast of parameters.
// The reductions run on a stream of their own (kComm): after the backward of a block has written its segment
// (record "grads s" on the compute stream), the comm stream waits for it, reduces, and records "reduced s", while
// the compute stream goes on with the next block's backward. What reads the gradients waits for "reduced s": the
// copy to the host (CPU optimizer) and the norm's parts, which in a data-parallel run are all taken in the step
// (so the next step's backward, on the compute stream after them, never overwrites a segment being reduced).
// The performance model prices each reduction by the rate `tiertrain calibrate` measured for that many ranks (Note
// [pricing the gradients' average] in perf/costs.cc).
//
// Note [swap]
// The swapped blocks w_0 < w_1 < ... < w_{m-1} share S slots: w_k lives in slot k % S. Ordering, with events per
// block:
//  forward:  w_k may overwrite its slot once the previous occupant's copy out finished (out_done); after it, the
//            d2h stream copies the slot out (after fwd_done), except for the last S swapped blocks, which stay in
//            their slots until their backward (their out_done is never recorded, so waiting for it is a no-op; the
//            next forward reuses their slots after this step's backward, on the same compute stream).
//  backward: the last S swapped blocks are still in their slots. After w_k's backward its slot is free: the h2d
//            stream brings w_{k-S} into it (after bwd_done[w_k] and out_done[w_k], whose copy read the same slot),
//            and w_{k-S}'s backward waits for in_done.
//  next forward: the first S swapped blocks wait for the last copy out of their slot in the previous forward (it
//            matters after an evaluation forward, which has no backward to order it).
//
// Note [managed activations]
// Issue 20: a block placed "managed" or "managed_offload" keeps its activations in its own set in managed memory
// (one inventory entry, managed.h.<l>, carved like a swap slot). With the plan's um.prefetch, the schedule moves
// the offloaded blocks' pages as Note [swap] moves their copies, through the UM driver (memory/um.h), with the
// offloaded blocks o_0 < ... < o_{m-1} and S = swap_slots of them on the device at once:
//  set-up:   every managed entry gets its class's advice (kUmAdvise) and, but for offloaded blocks, is prefetched to
//            the device once (kUmPrefetch), so that no step faults it in.
//  forward:  o_0 .. o_{S-1} are populated on the device at the start (h2d: a discard-and-prefetch of their dead
//            pages, which places them there and moves nothing), each after it left the device in the previous
//            backward (um_free). After o_k's forward (for k < m - S) the d2h stream prefetches its pages to the host
//            (after um_fwd), and once they have left (um_out) the h2d stream populates o_{k+S}; o_k's forward waits for
//            um_ready. The last S stay.
//  backward: after o_k's backward (um_bwd) the h2d stream releases its pages (um_release: a discard-and-prefetch to
//            the host; dead until the next forward, so they leave the device and no direction migrates them for
//            their contents) and records um_free; then it prefetches o_{k-S} back to the device (after um_out
//            o_{k-S}), and o_{k-S}'s backward waits for um_in.
//  With um.discard false (Plan's UmPolicy) the d2h stream moves the dead pages to the host instead (um_evict, a
//  migration, recording um_free), and the populate (um_refill) brings them back as a migration: slower.
//  Every dead range is released and populated with CUDA 13's discard-and-prefetch (Op::um_dead), never with a plain
//  discard: a range discarded alone, later prefetched to the device, written there and prefetched to the host,
//  sometimes came back to the device with its contents of the step before (CUDA 13.0, driver 580; in
//  TrainerCuda.PlansMatchInCore, and in bench/um/discard_repro.cu, the schedule's streams and events with nothing
//  else), never with discard-and-prefetch in both places (docs/benchmarks/2026-12-02-h200-um-discard-repro/).
//  evaluation (Pass::kForward, no backward after it): each block's activations are dead after its forward and are
//            released at once instead of copied out; o_{k+S} is populated once o_k is released. So at most S
//            offloaded blocks are on the device at any time, after an evaluation too, and Executor::backward()
//            after forward() is refused for such plans.
// Every managed entry owns whole 2 MiB pieces (Inventory::add_managed): a release, populate or prefetch never touches
// a neighbour's page.
// Without um.prefetch nothing of this is issued: the driver moves pages on faults alone (default UM). The CPU
// backend's emulation poisons the pages of every discard-and-prefetch (Note [emulated managed memory] in
// backend/cpu/cpu_backend.cc), so a release or populate of live data fails the bit-identity tests there.
//
// Note [managed optimizer exchange]
// Issue 20: with the CPU optimizer, a plan may put the gradients ("managed": ["grad"]) and the device's compute copy
// of the parameters ("param") in managed memory, so that the host update reads the gradients and writes the compute
// copy where they are, with no copy of its own (Note [master on host] in exec/optimizer.h has the copies it replaces).
// After segment s's backward (its gradients written, its parameters read for the last time this step), with
// um.prefetch, the d2h stream moves the gradients to the host (instead of kGradsOut) and releases the compute copy
// there (dead: the update rewrites every element of it; a discard-and-prefetch, so nothing crosses the link for
// its contents). Only the 2 MiB pieces wholly inside segment s are released (Op::UmPart::kInner): the pieces at its
// ends hold the neighbouring segments' parameters too, still to be read by their backward (s - 1) or already
// rewritten by a speculative update (s + 1), so they are moved with their contents (kEnds; a segment within one
// piece: moved whole). Only with um.release_params (off by default: a small, inconsistent gain, and GPU page faults on
// some machines; plan/plan.h), and only in Pass::kTrain, where the update follows in the same pass: after backward() or
// forward_backward() a forward() may come before any update and would read released pages. Otherwise, or with
// um.discard false, all of it is moved. After the update of s the h2d stream populates the gradients on the device
// again with one discard-and-prefetch (dead: the next backward writes them; Note [managed activations] says why never a
// plain discard), and moves the compute copy back (instead of kParamsBack), then records params_back s, which the next
// forward waits for as before.
// Without um.prefetch the same records order the work and the pages move on faults. The update of s has finished
// before anything writes s's gradients again: the next forward waits for params_back s, and the backward comes
// after the forward. With speculation both state sets write the one compute copy: it is only written by the update,
// and a redone update writes it again.
//
// Note [streamed parameters]
// A streamed block's compute copy exists only in the host staging copy that the CPU optimizer writes (Note [master
// on host] in exec/optimizer.h). The streamed blocks p_0 < ... < p_{m-1} share Q slots: p_k lives in slot k % Q.
// Every upload into a slot waits (on the h2d stream) for pslot_free of that slot, recorded on the compute stream
// after the last use of its previous contents, and for the CPU optimizer's update of that block's host copy; every
// use waits for the block's param_in.
//  forward:  at its start every slot is marked free (whatever a previous pass left in it has been used by then, in
//            compute-stream order) and p_0 .. p_{Q-1} are uploaded. After p_k's forward, if p_{k+Q} exists, its slot
//            is marked free and p_{k+Q} uploaded into it. The last Q streamed blocks stay in their slots.
//  backward: p_{m-1} .. p_{m-Q} are in their slots. After p_k's backward its slot is marked free and p_{k-Q}
//            uploaded into it (its backward, or its recompute, waits for it).
// The host copy an upload reads is rewritten only by the next update, which starts after this step's backward,
// which waited for every upload of this step: the uploads are done by then.
// Two of these waits are not the only thing ordering their copies today, and the tests cannot catch their removal:
// the wait for the update (the h2d stream has also waited for the update of the final LayerNorm, the last one,
// before uploading it) and the marks at the start of a forward (the trainer synchronises after an evaluation's
// forward). They stay so that neither ordering depends on those facts.
//
// Streamed gradients (Note [gradient segments] in model/model.h): the blocks whose gradients are streamed use two
// shared slots, alternately in backward order. A block's backward waits until its slot's previous contents have
// left for the host (grad_slot_free, recorded on the d2h stream after that copy), then overwrites it (Note [gradients
// first written] in backend/backend.h).
std::pair<int64_t, int64_t> inner_pieces(int64_t begin, int64_t end) {
  const auto piece = static_cast<int64_t>(Inventory::kManagedAlignBytes);
  return {(begin + piece - 1) / piece * piece, end / piece * piece};
}

SegmentPieces segment_pieces(const ParamSegments& segs, int s, int64_t esize) {
  SegmentPieces p;
  p.begin = segs.offset[static_cast<size_t>(s)] * esize;
  p.end = p.begin + segs.size[static_cast<size_t>(s)] * esize;
  std::tie(p.lo, p.hi) = inner_pieces(p.begin, p.end);
  return p;
}

int64_t SegmentPieces::part_bytes(Op::UmPart part) const {
  const int64_t inner = has_inner() ? hi - lo : 0;
  switch (part) {
    case Op::UmPart::kWhole: return end - begin;
    case Op::UmPart::kInner: return inner;
    case Op::UmPart::kEnds: return end - begin - inner;
  }
  return 0;
}

namespace {

class Compiler {
 public:
  Compiler(const ScheduleSpec& spec, const Inventory& inventory)
      : sp_(spec), inv_(inventory), L_(spec.model.layers), plan_(spec.plan) {
    const ModelConfig& cfg = spec.model;
    const int64_t B = spec.batch, T = cfg.seq, C = cfg.dim;
    bt_ = static_cast<double>(B * T);
    segs_ = model_segments(cfg);
    cpu_ = plan_.cpu_optimizer();
    norm_beside_ = norm_beside_backward(spec);
    for (int l = 0; l < L_; ++l) {
      if (plan_.activation(l) == ActPlacement::kRecompute) last_recomputed_ = l;
      if (plan_.mlp_rebuilt(l)) last_mlp_ = l;
      if (plan_.norms_rebuilt(l)) last_norms_ = l;
      if (plan_.act_rebuilt(l)) last_act_ = l;
    }
    // Note [slot rings].
    const RingLayout rings = ring_layout(plan_);
    swap_index_ = rings.swap.position;
    swapped_ = rings.swap.order;
    S_ = rings.swap.slots;
    pstream_index_ = rings.params.position;
    pstreamed_ = rings.params.order;
    Q_ = rings.params.slots;
    grads_ = rings.grads;
    um_ = rings.um;
    swap_bytes_ =
        static_cast<int64_t>(device_bytes_of(model_block_activations(cfg, spec.batch, spec.compute, plan_.swapped_parts())));
    // A managed block's set: its held parts (every offloaded block holds all of them unless it rebuilds some; the
    // bytes are the largest set's, for the performance model).
    for (int l = 0; l < L_; ++l)
      if (um_.holds(l))
        um_bytes_ = std::max(um_bytes_, static_cast<int64_t>(device_bytes_of(
                                            model_block_activations(cfg, spec.batch, spec.compute, plan_.held_parts(l)))));
    esize_ = static_cast<int64_t>(dtype_size(spec.compute));
    msize_ = static_cast<int64_t>(dtype_size(master_dtype_for(spec.compute)));
    // FLOPs (multiply-adds count 2): a block's GEMMs 24 BT C^2 forward, twice that backward; causal attention
    // 2 B T^2 C forward and about 2.5 times that backward (the scores are rebuilt); the LM head 2 BT C V forward,
    // twice that more backward.
    block_fwd_ = 24.0 * bt_ * C * C + 2.0 * B * static_cast<double>(T) * T * C;
    block_bwd_ = 48.0 * bt_ * C * C + 5.0 * B * static_cast<double>(T) * T * C;
    mlp_fwd_ = 8.0 * bt_ * C * C;
    head_fwd_ = 2.0 * bt_ * C * cfg.padded_vocab();
  }

  Schedule run() {
    Schedule s;
    s.spec = sp_;
    if (sp_.input_staging_slots > 0) input_in(s.passes[static_cast<int>(Pass::kPrefetch)]);
    forward_blocks(s.passes[static_cast<int>(Pass::kForward)], /*evaluation=*/true);
    model(s.passes[static_cast<int>(Pass::kForward)], Boundary::kBeforeHead, 0, "lm_head", head_fwd_);
    backward(s.passes[static_cast<int>(Pass::kBackward)]);
    step(s.passes[static_cast<int>(Pass::kStep)]);
    std::vector<Op>& train = s.passes[static_cast<int>(Pass::kTrain)];
    if (sp_.input_staging_slots > 0) take_input(train);
    forward_blocks(train);
    release_ = true;  // only here does an update follow in the same pass (Note [managed optimizer exchange])
    backward(train);
    release_ = false;
    step(train);
    std::vector<Op>& fb = s.passes[static_cast<int>(Pass::kForwardBackward)];
    forward_blocks(fb);
    backward(fb);
    if (sp_.grad_accum > 1) {  // Note [gradient accumulation]: the micro-batches before a step's last
      std::vector<Op>& acc = s.passes[static_cast<int>(Pass::kAccumulate)];
      if (sp_.input_staging_slots > 0) take_input(acc);
      forward_blocks(acc);
      accumulating_ = true;
      backward(acc);
      accumulating_ = false;
    }
    std::vector<Op>& setup = s.passes[static_cast<int>(Pass::kSetup)];
    for (const InventoryEntry& e : inv_.entries()) {
      Op& op = add(setup, e.where == Inventory::kHost ? StreamId::kHost : StreamId::kCompute, OpKind::kAlloc, e.name);
      op.layer = e.layer;
      op.bytes = static_cast<int64_t>(e.bytes);
      op.mem_where = e.where;
      op.mem_class = e.cls;
      op.mem_bytes = static_cast<int64_t>(e.bytes);
      if (e.where != Inventory::kManaged) continue;
      // Note [managed activations]: the advice, and every page but the offloaded blocks' on the device from the
      // start.
      const bool offloaded = e.layer >= 0 && um_.holds(e.layer);
      const bool offload_advice = e.layer >= 0 && plan_.activation(e.layer) == ActPlacement::kManagedOffload;
      if (plan_.um.advice(e.cls, offload_advice).any()) {
        Op& a = add(setup, StreamId::kCompute, OpKind::kUmAdvise, e.name);
        a.layer = e.layer;
        a.entry = e.name;
      }
      if (plan_.um.prefetch && !offloaded) {
        Op& pf = add(setup, StreamId::kCompute, OpKind::kUmPrefetch, e.name);
        pf.layer = e.layer;
        pf.entry = e.name;
        pf.place = static_cast<int>(memory::UmPlace::kDevice);
        pf.bytes = static_cast<int64_t>(e.bytes);
      }
    }
    s.events = events_;
    return s;
  }

 private:
  int ev(const std::string& name) {
    auto it = event_ids_.find(name);
    if (it != event_ids_.end()) return it->second;
    events_.push_back(name);
    return event_ids_[name] = static_cast<int>(events_.size()) - 1;
  }
  static std::string block(int l) { return "h." + std::to_string(l); }
  static std::string managed_block(int l) { return "managed.h." + std::to_string(l); }
  // Note [managed optimizer exchange]: a UM operation on segment s's part of a managed state entry.
  Op& um_seg(std::vector<Op>& out, StreamId st, OpKind k, const std::string& name, const std::string& entry, int s,
             memory::UmPlace to, int64_t bytes) {
    Op& op = add(out, st, k, name);
    op.segment = s;
    op.layer = s >= 1 && s <= L_ ? s - 1 : -1;
    op.entry = entry;
    if (k == OpKind::kUmPrefetch) op.place = static_cast<int>(to);
    op.bytes = bytes;
    return op;
  }
  std::string grads_entry(int s) const { return "grads.seg" + std::to_string(s); }
  std::string seg_name(int s) const { return s == 0 ? "embeddings" : s == L_ + 1 ? "lnf" : block(s - 1); }
  Op& add(std::vector<Op>& out, StreamId st, OpKind k, std::string name) {
    Op op;
    op.stream = st;
    op.kind = k;
    op.name = std::move(name);
    out.push_back(std::move(op));
    return out.back();
  }
  void wait(std::vector<Op>& out, StreamId st, const std::string& event, const char* name, int layer = -1,
            bool speculative = false) {
    Op& op = add(out, st, OpKind::kWait, name);
    op.event = ev(event);
    op.layer = layer;
    op.speculative = speculative;
  }
  void record(std::vector<Op>& out, StreamId st, const std::string& event, int layer = -1, bool speculative = false) {
    Op& op = add(out, st, OpKind::kRecord, "record " + event);
    op.event = ev(event);
    op.layer = layer;
    op.speculative = speculative;
  }
  void model(std::vector<Op>& out, Boundary b, int segment, std::string name, double flops) {
    Op& op = add(out, StreamId::kCompute, OpKind::kModel, std::move(name));
    op.boundary = b;
    op.segment = segment;
    op.layer = segment >= 1 && segment <= L_ && b != Boundary::kBeforeHead ? segment - 1 : -1;
    op.flops = flops;
  }
  int64_t seg_bytes(int s, int64_t esize) const { return segs_.size[static_cast<size_t>(s)] * esize; }
  // A device AdamW's traffic over n parameters: read p, g, m, v; write p, m, v and the compute copy when it is not the
  // master (Note [device update by segment] in exec/optimizer.cc).
  int64_t device_adamw_bytes(int64_t n) const {
    return n * (7 * msize_ + (sp_.compute != master_dtype_for(sp_.compute) ? esize_ : 0));
  }
  // What the optimizer's copies of segment s move (Note [sharded optimizer]: the share).
  int64_t share_bytes(int s, int64_t esize) const {
    return sp_.optimizer_share(segs_.size[static_cast<size_t>(s)]) * esize;
  }
  // A copy of `bytes` on stream st, of block `layer` (or -1) through ring slot `slot` (or -1), for segment
  // `segment` (or -1).
  Op& copy(std::vector<Op>& out, StreamId st, OpKind k, std::string name, int layer, int slot, int64_t bytes,
           int segment = -1) {
    Op& op = add(out, st, k, std::move(name));
    op.layer = layer;
    op.slot = slot;
    op.bytes = bytes;
    op.segment = segment;
    return op;
  }

  // Note [input staging]: the next batch drawn into the next host slot of the input ring, and copied to the
  // device once the batch before it has left input.next (the executor draws into a slot only after the copy that
  // last read it has finished: an event per slot).
  void input_in(std::vector<Op>& out) {
    const int64_t bytes = 4 * static_cast<int64_t>(sp_.batch) * sp_.model.seq * 2;
    add(out, StreamId::kH2D, OpKind::kInputFill, "draw input").bytes = bytes;
    wait(out, StreamId::kH2D, "input_consumed", "wait input consumed");
    add(out, StreamId::kH2D, OpKind::kInputIn, "input").bytes = bytes;
    record(out, StreamId::kH2D, "input_ready");
  }

  // The CPU optimizer's update of segment s must be done before anything reads its parameters: on the compute
  // stream (the updated device copy came back) for a resident segment.
  void gate(std::vector<Op>& out, int s) {
    // (Note [optimizer split]: a segment the device updates was updated earlier on the compute stream itself.)
    if (plan_.host_updates(s)) wait(out, StreamId::kCompute, "params_back " + seg_name(s), "wait cpu optimizer", s >= 1 && s <= L_ ? s - 1 : -1);
  }
  void upload(std::vector<Op>& out, int k) {
    const int l = pstreamed_[static_cast<size_t>(k)];
    const int q = k % Q_;
    wait(out, StreamId::kH2D, "adamw " + seg_name(1 + l), "wait cpu optimizer", l);  // its host copy updated
    wait(out, StreamId::kH2D, "pslot_free " + std::to_string(q), "wait param slot", l);
    copy(out, StreamId::kH2D, OpKind::kParamsIn, "params " + block(l), l, q, seg_bytes(1 + l, esize_), 1 + l);
    record(out, StreamId::kH2D, "param_in " + block(l), l);
  }

  // Note [managed activations]: block l's managed pages moved to `to` on its stream, after `after` (two events).
  // dead: the pages' contents are dead (a discard-and-prefetch: a populate or a release).
  void um_move(std::vector<Op>& out, int l, memory::UmPlace to, const char* what, const std::vector<std::string>& after,
               const std::string& done, bool dead = false) {
    const StreamId st = to == memory::UmPlace::kDevice ? StreamId::kH2D : StreamId::kD2H;
    for (const std::string& e : after) wait(out, st, e, ("wait " + e.substr(0, e.find(' '))).c_str(), l);
    Op& op = add(out, st, OpKind::kUmPrefetch, std::string(what) + " " + block(l));
    op.layer = l;
    op.entry = managed_block(l);
    op.place = static_cast<int>(to);
    op.um_dead = dead;
    op.bytes = um_bytes_;
    record(out, st, done + " " + block(l), l);
  }
  // Note [managed activations]: block l's pages released on the h2d stream (the stream of every populate and
  // prefetch back to the device: a discard-and-prefetch to the host) once the compute stream is done with them
  // (`done`, recorded here). With um.discard false the pages go to the host as a migration (the d2h stream, like
  // um_out): nothing is discarded.
  void um_release(std::vector<Op>& out, int l, const char* done) {
    const std::string after = std::string(done) + " " + block(l);
    record(out, StreamId::kCompute, after, l);
    if (!plan_.um.discard) {
      um_move(out, l, memory::UmPlace::kHost, "um_evict", {after}, "um_free");
      return;
    }
    wait(out, StreamId::kH2D, after, "wait compute", l);
    Op& d = add(out, StreamId::kH2D, OpKind::kUmPrefetch, "um_release " + block(l));
    d.layer = l;
    d.entry = managed_block(l);
    d.place = static_cast<int>(memory::UmPlace::kHost);
    d.um_dead = true;
    d.bytes = um_bytes_;
    record(out, StreamId::kH2D, "um_free " + block(l), l);
  }
  // o_k populated on the device after its release and after the previous pass's copy of it to the host (a no-op
  // wait after a backward), and after o_{k-S} has left the device: copied out (training) or released (an
  // evaluation, which releases every block after its forward).
  void um_populate(std::vector<Op>& out, int k, bool evaluation) {
    const int l = um_.order[static_cast<size_t>(k)];
    std::vector<std::string> after = {"um_free " + block(l)};
    if (k < um_.size() - um_.slots) after.push_back("um_out " + block(l));  // (the last S are never copied out)
    if (k >= um_.slots)
      after.push_back((evaluation ? "um_free " : "um_out ") + block(um_.order[static_cast<size_t>(k - um_.slots)]));
    // (Without discards the pages come back with their dead contents: a migration, priced as one: um_refill.)
    um_move(out, l, memory::UmPlace::kDevice, plan_.um.discard ? "um_populate" : "um_refill", after, "um_ready",
            plan_.um.discard);
  }

  // evaluation: the forward of Pass::kForward, with no backward after it (Note [managed activations]).
  void forward_blocks(std::vector<Op>& out, bool evaluation = false) {
    const int mp = static_cast<int>(pstreamed_.size());
    const int mu = um_.size();
    for (int k = 0; k < std::min(mu, um_.slots); ++k) um_populate(out, k, evaluation);
    if (mp > 0) {
      for (int q = 0; q < Q_; ++q) record(out, StreamId::kCompute, "pslot_free " + std::to_string(q));
      for (int k = 0; k < std::min(mp, Q_); ++k) upload(out, k);
    }
    gate(out, 0);
    model(out, Boundary::kBeforeForward, 0, "forward embeddings", 0);
    const int m = static_cast<int>(swapped_.size());
    for (int l = 0; l < L_; ++l) {
      const int pk = pstream_index_[static_cast<size_t>(l)];
      if (pk < 0) gate(out, 1 + l);  // a streamed block's upload waited for the update
      if (pk >= 0) wait(out, StreamId::kCompute, "param_in " + block(l), "wait params", l);
      const int k = swap_index_[static_cast<size_t>(l)];
      if (k >= 0) {
        // The last copy out of this slot: that of w_{k-S} in this forward, or for the first S that of the previous
        // forward's last copied block in this slot (the largest k' < m - S with k' = k mod S). After a training
        // step it is long done (the backward's swap-ins waited for it); after an evaluation forward it may still
        // be running.
        int prev = k - S_;
        if (k < S_) {
          prev = k + S_ * ((m - 1 - k) / S_);
          while (prev >= m - S_) prev -= S_;
        }
        if (prev >= 0) wait(out, StreamId::kCompute, "swap_out " + block(swapped_[static_cast<size_t>(prev)]), "wait swap_out", l);
      }
      const int uk = um_.holds(l) ? um_.index(l) : -1;
      if (uk >= 0) wait(out, StreamId::kCompute, "um_ready " + block(l), "wait um_populate", l);
      model(out, Boundary::kBeforeForward, 1 + l, "forward " + block(l), block_fwd_);
      if (uk >= 0 && evaluation) {  // dead at once: released, never copied out
        um_release(out, l, "um_fwd");
        if (uk + um_.slots < mu) um_populate(out, uk + um_.slots, evaluation);
      } else if (uk >= 0 && uk < mu - um_.slots) {  // the last S stay on the device
        record(out, StreamId::kCompute, "um_fwd " + block(l), l);
        um_move(out, l, memory::UmPlace::kHost, "um_out", {"um_fwd " + block(l)}, "um_out");
        if (uk + um_.slots < mu) um_populate(out, uk + um_.slots, evaluation);
      }
      if (k >= 0 && k < m - S_) {  // the last S stay in their slots
        record(out, StreamId::kCompute, "fwd_done " + block(l), l);
        wait(out, StreamId::kD2H, "fwd_done " + block(l), "wait forward", l);
        copy(out, StreamId::kD2H, OpKind::kSwapOut, "swap_out " + block(l), l, k % S_, swap_bytes_);
        record(out, StreamId::kD2H, "swap_out " + block(l), l);
      }
      if (pk >= 0 && pk + Q_ < mp) {  // else it stays in its slot for the backward
        record(out, StreamId::kCompute, "pslot_free " + std::to_string(pk % Q_), l);
        upload(out, pk + Q_);
      }
    }
    gate(out, L_ + 1);
    model(out, Boundary::kBeforeForward, L_ + 1, "forward lnf", 0);
  }

  // The backward has written segment s's last gradient: in a data-parallel run they are averaged over the ranks
  // first (Note [data parallel]); with the CPU optimizer its share of the norm now, and the gradients to the host at
  // once (a streamed block's slot is free again once they have left); with speculation the update too.
  // Note [input staging]: this step's batch into the model's inputs, then the next batch's copy, enqueued before
  // anything else of the step so that it does not queue behind the CPU optimizer's uploads.
  void take_input(std::vector<Op>& out) {
    wait(out, StreamId::kCompute, "input_ready", "wait input");
    Op& take = add(out, StreamId::kCompute, OpKind::kInputTake, "inputs");
    take.bytes = 4 * sp_.batch * sp_.model.seq * 2;
    record(out, StreamId::kCompute, "input_consumed");
    input_in(out);
  }

  void grads_done(std::vector<Op>& out, int s) {
    const int layer = s >= 1 && s <= L_ ? s - 1 : -1;
    if (grads_summed_on_host(sp_, layer)) return host_sum(out, s, layer);
    if (accumulating_) return;  // Note [gradient accumulation]: reduced, read and updated after the last micro-batch
    const bool dp = sp_.data_ranks > 1;
    if (dp) {  // on the comm stream, while the compute stream goes on with the next block's backward
      record(out, StreamId::kCompute, "grads " + seg_name(s), layer);
      wait(out, StreamId::kComm, "grads " + seg_name(s), "wait backward", layer);
      Op& red = add(out, StreamId::kComm, OpKind::kGradReduce, "grad reduce " + seg_name(s));
      red.segment = s;
      red.layer = layer;
      red.bytes = seg_bytes(s, msize_);
      record(out, StreamId::kComm, "reduced " + seg_name(s), layer);
    }
    if (!cpu_) {
      if (!norm_beside_) return;
      // Note [norm beside the backward]: this segment's part of the norm on the comm stream, while the compute
      // stream goes on with the next block's backward.
      record(out, StreamId::kCompute, "grads " + seg_name(s), layer);
      wait(out, StreamId::kComm, "grads " + seg_name(s), "wait backward", layer);
      Op& part = add(out, StreamId::kComm, OpKind::kNormPart, "grad norm");
      part.segment = s;
      part.layer = layer;
      part.bytes = seg_bytes(s, msize_);
      record(out, StreamId::kComm, "normed " + seg_name(s), layer);
      return;
    }
    if (!dp) {  // (in a data-parallel run the norm's parts wait for the reductions, in the step)
      Op& part = add(out, StreamId::kCompute, OpKind::kNormPart, "grad norm");
      part.segment = s;
      part.layer = layer;
      part.bytes = seg_bytes(s, msize_);
      record(out, StreamId::kCompute, "grads " + seg_name(s), layer);
    }
    if (!plan_.host_updates(s)) return;  // Note [optimizer split]: updated on the device, where they are
    if (plan_.host_ring) return;  // Note [host buffers in rings]: copied out in the step, in the update's order
    wait(out, StreamId::kD2H, (dp ? "reduced " : "grads ") + seg_name(s), "wait backward", layer);
    // The previous update of this segment read the host gradients (a no-op before the first).
    wait(out, StreamId::kD2H, "adamw " + seg_name(s), "wait cpu optimizer", layer);
    if (plan_.managed_grads) {
      // Note [managed optimizer exchange]: the update reads them where they are; moved to the host first (in a
      // data-parallel run in the step, after the norm's parts have read them on the device).
      if (plan_.um.prefetch && !dp)
        um_seg(out, StreamId::kD2H, OpKind::kUmPrefetch, "um grads to host", grads_entry(s), s, memory::UmPlace::kHost,
               seg_bytes(s, msize_));
    } else {
      copy(out, StreamId::kD2H, OpKind::kGradsOut, "grads to host", layer, -1, share_bytes(s, msize_), s);
    }
    // And its compute copy, which nothing reads again this step and the update rewrites whole: dead, released to
    // the host (a discard-and-prefetch: nothing moved for its contents) in the pieces wholly its own, the rest (its
    // ends, in pieces shared with the neighbouring segments, which may still be read or already rewritten) moved;
    // with um.discard false all moved.
    if (plan_.managed_params && plan_.um.prefetch) {
      const SegmentPieces sp = segment_pieces(segs_, s, esize_);
      const int64_t bytes = sp.part_bytes(Op::UmPart::kWhole);
      const int64_t inner = release_ && plan_.um.discard && plan_.um.release_params ? sp.part_bytes(Op::UmPart::kInner) : 0;
      if (inner > 0) {
        Op& rel = um_seg(out, StreamId::kD2H, OpKind::kUmPrefetch, "um params release", "params.compute", s,
                         memory::UmPlace::kHost, inner);
        rel.um_dead = true;
        rel.um_part = Op::UmPart::kInner;
      }
      if (inner < bytes)
        um_seg(out, StreamId::kD2H, OpKind::kUmPrefetch, inner > 0 ? "um params ends to host" : "um params to host",
               "params.compute", s, memory::UmPlace::kHost, bytes - inner)
            .um_part = inner > 0 ? Op::UmPart::kEnds : Op::UmPart::kWhole;
    }
    if (!sp_.speculate) return;
    record(out, StreamId::kD2H, "grads_in " + seg_name(s), layer, true);
    wait(out, StreamId::kHost, "grads_in " + seg_name(s), "wait grads", layer, true);
    Op& up = add(out, StreamId::kHost, OpKind::kHostAdamW, "adamw " + seg_name(s) + " (speculative)");
    up.segment = s;
    up.layer = layer;
    up.speculative = true;
  }

  // Note [gradients summed on the host]: segment s's slot to the next staging slot, added into the host gradients;
  // after the last micro-batch, the sum's part of the norm (on the host), and the speculative update if asked.
  void host_sum(std::vector<Op>& out, int s, int layer) {
    const int slot = stage_k_++ % std::max(1, grads_.slots);
    const std::string j = std::to_string(slot);
    record(out, StreamId::kCompute, "grads " + seg_name(s), layer);
    wait(out, StreamId::kD2H, "grads " + seg_name(s), "wait backward", layer);
    wait(out, StreamId::kD2H, "gstage_free " + j, "wait host sum", layer);
    copy(out, StreamId::kD2H, OpKind::kGradsStage, "grads to staging " + seg_name(s), layer, slot, seg_bytes(s, msize_),
         s);
    record(out, StreamId::kD2H, "gstaged " + j, layer);
    wait(out, StreamId::kHost, "gstaged " + j, "wait staged grads", layer);
    Op& a = add(out, StreamId::kHost, OpKind::kHostGradAdd, "sum grads " + seg_name(s));
    a.segment = s;
    a.layer = layer;
    a.slot = slot;
    a.bytes = 3 * seg_bytes(s, msize_);  // read the sum and the staging slot, write the sum
    record(out, StreamId::kHost, "gstage_free " + j, layer);
    if (accumulating_) return;
    Op& n = add(out, StreamId::kHost, OpKind::kHostNormPart, "grad norm (host) " + seg_name(s));
    n.segment = s;
    n.layer = layer;
    n.bytes = seg_bytes(s, msize_);
    if (!sp_.speculate) return;
    Op& up = add(out, StreamId::kHost, OpKind::kHostAdamW, "adamw " + seg_name(s) + " (speculative)");
    up.segment = s;
    up.layer = layer;
    up.speculative = true;
  }

  // Nothing zeroes the gradients: the backward writes each first (Note [gradients first written] in
  // backend/backend.h), after what read the previous step's (the optimizer, the copies to the host, the reductions)
  // on the compute stream or after a wait for it (a streamed block's gradient slot).
  void backward(std::vector<Op>& out) {
    stage_k_ = 0;  // Note [gradients summed on the host]: each pass's streamed blocks from staging slot 0
    model(out, Boundary::kBeforeHead, 0, "lm_head backward", 3 * head_fwd_);
    model(out, Boundary::kBeforeBackward, L_ + 1, "backward lnf", 0);
    grads_done(out, L_ + 1);
    const int m = static_cast<int>(swapped_.size());
    for (int l = L_ - 1; l >= 0; --l) {
      const int pk = pstream_index_[static_cast<size_t>(l)];
      const int k = swap_index_[static_cast<size_t>(l)];
      const int gs = grads_.holds(l) ? grads_.slot(l) : -1;
      if (pk >= 0) wait(out, StreamId::kCompute, "param_in " + block(l), "wait params", l);  // before a recompute too
      if (gs >= 0) wait(out, StreamId::kCompute, "grad_slot_free " + std::to_string(gs), "wait grad slot", l);
      if (plan_.activation(l) == ActPlacement::kRecompute && l != last_recomputed_) {
        Op& op = add(out, StreamId::kCompute, OpKind::kRebuildBlock, "recompute " + block(l));
        op.layer = l;
        op.flops = block_fwd_;
      }
      if (k >= 0 && k < m - S_) wait(out, StreamId::kCompute, "swap_in " + block(l), "wait swap_in", l);
      const int uk = um_.holds(l) ? um_.index(l) : -1;
      if (uk >= 0 && uk < um_.size() - um_.slots) wait(out, StreamId::kCompute, "um_in " + block(l), "wait um_in", l);
      if (plan_.norms_rebuilt(l) && l != last_norms_) {
        Op& op = add(out, StreamId::kCompute, OpKind::kRebuildNorms, "rebuild norms " + block(l));
        op.layer = l;
      }
      if (plan_.mlp_rebuilt(l) && l != last_mlp_) {
        Op& op = add(out, StreamId::kCompute, OpKind::kRebuildMlp, "rebuild mlp " + block(l));
        op.layer = l;
        op.flops = mlp_fwd_;
      }
      // The last block to run its forward still holds its GELU output in the shared set (as for the norms).
      if (plan_.act_rebuilt(l) && l != last_act_) {
        Op& op = add(out, StreamId::kCompute, OpKind::kRebuildAct, "rebuild act " + block(l));
        op.layer = l;
      }
      model(out, Boundary::kBeforeBackward, 1 + l, "backward " + block(l), block_bwd_);
      if (uk >= 0) {  // Note [managed activations]: dead now; then the block S below comes back into the room
        um_release(out, l, "um_bwd");
        if (uk >= um_.slots) {
          const int next = um_.order[static_cast<size_t>(uk - um_.slots)];
          um_move(out, next, memory::UmPlace::kDevice, "um_in", {"um_free " + block(l), "um_out " + block(next)},
                  "um_in");
        }
      }
      if (k >= 0) {
        record(out, StreamId::kCompute, "bwd_done " + block(l), l);
        if (k >= S_) {
          const int next = swapped_[static_cast<size_t>(k - S_)];  // the next block to need this slot
          wait(out, StreamId::kH2D, "bwd_done " + block(l), "wait backward", next);
          // The copy out of this slot's block read the slot (the last S never left it: nothing to wait for).
          if (k < m - S_) wait(out, StreamId::kH2D, "swap_out " + block(l), "wait swap_out", next);
          wait(out, StreamId::kH2D, "swap_out " + block(next), "wait swap_out", next);
          copy(out, StreamId::kH2D, OpKind::kSwapIn, "swap_in " + block(next), next, k % S_, swap_bytes_);
          record(out, StreamId::kH2D, "swap_in " + block(next), next);
        }
      }
      if (pk >= 0) {
        record(out, StreamId::kCompute, "pslot_free " + std::to_string(pk % Q_), l);
        if (pk - Q_ >= 0) upload(out, pk - Q_);
      }
      grads_done(out, 1 + l);
      if (gs >= 0) record(out, StreamId::kD2H, "grad_slot_free " + std::to_string(gs), l);
    }
    model(out, Boundary::kBeforeBackward, 0, "backward embeddings", 0);
    grads_done(out, 0);
  }

  void step(std::vector<Op>& out) {
    const int S = L_ + 2;
    if (cpu_ && sp_.data_ranks > 1) {  // the norm's parts, of the averaged gradients (Note [data parallel])
      for (int s = 0; s < S; ++s) {
        wait(out, StreamId::kCompute, "reduced " + seg_name(s), "wait grad reduce");
        Op& op = add(out, StreamId::kCompute, OpKind::kNormPart, "grad norm");
        op.segment = s;
        op.bytes = seg_bytes(s, msize_);
      }
    }
    if (!cpu_) {
      for (int s = 0; s < S; ++s) {
        if (norm_beside_) {  // Note [norm beside the backward]: computed during the backward
          wait(out, StreamId::kCompute, "normed " + seg_name(s), "wait grad norm");
          continue;
        }
        if (sp_.data_ranks > 1) wait(out, StreamId::kCompute, "reduced " + seg_name(s), "wait grad reduce");
        Op& op = add(out, StreamId::kCompute, OpKind::kNormPart, "grad norm");
        op.segment = s;
        op.bytes = seg_bytes(s, msize_);
      }
      add(out, StreamId::kCompute, OpKind::kNormTotal, "grad norm");
      Op& op = add(out, StreamId::kCompute, OpKind::kDeviceAdamW, "adamw");
      op.bytes = device_adamw_bytes(model_num_params(sp_.model));
      return;
    }
    // Note [speculative update] in exec/optimizer.h: the norm, then segment by segment in forward order the update
    // on the host stream (kept or redone when speculated) and the compute copy back on the h2d stream.
    add(out, StreamId::kCompute, OpKind::kNormTotal, "grad norm");
    record(out, StreamId::kCompute, "grads_ready");
    const int K = plan_.device_optimizer_segments;
    for (int s = 0; s < K; ++s) {  // Note [optimizer split]: the device's segments, while the host takes the rest
      Op& op = add(out, StreamId::kCompute, OpKind::kDeviceAdamW, "adamw " + seg_name(s));
      op.segment = s;
      op.layer = s >= 1 && s <= L_ ? s - 1 : -1;
      op.bytes = device_adamw_bytes(segs_.size[static_cast<size_t>(s)]);
    }
    wait(out, StreamId::kD2H, "grads_ready", "wait backward");
    if (plan_.managed_grads && plan_.um.prefetch && sp_.data_ranks > 1)
      for (int s = 0; s < S; ++s)
        um_seg(out, StreamId::kD2H, OpKind::kUmPrefetch, "um grads to host", grads_entry(s), s,
               memory::UmPlace::kHost, seg_bytes(s, msize_));
    Op& n = add(out, StreamId::kD2H, OpKind::kNormOut, "norm to host");
    n.bytes = 4;
    record(out, StreamId::kD2H, "norm_out");
    wait(out, StreamId::kHost, "norm_out", "wait norm");
    if (any_grads_summed_on_host(sp_)) add(out, StreamId::kHost, OpKind::kHostNormTotal, "grad norm (host parts)");
    if (plan_.host_ring) return ring_updates(out);
    for (int s = K; s < S; ++s) {
      const int layer = s >= 1 && s <= L_ ? s - 1 : -1;
      Op& up = add(out, StreamId::kHost, OpKind::kHostAdamW, "adamw " + seg_name(s));
      up.segment = s;
      up.layer = layer;
      up.bytes = sp_.optimizer_share(segs_.size[static_cast<size_t>(s)]) * (7 * 4 + (esize_ == 4 ? 0 : esize_));
      record(out, StreamId::kHost, "adamw " + seg_name(s), layer);
      if (plan_.managed_grads && plan_.um.prefetch) {
        // Note [managed optimizer exchange]: read; dead until the next backward writes them, which finds them on
        // the device (populated without moving their contents: a discard-and-prefetch, Note [managed activations]).
        wait(out, StreamId::kH2D, "adamw " + seg_name(s), "wait cpu optimizer", layer);
        um_seg(out, StreamId::kH2D, OpKind::kUmPrefetch, "um grads populate", grads_entry(s), s,
               memory::UmPlace::kDevice, seg_bytes(s, msize_)).um_dead = true;
      }
      if (layer >= 0 && plan_.params_streamed(layer)) continue;  // uploaded ahead of its next use
      wait(out, StreamId::kH2D, "adamw " + seg_name(s), "wait cpu optimizer", layer);
      if (plan_.managed_params) {
        // The update wrote the managed compute copy itself.
        if (plan_.um.prefetch)
          um_seg(out, StreamId::kH2D, OpKind::kUmPrefetch, "um params to device", "params.compute", s,
                 memory::UmPlace::kDevice, seg_bytes(s, esize_));
      } else {
        copy(out, StreamId::kH2D, OpKind::kParamsBack, "params to device", layer, -1, share_bytes(s, esize_), s);
      }
      record(out, StreamId::kH2D, "params_back " + seg_name(s), layer);
    }
  }

  // Note [host buffers in rings] in plan/schedule.h: segment by segment in forward order, its gradients into
  // gradient slot s % 2 (once the update of s - 2 has read it), the update from there into compute slot s % 2 (once
  // the upload of s - 2 has read it), the upload from there.
  // Note [optimizer split]: the host's segments alone, the first in slot 0.
  void ring_updates(std::vector<Op>& out) {
    const int S = L_ + 2, K = plan_.device_optimizer_segments;
    for (int s = K; s < S; ++s) {
      const int layer = s >= 1 && s <= L_ ? s - 1 : -1;
      const int slot = (s - K) % kHostRingSlots;
      const bool reused = s - K >= kHostRingSlots;  // the slot's previous segment: s - 2
      if (sp_.data_ranks > 1) wait(out, StreamId::kD2H, "reduced " + seg_name(s), "wait grad reduce", layer);
      if (reused) wait(out, StreamId::kD2H, "adamw " + seg_name(s - kHostRingSlots), "wait cpu optimizer", layer);
      copy(out, StreamId::kD2H, OpKind::kGradsOut, "grads to host ring " + seg_name(s), layer, slot,
           share_bytes(s, msize_), s);
      record(out, StreamId::kD2H, "gring " + seg_name(s), layer);
      wait(out, StreamId::kHost, "gring " + seg_name(s), "wait grads", layer);
      if (reused && esize_ != 4)
        wait(out, StreamId::kHost, "params_back " + seg_name(s - kHostRingSlots), "wait params upload", layer);
      Op& up = add(out, StreamId::kHost, OpKind::kHostAdamW, "adamw " + seg_name(s));
      up.segment = s;
      up.layer = layer;
      up.slot = slot;
      up.bytes = segs_.size[static_cast<size_t>(s)] * (7 * 4 + (esize_ == 4 ? 0 : esize_));
      record(out, StreamId::kHost, "adamw " + seg_name(s), layer);
      wait(out, StreamId::kH2D, "adamw " + seg_name(s), "wait cpu optimizer", layer);
      copy(out, StreamId::kH2D, OpKind::kParamsBack, "params to device", layer, slot, share_bytes(s, esize_), s);
      record(out, StreamId::kH2D, "params_back " + seg_name(s), layer);
    }
  }

  const ScheduleSpec& sp_;
  const Inventory& inv_;
  int L_;
  const Plan& plan_;
  ParamSegments segs_;
  bool cpu_ = false;
  bool release_ = false;  // compiling Pass::kTrain's backward: the compute copy may be released
  bool accumulating_ = false;  // compiling Pass::kAccumulate's backward: the gradients stay where they are
  // Note [norm beside the backward]: the device optimizer's norm parts on the comm stream during the backward.
  bool norm_beside_ = false;
  int stage_k_ = 0;            // streamed blocks staged so far in the pass being compiled
  double bt_ = 0, block_fwd_ = 0, block_bwd_ = 0, mlp_fwd_ = 0, head_fwd_ = 0;
  std::vector<int> swapped_, swap_index_, pstreamed_, pstream_index_;
  SlotRing grads_, um_;
  int S_ = 0, Q_ = 0;
  int last_recomputed_ = -1, last_mlp_ = -1, last_norms_ = -1, last_act_ = -1;
  int64_t swap_bytes_ = 0, um_bytes_ = 0, esize_ = 4, msize_ = 4;
  std::vector<std::string> events_;
  std::map<std::string, int> event_ids_;
};

}  // namespace

Schedule compile_schedule(const ScheduleSpec& spec, const Inventory& inventory) {
  return Compiler(spec, inventory).run();
}

MemoryUse Schedule::replay_memory(const std::vector<Pass>& ps) const {
  MemoryUse m;
  auto apply = [&](const std::vector<Op>& ops) {
    for (const Op& op : ops) {
      if (op.mem_where < 0 || op.mem_bytes == 0) continue;
      const int w = op.mem_where, c = static_cast<int>(op.mem_class);
      m.current[w][c] += op.mem_bytes;
      m.peak[w][c] = std::max(m.peak[w][c], m.current[w][c]);
      int64_t total = 0;
      for (int k = 0; k < kNumTensorClasses; ++k) total += m.current[w][k];
      m.peak_total[w] = std::max(m.peak_total[w], total);
    }
  };
  apply(pass(Pass::kSetup));
  for (Pass p : ps)
    if (p != Pass::kSetup) apply(pass(p));
  return m;
}

Status Schedule::validate() const {
  const int L = spec.model.layers, S = L + 2;
  const RingLayout rings = ring_layout(spec.plan);
  const ParamSegments segs = model_segments(spec.model);
  std::vector<int> record_stream(events.size(), -1);
  std::vector<char> waited(events.size(), 0);
  for (int p = 0; p < kNumPasses; ++p) {
    const std::vector<Op>& ops = passes[p];
    std::vector<std::pair<Boundary, int>> seen;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const std::string where = str_format("schedule: %s[%zu] %s", kPassNames[p], i, op.name.c_str());
      const bool setup = p == static_cast<int>(Pass::kSetup);
      TT_RETURN_IF((op.kind == OpKind::kAlloc || op.kind == OpKind::kUmAdvise) != setup &&
                       !(setup && op.kind == OpKind::kUmPrefetch),
                   kInvalidArgument,
                   "%s: the setup pass allocates, advises and places, and nothing else; no other pass does the first "
                   "two", where.c_str());
      const bool um_op = op.kind == OpKind::kUmPrefetch || op.kind == OpKind::kUmAdvise;
      TT_RETURN_IF(um_op != !op.entry.empty(), kInvalidArgument,
                   "%s: UM operations name a managed entry, nothing else names one", where.c_str());
      TT_RETURN_IF(um_op && !setup && op.entry.starts_with("managed.h.") && !rings.um.holds(op.layer), kInvalidArgument,
                   "%s: moves the managed pages of block %d, whose pages the plan does not move", where.c_str(),
                   op.layer);
      TT_RETURN_IF(um_op && !setup && !op.entry.starts_with("managed.h.") &&
                       (op.segment < 0 || !spec.plan.cpu_optimizer()),
                   kInvalidArgument,
                   "%s: moves a segment of %s outside the CPU optimizer's exchange (Note [managed optimizer "
                   "exchange])", where.c_str(), op.entry.c_str());
      TT_RETURN_IF(op.um_part != Op::UmPart::kWhole && (op.entry != "params.compute" || op.segment < 0),
                   kInvalidArgument, "%s: only a segment of the compute copy is moved in parts", where.c_str());
      TT_RETURN_IF(op.layer < -1 || op.layer >= L || op.segment < -1 || op.segment >= S, kInvalidArgument,
                   "%s: layer %d or segment %d out of range", where.c_str(), op.layer, op.segment);
      if (op.entry == "params.compute" && op.segment >= 0 && (op.um_part != Op::UmPart::kWhole || op.um_dead)) {
        // Note [managed optimizer exchange]: the release of the pieces wholly inside a segment, and the move of its
        // ends beside it, with the bytes Executor::um_ranges gives them.
        TT_RETURN_IF(op.um_dead && (op.um_part != Op::UmPart::kInner || op.place != 1), kInvalidArgument,
                     "%s: the compute copy is released only in whole pieces inside its segment (part inner), to the "
                     "host", where.c_str());
        TT_RETURN_IF(p != static_cast<int>(Pass::kTrain), kInvalidArgument,
                     "%s: the compute copy is released (and moved in parts) only in the train pass, where the update "
                     "follows", where.c_str());
        const SegmentPieces sp = segment_pieces(segs, op.segment, static_cast<int64_t>(dtype_size(spec.compute)));
        TT_RETURN_IF(!sp.has_inner(), kInvalidArgument, "%s: segment %d holds no whole %zu-byte piece to release",
                     where.c_str(), op.segment, Inventory::kManagedAlignBytes);
        const int64_t want = sp.part_bytes(op.um_part);
        TT_RETURN_IF(want == 0 || op.bytes != want, kInvalidArgument,
                     "%s: %lld bytes, but its part of segment %d is %lld", where.c_str(),
                     static_cast<long long>(op.bytes), op.segment, static_cast<long long>(want));
      }
      TT_RETURN_IF((op.kind == OpKind::kUmPrefetch) != (op.place >= 0) || op.place > 1, kInvalidArgument,
                   "%s: place %d (a prefetch names the device or the host, nothing else names one)", where.c_str(),
                   op.place);
      const bool evented = op.kind == OpKind::kWait || op.kind == OpKind::kRecord;
      TT_RETURN_IF(evented != (op.event >= 0) || op.event >= static_cast<int>(events.size()), kInvalidArgument,
                   "%s: event %d (waits and records name one, nothing else does)", where.c_str(), op.event);
      if (op.kind == OpKind::kRecord) {
        int& st = record_stream[static_cast<size_t>(op.event)];
        TT_RETURN_IF(st >= 0 && st != static_cast<int>(op.stream), kInvalidArgument,
                     "%s: event %s is recorded on two streams", where.c_str(), events[static_cast<size_t>(op.event)].c_str());
        st = static_cast<int>(op.stream);
      }
      if (op.kind == OpKind::kWait) waited[static_cast<size_t>(op.event)] = 1;
      if (op.kind == OpKind::kModel) seen.push_back({op.boundary, op.segment});
      TT_RETURN_IF((op.kind == OpKind::kInputFill || op.kind == OpKind::kInputIn || op.kind == OpKind::kInputTake) &&
                       spec.input_staging_slots < 1,
                   kInvalidArgument, "%s: input operations without input staging slots", where.c_str());
      TT_RETURN_IF(op.kind == OpKind::kGradReduce && (spec.data_ranks < 2 || op.segment < 0), kInvalidArgument,
                   "%s: a gradient reduction needs a segment and at least 2 data-parallel ranks (%d)", where.c_str(),
                   spec.data_ranks);
      // Note [gradients summed on the host]: only of the blocks it is for, through the staging ring.
      const bool host_sum = op.kind == OpKind::kGradsStage || op.kind == OpKind::kHostGradAdd ||
                            op.kind == OpKind::kHostNormPart;
      TT_RETURN_IF(host_sum && (op.layer < 0 || op.segment != op.layer + 1 || !grads_summed_on_host(spec, op.layer)),
                   kInvalidArgument, "%s: gradients summed on the host only for streamed blocks with grad_accum > 1",
                   where.c_str());
      TT_RETURN_IF(op.kind == OpKind::kHostNormTotal && !any_grads_summed_on_host(spec), kInvalidArgument,
                   "%s: no gradients are summed on the host", where.c_str());
      const int slots = op.kind == OpKind::kSwapOut || op.kind == OpKind::kSwapIn        ? rings.swap.slots
                        : op.kind == OpKind::kParamsIn                                   ? rings.params.slots
                        : op.kind == OpKind::kGradsStage || op.kind == OpKind::kHostGradAdd ? std::max(1, rings.grads.slots)
                                                                                         : -1;
      if (slots >= 0)
        TT_RETURN_IF(op.slot < 0 || op.slot >= slots || op.layer < 0, kInvalidArgument,
                     "%s: slot %d of %d, layer %d", where.c_str(), op.slot, slots, op.layer);
      // Note [optimizer split]: the host moves and updates its segments alone, the device updates the others.
      if ((op.kind == OpKind::kGradsOut || op.kind == OpKind::kHostAdamW || op.kind == OpKind::kParamsBack) &&
          op.segment >= 0)
        TT_RETURN_IF(!spec.plan.host_updates(op.segment), kInvalidArgument,
                     "%s: segment %d is updated on the device (device_optimizer_segments %d)", where.c_str(),
                     op.segment, spec.plan.device_optimizer_segments);
      if (op.kind == OpKind::kDeviceAdamW && spec.plan.cpu_optimizer())
        TT_RETURN_IF(op.segment < 0 || spec.plan.host_updates(op.segment), kInvalidArgument,
                     "%s: the CPU optimizer updates segment %d on the host", where.c_str(), op.segment);
      // Note [host buffers in rings]: the update's copies and the update itself name a ring slot exactly then.
      if (op.kind == OpKind::kGradsOut || op.kind == OpKind::kHostAdamW || op.kind == OpKind::kParamsBack)
        TT_RETURN_IF(spec.plan.host_ring ? op.slot < 0 || op.slot >= kHostRingSlots || op.segment < 0 : op.slot != -1,
                     kInvalidArgument, "%s: slot %d (host rings %s)", where.c_str(), op.slot,
                     spec.plan.host_ring ? "on: a slot of the two" : "off: none");
    }
    const bool absent = p == static_cast<int>(Pass::kAccumulate) && spec.grad_accum <= 1 && ops.empty();
    TT_RETURN_IF(!absent && seen != model_boundaries(spec.model, static_cast<Pass>(p)), kInvalidArgument,
                 "schedule: pass %s does not follow the model's boundaries", kPassNames[p]);
    // Note [gradient accumulation]: a micro-batch before the last only adds to the gradients.
    if (p == static_cast<int>(Pass::kAccumulate))
      for (const Op& op : ops)
        TT_RETURN_IF(op.kind == OpKind::kGradReduce || op.kind == OpKind::kGradsOut || op.kind == OpKind::kNormPart ||
                         op.kind == OpKind::kHostAdamW || op.kind == OpKind::kDeviceAdamW ||
                         op.kind == OpKind::kParamsBack || op.kind == OpKind::kHostNormPart ||
                         op.kind == OpKind::kHostNormTotal,
                     kInvalidArgument, "schedule: accumulate[%s] reduces, reads or updates gradients",
                     op.name.c_str());
  }
  for (size_t e = 0; e < events.size(); ++e)
    TT_RETURN_IF(waited[e] && record_stream[e] < 0, kInvalidArgument,
                 "schedule: event %s is waited for but never recorded", events[e].c_str());
  return Status::ok();
}

SlotRing make_ring(std::string name, int slots, const std::vector<int>& items, int layers) {
  SlotRing r;
  r.name = std::move(name);
  r.order = items;
  r.slots = std::min(slots, static_cast<int>(items.size()));
  r.position.assign(static_cast<size_t>(layers), -1);
  for (size_t k = 0; k < items.size(); ++k) r.position[static_cast<size_t>(items[k])] = static_cast<int>(k);
  return r;
}

int ActivationArena::blocks_with_grads() const {
  return static_cast<int>(std::count_if(grads_at.begin(), grads_at.end(), [](int64_t at) { return at >= 0; }));
}

// Note [norm beside the backward]
// The device optimizer clips by the norm of all gradients, summed from one part a segment (Note [gradient segments]).
// A segment's gradients are final when its backward is done, and reading them to sum their squares is memory-bound
// work the backward's compute-bound GEMMs leave room for; in the step, on the compute stream, the parts took 1.8 ms of
// the Llama-3.2-1B shape's 128 ms step on an H100 (4.9 GB of f32 gradients) and nothing ran beside them. So each
// segment's part is computed on the comm stream as soon as its backward is done ("grads <segment>", recorded on the
// compute stream), and the step waits for every part ("normed <segment>") before summing them in segment order:
// the same bits. The backend's sum_squares_on has scratch of its own. Not with data-parallel ranks (their parts are
// of the averaged gradients, which the comm stream is busy averaging), tensor-parallel ones (the sharded parts are
// summed over the model's ranks), or the CPU optimizer (its parts are computed where its copies to the host start).
// ScheduleSpec::norm_beside = false (the knob norm_beside_backward) computes them in the step.
// Measured on the H100 it gained nothing: 1B 127.0/127.6 ms a step off, 127.5/127.0 on; the slice 121.9 against
// 121.5 (docs/benchmarks/2026-12-07-h100-llama-1b-norm-beside/). Hopper's cuBLAS kernels keep every SM for a whole
// product, so the parts find none free during the GEMMs and run between them, as on the compute stream. Kept on
// (the same bits and time) for backwards whose GEMMs leave SMs idle.
bool norm_beside_backward(const ScheduleSpec& spec) {
  return spec.norm_beside && !spec.plan.cpu_optimizer() && spec.data_ranks == 1 && spec.model.tp == 1;
}

bool grads_share_memory(const Plan& plan, int layers) {
  return plan.grads_in_activations && !plan.cpu_optimizer() && !plan.managed_grads && layers >= 1 &&
         static_cast<int>(plan.layers.size()) == layers;
}

DType segment_grad_dtype(const Plan& plan, DType compute, int layers, int s) {
  return plan.bf16_grads && s >= 1 && s <= layers ? DType::kBF16 : master_dtype_for(compute);
}

ActivationArena activation_arena(const Plan& plan, const ModelConfig& cfg, int batch, DType compute) {
  const int L = cfg.layers;
  ActivationArena none;
  none.set_at.assign(static_cast<size_t>(std::max(L, 0)), -1);
  none.grads_at = none.set_at;
  if (!grads_share_memory(plan, L)) return none;
  ActivationArena a = none;
  // Items in packing order from the top: blocks L - 1 .. 0, then the embedding (k = 0, block -1) where it may come
  // in. end[k]: where the last resident, unmanaged set at or before the item's block ends (the embedding: 0);
  // grad[k]: its gradients' bytes. Item k of block l is k = l + 1.
  const ParamSegments segs = model_segments(cfg);
  const DType md = master_dtype_for(compute);
  // Each block's fixed tensors (its output) lie in its set: arena_set_bytes, with the model's list read once.
  std::vector<int64_t> fixed(static_cast<size_t>(L), 0);
  for (const TensorRequest& r : model_fixed_tensors(cfg, batch, compute, 0))
    if (r.layer >= 0 && r.layer < L)
      fixed[static_cast<size_t>(r.layer)] += static_cast<int64_t>(device_alloc_bytes(r.shape, r.dtype));
  std::vector<int64_t> end(static_cast<size_t>(L) + 1, 0), grad(static_cast<size_t>(L) + 1, 0);
  std::vector<bool> in(static_cast<size_t>(L) + 1, false);
  int64_t sets = 0;
  for (int l = 0; l < L; ++l) {
    const size_t k = static_cast<size_t>(l) + 1;
    if (plan.activation(l) == ActPlacement::kResident && !plan.managed_block(l)) {
      a.set_at[k - 1] = sets;
      sets += static_cast<int64_t>(device_bytes_of(model_block_activations(cfg, batch, compute, plan.held_parts(l)))) +
              fixed[k - 1];
    }
    end[k] = sets;
    grad[k] = static_cast<int64_t>(device_alloc_bytes({segs.size[k]}, segment_grad_dtype(plan, compute, L, l + 1)));
    in[k] = !plan.grads_streamed(l);
  }
  if (sets == 0) return none;
  grad[0] = static_cast<int64_t>(device_alloc_bytes({segs.size[0]}, md));
  in[0] = model_embedding_grads_last(cfg);
  // Pack the segments downwards from the top; drop those that lie wholly above the sets, and pack again.
  int64_t top = sets;
  for (bool dropped = true; dropped;) {
    top = sets;
    int64_t above = 0;
    for (size_t k = in.size(); k-- > 0;)
      if (in[k]) {
        above += grad[k];
        top = std::max(top, end[k] + above);
      }
    dropped = false;
    above = 0;
    for (size_t k = in.size(); k-- > 0;) {
      if (!in[k]) continue;
      above += grad[k];
      if (top - above >= sets) in[k] = false, dropped = true;
    }
  }
  int64_t above = 0, apart = sets;
  for (size_t k = in.size(); k-- > 0;) {
    if (!in[k]) continue;
    above += grad[k];
    (k == 0 ? a.embedding_grads_at : a.grads_at[k - 1]) = top - above;
    apart += grad[k];
  }
  if (above == 0) return none;
  a.bytes = top;
  a.saved_bytes = apart - top;
  return a;
}

int64_t arena_set_bytes(const Plan& plan, const ModelConfig& cfg, int batch, DType compute, int l) {
  int64_t n = static_cast<int64_t>(device_bytes_of(model_block_activations(cfg, batch, compute, plan.held_parts(l))));
  for (const TensorRequest& r : model_block_fixed_tensors(cfg, batch, compute, l))
    n += static_cast<int64_t>(device_alloc_bytes(r.shape, r.dtype));
  return n;
}

ActivationArena activation_arena(const ScheduleSpec& spec) {
  return activation_arena(spec.plan, spec.model, spec.batch, spec.compute);
}

RingLayout ring_layout(const Plan& plan) {
  const int L = static_cast<int>(plan.layers.size());
  std::vector<int> swapped, params, grads, um;
  for (int l = 0; l < L; ++l) {
    if (plan.activation(l) == ActPlacement::kSwap) swapped.push_back(l);
    if (plan.offloaded(l)) um.push_back(l);
    if (plan.params_streamed(l)) params.push_back(l);
  }
  for (int l = L - 1; l >= 0; --l)  // in backward order
    if (plan.grads_streamed(l)) grads.push_back(l);
  return {make_ring("swap", plan.swap_slots(), swapped, L), make_ring("params", plan.param_slots(), params, L),
          make_ring("grads", 2, grads, L), make_ring("um", plan.swap_slots(), um, L)};
}

std::vector<std::pair<Boundary, int>> model_boundaries(const ModelConfig& cfg, Pass p) {
  std::vector<std::pair<Boundary, int>> r;
  const int L = cfg.layers;
  auto fwd = [&] {
    for (int s = 0; s <= L + 1; ++s) r.push_back({Boundary::kBeforeForward, s});
  };
  auto bwd = [&] {
    r.push_back({Boundary::kBeforeHead, 0});
    for (int s = L + 1; s >= 0; --s) r.push_back({Boundary::kBeforeBackward, s});
  };
  if (p == Pass::kForward) {
    fwd();
    r.push_back({Boundary::kBeforeHead, 0});
  } else if (p == Pass::kBackward) {
    bwd();
  } else if (p == Pass::kTrain || p == Pass::kForwardBackward || p == Pass::kAccumulate) {
    fwd();
    bwd();
  }
  return r;
}

// --- JSON ---

namespace {
using nlohmann::json;

template <size_t N>
int index_of(const char* const (&names)[N], const std::string& s) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return static_cast<int>(i);
  return -1;
}
constexpr const char* kStreamNames[] = {"compute", "h2d", "d2h", "host", "comm"};

json op_json(const Op& op, const std::vector<std::string>& events) {
  json j = {{"stream", stream_name(op.stream)}, {"kind", op_kind_name(op.kind)}, {"name", op.name}};
  if (op.layer >= 0) j["layer"] = op.layer;
  if (op.segment >= 0) j["segment"] = op.segment;
  if (op.kind == OpKind::kModel) j["boundary"] = kBoundaryNames[static_cast<int>(op.boundary)];
  if (op.event >= 0) j["event"] = events[static_cast<size_t>(op.event)];
  if (op.slot >= 0) j["slot"] = op.slot;
  if (op.place >= 0) j["place"] = memory::um_place_name(static_cast<memory::UmPlace>(op.place));
  if (op.um_dead) j["dead"] = true;
  if (op.um_part != Op::UmPart::kWhole) j["part"] = op.um_part == Op::UmPart::kInner ? "inner" : "ends";
  if (!op.entry.empty()) j["entry"] = op.entry;
  if (op.bytes != 0) j["bytes"] = op.bytes;
  if (op.flops != 0) j["flops"] = op.flops;
  if (op.speculative) j["speculative"] = true;
  if (op.mem_where >= 0)
    j["memory"] = {{"pool", op.mem_where == Inventory::kDevice ? "device"
                            : op.mem_where == Inventory::kHost ? "host"
                                                               : "managed"},
                   {"class", tensor_class_name(op.mem_class)},
                   {"bytes", op.mem_bytes}};
  return j;
}

Result<Op> op_from_json(const json& j, const std::map<std::string, int>& events, const std::string& where) {
  TT_RETURN_IF(!j.is_object(), kInvalidArgument, "%s: expected an object", where.c_str());
  Op op;
  try {
    const int st = index_of(kStreamNames, j.at("stream").get<std::string>());
    const int kind = index_of(kOpKindNames, j.at("kind").get<std::string>());
    TT_RETURN_IF(st < 0 || kind < 0, kInvalidArgument, "%s: unknown stream or kind", where.c_str());
    op.stream = static_cast<StreamId>(st);
    op.kind = static_cast<OpKind>(kind);
    op.name = j.at("name").get<std::string>();
    op.layer = j.value("layer", -1);
    op.segment = j.value("segment", -1);
    if (op.kind == OpKind::kModel) {
      const int b = index_of(kBoundaryNames, j.at("boundary").get<std::string>());
      TT_RETURN_IF(b < 0, kInvalidArgument, "%s: unknown boundary", where.c_str());
      op.boundary = static_cast<Boundary>(b);
    }
    if (j.contains("event")) {
      auto it = events.find(j.at("event").get<std::string>());
      TT_RETURN_IF(it == events.end(), kInvalidArgument, "%s: unknown event %s", where.c_str(),
                   j.at("event").dump().c_str());
      op.event = it->second;
    }
    TT_RETURN_IF((op.kind == OpKind::kWait || op.kind == OpKind::kRecord) != (op.event >= 0), kInvalidArgument,
                 "%s: waits and records name an event, other operations none", where.c_str());
    op.slot = j.value("slot", -1);
    op.entry = j.value("entry", std::string());
    if (j.contains("place")) {
      const std::string pl = j.at("place").get<std::string>();
      TT_RETURN_IF(pl != "device" && pl != "host", kInvalidArgument, "%s: place is device or host", where.c_str());
      op.place = pl == "device" ? 0 : 1;
    }
    op.bytes = j.value("bytes", int64_t{0});
    op.flops = j.value("flops", 0.0);
    op.speculative = j.value("speculative", false);
    op.um_dead = j.value("dead", false);
    if (j.contains("part")) {
      const std::string part = j.at("part").get<std::string>();
      TT_RETURN_IF(part != "inner" && part != "ends", kInvalidArgument, "%s: part is inner or ends", where.c_str());
      op.um_part = part == "inner" ? Op::UmPart::kInner : Op::UmPart::kEnds;
    }
    if (j.contains("memory")) {
      const json& m = j.at("memory");
      const std::string pool = m.at("pool").get<std::string>();
      TT_RETURN_IF(pool != "device" && pool != "host" && pool != "managed", kInvalidArgument,
                   "%s: memory.pool is device, host or managed", where.c_str());
      op.mem_where = pool == "device" ? Inventory::kDevice : pool == "host" ? Inventory::kHost : Inventory::kManaged;
      TT_ASSIGN_OR_RETURN(op.mem_class, parse_tensor_class(m.at("class").get<std::string>()));
      op.mem_bytes = m.at("bytes").get<int64_t>();
    }
  } catch (const json::exception& e) {
    return make_status(StatusCode::kInvalidArgument, "%s: %s", where.c_str(), e.what());
  }
  return op;
}
}  // namespace

json Schedule::to_json() const {
  json j;
  j["version"] = 1;
  // Note [tensor parallel]: with tp > 1, one rank's shard, whose segments are its own.
  j["model"] = model_config_json(spec.model);
  j["batch"] = spec.batch;
  j["compute_dtype"] = dtype_name(spec.compute);
  j["plan"] = spec.plan.to_json();
  j["speculate"] = spec.speculate;
  j["lm_chunk_rows"] = spec.lm_chunk_rows;
  j["input_staging_slots"] = spec.input_staging_slots;
  j["data_ranks"] = spec.data_ranks;
  j["grad_accum"] = spec.grad_accum;
  j["shard_optimizer"] = spec.shard_optimizer;
  j["events"] = events;
  json passes_j = json::object();
  for (int p = 0; p < kNumPasses; ++p) {
    json ops = json::array();
    for (const Op& op : passes[p]) ops.push_back(op_json(op, events));
    // Per stream: its operations in order (indices into ops), bytes moved and FLOPs.
    json streams = json::object();
    for (int s = 0; s < kNumStreams; ++s) {
      json ids = json::array();
      int64_t bytes = 0;
      double flops = 0;
      for (size_t i = 0; i < passes[p].size(); ++i) {
        const Op& op = passes[p][i];
        if (static_cast<int>(op.stream) != s) continue;
        ids.push_back(i);
        bytes += op.bytes;
        flops += op.flops;
      }
      streams[kStreamNames[s]] = {{"ops", ids}, {"bytes", bytes}, {"flops", flops}};
    }
    passes_j[kPassNames[p]] = {{"ops", ops}, {"streams", streams}};
  }
  j["passes"] = passes_j;
  // What a training step holds, per pool and tensor class (the setup's allocations; a step allocates nothing).
  const MemoryUse m = replay_memory({Pass::kTrain});
  json mem = json::object();
  for (int w : {Inventory::kDevice, Inventory::kHost, Inventory::kManaged}) {
    if (w == Inventory::kManaged && m.peak_total[w] == 0) continue;
    json classes = json::object();
    for (int c = 0; c < kNumTensorClasses; ++c)
      if (m.peak[w][c] != 0) classes[tensor_class_name(static_cast<TensorClass>(c))] = m.peak[w][c];
    mem[w == Inventory::kDevice ? "device" : w == Inventory::kHost ? "host" : "managed"] = {
        {"peak_bytes", m.peak_total[w]}, {"peak_per_class", classes}};
  }
  j["memory_peak"] = mem;
  return j;
}

Result<Schedule> Schedule::from_json(const json& j) {
  TT_RETURN_IF(!j.is_object() || j.value("version", 0) != 1, kInvalidArgument,
               "schedule: expected an object with \"version\": 1");
  Schedule s;
  try {
    const json& m = j.at("model");
    TT_ASSIGN_OR_RETURN(s.spec.model, model_config_from_json(m, "schedule"));
    s.spec.batch = j.at("batch").get<int>();
    TT_ASSIGN_OR_RETURN(s.spec.compute, parse_dtype(j.at("compute_dtype").get<std::string>()));
    TT_ASSIGN_OR_RETURN(s.spec.plan, Plan::from_json(j.at("plan"), s.spec.model.layers, "schedule"));
    s.spec.plan.source = j.at("plan").value("source", std::string("schedule"));
    s.spec.speculate = j.at("speculate").get<bool>();
    s.spec.lm_chunk_rows = j.at("lm_chunk_rows").get<int64_t>();
    s.spec.input_staging_slots = j.value("input_staging_slots", 0);
    s.spec.data_ranks = j.value("data_ranks", 1);
    s.spec.grad_accum = j.value("grad_accum", 1);
    TT_RETURN_IF(s.spec.grad_accum < 1, kInvalidArgument, "schedule: grad_accum %d", s.spec.grad_accum);
    s.spec.shard_optimizer = j.value("shard_optimizer", false);
    s.events = j.at("events").get<std::vector<std::string>>();
    std::map<std::string, int> ids;
    for (size_t i = 0; i < s.events.size(); ++i)
      TT_RETURN_IF(!ids.emplace(s.events[i], static_cast<int>(i)).second, kInvalidArgument,
                   "schedule: event %s twice", s.events[i].c_str());
    const json& ps = j.at("passes");
    for (int p = 0; p < kNumPasses; ++p) {
      if (p == static_cast<int>(Pass::kAccumulate) && !ps.contains(kPassNames[p])) continue;  // (written before it)
      const json& ops = ps.at(kPassNames[p]).at("ops");
      TT_RETURN_IF(!ops.is_array(), kInvalidArgument, "schedule: passes.%s.ops is not an array", kPassNames[p]);
      for (size_t i = 0; i < ops.size(); ++i) {
        TT_ASSIGN_OR_RETURN(Op op, op_from_json(ops[i], ids,
                                                str_format("schedule: passes.%s.ops[%zu]", kPassNames[p], i)));
        s.passes[p].push_back(std::move(op));
      }
    }
  } catch (const json::exception& e) {
    return make_status(StatusCode::kInvalidArgument, "schedule: %s", e.what());
  }
  TT_TRY(s.validate());
  return s;
}

}  // namespace tt
