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
#include "comm/pool.h"
#include "comm/reduce.h"
#include "comm/topology.h"
#include "core/log.h"
#include "core/units.h"
#include "memory/numa.h"


namespace tt::comm {
namespace {

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
constexpr uint64_t kMagic = 0x7474636f6d6d3130ull;  // "ttcomm10": halves, arrival lines, single copies, tree, span,
                                                    // shared buffers, agreed single copies by pages, inline rounds,
                                                    // rooted rounds
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
// at init) keeps the areas. By default on in worlds of up to 16 ranks (ShmOptions::inline_small, with the H200
// host's numbers).
constexpr size_t kInlineBytes = 8;

// Note [rooted rounds]
// A gather, or a reduce whose inputs are read whole (kDirectReduceBytes), of one round that reads nothing from the
// pools (below kSharedBytes a rank, or without pools) moves data from each rank to its root only: the root has to
// wait for every rank, but the others (spokes) need not wait for each other. In step 2 of Note [shm rounds] a spoke
// waits for the root's arrival alone and checks its description against the root's; the root waits for every rank
// and checks them all, as in any round. At 32 ranks the flat wait reads 31 lines on every rank, each line read by
// 31 ranks, and the tree takes two steps; a spoke now reads one line. On the H200 machine's host (medians of 3
// interleaved repeats, 8-64 B a rank; docs/benchmarks/2026-11-30-h200x2-comm-rooted/) gathers at 16 ranks took
// 0.83-1.00 of the time of full rounds in two runs (even at 8), small reduces 0.80-1.00; at 32 ranks two gather runs
// disagreed (0.68-0.93 and 1.43-1.64), reduces 0.87-1.5: not settled there. Broadcasts (and scatters, their mirror)
// were rooted too at first and gained nothing (0.93-1.20): their root writes, so before its next round it must see
// every rank done with its half all the same, and at 32 ranks its wait for 31 lines loses to the tree. They keep
// full rounds.
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
static_assert(std::atomic<int64_t>::is_always_lock_free);

// Note [arrival tree]
// From TIERTRAIN_COMM_TREE_RANKS ranks up (where every rank asked for it, the largest value asked for counting;
// 0 on any rank turns it off everywhere, as all ranks must take the same path), step 2 of
// Note [shm rounds] goes through a two-level tree instead of every rank reading every peer's arrival line. With the
// flat wait each rank reads n - 1 lines a round, and each line, read by n - 1 ranks, is invalidated in as many caches
// when its owner writes the next round's; at 32 ranks every collective of 8 B then takes about 2 us whatever it
// does (docs/benchmarks/2026-11-30-h200x2-comm-host-v4/). The ranks form groups of g = ceil(sqrt(n)) consecutive
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
// On by default from 32 ranks (ShmOptions::tree_ranks). On the H200 machine's 32-core host, at 8-64 B
// (docs/benchmarks/2026-11-30-h200x2-comm-tuning/): at 32 ranks broadcast took 1.13 us with the tree against 1.92
// flat, gather 1.44 against 1.93, allreduce 1.96 against 2.15 and allgather 2.04 against 2.21 (a second run: broadcast
// 1.36-1.57 against 1.71-2.15, allreduce 2.08-2.45 against 2.36-3.81); at 16 ranks the tree was 1.1-1.4x slower
// (two steps where one suffices), at 24 mixed (gather faster, allgather slower, the others even).

// Note [streaming stores]
// A large collective's results go into the caller's buffer with streaming (non-temporal) stores: they skip the
// cache, so the destination's lines are not read before they are written, and the copy does not evict the segment
// lines the peers are still reading. On the H200 machine's host one thread copies 17.1 GB/s that way against 6.3
// with memcpy, 8 threads 46.6 against 26.7 (docs/benchmarks/2026-11-30-h200x2-ooc-d4096/host_probe.txt), and the
// copies out of the segments are what bounds large broadcasts, gathers and allgathers. The results then start out of
// the cache, which costs a caller who reads them at once only while they would have fitted in it: hence the
// threshold (ShmOptions::stream_bytes, on the call's whole output at this rank). Copies into the segments stay
// ordinary stores: the peers read them next. A fence after each copy orders the streaming stores before anything
// the rank writes later (a flag, or a release another thread of the caller acquires): comm::stream_copy.

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
// By default (ShmOptions::kCmaAuto) single copies take pieces of 256 KiB and more from 4 ranks up. On the H200
// machine's 32-core host they make a 64 MiB gather 6-12x faster (busbw 47.6-76.0 against 6.3-7.5 GB/s at 8 and 16
// ranks; scatter alike, docs/benchmarks/2026-11-30-h200x2-comm-host-v4/): the root no longer copies every piece
// itself. At 256 KiB pieces the two paths were even in the C++ benchmark (2 MiB at 8 ranks: 189 against 195 us),
// whose calls of 4-8 MiB cost ~210-240 us where the Python benchmark's, on numpy arrays, cost 88-137 us: what a
// single copy costs depends on the pages of the root's buffer (numpy asks for huge pages for large arrays; Note
// [single copy by pages]). With 2 ranks there is little to share out, and the single copy lost on the 2-core development machine
// (64 MiB gather 4.5 against 3.6 ms): off below 4 ranks.

// Reductions of up to kDirectReduceBytes per round, whose inputs together (ranks x bytes) are at most
// kDirectReduceReads, are reduced whole by every rank (one synchronisation); larger ones are split: each rank
// reduces a slice, then all gather the slices (two synchronisations, and each rank reads about 2x the bytes instead
// of ranks x). The second bound is new: with only the first, an allreduce of 64 KiB took 620 us at 32 ranks and
// 190 us at 16 on the H200 host, where the split path took 113 us for 128 KiB at 32 ranks, and Open MPI 99 us for
// 64 KiB (docs/benchmarks/2026-11-30-h200x2-comm-host-v4/ranks-8-16-32/shm_allreduce_*.log): every rank reading
// every peer's input costs more than a second synchronisation once the inputs pass a few tens of KiB. Predicted
// ~60 us for 64 KiB at 32 ranks (from the split path's 113 us at 128 KiB); measured 54 us (Open MPI 86;
// docs/benchmarks/2026-11-30-h200x2-comm-tuning/ranks-16-32-tree-ab/). At 2 ranks on the dev machine both paths
// take the same time (4-64 KiB).
constexpr size_t kDirectReduceBytes = 64 << 10;
constexpr size_t kDirectReduceReads = 32 << 10;

// Note [reduction rounds]
// A reduction (reduce, allreduce) takes rounds of at most span / ranks bytes per rank (TIERTRAIN_COMM_REDUCE_SPAN,
// 32 MiB by default; agreed as the largest value asked for, 0 on any rank meaning half an area), and never less than
// kMinReduceRound nor more than half an area. Without the bound a round took half an area, 4 MiB: at 32 ranks that
// is 128 MiB of inputs in flight, out of the cores' caches. On the H200 machine's 32-core host, rounds of 1 MiB made
// allreduces of 4-8 MiB at 32 ranks take 0.69-0.83 of the time of 4 MiB rounds; 2 MiB at 32 ranks and 1-2 MiB at
// 16 were even or up to 1.14x slower with the smaller rounds (one round became two), and at 8 ranks, where the
// default span leaves 4 MiB rounds, 1 MiB rounds gave 0.86-1.08 (docs/benchmarks/2026-11-30-h200x2-comm-tuning/,
// TIERTRAIN_COMM_BUFFER=2097152 against the default 8 MiB).
constexpr size_t kMinReduceRound = 64 << 10;


// Elements per round for `per` pieces of one chunk each (defined below).
size_t chunk_elems(size_t buffer_bytes, size_t es, size_t pieces);

class ShmComm final : public Communicator {
 public:
  ShmComm(int rank, int size, ShmOptions options) : rank_(rank), size_(size), opt_(std::move(options)) {}
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
  void deliver_one(void* dst, const void* src, size_t bytes) const {
    if (stream_) {
      stream_copy(dst, src, bytes);
    } else {
      std::memcpy(dst, src, bytes);
    }
  }
  void deliver(void* dst, const void* src, size_t bytes) const { crew_copy(dst, src, bytes, true); }
  // Copies bytes (out: as deliver_one, else memcpy), over the crew from ShmOptions::thread_bytes.
  void crew_copy(void* dst, const void* src, size_t bytes, bool out) const {
    if (crew_ == nullptr || crew_->size() == 1 || bytes < opt_.thread_bytes) {
      if (out) deliver_one(dst, src, bytes);
      else if (bytes > 0) std::memcpy(dst, src, bytes);
      return;
    }
    crew_->run([&](int i) {
      size_t b = 0, e = 0;
      share(bytes, crew_->size(), i, 4096, &b, &e);
      if (e <= b) return;
      if (out) deliver_one(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, e - b);
      else std::memcpy(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, e - b);
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

std::string ShmComm::segment_path(int r) const {
  const std::string name = "tiertrain-" + opt_.job_id + "-" + std::to_string(r);
  return opt_.dir.empty() ? "/" + name : opt_.dir + "/" + name;
}

void ShmComm::unlink_own() {
  if (opt_.dir.empty()) {
    shm_unlink(own_name_.c_str());
  } else {
    ::unlink(own_name_.c_str());
  }
  own_name_.clear();
}

Status ShmComm::init() {
  TT_RETURN_IF(size_ < 1 || rank_ < 0 || rank_ >= size_, kInvalidArgument, "rank %d of a world of %d", rank_, size_);
  TT_RETURN_IF(opt_.job_id.empty() || opt_.job_id.find('/') != std::string::npos, kInvalidArgument,
               "shm communicator: job id '%s' must be non-empty and contain no '/'", opt_.job_id.c_str());
  TT_RETURN_IF(opt_.buffer_bytes < 4096 || opt_.buffer_bytes % 64 != 0, kInvalidArgument,
               "shm communicator: buffer of %zu bytes (at least 4096, a multiple of 64)", opt_.buffer_bytes);
  // Whole pages: the pool (Note [shared buffers]) starts on a page after it.
  seg_bytes_ = (sizeof(Header) + 2 * opt_.buffer_bytes + 4095) / 4096 * 4096;
  if (const char* j = std::getenv("TIERTRAIN_COMM_JITTER_US")) jitter_us_ = std::atoll(j);
  if (const char* p = std::getenv("TIERTRAIN_COMM_PROFILE")) profile_ = std::atoi(p) != 0;
  if (opt_.cma_bytes == ShmOptions::kCmaAuto)  // Note [single copy]: alike on every rank, as the size is
    opt_.cma_bytes = size_ >= ShmOptions::kCmaAutoRanks ? ShmOptions::kCmaAutoBytes : 0;
  // scatter, reduce_scatter and alltoall put one piece per rank in an area: at least a 64-byte line each.
  TT_RETURN_IF(half_bytes() < 64 * static_cast<size_t>(size_), kInvalidArgument,
               "shm communicator: TIERTRAIN_COMM_BUFFER=%zu is too small for %d ranks (at least 128 bytes a rank: %zu)",
               opt_.buffer_bytes, size_, 128 * static_cast<size_t>(size_));
  // Room for the segments where they go (a container's /dev/shm is 64 MB by default). Each rank reserves its own
  // segment's blocks (fallocate, below) before touching them: tmpfs accepts a file larger than its free space and
  // then kills the process that touches the missing pages. The message says what the whole job needs.
  const std::string where = opt_.dir.empty() ? std::string("/dev/shm") : opt_.dir;
  const auto no_room = [&](uint64_t free_bytes) {
    return make_status(StatusCode::kOutOfMemory,
                       "shm communicator (rank %d): %s has %s free, too little for this rank's %s segment (two areas "
                       "of TIERTRAIN_COMM_BUFFER=%s; %d ranks need %s). Give the container more (docker run "
                       "--shm-size=1g), lower TIERTRAIN_COMM_BUFFER, or put the segments in a directory with room: "
                       "TIERTRAIN_SHM_DIR=/path",
                       rank_, where.c_str(), format_bytes(static_cast<int64_t>(free_bytes)).c_str(),
                       format_bytes(static_cast<int64_t>(seg_bytes_)).c_str(),
                       format_bytes(static_cast<int64_t>(opt_.buffer_bytes)).c_str(), size_,
                       format_bytes(static_cast<int64_t>(seg_bytes_) * size_).c_str());
  };
  struct statvfs vfs {};
  TT_RETURN_IF(statvfs(where.c_str(), &vfs) != 0, kNotFound,
               "shm communicator: %s: %s (set TIERTRAIN_SHM_DIR to a directory)", where.c_str(), std::strerror(errno));
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (free_bytes < seg_bytes_) return no_room(free_bytes);
  // Note [shared buffers]: the pool's size, alike on every rank started alike (the rendezvous checks it).
  if (size_ > 1) {
    // Automatic: the file system's size (an unlimited one says 0), at most 1 TiB, and at most 32 TiB of address
    // space over all the ranks' pools (every rank maps every pool).
    uint64_t fs = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
    if (fs == 0) fs = uint64_t{1} << 40;
    pool_bytes_ = opt_.pool_bytes == ShmOptions::kPoolAuto
                      ? std::min({fs, uint64_t{1} << 40, (uint64_t{32} << 40) / static_cast<uint64_t>(size_)})
                      : opt_.pool_bytes;
    pool_bytes_ = pool_bytes_ / kPoolGranule * kPoolGranule;
  }
  maps_.assign(static_cast<size_t>(size_), nullptr);
  map_len_.assign(static_cast<size_t>(size_), 0);
  // Our own segment: created, sized, touched (so its pages are ours, on our NUMA node), then published.
  {
    own_name_ = segment_path(rank_);
    const int fd = opt_.dir.empty() ? shm_open(own_name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600)
                                    : ::open(own_name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int e = errno;
      own_name_.clear();
      return make_status(StatusCode::kIoError, "shm communicator: creating %s: %s%s", segment_path(rank_).c_str(),
                         std::strerror(e),
                         e == EEXIST ? " (a job with the same TIERTRAIN_COMM_ID is running, or one died and left "
                                       "it: remove it)"
                                     : "");
    }
    // Sized, mapped, its memory policy set (place), and only then its pages allocated (fallocate, which on tmpfs
    // allocates them under the segment's policy, and fails now with ENOSPC rather than with SIGBUS later).
    const int rc = ftruncate(fd, static_cast<off_t>(map_bytes()));
    void* p = rc == 0 ? map_file(fd, rank_) : MAP_FAILED;
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      unlink_own();
      return make_status(StatusCode::kIoError, "shm communicator: sizing or mapping %s (%s): %s",
                         segment_path(rank_).c_str(), format_bytes(static_cast<int64_t>(map_bytes())).c_str(),
                         std::strerror(e));
    }
    maps_[static_cast<size_t>(rank_)] = p;
    if (Status s = place(p); !s.is_ok()) {
      ::close(fd);
      unlink_own();
      return s;
    }
    const int fa = posix_fallocate(fd, 0, static_cast<off_t>(seg_bytes_));
    if (pool_bytes_ > 0 && pools_mapped_) {
      pool_fd_ = fd;
      pool_ = std::make_unique<PoolRanges>(pool_bytes_, kPoolGranule);
    } else {
      ::close(fd);
    }
    if (fa == ENOSPC) {
      unlink_own();
      return no_room(free_bytes);
    }
    TT_RETURN_IF(fa != 0 && fa != EOPNOTSUPP && fa != EINVAL, kIoError, "shm communicator: reserving %s: %s",
                 segment_path(rank_).c_str(), std::strerror(fa));
    std::memset(p, 0, seg_bytes_);
    // Where the pages really are, with a policy for one node: the placement says so (and a test checks it).
    if (placed_node_ >= 0) {
      const int first = memory::node_of_address(p);
      const int last = memory::node_of_address(static_cast<char*>(p) + seg_bytes_ - 1);
      placement_ += first == placed_node_ && last == placed_node_ ? "; pages on node " + std::to_string(first)
                                                                  : "; pages on node " + std::to_string(first) +
                                                                        " (not the node asked for)";
    }
    Header* h = hdr(rank_);
    h->rank = rank_;
    h->size = size_;
    h->pid = getpid();
    h->buffer_bytes = opt_.buffer_bytes;
    h->self_addr = reinterpret_cast<uint64_t>(p);
    h->cma_bytes.store(0, std::memory_order_relaxed);
    h->tree_ranks.store(static_cast<uint64_t>(opt_.tree_ranks), std::memory_order_relaxed);
    h->reduce_span.store(static_cast<uint64_t>(opt_.reduce_span), std::memory_order_relaxed);
    h->cma_huge_bytes.store(static_cast<uint64_t>(opt_.cma_huge_bytes), std::memory_order_relaxed);
    h->inline_small.store(inline_wanted() ? 1 : 0, std::memory_order_relaxed);
    h->rooted_small.store(opt_.rooted ? 1 : 0, std::memory_order_relaxed);
    // Note [single copy]: peers of this user may attach to read and write the buffers given to gather and scatter.
    if (opt_.cma_bytes > 0 && size_ > 1) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    h->arrived.value.store(0, std::memory_order_relaxed);
    h->reduced.value.store(0, std::memory_order_relaxed);
    h->magic.store(kMagic, std::memory_order_release);
  }
  // The peers' segments, as they appear (the rendezvous), within the deadline.
  const auto deadline = std::chrono::steady_clock::now() + opt_.common.timeout;
  for (;;) {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (maps_[static_cast<size_t>(r)]) continue;
      const std::string path = segment_path(r);
      const int fd = opt_.dir.empty() ? shm_open(path.c_str(), O_RDWR, 0600) : ::open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (fd >= 0) {
        // Its header first: a segment of another size (a rank started with other settings) is an error now, not a
        // rank that never joins.
        struct stat st {};
        if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(Header)) {
          void* hp = mmap(nullptr, sizeof(Header), PROT_READ, MAP_SHARED, fd, 0);
          if (hp != MAP_FAILED) {
            const Header* h = static_cast<const Header*>(hp);
            const bool ready = h->magic.load(std::memory_order_acquire) == kMagic;
            const bool same = h->size == size_ && h->rank == r && h->buffer_bytes == opt_.buffer_bytes &&
                              static_cast<size_t>(st.st_size) == map_bytes();
            const int their_rank = h->rank, their_size = h->size;
            const unsigned long long their_buffer = h->buffer_bytes;
            munmap(hp, sizeof(Header));
            if (ready && !same) {
              ::close(fd);
              return make_status(StatusCode::kInvalidArgument,
                                 "shm communicator: rank %d's segment says rank %d of %d with %llu-byte buffers and "
                                 "%lld bytes in all; this is rank %d of %d with %zu and %zu (ranks started with "
                                 "different settings: TIERTRAIN_COMM_BUFFER, TIERTRAIN_COMM_POOL?)",
                                 r, their_rank, their_size, their_buffer, static_cast<long long>(st.st_size), rank_,
                                 size_, opt_.buffer_bytes, map_bytes());
            }
            if (ready) {
              void* p = map_file(fd, r);
              ::close(fd);
              TT_RETURN_IF(p == MAP_FAILED, kIoError, "shm communicator: mapping rank %d's segment: %s", r,
                           std::strerror(errno));
              maps_[static_cast<size_t>(r)] = p;
              continue;
            }
          }
        }
        ::close(fd);
      }
      missing.push_back(r);
    }
    if (missing.empty()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::string list;
      for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
      return make_status(StatusCode::kDeadlineExceeded,
                         "shm communicator: rank %d of %d: rank(s) %s never joined within %.1f s "
                         "(TIERTRAIN_COMM_TIMEOUT); is every rank started with the same TIERTRAIN_COMM_ID?",
                         rank_, size_, list.c_str(), opt_.common.timeout.count() / 1000.0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  probe_single_copy();
  hdr(rank_)->pool_ok.store(pool_bytes_ > 0 && pools_mapped_ ? 1 : 0, std::memory_order_relaxed);
  // Once everyone has mapped everyone, the names can go: the segments live as long as a process maps them.
  TT_TRY(do_barrier());
  unlink_own();
  reduce_round_bytes_ = half_bytes();  // a world of one: no span to agree on
  inline_on_ = inline_wanted();        // (nor anything else; agreed below otherwise)
  // Note [single copy]: what every rank published before the barrier, read alike by all.
  if (size_ > 1) {
    // The largest value every rank published, or 0 if any published 0: all ranks agree.
    const auto agreed = [&](std::atomic<uint64_t> Header::*field) {
      uint64_t most = 0;
      for (int r = 0; r < size_; ++r) {
        const uint64_t t = (hdr(r)->*field).load(std::memory_order_acquire);
        if (t == 0) return uint64_t{0};
        most = std::max(most, t);
      }
      return most;
    };
    cma_bytes_ = agreed(&Header::cma_bytes);
    cma_huge_bytes_ = agreed(&Header::cma_huge_bytes);  // Note [single copy by pages]
    inline_on_ = agreed(&Header::inline_small) != 0;     // Note [inline rounds]
    rooted_on_ = agreed(&Header::rooted_small) != 0;     // Note [rooted rounds]
    // Note [shared buffers]: used only where every rank could map every pool.
    if (pool_bytes_ > 0 && agreed(&Header::pool_ok) == 0) {
      TT_LOG(WARN, COMM,
             "shm communicator (rank %d): a rank could not map every rank's pool (%s each; a limit on address "
             "space, ulimit -v?): no shared buffers, collectives copy through the segments (TIERTRAIN_COMM_POOL)",
             rank_, format_bytes(static_cast<int64_t>(pool_bytes_)).c_str());
      pool_.reset();
      if (pool_fd_ >= 0) ::close(pool_fd_);
      pool_fd_ = -1;
    }
    // Note [reduction rounds]: the agreed span, as bytes a round per rank.
    const uint64_t span = agreed(&Header::reduce_span);
    reduce_round_bytes_ = span == 0 ? half_bytes()
                                    : std::clamp<size_t>(span / static_cast<uint64_t>(size_), kMinReduceRound,
                                                         std::max(half_bytes(), kMinReduceRound));
    // Note [arrival tree]: on from the agreed number of ranks.
    const uint64_t tree = agreed(&Header::tree_ranks);
    if (tree > 0 && static_cast<uint64_t>(size_) >= tree) {
      int g = 1;
      while (g * g < size_) ++g;
      group_ = g;
    }
  }
  // Note [crew]: helper threads for the large copies and reductions, where this rank has CPUs to spare.
  // Helpers are pinned only where `tiertrain launch` bound this rank to CPUs of its own (TIERTRAIN_CPUS_BOUND): ranks
  // that share their CPUs (unbound, or a job's cpuset) would all pin their helpers to the same first ones.
  const char* bound = std::getenv("TIERTRAIN_CPUS_BOUND");
  crew_ = std::make_unique<Crew>(opt_.threads, std::chrono::microseconds(opt_.thread_wait_us),
                                 opt_.thread_pin && bound != nullptr && std::string(bound) == "1");
  reduce_srcs_.assign(static_cast<size_t>(size_) * static_cast<size_t>(crew_->size()), nullptr);
  peer_send_.assign(static_cast<size_t>(size_), kNoPool);
  peer_recv_.assign(static_cast<size_t>(size_), kNoPool);
  TT_LOG(INFO, COMM,
         "shm communicator: rank %d of %d, %s segments, %s; pool %s; single copies %s; arrival %s; inline rounds %s; "
         "rooted rounds %s; %d thread(s)%s",
         rank_, size_, format_bytes(static_cast<int64_t>(seg_bytes_)).c_str(), placement_.c_str(),
         pool_ != nullptr ? format_bytes(static_cast<int64_t>(pool_bytes_)).c_str()
         : pool_bytes_ > 0 ? "off (not mapped everywhere)"
                           : "none",
         cma_bytes_ > 0 ? ("from " + format_bytes(static_cast<int64_t>(cma_bytes_)) + " a piece").c_str() : "off",
         group_ > 0 ? ("through groups of " + std::to_string(group_)).c_str() : "flat", inline_on_ ? "on" : "off",
         rooted_on_ ? "on" : "off",
         crew_->size(),
         crew_->pinned().empty() ? "" : " (helpers pinned)");
  return Status::ok();
}

Result<void*> ShmComm::alloc_buffer(size_t bytes) {
  if (pool_ != nullptr && !failed_.load(std::memory_order_relaxed)) {
    size_t taken = 0;
    const size_t off = pool_->take(bytes, &taken);
    if (off != PoolRanges::kNone) {
      // The pages now (zeros, under the segment's memory policy), or ENOSPC now rather than SIGBUS later.
      const int fa = posix_fallocate(pool_fd_, static_cast<off_t>(seg_bytes_ + off), static_cast<off_t>(taken));
      if (fa == 0) return static_cast<void*>(pool_base(rank_) + off);
      pool_->give_back(off);
    }
    if (!pool_full_said_.exchange(true)) {
      TT_LOG(WARN, COMM,
             "shm communicator (rank %d): no room in the shared pool for %s (%s of %s in use; its file system "
             "full?): private memory instead, which collectives copy through the segments (TIERTRAIN_COMM_POOL, "
             "TIERTRAIN_SHM_DIR)",
             rank_, format_bytes(static_cast<int64_t>(bytes)).c_str(),
             format_bytes(static_cast<int64_t>(pool_->in_use())).c_str(),
             format_bytes(static_cast<int64_t>(pool_->capacity())).c_str());
    }
  }
  return Communicator::alloc_buffer(bytes);
}

void ShmComm::free_buffer(void* p) {
  const uint64_t off = pool_offset(p, 0);
  if (off == kNoPool) {
    Communicator::free_buffer(p);
    return;
  }
  // After a failed call a peer may still use it: the range stays taken (its pages until the communicator closes).
  if (failed_.load(std::memory_order_relaxed)) return;
  // Its pages go back to the system (a peer that touched them after this would get new zero pages, not ours).
  const size_t len = pool_->give_back(off);
  if (len == 0) {
    TT_LOG(WARN, COMM, "shm communicator (rank %d): free_buffer of %p, inside the pool but not a buffer it handed out",
           rank_, p);
    return;
  }
  if (fallocate(pool_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(seg_bytes_ + off),
                static_cast<off_t>(len)) != 0)
    TT_LOG(WARN, COMM, "shm communicator (rank %d): releasing %s of the pool: %s (kept until it closes)", rank_,
           format_bytes(static_cast<int64_t>(len)).c_str(), std::strerror(errno));
}

Status ShmComm::place(void* p) {
  const std::string& pol = opt_.mempolicy;
  TT_RETURN_IF(pol != "auto" && pol != "local" && pol != "bind" && pol != "preferred" && pol != "interleave",
               kInvalidArgument, "TIERTRAIN_COMM_MEMPOLICY=%s: auto, local, bind, preferred or interleave", pol.c_str());
  if (pol == "local") return Status::ok();
  TT_ASSIGN_OR_RETURN(Topology t, read_topology("/"));
  TT_ASSIGN_OR_RETURN(HbwNodes hbw, find_hbw_nodes(t, std::getenv("TIERTRAIN_HBW_NODES"), std::getenv("MEMKIND_HBW_NODES")));
  const int cpu = sched_getcpu();
  const int here = t.node_of_cpu(cpu);
  std::vector<int> nodes;
  memory::MemPolicy mp = memory::MemPolicy::kPreferred;
  if (pol == "interleave") {
    mp = memory::MemPolicy::kInterleave;
    nodes = hbw.nodes;
    if (nodes.empty())
      for (const NumaNode& n : t.nodes)
        if (n.mem_bytes > 0) nodes.push_back(n.id);
  } else {
    const int near = nearest_node(t, here, hbw.nodes);
    TT_RETURN_IF(near < 0 && pol == "bind", kFailedPrecondition,
                 "TIERTRAIN_COMM_MEMPOLICY=bind: no high-bandwidth NUMA node found (%s); name them with "
                 "TIERTRAIN_HBW_NODES",
                 hbw.source.c_str());
    if (near < 0) {
      placement_ = "where first touched (no HBW node: " + hbw.source + ")";
      return Status::ok();
    }
    if (pol == "bind") mp = memory::MemPolicy::kBind;
    nodes = {near};
  }
  if (nodes.empty()) return Status::ok();
  TT_TRY(memory::set_mem_policy(p, map_len_[static_cast<size_t>(rank_)], mp, nodes));  // the pool's pages too
  if (nodes.size() == 1) placed_node_ = nodes.front();
  std::string list;
  for (int n : nodes) {
    if (!list.empty()) list += ',';
    list += std::to_string(n);
  }
  placement_ = std::string(memory::mem_policy_name(mp)) + " NUMA node(s) " + list + " (HBW: " +
               (hbw.nodes.empty() ? "none, " + hbw.source : hbw.source) + ")";
  return Status::ok();
}

Status ShmComm::begin(int32_t kind, size_t count, DType dtype, Op op, int root, bool in_place_misuse,
                      size_t out_bytes) {
  TT_RETURN_IF(broken_.is_set(), kFailedPrecondition,
               "shm communicator (rank %d): unusable after an earlier error: %s", rank_, broken_.why().c_str());
  const int64_t seq = ++seq_;
  cur_ = Meta{};
  cur_.seq = seq;
  cur_.count = count;
  cur_.kind = kind;
  cur_.dtype = static_cast<int32_t>(dtype);
  cur_.op = static_cast<int32_t>(op);
  cur_.root = root;
  cur_.misuse = misuse_of(kind, root, size_, in_place_misuse);
  cur_.send_off = cur_.recv_off = kNoPool;
  may_share_ = false;  // until this call's publish_send
  inline_ = false;     // until a collective that may sets it for a round
  stream_ = opt_.stream_bytes > 0 && out_bytes >= opt_.stream_bytes;
  // Note [crew]: a call large enough to run the crew wakes it first, while it still waits for its peers.
  if (crew_ != nullptr && std::max(out_bytes, count * dtype_size(dtype)) >= opt_.thread_bytes) crew_->wake();
  return Status::ok();
}

template <typename F, typename Pick>
Status ShmComm::wait_for(F Header::*flag, int64_t target, const char* what, Pick&& pick, bool blame_arrivals) {
  const auto start = std::chrono::steady_clock::now();
  auto next_liveness = start + std::chrono::milliseconds(100);
  for (uint64_t spin = 0;; ++spin) {
    bool all = true;
    for (int r = 0; r < size_ && all; ++r) {
      if (r == rank_ || !pick(r)) continue;
      all = (hdr(r)->*flag).value.load(std::memory_order_acquire) >= target;
    }
    if (all) return Status::ok();
    if (spin < 4096) continue;  // short waits spin
    if ((spin & 63) == 0) {
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
static int64_t pack_description(const Meta& m) {
  return (static_cast<int64_t>(m.kind) & 0xff) | (static_cast<int64_t>(m.dtype) & 0xff) << 8 |
         (static_cast<int64_t>(m.op) & 0xff) << 16 | (static_cast<int64_t>(m.misuse) & 0xff) << 24 |
         static_cast<int64_t>(static_cast<uint32_t>(m.root)) << 32;
}

// Writes round r's description (packed: pack_description(m)) into a line, then its value = r with release: an
// arrival line, or a group line (Note [arrival tree]).
// The description goes in seq first and is read seq last, each store a release and each load an acquire: a reader
// that finds the old seq found the old count and packed too (Note [rooted rounds]). Free on x86.
static void publish(Arrival& a, const Meta& m, int64_t packed, int64_t r) {
  a.seq.store(m.seq, std::memory_order_relaxed);
  a.count.store(m.count, std::memory_order_release);
  a.packed.store(packed, std::memory_order_release);
  a.value.store(r, std::memory_order_release);
}

// Whether a line describes the round as m does (the fast check of Note [arrival line]).
static bool describes(const Arrival& a, const Meta& m, int64_t packed) {
  return a.packed.load(std::memory_order_acquire) == packed && a.count.load(std::memory_order_acquire) == m.count &&
         a.seq.load(std::memory_order_acquire) == m.seq;
}

Status ShmComm::check_metas(int only) {
  const auto checked = [&](int r) { return r != rank_ && (only < 0 || r == only); };
  if (cur_.misuse == kNoMisuse) {
    const int64_t packed = pack_description(cur_);
    bool same = true;
    for (int r = 0; r < size_ && same; ++r)
      if (checked(r)) same = describes(hdr(r)->arrived, cur_, packed);
    if (same) return Status::ok();
  }
  std::string misuse;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && !checked(r)) continue;
    const int32_t m = r == rank_ ? cur_.misuse : hdr(r)->meta[half_].misuse;
    if (m != kNoMisuse) misuse += str_format("%srank %d %s", misuse.empty() ? "" : "; ", r, misuse_text(m));
  }
  if (!misuse.empty())
    return fail(make_status(StatusCode::kInvalidArgument, "%s #%lld (rank %d of %d, root %d): %s",
                            kind_name(cur_.kind), static_cast<long long>(cur_.seq), rank_, size_, cur_.root,
                            misuse.c_str()));
  std::string diffs;
  for (int r = 0; r < size_; ++r) {
    if (!checked(r)) continue;
    const Meta& m = hdr(r)->meta[half_];
    std::string d;
    if (m.seq != cur_.seq) d += str_format(" collective #%lld", static_cast<long long>(m.seq));
    if (m.kind != cur_.kind) d += str_format(" %s", kind_name(m.kind));
    if (m.count != cur_.count) d += str_format(" count %llu", static_cast<unsigned long long>(m.count));
    if (m.dtype != cur_.dtype) d += str_format(" dtype %s", dtype_name(static_cast<DType>(m.dtype)));
    if (m.op != cur_.op && cur_.kind != kBarrier) d += str_format(" op %s", op_name(static_cast<Op>(m.op)));
    if (m.root != cur_.root) d += str_format(" root %d", m.root);
    if (!d.empty()) diffs += str_format("; rank %d has%s", r, d.c_str());
  }
  if (diffs.empty()) return Status::ok();
  return fail(make_status(StatusCode::kInvalidArgument,
                          "%s #%lld (rank %d of %d): ranks disagree: this rank has %s count %llu dtype %s op %s root "
                          "%d%s",
                          kind_name(cur_.kind), static_cast<long long>(cur_.seq), rank_, size_, kind_name(cur_.kind),
                          static_cast<unsigned long long>(cur_.count), dtype_name(static_cast<DType>(cur_.dtype)),
                          op_name(static_cast<Op>(cur_.op)), cur_.root, diffs.c_str()));
}

Status ShmComm::arrive_tree(int64_t r) {
  const int lead = leader_of(rank_), end = std::min(size_, lead + group_);
  if (rank_ == lead) {
    TT_TRY(wait_for(&Header::arrived, r, "waiting for the ranks of this group to arrive",
                    [&](int q) { return q > lead && q < end; }, true));
    const int64_t packed = pack_description(cur_);
    bool ok = cur_.misuse == kNoMisuse;
    for (int q = lead + 1; q < end && ok; ++q) ok = describes(hdr(q)->arrived, cur_, packed);
    Arrival& g = hdr(rank_)->group;
    g.ok.store(ok ? 1 : 0, std::memory_order_relaxed);
    publish(g, cur_, packed, r);
  }
  return wait_for(&Header::group, r, "waiting for the ranks to arrive", [&](int q) { return q % group_ == 0; }, true);
}

Status ShmComm::check_tree() {
  if (cur_.misuse == kNoMisuse) {
    const int64_t packed = pack_description(cur_);
    bool same = true;
    for (int q = 0; q < size_ && same; q += group_) {
      const Arrival& g = hdr(q)->group;
      same = g.ok.load(std::memory_order_relaxed) == 1 && describes(g, cur_, packed);
    }
    if (same) return Status::ok();
  }
  return check_metas();  // every rank's line, and the exact message where they differ
}

Status ShmComm::free_half() {
  const HalfUse u = use_[half_];
  const int64_t done = u.round + 1;  // a reader is done with round u.round once it has arrived at the next
  if (u.round == 0 || size_ == 1 || seen_all_ >= done) return Status::ok();
  if (u.reader >= 0) {
    if (u.reader == hub_seen_ && seen_hub_ >= done) return Status::ok();  // (a loop of one root's rounds)
    return wait_all(&Header::arrived, done, "waiting for the root to finish the round before", u.reader);
  }
  TT_TRY(wait_all(&Header::arrived, done, "waiting for the ranks to finish the round before"));
  seen_all_ = done;
  return Status::ok();
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
size_t chunk_elems(size_t buffer_bytes, size_t es, size_t pieces) {
  size_t c = buffer_bytes / (es * pieces);
  if (c * es >= 64) c = c / (64 / std::min<size_t>(es, 64)) * (64 / std::min<size_t>(es, 64));
  return std::max<size_t>(c, 1);
}

// Runs chunk(off, n) for the chunks of at most c elements that cover count, in order; once with n = 0 when count is
// 0 (the empty round every rank still takes part in, so that a mismatch or a misuse is seen).
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

Status ShmComm::do_broadcast(const void* send, void* recv, size_t count, DType dtype, int root) {
  TT_TRY(begin(kBroadcast, count, dtype, Op::kSum, root, false, count * dtype_size(dtype)));
  if (misused()) return fail_misuse();
  const size_t es = dtype_size(dtype);
  const char* src = static_cast<const char*>(send == kInPlace ? recv : send);
  char* dst = static_cast<char*>(recv);
  const size_t c = chunk_elems(half_bytes(), es, 1);
  // Note [shared buffers]: the root's buffer read where it is, in chunks of kSharedBytes and more.
  const uint64_t root_at = rank_ == root ? pool_offset(src, count * es) : kNoPool;
  int64_t last_shared = 0;  // the last round whose chunk was read from the root's pool
  TT_TRY(for_each_chunk(count, c, [&](size_t off, size_t n) -> Status {
    const size_t bytes = n * es;
    const bool shared = publish_send(root_at, off * es, bytes);
    inline_ = inline_round(bytes);  // Note [inline rounds]
    // Note [broadcast root]
    // Out of place, the root's own result needs a second copy of its chunk. It makes it block by block from its input
    // half right after copying each block in, while the block is still in its cache: the caller's buffer is read
    // once, not twice. Before this the root read it twice and was the slowest rank of a large broadcast (64 MiB at
    // 16 ranks on the H200 machine's host: 2.78 GB/s out of place against 4.24 in place,
    // docs/benchmarks/2026-11-30-h200x2-comm-host-v3/).
    const auto fill = [&](char* area) {
      if (rank_ != root) return;
      if (shared) {  // nothing to copy in: the others read the root's buffer
        if (src != dst) deliver(dst + off * es, src + off * es, bytes);
        return;
      }
      constexpr size_t kBlock = 64 << 10;  // in L2 (tests: two blocks a round of 128 KiB halves)
      for (size_t b = 0; b < bytes; b += kBlock) {
        const size_t k = std::min(kBlock, bytes - b);
        std::memcpy(area + b, src + off * es + b, k);
        if (src != dst) deliver(dst + off * es + b, area + b, k);
      }
    };
    return round_fill(fill, [&](int64_t r) {
      if (rank_ == root) {
        if (shared) last_shared = r;
        return Status::ok();
      }
      if (bytes == 0) return Status::ok();
      deliver(dst + off * es, send_of(root, 0, 0), bytes);
      if (may_share_ && hdr(root)->meta[half_].send_off != kNoPool)  // done with the root's buffer
        hdr(rank_)->reduced.value.store(r, std::memory_order_release);
      return Status::ok();
    });
  }));
  // The root's buffer is the caller's again once every rank has read it.
  return wait_readers(last_shared, "waiting for the ranks to read the root's buffer");
}

Status ShmComm::reduce_rounds(const void* send, void* recv, size_t count, DType dtype, Op op, int root) {
  const size_t es = dtype_size(dtype);
  const char* src = static_cast<const char*>(send == kInPlace ? recv : send);
  char* dst = static_cast<char*>(recv);
  const size_t c = chunk_elems(std::min(half_bytes(), reduce_round_bytes_), es, 1);
  std::vector<const void*>& srcs = reduce_srcs_;
  // Note [shared buffers]: this rank's buffers where they are in its pool.
  const bool wants = root < 0 || root == rank_;
  const uint64_t send_at = pool_offset(src, count * es), recv_at = wants ? pool_offset(dst, count * es) : kNoPool;
  return for_each_chunk(count, c, [&](size_t off, size_t n) -> Status {
    const size_t bytes = n * es;
    const bool direct = (bytes <= kDirectReduceBytes && bytes * static_cast<size_t>(size_) <= kDirectReduceReads) ||
                        n < static_cast<size_t>(size_);
    inline_ = direct && inline_round(bytes);  // Note [inline rounds]
    const bool shared = !direct && bytes >= kSharedBytes;  // alike on every rank
    cur_.send_off = shared && send_at != kNoPool ? send_at + off * es : kNoPool;
    cur_.recv_off = shared && recv_at != kNoPool ? recv_at + off * es : kNoPool;
    const bool in_pool = cur_.send_off != kNoPool;  // this rank's chunk is read where it is: no copy in
    return round(src + off * es, in_pool ? 0 : bytes, [&](int64_t r) -> Status {
      if (direct) {
        if (root < 0 || root == rank_) {
          for (int q = 0; q < size_; ++q) srcs[static_cast<size_t>(q)] = input(q);
          comm::reduce(dst + off * es, srcs.data(), size_, n, dtype, op);
        }
        return Status::ok();
      }
      // Each rank reduces one slice into its result area; then the ranks that want the result gather the slices.
      const size_t slice = (n + static_cast<size_t>(size_) - 1) / static_cast<size_t>(size_);
      const size_t s0 = std::min(n, slice * static_cast<size_t>(rank_)), s1 = std::min(n, s0 + slice);
      jitter(r + 1);
      auto t = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      bool any_out = false;  // some rank's receive buffer is in its pool
      if (shared) {
        for (int q = 0; q < size_; ++q) {
          const Meta& m = q == rank_ ? cur_ : hdr(q)->meta[half_];
          peer_send_[static_cast<size_t>(q)] = m.send_off;
          peer_recv_[static_cast<size_t>(q)] = m.recv_off;
          any_out = any_out || m.recv_off != kNoPool;
        }
      }
      // This rank's slice, over the crew by element ranges (each element reduced by one thread, in rank order).
      const int parts = (s1 - s0) * es >= opt_.thread_bytes ? crew_->size() : 1;
      const auto reduce_part = [&](int i) {
        size_t a = 0, b = 0;
        share(s1 - s0, parts, i, 1024, &a, &b);
        if (b <= a) return;
        const void** part = srcs.data() + static_cast<size_t>(i) * static_cast<size_t>(size_);
        if (!shared) {
          for (int q = 0; q < size_; ++q) part[q] = input(q) + (s0 + a) * es;
          comm::reduce(result(rank_) + (s0 + a) * es, part, size_, b - a, dtype, op);
          return;
        }
        // Note [shared buffers]: block by block, each source where it is; the block (in cache) then into every
        // receive buffer in a pool.
        const size_t block = std::max<size_t>(1, (32 << 10) / es);
        for (size_t k = a; k < b; k += block) {
          const size_t m = std::min(block, b - k), at = (s0 + k) * es;
          for (int q = 0; q < size_; ++q) {
            const uint64_t o = peer_send_[static_cast<size_t>(q)];
            part[q] = o != kNoPool ? pool_base(q) + o + at : input(q) + at;
          }
          char* block_out = result(rank_) + at;
          comm::reduce(block_out, part, size_, m, dtype, op);
          if (any_out)
            for (int q = 0; q < size_; ++q)
              if (const uint64_t o = peer_recv_[static_cast<size_t>(q)]; o != kNoPool)
                std::memcpy(pool_base(q) + o + at, block_out, m * es);
        }
      };
      if (parts == 1) reduce_part(0);
      else crew_->run(reduce_part);
      hdr(rank_)->reduced.value.store(r, std::memory_order_release);
      if (profile_) lap(&prof_.reduce, &t);
      // A non-root of a reduce leaves now, unless its send buffer is still read where it is.
      if (root >= 0 && root != rank_ && !in_pool) return Status::ok();
      TT_TRY(wait_all(&Header::reduced, r, "waiting for the reduced slices"));
      if (profile_) lap(&prof_.wait_reduced, &t);
      // Note [shared buffers]: a receive buffer in the pool has the result already.
      if ((root >= 0 && root != rank_) || cur_.recv_off != kNoPool) return Status::ok();
      // The slices, in order, into dst[off, off + n): over the crew by ranges of that output.
      const int out_parts = n * es >= opt_.thread_bytes ? crew_->size() : 1;
      const auto out_part = [&](int i) {
        size_t a = 0, b = 0;
        share(n, out_parts, i, 1024, &a, &b);
        while (a < b) {
          const size_t q = a / slice, e = std::min(b, (q + 1) * slice);
          deliver_one(dst + (off + a) * es, result(static_cast<int>(q)) + a * es, (e - a) * es);
          a = e;
        }
      };
      if (out_parts == 1) out_part(0);
      else crew_->run(out_part);
      if (profile_) lap(&prof_.out, &t);
      return Status::ok();
    }, direct && root >= 0 ? rooted_hub(count, c, root) : -1);
  });
}

Status ShmComm::do_reduce(const void* send, void* recv, size_t count, DType dtype, Op op, int root) {
  TT_TRY(begin(kReduce, count, dtype, op, root, send == kInPlace && rank_ != root,
               rank_ == root ? count * dtype_size(dtype) : 0));
  if (misused()) return fail_misuse();
  return reduce_rounds(send, recv, count, dtype, op, root);
}

Status ShmComm::do_allreduce(const void* send, void* recv, size_t count, DType dtype, Op op) {
  TT_TRY(begin(kAllreduce, count, dtype, op, -1, false, count * dtype_size(dtype)));
  return reduce_rounds(send, recv, count, dtype, op, -1);
}

Status ShmComm::do_gather(const void* send, void* recv, size_t count, DType dtype, int root) {
  TT_TRY(begin(kGather, count, dtype, Op::kSum, root, send == kInPlace && rank_ != root,
               rank_ == root ? static_cast<size_t>(size_) * count * dtype_size(dtype) : 0));
  if (misused()) return fail_misuse();
  const bool whole = single_copy(count * dtype_size(dtype));  // else the root picks, where one round holds it
  if (whole || paged_candidate(count, dtype_size(dtype), true))
    return single_copy_round(send, recv, count, dtype, root, true, !whole);
  return gather_rounds(send, recv, count, dtype, root);
}

Status ShmComm::do_allgather(const void* send, void* recv, size_t count, DType dtype) {
  TT_TRY(begin(kAllgather, count, dtype, Op::kSum, -1, false, static_cast<size_t>(size_) * count * dtype_size(dtype)));
  return gather_rounds(send, recv, count, dtype, -1);
}

Status ShmComm::gather_rounds(const void* send, void* recv, size_t count, DType dtype, int root) {
  const size_t es = dtype_size(dtype);
  char* dst = static_cast<char*>(recv);
  const char* src = send == kInPlace ? dst + static_cast<size_t>(rank_) * count * es : static_cast<const char*>(send);
  const size_t c = chunk_elems(half_bytes(), es, 1);
  // Note [shared buffers]: a send buffer in the pool is read where it is, in chunks of kSharedBytes and more.
  const uint64_t send_at = pool_offset(src, count * es);
  int64_t last_shared = 0;  // the last round whose chunk of this rank's was read from its pool
  TT_TRY(for_each_chunk(count, c, [&](size_t off, size_t n) -> Status {
    const size_t bytes = n * es;
    const bool shared = publish_send(send_at, off * es, bytes);
    inline_ = inline_round(bytes);  // Note [inline rounds]
    return round(src + off * es, shared ? 0 : bytes, [&](int64_t r) {
      if (shared) last_shared = r;
      if ((root < 0 || rank_ == root) && bytes) {
        for (int q = 0; q < size_; ++q) {
          char* to = dst + (static_cast<size_t>(q) * count + off) * es;
          const char* from = send_of(q, 0, 0);
          if (from != to) deliver(to, from, bytes);  // (in place from the pool: already there)
        }
        hdr(rank_)->reduced.value.store(r, std::memory_order_release);  // done with this round's sources
      }
      return Status::ok();
    }, root >= 0 ? rooted_hub(count, c, root) : -1);
  }));
  // This rank's send buffer is the caller's again once its readers are done with it.
  if (root < 0) return wait_readers(last_shared, "waiting for the ranks to read this rank's buffer");
  if (rank_ == root) return Status::ok();
  return wait_readers(last_shared, "waiting for the root to read this rank's buffer", root);
}

void ShmComm::probe_single_copy() {
  if (opt_.cma_bytes == 0 || size_ < 2) return;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    int64_t pid = 0;
    iovec local{&pid, sizeof pid};
    iovec remote{reinterpret_cast<void*>(hdr(q)->self_addr + offsetof(Header, pid)), sizeof pid};
    if (process_vm_readv(static_cast<pid_t>(hdr(q)->pid), &local, 1, &remote, 1, 0) != sizeof pid ||
        pid != hdr(q)->pid) {
      TT_LOG(INFO, COMM, "shm communicator: rank %d cannot attach to rank %d (%s): single copies off", rank_, q,
             std::strerror(errno));
      return;
    }
  }
  hdr(rank_)->cma_bytes.store(opt_.cma_bytes, std::memory_order_release);
}

Status ShmComm::cma_copy(int q, void* local, uint64_t remote, size_t bytes, bool write) {
  char* l = static_cast<char*>(local);
  while (bytes > 0) {
    iovec li{l, bytes};
    iovec ri{reinterpret_cast<void*>(remote), bytes};
    const pid_t pid = static_cast<pid_t>(hdr(q)->pid);
    const ssize_t n = write ? process_vm_writev(pid, &li, 1, &ri, 1, 0) : process_vm_readv(pid, &li, 1, &ri, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return fail(make_status(StatusCode::kIoError,
                              "%s #%lld (rank %d of %d): single copy %s rank %d failed: %s (TIERTRAIN_COMM_CMA_BYTES=0 "
                              "turns single copies off)",
                              kind_name(cur_.kind), static_cast<long long>(cur_.seq), rank_, size_,
                              write ? "to" : "from", q, n < 0 ? std::strerror(errno) : "nothing copied"));
    l += n;
    remote += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok();
}

// Note [single copy by pages]
// A single copy into (out of) the root's buffer costs little where that buffer is on huge pages, and much where it
// is on 4 KiB pages: the kernel pins every page of the root's buffer that a peer's copy touches, and with all peers
// pinning pages of one page table at once their copies queue (on the H200 machine's host, gathers of 256 KiB-2 MiB
// at 8 and 16 ranks took 0.09-0.56 of the segments' time with single copies into huge pages, and 1.08-1.59 with
// single copies into 4 KiB pages; docs/benchmarks/2026-11-30-h200x2-comm-tuning/). Below the single-copy threshold
// (Note [single copy]), a gather or scatter that fits one round therefore lets the root choose: single copies when
// its buffer is on huge pages throughout (on_huge_pages) and its pieces have at least cma_huge_bytes, else the
// segments. It says which in its meta half (`addr`: its buffer, or 0), which the others read after the arrival. The
// others cannot know the choice before they arrive, so in a gather each still copies its piece into its segment
// first (the segment path needs it there). Scatter's root fills its segment only for the segment path. The ranks
// agree on cma_huge_bytes at init (the largest asked for; 0 anywhere: off), so that below it, and below the pool's
// kSharedBytes, every rank knows the root cannot choose single copies: such calls take the segments directly
// (paged_candidate), and the others do not wait to read the root's choice (at 8 B that read was a miss after the
// arrival on every non-root, each call).
Status ShmComm::single_copy_round(const void* send, void* recv, size_t count, DType dtype, int root, bool gather,
                                  bool root_picks) {
  const size_t es = dtype_size(dtype), bytes = count * es;
  char* dst = static_cast<char*>(recv);
  // Gather: each rank's piece goes to its place in the root's recv. Scatter: it comes from its place in the root's
  // send (recv in place).
  const char* own = send == kInPlace ? (gather ? dst + static_cast<size_t>(rank_) * bytes : dst)
                                     : static_cast<const char*>(send);
  const char* all = gather ? dst : own;  // the root's buffer of size() pieces
  // Note [shared buffers]: a root's buffer in its pool is written (read) by the others with plain copies, from
  // kSharedBytes in all: below that, the root's wait for the copies (a second arrival) costs more than the copies
  // it saves (on the H200 host 8 B gathers at 8 ranks took 1.60 us that way; since, 1.04 with the pool as without).
  const size_t all_bytes = static_cast<size_t>(size_) * bytes;
  const uint64_t pooled = rank_ == root && all_bytes >= kSharedBytes ? pool_offset(all, all_bytes) : kNoPool;
  const bool single = rank_ == root && (!root_picks || pooled != kNoPool ||
                                        (cma_bytes_ > 0 && cma_huge_bytes_ > 0 && bytes >= cma_huge_bytes_ &&
                                         on_huge_pages(all, all_bytes)));
  if (single) {
    cur_.addr = reinterpret_cast<uint64_t>(all);
    cur_.recv_off = pooled;
    if (root_picks)
      TT_LOG(TRACE, COMM, "%s #%lld (rank %d): single copies (the root's buffer is %s)", kind_name(cur_.kind),
             static_cast<long long>(cur_.seq), rank_, pooled != kNoPool ? "in its pool" : "on huge pages");
  }
  // The segments' input, where the root may pick them: a gather's pieces (every rank but a root that did not), a
  // scatter's root's pieces.
  const auto fill = [&](char* area) {
    if (!root_picks || single) return;
    if (gather) std::memcpy(area, own, bytes);
    else if (rank_ == root) lay_out_pieces(area, own, count, 0, bytes, es);
  };
  return round_fill(fill, [&](int64_t r) -> Status {
    const uint64_t remote = hdr(root)->meta[half_].addr;
    const bool segments = root_picks && remote == 0;
    if (rank_ == root) {
      if (segments) {
        if (gather) {
          for (int q = 0; q < size_; ++q) deliver(dst + static_cast<size_t>(q) * bytes, input(q), bytes);
        } else if (send != kInPlace) {
          deliver(dst, input(root) + static_cast<size_t>(rank_) * bytes, bytes);
        }
        return Status::ok();
      }
      if (send != kInPlace) {
        if (gather) deliver(dst + static_cast<size_t>(rank_) * bytes, own, bytes);
        else deliver(dst, own + static_cast<size_t>(rank_) * bytes, bytes);
      }
      return wait_all(&Header::reduced, r, "waiting for the ranks' single copies");
    }
    if (segments) {
      if (!gather) deliver(dst, input(root) + static_cast<size_t>(rank_) * bytes, bytes);
      return Status::ok();
    }
    const uint64_t at = hdr(root)->meta[half_].recv_off;
    if (at != kNoPool) {
      char* piece = pool_base(root) + at + static_cast<size_t>(rank_) * bytes;
      if (gather) std::memcpy(piece, own, bytes);
      else std::memcpy(dst, piece, bytes);
    } else {
      TT_TRY(cma_copy(root, gather ? const_cast<char*>(own) : dst, remote + static_cast<uint64_t>(rank_) * bytes,
                      bytes, gather));
    }
    hdr(rank_)->reduced.value.store(r, std::memory_order_release);
    return Status::ok();
  });
}

Status ShmComm::do_scatter(const void* send, void* recv, size_t count, DType dtype, int root) {
  TT_TRY(begin(kScatter, count, dtype, Op::kSum, root, false, count * dtype_size(dtype)));
  if (misused()) return fail_misuse();
  const bool whole = single_copy(count * dtype_size(dtype));  // else the root picks, where one round holds it
  if (whole || paged_candidate(count, dtype_size(dtype), false))
    return single_copy_round(send, recv, count, dtype, root, false, !whole);
  const size_t es = dtype_size(dtype);
  char* dst = static_cast<char*>(recv);
  // In place at the root: recv holds all size() * count elements and the root's own piece stays where it is.
  const char* src = static_cast<const char*>(send == kInPlace ? recv : send);
  const size_t c = chunk_elems(half_bytes(), es, static_cast<size_t>(size_));
  return for_each_chunk(count, c, [&](size_t off, size_t n) -> Status {
    const size_t bytes = n * es;
    // The root lays out the n-element chunk of every rank's piece, one after the other.
    const auto pieces = [&](char* area) {
      if (rank_ == root) lay_out_pieces(area, src, count, off, bytes, es);
    };
    return round_fill(pieces, [&](int64_t) {
      if (bytes && !(send == kInPlace && rank_ == root))
        deliver(dst + off * es, input(root) + static_cast<size_t>(rank_) * bytes, bytes);
      return Status::ok();
    });
  });
}

Status ShmComm::do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype, Op op) {
  TT_TRY(begin(kReduceScatter, count, dtype, op, -1));
  const size_t es = dtype_size(dtype);
  const char* src = static_cast<const char*>(send == kInPlace ? recv : send);
  char* dst = static_cast<char*>(recv);
  // In place (send == kInPlace): recv holds size() * count and this rank's result goes to its own piece.
  char* out = send == kInPlace ? dst + static_cast<size_t>(rank_) * count * es : dst;
  const size_t c = chunk_elems(half_bytes(), es, static_cast<size_t>(size_));
  std::vector<const void*>& srcs = reduce_srcs_;  // (its first size() entries; no allocation a call)
  // Note [shared buffers]: a send buffer in the pool is read where it is (every rank reads its own piece of it).
  const uint64_t send_at = pool_offset(src, static_cast<size_t>(size_) * count * es);
  int64_t last_shared = 0;
  TT_TRY(for_each_chunk(count, c, [&](size_t off, size_t n) -> Status {
    const size_t bytes = n * es;
    const bool shared = publish_send(send_at, off * es, bytes * static_cast<size_t>(size_));
    const auto pieces = [&](char* area) {
      if (!shared) lay_out_pieces(area, src, count, off, bytes, es);
    };
    return round_fill(pieces, [&](int64_t r) {
      if (shared) last_shared = r;
      for (int q = 0; q < size_; ++q)
        srcs[static_cast<size_t>(q)] =
            send_of(q, static_cast<size_t>(rank_) * count * es, static_cast<size_t>(rank_) * bytes);
      comm::reduce(out + off * es, srcs.data(), size_, n, dtype, op);
      hdr(rank_)->reduced.value.store(r, std::memory_order_release);  // done with this round's sources
      return Status::ok();
    });
  }));
  return wait_readers(last_shared, "waiting for the ranks to read this rank's buffer");
}

Status ShmComm::do_alltoall(const void* send, void* recv, size_t count, DType dtype) {
  TT_TRY(begin(kAlltoall, count, dtype, Op::kSum, -1, false, static_cast<size_t>(size_) * count * dtype_size(dtype)));
  const size_t es = dtype_size(dtype);
  const char* src = static_cast<const char*>(send == kInPlace ? recv : send);
  char* dst = static_cast<char*>(recv);
  const size_t c = chunk_elems(half_bytes(), es, static_cast<size_t>(size_));
  // Note [shared buffers]: a send buffer in the pool is read where it is; not in place, where this rank's results
  // would overwrite pieces its peers have yet to read.
  const uint64_t send_at = send == kInPlace ? kNoPool : pool_offset(src, static_cast<size_t>(size_) * count * es);
  int64_t last_shared = 0;
  TT_TRY(for_each_chunk(count, c, [&](size_t off, size_t n) -> Status {
    const size_t bytes = n * es;
    const bool shared = publish_send(send_at, off * es, bytes * static_cast<size_t>(size_));
    const auto pieces = [&](char* area) {
      if (!shared) lay_out_pieces(area, src, count, off, bytes, es);
    };
    return round_fill(pieces, [&](int64_t r) {
      if (shared) last_shared = r;
      if (bytes) {
        for (int q = 0; q < size_; ++q)
          deliver(dst + (static_cast<size_t>(q) * count + off) * es,
                  send_of(q, static_cast<size_t>(rank_) * count * es, static_cast<size_t>(rank_) * bytes), bytes);
        hdr(rank_)->reduced.value.store(r, std::memory_order_release);  // done with this round's sources
      }
      return Status::ok();
    });
  }));
  return wait_readers(last_shared, "waiting for the ranks to read this rank's buffer");
}

// The PAGEMAP_SCAN ioctl's interface (linux/fs.h of Linux 6.7; older headers lack it).
struct PageRegion {
  uint64_t start, end, categories;
};
struct PmScanArg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted, category_mask,
      category_anyof_mask, return_mask;
};
constexpr uint64_t kPageIsHuge = 1u << 6;
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);

// This process's /proc/self/pagemap, opened once (and again in a forked child, whose "self" is another process);
// -1 if it cannot be opened.
std::atomic<int> g_pagemap{-2};
int pagemap_fd() {
  int fd = g_pagemap.load(std::memory_order_acquire);
  if (fd != -2) return fd;
  static const bool at_fork = [] {
    pthread_atfork(nullptr, nullptr, [] {
      const int old = g_pagemap.exchange(-2);
      if (old >= 0) ::close(old);
    });
    return true;
  }();
  (void)at_fork;
  fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  int expected = -2;
  if (!g_pagemap.compare_exchange_strong(expected, fd < 0 ? -1 : fd)) {  // another thread was first
    if (fd >= 0) ::close(fd);
    return expected;
  }
  return fd < 0 ? -1 : fd;
}

}  // namespace

bool on_huge_pages(const void* p, size_t bytes) {
  const int fd = pagemap_fd();
  if (fd < 0 || bytes == 0) return false;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  PageRegion region{};
  PmScanArg arg{};
  arg.size = sizeof arg;
  arg.start = a / page * page;
  arg.end = (a + bytes + page - 1) / page * page;
  arg.vec = reinterpret_cast<uint64_t>(&region);
  arg.vec_len = 1;
  arg.category_mask = kPageIsHuge;  // the huge pages, merged into regions
  arg.return_mask = kPageIsHuge;
  // Asked positively: one huge region covering the whole range. (Asking for the pages that are not huge and taking
  // none for all huge would also take what the scan skips, such as VM_PFNMAP mappings, for huge pages.)
  return ioctl(fd, kPagemapScan, &arg) == 1 && region.start <= arg.start && region.end >= arg.end;
}

Result<std::unique_ptr<Communicator>> create_shm(int rank, int size, const ShmOptions& options) {
  auto c = std::make_unique<ShmComm>(rank, size, options);
  TT_TRY(c->init());
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace tt::comm
