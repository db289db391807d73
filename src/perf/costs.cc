#include "perf/costs.h"

#include <algorithm>
#include <set>

namespace tt::perf {

namespace {
// The model's piece a compute operation runs (model/model.h ModelPiece) and its segment; false for the others.
bool model_piece(const Op& op, const ScheduleSpec& spec, ModelPiece* piece, int* segment) {
  const int L = spec.model.layers;
  *segment = op.layer + 1;
  switch (op.kind) {
    case OpKind::kModel:
      *segment = op.segment;
      switch (op.boundary) {
        case Boundary::kBeforeForward:
          // Note [rebuilt activation]: such a block's forward runs its GELU apart.
          *piece = op.segment >= 1 && op.segment <= L && spec.plan.act_rebuilt(op.segment - 1)
                       ? ModelPiece::kForwardActApart
                       : ModelPiece::kForward;
          return true;
        case Boundary::kBeforeBackward: *piece = ModelPiece::kBackward; return true;
        case Boundary::kBeforeHead:
          *segment = 0;
          *piece = op.name.find("backward") != std::string::npos ? ModelPiece::kHeadWithBackward : ModelPiece::kHead;
          return true;
        default: return false;
      }
    case OpKind::kRebuildBlock: *piece = ModelPiece::kRebuildBlock; return true;
    case OpKind::kRebuildNorms: *piece = ModelPiece::kRebuildNorms; return true;
    case OpKind::kRebuildMlp: *piece = ModelPiece::kRebuildMlp; return true;
    case OpKind::kRebuildAct: *piece = ModelPiece::kRebuildAct; return true;
    default: return false;
  }
}
}  // namespace

std::vector<KernelCall> op_kernel_calls(const Op& op, const ScheduleSpec& spec) {
  const ModelConfig& cfg = spec.model;
  const DType dt = spec.compute, md = master_dtype_for(dt);
  std::vector<KernelCall> r;
  ModelPiece p;
  int segment = 0;
  if (model_piece(op, spec, &p, &segment)) {
    for (const NamedKernelCall& k : model_kernel_calls(cfg, spec.batch, dt, spec.lm_chunk_rows, p, segment))
      r.push_back(k.call);
    return r;
  }
  ParamSegments segs;
  auto seg_size = [&](int s) {
    if (segs.offset.empty()) segs = model_segments(cfg);
    return segs.size[static_cast<size_t>(s)];
  };
  switch (op.kind) {
    case OpKind::kNormPart:  // Note [bf16 gradients]: a bf16 segment's squares read half the bytes
      r.push_back({KernelOp::kSumSquares, segment_grad_dtype(spec.plan, dt, cfg.layers, op.segment),
                   {seg_size(op.segment)}});
      break;
    case OpKind::kNormTotal: r.push_back({KernelOp::kSumSquares, md, {cfg.layers + 2}}); break;
    case OpKind::kDeviceAdamW:  // Note [device update by segment] in exec/optimizer.cc
      for (int s = 0; s < cfg.layers + 2; ++s)  // every segment, or one (Note [optimizer split] in plan/schedule.h)
        if (op.segment < 0 || op.segment == s)  // dims[1]: 0 no copy, 1 a bf16 copy, 2 a master in two halves;
          r.push_back({KernelOp::kAdamWUpdate, md,  // dims[2]: 1 bf16 gradients (Note [bf16 gradients])
                       {seg_size(s), spec.plan.master_in_halves(dt) ? 2 : dt != md ? 1 : 0,
                        segment_grad_dtype(spec.plan, dt, cfg.layers, s) == DType::kBF16 ? 1 : 0}});
      break;
    case OpKind::kInputTake:
      r.push_back({KernelOp::kCopyD2D, DType::kI32, {2 * static_cast<int64_t>(spec.batch) * cfg.seq}});
      break;
    default: break;
  }
  return r;
}

std::vector<KernelCall> schedule_kernel_calls(const Schedule& schedule) {
  std::set<KernelCall> all;
  for (int p = 0; p < kNumPasses; ++p)
    for (const Op& op : schedule.passes[p])
      for (const KernelCall& c : op_kernel_calls(op, schedule.spec)) all.insert(c);
  return {all.begin(), all.end()};
}

std::vector<std::vector<KernelCall>> schedule_sequences(const Schedule& schedule) {
  std::set<std::vector<KernelCall>> all;
  for (const Op& op : schedule.pass(Pass::kTrain)) {
    std::vector<KernelCall> calls = op_kernel_calls(op, schedule.spec);
    if (!calls.empty()) all.insert(std::move(calls));
  }
  return {all.begin(), all.end()};
}

namespace {
// The pieces the host update of each segment runs over: its parameters' sizes, or (Note [sharded optimizer]) those
// of the parts of them in the largest share, rank 0's (ScheduleSpec::optimizer_share).
std::vector<std::vector<int64_t>> all_segment_param_sizes(const ScheduleSpec& spec) {
  const ParamSegments segs = model_segments(spec.model);
  const std::vector<ParamInfo> layout = model_param_layout(spec.model);
  std::vector<std::vector<int64_t>> sizes(static_cast<size_t>(segs.count()));
  for (size_t i = 0; i < layout.size(); ++i) {
    const size_t s = static_cast<size_t>(segs.of_param[i]);
    const int64_t share = spec.optimizer_share(segs.size[s]);
    const int64_t from = layout[i].offset - segs.offset[s], to = from + layout[i].shape.numel();
    if (from < share) sizes[s].push_back(std::min(to, share) - from);
  }
  return sizes;
}
}  // namespace

std::vector<int64_t> segment_param_sizes(const ModelConfig& cfg, int segment) {
  ScheduleSpec spec;
  spec.model = cfg;
  return all_segment_param_sizes(spec)[static_cast<size_t>(segment)];
}

std::vector<std::vector<int64_t>> schedule_host_segments(const Schedule& schedule) {
  std::set<std::vector<int64_t>> all;
  const std::vector<std::vector<int64_t>> sizes = all_segment_param_sizes(schedule.spec);
  for (const Op& op : schedule.pass(Pass::kTrain))
    if (op.kind == OpKind::kHostAdamW && !op.speculative) all.insert(sizes[static_cast<size_t>(op.segment)]);
  return {all.begin(), all.end()};
}

ProfileCosts::ProfileCosts(const Profile& profile, const ScheduleSpec& spec, int host_threads)
    : p_(profile), spec_(spec) {
  const ParamSegments segs = model_segments(spec.model);
  seg_params_ = segs.size;
  for (int64_t& n : seg_params_) n = spec.optimizer_share(n);
  seg_sizes_ = all_segment_param_sizes(spec);
  // The run's team: --threads, else the one the segments were measured with (the backend's default on this machine).
  const int threads = host_threads > 0 ? host_threads : p_.host_segment_threads;
  host_rate_ = p_.host_adamw_rate(threads);
  const double measured_rate = p_.host_adamw_rate(p_.host_segment_threads);
  host_segment_scale_ = host_rate_ > 0 && measured_rate > 0 ? measured_rate / host_rate_ : 1.0;
}

double ProfileCosts::kernels(const Op& op) const {
  // Every block has the same shapes: its segment (and layer) matter only as "a block".
  const int L = spec_.model.layers;
  const int seg = op.segment >= 1 && op.segment <= L ? 1 : op.segment;
  const int layer_class = op.layer >= 0 ? 0 : -1;
  const bool head_bwd = op.kind == OpKind::kModel && op.boundary == Boundary::kBeforeHead &&
                        op.name.find("backward") != std::string::npos;
  const auto key = std::make_tuple(static_cast<int>(op.kind), static_cast<int>(op.boundary),
                                   seg * 4 + (layer_class + 1), head_bwd);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const std::vector<KernelCall> calls = op_kernel_calls(op, spec_);
  double t = 0;
  if (!calls.empty()) {
    int interpolated = 0;
    auto s = p_.sequence_seconds(calls, &interpolated);
    if (!s.is_ok() && status_.is_ok()) status_ = Status(s.status().code(), op.name + ": " + s.status().message());
    interpolated_ += interpolated;
    t = s.is_ok() ? s.value() : 0.0;
  }
  // Note [pricing collectives]: a tensor-parallel piece's sums and maxima over the model's ranks, in its time.
  ModelPiece piece;
  int segment = 0;
  if (spec_.model.tp > 1 && model_piece(op, spec_, &piece, &segment))
    for (int64_t bytes :
         model_tp_collectives(spec_.model, spec_.batch, spec_.compute, spec_.lm_chunk_rows, piece, segment))
      t += allreduce_seconds(spec_.model.tp, bytes);
  return cache_.emplace(key, t).first->second;
}

double ProfileCosts::allreduce_seconds(int ranks, int64_t bytes) const {
  auto it = p_.allreduce.find(ranks);
  if (it == p_.allreduce.end() || !it->second.valid()) {
    unpriced_collectives_ = true;
    return 0;
  }
  return it->second.seconds(bytes);
}

double ProfileCosts::readback_seconds() const {
  // The step's losses (master dtype, one per token) and its squared gradient norm, which Trainer::enqueue_step copies
  // back (Note [host one step ahead]).
  const int64_t losses = static_cast<int64_t>(spec_.batch) * spec_.model.seq *
                         static_cast<int64_t>(dtype_size(master_dtype_for(spec_.compute)));
  return p_.readback.valid() ? p_.readback.seconds(losses) + p_.readback.seconds(4) : 0;
}

double ProfileCosts::slowdown(CostClass victim, CostClass other) const {
  auto traffic = [](CostClass c, Traffic* t) {
    if (c == CostClass::kH2D) *t = Traffic::kH2D;
    else if (c == CostClass::kD2H) *t = Traffic::kD2H;
    else if (c == CostClass::kHost) *t = Traffic::kHost;
    else return false;
    return true;
  };
  Traffic v, o;
  if (!traffic(victim, &v) || !traffic(other, &o) || v == o) return 1.0;
  return p_.contention(v, o);
}

// Unified Memory (issue 20): a prefetch of pages with data to the host or the device, or a discard-and-prefetch of
// dead pages (Op::um_dead): to the host a release (the profile's "discard" rate), to the device a populate.
const LinkRate* ProfileCosts::um_link(const Op& op) const {
  const bool to_device = op.place == static_cast<int>(memory::UmPlace::kDevice);
  const LinkRate* l = op.um_dead ? (to_device ? &p_.um_populate : &p_.um_discard)
                                 : (to_device ? &p_.um_to_device : &p_.um_to_host);
  if (!l->valid() && status_.is_ok())
    status_ = Status(StatusCode::kNotFound, op.name + ": the profile has no Unified Memory rates (a profile from "
                                                      "before 2026-12-02, or of a backend without managed memory: "
                                                      "recalibrate with tiertrain calibrate)");
  return l;
}

double ProfileCosts::fixed_seconds(const Op& op) const {
  if (op.kind == OpKind::kUmPrefetch) return um_link(op)->latency_s;
  switch (cost_class(op)) {
    case CostClass::kD2H:
      return p_.d2h_pinned.latency_s;
    case CostClass::kH2D:
      return p_.h2d_pinned.latency_s;
    case CostClass::kHost:
      return p_.host_task_seconds;
    default:
      return 0;
  }
}

double ProfileCosts::seconds(const Op& op) const {
  if (op.kind == OpKind::kUmPrefetch) {
    const LinkRate* l = um_link(op);
    return l->valid() ? l->seconds(op.bytes) : 0;
  }
  switch (cost_class(op)) {
    case CostClass::kFree:
      return 0;
    case CostClass::kD2H:
      return p_.d2h_pinned.seconds(op.bytes);
    case CostClass::kH2D:
      return p_.h2d_pinned.seconds(op.bytes);
    case CostClass::kHost:
      if (op.kind != OpKind::kHostAdamW) {
        // Note [gradients summed on the host]: memory-bound passes over the host gradients, priced by the bytes
        // they read and write at twice the profile's copy rate (which counts a copy's bytes once, read and written).
        if (op.kind == OpKind::kHostNormTotal) return 0;
        if (p_.host_memcpy_bytes_per_s <= 0) {
          if (status_.is_ok()) status_ = Status(StatusCode::kNotFound, "the profile has no host copy rate");
          return 0;
        }
        return static_cast<double>(op.bytes) / (2 * p_.host_memcpy_bytes_per_s);
      }
      if (auto it = p_.host_segments.find(seg_sizes_[static_cast<size_t>(op.segment)]); it != p_.host_segments.end())
        return it->second * host_segment_scale_;
      if (host_rate_ <= 0) {
        if (status_.is_ok()) status_ = Status(StatusCode::kNotFound, "the profile has no host AdamW rate");
        return 0;
      }
      return static_cast<double>(seg_params_[static_cast<size_t>(op.segment)]) / host_rate_;
    case CostClass::kCompute:
      return kernels(op);
    case CostClass::kComm: {
      // Note [pricing collectives]
      // A mesh's collectives are allreduces over the ranks of one mesh dimension, through the reducer the run uses
      // (host shared memory on the CPU backend, NCCL on GPUs). `tiertrain launch -n N -- tiertrain calibrate`
      // measures an allreduce over N ranks as latency + bytes / bandwidth (Profile::allreduce); a collective over
      // that many ranks is priced by its bytes at that rate, and without one it costs nothing and the prediction
      // says so (PlanRow::unpriced_collectives). A data-parallel run's average of each segment's gradients is an
      // operation of its own on the comm stream (Note [data parallel] in plan/schedule.cc), overlapped with the rest
      // of the backward; a tensor-parallel run's sums and maxima (Note [tensor parallel] in model/gpt.h) are part of
      // the compute operations that run them (model_tp_collectives lists them per piece, as model_kernel_calls lists
      // the kernels), on the compute stream. Not priced: a sharded optimizer's exchange of parameters (inside its
      // update), the norm's sum over the model's ranks (one number). The rate is an f32 allreduce's; bf16 sums and
      // small maxima are priced by their bytes at it.
      return allreduce_seconds(spec_.data_ranks, op.bytes);
    }
  }
  return 0;
}

}  // namespace tt::perf
