// comm/nccl: the Communicator between GPUs, over NCCL. Built when CMake finds CUDA and NCCL (TIERTRAIN_WITH_NCCL).
//
// Note [nccl backend]
// ~~~~~~~~~~~~~~~~~~~
// The host communicator of comm::world() (shm between the processes of a node, or MPI under mpirun) bootstraps the
// NCCL communicator and stays inside it:
// - rank 0 makes the NCCL unique id and broadcasts it over the host communicator; every rank then joins
//   (ncclCommInitRank) on its device: TIERTRAIN_DEVICE if set, else LOCAL_RANK (or Open MPI's local rank) modulo
//   the devices it sees.
// - Before each call is queued, the ranks allgather its description (sequence number, kind, count, dtype, op, root,
//   and a misuse code: a bad root, in place at a non-root, a buffer that is not memory of the rank's GPU) over the
//   host communicator. A disagreement or a misuse is an error on every rank before anything reaches NCCL (whose own
//   answer to mismatched calls is a hang or a wrong result), and a rank that never arrives is named by the host
//   communicator's deadline. This costs one host allgather (about a microsecond over shm) per call.
// - Calls go on a stream: the blocking API queues on the communicator's own stream and polls an event against the
//   deadline (TIERTRAIN_COMM_TIMEOUT), and NCCL's asynchronous errors with it; past the deadline the NCCL
//   communicator is aborted (ncclCommAbort) and the communicator is unusable. enqueue() queues on the caller's
//   stream and returns (stream-ordered); synchronize() is the deadline-bound wait.
// - NCCL has broadcast, reduce, allreduce, allgather and reduce_scatter; gather, scatter and alltoall are grouped
//   point-to-point calls, with each rank's own piece copied on the stream. In-place alltoall first copies its buffer
//   to a stream-ordered temporary (cudaMallocAsync).
// - Reductions are NCCL's: the order of the combines is NCCL's algorithm's, and bf16/f16 round at each combine,
//   unlike shm (rank order, one rounding).
// - split (Note [split] in comm/comm.h): the host communicator splits first (colors and keys exchanged there, a
//   rank that does not come named by its deadline), then NCCL's communicator (ncclCommSplit, collective over this
//   one, bounded by the deadline as the init is); the new communicator is the pair, on the same GPU.
//
// Note [nccl point-to-point]
// Messages go through the host communicator's transport (its matching of sources and tags, its order, deadlines and
// dead peers), a buffer in GPU memory (device or managed) staged through host memory: copied to the host when the
// send is posted, to the GPU once the receive is done (cudaMemcpy on the legacy stream: work of the caller's on other
// streams must be finished first, as with a CUDA-aware MPI). NCCL's ncclSend/ncclRecv would move the bytes GPU to GPU
// but match neither tags nor any source, and a pair that does not match hangs: the API's MPI semantics come first;
// bulk GPU-to-GPU traffic belongs to the collectives.
#include "comm/nccl.h"

#include "core/env.h"
#include "core/device_env.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "comm/collective.h"
#include "comm/p2p.h"

namespace tt::comm {
namespace {

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(Op op) {
  switch (op) {
    case Op::kSum: return ncclSum;
    case Op::kProd: return ncclProd;
    case Op::kMin: return ncclMin;
    case Op::kMax: return ncclMax;
    case Op::kAvg: return ncclAvg;
    default: break;  // Note [bitwise and logical reductions]: refused before (NcclCommunicator's reductions)
  }
  return ncclSum;
}

// Makes `device` current for a scope and restores the caller's device after it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != device) cudaSetDevice(device);
    set_ = device;
  }
  ~DeviceGuard() {
    if (prev_ >= 0 && prev_ != set_) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1, set_ = -1;
};

// Note [nccl point-to-point]: the host transport, GPU buffers staged through host memory.
class StagedP2p final : public P2pTransport {
 public:
  StagedP2p(std::unique_ptr<P2pTransport> inner, int device) : inner_(std::move(inner)), device_(device) {}

  bool progress(std::deque<P2pOp*>& ops) override {
    bool moved = false;
    std::deque<P2pOp*> inner_ops;
    for (P2pOp* op : ops) {
      auto it = shadows_.find(op);
      if (it == shadows_.end()) {
        auto sh = std::make_unique<Shadow>();
        if (Status st = stage(*op, *sh); !st.is_ok()) {
          op->finish(st);
          moved = true;
          continue;
        }
        it = shadows_.emplace(op, std::move(sh)).first;
      }
      inner_ops.push_back(&it->second->op);
    }
    moved |= inner_->progress(inner_ops);
    for (P2pOp* op : ops) {
      auto it = shadows_.find(op);
      if (it == shadows_.end() || !it->second->op.done) continue;
      Shadow& sh = *it->second;
      Status st = sh.op.status;
      if (st.is_ok() && op->kind == P2pOp::kRecv && sh.staged && sh.info.bytes > 0) {
        DeviceGuard on(device_);
        if (cudaMemcpy(op->recv, sh.host.data(), sh.info.bytes, cudaMemcpyHostToDevice) != cudaSuccess)
          st = make_status(StatusCode::kInternal, "recv: copying the message to GPU memory: %s",
                           cudaGetErrorString(cudaGetLastError()));
      }
      if (op->info != nullptr) *op->info = sh.info;
      op->finish(std::move(st));
      shadows_.erase(it);
      moved = true;
    }
    // Operations the engine no longer holds (failed, or an iprobe taken back) lose their shadows.
    if (shadows_.size() > ops.size()) {
      for (auto it = shadows_.begin(); it != shadows_.end();)
        it = std::find(ops.begin(), ops.end(), it->first) == ops.end() ? shadows_.erase(it) : std::next(it);
    }
    return moved;
  }
  std::string peer_trouble(int peer) override { return inner_->peer_trouble(peer); }
  int size() const override { return inner_->size(); }

 private:
  struct Shadow {
    P2pOp op;
    MessageInfo info;
    std::vector<char> host;
    bool staged = false;
  };
  // Memory the host cannot read directly as it is: device memory (managed memory too, kept simple: staged alike).
  static bool on_gpu(const void* p) {
    if (p == nullptr) return false;
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }
  Status stage(const P2pOp& op, Shadow& sh) {
    sh.op.kind = op.kind;
    sh.op.peer = op.peer;
    sh.op.tag = op.tag;
    sh.op.type = op.type;
    sh.op.bytes = op.bytes;
    sh.op.grow = op.grow;  // a receive of any length goes to a host vector
    sh.op.info = &sh.info;
    sh.op.start = op.start;
    sh.op.send = op.send;
    sh.op.recv = op.recv;
    if (op.kind == P2pOp::kSend && op.bytes > 0 && on_gpu(op.send)) {
      sh.staged = true;
      sh.host.resize(op.bytes);
      DeviceGuard on(device_);
      if (cudaMemcpy(sh.host.data(), op.send, op.bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        return make_status(StatusCode::kInternal, "send: copying the message from GPU memory: %s",
                           cudaGetErrorString(cudaGetLastError()));
      sh.op.send = sh.host.data();
    } else if (op.kind == P2pOp::kRecv && op.grow == nullptr && op.bytes > 0 && on_gpu(op.recv)) {
      sh.staged = true;
      sh.host.resize(op.bytes);
      sh.op.recv = sh.host.data();
    }
    return Status::ok();
  }

  std::unique_ptr<P2pTransport> inner_;
  int device_;
  std::unordered_map<P2pOp*, std::unique_ptr<Shadow>> shadows_;
};

class NcclComm final : public NcclCommunicator {
 public:
  NcclComm(std::unique_ptr<Communicator> host, Options o) : host_(std::move(host)), opt_(o) {}
  ~NcclComm() override {
    stop_progress();
    if (device_ >= 0) cudaSetDevice(device_);
    if (comm_ != nullptr) {
      if (!broken_.is_set()) {
        cudaStreamSynchronize(stream_);
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Joins the NCCL communicator; on an error, the peers are told (abandon) instead of waiting for this rank.
  Status init() {
    Status s = join();
    if (!s.is_ok()) host_->abandon(s.message());
    return s;
  }

  Status join() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      cudaGetLastError();
      return make_status(StatusCode::kFailedPrecondition, "nccl backend (rank %d of %d): this process sees no CUDA device",
                         rank(), size());
    }
    // core/device_env.h: the backend's device too. Without a launcher's local rank, this rank's (one node).
    TT_ASSIGN_OR_RETURN(device_, process_device(devices));
    if (launcher_local_rank() < 0 && !env::is_set("TIERTRAIN_DEVICE")) device_ = rank() % devices;
    TT_TRY(cuda(cudaSetDevice(device_), "cudaSetDevice"));
    TT_TRY(make_stream());
    ncclUniqueId id{};
    static_assert(sizeof(id) % sizeof(int64_t) == 0);
    if (rank() == 0) {
      if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
        return make_status(StatusCode::kInternal, "nccl backend: ncclGetUniqueId: %s", ncclGetErrorString(r));
      }
    }
    TT_TRY(host_->broadcast(kInPlace, &id, sizeof(id) / sizeof(int64_t), DType::kI64, 0));
    TT_ASSIGN_OR_RETURN(comm_, bounded_nccl("ncclCommInitRank", [id, n = size(), me = rank()](ncclComm_t* c) {
                          // Tests: this rank joins late (comm_test's nccl_init_late).
                          if (const char* d = env::get("TIERTRAIN_TEST_NCCL_INIT_DELAY_S"); d != nullptr && *d != '\0')
                            std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(d)));
                          return ncclCommInitRank(c, n, id, me);
                        }));
    // Every rank has joined before any uses it (a rank whose init failed is named here, not in a later hang).
    TT_TRY(host_->barrier());
    set_placement("bootstrap");
    return Status::ok();
  }

  // A communicator of a split: its NCCL communicator made by ncclCommSplit of `parent`'s, on the same GPU.
  Status adopt(int device, ncclComm_t comm, const NcclComm* parent) {
    device_ = device;
    comm_ = comm;
    DeviceGuard on(device_);
    TT_TRY(make_stream());
    set_placement(str_format("split of a communicator of %d ranks, bootstrap", parent->size()).c_str());
    return Status::ok();
  }

  // A blocking stream: the blocking calls come after the work the caller queued on the legacy default stream
  // (cudaMemcpy from pageable memory may return before its copy lands; it is ordered before them).
  Status make_stream() {
    TT_TRY(cuda(cudaStreamCreate(&stream_), "cudaStreamCreate"));
    TT_TRY(cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate"));
    TT_TRY(cuda(cudaMalloc(&scratch_, 256), "cudaMalloc"));
    return Status::ok();
  }

  void set_placement(const char* how) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device_);
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof(bus), device_);
    int version = 0;
    ncclGetVersion(&version);
    placement_ = str_format("GPU %d (%s, %s), NCCL %d.%d.%d, %s %s", device_, prop.name, bus, version / 10000,
                            version / 100 % 100, version % 100, how, host_->backend());
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const char* backend() const override { return "nccl"; }
  // Note [nccl backend]: the host communicator's split, then NCCL's; behind the calls in flight.
  Result<std::unique_ptr<Communicator>> split(int color, int key) override {
    std::unique_ptr<Communicator> out;
    TT_TRY(run([&]() -> Status {
      TT_RETURN_IF(broken_.is_set(), kFailedPrecondition, "split (nccl, rank %d): unusable after an earlier error: %s",
                   rank(), broken_.why().c_str());
      TT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> host, host_->split(color, key));
      {
        DeviceGuard on(device_);
        TT_TRY(cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize before the split"));
      }
      TT_ASSIGN_OR_RETURN(ncclComm_t nc, bounded_nccl("ncclCommSplit", [comm = comm_, color, key](ncclComm_t* c) {
                            return ncclCommSplit(comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, c, nullptr);
                          }));
      if (color < 0) return Status::ok();  // this rank joins no group
      auto c = std::make_unique<NcclComm>(std::move(host), opt_);
      TT_TRY(c->adopt(device_, nc, this));
      out = std::move(c);
      return Status::ok();
    }));
    return out;
  }
  int64_t sequence() const override { return seq_.load(std::memory_order_relaxed); }
  std::chrono::milliseconds timeout() const override { return opt_.timeout; }
  std::string placement() const override { return placement_; }
  int device() const override { return device_; }
  void abandon(const std::string& why) override {
    broken_.set_first("abandoned: " + why);
    host_->abandon(why);
  }

  Result<void*> alloc_buffer(size_t bytes) override {
    void* p = nullptr;
    DeviceGuard on(device_);
    TT_TRY(cuda(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc"));
    return p;
  }
  void free_buffer(void* p) override {
    DeviceGuard on(device_);
    cudaFree(p);
  }
  Status copy_in(void* buffer, const void* host, size_t bytes) override {
    DeviceGuard on(device_);
    return cuda(cudaMemcpy(buffer, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  }
  Status copy_out(void* host, const void* buffer, size_t bytes) override {
    DeviceGuard on(device_);
    return cuda(cudaMemcpy(host, buffer, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
  }

  // Note [nccl point-to-point].
  std::unique_ptr<P2pTransport> make_p2p_transport() override {
    std::unique_ptr<P2pTransport> inner = host_->layered_p2p_transport();
    if (inner == nullptr) return nullptr;
    return std::make_unique<StagedP2p>(std::move(inner), device_);
  }

  // Through run(): behind the non-blocking calls in flight, in call order, one thread at a time.
  Status enqueue(void* stream, const Call& call) override {
    return run([=, this] { return queue(static_cast<cudaStream_t>(stream), in_place_form(call)); });
  }
  Status synchronize(void* stream) override { return run([=, this] { return wait(static_cast<cudaStream_t>(stream)); }); }

 protected:
  Status do_barrier() override { return run_blocking({kBarrier, nullptr, nullptr, 0, DType::kI32, Op::kSum, -1}); }
  Status do_broadcast(const void* s, void* r, size_t n, DType d, int root) override {
    return run_blocking({kBroadcast, s, r, n, d, Op::kSum, root});
  }
  Status do_reduce(const void* s, void* r, size_t n, DType d, Op op, int root) override {
    return run_blocking({kReduce, s, r, n, d, op, root});
  }
  Status do_allreduce(const void* s, void* r, size_t n, DType d, Op op) override {
    return run_blocking({kAllreduce, s, r, n, d, op, -1});
  }
  Status do_gather(const void* s, void* r, size_t n, DType d, int root) override {
    return run_blocking({kGather, s, r, n, d, Op::kSum, root});
  }
  Status do_scatter(const void* s, void* r, size_t n, DType d, int root) override {
    return run_blocking({kScatter, s, r, n, d, Op::kSum, root});
  }
  Status do_allgather(const void* s, void* r, size_t n, DType d) override {
    return run_blocking({kAllgather, s, r, n, d, Op::kSum, -1});
  }
  Status do_reduce_scatter(const void* s, void* r, size_t n, DType d, Op op) override {
    return run_blocking({kReduceScatter, s, r, n, d, op, -1});
  }
  Status do_alltoall(const void* s, void* r, size_t n, DType d) override {
    return run_blocking({kAlltoall, s, r, n, d, Op::kSum, -1});
  }

 private:
  Status run_blocking(const Call& c) {
    TT_TRY(queue(stream_, c));
    return wait(stream_);
  }

  // The aliased in-place forms as kInPlace (the blocking calls get them from the base class).
  Call in_place_form(Call c) const {
    const Args a = comm::in_place_form(c.kind, rank(), c.root, c.count, c.dtype, c.send, c.recv);
    c.send = a.s;
    c.recv = a.r;
    return c;
  }

  Status cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::ok();
    cudaGetLastError();
    return make_status(StatusCode::kInternal, "nccl backend (rank %d of %d, device %d): %s: %s", rank(), size(),
                       device_, what, cudaGetErrorString(e));
  }

  // Whether p is memory this rank's GPU can give NCCL: device memory of device_, or managed memory.
  bool on_device(const void* p) const {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return (a.type == cudaMemoryTypeDevice && a.device == device_) || a.type == cudaMemoryTypeManaged;
  }

  // The buffers this rank reads or writes in `c`, each checked.
  bool buffers_on_device(const Call& c) const {
    if (c.kind == kBarrier || c.count == 0) return true;
    const bool root = rank() == c.root;
    const bool reads_send = c.send != kInPlace &&
                            ((c.kind != kBroadcast && c.kind != kScatter) || root);
    const bool writes_recv = (c.kind != kReduce && c.kind != kGather) || root;
    return (!reads_send || on_device(c.send)) && (!writes_recv || on_device(c.recv));
  }

  Status queue(cudaStream_t s, const Call& c) {
    const bool reduces = c.kind == kReduce || c.kind == kAllreduce || c.kind == kReduceScatter;
    TT_RETURN_IF(reduces && op_on_integers_only(c.op), kUnimplemented,
                 "reduction %s over NCCL: NCCL has no bitwise or logical reduction (Note [bitwise and logical "
                 "reductions] in comm/comm.h); use the shm or mpi backend for it", op_name(c.op));
    TT_RETURN_IF(broken_.is_set(), kFailedPrecondition,
                 "nccl communicator (rank %d): unusable after an earlier error: %s",
                 rank(), broken_.why().c_str());
    DeviceGuard on(device_);
    const int64_t seq = ++seq_;
    last_ = c.kind;
    const bool in_place_not_root = c.send == kInPlace && rank() != c.root && (c.kind == kReduce || c.kind == kGather);
    int64_t misuse = misuse_of(c.kind, c.root, size(), in_place_not_root);
    if (misuse == kNoMisuse && !buffers_on_device(c)) misuse = kNotDeviceMemory;
    int64_t mine[kDescriptionWords];
    describe(mine, seq, c.kind, c.count, c.dtype, c.op, c.root, misuse);
    std::vector<int64_t> all(static_cast<size_t>(size()) * kDescriptionWords);
    if (Status st = host_->allgather(mine, all.data(), kDescriptionWords, DType::kI64); !st.is_ok())
      return fail(make_status(st.code(), "%s #%lld (nccl, rank %d of %d): while the ranks compared their arguments: %s",
                              kind_name(c.kind), static_cast<long long>(seq), rank(), size(), st.message().c_str()));
    if (Status st = compare_descriptions("nccl", all.data(), size(), rank(), mine); !st.is_ok()) return fail(st);
    if (c.count == 0 && c.kind != kBarrier) return Status::ok();
    ncclResult_t r = size() == 1 ? alone(s, c) : launch(s, c);
    if (r != ncclSuccess)
      return fail(make_status(StatusCode::kInternal, "%s #%lld (nccl, rank %d of %d): NCCL: %s %s", kind_name(c.kind),
                              static_cast<long long>(seq), rank(), size(), ncclGetErrorString(r),
                              ncclGetLastError(comm_)));
    return Status::ok();
  }

  // Note [nccl init deadline]
  // ncclCommInitRank waits inside NCCL's own bootstrap for every rank, with no deadline of ours: a rank that dies or
  // stops after the id exchange (which is deadline-bound, over the host communicator) would leave the others there
  // for ever. So it runs on a helper thread, with this rank's device current, and this thread waits for it until
  // TIERTRAIN_COMM_TIMEOUT. Past it the call fails, and init() gives up on the host communicator, so that the peers
  // waiting for this rank in the barrier after their own init fail at once and name it; the helper is left behind (NCCL
  // cannot stop a blocking init), holding only the state it shares with this call, and ends with the process.
  // Note [nccl init deadline]: an NCCL call that makes a communicator (init, split), on a thread of its own so that
  // a rank that never joins is a deadline error here, not a hang.
  Result<ncclComm_t> bounded_nccl(const char* what, std::function<ncclResult_t(ncclComm_t*)> make) {
    struct Shared {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      ncclResult_t result = ncclSuccess;
      ncclComm_t comm = nullptr;
      std::string error;
    };
    auto shared = std::make_shared<Shared>();
    std::thread([shared, make = std::move(make), device = device_] {
      ncclComm_t c = nullptr;
      ncclResult_t r = cudaSetDevice(device) == cudaSuccess ? make(&c) : ncclUnhandledCudaError;
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->result = r;
      shared->comm = c;
      if (r != ncclSuccess) shared->error = std::string(ncclGetErrorString(r)) + " " + ncclGetLastError(nullptr);
      shared->done = true;
      shared->cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lock(shared->mu);
    if (!shared->cv.wait_for(lock, opt_.timeout, [&] { return shared->done; })) {
      return make_status(StatusCode::kDeadlineExceeded,
                         "nccl backend (rank %d of %d, device %d): %s did not finish within %.1f s "
                         "(TIERTRAIN_COMM_TIMEOUT): a rank stopped or died after the id exchange, or NCCL's bootstrap "
                         "cannot connect the ranks (NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME)",
                         rank(), size(), device_, what, opt_.timeout.count() / 1000.0);
    }
    if (shared->result != ncclSuccess)
      return make_status(StatusCode::kInternal, "nccl backend (rank %d of %d, device %d): %s: %s", rank(), size(),
                         device_, what, shared->error.c_str());
    return shared->comm;
  }

  // A world of one: every collective is the identity (a copy out of place); NCCL is not needed. (NCCL 2.28's own
  // one-rank path left the last 5 of 40005 elements unwritten in out-of-place allreduce and reduce, with managed
  // buffers; which dtype and op was not isolated.)
  ncclResult_t alone(cudaStream_t s, const Call& c) {
    if (c.kind == kBarrier || c.send == kInPlace || c.send == c.recv) return ncclSuccess;
    return cudaMemcpyAsync(c.recv, c.send, c.count * dtype_size(c.dtype), cudaMemcpyDeviceToDevice, s) == cudaSuccess
               ? ncclSuccess
               : ncclUnhandledCudaError;
  }

  ncclResult_t launch(cudaStream_t s, const Call& c) {
    const size_t es = dtype_size(c.dtype), n = c.count, piece = n * es;
    const int me = rank(), ranks = size();
    const ncclDataType_t t = nccl_type(c.dtype);
    char* recv = static_cast<char*>(c.recv);
    const char* send = static_cast<const char*>(c.send);
    const bool in_place = c.send == kInPlace;
    auto at = [&](const char* base, int q) { return base + static_cast<size_t>(q) * piece; };
    auto copy = [&](void* dst, const void* src) {
      return cudaMemcpyAsync(dst, src, piece, cudaMemcpyDeviceToDevice, s) == cudaSuccess ? ncclSuccess
                                                                                             : ncclUnhandledCudaError;
    };
    switch (c.kind) {
      case kBarrier: return ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, s);
      case kBroadcast:
        return ncclBroadcast(me == c.root && !in_place ? c.send : c.recv, c.recv, n, t, c.root, comm_, s);
      case kReduce: {
        const void* src = in_place ? c.recv : c.send;
        return ncclReduce(src, me == c.root ? c.recv : const_cast<void*>(src), n, t, nccl_op(c.op), c.root, comm_, s);
      }
      case kAllreduce: return ncclAllReduce(in_place ? c.recv : c.send, c.recv, n, t, nccl_op(c.op), comm_, s);
      case kAllgather: return ncclAllGather(in_place ? at(recv, me) : c.send, c.recv, n, t, comm_, s);
      case kReduceScatter:
        if (in_place) return ncclReduceScatter(c.recv, recv + static_cast<size_t>(me) * piece, n, t, nccl_op(c.op), comm_, s);
        return ncclReduceScatter(c.send, c.recv, n, t, nccl_op(c.op), comm_, s);
      case kGather: {
        if (me != c.root) return ncclSend(c.send, n, t, c.root, comm_, s);
        if (!in_place) {
          if (ncclResult_t r = copy(recv + static_cast<size_t>(me) * piece, c.send); r != ncclSuccess) return r;
        }
        ncclResult_t r = ncclGroupStart();
        for (int q = 0; q < ranks && r == ncclSuccess; ++q)
          if (q != me) r = ncclRecv(recv + static_cast<size_t>(q) * piece, n, t, q, comm_, s);
        const ncclResult_t end = ncclGroupEnd();
        return r != ncclSuccess ? r : end;
      }
      case kScatter: {
        if (me != c.root) return ncclRecv(c.recv, n, t, c.root, comm_, s);
        const char* all = in_place ? recv : send;
        if (!in_place) {
          if (ncclResult_t r = copy(c.recv, at(all, me)); r != ncclSuccess) return r;
        }
        ncclResult_t r = ncclGroupStart();
        for (int q = 0; q < ranks && r == ncclSuccess; ++q)
          if (q != me) r = ncclSend(at(all, q), n, t, q, comm_, s);
        const ncclResult_t end = ncclGroupEnd();
        return r != ncclSuccess ? r : end;
      }
      case kAlltoall: {
        void* tmp = nullptr;
        const char* src = send;
        if (in_place) {
          if (cudaMallocAsync(&tmp, piece * static_cast<size_t>(ranks), s) != cudaSuccess) return ncclUnhandledCudaError;
          if (cudaMemcpyAsync(tmp, recv, piece * static_cast<size_t>(ranks), cudaMemcpyDeviceToDevice, s) !=
              cudaSuccess) {
            cudaFreeAsync(tmp, s);
            return ncclUnhandledCudaError;
          }
          src = static_cast<const char*>(tmp);
        }
        ncclResult_t r = copy(recv + static_cast<size_t>(me) * piece, at(src, me));
        if (r == ncclSuccess) {
          r = ncclGroupStart();
          for (int q = 0; q < ranks && r == ncclSuccess; ++q) {
            if (q == me) continue;
            r = ncclSend(at(src, q), n, t, q, comm_, s);
            if (r == ncclSuccess) r = ncclRecv(recv + static_cast<size_t>(q) * piece, n, t, q, comm_, s);
          }
          const ncclResult_t end = ncclGroupEnd();
          if (r == ncclSuccess) r = end;
        }
        if (tmp != nullptr) cudaFreeAsync(tmp, s);
        return r;
      }
    }
    return ncclInvalidArgument;
  }

  // Everything queued on s done, within the deadline; NCCL's asynchronous errors reported.
  Status wait(cudaStream_t s) {
    TT_RETURN_IF(broken_.is_set(), kFailedPrecondition,
                 "nccl communicator (rank %d): unusable after an earlier error: %s",
                 rank(), broken_.why().c_str());
    DeviceGuard on(device_);
    TT_TRY(cuda(cudaEventRecord(done_, s), "cudaEventRecord"));
    const auto start = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point gave_up_seen{};
    for (uint64_t spin = 0;; ++spin) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) return Status::ok();
      if (e != cudaErrorNotReady) return fail(cuda(e, "waiting for the collective"));
      if (spin % 1024 == 1023) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm_, &async);
        if (async != ncclSuccess && async != ncclInProgress)
          return fail(make_status(StatusCode::kInternal, "%s #%lld (nccl, rank %d of %d): NCCL: %s %s",
                                  kind_name(last_), static_cast<long long>(seq_.load()), rank(), size(),
                                  ncclGetErrorString(async), ncclGetLastError(comm_)));
        // A peer that gave up may have run its part of this collective first (it gave up on a later call): 100 ms
        // for ours to finish before the communicator is aborted.
        if (host_->peer_gave_up() && gave_up_seen == std::chrono::steady_clock::time_point{})
          gave_up_seen = std::chrono::steady_clock::now();
        if (gave_up_seen != std::chrono::steady_clock::time_point{} &&
            std::chrono::steady_clock::now() - gave_up_seen > std::chrono::milliseconds(100)) {
          ncclCommAbort(comm_);  // the peer will not run its part: stop ours
          comm_ = nullptr;
          return fail(make_status(StatusCode::kAborted,
                                  "%s #%lld (nccl, rank %d of %d): a peer gave up on an error of its own (see its "
                                  "message); the NCCL communicator is aborted",
                                  kind_name(last_), static_cast<long long>(seq_.load()), rank(), size()));
        }
        if (std::chrono::steady_clock::now() - start > opt_.timeout) {
          ncclCommAbort(comm_);  // its kernels stop; the communicator cannot be used again
          comm_ = nullptr;
          return fail(make_status(StatusCode::kDeadlineExceeded,
                                  "%s #%lld (nccl, rank %d of %d): not complete on GPU %d within %.1f s "
                                  "(TIERTRAIN_COMM_TIMEOUT): a peer or a GPU is stuck (NCCL does not say which); the "
                                  "NCCL communicator is aborted",
                                  kind_name(last_), static_cast<long long>(seq_.load()), rank(), size(), device_,
                                  opt_.timeout.count() / 1000.0));
        }
      }
      if (spin > 20000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  Status fail(Status s) {
    broken_.set_first(s.message());
    host_->abandon(s.message());
    return s;
  }

  std::unique_ptr<Communicator> host_;
  Options opt_;
  int device_ = -1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* scratch_ = nullptr;
  std::atomic<int64_t> seq_{0};
  Kind last_ = kBarrier;
  Broken broken_;  // (read and written from several threads)
  std::string placement_;
};

}  // namespace

Result<std::unique_ptr<NcclCommunicator>> create_nccl(std::unique_ptr<Communicator> host, const Options& options) {
  auto c = std::make_unique<NcclComm>(std::move(host), options);
  TT_TRY(c->init());
  return std::unique_ptr<NcclCommunicator>(std::move(c));
}

}  // namespace tt::comm
