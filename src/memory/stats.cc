#include "memory/stats.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace tt::memory {

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kDevice: return "device";
    case Tier::kPinnedHost: return "pinned_host";
    case Tier::kHost: return "host";
    case Tier::kManaged: return "managed";
  }
  return "?";
}

void Stat::add(int64_t bytes) {
  current += bytes;
  peak = std::max(peak, current);
  allocated_bytes += bytes;
  ++allocations;
}

void Stat::sub(int64_t bytes) {
  current -= bytes;
  freed_bytes += bytes;
}

void MemoryStats::on_alloc(Tier tier, TensorClass cls, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  tiers_[static_cast<size_t>(tier)].add(bytes);
  classes_[static_cast<size_t>(tier)][static_cast<size_t>(cls)].add(bytes);
}

void MemoryStats::on_free(Tier tier, TensorClass cls, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  tiers_[static_cast<size_t>(tier)].sub(bytes);
  classes_[static_cast<size_t>(tier)][static_cast<size_t>(cls)].sub(bytes);
}

Stat MemoryStats::tier(Tier t) const {
  std::lock_guard<std::mutex> lock(mu_);
  return tiers_[static_cast<size_t>(t)];
}

Stat MemoryStats::of(Tier t, TensorClass cls) const {
  std::lock_guard<std::mutex> lock(mu_);
  return classes_[static_cast<size_t>(t)][static_cast<size_t>(cls)];
}

void MemoryStats::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : tiers_) t.peak = t.current;
  for (auto& tc : classes_)
    for (auto& c : tc) c.peak = c.current;
}

nlohmann::json MemoryStats::to_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json j = nlohmann::json::object();
  auto stat_json = [](const Stat& s) {
    return nlohmann::json{{"current", s.current}, {"peak", s.peak}, {"allocated_bytes", s.allocated_bytes},
                          {"freed_bytes", s.freed_bytes}, {"allocations", s.allocations}};
  };
  for (int t = 0; t < kNumTiers; ++t) {
    nlohmann::json tj = stat_json(tiers_[static_cast<size_t>(t)]);
    nlohmann::json cj = nlohmann::json::object();
    for (int c = 0; c < kNumTensorClasses; ++c)
      cj[tensor_class_name(static_cast<TensorClass>(c))] = stat_json(classes_[static_cast<size_t>(t)][static_cast<size_t>(c)]);
    tj["classes"] = cj;
    j[tier_name(static_cast<Tier>(t))] = tj;
  }
  return j;
}

}  // namespace tt::memory
