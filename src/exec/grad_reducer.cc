#include "exec/grad_reducer.h"

#include <algorithm>
#include <mutex>

#include "comm/nccl.h"
#include "core/check.h"

namespace tt {
namespace {

comm::DType comm_dtype(DType d) {
  switch (d) {
    case DType::kF32: return comm::DType::kF32;
    case DType::kF64: return comm::DType::kF64;
    case DType::kBF16: return comm::DType::kBF16;
    default: TT_CHECK(false, "a reduction of %s tensors", dtype_name(d));
  }
  return comm::DType::kF32;
}

class HostGradReducer final : public GradReducer {
 public:
  HostGradReducer(Backend& be, comm::Communicator& comm) : be_(be), comm_(comm) {}
  int ranks() const override { return comm_.size(); }
  void reduce(const Tensor& grads, Stream& stream) override {
    TT_CHECK(grads.dtype() == DType::kF32, "gradient reduction of %s: f32 only", dtype_name(grads.dtype()));
    run(grads, stream, comm::Op::kAvg, "data-parallel gradient reduction");
  }
  void sum(const Tensor& t, Stream& stream) override { run(t, stream, comm::Op::kSum, "tensor-parallel sum"); }
  void max(const Tensor& t, Stream& stream) override { run(t, stream, comm::Op::kMax, "tensor-parallel maximum"); }
  void broadcast(const Tensor& t, int root, Stream& stream) override {
    run(t, stream, comm::Op::kSum, "the sharded optimizer's parameter broadcast", root);
  }
  void allgather(const Tensor& t, Stream& stream) override {
    TT_CHECK(t.numel() % comm_.size() == 0, "allgather of %lld elements over %d ranks",
             static_cast<long long>(t.numel()), comm_.size());
    run(t, stream, comm::Op::kSum, "the sharded optimizer's parameter allgather", kAllgather);
  }
  Status status() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  static constexpr int kAllgather = -2;
  // root >= 0: a broadcast from that rank; kAllgather: an in-place allgather of equal shares; else an allreduce with
  // `op`.
  void run(const Tensor& t, Stream& stream, comm::Op op, const char* what, int root = -1) {
    void* p = t.raw();
    const size_t n = static_cast<size_t>(t.numel());
    const comm::DType dt = comm_dtype(t.dtype());
    const bool ok = be_.enqueue_on(stream, [this, p, n, dt, op, what, root] {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!status_.is_ok()) return;  // the ranks stopped agreeing: nothing more is reduced
      }
      const size_t share = n / static_cast<size_t>(comm_.size());
      Status s = root >= 0            ? comm_.broadcast(comm::kInPlace, p, n, dt, root)
                 : root == kAllgather ? comm_.allgather(comm::kInPlace, p, share, dt)
                                      : comm_.allreduce(comm::kInPlace, p, n, dt, op);
      if (!s.is_ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        status_ = std::move(s.with_context(what));
      }
    });
    TT_CHECK(ok, "the backend cannot run host functions in stream order (make_host_grad_reducer refuses it)");
  }

  Backend& be_;
  comm::Communicator& comm_;
  mutable std::mutex mu_;
  Status status_;
};

class NcclGradReducer final : public GradReducer {
 public:
  explicit NcclGradReducer(std::unique_ptr<comm::NcclCommunicator> nccl) : nccl_(std::move(nccl)) {}
  int ranks() const override { return nccl_->size(); }
  void reduce(const Tensor& grads, Stream& stream) override {
    TT_CHECK(grads.dtype() == DType::kF32, "gradient reduction of %s: f32 only", dtype_name(grads.dtype()));
    run(grads, stream, comm::Op::kAvg, "data-parallel gradient reduction (nccl)");
  }
  void sum(const Tensor& t, Stream& stream) override { run(t, stream, comm::Op::kSum, "tensor-parallel sum (nccl)"); }
  void max(const Tensor& t, Stream& stream) override {
    run(t, stream, comm::Op::kMax, "tensor-parallel maximum (nccl)");
  }
  void broadcast(const Tensor& t, int root, Stream& stream) override {
    run(t, stream, comm::Op::kSum, "the sharded optimizer's parameter broadcast (nccl)", root);
  }
  void allgather(const Tensor& t, Stream& stream) override {
    TT_CHECK(t.numel() % nccl_->size() == 0, "allgather of %lld elements over %d ranks",
             static_cast<long long>(t.numel()), nccl_->size());
    run(t, stream, comm::Op::kSum, "the sharded optimizer's parameter allgather (nccl)", kAllgather);
  }
  Status status() const override { return status_; }  // (enqueue's errors; NCCL's own come at the stream's sync)

 private:
  static constexpr int kAllgather = -2;
  void run(const Tensor& t, Stream& stream, comm::Op op, const char* what, int root = -1) {
    TT_CHECK(stream.native() != nullptr, "an NCCL reduction on a stream without a device handle (%s)", stream.name());
    if (!status_.is_ok()) return;
    comm::Call call;
    call.kind = root >= 0 ? comm::kBroadcast : root == kAllgather ? comm::kAllgather : comm::kAllreduce;
    call.root = std::max(root, 0);
    call.send = comm::kInPlace;
    call.recv = t.raw();
    call.count = static_cast<size_t>(t.numel()) / (root == kAllgather ? static_cast<size_t>(nccl_->size()) : 1);
    call.dtype = comm_dtype(t.dtype());
    call.op = op;
    Status s = nccl_->enqueue(stream.native(), call);
    if (!s.is_ok()) status_ = std::move(s.with_context(what));
  }

  std::unique_ptr<comm::NcclCommunicator> nccl_;
  Status status_;  // written and read on the thread that issues the schedule
};

}  // namespace

Result<std::unique_ptr<GradReducer>> make_host_grad_reducer(Backend& backend, comm::Communicator& comm) {
  const bool runs = backend.enqueue_on(backend.compute_stream(), [] {});
  TT_RETURN_IF(!runs, kUnimplemented,
               "data parallel on %s: host reductions cannot run in its streams' order (use the NCCL reducer)",
               backend.describe().c_str());
  return std::unique_ptr<GradReducer>(new HostGradReducer(backend, comm));
}

Result<std::unique_ptr<GradReducer>> make_stream_reducer(Backend& backend, comm::Communicator& comm, Stream& stream,
                                                        const char* use) {
  if (stream.native() == nullptr) return make_host_grad_reducer(backend, comm);
  TT_RETURN_IF(!comm::have_nccl(), kUnimplemented,
               "%s on %s needs NCCL, and this build has none (install NCCL and rebuild)", use,
               backend.describe().c_str());
#ifdef TIERTRAIN_HAVE_NCCL
  TT_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> host, comm.split(0, comm.rank()));
  TT_ASSIGN_OR_RETURN(std::unique_ptr<comm::NcclCommunicator> nccl,
                      comm::create_nccl(std::move(host), comm::Options{comm.timeout()}));
  return std::unique_ptr<GradReducer>(new NcclGradReducer(std::move(nccl)));
#else
  return make_status(StatusCode::kUnimplemented, "%s: this build has no NCCL", use);
#endif
}

}  // namespace tt
