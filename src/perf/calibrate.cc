#include "perf/calibrate.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <fstream>
#include <thread>

#include "comm/comm.h"
#include "core/bf16.h"
#include "exec/grad_reducer.h"
#include "core/rng.h"
#include "core/units.h"
#include "host/adamw.h"
#include "memory/um.h"
#include "model/model.h"

namespace tt::perf {

namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "unknown cpu";
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The tensors one kernel call reads and writes, in the order run() passes them.
struct Shapes {
  std::vector<std::pair<Shape, DType>> t;
};

Shapes shapes_of(const KernelCall& c) {
  const DType dt = c.dtype, md = master_dtype_for(dt == DType::kI32 ? DType::kF32 : dt), I = DType::kI32;
  const int64_t a = c.dims[0], b = c.dims[1], d2 = c.dims[2], d3 = c.dims[3];
  Shapes s;
  auto add = [&](Shape shape, DType t) { s.t.push_back({shape, t}); };
  switch (c.op) {
    case KernelOp::kEmbeddingForward:  // out, tokens, wte, wpe
      add({a, b, d2}, dt), add({a, b}, I), add({d3, d2}, dt), add({b, d2}, dt);
      break;
    case KernelOp::kEmbeddingBackward:  // dwte, dwpe, dout, tokens
      add({d3, d2}, md), add({b, d2}, md), add({a, b, d2}, dt), add({a, b}, I);
      break;
    case KernelOp::kLayernormForward:  // out, mean, rstd, inp, w, b
      add({a, b}, dt), add({a}, md), add({a}, md), add({a, b}, dt), add({b}, dt), add({b}, dt);
      break;
    case KernelOp::kLayernormBackward:  // dinp, dw, db, dout, inp, w, mean, rstd
      add({a, b}, dt), add({b}, md), add({b}, md), add({a, b}, dt), add({a, b}, dt), add({b}, dt), add({a}, md),
          add({a}, md);
      break;
    case KernelOp::kResidualLayernormForward:  // res, out, mean, rstd, a, b, w, bias
      add({a, b}, dt), add({a, b}, dt), add({a}, md), add({a}, md), add({a, b}, dt), add({a, b}, dt), add({b}, dt),
          add({b}, dt);
      break;
    case KernelOp::kMatmulForward:  // out, inp, w, bias
      add({a, b}, dt), add({a, d2}, dt), add({b, d2}, dt);
      if (d3) add({b}, dt);
      break;
    case KernelOp::kMatmulBackward:  // dinp, dw, dout, inp, w, dbias
      add({a, d2}, dt), add({b, d2}, md), add({a, b}, dt), add({a, d2}, dt), add({b, d2}, dt);
      if (d3) add({b}, md);
      break;
    case KernelOp::kMatmulGeluForward:  // pre, out, inp, w, bias
      add({a, b}, dt), add({a, b}, dt), add({a, d2}, dt), add({b, d2}, dt), add({b}, dt);
      break;
    case KernelOp::kMatmulBackwardGelu:  // dpre, dw, dbias, dout, inp, w, pre
      add({a, d2}, dt), add({b, d2}, md), add({b}, md), add({a, b}, dt), add({a, d2}, dt), add({b, d2}, dt),
          add({a, d2}, dt);
      break;
    case KernelOp::kAttentionForward:  // out, lse, qkv
      add({a, b, d2 * d3}, dt), add({a, d2, b}, md), add({a, b, (d2 + 2 * c.kv()) * d3}, dt);
      break;
    case KernelOp::kAttentionBackward:  // dqkv, dout, qkv, out, lse
      add({a, b, (d2 + 2 * c.kv()) * d3}, dt), add({a, b, d2 * d3}, dt), add({a, b, (d2 + 2 * c.kv()) * d3}, dt),
          add({a, b, d2 * d3}, dt),
          add({a, d2, b}, md);
      break;
    case KernelOp::kSoftmaxXentForward:
    case KernelOp::kSoftmaxXentFused:  // losses, logits, targets
      add({a}, md), add({a, b}, dt), add({a}, I);
      break;
    case KernelOp::kResidualForward:  // out, a, b
      add({a}, dt), add({a}, dt), add({a}, dt);
      break;
    case KernelOp::kGeluForward:  // out, inp
      add({a}, dt), add({a}, dt);
      break;
    case KernelOp::kRmsnormForward:  // out, rstd, inp, w
      add({a, b}, dt), add({a}, md), add({a, b}, dt), add({b}, dt);
      break;
    case KernelOp::kResidualRmsnormForward:  // res, out, rstd, a, b, w
      add({a, b}, dt), add({a, b}, dt), add({a}, md), add({a, b}, dt), add({a, b}, dt), add({b}, dt);
      break;
    case KernelOp::kRmsnormBackward:  // dinp, dw, dout, inp, w, rstd
      add({a, b}, dt), add({b}, md), add({a, b}, dt), add({a, b}, dt), add({b}, dt), add({a}, md);
      break;
    case KernelOp::kRope:  // qkv (b - 1 query heads, one key/value head), table
      add({a, 1, (b + 1) * d2}, dt), add({1, d2}, md);
      break;
    case KernelOp::kSwigluForward:  // out, inp
      add({a, b}, dt), add({a, 2 * b}, dt);
      break;
    case KernelOp::kSwigluBackward:  // dinp, inp, dout
      add({a, 2 * b}, dt), add({a, 2 * b}, dt), add({a, b}, dt);
      break;
    case KernelOp::kFillZero:
      add({a}, dt);
      break;
    case KernelOp::kConvert:  // dst (compute), src (master)
      add({a}, dt), add({a}, md);
      break;
    case KernelOp::kSumSquares:  // out, x (bf16 x: f32 out, Note [bf16 gradients])
      add({1}, dt == DType::kBF16 ? DType::kF32 : dt), add({a}, dt);
      break;
    // param (b 2: its low halves), grad (d2 1: bf16), m, v, norm, the bf16 copy (b 2: the high halves)
    case KernelOp::kAdamWUpdate:
      add({a}, b == 2 ? DType::kBF16 : dt);
      add({a}, d2 == 1 ? DType::kBF16 : dt);
      for (int i = 0; i < 2; ++i) add({a}, dt);
      add({1}, dt);
      if (b) add({a}, DType::kBF16);
      break;
    case KernelOp::kCopyD2D:
      add({a}, dt), add({a}, dt);
      break;
    case KernelOp::kXentLocalMax:
    case KernelOp::kXentLocalSums:
    case KernelOp::kXentFinish:  // stats, logits, targets, losses
      add({3, a}, md), add({a, b}, dt), add({a}, I), add({a}, md);
      break;
  }
  return s;
}

int64_t call_bytes(const KernelCall& c) {
  int64_t n = 0;
  for (const auto& [shape, dt] : shapes_of(c).t)
    n += (shape.numel() * static_cast<int64_t>(dtype_size(dt)) + 511) / 512 * 512 + 4096;
  return n;
}

void run(Backend& be, const KernelCall& c, const std::vector<Tensor>& t) {
  const Tensor none;
  const int vocab = static_cast<int>(c.dims[1]);
  switch (c.op) {
    case KernelOp::kEmbeddingForward: be.embedding_forward(t[0], t[1], t[2], t[3]); break;
    // The backward ops as the GPT calls them, overwriting their gradients (Note [gradients first written]).
    case KernelOp::kEmbeddingBackward: be.embedding_backward(t[0], t[1], t[2], t[3], GradWrite::kOverwrite); break;
    case KernelOp::kLayernormForward: be.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5]); break;
    case KernelOp::kLayernormBackward:
      be.layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], GradWrite::kOverwrite);
      break;
    case KernelOp::kResidualLayernormForward:
      be.residual_layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
      break;
    case KernelOp::kMatmulForward: be.matmul_forward(t[0], t[1], t[2], c.dims[3] ? t[3] : none); break;
    case KernelOp::kMatmulBackward:
      be.matmul_backward(t[0], t[1], c.dims[3] ? t[5] : none, t[2], t[3], t[4], GradWrite::kOverwrite);
      break;
    case KernelOp::kMatmulGeluForward: be.matmul_gelu_forward(t[0], t[1], t[2], t[3], t[4]); break;
    case KernelOp::kMatmulBackwardGelu:
      be.matmul_backward_gelu(t[0], t[1], t[2], t[3], t[4], t[5], t[6], GradWrite::kOverwrite);
      break;
    case KernelOp::kAttentionForward: be.attention_forward(t[0], t[1], t[2], static_cast<int>(c.dims[2])); break;
    case KernelOp::kAttentionBackward:
      be.attention_backward(t[0], t[1], t[2], t[3], t[4], static_cast<int>(c.dims[2]));
      break;
    case KernelOp::kSoftmaxXentForward: be.softmax_xent_forward(t[0], t[1], t[1], t[2], vocab); break;
    case KernelOp::kSoftmaxXentFused: be.softmax_xent_fused(t[0], t[1], t[1], t[2], 1e-4f, vocab); break;
    case KernelOp::kResidualForward: be.residual_forward(t[0], t[1], t[2]); break;
    case KernelOp::kGeluForward: be.gelu_forward(t[0], t[1]); break;
    case KernelOp::kRmsnormForward: be.rmsnorm_forward(t[0], t[1], t[2], t[3], 1e-5f); break;
    case KernelOp::kResidualRmsnormForward:
      be.residual_rmsnorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], 1e-5f);
      break;
    case KernelOp::kRmsnormBackward:
      be.rmsnorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], GradWrite::kOverwrite);
      break;
    // The rotation's cost: B T rows of dims[1] rotated heads, timed as rows of one position.
    case KernelOp::kRope:
      be.rope(t[0], t[1], none, static_cast<int>(c.dims[1]) - 1, 1, c.dims[3] != 0);
      break;
    case KernelOp::kSwigluForward: be.swiglu_forward(t[0], t[1]); break;
    case KernelOp::kSwigluBackward: be.swiglu_backward(t[0], t[1], t[2]); break;
    case KernelOp::kFillZero: be.fill_zero(t[0], be.compute_stream()); break;
    case KernelOp::kConvert: be.convert(t[0], t[1]); break;
    case KernelOp::kSumSquares: be.sum_squares(t[0], t[1]); break;
    case KernelOp::kAdamWUpdate: {
      AdamWArgs args;
      args.weight_decay = 0.1f;
      args.grad_clip = 1.0f;
      args.split_master = c.dims[1] == 2;  // Note [master in two halves]
      be.adamw_update(t[0], t[1], t[2], t[3], t[4], args, c.dims[1] ? t[5] : none);
      break;
    }
    case KernelOp::kCopyD2D: be.copy_d2d(t[0], t[1], be.compute_stream()); break;
    case KernelOp::kXentLocalMax: be.xent_local_max(t[0], t[1], 0, vocab); break;
    case KernelOp::kXentLocalSums: be.xent_local_sums(t[0], t[1], t[2], 0, vocab); break;
    case KernelOp::kXentFinish: be.xent_finish(t[3], c.dims[2] ? t[1] : none, t[1], t[0], t[2], 1e-4f, 0, vocab); break;
  }
}

// Random values in [-1, 1) (f32 shifted to [0.5, 2.5), so that AdamW's second moments stay positive; integers in
// [0, range) for int32 tensors). Floating-point tensors are tiled from one random block copied chunk by chunk, so
// that filling gigabytes costs the link's time, not the host's; the block never changes, so the chunks' copies need
// not wait for one another.
class Filler {
 public:
  static constexpr size_t kBlock = size_t(4) << 20;  // elements
  Filler() : f32_(kBlock), bf16_(kBlock), f64_(kBlock) {
    Rng rng(1234);
    for (size_t i = 0; i < kBlock; ++i) {
      const double u = 2.0 * rng.uniform() - 1.0;
      f32_[i] = static_cast<float>(u) + 1.5f;
      bf16_[i] = float_to_bf16(static_cast<float>(u));
      f64_[i] = u + 1.5;
    }
  }
  // Synchronous.
  Status fill(Backend& be, const Tensor& t, int64_t int_range) {
    const Tensor flat = t.reshape({t.numel()});
    const void* block = nullptr;
    switch (t.dtype()) {
      case DType::kF32: block = f32_.data(); break;
      case DType::kBF16: block = bf16_.data(); break;
      case DType::kF64: block = f64_.data(); break;
      default: {
        ints_.resize(static_cast<size_t>(t.numel()));
        for (size_t i = 0; i < ints_.size(); ++i)
          ints_[i] = static_cast<int32_t>((i * 2654435761u) % static_cast<size_t>(std::max<int64_t>(1, int_range)));
        if (t.dtype() == DType::kI32) {
          be.copy_h2d(flat, ints_.data(), be.compute_stream());
        } else {
          be.fill_zero(flat, be.compute_stream());
        }
        return be.compute_stream().synchronize();
      }
    }
    for (int64_t at = 0; at < flat.numel(); at += static_cast<int64_t>(kBlock)) {
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(kBlock), flat.numel() - at);
      be.copy_h2d(flat.view(at, {n}), block, be.compute_stream());
    }
    return be.compute_stream().synchronize();
  }

 private:
  std::vector<float> f32_;
  std::vector<uint16_t> bf16_;
  std::vector<double> f64_;
  std::vector<int32_t> ints_;
};

// Seconds per run of fn on stream, timed with events over repetitions until min_seconds (after one warm-up run), the
// fastest of three such batches: a moment of load from elsewhere (a shared 2-core VM) only ever adds time, and one
// batch taken in it priced the CPU backend's device optimizer 10% slow against the training steps it predicted.
// With heat_seconds > 0, runs fn untimed for about that long first (Note [calibrating at sustained clocks]).
template <typename F>
Result<double> time_on(Backend& be, Stream& stream, const CalibrateOptions& o, F fn, int max_reps,
                       double heat_seconds = 0) {
  auto a = be.create_event(true), b = be.create_event(true);
  fn();  // warm-up (first-touch, cuBLAS heuristics, caches)
  TT_TRY(stream.synchronize());
  stream.record(*a);
  fn();
  stream.record(*b);
  TT_TRY(b->synchronize());
  TT_ASSIGN_OR_RETURN(double once_ms, b->elapsed_ms_since(*a));
  const double once = std::max(once_ms * 1e-3, 1e-7);
  const int reps = std::clamp(static_cast<int>(std::ceil(o.min_seconds / once)), 1, max_reps);
  if (heat_seconds > 0) {
    const int heat = std::clamp(static_cast<int>(std::ceil(heat_seconds / once)), 1, 10000);
    for (int i = 0; i < heat; ++i) fn();
  } else if (reps == 1 && once >= o.min_seconds) {
    return once;
  }
  double best = 1e30;
  for (int batch = 0; batch < 3; ++batch) {
    stream.record(*a);
    for (int i = 0; i < reps; ++i) fn();
    stream.record(*b);
    TT_TRY(b->synchronize());
    TT_ASSIGN_OR_RETURN(double ms, b->elapsed_ms_since(*a));
    best = std::min(best, ms * 1e-3 / reps);
  }
  return best;
}

// Weighted least squares of t = latency + bytes / bw with relative errors (weights 1/t^2).
LinkRate fit(std::vector<std::pair<int64_t, double>> pts) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [n, t] : pts) {
    const double w = 1.0 / (t * t), x = static_cast<double>(n);
    sw += w, sx += w * x, sy += w * t, sxx += w * x * x, sxy += w * x * t;
  }
  LinkRate l;
  l.points = std::move(pts);
  const double det = sw * sxx - sx * sx;
  double slope = det != 0 ? (sw * sxy - sx * sy) / det : 0;
  double icpt = det != 0 ? (sy - slope * sx) / sw : 0;
  if (!(slope > 0)) {
    // No time grows with the bytes within the noise (a latency-bound link, e.g. a simulated delay): the mean time
    // as the latency, and no bandwidth term worth the name.
    double mean = 0;
    for (const auto& pt : l.points) mean += pt.second;
    l.bytes_per_s = 1e18;
    l.latency_s = mean / static_cast<double>(l.points.size());
    return l;
  }
  l.bytes_per_s = 1.0 / slope;
  l.latency_s = std::max(0.0, icpt);
  return l;
}

Status measure_links(Backend& be, Profile& p, const CalibrateOptions& o) {
  const int64_t max = std::max<int64_t>(o.max_link_bytes, 1 << 20);
  TT_ASSIGN_OR_RETURN(Tensor dev, be.pool().allocate({max}, DType::kU8, TensorClass::kWorkspace, "calibrate.link"));
  TT_ASSIGN_OR_RETURN(Tensor dev2, be.pool().allocate({max}, DType::kU8, TensorClass::kWorkspace, "calibrate.link2"));
  TT_TRY(be.host_pool().reserve(static_cast<size_t>(2 * max + (1 << 20))));
  TT_ASSIGN_OR_RETURN(void* pinned, be.allocate_host(static_cast<size_t>(max), TensorClass::kWorkspace, "calibrate.link"));
  TT_ASSIGN_OR_RETURN(void* pinned2, be.allocate_host(static_cast<size_t>(max), TensorClass::kWorkspace, "calibrate.link2"));
  std::vector<char> pageable(static_cast<size_t>(max), 1);
  std::memset(pinned, 1, static_cast<size_t>(max));
  std::memset(pinned2, 1, static_cast<size_t>(max));
  Status st;
  CalibrateOptions lo = o;
  lo.min_seconds = std::max(o.min_seconds, 0.01);
  auto measure = [&](bool h2d, void* host) -> Result<LinkRate> {
    std::vector<std::pair<int64_t, double>> pts;
    for (int64_t n = 4096; n <= max; n *= 4) {
      const Tensor d = dev.view(0, {n});
      Stream& s = h2d ? be.h2d_stream() : be.d2h_stream();
      TT_ASSIGN_OR_RETURN(double t, time_on(be, s, lo, [&] {
        if (h2d) be.copy_h2d(d, host, s);
        else be.copy_d2h(host, d, s);
      }, 200));
      pts.emplace_back(n, t);
    }
    return fit(std::move(pts));
  };
  TT_ASSIGN_OR_RETURN(p.h2d_pinned, measure(true, pinned));
  TT_ASSIGN_OR_RETURN(p.d2h_pinned, measure(false, pinned));
  TT_ASSIGN_OR_RETURN(p.h2d_pageable, measure(true, pageable.data()));
  TT_ASSIGN_OR_RETURN(p.d2h_pageable, measure(false, pageable.data()));
  // The trainer's read of a step's results: small copies on the compute stream.
  {
    std::vector<std::pair<int64_t, double>> pts;
    for (int64_t n : {int64_t(4), int64_t(64) << 10, int64_t(1) << 20}) {
      const Tensor d = dev.view(0, {n});
      TT_ASSIGN_OR_RETURN(double t, time_on(be, be.compute_stream(), lo, [&] {
        be.copy_d2h(pinned, d, be.compute_stream());
      }, 200));
      pts.emplace_back(n, t);
    }
    p.readback = fit(std::move(pts));
  }
  // Both directions at once: one large copy each way, repeated, each timed on its own stream.
  {
    auto a1 = be.create_event(true), b1 = be.create_event(true), a2 = be.create_event(true), b2 = be.create_event(true);
    const int reps = 4;
    TT_TRY(be.synchronize_all());
    be.h2d_stream().record(*a1);
    be.d2h_stream().record(*a2);
    for (int i = 0; i < reps; ++i) {
      be.copy_h2d(dev, pinned, be.h2d_stream());
      be.copy_d2h(pinned2, dev2, be.d2h_stream());
    }
    be.h2d_stream().record(*b1);
    be.d2h_stream().record(*b2);
    TT_TRY(be.synchronize_all());
    TT_ASSIGN_OR_RETURN(double ms1, b1->elapsed_ms_since(*a1));
    TT_ASSIGN_OR_RETURN(double ms2, b2->elapsed_ms_since(*a2));
    p.duplex_h2d_bytes_per_s = static_cast<double>(max) * reps / (ms1 * 1e-3);
    p.duplex_d2h_bytes_per_s = static_cast<double>(max) * reps / (ms2 * 1e-3);
  }
  TT_TRY(be.synchronize_all());
  be.free_host(pinned2);
  be.free_host(pinned);
  be.pool().free(dev2);
  be.pool().free(dev);
  return st;
}

// The CPU optimizer's arrays for n parameters (master, gradients, moments, the bf16 copy) in the backend's host
// pool (pinned, on the device's NUMA node), initialised; freed with the object.
class HostAdamWArrays {
 public:
  static Result<std::unique_ptr<HostAdamWArrays>> make(Backend& be, int64_t n) {
    std::unique_ptr<HostAdamWArrays> h(new HostAdamWArrays(be));
    const size_t fb = static_cast<size_t>(n) * sizeof(float);
    TT_TRY(be.host_pool().reserve(4 * fb + fb / 2 + (size_t(1) << 20)));
    for (float*& a : h->f) {
      TT_ASSIGN_OR_RETURN(void* q, be.allocate_host(fb, TensorClass::kOptimState, "calibrate.adamw"));
      a = static_cast<float*>(q);
    }
    TT_ASSIGN_OR_RETURN(void* q, be.allocate_host(fb / 2, TensorClass::kParam, "calibrate.adamw"));
    h->out = static_cast<uint16_t*>(q);
    float *p = h->f[0], *g = h->f[1], *m = h->f[2], *v = h->f[3];
    uint16_t* o = h->out;
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) p[i] = 0.5f, g[i] = 1e-3f, m[i] = 0.0f, v[i] = 0.0f, o[i] = 0;
    return h;
  }
  ~HostAdamWArrays() {
    if (out) be_.free_host(out);
    for (int i = 3; i >= 0; --i)
      if (f[i]) be_.free_host(f[i]);
  }
  // One update of `count` parameters from `at` by `threads` threads.
  void update(int64_t at, int64_t count, int64_t step, int threads) const {
    host::adamw_update_f32(host::AdamWArrays{f[0] + at, f[1] + at, f[2] + at, f[3] + at, f[0] + at, f[2] + at,
                                             f[3] + at, out + at},
                           count, 1.0f, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 1.0f, threads);
  }
  float* f[4] = {nullptr, nullptr, nullptr, nullptr};
  uint16_t* out = nullptr;

 private:
  explicit HostAdamWArrays(Backend& be) : be_(be) {}
  Backend& be_;
};

// In the backend's host pool (pinned, on the device's NUMA node), where the CPU optimizer's state lives.
Status measure_host(Backend& be, Profile& p) {
  const int64_t n = int64_t(32) << 20;
  TT_ASSIGN_OR_RETURN(auto arrays, HostAdamWArrays::make(be, n));
  const HostAdamWArrays* h = arrays.get();
  const int max_threads = omp_get_max_threads();
  std::vector<int> counts;
  for (int t = 1; t < max_threads; t *= 2) counts.push_back(t);
  counts.push_back(be.host_threads());  // the run's (every core but one beside a GPU)
  counts.push_back(max_threads);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  // As the CPU optimizer runs it: on the backend's host stream (a CUDA host function on a GPU), one parameter
  // tensor after another (pieces of 4M), timed with events on that stream.
  Stream& hs = be.host_stream();
  auto e0 = be.create_event(true), e1 = be.create_event(true);
  for (int t : counts) {
    auto once = [&, t](int64_t step) {
      be.enqueue_host([=] {
        const int64_t piece = int64_t(4) << 20;
        for (int64_t at = 0; at < n; at += piece) h->update(at, std::min(piece, n - at), step, t);
      });
    };
    once(1);
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      hs.record(*e0);
      once(2 + r);
      hs.record(*e1);
      TT_TRY(e1->synchronize());
      TT_ASSIGN_OR_RETURN(double ms, e1->elapsed_ms_since(*e0));
      best = std::min(best, ms * 1e-3);
    }
    p.host_adamw_params_per_s[t] = static_cast<double>(n) / best;
  }
  TT_TRY(hs.synchronize());
  arrays.reset();
  // An empty host task (Note [contention] in perf/profile.h): the median of 5 runs of 8 back to back.
  {
    constexpr int kTasks = 8;
    std::vector<double> per;
    for (int r = 0; r < 5; ++r) {
      hs.record(*e0);
      for (int i = 0; i < kTasks; ++i) be.enqueue_host([] {});
      hs.record(*e1);
      TT_TRY(e1->synchronize());
      TT_ASSIGN_OR_RETURN(double ms, e1->elapsed_ms_since(*e0));
      per.push_back(ms * 1e-3 / kTasks);
    }
    std::sort(per.begin(), per.end());
    p.host_task_seconds = per[per.size() / 2];
  }
  // Host memory bandwidth: a large copy split over the threads (bytes copied a second).
  const size_t bytes = size_t(256) << 20;
  TT_TRY(be.host_pool().reserve(2 * bytes + (size_t(1) << 20)));
  TT_ASSIGN_OR_RETURN(void* ap, be.allocate_host(bytes, TensorClass::kWorkspace, "calibrate.memcpy"));
  TT_ASSIGN_OR_RETURN(void* bp, be.allocate_host(bytes, TensorClass::kWorkspace, "calibrate.memcpy"));
  char *a = static_cast<char*>(ap), *b = static_cast<char*>(bp);
  std::memset(a, 1, bytes);
  std::memset(b, 2, bytes);
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const double t0 = now_s();
#pragma omp parallel
    {
      const size_t k = static_cast<size_t>(omp_get_num_threads()), i = static_cast<size_t>(omp_get_thread_num());
      const size_t lo = bytes * i / k, hi = bytes * (i + 1) / k;
      std::memcpy(b + lo, a + lo, hi - lo);
    }
    best = std::min(best, now_s() - t0);
  }
  p.host_memcpy_bytes_per_s = static_cast<double>(bytes) / best;
  be.free_host(bp);
  be.free_host(ap);
  return Status::ok();
}

int64_t last_level_cache_bytes();

// Note [contention] in perf/profile.h: each kind of traffic (a 64 MiB copy each way between pinned memory and the
// device, the host AdamW over 32M parameters with the run's team), less its fixed cost, timed alone, then while each
// other kind runs throughout (started first; the victim's stream waits for its first unit, and it has at least twice the victim's
// time left); the median of three each. Each direction's copies walk a pinned region twice the last-level cache,
// as a step's copies touch gigabytes: a copy from one small buffer is served from the cache (DMA reads and writes
// the last-level cache on current x86 hosts) and does not contend for memory.
Status measure_contention(Backend& be, Profile& p, const CalibrateOptions& o) {
  const int64_t bytes = std::min<int64_t>(std::max<int64_t>(o.max_link_bytes, 1 << 20), int64_t(64) << 20);
  TT_ASSIGN_OR_RETURN(Tensor dev, be.pool().allocate({bytes}, DType::kU8, TensorClass::kWorkspace, "calibrate.contend"));
  TT_ASSIGN_OR_RETURN(Tensor dev2, be.pool().allocate({bytes}, DType::kU8, TensorClass::kWorkspace, "calibrate.contend"));
  const int64_t n = int64_t(32) << 20;
  TT_ASSIGN_OR_RETURN(auto arrays, HostAdamWArrays::make(be, n));
  const HostAdamWArrays* h = arrays.get();
  const int64_t chunks = std::max<int64_t>(4, (2 * last_level_cache_bytes() + bytes - 1) / bytes);
  const size_t region = static_cast<size_t>(chunks * bytes);
  TT_TRY(be.host_pool().reserve(2 * region + (size_t(1) << 20)));
  TT_ASSIGN_OR_RETURN(void* up, be.allocate_host(region, TensorClass::kWorkspace, "calibrate.contend"));
  TT_ASSIGN_OR_RETURN(void* down, be.allocate_host(region, TensorClass::kWorkspace, "calibrate.contend"));
  std::memset(up, 1, region);
  std::memset(down, 1, region);
  int64_t next_up = 0, next_down = 0;
  const int threads = be.host_threads();
  auto stream_of = [&](Traffic t) -> Stream& {
    return t == Traffic::kH2D ? be.h2d_stream() : t == Traffic::kD2H ? be.d2h_stream() : be.host_stream();
  };
  auto unit = [&](Traffic t) {
    if (t == Traffic::kH2D) be.copy_h2d(dev, static_cast<char*>(up) + (next_up++ % chunks) * bytes, be.h2d_stream());
    else if (t == Traffic::kD2H) be.copy_d2h(static_cast<char*>(down) + (next_down++ % chunks) * bytes, dev2, be.d2h_stream());
    else be.enqueue_host([h, n, threads] { h->update(0, n, 2, threads); });
  };
  auto e0 = be.create_event(true), e1 = be.create_event(true), started = be.create_event(false);
  // `units` of the victim, timed on its stream; with other >= 0, while `other_units` of that kind run.
  auto timed = [&](Traffic victim, int units, int other, int other_units) -> Result<double> {
    std::vector<double> ms;
    for (int r = 0; r < 3; ++r) {
      TT_TRY(be.synchronize_all());
      Stream& vs = stream_of(victim);
      if (other >= 0) {
        const Traffic t = static_cast<Traffic>(other);
        unit(t);
        stream_of(t).record(*started);
        for (int i = 1; i < other_units; ++i) unit(t);
        vs.wait(*started);
      }
      vs.record(*e0);
      for (int i = 0; i < units; ++i) unit(victim);
      vs.record(*e1);
      TT_TRY(be.synchronize_all());
      TT_ASSIGN_OR_RETURN(double m, e1->elapsed_ms_since(*e0));
      ms.push_back(m);
    }
    std::sort(ms.begin(), ms.end());
    return ms[1] * 1e-3;
  };
  // What other traffic does not slow, a unit of each kind: a copy's link latency, a host task's start.
  const double fixed_s[kNumTraffic] = {p.h2d_pinned.latency_s, p.d2h_pinned.latency_s, p.host_task_seconds};
  // Each kind alone: one unit, then as many as make at least 5 ms.
  double unit_s[kNumTraffic], alone_s[kNumTraffic];
  int units[kNumTraffic];
  for (int v = 0; v < kNumTraffic; ++v) {
    TT_ASSIGN_OR_RETURN(unit_s[v], timed(static_cast<Traffic>(v), 1, -1, 0));
    units[v] = static_cast<int>(std::clamp(std::ceil(0.005 / std::max(unit_s[v], 1e-9)), 1.0, 16.0));
    TT_ASSIGN_OR_RETURN(alone_s[v], units[v] == 1 ? Result<double>(unit_s[v]) : timed(static_cast<Traffic>(v), units[v], -1, 0));
  }
  for (int v = 0; v < kNumTraffic; ++v) {
    for (int other = 0; other < kNumTraffic; ++other) {
      if (other == v) continue;
      // Enough of the other to outlast the victim slowed twofold, after the unit the victim waits for.
      const int other_units = 2 + static_cast<int>(std::ceil(2 * alone_s[v] / std::max(unit_s[other], 1e-9)));
      TT_ASSIGN_OR_RETURN(double with, timed(static_cast<Traffic>(v), units[v], other, std::min(other_units, 400)));
      // The work beyond the fixed costs, alone and beside the other; all fixed (a simulated link): not slowed.
      const double fixed = units[v] * fixed_s[v], work = alone_s[v] - fixed;
      p.slowdown[v][other] = work > 0.05 * alone_s[v] ? std::clamp((with - fixed) / work, 1.0, 8.0) : 1.0;
    }
  }
  TT_TRY(be.synchronize_all());
  be.free_host(down);
  be.free_host(up);
  arrays.reset();
  be.pool().free(dev2);
  be.pool().free(dev);
  return Status::ok();
}

// The last-level cache's size (0 when the machine does not say).
int64_t last_level_cache_bytes() {
  int64_t best = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  best = std::max<int64_t>(best, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream size(dir + "size");
    std::string s;
    if (!(size >> s) || s.empty()) continue;
    int64_t v = std::atoll(s.c_str());
    if (s.back() == 'K') v <<= 10;
    if (s.back() == 'M') v <<= 20;
    best = std::max(best, v);
  }
  return best;
}

// Note [a cold host update]
// The CPU optimizer updates each segment once a step, and the rest of the model's state (and the step's copies)
// pass through the caches in between: a segment's state is cold when its update starts. Timed back to back, a
// segment small enough for the last-level cache (a GPT-2 block's 127 MB of state fits a large L3) is timed from the
// cache, faster than it runs in training, and the model then predicts the CPU optimizer's steps too fast
// (docs/benchmarks/2026-12-01-h200-perf-model/). So each timed update follows a read of a buffer twice the
// last-level cache (at least 64 MiB), with the team the run uses (Backend::host_threads).
Status measure_host_segments(Backend& be, Profile& p, const std::vector<std::vector<int64_t>>& segs) {
  int64_t most = 0;
  for (const auto& q : segs) {
    int64_t n = 0;
    for (int64_t k : q) n += k;
    most = std::max(most, n);
  }
  TT_ASSIGN_OR_RETURN(auto arrays, HostAdamWArrays::make(be, most));
  const HostAdamWArrays* h = arrays.get();
  // A profile's segments share one team: those added later are measured with the team of the first.
  const int threads = p.host_segments.empty() ? be.host_threads() : p.host_segment_threads;
  const size_t evict_bytes = static_cast<size_t>(std::max<int64_t>(2 * last_level_cache_bytes(), int64_t(64) << 20));
  std::vector<int64_t> evict(evict_bytes / sizeof(int64_t), 1);
  std::atomic<int64_t> sink{0};
  const auto evict_caches = [&be, &evict, &sink, threads] {
    be.enqueue_host([&evict, &sink, threads] {
      int64_t sum = 0;
      const int64_t n = static_cast<int64_t>(evict.size());
#pragma omp parallel for num_threads(threads) reduction(+ : sum) schedule(static)
      for (int64_t i = 0; i < n; i += 8) sum += evict[static_cast<size_t>(i)];
      sink += sum;
    });
  };
  Stream& hs = be.host_stream();
  auto e0 = be.create_event(true), e1 = be.create_event(true);
  Status st;
  for (const auto& q : segs) {
    auto once = [&, q](int64_t step) {
      be.enqueue_host([=] {
        int64_t at = 0;
        for (int64_t k : q) {
          h->update(at, k, step, threads);
          at += k;
        }
      });
    };
    once(1);
    double best = 1e30;
    for (int r = 0; r < 3 && st.is_ok(); ++r) {
      evict_caches();
      hs.record(*e0);
      once(2 + r);
      hs.record(*e1);
      st = e1->synchronize();
      if (!st.is_ok()) break;
      auto ms = e1->elapsed_ms_since(*e0);
      if (!ms.is_ok()) {
        st = ms.status();
        break;
      }
      best = std::min(best, ms.value() * 1e-3);
    }
    if (!st.is_ok()) break;
    p.host_segments[q] = best;
  }
  (void)hs.synchronize();
  p.host_segment_threads = threads;
  return st;
}

}  // namespace

MachineId this_machine(const std::string& backend, const BackendOptions& options) {
  MachineId m;
  m.backend = backend;
  const BackendProbe probe = probe_backend(backend);
  m.device = probe.device;
  if (probe.device_memory) m.device += str_format(" (%s)", format_bytes(probe.total_bytes).c_str());
  if (backend == "cuda") m.driver = first_line("/proc/driver/nvidia/version");
  m.cpu = str_format("%s x %u threads", cpu_name().c_str(), std::thread::hardware_concurrency());
  if (backend == "cuda") {
    m.attention = attention_impl_name(options.attention.impl);
    if (!options.attention.cudnn_library.empty()) m.attention += " " + options.attention.cudnn_library;
    // The workspace cap decides how many calls an attention backward takes (Note [automatic attention workspace]):
    // a profile measured under another cap is another machine's.
    const int64_t cap = options.attention.workspace_cap;
    m.attention += ", workspace " + (cap == kAutoAttentionWorkspace ? std::string("auto") : format_bytes(cap));
    m.attention += std::string(", f32 ") + f32_attention_name(options.attention.f32);
    // The GEMMs' library moves the GEMMs' times as the attention's moves the attention's (named when not the default,
    // so that profiles measured before the knob stay this machine's).
    if (options.gemm != GemmImpl::kCublas) m.attention += std::string(", gemm ") + gemm_impl_name(options.gemm);
    // (So is cuDNN's backward form, Note [non-deterministic backward] in backend/cuda/sdpa_graph.h.)
    if (!options.attention.deterministic) m.attention += ", non-deterministic backward";
    // Our kernels' revision, bumped when a change moves their times enough to reprice plans (a profile of an older
    // revision is then recalibrated): r2, the f32 attention backward's d(q) partials and rolled k loops
    // (docs/design/f32-attention.md); r3, the backward's dW GEMMs with beta 0 and no
    // zeroing of gradients (Note [gradients first written]), the gradient norm's 16-byte loads and managed memory
    // moved to the host in pieces (Note [prefetches to the host in pieces] in backend/cuda/um.cc).
    constexpr int kKernelsRevision = 3;
    m.attention += str_format(", kernels r%d", kKernelsRevision);
  }
  if (backend == "cpu") {
    m.sim = str_format("copy %lld us, compute %lld us, host %lld us, threads %d",
                       static_cast<long long>(options.copy_delay_us), static_cast<long long>(options.compute_delay_us),
                       static_cast<long long>(options.host_delay_us), options.threads);
  }
  return m;
}

namespace {
// The distinct calls of a sequence (repeated calls share their tensors).
std::vector<KernelCall> distinct(const std::vector<KernelCall>& calls) {
  std::vector<KernelCall> d;
  for (const KernelCall& c : calls)
    if (std::find(d.begin(), d.end(), c) == d.end()) d.push_back(c);
  return d;
}

int64_t sequence_bytes(const std::vector<KernelCall>& calls) {
  int64_t n = 0;
  for (const KernelCall& c : distinct(calls)) n += call_bytes(c);
  return n;
}

// Tensors for each distinct call, filled; freed by the destructor.
class CallSet {
 public:
  explicit CallSet(Backend& be) : be_(be) {}
  ~CallSet() {
    (void)be_.synchronize_all();
    for (auto it = all_.rbegin(); it != all_.rend(); ++it) be_.pool().free(*it);
  }
  Status add(const KernelCall& c, Filler& filler) {
    if (by_call_.count(c)) return Status::ok();
    std::vector<Tensor> ts;
    for (const auto& [shape, dt] : shapes_of(c).t) {
      auto t = be_.pool().allocate(shape, dt, TensorClass::kWorkspace, "calibrate");
      if (!t.is_ok()) {
        Status s = t.status();
        return std::move(s.with_context("calibrating " + c.describe()));
      }
      all_.push_back(t.value());
      ts.push_back(t.value());
      const int64_t range = c.op == KernelOp::kEmbeddingForward || c.op == KernelOp::kEmbeddingBackward
                                ? c.dims[3]
                                : std::max<int64_t>(1, c.dims[1]);
      TT_TRY(filler.fill(be_, ts.back(), range));
    }
    by_call_[c] = std::move(ts);
    return Status::ok();
  }
  void run_call(const KernelCall& c) { run(be_, c, by_call_.at(c)); }

 private:
  Backend& be_;
  std::vector<Tensor> all_;
  std::map<KernelCall, std::vector<Tensor>> by_call_;
};
}  // namespace

int64_t calibration_budget(const CalibrateOptions& options) {
  int64_t most = options.links ? 2 * std::max<int64_t>(options.max_link_bytes, 1 << 20) + (1 << 20) : 0;
  for (const KernelCall& c : options.kernels) most = std::max(most, call_bytes(c));
  for (const auto& q : options.sequences) most = std::max(most, sequence_bytes(q));
  // The backend keeps its own scratch (cuBLAS workspace) in the budget, and the pool rounds and aligns.
  return most + most / 8 + (int64_t(512) << 20);
}

Status measure_kernels(Backend& be, Profile& profile, const CalibrateOptions& options) {
  CalibrateOptions o = options;
  o.heat_seconds = profile.heat_seconds;
  std::vector<KernelCall> calls;
  for (const KernelCall& c : distinct(o.kernels))
    if (!profile.measured(c)) calls.push_back(c);
  std::vector<std::vector<KernelCall>> seqs;
  for (const auto& q : o.sequences)
    if (!profile.sequences.count(q) && std::find(seqs.begin(), seqs.end(), q) == seqs.end()) seqs.push_back(q);
  std::vector<std::vector<int64_t>> hsegs;
  for (const auto& q : o.host_segments)
    if (!profile.host_segments.count(q) && std::find(hsegs.begin(), hsegs.end(), q) == hsegs.end()) hsegs.push_back(q);
  const size_t total = calls.size() + seqs.size() + hsegs.size();
  if (total == 0) return Status::ok();
  const double t0 = now_s();
  Filler filler;
  double last_report = t0;
  auto report = [&](size_t done) {
    if (!o.progress || (now_s() - last_report < 5 && done < total)) return;
    std::fprintf(o.progress, "calibrate: %zu of %zu kernel shapes and sequences measured (%.1f s)\n", done, total,
                 now_s() - t0);
    std::fflush(o.progress);
    last_report = now_s();
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    const KernelCall& c = calls[i];
    CallSet set(be);
    TT_TRY(set.add(c, filler));
    TT_TRY(be.compute_stream().synchronize());
    TT_ASSIGN_OR_RETURN(double sec, time_on(be, be.compute_stream(), o, [&] { set.run_call(c); }, o.max_reps));
    profile.set_kernel(c, sec);
    report(i + 1);
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::vector<KernelCall>& q = seqs[i];
    CallSet set(be);
    for (const KernelCall& c : distinct(q)) TT_TRY(set.add(c, filler));
    TT_TRY(be.compute_stream().synchronize());
    TT_ASSIGN_OR_RETURN(double sec, time_on(be, be.compute_stream(), o, [&] {
      for (const KernelCall& c : q) set.run_call(c);
    }, o.max_reps, o.heat_seconds));
    profile.sequences[q] = sec;
    report(calls.size() + i + 1);
  }
  if (!hsegs.empty()) {
    TT_TRY(measure_host_segments(be, profile, hsegs));
    report(total);
  }
  profile.calibrate_seconds += now_s() - t0;
  return Status::ok();
}

// Unified Memory's rates (Profile::um_*), where the backend has managed memory: a range of up to 128 MiB reserved
// (never more than the GPU has free: UmDriver::reserve refuses it) and its first 2, 8, 32 and 128 MiB moved, each kind
// timed alone from the state it needs (set up untimed before each timing): to the host from the device, to the device
// from the host, a discard of pages on the device, a populate (to the device) of discarded pages, and a kernel writing
// pages that are on the host (the device's faults bring them). The best of three each. A reservation refused (a GPU
// with too little free memory) leaves the rates unmeasured.
Status measure_um(Backend& be, Profile& p, const CalibrateOptions& o) {
  memory::UmDriver* um = be.um();
  if (um == nullptr) return Status::ok();
  constexpr int64_t kMiB = int64_t(1) << 20;
  const int64_t max = std::clamp<int64_t>(o.max_link_bytes, 2 * kMiB, 128 * kMiB);
  Result<void*> base = um->reserve(static_cast<size_t>(max + 2 * kMiB), /*allow_oversubscription=*/false);
  if (!base.is_ok()) {
    if (o.progress)
      std::fprintf(o.progress, "calibrate: Unified Memory not measured: %s\n", base.status().to_string().c_str());
    return Status::ok();
  }
  // On a 2 MiB boundary, as the executor's managed pool (Executor::allocate_and_bind).
  char* range = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base.value()) + 2 * kMiB - 1) / (2 * kMiB) *
                                        (2 * kMiB));
  std::memset(range, 1, static_cast<size_t>(max));  // pages with data, on the host
  auto a = be.create_event(true), b = be.create_event(true);
  // One timing of `timed` on stream s after `setup` (untimed, finished first); the best of three.
  auto best_of = [&](Stream& s, const std::function<void()>& setup, const std::function<void()>& timed)
      -> Result<double> {
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      setup();
      TT_TRY(be.synchronize_all());
      s.record(*a);
      timed();
      s.record(*b);
      TT_TRY(b->synchronize());
      TT_ASSIGN_OR_RETURN(double t, b->elapsed_ms_since(*a));
      best = std::min(best, std::max(t * 1e-3, 1e-7));
    }
    return best;
  };
  std::vector<std::pair<int64_t, double>> to_host, to_device, populate, discard, fault_in;
  for (int64_t n = 2 * kMiB; n <= max; n *= 4) {
    const std::vector<memory::UmRange> r = {{range, static_cast<size_t>(n)}};
    auto on_device = [&] { um->prefetch(r, memory::UmPlace::kDevice, be.h2d_stream()); };
    auto on_host = [&] { um->prefetch(r, memory::UmPlace::kHost, be.d2h_stream()); };
    TT_ASSIGN_OR_RETURN(double th, best_of(be.d2h_stream(), on_device, on_host));
    to_host.emplace_back(n, th);
    TT_ASSIGN_OR_RETURN(double td, best_of(be.h2d_stream(), on_host, on_device));
    to_device.emplace_back(n, td);
    // A release (dead pages off the device: a discard-and-prefetch to the host) and a populate (dead pages onto
    // the device after a release), as the schedule issues them (Note [managed activations]).
    auto release = [&] { um->discard(r, memory::UmPlace::kHost, be.h2d_stream()); };
    TT_ASSIGN_OR_RETURN(double tx, best_of(be.h2d_stream(), on_device, release));
    discard.emplace_back(n, tx);
    TT_ASSIGN_OR_RETURN(double tp, best_of(be.h2d_stream(), [&] {
      on_device();
      release();
    }, [&] { um->discard(r, memory::UmPlace::kDevice, be.h2d_stream()); }));
    populate.emplace_back(n, tp);
    // A kernel writing the range while its pages are on the host: they come over on the device's faults.
    const Tensor t(range, {n / 4}, DType::kF32, TensorClass::kWorkspace, be.device());
    TT_ASSIGN_OR_RETURN(double tf, best_of(be.compute_stream(), on_host, [&] { be.fill_zero(t, be.compute_stream()); }));
    fault_in.emplace_back(n, tf);
  }
  TT_TRY(be.synchronize_all());
  um->release(base.value());
  p.um_to_host = fit(std::move(to_host));
  p.um_to_device = fit(std::move(to_device));
  p.um_discard = fit(std::move(discard));
  p.um_populate = fit(std::move(populate));
  p.um_fault_in = fit(std::move(fault_in));
  return Status::ok();
}

// Note [pricing collectives] (perf/costs.cc): every rank of the world averages f32 buffers of 64 KiB to 64 MiB
// through the reducer a mesh's run uses (exec/grad_reducer.h, here on the comm stream), as many times as take
// o.min_seconds on the slowest rank (the ranks agree on each count), and the times (the slowest rank's) are fitted
// as latency + bytes / bandwidth.
Result<LinkRate> measure_allreduce(Backend& be, comm::Communicator& world, const CalibrateOptions& o) {
  TT_RETURN_IF(world.size() < 2, kInvalidArgument, "an allreduce needs two ranks or more");
  TT_ASSIGN_OR_RETURN(std::unique_ptr<GradReducer> reducer,
                      make_stream_reducer(be, world, be.comm_stream(), "calibrate"));
  const int64_t most = std::min<int64_t>(o.max_link_bytes, int64_t(64) << 20) / 4;
  TT_ASSIGN_OR_RETURN(Tensor buf, be.pool().allocate({most}, DType::kF32, TensorClass::kWorkspace, "allreduce"));
  be.fill_zero(buf, be.compute_stream());
  TT_TRY(be.compute_stream().synchronize());
  std::vector<std::pair<int64_t, double>> pts;
  Status st;
  for (int64_t n = 16384; n <= most && st.is_ok(); n *= 4) {
    const Tensor t = buf.view(0, {n});
    reducer->reduce(t, be.comm_stream());  // warm-up: the first call of a size sets up its buffers
    st = be.comm_stream().synchronize();
    for (int reps = 1; st.is_ok(); reps *= 2) {
      if (st = world.barrier(); !st.is_ok()) break;
      const double t0 = now_s();
      for (int i = 0; i < reps; ++i) reducer->reduce(t, be.comm_stream());
      if (st = be.comm_stream().synchronize(); !st.is_ok()) break;
      double secs = now_s() - t0;
      if (st = world.allreduce(comm::kInPlace, &secs, 1, comm::DType::kF64, comm::Op::kMax); !st.is_ok()) break;
      if (secs >= o.min_seconds || reps >= o.max_reps) {
        pts.emplace_back(n * 4, secs / reps);
        break;
      }
    }
  }
  be.pool().free(buf);
  TT_TRY(st);
  TT_TRY(reducer->status());
  return fit(std::move(pts));
}

Result<Profile> calibrate(Backend& be, const MachineId& machine, const CalibrateOptions& o) {
  Profile p;
  p.machine = machine;
  p.heat_seconds = o.heat_seconds;
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p.created = buf;
  const double t0 = now_s();
  if (o.links) {
    if (o.progress) std::fprintf(o.progress, "calibrate: host links (pinned and pageable, each way and both at once)\n");
    TT_TRY(measure_links(be, p, o));
  }
  if (o.um) {
    if (be.um() != nullptr && o.progress)
      std::fprintf(o.progress, "calibrate: Unified Memory (prefetches each way, discard, populate)\n");
    TT_TRY(measure_um(be, p, o));
  }
  if (o.host) {
    if (o.progress) std::fprintf(o.progress, "calibrate: host AdamW by thread count, host memory bandwidth\n");
    TT_TRY(measure_host(be, p));
  }
  p.calibrate_seconds = now_s() - t0;
  TT_TRY(measure_kernels(be, p, o));
  // Last: its gigabyte of traffic can leave the host busy for a moment, which the kernel timings must not see.
  if (o.links && o.host) {
    if (o.progress) std::fprintf(o.progress, "calibrate: contention between copies each way and the host update\n");
    const double t1 = now_s();
    TT_TRY(measure_contention(be, p, o));
    p.calibrate_seconds += now_s() - t1;
  }
  return p;
}

}  // namespace tt::perf
