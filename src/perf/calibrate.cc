#include "perf/calibrate.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <thread>

#include "core/bf16.h"
#include "core/rng.h"
#include "core/units.h"
#include "host/adamw.h"
#include "model/gpt.h"

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
      add({a, b, d2 * d3}, dt), add({a, d2, b}, md), add({a, b, 3 * d2 * d3}, dt);
      break;
    case KernelOp::kAttentionBackward:  // dqkv, dout, qkv, out, lse
      add({a, b, 3 * d2 * d3}, dt), add({a, b, d2 * d3}, dt), add({a, b, 3 * d2 * d3}, dt), add({a, b, d2 * d3}, dt),
          add({a, d2, b}, md);
      break;
    case KernelOp::kSoftmaxXentForward:
    case KernelOp::kSoftmaxXentFused:  // losses, logits, targets
      add({a}, md), add({a, b}, dt), add({a}, I);
      break;
    case KernelOp::kResidualForward:  // out, a, b
      add({a}, dt), add({a}, dt), add({a}, dt);
      break;
    case KernelOp::kFillZero:
      add({a}, dt);
      break;
    case KernelOp::kConvert:  // dst (compute), src (master)
      add({a}, dt), add({a}, md);
      break;
    case KernelOp::kSumSquares:  // out, x
      add({1}, dt), add({a}, dt);
      break;
    case KernelOp::kAdamWUpdate:  // param, grad, m, v, norm
      for (int i = 0; i < 4; ++i) add({a}, dt);
      add({1}, dt);
      break;
    case KernelOp::kCopyD2D:
      add({a}, dt), add({a}, dt);
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
    case KernelOp::kEmbeddingBackward: be.embedding_backward(t[0], t[1], t[2], t[3]); break;
    case KernelOp::kLayernormForward: be.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5]); break;
    case KernelOp::kLayernormBackward: be.layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]); break;
    case KernelOp::kResidualLayernormForward:
      be.residual_layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
      break;
    case KernelOp::kMatmulForward: be.matmul_forward(t[0], t[1], t[2], c.dims[3] ? t[3] : none); break;
    case KernelOp::kMatmulBackward:
      be.matmul_backward(t[0], t[1], c.dims[3] ? t[5] : none, t[2], t[3], t[4]);
      break;
    case KernelOp::kMatmulGeluForward: be.matmul_gelu_forward(t[0], t[1], t[2], t[3], t[4]); break;
    case KernelOp::kMatmulBackwardGelu: be.matmul_backward_gelu(t[0], t[1], t[2], t[3], t[4], t[5], t[6]); break;
    case KernelOp::kAttentionForward: be.attention_forward(t[0], t[1], t[2], static_cast<int>(c.dims[2])); break;
    case KernelOp::kAttentionBackward:
      be.attention_backward(t[0], t[1], t[2], t[3], t[4], static_cast<int>(c.dims[2]));
      break;
    case KernelOp::kSoftmaxXentForward: be.softmax_xent_forward(t[0], t[1], t[1], t[2], vocab); break;
    case KernelOp::kSoftmaxXentFused: be.softmax_xent_fused(t[0], t[1], t[1], t[2], 1e-4f, vocab); break;
    case KernelOp::kResidualForward: be.residual_forward(t[0], t[1], t[2]); break;
    case KernelOp::kFillZero: be.fill_zero(t[0], be.compute_stream()); break;
    case KernelOp::kConvert: be.convert(t[0], t[1]); break;
    case KernelOp::kSumSquares: be.sum_squares(t[0], t[1]); break;
    case KernelOp::kAdamWUpdate: {
      AdamWArgs args;
      args.weight_decay = 0.1f;
      args.grad_clip = 1.0f;
      be.adamw_update(t[0], t[1], t[2], t[3], t[4], args);
      break;
    }
    case KernelOp::kCopyD2D: be.copy_d2d(t[0], t[1], be.compute_stream()); break;
  }
}

// Random values in [-1, 1) (integers in [0, range) for int32 tensors), tiled from a block so that filling gigabytes
// stays cheap.
class Filler {
 public:
  Filler() : f32_(size_t(1) << 20), bf16_(f32_.size()) {
    Rng rng(1234);
    for (size_t i = 0; i < f32_.size(); ++i) {
      f32_[i] = static_cast<float>(2.0 * rng.uniform() - 1.0);
      bf16_[i] = float_to_bf16(f32_[i]);
    }
  }
  // Synchronous: `host` is reused for the next tensor.
  Status fill(Backend& be, const Tensor& t, int64_t int_range, std::vector<char>& host) {
    const size_t bytes = t.nbytes();
    host.resize(bytes);
    const size_t n = static_cast<size_t>(t.numel());
    for (size_t i = 0; i < n; ++i) {
      switch (t.dtype()) {
        case DType::kF32: reinterpret_cast<float*>(host.data())[i] = f32_[i % f32_.size()] + 1.5f; break;
        case DType::kF64: reinterpret_cast<double*>(host.data())[i] = f32_[i % f32_.size()] + 1.5; break;
        case DType::kBF16: reinterpret_cast<uint16_t*>(host.data())[i] = bf16_[i % bf16_.size()]; break;
        case DType::kI32:
          reinterpret_cast<int32_t*>(host.data())[i] = static_cast<int32_t>((i * 2654435761u) % static_cast<size_t>(int_range));
          break;
        default: host[i] = static_cast<char>(i);
      }
    }
    be.copy_h2d(t, host.data(), be.compute_stream());
    return be.compute_stream().synchronize();
  }

 private:
  std::vector<float> f32_;
  std::vector<uint16_t> bf16_;
};

// Seconds per run of fn on stream, timed with events over repetitions until min_seconds (after one warm-up run).
template <typename F>
Result<double> time_on(Backend& be, Stream& stream, const CalibrateOptions& o, F fn, int max_reps) {
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
  if (reps == 1 && once >= o.min_seconds) return once;
  stream.record(*a);
  for (int i = 0; i < reps; ++i) fn();
  stream.record(*b);
  TT_TRY(b->synchronize());
  TT_ASSIGN_OR_RETURN(double ms, b->elapsed_ms_since(*a));
  return ms * 1e-3 / reps;
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
  if (!(slope > 0)) {  // degenerate: the largest copy's rate, no latency
    const auto& [n, t] = l.points.back();
    slope = t / static_cast<double>(n);
    icpt = 0;
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

void measure_host(Profile& p) {
  const int64_t n = int64_t(8) << 20;
  std::vector<float> param(static_cast<size_t>(n), 0.5f), grad(static_cast<size_t>(n), 1e-3f),
      m(static_cast<size_t>(n), 0.0f), v(static_cast<size_t>(n), 0.0f);
  std::vector<uint16_t> out(static_cast<size_t>(n));
  const int max_threads = omp_get_max_threads();
  std::vector<int> counts;
  for (int t = 1; t < max_threads; t *= 2) counts.push_back(t);
  counts.push_back(max_threads);
  for (int t : counts) {
    omp_set_num_threads(t);
    auto once = [&](int64_t step) {
      host::adamw_update_f32(param.data(), grad.data(), m.data(), v.data(), out.data(), n, 1.0f, 1e-4f, 0.9f, 0.95f,
                             1e-8f, 0.1f, step, 1.0f);
    };
    once(1);
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      const double t0 = now_s();
      once(2 + r);
      best = std::min(best, now_s() - t0);
    }
    p.host_adamw_params_per_s[t] = static_cast<double>(n) / best;
  }
  omp_set_num_threads(max_threads);
  // Host memory bandwidth: a large copy split over the threads (bytes copied a second).
  const size_t bytes = size_t(256) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const double t0 = now_s();
#pragma omp parallel
    {
      const size_t k = static_cast<size_t>(omp_get_num_threads()), i = static_cast<size_t>(omp_get_thread_num());
      const size_t lo = bytes * i / k, hi = bytes * (i + 1) / k;
      std::memcpy(b.data() + lo, a.data() + lo, hi - lo);
    }
    best = std::min(best, now_s() - t0);
  }
  p.host_memcpy_bytes_per_s = static_cast<double>(bytes) / best;
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
  if (backend == "cpu") {
    m.sim = str_format("copy %lld us, compute %lld us, host %lld us, threads %d",
                       static_cast<long long>(options.copy_delay_us), static_cast<long long>(options.compute_delay_us),
                       static_cast<long long>(options.host_delay_us), options.threads);
  }
  return m;
}

int64_t calibration_budget(const std::vector<KernelCall>& calls, const CalibrateOptions& options) {
  int64_t most = options.links ? 2 * std::max<int64_t>(options.max_link_bytes, 1 << 20) + (1 << 20) : 0;
  for (const KernelCall& c : calls) most = std::max(most, call_bytes(c));
  return most + (int64_t(64) << 20);
}

Status measure_kernels(Backend& be, Profile& profile, const std::vector<KernelCall>& calls,
                       const CalibrateOptions& o) {
  std::vector<KernelCall> todo;
  for (const KernelCall& c : calls)
    if (!profile.measured(c) && std::find(todo.begin(), todo.end(), c) == todo.end()) todo.push_back(c);
  if (todo.empty()) return Status::ok();
  const double t0 = now_s();
  Filler filler;
  std::vector<char> host;
  double last_report = t0;
  for (size_t i = 0; i < todo.size(); ++i) {
    const KernelCall& c = todo[i];
    std::vector<Tensor> ts;
    for (const auto& [shape, dt] : shapes_of(c).t) {
      auto t = be.pool().allocate(shape, dt, TensorClass::kWorkspace, "calibrate");
      if (!t.is_ok()) {
        for (auto it = ts.rbegin(); it != ts.rend(); ++it) be.pool().free(*it);
        Status s = t.status();
        return s.with_context("calibrating " + c.describe());
      }
      ts.push_back(t.value());
      const int64_t range = c.op == KernelOp::kEmbeddingForward || c.op == KernelOp::kEmbeddingBackward
                                ? c.dims[3]
                                : std::max<int64_t>(1, c.dims[1]);
      if (Status s = filler.fill(be, ts.back(), range, host); !s.is_ok()) {
        for (auto it = ts.rbegin(); it != ts.rend(); ++it) be.pool().free(*it);
        return s;
      }
    }
    TT_TRY(be.compute_stream().synchronize());
    auto sec = time_on(be, be.compute_stream(), o, [&] { run(be, c, ts); }, o.max_reps);
    TT_TRY(be.synchronize_all());
    for (auto it = ts.rbegin(); it != ts.rend(); ++it) be.pool().free(*it);
    if (!sec.is_ok()) return sec.status();
    profile.set_kernel(c, sec.value());
    if (o.progress && (now_s() - last_report > 5 || i + 1 == todo.size())) {
      std::fprintf(o.progress, "calibrate: %zu of %zu kernel shapes measured (%.1f s)\n", i + 1, todo.size(),
                   now_s() - t0);
      std::fflush(o.progress);
      last_report = now_s();
    }
  }
  profile.calibrate_seconds += now_s() - t0;
  return Status::ok();
}

Result<Profile> calibrate(Backend& be, const MachineId& machine, const CalibrateOptions& o) {
  Profile p;
  p.machine = machine;
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p.created = buf;
  const double t0 = now_s();
  if (o.links) {
    if (o.progress) std::fprintf(o.progress, "calibrate: host links (pinned and pageable, each way and both at once)\n");
    TT_TRY(measure_links(be, p, o));
  }
  if (o.host) {
    if (o.progress) std::fprintf(o.progress, "calibrate: host AdamW by thread count, host memory bandwidth\n");
    measure_host(p);
  }
  p.calibrate_seconds = now_s() - t0;
  TT_TRY(measure_kernels(be, p, o.kernels, o));
  return p;
}

}  // namespace tt::perf
