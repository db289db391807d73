// perf/profile: what a machine measured (perf/calibrate.h) and what the performance model prices from it: the time
// of each kernel call measured (op, dtype, sizes), the host links' latency and bandwidth (pinned and pageable, each
// direction alone and both at once), the host AdamW's rate by thread count and the host's memory bandwidth. JSON,
// documented in docs/FORMATS.md; cached per machine under $XDG_CACHE_HOME/tiertrain/.
//
//   TT_ASSIGN_OR_RETURN(Profile p, Profile::load(path));
//   TT_TRY(p.check_machine(this_machine));             // a profile of another machine is refused, naming the field
//   TT_ASSIGN_OR_RETURN(double s, p.kernel_seconds(call));
//
// Note [interpolating kernel times]
// A call measured exactly is priced at its measurement. Any other is priced from the measured calls of the same op
// and dtype: the rate (FLOPs or bytes a second, KernelCall::work) of the (at most) four nearest in log-size
// (the sum over the dims of |log2(1 + a) - log2(1 + b)|), averaged geometrically with weights 1/d^2, divides the
// call's work. GEMM rates change little between neighbouring shapes but not smoothly (tiles, waves), which is why
// calibration measures every shape of the model to be planned and the grid only fills gaps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backend/kernel_call.h"
#include "core/status.h"

namespace tt::perf {

// What makes two machines' measurements interchangeable.
struct MachineId {
  std::string backend;  // "cuda", "cpu"
  std::string device;   // "NVIDIA H200 (sm_90, 139.8 GiB)"; "cpu"
  std::string driver;   // "CUDA driver 13.0"; "" on the CPU
  std::string cpu;      // "AMD EPYC 9654 96-Core Processor x 16 threads"
  std::string sim;      // the CPU backend's simulated delays ("copy 0 us, compute 0 us, host 0 us"), else ""
  // A GPU: attention_impl, a named cudnn_library, the workspace cap, f32_attention and the revision of our attention
  // kernels ("auto, workspace auto, f32 auto, kernels r2"), which the attention times follow; gemm_impl where not
  // the default (", gemm cublaslt").
  std::string attention;
  bool operator==(const MachineId&) const = default;
  // A short stable hash of the fields, for the cache file's name.
  std::string key() const;
};

// A link's time for a copy of n bytes: latency + n / bytes_per_s, fitted to the measured points.
struct LinkRate {
  double latency_s = 0;
  double bytes_per_s = 0;
  std::vector<std::pair<int64_t, double>> points;  // (bytes, seconds) measured
  double seconds(int64_t bytes) const;
  bool valid() const { return bytes_per_s > 0 && latency_s >= 0; }
};

struct KernelTime {
  KernelCall call;
  double seconds = 0;
};

// Note [contention]
// Copies each way and the CPU optimizer's update share the host's memory and the link, so each runs slower while
// another runs (bench/perf/host_opt_gpu.sh; docs/benchmarks/2026-12-01-h200-perf-model/). So the profile holds, for
// each pair of these three kinds of traffic, how much slower one runs while the other runs (calibrate: the one timed
// alone and while the other runs throughout), and the replay (perf/simulator.h) slows each operation by the share of
// its time that each other kind overlaps it. Contention slows moving bytes, not fixed costs: a copy's link latency and
// a host task's start (host_task_seconds) are taken out of both calibration times and out of the share that is slowed.
// Without that, a small copy that is mostly latency (the CPU backend's simulated link: 25 ms, a few kilobytes) was
// slowed as much as a 64 MiB one, and offload-all on the CPU backend was predicted too slow.
enum class Traffic { kH2D, kD2H, kHost };
constexpr int kNumTraffic = 3;
const char* traffic_name(Traffic t);  // "h2d", "d2h", "host"

// Note [kernel sequences]
// A compute operation of a schedule runs a sequence of kernel calls (a block's forward, the LM head's chunks, the
// device AdamW's per-parameter updates). Its time is measured as a sequence, the calls back to back as the step runs
// them, repeated until the GPU has settled (Note [calibrating at sustained clocks] in perf/calibrate.h): the clock a
// power-limited GPU holds depends on the mix of work, and consecutive kernels share the L2 cache, so the sum of the
// calls timed one by one is off, too fast for some models and too slow for others
// (docs/benchmarks/2026-12-01-h200-perf-model/).
// A sequence the profile lacks is priced as the sum of its calls.
struct Profile {
  // 2: host segments measured from a cold cache with the run's thread count (host.adamw_segment_threads);
  // contention (Note [contention]); 3: host.task_seconds, contention measured on the work beyond the fixed costs,
  // machine.attention (cuDNN's attention or ours is timed as the run would use it).
  static constexpr int kVersion = 3;
  MachineId machine;
  std::string created;  // UTC, ISO 8601
  double calibrate_seconds = 0;
  double heat_seconds = 0;  // how GEMMs and attention were timed (Note [calibrating at sustained clocks])
  std::vector<KernelTime> kernels;  // sorted by call, one entry per call
  std::map<std::vector<KernelCall>, double> sequences;  // Note [kernel sequences]
  LinkRate h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable;
  // A small copy to pinned host memory on the compute stream (the trainer's read of each step's losses and norm).
  LinkRate readback;
  // Unified Memory (issue 20): the driver's prefetch of a managed range with data to the host and to the device, and
  // the discard-and-prefetch of a dead range to the device (um_populate: nothing to move) and to the host
  // (um_discard, a release), each timed alone on the d2h (a prefetch to the host) or h2d stream. Not valid (not
  // measured) for a backend without managed memory, or in a profile from before 2026-12-02: the model then refuses
  // plans that move managed pages.
  LinkRate um_to_host, um_to_device, um_populate, um_discard;
  // Pages on the host written by a kernel on the device: the driver migrates them on the device's page faults (what
  // an oversubscribed managed pool costs: Note [oversubscribed Unified Memory] in perf/planner.h).
  LinkRate um_fault_in;
  // Their names in the profile's "um" object.
  std::vector<std::pair<const char*, const LinkRate*>> um_links() const {
    return {{"to_host", &um_to_host}, {"to_device", &um_to_device}, {"populate", &um_populate},
            {"discard", &um_discard}, {"fault_in", &um_fault_in}};
  }
  // Each direction's bandwidth while the other copies too (one large copy each way at once).
  double duplex_h2d_bytes_per_s = 0, duplex_d2h_bytes_per_s = 0;
  std::map<int, double> host_adamw_params_per_s;  // threads -> parameters a second (the CPU optimizer's update)
  // A segment's host AdamW as the CPU optimizer runs it (one parameter tensor after another, with
  // host_segment_threads threads, on the host stream, its state evicted from the caches first: Note [a cold host
  // update] in perf/calibrate.cc), by the sizes of its parameters: the per-tensor overhead makes a block's dozen
  // tensors slower a parameter than one large tensor.
  std::map<std::vector<int64_t>, double> host_segments;
  int host_segment_threads = 1;
  double host_memcpy_bytes_per_s = 0;             // all threads, read + write counted once
  // An empty piece of host-stream work, start to end (a CUDA host function's launch; the CPU backend's simulated
  // host delay): the fixed part of every host update, which other traffic does not slow (Note [contention]).
  double host_task_seconds = 0;
  // Note [pricing collectives] (perf/costs.cc): an allreduce of f32 through the reducer a run uses (exec/
  // grad_reducer.h: host shared memory on the CPU backend, NCCL on GPUs), by the number of ranks, as `tiertrain
  // launch -n N -- tiertrain calibrate` measured it. Optional: without it a mesh's collectives are unpriced.
  std::map<int, LinkRate> allreduce;
  // Note [contention]: slowdown[victim][other] >= 1, the victim's time while the other runs over its time alone.
  double slowdown[kNumTraffic][kNumTraffic] = {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}};

  // Note [interpolating kernel times]; an error when no call of that op and dtype was measured.
  Result<double> kernel_seconds(const KernelCall& call) const;
  bool measured(const KernelCall& call) const;
  // Adds or replaces a measurement (keeps kernels sorted).
  void set_kernel(const KernelCall& call, double seconds);
  // A sequence's measured time, else the sum of its calls' (Note [kernel sequences]); interpolated (optional) counts
  // the calls priced by interpolation.
  Result<double> sequence_seconds(const std::vector<KernelCall>& calls, int* interpolated = nullptr) const;
  // The host AdamW's rate with this many threads (the nearest measured count at or below; the largest if more).
  double host_adamw_rate(int threads) const;
  double contention(Traffic victim, Traffic other) const {
    return slowdown[static_cast<int>(victim)][static_cast<int>(other)];
  }

  // A profile of another machine is refused, naming the field that differs.
  Status check_machine(const MachineId& here) const;

  nlohmann::json to_json() const;
  // Every field checked; an error names it ("profile.kernels[3].seconds: must be > 0").
  static Result<Profile> from_json(const nlohmann::json& j);
  static Result<Profile> load(const std::string& path);
  // Written to path + ".tmp" and renamed.
  Status save(const std::string& path) const;
};

// $XDG_CACHE_HOME/tiertrain/profile-<key>.json ($HOME/.cache when XDG_CACHE_HOME is unset).
std::string default_profile_path(const MachineId& machine);

}  // namespace tt::perf
