// High-bandwidth memory detection (comm/topology.h) on fixture machines written as sysfs trees: Xeon Max in flat
// mode (quadrant and SNC4, with and without HMAT), KNL in flat mode, no HBM, HBM only, and a CXL expander that must
// not pass for HBM; the node lists of TIERTRAIN_HBW_NODES and MEMKIND_HBW_NODES; the nearest HBW node of each CPU.
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/topology.h"
#include "temp_dir.h"

namespace tt::comm {
namespace {

struct FakeNode {
  std::string cpus;  // cpulist ("" for CPU-less)
  int64_t mem_gib;
  std::vector<int> distance;
  int64_t bandwidth = -1;  // HMAT read_bandwidth (MB/s), -1: none
};

void mkdirs(const std::string& path) {
  std::string cur;
  for (size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/') {
      cur = path.substr(0, i);
      mkdir(cur.c_str(), 0755);
    }
}

// Writes the machine under dir and returns dir (a root for read_topology).
std::string fake_machine(const std::string& dir, const std::vector<FakeNode>& nodes, int cpu_model = 143) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string n = dir + "/sys/devices/system/node/node" + std::to_string(i);
    mkdirs(n);
    std::ofstream(n + "/cpulist") << nodes[i].cpus << "\n";
    std::ofstream(n + "/meminfo") << "Node " << i << " MemTotal:       " << nodes[i].mem_gib * 1024 * 1024 << " kB\n"
                                  << "Node " << i << " MemFree:        1024 kB\n";
    std::string d;
    for (int x : nodes[i].distance) d += std::to_string(x) + " ";
    std::ofstream(n + "/distance") << d << "\n";
    if (nodes[i].bandwidth > 0) {
      mkdirs(n + "/access0/initiators");
      std::ofstream(n + "/access0/initiators/read_bandwidth") << nodes[i].bandwidth << "\n";
    }
  }
  mkdirs(dir + "/proc");
  std::ofstream(dir + "/proc/cpuinfo") << "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: "
                                       << cpu_model << "\n";
  return dir;
}

HbwNodes detect(const std::string& root, const char* tt = nullptr, const char* mk = nullptr) {
  auto t = read_topology(root);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  auto h = find_hbw_nodes(t.value(), tt, mk);
  EXPECT_TRUE(h.is_ok()) << h.status().to_string();
  return h.is_ok() ? h.value() : HbwNodes{};
}

// Two sockets of 56 cores; quadrant mode: one HBM node (64 GiB) per socket, at distance 13 from its socket.
std::vector<FakeNode> xeon_max_quadrant(bool hmat) {
  return {{"0-55", 256, {10, 21, 13, 23}, hmat ? 140000 : -1},
          {"56-111", 256, {21, 10, 23, 13}, hmat ? 140000 : -1},
          {"", 64, {13, 23, 10, 23}, hmat ? 680000 : -1},
          {"", 64, {23, 13, 23, 10}, hmat ? 680000 : -1}};
}

TEST(Topology, XeonMaxFlatQuadrant) {
  testing::TempDir dir;
  for (const bool hmat : {false, true}) {
    SCOPED_TRACE(hmat ? "with HMAT" : "without HMAT");
    const std::string root = fake_machine(dir.file(hmat ? "q-hmat" : "q"), xeon_max_quadrant(hmat));
    const HbwNodes h = detect(root);
    EXPECT_EQ(h.nodes, (std::vector<int>{2, 3})) << h.source;
    auto t = read_topology(root).value();
    ASSERT_EQ(t.nodes.size(), 4u);
    EXPECT_EQ(t.node(2)->mem_bytes, int64_t(64) << 30);
    EXPECT_EQ(nearest_node(t, t.node_of_cpu(0), h.nodes), 2);
    EXPECT_EQ(nearest_node(t, t.node_of_cpu(60), h.nodes), 3);
  }
}

TEST(Topology, XeonMaxFlatSnc4) {
  // Two sockets in SNC4: nodes 0-7 with 14 cores each, 8-15 HBM (16 GiB); a cluster's own HBM at 12, the rest of its
  // socket's at 14, the other socket's at 23.
  std::vector<FakeNode> nodes(16);
  for (int i = 0; i < 16; ++i) {
    nodes[i].mem_gib = i < 8 ? 64 : 16;
    if (i < 8) nodes[i].cpus = std::to_string(i * 14) + "-" + std::to_string(i * 14 + 13);
    for (int j = 0; j < 16; ++j) {
      const int si = (i % 8) / 4, sj = (j % 8) / 4;
      int d = i == j ? 10 : si != sj ? 23 : (i % 8) == (j % 8) ? 12 : 14;
      if (i < 8 && j < 8 && i != j) d = si == sj ? 11 : 21;
      nodes[i].distance.push_back(d);
    }
  }
  testing::TempDir dir;
  const std::string root = fake_machine(dir.file("snc4"), nodes);
  const HbwNodes h = detect(root);
  EXPECT_EQ(h.nodes, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15})) << h.source;
  auto t = read_topology(root).value();
  for (int cluster = 0; cluster < 8; ++cluster)
    EXPECT_EQ(nearest_node(t, t.node_of_cpu(cluster * 14 + 3), h.nodes), 8 + cluster);
}

TEST(Topology, KnlFlat) {
  // One socket: DDR with all CPUs, MCDRAM CPU-less (16 GiB) at SLIT distance 31 (farther than DDR, yet faster).
  testing::TempDir dir;
  const std::string root = fake_machine(dir.file("knl"), {{"0-271", 96, {10, 31}}, {"", 16, {31, 10}}}, 87);
  const HbwNodes h = detect(root);
  EXPECT_EQ(h.nodes, std::vector<int>{1}) << h.source;
  auto t = read_topology(root).value();
  EXPECT_TRUE(t.knl);
  EXPECT_EQ(nearest_node(t, 0, h.nodes), 1);
}

TEST(Topology, NoHbmAndHbmOnlyFindNone) {
  testing::TempDir dir;
  const HbwNodes none = detect(fake_machine(dir.file("ddr"), {{"0-31", 256, {10, 21}}, {"32-63", 256, {21, 10}}}));
  EXPECT_TRUE(none.nodes.empty());
  // Xeon Max in HBM-only mode: the HBM is the memory of the nodes with CPUs; HMAT reports the same bandwidth.
  const HbwNodes only = detect(fake_machine(
      dir.file("hbm-only"), {{"0-55", 64, {10, 21}, 680000}, {"56-111", 64, {21, 10}, 680000}}));
  EXPECT_TRUE(only.nodes.empty()) << only.source;
  EXPECT_NE(only.source.find("no node faster"), std::string::npos) << only.source;
  // But the user may say so.
  const std::string root = dir.file("hbm-only");
  EXPECT_EQ(detect(root, "0-1").nodes, (std::vector<int>{0, 1}));
}

TEST(Topology, CxlExpanderIsNotHbm) {
  // One socket and one CPU-less node, not a KNL: may be a CXL memory expander (slower than DDR). Not assumed fast.
  testing::TempDir dir;
  const HbwNodes h = detect(fake_machine(dir.file("cxl"), {{"0-31", 256, {10, 24}}, {"", 128, {24, 10}}}));
  EXPECT_TRUE(h.nodes.empty());
  EXPECT_NE(h.source.find("TIERTRAIN_HBW_NODES"), std::string::npos) << h.source;
  // With HMAT saying it is slower, also none.
  const HbwNodes slow = detect(fake_machine(dir.file("cxl-hmat"), {{"0-31", 256, {10, 24}, 150000}, {"", 128, {24, 10}, 60000}}));
  EXPECT_EQ(slow.nodes, std::vector<int>{0}) << "DDR is 2.5x the expander: the fast one is node 0";
}

TEST(Topology, NodeListsFromTheEnvironment) {
  testing::TempDir dir;
  const std::string root = fake_machine(dir.file("q"), xeon_max_quadrant(false));
  EXPECT_EQ(detect(root, "3").nodes, std::vector<int>{3});
  EXPECT_EQ(detect(root, nullptr, "2,3").nodes, (std::vector<int>{2, 3}));
  EXPECT_EQ(detect(root, "2", "3").source, "TIERTRAIN_HBW_NODES");  // ours first
  auto t = read_topology(root).value();
  auto bad = find_hbw_nodes(t, "7", nullptr);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("no NUMA node 7"), std::string::npos);
  auto junk = find_hbw_nodes(t, "2-x", nullptr);
  ASSERT_FALSE(junk.is_ok());
  EXPECT_NE(junk.status().message().find("not a node list"), std::string::npos);
  EXPECT_EQ(parse_node_list("1-3,5, 7").value(), (std::vector<int>{1, 2, 3, 5, 7}));
}

TEST(Topology, ThisMachineReads) {
  auto t = read_topology("/");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_GE(t.value().nodes.size(), 1u);
  EXPECT_GE(t.value().node_of_cpu(0), 0);
}

}  // namespace
}  // namespace tt::comm
