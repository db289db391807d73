// comm/comm: collectives between the ranks of one job, behind one API whatever carries them (shared memory between
// the processes of one node today; MPI across nodes and NCCL between GPUs to come: docs/design/comm.md).
//
//   TT_ASSIGN_OR_RETURN(auto comm, comm::world());          // from the environment `tiertrain launch` sets
//   TT_TRY(comm->allreduce(send, recv, n, comm::DType::kF32, comm::Op::kSum));
//   TT_TRY(comm->allreduce(comm::kInPlace, buf, n, comm::DType::kBF16, comm::Op::kAvg));
//
// Conventions (NCCL's): counts are elements, not bytes. allgather and gather take `count` elements from each rank
// and write size() * count; scatter and reduce_scatter write `count` elements on each rank from size() * count;
// alltoall sends `count` elements to each rank (size() * count in, size() * count out). In place: send == kInPlace
// (or send == recv; for allgather and gather, send == recv + rank * count; for reduce_scatter, recv == send + rank
// * count). Every call is collective: all ranks call the same operations in the same order with matching counts,
// dtypes, ops and roots; a mismatch is an error on every rank, naming the operation, its sequence number and the
// ranks and fields that differ, instead of a hang or a wrong answer. Every wait has a deadline (Options::timeout);
// an error names the ranks that did not arrive, and a rank that died is named as soon as it is seen dead.
// Reductions combine the ranks' values in rank order (bf16 and f16 in f32), so every rank gets the same bits.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace tt::comm {

using ::tt::DType;  // core/dtype.h: the collectives take every dtype
// Note [bitwise and logical reductions]: band, bor, bxor and land, lor, lxor, as MPI defines them for C integers:
// integer elements only (int32, int64, uint8; a float is refused), the logical ones giving 1 or 0 (with one rank the
// value itself, as MPI's, which copies it). Not over NCCL, which has none.
enum class Op : uint8_t { kSum, kProd, kMin, kMax, kAvg, kBand, kBor, kBxor, kLand, kLor, kLxor };
inline bool op_on_integers_only(Op op) { return op >= Op::kBand; }
// The collectives (in error messages, descriptions checked across ranks, and NcclCommunicator::enqueue).
enum Kind : int32_t { kBarrier, kBroadcast, kReduce, kAllreduce, kGather, kScatter, kAllgather, kReduceScatter,
                      kAlltoall };

const char* op_name(Op op);
Result<Op> parse_op(const std::string& name);

// The "in place" send buffer (mpi4py's IN_PLACE): the data is taken from the receive buffer.
inline const void* const kInPlace = reinterpret_cast<const void*>(uintptr_t{1});

struct Options {
  // How long any one wait for other ranks may take before the call fails (TIERTRAIN_COMM_TIMEOUT, seconds).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// A non-blocking collective in flight. wait() returns its status (each of its waits for other ranks keeps the
// communicator's deadline); test() says whether it is done. Until wait() has returned, the operation's buffers
// must stay valid and must not be written (nor, for its receive buffer, read).
class Request {
 public:
  Request() = default;
  Status wait();
  bool test() const;
  // Done already (looked at, nothing driven): wait() returns at once.
  bool ready() const;
  bool valid() const { return state_ != nullptr; }
  struct State;  // (comm/p2p.h: internal to comm/)

 private:
  friend class Communicator;
  friend class P2pEngine;
  std::shared_ptr<State> state_;
};

// Point-to-point (Note [point-to-point] in comm/p2p.h): a receive names its source and tag, or takes any.
constexpr int kAnySource = -1;
constexpr int kAnyTag = -1;
constexpr int kMaxTag = (1 << 30) - 1;  // tags are 0..kMaxTag on every backend
// What a receive (or a probe) found: the sender, the tag, and the message's length in bytes.
struct MessageInfo {
  int source = -1;
  int tag = -1;
  size_t bytes = 0;
};

class P2pEngine;

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;
  // Collective operations completed so far (the sequence number of the next is this + 1).
  virtual int64_t sequence() const = 0;
  // How long any one wait for other ranks may take (Options::timeout, TIERTRAIN_COMM_TIMEOUT).
  virtual std::chrono::milliseconds timeout() const = 0;
  // Where this rank's buffers live (for logs and benchmark headers), e.g. "preferred NUMA node 2 (HBW: ...)".
  virtual std::string placement() const { return ""; }
  // This rank gives up (an argument error found before it could call the collective its peers are in): the
  // communicator is unusable from now on, and peers waiting for this rank fail at once instead of at the deadline.
  virtual void abandon(const std::string& why) = 0;
  // Whether a peer has given up (an error, or abandon()), as far as this backend can tell (shm can; MPI cannot): for a
  // communicator layered on this one (nccl on its host communicator) to stop waiting for that peer.
  virtual bool peer_gave_up() const { return false; }

  // The memory this communicator's buffers must be in, for callers that do not know the backend (comm-bench):
  // host memory, or for nccl the memory of this rank's GPU. alloc_buffer gives 64-byte aligned memory of that kind
  // (host buffers of 4 MiB and more: 2 MiB aligned, with transparent huge pages asked for, as numpy does for its
  // large arrays); copy_in/copy_out move bytes between it and host memory.
  virtual Result<void*> alloc_buffer(size_t bytes);
  virtual void free_buffer(void* p);
  virtual Status copy_in(void* buffer, const void* host, size_t bytes);
  virtual Status copy_out(void* host, const void* buffer, size_t bytes);

  // Blocking collectives. A communicator is used from one thread at a time; while non-blocking operations are in
  // flight, a blocking call runs after them, in call order.
  Status barrier();
  Status broadcast(const void* send, void* recv, size_t count, DType dtype, int root);
  Status reduce(const void* send, void* recv, size_t count, DType dtype, Op op, int root);
  Status allreduce(const void* send, void* recv, size_t count, DType dtype, Op op);
  Status gather(const void* send, void* recv, size_t count, DType dtype, int root);
  Status scatter(const void* send, void* recv, size_t count, DType dtype, int root);
  Status allgather(const void* send, void* recv, size_t count, DType dtype);
  Status reduce_scatter(const void* send, void* recv, size_t count, DType dtype, Op op);
  Status alltoall(const void* send, void* recv, size_t count, DType dtype);

  // Note [split]: the ranks that give the same color form a new communicator, ranked by (key, rank here), as
  // MPI_Comm_split. Collective over this communicator; a rank giving kUndefined (any color < 0) takes part but joins
  // none and gets nullptr. The new communicator has the same backend and options, its own sequence, and lives
  // independently of this one (either may be used or destroyed first; its operations do not order with this one's).
  static constexpr int kUndefined = -1;
  virtual Result<std::unique_ptr<Communicator>> split(int color, int key);

  // The point-to-point transport of this communicator's backend, for a communicator layered on it (nccl over its
  // host communicator: Note [nccl point-to-point]); nullptr where the backend has none.
  std::unique_ptr<class P2pTransport> layered_p2p_transport();

  // Non-blocking collectives: queued, and run in call order on the communicator's progress thread (started by the
  // first one), so that the caller computes meanwhile.
  Request ibarrier();
  Request ibroadcast(const void* send, void* recv, size_t count, DType dtype, int root);
  Request ireduce(const void* send, void* recv, size_t count, DType dtype, Op op, int root);
  Request iallreduce(const void* send, void* recv, size_t count, DType dtype, Op op);
  Request igather(const void* send, void* recv, size_t count, DType dtype, int root);
  Request iscatter(const void* send, void* recv, size_t count, DType dtype, int root);
  Request iallgather(const void* send, void* recv, size_t count, DType dtype);
  Request ireduce_scatter(const void* send, void* recv, size_t count, DType dtype, Op op);
  Request ialltoall(const void* send, void* recv, size_t count, DType dtype);

  // Point-to-point messages (Note [point-to-point] in comm/p2p.h), as MPI's: not collective; a message goes to the
  // receive of `dest` that names this rank (or kAnySource) and its tag (or kAnyTag), the first such receive posted
  // taking the first such message; messages from one rank to another are received in the order sent. send returns
  // once the buffer may be reused (small messages are buffered at once; a long one waits for its receiver to take
  // its start). A receive takes a message of at most its buffer's length (a longer one is an error, and is dropped);
  // info, if given, says who sent how much. A type differing from the sender's is an error (bytes match any type);
  // the mpi backend, whose messages do not carry their type, checks the length alone. Every wait has the deadline;
  // a rank that died or gave up is named. Tags: 0..kMaxTag. On the nccl backend buffers may be in GPU memory (Note
  // [nccl point-to-point]).
  Status send(const void* buf, size_t count, DType dtype, int dest, int tag = 0);
  Status recv(void* buf, size_t count, DType dtype, int source = kAnySource, int tag = kAnyTag,
              MessageInfo* info = nullptr);
  Status send_bytes(const void* buf, size_t bytes, int dest, int tag = 0);
  Status recv_bytes(void* buf, size_t capacity, int source = kAnySource, int tag = kAnyTag,
                    MessageInfo* info = nullptr);
  // A message of any length, into *out (resized to it): the object layer's receive.
  Status recv_any(std::vector<char>* out, int source = kAnySource, int tag = kAnyTag, MessageInfo* info = nullptr);
  // Both at once (neither waits for the other): MPI_Sendrecv.
  Status sendrecv(const void* send, size_t send_count, DType send_dtype, int dest, int send_tag, void* recv,
                  size_t recv_count, DType recv_dtype, int source, int recv_tag, MessageInfo* info = nullptr);
  // The same of raw messages: each side's bytes and type (a DType's value, or kBytesType of comm/p2p.h: bytes, which
  // match any type), as the Python binding's buffers come.
  Status sendrecv_raw(const void* send, size_t send_bytes, int32_t send_type, int dest, int send_tag, void* recv,
                      size_t recv_bytes, int32_t recv_type, int source, int recv_tag, MessageInfo* info = nullptr);
  // Non-blocking forms: started now, progressed by the communicator's point-to-point thread; info is written by the
  // time wait() returns. The buffers (and *out, *info) must stay valid until then.
  Request isend(const void* buf, size_t count, DType dtype, int dest, int tag = 0);
  Request isend_bytes(const void* buf, size_t bytes, int dest, int tag = 0);
  Request irecv(void* buf, size_t count, DType dtype, int source = kAnySource, int tag = kAnyTag,
                MessageInfo* info = nullptr);
  Request irecv_bytes(void* buf, size_t capacity, int source = kAnySource, int tag = kAnyTag,
                      MessageInfo* info = nullptr);
  Request irecv_any(std::vector<char>* out, int source = kAnySource, int tag = kAnyTag, MessageInfo* info = nullptr);
  // Whether a message that a receive of (source, tag) would take has arrived (its start), without taking it:
  // MPI_Iprobe. probe waits for one (MPI_Probe).
  Result<bool> iprobe(int source = kAnySource, int tag = kAnyTag, MessageInfo* info = nullptr);
  Status probe(int source = kAnySource, int tag = kAnyTag, MessageInfo* info = nullptr);

 protected:
  Communicator();
  // What a backend implements: one collective, run to its end on the calling thread.
  virtual Status do_barrier() = 0;
  virtual Status do_broadcast(const void* send, void* recv, size_t count, DType dtype, int root) = 0;
  virtual Status do_reduce(const void* send, void* recv, size_t count, DType dtype, Op op, int root) = 0;
  virtual Status do_allreduce(const void* send, void* recv, size_t count, DType dtype, Op op) = 0;
  virtual Status do_gather(const void* send, void* recv, size_t count, DType dtype, int root) = 0;
  virtual Status do_scatter(const void* send, void* recv, size_t count, DType dtype, int root) = 0;
  virtual Status do_allgather(const void* send, void* recv, size_t count, DType dtype) = 0;
  virtual Status do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype, Op op) = 0;
  virtual Status do_alltoall(const void* send, void* recv, size_t count, DType dtype) = 0;
  // What split() asks of a backend (after it exchanged every rank's color and key): the communicator of `members`
  // (their ranks here, in the new order), of which this rank is new_rank. `tag` is the same on every member and
  // unique to the split call (the sequence number of its exchange) and to the color: a name for it (shm: segments).
  virtual Result<std::unique_ptr<Communicator>> make_split(const std::vector<int>& members, int new_rank,
                                                          const std::string& tag);
  // Backends call this first in their destructor: it lets the queued operations finish and stops the thread (and
  // point-to-point's: its operations still pending fail).
  void stop_progress();
  // Point-to-point's transport (comm/p2p.h), made on the first point-to-point call; nullptr: this backend has none.
  virtual std::unique_ptr<class P2pTransport> make_p2p_transport();

  // Runs op inline, or behind the non-blocking operations in flight (for a backend's own calls, e.g. nccl's
  // stream-ordered ones, which must keep the call order too). A template, so that the common case (nothing in
  // flight) calls op without making a std::function (a heap allocation for every blocking collective).
  template <typename F>
  Status run(F&& op) {
    if (in_flight()) return run_queued(std::function<Status()>(std::forward<F>(op)));
    return op();
  }

 private:
  struct Progress;
  Request submit(std::function<Status()> op);
  bool in_flight();  // non-blocking operations queued or running
  Status run_queued(std::function<Status()> op);
  std::unique_ptr<Progress> progress_;
  // Point-to-point: made on first use (p2p()), stopped by stop_progress(). p2p_made_: the engine once made, read
  // without the lock by every call after the first (a lock a message was 4% of a window of small Isends).
  std::mutex p2p_mu_;
  std::unique_ptr<P2pEngine> p2p_;
  std::atomic<P2pEngine*> p2p_made_{nullptr};
  Result<P2pEngine*> p2p();
};

// The communicator of the job this process belongs to, from the environment `tiertrain launch` (or a compatible
// launcher) sets: TIERTRAIN_RANK (or RANK), TIERTRAIN_WORLD_SIZE (or WORLD_SIZE), TIERTRAIN_COMM_ID (the job's
// unique name). A single process with none of them set is a world of one.
Result<std::unique_ptr<Communicator>> world(Options options = {});
// A communicator of this process alone (MPI's COMM_SELF): shared memory of its own, whatever the job; no other
// process takes part in making it.
Result<std::unique_ptr<Communicator>> self(Options options = {});
// Whether an MPI launcher (mpirun, srun with PMI/PMIx) started this process.
bool launched_by_mpi();

}  // namespace tt::comm
