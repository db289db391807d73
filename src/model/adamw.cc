#include "model/adamw.h"

namespace tt {

std::vector<AllocRequest> AdamW::allocation_list(int64_t num_params, DType dtype) {
  return {AllocRequest{"adam.m", {num_params}, dtype, TensorClass::kOptimState},
          AllocRequest{"adam.v", {num_params}, dtype, TensorClass::kOptimState},
          AllocRequest{"adam.grad_norm_sq", {1}, dtype, TensorClass::kWorkspace}};
}

Result<std::unique_ptr<AdamW>> AdamW::create(Backend& backend, std::vector<ParamInfo> layout, Tensor params,
                                             Tensor grads, AdamWHyper hyper, Tensor compute_copy) {
  if (compute_copy.raw() == params.raw()) compute_copy = Tensor();  // the master is what the kernels read
  std::unique_ptr<AdamW> opt(new AdamW(backend, std::move(layout), params, grads, hyper, compute_copy));
  const auto reqs = allocation_list(params.numel(), params.dtype());
  TT_ASSIGN_OR_RETURN(opt->m_, backend.pool().allocate(reqs[0].shape, reqs[0].dtype, reqs[0].cls, reqs[0].name));
  TT_ASSIGN_OR_RETURN(opt->v_, backend.pool().allocate(reqs[1].shape, reqs[1].dtype, reqs[1].cls, reqs[1].name));
  TT_ASSIGN_OR_RETURN(opt->norm_sq_,
                      backend.pool().allocate(reqs[2].shape, reqs[2].dtype, reqs[2].cls, reqs[2].name));
  backend.fill_zero(opt->m_, backend.compute_stream());
  backend.fill_zero(opt->v_, backend.compute_stream());
  backend.fill_zero(opt->norm_sq_, backend.compute_stream());
  TT_TRY(backend.compute_stream().synchronize());
  return opt;
}

AdamW::~AdamW() {
  (void)be_.synchronize_all();
  if (norm_sq_.raw()) be_.pool().free(norm_sq_);
  if (v_.raw()) be_.pool().free(v_);
  if (m_.raw()) be_.pool().free(m_);
}

void AdamW::step(float lr) {
  ++step_;
  be_.sum_squares(norm_sq_, grads_);
  for (const ParamInfo& p : layout_) {
    AdamWArgs args;
    args.lr = lr;
    args.beta1 = hyper_.beta1;
    args.beta2 = hyper_.beta2;
    args.eps = hyper_.eps;
    args.weight_decay = p.decay ? hyper_.weight_decay : 0.0f;
    args.step = step_;
    args.grad_clip = hyper_.grad_clip;
    be_.adamw_update(params_.view(p.offset, p.shape), grads_.view(p.offset, p.shape), m_.view(p.offset, p.shape),
                     v_.view(p.offset, p.shape), norm_sq_, args);
  }
  if (compute_copy_.raw()) be_.convert(compute_copy_, params_);
}

}  // namespace tt
