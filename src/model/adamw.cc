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

size_t AdamW::host_bytes(int64_t num_params, bool on_cpu, bool speculate, DType compute) {
  if (!on_cpu) return 0;
  const size_t f32 = memory::host_alloc_size(static_cast<size_t>(num_params) * sizeof(float));
  // grads, m, v; the norm (the master is the model's: Note [master on host]); with speculation a second master,
  // m, v and staging copy.
  size_t bytes = 3 * f32 + memory::host_alloc_size(sizeof(float));
  if (speculate) {
    bytes += 3 * f32;
    if (compute != DType::kF32) bytes += memory::host_alloc_size(static_cast<size_t>(num_params) * dtype_size(compute));
  }
  return bytes;
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
    const bool bf16 = gpt.host_compute() != gpt.host_master();
    HostState& s0 = opt->sets_[0];
    s0.master = gpt.host_master();
    if (bf16) s0.bf16 = static_cast<uint16_t*>(gpt.host_compute());
    TT_ASSIGN_OR_RETURN(opt->norm_sq_, take(reqs[0]));
    TT_ASSIGN_OR_RETURN(opt->parts_, take(reqs[1]));
    const size_t n = static_cast<size_t>(gpt.num_params());
    const size_t bytes = n * sizeof(float);
    auto host = [&](float** p, TensorClass cls, const char* name) -> Status {
      TT_ASSIGN_OR_RETURN(void* q, backend.allocate_host(bytes, cls, name));
      *p = static_cast<float*>(q);
      return Status::ok();
    };
    TT_TRY(host(&opt->h_grads_, TensorClass::kGrad, "adam.grads"));
    TT_TRY(host(&s0.m, TensorClass::kOptimState, "adam.m"));
    TT_TRY(host(&s0.v, TensorClass::kOptimState, "adam.v"));
    std::memset(s0.m, 0, bytes);
    std::memset(s0.v, 0, bytes);
    if (hyper.speculate) {
      HostState& s1 = opt->sets_[1];  // written whole by every step before it is read
      TT_TRY(host(&s1.master, TensorClass::kParam, "adam.master.next"));
      TT_TRY(host(&s1.m, TensorClass::kOptimState, "adam.m.next"));
      TT_TRY(host(&s1.v, TensorClass::kOptimState, "adam.v.next"));
      if (bf16) {
        TT_ASSIGN_OR_RETURN(void* q, backend.allocate_host(n * sizeof(uint16_t), TensorClass::kParam,
                                                           "params.compute.host.next"));
        s1.bf16 = static_cast<uint16_t*>(q);
      }
    } else {
      opt->sets_[1] = s0;  // one set, updated in place
    }
    TT_ASSIGN_OR_RETURN(void* nq, backend.allocate_host(sizeof(float), TensorClass::kWorkspace, "adam.norm"));
    opt->h_norm_ = static_cast<float*>(nq);
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
      seg.grads_in = backend.create_event();
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
  // Set 0's master and staging copy are the model's; set 1 is ours when we speculate. If set 1 is current, its
  // master and staging copy go back into the model's before set 1 is freed, and the model points at them again.
  if (hyper_.speculate && cur_ == 1) {
    const size_t n = static_cast<size_t>(gpt_.num_params());
    std::memcpy(sets_[0].master, sets_[1].master, n * sizeof(float));
    if (sets_[1].bf16) std::memcpy(sets_[0].bf16, sets_[1].bf16, n * sizeof(uint16_t));
    gpt_.set_host_copies(sets_[0].master, sets_[0].bf16 ? static_cast<void*>(sets_[0].bf16)
                                                        : static_cast<void*>(sets_[0].master));
  }
  if (hyper_.speculate) {
    be_.free_host(sets_[1].bf16);
    for (float* p : {sets_[1].v, sets_[1].m, sets_[1].master}) be_.free_host(p);
  }
  for (float* p : {h_norm_, sets_[0].v, sets_[0].m, h_grads_}) be_.free_host(p);
}

Status AdamW::download_state(float* m, float* v) {
  const size_t bytes = static_cast<size_t>(gpt_.num_params()) * sizeof(float);
  if (hyper_.on_cpu) {
    TT_TRY(be_.synchronize_all());
    std::memcpy(m, sets_[cur_].m, bytes);
    std::memcpy(v, sets_[cur_].v, bytes);
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
    std::memcpy(sets_[cur_].m, m, bytes);
    std::memcpy(sets_[cur_].v, v, bytes);
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
  if (!hyper_.speculate || !prepared_) return;
  // Note [speculative update]: this step's update of the segment now, with a clip factor of 1, into the other set.
  d2h.record(*seg.grads_in);
  Stream& host = be_.host_stream();
  host.wait(*seg.grads_in);
  const int c2 = prof_ ? prof_->span_begin(host, (seg.name + " (speculative)").c_str(), 0) : -1;
  be_.enqueue_host([this, &seg, lr = next_lr_, step = step_ + 1, from = sets_[cur_], to = sets_[cur_ ^ 1]] {
    update_segment(seg, from, to, lr, step, 0.0f, 0.0f);
  });
  if (prof_) prof_->span_end(host, c2);
  seg.speculated = true;
}

void AdamW::update_segment(const Segment& seg, const HostState& from, const HostState& to, float lr, int64_t step,
                           float grad_norm_sq, float grad_clip) {
  for (size_t i : seg.params) {
    const ParamInfo& p = layout_[i];
    const int64_t o = p.offset;
    cpu::adamw_update_f32(cpu::AdamWArrays{from.master + o, h_grads_ + o, from.m + o, from.v + o, to.master + o,
                                           to.m + o, to.v + o, to.bf16 ? to.bf16 + o : nullptr},
                          p.shape.numel(), grad_norm_sq, lr, hyper_.beta1, hyper_.beta2, hyper_.eps,
                          p.decay ? hyper_.weight_decay : 0.0f, step, grad_clip);
  }
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
  // Note [speculative update]: from the current set into the other one, which becomes current (the model's uploads
  // enqueued from now on read it), when some segment was speculated this step; otherwise (speculation off, or not
  // tried this step) the current set is updated in place: an update into the other set would move more memory (its
  // lines are read before they are written), and the host update is bound by memory bandwidth.
  bool speculated = false;
  for (const Segment& seg : segments_) speculated = speculated || seg.speculated;
  const HostState from = sets_[cur_], to = speculated ? sets_[cur_ ^ 1] : sets_[cur_];
  for (Segment& seg : segments_) {
    const int c2 = prof_ ? prof_->span_begin(host, seg.name.c_str(), 0) : -1;
    // The master and, with bf16 compute, its bf16 copy in the same pass (Note [master on host]). A speculated
    // segment is redone from the same state only if the norm turns out to be above the clip.
    if (seg.speculated) {
      TT_CHECK(lr == next_lr_, "step(%g) after prepare_step(%g)", lr, next_lr_);
      be_.enqueue_host([this, lr, step = step_, &seg, from, to] {
        if (cpu::adamw_clip_factor(*h_norm_, hyper_.grad_clip) == 1.0f) {
          ++spec_kept_;
          return;
        }
        ++spec_redone_;
        update_segment(seg, from, to, lr, step, *h_norm_, hyper_.grad_clip);
      });
    } else {
      be_.enqueue_host([this, lr, step = step_, &seg, from, to] {
        update_segment(seg, from, to, lr, step, *h_norm_, hyper_.grad_clip);
      });
    }
    seg.speculated = false;
    if (prof_) prof_->span_end(host, c2);
    host.record(*seg.updated);
    seg.pending = true;
    // A streamed block's compute copy is uploaded by the model, ahead of its next use (Note [streamed parameters]).
    if (gpt_.params_streamed(static_cast<int>(&seg - segments_.data()))) continue;
    h2d.wait(*seg.updated);
    const size_t esize = to.bf16 ? sizeof(uint16_t) : sizeof(float);
    const int c3 = prof_ ? prof_->span_begin(h2d, "params to device", seg.count * static_cast<int64_t>(esize)) : -1;
    const void* src = to.bf16 ? static_cast<const void*>(to.bf16 + seg.offset)
                              : static_cast<const void*>(to.master + seg.offset);
    be_.copy_h2d(gpt_.compute_segment(static_cast<int>(&seg - segments_.data())), src, h2d);
    if (prof_) prof_->span_end(h2d, c3);
    h2d.record(*seg.in);
  }
  prepared_ = false;
  if (speculated) {
    cur_ ^= 1;
    gpt_.set_host_copies(to.master, to.bf16 ? static_cast<void*>(to.bf16) : static_cast<void*>(to.master));
  }
}

}  // namespace tt
