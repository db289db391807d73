#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <omp.h>
#include <sys/mman.h>
#include <thread>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include "backend/cpu/cpu_stream.h"
#include "backend/cpu/kernels.h"
#include "backend/op_shapes.h"
#include "core/bf16.h"
#include "core/log.h"
#include "core/units.h"
#include "host/adamw.h"
#include "memory/numa.h"

namespace tt::cpu {
namespace {

// Runs f.template operator()<T>() for the floating dtype of t.
template <typename F>
void dispatch_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kF32: f.template operator()<float>(); break;
    case DType::kF64: f.template operator()<double>(); break;
    default: TT_CHECK(false, "%s: the CPU backend computes in f32 or f64, not %s", op, dtype_name(dtype));
  }
}

// The data of an optional tensor, or nullptr when it is absent.
template <typename T>
T* ptr(const Tensor& t) {
  return shapes::present(t) ? t.data<T>() : nullptr;
}

// Note [bf16 gradients] (exec/executor.h) on the CPU backend: an op computes a gradient in T; a bf16 gradient (T
// float) through an f32 temporary made when the op runs (open), widened from it first where the op adds, rounded
// into it once after (close: to nearest even, as cuBLAS's epilogue rounds).
template <typename T>
struct GradOut {
  T* same = nullptr;          // a gradient of T: written in place
  uint16_t* bf16 = nullptr;   // a bf16 gradient, or null
  int64_t n = 0;
  GradOut(const Tensor& g, const char* op) {
    if (!shapes::present(g)) return;
    if (g.dtype() != DType::kBF16) {
      same = g.data<T>();
      return;
    }
    TT_CHECK((std::is_same_v<T, float>), "%s: bf16 gradients with f32 compute only on the CPU backend", op);
    bf16 = static_cast<uint16_t*>(g.raw());
    n = g.numel();
  }
  T* open(std::vector<T>& tmp, bool add) const {
    if (bf16 == nullptr) return same;
    tmp.resize(static_cast<size_t>(n));
    if (add)
      for (int64_t i = 0; i < n; ++i) tmp[static_cast<size_t>(i)] = static_cast<T>(bf16_to_float(bf16[i]));
    return tmp.data();
  }
  void close(const std::vector<T>& tmp) const {
    if (bf16 != nullptr)
      for (int64_t i = 0; i < n; ++i) bf16[i] = float_to_bf16(static_cast<float>(tmp[static_cast<size_t>(i)]));
  }
};

// The CPU backend's host memory: plain, or locked with mlock when asked (to hold host-tier buffers in RAM the way a
// GPU's pinned memory is, and to exercise RLIMIT_MEMLOCK handling).
memory::HostPoolOptions host_pool_options(const CpuBackendOptions& o) {
  memory::HostPoolOptions h;
  h.tier = o.lock_host_memory ? memory::Tier::kPinnedHost : memory::Tier::kHost;
  h.numa_node = o.host_numa_node;
  h.numa_required = o.host_numa_node >= 0;
  if (o.lock_host_memory) {
    h.pin = [](void* p, size_t n) -> Status {
      if (mlock(p, n) != 0) {
        const int err = errno;
        return make_status(err == ENOMEM || err == EPERM ? StatusCode::kOutOfMemory : StatusCode::kInternal,
                           "mlock: %s", std::strerror(err));
      }
      return Status::ok();
    };
    h.unpin = [](void* p, size_t n) { munlock(p, n); };
  }
  return h;
}

// Note [emulated managed memory]
// The CPU backend's device memory is host memory, so managed memory needs no migration here: a reservation is an
// untouched anonymous mapping (refused beyond the machine's physical memory unless oversubscription is allowed), a
// prefetch takes the simulated link's delay (--cpu-copy-delay-us) on its stream and moves nothing, advice is
// accepted and does nothing, and a discard(-and-prefetch) overwrites the 4 KiB pages its ranges touch with 0xFF bytes
// (NaN in f32 and bf16) in stream order, and takes no time: a schedule that discards data something still reads
// computes NaNs here, as it would read indeterminate values on a GPU, and the bit-identity tests against in-core
// fail.
class CpuUmDriver final : public memory::UmDriver {
 public:
  explicit CpuUmDriver(int64_t copy_delay_us) : copy_delay_us_(copy_delay_us) {}
  std::string describe() const override { return "managed memory emulated in host memory"; }
  Result<void*> reserve(size_t bytes, bool allow_oversubscription) override {
    const int64_t physical = physical_memory_bytes();
    TT_RETURN_IF(!allow_oversubscription && physical > 0 && static_cast<int64_t>(bytes) > physical,
                 kOutOfMemory,
                 "managed memory: %s asked for, more than this machine's %s of memory "
                 "(--um-allow-oversubscription allows it)",
                 format_bytes(static_cast<int64_t>(bytes)).c_str(), format_bytes(physical).c_str());
    void* p = mmap(nullptr, std::max<size_t>(bytes, 1), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TT_RETURN_IF(p == MAP_FAILED, kOutOfMemory, "cannot reserve %s of managed memory: %s",
                 format_bytes(static_cast<int64_t>(bytes)).c_str(), std::strerror(errno));
    sizes_[p] = std::max<size_t>(bytes, 1);
    return p;
  }
  void release(void* base) override {
    auto it = sizes_.find(base);
    if (it == sizes_.end()) return;
    munmap(base, it->second);
    sizes_.erase(it);
  }
  Status advise(const std::vector<memory::UmRange>&, const memory::UmAdvice&) override { return Status::ok(); }
  void prefetch(const std::vector<memory::UmRange>& ranges, memory::UmPlace to, Stream& stream) override {
    const int64_t delay = copy_delay_us_;
    cpu(stream).enqueue([delay] { simulated_delay(delay); });  // Note [simulated delays] in cpu_stream.h
    if (!counting_) return;
    int64_t bytes = 0;
    for (const memory::UmRange& r : ranges) bytes += static_cast<int64_t>(r.bytes);
    std::lock_guard<std::mutex> lock(mu_);
    counted_[to == memory::UmPlace::kDevice ? "bytes_to_device" : "bytes_to_host"] += bytes;
    counted_[to == memory::UmPlace::kDevice ? "migrations_to_device" : "migrations_to_host"] += 1;
  }
  // What the prefetches would have moved (discards move nothing); the emulation has no faults: they count 0.
  Status start_counting() override {
    std::lock_guard<std::mutex> lock(mu_);
    counted_ = {{"gpu_page_faults", 0}, {"cpu_page_faults", 0}, {"bytes_to_device", 0}, {"bytes_to_host", 0},
                {"migrations_to_device", 0}, {"migrations_to_host", 0}};
    counting_ = true;
    return Status::ok();
  }
  std::map<std::string, int64_t> counted() override {
    std::lock_guard<std::mutex> lock(mu_);
    return counted_;
  }
  void discard(const std::vector<memory::UmRange>& ranges, memory::UmPlace, Stream& stream) override {
    // Whole 4 KiB pages, as the driver acts on pages: a discard that reaches into a neighbour's page poisons it.
    cpu(stream).enqueue([ranges] {
      constexpr uintptr_t kPage = 4096;
      for (const memory::UmRange& r : ranges) {
        if (r.bytes == 0) continue;
        const uintptr_t a = reinterpret_cast<uintptr_t>(r.ptr) / kPage * kPage;
        const uintptr_t b = (reinterpret_cast<uintptr_t>(r.ptr) + r.bytes + kPage - 1) / kPage * kPage;
        std::memset(reinterpret_cast<void*>(a), 0xFF, b - a);
      }
    });
  }

 private:
  static CpuStream& cpu(Stream& s) {
    auto* c = dynamic_cast<CpuStream*>(&s);
    TT_CHECK(c != nullptr, "the CPU backend's managed memory was given a stream of another backend");
    return *c;
  }
  int64_t copy_delay_us_;
  std::map<void*, size_t> sizes_;
  std::mutex mu_;
  bool counting_ = false;
  std::map<std::string, int64_t> counted_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(void* region, size_t region_bytes, const CpuBackendOptions& options, int threads)
      : region_(region), region_bytes_(region_bytes), threads_(threads), copy_delay_us_(options.copy_delay_us),
        pool_(region, static_cast<size_t>(options.device_budget), Device{DeviceKind::kCpu, 0}, &stats_,
              static_cast<size_t>(physical_memory_bytes()), [this] { return create_event(false); }),
        host_pool_(host_pool_options(options), &stats_),
        pageable_pool_(memory::pageable_pool_options(options.host_numa_node, options.host_numa_node >= 0), &stats_),
        compute_("compute"), h2d_("h2d"), d2h_("d2h"), host_("host"), comm_("comm") {
    // OpenMP thread pools are per calling thread: set the count on the worker that runs the kernels.
    compute_.enqueue([threads] { set_num_threads(threads); });
    host_.enqueue([threads] { set_num_threads(threads); });  // the CPU optimizer's OpenMP team
    (void)compute_.synchronize();
    compute_.set_task_delay_us(options.compute_delay_us);
    host_.set_task_delay_us(options.host_delay_us);
    um_ = std::make_unique<CpuUmDriver>(options.copy_delay_us);
    if (options.record_um_calls) um_ = std::make_unique<memory::RecordingUmDriver>(std::move(um_));
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
  Stream& host_stream() override { return host_; }
  Stream& comm_stream() override { return comm_; }
  int host_threads() const override { return threads_; }
  void enqueue_host(std::function<void()> fn) override { host_.enqueue(std::move(fn)); }
  bool enqueue_on(Stream& stream, std::function<void()> fn) override {
    auto* s = dynamic_cast<CpuStream*>(&stream);
    if (s == nullptr) return false;
    s->enqueue(std::move(fn));
    return true;
  }
  std::unique_ptr<Event> create_event(bool /*timing*/) override { return std::make_unique<CpuEvent>(); }
  memory::DevicePool& pool() override { return pool_; }
  memory::HostPool& host_pool() override { return host_pool_; }
  memory::HostPool& pageable_pool() override { return pageable_pool_; }
  memory::MemoryStats& stats() override { return stats_; }
  memory::UmDriver* um() override { return um_.get(); }

  void copy_h2d(const Tensor& dst, const void* src, Stream& stream) override {
    void* d = dst.raw();
    size_t n = dst.nbytes();
    const int64_t delay = copy_delay_us_;
    as_cpu(stream).enqueue([d, src, n, delay] {
      simulated_delay(delay);  // Note [simulated delays] in backend/cpu/cpu_stream.h
      std::memcpy(d, src, n);
    });
  }
  void copy_d2h(void* dst, const Tensor& src, Stream& stream) override {
    const void* s = src.raw();
    size_t n = src.nbytes();
    const int64_t delay = copy_delay_us_;
    as_cpu(stream).enqueue([dst, s, n, delay] {
      simulated_delay(delay);  // Note [simulated delays] in backend/cpu/cpu_stream.h
      std::memcpy(dst, s, n);
    });
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

  void convert(const Tensor& dst, const Tensor& src) override {
    const int64_t n = shapes::convert(dst, src);
    void* d = dst.raw();
    const void* p = src.raw();
    const DType dt = dst.dtype(), st = src.dtype();
    if (dt == st) {
      copy_d2d(dst, src, compute_);
      return;
    }
    compute_.enqueue([=] {
      // f32 <-> bf16 <-> f64 through float/double; every combination the CPU backend may meet.
      auto load = [&](int64_t i) -> double {
        switch (st) {
          case DType::kF32: return static_cast<const float*>(p)[i];
          case DType::kF64: return static_cast<const double*>(p)[i];
          case DType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
          default: TT_CHECK(false, "convert: cannot read %s", dtype_name(st));
        }
        return 0;
      };
      for (int64_t i = 0; i < n; ++i) {
        const double v = load(i);
        switch (dt) {
          case DType::kF32: static_cast<float*>(d)[i] = static_cast<float>(v); break;
          case DType::kF64: static_cast<double*>(d)[i] = v; break;
          case DType::kBF16: static_cast<uint16_t*>(d)[i] = float_to_bf16(static_cast<float>(v)); break;
          default: TT_CHECK(false, "convert: cannot write %s", dtype_name(dt));
        }
      }
    });
  }

  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         int64_t vocab_begin) override {
    const shapes::Embedding d = shapes::embedding_forward(out, tokens, wte, wpe, vocab_begin);
    dispatch_float(out.dtype(), "embedding_forward", [&]<typename T>() {
      T* o = out.data<T>();
      const int32_t* tok = tokens.data<int32_t>();
      const T *te = wte.data<T>(), *pe = shapes::present(wpe) ? wpe.data<T>() : nullptr;
      compute_.enqueue([=] { cpu::embedding_forward<T>(o, tok, te, pe, d.B, d.T, d.C, d.vocab_begin, d.V); });
    });
  }

  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                          GradWrite pe, int64_t vocab_begin) override {
    const shapes::Embedding d = shapes::embedding_backward(dwte, dwpe, dout, tokens, vocab_begin);
    dispatch_float(dout.dtype(), "embedding_backward", [&]<typename T>() {
      T *dte = dwte.data<T>(), *dpe = shapes::present(dwpe) ? dwpe.data<T>() : nullptr;
      const T* g = dout.data<T>();
      const int32_t* tok = tokens.data<int32_t>();
      const bool add = pe == GradWrite::kAccumulate;
      compute_.enqueue([=] { cpu::embedding_backward<T>(dte, dpe, g, tok, d.B, d.T, d.C, d.vocab_begin, d.V, add); });
    });
  }

  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& w, const Tensor& b) override {
    const shapes::Rows d = shapes::layernorm_forward(out, mean, rstd, inp, w, b);
    dispatch_float(inp.dtype(), "layernorm_forward", [&]<typename T>() {
      T *o = out.data<T>(), *m = mean.data<T>(), *r = rstd.data<T>();
      const T *x = inp.data<T>(), *wp = w.data<T>(), *bp = b.data<T>();
      compute_.enqueue([=] { cpu::layernorm_forward<T>(o, m, r, x, wp, bp, d.N, d.C); });
    });
  }

  void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout,
                          const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                          GradWrite gw) override {
    const shapes::Rows d = shapes::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd);
    dispatch_float(inp.dtype(), "layernorm_backward", [&]<typename T>() {
      T* di = dinp.data<T>();
      const GradOut<T> gwo(dw, "layernorm_backward"), gbo(db, "layernorm_backward");
      const T *g = dout.data<T>(), *x = inp.data<T>(), *wp = w.data<T>(), *m = mean.data<T>(), *r = rstd.data<T>();
      const bool add = gw == GradWrite::kAccumulate;
      compute_.enqueue([=] {
        std::vector<T> tw, tb;
        cpu::layernorm_backward<T>(di, gwo.open(tw, add), gbo.open(tb, add), g, x, wp, m, r, d.N, d.C, add);
        gwo.close(tw);
        gbo.close(tb);
      });
    });
  }

  void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w,
                       float eps) override {
    const shapes::Rows d = shapes::rmsnorm_forward(out, rstd, inp, w);
    dispatch_float(inp.dtype(), "rmsnorm_forward", [&]<typename T>() {
      T *o = out.data<T>(), *r = rstd.data<T>();
      const T *x = inp.data<T>(), *wp = w.data<T>();
      const T e = static_cast<T>(eps);
      compute_.enqueue([=] { cpu::rmsnorm_forward<T>(o, r, x, wp, d.N, d.C, e); });
    });
  }

  void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout, const Tensor& inp, const Tensor& w,
                        const Tensor& rstd, GradWrite gw) override {
    const shapes::Rows d = shapes::rmsnorm_backward(dinp, dw, dout, inp, w, rstd);
    dispatch_float(inp.dtype(), "rmsnorm_backward", [&]<typename T>() {
      T* di = dinp.data<T>();
      const GradOut<T> gwo(dw, "rmsnorm_backward");
      const T *g = dout.data<T>(), *x = inp.data<T>(), *wp = w.data<T>(), *r = rstd.data<T>();
      const bool add = gw == GradWrite::kAccumulate;
      compute_.enqueue([=] {
        std::vector<T> tw;
        cpu::rmsnorm_backward<T>(di, gwo.open(tw, add), g, x, wp, r, d.N, d.C, add);
        gwo.close(tw);
      });
    });
  }

  void rope(const Tensor& qkv, const Tensor& table, const Tensor& positions, int heads, int kv_heads,
            bool inverse) override {
    const shapes::Rope d = shapes::rope(qkv, table, positions, heads, kv_heads);
    dispatch_float(qkv.dtype(), "rope", [&]<typename T>() {
      T* q = qkv.data<T>();
      const T* tb = table.data<T>();
      const int32_t* p = ptr<int32_t>(positions);
      compute_.enqueue([=] { cpu::rope<T>(q, tb, p, d.B, d.T, d.H, d.KV, d.hs, inverse); });
    });
  }

  void swiglu_forward(const Tensor& out, const Tensor& inp) override {
    const shapes::Matmul d = shapes::swiglu("swiglu_forward", out, inp);
    dispatch_float(inp.dtype(), "swiglu_forward", [&]<typename T>() {
      T* o = out.data<T>();
      const T* x = inp.data<T>();
      compute_.enqueue([=] { cpu::swiglu_forward<T>(o, x, d.N, d.OC); });
    });
  }

  void swiglu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    const shapes::Matmul d = shapes::swiglu("swiglu_backward", dout, inp);
    TT_CHECK(dinp.shape() == inp.shape() && dinp.dtype() == inp.dtype(), "swiglu_backward: dinp %s inp %s",
             dinp.shape().to_string().c_str(), inp.shape().to_string().c_str());
    dispatch_float(inp.dtype(), "swiglu_backward", [&]<typename T>() {
      T* di = dinp.data<T>();
      const T *x = inp.data<T>(), *g = dout.data<T>();
      compute_.enqueue([=] { cpu::swiglu_backward<T>(di, x, g, d.N, d.OC); });
    });
  }

  void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias) override {
    const shapes::Matmul d = shapes::matmul_forward(out, inp, w, bias);
    dispatch_float(inp.dtype(), "matmul_forward", [&]<typename T>() {
      T* o = out.data<T>();
      const T *x = inp.data<T>(), *wp = w.data<T>(), *bp = ptr<T>(bias);
      compute_.enqueue([=] { cpu::matmul_forward<T>(o, x, wp, bp, d.N, d.C, d.OC); });
    });
  }

  void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& w, GradWrite gw) override {
    const shapes::Matmul d = shapes::matmul_backward(dinp, dw, dbias, dout, inp, w);
    dispatch_float(inp.dtype(), "matmul_backward", [&]<typename T>() {
      T* di = ptr<T>(dinp);
      const GradOut<T> gwo(dw, "matmul_backward"), gbo(dbias, "matmul_backward");
      const T *g = dout.data<T>(), *x = inp.data<T>(), *wp = w.data<T>();
      const bool add = gw == GradWrite::kAccumulate;
      compute_.enqueue([=] {
        std::vector<T> tw, tb;
        cpu::matmul_backward<T>(di, gwo.open(tw, add), gbo.open(tb, add), g, x, wp, d.N, d.C, d.OC, add);
        gwo.close(tw);
        gbo.close(tb);
      });
    });
  }

  void matmul_gelu_forward(const Tensor& pre, const Tensor& out, const Tensor& inp, const Tensor& w,
                           const Tensor& bias) override {
    const shapes::Matmul d = shapes::matmul_gelu_forward(pre, out, inp, w, bias);
    dispatch_float(inp.dtype(), "matmul_gelu_forward", [&]<typename T>() {
      T *p = pre.data<T>(), *o = out.data<T>();
      const T *x = inp.data<T>(), *wp = w.data<T>(), *bp = ptr<T>(bias);
      compute_.enqueue([=] {
        cpu::matmul_forward<T>(p, x, wp, bp, d.N, d.C, d.OC);
        cpu::gelu_forward<T>(o, p, d.N * d.OC);
      });
    });
  }

  void matmul_backward_gelu(const Tensor& dpre, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& w, const Tensor& pre, GradWrite gw) override {
    const shapes::Matmul d = shapes::matmul_backward_gelu(dpre, dw, dbias, dout, inp, w, pre);
    dispatch_float(inp.dtype(), "matmul_backward_gelu", [&]<typename T>() {
      T* di = dpre.data<T>();
      const GradOut<T> gwo(dw, "matmul_backward_gelu"), gbo(dbias, "matmul_backward_gelu");
      const T *g = dout.data<T>(), *x = inp.data<T>(), *wp = w.data<T>(), *p = pre.data<T>();
      const bool add = gw == GradWrite::kAccumulate;
      compute_.enqueue([=] {
        std::vector<T> tw, tb;
        cpu::matmul_backward<T>(di, gwo.open(tw, add), gbo.open(tb, add), g, x, wp, d.N, d.C, d.OC, add);  // dpre
        gwo.close(tw);
        gbo.close(tb);
        cpu::gelu_backward_scale<T>(di, p, d.N * d.C);
      });
    });
  }

  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int heads) override {
    const shapes::Attention d = shapes::attention_forward(out, lse, qkv, heads);
    dispatch_float(qkv.dtype(), "attention_forward", [&]<typename T>() {
      T *o = out.data<T>(), *l = lse.data<T>();
      const T* q = qkv.data<T>();
      compute_.enqueue([=] { cpu::attention_forward<T>(o, l, q, d.B, d.T, d.C, d.H, d.KV); });
    });
  }

  void attention_decode(const Tensor& out, const Tensor& cache, const Tensor& qkv, const Tensor& pos,
                        int heads) override {
    const shapes::Attention d = shapes::attention_decode(out, cache, qkv, pos, heads);
    dispatch_float(qkv.dtype(), "attention_decode", [&]<typename T>() {
      T *o = out.data<T>(), *k = cache.data<T>();
      const T* q = qkv.data<T>();
      const int32_t* p = pos.data<int32_t>();
      compute_.enqueue([=] { cpu::attention_decode<T>(o, k, q, p, d.B, d.T, d.C, d.H, d.KV); });
    });
  }

  void embedding_at(const Tensor& out, const Tensor& tokens, const Tensor& positions, const Tensor& wte,
                    const Tensor& wpe) override {
    const shapes::Embedding d = shapes::embedding_at(out, tokens, positions, wte, wpe);
    dispatch_float(out.dtype(), "embedding_at", [&]<typename T>() {
      T* o = out.data<T>();
      const int32_t *tk = tokens.data<int32_t>(), *ps = positions.data<int32_t>();
      const T *te = wte.data<T>(), *pe = wpe.data<T>();
      compute_.enqueue([=] { cpu::embedding_at<T>(o, tk, ps, te, pe, d.B, d.C); });
    });
  }

  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, int heads) override {
    const shapes::Attention d = shapes::attention_backward(dqkv, dout, qkv, out, lse, heads);
    dispatch_float(qkv.dtype(), "attention_backward", [&]<typename T>() {
      T* dq = dqkv.data<T>();
      const T *g = dout.data<T>(), *q = qkv.data<T>(), *l = lse.data<T>();
      compute_.enqueue([=] { cpu::attention_backward<T>(dq, g, q, l, d.B, d.T, d.C, d.H, d.KV); });
    });
  }

  void gelu_forward(const Tensor& out, const Tensor& inp) override {
    const int64_t n = shapes::elementwise("gelu_forward", out, inp);
    dispatch_float(inp.dtype(), "gelu_forward", [&]<typename T>() {
      T* o = out.data<T>();
      const T* x = inp.data<T>();
      compute_.enqueue([=] { cpu::gelu_forward<T>(o, x, n); });
    });
  }

  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    const int64_t n = shapes::elementwise("gelu_backward", dinp, inp, dout);
    dispatch_float(inp.dtype(), "gelu_backward", [&]<typename T>() {
      T* di = dinp.data<T>();
      const T *x = inp.data<T>(), *g = dout.data<T>();
      compute_.enqueue([=] { cpu::gelu_backward<T>(di, x, g, n); });
    });
  }

  void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) override {
    const int64_t n = shapes::elementwise("residual_forward", out, a, b);
    dispatch_float(out.dtype(), "residual_forward", [&]<typename T>() {
      T* o = out.data<T>();
      const T *x = a.data<T>(), *y = b.data<T>();
      compute_.enqueue([=] { cpu::residual_forward<T>(o, x, y, n); });
    });
  }

  void residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& a, const Tensor& b, const Tensor& w, const Tensor& bias) override {
    const shapes::Rows d = shapes::residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias);
    dispatch_float(a.dtype(), "residual_layernorm_forward", [&]<typename T>() {
      T *r = res.data<T>(), *o = out.data<T>(), *m = mean.data<T>(), *rs = rstd.data<T>();
      const T *x = a.data<T>(), *y = b.data<T>(), *wp = w.data<T>(), *bp = bias.data<T>();
      compute_.enqueue([=] {
        cpu::residual_forward<T>(r, x, y, d.N * d.C);
        cpu::layernorm_forward<T>(o, m, rs, r, wp, bp, d.N, d.C);
      });
    });
  }

  void residual_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd, const Tensor& a,
                                const Tensor& b, const Tensor& w, float eps) override {
    const shapes::Rows d = shapes::residual_rmsnorm_forward(res, out, rstd, a, b, w);
    dispatch_float(a.dtype(), "residual_rmsnorm_forward", [&]<typename T>() {
      T *r = res.data<T>(), *o = out.data<T>(), *rs = rstd.data<T>();
      const T *x = a.data<T>(), *y = b.data<T>(), *wp = w.data<T>();
      const T e = static_cast<T>(eps);
      compute_.enqueue([=] {
        cpu::residual_forward<T>(r, x, y, d.N * d.C);
        cpu::rmsnorm_forward<T>(o, rs, r, wp, d.N, d.C, e);
      });
    });
  }

  void softmax_xent_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits, const Tensor& targets,
                            int vocab) override {
    const shapes::Softmax d = shapes::softmax_xent_forward(losses, probs, logits, targets, vocab);
    dispatch_float(logits.dtype(), "softmax_xent_forward", [&]<typename T>() {
      T *l = losses.data<T>(), *p = probs.data<T>();
      const T* x = logits.data<T>();
      const int32_t* tg = targets.data<int32_t>();
      compute_.enqueue([=] { cpu::softmax_xent_forward<T>(l, p, x, tg, d.N, d.V, d.valid); });
    });
  }

  void softmax_xent_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets, float dloss,
                             int vocab) override {
    const shapes::Softmax d = shapes::softmax_xent_backward(dlogits, probs, targets, vocab);
    dispatch_float(probs.dtype(), "softmax_xent_backward", [&]<typename T>() {
      T* g = dlogits.data<T>();
      const T* p = probs.data<T>();
      const int32_t* tg = targets.data<int32_t>();
      const T dl = static_cast<T>(dloss);
      compute_.enqueue([=] { cpu::softmax_xent_backward<T>(g, p, tg, dl, d.N, d.V, d.valid); });
    });
  }

  void softmax_xent_fused(const Tensor& losses, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                          float dloss, int vocab) override {
    const shapes::Softmax d = shapes::softmax_xent_forward(losses, dlogits, logits, targets, vocab);
    dispatch_float(logits.dtype(), "softmax_xent_fused", [&]<typename T>() {
      T *l = losses.data<T>(), *g = dlogits.data<T>();
      const T* x = logits.data<T>();
      const int32_t* tg = targets.data<int32_t>();
      const T dl = static_cast<T>(dloss);
      compute_.enqueue([=] {
        cpu::softmax_xent_forward<T>(l, g, x, tg, d.N, d.V, d.valid);
        cpu::softmax_xent_backward<T>(g, g, tg, dl, d.N, d.V, d.valid);
      });
    });
  }

  void xent_local_max(const Tensor& stats, const Tensor& logits, int64_t vocab_begin, int vocab) override {
    const shapes::Softmax d = shapes::xent_parallel("xent_local_max", stats, logits, Tensor(), vocab_begin, vocab);
    dispatch_float(logits.dtype(), "xent_local_max", [&]<typename T>() {
      T* st = stats.data<T>();
      const T* x = logits.data<T>();
      compute_.enqueue([=] { cpu::xent_local_max<T>(st, x, d.N, d.V, d.valid); });
    });
  }

  void xent_local_sums(const Tensor& stats, const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                       int vocab) override {
    const shapes::Softmax d = shapes::xent_parallel("xent_local_sums", stats, logits, targets, vocab_begin, vocab);
    dispatch_float(logits.dtype(), "xent_local_sums", [&]<typename T>() {
      T* st = stats.data<T>();
      const T* x = logits.data<T>();
      const int32_t* tg = targets.data<int32_t>();
      compute_.enqueue([=] { cpu::xent_local_sums<T>(st, x, tg, d.N, d.V, d.valid, vocab_begin); });
    });
  }

  void xent_finish(const Tensor& losses, const Tensor& dlogits, const Tensor& logits, const Tensor& stats,
                   const Tensor& targets, float dloss, int64_t vocab_begin, int vocab) override {
    const shapes::Softmax d = shapes::xent_finish(losses, dlogits, logits, stats, targets, vocab_begin, vocab);
    dispatch_float(logits.dtype(), "xent_finish", [&]<typename T>() {
      T *l = losses.data<T>(), *g = shapes::present(dlogits) ? dlogits.data<T>() : nullptr;
      const T *x = logits.data<T>(), *st = stats.data<T>();
      const int32_t* tg = targets.data<int32_t>();
      const T dl = static_cast<T>(dloss);
      compute_.enqueue([=] { cpu::xent_finish<T>(l, g, x, st, tg, dl, d.N, d.V, d.valid, vocab_begin); });
    });
  }

  void sum_in_order(const Tensor& out, const Tensor& parts) override {
    TT_CHECK(out.dtype() == parts.dtype() && out.numel() == 1, "sum_in_order: out %s, parts %s",
             out.shape().to_string().c_str(), parts.shape().to_string().c_str());
    dispatch_float(parts.dtype(), "sum_in_order", [&]<typename T>() {
      T* o = out.data<T>();
      const T* p = parts.data<T>();
      const int64_t n = parts.numel();
      compute_.enqueue([=] {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += static_cast<double>(p[i]);
        o[0] = static_cast<T>(s);
      });
    });
  }

  void sum_squares(const Tensor& out, const Tensor& x) override { sum_squares_in(compute_, out, x); }
  void sum_squares_on(Stream& stream, const Tensor& out, const Tensor& x) override {
    CpuStream& on = as_cpu(stream);
    TT_CHECK(&on != &compute_, "sum_squares_on: the compute stream has sum_squares");
    sum_squares_in(on, out, x);  // (its own OpenMP team: the same split, the same bits)
  }
  void sum_squares_in(CpuStream& on, const Tensor& out, const Tensor& x) {
    const int64_t n = shapes::sum_squares(out, x);
    if (x.dtype() == DType::kBF16) {  // Note [bf16 gradients]
      float* o = out.data<float>();
      const uint16_t* p = static_cast<const uint16_t*>(x.raw());
      on.enqueue([=] { *o = cpu::sum_squares_bf16(p, n); });
      return;
    }
    dispatch_float(x.dtype(), "sum_squares", [&]<typename T>() {
      T* o = out.data<T>();
      const T* p = x.data<T>();
      on.enqueue([=] { *o = cpu::sum_squares<T>(p, n); });
    });
  }

  void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const Tensor& grad_norm_sq, const AdamWArgs& args, const Tensor& copy_out) override {
    const int64_t n = shapes::adamw(param, grad, m, v, grad_norm_sq, args, copy_out);
    if (args.split_master) return adamw_split(param, grad, m, v, grad_norm_sq, args, copy_out, n);
    // A bf16 copy of a float update is written in the update's pass (host/adamw.h); any other copy by convert().
    const bool fused_copy =
        copy_out.raw() != nullptr && param.dtype() == DType::kF32 && copy_out.dtype() == DType::kBF16;
    uint16_t* out = fused_copy ? static_cast<uint16_t*>(copy_out.raw()) : nullptr;
    const bool g16 = grad.dtype() == DType::kBF16;  // Note [bf16 gradients]: an f32 update reads them widened
    const void* graw = grad.raw();
    dispatch_float(param.dtype(), "adamw_update", [&]<typename T>() {
      T *p = param.data<T>(), *mp = m.data<T>(), *vp = v.data<T>();
      const T *g = g16 ? nullptr : grad.data<T>(), *ns = grad_norm_sq.data<T>();
      const AdamWArgs a = args;
      compute_.enqueue([=] {
        for_each_piece(a, n, [&](int64_t begin, int64_t end, float wd) {
          if constexpr (std::is_same_v<T, float>) {
            grads_in_chunks(graw, g16, begin, end, g16 ? kWidenChunk : end - begin,
                            [&](const float* gc, int64_t c, int64_t k) {
                              host::adamw_update_f32(p + c, gc, mp + c, vp + c, out ? out + c : nullptr, k, *ns, a.lr,
                                                     a.beta1, a.beta2, a.eps, wd, a.step, a.grad_clip);
                            });
          } else {
            cpu::adamw_update<T>(p + begin, g + begin, mp + begin, vp + begin, end - begin, *ns, a.lr, a.beta1,
                                 a.beta2, a.eps, wd, a.step, a.grad_clip);
          }
        });
      });
    });
    if (copy_out.raw() != nullptr && !fused_copy) convert(copy_out, param);
  }

 private:
  // Note [master in two halves] (core/bf16.h): the master joined from its halves a chunk at a time, updated by the
  // float update (which writes the high halves), its low halves split off again.
  void adamw_split(const Tensor& low, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& grad_norm_sq,
                   const AdamWArgs& a, const Tensor& high, int64_t n) {
    uint16_t *lo = static_cast<uint16_t*>(low.raw()), *hi = static_cast<uint16_t*>(high.raw());
    float *mp = m.data<float>(), *vp = v.data<float>();
    const float* ns = grad_norm_sq.data<float>();
    const bool g16 = grad.dtype() == DType::kBF16;  // Note [bf16 gradients]
    const void* graw = grad.raw();
    compute_.enqueue([=] {
      std::vector<float> p(static_cast<size_t>(std::min(n, kWidenChunk)));
      for_each_piece(a, n, [&](int64_t begin, int64_t end, float wd) {
        grads_in_chunks(graw, g16, begin, end, kWidenChunk, [&](const float* g, int64_t c, int64_t k) {
          for (int64_t j = 0; j < k; ++j) p[static_cast<size_t>(j)] = bf16_join(hi[c + j], lo[c + j]);
          host::adamw_update_f32(p.data(), g, mp + c, vp + c, hi + c, k, *ns, a.lr, a.beta1, a.beta2, a.eps, wd,
                                 a.step, a.grad_clip);
          for (int64_t j = 0; j < k; ++j) lo[c + j] = bf16_low(p[static_cast<size_t>(j)], hi[c + j]);
        });
      });
    });
  }
  // The elements a master in two halves is joined, or bf16 gradients widened, at a time.
  static constexpr int64_t kWidenChunk = int64_t{1} << 16;
  // fn(f32 gradients of elements [c, c + k), c, k) over [begin, end) in chunks of at most `chunk` elements: f32
  // gradients where they are, bf16 ones (Note [bf16 gradients]) widened a chunk at a time.
  template <typename Fn>
  static void grads_in_chunks(const void* grad, bool g16, int64_t begin, int64_t end, int64_t chunk, Fn&& fn) {
    std::vector<float> w(g16 ? static_cast<size_t>(std::min(end - begin, chunk)) : 0);
    for (int64_t c = begin; c < end; c += chunk) {
      const int64_t k = std::min(chunk, end - c);
      if (!g16) {
        fn(static_cast<const float*>(grad) + c, c, k);
        continue;
      }
      const uint16_t* h = static_cast<const uint16_t*>(grad) + c;
      for (int64_t j = 0; j < k; ++j) w[static_cast<size_t>(j)] = bf16_to_float(h[j]);
      fn(w.data(), c, k);
    }
  }
  // fn(begin, end, weight decay) for each of an update's pieces of [0, n) (AdamWArgs::piece_end, decay_bits).
  template <typename Fn>
  static void for_each_piece(const AdamWArgs& a, int64_t n, Fn&& fn) {
    int64_t begin = 0;
    for (int i = 0; i < std::max(a.pieces, 1); ++i) {
      const int64_t end = a.pieces > 0 ? a.piece_end[static_cast<size_t>(i)] : n;
      fn(begin, end, a.pieces == 0 || ((a.decay_bits >> i) & 1u) ? a.weight_decay : 0.0f);
      begin = end;
    }
  }

  static CpuStream& as_cpu(Stream& s) {
    auto* c = dynamic_cast<CpuStream*>(&s);
    TT_CHECK(c != nullptr, "the CPU backend was given a stream of another backend");
    return *c;
  }

  void* region_;
  size_t region_bytes_;
  int threads_;
  int64_t copy_delay_us_;
  memory::MemoryStats stats_;
  memory::DevicePool pool_;
  memory::HostPool host_pool_;
  memory::HostPool pageable_pool_;
  CpuStream compute_, h2d_, d2h_, host_, comm_;
  std::unique_ptr<memory::UmDriver> um_;
};

}  // namespace

int64_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

int64_t available_memory_bytes() {
  // A proc file: a small read of lines "Name:   value kB".
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    long long kb = -1;
    while (std::fgets(line, sizeof line, f) != nullptr)
      if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    std::fclose(f);
    if (kb >= 0) return std::min<int64_t>(static_cast<int64_t>(kb) * 1024, physical_memory_bytes());
  }
  return physical_memory_bytes();
}

Result<std::unique_ptr<Backend>> create_backend(const CpuBackendOptions& options) {
  TT_RETURN_IF(options.device_budget <= 0, kInvalidArgument, "the CPU backend needs a device budget > 0, got %lld",
               static_cast<long long>(options.device_budget));
  TT_RETURN_IF(options.host_numa_node >= 0 && !memory::numa_node_exists(options.host_numa_node), kInvalidArgument,
               "host NUMA node %d does not exist (this machine has %d)", options.host_numa_node,
               memory::numa_node_count());
  const size_t bytes = static_cast<size_t>(options.device_budget);
  // An untouched mapping: the budget is reserved address space; RAM is used only as the pool hands it out.
  void* region = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  TT_RETURN_IF(region == MAP_FAILED, kOutOfMemory, "cannot reserve %s for the CPU device arena: %s",
               format_bytes(options.device_budget).c_str(), std::strerror(errno));
  // The automatic team, as the CPU optimizer's (host::optimizer_threads): OMP_NUM_THREADS when set, else the cores of
  // this process's affinity mask (a rank bound to some cores by `tiertrain launch`, taskset or a batch system uses
  // those, not every core of the machine).
  int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  if (threads <= 0) threads = 1;
  TT_LOG(INFO, MEM, "CPU device arena: %s reserved, %d threads", format_bytes(options.device_budget).c_str(),
         threads);
  return std::unique_ptr<Backend>(new CpuBackend(region, bytes, options, threads));
}

}  // namespace tt::cpu
