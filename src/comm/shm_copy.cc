// comm/shm_copy: single copies between the ranks' address spaces (Note [single copy], Note [single copy by pages])
// and the huge-page detection they use (PAGEMAP_SCAN).
#include "comm/shm_internal.h"

namespace tt::comm {
namespace shm_detail {

void ShmComm::probe_single_copy() {
  if (!wants_single_copies()) return;
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
  hdr(rank_)->p2p_cma_bytes.store(opt_.p2p_cma_bytes, std::memory_order_release);
  hdr(rank_)->cma_exchange_bytes.store(opt_.exchange_bytes(size_), std::memory_order_release);
  hdr(rank_)->cma_allreduce_bytes.store(opt_.cma_allreduce_bytes, std::memory_order_release);
}

int ShmComm::cma_move(int q, void* local, uint64_t remote, size_t bytes, bool write) const {
  char* l = static_cast<char*>(local);
  while (bytes > 0) {
    iovec li{l, bytes};
    iovec ri{reinterpret_cast<void*>(remote), bytes};
    const pid_t pid = static_cast<pid_t>(hdr(q)->pid);
    const ssize_t n = write ? process_vm_writev(pid, &li, 1, &ri, 1, 0) : process_vm_readv(pid, &li, 1, &ri, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return -1;
    l += n;
    remote += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return 0;
}

Status ShmComm::cma_failed(int q, int err, bool write) {
  // The setting that turns this collective's single copies off.
  const char* off = cur_.kind == kAllreduce                               ? "TIERTRAIN_COMM_CMA_ALLREDUCE_BYTES"
                    : cur_.kind == kAllgather || cur_.kind == kAlltoall ? "TIERTRAIN_COMM_CMA_EXCHANGE_BYTES"
                                                                        : "TIERTRAIN_COMM_CMA_BYTES";
  return fail(make_status(StatusCode::kIoError,
                          "%s #%lld (rank %d of %d): single copy %s rank %d failed: %s (%s=0 turns these single copies "
                          "off)",
                          kind_name(cur_.kind), static_cast<long long>(cur_.seq), rank_, size_, write ? "to" : "from",
                          q, err > 0 ? std::strerror(err) : "nothing copied", off));
}

Status ShmComm::cma_copy(int q, void* local, uint64_t remote, size_t bytes, bool write) {
  const int err = cma_move(q, local, remote, bytes, write);
  return err == 0 ? Status::ok() : cma_failed(q, err, write);
}

// Note [single copy by pages]
// A single copy into (out of) the root's buffer costs little where that buffer is on huge pages, and much where it
// is on 4 KiB pages: the kernel pins every page of the root's buffer that a peer's copy touches, and with all peers
// pinning pages of one page table at once their copies queue: into huge pages single copies beat the segments, into
// 4 KiB pages they lose to them (docs/benchmarks/2026-11-30-h200x2-comm-tuning/). Below the single-copy threshold
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
  // it saves (docs/benchmarks/2026-11-30-h200x2-comm-pool-measured/).
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


namespace {

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

}  // namespace shm_detail

bool on_huge_pages(const void* p, size_t bytes) {
  using namespace shm_detail;
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


}  // namespace tt::comm
