// model/adamw: AdamW over a model's flat parameter buffer with global-norm gradient clipping, as PyTorch's
// torch.optim.AdamW + clip_grad_norm_: weight decay only on parameters marked `decay` (matrices and embeddings).
// Moments are optimizer state on the device; the gradient norm stays on the device too (no host round trip).
//
//   TT_ASSIGN_OR_RETURN(auto opt, AdamW::create(backend, gpt->params(), gpt->flat_params(), gpt->flat_grads(), hp,
//                                                gpt->compute_params()));
//   opt->step(lr);   // enqueued; step count kept inside
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"

namespace tt {

struct AdamWHyper {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // 0 disables clipping
};

class AdamW {
 public:
  // Device buffers the optimizer needs for `num_params` parameters of dtype.
  static std::vector<AllocRequest> allocation_list(int64_t num_params, DType dtype);
  // params and grads are the master (fp32) buffers; compute_copy, when given, is refreshed from params after every
  // step (the bf16 weights the kernels read, Note [mixed precision] in model/gpt.h).
  static Result<std::unique_ptr<AdamW>> create(Backend& backend, std::vector<ParamInfo> layout, Tensor params,
                                               Tensor grads, AdamWHyper hyper, Tensor compute_copy = Tensor());
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // Enqueues: global gradient norm, then one update of every parameter with learning rate lr.
  void step(float lr);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t step) { step_ = step; }
  // Sum of squared gradients of the last step() (device scalar).
  Tensor grad_norm_sq() const { return norm_sq_; }
  Tensor m() const { return m_; }
  Tensor v() const { return v_; }

 private:
  AdamW(Backend& backend, std::vector<ParamInfo> layout, Tensor params, Tensor grads, AdamWHyper hyper,
        Tensor compute_copy)
      : be_(backend), layout_(std::move(layout)), params_(params), grads_(grads), compute_copy_(compute_copy),
        hyper_(hyper) {}
  Backend& be_;
  std::vector<ParamInfo> layout_;
  Tensor params_, grads_, compute_copy_, m_, v_, norm_sq_;
  AdamWHyper hyper_;
  int64_t step_ = 0;
};

}  // namespace tt
