// core/rng: a small deterministic generator (SplitMix64-seeded xoshiro256**) whose whole state is four words, so
// checkpoints can store it and resumed runs continue bit for bit on every platform.
#pragma once

#include <array>
#include <cstdint>

namespace tt {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);

  uint64_t next_u64();
  // Uniform in [0, n) without modulo bias; n > 0.
  uint64_t uniform_int(uint64_t n);
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  // Standard normal (Box-Muller, both values used).
  double normal();

  using State = std::array<uint64_t, 5>;  // 4 generator words + cached normal (bit pattern, or a marker)
  State state() const;
  void set_state(const State& state);

 private:
  std::array<uint64_t, 4> s_{};
  bool has_cached_normal_ = false;
  double cached_normal_ = 0;
};

}  // namespace tt
