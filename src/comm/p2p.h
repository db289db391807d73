// comm/p2p: point-to-point messages (internal to comm/): the operations, the engine that drives them to their end
// against the deadline, and the interface a backend implements to move them (P2pTransport: shm's rings in
// shm_p2p.cc, MPI's own sends and receives in mpi.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"

namespace tt::comm {

// Note [point-to-point]
// A message is a frame (its length, tag and type) and its bytes. Semantics are MPI's: a receive names a source and a
// tag or takes any; the receives posted first take the messages that arrived first among those they match;
// messages from one rank to another are never overtaken by later ones of the same match. A send is complete once its
// bytes are with the transport (shm: in the receiver's ring, 64 KiB from each rank to each: messages under 32 KiB are
// complete at once, as MPI's eager ones; from 32 KiB the receiver copies the message straight out of the sender's
// buffer, Note [point-to-point single copy] in shm_p2p.cc, or streams it through the ring where single copies are
// off), not when a receive has it. A receive that finds a message longer than its buffer, or of another type, fails
// and the message is dropped (the stream stays whole, the communicator usable). A deadline passed, or a peer that
// died or gave up, breaks point-to-point for good (a message may be half sent) and abandons the communicator, so
// that the peers hear of it. Blocking calls drive the transport on the caller's thread; non-blocking ones are driven
// by the engine's thread (started by the first of them), which sleeps while none is pending; every pending
// operation moves whoever drives, so two ranks that Isend to each other and then Recv both get through.
// The messages do not order with the collectives (as in MPI): a rank may be in a barrier while its Isend streams.
//
// Note [progress on the waiting thread]
// A thread that waits for a point-to-point request (Request::wait, test) drives the engine itself, as MPI's progress
// happens in the calls that wait, rather than spinning on a flag while the engine's thread does the work: with two
// threads a rank busy on the cores the ranks share (a 2-core machine at 2 ranks: four), each hand-off cost a yield or
// a sleep (a window of 64 small Isends took 8 us a message against mpi4py's 0.7 on the 2-core VM, 2026-12-06:
// the record `cpu-mpi4py-same`, folded into docs/benchmarks/README.md's history). Sendrecv posts its receive and its send and drives both on the
// caller's thread, as Send and Recv do one. The engine's thread still moves what no one waits for.
//
// Note [the engine stands by]
// The engine's thread moves the pending operations only once no caller has been in the engine for kStandBy (a post,
// a wait, a test, a blocking call: it counts them, and looks again after kStandBy). While the program calls, its
// calls move everything (as MPI's progress does); a second thread taking the lock between them, or woken at each
// post, only costs: posting 64 small Isends took 4.3 us each, and about 1.2 with the thread standing by (2 cores, 2
// ranks; most of it had gone to waking the thread and to the lock passing between the two). When the program goes
// away (computes, or sits in a collective) with operations pending, the thread takes over after kStandBy: a long
// Isend still moves while its sender is in a barrier. The thread is woken only when operations become pending with
// it asleep. A send's post makes one pass (a small send is done when Isend returns); a receive's post makes none
// (each pass walks every pending operation: a window of 64 posted receives paid 64 passes, 0.4 us a post).

// The type of a message of bytes (it matches any type): DType values are 0..5.
constexpr int32_t kBytesType = 255;

class P2pEngine;

struct Request::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::atomic<bool> ready{false};  // done, for the waiter's spin (Note [progress hand-offs] in comm.cc)
  Status status;
  // A point-to-point request's engine, which its waiter drives itself (Note [progress on the waiting thread]); null
  // for the collectives' requests. The engine completes every pending request before it goes.
  P2pEngine* engine = nullptr;
};

struct P2pOp {
  enum Kind : uint8_t { kSend, kRecv, kProbe };
  Kind kind = kSend;
  int peer = 0;       // the destination, or the source (kAnySource)
  int tag = 0;        // kAnyTag for a receive or probe that takes any
  int32_t type = kBytesType;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t bytes = 0;                    // a send's length; a receive's capacity
  std::vector<char>* grow = nullptr;   // a receive of any length: resized to the message's
  MessageInfo* info = nullptr;         // written when a receive or probe is done
  bool done = false;
  Status status;
  // When it was posted, for its deadline and Note [point-to-point single copy]'s stash valve: a non-blocking post
  // leaves it unset (the epoch) and the engine's next clock read sets it (a clock read a post cost 5% of a window of
  // small Isends); a blocking call reads the clock at once.
  std::chrono::steady_clock::time_point start;
  Request::State* req = nullptr;  // a non-blocking operation's (in its AsyncOp), completed by the engine
  size_t owned_at = 0;            // a non-blocking operation's place in the engine's owned_
  // The transport's: how far it got.
  bool started = false;
  size_t moved = 0;
  void* bound = nullptr;
  int64_t handle = 0;
  bool help = false;  // shm: the sender helps with its single copy (Note [both sides copy] in comm/shm_p2p.cc)
  void finish(Status s = Status::ok()) {
    status = std::move(s);
    done = true;
  }
  std::string describe(int rank) const;
};

// A non-blocking operation and its request's state, in one allocation: the Request's pointer to the state shares
// the AsyncOp's ownership (shared_ptr's aliasing constructor), and the engine owns it while it is pending. (A blocking
// call's operation is on its caller's stack.)
struct AsyncOp {
  Request::State state;
  P2pOp op;
};

// How a backend moves messages. Called with the engine's lock held (one thread at a time).
class P2pTransport {
 public:
  virtual ~P2pTransport() = default;
  // Moves what it can of `ops` (in the order posted) without waiting, and finishes those that are done (P2pOp::finish,
  // with an error for a receive that cannot take its message). Whether anything moved.
  virtual bool progress(std::deque<P2pOp*>& ops) = 0;
  // Why `peer` will never take part again (it died, or gave up on an error), or "" as far as this transport knows.
  virtual std::string peer_trouble(int peer) = 0;
  // A rank whose dest/source in a message could be (kAnySource aside): whether this rank may name it.
  virtual int size() const = 0;
};

class P2pEngine {
 public:
  P2pEngine(std::unique_ptr<P2pTransport> transport, int rank, int size, const char* backend,
            std::chrono::milliseconds timeout, std::function<void(const std::string&)> abandon);
  ~P2pEngine();  // pending operations fail
  P2pEngine(const P2pEngine&) = delete;
  P2pEngine& operator=(const P2pEngine&) = delete;

  // Checks op's arguments, posts it and drives the transport until it is done.
  Status run(P2pOp& op);
  // Both posted (a before b, checked first), both driven until done (Sendrecv: the receive and the send); a's status,
  // else b's. b may be null: run(a).
  Status run_both(P2pOp& a, P2pOp* b);
  // Drives the transport on this thread until `s` is done (Note [progress on the waiting thread]); once: one pass.
  void drive(Request::State& s, bool once);
  // Checks op's arguments and posts it; the engine's thread drives it, and completes the request.
  Request start(P2pOp op);
  // Checks op's arguments, posts it for one pass of the transport, and takes it back if not done: whether it is done
  // (iprobe).
  Result<bool> once(P2pOp& op);
  // A request that is done already, with s (an argument's error).
  static Request failed(Status s);
  uint64_t forks() const { return forks_; }  // fork_count() when made (Note [crew after fork])

 private:
  Status check(const P2pOp& op) const;
  // One pass: progress, deadlines, completions. With the lock held; the requests to complete go to `done`.
  bool pass(std::vector<std::pair<std::shared_ptr<Request::State>, Status>>& done);
  // The finished operations leave pending_ (moved: set if any did); their requests go to `done`.
  void harvest(std::vector<std::pair<std::shared_ptr<Request::State>, Status>>& done, bool& moved);
  static void complete(std::vector<std::pair<std::shared_ptr<Request::State>, Status>>& done);
  // Breaks point-to-point for good: culprit fails with s, every other pending operation with a note of it.
  void fail_all(const Status& s, P2pOp* culprit);
  void worker();
  // Note [the engine stands by]: a caller is in the engine now (a count, not a time: no clock read per pass; callers
  // on several threads may lose an increment to each other, which only matters if every one were lost).
  void called() { calls_.store(calls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  static constexpr std::chrono::microseconds kStandBy{200};

  std::unique_ptr<P2pTransport> transport_;
  const int rank_, size_;
  const char* backend_;
  const std::chrono::milliseconds timeout_;
  std::function<void(const std::string&)> abandon_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<P2pOp*> pending_;                   // in the order posted
  std::vector<std::shared_ptr<AsyncOp>> owned_;  // the non-blocking ones (P2pOp::owned_at: where)
  uint64_t passes_ = 0;                          // pass() calls (the clock is read every 16th)
  int64_t async_pending_ = 0;
  std::string broken_;                           // why point-to-point is unusable, once it is
  std::chrono::steady_clock::time_point next_liveness_{};
  bool stop_ = false;
  bool worker_asleep_ = false;               // waiting on cv_ for operations to become pending (under mu_)
  std::atomic<uint64_t> calls_{0};           // callers' entries into the engine so far (called())
  std::thread thread_;
  uint64_t forks_;
};

}  // namespace tt::comm
