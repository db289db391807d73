// perf/calibrate: measures a machine for the performance model (perf/profile.h): each kernel call asked for, timed
// on the backend's compute stream with timing events over enough repetitions (inputs random, so that no kernel
// meets zeros it could skip); the pinned and pageable host links in each direction alone at sizes from 4 KiB to
// 256 MiB (fitted to latency + bytes / bandwidth) and both directions at once; the host AdamW by thread count; the
// host's copy bandwidth.
//
//   TT_ASSIGN_OR_RETURN(auto be, create_backend("cuda", {.device_budget = calibration_budget(calls)}));
//   CalibrateOptions o{.kernels = calls, .progress = stderr};
//   TT_ASSIGN_OR_RETURN(Profile p, calibrate(*be, this_machine("cuda", {}), o));
//
// Note [calibrating at sustained clocks]
// A GPU runs a short burst of work at a higher clock than it sustains under a long run of large GEMMs (the power
// limit). Kernels timed for a few milliseconds each from idle then price a step of a wide model faster than it
// runs, and how much faster depends on the mix of work (GPT-2 124M's small GEMMs among its element-wise kernels run
// at a higher clock than GPT d4096's large ones). So each sequence of kernel calls the step runs (Note [kernel
// sequences] in perf/profile.h) is run back to back for heat_seconds before it is timed: it is timed at the clock
// that mix settles at. Single calls, kept for interpolation, are timed from a cold start.
#pragma once

#include <cstdio>
#include <vector>

#include "backend/registry.h"
#include "comm/comm.h"
#include "perf/profile.h"

namespace tt::perf {

constexpr double kDefaultHeatSeconds = 0.2;

struct CalibrateOptions {
  std::vector<KernelCall> kernels;  // calls to measure exactly, one by one
  std::vector<std::vector<KernelCall>> sequences;  // sequences to measure (Note [kernel sequences])
  std::vector<std::vector<int64_t>> host_segments;  // segments' parameter sizes, for the host AdamW
  bool links = true;                // the host links
  bool um = true;                   // Unified Memory's rates (Profile::um_*), where the backend has managed memory
  bool host = true;                 // the host AdamW and memory bandwidth
  double min_seconds = 0.02;        // timed per kernel call: repetitions until at least this long
  int max_reps = 50;
  int64_t max_link_bytes = int64_t(256) << 20;
  // Sequences run untimed this long before they are timed (Note [calibrating at sustained clocks]).
  double heat_seconds = kDefaultHeatSeconds;
  FILE* progress = nullptr;         // a line per stage
};

// This machine as a profile names it (the CPU backend's simulated delays from its options).
MachineId this_machine(const std::string& backend, const BackendOptions& options);
// Device bytes measuring the options' calls and sequences takes at most (one at a time), plus the links' buffers.
int64_t calibration_budget(const CalibrateOptions& options);
// A new profile of the machine the backend runs on.
Result<Profile> calibrate(Backend& be, const MachineId& machine, const CalibrateOptions& options);
// Measures the options' calls and sequences the profile lacks and adds them (a profile extended for a new model's
// shapes), timed as the profile's own were (its heat_seconds).
Status measure_kernels(Backend& be, Profile& profile, const CalibrateOptions& options);
// Profile::um_* on this backend (nothing where it has no managed memory, or where the reservation is refused).
Status measure_um(Backend& be, Profile& profile, const CalibrateOptions& options);
// Note [pricing collectives] (perf/costs.cc): an allreduce over `world`'s ranks through the runs' reducer, measured
// on every rank at once (a collective call: every rank of the world calls it), the slowest rank's times fitted.
Result<LinkRate> measure_allreduce(Backend& be, comm::Communicator& world, const CalibrateOptions& options);

}  // namespace tt::perf
