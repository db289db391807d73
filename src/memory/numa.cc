#include "memory/numa.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "core/sysfile.h"

namespace tt::memory {
namespace {
// From linux/mempolicy.h (not included: its presence differs between libcs).
constexpr int kMpolPreferred = 1;
constexpr unsigned long kMpolFNode = 1UL << 0;
constexpr unsigned long kMpolFAddr = 1UL << 1;
constexpr int kMaxNodes = 1024;
constexpr int kBitsPerLong = 8 * static_cast<int>(sizeof(unsigned long));
}  // namespace

bool numa_node_exists(int node) {
  if (node < 0 || node >= kMaxNodes) return false;
  return ::access(("/sys/devices/system/node/node" + std::to_string(node) + "/meminfo").c_str(), R_OK) == 0 ||
         (node == 0 && numa_node_count() == 1);
}

int numa_node_count() {
  // Node numbers may have gaps (node0 and node2): count the directories.
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 4 && name.compare(0, 4, "node") == 0 &&
        name.find_first_not_of("0123456789", 4) == std::string::npos)
      ++n;
  }
  return n > 0 ? n : 1;
}

Status bind_to_node(void* ptr, size_t bytes, int node) {
  TT_RETURN_IF(node < 0 || node >= kMaxNodes, kInvalidArgument, "NUMA node %d is out of range", node);
  unsigned long mask[kMaxNodes / kBitsPerLong] = {};
  mask[node / kBitsPerLong] = 1UL << (node % kBitsPerLong);
  const long rc = syscall(SYS_mbind, ptr, bytes, kMpolPreferred, mask, static_cast<unsigned long>(kMaxNodes), 0UL);
  TT_RETURN_IF(rc != 0, kInternal, "mbind of %zu bytes to NUMA node %d failed: %s", bytes, node,
               std::strerror(errno));
  return Status::ok();
}

const char* mem_policy_name(MemPolicy p) {
  switch (p) {
    case MemPolicy::kBind: return "bind";
    case MemPolicy::kPreferred: return "preferred";
    case MemPolicy::kInterleave: return "interleave";
  }
  return "?";
}

Status set_mem_policy(void* ptr, size_t bytes, MemPolicy policy, const std::vector<int>& nodes) {
  TT_RETURN_IF(nodes.empty(), kInvalidArgument, "memory policy %s over no NUMA node", mem_policy_name(policy));
  unsigned long mask[kMaxNodes / kBitsPerLong] = {};
  for (int node : nodes) {
    TT_RETURN_IF(node < 0 || node >= kMaxNodes, kInvalidArgument, "NUMA node %d is out of range", node);
    mask[node / kBitsPerLong] |= 1UL << (node % kBitsPerLong);
  }
  constexpr int kMpolBind = 2, kMpolInterleave = 3, kMpolPreferredMany = 5;
  long rc = 0;
  if (policy == MemPolicy::kPreferred && nodes.size() > 1) {
    rc = syscall(SYS_mbind, ptr, bytes, kMpolPreferredMany, mask, static_cast<unsigned long>(kMaxNodes), 0UL);
    if (rc == 0) return Status::ok();
    // Kernels before 5.15: prefer the first node only.
    return bind_to_node(ptr, bytes, nodes.front());
  }
  const int mode = policy == MemPolicy::kBind ? kMpolBind : policy == MemPolicy::kInterleave ? kMpolInterleave
                                                                                             : kMpolPreferred;
  rc = syscall(SYS_mbind, ptr, bytes, mode, mask, static_cast<unsigned long>(kMaxNodes), 0UL);
  TT_RETURN_IF(rc != 0, kInternal, "mbind (%s) of %zu bytes failed: %s", mem_policy_name(policy), bytes,
               std::strerror(errno));
  return Status::ok();
}

int node_of_address(void* ptr) {
  int node = -1;
  const long rc = syscall(SYS_get_mempolicy, &node, nullptr, 0UL, ptr, kMpolFNode | kMpolFAddr);
  return rc == 0 ? node : -1;
}

int pci_device_numa_node(const std::string& bus_id) {
  std::string id;
  for (char c : bus_id) id += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string text;
  if (!read_small_file("/sys/bus/pci/devices/" + id + "/numa_node", &text)) return -1;
  const std::vector<long long> v = parse_integers(text);
  return v.empty() ? -1 : static_cast<int>(v[0]);
}

}  // namespace tt::memory
