// memory/stats: byte counters per memory tier and per tensor class: current, peak, totals and allocation counts,
// in the manner of c10's Stat{current, peak, allocated, freed}. Every pool reports here.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/tensor.h"

namespace tt::memory {

enum class Tier : int { kDevice = 0, kPinnedHost, kHost, kManaged };
constexpr int kNumTiers = 4;
const char* tier_name(Tier tier);

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated_bytes = 0;  // sum over all allocations
  int64_t freed_bytes = 0;
  int64_t allocations = 0;      // number of allocation calls

  void add(int64_t bytes);
  void sub(int64_t bytes);
};

class MemoryStats {
 public:
  void on_alloc(Tier tier, TensorClass cls, int64_t bytes);
  void on_free(Tier tier, TensorClass cls, int64_t bytes);

  Stat tier(Tier t) const;
  Stat of(Tier t, TensorClass cls) const;
  // Peaks restart from the current values (e.g. to measure one step).
  void reset_peaks();

  // {"device": {"current":..., "peak":..., "allocations":..., "classes": {"param": {...}, ...}}, ...}
  nlohmann::json to_json() const;

 private:
  mutable std::mutex mu_;
  std::array<Stat, kNumTiers> tiers_{};
  std::array<std::array<Stat, kNumTensorClasses>, kNumTiers> classes_{};
};

}  // namespace tt::memory
