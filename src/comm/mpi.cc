// comm/mpi: the Communicator over MPI (Open MPI from Debian's packages), for host buffers across nodes and for jobs
// started by mpirun. Built when CMake finds MPI (TIERTRAIN_WITH_MPI).
//
// Every collective first exchanges its description (sequence number, kind, count, dtype, op, root, misuse) with an
// allgather, so that ranks that disagree get an error naming them and the differing fields on every rank, as with
// shm, instead of MPI's undefined behaviour. Every operation runs as a non-blocking MPI call polled against the
// deadline (MPI_Test); MPI cannot say which ranks are late, so a timeout names the operation and its sequence number.
// bf16 and f16 reductions use MPI operations of ours (each pairwise combine in f32, rounded once per combine, unlike
// shm's single rounding); avg is a sum divided by the ranks afterwards.
#include "comm/mpi.h"

#include <mpi.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <thread>
#include <vector>

#include "comm/collective.h"
#include "comm/p2p.h"
#include "comm/reduce.h"
#include "core/bf16.h"

namespace tt::comm {
namespace {

template <typename Load, typename Store>
void combine16(const void* in, void* inout, int len, Op op, Load load, Store store) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < len; ++i) {
    const float x = load(a[i]), y = load(b[i]);
    float r = x + y;
    if (op == Op::kProd) r = x * y;
    if (op == Op::kMin) r = x < y ? x : y;
    if (op == Op::kMax) r = x > y ? x : y;
    b[i] = store(r);
  }
}

#define TT_MPI_OP16(NAME, LOAD, STORE, OP)                                                    \
  void NAME(void* in, void* inout, int* len, MPI_Datatype*) {                                 \
    combine16(in, inout, *len, OP, [](uint16_t h) { return LOAD(h); }, [](float f) { return STORE(f); }); \
  }
TT_MPI_OP16(bf16_sum, bf16_to_float, float_to_bf16, Op::kSum)
TT_MPI_OP16(bf16_prod, bf16_to_float, float_to_bf16, Op::kProd)
TT_MPI_OP16(bf16_min, bf16_to_float, float_to_bf16, Op::kMin)
TT_MPI_OP16(bf16_max, bf16_to_float, float_to_bf16, Op::kMax)
TT_MPI_OP16(f16_sum, f16_to_float, float_to_f16, Op::kSum)
TT_MPI_OP16(f16_prod, f16_to_float, float_to_f16, Op::kProd)
TT_MPI_OP16(f16_min, f16_to_float, float_to_f16, Op::kMin)
TT_MPI_OP16(f16_max, f16_to_float, float_to_f16, Op::kMax)
#undef TT_MPI_OP16

// Set when a communicator of this process broke (a deadline passed, MPI reported an error, or it was abandoned):
// MPI_Finalize is collective and would wait forever for the rank that never came, so the process ends the job
// with MPI_Abort at exit instead (issue 25: with a rank stopped, the others reported the deadline and then hung in
// MPI_Finalize).
std::atomic<bool> g_mpi_broken{false};

// Note [mpi calls]
// MPI is initialised MPI_THREAD_SERIALIZED: one thread at a time in MPI. Three threads may want it: the caller, the
// progress thread of the non-blocking collectives, and point-to-point's thread (comm/p2p.h). So every MPI call of
// this file is made under g_mpi_mu, taken per call (a wait polls MPI_Test under it, and lets go between polls), so
// that a collective's wait never keeps point-to-point from starting a receive its peer's send waits for.
std::mutex g_mpi_mu;
struct MpiLock {
  std::lock_guard<std::mutex> hold{g_mpi_mu};
};

// MPI initialised once per process, serialized (one thread at a time: the caller, or the progress thread of the
// non-blocking calls), and finalised at exit, after every communicator is gone; or, after a broken collective,
// the job aborted.
Status ensure_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return Status::ok();
  int provided = 0;
  TT_RETURN_IF(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS, kInternal,
               "MPI_Init_thread failed");
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (g_mpi_broken.load()) {
      std::fflush(nullptr);
      std::fprintf(stderr, "tiertrain: a collective failed: aborting the MPI job (MPI_Finalize would wait for the "
                           "rank that did not come)\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
  });
  TT_RETURN_IF(provided < MPI_THREAD_SERIALIZED, kFailedPrecondition,
               "this MPI gives thread level %d; tiertrain needs MPI_THREAD_SERIALIZED (%d)", provided,
               MPI_THREAD_SERIALIZED);
  return Status::ok();
}

// Point-to-point over MPI's own sends and receives (Note [point-to-point] in comm/p2p.h), of MPI_BYTE: MPI matches
// them. A receive probes first (MPI_Improbe) and then takes that very message (MPI_Imrecv), so that its length is
// known before it lands (a longer one is refused and dropped, as shm does, instead of MPI_ERR_TRUNCATE); until it
// has matched, the receives posted after it wait, so that they cannot take its message. MPI's messages carry no
// type: only the length is checked.
class MpiP2p final : public P2pTransport {
 public:
  MpiP2p(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {
    MpiLock lock;
    int* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag);
    tag_ub_ = flag && ub != nullptr ? *ub : 32767;
  }
  ~MpiP2p() override {
    if (g_mpi_broken.load()) return;  // left to MPI_Abort
    MpiLock lock;
    for (auto& [op, r] : reqs_) {
      if (op->kind != P2pOp::kSend) MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
    // Buffered sends not yet received: MPI still reads their copies, which are let go (kept) for good.
    for (Buffered& b : buffered_) {
      MPI_Request_free(&b.r);
      static std::vector<std::unique_ptr<std::vector<char>>>* kept = new std::vector<std::unique_ptr<std::vector<char>>>;
      kept->push_back(std::move(b.data));
    }
  }
  int size() const override { return size_; }
  std::string peer_trouble(int) override { return ""; }  // MPI does not say

  bool progress(std::deque<P2pOp*>& ops) override {
    MpiLock lock;
    bool moved = false, receives_wait = false;
    while (!buffered_.empty()) {  // the buffered sends, done in order mostly: freed from the front
      int done = 0;
      MPI_Test(&buffered_.front().r, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      buffered_.pop_front();
    }
    for (P2pOp* op : ops) {
      if (op->done) continue;
      if (!op->started) {
        if (op->kind != P2pOp::kSend && receives_wait) continue;
        if (!start(*op, &moved)) {
          if (op->kind != P2pOp::kSend) receives_wait = true;
          continue;
        }
      }
      if (op->done) continue;
      auto it = reqs_.find(op);
      int done = 0;
      MPI_Status st;
      const int rc = MPI_Test(&it->second, &done, &st);
      if (rc != MPI_SUCCESS || done) {
        reqs_.erase(it);
        moved = true;
        if (rc != MPI_SUCCESS) {
          op->finish(make_status(StatusCode::kInternal, "%s: MPI reported error %d", op->describe(rank_).c_str(), rc));
        } else {
          if (op->kind == P2pOp::kRecv) info(*op, st);
          op->finish();
        }
      }
    }
    return moved;
  }

 private:
  void info(P2pOp& op, const MPI_Status& st) {
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    if (op.info != nullptr) *op.info = MessageInfo{st.MPI_SOURCE, st.MPI_TAG, static_cast<size_t>(count)};
  }
  // Starts op's MPI call; false if it cannot start yet (a receive of any length before its message is here). An
  // argument MPI cannot take finishes op with an error.
  bool start(P2pOp& op, bool* moved) {
    if (op.tag != kAnyTag && op.tag > tag_ub_) {
      op.finish(make_status(StatusCode::kInvalidArgument, "%s: this MPI's tags go up to %d (MPI_TAG_UB)",
                            op.describe(rank_).c_str(), tag_ub_));
      return true;
    }
    if (op.bytes > static_cast<size_t>(std::numeric_limits<int>::max())) {
      op.finish(make_status(StatusCode::kInvalidArgument, "%s: the mpi backend moves at most 2 GiB - 1 a message",
                            op.describe(rank_).c_str()));
      return true;
    }
    const int peer = op.peer == kAnySource ? MPI_ANY_SOURCE : op.peer;
    const int tag = op.tag == kAnyTag ? MPI_ANY_TAG : op.tag;
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    if (op.kind == P2pOp::kSend && op.bytes <= kEagerBytes) {
      // Buffered, as shm's ring buffers it: the send is done now, its copy goes out behind it.
      auto copy = std::make_unique<std::vector<char>>(static_cast<const char*>(op.send),
                                                      static_cast<const char*>(op.send) + op.bytes);
      rc = MPI_Isend(copy->data(), static_cast<int>(op.bytes), MPI_BYTE, peer, tag, comm_, &r);
      *moved = true;
      op.started = true;
      if (rc != MPI_SUCCESS) {
        op.finish(make_status(StatusCode::kInternal, "%s: MPI reported error %d", op.describe(rank_).c_str(), rc));
        return true;
      }
      buffered_.push_back({r, std::move(copy)});
      op.finish();
      return true;
    }
    if (op.kind == P2pOp::kSend) {
      rc = MPI_Isend(op.send, static_cast<int>(op.bytes), MPI_BYTE, peer, tag, comm_, &r);
    } else if (op.kind == P2pOp::kProbe) {
      int flag = 0;
      MPI_Status st;
      rc = MPI_Iprobe(peer, tag, comm_, &flag, &st);
      if (rc == MPI_SUCCESS && !flag) return false;
      if (rc == MPI_SUCCESS) {
        info(op, st);
        op.finish();
        *moved = true;
        return true;
      }
    } else {
      // Probed first, then that very message taken (MPI_Imrecv): its length is known before any byte lands, so a
      // message longer than the buffer is refused here rather than truncated by MPI.
      int flag = 0;
      MPI_Message msg;
      MPI_Status st;
      rc = MPI_Improbe(peer, tag, comm_, &flag, &msg, &st);
      if (rc == MPI_SUCCESS && !flag) return false;
      if (rc == MPI_SUCCESS) {
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if (op.grow == nullptr && static_cast<size_t>(count) > op.bytes) {
          auto sink = std::make_unique<std::vector<char>>(static_cast<size_t>(count));
          MPI_Request drop;
          MPI_Imrecv(sink->data(), count, MPI_BYTE, &msg, &drop);
          buffered_.push_back({drop, std::move(sink)});  // dropped once it is in
          *moved = true;
          op.started = true;
          op.finish(make_status(StatusCode::kInvalidArgument,
                                "%s: the message from rank %d (tag %d) is %d bytes, longer than the receive buffer's "
                                "%zu (it was dropped)",
                                op.describe(rank_).c_str(), st.MPI_SOURCE, st.MPI_TAG, count, op.bytes));
          return true;
        }
        if (op.grow != nullptr) op.grow->resize(static_cast<size_t>(count));
        rc = MPI_Imrecv(op.grow != nullptr ? op.grow->data() : op.recv, count, MPI_BYTE, &msg, &r);
      }
    }
    *moved = true;
    op.started = true;
    if (rc != MPI_SUCCESS) {
      op.finish(make_status(StatusCode::kInternal, "%s: MPI reported error %d", op.describe(rank_).c_str(), rc));
      return true;
    }
    reqs_[&op] = r;
    return true;
  }

  // Sends of up to kEagerBytes are buffered (as shm's 64 KiB rings buffer them): a copy goes out, the send is done.
  static constexpr size_t kEagerBytes = 64 << 10;
  struct Buffered {
    MPI_Request r;
    std::unique_ptr<std::vector<char>> data;
  };
  std::deque<Buffered> buffered_;  // out, not yet known to be received (and dropped messages coming in)
  MPI_Comm comm_;
  const int rank_, size_;
  int tag_ub_ = 32767;
  std::unordered_map<P2pOp*, MPI_Request> reqs_;
};

class MpiComm final : public Communicator {
 public:
  explicit MpiComm(Options o) : opt_(o) {}
  ~MpiComm() override {
    stop_progress();
    if (g_mpi_broken.load()) return;  // a pending request may never complete: leave it to MPI_Abort
    MpiLock lock;
    for (MPI_Op& op : ops16_)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  // own: a communicator this object frees (a split's); else a duplicate of MPI_COMM_WORLD.
  Status init(MPI_Comm own = MPI_COMM_NULL) {
    TT_TRY(ensure_mpi());
    MpiLock lock;
    if (own != MPI_COMM_NULL) comm_ = own;
    else MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_User_function* fns[8] = {bf16_sum, bf16_prod, bf16_min, bf16_max, f16_sum, f16_prod, f16_min, f16_max};
    for (int i = 0; i < 8; ++i) MPI_Op_create(fns[i], 1, &ops16_[i]);
    return Status::ok();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  // Note [split] in comm/comm.h: MPI_Comm_split itself, in call order with the operations in flight.
  Result<std::unique_ptr<Communicator>> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    TT_TRY(run([&]() -> Status {
      TT_RETURN_IF(broken_.is_set(), kFailedPrecondition,
                   "mpi communicator (rank %d): unusable after an earlier error: %s", rank_, broken_.why().c_str());
      MpiLock lock;  // (a blocking call: collective over the ranks, which are all in it)
      const int rc = MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub);
      TT_RETURN_IF(rc != MPI_SUCCESS, kInternal, "MPI_Comm_split failed (error %d)", rc);
      return Status::ok();
    }));
    if (sub == MPI_COMM_NULL) return std::unique_ptr<Communicator>();
    auto c = std::make_unique<MpiComm>(opt_);
    TT_TRY(c->init(sub));
    return std::unique_ptr<Communicator>(std::move(c));
  }
  int64_t sequence() const override { return seq_.load(std::memory_order_relaxed); }
  std::chrono::milliseconds timeout() const override { return opt_.timeout; }
  std::unique_ptr<P2pTransport> make_p2p_transport() override {
    return std::make_unique<MpiP2p>(comm_, rank_, size_);
  }
  void abandon(const std::string& why) override {
    // MPI has no way to tell the peers; they fail at their deadline (or when mpirun stops the job on our exit).
    broken_.set_first("abandoned: " + why);
    g_mpi_broken = true;
  }

 protected:
  Status do_barrier() override {
    TT_TRY(begin(kBarrier, 0, DType::kF32, Op::kSum, -1, false));
    MPI_Request r;
    {
      MpiLock lock;
      MPI_Ibarrier(comm_, &r);
    }
    return finish(&r);
  }
  Status do_broadcast(const void* send, void* recv, size_t count, DType d, int root) override {
    TT_TRY(begin(kBroadcast, count, d, Op::kSum, root, false));
    if (rank_ == root && send != kInPlace && send != recv) std::memcpy(recv, send, count * dtype_size(d));
    MPI_Request r;
    {
      MpiLock lock;
      MPI_Ibcast(recv, static_cast<int>(count), type(d), root, comm_, &r);
    }
    return finish(&r);
  }
  Status do_reduce(const void* send, void* recv, size_t count, DType d, Op op, int root) override {
    TT_TRY(begin(kReduce, count, d, op, root, send == kInPlace && rank_ != root));
    MPI_Request r;
    {
      MpiLock lock;
      MPI_Ireduce(send == kInPlace ? MPI_IN_PLACE : send, recv, static_cast<int>(count), type(d), mpi_op(d, op), root,
                  comm_, &r);
    }
    TT_TRY(finish(&r));
    if (op == Op::kAvg && rank_ == root) average(recv, count, d);
    return Status::ok();
  }
  Status do_allreduce(const void* send, void* recv, size_t count, DType d, Op op) override {
    TT_TRY(begin(kAllreduce, count, d, op, -1, false));
    MPI_Request r;
    {
      MpiLock lock;
      MPI_Iallreduce(send == kInPlace || send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count), type(d),
                     mpi_op(d, op), comm_, &r);
    }
    TT_TRY(finish(&r));
    if (op == Op::kAvg) average(recv, count, d);
    return Status::ok();
  }
  Status do_gather(const void* send, void* recv, size_t count, DType d, int root) override {
    TT_TRY(begin(kGather, count, d, Op::kSum, root, send == kInPlace && rank_ != root));
    MPI_Request r;
    {
      MpiLock lock;
      MPI_Igather(send == kInPlace ? MPI_IN_PLACE : send, static_cast<int>(count), type(d), recv,
                  static_cast<int>(count), type(d), root, comm_, &r);
    }
    return finish(&r);
  }
  Status do_scatter(const void* send, void* recv, size_t count, DType d, int root) override {
    TT_TRY(begin(kScatter, count, d, Op::kSum, root, false));
    MPI_Request r;
    const bool in_place = send == kInPlace && rank_ == root;
    // In place at the root, recv holds all pieces and the root's own stays where it is.
    {
      MpiLock lock;
      MPI_Iscatter(in_place ? recv : send, static_cast<int>(count), type(d), in_place ? MPI_IN_PLACE : recv,
                   static_cast<int>(count), type(d), root, comm_, &r);
    }
    return finish(&r);
  }
  Status do_allgather(const void* send, void* recv, size_t count, DType d) override {
    TT_TRY(begin(kAllgather, count, d, Op::kSum, -1, false));
    MPI_Request r;
    {
      MpiLock lock;
      MPI_Iallgather(send == kInPlace ? MPI_IN_PLACE : send, static_cast<int>(count), type(d), recv,
                     static_cast<int>(count), type(d), comm_, &r);
    }
    return finish(&r);
  }
  Status do_reduce_scatter(const void* send, void* recv, size_t count, DType d, Op op) override {
    TT_TRY(begin(kReduceScatter, count, d, op, -1, false));
    // In place (our convention): recv holds size() * count and this rank's result goes to its own block. MPI's in
    // place puts it first; so reduce out of place from a copy instead.
    const size_t es = dtype_size(d);
    std::vector<char> copy;
    const void* src = send;
    void* out = recv;
    if (send == kInPlace) {
      copy.assign(static_cast<const char*>(recv), static_cast<const char*>(recv) + count * size_ * es);
      src = copy.data();
      out = static_cast<char*>(recv) + static_cast<size_t>(rank_) * count * es;
    }
    MPI_Request r;
    {
      MpiLock lock;
      MPI_Ireduce_scatter_block(src, out, static_cast<int>(count), type(d), mpi_op(d, op), comm_, &r);
    }
    TT_TRY(finish(&r));
    if (op == Op::kAvg) average(out, count, d);
    return Status::ok();
  }
  Status do_alltoall(const void* send, void* recv, size_t count, DType d) override {
    TT_TRY(begin(kAlltoall, count, d, Op::kSum, -1, false));
    MPI_Request r;
    {
      MpiLock lock;
      MPI_Ialltoall(send == kInPlace ? MPI_IN_PLACE : send, static_cast<int>(count), type(d), recv,
                    static_cast<int>(count), type(d), comm_, &r);
    }
    return finish(&r);
  }

 private:
  MPI_Datatype type(DType d) const {
    switch (d) {
      case DType::kF32: return MPI_FLOAT;
      case DType::kF64: return MPI_DOUBLE;
      case DType::kI32: return MPI_INT32_T;
      case DType::kI64: return MPI_INT64_T;
      case DType::kU8: return MPI_UINT8_T;
      case DType::kBF16:
      case DType::kF16: return MPI_UINT16_T;
    }
    return MPI_BYTE;
  }
  MPI_Op mpi_op(DType d, Op op) const {
    switch (op) {  // Note [bitwise and logical reductions]: integers only, as MPI's
      case Op::kBand: return MPI_BAND;
      case Op::kBor: return MPI_BOR;
      case Op::kBxor: return MPI_BXOR;
      case Op::kLand: return MPI_LAND;
      case Op::kLor: return MPI_LOR;
      case Op::kLxor: return MPI_LXOR;
      default: break;
    }
    const int k = op == Op::kProd ? 1 : op == Op::kMin ? 2 : op == Op::kMax ? 3 : 0;  // avg: a sum, divided after
    if (d == DType::kBF16) return ops16_[k];
    if (d == DType::kF16) return ops16_[4 + k];
    static const MPI_Op base[4] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
    return base[k];
  }
  // avg = the sum divided by the ranks, element by element (integers truncated toward zero, as C divides).
  void average(void* p, size_t count, DType d) const {
    switch (d) {
      case DType::kF32: for (size_t i = 0; i < count; ++i) static_cast<float*>(p)[i] /= static_cast<float>(size_); break;
      case DType::kF64: for (size_t i = 0; i < count; ++i) static_cast<double*>(p)[i] /= size_; break;
      case DType::kI32: for (size_t i = 0; i < count; ++i) static_cast<int32_t*>(p)[i] /= size_; break;
      case DType::kI64: for (size_t i = 0; i < count; ++i) static_cast<int64_t*>(p)[i] /= size_; break;
      case DType::kU8: for (size_t i = 0; i < count; ++i) static_cast<uint8_t*>(p)[i] /= size_; break;
      case DType::kBF16:
        for (size_t i = 0; i < count; ++i) {
          uint16_t& h = static_cast<uint16_t*>(p)[i];
          h = float_to_bf16(bf16_to_float(h) / static_cast<float>(size_));
        }
        break;
      case DType::kF16:
        for (size_t i = 0; i < count; ++i) {
          uint16_t& h = static_cast<uint16_t*>(p)[i];
          h = float_to_f16(f16_to_float(h) / static_cast<float>(size_));
        }
        break;
    }
  }

  // The description exchange and its checks (the misuse flag: one rank's bad argument, reported by all).
  Status begin(int64_t kind, size_t count, DType d, Op op, int root, bool in_place_misuse) {
    TT_RETURN_IF(broken_.is_set(), kFailedPrecondition,
                 "mpi communicator (rank %d): unusable after an earlier error: %s",
                 rank_, broken_.why().c_str());
    const int64_t seq = ++seq_;
    cur_kind_ = kind;
    int64_t mine[kDescriptionWords];
    describe(mine, seq, kind, count, d, op, root, misuse_of(kind, root, size_, in_place_misuse));
    std::vector<int64_t> all(static_cast<size_t>(size_) * kDescriptionWords);
    MPI_Request r;
    {
      MpiLock lock;
      MPI_Iallgather(mine, kDescriptionWords, MPI_INT64_T, all.data(), kDescriptionWords, MPI_INT64_T, comm_, &r);
    }
    TT_TRY(finish(&r));
    if (Status s = compare_descriptions("mpi", all.data(), size_, rank_, mine); !s.is_ok()) return fail(s);
    return Status::ok();
  }

  // Polls the request against the deadline.
  Status finish(MPI_Request* r) {
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t spin = 0;; ++spin) {
      int done = 0;
      int rc;
      {
        MpiLock lock;
        rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
      }
      if (rc != MPI_SUCCESS)
        return fail(make_status(StatusCode::kInternal, "%s #%lld (rank %d of %d): MPI reported an error",
                                kind_name(cur_kind_), static_cast<long long>(seq_.load()), rank_, size_));
      if (done) return Status::ok();
      if (spin > 4096) {
        if (std::chrono::steady_clock::now() - start > opt_.timeout)
          return fail(make_status(StatusCode::kDeadlineExceeded,
                                  "%s #%lld (rank %d of %d): not complete within %.1f s (TIERTRAIN_COMM_TIMEOUT): "
                                  "some rank is behind, stuck or gone (MPI does not say which)",
                                  kind_name(cur_kind_), static_cast<long long>(seq_.load()), rank_, size_,
                                  opt_.timeout.count() / 1000.0));
        std::this_thread::sleep_for(std::chrono::microseconds(spin > 65536 ? 50 : 1));
      }
    }
  }
  Status fail(Status s) {
    broken_.set(s.message());
    // An argument mismatch found by the exchange leaves MPI consistent; a deadline or an MPI error does not.
    if (s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kInternal) g_mpi_broken = true;
    return s;
  }

  Options opt_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  MPI_Op ops16_[8] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL,
                      MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  std::atomic<int64_t> seq_{0};
  int64_t cur_kind_ = 0;
  Broken broken_;  // (read and written from several threads)
};

}  // namespace

Status mpi_bootstrap_shm(int* rank, int* size, std::string* job_id) {
  TT_TRY(ensure_mpi());
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int on_node = 0;
  MPI_Comm_size(node, &on_node);
  MPI_Comm_free(&node);
  TT_RETURN_IF(on_node != *size, kFailedPrecondition,
               "TIERTRAIN_COMM_BACKEND=shm under mpirun: %d of the %d ranks are on this node; shared memory needs all "
               "of them here (use the mpi backend across nodes)",
               on_node, *size);
  char id[64] = {};
  if (*rank == 0) std::snprintf(id, sizeof(id), "mpi%d-%lld", static_cast<int>(getpid()),
                                static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count()));
  MPI_Bcast(id, sizeof(id), MPI_CHAR, 0, MPI_COMM_WORLD);
  *job_id = id;
  return Status::ok();
}

Result<std::unique_ptr<Communicator>> create_mpi(const Options& options) {
  auto c = std::make_unique<MpiComm>(options);
  TT_TRY(c->init());
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace tt::comm
