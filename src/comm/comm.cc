#include "comm/comm.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <cctype>
#include <cstdlib>
#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

#include "core/env.h"
#include "comm/collective.h"
#include "comm/crew.h"
#include "comm/nccl.h"
#include "comm/p2p.h"
#include "comm/shm.h"
#ifdef TIERTRAIN_HAVE_MPI
#include "comm/mpi.h"
#endif

namespace tt::comm {

const char* op_name(Op op) {
  switch (op) {
    case Op::kSum: return "sum";
    case Op::kProd: return "prod";
    case Op::kMin: return "min";
    case Op::kMax: return "max";
    case Op::kAvg: return "avg";
    case Op::kBand: return "band";
    case Op::kBor: return "bor";
    case Op::kBxor: return "bxor";
    case Op::kLand: return "land";
    case Op::kLor: return "lor";
    case Op::kLxor: return "lxor";
  }
  return "?";
}

Result<Op> parse_op(const std::string& name) {
  for (Op o : {Op::kSum, Op::kProd, Op::kMin, Op::kMax, Op::kAvg, Op::kBand, Op::kBor, Op::kBxor, Op::kLand,
               Op::kLor, Op::kLxor})
    if (name == op_name(o)) return o;
  return make_status(StatusCode::kInvalidArgument,
                     "unknown reduction op '%s' (sum, prod, min, max, avg, band, bor, bxor, land, lor, lxor)",
                     name.c_str());
}

namespace {
// Note [bitwise and logical reductions]: integer elements only.
Status check_op(DType d, Op op) {
  TT_RETURN_IF(op_on_integers_only(op) && d != DType::kI32 && d != DType::kI64 && d != DType::kU8, kInvalidArgument,
               "reduction %s on %s elements: the bitwise and logical reductions take integers (int32, int64, uint8), "
               "as MPI's", op_name(op), dtype_name(d));
  return Status::ok();
}
}  // namespace

// ---- requests and the progress thread ----------------------------------------------------------------------------

// Note [progress hand-offs]
// A non-blocking operation goes to the progress thread and its result comes back: two hand-offs between threads.
// Through condition variables alone each one is a sleep and a wake-up, which made a small non-blocking call and its
// wait cost many times the blocking call. So the waiter spins on `ready` for up to kHandoffSpin before it sleeps, and
// the progress thread, after an operation, spins as long on `queued` for the next one before it sleeps: back-to-back
// operations and prompt waits pay no sleep; an idle thread gives its CPU back within kHandoffSpin.
constexpr std::chrono::microseconds kHandoffSpin{50};

// Spins (cpu_relax) until pred() holds or `spin` has passed; whether it holds.
template <typename Pred>
bool spin_until(Pred pred, std::chrono::microseconds spin) {
  if (pred()) return true;  // (before the clock: a read a call was 5% of a window of small Isends and their Waits)
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t i = 1;; ++i) {
    if (pred()) return true;
    if (i % 64 == 0 && std::chrono::steady_clock::now() - start >= spin) return pred();
    cpu_relax();
  }
}

Status Request::wait() {
  TT_RETURN_IF(!state_, kFailedPrecondition, "wait() on an empty request");
  State& s = *state_;
  // Note [progress on the waiting thread] (comm/p2p.h): a point-to-point request is driven here; the engine completes
  // every pending request before it goes, so a request found not ready still has it.
  if (s.engine != nullptr && !s.ready.load(std::memory_order_acquire)) s.engine->drive(s, /*once=*/false);
  // `ready` is set once, after the status, which no one changes after it: a ready request's status is read without
  // the lock.
  if (spin_until([&] { return s.ready.load(std::memory_order_acquire); }, kHandoffSpin)) return s.status;
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait(lock, [&] { return s.done; });
  return s.status;
}

bool Request::ready() const { return state_ != nullptr && state_->ready.load(std::memory_order_acquire); }

bool Request::test() const {
  if (state_ == nullptr) return false;
  // Note [progress on the waiting thread]: a point-to-point request not done yet gets one pass of its engine.
  if (state_->engine != nullptr && !state_->ready.load(std::memory_order_acquire)) state_->engine->drive(*state_, true);
  return state_->ready.load(std::memory_order_acquire);  // (status written before ready)
}

struct Communicator::Progress {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::function<Status()>, std::shared_ptr<Request::State>>> queue;
  int64_t in_flight = 0;  // queued or running
  std::atomic<int64_t> queued{0};  // in the queue, for the worker's spin (Note [progress hand-offs])
  bool stop = false;
  std::thread worker;
  uint64_t forks = fork_count();  // Note [crew after fork]: in a fork's child made since, the worker is not there
};

Communicator::Communicator() = default;
Communicator::~Communicator() { stop_progress(); }

void Communicator::stop_progress() {
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    p2p_made_.store(nullptr, std::memory_order_release);
    if (p2p_ && fork_count() != p2p_->forks()) {  // Note [crew after fork]: no thread to stop
      let_go_after_fork(p2p_.release());
    }
    p2p_.reset();  // its pending operations fail
  }
  if (!progress_) return;
  if (fork_count() != progress_->forks) {  // a fork's child: no worker to stop (its lock may be held for good)
    let_go_after_fork(progress_.release());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(progress_->mu);
    progress_->stop = true;
  }
  progress_->cv.notify_all();
  if (progress_->worker.joinable()) progress_->worker.join();
  progress_.reset();
}

Request Communicator::submit(std::function<Status()> op) {
  if (!progress_) {
    auto fresh = std::make_unique<Progress>();
    Progress* p = fresh.get();
    p->worker = std::thread([p] {
      for (;;) {
        std::pair<std::function<Status()>, std::shared_ptr<Request::State>> item;
        spin_until([&] { return p->queued.load(std::memory_order_acquire) > 0; }, kHandoffSpin);
        {
          std::unique_lock<std::mutex> lock(p->mu);
          p->cv.wait(lock, [&] { return p->stop || !p->queue.empty(); });
          if (p->queue.empty()) return;  // stopped, and everything queued has run
          item = std::move(p->queue.front());
          p->queue.pop_front();
          p->queued.fetch_sub(1, std::memory_order_relaxed);
        }
        Status s;
        try {
          s = item.first();
        } catch (const std::exception& e) {  // an operation never throws, but a worker thread must not terminate
          s = make_status(StatusCode::kInternal, "collective failed with an exception: %s", e.what());
        }
        // No longer in flight before it is seen done: a blocking call made right after its wait() runs inline
        // instead of behind it in the queue.
        {
          std::lock_guard<std::mutex> lock(p->mu);
          --p->in_flight;
        }
        {
          std::lock_guard<std::mutex> lock(item.second->mu);
          item.second->status = std::move(s);
          item.second->done = true;
          item.second->ready.store(true, std::memory_order_release);
        }
        item.second->cv.notify_all();
      }
    });
    progress_ = std::move(fresh);  // published once its thread exists
  }
  Request r;
  r.state_ = std::make_shared<Request::State>();
  {
    std::lock_guard<std::mutex> lock(progress_->mu);
    progress_->queue.emplace_back(std::move(op), r.state_);
    ++progress_->in_flight;
    progress_->queued.fetch_add(1, std::memory_order_release);
  }
  progress_->cv.notify_all();
  return r;
}

bool Communicator::in_flight() {
  if (!progress_) return false;
  std::lock_guard<std::mutex> lock(progress_->mu);
  return progress_->in_flight > 0;
}

Status Communicator::run_queued(std::function<Status()> op) {
  return submit(std::move(op)).wait();  // behind the operations in flight
}

namespace {

// An integer from the first of the variables that is set; fallback if none is.
Result<long long> env_int(std::initializer_list<const char*> names, long long fallback, const char** which) {
  for (const char* n : names) {
    const char* v = env::get(n);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    TT_RETURN_IF(*end != '\0', kInvalidArgument, "%s=%s is not an integer", n, v);
    *which = n;
    return x;
  }
  *which = nullptr;
  return fallback;
}

}  // namespace

Result<void*> Communicator::alloc_buffer(size_t bytes) {
  // Large buffers as numpy makes its large arrays (huge pages asked for): the Python and C++ benchmarks then
  // measure the collectives on alike memory: a single-copy gather costs several times more on plain aligned_alloc
  // buffers than on numpy's (Note [single copy] in comm/shm_internal.h). TIERTRAIN_COMM_HUGE_BYTES moves the
  // threshold (0: never); a buffer under 2 MiB then takes a whole huge page.
  const char* var = nullptr;
  TT_ASSIGN_OR_RETURN(long long threshold, env_int({"TIERTRAIN_COMM_HUGE_BYTES"}, 4 << 20, &var));
  TT_RETURN_IF(threshold < 0, kInvalidArgument, "TIERTRAIN_COMM_HUGE_BYTES=%lld must be >= 0 (0: never)", threshold);
  const size_t huge = size_t(2) << 20;
  const bool want_huge = threshold > 0 && bytes >= static_cast<size_t>(threshold);
  const size_t align = want_huge ? huge : 64;
  void* p = std::aligned_alloc(align, (std::max<size_t>(bytes, 1) + align - 1) / align * align);
  TT_RETURN_IF(p == nullptr, kOutOfMemory, "comm: cannot allocate a buffer of %zu bytes", bytes);
#ifdef MADV_HUGEPAGE
  if (want_huge) madvise(p, (bytes + huge - 1) / huge * huge, MADV_HUGEPAGE);  // a hint; failure is harmless
#endif
  return p;
}
void Communicator::free_buffer(void* p) { std::free(p); }
Status Communicator::copy_in(void* buffer, const void* host, size_t bytes) {
  if (bytes) std::memcpy(buffer, host, bytes);
  return Status::ok();
}
Status Communicator::copy_out(void* host, const void* buffer, size_t bytes) {
  if (bytes) std::memcpy(host, buffer, bytes);
  return Status::ok();
}

Result<std::unique_ptr<Communicator>> Communicator::split(int color, int key) {
  // Every rank's (color, key), in rank order.
  const int n = size();
  std::vector<int64_t> all(3 * static_cast<size_t>(n));
  const int64_t mine[3] = {color < 0 ? -1 : color, key, rank()};
  TT_TRY(allgather(mine, all.data(), 3, DType::kI64));
  const int64_t exchange = sequence();
  if (color < 0) return std::unique_ptr<Communicator>();
  std::vector<std::pair<std::pair<int64_t, int64_t>, int>> group;  // ((key, rank), rank)
  for (int r = 0; r < n; ++r)
    if (all[3 * static_cast<size_t>(r)] == color) group.push_back({{all[3 * static_cast<size_t>(r) + 1], r}, r});
  std::sort(group.begin(), group.end());
  std::vector<int> members;
  int new_rank = -1;
  for (const auto& [order, r] : group) {
    if (r == rank()) new_rank = static_cast<int>(members.size());
    members.push_back(r);
  }
  TT_RETURN_IF(new_rank < 0, kInternal, "split: rank %d is not in its own color's group", rank());
  return make_split(members, new_rank, str_format("s%lldc%d", static_cast<long long>(exchange), color));
}

Result<std::unique_ptr<Communicator>> Communicator::make_split(const std::vector<int>&, int, const std::string&) {
  return make_status(StatusCode::kUnimplemented, "split: the %s backend cannot split a communicator yet", backend());
}

Status Communicator::barrier() { return run([=, this] { return do_barrier(); }); }
Status Communicator::broadcast(const void* s, void* r, size_t n, DType d, int root) {
  const Args a = in_place_form(kBroadcast, rank(), root, n, d, s, r);
  return run([=, this] { return do_broadcast(a.s, a.r, n, d, root); });
}
Status Communicator::reduce(const void* s, void* r, size_t n, DType d, Op op, int root) {
  TT_TRY(check_op(d, op));
  const Args a = in_place_form(kReduce, rank(), root, n, d, s, r);
  return run([=, this] { return do_reduce(a.s, a.r, n, d, op, root); });
}
Status Communicator::allreduce(const void* s, void* r, size_t n, DType d, Op op) {
  TT_TRY(check_op(d, op));
  const Args a = in_place_form(kAllreduce, rank(), -1, n, d, s, r);
  return run([=, this] { return do_allreduce(a.s, a.r, n, d, op); });
}
Status Communicator::gather(const void* s, void* r, size_t n, DType d, int root) {
  const Args a = in_place_form(kGather, rank(), root, n, d, s, r);
  return run([=, this] { return do_gather(a.s, a.r, n, d, root); });
}
Status Communicator::scatter(const void* s, void* r, size_t n, DType d, int root) {
  const Args a = in_place_form(kScatter, rank(), root, n, d, s, r);
  return run([=, this] { return do_scatter(a.s, a.r, n, d, root); });
}
Status Communicator::allgather(const void* s, void* r, size_t n, DType d) {
  const Args a = in_place_form(kAllgather, rank(), -1, n, d, s, r);
  return run([=, this] { return do_allgather(a.s, a.r, n, d); });
}
Status Communicator::reduce_scatter(const void* s, void* r, size_t n, DType d, Op op) {
  TT_TRY(check_op(d, op));
  const Args a = in_place_form(kReduceScatter, rank(), -1, n, d, s, r);
  return run([=, this] { return do_reduce_scatter(a.s, a.r, n, d, op); });
}
Status Communicator::alltoall(const void* s, void* r, size_t n, DType d) {
  const Args a = in_place_form(kAlltoall, rank(), -1, n, d, s, r);
  return run([=, this] { return do_alltoall(a.s, a.r, n, d); });
}

Request Communicator::ibarrier() { return submit([=, this] { return do_barrier(); }); }
Request Communicator::ibroadcast(const void* s, void* r, size_t n, DType d, int root) {
  const Args a = in_place_form(kBroadcast, rank(), root, n, d, s, r);
  return submit([=, this] { return do_broadcast(a.s, a.r, n, d, root); });
}
Request Communicator::ireduce(const void* s, void* r, size_t n, DType d, Op op, int root) {
  if (Status st = check_op(d, op); !st.is_ok()) return submit([st] { return st; });
  const Args a = in_place_form(kReduce, rank(), root, n, d, s, r);
  return submit([=, this] { return do_reduce(a.s, a.r, n, d, op, root); });
}
Request Communicator::iallreduce(const void* s, void* r, size_t n, DType d, Op op) {
  if (Status st = check_op(d, op); !st.is_ok()) return submit([st] { return st; });
  const Args a = in_place_form(kAllreduce, rank(), -1, n, d, s, r);
  return submit([=, this] { return do_allreduce(a.s, a.r, n, d, op); });
}
Request Communicator::igather(const void* s, void* r, size_t n, DType d, int root) {
  const Args a = in_place_form(kGather, rank(), root, n, d, s, r);
  return submit([=, this] { return do_gather(a.s, a.r, n, d, root); });
}
Request Communicator::iscatter(const void* s, void* r, size_t n, DType d, int root) {
  const Args a = in_place_form(kScatter, rank(), root, n, d, s, r);
  return submit([=, this] { return do_scatter(a.s, a.r, n, d, root); });
}
Request Communicator::iallgather(const void* s, void* r, size_t n, DType d) {
  const Args a = in_place_form(kAllgather, rank(), -1, n, d, s, r);
  return submit([=, this] { return do_allgather(a.s, a.r, n, d); });
}
Request Communicator::ireduce_scatter(const void* s, void* r, size_t n, DType d, Op op) {
  if (Status st = check_op(d, op); !st.is_ok()) return submit([st] { return st; });
  const Args a = in_place_form(kReduceScatter, rank(), -1, n, d, s, r);
  return submit([=, this] { return do_reduce_scatter(a.s, a.r, n, d, op); });
}
Request Communicator::ialltoall(const void* s, void* r, size_t n, DType d) {
  const Args a = in_place_form(kAlltoall, rank(), -1, n, d, s, r);
  return submit([=, this] { return do_alltoall(a.s, a.r, n, d); });
}


bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (env::is_set(v)) return true;
  return false;
}

namespace {

constexpr long long kMax = std::numeric_limits<long long>::max();

// *field from the variable `name` where it is set: an integer in [lo, hi], else an error saying what it must be.
template <typename T>
Status env_setting(const char* name, long long lo, long long hi, const char* must, T* field) {
  const char* which = nullptr;
  TT_ASSIGN_OR_RETURN(long long v, env_int({name}, static_cast<long long>(*field), &which));
  TT_RETURN_IF(v < lo || v > hi, kInvalidArgument, "%s=%lld: %s", name, v, must);
  *field = static_cast<T>(v);
  return Status::ok();
}

// The shm backend's settings from the environment (the TIERTRAIN_COMM_* of ShmOptions, TIERTRAIN_SHM_DIR).
Status shm_options_from_env(ShmOptions* shm) {
  const char* which = nullptr;
  TT_ASSIGN_OR_RETURN(long long buf, env_int({"TIERTRAIN_COMM_BUFFER"}, 8 << 20, &which));
  TT_RETURN_IF(buf < 4096 || buf % 64 != 0, kInvalidArgument,
               "TIERTRAIN_COMM_BUFFER=%lld: bytes, at least 4096 and a multiple of 64", buf);
  shm->buffer_bytes = static_cast<size_t>(buf);
  TT_TRY(env_setting("TIERTRAIN_COMM_STREAM_BYTES", 0, kMax, "bytes, 0 (never) or more", &shm->stream_bytes));
  if (env::is_set("TIERTRAIN_COMM_CMA_BYTES")) {  // unset: ShmOptions::kCmaAuto
    TT_ASSIGN_OR_RETURN(long long cma, env_int({"TIERTRAIN_COMM_CMA_BYTES"}, 0, &which));
    TT_RETURN_IF(cma < 0, kInvalidArgument, "TIERTRAIN_COMM_CMA_BYTES=%lld: bytes, 0 (never) or more", cma);
    shm->cma_bytes = static_cast<size_t>(cma);
  }
  TT_TRY(env_setting("TIERTRAIN_COMM_CMA_HUGE_BYTES", 0, kMax, "bytes, 0 (never) or more", &shm->cma_huge_bytes));
  TT_TRY(env_setting("TIERTRAIN_COMM_P2P_CMA_BYTES", 0, kMax, "bytes, 0 (never) or more", &shm->p2p_cma_bytes));
  TT_TRY(env_setting("TIERTRAIN_COMM_P2P_SHARED_BYTES", 0, kMax, "bytes, 0 (never) or more", &shm->p2p_shared_bytes));
  TT_TRY(env_setting("TIERTRAIN_COMM_CMA_ALLREDUCE_BYTES", 0, kMax, "bytes, 0 (never) or more",
                     &shm->cma_allreduce_bytes));
  if (env::is_set("TIERTRAIN_COMM_CMA_EXCHANGE_BYTES")) {  // unset: ShmOptions::kExchangeAuto
    shm->cma_exchange_bytes = 0;
    TT_TRY(env_setting("TIERTRAIN_COMM_CMA_EXCHANGE_BYTES", 0, kMax, "bytes, 0 (never) or more",
                       &shm->cma_exchange_bytes));
  }
  TT_TRY(env_setting("TIERTRAIN_COMM_REDUCE_SPAN", 0, kMax, "bytes, 0 (no bound) or more", &shm->reduce_span));
  // (A round is never below kMinReduceRound, 64 KiB a rank, in comm/shm_internal.h: a smaller span is a mistake.)
  TT_RETURN_IF(shm->reduce_span > 0 && shm->reduce_span < (size_t(64) << 10), kInvalidArgument,
               "TIERTRAIN_COMM_REDUCE_SPAN=%zu: bytes, 0 (no bound) or at least 65536 (a reduction's round takes at "
               "least 64 KiB a rank: Note [reduction rounds])", shm->reduce_span);
  TT_TRY(env_setting("TIERTRAIN_COMM_THREADS", 1, Crew::kMaxThreads, "1 to 8", &shm->threads));
  TT_TRY(env_setting("TIERTRAIN_COMM_THREAD_BYTES", 1, kMax, "1 or more bytes", &shm->thread_bytes));
  if (env::is_set("TIERTRAIN_COMM_POOL"))  // unset: ShmOptions::kPoolAuto
    TT_TRY(env_setting("TIERTRAIN_COMM_POOL", 0, kMax, "bytes, 0 (no pool) or more", &shm->pool_bytes));
  TT_TRY(env_setting("TIERTRAIN_COMM_THREAD_WAIT_US", 0, 60'000'000, "microseconds, 0 to 60000000",
                     &shm->thread_wait_us));
  if (const char* v = env::get("TIERTRAIN_COMM_INLINE"); v != nullptr && *v != '\0')  // unset: auto (-1)
    TT_TRY(env_setting("TIERTRAIN_COMM_INLINE", 0, 1, "0 or 1", &shm->inline_small));
  int rooted = shm->rooted ? 1 : 0;
  TT_TRY(env_setting("TIERTRAIN_COMM_ROOTED", 0, 1, "0 or 1", &rooted));
  shm->rooted = rooted != 0;
  int pin = shm->thread_pin ? 1 : 0;
  TT_TRY(env_setting("TIERTRAIN_COMM_THREAD_PIN", 0, 1, "0 or 1", &pin));
  shm->thread_pin = pin != 0;
  TT_ASSIGN_OR_RETURN(long long tree, env_int({"TIERTRAIN_COMM_TREE_RANKS"}, shm->tree_ranks, &which));
  TT_RETURN_IF(tree < 0 || tree == 1, kInvalidArgument,
               "TIERTRAIN_COMM_TREE_RANKS=%lld: 0 (never) or the smallest number of ranks (2 or more)", tree);
  shm->tree_ranks = static_cast<int>(std::min<long long>(tree, 1 << 20));
  if (const char* d = env::get("TIERTRAIN_SHM_DIR"); d != nullptr && *d != '\0') shm->dir = d;
  if (const char* m = env::get("TIERTRAIN_COMM_MEMPOLICY"); m != nullptr && *m != '\0') shm->mempolicy = m;
  return Status::ok();
}

// The host communicator (shm or mpi) of the job, by `backend` (auto, shm or mpi).
Result<std::unique_ptr<Communicator>> host_world(const Options& options, const std::string& backend) {
#ifdef TIERTRAIN_HAVE_MPI
  if (backend == "mpi" || (backend == "auto" && launched_by_mpi())) return create_mpi(options);
  if (backend == "shm" && launched_by_mpi() && !env::is_set("TIERTRAIN_COMM_ID")) {
    // shm under mpirun: MPI gives the ranks and carries the job id.
    int rank = 0, size = 1;
    std::string id;
    TT_TRY(mpi_bootstrap_shm(&rank, &size, &id));
    ShmOptions shm;
    shm.common = options;
    shm.job_id = id;
    TT_TRY(shm_options_from_env(&shm));
    return create_shm(rank, size, shm);
  }
#else
  TT_RETURN_IF(backend == "mpi", kUnimplemented,
               "TIERTRAIN_COMM_BACKEND=mpi: this build has no MPI (install libopenmpi-dev and rebuild)");
  // Started by mpirun, each process would otherwise think itself alone (mpirun sets no RANK): refuse.
  TT_RETURN_IF(launched_by_mpi() && !env::is_set("TIERTRAIN_COMM_ID"), kFailedPrecondition,
               "started by an MPI launcher, but this build of tiertrain has no MPI: start the ranks with `tiertrain "
               "launch -n N -- ...`, or build with MPI (libopenmpi-dev)");
#endif
  const char* rank_var = nullptr;
  const char* size_var = nullptr;
  TT_ASSIGN_OR_RETURN(long long rank, env_int({"TIERTRAIN_RANK", "RANK"}, 0, &rank_var));
  TT_ASSIGN_OR_RETURN(long long size, env_int({"TIERTRAIN_WORLD_SIZE", "WORLD_SIZE"}, 1, &size_var));
  TT_RETURN_IF(size < 1 || size > 4096, kInvalidArgument, "%s=%lld: the world size must be 1..4096",
               size_var ? size_var : "world size", size);
  TT_RETURN_IF(rank < 0 || rank >= size, kInvalidArgument, "%s=%lld is not a rank of a world of %lld",
               rank_var ? rank_var : "rank", rank, size);
  ShmOptions shm;
  shm.common = options;
  const char* id = env::get("TIERTRAIN_COMM_ID");
  TT_RETURN_IF(size > 1 && (id == nullptr || *id == '\0'), kInvalidArgument,
               "a world of %lld ranks needs TIERTRAIN_COMM_ID, the job's name that all its ranks share (`tiertrain "
               "launch` sets it)",
               size);
  // The name goes into shared-memory segments' names: letters, digits, '.', '_' and '-' only (issue 47).
  if (size > 1)
    for (const char* c = id; *c != '\0'; ++c)
      TT_RETURN_IF(!(std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '_' || *c == '-') ||
                       (c - id) >= 128,
                   kInvalidArgument,
                   "TIERTRAIN_COMM_ID=%s: the job's name takes letters, digits, '.', '_' and '-' (at most 128); "
                   "`tiertrain launch` sets one", id);
  shm.job_id = size > 1 ? std::string(id) : "solo-" + std::to_string(getpid());
  TT_TRY(shm_options_from_env(&shm));
  return create_shm(static_cast<int>(rank), static_cast<int>(size), shm);
}

Status parse_timeout(Options* options) {
  if (const char* t = env::get("TIERTRAIN_COMM_TIMEOUT"); t != nullptr && *t != '\0') {
    char* end = nullptr;
    const double s = std::strtod(t, &end);
    // At most a week: a deadline a rank can reach (and one that fits the clock's arithmetic; inf, 1e400 or 1e17 s
    // overflowed it and failed every rank at once).
    TT_RETURN_IF(end == t || *end != '\0' || !(s > 0) || !(s <= 604800), kInvalidArgument,
                 "TIERTRAIN_COMM_TIMEOUT=%s: seconds, > 0 and at most 604800 (a week)", t);
    options->timeout = std::chrono::milliseconds(static_cast<long long>(s * 1000.0));
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Communicator>> world(Options options) {
  // The backend: TIERTRAIN_COMM_BACKEND=shm|mpi|nccl, or by default mpi under an MPI launcher (in a build with MPI),
  // shm otherwise. nccl is bootstrapped by the default host backend.
  std::string backend = env::get_or("TIERTRAIN_COMM_BACKEND", "auto");
  TT_RETURN_IF(backend != "auto" && backend != "shm" && backend != "mpi" && backend != "nccl", kInvalidArgument,
               "TIERTRAIN_COMM_BACKEND=%s: auto, shm, mpi or nccl", backend.c_str());
  if (backend == "nccl") {
    TT_ASSIGN_OR_RETURN(auto c, nccl_world(options));
    return std::unique_ptr<Communicator>(std::move(c));
  }
  TT_TRY(parse_timeout(&options));
  // Settings read later, when they are used, checked now: a bad one is named at start (issue 47).
  {
    const char* var = nullptr;
    TT_ASSIGN_OR_RETURN(long long huge, env_int({"TIERTRAIN_COMM_HUGE_BYTES"}, 4 << 20, &var));
    TT_RETURN_IF(huge < 0, kInvalidArgument, "TIERTRAIN_COMM_HUGE_BYTES=%lld must be >= 0 (0: never)", huge);
  }
  return host_world(options, backend);
}

Result<std::unique_ptr<Communicator>> self(Options options) {
  TT_TRY(parse_timeout(&options));
  static std::atomic<int> made{0};
  ShmOptions shm;
  shm.common = options;
  shm.job_id = "self-" + std::to_string(getpid()) + "-" + std::to_string(made.fetch_add(1));
  TT_TRY(shm_options_from_env(&shm));
  return create_shm(0, 1, shm);
}

bool have_nccl() {
#ifdef TIERTRAIN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<NcclCommunicator>> nccl_world(Options options) {
  TT_TRY(parse_timeout(&options));
#ifdef TIERTRAIN_HAVE_NCCL
  TT_ASSIGN_OR_RETURN(auto host, host_world(options, "auto"));
  return create_nccl(std::move(host), options);
#else
  return make_status(StatusCode::kUnimplemented,
                     "the nccl backend is not in this build of tiertrain (it needs CUDA and NCCL when it is built: "
                     "nccl.h and libnccl, e.g. from the CUDA toolkit or NCCL_HOME)");
#endif
}

}  // namespace tt::comm
