// comm/topology: the machine's NUMA nodes as sysfs describes them, which of them are high-bandwidth memory (HBM on a
// Xeon Max or MCDRAM on a KNL in flat mode), and which HBW node each CPU should use. The collectives put their
// buffers there (comm/shm.h); a root directory argument lets tests read fixture trees.
//
//   TT_ASSIGN_OR_RETURN(Topology t, read_topology("/"));
//   TT_ASSIGN_OR_RETURN(HbwNodes h, find_hbw_nodes(t, env::get("TIERTRAIN_HBW_NODES"), env::get("MEMKIND_HBW_NODES")));
//   int node = nearest_node(t, t.node_of_cpu(cpu), h.nodes);   // -1: no HBW node
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tt::comm {

struct NumaNode {
  int id = -1;
  std::vector<int> cpus;           // empty: a CPU-less node (HBM in flat mode, CXL, ...)
  int64_t mem_bytes = 0;           // MemTotal
  int64_t read_bandwidth = -1;     // MB/s from its nearest initiator (HMAT: access0/initiators), -1 unknown
  std::vector<int> distance;       // SLIT distances to every node, by node index
};

struct Topology {
  std::vector<NumaNode> nodes;  // ascending id
  bool knl = false;             // an Intel Xeon Phi x200 (KNL) or KNM, from /proc/cpuinfo (family 6, model 87 or 133)
  const NumaNode* node(int id) const;
  int node_of_cpu(int cpu) const;  // -1 if no node lists it
};

// Reads root + "/sys/devices/system/node". A machine without it (or without NUMA) is one node with every CPU.
Result<Topology> read_topology(const std::string& root = "/");

// libnuma's node-list syntax: "1-3,5" -> {1, 2, 3, 5}.
Result<std::vector<int>> parse_node_list(const std::string& text);

struct HbwNodes {
  std::vector<int> nodes;  // empty: none found
  std::string source;      // how they were found (or why there are none), for logs and errors
};

// The high-bandwidth nodes, from the first of:
//  1. tiertrain_env (TIERTRAIN_HBW_NODES), then memkind_env (MEMKIND_HBW_NODES): node lists, checked to exist;
//  2. HMAT bandwidths: the nodes whose read bandwidth is at least 1.5x the lowest of the nodes that report one
//     (uniform bandwidth, as on an HBM-only machine, means none is faster: none);
//  3. without HMAT, memkind's rule for KNL and Xeon Max in flat mode: CPU-less nodes with memory, exactly as many
//     as the nodes with CPUs, on a KNL or on a machine with at least two nodes with CPUs (one socket with one
//     CPU-less node may as well be a CXL expander, which is not fast: not assumed);
//  4. none.
Result<HbwNodes> find_hbw_nodes(const Topology& t, const char* tiertrain_env, const char* memkind_env);

// Of `candidates`, the node nearest `from` by SLIT distance (ties: the lower id); -1 if there are none.
int nearest_node(const Topology& t, int from, const std::vector<int>& candidates);

}  // namespace tt::comm
