// comm/shm_internal: the shm backend's pieces shared by its files (internal to comm/): the segment layout, the
// Notes of the round protocol, the ShmComm class, and the templates of a round (wait_for, round_fill,
// for_each_chunk). The files: shm.cc (segments, the shared pool's buffers, placement; create_shm), shm_rounds.cc
// (the round protocol: arrival, description checks, the arrival tree, freeing halves), shm_collectives.cc (the
// collectives as rounds), shm_copy.cc (single copies between address spaces, huge-page detection).
#pragma once

#include "comm/shm.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "comm/collective.h"
#include "comm/crew.h"
#include "comm/p2p.h"
#include "comm/pool.h"
#include "comm/reduce.h"
#include "comm/topology.h"
#include "core/log.h"
#include "core/units.h"
#include "memory/numa.h"


namespace tt::comm::shm_detail {


// Note [shm rounds]
// Every collective is a sequence of rounds (one per chunk of at most half a data area; a barrier is one round with
// no data). Round numbers count up over the life of the communicator, alike on every rank. Each segment's two data
// areas (input, result) and its `meta` are in two halves, and round r uses half r % 2, so that a rank can fill its
// next round's input while its peers still read this round's (pipelining: the root of a broadcast copies chunk r + 1
// in while the others copy chunk r out). In round r each rank:
//  1. copies its input into its input half, describes the operation in its meta half and sets `arrived` = r;
//  2. waits until every peer's `arrived` is >= r, and checks every peer's description against its own (a mismatch
//     is an error on every rank, before any data is read; Note [arrival line]);
//  3. reads its peers' input halves (and, for large reductions, reduces its slice into its result half, sets
//     `reduced` = r, waits for every peer's `reduced` and reads their slices).
// Every flag has one writer (its owner), a cache line of its own, and is written with release and read with acquire
// order, so the data written before it is visible to whoever sees it. Nothing waits for the readers of a half before
// it is written again, and nothing needs to: a rank writes half h in rounds r and r + 2 only, and before it writes
// it in round r + 2 it has seen every peer arrive at round r + 1, which no peer does before it has finished round r
// (its reads of half h included). For the same reason a peer is never more than one round ahead of a rank still in
// round r, so the meta half a rank checks in round r is the one its peers wrote for round r. No round ends with a
// barrier. (Rounds that wait for their root alone, Note [rooted rounds], keep the same rule in a general form.)
constexpr uint64_t kMagic = 0x7474636f6d6d3132ull;  // "ttcomm12": halves, arrival lines, single copies, tree, span,
                                                    // shared buffers, agreed single copies by pages, inline rounds,
                                                    // rooted rounds, point-to-point rings, single-copy allreduce
constexpr uint64_t kNoPool = ~uint64_t{0};  // Meta::send_off, recv_off: the buffer is not in the rank's pool

// Note [shared buffers]
// A rank's segment file goes on past its areas into its pool: a sparse range (TIERTRAIN_COMM_POOL bytes, by default
// the size of the file system it is on, at most 1 TiB) that every peer maps with the segment, and out of which
// alloc_buffer hands out buffers (comm/pool.h; pages allocated by fallocate when handed out, released by punching a
// hole when given back; a full pool falls back to private memory). A collective whose buffers are in the pools
// needs no copy through the areas: a peer reads them, and writes into them, where they are. In a reduction round
// of at least kSharedBytes each rank publishes in its meta half where its send and receive buffers are in its pool
// (send_off, recv_off; kNoPool if not), and copies its chunk into its input half only if its send buffer is not in
// the pool. A rank reducing a slice reads each source from that rank's pool or its input half, reduces a block into
// its own result half, and copies the block into the receive buffer of every rank whose receive buffer is in the
// pool; those ranks skip the copy out. Per rank that moves the message about twice (read every source's slice,
// write every result's slice) instead of about five times (copy in, reduce, copy out). In place is safe: the block
// of a rank's buffer that a reducer overwrites is its own slice, read by it alone, and read before it is written.
// Nothing may change or reuse a buffer while peers read or write it: a rank returns only once every peer has set
// `reduced` for the round (the root of a reduce waits for it too where its send buffer is shared). A broadcast root
// whose send buffer is in the pool publishes it instead of copying it in; the others copy from it and set `reduced`,
// which the root waits for before it returns; so do the ranks of an allgather (and a gather's, for its root) whose
// send buffers are in their pools, and of reduce_scatter and alltoall (out of place). Gather and scatter pieces go
// straight into (out of) a root's buffer in its pool, with plain copies instead of the kernel's, where single copies
// are on (Note [single copy]) and in any call of one round. All ranks have a pool or none (its size is part of the
// segment's, checked at the rendezvous), and the chunk sizes that decide kSharedBytes are alike on every rank, so
// every rank takes the same path; each rank's buffers may be in its pool or not, independently. After a failed call
// a peer may still be at a rank's pooled buffers: their ranges are then never handed out again. Where a rank cannot
// map every pool (a limit on address space: ulimit -v), it maps the segments alone, and the ranks agree at init to go
// without pools (Header::pool_ok).
constexpr size_t kSharedBytes = 64 << 10;
// Note [single-copy broadcast]: broadcasts below this many bytes take it at 2 and 3 ranks.
constexpr size_t kBroadcastCopyMax = 1 << 20;

// Note [inline rounds]
// A round of at most kInlineBytes a rank (a scalar allreduce, a small broadcast, gather or allgather) carries each
// rank's input in its arrival line (Arrival::slot, one slot per half), written before the release of `arrived`,
// instead of in its input area. A peer reads the line anyway to see the arrival (flat), so the data comes with it: no
// second line to miss on after the arrival, and one line, not two, for the writer to take back from its readers.
// input(q) points at the slot while inline_ is set: a collective sets it for such a round (inline_round(bytes), alike
// on every rank whose description matches; a mismatch is found before anyone reads), begin() clears it. The slots are
// reused by half exactly as the areas are (Note [shm rounds]: a rank writes half h in round r + 2 only after every
// peer has arrived at r + 1, so after its reads of round r), and through the arrival tree the group lines' release
// and acquire make the slots of every rank visible as they do the areas. TIERTRAIN_COMM_INLINE=0 (on any rank, agreed
// at init) keeps the areas. By default on in worlds of up to 16 ranks (ShmOptions::inline_small says why).
constexpr size_t kInlineBytes = 8;

// Note [rooted rounds]
// A gather, or a reduce whose inputs are read whole (kDirectReduceBytes), of one round that reads nothing from the
// pools (below kSharedBytes a rank, or without pools) moves data from each rank to its root only: the root has to
// wait for every rank, but the others (spokes) need not wait for each other. In step 2 of Note [shm rounds] a spoke
// waits for the root's arrival alone and checks its description against the root's; the root waits for every rank
// and checks them all, as in any round. At 32 ranks the flat wait reads 31 lines on every rank, each line read by
// 31 ranks, and the tree takes two steps; a spoke now reads one line. At 8 and 16 ranks rooted gathers and small
// reduces take no longer than full rounds, often less; at 32 ranks runs disagreed, so the gain is not settled there
// (docs/benchmarks/2026-11-30-h200x2-comm-rooted/). Broadcasts (and scatters, their mirror) were rooted too at first
// and gained nothing: their root writes, so before its next round it must see every rank done with its half all the
// same, and at 32 ranks its wait for 31 lines loses to the tree. They keep full rounds.
// The rule of Note [shm rounds] that makes the halves safe to write again is kept in a general form: before a rank
// writes half h in round r (its meta half, input half, inline slot), whoever read its half in the last round that
// used it (u = use_[h], r - 2 or earlier) has arrived at u + 1, so is done with round u. After a round that waited
// for every rank that holds already (seen_all_); after a rooted one a spoke's reader was its root, and the root's
// were all ranks (free_half). A spoke writes its half again only once the root has passed the round that read it;
// the root waits for every rank each round; so a spoke is at most one round ahead of the root and two of another
// spoke, and each half's reader set holds whoever can still read it.
// Mismatches: the root compares every rank's description with its own, so it finds any difference; a spoke finds
// one between itself and the root. A spoke that agrees with its root returns even where another spoke differed,
// and its next call fails, at once (the root gave up: `aborted`) or at the deadline. Where ranks disagree about the
// kind of a round (one takes a full round, another a rooted one), the full round's rank may read a spoke's arrival
// line while the spoke writes its next round's description there (it did not wait for that rank): the fields are
// written seq first and read seq last (publish, describes), so a torn read finds a seq that is not this round's and
// falls back to the meta halves. A root that gives up waiting because a rank that arrived gave up names that rank's
// difference (wait_for). TIERTRAIN_COMM_ROOTED=0 (on any rank, agreed at init) keeps every round full.
constexpr size_t kPoolGranule = 64 << 10;

struct alignas(64) Flag {
  std::atomic<int64_t> value;
  char pad[64 - sizeof(std::atomic<int64_t>)];
};

// The `arrived` flag of a rank, with a copy of its round's description in the same cache line: the common case of
// step 2 of Note [shm rounds] reads one line per peer (Note [arrival line]).
struct alignas(64) Arrival {
  std::atomic<int64_t> value;
  std::atomic<int64_t> seq;
  std::atomic<uint64_t> count;
  std::atomic<int64_t> packed;  // kind, dtype, op, misuse (a byte each) and root (the upper 32 bits)
  std::atomic<int64_t> ok;      // Note [arrival tree]: in a group line, 1 if the group's members agree with its leader
  char slot[2][8];              // Note [inline rounds]: a small round's input, by half
};
static_assert(sizeof(Arrival) == 64);
static_assert(kInlineBytes <= sizeof(Arrival::slot[0]));

struct alignas(64) Meta {
  int64_t round;
  int64_t seq;
  uint64_t count;  // elements of the collective (not of the chunk)
  int32_t kind;
  int32_t dtype;
  int32_t op;
  int32_t root;
  int32_t misuse;  // a bad argument on this rank (Misuse), reported by every rank instead of a hang
  uint64_t addr;   // Note [single copy]: the root's buffer in its own address space, for its peers' copies
  uint64_t send_off;  // Note [shared buffers]: where this rank's send buffer is in its pool, or kNoPool
  uint64_t recv_off;  // and its receive buffer
};

struct alignas(64) Header {
  std::atomic<uint64_t> magic;  // set last, once the segment is ready
  int32_t rank;
  int32_t size;
  int64_t pid;
  uint64_t buffer_bytes;
  uint64_t self_addr;  // where this rank maps its own segment: its peers' single-copy probe reads its pid there
  std::atomic<uint64_t> cma_bytes;  // Note [single copy]: this rank's threshold if its probes passed, else 0
  std::atomic<uint64_t> p2p_cma_bytes;  // Note [point-to-point single copy]: the same for point-to-point
  std::atomic<uint64_t> cma_exchange_bytes;  // Note [single-copy exchanges]: the same for allgather and alltoall
  std::atomic<uint64_t> cma_allreduce_bytes;  // Note [two-rank single-copy allreduce]: the same for allreduce
  std::atomic<uint64_t> tree_ranks;  // Note [arrival tree]: this rank's TIERTRAIN_COMM_TREE_RANKS
  std::atomic<uint64_t> reduce_span;  // Note [reduction rounds]: this rank's TIERTRAIN_COMM_REDUCE_SPAN
  std::atomic<uint64_t> pool_ok;      // Note [shared buffers]: 1 once this rank has mapped every rank's pool
  std::atomic<uint64_t> cma_huge_bytes;  // Note [single copy by pages]: this rank's TIERTRAIN_COMM_CMA_HUGE_BYTES
  std::atomic<uint64_t> inline_small;    // Note [inline rounds]: 1 if this rank wants them (inline_wanted())
  std::atomic<uint64_t> rooted_small;    // Note [rooted rounds]: 1 if this rank wants them (ShmOptions::rooted)
  Arrival arrived;
  Arrival group;  // Note [arrival tree]: written by a group's leader once its members have arrived
  Flag reduced;
  Flag aborted;  // 1 once this rank has given up on an error: its peers fail at once instead of at the deadline
  Meta meta[2];  // the operation of the round that uses each half
};
static_assert(sizeof(Header) % 64 == 0);

// Note [point-to-point rings]
// Each segment ends (before its pool) in one mailbox per rank of the communicator: mailbox s of rank r's segment is the
// ring that rank s writes its messages to r into (comm/p2p.h: a frame, then the bytes). `head` (bytes written) has
// one writer, the sender; `tail` (bytes taken) one, the receiver; each on a line of its own, stored with release
// after the bytes they cover and loaded with acquire before they are read or overwritten. A ring of 64 KiB a pair
// keeps small messages eager (the send is done once they are in) and costs 64 KiB a rank a peer: 4 MiB a rank at 64
// ranks. A longer message streams through as the receiver drains it.
constexpr size_t kRingBytes = 64 << 10;
struct alignas(64) Mailbox {
  std::atomic<uint64_t> head;
  char pad0[64 - sizeof(std::atomic<uint64_t>)];
  std::atomic<uint64_t> tail;
  char pad1[64 - sizeof(std::atomic<uint64_t>)];
  // Note [point-to-point single copy]: the sender's single-copy message number n is taken (copied out of its memory,
  // or refused) once taken[n % kTakenSlots] == n (one writer, the receiver).
  static constexpr size_t kTakenSlots = 64;
  std::atomic<uint64_t> taken[kTakenSlots];
  // Note [both sides copy] (comm/shm_p2p.cc): the single copy the receiver is making now, in chunks either side
  // claims. `claim`: the message's mark (high 24 bits) and the next byte to claim; the receiver writes dst, failed
  // and done before it stores claim (release).
  std::atomic<uint64_t> claim;
  char pad2[64 - sizeof(std::atomic<uint64_t>)];
  std::atomic<uint64_t> done;    // bytes copied (or given up on), either side
  std::atomic<uint64_t> failed;  // 1 once the sender's part of a copy failed
  std::atomic<uint64_t> dst;     // where the bytes go, in the receiver
  char pad3[64 - 3 * sizeof(std::atomic<uint64_t>)];
  char ring[kRingBytes];
};
static_assert(sizeof(Mailbox) == kRingBytes + 128 + 8 * Mailbox::kTakenSlots + 128);
// Point-to-point over the mailboxes of `maps` (every rank's segment, mapped here; mailboxes at mail_offset).
// cma_bytes: Note [point-to-point single copy] from this many bytes (0: never); shared_bytes: Note [both sides
// copy] from this many bytes (0: never).
std::unique_ptr<P2pTransport> make_shm_p2p(int rank, int size, std::vector<void*> maps, size_t mail_offset,
                                           size_t cma_bytes, size_t shared_bytes);
static_assert(std::atomic<int64_t>::is_always_lock_free);

// Note [arrival tree]
// From TIERTRAIN_COMM_TREE_RANKS ranks up (where every rank asked for it, the largest value asked for counting;
// 0 on any rank turns it off everywhere, as all ranks must take the same path), step 2 of
// Note [shm rounds] goes through a two-level tree instead of every rank reading every peer's arrival line. With the
// flat wait each rank reads n - 1 lines a round, and each line, read by n - 1 ranks, is invalidated in as many caches
// when its owner writes the next round's; at 32 ranks a small collective then costs its wait, whatever it does
// (docs/benchmarks/2026-11-30-h200x2-comm-host-v4/). The ranks form groups of g = ceil(sqrt(n)) consecutive
// ranks; the first of each is its leader. In round r a leader waits for its members' arrival lines, compares their
// descriptions with its own (the fast check of Note [arrival line]), and writes its group line: its description, ok
// = whether all agreed, and value = r with release. Every rank then waits for every leader's group line and passes
// the round if each says ok with its own description. Acquire and release make the chain: a member's writes before
// its arrival are visible to its leader, and the leader's before its group line to every reader of it, so having
// seen every group line at r is having seen every rank arrive at r, and the invariants of Note [shm rounds] hold
// unchanged. A group line can already hold its leader's next round, whose fast check then fails (or passes only if
// the leader, which got ahead, passed round r); a failed fast check falls back to check_metas, which reads every
// rank as without the tree and names the ranks that differ. A wait that runs long names the late ranks from their
// own arrival lines, not their leaders'. A leader reads g - 1 + n / g lines a round and a member n / g, in two steps.
// On by default from 32 ranks (ShmOptions::tree_ranks): there the tree makes small collectives faster; at 16 ranks
// it is slower (two steps where one suffices), at 24 mixed (docs/benchmarks/2026-11-30-h200x2-comm-tuning/).

// Note [streaming stores]
// A large collective's results go into the caller's buffer with streaming (non-temporal) stores: they skip the
// cache, so the destination's lines are not read before they are written, and the copy does not evict the segment
// lines the peers are still reading. A copy with streaming stores runs several times faster than memcpy on one
// thread, and still faster on several (docs/benchmarks/2026-11-30-h200x2-ooc-d4096/host_probe.txt), and the
// copies out of the segments are what bounds large broadcasts, gathers and allgathers. The results then start out of
// the cache, which costs a caller who reads them at once only while they would have fitted in it: hence the
// threshold (ShmOptions::stream_bytes, on the call's whole output at this rank). Copies into the segments stay
// ordinary stores: the peers read them next. A fence after each copy orders the streaming stores before anything
// the rank writes later (a flag, or a release another thread of the caller acquires): comm::stream_copy.
// Only into pages already resident (comm::pages_resident, a mincore of the output; ShmComm::streams_into): a page's
// first touch has the kernel zero it, which brings its lines into the cache, and the streaming stores then only
// evict them again. On the 2-core VM of 2026-12-07 (page faults at 1-2 us each; a C probe, one thread) a 16 MiB
// copy into a fresh mapping took 8.4 ms with memcpy and 11.4 with streaming stores, into fresh transparent huge
// pages (numpy asks for them for large arrays) 1.9 and 4.8, into resident pages 1.2 and 1.4. (A receive buffer
// numpy has just zeroed, as np.zeros_like makes it, is resident, and its lines in the cache: the streaming stores
// cost there too, but mincore cannot tell; see exchange_single_copy.)

// Note [single copy]
// Gather and scatter can move pieces of at least the agreed threshold (TIERTRAIN_COMM_CMA_BYTES a piece) in one
// copy, straight between the ranks' own buffers with process_vm_writev / process_vm_readv (cross memory attach),
// instead of two copies through the segments. Their root copies every piece itself through the
// segments; here each rank copies its own piece, all at once. One round: the root publishes its buffer's address in
// its meta half and arrives; after the usual arrival and description check, every other rank copies its piece
// (gather: into the root's buffer; scatter: out of it) and sets `reduced` = r; the root copies its own piece and
// waits for every `reduced` >= r before it returns (its buffer is in use until then). A failed copy is an error on
// every rank, as any other. Whether the copies can be used is settled once, at init: every rank allows any process
// of its user to attach (PR_SET_PTRACER: needed under Yama's ptrace_scope 1), reads its pid from each peer's
// address space, and publishes its threshold, or 0 if a probe failed or it has them off; after the init barrier
// every rank takes 0 if any rank published 0, else the largest threshold, so that all ranks agree on the path of
// every call. Broadcast and allgather keep the segments: there every rank copies in parallel already, and the
// kernel's copy is no faster than ours (Note [streaming stores]).
// By default (ShmOptions::kCmaAuto) single copies take pieces of 256 KiB and more at any rank count. They make large
// gathers and scatters several times faster (docs/benchmarks/2026-11-30-h200x2-comm-host-v4/): the root no longer
// copies every piece itself. At 256 KiB pieces the two paths are about even, and what a single copy costs depends
// on the pages of the root's buffer (numpy asks for huge pages for large arrays; Note [single copy by pages]). They
// were off below 4 ranks (a 64 MiB gather at 2 ranks lost on the 2-core machine, 2026-11-30) until 2026-12-06: at 2
// ranks there, gathers and scatters of 512 KiB-32 MiB in all took 1.1-3.8x less time with them (C++ comm-bench,
// best of two runs each), and mpi4py_same.py's from 256 KiB pieces ran at 0.95-2.40x mpi4py's with them against
// 0.68-2.23x without (best of 3); a 256 KiB gather lost (1.39x mpi4py against 1.63x). Alltoall stays on the
// segments: each rank reading its block out of every peer's send buffer was 1.5-2.4x slower there (the kernel pins
// every 4 KiB page it reads), and was left out. At 2 and 3 ranks they start at 32 KiB (kCmaAutoBytesFew) since
// 2026-12-07: on that day's 2-core VM, whose two cores pass written lines slowly, mpi4py_same.py's gather and
// scatter of 32 KiB pieces took 2.5 us with them against 4.9 and 5.6 through the segments (mpi4py 4.4, 4.7; best of
// three; docs/benchmarks/2026-12-07-cpu-two-rank-single-copies/).

// Reductions of up to kDirectReduceBytes per round, whose inputs together (ranks x bytes) are at most
// kDirectReduceReads, are reduced whole by every rank (one synchronisation); larger ones are split: each rank
// reduces a slice, then all gather the slices (two synchronisations, and each rank reads about 2x the bytes instead
// of ranks x). The second bound: every rank reading every peer's input costs more than a second synchronisation
// once the inputs together pass a few tens of KiB, so with the first bound alone a 64 KiB allreduce at 32 ranks was
// several times slower than the split path (docs/benchmarks/2026-11-30-h200x2-comm-host-v4/ and
// docs/benchmarks/2026-11-30-h200x2-comm-tuning/, their logs.tar.xz). At 2 ranks both paths take the same time.
constexpr size_t kDirectReduceBytes = 64 << 10;
constexpr size_t kDirectReduceReads = 32 << 10;

// Note [reduction rounds]
// A reduction (reduce, allreduce) takes rounds of at most span / ranks bytes per rank (TIERTRAIN_COMM_REDUCE_SPAN,
// 32 MiB by default; agreed as the largest value asked for, 0 on any rank meaning half an area), and never less than
// kMinReduceRound nor more than half an area. Without the bound a round took half an area, 4 MiB: at 32 ranks that
// is 128 MiB of inputs in flight, out of the cores' caches. The default span's 1 MiB rounds at 32 ranks make
// allreduces of a few MiB faster there; where the bound splits what was one round into two it can cost a little,
// and at 8 ranks, where it leaves 4 MiB rounds, smaller ones were no better
// (docs/benchmarks/2026-11-30-h200x2-comm-tuning/).
constexpr size_t kMinReduceRound = 64 << 10;


// Elements per round for `per` pieces of one chunk each (defined below).
size_t chunk_elems(size_t buffer_bytes, size_t es, size_t pieces);

class ShmComm final : public Communicator {
 public:
  ShmComm(int rank, int size, ShmOptions options) : rank_(rank), size_(size), given_(options), opt_(std::move(options)) {}
  ~ShmComm() override {
    stop_progress();  // queued operations use the segments
    if (profile_ && prof_.rounds > 0) {
      const double k = 1e6 / static_cast<double>(prof_.rounds);
      // One write, so that the ranks' lines do not interleave.
      const std::string line = str_format(
          "shm profile, rank %d of %d: %lld rounds; per round (us): fill %.2f, arrival %.2f, work %.2f "
          "(reductions: reduce %.2f, waiting for the slices %.2f, slices out %.2f)\n",
          rank_, size_, static_cast<long long>(prof_.rounds), prof_.fill * k, prof_.arrive * k, prof_.work * k,
          prof_.reduce * k, prof_.wait_reduced * k, prof_.out * k);
      [[maybe_unused]] const ssize_t written = ::write(2, line.data(), line.size());
    }
    for (size_t i = 0; i < maps_.size(); ++i)
      if (maps_[i]) munmap(maps_[i], map_len_[i]);
    if (pool_fd_ >= 0) ::close(pool_fd_);
    if (!own_name_.empty()) unlink_own();
  }

  Status init();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "shm"; }
  // Note [shared buffers]: out of this rank's pool where it has room, else private memory.
  Result<void*> alloc_buffer(size_t bytes) override;
  void free_buffer(void* p) override;
  int64_t sequence() const override { return seq_.load(std::memory_order_relaxed); }
  std::string placement() const override { return placement_; }
  void abandon(const std::string& why) override {
    broken_.set_first("abandoned: " + why);
    hdr(rank_)->aborted.value.store(1, std::memory_order_release);
  }
  std::chrono::milliseconds timeout() const override { return opt_.common.timeout; }
  // Note [point-to-point rings].
  std::unique_ptr<P2pTransport> make_p2p_transport() override {
    return make_shm_p2p(rank_, size_, maps_, mail_offset(), p2p_cma_bytes_, opt_.p2p_shared_bytes);
  }
  bool peer_gave_up() const override {
    for (int q = 0; q < size_; ++q)
      if (q != rank_ && hdr(q)->aborted.value.load(std::memory_order_acquire) != 0) return true;
    return false;
  }

  Status do_barrier() override {
    TT_TRY(begin(kBarrier, 0, DType::kF32, Op::kSum, -1));
    return round(nullptr, 0, [](int64_t) { return Status::ok(); });
  }
  Status do_broadcast(const void* send, void* recv, size_t count, DType dtype, int root) override;
  Status do_reduce(const void* send, void* recv, size_t count, DType dtype, Op op, int root) override;
  Status do_allreduce(const void* send, void* recv, size_t count, DType dtype, Op op) override;
  Status do_gather(const void* send, void* recv, size_t count, DType dtype, int root) override;
  Status do_scatter(const void* send, void* recv, size_t count, DType dtype, int root) override;
  Status do_allgather(const void* send, void* recv, size_t count, DType dtype) override;
  Status do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype, Op op) override;
  Status do_alltoall(const void* send, void* recv, size_t count, DType dtype) override;
  // Note [single-copy exchanges]: allgather (alltoall false) or alltoall of blocks of `bytes`, each read straight
  // out of its peer's buffer. src: this rank's block (allgather) or its size() blocks (alltoall), as the peers read.
  Status exchange_single_copy(const char* src, char* dst, size_t bytes, bool alltoall);
  // Note [two-rank single-copy allreduce]: whether an allreduce of this many bytes takes it (alike on every rank), and
  // the call.
  bool allreduce_in_one_copy(size_t bytes) const {
    return size_ == 2 && cma_allreduce_bytes_ > 0 && bytes >= cma_allreduce_bytes_;
  }
  Status allreduce_single_copy(const char* src, char* dst, size_t count, DType dtype, Op op);
  // Note [single-copy broadcast]: whether a broadcast of this many bytes takes it (alike on every rank), and the
  // round that makes it.
  bool broadcast_in_one_copy(size_t bytes) const {
    return size_ > 1 && size_ < ShmOptions::kCmaFewRanks && single_copy(bytes) && bytes < kBroadcastCopyMax;
  }
  Status broadcast_single_copy(const char* src, char* dst, size_t bytes, int root);
  // Note [split] in comm/comm.h: the group's own segments, named after this job's id and the split's tag.
  Result<std::unique_ptr<Communicator>> make_split(const std::vector<int>& members, int new_rank,
                                                  const std::string& tag) override;

 private:
  Header* hdr(int r) const { return static_cast<Header*>(maps_[static_cast<size_t>(r)]); }
  // The halves of rank r's areas that the current round uses (Note [shm rounds]), half_bytes() each.
  char* input(int r) const {
    return inline_ ? hdr(r)->arrived.slot[half_]  // Note [inline rounds]
                   : reinterpret_cast<char*>(hdr(r)) + sizeof(Header) + half_ * half_bytes();
  }
  // Note [inline rounds]: whether a round of `bytes` a rank carries its data in the arrival lines (alike on every
  // rank whose description matches; set before the round, by the collectives that may).
  bool inline_round(size_t bytes) const { return inline_on_ && bytes <= kInlineBytes; }
  char* result(int r) const { return reinterpret_cast<char*>(hdr(r)) + sizeof(Header) + opt_.buffer_bytes + half_ * half_bytes(); }
  size_t half_bytes() const { return opt_.buffer_bytes / 2 / 64 * 64; }
  size_t mail_offset() const { return sizeof(Header) + 2 * opt_.buffer_bytes; }  // (buffer_bytes: 64-byte multiples)
  std::string segment_path(int r) const;
  void unlink_own();

  // Starts collective number seq_ + 1 (after checking that no earlier error broke the communicator). A bad root, or
  // in place where only the root may ask for it, is recorded as misuse: the call then runs one empty round, in
  // which every rank sees it and fails (misused() says so).
  // out_bytes: the call's output at this rank (Note [streaming stores]).
  Status begin(int32_t kind, size_t count, DType dtype, Op op, int root, bool in_place_misuse = false,
               size_t out_bytes = 0);
  bool misused() const { return cur_.misuse != kNoMisuse; }
  Status fail_misuse() { return round(nullptr, 0, [](int64_t) { return Status::ok(); }); }
  // One round: steps 1-3 of Note [shm rounds] with `bytes` of input copied from `in` (or written by fill), then
  // work(round), then step 5.
  // hub >= 0: a rooted round of that root (Note [rooted rounds]).
  template <typename Work>
  Status round(const void* in, size_t bytes, Work&& work, int hub = -1) {
    return round_fill([&](char* dst) { crew_copy(dst, in, bytes, false); }, std::forward<Work>(work), hub);
  }
  // The same, with the input written into this rank's input area by fill(area) (no staging copy).
  template <typename Fill, typename Work>
  Status round_fill(Fill&& fill, Work&& work, int hub = -1);
  // Waits until flag(peer) >= target for every peer (or for `only` if >= 0); on a timeout or a dead peer, an error
  // naming them, and the communicator is broken.
  template <typename F>
  Status wait_all(F Header::*flag, int64_t target, const char* what, int only = -1) {
    return wait_for(flag, target, what, [only](int r) { return only < 0 || r == only; }, false);
  }
  // The same for the peers pick(r) names. With blame_arrivals a wait that runs long names as late the ranks whose own
  // arrival line is behind target, where there are any (Note [arrival tree]: a group line waits for its members).
  template <typename F, typename Pick>
  Status wait_for(F Header::*flag, int64_t target, const char* what, Pick&& pick, bool blame_arrivals);
  // Note [arrival tree]: step 2 of Note [shm rounds] through the group leaders, and the description check after it.
  Status arrive_tree(int64_t r);
  Status check_tree();
  int leader_of(int q) const { return q / group_ * group_; }
  // Note [single copy]: the path of a call whose pieces are piece_bytes each.
  bool single_copy(size_t piece_bytes) const { return cma_bytes_ > 0 && piece_bytes >= cma_bytes_; }
  // Note [single-copy exchanges]: whether an allgather or alltoall of blocks of this size takes them (alike on every
  // rank).
  bool exchange_in_one_copy(size_t block_bytes) const {
    return size_ > 1 && cma_exchange_bytes_ > 0 && block_bytes >= cma_exchange_bytes_;
  }
  // Note [single copy], Note [single copy by pages]: one round of a gather (or a scatter) whose ranks copy their own
  // pieces into (out of) the root's buffer. With root_picks (below the threshold, where the call is one round:
  // paged_candidate) the root takes that path only if its buffer is on huge pages, else the segments, and the others
  // follow it.
  Status single_copy_round(const void* send, void* recv, size_t count, DType dtype, int root, bool gather,
                           bool root_picks);
  // (Where single copies are off, a root's buffer in its pool still takes them: Note [shared buffers].)
  bool paged_candidate(size_t count, size_t es, bool gather) const {
    if (count == 0 || chunk_elems(half_bytes(), es, gather ? 1 : static_cast<size_t>(size_)) < count) return false;
    const size_t bytes = count * es;  // one round's: no overflow
    // What the root may choose, from what every rank knows alike: a pooled buffer from kSharedBytes in all, or
    // single copies into huge pages from the agreed cma_huge_bytes_ a piece. Below both, all take the segments
    // without waiting to be told.
    const bool may_pick = (pool_ != nullptr && bytes * static_cast<size_t>(size_) >= kSharedBytes) ||
                          (cma_bytes_ > 0 && cma_huge_bytes_ > 0 && bytes >= cma_huge_bytes_);
    return may_pick && (cma_bytes_ == 0 || bytes < cma_bytes_);
  }
  // Copies bytes between local memory and rank q's memory at `remote` (its address space): all of them, or an
  // error naming q.
  Status cma_copy(int q, void* local, uint64_t remote, size_t bytes, bool write);
  // The same without an error: 0, errno, or -1 where nothing was copied; safe on the crew's helpers (cma_failed,
  // on the calling thread, then makes the error).
  int cma_move(int q, void* local, uint64_t remote, size_t bytes, bool write) const;
  Status cma_failed(int q, int err, bool write);
  // The `bytes` at byte `at` of a buffer of rank q's (its address `remote` there, its offset `pooled` in q's pool or
  // kNoPool) into `to`: out of the pool by copy(to, from, bytes) (Note [shared buffers]: read where it is), else in one
  // kernel copy (with `crew`: one a crew thread, parts of at least 64 KiB).
  template <typename Copy>
  Status read_peer(int q, uint64_t pooled, uint64_t remote, size_t at, char* to, size_t bytes, bool crew, Copy&& copy) {
    if (pooled != kNoPool) {
      copy(to, pool_base(q) + pooled + at, bytes);
      return Status::ok();
    }
    const int parts = crew && crew_ != nullptr ? crew_->size() : 1;
    if (parts == 1) return cma_copy(q, to, remote + at, bytes, false);
    int failed[Crew::kMaxThreads] = {};  // each part's error (helpers do not touch the communicator)
    crew_->run([&](int i) {
      size_t a = 0, b = 0;
      share(bytes, parts, i, 64 << 10, &a, &b);
      if (b > a) failed[i] = cma_move(q, to + a, remote + at + a, b - a, false);
    });
    for (int i = 0; i < parts; ++i)
      if (failed[i] != 0) return cma_failed(q, failed[i], false);
    return Status::ok();
  }
  // Whether this rank asks for any single copy (Note [single copy] and the others), so lets its peers attach and
  // probes them: the thresholds this world can use (the allreduce's: 2 ranks only).
  bool wants_single_copies() const {
    return size_ > 1 && (opt_.cma_bytes > 0 || opt_.p2p_cma_bytes > 0 || opt_.cma_exchange_bytes > 0 ||
                         (opt_.cma_allreduce_bytes > 0 && size_ == 2));
  }
  void probe_single_copy();
  Status fail(Status s) {
    broken_.set(s.message());
    failed_.store(true, std::memory_order_relaxed);
    hdr(rank_)->aborted.value.store(1, std::memory_order_release);
    return s;
  }
  // The description check of step 2 (Note [arrival line]) against every peer, or against `only` alone.
  Status check_metas(int only = -1);
  // scatter, reduce_scatter, alltoall: from src (size() pieces of `count` elements of es bytes), the `bytes` from
  // element `off` of every piece, one after the other in `area`.
  void lay_out_pieces(char* area, const char* src, size_t count, size_t off, size_t bytes, size_t es) const {
    for (int q = 0; q < size_ && bytes > 0; ++q)
      std::memcpy(area + static_cast<size_t>(q) * bytes, src + (static_cast<size_t>(q) * count + off) * es, bytes);
  }
  // The rounds of reduce and allreduce (root -1: every rank wants the result), and of gather and allgather.
  Status reduce_rounds(const void* send, void* recv, size_t count, DType dtype, Op op, int root);
  Status gather_rounds(const void* send, void* recv, size_t count, DType dtype, int root);

  int rank_, size_;
  const ShmOptions given_;  // as asked for, before init resolved its automatic values for this size (split's options)
  ShmOptions opt_;
  std::vector<void*> maps_;
  size_t seg_bytes_ = 0;
  // Note [shared buffers]: the pool after each segment (mapped with it), the segment file kept open to allocate and
  // release the pool's pages, and which of its ranges are in use.
  size_t pool_bytes_ = 0;
  int pool_fd_ = -1;
  std::vector<size_t> map_len_;  // how much of each rank's file this rank mapped (map_bytes(), or the segment alone)
  bool pools_mapped_ = true;     // every pool mapped here (else, agreed at init, no rank uses the pools)
  std::unique_ptr<PoolRanges> pool_;
  std::atomic<bool> pool_full_said_{false};
  size_t map_bytes() const { return seg_bytes_ + pool_bytes_; }
  char* pool_base(int q) const { return static_cast<char*>(maps_[static_cast<size_t>(q)]) + seg_bytes_; }
  // Where [p, p + bytes) is in this rank's pool, or kNoPool.
  uint64_t pool_offset(const void* p, size_t bytes) const {
    if (pool_ == nullptr || p == nullptr) return kNoPool;
    const char* b = pool_base(rank_);
    const char* c = static_cast<const char*>(p);
    return c >= b && c < b + pool_bytes_ && bytes <= static_cast<size_t>(b + pool_bytes_ - c)
               ? static_cast<uint64_t>(c - b)
               : kNoPool;
  }
  std::vector<uint64_t> peer_send_, peer_recv_;  // Note [shared buffers]: the peers' offsets of the current round
  bool may_share_ = false;  // this round's send buffers may be in pools (publish_send)
  // Note [shared buffers]: whether a chunk of `total` bytes of this rank's send buffer (in the pool at `at`, or
  // kNoPool) is read where it is; publishes where (at + off_bytes) for the round.
  // Every rank calls it in each round that uses send_of, with the same total.
  bool publish_send(uint64_t at, size_t off_bytes, size_t total) {
    may_share_ = total >= kSharedBytes && pool_ != nullptr;  // alike on every rank (pools are on everywhere or nowhere)
    const bool shared = may_share_ && at != kNoPool;
    cur_.send_off = shared ? at + off_bytes : kNoPool;
    return shared;
  }
  // Where this round's data from rank q is: in q's pool (at its published send_off, plus pool_extra bytes) or in its
  // input half (plus half_extra bytes). Where no rank can have published one (may_share_ false), q's meta half is
  // not read: for small rounds that saves a miss on q's line before the one on its data.
  const char* send_of(int q, size_t pool_extra, size_t half_extra) const {
    if (!may_share_) return input(q) + half_extra;
    const uint64_t at = q == rank_ ? cur_.send_off : hdr(q)->meta[half_].send_off;
    return at != kNoPool ? pool_base(q) + at + pool_extra : input(q) + half_extra;
  }
  // Waits until this rank's readers (every peer, or `only`) have set `reduced` for round `last` (0: none read).
  Status wait_readers(int64_t last, const char* what, int only = -1) {
    if (last <= 0 || size_ == 1) return Status::ok();
    return wait_all(&Header::reduced, last, what, only);
  }
  // Maps rank r's file: segment and pool, or where the address space does not allow it, the segment alone (and
  // then no rank uses the pools).
  void* map_file(int fd, int r) {
    void* p = mmap(nullptr, map_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    size_t len = map_bytes();
    if (p == MAP_FAILED && pool_bytes_ > 0 && errno == ENOMEM) {
      p = mmap(nullptr, seg_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      len = seg_bytes_;
      pools_mapped_ = false;
    }
    if (p != MAP_FAILED) map_len_[static_cast<size_t>(r)] = len;
    return p;
  }
  std::string own_name_;
  std::atomic<int64_t> seq_{0};  // collectives started (read by sequence() from any thread)
  int64_t round_ = 0;  // rounds started
  size_t half_ = 0;    // the half of the areas the current round uses (round_ % 2)
  Meta cur_{};         // the collective in progress
  bool stream_ = false;  // its results go out with streaming stores (Note [streaming stores])
  size_t cma_bytes_ = 0;  // the agreed single-copy threshold (Note [single copy]); 0: off
  size_t cma_huge_bytes_ = 0;  // the agreed threshold of Note [single copy by pages]; 0: off
  size_t p2p_cma_bytes_ = 0;   // the agreed threshold of Note [point-to-point single copy]; 0: off
  size_t cma_exchange_bytes_ = 0;  // the agreed threshold of Note [single-copy exchanges]; 0: off
  size_t cma_allreduce_bytes_ = 0;  // the agreed threshold of Note [two-rank single-copy allreduce]; 0: off
  std::vector<char> allreduce_tmp_;  // Note [two-rank single-copy allreduce]: a chunk of the peer's half a thread
  std::vector<char> exchange_copy_;  // an in-place alltoall's send blocks, apart while its peers read them (that call)
  bool inline_on_ = false;  // Note [inline rounds]: agreed at init (a world of one: this rank's setting)
  // This rank's setting (Note [inline rounds]): TIERTRAIN_COMM_INLINE, or by the world's size where it is unset.
  bool inline_wanted() const {
    return opt_.inline_small < 0 ? size_ <= ShmOptions::kInlineAutoRanks : opt_.inline_small != 0;
  }
  bool inline_ = false;     // the current round's input is in the arrival lines (reset by begin())
  // Note [rooted rounds]: agreed at init (a world of one has no peers to wait for either way).
  bool rooted_on_ = false;
  // The hub of a rooted collective's round (Note [rooted rounds]): its root where the call is one round (count
  // elements in rounds of `chunk`) that reads nothing from the pools (after publish_send), else -1. Alike on every
  // rank whose description matches.
  int rooted_hub(size_t count, size_t chunk, int root) const {
    return rooted_on_ && count <= chunk && !may_share_ ? root : -1;
  }
  // Note [rooted rounds]: the last round that used each half, and who read this rank's half in it (a rank, or -1:
  // every peer); and a round every peer is known to have arrived at.
  struct HalfUse {
    int64_t round = 0;
    int reader = -1;
  };
  HalfUse use_[2];
  int64_t seen_all_ = 0;
  int64_t seen_hub_ = 0;  // and the last round a spoke saw its hub arrive at (hub_seen_ the hub; -1: none)
  int hub_seen_ = -1;
  // Waits until the readers of the current half's last round are done with it (Note [rooted rounds]).
  Status free_half();
  size_t reduce_round_bytes_ = 0;  // Note [reduction rounds]: the most bytes a reduction round takes per rank
  int group_ = 0;  // Note [arrival tree]: ranks per group when rounds arrive through the tree; 0: flat
  // Copies part of the collective's result into the caller's buffer, shared out over the crew when it is large
  // (Note [crew]); deliver_one on one thread.
  // stream: streams_into's answer for the whole output the piece is part of.
  static void deliver_one(void* dst, const void* src, size_t bytes, bool stream) {
    if (stream) {
      stream_copy(dst, src, bytes);
    } else {
      std::memcpy(dst, src, bytes);
    }
  }
  // Whether a result going into [dst, dst + bytes) takes streaming stores: a large call's, into pages already
  // resident (Note [streaming stores]).
  bool streams_into(const void* dst, size_t bytes) const { return stream_ && pages_resident(dst, bytes); }
  void deliver(void* dst, const void* src, size_t bytes) const { crew_copy(dst, src, bytes, streams_into(dst, bytes)); }
  // Copies bytes (stream: as deliver_one; a piece of a larger output passes streams_into's answer for the whole, so
  // that a loop of small pieces asks once), over the crew from ShmOptions::thread_bytes.
  void crew_copy(void* dst, const void* src, size_t bytes, bool stream) const {
    if (crew_ == nullptr || crew_->size() == 1 || bytes < opt_.thread_bytes) {
      if (bytes > 0) deliver_one(dst, src, bytes, stream);
      return;
    }
    crew_->run([&](int i) {
      size_t b = 0, e = 0;
      share(bytes, crew_->size(), i, 4096, &b, &e);
      if (e <= b) return;
      deliver_one(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, e - b, stream);
    });
  }
  std::unique_ptr<Crew> crew_;  // Note [crew]: this rank's helper threads (null until init)
  // A reduction's sources, size() for each part of the crew (the first size() the caller's; reduce_scatter uses
  // those alone).
  std::vector<const void*> reduce_srcs_;
  Broken broken_;  // (read and written from several threads)
  // Set with broken_ (read by free_buffer from any thread): after a failed call a peer may still be reading or
  // writing this rank's pooled buffers, so their ranges are not handed out again (Note [shared buffers]).
  std::atomic<bool> failed_{false};
  std::string placement_ = "where first touched";
  int placed_node_ = -1;  // the one node place() asked for (-1: none, or several)
  Status place(void* p);  // the memory policy of our own segment, before its first touch
  // TIERTRAIN_COMM_PROFILE=1: seconds spent in each phase of the rounds, printed by every rank when it closes.
  struct Phases {
    double fill = 0, arrive = 0, work = 0, reduce = 0, wait_reduced = 0, out = 0;
    int64_t rounds = 0;
  };
  bool profile_ = false;
  Phases prof_;
  // Adds the seconds since *t to *phase and moves *t to now (profiling only).
  void lap(double* phase, std::chrono::steady_clock::time_point* t) {
    const auto now = std::chrono::steady_clock::now();
    *phase += std::chrono::duration<double>(now - *t).count();
    *t = now;
  }
  int64_t jitter_us_ = 0;  // TIERTRAIN_COMM_JITTER_US (tests): a rank- and round-dependent delay before each write
  // The delay is 0 to size() times jitter_us_, scattered over ranks and rounds (a hash of both), so that every
  // order of a round's writers and readers comes up (a delay of (rank + round) % size missed a writer that did not
  // wait for its readers, which the hash found).
  void jitter(int64_t r) const {
    if (jitter_us_ <= 0) return;
    uint64_t h =
        static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank_) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 29;
    std::this_thread::sleep_for(std::chrono::microseconds(jitter_us_ * static_cast<int64_t>(h % (size_ + 1))));
  }
};


template <typename F, typename Pick>
Status ShmComm::wait_for(F Header::*flag, int64_t target, const char* what, Pick&& pick, bool blame_arrivals) {
  const auto start = std::chrono::steady_clock::now();
  auto next_liveness = start + std::chrono::milliseconds(100);
  const auto done = [&] {
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && pick(r) && (hdr(r)->*flag).value.load(std::memory_order_acquire) < target) return false;
    return true;
  };
  for (uint64_t spin = 0;; ++spin) {
    if (done()) return Status::ok();
    if (spin < 4096) continue;  // short waits spin
    if ((spin & 63) == 0) {
      // (Tests) a pause between the look above and the looks below, in which peers may pass this wait, give up on
      // their next call and exit: the wait must still succeed (the second look, below).
      if (jitter_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(jitter_us_));
      const auto now = std::chrono::steady_clock::now();
      // behind: the peers this wait is for whose flag is behind; late: those named as late (with blame_arrivals, the
      // ranks whose own arrival is behind, where there are any). Either may have died.
      std::vector<int> behind, late, dead;
      for (int r = 0; r < size_; ++r)
        if (r != rank_ && pick(r) && (hdr(r)->*flag).value.load(std::memory_order_acquire) < target) behind.push_back(r);
      for (int r = 0; r < size_ && blame_arrivals; ++r)
        if (r != rank_ && hdr(r)->arrived.value.load(std::memory_order_acquire) < target) late.push_back(r);
      if (late.empty()) late = behind;
      if (now >= next_liveness)
        for (int r = 0; r < size_; ++r)
          if (r != rank_ && (std::find(late.begin(), late.end(), r) != late.end() ||
                             std::find(behind.begin(), behind.end(), r) != behind.end()) &&
              kill(static_cast<pid_t>(hdr(r)->pid), 0) != 0 && errno == ESRCH)
            dead.push_back(r);
      if (now >= next_liveness) next_liveness = now + std::chrono::milliseconds(100);
      auto list = [](const std::vector<int>& v) {
        std::string s;
        for (int r : v) s += (s.empty() ? "" : ", ") + std::to_string(r);
        return s;
      };
      std::vector<int> gave_up;
      for (int q = 0; q < size_; ++q)
        if (q != rank_ && hdr(q)->aborted.value.load(std::memory_order_acquire) != 0) gave_up.push_back(q);
      // Read again after the peers' `aborted` (and their liveness): a peer writes its flag before it gives up or
      // exits, so a wait whose peers all got there is done, even if they gave up or died since. (Between the check
      // at the top and here, this rank may have slept while its peers passed this round, failed their next call and
      // exited: the wait was satisfied, and this call must not fail for it; its next call does.)
      if (done()) return Status::ok();
      // A rank that gave up after arriving at this round with another description (it found the mismatch first:
      // Note [rooted rounds]) is named for that difference. Its meta half holds this round's: it writes no more.
      // (The arrival lines, or the tree's group lines.)
      // A rank with a bad argument of its own names that (check_metas lists this rank's misuse whatever `only` is).
      if constexpr (std::is_same_v<F, Arrival>)
        if (target == cur_.round && !gave_up.empty()) {
          if (cur_.misuse != kNoMisuse) return check_metas(rank_);
          for (int q : gave_up)
            if (hdr(q)->arrived.value.load(std::memory_order_acquire) == target)
              if (Status m = check_metas(q); !m.is_ok()) return m;
        }
      if (!gave_up.empty())
        return fail(make_status(StatusCode::kAborted,
                                "%s #%lld (rank %d of %d): rank(s) %s gave up on an error of their own (see their "
                                "message) while %s, still waiting for rank(s) %s",
                                kind_name(cur_.kind), static_cast<long long>(cur_.seq), rank_, size_,
                                list(gave_up).c_str(), what, list(late).c_str()));
      if (!dead.empty())
        return fail(make_status(StatusCode::kAborted,
                                "%s #%lld (rank %d of %d): rank(s) %s died (their process is gone) while %s",
                                kind_name(cur_.kind), static_cast<long long>(cur_.seq), rank_, size_,
                                list(dead).c_str(), what));
      if (now - start > opt_.common.timeout)
        return fail(make_status(StatusCode::kDeadlineExceeded,
                                "%s #%lld (rank %d of %d): rank(s) %s did not arrive within %.1f s "
                                "(TIERTRAIN_COMM_TIMEOUT) while %s: they are behind, stuck, or called a different "
                                "sequence of collectives",
                                kind_name(cur_.kind), static_cast<long long>(cur_.seq), rank_, size_, list(late).c_str(),
                                opt_.common.timeout.count() / 1000.0, what));
    }
    if (spin < 65536) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}


// Note [arrival line]
// A rank writes its round's description (seq, count, kind, dtype, op, root, misuse) into its arrival line with
// relaxed stores, then `arrived` = r with release. Having seen every peer's `arrived` >= r, a rank compares the
// descriptions there with its own; if all are equal and no rank (itself included) reports a misuse, the round checks
// out. The line may already hold a peer's next round (a peer can be one round ahead, and its stores may be seen
// half done), but a peer only gets ahead after its own check of round r passed against this rank's description, so
// a peer that is ahead agrees with this rank about round r (a spoke of a rooted round checks the root alone, and
// every other rank only where the ranks disagree about the kind of the round: Note [rooted rounds]). Whatever it reads there, the fast check passes only if
// the round checks out; when it does not pass, the full check reads the meta halves (which hold round r's
// descriptions, Note [shm rounds]) and names the ranks and fields that differ.
inline int64_t pack_description(const Meta& m) {
  return (static_cast<int64_t>(m.kind) & 0xff) | (static_cast<int64_t>(m.dtype) & 0xff) << 8 |
         (static_cast<int64_t>(m.op) & 0xff) << 16 | (static_cast<int64_t>(m.misuse) & 0xff) << 24 |
         static_cast<int64_t>(static_cast<uint32_t>(m.root)) << 32;
}

// Writes round r's description (packed: pack_description(m)) into a line, then its value = r with release: an
// arrival line, or a group line (Note [arrival tree]).
// The description goes in seq first and is read seq last, each store a release and each load an acquire: a reader
// that finds the old seq found the old count and packed too (Note [rooted rounds]). Free on x86.
inline void publish(Arrival& a, const Meta& m, int64_t packed, int64_t r) {
  a.seq.store(m.seq, std::memory_order_relaxed);
  a.count.store(m.count, std::memory_order_release);
  a.packed.store(packed, std::memory_order_release);
  a.value.store(r, std::memory_order_release);
}

// Whether a line describes the round as m does (the fast check of Note [arrival line]).
inline bool describes(const Arrival& a, const Meta& m, int64_t packed) {
  return a.packed.load(std::memory_order_acquire) == packed && a.count.load(std::memory_order_acquire) == m.count &&
         a.seq.load(std::memory_order_acquire) == m.seq;
}


template <typename Fill, typename Work>
Status ShmComm::round_fill(Fill&& fill, Work&& work, int hub) {
  const int64_t r = ++round_;
  Header* me = hdr(rank_);
  half_ = static_cast<size_t>(r % 2);
  // Note [rooted rounds]: the readers of this half in its last round (r - 2 or earlier) are done with it. After a
  // round that waited for every rank this costs nothing: they arrived at r - 1.
  TT_TRY(free_half());
  const bool spoke = hub >= 0 && hub != rank_;  // waits for the hub alone
  use_[half_] = {r, spoke ? hub : -1};
  jitter(r);
  auto t = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  cur_.round = r;
  me->meta[half_] = cur_;
  // Note [inline rounds]: a small round's data goes into the arrival line right before the arrival is published,
  // so that the peers polling that line do not take it away in between.
  fill(input(rank_));
  if (profile_) lap(&prof_.fill, &t);
  publish(me->arrived, cur_, pack_description(cur_), r);
  if (spoke) {
    TT_TRY(wait_all(&Header::arrived, r, "waiting for the root to arrive", hub));
    hub_seen_ = hub;
    seen_hub_ = r;
    TT_TRY(check_metas(hub));
  } else if (group_ > 0 && hub < 0) {
    TT_TRY(arrive_tree(r));
    TT_TRY(check_tree());
    seen_all_ = r;
  } else {
    if (size_ > 1) TT_TRY(wait_all(&Header::arrived, r, "waiting for the ranks to arrive"));
    TT_TRY(check_metas());
    seen_all_ = r;
  }
  jitter(3 * r + 1);  // (tests) readers late too, so that a writer that does not wait for them overwrites their data
  if (profile_) lap(&prof_.arrive, &t);
  TT_TRY(work(r));
  inline_ = false;  // Note [inline rounds]: set again by whoever starts the next round inline
  if (profile_) {
    lap(&prof_.work, &t);
    ++prof_.rounds;
  }
  return Status::ok();
}

// Elements per round for `per` pieces of one chunk each (scatter, reduce_scatter and alltoall put size() pieces in
// one area), rounded down to whole 64-byte lines where that leaves at least one.

template <typename Chunk>
Status for_each_chunk(size_t count, size_t c, Chunk&& chunk) {
  size_t off = 0;
  do {
    const size_t n = std::min(c, count - off);
    TT_TRY(chunk(off, n));
    off += n;
  } while (off < count);
  return Status::ok();
}


}  // namespace tt::comm::shm_detail
