// memory/host_pool: slabs sized to what is reserved or requested, exact sub-allocation (pinned within 5% of held),
// reuse without new slabs, coalescing, stats, NUMA placement, and the RLIMIT_MEMLOCK error of a refused pin (in a
// child process without CAP_IPC_LOCK, under a low limit).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cpu/cpu_backend.h"
#include "memory/host_pool.h"
#include "memory/numa.h"
#include "memory/stats.h"

namespace tt::memory {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

// Unpinned host memory, optionally placed on a node.
HostPoolOptions plain(int numa_node = -1) {
  HostPoolOptions o;
  o.tier = Tier::kHost;
  o.numa_node = numa_node;
  return o;
}

TEST(HostPool, ReservedSlabServesAllocationsExactly) {
  MemoryStats stats;
  HostPool pool(plain(), &stats);
  ASSERT_TRUE(pool.reserve(10 * kMiB).is_ok());
  std::vector<void*> ps;
  for (size_t mb : {4, 3, 2, 1}) {
    auto p = pool.allocate(mb * kMiB, TensorClass::kActivation, "a");
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    std::memset(p.value(), 1, mb * kMiB);  // the memory is there
    ps.push_back(p.value());
  }
  EXPECT_EQ(pool.slab_count(), 1);
  EXPECT_EQ(pool.slab_bytes(), 10 * kMiB);
  EXPECT_EQ(pool.in_use(), 10 * kMiB);
  EXPECT_EQ(stats.tier(Tier::kHost).current, static_cast<int64_t>(10 * kMiB));
  EXPECT_EQ(stats.of(Tier::kHost, TensorClass::kActivation).peak, static_cast<int64_t>(10 * kMiB));
  for (void* p : ps) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHostAlignBytes, 0u);
  for (void* p : ps) pool.free(p);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(stats.tier(Tier::kHost).current, 0);
}

TEST(HostPool, FreedBlocksAreReusedAndCoalesced) {
  HostPool pool(plain(), nullptr);
  ASSERT_TRUE(pool.reserve(8 * kMiB).is_ok());
  auto a = pool.allocate(2 * kMiB, TensorClass::kActivation, "a");
  auto b = pool.allocate(2 * kMiB, TensorClass::kActivation, "b");
  auto c = pool.allocate(4 * kMiB, TensorClass::kActivation, "c");
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  // Free in an order that needs merging with both neighbours, then take the whole slab as one block.
  pool.free(a.value());
  pool.free(c.value());
  pool.free(b.value());
  auto all = pool.allocate(8 * kMiB, TensorClass::kParam, "all");
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(pool.slab_count(), 1);
  pool.free(all.value());
  // Steady state: the same sizes again take no new slab.
  for (int round = 0; round < 3; ++round) {
    auto x = pool.allocate(3 * kMiB, TensorClass::kActivation, "x");
    auto y = pool.allocate(5 * kMiB, TensorClass::kActivation, "y");
    ASSERT_TRUE(x.is_ok() && y.is_ok());
    pool.free(x.value());
    pool.free(y.value());
  }
  EXPECT_EQ(pool.slab_count(), 1);
  EXPECT_EQ(pool.allocation_count(), 4 + 6);
}

TEST(HostPool, GrowsBySlabsOfTheRequestedSizeOnly) {
  HostPool pool(plain(), nullptr);
  ASSERT_TRUE(pool.reserve(1 * kMiB).is_ok());
  auto a = pool.allocate(1 * kMiB, TensorClass::kActivation, "a");
  auto b = pool.allocate(3 * kMiB + 100, TensorClass::kActivation, "b");  // does not fit: a new slab of its size
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(pool.slab_count(), 2);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(pool.slab_bytes(), 1 * kMiB + (3 * kMiB + 100 + page - 1) / page * page);
  EXPECT_GE(static_cast<double>(pool.in_use()), 0.95 * static_cast<double>(pool.slab_bytes()));
  pool.free(a.value());
  pool.free(b.value());
}

TEST(HostPool, PlacesSlabsOnTheNumaNode) {
  HostPoolOptions o = plain(0);
  o.numa_required = true;
  HostPool pool(o, nullptr);
  auto p = pool.allocate(4 * kMiB, TensorClass::kActivation, "a");
  if (!p.is_ok() && p.status().message().find("mbind") != std::string::npos)
    GTEST_SKIP() << "mbind is not permitted or not supported here: " << p.status().message();
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  std::memset(p.value(), 1, 4 * kMiB);
  const int node = node_of_address(p.value());
  if (node < 0) GTEST_SKIP() << "get_mempolicy does not report page nodes here";
  EXPECT_EQ(node, 0);
  EXPECT_NE(pool.describe().find("NUMA node 0"), std::string::npos) << pool.describe();
  pool.free(p.value());
}

TEST(HostPool, RejectsAMissingNumaNode) {
  const int missing = numa_node_count() + 7;
  auto be = cpu::create_backend({.device_budget = int64_t(64) << 20, .host_numa_node = missing});
  ASSERT_FALSE(be.is_ok());
  EXPECT_NE(be.status().message().find("does not exist"), std::string::npos) << be.status().to_string();
}

// Drops CAP_IPC_LOCK (with which root ignores RLIMIT_MEMLOCK) from this process.
bool drop_ipc_lock() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  const unsigned bit = 1u << CAP_IPC_LOCK;
  data[0].effective &= ~bit;
  data[0].permitted &= ~bit;
  data[0].inheritable &= ~bit;
  return syscall(SYS_capset, &hdr, data) == 0;
}

TEST(HostPool, RefusedPinNamesRlimitMemlock) {
  // In a child: the limit and the capability change are the child's alone.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit r{1 * kMiB, 1 * kMiB};
    if (!drop_ipc_lock() || setrlimit(RLIMIT_MEMLOCK, &r) != 0) _exit(2);
    auto be = cpu::create_backend({.device_budget = int64_t(64) << 20, .lock_host_memory = true});
    if (!be.is_ok()) _exit(3);
    // Within the limit: pinned.
    if (!be.value()->host_pool().reserve(256 << 10).is_ok()) _exit(4);
    // Beyond it: refused, with the limit named.
    auto p = be.value()->allocate_host(8 * kMiB, TensorClass::kActivation, "big");
    if (p.is_ok()) _exit(5);
    const std::string msg = p.status().to_string();
    const bool ok = msg.find("RLIMIT_MEMLOCK") != std::string::npos && msg.find("ulimit -l") != std::string::npos &&
                    msg.find("1.00 MiB") != std::string::npos && msg.find("big") != std::string::npos;
    if (!ok) fprintf(stderr, "message: %s\n", msg.c_str());
    _exit(ok ? 0 : 6);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "cannot drop CAP_IPC_LOCK or lower RLIMIT_MEMLOCK here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child failed at step " << WEXITSTATUS(status);
}

}  // namespace
}  // namespace tt::memory
