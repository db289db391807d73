#include "exec/grad_reducer.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "comm/nccl.h"
#include "core/check.h"

namespace tt {
namespace {

// The collectives of a step, each described as a comm::Call on tensors (in place but for the scatter), and run by
// the implementation in the stream's order.
class StepCollectives : public GradReducer {
 public:
  void reduce(const Tensor& grads, Stream& stream) override {
    // Note [bf16 gradients]: bf16 segments are averaged as they are (half the bytes); the host communicators add
    // bf16 in f32 in rank order and round once, NCCL as it reduces bf16.
    TT_CHECK(grads.dtype() == DType::kF32 || grads.dtype() == DType::kBF16, "gradient reduction of %s: f32 or bf16",
             dtype_name(grads.dtype()));
    run(in_place(comm::kAllreduce, grads, comm::Op::kAvg), stream, "data-parallel gradient reduction");
  }
  void sum(const Tensor& t, Stream& stream) override {
    run(in_place(comm::kAllreduce, t, comm::Op::kSum), stream, "tensor-parallel sum");
  }
  void max(const Tensor& t, Stream& stream) override {
    run(in_place(comm::kAllreduce, t, comm::Op::kMax), stream, "tensor-parallel maximum");
  }
  void broadcast(const Tensor& t, int root, Stream& stream) override {
    comm::Call c = in_place(comm::kBroadcast, t, comm::Op::kSum);
    c.root = root;
    run(c, stream, "the sharded optimizer's parameter broadcast");
  }
  void allgather(const Tensor& t, Stream& stream) override {
    TT_CHECK(t.numel() % ranks() == 0, "allgather of %lld elements over %d ranks", static_cast<long long>(t.numel()),
             ranks());
    comm::Call c = in_place(comm::kAllgather, t, comm::Op::kSum);
    c.count /= static_cast<size_t>(ranks());
    run(c, stream, "the sharded optimizer's parameter allgather");
  }
  void scatter(const Tensor& from, const Tensor& to, int root, Stream& stream) override {
    comm::Call c;
    c.kind = comm::kScatter;
    c.send = nullptr;
    if (from.raw() != nullptr) {
      TT_CHECK(from.dtype() == to.dtype() && from.numel() == to.numel() * ranks(),
               "scatter of %lld %s elements into shares of %lld %s over %d ranks", static_cast<long long>(from.numel()),
               dtype_name(from.dtype()), static_cast<long long>(to.numel()), dtype_name(to.dtype()), ranks());
      c.send = from.raw();
    }
    c.recv = to.raw();
    c.count = static_cast<size_t>(to.numel());
    c.dtype = to.dtype();
    c.root = root;
    run(c, stream, "the input's scatter");
  }

 protected:
  static comm::Call in_place(comm::Kind kind, const Tensor& t, comm::Op op) {
    comm::Call c;
    c.kind = kind;
    c.send = comm::kInPlace;
    c.recv = t.raw();
    c.count = static_cast<size_t>(t.numel());
    c.dtype = t.dtype();
    c.op = op;
    return c;
  }
  virtual void run(const comm::Call& call, Stream& stream, const char* what) = 0;
};

class HostGradReducer final : public StepCollectives {
 public:
  HostGradReducer(Backend& be, std::unique_ptr<comm::Communicator> comm)
      : be_(be), own_(std::move(comm)), comm_(*own_) {}
  int ranks() const override { return comm_.size(); }
  Status status() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  void run(const comm::Call& c, Stream& stream, const char* what) override {
    const bool ok = be_.enqueue_on(stream, [this, c, what] {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!status_.is_ok()) return;  // the ranks stopped agreeing: nothing more is reduced
      }
      Status s;
      switch (c.kind) {
        case comm::kBroadcast: s = comm_.broadcast(c.send, c.recv, c.count, c.dtype, c.root); break;
        case comm::kAllgather: s = comm_.allgather(c.send, c.recv, c.count, c.dtype); break;
        case comm::kAllreduce: s = comm_.allreduce(c.send, c.recv, c.count, c.dtype, c.op); break;
        case comm::kScatter: s = comm_.scatter(c.send, c.recv, c.count, c.dtype, c.root); break;
        default: TT_CHECK(false, "a step collective of kind %d", static_cast<int>(c.kind));
      }
      if (!s.is_ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        status_ = std::move(s.with_context(what));
      }
    });
    TT_CHECK(ok, "the backend cannot run host functions in stream order (make_host_grad_reducer refuses it)");
  }

  Backend& be_;
  std::unique_ptr<comm::Communicator> own_;
  comm::Communicator& comm_;
  mutable std::mutex mu_;
  Status status_;
};

class NcclGradReducer final : public StepCollectives {
 public:
  explicit NcclGradReducer(std::unique_ptr<comm::NcclCommunicator> nccl) : nccl_(std::move(nccl)) {}
  int ranks() const override { return nccl_->size(); }
  Status status() const override { return status_; }  // (enqueue's errors; NCCL's own come at the stream's sync)

 private:
  void run(const comm::Call& call, Stream& stream, const char* what) override {
    TT_CHECK(stream.native() != nullptr, "an NCCL collective on a stream without a device handle (%s)", stream.name());
    if (!status_.is_ok()) return;
    Status s = nccl_->enqueue(stream.native(), call);
    if (!s.is_ok()) status_ = std::move(s.with_context(std::string(what) + " (nccl)"));
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
  // A communicator of its own: the streams' collectives run on the streams' threads, while the caller's thread may
  // be in a collective of its own on `comm` (the trainer's average of the loss, as the CPU optimizer's last updates
  // and parameter gathers still run).
  TT_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> own, comm.split(0, comm.rank()));
  return std::unique_ptr<GradReducer>(new HostGradReducer(backend, std::move(own)));
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
