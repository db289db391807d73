// core/bf16: bfloat16 as raw 16-bit patterns on the host, with round-to-nearest-even (what CUDA's __float2bfloat16
// does), for conversions and test comparisons.
#pragma once

#include <bit>
#include <cstdint>

namespace tt {

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// IEEE half precision (safetensors' F16) to float, exactly: normals, subnormals, infinities and NaN.
inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));  // inf, NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
  // Subnormal (or zero): man x 2^-24.
  const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

}  // namespace tt
