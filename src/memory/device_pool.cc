#include "memory/device_pool.h"

#include <algorithm>

#include "core/log.h"
#include "core/units.h"

namespace tt::memory {

DevicePool::DevicePool(void* base, size_t budget, Device device, MemoryStats* stats, size_t capacity,
                       EventFactory events)
    : base_(static_cast<char*>(base)), budget_(budget / kDeviceAlignBytes * kDeviceAlignBytes), device_(device),
      stats_(stats), arena_(budget_), capacity_(capacity), events_(std::move(events)) {}

size_t DevicePool::largest_free_block() const { return arena_.largest_free(); }

size_t DevicePool::pending_bytes() const {
  size_t n = 0;
  for (const Pending& p : pending_) n += p.block.bytes;
  return n;
}

void DevicePool::record_stream(const void* ptr, Stream& stream) {
  auto it = live_.find(ptr);
  TT_CHECK(it != live_.end(), "record_stream on %p, which this pool did not allocate", ptr);
  TT_CHECK(events_ != nullptr, "record_stream needs a pool made with an event factory");
  for (Stream* s : it->second.streams)
    if (s == &stream) return;
  it->second.streams.push_back(&stream);
}

void DevicePool::process_pending(bool wait) {
  for (size_t i = 0; i < pending_.size();) {
    bool done = true;
    for (auto& e : pending_[i].events) {
      if (wait) {
        Status s = e->synchronize();
        TT_CHECK(s.is_ok(), "waiting for a stream before reusing a block: %s", s.to_string().c_str());
      } else if (!e->query()) {
        done = false;
        break;
      }
    }
    if (done) {
      release(pending_[i].block);
      pending_.erase(pending_.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

Result<void*> DevicePool::allocate_bytes(size_t bytes, TensorClass cls, const std::string& tag) {
  const size_t size = device_alloc_size(std::max<size_t>(bytes, 1));
  if (!pending_.empty()) process_pending(false);
  std::optional<size_t> taken = arena_.take(size);
  if (!taken && !pending_.empty()) {
    process_pending(true);
    taken = arena_.take(size);
  }
  if (!taken) {
    const std::string cap =
        capacity_ > 0 ? " (device capacity " + format_bytes(static_cast<int64_t>(capacity_)) + ")" : std::string();
    return make_status(StatusCode::kOutOfMemory,
                       "device pool on %s%s is out of memory: cannot allocate %s for %s '%s'; budget %s, in use %s, "
                       "free (cached) %s, largest free block %s. Raise --device-budget (TIERTRAIN_DEVICE_BUDGET) or "
                       "reduce --batch / --seq / the model size",
                       device_.to_string().c_str(), cap.c_str(), format_bytes(static_cast<int64_t>(size)).c_str(),
                       tensor_class_name(cls), tag.c_str(), format_bytes(static_cast<int64_t>(budget_)).c_str(),
                       format_bytes(static_cast<int64_t>(in_use_)).c_str(),
                       format_bytes(static_cast<int64_t>(budget_ - in_use_)).c_str(),
                       format_bytes(static_cast<int64_t>(largest_free_block())).c_str());
  }
  const size_t offset = *taken;
  void* ptr = base_ + offset;
  live_[ptr] = Live{offset, size, cls, {}};
  in_use_ += size;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  ++allocation_count_;
  if (stats_) stats_->on_alloc(tier_, cls, static_cast<int64_t>(size));
  TT_LOG(TRACE, MEM, "device alloc %s %-11s %s at +%zu (in use %s)", format_bytes(static_cast<int64_t>(size)).c_str(),
         tensor_class_name(cls), tag.c_str(), offset, format_bytes(static_cast<int64_t>(in_use_)).c_str());
  return ptr;
}

Result<Tensor> DevicePool::allocate(Shape shape, DType dtype, TensorClass cls, const std::string& tag) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  TT_ASSIGN_OR_RETURN(void* ptr, allocate_bytes(bytes, cls, tag));
  return Tensor(ptr, shape, dtype, cls, device_);
}

void DevicePool::free(void* ptr) {
  if (ptr == nullptr) return;
  auto it = live_.find(ptr);
  TT_CHECK(it != live_.end(), "freeing %p, which this pool did not allocate", ptr);
  Live block = std::move(it->second);
  live_.erase(it);
  if (block.streams.empty()) {
    release(block);
    return;
  }
  // Used on other streams: reusable once the work they have now is done.
  Pending p;
  for (Stream* s : block.streams) {
    p.events.push_back(events_());
    s->record(*p.events.back());
  }
  block.streams.clear();
  p.block = std::move(block);
  pending_.push_back(std::move(p));
}

void DevicePool::release(const Live& block) {
  if (stats_) stats_->on_free(tier_, block.cls, static_cast<int64_t>(block.bytes));
  in_use_ -= block.bytes;
  arena_.give(block.offset, block.bytes);
}

}  // namespace tt::memory
