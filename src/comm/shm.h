// comm/shm: the Communicator of processes on one node, over shared memory (Note [shm rounds] in comm/shm_internal.h).
//
// Each rank owns one segment (so its pages are local to it), named after the job's id and the rank, in /dev/shm, or
// as a file in TIERTRAIN_SHM_DIR (for containers whose /dev/shm is too small: checked before anything is mapped). A
// segment holds the rank's flags, each on its own cache line and written only by its owner, the description of the
// operation it is in (checked against every peer's), and two data areas of Options::buffer_bytes.
#pragma once

#include <memory>
#include <string>

#include "comm/comm.h"

namespace tt::comm {

struct ShmOptions {
  Options common;
  std::string job_id;           // names the segments; all ranks of a job give the same
  size_t buffer_bytes = 8 << 20;  // each of the two data areas of a segment (TIERTRAIN_COMM_BUFFER)
  // Results of at least this many bytes a rank (the call's whole output at this rank) are written into the caller's
  // buffer with streaming stores, which skip the cache (TIERTRAIN_COMM_STREAM_BYTES; 0: never). Note [streaming
  // stores] in shm.cc.
  size_t stream_bytes = 4 << 20;
  // Gather and scatter pieces of at least this many bytes go in one copy between the ranks' own buffers (cross
  // memory attach) where the ranks may attach to each other (TIERTRAIN_COMM_CMA_BYTES; 0: never; kCmaAuto, the
  // default: kCmaAutoBytes from kCmaAutoRanks ranks up, else never). Note [single copy] in comm/shm_internal.h.
  static constexpr size_t kCmaAuto = ~size_t(0);
  static constexpr size_t kCmaAutoBytes = 256 << 10;
  static constexpr size_t kCmaAutoBytesFew = 32 << 10;  // below kCmaFewRanks ranks
  static constexpr int kCmaFewRanks = 4;
  static constexpr int kCmaAutoRanks = 2;
  size_t cma_bytes = kCmaAuto;
  // Where single copies are on, a root whose buffer is on huge pages throughout (on_huge_pages) also takes them for
  // pieces of at least this many bytes, below cma_bytes, when the call is one round (TIERTRAIN_COMM_CMA_HUGE_BYTES;
  // 0: never). The ranks agree on the largest asked for (0 anywhere: never); the root decides, the others follow it.
  // Note [single copy by pages] in comm/shm_copy.cc.
  size_t cma_huge_bytes = 32 << 10;
  // Point-to-point messages of at least this many bytes go in one copy from the sender's buffer into the receiver's
  // where the ranks may attach to each other (TIERTRAIN_COMM_P2P_CMA_BYTES; 0: never). The default, 32 KiB: at 32
  // KiB the ring was as fast as single copies where the two ranks' cores pass cache lines cheaply, and 3.5x slower
  // where they do not (docs/benchmarks/2026-12-06-cpu-p2p-single-copy/; Note [point-to-point single copy] in
  // comm/shm_p2p.cc).
  size_t p2p_cma_bytes = 32 << 10;
  // Single copies of at least this many bytes are made by both ranks at once where the sender has no receive of its
  // own waiting: the receiver publishes where the bytes go, and it and the sender (while it waits for its send) each
  // claim chunks of 256 KiB, read or written straight between the two buffers (TIERTRAIN_COMM_P2P_SHARED_BYTES; 0:
  // never; this rank's sends offer it, the receiver follows). The default, 256 KiB: on the 2-core VM a 2 MiB copy
  // ran at 13.9 GB/s by the receiver alone and 30.7 GB/s shared (a C probe), and on the H100 host a window of 2 MiB
  // sends took 7.2 ms shared against 15.7 alone (docs/benchmarks/2026-12-07-h100host-both-sides/); on the VM a window
  // of 256 KiB sends took 3.8-4.0 ms shared against 5.0-5.1, of 128 KiB 0.76-0.79 against 0.69 (slower: not shared)
  // (docs/benchmarks/2026-12-07-cpu-p2p-both-sides/). Note [both sides copy] in comm/shm_p2p.cc.
  size_t p2p_shared_bytes = 256 << 10;
  // Allgather and alltoall blocks of at least this many bytes: each rank copies every peer's block straight out of that
  // peer's buffer, one copy a block, where the ranks may attach to each other (TIERTRAIN_COMM_CMA_EXCHANGE_BYTES; 0:
  // never). Unset (kExchangeAuto): 32 KiB up to 8 ranks, 256 KiB from 9 (until 2026-12-07 1 MiB at 2 and 3 ranks: on
  // that day's 2-core VM blocks of 32 and 256 KiB took 4.1 and 20.6 us in an allgather with single copies against 8.4
  // and 41.7 through the segments (mpi4py 5.6, 23.3), in an alltoall 6.3 and 32.2 against 9.9 and 51.3 (8.2, 36.7);
  // docs/benchmarks/2026-12-07-cpu-two-rank-single-copies/; on the VM before it the same sizes had been as fast or
  // slower in single copies, but not slower than mpi4py: the figures below). At 2 ranks on the 2-core VM,
  // Python's alltoall of 1-2 MiB blocks took 2.1-2.7x less time than through the segments (two copies), one of 256-512
  // KiB as long or longer (again on 2026-12-07: 28 against 17.5 us at 256 KiB; allgather 22.0-26.7 against 14.7-26.5,
  // mpi4py 23.0-26.8); on the H100 host's 16 cores an allgather of 256 KiB blocks took 75.7 us in single copies against
  // 192.5 through the segments at 4 ranks (mpi4py 135.3), 231.9 against 465.1 at 8 (383.6), an alltoall 93.5 against
  // 183.3 (158.1) and 359.8 against 441.6 (493.0), and at 16 ranks 1.40 ms against 2.68 (2.07)
  // (docs/benchmarks/2026-12-07-h100host-mpi4py-defaults/, 2026-12-07-h100host-both-sides/). Blocks of 32 KiB, two runs
  // each on another H100 host: at 8 ranks an alltoall 48.4-52.2 us in single copies against 78.2-95.2 through the
  // segments (mpi4py 77.5-81.7), allgather 42.3-44.7 against 48.6-50.4; at 4 ranks 19.4-24.1 against 24.4-33.1 and
  // 15.4-16.9 against 17.9-18.6; at 16 ranks the alltoall lost (273-317 against 190-218): 32 KiB at 4-8 ranks
  // (docs/benchmarks/2026-12-07-h100host-exchange-32k/). Note [single-copy exchanges] in comm/shm_collectives.cc.
  static constexpr size_t kExchangeAuto = ~size_t{0};
  size_t cma_exchange_bytes = kExchangeAuto;
  size_t exchange_bytes(int ranks) const {
    if (cma_exchange_bytes != kExchangeAuto) return cma_exchange_bytes;
    return ranks <= 8 ? size_t{32} << 10 : size_t{256} << 10;
  }
  // An allreduce of at least this many bytes between 2 ranks: each rank reduces its half reading its peer's straight
  // out of the peer's buffer, then copies the peer's reduced half out of the peer's result
  // (TIERTRAIN_COMM_CMA_ALLREDUCE_BYTES; 0: never; off where the ranks may not attach to each other; the ranks agree
  // on the largest). Note [two-rank single-copy allreduce] in comm/shm_collectives.cc.
  size_t cma_allreduce_bytes = 256 << 10;
  // Rounds arrive through a two-level tree from this many ranks up (TIERTRAIN_COMM_TREE_RANKS; 0: never). The
  // default, 32: with fewer ranks the flat line is as fast or faster, the tree's second step costing more than the
  // shorter line saves (docs/benchmarks/2026-11-30-h200x2-comm-tuning/). Note [arrival tree] in comm/shm_internal.h.
  int tree_ranks = 32;
  // Rounds of at most 8 bytes a rank (allreduce, reduce, broadcast, gather, allgather) carry their data in the
  // arrival line instead of the input area (TIERTRAIN_COMM_INLINE=1; 0 on any rank: off everywhere). Unset (-1):
  // on in worlds of up to kInlineAutoRanks ranks: their gain is clear at 8 ranks, within the noise at 16, and gone
  // at 32 (docs/benchmarks/2026-11-30-h200x2-comm-python-layer/). Note [inline rounds] in comm/shm_internal.h.
  int inline_small = -1;
  static constexpr int kInlineAutoRanks = 16;
  // A gather or small reduce of one round that reads nothing from the pools waits for its root alone on every other
  // rank, not for every rank (TIERTRAIN_COMM_ROOTED=0 on any rank: off everywhere). Note [rooted rounds] in comm/shm_internal.h.
  bool rooted = true;
  // A reduction's rounds take at most this many bytes over all ranks (TIERTRAIN_COMM_REDUCE_SPAN; 0: half an area
  // each, as other collectives). Note [reduction rounds] in comm/shm_internal.h.
  size_t reduce_span = 32 << 20;
  // Threads of a rank that share out its large copies and reductions (TIERTRAIN_COMM_THREADS, 1-8; `tiertrain
  // launch --bind-to share` sets it to each rank's share of the CPUs). Note [crew] in crew.cc.
  int threads = 1;
  // Copies and reductions of at least this many bytes are shared out over the threads (TIERTRAIN_COMM_THREAD_BYTES).
  size_t thread_bytes = 256 << 10;
  // Note [shared buffers] in comm/shm_internal.h: each rank's pool of buffers that its peers map (TIERTRAIN_COMM_POOL bytes of
  // address space, pages allocated as buffers are handed out; 0: none). kPoolAuto: the size of the file system the
  // segments are on, at most 1 TiB.
  static constexpr size_t kPoolAuto = ~size_t{0};
  size_t pool_bytes = kPoolAuto;
  // How long a helper thread stays awake after its last job before it sleeps (TIERTRAIN_COMM_THREAD_WAIT_US). 5 ms:
  // long enough that helpers stay awake between the calls of a busy loop; with a shorter wait (200 us) the crew's
  // gain on allreduce varied much more from run to run.
  int64_t thread_wait_us = 5000;
  // Each helper thread on a CPU of its own, where `tiertrain launch` bound the rank to CPUs of its own (it sets
  // TIERTRAIN_CPUS_BOUND=1) (Note [crew]; TIERTRAIN_COMM_THREAD_PIN=0 leaves them to the scheduler).
  bool thread_pin = true;
  std::string dir;              // file-backed segments in this directory instead of /dev/shm (TIERTRAIN_SHM_DIR)
  // Where each rank's segment goes (TIERTRAIN_COMM_MEMPOLICY): auto (preferred on the high-bandwidth node nearest
  // the rank's CPU if there is one, else where first touched), local, bind, preferred, interleave (over all HBW
  // nodes, or all nodes). HBW nodes: comm/topology.h (TIERTRAIN_HBW_NODES, MEMKIND_HBW_NODES, HMAT, flat mode).
  std::string mempolicy = "auto";
};

// Whether [p, p + bytes) is mapped with huge pages (transparent or hugetlb) throughout, as this process's page tables
// say now (the PAGEMAP_SCAN ioctl of /proc/self/pagemap, Linux 6.7 and later). false where the kernel cannot tell,
// for bytes == 0, and for pages not present.
bool on_huge_pages(const void* p, size_t bytes);

Result<std::unique_ptr<Communicator>> create_shm(int rank, int size, const ShmOptions& options);

}  // namespace tt::comm
