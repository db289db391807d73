#include "perf/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/env.h"
#include "core/atomic_file.h"

namespace tt::perf {

using nlohmann::json;

std::string MachineId::key() const {
  // FNV-1a over the fields, each ended by a zero byte.
  uint64_t h = 1469598103934665603ull;
  for (const std::string* f : {&backend, &device, &driver, &cpu, &sim, &attention}) {
    for (unsigned char c : *f) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0u) * 1099511628211ull;
  }
  return str_format("%s-%016llx", backend.c_str(), static_cast<unsigned long long>(h));
}

double LinkRate::seconds(int64_t bytes) const {
  return latency_s + static_cast<double>(bytes) / bytes_per_s;
}

bool Profile::measured(const KernelCall& call) const {
  auto it = std::lower_bound(kernels.begin(), kernels.end(), call,
                             [](const KernelTime& k, const KernelCall& c) { return k.call < c; });
  return it != kernels.end() && it->call == call;
}

void Profile::set_kernel(const KernelCall& call, double seconds) {
  auto it = std::lower_bound(kernels.begin(), kernels.end(), call,
                             [](const KernelTime& k, const KernelCall& c) { return k.call < c; });
  if (it != kernels.end() && it->call == call) {
    it->seconds = seconds;
  } else {
    kernels.insert(it, KernelTime{call, seconds});
  }
}

Result<double> Profile::kernel_seconds(const KernelCall& call) const {
  auto it = std::lower_bound(kernels.begin(), kernels.end(), call,
                             [](const KernelTime& k, const KernelCall& c) { return k.call < c; });
  if (it != kernels.end() && it->call == call) return it->seconds;
  // Note [interpolating kernel times].
  struct Near {
    double d, rate;
  };
  std::vector<Near> near;
  for (const KernelTime& k : kernels) {
    if (k.call.op != call.op || k.call.dtype != call.dtype) continue;
    double d = 0;
    for (size_t i = 0; i < call.dims.size(); ++i)
      d += std::abs(std::log2(1.0 + static_cast<double>(call.dims[i])) -
                    std::log2(1.0 + static_cast<double>(k.call.dims[i])));
    near.push_back({d, k.call.work() / k.seconds});
  }
  TT_RETURN_IF(near.empty(), kNotFound, "the profile has no measurement of %s in %s", kernel_op_name(call.op),
               dtype_name(call.dtype));
  const size_t k = std::min<size_t>(4, near.size());
  std::partial_sort(near.begin(), near.begin() + static_cast<std::ptrdiff_t>(k), near.end(),
                    [](const Near& a, const Near& b) { return a.d < b.d; });
  double wsum = 0, lsum = 0;
  for (size_t i = 0; i < k; ++i) {
    const double w = 1.0 / ((near[i].d + 1e-3) * (near[i].d + 1e-3));
    wsum += w;
    lsum += w * std::log(near[i].rate);
  }
  return call.work() / std::exp(lsum / wsum);
}

Result<double> Profile::sequence_seconds(const std::vector<KernelCall>& calls, int* interpolated) const {
  auto it = sequences.find(calls);
  if (it != sequences.end()) return it->second;
  double t = 0;
  for (const KernelCall& c : calls) {
    TT_ASSIGN_OR_RETURN(double s, kernel_seconds(c));
    if (interpolated && !measured(c)) ++*interpolated;
    t += s;
  }
  return t;
}

const char* traffic_name(Traffic t) {
  switch (t) {
    case Traffic::kH2D: return "h2d";
    case Traffic::kD2H: return "d2h";
    case Traffic::kHost: return "host";
  }
  return "?";
}

double Profile::host_adamw_rate(int threads) const {
  if (host_adamw_params_per_s.empty()) return 0;
  auto it = host_adamw_params_per_s.upper_bound(threads);
  if (it == host_adamw_params_per_s.begin()) return it->second;
  return std::prev(it)->second;
}

Status Profile::check_machine(const MachineId& here) const {
  const std::pair<const char*, std::pair<const std::string*, const std::string*>> fields[] = {
      {"backend", {&machine.backend, &here.backend}}, {"device", {&machine.device, &here.device}},
      {"driver", {&machine.driver, &here.driver}},    {"cpu", {&machine.cpu, &here.cpu}},
      {"sim", {&machine.sim, &here.sim}},             {"attention", {&machine.attention, &here.attention}}};
  for (const auto& [name, v] : fields)
    TT_RETURN_IF(*v.first != *v.second, kFailedPrecondition,
                 "the profile is of another machine: its machine.%s is '%s', this machine's is '%s' (run `tiertrain "
                 "calibrate`, or give a profile of this machine with --profile)",
                 name, v.first->c_str(), v.second->c_str());
  return Status::ok();
}

namespace {

json link_json(const LinkRate& l) {
  json pts = json::array();
  for (const auto& [b, s] : l.points) pts.push_back({b, s});
  return {{"latency_s", l.latency_s}, {"bytes_per_s", l.bytes_per_s}, {"points", pts}};
}

// Reads fields of a JSON object, every error naming the field's path.
class Reader {
 public:
  Reader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}
  Status object() const {
    TT_RETURN_IF(!j_.is_object(), kDataLoss, "%s: must be an object", path_.c_str());
    return Status::ok();
  }
  Result<Reader> sub(const char* key) const {
    TT_RETURN_IF(!j_.contains(key), kDataLoss, "%s.%s: missing", path_.c_str(), key);
    return Reader(j_.at(key), path_ + "." + key);
  }
  Result<std::string> str(const char* key) const {
    TT_RETURN_IF(!j_.contains(key) || !j_.at(key).is_string(), kDataLoss, "%s.%s: must be a string",
                 path_.c_str(), key);
    return j_.at(key).get<std::string>();
  }
  // A finite number >= lo (strictly greater with strict).
  Result<double> num(const char* key, double lo = 0, bool strict = false) const {
    TT_RETURN_IF(!j_.contains(key) || !j_.at(key).is_number(), kDataLoss, "%s.%s: must be a number",
                 path_.c_str(), key);
    const double v = j_.at(key).get<double>();
    TT_RETURN_IF(!std::isfinite(v) || v < lo || (strict && v == lo), kDataLoss, "%s.%s: %g must be %s %g",
                 path_.c_str(), key, v, strict ? ">" : ">=", lo);
    return v;
  }
  const json& raw() const { return j_; }
  const std::string& path() const { return path_; }

 private:
  const json& j_;
  std::string path_;
};

json call_json(const KernelCall& c) {
  return {{"op", kernel_op_name(c.op)}, {"dtype", dtype_name(c.dtype)}, {"dims", c.dims}};
}

Result<KernelCall> read_call(const Reader& k) {
  TT_TRY(k.object());
  KernelCall call;
  TT_ASSIGN_OR_RETURN(std::string op, k.str("op"));
  auto kop = parse_kernel_op(op);
  TT_RETURN_IF(!kop.is_ok(), kDataLoss, "%s.op: %s", k.path().c_str(), kop.status().message().c_str());
  call.op = kop.value();
  TT_ASSIGN_OR_RETURN(std::string dt, k.str("dtype"));
  auto dtype = parse_dtype(dt);
  TT_RETURN_IF(!dtype.is_ok(), kDataLoss, "%s.dtype: '%s' is not a dtype", k.path().c_str(), dt.c_str());
  call.dtype = dtype.value();
  TT_ASSIGN_OR_RETURN(Reader dims, k.sub("dims"));
  const json& d = dims.raw();
  // 4 integers in profiles written before the fifth (attention's key/value heads) existed.
  TT_RETURN_IF(!d.is_array() || (d.size() != 4 && d.size() != call.dims.size()), kDataLoss, "%s: must be %zu integers",
               dims.path().c_str(), call.dims.size());
  for (size_t a = 0; a < d.size(); ++a) {
    TT_RETURN_IF(!d[a].is_number_integer() || d[a].get<int64_t>() < 0, kDataLoss,
                 "%s[%zu]: must be an integer >= 0", dims.path().c_str(), a);
    call.dims[a] = d[a].get<int64_t>();
  }
  TT_RETURN_IF(call.work() <= 0, kDataLoss, "%s.dims: %s does no work", k.path().c_str(), call.describe().c_str());
  return call;
}

Result<LinkRate> read_link(const Reader& links, const char* name) {
  TT_ASSIGN_OR_RETURN(Reader r, links.sub(name));
  TT_TRY(r.object());
  LinkRate l;
  TT_ASSIGN_OR_RETURN(l.latency_s, r.num("latency_s"));
  TT_ASSIGN_OR_RETURN(l.bytes_per_s, r.num("bytes_per_s", 0, true));
  TT_ASSIGN_OR_RETURN(Reader pts, r.sub("points"));
  TT_RETURN_IF(!pts.raw().is_array(), kDataLoss, "%s: must be an array", pts.path().c_str());
  for (size_t i = 0; i < pts.raw().size(); ++i) {
    const json& p = pts.raw()[i];
    TT_RETURN_IF(!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number() ||
                     p[0].get<int64_t>() <= 0 || !(p[1].get<double>() > 0),
                 kDataLoss, "%s[%zu]: must be [bytes > 0, seconds > 0]", pts.path().c_str(), i);
    l.points.emplace_back(p[0].get<int64_t>(), p[1].get<double>());
  }
  return l;
}

}  // namespace

json Profile::to_json() const {
  json ks = json::array();
  for (const KernelTime& k : kernels) {
    json e = call_json(k.call);
    e["seconds"] = k.seconds;
    ks.push_back(e);
  }
  json seqs = json::array();
  for (const auto& [calls, seconds] : sequences) {
    json cs = json::array();
    for (const KernelCall& c : calls) cs.push_back(call_json(c));
    seqs.push_back({{"calls", cs}, {"seconds", seconds}});
  }
  json segs = json::array();
  for (const auto& [sizes, seconds] : host_segments) segs.push_back({{"param_sizes", sizes}, {"seconds", seconds}});
  json adamw = json::object();
  for (const auto& [t, r] : host_adamw_params_per_s) adamw[std::to_string(t)] = r;
  json contention = json::object();
  for (int v = 0; v < kNumTraffic; ++v) {
    json row = json::object();
    for (int o = 0; o < kNumTraffic; ++o)
      if (o != v) row[traffic_name(static_cast<Traffic>(o))] = slowdown[v][o];
    contention[traffic_name(static_cast<Traffic>(v))] = row;
  }
  json um = json::object();  // only what was measured
  for (const auto& [name, l] : um_links())
    if (l->valid()) um[name] = link_json(*l);
  json reduce = json::object();  // by ranks, only what was measured
  for (const auto& [ranks, l] : allreduce) reduce[std::to_string(ranks)] = link_json(l);
  json j = {{"format", "tiertrain-profile"},
          {"version", kVersion},
          {"machine",
           {{"backend", machine.backend},
            {"device", machine.device},
            {"driver", machine.driver},
            {"cpu", machine.cpu},
            {"sim", machine.sim},
            {"attention", machine.attention}}},
          {"created", created},
          {"calibrate_seconds", calibrate_seconds},
          {"heat_seconds", heat_seconds},
          {"kernels", ks},
          {"sequences", seqs},
          {"links",
           {{"h2d_pinned", link_json(h2d_pinned)},
            {"d2h_pinned", link_json(d2h_pinned)},
            {"h2d_pageable", link_json(h2d_pageable)},
            {"d2h_pageable", link_json(d2h_pageable)},
            {"readback", link_json(readback)}}},
          {"um", um},
          {"duplex", {{"h2d_bytes_per_s", duplex_h2d_bytes_per_s}, {"d2h_bytes_per_s", duplex_d2h_bytes_per_s}}},
          {"contention", contention},
          {"host",
           {{"adamw_params_per_s", adamw},
            {"adamw_segments", segs},
            {"adamw_segment_threads", host_segment_threads},
            {"memcpy_bytes_per_s", host_memcpy_bytes_per_s},
            {"task_seconds", host_task_seconds}}}};
  if (!reduce.empty()) j["allreduce"] = reduce;
  return j;
}

Result<Profile> Profile::from_json(const json& j) {
  Reader top(j, "profile");
  TT_TRY(top.object());
  TT_ASSIGN_OR_RETURN(std::string format, top.str("format"));
  TT_RETURN_IF(format != "tiertrain-profile", kDataLoss, "profile.format: '%s', not a tiertrain profile",
               format.c_str());
  TT_ASSIGN_OR_RETURN(double version, top.num("version"));
  TT_RETURN_IF(version != kVersion, kDataLoss,
               "profile.version: %g, this tiertrain reads version %d (recalibrate: tiertrain calibrate)", version,
               kVersion);
  Profile p;
  TT_ASSIGN_OR_RETURN(Reader m, top.sub("machine"));
  TT_TRY(m.object());
  TT_ASSIGN_OR_RETURN(p.machine.backend, m.str("backend"));
  TT_ASSIGN_OR_RETURN(p.machine.device, m.str("device"));
  TT_ASSIGN_OR_RETURN(p.machine.driver, m.str("driver"));
  TT_ASSIGN_OR_RETURN(p.machine.cpu, m.str("cpu"));
  TT_ASSIGN_OR_RETURN(p.machine.sim, m.str("sim"));
  TT_ASSIGN_OR_RETURN(p.machine.attention, m.str("attention"));
  TT_ASSIGN_OR_RETURN(p.created, top.str("created"));
  TT_ASSIGN_OR_RETURN(p.calibrate_seconds, top.num("calibrate_seconds"));
  TT_ASSIGN_OR_RETURN(p.heat_seconds, top.num("heat_seconds"));
  TT_ASSIGN_OR_RETURN(Reader ks, top.sub("kernels"));
  TT_RETURN_IF(!ks.raw().is_array(), kDataLoss, "profile.kernels: must be an array");
  for (size_t i = 0; i < ks.raw().size(); ++i) {
    Reader k(ks.raw()[i], str_format("profile.kernels[%zu]", i));
    KernelTime t;
    TT_ASSIGN_OR_RETURN(t.call, read_call(k));
    TT_ASSIGN_OR_RETURN(t.seconds, k.num("seconds", 0, true));
    TT_RETURN_IF(p.measured(t.call), kDataLoss, "%s: %s is measured twice", k.path().c_str(),
                 t.call.describe().c_str());
    p.set_kernel(t.call, t.seconds);
  }
  TT_ASSIGN_OR_RETURN(Reader seqs, top.sub("sequences"));
  TT_RETURN_IF(!seqs.raw().is_array(), kDataLoss, "profile.sequences: must be an array");
  for (size_t i = 0; i < seqs.raw().size(); ++i) {
    Reader q(seqs.raw()[i], str_format("profile.sequences[%zu]", i));
    TT_TRY(q.object());
    TT_ASSIGN_OR_RETURN(Reader cs, q.sub("calls"));
    TT_RETURN_IF(!cs.raw().is_array() || cs.raw().empty(), kDataLoss, "%s: must be a non-empty array",
                 cs.path().c_str());
    std::vector<KernelCall> calls;
    for (size_t c = 0; c < cs.raw().size(); ++c) {
      TT_ASSIGN_OR_RETURN(KernelCall call, read_call(Reader(cs.raw()[c], str_format("%s[%zu]", cs.path().c_str(), c))));
      calls.push_back(call);
    }
    TT_ASSIGN_OR_RETURN(double seconds, q.num("seconds", 0, true));
    TT_RETURN_IF(p.sequences.count(calls), kDataLoss, "%s: the sequence is measured twice", q.path().c_str());
    p.sequences[calls] = seconds;
  }
  TT_ASSIGN_OR_RETURN(Reader links, top.sub("links"));
  TT_TRY(links.object());
  TT_ASSIGN_OR_RETURN(p.h2d_pinned, read_link(links, "h2d_pinned"));
  TT_ASSIGN_OR_RETURN(p.d2h_pinned, read_link(links, "d2h_pinned"));
  TT_ASSIGN_OR_RETURN(p.h2d_pageable, read_link(links, "h2d_pageable"));
  TT_ASSIGN_OR_RETURN(p.d2h_pageable, read_link(links, "d2h_pageable"));
  TT_ASSIGN_OR_RETURN(p.readback, read_link(links, "readback"));
  if (top.raw().contains("um")) {  // optional: Profile::um_*
    TT_ASSIGN_OR_RETURN(Reader um, top.sub("um"));
    TT_TRY(um.object());
    for (const auto& [key, value] : um.raw().items()) {
      (void)value;
      const std::pair<const char*, LinkRate*> named[] = {{"to_host", &p.um_to_host}, {"to_device", &p.um_to_device},
                                                         {"populate", &p.um_populate}, {"discard", &p.um_discard},
                                                         {"fault_in", &p.um_fault_in}};
      LinkRate* l = nullptr;
      for (const auto& [name, link] : named)
        if (key == name) l = link;
      TT_RETURN_IF(l == nullptr, kDataLoss, "profile.um.%s: unknown (to_host, to_device, populate, discard, fault_in)",
                   key.c_str());
      TT_ASSIGN_OR_RETURN(*l, read_link(um, key.c_str()));
    }
  }
  if (top.raw().contains("allreduce")) {  // optional: Note [pricing collectives]
    TT_ASSIGN_OR_RETURN(Reader reduce, top.sub("allreduce"));
    TT_TRY(reduce.object());
    for (const auto& [key, value] : reduce.raw().items()) {
      (void)value;
      int ranks = 0;
      const bool number = !key.empty() && key.size() < 6 && key.find_first_not_of("0123456789") == std::string::npos &&
                          (ranks = std::stoi(key)) >= 2;
      TT_RETURN_IF(!number, kDataLoss, "profile.allreduce.%s: must be a number of ranks (2 or more)", key.c_str());
      TT_ASSIGN_OR_RETURN(p.allreduce[ranks], read_link(reduce, key.c_str()));
    }
  }
  TT_ASSIGN_OR_RETURN(Reader duplex, top.sub("duplex"));
  TT_TRY(duplex.object());
  TT_ASSIGN_OR_RETURN(p.duplex_h2d_bytes_per_s, duplex.num("h2d_bytes_per_s", 0, true));
  TT_ASSIGN_OR_RETURN(p.duplex_d2h_bytes_per_s, duplex.num("d2h_bytes_per_s", 0, true));
  TT_ASSIGN_OR_RETURN(Reader contention, top.sub("contention"));
  TT_TRY(contention.object());
  for (int v = 0; v < kNumTraffic; ++v) {
    TT_ASSIGN_OR_RETURN(Reader row, contention.sub(traffic_name(static_cast<Traffic>(v))));
    TT_TRY(row.object());
    for (int o = 0; o < kNumTraffic; ++o) {
      if (o == v) continue;
      TT_ASSIGN_OR_RETURN(p.slowdown[v][o], row.num(traffic_name(static_cast<Traffic>(o)), 1));
    }
  }
  TT_ASSIGN_OR_RETURN(Reader host, top.sub("host"));
  TT_TRY(host.object());
  TT_ASSIGN_OR_RETURN(Reader adamw, host.sub("adamw_params_per_s"));
  TT_TRY(adamw.object());
  for (const auto& [t, r] : adamw.raw().items()) {
    char* end = nullptr;
    const long threads = std::strtol(t.c_str(), &end, 10);
    TT_RETURN_IF(end == t.c_str() || *end != '\0' || threads < 1, kDataLoss,
                 "%s: key '%s' must be a thread count >= 1", adamw.path().c_str(), t.c_str());
    TT_RETURN_IF(!r.is_number() || !(r.get<double>() > 0) || !std::isfinite(r.get<double>()), kDataLoss,
                 "%s.%s: must be a number > 0", adamw.path().c_str(), t.c_str());
    p.host_adamw_params_per_s[static_cast<int>(threads)] = r.get<double>();
  }
  TT_ASSIGN_OR_RETURN(p.host_memcpy_bytes_per_s, host.num("memcpy_bytes_per_s", 0, true));
  TT_ASSIGN_OR_RETURN(p.host_task_seconds, host.num("task_seconds", 0));
  TT_ASSIGN_OR_RETURN(double seg_threads, host.num("adamw_segment_threads", 1));
  TT_RETURN_IF(seg_threads != std::floor(seg_threads) || seg_threads > 1e6, kDataLoss,
               "profile.host.adamw_segment_threads: must be a thread count >= 1");
  p.host_segment_threads = static_cast<int>(seg_threads);
  TT_ASSIGN_OR_RETURN(Reader hs, host.sub("adamw_segments"));
  TT_RETURN_IF(!hs.raw().is_array(), kDataLoss, "%s: must be an array", hs.path().c_str());
  for (size_t i = 0; i < hs.raw().size(); ++i) {
    Reader q(hs.raw()[i], str_format("%s[%zu]", hs.path().c_str(), i));
    TT_TRY(q.object());
    TT_ASSIGN_OR_RETURN(Reader sz, q.sub("param_sizes"));
    TT_RETURN_IF(!sz.raw().is_array() || sz.raw().empty(), kDataLoss, "%s: must be a non-empty array",
                 sz.path().c_str());
    std::vector<int64_t> sizes;
    for (const json& v : sz.raw()) {
      TT_RETURN_IF(!v.is_number_integer() || v.get<int64_t>() <= 0, kDataLoss, "%s: sizes must be integers > 0",
                   sz.path().c_str());
      sizes.push_back(v.get<int64_t>());
    }
    TT_ASSIGN_OR_RETURN(double seconds, q.num("seconds", 0, true));
    TT_RETURN_IF(p.host_segments.count(sizes), kDataLoss, "%s: the segment is measured twice", q.path().c_str());
    p.host_segments[sizes] = seconds;
  }
  return p;
}

Result<Profile> Profile::load(const std::string& path) {
  std::error_code ec;
  TT_RETURN_IF(!std::filesystem::is_regular_file(path, ec), kNotFound, "profile %s: not a regular file",
               path.c_str());
  std::ifstream in(path);
  TT_RETURN_IF(!in, kNotFound, "profile %s: cannot open", path.c_str());
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  TT_RETURN_IF(j.is_discarded(), kDataLoss, "profile %s: not valid JSON", path.c_str());
  auto p = from_json(j);
  if (!p.is_ok()) {
    Status s = p.status();
    s.with_context("profile " + path);
    return s;
  }
  return p;
}

Status Profile::save(const std::string& path) const {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  return write_file_atomically(path, to_json().dump(1, ' ', /*ensure_ascii=*/true) + "\n");
}

std::string default_profile_path(const MachineId& machine) {
  std::string base;
  if (const char* x = env::get("XDG_CACHE_HOME"); x && *x) {
    base = x;
  } else if (const char* h = env::get("HOME"); h && *h) {
    base = std::string(h) + "/.cache";
  } else {
    base = "/tmp";
  }
  return base + "/tiertrain/profile-" + machine.key() + ".json";
}

}  // namespace tt::perf
