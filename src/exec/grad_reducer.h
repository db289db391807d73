// exec/grad_reducer: reductions over the ranks of one mesh dimension in a stream's order: a data-parallel run
// averages each segment's gradients over its ranks (Note [data parallel] in plan/schedule.cc), a tensor-parallel one
// sums partial activations and their gradients (Note [tensor parallel] in model/gpt.h). Two implementations: host
// memory through a comm::Communicator, on a backend that runs host functions in stream order (the CPU backend); and
// on a GPU, NCCL on the stream itself.
//
//   auto r = make_stream_reducer(backend, data_comm, backend.comm_stream(), "data parallel");  // along the batch dim
//   executor.set_grad_reducer(r.get());
//   ... steps ...
//   TT_TRY(r->status());                                   // the first failure of any reduction
#pragma once

#include <memory>

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/nccl.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tt {

class GradReducer {
 public:
  virtual ~GradReducer() = default;
  virtual int ranks() const = 0;
  // Averages `grads` over the ranks, in place, after the work already submitted to `stream` and before what comes
  // after it. Errors are kept for status(): a failed reduction leaves the gradients unusable, and every later one
  // fails too.
  virtual void reduce(const Tensor& grads, Stream& stream) = 0;
  // Sums t (f32, f64 or bf16) over the ranks, in place, in `stream`'s order (errors as reduce's).
  virtual void sum(const Tensor& t, Stream& stream) = 0;
  // The element-wise maximum over the ranks, in place (as sum).
  virtual void max(const Tensor& t, Stream& stream) = 0;
  // t from rank `root` to every rank, in place (Note [sharded optimizer] in exec/optimizer.h).
  virtual void broadcast(const Tensor& t, int root, Stream& stream) = 0;
  // Every rank's share of t to every rank, in place: rank r's share is t's elements [r q, (r + 1) q), q = its size
  // over the ranks, which must divide it (Note [sharded optimizer]: one call a segment instead of one a rank).
  virtual void allgather(const Tensor& t, Stream& stream) = 0;
  // Rank `root`'s `from` (the ranks' shares in rank order, each of to's size and dtype) to every rank's `to`: an
  // input's scatter from the root's device (Note [data-parallel input] in exec/trainer.cc). `from` is read on the root
  // only; other ranks may pass an empty tensor.
  virtual void scatter(const Tensor& from, const Tensor& to, int root, Stream& stream) = 0;
  // Ok, or the first error (once the stream has run the reductions: synchronize it first).
  virtual Status status() const = 0;
};

// Through a communicator of the same ranks made from `comm` (comm.split), which the reducer owns, on host-addressable
// tensors: refused where the backend cannot run host functions in stream order (a GPU).
Result<std::unique_ptr<GradReducer>> make_host_grad_reducer(Backend& backend, comm::Communicator& comm);

// The reducer over `comm`'s ranks for work in `stream`'s order, where that stream runs: through host memory where
// the backend runs host functions in stream order (the stream has no device handle: the CPU backend), else NCCL over
// a communicator of the same ranks made from comm (comm.split), which the reducer owns: NCCL's calls queued on the
// stream itself (comm::NcclCommunicator::enqueue, after the ranks checked each other's arguments on the host). `use`
// names the purpose in errors ("data parallel", "tensor parallel").
Result<std::unique_ptr<GradReducer>> make_stream_reducer(Backend& backend, comm::Communicator& comm, Stream& stream,
                                                        const char* use);

}  // namespace tt
