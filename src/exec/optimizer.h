// exec/optimizer: AdamW with global-norm gradient clipping, as PyTorch's torch.optim.AdamW + clip_grad_norm_ (weight
// decay only on parameters marked `decay`), on the device or on the host. It holds the optimizer's state and does
// the work of the schedule's optimizer operations (plan/schedule.h: kNormPart, kDeviceAdamW, kGradsOut,
// kHostAdamW, kParamsBack, ...); the executor runs them in the schedule's order with the schedule's events.
//
// Note [master on host]
// With the CPU optimizer (OptimizerPlacement::kCpu) the AdamW moments are in the host pool, and so is the fp32
// master: the device keeps only the compute copy (2 bytes a parameter in bf16, not 6), and the host keeps a
// staging copy of it beside the master (bf16 with bf16 compute; the master itself with f32 compute). Each
// segment's gradients go to the host on the d2h stream as soon as the backward finishes them; the host stream
// updates segment by segment in forward order with the vectorised adamw_update_f32, which writes the bf16 copy in
// the same pass; each segment's compute copy goes back on the h2d stream, and the compute stream waits for a
// segment only right before the next forward first reads it, so the update overlaps the next forward. On the CPU
// backend the update is the very function the device AdamW runs, so results are bit-identical.
//
// Note [speculative update] (--speculative-update). Clipping needs the norm of all gradients, known only after
// the backward, so the update above cannot start before it. But when the norm is under the clip the clip factor
// is exactly 1, and the update is the one computed with no clipping at all. So each segment is updated as soon as
// its gradients reach the host, during the backward, with factor 1, from the current state set into a second one
// (master, moments, staging copy), leaving the current one intact. After the backward the host checks the factor:
// 1 keeps the update; anything else redoes it from the intact state with the true factor. The sets then swap roles
// (uploads enqueued from then on read the new one). Either way the result is the update computed after the
// backward, bit for bit. The trainer guesses per step from the previous step's norm, so a run whose norms stay
// above the clip stops paying for wrong guesses. Costs the second set in host memory: 12 bytes a parameter, 14
// with bf16 compute.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "plan/plan.h"
#include "model/model.h"

namespace tt {

struct AdamWHyper {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // 0 disables clipping
  bool speculate = false;  // CPU optimizer: Note [speculative update]
};

// Note [sharded optimizer] (--shard-optimizer; ZeRO stage 1). With data parallel every rank holds the same averaged
// gradients, so every rank computing the whole update repeats the others' work and keeps N copies of the moments.
// Instead rank r of N updates only its share of each segment, elements [r q, min((r+1) q, n)) of a segment of n
// (q = ceil(n / N)), keeping moments for its shares alone (m and v take 1/N of the device memory), and the new
// parameters (the compute copy: the master itself in f32) then go from their owners to the others (Executor, after
// the update): one in-place allgather a segment where N divides it (equal shares), else a broadcast from each owner. Each element's arithmetic is the unsharded update's, so a sharded run is
// bit-identical to the same run unsharded. The master's other shares go stale (with bf16 compute) and are never
// read; checkpoints gather every rank's shares of the master and the moments (gather_whole_state).
// With the CPU optimizer (ZeRO-Offload's split) the host state is compact: this rank's share of each segment, at
// the segment's moment_base_, for the master, its staging copy, the gradients' host copy, m and v (and the second
// set of Note [speculative update]); grads_out copies the share of the averaged gradients, params_back the share of
// the new compute copy, and the executor gathers the others' shares on the h2d stream before the event the next
// forward waits for. A rank's host then holds 1/N of the 16 bytes a parameter (18 with bf16 compute) and does 1/N of
// the update; not with streamed parameters or gradients, nor the managed exchange (they need the whole copy).
struct OptimizerShard {
  int rank = 0, ranks = 1;
  bool on() const { return ranks > 1; }
  // Rank `r`'s share of a segment of n elements: [first, second).
  static std::pair<int64_t, int64_t> range(int64_t n, int r, int ranks) {
    const int64_t q = segment_share(n, ranks);
    return {std::min(n, r * q), std::min(n, (r + 1) * q)};
  }
  // The moments' elements on one rank: each segment's share, at most ceil(n / N).
  static int64_t moment_elements(const ParamSegments& segs, int ranks) {
    int64_t e = 0;
    for (int64_t n : segs.size) e += segment_share(n, ranks);
    return e;
  }
};

// One set of host state (Note [speculative update]): master, moments and the staging copy of the compute copy
// (null with f32 compute, where the master is the staging copy).
struct HostAdamState {
  float *master = nullptr, *m = nullptr, *v = nullptr;
  uint16_t* bf16 = nullptr;
};

// Where the optimizer's state lives, allocated by the executor from its inventory.
struct OptimizerBuffers {
  Tensor master;          // device: the flat master (device optimizer), or its low halves:
  bool master_in_halves = false;  // Note [master in two halves] in core/bf16.h (`compute` the high halves)
  Tensor compute;         // device: the flat compute copy the device update writes in its pass (bf16), else empty
  Tensor m, v;            // device moments (device optimizer)
  Tensor norm_sq, parts;  // device: the squared norm and its per-segment parts
  HostAdamState sets[2];  // host (CPU optimizer); sets[1] only with speculation
  float* host_grads = nullptr;
  float* host_norm = nullptr;
  // Note [managed optimizer exchange] in plan/schedule.cc (CPU optimizer): the update reads the model's (managed)
  // gradients where they are instead of host_grads, and writes the new compute copy into compute_out (the managed
  // flat compute copy: through sets[].bf16 with bf16 compute, by a copy of the new master with f32).
  bool grads_in_place = false;
  Tensor compute_out;
  // Note [gradients summed on the host] in plan/schedule.h: pinned staging slots (of a block segment's size each),
  // and the host's parts of the squared norm (one a segment, zero but for the segments summed on the host).
  std::vector<float*> grad_staging;
  float* host_parts = nullptr;
  std::vector<char> host_summed;  // per segment: summed on the host (its device part stays zero)
  // Note [host buffers in rings] in plan/schedule.h: the gradients' and the compute copy's slots (each of the largest
  // segment's size; no compute slots with f32 compute, whose staging copy is the master) instead of host_grads and
  // sets[0].bf16.
  std::vector<float*> grad_ring;
  std::vector<uint16_t*> param_ring;
  // Note [optimizer split] in plan/schedule.h (CPU optimizer): the first device_segments segments are updated on the
  // device, from master, m and v above (their elements only) into the flat compute copy `compute`; the host state
  // keeps their home, brought up to date for checkpoints (device_part_to_host) and from it when loaded.
  int device_segments = 0;
};

class Optimizer {
 public:
  Optimizer(Backend& backend, const Model& model, OptimizerPlacement where, AdamWHyper hyper, OptimizerBuffers buf,
            OptimizerShard shard = {});
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  OptimizerPlacement placement() const { return where_; }
  bool on_cpu() const { return where_ == OptimizerPlacement::kCpu; }
  const AdamWHyper& hyper() const { return hyper_; }
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t step) { step_ = step; }
  Tensor grad_norm_sq() const { return buf_.norm_sq; }
  Tensor norm_parts() const { return buf_.parts; }
  const OptimizerShard& shard() const { return shard_; }
  // What the forward reads and a sharded update's broadcasts carry: the compute copy, or the master when it is one.
  Tensor model_params() const { return buf_.compute.raw() != nullptr ? buf_.compute : buf_.master; }
  int64_t speculation_kept() const { return spec_kept_.load(); }
  int64_t speculation_redone() const { return spec_redone_.load(); }
  // The host state set uploads read now (CPU optimizer).
  const HostAdamState& current() const { return buf_.sets[cur_]; }
  // The staging copy of segment s's compute copy in the current set (CPU optimizer).
  const void* host_compute(int segment) const;

  // --- the schedule's operations (plan/schedule.h), enqueued ---
  // Before a step's passes: its learning rate and whether it speculates (the caller's guess).
  void begin_step(float lr, bool speculate);
  // kNormPart, on the compute stream, or with `on` beside it (Note [norm beside the backward] in plan/schedule.cc).
  void norm_part(int segment, Stream* on = nullptr);
  void norm_total();             // kNormTotal, compute stream
  // kDeviceAdamW, compute stream (Note [device update by segment]): every segment the device updates, or one of
  // them (Note [optimizer split]).
  void device_update(int segment = -1);
  int device_segments() const { return buf_.device_segments; }
  // ring_slot: the host ring's slot the operation goes through (Note [host buffers in rings]), or -1.
  void grads_out(int segment, int ring_slot = -1);   // kGradsOut, d2h stream
  void norm_out();               // kNormOut, d2h stream
  // kHostAdamW, host stream: the speculative update during the backward, or the step's update after it.
  void host_update(int segment, bool speculative, int ring_slot = -1);
  void params_back(int segment, const Tensor& device_copy, int ring_slot = -1);  // kParamsBack, h2d stream
  bool host_ring() const { return !buf_.grad_ring.empty(); }
  // The host master to write the initial values into, in the model's layout (CPU optimizer, unsharded; no update in
  // flight), then master_written() to bring the whole staging copy (if any) up to date with it.
  float* host_master() const;
  // The current set's moments, whole (as host_master(); Note [checkpoints without copies] in exec/checkpoint.h).
  float* host_m() const;
  float* host_v() const;
  // Whether the host state above is whole and in the model's layout: the CPU optimizer, unsharded (with a split,
  // after device_part_to_host()).
  bool host_state_whole() const { return on_cpu() && !shard_.on(); }
  // The host master was written (no update in flight): its staging copy, and the device segments' master (Note
  // [optimizer split]), brought up to date with it.
  Status master_written();
  // The host moments were written (no update in flight): the device segments' brought up to date (Note [optimizer
  // split]; nothing to do without one).
  Status state_written();
  // Note [optimizer split]: the device segments' master and moments copied into their home in the host state (waits
  // for every stream first), so that the host state is the whole optimizer's; nothing to do without a split.
  Status device_part_to_host();
  // Segment s's compute copy from the current host master, into `out` (as many elements of the compute dtype):
  // what an upload of it sends (CPU optimizer, unsharded).
  void compute_copy(int segment, void* out) const;
  // Note [gradients summed on the host]: kGradsStage (d2h stream), kHostGradAdd, kHostNormPart, kHostNormTotal (host
  // stream). first: the step's first micro-batch (it writes the host gradients rather than adding to them).
  void grads_stage(int segment, int slot);
  void host_grad_add(int segment, int slot, bool first);
  void host_norm_part(int segment);
  void host_norm_total();
  // Whether some segment's gradients are summed on the host (the squared norm is then whole only on the host, after
  // kHostNormTotal); where kHostNormTotal also writes it, for the caller's readback of the step (set before the
  // step's passes are enqueued; null: nowhere).
  bool sums_on_host() const { return !buf_.host_summed.empty(); }
  void set_norm_readback(float* dst) { norm_readback_ = dst; }
  // After the step's operations: the state sets swap roles when the step speculated.
  void end_step();
  bool speculating() const { return speculate_; }

  // The moments, wherever they live (waits for every stream first); n = the number of parameters. Sharded (Note
  // [sharded optimizer]): only this rank's shares are written (the rest of m and v is zero) and read.
  Status download_state(float* m, float* v);
  Status upload_state(const float* m, const float* v);
  // The whole master from the host (CPU optimizer; waits for every stream first). Sharded: this rank's shares where
  // the whole model has them, zero elsewhere (as download_state).
  Status download_master(float* whole);
  // The host master (this rank's shares of `whole`, sharded), its staging copy and the device segments' master from
  // the whole model's values (CPU optimizer; no update in flight).
  Status upload_master(const float* whole);

 private:
  void plan_device_calls();
  // Note [sharded optimizer]: this rank's shares between the compact host layout (each segment's at moment_base_)
  // and the whole model's (zero where other ranks own).
  void expand_shares(const float* compact, float* whole) const;
  void take_shares(const float* whole, float* compact) const;
  // Note [optimizer split]: the device segments' master from the host's current set (no update in flight).
  Status master_to_device();
  void update_segment(int segment, const HostAdamState& from, const HostAdamState& to, float lr, int64_t step,
                      float grad_norm_sq, float grad_clip, int ring_slot = -1);

  Backend& be_;
  const Model& model_;
  float* norm_readback_ = nullptr;
  OptimizerPlacement where_;
  AdamWHyper hyper_;
  OptimizerBuffers buf_;
  std::vector<ParamInfo> layout_;
  ParamSegments segs_;
  std::vector<std::vector<size_t>> seg_params_;  // [segment] indices into layout_
  // Note [device update by segment]: one adamw_update call a segment (more when it has more pieces than a call).
  struct DeviceCall {
    int segment = 0;
    int64_t offset = 0, numel = 0;  // in the flat buffers
    int64_t moment_offset = 0;      // in m and v (offset, unless sharded)
    AdamWArgs pieces;               // only the pieces are set
  };
  OptimizerShard shard_;
  std::vector<int64_t> moment_base_;  // [segment] where its share starts in m and v (sharded)
  std::vector<DeviceCall> device_calls_;
  int64_t step_ = 0;
  float lr_ = 0.0f;
  bool speculate_ = false;          // this step speculates
  std::vector<char> speculated_;   // [segment] this step's update already computed with a clip factor of 1
  bool any_speculated_ = false;
  HostAdamState from_, to_;        // the sets of this step's update
  int cur_ = 0;
  std::atomic<int64_t> spec_kept_{0}, spec_redone_{0};
};

}  // namespace tt
