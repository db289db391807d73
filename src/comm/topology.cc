#include "comm/topology.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/sysfile.h"

namespace tt::comm {
namespace {

bool read_file(const std::string& path, std::string* out) { return read_small_file(path, out); }

}  // namespace

Result<std::vector<int>> parse_node_list(const std::string& text) {
  std::vector<int> out;
  for (size_t from = 0; from <= text.size();) {
    size_t comma = text.find(',', from);
    if (comma == std::string::npos) comma = text.size();
    std::string part = text.substr(from, comma - from);
    from = comma + 1;
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back()))) part.pop_back();
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.front()))) part.erase(part.begin());
    if (part.empty()) continue;
    const size_t dash = part.find('-');
    char* end = nullptr;
    const long a = std::strtol(part.c_str(), &end, 10);
    long b = a;
    bool ok = end != part.c_str() && (dash == std::string::npos ? *end == '\0' : static_cast<size_t>(end - part.c_str()) == dash);
    if (ok && dash != std::string::npos) {
      const char* s = part.c_str() + dash + 1;
      b = std::strtol(s, &end, 10);
      ok = end != s && *end == '\0';
    }
    TT_RETURN_IF(!ok || a < 0 || b < a || b > 4095, kInvalidArgument, "'%s' is not a node list (like \"1-3,5\")",
                 text.c_str());
    for (long x = a; x <= b; ++x) out.push_back(static_cast<int>(x));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

const NumaNode* Topology::node(int id) const {
  for (const NumaNode& n : nodes)
    if (n.id == id) return &n;
  return nullptr;
}

int Topology::node_of_cpu(int cpu) const {
  for (const NumaNode& n : nodes)
    if (std::find(n.cpus.begin(), n.cpus.end(), cpu) != n.cpus.end()) return n.id;
  return -1;
}

Result<Topology> read_topology(const std::string& root) {
  const std::string base = (root == "/" ? std::string() : root) + "/sys/devices/system/node";
  Topology t;
  if (DIR* d = opendir(base.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() < 5 || name.compare(0, 4, "node") != 0 ||
          !std::all_of(name.begin() + 4, name.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
        continue;
      NumaNode n;
      n.id = std::atoi(name.c_str() + 4);
      const std::string dir = base + "/" + name;
      std::string text;
      if (read_file(dir + "/cpulist", &text) && !text.empty()) {
        TT_ASSIGN_OR_RETURN(n.cpus, parse_node_list(text));
      }
      if (read_file(dir + "/meminfo", &text)) {
        const size_t at = text.find("MemTotal:");
        if (at != std::string::npos) n.mem_bytes = std::atoll(text.c_str() + at + 9) * 1024;
      }
      if (read_file(dir + "/access0/initiators/read_bandwidth", &text) && !text.empty())
        n.read_bandwidth = std::atoll(text.c_str());
      if (read_file(dir + "/distance", &text))
        for (long long x : parse_integers(text)) n.distance.push_back(static_cast<int>(x));
      t.nodes.push_back(std::move(n));
    }
    closedir(d);
  }
  std::sort(t.nodes.begin(), t.nodes.end(), [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  {
    std::string cpuinfo;
    if (!read_file((root == "/" ? std::string() : root) + "/proc/cpuinfo", &cpuinfo)) cpuinfo.clear();
    int family = -1, model = -1;
    for (size_t from = 0; from < cpuinfo.size() && (family < 0 || model < 0);) {
      size_t eol = cpuinfo.find('\n', from);
      if (eol == std::string::npos) eol = cpuinfo.size();
      const std::string line = cpuinfo.substr(from, eol - from);
      from = eol + 1;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, colon);
      while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
      if (key == "cpu family") family = std::atoi(line.c_str() + colon + 1);
      if (key == "model") model = std::atoi(line.c_str() + colon + 1);
    }
    t.knl = family == 6 && (model == 87 || model == 133);
  }
  if (t.nodes.empty()) {
    NumaNode n;
    n.id = 0;
    const long cpus = sysconf(_SC_NPROCESSORS_CONF);
    for (long c = 0; c < cpus; ++c) n.cpus.push_back(static_cast<int>(c));
    n.distance = {10};
    t.nodes.push_back(n);
  }
  return t;
}

Result<HbwNodes> find_hbw_nodes(const Topology& t, const char* tiertrain_env, const char* memkind_env) {
  for (const auto& [var, value] : {std::pair{"TIERTRAIN_HBW_NODES", tiertrain_env}, std::pair{"MEMKIND_HBW_NODES", memkind_env}}) {
    if (value == nullptr || *value == '\0') continue;
    auto list = parse_node_list(value);
    TT_RETURN_IF(!list.is_ok(), kInvalidArgument, "%s=%s: %s", var, value, list.status().message().c_str());
    for (int n : list.value())
      TT_RETURN_IF(t.node(n) == nullptr, kInvalidArgument, "%s=%s: this machine has no NUMA node %d", var, value, n);
    return HbwNodes{list.value(), var};
  }
  // HMAT bandwidths, where the firmware gives them.
  int64_t lowest = -1;
  for (const NumaNode& n : t.nodes)
    if (n.read_bandwidth > 0 && n.mem_bytes > 0) lowest = lowest < 0 ? n.read_bandwidth : std::min(lowest, n.read_bandwidth);
  if (lowest > 0) {
    HbwNodes h;
    for (const NumaNode& n : t.nodes)
      if (n.mem_bytes > 0 && n.read_bandwidth > 0 && n.read_bandwidth * 2 >= lowest * 3) h.nodes.push_back(n.id);
    if (!h.nodes.empty()) {
      h.source = "HMAT read bandwidth (>= 1.5x the slowest node's)";
      return h;
    }
    return HbwNodes{{}, "HMAT reports no node faster than the others"};
  }
  // No HMAT: memkind's flat-mode rule.
  std::vector<int> cpuless;
  int with_cpus = 0;
  for (const NumaNode& n : t.nodes) {
    if (!n.cpus.empty()) {
      ++with_cpus;
    } else if (n.mem_bytes > 0) {
      cpuless.push_back(n.id);
    }
  }
  if (!cpuless.empty() && static_cast<int>(cpuless.size()) == with_cpus && (t.knl || with_cpus >= 2))
    return HbwNodes{cpuless, "CPU-less nodes, as many as the nodes with CPUs (KNL or Xeon Max flat mode)"};
  if (!cpuless.empty())
    return HbwNodes{{}, "CPU-less nodes of unknown bandwidth (set TIERTRAIN_HBW_NODES if they are HBM)"};
  return HbwNodes{{}, "no CPU-less or faster node"};
}

int nearest_node(const Topology& t, int from, const std::vector<int>& candidates) {
  const NumaNode* f = t.node(from);
  int best = -1, best_d = 0;
  for (int c : candidates) {
    // Distances are listed by node index; ids are dense on every machine we know of, but look the index up.
    int idx = -1;
    for (size_t i = 0; i < t.nodes.size(); ++i)
      if (t.nodes[i].id == c) idx = static_cast<int>(i);
    const int d = f && idx >= 0 && idx < static_cast<int>(f->distance.size()) ? f->distance[static_cast<size_t>(idx)]
                                                                             : 1 << 20;
    if (best < 0 || d < best_d || (d == best_d && c < best)) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

}  // namespace tt::comm
