// comm/shm: the shared-memory backend's segments (created, reserved, mapped, placed), the shared pool's buffers,
// the start of a collective, and create_shm. The round protocol and the collectives are in the files that
// comm/shm_internal.h lists.
#include "core/env.h"
#include "comm/shm_internal.h"

namespace tt::comm {
namespace shm_detail {

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
  // Note [point-to-point rings]: a mailbox per rank after the areas.
  seg_bytes_ = (mail_offset() + static_cast<size_t>(size_) * sizeof(Mailbox) + 4095) / 4096 * 4096;
  if (const char* j = env::get("TIERTRAIN_COMM_JITTER_US")) jitter_us_ = std::atoll(j);
  if (const char* p = env::get("TIERTRAIN_COMM_PROFILE")) profile_ = std::atoi(p) != 0;
  if (opt_.cma_bytes == ShmOptions::kCmaAuto)  // Note [single copy]: alike on every rank, as the size is
    opt_.cma_bytes = size_ < ShmOptions::kCmaAutoRanks ? 0
                     : size_ < ShmOptions::kCmaFewRanks ? ShmOptions::kCmaAutoBytesFew
                                                        : ShmOptions::kCmaAutoBytes;
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
                       "of TIERTRAIN_COMM_BUFFER=%s and 64 KiB a rank for messages; %d ranks need %s). Give the container more (docker run "
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
    h->p2p_cma_bytes.store(0, std::memory_order_relaxed);
    h->cma_exchange_bytes.store(0, std::memory_order_relaxed);
    h->cma_allreduce_bytes.store(0, std::memory_order_relaxed);
    h->tree_ranks.store(static_cast<uint64_t>(opt_.tree_ranks), std::memory_order_relaxed);
    h->reduce_span.store(static_cast<uint64_t>(opt_.reduce_span), std::memory_order_relaxed);
    h->cma_huge_bytes.store(static_cast<uint64_t>(opt_.cma_huge_bytes), std::memory_order_relaxed);
    h->inline_small.store(inline_wanted() ? 1 : 0, std::memory_order_relaxed);
    h->rooted_small.store(opt_.rooted ? 1 : 0, std::memory_order_relaxed);
    // Note [single copy]: peers of this user may attach to read and write the buffers given to gather and scatter.
    if (wants_single_copies()) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
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
    p2p_cma_bytes_ = agreed(&Header::p2p_cma_bytes);    // Note [point-to-point single copy]
    cma_exchange_bytes_ = agreed(&Header::cma_exchange_bytes);  // Note [single-copy exchanges]
    cma_allreduce_bytes_ = agreed(&Header::cma_allreduce_bytes);  // Note [two-rank single-copy allreduce]
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
  const char* bound = env::get("TIERTRAIN_CPUS_BOUND");
  crew_ = std::make_unique<Crew>(opt_.threads, std::chrono::microseconds(opt_.thread_wait_us),
                                 opt_.thread_pin && bound != nullptr && std::string(bound) == "1");
  reduce_srcs_.assign(static_cast<size_t>(size_) * static_cast<size_t>(crew_->size()), nullptr);
  peer_send_.assign(static_cast<size_t>(size_), kNoPool);
  peer_recv_.assign(static_cast<size_t>(size_), kNoPool);
  TT_LOG(INFO, COMM,
         "shm communicator: rank %d of %d, %s segments, %s; pool %s; single copies %s; point-to-point single copies "
         "%s; single-copy exchanges %s; single-copy allreduce %s; arrival %s; inline rounds %s; rooted rounds %s; "
         "%d thread(s)%s",
         rank_, size_, format_bytes(static_cast<int64_t>(seg_bytes_)).c_str(), placement_.c_str(),
         pool_ != nullptr ? format_bytes(static_cast<int64_t>(pool_bytes_)).c_str()
         : pool_bytes_ > 0 ? "off (not mapped everywhere)"
                           : "none",
         cma_bytes_ > 0 ? ("from " + format_bytes(static_cast<int64_t>(cma_bytes_)) + " a piece").c_str() : "off",
         p2p_cma_bytes_ > 0 ? ("from " + format_bytes(static_cast<int64_t>(p2p_cma_bytes_))).c_str() : "off",
         cma_exchange_bytes_ > 0 ? ("from " + format_bytes(static_cast<int64_t>(cma_exchange_bytes_)) + " a block").c_str()
                                 : "off",
         allreduce_in_one_copy(~size_t{0}) ? ("from " + format_bytes(static_cast<int64_t>(cma_allreduce_bytes_))).c_str()
                                            : "off",
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
  TT_ASSIGN_OR_RETURN(HbwNodes hbw, find_hbw_nodes(t, env::get("TIERTRAIN_HBW_NODES"), env::get("MEMKIND_HBW_NODES")));
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


}  // namespace shm_detail

namespace shm_detail {
Result<std::unique_ptr<Communicator>> ShmComm::make_split(const std::vector<int>& members, int new_rank,
                                                         const std::string& tag) {
  ShmOptions o = given_;
  o.job_id = opt_.job_id + "-" + tag;
  return create_shm(new_rank, static_cast<int>(members.size()), o);
}
}  // namespace shm_detail

Result<std::unique_ptr<Communicator>> create_shm(int rank, int size, const ShmOptions& options) {
  auto c = std::make_unique<shm_detail::ShmComm>(rank, size, options);
  TT_TRY(c->init());
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace tt::comm
