#include "model/adamw.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/kernels.h"

namespace tt {

std::vector<AllocRequest> AdamW::allocation_list(int64_t num_params, DType dtype, bool on_cpu, int segments) {
  std::vector<AllocRequest> r;
  if (!on_cpu) {
    r.push_back(AllocRequest{"adam.m", {num_params}, dtype, TensorClass::kOptimState});
    r.push_back(AllocRequest{"adam.v", {num_params}, dtype, TensorClass::kOptimState});
  }
  r.push_back(AllocRequest{"adam.grad_norm_sq", {1}, dtype, TensorClass::kWorkspace});
  r.push_back(AllocRequest{"adam.norm_parts", {segments}, dtype, TensorClass::kWorkspace});
  return r;
}

size_t AdamW::host_bytes(int64_t num_params, bool on_cpu) {
  if (!on_cpu) return 0;
  // grads, m, v; the norm (the master is the model's: Note [master on host])
  return 3 * memory::host_alloc_size(static_cast<size_t>(num_params) * sizeof(float)) +
         memory::host_alloc_size(sizeof(float));
}

Result<std::unique_ptr<AdamW>> AdamW::create(Gpt& gpt, AdamWHyper hyper) {
  Backend& backend = gpt.backend();
  std::unique_ptr<AdamW> opt(new AdamW(gpt, hyper));
  bool streamed = false;
  for (int s = 0; s < gpt.num_segments(); ++s) streamed = streamed || gpt.grads_streamed(s);
  TT_RETURN_IF(streamed && !hyper.on_cpu, kInvalidArgument, "streamed gradients need the CPU optimizer");
  TT_RETURN_IF(hyper.on_cpu != gpt.master_on_host(), kInvalidArgument,
               "the %s optimizer needs the model's master on the %s (GptOptions::master_on_host)",
               hyper.on_cpu ? "CPU" : "device", hyper.on_cpu ? "host" : "device");
  const auto reqs = allocation_list(gpt.num_params(), gpt.master_dtype(), hyper.on_cpu, gpt.num_segments());
  auto take = [&](const AllocRequest& r) { return backend.pool().allocate(r.shape, r.dtype, r.cls, r.name); };
  if (hyper.on_cpu) {
    // The model's host master (f32, checked by Gpt::create) and its staging copy in the compute dtype.
    opt->h_master_ = gpt.host_master();
    if (gpt.host_compute() != gpt.host_master()) opt->h_bf16_ = static_cast<uint16_t*>(gpt.host_compute());
    TT_ASSIGN_OR_RETURN(opt->norm_sq_, take(reqs[0]));
    TT_ASSIGN_OR_RETURN(opt->parts_, take(reqs[1]));
    const size_t bytes = static_cast<size_t>(gpt.num_params()) * sizeof(float);
    float** bufs[] = {&opt->h_grads_, &opt->h_m_, &opt->h_v_};
    const char* names[] = {"adam.grads", "adam.m", "adam.v"};
    const TensorClass classes[] = {TensorClass::kGrad, TensorClass::kOptimState, TensorClass::kOptimState};
    for (int i = 0; i < 3; ++i) {
      TT_ASSIGN_OR_RETURN(void* p, backend.allocate_host(bytes, classes[i], names[i]));
      *bufs[i] = static_cast<float*>(p);
    }
    TT_ASSIGN_OR_RETURN(void* n, backend.allocate_host(sizeof(float), TensorClass::kWorkspace, "adam.norm"));
    opt->h_norm_ = static_cast<float*>(n);
    std::memset(opt->h_m_, 0, bytes);
    std::memset(opt->h_v_, 0, bytes);
    opt->grads_ready_ = backend.create_event();
    opt->grads_out_ = backend.create_event();
    // Segments in flat-buffer (= forward) order: embeddings, each block, the final LayerNorm.
    int layers = 0;
    for (const ParamInfo& p : opt->layout_) layers = std::max(layers, p.layer + 1);
    opt->segments_.resize(static_cast<size_t>(layers) + 2);
    for (size_t i = 0; i < opt->layout_.size(); ++i) {
      const ParamInfo& p = opt->layout_[i];
      const size_t s = p.layer >= 0 ? static_cast<size_t>(p.layer) + 1
                       : p.name.rfind("lnf", 0) == 0 ? static_cast<size_t>(layers) + 1 : 0;
      Segment& seg = opt->segments_[s];
      if (seg.params.empty()) seg.offset = p.offset;
      TT_RETURN_IF(p.offset != seg.offset + seg.count, kInternal, "parameter %s is not contiguous with its segment",
                   p.name.c_str());
      seg.count += p.shape.numel();
      seg.params.push_back(i);
    }
    for (size_t s = 0; s < opt->segments_.size(); ++s) {
      Segment& seg = opt->segments_[s];
      seg.updated = backend.create_event();
      seg.in = backend.create_event();
      seg.grads = backend.create_event();
      seg.name = s == 0 ? "adamw embeddings" : s == opt->segments_.size() - 1 ? "adamw lnf"
                                                                             : "adamw h." + std::to_string(s - 1);
    }
  } else {
    TT_ASSIGN_OR_RETURN(opt->m_, take(reqs[0]));
    TT_ASSIGN_OR_RETURN(opt->v_, take(reqs[1]));
    TT_ASSIGN_OR_RETURN(opt->norm_sq_, take(reqs[2]));
    TT_ASSIGN_OR_RETURN(opt->parts_, take(reqs[3]));
    backend.fill_zero(opt->m_, backend.compute_stream());
    backend.fill_zero(opt->v_, backend.compute_stream());
  }
  backend.fill_zero(opt->norm_sq_, backend.compute_stream());
  TT_TRY(backend.compute_stream().synchronize());
  return opt;
}

AdamW::~AdamW() {
  (void)be_.synchronize_all();
  if (parts_.raw()) be_.pool().free(parts_);
  if (norm_sq_.raw()) be_.pool().free(norm_sq_);
  if (v_.raw()) be_.pool().free(v_);
  if (m_.raw()) be_.pool().free(m_);
  for (float* p : {h_norm_, h_v_, h_m_, h_grads_}) be_.free_host(p);  // h_master_ and h_bf16_ are the model's
}

Status AdamW::download_state(float* m, float* v) {
  const size_t bytes = static_cast<size_t>(gpt_.num_params()) * sizeof(float);
  if (hyper_.on_cpu) {
    TT_TRY(be_.synchronize_all());
    std::memcpy(m, h_m_, bytes);
    std::memcpy(v, h_v_, bytes);
    return Status::ok();
  }
  be_.copy_d2h(m, m_, be_.compute_stream());
  be_.copy_d2h(v, v_, be_.compute_stream());
  return be_.compute_stream().synchronize();
}

Status AdamW::upload_state(const float* m, const float* v) {
  const size_t bytes = static_cast<size_t>(gpt_.num_params()) * sizeof(float);
  if (hyper_.on_cpu) {
    TT_TRY(be_.synchronize_all());
    std::memcpy(h_m_, m, bytes);
    std::memcpy(h_v_, v, bytes);
    return Status::ok();
  }
  be_.copy_h2d(m_, m, be_.compute_stream());
  be_.copy_h2d(v_, v, be_.compute_stream());
  return be_.compute_stream().synchronize();
}

void AdamW::step(float lr) {
  ++step_;
  // The norm from each segment's sum of squares (those the backward announced to the CPU optimizer are done).
  for (int s = 0; s < gpt_.num_segments(); ++s) {
    if (hyper_.on_cpu && segments_[static_cast<size_t>(s)].grads_sent) continue;
    be_.sum_squares(parts_.view(s, {1}), gpt_.grad_segment(s));
  }
  be_.sum_in_order(norm_sq_, parts_);
  if (hyper_.on_cpu) {
    step_on_cpu(lr);
  } else {
    for (const ParamInfo& p : layout_) {
      AdamWArgs args;
      args.lr = lr;
      args.beta1 = hyper_.beta1;
      args.beta2 = hyper_.beta2;
      args.eps = hyper_.eps;
      args.weight_decay = p.decay ? hyper_.weight_decay : 0.0f;
      args.step = step_;
      args.grad_clip = hyper_.grad_clip;
      be_.adamw_update(params_.view(p.offset, p.shape), gpt_.grad(static_cast<size_t>(&p - layout_.data())),
                       m_.view(p.offset, p.shape), v_.view(p.offset, p.shape), norm_sq_, args);
    }
  }
  // On the CPU each segment's compute copy arrives on the h2d stream, and gate() waits for it.
  if (!hyper_.on_cpu) gpt_.refresh_compute_params();
}

void AdamW::gate(int segment, Stream& reader) {
  if (!hyper_.on_cpu) return;
  Segment& seg = segments_[static_cast<size_t>(segment)];
  if (!seg.pending) return;
  // A streamed block's reader is its upload (h2d), which needs the host copy updated; any other reader needs the
  // updated device copy. Once one reader of this step has waited, later readers are ordered after it.
  if (gpt_.params_streamed(segment)) {
    reader.wait(*seg.updated);
  } else {
    if (prof_ && &reader == &be_.compute_stream()) prof_->mark("wait cpu optimizer");
    reader.wait(*seg.in);
  }
  seg.pending = false;
}

void AdamW::grads_done(int segment) {
  if (!hyper_.on_cpu) return;
  Segment& seg = segments_[static_cast<size_t>(segment)];
  Stream& d2h = be_.d2h_stream();
  // Its share of the norm now: a streamed segment's slot is reused once the copy below is done.
  be_.sum_squares(parts_.view(segment, {1}), gpt_.grad_segment(segment));
  be_.compute_stream().record(*seg.grads);
  d2h.wait(*seg.grads);
  d2h.wait(*seg.updated);  // the previous update of this segment read h_grads_ (a no-op before the first)
  const int c = prof_ ? prof_->span_begin(d2h, "grads to host", seg.count * static_cast<int64_t>(sizeof(float))) : -1;
  be_.copy_d2h(h_grads_ + seg.offset, gpt_.grad_segment(segment), d2h);
  if (prof_) prof_->span_end(d2h, c);
  seg.grads_sent = true;
}

void AdamW::wait_all() {
  for (size_t s = 0; s < segments_.size(); ++s) gate(static_cast<int>(s), be_.compute_stream());
}

// Gradients and norm out (d2h); then, segment by segment in forward order, the update on the host stream and the
// parameters back on the h2d stream, each stage waiting for the one before through an event. The compute stream
// waits for a segment in gate().
void AdamW::step_on_cpu(float lr) {
  wait_all();  // normally nothing: the forward gated every segment
  Stream &compute = be_.compute_stream(), &d2h = be_.d2h_stream(), &h2d = be_.h2d_stream(),
         &host = be_.host_stream();
  // The norm (computed after the backward), and the gradients of segments the backward did not announce.
  compute.record(*grads_ready_);
  d2h.wait(*grads_ready_);
  for (size_t si = 0; si < segments_.size(); ++si) {
    Segment& seg = segments_[si];
    if (!seg.grads_sent) {
      const int c = prof_ ? prof_->span_begin(d2h, "grads to host", seg.count * static_cast<int64_t>(sizeof(float)))
                          : -1;
      be_.copy_d2h(h_grads_ + seg.offset, gpt_.grad_segment(static_cast<int>(si)), d2h);
      if (prof_) prof_->span_end(d2h, c);
    }
    seg.grads_sent = false;
  }
  be_.copy_d2h(h_norm_, norm_sq_, d2h);
  d2h.record(*grads_out_);
  host.wait(*grads_out_);
  for (Segment& seg : segments_) {
    const int c2 = prof_ ? prof_->span_begin(host, seg.name.c_str(), 0) : -1;
    // The master and, with bf16 compute, its bf16 copy in the same pass (Note [master on host]).
    be_.enqueue_host([this, lr, step = step_, &seg] {
      for (size_t i : seg.params) {
        const ParamInfo& p = layout_[i];
        cpu::adamw_update_f32(h_master_ + p.offset, h_grads_ + p.offset, h_m_ + p.offset, h_v_ + p.offset,
                              h_bf16_ ? h_bf16_ + p.offset : nullptr, p.shape.numel(), *h_norm_, lr, hyper_.beta1,
                              hyper_.beta2, hyper_.eps, p.decay ? hyper_.weight_decay : 0.0f, step, hyper_.grad_clip);
      }
    });
    if (prof_) prof_->span_end(host, c2);
    host.record(*seg.updated);
    seg.pending = true;
    // A streamed block's compute copy is uploaded by the model, ahead of its next use (Note [streamed parameters]).
    if (gpt_.params_streamed(static_cast<int>(&seg - segments_.data()))) continue;
    h2d.wait(*seg.updated);
    const size_t esize = h_bf16_ ? sizeof(uint16_t) : sizeof(float);
    const int c3 = prof_ ? prof_->span_begin(h2d, "params to device", seg.count * static_cast<int64_t>(esize)) : -1;
    const void* src = h_bf16_ ? static_cast<const void*>(h_bf16_ + seg.offset)
                              : static_cast<const void*>(h_master_ + seg.offset);
    be_.copy_h2d(gpt_.compute_segment(static_cast<int>(&seg - segments_.data())), src, h2d);
    if (prof_) prof_->span_end(h2d, c3);
    h2d.record(*seg.in);
  }
}

}  // namespace tt
