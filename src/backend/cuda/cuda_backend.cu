#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cudnn_sdpa.h"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/lt_gemm.cuh"
#include "backend/cuda/um.h"
#include "backend/op_shapes.h"
#include "core/log.h"
#include "core/units.h"
#include "memory/numa.h"

namespace tt {
// Tensor::data<bf16>() on this backend's bf16 tensors.
template <>
constexpr DType dtype_of<cuda::bf16>() { return DType::kBF16; }
}  // namespace tt

namespace tt::cuda {
namespace {

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(bool timing) {
    TT_CUDA_ASSERT(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  Status synchronize() override {
    TT_CUDA_CHECK(cudaEventSynchronize(event_));
    return Status::ok();
  }
  bool query() override { return cudaEventQuery(event_) == cudaSuccess; }
  Result<double> elapsed_ms_since(Event& start) override {
    auto* st = dynamic_cast<CudaEvent*>(&start);
    TT_RETURN_IF(st == nullptr, kInvalidArgument, "elapsed_ms_since needs two CUDA events");
    TT_CUDA_CHECK(cudaEventSynchronize(event_));
    float ms = 0;
    TT_CUDA_CHECK(cudaEventElapsedTime(&ms, st->event_, event_));
    return static_cast<double>(ms);
  }
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
  void* native() override { return stream_; }

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
  TT_CHECK(dtype == DType::kF32, "%s: needs f32 (the master dtype), got %s", op, dtype_name(dtype));
}

// Runs f.template operator()<X>() for the compute dtype: float or bf16.
template <typename F>
void dispatch_x(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kF32: f.template operator()<float>(); break;
    case DType::kBF16: f.template operator()<bf16>(); break;
    default: TT_CHECK(false, "%s: the CUDA backend computes in f32 or bf16, not %s", op, dtype_name(dtype));
  }
}

// Pinned host slabs: mapped by the pool (and placed on the NUMA node), then registered with CUDA.
memory::HostPoolOptions pinned_pool_options(int numa_node, bool numa_required) {
  memory::HostPoolOptions h;
  h.tier = memory::Tier::kPinnedHost;
  h.numa_node = numa_node;
  h.numa_required = numa_required;
  h.pin = [](void* p, size_t n) -> Status {
    const cudaError_t rc = cudaHostRegister(p, n, cudaHostRegisterDefault);
    if (rc == cudaSuccess) return Status::ok();
    (void)cudaGetLastError();  // clear it: a refused registration is reported, not sticky
    return make_status(rc == cudaErrorMemoryAllocation ? StatusCode::kOutOfMemory : StatusCode::kInternal,
                       "cudaHostRegister: %s", cudaGetErrorString(rc));
  };
  h.unpin = [](void* p, size_t) { cudaHostUnregister(p); };
  return h;
}

class CudaGraph final : public Graph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  void replay() override { TT_CUDA_ASSERT(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, void* region, int64_t budget, size_t capacity, int64_t scratch_bytes, std::string name,
              int host_numa_node, bool numa_required, int host_threads, AttentionOptions attention,
              int64_t attention_workspace_bytes, int64_t um_host_piece_bytes)
      : device_(device), host_threads_(host_threads), region_(region), name_(std::move(name)), scratch_request_(scratch_bytes),
        attention_(std::move(attention)), attention_workspace_bytes_(attention_workspace_bytes),
        pool_(region, static_cast<size_t>(budget), Device{DeviceKind::kCuda, device}, &stats_, capacity,
              [this] { return create_event(false); }),
        host_pool_(pinned_pool_options(host_numa_node, numa_required), &stats_),
        pageable_pool_(memory::pageable_pool_options(host_numa_node, numa_required), &stats_),
        compute_("compute"),
        h2d_("h2d"), d2h_("d2h"), host_("host"), comm_("comm"), um_host_piece_bytes_(um_host_piece_bytes) {}

  Status init() {
    TT_CUBLAS_CHECK(cublasCreate(&cublas_));
    TT_CUBLAS_CHECK(cublasSetStream(cublas_, compute_.get()));
    // Plain fp32, no TF32: the f32 mode is the exact-comparison mode.
    TT_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    TT_ASSIGN_OR_RETURN(void* ws, pool_.allocate_bytes(kCublasWorkspaceBytes, TensorClass::kWorkspace,
                                                      "cublas.workspace"));
    TT_CUBLAS_CHECK(cublasSetWorkspace(cublas_, ws, kCublasWorkspaceBytes));
    // cuBLASLt shares the workspace: both run on the compute stream, one call after another.
    TT_TRY(lt_.init(ws, kCublasWorkspaceBytes));
    TT_ASSIGN_OR_RETURN(scratch_.ptr, pool_.allocate_bytes(static_cast<size_t>(scratch_request_),
                                                          TensorClass::kWorkspace, "cuda.scratch"));
    scratch_.bytes = static_cast<size_t>(scratch_request_);
    TT_ASSIGN_OR_RETURN(side_scratch_.ptr, pool_.allocate_bytes(static_cast<size_t>(kSideScratchBytes),
                                                               TensorClass::kWorkspace, "cuda.side_scratch"));
    side_scratch_.bytes = static_cast<size_t>(kSideScratchBytes);
    Result<std::unique_ptr<memory::UmDriver>> um = create_um_driver(device_, um_host_piece_bytes_);
    if (um.is_ok()) {
      um_ = std::move(um).value();
      if (record_um_calls_) um_ = std::make_unique<memory::RecordingUmDriver>(std::move(um_));
    } else {
      TT_LOG(INFO, MEM, "%s", um.status().to_string().c_str());
    }
    return init_attention();
  }

  // The attention workspace (BackendOptions::attention_workspace_bytes) serves cuDNN's fused attention (bf16,
  // cudnn_sdpa.h) when the options allow it and the library loads, and f32 attention by cuBLAS GEMMs (Note [f32
  // attention by GEMMs]); a call takes whichever applies to its dtype, else our flash kernels (attention.cu).
  Status init_attention() {
    if (attention_workspace_bytes_ > 0) {
      TT_ASSIGN_OR_RETURN(attention_ws_, pool_.allocate_bytes(static_cast<size_t>(attention_workspace_bytes_),
                                                              TensorClass::kWorkspace, "attention.workspace"));
    }
    const std::string f32 =
        attention_.f32 == F32Attention::kSimt ? "; f32: SIMT kernels"
        : str_format("; f32: %scuBLAS SGEMMs%s",
                     attention_.f32 == F32Attention::kAuto ? "3xTF32 kernels for head size 64 or 128, else " : "",
                     attention_ws_ ? "" : " (no workspace reserved: SIMT kernels)");
    const bool strict = attention_.impl == AttentionImpl::kCudnn;
    if (attention_.impl == AttentionImpl::kNative) {
      attention_desc_ = "attention: our kernels (attention_impl=native)" + f32;
      return Status::ok();
    }
    Result<const cudnn::Library*> lib = cudnn::load(attention_.cudnn_library);
    if (!lib.is_ok()) {
      TT_RETURN_IF(strict, kFailedPrecondition, "attention_impl=cudnn: %s", lib.status().to_string().c_str());
      attention_desc_ = "attention: our kernels (" + lib.status().message() + ")" + f32;
      TT_LOG(INFO, PERF, "%s", attention_desc_.c_str());
      return Status::ok();
    }
    if (attention_workspace_bytes_ <= 0) {
      TT_RETURN_IF(strict, kFailedPrecondition,
                   "attention_impl=cudnn: no cuDNN attention workspace was reserved (a bf16 run with head size 64 "
                   "or 128 reserves one; BackendOptions::attention_workspace_bytes)");
      attention_desc_ = "attention: our kernels (no cuDNN workspace reserved for this run's shape)" + f32;
      return Status::ok();
    }
    TT_ASSIGN_OR_RETURN(sdpa_, cudnn::CudnnSdpa::create(lib.value(), compute_.get(), attention_ws_,
                                                        attention_workspace_bytes_, strict, attention_.deterministic));
    attention_desc_ = str_format("attention: %s for bf16 where it takes the shape (workspace %s%s)%s",
                                 lib.value()->describe().c_str(), format_bytes(attention_workspace_bytes_).c_str(),
                                 attention_.deterministic ? "" : "; non-deterministic backward", f32.c_str());
    TT_LOG(INFO, PERF, "%s", attention_desc_.c_str());
    return Status::ok();
  }

  ~CudaBackend() override {
    (void)synchronize_all();
    sdpa_.reset();
    if (cublas_) cublasDestroy(cublas_);
    cudaFree(region_);
  }

  Device device() const override { return Device{DeviceKind::kCuda, device_}; }
  std::string describe() const override {
    return str_format("cuda:%d %s (cuBLAS, device budget %s; %s)", device_, name_.c_str(),
                      format_bytes(static_cast<int64_t>(pool_.budget())).c_str(), attention_desc_.c_str());
  }
  Stream& compute_stream() override { return compute_; }
  Stream& h2d_stream() override { return h2d_; }
  Stream& d2h_stream() override { return d2h_; }
  Stream& host_stream() override { return host_; }
  Stream& comm_stream() override { return comm_; }
  void enqueue_host(std::function<void()> fn) override {
    auto* f = new std::function<void()>(std::move(fn));
    TT_CUDA_ASSERT(cudaLaunchHostFunc(
        host_.get(),
        [](void* p) {
          std::unique_ptr<std::function<void()>> own(static_cast<std::function<void()>*>(p));
          (*own)();
        },
        f));
  }
  int host_threads() const override { return host_threads_; }
  std::unique_ptr<Event> create_event(bool timing) override { return std::make_unique<CudaEvent>(timing); }
  memory::DevicePool& pool() override { return pool_; }
  memory::HostPool& host_pool() override { return host_pool_; }
  memory::HostPool& pageable_pool() override { return pageable_pool_; }
  std::map<std::string, int64_t> counters() const override {
    return {{"cublaslt_bias_gemms", lt_.calls(Epilogue::kBias)},
            {"cublaslt_gelu_bias_gemms", lt_.calls(Epilogue::kGeluAuxBias)},
            {"cublaslt_dgelu_gemms", lt_.calls(Epilogue::kDGelu)},
            {"cublaslt_plain_gemms", lt_.calls(Epilogue::kNone)},
            {"cudnn_attention_forward", sdpa_ ? sdpa_->forward_calls() : 0},
            {"cudnn_attention_backward", sdpa_ ? sdpa_->backward_calls() : 0},
            {"gemm_attention_forward", gemm_attention_forward_calls_},
            {"gemm_attention_backward", gemm_attention_backward_calls_},
            {"tf32x3_attention_forward", tf32x3_attention_forward_calls_},
            {"tf32x3_attention_backward", tf32x3_attention_backward_calls_},
            {"tf32x3_attention_dq_partials", tf32x3_attention_dq_partials_calls_}};
  }
  memory::MemoryStats& stats() override { return stats_; }
  memory::UmDriver* um() override { return um_.get(); }
  void set_record_um_calls(bool on) { record_um_calls_ = on; }
  void set_gemm(GemmImpl g) { gemm_ = g; }
  void set_xent_blocks(int64_t b) { xent_blocks_ = b; }

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

  void convert(const Tensor& dst, const Tensor& src) override {
    const int64_t n = shapes::convert(dst, src);
    if (dst.dtype() == src.dtype()) {
      copy_d2d(dst, src, compute_);
    } else if (dst.dtype() == DType::kBF16 && src.dtype() == DType::kF32) {
      cuda::convert(s(), dst.data<bf16>(), src.data<float>(), n);
    } else if (dst.dtype() == DType::kF32 && src.dtype() == DType::kBF16) {
      cuda::convert(s(), dst.data<float>(), src.data<bf16>(), n);
    } else {
      TT_CHECK(false, "convert: %s -> %s is not supported on CUDA", dtype_name(src.dtype()), dtype_name(dst.dtype()));
    }
  }

  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         int64_t vocab_begin) override {
    const shapes::Embedding d = shapes::embedding_forward(out, tokens, wte, wpe, vocab_begin);
    dispatch_x(out.dtype(), "embedding_forward", [&]<typename X>() {
      cuda::embedding_forward<X>(s(), out.data<X>(), tokens.data<int32_t>(), wte.data<X>(),
                                 shapes::present(wpe) ? wpe.data<X>() : nullptr, d.B, d.T, d.C, d.vocab_begin, d.V);
    });
  }
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                          GradWrite pe, int64_t vocab_begin) override {
    const shapes::Embedding d = shapes::embedding_backward(dwte, dwpe, dout, tokens, vocab_begin);
    dispatch_x(dout.dtype(), "embedding_backward", [&]<typename X>() {
      cuda::embedding_backward<X>(s(), scratch_, dwte.data<float>(), shapes::present(dwpe) ? dwpe.data<float>() : nullptr,
                                  dout.data<X>(), tokens.data<int32_t>(), d.B, d.T, d.C, d.vocab_begin, d.V,
                                  pe == GradWrite::kAccumulate);
    });
  }
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& w, const Tensor& b) override {
    const shapes::Rows d = shapes::layernorm_forward(out, mean, rstd, inp, w, b);
    dispatch_x(inp.dtype(), "layernorm_forward", [&]<typename X>() {
      cuda::layernorm_forward<X>(s(), out.data<X>(), mean.data<float>(), rstd.data<float>(), inp.data<X>(),
                                 w.data<X>(), b.data<X>(), d.N, d.C);
    });
  }
  void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout,
                          const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                          GradWrite gw) override {
    const shapes::Rows d = shapes::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd);
    const VecGrads g = vec_grads("layernorm_backward", dw, db, gw == GradWrite::kAccumulate);
    dispatch_x(inp.dtype(), "layernorm_backward", [&]<typename X>() {
      cuda::layernorm_backward<X>(s(), g.rest, dinp.data<X>(), g.f32[0], g.f32[1], dout.data<X>(), inp.data<X>(),
                                  w.data<X>(), mean.data<float>(), rstd.data<float>(), d.N, d.C,
                                  gw == GradWrite::kAccumulate);
    });
    vec_grads_done(g);
  }
  void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w,
                       float eps) override {
    const shapes::Rows d = shapes::rmsnorm_forward(out, rstd, inp, w);
    dispatch_x(inp.dtype(), "rmsnorm_forward", [&]<typename X>() {
      cuda::rmsnorm_forward<X>(s(), out.data<X>(), rstd.data<float>(), inp.data<X>(), w.data<X>(), d.N, d.C, eps);
    });
  }
  void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout, const Tensor& inp, const Tensor& w,
                        const Tensor& rstd, GradWrite gw) override {
    const shapes::Rows d = shapes::rmsnorm_backward(dinp, dw, dout, inp, w, rstd);
    const VecGrads g = vec_grads("rmsnorm_backward", dw, Tensor(), gw == GradWrite::kAccumulate);
    dispatch_x(inp.dtype(), "rmsnorm_backward", [&]<typename X>() {
      cuda::rmsnorm_backward<X>(s(), g.rest, dinp.data<X>(), g.f32[0], dout.data<X>(), inp.data<X>(), w.data<X>(),
                                rstd.data<float>(), d.N, d.C, gw == GradWrite::kAccumulate);
    });
    vec_grads_done(g);
  }
  void rope(const Tensor& qkv, const Tensor& table, const Tensor& positions, int heads, int kv_heads,
            bool inverse) override {
    const shapes::Rope d = shapes::rope(qkv, table, positions, heads, kv_heads);
    dispatch_x(qkv.dtype(), "rope", [&]<typename X>() {
      cuda::rope<X>(s(), qkv.data<X>(), table.data<float>(),
                    shapes::present(positions) ? positions.data<int32_t>() : nullptr, d.B, d.T, d.H, d.KV, d.hs,
                    inverse);
    });
  }
  void swiglu_forward(const Tensor& out, const Tensor& inp) override {
    const shapes::Matmul d = shapes::swiglu("swiglu_forward", out, inp);
    dispatch_x(inp.dtype(), "swiglu_forward",
               [&]<typename X>() { cuda::swiglu_forward<X>(s(), out.data<X>(), inp.data<X>(), d.N, d.OC); });
  }
  void swiglu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    const shapes::Matmul d = shapes::swiglu("swiglu_backward", dout, inp);
    TT_CHECK(dinp.shape() == inp.shape() && dinp.dtype() == inp.dtype(), "swiglu_backward: dinp %s inp %s",
             dinp.shape().to_string().c_str(), inp.shape().to_string().c_str());
    dispatch_x(inp.dtype(), "swiglu_backward", [&]<typename X>() {
      cuda::swiglu_backward<X>(s(), dinp.data<X>(), inp.data<X>(), dout.data<X>(), d.N, d.OC);
    });
  }
  // bf16 Linear layers go through cuBLASLt with the bias (and GELU) in the GEMM's epilogue where it has an algorithm
  // for the shapes and alignments; f32 (the exact-comparison mode) keeps plain cuBLAS and our own kernels.
  bool lt_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias, const shapes::Matmul& d,
                  Epilogue epilogue, const Tensor& aux) {
    if (inp.dtype() != DType::kBF16 || !shapes::present(bias)) return false;
    LtCall c;
    c.trans_b = true;
    c.m = static_cast<int>(d.N);
    c.n = d.OC;
    c.k = d.C;
    c.a = inp.raw();
    c.lda = d.C;
    c.b = w.raw();
    c.ldb = d.C;
    c.d = out.raw();
    c.ldd = d.OC;
    c.epilogue = epilogue;
    c.bias = bias.raw();
    c.aux = shapes::present(aux) ? aux.raw() : nullptr;
    c.ld_aux = d.OC;
    return lt_.matmul(s(), c);
  }

  void matmul_gelu_forward(const Tensor& pre, const Tensor& out, const Tensor& inp, const Tensor& w,
                           const Tensor& bias) override {
    const shapes::Matmul d = shapes::matmul_gelu_forward(pre, out, inp, w, bias);
    if (lt_forward(out, inp, w, bias, d, Epilogue::kGeluAuxBias, pre)) return;
    matmul_forward(pre, inp, w, bias);
    gelu_forward(out, pre);
  }

  void matmul_backward_gelu(const Tensor& dpre, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& w, const Tensor& pre, GradWrite gw) override {
    const shapes::Matmul d = shapes::matmul_backward_gelu(dpre, dw, dbias, dout, inp, w, pre);
    bool fused = false;
    if (inp.dtype() == DType::kBF16) {
      // dpre[N, C] = (dout[N, OC] @ w[OC, C]) * gelu'(pre), the derivative in the epilogue.
      LtCall c;
      c.m = static_cast<int>(d.N);
      c.n = d.C;
      c.k = d.OC;
      c.a = dout.raw();
      c.lda = d.OC;
      c.b = w.raw();
      c.ldb = d.C;
      c.d = dpre.raw();
      c.ldd = d.C;
      c.epilogue = Epilogue::kDGelu;
      c.aux = pre.raw();
      c.ld_aux = d.C;
      fused = lt_.matmul(s(), c);
    }
    if (!fused) {
      dispatch_x(inp.dtype(), "matmul_backward_gelu", [&]<typename X>() {
        gemm(false, false, static_cast<int>(d.N), d.C, d.OC, dout.raw(), d.OC, w.raw(), d.C, 0.0f, dpre.raw(),
             cuda_type<X>(), cuda_type<X>(), d.C);
        cuda::gelu_backward_scale<X>(s(), dpre.data<X>(), pre.data<X>(), d.N * d.C);
      });
    }
    matmul_backward(Tensor(), dw, dbias, dout, inp, w, gw);
  }

  // Row-major D = op(A) op(B) (+ beta D) for the GEMMs without an epilogue: with gemm_impl=cublaslt and bf16
  // operands through cuBLASLt (its first heuristic algorithm, cached per shape) where it has one, else
  // cublasGemmEx (gemm_options.h).
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, const void* a, int lda, const void* b, int ldb,
            float beta, void* d, cudaDataType_t ab_type, cudaDataType_t d_type, int ldd) {
    if (gemm_ == GemmImpl::kCublasLt && ab_type == CUDA_R_16BF) {
      LtCall c;
      c.trans_a = trans_a;
      c.trans_b = trans_b;
      c.m = m, c.n = n, c.k = k;
      c.a = a, c.lda = lda, c.b = b, c.ldb = ldb, c.d = d, c.ldd = ldd;
      c.beta = beta;
      c.type = ab_type;
      c.d_type = d_type;
      if (lt_.matmul(s(), c)) return;
    }
    gemm_rm(cublas_, trans_a, trans_b, m, n, k, 1.0f, a, ab_type, lda, b, ldb, beta, d, d_type, ldd);
  }

  void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias) override {
    const shapes::Matmul d = shapes::matmul_forward(out, inp, w, bias);
    if (lt_forward(out, inp, w, bias, d, Epilogue::kBias, Tensor())) return;
    dispatch_x(inp.dtype(), "matmul_forward", [&]<typename X>() {
      float beta = 0.0f;
      if (shapes::present(bias)) {
        cuda::broadcast_rows<X>(s(), out.data<X>(), bias.data<X>(), d.N, d.OC);
        beta = 1.0f;
      }
      gemm(false, true, static_cast<int>(d.N), d.OC, d.C, inp.raw(), d.C, w.raw(), d.C, beta, out.raw(),
           cuda_type<X>(), cuda_type<X>(), d.OC);
    });
  }
  void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& w, GradWrite gw) override {
    const shapes::Matmul d = shapes::matmul_backward(dinp, dw, dbias, dout, inp, w);
    const int N = static_cast<int>(d.N);
    const bool add = gw == GradWrite::kAccumulate;  // Note [gradients first written]: beta 0 reads no dw
    dispatch_x(inp.dtype(), "matmul_backward", [&]<typename X>() {
      const cudaDataType_t xt = cuda_type<X>();
      if (shapes::present(dinp))
        gemm(false, false, N, d.C, d.OC, dout.raw(), d.OC, w.raw(), d.C, 0.0f, dinp.raw(), xt, xt, d.C);
      // Note [bf16 gradients]: cuBLAS accumulates in f32 and rounds a bf16 dW once (of bf16 operands only).
      TT_CHECK(!shapes::present(dw) || dw.dtype() != DType::kBF16 || xt == CUDA_R_16BF,
               "matmul_backward: bf16 weight gradients of %s products: the CUDA backend writes them from bf16 "
               "operands only (--dtype bf16, or --grad-dtype f32)", dtype_name(inp.dtype()));
      if (shapes::present(dw))
        gemm(true, false, d.OC, d.C, N, dout.raw(), d.OC, inp.raw(), d.C, add ? 1.0f : 0.0f, dw.raw(), xt,
             dw.dtype() == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F, d.C);
      if (shapes::present(dbias)) {
        const VecGrads g = vec_grads("matmul_backward", dbias, Tensor(), add);
        cuda::column_sums<X>(s(), g.rest, g.f32[0], dout.data<X>(), d.N, d.OC, add);
        vec_grads_done(g);
      }
    });
  }

  // Flash attention: cuDNN's fused engines where they take the shape (cudnn_sdpa.h), else our kernels
  // (backend/cuda/attention.cu). No T x T buffer outlives a call; the backward's row sums use the scratch.
  void attention_decode(const Tensor& out, const Tensor& cache, const Tensor& qkv, const Tensor& pos,
                        int heads) override {
    const shapes::Attention d = shapes::attention_decode(out, cache, qkv, pos, heads);
    dispatch_x(qkv.dtype(), "attention_decode", [&]<typename X>() {
      cuda::attention_decode<X>(s(), out.data<X>(), cache.data<X>(), qkv.data<X>(), pos.data<int32_t>(), d.B, d.T,
                                d.C, d.H, d.KV);
    });
  }
  void embedding_at(const Tensor& out, const Tensor& tokens, const Tensor& positions, const Tensor& wte,
                    const Tensor& wpe) override {
    const shapes::Embedding d = shapes::embedding_at(out, tokens, positions, wte, wpe);
    dispatch_x(out.dtype(), "embedding_at", [&]<typename X>() {
      cuda::embedding_at<X>(s(), out.data<X>(), tokens.data<int32_t>(), positions.data<int32_t>(), wte.data<X>(),
                            wpe.data<X>(), d.B, d.C);
    });
  }

  // A CUDA graph of what body enqueues on the compute stream (captured in this thread's mode: other threads' CUDA
  // calls are not affected).
  std::unique_ptr<Graph> capture(const std::function<void()>& body) override {
    cudaGraph_t graph = nullptr;
    TT_CUDA_ASSERT(cudaStreamBeginCapture(s(), cudaStreamCaptureModeThreadLocal));
    body();
    TT_CUDA_ASSERT(cudaStreamEndCapture(s(), &graph));
    cudaGraphExec_t exec = nullptr;
    TT_CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    return std::make_unique<CudaGraph>(exec, s());
  }
  // Note [grouped-query attention] (attention.cu): our flash kernels (bf16 tensor-core and general), the KV cache and
  // cuDNN's engines (Note [sdpa layout]) take any KV dividing H; the 3xTF32 kernels and the f32 GEMM path are built
  // for KV = H, so an f32 grouped-query call runs on our general kernels (exact to f32 rounding).
  static bool multi_head(const shapes::Attention& d) { return d.KV == d.H; }
  // Whether an f32 attention call that the fused kernels did not take runs as GEMMs (F32Attention).
  bool f32_gemms(const Tensor& qkv, const shapes::Attention& d) const {
    return attention_ws_ && qkv.dtype() == DType::kF32 && attention_.f32 != F32Attention::kSimt && multi_head(d) &&
           attention_gemm_fits(attention_workspace_bytes_, d.T);
  }
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int heads) override {
    const shapes::Attention d = shapes::attention_forward(out, lse, qkv, heads);
    if (sdpa_ && qkv.dtype() == DType::kBF16 && d.B > 0 &&
        sdpa_->forward({d.B, d.T, d.H, d.C / d.H, d.KV}, out.raw(), lse.data<float>(), qkv.raw()))
      return;
    if (qkv.dtype() == DType::kF32 && attention_.f32 == F32Attention::kAuto && multi_head(d) &&
        cuda::attention_tf32x3_takes(d.B, d.C, d.H, {out.raw(), qkv.raw()})) {
      ++tf32x3_attention_forward_calls_;
      return cuda::attention_forward_tf32x3(s(), out.data<float>(), lse.data<float>(), qkv.data<float>(), d.B, d.T,
                                            d.C, d.H);
    }
    if (f32_gemms(qkv, d)) {
      ++gemm_attention_forward_calls_;
      return cuda::attention_forward_gemm(cublas_, s(), attention_ws_, attention_workspace_bytes_, out.data<float>(),
                                          lse.data<float>(), qkv.data<float>(), d.B, d.T, d.C, d.H);
    }
    dispatch_x(qkv.dtype(), "attention_forward", [&]<typename X>() {
      cuda::attention_forward<X>(s(), out.data<X>(), lse.data<float>(), qkv.data<X>(), d.B, d.T, d.C, d.H, d.KV);
    });
  }

  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, int heads) override {
    const shapes::Attention d = shapes::attention_backward(dqkv, dout, qkv, out, lse, heads);
    if (sdpa_ && qkv.dtype() == DType::kBF16 && d.B > 0 &&
        static_cast<size_t>(attention_scratch_bytes(d.B, d.T, d.H)) <= scratch_.bytes &&
        sdpa_->backward({d.B, d.T, d.H, d.C / d.H, d.KV}, dqkv.raw(), dout.raw(), qkv.raw(), out.raw(), lse.data<float>(),
                        static_cast<float*>(scratch_.ptr)))
      return;
    if (qkv.dtype() == DType::kF32 && attention_.f32 == F32Attention::kAuto && multi_head(d) &&
        cuda::attention_tf32x3_takes(d.B, d.C, d.H, {dqkv.raw(), dout.raw(), qkv.raw()})) {
      ++tf32x3_attention_backward_calls_;
      if (cuda::attention_backward_tf32x3(s(), scratch_, attention_ws_, attention_ws_ ? attention_workspace_bytes_ : 0,
                                          dqkv.data<float>(), dout.data<float>(), qkv.data<float>(), out.data<float>(),
                                          lse.data<float>(), d.B, d.T, d.C, d.H))
        ++tf32x3_attention_dq_partials_calls_;
      return;
    }
    if (f32_gemms(qkv, d)) {
      ++gemm_attention_backward_calls_;
      return cuda::attention_backward_gemm(cublas_, s(), attention_ws_, attention_workspace_bytes_,
                                           dqkv.data<float>(), dout.data<float>(), qkv.data<float>(),
                                           out.data<float>(), lse.data<float>(), d.B, d.T, d.C, d.H);
    }
    dispatch_x(qkv.dtype(), "attention_backward", [&]<typename X>() {
      cuda::attention_backward<X>(s(), scratch_, dqkv.data<X>(), dout.data<X>(), qkv.data<X>(), out.data<X>(),
                                  lse.data<float>(), d.B, d.T, d.C, d.H, d.KV);
    });
  }

  void gelu_forward(const Tensor& out, const Tensor& inp) override {
    const int64_t n = shapes::elementwise("gelu_forward", out, inp);
    dispatch_x(inp.dtype(), "gelu_forward",
               [&]<typename X>() { cuda::gelu_forward<X>(s(), out.data<X>(), inp.data<X>(), n); });
  }
  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    const int64_t n = shapes::elementwise("gelu_backward", dinp, inp, dout);
    dispatch_x(inp.dtype(), "gelu_backward", [&]<typename X>() {
      cuda::gelu_backward<X>(s(), dinp.data<X>(), inp.data<X>(), dout.data<X>(), n);
    });
  }
  void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) override {
    const int64_t n = shapes::elementwise("residual_forward", out, a, b);
    dispatch_x(out.dtype(), "residual_forward",
               [&]<typename X>() { cuda::residual_forward<X>(s(), out.data<X>(), a.data<X>(), b.data<X>(), n); });
  }
  void residual_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd, const Tensor& a,
                                const Tensor& b, const Tensor& w, float eps) override {
    const shapes::Rows d = shapes::residual_rmsnorm_forward(res, out, rstd, a, b, w);
    dispatch_x(a.dtype(), "residual_rmsnorm_forward", [&]<typename X>() {
      cuda::residual_rmsnorm_forward<X>(s(), res.data<X>(), out.data<X>(), rstd.data<float>(), a.data<X>(),
                                        b.data<X>(), w.data<X>(), d.N, d.C, eps);
    });
  }
  void residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& a, const Tensor& b, const Tensor& w, const Tensor& bias) override {
    const shapes::Rows d = shapes::residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias);
    dispatch_x(a.dtype(), "residual_layernorm_forward", [&]<typename X>() {
      cuda::residual_layernorm_forward<X>(s(), res.data<X>(), out.data<X>(), mean.data<float>(), rstd.data<float>(),
                                          a.data<X>(), b.data<X>(), w.data<X>(), bias.data<X>(), d.N, d.C);
    });
  }
  void softmax_xent_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits, const Tensor& targets,
                            int vocab) override {
    const shapes::Softmax d = shapes::softmax_xent_forward(losses, probs, logits, targets, vocab);
    dispatch_x(logits.dtype(), "softmax_xent_forward", [&]<typename X>() {
      cuda::softmax_xent_forward<X>(s(), losses.data<float>(), probs.data<X>(), logits.data<X>(),
                                    targets.data<int32_t>(), d.N, d.V, d.valid);
    });
  }
  void softmax_xent_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets, float dloss,
                             int vocab) override {
    const shapes::Softmax d = shapes::softmax_xent_backward(dlogits, probs, targets, vocab);
    dispatch_x(probs.dtype(), "softmax_xent_backward", [&]<typename X>() {
      cuda::softmax_xent_backward<X>(s(), dlogits.data<X>(), probs.data<X>(), targets.data<int32_t>(), dloss, d.N,
                                     d.V, d.valid);
    });
  }
  void softmax_xent_fused(const Tensor& losses, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                          float dloss, int vocab) override {
    const shapes::Softmax d = shapes::softmax_xent_forward(losses, dlogits, logits, targets, vocab);
    dispatch_x(logits.dtype(), "softmax_xent_fused", [&]<typename X>() {
      cuda::softmax_xent_fused<X>(s(), losses.data<float>(), dlogits.data<X>(), logits.data<X>(),
                                  targets.data<int32_t>(), dloss, d.N, d.V, d.valid, xent_blocks_);
    });
  }
  void xent_local_max(const Tensor& stats, const Tensor& logits, int64_t vocab_begin, int vocab) override {
    const shapes::Softmax d = shapes::xent_parallel("xent_local_max", stats, logits, Tensor(), vocab_begin, vocab);
    dispatch_x(logits.dtype(), "xent_local_max", [&]<typename X>() {
      cuda::xent_local_max<X>(s(), stats.data<float>(), logits.data<X>(), d.N, d.V, d.valid);
    });
  }
  void xent_local_sums(const Tensor& stats, const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                       int vocab) override {
    const shapes::Softmax d = shapes::xent_parallel("xent_local_sums", stats, logits, targets, vocab_begin, vocab);
    dispatch_x(logits.dtype(), "xent_local_sums", [&]<typename X>() {
      cuda::xent_local_sums<X>(s(), stats.data<float>(), logits.data<X>(), targets.data<int32_t>(), d.N, d.V, d.valid,
                               vocab_begin);
    });
  }
  void xent_finish(const Tensor& losses, const Tensor& dlogits, const Tensor& logits, const Tensor& stats,
                   const Tensor& targets, float dloss, int64_t vocab_begin, int vocab) override {
    const shapes::Softmax d = shapes::xent_finish(losses, dlogits, logits, stats, targets, vocab_begin, vocab);
    dispatch_x(logits.dtype(), "xent_finish", [&]<typename X>() {
      cuda::xent_finish<X>(s(), losses.data<float>(), shapes::present(dlogits) ? dlogits.data<X>() : nullptr,
                           logits.data<X>(), stats.data<float>(), targets.data<int32_t>(), dloss, d.N, d.V, d.valid,
                           vocab_begin);
    });
  }
  void sum_in_order(const Tensor& out, const Tensor& parts) override {
    TT_CHECK(out.dtype() == DType::kF32 && parts.dtype() == DType::kF32 && out.numel() == 1,
             "sum_in_order: needs f32 out[1] and parts");
    cuda::sum_in_order(s(), out.data<float>(), parts.data<float>(), parts.numel());
  }
  void sum_squares(const Tensor& out, const Tensor& x) override { sum_squares_in(s(), scratch_, out, x); }
  void sum_squares_on(Stream& stream, const Tensor& out, const Tensor& x) override {
    TT_CHECK(&stream != &compute_stream(), "sum_squares_on: the compute stream has sum_squares");
    sum_squares_in(as_cuda(stream), side_scratch_, out, x);
  }
  void sum_squares_in(cudaStream_t stream, const Scratch& scratch, const Tensor& out, const Tensor& x) {
    const int64_t n = shapes::sum_squares(out, x);
    if (x.dtype() == DType::kBF16) {  // Note [bf16 gradients]
      cuda::sum_squares(stream, scratch, out.data<float>(), x.data<bf16>(), n);
      return;
    }
    require_f32(x.dtype(), "sum_squares");
    cuda::sum_squares(stream, scratch, out.data<float>(), x.data<float>(), n);
  }
  void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const Tensor& grad_norm_sq, const AdamWArgs& a, const Tensor& copy_out) override {
    const int64_t n = shapes::adamw(param, grad, m, v, grad_norm_sq, a, copy_out);
    if (grad.dtype() == DType::kBF16) {  // Note [bf16 gradients]
      adamw_with(grad.data<bf16>(), param, m, v, grad_norm_sq, a, copy_out, n);
    } else {
      require_f32(grad.dtype(), "adamw_update");
      adamw_with(grad.data<float>(), param, m, v, grad_norm_sq, a, copy_out, n);
    }
  }
  template <typename G>
  void adamw_with(const G* g, const Tensor& param, const Tensor& m, const Tensor& v, const Tensor& grad_norm_sq,
                  const AdamWArgs& a, const Tensor& copy_out, int64_t n) {
    float *mp = m.data<float>(), *vp = v.data<float>();
    const float* ns = grad_norm_sq.data<float>();
    if (a.split_master) {  // Note [master in two halves]
      cuda::adamw_update_split(s(), static_cast<uint16_t*>(param.raw()), static_cast<uint16_t*>(copy_out.raw()), g,
                               mp, vp, n, ns, a);
      return;
    }
    float* p = param.data<float>();
    if (copy_out.raw() == nullptr) {
      cuda::adamw_update<bf16>(s(), p, g, mp, vp, static_cast<bf16*>(nullptr), n, ns, a);
    } else if (copy_out.dtype() == DType::kBF16) {
      cuda::adamw_update(s(), p, g, mp, vp, copy_out.data<bf16>(), n, ns, a);
    } else {
      require_f32(copy_out.dtype(), "adamw_update's copy");
      cuda::adamw_update(s(), p, g, mp, vp, copy_out.data<float>(), n, ns, a);
    }
  }

  // Note [bf16 gradients] (exec/executor.h): the kernels that reduce a vector gradient (norm gains, biases) write
  // f32; a bf16 one goes through an f32 temporary carved from the scratch's end (widened from it first where the op
  // adds), converted (to nearest even) once the op is done. rest: the scratch the op may use besides.
  struct VecGrads {
    Scratch rest;
    float* f32[2] = {nullptr, nullptr};
    const Tensor* bf[2] = {nullptr, nullptr};
  };
  VecGrads vec_grads(const char* op, const Tensor& a, const Tensor& b, bool add) {
    VecGrads v{scratch_};
    const Tensor* g[2] = {&a, &b};
    size_t need = 0;
    for (const Tensor* t : g)
      if (shapes::present(*t) && t->dtype() == DType::kBF16)
        need += (static_cast<size_t>(t->numel()) * 4 + 255) / 256 * 256;
    if (need == 0) {  // f32 gradients: the whole scratch, as before
      for (int i = 0; i < 2; ++i) v.f32[i] = shapes::present(*g[i]) ? g[i]->data<float>() : nullptr;
      return v;
    }
    TT_CHECK(need * 2 <= scratch_.bytes, "%s: %zu bytes of bf16 gradients' f32 temporaries leave too little scratch",
             op, need);
    char* at = static_cast<char*>(scratch_.ptr) + (scratch_.bytes - need) / 256 * 256;
    v.rest.bytes = static_cast<size_t>(at - static_cast<char*>(scratch_.ptr));
    for (int i = 0; i < 2; ++i) {
      const Tensor& t = *g[i];
      if (!shapes::present(t)) continue;
      if (t.dtype() != DType::kBF16) {
        v.f32[i] = t.data<float>();
        continue;
      }
      v.f32[i] = reinterpret_cast<float*>(at);
      v.bf[i] = &t;
      at += (static_cast<size_t>(t.numel()) * 4 + 255) / 256 * 256;
      if (add) cuda::convert(s(), v.f32[i], t.data<bf16>(), t.numel());
    }
    return v;
  }
  void vec_grads_done(const VecGrads& v) {
    for (int i = 0; i < 2; ++i)
      if (v.bf[i] != nullptr) cuda::convert(s(), v.bf[i]->data<bf16>(), v.f32[i], v.bf[i]->numel());
  }

 private:
  cudaStream_t s() const { return compute_.get(); }
  static cudaStream_t as_cuda(Stream& st) {
    auto* c = dynamic_cast<CudaStream*>(&st);
    TT_CHECK(c != nullptr, "the CUDA backend was given a stream of another backend");
    return c->get();
  }

  int device_;
  int host_threads_;
  void* region_;
  std::string name_;
  memory::MemoryStats stats_;
  memory::DevicePool pool_;
  memory::HostPool host_pool_;
  memory::HostPool pageable_pool_;
  CudaStream compute_, h2d_, d2h_, host_, comm_;
  cublasHandle_t cublas_ = nullptr;
  LtGemm lt_;
  GemmImpl gemm_ = GemmImpl::kCublas;  // the bf16 GEMMs without an epilogue (gemm_options.h)
  int64_t xent_blocks_ = 0;  // Note [cross-entropy rows in flight]
  int64_t scratch_request_;
  AttentionOptions attention_;
  int64_t attention_workspace_bytes_;
  std::string attention_desc_;
  std::unique_ptr<cudnn::CudnnSdpa> sdpa_;
  void* attention_ws_ = nullptr;  // attention_workspace_bytes_ of the pool, or null
  int64_t gemm_attention_forward_calls_ = 0, gemm_attention_backward_calls_ = 0;
  int64_t tf32x3_attention_forward_calls_ = 0, tf32x3_attention_backward_calls_ = 0;
  int64_t tf32x3_attention_dq_partials_calls_ = 0;  // backwards whose d(q) came from the d(k)/d(v) pass
  Scratch scratch_;
  Scratch side_scratch_;  // sum_squares_on's (kSideScratchBytes)
  bool record_um_calls_ = false;
  int64_t um_host_piece_bytes_;
  std::unique_ptr<memory::UmDriver> um_;
};

}  // namespace

int64_t scratch_bytes_for(int64_t tokens_per_step, int heads) {
  const int64_t rowsums = tokens_per_step * heads * static_cast<int64_t>(sizeof(float));  // attention backward
  // Embedding backward: keys, sorted keys, positions, sorted positions, and CUB's temporary storage (bounded
  // generously).
  const int64_t sort = tokens_per_step * 4 * 4 + tokens_per_step * 8 + (int64_t(16) << 20);
  return std::max({kMinScratchBytes, rowsums, sort});
}

int64_t attention_workspace_for(const AttentionShape& shape, const AttentionOptions& options) {
  // An unresolved `auto` (Note [automatic attention workspace]) counts as its floor.
  const int64_t cap = options.workspace_cap < 0 ? kDefaultAttentionWorkspaceBytes : options.workspace_cap;
  // f32: our own implementations, whatever attention_impl says; only the GEMMs (Note [f32 attention by GEMMs]) take a
  // workspace, where the fused kernels do not take the shape or the knob asks for them.
  if (!shape.bf16) {
    const bool fused = options.f32 == F32Attention::kAuto && (shape.hs == 64 || shape.hs == 128);
    // The fused backward's d(q) partials (Note [d(q) from the key tiles]), where enough (b, h) pairs fit the cap.
    if (fused) return cuda::attention_tf32x3_workspace_for(shape.B, shape.T, shape.H, shape.hs, cap);
    if (options.f32 == F32Attention::kSimt) return 0;
    return attention_gemm_workspace_for(shape.B, shape.T, shape.H, cap);
  }
  if (options.impl == AttentionImpl::kNative || !shape.bf16 || (shape.hs != 64 && shape.hs != 128) || shape.T < 2)
    return 0;
  if (!cudnn::load(options.cudnn_library).is_ok()) return 0;
  return cudnn::workspace_bytes_for({shape.B, shape.T, shape.H, shape.hs, shape.KV}, cap, options.deterministic);
}

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
  const int64_t reserved =
      reserved_bytes(std::max(options.scratch_bytes, kMinScratchBytes)) + options.attention_workspace_bytes;
  TT_RETURN_IF(budget <= reserved, kOutOfMemory,
               "device budget %s on %s leaves nothing after the backend's own %s (cuBLAS workspace and scratch); "
               "free on the GPU: %s of %s",
               format_bytes(budget).c_str(), prop.name, format_bytes(reserved).c_str(),
               format_bytes(static_cast<int64_t>(free_b)).c_str(), format_bytes(static_cast<int64_t>(total_b)).c_str());
  TT_RETURN_IF(budget > static_cast<int64_t>(free_b), kOutOfMemory,
               "device budget %s exceeds the free memory of %s (%s free of %s); lower --device-budget",
               format_bytes(budget).c_str(), prop.name, format_bytes(static_cast<int64_t>(free_b)).c_str(),
               format_bytes(static_cast<int64_t>(total_b)).c_str());
  void* region = nullptr;
  cudaError_t mrc = cudaMalloc(&region, static_cast<size_t>(budget));
  TT_RETURN_IF(mrc != cudaSuccess, kOutOfMemory, "cudaMalloc of the %s device arena on %s failed: %s",
               format_bytes(budget).c_str(), prop.name, cudaGetErrorString(mrc));
  // Host memory on the GPU's NUMA node unless a node is named (-1 from sysfs: one node, no placement needed). A
  // node found automatically is a preference: where placement is not allowed (a container without CAP_SYS_NICE,
  // a kernel without NUMA) the pool warns and goes on unplaced; a named node is required.
  int numa_node = options.host_numa_node;
  if (numa_node < 0) {
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), options.device) == cudaSuccess)
      numa_node = memory::pci_device_numa_node(bus);
  } else if (!memory::numa_node_exists(numa_node)) {
    cudaFree(region);
    return make_status(StatusCode::kInvalidArgument, "host NUMA node %d does not exist (this machine has %d)",
                       numa_node, memory::numa_node_count());
  }
  auto be = std::make_unique<CudaBackend>(options.device, region, budget, total_b,
                                          std::max(options.scratch_bytes, kMinScratchBytes), prop.name, numa_node,
                                          options.host_numa_node >= 0, std::max(1, options.host_threads),
                                          options.attention, options.attention_workspace_bytes,
                                          options.um_host_piece_bytes);
  be->set_record_um_calls(options.record_um_calls);
  be->set_gemm(options.gemm);
  be->set_xent_blocks(options.xent_blocks);
  TT_TRY(be->init());
  TT_LOG(INFO, MEM, "CUDA device arena on %s: %s (free %s of %s)", prop.name, format_bytes(budget).c_str(),
         format_bytes(static_cast<int64_t>(free_b)).c_str(), format_bytes(static_cast<int64_t>(total_b)).c_str());
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace tt::cuda
