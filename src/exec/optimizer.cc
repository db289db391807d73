#include "exec/optimizer.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <vector>

#include "core/bf16.h"
#include "host/adamw.h"

namespace tt {

Optimizer::Optimizer(Backend& backend, const Model& model, OptimizerPlacement where, AdamWHyper hyper,
                     OptimizerBuffers buf, OptimizerShard shard)
    : be_(backend), model_(model), where_(where), hyper_(hyper), buf_(buf), layout_(model.params()),
      segs_(model.segments()), shard_(shard) {
  moment_base_.assign(static_cast<size_t>(segs_.count()), 0);
  for (int s = 0, e = 0; s < segs_.count(); ++s) {
    moment_base_[static_cast<size_t>(s)] = shard_.on() ? e : segs_.offset[static_cast<size_t>(s)];
    e += static_cast<int>((segs_.size[static_cast<size_t>(s)] + shard_.ranks - 1) / shard_.ranks);
  }
  seg_params_.resize(static_cast<size_t>(segs_.count()));
  for (size_t i = 0; i < layout_.size(); ++i) seg_params_[static_cast<size_t>(segs_.of_param[i])].push_back(i);
  speculated_.assign(static_cast<size_t>(segs_.count()), 0);
  // Note [sharded optimizer]: sharded, the host state holds this rank's shares only, each segment's at moment_base_.
  const size_t bytes =
      static_cast<size_t>(shard_.on() ? OptimizerShard::moment_elements(segs_, shard_.ranks) : model.num_params()) *
      sizeof(float);
  if (on_cpu()) {
    TT_CHECK(buf_.sets[0].master && buf_.sets[0].m && buf_.sets[0].v &&
                 (buf_.host_grads || buf_.grads_in_place || !buf_.grad_ring.empty()) && buf_.host_norm,
             "the CPU optimizer's host state is not allocated");
    TT_CHECK(buf_.grad_ring.empty() || (!shard_.on() && !hyper_.speculate && !buf_.grads_in_place &&
                                        buf_.sets[0].bf16 == nullptr),
             "host rings are for an unsharded, unspeculated CPU optimizer with no whole host copies");
    TT_CHECK(!shard_.on() || !buf_.grads_in_place, "a sharded CPU optimizer reads its gradients from its host copy");
    TT_CHECK(!hyper_.speculate || (buf_.sets[1].master && buf_.sets[1].m && buf_.sets[1].v),
             "speculation needs a second host state set");
    if (!hyper_.speculate) buf_.sets[1] = buf_.sets[0];  // one set, updated in place
    if (buf_.device_segments > 0) {  // Note [optimizer split] in plan/schedule.h
      TT_CHECK(buf_.device_segments < segs_.count() && !shard_.on() && !hyper_.speculate && !buf_.grads_in_place,
               "an optimizer split is for an unsharded, unspeculated CPU optimizer with fewer device segments than "
               "the model's");
      const int64_t n = segs_.offset[static_cast<size_t>(buf_.device_segments)];
      TT_CHECK(buf_.master.numel() == n && buf_.m.numel() == n && buf_.v.numel() == n && buf_.compute.raw(),
               "the device segments' master, moments and compute copy are not allocated");
      plan_device_calls();
      be_.fill_zero(buf_.m, be_.compute_stream());
      be_.fill_zero(buf_.v, be_.compute_stream());
    }
    // Zeroed by every thread: the first touch of fresh pages (an 8B model's moments are 60 GiB) is the slow part.
    const int64_t chunks = static_cast<int64_t>((bytes + (size_t(16) << 20) - 1) / (size_t(16) << 20));
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const size_t at = static_cast<size_t>(c) << 24, n = std::min(bytes - at, size_t(16) << 20);
      std::memset(reinterpret_cast<char*>(buf_.sets[0].m) + at, 0, n);
      std::memset(reinterpret_cast<char*>(buf_.sets[0].v) + at, 0, n);
    }
  } else {
    TT_CHECK(!hyper_.speculate, "speculation is for the CPU optimizer");
    plan_device_calls();
    be_.fill_zero(buf_.m, be_.compute_stream());
    be_.fill_zero(buf_.v, be_.compute_stream());
  }
  be_.fill_zero(buf_.norm_sq, be_.compute_stream());
  // Note [gradients summed on the host]: the device's parts of those segments are never written: zero.
  if (!buf_.host_summed.empty()) {
    be_.fill_zero(buf_.parts, be_.compute_stream());
    std::memset(buf_.host_parts, 0, buf_.host_summed.size() * sizeof(float));
  }
}

const void* Optimizer::host_compute(int segment) const {
  TT_CHECK(!shard_.on(), "a sharded CPU optimizer keeps only its shares of the compute copy on the host");
  TT_CHECK(!host_ring(), "with host rings there is no whole staging copy of the compute copy");
  const HostAdamState& s = buf_.sets[cur_];
  const size_t off = static_cast<size_t>(segs_.offset[static_cast<size_t>(segment)]);
  return s.bf16 ? static_cast<const void*>(s.bf16 + off) : static_cast<const void*>(s.master + off);
}

void Optimizer::begin_step(float lr, bool speculate) {
  lr_ = lr;
  speculate_ = on_cpu() && hyper_.speculate && speculate;
  any_speculated_ = false;
  std::fill(speculated_.begin(), speculated_.end(), 0);
  from_ = to_ = buf_.sets[cur_];
}

void Optimizer::norm_part(int segment, Stream* on) {
  const Tensor& g = model_.tensors().grads[static_cast<size_t>(segment)];
  if (model_.config().tp == 1) {
    if (on != nullptr) be_.sum_squares_on(*on, buf_.parts.view(segment, {1}), g);
    else be_.sum_squares(buf_.parts.view(segment, {1}), g);
    return;
  }
  TT_CHECK(on == nullptr, "the gradient norm's parts of a tensor-parallel model on the compute stream only");
  // Note [tensor parallel]: the replicated parameters' part (the same on every rank, counted once) and the sharded
  // ones' (summed over the ranks before norm_total).
  const size_t s = static_cast<size_t>(segment);
  const int64_t rep = segs_.shard_begin[s] - segs_.offset[s], shard = segs_.size[s] - rep;
  const int64_t S = segs_.count();
  for (auto [part, begin, n] : {std::tuple<int64_t, int64_t, int64_t>{segment, 0, rep}, {S + segment, rep, shard}}) {
    const Tensor out = buf_.parts.view(part, {1});
    if (n == 0) be_.fill_zero(out, be_.compute_stream());
    else be_.sum_squares(out, g.view(begin, {n}));
  }
}

void Optimizer::norm_total() { be_.sum_in_order(buf_.norm_sq, buf_.parts); }

// Note [device update by segment]
// The device optimizer updates a segment's parameters (laid out one after the other: model/model.h) in one
// adamw_update call, whose pieces say which of them decay (matrices and embeddings) and which do not (biases and
// LayerNorms), and which writes the bf16 compute copy in the same pass when there is one. A call a parameter would
// launch a kernel for each (at GPT-2 most hold a few thousand elements, so the launches cost more than the work), and
// a convert() of the whole model afterwards would read the whole master a second time (docs/benchmarks/README.md,
// history). Every element's arithmetic is the same, so the result is too, in every bit.
void Optimizer::plan_device_calls() {
  if (shard_.on()) {  // Note [sharded optimizer]: this rank's share of each segment, its pieces cut to the share
    for (int s = 0; s < segs_.count(); ++s) {
      const int64_t base = segs_.offset[static_cast<size_t>(s)];
      const auto [lo, hi] = OptimizerShard::range(segs_.size[static_cast<size_t>(s)], shard_.rank, shard_.ranks);
      if (lo == hi) continue;
      DeviceCall c{s, base + lo, 0, moment_base_[static_cast<size_t>(s)], AdamWArgs{}};
      for (size_t i : seg_params_[static_cast<size_t>(s)]) {
        const ParamInfo& p = layout_[i];
        const int64_t from = std::max(p.offset - base, lo), to = std::min(p.offset - base + p.shape.numel(), hi);
        if (from >= to) continue;
        if (!c.pieces.add_piece(c.numel + (to - from), p.decay)) {
          device_calls_.push_back(c);
          c = DeviceCall{s, base + from, 0, c.moment_offset + c.numel, AdamWArgs{}};
          c.pieces.add_piece(to - from, p.decay);
        }
        c.numel += to - from;
      }
      device_calls_.push_back(c);
    }
    return;
  }
  // Note [optimizer split]: the CPU optimizer's device calls are those of its device segments.
  const int updated = on_cpu() ? buf_.device_segments : segs_.count();
  for (int s = 0; s < updated; ++s) {
    const std::vector<size_t>& params = seg_params_[static_cast<size_t>(s)];
    if (params.empty()) continue;
    DeviceCall c;
    c.segment = s;
    c.offset = layout_[params.front()].offset;
    c.moment_offset = c.offset;
    TT_CHECK(c.offset == segs_.offset[static_cast<size_t>(s)], "segment %d does not start at its first parameter", s);
    for (size_t i : params) {
      const ParamInfo& p = layout_[i];
      TT_CHECK(p.offset == c.offset + c.numel, "%s does not follow the segment's previous parameter", p.name.c_str());
      if (!c.pieces.add_piece(c.numel + p.shape.numel(), p.decay)) {
        device_calls_.push_back(c);
        c = DeviceCall{s, p.offset, 0, p.offset, AdamWArgs{}};
        c.pieces.add_piece(p.shape.numel(), p.decay);
      }
      c.numel += p.shape.numel();
    }
    device_calls_.push_back(c);
  }
}

void Optimizer::device_update(int segment) {
  for (const DeviceCall& c : device_calls_) {
    if (segment >= 0 && c.segment != segment) continue;
    AdamWArgs args = c.pieces;
    args.lr = lr_;
    args.beta1 = hyper_.beta1;
    args.beta2 = hyper_.beta2;
    args.eps = hyper_.eps;
    args.weight_decay = hyper_.weight_decay;
    args.step = step_ + 1;
    args.grad_clip = hyper_.grad_clip;
    args.split_master = buf_.master_in_halves;
    const Shape shape{c.numel};
    const int64_t in_seg = c.offset - segs_.offset[static_cast<size_t>(c.segment)];
    be_.adamw_update(buf_.master.view(c.offset, shape),
                     model_.tensors().grads[static_cast<size_t>(c.segment)].view(in_seg, shape),
                     buf_.m.view(c.moment_offset, shape), buf_.v.view(c.moment_offset, shape), buf_.norm_sq, args,
                     buf_.compute.raw() != nullptr ? buf_.compute.view(c.offset, shape) : Tensor());
  }
}

float* Optimizer::host_master() const {
  TT_CHECK(on_cpu() && !shard_.on(), "the whole host master is an unsharded CPU optimizer's");
  return buf_.sets[cur_].master;
}

float* Optimizer::host_m() const {
  TT_CHECK(host_state_whole(), "the whole host moments are an unsharded CPU optimizer's");
  return buf_.sets[cur_].m;
}

float* Optimizer::host_v() const {
  TT_CHECK(host_state_whole(), "the whole host moments are an unsharded CPU optimizer's");
  return buf_.sets[cur_].v;
}

Status Optimizer::master_written() {
  const HostAdamState& st = buf_.sets[cur_];
  if (st.bf16 != nullptr) {
    const int64_t n = model_.num_params();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) st.bf16[i] = bf16_high(st.master[i]);
  }
  return master_to_device();
}

Status Optimizer::master_to_device() {
  if (buf_.device_segments == 0) return Status::ok();
  // Note [optimizer split]: the device segments' master is the first elements of the host's.
  be_.copy_h2d(buf_.master, buf_.sets[cur_].master, be_.compute_stream());
  return be_.compute_stream().synchronize();
}

Status Optimizer::state_written() {
  if (!on_cpu() || buf_.device_segments == 0) return Status::ok();
  be_.copy_h2d(buf_.m, buf_.sets[cur_].m, be_.compute_stream());
  be_.copy_h2d(buf_.v, buf_.sets[cur_].v, be_.compute_stream());
  return be_.compute_stream().synchronize();
}

Status Optimizer::device_part_to_host() {
  if (!on_cpu() || buf_.device_segments == 0) return Status::ok();
  TT_TRY(be_.synchronize_all());
  const HostAdamState& st = buf_.sets[cur_];
  be_.copy_d2h(st.master, buf_.master, be_.compute_stream());
  be_.copy_d2h(st.m, buf_.m, be_.compute_stream());
  be_.copy_d2h(st.v, buf_.v, be_.compute_stream());
  return be_.compute_stream().synchronize();
}

void Optimizer::compute_copy(int segment, void* out) const {
  TT_CHECK(on_cpu() && !shard_.on(), "the whole host master is an unsharded CPU optimizer's");
  const size_t s = static_cast<size_t>(segment);
  const float* master = buf_.sets[cur_].master + segs_.offset[s];
  const int64_t n = segs_.size[s];
  if (dtype_size(model_.tensors().params[s].dtype()) == sizeof(float)) {
    std::memcpy(out, master, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  uint16_t* b = static_cast<uint16_t*>(out);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) b[i] = bf16_high(master[i]);
}

void Optimizer::grads_out(int segment, int ring_slot) {
  const size_t s = static_cast<size_t>(segment);
  const Tensor& g = model_.tensors().grads[s];
  if (ring_slot >= 0) {  // Note [host buffers in rings]
    be_.copy_d2h(buf_.grad_ring[static_cast<size_t>(ring_slot)], g, be_.d2h_stream());
    return;
  }
  if (shard_.on()) {  // Note [sharded optimizer]: this rank's share of the (averaged) gradients only
    const auto [lo, hi] = OptimizerShard::range(segs_.size[s], shard_.rank, shard_.ranks);
    if (lo < hi) be_.copy_d2h(buf_.host_grads + moment_base_[s], g.view(lo, {hi - lo}), be_.d2h_stream());
    return;
  }
  be_.copy_d2h(buf_.host_grads + segs_.offset[s], g, be_.d2h_stream());
}

void Optimizer::norm_out() { be_.copy_d2h(buf_.host_norm, buf_.norm_sq, be_.d2h_stream()); }

void Optimizer::grads_stage(int segment, int slot) {
  const Tensor& g = model_.tensors().grads[static_cast<size_t>(segment)];
  be_.copy_d2h(buf_.grad_staging[static_cast<size_t>(slot)], g, be_.d2h_stream());
}

void Optimizer::host_grad_add(int segment, int slot, bool first) {
  const size_t s = static_cast<size_t>(segment);
  float* sum = buf_.host_grads + segs_.offset[s];
  const float* in = buf_.grad_staging[static_cast<size_t>(slot)];
  const int64_t n = segs_.size[s];
  be_.enqueue_host([sum, in, n, first, threads = be_.host_threads()] {
    if (first) {
      std::memcpy(sum, in, static_cast<size_t>(n) * sizeof(float));
      return;
    }
    host::add_f32(sum, in, n, threads);
  });
}

void Optimizer::host_norm_part(int segment) {
  const size_t s = static_cast<size_t>(segment);
  const float* g = buf_.host_grads + segs_.offset[s];
  const int64_t n = segs_.size[s];
  be_.enqueue_host([this, s, g, n] { buf_.host_parts[s] = host::sum_squares_f32(g, n, be_.host_threads()); });
}

void Optimizer::host_norm_total() {
  be_.enqueue_host([this, out = norm_readback_] {
    // In segment order, as norm_total sums the device's parts (the host-summed segments' are zero there).
    float total = *buf_.host_norm;
    for (size_t s = 0; s < buf_.host_summed.size(); ++s)
      if (buf_.host_summed[s]) total += buf_.host_parts[s];
    *buf_.host_norm = total;
    if (out != nullptr) *out = total;
  });
}

void Optimizer::update_segment(int segment, const HostAdamState& from, const HostAdamState& to, float lr,
                               int64_t step, float grad_norm_sq, float grad_clip, int ring_slot) {
  const size_t s = static_cast<size_t>(segment);
  const int64_t seg_off = segs_.offset[s];
  // Note [managed optimizer exchange]: the segment's managed gradients where they are.
  const float* seg_grads = static_cast<const float*>(model_.tensors().grads[s].raw());
  // Note [sharded optimizer]: only this rank's share [lo, hi) of the segment, whose host state starts at
  // moment_base_; unsharded, the share is the segment and the host state is laid out as the model.
  const auto [lo, hi] = shard_.on() ? OptimizerShard::range(segs_.size[s], shard_.rank, shard_.ranks)
                                    : std::pair<int64_t, int64_t>{0, segs_.size[s]};
  for (size_t i : seg_params_[s]) {
    const ParamInfo& p = layout_[i];
    const int64_t from_el = std::max(p.offset - seg_off, lo);
    const int64_t to_el = std::min(p.offset - seg_off + p.shape.numel(), hi);
    if (from_el >= to_el) continue;
    const int64_t o = moment_base_[s] + (from_el - lo);  // in the host state
    // Note [host buffers in rings]: the gradients read from, and the compute copy written into, the ring's slots.
    const size_t r = static_cast<size_t>(ring_slot);
    const float* g = ring_slot >= 0         ? buf_.grad_ring[r] + from_el
                     : buf_.grads_in_place ? seg_grads + from_el
                                           : buf_.host_grads + o;
    uint16_t* bf16 = ring_slot >= 0 ? (buf_.param_ring.empty() ? nullptr : buf_.param_ring[r] + from_el)
                                    : to.bf16 ? to.bf16 + o : nullptr;
    host::adamw_update_f32(host::AdamWArrays{from.master + o, g, from.m + o, from.v + o,
                                           to.master + o, to.m + o, to.v + o, bf16},
                          to_el - from_el, grad_norm_sq, lr, hyper_.beta1, hyper_.beta2, hyper_.eps,
                          p.decay ? hyper_.weight_decay : 0.0f, step, grad_clip, be_.host_threads());
  }
  if (buf_.compute_out.raw() != nullptr && to.bf16 == nullptr) {  // f32: the managed compute copy is the new master
    const size_t n = static_cast<size_t>(segs_.size[static_cast<size_t>(segment)]);
    std::memcpy(static_cast<float*>(buf_.compute_out.raw()) + seg_off, to.master + seg_off, n * sizeof(float));
  }
}

void Optimizer::host_update(int segment, bool speculative, int ring_slot) {
  const int64_t step = step_ + 1;
  const float lr = lr_;
  if (ring_slot >= 0) {  // Note [host buffers in rings]: never speculative, always in place
    TT_CHECK(!speculative && !speculated_[static_cast<size_t>(segment)], "a speculative update with host rings");
    from_ = to_ = buf_.sets[cur_];
    be_.enqueue_host([this, segment, lr, step, ring_slot, st = buf_.sets[cur_]] {
      update_segment(segment, st, st, lr, step, *buf_.host_norm, hyper_.grad_clip, ring_slot);
    });
    return;
  }
  if (speculative) {
    // Note [speculative update]: this step's update of the segment now, with a clip factor of 1, into the other set.
    speculated_[static_cast<size_t>(segment)] = 1;
    any_speculated_ = true;
    be_.enqueue_host([this, segment, lr, step, from = buf_.sets[cur_], to = buf_.sets[cur_ ^ 1]] {
      update_segment(segment, from, to, lr, step, 0.0f, 0.0f);
    });
    return;
  }
  // From the current set into the other one (which becomes current) when some segment was speculated this step;
  // otherwise (speculation off, or not tried this step) the current set is updated in place: an update into the
  // other set would move more memory (its lines are read before they are written), and the host update is bound
  // by memory bandwidth.
  from_ = buf_.sets[cur_];
  to_ = any_speculated_ ? buf_.sets[cur_ ^ 1] : buf_.sets[cur_];
  if (speculated_[static_cast<size_t>(segment)]) {
    // Redone from the same state only if the norm turns out to be above the clip.
    be_.enqueue_host([this, segment, lr, step, from = from_, to = to_] {
      if (host::adamw_clip_factor(*buf_.host_norm, hyper_.grad_clip) == 1.0f) {
        ++spec_kept_;
        return;
      }
      ++spec_redone_;
      update_segment(segment, from, to, lr, step, *buf_.host_norm, hyper_.grad_clip);
    });
  } else {
    be_.enqueue_host([this, segment, lr, step, from = from_, to = to_] {
      update_segment(segment, from, to, lr, step, *buf_.host_norm, hyper_.grad_clip);
    });
  }
}

void Optimizer::params_back(int segment, const Tensor& device_copy, int ring_slot) {
  const size_t s = static_cast<size_t>(segment);
  if (ring_slot >= 0 && !buf_.param_ring.empty()) {  // Note [host buffers in rings]
    be_.copy_h2d(device_copy, buf_.param_ring[static_cast<size_t>(ring_slot)], be_.h2d_stream());
    return;
  }
  const size_t off = static_cast<size_t>(moment_base_[s]);
  const void* src = to_.bf16 ? static_cast<const void*>(to_.bf16 + off) : static_cast<const void*>(to_.master + off);
  if (shard_.on()) {  // this rank's share; the executor then brings the others' (Note [sharded optimizer])
    const auto [lo, hi] = OptimizerShard::range(segs_.size[s], shard_.rank, shard_.ranks);
    if (lo < hi) be_.copy_h2d(device_copy.view(lo, {hi - lo}), src, be_.h2d_stream());
    return;
  }
  be_.copy_h2d(device_copy, src, be_.h2d_stream());
}

void Optimizer::expand_shares(const float* compact, float* whole) const {
  std::memset(whole, 0, static_cast<size_t>(model_.num_params()) * sizeof(float));
  for (int s = 0; s < segs_.count(); ++s) {
    const auto [lo, hi] = OptimizerShard::range(segs_.size[static_cast<size_t>(s)], shard_.rank, shard_.ranks);
    std::memcpy(whole + segs_.offset[static_cast<size_t>(s)] + lo, compact + moment_base_[static_cast<size_t>(s)],
                static_cast<size_t>(hi - lo) * sizeof(float));
  }
}

void Optimizer::take_shares(const float* whole, float* compact) const {
  for (int s = 0; s < segs_.count(); ++s) {
    const auto [lo, hi] = OptimizerShard::range(segs_.size[static_cast<size_t>(s)], shard_.rank, shard_.ranks);
    std::memcpy(compact + moment_base_[static_cast<size_t>(s)], whole + segs_.offset[static_cast<size_t>(s)] + lo,
                static_cast<size_t>(hi - lo) * sizeof(float));
  }
}

Status Optimizer::download_master(float* whole) {
  TT_CHECK(on_cpu(), "download_master is the CPU optimizer's");
  TT_TRY(be_.synchronize_all());
  TT_TRY(device_part_to_host());
  const float* master = buf_.sets[cur_].master;
  if (shard_.on()) expand_shares(master, whole);
  else std::memcpy(whole, master, static_cast<size_t>(model_.num_params()) * sizeof(float));
  return Status::ok();
}

Status Optimizer::upload_master(const float* whole) {
  TT_CHECK(on_cpu(), "upload_master is the CPU optimizer's");
  const HostAdamState& st = buf_.sets[cur_];
  const int64_t n = shard_.on() ? OptimizerShard::moment_elements(segs_, shard_.ranks) : model_.num_params();
  if (shard_.on()) take_shares(whole, st.master);
  else std::memcpy(st.master, whole, static_cast<size_t>(n) * sizeof(float));
  if (st.bf16 != nullptr) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) st.bf16[i] = bf16_high(st.master[i]);
  }
  return master_to_device();
}

void Optimizer::end_step() {
  ++step_;
  if (on_cpu() && any_speculated_) cur_ ^= 1;
  any_speculated_ = false;
  speculate_ = false;
  std::fill(speculated_.begin(), speculated_.end(), 0);
}

Status Optimizer::download_state(float* m, float* v) {
  const size_t bytes = static_cast<size_t>(model_.num_params()) * sizeof(float);
  if (on_cpu()) {
    TT_TRY(be_.synchronize_all());
    TT_TRY(device_part_to_host());
    if (shard_.on()) {  // Note [sharded optimizer]: this rank's shares where the whole model has them, zero elsewhere
      expand_shares(buf_.sets[cur_].m, m);
      expand_shares(buf_.sets[cur_].v, v);
      return Status::ok();
    }
    std::memcpy(m, buf_.sets[cur_].m, bytes);
    std::memcpy(v, buf_.sets[cur_].v, bytes);
    return Status::ok();
  }
  if (shard_.on()) {  // Note [sharded optimizer]: this rank's shares where the whole model has them, zero elsewhere
    const size_t es = dtype_size(buf_.m.dtype()), e = static_cast<size_t>(buf_.m.numel()) * es;
    std::vector<unsigned char> sm(e), sv(e);
    be_.copy_d2h(sm.data(), buf_.m, be_.compute_stream());
    be_.copy_d2h(sv.data(), buf_.v, be_.compute_stream());
    TT_TRY(be_.compute_stream().synchronize());
    auto *mb = reinterpret_cast<unsigned char*>(m), *vb = reinterpret_cast<unsigned char*>(v);
    std::memset(mb, 0, static_cast<size_t>(model_.num_params()) * es);
    std::memset(vb, 0, static_cast<size_t>(model_.num_params()) * es);
    for (int s = 0; s < segs_.count(); ++s) {
      const auto [lo, hi] = OptimizerShard::range(segs_.size[static_cast<size_t>(s)], shard_.rank, shard_.ranks);
      const size_t at = static_cast<size_t>(segs_.offset[static_cast<size_t>(s)] + lo) * es,
                   from = static_cast<size_t>(moment_base_[static_cast<size_t>(s)]) * es,
                   n = static_cast<size_t>(hi - lo) * es;
      std::memcpy(mb + at, sm.data() + from, n);
      std::memcpy(vb + at, sv.data() + from, n);
    }
    return Status::ok();
  }
  be_.copy_d2h(m, buf_.m, be_.compute_stream());
  be_.copy_d2h(v, buf_.v, be_.compute_stream());
  return be_.compute_stream().synchronize();
}

Status Optimizer::upload_state(const float* m, const float* v) {
  const size_t bytes = static_cast<size_t>(model_.num_params()) * sizeof(float);
  if (on_cpu()) {
    TT_TRY(be_.synchronize_all());
    if (shard_.on()) {
      take_shares(m, buf_.sets[cur_].m);
      take_shares(v, buf_.sets[cur_].v);
      return Status::ok();
    }
    std::memcpy(buf_.sets[cur_].m, m, bytes);
    std::memcpy(buf_.sets[cur_].v, v, bytes);
    return state_written();
  }
  if (shard_.on()) {  // this rank's shares of the whole moments
    const size_t es = dtype_size(buf_.m.dtype()), e = static_cast<size_t>(buf_.m.numel()) * es;
    std::vector<unsigned char> sm(e), sv(e);
    const auto *mb = reinterpret_cast<const unsigned char*>(m), *vb = reinterpret_cast<const unsigned char*>(v);
    for (int s = 0; s < segs_.count(); ++s) {
      const auto [lo, hi] = OptimizerShard::range(segs_.size[static_cast<size_t>(s)], shard_.rank, shard_.ranks);
      const size_t at = static_cast<size_t>(segs_.offset[static_cast<size_t>(s)] + lo) * es,
                   to = static_cast<size_t>(moment_base_[static_cast<size_t>(s)]) * es,
                   n = static_cast<size_t>(hi - lo) * es;
      std::memcpy(sm.data() + to, mb + at, n);
      std::memcpy(sv.data() + to, vb + at, n);
    }
    be_.copy_h2d(buf_.m, sm.data(), be_.compute_stream());
    be_.copy_h2d(buf_.v, sv.data(), be_.compute_stream());
    return be_.compute_stream().synchronize();
  }
  be_.copy_h2d(buf_.m, m, be_.compute_stream());
  be_.copy_h2d(buf_.v, v, be_.compute_stream());
  return be_.compute_stream().synchronize();
}

}  // namespace tt
