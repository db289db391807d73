// memory/device_pool: the budgeted arena over a host region. 256-byte alignment, best fit, splitting and coalescing
// (every free order returns the arena to one block), the budget as an exact cap, the out-of-memory message, the
// MemoryStats it reports, and the abort on freeing a pointer it does not own.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/units.h"
#include "memory/device_pool.h"
#include "memory/stats.h"
#include "backend/cpu/cpu_stream.h"
#include "test_util.h"

namespace tt::memory {
namespace {

constexpr size_t kKiB = 1024;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

#define EXPECT_CONTAINS(s, part) EXPECT_TRUE(contains((s), (part))) << "'" << (s) << "' lacks '" << (part) << "'"

// A host region standing in for device memory, with a DevicePool and MemoryStats over it.
class PoolTest : public ::testing::Test {
 protected:
  // Once per test: the stats start at zero.
  void make_pool(size_t budget) {
    ASSERT_EQ(pool_, nullptr);
    // 4096-aligned, so that offsets and absolute addresses are both multiples of 256.
    region_ = static_cast<char*>(std::aligned_alloc(4096, std::max<size_t>(budget, 4096) / 4096 * 4096 + 4096));
    ASSERT_NE(region_, nullptr);
    pool_ = std::make_unique<DevicePool>(region_, budget, Device{}, &stats_);
  }
  void TearDown() override {
    pool_.reset();
    std::free(region_);
  }

  void* alloc(size_t bytes, TensorClass cls = TensorClass::kWorkspace, const std::string& tag = "t") {
    Result<void*> r = pool_->allocate_bytes(bytes, cls, tag);
    EXPECT_TRUE(r.is_ok()) << "allocating " << bytes << ": " << r.status().to_string();
    return r.is_ok() ? r.value() : nullptr;
  }
  size_t offset_of(const void* p) const { return static_cast<size_t>(static_cast<const char*>(p) - region_); }

  char* region_ = nullptr;
  MemoryStats stats_;
  std::unique_ptr<DevicePool> pool_;
};

TEST(DeviceAllocSize, RoundsUpTo256) {
  EXPECT_EQ(kDeviceAlignBytes, 256u);
  EXPECT_EQ(device_alloc_size(0), 0u);
  EXPECT_EQ(device_alloc_size(1), 256u);
  EXPECT_EQ(device_alloc_size(255), 256u);
  EXPECT_EQ(device_alloc_size(256), 256u);
  EXPECT_EQ(device_alloc_size(257), 512u);
  EXPECT_EQ(device_alloc_size(1000), 1024u);
}

TEST_F(PoolTest, BudgetIsRoundedDownToTheAlignment) {
  make_pool(1000);
  EXPECT_EQ(pool_->budget(), 768u);
  EXPECT_EQ(pool_->largest_free_block(), 768u);
  EXPECT_EQ(pool_->in_use(), 0u);
  EXPECT_EQ(pool_->device(), Device{});
}

TEST_F(PoolTest, EveryBlockIs256Aligned) {
  make_pool(64 * kKiB);
  size_t want_in_use = 0;
  std::vector<void*> ptrs;
  for (size_t bytes : {1u, 100u, 255u, 256u, 257u, 1000u, 3u, 4097u}) {
    void* p = alloc(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(offset_of(p) % 256, 0u) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u) << bytes;
    std::memset(p, 0xab, bytes);  // the whole request is usable
    want_in_use += device_alloc_size(bytes);
    ptrs.push_back(p);
  }
  EXPECT_EQ(pool_->in_use(), want_in_use);
  // Distinct, non-overlapping blocks.
  std::vector<size_t> offs;
  for (void* p : ptrs) offs.push_back(offset_of(p));
  std::sort(offs.begin(), offs.end());
  EXPECT_EQ(std::adjacent_find(offs.begin(), offs.end()), offs.end());
}

TEST_F(PoolTest, ZeroByteRequestTakesOneGranule) {
  make_pool(4 * kKiB);
  void* a = alloc(0);
  void* b = alloc(0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(pool_->in_use(), 512u);
}

TEST_F(PoolTest, AllocateTensorDescribesTheBlock) {
  make_pool(64 * kKiB);
  Result<Tensor> r = pool_->allocate(Shape{4, 8}, DType::kF32, TensorClass::kParam, "wte");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Tensor& t = r.value();
  EXPECT_EQ(t.shape(), (Shape{4, 8}));
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.tensor_class(), TensorClass::kParam);
  EXPECT_EQ(t.device(), Device{});
  EXPECT_EQ(t.nbytes(), 128u);
  EXPECT_GE(static_cast<char*>(t.raw()), region_);
  EXPECT_LE(static_cast<char*>(t.raw()) + t.nbytes(), region_ + pool_->budget());
  EXPECT_EQ(pool_->in_use(), 256u);
  for (int i = 0; i < 32; ++i) t.data<float>()[i] = static_cast<float>(i);
  EXPECT_EQ(t.data<float>()[31], 31.0f);
  pool_->free(t);
  EXPECT_EQ(pool_->in_use(), 0u);
}

TEST_F(PoolTest, BestFitPicksTheSmallestBlockThatFits) {
  make_pool(16 * kKiB);
  // [a1 1K][s1][a2 4K][s2][a3 2K][s3][tail 8.25K free]
  void* a1 = alloc(1 * kKiB);
  void* s1 = alloc(256);
  void* a2 = alloc(4 * kKiB);
  void* s2 = alloc(256);
  void* a3 = alloc(2 * kKiB);
  void* s3 = alloc(256);
  ASSERT_TRUE(a1 && s1 && a2 && s2 && a3 && s3);
  pool_->free(a1);
  pool_->free(a2);
  pool_->free(a3);
  // Holes of 1K, 4K, 2K and the tail; the separators keep them apart.
  EXPECT_EQ(pool_->largest_free_block(), 16 * kKiB - 7 * kKiB - 768);

  EXPECT_EQ(alloc(2 * kKiB), a3);   // exact fit
  EXPECT_EQ(alloc(768), a1);        // 1K is the smallest hole >= 768
  EXPECT_EQ(alloc(3 * kKiB), a2);   // only the 4K hole (of the holes) fits; split, remainder 1K
  void* rest = alloc(1 * kKiB);     // the 1K remainder of the 4K hole beats the tail
  EXPECT_EQ(offset_of(rest), offset_of(a2) + 3 * kKiB);
  void* tail = alloc(256);          // the 256 B remainder of the 1K hole
  EXPECT_EQ(offset_of(tail), offset_of(a1) + 768);
}

TEST_F(PoolTest, SplitLeavesTheRemainderUsable) {
  make_pool(8 * kKiB);
  void* a = alloc(1 * kKiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(offset_of(a), 0u);
  EXPECT_EQ(pool_->largest_free_block(), 7 * kKiB);
  void* b = alloc(7 * kKiB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(offset_of(b), 1 * kKiB);
  EXPECT_EQ(pool_->largest_free_block(), 0u);
}

// Fills the pool with n blocks of `block` bytes, frees them in `order`, and checks that the arena is one block again.
void fill_and_free(DevicePool& pool, size_t n, size_t block, const std::vector<size_t>& order) {
  std::vector<void*> ptrs;
  for (size_t i = 0; i < n; ++i) {
    Result<void*> r = pool.allocate_bytes(block, TensorClass::kActivation, "blk");
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ptrs.push_back(r.value());
  }
  ASSERT_EQ(pool.in_use(), pool.budget());
  ASSERT_EQ(pool.largest_free_block(), 0u);
  for (size_t i : order) pool.free(ptrs[i]);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(pool.largest_free_block(), pool.budget()) << "free list not coalesced";
  Result<void*> whole = pool.allocate_bytes(pool.budget(), TensorClass::kActivation, "whole");
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  pool.free(whole.value());
  EXPECT_EQ(pool.largest_free_block(), pool.budget());
}

TEST_F(PoolTest, CoalescingInEveryFreeOrder) {
  const size_t n = 8, block = 1 * kKiB;
  make_pool(n * block);
  std::vector<size_t> forward(n);
  std::iota(forward.begin(), forward.end(), 0);
  std::vector<size_t> reverse(forward.rbegin(), forward.rend());
  const std::vector<size_t> odd_even = {1, 3, 5, 7, 0, 2, 4, 6};
  const std::vector<size_t> even_odd = {0, 2, 4, 6, 1, 3, 5, 7};
  const std::vector<size_t> outward = {3, 4, 2, 5, 1, 6, 0, 7};
  const std::vector<size_t> inward = {0, 7, 1, 6, 2, 5, 3, 4};
  for (const auto& order : {forward, reverse, odd_even, even_odd, outward, inward}) {
    SCOPED_TRACE(::testing::PrintToString(order));
    fill_and_free(*pool_, n, block, order);
  }
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<size_t> order = forward;
    std::shuffle(order.begin(), order.end(), rng);
    SCOPED_TRACE(::testing::PrintToString(order));
    fill_and_free(*pool_, n, block, order);
  }
}

TEST_F(PoolTest, CoalescingMergesBothNeighbours) {
  make_pool(4 * kKiB);
  void* a = alloc(1 * kKiB);
  void* b = alloc(1 * kKiB);
  void* c = alloc(1 * kKiB);
  void* d = alloc(1 * kKiB);
  pool_->free(a);
  pool_->free(c);
  EXPECT_EQ(pool_->largest_free_block(), 1 * kKiB);
  pool_->free(b);  // joins a (before) and c (after)
  EXPECT_EQ(pool_->largest_free_block(), 3 * kKiB);
  EXPECT_EQ(alloc(3 * kKiB), a);
  pool_->free(a);
  pool_->free(d);
  EXPECT_EQ(pool_->largest_free_block(), 4 * kKiB);
}

TEST_F(PoolTest, MixedSizesRandomAllocFreeKeepsInvariants) {
  const size_t budget = 256 * kKiB;
  make_pool(budget);
  std::mt19937 rng(99);
  struct Live {
    void* p;
    size_t bytes;
  };
  std::vector<Live> live;
  size_t want_in_use = 0;
  for (int step = 0; step < 2000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const size_t bytes = 1 + rng() % (8 * kKiB);
      Result<void*> r = pool_->allocate_bytes(bytes, TensorClass::kWorkspace, "rand");
      if (!r.is_ok()) {
        EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
        EXPECT_LT(pool_->largest_free_block(), device_alloc_size(bytes));
        continue;
      }
      // The new block overlaps no live block.
      const size_t off = offset_of(r.value()), end = off + device_alloc_size(bytes);
      EXPECT_LE(end, budget);
      for (const Live& l : live) {
        const size_t lo = offset_of(l.p), hi = lo + device_alloc_size(l.bytes);
        ASSERT_TRUE(end <= lo || off >= hi) << "overlap at step " << step;
      }
      live.push_back({r.value(), bytes});
      want_in_use += device_alloc_size(bytes);
    } else {
      const size_t i = rng() % live.size();
      pool_->free(live[i].p);
      want_in_use -= device_alloc_size(live[i].bytes);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_EQ(pool_->in_use(), want_in_use) << "step " << step;
    ASSERT_LE(pool_->largest_free_block(), budget - want_in_use);
  }
  for (const Live& l : live) pool_->free(l.p);
  EXPECT_EQ(pool_->in_use(), 0u);
  EXPECT_EQ(pool_->largest_free_block(), budget);
}

// --- the budget as a hard cap ---------------------------------------------------------------------------------------

TEST_F(PoolTest, ExactBudgetCap) {
  const size_t budget = 64 * kKiB;
  make_pool(budget);
  // Sizes summing exactly to the budget all succeed.
  size_t sum = 0;
  const std::vector<size_t> sizes = {32 * kKiB, 16 * kKiB, 8 * kKiB, 4 * kKiB, 2 * kKiB, 1 * kKiB, 512, 256, 256};
  for (size_t bytes : sizes) {
    ASSERT_NE(alloc(bytes), nullptr);
    sum += bytes;
  }
  ASSERT_EQ(sum, budget);
  EXPECT_EQ(pool_->in_use(), budget);
  EXPECT_EQ(pool_->largest_free_block(), 0u);
  // One byte more fails.
  Result<void*> more = pool_->allocate_bytes(1, TensorClass::kWorkspace, "one more byte");
  EXPECT_EQ(more.status().code(), StatusCode::kOutOfMemory);
}

TEST_F(PoolTest, WholeBudgetFitsOneByteMoreDoesNot) {
  const size_t budget = 64 * kKiB;
  make_pool(budget);
  Result<void*> over = pool_->allocate_bytes(budget + 1, TensorClass::kParam, "over");
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(pool_->in_use(), 0u);
  Result<void*> whole = pool_->allocate_bytes(budget, TensorClass::kParam, "whole");
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  pool_->free(whole.value());

  // budget - 256 then 256 fit; budget - 256 then 257 (which takes 512) does not.
  void* big = alloc(budget - 256);
  ASSERT_NE(big, nullptr);
  Result<void*> too_much = pool_->allocate_bytes(257, TensorClass::kParam, "x");
  EXPECT_EQ(too_much.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(alloc(256), nullptr);
  EXPECT_EQ(pool_->in_use(), budget);
}

TEST_F(PoolTest, ZeroBudgetAllocatesNothing) {
  make_pool(0);
  EXPECT_EQ(pool_->budget(), 0u);
  Result<void*> r = pool_->allocate_bytes(1, TensorClass::kParam, "x");
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
}

TEST_F(PoolTest, OutOfMemoryMessageSaysWhatAndWhichKnob) {
  const size_t budget = 1024 * kKiB;
  make_pool(budget);
  ASSERT_NE(alloc(768 * kKiB, TensorClass::kParam, "wte"), nullptr);
  const int64_t count_before = pool_->allocation_count();
  Result<void*> r = pool_->allocate_bytes(512 * kKiB, TensorClass::kActivation, "h.0.ln1");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  const std::string& m = r.status().message();
  EXPECT_CONTAINS(m, "budget " + format_bytes(static_cast<int64_t>(budget)));         // 1.00 MiB
  EXPECT_CONTAINS(m, "in use " + format_bytes(static_cast<int64_t>(768 * kKiB)));     // 768.00 KiB
  EXPECT_CONTAINS(m, "free (cached) " + format_bytes(static_cast<int64_t>(256 * kKiB)));  // 256.00 KiB
  EXPECT_CONTAINS(m, "allocate " + format_bytes(static_cast<int64_t>(512 * kKiB)));   // the request
  EXPECT_CONTAINS(m, "activation");
  EXPECT_CONTAINS(m, "'h.0.ln1'");
  EXPECT_CONTAINS(m, "--device-budget");
  EXPECT_CONTAINS(m, "TIERTRAIN_DEVICE_BUDGET");
  EXPECT_CONTAINS(m, "cpu:0");
  // A failed request changes nothing.
  EXPECT_EQ(pool_->in_use(), 768 * kKiB);
  EXPECT_EQ(pool_->allocation_count(), count_before);
  EXPECT_EQ(stats_.tier(Tier::kDevice).current, static_cast<int64_t>(768 * kKiB));
  EXPECT_EQ(stats_.of(Tier::kDevice, TensorClass::kActivation).allocations, 0);
}

TEST_F(PoolTest, OutOfMemoryWhenFragmentedNamesTheLargestBlock) {
  make_pool(4 * kKiB);
  void* a = alloc(1 * kKiB);
  void* b = alloc(1 * kKiB);
  void* c = alloc(1 * kKiB);
  void* d = alloc(1 * kKiB);
  ASSERT_TRUE(a && b && c && d);
  pool_->free(a);
  pool_->free(c);
  // 2 KiB free in total, but no 2 KiB block.
  Result<void*> r = pool_->allocate_bytes(2 * kKiB, TensorClass::kGrad, "dwte");
  ASSERT_FALSE(r.is_ok());
  EXPECT_CONTAINS(r.status().message(), "free (cached) 2.00 KiB");
  EXPECT_CONTAINS(r.status().message(), "largest free block 1.00 KiB");
  EXPECT_CONTAINS(r.status().message(), "grad");
}

// --- statistics -----------------------------------------------------------------------------------------------------

TEST_F(PoolTest, StatsPerClassAndTier) {
  make_pool(64 * kKiB);
  void* p = alloc(1 * kKiB, TensorClass::kParam, "w");
  void* g = alloc(2 * kKiB, TensorClass::kGrad, "dw");
  void* a = alloc(300, TensorClass::kActivation, "h");  // takes 512
  ASSERT_TRUE(p && g && a);

  EXPECT_EQ(stats_.of(Tier::kDevice, TensorClass::kParam).current, 1024);
  EXPECT_EQ(stats_.of(Tier::kDevice, TensorClass::kGrad).current, 2048);
  EXPECT_EQ(stats_.of(Tier::kDevice, TensorClass::kActivation).current, 512);
  EXPECT_EQ(stats_.of(Tier::kDevice, TensorClass::kOptimState).current, 0);
  Stat dev = stats_.tier(Tier::kDevice);
  EXPECT_EQ(dev.current, 3584);
  EXPECT_EQ(dev.peak, 3584);
  EXPECT_EQ(dev.allocations, 3);
  EXPECT_EQ(dev.allocated_bytes, 3584);
  EXPECT_EQ(dev.freed_bytes, 0);
  EXPECT_EQ(stats_.tier(Tier::kHost).current, 0);
  EXPECT_EQ(stats_.tier(Tier::kPinnedHost).allocations, 0);

  pool_->free(g);
  Stat grad = stats_.of(Tier::kDevice, TensorClass::kGrad);
  EXPECT_EQ(grad.current, 0);
  EXPECT_EQ(grad.peak, 2048);
  EXPECT_EQ(grad.freed_bytes, 2048);
  dev = stats_.tier(Tier::kDevice);
  EXPECT_EQ(dev.current, 1536);
  EXPECT_EQ(dev.peak, 3584);
  EXPECT_EQ(dev.freed_bytes, 2048);
  EXPECT_EQ(pool_->in_use(), 1536u);
  EXPECT_EQ(pool_->peak_in_use(), 3584u);

  // A new, smaller peak after reset_peaks.
  stats_.reset_peaks();
  EXPECT_EQ(stats_.tier(Tier::kDevice).peak, 1536);
  EXPECT_EQ(stats_.of(Tier::kDevice, TensorClass::kGrad).peak, 0);
  EXPECT_EQ(stats_.of(Tier::kDevice, TensorClass::kParam).peak, 1024);
  void* g2 = alloc(256, TensorClass::kGrad, "dw2");
  EXPECT_EQ(stats_.tier(Tier::kDevice).peak, 1792);
  EXPECT_EQ(stats_.of(Tier::kDevice, TensorClass::kGrad).peak, 256);
  EXPECT_EQ(stats_.of(Tier::kDevice, TensorClass::kGrad).allocations, 2);

  pool_->free(p);
  pool_->free(a);
  pool_->free(g2);
  EXPECT_EQ(stats_.tier(Tier::kDevice).current, 0);
  EXPECT_EQ(stats_.tier(Tier::kDevice).allocated_bytes, stats_.tier(Tier::kDevice).freed_bytes);
}

TEST_F(PoolTest, StatsJson) {
  make_pool(64 * kKiB);
  void* p = alloc(1 * kKiB, TensorClass::kOptimState, "m");
  ASSERT_NE(p, nullptr);
  const nlohmann::json j = stats_.to_json();
  EXPECT_EQ(j["device"]["current"], 1024);
  EXPECT_EQ(j["device"]["classes"]["optim_state"]["current"], 1024);
  EXPECT_EQ(j["device"]["classes"]["param"]["current"], 0);
  EXPECT_EQ(j["host"]["current"], 0);
  EXPECT_TRUE(j.contains("pinned_host"));
  EXPECT_TRUE(j.contains("managed"));
  pool_->free(p);
}

TEST_F(PoolTest, AllocationCountAndPeakInUse) {
  make_pool(16 * kKiB);
  EXPECT_EQ(pool_->allocation_count(), 0);
  void* a = alloc(4 * kKiB);
  void* b = alloc(4 * kKiB);
  EXPECT_EQ(pool_->allocation_count(), 2);
  EXPECT_EQ(pool_->peak_in_use(), 8 * kKiB);
  pool_->free(a);
  pool_->free(b);
  EXPECT_EQ(pool_->allocation_count(), 2);  // counts allocations, not live blocks
  EXPECT_EQ(pool_->peak_in_use(), 8 * kKiB);
  void* c = alloc(2 * kKiB);
  EXPECT_EQ(pool_->allocation_count(), 3);
  EXPECT_EQ(pool_->peak_in_use(), 8 * kKiB);
  EXPECT_FALSE(pool_->allocate_bytes(32 * kKiB, TensorClass::kParam, "x").is_ok());
  EXPECT_EQ(pool_->allocation_count(), 3);  // a failure is not counted
  pool_->free(c);
}

TEST_F(PoolTest, PoolWithoutStatsWorks) {
  char* region = static_cast<char*>(std::aligned_alloc(4096, 8192));
  {
    DevicePool pool(region, 8192, Device{}, nullptr);
    Result<void*> r = pool.allocate_bytes(100, TensorClass::kParam, "x");
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r.value(), region);
    pool.free(r.value());
    EXPECT_EQ(pool.in_use(), 0u);
  }
  std::free(region);
}

TEST_F(PoolTest, FreeNullIsANoOp) {
  make_pool(4 * kKiB);
  void* a = alloc(256);
  pool_->free(nullptr);
  pool_->free(Tensor());
  EXPECT_EQ(pool_->in_use(), 256u);
  pool_->free(a);
}

using PoolDeathTest = PoolTest;

TEST_F(PoolDeathTest, FreeingAnUnknownPointerAborts) {
  make_pool(4 * kKiB);
  void* a = alloc(1 * kKiB);
  ASSERT_NE(a, nullptr);
  EXPECT_DEATH(pool_->free(static_cast<char*>(a) + 256), "did not allocate");  // inside a block, not its start
  int on_stack = 0;
  EXPECT_DEATH(pool_->free(&on_stack), "did not allocate");
}

TEST_F(PoolDeathTest, DoubleFreeAborts) {
  make_pool(4 * kKiB);
  void* a = alloc(1 * kKiB);
  ASSERT_NE(a, nullptr);
  pool_->free(a);
  EXPECT_DEATH(pool_->free(a), "did not allocate");
}

}  // namespace
}  // namespace tt::memory

// Stream-aware blocks: a block used on another stream is not handed out again until that stream's work is done.
namespace tt::memory {
namespace {

TEST(DevicePoolStreams, BlockUsedOnAnotherStreamWaitsForItBeforeReuse) {
  auto be = testing::make_cpu_backend(int64_t(1) << 20, 1);
  DevicePool& pool = be->pool();
  const size_t all = pool.budget() - pool.in_use();
  auto a = pool.allocate_bytes(all, TensorClass::kWorkspace, "a");
  ASSERT_TRUE(a.is_ok());
  // Work on the h2d stream that uses the block and cannot finish until the gate opens.
  auto* h2d = dynamic_cast<cpu::CpuStream*>(&be->h2d_stream());
  ASSERT_NE(h2d, nullptr);
  std::atomic<bool> gate{false}, finished{false};
  h2d->enqueue([&] {
    while (!gate.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    finished = true;
  });
  pool.record_stream(a.value(), be->h2d_stream());
  pool.free(a.value());
  EXPECT_EQ(pool.pending_bytes(), device_alloc_size(all));
  EXPECT_EQ(pool.largest_free_block(), 0u) << "the block must not be free while h2d may still use it";
  // An allocation that needs the block waits for the stream: open the gate from another thread.
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate = true;
  });
  auto b = pool.allocate_bytes(all, TensorClass::kWorkspace, "b");
  EXPECT_TRUE(finished.load()) << "reused before the other stream finished";
  opener.join();
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(b.value(), a.value());
  EXPECT_EQ(pool.pending_bytes(), 0u);
  pool.free(b.value());
  // Without record_stream a free is immediate.
  auto c = pool.allocate_bytes(1000, TensorClass::kWorkspace, "c");
  ASSERT_TRUE(c.is_ok());
  pool.free(c.value());
  EXPECT_EQ(pool.pending_bytes(), 0u);
  EXPECT_EQ(pool.largest_free_block(), pool.budget());
}

TEST(DevicePoolStreams, OutOfMemoryNamesCapacity) {
  std::vector<char> region(4096);
  MemoryStats stats;
  DevicePool pool(region.data(), 4096, Device{}, &stats, /*capacity=*/size_t(80) << 30);
  auto r = pool.allocate_bytes(8192, TensorClass::kActivation, "big");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("device capacity 80.00 GiB"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("free (cached)"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tt::memory
