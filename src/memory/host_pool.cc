#include "memory/host_pool.h"

#include <algorithm>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/log.h"
#include "core/units.h"
#include "memory/numa.h"

namespace tt::memory {
namespace {

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}
size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
std::string limit_string(rlim_t v) {
  return v == RLIM_INFINITY ? std::string("unlimited") : format_bytes(static_cast<int64_t>(v));
}

}  // namespace

std::string memlock_limit_string() {
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0) return "unknown";
  return limit_string(r.rlim_cur) + " (hard: " + limit_string(r.rlim_max) + ")";
}

HostPool::HostPool(HostPoolOptions options, MemoryStats* stats) : options_(std::move(options)), stats_(stats) {}

HostPool::~HostPool() {
  if (!live_.empty())
    TT_LOG(WARN, MEM, "host pool destroyed with %zu live blocks (%s)", live_.size(),
           format_bytes(static_cast<int64_t>(in_use_)).c_str());
  for (Slab& s : slabs_) {
    if (options_.unpin) options_.unpin(s.base, s.bytes);
    munmap(s.base, s.bytes);
  }
}

Status HostPool::add_slab(size_t bytes) {
  bytes = round_up(std::max<size_t>(bytes, 1), page_size());
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TT_RETURN_IF(p == MAP_FAILED, kOutOfMemory, "cannot map %s of host memory for the host pool",
               format_bytes(static_cast<int64_t>(bytes)).c_str());
  if (options_.huge_pages) (void)madvise(p, bytes, MADV_HUGEPAGE);  // advice only: refused, the pages stay small
  if (options_.numa_node >= 0) {
    Status s = bind_to_node(p, bytes, options_.numa_node);
    if (!s.is_ok()) {
      if (options_.numa_required) {
        munmap(p, bytes);
        return s;
      }
      TT_LOG(WARN, MEM, "host memory stays unplaced (the GPU's NUMA node %d could not be bound: %s)",
             options_.numa_node, s.message().c_str());
      options_.numa_node = -1;
    }
  }
  if (options_.pin) {
    Status s = options_.pin(p, bytes);
    if (!s.is_ok() && s.code() != StatusCode::kOutOfMemory) {
      munmap(p, bytes);
      return make_status(s.code(), "cannot pin a %s slab of host memory: %s",
                         format_bytes(static_cast<int64_t>(bytes)).c_str(), s.message().c_str());
    }
    if (!s.is_ok()) {
      munmap(p, bytes);
      return make_status(StatusCode::kOutOfMemory,
                         "cannot pin a %s slab of host memory (%s pinned so far): %s. Locked memory is limited by "
                         "RLIMIT_MEMLOCK, now %s; raise it with `ulimit -l unlimited`, a memlock line in "
                         "/etc/security/limits.conf, or `docker run --ulimit memlock=-1`, or reduce what the plan "
                         "keeps in host memory",
                         format_bytes(static_cast<int64_t>(bytes)).c_str(),
                         format_bytes(static_cast<int64_t>(slab_bytes_)).c_str(), s.message().c_str(),
                         memlock_limit_string().c_str());
    }
  }
  slabs_.push_back(Slab{static_cast<char*>(p), bytes, Arena(bytes)});
  slab_bytes_ += bytes;
  TT_LOG(INFO, MEM, "host pool: slab %zu of %s%s (%s in all)", slabs_.size(),
         format_bytes(static_cast<int64_t>(bytes)).c_str(),
         options_.numa_node >= 0 ? (" on NUMA node " + std::to_string(options_.numa_node)).c_str() : "",
         format_bytes(static_cast<int64_t>(slab_bytes_)).c_str());
  return Status::ok();
}

Status HostPool::reserve(size_t bytes) {
  if (bytes == 0) return Status::ok();
  return add_slab(bytes);
}

Result<void*> HostPool::allocate(size_t bytes, TensorClass cls, const std::string& tag) {
  const size_t size = host_alloc_size(bytes);
  // Best fit over all slabs: the slab whose smallest sufficient free block is smallest.
  size_t best = slabs_.size();
  for (size_t i = 0; i < slabs_.size(); ++i) {
    const size_t largest = slabs_[i].arena.largest_free();
    if (largest >= size && (best == slabs_.size() || largest < slabs_[best].arena.largest_free())) best = i;
  }
  if (best == slabs_.size()) {
    Status s = add_slab(size);
    if (!s.is_ok()) return std::move(s.with_context("allocating " + tag));
    best = slabs_.size() - 1;
  }
  Slab& slab = slabs_[best];
  const std::optional<size_t> off = slab.arena.take(size);
  TT_CHECK(off.has_value(), "host pool: slab %zu lost its free block", best);
  void* ptr = slab.base + *off;
  live_[ptr] = Live{best, *off, size, cls};
  in_use_ += size;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  ++allocation_count_;
  if (stats_) stats_->on_alloc(options_.tier, cls, static_cast<int64_t>(size));
  TT_LOG(TRACE, MEM, "host alloc %s %s (%s)", format_bytes(static_cast<int64_t>(size)).c_str(), tag.c_str(),
         tensor_class_name(cls));
  return ptr;
}

void HostPool::free(void* ptr) {
  if (ptr == nullptr) return;
  auto it = live_.find(ptr);
  TT_CHECK(it != live_.end(), "freeing %p, which this host pool did not allocate", ptr);
  const Live b = it->second;
  live_.erase(it);
  slabs_[b.slab].arena.give(b.offset, b.bytes);
  in_use_ -= b.bytes;
  if (stats_) stats_->on_free(options_.tier, b.cls, static_cast<int64_t>(b.bytes));
}

std::string HostPool::describe() const {
  std::string s = std::to_string(slabs_.size()) + (slabs_.size() == 1 ? " slab, " : " slabs, ") +
                  format_bytes(static_cast<int64_t>(slab_bytes_)) + (pinned() ? " pinned" : " mapped");
  if (options_.numa_node >= 0) s += " on NUMA node " + std::to_string(options_.numa_node);
  return s + ", " + format_bytes(static_cast<int64_t>(in_use_)) + " held";
}

}  // namespace tt::memory
