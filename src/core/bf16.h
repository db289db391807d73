// core/bf16: bfloat16 as raw 16-bit patterns on the host, with round-to-nearest-even (what CUDA's __float2bfloat16
// does), for conversions and test comparisons; and the f32 master as two 16-bit halves (Note [master in two halves]).
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

// Note [master in two halves]
// With bf16 compute and AdamW on the device, the f32 master is not kept beside the bf16 compute copy (4 + 2 bytes a
// parameter): it is kept as the compute copy itself, its high half, and a 16-bit low half (2 + 2 bytes), which
// together give back every bit of the master. The high half is the master rounded to nearest bf16 with ties away
// from zero (add half an ulp to the bit pattern, keep the top 16 bits); the low half is the signed difference of the
// two bit patterns, which that rounding keeps in [-32768, 32767]. (Ties to even could not be undone: an even high
// half is reached from 65537 patterns.) The compute copy differs from nearest-even only on exact ties; every
// producer of a compute copy rounds this way (the device and host AdamW, uploads), so every plan and optimizer
// placement gives the same bits. A master of NaN or beyond bf16's largest finite value gets an infinite high half
// (its low half still gives the master back).
inline uint16_t bf16_high(float f) { return static_cast<uint16_t>((std::bit_cast<uint32_t>(f) + 0x8000u) >> 16); }
inline uint16_t bf16_low(float f, uint16_t high) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) - (static_cast<uint32_t>(high) << 16));
}
inline float bf16_join(uint16_t high, uint16_t low) {
  const uint32_t lo = static_cast<uint32_t>(static_cast<int32_t>(static_cast<int16_t>(low)));
  return std::bit_cast<float>((static_cast<uint32_t>(high) << 16) + lo);
}

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
