// comm/shm_p2p: point-to-point messages of the shm backend over the mailboxes of its segments (Note [point-to-point
// rings] in shm_internal.h; the semantics: Note [point-to-point] in p2p.h).
#include <sys/uio.h>

#include <list>

#include "comm/shm_internal.h"

namespace tt::comm {
namespace shm_detail {
namespace {

// A message's frame in the ring, before its bytes.
struct Frame {
  uint64_t bytes;
  int32_t tag;
  int32_t type;  // with kRemote: a Remote follows instead of the bytes
};
static_assert(sizeof(Frame) == 16);

// Note [point-to-point single copy]
// A message of at least the agreed threshold (ShmOptions::p2p_cma_bytes, 32 KiB by default; agreed at init as the
// collectives' single copies are: Note [single copy]) to another rank does not go through the ring: its frame
// (type | kRemote) is followed by a Remote: where the bytes are in the sender's address space, and the message's
// number n among the single copies from this sender to this receiver. The receiver copies the bytes with one
// process_vm_readv straight into the receive that takes it: at once where one is posted, else when one is (the frame
// is kept, without the bytes, among the stashed messages, and the frames after it are read on). Then it marks the
// message taken: Mailbox::taken[n % kTakenSlots] = n. The sender's send is done once its slot says so; until then
// its buffer is read (a blocking Send waits; an Isend's buffer is left alone until its Wait, as MPI says). A later
// message to the same receiver does not wait for an earlier one's copy, but the sender starts message n only once
// n - kTakenSlots is taken. A message the receive refuses (too long, another type) is not copied, and marked taken.
// While an operation of the receiver's own has waited kStashAfter, a single copy no receive has claimed for
// kStashAfter is copied into the stash after all, and marked taken: so that two ranks that Send long messages to each
// other before either Recvs, or a receive for a later tag than a blocking send's, still get through, as with the
// ring (MPI calls such programs unsafe; Open MPI's large messages deadlock there). (Not whenever a copy waits: a rank
// posting a window of receives, each taking its copy as it is posted, would stash the later messages, one copy more
// each.) One copy instead of two through a 64 KiB ring that both sides take turns at, as Open MPI's shared-memory
// transport does (docs/benchmarks/2026-12-06-cpu-p2p-single-copy/).
//
// Note [both sides copy]
// One process_vm_readv is bound by the page walks of one core (13.9 GB/s for 2 MiB from 4 KiB pages on the 2-core
// VM), while the sender of a single copy usually waits for it (a blocking Send, a Wait on its Isends) with a core of
// its own. From ShmOptions::p2p_shared_bytes (256 KiB), where the sender's frame says it will help (kHelped), the
// receiver shares the copy: it writes where the bytes go into the mailbox, then stores `claim`, the message's mark
// (from its number: high 24 bits) and the next byte (low 40: 0), with release. Each side then claims chunks (an
// eighth of the message, from 64 KiB to kSharedChunk: shared_chunk) by compare-and-swap on `claim` (the receiver
// reading its chunk with process_vm_readv, the sender writing its with process_vm_writev, straight between the two
// buffers) and adds each chunk's bytes to `done` once copied. The receive is done, and the message taken (so the
// send too), once `done` is the message's bytes: every chunk either side claimed has been copied.
// - The compare-and-swap is on the whole word, so a claim never lands in another message's copy: the receiver moves
//   to its next copy only after `done` counted every claimed chunk, and the marks tell messages apart (at most kSlots
//   of a pair are in flight). The sender takes the count from its own send, never from the mailbox.
// - The sender claims only while two chunks or more are left, so that the receiver, done with its own, seldom waits
//   for a chunk the sender took late. It offers help (and looks for its message's mark while the message waits to
//   be taken) only where no receive of its own was waiting when it sent: in a Sendrecv both cores are busy with
//   their own receives, and there chunks only cost calls (bidirectional 2 MiB 0.9x of one read a message on the VM).
// - A sender that does not help (busy elsewhere) leaves every chunk to the receiver, as before; a failed write of the
//   sender's marks `failed`, and the receive fails with it; a sender that dies holding a chunk fails it too (the
//   receiver, waiting for that chunk, looks at its peer as a receive's deadline does).
// Shared, the same 2 MiB copy ran at 30.7 GB/s (a C probe of this protocol, the two processes on their own cores); a
// window of 2 MiB sends on the H100 host took 7.2 ms against 15.7 (docs/benchmarks/2026-12-07-h100host-both-sides/).
// Messages of 128 KiB lost on the VM (shared 0.76-0.79 ms a window against 0.69), of 256 KiB gained (3.8-4.0 against
// 5.0-5.1): ShmOptions::p2p_shared_bytes is 256 KiB.
constexpr int32_t kRemote = 1 << 16;
constexpr int32_t kHelped = 1 << 17;  // with kRemote: the sender will help with the copy (Note [both sides copy])
struct Remote {
  uint64_t addr;
  uint64_t number;
};
static_assert(sizeof(Remote) == 16);
constexpr auto kStashAfter = std::chrono::milliseconds(2);
constexpr uint64_t kSlots = Mailbox::kTakenSlots;
// Note [both sides copy]: chunks either side claims; the claim word's mark and byte fields.
constexpr uint64_t kSharedChunk = 256 << 10;
// A message's chunk: an eighth of it, from 64 KiB to kSharedChunk (so that a message from 256 KiB has four or more).
uint64_t shared_chunk(uint64_t bytes) { return std::clamp<uint64_t>(bytes / 8, uint64_t{64} << 10, kSharedChunk); }
constexpr int kClaimShift = 40;
constexpr uint64_t kClaimBytes = (uint64_t{1} << kClaimShift) - 1;
uint64_t claim_mark(uint64_t n) { return ((n & 0x7fffffu) | 0x800000u) << kClaimShift; }  // never 0

constexpr uint64_t kMask = kRingBytes - 1;
static_assert((kRingBytes & kMask) == 0, "a power of two");

// Copies n bytes into the ring at stream position pos (n <= kRingBytes).
void ring_put(Mailbox* m, uint64_t pos, const void* src, size_t n) {
  const size_t at = static_cast<size_t>(pos & kMask);
  const size_t first = std::min(n, kRingBytes - at);
  std::memcpy(m->ring + at, src, first);
  if (n > first) std::memcpy(m->ring, static_cast<const char*>(src) + first, n - first);
}

void ring_get(const Mailbox* m, uint64_t pos, void* dst, size_t n) {
  const size_t at = static_cast<size_t>(pos & kMask);
  const size_t first = std::min(n, kRingBytes - at);
  if (dst != nullptr) {
    std::memcpy(dst, m->ring + at, first);
    if (n > first) std::memcpy(static_cast<char*>(dst) + first, m->ring, n - first);
  }
}

bool matches(const P2pOp& op, int source, int tag) {
  return (op.peer == kAnySource || op.peer == source) && (op.tag == kAnyTag || op.tag == tag);
}

std::string type_name(int32_t type) {
  return type == kBytesType ? std::string("bytes") : std::string(dtype_name(static_cast<DType>(type)));
}

class ShmP2p final : public P2pTransport {
 public:
  ShmP2p(int rank, int size, std::vector<void*> maps, size_t mail_offset, size_t cma_bytes, size_t shared_bytes)
      : rank_(rank), size_(size), maps_(std::move(maps)), mail_offset_(mail_offset), cma_bytes_(cma_bytes),
        shared_bytes_(shared_bytes),
        in_(static_cast<size_t>(size)), remote_sent_(static_cast<size_t>(size), 0) {}

  int size() const override { return size_; }

  std::string peer_trouble(int peer) override {
    if (peer == rank_) return "";
    const Header* h = hdr(peer);
    if (h->aborted.value.load(std::memory_order_acquire) != 0)
      return str_format("rank %d gave up on an error of its own (see its message)", peer);
    if (kill(static_cast<pid_t>(h->pid), 0) != 0 && errno == ESRCH)
      return str_format("rank %d died (its process is gone)", peer);
    return "";
  }

  bool progress(std::deque<P2pOp*>& ops) override {
    bool moved = false;
    // Sends, each destination's in the order posted.
    std::vector<bool>& blocked = blocked_;  // (a member: no allocation a pass; cleared at a pass's first send)
    bool cleared = false;
    for (P2pOp* op : ops) {
      if (op->kind != P2pOp::kSend || op->done) continue;
      if (!cleared) {
        blocked.assign(static_cast<size_t>(size_), false);
        cleared = true;
        pass_ops_ = &ops;  // (Note [both sides copy]: receiving() looks at them, where a long single copy starts)
      }
      if (blocked[static_cast<size_t>(op->peer)]) continue;
      moved |= push(*op);
      // (A single copy waiting to be taken does not hold back the next message: its frame is in the ring.)
      if (!op->done && op->handle == 0) blocked[static_cast<size_t>(op->peer)] = true;
    }
    // Note [point-to-point single copy]: while an operation of this rank has waited kStashAfter, single copies that
    // no receive claimed within kStashAfter, into the stash.
    if (remote_waiting_ > 0) {
      const auto now = std::chrono::steady_clock::now();
      const bool stuck = std::any_of(ops.begin(), ops.end(), [&](const P2pOp* op) {
        return !op->done && op->start != std::chrono::steady_clock::time_point{} && now - op->start > kStashAfter;
      });
      for (Stashed& c : stash_)
        if (stuck && c.remote && !c.complete && now - c.since > kStashAfter) {
          c.data.resize(static_cast<size_t>(c.bytes));
          c.error = read_remote(c.source, c.addr, c.bytes, c.tag, c.data.data());
          c.complete = true;
          taken(c.source, c.number);
          --remote_waiting_;
          moved = true;
        }
    }
    // Receives: first from what has arrived already, then from the rings (which may finish stashed messages that
    // receives wait for: once more then). Note [rings read]: the rings of the sources the posted receives name (none
    // where only sends are posted), or every ring.
    const bool every = ++passes_ % kEveryRingEvery == 0 || !named_sources(ops);
    for (int twice = 0; twice < 2; ++twice) {
      moved |= take_stashed(ops);
      bool drained = false;
      if (every) {
        for (int i = 0; i < size_; ++i) drained |= pull((next_source_ + i) % size_, ops);
        next_source_ = (next_source_ + 1) % size_;
      } else {
        for (const int source : named_) drained |= pull(source, ops);
      }
      moved |= drained;
      if (!drained) break;
    }
    return moved;
  }

 private:
  // A message that arrived before a receive for it: kept here, in arrival order.
  struct Stashed {
    int source;
    int tag;
    int32_t type;
    uint64_t bytes;
    std::vector<char> data;
    bool complete = false;
    P2pOp* claimed = nullptr;  // a receive that takes it once complete
    std::string error;         // a single copy that failed: the receive that takes it fails with this
    // Note [point-to-point single copy]: the bytes are still at the sender's (until complete), here.
    bool remote = false, helped = false;
    uint64_t addr = 0, number = 0;
    std::chrono::steady_clock::time_point since{};
  };
  // Where the message from a source that is being read goes.
  struct Incoming {
    bool in_frame = false;
    Frame frame{};
    uint64_t got = 0;
    P2pOp* to = nullptr;       // straight into a receive's buffer
    Stashed* stash = nullptr;  // or kept for a later receive
    // neither: dropped (a receive that could not take it failed)
  };

  Header* hdr(int r) const { return static_cast<Header*>(maps_[static_cast<size_t>(r)]); }
  Mailbox* mailbox(int segment_of, int from) const {
    return reinterpret_cast<Mailbox*>(static_cast<char*>(maps_[static_cast<size_t>(segment_of)]) + mail_offset_) + from;
  }

  // A send's frame and as many of its bytes as the ring has room for (Note [point-to-point single copy]: or its
  // frame and where its bytes are; then whether the receiver has taken them).
  bool push(P2pOp& op) {
    Mailbox* m = mailbox(op.peer, rank_);
    if (op.handle != 0) {  // a single copy, waiting for the receiver (Note [both sides copy]: helping it)
      const uint64_t n = static_cast<uint64_t>(op.handle);
      if (m->taken[n % kSlots].load(std::memory_order_acquire) < n) return op.help && help_copy(m, op, n);
      op.moved = op.bytes;
      op.finish();
      return true;
    }
    uint64_t head = m->head.load(std::memory_order_relaxed);  // (ours alone to write)
    const uint64_t tail = m->tail.load(std::memory_order_acquire);
    uint64_t room = kRingBytes - (head - tail);
    bool moved = false;
    if (!op.started && cma_bytes_ > 0 && op.bytes >= cma_bytes_ && op.peer != rank_) {
      if (room < sizeof(Frame) + sizeof(Remote)) return false;
      const uint64_t number = remote_sent_[static_cast<size_t>(op.peer)] + 1;
      // (Its slot free: the message kSlots before it taken.)
      if (number > kSlots && m->taken[number % kSlots].load(std::memory_order_acquire) < number - kSlots) return false;
      remote_sent_[static_cast<size_t>(op.peer)] = number;
      // Note [both sides copy]: a single copy's sender helps with it only where it receives nothing itself.
      const bool helps = shared_bytes_ > 0 && op.bytes >= shared_bytes_ && !receiving();
      const Frame f{op.bytes, op.tag, op.type | kRemote | (helps ? kHelped : 0)};
      const Remote at{reinterpret_cast<uint64_t>(op.send), number};
      ring_put(m, head, &f, sizeof(f));
      ring_put(m, head + sizeof(f), &at, sizeof(at));
      m->head.store(head + sizeof(f) + sizeof(at), std::memory_order_release);
      op.started = true;
      op.handle = static_cast<int64_t>(number);
      op.help = helps;
      return true;
    }
    if (!op.started) {
      if (room < sizeof(Frame)) return false;
      const Frame f{op.bytes, op.tag, op.type};
      ring_put(m, head, &f, sizeof(f));
      head += sizeof(f);
      room -= sizeof(f);
      op.started = true;
      moved = true;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(room, op.bytes - op.moved));
    if (n > 0) {
      ring_put(m, head, static_cast<const char*>(op.send) + op.moved, n);
      head += n;
      op.moved += n;
      moved = true;
    }
    if (moved) m->head.store(head, std::memory_order_release);
    if (op.moved == op.bytes) op.finish();
    return moved;
  }

  // Why op cannot take a message of (bytes, type) from source, or "".
  std::string refusal(const P2pOp& op, int source, int tag, uint64_t bytes, int32_t type) const {
    if (op.kind != P2pOp::kRecv) return "";
    if (op.grow == nullptr && bytes > op.bytes)
      return str_format("%s: the message from rank %d (tag %d) is %llu bytes, longer than the receive buffer's %zu "
                        "(it was dropped)",
                        op.describe(rank_).c_str(), source, tag, static_cast<unsigned long long>(bytes), op.bytes);
    if (op.type != kBytesType && type != kBytesType && op.type != type)
      return str_format("%s: the message from rank %d (tag %d) holds %s, the receive buffer %s (it was dropped)",
                        op.describe(rank_).c_str(), source, tag, type_name(type).c_str(), type_name(op.type).c_str());
    return "";
  }

  void finish_info(P2pOp& op, int source, int tag, uint64_t bytes) {
    if (op.info != nullptr) *op.info = MessageInfo{source, tag, static_cast<size_t>(bytes)};
  }

  // Receives and probes that a message already here satisfies (the first posted takes the first arrived).
  bool take_stashed(std::deque<P2pOp*>& ops) {
    if (stash_.empty()) return false;  // (nothing here: a receive is bound only to a stashed message)
    bool moved = false;
    for (P2pOp* op : ops) {
      if (op->kind == P2pOp::kSend || op->done || op->handle != 0) continue;
      Stashed* s = static_cast<Stashed*>(op->bound);
      if (s == nullptr) {
        for (Stashed& c : stash_)
          if ((c.claimed == nullptr || op->kind == P2pOp::kProbe) && matches(*op, c.source, c.tag)) {
            s = &c;
            break;
          }
        if (s == nullptr) continue;
        if (op->kind == P2pOp::kProbe) {  // seen, not taken
          finish_info(*op, s->source, s->tag, s->bytes);
          op->finish();
          moved = true;
          continue;
        }
        s->claimed = op;
        op->bound = s;
        moved = true;
      }
      if (s->remote && !s->complete) {  // Note [point-to-point single copy]: from the sender's memory, now
        take_remote(*op, s->source, s->tag, s->type, s->bytes, s->addr, s->number, s->helped);
        --remote_waiting_;
        op->bound = nullptr;
        stash_.remove_if([s](const Stashed& c) { return &c == s; });
        moved = true;
        continue;
      }
      if (!s->complete) continue;
      const std::string no = s->error.empty() ? refusal(*op, s->source, s->tag, s->bytes, s->type) : "";
      if (!s->error.empty()) {
        op->finish(Status(StatusCode::kIoError, op->describe(rank_) + ": " + s->error));
      } else if (no.empty()) {
        if (op->grow != nullptr) {
          op->grow->swap(s->data);
          op->grow->resize(static_cast<size_t>(s->bytes));
        } else if (s->bytes > 0) {
          std::memcpy(op->recv, s->data.data(), static_cast<size_t>(s->bytes));
        }
        finish_info(*op, s->source, s->tag, s->bytes);
        op->finish();
      } else {
        op->finish(Status(StatusCode::kInvalidArgument, no));
      }
      op->bound = nullptr;
      stash_.remove_if([s](const Stashed& c) { return &c == s; });
      moved = true;
    }
    return moved;
  }

  // Reads what source's ring holds: frames, matched to the first receive posted for them (or stashed), and bytes.
  bool pull(int source, std::deque<P2pOp*>& ops) {
    Mailbox* m = mailbox(rank_, source);
    Incoming& in = in_[static_cast<size_t>(source)];
    uint64_t tail = m->tail.load(std::memory_order_relaxed);  // (ours alone to write)
    const uint64_t head = m->head.load(std::memory_order_acquire);
    bool moved = false;
    while (head != tail) {
      if (!in.in_frame) {
        if (head - tail < sizeof(Frame)) break;  // (a frame is written whole before head moves past it)
        ring_get(m, tail, &in.frame, sizeof(Frame));
        tail += sizeof(Frame);
        // Note [point-to-point single copy]: where the bytes are (written with the frame, before head moved).
        const bool remote = (in.frame.type & kRemote) != 0, helped = (in.frame.type & kHelped) != 0;
        Remote at{};
        if (remote) {
          ring_get(m, tail, &at, sizeof(at));
          tail += sizeof(at);
          in.frame.type &= ~(kRemote | kHelped);
        }
        in.in_frame = true;
        in.got = 0;
        in.to = nullptr;
        in.stash = nullptr;
        const Frame& f = in.frame;
        bool dropped = false;
        for (P2pOp* op : ops) {  // probes see it; the first receive that matches takes it
          if (op->kind == P2pOp::kSend || op->done || op->bound != nullptr || op->handle != 0 ||
              !matches(*op, source, f.tag))
            continue;
          if (op->kind == P2pOp::kProbe) {
            finish_info(*op, source, f.tag, f.bytes);
            op->finish();
            continue;
          }
          const std::string no = refusal(*op, source, f.tag, f.bytes, f.type);
          if (!no.empty()) {
            op->finish(Status(StatusCode::kInvalidArgument, no));
            dropped = true;  // read past, into nowhere
          } else {
            in.to = op;
            op->handle = 1;  // being filled from the ring (take_stashed leaves it alone)
            if (op->grow != nullptr) op->grow->resize(static_cast<size_t>(f.bytes));
          }
          break;
        }
        if (in.to == nullptr && !dropped) {  // no receive for it yet: kept for a later one
          stash_.push_back(Stashed{source, f.tag, f.type, f.bytes, {}, false, nullptr, {}});
          in.stash = &stash_.back();
          if (!remote) in.stash->data.resize(static_cast<size_t>(f.bytes));
        }
        moved = true;
        if (remote) {  // Note [point-to-point single copy]: copied now, or when a receive claims it
          if (in.to != nullptr) {
            in.to->handle = 0;
            take_remote(*in.to, source, f.tag, f.type, f.bytes, at.addr, at.number, helped);
          } else if (in.stash != nullptr) {
            in.stash->remote = true;
            in.stash->helped = helped;
            in.stash->addr = at.addr;
            in.stash->number = at.number;
            in.stash->since = std::chrono::steady_clock::now();
            ++remote_waiting_;
          } else {
            taken(source, at.number);  // refused: not copied
          }
          in.in_frame = false;
          continue;
        }
      }
      // Its bytes, as far as they are here.
      const uint64_t left = in.frame.bytes - in.got;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(head - tail, left));
      if (n > 0) {
        char* dst = nullptr;
        if (in.to != nullptr) dst = (in.to->grow != nullptr ? in.to->grow->data() : static_cast<char*>(in.to->recv));
        else if (in.stash != nullptr) dst = in.stash->data.data();
        ring_get(m, tail, dst != nullptr ? dst + in.got : nullptr, n);
        tail += n;
        in.got += n;
        moved = true;
      }
      if (in.got == in.frame.bytes) {
        if (in.to != nullptr) {
          finish_info(*in.to, source, in.frame.tag, in.frame.bytes);
          in.to->finish();
        } else if (in.stash != nullptr) {
          in.stash->complete = true;
        }
        in.in_frame = false;
      } else {
        break;  // the rest is not here yet
      }
    }
    if (moved) m->tail.store(tail, std::memory_order_release);
    return moved;
  }

  // Note [point-to-point single copy]: the sender's bytes at addr into dst; "" or why not.
  std::string read_remote(int source, uint64_t addr, uint64_t bytes, int tag, char* dst) const {
    for (uint64_t got = 0; got < bytes;) {
      iovec local{dst + got, static_cast<size_t>(bytes - got)};
      iovec remote{reinterpret_cast<void*>(addr + got), static_cast<size_t>(bytes - got)};
      const ssize_t n = process_vm_readv(static_cast<pid_t>(hdr(source)->pid), &local, 1, &remote, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return str_format("the single copy of a message of %llu bytes from rank %d (tag %d) failed: %s "
                          "(TIERTRAIN_COMM_P2P_CMA_BYTES=0 turns them off)",
                          static_cast<unsigned long long>(bytes), source, tag,
                          n < 0 ? std::strerror(errno) : "nothing copied");
      got += static_cast<uint64_t>(n);
    }
    return "";
  }
  // Whether a receive of this rank's is waiting among this pass's operations.
  bool receiving() const {
    return std::any_of(pass_ops_->begin(), pass_ops_->end(),
                       [](const P2pOp* o) { return o->kind == P2pOp::kRecv && !o->done; });
  }
  // Note [both sides copy]: the next chunk of the copy marked `mark` in m ([at, at + len)), claimed; false when none
  // is left (the sender: when fewer than two chunks are) or the mailbox holds another copy.
  static bool claim_chunk(Mailbox* m, uint64_t mark, uint64_t bytes, uint64_t* at, uint64_t* len, bool sender) {
    const uint64_t chunk = shared_chunk(bytes), leave = sender ? 2 * chunk : 1;
    uint64_t c = m->claim.load(std::memory_order_acquire);
    for (;;) {
      if ((c & ~kClaimBytes) != mark || (c & kClaimBytes) + leave > bytes) return false;
      const uint64_t take = std::min(chunk, bytes - (c & kClaimBytes));
      if (m->claim.compare_exchange_weak(c, c + take, std::memory_order_acq_rel, std::memory_order_acquire)) {
        *at = c & kClaimBytes;
        *len = take;
        return true;
      }
    }
  }
  // The sender's part: chunks of its single copy n to op.peer that the receiver shares, written with
  // process_vm_writev; whether any was.
  bool help_copy(Mailbox* m, const P2pOp& op, uint64_t n) const {
    const uint64_t mark = claim_mark(n);
    if ((m->claim.load(std::memory_order_acquire) & ~kClaimBytes) != mark) return false;
    // dst was stored before the claim this acquire saw; if the receiver has moved on to its next copy since (and
    // stored that one's dst), no claim below succeeds: message n is wholly claimed, and the count is this send's own.
    const uint64_t dst = m->dst.load(std::memory_order_relaxed), bytes = op.bytes;
    bool moved = false;
    uint64_t at = 0, len = 0;
    while (claim_chunk(m, mark, bytes, &at, &len, /*sender=*/true)) {
      for (uint64_t put = 0; put < len;) {
        iovec local{const_cast<char*>(static_cast<const char*>(op.send)) + at + put, static_cast<size_t>(len - put)};
        iovec remote{reinterpret_cast<void*>(dst + at + put), static_cast<size_t>(len - put)};
        const ssize_t w = process_vm_writev(static_cast<pid_t>(hdr(op.peer)->pid), &local, 1, &remote, 1, 0);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          m->failed.store(1, std::memory_order_relaxed);
          break;
        }
        put += static_cast<uint64_t>(w);
      }
      m->done.fetch_add(len, std::memory_order_release);
      moved = true;
    }
    return moved;
  }
  // The receiver's part: shares the copy of single copy n from source (bytes at addr there) into dst, copies the
  // chunks it claims, and waits for those the sender claimed; "" or why not.
  std::string read_shared(int source, uint64_t addr, uint64_t bytes, int tag, char* dst, uint64_t n) {
    Mailbox* m = mailbox(rank_, source);
    const uint64_t mark = claim_mark(n);
    m->dst.store(reinterpret_cast<uint64_t>(dst), std::memory_order_relaxed);
    m->failed.store(0, std::memory_order_relaxed);
    m->done.store(0, std::memory_order_relaxed);
    m->claim.store(mark, std::memory_order_release);
    std::string error;
    uint64_t at = 0, len = 0;
    while (claim_chunk(m, mark, bytes, &at, &len, /*sender=*/false)) {
      std::string e = read_remote(source, addr + at, len, tag, dst + at);
      if (!e.empty() && error.empty()) error = std::move(e);
      m->done.fetch_add(len, std::memory_order_release);
    }
    for (int spins = 0; m->done.load(std::memory_order_acquire) < bytes; ++spins) {  // the sender's last chunk
      if (spins < 4096) {
        cpu_relax();
        continue;
      }
      sched_yield();  // (the sender may share this core)
      if (spins % 4096 != 0) continue;
      if (std::string why = peer_trouble(source); !why.empty())
        return str_format("the single copy of a message of %llu bytes from rank %d (tag %d) stopped: %s",
                          static_cast<unsigned long long>(bytes), source, tag, why.c_str());
    }
    if (m->failed.load(std::memory_order_relaxed) != 0 && error.empty())
      error = str_format("the sender's part of the single copy of a message of %llu bytes from rank %d (tag %d) "
                         "failed (TIERTRAIN_COMM_P2P_SHARED_BYTES=0 leaves the copies to the receiver)",
                         static_cast<unsigned long long>(bytes), source, tag);
    return error;
  }
  // The sender's single copy number n from source is taken.
  void taken(int source, uint64_t n) { mailbox(rank_, source)->taken[n % kSlots].store(n, std::memory_order_release); }
  // A receive takes a single copy: straight into its buffer (or refused), and the sender told.
  void take_remote(P2pOp& op, int source, int tag, int32_t type, uint64_t bytes, uint64_t addr, uint64_t n,
                   bool helped) {
    const std::string no = refusal(op, source, tag, bytes, type);
    if (!no.empty()) {
      op.finish(Status(StatusCode::kInvalidArgument, no));
    } else {
      if (op.grow != nullptr) op.grow->resize(static_cast<size_t>(bytes));
      char* dst = op.grow != nullptr ? op.grow->data() : static_cast<char*>(op.recv);
      const bool shared = helped && bytes <= kClaimBytes;
      const std::string error = shared ? read_shared(source, addr, bytes, tag, dst, n)
                                       : read_remote(source, addr, bytes, tag, dst);
      if (error.empty()) {
        finish_info(op, source, tag, bytes);
        op.finish();
      } else {
        op.finish(Status(StatusCode::kIoError, op.describe(rank_) + ": " + error));
      }
    }
    taken(source, n);
  }

  const int rank_, size_;
  std::vector<void*> maps_;
  const size_t mail_offset_;
  const size_t cma_bytes_;     // Note [point-to-point single copy]: from this many bytes (0: never)
  const size_t shared_bytes_;  // Note [both sides copy]: from this many bytes (0: never)
  const std::deque<P2pOp*>* pass_ops_ = nullptr;  // the operations of the pass under way (its sends' receiving())
  std::vector<Incoming> in_;
  std::vector<uint64_t> remote_sent_;  // single-copy messages sent to each rank so far
  int64_t remote_waiting_ = 0;         // stashed single copies whose bytes are still at their senders'
  std::vector<bool> blocked_;          // progress(): the destinations whose next send must wait
  // Note [rings read]
  // A pass read every source's ring twice (its head, a cache line the sender writes), so a message between two ranks
  // cost more the more ranks there were: on the 16-core host the small messages of ranks 0 and 1 were 0.82-0.98x
  // mpi4py's at 8 and 16 ranks, 1.06-1.33x at 2 and 4. So a pass reads only the rings of the sources that the posted
  // receives and probes name, where none is ANY_SOURCE (none where only sends are posted: their completions are in
  // this rank's own mailbox, Note [point-to-point single copy]); every ring otherwise, and every kEveryRingEvery-th
  // pass regardless, so that messages from other sources still reach the stash (a sender waiting for ring room is
  // freed a few passes later, two ranks sending long messages to each other stash them) and the order between
  // sources stays fair. After it, 1.09-1.57x at 8 ranks (record h100host-mpi4py-fast-calls, in git before
  // 2026-12-07; at 16 some sizes stay at 0.87-0.98x). A pass with only sends posted (a window of Isends, a blocking
  // Send) read every ring until 2026-12-06: at 4 ranks the 8 B window was 0.73x in one call.
  static constexpr uint64_t kEveryRingEvery = 16;
  uint64_t passes_ = 0;
  std::vector<int> named_;          // the sources of this pass's receives, each once
  std::vector<uint64_t> named_at_;  // [source]: the pass that named it last

  // Fills named_ from the posted receives and probes (empty where none is posted); false where one takes any source.
  bool named_sources(const std::deque<P2pOp*>& ops) {
    if (named_at_.empty()) named_at_.assign(static_cast<size_t>(size_), 0);
    named_.clear();
    for (const P2pOp* op : ops) {
      if (op->kind == P2pOp::kSend || op->done) continue;
      if (op->peer == kAnySource) return false;
      uint64_t& at = named_at_[static_cast<size_t>(op->peer)];
      if (at == passes_) continue;
      at = passes_;
      named_.push_back(op->peer);
    }
    return true;
  }
  std::list<Stashed> stash_;  // (a list: Incoming and receives point into it)
  int next_source_ = 0;
};

}  // namespace

std::unique_ptr<P2pTransport> make_shm_p2p(int rank, int size, std::vector<void*> maps, size_t mail_offset,
                                           size_t cma_bytes, size_t shared_bytes) {
  return std::make_unique<ShmP2p>(rank, size, std::move(maps), mail_offset, cma_bytes, shared_bytes);
}

}  // namespace shm_detail
}  // namespace tt::comm
