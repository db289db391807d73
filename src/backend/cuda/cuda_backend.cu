#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.cuh"
#include "backend/op_shapes.h"
#include "core/log.h"
#include "core/units.h"

namespace tt::cuda {
namespace {

class CudaEvent final : public Event {
 public:
  CudaEvent() { TT_CUDA_ASSERT(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  Status synchronize() override {
    TT_CUDA_CHECK(cudaEventSynchronize(event_));
    return Status::ok();
  }
  bool query() override { return cudaEventQuery(event_) == cudaSuccess; }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_{};
};

class CudaStream final : public Stream {
 public:
  explicit CudaStream(const char* name) : name_(name) {
    TT_CUDA_ASSERT(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaStream() override { cudaStreamDestroy(stream_); }
  const char* name() const override { return name_; }
  Status synchronize() override {
    TT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    TT_CUDA_CHECK(cudaGetLastError());
    return Status::ok();
  }
  void record(Event& event) override { TT_CUDA_ASSERT(cudaEventRecord(as_cuda(event).get(), stream_)); }
  void wait(Event& event) override { TT_CUDA_ASSERT(cudaStreamWaitEvent(stream_, as_cuda(event).get(), 0)); }
  cudaStream_t get() const { return stream_; }

 private:
  static CudaEvent& as_cuda(Event& e) {
    auto* c = dynamic_cast<CudaEvent*>(&e);
    TT_CHECK(c != nullptr, "a CUDA stream was given an event of another backend");
    return *c;
  }
  const char* name_;
  cudaStream_t stream_{};
};

void require_f32(DType dtype, const char* op) {
  TT_CHECK(dtype == DType::kF32, "%s: the CUDA backend computes in f32, not %s", op, dtype_name(dtype));
}

template <typename T>
T* ptr(const Tensor& t) {
  return shapes::present(t) ? t.data<T>() : nullptr;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, void* region, int64_t budget, std::string name)
      : device_(device), region_(region), name_(std::move(name)),
        pool_(region, static_cast<size_t>(budget), Device{DeviceKind::kCuda, device}, &stats_), compute_("compute"),
        h2d_("h2d"), d2h_("d2h") {}

  Status init() {
    TT_CUBLAS_CHECK(cublasCreate(&cublas_));
    TT_CUBLAS_CHECK(cublasSetStream(cublas_, compute_.get()));
    // Plain fp32, no TF32: the f32 mode is the exact-comparison mode.
    TT_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    TT_ASSIGN_OR_RETURN(void* ws, pool_.allocate_bytes(kCublasWorkspaceBytes, TensorClass::kWorkspace,
                                                      "cublas.workspace"));
    TT_CUBLAS_CHECK(cublasSetWorkspace(cublas_, ws, kCublasWorkspaceBytes));
    TT_ASSIGN_OR_RETURN(scratch_.ptr, pool_.allocate_bytes(kScratchBytes, TensorClass::kWorkspace, "cuda.scratch"));
    scratch_.bytes = kScratchBytes;
    return Status::ok();
  }

  ~CudaBackend() override {
    (void)synchronize_all();
    if (cublas_) cublasDestroy(cublas_);
    cudaFree(region_);
  }

  Device device() const override { return Device{DeviceKind::kCuda, device_}; }
  std::string describe() const override {
    return str_format("cuda:%d %s (fp32, cuBLAS, device budget %s)", device_, name_.c_str(),
                      format_bytes(static_cast<int64_t>(pool_.budget())).c_str());
  }
  Stream& compute_stream() override { return compute_; }
  Stream& h2d_stream() override { return h2d_; }
  Stream& d2h_stream() override { return d2h_; }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CudaEvent>(); }
  memory::DevicePool& pool() override { return pool_; }
  memory::MemoryStats& stats() override { return stats_; }

  void copy_h2d(const Tensor& dst, const void* src, Stream& stream) override {
    TT_CUDA_ASSERT(cudaMemcpyAsync(dst.raw(), src, dst.nbytes(), cudaMemcpyHostToDevice, as_cuda(stream)));
  }
  void copy_d2h(void* dst, const Tensor& src, Stream& stream) override {
    TT_CUDA_ASSERT(cudaMemcpyAsync(dst, src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, as_cuda(stream)));
  }
  void copy_d2d(const Tensor& dst, const Tensor& src, Stream& stream) override {
    TT_CHECK(dst.nbytes() == src.nbytes(), "copy_d2d: %zu != %zu bytes", dst.nbytes(), src.nbytes());
    TT_CUDA_ASSERT(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, as_cuda(stream)));
  }
  void fill_zero(const Tensor& t, Stream& stream) override {
    TT_CUDA_ASSERT(cudaMemsetAsync(t.raw(), 0, t.nbytes(), as_cuda(stream)));
  }

  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) override {
    const shapes::Embedding d = shapes::embedding_forward(out, tokens, wte, wpe);
    require_f32(out.dtype(), "embedding_forward");
    cuda::embedding_forward(s(), out.data<float>(), tokens.data<int32_t>(), wte.data<float>(), wpe.data<float>(), d.B,
                            d.T, d.C);
  }
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens) override {
    const shapes::Embedding d = shapes::embedding_backward(dwte, dwpe, dout, tokens);
    require_f32(dout.dtype(), "embedding_backward");
    cuda::embedding_backward(s(), scratch_, dwte.data<float>(), dwpe.data<float>(), dout.data<float>(),
                             tokens.data<int32_t>(), d.B, d.T, d.C, d.V);
  }
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& w, const Tensor& b) override {
    const shapes::Rows d = shapes::layernorm_forward(out, mean, rstd, inp, w, b);
    require_f32(inp.dtype(), "layernorm_forward");
    cuda::layernorm_forward(s(), out.data<float>(), mean.data<float>(), rstd.data<float>(), inp.data<float>(),
                            w.data<float>(), b.data<float>(), d.N, d.C);
  }
  void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout,
                          const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd) override {
    const shapes::Rows d = shapes::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd);
    require_f32(inp.dtype(), "layernorm_backward");
    cuda::layernorm_backward(s(), scratch_, dinp.data<float>(), dw.data<float>(), db.data<float>(),
                             dout.data<float>(), inp.data<float>(), w.data<float>(), mean.data<float>(),
                             rstd.data<float>(), d.N, d.C);
  }
  void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias) override {
    const shapes::Matmul d = shapes::matmul_forward(out, inp, w, bias);
    require_f32(inp.dtype(), "matmul_forward");
    float beta = 0.0f;
    if (shapes::present(bias)) {
      cuda::broadcast_rows(s(), out.data<float>(), bias.data<float>(), d.N, d.OC);
      beta = 1.0f;
    }
    gemm_rm(cublas_, false, true, static_cast<int>(d.N), d.OC, d.C, 1.0f, inp.data<float>(), d.C, w.data<float>(),
            d.C, beta, out.data<float>(), d.OC);
  }
  void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& w) override {
    const shapes::Matmul d = shapes::matmul_backward(dinp, dw, dbias, dout, inp, w);
    require_f32(inp.dtype(), "matmul_backward");
    const int N = static_cast<int>(d.N);
    if (shapes::present(dinp))
      gemm_rm(cublas_, false, false, N, d.C, d.OC, 1.0f, dout.data<float>(), d.OC, w.data<float>(), d.C, 1.0f,
              dinp.data<float>(), d.C);
    if (shapes::present(dw))
      gemm_rm(cublas_, true, false, d.OC, d.C, N, 1.0f, dout.data<float>(), d.OC, inp.data<float>(), d.C, 1.0f,
              dw.data<float>(), d.C);
    if (shapes::present(dbias)) cuda::column_sums(s(), scratch_, dbias.data<float>(), dout.data<float>(), d.N, d.OC);
  }

  // Attention as in the CPU backend: per batch element, strided-batched GEMMs over the heads.
  void attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv, int heads) override {
    const shapes::Attention d = shapes::attention_forward(out, att, qkv, heads);
    require_f32(qkv.dtype(), "attention_forward");
    const int hs = d.C / d.H, C3 = 3 * d.C, T = d.T;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const long long TT = static_cast<long long>(T) * T;
    for (int b = 0; b < d.B; ++b) {
      const float* q = qkv.data<float>() + static_cast<int64_t>(b) * T * C3;
      float* a = att.data<float>() + static_cast<int64_t>(b) * d.H * TT;
      gemm_rm_strided(cublas_, false, true, T, T, hs, scale, q, C3, hs, q + d.C, C3, hs, 0.0f, a, T, TT, d.H);
    }
    cuda::causal_softmax(s(), att.data<float>(), static_cast<int64_t>(d.B) * d.H * T, T);
    for (int b = 0; b < d.B; ++b) {
      const float* v = qkv.data<float>() + static_cast<int64_t>(b) * T * C3 + 2 * d.C;
      const float* a = att.data<float>() + static_cast<int64_t>(b) * d.H * TT;
      float* o = out.data<float>() + static_cast<int64_t>(b) * T * d.C;
      gemm_rm_strided(cublas_, false, false, T, hs, T, 1.0f, a, T, TT, v, C3, hs, 0.0f, o, d.C, hs, d.H);
    }
  }

  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                          int heads) override {
    const shapes::Attention d = shapes::attention_backward(dqkv, dout, qkv, att, heads);
    require_f32(qkv.dtype(), "attention_backward");
    const int hs = d.C / d.H, C3 = 3 * d.C, T = d.T;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const long long TT = static_cast<long long>(T) * T;
    // dp for as many heads as the scratch holds at once.
    const int group = static_cast<int>(std::min<int64_t>(d.H, static_cast<int64_t>(scratch_.bytes / (TT * 4))));
    TT_CHECK(group >= 1, "attention_backward: T=%d needs a %lld-byte score buffer, more than the CUDA scratch", T,
             TT * 4);
    float* dp = static_cast<float*>(scratch_.ptr);
    for (int b = 0; b < d.B; ++b) {
      for (int h0 = 0; h0 < d.H; h0 += group) {
        const int nh = std::min(group, d.H - h0);
        const int64_t qoff = static_cast<int64_t>(b) * T * C3 + static_cast<int64_t>(h0) * hs;
        const float* q = qkv.data<float>() + qoff;
        const float* k = q + d.C;
        const float* v = q + 2 * d.C;
        float* dq = dqkv.data<float>() + qoff;
        float* dk = dq + d.C;
        float* dv = dq + 2 * d.C;
        const float* p = att.data<float>() + (static_cast<int64_t>(b) * d.H + h0) * TT;
        const float* g = dout.data<float>() + static_cast<int64_t>(b) * T * d.C + static_cast<int64_t>(h0) * hs;
        // dv += p^T dout; dp = dout v^T
        gemm_rm_strided(cublas_, true, false, T, hs, T, 1.0f, p, T, TT, g, d.C, hs, 1.0f, dv, C3, hs, nh);
        gemm_rm_strided(cublas_, false, true, T, T, hs, 1.0f, g, d.C, hs, v, C3, hs, 0.0f, dp, T, TT, nh);
        cuda::causal_softmax_backward(s(), dp, p, static_cast<int64_t>(nh) * T, T, scale);
        // dq += ds k; dk += ds^T q
        gemm_rm_strided(cublas_, false, false, T, hs, T, 1.0f, dp, T, TT, k, C3, hs, 1.0f, dq, C3, hs, nh);
        gemm_rm_strided(cublas_, true, false, T, hs, T, 1.0f, dp, T, TT, q, C3, hs, 1.0f, dk, C3, hs, nh);
      }
    }
  }

  void gelu_forward(const Tensor& out, const Tensor& inp) override {
    const int64_t n = shapes::elementwise("gelu_forward", out, inp);
    require_f32(inp.dtype(), "gelu_forward");
    cuda::gelu_forward(s(), out.data<float>(), inp.data<float>(), n);
  }
  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    const int64_t n = shapes::elementwise("gelu_backward", dinp, inp, dout);
    require_f32(inp.dtype(), "gelu_backward");
    cuda::gelu_backward(s(), dinp.data<float>(), inp.data<float>(), dout.data<float>(), n);
  }
  void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) override {
    const int64_t n = shapes::elementwise("residual_forward", out, a, b);
    require_f32(out.dtype(), "residual_forward");
    cuda::residual_forward(s(), out.data<float>(), a.data<float>(), b.data<float>(), n);
  }
  void softmax_xent_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                            const Tensor& targets) override {
    const shapes::Softmax d = shapes::softmax_xent_forward(losses, probs, logits, targets);
    require_f32(logits.dtype(), "softmax_xent_forward");
    cuda::softmax_xent_forward(s(), losses.data<float>(), probs.data<float>(), logits.data<float>(),
                               targets.data<int32_t>(), d.N, d.V);
  }
  void softmax_xent_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                             float dloss) override {
    const shapes::Softmax d = shapes::softmax_xent_backward(dlogits, probs, targets);
    require_f32(probs.dtype(), "softmax_xent_backward");
    cuda::softmax_xent_backward(s(), dlogits.data<float>(), probs.data<float>(), targets.data<int32_t>(), dloss, d.N,
                                d.V);
  }
  void sum_squares(const Tensor& out, const Tensor& x) override {
    const int64_t n = shapes::sum_squares(out, x);
    require_f32(x.dtype(), "sum_squares");
    cuda::sum_squares(s(), scratch_, out.data<float>(), x.data<float>(), n);
  }
  void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const Tensor& grad_norm_sq, const AdamWArgs& a) override {
    const int64_t n = shapes::adamw(param, grad, m, v, grad_norm_sq);
    require_f32(param.dtype(), "adamw_update");
    cuda::adamw_update(s(), param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(), n,
                       grad_norm_sq.data<float>(), a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.step,
                       a.grad_clip);
  }

 private:
  cudaStream_t s() const { return compute_.get(); }
  static cudaStream_t as_cuda(Stream& st) {
    auto* c = dynamic_cast<CudaStream*>(&st);
    TT_CHECK(c != nullptr, "the CUDA backend was given a stream of another backend");
    return c->get();
  }

  int device_;
  void* region_;
  std::string name_;
  memory::MemoryStats stats_;
  memory::DevicePool pool_;
  CudaStream compute_, h2d_, d2h_;
  cublasHandle_t cublas_ = nullptr;
  Scratch scratch_;
};

}  // namespace

Result<std::unique_ptr<Backend>> create_backend(const CudaBackendOptions& options) {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  TT_RETURN_IF(rc != cudaSuccess || count == 0, kFailedPrecondition, "no CUDA device is available (%s)",
               rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
  TT_RETURN_IF(options.device < 0 || options.device >= count, kInvalidArgument, "CUDA device %d does not exist (%d found)",
               options.device, count);
  TT_CUDA_CHECK(cudaSetDevice(options.device));
  cudaDeviceProp prop{};
  TT_CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device));
  size_t free_b = 0, total_b = 0;
  TT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  int64_t budget = options.device_budget;
  if (budget == 0) budget = static_cast<int64_t>(free_b) - kAutoBudgetHeadroomBytes;
  TT_RETURN_IF(budget <= kReservedBytes, kOutOfMemory,
               "device budget %s on %s leaves nothing after the backend's own %s (cuBLAS workspace and scratch); "
               "free on the GPU: %s of %s",
               format_bytes(budget).c_str(), prop.name, format_bytes(kReservedBytes).c_str(),
               format_bytes(static_cast<int64_t>(free_b)).c_str(), format_bytes(static_cast<int64_t>(total_b)).c_str());
  TT_RETURN_IF(budget > static_cast<int64_t>(free_b), kOutOfMemory,
               "device budget %s exceeds the free memory of %s (%s free of %s); lower --device-budget",
               format_bytes(budget).c_str(), prop.name, format_bytes(static_cast<int64_t>(free_b)).c_str(),
               format_bytes(static_cast<int64_t>(total_b)).c_str());
  void* region = nullptr;
  cudaError_t mrc = cudaMalloc(&region, static_cast<size_t>(budget));
  TT_RETURN_IF(mrc != cudaSuccess, kOutOfMemory, "cudaMalloc of the %s device arena on %s failed: %s",
               format_bytes(budget).c_str(), prop.name, cudaGetErrorString(mrc));
  auto be = std::make_unique<CudaBackend>(options.device, region, budget, prop.name);
  TT_TRY(be->init());
  TT_LOG(INFO, MEM, "CUDA device arena on %s: %s (free %s of %s)", prop.name, format_bytes(budget).c_str(),
         format_bytes(static_cast<int64_t>(free_b)).c_str(), format_bytes(static_cast<int64_t>(total_b)).c_str());
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace tt::cuda
