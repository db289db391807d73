// perf/calibrate: measures a machine for the performance model (perf/profile.h): each kernel call asked for, timed
// on the backend's compute stream with timing events over enough repetitions (inputs random, so that no kernel
// meets zeros it could skip); the pinned and pageable host links in each direction alone at sizes from 4 KiB to
// 256 MiB (fitted to latency + bytes / bandwidth) and both directions at once; the host AdamW by thread count; the
// host's copy bandwidth.
//
//   TT_ASSIGN_OR_RETURN(auto be, create_backend("cuda", {.device_budget = calibration_budget(calls)}));
//   CalibrateOptions o{.kernels = calls, .progress = stderr};
//   TT_ASSIGN_OR_RETURN(Profile p, calibrate(*be, this_machine("cuda", {}), o));
#pragma once

#include <cstdio>
#include <vector>

#include "backend/registry.h"
#include "perf/profile.h"

namespace tt::perf {

struct CalibrateOptions {
  std::vector<KernelCall> kernels;  // calls to measure exactly
  bool links = true;                // the host links
  bool host = true;                 // the host AdamW and memory bandwidth
  double min_seconds = 0.02;        // timed per kernel call: repetitions until at least this long
  int max_reps = 50;
  int64_t max_link_bytes = int64_t(256) << 20;
  FILE* progress = nullptr;         // a line per stage
};

// This machine as a profile names it (the CPU backend's simulated delays from its options).
MachineId this_machine(const std::string& backend, const BackendOptions& options);
// Device bytes measuring these calls takes at most (one call's tensors at a time), plus the links' buffers.
int64_t calibration_budget(const std::vector<KernelCall>& calls, const CalibrateOptions& options);
// A new profile of the machine the backend runs on.
Result<Profile> calibrate(Backend& be, const MachineId& machine, const CalibrateOptions& options);
// Measures the calls the profile lacks and adds them (a profile extended for a new model's shapes).
Status measure_kernels(Backend& be, Profile& profile, const std::vector<KernelCall>& calls,
                       const CalibrateOptions& options);

}  // namespace tt::perf
