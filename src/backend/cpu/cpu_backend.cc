#include "backend/cpu/cpu_backend.h"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

#include "backend/cpu/cpu_stream.h"
#include "backend/cpu/kernels.h"
#include "core/log.h"
#include "core/units.h"

namespace tt::cpu {
namespace {

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  TT_CHECK(a.shape() == b.shape(), "%s: shape %s != %s", op, a.shape().to_string().c_str(),
           b.shape().to_string().c_str());
}

void check_float(const Tensor& t, DType dtype, const char* op) {
  TT_CHECK(t.dtype() == dtype, "%s: tensor is %s, expected %s", op, dtype_name(t.dtype()), dtype_name(dtype));
}

// Runs f.template operator()<T>() for the floating dtype of t.
template <typename F>
void dispatch_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kF32: f.template operator()<float>(); break;
    case DType::kF64: f.template operator()<double>(); break;
    default: TT_CHECK(false, "%s: the CPU backend computes in f32 or f64, not %s", op, dtype_name(dtype));
  }
}

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() && t.raw() != nullptr ? t.data<T>() : nullptr;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(void* region, size_t region_bytes, int64_t budget, int threads)
      : region_(region), region_bytes_(region_bytes), threads_(threads),
        pool_(region, static_cast<size_t>(budget), Device{DeviceKind::kCpu, 0}, &stats_),
        compute_("compute"), h2d_("h2d"), d2h_("d2h") {
    // OpenMP thread pools are per calling thread: set the count on the worker that runs the kernels.
    compute_.enqueue([threads] { set_num_threads(threads); });
    (void)compute_.synchronize();
  }
  ~CpuBackend() override {
    (void)synchronize_all();
    munmap(region_, region_bytes_);
  }

  Device device() const override { return Device{DeviceKind::kCpu, 0}; }
  std::string describe() const override {
    return str_format("cpu (%d threads, OpenBLAS GEMM, device budget %s)", threads_,
                      format_bytes(static_cast<int64_t>(pool_.budget())).c_str());
  }
  Stream& compute_stream() override { return compute_; }
  Stream& h2d_stream() override { return h2d_; }
  Stream& d2h_stream() override { return d2h_; }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }
  memory::DevicePool& pool() override { return pool_; }
  memory::MemoryStats& stats() override { return stats_; }

  void copy_h2d(const Tensor& dst, const void* src, Stream& stream) override {
    void* d = dst.raw();
    size_t n = dst.nbytes();
    as_cpu(stream).enqueue([d, src, n] { std::memcpy(d, src, n); });
  }
  void copy_d2h(void* dst, const Tensor& src, Stream& stream) override {
    const void* s = src.raw();
    size_t n = src.nbytes();
    as_cpu(stream).enqueue([dst, s, n] { std::memcpy(dst, s, n); });
  }
  void copy_d2d(const Tensor& dst, const Tensor& src, Stream& stream) override {
    TT_CHECK(dst.nbytes() == src.nbytes(), "copy_d2d: %zu != %zu bytes", dst.nbytes(), src.nbytes());
    void* d = dst.raw();
    const void* s = src.raw();
    size_t n = src.nbytes();
    as_cpu(stream).enqueue([d, s, n] { std::memmove(d, s, n); });
  }
  void fill_zero(const Tensor& t, Stream& stream) override {
    void* d = t.raw();
    size_t n = t.nbytes();
    as_cpu(stream).enqueue([d, n] { std::memset(d, 0, n); });
  }

  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) override {
    const int B = static_cast<int>(out.dim(0)), T_ = static_cast<int>(out.dim(1)), C = static_cast<int>(out.dim(2));
    check_float(tokens, DType::kI32, "embedding_forward");
    TT_CHECK(tokens.numel() == static_cast<int64_t>(B) * T_ && wte.dim(1) == C && wpe.dim(1) == C &&
                 wpe.dim(0) >= T_,
             "embedding_forward: out %s tokens %s wte %s wpe %s", out.shape().to_string().c_str(),
             tokens.shape().to_string().c_str(), wte.shape().to_string().c_str(), wpe.shape().to_string().c_str());
    dispatch_float(out.dtype(), "embedding_forward", [&]<typename T>() {
      T* o = out.data<T>();
      const int32_t* tok = tokens.data<int32_t>();
      const T* te = wte.data<T>();
      const T* pe = wpe.data<T>();
      compute_.enqueue([=] { cpu::embedding_forward<T>(o, tok, te, pe, B, T_, C); });
    });
  }

  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens) override {
    const int B = static_cast<int>(dout.dim(0)), T_ = static_cast<int>(dout.dim(1)), C = static_cast<int>(dout.dim(2));
    const int V = static_cast<int>(dwte.dim(0));
    TT_CHECK(dwte.dim(1) == C && dwpe.dim(1) == C && tokens.numel() == static_cast<int64_t>(B) * T_,
             "embedding_backward: shapes");
    dispatch_float(dout.dtype(), "embedding_backward", [&]<typename T>() {
      T* dte = dwte.data<T>();
      T* dpe = dwpe.data<T>();
      const T* d = dout.data<T>();
      const int32_t* tok = tokens.data<int32_t>();
      compute_.enqueue([=] { cpu::embedding_backward<T>(dte, dpe, d, tok, B, T_, C, V); });
    });
  }

  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& w, const Tensor& b) override {
    check_same_shape(out, inp, "layernorm_forward");
    const int C = static_cast<int>(inp.dim(inp.shape().rank() - 1));
    const int64_t N = inp.numel() / C;
    TT_CHECK(mean.numel() == N && rstd.numel() == N && w.numel() == C && b.numel() == C, "layernorm_forward: shapes");
    dispatch_float(inp.dtype(), "layernorm_forward", [&]<typename T>() {
      T *o = out.data<T>(), *m = mean.data<T>(), *r = rstd.data<T>();
      const T *x = inp.data<T>(), *wp = w.data<T>(), *bp = b.data<T>();
      compute_.enqueue([=] { cpu::layernorm_forward<T>(o, m, r, x, wp, bp, N, C); });
    });
  }

  void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout,
                          const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd) override {
    check_same_shape(dinp, inp, "layernorm_backward");
    check_same_shape(dout, inp, "layernorm_backward");
    const int C = static_cast<int>(inp.dim(inp.shape().rank() - 1));
    const int64_t N = inp.numel() / C;
    TT_CHECK(dw.numel() == C && db.numel() == C && mean.numel() == N, "layernorm_backward: shapes");
    dispatch_float(inp.dtype(), "layernorm_backward", [&]<typename T>() {
      T *di = dinp.data<T>(), *dwp = dw.data<T>(), *dbp = db.data<T>();
      const T *d = dout.data<T>(), *x = inp.data<T>(), *wp = w.data<T>(), *m = mean.data<T>(), *r = rstd.data<T>();
      compute_.enqueue([=] { cpu::layernorm_backward<T>(di, dwp, dbp, d, x, wp, m, r, N, C); });
    });
  }

  void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias) override {
    const int C = static_cast<int>(w.dim(1)), OC = static_cast<int>(w.dim(0));
    const int64_t N = inp.numel() / C;
    TT_CHECK(inp.numel() == N * C && out.numel() == N * OC && (bias.raw() == nullptr || bias.numel() == OC),
             "matmul_forward: out %s inp %s w %s", out.shape().to_string().c_str(), inp.shape().to_string().c_str(),
             w.shape().to_string().c_str());
    dispatch_float(inp.dtype(), "matmul_forward", [&]<typename T>() {
      T* o = out.data<T>();
      const T *x = inp.data<T>(), *wp = w.data<T>(), *bp = ptr<T>(bias);
      compute_.enqueue([=] { cpu::matmul_forward<T>(o, x, wp, bp, N, C, OC); });
    });
  }

  void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& w) override {
    const int C = static_cast<int>(w.dim(1)), OC = static_cast<int>(w.dim(0));
    const int64_t N = inp.numel() / C;
    TT_CHECK(dout.numel() == N * OC && (dinp.raw() == nullptr || dinp.numel() == N * C) &&
                 (dw.raw() == nullptr || dw.numel() == static_cast<int64_t>(OC) * C) &&
                 (dbias.raw() == nullptr || dbias.numel() == OC),
             "matmul_backward: shapes");
    dispatch_float(inp.dtype(), "matmul_backward", [&]<typename T>() {
      T *di = ptr<T>(dinp), *dwp = ptr<T>(dw), *dbp = ptr<T>(dbias);
      const T *d = dout.data<T>(), *x = inp.data<T>(), *wp = w.data<T>();
      compute_.enqueue([=] { cpu::matmul_backward<T>(di, dwp, dbp, d, x, wp, N, C, OC); });
    });
  }

  void attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv, int heads) override {
    const int B = static_cast<int>(qkv.dim(0)), T_ = static_cast<int>(qkv.dim(1)),
              C = static_cast<int>(qkv.dim(2) / 3);
    TT_CHECK(qkv.dim(2) == 3 * C && C % heads == 0 && out.numel() == static_cast<int64_t>(B) * T_ * C &&
                 att.numel() == static_cast<int64_t>(B) * heads * T_ * T_,
             "attention_forward: out %s att %s qkv %s heads %d", out.shape().to_string().c_str(),
             att.shape().to_string().c_str(), qkv.shape().to_string().c_str(), heads);
    dispatch_float(qkv.dtype(), "attention_forward", [&]<typename T>() {
      T *o = out.data<T>(), *a = att.data<T>();
      const T* q = qkv.data<T>();
      compute_.enqueue([=] { cpu::attention_forward<T>(o, a, q, B, T_, C, heads); });
    });
  }

  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                          int heads) override {
    check_same_shape(dqkv, qkv, "attention_backward");
    const int B = static_cast<int>(qkv.dim(0)), T_ = static_cast<int>(qkv.dim(1)),
              C = static_cast<int>(qkv.dim(2) / 3);
    TT_CHECK(dout.numel() == static_cast<int64_t>(B) * T_ * C &&
                 att.numel() == static_cast<int64_t>(B) * heads * T_ * T_,
             "attention_backward: shapes");
    dispatch_float(qkv.dtype(), "attention_backward", [&]<typename T>() {
      T* dq = dqkv.data<T>();
      const T *d = dout.data<T>(), *q = qkv.data<T>(), *a = att.data<T>();
      compute_.enqueue([=] { cpu::attention_backward<T>(dq, d, q, a, B, T_, C, heads); });
    });
  }

  void gelu_forward(const Tensor& out, const Tensor& inp) override {
    check_same_shape(out, inp, "gelu_forward");
    const int64_t n = inp.numel();
    dispatch_float(inp.dtype(), "gelu_forward", [&]<typename T>() {
      T* o = out.data<T>();
      const T* x = inp.data<T>();
      compute_.enqueue([=] { cpu::gelu_forward<T>(o, x, n); });
    });
  }

  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    check_same_shape(dinp, inp, "gelu_backward");
    check_same_shape(dout, inp, "gelu_backward");
    const int64_t n = inp.numel();
    dispatch_float(inp.dtype(), "gelu_backward", [&]<typename T>() {
      T* di = dinp.data<T>();
      const T *x = inp.data<T>(), *d = dout.data<T>();
      compute_.enqueue([=] { cpu::gelu_backward<T>(di, x, d, n); });
    });
  }

  void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) override {
    check_same_shape(out, a, "residual_forward");
    check_same_shape(out, b, "residual_forward");
    const int64_t n = out.numel();
    dispatch_float(out.dtype(), "residual_forward", [&]<typename T>() {
      T* o = out.data<T>();
      const T *x = a.data<T>(), *y = b.data<T>();
      compute_.enqueue([=] { cpu::residual_forward<T>(o, x, y, n); });
    });
  }

  void softmax_xent_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                            const Tensor& targets) override {
    check_same_shape(probs, logits, "softmax_xent_forward");
    const int V = static_cast<int>(logits.dim(logits.shape().rank() - 1));
    const int64_t N = logits.numel() / V;
    TT_CHECK(losses.numel() == N && targets.numel() == N, "softmax_xent_forward: shapes");
    dispatch_float(logits.dtype(), "softmax_xent_forward", [&]<typename T>() {
      T *l = losses.data<T>(), *p = probs.data<T>();
      const T* x = logits.data<T>();
      const int32_t* tg = targets.data<int32_t>();
      compute_.enqueue([=] { cpu::softmax_xent_forward<T>(l, p, x, tg, N, V); });
    });
  }

  void softmax_xent_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                             float dloss) override {
    check_same_shape(dlogits, probs, "softmax_xent_backward");
    const int V = static_cast<int>(probs.dim(probs.shape().rank() - 1));
    const int64_t N = probs.numel() / V;
    TT_CHECK(targets.numel() == N, "softmax_xent_backward: shapes");
    dispatch_float(probs.dtype(), "softmax_xent_backward", [&]<typename T>() {
      T* d = dlogits.data<T>();
      const T* p = probs.data<T>();
      const int32_t* tg = targets.data<int32_t>();
      const T dl = static_cast<T>(dloss);
      compute_.enqueue([=] { cpu::softmax_xent_backward<T>(d, p, tg, dl, N, V); });
    });
  }

  void sum_squares(const Tensor& out, const Tensor& x) override {
    TT_CHECK(out.numel() >= 1 && out.dtype() == x.dtype(), "sum_squares: out must hold one %s",
             dtype_name(x.dtype()));
    const int64_t n = x.numel();
    dispatch_float(x.dtype(), "sum_squares", [&]<typename T>() {
      T* o = out.data<T>();
      const T* p = x.data<T>();
      compute_.enqueue([=] { *o = cpu::sum_squares<T>(p, n); });
    });
  }

  void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const Tensor& grad_norm_sq, const AdamWArgs& args) override {
    check_same_shape(param, grad, "adamw_update");
    check_same_shape(param, m, "adamw_update");
    check_same_shape(param, v, "adamw_update");
    const int64_t n = param.numel();
    dispatch_float(param.dtype(), "adamw_update", [&]<typename T>() {
      T *p = param.data<T>(), *mp = m.data<T>(), *vp = v.data<T>();
      const T *g = grad.data<T>(), *ns = grad_norm_sq.data<T>();
      const AdamWArgs a = args;
      compute_.enqueue([=] {
        cpu::adamw_update<T>(p, g, mp, vp, n, *ns, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.step,
                             a.grad_clip);
      });
    });
  }

 private:
  static CpuStream& as_cpu(Stream& s) {
    auto* c = dynamic_cast<CpuStream*>(&s);
    TT_CHECK(c != nullptr, "the CPU backend was given a stream of another backend");
    return *c;
  }

  void* region_;
  size_t region_bytes_;
  int threads_;
  memory::MemoryStats stats_;
  memory::DevicePool pool_;
  CpuStream compute_, h2d_, d2h_;
};

}  // namespace

int64_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

Result<std::unique_ptr<Backend>> create_backend(const CpuBackendOptions& options) {
  TT_RETURN_IF(options.device_budget <= 0, kInvalidArgument, "the CPU backend needs a device budget > 0, got %lld",
               static_cast<long long>(options.device_budget));
  const size_t bytes = static_cast<size_t>(options.device_budget);
  // An untouched mapping: the budget is reserved address space; RAM is used only as the pool hands it out.
  void* region = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  TT_RETURN_IF(region == MAP_FAILED, kOutOfMemory, "cannot reserve %s for the CPU device arena: %s",
               format_bytes(options.device_budget).c_str(), std::strerror(errno));
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  TT_LOG(INFO, MEM, "CPU device arena: %s reserved, %d threads", format_bytes(options.device_budget).c_str(),
         threads);
  return std::unique_ptr<Backend>(new CpuBackend(region, bytes, options.device_budget, threads));
}

}  // namespace tt::cpu
