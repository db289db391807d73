// core/recycling_allocator: an allocator for std::allocate_shared of objects made and dropped at a high rate (a
// non-blocking message's operation and request: one each per Isend or Irecv). Freed blocks are kept per thread and
// per size, up to kKeep, and handed out again, instead of going back to malloc.
//
//   auto op = std::allocate_shared<AsyncOp>(RecyclingAllocator<AsyncOp>{});
//
// Note [recycled blocks]
// glibc's per-thread cache keeps 7 blocks of a size: a window of 64 Isends and their Waits made 64 operations and
// requests, then dropped them, so most went through malloc's and free's slow paths: 16% of the time of a window of
// small messages from Python (2 ranks, the 2-core VM). A thread keeps up to kKeep blocks of each size here. A block
// may be freed on another thread than the one that took it (the engine's thread completes what a caller posted): it
// joins that thread's blocks, or malloc's past kKeep. A thread's blocks go back to malloc when it ends; a block freed
// on a thread after its blocks went (a static's destructor at exit) goes straight to malloc.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace tt {

namespace recycling_detail {

// The blocks of Size bytes this thread keeps. `gone`: this thread's list was destroyed (trivially destructible, so
// still readable then).
template <size_t Size>
struct Blocks {
  static constexpr size_t kKeep = 256;
  std::vector<void*> free;
  ~Blocks() {
    gone() = true;
    for (void* b : free) ::operator delete(b);
  }
  static bool& gone() {
    thread_local bool g = false;
    return g;
  }
  static Blocks& mine() {
    thread_local Blocks b;
    return b;
  }
  static void* take() {
    if (!gone()) {
      Blocks& b = mine();
      if (!b.free.empty()) {
        void* p = b.free.back();
        b.free.pop_back();
        return p;
      }
    }
    return ::operator new(Size);
  }
  static void give(void* p) {
    if (!gone()) {
      Blocks& b = mine();
      if (b.free.size() < kKeep) {
        b.free.push_back(p);
        return;
      }
    }
    ::operator delete(p);
  }
};

}  // namespace recycling_detail

template <typename T>
struct RecyclingAllocator {
  using value_type = T;
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "RecyclingAllocator: over-aligned type");
  RecyclingAllocator() noexcept = default;
  template <typename U>
  RecyclingAllocator(const RecyclingAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n != 1) return static_cast<T*>(::operator new(n * sizeof(T)));
    return static_cast<T*>(recycling_detail::Blocks<sizeof(T)>::take());
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n != 1) return ::operator delete(p);
    recycling_detail::Blocks<sizeof(T)>::give(p);
  }
  template <typename U>
  bool operator==(const RecyclingAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace tt
