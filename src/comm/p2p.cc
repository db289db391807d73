// comm/p2p: the point-to-point engine (Note [point-to-point] in p2p.h) and the Communicator's point-to-point calls.
#include "comm/p2p.h"

#include <sched.h>

#include <algorithm>
#include <limits>

#include "comm/crew.h"
#include "core/recycling_allocator.h"
#include "core/units.h"

namespace tt::comm {

namespace {

std::string peer_name(int peer) { return peer == kAnySource ? std::string("any rank") : "rank " + std::to_string(peer); }
std::string tag_name(int tag) { return tag == kAnyTag ? std::string("any tag") : "tag " + std::to_string(tag); }

// A waiting thread's pause: spin while things move, then yield, then sleep.
void back_off(uint64_t idle) {
  if (idle < 256) {
    cpu_relax();
  } else if (idle < 4096) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(idle < 65536 ? 5 : 50));
  }
}

}  // namespace

std::string P2pOp::describe(int rank) const {
  switch (kind) {
    case kSend:
      return str_format("send of %s from rank %d to rank %d (tag %d)", format_bytes(static_cast<int64_t>(bytes)).c_str(),
                        rank, peer, tag);
    case kRecv:
      return str_format("receive at rank %d from %s (%s)", rank, peer_name(peer).c_str(), tag_name(tag).c_str());
    case kProbe:
      return str_format("probe at rank %d for %s (%s)", rank, peer_name(peer).c_str(), tag_name(tag).c_str());
  }
  return "?";
}

P2pEngine::P2pEngine(std::unique_ptr<P2pTransport> transport, int rank, int size, const char* backend,
                     std::chrono::milliseconds timeout, std::function<void(const std::string&)> abandon)
    : transport_(std::move(transport)), rank_(rank), size_(size), backend_(backend), timeout_(timeout),
      abandon_(std::move(abandon)), forks_(fork_count()) {}

P2pEngine::~P2pEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<std::pair<std::shared_ptr<Request::State>, Status>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (P2pOp* op : pending_)
      if (op->req)
        done.emplace_back(std::shared_ptr<Request::State>(owned_[op->owned_at], op->req),
                          make_status(StatusCode::kAborted, "%s: the communicator was destroyed first",
                                      op->describe(rank_).c_str()));
    pending_.clear();
  }
  complete(done);
}

Status P2pEngine::check(const P2pOp& op) const {
  TT_RETURN_IF(!broken_.empty(), kFailedPrecondition, "point-to-point (%s, rank %d of %d): unusable after an earlier "
               "error: %s", backend_, rank_, size_, broken_.c_str());
  const bool any_ok = op.kind != P2pOp::kSend;
  TT_RETURN_IF(!(op.peer >= 0 && op.peer < size_) && !(any_ok && op.peer == kAnySource), kInvalidArgument,
               "%s: %s %d is not a rank of this communicator (0..%d%s)", op.describe(rank_).c_str(),
               op.kind == P2pOp::kSend ? "destination" : "source", op.peer, size_ - 1,
               any_ok ? ", or any" : "");
  TT_RETURN_IF(!(op.tag >= 0 && op.tag <= kMaxTag) && !(any_ok && op.tag == kAnyTag), kInvalidArgument,
               "%s: tag %d is outside 0..%d%s", op.describe(rank_).c_str(), op.tag, kMaxTag, any_ok ? " (or any)" : "");
  TT_RETURN_IF(op.kind == P2pOp::kSend && op.bytes > 0 && op.send == nullptr, kInvalidArgument,
               "%s: no buffer", op.describe(rank_).c_str());
  TT_RETURN_IF(op.kind == P2pOp::kRecv && op.grow == nullptr && op.bytes > 0 && op.recv == nullptr, kInvalidArgument,
               "%s: no buffer", op.describe(rank_).c_str());
  return Status::ok();
}

void P2pEngine::complete(std::vector<std::pair<std::shared_ptr<Request::State>, Status>>& done) {
  for (auto& [state, status] : done) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->status = std::move(status);
      state->done = true;
      state->ready.store(true, std::memory_order_release);
    }
    state->cv.notify_all();
  }
  done.clear();
}

void P2pEngine::fail_all(const Status& s, P2pOp* culprit) {
  broken_ = s.message();
  for (P2pOp* op : pending_)
    if (!op->done)
      op->finish(op == culprit ? s
                               : make_status(s.code(), "%s: not done: %s", op->describe(rank_).c_str(),
                                             s.message().c_str()));
  // The peers hear of it (shm: at once; MPI: at their deadline), as after a collective's failure.
  if (abandon_) abandon_("point-to-point: " + s.message());
}

bool P2pEngine::pass(std::vector<std::pair<std::shared_ptr<Request::State>, Status>>& done) {
  bool moved = false;
  if (broken_.empty()) moved = transport_->progress(pending_);
  // Deadlines, and peers that will never come (checked every 100 ms); the clock read every 16th pass (a deadline is
  // seconds, a pass well under a microsecond; a non-blocking operation's start is stamped at the first read after
  // its post, P2pOp::start).
  if ((++passes_ & 15) != 0) {
    harvest(done, moved);
    return moved;
  }
  const auto now = std::chrono::steady_clock::now();
  const bool liveness = now >= next_liveness_;
  if (liveness) next_liveness_ = now + std::chrono::milliseconds(100);
  for (P2pOp* op : pending_) {
    if (op->start == std::chrono::steady_clock::time_point{}) op->start = now;  // (a non-blocking post's: P2pOp::start)
    if (op->done || !broken_.empty()) continue;
    if (now - op->start > timeout_) {
      fail_all(make_status(StatusCode::kDeadlineExceeded,
                           "%s (%s): not done within %.1f s (TIERTRAIN_COMM_TIMEOUT): %s",
                           op->describe(rank_).c_str(), backend_, timeout_.count() / 1000.0,
                           op->kind == P2pOp::kSend ? "the receiver did not take it (is it behind, stuck, or "
                                                      "receiving with another tag?)"
                                                    : "no such message came (is the sender behind, stuck, or "
                                                      "sending with another tag?)"),
               op);
      break;
    }
    if (liveness && op->peer != kAnySource) {
      const std::string trouble = transport_->peer_trouble(op->peer);
      // Once more after the peer's state: what it wrote before it gave up or exited (a message, or taking ours)
      // counts; a sender that sends and exits is not an error for its receiver.
      if (!trouble.empty()) moved |= transport_->progress(pending_);
      if (!trouble.empty() && !op->done) {
        fail_all(make_status(StatusCode::kAborted, "%s (%s): %s", op->describe(rank_).c_str(), backend_,
                             trouble.c_str()),
                 op);
        break;
      }
    }
  }
  harvest(done, moved);
  return moved;
}

void P2pEngine::harvest(std::vector<std::pair<std::shared_ptr<Request::State>, Status>>& done, bool& moved) {
  // The finished leave (the others keep their order); the non-blocking ones' requests are completed (by the caller,
  // without the lock), and their operations go.
  size_t keep = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    P2pOp* op = pending_[i];
    if (!op->done) {
      pending_[keep++] = op;
      continue;
    }
    moved = true;
    if (op->req) {
      done.emplace_back(std::shared_ptr<Request::State>(owned_[op->owned_at], op->req), op->status);
      --async_pending_;
      const size_t at = op->owned_at;  // (swapped with the last, which takes its place)
      if (at + 1 != owned_.size()) {
        owned_[at] = std::move(owned_.back());
        owned_[at]->op.owned_at = at;
      }
      owned_.pop_back();
    }
  }
  pending_.resize(keep);
}

Status P2pEngine::run(P2pOp& op) { return run_both(op, nullptr); }

Status P2pEngine::run_both(P2pOp& a, P2pOp* b) {
  std::vector<std::pair<std::shared_ptr<Request::State>, Status>> done;
  std::unique_lock<std::mutex> lock(mu_);
  TT_TRY(check(a));
  if (b != nullptr) TT_TRY(check(*b));
  a.start = std::chrono::steady_clock::now();
  pending_.push_back(&a);
  if (b != nullptr) {
    b->start = a.start;
    pending_.push_back(b);
  }
  for (uint64_t idle = 0;;) {
    const bool moved = pass(done);
    const bool finished = a.done && (b == nullptr || b->done);  // (and no longer pending)
    called();
    lock.unlock();
    complete(done);
    if (finished) return !a.status.is_ok() || b == nullptr ? a.status : b->status;
    idle = moved ? 0 : idle + 1;
    back_off(idle);
    lock.lock();
  }
}

void P2pEngine::drive(Request::State& s, bool once) {
  thread_local std::vector<std::pair<std::shared_ptr<Request::State>, Status>> done;  // (as start()'s)
  for (uint64_t idle = 0;;) {
    if (s.ready.load(std::memory_order_acquire)) return;
    bool moved = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      called();
      moved = pass(done);
    }
    complete(done);
    if (once || s.ready.load(std::memory_order_acquire)) return;
    idle = moved ? 0 : idle + 1;
    back_off(idle);
  }
}

Result<bool> P2pEngine::once(P2pOp& op) {
  std::vector<std::pair<std::shared_ptr<Request::State>, Status>> done;
  std::unique_lock<std::mutex> lock(mu_);
  called();
  TT_TRY(check(op));
  op.start = std::chrono::steady_clock::now();
  pending_.push_back(&op);
  pass(done);
  if (!op.done) pending_.erase(std::find(pending_.begin(), pending_.end(), &op));
  lock.unlock();
  complete(done);
  if (!op.done) return false;
  TT_TRY(op.status);
  return true;
}

Request P2pEngine::start(P2pOp operation) {
  auto async = std::allocate_shared<AsyncOp>(RecyclingAllocator<AsyncOp>{});  // Note [recycled blocks]
  async->op = std::move(operation);
  P2pOp* op = &async->op;
  Request r;
  r.state_ = std::shared_ptr<Request::State>(async, &async->state);
  r.state_->engine = this;  // Note [progress on the waiting thread]
  // (This thread's list, kept: a post allocates no list of its own; complete() empties it.)
  thread_local std::vector<std::pair<std::shared_ptr<Request::State>, Status>> done;
  bool wake = false;
  P2pOp::Kind kind = P2pOp::kSend;
  {
    std::lock_guard<std::mutex> lock(mu_);
    called();
    if (Status s = check(*op); !s.is_ok()) {
      done.emplace_back(r.state_, s);
    } else {
      kind = op->kind;
      op->req = &async->state;  // (op->start: set by the engine's next clock read, P2pOp::start)
      pending_.push_back(op);
      op->owned_at = owned_.size();
      owned_.push_back(std::move(async));
      ++async_pending_;
      // A first pass now for a send: a small one is done before the call returns, and the thread has less to do. A
      // receive waits for its wait or test (or the thread) to look: a pass at each post walks every pending operation,
      // and a window of posted receives paid for it once per post.
      if (kind == P2pOp::kSend) pass(done);
      if (!thread_.joinable()) thread_ = std::thread([this] { worker(); });
      wake = worker_asleep_ && async_pending_ > 0;  // Note [the engine stands by]: only a sleeping thread
    }
  }
  if (wake) cv_.notify_all();
  complete(done);
  return r;
}

void P2pEngine::worker() {
  std::vector<std::pair<std::shared_ptr<Request::State>, Status>> done;
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t seen_calls = ~uint64_t{0};  // (a first look always stands by)
  for (uint64_t idle = 0;;) {
    worker_asleep_ = true;
    cv_.wait(lock, [&] { return stop_ || async_pending_ > 0; });
    worker_asleep_ = false;
    if (stop_) return;
    // Note [the engine stands by]: while callers are in the engine, they move the operations.
    if (const uint64_t seen = calls_.load(std::memory_order_relaxed); seen != seen_calls) {
      seen_calls = seen;
      lock.unlock();
      std::this_thread::sleep_for(kStandBy);
      lock.lock();
      idle = 0;
      continue;
    }
    const bool moved = pass(done);
    lock.unlock();
    complete(done);
    idle = moved ? 0 : idle + 1;
    back_off(idle);
    lock.lock();
  }
}

// ---- the Communicator's calls ---------------------------------------------------------------------------------------

std::unique_ptr<P2pTransport> Communicator::make_p2p_transport() { return nullptr; }
std::unique_ptr<P2pTransport> Communicator::layered_p2p_transport() { return make_p2p_transport(); }

Result<P2pEngine*> Communicator::p2p() {
  if (P2pEngine* e = p2p_made_.load(std::memory_order_acquire)) return e;
  std::lock_guard<std::mutex> lock(p2p_mu_);
  if (!p2p_) {
    std::unique_ptr<P2pTransport> t = make_p2p_transport();
    TT_RETURN_IF(t == nullptr, kUnimplemented,
                 "point-to-point messages are not available on the %s backend (send and receive through its host "
                 "communicator, or use the shm or mpi backend)",
                 backend());
    p2p_ = std::make_unique<P2pEngine>(std::move(t), rank(), size(), backend(), timeout(),
                                       [this](const std::string& why) { abandon(why); });
    p2p_made_.store(p2p_.get(), std::memory_order_release);
  }
  return p2p_.get();
}

namespace {

Result<size_t> bytes_of(size_t count, DType dtype) {
  const size_t es = dtype_size(dtype);
  TT_RETURN_IF(es == 0 || count > std::numeric_limits<size_t>::max() / es, kInvalidArgument,
               "point-to-point: %zu elements of %s overflow", count, dtype_name(dtype));
  return count * es;
}

// (By value: a blocking call's lives on its stack, a non-blocking one's in its AsyncOp.)
P2pOp op_of(P2pOp::Kind kind, size_t bytes, int32_t type, int peer, int tag) {
  P2pOp op;
  op.kind = kind;
  op.bytes = bytes;
  op.type = type;
  op.peer = peer;
  op.tag = tag;
  return op;
}

P2pOp send_op(const void* buf, size_t bytes, int32_t type, int dest, int tag) {
  P2pOp op = op_of(P2pOp::kSend, bytes, type, dest, tag);
  op.send = buf;
  return op;
}

P2pOp recv_op(void* buf, size_t bytes, int32_t type, int source, int tag, MessageInfo* info,
              std::vector<char>* grow = nullptr) {
  P2pOp op = op_of(P2pOp::kRecv, bytes, type, source, tag);
  op.recv = buf;
  op.info = info;
  op.grow = grow;
  return op;
}

}  // namespace

Status Communicator::send(const void* buf, size_t count, DType dtype, int dest, int tag) {
  TT_ASSIGN_OR_RETURN(size_t bytes, bytes_of(count, dtype));
  TT_ASSIGN_OR_RETURN(P2pEngine * e, p2p());
  P2pOp op = send_op(buf, bytes, static_cast<int32_t>(dtype), dest, tag);
  return e->run(op);
}

Status Communicator::send_bytes(const void* buf, size_t bytes, int dest, int tag) {
  TT_ASSIGN_OR_RETURN(P2pEngine * e, p2p());
  P2pOp op = send_op(buf, bytes, kBytesType, dest, tag);
  return e->run(op);
}

Status Communicator::recv(void* buf, size_t count, DType dtype, int source, int tag, MessageInfo* info) {
  TT_ASSIGN_OR_RETURN(size_t bytes, bytes_of(count, dtype));
  TT_ASSIGN_OR_RETURN(P2pEngine * e, p2p());
  P2pOp op = recv_op(buf, bytes, static_cast<int32_t>(dtype), source, tag, info);
  return e->run(op);
}

Status Communicator::recv_bytes(void* buf, size_t capacity, int source, int tag, MessageInfo* info) {
  TT_ASSIGN_OR_RETURN(P2pEngine * e, p2p());
  P2pOp op = recv_op(buf, capacity, kBytesType, source, tag, info);
  return e->run(op);
}

Status Communicator::recv_any(std::vector<char>* out, int source, int tag, MessageInfo* info) {
  TT_RETURN_IF(out == nullptr, kInvalidArgument, "recv_any: no vector to receive into");
  TT_ASSIGN_OR_RETURN(P2pEngine * e, p2p());
  P2pOp op = recv_op(nullptr, 0, kBytesType, source, tag, info, out);
  return e->run(op);
}

Status Communicator::sendrecv(const void* send, size_t send_count, DType send_dtype, int dest, int send_tag,
                              void* recv, size_t recv_count, DType recv_dtype, int source, int recv_tag,
                              MessageInfo* info) {
  TT_ASSIGN_OR_RETURN(size_t sbytes, bytes_of(send_count, send_dtype));
  TT_ASSIGN_OR_RETURN(size_t rbytes, bytes_of(recv_count, recv_dtype));
  return sendrecv_raw(send, sbytes, static_cast<int32_t>(send_dtype), dest, send_tag, recv, rbytes,
                      static_cast<int32_t>(recv_dtype), source, recv_tag, info);
}

Status Communicator::sendrecv_raw(const void* send, size_t send_bytes, int32_t send_type, int dest, int send_tag,
                                  void* recv, size_t recv_bytes, int32_t recv_type, int source, int recv_tag,
                                  MessageInfo* info) {
  TT_ASSIGN_OR_RETURN(P2pEngine * e, p2p());
  // The receive is posted first, then the send, both driven here (Note [progress on the waiting thread]): neither
  // waits for the other (a pass moves the sends before it looks for arrivals).
  P2pOp r = recv_op(recv, recv_bytes, recv_type, source, recv_tag, info);
  P2pOp op = send_op(send, send_bytes, send_type, dest, send_tag);
  return e->run_both(r, &op);
}

Request Communicator::isend(const void* buf, size_t count, DType dtype, int dest, int tag) {
  auto bytes = bytes_of(count, dtype);
  if (!bytes.is_ok()) return P2pEngine::failed(bytes.status());
  auto e = p2p();
  if (!e.is_ok()) return P2pEngine::failed(e.status());
  return e.value()->start(send_op(buf, bytes.value(), static_cast<int32_t>(dtype), dest, tag));
}

Request Communicator::isend_bytes(const void* buf, size_t bytes, int dest, int tag) {
  auto e = p2p();
  if (!e.is_ok()) return P2pEngine::failed(e.status());
  return e.value()->start(send_op(buf, bytes, kBytesType, dest, tag));
}

Request Communicator::irecv(void* buf, size_t count, DType dtype, int source, int tag, MessageInfo* info) {
  auto bytes = bytes_of(count, dtype);
  if (!bytes.is_ok()) return P2pEngine::failed(bytes.status());
  auto e = p2p();
  if (!e.is_ok()) return P2pEngine::failed(e.status());
  return e.value()->start(recv_op(buf, bytes.value(), static_cast<int32_t>(dtype), source, tag, info));
}

Request Communicator::irecv_bytes(void* buf, size_t capacity, int source, int tag, MessageInfo* info) {
  auto e = p2p();
  if (!e.is_ok()) return P2pEngine::failed(e.status());
  return e.value()->start(recv_op(buf, capacity, kBytesType, source, tag, info));
}

Request Communicator::irecv_any(std::vector<char>* out, int source, int tag, MessageInfo* info) {
  if (out == nullptr) return P2pEngine::failed(make_status(StatusCode::kInvalidArgument, "irecv_any: no vector"));
  auto e = p2p();
  if (!e.is_ok()) return P2pEngine::failed(e.status());
  return e.value()->start(recv_op(nullptr, 0, kBytesType, source, tag, info, out));
}

Result<bool> Communicator::iprobe(int source, int tag, MessageInfo* info) {
  TT_ASSIGN_OR_RETURN(P2pEngine * e, p2p());
  P2pOp op;
  op.kind = P2pOp::kProbe;
  op.peer = source;
  op.tag = tag;
  op.info = info;
  return e->once(op);
}

Status Communicator::probe(int source, int tag, MessageInfo* info) {
  TT_ASSIGN_OR_RETURN(P2pEngine * e, p2p());
  P2pOp op;
  op.kind = P2pOp::kProbe;
  op.peer = source;
  op.tag = tag;
  op.info = info;
  return e->run(op);
}

Request P2pEngine::failed(Status s) {
  Request r;
  r.state_ = std::make_shared<Request::State>();
  r.state_->status = std::move(s);
  r.state_->done = true;
  r.state_->ready.store(true, std::memory_order_release);
  return r;
}

}  // namespace tt::comm
