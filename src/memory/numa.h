// memory/numa: NUMA placement of host memory without needing libnuma: the mbind and get_mempolicy system calls, and
// the node topology from sysfs.
//
//   TT_TRY(memory::bind_to_node(ptr, bytes, 0));   // before the pages are first touched
//   int node = memory::node_of_address(ptr);        // after: where a page really is (-1 if unknown)
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/status.h"

namespace tt::memory {

// Nodes with memory this machine has (from /sys/devices/system/node; 1 when sysfs says nothing).
int numa_node_count();
bool numa_node_exists(int node);
// Sets the memory policy of [ptr, ptr + bytes) to "preferred: node" (pages go there while it has free memory);
// ptr page-aligned. Takes effect for pages not yet touched.
Status bind_to_node(void* ptr, size_t bytes, int node);
// A memory policy over a set of nodes for [ptr, ptr + bytes) (ptr page-aligned), for pages not yet touched:
// bind (only these nodes; allocation fails when they are full), preferred (these first, then any: with several
// nodes MPOL_PREFERRED_MANY, Linux 5.15, else the first of them), interleave (pages round-robin over them).
enum class MemPolicy { kBind, kPreferred, kInterleave };
const char* mem_policy_name(MemPolicy p);
Status set_mem_policy(void* ptr, size_t bytes, MemPolicy policy, const std::vector<int>& nodes);
// The node of the page holding ptr (touching it if needed), or -1 when the kernel does not say.
int node_of_address(void* ptr);
// The NUMA node of a PCI device ("0000:17:00.0", any case), -1 when unknown (single-node machines report -1).
int pci_device_numa_node(const std::string& bus_id);

}  // namespace tt::memory
