#include "exec/grad_reducer.h"

#include <mutex>

#include "core/check.h"

namespace tt {
namespace {

class HostGradReducer final : public GradReducer {
 public:
  HostGradReducer(Backend& be, comm::Communicator& comm) : be_(be), comm_(comm) {}
  int ranks() const override { return comm_.size(); }
  void reduce(const Tensor& grads, Stream& stream) override {
    TT_CHECK(grads.dtype() == DType::kF32, "gradient reduction of %s: f32 only", dtype_name(grads.dtype()));
    void* p = grads.raw();
    const size_t n = static_cast<size_t>(grads.numel());
    const bool ok = be_.enqueue_on(stream, [this, p, n] {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!status_.is_ok()) return;  // the ranks stopped agreeing: nothing more is reduced
      }
      Status s = comm_.allreduce(comm::kInPlace, p, n, comm::DType::kF32, comm::Op::kAvg);
      if (!s.is_ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        status_ = std::move(s.with_context("data-parallel gradient reduction"));
      }
    });
    TT_CHECK(ok, "the backend cannot run host functions in stream order (make_host_grad_reducer refuses it)");
  }
  Status status() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  Backend& be_;
  comm::Communicator& comm_;
  mutable std::mutex mu_;
  Status status_;
};

}  // namespace

Result<std::unique_ptr<GradReducer>> make_host_grad_reducer(Backend& backend, comm::Communicator& comm) {
  const bool runs = backend.enqueue_on(backend.compute_stream(), [] {});
  TT_RETURN_IF(!runs, kUnimplemented,
               "data parallel on %s: its gradient reductions need NCCL on the device's streams, which is not built "
               "yet (docs/design/mesh.md); data parallel runs on the cpu backend today",
               backend.describe().c_str());
  return std::unique_ptr<GradReducer>(new HostGradReducer(backend, comm));
}

}  // namespace tt
