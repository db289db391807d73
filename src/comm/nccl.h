// comm/nccl: the Communicator between GPUs, over NCCL (comm/nccl.cc, Note [nccl backend]), in builds where CMake
// found CUDA and NCCL (TIERTRAIN_HAVE_NCCL). Buffers are memory of this rank's GPU (cudaMalloc, or managed).
// The blocking calls run on a stream of the communicator's that is ordered after the legacy default stream: work
// the caller queued there (or did with cudaMemcpy) comes first; work on the caller's own non-blocking streams must
// be synchronized first, or the call queued on that stream with enqueue().
//
//   TT_ASSIGN_OR_RETURN(auto comm, comm::nccl_world());   // TIERTRAIN_COMM_BACKEND=nccl: comm::world() gives it too
//   TT_TRY(comm->allreduce(dev_send, dev_recv, n, comm::DType::kBF16, comm::Op::kSum));       // blocking
//   TT_TRY(comm->enqueue(stream, {comm::kAllreduce, comm::kInPlace, grads, n, comm::DType::kBF16,
//                                 comm::Op::kAvg}));                                        // stream-ordered
#pragma once

#include <memory>

#include "comm/comm.h"

namespace tt::comm {

// One collective, as the stream-ordered calls take it (the arguments of the blocking call of the same name).
struct Call {
  Kind kind = kAllreduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType dtype = DType::kF32;
  Op op = Op::kSum;
  int root = 0;
};

class NcclCommunicator : public Communicator {
 public:
  // This rank's CUDA device (LOCAL_RANK modulo the devices this process sees, unless TIERTRAIN_DEVICE names one).
  virtual int device() const = 0;
  // Stream-ordered: `call` goes on `stream` (a cudaStream_t of this rank's device; nullptr: the legacy default
  // stream) after the work already there, and this returns once it is queued, after the ranks have checked each
  // other's arguments on the host (a deadline as for every call). Work queued on the stream later sees the result;
  // the buffers must stay valid until then. Calls on one communicator must be queued in the same order on every rank,
  // and on one stream at a time (or ordered between streams by the caller).
  virtual Status enqueue(void* stream, const Call& call) = 0;
  // Waits until everything queued on `stream` is done, the caller's own work there included, within the
  // communicator's deadline (an error names the last call queued; NCCL's asynchronous errors, and a peer that gave
  // up, are reported too). Past the deadline the NCCL communicator is aborted.
  virtual Status synchronize(void* stream) = 0;
};

// The NCCL communicator of the job this process belongs to: the host communicator of comm::world() bootstraps it
// (it carries the NCCL unique id and the argument checks) and is kept inside it.
Result<std::unique_ptr<NcclCommunicator>> nccl_world(Options options = {});
// Whether this build has the nccl backend.
bool have_nccl();
// The NCCL communicator over `host`, which bootstraps it and stays inside it (comm.cc; built with NCCL only).
Result<std::unique_ptr<NcclCommunicator>> create_nccl(std::unique_ptr<Communicator> host, const Options& options);

}  // namespace tt::comm
