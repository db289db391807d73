// core/recycling_allocator (Note [recycled blocks]): blocks come back to the thread that frees them, up to its keep,
// whichever thread took them; objects are made and destroyed as with make_shared.
#include "core/recycling_allocator.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace tt {
namespace {

struct Counted {
  static inline int alive = 0;
  int payload[40] = {};
  explicit Counted(int v) {
    payload[0] = v;
    ++alive;
  }
  ~Counted() { --alive; }
};

std::shared_ptr<Counted> make(int v) { return std::allocate_shared<Counted>(RecyclingAllocator<Counted>{}, v); }

TEST(RecyclingAllocator, FreedBlocksAreHandedOutAgainAndObjectsLiveAsWithMakeShared) {
  std::set<const void*> first;
  {
    std::vector<std::shared_ptr<Counted>> window;
    for (int i = 0; i < 64; ++i) window.push_back(make(i));
    EXPECT_EQ(Counted::alive, 64);
    for (int i = 0; i < 64; ++i) {
      EXPECT_EQ(window[static_cast<size_t>(i)]->payload[0], i);
      first.insert(window[static_cast<size_t>(i)].get());
    }
  }
  EXPECT_EQ(Counted::alive, 0);
  // The next window takes the same 64 blocks (this thread kept them).
  std::vector<std::shared_ptr<Counted>> again;
  for (int i = 0; i < 64; ++i) again.push_back(make(i));
  for (const auto& p : again) EXPECT_TRUE(first.count(p.get())) << "a block not recycled";
}

TEST(RecyclingAllocator, BlocksFreedOnAnotherThreadAndPastTheKeepAreFine) {
  std::vector<std::shared_ptr<Counted>> many;
  for (int i = 0; i < 1000; ++i) many.push_back(make(i));  // past the keep of 256 when freed
  std::thread other([moved = std::move(many)]() mutable {
    for (size_t i = 0; i < moved.size(); ++i) EXPECT_EQ(moved[i]->payload[0], static_cast<int>(i));
    moved.clear();  // freed here: 256 kept by this thread, the rest to malloc, all given back when it ends
  });
  other.join();
  EXPECT_EQ(Counted::alive, 0);
  auto p = make(7);
  EXPECT_EQ(p->payload[0], 7);
}

}  // namespace
}  // namespace tt
