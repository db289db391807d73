// core/bf16: Note [master in two halves]: every f32 bit pattern comes back whole from its two halves, the low half
// stays in 16 signed bits, and the high half is the nearest bf16 (ties away from zero), which is round-to-nearest-
// even but on exact ties.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

#include "core/bf16.h"

namespace tt {
namespace {

// Every high half with low bits around each rounding boundary (and the extremes), and a stride over all 2^32
// patterns: each joins back to itself, and the high half is within half a bf16 step.
TEST(MasterInTwoHalves, EveryPatternComesBackWhole) {
  int64_t checked = 0, ties = 0;
  auto check = [&](uint32_t u) {
    const float f = std::bit_cast<float>(u);
    const uint16_t hi = bf16_high(f), lo = bf16_low(f, hi);
    ASSERT_EQ(std::bit_cast<uint32_t>(bf16_join(hi, lo)), u) << std::hex << u;
    // The difference of the patterns is the low half, sign-extended: [-2^15, 2^15).
    const int64_t diff = static_cast<int64_t>(u) - (static_cast<int64_t>(hi) << 16);
    if ((u >> 16) != 0xffffu || (u & 0xffffu) < 0x8000u) {  // (not the last patterns, whose high half wraps to 0)
      ASSERT_GE(diff, -32768) << std::hex << u;
      ASSERT_LT(diff, 32768) << std::hex << u;
    }
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    if (!nan && (u & 0x7fffffffu) < 0x7f7f8000u) {  // finite, and rounds to a finite bf16
      const bool tie = (u & 0xffffu) == 0x8000u;
      ties += tie;
      if (!tie) ASSERT_EQ(hi, float_to_bf16(f)) << std::hex << u;
      else ASSERT_EQ(hi, (u >> 16) + 1) << std::hex << u;  // away from zero, either sign
    }
    ++checked;
  };
  for (uint32_t high = 0; high <= 0xffffu; ++high)
    for (const uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xfffeu, 0xffffu})
      check((high << 16) | low);
  for (uint64_t u = 0; u <= 0xffffffffu; u += 65521) check(static_cast<uint32_t>(u));
  EXPECT_GT(checked, 500000);
  EXPECT_GT(ties, 60000);
}

TEST(MasterInTwoHalves, ExamplesAndEdges) {
  EXPECT_EQ(bf16_high(1.0f), 0x3f80);
  EXPECT_EQ(bf16_low(1.0f, 0x3f80), 0);
  // Ties: half-way from an even high half goes up (nearest-even would stay), from an odd one up too.
  EXPECT_EQ(bf16_high(std::bit_cast<float>(0x3f808000u)), 0x3f81);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);
  EXPECT_EQ(bf16_high(std::bit_cast<float>(0x3f818000u)), 0x3f82);
  EXPECT_EQ(bf16_high(std::bit_cast<float>(0xbf808000u)), 0xbf81);  // negative: away from zero, down
  EXPECT_EQ(static_cast<int16_t>(bf16_low(std::bit_cast<float>(0x3f808000u), 0x3f81)), -32768);
  EXPECT_EQ(static_cast<int16_t>(bf16_low(std::bit_cast<float>(0x3f807fffu), 0x3f80)), 32767);
  // Zeros keep their sign; a carry crosses into the next exponent.
  EXPECT_EQ(bf16_high(-0.0f), 0x8000);
  EXPECT_EQ(bf16_high(std::bit_cast<float>(0x3fffffffu)), 0x4000);
  // Beyond the largest finite bf16: an infinite high half, the master still whole.
  const float big = std::numeric_limits<float>::max();
  EXPECT_EQ(bf16_high(big), 0x7f80);
  EXPECT_EQ(bf16_join(bf16_high(big), bf16_low(big, bf16_high(big))), big);
  // A NaN from arithmetic (its payload in the high half) stays a NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_high(nan))));
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_high(-nan))));
}

}  // namespace
}  // namespace tt
