// model/adamw: AdamW over a model's parameters with global-norm gradient clipping, as PyTorch's
// torch.optim.AdamW + clip_grad_norm_: weight decay only on parameters marked `decay` (matrices and embeddings).
//
// On the device (default) the moments are device buffers and the gradient norm stays on the device. On the CPU
// (AdamWHyper::on_cpu, a plan's "optimizer": "cpu") the moments live in the host pool and the master is the model's
// host master (Note [master on host] in model/gpt.h; the device keeps only the compute copy). Each segment's
// gradients go to the host on the d2h stream as soon as the backward has finished them (grads_done(), called by the
// model; a streamed block's slot is free again once they have left), the norm after the backward. The host stream
// runs the vectorised AdamW (backend/cpu/kernels.h: adamw_update_f32, which also writes the bf16 compute copy in the
// same pass) one segment at a time in forward order (embeddings, block 0, ..., block L-1, final LayerNorm), and each
// segment's compute copy goes back on the h2d stream as soon as it is updated. The compute stream waits for a
// segment only when the next forward first needs it (gate(), called by the model), so the update of later blocks
// overlaps the forward of earlier ones. On the CPU backend the update is the very function the device AdamW runs,
// so results are bit-identical.
//
// Note [speculative update] (AdamWHyper::speculate, --speculative-update). Clipping needs the norm of all gradients,
// known only after the backward, so the update above cannot start before it. But when the norm is under the clip
// the clip factor is exactly 1, and the update is the one computed with no clipping at all. So each segment is
// updated as soon as its gradients reach the host, during the backward, with factor 1, from the current state set
// into a second one (master, moments, staging copy), leaving the current one intact. After the backward the host
// checks the factor: 1 keeps the update; anything else redoes it from the intact state with the true factor. The
// sets then swap roles (the model's uploads enqueued from then on read the new one: Gpt::set_host_copies). Either
// way the result is the update computed after the backward, bit for bit. The trainer guesses per step (prepare_step)
// from the previous step's norm, so a run whose norms stay above the clip stops paying for wrong guesses. Costs the
// second set in host memory: 12 bytes a parameter, 14 with bf16 compute.
//
//   TT_ASSIGN_OR_RETURN(auto opt, AdamW::create(*gpt, hp));
//   opt->step(lr);   // enqueued; step count kept inside
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"
#include "model/op_profiler.h"

namespace tt {

struct AdamWHyper {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // 0 disables clipping
  bool on_cpu = false;     // moments and the fp32 master in host memory, updated on the host stream
  // On the CPU: update each segment as soon as its gradients arrive, during the backward (Note [speculative update]).
  bool speculate = false;
};

class AdamW {
 public:
  // Device buffers the optimizer needs for `num_params` parameters of dtype in `segments` gradient segments.
  static std::vector<AllocRequest> allocation_list(int64_t num_params, DType dtype, bool on_cpu, int segments);
  // Host-pool bytes it takes (on_cpu: master, gradients, m, v and the norm).
  static size_t host_bytes(int64_t num_params, bool on_cpu, bool speculate = false, DType compute = DType::kF32);
  // Over the model's master parameters and its gradient segments; the compute copy (bf16 compute) is refreshed from
  // the master after every step (Note [mixed precision] in model/gpt.h). The global gradient norm is the sum, in
  // segment order, of each segment's sum of squares (Note [gradient segments]).
  static Result<std::unique_ptr<AdamW>> create(Gpt& gpt, AdamWHyper hyper);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // Enqueues: global gradient norm, then one update of every parameter with learning rate lr.
  void step(float lr);
  // Before the forward-backward of the step that step(lr) will finish: the learning rate, which the speculative
  // update needs during the backward, and whether to speculate at all this step (the caller's guess that the norm
  // will be under the clip). Without it that step is not speculated.
  void prepare_step(float lr, bool speculate = true) {
    next_lr_ = lr;
    prepared_ = speculate;
  }
  // Segment updates of the speculative update kept, and redone because the norm was above the clip.
  int64_t speculation_kept() const { return spec_kept_.load(); }
  int64_t speculation_redone() const { return spec_redone_.load(); }
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t step) { step_ = step; }
  // Sum of squared gradients of the last step() (device scalar).
  Tensor grad_norm_sq() const { return norm_sq_; }
  // The moments, wherever they live (blocks until pending updates are done); n = the number of parameters.
  Status download_state(float* m, float* v);
  Status upload_state(const float* m, const float* v);
  bool on_cpu() const { return hyper_.on_cpu; }
  // Host-stream spans of the CPU update in the trace (nullptr: none).
  void set_profiler(OpProfiler* p) { prof_ = p; }
  // On the CPU: makes `reader` wait for this step's update of segment s (0: embeddings, 1 + l: block l, L + 1: final
  // LayerNorm), if one is pending: for the updated device copy, or for a streamed block (Note [streamed parameters]
  // in model/gpt.h) for the updated host copy its upload reads. The model calls it before a segment's first read in
  // a pass (Gpt::set_param_gate). A no-op on the device.
  void gate(int segment, Stream& reader);
  // gate() for every segment: before anything reads all parameters (checkpoints, the end of a run).
  void wait_all();
  // On the CPU: the backward has finished segment s's gradients; they go to the host on the d2h stream now, while
  // the backward goes on (Gpt::set_grads_done). Segments not announced are sent by step().
  void grads_done(int segment);

 private:
  AdamW(Gpt& gpt, AdamWHyper hyper)
      : gpt_(gpt), be_(gpt.backend()), layout_(gpt.params()), params_(gpt.flat_params()), hyper_(hyper) {}
  void step_on_cpu(float lr);
  Gpt& gpt_;
  Backend& be_;
  std::vector<ParamInfo> layout_;
  Tensor params_, m_, v_, norm_sq_, parts_;  // params_: the device master (device optimizer only)
  AdamWHyper hyper_;
  int64_t step_ = 0;
  // on_cpu: host buffers (host pool) and the events ordering the round trip.
  // The state on the host: the master, the moments and the staging copy of the compute copy (bf16 with bf16
  // compute; the master itself with f32). Set 0 holds the model's master and staging copy; with speculation set 1
  // is a second one, and the sets alternate each step (Note [speculative update]).
  struct HostState {
    float *master = nullptr, *m = nullptr, *v = nullptr;
    uint16_t* bf16 = nullptr;  // null with f32 compute
  };
  HostState sets_[2];
  int cur_ = 0;  // the set holding the current state
  float *h_grads_ = nullptr, *h_norm_ = nullptr;
  float next_lr_ = 0.0f;
  bool prepared_ = false;  // prepare_step() was called for the coming step
  std::atomic<int64_t> spec_kept_{0}, spec_redone_{0};
  // Enqueues nothing: the update of one segment, from `from` into `to` (the same set: in place).
  struct Segment;
  void update_segment(const Segment& seg, const HostState& from, const HostState& to, float lr, int64_t step,
                      float grad_norm_sq, float grad_clip);
  std::unique_ptr<Event> grads_ready_, grads_out_;
  struct Segment {
    int64_t offset = 0, count = 0;      // elements of the flat buffer
    std::vector<size_t> params;         // indices into layout_
    std::unique_ptr<Event> updated, in;  // host update done; parameters back on the device
    std::unique_ptr<Event> grads;        // the segment's gradients complete on the compute stream
    bool pending = false;
    bool grads_sent = false;             // this step's gradients already on their way to the host
    bool speculated = false;             // this step's update already computed, with a clip factor of 1
    std::unique_ptr<Event> grads_in;     // the segment's gradients are in h_grads_ (d2h stream)
    std::string name;
  };
  std::vector<Segment> segments_;
  OpProfiler* prof_ = nullptr;
};

}  // namespace tt
