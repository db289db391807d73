// comm/shm_collectives: the collectives of the shm backend as rounds (Note [shm rounds], Note [reduction rounds],
// Note [shared buffers]).
#include "comm/shm_internal.h"

namespace tt::comm {
namespace shm_detail {

size_t chunk_elems(size_t buffer_bytes, size_t es, size_t pieces) {
  size_t c = buffer_bytes / (es * pieces);
  if (c * es >= 64) c = c / (64 / std::min<size_t>(es, 64)) * (64 / std::min<size_t>(es, 64));
  return std::max<size_t>(c, 1);
}

// Runs chunk(off, n) for the chunks of at most c elements that cover count, in order; once with n = 0 when count is
// 0 (the empty round every rank still takes part in, so that a mismatch or a misuse is seen).

Status ShmComm::do_broadcast(const void* send, void* recv, size_t count, DType dtype, int root) {
  TT_TRY(begin(kBroadcast, count, dtype, Op::kSum, root, false, count * dtype_size(dtype)));
  if (misused()) return fail_misuse();
  const size_t es = dtype_size(dtype);
  const char* src = static_cast<const char*>(send == kInPlace ? recv : send);
  char* dst = static_cast<char*>(recv);
  if (broadcast_in_one_copy(count * es)) return broadcast_single_copy(src, dst, count * es, root);
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
    // once, not twice. Reading it twice made the root the slowest rank of a large broadcast out of place
    // (docs/benchmarks/2026-11-30-h200x2-comm-host-v4/).
    const auto fill = [&](char* area) {
      if (rank_ != root) return;
      if (shared) {  // nothing to copy in: the others read the root's buffer
        if (src != dst) deliver(dst + off * es, src + off * es, bytes);
        return;
      }
      constexpr size_t kBlock = 64 << 10;  // in L2 (tests: two blocks a round of 128 KiB halves)
      const bool stream = src != dst && streams_into(dst + off * es, bytes);  // (once for the chunk's blocks)
      for (size_t b = 0; b < bytes; b += kBlock) {
        const size_t k = std::min(kBlock, bytes - b);
        std::memcpy(area + b, src + off * es + b, k);
        if (src != dst) crew_copy(dst + off * es + b, area + b, k, stream);
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

// Note [single-copy broadcast]
// At 2 and 3 ranks a broadcast of [cma_bytes_, kBroadcastCopyMax) bytes is one round in which every other rank reads
// the root's buffer straight into its own (process_vm_readv, or a plain copy where the root's buffer is in its pool:
// Note [shared buffers]), one copy instead of two: the root publishes its buffer's address in its meta half and
// arrives, copies its own result if out of place, and waits until every rank has marked itself done (`reduced`), so
// that its buffer is not the caller's again while a peer may still read it. From 4 ranks the readers would pin the
// root's pages all at once (Note [single copy by pages]); from kBroadcastCopyMax the segments' pipelined rounds,
// where the root copies a chunk in while the others copy the last one out, are faster. On the 2-core VM of
// 2026-12-07 (docs/benchmarks/2026-12-07-cpu-two-rank-single-copies/, best of three runs each) mpi4py_same.py's
// broadcasts of 32 KiB, 256 KiB, 512 KiB, 1 MiB and 2 MiB took 2.7, 12.9, 26.9, 88.9 and 213 us in single copies
// against 4.0, 18.4, 37.3, 77.6 and 176 through the segments (mpi4py 4.3, 14.5, 30.2, 103, 247).
Status ShmComm::broadcast_single_copy(const char* src, char* dst, size_t bytes, int root) {
  if (rank_ == root) {
    cur_.addr = reinterpret_cast<uint64_t>(src);
    cur_.send_off = pool_offset(src, bytes);
  }
  return round_fill([](char*) {}, [&](int64_t r) -> Status {
    if (rank_ == root) {
      if (src != dst) deliver(dst, src, bytes);
      return wait_all(&Header::reduced, r, "waiting for the ranks to read the root's buffer");
    }
    const Meta& m = hdr(root)->meta[half_];
    TT_TRY(read_peer(root, m.send_off, m.addr, 0, dst, bytes, false,
                     [](char* to, const char* from, size_t n) { std::memcpy(to, from, n); }));
    hdr(rank_)->reduced.value.store(r, std::memory_order_release);
    return Status::ok();
  });
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
      const bool stream = streams_into(dst + off * es, n * es);
      const auto out_part = [&](int i) {
        size_t a = 0, b = 0;
        share(n, out_parts, i, 1024, &a, &b);
        while (a < b) {
          const size_t q = a / slice, e = std::min(b, (q + 1) * slice);
          deliver_one(dst + (off + a) * es, result(static_cast<int>(q)) + a * es, (e - a) * es, stream);
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
  if (allreduce_in_one_copy(count * dtype_size(dtype)))
    return allreduce_single_copy(static_cast<const char*>(send == kInPlace ? recv : send), static_cast<char*>(recv),
                                 count, dtype, op);
  return reduce_rounds(send, recv, count, dtype, op, -1);
}

// Note [two-rank single-copy allreduce]
// Between two ranks a large allreduce through the segments copies each rank's buffer into its area, reduces the halves
// into the result areas and copies both halves out: about 88 MiB of memory traffic a rank for 16 MiB. With cross memory
// attach it is two rounds and about 40 MiB. In the first each rank publishes its send buffer (meta `addr`; `send_off`
// where it is in its pool) and reduces its half (rank 0 the first ceil(n / 2) elements, rank 1 the rest) into its
// receive buffer, reading the peer's half of it straight out of the peer's send buffer, a chunk of kAllreduceChunk at a
// time into a buffer that stays in cache (process_vm_readv; a plain read where the buffer is in the peer's pool), the
// two sources in rank order as in every reduction (comm/reduce.h), over the crew by element ranges. In the second each
// publishes its receive buffer and copies the peer's reduced half out of it in one copy (a kernel copy a thread of the
// crew), marks itself done (`reduced`) and waits for the peer's mark, so that neither buffer is the caller's again
// while the peer may still read it. The second round's arrival is the wait the first needs (Note [shm rounds]): a rank
// arrives only once its half is reduced and its reads of the peer's send buffer are done, so that the peer may then
// write its receive buffer, in place its send buffer too; in the first round each writes only its own half, which the
// peer does not read. Alike on every rank: from the agreed cma_allreduce_bytes_, where every rank's probe passed.
// mpi4py_same.py at 2 ranks on the 2-core VM (2026-12-07; segments -> single copy, mpi4py): 256 KiB 43-46 -> 33-36 us
// (59-60), 1 MiB 224-235 -> 163-168 (255-259), 4 MiB 1023-1030 -> 541-555 (930-947), 16 MiB 3858-4230 -> 1982-2088
// (3466-3520); at 128 KiB even (22-23 us). Chunks of 32 KiB were slower (16 MiB: 2274-2343 us), of 512 KiB the same.
// Record: docs/benchmarks/2026-12-07-cpu-two-rank-allreduce/.
Status ShmComm::allreduce_single_copy(const char* src, char* dst, size_t count, DType dtype, Op op) {
  constexpr size_t kAllreduceChunk = 128 << 10;
  const size_t es = dtype_size(dtype), half = (count + 1) / 2;
  const int peer = 1 - rank_;
  const size_t s0 = rank_ == 0 ? 0 : half, s1 = rank_ == 0 ? half : count;  // this rank's half
  const size_t p0 = peer == 0 ? 0 : half, p1 = peer == 0 ? half : count;    // the peer's
  const int parts = (s1 - s0) * es >= opt_.thread_bytes ? crew_->size() : 1;
  const size_t chunk = kAllreduceChunk / es;  // (element sizes 1-8 divide it)
  allreduce_tmp_.resize(static_cast<size_t>(crew_->size()) * kAllreduceChunk);  // (the first call allocates)
  cur_.addr = reinterpret_cast<uint64_t>(src);
  cur_.send_off = pool_offset(src, count * es);
  TT_TRY(round_fill([](char*) {}, [&](int64_t r) -> Status {
    jitter(r);  // (tests: a rank that read or wrote before its peer is ready shows)
    const uint64_t pooled = hdr(peer)->meta[half_].send_off, remote = hdr(peer)->meta[half_].addr;
    int failed[Crew::kMaxThreads] = {};  // each part's cma_move error (helpers do not touch the communicator)
    const auto reduce_part = [&](int i) {
      size_t a = 0, b = 0;
      share(s1 - s0, parts, i, 1024, &a, &b);
      char* tmp = allreduce_tmp_.data() + static_cast<size_t>(i) * kAllreduceChunk;
      for (size_t k = s0 + a; k < s0 + b; k += chunk) {
        const size_t m = std::min(chunk, s0 + b - k);
        const char* theirs = tmp;
        if (pooled != kNoPool) {
          theirs = pool_base(peer) + pooled + k * es;
        } else if (const int err = cma_move(peer, tmp, remote + k * es, m * es, false); err != 0) {
          failed[i] = err;
          return;
        }
        const void* both[2] = {src + k * es, theirs};
        if (rank_ == 1) std::swap(both[0], both[1]);  // rank order
        comm::reduce(dst + k * es, both, 2, m, dtype, op);
      }
    };
    if (parts == 1) reduce_part(0);
    else crew_->run(reduce_part);
    for (int i = 0; i < parts; ++i)
      if (failed[i] != 0) return cma_failed(peer, failed[i], false);
    return Status::ok();
  }));
  cur_.addr = reinterpret_cast<uint64_t>(dst);
  cur_.recv_off = pool_offset(dst, count * es);
  return round_fill([](char*) {}, [&](int64_t r) -> Status {
    jitter(r);
    // Over the crew as the reduction: one kernel copy a part.
    const size_t bytes = (p1 - p0) * es;
    const Meta& m = hdr(peer)->meta[half_];
    TT_TRY(read_peer(peer, m.recv_off, m.addr, p0 * es, dst + p0 * es, bytes, bytes >= opt_.thread_bytes,
                     [this](char* to, const char* from, size_t n) { crew_copy(to, from, n, false); }));
    hdr(rank_)->reduced.value.store(r, std::memory_order_release);
    return wait_all(&Header::reduced, r, "waiting for the peer's single copy");
  });
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
  const size_t bytes = count * dtype_size(dtype);
  if (exchange_in_one_copy(bytes)) {
    char* dst = static_cast<char*>(recv);
    // In place this rank's block is where its peers read it; the blocks this rank writes are the others.
    const char* src = send == kInPlace ? dst + static_cast<size_t>(rank_) * bytes : static_cast<const char*>(send);
    return exchange_single_copy(src, dst, bytes, false);
  }
  return gather_rounds(send, recv, count, dtype, -1);
}

// Note [single-copy exchanges]
// An allgather or alltoall of large blocks through the segments copies every byte twice (into this rank's area, out
// of it into each reader's buffer); with cross memory attach each rank reads every peer's block for it straight out
// of that peer's buffer (process_vm_readv) and copies its own: one copy. One round: each rank publishes where its
// blocks are (its meta half's `addr`) and arrives; then reads its peers' blocks in turn from the next rank up (so
// that at any moment each buffer has one reader, not size() - 1 pinning pages of one page table at once: Note
// [single copy by pages]; a block in its owner's pool with a plain copy, Note [shared buffers]), marks itself done
// (`reduced`) and waits until every peer is, so that no buffer is the
// caller's again while a peer may still read it. An in-place alltoall's blocks are overwritten by what this rank
// reads, so it first copies them apart (exchange_copy_) and publishes that copy. Every rank takes this path alike:
// from the agreed cma_exchange_bytes_ a block (ShmOptions::cma_exchange_bytes), where every rank's probe passed.
// The kernel's copy also faults in a fresh receive buffer's pages in bulk, where memcpy faults them one by one. The
// mpi4py program at 2 ranks on the 2-core VM (three interleaved runs, best of each; record:
// docs/benchmarks/2026-12-06-cpu-single-copy-exchanges/): allgather of 2 MiB blocks 297 -> 204 us (mpi4py 209), of
// 16 MiB 3314 -> 3092 (3698); alltoall (a new receive buffer each call) of 2 MiB 491 -> 223 us (224), of 16 MiB
// 6051 -> 5706 (5194).
Status ShmComm::exchange_single_copy(const char* src, char* dst, size_t bytes, bool alltoall) {
  if (alltoall && src == dst) {  // in place
    exchange_copy_.assign(src, src + static_cast<size_t>(size_) * bytes);
    src = exchange_copy_.data();
  }
  cur_.addr = reinterpret_cast<uint64_t>(src);
  // Note [shared buffers]: blocks in a pool are read where they are with a plain copy.
  cur_.send_off = pool_offset(src, (alltoall ? static_cast<size_t>(size_) : 1) * bytes);
  // A pooled block's plain copy streams past the streaming threshold (Note [streaming stores]): on the VM a 2 MiB
  // block's took 1.2-1.3x longer with streaming stores, a 16 MiB one's 0.8-0.9x. This rank's own block is copied with
  // ordinary stores, as Open MPI's memcpy does: streaming stores into a receive buffer the caller has just written
  // (numpy's zeros_like) cost more than they save into a cold one. 2 ranks on the 2-core VM, 16 MiB blocks, two or
  // three interleaved runs each (streaming -> ordinary, mpi4py): alltoall into a new zeroed buffer 9.98-10.15 ->
  // 6.26-6.62 ms (6.00-6.58), allgather into one 10.71-10.78 -> 7.85-7.93 (6.99-7.17), allgather into a kept buffer
  // 2.91-3.20 -> 2.97-3.03 (3.09-3.10) and in another set 3.12-3.23 -> 3.41-3.54 (3.25-3.40); 2 MiB blocks the same
  // within noise. The worst case against mpi4py goes from 0.60x to 0.89x for a few percent on kept buffers, within
  // the runs' spread (a third set with this code: allgather kept 3.00-3.10 ms, mpi4py 3.05-3.16; alltoall 5.27-5.86,
  // mpi4py 5.70-5.99; one thread's memcpy instead of the crew's the same within noise).
  const auto copy = [&](char* to, const char* from, size_t n) {
    if (opt_.stream_bytes > 0 && n >= opt_.stream_bytes) deliver(to, from, n);
    else std::memcpy(to, from, n);
  };
  Status st = round_fill([](char*) {}, [&](int64_t r) -> Status {
    const size_t mine = alltoall ? static_cast<size_t>(rank_) * bytes : 0;  // this rank's block in a peer's blocks
    for (int i = 1; i < size_; ++i) {
      const int q = (rank_ + i) % size_;
      char* to = dst + static_cast<size_t>(q) * bytes;
      const Meta& m = hdr(q)->meta[half_];
      TT_TRY(read_peer(q, m.send_off, m.addr, mine, to, bytes, false, copy));
    }
    const char* own = alltoall ? src + static_cast<size_t>(rank_) * bytes : src;
    char* to = dst + static_cast<size_t>(rank_) * bytes;
    if (own != to) crew_copy(to, own, bytes, false);  // (ordinary stores: the comment above)
    hdr(rank_)->reduced.value.store(r, std::memory_order_release);
    return wait_all(&Header::reduced, r, "waiting for the ranks' single copies");
  });
  // Every peer is done with the copy once the call succeeded; it is not kept (size() blocks can be large). After a
  // failure a peer may still read it: kept until the next call.
  if (st.is_ok() && !exchange_copy_.empty()) std::vector<char>().swap(exchange_copy_);
  return st;
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
  if (exchange_in_one_copy(count * es)) return exchange_single_copy(src, dst, count * es, true);
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

}  // namespace shm_detail
}  // namespace tt::comm
