// comm/shm_p2p: point-to-point messages of the shm backend over the mailboxes of its segments (Note [point-to-point
// rings] in shm_internal.h; the semantics: Note [point-to-point] in p2p.h).
#include <list>

#include "comm/shm_internal.h"

namespace tt::comm {
namespace shm_detail {
namespace {

// A message's frame in the ring, before its bytes.
struct Frame {
  uint64_t bytes;
  int32_t tag;
  int32_t type;
};
static_assert(sizeof(Frame) == 16);

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
  ShmP2p(int rank, int size, std::vector<void*> maps, size_t mail_offset)
      : rank_(rank), size_(size), maps_(std::move(maps)), mail_offset_(mail_offset),
        in_(static_cast<size_t>(size)) {}

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
    std::vector<bool> blocked(static_cast<size_t>(size_), false);
    for (P2pOp* op : ops) {
      if (op->kind != P2pOp::kSend || op->done) continue;
      if (blocked[static_cast<size_t>(op->peer)]) continue;
      moved |= push(*op);
      if (!op->done) blocked[static_cast<size_t>(op->peer)] = true;
    }
    // Receives: first from what has arrived already, then from the rings (which may finish stashed messages that
    // receives wait for: once more then).
    for (int twice = 0; twice < 2; ++twice) {
      moved |= take_stashed(ops);
      bool drained = false;
      for (int i = 0; i < size_; ++i) drained |= pull((next_source_ + i) % size_, ops);
      next_source_ = (next_source_ + 1) % size_;
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

  // A send's frame and as many of its bytes as the ring has room for.
  bool push(P2pOp& op) {
    Mailbox* m = mailbox(op.peer, rank_);
    uint64_t head = m->head.load(std::memory_order_relaxed);  // (ours alone to write)
    const uint64_t tail = m->tail.load(std::memory_order_acquire);
    uint64_t room = kRingBytes - (head - tail);
    bool moved = false;
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
      if (!s->complete) continue;
      const std::string no = refusal(*op, s->source, s->tag, s->bytes, s->type);
      if (no.empty()) {
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
          stash_.push_back(Stashed{source, f.tag, f.type, f.bytes, {}, false, nullptr});
          in.stash = &stash_.back();
          in.stash->data.resize(static_cast<size_t>(f.bytes));
        }
        moved = true;
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

  const int rank_, size_;
  std::vector<void*> maps_;
  const size_t mail_offset_;
  std::vector<Incoming> in_;
  std::list<Stashed> stash_;  // (a list: Incoming and receives point into it)
  int next_source_ = 0;
};

}  // namespace

std::unique_ptr<P2pTransport> make_shm_p2p(int rank, int size, std::vector<void*> maps, size_t mail_offset) {
  return std::make_unique<ShmP2p>(rank, size, std::move(maps), mail_offset);
}

}  // namespace shm_detail
}  // namespace tt::comm
